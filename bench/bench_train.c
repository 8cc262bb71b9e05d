/*
 * A GPU-bound training step on the simulated device, to compare the reuse
 * rules where the device, not the allocator, is the bottleneck: each
 * shared trace's allocation and free sequence (bench/sizes_<trace>.txt),
 * with a timed kernel writing every block right after it is allocated, on
 * one stream or spread over several, and one cudaDeviceSynchronize at the
 * end of each step.  The kernels are long enough that the device is the
 * bottleneck: the host runs ahead until the step's synchronisation, as in
 * a real training loop.
 *
 *   bench_train [-t TRACE] [-S STREAMS] [-k KERNEL_US] [-n STEPS] [-a] [-c COMM_US] [-x EVERY]
 *   bench_train -L ROUNDS [-B MIB] [-k KERNEL_US]
 *
 * -c adds a communication stream, as data-parallel training has: after
 * every 16th allocation it waits for the compute stream's work so far (an
 * event) and runs a kernel of COMM_US on a buffer of its own, which the
 * compute streams never wait for; its work overlaps theirs, and a step
 * ends when both are done.
 *
 * -S 0 runs the kernels on the legacy default stream: the program creates
 * no stream of its own.
 *
 * -x EVERY (with two streams or more) makes every EVERY-th block cross
 * streams: after its kernel writes it on its stream, the next stream waits
 * for that write (an event) and runs a kernel of KERNEL_US reading it.  The block is then
 * freed while that reader may still be queued: cudaFree orders itself
 * against every stream's work; with -a it is freed with cudaFreeAsync on
 * the reader's stream, its last user (the block's own stream does not wait
 * for the reader).  A rule that reuses a block on its own stream alone
 * races with the reader here.
 *
 * -L ROUNDS runs the cross-stream loop instead of a trace: a block of
 * -B MiB (default 400) allocated with cudaMallocAsync on one stream,
 * written there, read on a second stream (which waits for the write) and
 * freed there with cudaFreeAsync, then allocated again on the first, ROUNDS
 * times, each kernel KERNEL_US long.  Prints
 *
 *   result loop ROUNDS time_ms=MS device_ms=MS fence_waits=N fence_wait_ms=MS peak_reserved=BYTES races=N
 *
 * (fence_waits: cucache's num_fence_waits, the host's waits for frees; -1
 * without cucache).
 *
 * -a allocates with cudaMallocAsync/cudaFreeAsync on the block's stream
 * instead of cudaMalloc/cudaFree.  Run it plain (CUDA without a cache:
 * the simulator's allocation costs) or under cucache-run --sim with the
 * setting to compare (scripts/bench-train runs them all side by side).
 * Prints one line:
 *
 *   result TRACE STREAMS[x] MODE step_ms=MEDIAN (MIN-MAX) peak_reserved=BYTES races=N device_ms=MEDIAN (MIN-MAX)
 *
 * device_ms is the step in the simulator's device time (events timed from
 * the step's start to each stream's last work): unlike step_ms, it does
 * not move with a busy host as long as the host runs ahead of the device.
 * peak_reserved is cucache's reserved_bytes.all.peak when cucache is in
 * the process, else the most device memory in use seen through
 * cudaMemGetInfo after each allocation.  races is what the simulator's
 * race detector reported: a reuse that let a kernel write a block another
 * kernel still used.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "cusim/sim.h" /* the simulator's extensions and its CUDA declarations */

#define MAX_STREAMS 8

const char bench_prog[] = "bench_train";

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

#define CHECK(x)                                                                                                       \
    do {                                                                                                               \
        int e_ = (int)(x);                                                                                             \
        if (e_ != 0)                                                                                                   \
            bench_die("%s: error %d", #x, e_);                                                                         \
    } while (0)

/* Frees p: with cudaFreeAsync on s, the stream of its last user, or with
 * cudaFree, which orders itself against every stream. */
static void free_block(void *p, bool async, cudaStream_t s)
{
    if (async)
        CHECK(cudaFreeAsync(p, s));
    else
        CHECK(cudaFree(p));
}

typedef int (*stat_fn)(int, const char *, int64_t *);

/* cucache's statistic `key` on device 0, or -1 without cucache. */
static int64_t stat_or(stat_fn stat, const char *key)
{
    int64_t v = -1;
    if (!stat || stat(0, key, &v) != 0)
        v = -1;
    return v;
}

/* The cross-stream loop (-L): allocated on a, read and freed on b,
 * allocated again on a. */
static void cross_loop(unsigned rounds, size_t bytes, unsigned kernel_us, stat_fn stat)
{
    cudaStream_t a, b;
    cudaEvent_t written;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
    size_t free0 = 0, total = 0, peak_used = 0;
    CHECK(cudaMemGetInfo(&free0, &total));
    cudaEvent_t t_start, t_end[2];
    CHECK(cudaEventCreate(&t_start));
    CHECK(cudaEventCreate(&t_end[0]));
    CHECK(cudaEventCreate(&t_end[1]));
    double t0 = now_ms();
    CHECK(cudaEventRecord(t_start, a));
    for (unsigned i = 0; i < rounds; i++) {
        void *p = NULL;
        CHECK(cudaMallocAsync(&p, bytes, a));
        struct cucache_sim_access w = {p, bytes, 1}, r = {p, bytes, 0};
        CHECK(cucacheSimLaunchTimed((CUstream)a, kernel_us, NULL, NULL, &w, 1));
        CHECK(cudaEventRecord(written, a));
        CHECK(cudaStreamWaitEvent(b, written, 0));
        CHECK(cucacheSimLaunchTimed((CUstream)b, kernel_us, NULL, NULL, &r, 1));
        CHECK(cudaFreeAsync(p, b));
        size_t f = 0, tot = 0;
        if (!stat)
            CHECK(cudaMemGetInfo(&f, &tot));
        if (!stat && f <= free0 && free0 - f > peak_used)
            peak_used = free0 - f;
    }
    CHECK(cudaEventRecord(t_end[0], a));
    CHECK(cudaEventRecord(t_end[1], b));
    CHECK(cudaDeviceSynchronize());
    double ms = now_ms() - t0;
    float dev_ms = 0, e1 = 0;
    CHECK(cudaEventElapsedTime(&dev_ms, t_start, t_end[0]));
    CHECK(cudaEventElapsedTime(&e1, t_start, t_end[1]));
    if (e1 > dev_ms)
        dev_ms = e1;
    int64_t peak = stat ? stat_or(stat, "reserved_bytes.all.peak") : (int64_t)peak_used;
    int64_t waits = stat_or(stat, "num_fence_waits"), wait_ns = stat_or(stat, "fence_wait_ns");
    printf("result loop %u time_ms=%.1f device_ms=%.1f fence_waits=%lld fence_wait_ms=%.1f peak_reserved=%lld races=%lu\n",
           rounds, ms, (double)dev_ms, (long long)waits, wait_ns < 0 ? -1.0 : (double)wait_ns / 1e6, (long long)peak,
           cucacheSimRaceCount());
    CHECK(cudaEventDestroy(t_start));
    CHECK(cudaEventDestroy(t_end[0]));
    CHECK(cudaEventDestroy(t_end[1]));
    CHECK(cudaEventDestroy(written));
    CHECK(cudaStreamDestroy(a));
    CHECK(cudaStreamDestroy(b));
}

int main(int argc, char **argv)
{
    const char *trace = "bcrafton_cs336";
    int nstreams = 1, steps = 5;
    unsigned kernel_us = 50;
    bool async = false;
    unsigned comm_us = 0;
    unsigned cross = 0; /* -x: every cross-th block is read on the next stream */
    unsigned loop = 0;  /* -L: the cross-stream loop's rounds */
    size_t loop_mib = 400;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-t") == 0 && i + 1 < argc)
            trace = argv[++i];
        else if (strcmp(argv[i], "-S") == 0 && i + 1 < argc)
            nstreams = atoi(argv[++i]);
        else if (strcmp(argv[i], "-k") == 0 && i + 1 < argc)
            kernel_us = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "-a") == 0)
            async = true;
        else if (strcmp(argv[i], "-c") == 0 && i + 1 < argc)
            comm_us = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "-x") == 0 && i + 1 < argc)
            cross = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "-L") == 0 && i + 1 < argc)
            loop = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "-B") == 0 && i + 1 < argc)
            loop_mib = (size_t)atoi(argv[++i]);
        else
            bench_die("usage: bench_train [-t TRACE] [-S STREAMS] [-k KERNEL_US] [-n STEPS] [-a] [-c COMM_US] [-x EVERY]"
                      " | -L ROUNDS [-B MIB] [-k KERNEL_US]");
    }
    if (loop) {
        if (loop_mib == 0)
            bench_die("-B needs 1 MiB or more");
        cross_loop(loop, loop_mib << 20, kernel_us, (stat_fn)dlsym(RTLD_DEFAULT, "cucache_stat"));
        return 0;
    }
    if (nstreams < 0 || nstreams > MAX_STREAMS || steps < 2)
        bench_die("-S 0..%d and -n 2 or more", MAX_STREAMS);
    if (cross && nstreams < 2)
        bench_die("-x needs -S 2 or more");
    /* -S 0: the legacy default stream, no stream of the program's own */
    bool legacy = nstreams == 0;
    if (legacy)
        nstreams = 1;
    char path[512];
    snprintf(path, sizeof path, "%s/sizes_%s.txt", BENCH_SIZES_DIR, trace);
    bench_trace_t t;
    if (!bench_trace_load(&t, path, trace))
        bench_die("cannot read %s", path);
    int (*stat)(int, const char *, int64_t *) =
        (int (*)(int, const char *, int64_t *))dlsym(RTLD_DEFAULT, "cucache_stat");

    cudaStream_t s[MAX_STREAMS];
    for (int i = 0; i < nstreams; i++) {
        s[i] = NULL;
        if (!legacy)
            CHECK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    }
    cudaStream_t comm = NULL;
    cudaEvent_t ready = NULL;
    void *comm_buf = NULL;
    const size_t comm_bytes = 1 << 20;
    if (comm_us) {
        CHECK(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
        CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
        CHECK(cudaMalloc(&comm_buf, comm_bytes));
    }
    /* -x: the write a reader on the next stream waits for */
    cudaEvent_t written = NULL;
    if (cross)
        CHECK(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
    int *on = calloc(t.nalloc, sizeof *on);
    size_t *bytes = calloc(t.nalloc, sizeof *bytes);
    double *step_ms = calloc((size_t)steps, sizeof *step_ms);
    double *dev_ms = calloc((size_t)steps, sizeof *dev_ms);
    if (!on || !bytes || !step_ms || !dev_ms)
        bench_die("out of memory");
    size_t free0 = 0, total = 0, peak_used = 0;
    CHECK(cudaMemGetInfo(&free0, &total));
    /* device time: the step's start, and each stream's end (comm's last) */
    cudaEvent_t t_start, t_end[MAX_STREAMS + 1];
    CHECK(cudaEventCreate(&t_start));
    for (int i = 0; i <= nstreams; i++)
        CHECK(cudaEventCreate(&t_end[i]));
    for (int step = 0; step < steps; step++) {
        double t0 = now_ms();
        CHECK(cudaEventRecord(t_start, s[0]));
        size_t k = 0;
        for (size_t i = 0; i < t.nops; i++) {
            int64_t op = t.ops[i];
            if (op > 0) {
                int si = (int)(k % (size_t)nstreams);
                void *p = NULL;
                if (async)
                    CHECK(cudaMallocAsync(&p, (size_t)op, s[si]));
                else
                    CHECK(cudaMalloc(&p, (size_t)op));
                t.live[k] = p;
                on[k] = si;
                bytes[k] = (size_t)op;
                struct cucache_sim_access w = {p, (size_t)op, 1};
                CHECK(cucacheSimLaunchTimed((CUstream)s[si], kernel_us, NULL, NULL, &w, 1));
                if (cross && k % cross == 0) {
                    int ri = (si + 1) % nstreams;
                    struct cucache_sim_access r = {p, (size_t)op, 0};
                    CHECK(cudaEventRecord(written, s[si]));
                    CHECK(cudaStreamWaitEvent(s[ri], written, 0));
                    CHECK(cucacheSimLaunchTimed((CUstream)s[ri], kernel_us, NULL, NULL, &r, 1));
                    on[k] = ri; /* its last user in stream order */
                }
                if (comm_us && k % 16 == 15) {
                    struct cucache_sim_access c = {comm_buf, comm_bytes, 1};
                    CHECK(cudaEventRecord(ready, s[si]));
                    CHECK(cudaStreamWaitEvent(comm, ready, 0));
                    CHECK(cucacheSimLaunchTimed((CUstream)comm, comm_us, NULL, NULL, &c, 1));
                }
                if (!stat) {
                    size_t f = 0, tot = 0;
                    CHECK(cudaMemGetInfo(&f, &tot));
                    if (free0 - f > peak_used && f <= free0)
                        peak_used = free0 - f;
                }
                k++;
            } else {
                size_t j = (size_t)(-op);
                if (!t.live[j])
                    continue;
                free_block(t.live[j], async, s[on[j]]);
                t.live[j] = NULL;
            }
        }
        /* what the trace keeps live is freed at the step's end, as a
         * training step's activations are */
        for (size_t j = 0; j < k; j++)
            if (t.live[j]) {
                free_block(t.live[j], async, s[on[j]]);
                t.live[j] = NULL;
            }
        for (int i = 0; i < nstreams; i++)
            CHECK(cudaEventRecord(t_end[i], s[i]));
        CHECK(cudaEventRecord(t_end[nstreams], comm_us ? comm : s[0]));
        CHECK(cudaDeviceSynchronize());
        step_ms[step] = now_ms() - t0;
        for (int i = 0; i <= nstreams; i++) {
            float ms = 0;
            CHECK(cudaEventElapsedTime(&ms, t_start, t_end[i]));
            if (ms > dev_ms[step])
                dev_ms[step] = ms;
        }
    }
    CHECK(cudaEventDestroy(t_start));
    for (int i = 0; i <= nstreams; i++)
        CHECK(cudaEventDestroy(t_end[i]));
    bench_series_t ser = {0};
    for (int i = 1; i < steps && ser.n < BENCH_MAX_RUNS; i++) /* the first step warms the cache up */
        ser.v[ser.n++] = step_ms[i];
    char fmt[96], dev_fmt[96];
    bench_series_fmt(fmt, sizeof fmt, &ser);
    bench_series_t dev = {0};
    for (int i = 1; i < steps && dev.n < BENCH_MAX_RUNS; i++)
        dev.v[dev.n++] = dev_ms[i];
    bench_series_fmt(dev_fmt, sizeof dev_fmt, &dev);
    int64_t peak = (int64_t)peak_used;
    if (stat && stat(0, "reserved_bytes.all.peak", &peak) != 0)
        peak = -1;
    const char *mode = async ? "async" : "plain";
    if (cross)
        CHECK(cudaEventDestroy(written));
    if (comm_us) {
        CHECK(cudaFree(comm_buf));
        CHECK(cudaEventDestroy(ready));
        CHECK(cudaStreamDestroy(comm));
    }
    if (legacy)
        nstreams = 0;
    printf("result %s %d%s %s step_ms=%s peak_reserved=%lld races=%lu device_ms=%s\n", trace, nstreams, cross ? "x" : "",
           mode, fmt, (long long)peak, cucacheSimRaceCount(), dev_fmt);
    return 0;
}
