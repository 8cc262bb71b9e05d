// A CUDA program as nvcc builds it, with a __constant__ table, a __device__
// variable and a kernel with static shared memory and launch bounds, run
// on the simulated device (alone, and under cucache in tests/interpose):
// the table set with cudaMemcpyToSymbol reads back byte for byte, the
// __device__ variable starts as the image's initial value, a <<<>>>
// launch runs (no device code runs: the output stays as it was set),
// cudaFuncGetAttributes answers what ptxas reported for sm_90 (14 registers, 512
// bytes of shared memory, 128 threads at most, 64 bytes of constants),
// and cudaOccupancyMaxPotentialBlockSize (a template of cuda_runtime.h
// over the runtime's exported occupancy calls) gives 128 threads in grids
// of 16 blocks an SM.  Built for sm_90, the modelled H100 (meson).  One
// line per check, without addresses.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "nvcc_check.h"

__constant__ int table[16];
__device__ float dev_scale = 2.5f;

__global__ void __launch_bounds__(128) lookup(int *out, int n)
{
    __shared__ int tile[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = table[i & 15];
    __syncthreads();
    if (i < n)
        out[i] = tile[(threadIdx.x + 1) % blockDim.x] * (int)dev_scale;
}

static int failures;

#define EXPECT(what, cond)                                                                                             \
    do {                                                                                                               \
        bool ok_ = (cond);                                                                                             \
        std::printf("%s: %s\n", what, ok_ ? "ok" : "FAIL");                                                            \
        failures += !ok_;                                                                                              \
    } while (0)

int main()
{
    int host[16], back[16];
    for (int i = 0; i < 16; i++)
        host[i] = 0x01010101 * (i + 1);
    if (!CHECK(cudaMemcpyToSymbol(table, host, sizeof host)))
        return 1;
    if (!CHECK(cudaMemcpyFromSymbol(back, table, sizeof back)))
        return 1;
    EXPECT("table read back byte for byte", std::memcmp(host, back, sizeof host) == 0);
    float scale = 0;
    if (!CHECK(cudaMemcpyFromSymbol(&scale, dev_scale, sizeof scale)))
        return 1;
    EXPECT("dev_scale starts at 2.5", scale == 2.5f);
    size_t size = 0;
    if (!CHECK(cudaGetSymbolSize(&size, table)))
        return 1;
    EXPECT("table is 64 bytes", size == 64);
    void *addr = nullptr;
    if (!CHECK(cudaGetSymbolAddress(&addr, table)))
        return 1;
    cudaPointerAttributes pa;
    if (!CHECK(cudaPointerGetAttributes(&pa, addr)))
        return 1;
    EXPECT("table is device memory", pa.type == cudaMemoryTypeDevice);

    cudaFuncAttributes fa;
    if (!CHECK(cudaFuncGetAttributes(&fa, lookup)))
        return 1;
    std::printf("attributes: regs %d shared %zu const %zu local %zu threads %d binary %d\n", fa.numRegs,
                fa.sharedSizeBytes, fa.constSizeBytes, fa.localSizeBytes, fa.maxThreadsPerBlock, fa.binaryVersion);
    EXPECT("attributes as ptxas reported", fa.numRegs == 14 && fa.sharedSizeBytes == 512 &&
                                               fa.constSizeBytes == 64 && fa.maxThreadsPerBlock == 128);
    int grid = 0, block = 0;
    if (!CHECK(cudaOccupancyMaxPotentialBlockSize(&grid, &block, lookup, 0, 0)))
        return 1;
    std::printf("potential block size %d, grid %d\n", block, grid);
    EXPECT("block 128, 16 blocks an SM", block == 128 && grid == 16 * 132);

    const int n = 4096;
    int *out = nullptr;
    if (!CHECK(cudaMalloc(&out, n * sizeof(int))))
        return 1;
    if (!CHECK(cudaMemset(out, 0x7f, n * sizeof(int))))
        return 1;
    lookup<<<n / block, block>>>(out, n);
    if (!CHECK(cudaGetLastError()))
        return 1;
    lookup<<<1, 256>>>(out, n); /* more threads than its launch bounds */
    EXPECT("256 threads refused", cudaGetLastError() == cudaErrorInvalidConfiguration);
    static int res[n];
    if (!CHECK(cudaMemcpy(res, out, sizeof res, cudaMemcpyDeviceToHost)))
        return 1;
    EXPECT("no device code ran", res[0] == 0x7f7f7f7f && res[n - 1] == 0x7f7f7f7f);
    if (!CHECK(cudaFree(out)))
        return 1;
    std::printf("%s\n", failures ? "FAILED" : "all passed");
    return failures != 0;
}
