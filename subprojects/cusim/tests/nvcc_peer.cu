// A CUDA program as nvcc builds it, on two devices: peer capability and
// link attributes, cudaMemcpyPeer and cudaMemcpyPeerAsync between the
// devices (bytes checked), cudaDeviceEnablePeerAccess with its errors, and
// a <<<>>> kernel on device 1 reading device 0's memory once access is
// enabled (on the simulated device it is a timed kernel: it runs and
// completes, and moves no bytes).  Its output is the same on the simulator
// alone and under cucache (tests/interpose runs both and compares).
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "nvcc_check.h"

__global__ void add_from(const int *src, int *dst, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        dst[i] += src[i];
}

#define EXPECT(x, want)                                                                                                \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        (void)cudaGetLastError();                                                                                      \
        if (e_ != (want)) {                                                                                            \
            std::printf("FAIL %s:%d %s: %s, expected %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_),             \
                        cudaGetErrorName(want));                                                                       \
            return 1;                                                                                                  \
        }                                                                                                              \
        std::printf("%s -> %s\n", #x, cudaGetErrorName(e_));                                                           \
    } while (0)

static const int n = 1 << 18;
static int host[n], back[n];

int main()
{
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    if (count < 2) {
        std::printf("FAIL: %d devices, this program needs 2\n", count);
        return 1;
    }
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int can = -1;
            CHECK(cudaDeviceCanAccessPeer(&can, a, b));
            std::printf("device %d can access device %d: %d\n", a, b, can);
        }
    const cudaDeviceP2PAttr attrs[] = {cudaDevP2PAttrPerformanceRank, cudaDevP2PAttrAccessSupported,
                                       cudaDevP2PAttrNativeAtomicSupported, cudaDevP2PAttrCudaArrayAccessSupported};
    for (cudaDeviceP2PAttr at : attrs) {
        int v = -1;
        CHECK(cudaDeviceGetP2PAttribute(&v, at, 0, 1));
        std::printf("link 0->1 attribute %d: %d\n", (int)at, v);
    }

    for (int i = 0; i < n; i++)
        host[i] = i * 3 + 1;
    int *a = nullptr, *b = nullptr;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&a, sizeof host));
    CHECK(cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice));
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&b, sizeof host));
    CHECK(cudaMemset(b, 0, sizeof host));
    CHECK(cudaMemcpyPeer(b, 1, a, 0, sizeof host));
    CHECK(cudaMemcpy(back, b, sizeof back, cudaMemcpyDeviceToHost));
    std::printf("cudaMemcpyPeer 0->1: %s\n", std::memcmp(host, back, sizeof host) == 0 ? "bytes verified" : "WRONG");

    EXPECT(cudaDeviceEnablePeerAccess(1, 0), cudaErrorInvalidDevice);
    EXPECT(cudaDeviceEnablePeerAccess(0, 1), cudaErrorInvalidValue);
    EXPECT(cudaDeviceEnablePeerAccess(0, 0), cudaSuccess);
    EXPECT(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessAlreadyEnabled);

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    add_from<<<(n + 255) / 256, 256, 0, s>>>(a, b, n); // device 1 reads device 0's memory
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    std::printf("kernel on device 1 reading device 0: %s\n", cudaGetErrorName(cudaGetLastError()));

    CHECK(cudaMemsetAsync(a, 0, sizeof host, 0));
    CHECK(cudaMemcpyPeerAsync(a, 0, b, 1, sizeof host / 2, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpy(back, a, sizeof back, cudaMemcpyDeviceToHost));
    bool half = std::memcmp(host, back, sizeof host / 2) == 0 && back[n - 1] == 0;
    std::printf("cudaMemcpyPeerAsync 1->0 (half): %s\n", half ? "bytes verified" : "WRONG");

    CHECK(cudaSetDevice(1));
    EXPECT(cudaDeviceDisablePeerAccess(0), cudaSuccess);
    EXPECT(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(b));
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(a));
    std::printf("peer program done\n");
    return 0;
}
