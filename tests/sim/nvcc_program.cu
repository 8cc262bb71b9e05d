// A CUDA program as nvcc builds it (device code, module registration, a
// <<<>>> launch), linked with the real shared runtime at build time and run
// on the simulated device: it must load, its host-side CUDA calls must work
// and move real bytes, and its kernel launch must fail cleanly with
// cudaErrorNotSupported (the simulated device runs no device code).
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void add_one(int *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += 1;
}

#define CHECK(x)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            std::printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_));                          \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

int main()
{
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    if (!std::strstr(prop.name, "simulated")) {
        std::printf("FAIL: not on the simulated device (%s)\n", prop.name);
        return 1;
    }
    const int n = 1 << 16;
    int host[n], back[n];
    for (int i = 0; i < n; i++)
        host[i] = i * 7;
    int *d = nullptr;
    CHECK(cudaMalloc(&d, sizeof host));
    CHECK(cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice));
    add_one<<<(n + 255) / 256, 256>>>(d, n);
    cudaError_t launch = cudaGetLastError();
    if (launch != cudaErrorNotSupported) {
        std::printf("FAIL: kernel launch gave %s, expected cudaErrorNotSupported\n", cudaGetErrorName(launch));
        return 1;
    }
    CHECK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    if (std::memcmp(host, back, sizeof host) != 0) {
        std::printf("FAIL: data changed\n");
        return 1;
    }
    CHECK(cudaFree(d));
    std::printf("nvcc-built program ran on the simulated device: data verified, kernel launch refused\n");
    return 0;
}
