/*
 * Proves that device memory on the simulated device behaves like CUDA's:
 * alignment, capacity accounting through cudaMemGetInfo, non-sticky
 * out-of-memory and bad-free errors, copies and memsets that move real bytes
 * for every cudaMemcpyKind (bounds checked), pinned and managed host memory,
 * and cudaPointerGetAttributes.  Meson runs it with CUCACHE_SIM_CAPACITY=1G.
 */
#include "simtest.h"

#include <stdlib.h>
#include <string.h>

#define CAPACITY ((size_t)1 << 30) /* CUCACHE_SIM_CAPACITY=1G in meson.build */
#define MIB ((size_t)1 << 20)

static void *dev_alloc(size_t n)
{
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, n));
    assert_non_null(p);
    return p;
}

/* Upload a pattern, read it back, check it: the round trip every test uses
 * to show the device still works. */
static void roundtrip(size_t n, unsigned seed)
{
    unsigned char *h = malloc(n);
    unsigned char *back = calloc(1, n);
    assert_non_null(h);
    assert_non_null(back);
    simtest_fill(h, n, seed);
    void *d = dev_alloc(n);
    SIM_OK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    SIM_OK(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check(back, n, seed, 0), -1);
    SIM_OK(cudaFree(d));
    free(h);
    free(back);
}

static void test_malloc_alignment(void **state)
{
    (void)state;
    static const size_t small[] = {1, 7, 255, 256, 257, 1000, 4097, 65537, MIB, 2 * MIB - 1};
    static const size_t large[] = {2 * MIB, 2 * MIB + 1, 5 * MIB, 16 * MIB};
    void *ps[sizeof small / sizeof small[0]];
    void *pl[sizeof large / sizeof large[0]];
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
        ps[i] = dev_alloc(small[i]);
        assert_int_equal((uintptr_t)ps[i] % 256, 0);
    }
    for (size_t i = 0; i < sizeof large / sizeof large[0]; i++) {
        pl[i] = dev_alloc(large[i]);
        assert_int_equal((uintptr_t)pl[i] % (2 * MIB), 0);
    }
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++)
        SIM_OK(cudaFree(ps[i]));
    for (size_t i = 0; i < sizeof large / sizeof large[0]; i++)
        SIM_OK(cudaFree(pl[i]));
}

static void test_allocations_do_not_overlap(void **state)
{
    (void)state;
    enum { N = 48 };
    void *d[N];
    size_t sz[N];
    unsigned char *h = malloc(3 * MIB);
    assert_non_null(h);
    for (int i = 0; i < N; i++) {
        sz[i] = 1 + ((size_t)i * (size_t)i * 7919u) % (3 * MIB);
        d[i] = dev_alloc(sz[i]);
        simtest_fill(h, sz[i], (unsigned)i);
        SIM_OK(cudaMemcpy(d[i], h, sz[i], cudaMemcpyHostToDevice));
    }
    for (int i = 0; i < N; i++) {
        memset(h, 0, sz[i]);
        SIM_OK(cudaMemcpy(h, d[i], sz[i], cudaMemcpyDeviceToHost));
        assert_int_equal(simtest_check(h, sz[i], (unsigned)i, 0), -1);
        for (int j = 0; j < i; j++) {
            uintptr_t a = (uintptr_t)d[i], b = (uintptr_t)d[j];
            assert_true(a + sz[i] <= b || b + sz[j] <= a);
        }
    }
    for (int i = 0; i < N; i++)
        SIM_OK(cudaFree(d[i]));
    free(h);
}

static void test_meminfo_total_is_capacity(void **state)
{
    (void)state;
    size_t free_b = 0, total = 0;
    SIM_OK(cudaMemGetInfo(&free_b, &total));
    assert_int_equal(total, CAPACITY);
    assert_true(free_b <= total);
    assert_true(free_b > CAPACITY / 2);
}

static void test_meminfo_free_tracks_malloc_and_free(void **state)
{
    (void)state;
    size_t f0, f1, f2, f3, total;
    SIM_OK(cudaMemGetInfo(&f0, &total));
    void *a = dev_alloc(64 * MIB);
    SIM_OK(cudaMemGetInfo(&f1, &total));
    assert_true(f1 <= f0 - 64 * MIB);
    void *b = dev_alloc(3 * MIB + 5);
    SIM_OK(cudaMemGetInfo(&f2, &total));
    assert_true(f2 <= f1 - 3 * MIB);
    SIM_OK(cudaFree(a));
    SIM_OK(cudaFree(b));
    SIM_OK(cudaMemGetInfo(&f3, &total));
    assert_int_equal(f3, f0);
}

static void test_oom_is_not_sticky(void **state)
{
    (void)state;
    void *p = NULL;
    SIM_EXPECT(cudaMalloc(&p, CAPACITY + 1), cudaErrorMemoryAllocation);
    SIM_EXPECT(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    SIM_EXPECT(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    SIM_EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
    SIM_OK(cudaGetLastError());
    SIM_OK(cudaPeekAtLastError());
    roundtrip(MIB, 1);
    SIM_OK(cudaGetLastError());
}

static void test_oom_when_capacity_is_used(void **state)
{
    (void)state;
    void *big = dev_alloc(CAPACITY / 4 * 3);
    void *p = NULL;
    SIM_EXPECT(cudaMalloc(&p, CAPACITY / 2), cudaErrorMemoryAllocation);
    SIM_EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
    roundtrip(MIB, 2); /* what is left still works */
    SIM_OK(cudaFree(big));
    p = dev_alloc(CAPACITY / 2);
    SIM_OK(cudaFree(p));
    /* a request far beyond any size_t arithmetic the device might do */
    SIM_EXPECT(cudaMalloc(&p, (size_t)-1 / 2), cudaErrorMemoryAllocation);
    SIM_EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
}

static void test_free_null_and_malloc_zero(void **state)
{
    (void)state;
    SIM_OK(cudaFree(NULL));
    void *p = (void *)0x1;
    SIM_OK(cudaMalloc(&p, 0));
    SIM_OK(cudaFree(p));
    SIM_OK(cudaGetLastError());
}

static void expect_bad_free(void *p)
{
    SIM_EXPECT(cudaFree(p), cudaErrorInvalidValue);
    SIM_EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
    SIM_OK(cudaGetLastError());
}

static void test_free_bad_pointers_is_invalid_value(void **state)
{
    (void)state;
    int on_stack = 0;
    void *on_heap = malloc(64);
    assert_non_null(on_heap);
    expect_bad_free(&on_stack);
    expect_bad_free(on_heap);
    free(on_heap);

    unsigned char *d = dev_alloc(4096);
    expect_bad_free(d + 256);
    SIM_OK(cudaFree(d));
    expect_bad_free(d);

    unsigned char *big = dev_alloc(8 * MIB);
    expect_bad_free(big + 2 * MIB);
    SIM_OK(cudaFree(big));
    roundtrip(2 * MIB, 3);
}

static void test_memcpy_all_kinds(void **state)
{
    (void)state;
    enum { N = 100000 };
    unsigned char *h1 = malloc(N), *h2 = malloc(N);
    assert_non_null(h1);
    assert_non_null(h2);
    void *d1 = dev_alloc(N), *d2 = dev_alloc(N);

    simtest_fill(h1, N, 10);
    SIM_OK(cudaMemcpy(d1, h1, N, cudaMemcpyHostToDevice));
    SIM_OK(cudaMemcpy(d2, d1, N, cudaMemcpyDeviceToDevice));
    memset(h2, 0, N);
    SIM_OK(cudaMemcpy(h2, d2, N, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check(h2, N, 10, 0), -1);

    simtest_fill(h1, N, 11);
    memset(h2, 0, N);
    SIM_OK(cudaMemcpy(h2, h1, N, cudaMemcpyHostToHost));
    assert_int_equal(simtest_check(h2, N, 11, 0), -1);

    /* cudaMemcpyDefault infers each direction from the pointers (UVA) */
    simtest_fill(h1, N, 12);
    SIM_OK(cudaMemcpy(d1, h1, N, cudaMemcpyDefault));
    SIM_OK(cudaMemcpy(d2, d1, N, cudaMemcpyDefault));
    memset(h2, 0, N);
    SIM_OK(cudaMemcpy(h2, d2, N, cudaMemcpyDefault));
    assert_int_equal(simtest_check(h2, N, 12, 0), -1);
    simtest_fill(h1, N, 13);
    SIM_OK(cudaMemcpy(h2, h1, N, cudaMemcpyDefault));
    assert_int_equal(simtest_check(h2, N, 13, 0), -1);

    SIM_OK(cudaFree(d1));
    SIM_OK(cudaFree(d2));
    free(h1);
    free(h2);
}

static void test_memcpy_partial_and_offset(void **state)
{
    (void)state;
    enum { N = 1 << 20, OFF = 1000, LEN = 5000 };
    unsigned char *h = malloc(N), *back = malloc(N);
    assert_non_null(h);
    assert_non_null(back);
    unsigned char *d = dev_alloc(N);

    simtest_fill(h, N, 20);
    SIM_OK(cudaMemcpy(d, h, N, cudaMemcpyHostToDevice));
    simtest_fill(h, LEN, 21);
    SIM_OK(cudaMemcpy(d + OFF, h, LEN, cudaMemcpyHostToDevice));
    SIM_OK(cudaMemcpy(back, d, N, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check(back, OFF, 20, 0), -1);
    assert_int_equal(simtest_check(back + OFF, LEN, 21, 0), -1);
    assert_int_equal(simtest_check(back + OFF + LEN, N - OFF - LEN, 20, OFF + LEN), -1);

    /* read back from an odd offset into the middle of a host buffer */
    memset(back, 0xEE, N);
    SIM_OK(cudaMemcpy(back + 3, d + 777, 3333, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check_byte(back, 3, 0xEE), -1);
    assert_int_equal(simtest_check(back + 3, OFF - 777, 20, 777), -1);
    assert_int_equal(simtest_check(back + 3 + (OFF - 777), 3333 - (OFF - 777), 21, 0), -1);
    assert_int_equal(simtest_check_byte(back + 3 + 3333, 100, 0xEE), -1);

    /* overlapping-free device-to-device move inside one allocation */
    SIM_OK(cudaMemcpy(d + N / 2, d + OFF, LEN, cudaMemcpyDeviceToDevice));
    SIM_OK(cudaMemcpy(back, d + N / 2, LEN, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check(back, LEN, 21, 0), -1);

    SIM_OK(cudaFree(d));
    free(h);
    free(back);
}

static void test_memset_patterns(void **state)
{
    (void)state;
    enum { N = 300000 };
    unsigned char *h = malloc(N);
    assert_non_null(h);
    unsigned char *d = dev_alloc(N);

    SIM_OK(cudaMemset(d, 0xAB, N));
    SIM_OK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check_byte(h, N, 0xAB), -1);

    /* only the low byte of value is used */
    SIM_OK(cudaMemset(d, 0x1234, N));
    SIM_OK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check_byte(h, N, 0x34), -1);

    SIM_OK(cudaMemset(d + 100, 0, 100));
    SIM_OK(cudaMemset(d + N - 1, 0x7F, 1));
    SIM_OK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check_byte(h, 100, 0x34), -1);
    assert_int_equal(simtest_check_byte(h + 100, 100, 0x00), -1);
    assert_int_equal(simtest_check_byte(h + 200, N - 201, 0x34), -1);
    assert_int_equal(h[N - 1], 0x7F);

    SIM_OK(cudaMemset(d, 0, 0));
    SIM_OK(cudaFree(d));
    free(h);
}

static void test_memcpy_out_of_bounds_is_invalid_value(void **state)
{
    (void)state;
    enum { N = 4096 };
    unsigned char h[2 * N];
    simtest_fill(h, sizeof h, 30);
    unsigned char *d = dev_alloc(N), *d2 = dev_alloc(N);
    SIM_OK(cudaMemset(d, 0, N));

    SIM_EXPECT(cudaMemcpy(d + N - 100, h, 200, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    SIM_EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemcpy(h, d + N - 100, 200, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    SIM_EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemcpy(d2 + 1, d, N, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
    SIM_EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemcpy(d, h, 2 * N, cudaMemcpyDefault), cudaErrorInvalidValue);
    SIM_EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemset(d + N - 10, 0, 11), cudaErrorInvalidValue);
    SIM_EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
    SIM_OK(cudaGetLastError());

    /* exactly to the end is fine */
    SIM_OK(cudaMemcpy(d + N - 100, h, 100, cudaMemcpyHostToDevice));
    SIM_OK(cudaMemset(d + N - 10, 1, 10));
    SIM_OK(cudaFree(d));
    SIM_OK(cudaFree(d2));
    roundtrip(N, 31);
}

static void test_memcpy_async_pinned(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    unsigned char *h = NULL, *back = NULL;
    SIM_OK(cudaMallocHost((void **)&h, N));
    SIM_OK(cudaMallocHost((void **)&back, N));
    cudaStream_t s;
    SIM_OK(cudaStreamCreate(&s));
    void *d = dev_alloc(N);
    simtest_fill(h, N, 40);
    memset(back, 0, N);
    SIM_OK(cudaMemcpyAsync(d, h, N, cudaMemcpyHostToDevice, s));
    SIM_OK(cudaMemsetAsync(d, 0x11, 64, s));
    SIM_OK(cudaMemcpyAsync(back, d, N, cudaMemcpyDeviceToHost, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(simtest_check_byte(back, 64, 0x11), -1);
    assert_int_equal(simtest_check(back + 64, N - 64, 40, 64), -1);
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaFree(d));
    SIM_OK(cudaFreeHost(h));
    SIM_OK(cudaFreeHost(back));
}

static void test_malloc_host_and_attributes(void **state)
{
    (void)state;
    void *h = NULL, *h2 = NULL;
    SIM_OK(cudaMallocHost(&h, 10000));
    SIM_OK(cudaHostAlloc(&h2, 10000, cudaHostAllocDefault));
    memset(h, 0x42, 10000); /* host-accessible */
    memset(h2, 0x43, 10000);
    struct cudaPointerAttributes a;
    memset(&a, 0xFF, sizeof a);
    SIM_OK(cudaPointerGetAttributes(&a, h));
    assert_int_equal(a.type, cudaMemoryTypeHost);
    assert_ptr_equal(a.hostPointer, h);
    memset(&a, 0xFF, sizeof a);
    SIM_OK(cudaPointerGetAttributes(&a, (char *)h2 + 10));
    assert_int_equal(a.type, cudaMemoryTypeHost);
    assert_ptr_equal(a.hostPointer, (char *)h2 + 10);
    SIM_OK(cudaFreeHost(h));
    SIM_OK(cudaFreeHost(h2));
    SIM_OK(cudaGetLastError());
}

static void test_malloc_managed_is_host_accessible(void **state)
{
    (void)state;
    enum { N = 65536 };
    unsigned char *m = NULL;
    SIM_OK(cudaMallocManaged((void **)&m, N, cudaMemAttachGlobal));
    assert_non_null(m);
    simtest_fill(m, N, 50); /* written by the host directly */
    unsigned char *d = dev_alloc(N);
    SIM_OK(cudaMemcpy(d, m, N, cudaMemcpyDefault));
    SIM_OK(cudaMemset(m, 0x5A, N)); /* written by the device */
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(simtest_check_byte(m, N, 0x5A), -1);
    SIM_OK(cudaMemcpy(m, d, N, cudaMemcpyDefault));
    assert_int_equal(simtest_check(m, N, 50, 0), -1);

    struct cudaPointerAttributes a;
    memset(&a, 0xFF, sizeof a);
    SIM_OK(cudaPointerGetAttributes(&a, m + 5));
    assert_int_equal(a.type, cudaMemoryTypeManaged);
    assert_int_equal(a.device, 0);
    SIM_OK(cudaFree(m));
    SIM_OK(cudaFree(d));
}

static void test_pointer_attributes(void **state)
{
    (void)state;
    unsigned char *d = dev_alloc(4096);
    struct cudaPointerAttributes a;
    memset(&a, 0xFF, sizeof a);
    SIM_OK(cudaPointerGetAttributes(&a, d));
    assert_int_equal(a.type, cudaMemoryTypeDevice);
    assert_int_equal(a.device, 0);
    assert_ptr_equal(a.devicePointer, d);
    assert_null(a.hostPointer);

    memset(&a, 0xFF, sizeof a);
    SIM_OK(cudaPointerGetAttributes(&a, d + 100));
    assert_int_equal(a.type, cudaMemoryTypeDevice);
    assert_ptr_equal(a.devicePointer, d + 100);

    int on_stack = 0;
    memset(&a, 0xFF, sizeof a);
    SIM_OK(cudaPointerGetAttributes(&a, &on_stack));
    assert_int_equal(a.type, cudaMemoryTypeUnregistered);

    SIM_OK(cudaFree(d));
    SIM_OK(cudaGetLastError());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_malloc_alignment),
        SIMTEST(test_allocations_do_not_overlap),
        SIMTEST(test_meminfo_total_is_capacity),
        SIMTEST(test_meminfo_free_tracks_malloc_and_free),
        SIMTEST(test_oom_is_not_sticky),
        SIMTEST(test_oom_when_capacity_is_used),
        SIMTEST(test_free_null_and_malloc_zero),
        SIMTEST(test_free_bad_pointers_is_invalid_value),
        SIMTEST(test_memcpy_all_kinds),
        SIMTEST(test_memcpy_partial_and_offset),
        SIMTEST(test_memset_patterns),
        SIMTEST(test_memcpy_out_of_bounds_is_invalid_value),
        SIMTEST(test_memcpy_async_pinned),
        SIMTEST(test_malloc_host_and_attributes),
        SIMTEST(test_malloc_managed_is_host_accessible),
        SIMTEST(test_pointer_attributes),
    };
    return cmocka_run_group_tests_name("sim.memory", tests, simtest_group_setup, NULL);
}
