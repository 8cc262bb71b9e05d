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
 * (pool, stream)'s segments that needs the fewest new pages mapped, the
 * lowest address among equals, in any segment of that pool and stream; a
 * new segment when none has room.  The places tried are the start of each
 * range of free and unmapped blocks, and its end flush against the live
 * block that follows it: that block's partly used page serves part of the
 * request (docs/fragmentation.md measures both).  Mapping is all or
 * nothing: when the device or the limit refuses a page, the pages this
 * call mapped are unmapped again and the pool is as it was.
 *
 * Giving back.  exp_unmap_free unmaps every whole page inside a free block,
 * wherever the block lies (PyTorch unmaps the same pages).  Unmapping,
 * unlike cudaFree, does not wait for queued work: a free block is "idle"
 * when it became free behind a completed fence or event, or the device was
 * synchronised since; one freed in stream order (or under reuse:stream) is
 * not, and its pages go only after one device synchronisation (PyTorch
 * synchronises every time).  A block taken from free memory that was not
 * idle stays not idle when it is freed behind an event: the event orders
 * its own work, not the work queued before it was taken.  During a capture, where no synchronisation is
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
    core_emit(d, sign > 0 ? CORE_EV_SEGMENT_MAP : CORE_EV_SEGMENT_UNMAP, addr, len, s->stream, s->pool->owner->id, 0);
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

static bool room(const block_t *b)
{
    return b->state == BLOCK_FREE || b->state == BLOCK_UNMAPPED;
}

/* Where a request goes: `rounded` bytes at addr, which lies in block first. */
typedef struct place_s {
    block_t *first;
    uintptr_t addr;
    size_t need; /* bytes of pages to map */
} place_t;

/* The bytes of pages to map for `rounded` bytes at addr (in block first),
 * through free and unmapped blocks only; SIZE_MAX when they run out.  A
 * free block's pages are mapped and an unmapped block starts and ends on
 * page boundaries, so only unmapped blocks from first on count. */
static size_t place_need(const block_t *first, uintptr_t addr, size_t rounded)
{
    const seg_t *s = first->seg;
    uintptr_t lo = pg_down(s, addr), end = addr + rounded, hi = pg_up(s, end);
    size_t need = 0;
    for (const block_t *b = first; b; b = b->next) {
        if (!room(b))
            return SIZE_MAX;
        if (b->state == BLOCK_UNMAPPED) {
            uintptr_t a = b->addr > lo ? b->addr : lo, z = b->addr + b->size < hi ? b->addr + b->size : hi;
            need += z - a;
        }
        if (b->addr + b->size >= end)
            return need;
    }
    return SIZE_MAX;
}

/* A better place: fewer pages to map, then the lower address. */
static void consider(place_t *best, block_t *first, uintptr_t addr, size_t rounded)
{
    size_t need = place_need(first, addr, rounded);
    if (need == SIZE_MAX)
        return;
    if (need < best->need || (need == best->need && addr < best->addr))
        *best = (place_t){first, addr, need};
}

/* Splits unmapped block b at page boundary at (b->addr < at < its end) with
 * the spare struct *spare (taken). */
static void split_unmapped(block_t *b, uintptr_t at, block_t **spare)
{
    block_t *r = *spare;
    *spare = NULL;
    *r = (block_t){.addr = at,
                   .size = b->addr + b->size - at,
                   .prev = b,
                   .next = b->next,
                   .seg = b->seg,
                   .pool = b->pool,
                   .stream = b->stream,
                   .state = BLOCK_UNMAPPED};
    if (b->next)
        b->next->prev = r;
    b->next = r;
    b->size = at - b->addr;
}

/* Maps the pages of place p's range that are unmapped; false (nothing
 * changed) when the backend refuses, with why->backend_error set. */
static bool map_place(core_dev_t *d, const place_t *p, size_t rounded, seg_failure_t *why)
{
    seg_t *s = p->first->seg;
    uintptr_t lo = pg_down(s, p->addr), hi = pg_up(s, p->addr + rounded);
    for (block_t *b = p->first; b && b->addr < hi; b = b->next) {
        if (b->state != BLOCK_UNMAPPED)
            continue;
        uintptr_t a = b->addr > lo ? b->addr : lo, z = b->addr + b->size < hi ? b->addr + b->size : hi;
        int r = d->be.map(d->be.ctx, d->device, a, z - a, s->page);
        if (r != CORE_OK) {
            for (block_t *u = p->first; u != b; u = u->next) /* undo this call's maps */
                if (u->state == BLOCK_UNMAPPED) {
                    uintptr_t ua = u->addr > lo ? u->addr : lo;
                    uintptr_t uz = u->addr + u->size < hi ? u->addr + u->size : hi;
                    d->be.unmap(d->be.ctx, d->device, ua, uz - ua);
                }
            why->backend_error = r;
            return false;
        }
    }
    return true;
}

/* Splits free block m at `at` with the block struct r: both halves free,
 * in the tree, for pool_take to take the upper one at once. */
static void carve(block_t *m, uintptr_t at, block_t *r)
{
    pool_tree_remove(m->pool, m);
    *r = *m;
    memset(&r->node, 0, sizeof r->node);
    r->addr = at;
    r->size = m->addr + m->size - at;
    r->prev = m;
    if (r->next)
        r->next->prev = r;
    m->next = r;
    m->size = at - m->addr;
    pool_tree_insert(m->pool, m);
    pool_tree_insert(r->pool, r);
}

block_t *exp_grow(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t rounded, seg_failure_t *why)
{
    place_t best = {NULL, 0, SIZE_MAX};
    for (int attempt = 0; attempt < 2 && !best.first; attempt++) {
        if (attempt == 1 && !seg_new_expandable(d, pool, stream, why))
            return NULL;
        for (seg_t *s = d->segs; s; s = s->next) {
            if (!s->expandable || s->pool != pool || s->stream != stream)
                continue;
            for (block_t *b = s->first; b; b = b->next) {
                if (!room(b))
                    continue;
                /* at the start of a room, and flush against the live block
                 * that ends it: its partly used page serves the request */
                if (!b->prev || !room(b->prev))
                    consider(&best, b, b->addr, rounded);
                if (b->next && !room(b->next) && b->addr + b->size - s->addr >= rounded) {
                    uintptr_t at = b->addr + b->size - rounded;
                    block_t *f = b;
                    while (f && f->addr > at && f->prev && room(f->prev))
                        f = f->prev;
                    if (f->addr <= at)
                        consider(&best, f, at, rounded);
                }
            }
        }
    }
    if (!best.first)
        return NULL; /* a request larger than a whole segment */
    if ((size_t)d->stats.reserved_bytes[CORE_POOL_ALL].current + best.need > d->allowed) {
        why->limit_hit = true;
        return NULL;
    }
    /* every block struct this may need, first: an unmapped block split on
     * both sides, the free block carved in front, and pool_take's split */
    block_t *spare[4] = {0};
    for (int i = 0; i < 4; i++)
        if (!(spare[i] = block_new(d))) {
            while (i--)
                block_delete(d, spare[i]);
            why->backend_error = CORE_EFAIL;
            return NULL;
        }
    seg_t *s = best.first->seg;
    if (!map_place(d, &best, rounded, why)) {
        for (int i = 0; i < 4; i++)
            block_delete(d, spare[i]);
        return NULL;
    }
    uintptr_t lo = pg_down(s, best.addr), hi = pg_up(s, best.addr + rounded);
    block_t *b = best.first, *m = NULL;
    while (b && b->addr < hi) {
        if (b->state != BLOCK_UNMAPPED) {
            m = b;
            b = b->next;
            continue;
        }
        if (b->addr < lo) { /* the pages before lo stay unmapped */
            split_unmapped(b, lo, &spare[0]);
            b = b->next;
        }
        if (b->addr + b->size > hi)
            split_unmapped(b, hi, &spare[1]);
        mapped_stat(d, s, b->addr, b->size, +1);
        m = pool_insert_free(d, b);
        b = m->next;
    }
    while (m->addr > best.addr)
        m = m->prev;
    if (m->addr < best.addr) { /* the free front stays */
        carve(m, best.addr, spare[2]);
        spare[2] = NULL;
        m = m->next;
    }
    for (int i = 0; i < 4; i++) /* the rest go back to the spare list: pool_take finds one */
        if (spare[i])
            block_delete(d, spare[i]);
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
    if (busy && !d->capturing && d->be.device_sync(d->be.ctx, d->device) == CORE_OK) {
        d->stats.num_sync_all_streams++;
        exp_all_idle(d); /* else only the idle pages go */
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
