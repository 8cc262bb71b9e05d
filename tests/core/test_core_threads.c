/*
 * Proves that the caching core is safe for concurrent callers: threads on
 * one device, and threads on two devices (each with its own backend, or
 * sharing one), allocating and freeing at random on their own and shared
 * streams, with record_stream, private pools routed per thread,
 * synchronisations and a checker running alongside, never receive
 * overlapping live allocations, always find their own allocations with
 * core_lookup, get blocks only from segments of their stream and routed
 * pool, and leave every invariant intact.  Run under ThreadSanitizer by
 * scripts/test (build-tsan, suite core).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "coretest.h"

#define NTHREADS_MAX 8
#define HOLD 48          /* live allocations a thread keeps at most */
#define MAX_RECORDS 4096 /* allocations a thread records for the final checks */
#define MAX_SEGS 8192

typedef struct seg_rec_s {
    uintptr_t addr;
    size_t size;
    core_stream_t stream;
    int pool_id;
    bool freed;
} seg_rec_t;

/* One device under test, with the segments its observer saw (written with
 * the device lock held, read after the threads joined). */
typedef struct tdev_s {
    core_dev_t *d;
    mem_backend_t *m;
    seg_rec_t segs[MAX_SEGS];
    size_t nsegs;
    bool overflow;
} tdev_t;

static void dev_observe(void *ctx, const core_event_t *e)
{
    tdev_t *v = ctx;
    if (e->kind == CORE_EV_SEGMENT_ALLOC || e->kind == CORE_EV_SEGMENT_MAP) {
        /* a mapped run of an expandable segment serves its stream and pool
         * like a segment; runs are only added (membership is what is checked) */
        if (v->nsegs == MAX_SEGS) {
            v->overflow = true;
            return;
        }
        v->segs[v->nsegs++] = (seg_rec_t){e->addr, e->size, e->stream, e->pool_id, false};
    } else if (e->kind == CORE_EV_SEGMENT_FREE) {
        for (size_t i = v->nsegs; i-- > 0;)
            if (v->segs[i].addr == e->addr && !v->segs[i].freed) {
                v->segs[i].freed = true;
                break;
            }
    }
}

typedef struct alloc_rec_s {
    uintptr_t addr;
    size_t size;
    core_stream_t stream;
    int pool_id; /* the pool it was routed to */
} alloc_rec_t;

typedef struct worker_s {
    pthread_t tid;
    tdev_t *dev;
    int index;
    uint64_t rng;
    int ops;
    alloc_rec_t live[HOLD];
    int nlive;
    alloc_rec_t rec[MAX_RECORDS]; /* every allocation made (for the segment checks) */
    int nrec;
    char error[256];
} worker_t;

static atomic_int workers_running;
static pthread_barrier_t workers_start; /* every worker starts at once, to overlap */

static uint64_t wrnd(worker_t *w)
{
    uint64_t z = (w->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t wbelow(worker_t *w, uint64_t n)
{
    return wrnd(w) % n;
}

static size_t wsize(worker_t *w)
{
    uint64_t k = wbelow(w, 100);
    if (k < 75)
        return (size_t)wbelow(w, ((uint64_t)1 << wbelow(w, 21)) + 1);
    if (k < 95)
        return MiB + (size_t)wbelow(w, 9 * MiB);
    return 10 * MiB + (size_t)wbelow(w, 20 * MiB);
}

#define WFAIL(w, ...)                                                                                                  \
    do {                                                                                                               \
        snprintf((w)->error, sizeof(w)->error, __VA_ARGS__);                                                           \
        return NULL;                                                                                                   \
    } while (0)

static void *worker_run(void *arg)
{
    worker_t *w = arg;
    core_dev_t *d = w->dev->d;
    core_stream_t own = 100 + (core_stream_t)w->index;
    int pool = 0, routed = 0;
    for (int op = 0; op < w->ops; op++) {
        uint64_t k = wbelow(w, 100);
        if (k < 45 && w->nlive < HOLD) {
            core_stream_t s = wbelow(w, 4) ? own : 0; /* 0: shared by every thread */
            size_t size = wsize(w);
            uintptr_t p = core_malloc(d, size, s, NULL);
            if (!p)
                continue; /* out of memory under pressure is allowed */
            uintptr_t base = 0;
            size_t got = 0;
            core_stream_t st = 0;
            if (!core_lookup(d, p, &base, &got, &st) || base != p || got != size || st != s)
                WFAIL(w, "thread %d: core_lookup(0x%lx) after malloc(%zu)", w->index, (unsigned long)p, size);
            alloc_rec_t a = {p, size, s, routed};
            w->live[w->nlive++] = a;
            if (w->nrec < MAX_RECORDS)
                w->rec[w->nrec++] = a;
        } else if (k < 85 && w->nlive) {
            int i = (int)wbelow(w, (uint64_t)w->nlive);
            alloc_rec_t a = w->live[i];
            w->live[i] = w->live[--w->nlive];
            core_free_t how = (core_free_t)wbelow(w, 3);
            core_stream_t fs = how == CORE_FREE_AFTER_STREAM ? (wbelow(w, 2) ? own : 0) : a.stream;
            if (core_free(d, a.addr, how, fs) != CORE_FREED)
                WFAIL(w, "thread %d: core_free(0x%lx) of its own allocation", w->index, (unsigned long)a.addr);
        } else if (k < 88 && w->nlive) {
            if (core_record_stream(d, w->live[wbelow(w, (uint64_t)w->nlive)].addr, wbelow(w, 2) ? 0 : own) != 0)
                WFAIL(w, "thread %d: core_record_stream", w->index);
        } else if (k < 90) {
            /* private pools: this thread's own, routed on and off */
            if (!pool) {
                pool = core_pool_create(d);
                if (pool <= 0)
                    WFAIL(w, "thread %d: core_pool_create", w->index);
            }
            routed = wbelow(w, 2) ? pool : 0;
            if (core_pool_use(d, routed) != 0)
                WFAIL(w, "thread %d: core_pool_use(%d)", w->index, routed);
        } else if (k < 91 && pool) {
            if (core_pool_use(d, 0) != 0 || core_pool_destroy(d, pool) != 0)
                WFAIL(w, "thread %d: core_pool_destroy(%d)", w->index, pool);
            pool = routed = 0;
        } else if (k < 93) {
            mem_backend_complete_all(w->dev->m);
        } else if (k < 94) {
            core_synchronized(d);
        } else if (k < 95) {
            core_empty_cache(d, wbelow(w, 2) ? -1 : 0);
        } else if (k < 97) {
            core_usage_t u;
            core_usage(d, &u);
            if (u.cached_free > u.reserved || u.largest_free > u.cached_free)
                WFAIL(w, "thread %d: core_usage reserved %zu free %zu largest %zu", w->index, u.reserved, u.cached_free,
                      u.largest_free);
        } else if (k < 98) {
            core_stats_t s;
            core_stats_get(d, &s);
            if (s.allocated_bytes[CORE_POOL_ALL].current > s.reserved_bytes[CORE_POOL_ALL].current)
                WFAIL(w, "thread %d: allocated above reserved", w->index);
        } else if (w->nlive) {
            /* frees that are not ours to make: an interior pointer */
            alloc_rec_t *a = &w->live[wbelow(w, (uint64_t)w->nlive)];
            if (a->size > 600 && core_free(d, a->addr + 512, CORE_FREE_NOW, own) != CORE_NOT_MINE)
                WFAIL(w, "thread %d: an interior free was accepted", w->index);
        }
    }
    if (routed && core_pool_use(d, 0) != 0)
        WFAIL(w, "thread %d: core_pool_use(0)", w->index);
    return NULL;
}

static void *worker_main(void *arg)
{
    pthread_barrier_wait(&workers_start);
    worker_run(arg);
    atomic_fetch_sub(&workers_running, 1);
    return NULL;
}

static int cmp_rec(const void *x, const void *y)
{
    const alloc_rec_t *a = x, *b = y;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

/* No two live allocations overlap, across every thread given. */
static void check_no_overlap(worker_t *ws, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (size_t)ws[i].nlive;
    alloc_rec_t *all = test_calloc(total + 1, sizeof *all);
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < ws[i].nlive; j++)
            all[k++] = ws[i].live[j];
    qsort(all, k, sizeof *all, cmp_rec);
    for (size_t i = 1; i < k; i++) {
        size_t prev = all[i - 1].size ? all[i - 1].size : 1;
        if (all[i - 1].addr + prev > all[i].addr)
            fail_msg("live allocations overlap: 0x%lx (+%zu) and 0x%lx (+%zu)", (unsigned long)all[i - 1].addr,
                     all[i - 1].size, (unsigned long)all[i].addr, all[i].size);
    }
    test_free(all);
}

/* Every allocation came from a segment of its stream and of the pool its
 * thread routed to (each thread creates, routes to and destroys its own). */
static void check_segments(const tdev_t *v, const worker_t *ws, int n)
{
    assert_false(v->overflow);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < ws[i].nrec; j++) {
            const alloc_rec_t *a = &ws[i].rec[j];
            const seg_rec_t *found = NULL;
            for (size_t s = 0; s < v->nsegs && !found; s++)
                if (a->addr >= v->segs[s].addr && a->addr - v->segs[s].addr < v->segs[s].size)
                    found = &v->segs[s];
            if (!found)
                fail_msg("thread %d: 0x%lx in no segment", i, (unsigned long)a->addr);
            if (found->stream != a->stream)
                fail_msg("thread %d: 0x%lx for stream %lu in a segment of stream %lu", i, (unsigned long)a->addr,
                         (unsigned long)a->stream, (unsigned long)found->stream);
            if (found->pool_id != a->pool_id)
                fail_msg("thread %d: 0x%lx routed to pool %d in a segment of pool %d", i, (unsigned long)a->addr,
                         a->pool_id, found->pool_id);
        }
}

/* Runs nthreads workers spread over the devices, with core_check running
 * on the main thread until they finish. */
static void run_workers(tdev_t *devs, int ndevs, int nthreads, int ops, uint64_t seed)
{
    worker_t *ws = test_calloc((size_t)nthreads, sizeof *ws);
    atomic_store(&workers_running, nthreads);
    assert_int_equal(pthread_barrier_init(&workers_start, NULL, (unsigned)nthreads), 0);
    for (int i = 0; i < nthreads; i++) {
        ws[i].dev = &devs[i % ndevs];
        ws[i].index = i;
        ws[i].rng = seed * 1000003u + (uint64_t)i;
        ws[i].ops = ops;
        assert_int_equal(pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]), 0);
    }
    unsigned checks = 0;
    while (atomic_load(&workers_running) > 0) {
        for (int v = 0; v < ndevs; v++)
            CHECK(devs[v].d);
        checks++;
        sched_yield();
    }
    pthread_barrier_destroy(&workers_start);
    for (int i = 0; i < nthreads; i++) {
        assert_int_equal(pthread_join(ws[i].tid, NULL), 0);
        if (ws[i].error[0])
            fail_msg("%s", ws[i].error);
    }
    print_message("core_threads: %d threads on %d device(s), %d ops each, %u checks alongside\n", nthreads, ndevs, ops,
                  checks);
    for (int v = 0; v < ndevs; v++) {
        CHECK(devs[v].d);
        /* workers on this device only */
        worker_t *mine = test_calloc((size_t)nthreads, sizeof *mine);
        int n = 0;
        for (int i = 0; i < nthreads; i++)
            if (ws[i].dev == &devs[v])
                mine[n++] = ws[i];
        check_segments(&devs[v], mine, n);
        test_free(mine);
    }
    /* addresses are unique across devices only when they share a backend */
    if (ndevs == 1 || devs[0].m == devs[1].m) {
        check_no_overlap(ws, nthreads);
    } else {
        for (int v = 0; v < ndevs; v++) {
            worker_t *mine = test_calloc((size_t)nthreads, sizeof *mine);
            int n = 0;
            for (int i = 0; i < nthreads; i++)
                if (ws[i].dev == &devs[v])
                    mine[n++] = ws[i];
            check_no_overlap(mine, n);
            test_free(mine);
        }
    }
    /* the live ones are freed; the devices go back to empty */
    for (int i = 0; i < nthreads; i++)
        for (int j = 0; j < ws[i].nlive; j++)
            assert_int_equal(core_free(ws[i].dev->d, ws[i].live[j].addr, CORE_FREE_FENCED, 0), CORE_FREED);
    for (int v = 0; v < ndevs; v++) {
        core_synchronized(devs[v].d);
        core_empty_cache(devs[v].d, -1);
        CHECK(devs[v].d);
        core_stats_t s;
        core_stats_get(devs[v].d, &s);
        assert_int_equal(s.allocation[CORE_POOL_ALL].current, 0);
        assert_int_equal(s.active_bytes[CORE_POOL_ALL].current, 0);
    }
    test_free(ws);
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* devs[i] on backend ms[i] as device i. */
static tdev_t *devs_open_conf(int n, mem_backend_t **ms, const bool *auto_complete, const char *conf)
{
    tdev_t *devs = test_calloc((size_t)n, sizeof *devs);
    for (int i = 0; i < n; i++) {
        conf_t c;
        conf_defaults(&c);
        char err[256];
        if (conf && conf_parse(&c, conf, err, sizeof err) != 0)
            fail_msg("%s", err);
        core_backend_t be = mem_backend_vtable(ms[i]);
        devs[i].m = ms[i];
        devs[i].d = core_dev_new(&be, i, &c);
        assert_non_null(devs[i].d);
        core_set_observer(devs[i].d, dev_observe, &devs[i]);
        ms[i]->auto_complete = auto_complete[i];
    }
    return devs;
}

static tdev_t *devs_open(int n, mem_backend_t **ms, const bool *auto_complete)
{
    return devs_open_conf(n, ms, auto_complete, NULL);
}

static void devs_close(tdev_t *devs, int n)
{
    for (int i = 0; i < n; i++)
        core_dev_destroy(devs[i].d);
    test_free(devs);
}

static void test_threads_one_device(void **state)
{
    (void)state;
    mem_backend_t m;
    mem_backend_init(&m, 4 * GiB);
    mem_backend_t *ms[] = {&m};
    tdev_t *devs = devs_open(1, ms, (const bool[]){false});
    run_workers(devs, 1, 4, env_int("CORE_THREAD_OPS", 20000), 1);
    devs_close(devs, 1);
    assert_int_equal(m.used, 0);
    assert_int_equal(m.n_bad_free, 0);
    mem_backend_fini(&m);
}

/* Few bytes for many threads: the retry ladder, releases and OOMs race with
 * the hit path. */
static void test_threads_one_device_pressure(void **state)
{
    (void)state;
    mem_backend_t m;
    mem_backend_init(&m, 256 * MiB);
    mem_backend_t *ms[] = {&m};
    tdev_t *devs = devs_open(1, ms, (const bool[]){false});
    run_workers(devs, 1, 4, env_int("CORE_THREAD_OPS", 20000), 2);
    devs_close(devs, 1);
    assert_int_equal(m.used, 0);
    assert_int_equal(m.n_bad_free, 0);
    mem_backend_fini(&m);
}

/* The same with expandable segments: pages mapped and unmapped while other
 * threads hit. */
static void test_threads_one_device_pressure_expandable(void **state)
{
    (void)state;
    mem_backend_t m;
    mem_backend_init(&m, 256 * MiB);
    mem_backend_t *ms[] = {&m};
    tdev_t *devs = devs_open_conf(1, ms, (const bool[]){false}, "expandable_segments:true");
    run_workers(devs, 1, 4, env_int("CORE_THREAD_OPS", 20000), 5);
    devs_close(devs, 1);
    assert_int_equal(m.used, 0);
    assert_int_equal(m.n_bad_free + m.n_bad_unmap, 0);
    mem_backend_fini(&m);
}

static void test_threads_two_devices(void **state)
{
    (void)state;
    mem_backend_t m0, m1;
    mem_backend_init(&m0, 2 * GiB);
    mem_backend_init(&m1, 2 * GiB);
    mem_backend_t *ms[] = {&m0, &m1};
    tdev_t *devs = devs_open(2, ms, (const bool[]){true, false});
    run_workers(devs, 2, 4, env_int("CORE_THREAD_OPS", 20000), 3);
    devs_close(devs, 2);
    assert_int_equal(m0.used + m1.used, 0);
    assert_int_equal(m0.n_bad_free + m1.n_bad_free, 0);
    mem_backend_fini(&m0);
    mem_backend_fini(&m1);
}

static void test_threads_two_devices_shared_backend(void **state)
{
    (void)state;
    mem_backend_t m;
    mem_backend_init(&m, 2 * GiB);
    mem_backend_t *ms[] = {&m, &m};
    tdev_t *devs = devs_open(2, ms, (const bool[]){false, false});
    run_workers(devs, 2, 4, env_int("CORE_THREAD_OPS", 20000), 4);
    devs_close(devs, 2);
    assert_int_equal(m.used, 0);
    assert_int_equal(m.n_bad_free, 0);
    mem_backend_fini(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_one_device),
        cmocka_unit_test(test_threads_one_device_pressure),
        cmocka_unit_test(test_threads_one_device_pressure_expandable),
        cmocka_unit_test(test_threads_two_devices),
        cmocka_unit_test(test_threads_two_devices_shared_backend),
    };
    return cmocka_run_group_tests_name("core_threads", tests, NULL, NULL);
}
