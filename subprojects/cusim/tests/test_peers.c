/*
 * Proves peer access between simulated devices (meson runs it with three):
 * any two different devices can access each other and a device itself
 * cannot (cudaDeviceCanAccessPeer 0); every link has the documented
 * attributes and a device has no link with itself (cudaErrorInvalidDevice);
 * enabling access takes flags 0 (cudaErrorInvalidValue), is refused for the
 * current device itself (cudaErrorInvalidDevice, driver:
 * CUDA_ERROR_INVALID_CONTEXT), twice is cudaErrorPeerAccessAlreadyEnabled,
 * disabling what is not enabled cudaErrorPeerAccessNotEnabled; a device
 * reset drops its access; cudaMemcpyPeer, cudaMemcpyPeerAsync, cuMemcpyPeer
 * and cuMemcpy3DPeer move the bytes between devices, with or without
 * access; a kernel of device 1 on device 0's memory faults without access
 * and runs with it, while pool memory needs cudaMemPoolSetAccess, not peer
 * access; the race detector sees a peer copy's ranges on both devices.
 */
#include "simtest.h"

#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)

static void test_can_access(void **state)
{
    (void)state;
    int n = 0, can = -1;
    SIM_OK(cudaGetDeviceCount(&n));
    assert_int_equal(n, 3);
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            SIM_OK(cudaDeviceCanAccessPeer(&can, a, b));
            assert_int_equal(can, a != b);
        }
    SIM_EXPECT(cudaDeviceCanAccessPeer(&can, 0, 3), cudaErrorInvalidDevice);
    SIM_EXPECT(cudaDeviceCanAccessPeer(NULL, 0, 1), cudaErrorInvalidValue);
    CU_OK(cuDeviceCanAccessPeer(&can, 2, 1));
    assert_int_equal(can, 1);
    (void)cudaGetLastError();
}

static void test_p2p_attributes(void **state)
{
    (void)state;
    static const struct {
        enum cudaDeviceP2PAttr attr;
        int value;
    } want[] = {
        {cudaDevP2PAttrPerformanceRank, 0},
        {cudaDevP2PAttrAccessSupported, 1},
        {cudaDevP2PAttrNativeAtomicSupported, 1},
        {cudaDevP2PAttrCudaArrayAccessSupported, 1},
        {cudaDevP2PAttrOnlyPartialNativeAtomicSupported, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int v = -1;
        SIM_OK(cudaDeviceGetP2PAttribute(&v, want[i].attr, 0, 2));
        assert_int_equal(v, want[i].value);
        SIM_EXPECT(cudaDeviceGetP2PAttribute(&v, want[i].attr, 1, 1), cudaErrorInvalidDevice);
    }
    int v;
    SIM_EXPECT(cudaDeviceGetP2PAttribute(&v, (enum cudaDeviceP2PAttr)99, 0, 1), cudaErrorInvalidValue);
    SIM_EXPECT(cudaDeviceGetP2PAttribute(NULL, cudaDevP2PAttrAccessSupported, 0, 1), cudaErrorInvalidValue);
    SIM_EXPECT(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 0, 7), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
}

static void test_enable_rules(void **state)
{
    (void)state;
    SIM_OK(cudaSetDevice(0));
    SIM_EXPECT(cudaDeviceEnablePeerAccess(1, 1), cudaErrorInvalidValue);
    SIM_EXPECT(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);
    SIM_EXPECT(cudaDeviceEnablePeerAccess(9, 0), cudaErrorInvalidDevice);
    SIM_EXPECT(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
    SIM_OK(cudaDeviceEnablePeerAccess(1, 0));
    SIM_EXPECT(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    SIM_OK(cudaDeviceEnablePeerAccess(2, 0));
    SIM_EXPECT(cudaDeviceDisablePeerAccess(0), cudaErrorInvalidDevice);
    SIM_OK(cudaDeviceDisablePeerAccess(1));
    SIM_EXPECT(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
    SIM_OK(cudaDeviceDisablePeerAccess(2));
    /* one way only: 1 -> 0 is its own */
    SIM_OK(cudaDeviceEnablePeerAccess(1, 0));
    SIM_OK(cudaSetDevice(1));
    SIM_EXPECT(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);
    SIM_OK(cudaSetDevice(0));
    /* a reset drops the device's access */
    SIM_OK(cudaDeviceReset());
    SIM_OK(cudaSetDevice(0));
    SIM_EXPECT(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
    (void)cudaGetLastError();

    /* the driver's answers */
    CUcontext c0, c1;
    CU_OK(cuDevicePrimaryCtxRetain(&c0, 0));
    CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
    CU_OK(cuCtxPushCurrent_v2(c0));
    CU_EXPECT(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_INVALID_CONTEXT);
    CU_EXPECT(cuCtxEnablePeerAccess(c1, 4), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuCtxEnablePeerAccess(c1, 0));
    CU_EXPECT(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    CU_OK(cuCtxDisablePeerAccess(c1));
    CU_EXPECT(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    CU_EXPECT(cuCtxDisablePeerAccess(NULL), CUDA_ERROR_INVALID_CONTEXT);
    CUcontext popped;
    CU_OK(cuCtxPopCurrent_v2(&popped));
    CU_OK(cuDevicePrimaryCtxRelease_v2(0));
    CU_OK(cuDevicePrimaryCtxRelease_v2(1));
}

/* n bytes of pattern seed on device dev. */
static void *filled(int dev, size_t n, unsigned seed)
{
    unsigned char *h = malloc(n);
    assert_non_null(h);
    simtest_fill(h, n, seed);
    void *d = NULL;
    SIM_OK(cudaSetDevice(dev));
    SIM_OK(cudaMalloc(&d, n));
    SIM_OK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static void expect_pattern(const void *d, size_t n, unsigned seed)
{
    unsigned char *h = malloc(n);
    assert_non_null(h);
    SIM_OK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check(h, n, seed, 0), -1);
    free(h);
}

static void test_peer_copies(void **state)
{
    (void)state;
    void *a = filled(0, 4 * MIB, 11), *b = filled(1, 4 * MIB, 0), *c = filled(2, 4 * MIB, 0);
    SIM_OK(cudaSetDevice(2)); /* neither side's device */
    SIM_OK(cudaMemcpyPeer(b, 1, a, 0, 4 * MIB));
    expect_pattern(b, 4 * MIB, 11);
    cudaStream_t s;
    SIM_OK(cudaSetDevice(1));
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    SIM_OK(cudaMemcpyPeerAsync(c, 2, b, 1, 4 * MIB, s));
    SIM_OK(cudaStreamSynchronize(s));
    expect_pattern(c, 4 * MIB, 11);
    SIM_EXPECT(cudaMemcpyPeer(b, 5, a, 0, 16), cudaErrorInvalidDevice);

    /* the driver's, with contexts; and a 3D copy of 4 slices of 64 rows */
    void *z = filled(0, 4 * MIB, 12);
    CUcontext c0, c1;
    CU_OK(cuDevicePrimaryCtxRetain(&c0, 0));
    CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
    CU_OK(cuMemcpyPeer((CUdeviceptr)b, c1, (CUdeviceptr)z, c0, 4 * MIB));
    SIM_OK(cudaDeviceSynchronize());
    expect_pattern(b, 4 * MIB, 12);
    CU_EXPECT(cuMemcpyPeer((CUdeviceptr)b, NULL, (CUdeviceptr)z, c0, 16), CUDA_ERROR_INVALID_CONTEXT);
    SIM_OK(cudaMemset(c, 0, 4 * MIB));
    CUDA_MEMCPY3D_PEER p;
    memset(&p, 0, sizeof p);
    p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = (CUdeviceptr)z;
    p.dstDevice = (CUdeviceptr)c;
    p.srcContext = c0;
    p.dstContext = c1;
    p.srcPitch = p.dstPitch = 4096;
    p.srcHeight = p.dstHeight = 64;
    p.WidthInBytes = 4096;
    p.Height = 64;
    p.Depth = 4;
    CU_OK(cuMemcpy3DPeer(&p));
    SIM_OK(cudaDeviceSynchronize());
    unsigned char *h = malloc(MIB);
    assert_non_null(h);
    SIM_OK(cudaMemcpy(h, c, MIB, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check(h, MIB, 12, 0), -1);
    free(h);
    CU_OK(cuDevicePrimaryCtxRelease_v2(0));
    CU_OK(cuDevicePrimaryCtxRelease_v2(1));
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaFree(a));
    SIM_OK(cudaFree(b));
    SIM_OK(cudaFree(c));
    SIM_OK(cudaFree(z));
    (void)cudaGetLastError();
}

/* A simulated kernel on the current device's legacy stream reading
 * [p, p+n); the stream's synchronisation result. */
static cudaError_t kernel_reads(const void *p, size_t n)
{
    struct cucache_sim_access acc = {p, n, 0};
    CU_OK(cucacheSimLaunch(NULL, NULL, NULL, &acc, 1));
    return cudaStreamSynchronize(0);
}

static void test_kernel_needs_access(void **state)
{
    (void)state;
    void *a = filled(0, MIB, 1);
    SIM_OK(cudaSetDevice(1));
    SIM_EXPECT(kernel_reads(a, MIB), cudaErrorIllegalAddress);
    SIM_OK(cudaDeviceReset()); /* the fault is sticky */
    SIM_OK(cudaSetDevice(1));
    SIM_OK(cudaDeviceEnablePeerAccess(0, 0));
    SIM_OK(kernel_reads(a, MIB));

    /* pool memory: peer access does not reach it, its access does */
    void *pm = NULL;
    SIM_OK(cudaSetDevice(0));
    SIM_OK(cudaMallocAsync(&pm, MIB, 0));
    SIM_OK(cudaDeviceSynchronize());
    cudaMemPool_t pool;
    SIM_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
    struct cudaMemLocation loc = {cudaMemLocationTypeDevice, 1};
    enum cudaMemAccessFlags f = cudaMemAccessFlagsProtReadWrite;
    SIM_OK(cudaMemPoolGetAccess(&f, pool, &loc));
    assert_int_equal(f, cudaMemAccessFlagsProtNone);
    SIM_OK(cudaSetDevice(1));
    SIM_EXPECT(kernel_reads(pm, MIB), cudaErrorIllegalAddress);
    SIM_OK(cudaDeviceReset());
    struct cudaMemAccessDesc desc = {{cudaMemLocationTypeDevice, 1}, cudaMemAccessFlagsProtReadWrite};
    SIM_OK(cudaMemPoolSetAccess(pool, &desc, 1));
    SIM_OK(cudaMemPoolGetAccess(&f, pool, &loc));
    assert_int_equal(f, cudaMemAccessFlagsProtReadWrite);
    SIM_OK(cudaSetDevice(1));
    SIM_OK(kernel_reads(pm, MIB));
    /* the pool's own device keeps its access */
    struct cudaMemAccessDesc own = {{cudaMemLocationTypeDevice, 0}, cudaMemAccessFlagsProtNone};
    SIM_EXPECT(cudaMemPoolSetAccess(pool, &own, 1), cudaErrorInvalidValue);
    desc.flags = cudaMemAccessFlagsProtNone;
    SIM_OK(cudaMemPoolSetAccess(pool, &desc, 1));
    SIM_OK(cudaSetDevice(0));
    SIM_OK(cudaFreeAsync(pm, 0));
    SIM_OK(cudaFree(a));
    SIM_OK(cudaSetDevice(1));
    SIM_OK(cudaDeviceReset());
    (void)cudaGetLastError();
}

static void test_race_sees_both_devices(void **state)
{
    (void)state;
    void *a = filled(0, MIB, 5), *b = filled(1, MIB, 0);
    SIM_OK(cudaDeviceSynchronize());
    cudaStream_t s0, s1;
    SIM_OK(cudaSetDevice(0));
    SIM_OK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    SIM_OK(cudaSetDevice(1));
    SIM_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    SIM_OK(cudaDeviceSynchronize());
    cucacheSimRaceReset();
    /* the copy writes device 1's b; a memset of b on device 1 unordered */
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s0);
    SIM_OK(cudaMemcpyPeerAsync(b, 1, a, 0, MIB, s0));
    SIM_OK(cudaMemsetAsync(b, 0, MIB, s1));
    SIM_OK(simtest_stream_wait_idle(s1)); /* the memset really ran first */
    simtest_gate_open(g);
    SIM_OK(cudaStreamSynchronize(s0));
    SIM_OK(cudaStreamSynchronize(s1));
    assert_true(cucacheSimRaceCount() > 0);
    /* and device 0's a, read by the copy, written unordered on device 0 */
    cucacheSimRaceReset();
    cudaStream_t s0b;
    SIM_OK(cudaSetDevice(0));
    SIM_OK(cudaStreamCreateWithFlags(&s0b, cudaStreamNonBlocking));
    simtest_gate_t *g2 = simtest_gate_new();
    simtest_gate_block(g2, s0b);
    SIM_OK(cudaMemcpyPeerAsync(b, 1, a, 0, MIB, s1));
    SIM_OK(cudaMemsetAsync(a, 0, MIB, s0b));
    SIM_OK(simtest_stream_wait_idle(s1)); /* the copy really ran first */
    simtest_gate_open(g2);
    SIM_OK(cudaStreamSynchronize(s1));
    SIM_OK(cudaStreamSynchronize(s0b));
    assert_true(cucacheSimRaceCount() > 0);
    /* ordered by an event: none */
    cucacheSimRaceReset();
    cudaEvent_t e;
    SIM_OK(cudaEventCreate(&e));
    SIM_OK(cudaMemcpyPeerAsync(b, 1, a, 0, MIB, s0));
    SIM_OK(cudaEventRecord(e, s0));
    SIM_OK(cudaStreamWaitEvent(s1, e, 0));
    SIM_OK(cudaMemsetAsync(b, 0, MIB, s1));
    SIM_OK(cudaStreamSynchronize(s1));
    assert_int_equal(cucacheSimRaceCount(), 0);
    SIM_OK(cudaEventDestroy(e));
    SIM_OK(cudaStreamDestroy(s0));
    SIM_OK(cudaStreamDestroy(s0b));
    SIM_OK(cudaStreamDestroy(s1));
    SIM_OK(cudaFree(a));
    SIM_OK(cudaFree(b));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_can_access),
        SIMTEST(test_p2p_attributes),
        SIMTEST(test_enable_rules),
        SIMTEST(test_peer_copies),
        SIMTEST(test_kernel_needs_access),
        SIMTEST(test_race_sees_both_devices),
    };
    return cmocka_run_group_tests(tests, simtest_group_setup, NULL);
}
