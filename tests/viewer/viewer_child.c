/*
 * A CUDA program whose snapshots scripts/check-viewer opens in PyTorch's
 * memory viewer: allocations of several sizes from named functions (so that
 * a block's stack names its call site), on the default stream and a
 * stream of its own, some freed and some left live, on every device the
 * runtime reports.
 *
 *   viewer_child steps [N]      N training-like steps (default 20) on every
 *                               device, then exit with memory still live
 *   viewer_child pools          the same steps, half of them with the
 *                               thread's allocations in a private pool
 *                               (cucache_pool_create/use, found with dlsym)
 *   viewer_child signal FILE    the steps, then SIGUSR1 to itself; waits
 *                               (at most 20 s) for FILE to appear, then
 *                               a 64 MiB weight (a new segment) and a few
 *                               more steps
 *   viewer_child churn N        N allocate-and-free pairs of one size (3
 *                               events each in a snapshot's trace)
 *   viewer_child oom            the steps, then a request larger than the
 *                               device (fails; exit 0 when it did)
 *
 * Exit 0 when every call that should succeed did, 1 otherwise, 2 for a bad
 * command line or (pools) a missing cucache API.
 */
#include "cusim/cuda_api.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static int failures;

#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        cudaError_t rc_ = (call);                                                                                      \
        if (rc_ != cudaSuccess) {                                                                                      \
            fprintf(stderr, "viewer_child: %s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)rc_);                   \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

/* Weights: kept for the whole run. */
__attribute__((noinline)) static void *load_weights(size_t bytes)
{
    void *p = NULL;
    CHECK(cudaMalloc(&p, bytes));
    return p;
}

/* Activations: a few sizes, freed at the end of the step. */
__attribute__((noinline)) static void *forward_activation(size_t bytes)
{
    void *p = NULL;
    CHECK(cudaMalloc(&p, bytes));
    return p;
}

/* Gradients: stream-ordered on the step's own stream. */
__attribute__((noinline)) static void *backward_gradient(size_t bytes, cudaStream_t s)
{
    void *p = NULL;
    CHECK(cudaMallocAsync(&p, bytes, s));
    return p;
}

/* Small scratch buffers, from the small pool. */
__attribute__((noinline)) static void *scratch(size_t bytes)
{
    void *p = NULL;
    CHECK(cudaMalloc(&p, bytes));
    return p;
}

typedef int (*pool_create_fn)(int);
typedef int (*pool_use_fn)(int, int);

/* One step on the current device: activations grow and shrink, gradients
 * come and go on the stream, a scratch buffer of every tenth step is kept. */
static void step(int i, cudaStream_t s)
{
    void *act[4], *grad[2];
    for (int k = 0; k < 4; k++)
        act[k] = forward_activation((size_t)(2 + (i + k) % 5) * MIB + (size_t)k * 4096);
    for (int k = 0; k < 2; k++)
        grad[k] = backward_gradient((size_t)(1 + k) * 3 * MIB, s);
    void *tmp = scratch(4096u << (i % 6));
    for (int k = 0; k < 2; k++)
        CHECK(cudaFreeAsync(grad[k], s));
    for (int k = 3; k >= 0; k--)
        CHECK(cudaFree(act[k]));
    if (i % 10 != 0)
        CHECK(cudaFree(tmp));
}

static int run_steps(int steps, bool pools)
{
    int devices = 0;
    CHECK(cudaGetDeviceCount(&devices));
    pool_create_fn create = NULL;
    pool_use_fn use = NULL;
    if (pools) {
        create = (pool_create_fn)dlsym(RTLD_DEFAULT, "cucache_pool_create");
        use = (pool_use_fn)dlsym(RTLD_DEFAULT, "cucache_pool_use");
        if (!create || !use) {
            fprintf(stderr, "viewer_child: pools need cucache's API (run it under cucache)\n");
            exit(2);
        }
    }
    for (int d = 0; d < devices; d++) {
        CHECK(cudaSetDevice(d));
        cudaStream_t s = NULL;
        CHECK(cudaStreamCreate(&s));
        (void)load_weights((size_t)(16 + 8 * d) * MIB);
        int pool = pools ? create(d) : 0;
        for (int i = 0; i < steps; i++) {
            if (pools && i == steps / 2 && use(d, pool) != 0)
                failures++;
            step(i, s);
        }
        if (pools && use(d, 0) != 0)
            failures++;
        CHECK(cudaStreamSynchronize(s));
    }
    return failures;
}

__attribute__((noinline)) static void churn(long n)
{
    for (long i = 0; i < n; i++) {
        void *p = NULL;
        CHECK(cudaMalloc(&p, MIB));
        CHECK(cudaFree(p));
    }
}

static int wait_for(const char *file)
{
    struct timespec tick = {0, 20 * 1000 * 1000};
    for (int i = 0; i < 1000; i++) {
        if (access(file, F_OK) == 0)
            return 0;
        nanosleep(&tick, NULL);
    }
    fprintf(stderr, "viewer_child: %s did not appear within 20 s of SIGUSR1\n", file);
    return 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "steps") == 0)
        return run_steps(argc > 2 ? atoi(argv[2]) : 20, false) != 0;
    if (strcmp(mode, "pools") == 0)
        return run_steps(20, true) != 0;
    if (strcmp(mode, "signal") == 0 && argc == 3) {
        run_steps(20, false);
        raise(SIGUSR1);
        int rc = wait_for(argv[2]);
        /* a segment no cached block can serve: the exit snapshot has a
         * segment the first one lacks, whatever the cache kept */
        (void)load_weights(64 * MIB);
        run_steps(5, false);
        return (rc | failures) != 0;
    }
    if (strcmp(mode, "churn") == 0 && argc == 3) {
        churn(atol(argv[2]));
        return failures != 0;
    }
    if (strcmp(mode, "oom") == 0) {
        run_steps(20, false);
        void *p = NULL;
        cudaError_t rc = cudaMalloc(&p, (size_t)1 << 50);
        return (rc == cudaSuccess || failures) ? 1 : 0;
    }
    fprintf(stderr, "usage: viewer_child steps [N] | pools | signal FILE | churn N | oom\n");
    return 2;
}
