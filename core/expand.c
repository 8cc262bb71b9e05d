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
 * synchronised since; one freed in stream order (or by a rule that trusts it) is
 * not, and its pages go only after one device synchronisation (PyTorch
 * synchronises every time).  A block taken from free memory that was not
 * idle stays not idle when it is freed behind an event: the event orders
 * its own work, not the work queued before it was taken.  During a capture, where no synchronisation is
 * allowed, idle pages still go (PyTorch releases nothing then).  A segment
 * left with nothing mapped gives its addresses back.  It runs when memory
 * is short (the retry ladder), on empty_cache, and above
 * garbage_collection_threshold.
 *
 * Shared pages (expandable_share_pages:true).  A request that must map
 * pages may instead start in the free tail of a page whose head a block of
 * the same pool holds, and end in the free head of a page whose tail one
 * holds (in any segment: idle memory, or the request's own stream's; two
 * blocks, one piece each): each such page is mapped a second time at the
 * ends of a range of the request's segment (map_alias), new pages between,
 * so that the request maps up to two pages fewer.  A piece becomes a LENT
 * block where it lies, and the bytes of its second mapping that are not
 * the request's a FOREIGN block (at the page's start for a tail, at its
 * end for a head): neither is ever free, allocated or unmapped by the
 * paths above, so each byte of the page is used through one mapping only.
 * Once the borrowed bytes on the page are free and idle again,
 * exp_unmap_free unmaps the second mapping first (share_end) and the piece
 * is free where it lies.  The second mapping is not counted as reserved
 * memory (seg_t.aliased).  Pages are shared only when memory is tight
 * (memory_tight: an eighth of the device or of the allowed bytes left).
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
static void carve(block_t *m, uintptr_t at, block_t *r)
{
    pool_tree_remove(m->pool, m);
    block_split(m, at, r);
    pool_tree_insert(m->pool, m);
    pool_tree_insert(r->pool, r);
}

/* ------------------------------------------------------------------------
 * Shared pages
 * ---------------------------------------------------------------------- */

/* The pages to share for a request: free blocks that lend a piece of one
 * of their pages, the tail of a first page (the request starts in it) and
 * the head of a last page (the request ends in it), either or both; the
 * unmapped block of the request's segment whose range maps them a second
 * time (the tail's page first, the head's last) with the bytes of new
 * pages between. */
typedef struct share_s {
    block_t *tail_donor, *head_donor;
    size_t tail, head; /* the pieces' bytes */
    block_t *room;
    size_t fresh;
} share_t;

/* Whether the page of segment s at page boundary ps is mapped a second
 * time here (a FOREIGN block at its start or its end): its memory is
 * another mapping's, lent already.  b: a block on that page. */
static bool on_alias_page(const block_t *b, uintptr_t ps)
{
    const block_t *h = b;
    while (h->prev && h->addr > ps)
        h = h->prev;
    if (h->state == BLOCK_FOREIGN)
        return true;
    const block_t *t = b;
    while (t->next && t->next->addr < ps + b->seg->page)
        t = t->next;
    return t->state == BLOCK_FOREIGN;
}

/* The free tail of free block b's first page (b covers it to the page's
 * end), 0 when there is none: b starts on a page boundary, ends before the
 * page does, or the page is mapped a second time here. */
static size_t lendable_tail(const block_t *b)
{
    const seg_t *s = b->seg;
    size_t off = (b->addr - s->addr) % s->page;
    if (!off || b->size < s->page - off || on_alias_page(b, b->addr - off))
        return 0;
    return s->page - off;
}

/* The free head of free block b's last page (b covers it from the page's
 * start), 0 when there is none. */
static size_t lendable_head(const block_t *b)
{
    const seg_t *s = b->seg;
    uintptr_t end = b->addr + b->size;
    size_t eoff = (end - s->addr) % s->page;
    if (!eoff || b->size < eoff || on_alias_page(b, end - eoff))
        return 0;
    return eoff;
}

/* The new bytes a request of `rounded` needs besides pieces of t and h
 * bytes: whole pages. */
static size_t share_fresh(size_t rounded, size_t t, size_t h, size_t page)
{
    return rounded > t + h ? up(rounded - t - h, page) : 0;
}

/* Whether free block b of segment s may lend a piece to a request of
 * `stream`: idle, or of that stream's own segment (stream order). */
static bool may_lend(const seg_t *s, const block_t *b, core_stream_t stream)
{
    return b->state == BLOCK_FREE && (b->idle || s->stream == stream);
}

/* The smallest piece (a tail, or a head) of the pool's free blocks, other
 * than `not`, with which the request needs no more new bytes than `fresh`
 * besides `other` bytes of another piece; NULL if none. */
static block_t *smallest_piece(core_dev_t *d, pool_t *pool, core_stream_t stream, bool head, size_t rounded,
                               size_t other, size_t fresh, const block_t *not, size_t *bytes)
{
    block_t *best = NULL;
    for (seg_t *s = d->segs; s; s = s->next) {
        if (!s->expandable || s->pool != pool)
            continue;
        for (block_t *b = s->first; b; b = b->next) {
            size_t v = b != not && may_lend(s, b, stream) ? (head ? lendable_head(b) : lendable_tail(b)) : 0;
            if (v && (!best || v < *bytes) && share_fresh(rounded, other, v, s->page) <= fresh) {
                best = b;
                *bytes = v;
            }
        }
    }
    return best;
}

/* The share that maps fewer new bytes than `need` (a plain placement's)
 * for `rounded` bytes of (pool, stream), and the lowest unmapped range of
 * the request's segments that holds it.  The fewest new bytes, then the
 * fewest pages shared (a tail before a head), then the smallest pieces
 * that give them (the larger ones are kept for larger requests).  A piece
 * of another stream's segment is lent only when idle (no queued work can
 * use it). */
static bool share_pick(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t rounded, size_t need, share_t *out)
{
    /* the largest tail and head, and the largest of each from another
     * block than the other's (a block lends one piece at a time) */
    size_t page = exp_page(d, pool), tm = 0, hm = 0, tm2 = 0, hm2 = 0;
    block_t *tmax = NULL, *hmax = NULL;
    for (seg_t *s = d->segs; s; s = s->next) {
        if (!s->expandable || s->pool != pool)
            continue;
        for (block_t *b = s->first; b; b = b->next) {
            if (!may_lend(s, b, stream))
                continue;
            size_t t = lendable_tail(b), h = lendable_head(b);
            if (t > tm)
                tmax = b, tm = t;
            if (h > hm)
                hmax = b, hm = h;
        }
    }
    for (seg_t *s = d->segs; tmax && tmax == hmax && s; s = s->next) {
        if (!s->expandable || s->pool != pool)
            continue;
        for (block_t *b = s->first; b; b = b->next)
            if (b != tmax && may_lend(s, b, stream)) {
                size_t t = lendable_tail(b), h = lendable_head(b);
                tm2 = t > tm2 ? t : tm2;
                hm2 = h > hm2 ? h : hm2;
            }
    }
    *out = (share_t){0};
    size_t best = need, f;
    if (tmax && (f = share_fresh(rounded, tm, 0, page)) < best) {
        size_t t = 0;
        block_t *tb = smallest_piece(d, pool, stream, false, rounded, 0, f, NULL, &t);
        *out = (share_t){tb, NULL, t, 0, NULL, f};
        best = f;
    }
    if (hmax && (f = share_fresh(rounded, 0, hm, page)) < best) {
        size_t h = 0;
        block_t *hb = smallest_piece(d, pool, stream, true, rounded, 0, f, NULL, &h);
        *out = (share_t){NULL, hb, 0, h, NULL, f};
        best = f;
    }
    /* both: the largest pair from two blocks, then the smallest tail that
     * does as well with the head, and the smallest head with that tail */
    size_t pt = tm, ph = hm;
    if (tmax == hmax) {
        if (tm + hm2 >= tm2 + hm)
            ph = hm2;
        else
            pt = tm2;
    }
    if (pt && ph && (f = share_fresh(rounded, pt, ph, page)) < best) {
        size_t t = 0, h = 0;
        block_t *tb = smallest_piece(d, pool, stream, false, rounded, ph, f, NULL, &t);
        block_t *hb = tb ? smallest_piece(d, pool, stream, true, rounded, t, f, tb, &h) : NULL;
        if (hb)
            *out = (share_t){tb, hb, t, h, NULL, f};
    }
    if (!out->tail_donor && !out->head_donor)
        return false;
    size_t span = out->fresh + page * (!!out->tail_donor + !!out->head_donor);
    for (seg_t *s = d->segs; s && !out->room; s = s->next) {
        if (!s->expandable || s->pool != pool || s->stream != stream)
            continue;
        for (block_t *b = s->first; b && !out->room; b = b->next)
            if (b->state == BLOCK_UNMAPPED && b->size >= span)
                out->room = b;
    }
    return out->room != NULL;
}


/* The lent piece `lent` is reached from `at` (its second mapping) when
 * `out`, from where it lies again when not: the events that say so. */
static void piece_moved(core_dev_t *d, const block_t *lent, uintptr_t at, bool out)
{
    const seg_t *s1 = lent->seg, *s2 = lent->alias->seg;
    core_emit(d, out ? CORE_EV_PIECE_OUT : CORE_EV_PIECE_IN, lent->addr, lent->size, s1->stream, s1->pool->owner->id,
              0);
    core_emit(d, out ? CORE_EV_PIECE_IN : CORE_EV_PIECE_OUT, at, lent->size, s2->stream, s2->pool->owner->id, 0);
}

/* Takes the piece of `bytes` of donor b (a head: its end; a tail: its
 * start) out of its free tree as a LENT block, the rest staying free;
 * spare: a block struct, taken (NULL'ed) when used.  Returns the piece. */
static block_t *lend(block_t *b, size_t bytes, bool head, block_t **spare)
{
    pool_tree_remove(b->pool, b);
    block_t *lent = b;
    if (b->size > bytes) {
        block_split(b, head ? b->addr + b->size - bytes : b->addr + bytes, *spare);
        if (head) {
            lent = *spare;
            pool_tree_insert(b->pool, b);
        } else {
            pool_tree_insert((*spare)->pool, *spare);
        }
        *spare = NULL;
    }
    lent->state = BLOCK_LENT;
    return lent;
}

/* Maps and links share p: returns the free block at the request's start
 * (for pool_take), NULL (nothing changed) when the backend refuses. */
static block_t *share_take(core_dev_t *d, const share_t *p, size_t rounded, seg_failure_t *why)
{
    block_t *u = p->room;
    seg_t *s2 = u->seg;
    size_t page = s2->page;
    /* the range: [the tail's page][fresh][the head's page] */
    uintptr_t q0 = u->addr, fa = q0 + (p->tail_donor ? page : 0), ha = fa + p->fresh;
    uintptr_t end = ha + (p->head_donor ? page : 0);
    uintptr_t tfrom = p->tail_donor ? p->tail_donor->addr + p->tail - page : 0;
    uintptr_t hfrom = p->head_donor ? p->head_donor->addr + p->head_donor->size - p->head : 0;
    block_t *spare[6] = {0};
    for (int i = 0; i < 6; i++)
        if (!(spare[i] = block_new(d))) {
            while (i--)
                block_delete(d, spare[i]);
            why->backend_error = CORE_EFAIL;
            return NULL;
        }
    int r = CORE_OK;
    bool tmapped = false, hmapped = false;
    if (p->tail_donor && (r = d->be.map_alias(d->be.ctx, d->device, q0, tfrom, page)) == CORE_OK)
        tmapped = true;
    if (r == CORE_OK && p->head_donor && (r = d->be.map_alias(d->be.ctx, d->device, ha, hfrom, page)) == CORE_OK)
        hmapped = true;
    if (r == CORE_OK && p->fresh)
        r = d->be.map(d->be.ctx, d->device, fa, p->fresh, page);
    if (r != CORE_OK) {
        if (tmapped)
            d->be.unmap(d->be.ctx, d->device, q0, page);
        if (hmapped)
            d->be.unmap(d->be.ctx, d->device, ha, page);
        for (int i = 0; i < 6; i++)
            block_delete(d, spare[i]);
        why->backend_error = r;
        return NULL;
    }
    bool idle = (!p->tail_donor || p->tail_donor->idle) && (!p->head_donor || p->head_donor->idle);
    block_t *tl = p->tail_donor ? lend(p->tail_donor, p->tail, false, &spare[0]) : NULL;
    block_t *hl = p->head_donor ? lend(p->head_donor, p->head, true, &spare[1]) : NULL;
    /* the borrower's range [q0, end): foreign bytes before the tail and
     * after the head, the rest free */
    if (u->addr + u->size > end)
        split_unmapped(u, end, &spare[2]);
    block_t *room = u;
    if (tl) {
        room = spare[3];
        spare[3] = NULL;
        block_split(u, q0 + page - p->tail, room);
        u->state = BLOCK_FOREIGN;
        u->alias = tl;
        tl->alias = u;
    }
    if (hl) {
        block_t *f = spare[4];
        spare[4] = NULL;
        block_split(room, ha + p->head, f);
        f->state = BLOCK_FOREIGN;
        f->alias = hl;
        hl->alias = f;
    }
    if (tl)
        piece_moved(d, tl, q0 + page - p->tail, true);
    if (hl)
        piece_moved(d, hl, ha, true);
    room->state = BLOCK_UNMAPPED; /* for pool_insert_free, which frees it */
    s2->aliased += page * (!!tl + !!hl);
    d->stats.num_shared_pages += !!tl + !!hl;
    if (p->fresh)
        mapped_stat(d, s2, fa, p->fresh, +1);
    room = pool_insert_free(d, room);
    if (!idle)
        room->idle = false; /* the lent bytes: the lender's stream's queued work may still use them */
    /* with a head alone the request ends where the piece does: the free
     * front before it stays */
    uintptr_t at = !tl && hl ? ha + p->head - rounded : room->addr;
    if (at > room->addr) {
        carve(room, at, spare[5]);
        spare[5] = NULL;
        room = room->next;
    }
    for (int i = 0; i < 6; i++)
        if (spare[i])
            block_delete(d, spare[i]);
    return room;
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
    size_t margin = total / 8, reserved = (size_t)d->stats.reserved_bytes[CORE_POOL_ALL].current;
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
        if ((size_t)d->stats.reserved_bytes[CORE_POOL_ALL].current + sh.fresh > d->allowed) {
            why->limit_hit = true;
            return NULL;
        }
        block_t *b = share_take(d, &sh, rounded, why);
        if (b)
            return b;
        *why = (seg_failure_t){false, 0}; /* refused: the plain way */
    }
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

/* Merges the UNMAPPED block b with its UNMAPPED neighbours. */
static block_t *unmapped_merge(core_dev_t *d, block_t *b)
{
    if (b->next && b->next->state == BLOCK_UNMAPPED)
        block_absorb(d, b, b->next);
    if (b->prev && b->prev->state == BLOCK_UNMAPPED) {
        b = b->prev;
        block_absorb(d, b, b->next);
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

/* Whether FOREIGN block f starts its page (the second mapping lends a
 * tail: the borrower's bytes follow f) or ends it (a head: they precede). */
static bool foreign_first(const block_t *f)
{
    return (f->addr - f->seg->addr) % f->seg->page == 0;
}

/* The free block that covers the borrower's bytes of FOREIGN block f's
 * page (they are all free again), else NULL. */
static block_t *share_over(const block_t *f)
{
    const seg_t *s = f->seg;
    if (foreign_first(f)) {
        block_t *n = f->next;
        return n && n->state == BLOCK_FREE && n->addr + n->size >= f->addr + s->page ? n : NULL;
    }
    block_t *n = f->prev;
    uintptr_t ps = f->addr + f->size - s->page;
    return n && n->state == BLOCK_FREE && n->addr <= ps ? n : NULL;
}

/* Ends the sharing of FOREIGN block f's page once its borrowed bytes are
 * free and idle: the second mapping is unmapped (its addresses unmapped
 * again) and the lent piece is free where it lies.  False when it cannot
 * end yet (or no block struct can be had). */
static bool share_end(core_dev_t *d, block_t *f)
{
    block_t *n = share_over(f);
    if (!n || !n->idle)
        return false;
    seg_t *s = f->seg;
    bool first = foreign_first(f);
    uintptr_t ps = first ? f->addr : f->addr + f->size - s->page, pe = ps + s->page;
    /* the free bytes beyond the page stay free */
    bool cut = first ? n->addr + n->size > pe : n->addr < ps;
    block_t *rest = cut ? block_new(d) : NULL;
    if (cut && !rest)
        return false;
    pool_tree_remove(n->pool, n);
    if (cut) {
        block_split(n, first ? pe : ps, rest); /* n: the low part, rest: the high */
        if (first) {
            pool_tree_insert(rest->pool, rest);
        } else {
            pool_tree_insert(n->pool, n);
            n = rest;
        }
    }
    /* n is now exactly the borrower's bytes: f takes them in, unmapped */
    if (first) {
        f->next = n->next;
        if (n->next)
            n->next->prev = f;
    } else {
        f->prev = n->prev;
        if (n->prev)
            n->prev->next = f;
        else
            s->first = f;
    }
    block_delete(d, n);
    block_t *lent = f->alias;
    piece_moved(d, lent, first ? ps + f->size : ps, false);
    d->be.unmap(d->be.ctx, d->device, ps, s->page);
    s->aliased -= s->page;
    f->alias = NULL;
    f->addr = ps;
    f->size = s->page;
    f->state = BLOCK_UNMAPPED;
    unmapped_merge(d, f);
    lent->alias = NULL;
    pool_insert_free(d, lent); /* idle: the borrower's bytes were */
    return true;
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
        any = any || (s->mapped == 0 && s->aliased == 0);
        for (const block_t *b = s->first; b; b = b->next) {
            const block_t *n = b->state == BLOCK_FOREIGN ? share_over(b) : NULL;
            if (n || unmappable(b, false)) {
                any = true;
                busy = busy || !(n ? n : b)->idle;
            }
        }
    }
    if (!any)
        return 0;
    if (busy && !d->capturing && d->be.device_sync(d->be.ctx, d->device) == CORE_OK) {
        d->stats.num_sync_all_streams++;
        exp_all_idle(d); /* else only the idle pages go */
    }
    /* shared pages whose borrowers' bytes are free first: their lent tails
     * may complete a free page where they lie */
    for (seg_t *s = d->segs; s; s = s->next) {
        if (!s->expandable || !s->aliased || !seg_may_release(d, s, only))
            continue;
        for (block_t *b = s->first, *bn; b; b = bn) {
            bn = b->next;
            if (b->state == BLOCK_FOREIGN && share_end(d, b))
                bn = s->first; /* b was merged away perhaps: again from the start */
        }
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
        if (s->mapped == 0 && s->aliased == 0) { /* nothing left behind its addresses */
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
    if (s->mapped || s->aliased) /* a borrower's second mappings too: queued work may use them */
        d->be.device_sync(d->be.ctx, d->device);
    /* each mapped run, whole, but for the pages mapped a second time here
     * (shared pages: their own unmap each, around their FOREIGN blocks) */
    for (block_t *b = s->first; b;) {
        if (b->state == BLOCK_UNMAPPED) {
            b = b->next;
            continue;
        }
        uintptr_t a = b->addr; /* the run's bytes not unmapped yet start here */
        for (; b && b->state != BLOCK_UNMAPPED; b = b->next) {
            if (b->state != BLOCK_FOREIGN)
                continue;
            uintptr_t ps = foreign_first(b) ? b->addr : b->addr + b->size - s->page;
            if (ps > a)
                d->be.unmap(d->be.ctx, d->device, a, ps - a);
            d->be.unmap(d->be.ctx, d->device, ps, s->page);
            a = ps + s->page;
        }
        uintptr_t z = b ? b->addr : s->addr + s->size;
        if (z > a)
            d->be.unmap(d->be.ctx, d->device, a, z - a);
    }
    for (block_t *b = s->first, *bn; b; b = bn) {
        bn = b->next;
        hostalloc_free(b->uses);
        hostalloc_free(b);
    }
    d->be.va_release(d->be.ctx, d->device, s->addr, s->size);
    hostalloc_free(s);
}
