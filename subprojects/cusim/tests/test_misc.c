/*
 * Proves the calls around memory on the simulated device: limits read the
 * H100's defaults and give back what was set (the persisting L2 size
 * clamped to its maximum, the sync depth unsupported on compute
 * capability 9.0); cache configuration, device flags and stream attributes
 * round trip; PCI bus ids are "0000:18:00.0" and "0000:19:00.0" for two
 * devices and find their device back, in either case and without the
 * domain; prefetch and advice on managed memory are accepted and recorded
 * for cudaMemRangeGetAttribute(s), a bad location, flag or range refused;
 * cudaStreamAttachMemAsync checks its flags and range; the profiler calls
 * and the RDMA flush succeed.  Meson runs it with two devices.
 */
#include "simtest.h"

#include <string.h>

static void test_limits(void **state)
{
    (void)state;
    static const struct {
        enum cudaLimit limit;
        size_t dflt;
    } defaults[] = {
        {cudaLimitStackSize, 1024},
        {cudaLimitPrintfFifoSize, 1 << 20},
        {cudaLimitMallocHeapSize, 8 << 20},
        {cudaLimitDevRuntimeSyncDepth, 2},
        {cudaLimitDevRuntimePendingLaunchCount, 2048},
        {cudaLimitMaxL2FetchGranularity, 64},
        {cudaLimitPersistingL2CacheSize, 0},
    };
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
        size_t v = 7;
        SIM_OK(cudaDeviceGetLimit(&v, defaults[i].limit));
        assert_int_equal(v, defaults[i].dflt);
    }
    size_t v = 0, free0, free1, total;
    SIM_OK(cudaMemGetInfo(&free0, &total));
    SIM_OK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, (size_t)64 << 20));
    SIM_OK(cudaDeviceGetLimit(&v, cudaLimitMallocHeapSize));
    assert_int_equal(v, (size_t)64 << 20);
    SIM_OK(cudaMemGetInfo(&free1, &total));
    assert_int_equal(free1, free0); /* the heap takes no pages */
    SIM_OK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
    SIM_OK(cudaDeviceGetLimit(&v, cudaLimitStackSize));
    assert_int_equal(v, 4096);
    SIM_EXPECT(cudaDeviceSetLimit(cudaLimitStackSize, (size_t)1 << 30), cudaErrorInvalidValue);
    SIM_OK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, (size_t)1 << 30));
    SIM_OK(cudaDeviceGetLimit(&v, cudaLimitPersistingL2CacheSize));
    int max = 0;
    SIM_OK(cudaDeviceGetAttribute(&max, (enum cudaDeviceAttr)CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, 0));
    assert_int_equal(v, (size_t)max);
    SIM_EXPECT(cudaDeviceSetLimit(cudaLimitDevRuntimeSyncDepth, 4), cudaErrorUnsupportedLimit);
    SIM_EXPECT(cudaDeviceSetLimit((enum cudaLimit)7, 1), cudaErrorUnsupportedLimit);
    SIM_EXPECT(cudaDeviceGetLimit(&v, (enum cudaLimit)7), cudaErrorUnsupportedLimit);
    SIM_EXPECT(cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, 256), cudaErrorInvalidValue);
    assert_string_equal(cudaGetErrorName(cudaErrorUnsupportedLimit), "cudaErrorUnsupportedLimit");
    CU_EXPECT(cuCtxSetLimit(CU_LIMIT_CIG_ENABLED, 1), CUDA_ERROR_UNSUPPORTED_LIMIT);
    CU_EXPECT(cuCtxGetLimit(&v, CU_LIMIT_MAX), CUDA_ERROR_INVALID_VALUE);
    (void)cudaGetLastError();
    /* a device reset gives the defaults back */
    SIM_OK(cudaDeviceReset());
    SIM_OK(cudaDeviceGetLimit(&v, cudaLimitStackSize));
    assert_int_equal(v, 1024);
}

static void test_configuration(void **state)
{
    (void)state;
    enum cudaFuncCache c = cudaFuncCachePreferNone;
    SIM_OK(cudaDeviceGetCacheConfig(&c));
    assert_int_equal(c, cudaFuncCachePreferNone);
    SIM_OK(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared));
    SIM_OK(cudaDeviceGetCacheConfig(&c));
    assert_int_equal(c, cudaFuncCachePreferShared);
    SIM_EXPECT(cudaDeviceSetCacheConfig((enum cudaFuncCache)4), cudaErrorInvalidValue);
    enum cudaSharedMemConfig m;
    SIM_OK(cudaDeviceSetSharedMemConfig(cudaSharedMemBankSizeEightByte));
    SIM_OK(cudaDeviceGetSharedMemConfig(&m));
    assert_int_equal(m, cudaSharedMemBankSizeFourByte); /* fixed on this device */
    SIM_EXPECT(cudaDeviceSetSharedMemConfig((enum cudaSharedMemConfig)3), cudaErrorInvalidValue);
    unsigned f = 99;
    SIM_OK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync | cudaDeviceMapHost));
    SIM_OK(cudaGetDeviceFlags(&f));
    assert_int_equal(f, cudaDeviceScheduleBlockingSync | cudaDeviceMapHost);
    SIM_EXPECT(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceScheduleYield), cudaErrorInvalidValue);
    SIM_EXPECT(cudaSetDeviceFlags(0x100), cudaErrorInvalidValue);
    SIM_OK(cudaSetDeviceFlags(0));
    SIM_OK(cudaCtxResetPersistingL2Cache());
    SIM_OK(cudaProfilerStart());
    SIM_OK(cudaProfilerStop());
    SIM_OK(cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                              cudaFlushGPUDirectRDMAWritesToOwner));
    SIM_EXPECT(cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                                  (enum cudaFlushGPUDirectRDMAWritesScope)150),
               cudaErrorInvalidValue);
    (void)cudaGetLastError();
    /* the CUDA 10 form refuses an active primary context */
    CU_EXPECT(cuDevicePrimaryCtxSetFlags(0, 0), CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE);
}

static void test_pci_bus_ids(void **state)
{
    (void)state;
    char id[32];
    SIM_OK(cudaDeviceGetPCIBusId(id, sizeof id, 0));
    assert_string_equal(id, "0000:18:00.0");
    SIM_OK(cudaDeviceGetPCIBusId(id, sizeof id, 1));
    assert_string_equal(id, "0000:19:00.0");
    int dev = -1;
    SIM_OK(cudaDeviceGetByPCIBusId(&dev, "0000:19:00.0"));
    assert_int_equal(dev, 1);
    SIM_OK(cudaDeviceGetByPCIBusId(&dev, "18:00.0"));
    assert_int_equal(dev, 0);
    SIM_OK(cudaDeviceGetByPCIBusId(&dev, "0000:19:00.0"));
    CUdevice cd = -1;
    CU_OK(cuDeviceGetByPCIBusId(&cd, "0000:19:00.0"));
    assert_int_equal(cd, 1);
    SIM_EXPECT(cudaDeviceGetByPCIBusId(&dev, "0000:1a:00.0"), cudaErrorInvalidDevice);
    SIM_EXPECT(cudaDeviceGetByPCIBusId(&dev, "bus 18"), cudaErrorInvalidValue);
    SIM_EXPECT(cudaDeviceGetPCIBusId(id, sizeof id, 2), cudaErrorInvalidDevice);
    SIM_EXPECT(cudaDeviceGetPCIBusId(id, 0, 0), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    SIM_OK(cudaDeviceGetPCIBusId(id, 5, 0)); /* truncated as snprintf truncates */
    assert_string_equal(id, "0000");
}

static void test_stream_attributes(void **state)
{
    (void)state;
    cudaStream_t s;
    SIM_OK(cudaStreamCreate(&s));
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 1 << 20));
    cudaStreamAttrValue v, g;
    memset(&v, 0, sizeof v);
    v.accessPolicyWindow.base_ptr = p;
    v.accessPolicyWindow.num_bytes = 1 << 20;
    v.accessPolicyWindow.hitRatio = 0.6f;
    v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    SIM_OK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v));
    SIM_OK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &g));
    assert_memory_equal(&g.accessPolicyWindow, &v.accessPolicyWindow, sizeof v.accessPolicyWindow);
    v.accessPolicyWindow.hitRatio = 1.5f;
    SIM_EXPECT(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v), cudaErrorInvalidValue);
    v.accessPolicyWindow.hitRatio = 0.5f;
    v.accessPolicyWindow.num_bytes = (size_t)1 << 30; /* past accessPolicyMaxWindowSize */
    SIM_EXPECT(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v), cudaErrorInvalidValue);

    SIM_OK(cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &g));
    assert_int_equal(g.syncPolicy, cudaSyncPolicyAuto);
    v.syncPolicy = cudaSyncPolicyYield;
    SIM_OK(cudaStreamSetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &v));
    SIM_OK(cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &g));
    assert_int_equal(g.syncPolicy, cudaSyncPolicyYield);

    v.priority = -3;
    SIM_OK(cudaStreamSetAttribute(s, cudaStreamAttributePriority, &v));
    int prio = 0;
    SIM_OK(cudaStreamGetPriority(s, &prio));
    assert_int_equal(prio, -3);
    v.priority = -40;
    SIM_OK(cudaStreamSetAttribute(s, cudaStreamAttributePriority, &v));
    SIM_OK(cudaStreamGetAttribute(s, cudaStreamAttributePriority, &g));
    assert_int_equal(g.priority, -5);
    SIM_EXPECT(cudaStreamSetAttribute(s, cudaLaunchAttributeCooperative, &v), cudaErrorInvalidValue);
    SIM_EXPECT(cudaStreamGetAttribute(s, cudaStreamAttributePriority, NULL), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    SIM_OK(cudaStreamDestroy(s));
    SIM_EXPECT(cudaStreamGetAttribute(s, cudaStreamAttributePriority, &g), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    SIM_OK(cudaFree(p));
}

static void test_managed_hints(void **state)
{
    (void)state;
    enum { N = 1 << 16 };
    char *m = NULL;
    SIM_OK(cudaMallocManaged((void **)&m, N, cudaMemAttachGlobal));
    struct cudaMemLocation dev1 = {cudaMemLocationTypeDevice, 1}, host = {cudaMemLocationTypeHost, 0};
    int v = 7;
    SIM_OK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeLastPrefetchLocation, m, N));
    assert_int_equal(v, -2); /* none yet */
    SIM_OK(cudaMemPrefetchAsync(m, N, dev1, 0, NULL));
    SIM_OK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeLastPrefetchLocation, m, N));
    assert_int_equal(v, 1);
    SIM_OK(cudaMemPrefetchAsync(m + 4096, 4096, host, 0, NULL));
    SIM_OK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeLastPrefetchLocation, m, N));
    assert_int_equal(v, -1); /* cudaCpuDeviceId */
    SIM_OK(cudaStreamSynchronize(NULL));

    SIM_OK(cudaMemAdvise(m, N, cudaMemAdviseSetReadMostly, host));
    SIM_OK(cudaMemAdvise(m, N, cudaMemAdviseSetPreferredLocation, dev1));
    SIM_OK(cudaMemAdvise(m, N, cudaMemAdviseSetAccessedBy, (struct cudaMemLocation){cudaMemLocationTypeDevice, 0}));
    SIM_OK(cudaMemAdvise(m, N, cudaMemAdviseSetAccessedBy, dev1));
    int ro = 0, pref = 0, pref_type = 0, by[4];
    void *data[] = {&ro, &pref, &pref_type, by};
    size_t sizes[] = {sizeof ro, sizeof pref, sizeof pref_type, sizeof by};
    enum cudaMemRangeAttribute which[] = {cudaMemRangeAttributeReadMostly, cudaMemRangeAttributePreferredLocation,
                                          cudaMemRangeAttributePreferredLocationType,
                                          cudaMemRangeAttributeAccessedBy};
    SIM_OK(cudaMemRangeGetAttributes(data, sizes, which, 4, m, N));
    assert_int_equal(ro, 1);
    assert_int_equal(pref, 1);
    assert_int_equal(pref_type, cudaMemLocationTypeDevice);
    assert_int_equal(by[0], 0);
    assert_int_equal(by[1], 1);
    assert_int_equal(by[2], -2);
    assert_int_equal(by[3], -2);
    SIM_OK(cudaMemAdvise(m, N, cudaMemAdviseUnsetAccessedBy, (struct cudaMemLocation){cudaMemLocationTypeDevice, 0}));
    SIM_OK(cudaMemAdvise(m, N, cudaMemAdviseUnsetReadMostly, host));
    SIM_OK(cudaMemRangeGetAttributes(data, sizes, which, 4, m, N));
    assert_int_equal(ro, 0);
    assert_int_equal(by[0], 1);

    /* refused: a device that does not exist, an invalid location type, flags,
     * memory that is not managed, a range past the allocation, a wrong size */
    SIM_EXPECT(cudaMemPrefetchAsync(m, N, (struct cudaMemLocation){cudaMemLocationTypeDevice, 2}, 0, NULL),
               cudaErrorInvalidDevice);
    SIM_EXPECT(cudaMemPrefetchAsync(m, N, (struct cudaMemLocation){cudaMemLocationTypeInvalid, 0}, 0, NULL),
               cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemPrefetchAsync(m, N, dev1, 1, NULL), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemPrefetchAsync(m, N + 1, dev1, 0, NULL), cudaErrorInvalidValue);
    void *d = NULL;
    SIM_OK(cudaMalloc(&d, 4096));
    SIM_EXPECT(cudaMemPrefetchAsync(d, 4096, dev1, 0, NULL), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemAdvise(d, 4096, cudaMemAdviseSetReadMostly, host), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemAdvise(m, N, (enum cudaMemoryAdvise)7, host), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemAdvise(m, N, cudaMemAdviseSetPreferredLocation,
                             (struct cudaMemLocation){cudaMemLocationTypeDevice, -1}),
               cudaErrorInvalidDevice);
    SIM_EXPECT(cudaMemRangeGetAttribute(&v, 2, cudaMemRangeAttributeReadMostly, m, N), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemRangeGetAttribute(&v, sizeof v, (enum cudaMemRangeAttribute)9, m, N), cudaErrorInvalidValue);

    /* attach: whole allocation or nothing, one of three flags */
    cudaStream_t s;
    SIM_OK(cudaStreamCreate(&s));
    SIM_OK(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle));
    SIM_OK(cudaStreamAttachMemAsync(s, m, N, cudaMemAttachGlobal));
    SIM_EXPECT(cudaStreamAttachMemAsync(s, m, N / 2, cudaMemAttachHost), cudaErrorInvalidValue);
    SIM_EXPECT(cudaStreamAttachMemAsync(s, m, 0, 3), cudaErrorInvalidValue);
    SIM_EXPECT(cudaStreamAttachMemAsync(s, d, 0, cudaMemAttachGlobal), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaFree(d));
    SIM_OK(cudaFree(m));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_limits),       SIMTEST(test_configuration), SIMTEST(test_pci_bus_ids),
        SIMTEST(test_stream_attributes), SIMTEST(test_managed_hints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
