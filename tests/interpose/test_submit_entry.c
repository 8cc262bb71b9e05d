/*
 * Proves that the counting trampolines (interpose/submit_entry.S, built
 * here with interpose/submit.c alone, the driver's functions played by
 * this file) reach the driver's function with every argument as the caller
 * passed it: an exported trampoline (cuLaunchKernel: six register and five
 * stack arguments) and a pool trampoline (cuGetProcAddress's answers that
 * are no exported symbol's), integer, stack and vector arguments, and a
 * variadic call's vector count, on the first call (the slow path) and
 * after, with the epoch odd (the path that moves it on) and even; that each
 * call is counted once; that the epoch moves on exactly when a submission
 * follows a hand-out (core_epoch_note), including a submission on another
 * thread ordered after the hand-out; and that a trampoline whose driver
 * function is missing answers CUDA_ERROR_NOT_INITIALIZED.
 *
 * Seen to fail: with the pool trampolines spaced 32 bytes apart (their
 * addresses then land inside a neighbour), with the path that moves the
 * epoch on leaving rax zero (the variadic callee then reads no vector
 * argument), and with the inline path leaving the epoch alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>
#include <string.h>

#include "real.h"
#include "submit.h"

/* Exported trampolines under test.  cucache's cuda_api.h declares none of
 * them (a trampoline needs its name only, and takes any prototype): each
 * is called through a function type of this file. */
extern char cuLaunchKernel[];
extern char cuLaunchKernelEx[];
extern char cuLaunchGrid[];

/* A kernel's handle, as cuda.h declares it (cucache never uses one). */
typedef struct CUfunc_st *CUfunction;

/* ------------------------------------------------------------------------
 * The driver, as submit.c finds it
 * ---------------------------------------------------------------------- */

/* What the last call of a driver function saw. */
static struct {
    uintptr_t a[11];
    double d[8];
    int calls;
} seen;

static CUresult fake_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shmem, CUstream s, void **params, void **extra)
{
    uintptr_t a[11] = {(uintptr_t)f, gx, gy, gz, bx, by, bz, shmem, (uintptr_t)s, (uintptr_t)params, (uintptr_t)extra};
    memcpy(seen.a, a, sizeof a);
    seen.calls++;
    return CUDA_SUCCESS;
}

/* Eight vector arguments and a stack one, as no driver function has, but
 * the trampolines take any prototype. */
static CUresult fake_vectors(double d0, double d1, double d2, double d3, double d4, double d5, double d6, double d7,
                             int i0, int i1, int i2, int i3, int i4, int i5, int on_stack)
{
    double d[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    memcpy(seen.d, d, sizeof d);
    uintptr_t a[7] = {(uintptr_t)i0, (uintptr_t)i1, (uintptr_t)i2,      (uintptr_t)i3,
                      (uintptr_t)i4, (uintptr_t)i5, (uintptr_t)on_stack};
    memcpy(seen.a, a, sizeof a);
    seen.calls++;
    return CUDA_SUCCESS;
}

/* A variadic callee reads its vector arguments only if the caller's count
 * of them (rax on x86-64) reaches it. */
static CUresult fake_variadic(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n && i < 8; i++)
        seen.d[i] = va_arg(ap, double);
    va_end(ap);
    seen.calls++;
    return CUDA_SUCCESS;
}

/* Called from many threads at once. */
static _Atomic unsigned long nothing_calls;

static CUresult fake_nothing(void)
{
    nothing_calls++;
    return CUDA_SUCCESS;
}

/* The driver table counts as resolved (real.h's hook_real_driver). */
atomic_int hook_real_driver_state = 1;

bool hook_real_driver_resolve(void)
{
    return true;
}

void *hook_real_driver_sym(const char *name)
{
    if (strcmp(name, "cuLaunchKernel") == 0)
        return (void *)(uintptr_t)fake_launch;
    if (strcmp(name, "cuLaunchGrid") == 0)
        return (void *)(uintptr_t)fake_nothing;
    return NULL; /* cuLaunchKernelEx, among others: missing */
}

/* ------------------------------------------------------------------------
 * The trampolines
 * ---------------------------------------------------------------------- */

/* cuLaunchKernel's prototype. */
typedef CUresult launch_fn(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void **, void **);
/* cuLaunchKernelEx's: a launch configuration, the function, its arguments. */
typedef CUresult launch_ex_fn(const void *config, CUfunction f, void **params, void **extra);
typedef CUresult vectors_fn(double, double, double, double, double, double, double, double, int, int, int, int, int,
                            int, int);
typedef CUresult variadic_fn(int n, ...);
typedef CUresult nothing_fn(void);

static uint64_t epoch(void)
{
    return atomic_load(&hook_submit_epoch);
}

/* A pool trampoline for fn, under a submitting name no export has at fn's
 * address. */
static void *pool_for(void *fn)
{
    void *t = hook_submit_wrap("cuMemsetD8", fn);
    assert_non_null(t);
    assert_ptr_not_equal(t, fn);
    return t;
}

static void launch_and_check(launch_fn *launch)
{
    int calls = seen.calls;
    uint64_t n = hook_submit_count();
    assert_int_equal(launch((CUfunction)(uintptr_t)0x1111, 2, 3, 4, 5, 6, 7, 8, (CUstream)(uintptr_t)0x9999,
                            (void **)(uintptr_t)0xaaaa, (void **)(uintptr_t)0xbbbb),
                     CUDA_SUCCESS);
    uintptr_t want[11] = {0x1111, 2, 3, 4, 5, 6, 7, 8, 0x9999, 0xaaaa, 0xbbbb};
    for (int i = 0; i < 11; i++)
        assert_int_equal(seen.a[i], want[i]);
    assert_int_equal(seen.calls, calls + 1);
    assert_int_equal(hook_submit_count(), n + 1);
}

static void vectors_and_check(vectors_fn *fn)
{
    memset(&seen.d, 0, sizeof seen.d);
    assert_int_equal(fn(0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 10, 11, 12, 13, 14, 15, 16), CUDA_SUCCESS);
    for (int i = 0; i < 8; i++)
        assert_true(seen.d[i] == i + 0.5);
    for (int i = 0; i < 7; i++)
        assert_int_equal(seen.a[i], 10 + i);
}

static void variadic_and_check(variadic_fn *fn)
{
    memset(&seen.d, 0, sizeof seen.d);
    assert_int_equal(fn(8, 0.25, 1.25, 2.25, 3.25, 4.25, 5.25, 6.25, 7.25), CUDA_SUCCESS);
    for (int i = 0; i < 8; i++)
        assert_true(seen.d[i] == i + 0.25);
}

/* Every argument arrives, by the exported trampoline and a pool one, on
 * the first call and after, with the epoch odd and even. */
static void test_arguments_arrive_untouched(void **state)
{
    (void)state;
    launch_fn *pool_launch = (launch_fn *)(uintptr_t)pool_for((void *)(uintptr_t)fake_launch);
    vectors_fn *vectors = (vectors_fn *)(uintptr_t)pool_for((void *)(uintptr_t)fake_vectors);
    variadic_fn *variadic = (variadic_fn *)(uintptr_t)pool_for((void *)(uintptr_t)fake_variadic);
    assert_ptr_equal(pool_for((void *)(uintptr_t)fake_launch), (void *)(uintptr_t)pool_launch); /* made once */
    for (int round = 0; round < 4; round++) {
        if (round % 2)
            core_epoch_note(&hook_submit_epoch); /* odd: the first call moves it on */
        launch_and_check((launch_fn *)(uintptr_t)cuLaunchKernel);
        launch_and_check(pool_launch);
        if (round % 2)
            core_epoch_note(&hook_submit_epoch);
        vectors_and_check(vectors);
        if (round % 2)
            core_epoch_note(&hook_submit_epoch);
        variadic_and_check(variadic);
    }
}

/* The epoch moves on once after each hand-out, on the first submission,
 * and is left alone otherwise. */
static void test_epoch_moves_on_after_a_hand_out(void **state)
{
    (void)state;
    nothing_fn *grid = (nothing_fn *)(uintptr_t)cuLaunchGrid; /* an export; the prototype does not matter */
    nothing_fn *pool = (nothing_fn *)(uintptr_t)pool_for((void *)(uintptr_t)fake_nothing);
    for (int route = 0; route < 2; route++) {
        nothing_fn *fn = route ? pool : grid;
        fn();
        uint64_t e = core_epoch_note(&hook_submit_epoch);
        assert_true(e & 1);
        assert_int_equal(core_epoch_note(&hook_submit_epoch), e); /* a second hand-out: no change */
        assert_int_equal(fn(), CUDA_SUCCESS);
        assert_int_equal(epoch(), e + 1);
        assert_int_equal(fn(), CUDA_SUCCESS);
        assert_int_equal(epoch(), e + 1); /* no hand-out since: no change */
        assert_int_equal(core_epoch_note(&hook_submit_epoch), e + 2);
    }
}

/* A missing driver function: CUDA_ERROR_NOT_INITIALIZED, and counted. */
static void test_missing_function_answers_not_initialized(void **state)
{
    (void)state;
    uint64_t n = hook_submit_count();
    launch_ex_fn *launch_ex = (launch_ex_fn *)(uintptr_t)cuLaunchKernelEx;
    assert_int_equal(launch_ex(NULL, NULL, NULL, NULL), CUDA_ERROR_NOT_INITIALIZED);
    assert_int_equal(hook_submit_count(), n + 1);
}

/* ------------------------------------------------------------------------
 * Threads
 * ---------------------------------------------------------------------- */

enum {
    NTHREADS = 8,
    CALLS = 20000,
    ROUNDS = 200,
};

typedef struct worker_s {
    pthread_t id;
    int index;
    nothing_fn *fn;
    pthread_barrier_t *noted, *submitted;
    int *chosen; /* the round's submitting thread */
} worker_t;

static void *many_calls(void *arg)
{
    worker_t *w = arg;
    for (int i = 0; i < CALLS; i++)
        w->fn();
    return NULL;
}

/* Threads calling at once, by an export and a pool trampoline, new
 * threads each time: every call counted, after the threads exited too. */
static void test_threads_all_counted(void **state)
{
    (void)state;
    nothing_fn *pool = (nothing_fn *)(uintptr_t)pool_for((void *)(uintptr_t)fake_nothing);
    uint64_t n = hook_submit_count();
    unsigned long calls = nothing_calls;
    worker_t w[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (worker_t){.fn = i % 2 ? pool : (nothing_fn *)(uintptr_t)cuLaunchGrid};
        assert_int_equal(pthread_create(&w[i].id, NULL, many_calls, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(w[i].id, NULL);
    assert_int_equal(hook_submit_count(), n + (uint64_t)NTHREADS * CALLS);
    assert_int_equal(nothing_calls - calls, (unsigned long)NTHREADS * CALLS);
}

static void *submit_when_chosen(void *arg)
{
    worker_t *w = arg;
    w->fn(); /* listed: its calls count inline from now on */
    for (int r = 0; r < ROUNDS; r++) {
        pthread_barrier_wait(w->noted);
        if (*w->chosen == w->index)
            w->fn();
        pthread_barrier_wait(w->submitted);
    }
    return NULL;
}

/* A hand-out on the main thread, then one submission on one other thread,
 * ordered between them by barriers: the epoch has moved on when main reads
 * it, every round, whichever thread submitted. */
static void test_other_threads_submission_is_seen(void **state)
{
    (void)state;
    pthread_barrier_t noted, submitted;
    pthread_barrier_init(&noted, NULL, NTHREADS + 1);
    pthread_barrier_init(&submitted, NULL, NTHREADS + 1);
    int chosen = -1, missed = 0;
    worker_t w[NTHREADS];
    nothing_fn *pool = (nothing_fn *)(uintptr_t)pool_for((void *)(uintptr_t)fake_nothing);
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (worker_t){.index = i,
                          .fn = i % 2 ? pool : (nothing_fn *)(uintptr_t)cuLaunchGrid,
                          .noted = &noted,
                          .submitted = &submitted,
                          .chosen = &chosen};
        assert_int_equal(pthread_create(&w[i].id, NULL, submit_when_chosen, &w[i]), 0);
    }
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t e = core_epoch_note(&hook_submit_epoch);
        chosen = (r * 5 + 1) % NTHREADS;
        pthread_barrier_wait(&noted);
        pthread_barrier_wait(&submitted);
        missed += epoch() == e; /* checked after the join: a failure here would leave the threads waiting */
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(w[i].id, NULL);
    pthread_barrier_destroy(&noted);
    pthread_barrier_destroy(&submitted);
    assert_int_equal(missed, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arguments_arrive_untouched),
        cmocka_unit_test(test_epoch_moves_on_after_a_hand_out),
        cmocka_unit_test(test_missing_function_answers_not_initialized),
        cmocka_unit_test(test_threads_all_counted),
        cmocka_unit_test(test_other_threads_submission_is_seen),
    };
    return cmocka_run_group_tests_name("interpose.submit_entry", tests, NULL, NULL);
}
