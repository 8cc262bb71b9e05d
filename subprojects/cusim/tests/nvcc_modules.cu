// A program nvcc built from the fixtures' device code (modules/kernels.cu),
// run on the simulated device: the fatbin nvcc's host stub registers is
// the module the runtime loads.  Both kernels launch with <<<>>> and run
// for the device time CUCACHE_SIM_KERNEL_US gives their names (meson:
// add_one=3000, _Z5scalePffi=5000), measured between events while a host
// function holds the stream; cudaGetFuncBySymbol gives a kernel's driver
// function, whose module (cuFuncGetModule) is the registered image: it
// holds the other kernel too, and not the __device__ function or a name
// the image lacks.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <cuda.h>
#include <cuda_runtime.h>

#include "nvcc_check.h"

#include "modules/kernels.cu"

static void hold(void *arg)
{
    auto *open = static_cast<std::atomic<int> *>(arg);
    while (!open->load())
        std::this_thread::sleep_for(std::chrono::microseconds(100));
}

template <typename L> static int timed(const char *what, cudaStream_t s, float want, L launch)
{
    cudaEvent_t a, b;
    if (!CHECK(cudaEventCreate(&a)))
        return 1;
    if (!CHECK(cudaEventCreate(&b)))
        return 1;
    std::atomic<int> open{0};
    if (!CHECK(cudaLaunchHostFunc(s, hold, &open)))
        return 1;
    if (!CHECK(cudaEventRecord(a, s)))
        return 1;
    launch();
    if (!CHECK(cudaGetLastError()))
        return 1;
    if (!CHECK(cudaEventRecord(b, s)))
        return 1;
    open = 1;
    if (!CHECK(cudaEventSynchronize(b)))
        return 1;
    float ms = 0;
    if (!CHECK(cudaEventElapsedTime(&ms, a, b)))
        return 1;
    if (ms < want * 0.999f || ms > want * 1.001f) {
        std::printf("FAIL: %s took %.3f ms of device time, expected %.3f\n", what, ms, want);
        return 1;
    }
    return 0;
}

int main()
{
    int *d = nullptr;
    float *f = nullptr;
    if (!CHECK(cudaMalloc(&d, 256 * sizeof *d)))
        return 1;
    if (!CHECK(cudaMalloc(&f, 256 * sizeof *f)))
        return 1;
    cudaStream_t s;
    if (!CHECK(cudaStreamCreate(&s)))
        return 1;
    if (timed("add_one", s, 3.0f, [&] { add_one<<<1, 256, 0, s>>>(d, 256); }) ||
        timed("scale", s, 5.0f, [&] { scale<<<1, 256, 0, s>>>(f, 2.0f, 256); }))
        return 1;
    cudaFunction_t fn;
    if (!CHECK(cudaGetFuncBySymbol(&fn, (const void *)add_one)))
        return 1;
    CUmodule m;
    CUfunction other;
    if (cuFuncGetModule(&m, (CUfunction)fn) != CUDA_SUCCESS ||
        cuModuleGetFunction(&other, m, "_Z5scalePffi") != CUDA_SUCCESS) {
        std::printf("FAIL: the registered module does not hold scale\n");
        return 1;
    }
    if (cuModuleGetFunction(&other, m, "_Z14fixture_helperi") != CUDA_ERROR_NOT_FOUND ||
        cuModuleGetFunction(&other, m, "missing") != CUDA_ERROR_NOT_FOUND) {
        std::printf("FAIL: the registered module holds a name that is no kernel of the image\n");
        return 1;
    }
    if (!CHECK(cudaFree(d)))
        return 1;
    if (!CHECK(cudaFree(f)))
        return 1;
    if (!CHECK(cudaStreamDestroy(s)))
        return 1;
    std::printf("nvcc-built program loaded its registered fatbin on the simulated device\n");
    return 0;
}
