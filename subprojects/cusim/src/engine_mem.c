/*
 * Simulated device memory: pages and addresses of each device, the table
 * of live allocations, host (pinned and managed) memory, and the
 * stream-ordered memory pools.  All functions are called with sim.lock
 * held, except sim_dev_init (at cuInit, under it too).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine.h"
#include "handles.h"

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
    return sim_array_upper(sim.allocs, sim.nallocs, sizeof *sim.allocs, offsetof(sim_alloc_t, addr), x);
}

sim_alloc_t *sim_alloc_find(uintptr_t addr)
{
    sim_alloc_t *a = sim_array_floor(sim.allocs, sim.nallocs, sizeof *sim.allocs, offsetof(sim_alloc_t, addr), addr);
    return a && addr < a->addr + (a->size ? a->size : 1) ? a : NULL;
}

/* An array's bytes are no program's memory: no pointer reaches them. */
sim_alloc_t *sim_alloc_live(uintptr_t addr)
{
    sim_alloc_t *a = sim_alloc_find(addr);
    return a && !a->freeing && !(a->kind == SIM_ALLOC_POOL && a->pool_free) && a->kind != SIM_ALLOC_ARRAY ? a : NULL;
}

bool sim_alloc_overlaps(uintptr_t lo, uintptr_t hi)
{
    size_t i = upper_bound(lo);
    if (i > 0 && sim_alloc_find(lo))
        return true;
    return i < sim.nallocs && sim.allocs[i].addr < hi;
}

sim_alloc_t *sim_alloc_exact(uintptr_t addr)
{
    sim_alloc_t *a = sim_alloc_find(addr);
    return a && a->addr == addr ? a : NULL;
}

sim_alloc_t *sim_alloc_new(uintptr_t addr, size_t size, sim_alloc_kind_t kind, int device)
{
    sim.allocs = sim_array_room(sim.allocs, sim.nallocs, &sim.cap_allocs, sizeof *sim.allocs, 64);
    size_t i = upper_bound(addr); /* before the count changes: it searches sim.nallocs entries */
    sim_alloc_t *a = sim_array_open(sim.allocs, sim.nallocs++, sizeof *sim.allocs, i);
    *a = (sim_alloc_t){
        .addr = addr,
        .size = size,
        .kind = kind,
        .device = device,
        .buffer_id = ++sim.next_buffer_id,
    };
    return a;
}

void sim_alloc_remove(sim_alloc_t *a)
{
    vc_release(a->free_vc);
    free(a->hints);
    sim_array_close(sim.allocs, sim.nallocs--, sizeof *sim.allocs, (size_t)(a - sim.allocs));
}

bool sim_range_ok(uintptr_t addr, size_t bytes, sim_alloc_t **out)
{
    sim_alloc_t *a = sim_alloc_live(addr);
    if (!a)
        return false;
    if (bytes > a->size || addr - a->addr > a->size - bytes)
        return false;
    if (out)
        *out = a;
    return true;
}

/* ------------------------------------------------------------------------
 * Device memory: pages, wherever they lie, and addresses
 *
 * Like a GPU, which maps 2 MiB pages anywhere behind a virtual address, a
 * device refuses an allocation only when too few pages are free: the
 * addresses come from a range several times the capacity, so no pattern of
 * frees leaves free pages that no request can use.  Requests up to 1 MiB
 * are packed at 512 bytes into pages of their own (one page charged while
 * any of them lives), larger ones take whole pages.
 * ---------------------------------------------------------------------- */

static void ext_remove(sim_extents_t *x, size_t i)
{
    sim_array_close(x->ext, x->n--, sizeof *x->ext, i);
}

static void ext_insert(sim_extents_t *x, size_t i, sim_extent_t e)
{
    x->ext = sim_array_room(x->ext, x->n, &x->cap, sizeof *x->ext, 16);
    *(sim_extent_t *)sim_array_open(x->ext, x->n++, sizeof *x->ext, i) = e;
}

void sim_ext_init(sim_extents_t *x, size_t len)
{
    x->n = 0;
    ext_insert(x, 0, (sim_extent_t){.off = 0, .len = len});
}

/* Cuts [off, off+len) out of extent i, which holds it. */
static size_t ext_cut(sim_extents_t *x, size_t i, size_t off, size_t len)
{
    sim_extent_t e = x->ext[i];
    ext_remove(x, i);
    if (off + len < e.off + e.len)
        ext_insert(x, i, (sim_extent_t){off + len, e.off + e.len - (off + len)});
    if (off > e.off)
        ext_insert(x, i, (sim_extent_t){e.off, off - e.off});
    return off;
}

size_t sim_ext_take(sim_extents_t *x, uintptr_t base, size_t len, size_t align, size_t at)
{
    if (at != SIZE_MAX)
        for (size_t i = 0; i < x->n; i++) {
            sim_extent_t e = x->ext[i];
            if (e.off <= at && at - e.off <= e.len && e.len - (at - e.off) >= len)
                return ext_cut(x, i, at, len);
        }
    for (size_t i = 0; i < x->n; i++) {
        sim_extent_t e = x->ext[i];
        size_t off = round_up(base + e.off, align) - base;
        if (off - e.off <= e.len && e.len - (off - e.off) >= len)
            return ext_cut(x, i, off, len);
    }
    return SIZE_MAX;
}

void sim_ext_give(sim_extents_t *x, size_t off, size_t len)
{
    size_t i = 0;
    while (i < x->n && x->ext[i].off < off)
        i++;
    ext_insert(x, i, (sim_extent_t){off, len});
    if (i + 1 < x->n && x->ext[i].off + x->ext[i].len == x->ext[i + 1].off) {
        x->ext[i].len += x->ext[i + 1].len;
        ext_remove(x, i + 1);
    }
    if (i > 0 && x->ext[i - 1].off + x->ext[i - 1].len == x->ext[i].off) {
        x->ext[i - 1].len += x->ext[i].len;
        ext_remove(x, i);
    }
}

/* Drops the bytes of [addr, addr+len): the host gets the memory back and
 * the range reads as zeros (a GPU's would hold stale data: tests must not
 * rely on either). */
static void drop_bytes(sim_device_t *d, uintptr_t addr, size_t len)
{
    off_t off = (off_t)(addr - (uintptr_t)d->base);
    if (fallocate(d->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, (off_t)len) != 0)
        memset((void *)addr, 0, len);
}

CUresult sim_dev_init(sim_device_t *d, int ordinal, size_t capacity, size_t span)
{
    /* Reserve span + one page of addresses (the memory is mapped at the
     * first page boundary inside).  Where the process cannot have that
     * many (ThreadSanitizer keeps most of the address space for itself),
     * half as many, down to the capacity: fewer addresses only make
     * patterns that defeat first fit possible again. */
    const size_t want = span;
    uint8_t *raw = mmap(NULL, span + SIM_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    while (raw == MAP_FAILED) {
        span = span / 2 / SIM_PAGE * SIM_PAGE;
        if (span == 0 || span < capacity / SIM_PAGE * SIM_PAGE) {
            sim_log("device %d: cannot reserve %zu bytes of addresses: %s", ordinal, want, strerror(errno));
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        raw = mmap(NULL, span + SIM_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    }
    char name[32];
    snprintf(name, sizeof name, "cucache-sim-dev%d", ordinal);
    int fd = memfd_create(name, MFD_CLOEXEC);
    void *p = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)span) == 0) {
        uintptr_t base = ((uintptr_t)raw + SIM_PAGE - 1) & ~(uintptr_t)(SIM_PAGE - 1);
        p = mmap((void *)base, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    }
    if (p == MAP_FAILED) {
        sim_log("device %d: cannot create its memory (memfd of %zu bytes): %s", ordinal, span, strerror(errno));
        munmap(raw, span + SIM_PAGE);
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* A fork child cannot use the device (as on a GPU): it does not inherit
     * its memory either. */
    madvise(p, span, MADV_DONTFORK);
    d->ordinal = ordinal;
    d->base = p;
    d->span = span;
    d->memfd = fd;
    d->capacity = capacity / SIM_PAGE * SIM_PAGE;
    d->pages = capacity / SIM_PAGE;
    d->pages_used = 0;
    d->vmm_bytes = 0;
    memset(&d->graph_mem, 0, sizeof d->graph_mem);
    sim_ext_init(&d->addrs, span);
    return CUDA_SUCCESS;
}

/* The bytes of the device this process does not hold. */
static size_t local_free(const sim_device_t *d)
{
    return (d->pages - d->pages_used) * SIM_PAGE - d->vmm_bytes - d->graph_mem.reserved;
}

size_t sim_dev_free_bytes(const sim_device_t *dev)
{
    sim_ipc_sweep();
    sim_vmm_sweep();
    if (sim.shared) {
        uint64_t used = sim_shared_used(sim.shared, dev->ordinal);
        return used < dev->capacity ? dev->capacity - (size_t)used : 0;
    }
    return local_free(dev);
}

bool sim_dev_charge(sim_device_t *d, size_t bytes)
{
    if (sim.shared)
        return sim_shared_charge(sim.shared, d->ordinal, bytes);
    return bytes <= local_free(d);
}

void sim_dev_uncharge(sim_device_t *d, size_t bytes)
{
    if (sim.shared)
        sim_shared_uncharge(sim.shared, d->ordinal, bytes);
}

size_t sim_dev_round(size_t size)
{
    return round_up(size, size <= SIM_SMALL_MAX ? SIM_SMALL_GRAIN : SIM_PAGE);
}

/* Pages [addr, addr+n pages) charged and given addresses, or 0. */
static uintptr_t pages_take(sim_device_t *d, size_t n)
{
    if (!sim_dev_charge(d, n * SIM_PAGE))
        return 0;
    size_t off = sim_ext_take(&d->addrs, (uintptr_t)d->base, n * SIM_PAGE, SIM_PAGE, SIZE_MAX);
    if (off == SIZE_MAX) {
        sim_dev_uncharge(d, n * SIM_PAGE);
        return 0;
    }
    d->pages_used += n;
    return (uintptr_t)d->base + off;
}

static void pages_give(sim_device_t *d, uintptr_t addr, size_t n)
{
    drop_bytes(d, addr, n * SIM_PAGE);
    sim_ext_give(&d->addrs, addr - (uintptr_t)d->base, n * SIM_PAGE);
    d->pages_used -= n;
    sim_dev_uncharge(d, n * SIM_PAGE);
}

/* The first run of n clear bits in a page's map, or -1. */
static long grains_find(const sim_smallpage_t *sp, size_t n)
{
    size_t run = 0;
    for (size_t i = 0; i < SIM_SMALL_GRAINS;) {
        uint64_t w = sp->bits[i / 64];
        if (i % 64 == 0 && (w == 0 || w == ~(uint64_t)0)) {
            run = w ? 0 : run + 64;
            i += 64;
            if (run >= n)
                return (long)(i - run);
            continue;
        }
        run = (w >> (i % 64)) & 1 ? 0 : run + 1;
        i++;
        if (run == n)
            return (long)(i - n);
    }
    return -1;
}

static void grains_set(sim_smallpage_t *sp, size_t first, size_t n, bool on)
{
    for (size_t i = first; i < first + n; i++) {
        if (on)
            sp->bits[i / 64] |= (uint64_t)1 << (i % 64);
        else
            sp->bits[i / 64] &= ~((uint64_t)1 << (i % 64));
    }
    sp->used = on ? sp->used + n : sp->used - n;
}

/* len bytes (a multiple of the grain) packed into a small page, first fit
 * over the pages in address order; a new page when none has room. */
static uintptr_t small_take(sim_device_t *d, size_t len)
{
    size_t n = len / SIM_SMALL_GRAIN;
    for (size_t i = 0; i < d->nsmall; i++) {
        sim_smallpage_t *sp = &d->small[i];
        if (SIM_SMALL_GRAINS - sp->used < n)
            continue;
        long g = grains_find(sp, n);
        if (g >= 0) {
            grains_set(sp, (size_t)g, n, true);
            return sp->addr + (size_t)g * SIM_SMALL_GRAIN;
        }
    }
    uintptr_t page = pages_take(d, 1);
    if (!page)
        return 0;
    d->small = sim_array_room(d->small, d->nsmall, &d->cap_small, sizeof *d->small, 8);
    size_t i = sim_array_upper(d->small, d->nsmall, sizeof *d->small, offsetof(sim_smallpage_t, addr), page);
    sim_smallpage_t *sp = sim_array_open(d->small, d->nsmall++, sizeof *d->small, i);
    memset(sp, 0, sizeof *sp);
    sp->addr = page;
    grains_set(sp, 0, n, true);
    return page;
}

static void small_give(sim_device_t *d, uintptr_t addr, size_t len)
{
    uintptr_t page = addr & ~(uintptr_t)(SIM_PAGE - 1);
    for (size_t i = 0; i < d->nsmall; i++) {
        sim_smallpage_t *sp = &d->small[i];
        if (sp->addr != page)
            continue;
        drop_bytes(d, addr, len);
        grains_set(sp, (addr - page) / SIM_SMALL_GRAIN, len / SIM_SMALL_GRAIN, false);
        if (sp->used == 0) {
            sim_array_close(d->small, d->nsmall--, sizeof *d->small, i);
            pages_give(d, page, 1);
        }
        return;
    }
}

uintptr_t sim_dev_addr_take(sim_device_t *d, size_t len)
{
    size_t off = sim_ext_take(&d->addrs, (uintptr_t)d->base, round_up(len, SIM_PAGE), SIM_PAGE, SIZE_MAX);
    return off == SIZE_MAX ? 0 : (uintptr_t)d->base + off;
}

void sim_dev_addr_give(sim_device_t *d, uintptr_t addr, size_t len)
{
    len = round_up(len, SIM_PAGE);
    drop_bytes(d, addr, len);
    sim_ext_give(&d->addrs, addr - (uintptr_t)d->base, len);
}

CUresult sim_dev_alloc(sim_device_t *dev, size_t size, sim_alloc_kind_t kind, struct CUctx_st *ctx, sim_alloc_t **out)
{
    if (size == 0 || size > dev->capacity)
        return size ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    sim_ipc_sweep();
    size_t len = sim_dev_round(size);
    uintptr_t addr = size <= SIM_SMALL_MAX ? small_take(dev, len) : pages_take(dev, len / SIM_PAGE);
    if (!addr)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_alloc_t *a = sim_alloc_new(addr, size, kind, dev->ordinal);
    a->reserved = len;
    a->ctx = ctx;
    *out = a;
    atomic_fetch_add(&sim.device_allocs, 1);
    return CUDA_SUCCESS;
}

void sim_dev_release_range(int device, uintptr_t addr, size_t reserved)
{
    sim_device_t *d = &sim.dev[device];
    if (reserved <= SIM_SMALL_MAX)
        small_give(d, addr, reserved);
    else
        pages_give(d, addr, reserved / SIM_PAGE);
}

void sim_dev_free(sim_alloc_t *a)
{
    if (sim_ipc_freeing(a))
        sim_dev_release_range(a->device, a->addr, a->reserved);
    sim_alloc_remove(a);
    atomic_fetch_add(&sim.device_frees, 1);
}

/* ------------------------------------------------------------------------
 * Host memory: pinned (cuMemAllocHost) and managed
 * ---------------------------------------------------------------------- */

CUresult sim_host_alloc(size_t size, sim_alloc_kind_t kind, struct CUctx_st *ctx, void **out)
{
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = round_up(size, page);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_alloc_add((uintptr_t)p, size, kind, 0, ctx);
    *out = p;
    return CUDA_SUCCESS;
}

void sim_host_free(sim_alloc_t *a)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (a->kind == SIM_ALLOC_HOST || a->kind == SIM_ALLOC_MANAGED)
        munmap((void *)a->addr, round_up(a->size, page));
    sim_alloc_remove(a);
}

sim_alloc_t *sim_alloc_add(uintptr_t addr, size_t size, sim_alloc_kind_t kind, unsigned flags, struct CUctx_st *ctx)
{
    sim_alloc_t *a = sim_alloc_new(addr, size, kind, ctx->dev->ordinal);
    a->flags = flags;
    a->ctx = ctx;
    return a;
}

CUresult sim_host_register(void *p, size_t size, unsigned flags, struct CUctx_st *ctx)
{
    uintptr_t lo = (uintptr_t)p;
    if (!p || size == 0 || size > UINTPTR_MAX - lo || sim_device_of(lo) || sim_device_of(lo + size - 1) ||
        sim_vmm_region(lo) || sim_vmm_region(lo + size - 1))
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_alloc_overlaps(lo, lo + size))
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    /* The range must be mapped, as the real driver pins its pages. */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), first = lo & ~(page - 1);
    unsigned char vec[64];
    for (uintptr_t at = first; at < lo + size; at += 64 * page) {
        size_t len = lo + size - at < 64 * page ? lo + size - at : 64 * page;
        if (mincore((void *)at, len, vec) != 0)
            return CUDA_ERROR_INVALID_VALUE;
    }
    sim_alloc_add(lo, size, SIM_ALLOC_REGISTERED, flags, ctx);
    return CUDA_SUCCESS;
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
    if (a->kind == SIM_ALLOC_IPC)
        sim_ipc_close(a->addr, true); /* the context that opened it is going */
    else if (a->kind == SIM_ALLOC_HOST || a->kind == SIM_ALLOC_MANAGED || a->kind == SIM_ALLOC_REGISTERED)
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
    p->access[dev->ordinal] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
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
 * most `keep` bytes; a pending free's block stays, whatever keep says, as
 * nothing orders its next owner after the free.  A released block's next
 * owner is ordered after its completed free by the release itself, which
 * the race detector cannot see: the range's records go. */
void sim_pool_trim(struct CUmemPoolHandle_st *pool, size_t keep)
{
    for (size_t i = sim.nallocs; i-- > 0 && pool->reserved_cur > keep;) {
        sim_alloc_t *a = &sim.allocs[i];
        if (a->kind != SIM_ALLOC_POOL || a->pool != pool || !a->pool_free)
            continue;
        if (sim.completed[a->free_slot] < a->free_seq)
            continue;
        pool->reserved_cur -= a->reserved;
        race_forget(a->addr, a->addr + a->reserved);
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
