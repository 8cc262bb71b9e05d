// The device code of the variable fixtures (README.md says how each image
// was made from it): a __constant__ table and two __device__ variables,
// one initialised and one zero, a kernel with static shared memory and
// launch bounds, and one whose local array lives in local memory.
__constant__ int table[16] = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597};
__device__ float dev_scale = 2.5f;
__device__ int dev_counter;

extern "C" __global__ void __launch_bounds__(128) lookup(int *out, int n)
{
    __shared__ int tile[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = table[i & 15];
    __syncthreads();
    if (i < n)
        out[i] = tile[(threadIdx.x + 1) % blockDim.x] * (int)dev_scale;
    atomicAdd(&dev_counter, 1);
}

extern "C" __global__ void spill(int *out, int k)
{
    int local[256];
    for (int j = 0; j < 256; j++)
        local[j] = out[j] * j;
    local[k & 255] = k;
    out[threadIdx.x] = local[(k >> 8) & 255];
}
