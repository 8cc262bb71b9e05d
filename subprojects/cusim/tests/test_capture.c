/*
 * Proves stream capture on the simulated device follows CUDA's rules: work
 * queued on a capturing stream does not run but is recorded into a graph that
 * runs it (twice, reading its inputs at launch); cudaMalloc is refused with
 * cudaErrorStreamCaptureUnsupported where the thread's capture mode forbids
 * it (own Global capture, another thread's Global capture) and allowed where
 * it does not (Relaxed, ThreadLocal, another thread's ThreadLocal capture),
 * and a refused call invalidates the capture; legacy-stream work while a
 * blocking stream captures is cudaErrorStreamCaptureImplicit, synchronising a
 * capturing stream is cudaErrorStreamCaptureUnsupported.
 */
#include "simtest.h"

#include <pthread.h>
#include <string.h>

#define LEGACY ((cudaStream_t)0)
enum { N = 65536 };

static cudaStream_t stream_new(unsigned flags)
{
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, flags));
    return s;
}

static enum cudaStreamCaptureStatus capture_status(cudaStream_t s)
{
    enum cudaStreamCaptureStatus st = (enum cudaStreamCaptureStatus) - 1;
    SIM_OK(cudaStreamIsCapturing(s, &st));
    return st;
}

/* End a capture that must have been invalidated. */
static void expect_invalidated(cudaStream_t s)
{
    assert_int_equal(capture_status(s), cudaStreamCaptureStatusInvalidated);
    cudaGraph_t graph = (cudaGraph_t)0x1;
    SIM_EXPECT(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    assert_null(graph);
    (void)cudaGetLastError();
    assert_int_equal(capture_status(s), cudaStreamCaptureStatusNone);
}

/* The stream still works after its capture ended. */
static void expect_stream_works(cudaStream_t s)
{
    unsigned char *d = NULL, *h = NULL;
    SIM_OK(cudaMalloc((void **)&d, 4096));
    SIM_OK(cudaMallocHost((void **)&h, 4096));
    SIM_OK(cudaMemsetAsync(d, 0x5E, 4096, s));
    SIM_OK(cudaMemcpyAsync(h, d, 4096, cudaMemcpyDeviceToHost, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(simtest_check_byte(h, 4096, 0x5E), -1);
    SIM_OK(cudaFree(d));
    SIM_OK(cudaFreeHost(h));
}

static void test_captured_work_runs_only_in_graph(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamDefault);
    unsigned char *src = NULL, *out = NULL, *d = NULL, *d2 = NULL;
    SIM_OK(cudaMallocHost((void **)&src, N));
    SIM_OK(cudaMallocHost((void **)&out, N));
    SIM_OK(cudaMalloc((void **)&d, N));
    SIM_OK(cudaMalloc((void **)&d2, N));
    simtest_fill(src, N, 70);
    memset(out, 0, N);
    SIM_OK(cudaDeviceSynchronize());

    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    assert_int_equal(capture_status(s), cudaStreamCaptureStatusActive);
    SIM_OK(cudaMemcpyAsync(d, src, N, cudaMemcpyHostToDevice, s));
    SIM_OK(cudaMemsetAsync(d, 0x21, 16, s));
    SIM_OK(cudaMemcpyAsync(d2, d, N, cudaMemcpyDeviceToDevice, s));
    SIM_OK(cudaMemcpyAsync(out, d2, N, cudaMemcpyDeviceToHost, s));
    simtest_settle();
    assert_int_equal(simtest_check_byte(out, N, 0), -1);
    cudaGraph_t graph = NULL;
    SIM_OK(cudaStreamEndCapture(s, &graph));
    assert_non_null(graph);
    assert_int_equal(capture_status(s), cudaStreamCaptureStatusNone);
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(simtest_check_byte(out, N, 0), -1); /* nothing ran */

    cudaGraphExec_t exec = NULL;
    SIM_OK(cudaGraphInstantiate(&exec, graph, 0));
    assert_non_null(exec);
    SIM_OK(cudaGraphLaunch(exec, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(simtest_check_byte(out, 16, 0x21), -1);
    assert_int_equal(simtest_check(out + 16, N - 16, 70, 16), -1);

    /* a second launch reads the host input as it is now */
    simtest_fill(src, N, 71);
    memset(out, 0, N);
    SIM_OK(cudaGraphLaunch(exec, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(simtest_check_byte(out, 16, 0x21), -1);
    assert_int_equal(simtest_check(out + 16, N - 16, 71, 16), -1);

    /* and a launch on another stream is ordered on that stream */
    cudaStream_t t = stream_new(cudaStreamNonBlocking);
    simtest_gate_t *g = simtest_gate_new();
    memset(out, 0, N);
    simtest_gate_block(g, t);
    SIM_OK(cudaGraphLaunch(exec, t));
    simtest_settle();
    assert_int_equal(simtest_check_byte(out, N, 0), -1);
    simtest_gate_open(g);
    SIM_OK(cudaStreamSynchronize(t));
    assert_int_equal(simtest_check(out + 16, N - 16, 71, 16), -1);

    SIM_OK(cudaGraphExecDestroy(exec));
    SIM_OK(cudaGraphDestroy(graph));
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaStreamDestroy(t));
    SIM_OK(cudaFree(d));
    SIM_OK(cudaFree(d2));
    SIM_OK(cudaFreeHost(src));
    SIM_OK(cudaFreeHost(out));
}

static void test_captured_host_function_runs_per_launch(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    simtest_mark_t *m = simtest_mark_new();
    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    simtest_mark_on(m, s);
    cudaGraph_t graph = NULL;
    SIM_OK(cudaStreamEndCapture(s, &graph));
    simtest_settle();
    assert_false(simtest_mark_ran(m));
    cudaGraphExec_t exec = NULL;
    SIM_OK(cudaGraphInstantiate(&exec, graph, 0));
    SIM_OK(cudaGraphLaunch(exec, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_true(simtest_mark_ran(m));
    long first = simtest_mark_seq(m);
    SIM_OK(cudaGraphLaunch(exec, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_true(simtest_mark_seq(m) > first);
    SIM_OK(cudaGraphExecDestroy(exec));
    SIM_OK(cudaGraphDestroy(graph));
    SIM_OK(cudaStreamDestroy(s));
}

/* Fork into a second stream through an event and join back: the second
 * stream's work belongs to the graph. */
static void test_capture_fork_join_across_streams(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking), t = stream_new(cudaStreamNonBlocking);
    cudaEvent_t fork = NULL, join = NULL;
    SIM_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    SIM_OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    unsigned char *d = NULL, *out = NULL;
    SIM_OK(cudaMalloc((void **)&d, 2 * N));
    SIM_OK(cudaMallocHost((void **)&out, 2 * N));
    memset(out, 0, 2 * N);

    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    SIM_OK(cudaMemsetAsync(d, 0x31, N, s));
    SIM_OK(cudaEventRecord(fork, s));
    SIM_OK(cudaStreamWaitEvent(t, fork, 0));
    assert_int_equal(capture_status(t), cudaStreamCaptureStatusActive);
    SIM_OK(cudaMemsetAsync(d + N, 0x32, N, t));
    SIM_OK(cudaEventRecord(join, t));
    SIM_OK(cudaStreamWaitEvent(s, join, 0));
    SIM_OK(cudaMemcpyAsync(out, d, 2 * N, cudaMemcpyDeviceToHost, s));
    cudaGraph_t graph = NULL;
    SIM_OK(cudaStreamEndCapture(s, &graph));
    assert_int_equal(capture_status(t), cudaStreamCaptureStatusNone);
    simtest_settle();
    assert_int_equal(simtest_check_byte(out, 2 * N, 0), -1);

    cudaGraphExec_t exec = NULL;
    SIM_OK(cudaGraphInstantiate(&exec, graph, 0));
    SIM_OK(cudaGraphLaunch(exec, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(simtest_check_byte(out, N, 0x31), -1);
    assert_int_equal(simtest_check_byte(out + N, N, 0x32), -1);

    SIM_OK(cudaGraphExecDestroy(exec));
    SIM_OK(cudaGraphDestroy(graph));
    SIM_OK(cudaEventDestroy(fork));
    SIM_OK(cudaEventDestroy(join));
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaStreamDestroy(t));
    SIM_OK(cudaFree(d));
    SIM_OK(cudaFreeHost(out));
}

static void test_malloc_during_global_capture_invalidates_it(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    void *p = NULL;
    SIM_EXPECT(cudaMalloc(&p, 4096), cudaErrorStreamCaptureUnsupported);
    SIM_EXPECT(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
    SIM_OK(cudaGetLastError());
    expect_stream_works(s);
    SIM_OK(cudaStreamDestroy(s));
}

static void test_relaxed_mode_allows_malloc(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    void *p = NULL, *q = NULL;

    /* the thread's mode, exchanged during a Global capture */
    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    SIM_OK(cudaThreadExchangeStreamCaptureMode(&mode));
    assert_int_equal(mode, cudaStreamCaptureModeGlobal); /* the previous mode */
    SIM_OK(cudaMalloc(&p, 4096));
    SIM_OK(cudaThreadExchangeStreamCaptureMode(&mode));
    assert_int_equal(mode, cudaStreamCaptureModeRelaxed);
    assert_int_equal(capture_status(s), cudaStreamCaptureStatusActive);
    cudaGraph_t graph = NULL;
    SIM_OK(cudaStreamEndCapture(s, &graph));
    SIM_OK(cudaGraphDestroy(graph));

    /* a capture begun in Relaxed mode does not forbid it either */
    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    SIM_OK(cudaMalloc(&q, 4096));
    assert_int_equal(capture_status(s), cudaStreamCaptureStatusActive);
    SIM_OK(cudaStreamEndCapture(s, &graph));
    SIM_OK(cudaGraphDestroy(graph));

    SIM_OK(cudaFree(p));
    SIM_OK(cudaFree(q));
    SIM_OK(cudaStreamDestroy(s));
}

struct capturer {
    enum cudaStreamCaptureMode mode;
    pthread_barrier_t began, done;
    int begin_rc, end_rc;
};

static void *capturer_main(void *arg)
{
    struct capturer *c = arg;
    cudaStream_t s = NULL;
    c->begin_rc = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (c->begin_rc == cudaSuccess)
        c->begin_rc = cudaStreamBeginCapture(s, c->mode);
    pthread_barrier_wait(&c->began);
    pthread_barrier_wait(&c->done);
    cudaGraph_t graph = NULL;
    c->end_rc = cudaStreamEndCapture(s, &graph);
    if (graph)
        cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    cudaStreamDestroy(s);
    return NULL;
}

static void capturer_start(struct capturer *c, pthread_t *th, enum cudaStreamCaptureMode mode)
{
    c->mode = mode;
    c->begin_rc = c->end_rc = -1;
    pthread_barrier_init(&c->began, NULL, 2);
    pthread_barrier_init(&c->done, NULL, 2);
    assert_int_equal(pthread_create(th, NULL, capturer_main, c), 0);
    pthread_barrier_wait(&c->began);
}

static void capturer_finish(struct capturer *c, pthread_t th)
{
    pthread_barrier_wait(&c->done);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&c->began);
    pthread_barrier_destroy(&c->done);
}

static void test_other_thread_global_capture_forbids_malloc(void **state)
{
    (void)state;
    struct capturer c;
    pthread_t th;
    capturer_start(&c, &th, cudaStreamCaptureModeGlobal);
    void *p = NULL, *q = NULL;
    int rc_global = cudaMalloc(&p, 4096);
    (void)cudaGetLastError();
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
    int rc_exchange = cudaThreadExchangeStreamCaptureMode(&mode);
    int rc_thread_local = cudaMalloc(&q, 4096);
    int rc_restore = cudaThreadExchangeStreamCaptureMode(&mode);
    capturer_finish(&c, th);
    SIM_OK(c.begin_rc);
    SIM_EXPECT(rc_global, cudaErrorStreamCaptureUnsupported);
    SIM_OK(rc_exchange);
    SIM_OK(rc_thread_local);
    SIM_OK(rc_restore);
    assert_int_equal(mode, cudaStreamCaptureModeThreadLocal);
    if (rc_thread_local == cudaSuccess)
        SIM_OK(cudaFree(q));
}

static void test_other_thread_thread_local_capture_allows_malloc(void **state)
{
    (void)state;
    struct capturer c;
    pthread_t th;
    capturer_start(&c, &th, cudaStreamCaptureModeThreadLocal);
    void *p = NULL;
    int rc = cudaMalloc(&p, 4096);
    capturer_finish(&c, th);
    SIM_OK(c.begin_rc);
    SIM_OK(rc);
    SIM_OK(c.end_rc);
    SIM_OK(cudaFree(p));
}

static void test_legacy_work_during_blocking_capture_is_implicit(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamDefault);
    unsigned char h[256] = {0};
    unsigned char *d = NULL;
    SIM_OK(cudaMalloc((void **)&d, sizeof h));

    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    SIM_EXPECT(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice), cudaErrorStreamCaptureImplicit);
    SIM_EXPECT(cudaGetLastError(), cudaErrorStreamCaptureImplicit);
    expect_invalidated(s);

    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    SIM_EXPECT(cudaMemsetAsync(d, 0, sizeof h, LEGACY), cudaErrorStreamCaptureImplicit);
    (void)cudaGetLastError();
    expect_invalidated(s);

    expect_stream_works(s);
    SIM_OK(cudaFree(d));
    SIM_OK(cudaStreamDestroy(s));
}

/* The twin: a non-blocking stream's capture is not joined by legacy work. */
static void test_legacy_work_during_nonblocking_capture_is_allowed(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    unsigned char *d = NULL;
    SIM_OK(cudaMalloc((void **)&d, 256));
    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    SIM_OK(cudaMemsetAsync(d, 0, 256, LEGACY));
    assert_int_equal(capture_status(s), cudaStreamCaptureStatusActive);
    cudaGraph_t graph = NULL;
    SIM_OK(cudaStreamEndCapture(s, &graph));
    SIM_OK(cudaGraphDestroy(graph));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaFree(d));
    SIM_OK(cudaStreamDestroy(s));
}

static void test_synchronize_capturing_stream_is_unsupported(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    SIM_EXPECT(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    (void)cudaGetLastError();
    expect_invalidated(s);
    expect_stream_works(s);
    SIM_OK(cudaStreamDestroy(s));
}

static void test_capture_misuse_is_refused(void **state)
{
    (void)state;
    cudaStream_t s = stream_new(cudaStreamNonBlocking);
    cudaGraph_t graph = NULL;
    /* the legacy stream cannot be captured */
    SIM_FAILS(cudaStreamBeginCapture(LEGACY, cudaStreamCaptureModeGlobal));
    (void)cudaGetLastError();
    /* ending a capture that never began */
    SIM_FAILS(cudaStreamEndCapture(s, &graph));
    (void)cudaGetLastError();
    /* beginning twice */
    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    SIM_FAILS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    (void)cudaGetLastError();
    cudaError_t rc = cudaStreamEndCapture(s, &graph);
    if (rc == cudaSuccess)
        SIM_OK(cudaGraphDestroy(graph));
    (void)cudaGetLastError();
    assert_int_equal(capture_status(s), cudaStreamCaptureStatusNone);
    expect_stream_works(s);
    SIM_OK(cudaStreamDestroy(s));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_captured_work_runs_only_in_graph),
        SIMTEST(test_captured_host_function_runs_per_launch),
        SIMTEST(test_capture_fork_join_across_streams),
        SIMTEST(test_malloc_during_global_capture_invalidates_it),
        SIMTEST(test_relaxed_mode_allows_malloc),
        SIMTEST(test_other_thread_global_capture_forbids_malloc),
        SIMTEST(test_other_thread_thread_local_capture_allows_malloc),
        SIMTEST(test_legacy_work_during_blocking_capture_is_implicit),
        SIMTEST(test_legacy_work_during_nonblocking_capture_is_allowed),
        SIMTEST(test_synchronize_capturing_stream_is_unsupported),
        SIMTEST(test_capture_misuse_is_refused),
    };
    return cmocka_run_group_tests_name("sim.capture", tests, simtest_group_setup, NULL);
}
