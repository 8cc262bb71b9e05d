/*
 * Proves that cucache caches a program linked with the static runtime
 * (libcudart_static.a, nvcc's default): its cudaMalloc lives in the
 * executable, where no preload can replace it, and reaches the driver
 * through the runtime's dlsym("cuGetProcAddress_v2") -- cucache's resolver
 * -- so cudaMalloc/cudaFree and cudaMallocAsync/cudaFreeAsync (legacy and
 * per-thread) loops are hits with the device's allocation count flat, the
 * data holds, cudaMemGetInfo counts the cache as free, a capture is served
 * from a private pool and ends well, and a bad free is refused.
 *
 * Seen to fail: without LD_PRELOAD the data and placement checks pass and
 * every hit check fails.
 */
#include "itest.h"

#include <dlfcn.h>
#include <string.h>

static void test_runtime_is_in_the_executable(void **state)
{
    (void)state;
    Dl_info info;
    memset(&info, 0, sizeof info);
    assert_true(dladdr((void *)(uintptr_t)&cudaMalloc, &info) != 0);
    assert_non_null(info.dli_fname);
    if (strstr(info.dli_fname, "libcudart") || strstr(info.dli_fname, "libcucache")) {
        print_error("cudaMalloc lies in %s: the program is not the static-runtime one\n", info.dli_fname);
        fail();
    }
    assert_null(dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD));
    assert_null(dlopen("libcudart.so.12", RTLD_NOW | RTLD_NOLOAD));
    assert_non_null(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD));
    itest_require_cucache();
}

static void test_malloc_free_loop_hits(void **state)
{
    (void)state;
    enum { ROUNDS = 50 };
    static const size_t sz[] = {1000, MIB, 6 * MIB + 1, 30 * MIB};
    enum { N = sizeof sz / sizeof sz[0] };
    void *p[N];
    for (size_t i = 0; i < N; i++)
        SIM_OK(cudaMalloc(&p[i], sz[i]));
    for (size_t i = 0; i < N; i++)
        SIM_OK(cudaFree(p[i]));
    SIM_OK(cudaDeviceSynchronize());
    itest_require_cucache();
    unsigned long allocs0 = itest_dev_allocs(), frees0 = itest_dev_frees();
    int64_t hits0 = itest_stat(0, "num_cache_hits");
    for (int r = 0; r < ROUNDS; r++) {
        for (size_t i = 0; i < N; i++) {
            p[i] = NULL;
            SIM_OK(cudaMalloc(&p[i], sz[i]));
            assert_non_null(p[i]);
        }
        if (r % 10 == 0)
            for (size_t i = 0; i < N; i++) {
                itest_put(p[i], sz[i], (unsigned)(r + (int)i));
                itest_expect(p[i], sz[i], (unsigned)(r + (int)i));
            }
        for (size_t i = 0; i < N; i++)
            SIM_OK(cudaFree(p[i]));
        SIM_OK(cudaDeviceSynchronize());
    }
    unsigned long allocs = itest_dev_allocs() - allocs0, frees = itest_dev_frees() - frees0;
    int64_t hits = itest_stat(0, "num_cache_hits") - hits0;
    if (allocs != 0 || frees != 0 || hits < (int64_t)N * ROUNDS) {
        print_error("%d rounds of %d cudaMalloc/cudaFree: %lu device allocations, %lu device frees, %lld hits\n",
                    ROUNDS, N, allocs, frees, (long long)hits);
        fail();
    }
}

static void test_malloc_async_loop_hits(void **state)
{
    (void)state;
    enum { ROUNDS = 50 };
    const size_t n = 3 * MIB;
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    static const int kinds = 3; /* created stream, legacy, per-thread through _ptsz */
    for (int k = 0; k < kinds; k++) {
        cudaStream_t on = k == 0 ? s : NULL;
        void *p = NULL;
        unsigned char h[4096];
#define ALLOC(pp) (k == 2 ? cudaMallocAsync_ptsz((pp), n, on) : cudaMallocAsync((pp), n, on))
#define FREE(pp) (k == 2 ? cudaFreeAsync_ptsz((pp), on) : cudaFreeAsync((pp), on))
        SIM_OK(ALLOC(&p));
        SIM_OK(k == 2 ? cudaMemsetAsync_ptsz(p, 0x5C, n, on) : cudaMemsetAsync(p, 0x5C, n, on));
        SIM_OK(k == 2 ? cudaMemcpyAsync_ptsz(h, p, sizeof h, cudaMemcpyDeviceToHost, on)
                      : cudaMemcpyAsync(h, p, sizeof h, cudaMemcpyDeviceToHost, on));
        SIM_OK(FREE(p));
        SIM_OK(k == 2 ? cudaStreamSynchronize_ptsz(on) : cudaStreamSynchronize(on));
        assert_int_equal(simtest_check_byte(h, sizeof h, 0x5C), -1);
        itest_require_cucache();
        unsigned long allocs0 = itest_dev_allocs();
        int64_t hits0 = itest_stat(0, "num_cache_hits");
        for (int r = 0; r < ROUNDS; r++) {
            p = NULL;
            SIM_OK(ALLOC(&p));
            assert_non_null(p);
            SIM_OK(FREE(p));
        }
#undef ALLOC
#undef FREE
        SIM_OK(cudaDeviceSynchronize());
        unsigned long allocs = itest_dev_allocs() - allocs0;
        int64_t hits = itest_stat(0, "num_cache_hits") - hits0;
        if (allocs != 0 || hits < ROUNDS) {
            print_error("stream kind %d: %d cudaMallocAsync/cudaFreeAsync rounds: %lu device allocations, %lld hits\n",
                        k, ROUNDS, allocs, (long long)hits);
            fail();
        }
    }
    SIM_OK(cudaStreamDestroy(s));
}

static void test_meminfo_counts_the_cache_as_free(void **state)
{
    (void)state;
    const size_t n = 200 * MIB;
    SIM_OK(cudaDeviceSynchronize());
    size_t f0 = 0, t0 = 0, f1 = 0, f2 = 0;
    SIM_OK(cudaMemGetInfo(&f0, &t0));
    assert_int_equal(t0, ITEST_CAPACITY);
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, n));
    SIM_OK(cudaMemGetInfo(&f1, NULL));
    assert_true(f1 + n >= f0 - 2 * MIB && f1 + n <= f0 + 2 * MIB);
    SIM_OK(cudaFree(p));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaMemGetInfo(&f2, NULL));
    assert_true(f2 >= f0 - 2 * MIB && f2 <= f0 + 2 * MIB);
    assert_true(itest_stat(0, "reserved_bytes.all.current") >= (int64_t)n);
}

/* Capture through the static runtime: its cudaStreamBeginCapture and
 * cudaMalloc reach cucache's driver hooks, which serve the capture from a
 * private pool and keep it valid. */
static void test_capture(void **state)
{
    (void)state;
    itest_require_cucache();
    const size_t n = 12 * MIB;
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    itest_defer_stream(s);
    void *q = NULL, *p = NULL;
    SIM_OK(cudaMalloc(&q, n));
    SIM_OK(cudaFree(q));
    SIM_OK(cudaDeviceSynchronize());
    unsigned char h[4096];
    memset(h, 0, sizeof h);
    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    SIM_OK(cudaMalloc(&p, n));
    assert_false(itest_overlap(p, n, q, n));
    SIM_OK(cudaMemsetAsync(p, 0x2C, n, s));
    SIM_OK(cudaMemcpyAsync(h, p, sizeof h, cudaMemcpyDeviceToHost, s));
    cudaGraph_t graph = NULL;
    SIM_OK(cudaStreamEndCapture(s, &graph));
    assert_non_null(graph);
    cudaGraphExec_t exec = NULL;
    SIM_OK(cudaGraphInstantiate(&exec, graph, 0));
    SIM_OK(cudaGraphLaunch(exec, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(simtest_check_byte(h, sizeof h, 0x2C), -1);
    SIM_OK(cudaGraphExecDestroy(exec));
    SIM_OK(cudaGraphDestroy(graph));
    SIM_OK(cudaFree(p));
    SIM_OK(cudaStreamDestroy(s));
}

static void test_bad_free_is_refused(void **state)
{
    (void)state;
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, MIB));
    itest_put(p, MIB, 5);
    SIM_EXPECT(cudaFree((char *)p + 4096), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    itest_expect(p, MIB, 5);
    SIM_OK(cudaFree(p));
    SIM_OK(cudaDeviceSynchronize());
    SIM_EXPECT(cudaFree(p), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    itest_require_cucache();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        ITEST(test_runtime_is_in_the_executable),
        ITEST(test_malloc_free_loop_hits),
        ITEST(test_malloc_async_loop_hits),
        ITEST(test_meminfo_counts_the_cache_as_free),
        ITEST(test_capture),
        ITEST(test_bad_free_is_refused),
    };
    return ITEST_RUN("interpose.static", tests, itest_group_setup);
}
