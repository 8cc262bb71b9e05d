/*
 * The replay engine on constructed inputs (replay/engine.c), the RMM reader
 * (replay/import_rmm.c) and format detection (replay/input.c).  Proves: the
 * floor and "no cache" models count what they say; a replay through the
 * core reports the peaks the core's own statistics give (followed at every
 * change, not only between events); the capture pool and graph
 * nodes are treated as the interposer treats them; OOMs at the capacity are
 * counted with the first one's place; failed allocations that succeed here
 * are released at once; the device counts pages wherever they lie; the address map survives heavy reuse; RMM logs are
 * read in both time formats and every malformed line is named.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend_mem.h"
#include "core.h"
#include "replay.h"
#include "stats.h"

#define MiB ((uint64_t)1 << 20)

typedef struct build_s {
    rp_input_t in;
    size_t cap;
} build_t;

static void add(build_t *b, uint8_t kind, uint8_t api, uint32_t tid, uint64_t stream, uint64_t addr, uint64_t size)
{
    if (b->in.nev == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        b->in.ev = realloc(b->in.ev, b->cap * sizeof *b->in.ev);
        assert_non_null(b->in.ev);
    }
    b->in.ev[b->in.nev] = (trace_event_t){.time_ns = b->in.nev * 10,
                                          .tid = tid,
                                          .kind = kind,
                                          .api = api,
                                          .device = 0,
                                          .stream = stream,
                                          .addr = addr,
                                          .size = size};
    b->in.nev++;
    b->in.ndevices = 1;
}

static rp_config_t core_cfg(const char *text)
{
    rp_config_t c = {.label = text, .mode = RP_MODE_CORE, .conf_text = text};
    conf_defaults(&c.conf);
    char err[256];
    assert_int_equal(conf_parse(&c.conf, text, err, sizeof err), 0);
    return c;
}

static rp_result_t run(const rp_input_t *in, rp_config_t cfg, uint64_t capacity)
{
    rp_opts_t o = {.capacity = capacity, .curve_buckets = 16};
    rp_result_t r;
    char err[256];
    int rc = rp_replay(in, &cfg, &o, &r, err, sizeof err);
    if (rc != 0)
        fail_msg("replay failed: %s", err);
    return r;
}

static void test_models(void **state)
{
    build_t b = {0};
    add(&b, TRACE_ALLOC, TRACE_API_IMPORTED, 1, 0, 0x1000, 1000);
    add(&b, TRACE_ALLOC, TRACE_API_IMPORTED, 1, 0, 0x2000, 3 * MiB);
    add(&b, TRACE_FREE, TRACE_API_IMPORTED, 1, 0, 0x1000, 0);
    add(&b, TRACE_ALLOC, TRACE_API_IMPORTED, 1, 0, 0x3000, 100);
    add(&b, TRACE_FREE, TRACE_API_IMPORTED, 1, 0, 0x7777, 0); /* never allocated */
    rp_result_t floor = run(&b.in, (rp_config_t){.label = "floor", .mode = RP_MODE_FLOOR}, 1ull << 40);
    assert_int_equal(floor.peak_allocated, 1024 + 3 * MiB); /* 512-byte blocks */
    assert_int_equal(floor.peak_reserved, 1024 + 3 * MiB);
    assert_int_equal(floor.peak_requested, 1000 + 3 * MiB);
    assert_int_equal(floor.skipped, 1);
    rp_result_t nc = run(&b.in, (rp_config_t){.label = "no cache", .mode = RP_MODE_NOCACHE}, 1ull << 40);
    assert_int_equal(nc.peak_reserved, 1024 + 4 * MiB); /* 512 B packing, 2 MiB pages above 1 MiB */
    assert_int_equal(nc.device_allocs, 3);
    assert_int_equal(nc.device_frees, 1);
    assert_true(nc.reserved_covers);
    /* the curve: 5 events in 5 buckets of one */
    assert_int_equal(nc.curve.nbuckets, 5);
    assert_int_equal(nc.curve.reserved[1], 1024 + 4 * MiB);
    assert_int_equal(nc.curve.reserved[2], 4 * MiB);
    rp_result_free(&floor);
    rp_result_free(&nc);
    free(b.in.ev);
}

/* A random imported trace: addresses reused as the job's allocator would. */
static void random_trace(build_t *b, uint64_t seed, size_t n)
{
    uint64_t live[256], x = seed * 0x9E3779B97F4A7C15ull + 7;
    size_t nlive = 0, next = 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if ((x % 100 < 55 && nlive < 256) || nlive == 0) {
            uint64_t size = ((x >> 8) % 4 == 0) ? ((x >> 12) % (64 * MiB)) : ((x >> 12) % (1 << 20)) + 1;
            /* addresses from a small range so that the map sees reuse */
            uint64_t a = 0x100000 + ((next++ * 7919) % 4096) * 0x1000;
            bool used = false;
            for (size_t k = 0; k < nlive; k++)
                used |= live[k] == a;
            if (used)
                continue;
            live[nlive++] = a;
            add(b, TRACE_ALLOC, TRACE_API_IMPORTED, 1, 1 + (x >> 40) % 2, a, size);
        } else {
            size_t k = (x >> 20) % nlive;
            add(b, TRACE_FREE, TRACE_API_IMPORTED, 1, 0, live[k], 0);
            live[k] = live[--nlive];
        }
    }
}

static void test_core_peaks_match_core_stats(void **state)
{
    static const char *confs[] = {"", "max_split_size_mb:40", "roundup_power2_divisions:4",
                                  "garbage_collection_threshold:0.5,limit_mb:2048"};
    for (int seed = 1; seed <= 4; seed++) {
        build_t b = {0};
        random_trace(&b, (uint64_t)seed, 6000);
        for (size_t c = 0; c < sizeof confs / sizeof confs[0]; c++) {
            rp_config_t cfg = core_cfg(confs[c]);
            rp_result_t r = run(&b.in, cfg, 4ull << 30);
            /* the peaks followed through the observer, at every change,
             * are the core's own allocated_bytes/reserved_bytes peaks */
            assert_true(r.stats_agree);
            assert_int_equal(r.peak_allocated, r.dev_peak_allocated[0]);
            assert_int_equal(r.peak_reserved, r.dev_peak_reserved[0]);
            assert_true(r.hits <= r.allocs);
            assert_true(r.reserved_covers);
            assert_true(r.peak_reserved >= r.peak_allocated);
            /* deterministic */
            rp_result_t again = run(&b.in, cfg, 4ull << 30);
            assert_int_equal(again.peak_reserved, r.peak_reserved);
            assert_int_equal(again.peak_event, r.peak_event);
            assert_true(again.frag_at_peak == r.frag_at_peak);
            rp_result_free(&r);
            rp_result_free(&again);
        }
        /* the floor against a direct count, requested and rounded */
        uint64_t cur = 0, peak = 0, cur512 = 0, peak512 = 0;
        for (size_t i = 0; i < b.in.nev; i++) {
            const trace_event_t *e = &b.in.ev[i];
            const trace_event_t *a = e;
            if (e->kind == TRACE_FREE)
                for (size_t j = i; j-- > 0;)
                    if (b.in.ev[j].kind == TRACE_ALLOC && b.in.ev[j].addr == e->addr) {
                        a = &b.in.ev[j];
                        break;
                    }
            uint64_t r512 = a->size ? (a->size + 511) / 512 * 512 : 512;
            if (e->kind == TRACE_ALLOC)
                cur += a->size, cur512 += r512;
            else
                cur -= a->size, cur512 -= r512;
            peak = cur > peak ? cur : peak;
            peak512 = cur512 > peak512 ? cur512 : peak512;
        }
        rp_result_t f = run(&b.in, (rp_config_t){.label = "floor", .mode = RP_MODE_FLOOR}, 1ull << 40);
        assert_int_equal(f.peak_requested, peak);
        assert_int_equal(f.peak_allocated, peak512);
        rp_result_free(&f);
        free(b.in.ev);
    }
}

static void test_capture_pool_and_graph_nodes(void **state)
{
    /* cudaMalloc 1 MiB, freed; then the same size inside a capture: the
     * capture pool cannot use the default pool's block */
    build_t b = {0};
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x1000, MiB);
    add(&b, TRACE_FREE, TRACE_API_CUDA_MALLOC, 1, 0, 0x1000, 0);
    add(&b, TRACE_DEVICE_SYNC, 0, 1, 0, 0, 0);
    add(&b, TRACE_CAPTURE_BEGIN, 0, 1, 0x5000, 0, 0);
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x2000, MiB);
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC_ASYNC, 1, 0x5000, 0x3000, MiB); /* a graph node */
    add(&b, TRACE_CAPTURE_END, 0, 1, 0x5000, 0, 0);
    add(&b, TRACE_FREE, TRACE_API_CUDA_MALLOC_ASYNC, 1, 0x5000, 0x3000, 0);
    rp_result_t r = run(&b.in, core_cfg(""), 1ull << 34);
    assert_int_equal(r.device_allocs, 2);
    assert_int_equal(r.skipped, 1);
    assert_int_equal(r.peak_allocated, MiB);
    rp_result_free(&r);

    /* without the capture: one segment serves both */
    build_t c = {0};
    add(&c, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x1000, MiB);
    add(&c, TRACE_FREE, TRACE_API_CUDA_MALLOC, 1, 0, 0x1000, 0);
    add(&c, TRACE_DEVICE_SYNC, 0, 1, 0, 0, 0);
    add(&c, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x2000, MiB);
    r = run(&c.in, core_cfg(""), 1ull << 34);
    assert_int_equal(r.device_allocs, 1);
    assert_int_equal(r.skipped, 0);
    rp_result_free(&r);
    free(b.in.ev);
    free(c.in.ev);
}

static void test_stream_keys(void **state)
{
    /* a block allocated on stream A is not handed to stream B, and a
     * per-thread stream of thread 1 is not thread 2's */
    build_t b = {0};
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC_ASYNC, 1, 0xA000, 0x1000, 30 * MiB);
    add(&b, TRACE_FREE, TRACE_API_CUDA_MALLOC_ASYNC, 1, 0xA000, 0x1000, 0);
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC_ASYNC, 1, 0xB000, 0x2000, 30 * MiB);
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC_ASYNC, 1, 0x2, 0x3000, 30 * MiB);
    add(&b, TRACE_FREE, TRACE_API_CUDA_MALLOC_ASYNC, 1, 0x2, 0x3000, 0);
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC_ASYNC, 2, 0x2, 0x4000, 30 * MiB);
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC_ASYNC, 1, 0xA000, 0x5000, 30 * MiB); /* reuses A's block */
    rp_result_t r = run(&b.in, core_cfg(""), 1ull << 34);
    assert_int_equal(r.device_allocs, 4);
    assert_int_equal(r.hits, 1);
    rp_result_free(&r);
    free(b.in.ev);
}

static void test_oom_and_failed_allocations(void **state)
{
    build_t b = {0};
    add(&b, TRACE_ALLOC, TRACE_API_IMPORTED, 1, 0, 0x1000, 40 * MiB);
    add(&b, TRACE_ALLOC, TRACE_API_IMPORTED, 1, 0, 0x2000, 40 * MiB); /* does not fit in 64 MiB */
    add(&b, TRACE_FREE, TRACE_API_IMPORTED, 1, 0, 0x2000, 0);
    add(&b, TRACE_ALLOC_FAIL, TRACE_API_IMPORTED, 1, 0, 0, 8 * MiB); /* fits here: tried and released */
    rp_result_t r = run(&b.in, core_cfg(""), 64 * MiB);
    assert_int_equal(r.ooms, 1);
    assert_int_equal(r.first_oom_event, 1);
    assert_int_equal(r.first_oom_size, 40 * MiB);
    assert_int_equal(r.peak_allocated, 48 * MiB);
    assert_int_equal(r.skipped, 0);
    assert_int_equal(r.peak_requested, 48 * MiB); /* the job's allocations and the failed request */
    rp_result_free(&r);
    rp_result_t nc = run(&b.in, (rp_config_t){.label = "no cache", .mode = RP_MODE_NOCACHE}, 64 * MiB);
    assert_int_equal(nc.ooms, 1);
    assert_int_equal(nc.first_oom_event, 1);
    rp_result_free(&nc);
    free(b.in.ev);
}

/* The request the recorded run failed is asked in every column at its
 * moment: where it cannot fit, the core and "no cache" both fail at that
 * event and the floor counts it above the capacity; where it fits, every
 * column serves it, holds it for that moment and frees it, and the floor's
 * peak is the one each column needed.  A cucache trace's failure of
 * another error is asked in none.  Seen to fail with the reference models
 * skipping the failed request (the floor below what the core held, "no
 * cache" without an OOM where the core had one). */
static void test_failed_request_in_every_column(void **state)
{
    static const struct {
        const char *what;
        uint64_t live, failed; /* MiB */
        bool fits;             /* in 64 MiB */
    } cases[] = {
        {"does not fit", 40, 30, false},
        {"fits", 10, 30, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        build_t b = {0};
        add(&b, TRACE_ALLOC, TRACE_API_IMPORTED, 1, 0, 0x1000, cases[i].live * MiB);
        add(&b, TRACE_ALLOC_FAIL, TRACE_API_IMPORTED, 1, 0, 0, cases[i].failed * MiB);
        add(&b, TRACE_FREE, TRACE_API_IMPORTED, 1, 0, 0x1000, 0);
        const uint64_t need = (cases[i].live + cases[i].failed) * MiB;
        rp_result_t core = run(&b.in, core_cfg(""), 64 * MiB);
        rp_result_t nc = run(&b.in, (rp_config_t){.label = "no cache", .mode = RP_MODE_NOCACHE}, 64 * MiB);
        rp_result_t fl = run(&b.in, (rp_config_t){.label = "floor", .mode = RP_MODE_FLOOR}, 64 * MiB);
        /* the floor counts the request, whether or not it fits */
        if (fl.peak_allocated != need || fl.peak_requested != need)
            fail_msg("%s: floor peak %llu, expected %llu", cases[i].what, (unsigned long long)fl.peak_allocated,
                     (unsigned long long)need);
        const rp_result_t *col[] = {&core, &nc};
        for (size_t k = 0; k < 2; k++) {
            if (cases[i].fits) {
                if (col[k]->ooms != 0 || col[k]->peak_allocated < fl.peak_allocated)
                    fail_msg("%s: column %zu: %llu OOMs, peak %llu below the floor's %llu", cases[i].what, k,
                             (unsigned long long)col[k]->ooms, (unsigned long long)col[k]->peak_allocated,
                             (unsigned long long)fl.peak_allocated);
            } else if (col[k]->ooms != 1 || col[k]->first_oom_event != 1 ||
                       col[k]->first_oom_size != cases[i].failed * MiB) {
                fail_msg("%s: column %zu: %llu OOMs, the first at %lld, expected one at the failed request",
                         cases[i].what, k, (unsigned long long)col[k]->ooms, col[k]->first_oom_event);
            }
        }
        if (cases[i].fits) {
            assert_int_equal(nc.device_allocs, 2);
            assert_int_equal(nc.device_frees, 2);
        }
        rp_result_free(&core);
        rp_result_free(&nc);
        rp_result_free(&fl);
        /* a cucache trace's failure of another error (1: invalid value) is asked in none */
        b.in.format = RP_FORMAT_CUCACHE;
        b.in.ev[1].addr = 1;
        fl = run(&b.in, (rp_config_t){.label = "floor", .mode = RP_MODE_FLOOR}, 64 * MiB);
        core = run(&b.in, core_cfg(""), 64 * MiB);
        assert_int_equal(fl.peak_allocated, cases[i].live * MiB);
        assert_int_equal(core.ooms, 0);
        assert_int_equal(core.peak_allocated, cases[i].live * MiB);
        rp_result_free(&core);
        rp_result_free(&fl);
        free(b.in.ev);
    }
}

/* The replay's device counts pages wherever they lie, like the simulated
 * device and a GPU: segments released from between live ones serve a
 * request larger than any single free range.  Seen to fail with the old
 * first-fit model over one range of the capacity (an OOM at the 120 MiB
 * request). */
static void test_paged_device(void **state)
{
    build_t b = {0};
    enum { N = 21 };
    for (uint64_t i = 0; i < N; i++) /* 12 MiB: a segment each, 252 MiB */
        add(&b, TRACE_ALLOC, TRACE_API_IMPORTED, 1, 0, 0x1000 * (i + 1), 12 * MiB);
    for (uint64_t i = 0; i < N; i += 2)
        add(&b, TRACE_FREE, TRACE_API_IMPORTED, 1, 0, 0x1000 * (i + 1), 0);
    add(&b, TRACE_ALLOC, TRACE_API_IMPORTED, 1, 0, 0x100000, 120 * MiB);
    rp_result_t r = run(&b.in, core_cfg(""), 256 * MiB);
    assert_int_equal(r.ooms, 0);
    assert_int_equal(r.peak_allocated, N * 12 * MiB); /* before the frees; 240 MiB after */
    assert_int_equal(r.skipped, 0);
    rp_result_free(&r);
    free(b.in.ev);

    /* the model alone: pages, small packing, addresses reused first fit */
    rp_space_t sp;
    uint64_t a[8], x, y;
    assert_int_equal(rp_space_init(&sp, 0, 16 * MiB), 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(rp_space_alloc(&sp, 2 * MiB, &a[i]), CORE_OK);
    assert_int_equal(rp_space_alloc(&sp, 1, &x), CORE_ENOMEM);
    for (int i = 0; i < 8; i += 2)
        rp_space_free(&sp, a[i], 2 * MiB);
    assert_int_equal(rp_space_free_bytes(&sp), 8 * MiB);
    assert_int_equal(rp_space_alloc(&sp, 8 * MiB, &x), CORE_OK);
    rp_space_free(&sp, x, 8 * MiB);
    assert_int_equal(rp_space_alloc(&sp, 1000, &x), CORE_OK); /* a page for small requests */
    assert_int_equal(rp_space_free_bytes(&sp), 6 * MiB);
    assert_int_equal(rp_space_alloc(&sp, 1000, &y), CORE_OK);
    assert_int_equal(y, x + 1024);
    assert_int_equal(rp_space_free_bytes(&sp), 6 * MiB);
    rp_space_free(&sp, x, 1000);
    rp_space_free(&sp, y, 1000);
    assert_int_equal(rp_space_free_bytes(&sp), 8 * MiB);
    assert_int_equal(rp_space_alloc(&sp, 2 * MiB, &y), CORE_OK);
    assert_int_equal(y, a[0]);
    rp_space_fini(&sp);
}

/* --busy: a fenced free waits for the job's next synchronisation; on the
 * idle device it is reusable at once. */
/* A replay on a device whose queued work completes only at the job's
 * synchronisations (rp_opts_t.busy). */
static rp_result_t run_busy(const rp_input_t *in, rp_config_t cfg, uint64_t capacity)
{
    rp_opts_t o = {.capacity = capacity, .busy = true};
    rp_result_t r;
    char err[256];
    if (rp_replay(in, &cfg, &o, &r, err, sizeof err) != 0)
        fail_msg("replay failed: %s", err);
    return r;
}

static void test_busy_device(void **state)
{
    build_t b = {0};
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x1000, 30 * MiB);
    add(&b, TRACE_FREE, TRACE_API_CUDA_MALLOC, 1, 0, 0x1000, 0);
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x2000, 30 * MiB); /* before any synchronisation */
    add(&b, TRACE_FREE, TRACE_API_CUDA_MALLOC, 1, 0, 0x2000, 0);
    add(&b, TRACE_DEVICE_SYNC, 0, 1, 0, 0, 0);
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x3000, 30 * MiB); /* after it */
    /* the default hands the pending block out at the miss, the device
     * ordered after its fence: one segment, busy or not */
    rp_result_t handed = run_busy(&b.in, core_cfg(""), 1ull << 34);
    assert_int_equal(handed.device_allocs, 1);
    assert_int_equal(handed.peak_reserved, 30 * MiB);
    rp_result_free(&handed);
    /* reuse:fenced waits instead, or grows while there is room */
    rp_config_t cfg = core_cfg("reuse:fenced");
    rp_result_t idle = run(&b.in, cfg, 1ull << 34);
    assert_int_equal(idle.device_allocs, 1);
    assert_int_equal(idle.peak_reserved, 30 * MiB);
    rp_result_t busy = run_busy(&b.in, cfg, 1ull << 34);
    assert_int_equal(busy.device_allocs, 2);
    assert_int_equal(busy.peak_reserved, 60 * MiB);
    assert_int_equal(busy.hits, 1); /* the third allocation, after the synchronisation */
    /* without room for a second segment the core waits for the fence
     * instead: no OOM */
    rp_result_t tight = run_busy(&b.in, cfg, 40 * MiB);
    assert_int_equal(tight.ooms, 0);
    assert_int_equal(tight.device_allocs, 1);
    rp_result_free(&idle);
    rp_result_free(&busy);
    rp_result_free(&tight);
    free(b.in.ev);
}

/* reuse:ordered on a busy device: a block freed behind a fence is handed
 * out at the next miss (one segment), until a no_hand_outs record (trace
 * version 4: a second context appeared in the recorded process) stops it
 * (two segments).  Seen to fail with the replay ignoring the record. */
static void test_no_hand_outs_record(void **state)
{
    (void)state;
    rp_config_t cfg = core_cfg("reuse:ordered");
    for (int stop = 0; stop < 2; stop++) {
        build_t b = {0};
        add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x1000, 30 * MiB);
        add(&b, TRACE_FREE, TRACE_API_CUDA_MALLOC, 1, 0, 0x1000, 0);
        if (stop)
            add(&b, TRACE_NO_HAND_OUTS, TRACE_API_NONE, 1, 0, 0, 0);
        add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x2000, 30 * MiB);
        rp_result_t r = run_busy(&b.in, cfg, 1ull << 34);
        assert_int_equal(r.device_allocs, stop ? 2 : 1);
        assert_int_equal(r.peak_reserved, (stop ? 60 : 30) * MiB);
        rp_result_free(&r);
        free(b.in.ev);
    }
}

/* reuse:ordered on a busy device, with one stream of the program's own
 * counted: a 12 MiB block freed behind a fence is handed out at the next
 * 12 MiB hit, which leaves a free 200 MiB block whole for the 200 MiB
 * after it (two segments); with the legacy stream counted too (a
 * default_busy record, or a trace from before version 5, which counted it
 * from the start) the hit is paced (12 MiB behind fences is less than an
 * eighth of the cache), splits the 200 MiB block, and the 200 MiB after it
 * needs a segment of its own (three).  Seen to fail with the replay
 * ignoring the record. */
static void test_default_busy_record(void **state)
{
    (void)state;
    rp_config_t cfg = core_cfg("reuse:ordered");
    for (int round = 0; round < 3; round++) {
        build_t b = {0};
        add(&b, TRACE_STREAM_CREATE, TRACE_API_NONE, 1, 0x77, 0, 1);
        b.in.ev[b.in.nev - 1].flags = TRACE_REC_COUNTED;
        if (round == 1) {
            add(&b, TRACE_DEFAULT_BUSY, TRACE_API_NONE, 1, 1, 0, 0);
            b.in.ev[b.in.nev - 1].flags = TRACE_REC_COUNTED;
        }
        b.in.default_counted = round == 2;
        add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x1000, 12 * MiB);
        add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x2000, 200 * MiB);
        add(&b, TRACE_FREE, TRACE_API_CUDA_MALLOC, 1, 0, 0x2000, 0);
        add(&b, TRACE_DEVICE_SYNC, 0, 1, 0, 0, 0);
        add(&b, TRACE_FREE, TRACE_API_CUDA_MALLOC, 1, 0, 0x1000, 0); /* behind a fence */
        add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x3000, 12 * MiB);
        add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x4000, 200 * MiB);
        rp_result_t r = run_busy(&b.in, cfg, 1ull << 34);
        bool paced = round > 0;
        if (r.device_allocs != (paced ? 3u : 2u))
            fail_msg("round %d (%s): %llu segments", round, paced ? "paced" : "not paced",
                     (unsigned long long)r.device_allocs);
        rp_result_free(&r);
        free(b.in.ev);
    }
}

/* Address 0 is a key like any other (it marks empty slots in the map). */
static void test_address_zero(void **state)
{
    build_t b = {0};
    for (int i = 0; i < 100; i++) {
        add(&b, TRACE_ALLOC, TRACE_API_IMPORTED, 1, 0, 0, 4096);
        add(&b, TRACE_FREE, TRACE_API_IMPORTED, 1, 0, 0, 0);
    }
    add(&b, TRACE_ALLOC, TRACE_API_IMPORTED, 1, 0, 0, 8192);
    rp_result_t f = run(&b.in, (rp_config_t){.label = "floor", .mode = RP_MODE_FLOOR}, 1ull << 30);
    assert_int_equal(f.peak_allocated, 8192);
    assert_int_equal(f.skipped, 0);
    rp_result_free(&f);
    free(b.in.ev);
}

static void test_device_limit(void **state)
{
    build_t b = {0};
    add(&b, TRACE_ALLOC, TRACE_API_IMPORTED, 1, 0, 0x1000, 4096);
    b.in.ev[0].device = 64;
    rp_config_t cfg = core_cfg("");
    rp_opts_t o = {.capacity = 1ull << 30};
    rp_result_t r;
    char err[256];
    assert_int_equal(rp_replay(&b.in, &cfg, &o, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "device 64"));
    free(b.in.ev);
}

/* ------------------------------------------------------------------------
 * RMM logs and detection
 * ---------------------------------------------------------------------- */

static int parse(const char *text, rp_input_t *in, char *err, size_t errlen)
{
    return rp_input_parse("t.csv", (const uint8_t *)text, strlen(text), in, err, errlen);
}

static void test_rmm_good(void **state)
{
    const char *csv = "Thread,Time,Action,Pointer,Size,Stream\n"
                      "140573312345856,1634567890.234567,allocate,0x7f8a40000000,1024,0x7f8a38001020\n"
                      "140573312345856,1634567890.2346,allocate,0x7f8a40000400,2048,0x7f8a38001020\r\n"
                      "99,1634567890.5,free,0x7f8a40000000,1024,0x7f8a38001020\n"
                      "99,1634567890.6,allocate failure,0x0,4096,0\n"
                      "\n";
    rp_input_t in;
    char err[256];
    assert_int_equal(parse(csv, &in, err, sizeof err), 0);
    assert_int_equal(in.format, RP_FORMAT_RMM);
    assert_int_equal(in.nev, 4);
    assert_int_equal(in.ev[0].kind, TRACE_ALLOC);
    assert_int_equal(in.ev[0].addr, 0x7f8a40000000ull);
    assert_int_equal(in.ev[0].stream, 0x7f8a38001020ull);
    assert_int_equal(in.ev[1].time_ns, 33000);
    assert_int_equal(in.ev[2].kind, TRACE_FREE);
    assert_int_equal(in.ev[2].tid, 2);
    assert_int_equal(in.ev[2].time_ns, 265433000);
    assert_int_equal(in.ev[3].kind, TRACE_ALLOC_FAIL);
    rp_result_t f = run(&in, (rp_config_t){.label = "floor", .mode = RP_MODE_FLOOR}, 1ull << 30);
    assert_int_equal(f.peak_allocated, 2048 + 4096); /* the failed request, at its moment, counts */
    rp_result_free(&f);
    f = run(&in, (rp_config_t){.label = "no cache", .mode = RP_MODE_NOCACHE}, 1ull << 30);
    assert_int_equal(f.peak_allocated, 2048 + 4096);
    assert_int_equal(f.ooms, 0);
    rp_result_free(&f);
    rp_input_free(&in);

    /* the older clock-time format, columns in another order */
    const char *old = "Action,Thread,Stream,Time,Size,Pointer\n"
                      "allocate,1,0x0,10:00:00:000100,512,0x1000\n"
                      "deallocate,1,0x0,10:00:01.5,512,4096\n";
    assert_int_equal(rp_input_parse("o.csv", (const uint8_t *)old, strlen(old), &in, err, sizeof err), -1);
    /* it does not start with Thread: not detected as RMM */
    assert_non_null(strstr(err, "not a trace this tool reads"));
    assert_int_equal(rp_import_rmm((const uint8_t *)old, strlen(old), &in, err, sizeof err), 0);
    assert_int_equal(in.nev, 2);
    assert_int_equal(in.ev[1].kind, TRACE_FREE);
    assert_int_equal(in.ev[1].addr, 4096);
    assert_int_equal(in.ev[1].time_ns, 1500000000ull - 100000ull);
    rp_input_free(&in);
}

static void expect_error_n(const char *csv, size_t len, const char *want)
{
    rp_input_t in;
    char err[512];
    assert_int_equal(rp_input_parse("t.csv", (const uint8_t *)csv, len, &in, err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("error '%s' does not say '%s'", err, want);
}

static void expect_error(const char *csv, const char *want)
{
    expect_error_n(csv, strlen(csv), want);
}

static void test_rmm_errors(void **state)
{
    expect_error("Thread,Time,Action,Pointer,Size\n1,1.0,allocate,0x10,5\n", "no Stream column");
    expect_error("Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0x10,5,0\n1,1.1,realloc,0x10,5,0\n",
                 "line 3: action 'realloc'");
    expect_error("Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0xZZ,5,0\n", "line 2: Pointer '0xZZ'");
    expect_error("Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0x10,-5,0\n", "line 2: Size '-5'");
    expect_error("Thread,Time,Action,Pointer,Size,Stream\n1,yesterday,allocate,0x10,5,0\n", "line 2: Time");
    expect_error("Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0x10,5\n2,1.0,free,0x10,5,0\n",
                 "line 2: 5 fields, the header has 6");
    static const char nul[] = "Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0x10,5,0\n\0\n";
    expect_error_n(nul, sizeof nul - 1, "line 3: a NUL byte");
    expect_error("Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0x10,99999999999999999999,0\n", "Size");

    /* a last line cut short is kept out, with a note */
    const char *cut = "Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0x10,5,0\n1,1.1,free,0x1";
    rp_input_t in;
    char err[256];
    assert_int_equal(parse(cut, &in, err, sizeof err), 0);
    assert_int_equal(in.nev, 1);
    assert_non_null(strstr(in.notes, "line 3 is cut short"));
    rp_input_free(&in);
}

/* The interposer's last resort, modelled (opts.fallback): a cudaMalloc the
 * core cannot serve takes exactly its pages from the device; its free gives
 * them back; a stream-ordered one too, a driver call or an import never,
 * nor one a limit refused.  Without opts.fallback each is an OOM. */
static void test_fallback(void **state)
{
    build_t b = {0};
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x1000, 56 * MiB);         /* 8 MiB of a 64 MiB device left */
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC, 1, 0, 0x9000, 3 * MiB);          /* 20 MiB do not fit; 4 do */
    add(&b, TRACE_ALLOC, TRACE_API_CU_MEM_ALLOC, 1, 0, 0xa000, 3 * MiB);         /* no fallback for the driver */
    add(&b, TRACE_FREE, TRACE_API_CUDA_MALLOC, 1, 0, 0x9000, 0);                 /* its pages back */
    add(&b, TRACE_ALLOC_FAIL, TRACE_API_CUDA_MALLOC, 1, 0, 2, 3 * MiB);          /* served here, released */
    add(&b, TRACE_ALLOC, TRACE_API_CUDA_MALLOC_ASYNC, 1, 0x77, 0xb000, 2 * MiB); /* the runtime's pool */
    rp_config_t cfg = core_cfg("");
    rp_opts_t o = {.capacity = 64 * MiB, .fallback = true};
    rp_result_t r;
    char err[256];
    assert_int_equal(rp_replay(&b.in, &cfg, &o, &r, err, sizeof err), 0);
    assert_int_equal(r.fallbacks, 3);
    assert_int_equal(r.dev_fallbacks[0], 3);
    assert_int_equal(r.ooms, 1); /* the driver's */
    assert_int_equal(r.first_oom_event, 2);
    assert_int_equal(r.peak_allocated, 56 * MiB); /* the runtime's allocations are not cucache's */
    assert_int_equal(r.peak_requested, 56 * MiB);
    rp_result_free(&r);
    o.fallback = false;
    assert_int_equal(rp_replay(&b.in, &cfg, &o, &r, err, sizeof err), 0);
    assert_int_equal(r.fallbacks, 0);
    assert_int_equal(r.ooms, 4);
    rp_result_free(&r);
    /* a limit refuses: no fallback, as in the interposer (the 56 MiB would
     * fit the device) */
    rp_config_t lim = core_cfg("limit_mb:40");
    o.fallback = true;
    assert_int_equal(rp_replay(&b.in, &lim, &o, &r, err, sizeof err), 0);
    assert_int_equal(r.fallbacks, 0);
    rp_result_free(&r);
    free(b.in.ev);
}

/* A version 2 trace carries its run: the settings in TRACE_CONF pieces,
 * each device's memory (TRACE_DEVICE), fallbacks (TRACE_REC_FALLBACK) and
 * the failures the program saw (ALLOC_FAIL of error 2, not other errors).
 * None of these records is replayed.  Pieces pointing beyond the text, or a
 * version 1 trace with the new kinds, are handled. */
static size_t put_rec(uint8_t *buf, size_t at, trace_rec_t r)
{
    memcpy(buf + at, &r, sizeof r);
    return at + sizeof r;
}

static uint64_t text_word(const char *s, size_t at)
{
    uint64_t w = 0;
    for (int k = 7; k >= 0; k--)
        w = w << 8 | (unsigned char)(at + (size_t)k < strlen(s) ? s[at + (size_t)k] : 0);
    return w;
}

static void test_recorded_run(void **state)
{
    static uint8_t buf[4096];
    const char *conf = "max_split_size_mb:40,reuse:sync"; /* 31 bytes: two pieces */
    trace_header_t h = {.version = 2, .header_size = 64, .chunk_size = 32, .rec_size = 40};
    memcpy(h.magic, TRACE_MAGIC, 8);
    memcpy(buf, &h, sizeof h);
    size_t at = sizeof h + sizeof(trace_chunk_t), first_piece = at;
    for (size_t off = 0; off < strlen(conf); off += 24)
        at = put_rec(buf, at,
                     (trace_rec_t){.kind = TRACE_CONF,
                                   .device = -1,
                                   .flags = (uint32_t)off | (off + 24 >= strlen(conf) ? TRACE_CONF_LAST : 0),
                                   .ticks = 1,
                                   .stream = text_word(conf, off),
                                   .addr = text_word(conf, off + 8),
                                   .size = text_word(conf, off + 16)});
    size_t beyond = at; /* a stream sync now; later a piece beyond what is kept */
    at = put_rec(buf, at, (trace_rec_t){.kind = TRACE_STREAM_SYNC, .device = 1, .ticks = 1});
    at = put_rec(buf, at,
                 (trace_rec_t){.kind = TRACE_DEVICE, .device = 1, .ticks = 2, .addr = 60 * MiB, .size = 80 * MiB});
    at = put_rec(buf, at,
                 (trace_rec_t){.kind = TRACE_ALLOC,
                               .api = TRACE_API_CUDA_MALLOC,
                               .device = 1,
                               .flags = TRACE_REC_FALLBACK,
                               .ticks = 3,
                               .addr = 0x5000,
                               .size = MiB});
    at = put_rec(buf, at,
                 (trace_rec_t){.kind = TRACE_ALLOC_FAIL,
                               .api = TRACE_API_CUDA_MALLOC,
                               .device = 1,
                               .ticks = 4,
                               .addr = 2,
                               .size = 90 * MiB});
    at = put_rec(buf, at,
                 (trace_rec_t){.kind = TRACE_ALLOC_FAIL,
                               .api = TRACE_API_CUDA_MALLOC,
                               .device = 1,
                               .ticks = 5,
                               .addr = 1,
                               .size = 0}); /* invalid value: not an OOM */
    size_t nrec = (at - sizeof h - sizeof(trace_chunk_t)) / sizeof(trace_rec_t);
    trace_chunk_t c = {TRACE_CHUNK_MAGIC, (uint32_t)nrec, 1, 0, 10, 10};
    memcpy(buf + sizeof h, &c, sizeof c);
    rp_input_t in;
    char err[512];
    assert_int_equal(rp_input_parse("rec", buf, at, &in, err, sizeof err), 0);
    assert_true(in.recorded_settings);
    assert_string_equal(in.recorded_conf, conf);
    assert_int_equal(in.recorded_free[1], 60 * MiB);
    assert_int_equal(in.recorded_total[1], 80 * MiB);
    assert_int_equal(in.recorded_free[0], 0);
    assert_int_equal(in.recorded_fallbacks, 1);
    assert_int_equal(in.recorded_ooms, 1);
    assert_int_equal(in.nev, 4); /* the sync, the alloc and two failures */
    assert_int_equal(in.ev[1].flags, TRACE_REC_FALLBACK);
    rp_input_free(&in);
    /* the first piece lost (a DEVICE_SYNC in its place): the text has a
     * hole, so no settings count as recorded, and the notes say why */
    uint8_t saved[sizeof(trace_rec_t)];
    memcpy(saved, buf + first_piece, sizeof saved);
    put_rec(buf, first_piece, (trace_rec_t){.kind = TRACE_DEVICE_SYNC, .device = 1, .ticks = 1});
    assert_int_equal(rp_input_parse("hole", buf, at, &in, err, sizeof err), 0);
    assert_false(in.recorded_settings);
    assert_string_equal(in.recorded_conf, "");
    assert_non_null(strstr(in.notes, "CUCACHE_CONF is not whole in the trace (pieces missing)"));
    rp_input_free(&in);
    memcpy(buf + first_piece, saved, sizeof saved);
    /* a piece past the 1023 bytes kept: the text is not whole either */
    put_rec(buf, beyond,
            (trace_rec_t){.kind = TRACE_CONF, .device = -1, .flags = 5000, .ticks = 1, .stream = text_word("x", 0)});
    assert_int_equal(rp_input_parse("long", buf, at, &in, err, sizeof err), 0);
    assert_false(in.recorded_settings);
    assert_non_null(strstr(in.notes, "(longer than 1023 bytes)"));
    rp_input_free(&in);
    /* the same records in a version 1 trace: the new kinds are refused */
    h.version = 1;
    memcpy(buf, &h, sizeof h);
    assert_int_equal(rp_input_parse("v1", buf, at, &in, err, sizeof err), -1);
    assert_non_null(strstr(err, "has kind 12, expected 1 to 10 (version 1)"));
}

static void test_detection(void **state)
{
    rp_input_t in;
    char err[512];
    assert_int_equal(rp_input_parse("x", (const uint8_t *)"hello", 5, &in, err, sizeof err), -1);
    assert_non_null(strstr(err, "x: not a trace this tool reads"));
    /* a cucache trace header of another version */
    uint8_t hdr[64] = "CUCTRACE";
    hdr[8] = 6;
    hdr[10] = 64, hdr[12] = 32, hdr[14] = 40;
    assert_int_equal(rp_input_parse("v6", hdr, sizeof hdr, &in, err, sizeof err), -1);
    assert_non_null(strstr(err, "v6: cucache trace:"));
    assert_non_null(strstr(err, "version 6"));
    /* a pickle that is not a snapshot */
    static const uint8_t list[] = {0x80, 0x02, ']', 0x71, 0x00, '.'};
    assert_int_equal(rp_input_parse("l", list, sizeof list, &in, err, sizeof err), -1);
    assert_non_null(strstr(err, "l: PyTorch snapshot: not a PyTorch memory snapshot"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_core_peaks_match_core_stats),
        cmocka_unit_test(test_capture_pool_and_graph_nodes),
        cmocka_unit_test(test_stream_keys),
        cmocka_unit_test(test_oom_and_failed_allocations),
        cmocka_unit_test(test_failed_request_in_every_column),
        cmocka_unit_test(test_paged_device),
        cmocka_unit_test(test_busy_device),
        cmocka_unit_test(test_no_hand_outs_record),
        cmocka_unit_test(test_default_busy_record),
        cmocka_unit_test(test_address_zero),
        cmocka_unit_test(test_device_limit),
        cmocka_unit_test(test_rmm_good),
        cmocka_unit_test(test_rmm_errors),
        cmocka_unit_test(test_detection),
        cmocka_unit_test(test_fallback),
        cmocka_unit_test(test_recorded_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
