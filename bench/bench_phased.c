/*
 * bench_phased: one of N processes sharing a GPU whose peaks come at
 * different times (scripts/bench-phased runs N of them on one shared
 * simulated device; docs/performance.md, "Sharing a GPU").
 *
 * Time is cut into slots of -m milliseconds from a start time every
 * worker is given (-T, CLOCK_REALTIME in ns): step k runs in slot k.  In
 * each step the worker allocates its working set (a mix of sizes, the
 * table below, -w of the device shared among the N workers), "computes"
 * (sleeps -c ms), and frees it, last allocated first.  In the steps whose
 * number is its rank modulo N it first allocates its peak set (-p of the
 * device, four tensors) and frees it last: the peaks of the N workers
 * come one slot after another, never together, so that their live bytes
 * never exceed w + p of the device while their peaks add up to
 * w + N * p.  The workers know nothing of each other but the clock.
 *
 * A step whose allocation fails (cudaErrorMemoryAllocation) frees what it
 * allocated and is not completed; the next step starts in its own slot.
 * A step that ends after its slot delays the next one (counted as late:
 * its peak may then meet a neighbour's).
 *
 * Prints one line:
 *   result rank=R steps=S completed=C ooms=O late=L step_ms_mean=M step_ms_p99=P
 * step times are those of the completed steps, from the slot's start (or
 * the previous step's end, when late) to the last free.
 *
 * A plain CUDA program: linked against libcudart.so.13 by SONAME like
 * bench_preload, run with or without LD_PRELOAD=libcucache.so.
 */
#include "cusim/cuda_api.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

const char bench_prog[] = "bench_phased";

/* The working set: one row per kind of tensor, its share of the working
 * set's bytes and how many there are; sizes vary by up to +-25% around
 * their mean (a fixed sequence), rounded to 512 bytes. */
static const struct {
    double share;
    unsigned count;
} working_mix[] = {
    {0.40, 4},   /* activations of the big layers */
    {0.30, 8},   /* weights and gradients */
    {0.20, 32},  /* medium buffers */
    {0.10, 128}, /* small tensors: biases, norms, optimizer scalars */
};
#define PEAK_TENSORS 4 /* the peak set: equal parts */
#define MAX_TENSORS 176

typedef struct opts_s {
    int rank, nproc, steps;
    double slot_ms, compute_ms, work_frac, peak_frac;
    int64_t start_ns; /* CLOCK_REALTIME of step 0's slot */
} opts_t;

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_until(int64_t t_ns)
{
    struct timespec ts = {.tv_sec = t_ns / 1000000000, .tv_nsec = t_ns % 1000000000};
    while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_phased -r RANK -n NPROC -T START_NS [-s STEPS] [-m SLOT_MS] [-c COMPUTE_MS]\n"
                    "                    [-w WORK_FRACTION] [-p PEAK_FRACTION]\n");
    exit(2);
}

static void parse(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.rank = -1, .steps = 48, .slot_ms = 120, .compute_ms = 30, .work_frac = 0.3, .peak_frac = 0.5};
    int c;
    bool have_start = false;
    while ((c = getopt(argc, argv, "r:n:T:s:m:c:w:p:h")) != -1) {
        switch (c) {
        case 'r':
            o->rank = (int)bench_number("-r", optarg, 0, 255);
            break;
        case 'n':
            o->nproc = (int)bench_number("-n", optarg, 1, 256);
            break;
        case 'T':
            o->start_ns = (int64_t)bench_number("-T", optarg, 0, 9e18), have_start = true;
            break;
        case 's':
            o->steps = (int)bench_number("-s", optarg, 1, 100000);
            break;
        case 'm':
            o->slot_ms = bench_number("-m", optarg, 1, 60000);
            break;
        case 'c':
            o->compute_ms = bench_number("-c", optarg, 0, 60000);
            break;
        case 'w':
            o->work_frac = bench_number("-w", optarg, 0, 1);
            break;
        case 'p':
            o->peak_frac = bench_number("-p", optarg, 0, 1);
            break;
        default:
            usage();
        }
    }
    if (optind != argc || o->rank < 0 || !o->nproc || !have_start)
        usage();
    if (o->rank >= o->nproc)
        bench_die("-r %d: the rank must be below -n %d", o->rank, o->nproc);
}

/* The sizes of the working set (each worker's share of work_frac of the
 * device) and of the peak set, into sizes; returns the count of the
 * working set's (the peak set's PEAK_TENSORS follow). */
static unsigned plan(const opts_t *o, size_t total, size_t *sizes)
{
    double work = o->work_frac * (double)total / o->nproc;
    unsigned n = 0, j = 0;
    for (size_t r = 0; r < sizeof working_mix / sizeof working_mix[0]; r++)
        for (unsigned i = 0; i < working_mix[r].count; i++, j++) {
            double mean = working_mix[r].share * work / working_mix[r].count;
            double jitter = 0.75 + 0.5 * ((double)((j * 2654435761u) % 1000) / 1000.0);
            size_t s = (size_t)(mean * jitter) / 512 * 512;
            sizes[n++] = s ? s : 512;
        }
    for (unsigned i = 0; i < PEAK_TENSORS; i++)
        sizes[n + i] = (size_t)(o->peak_frac * (double)total / PEAK_TENSORS) / 512 * 512;
    return n;
}

/* Allocates sizes[from..to) into ptrs; the index of the first that failed
 * with cudaErrorMemoryAllocation, or `to` when all succeeded. */
static unsigned alloc_range(void **ptrs, const size_t *sizes, unsigned from, unsigned to)
{
    for (unsigned i = from; i < to; i++) {
        cudaError_t rc = cudaMalloc(&ptrs[i], sizes[i]);
        if (rc == cudaErrorMemoryAllocation) {
            cudaGetLastError(); /* clear it, as a program catching an OOM does */
            ptrs[i] = NULL;
            return i;
        }
        if (rc != cudaSuccess)
            bench_die("cudaMalloc(%zu bytes) failed: %s", sizes[i], cudaGetErrorString(rc));
    }
    return to;
}

static void free_range(void **ptrs, unsigned from, unsigned to)
{
    for (unsigned i = to; i-- > from;)
        if (ptrs[i]) {
            cudaError_t rc = cudaFree(ptrs[i]);
            if (rc != cudaSuccess)
                bench_die("cudaFree failed: %s", cudaGetErrorString(rc));
            ptrs[i] = NULL;
        }
}

int main(int argc, char **argv)
{
    opts_t o;
    parse(argc, argv, &o);
    size_t free_b = 0, total = 0;
    cudaError_t rc = cudaMemGetInfo(&free_b, &total);
    if (rc != cudaSuccess)
        bench_die("cudaMemGetInfo failed: %s", cudaGetErrorString(rc));
    size_t sizes[MAX_TENSORS + PEAK_TENSORS];
    void *ptrs[MAX_TENSORS + PEAK_TENSORS] = {0};
    unsigned nwork = plan(&o, total, sizes), nall = nwork + PEAK_TENSORS;
    double *step_ms = calloc((size_t)o.steps, sizeof *step_ms);
    if (!step_ms)
        bench_die("out of host memory");
    if (realtime_ns() > o.start_ns)
        fprintf(stderr, "bench_phased: rank %d started %.0f ms after the start time: its first steps are late\n",
                o.rank, (double)(realtime_ns() - o.start_ns) / 1e6);

    int64_t slot_ns = (int64_t)(o.slot_ms * 1e6), prev_end = 0;
    unsigned completed = 0, ooms = 0, late = 0;
    for (int k = 0; k < o.steps; k++) {
        int64_t begin = o.start_ns + k * slot_ns;
        if (prev_end > begin) {
            late++;
            begin = prev_end;
        } else {
            sleep_until(begin);
        }
        bool peak = k % o.nproc == o.rank;
        /* the peak set first (held through the step), then the working set */
        unsigned failed = nall;
        if (peak && alloc_range(ptrs, sizes, nwork, nall) != nall)
            failed = 0;
        if (failed == nall && alloc_range(ptrs, sizes, 0, nwork) != nwork)
            failed = 0;
        if (failed == nall && o.compute_ms > 0)
            usleep((useconds_t)(o.compute_ms * 1000));
        free_range(ptrs, 0, nwork);
        free_range(ptrs, nwork, nall);
        prev_end = realtime_ns();
        if (failed == nall)
            step_ms[completed++] = (double)(prev_end - begin) / 1e6;
        else
            ooms++;
    }
    double sum = 0;
    for (unsigned i = 0; i < completed; i++)
        sum += step_ms[i];
    printf("result rank=%d steps=%d completed=%u ooms=%u late=%u step_ms_mean=%.2f step_ms_p99=%.2f\n", o.rank, o.steps,
           completed, ooms, late, completed ? sum / completed : 0.0, bench_quantile(step_ms, completed, 0.99));
    free(step_ms);
    return 0;
}
