/*
 * Expandable segments, growing: a new segment, the place in a pool's
 * segments that needs the fewest new pages, and mapping them (expand.h has
 * the whole design).
 */
#include <string.h>

#include "expand.h"
#include "hostalloc.h"

/* The page of a pool's expandable segments. */
size_t exp_page(const core_dev_t *d, const pool_t *pool)
{
    return pool->small ? d->exp_page_small : d->exp_page_large;
}

size_t exp_need(const core_dev_t *d, size_t rounded)
{
    size_t page = rounded <= d->conf.small_size ? d->exp_page_small : d->exp_page_large;
    return (rounded + page - 1) / page * page;
}

void exp_mapped_stat(core_dev_t *d, seg_t *s, uintptr_t addr, size_t len, int sign)
{
    int cls = pool_class(s->pool);
    stat_add2(d->stats.reserved_bytes, cls, sign * (int64_t)len);
    s->mapped = sign > 0 ? s->mapped + len : s->mapped - len;
    if (sign > 0)
        d->stats.num_device_alloc++;
    else
        d->stats.num_device_free++;
    /* pages are mapped on an allocation's slow path: its site; unmapped
     * pages carry none */
    core_emit(d, sign > 0 ? CORE_EV_SEGMENT_MAP : CORE_EV_SEGMENT_UNMAP, addr, len, s->stream, s->pool->owner->id,
              sign > 0 ? d->site_now : 0);
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
    pool_bins_t *bins = pool_bins_get(pool, stream);
    uintptr_t addr = 0;
    size_t align = page & (page - 1) ? d->be.vmm_granularity(d->be.ctx, d->device) : page;
    int r = s && b && bins ? d->be.va_reserve(d->be.ctx, d->device, size, align, &addr) : CORE_EFAIL;
    if (r != CORE_OK)
        return seg_refused(d, s, b, r, why);
    seg_link(d, s, b, pool, bins, addr, size, BLOCK_UNMAPPED);
    s->expandable = true;
    s->page = page;
    s->site = d->site_now;
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
void exp_split_unmapped(block_t *b, uintptr_t at, block_t **spare)
{
    block_t *r = *spare;
    *spare = NULL;
    block_split(b, at, r);
    *r = (block_t){.addr = r->addr,
                   .size = r->size,
                   .prev = b,
                   .next = r->next,
                   .seg = b->seg,
                   .pool = b->pool,
                   .stream = b->stream,
                   .state = BLOCK_UNMAPPED};
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
void exp_carve(block_t *m, uintptr_t at, block_t *r)
{
    pool_tree_remove(m->pool, m);
    block_split(m, at, r);
    pool_tree_insert(m->pool, m);
    pool_tree_insert(r->pool, r);
}

/* Whether mapping `need` more bytes would leave less than an eighth of the
 * device's memory free (or of the allowed bytes): pages are shared only
 * then.  With memory to spare a shared page costs calls for nothing, and
 * its lent piece, which goes back only when memory is short, makes its own
 * segment map more (docs/fragmentation.md measures both). */
static bool memory_tight(core_dev_t *d, size_t need)
{
    size_t free_bytes = 0, total = 0;
    if (d->be.mem_info(d->be.ctx, d->device, &free_bytes, &total) != CORE_OK)
        return true;
    size_t margin = total / 8, reserved = (size_t)stat_all_current(d->stats.reserved_bytes);
    return free_bytes < need + margin || (d->allowed != SIZE_MAX && reserved + need + margin > d->allowed);
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
    share_t sh;
    if (d->conf.share_pages && d->be.map_alias && best.need && memory_tight(d, best.need) &&
        share_pick(d, pool, stream, rounded, best.need, &sh)) {
        if ((size_t)stat_all_current(d->stats.reserved_bytes) + sh.fresh > d->allowed) {
            why->limit_hit = true;
            return NULL;
        }
        block_t *b = share_take(d, &sh, rounded, why);
        if (b)
            return b;
        *why = (seg_failure_t){false, 0}; /* refused: the plain way */
    }
    if ((size_t)stat_all_current(d->stats.reserved_bytes) + best.need > d->allowed) {
        why->limit_hit = true;
        return NULL;
    }
    /* every block struct this may need, first: an unmapped block split on
     * both sides, the free block carved in front, and pool_take's split */
    block_t *spare[4] = {0};
    if (!block_new_n(d, spare, 4)) {
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
            exp_split_unmapped(b, lo, &spare[0]);
            b = b->next;
        }
        if (b->addr + b->size > hi)
            exp_split_unmapped(b, hi, &spare[1]);
        exp_mapped_stat(d, s, b->addr, b->size, +1);
        m = pool_insert_free(d, b);
        b = m->next;
    }
    while (m->addr > best.addr)
        m = m->prev;
    if (m->addr < best.addr) { /* the free front stays */
        exp_carve(m, best.addr, spare[2]);
        spare[2] = NULL;
        m = m->next;
    }
    for (int i = 0; i < 4; i++) /* the rest go back to the spare list: pool_take finds one */
        if (spare[i])
            block_delete(d, spare[i]);
    return m;
}
