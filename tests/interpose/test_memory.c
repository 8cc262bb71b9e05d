/*
 * Proves that under cucache every allocation holds its own data (sizes 1 B
 * to 64 MiB, no two live blocks overlap, four threads at once included),
 * that a cudaFree'd block is served again from the cache once the program
 * synchronises the device and a cudaFreeAsync'd one at once on its stream
 * (hits grow while the simulated device's allocation count stays flat) on
 * the legacy, per-thread and created streams and through the _ptsz entry
 * points; that a block freed while some stream may still use it is not
 * handed out early (cudaFree returns without waiting, the next cudaMalloc
 * gets other memory; cudaFreeAsync's block is not taken by another stream),
 * and is waited for rather than failed when memory is short
 * (cudaMemGetInfo has test_meminfo.c).
 *
 * Seen to fail: without LD_PRELOAD every cucache check fails with "cucache's
 * API ... is not in this process" (the two pure data tests pass); with
 * CUCACHE_CONF=reuse:stream test_fenced_free_waits_for_the_streams gets the
 * block a stream still writes and test_pending_block_... is served before
 * the stream's work ran; with CUCACHE_CONF=reuse:sync the fenced test sees
 * cudaFree wait for the streams.
 */
#include "itest.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define LEGACY ((cudaStream_t)0)

/* ---- sizes and data -------------------------------------------------- */

static const size_t sizes[] = {1,
                               2,
                               3,
                               255,
                               256,
                               511,
                               512,
                               513,
                               4095,
                               4096,
                               65537,
                               MIB - 1,
                               MIB,
                               MIB + 1,
                               2 * MIB,
                               2 * MIB + 3,
                               10 * MIB,
                               10 * MIB + 512,
                               20 * MIB + 7,
                               33 * MIB,
                               64 * MIB};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void expect_disjoint(void *const *p, const size_t *n, size_t count)
{
    for (size_t i = 0; i < count; i++)
        for (size_t j = i + 1; j < count; j++)
            if (itest_overlap(p[i], n[i], p[j], n[j])) {
                print_error("live blocks overlap: %p (%zu bytes) and %p (%zu bytes)\n", p[i], n[i], p[j], n[j]);
                fail();
            }
}

static void test_every_size_holds_its_data(void **state)
{
    (void)state;
    void *p[NSIZES];
    size_t n[NSIZES];
    /* round 1: in increasing order, all live at once */
    for (size_t i = 0; i < NSIZES; i++) {
        n[i] = sizes[i];
        p[i] = NULL;
        SIM_OK(cudaMalloc(&p[i], n[i]));
        assert_non_null(p[i]);
        assert_int_equal((uintptr_t)p[i] % 256, 0);
        itest_put(p[i], n[i], (unsigned)i + 1);
    }
    expect_disjoint(p, n, NSIZES);
    for (size_t i = 0; i < NSIZES; i++)
        itest_expect(p[i], n[i], (unsigned)i + 1);

    /* free every other block; the survivors keep their data while the freed
     * ones are reused by round 2 */
    for (size_t i = 0; i < NSIZES; i += 2)
        SIM_OK(cudaFree(p[i]));
    SIM_OK(cudaDeviceSynchronize());
    /* round 2: the freed (even) slots again, from the last one down, each
     * with the size of its mirror slot */
    for (size_t i = NSIZES; i-- > 0;) {
        if (i % 2)
            continue;
        n[i] = sizes[NSIZES - 1 - i];
        p[i] = NULL;
        SIM_OK(cudaMalloc(&p[i], n[i]));
        assert_non_null(p[i]);
        assert_int_equal((uintptr_t)p[i] % 256, 0);
        itest_put(p[i], n[i], (unsigned)i + 101);
    }
    expect_disjoint(p, n, NSIZES);
    for (size_t i = 0; i < NSIZES; i++)
        itest_expect(p[i], n[i], (unsigned)i + (i % 2 ? 1 : 101));
    for (size_t i = 0; i < NSIZES; i++)
        SIM_OK(cudaFree(p[i]));
}

/* The cache is observable: a malloc/free loop costs no device allocation. */
static void test_malloc_free_loop_hits(void **state)
{
    (void)state;
    static const size_t loop_sizes[] = {512, 4097, MIB, 8 * MIB, 33 * MIB};
    enum { N = sizeof loop_sizes / sizeof loop_sizes[0], ROUNDS = 100 };
    void *p[N];
    /* warm up: the cache gets what the loop needs */
    for (size_t i = 0; i < N; i++)
        SIM_OK(cudaMalloc(&p[i], loop_sizes[i]));
    for (size_t i = 0; i < N; i++)
        SIM_OK(cudaFree(p[i]));
    SIM_OK(cudaDeviceSynchronize());

    int64_t live0 = itest_stat(0, "allocation.all.current");
    int64_t hits0 = itest_stat(0, "num_cache_hits");
    int64_t dallocs0 = itest_stat(0, "num_device_alloc");
    unsigned long allocs0 = itest_dev_allocs(), frees0 = itest_dev_frees();
    for (int r = 0; r < ROUNDS; r++) {
        for (size_t i = 0; i < N; i++) {
            p[i] = NULL;
            SIM_OK(cudaMalloc(&p[i], loop_sizes[i]));
            assert_non_null(p[i]);
        }
        if (r % 10 == 0) {
            expect_disjoint(p, loop_sizes, N);
            itest_put(p[r % N], loop_sizes[r % N], (unsigned)r + 7);
            itest_expect(p[r % N], loop_sizes[r % N], (unsigned)r + 7);
        }
        assert_int_equal(itest_stat(0, "allocation.all.current"), live0 + (int64_t)N);
        for (size_t i = 0; i < N; i++)
            SIM_OK(cudaFree(p[i]));
        SIM_OK(cudaDeviceSynchronize()); /* the program synchronises: freed blocks are reusable */
    }
    assert_int_equal(itest_dev_allocs(), allocs0);
    assert_int_equal(itest_dev_frees(), frees0);
    assert_int_equal(itest_stat(0, "num_device_alloc"), dallocs0);
    assert_true(itest_stat(0, "num_cache_hits") >= hits0 + (int64_t)N * ROUNDS);
    assert_int_equal(itest_stat(0, "allocation.all.current"), live0);
}

/* When memory is short, the allocator reuses a pending block rather than
 * failing: a 600 MiB block is freed while a stream still writes it (behind
 * a gate that opens by itself after 300 ms), and the next 600 MiB request
 * on the 1 GiB device can only be that block.  Under reuse:fenced it
 * waits for the block's fence on the host, as cudaFree would have; under
 * reuse:ordered (the default) it hands the block out at once, the device
 * ordered after the fence (the new owner's copy waits for the writer). */
static void test_pending_block_is_waited_for_when_memory_is_short(void **state)
{
    (void)state;
    const size_t n = 600 * MIB;
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *p = NULL, *q = NULL;
    SIM_OK(cudaMalloc(&p, n));
    itest_defer_free(p);
    SIM_OK(cudaDeviceSynchronize());
    int64_t ooms0 = itest_have_cucache() ? itest_stat(0, "num_ooms") : 0;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    SIM_OK(cudaMemsetAsync(p, 0x7E, MIB, s));
    simtest_gate_open_after(g, 300);
    SIM_OK(cudaFree(p));
    unsigned long allocs0 = itest_dev_allocs();
    int64_t hand_outs0 = itest_have_cucache() ? itest_stat(0, "num_fence_hand_outs") : 0;
    SIM_OK(cudaMalloc(&q, n));
    itest_defer_free(q);
    if (itest_hands_out())
        assert_int_equal(itest_stat(0, "num_fence_hand_outs"), hand_outs0 + 1);
    else
        assert_true(simtest_gate_passed(g)); /* it waited for the stream's work */
    itest_put(q, 4096, 33);
    itest_expect(q, 4096, 33);
    SIM_OK(cudaFree(q));
    SIM_OK(cudaStreamDestroy(s));
    itest_require_cucache();
    assert_int_equal(itest_dev_allocs(), allocs0); /* the pending block itself */
    assert_int_equal(itest_stat(0, "num_ooms"), ooms0);
}

/* ---- stream-ordered allocation --------------------------------------- */

enum stream_kind {
    ON_LEGACY0,
    ON_LEGACY,
    ON_PER_THREAD,
    ON_PTSZ_ENTRY,
    ON_CREATED,
    ON_NONBLOCKING,
    ON_PRIORITY,
    KINDS
};

static const char *const kind_names[KINDS] = {
    "stream 0",         "cudaStreamLegacy",    "cudaStreamPerThread", "_ptsz entry points",
    "cudaStreamCreate", "non-blocking stream", "stream with priority"};

typedef struct on_stream {
    cudaStream_t s;
    bool ptsz; /* call the _ptsz entry points (stream 0 is then per-thread) */
    bool created;
} on_stream_t;

static on_stream_t stream_of(enum stream_kind k)
{
    on_stream_t o = {LEGACY, false, false};
    int lo = 0, hi = 0;
    switch (k) {
    case ON_LEGACY0:
        break;
    case ON_LEGACY:
        o.s = cudaStreamLegacy;
        break;
    case ON_PER_THREAD:
        o.s = cudaStreamPerThread;
        break;
    case ON_PTSZ_ENTRY:
        o.ptsz = true;
        break;
    case ON_CREATED:
        SIM_OK(cudaStreamCreate(&o.s));
        o.created = true;
        break;
    case ON_NONBLOCKING:
        SIM_OK(cudaStreamCreateWithFlags(&o.s, cudaStreamNonBlocking));
        o.created = true;
        break;
    default:
        SIM_OK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
        SIM_OK(cudaStreamCreateWithPriority(&o.s, cudaStreamNonBlocking, hi));
        o.created = true;
        break;
    }
    return o;
}

static cudaError_t malloc_on(const on_stream_t *o, void **p, size_t n)
{
    return o->ptsz ? cudaMallocAsync_ptsz(p, n, o->s) : cudaMallocAsync(p, n, o->s);
}

static cudaError_t free_on(const on_stream_t *o, void *p)
{
    return o->ptsz ? cudaFreeAsync_ptsz(p, o->s) : cudaFreeAsync(p, o->s);
}

static cudaError_t copy_on(const on_stream_t *o, void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    return o->ptsz ? cudaMemcpyAsync_ptsz(dst, src, n, kind, o->s) : cudaMemcpyAsync(dst, src, n, kind, o->s);
}

static cudaError_t memset_on(const on_stream_t *o, void *p, int v, size_t n)
{
    return o->ptsz ? cudaMemsetAsync_ptsz(p, v, n, o->s) : cudaMemsetAsync(p, v, n, o->s);
}

static cudaError_t sync_on(const on_stream_t *o)
{
    return o->ptsz ? cudaStreamSynchronize_ptsz(o->s) : cudaStreamSynchronize(o->s);
}

static void gate_on(const on_stream_t *o, simtest_gate_t *g)
{
    if (o->ptsz)
        simtest_gate_block_ptsz(g, o->s);
    else
        simtest_gate_block(g, o->s);
}

/* Data through a stream-ordered block, in stream order. */
static void roundtrip(const on_stream_t *o, size_t n, unsigned seed)
{
    unsigned char *h = NULL, *back = NULL;
    SIM_OK(cudaMallocHost((void **)&h, n));
    SIM_OK(cudaMallocHost((void **)&back, n));
    simtest_fill(h, n, seed);
    memset(back, 0, n);
    void *d = NULL;
    SIM_OK(malloc_on(o, &d, n));
    assert_non_null(d);
    SIM_OK(copy_on(o, d, h, n, cudaMemcpyHostToDevice));
    SIM_OK(copy_on(o, back, d, n, cudaMemcpyDeviceToHost));
    SIM_OK(free_on(o, d));
    SIM_OK(sync_on(o));
    assert_int_equal(simtest_check(back, n, seed, 0), -1);
    SIM_OK(cudaFreeHost(h));
    SIM_OK(cudaFreeHost(back));
}

/* On every kind of stream: the data round trip, then a malloc/memset/free
 * loop queued behind a closed gate, which must be served from the cache
 * alone (a block freed on a stream is reusable at once on that stream),
 * then the gate opens and stream order keeps it race-free. */
static void test_malloc_async_on_every_stream(void **state)
{
    (void)state;
    enum { ROUNDS = 40 };
    const size_t n = 256 * KIB + 3, m = 12 * MIB;
    for (int k = 0; k < KINDS; k++) {
        on_stream_t o = stream_of((enum stream_kind)k);
        roundtrip(&o, n, 40 + (unsigned)k);
        roundtrip(&o, m, 50 + (unsigned)k);
        /* warm up this stream's pool with both sizes */
        void *a = NULL, *b = NULL;
        SIM_OK(malloc_on(&o, &a, n));
        SIM_OK(malloc_on(&o, &b, m));
        SIM_OK(free_on(&o, a));
        SIM_OK(free_on(&o, b));
        SIM_OK(sync_on(&o));

        simtest_gate_t *g = simtest_gate_new();
        gate_on(&o, g);
        unsigned long allocs0 = itest_dev_allocs();
        int64_t hits0 = itest_stat(0, "num_cache_hits");
        for (int r = 0; r < ROUNDS; r++) {
            a = b = NULL;
            SIM_OK(malloc_on(&o, &a, n));
            SIM_OK(malloc_on(&o, &b, m));
            assert_non_null(a);
            assert_non_null(b);
            assert_false(itest_overlap(a, n, b, m));
            SIM_OK(memset_on(&o, a, r, n));
            SIM_OK(memset_on(&o, b, r, m));
            SIM_OK(free_on(&o, a));
            SIM_OK(free_on(&o, b));
        }
        unsigned long allocs1 = itest_dev_allocs();
        int64_t hits1 = itest_stat(0, "num_cache_hits");
        simtest_gate_open(g);
        SIM_OK(sync_on(&o));
        if (allocs1 != allocs0 || hits1 < hits0 + 2 * ROUNDS) {
            print_error("%s: %d malloc/free rounds took %lu device allocations and %lld cache hits\n", kind_names[k],
                        ROUNDS, allocs1 - allocs0, (long long)(hits1 - hits0));
            fail();
        }
        if (o.created)
            SIM_OK(cudaStreamDestroy(o.s));
    }
}

static void ptsz_loop(void *arg)
{
    int *ok = arg;
    on_stream_t o = {LEGACY, true, false};
    roundtrip(&o, 100000, 61);
    o.ptsz = false;
    o.s = cudaStreamPerThread;
    roundtrip(&o, 100000, 62);
    *ok = 1;
}

/* The per-thread default stream of another thread. */
static void test_malloc_async_per_thread_stream_of_a_thread(void **state)
{
    (void)state;
    int ok = 0;
    simtest_thread_t *t = simtest_thread_start(ptsz_loop, &ok);
    simtest_thread_finish(t);
    assert_int_equal(ok, 1);
}

/* A block freed with cudaFreeAsync on s1 while s1 still uses it (gate
 * closed) is not given to an allocation on s2. */
static void test_free_async_not_reused_by_another_stream_early(void **state)
{
    (void)state;
    itest_require_cucache(); /* CUDA's own pool may reuse it behind a dependency */
    const size_t n = 2 * MIB;
    cudaStream_t s1 = NULL, s2 = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    SIM_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    simtest_gate_t *g = simtest_gate_new();
    void *p = NULL, *q = NULL;
    SIM_OK(cudaMallocAsync(&p, n, s1));
    simtest_gate_block(g, s1);
    SIM_OK(cudaMemsetAsync(p, 0xAA, n, s1)); /* pending behind the gate */
    SIM_OK(cudaFreeAsync(p, s1));
    SIM_OK(cudaMallocAsync(&q, n, s2));
    assert_non_null(q);
    if (itest_overlap(p, n, q, n)) {
        print_error("cudaMallocAsync on s2 got %p, inside the block %p that s1 still writes\n", q, p);
        fail();
    }
    SIM_OK(cudaMemsetAsync(q, 0xBB, n, s2));
    SIM_OK(cudaStreamSynchronize(s2));
    simtest_gate_open(g);
    SIM_OK(cudaStreamSynchronize(s1));
    unsigned char *h = malloc(n);
    assert_non_null(h);
    SIM_OK(cudaMemcpy(h, q, n, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check_byte(h, n, 0xBB), -1);
    free(h);
    SIM_OK(cudaFreeAsync(q, s2));
    SIM_OK(cudaStreamSynchronize(s2));
    SIM_OK(cudaStreamDestroy(s1));
    SIM_OK(cudaStreamDestroy(s2));
}

/* ---- fenced cudaFree ------------------------------------------------- */

typedef struct queued_work {
    simtest_gate_t *g;
    void *p;
    size_t n;
} queued_work_t;

static void gate_and_memset_ptds(void *arg)
{
    queued_work_t *w = arg;
    simtest_gate_block_ptsz(w->g, LEGACY);
    SIM_OK(cudaMemsetAsync_ptsz(w->p, 0xAA, w->n, LEGACY));
}

enum user_kind { USER_NONBLOCKING, USER_BLOCKING, USER_PER_THREAD, USERS };

/* A block cudaFree'd while a stream still writes it (behind a closed gate)
 * is not handed out again until that work is done: cucache's cudaFree
 * returns without waiting for the streams, the next cudaMalloc gets other
 * memory (or, under reuse:ordered, the same block with the device ordered
 * after the late write), and the late write never lands over the new
 * owner's data.  The gate opens by itself
 * after 3 s, so that a cudaFree that does wait (reuse:sync, or no cucache)
 * fails the test instead of hanging it. */
static void test_fenced_free_waits_for_the_streams(void **state)
{
    (void)state;
    itest_require_cucache();
    const size_t n = 4 * MIB;
    for (int u = 0; u < USERS; u++) {
        cudaStream_t user = NULL, writer = NULL;
        SIM_OK(cudaStreamCreateWithFlags(&writer, cudaStreamNonBlocking));
        unsigned char *h = NULL, *back = NULL;
        SIM_OK(cudaMallocHost((void **)&h, n));
        SIM_OK(cudaMallocHost((void **)&back, n));
        simtest_fill(h, n, 70 + (unsigned)u);
        void *p = NULL, *q = NULL;
        SIM_OK(cudaMalloc(&p, n));
        SIM_OK(cudaDeviceSynchronize());
        simtest_gate_t *g = simtest_gate_new();
        simtest_thread_t *t = NULL;
        queued_work_t w = {g, p, n};
        if (u == USER_PER_THREAD) {
            t = simtest_thread_start(gate_and_memset_ptds, &w);
        } else {
            SIM_OK(cudaStreamCreateWithFlags(&user, u == USER_NONBLOCKING ? cudaStreamNonBlocking : cudaStreamDefault));
            simtest_gate_block(g, user);
            SIM_OK(cudaMemsetAsync(p, 0xAA, n, user));
        }
        simtest_gate_open_after(g, 3000);
        SIM_OK(cudaFree(p));
        SIM_OK(cudaMalloc(&q, n));
        bool closed = !simtest_gate_passed(g);
        assert_non_null(q);
        if (!closed) {
            print_error("user %d: cudaFree + cudaMalloc took until the gate opened (3 s): cudaFree waited for the "
                        "streams\n",
                        u);
            fail();
        }
        /* reuse:ordered may hand the block out at once (with one stream of
         * the program's own, or none, a hit does), the device ordered after
         * the late write: the new owner's write then waits on the device */
        bool handed = itest_overlap(p, n, q, n);
        if (handed && !itest_hands_out()) {
            print_error("user %d: cudaMalloc got %p, inside the freed block %p that a stream still writes\n", u, q, p);
            fail();
        }
        /* write q on a stream that waits for nothing of the program's, then
         * let the late write run */
        SIM_OK(cudaMemcpyAsync(q, h, n, cudaMemcpyHostToDevice, writer));
        if (handed) {
            if (cudaStreamQuery(writer) != cudaErrorNotReady) {
                print_error("user %d: the new owner's write of the handed-out block %p ran before the old owner's\n",
                            u, q);
                fail();
            }
        } else {
            SIM_OK(cudaStreamSynchronize(writer));
        }
        simtest_gate_open(g);
        SIM_OK(cudaDeviceSynchronize());
        if (t)
            simtest_thread_finish(t);
        SIM_OK(cudaMemcpy(back, q, n, cudaMemcpyDeviceToHost));
        assert_int_equal(simtest_check(back, n, 70 + (unsigned)u, 0), -1);
        SIM_OK(cudaFree(q));
        if (user)
            SIM_OK(cudaStreamDestroy(user));
        SIM_OK(cudaStreamDestroy(writer));
        SIM_OK(cudaFreeHost(h));
        SIM_OK(cudaFreeHost(back));
        SIM_OK(cudaDeviceSynchronize());
    }
}

/* ---- threads ---------------------------------------------------------- */

typedef struct worker {
    unsigned id;
    int failures;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    /* fewer rounds under ThreadSanitizer, whose checked byte loops make a
     * round fifty times slower: the threads still overlap on every path */
    enum { BLOCKS = 6, ROUNDS = SIMTEST_TSAN ? 8 : 30 };
    static const size_t wsizes[BLOCKS] = {700, 4096, 100000, MIB + 5, 3 * MIB, 11 * MIB};
    unsigned char *h = malloc(11 * MIB), *back = malloc(11 * MIB);
    if (!h || !back)
        abort();
    for (int r = 0; r < ROUNDS; r++) {
        void *p[BLOCKS];
        for (int i = 0; i < BLOCKS; i++) {
            p[i] = NULL;
            if (cudaMalloc(&p[i], wsizes[i]) != cudaSuccess || !p[i]) {
                w->failures++;
                continue;
            }
            simtest_fill(h, wsizes[i], w->id * 1000 + (unsigned)(r * BLOCKS + i));
            if (cudaMemcpy(p[i], h, wsizes[i], cudaMemcpyHostToDevice) != cudaSuccess)
                w->failures++;
        }
        for (int i = 0; i < BLOCKS; i++) {
            if (!p[i])
                continue;
            if (cudaMemcpy(back, p[i], wsizes[i], cudaMemcpyDeviceToHost) != cudaSuccess ||
                simtest_check(back, wsizes[i], w->id * 1000 + (unsigned)(r * BLOCKS + i), 0) != -1)
                w->failures++;
            if (cudaFree(p[i]) != cudaSuccess)
                w->failures++;
        }
    }
    free(h);
    free(back);
    return NULL;
}

/* Four threads allocating, writing, checking and freeing at once never see
 * each other's bytes. */
static void test_threads_keep_their_data(void **state)
{
    (void)state;
    enum { THREADS = 4 };
    pthread_t th[THREADS];
    worker_t w[THREADS];
    int64_t live0 = itest_stat(0, "allocation.all.current");
    for (unsigned i = 0; i < THREADS; i++) {
        w[i] = (worker_t){i + 1, 0};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    assert_int_equal(itest_stat(0, "allocation.all.current"), live0);
}

/* ---- edges ------------------------------------------------------------ */

static void test_malloc_zero_free_null_and_null_out_param(void **state)
{
    (void)state;
    void *p = (void *)0x1;
    SIM_OK(cudaMalloc(&p, 0));
    assert_null(p);
    SIM_OK(cudaFree(NULL));
    SIM_EXPECT(cudaMalloc(NULL, 4096), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    /* still usable */
    SIM_OK(cudaMalloc(&p, 4096));
    itest_put(p, 4096, 90);
    itest_expect(p, 4096, 90);
    SIM_OK(cudaFree(p));
    itest_require_cucache();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        ITEST(test_every_size_holds_its_data),
        ITEST(test_malloc_free_loop_hits),
        ITEST(test_pending_block_is_waited_for_when_memory_is_short),
        ITEST(test_malloc_async_on_every_stream),
        ITEST(test_malloc_async_per_thread_stream_of_a_thread),
        ITEST(test_free_async_not_reused_by_another_stream_early),
        ITEST(test_fenced_free_waits_for_the_streams),
        ITEST(test_threads_keep_their_data),
        ITEST(test_malloc_zero_free_null_and_null_out_param),
    };
    return ITEST_RUN("interpose.memory", tests, itest_group_setup);
}
