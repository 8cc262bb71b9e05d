/*
 * Proves the simulated device's race detector catches unordered copies and
 * memsets and stays silent for ordered ones: every race is paired with a
 * safe twin doing the same work with an ordering (event, stream or event
 * synchronisation, the legacy stream's rules, completion observed by the
 * host).  The planted race is a copy on a non-blocking stream,
 * held behind a gate, still reading buffer X while the legacy stream
 * overwrites X; the report names both streams and the range.  Also: reads
 * never race, ordering is exact (an event recorded before the read orders
 * nothing, a partial overwrite leaves the rest checked, a pending read is
 * remembered across thousands of operations), and the legacy-stream fence
 * cucache relies on covers blocking and per-thread streams but not
 * non-blocking ones; memory a stream-ordered free gave back is not
 * reported against that free when it is allocated again (seen to fail
 * without race_forget in src/engine_stream.c).  Meson runs it with
 * CUCACHE_SIM_RACE=1, _FATAL=0.
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

/* ---- the planted race and its twins ---------------------------------- */

/* nb: [gate] copy X -> host (reads X);  legacy: memset X (writes X). */
static void test_planted_race_memset(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, nb));
    SIM_OK(cudaMemsetAsync(x, 0, N, LEGACY));
    SIM_OK(simtest_stream_wait_idle(LEGACY)); /* the overwrite really ran first */
    simtest_gate_open(g);
    race_expect();
    race_expect_names(nb, LEGACY, x);
}

static void test_planted_race_memcpy_h2d(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, nb));
    SIM_OK(cudaMemcpy(x, host2, N, cudaMemcpyHostToDevice)); /* legacy, synchronous */
    simtest_gate_open(g);
    race_expect();
    race_expect_names(nb, LEGACY, x);
}

static void test_planted_race_ordered_by_event_is_silent(void **state)
{
    (void)state;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, nb));
    SIM_OK(cudaEventRecord(ev, nb));
    SIM_OK(cudaStreamWaitEvent(LEGACY, ev, 0));
    SIM_OK(cudaMemsetAsync(x, 0, N, LEGACY));
    simtest_settle();
    simtest_gate_open(g);
    race_expect_none();
    SIM_OK(cudaEventDestroy(ev));
}

static void test_planted_race_memcpy_ordered_by_event_is_silent(void **state)
{
    (void)state;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, nb));
    SIM_OK(cudaEventRecord(ev, nb));
    SIM_OK(cudaStreamWaitEvent(LEGACY, ev, 0));
    simtest_gate_open_after(g, 30); /* cudaMemcpy below may wait for it */
    SIM_OK(cudaMemcpy(x, host2, N, cudaMemcpyHostToDevice));
    race_expect_none();
    SIM_OK(cudaEventDestroy(ev));
}

static void test_planted_race_ordered_by_stream_sync_is_silent(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, nb));
    simtest_gate_open_after(g, 30);
    SIM_OK(cudaStreamSynchronize(nb));
    SIM_OK(cudaMemsetAsync(x, 0, N, LEGACY));
    SIM_OK(cudaMemcpy(x, host2, N, cudaMemcpyHostToDevice));
    race_expect_none();
}

/* The host saw the reader's event complete (cudaEventQuery), then wrote:
 * ordered through the host, as a caching allocator's fence check is. */
static void test_completed_event_observed_by_host_orders(void **state)
{
    (void)state;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, nb));
    SIM_OK(cudaEventRecord(ev, nb));
    SIM_EXPECT(cudaEventQuery(ev), cudaErrorNotReady);
    (void)cudaGetLastError();
    simtest_gate_open(g);
    SIM_OK(simtest_event_wait_done(ev));
    SIM_OK(cudaMemsetAsync(x, 0, N, LEGACY));
    race_expect_none();
    SIM_OK(cudaEventDestroy(ev));
}

/* The same with cudaStreamQuery observing the reader's stream idle. */
static void test_idle_stream_observed_by_host_orders(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, nb));
    simtest_gate_open(g);
    SIM_OK(simtest_stream_wait_idle(nb));
    SIM_OK(cudaMemsetAsync(x, 0, N, nb2));
    race_expect_none();
}

/* The writer first, still pending; the reader second. */
static void test_race_write_then_unordered_read(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemsetAsync(x, 1, N, nb));
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, LEGACY));
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    simtest_gate_open(g);
    race_expect();
    race_expect_names(nb, LEGACY, x);
}

static void test_two_writes_race(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemsetAsync(x + 4096, 1, 4096, nb));
    SIM_OK(cudaMemsetAsync(x, 2, 3 * 4096, nb2));
    SIM_OK(simtest_stream_wait_idle(nb2));
    simtest_gate_open(g);
    race_expect();
    race_expect_names(nb, nb2, x + 4096);
}

static void test_two_reads_do_not_race(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, nb));
    SIM_OK(cudaMemcpyAsync(host2, x, N, cudaMemcpyDeviceToHost, LEGACY));
    SIM_OK(cudaMemcpyAsync(y, x, N, cudaMemcpyDeviceToDevice, nb2)); /* reads X too */
    SIM_OK(simtest_stream_wait_idle(nb2));
    simtest_gate_open(g);
    race_expect_none();
}

/* A blocking stream is ordered with the legacy stream: no race. */
static void test_blocking_stream_ordered_by_legacy_is_silent(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, bl);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, bl));
    SIM_OK(cudaMemsetAsync(x, 0, N, LEGACY));                          /* waits for bl */
    SIM_OK(cudaMemcpyAsync(host2, x, N, cudaMemcpyDeviceToHost, bl2)); /* waits for legacy */
    SIM_OK(cudaMemsetAsync(x, 3, N, bl2));
    simtest_settle();
    simtest_gate_open(g);
    race_expect_none();
}

/* Two created blocking streams are not ordered with each other. */
static void test_two_blocking_streams_race(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, bl);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, bl));
    SIM_OK(cudaMemsetAsync(x, 0, N, bl2));
    SIM_OK(simtest_stream_wait_idle(bl2));
    simtest_gate_open(g);
    race_expect();
    race_expect_names(bl, bl2, x);
}

static void test_two_blocking_streams_ordered_by_event_are_silent(void **state)
{
    (void)state;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, bl);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, bl));
    SIM_OK(cudaEventRecord(ev, bl));
    SIM_OK(cudaStreamWaitEvent(bl2, ev, 0));
    SIM_OK(cudaMemsetAsync(x, 0, N, bl2));
    simtest_settle();
    simtest_gate_open(g);
    race_expect_none();
    SIM_OK(cudaEventDestroy(ev));
}

/* Ordering is transitive: nb -> (event) -> nb2 -> (event) -> legacy. */
static void test_transitive_event_chain_is_silent(void **state)
{
    (void)state;
    cudaEvent_t e1, e2;
    SIM_OK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
    SIM_OK(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, nb));
    SIM_OK(cudaEventRecord(e1, nb));
    SIM_OK(cudaStreamWaitEvent(nb2, e1, 0));
    SIM_OK(cudaMemcpyAsync(host2, y, N, cudaMemcpyDeviceToHost, nb2));
    SIM_OK(cudaEventRecord(e2, nb2));
    SIM_OK(cudaStreamWaitEvent(LEGACY, e2, 0));
    SIM_OK(cudaMemsetAsync(x, 0, N, LEGACY));
    simtest_settle();
    simtest_gate_open(g);
    race_expect_none();
    SIM_OK(cudaEventDestroy(e1));
    SIM_OK(cudaEventDestroy(e2));
}

/* The per-thread stream is ordered with the legacy stream, not with a
 * non-blocking one. */
static void test_per_thread_stream_vs_legacy_is_silent(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, cudaStreamPerThread);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, cudaStreamPerThread));
    SIM_OK(cudaMemsetAsync(x, 0, N, LEGACY));
    simtest_settle();
    simtest_gate_open(g);
    race_expect_none();
}

static void test_per_thread_stream_vs_nonblocking_races(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, cudaStreamPerThread);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, cudaStreamPerThread));
    SIM_OK(cudaMemsetAsync(x, 0, N, nb));
    SIM_OK(simtest_stream_wait_idle(nb));
    simtest_gate_open(g);
    race_expect();
    race_expect_names(cudaStreamPerThread, nb, x);
}

static void test_planted_race_ordered_by_event_synchronize_is_silent(void **state)
{
    (void)state;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, nb));
    SIM_OK(cudaEventRecord(ev, nb));
    simtest_gate_open_after(g, 30);
    SIM_OK(cudaEventSynchronize(ev));
    SIM_OK(cudaMemsetAsync(x, 0, N, LEGACY));
    race_expect_none();
    SIM_OK(cudaEventDestroy(ev));
}

/* A device-to-device copy reads its source and writes its destination. */
static void test_copy_reads_source_writes_destination(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(y, x, N / 2, cudaMemcpyDeviceToDevice, nb));
    SIM_OK(cudaMemcpyAsync(host2, x, N, cudaMemcpyDeviceToHost, LEGACY));             /* read/read */
    SIM_OK(cudaMemcpyAsync(host2, y + N / 2, N / 2, cudaMemcpyDeviceToHost, LEGACY)); /* past it */
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    assert_int_equal(cucacheSimRaceCount(), 0);
    SIM_OK(cudaMemcpyAsync(host2, y + 100, 10, cudaMemcpyDeviceToHost, LEGACY)); /* read/write */
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    simtest_gate_open(g);
    race_expect();
    race_expect_names(nb, LEGACY, y + 100);
}

/* The fence of cucache's cudaFree policy: an event recorded on the legacy
 * stream, once complete, orders the work queued before it on blocking and
 * per-thread streams (any thread), so a later write anywhere is safe ... */
static void read_x_on_per_thread_stream(void *gate)
{
    simtest_gate_block(gate, cudaStreamPerThread);
    SIM_OK(cudaMemcpyAsync(host2, x, N, cudaMemcpyDeviceToHost, cudaStreamPerThread));
}

static void test_legacy_fence_orders_blocking_and_per_thread_streams(void **state)
{
    (void)state;
    cudaEvent_t fence;
    SIM_OK(cudaEventCreateWithFlags(&fence, cudaEventDisableTiming));
    simtest_gate_t *g = simtest_gate_new(), *gt = simtest_gate_new();
    simtest_gate_block(g, bl);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, bl));
    simtest_thread_t *t = simtest_thread_start(read_x_on_per_thread_stream, gt);
    SIM_OK(cudaEventRecord(fence, LEGACY));
    simtest_gate_open(g);
    simtest_gate_open(gt);
    SIM_OK(simtest_event_wait_done(fence));
    SIM_OK(cudaMemsetAsync(x, 0, N, nb)); /* reuse on a non-blocking stream */
    race_expect_none();
    simtest_thread_finish(t);
    SIM_OK(cudaEventDestroy(fence));
}

/* ... but not the work of a non-blocking stream: without an event on that
 * stream too, the reuse races. */
static void test_legacy_fence_does_not_order_nonblocking_streams(void **state)
{
    (void)state;
    cudaEvent_t fence;
    SIM_OK(cudaEventCreateWithFlags(&fence, cudaEventDisableTiming));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, nb));
    SIM_OK(cudaEventRecord(fence, LEGACY));
    SIM_OK(simtest_event_wait_done(fence)); /* completes: nb is not waited for */
    SIM_OK(cudaMemsetAsync(x, 0, N, nb2));
    SIM_OK(simtest_stream_wait_idle(nb2));
    simtest_gate_open(g);
    race_expect();
    race_expect_names(nb, nb2, x);
    SIM_OK(cudaEventDestroy(fence));
}

/* Ordering is exact, not approximate: an event recorded before the read
 * orders nothing about the read, whether a stream waits for it or the host
 * synchronises on it. */
static void test_event_recorded_before_the_read_does_not_order(void **state)
{
    (void)state;
    cudaEvent_t early;
    SIM_OK(cudaEventCreateWithFlags(&early, cudaEventDisableTiming));
    simtest_gate_t *g = simtest_gate_new();
    SIM_OK(cudaEventRecord(early, nb));
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, nb));
    SIM_OK(cudaStreamWaitEvent(LEGACY, early, 0));
    SIM_OK(cudaMemsetAsync(x, 0, N, LEGACY));
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    assert_true(cucacheSimRaceCount() >= 1);

    cucacheSimRaceReset();
    SIM_OK(cudaEventSynchronize(early));
    SIM_OK(cudaMemsetAsync(x, 1, N, nb2));
    SIM_OK(simtest_stream_wait_idle(nb2));
    simtest_gate_open(g);
    race_expect();
    race_expect_names(nb, nb2, x);
    SIM_OK(cudaEventDestroy(early));
}

/* A pending read is still remembered after many unrelated operations. */
static void test_race_found_after_many_unrelated_operations(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(host, x + 4096, 4096, cudaMemcpyDeviceToHost, nb));
    for (int i = 0; i < 2000; i++) {
        /* each stream writes its own part of Y: no race among them */
        cudaStream_t s = (i % 3 == 0) ? LEGACY : (i % 3 == 1) ? nb2 : bl;
        SIM_OK(cudaMemsetAsync(y + (size_t)(i % 3) * (N / 4) + (size_t)(i % 64) * 1024, i, 1024, s));
        if (i % 500 == 0)
            SIM_OK(cudaStreamSynchronize(nb2));
    }
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    SIM_OK(simtest_stream_wait_idle(nb2));
    SIM_OK(simtest_stream_wait_idle(bl));
    assert_int_equal(cucacheSimRaceCount(), 0);
    SIM_OK(cudaMemsetAsync(x + 8000, 0, 100, nb2)); /* overlaps the read's end */
    SIM_OK(simtest_stream_wait_idle(nb2));
    simtest_gate_open(g);
    race_expect();
    race_expect_names(nb, nb2, x + 8000);
}

/* A write ordered after an older write but covering only part of it leaves
 * the rest of the older write to be checked. */
static void test_partially_overwritten_write_still_races(void **state)
{
    (void)state;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemsetAsync(x, 1, 4096, nb));
    SIM_OK(cudaEventRecord(ev, nb));
    SIM_OK(cudaStreamWaitEvent(bl, ev, 0));
    SIM_OK(cudaMemsetAsync(x, 2, 2048, bl));                                  /* ordered after, covers half */
    SIM_OK(cudaMemcpyAsync(host, x + 3000, 10, cudaMemcpyDeviceToHost, nb2)); /* unordered read */
    SIM_OK(simtest_stream_wait_idle(nb2));
    simtest_gate_open(g);
    race_expect();
    race_expect_names(nb, nb2, x + 3000);
    SIM_OK(cudaEventDestroy(ev));
}

/* cudaMalloc memory freed with cudaFreeAsync goes back to the device when
 * the free runs; the next allocation of that range is ordered after the
 * free although the host never observed it (found by tests/reuse's stress
 * run: a segment cucache allocated at such a range was reported against
 * the free). */
static void test_stream_ordered_free_then_reallocation_is_silent(void **state)
{
    (void)state;
    void *a = NULL, *b = NULL;
    SIM_OK(cudaMalloc(&a, N));
    SIM_OK(cudaMemsetAsync(a, 1, N, nb));
    SIM_OK(cudaFreeAsync(a, nb));
    /* the free ran (a simulated kernel's body after it did); the host
     * observed nothing (no query, event, synchronisation or host function,
     * which would order the host after the free) */
    simtest_mark_t *m = simtest_mark_new();
    SIM_OK(cucacheSimLaunch(nb, simtest_mark_fn, m, NULL, 0));
    assert_true(simtest_mark_wait(m));
    SIM_OK(cudaMalloc(&b, N));
    assert_ptr_equal(b, a); /* the same range, handed out again */
    SIM_OK(cudaMemsetAsync(b, 2, N, nb2));
    simtest_settle();
    race_expect_none();
    SIM_OK(cudaFree(b));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        RACETEST(test_planted_race_memset),
        RACETEST(test_planted_race_memcpy_h2d),
        RACETEST(test_planted_race_ordered_by_event_is_silent),
        RACETEST(test_planted_race_memcpy_ordered_by_event_is_silent),
        RACETEST(test_planted_race_ordered_by_stream_sync_is_silent),
        RACETEST(test_completed_event_observed_by_host_orders),
        RACETEST(test_idle_stream_observed_by_host_orders),
        RACETEST(test_race_write_then_unordered_read),
        RACETEST(test_two_writes_race),
        RACETEST(test_two_reads_do_not_race),
        RACETEST(test_blocking_stream_ordered_by_legacy_is_silent),
        RACETEST(test_two_blocking_streams_race),
        RACETEST(test_two_blocking_streams_ordered_by_event_are_silent),
        RACETEST(test_transitive_event_chain_is_silent),
        RACETEST(test_per_thread_stream_vs_legacy_is_silent),
        RACETEST(test_per_thread_stream_vs_nonblocking_races),
        RACETEST(test_planted_race_ordered_by_event_synchronize_is_silent),
        RACETEST(test_copy_reads_source_writes_destination),
        RACETEST(test_legacy_fence_orders_blocking_and_per_thread_streams),
        RACETEST(test_legacy_fence_does_not_order_nonblocking_streams),
        RACETEST(test_event_recorded_before_the_read_does_not_order),
        RACETEST(test_race_found_after_many_unrelated_operations),
        RACETEST(test_partially_overwritten_write_still_races),
        RACETEST(test_stream_ordered_free_then_reallocation_is_silent),
    };
    return cmocka_run_group_tests_name("sim.race", tests, group_setup, group_teardown);
}
