/*
 * A CUDA program as a user would write it, built three ways by meson:
 *   real_toolkit        real cuda_runtime_api.h, linked with the REAL
 *                       libcudart.so (no rpath), run with LD_LIBRARY_PATH on
 *                       the simulated libraries;
 *   real_toolkit_ptds   the same with CUDA_API_PER_THREAD_DEFAULT_STREAM, so
 *                       the real header routes calls to the _ptsz/_ptds
 *                       exports;
 *   real_toolkit_static cusim/cuda_api.h, linked with the simulated
 *                       libcudart_static.a (it dlopens libcuda.so.1).
 * It proves it runs on the simulated device (not a real GPU, not the real
 * runtime), that every device attribute of the headers it was built with
 * answers, then checks the data of mallocs, copies, memsets, streams,
 * events, host functions and stream-ordered allocation.  Exit 0 when all
 * checks pass, 1 otherwise.
 */
#ifdef SIMTEST_REAL_HEADERS
#include <cuda_runtime_api.h>
#else
#include "cusim/cuda_api.h"
#endif

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int failures;

#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        cudaError_t rc_ = (call);                                                                                      \
        if (rc_ != cudaSuccess) {                                                                                      \
            fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(rc_));                    \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

#define EXPECT(cond)                                                                                                   \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                                        \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

static unsigned char pattern(size_t i, unsigned seed)
{
    return (unsigned char)(i * 131u + seed * 7u + (i >> 9));
}

static int check_pattern(const unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(i, seed))
            return 0;
    return 1;
}

static int check_value(const unsigned char *b, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != v)
            return 0;
    return 1;
}

/* The program must be running on the simulated runtime and driver. */
static void check_simulated(void)
{
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    EXPECT(drv != NULL);
    EXPECT(drv && dlsym(drv, "cucacheSimRaceCount") != NULL);
#ifdef SIMTEST_REAL_LIBDIR
    /* the runtime that answers cudaMalloc is not the real one we linked */
    Dl_info info;
    memset(&info, 0, sizeof info);
    struct stat ours, real;
    if (dladdr((void *)(uintptr_t)&cudaMalloc, &info) == 0 || !info.dli_fname || stat(info.dli_fname, &ours) != 0 ||
        stat(SIMTEST_REAL_LIBDIR "/libcudart.so", &real) != 0) {
        EXPECT(!"cannot find the files of the runtimes");
    } else {
        printf("cudaMalloc from %s\n", info.dli_fname);
        EXPECT(ours.st_dev != real.st_dev || ours.st_ino != real.st_ino);
    }
#endif
}

struct host_arg {
    const unsigned char *seen_by;
    int value;
};

static void host_fn(void *p)
{
    struct host_arg *a = p;
    a->value = a->seen_by[0];
}

int main(void)
{
    enum { N = 1 << 20 };
    int count = 0;
    CHECK(cudaGetDeviceCount(&count)); /* initialises: the driver is loaded */
    check_simulated();
    EXPECT(count >= 1);
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s, %zu bytes\n", prop.name, prop.totalGlobalMem);
    CHECK(cudaSetDevice(0));
    /* every device attribute the headers it was built with define */
    for (int a = 1; a < (int)cudaDevAttrMax; a++) {
        int v = 0;
        cudaError_t e = cudaDeviceGetAttribute(&v, (enum cudaDeviceAttr)a, 0);
        if (e != cudaSuccess) {
            fprintf(stderr, "device attribute %d: %s\n", a, cudaGetErrorName(e));
            failures++;
        }
    }

    unsigned char *h = NULL, *back = NULL, *d = NULL, *d2 = NULL;
    CHECK(cudaMallocHost((void **)&h, N));
    CHECK(cudaMallocHost((void **)&back, N));
    CHECK(cudaMalloc((void **)&d, N));
    CHECK(cudaMalloc((void **)&d2, N));
    if (failures)
        return 1;
    for (size_t i = 0; i < N; i++)
        h[i] = pattern(i, 1);

    /* synchronous copies and memsets */
    CHECK(cudaMemcpy(d, h, N, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d2, d, N, cudaMemcpyDeviceToDevice));
    memset(back, 0, N);
    CHECK(cudaMemcpy(back, d2, N, cudaMemcpyDeviceToHost));
    EXPECT(check_pattern(back, N, 1));
    CHECK(cudaMemset(d2, 0xA5, N / 2));
    CHECK(cudaMemcpy(back, d2, N, cudaMemcpyDefault));
    EXPECT(check_value(back, N / 2, 0xA5));
    for (size_t i = N / 2; i < N; i++)
        if (back[i] != pattern(i, 1)) {
            EXPECT(!"second half kept");
            break;
        }

    /* streams, events, host functions */
    cudaStream_t s1, s2;
    cudaEvent_t e1, e2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreate(&s2));
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaEventCreate(&e2));
    for (size_t i = 0; i < N; i++)
        h[i] = pattern(i, 2);
    CHECK(cudaEventRecord(e1, s1));
    CHECK(cudaMemcpyAsync(d, h, N, cudaMemcpyHostToDevice, s1));
    CHECK(cudaMemsetAsync(d, 0x3B, 1, s1));
    CHECK(cudaEventRecord(e2, s1));
    CHECK(cudaStreamWaitEvent(s2, e2, 0));
    CHECK(cudaMemcpyAsync(back, d, N, cudaMemcpyDeviceToHost, s2));
    struct host_arg ha = {back, -1};
    CHECK(cudaLaunchHostFunc(s2, host_fn, &ha));
    CHECK(cudaStreamSynchronize(s2));
    EXPECT(ha.value == 0x3B);
    for (size_t i = 1; i < N; i++)
        if (back[i] != pattern(i, 2)) {
            EXPECT(!"async copy data");
            break;
        }
    float ms = -1.0f;
    CHECK(cudaEventElapsedTime(&ms, e1, e2));
    EXPECT(ms >= 0.0f);
    CHECK(cudaEventQuery(e2));
    CHECK(cudaStreamQuery(s1));

    /* stream-ordered allocation */
    unsigned char *a = NULL;
    CHECK(cudaMallocAsync((void **)&a, N, s1));
    CHECK(cudaMemsetAsync(a, 0x6E, N, s1));
    CHECK(cudaMemcpyAsync(back, a, N, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaFreeAsync(a, s1));
    CHECK(cudaStreamSynchronize(s1));
    EXPECT(check_value(back, N, 0x6E));

    /* the default stream and the device */
    CHECK(cudaMemsetAsync(d, 0x11, N, 0));
    CHECK(cudaMemcpyAsync(back, d, N, cudaMemcpyDeviceToHost, 0));
    CHECK(cudaDeviceSynchronize());
    EXPECT(check_value(back, N, 0x11));
    size_t free_b = 0, total = 0;
    CHECK(cudaMemGetInfo(&free_b, &total));
    EXPECT(total == prop.totalGlobalMem && free_b < total);
    struct cudaPointerAttributes attr;
    CHECK(cudaPointerGetAttributes(&attr, d));
    EXPECT(attr.type == cudaMemoryTypeDevice && attr.device == 0);

    /* errors */
    void *p = NULL;
    EXPECT(cudaMalloc(&p, (size_t)1 << 62) == cudaErrorMemoryAllocation);
    EXPECT(cudaGetLastError() == cudaErrorMemoryAllocation);
    EXPECT(cudaGetLastError() == cudaSuccess);

    CHECK(cudaEventDestroy(e1));
    CHECK(cudaEventDestroy(e2));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
    CHECK(cudaFree(d));
    CHECK(cudaFree(d2));
    CHECK(cudaFreeHost(h));
    CHECK(cudaFreeHost(back));
    if (failures) {
        fprintf(stderr, "real_toolkit: %d failures\n", failures);
        return 1;
    }
    printf("real_toolkit: all checks passed\n");
    return 0;
}
