/*
 * Proves cucache's behaviour during CUDA graph capture on a non-blocking
 * stream (Relaxed and ThreadLocal modes, and through the _ptsz entry
 * points): cudaMalloc is served from a private pool -- never a default-pool
 * block freed before the capture, and its memory is neither handed to
 * allocations made after the capture nor released by cucache_empty_cache
 * while the graph may replay it -- cudaMallocAsync/cudaFreeAsync on the
 * capturing stream pass through to CUDA (they become graph nodes, cucache
 * does not count them), frees during the capture (of capture-time and of
 * older blocks) are accepted, and the capture still ends with cudaSuccess
 * and a graph that runs correctly twice: cucache made no illegal call into
 * the capture.  The same through the driver's capture calls, and while
 * another thread (in ThreadLocal mode, which CUDA allows) allocates and
 * frees during a Global capture.
 *
 * Seen to fail: without LD_PRELOAD the first check fails ("cucache's API ...
 * is not in this process").
 */
#include "itest.h"

#include <string.h>

typedef struct capture_case {
    enum cudaStreamCaptureMode mode;
    bool ptsz; /* begin and end through the _ptsz entry points */
} capture_case_t;

static cudaError_t begin(const capture_case_t *c, cudaStream_t s)
{
    return c->ptsz ? cudaStreamBeginCapture_ptsz(s, c->mode) : cudaStreamBeginCapture(s, c->mode);
}

static cudaError_t end(const capture_case_t *c, cudaStream_t s, cudaGraph_t *g)
{
    return c->ptsz ? cudaStreamEndCapture_ptsz(s, g) : cudaStreamEndCapture(s, g);
}

static void run_capture(const capture_case_t *c)
{
    itest_require_cucache();
    const size_t n = 32 * MIB, m = 4096, n2 = 3 * MIB;
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    itest_defer_stream(s);
    unsigned char *hp = NULL, *ha = NULL;
    SIM_OK(cudaMallocHost((void **)&hp, m));
    SIM_OK(cudaMallocHost((void **)&ha, m));
    memset(hp, 0, m);
    memset(ha, 0, m);

    /* default-pool blocks, freed and reusable before the capture, and one live */
    void *qa = NULL, *qb = NULL, *r = NULL;
    SIM_OK(cudaMalloc(&qa, n));
    SIM_OK(cudaMalloc(&qb, m));
    SIM_OK(cudaMalloc(&r, m));
    SIM_OK(cudaFree(qa));
    SIM_OK(cudaFree(qb));
    SIM_OK(cudaDeviceSynchronize());
    int64_t live0 = itest_stat(0, "allocation.all.current");

    SIM_OK(begin(c, s));
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    SIM_OK(cudaStreamIsCapturing(s, &st));
    assert_int_equal(st, cudaStreamCaptureStatusActive);

    void *p = NULL, *p2 = NULL, *p3 = NULL, *a = NULL;
    SIM_OK(cudaMalloc(&p, n));
    SIM_OK(cudaMalloc(&p2, m));
    assert_non_null(p);
    assert_non_null(p2);
    if (itest_overlap(p, n, qa, n) || itest_overlap(p2, m, qb, m)) {
        print_error("cudaMalloc during capture got %p / %p: default-pool blocks %p / %p freed before the capture\n", p,
                    p2, qa, qb);
        fail();
    }
    assert_int_equal(itest_stat(0, "allocation.all.current"), live0 + 2);
    SIM_OK(cudaMemsetAsync(p, 0x5A, n, s));
    SIM_OK(cudaMemcpyAsync(hp, p, m, cudaMemcpyDeviceToHost, s));

    /* stream-ordered allocation on the capturing stream: CUDA's graph nodes */
    int64_t hits0 = itest_stat(0, "num_cache_hits");
    SIM_OK(cudaMallocAsync(&a, n2, s));
    assert_non_null(a);
    assert_int_equal(itest_stat(0, "allocation.all.current"), live0 + 2);
    assert_int_equal(itest_stat(0, "num_cache_hits"), hits0);
    SIM_OK(cudaMemsetAsync(a, 0x6B, n2, s));
    SIM_OK(cudaMemcpyAsync(ha, a, m, cudaMemcpyDeviceToHost, s));
    SIM_OK(cudaFreeAsync(a, s));
    assert_int_equal(itest_stat(0, "allocation.all.current"), live0 + 2);

    /* frees during the capture: a capture-time block and an older one */
    SIM_OK(cudaFree(p2));
    SIM_OK(cudaMalloc(&p3, m));
    assert_false(itest_overlap(p3, m, qb, m));
    SIM_OK(cudaFree(r));

    SIM_OK(cudaStreamIsCapturing(s, &st));
    assert_int_equal(st, cudaStreamCaptureStatusActive);
    cudaGraph_t graph = NULL;
    SIM_OK(end(c, s, &graph));
    assert_non_null(graph);
    simtest_settle();
    assert_int_equal(simtest_check_byte(hp, m, 0), -1); /* captured work did not run */

    /* the graph still replays into p: freeing p after the capture must not
     * hand its memory to anyone else */
    SIM_OK(cudaFree(p));
    SIM_OK(cudaDeviceSynchronize());
    void *z = NULL;
    SIM_OK(cudaMalloc(&z, n));
    if (itest_overlap(z, n, p, n)) {
        print_error("cudaMalloc after the capture got %p, inside the capture-time block %p the graph uses\n", z, p);
        fail();
    }
    itest_put(z, n, 77);

    cudaGraphExec_t exec = NULL;
    SIM_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int run = 0; run < 2; run++) {
        memset(hp, 0, m);
        memset(ha, 0, m);
        SIM_OK(cudaGraphLaunch(exec, s));
        SIM_OK(cudaStreamSynchronize(s));
        assert_int_equal(simtest_check_byte(hp, m, 0x5A), -1);
        assert_int_equal(simtest_check_byte(ha, m, 0x6B), -1);
    }
    itest_expect(z, n, 77);
    SIM_OK(cudaFree(z));
    SIM_OK(cudaDeviceSynchronize());

    /* empty_cache gives the default pool's free segments back, not the
     * private pool's (the graph below replays into p's segment, which the
     * simulated device checks); freed blocks read as freed memory either
     * way */
    int64_t reserved0 = itest_stat(0, "reserved_bytes.all.current");
    assert_int_equal(itest_empty_cache(0), 0);
    assert_true(itest_stat(0, "reserved_bytes.all.current") >= (int64_t)n);
    assert_true(itest_stat(0, "reserved_bytes.all.current") <= reserved0);
    CUdeviceptr base = 0;
    size_t size = 0;
    CU_EXPECT(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)p), CUDA_ERROR_NOT_FOUND);
    CU_EXPECT(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)qa), CUDA_ERROR_NOT_FOUND);
    /* and the graph still runs */
    SIM_OK(cudaGraphLaunch(exec, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(simtest_check_byte(hp, m, 0x5A), -1);

    SIM_OK(cudaGraphExecDestroy(exec));
    SIM_OK(cudaGraphDestroy(graph));
    SIM_OK(cudaFree(p3));
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaFreeHost(hp));
    SIM_OK(cudaFreeHost(ha));
    SIM_OK(cudaDeviceSynchronize());
}

static void test_capture_relaxed(void **state)
{
    (void)state;
    capture_case_t c = {cudaStreamCaptureModeRelaxed, false};
    run_capture(&c);
}

static void test_capture_thread_local(void **state)
{
    (void)state;
    capture_case_t c = {cudaStreamCaptureModeThreadLocal, false};
    run_capture(&c);
}

static void test_capture_relaxed_ptsz(void **state)
{
    (void)state;
    capture_case_t c = {cudaStreamCaptureModeRelaxed, true};
    run_capture(&c);
}

/* The same through the driver: cuStreamBeginCapture_v2 (or its _ptsz
 * entry point) on a non-blocking stream, cuMemAlloc_v2 from a private pool, cuMemAllocAsync/cuMemFreeAsync
 * on the capturing stream passed to CUDA, cuStreamEndCapture succeeds. */
static void capture_through_the_driver(bool ptsz)
{
    itest_require_cucache();
    const size_t n = 16 * MIB, m = 4096;
    CUstream s = NULL;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    itest_defer_stream((cudaStream_t)s);
    unsigned char *h = NULL;
    CU_OK(cuMemAllocHost_v2((void **)&h, m));
    memset(h, 0, m);
    CUdeviceptr q = 0, p = 0, a = 0;
    CU_OK(cuMemAlloc_v2(&q, n));
    CU_OK(cuMemFree_v2(q));
    CU_OK(cuCtxSynchronize());
    int64_t live0 = itest_stat(0, "allocation.all.current");
    CU_OK(ptsz ? cuStreamBeginCapture_v2_ptsz(s, CU_STREAM_CAPTURE_MODE_RELAXED)
               : cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU_OK(cuMemAlloc_v2(&p, n));
    if (itest_overlap((void *)(uintptr_t)p, n, (void *)(uintptr_t)q, n)) {
        print_error("cuMemAlloc_v2 during capture got %p, the default-pool block freed before the capture\n",
                    (void *)(uintptr_t)p);
        fail();
    }
    CU_OK(cuMemAllocAsync(&a, n, s));
    assert_int_equal(itest_stat(0, "allocation.all.current"), live0 + 1);
    CU_OK(cuMemsetD8Async(a, 0x29, n, s));
    CU_OK(cuMemcpyDtoHAsync_v2(h, a, m, s));
    CU_OK(cuMemFreeAsync(a, s));
    CUgraph graph = NULL;
    CU_OK(ptsz ? cuStreamEndCapture_ptsz(s, &graph) : cuStreamEndCapture(s, &graph));
    assert_non_null(graph);
    CUgraphExec exec = NULL;
    CU_OK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    CU_OK(cuGraphLaunch(exec, s));
    CU_OK(cuStreamSynchronize(s));
    assert_int_equal(simtest_check_byte(h, m, 0x29), -1);
    CU_OK(cuGraphExecDestroy(exec));
    CU_OK(cuGraphDestroy(graph));
    CU_OK(cuMemFree_v2(p));
    CU_OK(cuMemFreeHost(h));
    CU_OK(cuStreamDestroy_v2(s));
}

static void test_capture_through_the_driver(void **state)
{
    (void)state;
    capture_through_the_driver(false);
}

static void test_capture_through_the_driver_ptsz(void **state)
{
    (void)state;
    capture_through_the_driver(true);
}

typedef struct churn {
    int ok, refused, other;
} churn_t;

/* Another thread's allocations, in ThreadLocal capture mode (CUDA allows
 * its cudaMalloc during another thread's Global capture): cached sizes, and
 * sizes that need new segments. */
static void churn_fn(void *arg)
{
    churn_t *c = arg;
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
    if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess)
        c->other++;
    static const size_t sz[] = {4096, MIB, 6 * MIB, 48 * MIB};
    for (int r = 0; r < 10; r++)
        for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
            void *p = NULL;
            cudaError_t rc = cudaMalloc(&p, sz[i] + (size_t)r * 4096);
            if (rc == cudaSuccess) {
                c->ok++;
                if (cudaFree(p) != cudaSuccess)
                    c->other++;
            } else if (rc == cudaErrorStreamCaptureUnsupported) {
                c->refused++;
            } else {
                c->other++;
            }
            (void)cudaGetLastError();
        }
    if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess)
        c->other++;
}

/* While the main thread captures in Global mode, another thread in
 * ThreadLocal mode allocates and frees, which CUDA allows: every call
 * succeeds, and nothing cucache does for them (new segments, frees that
 * would need fences) invalidates the capture. */
static void test_other_thread_during_global_capture(void **state)
{
    (void)state;
    itest_require_cucache();
    static const size_t warm[] = {4096, MIB, 6 * MIB};
    for (size_t i = 0; i < sizeof warm / sizeof warm[0]; i++) {
        void *p = NULL;
        SIM_OK(cudaMalloc(&p, warm[i] + 10 * 4096));
        SIM_OK(cudaFree(p));
    }
    SIM_OK(cudaDeviceSynchronize());
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    itest_defer_stream(s);
    unsigned char *h = NULL;
    void *d = NULL;
    SIM_OK(cudaMallocHost((void **)&h, 4096));
    SIM_OK(cudaMalloc(&d, 4096));
    memset(h, 0, 4096);
    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    SIM_OK(cudaMemsetAsync(d, 0x31, 4096, s));
    SIM_OK(cudaMemcpyAsync(h, d, 4096, cudaMemcpyDeviceToHost, s));
    churn_t c = {0, 0, 0};
    simtest_thread_t *t = simtest_thread_start(churn_fn, &c);
    simtest_thread_finish(t);
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    SIM_OK(cudaStreamIsCapturing(s, &st));
    cudaGraph_t graph = NULL;
    cudaError_t rc = cudaStreamEndCapture(s, &graph);
    if (st != cudaStreamCaptureStatusActive || rc != cudaSuccess || !graph) {
        print_error("the Global capture was invalidated while another thread allocated (status %d, end %d %s; "
                    "%d served, %d refused, %d other)\n",
                    (int)st, (int)rc, cudaGetErrorName(rc), c.ok, c.refused, c.other);
        fail();
    }
    assert_int_equal(c.other, 0);
    assert_int_equal(c.refused, 0);
    cudaGraphExec_t exec = NULL;
    SIM_OK(cudaGraphInstantiate(&exec, graph, 0));
    SIM_OK(cudaGraphLaunch(exec, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(simtest_check_byte(h, 4096, 0x31), -1);
    SIM_OK(cudaGraphExecDestroy(exec));
    SIM_OK(cudaGraphDestroy(graph));
    SIM_OK(cudaFree(d));
    SIM_OK(cudaFreeHost(h));
    SIM_OK(cudaStreamDestroy(s));
}

/* After the captures, the default pool still caches and serves. */
static void test_default_pool_after_captures(void **state)
{
    (void)state;
    itest_require_cucache();
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 5 * MIB));
    SIM_OK(cudaFree(p));
    SIM_OK(cudaDeviceSynchronize());
    unsigned long allocs0 = itest_dev_allocs();
    SIM_OK(cudaMalloc(&p, 5 * MIB));
    assert_int_equal(itest_dev_allocs(), allocs0);
    itest_put(p, 5 * MIB, 3);
    itest_expect(p, 5 * MIB, 3);
    SIM_OK(cudaFree(p));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        ITEST(test_capture_relaxed),
        ITEST(test_capture_thread_local),
        ITEST(test_capture_relaxed_ptsz),
        ITEST(test_capture_through_the_driver),
        ITEST(test_capture_through_the_driver_ptsz),
        ITEST(test_other_thread_during_global_capture),
        ITEST(test_default_pool_after_captures),
    };
    return ITEST_RUN("interpose.capture", tests, itest_group_setup);
}
