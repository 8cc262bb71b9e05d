/*
 * Driver API of the simulated device: IPC of device memory between
 * processes (engine_ipc.c has the model and the error codes).
 *
 * As on a GPU, a handle names a whole cuMemAlloc allocation: taken from a
 * pointer anywhere inside it, it opens at the allocation's start.  Memory
 * from a stream-ordered pool is not exportable this way (the default pool
 * has no IPC handle type; an exportable pool shares its allocations
 * through driver_pool_share.c), nor is host memory.
 *
 * IPC events (engine.h, "IPC events"): an event created with
 * CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING (cuEventCreate refuses
 * the first without the second) exports a handle; another event is
 * CUDA_ERROR_INVALID_HANDLE, as on a GPU.  The opened event behaves like
 * one created with CU_EVENT_DISABLE_TIMING in the importer: it can be
 * recorded, waited for, queried and synchronised in either process.
 */
#include <string.h>

#include "driver.h"

SIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_alloc_t *a = sim_alloc_live(dptr);
    if (!pHandle || !a || a->kind != SIM_ALLOC_DEVICE)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_ipc_handle_t h;
    r = sim_ipc_export(a, SIM_IPC_MAGIC_MEM, &h);
    if (r == CUDA_SUCCESS)
        memcpy(pHandle->reserved, &h, sizeof h);
    return drv_leave(r);
}

SIM_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    uintptr_t p = 0;
    sim_ipc_handle_t h;
    memcpy(&h, handle.reserved, sizeof h);
    r = sim_ipc_open(ctx, ctx->dev, SIM_IPC_MAGIC_MEM, &h, &p);
    if (r == CUDA_SUCCESS)
        *pdptr = (CUdeviceptr)p;
    return drv_leave(r);
}

/* The CUDA 4.1 name; the same ABI. */
SIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
SIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

/* The last close waits for the work queued on the importing device, which
 * may still use the mapping. */
SIM_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    int device;
    bool last;
    if (!sim_ipc_is_open(dptr, &device, &last))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (last)
        sim_device_wait_idle(&sim.dev[device]);
    return drv_leave(sim_ipc_close(dptr, false));
}

SIM_API CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pHandle)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(event, SIM_MAGIC_EVENT))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    sim_ipc_event_handle_t h;
    r = sim_ipc_event_export(event, &h);
    if (r == CUDA_SUCCESS)
        memcpy(pHandle->reserved, &h, sizeof h);
    return drv_leave(r);
}

SIM_API CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phEvent)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_ipc_event_handle_t h;
    memcpy(&h, handle.reserved, sizeof h);
    struct CUevent_st *e = NULL;
    r = sim_ipc_event_open(ctx, &h, &e);
    if (r == CUDA_SUCCESS) {
        handle_add(e, SIM_MAGIC_EVENT);
        *phEvent = e;
    }
    return drv_leave(r);
}
