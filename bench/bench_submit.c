/*
 * What counting a submission costs a launch (interpose/submit.c: the count
 * that lets a plain free skip its fence when nothing was submitted since
 * the block was handed out), with 1, 4, 8 ... threads launching at once.
 *
 * A call is cuLaunchKernelEx with no configuration, which the simulated
 * driver refuses at once (CUDA_ERROR_INVALID_VALUE) before taking any lock,
 * so a call is little more than the jump to it.  Run plain and with
 * LD_PRELOAD=libcucache.so (the call then goes through cucache's counting
 * trampoline): the difference per call is the trampoline.  Scenarios:
 *   name   cuLaunchKernelEx called by name (the exported trampoline);
 *   proc   through the address cuGetProcAddress gives;
 *   mixed  the launch by name, then cuMemAlloc_v2(4 KiB) and cuMemFree_v2:
 *          a block handed out between each two launches, and freed with
 *          no launch since (under the preload a cache hit whose free needs
 *          no fence, which is what the count is kept for; plain, the
 *          simulated driver's own costs, so only the preload's figure
 *          means anything).
 *
 * For each thread count T, each run starts T threads that each make one
 * call (the first call resolves the trampoline), meet at a barrier, make
 * their -n calls and stop their clocks.  A thread's cost per call is its
 * own CPU time (CLOCK_THREAD_CPUTIME_ID) over its calls: the time a core
 * spent on each call while the thread ran.  When T exceeds the machine's
 * cores the threads take turns, so their wall-clock time per call counts
 * the turns of the others; their CPU time per call does not, and still
 * grows when the cores that do run at once fight over a cache line.  With
 * C cores at most min(T, C) threads run at once: on a machine with fewer
 * cores than threads the figure measures contention among those C, not T.
 * A run's figure is the median over its threads; the result is the best
 * run (and the median of the runs), with the slowest thread of that best
 * run and the wall-clock time per call per thread beside it.
 *
 * Output: one "result SCENARIO THREADS BEST MEDIAN SLOWEST WALL" line per
 * scenario and thread count (ns per call per thread), which
 * scripts/bench-submit sets side by side, plain against the preload.  Not
 * a test.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cusim/cuda_api.h"

enum {
    MAX_THREADS = 256,
    MAX_COUNTS = 16,
    MIXED_DIVISOR = 20, /* the mixed scenario makes -n / this calls: a pair costs tens of times a launch */
};

const char bench_prog[] = "bench_submit";

typedef CUresult launch_ex_fn(const CUlaunchConfig *, CUfunction, void **, void **);

typedef enum scenario_e { SC_NAME, SC_PROC, SC_MIXED, SC_COUNT } scenario_t;

static const char *const scenario_names[SC_COUNT] = {"name", "proc", "mixed"};

static launch_ex_fn *looked_up; /* cuLaunchKernelEx through cuGetProcAddress */
static CUcontext primary;       /* the mixed scenario's context, made current in each thread */

typedef struct worker_s {
    pthread_t id;
    scenario_t sc;
    uint64_t calls;
    pthread_barrier_t *start;
    double cpu_ns, wall_ns; /* this thread's, over its calls */
    unsigned failed;        /* calls that did not answer as expected */
} worker_t;

static uint64_t thread_cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* calls launches through fn, each refused at once; returns the calls that
 * were not refused (there should be none). */
static unsigned launches(launch_ex_fn *fn, uint64_t calls)
{
    unsigned bad = 0;
    for (uint64_t i = 0; i < calls; i++)
        bad += fn(NULL, NULL, NULL, NULL) != CUDA_ERROR_INVALID_VALUE;
    return bad;
}

/* calls launches, each followed by an allocation of 4 KiB and its free. */
static unsigned mixed(uint64_t calls)
{
    unsigned bad = 0;
    for (uint64_t i = 0; i < calls; i++) {
        CUdeviceptr p;
        bad += cuLaunchKernelEx(NULL, NULL, NULL, NULL) != CUDA_ERROR_INVALID_VALUE;
        if (cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS) {
            bad++;
            continue;
        }
        bad += cuMemFree_v2(p) != CUDA_SUCCESS;
    }
    return bad;
}

static unsigned calls_of(scenario_t sc, uint64_t calls)
{
    switch (sc) {
    case SC_NAME:
        return launches(cuLaunchKernelEx, calls);
    case SC_PROC:
        return launches(looked_up, calls);
    default:
        return mixed(calls);
    }
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    if (w->sc == SC_MIXED && cuCtxSetCurrent(primary) != CUDA_SUCCESS)
        bench_die("cuCtxSetCurrent failed");
    w->failed = calls_of(w->sc, 1); /* resolves the trampoline, and a thread's first-call work */
    pthread_barrier_wait(w->start);
    uint64_t c0 = thread_cpu_ns(), t0 = bench_now_ns();
    w->failed += calls_of(w->sc, w->calls);
    w->wall_ns = (double)(bench_now_ns() - t0);
    w->cpu_ns = (double)(thread_cpu_ns() - c0);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct run_s {
    double median, slowest, wall; /* ns per call per thread */
} run_t;

/* One run: nthreads threads, calls each; ns per call per thread. */
static run_t run_once(scenario_t sc, int nthreads, uint64_t calls)
{
    worker_t w[MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)nthreads);
    for (int i = 0; i < nthreads; i++) {
        w[i] = (worker_t){.sc = sc, .calls = calls, .start = &start};
        if (pthread_create(&w[i].id, NULL, worker, &w[i]) != 0)
            bench_die("pthread_create failed");
    }
    double per[MAX_THREADS], wall = 0;
    unsigned failed = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(w[i].id, NULL);
        per[i] = w[i].cpu_ns / (double)calls;
        wall += w[i].wall_ns / (double)calls / nthreads;
        failed += w[i].failed;
    }
    pthread_barrier_destroy(&start);
    if (failed)
        bench_die("%s: %u calls did not answer as expected", scenario_names[sc], failed);
    qsort(per, (size_t)nthreads, sizeof per[0], cmp_double);
    return (run_t){.median = per[nthreads / 2], .slowest = per[nthreads - 1], .wall = wall};
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench_submit [-t THREADS,...] [-r RUNS] [-n CALLS] [-s SCENARIO,...]\n"
            "  -t  thread counts (default 1,4,8)\n"
            "  -r  runs of each, the best reported (default 7)\n"
            "  -n  calls per thread per run (default 2000000; the mixed scenario makes 1/%d of them)\n"
            "  -s  scenarios: name, proc, mixed (default name,proc)\n",
            MIXED_DIVISOR);
}

/* A comma-separated list of positive integers into out; the count. */
static int parse_counts(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > MAX_THREADS || (*end && *end != ','))
            return 0;
        out[n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return *s ? 0 : n;
}

static bool parse_scenarios(const char *s, bool *on)
{
    memset(on, 0, SC_COUNT * sizeof *on);
    char buf[128];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < SC_COUNT && strcmp(tok, scenario_names[k]) != 0)
            k++;
        if (k == SC_COUNT)
            return false;
        on[k] = true;
    }
    return true;
}

int main(int argc, char **argv)
{
    int counts[MAX_COUNTS] = {1, 4, 8}, ncounts = 3, runs = 7;
    uint64_t calls = 2000000;
    bool on[SC_COUNT] = {true, true, false};
    int opt;
    while ((opt = getopt(argc, argv, "t:r:n:s:h")) != -1) {
        switch (opt) {
        case 't':
            if (!(ncounts = parse_counts(optarg, counts, MAX_COUNTS)))
                bench_die("-t: thread counts from 1 to %d, separated by commas", MAX_THREADS);
            break;
        case 'r':
            runs = atoi(optarg);
            if (runs < 1 || runs > BENCH_MAX_RUNS)
                bench_die("-r: 1 to %d runs", BENCH_MAX_RUNS);
            break;
        case 'n':
            calls = strtoull(optarg, NULL, 10);
            if (calls < MIXED_DIVISOR)
                bench_die("-n: at least %d calls", MIXED_DIVISOR);
            break;
        case 's':
            if (!parse_scenarios(optarg, on))
                bench_die("-s: scenarios name, proc, mixed, separated by commas");
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (cuInit(0) != CUDA_SUCCESS)
        bench_die("cuInit failed");
    void *p = NULL;
    CUdriverProcAddressQueryResult q;
    if (cuGetProcAddress_v2("cuLaunchKernelEx", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS)
        bench_die("cuGetProcAddress_v2(cuLaunchKernelEx) failed");
    *(void **)&looked_up = p;
    CUdevice dev;
    if (on[SC_MIXED] &&
        (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&primary, dev) != CUDA_SUCCESS))
        bench_die("no primary context for the mixed scenario");

    char model[256];
    bench_cpu_model(model, sizeof model);
    printf("%s, %ld cores online; ns per call per thread: its CPU time over its calls, median over the threads,\n"
           "best of %d runs (median of the runs), the slowest thread of the best run, wall-clock per call\n",
           model, sysconf(_SC_NPROCESSORS_ONLN), runs);
    for (int s = 0; s < SC_COUNT; s++) {
        if (!on[s])
            continue;
        uint64_t n = s == SC_MIXED ? calls / MIXED_DIVISOR : calls;
        for (int c = 0; c < ncounts; c++) {
            bench_series_t med = {.n = 0};
            run_t best = {.median = 1e30};
            for (int r = 0; r < runs; r++) {
                run_t one = run_once((scenario_t)s, counts[c], n);
                med.v[med.n++] = one.median;
                if (one.median < best.median)
                    best = one;
            }
            printf("%-5s %3d threads: %8.2f ns best, %8.2f median, %8.2f slowest thread, %8.2f wall\n",
                   scenario_names[s], counts[c], best.median, bench_series_median(&med), best.slowest, best.wall);
            printf("result %s %d %.3f %.3f %.3f %.3f\n", scenario_names[s], counts[c], best.median,
                   bench_series_median(&med), best.slowest, best.wall);
            fflush(stdout);
        }
    }
    return 0;
}
