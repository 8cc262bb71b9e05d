/*
 * Proves stream-ordered allocation on the simulated device: memory from
 * cudaMallocAsync / cudaMallocFromPoolAsync (default pool and a created
 * pool) is usable in stream order even while the stream is held, memory freed
 * with cudaFreeAsync is reused on the same stream without a device
 * allocation, is never handed to another stream before its free is ordered or
 * complete, pool attributes (release threshold, reserved and used memory)
 * track the pool, and cudaMemGetInfo recovers once freed memory is released
 * (threshold 0).  Meson runs it with CUCACHE_SIM_CAPACITY=1G.
 */
#include "simtest.h"

#include <string.h>

#define CAPACITY ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)
#define LEGACY ((cudaStream_t)0)

static cudaStream_t stream_new(unsigned flags)
{
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, flags));
    return s;
}

static uint64_t pool_attr(cudaMemPool_t pool, enum cudaMemPoolAttr attr)
{
    uint64_t v = 0xDEADBEEF;
    SIM_OK(cudaMemPoolGetAttribute(pool, attr, &v));
    return v;
}

static void set_threshold(cudaMemPool_t pool, uint64_t v)
{
    SIM_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &v));
}

static cudaMemPool_t default_pool(void)
{
    cudaMemPool_t pool = NULL;
    SIM_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
    assert_non_null(pool);
    return pool;
}

static void test_malloc_async_usable_in_stream_order(void **state)
{
    (void)state;
    enum { N = 3 << 20 };
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    unsigned char *h = NULL, *src = NULL;
    SIM_OK(cudaMallocHost((void **)&h, N));
    SIM_OK(cudaMallocHost((void **)&src, N));
    memset(h, 0, N);
    simtest_fill(src, N, 60);
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    unsigned char *p = NULL, *q = NULL;
    SIM_OK(cudaMallocAsync((void **)&p, N, s));
    SIM_OK(cudaMallocAsync((void **)&q, N, s));
    assert_non_null(p);
    assert_non_null(q);
    assert_true(p + N <= q || q + N <= p);
    SIM_OK(cudaMemcpyAsync(p, src, N, cudaMemcpyHostToDevice, s));
    SIM_OK(cudaMemsetAsync(p, 0x77, 4096, s));
    SIM_OK(cudaMemcpyAsync(q, p, N, cudaMemcpyDeviceToDevice, s));
    SIM_OK(cudaMemcpyAsync(h, q, N, cudaMemcpyDeviceToHost, s));
    SIM_OK(cudaFreeAsync(p, s));
    SIM_OK(cudaFreeAsync(q, s));
    simtest_settle();
    assert_int_equal(simtest_check_byte(h, N, 0), -1);
    simtest_gate_open(g);
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(simtest_check_byte(h, 4096, 0x77), -1);
    assert_int_equal(simtest_check(h + 4096, N - 4096, 60, 4096), -1);
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaFreeHost(h));
    SIM_OK(cudaFreeHost(src));
}

static void test_free_async_memory_reused_on_same_stream(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s); /* the free is still pending: reuse is stream order */
    void *p = NULL, *q = NULL;
    SIM_OK(cudaMallocAsync(&p, 4 * MIB, s));
    SIM_OK(cudaFreeAsync(p, s));
    unsigned long allocs = cucacheSimDeviceAllocs();
    SIM_OK(cudaMallocAsync(&q, 4 * MIB, s));
    assert_ptr_equal(q, p);
    assert_int_equal(cucacheSimDeviceAllocs(), allocs);
    SIM_OK(cudaFreeAsync(q, s));
    simtest_gate_open(g);
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaStreamDestroy(s));
}

/* Memory freed on a held stream s goes to stream t only with an ordering
 * that keeps t's use after the free. */
static void test_pending_free_not_reused_unordered_on_other_stream(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking), t = stream_new(cudaStreamNonBlocking);
    uint64_t huge = UINT64_MAX;
    SIM_OK(cudaMemPoolSetAttribute(default_pool(), cudaMemPoolAttrReleaseThreshold, &huge));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    void *p = NULL, *q = NULL;
    SIM_OK(cudaMallocAsync(&p, 2 * MIB, s));
    SIM_OK(cudaFreeAsync(p, s));
    SIM_OK(cudaMallocAsync(&q, 2 * MIB, t));
    simtest_mark_t *m = simtest_mark_new();
    simtest_mark_on(m, t);
    if (q == p) {
        /* reuse through an inserted dependency: t now waits for s */
        simtest_settle();
        assert_false(simtest_mark_ran(m));
    } else {
        assert_true(simtest_mark_wait(m));
    }
    simtest_gate_open(g);
    SIM_OK(cudaFreeAsync(q, t));
    SIM_OK(cudaDeviceSynchronize());
    set_threshold(default_pool(), 0);
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaStreamDestroy(t));
}

static void roundtrip_on(void *d, size_t n, cudaStream_t s, unsigned seed)
{
    unsigned char *h = NULL, *back = NULL;
    SIM_OK(cudaMallocHost((void **)&h, n));
    SIM_OK(cudaMallocHost((void **)&back, n));
    simtest_fill(h, n, seed);
    memset(back, 0, n);
    SIM_OK(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s));
    SIM_OK(cudaMemcpyAsync(back, d, n, cudaMemcpyDeviceToHost, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(simtest_check(back, n, seed, 0), -1);
    SIM_OK(cudaFreeHost(h));
    SIM_OK(cudaFreeHost(back));
}

static void test_malloc_from_default_pool(void **state)
{
    (void)state;
    cudaMemPool_t pool = default_pool(), cur = NULL;
    SIM_OK(cudaDeviceGetMemPool(&cur, 0));
    assert_ptr_equal(cur, pool);
    cudaStream_t s = stream_new(cudaStreamDefault);
    void *p = NULL;
    SIM_OK(cudaMallocFromPoolAsync(&p, 1 * MIB + 3, pool, s));
    assert_non_null(p);
    roundtrip_on(p, MIB + 3, s, 61);
    SIM_OK(cudaFreeAsync(p, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaStreamDestroy(s));
}

static void test_malloc_async_on_legacy_and_per_thread_streams(void **state)
{
    (void)state;
    void *p = NULL;
    SIM_OK(cudaMallocAsync(&p, 100000, LEGACY));
    roundtrip_on(p, 100000, LEGACY, 62);
    SIM_OK(cudaFreeAsync(p, LEGACY));
    SIM_OK(cudaMallocAsync(&p, 100000, cudaStreamPerThread));
    roundtrip_on(p, 100000, cudaStreamPerThread, 63);
    SIM_OK(cudaFreeAsync(p, cudaStreamPerThread));
    SIM_OK(cudaMallocAsync_ptsz(&p, 100000, LEGACY));
    roundtrip_on(p, 100000, cudaStreamPerThread, 64);
    SIM_OK(cudaFreeAsync_ptsz(p, LEGACY));
    SIM_OK(cudaMallocFromPoolAsync_ptsz(&p, 100000, default_pool(), LEGACY));
    roundtrip_on(p, 100000, cudaStreamPerThread, 65);
    SIM_OK(cudaFreeAsync_ptsz(p, LEGACY));
    SIM_OK(cudaDeviceSynchronize());
}

static void test_created_pool(void **state)
{
    (void)state;
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool = NULL;
    SIM_OK(cudaMemPoolCreate(&pool, &props));
    assert_non_null(pool);
    assert_ptr_not_equal(pool, default_pool());
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReleaseThreshold), 0);
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 0);

    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    void *p = NULL;
    SIM_OK(cudaMallocFromPoolAsync(&p, 8 * MIB, pool, s));
    roundtrip_on(p, 8 * MIB, s, 66);
    uint64_t used = pool_attr(pool, cudaMemPoolAttrUsedMemCurrent);
    uint64_t reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
    assert_true(used >= 8 * MIB);
    assert_true(reserved >= used);
    assert_true(pool_attr(pool, cudaMemPoolAttrUsedMemHigh) >= used);
    assert_true(pool_attr(pool, cudaMemPoolAttrReservedMemHigh) >= reserved);

    /* keep it cached, then trim */
    set_threshold(pool, UINT64_MAX);
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReleaseThreshold), UINT64_MAX);
    SIM_OK(cudaFreeAsync(p, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 0);
    assert_true(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) >= 8 * MIB);
    SIM_OK(cudaMemPoolTrimTo(pool, 0));
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 0);

    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaMemPoolDestroy(pool));
}

static void test_meminfo_recovers_after_free_async(void **state)
{
    (void)state;
    cudaMemPool_t pool = default_pool();
    set_threshold(pool, 0);
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    SIM_OK(cudaDeviceSynchronize());
    size_t f0, f1, f2, total;
    SIM_OK(cudaMemGetInfo(&f0, &total));
    void *p = NULL;
    SIM_OK(cudaMallocAsync(&p, 64 * MIB, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaMemGetInfo(&f1, &total));
    assert_true(f1 <= f0 - 64 * MIB);
    assert_true(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) >= 64 * MIB);
    SIM_OK(cudaFreeAsync(p, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaMemGetInfo(&f2, &total));
    assert_int_equal(f2, f0);
    assert_int_equal(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 0);
    SIM_OK(cudaStreamDestroy(s));
}

static void test_release_threshold_keeps_memory_reserved(void **state)
{
    (void)state;
    cudaMemPool_t pool = default_pool();
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    set_threshold(pool, UINT64_MAX);
    SIM_OK(cudaDeviceSynchronize());
    size_t f0, f1, total;
    SIM_OK(cudaMemGetInfo(&f0, &total));
    void *p = NULL;
    SIM_OK(cudaMallocAsync(&p, 32 * MIB, s));
    SIM_OK(cudaFreeAsync(p, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaMemGetInfo(&f1, &total));
    assert_true(f1 <= f0 - 32 * MIB); /* still reserved by the pool */
    assert_true(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) >= 32 * MIB);
    /* served again from the pool without a device allocation */
    unsigned long allocs = cucacheSimDeviceAllocs();
    SIM_OK(cudaMallocAsync(&p, 32 * MIB, s));
    assert_int_equal(cucacheSimDeviceAllocs(), allocs);
    SIM_OK(cudaFreeAsync(p, s));
    set_threshold(pool, 0);
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaMemPoolTrimTo(pool, 0));
    SIM_OK(cudaMemGetInfo(&f1, &total));
    assert_int_equal(f1, f0); /* back where it started */
    SIM_OK(cudaStreamDestroy(s));
}

/* CUDA Programming Guide, "Stream Ordered Memory Allocator": memory from
 * cudaMalloc may be freed with cudaFreeAsync (the caller orders the
 * accesses before the free), and memory from cudaMallocAsync with cudaFree. */
static void test_free_async_and_free_accept_either_allocation(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    size_t f0, f1, total;
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaMemGetInfo(&f0, &total));
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 4 * MIB));
    SIM_OK(cudaMemsetAsync(p, 0, 4 * MIB, s));
    SIM_OK(cudaFreeAsync(p, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaMemGetInfo(&f1, &total));
    assert_int_equal(f1, f0);

    SIM_OK(cudaMallocAsync(&p, 4 * MIB, s));
    SIM_OK(cudaMemsetAsync(p, 0, 4 * MIB, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaFree(p));
    SIM_OK(cudaMemGetInfo(&f1, &total));
    assert_int_equal(f1, f0);
    SIM_OK(cudaStreamDestroy(s));
}

static void test_malloc_async_oom_is_not_sticky(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    void *p = NULL;
    SIM_EXPECT(cudaMallocAsync(&p, 2 * CAPACITY, s), cudaErrorMemoryAllocation);
    SIM_EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
    SIM_OK(cudaGetLastError());
    SIM_OK(cudaMallocAsync(&p, MIB, s));
    roundtrip_on(p, MIB, s, 67);
    SIM_OK(cudaFreeAsync(p, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaStreamDestroy(s));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_malloc_async_usable_in_stream_order),
        SIMTEST(test_free_async_memory_reused_on_same_stream),
        SIMTEST(test_pending_free_not_reused_unordered_on_other_stream),
        SIMTEST(test_malloc_from_default_pool),
        SIMTEST(test_malloc_async_on_legacy_and_per_thread_streams),
        SIMTEST(test_created_pool),
        SIMTEST(test_meminfo_recovers_after_free_async),
        SIMTEST(test_release_threshold_keeps_memory_reserved),
        SIMTEST(test_free_async_and_free_accept_either_allocation),
        SIMTEST(test_malloc_async_oom_is_not_sticky),
    };
    return cmocka_run_group_tests_name("sim.async_alloc", tests, simtest_group_setup, NULL);
}
