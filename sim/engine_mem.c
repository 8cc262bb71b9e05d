/*
 * Simulated device memory: the per-device address allocator, the table of
 * live allocations, host (pinned and managed) memory, and the stream-ordered
 * memory pools.  All functions are called with sim.lock held.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine.h"
#include "handles.h"

/* Allocation granularity, like a real GPU's: small requests are packed at
 * 512-byte granularity, requests above 1 MiB take whole 2 MiB pages. */
#define SIM_SMALL_GRAIN 512u
#define SIM_LARGE_GRAIN ((size_t)2 << 20)
#define SIM_SMALL_MAX ((size_t)1 << 20)

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

/* ------------------------------------------------------------------------
 * The table of live allocations, sorted by address
 * ---------------------------------------------------------------------- */

/* Index of the first allocation with addr > x. */
static size_t upper_bound(uintptr_t x)
{
    size_t lo = 0, hi = sim.nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (sim.allocs[mid].addr <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

sim_alloc_t *sim_alloc_find(uintptr_t addr)
{
    size_t i = upper_bound(addr);
    if (i == 0)
        return NULL;
    sim_alloc_t *a = &sim.allocs[i - 1];
    size_t span = a->size ? a->size : 1;
    return addr < a->addr + span ? a : NULL;
}

sim_alloc_t *sim_alloc_exact(uintptr_t addr)
{
    sim_alloc_t *a = sim_alloc_find(addr);
    return a && a->addr == addr ? a : NULL;
}

static sim_alloc_t *table_insert(const sim_alloc_t *a)
{
    if (sim.nallocs == sim.cap_allocs) {
        sim.cap_allocs = sim.cap_allocs ? sim.cap_allocs * 2 : 64;
        sim.allocs = realloc(sim.allocs, sim.cap_allocs * sizeof *sim.allocs);
        if (!sim.allocs)
            abort();
    }
    size_t i = upper_bound(a->addr);
    memmove(&sim.allocs[i + 1], &sim.allocs[i], (sim.nallocs - i) * sizeof *sim.allocs);
    sim.allocs[i] = *a;
    sim.nallocs++;
    return &sim.allocs[i];
}

static void table_remove(sim_alloc_t *a)
{
    size_t i = (size_t)(a - sim.allocs);
    vc_release(a->free_vc);
    memmove(&sim.allocs[i], &sim.allocs[i + 1], (sim.nallocs - i - 1) * sizeof *sim.allocs);
    sim.nallocs--;
}

bool sim_range_ok(uintptr_t addr, size_t bytes, sim_alloc_t **out)
{
    sim_alloc_t *a = sim_alloc_find(addr);
    if (!a || a->freeing || (a->kind == SIM_ALLOC_POOL && a->pool_free))
        return false;
    if (bytes > a->size || addr - a->addr > a->size - bytes)
        return false;
    if (out)
        *out = a;
    return true;
}

/* ------------------------------------------------------------------------
 * The device address allocator: first fit over sorted free extents
 * ---------------------------------------------------------------------- */

static void ext_remove(sim_device_t *d, size_t i)
{
    memmove(&d->ext[i], &d->ext[i + 1], (d->next - i - 1) * sizeof *d->ext);
    d->next--;
}

static void ext_insert(sim_device_t *d, size_t i, sim_extent_t e)
{
    if (d->next == d->cap_ext) {
        d->cap_ext *= 2;
        d->ext = realloc(d->ext, d->cap_ext * sizeof *d->ext);
        if (!d->ext)
            abort();
    }
    memmove(&d->ext[i + 1], &d->ext[i], (d->next - i) * sizeof *d->ext);
    d->ext[i] = e;
    d->next++;
}

/* Takes len bytes aligned to align; returns the offset or SIZE_MAX. */
static size_t ext_take(sim_device_t *d, size_t len, size_t align)
{
    for (size_t i = 0; i < d->next; i++) {
        sim_extent_t e = d->ext[i];
        size_t start = round_up(e.off, align);
        if (start < e.off || start - e.off > e.len || e.len - (start - e.off) < len)
            continue;
        size_t head = start - e.off, tail = e.len - head - len;
        ext_remove(d, i);
        if (tail)
            ext_insert(d, i, (sim_extent_t){start + len, tail});
        if (head)
            ext_insert(d, i, (sim_extent_t){e.off, head});
        return start;
    }
    return SIZE_MAX;
}

/* Returns [off, off+len) and merges it with its free neighbours. */
static void ext_give(sim_device_t *d, size_t off, size_t len)
{
    size_t i = 0;
    while (i < d->next && d->ext[i].off < off)
        i++;
    ext_insert(d, i, (sim_extent_t){off, len});
    if (i + 1 < d->next && d->ext[i].off + d->ext[i].len == d->ext[i + 1].off) {
        d->ext[i].len += d->ext[i + 1].len;
        ext_remove(d, i + 1);
    }
    if (i > 0 && d->ext[i - 1].off + d->ext[i - 1].len == d->ext[i].off) {
        d->ext[i - 1].len += d->ext[i].len;
        ext_remove(d, i);
    }
}

/* Gives the pages fully inside [p, p+len) back to the host. */
static void release_pages(uint8_t *p, size_t len)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + len) & ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

size_t sim_dev_round(size_t size)
{
    return round_up(size, size <= SIM_SMALL_MAX ? SIM_SMALL_GRAIN : SIM_LARGE_GRAIN);
}

CUresult sim_dev_alloc(sim_device_t *dev, size_t size, sim_alloc_kind_t kind, struct CUctx_st *ctx, sim_alloc_t **out)
{
    if (size == 0 || size > dev->capacity)
        return size ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    size_t len = sim_dev_round(size);
    size_t off = ext_take(dev, len, size <= SIM_SMALL_MAX ? SIM_SMALL_GRAIN : SIM_LARGE_GRAIN);
    if (off == SIZE_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    dev->used += len;
    sim_alloc_t a = {
        .addr = (uintptr_t)dev->base + off,
        .size = size,
        .reserved = len,
        .kind = kind,
        .device = dev->ordinal,
        .ctx = ctx,
    };
    *out = table_insert(&a);
    atomic_fetch_add(&sim.device_allocs, 1);
    return CUDA_SUCCESS;
}

void sim_dev_free(sim_alloc_t *a)
{
    sim_device_t *d = &sim.dev[a->device];
    size_t off = a->addr - (uintptr_t)d->base;
    release_pages(d->base + off, a->reserved);
    ext_give(d, off, a->reserved);
    d->used -= a->reserved;
    table_remove(a);
    atomic_fetch_add(&sim.device_frees, 1);
}

/* ------------------------------------------------------------------------
 * Host memory: pinned (cuMemAllocHost) and managed
 * ---------------------------------------------------------------------- */

CUresult sim_host_alloc(size_t size, sim_alloc_kind_t kind, int device, struct CUctx_st *ctx, void **out)
{
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = round_up(size, page);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_alloc_t a = {
        .addr = (uintptr_t)p,
        .size = size,
        .reserved = 0,
        .kind = kind,
        .device = device,
        .ctx = ctx,
    };
    table_insert(&a);
    *out = p;
    return CUDA_SUCCESS;
}

void sim_host_free(sim_alloc_t *a)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    munmap((void *)a->addr, round_up(a->size, page));
    table_remove(a);
}

/* Frees everything a context allocated (context destroy or reset). */
void sim_free_ctx_memory(struct CUctx_st *ctx)
{
    for (size_t i = sim.nallocs; i-- > 0;) {
        sim_alloc_t *a = &sim.allocs[i];
        if (a->ctx != ctx)
            continue;
        sim_alloc_release(a);
    }
}

void sim_alloc_release(sim_alloc_t *a)
{
    struct CUmemPoolHandle_st *pool = a->kind == SIM_ALLOC_POOL ? a->pool : NULL;
    if (pool) {
        pool->reserved_cur -= a->reserved;
        if (!a->pool_free)
            pool->used_cur -= a->reserved;
    }
    if (a->kind == SIM_ALLOC_HOST || a->kind == SIM_ALLOC_MANAGED)
        sim_host_free(a);
    else
        sim_dev_free(a);
    sim_pool_maybe_release(pool);
}

/* ------------------------------------------------------------------------
 * Stream-ordered memory pools
 * ---------------------------------------------------------------------- */

struct CUmemPoolHandle_st *sim_pool_new(sim_device_t *dev, bool is_default)
{
    struct CUmemPoolHandle_st *p = sim_xcalloc(1, sizeof *p);
    p->magic = SIM_MAGIC_POOL;
    p->dev = dev;
    p->is_default = is_default;
    p->reuse_follow_events = 1;
    p->reuse_opportunistic = 1;
    p->reuse_internal_deps = 1;
    handle_add(p, SIM_MAGIC_POOL);
    return p;
}

void sim_pool_maybe_release(struct CUmemPoolHandle_st *pool)
{
    if (!pool || !pool->dead)
        return;
    for (size_t i = 0; i < sim.nallocs; i++)
        if (sim.allocs[i].kind == SIM_ALLOC_POOL && sim.allocs[i].pool == pool)
            return;
    pool->magic = SIM_MAGIC_DEAD;
    sim_handle_release(pool);
}

/* Releases freed blocks whose free has completed until the pool holds at
 * most `keep` bytes. */
void sim_pool_trim(struct CUmemPoolHandle_st *pool, size_t keep)
{
    for (size_t i = sim.nallocs; i-- > 0 && pool->reserved_cur > keep;) {
        sim_alloc_t *a = &sim.allocs[i];
        if (a->kind != SIM_ALLOC_POOL || a->pool != pool || !a->pool_free)
            continue;
        if (sim.completed[a->free_slot] < a->free_seq)
            continue;
        pool->reserved_cur -= a->reserved;
        sim_dev_free(a);
    }
    sim_pool_maybe_release(pool);
}

/* CUDA releases pool memory above the release threshold at synchronisation
 * points. */
void sim_pools_trim_after_sync(struct CUctx_st *ctx)
{
    struct CUmemPoolHandle_st **pools = NULL;
    size_t n = handle_list(SIM_MAGIC_POOL, (void ***)&pools);
    for (size_t i = 0; i < n; i++)
        if (pools[i]->dev == ctx->dev && pools[i]->reserved_cur > pools[i]->release_threshold)
            sim_pool_trim(pools[i], pools[i]->release_threshold);
    free(pools);
}
