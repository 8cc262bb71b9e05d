/*
 * Proves that submissions made on many threads at once are all seen
 * (interpose/submit.c: each thread counts its own, and the first
 * submission after a hand-out moves the shared epoch on):
 * cucache_stat's num_submissions adds up every thread's calls, by name and
 * through cuGetProcAddress, while the threads live and after they have
 * exited, a submission made by a thread's own exit destructors included;
 * and a block freed on one thread after another thread, already counting
 * inline, queued work that reads it (ordered by the program: the free
 * follows a join of barriers) waits behind a fence: the free is never taken
 * as idle, and the next owner's write never races the reader, whichever of
 * eight threads submitted.
 *
 * Seen to fail: with one listed thread left out of the sum, the count
 * comes out short; with the trampolines' inline path leaving the epoch
 * alone, the free is taken as idle and the race detector reports the new
 * owner's memset against the reader.
 */
#include "itest.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum {
    NTHREADS = 8,
    CALLS = 5000, /* submissions per thread */
};

typedef CUresult launch_ex_fn(const CUlaunchConfig *, CUfunction, void **, void **);

static int64_t submissions(void)
{
    return itest_stat(0, "num_submissions");
}

/* cuLaunchKernelEx through the address cuGetProcAddress gives. */
static launch_ex_fn *looked_up(void)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult q;
    CU_OK(cuGetProcAddress_v2("cuLaunchKernelEx", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
    launch_ex_fn *fn;
    memcpy(&fn, &p, sizeof fn);
    return fn;
}

/* Calls answered otherwise than expected, on any thread (cmocka's checks
 * belong to the main thread: the others count here, main checks). */
static _Atomic int wrong;

/* A submission the simulated driver refuses at once (no configuration):
 * counted all the same, since the trampoline counts before the driver
 * runs. */
static void refused(launch_ex_fn *fn)
{
    if (fn(NULL, NULL, NULL, NULL) != CUDA_ERROR_INVALID_VALUE)
        wrong++;
}

/* A call that must succeed, counted in `wrong` when it does not. */
#define TRY(call) ((int)(call) == 0 ? (void)0 : (void)wrong++)

/* ------------------------------------------------------------------------
 * Every thread's submissions counted
 * ---------------------------------------------------------------------- */

typedef struct counter_s {
    pthread_t id;
    launch_ex_fn *fn;           /* the route: by name or looked up */
    pthread_barrier_t *start;   /* all threads submit at once */
    pthread_barrier_t *counted; /* main reads the count while they live */
    pthread_barrier_t *leave;
} counter_t;

static void *counter(void *arg)
{
    counter_t *c = arg;
    pthread_barrier_wait(c->start);
    for (int i = 0; i < CALLS; i++)
        refused(c->fn);
    pthread_barrier_wait(c->counted);
    pthread_barrier_wait(c->leave);
    return NULL;
}

static void test_threads_submitting_at_once_are_all_counted(void **state)
{
    (void)state;
    itest_require_cucache();
    launch_ex_fn *by_proc = looked_up();
    counter_t c[NTHREADS];
    pthread_barrier_t start, counted, leave;
    pthread_barrier_init(&start, NULL, NTHREADS);
    pthread_barrier_init(&counted, NULL, NTHREADS + 1);
    pthread_barrier_init(&leave, NULL, NTHREADS + 1);
    int64_t n0 = submissions();
    for (int i = 0; i < NTHREADS; i++) {
        c[i] = (counter_t){
            .fn = i % 2 ? by_proc : cuLaunchKernelEx, .start = &start, .counted = &counted, .leave = &leave};
        assert_int_equal(pthread_create(&c[i].id, NULL, counter, &c[i]), 0);
    }
    pthread_barrier_wait(&counted);
    int64_t live = -1; /* checked once the threads are joined (a failed check would leave them waiting) */
    TRY(itest_stat_raw(0, "num_submissions", &live));
    pthread_barrier_wait(&leave);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(c[i].id, NULL);
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&counted);
    pthread_barrier_destroy(&leave);
    assert_int_equal(wrong, 0);
    assert_int_equal(live, n0 + (int64_t)NTHREADS * CALLS);          /* the threads live */
    assert_int_equal(submissions(), n0 + (int64_t)NTHREADS * CALLS); /* and have exited */
}

/* A key whose destructor submits once more: made after the process's
 * first submission, it comes after cucache's own, so that submission comes
 * after cucache has moved the thread's count to the threads gone (whichever
 * order, it must be counted). */
static pthread_key_t late_key;

static void submit_at_exit(void *arg)
{
    refused((launch_ex_fn *)(uintptr_t)arg);
}

static void *submit_then_exit(void *arg)
{
    pthread_setspecific(late_key, arg);
    refused((launch_ex_fn *)(uintptr_t)arg);
    return NULL;
}

static void test_submissions_at_thread_exit_are_counted(void **state)
{
    (void)state;
    itest_require_cucache();
    refused(cuLaunchKernelEx); /* the process has submitted before the key is made */
    assert_int_equal(pthread_key_create(&late_key, submit_at_exit), 0);
    int64_t n0 = submissions();
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, submit_then_exit, (void *)(uintptr_t)cuLaunchKernelEx), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(submissions(), n0 + 2 * NTHREADS);
    pthread_key_delete(late_key);
    assert_int_equal(wrong, 0);
}

/* ------------------------------------------------------------------------
 * A free after another thread's submission waits behind a fence
 * ---------------------------------------------------------------------- */

typedef struct reader_s {
    pthread_t id;
    int index;
    pthread_barrier_t *handed; /* main handed the block out */
    pthread_barrier_t *queued; /* the chosen thread queued its reader */
    int rounds;
    int *chosen;      /* this round's submitting thread (set by main before `handed`) */
    void **block;     /* this round's block */
    cudaStream_t *s;  /* the reader's stream, behind a gate */
    launch_ex_fn *fn; /* the thread's first submission lists it */
} reader_t;

static void *reader(void *arg)
{
    reader_t *r = arg;
    TRY(cudaSetDevice(0)); /* the device's context, current on this thread */
    refused(r->fn);        /* counted from now on by the trampolines' inline path */
    for (int round = 0; round < r->rounds; round++) {
        pthread_barrier_wait(r->handed);
        if (*r->chosen == r->index) {
            struct cucache_sim_access acc = {*r->block, 4 * MIB, 0};
            TRY(cucacheSimLaunch((CUstream)*r->s, NULL, NULL, &acc, 1));
        }
        pthread_barrier_wait(r->queued);
    }
    return NULL;
}

static void test_free_after_another_threads_submission_is_fenced(void **state)
{
    (void)state;
    itest_require_cucache();
    cudaStream_t s, t;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    SIM_OK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
    launch_ex_fn *by_proc = looked_up();
    pthread_barrier_t handed, queued;
    pthread_barrier_init(&handed, NULL, NTHREADS + 1);
    pthread_barrier_init(&queued, NULL, NTHREADS + 1);
    int chosen = -1;
    void *block = NULL;
    reader_t r[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        r[i] = (reader_t){.index = i,
                          .handed = &handed,
                          .queued = &queued,
                          .rounds = NTHREADS,
                          .chosen = &chosen,
                          .block = &block,
                          .s = &s,
                          .fn = i % 2 ? by_proc : cuLaunchKernelEx};
        assert_int_equal(pthread_create(&r[i].id, NULL, reader, &r[i]), 0);
    }
    /* what each round saw, checked once the threads are joined (a failed
     * check would leave them waiting at a barrier) */
    int64_t idle_taken[NTHREADS];
    unsigned long races[NTHREADS];
    int64_t idle = itest_stat(0, "num_idle_frees");
    unsigned long races0 = itest_races();
    for (int round = 0; round < NTHREADS; round++) {
        TRY(cudaDeviceSynchronize());
        /* the gate first: it is a submission too (cuLaunchHostFunc) */
        simtest_gate_t *g = simtest_gate_new();
        simtest_gate_block(g, s);
        block = NULL;
        TRY(cudaMalloc(&block, 4 * MIB));
        chosen = (round * 5 + 3) % NTHREADS; /* every thread once, in a shuffled order */
        pthread_barrier_wait(&handed);
        pthread_barrier_wait(&queued);
        TRY(cudaFree(block));
        int64_t now = -1;
        TRY(itest_stat_raw(0, "num_idle_frees", &now));
        idle_taken[chosen] = now - idle;
        idle = now;
        void *q = NULL;
        TRY(cudaMalloc(&q, 4 * MIB));
        TRY(cudaMemsetAsync(q, 2, 4 * MIB, t)); /* the new owner writes its block */
        simtest_gate_open(g);
        TRY(cudaDeviceSynchronize());
        races[chosen] = itest_races() - races0;
        races0 = itest_races();
        TRY(cudaFree(q));
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(r[i].id, NULL);
    pthread_barrier_destroy(&handed);
    pthread_barrier_destroy(&queued);
    assert_int_equal(wrong, 0);
    for (int i = 0; i < NTHREADS; i++) {
        if (idle_taken[i] != 0)
            fail_msg("thread %d queued a reader of the block: its free was taken as idle", i);
        if (races[i] != 0)
            fail_msg("thread %d queued a reader of the block: the next owner's write raced it", i);
    }
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaStreamDestroy(t));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        ITEST(test_threads_submitting_at_once_are_all_counted),
        ITEST(test_submissions_at_thread_exit_are_counted),
        ITEST(test_free_after_another_threads_submission_is_fenced),
    };
    return ITEST_RUN("interpose.submit", tests, itest_group_setup);
}
