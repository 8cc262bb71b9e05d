/*
 * The simulated runtime's peer access, peer copies, IPC events and pools
 * shared between processes: each a translation to the driver call of the
 * same meaning (driver_peer.c, driver_ipc.c, driver_pool_share.c), with the
 * devices named by ordinal turned into their primary contexts.
 *
 * The runtime's own rules: a device and itself are not peers, so enabling
 * or disabling access to the current device is cudaErrorInvalidDevice, as
 * is enabling access the devices cannot have (cudaDeviceCanAccessPeer 0);
 * the other errors are the driver's, whose numbers the runtime shares
 * (CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED is
 * cudaErrorPeerAccessAlreadyEnabled, CUDA_ERROR_INVALID_HANDLE
 * cudaErrorInvalidResourceHandle, ...).
 */
#include <stdint.h>
#include <string.h>

#include "runtime_internal.h"

/* ------------------------------------------------------------------------
 * Peer access
 * ---------------------------------------------------------------------- */

RT_API cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
    CUdevice dev, peer;
    cudaError_t e = rt_ready();
    if (e == cudaSuccess)
        e = rt_device(device, &dev);
    if (e == cudaSuccess)
        e = rt_device(peerDevice, &peer);
    if (e == cudaSuccess)
        e = canAccessPeer ? rt_err(RT_DRV->cuDeviceCanAccessPeer(canAccessPeer, dev, peer)) : cudaErrorInvalidValue;
    return rt_ret(e);
}

/* The primary context of peerDevice, a peer of the current device (the
 * current device's context made current). */
static cudaError_t rt_peer_ctx(int peerDevice, CUcontext *peer)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess)
        return e;
    CUcontext cur;
    int device;
    unsigned gen;
    rt_current(&cur, &device, &gen);
    CUdevice d;
    e = rt_device(peerDevice, &d);
    if (e == cudaSuccess && peerDevice == device)
        e = cudaErrorInvalidDevice;
    return e == cudaSuccess ? rt_primary_ctx(peerDevice, peer) : e;
}

RT_API cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    if (flags != 0)
        return rt_ret(cudaErrorInvalidValue);
    CUcontext peer = NULL;
    cudaError_t e = rt_peer_ctx(peerDevice, &peer);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuCtxEnablePeerAccess(peer, 0));
    return rt_ret(e == cudaErrorPeerAccessUnsupported ? cudaErrorInvalidDevice : e);
}

RT_API cudaError_t cudaDeviceDisablePeerAccess(int peerDevice)
{
    CUcontext peer = NULL;
    cudaError_t e = rt_peer_ctx(peerDevice, &peer);
    return rt_ret(e == cudaSuccess ? rt_err(RT_DRV->cuCtxDisablePeerAccess(peer)) : e);
}

RT_API cudaError_t cudaDeviceGetP2PAttribute(int *value, enum cudaDeviceP2PAttr attr, int srcDevice, int dstDevice)
{
    CUdevice src, dst;
    cudaError_t e = rt_ready();
    if (e == cudaSuccess)
        e = rt_device(srcDevice, &src);
    if (e == cudaSuccess)
        e = rt_device(dstDevice, &dst);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuDeviceGetP2PAttribute(value, (CUdevice_P2PAttribute)attr, src, dst));
    return rt_ret(e);
}

/* ------------------------------------------------------------------------
 * Peer copies
 * ---------------------------------------------------------------------- */

/* The primary contexts of a copy's two devices. */
static cudaError_t rt_copy_ctxs(int dstDevice, int srcDevice, CUcontext *dst, CUcontext *src)
{
    cudaError_t e = rt_enter();
    if (e == cudaSuccess)
        e = rt_primary_ctx(dstDevice, dst);
    if (e == cudaSuccess)
        e = rt_primary_ctx(srcDevice, src);
    return e;
}

RT_API cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count)
{
    CUcontext dctx, sctx;
    cudaError_t e = rt_copy_ctxs(dstDevice, srcDevice, &dctx, &sctx);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuMemcpyPeer((CUdeviceptr)(uintptr_t)dst, dctx, (CUdeviceptr)(uintptr_t)src, sctx, count));
    return rt_ret(e);
}

RT_API cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
                                       cudaStream_t stream)
{
    CUcontext dctx, sctx;
    cudaError_t e = rt_copy_ctxs(dstDevice, srcDevice, &dctx, &sctx);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuMemcpyPeerAsync((CUdeviceptr)(uintptr_t)dst, dctx, (CUdeviceptr)(uintptr_t)src, sctx,
                                             count, stream));
    return rt_ret(e);
}

/* ------------------------------------------------------------------------
 * IPC events (cudaIpcEventHandle_t and CUipcEventHandle share their 64 bytes)
 * ---------------------------------------------------------------------- */

RT_API cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event)
{
    _Static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(CUipcEventHandle), "IPC event handles differ");
    if (!handle)
        return rt_ret(cudaErrorInvalidValue);
    return rt_ret(RT_FORWARD(RT_DRV->cuIpcGetEventHandle((CUipcEventHandle *)handle, event)));
}

RT_API cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle)
{
    CUipcEventHandle h;
    memcpy(&h, &handle, sizeof h);
    if (!event)
        return rt_ret(cudaErrorInvalidValue);
    return rt_ret(RT_FORWARD(RT_DRV->cuIpcOpenEventHandle(event, h)));
}

/* ------------------------------------------------------------------------
 * Pools shared between processes, and their access (the runtime's
 * structs and the driver's share layouts and values)
 * ---------------------------------------------------------------------- */

_Static_assert(sizeof(struct cudaMemAccessDesc) == sizeof(CUmemAccessDesc), "access descriptors differ");
_Static_assert(sizeof(struct cudaMemLocation) == sizeof(CUmemLocation), "locations differ");
_Static_assert(sizeof(struct cudaMemPoolPtrExportData) == sizeof(CUmemPoolPtrExportData), "export data differ");

RT_API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc *descList, size_t count)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuMemPoolSetAccess(memPool, (const CUmemAccessDesc *)descList, count)));
}

RT_API cudaError_t cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t memPool,
                                        struct cudaMemLocation *location)
{
    return rt_ret(
        RT_FORWARD(RT_DRV->cuMemPoolGetAccess((CUmemAccess_flags *)flags, memPool, (CUmemLocation *)location)));
}

RT_API cudaError_t cudaMemPoolExportToShareableHandle(void *shareableHandle, cudaMemPool_t memPool,
                                                      enum cudaMemAllocationHandleType handleType, unsigned int flags)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuMemPoolExportToShareableHandle(
        shareableHandle, memPool, (CUmemAllocationHandleType)handleType, flags)));
}

RT_API cudaError_t cudaMemPoolImportFromShareableHandle(cudaMemPool_t *memPool, void *shareableHandle,
                                                        enum cudaMemAllocationHandleType handleType,
                                                        unsigned int flags)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuMemPoolImportFromShareableHandle(
        memPool, shareableHandle, (CUmemAllocationHandleType)handleType, flags)));
}

RT_API cudaError_t cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData *exportData, void *ptr)
{
    return rt_ret(RT_FORWARD(
        RT_DRV->cuMemPoolExportPointer((CUmemPoolPtrExportData *)exportData, (CUdeviceptr)(uintptr_t)ptr)));
}

RT_API cudaError_t cudaMemPoolImportPointer(void **ptr, cudaMemPool_t memPool,
                                            struct cudaMemPoolPtrExportData *exportData)
{
    CUdeviceptr p = 0;
    if (!ptr)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e =
        RT_FORWARD(RT_DRV->cuMemPoolImportPointer(&p, memPool, (CUmemPoolPtrExportData *)exportData));
    if (e == cudaSuccess)
        *ptr = (void *)(uintptr_t)p;
    return rt_ret(e);
}
