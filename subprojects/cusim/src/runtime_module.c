/*
 * Module registration and kernel launch.  A program that nvcc compiled
 * registers its device code with the runtime at start-up
 * (__cudaRegisterFatBinary and friends) and launches kernels through
 * __cudaPushCallConfiguration / cudaLaunchKernel.  The simulated device
 * runs no device code: registration records the image and each kernel's
 * host stub and name, and a launch runs the kernel as the driver's timed
 * operation (CUCACHE_SIM_KERNEL_US by name).  On a kernel's first launch
 * in a context the runtime loads the module its registration gave (the
 * fatbin wrapper nvcc's host stub registers, read by the driver like any
 * image: a kernel the image does not name is
 * cudaErrorInvalidDeviceFunction), once per registration and context, or,
 * for a registration of anything else, a module of the kernel's name
 * alone (the simulator's list, include/cusim/sim.h); it finds the kernel
 * with cuModuleGetFunction and launches it with cuLaunchKernel, looked up
 * through cuGetProcAddress like every driver call, so an interposer sees
 * the load and the launch at the driver level as it would under NVIDIA's
 * runtime.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusim/sim.h"

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

/* The magic of the wrapper nvcc's host stub registers
 * (the toolkit's fatbinary_section.h): u32 magic, u32 version, the container. */
#define RT_FATBIN_WRAPPER_MAGIC 0x466243B1u

/* A registration (__cudaRegisterFatBinary): what nvcc gave, and its
 * module in each device's primary context (loaded at the first launch of
 * one of its kernels there, again after a device reset).  The handle the
 * program holds is its address: fatCubin comes first. */
typedef struct rt_fatbin_s {
    void *fatCubin;
    bool real; /* fatCubin is a fatbin wrapper: its module is loaded */
    struct {
        CUcontext ctx;
        unsigned gen;
        CUmodule m;
    } loaded[RT_MAX_DEVICES];
} rt_fatbin_t;

/* A registered kernel: its host stub (what cudaLaunchKernel is given), its
 * device name, and its function handle in each device's primary context
 * (made at the first launch there, again after a device reset). */
typedef struct rt_kernel_s {
    void **fatbin; /* the registration it came with (an rt_fatbin_t; __cudaUnregisterFatBinary drops it) */
    const void *host;
    char *name; /* a copy: the registering library may go */
    struct {
        CUcontext ctx;
        unsigned gen;
        CUfunction f;
    } loaded[RT_MAX_DEVICES];
} rt_kernel_t;

static pthread_mutex_t rt_kernels_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_kernel_t *rt_kernels; /* under rt_kernels_lock */
static size_t rt_nkernels;

/* The handle a module registration returns: an rt_fatbin_t. */
RT_API void **__cudaRegisterFatBinary(void *fatCubin)
{
    rt_fatbin_t *fb = calloc(1, sizeof *fb);
    if (!fb)
        return NULL;
    uint32_t magic = 0;
    if (fatCubin)
        memcpy(&magic, fatCubin, sizeof magic);
    fb->fatCubin = fatCubin;
    fb->real = magic == RT_FATBIN_WRAPPER_MAGIC;
    return &fb->fatCubin;
}

RT_API void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
    (void)fatCubinHandle;
}

RT_API void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    /* its kernels go with it (a dlclose'd library's stubs may be reused) */
    pthread_mutex_lock(&rt_kernels_lock);
    size_t n = 0;
    for (size_t i = 0; i < rt_nkernels; i++) {
        if (rt_kernels[i].fatbin == fatCubinHandle)
            free(rt_kernels[i].name);
        else
            rt_kernels[n++] = rt_kernels[i];
    }
    rt_nkernels = n;
    pthread_mutex_unlock(&rt_kernels_lock);
    rt_vars_unregister(fatCubinHandle);
    free((rt_fatbin_t *)fatCubinHandle);
}

RT_API char __cudaInitModule(void **fatCubinHandle)
{
    (void)fatCubinHandle;
    return 1;
}

RT_API void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
                                   int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize)
{
    (void)deviceFun, (void)thread_limit;
    (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
    if (!hostFun || !deviceName)
        return;
    char *name = strdup(deviceName);
    if (!name)
        return;
    pthread_mutex_lock(&rt_kernels_lock);
    rt_kernel_t *k = realloc(rt_kernels, (rt_nkernels + 1) * sizeof *k);
    if (k) {
        rt_kernels = k;
        memset(&k[rt_nkernels], 0, sizeof *k);
        k[rt_nkernels].fatbin = fatCubinHandle;
        k[rt_nkernels].host = hostFun;
        k[rt_nkernels].name = name;
        rt_nkernels++;
    } else {
        free(name);
    }
    pthread_mutex_unlock(&rt_kernels_lock);
}

RT_API void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress, const char *deviceName,
                              int ext, size_t size, int constant, int global)
{
    (void)deviceAddress, (void)ext, (void)constant, (void)global;
    rt_var_register(fatCubinHandle, hostVar, deviceName, size);
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

/* fb's module in ctx (device's primary context, of generation gen),
 * loaded once per context (again when reload: the context was reset
 * under it).  Under rt_kernels_lock. */
static CUresult rt_fatbin_load(const rt_driver_t *d, rt_fatbin_t *fb, int device, CUcontext ctx, unsigned gen,
                               bool reload)
{
    if (reload || !fb->loaded[device].m || fb->loaded[device].ctx != ctx || fb->loaded[device].gen != gen) {
        CUmodule m;
        CUresult r = d->cuModuleLoadData(&m, fb->fatCubin);
        if (r != CUDA_SUCCESS)
            return r;
        fb->loaded[device].ctx = ctx;
        fb->loaded[device].gen = gen;
        fb->loaded[device].m = m;
    }
    return CUDA_SUCCESS;
}

CUresult rt_fatbin_module(const rt_driver_t *d, void **fatCubinHandle, CUmodule *m)
{
    rt_fatbin_t *fb = (rt_fatbin_t *)fatCubinHandle;
    if (!fb->real)
        return CUDA_ERROR_NOT_FOUND; /* not nvcc's: no variables */
    CUcontext ctx;
    int device;
    unsigned gen;
    rt_current(&ctx, &device, &gen);
    pthread_mutex_lock(&rt_kernels_lock);
    CUresult r = rt_fatbin_load(d, fb, device, ctx, gen, false);
    if (r == CUDA_SUCCESS)
        *m = fb->loaded[device].m;
    pthread_mutex_unlock(&rt_kernels_lock);
    return r;
}

/* k's function in ctx: from its registration's module, or from a module
 * of its name alone.  Under rt_kernels_lock. */
static CUresult rt_module(const rt_driver_t *d, rt_kernel_t *k, int device, CUcontext ctx, unsigned gen, bool reload,
                          CUfunction *f)
{
    rt_fatbin_t *fb = (rt_fatbin_t *)k->fatbin;
    if (fb->real) {
        CUresult r = rt_fatbin_load(d, fb, device, ctx, gen, reload);
        return r == CUDA_SUCCESS ? d->cuModuleGetFunction(f, fb->loaded[device].m, k->name) : r;
    }
    size_t magic = strlen(CUCACHE_SIM_MODULE_MAGIC), len = strlen(k->name);
    char *image = malloc(magic + len + 2);
    if (!image)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(image, CUCACHE_SIM_MODULE_MAGIC, magic);
    memcpy(image + magic, k->name, len);
    memcpy(image + magic + len, "\n", 2);
    CUmodule m;
    CUresult r = d->cuModuleLoadData(&m, image);
    free(image);
    return r == CUDA_SUCCESS ? d->cuModuleGetFunction(f, m, k->name) : r;
}

/* The kernel func names, as a function of the current context: NULL and
 * *e set when func was never registered or its module cannot be made. */
CUfunction rt_function(const rt_driver_t *d, const void *func, bool reload, cudaError_t *e)
{
    CUcontext ctx;
    int device;
    unsigned gen;
    rt_current(&ctx, &device, &gen);
    CUfunction f = NULL;
    *e = cudaErrorInvalidDeviceFunction;
    pthread_mutex_lock(&rt_kernels_lock);
    for (size_t i = 0; i < rt_nkernels; i++) {
        rt_kernel_t *k = &rt_kernels[i];
        if (k->host != func)
            continue;
        if (!reload && k->loaded[device].f && k->loaded[device].ctx == ctx && k->loaded[device].gen == gen) {
            f = k->loaded[device].f;
            *e = cudaSuccess;
            break;
        }
        CUresult r = rt_module(d, k, device, ctx, gen, reload, &f);
        if (r != CUDA_SUCCESS) {
            /* a kernel its image does not name: the runtime's code for it */
            *e = r == CUDA_ERROR_NOT_FOUND ? cudaErrorInvalidDeviceFunction : rt_err(r);
            f = NULL;
            break;
        }
        k->loaded[device].ctx = ctx;
        k->loaded[device].gen = gen;
        k->loaded[device].f = f;
        *e = cudaSuccess;
        break;
    }
    pthread_mutex_unlock(&rt_kernels_lock);
    return f;
}

static cudaError_t rt_launch_kernel(const rt_driver_t *d, const void *func, rt_dim3_t grid, rt_dim3_t block,
                                    void **args, size_t shared_mem, cudaStream_t stream)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess)
        return e;
    CUfunction f = rt_function(d, func, false, &e);
    if (!f)
        return e;
    CUresult r = d->cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shared_mem, stream,
                                   args, NULL);
    if (r == CUDA_ERROR_INVALID_HANDLE) {
        /* its module went with a driver-level reset of the context: once more
         * with a new one (a bad stream fails the same way again) */
        f = rt_function(d, func, true, &e);
        if (!f)
            return e;
        r = d->cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shared_mem, stream, args,
                              NULL);
    }
    /* the runtime's codes for a bad configuration */
    if (r == CUDA_ERROR_INVALID_VALUE)
        return cudaErrorInvalidConfiguration;
    return rt_err(r);
}

RT_STREAM_API(cudaLaunchKernel, cudaLaunchKernel_ptsz, rt_launch_kernel,
              (const void *func, rt_dim3_t gridDim, rt_dim3_t blockDim, void **args, size_t sharedMem,
               cudaStream_t stream),
              func, gridDim, blockDim, args, sharedMem, stream)

const char *rt_function_name(const void *func)
{
    const char *name = NULL;
    pthread_mutex_lock(&rt_kernels_lock);
    for (size_t i = 0; i < rt_nkernels && !name; i++)
        if (rt_kernels[i].host == func)
            name = rt_kernels[i].name; /* kept until its registration goes */
    pthread_mutex_unlock(&rt_kernels_lock);
    return name;
}

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

/* The driver's function for a kernel's host stub, in the current context
 * (loading its module as a launch would). */
RT_API cudaError_t cudaGetFuncBySymbol(cudaFunction_t *functionPtr, const void *symbolPtr)
{
    cudaError_t e = rt_enter();
    if (e == cudaSuccess && !functionPtr)
        e = cudaErrorInvalidValue;
    if (e != cudaSuccess)
        return rt_ret(e);
    CUfunction f = rt_function(RT_DRV, symbolPtr, false, &e);
    if (f)
        *functionPtr = f;
    return rt_ret(e);
}
