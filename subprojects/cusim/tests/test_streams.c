/*
 * Proves the simulated device orders work across streams exactly as the CUDA
 * documentation says (Driver API "Stream synchronization behavior"): the
 * legacy default stream waits for all blocking streams and they wait for it;
 * non-blocking streams do not synchronise with it; per-thread default streams
 * (cudaStreamPerThread and stream 0 through the _ptsz entry points) are
 * ordered with the legacy stream only; created streams are independent.  Each
 * rule is shown with a gate holding one stream and a mark observing another,
 * both where work must run and where it must wait.  Also: host functions run
 * in stream order, synchronisations wait, a destroyed stream still finishes
 * its work, cudaFree synchronises the device, stream flags and priorities.
 */
#include "simtest.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define LEGACY ((cudaStream_t)0)

static cudaStream_t stream_new(unsigned flags)
{
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, flags));
    assert_non_null(s);
    return s;
}

/* Work on `other` must run to completion while `held` is held by a gate. */
static void expect_runs_while_held(cudaStream_t held, cudaStream_t other)
{
    simtest_gate_t *g = simtest_gate_new();
    simtest_mark_t *m = simtest_mark_new();
    simtest_gate_block(g, held);
    simtest_mark_on(m, other);
    assert_true(simtest_mark_wait(m));
    SIM_OK(simtest_stream_wait_idle(other));
    assert_false(simtest_gate_passed(g));
    SIM_EXPECT(cudaStreamQuery(held), cudaErrorNotReady);
    simtest_gate_open(g);
    SIM_OK(cudaDeviceSynchronize());
    assert_false(simtest_gate_timed_out(g));
}

/* Work on `other` must wait while `held` is held by a gate, and run after. */
static void expect_waits_while_held(cudaStream_t held, cudaStream_t other)
{
    simtest_gate_t *g = simtest_gate_new();
    simtest_mark_t *m = simtest_mark_new();
    simtest_gate_block(g, held);
    simtest_mark_on(m, other);
    simtest_settle();
    assert_false(simtest_mark_ran(m));
    SIM_EXPECT(cudaStreamQuery(other), cudaErrorNotReady);
    simtest_gate_open(g);
    assert_true(simtest_mark_wait(m));
    assert_true(simtest_mark_seq(m) > simtest_gate_seq(g));
    SIM_OK(cudaDeviceSynchronize());
    assert_false(simtest_gate_timed_out(g));
}

static void test_created_streams_are_independent(void **state)
{
    (void)state;
    cudaStream_t a = stream_new(cudaStreamDefault), b = stream_new(cudaStreamDefault);
    cudaStream_t n = stream_new(cudaStreamNonBlocking);
    expect_runs_while_held(a, b);
    expect_runs_while_held(b, a);
    expect_runs_while_held(a, n);
    expect_runs_while_held(n, a);
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(b));
    SIM_OK(cudaStreamDestroy(n));
}

static void test_work_in_one_stream_is_ordered(void **state)
{
    (void)state;
    cudaStream_t a = stream_new(cudaStreamNonBlocking);
    expect_waits_while_held(a, a);
    expect_waits_while_held(LEGACY, LEGACY);
    SIM_OK(cudaStreamDestroy(a));
}

static void test_legacy_stream_waits_for_blocking_streams(void **state)
{
    (void)state;
    cudaStream_t a = stream_new(cudaStreamDefault);
    expect_waits_while_held(a, LEGACY);
    expect_waits_while_held(a, cudaStreamLegacy);
    SIM_OK(cudaStreamDestroy(a));
}

static void test_blocking_streams_wait_for_legacy_stream(void **state)
{
    (void)state;
    cudaStream_t a = stream_new(cudaStreamDefault);
    expect_waits_while_held(LEGACY, a);
    expect_waits_while_held(cudaStreamLegacy, a);
    SIM_OK(cudaStreamDestroy(a));
}

/* Blocking stream B waits for legacy work that itself waits for blocking
 * stream A, so B is held by A although A and B are unrelated; a non-blocking
 * stream is not. */
static void test_legacy_stream_orders_blocking_streams_transitively(void **state)
{
    (void)state;
    cudaStream_t a = stream_new(cudaStreamDefault), b = stream_new(cudaStreamDefault);
    cudaStream_t n = stream_new(cudaStreamNonBlocking);
    simtest_gate_t *g = simtest_gate_new();
    simtest_mark_t *on_legacy = simtest_mark_new(), *on_b = simtest_mark_new(), *on_n = simtest_mark_new();
    simtest_gate_block(g, a);
    simtest_mark_on(on_legacy, LEGACY);
    simtest_mark_on(on_b, b);
    simtest_mark_on(on_n, n);
    assert_true(simtest_mark_wait(on_n));
    simtest_settle();
    assert_false(simtest_mark_ran(on_legacy));
    assert_false(simtest_mark_ran(on_b));
    simtest_gate_open(g);
    SIM_OK(cudaDeviceSynchronize());
    assert_true(simtest_mark_seq(on_legacy) > simtest_gate_seq(g));
    assert_true(simtest_mark_seq(on_b) > simtest_mark_seq(on_legacy));
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(b));
    SIM_OK(cudaStreamDestroy(n));
}

static void test_nonblocking_stream_ignores_legacy_stream(void **state)
{
    (void)state;
    cudaStream_t n = stream_new(cudaStreamNonBlocking);
    expect_runs_while_held(LEGACY, n);
    expect_runs_while_held(n, LEGACY);
    expect_runs_while_held(cudaStreamLegacy, n);
    SIM_OK(cudaStreamDestroy(n));
}

static void test_per_thread_stream_is_ordered_with_legacy_stream(void **state)
{
    (void)state;
    expect_waits_while_held(LEGACY, cudaStreamPerThread);
    expect_waits_while_held(cudaStreamPerThread, LEGACY);
}

static void test_per_thread_stream_ignores_created_streams(void **state)
{
    (void)state;
    cudaStream_t a = stream_new(cudaStreamDefault), n = stream_new(cudaStreamNonBlocking);
    expect_runs_while_held(a, cudaStreamPerThread);
    expect_runs_while_held(cudaStreamPerThread, a);
    expect_runs_while_held(n, cudaStreamPerThread);
    expect_runs_while_held(cudaStreamPerThread, n);
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(n));
}

struct other_thread {
    simtest_mark_t *pt;        /* on cudaStreamPerThread */
    simtest_mark_t *pt_ptsz;   /* on stream 0 through cudaLaunchHostFunc_ptsz */
    simtest_mark_t *on_legacy; /* on the legacy stream */
    bool pt_ran, pt_ptsz_ran;
    int rc[3];
};

static void *other_thread_main(void *arg)
{
    struct other_thread *t = arg;
    t->rc[0] = cudaLaunchHostFunc(cudaStreamPerThread, simtest_mark_fn, t->pt);
    t->rc[1] = cudaLaunchHostFunc_ptsz(LEGACY, simtest_mark_fn, t->pt_ptsz);
    t->pt_ran = simtest_mark_wait(t->pt);
    t->pt_ptsz_ran = simtest_mark_wait(t->pt_ptsz);
    t->rc[2] = cudaLaunchHostFunc(LEGACY, simtest_mark_fn, t->on_legacy);
    return NULL;
}

/* Another thread's per-thread stream does not wait for this thread's, but
 * its legacy-stream work does. */
static void test_per_thread_streams_of_two_threads_are_independent(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, cudaStreamPerThread);
    struct other_thread t = {simtest_mark_new(), simtest_mark_new(), simtest_mark_new(), false, false, {-1, -1, -1}};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, other_thread_main, &t), 0);
    pthread_join(th, NULL);
    SIM_OK(t.rc[0]);
    SIM_OK(t.rc[1]);
    SIM_OK(t.rc[2]);
    assert_true(t.pt_ran);
    assert_true(t.pt_ptsz_ran);
    simtest_settle();
    assert_false(simtest_mark_ran(t.on_legacy));
    simtest_gate_open(g);
    assert_true(simtest_mark_wait(t.on_legacy));
    assert_true(simtest_mark_seq(t.on_legacy) > simtest_gate_seq(g));
    SIM_OK(cudaDeviceSynchronize());
}

/* Stream 0 given to a _ptsz entry point is this thread's per-thread stream. */
static void test_ptsz_entry_points_use_per_thread_stream(void **state)
{
    (void)state;
    enum { N = 4096 };
    cudaStream_t n = stream_new(cudaStreamNonBlocking);
    unsigned char *h = NULL, *d = NULL;
    SIM_OK(cudaMallocHost((void **)&h, N));
    SIM_OK(cudaMalloc((void **)&d, N));
    SIM_OK(cudaMemset(d, 0x3C, N));
    SIM_OK(cudaDeviceSynchronize());
    memset(h, 0, N);

    simtest_gate_t *g = simtest_gate_new();
    simtest_mark_t *same = simtest_mark_new(), *on_n = simtest_mark_new();
    simtest_gate_block_ptsz(g, LEGACY);
    SIM_OK(cudaMemcpyAsync_ptsz(h, d, N, cudaMemcpyDeviceToHost, LEGACY));
    simtest_mark_on(same, cudaStreamPerThread);
    simtest_mark_on(on_n, n);
    assert_true(simtest_mark_wait(on_n));
    simtest_settle();
    SIM_EXPECT(cudaStreamQuery(cudaStreamPerThread), cudaErrorNotReady);
    SIM_EXPECT(cudaStreamQuery_ptsz(LEGACY), cudaErrorNotReady);
    assert_false(simtest_mark_ran(same));
    assert_int_equal(simtest_check_byte(h, N, 0), -1); /* the copy waits */
    simtest_gate_open(g);
    SIM_OK(cudaStreamSynchronize_ptsz(LEGACY));
    assert_true(simtest_mark_ran(same));
    assert_true(simtest_mark_seq(same) > simtest_gate_seq(g));
    assert_int_equal(simtest_check_byte(h, N, 0x3C), -1);

    /* cudaStreamLegacy given to a _ptsz entry point is the legacy stream */
    cudaStream_t a = stream_new(cudaStreamDefault);
    simtest_gate_t *g2 = simtest_gate_new();
    simtest_mark_t *on_a = simtest_mark_new(), *on_n2 = simtest_mark_new();
    simtest_gate_block_ptsz(g2, cudaStreamLegacy);
    simtest_mark_on(on_a, a);
    simtest_mark_on(on_n2, n);
    assert_true(simtest_mark_wait(on_n2));
    simtest_settle();
    assert_false(simtest_mark_ran(on_a));
    simtest_gate_open(g2);
    SIM_OK(cudaDeviceSynchronize());
    assert_true(simtest_mark_seq(on_a) > simtest_gate_seq(g2));

    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(n));
    SIM_OK(cudaFree(d));
    SIM_OK(cudaFreeHost(h));
}

struct order_log {
    atomic_int next;
    int order[256];
    unsigned char *seen_byte; /* pinned host buffer written by a copy before */
    int seen[256];
};

struct order_item {
    struct order_log *log;
    int id;
};

static void log_fn(void *arg)
{
    struct order_item *it = arg;
    int slot = atomic_fetch_add(&it->log->next, 1);
    if (slot < 256) {
        it->log->order[slot] = it->id;
        it->log->seen[slot] = it->log->seen_byte ? *it->log->seen_byte : -1;
    }
}

static void test_host_functions_run_in_stream_order(void **state)
{
    (void)state;
    enum { N = 200 };
    static struct order_item items[N];
    static struct order_log log;
    memset(&log, 0, sizeof log);
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    unsigned char *h = NULL, *d = NULL;
    SIM_OK(cudaMallocHost((void **)&h, 1));
    SIM_OK(cudaMalloc((void **)&d, N));
    for (int i = 0; i < N; i++)
        SIM_OK(cudaMemset(d + i, i, 1));
    SIM_OK(cudaDeviceSynchronize());
    log.seen_byte = h;
    /* each host function sees the byte the copy queued just before it wrote */
    for (int i = 0; i < N; i++) {
        items[i] = (struct order_item){&log, i};
        SIM_OK(cudaMemcpyAsync(h, d + i, 1, cudaMemcpyDeviceToHost, s));
        SIM_OK(cudaLaunchHostFunc(s, log_fn, &items[i]));
    }
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(atomic_load(&log.next), N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(log.order[i], i);
        assert_int_equal(log.seen[i], i);
    }
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaFree(d));
    SIM_OK(cudaFreeHost(h));
}

static void test_stream_synchronize_waits(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    simtest_gate_t *g = simtest_gate_new();
    simtest_mark_t *m = simtest_mark_new();
    simtest_gate_block(g, s);
    simtest_mark_on(m, s);
    simtest_gate_open_after(g, 50);
    SIM_OK(cudaStreamSynchronize(s));
    assert_true(simtest_gate_passed(g));
    assert_true(simtest_mark_ran(m));
    assert_false(simtest_gate_timed_out(g));
    SIM_OK(cudaStreamQuery(s));
    SIM_OK(cudaStreamDestroy(s));
}

static void test_device_synchronize_waits_for_every_stream(void **state)
{
    (void)state;
    cudaStream_t n = stream_new(cudaStreamNonBlocking), a = stream_new(cudaStreamDefault);
    simtest_gate_t *g1 = simtest_gate_new(), *g2 = simtest_gate_new(), *g3 = simtest_gate_new();
    simtest_mark_t *m1 = simtest_mark_new(), *m2 = simtest_mark_new(), *m3 = simtest_mark_new();
    simtest_gate_block(g1, n);
    simtest_mark_on(m1, n);
    simtest_gate_block(g2, a);
    simtest_mark_on(m2, a);
    simtest_gate_block(g3, cudaStreamPerThread);
    simtest_mark_on(m3, cudaStreamPerThread);
    simtest_gate_open_after(g1, 40);
    simtest_gate_open_after(g2, 30);
    simtest_gate_open_after(g3, 20);
    SIM_OK(cudaDeviceSynchronize());
    assert_true(simtest_mark_ran(m1));
    assert_true(simtest_mark_ran(m2));
    assert_true(simtest_mark_ran(m3));
    SIM_OK(cudaStreamDestroy(n));
    SIM_OK(cudaStreamDestroy(a));
}

static void test_stream_query(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamDefault);
    SIM_OK(cudaStreamQuery(s));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    SIM_EXPECT(cudaStreamQuery(s), cudaErrorNotReady);
    simtest_gate_open(g);
    SIM_OK(simtest_stream_wait_idle(s));
    SIM_OK(cudaStreamDestroy(s));
}

/* cudaStreamDestroy returns at once; queued work still completes. */
static void test_stream_destroy_with_pending_work_completes_it(void **state)
{
    (void)state;
    enum { N = 8192 };
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    unsigned char *h = NULL, *d = NULL;
    SIM_OK(cudaMallocHost((void **)&h, N));
    SIM_OK(cudaMalloc((void **)&d, N));
    memset(h, 0, N);
    SIM_OK(cudaMemset(d, 0x66, N));
    SIM_OK(cudaDeviceSynchronize());
    simtest_gate_t *g = simtest_gate_new();
    simtest_mark_t *m = simtest_mark_new();
    simtest_gate_block(g, s);
    SIM_OK(cudaMemcpyAsync(h, d, N, cudaMemcpyDeviceToHost, s));
    simtest_mark_on(m, s);
    SIM_OK(cudaStreamDestroy(s));
    assert_false(simtest_gate_passed(g)); /* it did not wait for the gate */
    assert_false(simtest_mark_ran(m));
    simtest_gate_open(g);
    assert_true(simtest_mark_wait(m));
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(simtest_check_byte(h, N, 0x66), -1);
    SIM_OK(cudaFree(d));
    SIM_OK(cudaFreeHost(h));
}

/* Work left on a destroyed stream is still device work: synchronising the
 * device waits for it. */
static void test_device_synchronize_waits_for_destroyed_stream(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    simtest_gate_t *g = simtest_gate_new();
    simtest_mark_t *m = simtest_mark_new();
    simtest_gate_block(g, s);
    simtest_mark_on(m, s);
    SIM_OK(cudaStreamDestroy(s));
    simtest_gate_open_after(g, 50);
    SIM_OK(cudaDeviceSynchronize());
    assert_true(simtest_mark_ran(m));
}

/* ... and the legacy stream still waits for a destroyed blocking stream's
 * pending work. */
static void test_legacy_stream_waits_for_destroyed_blocking_stream(void **state)
{
    (void)state;
    cudaStream_t a = stream_new(cudaStreamDefault);
    simtest_gate_t *g = simtest_gate_new();
    simtest_mark_t *m = simtest_mark_new();
    simtest_gate_block(g, a);
    SIM_OK(cudaStreamDestroy(a));
    simtest_mark_on(m, LEGACY);
    simtest_settle();
    assert_false(simtest_mark_ran(m));
    simtest_gate_open(g);
    assert_true(simtest_mark_wait(m));
    assert_true(simtest_mark_seq(m) > simtest_gate_seq(g));
}

static void *hold_per_thread_stream_and_exit(void *gate)
{
    return (void *)(intptr_t)cudaLaunchHostFunc(cudaStreamPerThread, simtest_gate_fn, gate);
}

/* A thread's per-thread stream goes away when the thread exits, its pending
 * work does not: the legacy stream and device synchronisation wait for it. */
static void test_exited_threads_per_thread_stream_still_ordered(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    pthread_t th;
    void *rc = (void *)1;
    assert_int_equal(pthread_create(&th, NULL, hold_per_thread_stream_and_exit, g), 0);
    pthread_join(th, &rc);
    SIM_OK((int)(intptr_t)rc);
    simtest_mark_t *m = simtest_mark_new();
    simtest_mark_on(m, LEGACY);
    simtest_settle();
    assert_false(simtest_mark_ran(m));
    simtest_gate_open_after(g, 30);
    SIM_OK(cudaDeviceSynchronize());
    assert_true(simtest_gate_passed(g));
    assert_true(simtest_mark_ran(m));
    assert_true(simtest_mark_seq(m) > simtest_gate_seq(g));
}

/* cudaFree synchronises the whole device, non-blocking streams included. */
static void test_free_synchronizes_device(void **state)
{
    (void)state;
    cudaStream_t n = stream_new(cudaStreamNonBlocking), a = stream_new(cudaStreamDefault);
    void *x = NULL;
    SIM_OK(cudaMalloc(&x, 1024));
    simtest_gate_t *g1 = simtest_gate_new(), *g2 = simtest_gate_new();
    simtest_mark_t *m1 = simtest_mark_new(), *m2 = simtest_mark_new();
    simtest_gate_block(g1, n);
    simtest_mark_on(m1, n);
    simtest_gate_block(g2, a);
    simtest_mark_on(m2, a);
    simtest_gate_open_after(g1, 50);
    simtest_gate_open_after(g2, 30);
    SIM_OK(cudaFree(x));
    assert_true(simtest_mark_ran(m1));
    assert_true(simtest_mark_ran(m2));
    assert_false(simtest_gate_timed_out(g1));
    SIM_OK(cudaStreamDestroy(n));
    SIM_OK(cudaStreamDestroy(a));
}

static void test_stream_flags_and_priority(void **state)
{
    (void)state;
    cudaStream_t n = stream_new(cudaStreamNonBlocking), a = stream_new(cudaStreamDefault);
    unsigned flags = 99;
    SIM_OK(cudaStreamGetFlags(n, &flags));
    assert_int_equal(flags, cudaStreamNonBlocking);
    SIM_OK(cudaStreamGetFlags(a, &flags));
    assert_int_equal(flags, cudaStreamDefault);

    int least = 0, greatest = 0;
    SIM_OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    assert_true(greatest <= least);
    cudaStream_t p = NULL, q = NULL;
    SIM_OK(cudaStreamCreateWithPriority(&p, cudaStreamNonBlocking, greatest));
    int prio = 12345;
    SIM_OK(cudaStreamGetPriority(p, &prio));
    assert_int_equal(prio, greatest);
    SIM_OK(cudaStreamGetFlags(p, &flags));
    assert_int_equal(flags, cudaStreamNonBlocking);
    /* out-of-range priorities are clamped */
    SIM_OK(cudaStreamCreateWithPriority(&q, cudaStreamDefault, greatest - 100));
    SIM_OK(cudaStreamGetPriority(q, &prio));
    assert_int_equal(prio, greatest);
    SIM_OK(cudaStreamGetPriority(a, &prio));
    assert_int_equal(prio, 0);
    expect_runs_while_held(p, q);

    SIM_OK(cudaStreamDestroy(n));
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(p));
    SIM_OK(cudaStreamDestroy(q));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_created_streams_are_independent),
        SIMTEST(test_work_in_one_stream_is_ordered),
        SIMTEST(test_legacy_stream_waits_for_blocking_streams),
        SIMTEST(test_blocking_streams_wait_for_legacy_stream),
        SIMTEST(test_legacy_stream_orders_blocking_streams_transitively),
        SIMTEST(test_nonblocking_stream_ignores_legacy_stream),
        SIMTEST(test_per_thread_stream_is_ordered_with_legacy_stream),
        SIMTEST(test_per_thread_stream_ignores_created_streams),
        SIMTEST(test_per_thread_streams_of_two_threads_are_independent),
        SIMTEST(test_ptsz_entry_points_use_per_thread_stream),
        SIMTEST(test_host_functions_run_in_stream_order),
        SIMTEST(test_stream_synchronize_waits),
        SIMTEST(test_device_synchronize_waits_for_every_stream),
        SIMTEST(test_stream_query),
        SIMTEST(test_stream_destroy_with_pending_work_completes_it),
        SIMTEST(test_device_synchronize_waits_for_destroyed_stream),
        SIMTEST(test_legacy_stream_waits_for_destroyed_blocking_stream),
        SIMTEST(test_exited_threads_per_thread_stream_still_ordered),
        SIMTEST(test_free_synchronizes_device),
        SIMTEST(test_stream_flags_and_priority),
    };
    return cmocka_run_group_tests_name("sim.streams", tests, simtest_group_setup, NULL);
}
