/*
 * Proves that a block freed on another stream than its own is reused as
 * CUDA's pool reuses it (core/cross.h): a 400 MiB block allocated with
 * cudaMallocAsync on stream A, read on stream B behind a closed gate and
 * freed there with cudaFreeAsync, serves A's next cudaMallocAsync at once,
 * 200 times on a 1 GiB device: the same address each time, no new segment,
 * no host wait (num_fence_waits), and no race (A's next writer is made to
 * wait for B's reader on the device).  With the program's
 * cudaMemPoolReuseAllowInternalDependencies turned off on the device's
 * pool, or while a capture is on the device, the free is never reused
 * before B's reader ran.
 *
 * Run with the group argument "planted" (test interpose_xstream_planted,
 * CUCACHE_TEST_NO_STREAM_WAIT=1: cucache leaves the device-side wait out)
 * it proves that the race detector catches the reuse without the wait.
 *
 * Seen to fail: the first group run with CUCACHE_TEST_NO_STREAM_WAIT=1
 * reports a race in the loop's teardown; with step 1c taken out of the
 * ladder (core/alloc.c) the loop's host waits and addresses fail.
 */
#include "itest.h"

#include <string.h>

#define BLOCK (400 * MIB)

/* One round: p written on a, read on b behind gate g (closed), freed on b. */
static void read_on_other_stream_and_free(void *p, cudaStream_t a, cudaStream_t b, cudaEvent_t written,
                                          simtest_gate_t *g)
{
    struct cucache_sim_access r = {p, BLOCK, 0};
    SIM_OK(cudaEventRecord(written, a));
    SIM_OK(cudaStreamWaitEvent(b, written, 0));
    simtest_gate_block(g, b);
    CU_OK(cucacheSimLaunch((CUstream)b, NULL, NULL, &r, 1));
    SIM_OK(cudaFreeAsync(p, b));
}

static void write_on(void *p, cudaStream_t s)
{
    struct cucache_sim_access w = {p, BLOCK, 1};
    CU_OK(cucacheSimLaunch((CUstream)s, NULL, NULL, &w, 1));
}

/* The cross-stream loop, `rounds` times; returns how many allocations got
 * the first block's address back. */
static int cross_loop(int rounds, cudaStream_t a, cudaStream_t b)
{
    cudaEvent_t written;
    SIM_OK(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
    void *first = NULL, *p = NULL;
    SIM_OK(cudaMallocAsync(&first, BLOCK, a));
    p = first;
    int same = 0;
    simtest_gate_t *g = NULL;
    for (int i = 0; i < rounds; i++) {
        write_on(p, a);
        if (g)
            simtest_gate_open(g); /* the previous reader may run now */
        g = simtest_gate_new();
        read_on_other_stream_and_free(p, a, b, written, g);
        SIM_OK(cudaMallocAsync(&p, BLOCK, a)); /* B's reader is still behind its gate */
        same += p == first;
    }
    write_on(p, a);
    simtest_gate_open(g);
    SIM_OK(cudaFreeAsync(p, a));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaEventDestroy(written));
    return same;
}

static void test_cross_stream_loop_never_waits_on_host(void **state)
{
    (void)state;
    cudaStream_t a, b;
    SIM_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    SIM_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    itest_defer_stream(a);
    itest_defer_stream(b);
    int64_t waits0 = itest_stat(0, "num_fence_waits");
    int64_t segs0 = itest_stat(0, "num_device_alloc");
    int same = cross_loop(200, a, b);
    assert_int_equal(same, 200);
    assert_int_equal(itest_stat(0, "num_fence_waits") - waits0, 0);
    assert_true(itest_stat(0, "num_device_alloc") - segs0 <= 1);
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(b));
}

/* cudaMemPoolReuseAllowInternalDependencies off on the device's pool:
 * cucache no longer inserts the wait; the block freed on B serves A only
 * once B's reader ran (the host waited, or the cache grew). */
static void test_internal_dependencies_off(void **state)
{
    (void)state;
    cudaMemPool_t pool;
    SIM_OK(cudaDeviceGetMemPool(&pool, 0));
    int off = 0, on = 1;
    SIM_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &off));
    cudaStream_t a, b;
    SIM_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    SIM_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    itest_defer_stream(a);
    itest_defer_stream(b);
    cudaEvent_t written;
    SIM_OK(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
    void *p = NULL, *q = NULL;
    SIM_OK(cudaMallocAsync(&p, BLOCK, a));
    write_on(p, a);
    simtest_gate_t *g = simtest_gate_new();
    read_on_other_stream_and_free(p, a, b, written, g);
    simtest_gate_open_after(g, 200); /* should cucache wait on the host */
    SIM_OK(cudaMallocAsync(&q, BLOCK, a));
    assert_true(q != p || simtest_gate_passed(g));
    write_on(q, a);
    SIM_OK(cudaFreeAsync(q, a));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &on));
    SIM_OK(cudaEventDestroy(written));
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(b));
}

/* While a capture is on the device no wait is inserted (a capturing
 * stream must not get one, and the core makes no such call while the
 * device captures): A's allocation does not get the block freed on B,
 * whatever serves it (a hit splitting A's free block beside it, or the
 * capture's own route). */
static void test_no_wait_during_a_capture(void **state)
{
    (void)state;
    const size_t n = 64 * MIB;
    cudaStream_t a, b, c;
    SIM_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    SIM_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    SIM_OK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
    itest_defer_stream(a);
    itest_defer_stream(b);
    itest_defer_stream(c);
    cudaEvent_t written;
    SIM_OK(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
    void *big = NULL, *p = NULL, *q = NULL;
    SIM_OK(cudaMallocAsync(&big, 2 * n, a));
    SIM_OK(cudaFreeAsync(big, a)); /* free in A's bins */
    SIM_OK(cudaMallocAsync(&p, n, a));
    struct cucache_sim_access w = {p, n, 1}, r = {p, n, 0};
    CU_OK(cucacheSimLaunch((CUstream)a, NULL, NULL, &w, 1));
    SIM_OK(cudaEventRecord(written, a));
    SIM_OK(cudaStreamWaitEvent(b, written, 0));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, b);
    CU_OK(cucacheSimLaunch((CUstream)b, NULL, NULL, &r, 1));
    SIM_OK(cudaFreeAsync(p, b));
    SIM_OK(cudaStreamBeginCapture(c, cudaStreamCaptureModeRelaxed));
    SIM_OK(cudaMallocAsync(&q, n / 2, a)); /* a hit that splits */
    cudaGraph_t graph = NULL;
    SIM_OK(cudaStreamEndCapture(c, &graph));
    SIM_OK(cudaGraphDestroy(graph));
    assert_false(itest_overlap(q, n / 2, p, n));
    struct cucache_sim_access w2 = {q, n / 2, 1};
    CU_OK(cucacheSimLaunch((CUstream)a, NULL, NULL, &w2, 1));
    simtest_gate_open(g);
    SIM_OK(cudaFreeAsync(q, a));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaEventDestroy(written));
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(b));
    SIM_OK(cudaStreamDestroy(c));
}

/* Planted (CUCACHE_TEST_NO_STREAM_WAIT=1): the reuse without the wait is a
 * race the detector reports. */
static void test_planted_reuse_without_wait_races(void **state)
{
    (void)state;
    cudaStream_t a, b;
    SIM_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    SIM_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    itest_defer_stream(a);
    itest_defer_stream(b);
    unsigned long races0 = itest_races();
    assert_int_equal(cross_loop(5, a, b), 5);
    assert_true(itest_races() > races0);
    cucacheSimRaceReset();
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(b));
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "planted") == 0) {
        const struct CMUnitTest planted[] = {
            cmocka_unit_test_setup_teardown(test_planted_reuse_without_wait_races, itest_setup, simtest_teardown),
        };
        return ITEST_RUN("interpose.xstream.planted", planted, itest_group_setup);
    }
    const struct CMUnitTest tests[] = {
        ITEST(test_cross_stream_loop_never_waits_on_host),
        ITEST(test_no_wait_during_a_capture), /* before the policy is turned off: a hit reads the last miss's */
        ITEST(test_internal_dependencies_off),
    };
    return ITEST_RUN("interpose.xstream", tests, itest_group_setup);
}
