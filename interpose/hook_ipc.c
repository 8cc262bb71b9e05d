/*
 * IPC hooks: cuIpcGetMemHandle, cuIpcOpenMemHandle(_v2), cuIpcCloseMemHandle
 * and the runtime's cudaIpcGetMemHandle, cudaIpcOpenMemHandle,
 * cudaIpcCloseMemHandle (a runtime may reach the driver by its own means).
 * ipc.c keeps the state; docs/interposer.md ("IPC") says what a peer gets.
 *
 *   export: a live cucache block gets ipc.c's handle (ipc:strict: CUDA's
 *           own, at a segment's start only); memory cucache freed is not
 *           exportable (CUDA_ERROR_INVALID_VALUE, as for freed memory);
 *           anything else goes to CUDA;
 *   open:   a handle cucache made opens exactly the exported block; any
 *           other goes to CUDA;
 *   close:  an address cucache opened is closed by it; any other by CUDA.
 */
#include "hook.h"
#include "ipc.h"
#include "real.h"
#include "state.h"

/* The runtime's last error must say what the hook returned.  Only
 * cudaErrorInvalidValue can be set without side effects (freeing an
 * address that is never an allocation); other codes are returned as is. */
static cudaError_t rt_failed(CUresult r)
{
    if (r == CUDA_ERROR_INVALID_VALUE)
        (void)RT_REAL(cudaFree, (void *)(uintptr_t)1);
    return (cudaError_t)r;
}

/* The export of a cucache address: CUDA_ERROR_NOT_FOUND when it is not
 * one (the real call answers). */
static CUresult export_any(uintptr_t p, char handle[64])
{
    core_ptr_info_t info;
    hook_dev_t *hd;
    switch (hook_describe(p, &info, &hd)) {
    case CORE_WHERE_NONE:
        return CUDA_ERROR_NOT_FOUND;
    case CORE_WHERE_DEAD:
        return CUDA_ERROR_INVALID_VALUE; /* freed memory */
    default:
        /* a block this process opened by IPC cannot be exported again */
        return hd ? hook_ipc_export(hd, &info, handle) : CUDA_ERROR_INVALID_VALUE;
    }
}

HOOK_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (!hook_bypass() && pHandle)
        r = export_any((uintptr_t)dptr, pHandle->reserved);
    return r == CUDA_ERROR_NOT_FOUND ? CU_REAL(cuIpcGetMemHandle, pHandle, dptr) : r;
}

static CUresult open_driver(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    if (hook_bypass() || !pdptr || !hook_ipc_is_ours(handle.reserved))
        return CU_REAL(cuIpcOpenMemHandle_v2, pdptr, handle, Flags);
    if (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p = 0;
    CUresult r = hook_ipc_open(handle.reserved, Flags, NULL, &p);
    if (r == CUDA_SUCCESS)
        *pdptr = (CUdeviceptr)p;
    return r;
}

HOOK_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return open_driver(pdptr, handle, Flags);
}

/* The CUDA 4.1 name, the same ABI (cuda_api.h declares only _v2). */
HOOK_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
HOOK_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return open_driver(pdptr, handle, Flags);
}

HOOK_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CUresult r = hook_bypass() ? CUDA_ERROR_NOT_FOUND : hook_ipc_close((uintptr_t)dptr);
    return r == CUDA_ERROR_NOT_FOUND ? CU_REAL(cuIpcCloseMemHandle, dptr) : r;
}

HOOK_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (!hook_bypass() && handle)
        r = export_any((uintptr_t)devPtr, handle->reserved);
    if (r == CUDA_ERROR_NOT_FOUND)
        return RT_REAL(cudaIpcGetMemHandle, handle, devPtr);
    return r == CUDA_SUCCESS ? cudaSuccess : rt_failed(r);
}

HOOK_API cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    if (hook_bypass() || !devPtr || !hook_ipc_is_ours(handle.reserved))
        return RT_REAL(cudaIpcOpenMemHandle, devPtr, handle, flags);
    if (flags & ~(unsigned)cudaIpcMemLazyEnablePeerAccess)
        return rt_failed(CUDA_ERROR_INVALID_VALUE);
    /* the runtime's current device, its primary context current around the open */
    hook_dev_t *hd = hook_rt_device(true);
    if (!hd)
        return rt_failed(CUDA_ERROR_INVALID_VALUE);
    uintptr_t p = 0;
    CUresult r = hook_ipc_open(handle.reserved, flags, hd, &p);
    if (r != CUDA_SUCCESS)
        return rt_failed(r);
    *devPtr = (void *)p;
    return cudaSuccess;
}

HOOK_API cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    CUresult r = hook_bypass() ? CUDA_ERROR_NOT_FOUND : hook_ipc_close((uintptr_t)devPtr);
    if (r == CUDA_ERROR_NOT_FOUND)
        return RT_REAL(cudaIpcCloseMemHandle, devPtr);
    return r == CUDA_SUCCESS ? cudaSuccess : rt_failed(r);
}
