/*
 * Driver API of the simulated device: memory.  Allocation and free,
 * memory info, host, managed and registered host memory, pitched
 * allocation, and the stream-ordered allocator with its pools.  Pointer
 * attributes are in driver_ptr.c, copies and memsets in driver_copy.c, IPC
 * in driver_ipc.c.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

/* ------------------------------------------------------------------------
 * Allocation and free
 * ---------------------------------------------------------------------- */

/* An allocation's arguments (somewhere to answer, some bytes) and the
 * captures it would break (sim_capture_check_unsafe). */
static CUresult alloc_check(const void *out, size_t bytesize)
{
    if (!out || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_capture_check_unsafe();
}

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    r = alloc_check(dptr, bytesize);
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

/* An allocation of an imported pool (cuMemPoolImportPointer): the program
 * frees it like its own, which closes this process's mapping only. */
static bool pool_import(const sim_alloc_t *a)
{
    return a->kind == SIM_ALLOC_IPC && a->pool;
}

/* A device allocation the program may free with cuMemFree. */
static sim_alloc_t *freeable(CUdeviceptr p)
{
    sim_alloc_t *a = sim_alloc_live(p);
    if (!a || a->addr != p || a->kind == SIM_ALLOC_HOST || a->kind == SIM_ALLOC_REGISTERED ||
        (a->kind == SIM_ALLOC_IPC && !pool_import(a)) || a->kind == SIM_ALLOC_VMM || a->kind == SIM_ALLOC_MODULE)
        return NULL;
    return a;
}

SIM_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUctx_st *cur = sim_ctx_current();
    if (sim_ctx_valid(cur) && cur->sticky != CUDA_SUCCESS)
        return drv_leave(cur->sticky);
    r = sim_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (dptr == 0)
        return drv_leave(CUDA_SUCCESS);
    sim_gblock_t *gb = sim_gblock_at(dptr);
    if (gb) /* a graph's allocation: back to the graph memory pool (engine_graph.c) */
        return drv_leave(sim_gblock_free_outside(gb));
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
    struct CUctx_st *owner = a->ctx;
    if (pool_import(a))
        sim_ipc_free_import(a);
    else
        sim_alloc_release(a);
    return drv_leave(owner->sticky);
}

/* Rows of WidthInBytes padded to a multiple of 512 bytes, as the real
 * driver pads them on current GPUs. */
#define SIM_PITCH_ALIGN 512u

SIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                    unsigned int ElementSizeBytes)
{
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    if (WidthInBytes > SIZE_MAX - SIM_PITCH_ALIGN)
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + SIM_PITCH_ALIGN - 1) / SIM_PITCH_ALIGN * SIM_PITCH_ALIGN;
    if (Height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = cuMemAlloc_v2(dptr, pitch * Height);
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

SIM_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (free_bytes)
        *free_bytes = sim_dev_free_bytes(ctx->dev);
    if (total)
        *total = ctx->dev->capacity;
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Host and managed memory
 * ---------------------------------------------------------------------- */

static CUresult host_alloc(void **pp, size_t bytesize, sim_alloc_kind_t kind)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    r = alloc_check(pp, bytesize);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    return drv_leave(sim_host_alloc(bytesize, kind, ctx, pp));
}

SIM_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize, SIM_ALLOC_HOST);
}

SIM_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = host_alloc(pp, bytesize, SIM_ALLOC_HOST);
    if (r == CUDA_SUCCESS) {
        sim_lock();
        sim_alloc_exact((uintptr_t)*pp)->flags = Flags;
        sim_unlock();
    }
    return r;
}

/* Pinned memory (kind HOST) or a registration (REGISTERED) starting at p. */
static sim_alloc_t *host_block(void *p, sim_alloc_kind_t kind)
{
    sim_alloc_t *a = sim_alloc_exact((uintptr_t)p);
    return a && a->kind == kind ? a : NULL;
}

/* Waits until no queued work may use the host block at p (copies read and
 * write pinned memory when they run), then frees or forgets it. */
static CUresult host_release(void *p, sim_alloc_kind_t kind, CUresult not_found)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    r = sim_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_alloc_t *a = host_block(p, kind);
    if (!a)
        return drv_leave(not_found);
    sim_device_wait_idle(&sim.dev[a->device]);
    a = host_block(p, kind);
    if (!a)
        return drv_leave(not_found);
    sim_host_free(a);
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemFreeHost(void *p)
{
    return host_release(p, SIM_ALLOC_HOST, CUDA_ERROR_INVALID_VALUE);
}

SIM_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY |
                           CU_MEMHOSTREGISTER_READ_ONLY;
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (Flags & ~known)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (Flags & CU_MEMHOSTREGISTER_IOMEMORY) /* no third-party device's I/O memory here */
        return drv_leave(CUDA_ERROR_NOT_SUPPORTED);
    r = sim_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    return drv_leave(sim_host_register(p, bytesize, Flags, ctx));
}

SIM_API CUresult cuMemHostUnregister(void *p)
{
    return host_release(p, SIM_ALLOC_REGISTERED, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

/* With unified addressing (and CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM),
 * the device pointer of pinned and registered memory is the host pointer. */
SIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    (void)ctx;
    sim_alloc_t *a = sim_alloc_find((uintptr_t)p);
    if (!pdptr || Flags != 0 || !a || (a->kind != SIM_ALLOC_HOST && a->kind != SIM_ALLOC_REGISTERED))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    (void)ctx;
    sim_alloc_t *a = sim_alloc_find((uintptr_t)p);
    if (!pFlags || !a || a->kind != SIM_ALLOC_HOST)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *pFlags = a->flags;
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
 * Stream-ordered allocation
 * ---------------------------------------------------------------------- */

/* CUDA's reuse rules (CUDA Programming Guide, "Memory Reuse Policies" and
 * "Synchronization API Actions"), one row each, cheapest first: the pool
 * attribute that enables it (0: always on), whether a free of the pool may
 * serve stream s by it, whether it is tried only once the device has no
 * room for a new block, and how s is then ordered after the free. */
typedef enum reuse_order_e {
    REUSE_ORDERED, /* s's next work is ordered after the free already */
    REUSE_JOIN,    /* the free completed: s joins its clock, nothing waits */
    REUSE_WAIT,    /* the free is pending: s waits for it on the device */
} reuse_order_t;

/* The free is on s itself: stream order. */
static bool free_on_stream(const sim_alloc_t *a, const struct CUstream_st *s)
{
    return a->free_slot == s->slot;
}

/* The host observed the free complete (a synchronisation): s's next work
 * joins the host's clock. */
static bool free_observed(const sim_alloc_t *a, const struct CUstream_st *s)
{
    (void)s;
    return vc_get(sim.host_vc, a->free_slot) >= a->free_seq;
}

/* s waits for the free through events. */
static bool free_before(const sim_alloc_t *a, const struct CUstream_st *s)
{
    return vc_get(s->vc, a->free_slot) >= a->free_seq;
}

/* The free's stream has passed it. */
static bool free_completed(const sim_alloc_t *a, const struct CUstream_st *s)
{
    (void)s;
    return sim.completed[a->free_slot] >= a->free_seq;
}

/* Any free, pending or not. */
static bool free_any(const sim_alloc_t *a, const struct CUstream_st *s)
{
    (void)a;
    (void)s;
    return true;
}

static const struct reuse_rule_s {
    int attr; /* CU_MEMPOOL_ATTR_REUSE_* that enables it; 0: always on */
    bool (*applies)(const sim_alloc_t *a, const struct CUstream_st *s);
    bool out_of_memory; /* tried only when a new block does not fit */
    reuse_order_t order;
} reuse_rules[] = {
    {0, free_on_stream, false, REUSE_ORDERED},
    {0, free_observed, false, REUSE_ORDERED},
    {CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, free_before, false, REUSE_ORDERED},
    {CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, free_completed, false, REUSE_JOIN},
    {CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, free_any, true, REUSE_WAIT},
};

static bool pool_flag(const struct CUmemPoolHandle_st *pool, int attr);

/* Test hook (cucacheSimPlantReuseWithoutWait): reuse by an inserted
 * dependency without inserting it. */
static bool plant_reuse_without_wait;

/* A freed block of `pool` and the rule by which stream s may take it for
 * `len` bytes (rules of the out-of-memory stage too when out_of_memory);
 * block NULL when none.  Best fit, never more than twice the request; of
 * equal blocks, the cheapest rule. */
typedef struct reuse_s {
    sim_alloc_t *block;
    const struct reuse_rule_s *rule;
} reuse_t;

static reuse_t pool_find(struct CUmemPoolHandle_st *pool, struct CUstream_st *s, size_t len, bool out_of_memory)
{
    reuse_t best = {NULL, NULL};
    for (size_t i = 0; i < sim.nallocs; i++) {
        sim_alloc_t *a = &sim.allocs[i];
        if (a->kind != SIM_ALLOC_POOL || a->pool != pool || !a->pool_free || a->reserved < len || a->reserved > 2 * len)
            continue;
        const struct reuse_rule_s *rule = NULL;
        for (size_t k = 0; !rule && k < sizeof reuse_rules / sizeof reuse_rules[0]; k++) {
            const struct reuse_rule_s *r = &reuse_rules[k];
            if ((!r->out_of_memory || out_of_memory) && (!r->attr || pool_flag(pool, r->attr)) && r->applies(a, s))
                rule = r;
        }
        if (rule && (!best.block || a->reserved < best.block->reserved ||
                     (a->reserved == best.block->reserved && rule->order < best.rule->order)))
            best = (reuse_t){a, rule};
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

/* Hands u's block to s for `size` bytes, ordering s after its free as u's
 * rule says. */
static CUresult pool_take(reuse_t u, struct CUstream_st *s, size_t size, CUdeviceptr *dptr)
{
    sim_alloc_t *a = u.block;
    if (u.rule->order == REUSE_JOIN) {
        vc_join(&s->vc, a->free_vc);
    } else if (u.rule->order == REUSE_WAIT && !plant_reuse_without_wait) {
        uintptr_t addr = a->addr;
        CUresult r = sim_stream_wait_for(s, a->free_slot, a->free_seq, a->free_vc,
                                         "cuMemAllocAsync (reuse after a pending free)");
        if (r != CUDA_SUCCESS)
            return r;
        a = sim_alloc_exact(addr);
    }
    vc_release(a->free_vc);
    a->free_vc = NULL;
    a->pool_free = false;
    a->size = size;
    a->ctx = s->ctx;
    pool_account(a->pool, a->reserved, 0);
    *dptr = a->addr;
    return CUDA_SUCCESS;
}

/* A new block of `size` bytes from the device for pool. */
static CUresult pool_grow(struct CUmemPoolHandle_st *pool, struct CUctx_st *ctx, size_t size, CUdeviceptr *dptr)
{
    sim_alloc_t *a;
    CUresult r = sim_dev_alloc(ctx->dev, size, SIM_ALLOC_POOL, ctx, &a);
    if (r != CUDA_SUCCESS)
        return r;
    a->pool = pool;
    pool_account(pool, a->reserved, a->reserved);
    *dptr = a->addr;
    return CUDA_SUCCESS;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || size == 0)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (pool && (!handle_is(pool, SIM_MAGIC_POOL) || pool->imported))
        return drv_leave(CUDA_ERROR_INVALID_VALUE); /* an imported pool makes no allocations */
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
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
    if (s->capture) { /* an allocation node of the graph, from the graph memory pool */
        if (pool != ctx->dev->default_pool && pool != ctx->dev->current_pool)
            return drv_leave(CUDA_ERROR_NOT_SUPPORTED); /* explicit pools under capture are not modelled */
        return drv_leave(drv_graph_capture_alloc(s, size, dptr));
    }
    reuse_t u = pool_find(pool, s, len, false);
    if (u.block)
        return drv_leave(pool_take(u, s, size, dptr));
    r = pool_grow(pool, ctx, size, dptr);
    if (r != CUDA_ERROR_OUT_OF_MEMORY)
        return drv_leave(r);
    /* Out of memory: a pending free by an inserted dependency, as CUDA
     * does; else the pool's completed frees go back to the device (never a
     * pending one) and the device is asked again. */
    u = pool_find(pool, s, len, true);
    if (u.block)
        return drv_leave(pool_take(u, s, size, dptr));
    sim_pool_trim(pool, 0);
    return drv_leave(pool_grow(pool, ctx, size, dptr));
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    sim_gblock_t *gb = sim_gblock_at(dptr);
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (s->capture) { /* a free node of the graph: only graph memory */
        r = sim_capture_check_implicit(s);
        return drv_leave(r != CUDA_SUCCESS ? r : gb ? drv_graph_capture_free(s, gb) : CUDA_ERROR_INVALID_VALUE);
    }
    if (gb) /* a graph's allocation: freed at once in this model (engine_graph.c) */
        return drv_leave(sim_gblock_free_outside(gb));
    sim_alloc_t *a = sim_alloc_exact(dptr);
    bool pooled = a && a->kind == SIM_ALLOC_POOL;
    /* cuMemAlloc memory may be freed in stream order too: it goes back to
     * the device when the free runs (an imported pool's allocation: its
     * mapping is closed then). */
    if (!a || a->freeing || (a->kind != SIM_ALLOC_POOL && a->kind != SIM_ALLOC_DEVICE && !pool_import(a)) ||
        (pooled && a->pool_free))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_op_t *op = sim_op_new(SIM_OP_FREE, "cuMemFreeAsync");
    op->free_addr = pooled ? 0 : dptr;
    op->ranges[op->nranges++] = (sim_range_t){dptr, dptr + a->size, true, dptr};
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

/* The device's default pool, or its current one (cuDeviceSetMemPool's). */
static CUresult device_pool_get(CUmemoryPool *out, CUdevice dev, bool current)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (dev < 0 || dev >= sim.ndev)
        return drv_leave(CUDA_ERROR_INVALID_DEVICE);
    *out = current ? sim.dev[dev].current_pool : sim.dev[dev].default_pool;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    return device_pool_get(pool_out, dev, false);
}

SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return device_pool_get(pool, dev, true);
}

SIM_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (dev < 0 || dev >= sim.ndev)
        return drv_leave(CUDA_ERROR_INVALID_DEVICE);
    if (!handle_is(pool, SIM_MAGIC_POOL) || pool->dev != &sim.dev[dev] || pool->imported)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim.dev[dev].current_pool = pool;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool || !poolProps || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (poolProps->location.id < 0 || poolProps->location.id >= sim.ndev)
        return drv_leave(CUDA_ERROR_INVALID_DEVICE);
    /* a descriptor is the one handle type of Linux (driver_pool_share.c) */
    if (poolProps->handleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return drv_leave(CUDA_ERROR_NOT_SUPPORTED);
    *pool = sim_pool_new(&sim.dev[poolProps->location.id], false);
    (*pool)->handle_types = (unsigned)poolProps->handleTypes;
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

/* The pool attributes, one row each: the field it reads (an int flag or a
 * 64-bit figure) and what setting it does.  A flag takes the value as 0 or
 * 1, the threshold takes it as it is, a high-water mark takes only 0,
 * which resets it to the current figure (reset_from); the current figures
 * cannot be set. */
typedef enum pool_set_e { POOL_READ_ONLY, POOL_SET, POOL_RESET } pool_set_t;

#define POOL_FIELD(f) offsetof(struct CUmemPoolHandle_st, f)

static const struct pool_attr_s {
    int attr;
    size_t field;
    bool flag;
    pool_set_t set;
    size_t reset_from; /* POOL_RESET: the current figure's field */
} pool_attrs[] = {
    {CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, POOL_FIELD(reuse_follow_events), true, POOL_SET, 0},
    {CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, POOL_FIELD(reuse_opportunistic), true, POOL_SET, 0},
    {CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, POOL_FIELD(reuse_internal_deps), true, POOL_SET, 0},
    {CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, POOL_FIELD(release_threshold), false, POOL_SET, 0},
    {CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, POOL_FIELD(reserved_cur), false, POOL_READ_ONLY, 0},
    {CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, POOL_FIELD(reserved_high), false, POOL_RESET, POOL_FIELD(reserved_cur)},
    {CU_MEMPOOL_ATTR_USED_MEM_CURRENT, POOL_FIELD(used_cur), false, POOL_READ_ONLY, 0},
    {CU_MEMPOOL_ATTR_USED_MEM_HIGH, POOL_FIELD(used_high), false, POOL_RESET, POOL_FIELD(used_cur)},
};

/* The row of attr, or NULL. */
static const struct pool_attr_s *pool_attr_row(int attr)
{
    for (size_t i = 0; i < sizeof pool_attrs / sizeof pool_attrs[0]; i++)
        if (pool_attrs[i].attr == attr)
            return &pool_attrs[i];
    return NULL;
}

/* The row of attr, for a live pool and a value to read or write; NULL
 * otherwise. */
static const struct pool_attr_s *pool_attr(CUmemoryPool pool, CUmemPool_attribute attr, const void *value)
{
    if (!handle_is(pool, SIM_MAGIC_POOL) || !value)
        return NULL;
    return pool_attr_row((int)attr);
}

/* Whether the flag attribute attr is on in pool (the reuse rules). */
static bool pool_flag(const struct CUmemPoolHandle_st *pool, int attr)
{
    const struct pool_attr_s *a = pool_attr_row(attr);
    return a && a->flag && *(const int *)((const char *)pool + a->field) != 0;
}

SIM_API void cucacheSimPlantReuseWithoutWait(int on)
{
    sim_lock();
    plant_reuse_without_wait = on != 0;
    sim_unlock();
}

SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    sim_lock();
    const struct pool_attr_s *a = pool_attr(pool, attr, value);
    if (!a || a->set == POOL_READ_ONLY || (a->set == POOL_RESET && *(cuuint64_t *)value != 0))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    char *p = (char *)pool;
    if (a->flag)
        *(int *)(p + a->field) = *(int *)value != 0;
    else if (a->set == POOL_RESET)
        *(uint64_t *)(p + a->field) = *(uint64_t *)(p + a->reset_from);
    else
        *(uint64_t *)(p + a->field) = *(cuuint64_t *)value;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    sim_lock();
    const struct pool_attr_s *a = pool_attr(pool, attr, value);
    if (!a)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    const char *p = (const char *)pool;
    if (a->flag)
        *(int *)value = *(const int *)(p + a->field);
    else
        *(cuuint64_t *)value = *(const uint64_t *)(p + a->field);
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
