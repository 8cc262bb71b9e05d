/* Gates, marks, data patterns and fixtures shared by the tests suites. */
#include "simtest.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { GATE_POOL = 256, MARK_POOL = 2048 };

struct simtest_gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool open;           /* guarded by lock */
    atomic_bool entered; /* the host function has started waiting */
    atomic_bool passed;  /* the host function has returned */
    atomic_bool timed_out;
    atomic_long seq; /* global sequence when it returned; 0: not yet */
    pthread_t opener;
    bool has_opener; /* opener must be joined */
    unsigned opener_ms;
};

struct simtest_mark {
    atomic_long seq; /* global sequence when it ran; 0: not yet */
};

static struct simtest_gate gate_pool[GATE_POOL];
static atomic_int gate_used;
static struct simtest_mark mark_pool[MARK_POOL];
static atomic_int mark_used;
static atomic_long global_seq;

/* ---- checking CUDA calls --------------------------------------------- */

static const char *rc_name(int rc)
{
    const char *name = cudaGetErrorName((cudaError_t)rc);
    return name ? name : "?";
}

void simtest_expect_rc(int got, int want, const char *call, const char *file, int line)
{
    if (got == want)
        return;
    print_error("%s returned %d (%s), expected %d (%s)\n", call, got, rc_name(got), want, rc_name(want));
    _fail(file, line);
}

void simtest_expect_not_rc(int got, int unwanted, const char *call, const char *file, int line)
{
    if (got != unwanted)
        return;
    print_error("%s returned %d (%s), expected an error\n", call, got, rc_name(got));
    _fail(file, line);
}

/* ---- time ------------------------------------------------------------ */

void simtest_sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void simtest_settle(void)
{
    simtest_sleep_ms(SIMTEST_SETTLE_MS);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- gates ----------------------------------------------------------- */

simtest_gate_t *simtest_gate_new(void)
{
    int i = atomic_fetch_add(&gate_used, 1);
    if (i >= GATE_POOL) {
        fprintf(stderr, "simtest: gate pool exhausted\n");
        abort();
    }
    simtest_gate_t *g = &gate_pool[i];
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    return g;
}

void simtest_gate_fn(void *gate)
{
    simtest_gate_t *g = gate;
    atomic_store(&g->entered, true);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += SIMTEST_GATE_TIMEOUT_MS / 1000;
    pthread_mutex_lock(&g->lock);
    while (!g->open) {
        if (pthread_cond_timedwait(&g->cond, &g->lock, &deadline) == ETIMEDOUT) {
            atomic_store(&g->timed_out, true);
            fprintf(stderr, "simtest: a gate was never opened; giving up after %d ms\n", SIMTEST_GATE_TIMEOUT_MS);
            break;
        }
    }
    pthread_mutex_unlock(&g->lock);
    atomic_store(&g->seq, atomic_fetch_add(&global_seq, 1) + 1);
    atomic_store(&g->passed, true);
}

void simtest_gate_block(simtest_gate_t *g, cudaStream_t s)
{
    SIM_OK(cudaLaunchHostFunc(s, simtest_gate_fn, g));
}

void simtest_gate_block_ptsz(simtest_gate_t *g, cudaStream_t s)
{
    SIM_OK(cudaLaunchHostFunc_ptsz(s, simtest_gate_fn, g));
}

void simtest_gate_open(simtest_gate_t *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = true;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

static void *opener_main(void *arg)
{
    simtest_gate_t *g = arg;
    simtest_sleep_ms(g->opener_ms);
    simtest_gate_open(g);
    return NULL;
}

void simtest_gate_open_after(simtest_gate_t *g, unsigned ms)
{
    assert_false(g->has_opener);
    g->opener_ms = ms;
    assert_int_equal(pthread_create(&g->opener, NULL, opener_main, g), 0);
    g->has_opener = true;
}

bool simtest_gate_entered(simtest_gate_t *g)
{
    return atomic_load(&g->entered);
}

bool simtest_gate_passed(simtest_gate_t *g)
{
    return atomic_load(&g->passed);
}

bool simtest_gate_wait_entered(simtest_gate_t *g)
{
    long end = now_ms() + SIMTEST_WAIT_MS;
    while (!simtest_gate_entered(g)) {
        if (now_ms() > end)
            return false;
        simtest_sleep_ms(1);
    }
    return true;
}

bool simtest_gate_timed_out(simtest_gate_t *g)
{
    return atomic_load(&g->timed_out);
}

long simtest_gate_seq(simtest_gate_t *g)
{
    return atomic_load(&g->seq);
}

/* ---- marks ----------------------------------------------------------- */

simtest_mark_t *simtest_mark_new(void)
{
    int i = atomic_fetch_add(&mark_used, 1);
    if (i >= MARK_POOL) {
        fprintf(stderr, "simtest: mark pool exhausted\n");
        abort();
    }
    return &mark_pool[i];
}

void simtest_mark_fn(void *mark)
{
    simtest_mark_t *m = mark;
    atomic_store(&m->seq, atomic_fetch_add(&global_seq, 1) + 1);
}

void simtest_mark_on(simtest_mark_t *m, cudaStream_t s)
{
    SIM_OK(cudaLaunchHostFunc(s, simtest_mark_fn, m));
}

void simtest_mark_on_ptsz(simtest_mark_t *m, cudaStream_t s)
{
    SIM_OK(cudaLaunchHostFunc_ptsz(s, simtest_mark_fn, m));
}

bool simtest_mark_ran(simtest_mark_t *m)
{
    return atomic_load(&m->seq) != 0;
}

bool simtest_mark_wait(simtest_mark_t *m)
{
    long end = now_ms() + SIMTEST_WAIT_MS;
    while (!simtest_mark_ran(m)) {
        if (now_ms() > end)
            return false;
        simtest_sleep_ms(1);
    }
    return true;
}

long simtest_mark_seq(simtest_mark_t *m)
{
    return atomic_load(&m->seq);
}

/* ---- helper threads -------------------------------------------------- */

enum { THREAD_POOL = 64 };

struct simtest_thread {
    pthread_t th;
    void (*fn)(void *);
    void *arg;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool ran;     /* fn returned; guarded by lock */
    bool release; /* the thread may exit; guarded by lock */
    bool joined;  /* finished by the test or by simtest_teardown */
};

static struct simtest_thread thread_pool[THREAD_POOL];
static atomic_int thread_used;

static void *helper_main(void *arg)
{
    simtest_thread_t *t = arg;
    t->fn(t->arg);
    pthread_mutex_lock(&t->lock);
    t->ran = true;
    pthread_cond_broadcast(&t->cond);
    while (!t->release)
        pthread_cond_wait(&t->cond, &t->lock);
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

simtest_thread_t *simtest_thread_start(void (*fn)(void *), void *arg)
{
    int i = atomic_fetch_add(&thread_used, 1);
    if (i >= THREAD_POOL) {
        fprintf(stderr, "simtest: thread pool exhausted\n");
        abort();
    }
    simtest_thread_t *t = &thread_pool[i];
    t->fn = fn;
    t->arg = arg;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    assert_int_equal(pthread_create(&t->th, NULL, helper_main, t), 0);
    pthread_mutex_lock(&t->lock);
    while (!t->ran)
        pthread_cond_wait(&t->cond, &t->lock);
    pthread_mutex_unlock(&t->lock);
    return t;
}

void simtest_thread_finish(simtest_thread_t *t)
{
    if (t->joined)
        return;
    t->joined = true;
    pthread_mutex_lock(&t->lock);
    t->release = true;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->th, NULL);
}

/* ---- waiting --------------------------------------------------------- */

cudaError_t simtest_stream_wait_idle(cudaStream_t s)
{
    long end = now_ms() + SIMTEST_WAIT_MS;
    for (;;) {
        cudaError_t rc = cudaStreamQuery(s);
        if (rc != cudaErrorNotReady || now_ms() > end)
            return rc;
        simtest_sleep_ms(1);
    }
}

cudaError_t simtest_event_wait_done(cudaEvent_t e)
{
    long end = now_ms() + SIMTEST_WAIT_MS;
    for (;;) {
        cudaError_t rc = cudaEventQuery(e);
        if (rc != cudaErrorNotReady || now_ms() > end)
            return rc;
        simtest_sleep_ms(1);
    }
}

/* ---- data patterns --------------------------------------------------- */

static unsigned char pattern_byte(unsigned seed, size_t i)
{
    uint64_t x = (uint64_t)seed * 0x9E3779B97F4A7C15ull + i;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (unsigned char)x;
}

void simtest_fill(void *buf, size_t n, unsigned seed)
{
    unsigned char *b = buf;
    for (size_t i = 0; i < n; i++)
        b[i] = pattern_byte(seed, i);
}

long simtest_check(const void *buf, size_t n, unsigned seed, size_t off)
{
    const unsigned char *b = buf;
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern_byte(seed, off + i))
            return (long)i;
    return -1;
}

long simtest_check_byte(const void *buf, size_t n, unsigned char value)
{
    const unsigned char *b = buf;
    for (size_t i = 0; i < n; i++)
        if (b[i] != value)
            return (long)i;
    return -1;
}

/* ---- simulator extensions -------------------------------------------- */

void *simtest_sim_sym(const char *name)
{
    /* The runtime dlopens libcuda.so.1, maybe RTLD_LOCAL, so RTLD_DEFAULT may
     * not see it: ask the loaded object itself. */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return NULL;
    /* The handle is kept: the symbol must stay valid. */
    return dlsym(h, name);
}

/* ---- fixtures -------------------------------------------------------- */

int simtest_teardown(void **state)
{
    (void)state;
    int n = atomic_load(&gate_used);
    if (n > GATE_POOL)
        n = GATE_POOL;
    for (int i = 0; i < n; i++) {
        simtest_gate_open(&gate_pool[i]);
        if (gate_pool[i].has_opener) {
            pthread_join(gate_pool[i].opener, NULL);
            gate_pool[i].has_opener = false;
        }
    }
    int nt = atomic_load(&thread_used);
    for (int i = 0; i < nt && i < THREAD_POOL; i++)
        simtest_thread_finish(&thread_pool[i]);
    (void)cudaDeviceSynchronize();
    (void)cudaGetLastError();
    return 0;
}

int simtest_group_setup(void **state)
{
    (void)state;
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess || n < 1) {
        fprintf(stderr, "simtest: no device (%d, %s)\n", (int)rc, rc_name((int)rc));
        return -1;
    }
    return 0;
}
