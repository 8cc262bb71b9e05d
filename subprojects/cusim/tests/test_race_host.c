/*
 * Proves that the race detector orders work through the program's host
 * functions as CUDA does: a host function (cudaLaunchHostFunc,
 * cudaStreamAddCallback, cuLaunchHostFunc, cuStreamAddCallback) runs after
 * the work before it on its stream, so a copy on stream A, a host function
 * on A that posts a semaphore or sets a flag, the host waiting for it, then
 * a copy of the same memory on stream B is silent (each of these reported a
 * race before the simulator modelled it), and so is a stream-ordered free
 * the host issues once the flag is set.  The same work is still reported
 * when nothing orders it: B's copy queued while the host function cannot
 * have run yet, a host function on another stream, or a simulated kernel's
 * body (device work) posting the semaphore.  The stream's later work runs
 * after the host function: a copy queued behind it sees what it wrote.
 * Meson runs it with CUCACHE_SIM_RACE=1, _FATAL=0.
 */
#include "simrace.h"

#include <errno.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

enum { N = RACE_BUF };

static unsigned char *x, *host, *host2;
static cudaStream_t nb, nb2, nb3;
static struct simrace_fixture fixture;

static int group_setup(void **state)
{
    (void)state;
    if (simrace_fixture_create(&fixture) != 0)
        return -1;
    x = fixture.x;
    host = fixture.host;
    host2 = fixture.host2;
    nb = fixture.nb;
    nb2 = fixture.nb2;
    nb3 = fixture.bl2; /* a third stream; blocking streams are not ordered with each other */
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    simrace_fixture_destroy(&fixture);
    return 0;
}

/* ---- the signals a host function gives the host -------------------- */

static sem_t sem;

static void post_fn(void *arg)
{
    (void)arg;
    sem_post(&sem);
}

static void post_callback(cudaStream_t s, cudaError_t status, void *arg)
{
    (void)s;
    (void)status;
    (void)arg;
    sem_post(&sem);
}

static void post_cu_callback(CUstream s, CUresult status, void *arg)
{
    (void)s;
    (void)status;
    (void)arg;
    sem_post(&sem);
}

/* Waits (bounded) for the semaphore; whether it was posted. */
static bool sem_wait_bounded(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += SIMTEST_WAIT_MS / 1000;
    int rc;
    while ((rc = sem_timedwait(&sem, &t)) != 0 && errno == EINTR)
        ;
    return rc == 0;
}

static int sem_setup(void **state)
{
    if (sem_init(&sem, 0, 0) != 0)
        return -1;
    return simrace_setup(state);
}

#define HOSTTEST(f) cmocka_unit_test_setup_teardown(f, sem_setup, simtest_teardown)

typedef enum { VIA_HOST_FUNC, VIA_STREAM_CALLBACK, VIA_CU_HOST_FUNC, VIA_CU_STREAM_CALLBACK } via_t;

/* Queues the semaphore's post on s through one of the four entry points. */
static void post_on(cudaStream_t s, via_t via)
{
    switch (via) {
    case VIA_HOST_FUNC:
        SIM_OK(cudaLaunchHostFunc(s, post_fn, NULL));
        break;
    case VIA_STREAM_CALLBACK:
        SIM_OK(cudaStreamAddCallback(s, post_callback, NULL, 0));
        break;
    case VIA_CU_HOST_FUNC:
        CU_OK(cuLaunchHostFunc(s, post_fn, NULL));
        break;
    case VIA_CU_STREAM_CALLBACK:
        CU_OK(cuStreamAddCallback(s, post_cu_callback, NULL, 0));
        break;
    }
}

/* A: copy host -> X (writes X), then the post; the host waits for it;
 * B: copy host2 -> X (writes X).  Ordered: no report. */
static void signal_orders_copy(via_t via)
{
    SIM_OK(cudaMemcpyAsync(x, host, N, cudaMemcpyHostToDevice, nb));
    post_on(nb, via);
    assert_true(sem_wait_bounded());
    SIM_OK(cudaMemcpyAsync(x, host2, N, cudaMemcpyHostToDevice, nb2));
    race_expect_none();
}

static void test_launch_host_func_signal_orders_copy(void **state)
{
    (void)state;
    signal_orders_copy(VIA_HOST_FUNC);
}

static void test_stream_add_callback_signal_orders_copy(void **state)
{
    (void)state;
    signal_orders_copy(VIA_STREAM_CALLBACK);
}

static void test_cu_launch_host_func_signal_orders_copy(void **state)
{
    (void)state;
    signal_orders_copy(VIA_CU_HOST_FUNC);
}

static void test_cu_stream_add_callback_signal_orders_copy(void **state)
{
    (void)state;
    signal_orders_copy(VIA_CU_STREAM_CALLBACK);
}

/* The host sets nothing but waits for a flag a host function sets, then
 * frees the memory A was reading in stream order on B. */
static atomic_bool flag;

static void set_flag(void *arg)
{
    (void)arg;
    atomic_store(&flag, true);
}

static void test_flag_then_stream_ordered_free_is_ordered(void **state)
{
    (void)state;
    unsigned char *p = NULL;
    SIM_OK(cudaMallocAsync((void **)&p, 65536, nb2));
    SIM_OK(cudaMemsetAsync(p, 0, 65536, nb2));
    SIM_OK(cudaStreamSynchronize(nb2));
    atomic_store(&flag, false);
    SIM_OK(cudaMemcpyAsync(host, p, 65536, cudaMemcpyDeviceToHost, nb)); /* reads p */
    SIM_OK(cudaLaunchHostFunc(nb, set_flag, NULL));
    for (int ms = 0; !atomic_load(&flag) && ms < SIMTEST_WAIT_MS; ms++)
        simtest_sleep_ms(1);
    assert_true(atomic_load(&flag));
    SIM_OK(cudaFreeAsync(p, nb2)); /* writes p: ordered after the read */
    race_expect_none();
}

/* ---- what a host function does not order ---------------------------- */

/* A is held behind a gate: B's copy is queued before the post could have
 * run, and the host never waits for it. */
static void test_copy_queued_before_the_host_function_ran_races(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(x, host, N, cudaMemcpyHostToDevice, nb));
    post_on(nb, VIA_HOST_FUNC);
    SIM_OK(cudaMemcpyAsync(x, host2, N, cudaMemcpyHostToDevice, nb2));
    SIM_OK(simtest_stream_wait_idle(nb2));
    simtest_gate_open(g);
    assert_true(sem_wait_bounded());
    race_expect();
    race_expect_names(nb, nb2, x);
}

/* The post runs on a third stream, not behind A's copy: the host waiting
 * for it learns nothing about A. */
static void test_host_function_on_another_stream_does_not_order(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    SIM_OK(cudaMemcpyAsync(x, host, N, cudaMemcpyHostToDevice, nb));
    post_on(nb3, VIA_STREAM_CALLBACK);
    assert_true(sem_wait_bounded());
    SIM_OK(cudaMemcpyAsync(x, host2, N, cudaMemcpyHostToDevice, nb2));
    SIM_OK(simtest_stream_wait_idle(nb2));
    simtest_gate_open(g);
    race_expect();
    race_expect_names(nb, nb2, x);
}

/* A simulated kernel's body stands for device code, not a host function:
 * its signal orders nothing. */
static void test_simulated_kernel_body_does_not_order(void **state)
{
    (void)state;
    SIM_OK(cudaMemcpyAsync(x, host, N, cudaMemcpyHostToDevice, nb));
    CU_OK(cucacheSimLaunch(nb, post_fn, NULL, NULL, 0));
    assert_true(sem_wait_bounded());
    SIM_OK(cudaMemcpyAsync(x, host2, N, cudaMemcpyHostToDevice, nb2));
    race_expect();
    race_expect_names(nb, nb2, x);
}

/* ---- the stream's later work follows the host function --------------- */

static void fill_host(void *arg)
{
    simtest_fill(arg, N, 41);
}

static void test_later_work_on_the_stream_sees_the_host_function(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, nb);
    memset(host, 0, N);
    SIM_OK(cudaLaunchHostFunc(nb, fill_host, host));
    SIM_OK(cudaMemcpyAsync(x, host, N, cudaMemcpyHostToDevice, nb));
    SIM_OK(cudaMemcpyAsync(host2, x, N, cudaMemcpyDeviceToHost, nb));
    simtest_gate_open(g);
    SIM_OK(cudaStreamSynchronize(nb));
    assert_int_equal(simtest_check(host2, N, 41, 0), -1);
    race_expect_none();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        HOSTTEST(test_launch_host_func_signal_orders_copy),
        HOSTTEST(test_stream_add_callback_signal_orders_copy),
        HOSTTEST(test_cu_launch_host_func_signal_orders_copy),
        HOSTTEST(test_cu_stream_add_callback_signal_orders_copy),
        HOSTTEST(test_flag_then_stream_ordered_free_is_ordered),
        HOSTTEST(test_copy_queued_before_the_host_function_ran_races),
        HOSTTEST(test_host_function_on_another_stream_does_not_order),
        HOSTTEST(test_simulated_kernel_body_does_not_order),
        HOSTTEST(test_later_work_on_the_stream_sees_the_host_function),
    };
    return cmocka_run_group_tests_name("sim.race_host", tests, group_setup, group_teardown);
}
