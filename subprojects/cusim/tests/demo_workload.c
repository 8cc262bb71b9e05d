/*
 * A small training-loop-like workload for scripts/demo: every iteration
 * allocates activations of varied sizes with cudaMalloc, uploads an input,
 * runs a few "kernels", checks a checksum read back to the host, and frees
 * everything with cudaFree -- the allocation pattern cucache exists to make
 * cheap.  It prints the iterations, bytes allocated, time per iteration, the
 * number of cudaMalloc/cudaFree calls and the time spent in them, and ends
 * with "data verified: OK"; any mismatch exits 1.
 *
 * It runs on the simulated device and on a real GPU alike: it links
 * libcudart.so.13 by SONAME, so LD_LIBRARY_PATH decides which runtime
 * answers.  On the simulated device its kernels are cucacheSimLaunch calls
 * (found with dlsym, so a real driver without them is fine) that really
 * compute on the device bytes; elsewhere they are memsets and device copies.
 *
 * Usage: demo_workload [iterations] (default 20)
 */
#include "cusim/cuda_api.h"
#include "cusim/sim.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { LAYERS = 6, MAX_BYTES = 4 << 20 };

typedef CUresult (*sim_launch_fn)(CUstream, void (*)(void *), void *, const struct cucache_sim_access *, unsigned int);
typedef unsigned long (*sim_count_fn)(void);

struct stats {
    unsigned long mallocs, frees;
    double malloc_s, free_s;
    unsigned long long bytes;
};

struct kernel_arg {
    const unsigned char *src; /* device */
    unsigned char *dst;       /* device */
    size_t n;
    unsigned char add;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cuda_failed(cudaError_t rc, const char *what, int line)
{
    if (rc == cudaSuccess)
        return 0;
    fprintf(stderr, "demo_workload: %s failed at line %d: %s\n", what, line, cudaGetErrorString(rc));
    exit(1);
}
#define CK(call) cuda_failed((call), #call, __LINE__)

/* dst[i] = src[i] + add on the simulated device, whose device bytes are host
 * memory of this process. */
static void kernel_add(void *p)
{
    struct kernel_arg *k = p;
    for (size_t i = 0; i < k->n; i++)
        k->dst[i] = (unsigned char)(k->src[i] + k->add);
}

static void *timed_malloc(size_t n, struct stats *st)
{
    void *p = NULL;
    double t = now_s();
    CK(cudaMalloc(&p, n));
    st->malloc_s += now_s() - t;
    st->mallocs++;
    st->bytes += n;
    return p;
}

static void timed_free(void *p, struct stats *st)
{
    double t = now_s();
    CK(cudaFree(p));
    st->free_s += now_s() - t;
    st->frees++;
}

static size_t layer_bytes(int iter, int layer)
{
    /* varied sizes from 64 KiB to 4 MiB, different every iteration */
    size_t base = (size_t)64 << 10;
    unsigned mix = (unsigned)(iter * 7 + layer * 13) % 64;
    size_t n = base * (1 + mix);
    return n > MAX_BYTES ? MAX_BYTES : n + (size_t)(layer * 256);
}

int main(int argc, char **argv)
{
    int iterations = argc > 1 ? atoi(argv[1]) : 20;
    if (iterations <= 0) {
        fprintf(stderr, "usage: demo_workload [iterations]\n");
        return 2;
    }
    sim_launch_fn sim_launch = NULL;
    sim_count_fn sim_races = NULL;
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    CK(cudaGetDeviceProperties(&prop, 0)); /* initialises, loads the driver */
    if (!drv)
        drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (drv) {
        *(void **)&sim_launch = dlsym(drv, "cucacheSimLaunch");
        *(void **)&sim_races = dlsym(drv, "cucacheSimRaceCount");
    }
    printf("device: %s (%s kernels)\n", prop.name, sim_launch ? "simulated" : "memset/copy");

    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    unsigned char *input = NULL, *output = NULL;
    CK(cudaMallocHost((void **)&input, MAX_BYTES));
    CK(cudaMallocHost((void **)&output, MAX_BYTES));
    struct stats st = {0, 0, 0.0, 0.0, 0};
    struct kernel_arg args[LAYERS];
    int bad = 0;
    double t0 = now_s();

    for (int it = 0; it < iterations && !bad; it++) {
        unsigned char *act[LAYERS];
        size_t n = MAX_BYTES; /* bytes computed on: the smallest layer */
        for (int l = 0; l < LAYERS; l++) {
            act[l] = timed_malloc(layer_bytes(it, l), &st);
            if (layer_bytes(it, l) < n)
                n = layer_bytes(it, l);
        }
        for (size_t i = 0; i < n; i++)
            input[i] = (unsigned char)(i * 31u + (unsigned)it);
        CK(cudaMemcpyAsync(act[0], input, n, cudaMemcpyHostToDevice, s));
        /* layer l+1 = layer l + (l+1), over the first n bytes */
        unsigned expected_add = 0;
        for (int l = 0; l + 1 < LAYERS; l++) {
            if (sim_launch) {
                args[l] = (struct kernel_arg){act[l], act[l + 1], n, (unsigned char)(l + 1)};
                struct cucache_sim_access acc[2] = {{act[l], n, 0}, {act[l + 1], n, 1}};
                if (sim_launch(s, kernel_add, &args[l], acc, 2) != CUDA_SUCCESS) {
                    fprintf(stderr, "demo_workload: cucacheSimLaunch failed\n");
                    return 1;
                }
                expected_add += (unsigned)(l + 1);
            } else {
                CK(cudaMemsetAsync(act[l + 1], 0, layer_bytes(it, l + 1), s));
                CK(cudaMemcpyAsync(act[l + 1], act[l], n, cudaMemcpyDeviceToDevice, s));
            }
        }
        CK(cudaMemcpyAsync(output, act[LAYERS - 1], n, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        uint64_t got = 0, want = 0;
        for (size_t i = 0; i < n; i++) {
            got = got * 1099511628211ull + output[i];
            want = want * 1099511628211ull + (unsigned char)(input[i] + expected_add);
        }
        if (got != want) {
            fprintf(stderr, "demo_workload: iteration %d: checksum %016llx, expected %016llx\n", it,
                    (unsigned long long)got, (unsigned long long)want);
            bad = 1;
        }
        for (int l = 0; l < LAYERS; l++)
            timed_free(act[l], &st);
    }
    double elapsed = now_s() - t0;
    CK(cudaStreamDestroy(s));
    CK(cudaFreeHost(input));
    CK(cudaFreeHost(output));

    printf("iterations: %d\n", iterations);
    printf("bytes allocated: %llu (%.1f MiB)\n", st.bytes, (double)st.bytes / (1 << 20));
    printf("time per iteration: %.3f ms\n", elapsed * 1e3 / iterations);
    printf("cudaMalloc calls: %lu, total %.3f ms (%.2f us each)\n", st.mallocs, st.malloc_s * 1e3,
           st.mallocs ? st.malloc_s * 1e6 / (double)st.mallocs : 0.0);
    printf("cudaFree calls: %lu, total %.3f ms (%.2f us each)\n", st.frees, st.free_s * 1e3,
           st.frees ? st.free_s * 1e6 / (double)st.frees : 0.0);
    if (sim_races) {
        unsigned long races = sim_races();
        printf("race reports: %lu\n", races);
        if (races)
            bad = 1;
    }
    if (bad) {
        printf("data verified: FAILED\n");
        return 1;
    }
    printf("data verified: OK\n");
    return 0;
}
