/*
 * Driver API of the simulated device: what a pointer is.  cuPointerGet-
 * Attribute(s), cuPointerSetAttribute and cuMemGetAddressRange answer from
 * the table of live allocations, by address (unified addressing: any
 * context current, or none, except where CUDA needs one).
 *
 * The answers, per kind of allocation (a freed one is unknown memory):
 *
 *   attribute              cuMemAlloc     pool (Async)   pinned/registered  managed   unknown (Attributes)
 *                          (an IPC import answers as cuMemAlloc memory, except IPC_CAPABLE 0)
 *   MEMORY_TYPE            DEVICE         DEVICE         HOST               DEVICE    0
 *   DEVICE_POINTER         ptr            ptr            ptr                ptr       0
 *   HOST_POINTER           (error)        (error)        ptr                ptr       NULL
 *   RANGE_START/SIZE       the allocation as requested (cuMemGetAddressRange too, host memory included)
 *   MAPPING_BASE/SIZE      the allocation as rounded (512 B packing, 2 MiB pages)
 *   BUFFER_ID              unique per allocation, never reused                 0
 *   MEMORY_BLOCK_ID        the same (each allocation is its own physical allocation)
 *   IS_LEGACY_CUDA_IPC_CAPABLE  1          0              0                  0         0
 *   IS_GPU_DIRECT_RDMA_CAPABLE  1          1              0                  0         0
 *   MEMPOOL_HANDLE         NULL           its pool       NULL               NULL      NULL
 *   DEVICE_ORDINAL         its device                                                 -2
 *   CONTEXT, IS_MANAGED, MAPPED (1), SYNC_MEMOPS (settable), ACCESS_FLAGS
 *   (read-write), ALLOWED_HANDLE_TYPES (none: no allocation here is
 *   exportable through cuMemExportToShareableHandle), P2P_TOKENS (cuMemAlloc
 *   memory only), IS_HW_DECOMPRESS_CAPABLE (0).
 *
 * A mapping of the virtual memory API (cuMemMap) answers as device memory:
 * RANGE_START_ADDR and RANGE_SIZE are its reservation's, as cuda.h says
 * ("not necessarily the address of the mapped region, but the address of
 * the mappable address range"); MAPPING_* and cuMemGetAddressRange the
 * mapping's, as the 2025-26 reports in shared/notes/vmm.md 1.5 say a GPU
 * answers; CONTEXT NULL; BUFFER_ID its own, MEMORY_BLOCK_ID its
 * physical allocation's (aliases share it); ALLOWED_HANDLE_TYPES and
 * IS_GPU_DIRECT_RDMA_CAPABLE from cuMemCreate's properties; ACCESS_FLAGS
 * the current context's device's (cuMemSetAccess); IS_LEGACY_CUDA_IPC_-
 * CAPABLE 0; P2P_TOKENS an error.  Reserved addresses that are not mapped
 * are unknown memory, except that cuPointerGetAttributes answers their
 * reservation for RANGE_* (with MAPPED 0), as DALI's tests expect.
 *
 * cuPointerGetAttribute returns CUDA_ERROR_INVALID_VALUE for unknown
 * memory; cuPointerGetAttributes answers the defaults in the last column.
 */
#include <string.h>

#include <unistd.h>

#include "driver.h"
#include "engine_vmm.h"

static bool device_kind(const sim_alloc_t *a)
{
    return a->kind == SIM_ALLOC_DEVICE || a->kind == SIM_ALLOC_POOL || a->kind == SIM_ALLOC_IPC ||
           a->kind == SIM_ALLOC_VMM || a->kind == SIM_ALLOC_GRAPH || a->kind == SIM_ALLOC_MODULE;
}

/* A mapping's access for the current context's device (or its own). */
static unsigned vmm_access(const sim_alloc_t *a)
{
    struct CUctx_st *cur = sim_ctx_current();
    return a->access[sim_ctx_valid(cur) ? cur->dev->ordinal : a->device];
}

static bool host_kind(const sim_alloc_t *a)
{
    return a->kind == SIM_ALLOC_HOST || a->kind == SIM_ALLOC_REGISTERED;
}

/* Writes one attribute of allocation a (NULL: unknown pointer, the
 * defaults of cuPointerGetAttributes).  CUDA_ERROR_INVALID_VALUE for an
 * attribute that does not apply to a, or an unknown attribute. */
static CUresult pointer_attr(void *data, CUpointer_attribute attr, sim_alloc_t *a, CUdeviceptr ptr)
{
    switch ((int)attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = a ? a->ctx : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = !a ? 0 : host_kind(a) ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = a ? ptr : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void **)data = a && !device_kind(a) ? (void *)(uintptr_t)ptr : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS: {
        CUDA_POINTER_ATTRIBUTE_P2P_TOKENS *t = data;
        if (a && a->kind != SIM_ALLOC_DEVICE)
            return CUDA_ERROR_INVALID_VALUE;
        t->p2pToken = a ? a->buffer_id : 0;
        t->vaSpaceToken = a ? (unsigned)a->device + 1 : 0;
        if (a)
            a->sync_memops = true; /* the documented side effect */
        return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(unsigned char *)data = a && a->sync_memops;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = a ? a->buffer_id : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = !a ? 0 : a->kind == SIM_ALLOC_VMM ? a->phys->block_id : a->buffer_id;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned char *)data = a && a->kind == SIM_ALLOC_MANAGED;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = a ? a->device : -2;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(unsigned char *)data = a && a->kind == SIM_ALLOC_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: {
        /* virtual memory: the reservation, mapped or not ("not necessarily
         * the address of the mapped region", cuda.h) */
        const sim_reservation_t *res = (!a || a->kind == SIM_ALLOC_VMM) ? sim_vmm_reservation_of(ptr) : NULL;
        uintptr_t start = res ? res->addr : a ? a->addr : 0;
        size_t size = res ? res->size : a ? a->size : 0;
        if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
            *(CUdeviceptr *)data = start;
        else
            *(size_t *)data = size;
        return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = a ? a->addr : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        /* an IPC mapping covers the exporter's whole rounded allocation */
        *(size_t *)data = !a                         ? 0
                          : a->reserved              ? a->reserved
                          : a->kind == SIM_ALLOC_IPC ? sim_dev_round(a->size)
                                                     : a->size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned char *)data = a != NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = a && a->kind == SIM_ALLOC_VMM
                                          ? (unsigned long long)a->phys->prop.requestedHandleTypes
                                          : CU_MEM_HANDLE_TYPE_NONE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        *(unsigned char *)data =
            a && (a->kind == SIM_ALLOC_VMM ? a->phys->prop.allocFlags.gpuDirectRDMACapable != 0 : device_kind(a));
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        /* CU_MEM_ACCESS_FLAGS_PROT_* and the attribute's flags have the same values */
        *(unsigned int *)data = !a                         ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE
                                : a->kind == SIM_ALLOC_VMM ? vmm_access(a)
                                                           : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = a && a->kind == SIM_ALLOC_POOL ? a->pool : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        *(unsigned char *)data = 0;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!data)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (attribute == CU_POINTER_ATTRIBUTE_DEVICE_POINTER && !sim_ctx_valid(sim_ctx_current()))
        return drv_leave(CUDA_ERROR_INVALID_CONTEXT);
    sim_alloc_t *a = sim_alloc_live(ptr);
    if (!a)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (attribute == CU_POINTER_ATTRIBUTE_HOST_POINTER && device_kind(a))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    return drv_leave(pointer_attr(data, attribute, a, ptr));
}

/* Unlike cuPointerGetAttribute, an unknown pointer is not an error: every
 * attribute reads as its default. */
SIM_API CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
                                        CUdeviceptr ptr)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!attributes || !data)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_alloc_t *a = sim_alloc_live(ptr);
    for (unsigned i = 0; i < numAttributes; i++) {
        if (!data[i])
            continue;
        r = pointer_attr(data[i], attributes[i], a, ptr);
        if (r != CUDA_SUCCESS)
            return drv_leave(r);
    }
    return drv_leave(CUDA_SUCCESS);
}

/* Only SYNC_MEMOPS can be set, on memory the program holds.  Booleans are
 * read and written as one byte, whatever wider integer holds them. */
SIM_API CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_alloc_t *a = sim_alloc_live(ptr);
    if (!value || !a || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    a->sync_memops = *(const unsigned char *)value != 0;
    return drv_leave(CUDA_SUCCESS);
}

/* A dma-buf of [dptr, dptr + size) for another driver to import (a NIC's,
 * by GPUDirect RDMA): device memory of one allocation the program holds,
 * both ends aligned to the host page; flags 0, or the PCIe mapping type
 * (1, CUDA 12.8); of virtual memory, one mapping only (a simplification).
 * The fd is the device's memory file, duplicated: its bytes are the
 * range's at offset address - base (a real dma-buf is the range alone; no
 * test maps it). */
SIM_API CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
                                               CUmemRangeHandleType handleType, unsigned long long flags)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (!handle || handleType != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || (flags & ~1ull) || size == 0 ||
        dptr % page || size % page)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_alloc_t *a = sim_alloc_live(dptr);
    if (!a || (a->kind != SIM_ALLOC_DEVICE && a->kind != SIM_ALLOC_POOL && a->kind != SIM_ALLOC_VMM) ||
        size > a->addr + (a->reserved ? a->reserved : a->size) - dptr)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    int fd = dup(sim.dev[a->device].memfd);
    if (fd < 0)
        return drv_leave(CUDA_ERROR_OUT_OF_MEMORY);
    *(int *)handle = fd;
    return drv_leave(CUDA_SUCCESS);
}

/* The allocation containing dptr, as requested: device memory, and pinned
 * or registered host memory through its device pointer (which, with unified
 * addressing, is the host pointer: numba sizes mapped arrays this way). */
SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_alloc_t *a = sim_alloc_live(dptr);
    if (!a)
        return drv_leave(CUDA_ERROR_NOT_FOUND);
    if (pbase)
        *pbase = a->addr;
    if (psize)
        *psize = a->size;
    return drv_leave(CUDA_SUCCESS);
}
