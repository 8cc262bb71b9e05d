// The device code of the module fixtures (tests/modules/README.md says
// how each image was made from it).  Two kernels, one with C linkage and
// one C++-mangled, and a __device__ function that is no kernel.
__device__ __noinline__ int fixture_helper(int x)
{
    return x * 3 + 1;
}

extern "C" __global__ void add_one(int *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = fixture_helper(p[i]);
}

__global__ void scale(float *p, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] *= a;
}
