/*
 * bench_core: nanoseconds per allocate+free pair through the caching core
 * (core/ on the in-process backend, an idle device) and through jemalloc's
 * mallocx/dallocx on the same size sequences in the same run, against the
 * targets it prints at the end.  docs/performance.md says what the figures
 * mean; scripts/bench builds this in release mode and runs it.
 *
 * Scenarios (each timed over >= 1e6 pairs with CLOCK_MONOTONIC around the
 * whole loop, repeated; median, min and max reported):
 *   hit_*       allocate X, free it, repeat: the cache-hit pair;
 *   hit_*_10k   the same with 10,000 other free blocks cached in the tree;
 *   fenced_*    the hit pair freed with CORE_FREE_FENCED (the lazy fence);
 *   churn_*     a ring of live slots: free the oldest, allocate a new size;
 *   trace_*     the allocations and frees of a real PyTorch trace, in their
 *               order (bench/sizes_<trace>.txt, from scripts/trace-sizes);
 *   *_ring      the same with the snapshot event ring recording every
 *               event (what CUCACHE_SNAPSHOT turns on: stats/ring.c);
 *   threads     the hit pair on one device vs two threads on two devices.
 *
 * jemalloc is loaded with dlopen (libjemalloc.so.2, RTLD_LOCAL), so the rest
 * of this process keeps glibc's malloc; without it the jemalloc columns are
 * left out.  Two jemalloc columns: its default path (thread cache) and
 * MALLOCX_TCACHE_NONE (its arena, behind a lock like the core's).
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_mem.h"
#include "bench_util.h"
#include "core.h"
#include "st.h"
#include "types.h" /* the free trees, to count cached blocks */

#ifndef BENCH_SIZES_DIR
#define BENCH_SIZES_DIR "bench"
#endif

enum {
    BENCH_STREAM = 1,        /* the stream key every core allocation uses */
    BENCH_CACHED = 10000,    /* free blocks in the tree for the hit_*_10k scenarios */
    BENCH_SIZES = 1 << 16,   /* pre-drawn sizes, cycled (fits in L2) */
    JE_TCACHE_NONE = 1 << 8, /* jemalloc.h: MALLOCX_TCACHE_NONE = MALLOCX_TCACHE(-1) */
    MAX_RUNS = BENCH_MAX_RUNS,
};

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

const char bench_prog[] = "bench_core";

/* xorshift64*: the size sequences are the same on every run and target. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

/* ------------------------------------------------------------------------
 * Targets: the core and jemalloc behind one pair of calls
 * ---------------------------------------------------------------------- */

typedef struct core_target_s {
    mem_backend_t mem;
    core_dev_t *d;
    core_free_t how;
    st_ring_t ring; /* the snapshot event ring, when a scenario observes */
} core_target_t;

typedef struct je_api_s {
    void *(*mallocx)(size_t size, int flags);
    void (*dallocx)(void *ptr, int flags);
} je_api_t;

static je_api_t je;

typedef struct je_target_s {
    int flags;
} je_target_t;

enum { BENCH_RING_EVENTS = 100000 }; /* CUCACHE_SNAPSHOT_EVENTS' default */
#define BENCH_HISTORY ((size_t)1 << 18) /* CUCACHE_HISTORY's default */

static void core_target_init(core_target_t *t, int device, core_free_t how, bool ring, const char *conf, size_t history)
{
    conf_t c;
    conf_defaults(&c);
    char err[256];
    if (conf && conf_parse(&c, conf, err, sizeof err) != 0)
        bench_die("%s", err);
    mem_backend_init(&t->mem, (size_t)1 << 40); /* 1 TiB of numbers: the traces peak at 13 GiB */
    core_backend_t be = mem_backend_vtable(&t->mem);
    t->d = core_dev_new(&be, device, &c);
    if (!t->d)
        bench_die("core_dev_new failed");
    t->how = how;
    core_set_history(t->d, history);
    memset(&t->ring, 0, sizeof t->ring);
    if (ring) {
        if (st_ring_init(&t->ring, BENCH_RING_EVENTS) != 0)
            bench_die("st_ring_init failed");
        core_set_observer(t->d, st_ring_observe, &t->ring);
    }
}

static void core_target_fini(core_target_t *t)
{
    core_dev_destroy(t->d);
    mem_backend_fini(&t->mem);
    st_ring_fini(&t->ring);
}

static inline uintptr_t core_alloc(void *ctx, size_t size)
{
    core_target_t *t = ctx;
    return core_malloc(t->d, size, BENCH_STREAM, NULL);
}

static inline void core_release(void *ctx, uintptr_t p)
{
    core_target_t *t = ctx;
    core_free(t->d, p, t->how, BENCH_STREAM);
}

static inline uintptr_t je_alloc(void *ctx, size_t size)
{
    const je_target_t *t = ctx;
    return (uintptr_t)je.mallocx(size, t->flags);
}

static inline void je_release(void *ctx, uintptr_t p)
{
    const je_target_t *t = ctx;
    je.dallocx((void *)p, t->flags);
}

/* jemalloc from its shared library, without making it the process's
 * malloc.  Returns false (and says why) when it cannot be loaded. */
static bool je_load(char **argv)
{
    void *h = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h && !getenv("BENCH_CORE_REEXEC")) {
        /* jemalloc's thread-locals use the initial-exec model: a library
         * loaded after start-up needs glibc's reserve of static TLS, which
         * is too small by default.  Start again with a larger one. */
        const char *old = getenv("GLIBC_TUNABLES");
        char tun[1024];
        snprintf(tun, sizeof tun, "%s%sglibc.rtld.optional_static_tls=65536", old ? old : "", old ? ":" : "");
        setenv("GLIBC_TUNABLES", tun, 1);
        setenv("BENCH_CORE_REEXEC", "1", 1);
        fflush(NULL);
        execv("/proc/self/exe", argv);
    }
    if (!h) {
        fprintf(stderr, "bench_core: jemalloc not loaded (%s): its columns are left out\n", dlerror());
        return false;
    }
    /* POSIX's way from a void * to a function pointer */
    *(void **)&je.mallocx = dlsym(h, "mallocx");
    *(void **)&je.dallocx = dlsym(h, "dallocx");
    if (!je.mallocx || !je.dallocx) {
        fprintf(stderr, "bench_core: libjemalloc.so.2 lacks mallocx/dallocx: its columns are left out\n");
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------
 * The loops (and bench_util.h's trace replay), written once and
 * specialised per target: each caller passes
 * its alloc/free functions as constants, so they inline and the loop makes
 * direct calls (core_malloc/core_free, or jemalloc through its dlsym
 * pointer, as a PLT call would).
 * ---------------------------------------------------------------------- */

typedef uintptr_t (*alloc_fn)(void *ctx, size_t size);
typedef void (*free_fn)(void *ctx, uintptr_t p);

/* allocate size, free it, `pairs` times; returns ns */
BENCH_INLINE uint64_t loop_hit(void *ctx, alloc_fn a, free_fn f, size_t size, uint64_t pairs)
{
    uint64_t t0 = bench_now_ns();
    for (uint64_t i = 0; i < pairs; i++)
        f(ctx, bench_checked(a(ctx, size), size));
    return bench_now_ns() - t0;
}

typedef struct ring_s {
    uintptr_t *slot; /* live allocations, oldest at pos */
    size_t n, pos;
    const size_t *sizes; /* BENCH_SIZES pre-drawn sizes, cycled */
    size_t next;
} ring_t;

/* `steps` times: free the oldest slot, allocate the next size into it */
BENCH_INLINE uint64_t loop_churn(void *ctx, alloc_fn a, free_fn f, ring_t *r, uint64_t steps)
{
    uintptr_t *slot = r->slot;
    size_t pos = r->pos, next = r->next, n = r->n;
    uint64_t t0 = bench_now_ns();
    for (uint64_t i = 0; i < steps; i++) {
        size_t size = r->sizes[next];
        next = (next + 1) & (BENCH_SIZES - 1);
        if (slot[pos])
            f(ctx, slot[pos]);
        slot[pos] = bench_checked(a(ctx, size), size);
        pos = pos + 1 == n ? 0 : pos + 1;
    }
    uint64_t ns = bench_now_ns() - t0;
    r->pos = pos;
    r->next = next;
    return ns;
}

static void ring_drain(void *ctx, free_fn f, ring_t *r)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->slot[i]) {
            f(ctx, r->slot[i]);
            r->slot[i] = 0;
        }
}

/* The loop functions per target. */
typedef struct target_ops_s {
    uint64_t (*hit)(void *ctx, size_t size, uint64_t pairs);
    uint64_t (*churn)(void *ctx, ring_t *r, uint64_t steps);
    uint64_t (*trace)(void *ctx, bench_trace_t *t, uint64_t passes);
    void (*release)(void *ctx, uintptr_t p);
    uintptr_t (*alloc)(void *ctx, size_t size);
} target_ops_t;

#define DEFINE_TARGET(name, A, F)                                                                                      \
    static uint64_t name##_hit(void *ctx, size_t size, uint64_t pairs)                                                 \
    {                                                                                                                  \
        return loop_hit(ctx, A, F, size, pairs);                                                                       \
    }                                                                                                                  \
    static uint64_t name##_churn(void *ctx, ring_t *r, uint64_t steps)                                                 \
    {                                                                                                                  \
        return loop_churn(ctx, A, F, r, steps);                                                                        \
    }                                                                                                                  \
    static uint64_t name##_trace(void *ctx, bench_trace_t *t, uint64_t passes)                                         \
    {                                                                                                                  \
        return bench_trace_replay(t, passes, ctx, A, F);                                                               \
    }                                                                                                                  \
    static const target_ops_t name##_ops = {name##_hit, name##_churn, name##_trace, F, A};

DEFINE_TARGET(core, core_alloc, core_release)
DEFINE_TARGET(je, je_alloc, je_release)

/* ------------------------------------------------------------------------
 * Scenarios
 * ---------------------------------------------------------------------- */

typedef enum kind_e { KIND_HIT, KIND_CHURN, KIND_TRACE } kind_t;

typedef struct scenario_s {
    const char *name;
    const char *what;
    kind_t kind;
    size_t size;          /* HIT: the size */
    size_t cached;        /* HIT: free blocks cached beforehand */
    core_free_t how;      /* how the core frees */
    size_t ring;          /* CHURN: live slots */
    size_t lo, hi;        /* CHURN: size range */
    bool log_uniform;     /* CHURN: log-uniform instead of uniform */
    bench_trace_t *trace; /* TRACE */
    bool observe;         /* the snapshot event ring observes the core */
    const char *conf;     /* CUCACHE_CONF of the core (NULL: the defaults) */
    size_t history;       /* core_set_history (0: none, as in the other scenarios) */
} scenario_t;

typedef struct result_s {
    bench_series_t core, je, je_notc;
    size_t cached_blocks;   /* free blocks in the core's trees after the last run */
    uint64_t pairs, hits;   /* the core's allocations and fast-path cache hits, all runs */
    uint64_t device_allocs; /* segments the core asked for during the runs */
    uint64_t fences;        /* fences recorded during the runs */
    double others;          /* CPUs other processes kept busy meanwhile */
} result_t;

typedef struct opts_s {
    int runs;
    uint64_t pairs;
    const char *only[16];
    int nonly;
    const char *sizes_dir;
    bool have_je;
} opts_t;

static size_t cached_blocks(core_dev_t *d)
{
    dev_lock(d);
    size_t n = pool_free_count(&d->defaults.small) + pool_free_count(&d->defaults.large);
    dev_unlock(d);
    return n;
}

/* Leaves BENCH_CACHED free blocks in the target's cache: allocates twice as
 * many blocks of 512 B - 64 KiB and frees every other one (their neighbours
 * stay allocated, so they cannot merge).  Returns the blocks kept. */
static uintptr_t *prefill(void *ctx, const target_ops_t *ops)
{
    uintptr_t *keep = calloc(BENCH_CACHED, sizeof *keep);
    uint64_t seed = 42;
    uintptr_t *drop = calloc(BENCH_CACHED, sizeof *drop);
    if (!keep || !drop)
        bench_die("out of memory");
    for (size_t i = 0; i < 2 * BENCH_CACHED; i++) {
        size_t size = 512 + rng_next(&seed) % (64 * KiB - 512 + 1);
        uintptr_t p = bench_checked(ops->alloc(ctx, size), size);
        if (i % 2)
            keep[i / 2] = p;
        else
            drop[i / 2] = p;
    }
    for (size_t i = 0; i < BENCH_CACHED; i++)
        ops->release(ctx, drop[i]);
    free(drop);
    return keep;
}

static void draw_sizes(size_t *sizes, const scenario_t *sc)
{
    uint64_t seed = 0x5eed0000 + sc->ring;
    double llo = log((double)sc->lo), lhi = log((double)sc->hi);
    for (size_t i = 0; i < BENCH_SIZES; i++) {
        uint64_t r = rng_next(&seed);
        if (sc->log_uniform)
            sizes[i] = (size_t)exp(llo + (lhi - llo) * ((double)(r >> 11) / (double)(1ull << 53)));
        else
            sizes[i] = sc->lo + r % (sc->hi - sc->lo + 1);
    }
}

/* The work of one run, in pairs, and the passes/steps that give it. */
static uint64_t run_units(const scenario_t *sc, uint64_t pairs, uint64_t *pairs_done)
{
    if (sc->kind == KIND_TRACE) {
        uint64_t passes = (pairs + sc->trace->nalloc - 1) / sc->trace->nalloc;
        *pairs_done = passes * sc->trace->nalloc;
        return passes;
    }
    *pairs_done = pairs;
    return pairs;
}

/* A scenario's state on one target, kept from the warm-up through the timed
 * runs: the ring of live slots, or the blocks the prefill keeps. */
typedef struct state_s {
    ring_t ring;
    uintptr_t *keep;
} state_t;

static void state_setup(state_t *st, void *ctx, const target_ops_t *ops, const scenario_t *sc, const size_t *sizes)
{
    memset(st, 0, sizeof *st);
    switch (sc->kind) {
    case KIND_HIT:
        if (sc->cached)
            st->keep = prefill(ctx, ops);
        ops->hit(ctx, sc->size, 10000);
        break;
    case KIND_CHURN:
        st->ring.n = sc->ring;
        st->ring.slot = calloc(sc->ring, sizeof *st->ring.slot);
        if (!st->ring.slot)
            bench_die("out of memory");
        st->ring.sizes = sizes;
        ops->churn(ctx, &st->ring, 8 * sc->ring);
        break;
    case KIND_TRACE:
        ops->trace(ctx, sc->trace, 2);
        break;
    }
}

static double state_run(state_t *st, void *ctx, const target_ops_t *ops, const scenario_t *sc, uint64_t units,
                        uint64_t pairs)
{
    uint64_t ns = 0;
    switch (sc->kind) {
    case KIND_HIT:
        ns = ops->hit(ctx, sc->size, units);
        break;
    case KIND_CHURN:
        ns = ops->churn(ctx, &st->ring, units);
        break;
    case KIND_TRACE:
        ns = ops->trace(ctx, sc->trace, units);
        break;
    }
    return (double)ns / (double)pairs;
}

static void state_teardown(state_t *st, void *ctx, const target_ops_t *ops)
{
    if (st->ring.slot) {
        ring_drain(ctx, ops->release, &st->ring);
        free(st->ring.slot);
    }
    if (st->keep) {
        for (size_t i = 0; i < BENCH_CACHED; i++)
            ops->release(ctx, st->keep[i]);
        free(st->keep);
    }
}

static void run_scenario(const opts_t *o, const scenario_t *sc, result_t *res)
{
    static size_t sizes[BENCH_SIZES];
    if (sc->kind == KIND_CHURN)
        draw_sizes(sizes, sc);
    memset(res, 0, sizeof *res);
    bench_load_t l0 = bench_load_now();

    core_target_t ct;
    core_target_init(&ct, 0, sc->how, sc->observe, sc->conf, sc->history);
    je_target_t jt = {0}, jn = {JE_TCACHE_NONE};
    state_t core_st, je_st, jn_st;
    state_setup(&core_st, &ct, &core_ops, sc, sizes);
    if (o->have_je) {
        state_setup(&je_st, &jt, &je_ops, sc, sizes);
        state_setup(&jn_st, &jn, &je_ops, sc, sizes);
    }

    uint64_t pairs;
    uint64_t units = run_units(sc, o->pairs, &pairs);
    core_stats_t before, after;
    core_stats_get(ct.d, &before);
    /* interleaved, so that drift on the machine touches every column alike */
    for (int r = 0; r < o->runs; r++) {
        res->core.v[res->core.n++] = state_run(&core_st, &ct, &core_ops, sc, units, pairs);
        if (o->have_je) {
            res->je.v[res->je.n++] = state_run(&je_st, &jt, &je_ops, sc, units, pairs);
            res->je_notc.v[res->je_notc.n++] = state_run(&jn_st, &jn, &je_ops, sc, units, pairs);
        }
    }
    core_stats_get(ct.d, &after);
    res->cached_blocks = cached_blocks(ct.d);
    res->pairs = pairs * (uint64_t)o->runs;
    res->hits = after.num_cache_hits - before.num_cache_hits;
    res->device_allocs = after.num_device_alloc - before.num_device_alloc;
    res->fences = after.num_fences - before.num_fences;

    state_teardown(&core_st, &ct, &core_ops);
    if (o->have_je) {
        state_teardown(&je_st, &jt, &je_ops);
        state_teardown(&jn_st, &jn, &je_ops);
    }
    core_target_fini(&ct);
    bench_load_t l1 = bench_load_now();
    res->others = bench_load_others(&l0, &l1);
}

/* ------------------------------------------------------------------------
 * Thread scaling: one thread on device 0, then two threads on devices 0
 * and 1 (each its own core_dev_t, created by the main thread as a program's
 * first cudaMalloc would), the 4 KiB hit pair.
 * ---------------------------------------------------------------------- */

typedef struct worker_s {
    pthread_t tid;
    atomic_int *ready; /* threads at the start line */
    int nthreads;
    void *ctx;
    const target_ops_t *ops;
    uint64_t pairs;
    uint64_t t0, t1;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    w->ops->hit(w->ctx, 4 * KiB, 10000); /* warm-up */
    /* A spinning start: a thread blocked in a barrier is woken on its
     * waker's CPU and may wait there for a time slice, long enough to run
     * the two threads one after the other.  Spinning keeps both runnable,
     * so the scheduler spreads them over both CPUs before the clock starts. */
    atomic_fetch_add(w->ready, 1);
    while (atomic_load(w->ready) < w->nthreads)
        ;
    w->t0 = bench_now_ns();
    w->ops->hit(w->ctx, 4 * KiB, w->pairs);
    w->t1 = bench_now_ns();
    return NULL;
}

/* Pairs per second of nthreads threads, each on ctx[i]. */
static double threads_throughput(int nthreads, void **ctx, const target_ops_t *ops, uint64_t pairs)
{
    worker_t w[2];
    atomic_int ready = 0;
    for (int i = 0; i < nthreads; i++) {
        w[i] = (worker_t){.ready = &ready, .nthreads = nthreads, .ctx = ctx[i], .ops = ops, .pairs = pairs};
        if (pthread_create(&w[i].tid, NULL, worker_main, &w[i]) != 0)
            bench_die("pthread_create failed");
    }
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(w[i].tid, NULL);
        t0 = w[i].t0 < t0 ? w[i].t0 : t0;
        t1 = w[i].t1 > t1 ? w[i].t1 : t1;
    }
    return (double)nthreads * (double)pairs * 1e9 / (double)(t1 - t0);
}

typedef struct scaling_s {
    bench_series_t one, two, ratio; /* Mpairs/s, Mpairs/s, two/one */
    double others;                  /* CPUs other processes kept busy meanwhile */
} scaling_t;

/* use_je: jemalloc's default path instead of the core; one_device: both
 * threads on device 0 (one lock), for comparison. */
static void run_threads(const opts_t *o, bool use_je, bool one_device, scaling_t *s)
{
    memset(s, 0, sizeof *s);
    bench_load_t l0 = bench_load_now();
    core_target_t ct[2];
    je_target_t jt[2] = {{0}, {0}};
    void *ctx[2];
    for (int i = 0; i < 2; i++) {
        if (use_je) {
            ctx[i] = &jt[i];
        } else {
            core_target_init(&ct[i], i, CORE_FREE_NOW, false, NULL, 0);
            ctx[i] = &ct[one_device ? 0 : i];
        }
    }
    const target_ops_t *ops = use_je ? &je_ops : &core_ops;
    for (int r = 0; r < o->runs; r++) {
        double one = threads_throughput(1, ctx, ops, o->pairs) / 1e6;
        double two = threads_throughput(2, ctx, ops, o->pairs) / 1e6;
        s->one.v[s->one.n++] = one;
        s->two.v[s->two.n++] = two;
        s->ratio.v[s->ratio.n++] = two / one;
    }
    if (!use_je)
        for (int i = 0; i < 2; i++)
            core_target_fini(&ct[i]);
    bench_load_t l1 = bench_load_now();
    s->others = bench_load_others(&l0, &l1);
}

/* ------------------------------------------------------------------------
 * Output
 * ---------------------------------------------------------------------- */

static void print_header(const opts_t *o)
{
    char model[256];
    bench_cpu_model(model, sizeof model);
    printf("bench_core: %d runs per scenario, >= %llu pairs per run; CPU: %s, %ld online\n", o->runs,
           (unsigned long long)o->pairs, model, sysconf(_SC_NPROCESSORS_ONLN));
    printf("ns per allocate+free pair, median (min-max); ratio = core median / jemalloc median\n\n");
    printf("| scenario | core | jemalloc | ratio | jemalloc, no tcache | ratio | cached blocks | core fast-path hits | "
           "others' CPUs |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
}

static void print_row(const scenario_t *sc, const result_t *r)
{
    char c[64], j[64], n[64], rj[16] = "-", rn[16] = "-";
    bench_series_fmt(c, sizeof c, &r->core);
    bench_series_fmt(j, sizeof j, &r->je);
    bench_series_fmt(n, sizeof n, &r->je_notc);
    if (r->je.n) {
        snprintf(rj, sizeof rj, "%.2f", bench_series_median(&r->core) / bench_series_median(&r->je));
        snprintf(rn, sizeof rn, "%.2f", bench_series_median(&r->core) / bench_series_median(&r->je_notc));
    }
    printf("| %s | %s | %s | %s | %s | %s | %zu | %.1f%%", sc->name, c, j, rj, n, rn, r->cached_blocks,
           100.0 * (double)r->hits / (double)r->pairs);
    if (r->device_allocs)
        printf(" (%llu segment allocs)", (unsigned long long)r->device_allocs);
    if (r->fences)
        printf(" (%.1f pairs per fence)", (double)r->pairs / (double)r->fences);
    printf(" | %.2f |\n", r->others);
    fflush(stdout);
}

/* The what-if at an OOM over a full history: `events` allocator calls of
 * churn (256 live slots, log-uniform 512 B - 64 MiB, fenced frees) on a
 * device sized so that the last request fails, then core_whatif with 2
 * threads and a 60 s budget.  Prints its time and the settings tried. */
static void run_whatif(size_t events, int threads)
{
    core_target_t ct;
    core_target_init(&ct, 0, CORE_FREE_FENCED, false, NULL, events);
    ct.mem.capacity = (size_t)2 << 30;
    uint64_t rng = 42;
    uintptr_t slot[256] = {0};
    size_t calls = 0;
    while (calls + 1 < events) {
        size_t k = rng_next(&rng) % 256;
        if (slot[k]) {
            core_free(ct.d, slot[k], CORE_FREE_FENCED, 0);
            slot[k] = 0;
        } else {
            double l = log(512.0) + (double)(rng_next(&rng) % 1000000) / 1e6 * (log(64.0 * MiB) - log(512.0));
            slot[k] = core_malloc(ct.d, (size_t)exp(l), 0, NULL);
        }
        calls++;
    }
    /* the last request: within what the live bytes leave (so that the
     * settings are replayed), and more than the cache can place */
    core_stats_t st;
    core_stats_get(ct.d, &st);
    size_t live = (size_t)st.requested_bytes[CORE_POOL_ALL].current, req = 0;
    core_oom_t oom;
    for (int pct = 90; pct < 100; pct++) {
        req = (ct.mem.capacity - live) / 100 * (size_t)pct;
        uintptr_t p = core_malloc(ct.d, req, 0, &oom);
        if (!p)
            break;
        core_free(ct.d, p, CORE_FREE_FENCED, 0);
        req = 0;
    }
    if (!req)
        bench_die("the what-if's last request did not fail");
    core_whatif_opts_t wo = {oom.device_free + oom.reserved, oom.device_total, 60.0, threads, NULL};
    core_whatif_t w;
    uint64_t t0 = bench_now_ns();
    int rc = core_whatif(ct.d, &oom, &wo, &w);
    double t = (double)(bench_now_ns() - t0) * 1e-9;
    size_t tried = 0, fit = 0;
    for (size_t i = 0; i < w.nrows; i++)
        tried += w.rows[i].tried, fit += w.rows[i].fits;
    printf("| %zu | %d | %.3f s | %zu of %zu | %zu | %s | %s |\n", (size_t)w.events, threads, t, tried, w.nrows, fit,
           rc == CORE_WHATIF_RAN ? (w.reproduced ? "yes" : "no") : "not run", w.cut_short ? "yes" : "no");
    fflush(stdout);
    for (size_t k = 0; k < 256; k++)
        if (slot[k])
            core_free(ct.d, slot[k], CORE_FREE_FENCED, 0);
    core_target_fini(&ct);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_core [-r RUNS] [-n PAIRS] [-d SIZES_DIR] [-s NAME]... [-J] [-h]\n"
               "  -r RUNS   timed runs per scenario (default 7; median, min and max are reported)\n"
               "  -n PAIRS  allocate+free pairs per run (default 1000000)\n"
               "  -d DIR    where sizes_<trace>.txt are (default " BENCH_SIZES_DIR ")\n"
               "  -s NAME   only the scenarios NAME matches (a glob: 'hit_*'; repeatable; 'threads' too)\n"
               "  -J        leave jemalloc out\n");
}

int main(int argc, char **argv)
{
    opts_t o = {.runs = 7, .pairs = 1000000, .sizes_dir = BENCH_SIZES_DIR};
    bool no_je = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "-J") == 0) {
            no_je = true;
        } else if (v && strcmp(a, "-r") == 0) {
            o.runs = atoi(v), i++;
        } else if (v && strcmp(a, "-n") == 0) {
            o.pairs = strtoull(v, NULL, 0), i++;
        } else if (v && strcmp(a, "-d") == 0) {
            o.sizes_dir = v, i++;
        } else if (v && strcmp(a, "-s") == 0 && o.nonly < 16) {
            o.only[o.nonly++] = v, i++;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (o.runs < 1 || o.runs > MAX_RUNS || o.pairs < 1)
        bench_die("-r must be 1..%d and -n at least 1", MAX_RUNS);
    o.have_je = !no_je && je_load(argv);

    static bench_trace_t traces[16];
    size_t ntraces = bench_traces_find(o.sizes_dir, traces, 16);

    scenario_t sc[32] = {
        {"hit_4k", "allocate 4 KiB, free it", KIND_HIT, .size = 4 * KiB},
        {"hit_8m", "allocate 8 MiB, free it", KIND_HIT, .size = 8 * MiB},
        {"hit_4k_10k", "hit_4k with 10,000 other free blocks cached", KIND_HIT, .size = 4 * KiB,
         .cached = BENCH_CACHED},
        {"fenced_4k", "hit_4k, freed with CORE_FREE_FENCED", KIND_HIT, .size = 4 * KiB, .how = CORE_FREE_FENCED},
        {"fenced_8m", "hit_8m, freed with CORE_FREE_FENCED", KIND_HIT, .size = 8 * MiB, .how = CORE_FREE_FENCED},
        {"churn_small", "1024 live slots, uniform 512 B - 64 KiB", KIND_CHURN, .ring = 1024, .lo = 512, .hi = 64 * KiB},
        {"churn_mixed", "256 live slots, log-uniform 512 B - 64 MiB", KIND_CHURN, .ring = 256, .lo = 512,
         .hi = 64 * MiB, .log_uniform = true},
        {"hit_4k_ring", "hit_4k, recording the snapshot event ring", KIND_HIT, .size = 4 * KiB, .observe = true},
        {"hit_8m_ring", "hit_8m, recording the snapshot event ring", KIND_HIT, .size = 8 * MiB, .observe = true},
        /* expandable segments: the hit pair in mapped memory, and churn that maps pages */
        {"hit_4k_exp", "hit_4k with expandable_segments:true", KIND_HIT, .size = 4 * KiB,
         .conf = "expandable_segments:true"},
        {"hit_8m_exp", "hit_8m with expandable_segments:true", KIND_HIT, .size = 8 * MiB,
         .conf = "expandable_segments:true"},
        {"churn_mixed_exp", "churn_mixed with expandable_segments:true", KIND_CHURN, .ring = 256, .lo = 512,
         .hi = 64 * MiB, .log_uniform = true, .conf = "expandable_segments:true"},
        /* the history the interposer keeps for the what-if (CUCACHE_HISTORY's default) */
        {"hit_4k_hist", "hit_4k, keeping the history", KIND_HIT, .size = 4 * KiB, .history = BENCH_HISTORY},
        {"hit_8m_hist", "hit_8m, keeping the history", KIND_HIT, .size = 8 * MiB, .history = BENCH_HISTORY},
        {"churn_mixed_hist", "churn_mixed, keeping the history", KIND_CHURN, .ring = 256, .lo = 512, .hi = 64 * MiB,
         .log_uniform = true, .history = BENCH_HISTORY},
    };
    size_t nsc = 15;
    static char trace_exp_names[16][1600];
    for (size_t i = 0; i < ntraces && nsc < 31; i++) {
        sc[nsc++] = (scenario_t){traces[i].name, "a real trace's allocations and frees, in order", KIND_TRACE,
                                 .trace = &traces[i]};
        snprintf(trace_exp_names[i], sizeof trace_exp_names[i], "%s_exp", traces[i].name);
        sc[nsc++] = (scenario_t){trace_exp_names[i], "the same with expandable_segments:true", KIND_TRACE,
                                 .trace = &traces[i], .conf = "expandable_segments:true"};
    }

    print_header(&o);
    double hit4 = 0, hit4_ratio = 0, hit8 = 0;
    for (size_t i = 0; i < nsc; i++) {
        if (!bench_selected(o.only, o.nonly, sc[i].name))
            continue;
        result_t r;
        run_scenario(&o, &sc[i], &r);
        print_row(&sc[i], &r);
        if (strcmp(sc[i].name, "hit_4k") == 0) {
            hit4 = bench_series_median(&r.core);
            hit4_ratio = r.je.n ? hit4 / bench_series_median(&r.je) : 0;
        }
        if (strcmp(sc[i].name, "hit_8m") == 0)
            hit8 = bench_series_median(&r.core);
    }
    printf("\n");
    for (size_t i = 0; i < nsc; i++)
        if (bench_selected(o.only, o.nonly, sc[i].name))
            printf("  %-22s %s\n", sc[i].name, sc[i].what);

    double scale = 0, scale_others = 0;
    if (bench_selected(o.only, o.nonly, "threads")) {
        scaling_t s[3];
        static const char *const rows[3] = {"core, devices 0 and 1", "core, both on device 0 (one lock)",
                                            "jemalloc (2 threads, own tcaches)"};
        printf("\nthread scaling, hit_4k: 1 thread on device 0 vs 2 threads on devices 0 and 1 "
               "(Mpairs/s, median (min-max))\n\n");
        printf("| allocator | 1 thread | 2 threads | speed-up | others' CPUs |\n|---|---:|---:|---:|---:|\n");
        for (int k = 0; k < (o.have_je ? 3 : 2); k++) {
            run_threads(&o, k == 2, k == 1, &s[k]);
            char a[64], b[64], c[64];
            bench_series_fmt(a, sizeof a, &s[k].one), bench_series_fmt(b, sizeof b, &s[k].two);
            bench_series_fmt(c, sizeof c, &s[k].ratio);
            printf("| %s | %s | %s | %sx | %.2f |\n", rows[k], a, b, c, s[k].others);
            fflush(stdout);
        }
        scale = bench_series_median(&s[0].ratio);
        scale_others = s[0].others;
    }

    if (bench_selected(o.only, o.nonly, "whatif")) {
        printf("\nthe what-if at an OOM (core_whatif): the current settings and the candidates replayed over the "
               "history\n\n| calls replayed | threads | time | settings replayed | settings that fit | failure "
               "reproduced | "
               "cut short |\n|---:|---:|---:|---:|---:|---|---|\n");
        run_whatif((size_t)1 << 18, 2);
        run_whatif(1000000, 1);
        run_whatif(1000000, 2);
    }

    printf("\ntargets (issue 3):\n");
    if (hit4 > 0) {
        printf("  cache-hit pair <= 50 ns:           hit_4k %.1f ns: %s\n", hit4, hit4 <= 50 ? "met" : "MISSED");
        if (hit8 > 0)
            printf("                                     hit_8m %.1f ns: %s\n", hit8, hit8 <= 50 ? "met" : "MISSED");
        if (hit4_ratio > 0)
            printf("  within 1.5x of jemalloc:           hit_4k %.2fx: %s\n", hit4_ratio,
                   hit4_ratio <= 1.5 ? "met" : "MISSED");
    }
    if (scale > 0)
        printf("  2 threads on 2 devices >= 1.7x:    %.2fx: %s%s\n", scale, scale >= 1.7 ? "met" : "MISSED",
               scale_others > 0.1 ? " (other processes were busy: measure again on a quiet machine)" : "");

    for (size_t i = 0; i < ntraces; i++) {
        free(traces[i].ops);
        free(traces[i].live);
    }
    return 0;
}
