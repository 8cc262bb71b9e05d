/*
 * Driver API of the simulated device: memory.  Allocation and free,
 * memory info, host and managed memory, pointer attributes, copies and
 * memsets, and the stream-ordered allocator with its pools.
 */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

/* ------------------------------------------------------------------------
 * Allocation and free
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    DRV_ENTER(ctx);
    if (!dptr || bytesize == 0)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = sim_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_unlock();
    sim_sleep_us(sim.cfg.alloc_us);
    sim_lock();
    sim_alloc_t *a;
    r = sim_dev_alloc(ctx->dev, bytesize, SIM_ALLOC_DEVICE, ctx, &a);
    if (r == CUDA_SUCCESS)
        *dptr = a->addr;
    return drv_leave(r);
}

/* A device allocation the program may free with cuMemFree. */
static sim_alloc_t *freeable(CUdeviceptr p)
{
    sim_alloc_t *a = sim_alloc_exact(p);
    if (!a || a->kind == SIM_ALLOC_HOST || a->freeing)
        return NULL;
    if (a->kind == SIM_ALLOC_POOL && a->pool_free)
        return NULL;
    return a;
}

SIM_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    DRV_ENTER(ctx);
    CUresult r = sim_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (dptr == 0)
        return drv_leave(CUDA_SUCCESS);
    sim_alloc_t *a = freeable(dptr);
    if (!a)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    /* Like the real one, cuMemFree waits for the whole device. */
    sim_device_wait_idle(&sim.dev[a->device]);
    sim_unlock();
    sim_sleep_us(sim.cfg.free_us);
    sim_lock();
    a = freeable(dptr); /* another thread may have freed it meanwhile */
    if (!a)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_alloc_release(a);
    return drv_leave(ctx->sticky);
}

SIM_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    DRV_ENTER(ctx);
    if (free_bytes)
        *free_bytes = sim_dev_free_bytes(ctx->dev);
    if (total)
        *total = ctx->dev->capacity;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    DRV_ENTER(ctx);
    (void)ctx;
    sim_alloc_t *a = sim_alloc_find(dptr);
    if (!a || a->kind == SIM_ALLOC_HOST || (a->kind == SIM_ALLOC_POOL && a->pool_free))
        return drv_leave(CUDA_ERROR_NOT_FOUND);
    if (pbase)
        *pbase = a->addr;
    if (psize)
        *psize = a->size;
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Host and managed memory
 * ---------------------------------------------------------------------- */

static CUresult host_alloc(void **pp, size_t bytesize, sim_alloc_kind_t kind)
{
    DRV_ENTER(ctx);
    if (!pp || bytesize == 0)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = sim_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    return drv_leave(sim_host_alloc(bytesize, kind, ctx->dev->ordinal, ctx, pp));
}

SIM_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize, SIM_ALLOC_HOST);
}

SIM_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, bytesize, SIM_ALLOC_HOST);
}

SIM_API CUresult cuMemFreeHost(void *p)
{
    DRV_ENTER(ctx);
    CUresult r = sim_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_alloc_t *a = sim_alloc_exact((uintptr_t)p);
    if (!a || a->kind != SIM_ALLOC_HOST)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_device_wait_idle(ctx->dev); /* queued copies may still use it */
    a = sim_alloc_exact((uintptr_t)p);
    if (!a || a->kind != SIM_ALLOC_HOST)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_host_free(a);
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != 0x2 /* CU_MEM_ATTACH_HOST */)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    CUresult r = host_alloc(&p, bytesize, SIM_ALLOC_MANAGED);
    if (r == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)(uintptr_t)p;
    return r;
}

/* ------------------------------------------------------------------------
 * Pointer attributes
 * ---------------------------------------------------------------------- */

/* Writes one attribute of allocation a (NULL: unknown pointer). */
static CUresult pointer_attr(void *data, CUpointer_attribute attr, const sim_alloc_t *a, CUdeviceptr ptr)
{
    bool dev = a && (a->kind == SIM_ALLOC_DEVICE || a->kind == SIM_ALLOC_POOL);
    switch ((int)attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = a ? a->ctx : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = !a ? 0 : a->kind == SIM_ALLOC_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = a ? ptr : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void **)data = a && !dev ? (void *)(uintptr_t)ptr : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned char *)data = a && a->kind == SIM_ALLOC_MANAGED;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned char *)data = a != NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = a ? a->device : -2;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = a ? a->addr : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = a ? a->size : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = a && a->kind == SIM_ALLOC_POOL ? a->pool : NULL;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static const sim_alloc_t *live_alloc(CUdeviceptr ptr)
{
    const sim_alloc_t *a = sim_alloc_find(ptr);
    return a && !(a->kind == SIM_ALLOC_POOL && a->pool_free) ? a : NULL;
}

SIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    DRV_ENTER(ctx);
    (void)ctx;
    if (!data)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    const sim_alloc_t *a = live_alloc(ptr);
    if (!a)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    bool dev = a->kind == SIM_ALLOC_DEVICE || a->kind == SIM_ALLOC_POOL;
    if (attribute == CU_POINTER_ATTRIBUTE_HOST_POINTER && dev)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    return drv_leave(pointer_attr(data, attribute, a, ptr));
}

/* Unlike cuPointerGetAttribute, an unknown pointer is not an error: every
 * attribute reads as empty. */
SIM_API CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
                                        CUdeviceptr ptr)
{
    DRV_ENTER(ctx);
    (void)ctx;
    if (!attributes || !data)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    const sim_alloc_t *a = live_alloc(ptr);
    for (unsigned i = 0; i < numAttributes; i++) {
        if (!data[i])
            continue;
        CUresult r = pointer_attr(data[i], attributes[i], a, ptr);
        if (r != CUDA_SUCCESS)
            return drv_leave(r);
    }
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Copies and memsets
 * ---------------------------------------------------------------------- */

/* Classifies [p, p+n): device memory (range checked), or host memory.  A
 * pointer inside a device's region that is not a live allocation, or a
 * range that leaves its allocation, is an error. */
static CUresult classify(uintptr_t p, size_t n, bool *device, bool *tracked)
{
    sim_alloc_t *a = NULL;
    *device = false;
    *tracked = false;
    if (sim_device_of(p)) {
        if (!sim_range_ok(p, n, &a))
            return CUDA_ERROR_INVALID_VALUE;
        *device = true;
        *tracked = true;
        return CUDA_SUCCESS;
    }
    a = sim_alloc_find(p);
    if (a && a->kind == SIM_ALLOC_MANAGED) {
        if (!sim_range_ok(p, n, NULL))
            return CUDA_ERROR_INVALID_VALUE;
        *tracked = true;
    }
    return CUDA_SUCCESS;
}

static void op_range(sim_op_t *op, uintptr_t lo, size_t n, bool write)
{
    op->ranges[op->nranges++] = (sim_range_t){lo, lo + n, write};
}

/* Queues a copy; `sync` gives cuMemcpy's host-blocking behaviour. */
static CUresult copy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool ptds, bool sync, const char *what)
{
    DRV_ENTER(ctx);
    if (n == 0)
        return drv_leave(CUDA_SUCCESS);
    if (!dst || !src)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    bool ddev, dtr, sdev, str;
    CUresult r = classify(dst, n, &ddev, &dtr);
    if (r == CUDA_SUCCESS)
        r = classify(src, n, &sdev, &str);
    struct CUstream_st *s = NULL;
    if (r == CUDA_SUCCESS)
        r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && sync && s->capture)
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_op_t *op = sim_op_new(SIM_OP_COPY, what);
    op->dst = (void *)(uintptr_t)dst;
    op->src = (const void *)(uintptr_t)src;
    op->bytes = n;
    if (dtr)
        op_range(op, dst, n, true);
    if (str)
        op_range(op, src, n, false);
    bool pageable_src = !sdev && !str && !sim_alloc_find(src);
    if (pageable_src && !sync) {
        /* CUDA stages a pageable source before returning. */
        op->staging = sim_xmalloc(n);
        memcpy(op->staging, op->src, n);
        op->src = op->staging;
    }
    r = sim_enqueue(s, op);
    if (r == CUDA_SUCCESS && sync && !(ddev && sdev)) /* device-to-device copies do not block the host */
        r = sim_stream_wait_idle(s);
    return drv_leave(r);
}

static CUresult copy_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool ptds)
{
    return copy(dst, src, n, h, ptds, false, "memcpy (async)");
}

static CUresult copy_sync(CUdeviceptr dst, CUdeviceptr src, size_t n, bool ptds)
{
    return copy(dst, src, n, NULL, ptds, true, "memcpy");
}

static CUresult htod_sync(CUdeviceptr dst, const void *src, size_t n, bool ptds)
{
    return copy(dst, (CUdeviceptr)(uintptr_t)src, n, NULL, ptds, true, "memcpy HtoD");
}

static CUresult dtoh_sync(void *dst, CUdeviceptr src, size_t n, bool ptds)
{
    return copy((CUdeviceptr)(uintptr_t)dst, src, n, NULL, ptds, true, "memcpy DtoH");
}

static CUresult dtod_sync(CUdeviceptr dst, CUdeviceptr src, size_t n, bool ptds)
{
    return copy(dst, src, n, NULL, ptds, true, "memcpy DtoD");
}

static CUresult htod_async(CUdeviceptr dst, const void *src, size_t n, CUstream h, bool ptds)
{
    return copy(dst, (CUdeviceptr)(uintptr_t)src, n, h, ptds, false, "memcpy HtoD (async)");
}

static CUresult dtoh_async(void *dst, CUdeviceptr src, size_t n, CUstream h, bool ptds)
{
    return copy((CUdeviceptr)(uintptr_t)dst, src, n, h, ptds, false, "memcpy DtoH (async)");
}

static CUresult dtod_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool ptds)
{
    return copy(dst, src, n, h, ptds, false, "memcpy DtoD (async)");
}

DRV_PTDS(cuMemcpy, copy_sync, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), (dst, src, ByteCount))
DRV_PTSZ(cuMemcpyAsync, copy_async, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream),
         (dst, src, ByteCount, hStream))
DRV_PTDS(cuMemcpyHtoD_v2, htod_sync, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),
         (dstDevice, srcHost, ByteCount))
DRV_PTDS(cuMemcpyDtoH_v2, dtoh_sync, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),
         (dstHost, srcDevice, ByteCount))
DRV_PTDS(cuMemcpyDtoD_v2, dtod_sync, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),
         (dstDevice, srcDevice, ByteCount))
DRV_PTSZ(cuMemcpyHtoDAsync_v2, htod_async,
         (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
         (dstDevice, srcHost, ByteCount, hStream))
DRV_PTSZ(cuMemcpyDtoHAsync_v2, dtoh_async, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
         (dstHost, srcDevice, ByteCount, hStream))
DRV_PTSZ(cuMemcpyDtoDAsync_v2, dtod_async,
         (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
         (dstDevice, srcDevice, ByteCount, hStream))

/* Queues a fill of `bytes` bytes; memsets never block the host. */
static CUresult fill(CUdeviceptr dst, uint32_t value, size_t bytes, bool wide, CUstream h, bool ptds)
{
    DRV_ENTER(ctx);
    if (bytes == 0)
        return drv_leave(CUDA_SUCCESS);
    bool dev, tracked;
    CUresult r = classify(dst, bytes, &dev, &tracked);
    if (r == CUDA_SUCCESS && !tracked)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && wide && (dst & 3))
        r = CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s = NULL;
    if (r == CUDA_SUCCESS)
        r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_op_t *op = sim_op_new(wide ? SIM_OP_SET32 : SIM_OP_SET8, "memset");
    op->dst = (void *)(uintptr_t)dst;
    op->bytes = bytes;
    op->value = value;
    op_range(op, dst, bytes, true);
    return drv_leave(sim_enqueue(s, op));
}

static CUresult set8(CUdeviceptr dst, unsigned char uc, size_t n, bool ptds)
{
    return fill(dst, uc, n, false, NULL, ptds);
}

static CUresult set32(CUdeviceptr dst, unsigned int ui, size_t n, bool ptds)
{
    if (n > SIZE_MAX / 4)
        return CUDA_ERROR_INVALID_VALUE;
    return fill(dst, ui, n * 4, true, NULL, ptds);
}

static CUresult set8_async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream h, bool ptds)
{
    return fill(dst, uc, n, false, h, ptds);
}

static CUresult set32_async(CUdeviceptr dst, unsigned int ui, size_t n, CUstream h, bool ptds)
{
    if (n > SIZE_MAX / 4)
        return CUDA_ERROR_INVALID_VALUE;
    return fill(dst, ui, n * 4, true, h, ptds);
}

DRV_PTDS(cuMemsetD8_v2, set8, (CUdeviceptr dstDevice, unsigned char uc, size_t N), (dstDevice, uc, N))
DRV_PTDS(cuMemsetD32_v2, set32, (CUdeviceptr dstDevice, unsigned int ui, size_t N), (dstDevice, ui, N))
DRV_PTSZ(cuMemsetD8Async, set8_async, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
         (dstDevice, uc, N, hStream))
DRV_PTSZ(cuMemsetD32Async, set32_async, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
         (dstDevice, ui, N, hStream))

/* ------------------------------------------------------------------------
 * Stream-ordered allocation
 * ---------------------------------------------------------------------- */

/* A freed block of `pool` that stream s may take for `len` bytes: one whose
 * free is ordered before s (same stream, events, legacy-stream order), or,
 * when opportunistic reuse is on, one whose free has completed.  Best fit,
 * and never more than twice the request. */
static sim_alloc_t *pool_find(struct CUmemPoolHandle_st *pool, struct CUstream_st *s, size_t len)
{
    sim_alloc_t *best = NULL;
    for (size_t i = 0; i < sim.nallocs; i++) {
        sim_alloc_t *a = &sim.allocs[i];
        if (a->kind != SIM_ALLOC_POOL || a->pool != pool || !a->pool_free || a->reserved < len || a->reserved > 2 * len)
            continue;
        bool ordered =
            vc_get(s->vc, a->free_slot) >= a->free_seq && (pool->reuse_follow_events || a->free_slot == s->slot);
        bool completed = pool->reuse_opportunistic && sim.completed[a->free_slot] >= a->free_seq;
        if ((ordered || completed) && (!best || a->reserved < best->reserved))
            best = a;
    }
    return best;
}

static void pool_account(struct CUmemPoolHandle_st *pool, size_t used_delta, size_t reserved_delta)
{
    pool->used_cur += used_delta;
    pool->reserved_cur += reserved_delta;
    if (pool->used_cur > pool->used_high)
        pool->used_high = pool->used_cur;
    if (pool->reserved_cur > pool->reserved_high)
        pool->reserved_high = pool->reserved_cur;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h, bool ptds)
{
    DRV_ENTER(ctx);
    if (!dptr || size == 0)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (pool && !handle_is(pool, SIM_MAGIC_POOL))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUstream_st *s = NULL;
    CUresult r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && !pool)
        pool = s->ctx->dev->current_pool;
    if (r == CUDA_SUCCESS)
        r = sim_capture_check_implicit(s);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    size_t len = sim_dev_round(size);
    if (pool->dev != s->ctx->dev)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    ctx = s->ctx; /* memory comes from the stream's device */
    sim_alloc_t *a = s->capture ? NULL : pool_find(pool, s, len);
    if (a) {
        if (vc_get(s->vc, a->free_slot) < a->free_seq)
            vc_join(&s->vc, a->free_vc); /* reuse of a completed free: now ordered */
        vc_release(a->free_vc);
        a->free_vc = NULL;
        a->pool_free = false;
        a->size = size;
        a->ctx = ctx;
        pool_account(pool, a->reserved, 0);
        *dptr = a->addr;
        return drv_leave(CUDA_SUCCESS);
    }
    r = sim_dev_alloc(ctx->dev, size, SIM_ALLOC_POOL, ctx, &a);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        sim_pool_trim(pool, 0);
        r = sim_dev_alloc(ctx->dev, size, SIM_ALLOC_POOL, ctx, &a);
    }
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    a->pool = pool;
    pool_account(pool, a->reserved, a->reserved);
    *dptr = a->addr;
    return drv_leave(CUDA_SUCCESS);
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, bool ptds)
{
    DRV_ENTER(ctx);
    sim_alloc_t *a = sim_alloc_exact(dptr);
    bool pooled = a && a->kind == SIM_ALLOC_POOL;
    /* cuMemAlloc memory may be freed in stream order too: it goes back to
     * the device when the free runs. */
    if (!a || a->freeing || (a->kind != SIM_ALLOC_POOL && a->kind != SIM_ALLOC_DEVICE) || (pooled && a->pool_free))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUstream_st *s = NULL;
    CUresult r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (s->capture) /* the graph's free node; the memory stays with the program */
        return drv_leave(CUDA_SUCCESS);
    sim_op_t *op = sim_op_new(SIM_OP_FREE, "cuMemFreeAsync");
    op->free_addr = pooled ? 0 : dptr;
    op_range(op, dptr, a->size, true);
    r = sim_enqueue(s, op);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    a = sim_alloc_exact(dptr);
    if (!pooled) {
        a->freeing = true;
        return drv_leave(CUDA_SUCCESS);
    }
    a->pool_free = true;
    a->free_slot = s->slot;
    a->free_seq = s->last_seq;
    a->free_vc = vc_retain(s->vc);
    a->pool->used_cur -= a->reserved;
    return drv_leave(CUDA_SUCCESS);
}

static CUresult alloc_async_default(CUdeviceptr *dptr, size_t size, CUstream h, bool ptds)
{
    return alloc_async(dptr, size, NULL, h, ptds);
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h, bool ptds)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(dptr, size, pool, h, ptds);
}

DRV_PTSZ(cuMemAllocAsync, alloc_async_default, (CUdeviceptr * dptr, size_t bytesize, CUstream hStream),
         (dptr, bytesize, hStream))
DRV_PTSZ(cuMemFreeAsync, free_async, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream))
DRV_PTSZ(cuMemAllocFromPoolAsync, alloc_from_pool,
         (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream), (dptr, bytesize, pool, hStream))

/* ------------------------------------------------------------------------
 * Pools
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    sim_lock();
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (!pool_out)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (dev < 0 || dev >= sim.ndev)
        return drv_leave(CUDA_ERROR_INVALID_DEVICE);
    *pool_out = sim.dev[dev].default_pool;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    sim_lock();
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (!pool)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (dev < 0 || dev >= sim.ndev)
        return drv_leave(CUDA_ERROR_INVALID_DEVICE);
    *pool = sim.dev[dev].current_pool;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    sim_lock();
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (dev < 0 || dev >= sim.ndev)
        return drv_leave(CUDA_ERROR_INVALID_DEVICE);
    if (!handle_is(pool, SIM_MAGIC_POOL) || pool->dev != &sim.dev[dev])
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim.dev[dev].current_pool = pool;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    sim_lock();
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (!pool || !poolProps || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (poolProps->location.id < 0 || poolProps->location.id >= sim.ndev)
        return drv_leave(CUDA_ERROR_INVALID_DEVICE);
    *pool = sim_pool_new(&sim.dev[poolProps->location.id], false);
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    sim_lock();
    if (!handle_is(pool, SIM_MAGIC_POOL) || pool->is_default)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (pool->dev->current_pool == pool)
        pool->dev->current_pool = pool->dev->default_pool;
    handle_del(pool);
    pool->dead = true;
    sim_pool_trim(pool, 0); /* frees the struct too once no block is out */
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    sim_lock();
    if (!handle_is(pool, SIM_MAGIC_POOL) || !value)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    switch ((int)attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        pool->reuse_follow_events = *(int *)value != 0;
        break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        pool->reuse_opportunistic = *(int *)value != 0;
        break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        pool->reuse_internal_deps = *(int *)value != 0;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->release_threshold = *(cuuint64_t *)value;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0)
            return drv_leave(CUDA_ERROR_INVALID_VALUE);
        pool->reserved_high = pool->reserved_cur;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0)
            return drv_leave(CUDA_ERROR_INVALID_VALUE);
        pool->used_high = pool->used_cur;
        break;
    default:
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    }
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    sim_lock();
    if (!handle_is(pool, SIM_MAGIC_POOL) || !value)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    switch ((int)attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        *(int *)value = pool->reuse_follow_events;
        break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        *(int *)value = pool->reuse_opportunistic;
        break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = pool->reuse_internal_deps;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *(cuuint64_t *)value = pool->release_threshold;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        *(cuuint64_t *)value = pool->reserved_cur;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        *(cuuint64_t *)value = pool->reserved_high;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *(cuuint64_t *)value = pool->used_cur;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *(cuuint64_t *)value = pool->used_high;
        break;
    default:
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    }
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    sim_lock();
    if (!handle_is(pool, SIM_MAGIC_POOL))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_pool_trim(pool, minBytesToKeep);
    return drv_leave(CUDA_SUCCESS);
}
