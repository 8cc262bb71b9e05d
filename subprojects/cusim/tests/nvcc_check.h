// What the nvcc programs (nvcc_*.cu) share: CHECK(x) runs a CUDA runtime
// call and says whether it succeeded; when it failed, it prints
// "FAIL file:line call: error name" and the caller returns 1.
#ifndef CUCACHE_TESTS_SIM_NVCC_CHECK_H
#define CUCACHE_TESTS_SIM_NVCC_CHECK_H

#include <cstdio>
#include <cuda_runtime.h>

// Whether e is cudaSuccess; prints the failure of call at file:line when not.
static inline bool check_call(cudaError_t e, const char *call, const char *file, int line)
{
    if (e == cudaSuccess)
        return true;
    std::printf("FAIL %s:%d %s: %s\n", file, line, call, cudaGetErrorName(e));
    return false;
}

#define CHECK(x) check_call((x), #x, __FILE__, __LINE__)

#endif
