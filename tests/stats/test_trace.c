/*
 * Proves the trace reader (stats/trace_read.c) on traces built in memory:
 * fields round-trip; events of interleaved chunks of two threads come out
 * in time order, ties by thread then position; TSC ticks convert to
 * nanoseconds through the chunks' calibration points; a file cut at any
 * byte after the header reads without error, with exactly the whole records
 * before the cut and the right truncation offset; every corruption (magic,
 * version, sizes, chunk magic, kind, api, absurd record count) is an error
 * naming its offset; a missing file names its path.
 *
 * Seen to fail: with the reader's cut-short chunk dropped whole instead of
 * keeping its whole records (a scratch trace_read.c), the truncation test
 * fails at the first cut inside a chunk's records.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "trace.h"

/* ---- an encoder for tests ---------------------------------------------- */

typedef struct enc_s {
    unsigned char buf[1 << 16];
    size_t len;
} enc_t;

static void enc_header(enc_t *e, bool tsc, uint64_t ticks, uint64_t ns)
{
    trace_header_t h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, TRACE_MAGIC, 8);
    h.version = TRACE_VERSION;
    h.header_size = TRACE_HEADER_SIZE;
    h.chunk_size = TRACE_CHUNK_SIZE;
    h.rec_size = TRACE_REC_SIZE;
    h.start_ticks = ticks;
    h.start_ns = ns;
    h.pid = 4242;
    h.flags = tsc ? TRACE_FLAG_TSC : 0;
    memcpy(e->buf, &h, sizeof h);
    e->len = sizeof h;
}

/* A chunk of n records of thread tid; record i has ticks t[i], kind ALLOC
 * (free for odd i), addr 0x1000 * (i + 1) + tid, size 100 + i. */
static void enc_chunk(enc_t *e, uint32_t tid, const uint64_t *t, size_t n, uint64_t cal_ticks, uint64_t cal_ns)
{
    trace_chunk_t c = {TRACE_CHUNK_MAGIC, (uint32_t)n, tid, 0, cal_ticks, cal_ns};
    memcpy(e->buf + e->len, &c, sizeof c);
    e->len += sizeof c;
    for (size_t i = 0; i < n; i++) {
        trace_rec_t r = {
            .kind = i % 2 ? TRACE_FREE : TRACE_ALLOC,
            .api = TRACE_API_CUDA_MALLOC,
            .device = 1,
            .ticks = t[i],
            .stream = 7,
            .addr = 0x1000 * (i + 1) + tid,
            .size = 100 + i,
        };
        memcpy(e->buf + e->len, &r, sizeof r);
        e->len += sizeof r;
    }
}

static void parse_ok(const enc_t *e, size_t len, trace_t *t)
{
    char err[256];
    if (trace_parse(e->buf, len, t, err, sizeof err) != 0)
        fail_msg("trace_parse(%zu bytes): %s", len, err);
}

static void parse_fails(const enc_t *e, const char *says)
{
    char err[256] = "";
    trace_t t;
    assert_int_equal(trace_parse(e->buf, e->len, &t, err, sizeof err), -1);
    if (!strstr(err, says))
        fail_msg("expected \"%s\" in: %s", says, err);
    assert_int_equal(t.nevents, 0);
}

/* ---- tests ------------------------------------------------------------- */

static void test_fields_round_trip(void **state)
{
    (void)state;
    enc_t *e = malloc(sizeof *e);
    enc_header(e, false, 1000, 1000);
    const uint64_t t[] = {1500, 2500};
    enc_chunk(e, 3, t, 2, 3000, 3000);
    trace_t tr;
    parse_ok(e, e->len, &tr);
    assert_int_equal(tr.nevents, 2);
    assert_int_equal(tr.nchunks, 1);
    assert_int_equal(tr.nthreads, 1);
    assert_false(tr.truncated);
    assert_int_equal(tr.header.pid, 4242);
    const trace_event_t *v = &tr.events[1];
    assert_int_equal(v->time_ns, 1500);
    assert_int_equal(v->tid, 3);
    assert_int_equal(v->kind, TRACE_FREE);
    assert_int_equal(v->api, TRACE_API_CUDA_MALLOC);
    assert_int_equal(v->device, 1);
    assert_int_equal(v->stream, 7);
    assert_int_equal(v->addr, 0x2003);
    assert_int_equal(v->size, 101);
    assert_string_equal(trace_kind_name(v->kind), "free");
    assert_string_equal(trace_api_name(v->api), "cudaMalloc");
    assert_string_equal(trace_kind_name(99), "?");
    trace_free(&tr);
    free(e);
}

static void test_threads_merge_in_time_order(void **state)
{
    (void)state;
    enc_t *e = malloc(sizeof *e);
    enc_header(e, false, 0, 0);
    /* thread 2's chunk is written first but its events come later */
    const uint64_t t2[] = {30, 50, 60};
    const uint64_t t1[] = {10, 30, 40, 70};
    enc_chunk(e, 2, t2, 3, 100, 100);
    enc_chunk(e, 1, t1, 4, 110, 110);
    trace_t tr;
    parse_ok(e, e->len, &tr);
    assert_int_equal(tr.nthreads, 2);
    static const struct {
        uint64_t time;
        uint32_t tid;
    } want[] = {{10, 1}, {30, 1}, {30, 2}, {40, 1}, {50, 2}, {60, 2}, {70, 1}};
    assert_int_equal(tr.nevents, 7);
    for (size_t i = 0; i < 7; i++) {
        assert_int_equal(tr.events[i].time_ns, want[i].time);
        assert_int_equal(tr.events[i].tid, want[i].tid);
    }
    trace_free(&tr);
    free(e);
}

static void test_tsc_interpolation(void **state)
{
    (void)state;
    enc_t *e = malloc(sizeof *e);
    /* 3 ticks per ns: start at (3000 ticks, 1000 ns), chunk at (33000, 11000) */
    enc_header(e, true, 3000, 1000);
    const uint64_t t[] = {3000, 6000, 33000, 36000};
    enc_chunk(e, 1, t, 4, 33000, 11000);
    trace_t tr;
    parse_ok(e, e->len, &tr);
    assert_int_equal(tr.events[0].time_ns, 0);
    assert_int_equal(tr.events[1].time_ns, 1000);
    assert_int_equal(tr.events[2].time_ns, 10000);
    assert_int_equal(tr.events[3].time_ns, 11000); /* beyond the last point: its slope */
    trace_free(&tr);
    free(e);
}

static void test_truncated_at_every_byte(void **state)
{
    (void)state;
    enc_t *e = malloc(sizeof *e);
    enc_header(e, false, 0, 0);
    const uint64_t a[] = {1, 2, 3}, b[] = {4, 5}, c[] = {6, 7, 8, 9};
    enc_chunk(e, 1, a, 3, 10, 10);
    size_t end1 = e->len;
    enc_chunk(e, 2, b, 2, 20, 20);
    size_t end2 = e->len;
    enc_chunk(e, 1, c, 4, 30, 30);
    const size_t ends[3] = {end1, end2, e->len}, counts[3] = {3, 2, 4};
    for (size_t cut = TRACE_HEADER_SIZE; cut <= e->len; cut++) {
        /* the whole records before the cut */
        size_t want = 0, start = TRACE_HEADER_SIZE, last_end = TRACE_HEADER_SIZE;
        for (int k = 0; k < 3; k++) {
            size_t recs = start + TRACE_CHUNK_SIZE <= cut ? (cut - start - TRACE_CHUNK_SIZE) / TRACE_REC_SIZE : 0;
            if (recs > counts[k])
                recs = counts[k];
            want += recs;
            if (start + TRACE_CHUNK_SIZE <= cut)
                last_end = start + TRACE_CHUNK_SIZE + recs * TRACE_REC_SIZE;
            if (cut < ends[k])
                break;
            start = ends[k];
        }
        trace_t tr;
        parse_ok(e, cut, &tr);
        if (tr.nevents != want)
            fail_msg("cut at %zu: %zu events, expected %zu", cut, tr.nevents, want);
        bool at_boundary = cut == TRACE_HEADER_SIZE || cut == end1 || cut == end2 || cut == e->len;
        if (tr.truncated == at_boundary)
            fail_msg("cut at %zu: truncated is %d", cut, tr.truncated);
        if (tr.truncated && tr.truncated_at != last_end)
            fail_msg("cut at %zu: truncated_at %llu, expected %zu", cut, (unsigned long long)tr.truncated_at, last_end);
        trace_free(&tr);
    }
    /* shorter than the header */
    char err[256];
    trace_t tr;
    assert_int_equal(trace_parse(e->buf, 63, &tr, err, sizeof err), -1);
    assert_non_null(strstr(err, "offset 0: 63 bytes, shorter than the 64-byte header"));
    free(e);
}

static void test_corruptions_name_their_offset(void **state)
{
    (void)state;
    enc_t *e = malloc(sizeof *e);
    const uint64_t t[] = {1, 2};
    size_t chunk_at = TRACE_HEADER_SIZE, rec_at = chunk_at + TRACE_CHUNK_SIZE;
    char says[128];

    enc_header(e, false, 0, 0);
    enc_chunk(e, 1, t, 2, 5, 5);
    memcpy(e->buf, "NOTTRACE", 8);
    parse_fails(e, "offset 0: not a cucache trace");

    enc_header(e, false, 0, 0);
    enc_chunk(e, 1, t, 2, 5, 5);
    e->buf[8] = 6;
    parse_fails(e, "offset 8: trace format version 6; this reader reads versions 1 to 5");

    /* a kind a version added, in a trace of the version before */
    static const struct {
        uint8_t version, kind;
    } added[] = {{3, TRACE_NO_HAND_OUTS}, {4, TRACE_DEFAULT_BUSY}};
    for (size_t i = 0; i < sizeof added / sizeof added[0]; i++) {
        enc_header(e, false, 0, 0);
        enc_chunk(e, 1, t, 2, 5, 5);
        e->buf[8] = added[i].version;
        e->buf[rec_at] = added[i].kind;
        snprintf(says, sizeof says, "offset %zu: record 0 of chunk 0 has kind %u, expected 1 to %u (version %u)",
                 rec_at, added[i].kind, added[i].kind - 1u, added[i].version);
        parse_fails(e, says);
    }

    enc_header(e, false, 0, 0);
    enc_chunk(e, 1, t, 2, 5, 5);
    e->buf[14] = 48; /* rec_size */
    parse_fails(e, "offset 10: sizes 64/32/48");

    enc_header(e, false, 0, 0);
    enc_chunk(e, 1, t, 2, 5, 5);
    e->buf[chunk_at] = 'X';
    snprintf(says, sizeof says, "offset %zu: chunk 0 has magic", chunk_at);
    parse_fails(e, says);

    enc_header(e, false, 0, 0);
    enc_chunk(e, 1, t, 2, 5, 5);
    uint32_t huge = TRACE_CHUNK_MAX_RECORDS + 1;
    memcpy(e->buf + chunk_at + 4, &huge, 4);
    snprintf(says, sizeof says, "offset %zu: chunk 0 claims %u records", chunk_at + 4, huge);
    parse_fails(e, says);

    enc_header(e, false, 0, 0);
    enc_chunk(e, 1, t, 2, 5, 5);
    e->buf[rec_at + TRACE_REC_SIZE] = 0; /* record 1's kind */
    snprintf(says, sizeof says, "offset %zu: record 1 of chunk 0 has kind 0", rec_at + TRACE_REC_SIZE);
    parse_fails(e, says);

    enc_header(e, false, 0, 0);
    enc_chunk(e, 1, t, 2, 5, 5);
    e->buf[rec_at + 1] = 77; /* record 0's api */
    snprintf(says, sizeof says, "offset %zu: record 0 of chunk 0 has api 77", rec_at + 1);
    parse_fails(e, says);
    free(e);
}

static void test_load_names_the_path(void **state)
{
    (void)state;
    char err[256];
    trace_t t;
    assert_int_equal(trace_load("/nonexistent-cucache/x.trace", &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent-cucache/x.trace: No such file or directory"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields_round_trip),
        cmocka_unit_test(test_threads_merge_in_time_order),
        cmocka_unit_test(test_tsc_interpolation),
        cmocka_unit_test(test_truncated_at_every_byte),
        cmocka_unit_test(test_corruptions_name_their_offset),
        cmocka_unit_test(test_load_names_the_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
