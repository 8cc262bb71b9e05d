// A CUDA program as nvcc builds it that reads an image through a texture
// object: cudaMallocArray, cudaMemcpy2DToArray from host rows with padding,
// a texture object over the array (and its descriptions read back), a
// <<<>>> launch of a kernel that fetches through it (on the simulated
// device a timed kernel: no device code runs, so its output is not
// checked), then cudaMemcpy2DFromArray and cudaMemcpyFromArray back to the
// host, byte for byte, and everything freed.  Meson runs it on the
// simulator alone (sim_nvcc_texture) and under cucache
// (interpose_nvcc_texture, the same output required).
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "nvcc_check.h"

__global__ void sample(cudaTextureObject_t tex, float *out, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h)
        out[y * w + x] = tex2D<float>(tex, x + 0.5f, y + 0.5f);
}

enum { W = 64, H = 48, SPITCH = W * 4 + 32 };

int main()
{
    static unsigned char in[SPITCH * H], back[W * 4 * H], lin[W * 4 * 3];
    for (int i = 0; i < SPITCH * H; i++)
        in[i] = (unsigned char)(i * 13 + 5);
    cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
    cudaArray_t array = nullptr;
    if (!CHECK(cudaMallocArray(&array, &desc, W, H)))
        return 1;
    if (!CHECK(cudaMemcpy2DToArray(array, 0, 0, in, SPITCH, W * 4, H, cudaMemcpyHostToDevice)))
        return 1;

    cudaResourceDesc res;
    std::memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeArray;
    res.res.array.array = array;
    cudaTextureDesc td;
    std::memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t tex = 0;
    if (!CHECK(cudaCreateTextureObject(&tex, &res, &td, nullptr)))
        return 1;
    cudaResourceDesc res_back;
    if (!CHECK(cudaGetTextureObjectResourceDesc(&res_back, tex)))
        return 1;
    std::printf("texture object over the array: %s\n",
                tex != 0 && res_back.resType == cudaResourceTypeArray && res_back.res.array.array == array ? "yes"
                                                                                                           : "no");
    cudaChannelFormatDesc got;
    cudaExtent extent;
    unsigned flags;
    if (!CHECK(cudaArrayGetInfo(&got, &extent, &flags, array)))
        return 1;
    std::printf("array %zux%zu, channel %d bits, kind %d, flags %u\n", extent.width, extent.height, got.x,
                (int)got.f, flags);

    float *out = nullptr;
    if (!CHECK(cudaMalloc(&out, W * H * sizeof(float))))
        return 1;
    dim3 block(16, 16), grid((W + 15) / 16, (H + 15) / 16);
    sample<<<grid, block>>>(tex, out, W, H);
    if (!CHECK(cudaGetLastError()))
        return 1;
    if (!CHECK(cudaDeviceSynchronize()))
        return 1;

    if (!CHECK(cudaMemcpy2DFromArray(back, W * 4, array, 0, 0, W * 4, H, cudaMemcpyDeviceToHost)))
        return 1;
    int bad = 0;
    for (int y = 0; y < H; y++)
        bad += std::memcmp(back + y * W * 4, in + y * SPITCH, W * 4) != 0;
    std::printf("2D round trip through the array: %d of %d rows differ\n", bad, H);
    if (!CHECK(cudaMemcpyFromArray(lin, array, 8, 2, sizeof lin, cudaMemcpyDeviceToHost)))
        return 1;
    bad = 0;
    for (int i = 0; i < (int)sizeof lin; i++) {
        int row = 2 + (8 + i) / (W * 4), col = (8 + i) % (W * 4);
        bad += lin[i] != in[row * SPITCH + col];
    }
    std::printf("linear read across rows: %d bytes differ\n", bad);
    std::printf("a copy past the array: %s\n",
                cudaGetErrorName(cudaMemcpy2DToArray(array, 0, 1, in, SPITCH, W * 4, H, cudaMemcpyHostToDevice)));
    (void)cudaGetLastError();

    if (!CHECK(cudaDestroyTextureObject(tex)))
        return 1;
    if (!CHECK(cudaFree(out)))
        return 1;
    if (!CHECK(cudaFreeArray(array)))
        return 1;
    std::printf("done\n");
    return 0;
}
