/*
 * Proves the simulated device's race detector checks work other than plain
 * copies, each race paired with a safe twin: simulated kernels
 * (cucacheSimLaunch) through their declared ranges, to the byte; captured
 * graphs like their copies; frees of memory still in use (cudaFreeAsync on
 * an unordered stream races, an ordered one or cudaFree does not); reuse by
 * the stream-ordered pool never races; work left on destroyed streams is
 * ordered by cudaDeviceSynchronize.  Meson runs it with CUCACHE_SIM_RACE=1
 * and CUCACHE_SIM_RACE_FATAL=0.
 */
#include "simrace.h"

#include <pthread.h>
#include <string.h>

enum { N = RACE_BUF };

static unsigned char *x, *y, *host, *host2;
static cudaStream_t nb, nb2, bl, bl2;
static struct simrace_fixture fixture;

static int group_setup(void **state)
{
    (void)state;
    if (simrace_fixture_create(&fixture) != 0)
        return -1;
    x = fixture.x;
    y = fixture.y;
    host = fixture.host;
    host2 = fixture.host2;
    nb = fixture.nb;
    nb2 = fixture.nb2;
    bl = fixture.bl;
    bl2 = fixture.bl2;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    simrace_fixture_destroy(&fixture);
    return 0;
}

/* A captured graph's copies are checked like any work on the stream it is
 * launched on. */
static void test_graph_launch_races_like_its_copies(void **state)
{
    (void)state;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    SIM_OK(cudaStreamBeginCapture(nb2, cudaStreamCaptureModeGlobal));
    SIM_OK(cudaMemsetAsync(x, 7, N, nb2));
    SIM_OK(cudaStreamEndCapture(nb2, &graph));
    SIM_OK(cudaGraphInstantiate(&exec, graph, 0));
    assert_int_equal(cucacheSimRaceCount(), 0);

    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaGraphLaunch(exec, nb));
    SIM_OK(cudaEventRecord(ev, nb));
    SIM_OK(cudaStreamWaitEvent(LEGACY, ev, 0));
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, LEGACY));
    simtest_settle();
    simtest_gate_open(g);
    race_expect_none();

    simtest_gate_t *g2 = simtest_gate_new();
    simtest_gate_block(g2, nb);
    SIM_OK(cudaGraphLaunch(exec, nb));
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, LEGACY));
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    simtest_gate_open(g2);
    race_expect();
    race_expect_names(nb, LEGACY, x);
    SIM_OK(cudaEventDestroy(ev));
    SIM_OK(cudaGraphExecDestroy(exec));
    SIM_OK(cudaGraphDestroy(graph));
}

/* The stream-ordered pool never hands another stream memory whose free is
 * pending unless it orders that stream after the free, so using it never
 * races, whatever the pool decides. */
static void test_pool_reuse_across_streams_never_races(void **state)
{
    (void)state;
    cudaMemPool_t pool;
    SIM_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t keep = UINT64_MAX, zero = 0;
    SIM_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    /* a free still pending behind a gate */
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    void *p = NULL, *q = NULL;
    SIM_OK(cudaMallocAsync(&p, 65536, nb));
    SIM_OK(cudaMemsetAsync(p, 1, 65536, nb));
    SIM_OK(cudaFreeAsync(p, nb));
    SIM_OK(cudaMallocAsync(&q, 65536, nb2));
    SIM_OK(cudaMemsetAsync(q, 2, 65536, nb2));
    SIM_OK(cudaFreeAsync(q, nb2));
    simtest_gate_open(g);
    race_expect_none();
    /* a free already complete on the device but never observed by the
     * host (opportunistic reuse) */
    SIM_OK(cudaMallocAsync(&p, 65536, nb));
    SIM_OK(cudaMemsetAsync(p, 3, 65536, nb));
    SIM_OK(cudaFreeAsync(p, nb));
    simtest_sleep_ms(50); /* no CUDA call: not a synchronisation */
    SIM_OK(cudaMallocAsync(&q, 65536, nb2));
    SIM_OK(cudaMemsetAsync(q, 4, 65536, nb2));
    SIM_OK(cudaFreeAsync(q, nb2));
    race_expect_none();
    SIM_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &zero));
}

/* ---- simulated kernels with declared ranges -------------------------- */

static void kernel_noop(void *arg)
{
    (void)arg;
}

static void launch(cudaStream_t s, const void *p, size_t n, int write)
{
    struct cucache_sim_access acc = {p, n, write};
    CU_OK(cucacheSimLaunch(s, kernel_noop, NULL, &acc, 1));
}

static void test_kernel_write_vs_read_races(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    launch(nb, x, N, 1);
    launch(LEGACY, x + 1000, 10, 0);
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    simtest_gate_open(g);
    race_expect();
    race_expect_names(nb, LEGACY, x + 1000);
}

static void test_kernel_reads_do_not_race(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    launch(nb, x, N, 0);
    launch(LEGACY, x, N, 0);
    launch(nb2, x + 5, 100, 0);
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    simtest_gate_open(g);
    race_expect_none();
}

static void test_kernel_ordered_by_event_is_silent(void **state)
{
    (void)state;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    launch(nb, x, N, 1);
    SIM_OK(cudaEventRecord(ev, nb));
    SIM_OK(cudaStreamWaitEvent(LEGACY, ev, 0));
    launch(LEGACY, x + 1000, 10, 0);
    simtest_settle();
    simtest_gate_open(g);
    race_expect_none();
    SIM_OK(cudaEventDestroy(ev));
}

/* Ranges are compared to the byte: adjacent ranges do not race, one shared
 * byte does. */
static void test_kernel_ranges_are_byte_precise(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    launch(nb, x, 1001, 1);
    launch(LEGACY, x + 1001, 999, 1);
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    simtest_gate_open(g);
    race_expect_none();

    cucacheSimRaceReset();
    simtest_gate_t *g2 = simtest_gate_new();
    simtest_gate_block(g2, nb);
    launch(nb, x, 1001, 1);
    launch(LEGACY, x + 1000, 999, 0);
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    simtest_gate_open(g2);
    race_expect();
    race_expect_names(nb, LEGACY, x + 1000);
}

/* A kernel with several ranges: only the written one conflicts. */
static void test_kernel_multiple_ranges(void **state)
{
    (void)state;
    struct cucache_sim_access acc[2] = {{x, 4096, 0}, {y, 4096, 1}};
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    CU_OK(cucacheSimLaunch(nb, kernel_noop, NULL, acc, 2));
    launch(LEGACY, x, 4096, 0); /* read/read: fine */
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    assert_int_equal(cucacheSimRaceCount(), 0);
    launch(LEGACY, y + 4095, 1, 0); /* reads the last written byte */
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    simtest_gate_open(g);
    race_expect();
    race_expect_names(nb, LEGACY, y + 4095);
}

/* A kernel's function really runs in stream order. */
struct kernel_arg {
    unsigned char *host_view;
    int seen;
};

static void kernel_observe(void *arg)
{
    struct kernel_arg *k = arg;
    k->seen = k->host_view[0];
}

static void test_kernel_runs_in_stream_order(void **state)
{
    (void)state;
    struct kernel_arg k = {host, -1};
    host[0] = 0;
    struct cucache_sim_access acc = {y, 16, 0};
    SIM_OK(cudaMemsetAsync(y, 0x5B, 16, nb));
    SIM_OK(cudaMemcpyAsync(host, y, 16, cudaMemcpyDeviceToHost, nb));
    CU_OK(cucacheSimLaunch(nb, kernel_observe, &k, &acc, 1));
    SIM_OK(cudaStreamSynchronize(nb));
    assert_int_equal(k.seen, 0x5B);
    race_expect_none();
}

/* ---- frees of memory still in use ------------------------------------ */

static void test_free_async_while_unordered_read_races(void **state)
{
    (void)state;
    unsigned char *p = NULL;
    SIM_OK(cudaMallocAsync((void **)&p, 65536, nb2));
    SIM_OK(cudaMemsetAsync(p, 0, 65536, nb2));
    SIM_OK(cudaStreamSynchronize(nb2));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, p, 65536, cudaMemcpyDeviceToHost, nb));
    SIM_OK(cudaFreeAsync(p, nb2));
    SIM_OK(simtest_stream_wait_idle(nb2));
    simtest_gate_open(g);
    race_expect();
    race_expect_names(nb, nb2, p);
}

static void test_free_async_ordered_after_read_is_silent(void **state)
{
    (void)state;
    unsigned char *p = NULL;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    SIM_OK(cudaMallocAsync((void **)&p, 65536, nb2));
    SIM_OK(cudaMemsetAsync(p, 0, 65536, nb2));
    SIM_OK(cudaStreamSynchronize(nb2));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, p, 65536, cudaMemcpyDeviceToHost, nb));
    SIM_OK(cudaEventRecord(ev, nb));
    SIM_OK(cudaStreamWaitEvent(nb2, ev, 0));
    SIM_OK(cudaFreeAsync(p, nb2));
    simtest_settle();
    simtest_gate_open(g);
    race_expect_none();
    SIM_OK(cudaEventDestroy(ev));
}

/* cudaFree synchronises the device first, so it never races. */
static void test_free_while_read_pending_is_silent(void **state)
{
    (void)state;
    unsigned char *p = NULL;
    SIM_OK(cudaMalloc((void **)&p, 65536));
    SIM_OK(cudaMemset(p, 0, 65536));
    SIM_OK(cudaDeviceSynchronize());
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, p, 65536, cudaMemcpyDeviceToHost, nb));
    simtest_gate_open_after(g, 30);
    SIM_OK(cudaFree(p));
    race_expect_none();
}

/* Last, with their own buffer: a report the simulator gets wrong here
 * would otherwise repeat in every later test.  Work left on a destroyed
 * stream (explicitly, or a per-thread stream at thread exit) is ordered by
 * cudaDeviceSynchronize like any other, whether it is still pending when
 * the program synchronises or has already completed (no CUDA call observed
 * it: the host only saw the flag of a simulated kernel's body, which orders
 * nothing, where a host function's would). */
struct exit_reader {
    const void *p;
    simtest_mark_t *done;
};

static void *read_on_per_thread_stream_and_exit(void *arg)
{
    struct exit_reader *r = arg;
    if (cudaMemcpyAsync(host2, r->p, 4096, cudaMemcpyDeviceToHost, cudaStreamPerThread) != cudaSuccess ||
        cucacheSimLaunch(cudaStreamPerThread, simtest_mark_fn, r->done, NULL, 0) != CUDA_SUCCESS)
        return (void *)1;
    return NULL;
}

static void test_destroyed_stream_work_ordered_by_device_synchronize(void **state)
{
    (void)state;
    unsigned char *z = NULL;
    SIM_OK(cudaMalloc((void **)&z, 4096));
    SIM_OK(cudaMemset(z, 0, 4096));
    SIM_OK(cudaDeviceSynchronize());

    /* destroyed with the read still pending */
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    SIM_OK(cudaMemcpyAsync(host, z, 4096, cudaMemcpyDeviceToHost, s));
    SIM_OK(cudaStreamDestroy(s));
    simtest_gate_open_after(g, 30);
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaMemsetAsync(z, 1, 4096, nb));
    race_expect_none();

    /* destroyed, and the read completed before the synchronisation */
    simtest_mark_t *m = simtest_mark_new();
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    SIM_OK(cudaMemcpyAsync(host, z, 4096, cudaMemcpyDeviceToHost, s));
    SIM_OK(cucacheSimLaunch(s, simtest_mark_fn, m, NULL, 0));
    SIM_OK(cudaStreamDestroy(s));
    assert_true(simtest_mark_wait(m));
    simtest_settle();
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaMemsetAsync(z, 2, 4096, nb));
    race_expect_none();

    /* a per-thread stream whose thread exited, its read completed */
    struct exit_reader r = {z, simtest_mark_new()};
    pthread_t th;
    void *rc = (void *)1;
    assert_int_equal(pthread_create(&th, NULL, read_on_per_thread_stream_and_exit, &r), 0);
    pthread_join(th, &rc);
    assert_null(rc);
    assert_true(simtest_mark_wait(r.done));
    simtest_settle();
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaMemsetAsync(z, 3, 4096, nb));
    race_expect_none();
    SIM_OK(cudaFree(z));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        RACETEST(test_graph_launch_races_like_its_copies),
        RACETEST(test_pool_reuse_across_streams_never_races),
        RACETEST(test_kernel_write_vs_read_races),
        RACETEST(test_kernel_reads_do_not_race),
        RACETEST(test_kernel_ordered_by_event_is_silent),
        RACETEST(test_kernel_ranges_are_byte_precise),
        RACETEST(test_kernel_multiple_ranges),
        RACETEST(test_kernel_runs_in_stream_order),
        RACETEST(test_free_async_while_unordered_read_races),
        RACETEST(test_free_async_ordered_after_read_is_silent),
        RACETEST(test_free_while_read_pending_is_silent),
        RACETEST(test_destroyed_stream_work_ordered_by_device_synchronize),
    };
    return cmocka_run_group_tests_name("sim.race_work", tests, group_setup, group_teardown);
}
