/*
 * How faithful the simulated device's kernel time is (subprojects/cusim/docs/simulator.md,
 * "Device time"): GPU-bound benchmarks on the simulated device (bench_train)
 * mean something only if a kernel takes the time it was given.  For kernels
 * of several nominal lengths, on one stream:
 *
 *   device   the time between events around a chain of N kernels, divided
 *            by N: the device's own clock (computed ends: exact by design);
 *   host     the wall time from the first launch to cuStreamSynchronize's
 *            return, divided by N: what a program timing a step sees
 *            (the last kernel's end plus the time the worker and the host
 *            take to notice it);
 *   single   one kernel, launch to synchronize: the wake-up cost alone.
 *
 * Run with the simulated libraries (scripts/bench --sim-kernels sets
 * LD_LIBRARY_PATH); CUCACHE_SIM_SPIN_US changes how close to an end the
 * worker spins instead of sleeping (default 100).  Not a test: it prints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cusim/sim.h" /* the simulator's extensions and its CUDA declarations */

#define CHECK(x)                                                                                                       \
    do {                                                                                                               \
        CUresult r_ = (x);                                                                                             \
        if (r_ != CUDA_SUCCESS) {                                                                                      \
            fprintf(stderr, "bench_sim_kernels: %s: error %d\n", #x, (int)r_);                                        \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    static const unsigned lengths[] = {5, 50, 500, 5000};
    enum { RUNS = 7 };
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUevent a, b;
    CHECK(cuEventCreate(&a, 0));
    CHECK(cuEventCreate(&b, 0));
    const char *spin = getenv("CUCACHE_SIM_SPIN_US");
    printf("simulated kernels on one stream, CUCACHE_SIM_SPIN_US=%s; us per kernel, median of %d runs\n\n",
           spin ? spin : "100 (default)", RUNS);
    printf("| nominal | kernels | device (events) | host (launch to sync) | host overshoot | single kernel, launch to "
           "sync |\n|---:|---:|---:|---:|---:|---:|\n");
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
        unsigned us = lengths[l];
        unsigned n = us >= 5000 ? 20 : us >= 500 ? 100 : 1000;
        double dev_us[RUNS], host_us[RUNS], one_us[RUNS];
        for (int r = 0; r < RUNS; r++) {
            CHECK(cuStreamSynchronize(s));
            double t0 = now_us();
            CHECK(cuEventRecord(a, s));
            for (unsigned i = 0; i < n; i++)
                CHECK(cucacheSimLaunchTimed(s, us, NULL, NULL, NULL, 0));
            CHECK(cuEventRecord(b, s));
            CHECK(cuStreamSynchronize(s));
            host_us[r] = (now_us() - t0) / n;
            float ms;
            CHECK(cuEventElapsedTime_v2(&ms, a, b));
            dev_us[r] = (double)ms * 1e3 / n;
            t0 = now_us();
            CHECK(cucacheSimLaunchTimed(s, us, NULL, NULL, NULL, 0));
            CHECK(cuStreamSynchronize(s));
            one_us[r] = now_us() - t0;
        }
        qsort(dev_us, RUNS, sizeof *dev_us, cmp_double);
        qsort(host_us, RUNS, sizeof *host_us, cmp_double);
        qsort(one_us, RUNS, sizeof *one_us, cmp_double);
        printf("| %u | %u | %.3f | %.3f | %+.2f%% | %.1f |\n", us, n, dev_us[RUNS / 2], host_us[RUNS / 2],
               100.0 * (host_us[RUNS / 2] - us) / us, one_us[RUNS / 2]);
    }
    return 0;
}
