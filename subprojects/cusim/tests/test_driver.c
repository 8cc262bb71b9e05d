/*
 * Proves the simulated driver (libcuda.so.1) answers the driver API that the
 * runtime and cucache's driver-level hooks rely on: cuInit, devices and the
 * primary context, cuMemAlloc/cuMemFree and copies with real bytes,
 * cuGetProcAddress_v2 resolving base names by CUDA version and by
 * per-thread-stream flag to the exact exported variants, error strings,
 * streams, events and stream-ordered allocation, the device allocation
 * counters, and that runtime and driver handles and pointers interoperate.
 * Meson runs it with CUCACHE_SIM_CAPACITY=1G.
 */
#include "simtest.h"

#include <string.h>

#define CAPACITY ((size_t)1 << 30)

static CUdevice dev;
static CUcontext ctx;

static int driver_setup(void **state)
{
    (void)state;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return -1;
    return 0;
}

static int driver_teardown(void **state)
{
    (void)state;
    cuDevicePrimaryCtxRelease_v2(dev);
    return 0;
}

static void test_device_and_context(void **state)
{
    (void)state;
    int n = 0, v = 0;
    CU_OK(cuDeviceGetCount(&n));
    assert_int_equal(n, 1);
    CU_OK(cuDriverGetVersion(&v));
    assert_true(v >= 13000);
    char name[256] = {0};
    CU_OK(cuDeviceGetName(name, sizeof name, dev));
    assert_true(strlen(name) > 0);
    size_t total = 0;
    CU_OK(cuDeviceTotalMem_v2(&total, dev));
    assert_int_equal(total, CAPACITY);
    int warp = 0;
    CU_OK(cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev));
    assert_int_equal(warp, 32);
    CUdevice d = -1;
    CU_OK(cuCtxGetDevice(&d));
    assert_int_equal(d, 0);
    CUcontext cur = NULL;
    CU_OK(cuCtxGetCurrent(&cur));
    assert_ptr_equal(cur, ctx);
    unsigned flags = 0;
    int active = 0;
    CU_OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    assert_int_equal(active, 1);
    CUdevice bad;
    CU_EXPECT(cuDeviceGet(&bad, 5), CUDA_ERROR_INVALID_DEVICE);
}

static void test_mem_alloc_copy_free(void **state)
{
    (void)state;
    enum { N = 100000 };
    unsigned char h[N], back[N];
    CUdeviceptr a = 0, b = 0;
    unsigned long allocs = cucacheSimDeviceAllocs(), frees = cucacheSimDeviceFrees();
    size_t f0, f1, total;
    CU_OK(cuMemGetInfo_v2(&f0, &total));
    assert_int_equal(total, CAPACITY);
    CU_OK(cuMemAlloc_v2(&a, N));
    CU_OK(cuMemAlloc_v2(&b, N));
    assert_int_equal(a % 256, 0);
    assert_int_equal(cucacheSimDeviceAllocs(), allocs + 2);
    CU_OK(cuMemGetInfo_v2(&f1, &total));
    assert_true(f1 <= f0 - 2 * N);

    simtest_fill(h, N, 90);
    CU_OK(cuMemcpyHtoD_v2(a, h, N));
    CU_OK(cuMemcpyDtoD_v2(b, a, N));
    CU_OK(cuMemsetD8_v2(b, 0xC3, 10));
    CU_OK(cuMemsetD32_v2(b + 12, 0x01020304u, 2));
    memset(back, 0, N);
    CU_OK(cuMemcpyDtoH_v2(back, b, N));
    assert_int_equal(simtest_check_byte(back, 10, 0xC3), -1);
    assert_int_equal(simtest_check(back + 10, 2, 90, 10), -1);
    static const unsigned char le[8] = {4, 3, 2, 1, 4, 3, 2, 1};
    assert_memory_equal(back + 12, le, 8);
    assert_int_equal(simtest_check(back + 20, N - 20, 90, 20), -1);

    CUdeviceptr base = 0;
    size_t size = 0;
    CU_OK(cuMemGetAddressRange_v2(&base, &size, a + 1234));
    assert_int_equal(base, a);
    assert_true(size >= N);
    unsigned type = 0;
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a + 5));
    assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
    int ordinal = -1;
    CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a));
    assert_int_equal(ordinal, 0);

    CU_OK(cuMemFree_v2(a));
    CU_OK(cuMemFree_v2(b));
    assert_int_equal(cucacheSimDeviceFrees(), frees + 2);
    CU_EXPECT(cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemAlloc_v2(&a, 2 * CAPACITY), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemGetInfo_v2(&f1, &total));
    assert_int_equal(f1, f0);
}

static void *proc(const char *name, int version, cuuint64_t flags, CUresult want, CUdriverProcAddressQueryResult st)
{
    void *fn = (void *)0x1;
    CUdriverProcAddressQueryResult got = (CUdriverProcAddressQueryResult)-1;
    CUresult rc = cuGetProcAddress_v2(name, &fn, version, flags, &got);
    if (rc != want || got != st) {
        print_error("cuGetProcAddress_v2(%s, %d, %llu): rc %d status %d, expected rc %d status %d\n", name, version,
                    (unsigned long long)flags, (int)rc, (int)got, (int)want, (int)st);
        fail();
    }
    return fn;
}

#define FN(f) ((void *)(uintptr_t)(f))

/* cuCtxCreate's three ABIs: each pushes a new (not primary) context;
 * execution affinity needs MPS and is unsupported, CIG is not simulated. */
static void test_created_contexts(void **state)
{
    (void)state;
    CUcontext c[3] = {NULL, NULL, NULL}, top = NULL;
    CU_OK(cuCtxCreate_v2(&c[0], 0, dev));
    CU_OK(cuCtxCreate_v3(&c[1], NULL, 0, 0, dev));
    CUctxCreateParams none = {NULL, 0, NULL};
    CU_OK(cuCtxCreate_v4(&c[2], &none, 0, dev));
    assert_true(c[0] && c[1] && c[2] && c[0] != c[1] && c[1] != c[2] && c[0] != ctx);
    CU_OK(cuCtxGetCurrent(&top));
    assert_ptr_equal(top, c[2]);
    for (int i = 2; i >= 0; i--) {
        CU_OK(cuCtxPopCurrent_v2(&top));
        assert_ptr_equal(top, c[i]);
        CU_OK(cuCtxDestroy_v2(c[i]));
    }
    CUcontext x = NULL;
    CU_OK(cuCtxCreate_v4(&x, NULL, 0, dev)); /* no parameters: as _v2 */
    CU_OK(cuCtxPopCurrent_v2(&top));
    CU_OK(cuCtxDestroy_v2(x));
    CUexecAffinityParam *aff = (CUexecAffinityParam *)&none; /* never read: refused first */
    CU_EXPECT(cuCtxCreate_v3(&x, aff, 1, 0, dev), CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
    CU_EXPECT(cuCtxCreate_v3(&x, NULL, 1, 0, dev), CUDA_ERROR_INVALID_VALUE);
    CUctxCreateParams some = {aff, 1, NULL};
    CU_EXPECT(cuCtxCreate_v4(&x, &some, 0, dev), CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
    CU_EXPECT(cuCtxCreate_v4(NULL, &none, 0, dev), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuCtxCreate_v4(&x, &none, 0, 7), CUDA_ERROR_INVALID_DEVICE);
    CU_OK(cuCtxGetCurrent(&top));
    assert_ptr_equal(top, ctx);
}

static void test_get_proc_address(void **state)
{
    (void)state;
    const CUresult ok = CUDA_SUCCESS;
    const CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
    const cuuint64_t dflt = CU_GET_PROC_ADDRESS_DEFAULT, pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    const cuuint64_t legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    assert_ptr_equal(proc("cuMemAlloc", 13000, dflt, ok, found), FN(cuMemAlloc_v2));
    assert_ptr_equal(proc("cuMemFree", 12000, dflt, ok, found), FN(cuMemFree_v2));
    assert_ptr_equal(proc("cuMemGetInfo", 13000, dflt, ok, found), FN(cuMemGetInfo_v2));
    assert_ptr_equal(proc("cuInit", 13000, dflt, ok, found), FN(cuInit));
    assert_ptr_equal(proc("cuMemcpyAsync", 13000, dflt, ok, found), FN(cuMemcpyAsync));
    assert_ptr_equal(proc("cuMemcpyAsync", 13000, legacy, ok, found), FN(cuMemcpyAsync));
    assert_ptr_equal(proc("cuMemcpyAsync", 13000, pt, ok, found), FN(cuMemcpyAsync_ptsz));
    assert_ptr_equal(proc("cuMemcpyHtoD", 13000, pt, ok, found), FN(cuMemcpyHtoD_v2_ptds));
    assert_ptr_equal(proc("cuMemcpyHtoD", 13000, dflt, ok, found), FN(cuMemcpyHtoD_v2));
    assert_ptr_equal(proc("cuMemAllocAsync", 13000, dflt, ok, found), FN(cuMemAllocAsync));
    assert_ptr_equal(proc("cuMemAllocAsync", 13000, pt, ok, found), FN(cuMemAllocAsync_ptsz));
    assert_ptr_equal(proc("cuMemFreeAsync", 13000, pt, ok, found), FN(cuMemFreeAsync_ptsz));
    assert_ptr_equal(proc("cuStreamBeginCapture", 13000, dflt, ok, found), FN(cuStreamBeginCapture_v2));
    assert_ptr_equal(proc("cuStreamSynchronize", 13000, pt, ok, found), FN(cuStreamSynchronize_ptsz));
    assert_ptr_equal(proc("cuStreamDestroy", 13000, dflt, ok, found), FN(cuStreamDestroy_v2));
    assert_ptr_equal(proc("cuEventDestroy", 13000, dflt, ok, found), FN(cuEventDestroy_v2));
    assert_ptr_equal(proc("cuCtxCreate", 11000, dflt, ok, found), FN(cuCtxCreate_v2));
    assert_ptr_equal(proc("cuCtxCreate", 12000, dflt, ok, found), FN(cuCtxCreate_v3));
    assert_ptr_equal(proc("cuCtxCreate", 13000, dflt, ok, found), FN(cuCtxCreate_v4));
    /* introduced in 11.2: not there for a CUDA 10 caller */
    assert_null(proc("cuMemAllocAsync", 10000, dflt, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT));
    assert_null(proc("cuNoSuchEntryPoint", 13000, dflt, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));
}

static void test_error_strings(void **state)
{
    (void)state;
    const char *s = NULL;
    CU_OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    assert_string_equal(s, "out of memory");
    CU_OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    assert_string_equal(s, "CUDA_ERROR_OUT_OF_MEMORY");
    CU_OK(cuGetErrorName(CUDA_SUCCESS, &s));
    assert_string_equal(s, "CUDA_SUCCESS");
    CU_OK(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s));
    assert_string_equal(s, "CUDA_ERROR_INVALID_VALUE");
    s = (const char *)0x1;
    CU_EXPECT(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    assert_null(s);
}

static void test_streams_events_and_async_alloc(void **state)
{
    (void)state;
    CUstream s = NULL;
    CUevent e = NULL;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuEventCreate(&e, CU_EVENT_DEFAULT));
    unsigned flags = 0;
    CU_OK(cuStreamGetFlags(s, &flags));
    assert_int_equal(flags, CU_STREAM_NON_BLOCKING);
    simtest_gate_t *g = simtest_gate_new();
    CU_OK(cuLaunchHostFunc(s, simtest_gate_fn, g));
    CUdeviceptr p = 0;
    CU_OK(cuMemAllocAsync(&p, 4096, s));
    CU_OK(cuMemsetD8Async(p, 0x19, 4096, s));
    unsigned char *h = NULL;
    CU_OK(cuMemAllocHost_v2((void **)&h, 4096));
    memset(h, 0, 4096);
    CU_OK(cuMemcpyDtoHAsync_v2(h, p, 4096, s));
    CU_OK(cuMemFreeAsync(p, s));
    CU_OK(cuEventRecord(e, s));
    CU_EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CU_EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    simtest_gate_open(g);
    CU_OK(cuEventSynchronize(e));
    CU_OK(cuStreamQuery(s));
    assert_int_equal(simtest_check_byte(h, 4096, 0x19), -1);
    CU_OK(cuCtxSynchronize());
    CU_OK(cuMemFreeHost(h));
    CU_OK(cuEventDestroy_v2(e));
    CU_OK(cuStreamDestroy_v2(s));
}

/* Runtime handles are driver handles, and memory from one layer can be used
 * and freed by the other, as with the real libraries. */
static void test_runtime_and_driver_interoperate(void **state)
{
    (void)state;
    cudaStream_t rs = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking));
    CU_OK(cuStreamQuery((CUstream)rs));
    unsigned flags = 0;
    CU_OK(cuStreamGetFlags((CUstream)rs, &flags));
    assert_int_equal(flags, CU_STREAM_NON_BLOCKING);

    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc_v2(&d, 4096));
    unsigned char h[4096];
    simtest_fill(h, sizeof h, 91);
    SIM_OK(cudaMemcpyAsync((void *)(uintptr_t)d, h, sizeof h, cudaMemcpyHostToDevice, rs));
    SIM_OK(cudaStreamSynchronize(rs));
    unsigned char back[4096] = {0};
    CU_OK(cuMemcpyDtoH_v2(back, d, sizeof back));
    assert_int_equal(simtest_check(back, sizeof back, 91, 0), -1);
    SIM_OK(cudaFree((void *)(uintptr_t)d));

    void *r = NULL;
    SIM_OK(cudaMalloc(&r, 4096));
    CU_OK(cuMemFree_v2((CUdeviceptr)(uintptr_t)r));
    SIM_OK(cudaStreamDestroy(rs));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_device_and_context),
        SIMTEST(test_mem_alloc_copy_free),
        SIMTEST(test_created_contexts),
        SIMTEST(test_get_proc_address),
        SIMTEST(test_error_strings),
        SIMTEST(test_streams_events_and_async_alloc),
        SIMTEST(test_runtime_and_driver_interoperate),
    };
    return cmocka_run_group_tests_name("sim.driver", tests, driver_setup, driver_teardown);
}
