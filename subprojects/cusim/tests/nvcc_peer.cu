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

// Whether call (its text) returned want, the runtime's last error cleared;
// prints "call -> error name" when it did, the failure at file:line when not.
static bool expect_call(cudaError_t e, cudaError_t want, const char *call, const char *file, int line)
{
    (void)cudaGetLastError();
    if (e != want) {
        std::printf("FAIL %s:%d %s: %s, expected %s\n", file, line, call, cudaGetErrorName(e), cudaGetErrorName(want));
        return false;
    }
    std::printf("%s -> %s\n", call, cudaGetErrorName(e));
    return true;
}

#define EXPECT(x, want) expect_call((x), (want), #x, __FILE__, __LINE__)

static const int n = 1 << 18;
static int host[n], back[n];

int main()
{
    int count = 0;
    if (!CHECK(cudaGetDeviceCount(&count)))
        return 1;
    if (count < 2) {
        std::printf("FAIL: %d devices, this program needs 2\n", count);
        return 1;
    }
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int can = -1;
            if (!CHECK(cudaDeviceCanAccessPeer(&can, a, b)))
                return 1;
            std::printf("device %d can access device %d: %d\n", a, b, can);
        }
    const cudaDeviceP2PAttr attrs[] = {cudaDevP2PAttrPerformanceRank, cudaDevP2PAttrAccessSupported,
                                       cudaDevP2PAttrNativeAtomicSupported, cudaDevP2PAttrCudaArrayAccessSupported};
    for (cudaDeviceP2PAttr at : attrs) {
        int v = -1;
        if (!CHECK(cudaDeviceGetP2PAttribute(&v, at, 0, 1)))
            return 1;
        std::printf("link 0->1 attribute %d: %d\n", (int)at, v);
    }

    for (int i = 0; i < n; i++)
        host[i] = i * 3 + 1;
    int *a = nullptr, *b = nullptr;
    if (!CHECK(cudaSetDevice(0)))
        return 1;
    if (!CHECK(cudaMalloc(&a, sizeof host)))
        return 1;
    if (!CHECK(cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice)))
        return 1;
    if (!CHECK(cudaSetDevice(1)))
        return 1;
    if (!CHECK(cudaMalloc(&b, sizeof host)))
        return 1;
    if (!CHECK(cudaMemset(b, 0, sizeof host)))
        return 1;
    if (!CHECK(cudaMemcpyPeer(b, 1, a, 0, sizeof host)))
        return 1;
    if (!CHECK(cudaMemcpy(back, b, sizeof back, cudaMemcpyDeviceToHost)))
        return 1;
    std::printf("cudaMemcpyPeer 0->1: %s\n", std::memcmp(host, back, sizeof host) == 0 ? "bytes verified" : "WRONG");

    if (!EXPECT(cudaDeviceEnablePeerAccess(1, 0), cudaErrorInvalidDevice))
        return 1;
    if (!EXPECT(cudaDeviceEnablePeerAccess(0, 1), cudaErrorInvalidValue))
        return 1;
    if (!EXPECT(cudaDeviceEnablePeerAccess(0, 0), cudaSuccess))
        return 1;
    if (!EXPECT(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessAlreadyEnabled))
        return 1;

    cudaStream_t s;
    if (!CHECK(cudaStreamCreate(&s)))
        return 1;
    add_from<<<(n + 255) / 256, 256, 0, s>>>(a, b, n); // device 1 reads device 0's memory
    if (!CHECK(cudaGetLastError()))
        return 1;
    if (!CHECK(cudaStreamSynchronize(s)))
        return 1;
    std::printf("kernel on device 1 reading device 0: %s\n", cudaGetErrorName(cudaGetLastError()));

    if (!CHECK(cudaMemsetAsync(a, 0, sizeof host, 0)))
        return 1;
    if (!CHECK(cudaMemcpyPeerAsync(a, 0, b, 1, sizeof host / 2, s)))
        return 1;
    if (!CHECK(cudaStreamSynchronize(s)))
        return 1;
    if (!CHECK(cudaSetDevice(0)))
        return 1;
    if (!CHECK(cudaMemcpy(back, a, sizeof back, cudaMemcpyDeviceToHost)))
        return 1;
    bool half = std::memcmp(host, back, sizeof host / 2) == 0 && back[n - 1] == 0;
    std::printf("cudaMemcpyPeerAsync 1->0 (half): %s\n", half ? "bytes verified" : "WRONG");

    if (!CHECK(cudaSetDevice(1)))
        return 1;
    if (!EXPECT(cudaDeviceDisablePeerAccess(0), cudaSuccess))
        return 1;
    if (!EXPECT(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled))
        return 1;
    if (!CHECK(cudaStreamDestroy(s)))
        return 1;
    if (!CHECK(cudaFree(b)))
        return 1;
    if (!CHECK(cudaSetDevice(0)))
        return 1;
    if (!CHECK(cudaFree(a)))
        return 1;
    std::printf("peer program done\n");
    return 0;
}
