/*
 * The simulated runtime's memory calls: device, pinned-host and managed
 * allocation, pointer attributes, copies and memsets, stream-ordered
 * allocation and memory pools.  Each is a translation to the driver call
 * of the same meaning, in the current device's primary context.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "runtime_internal.h"
#include "runtime_major.h"

/* Device pointer to the runtime's void * and back. */
static void *rt_host_ptr(CUdeviceptr p)
{
    return (void *)(uintptr_t)p;
}

static CUdeviceptr rt_dptr(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

/* After a driver call that gave the device pointer *p: the program's
 * pointer *out set when it succeeded, and e the runtime's result. */
static cudaError_t rt_ptr_ret(cudaError_t e, const CUdeviceptr *p, void **out)
{
    if (e == cudaSuccess)
        *out = rt_host_ptr(*p);
    return rt_ret(e);
}

/* ------------------------------------------------------------------------
 * Device, pinned-host and managed allocation
 * ---------------------------------------------------------------------- */

/* Size 0 gives NULL without a device allocation, as the real runtime. */
RT_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    CUdeviceptr p = 0;
    if (!devPtr)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_enter();
    if (e != cudaSuccess)
        return rt_ret(e);
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    e = rt_err(RT_DRV->cuMemAlloc_v2(&p, size));
    if (e == cudaSuccess)
        *devPtr = rt_host_ptr(p);
    return rt_ret(e);
}

/* cudaFree(NULL) only makes sure the context exists (a common idiom). */
RT_API cudaError_t cudaFree(void *devPtr)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess || !devPtr)
        return rt_ret(e);
    return rt_ret(rt_err(RT_DRV->cuMemFree_v2(rt_dptr(devPtr))));
}

RT_API cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuMemGetInfo_v2(free, total)));
}

RT_API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    if (!ptr)
        return rt_ret(cudaErrorInvalidValue);
    return rt_ret(RT_FORWARD(RT_DRV->cuMemAllocHost_v2(ptr, size)));
}

/* The cudaHostAlloc* flags have the CU_MEMHOSTALLOC_* values. */
RT_API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    if (!pHost)
        return rt_ret(cudaErrorInvalidValue);
    return rt_ret(RT_FORWARD(RT_DRV->cuMemHostAlloc(pHost, size, flags)));
}

RT_API cudaError_t cudaFreeHost(void *ptr)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess || !ptr)
        return rt_ret(e);
    return rt_ret(rt_err(RT_DRV->cuMemFreeHost(ptr)));
}

/* flags: cudaMemAttachGlobal (C++'s default) or cudaMemAttachHost, the
 * CU_MEM_ATTACH_* values. */
RT_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    CUdeviceptr p = 0;
    if (!devPtr)
        return rt_ret(cudaErrorInvalidValue);
    return rt_ptr_ret(RT_FORWARD(RT_DRV->cuMemAllocManaged(&p, size, flags)), &p, devPtr);
}

/* ------------------------------------------------------------------------
 * Registered host memory (the cudaHostRegister* flags have the
 * CU_MEMHOSTREGISTER_* values)
 * ---------------------------------------------------------------------- */

RT_API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuMemHostRegister_v2(ptr, size, flags)));
}

RT_API cudaError_t cudaHostUnregister(void *ptr)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuMemHostUnregister(ptr)));
}

RT_API cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
    CUdeviceptr p = 0;
    if (!pDevice)
        return rt_ret(cudaErrorInvalidValue);
    return rt_ptr_ret(RT_FORWARD(RT_DRV->cuMemHostGetDevicePointer_v2(&p, pHost, flags)), &p, pDevice);
}

RT_API cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuMemHostGetFlags(pFlags, pHost)));
}

/* ------------------------------------------------------------------------
 * Pitched allocation
 * ---------------------------------------------------------------------- */

RT_API cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    CUdeviceptr p = 0;
    if (!devPtr || !pitch)
        return rt_ret(cudaErrorInvalidValue);
    return rt_ptr_ret(RT_FORWARD(RT_DRV->cuMemAllocPitch_v2(&p, pitch, width, height, 4)), &p, devPtr);
}

/* A pitched allocation of depth slices of height rows. */
RT_API cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
    CUdeviceptr p = 0;
    size_t pitch = 0;
    if (!pitchedDevPtr)
        return rt_ret(cudaErrorInvalidValue);
    if (extent.height && extent.depth > SIZE_MAX / extent.height)
        return rt_ret(cudaErrorMemoryAllocation);
    cudaError_t e = rt_enter();
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuMemAllocPitch_v2(&p, &pitch, extent.width, extent.height * extent.depth, 4));
    if (e == cudaSuccess)
        *pitchedDevPtr = (struct cudaPitchedPtr){rt_host_ptr(p), pitch, extent.width, extent.height};
    return rt_ret(e);
}

/* ------------------------------------------------------------------------
 * IPC (cudaIpcMemHandle_t and CUipcMemHandle share their 64 bytes)
 * ---------------------------------------------------------------------- */

RT_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    CUipcMemHandle h;
    if (!handle)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_enter();
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuIpcGetMemHandle(&h, rt_dptr(devPtr)));
    if (e == cudaSuccess)
        memcpy(handle->reserved, h.reserved, sizeof h.reserved);
    return rt_ret(e);
}

RT_API cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    CUipcMemHandle h;
    CUdeviceptr p = 0;
    if (!devPtr)
        return rt_ret(cudaErrorInvalidValue);
    memcpy(h.reserved, handle.reserved, sizeof h.reserved);
    return rt_ptr_ret(RT_FORWARD(RT_DRV->cuIpcOpenMemHandle_v2(&p, h, flags)), &p, devPtr);
}

RT_API cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuIpcCloseMemHandle(rt_dptr(devPtr))));
}

/* ------------------------------------------------------------------------
 * Pointer attributes
 * ---------------------------------------------------------------------- */

/* The driver answers zeros for memory it does not know: that is plain
 * (unregistered) host memory, which the real runtime reports with device -2
 * and the pointer itself as host pointer. */
/* Fills CUDA 13's struct; the caller's has rt_abi.pointer_attributes bytes
 * of it (CUDA 12's ends before the reserved words). */
static cudaError_t rt_pointer_attributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    unsigned int type = 0, managed = 0;
    int ordinal = 0;
    CUdeviceptr dptr = 0;
    void *hptr = NULL;
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED};
    void *data[] = {&type, &ordinal, &dptr, &hptr, &managed};
    cudaError_t e = rt_enter();
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuPointerGetAttributes(5, which, data, rt_dptr(ptr)));
    if (e != cudaSuccess)
        return e;
    *attributes = (struct cudaPointerAttributes){0};
    if (managed) {
        attributes->type = cudaMemoryTypeManaged;
    } else if (type == CU_MEMORYTYPE_DEVICE) {
        attributes->type = cudaMemoryTypeDevice;
    } else if (type == CU_MEMORYTYPE_HOST) {
        attributes->type = cudaMemoryTypeHost;
    } else {
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2;
        attributes->hostPointer = (void *)(uintptr_t)ptr;
        return cudaSuccess;
    }
    attributes->device = ordinal;
    attributes->devicePointer = rt_host_ptr(dptr);
    attributes->hostPointer = hptr;
    return cudaSuccess;
}

RT_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    struct cudaPointerAttributes a;
    if (!attributes)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_pointer_attributes(&a, ptr);
    if (e == cudaSuccess)
        memcpy(attributes, &a, rt_abi.pointer_attributes);
    return rt_ret(e);
}

/* ------------------------------------------------------------------------
 * Copies and memsets (unified addressing: the driver finds the direction)
 * ---------------------------------------------------------------------- */

/* Checks a copy's direction; count 0 is then a successful no-op. */
static cudaError_t rt_memcpy_check(enum cudaMemcpyKind kind)
{
    if ((unsigned)kind > (unsigned)cudaMemcpyDefault)
        return cudaErrorInvalidMemcpyDirection;
    return rt_enter();
}

static cudaError_t rt_memcpy(const rt_driver_t *d, void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    cudaError_t e = rt_memcpy_check(kind);
    if (e != cudaSuccess || count == 0)
        return e;
    return rt_err(d->cuMemcpy(rt_dptr(dst), rt_dptr(src), count));
}

static cudaError_t rt_memcpy_async(const rt_driver_t *d, void *dst, const void *src, size_t count,
                                   enum cudaMemcpyKind kind, cudaStream_t stream)
{
    cudaError_t e = rt_memcpy_check(kind);
    if (e != cudaSuccess || count == 0)
        return e;
    return rt_err(d->cuMemcpyAsync(rt_dptr(dst), rt_dptr(src), count, stream));
}

static cudaError_t rt_memset(const rt_driver_t *d, void *devPtr, int value, size_t count)
{
    return RT_FORWARD(d->cuMemsetD8_v2(rt_dptr(devPtr), (unsigned char)value, count));
}

static cudaError_t rt_memset_async(const rt_driver_t *d, void *devPtr, int value, size_t count, cudaStream_t stream)
{
    return RT_FORWARD(d->cuMemsetD8Async(rt_dptr(devPtr), (unsigned char)value, count, stream));
}

/* 2D copies: the driver's CUDA_MEMCPY2D, both sides unified (the driver
 * finds the direction).  A row wider than a pitch is
 * cudaErrorInvalidPitchValue, as the real runtime answers. */
static cudaError_t rt_memcpy2d_any(const rt_driver_t *d, void *dst, size_t dpitch, const void *src, size_t spitch,
                                   size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream,
                                   bool async)
{
    cudaError_t e = rt_memcpy_check(kind);
    if (e != cudaSuccess || width == 0 || height == 0)
        return e;
    if (width > dpitch || width > spitch)
        return cudaErrorInvalidPitchValue;
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    c.srcDevice = rt_dptr(src);
    c.srcPitch = spitch;
    c.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    c.dstDevice = rt_dptr(dst);
    c.dstPitch = dpitch;
    c.WidthInBytes = width;
    c.Height = height;
    return rt_err(async ? d->cuMemcpy2DAsync_v2(&c, stream) : d->cuMemcpy2D_v2(&c));
}

static cudaError_t rt_memcpy2d(const rt_driver_t *d, void *dst, size_t dpitch, const void *src, size_t spitch,
                               size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return rt_memcpy2d_any(d, dst, dpitch, src, spitch, width, height, kind, NULL, false);
}

static cudaError_t rt_memcpy2d_async(const rt_driver_t *d, void *dst, size_t dpitch, const void *src, size_t spitch,
                                     size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return rt_memcpy2d_any(d, dst, dpitch, src, spitch, width, height, kind, stream, true);
}

static cudaError_t rt_memset2d(const rt_driver_t *d, void *devPtr, size_t pitch, int value, size_t width,
                               size_t height)
{
    cudaError_t e = rt_enter();
    return e != cudaSuccess ? e
                            : rt_err(d->cuMemsetD2D8_v2(rt_dptr(devPtr), pitch, (unsigned char)value, width, height));
}

static cudaError_t rt_memset2d_async(const rt_driver_t *d, void *devPtr, size_t pitch, int value, size_t width,
                                     size_t height, cudaStream_t stream)
{
    cudaError_t e = rt_enter();
    return e != cudaSuccess
               ? e
               : rt_err(d->cuMemsetD2D8Async(rt_dptr(devPtr), pitch, (unsigned char)value, width, height, stream));
}

RT_STREAM_API(cudaMemcpy2D, cudaMemcpy2D_ptds, rt_memcpy2d,
              (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
               enum cudaMemcpyKind kind),
              dst, dpitch, src, spitch, width, height, kind)
RT_STREAM_API(cudaMemcpy2DAsync, cudaMemcpy2DAsync_ptsz, rt_memcpy2d_async,
              (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
               enum cudaMemcpyKind kind, cudaStream_t stream),
              dst, dpitch, src, spitch, width, height, kind, stream)
RT_STREAM_API(cudaMemset2D, cudaMemset2D_ptds, rt_memset2d,
              (void *devPtr, size_t pitch, int value, size_t width, size_t height), devPtr, pitch, value, width,
              height)
RT_STREAM_API(cudaMemset2DAsync, cudaMemset2DAsync_ptsz, rt_memset2d_async,
              (void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream), devPtr,
              pitch, value, width, height, stream)

RT_STREAM_API(cudaMemcpy, cudaMemcpy_ptds, rt_memcpy,
              (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind), dst, src, count, kind)
RT_STREAM_API(cudaMemcpyAsync, cudaMemcpyAsync_ptsz, rt_memcpy_async,
              (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream), dst, src,
              count, kind, stream)
RT_STREAM_API(cudaMemset, cudaMemset_ptds, rt_memset, (void *devPtr, int value, size_t count), devPtr, value, count)
RT_STREAM_API(cudaMemsetAsync, cudaMemsetAsync_ptsz, rt_memset_async,
              (void *devPtr, int value, size_t count, cudaStream_t stream), devPtr, value, count, stream)

/* ------------------------------------------------------------------------
 * Stream-ordered allocation
 * ---------------------------------------------------------------------- */

static cudaError_t rt_malloc_async(const rt_driver_t *d, void **devPtr, size_t size, cudaStream_t stream)
{
    CUdeviceptr p = 0;
    if (!devPtr)
        return cudaErrorInvalidValue;
    cudaError_t e = rt_enter();
    if (e == cudaSuccess)
        e = rt_err(d->cuMemAllocAsync(&p, size, stream));
    if (e == cudaSuccess)
        *devPtr = rt_host_ptr(p);
    return e;
}

static cudaError_t rt_free_async(const rt_driver_t *d, void *devPtr, cudaStream_t stream)
{
    return RT_FORWARD(d->cuMemFreeAsync(rt_dptr(devPtr), stream));
}

static cudaError_t rt_malloc_from_pool_async(const rt_driver_t *d, void **ptr, size_t size, cudaMemPool_t pool,
                                             cudaStream_t stream)
{
    CUdeviceptr p = 0;
    if (!ptr)
        return cudaErrorInvalidValue;
    cudaError_t e = rt_enter();
    if (e == cudaSuccess)
        e = rt_err(d->cuMemAllocFromPoolAsync(&p, size, pool, stream));
    if (e == cudaSuccess)
        *ptr = rt_host_ptr(p);
    return e;
}

RT_STREAM_API(cudaMallocAsync, cudaMallocAsync_ptsz, rt_malloc_async,
              (void **devPtr, size_t size, cudaStream_t hStream), devPtr, size, hStream)
RT_STREAM_API(cudaFreeAsync, cudaFreeAsync_ptsz, rt_free_async, (void *devPtr, cudaStream_t hStream), devPtr, hStream)
RT_STREAM_API(cudaMallocFromPoolAsync, cudaMallocFromPoolAsync_ptsz, rt_malloc_from_pool_async,
              (void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream), ptr, size, memPool, stream)

/* ------------------------------------------------------------------------
 * Memory pools (struct cudaMemPoolProps and CUmemPoolProps share a layout,
 * cudaMemPoolAttr and CUmemPool_attribute their values)
 * ---------------------------------------------------------------------- */

RT_API cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps)
{
    CUmemPoolProps props;
    if (!memPool || !poolProps)
        return rt_ret(cudaErrorInvalidValue);
    _Static_assert(sizeof props == sizeof *poolProps, "pool props layouts differ");
    memcpy(&props, poolProps, sizeof props);
    return rt_ret(RT_FORWARD(RT_DRV->cuMemPoolCreate(memPool, &props)));
}

RT_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuMemPoolDestroy(memPool)));
}

RT_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    cudaError_t e = rt_enter();
    return rt_ret(e != cudaSuccess ? e
                                   : rt_err(RT_DRV->cuMemPoolSetAttribute(memPool, (CUmemPool_attribute)attr, value)));
}

RT_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    cudaError_t e = rt_enter();
    return rt_ret(e != cudaSuccess ? e
                                   : rt_err(RT_DRV->cuMemPoolGetAttribute(memPool, (CUmemPool_attribute)attr, value)));
}

RT_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuMemPoolTrimTo(memPool, minBytesToKeep)));
}

/* Checks the ordinal and enters the current device's context (the pool
 * calls below name a device but, like the real runtime, run in one). */
static cudaError_t rt_enter_device(int device, CUdevice *dev)
{
    cudaError_t e = rt_enter();
    return e != cudaSuccess ? e : rt_device(device, dev);
}

RT_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    CUdevice dev;
    cudaError_t e = rt_enter_device(device, &dev);
    return rt_ret(e != cudaSuccess ? e : rt_err(RT_DRV->cuDeviceGetDefaultMemPool(memPool, dev)));
}

RT_API cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
    CUdevice dev;
    cudaError_t e = rt_enter_device(device, &dev);
    return rt_ret(e != cudaSuccess ? e : rt_err(RT_DRV->cuDeviceGetMemPool(memPool, dev)));
}

RT_API cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
    CUdevice dev;
    cudaError_t e = rt_enter_device(device, &dev);
    return rt_ret(e != cudaSuccess ? e : rt_err(RT_DRV->cuDeviceSetMemPool(dev, memPool)));
}
