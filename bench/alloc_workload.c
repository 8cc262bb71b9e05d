/*
 * alloc_workload: the allocation pattern of a training step whose framework
 * does not cache (PYTORCH_NO_CUDA_MEMORY_CACHING=1): every iteration
 * allocates a set of tensors of varied sizes with cudaMalloc, writes each on
 * a stream, reads a few bytes of each back to check them, and frees them all
 * with cudaFree.  The device work is kept small (a 4 KiB memset and a
 * 16-byte copy per tensor), so the wall time is mostly allocation: the cost
 * cucache removes.  scripts/demo runs it plain and under cucache-run and
 * compares the two.  (The simulator's demo_workload does more device work per
 * allocation, so there the difference hides behind its kernels.)
 *
 * It links libcudart.so.13 by SONAME with no rpath: LD_LIBRARY_PATH picks
 * the simulated runtime or a real one.  It prints what it did, the time
 * spent in cudaMalloc/cudaFree, the device allocations the simulated driver
 * served (when it is the simulator), whether cucache was loaded and how many
 * of its allocations were cache hits, and ends with "data verified: OK"; a
 * wrong byte exits 1.
 *
 * Usage: alloc_workload [iterations [tensors]]   (defaults 100 and 16)
 */
#include "cucache/cucache.h"
#include "cusim/sim.h" /* the simulator's extensions and its CUDA declarations */

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    MAX_TENSORS = 256,
    WRITE_BYTES = 4 << 10, /* bytes memset per tensor (at most its size) */
    PROBE_BYTES = 16,      /* bytes read back per tensor, from its end */
};

typedef struct timing_s {
    unsigned long mallocs, frees;
    double malloc_s, free_s;
    unsigned long long bytes;
} timing_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void check(cudaError_t rc, const char *what, int line)
{
    if (rc == cudaSuccess)
        return;
    fprintf(stderr, "alloc_workload: %s failed at line %d: %s\n", what, line, cudaGetErrorString(rc));
    exit(1);
}
#define CK(call) check((call), #call, __LINE__)

/* Tensor l of iteration it: 4 KiB to 8 MiB, spread over the powers of two
 * and different from one iteration to the next (odd sizes included), like
 * the activations of layers of varied width. */
static size_t tensor_bytes(int it, int l)
{
    unsigned mix = (unsigned)(it * 7 + l * 13) % 97;
    size_t base = (size_t)4096 << (mix % 12); /* 4 KiB .. 8 MiB */
    return base + (size_t)(mix % 5) * 1000;
}

static unsigned char tensor_value(int it, int l)
{
    return (unsigned char)(it * 31 + l * 7 + 1);
}

int main(int argc, char **argv)
{
    int iterations = argc > 1 ? atoi(argv[1]) : 100;
    int tensors = argc > 2 ? atoi(argv[2]) : 16;
    if (argc > 3 || iterations <= 0 || tensors <= 0 || tensors > MAX_TENSORS) {
        fprintf(stderr, "usage: alloc_workload [iterations [tensors (1-%d)]]\n", MAX_TENSORS);
        return 2;
    }

    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    CK(cudaGetDeviceProperties(&prop, 0)); /* initialises, loads the driver */
    unsigned long (*sim_allocs)(void) = NULL;
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (drv)
        *(void **)&sim_allocs = dlsym(drv, "cucacheSimDeviceAllocs");
    __typeof__(cucache_stat) *get_stat = NULL; /* present when cucache is loaded */
    *(void **)&get_stat = dlsym(RTLD_DEFAULT, "cucache_stat");
    printf("device: %s\n", prop.name);

    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    unsigned char *host = NULL;
    CK(cudaMallocHost((void **)&host, (size_t)MAX_TENSORS * PROBE_BYTES));
    unsigned long dev_allocs0 = sim_allocs ? sim_allocs() : 0;
    timing_t tm = {0, 0, 0.0, 0.0, 0};
    void *t[MAX_TENSORS];
    int bad = 0;
    double t0 = now_s();

    for (int it = 0; it < iterations && !bad; it++) {
        for (int l = 0; l < tensors; l++) {
            size_t n = tensor_bytes(it, l);
            double a = now_s();
            CK(cudaMalloc(&t[l], n));
            tm.malloc_s += now_s() - a;
            tm.mallocs++;
            tm.bytes += n;
        }
        for (int l = 0; l < tensors; l++) {
            size_t n = tensor_bytes(it, l), w = n < WRITE_BYTES ? n : WRITE_BYTES;
            /* the last bytes written, read back: they must be this iteration's */
            CK(cudaMemsetAsync(t[l], tensor_value(it, l), w, s));
            CK(cudaMemcpyAsync(host + (size_t)l * PROBE_BYTES, (unsigned char *)t[l] + w - PROBE_BYTES, PROBE_BYTES,
                               cudaMemcpyDeviceToHost, s));
        }
        CK(cudaStreamSynchronize(s));
        for (int l = 0; l < tensors && !bad; l++)
            for (int k = 0; k < PROBE_BYTES; k++)
                if (host[l * PROBE_BYTES + k] != tensor_value(it, l)) {
                    fprintf(stderr, "alloc_workload: iteration %d, tensor %d: read %u, wrote %u\n", it, l,
                            host[l * PROBE_BYTES + k], tensor_value(it, l));
                    bad = 1;
                    break;
                }
        for (int l = 0; l < tensors; l++) {
            double a = now_s();
            CK(cudaFree(t[l]));
            tm.free_s += now_s() - a;
            tm.frees++;
        }
    }
    double elapsed = now_s() - t0;
    unsigned long dev_allocs = sim_allocs ? sim_allocs() - dev_allocs0 : 0;
    CK(cudaStreamDestroy(s));
    CK(cudaFreeHost(host));

    printf("iterations: %d, %d tensors each (4 KiB to 8 MiB)\n", iterations, tensors);
    printf("bytes allocated: %llu (%.1f MiB)\n", tm.bytes, (double)tm.bytes / (1 << 20));
    printf("time per iteration: %.3f ms\n", elapsed * 1e3 / iterations);
    printf("cudaMalloc calls: %lu, total %.3f ms (%.2f us each)\n", tm.mallocs, tm.malloc_s * 1e3,
           tm.malloc_s * 1e6 / (double)tm.mallocs);
    printf("cudaFree calls: %lu, total %.3f ms (%.2f us each)\n", tm.frees, tm.free_s * 1e3,
           tm.free_s * 1e6 / (double)tm.frees);
    if (sim_allocs)
        printf("device allocations served by the simulated driver: %lu\n", dev_allocs);
    int64_t hits = 0;
    if (get_stat && get_stat(0, "num_cache_hits", &hits) == 0)
        printf("cucache: loaded; %lld of %lu allocations were cache hits\n", (long long)hits, tm.mallocs);
    else if (get_stat)
        printf("cucache: loaded, but it has no statistics for device 0\n");
    else
        printf("cucache: not loaded\n");
    printf("data verified: %s\n", bad ? "FAILED" : "OK");
    return bad;
}
