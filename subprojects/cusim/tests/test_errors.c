/*
 * Proves the simulated runtime reports errors like CUDA's: error names and
 * strings, cudaGetLastError / cudaPeekAtLastError (per thread, kept across
 * successful calls, cleared by Get only), invalid devices, destroyed and
 * garbage stream and event handles answered with an error rather than a
 * crash, and a sticky device fault (cucacheSimLaunchFault) that every later
 * call reports, that cudaGetLastError does not clear and that cudaDeviceReset
 * does.  Also the device's identity: properties, attributes, versions.
 */
#include "simtest.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define LEGACY ((cudaStream_t)0)

static void test_error_names_and_strings(void **state)
{
    (void)state;
    assert_string_equal(cudaGetErrorName(cudaSuccess), "cudaSuccess");
    assert_string_equal(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue");
    assert_string_equal(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
    assert_string_equal(cudaGetErrorName(cudaErrorNotReady), "cudaErrorNotReady");
    assert_string_equal(cudaGetErrorName(cudaErrorIllegalAddress), "cudaErrorIllegalAddress");
    assert_string_equal(cudaGetErrorName(cudaErrorInvalidDevice), "cudaErrorInvalidDevice");
    assert_string_equal(cudaGetErrorName(cudaErrorStreamCaptureUnsupported), "cudaErrorStreamCaptureUnsupported");
    assert_string_equal(cudaGetErrorString(cudaSuccess), "no error");
    assert_string_equal(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
    assert_string_equal(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
    assert_string_equal(cudaGetErrorString(cudaErrorNotReady), "device not ready");
    assert_string_equal(cudaGetErrorString(cudaErrorIllegalAddress), "an illegal memory access was encountered");
    assert_non_null(cudaGetErrorString((cudaError_t)12345));
    assert_non_null(cudaGetErrorName((cudaError_t)12345));
}

static void test_last_error_peek_and_get(void **state)
{
    (void)state;
    SIM_OK(cudaGetLastError());
    SIM_EXPECT(cudaSetDevice(99), cudaErrorInvalidDevice);
    SIM_EXPECT(cudaPeekAtLastError(), cudaErrorInvalidDevice);
    SIM_EXPECT(cudaPeekAtLastError(), cudaErrorInvalidDevice);
    /* a successful call in between does not reset it */
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 256));
    SIM_OK(cudaFree(p));
    SIM_EXPECT(cudaGetLastError(), cudaErrorInvalidDevice);
    SIM_OK(cudaGetLastError());
    SIM_OK(cudaPeekAtLastError());
}

static void *fail_in_thread(void *arg)
{
    int *rc = arg;
    rc[0] = cudaSetDevice(99);
    rc[1] = cudaPeekAtLastError();
    return NULL;
}

static void test_last_error_is_per_thread(void **state)
{
    (void)state;
    SIM_OK(cudaGetLastError());
    int rc[2] = {-1, -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fail_in_thread, rc), 0);
    pthread_join(th, NULL);
    SIM_EXPECT(rc[0], cudaErrorInvalidDevice);
    SIM_EXPECT(rc[1], cudaErrorInvalidDevice);
    SIM_OK(cudaPeekAtLastError());
    SIM_OK(cudaGetLastError());
}

static void test_invalid_device(void **state)
{
    (void)state;
    int n = 0, dev = -1;
    SIM_OK(cudaGetDeviceCount(&n));
    SIM_EXPECT(cudaSetDevice(99), cudaErrorInvalidDevice);
    SIM_EXPECT(cudaSetDevice(-1), cudaErrorInvalidDevice);
    SIM_EXPECT(cudaSetDevice(n), cudaErrorInvalidDevice);
    struct cudaDeviceProp prop;
    SIM_EXPECT(cudaGetDeviceProperties(&prop, n), cudaErrorInvalidDevice);
    cudaMemPool_t pool;
    SIM_EXPECT(cudaDeviceGetDefaultMemPool(&pool, n), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
    SIM_OK(cudaGetDevice(&dev));
    assert_int_equal(dev, 0);
    SIM_OK(cudaSetDevice(0));
}

static void test_destroyed_and_garbage_handles_are_errors(void **state)
{
    (void)state;
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreate(&s));
    SIM_OK(cudaStreamDestroy(s));
    SIM_FAILS(cudaStreamQuery(s));
    SIM_FAILS(cudaStreamSynchronize(s));
    SIM_FAILS(cudaLaunchHostFunc(s, simtest_mark_fn, simtest_mark_new()));
    (void)cudaGetLastError();

    cudaEvent_t e = NULL;
    SIM_OK(cudaEventCreate(&e));
    SIM_OK(cudaEventDestroy(e));
    SIM_FAILS(cudaEventQuery(e));
    SIM_FAILS(cudaEventRecord(e, LEGACY));
    (void)cudaGetLastError();

    /* handles that were never created; heap memory so that a simulator
     * reading through them reads zeroes rather than crashing ASan-free */
    void *junk = calloc(1, 4096);
    assert_non_null(junk);
    cudaStream_t gs = (cudaStream_t)junk;
    cudaEvent_t ge = (cudaEvent_t)((char *)junk + 1024);
    SIM_FAILS(cudaStreamQuery(gs));
    SIM_FAILS(cudaStreamSynchronize(gs));
    SIM_FAILS(cudaEventQuery(ge));
    SIM_FAILS(cudaStreamWaitEvent(LEGACY, ge, 0));
    cudaStream_t wild = (cudaStream_t)(uintptr_t)0xdead0000;
    SIM_FAILS(cudaStreamQuery(wild));
    (void)cudaGetLastError();
    free(junk);

    /* the device still works */
    SIM_OK(cudaStreamCreate(&s));
    simtest_mark_t *m = simtest_mark_new();
    simtest_mark_on(m, s);
    SIM_OK(cudaStreamSynchronize(s));
    assert_true(simtest_mark_ran(m));
    SIM_OK(cudaStreamDestroy(s));
}

static void test_device_identity(void **state)
{
    (void)state;
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    SIM_OK(cudaGetDeviceProperties(&prop, 0));
    assert_true(strlen(prop.name) > 0);
    assert_true(prop.totalGlobalMem > 0);
    assert_int_equal(prop.warpSize, 32);
    int v = -1;
    SIM_OK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0));
    assert_int_equal(v, prop.major);
    SIM_OK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0));
    assert_int_equal(v, prop.multiProcessorCount);
    SIM_OK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, 0));
    assert_int_equal(v, 1);
    SIM_OK(cudaDeviceGetAttribute(&v, cudaDevAttrUnifiedAddressing, 0));
    assert_int_equal(v, 1);
    int rt = 0, drv = 0;
    SIM_OK(cudaRuntimeGetVersion(&rt));
    SIM_OK(cudaDriverGetVersion(&drv));
    assert_true(rt >= 13000 && rt < 14000); /* tests link libcudart.so.13 */
    assert_true(drv >= rt);
}

static void test_sticky_fault_until_device_reset(void **state)
{
    (void)state;
    cudaStream_t s = NULL, t = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    SIM_OK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
    void *p = NULL;

    /* not reported before it runs */
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    CU_OK(cucacheSimLaunchFault(s));
    SIM_EXPECT(cudaStreamQuery(s), cudaErrorNotReady);
    (void)cudaGetLastError();
    SIM_OK(cudaMalloc(&p, 4096)); /* (not cudaFree: it would wait for s) */
    SIM_OK(cudaMemsetAsync(p, 0, 4096, t));
    SIM_OK(cudaStreamSynchronize(t));
    simtest_gate_open(g);

    SIM_EXPECT(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    SIM_EXPECT(cudaStreamSynchronize(t), cudaErrorIllegalAddress);
    SIM_EXPECT(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    SIM_EXPECT(cudaMalloc(&p, 4096), cudaErrorIllegalAddress);
    unsigned char h[64] = {0};
    SIM_EXPECT(cudaMemcpy(h, h + 32, 16, cudaMemcpyHostToHost), cudaErrorIllegalAddress);
    SIM_EXPECT(cudaGetLastError(), cudaErrorIllegalAddress);
    SIM_EXPECT(cudaGetLastError(), cudaErrorIllegalAddress);
    SIM_EXPECT(cudaPeekAtLastError(), cudaErrorIllegalAddress);

    SIM_OK(cudaDeviceReset());
    void *d = NULL;
    SIM_OK(cudaMalloc(&d, 4096));
    SIM_OK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    SIM_OK(cudaMemset(d, 0x4D, 32));
    SIM_OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check_byte(h, 32, 0x4D), -1);
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaGetLastError());
    SIM_OK(cudaFree(d));
}

static void test_device_reset_releases_memory(void **state)
{
    (void)state;
    size_t f0, f1, f2, total;
    SIM_OK(cudaDeviceReset());
    SIM_OK(cudaMemGetInfo(&f0, &total));
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 64 << 20));
    SIM_OK(cudaMemGetInfo(&f1, &total));
    assert_true(f1 < f0);
    cudaStream_t s = NULL;
    cudaEvent_t e = NULL;
    SIM_OK(cudaStreamCreate(&s));
    SIM_OK(cudaEventCreate(&e));
    SIM_OK(cudaDeviceReset());
    SIM_OK(cudaMemGetInfo(&f2, &total));
    assert_int_equal(f2, f0);
    /* the reset destroyed them: errors, not crashes */
    SIM_FAILS(cudaStreamQuery(s));
    SIM_FAILS(cudaEventQuery(e));
    SIM_EXPECT(cudaFree(p), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    SIM_OK(cudaMalloc(&p, 4096));
    SIM_OK(cudaFree(p));
}

/* A failed sticky test must not leave the fault to the next test. */
static int reset_teardown(void **state)
{
    simtest_teardown(state);
    (void)cudaDeviceReset();
    (void)cudaGetLastError();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_error_names_and_strings),
        SIMTEST(test_last_error_peek_and_get),
        SIMTEST(test_last_error_is_per_thread),
        SIMTEST(test_invalid_device),
        SIMTEST(test_destroyed_and_garbage_handles_are_errors),
        SIMTEST(test_device_identity),
        cmocka_unit_test_teardown(test_sticky_fault_until_device_reset, reset_teardown),
        SIMTEST(test_device_reset_releases_memory),
    };
    return cmocka_run_group_tests_name("sim.errors", tests, simtest_group_setup, NULL);
}
