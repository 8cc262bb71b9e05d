/*
 * Proves events on the simulated device behave as CUDA documents them: a
 * recorded event is not ready while the work before it is pending and ready
 * after; a never-recorded event is complete; cudaEventSynchronize waits;
 * elapsed times are non-negative, cudaErrorNotReady while pending and refused
 * for cudaEventDisableTiming events; cudaStreamWaitEvent orders one stream
 * (created, non-blocking or legacy) after the most recent record of an event
 * on another, as of the call.
 */
#include "simtest.h"

#include <string.h>

#define LEGACY ((cudaStream_t)0)

static cudaStream_t stream_new(unsigned flags)
{
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, flags));
    return s;
}

static cudaEvent_t event_new(unsigned flags)
{
    cudaEvent_t e = NULL;
    SIM_OK(cudaEventCreateWithFlags(&e, flags));
    assert_non_null(e);
    return e;
}

static void test_event_query_pending_then_done(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    cudaEvent_t e = event_new(cudaEventDefault);
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    SIM_OK(cudaEventRecord(e, s));
    simtest_settle();
    SIM_EXPECT(cudaEventQuery(e), cudaErrorNotReady);
    (void)cudaGetLastError();
    simtest_gate_open(g);
    SIM_OK(simtest_event_wait_done(e));
    SIM_OK(cudaEventSynchronize(e));
    SIM_OK(cudaEventQuery(e));
    SIM_OK(cudaEventDestroy(e));
    SIM_OK(cudaStreamDestroy(s));
}

static void test_event_on_legacy_and_per_thread_streams(void **state)
{
    (void)state;
    cudaStream_t handles[] = {LEGACY, cudaStreamLegacy, cudaStreamPerThread};
    for (size_t i = 0; i < sizeof handles / sizeof handles[0]; i++) {
        cudaEvent_t e = event_new(cudaEventDefault);
        simtest_gate_t *g = simtest_gate_new();
        simtest_gate_block(g, handles[i]);
        SIM_OK(cudaEventRecord(e, handles[i]));
        SIM_EXPECT(cudaEventQuery(e), cudaErrorNotReady);
        (void)cudaGetLastError();
        simtest_gate_open(g);
        SIM_OK(cudaEventSynchronize(e));
        SIM_OK(cudaEventDestroy(e));
    }
}

static void test_never_recorded_event_is_complete(void **state)
{
    (void)state;
    cudaEvent_t e = event_new(cudaEventDefault), b = event_new(cudaEventBlockingSync);
    SIM_OK(cudaEventQuery(e));
    SIM_OK(cudaEventSynchronize(e));
    SIM_OK(cudaEventQuery(b));
    SIM_OK(cudaEventSynchronize(b));
    SIM_OK(cudaEventDestroy(e));
    SIM_OK(cudaEventDestroy(b));
}

static void test_event_synchronize_waits(void **state)
{
    (void)state;
    unsigned flags[] = {cudaEventDefault, cudaEventBlockingSync, cudaEventDisableTiming};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        cudaStream_t s = stream_new(cudaStreamNonBlocking);
        cudaEvent_t e = event_new(flags[i]);
        simtest_gate_t *g = simtest_gate_new();
        simtest_mark_t *m = simtest_mark_new();
        simtest_gate_block(g, s);
        simtest_mark_on(m, s);
        SIM_OK(cudaEventRecord(e, s));
        simtest_gate_open_after(g, 30);
        SIM_OK(cudaEventSynchronize(e));
        assert_true(simtest_mark_ran(m));
        assert_false(simtest_gate_timed_out(g));
        SIM_OK(cudaEventDestroy(e));
        SIM_OK(cudaStreamDestroy(s));
    }
}

static void test_event_elapsed_time(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    cudaStream_t s = stream_new(cudaStreamDefault);
    cudaEvent_t a = event_new(cudaEventDefault), b = event_new(cudaEventDefault);
    void *d = NULL, *d2 = NULL;
    SIM_OK(cudaMalloc(&d, N));
    SIM_OK(cudaMalloc(&d2, N));
    SIM_OK(cudaEventRecord(a, s));
    SIM_OK(cudaMemcpyAsync(d2, d, N, cudaMemcpyDeviceToDevice, s));
    SIM_OK(cudaEventRecord(b, s));
    SIM_OK(cudaEventSynchronize(b));
    float ms = -1.0f;
    SIM_OK(cudaEventElapsedTime(&ms, a, b));
    assert_true(ms >= 0.0f);
    /* same event twice */
    ms = -1.0f;
    SIM_OK(cudaEventElapsedTime(&ms, a, a));
    assert_true(ms >= 0.0f);
    SIM_OK(cudaEventDestroy(a));
    SIM_OK(cudaEventDestroy(b));
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaFree(d));
    SIM_OK(cudaFree(d2));
}

static void test_elapsed_time_pending_is_not_ready(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    cudaEvent_t a = event_new(cudaEventDefault), b = event_new(cudaEventDefault);
    SIM_OK(cudaEventRecord(a, s));
    SIM_OK(cudaEventSynchronize(a));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    SIM_OK(cudaEventRecord(b, s));
    float ms = -1.0f;
    SIM_EXPECT(cudaEventElapsedTime(&ms, a, b), cudaErrorNotReady);
    (void)cudaGetLastError();
    simtest_gate_open(g);
    SIM_OK(cudaEventSynchronize(b));
    SIM_OK(cudaEventElapsedTime(&ms, a, b));
    assert_true(ms >= 0.0f);
    SIM_OK(cudaEventDestroy(a));
    SIM_OK(cudaEventDestroy(b));
    SIM_OK(cudaStreamDestroy(s));
}

static void test_elapsed_time_refused_without_timing(void **state)
{
    (void)state;
    cudaEvent_t t = event_new(cudaEventDefault), n = event_new(cudaEventDisableTiming);
    cudaEvent_t never = event_new(cudaEventDefault);
    SIM_OK(cudaEventRecord(t, LEGACY));
    SIM_OK(cudaEventRecord(n, LEGACY));
    SIM_OK(cudaDeviceSynchronize());
    float ms = 0.0f;
    SIM_EXPECT(cudaEventElapsedTime(&ms, t, n), cudaErrorInvalidResourceHandle);
    SIM_EXPECT(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    SIM_EXPECT(cudaEventElapsedTime(&ms, n, t), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    /* an event never recorded has no time */
    SIM_FAILS(cudaEventElapsedTime(&ms, t, never));
    (void)cudaGetLastError();
    SIM_OK(cudaEventDestroy(t));
    SIM_OK(cudaEventDestroy(n));
    SIM_OK(cudaEventDestroy(never));
}

static void block_own_per_thread_stream(void *gate)
{
    simtest_gate_block(gate, cudaStreamPerThread);
}

/* An event recorded on the legacy stream completes only after the work of
 * every blocking stream and every thread's per-thread stream queued before
 * it, and not after a non-blocking stream's: the fence cucache relies on. */
static void test_event_on_legacy_stream_covers_blocking_streams_only(void **state)
{
    (void)state;
    cudaStream_t a = stream_new(cudaStreamDefault), n = stream_new(cudaStreamNonBlocking);
    cudaEvent_t e = event_new(cudaEventDisableTiming), e2 = event_new(cudaEventDisableTiming);
    simtest_gate_t *ga = simtest_gate_new(), *gt = simtest_gate_new(), *gn = simtest_gate_new();
    simtest_gate_block(gn, n);
    simtest_gate_block(ga, a);
    simtest_thread_t *t = simtest_thread_start(block_own_per_thread_stream, gt);
    SIM_OK(cudaEventRecord(e, LEGACY));
    simtest_settle();
    SIM_EXPECT(cudaEventQuery(e), cudaErrorNotReady);
    simtest_gate_open(ga);
    simtest_settle();
    SIM_EXPECT(cudaEventQuery(e), cudaErrorNotReady); /* the other thread's stream */
    simtest_gate_open(gt);
    SIM_OK(simtest_event_wait_done(e));
    /* the non-blocking stream is still held: the legacy fence ignored it */
    assert_false(simtest_gate_passed(gn));
    SIM_OK(cudaEventRecord(e2, LEGACY));
    SIM_OK(simtest_event_wait_done(e2));
    (void)cudaGetLastError();
    simtest_gate_open(gn);
    SIM_OK(cudaDeviceSynchronize());
    simtest_thread_finish(t);
    SIM_OK(cudaEventDestroy(e));
    SIM_OK(cudaEventDestroy(e2));
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(n));
}

/* An event recorded on a stream with nothing queued, and a wait for a
 * completed event there, complete as they are queued, as on a GPU, not
 * when the stream's worker thread gets to them (on a loaded host,
 * milliseconds later): cuStreamQuery and cuEventQuery answer ready at once
 * (on a created stream, and on the legacy stream, which also waits for the
 * blocking streams, all idle).  Behind queued work they wait for it.  Seen
 * to fail (not ready at the first query) with every record and wait left
 * to the worker. */
static void test_record_on_idle_stream_completes_at_once(void **state)
{
    (void)state;
    cudaStream_t n = stream_new(cudaStreamNonBlocking), b = stream_new(cudaStreamDefault);
    cudaEvent_t e = event_new(cudaEventDisableTiming), f = event_new(cudaEventDisableTiming);
    SIM_OK(cudaDeviceSynchronize());
    const cudaStream_t on[] = {n, LEGACY, b};
    for (int round = 0; round < 200; round++) {
        cudaStream_t s = on[round % 3];
        SIM_OK(cudaEventRecord(e, s));
        SIM_OK(cudaEventQuery(e));
        SIM_OK(cudaStreamWaitEvent(s, e, 0));
        SIM_OK(cudaEventRecord(f, s));
        SIM_OK(cudaEventQuery(f));
        SIM_OK(cudaStreamQuery(s));
    }
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, n);
    SIM_OK(cudaEventRecord(e, n));
    simtest_settle();
    SIM_EXPECT(cudaEventQuery(e), cudaErrorNotReady);
    SIM_EXPECT(cudaStreamQuery(n), cudaErrorNotReady);
    SIM_OK(cudaStreamWaitEvent(b, e, 0)); /* a wait for a pending event queues */
    SIM_OK(cudaEventRecord(f, b));
    simtest_settle();
    SIM_EXPECT(cudaEventQuery(f), cudaErrorNotReady);
    (void)cudaGetLastError();
    simtest_gate_open(g);
    SIM_OK(simtest_event_wait_done(f));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaEventDestroy(e));
    SIM_OK(cudaEventDestroy(f));
    SIM_OK(cudaStreamDestroy(n));
    SIM_OK(cudaStreamDestroy(b));
}

/* Stream `waiter` waits for event e recorded on gated stream `held`. */
static void expect_wait_event_orders(cudaStream_t held, cudaStream_t waiter)
{
    cudaEvent_t e = event_new(cudaEventDisableTiming);
    simtest_gate_t *g = simtest_gate_new();
    simtest_mark_t *m = simtest_mark_new();
    simtest_gate_block(g, held);
    SIM_OK(cudaEventRecord(e, held));
    SIM_OK(cudaStreamWaitEvent(waiter, e, 0));
    simtest_mark_on(m, waiter);
    simtest_settle();
    assert_false(simtest_mark_ran(m));
    simtest_gate_open(g);
    assert_true(simtest_mark_wait(m));
    assert_true(simtest_mark_seq(m) > simtest_gate_seq(g));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaEventDestroy(e));
}

static void test_stream_wait_event_orders_streams(void **state)
{
    (void)state;
    cudaStream_t a = stream_new(cudaStreamDefault), b = stream_new(cudaStreamDefault);
    cudaStream_t n1 = stream_new(cudaStreamNonBlocking), n2 = stream_new(cudaStreamNonBlocking);
    expect_wait_event_orders(a, b);
    expect_wait_event_orders(n1, n2);
    expect_wait_event_orders(n1, LEGACY);
    expect_wait_event_orders(LEGACY, n1);
    expect_wait_event_orders(n1, cudaStreamPerThread);
    expect_wait_event_orders(cudaStreamPerThread, n2);
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(b));
    SIM_OK(cudaStreamDestroy(n1));
    SIM_OK(cudaStreamDestroy(n2));
}

/* cudaStreamWaitEvent waits for the record that was most recent when it was
 * called: a later record does not change an earlier wait, and an earlier
 * record does not matter to a later wait. */
static void test_stream_wait_event_uses_record_current_at_call(void **state)
{
    (void)state;
    cudaStream_t a = stream_new(cudaStreamNonBlocking), b = stream_new(cudaStreamNonBlocking);
    cudaStream_t c = stream_new(cudaStreamNonBlocking);
    cudaEvent_t e = event_new(cudaEventDefault);
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, a);

    /* recorded on held a, then re-recorded on idle c: the wait is on c */
    SIM_OK(cudaEventRecord(e, a));
    SIM_OK(cudaEventRecord(e, c));
    SIM_OK(cudaStreamWaitEvent(b, e, 0));
    simtest_mark_t *free_to_run = simtest_mark_new();
    simtest_mark_on(free_to_run, b);
    assert_true(simtest_mark_wait(free_to_run));

    /* waited on while recorded on held a, then re-recorded on c: still a */
    SIM_OK(cudaEventRecord(e, a));
    SIM_OK(cudaStreamWaitEvent(b, e, 0));
    SIM_OK(cudaEventRecord(e, c));
    simtest_mark_t *held = simtest_mark_new();
    simtest_mark_on(held, b);
    simtest_settle();
    assert_false(simtest_mark_ran(held));
    simtest_gate_open(g);
    assert_true(simtest_mark_wait(held));
    assert_true(simtest_mark_seq(held) > simtest_gate_seq(g));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaEventDestroy(e));
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(b));
    SIM_OK(cudaStreamDestroy(c));
}

static void test_stream_wait_on_never_recorded_event_does_not_wait(void **state)
{
    (void)state;
    cudaStream_t b = stream_new(cudaStreamNonBlocking);
    cudaEvent_t e = event_new(cudaEventDefault);
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, LEGACY); /* something pending elsewhere */
    SIM_OK(cudaStreamWaitEvent(b, e, 0));
    simtest_mark_t *m = simtest_mark_new();
    simtest_mark_on(m, b);
    assert_true(simtest_mark_wait(m));
    simtest_gate_open(g);
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaEventDestroy(e));
    SIM_OK(cudaStreamDestroy(b));
}

/* Destroying an event whose record is pending returns at once and the
 * stream still completes; a wait queued before the destroy still holds. */
static void test_event_destroy_while_pending(void **state)
{
    (void)state;
    cudaStream_t a = stream_new(cudaStreamNonBlocking), b = stream_new(cudaStreamNonBlocking);
    cudaEvent_t e = event_new(cudaEventDefault);
    simtest_gate_t *g = simtest_gate_new();
    simtest_mark_t *m = simtest_mark_new();
    simtest_gate_block(g, a);
    SIM_OK(cudaEventRecord(e, a));
    SIM_OK(cudaStreamWaitEvent(b, e, 0));
    SIM_OK(cudaEventDestroy(e));
    simtest_mark_on(m, b);
    simtest_settle();
    assert_false(simtest_gate_passed(g));
    assert_false(simtest_mark_ran(m));
    simtest_gate_open(g);
    assert_true(simtest_mark_wait(m));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(b));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_event_query_pending_then_done),
        SIMTEST(test_event_on_legacy_and_per_thread_streams),
        SIMTEST(test_never_recorded_event_is_complete),
        SIMTEST(test_event_synchronize_waits),
        SIMTEST(test_event_elapsed_time),
        SIMTEST(test_elapsed_time_pending_is_not_ready),
        SIMTEST(test_elapsed_time_refused_without_timing),
        SIMTEST(test_event_on_legacy_stream_covers_blocking_streams_only),
        SIMTEST(test_record_on_idle_stream_completes_at_once),
        SIMTEST(test_stream_wait_event_orders_streams),
        SIMTEST(test_stream_wait_event_uses_record_current_at_call),
        SIMTEST(test_stream_wait_on_never_recorded_event_does_not_wait),
        SIMTEST(test_event_destroy_while_pending),
    };
    return cmocka_run_group_tests_name("sim.events", tests, simtest_group_setup, NULL);
}
