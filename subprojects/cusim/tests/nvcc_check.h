// What the nvcc programs (nvcc_*.cu) share: CHECK(x) runs a CUDA runtime
// call and, when it fails, prints "FAIL file:line call: error name" and
// returns 1 from the function it stands in.
#ifndef CUCACHE_TESTS_SIM_NVCC_CHECK_H
#define CUCACHE_TESTS_SIM_NVCC_CHECK_H

#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(x)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            std::printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_));                          \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

#endif
