/*
 * Module registration and kernel launch.  A program that nvcc compiled
 * registers its device code with the runtime at start-up
 * (__cudaRegisterFatBinary and friends) and launches kernels through
 * __cudaPushCallConfiguration / cudaLaunchKernel.  The simulated device
 * cannot run device code, so registration is accepted and recorded (such
 * programs load and run their host-side CUDA calls), and a kernel launch
 * fails with cudaErrorNotSupported and a message saying why.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime_internal.h"

/* The ABI of CUDA's dim3 / uint3: three unsigned ints, passed by value. */
typedef struct rt_dim3_s {
    unsigned int x, y, z;
} rt_dim3_t;

/* The launch configuration a <<<...>>> pushes and the stub pops. */
typedef struct rt_call_config_s {
    rt_dim3_t grid, block;
    size_t shared_mem;
    void *stream;
    int depth; /* pushes not yet popped */
} rt_call_config_t;

static __thread rt_call_config_t call_config;

/* The entry points, as crt/host_runtime.h declares them (dim3 and uint3
 * pointers as void *: only their addresses pass through). */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
char __cudaInitModule(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);
void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
                       size_t size, int constant, int global);
void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress,
                              const char *deviceName, int ext, size_t size, int constant, int global);
unsigned __cudaPushCallConfiguration(rt_dim3_t gridDim, rt_dim3_t blockDim, size_t sharedMem, void *stream);
cudaError_t __cudaPopCallConfiguration(rt_dim3_t *gridDim, rt_dim3_t *blockDim, size_t *sharedMem, void *stream);
cudaError_t __cudaGetKernel(void **kernel, const void *func);
cudaError_t __cudaLaunchKernel(void *kernel, rt_dim3_t gridDim, rt_dim3_t blockDim, void **args, size_t sharedMem,
                               cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(void *kernel, rt_dim3_t gridDim, rt_dim3_t blockDim, void **args, size_t sharedMem,
                                    cudaStream_t stream);
cudaError_t cudaLaunchKernel(const void *func, rt_dim3_t gridDim, rt_dim3_t blockDim, void **args, size_t sharedMem,
                             cudaStream_t stream);
cudaError_t cudaLaunchKernel_ptsz(const void *func, rt_dim3_t gridDim, rt_dim3_t blockDim, void **args,
                                  size_t sharedMem, cudaStream_t stream);

/* The handle a module registration returns: only its address matters. */
RT_API void **__cudaRegisterFatBinary(void *fatCubin)
{
    void **handle = calloc(1, sizeof *handle);
    if (handle)
        *handle = fatCubin;
    return handle;
}

RT_API void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
    (void)fatCubinHandle;
}

RT_API void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    free(fatCubinHandle);
}

RT_API char __cudaInitModule(void **fatCubinHandle)
{
    (void)fatCubinHandle;
    return 1;
}

RT_API void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
                                   int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize)
{
    (void)fatCubinHandle, (void)hostFun, (void)deviceFun, (void)deviceName, (void)thread_limit;
    (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
}

RT_API void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress, const char *deviceName,
                              int ext, size_t size, int constant, int global)
{
    (void)fatCubinHandle, (void)hostVar, (void)deviceAddress, (void)deviceName;
    (void)ext, (void)size, (void)constant, (void)global;
}

RT_API void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress,
                                     const char *deviceName, int ext, size_t size, int constant, int global)
{
    (void)fatCubinHandle, (void)hostVarPtrAddress, (void)deviceAddress, (void)deviceName;
    (void)ext, (void)size, (void)constant, (void)global;
}

RT_API unsigned __cudaPushCallConfiguration(rt_dim3_t gridDim, rt_dim3_t blockDim, size_t sharedMem, void *stream)
{
    call_config.grid = gridDim;
    call_config.block = blockDim;
    call_config.shared_mem = sharedMem;
    call_config.stream = stream;
    call_config.depth++;
    return 0;
}

RT_API cudaError_t __cudaPopCallConfiguration(rt_dim3_t *gridDim, rt_dim3_t *blockDim, size_t *sharedMem, void *stream)
{
    if (call_config.depth == 0)
        return cudaErrorInvalidConfiguration;
    call_config.depth--;
    *gridDim = call_config.grid;
    *blockDim = call_config.block;
    *sharedMem = call_config.shared_mem;
    *(void **)stream = call_config.stream;
    return cudaSuccess;
}

/* Said once per process: why every kernel launch fails. */
static void no_device_code(void)
{
    static int said;
    if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        return;
    static const char msg[] = "cucache-sim: the simulated device cannot run device code; kernel launches "
                              "return cudaErrorNotSupported (use cucacheSimLaunch in tests)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
}

static cudaError_t rt_launch_kernel(const rt_driver_t *d, const void *func, rt_dim3_t grid, rt_dim3_t block,
                                    void **args, size_t shared_mem, cudaStream_t stream)
{
    (void)d, (void)func, (void)grid, (void)block, (void)args, (void)shared_mem, (void)stream;
    cudaError_t e = rt_enter();
    if (e != cudaSuccess)
        return e;
    no_device_code();
    return cudaErrorNotSupported;
}

RT_STREAM_API(cudaLaunchKernel, cudaLaunchKernel_ptsz, rt_launch_kernel,
              (const void *func, rt_dim3_t gridDim, rt_dim3_t blockDim, void **args, size_t sharedMem,
               cudaStream_t stream),
              func, gridDim, blockDim, args, sharedMem, stream)

/* CUDA 13's launch path: the kernel handle is looked up once per kernel
 * (the host stub's address stands in for it), then launched. */
RT_API cudaError_t __cudaGetKernel(void **kernel, const void *func)
{
    if (!kernel)
        return cudaErrorInvalidValue;
    *kernel = (void *)func;
    return cudaSuccess;
}

RT_STREAM_API(__cudaLaunchKernel, __cudaLaunchKernel_ptsz, rt_launch_kernel,
              (void *kernel, rt_dim3_t gridDim, rt_dim3_t blockDim, void **args, size_t sharedMem, cudaStream_t stream),
              kernel, gridDim, blockDim, args, sharedMem, stream)
