/*
 * Expandable segments (expandable_segments:true, PyTorch's key and
 * meaning), on the backend's virtual memory.
 *
 * A segment reserves addresses for 9/8 of the device's memory, as PyTorch
 * does, and starts as one UNMAPPED block: addresses with nothing behind
 * them.  Memory is mapped and given back in pages (the small pool's page is
 * the device's granularity, at least small_segment_size; the large pool's
 * is expandable_page_mb).  Allocated, pending and free blocks lie on mapped
 * pages; UNMAPPED blocks cover whole pages and never touch another UNMAPPED
 * block; a free and an unmapped block never merge (types.h).
 *
 * Growing.  A request that no free block fits takes the place in its
 * (pool, stream)'s segments that needs the fewest new pages mapped (a free
 * block followed by unmapped pages, unmapped pages, or free and unmapped
 * pages in turn), the lowest address among equals, in any segment of that
 * pool and stream; a new segment when none has room.  Mapping is all or
 * nothing: when the device or the limit refuses a page, the pages this
 * call mapped are unmapped again and the pool is as it was.
 *
 * Giving back.  exp_unmap_free unmaps every whole page inside a free block,
 * wherever the block lies (PyTorch unmaps the same pages).  Unmapping,
 * unlike cudaFree, does not wait for queued work: a free block is "idle"
 * when it became free behind a completed fence or event, or the device was
 * synchronised since; one freed in stream order (or under reuse:stream) is
 * not, and its pages go only after one device synchronisation (PyTorch
 * synchronises every time).  During a capture, where no synchronisation is
 * allowed, idle pages still go (PyTorch releases nothing then).  A segment
 * left with nothing mapped gives its addresses back.  It runs when memory
 * is short (the retry ladder), on empty_cache, and above
 * garbage_collection_threshold.
 *
 * Statistics follow PyTorch's: mapped bytes are reserved bytes, each map or
 * unmap call counts as a device allocation or free, an expandable segment
 * is not counted as a segment, and its free blocks are not inactive splits.
 */
#include <string.h>

#include "hostalloc.h"
#include "types.h"

/* The page of a pool's expandable segments. */
static size_t exp_page(const core_dev_t *d, const pool_t *pool)
{
    return pool->small ? d->exp_page_small : d->exp_page_large;
}

size_t exp_need(const core_dev_t *d, size_t rounded)
{
    size_t page = rounded <= d->conf.small_size ? d->exp_page_small : d->exp_page_large;
    return (rounded + page - 1) / page * page;
}

static uintptr_t up(uintptr_t a, size_t to)
{
    return (a + to - 1) / to * to;
}

static uintptr_t down(uintptr_t a, size_t to)
{
    return a / to * to;
}

/* Page boundaries count from the segment's start (a page need not be a
 * power of two, and addresses are aligned to the granularity only). */
static uintptr_t pg_up(const seg_t *s, uintptr_t a)
{
    return s->addr + up(a - s->addr, s->page);
}

static uintptr_t pg_down(const seg_t *s, uintptr_t a)
{
    return s->addr + down(a - s->addr, s->page);
}

static void mapped_stat(core_dev_t *d, seg_t *s, uintptr_t addr, size_t len, int sign)
{
    int cls = pool_class(s->pool);
    stat_add(&d->stats.reserved_bytes[CORE_POOL_ALL], sign * (int64_t)len);
    stat_add(&d->stats.reserved_bytes[cls], sign * (int64_t)len);
    s->mapped = sign > 0 ? s->mapped + len : s->mapped - len;
    if (sign > 0)
        d->stats.num_device_alloc++;
    else
        d->stats.num_device_free++;
    core_emit(d, sign > 0 ? CORE_EV_SEGMENT_MAP : CORE_EV_SEGMENT_UNMAP, addr, len, s->stream, s->pool->owner->id);
}

/* A new segment for (pool, stream): addresses only, one UNMAPPED block. */
static seg_t *seg_new_expandable(core_dev_t *d, pool_t *pool, core_stream_t stream, seg_failure_t *why)
{
    size_t page = exp_page(d, pool), free_bytes = 0, total = 0;
    if (d->be.mem_info(d->be.ctx, d->device, &free_bytes, &total) != CORE_OK || total == 0)
        total = page;
    size_t size = up(total + total / 8, page);
    seg_t *s = hostalloc_calloc(1, sizeof *s);
    block_t *b = block_new(d);
    uintptr_t addr = 0;
    size_t align = page & (page - 1) ? d->be.vmm_granularity(d->be.ctx, d->device) : page;
    int r = s && b ? d->be.va_reserve(d->be.ctx, d->device, size, align, &addr) : CORE_EFAIL;
    if (r != CORE_OK)
        return seg_refused(d, s, b, r, why);
    *s = (seg_t){.addr = addr,
                 .size = size,
                 .pool = pool,
                 .stream = stream,
                 .first = b,
                 .free_since = d->alloc_clock,
                 .expandable = true,
                 .page = page};
    seg_link(d, s);
    *b = (block_t){.addr = addr, .size = size, .seg = s, .pool = pool, .stream = stream, .state = BLOCK_UNMAPPED};
    return s;
}

/* The part of unmapped block b before end_page (a page boundary). */
static size_t to_map(const block_t *b, uintptr_t end_page)
{
    return (b->addr + b->size < end_page ? b->addr + b->size : end_page) - b->addr;
}

/* The bytes of pages to map for `rounded` bytes starting at block `start`,
 * through free and unmapped blocks only; SIZE_MAX when they run out. */
static size_t map_need(const block_t *start, size_t rounded)
{
    uintptr_t end = start->addr + rounded, end_page = pg_up(start->seg, end);
    size_t need = 0;
    for (const block_t *b = start; b; b = b->next) {
        if (b->state != BLOCK_FREE && b->state != BLOCK_UNMAPPED)
            return SIZE_MAX;
        if (b->state == BLOCK_UNMAPPED)
            need += to_map(b, end_page);
        if (b->addr + b->size >= end)
            return need;
    }
    return SIZE_MAX;
}

/* Maps what [start->addr, +rounded) lacks; false (nothing changed) when the
 * backend refuses, with why->backend_error set. */
static bool map_range(core_dev_t *d, seg_t *s, block_t *start, size_t rounded, seg_failure_t *why)
{
    uintptr_t end_page = pg_up(s, start->addr + rounded);
    for (block_t *b = start; b && b->addr < end_page; b = b->next) {
        if (b->state != BLOCK_UNMAPPED)
            continue;
        int r = d->be.map(d->be.ctx, d->device, b->addr, to_map(b, end_page), s->page);
        if (r != CORE_OK) {
            for (block_t *u = start; u != b; u = u->next) /* undo this call's maps */
                if (u->state == BLOCK_UNMAPPED)
                    d->be.unmap(d->be.ctx, d->device, u->addr, to_map(u, end_page));
            why->backend_error = r;
            return false;
        }
    }
    return true;
}

block_t *exp_grow(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t rounded, seg_failure_t *why)
{
    block_t *best = NULL;
    size_t best_need = SIZE_MAX;
    for (int attempt = 0; attempt < 2 && !best; attempt++) {
        if (attempt == 1 && !seg_new_expandable(d, pool, stream, why))
            return NULL;
        for (seg_t *s = d->segs; s; s = s->next) {
            if (!s->expandable || s->pool != pool || s->stream != stream)
                continue;
            for (block_t *b = s->first; b; b = b->next) {
                if (b->state != BLOCK_FREE && b->state != BLOCK_UNMAPPED)
                    continue;
                size_t need = map_need(b, rounded);
                if (need < best_need || (need == best_need && need != SIZE_MAX && b->addr < best->addr)) {
                    best = b;
                    best_need = need;
                }
            }
        }
    }
    if (!best)
        return NULL; /* a request larger than a whole segment */
    if ((size_t)d->stats.reserved_bytes[CORE_POOL_ALL].current + best_need > d->allowed) {
        why->limit_hit = true;
        return NULL;
    }
    /* the one block struct a partly mapped unmapped block needs */
    block_t *rest = block_new(d);
    seg_t *s = best->seg;
    if (!rest || !map_range(d, s, best, rounded, why)) {
        if (!rest)
            why->backend_error = CORE_EFAIL;
        else
            block_delete(d, rest);
        return NULL;
    }
    uintptr_t start = best->addr, end_page = pg_up(s, start + rounded);
    block_t *b = best, *m = best;
    while (b && b->addr < end_page) {
        if (b->state != BLOCK_UNMAPPED) {
            m = b;
            b = b->next;
            continue;
        }
        size_t len = to_map(b, end_page);
        if (len < b->size) { /* the unmapped rest stays: this is the last one */
            *rest = (block_t){.addr = b->addr + len,
                              .size = b->size - len,
                              .prev = b,
                              .next = b->next,
                              .seg = s,
                              .pool = pool,
                              .stream = stream,
                              .state = BLOCK_UNMAPPED};
            if (b->next)
                b->next->prev = rest;
            b->next = rest;
            b->size = len;
            rest = NULL;
        }
        mapped_stat(d, s, b->addr, len, +1);
        m = pool_insert_free(d, b);
        b = m->next;
    }
    if (rest)
        block_delete(d, rest);
    while (m->addr > start)
        m = m->prev;
    return m;
}

/* b takes in its next block (in no tree). */
static void absorb_next(core_dev_t *d, block_t *b)
{
    block_t *n = b->next;
    b->size += n->size;
    b->next = n->next;
    if (n->next)
        n->next->prev = b;
    block_delete(d, n);
}

/* Merges the UNMAPPED block b with its UNMAPPED neighbours. */
static block_t *unmapped_merge(core_dev_t *d, block_t *b)
{
    if (b->next && b->next->state == BLOCK_UNMAPPED)
        absorb_next(d, b);
    if (b->prev && b->prev->state == BLOCK_UNMAPPED) {
        b = b->prev;
        absorb_next(d, b);
    }
    return b;
}

/* A block's whole pages: [*lo, *hi), empty when *hi <= *lo. */
static void whole_pages(const block_t *b, uintptr_t *lo, uintptr_t *hi)
{
    *lo = pg_up(b->seg, b->addr);
    *hi = pg_down(b->seg, b->addr + b->size);
}

/* A free copy of b (its neighbours' links to fix), out of every tree. */
static block_t *free_copy(core_dev_t *d, const block_t *b)
{
    block_t *c = block_new(d);
    if (c) {
        *c = *b;
        memset(&c->node, 0, sizeof c->node);
    }
    return c;
}

/* Unmaps the whole pages of free block b: b keeps [lo, hi), unmapped, with
 * the free rests before and after it split off.  Returns the bytes, and in
 * *next the block to look at next (0 bytes: b untouched). */
static size_t unmap_block(core_dev_t *d, block_t *b, block_t **next)
{
    seg_t *s = b->seg;
    uintptr_t lo, hi, end = b->addr + b->size;
    whole_pages(b, &lo, &hi);
    *next = b->next;
    if (hi <= lo)
        return 0;
    block_t *h = lo > b->addr ? free_copy(d, b) : NULL;
    block_t *t = hi < end ? free_copy(d, b) : NULL;
    if ((lo > b->addr && !h) || (hi < end && !t)) { /* no host memory: keep it mapped */
        if (h)
            block_delete(d, h);
        if (t)
            block_delete(d, t);
        return 0;
    }
    pool_tree_remove(b->pool, b);
    if (h) {
        h->size = lo - b->addr;
        h->next = b;
        if (b->prev)
            b->prev->next = h;
        else
            s->first = h;
        b->prev = h;
        pool_tree_insert(h->pool, h);
    }
    if (t) {
        t->addr = hi;
        t->size = end - hi;
        t->prev = b;
        if (b->next)
            b->next->prev = t;
        b->next = t;
        pool_tree_insert(t->pool, t);
    }
    b->addr = lo;
    b->size = hi - lo;
    b->state = BLOCK_UNMAPPED;
    d->be.unmap(d->be.ctx, d->device, lo, hi - lo);
    mapped_stat(d, s, lo, hi - lo, -1);
    *next = unmapped_merge(d, b)->next;
    return hi - lo;
}

/* Whether free block b has whole pages to give back (idle ones only when
 * `idle_only`). */
static bool unmappable(const block_t *b, bool idle_only)
{
    uintptr_t lo, hi;
    whole_pages(b, &lo, &hi);
    return b->state == BLOCK_FREE && hi > lo && (b->idle || !idle_only);
}

void exp_all_idle(core_dev_t *d)
{
    for (seg_t *s = d->segs; s; s = s->next)
        for (block_t *b = s->expandable ? s->first : NULL; b; b = b->next)
            if (b->state == BLOCK_FREE)
                b->idle = true;
}

size_t exp_unmap_free(core_dev_t *d, ppool_t *only, size_t want)
{
    if (!d->conf.expandable_segments)
        return 0;
    /* Pages of blocks freed in stream order may still be used by queued
     * work, and unmapping, unlike cudaFree, does not wait for it: they go
     * after one synchronisation, and not at all while capturing. */
    bool any = false, busy = false;
    for (const seg_t *s = d->segs; s; s = s->next) {
        if (!s->expandable || !seg_may_release(d, s, only))
            continue;
        any = any || s->mapped == 0;
        for (const block_t *b = s->first; b; b = b->next)
            if (unmappable(b, false)) {
                any = true;
                busy = busy || !b->idle;
            }
    }
    if (!any)
        return 0;
    if (busy && !d->capturing) {
        d->be.device_sync(d->be.ctx, d->device);
        d->stats.num_sync_all_streams++;
        exp_all_idle(d);
    }
    size_t released = 0;
    for (seg_t *s = d->segs, *next; s; s = next) {
        next = s->next;
        if (!s->expandable || !seg_may_release(d, s, only))
            continue;
        for (block_t *b = s->first, *bn; b && released < want; b = bn) {
            bn = b->next;
            if (unmappable(b, true))
                released += unmap_block(d, b, &bn);
        }
        if (s->mapped == 0) { /* nothing left behind its addresses */
            d->be.va_release(d->be.ctx, d->device, s->addr, s->size);
            block_delete(d, s->first);
            seg_unlink_free(d, s);
        }
    }
    return released;
}

/* Free, or pending with no hold: free once its fence or event completes. */
static bool free_later(const block_t *b)
{
    return b->state == BLOCK_FREE || (b->state == BLOCK_PENDING && !b->hold);
}

void exp_releasable(const seg_t *s, size_t *now, size_t *later)
{
    *now = *later = 0;
    const block_t *run = NULL; /* first block of the current run of free_later blocks */
    for (const block_t *b = s->first; b; b = b->next) {
        uintptr_t lo, hi;
        if (b->state == BLOCK_FREE) {
            whole_pages(b, &lo, &hi);
            if (hi > lo)
                *now += hi - lo;
        }
        if (!free_later(b))
            continue;
        if (!run)
            run = b;
        if (!b->next || !free_later(b->next)) { /* the run ends here */
            lo = pg_up(s, run->addr);
            hi = pg_down(s, b->addr + b->size);
            if (hi > lo)
                *later += hi - lo;
            run = NULL;
        }
    }
}

void exp_seg_destroy(core_dev_t *d, seg_t *s)
{
    if (s->mapped)
        d->be.device_sync(d->be.ctx, d->device);
    for (block_t *b = s->first; b;) { /* each mapped run, whole */
        if (b->state == BLOCK_UNMAPPED) {
            b = b->next;
            continue;
        }
        block_t *e = b;
        while (e->next && e->next->state != BLOCK_UNMAPPED)
            e = e->next;
        d->be.unmap(d->be.ctx, d->device, b->addr, e->addr + e->size - b->addr);
        b = e->next;
    }
    for (block_t *b = s->first, *bn; b; b = bn) {
        bn = b->next;
        hostalloc_free(b->uses);
        hostalloc_free(b);
    }
    d->be.va_release(d->be.ctx, d->device, s->addr, s->size);
    hostalloc_free(s);
}
