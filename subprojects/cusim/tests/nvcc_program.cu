// A CUDA program as nvcc builds it (device code, module registration, a
// <<<>>> launch), linked with the real shared runtime at build time and run
// on the simulated device: it must load, its host-side CUDA calls must work
// and move real bytes, and its kernel launches must run as the simulated
// device's timed kernels (no device code runs: the data stays as it was):
// with CUCACHE_SIM_KERNEL_US=add_one=20000 (meson sets it) ten launches on
// a stream take 200 ms of device time between two events, to 2%, and a
// launch with a bad configuration fails with cudaErrorInvalidConfiguration.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "nvcc_check.h"

__global__ void add_one(int *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += 1;
}

int main()
{
    cudaDeviceProp prop;
    if (!CHECK(cudaGetDeviceProperties(&prop, 0)))
        return 1;
    if (!std::strstr(prop.name, "simulated")) {
        std::printf("FAIL: not on the simulated device (%s)\n", prop.name);
        return 1;
    }
    const int n = 1 << 16;
    int host[n], back[n];
    for (int i = 0; i < n; i++)
        host[i] = i * 7;
    int *d = nullptr;
    if (!CHECK(cudaMalloc(&d, sizeof host)))
        return 1;
    if (!CHECK(cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice)))
        return 1;
    cudaStream_t s;
    if (!CHECK(cudaStreamCreate(&s)))
        return 1;
    cudaEvent_t a, b;
    if (!CHECK(cudaEventCreate(&a)))
        return 1;
    if (!CHECK(cudaEventCreate(&b)))
        return 1;
    if (!CHECK(cudaEventRecord(a, s)))
        return 1;
    for (int i = 0; i < 10; i++)
        add_one<<<(n + 255) / 256, 256, 0, s>>>(d, n);
    if (!CHECK(cudaGetLastError()))
        return 1;
    if (!CHECK(cudaEventRecord(b, s)))
        return 1;
    if (!CHECK(cudaEventSynchronize(b)))
        return 1;
    float ms = 0;
    if (!CHECK(cudaEventElapsedTime(&ms, a, b)))
        return 1;
    // Never shorter than the kernels' time; longer only by the gaps a busy
    // host leaves between launches (the stream idles until the next one).
    if (ms < 196 || ms > 230) {
        std::printf("FAIL: ten 20 ms kernels took %.3f ms of device time\n", ms);
        return 1;
    }
    add_one<<<1, 2048, 0, s>>>(d, n); // more threads than a block may have
    cudaError_t bad = cudaGetLastError();
    if (bad != cudaErrorInvalidConfiguration) {
        std::printf("FAIL: a 2048-thread block gave %s, expected cudaErrorInvalidConfiguration\n",
                    cudaGetErrorName(bad));
        return 1;
    }
    if (!CHECK(cudaStreamSynchronize(s)))
        return 1;
    if (!CHECK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost)))
        return 1;
    if (std::memcmp(host, back, sizeof host) != 0) {
        std::printf("FAIL: data changed\n");
        return 1;
    }
    if (!CHECK(cudaFree(d)))
        return 1;
    if (!CHECK(cudaStreamDestroy(s)))
        return 1;
    // the time is checked above; the line is the same on every run
    std::printf("nvcc-built program ran on the simulated device: data verified, ten kernels took 200 ms (+-4)\n");
    return 0;
}
