/*
 * Proves that with CUCACHE_SIM_DEVICES=2 (and CUCACHE_SIM_CAPACITY=1G, set by
 * meson) the simulated devices are separate: cudaSetDevice switches, each
 * device has its own capacity and accounting, pointer attributes name the
 * device that owns the memory whatever the current device, copies move bytes
 * between devices, streams, synchronisation, default pools and
 * stream-ordered allocations belong to their device, and events order work
 * across devices.
 */
#include "simtest.h"

#include <stdlib.h>
#include <string.h>

#define CAPACITY ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)
#define LEGACY ((cudaStream_t)0)

static int current_device(void)
{
    int d = -1;
    SIM_OK(cudaGetDevice(&d));
    return d;
}

static size_t free_on(int dev)
{
    int old = current_device();
    size_t f = 0, total = 0;
    SIM_OK(cudaSetDevice(dev));
    SIM_OK(cudaMemGetInfo(&f, &total));
    assert_int_equal(total, CAPACITY);
    SIM_OK(cudaSetDevice(old));
    return f;
}

static void *alloc_on(int dev, size_t n)
{
    void *p = NULL;
    SIM_OK(cudaSetDevice(dev));
    SIM_OK(cudaMalloc(&p, n));
    return p;
}

static int device_of(const void *p)
{
    struct cudaPointerAttributes a;
    memset(&a, 0xFF, sizeof a);
    SIM_OK(cudaPointerGetAttributes(&a, p));
    assert_int_equal(a.type, cudaMemoryTypeDevice);
    return a.device;
}

static int teardown_dev0(void **state)
{
    (void)cudaSetDevice(1);
    simtest_teardown(state);
    (void)cudaSetDevice(0);
    simtest_teardown(state);
    return 0;
}

#define MDTEST(f) cmocka_unit_test_teardown(f, teardown_dev0)

static void test_device_count_and_switch(void **state)
{
    (void)state;
    int n = 0;
    SIM_OK(cudaGetDeviceCount(&n));
    assert_int_equal(n, 2);
    assert_int_equal(current_device(), 0);
    SIM_OK(cudaSetDevice(1));
    assert_int_equal(current_device(), 1);
    SIM_EXPECT(cudaSetDevice(2), cudaErrorInvalidDevice);
    SIM_EXPECT(cudaGetLastError(), cudaErrorInvalidDevice);
    assert_int_equal(current_device(), 1);
    struct cudaDeviceProp p0, p1;
    SIM_OK(cudaGetDeviceProperties(&p0, 0));
    SIM_OK(cudaGetDeviceProperties(&p1, 1));
    assert_int_equal(p0.totalGlobalMem, CAPACITY);
    assert_int_equal(p1.totalGlobalMem, CAPACITY);
    assert_memory_not_equal(p0.uuid.bytes, p1.uuid.bytes, sizeof p0.uuid.bytes);
    SIM_OK(cudaSetDevice(0));
}

static void test_capacity_is_per_device(void **state)
{
    (void)state;
    size_t f0 = free_on(0), f1 = free_on(1);
    void *a = alloc_on(0, CAPACITY / 4 * 3);
    assert_true(free_on(0) <= f0 - CAPACITY / 4 * 3);
    assert_int_equal(free_on(1), f1);
    /* would not fit if the devices shared one capacity */
    void *b = alloc_on(1, CAPACITY / 4 * 3);
    assert_true(free_on(1) <= f1 - CAPACITY / 4 * 3);
    void *c = NULL;
    SIM_EXPECT(cudaMalloc(&c, CAPACITY / 2), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    /* freeing another device's memory works from any current device */
    SIM_OK(cudaSetDevice(1));
    SIM_OK(cudaFree(a));
    assert_int_equal(free_on(0), f0);
    SIM_OK(cudaSetDevice(0));
    SIM_OK(cudaFree(b));
    assert_int_equal(free_on(1), f1);
}

static void test_pointer_attributes_report_device(void **state)
{
    (void)state;
    void *p0 = alloc_on(0, 4096), *p1 = alloc_on(1, 4096);
    for (int cur = 0; cur < 2; cur++) {
        SIM_OK(cudaSetDevice(cur));
        assert_int_equal(device_of(p0), 0);
        assert_int_equal(device_of(p1), 1);
        assert_int_equal(device_of((char *)p1 + 100), 1);
    }
    SIM_OK(cudaFree(p0));
    SIM_OK(cudaFree(p1));
    SIM_OK(cudaSetDevice(0));
}

static void test_copies_between_devices(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    unsigned char *h = malloc(N);
    assert_non_null(h);
    void *p0 = alloc_on(0, N), *p1 = alloc_on(1, N);
    simtest_fill(h, N, 80);
    SIM_OK(cudaMemcpy(p1, h, N, cudaMemcpyHostToDevice)); /* current: 1 */
    SIM_OK(cudaSetDevice(0));
    SIM_OK(cudaMemcpy(p0, p1, N, cudaMemcpyDefault));
    memset(h, 0, N);
    SIM_OK(cudaMemcpy(h, p0, N, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check(h, N, 80, 0), -1);
    SIM_OK(cudaMemset(p0, 0x0D, N));
    SIM_OK(cudaMemcpy(p1, p0, N, cudaMemcpyDeviceToDevice));
    /* a device-to-device cudaMemcpy may return before it completes, and
     * device 1's legacy stream is not ordered with device 0's */
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaSetDevice(1));
    SIM_OK(cudaMemcpy(h, p1, N, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check_byte(h, N, 0x0D), -1);
    SIM_OK(cudaFree(p0));
    SIM_OK(cudaFree(p1));
    SIM_OK(cudaSetDevice(0));
    free(h);
}

static void test_streams_belong_to_their_device(void **state)
{
    (void)state;
    cudaStream_t s1 = NULL;
    SIM_OK(cudaSetDevice(1));
    SIM_OK(cudaStreamCreate(&s1)); /* a blocking stream of device 1 */
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s1);
    SIM_OK(cudaSetDevice(0));
    /* device 0's legacy stream does not wait for device 1's blocking stream */
    simtest_mark_t *m = simtest_mark_new();
    simtest_mark_on(m, LEGACY);
    assert_true(simtest_mark_wait(m));
    /* synchronising device 0 does not wait for device 1 */
    SIM_OK(cudaDeviceSynchronize());
    assert_false(simtest_gate_passed(g));
    SIM_EXPECT(cudaStreamQuery(s1), cudaErrorNotReady);
    (void)cudaGetLastError();
    /* an event of device 0 cannot be recorded on a stream of device 1 */
    cudaEvent_t e0 = NULL;
    SIM_OK(cudaEventCreate(&e0));
    SIM_FAILS(cudaEventRecord(e0, s1));
    (void)cudaGetLastError();
    /* a stream of another device can be synchronised from here */
    simtest_gate_open_after(g, 20);
    SIM_OK(cudaStreamSynchronize(s1));
    assert_true(simtest_gate_passed(g));
    SIM_OK(cudaEventDestroy(e0));
    SIM_OK(cudaStreamDestroy(s1));
}

/* CUDA C Programming Guide, "Stream and Event Behavior": a memory copy
 * succeeds even if issued to a stream of another device than the current
 * one; cudaEventQuery/cudaEventSynchronize succeed for another device's
 * event; streams of another device can be queried and synchronised. */
static void test_other_device_streams_accept_copies_and_queries(void **state)
{
    (void)state;
    enum { N = 65536 };
    cudaStream_t s1 = NULL;
    cudaEvent_t e1 = NULL;
    unsigned char *h = NULL;
    SIM_OK(cudaMallocHost((void **)&h, N));
    memset(h, 0, N);
    SIM_OK(cudaSetDevice(1));
    SIM_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    SIM_OK(cudaEventCreate(&e1));
    void *p1 = NULL;
    SIM_OK(cudaMalloc(&p1, N));
    SIM_OK(cudaMemsetAsync(p1, 0x71, N, s1));
    SIM_OK(cudaEventRecord(e1, s1));
    SIM_OK(cudaSetDevice(0));
    SIM_OK(cudaEventSynchronize(e1));
    SIM_OK(cudaEventQuery(e1));
    SIM_OK(cudaMemcpyAsync(h, p1, N, cudaMemcpyDeviceToHost, s1));
    SIM_OK(cudaStreamSynchronize(s1));
    SIM_OK(cudaStreamQuery(s1));
    assert_int_equal(simtest_check_byte(h, N, 0x71), -1);
    SIM_OK(cudaFree(p1));
    SIM_OK(cudaEventDestroy(e1));
    SIM_OK(cudaStreamDestroy(s1));
    SIM_OK(cudaFreeHost(h));
}

static void test_events_order_work_across_devices(void **state)
{
    (void)state;
    cudaStream_t s0 = NULL, s1 = NULL;
    cudaEvent_t e0 = NULL;
    SIM_OK(cudaSetDevice(0));
    SIM_OK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    SIM_OK(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming));
    simtest_gate_t *g = simtest_gate_new();
    simtest_mark_t *m = simtest_mark_new();
    simtest_gate_block(g, s0);
    SIM_OK(cudaEventRecord(e0, s0));
    SIM_OK(cudaSetDevice(1));
    SIM_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    SIM_OK(cudaStreamWaitEvent(s1, e0, 0)); /* the event may be another device's */
    simtest_mark_on(m, s1);
    simtest_settle();
    assert_false(simtest_mark_ran(m));
    simtest_gate_open(g);
    SIM_OK(cudaStreamSynchronize(s1));
    assert_true(simtest_mark_seq(m) > simtest_gate_seq(g));
    SIM_OK(cudaStreamDestroy(s1));
    SIM_OK(cudaSetDevice(0));
    SIM_OK(cudaStreamDestroy(s0));
    SIM_OK(cudaEventDestroy(e0));
}

static void test_pools_and_async_allocations_belong_to_their_device(void **state)
{
    (void)state;
    cudaMemPool_t pool0 = NULL, pool1 = NULL;
    SIM_OK(cudaDeviceGetDefaultMemPool(&pool0, 0));
    SIM_OK(cudaDeviceGetDefaultMemPool(&pool1, 1));
    assert_ptr_not_equal(pool0, pool1);
    cudaStream_t s1 = NULL;
    SIM_OK(cudaSetDevice(1));
    SIM_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    SIM_OK(cudaSetDevice(0));
    size_t f1 = free_on(1);
    void *p = NULL;
    SIM_OK(cudaMallocAsync(&p, 8 * MIB, s1)); /* from the stream's device */
    SIM_OK(cudaStreamSynchronize(s1));
    assert_int_equal(device_of(p), 1);
    assert_true(free_on(1) <= f1 - 8 * MIB);
    SIM_OK(cudaFreeAsync(p, s1));
    SIM_OK(cudaMallocFromPoolAsync(&p, MIB, pool1, s1));
    SIM_OK(cudaStreamSynchronize(s1));
    assert_int_equal(device_of(p), 1);
    SIM_OK(cudaFreeAsync(p, s1));
    SIM_OK(cudaStreamSynchronize(s1));
    SIM_OK(cudaStreamDestroy(s1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        MDTEST(test_device_count_and_switch),          MDTEST(test_capacity_is_per_device),
        MDTEST(test_pointer_attributes_report_device), MDTEST(test_copies_between_devices),
        MDTEST(test_streams_belong_to_their_device),   MDTEST(test_other_device_streams_accept_copies_and_queries),
        MDTEST(test_events_order_work_across_devices), MDTEST(test_pools_and_async_allocations_belong_to_their_device),
    };
    return cmocka_run_group_tests_name("sim.multidevice", tests, simtest_group_setup, NULL);
}
