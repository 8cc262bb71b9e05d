/*
 * The simulated runtime's calls around memory: device flags, limits,
 * cache and shared memory configuration, PCI bus ids, the GPUDirect RDMA
 * flush, the profiler, stream attributes and managed memory hints, each a
 * translation to the driver call of the same meaning (driver_misc.c).
 * Their enums have the driver's numbers, their structs its layouts.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "runtime_internal.h"
#include "runtime_major.h"

/* The current device's driver handle, without making its context. */
static cudaError_t rt_current_device(CUdevice *dev)
{
    int ordinal = 0;
    cudaError_t e = cudaGetDevice(&ordinal);
    return e != cudaSuccess ? e : rt_device(ordinal, dev);
}

/* The device flags are the primary context's: cudaDeviceMapHost and the
 * others have the CU_CTX_* values. */
RT_API cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
    CUdevice dev;
    cudaError_t e = rt_current_device(&dev);
    return rt_ret(e != cudaSuccess ? e : rt_err(RT_DRV->cuDevicePrimaryCtxSetFlags_v2(dev, flags)));
}

RT_API cudaError_t cudaGetDeviceFlags(unsigned int *flags)
{
    CUdevice dev;
    int active;
    if (!flags)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_current_device(&dev);
    return rt_ret(e != cudaSuccess ? e : rt_err(RT_DRV->cuDevicePrimaryCtxGetState(dev, flags, &active)));
}

/* The runtime names the first seven limits; the driver's later ones are
 * the runtime's unsupported limits. */
RT_API cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value)
{
    if ((unsigned)limit > cudaLimitPersistingL2CacheSize)
        return rt_ret(cudaErrorUnsupportedLimit);
    return rt_ret(RT_FORWARD(RT_DRV->cuCtxSetLimit((CUlimit)limit, value)));
}

RT_API cudaError_t cudaDeviceGetLimit(size_t *pValue, enum cudaLimit limit)
{
    if ((unsigned)limit > cudaLimitPersistingL2CacheSize)
        return rt_ret(cudaErrorUnsupportedLimit);
    return rt_ret(RT_FORWARD(RT_DRV->cuCtxGetLimit(pValue, (CUlimit)limit)));
}

RT_API cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache cacheConfig)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuCtxSetCacheConfig((CUfunc_cache)cacheConfig)));
}

RT_API cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache *pCacheConfig)
{
    CUfunc_cache c;
    if (!pCacheConfig)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = RT_FORWARD(RT_DRV->cuCtxGetCacheConfig(&c));
    if (e == cudaSuccess)
        *pCacheConfig = (enum cudaFuncCache)c;
    return rt_ret(e);
}

RT_API cudaError_t cudaDeviceSetSharedMemConfig(enum cudaSharedMemConfig config)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuCtxSetSharedMemConfig((CUsharedconfig)config)));
}

RT_API cudaError_t cudaDeviceGetSharedMemConfig(enum cudaSharedMemConfig *pConfig)
{
    CUsharedconfig c;
    if (!pConfig)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = RT_FORWARD(RT_DRV->cuCtxGetSharedMemConfig(&c));
    if (e == cudaSuccess)
        *pConfig = (enum cudaSharedMemConfig)c;
    return rt_ret(e);
}

RT_API cudaError_t cudaCtxResetPersistingL2Cache(void)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuCtxResetPersistingL2Cache()));
}

/* ------------------------------------------------------------------------
 * PCI bus ids (the driver's handles are the ordinals' rt_device gives)
 * ---------------------------------------------------------------------- */

RT_API cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
    CUdevice dev;
    cudaError_t e = rt_ready();
    if (e == cudaSuccess)
        e = rt_device(device, &dev);
    return rt_ret(e != cudaSuccess ? e : rt_err(RT_DRV->cuDeviceGetPCIBusId(pciBusId, len, dev)));
}

RT_API cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId)
{
    CUdevice dev, h;
    int n = 0;
    if (!device)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_ready();
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuDeviceGetByPCIBusId(&dev, pciBusId));
    if (e == cudaSuccess)
        e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return rt_ret(e);
    for (int i = 0; i < n; i++)
        if (rt_device(i, &h) == cudaSuccess && h == dev) {
            *device = i;
            return cudaSuccess;
        }
    return rt_ret(cudaErrorInvalidDevice);
}

RT_API cudaError_t cudaDeviceFlushGPUDirectRDMAWrites(enum cudaFlushGPUDirectRDMAWritesTarget target,
                                                      enum cudaFlushGPUDirectRDMAWritesScope scope)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuFlushGPUDirectRDMAWrites((CUflushGPUDirectRDMAWritesTarget)target,
                                                                (CUflushGPUDirectRDMAWritesScope)scope)));
}

RT_API cudaError_t cudaProfilerStart(void)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuProfilerStart()));
}

RT_API cudaError_t cudaProfilerStop(void)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuProfilerStop()));
}

/* ------------------------------------------------------------------------
 * Stream attributes
 * ---------------------------------------------------------------------- */

_Static_assert(sizeof(cudaLaunchAttributeValue) == sizeof(CUlaunchAttributeValue), "attribute values differ");

static cudaError_t rt_stream_set_attr(const rt_driver_t *d, cudaStream_t s, cudaLaunchAttributeID attr,
                                      const cudaLaunchAttributeValue *v)
{
    CUlaunchAttributeValue cv;
    if (!v)
        return cudaErrorInvalidValue;
    memcpy(&cv, v, sizeof cv);
    return RT_FORWARD(d->cuStreamSetAttribute(s, (CUstreamAttrID)attr, &cv));
}

static cudaError_t rt_stream_get_attr(const rt_driver_t *d, cudaStream_t s, cudaLaunchAttributeID attr,
                                      cudaLaunchAttributeValue *v)
{
    CUlaunchAttributeValue cv;
    if (!v)
        return cudaErrorInvalidValue;
    cudaError_t e = RT_FORWARD(d->cuStreamGetAttribute(s, (CUstreamAttrID)attr, &cv));
    if (e == cudaSuccess)
        memcpy(v, &cv, sizeof cv);
    return e;
}

RT_STREAM_API(cudaStreamSetAttribute, cudaStreamSetAttribute_ptsz, rt_stream_set_attr,
              (cudaStream_t hStream, cudaStreamAttrID attr, const cudaStreamAttrValue *value), hStream, attr, value)
RT_STREAM_API(cudaStreamGetAttribute, cudaStreamGetAttribute_ptsz, rt_stream_get_attr,
              (cudaStream_t hStream, cudaStreamAttrID attr, cudaStreamAttrValue *value_out), hStream, attr,
              value_out)

/* ------------------------------------------------------------------------
 * Managed memory
 * ---------------------------------------------------------------------- */

static cudaError_t rt_attach(const rt_driver_t *d, cudaStream_t stream, void *devPtr, size_t length, unsigned flags)
{
    return RT_FORWARD(d->cuStreamAttachMemAsync(stream, (CUdeviceptr)(uintptr_t)devPtr, length, flags));
}

RT_STREAM_API(cudaStreamAttachMemAsync, cudaStreamAttachMemAsync_ptsz, rt_attach,
              (cudaStream_t stream, void *devPtr, size_t length, unsigned int flags), stream, devPtr, length, flags)

static CUmemLocation rt_location(struct cudaMemLocation l)
{
    return (CUmemLocation){(CUmemLocationType)l.type, l.id};
}

RT_HIDDEN cudaError_t rt_prefetch(const rt_driver_t *d, const void *devPtr, size_t count,
                                  struct cudaMemLocation location, unsigned flags, cudaStream_t stream)
{
    return RT_FORWARD(
        d->cuMemPrefetchAsync_v2((CUdeviceptr)(uintptr_t)devPtr, count, rt_location(location), flags, stream));
}

RT_HIDDEN cudaError_t rt_advise(const void *devPtr, size_t count, enum cudaMemoryAdvise advice,
                                struct cudaMemLocation location)
{
    return RT_FORWARD(
        RT_DRV->cuMemAdvise_v2((CUdeviceptr)(uintptr_t)devPtr, count, (CUmem_advise)advice, rt_location(location)));
}

RT_API cudaError_t cudaMemRangeGetAttributes(void **data, size_t *dataSizes, enum cudaMemRangeAttribute *attributes,
                                             size_t numAttributes, const void *devPtr, size_t count)
{
    _Static_assert(sizeof(enum cudaMemRangeAttribute) == sizeof(CUmem_range_attribute), "range attributes differ");
    return rt_ret(RT_FORWARD(RT_DRV->cuMemRangeGetAttributes(data, dataSizes, (CUmem_range_attribute *)attributes,
                                                             numAttributes, (CUdeviceptr)(uintptr_t)devPtr, count)));
}

RT_API cudaError_t cudaMemRangeGetAttribute(void *data, size_t dataSize, enum cudaMemRangeAttribute attribute,
                                            const void *devPtr, size_t count)
{
    return cudaMemRangeGetAttributes(&data, &dataSize, &attribute, 1, devPtr, count);
}
