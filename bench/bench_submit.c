/*
 * What counting a submission costs a launch (interpose/submit.c: the count
 * that lets a plain free skip its fence when nothing was submitted since
 * the block was handed out):
 * calls cuLaunchKernelEx with no configuration, which the simulated driver
 * refuses at once (CUDA_ERROR_INVALID_VALUE) before taking any lock, so a
 * call is little more than the jump to it.  Run plain and with
 * LD_PRELOAD=libcucache.so (the call then goes through cucache's counting
 * trampoline): the difference per call is the trampoline.  Also through the
 * address cuGetProcAddress gives.  Prints ns per call, best of 7 runs of
 * 10^7 calls.  Not a test.
 */
#include <stdio.h>
#include <time.h>

#include "cucache/cuda_api.h"

typedef CUresult launch_ex_fn(const CUlaunchConfig *, CUfunction, void **, void **);

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static double best_ns(launch_ex_fn *fn)
{
    enum { N = 10000000 };
    double best = 1e30;
    for (int r = 0; r < 7; r++) {
        double t0 = now_ns();
        unsigned bad = 0;
        for (int i = 0; i < N; i++)
            bad += fn(NULL, NULL, NULL, NULL) != CUDA_SUCCESS;
        double ns = (now_ns() - t0) / N;
        if (bad != N)
            fprintf(stderr, "bench_submit: a call succeeded\n");
        best = ns < best ? ns : best;
    }
    return best;
}

int main(void)
{
    if (cuInit(0) != CUDA_SUCCESS)
        return 1;
    void *p = NULL;
    CUdriverProcAddressQueryResult q;
    if (cuGetProcAddress_v2("cuLaunchKernelEx", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS)
        return 1;
    launch_ex_fn *looked_up;
    *(void **)&looked_up = p;
    printf("cuLaunchKernelEx by name: %.2f ns per call\n", best_ns(cuLaunchKernelEx));
    printf("cuLaunchKernelEx through cuGetProcAddress: %.2f ns per call\n", best_ns(looked_up));
    return 0;
}
