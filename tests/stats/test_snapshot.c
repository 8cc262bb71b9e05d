/*
 * Proves the event ring (order, wraparound, the mapping from core events),
 * the snapshot encoders at the byte level (pickle opcodes for 64-bit
 * values, JSON escaping, growth, failure) on the fixture's real core state,
 * and the file helpers: name templates, JSON names, and whole-file writes
 * that replace atomically, refuse symbolic links, clean up after errors
 * and leave the old file intact when the writer is killed half way.
 * check_snapshot.py checks the same fixture's files against the schema.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "hostalloc.h"
#include "pickle.h" /* replay/: cucache-replay's reader of PyTorch's snapshots */
#include "snap_fixture.h"

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Whether needle (n bytes) occurs in the buffer. */
static bool buf_has(const st_buf_t *b, const void *needle, size_t n)
{
    for (size_t i = 0; b->len >= n && i <= b->len - n; i++)
        if (memcmp(b->data + i, needle, n) == 0)
            return true;
    return false;
}

static bool buf_has_str(const st_buf_t *b, const char *s)
{
    return buf_has(b, s, strlen(s));
}

#define assert_has(b, s)                                                                                               \
    do {                                                                                                               \
        if (!buf_has_str((b), (s)))                                                                                    \
            fail_msg("%s:%d: \"%s\" not in the output", __FILE__, __LINE__, (s));                                      \
    } while (0)

/* The batches of a snapshot pickle, opcode by opcode: the item count of
 * each MARK ... APPENDS or SETITEMS in the order they close (into
 * batch[0 .. *nbatch), at most max), and the containers written with one
 * APPEND or SETITEM.  Knows only the opcodes snapshot.c writes; false on
 * any other. */
static bool pickle_batches(const st_buf_t *b, size_t *batch, size_t max, size_t *nbatch, size_t *singles)
{
    size_t height = 0, marks[16], nmarks = 0;
    *nbatch = *singles = 0;
    for (size_t i = 2; i < b->len;) { /* past PROTO 2 */
        unsigned char op = b->data[i++];
        size_t arg = 0, pops = 0, pushes = 1;
        switch (op) {
        case '.':
            return i == b->len && height == 1;
        case '(':
            if (nmarks == 16)
                return false;
            marks[nmarks++] = height;
            pushes = 0;
            break;
        case '}':
        case ']':
        case 'N':
        case 0x88:
        case 0x89:
            break;
        case 'K':
        case 'h':
            arg = 1;
            break;
        case 'q':
            arg = 1;
            pushes = 0;
            break;
        case 'M':
            arg = 2;
            break;
        case 'J':
        case 'j':
            arg = 4;
            break;
        case 'r':
            arg = 4;
            pushes = 0;
            break;
        case 'G':
            arg = 8;
            break;
        case 0x8a:
            arg = 1 + (i < b->len ? b->data[i] : 0);
            break;
        case 'X':
            if (i + 4 > b->len)
                return false;
            arg = 4 + (size_t)b->data[i] + ((size_t)b->data[i + 1] << 8) + ((size_t)b->data[i + 2] << 16) +
                  ((size_t)b->data[i + 3] << 24);
            break;
        case 0x86:
            pops = 2;
            break;
        case 'a':
            pops = 1;
            pushes = 0;
            ++*singles;
            break;
        case 's':
            pops = 2;
            pushes = 0;
            ++*singles;
            break;
        case 'e':
        case 'u':
            if (nmarks == 0 || *nbatch == max)
                return false;
            pops = height - marks[--nmarks];
            batch[(*nbatch)++] = op == 'u' ? pops / 2 : pops;
            pushes = 0;
            break;
        default:
            return false;
        }
        if (pops > height)
            return false;
        height = height - pops + pushes;
        i += arg;
    }
    return false;
}

static void fixture_open(snap_fixture_t *f)
{
    char why[512];
    if (snap_fixture_open(f, why, sizeof why) != 0) {
        snap_fixture_close(f);
        fail_msg("snap_fixture_open: %s", why);
    }
}

/* A fresh directory for the file tests, removed (with what is in it) by
 * rm_dir. */
static void make_dir(char *dir, size_t len)
{
    const char *base = getenv("TMPDIR");
    snprintf(dir, len, "%s/cucache-test-snapshot-XXXXXX", base && *base ? base : "/tmp");
    assert_non_null(mkdtemp(dir));
}

static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            rm_dir(path);
        else
            unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* The names in dir other than . and .., sorted, joined by spaces. */
static void list_dir(const char *dir, char *out, size_t len)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    assert_true(n >= 0);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        const char *name = names[i]->d_name;
        if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0) {
            size_t at = strlen(out);
            snprintf(out + at, len - at, "%s%s", at ? " " : "", name);
        }
        free(names[i]);
    }
    free(names);
}

/* The file's content, NUL-terminated (hostalloc'ed); its length in *n. */
static char *read_all(const char *path, size_t *n)
{
    FILE *in = fopen(path, "rb");
    if (!in)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    fseek(in, 0, SEEK_END);
    long size = ftell(in);
    fseek(in, 0, SEEK_SET);
    char *data = hostalloc_malloc((size_t)size + 1);
    assert_non_null(data);
    assert_int_equal(fread(data, 1, (size_t)size, in), (size_t)size);
    data[size] = '\0';
    fclose(in);
    *n = (size_t)size;
    return data;
}

static void assert_file_is(const char *path, const void *want, size_t n)
{
    size_t got;
    char *data = read_all(path, &got);
    assert_int_equal(got, n);
    assert_memory_equal(data, want, n);
    hostalloc_free(data);
}

static void write_ok(const char *path, const void *data, size_t len)
{
    char err[512];
    if (st_write_file(path, data, len, err, sizeof err) != 0)
        fail_msg("st_write_file(%s): %s", path, err);
}

/* ------------------------------------------------------------------------
 * The ring
 * ---------------------------------------------------------------------- */

static st_trace_ev_t ev_at(uint64_t i)
{
    return (st_trace_ev_t){.time_us = 1000 + i, .addr = 0x1000 * (i + 1), .size = i, .action = ST_ALLOC};
}

static void test_ring_wraparound(void **state)
{
    (void)state;
    st_ring_t r;
    assert_int_equal(st_ring_init(&r, 4), 0);
    for (uint64_t i = 0; i < 10; i++) {
        st_trace_ev_t e = ev_at(i);
        st_ring_push(&r, &e);
    }
    assert_int_equal(r.pushed, 10);
    st_trace_ev_t *out;
    assert_int_equal(st_ring_copy(&r, &out), 4);
    for (uint64_t i = 0; i < 4; i++) {
        assert_int_equal(out[i].size, 6 + i); /* the last four, oldest first */
        assert_int_equal(out[i].addr, 0x1000 * (7 + i));
        assert_int_equal(out[i].time_us, 1006 + i);
    }
    hostalloc_free(out);

    /* exactly full: the copy starts at slot 0 again */
    for (uint64_t i = 10; i < 12; i++) {
        st_trace_ev_t e = ev_at(i);
        st_ring_push(&r, &e);
    }
    assert_int_equal(st_ring_copy(&r, &out), 4);
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(out[i].size, 8 + i);
    hostalloc_free(out);
    st_ring_fini(&r);
    assert_null(r.ev);
}

static void test_ring_partial(void **state)
{
    (void)state;
    st_ring_t r;
    assert_int_equal(st_ring_init(&r, 8), 0);
    for (uint64_t i = 0; i < 3; i++) {
        st_trace_ev_t e = ev_at(i);
        st_ring_push(&r, &e);
    }
    st_trace_ev_t *out;
    assert_int_equal(st_ring_copy(&r, &out), 3);
    for (uint64_t i = 0; i < 3; i++)
        assert_int_equal(out[i].size, i);
    hostalloc_free(out);
    st_ring_fini(&r);
}

static void test_ring_copy_empty(void **state)
{
    (void)state;
    st_ring_t r;
    st_trace_ev_t *out = (st_trace_ev_t *)&r; /* must be overwritten */
    assert_int_equal(st_ring_init(&r, 16), 0);
    assert_int_equal(st_ring_copy(&r, &out), 0);
    assert_null(out);
    st_ring_fini(&r);

    /* a ring of capacity 0 keeps nothing and copies nothing */
    assert_int_equal(st_ring_init(&r, 0), 0);
    st_trace_ev_t e = ev_at(1);
    st_ring_push(&r, &e);
    out = (st_trace_ev_t *)&r;
    assert_int_equal(st_ring_copy(&r, &out), 0);
    assert_null(out);
    st_ring_fini(&r);
}

static void test_ring_observe_maps_kinds(void **state)
{
    (void)state;
    static const struct {
        core_event_kind_t kind;
        st_action_t action;
    } map[] = {
        {CORE_EV_ALLOC, ST_ALLOC},
        {CORE_EV_FREE_REQUESTED, ST_FREE_REQUESTED},
        {CORE_EV_FREE_COMPLETED, ST_FREE_COMPLETED},
        {CORE_EV_SEGMENT_ALLOC, ST_SEGMENT_ALLOC},
        {CORE_EV_SEGMENT_FREE, ST_SEGMENT_FREE},
        {CORE_EV_OOM, ST_OOM},
    };
    const size_t n = sizeof map / sizeof map[0];
    st_ring_t r;
    assert_int_equal(st_ring_init(&r, n), 0);
    uint64_t before = now_us();
    for (size_t i = 0; i < n; i++) {
        core_event_t e = {
            .kind = map[i].kind,
            .device = 3,
            .pool_id = (int)i,
            .addr = map[i].kind == CORE_EV_OOM ? 0 : (uintptr_t)0xabc000 + i,
            .size = 512 * (i + 1),
            .stream = 40 + i,
        };
        st_ring_observe(&r, &e);
    }
    uint64_t after = now_us();
    st_trace_ev_t *out;
    assert_int_equal(st_ring_copy(&r, &out), n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(out[i].action, map[i].action);
        assert_int_equal(out[i].addr, map[i].kind == CORE_EV_OOM ? 0 : 0xabc000 + i);
        assert_int_equal(out[i].size, 512 * (i + 1));
        assert_int_equal(out[i].stream, 40 + i);
        assert_int_equal(out[i].pool_id, (int32_t)i);
        assert_in_range(out[i].time_us, before, after);
        if (i > 0)
            assert_true(out[i].time_us >= out[i - 1].time_us);
    }
    hostalloc_free(out);
    st_ring_fini(&r);
}

/* The core's own events through the ring, in the order the fixture caused
 * them. */
static void test_ring_on_core(void **state)
{
    (void)state;
    snap_fixture_t f;
    fixture_open(&f);
    static const st_action_t head[] = {ST_SEGMENT_ALLOC, ST_ALLOC, ST_FREE_REQUESTED, ST_FREE_COMPLETED,
                                       ST_SEGMENT_FREE,  ST_OOM,   ST_SEGMENT_ALLOC,  ST_ALLOC};
    assert_true(f.ntrace > sizeof head / sizeof head[0]);
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
        if (f.trace[i].action != head[i])
            fail_msg("event %zu: action %d, expected %d", i, f.trace[i].action, head[i]);
    assert_int_equal(f.trace[0].size, f.trace[4].size); /* the released segment */
    assert_int_equal(f.trace[0].addr, f.trace[4].addr);
    assert_int_equal(f.trace[5].size, SNAP_OOM_SIZE);
    assert_int_equal(f.trace[5].addr, (size_t)1 << 30); /* device_free: the 1 GiB device held nothing then */
    assert_int_equal(f.trace[7].addr, f.live_small);
    assert_int_equal(f.trace[7].stream, 7);
    assert_int_equal(f.trace[f.ntrace - 1].action, ST_SNAPSHOT);
    const st_trace_ev_t *last = &f.trace[f.ntrace - 2]; /* the fenced free */
    assert_int_equal(last->action, ST_FREE_REQUESTED);
    assert_int_equal(last->addr, f.pending_small);
    for (size_t i = 0; i < f.ntrace; i++) {
        assert_in_range(f.trace[i].time_us, f.t_before, f.t_after);
        if (f.trace[i].action == ST_ALLOC && f.trace[i].addr == f.pool_block)
            assert_int_equal(f.trace[i].pool_id, f.pool_id);
    }
    snap_fixture_close(&f);
}

/* ------------------------------------------------------------------------
 * Snapshots
 * ---------------------------------------------------------------------- */

static void test_snapshot_pickle_bytes(void **state)
{
    (void)state;
    snap_fixture_t f;
    fixture_open(&f);
    st_buf_t b = {0};
    assert_int_equal(st_snapshot_pickle(&f.snap, &b), 0);
    assert_false(b.failed);
    /* PROTO 2, EMPTY_DICT MARK ... SETITEMS STOP */
    static const unsigned char head[] = {0x80, 2, '}', '('};
    assert_memory_equal(b.data, head, sizeof head);
    assert_int_equal(b.data[b.len - 2], 'u');
    assert_int_equal(b.data[b.len - 1], '.');

    /* 64-bit unsigned values: LONG1 with a 9th byte keeping them positive */
    static const unsigned char far_addr[] = {0x8a, 9, 0, 0, 0xe0, 0xff, 0xff, 0xff, 0xff, 0xff, 0};
    static const unsigned char far_stream[] = {0x8a, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0};
    assert_true(buf_has(&b, far_addr, sizeof far_addr));
    assert_true(buf_has(&b, far_stream, sizeof far_stream));
    /* the in-process backend's addresses start at 1 << 40: six bytes */
    unsigned char seg0[8] = {0x8a, 6};
    for (int i = 0; i < 6; i++)
        seg0[2 + i] = (unsigned char)(f.layout.segs[0].addr >> (8 * i));
    assert_true(buf_has(&b, seg0, sizeof seg0));
    /* BININT for 64 MiB, BININT1 for small numbers, TUPLE2 for the pool id */
    static const unsigned char msplit[] = {'J', 0, 0, 0, 4};
    assert_true(buf_has(&b, msplit, sizeof msplit));
    const unsigned char pool[] = {'K', 0, 'K', (unsigned char)f.pool_id, 0x86};
    assert_true(buf_has(&b, pool, sizeof pool));
    /* BINUNICODE: 'X', a 4-byte length, the text */
    static const unsigned char state_name[] = "X\x13\0\0\0active_pending_free";
    assert_true(buf_has(&b, state_name, sizeof state_name - 1));
    /* BINFLOAT 0.8, big-endian */
    static const unsigned char gc[] = {'G', 0x3f, 0xe9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a};
    assert_true(buf_has(&b, gc, sizeof gc));
    /* every string once: its later uses are memo references (BINGET),
     * the first ones in the memo's one-byte range */
    static const unsigned char address_key[] = "X\x07\0\0\0address";
    size_t n_address = 0;
    for (size_t i = 0; i + sizeof address_key - 1 <= b.len; i++)
        n_address += memcmp(b.data + i, address_key, sizeof address_key - 1) == 0;
    assert_int_equal(n_address, 1);
    assert_true(buf_has(&b, "X\x13\0\0\0active_pending_freeq", 25));
    /* a list of one item is that item and APPEND; dicts of more than one
     * key are one batch each */
    size_t batch[256], nbatch, singles;
    assert_true(pickle_batches(&b, batch, 256, &nbatch, &singles));
    assert_true(nbatch > 0);
    for (size_t i = 0; i < nbatch; i++)
        assert_in_range(batch[i], 2, 1000);
    st_buf_free(&b);
    assert_null(b.data);
    snap_fixture_close(&f);
}

static void test_snapshot_json_text(void **state)
{
    (void)state;
    snap_fixture_t f;
    fixture_open(&f);
    st_buf_t b = {0};
    assert_int_equal(st_snapshot_json(&f.snap, &b), 0);
    assert_int_equal(b.data[0], '{');
    assert_int_equal(b.data[b.len - 2], '}');
    assert_int_equal(b.data[b.len - 1], '\n');
    char text[256];
    snprintf(text, sizeof text, "\"segment_pool_id\":[0,%d]", f.pool_id);
    assert_has(&b, text);
    snprintf(text, sizeof text, "{\"address\":%lu,", (unsigned long)f.pending_small);
    assert_has(&b, text);
    assert_has(&b, "\"stream\":18446744073709551615");
    assert_has(&b, "\"address\":18446744073707454464");
    assert_has(&b, "\"device_free\":5368709120");
    assert_has(&b, "\"device_free\":1073741824,");
    assert_has(&b, "}],[],[{\"action\":\"segment_alloc\""); /* device 1's empty list between 0 and 2 */
    assert_has(&b, "\"max_split_size\":67108864");
    assert_has(&b, "\"garbage_collection_threshold\":0.8,");
    assert_has(&b, "\"expandable_segments\":false");
    assert_has(&b, "\"is_expandable\":false,\"frames\":[],\"blocks\":[{");
    assert_has(&b, "\"state\":\"active_pending_free\"");
    assert_has(&b, "\"compile_context\":\"N/A\",\"user_metadata\":\"\"}");
    assert_has(&b, "\"external_annotations\":[],\"cucache_yields\":[{\"device\":0,\"given\":2,\"given_bytes\":67108864,"
                   "\"received\":1,\"received_bytes\":20971520},{\"device\":2,\"given\":0,");
    assert_has(&b, "\"CUCACHE_CONF\":\"" SNAP_CONF_TEXT "\"");
    st_buf_free(&b);
    snap_fixture_close(&f);
}

/* Strings as the user wrote them: escaped for JSON, invalid UTF-8 replaced
 * in both formats; and the defaults (unlimited max_split_size: -1). */
static void test_snapshot_strings_and_defaults(void **state)
{
    (void)state;
    const char *conf_text = "a\"b\\c\nd\x01"
                            "e\xff"
                            "f\xc3\xa9";
    st_snapshot_t s = {NULL, 0, NULL, conf_text};
    st_buf_t j = {0}, p = {0};
    assert_int_equal(st_snapshot_json(&s, &j), 0);
    assert_has(&j, "\"CUCACHE_CONF\":\"a\\\"b\\\\c\\nd\\u0001e\xef\xbf\xbd"
                   "f\xc3\xa9\"");
    assert_has(&j, "{\"segments\":[],\"device_traces\":[],");
    assert_has(&j, "\"max_split_size\":-1,");
    assert_has(&j, "\"garbage_collection_threshold\":0.0,");
    assert_has(&j, "\"roundup_power2_divisions\":{\"1\":0,\"2\":0,\"4\":0,");
    assert_has(&j, "\"32768\":0}");

    assert_int_equal(st_snapshot_pickle(&s, &p), 0);
    static const unsigned char str[] = "X\x0f\0\0\0a\"b\\c\nd\x01"
                                       "e\xef\xbf\xbd"
                                       "f\xc3\xa9";
    assert_true(buf_has(&p, str, sizeof str - 1));
    static const unsigned char minus_one[] = {'J', 0xff, 0xff, 0xff, 0xff};
    assert_true(buf_has(&p, minus_one, sizeof minus_one));
    /* empty lists are EMPTY_LIST alone, as Python writes them */
    static const unsigned char empty_lists[] = "X\x08\0\0\0segmentsq\0]X\x0d\0\0\0device_tracesq\x01]";
    assert_true(buf_has(&p, empty_lists, sizeof empty_lists - 1));
    st_buf_free(&j);
    st_buf_free(&p);
}

/* How many times the text s is written as a BINUNICODE string. */
static size_t pickle_str_count(const st_buf_t *b, const char *s)
{
    size_t n = strlen(s), count = 0;
    for (size_t i = 0; i + 5 + n <= b->len; i++)
        count += b->data[i] == 'X' && b->data[i + 1] == n && !b->data[i + 2] && !b->data[i + 3] && !b->data[i + 4] &&
                 memcmp(b->data + i + 5, s, n) == 0;
    return count;
}

/* A segment of one block: its keys are first written inside containers of
 * one item each (the segment list, its block list), written without their
 * MARK; they are still fetched from the memo where they come again. */
static void test_snapshot_memo_after_single_items(void **state)
{
    (void)state;
    core_block_info_t blk = {(uintptr_t)1 << 40, 2 << 20, 1000, CORE_BLOCK_ALLOCATED, 1, 0, 0};
    core_seg_info_t seg = {.addr = (uintptr_t)1 << 40, .size = 2 << 20, .nblocks = 1};
    core_layout_t l = {0, &seg, 1, &blk, 1};
    st_trace_ev_t trace[2] = {{.time_us = 1700000000000000u, .addr = (uintptr_t)1 << 40, .size = 1000},
                              {.time_us = 1700000000000001u, .addr = (uintptr_t)1 << 40, .size = 1000}};
    st_snap_dev_t dev = {.device = 0, .layout = &l, .trace = trace, .ntrace = 2};
    st_snapshot_t s = {&dev, 1, NULL, ""};
    st_buf_t p = {0};
    assert_int_equal(st_snapshot_pickle(&s, &p), 0);
    static const char *const keys[] = {"address", "size", "requested_size", "state", "frames", "stream"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (pickle_str_count(&p, keys[i]) != 1)
            fail_msg("\"%s\" written %zu times", keys[i], pickle_str_count(&p, keys[i]));
    size_t batch[64], nbatch, singles;
    assert_true(pickle_batches(&p, batch, 64, &nbatch, &singles));
    assert_true(singles >= 3); /* segments, blocks, device_traces: one item each */
    st_buf_free(&p);
}

/* Many events: the buffer grows through several reallocations; a device
 * without a layout has traces and no segments.  The pickle's lists go in
 * batches of exactly 1000 items (the last one the rest), as Python's
 * pickler writes them, and cucache-replay's reader gives back every event. */
static void test_snapshot_large(void **state)
{
    (void)state;
    const size_t n = 100500;
    st_trace_ev_t *trace = hostalloc_calloc(n, sizeof *trace);
    assert_non_null(trace);
    for (size_t i = 0; i < n; i++)
        trace[i] = (st_trace_ev_t){
            .time_us = 1700000000000000u + i, .addr = (uintptr_t)1 << 40, .size = i, .action = (uint8_t)(i % 7)};
    st_snap_dev_t dev = {.device = 3, .layout = NULL, .trace = trace, .ntrace = n};
    st_snapshot_t s = {&dev, 1, NULL, ""};
    st_buf_t p = {0}, j = {0};
    assert_int_equal(st_snapshot_pickle(&s, &p), 0);
    assert_int_equal(st_snapshot_json(&s, &j), 0);
    assert_true(p.len > n * 40);
    assert_true(j.len > n * 120);
    assert_true(p.cap >= p.len && j.cap >= j.len);
    assert_int_equal(p.data[p.len - 1], '.');
    assert_has(&j, "\"device_traces\":[[],[],[],[{\"action\":\"alloc\"");
    assert_has(&j, "{\"action\":\"snapshot\",\"addr\":1099511627776,\"size\":99994,");
    assert_has(&j, "{\"action\":\"oom\",\"device_free\":1099511627776,\"size\":99993,");

    size_t nbatch, singles, full = 0, max = 2 * n; /* one per entry's dict, and the lists' */
    size_t *batch = hostalloc_calloc(max, sizeof *batch);
    assert_non_null(batch);
    assert_true(pickle_batches(&p, batch, max, &nbatch, &singles));
    for (size_t i = 0; i < nbatch; i++) {
        assert_in_range(batch[i], 2, 1000);
        full += batch[i] == 1000;
    }
    assert_int_equal(full, n / 1000); /* device 3's list: 100 full batches and one of 500 */
    bool rest = false;
    for (size_t i = 0; i < nbatch; i++)
        rest |= batch[i] == n % 1000;
    assert_true(rest);
    hostalloc_free(batch);

    char err[256];
    pk_doc_t doc;
    if (pk_parse(p.data, p.len, &doc, err, sizeof err) != 0)
        fail_msg("pk_parse: %s", err);
    const pk_val_t *traces = pk_get(doc.root, "device_traces");
    assert_non_null(traces);
    assert_int_equal(traces->n, 4);
    const pk_val_t *t3 = traces->items[3];
    assert_int_equal(t3->n, n);
    static const char *const names[] = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
                                        "oom",   "snapshot"};
    for (size_t i = 0; i < n; i++) {
        const pk_val_t *e = t3->items[i];
        int64_t v;
        assert_true(pk_str_eq(pk_get(e, "action"), names[i % 7]));
        assert_true(pk_int(pk_get(e, "size"), &v) && v == (int64_t)i);
        assert_true(pk_int(pk_get(e, "time_us"), &v) && v == (int64_t)(1700000000000000u + i));
        assert_true(pk_int(pk_get(e, i % 7 == 5 ? "device_free" : "addr"), &v) && v == (int64_t)1 << 40);
        assert_true(pk_str_eq(pk_get(e, "compile_context"), "N/A"));
    }
    pk_free(&doc);
    st_buf_free(&p);
    st_buf_free(&j);
    hostalloc_free(trace);
}

/* A buffer that already failed stays failed, and the writers say so. */
static void test_snapshot_failed_buffer(void **state)
{
    (void)state;
    st_snapshot_t s = {NULL, 0, NULL, ""};
    st_buf_t b = {.failed = true};
    assert_int_equal(st_snapshot_pickle(&s, &b), -1);
    assert_int_equal(b.len, 0);
    assert_int_equal(st_snapshot_json(&s, &b), -1);
    assert_int_equal(b.len, 0);
    st_buf_free(&b);
}

/* ------------------------------------------------------------------------
 * Name templates
 * ---------------------------------------------------------------------- */

static void clear_ranks(void)
{
    static const char *const vars[] = {"RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static const char *expand(const char *tmpl, int device, unsigned seq)
{
    static char out[256];
    char err[256];
    if (st_expand_name(tmpl, device, seq, out, sizeof out, err, sizeof err) != 0)
        fail_msg("st_expand_name(%s): %s", tmpl, err);
    return out;
}

static void test_expand_name(void **state)
{
    (void)state;
    char want[256];
    clear_ranks();
    setenv("RANK", "3", 1);
    snprintf(want, sizeof want, "snap_%ld_3_1_5_%%.pickle", (long)getpid());
    assert_string_equal(expand("snap_%p_%r_%d_%n_%%.pickle", 1, 5), want);
    assert_string_equal(expand("dev%d", -1, 0), "devall");
    assert_string_equal(expand("dev%d", 12, 0), "dev12");
    assert_string_equal(expand("%n", 0, 4294967295u), "4294967295");
    assert_string_equal(expand("", 0, 0), "");
    assert_string_equal(expand("%%p", 0, 0), "%p");

    clear_ranks();
    assert_string_equal(expand("r%r", 0, 0), "r0");
    setenv("SLURM_PROCID", "9", 1);
    assert_string_equal(expand("r%r", 0, 0), "r9");
    setenv("LOCAL_RANK", "2", 1);
    assert_string_equal(expand("r%r", 0, 0), "r2"); /* LOCAL_RANK before SLURM_PROCID */
    setenv("RANK", "../../etc", 1);
    assert_string_equal(expand("r%r", 0, 0), "r2"); /* not a number: passed over */
    setenv("RANK", "", 1);
    assert_string_equal(expand("r%r", 0, 0), "r2");
    setenv("RANK", "17", 1);
    assert_string_equal(expand("r%r", 0, 0), "r17");
    clear_ranks();
}

static void test_expand_name_errors(void **state)
{
    (void)state;
    char out[8], err[256];
    assert_int_equal(st_expand_name("a%xb", 0, 0, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown %x"));
    assert_non_null(strstr(err, "'a%xb'"));
    /* a template with control bytes is shown escaped (conf_show) */
    assert_int_equal(st_expand_name("a\x1b%q", 0, 0, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "'a\\x1b%q': unknown %q"));
    assert_int_equal(st_expand_name("ab%", 0, 0, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "lone %"));

    /* 7 characters fit in 8 bytes, 8 do not */
    assert_int_equal(st_expand_name("abcdefg", 0, 0, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "abcdefg");
    assert_int_equal(st_expand_name("abcdefgh", 0, 0, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer than 7 bytes"));
    assert_int_equal(st_expand_name("abcde%n", 0, 123, out, sizeof out, err, sizeof err), -1);
    assert_int_equal(st_expand_name("abcd%n", 0, 123, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "abcd123");
    assert_int_equal(st_expand_name("x", 0, 0, out, 0, err, sizeof err), -1);
}

static void test_json_name(void **state)
{
    (void)state;
    char out[64];
    static const struct {
        const char *in, *out;
    } cases[] = {
        /* clang-format off */
        {"x.pickle", "x.json"},
        {"dir/snap_1.pkl", "dir/snap_1.json"},
        {"x.bin", "x.bin.json"},
        {"x", "x.json"},
        {"x.pickle.gz", "x.pickle.gz.json"},
        {"a.pickle/b", "a.pickle/b.json"},
        {".pickle", ".json"},
        /* clang-format on */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(st_json_name(cases[i].in, out, sizeof out), 0);
        assert_string_equal(out, cases[i].out);
    }
    assert_int_equal(st_json_name("x.pickle", out, 7), 0); /* "x.json" and its NUL */
    assert_string_equal(out, "x.json");
    assert_int_equal(st_json_name("x.pickle", out, 6), -1);
    assert_int_equal(st_json_name("abc", out, 8), -1); /* "abc.json" needs 9 */
}

/* ------------------------------------------------------------------------
 * Whole-file writes
 * ---------------------------------------------------------------------- */

static void test_write_file(void **state)
{
    (void)state;
    char dir[256], path[512], names[1024];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/out.pickle", dir);

    errno = 1234;
    write_ok(path, "hello", 5);
    assert_int_equal(errno, 1234); /* preserved */
    assert_file_is(path, "hello", 5);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    mode_t mask = umask(0);
    umask(mask);
    assert_int_equal(st.st_mode & 0777, 0644 & ~mask);

    /* replacing: a new file renamed over the old one (a new inode), the
     * old content gone, nothing else left in the directory */
    ino_t old_ino = st.st_ino;
    write_ok(path, "replaced!", 9);
    assert_file_is(path, "replaced!", 9);
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_ino != old_ino);
    write_ok(path, "", 0);
    assert_file_is(path, "", 0);
    list_dir(dir, names, sizeof names);
    assert_string_equal(names, "out.pickle");

    /* a relative name (no directory part): the temporary file goes in "." */
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    write_ok("rel.json", "{}", 2);
    assert_int_equal(chdir(cwd), 0);
    snprintf(path, sizeof path, "%s/rel.json", dir);
    assert_file_is(path, "{}", 2);
    list_dir(dir, names, sizeof names);
    assert_string_equal(names, "out.pickle rel.json");
    rm_dir(dir);
}

static size_t hook_calls;
static size_t hook_written[8];

static void record_chunks(const char *tmp_path, size_t written)
{
    assert_non_null(strstr(tmp_path, "/.big.pickle.tmp."));
    if (hook_calls < 8)
        hook_written[hook_calls] = written;
    hook_calls++;
}

/* Large data goes out in 64 KiB chunks through the temporary file. */
static void test_write_file_chunks(void **state)
{
    (void)state;
    char dir[256], path[512];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/big.pickle", dir);
    const size_t len = 200 * 1024 + 3;
    char *data = hostalloc_malloc(len);
    assert_non_null(data);
    for (size_t i = 0; i < len; i++)
        data[i] = (char)('a' + i % 26);
    hook_calls = 0;
    st_write_file_test_hook = record_chunks;
    write_ok(path, data, len);
    st_write_file_test_hook = NULL;
    assert_int_equal(hook_calls, 4);
    assert_int_equal(hook_written[0], 64 * 1024);
    assert_int_equal(hook_written[1], 128 * 1024);
    assert_int_equal(hook_written[2], 192 * 1024);
    assert_int_equal(hook_written[3], len);
    assert_file_is(path, data, len);
    hostalloc_free(data);
    rm_dir(dir);
}

static void test_write_file_refuses_symlink(void **state)
{
    (void)state;
    char dir[256], target[512], link[512], err[1024], names[1024];
    make_dir(dir, sizeof dir);
    snprintf(target, sizeof target, "%s/precious", dir);
    snprintf(link, sizeof link, "%s/snap.pickle", dir);
    write_ok(target, "keep me", 7);
    assert_int_equal(symlink(target, link), 0);

    errno = 0;
    assert_int_equal(st_write_file(link, "overwrite", 9, err, sizeof err), -1);
    assert_int_equal(errno, 0);
    assert_non_null(strstr(err, link));
    assert_non_null(strstr(err, "symbolic link"));
    assert_file_is(target, "keep me", 7);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    list_dir(dir, names, sizeof names);
    assert_string_equal(names, "precious snap.pickle");

    /* a dangling link is refused too (O_CREAT through it would create its target) */
    snprintf(target, sizeof target, "%s/nowhere", dir);
    snprintf(link, sizeof link, "%s/dangling.pickle", dir);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(st_write_file(link, "x", 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "symbolic link"));
    assert_int_equal(access(target, F_OK), -1);
    rm_dir(dir);
}

static void test_write_file_errors(void **state)
{
    (void)state;
    char dir[256], path[512], err[1024], names[1024];
    make_dir(dir, sizeof dir);

    /* a directory that does not exist: the message names the path and the reason */
    snprintf(path, sizeof path, "%s/no/such/dir/snap.pickle", dir);
    assert_int_equal(st_write_file(path, "x", 1, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, strerror(ENOENT)));

    /* a directory where the file should be: the rename fails after the
     * data was written, and the temporary file is removed */
    snprintf(path, sizeof path, "%s/sub", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(st_write_file(path, "data", 4, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "rename"));
    assert_non_null(strstr(err, strerror(EISDIR)));
    list_dir(dir, names, sizeof names);
    assert_string_equal(names, "sub");

    /* a name ending in a slash */
    snprintf(path, sizeof path, "%s/sub/", dir);
    assert_int_equal(st_write_file(path, "data", 4, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a file name"));
    rm_dir(dir);
}

/* A read-only directory: the message names the path and the reason.  Root
 * may write there anyway: skipped as root. */
static void test_write_file_read_only_dir(void **state)
{
    (void)state;
    if (geteuid() == 0)
        skip();
    char dir[256], sub[512], path[768], err[1024];
    make_dir(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(path, sizeof path, "%s/x.pickle", sub);
    assert_int_equal(chmod(dir, 0755), 0);
    assert_int_equal(chmod(sub, 0555), 0);
    assert_int_equal(st_write_file(path, "data", 4, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, strerror(EACCES)));
    assert_int_equal(chmod(sub, 0755), 0);
    rm_dir(dir);
}

static void die_half_way(const char *tmp_path, size_t written)
{
    (void)tmp_path;
    if (written >= 64 * 1024)
        raise(SIGKILL);
}

/* A writer killed after its first chunk: the target keeps its old, whole
 * content.  The killed process cannot remove its temporary file; what it
 * leaves is exactly one ".<base>.tmp.<its pid>.<n>" holding the first
 * chunk, which proves it died half way through the write. */
static void test_write_file_killed_writer(void **state)
{
    (void)state;
    char dir[256], path[512];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/victim.pickle", dir);
    char old[1000];
    for (size_t i = 0; i < sizeof old; i++)
        old[i] = (char)('A' + i % 26);
    write_ok(path, old, sizeof old);

    const size_t len = 256 * 1024 + 17;
    char *data = hostalloc_malloc(len);
    assert_non_null(data);
    memset(data, 'N', len);
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        st_write_file_test_hook = die_half_way;
        char err[512];
        st_write_file(path, data, len, err, sizeof err);
        _exit(3); /* not reached: the hook kills us */
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    assert_file_is(path, old, sizeof old);

    char prefix[64];
    snprintf(prefix, sizeof prefix, ".victim.pickle.tmp.%ld.", (long)child);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int stale = 0, others = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || strcmp(e->d_name, "victim.pickle") == 0)
            continue;
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) {
            others++;
            continue;
        }
        stale++;
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s/%s", dir, e->d_name);
        struct stat st;
        assert_int_equal(lstat(tmp, &st), 0);
        assert_true(S_ISREG(st.st_mode));
        assert_int_equal(st.st_size, 64 * 1024); /* the first chunk only */
    }
    closedir(d);
    assert_int_equal(stale, 1);
    assert_int_equal(others, 0);

    /* the next writer is not disturbed by the stale file */
    write_ok(path, data, len);
    assert_file_is(path, data, len);
    hostalloc_free(data);
    rm_dir(dir);
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_wraparound),
        cmocka_unit_test(test_ring_partial),
        cmocka_unit_test(test_ring_copy_empty),
        cmocka_unit_test(test_ring_observe_maps_kinds),
        cmocka_unit_test(test_ring_on_core),
        cmocka_unit_test(test_snapshot_pickle_bytes),
        cmocka_unit_test(test_snapshot_json_text),
        cmocka_unit_test(test_snapshot_strings_and_defaults),
        cmocka_unit_test(test_snapshot_memo_after_single_items),
        cmocka_unit_test(test_snapshot_large),
        cmocka_unit_test(test_snapshot_failed_buffer),
        cmocka_unit_test(test_expand_name),
        cmocka_unit_test(test_expand_name_errors),
        cmocka_unit_test(test_json_name),
        cmocka_unit_test(test_write_file),
        cmocka_unit_test(test_write_file_chunks),
        cmocka_unit_test(test_write_file_refuses_symlink),
        cmocka_unit_test(test_write_file_errors),
        cmocka_unit_test(test_write_file_read_only_dir),
        cmocka_unit_test(test_write_file_killed_writer),
    };
    /* clang-format on */
    return cmocka_run_group_tests_name("stats_snapshot", tests, NULL, NULL);
}
