/*
 * Pointer queries: cuPointerGetAttribute, cuPointerGetAttributes,
 * cuPointerSetAttribute, cuMemGetHandleForAddressRange,
 * cuMemGetAddressRange_v2 and cudaPointerGetAttributes.  Communication
 * libraries register buffers by the range these answer and drop stale
 * registrations when the buffer id changes, so a cucache block must be
 * described as CUDA without a cache describes an allocation:
 *
 *   - inside a live block: the block is the allocation.  Its range is the
 *     block's start and requested size (what the driver answers for an
 *     allocation of that size), its mapping that size rounded as cudaMalloc
 *     maps it (512 bytes up to 1 MiB, 2 MiB pages), its buffer and memory
 *     block id the block's own (unique, never reused, also for a block
 *     handed out again at the same address).  A stream-ordered block
 *     answers as pool memory: its device's current pool, not IPC capable,
 *     no P2P tokens.  Every other attribute (context, device, memory type,
 *     access, ...) is the segment's, which is the block's.
 *   - inside cucache's memory but in no live block (freed, pending, cached,
 *     a block's rounding): freed memory, as the driver answers for memory
 *     it does not know (CUDA_ERROR_INVALID_VALUE, the defaults of
 *     cuPointerGetAttributes, CUDA_ERROR_NOT_FOUND, "unregistered").
 *   - anywhere else: the real call answers.
 * A peer's blocks opened by IPC answer the same way (hook_describe).
 *
 * The questions a library asks before something other than the device's
 * streams reaches a buffer (a NIC by GPUDirect RDMA, a CPU mapping by
 * GDRCopy: P2P tokens, SYNC_MEMOPS, the buffer id and range its
 * registration cache keys on, RDMA capability), and a dma-buf export,
 * first wait on the host for the fences that may have handed the block's
 * memory out (hand-outs give blocks out ahead of them, and that agent
 * does not wait for the device's ordering), as an IPC export does.  The questions every framework asks (type,
 * device, context, device pointer) do not wait.
 */
#include <string.h>

#include "hook.h"
#include "order.h"
#include "real.h"
#include "state.h"

/* The mapping cudaMalloc makes for `n` bytes. */
static size_t cuda_mapping(size_t n)
{
    const size_t small = (size_t)1 << 20, page = (size_t)2 << 20;
    return n <= small ? (n + 511) / 512 * 512 : (n + page - 1) / page * page;
}

/* An attribute of a live block that sub-allocation changes: written (1,
 * *r the result), or 0 when the segment's answer is the block's. */
static int block_attr(void *data, CUpointer_attribute attr, const core_ptr_info_t *b, const hook_dev_t *hd,
                      CUresult *r)
{
    bool ordered = b->stream != 0; /* cudaMallocAsync: what CUDA serves from a pool */
    *r = CUDA_SUCCESS;
    switch ((int)attr) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)b->base;
        return 1;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = b->requested;
        return 1;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = cuda_mapping(b->requested);
        return 1;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = b->id;
        return 1;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        if (!ordered)
            return 0;
        *(unsigned char *)data = 0;
        return 1;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: {
        CUmemoryPool pool = NULL;
        if (ordered && hd && CU_REAL(cuDeviceGetMemPool, &pool, hd->handle) != CUDA_SUCCESS)
            pool = NULL;
        *(CUmemoryPool *)data = pool;
        return 1;
    }
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
        if (!ordered)
            return 0;
        *r = CUDA_ERROR_INVALID_VALUE; /* tokens are for cuMemAlloc memory */
        return 1;
    default:
        return 0;
    }
}

/* Whether the attribute is one a library asks before an agent outside the
 * device's streams reaches the memory (see the top of this file). */
static bool reveals(CUpointer_attribute attr)
{
    switch ((int)attr) {
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        return true;
    default:
        return false;
    }
}

/* A live block is about to be reached from outside the device's streams:
 * the fences that may have handed out its memory complete first. */
static void revealed(hook_dev_t *hd, const core_ptr_info_t *info)
{
    if (hd)
        hook_order_wait(hd, hook_alloc_number(info->id));
}

/* What cuPointerGetAttributes answers for memory the driver does not know
 * (a freed allocation): every attribute's default. */
static CUresult unknown_attr(void *data, CUpointer_attribute attr)
{
    switch ((int)attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(void **)data = NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
        memset(data, 0, sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS));
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        *(unsigned char *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = -2;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = 0;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* The driver's first check: a device pointer needs a current context. */
static bool no_context(void)
{
    CUcontext cur = NULL;
    return CU_REAL(cuCtxGetCurrent, &cur) != CUDA_SUCCESS || !cur;
}

HOOK_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    core_ptr_info_t info;
    hook_dev_t *hd;
    if (hook_bypass() || !data || hook_describe((uintptr_t)ptr, &info, &hd) == CORE_WHERE_NONE)
        return CU_REAL(cuPointerGetAttribute, data, attribute, ptr);
    if (attribute == CU_POINTER_ATTRIBUTE_DEVICE_POINTER && no_context())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (info.where == CORE_WHERE_DEAD)
        return CUDA_ERROR_INVALID_VALUE; /* freed memory */
    if (reveals(attribute))
        revealed(hd, &info);
    CUresult r;
    if (block_attr(data, attribute, &info, hd, &r))
        return r;
    return CU_REAL(cuPointerGetAttribute, data, attribute, ptr);
}

HOOK_API CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
                                         CUdeviceptr ptr)
{
    core_ptr_info_t info;
    hook_dev_t *hd;
    if (hook_bypass() || !attributes || !data || hook_describe((uintptr_t)ptr, &info, &hd) == CORE_WHERE_NONE)
        return CU_REAL(cuPointerGetAttributes, numAttributes, attributes, data, ptr);
    CUresult r = CUDA_SUCCESS;
    for (unsigned i = 0; info.where == CORE_WHERE_LIVE && i < numAttributes; i++)
        if (data[i] && reveals(attributes[i])) {
            revealed(hd, &info);
            break;
        }
    if (info.where == CORE_WHERE_LIVE)
        r = CU_REAL(cuPointerGetAttributes, numAttributes, attributes, data, ptr); /* the segment's answers */
    for (unsigned i = 0; r == CUDA_SUCCESS && i < numAttributes; i++) {
        if (!data[i])
            continue;
        if (info.where == CORE_WHERE_DEAD)
            r = unknown_attr(data[i], attributes[i]);
        else
            block_attr(data[i], attributes[i], &info, hd, &r);
    }
    return r;
}

/* Whom a question about a pointer is for. */
typedef enum ptr_whose_e {
    PTR_REAL,         /* not cucache's memory (or the hooks pass through): the real call answers */
    PTR_NOT_IN_BLOCK, /* cucache's memory, but freed, or [p, p + need) leaves the live block */
    PTR_BLOCK,        /* a live block, revealed (its fences waited for) */
} ptr_whose_t;

/* A question that lets an agent outside the device's streams reach the
 * `need` bytes at p (0: only p): for a live block that holds them, the
 * fences that may have handed its memory out complete first. */
static ptr_whose_t ptr_question(CUdeviceptr p, size_t need, core_ptr_info_t *info)
{
    hook_dev_t *hd;
    if (hook_bypass() || hook_describe((uintptr_t)p, info, &hd) == CORE_WHERE_NONE)
        return PTR_REAL;
    if (info->where == CORE_WHERE_DEAD || need > info->base + info->size - (uintptr_t)p)
        return PTR_NOT_IN_BLOCK;
    revealed(hd, info);
    return PTR_BLOCK;
}

HOOK_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    core_ptr_info_t info; /* what registration caches key on */
    ptr_whose_t whose = ptr_question(dptr, 0, &info);
    if (whose == PTR_REAL)
        return CU_REAL(cuMemGetAddressRange_v2, pbase, psize, dptr);
    if (whose == PTR_NOT_IN_BLOCK)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = (CUdeviceptr)info.base;
    if (psize)
        *psize = info.requested;
    return CUDA_SUCCESS;
}

/* A dma-buf of a range, for another driver to import (a NIC's, by
 * GPUDirect RDMA: NCCL, UCX, libfabric): the range must lie in the block,
 * as CUDA requires it in one allocation (the rounding CUDA would map past
 * the requested bytes is another block's here: refused), and the fences
 * that handed the block's memory out complete first.  Freed memory is
 * memory the driver does not know. */
HOOK_API CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
                                                CUmemRangeHandleType handleType, unsigned long long flags)
{
    core_ptr_info_t info;
    ptr_whose_t whose = ptr_question(dptr, size, &info);
    if (whose == PTR_NOT_IN_BLOCK)
        return CUDA_ERROR_INVALID_VALUE;
    return CU_REAL(cuMemGetHandleForAddressRange, handle, dptr, size, handleType, flags);
}

/* SYNC_MEMOPS is set by libraries that let a NIC or the CPU reach the
 * buffer (GPUDirect RDMA, GDRCopy); it applies to the whole allocation,
 * here the segment, which is at least as strict.  Freed memory is memory
 * the driver does not know. */
HOOK_API CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    core_ptr_info_t info;
    if (ptr_question(ptr, 0, &info) == PTR_NOT_IN_BLOCK)
        return CUDA_ERROR_INVALID_VALUE;
    return CU_REAL(cuPointerSetAttribute, value, attribute, ptr);
}

/* The runtime's query, for runtimes that do not ask the driver hooks: a
 * live block's answers are its segment's; freed memory answers as memory
 * CUDA does not know, which the runtime reports as unregistered host
 * memory. */
HOOK_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    core_ptr_info_t info;
    hook_dev_t *hd;
    if (hook_bypass() || !attributes || hook_describe((uintptr_t)ptr, &info, &hd) != CORE_WHERE_DEAD)
        return RT_REAL(cudaPointerGetAttributes, attributes, ptr);
    memset(attributes, 0, sizeof *attributes);
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    attributes->hostPointer = (void *)(uintptr_t)ptr;
    return cudaSuccess;
}
