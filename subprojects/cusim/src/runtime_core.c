/*
 * The simulated runtime's core: loading the driver, the last error and the
 * error strings, devices and their primary contexts, versions, device
 * properties and driver entry points.  See runtime_internal.h for the map.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "errors.h"
#include "runtime_internal.h"
#include "runtime_major.h"

/* ------------------------------------------------------------------------
 * Driver loading
 * ---------------------------------------------------------------------- */

RT_HIDDEN rt_driver_t rt_drv[2];

static pthread_once_t rt_load_once = PTHREAD_ONCE_INIT;
static cudaError_t rt_load_status = cudaErrorInsufficientDriver; /* written once, under rt_load_once */
static __typeof__(cuGetProcAddress_v2) *rt_getproc;              /* the driver's (or a hook's) lookup */
static int rt_ndev;                                              /* devices, clamped to RT_MAX_DEVICES */
static CUdevice rt_devh[RT_MAX_DEVICES];                         /* driver handle of each ordinal */

/* Resolves base at version with the given stream flags into *field (a
 * function pointer); whether the driver has it. */
static bool rt_resolve_one(void *field, const char *base, int version, cuuint64_t flags)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult q;
    if (rt_getproc(base, &p, version, flags, &q) != CUDA_SUCCESS || !p || q != CU_GET_PROC_ADDRESS_SUCCESS)
        return false;
    memcpy(field, &p, sizeof p);
    return true;
}

/* Resolves every entry of one table with the given stream flags, in table
 * order, up to the first the driver lacks. */
static bool rt_resolve(rt_driver_t *t, cuuint64_t flags)
{
    bool ok = true;
#define RT_RESOLVE(field, base) ok = ok && rt_resolve_one(&t->field, base, RT_CUDART_VERSION, flags);
#define RT_RESOLVE_AT(field, base, version) ok = ok && rt_resolve_one(&t->field, base, version, flags);
    RT_DRIVER_FUNCS(RT_RESOLVE)
    RT_DRIVER_FUNCS_AT(RT_RESOLVE_AT)
#undef RT_RESOLVE
#undef RT_RESOLVE_AT
    return ok;
}

void *rt_driver_proc(const char *base, int version, bool ptds)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult q;
    if (rt_ready() != cudaSuccess ||
        rt_getproc(base, &p, version,
                   ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                   &q) != CUDA_SUCCESS)
        return NULL;
    return p;
}

/* Records the devices the driver reports, after cuInit. */
static cudaError_t rt_load_devices(void)
{
    int n = 0;
    CUresult r = rt_drv[RT_LEGACY].cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS)
        return rt_err(r);
    if (n > RT_MAX_DEVICES)
        n = RT_MAX_DEVICES;
    for (int i = 0; i < n; i++) {
        r = rt_drv[RT_LEGACY].cuDeviceGet(&rt_devh[i], i);
        if (r != CUDA_SUCCESS)
            return rt_err(r);
    }
    rt_ndev = n;
    return cudaSuccess;
}

/* Opens libcuda.so.1, builds both tables and runs cuInit(0). */
static void rt_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return; /* rt_load_status stays cudaErrorInsufficientDriver */
    /* Plain dlsym, never dlvsym: an LD_PRELOAD interposer hooks dlsym to hand
     * us its own cuGetProcAddress_v2, through which it sees every lookup. */
    void *sym = dlsym(h, "cuGetProcAddress_v2");
    if (!sym)
        return;
    memcpy(&rt_getproc, &sym, sizeof sym); /* object to function pointer, without -Wpedantic's complaint */
    if (!rt_resolve(&rt_drv[RT_LEGACY], CU_GET_PROC_ADDRESS_LEGACY_STREAM) ||
        !rt_resolve(&rt_drv[RT_PTDS], CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return;
    CUresult r = rt_drv[RT_LEGACY].cuInit(0);
    if (r != CUDA_SUCCESS) {
        rt_load_status = rt_err(r);
        return;
    }
    rt_load_status = rt_load_devices();
}

cudaError_t rt_ready(void)
{
    pthread_once(&rt_load_once, rt_load);
    return rt_load_status;
}

/* ------------------------------------------------------------------------
 * Last error
 * ---------------------------------------------------------------------- */

/* Bumped by every cudaDeviceReset: invalidates every thread's cached
 * context and sticky error. */
static atomic_uint rt_reset_gen;

static _Thread_local cudaError_t rt_tls_last;    /* cudaGetLastError's answer */
static _Thread_local cudaError_t rt_tls_sticky;  /* context-corrupting error seen by this thread */
static _Thread_local unsigned rt_tls_sticky_gen; /* rt_reset_gen when it was seen */

cudaError_t rt_err(CUresult r)
{
    return (cudaError_t)r;
}

/* The error that survives cudaGetLastError: the context is corrupted. */
static bool rt_is_sticky(cudaError_t e)
{
    return e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure;
}

/* This thread's sticky error, unless a device reset cleared it since. */
static cudaError_t rt_sticky(void)
{
    if (rt_tls_sticky != cudaSuccess && rt_tls_sticky_gen != atomic_load(&rt_reset_gen))
        rt_tls_sticky = cudaSuccess;
    return rt_tls_sticky;
}

cudaError_t rt_ret(cudaError_t e)
{
    if (e == cudaSuccess)
        return e;
    rt_tls_last = e;
    if (rt_is_sticky(e)) {
        rt_tls_sticky = e;
        rt_tls_sticky_gen = atomic_load(&rt_reset_gen);
    }
    return e;
}

/* As the real runtime, a failed start (no driver, cuInit failed) is every
 * thread's last error for good. */
RT_API cudaError_t cudaGetLastError(void)
{
    cudaError_t e = rt_ready();
    if (e != cudaSuccess)
        return e;
    e = rt_tls_last;
    rt_tls_last = rt_sticky();
    return e;
}

RT_API cudaError_t cudaPeekAtLastError(void)
{
    cudaError_t e = rt_ready();
    return e != cudaSuccess ? e : rt_tls_last;
}

/* ------------------------------------------------------------------------
 * Error names and strings (the real runtime's texts)
 * ---------------------------------------------------------------------- */

/* rt_err maps a driver code to the runtime's by value: each shared row's
 * two codes are equal. */
#define RT_ERROR_SAME(cu, rt, text) _Static_assert((int)(cu) == (int)(rt), #cu " and " #rt " differ");
SIM_ERRORS(RT_ERROR_SAME)
#undef RT_ERROR_SAME

static const struct rt_error_text {
    cudaError_t code;
    const char *name;
    const char *text;
} rt_errors[] = {
#define RT_ERROR_ROW(cu, rt, text) {rt, #rt, text},
    SIM_ERRORS(RT_ERROR_ROW)
#undef RT_ERROR_ROW
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidSymbol, "cudaErrorInvalidSymbol", "invalid device symbol"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorSetOnActiveProcess, "cudaErrorSetOnActiveProcess", "cannot set while device is active in this process"},
    {cudaErrorInvalidPitchValue, "cudaErrorInvalidPitchValue", "invalid pitch argument"},
    {cudaErrorInvalidChannelDescriptor, "cudaErrorInvalidChannelDescriptor", "invalid channel descriptor"},
};

/* The table row of a code, or NULL (both texts are then the real runtime's
 * "unrecognized error code"). */
static const struct rt_error_text *rt_error_find(cudaError_t e)
{
    for (size_t i = 0; i < sizeof rt_errors / sizeof rt_errors[0]; i++)
        if (rt_errors[i].code == e)
            return &rt_errors[i];
    return NULL;
}

RT_API const char *cudaGetErrorString(cudaError_t error)
{
    const struct rt_error_text *t = rt_error_find(error);
    return t ? t->text : "unrecognized error code";
}

RT_API const char *cudaGetErrorName(cudaError_t error)
{
    const struct rt_error_text *t = rt_error_find(error);
    return t ? t->name : "unrecognized error code";
}

/* ------------------------------------------------------------------------
 * Devices and primary contexts
 * ---------------------------------------------------------------------- */

static pthread_mutex_t rt_ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext rt_primary[RT_MAX_DEVICES]; /* retained primary contexts; under rt_ctx_lock */

static _Thread_local int rt_tls_device;       /* cudaSetDevice's ordinal; 0 by default */
static _Thread_local CUcontext rt_tls_ctx;    /* what this thread last made current; NULL: unknown */
static _Thread_local int rt_tls_ctx_device;   /* ...for this ordinal */
static _Thread_local unsigned rt_tls_ctx_gen; /* ...at this rt_reset_gen */

cudaError_t rt_device(int ordinal, CUdevice *dev)
{
    if (ordinal < 0 || ordinal >= rt_ndev)
        return cudaErrorInvalidDevice;
    *dev = rt_devh[ordinal];
    return cudaSuccess;
}

/* rt_ready(), then rt_device(). */
static cudaError_t rt_ready_device(int ordinal, CUdevice *dev)
{
    cudaError_t e = rt_ready();
    return e != cudaSuccess ? e : rt_device(ordinal, dev);
}

cudaError_t rt_primary_ctx(int ordinal, CUcontext *out)
{
    CUdevice dev;
    cudaError_t e = rt_device(ordinal, &dev);
    if (e != cudaSuccess)
        return e;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&rt_ctx_lock);
    if (!rt_primary[ordinal])
        r = rt_drv[RT_LEGACY].cuDevicePrimaryCtxRetain(&rt_primary[ordinal], dev);
    *out = rt_primary[ordinal];
    pthread_mutex_unlock(&rt_ctx_lock);
    return rt_err(r);
}

/* Slow path of rt_enter: retains the device's primary context if needed and
 * makes it current on this thread if the thread's cache says otherwise. */
static cudaError_t rt_ctx_bind(int ordinal, unsigned gen)
{
    CUcontext ctx = NULL;
    cudaError_t e = rt_primary_ctx(ordinal, &ctx);
    if (e != cudaSuccess)
        return e;
    if (ctx != rt_tls_ctx || gen != rt_tls_ctx_gen) {
        CUresult r = rt_drv[RT_LEGACY].cuCtxSetCurrent(ctx);
        if (r != CUDA_SUCCESS)
            return rt_err(r);
    }
    rt_tls_ctx = ctx;
    rt_tls_ctx_device = ordinal;
    rt_tls_ctx_gen = gen;
    return cudaSuccess;
}

void rt_current(CUcontext *ctx, int *device, unsigned *gen)
{
    *ctx = rt_tls_ctx;
    *device = rt_tls_ctx_device;
    *gen = rt_tls_ctx_gen;
}

cudaError_t rt_enter(void)
{
    cudaError_t e = rt_ready();
    if (e != cudaSuccess)
        return e;
    unsigned gen = atomic_load(&rt_reset_gen);
    if (rt_tls_ctx && rt_tls_ctx_device == rt_tls_device && rt_tls_ctx_gen == gen)
        return cudaSuccess;
    return rt_ctx_bind(rt_tls_device, gen);
}

RT_API cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_ready();
    if (e != cudaSuccess) {
        *count = 0;
        return rt_ret(e);
    }
    *count = rt_ndev;
    return rt_ret(rt_ndev == 0 ? cudaErrorNoDevice : cudaSuccess);
}

RT_API cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_ready();
    if (e == cudaSuccess)
        *device = rt_tls_device;
    return rt_ret(e);
}

/* Like CUDA 12+, cudaSetDevice also makes the device's primary context
 * current at once. */
RT_API cudaError_t cudaSetDevice(int device)
{
    CUdevice dev;
    cudaError_t e = rt_ready_device(device, &dev);
    if (e != cudaSuccess)
        return rt_ret(e);
    rt_tls_device = device;
    return rt_ret(rt_enter());
}

RT_API cudaError_t cudaDeviceSynchronize(void)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuCtxSynchronize()));
}

/* Resets the current device's primary context, forgets it (it is retained
 * again on next use) and clears the calling thread's errors. */
RT_API cudaError_t cudaDeviceReset(void)
{
    CUdevice dev;
    cudaError_t e = rt_ready_device(rt_tls_device, &dev);
    if (e != cudaSuccess)
        return rt_ret(e);
    pthread_mutex_lock(&rt_ctx_lock);
    CUresult r = RT_DRV->cuDevicePrimaryCtxReset_v2(dev);
    rt_primary[rt_tls_device] = NULL;
    atomic_fetch_add(&rt_reset_gen, 1);
    pthread_mutex_unlock(&rt_ctx_lock);
    rt_tls_ctx = NULL;
    rt_tls_last = cudaSuccess;
    rt_tls_sticky = cudaSuccess;
    return rt_ret(rt_err(r));
}

RT_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    CUdevice dev;
    if (!value)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_ready_device(device, &dev);
    if (e != cudaSuccess)
        return rt_ret(e);
    return rt_ret(rt_err(RT_DRV->cuDeviceGetAttribute(value, (CUdevice_attribute)attr, dev)));
}

RT_API cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuCtxGetStreamPriorityRange(leastPriority, greatestPriority)));
}

/* ------------------------------------------------------------------------
 * Versions
 * ---------------------------------------------------------------------- */

/* As the real runtime: with no driver, version 0 and success; it answers
 * even when cuInit failed. */
RT_API cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return rt_ret(cudaErrorInvalidValue);
    (void)rt_ready();
    if (!RT_DRV->cuDriverGetVersion) {
        *driverVersion = 0;
        return cudaSuccess;
    }
    return rt_ret(rt_err(RT_DRV->cuDriverGetVersion(driverVersion)));
}

RT_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (!runtimeVersion)
        return rt_ret(cudaErrorInvalidValue);
    *runtimeVersion = RT_CUDART_VERSION;
    return cudaSuccess;
}

/* ------------------------------------------------------------------------
 * Device properties
 * ---------------------------------------------------------------------- */

/* Every field of struct cudaDeviceProp (CUDA 13 layout) that has a device
 * attribute, one row each: the value is cuDeviceGetAttribute's, so the
 * struct, cudaDeviceGetAttribute and the driver answer from one table (the
 * driver's, src/driver.c).  The rest are name, uuid and totalGlobalMem (their
 * own driver calls), luid and luidDeviceNodeMask (Windows only: zero) and
 * reserved.  `size` is the field's: 8 for size_t, 4 for int and unsigned. */
static const struct rt_prop_attr {
    CUdevice_attribute attr;
    size_t off, size;
} rt_prop_attrs[] = {
#define RT_PROP(field, attr)                                                                                           \
    {CU_DEVICE_ATTRIBUTE_##attr, offsetof(struct cudaDeviceProp, field), sizeof(((struct cudaDeviceProp *)0)->field)}
    RT_PROP(sharedMemPerBlock, MAX_SHARED_MEMORY_PER_BLOCK),
    RT_PROP(regsPerBlock, MAX_REGISTERS_PER_BLOCK),
    RT_PROP(warpSize, WARP_SIZE),
    RT_PROP(memPitch, MAX_PITCH),
    RT_PROP(maxThreadsPerBlock, MAX_THREADS_PER_BLOCK),
    RT_PROP(maxThreadsDim[0], MAX_BLOCK_DIM_X),
    RT_PROP(maxThreadsDim[1], MAX_BLOCK_DIM_Y),
    RT_PROP(maxThreadsDim[2], MAX_BLOCK_DIM_Z),
    RT_PROP(maxGridSize[0], MAX_GRID_DIM_X),
    RT_PROP(maxGridSize[1], MAX_GRID_DIM_Y),
    RT_PROP(maxGridSize[2], MAX_GRID_DIM_Z),
    RT_PROP(totalConstMem, TOTAL_CONSTANT_MEMORY),
    RT_PROP(major, COMPUTE_CAPABILITY_MAJOR),
    RT_PROP(minor, COMPUTE_CAPABILITY_MINOR),
    RT_PROP(textureAlignment, TEXTURE_ALIGNMENT),
    RT_PROP(texturePitchAlignment, TEXTURE_PITCH_ALIGNMENT),
    RT_PROP(multiProcessorCount, MULTIPROCESSOR_COUNT),
    RT_PROP(integrated, INTEGRATED),
    RT_PROP(canMapHostMemory, CAN_MAP_HOST_MEMORY),
    RT_PROP(maxTexture1D, MAXIMUM_TEXTURE1D_WIDTH),
    RT_PROP(maxTexture1DMipmap, MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH),
    RT_PROP(maxTexture2D[0], MAXIMUM_TEXTURE2D_WIDTH),
    RT_PROP(maxTexture2D[1], MAXIMUM_TEXTURE2D_HEIGHT),
    RT_PROP(maxTexture2DMipmap[0], MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH),
    RT_PROP(maxTexture2DMipmap[1], MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT),
    RT_PROP(maxTexture2DLinear[0], MAXIMUM_TEXTURE2D_LINEAR_WIDTH),
    RT_PROP(maxTexture2DLinear[1], MAXIMUM_TEXTURE2D_LINEAR_HEIGHT),
    RT_PROP(maxTexture2DLinear[2], MAXIMUM_TEXTURE2D_LINEAR_PITCH),
    RT_PROP(maxTexture2DGather[0], MAXIMUM_TEXTURE2D_GATHER_WIDTH),
    RT_PROP(maxTexture2DGather[1], MAXIMUM_TEXTURE2D_GATHER_HEIGHT),
    RT_PROP(maxTexture3D[0], MAXIMUM_TEXTURE3D_WIDTH),
    RT_PROP(maxTexture3D[1], MAXIMUM_TEXTURE3D_HEIGHT),
    RT_PROP(maxTexture3D[2], MAXIMUM_TEXTURE3D_DEPTH),
    RT_PROP(maxTexture3DAlt[0], MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE),
    RT_PROP(maxTexture3DAlt[1], MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE),
    RT_PROP(maxTexture3DAlt[2], MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE),
    RT_PROP(maxTextureCubemap, MAXIMUM_TEXTURECUBEMAP_WIDTH),
    RT_PROP(maxTexture1DLayered[0], MAXIMUM_TEXTURE1D_LAYERED_WIDTH),
    RT_PROP(maxTexture1DLayered[1], MAXIMUM_TEXTURE1D_LAYERED_LAYERS),
    RT_PROP(maxTexture2DLayered[0], MAXIMUM_TEXTURE2D_LAYERED_WIDTH),
    RT_PROP(maxTexture2DLayered[1], MAXIMUM_TEXTURE2D_LAYERED_HEIGHT),
    RT_PROP(maxTexture2DLayered[2], MAXIMUM_TEXTURE2D_LAYERED_LAYERS),
    RT_PROP(maxTextureCubemapLayered[0], MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH),
    RT_PROP(maxTextureCubemapLayered[1], MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS),
    RT_PROP(maxSurface1D, MAXIMUM_SURFACE1D_WIDTH),
    RT_PROP(maxSurface2D[0], MAXIMUM_SURFACE2D_WIDTH),
    RT_PROP(maxSurface2D[1], MAXIMUM_SURFACE2D_HEIGHT),
    RT_PROP(maxSurface3D[0], MAXIMUM_SURFACE3D_WIDTH),
    RT_PROP(maxSurface3D[1], MAXIMUM_SURFACE3D_HEIGHT),
    RT_PROP(maxSurface3D[2], MAXIMUM_SURFACE3D_DEPTH),
    RT_PROP(maxSurface1DLayered[0], MAXIMUM_SURFACE1D_LAYERED_WIDTH),
    RT_PROP(maxSurface1DLayered[1], MAXIMUM_SURFACE1D_LAYERED_LAYERS),
    RT_PROP(maxSurface2DLayered[0], MAXIMUM_SURFACE2D_LAYERED_WIDTH),
    RT_PROP(maxSurface2DLayered[1], MAXIMUM_SURFACE2D_LAYERED_HEIGHT),
    RT_PROP(maxSurface2DLayered[2], MAXIMUM_SURFACE2D_LAYERED_LAYERS),
    RT_PROP(maxSurfaceCubemap, MAXIMUM_SURFACECUBEMAP_WIDTH),
    RT_PROP(maxSurfaceCubemapLayered[0], MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH),
    RT_PROP(maxSurfaceCubemapLayered[1], MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS),
    RT_PROP(surfaceAlignment, SURFACE_ALIGNMENT),
    RT_PROP(concurrentKernels, CONCURRENT_KERNELS),
    RT_PROP(ECCEnabled, ECC_ENABLED),
    RT_PROP(pciBusID, PCI_BUS_ID),
    RT_PROP(pciDeviceID, PCI_DEVICE_ID),
    RT_PROP(pciDomainID, PCI_DOMAIN_ID),
    RT_PROP(tccDriver, TCC_DRIVER),
    RT_PROP(asyncEngineCount, ASYNC_ENGINE_COUNT),
    RT_PROP(unifiedAddressing, UNIFIED_ADDRESSING),
    RT_PROP(memoryBusWidth, GLOBAL_MEMORY_BUS_WIDTH),
    RT_PROP(l2CacheSize, L2_CACHE_SIZE),
    RT_PROP(persistingL2CacheMaxSize, MAX_PERSISTING_L2_CACHE_SIZE),
    RT_PROP(maxThreadsPerMultiProcessor, MAX_THREADS_PER_MULTIPROCESSOR),
    RT_PROP(streamPrioritiesSupported, STREAM_PRIORITIES_SUPPORTED),
    RT_PROP(globalL1CacheSupported, GLOBAL_L1_CACHE_SUPPORTED),
    RT_PROP(localL1CacheSupported, LOCAL_L1_CACHE_SUPPORTED),
    RT_PROP(sharedMemPerMultiprocessor, MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
    RT_PROP(regsPerMultiprocessor, MAX_REGISTERS_PER_MULTIPROCESSOR),
    RT_PROP(managedMemory, MANAGED_MEMORY),
    RT_PROP(isMultiGpuBoard, MULTI_GPU_BOARD),
    RT_PROP(multiGpuBoardGroupID, MULTI_GPU_BOARD_GROUP_ID),
    RT_PROP(hostNativeAtomicSupported, HOST_NATIVE_ATOMIC_SUPPORTED),
    RT_PROP(pageableMemoryAccess, PAGEABLE_MEMORY_ACCESS),
    RT_PROP(concurrentManagedAccess, CONCURRENT_MANAGED_ACCESS),
    RT_PROP(computePreemptionSupported, COMPUTE_PREEMPTION_SUPPORTED),
    RT_PROP(canUseHostPointerForRegisteredMem, CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM),
    RT_PROP(cooperativeLaunch, COOPERATIVE_LAUNCH),
    RT_PROP(sharedMemPerBlockOptin, MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
    RT_PROP(pageableMemoryAccessUsesHostPageTables, PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES),
    RT_PROP(directManagedMemAccessFromHost, DIRECT_MANAGED_MEM_ACCESS_FROM_HOST),
    RT_PROP(maxBlocksPerMultiProcessor, MAX_BLOCKS_PER_MULTIPROCESSOR),
    RT_PROP(accessPolicyMaxWindowSize, MAX_ACCESS_POLICY_WINDOW_SIZE),
    RT_PROP(reservedSharedMemPerBlock, RESERVED_SHARED_MEMORY_PER_BLOCK),
    RT_PROP(hostRegisterSupported, HOST_REGISTER_SUPPORTED),
    RT_PROP(sparseCudaArraySupported, SPARSE_CUDA_ARRAY_SUPPORTED),
    RT_PROP(hostRegisterReadOnlySupported, READ_ONLY_HOST_REGISTER_SUPPORTED),
    RT_PROP(timelineSemaphoreInteropSupported, TIMELINE_SEMAPHORE_INTEROP_SUPPORTED),
    RT_PROP(memoryPoolsSupported, MEMORY_POOLS_SUPPORTED),
    RT_PROP(gpuDirectRDMASupported, GPU_DIRECT_RDMA_SUPPORTED),
    RT_PROP(gpuDirectRDMAFlushWritesOptions, GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS),
    RT_PROP(gpuDirectRDMAWritesOrdering, GPU_DIRECT_RDMA_WRITES_ORDERING),
    RT_PROP(memoryPoolSupportedHandleTypes, MEMPOOL_SUPPORTED_HANDLE_TYPES),
    RT_PROP(deferredMappingCudaArraySupported, DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED),
    RT_PROP(ipcEventSupported, IPC_EVENT_SUPPORTED),
    RT_PROP(clusterLaunch, CLUSTER_LAUNCH),
    RT_PROP(unifiedFunctionPointers, UNIFIED_FUNCTION_POINTERS),
    RT_PROP(deviceNumaConfig, NUMA_CONFIG),
    RT_PROP(deviceNumaId, NUMA_ID),
    RT_PROP(mpsEnabled, MPS_ENABLED),
    RT_PROP(hostNumaId, HOST_NUMA_ID),
    RT_PROP(gpuPciDeviceID, GPU_PCI_DEVICE_ID),
    RT_PROP(gpuPciSubsystemID, GPU_PCI_SUBSYSTEM_ID),
    RT_PROP(hostNumaMultinodeIpcSupported, HOST_NUMA_MULTINODE_IPC_SUPPORTED),
#undef RT_PROP
};

/* Fills a zeroed CUDA 13 cudaDeviceProp from the driver. */
static cudaError_t rt_props_fill(struct cudaDeviceProp *p, CUdevice dev)
{
    CUresult r = RT_DRV->cuDeviceGetName(p->name, (int)sizeof p->name, dev);
    if (r == CUDA_SUCCESS)
        r = RT_DRV->cuDeviceTotalMem_v2(&p->totalGlobalMem, dev);
    if (r == CUDA_SUCCESS)
        r = RT_DRV->cuDeviceGetUuid_v2(&p->uuid, dev);
    for (size_t i = 0; r == CUDA_SUCCESS && i < sizeof rt_prop_attrs / sizeof rt_prop_attrs[0]; i++) {
        const struct rt_prop_attr *a = &rt_prop_attrs[i];
        int v = 0;
        r = RT_DRV->cuDeviceGetAttribute(&v, a->attr, dev);
        size_t wide = (size_t)v;
        if (a->size == sizeof wide)
            memcpy((char *)p + a->off, &wide, sizeof wide);
        else
            memcpy((char *)p + a->off, &v, sizeof v);
    }
    return rt_err(r);
}

/* The device's properties in the CUDA 13 layout; *prop is written only
 * on success.  The exports are each runtime's (runtime12.c, runtime13.c). */
RT_HIDDEN cudaError_t rt_props(struct cudaDeviceProp *prop, int device)
{
    struct cudaDeviceProp p;
    CUdevice dev;
    if (!prop)
        return cudaErrorInvalidValue;
    cudaError_t e = rt_ready_device(device, &dev);
    if (e != cudaSuccess)
        return e;
    memset(&p, 0, sizeof p);
    e = rt_props_fill(&p, dev);
    if (e == cudaSuccess)
        *prop = p;
    return e;
}

/* ------------------------------------------------------------------------
 * Driver entry points
 * ---------------------------------------------------------------------- */

/* cudaGetDriverEntryPoint*: forwards to cuGetProcAddress_v2.  cudaEnableDefault
 * (0) means the stream semantics of the calling variant: legacy for the plain
 * export, per-thread for the _ptsz one. */
static cudaError_t rt_entry_point(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                  unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus,
                                  cuuint64_t default_flags)
{
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!symbol || !funcPtr)
        return cudaErrorInvalidValue;
    cudaError_t e = rt_ready();
    if (e != cudaSuccess)
        return e;
    CUresult r = rt_getproc(symbol, funcPtr, (int)cudaVersion, flags ? flags : default_flags, &q);
    if (driverStatus)
        *driverStatus = (enum cudaDriverEntryPointQueryResult)q;
    return rt_err(r);
}

RT_API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                           enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return rt_ret(
        rt_entry_point(symbol, funcPtr, RT_CUDART_VERSION, flags, driverStatus, CU_GET_PROC_ADDRESS_LEGACY_STREAM));
}

RT_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                                enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return rt_ret(rt_entry_point(symbol, funcPtr, RT_CUDART_VERSION, flags, driverStatus,
                                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
}

RT_API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                                    unsigned long long flags,
                                                    enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return rt_ret(rt_entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus, CU_GET_PROC_ADDRESS_LEGACY_STREAM));
}

RT_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                                         unsigned long long flags,
                                                         enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return rt_ret(rt_entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus,
                                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
}
