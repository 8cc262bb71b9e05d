/*
 * Proves the trace recorder (CUCACHE_TRACE, interpose/trace.c) on the
 * simulated device: a child process (this program with `child`) makes a
 * known sequence of calls on two threads (runtime and driver allocations,
 * stream-ordered ones on a non-blocking stream, a failed allocation, stream,
 * event and device synchronisations, stream creation and destruction), and
 * the trace read back (stats/trace_read.c) holds exactly those events, in
 * each thread's order, with the addresses the calls returned, the devices
 * and streams, and times that never go backwards, after the run's
 * CUCACHE_CONF (in pieces) and the device's memory at its opening; a child killed by SIGKILL
 * after thousands of events leaves a trace readable up to its last whole
 * chunk; a bad CUCACHE_TRACE stops the program before main.
 *
 * Seen to fail: with hook_trace_on() ignoring the re-entry guard (the
 * calls cucache makes through the real runtime recorded too),
 * test_calls_recorded fails on the driver allocation the runtime made
 * inside the failed cudaMalloc.  Not tested: the cross-thread ordering of a
 * free and the reuse of its block (trace.c stamps frees before and
 * allocations after the allocator's call; no deterministic test forces
 * the race it guards against).
 */
#include "itest.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trace.h"

#define CHILD_ALLOCS 4

/* In the child (no cmocka there): any CUDA error ends it with status 5. */
#define CK_RT(call)                                                                                                    \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "child: %s: %s\n", #call, cudaGetErrorName(e_));                                           \
            exit(5);                                                                                                   \
        }                                                                                                              \
    } while (0)

static const char *self_path;

/* ---- the child: the calls to record --------------------------------------- */

static void *worker(void *arg)
{
    void **out = arg;
    CK_RT(cudaMalloc(&out[0], 3 * MIB));
    CK_RT(cudaFree(out[0]));
    return NULL;
}

static int child_main(const char *mode)
{
    if (strcmp(mode, "calls") == 0) {
        void *p[CHILD_ALLOCS];
        for (int i = 0; i < CHILD_ALLOCS; i++)
            CK_RT(cudaMalloc(&p[i], (size_t)(i + 1) * 1000));
        void *none = NULL;
        if (cudaMalloc(&none, (size_t)1 << 40) == cudaSuccess)
            return 3;
        (void)cudaGetLastError();
        cudaStream_t s;
        CK_RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        void *a = NULL;
        CK_RT(cudaMallocAsync(&a, 5000, s));
        CK_RT(cudaFreeAsync(a, s));
        CK_RT(cudaStreamSynchronize(s));
        /* the per-thread default stream through a _ptsz entry point on
         * handle 0: recorded as cudaStreamPerThread (0x2) */
        void *b = NULL;
        CK_RT(cudaMallocAsync_ptsz(&b, 6000, NULL));
        CK_RT(cudaFreeAsync_ptsz(b, NULL));
        CUdeviceptr d = 0;
        if (cuMemAlloc_v2(&d, 7000) != CUDA_SUCCESS || cuMemFree_v2(d) != CUDA_SUCCESS)
            return 4;
        for (int i = 0; i < CHILD_ALLOCS; i++)
            CK_RT(cudaFree(p[i]));
        CK_RT(cudaStreamDestroy(s));
        CK_RT(cudaDeviceSynchronize());
        /* a second thread, which exits before the process does */
        void *w[1];
        pthread_t t;
        pthread_create(&t, NULL, worker, w);
        pthread_join(t, NULL);
        /* the addresses, for the parent to compare */
        printf("addrs");
        for (int i = 0; i < CHILD_ALLOCS; i++)
            printf(" %llu", (unsigned long long)(uintptr_t)p[i]);
        printf(" %llu %llu %llu %llu\n", (unsigned long long)(uintptr_t)a, (unsigned long long)d,
               (unsigned long long)(uintptr_t)w[0], (unsigned long long)(uintptr_t)b);
        fflush(stdout);
        return 0;
    }
    if (strcmp(mode, "killed") == 0) {
        for (int i = 0; i < 3000; i++) {
            void *p = NULL;
            CK_RT(cudaMalloc(&p, 4096));
            CK_RT(cudaFree(p));
        }
        raise(SIGKILL);
    }
    return 2;
}

/* ---- the parent ---------------------------------------------------------- */

static void trace_path(char *out, size_t len, const char *what)
{
    const char *dir = getenv("ITEST_TRACEDIR");
    if (!dir)
        fail_msg("ITEST_TRACEDIR is not set (meson sets it)");
    snprintf(out, len, "%s/%s-%d.trace", dir, what, (int)getpid());
}

static void load(const char *path, trace_t *t)
{
    char err[512];
    if (trace_load(path, t, err, sizeof err) != 0)
        fail_msg("%s", err);
}

typedef struct want_s {
    uint8_t kind, api;
    uint64_t addr, size; /* checked when not ~0 */
} want_t;

#define ANY UINT64_MAX

static void test_calls_recorded(void **state)
{
    (void)state;
    char path[512], set[600];
    trace_path(path, sizeof path, "calls");
    snprintf(set, sizeof set, "CUCACHE_TRACE=%s", path);
    const char *const env[] = {set, NULL};
    const char *const argv[] = {self_path, "child", "calls", NULL};
    itest_run_t *r = malloc(sizeof *r);
    itest_spawn(self_path, argv, env, NULL, 30000, r);
    itest_expect_exit(r, 0);
    unsigned long long addr[CHILD_ALLOCS + 4];
    const char *line = strstr(r->out, "addrs");
    assert_non_null(line);
    int n = 0, k = 0;
    line += 5;
    while (n < CHILD_ALLOCS + 4 && sscanf(line, " %llu%n", &addr[n], &k) == 1) {
        line += k;
        n++;
    }
    assert_int_equal(n, CHILD_ALLOCS + 4);

    trace_t t;
    load(path, &t);
    assert_false(t.truncated);
    assert_int_equal(t.nthreads, 2);
    assert_int_equal(t.header.version, TRACE_VERSION);
    assert_int_equal(t.header.pid > 0, 1);

    /* the main thread's events, in order */
    const want_t main_want[] = {
        {TRACE_ALLOC, TRACE_API_CUDA_MALLOC, addr[0], 1000},
        {TRACE_ALLOC, TRACE_API_CUDA_MALLOC, addr[1], 2000},
        {TRACE_ALLOC, TRACE_API_CUDA_MALLOC, addr[2], 3000},
        {TRACE_ALLOC, TRACE_API_CUDA_MALLOC, addr[3], 4000},
        {TRACE_ALLOC_FAIL, TRACE_API_CUDA_MALLOC, cudaErrorMemoryAllocation, (uint64_t)1 << 40},
        {TRACE_STREAM_CREATE, TRACE_API_NONE, 0, cudaStreamNonBlocking},
        {TRACE_ALLOC, TRACE_API_CUDA_MALLOC_ASYNC, addr[4], 5000},
        {TRACE_FREE, TRACE_API_CUDA_MALLOC_ASYNC, addr[4], 0},
        {TRACE_STREAM_SYNC, TRACE_API_NONE, 0, 0},
        {TRACE_ALLOC, TRACE_API_CUDA_MALLOC_ASYNC, addr[7], 6000},
        {TRACE_FREE, TRACE_API_CUDA_MALLOC_ASYNC, addr[7], 0},
        {TRACE_ALLOC, TRACE_API_CU_MEM_ALLOC, addr[5], 7000},
        {TRACE_FREE, TRACE_API_CU_MEM_ALLOC, addr[5], 0},
        {TRACE_FREE, TRACE_API_CUDA_MALLOC, addr[0], 0},
        {TRACE_FREE, TRACE_API_CUDA_MALLOC, addr[1], 0},
        {TRACE_FREE, TRACE_API_CUDA_MALLOC, addr[2], 0},
        {TRACE_FREE, TRACE_API_CUDA_MALLOC, addr[3], 0},
        {TRACE_STREAM_DESTROY, TRACE_API_NONE, 0, 0},
        {TRACE_DEVICE_SYNC, TRACE_API_NONE, 0, 0},
    };
    const want_t worker_want[] = {
        {TRACE_ALLOC, TRACE_API_CUDA_MALLOC, addr[6], 3 * MIB},
        {TRACE_FREE, TRACE_API_CUDA_MALLOC, addr[6], 0},
    };
    uint32_t main_tid = t.nevents ? t.events[0].tid : 0;
    size_t im = 0, iw = 0, ndevice = 0;
    uint64_t last = 0, stream = 0;
    /* what the run was (version 2): its CUCACHE_CONF in pieces, first, and
     * the device's memory when cucache opened it, before its first
     * allocation */
    char conf[256] = "";
    bool conf_seen = false, last_seen = false;
    for (size_t i = 0; i < t.nevents; i++) {
        const trace_event_t *e = &t.events[i];
        if (e->time_ns < last)
            fail_msg("event %zu goes back in time: %llu < %llu", i, (unsigned long long)e->time_ns,
                     (unsigned long long)last);
        last = e->time_ns;
        if (e->kind == TRACE_CONF) {
            assert_int_equal(e->tid, main_tid);
            assert_int_equal(im + iw + ndevice, 0);
            const uint64_t words[3] = {e->stream, e->addr, e->size};
            size_t off = e->flags & ~TRACE_CONF_LAST;
            last_seen |= (e->flags & TRACE_CONF_LAST) != 0;
            for (int b = 0; b < 24 && off + (size_t)b + 1 < sizeof conf; b++) {
                char c = (char)(words[b / 8] >> (8 * (b % 8)));
                if (!c)
                    break;
                conf[off + (size_t)b] = c;
            }
            conf_seen = true;
            continue;
        }
        if (e->kind == TRACE_DEVICE) {
            assert_int_equal(e->device, 0);
            assert_int_equal(e->size, (uint64_t)1 << 30); /* CUCACHE_SIM_CAPACITY=1G */
            assert_true(e->addr > 0 && e->addr <= e->size);
            assert_int_equal(im + iw, 0);
            ndevice++;
            continue;
        }
        bool is_main = e->tid == main_tid;
        const want_t *w = is_main ? (im < 19 ? &main_want[im] : NULL) : (iw < 2 ? &worker_want[iw] : NULL);
        if (!w)
            fail_msg("event %zu (%s) is one more than the %s thread made", i, trace_kind_name(e->kind),
                     is_main ? "main" : "worker");
        if (e->kind != w->kind || e->api != w->api)
            fail_msg("event %zu of the %s thread: %s/%s, expected %s/%s", is_main ? im : iw,
                     is_main ? "main" : "worker", trace_kind_name(e->kind), trace_api_name(e->api),
                     trace_kind_name(w->kind), trace_api_name(w->api));
        if (e->kind == TRACE_ALLOC || e->kind == TRACE_FREE || e->kind == TRACE_ALLOC_FAIL)
            assert_int_equal(e->addr, w->addr);
        if (e->kind == TRACE_ALLOC || e->kind == TRACE_ALLOC_FAIL || e->kind == TRACE_STREAM_CREATE)
            assert_int_equal(e->size, w->size);
        assert_int_equal(e->device, 0);
        /* one non-blocking stream: the same handle from creation to destruction */
        if (e->kind == TRACE_STREAM_CREATE)
            stream = e->stream;
        if (e->api == TRACE_API_CUDA_MALLOC_ASYNC && e->addr == addr[7])
            assert_int_equal(e->stream, 0x2); /* cudaStreamPerThread */
        else if (e->api == TRACE_API_CUDA_MALLOC_ASYNC || e->kind == TRACE_STREAM_SYNC ||
                 e->kind == TRACE_STREAM_DESTROY)
            assert_int_equal(e->stream, stream);
        if (is_main)
            im++;
        else
            iw++;
    }
    assert_int_not_equal(stream, 0);
    assert_int_equal(im, 19);
    assert_int_equal(iw, 2);
    assert_true(conf_seen);
    assert_true(last_seen);
    const char *want_conf = getenv("CUCACHE_CONF");
    assert_string_equal(conf, want_conf ? want_conf : "");
    assert_int_equal(ndevice, 1);
    trace_free(&t);
    free(r);
    unlink(path);
}

static void test_killed_child_leaves_whole_chunks(void **state)
{
    (void)state;
    char path[512], set[600];
    trace_path(path, sizeof path, "killed");
    snprintf(set, sizeof set, "CUCACHE_TRACE=%s", path);
    const char *const env[] = {set, NULL};
    const char *const argv[] = {self_path, "child", "killed", NULL};
    itest_run_t *r = malloc(sizeof *r);
    itest_spawn(self_path, argv, env, NULL, 60000, r);
    assert_true(WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGKILL);
    trace_t t;
    load(path, &t);
    /* 6000 events made; what was in the buffer when it died is lost, every
     * full buffer (1024 records) was written whole */
    assert_int_equal(t.nevents % 1024, 0);
    assert_true(t.nevents >= 5 * 1024 && t.nevents < 6000);
    size_t k = 0; /* the run's conf and device records first, then the child's calls */
    for (size_t i = 0; i < t.nevents; i++)
        if (t.events[i].kind != TRACE_CONF && t.events[i].kind != TRACE_DEVICE)
            assert_int_equal(t.events[i].kind, k++ % 2 == 0 ? TRACE_ALLOC : TRACE_FREE);
    assert_true(k + 4 >= t.nevents);
    trace_free(&t);
    free(r);
    unlink(path);
}

static void test_bad_trace_path_stops_the_program(void **state)
{
    (void)state;
    const char *const env[] = {"CUCACHE_TRACE=/nonexistent-cucache-dir/t.trace", NULL};
    const char *const argv[] = {self_path, "child", "calls", NULL};
    itest_run_t *r = malloc(sizeof *r);
    itest_spawn(self_path, argv, env, NULL, 30000, r);
    itest_expect_exit(r, 1);
    if (!strstr(r->err, "CUCACHE_TRACE: cannot create '/nonexistent-cucache-dir/t.trace': No such file"))
        fail_msg("the message names the variable and the path:\n%s", r->err);
    assert_null(strstr(r->out, "addrs"));
    free(r);
}

int main(int argc, char **argv)
{
    self_path = argv[0];
    if (argc > 2 && strcmp(argv[1], "child") == 0)
        return child_main(argv[2]);
    const char *dir = getenv("ITEST_TRACEDIR");
    if (dir && mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "test_interpose_trace: mkdir %s: %s\n", dir, strerror(errno));
        return 1;
    }
    const struct CMUnitTest tests[] = {
        ITEST(test_calls_recorded),
        ITEST(test_killed_child_leaves_whole_chunks),
        ITEST(test_bad_trace_path_stops_the_program),
    };
    return ITEST_RUN("interpose_trace", tests, itest_group_setup);
}
