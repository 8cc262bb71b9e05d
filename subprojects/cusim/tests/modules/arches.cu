// The device code of the multi-architecture fixtures (README.md says how
// each was made).  One kernel whose launch bound and static shared memory
// follow the architecture it is compiled for, so that what a reader
// reports tells which entry of a fatbin it read: 4 * (__CUDA_ARCH__ / 10)
// threads at most, __CUDA_ARCH__ / 10 ints of shared memory.
#define ARCH_SM (__CUDA_ARCH__ / 10)

extern "C" __global__ void __launch_bounds__(4 * ARCH_SM) arch_probe(int *p)
{
    __shared__ int tile[ARCH_SM];
    tile[threadIdx.x % ARCH_SM] = p[threadIdx.x];
    __syncthreads();
    p[threadIdx.x] = tile[(threadIdx.x + 1) % ARCH_SM];
}
