/*
 * Proves cucache's out-of-memory behaviour: a request beyond the device
 * (runtime, driver, stream-ordered; absurd sizes included) returns
 * cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY and counts in
 * num_ooms; filling the device fails the same way, and afterwards a large
 * request is served by giving cached segments back to the device (no OOM
 * counted); with `limit_mb` (run as `test_interpose_oom limit` under
 * CUCACHE_CONF=limit_mb:256) cudaMemGetInfo's total is the limit, requests
 * beyond the limit fail although the device has room, and memory freed under
 * the limit is served again.
 *
 * Seen to fail: without LD_PRELOAD the return codes pass and every num_ooms
 * and limit check fails.
 */
#include "itest.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LIMIT (256 * MIB)

/* Writes a byte pattern with cudaMemset and reads the first and last KiB back. */
static void touch(void *p, size_t n, unsigned char v)
{
    unsigned char h[1024];
    SIM_OK(cudaMemset(p, v, n));
    size_t k = n < sizeof h ? n : sizeof h;
    SIM_OK(cudaMemcpy(h, p, k, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check_byte(h, k, v), -1);
    SIM_OK(cudaMemcpy(h, (char *)p + n - k, k, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check_byte(h, k, v), -1);
}

/* ---- beyond the device ------------------------------------------------ */

static void test_runtime_oom_beyond_capacity(void **state)
{
    (void)state;
    static const size_t huge[] = {2 * GIB, ITEST_CAPACITY + 1, (size_t)1 << 62, SIZE_MAX - 4095, SIZE_MAX};
    void *keep = NULL;
    SIM_OK(cudaMalloc(&keep, MIB)); /* the device has allocator state */
    int64_t ooms0 = itest_have_cucache() ? itest_stat(0, "num_ooms") : 0;
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        void *p = NULL;
        cudaError_t rc = cudaMalloc(&p, huge[i]);
        if (rc != cudaErrorMemoryAllocation) {
            print_error("cudaMalloc(%zu) returned %d (%s), pointer %p; expected cudaErrorMemoryAllocation\n", huge[i],
                        (int)rc, cudaGetErrorName(rc), p);
            fail();
        }
        (void)cudaGetLastError();
    }
    touch(keep, MIB, 0x42);
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 5 * MIB));
    touch(p, 5 * MIB, 0x43);
    SIM_OK(cudaFree(p));
    SIM_OK(cudaFree(keep));
    itest_require_cucache();
    assert_int_equal(itest_stat(0, "num_ooms"), ooms0 + (int64_t)(sizeof huge / sizeof huge[0]));
}

static void test_driver_and_async_oom(void **state)
{
    (void)state;
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int64_t ooms0 = itest_have_cucache() ? itest_stat(0, "num_ooms") : 0;
    CUdeviceptr x = 0;
    CU_EXPECT(cuMemAlloc_v2(&x, 2 * GIB), CUDA_ERROR_OUT_OF_MEMORY);
    CU_EXPECT(cuMemAllocAsync(&x, 2 * GIB, (CUstream)s), CUDA_ERROR_OUT_OF_MEMORY);
    void *p = NULL;
    SIM_EXPECT(cudaMallocAsync(&p, 2 * GIB, s), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    SIM_EXPECT(cudaMallocAsync(&p, 2 * GIB, cudaStreamPerThread), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    /* still usable */
    CU_OK(cuMemAlloc_v2(&x, MIB));
    touch((void *)(uintptr_t)x, MIB, 0x44);
    CU_OK(cuMemFree_v2(x));
    SIM_OK(cudaMallocAsync(&p, MIB, s));
    SIM_OK(cudaMemsetAsync(p, 0x45, MIB, s));
    SIM_OK(cudaFreeAsync(p, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaStreamDestroy(s));
    itest_require_cucache();
    assert_int_equal(itest_stat(0, "num_ooms"), ooms0 + 4);
}

/* Fill the device with 64 MiB blocks until cudaMalloc fails; free them; a
 * 512 MiB request then needs the cached segments given back, and gets them. */
static void test_fill_the_device_then_recover(void **state)
{
    (void)state;
    enum { MAX = 40 };
    const size_t n = 64 * MIB;
    void *p[MAX];
    int k = 0;
    cudaError_t rc = cudaSuccess;
    int64_t ooms0 = itest_have_cucache() ? itest_stat(0, "num_ooms") : 0;
    while (k < MAX) {
        p[k] = NULL;
        rc = cudaMalloc(&p[k], n);
        if (rc != cudaSuccess)
            break;
        itest_defer_free(p[k]);
        SIM_OK(cudaMemset(p[k], k, n));
        k++;
    }
    (void)cudaGetLastError();
    assert_int_equal(rc, cudaErrorMemoryAllocation);
    assert_true(k >= 10 && k <= 16);
    /* cucache gave every cached segment back before it failed: all it
     * still holds is the live blocks */
    if (itest_have_cucache()) {
        int64_t reserved = itest_stat(0, "reserved_bytes.all.current");
        int64_t allocated = itest_stat(0, "allocated_bytes.all.current");
        if (reserved != allocated) {
            print_error("cudaMalloc(%zu) failed after %d blocks while cucache still held %lld unused bytes\n", n, k,
                        (long long)(reserved - allocated));
            fail();
        }
    }
    for (int i = 0; i < k; i++) {
        unsigned char h[64];
        SIM_OK(cudaMemcpy(h, (char *)p[i] + n - sizeof h, sizeof h, cudaMemcpyDeviceToHost));
        assert_int_equal(simtest_check_byte(h, sizeof h, (unsigned char)i), -1);
    }
    /* a larger request fails too while the device is full */
    void *q = NULL;
    SIM_EXPECT(cudaMalloc(&q, 2 * n), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    for (int i = 0; i < k; i++)
        SIM_OK(cudaFree(p[i]));
    SIM_OK(cudaDeviceSynchronize());
    int64_t ooms1 = itest_have_cucache() ? itest_stat(0, "num_ooms") : 0;
    void *big = NULL;
    SIM_OK(cudaMalloc(&big, 512 * MIB));
    touch(big, 512 * MIB, 0x46);
    void *small = NULL;
    SIM_OK(cudaMalloc(&small, 4096));
    touch(small, 4096, 0x47);
    SIM_OK(cudaFree(small));
    SIM_OK(cudaFree(big));
    itest_require_cucache();
    assert_true(ooms1 >= ooms0 + 2);
    assert_int_equal(itest_stat(0, "num_ooms"), ooms1); /* the 512 MiB request was no OOM */
}

/* A request that fits only once the cache is emptied is served without
 * waiting for the program (no sync in between) and without an OOM. */
static void test_cached_segments_given_back_on_demand(void **state)
{
    (void)state;
    enum { K = 10 };
    void *p[K];
    for (int i = 0; i < K; i++)
        SIM_OK(cudaMalloc(&p[i], 50 * MIB));
    for (int i = 0; i < K; i++)
        itest_defer_free(p[i]);
    for (int i = 0; i < K; i++)
        SIM_OK(cudaFree(p[i]));
    int64_t ooms0 = itest_have_cucache() ? itest_stat(0, "num_ooms") : 0;
    void *big = NULL;
    SIM_OK(cudaMalloc(&big, 700 * MIB));
    touch(big, 700 * MIB, 0x48);
    SIM_OK(cudaFree(big));
    itest_require_cucache();
    assert_int_equal(itest_stat(0, "num_ooms"), ooms0);
}

/* ---- limit_mb ---------------------------------------------------------- */

static void expect_limit_conf(void)
{
    const char *conf = getenv("CUCACHE_CONF");
    if (!conf || strcmp(conf, "limit_mb:256") != 0) {
        print_error("the limit tests run under CUCACHE_CONF=limit_mb:256 (meson's interpose_oom_limit); got %s\n",
                    conf ? conf : "(unset)");
        fail();
    }
    itest_require_cucache();
}

static void expect_near(size_t got, size_t want, size_t tol, const char *what)
{
    size_t d = got > want ? got - want : want - got;
    if (d > tol) {
        print_error("%s: %zu, expected %zu within %zu\n", what, got, want, tol);
        fail();
    }
}

static void test_limit_is_the_total(void **state)
{
    (void)state;
    expect_limit_conf();
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 4096)); /* the device has allocator state */
    size_t f = 0, t = 0;
    SIM_OK(cudaMemGetInfo(&f, &t));
    assert_int_equal(t, LIMIT);
    assert_true(f <= t);
    expect_near(f, LIMIT, 2 * MIB, "free with 4 KiB allocated");
    size_t cf = 0, ct = 0;
    CU_OK(cuMemGetInfo_v2(&cf, &ct));
    assert_int_equal(ct, LIMIT);
    assert_int_equal(cf, f);
    size_t only = 0;
    SIM_OK(cudaMemGetInfo(NULL, &only));
    assert_int_equal(only, LIMIT);
    SIM_OK(cudaMemGetInfo(NULL, NULL));
    CU_OK(cuMemGetInfo_v2(NULL, NULL));
    SIM_OK(cudaFree(p));
}

static void test_limit_refuses_beyond_it(void **state)
{
    (void)state;
    expect_limit_conf();
    int64_t ooms0 = itest_stat(0, "num_ooms");
    void *p = NULL;
    SIM_EXPECT(cudaMalloc(&p, 300 * MIB), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    CUdeviceptr x = 0;
    CU_EXPECT(cuMemAlloc_v2(&x, 300 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
    SIM_EXPECT(cudaMallocAsync(&p, 300 * MIB, cudaStreamLegacy), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    assert_int_equal(itest_stat(0, "num_ooms"), ooms0 + 3);
    /* the device itself had room: a request under the limit works */
    SIM_OK(cudaMalloc(&p, 200 * MIB));
    touch(p, 200 * MIB, 0x50);
    SIM_OK(cudaFree(p));
}

static void test_limit_counts_what_is_held(void **state)
{
    (void)state;
    expect_limit_conf();
    const size_t n = 100 * MIB;
    void *a = NULL, *b = NULL, *c = NULL;
    SIM_OK(cudaMalloc(&a, n));
    SIM_OK(cudaMalloc(&b, n));
    size_t f = 0, t = 0;
    SIM_OK(cudaMemGetInfo(&f, &t));
    expect_near(f, LIMIT - 2 * n, 4 * MIB, "free with 200 MiB allocated");
    int64_t ooms0 = itest_stat(0, "num_ooms");
    SIM_EXPECT(cudaMalloc(&c, n), cudaErrorMemoryAllocation); /* 300 MiB > 256 MiB */
    (void)cudaGetLastError();
    assert_int_equal(itest_stat(0, "num_ooms"), ooms0 + 1);
    touch(a, n, 0x51);
    touch(b, n, 0x52);
    SIM_OK(cudaFree(a));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaMalloc(&c, n)); /* a's memory, under the limit again */
    touch(c, n, 0x53);
    touch(b, n, 0x52);
    SIM_OK(cudaFree(b));
    SIM_OK(cudaFree(c));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaMemGetInfo(&f, &t));
    expect_near(f, LIMIT, 2 * MIB, "free after freeing everything");
    /* 200 MiB in one piece: served from what is cached or after it went back */
    void *big = NULL;
    SIM_OK(cudaMalloc(&big, 2 * n));
    touch(big, 2 * n, 0x54);
    SIM_OK(cudaFree(big));
    assert_int_equal(itest_stat(0, "num_ooms"), ooms0 + 1);
}

/* cucache's own path fails (a 4 MiB request needs a 20 MiB segment and the
 * device has 12 MiB free) and the runtime's cudaMalloc then serves it: the
 * program saw no failure, so no OOM report and no OOM counted, one line
 * saying what happened, and num_fallback_served. */
static void test_fallback_served_is_not_an_oom(void **state)
{
    (void)state;
    itest_require_cucache();
    if (itest_expandable())
        skip(); /* 4 MiB is two pages there: cucache serves it itself */
    itest_empty_cache(0);
    enum { N = 46 };
    void *p[N] = {0};
    for (int i = 0; i < N; i++)
        SIM_OK(cudaMalloc(&p[i], 22 * MIB)); /* 1012 MiB in 22 MiB segments */
    int64_t ooms0 = itest_stat(0, "num_ooms"), fb0 = itest_stat(0, "num_fallback_served");
    void *q = NULL;
    char err[8192];
    itest_stderr_begin();
    cudaError_t rc = cudaMalloc(&q, 4 * MIB);
    itest_stderr_end(err, sizeof err);
    assert_int_equal(rc, cudaSuccess);
    touch(q, 4 * MIB, 0x61);
    assert_int_equal(itest_stat(0, "num_ooms"), ooms0);
    assert_int_equal(itest_stat(0, "num_fallback_served"), fb0 + 1);
    if (strstr(err, "CUDA out of memory"))
        fail_msg("an OOM report for a call that succeeded:\n%s", err);
    if (fb0 == 0 && !strstr(err, "the CUDA runtime's own allocator served it"))
        fail_msg("no line about the fallback:\n%s", err);
    SIM_OK(cudaFree(q));
    for (int i = 0; i < N; i++)
        SIM_OK(cudaFree(p[i]));
    itest_empty_cache(0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "limit") == 0) {
        const struct CMUnitTest limit_tests[] = {
            ITEST(test_limit_is_the_total),
            ITEST(test_limit_refuses_beyond_it),
            ITEST(test_limit_counts_what_is_held),
        };
        return ITEST_RUN("interpose.oom_limit", limit_tests, itest_group_setup);
    }
    const struct CMUnitTest tests[] = {
        ITEST(test_runtime_oom_beyond_capacity),   ITEST(test_driver_and_async_oom),
        ITEST(test_fill_the_device_then_recover),  ITEST(test_cached_segments_given_back_on_demand),
        ITEST(test_fallback_served_is_not_an_oom),
    };
    return ITEST_RUN("interpose.oom", tests, itest_group_setup);
}
