/*
 * Runs the planted race of test_race.c (a copy on a non-blocking stream
 * still reading a buffer the legacy stream overwrites; or, with "ordered",
 * the same work ordered by an event) in its own process, for
 * CUCACHE_SIM_RACE_FATAL=1:
 * "planted" must die on abort() at the first report (meson: should_fail),
 * "ordered" must exit 0.  It prints the race count before exiting so
 * test_config can also run it with the detector non-fatal or off.
 *
 * Usage: race_fatal planted|ordered
 */
#include "cusim/cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

enum { N = 1 << 20 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static bool open_gate;

/* Host function holding its stream until main opens the gate. */
static void gate_fn(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    while (!open_gate)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
}

static void gate_open(void)
{
    pthread_mutex_lock(&lock);
    open_gate = true;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static int check(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess)
        fprintf(stderr, "race_fatal: %s failed: %s\n", what, cudaGetErrorName(rc));
    return rc != cudaSuccess;
}

static long race_count(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    unsigned long (*count)(void) = NULL;
    if (h)
        *(void **)&count = dlsym(h, "cucacheSimRaceCount");
    return count ? (long)count() : -1;
}

int main(int argc, char **argv)
{
    bool ordered = argc > 1 && strcmp(argv[1], "ordered") == 0;
    if (argc < 2 || (!ordered && strcmp(argv[1], "planted") != 0)) {
        fprintf(stderr, "usage: race_fatal planted|ordered\n");
        return 2;
    }
    void *x = NULL, *host = NULL;
    cudaStream_t nb = NULL;
    cudaEvent_t ev = NULL;
    if (check(cudaMalloc(&x, N), "cudaMalloc") || check(cudaMallocHost(&host, N), "cudaMallocHost") ||
        check(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags") ||
        check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags"))
        return 1;

    /* a copy on a non-blocking stream, held behind a gate, reads X ... */
    if (check(cudaLaunchHostFunc(nb, gate_fn, NULL), "cudaLaunchHostFunc") ||
        check(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, nb), "cudaMemcpyAsync"))
        return 1;
    if (ordered) {
        if (check(cudaEventRecord(ev, nb), "cudaEventRecord") ||
            check(cudaStreamWaitEvent((cudaStream_t)0, ev, 0), "cudaStreamWaitEvent"))
            return 1;
    }
    /* ... while the legacy stream overwrites X */
    if (check(cudaMemsetAsync(x, 0, N, (cudaStream_t)0), "cudaMemsetAsync"))
        return 1;
    if (!ordered && check(cudaStreamSynchronize((cudaStream_t)0), "cudaStreamSynchronize"))
        return 1;
    gate_open();
    if (check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"))
        return 1;
    printf("races=%ld\n", race_count());
    cudaEventDestroy(ev);
    cudaStreamDestroy(nb);
    cudaFreeHost(host);
    cudaFree(x);
    return 0;
}
