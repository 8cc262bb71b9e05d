/*
 * snap_write DIR [EVENTS]: writes the fixture's snapshot (snap_fixture.h)
 * as DIR/snapshot.pickle and DIR/snapshot.json with st_write_file, and
 * what the C side knows about it as DIR/facts.json, for check_snapshot.py
 * to hold the files against.  With EVENTS, device 0's trace is that many
 * events (its own, repeated, a microsecond apart): a snapshot of any size.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostalloc.h"

#include "snap_fixture.h"

static int write_buf(const char *path, const st_buf_t *b)
{
    char err[512];
    if (b->failed) {
        fprintf(stderr, "snap_write: %s: out of memory while building it\n", path);
        return -1;
    }
    if (st_write_file(path, b->data, b->len, err, sizeof err) != 0) {
        fprintf(stderr, "snap_write: %s\n", err);
        return -1;
    }
    return 0;
}

static int write_facts(const char *path, const snap_fixture_t *f)
{
    FILE *out = fopen(path, "w");
    if (!out) {
        perror(path);
        return -1;
    }
    fprintf(out, "{\n");
    fprintf(out, "  \"conf_text\": \"%s\",\n", SNAP_CONF_TEXT);
    fprintf(out, "  \"max_split_size\": %zu,\n", f->conf.max_split_size);
    fprintf(out, "  \"roundup_divs\": [");
    for (int i = 0; i < CONF_ROUNDUP_INTERVALS; i++)
        fprintf(out, "%s%u", i ? ", " : "", f->conf.roundup_divs[i]);
    fprintf(out, "],\n");
    fprintf(out, "  \"live_small\": %" PRIuPTR ",\n", f->live_small);
    fprintf(out, "  \"freed_small\": %" PRIuPTR ",\n", f->freed_small);
    fprintf(out, "  \"pending_small\": %" PRIuPTR ",\n", f->pending_small);
    fprintf(out, "  \"live_large\": %" PRIuPTR ",\n", f->live_large);
    fprintf(out, "  \"pool_block\": %" PRIuPTR ",\n", f->pool_block);
    fprintf(out, "  \"pool_id\": %d,\n", f->pool_id);
    fprintf(out, "  \"nsegs0\": %zu,\n", f->layout.nsegs);
    fprintf(out, "  \"ntrace0\": %zu,\n", f->ntrace);
    fprintf(out, "  \"t_before\": %" PRIu64 ",\n", f->t_before);
    fprintf(out, "  \"t_after\": %" PRIu64 ",\n", f->t_after);
    fprintf(out, "  \"oom_size\": %zu,\n", SNAP_OOM_SIZE);
    fprintf(out, "  \"far_device\": %d,\n", SNAP_FAR_DEVICE);
    fprintf(out, "  \"far_address\": %" PRIu64 ",\n", (uint64_t)SNAP_FAR_ADDR);
    fprintf(out, "  \"far_stream\": %" PRIu64 ",\n", (uint64_t)SNAP_FAR_STREAM);
    fprintf(out, "  \"far_free\": %" PRIu64 "\n", (uint64_t)SNAP_FAR_FREE);
    fprintf(out, "}\n");
    return fclose(out) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    char *end = NULL;
    unsigned long long events = argc == 3 ? strtoull(argv[2], &end, 10) : 0;
    if (argc < 2 || argc > 3 || (argc == 3 && (*end || events == 0))) {
        fprintf(stderr, "usage: snap_write DIR [EVENTS]\n");
        return 2;
    }
    char why[512], pickle[4096], json[4096], facts[4096];
    snprintf(pickle, sizeof pickle, "%s/snapshot.pickle", argv[1]);
    snprintf(facts, sizeof facts, "%s/facts.json", argv[1]);
    if (st_json_name(pickle, json, sizeof json) != 0) {
        fprintf(stderr, "snap_write: %s: name too long\n", pickle);
        return 1;
    }

    snap_fixture_t f;
    if (snap_fixture_open(&f, why, sizeof why) != 0) {
        fprintf(stderr, "snap_write: fixture: %s\n", why);
        snap_fixture_close(&f);
        return 1;
    }
    st_trace_ev_t *many = NULL;
    if (events) {
        many = hostalloc_calloc((size_t)events, sizeof *many);
        if (!many || f.ntrace == 0) {
            fprintf(stderr, "snap_write: no room for %llu events\n", events);
            snap_fixture_close(&f);
            return 1;
        }
        for (size_t i = 0; i < events; i++) {
            many[i] = f.trace[i % f.ntrace];
            many[i].time_us = f.t_after + i;
        }
        f.devs[0].trace = many;
        f.devs[0].ntrace = (size_t)events;
        f.ntrace = (size_t)events;
    }
    st_buf_t pk = {0}, js = {0};
    int rc = st_snapshot_pickle(&f.snap, &pk) | st_snapshot_json(&f.snap, &js);
    if (rc == 0)
        rc = write_buf(pickle, &pk) | write_buf(json, &js) | write_facts(facts, &f);
    st_buf_free(&pk);
    st_buf_free(&js);
    hostalloc_free(many);
    snap_fixture_close(&f);
    return rc == 0 ? 0 : 1;
}
