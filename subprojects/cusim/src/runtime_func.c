/*
 * Kernel attributes, occupancy and the launches beyond <<<>>>: each is the
 * driver's call (driver_func.c, driver_module.c) on the function the
 * kernel's host stub names, its module loaded as a launch would
 * (runtime_module.c, rt_function).  The runtime's occupancy helpers that
 * cuda_runtime.h defines as templates (cudaOccupancyMaxPotentialBlockSize
 * and its variants) reach the simulator through
 * cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
 * cudaFuncGetAttributes and cudaDeviceGetAttribute.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "runtime_internal.h"

/* The ABI of dim3 and of cudaLaunchConfig_t (driver_types.h): the
 * attributes are laid out as the driver's CUlaunchAttribute. */
typedef struct rt_dim3_s {
    unsigned int x, y, z;
} rt_dim3_t;

typedef struct rt_launch_config_s {
    rt_dim3_t gridDim, blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} rt_launch_config_t;
_Static_assert(sizeof(rt_launch_config_t) == 56, "cudaLaunchConfig_t is 56 bytes");

cudaError_t cudaLaunchKernelExC(const rt_launch_config_t *config, const void *func, void **args);
cudaError_t cudaLaunchKernelExC_ptsz(const rt_launch_config_t *config, const void *func, void **args);
cudaError_t cudaLaunchCooperativeKernel(const void *func, rt_dim3_t gridDim, rt_dim3_t blockDim, void **args,
                                        size_t sharedMem, cudaStream_t stream);
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, rt_dim3_t gridDim, rt_dim3_t blockDim, void **args,
                                             size_t sharedMem, cudaStream_t stream);
cudaError_t cudaOccupancyMaxPotentialClusterSize(int *clusterSize, const void *func,
                                                 const rt_launch_config_t *launchConfig);
cudaError_t cudaOccupancyMaxActiveClusters(int *numClusters, const void *func, const rt_launch_config_t *launchConfig);

/* The function of func in the current context, or NULL and *e. */
static CUfunction rt_func(const void *func, cudaError_t *e)
{
    *e = rt_enter();
    return *e == cudaSuccess ? rt_function(RT_DRV, func, false, e) : NULL;
}

/* One row per field of struct cudaFuncAttributes: the driver's attribute
 * it reads, and whether the field is a size_t. */
static const struct {
    size_t offset;
    CUfunction_attribute attr;
    bool size_t_field;
} rt_func_fields[] = {
    {offsetof(struct cudaFuncAttributes, sharedSizeBytes), CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, true},
    {offsetof(struct cudaFuncAttributes, constSizeBytes), CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, true},
    {offsetof(struct cudaFuncAttributes, localSizeBytes), CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, true},
    {offsetof(struct cudaFuncAttributes, maxThreadsPerBlock), CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, false},
    {offsetof(struct cudaFuncAttributes, numRegs), CU_FUNC_ATTRIBUTE_NUM_REGS, false},
    {offsetof(struct cudaFuncAttributes, ptxVersion), CU_FUNC_ATTRIBUTE_PTX_VERSION, false},
    {offsetof(struct cudaFuncAttributes, binaryVersion), CU_FUNC_ATTRIBUTE_BINARY_VERSION, false},
    {offsetof(struct cudaFuncAttributes, cacheModeCA), CU_FUNC_ATTRIBUTE_CACHE_MODE_CA, false},
    {offsetof(struct cudaFuncAttributes, maxDynamicSharedSizeBytes), CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
     false},
    {offsetof(struct cudaFuncAttributes, preferredShmemCarveout), CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
     false},
    {offsetof(struct cudaFuncAttributes, clusterDimMustBeSet), CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, false},
    {offsetof(struct cudaFuncAttributes, requiredClusterWidth), CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, false},
    {offsetof(struct cudaFuncAttributes, requiredClusterHeight), CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, false},
    {offsetof(struct cudaFuncAttributes, requiredClusterDepth), CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, false},
    {offsetof(struct cudaFuncAttributes, clusterSchedulingPolicyPreference),
     CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, false},
    {offsetof(struct cudaFuncAttributes, nonPortableClusterSizeAllowed),
     CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, false},
};

RT_API cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    if (!attr)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e;
    CUfunction f = rt_func(func, &e);
    if (!f)
        return rt_ret(e);
    struct cudaFuncAttributes out;
    memset(&out, 0, sizeof out);
    for (size_t i = 0; i < sizeof rt_func_fields / sizeof rt_func_fields[0]; i++) {
        int v = 0;
        CUresult r = RT_DRV->cuFuncGetAttribute(&v, rt_func_fields[i].attr, f);
        if (r != CUDA_SUCCESS)
            return rt_ret(rt_err(r));
        if (rt_func_fields[i].size_t_field)
            *(size_t *)(void *)((char *)&out + rt_func_fields[i].offset) = (size_t)v;
        else
            *(int *)(void *)((char *)&out + rt_func_fields[i].offset) = v;
    }
    *attr = out;
    return cudaSuccess;
}

RT_API cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    cudaError_t e;
    CUfunction f = rt_func(func, &e);
    return rt_ret(f ? rt_err(RT_DRV->cuFuncSetAttribute(f, (CUfunction_attribute)attr, value)) : e);
}

RT_API cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cacheConfig)
{
    cudaError_t e;
    CUfunction f = rt_func(func, &e);
    return rt_ret(f ? rt_err(RT_DRV->cuFuncSetCacheConfig(f, (CUfunc_cache)cacheConfig)) : e);
}

RT_API cudaError_t cudaFuncSetSharedMemConfig(const void *func, enum cudaSharedMemConfig config)
{
    cudaError_t e;
    CUfunction f = rt_func(func, &e);
    return rt_ret(f ? rt_err(RT_DRV->cuFuncSetSharedMemConfig(f, (CUsharedconfig)config)) : e);
}

/* The device name the kernel was registered with. */
RT_API cudaError_t cudaFuncGetName(const char **name, const void *func)
{
    cudaError_t e = rt_ready();
    if (e == cudaSuccess && !name)
        e = cudaErrorInvalidValue;
    if (e != cudaSuccess)
        return rt_ret(e);
    const char *n = rt_function_name(func);
    if (!n)
        return rt_ret(cudaErrorInvalidDeviceFunction);
    *name = n;
    return cudaSuccess;
}

RT_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, const void *func,
                                                                          int blockSize, size_t dynamicSMemSize,
                                                                          unsigned int flags)
{
    cudaError_t e;
    CUfunction f = rt_func(func, &e);
    return rt_ret(f ? rt_err(RT_DRV->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, f, blockSize,
                                                                                          dynamicSMemSize, flags))
                    : e);
}

RT_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func, int blockSize,
                                                                 size_t dynamicSMemSize)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

RT_API cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, const void *func, int numBlocks,
                                                             int blockSize)
{
    cudaError_t e;
    CUfunction f = rt_func(func, &e);
    return rt_ret(f ? rt_err(RT_DRV->cuOccupancyAvailableDynamicSMemPerBlock(dynamicSmemSize, f, numBlocks, blockSize))
                    : e);
}

/* The driver's launch configuration of the runtime's. */
static void rt_driver_config(const rt_launch_config_t *c, CUlaunchConfig *out)
{
    *out = (CUlaunchConfig){c->gridDim.x,        c->gridDim.y, c->gridDim.z,  c->blockDim.x, c->blockDim.y,
                            c->blockDim.z,       (unsigned)c->dynamicSmemBytes, c->stream,  c->attrs,
                            c->numAttrs};
}

/* cudaOccupancyMaxPotentialClusterSize (active: false) and
 * cudaOccupancyMaxActiveClusters (true): the driver's answer for func
 * under the launch configuration. */
static cudaError_t rt_cluster_query(int *out, const void *func, const rt_launch_config_t *launchConfig, bool active)
{
    if (!launchConfig)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e;
    CUfunction f = rt_func(func, &e);
    CUlaunchConfig c;
    rt_driver_config(launchConfig, &c);
    if (!f)
        return rt_ret(e);
    return rt_ret(rt_err(active ? RT_DRV->cuOccupancyMaxActiveClusters(out, f, &c)
                                : RT_DRV->cuOccupancyMaxPotentialClusterSize(out, f, &c)));
}

RT_API cudaError_t cudaOccupancyMaxPotentialClusterSize(int *clusterSize, const void *func,
                                                        const rt_launch_config_t *launchConfig)
{
    return rt_cluster_query(clusterSize, func, launchConfig, false);
}

RT_API cudaError_t cudaOccupancyMaxActiveClusters(int *numClusters, const void *func,
                                                  const rt_launch_config_t *launchConfig)
{
    return rt_cluster_query(numClusters, func, launchConfig, true);
}

/* A launch's result as the runtime reports it: a bad configuration is
 * cudaErrorInvalidConfiguration. */
static cudaError_t rt_launch_err(CUresult r)
{
    return r == CUDA_ERROR_INVALID_VALUE ? cudaErrorInvalidConfiguration : rt_err(r);
}

static cudaError_t rt_launch_ex(const rt_driver_t *d, const rt_launch_config_t *config, const void *func, void **args)
{
    if (!config)
        return cudaErrorInvalidValue;
    cudaError_t e = rt_enter();
    CUfunction f = e == cudaSuccess ? rt_function(d, func, false, &e) : NULL;
    if (!f)
        return e;
    CUlaunchConfig c;
    rt_driver_config(config, &c);
    return rt_launch_err(d->cuLaunchKernelEx(&c, f, args, NULL));
}

RT_STREAM_API(cudaLaunchKernelExC, cudaLaunchKernelExC_ptsz, rt_launch_ex,
              (const rt_launch_config_t *config, const void *func, void **args), config, func, args)

static cudaError_t rt_launch_cooperative(const rt_driver_t *d, const void *func, rt_dim3_t grid, rt_dim3_t block,
                                         void **args, size_t shared, cudaStream_t stream)
{
    cudaError_t e = rt_enter();
    CUfunction f = e == cudaSuccess ? rt_function(d, func, false, &e) : NULL;
    if (!f)
        return e;
    return rt_launch_err(d->cuLaunchCooperativeKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                                      (unsigned)shared, stream, args));
}

RT_STREAM_API(cudaLaunchCooperativeKernel, cudaLaunchCooperativeKernel_ptsz, rt_launch_cooperative,
              (const void *func, rt_dim3_t gridDim, rt_dim3_t blockDim, void **args, size_t sharedMem,
               cudaStream_t stream),
              func, gridDim, blockDim, args, sharedMem, stream)
