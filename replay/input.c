/*
 * Replay inputs: a TRACE argument read, its format detected from its first
 * bytes, and turned into an rp_input_t by the matching reader.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conf.h" /* conf_show */
#include "hostalloc.h"
#include "replay.h"
#include "st.h"

const char *rp_format_name(rp_format_t f)
{
    switch (f) {
    case RP_FORMAT_CUCACHE: return "cucache trace";
    case RP_FORMAT_TORCH: return "PyTorch snapshot";
    case RP_FORMAT_RMM: return "RMM log";
    }
    return "?";
}

void rp_note(rp_input_t *in, const char *fmt, ...)
{
    size_t used = strlen(in->notes);
    if (used + 3 >= sizeof in->notes)
        return;
    if (used) {
        memcpy(in->notes + used, "; ", 3);
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(in->notes + used, sizeof in->notes - used, fmt, ap);
    va_end(ap);
}

void rp_input_free(rp_input_t *in)
{
    free(in->name);
    hostalloc_free(in->ev);
    hostalloc_free(in->ref_reserved);
    memset(in, 0, sizeof *in);
}

size_t rp_input_as_preload(rp_input_t *in)
{
    size_t n = 0;
    for (size_t i = 0; i < in->nev; i++) {
        trace_event_t *e = &in->ev[i];
        if (e->api == TRACE_API_IMPORTED && (e->kind == TRACE_ALLOC || e->kind == TRACE_FREE)) {
            e->api = TRACE_API_CUDA_MALLOC;
            n++;
        }
    }
    if (n)
        rp_note(in, "replayed as under cucache-run (--preload): %zu allocations and frees as cudaMalloc and cudaFree",
                n);
    return n;
}

/* The recorded CUCACHE_CONF, assembled from its pieces: which bytes came,
 * and where the text ends (the last piece's end; SIZE_MAX until seen). */
typedef struct conf_asm_s {
    uint8_t have[1024 / 8]; /* a bit per byte of recorded_conf */
    size_t end;
    bool too_long;
} conf_asm_t;

/* A TRACE_CONF piece: up to 24 bytes of text at its offset. */
static void conf_piece(rp_input_t *out, conf_asm_t *a, const trace_event_t *e)
{
    unsigned char piece[24];
    const uint64_t w[3] = {e->stream, e->addr, e->size};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 8; k++)
            piece[i * 8 + k] = (unsigned char)(w[i] >> (8 * k));
    size_t off = e->flags & ~TRACE_CONF_LAST, n = 0;
    while (n < sizeof piece && piece[n])
        n++;
    if (e->flags & TRACE_CONF_LAST)
        a->end = off + n;
    for (size_t k = 0; k < n; k++) {
        size_t at = off + k;
        if (at + 1 >= sizeof out->recorded_conf) {
            a->too_long = true;
            return;
        }
        out->recorded_conf[at] = (char)piece[k];
        a->have[at / 8] |= (uint8_t)(1u << (at % 8));
    }
}

/* The settings count as recorded only when every byte up to the last
 * piece's end came (a trace cut short, or records lost, leave holes). */
static void conf_done(rp_input_t *out, const conf_asm_t *a, bool seen)
{
    if (!seen)
        return;
    bool whole = a->end != SIZE_MAX && !a->too_long;
    for (size_t k = 0; whole && k < a->end; k++)
        whole = (a->have[k / 8] >> (k % 8)) & 1;
    if (whole) {
        out->recorded_settings = true;
        out->recorded_conf[a->end] = '\0';
    } else {
        memset(out->recorded_conf, 0, sizeof out->recorded_conf);
        rp_note(out, "the run's CUCACHE_CONF is not whole in the trace (%s): its settings are not used",
                a->too_long ? "longer than 1023 bytes" : "pieces missing");
    }
}

int rp_input_from_trace(trace_t *t, rp_input_t *out, char *err, size_t errlen)
{
    out->format = RP_FORMAT_CUCACHE;
    out->streams_unknown = t->header.version < 3;
    out->default_counted = t->header.version < 5;
    out->ev = hostalloc_malloc((t->nevents ? t->nevents : 1) * sizeof *out->ev);
    if (!out->ev) {
        snprintf(err, errlen, "out of host memory for %zu events", t->nevents);
        return -1;
    }
    /* what the recorded run was: kept aside, not replayed */
    size_t n = 0;
    conf_asm_t conf = {.end = SIZE_MAX};
    bool conf_seen = false;
    for (size_t i = 0; i < t->nevents; i++) {
        const trace_event_t *e = &t->events[i];
        if (e->kind == TRACE_CONF) {
            conf_piece(out, &conf, e);
            conf_seen = true;
        } else if (e->kind == TRACE_DEVICE) {
            if (e->device >= 0 && e->device < 64 && !out->recorded_total[e->device]) {
                out->recorded_free[e->device] = e->addr;
                out->recorded_total[e->device] = e->size;
            }
        } else {
            if (e->kind == TRACE_ALLOC && (e->flags & TRACE_REC_FALLBACK))
                out->recorded_fallbacks++;
            out->ev[n++] = *e;
        }
    }
    out->nev = n;
    conf_done(out, &conf, conf_seen);
    int maxdev = 0;
    for (size_t i = 0; i < out->nev; i++) {
        if (out->ev[i].device > maxdev)
            maxdev = out->ev[i].device;
        if (out->ev[i].device < -1) {
            snprintf(err, errlen, "event %zu: device %d", i, out->ev[i].device);
            return -1;
        }
    }
    if (maxdev >= 64) {
        snprintf(err, errlen, "device %d: at most 64 devices", maxdev);
        return -1;
    }
    out->ndevices = maxdev + 1;
    if (t->truncated)
        rp_note(out, "cut short at offset %llu (the recording was interrupted): %zu whole records kept",
                (unsigned long long)t->truncated_at, t->nevents);
    if (t->dropped_records)
        rp_note(out, "the recorder lost %llu records", (unsigned long long)t->dropped_records);
    return 0;
}

/* Whether the data starts like an RMM log: a header row naming Thread. */
static bool looks_rmm(const uint8_t *data, size_t len)
{
    size_t i = 0;
    while (i < len && (data[i] == ' ' || data[i] == '\t'))
        i++;
    return len - i >= 7 && strncasecmp((const char *)data + i, "Thread,", 7) == 0;
}

int rp_input_parse(const char *name, const uint8_t *data, size_t len, rp_input_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char why[400] = "";
    int rc;
    if (len >= 8 && memcmp(data, TRACE_MAGIC, 8) == 0) {
        trace_t t;
        out->format = RP_FORMAT_CUCACHE;
        rc = trace_parse(data, len, &t, why, sizeof why);
        if (rc == 0) {
            rc = rp_input_from_trace(&t, out, why, sizeof why);
            trace_free(&t);
        }
    } else if (len >= 2 && data[0] == 0x80) {
        rc = rp_import_torch(data, len, out, why, sizeof why);
    } else if (looks_rmm(data, len)) {
        rc = rp_import_rmm(data, len, out, why, sizeof why);
    } else {
        snprintf(why, sizeof why, "not a trace this tool reads (a cucache trace starts with CUCTRACE, a PyTorch "
                                  "snapshot is a pickle of protocol 2 or later, an RMM log starts with the header "
                                  "Thread,Time,Action,Pointer,Size,Stream)");
        rc = -1;
    }
    if (rc == 0) {
        /* the failures the job saw (a cucache trace records every failed
         * call; only error 2, out of memory, is one) */
        for (size_t i = 0; i < out->nev; i++)
            out->recorded_ooms += rp_failed_for_memory(out, &out->ev[i]);
        out->name = strdup(name);
        if (!out->name) {
            snprintf(why, sizeof why, "out of host memory");
            rc = -1;
        }
    }
    if (rc != 0) {
        const char *fmt = out->format ? rp_format_name(out->format) : NULL;
        char shown[CONF_SHOW_BUF];
        conf_show(shown, name, strlen(name));
        if (fmt)
            snprintf(err, errlen, "%s: %s: %s", shown, fmt, why);
        else
            snprintf(err, errlen, "%s: %s", shown, why);
        rp_input_free(out);
    }
    return rc;
}

bool rp_failed_for_memory(const rp_input_t *in, const trace_event_t *e)
{
    /* cudaErrorMemoryAllocation and CUDA_ERROR_OUT_OF_MEMORY are both 2 */
    return e->kind == TRACE_ALLOC_FAIL && (in->format != RP_FORMAT_CUCACHE || e->addr == 2);
}

int rp_input_load(const char *path, rp_input_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    size_t len = 0;
    int fd = st_open_regular(path, &len, err, errlen);
    if (fd < 0)
        return -1;
    if (len == 0) {
        close(fd);
        char shown[CONF_SHOW_BUF];
        snprintf(err, errlen, "%s: empty file", conf_show(shown, path, strlen(path)));
        return -1;
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        char shown[CONF_SHOW_BUF];
        snprintf(err, errlen, "%s: %s", conf_show(shown, path, strlen(path)), strerror(errno));
        return -1;
    }
    int rc = rp_input_parse(path, map, len, out, err, errlen);
    munmap(map, len);
    return rc;
}
