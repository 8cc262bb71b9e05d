/*
 * Expandable segments, giving back: unmapping the whole pages of free
 * blocks (idle ones at once, others after one synchronisation), what could
 * go back (for the reports), and destroying a segment (expand.h has the
 * design).
 */
#include <string.h>

#include "expand.h"
#include "hostalloc.h"

/* Merges the UNMAPPED block b with its UNMAPPED neighbours. */
block_t *exp_unmapped_merge(core_dev_t *d, block_t *b)
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
    exp_mapped_stat(d, s, lo, hi - lo, -1);
    *next = exp_unmapped_merge(d, b)->next;
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
            uintptr_t ps = share_foreign_first(b) ? b->addr : b->addr + b->size - s->page;
            if (ps > a)
                d->be.unmap(d->be.ctx, d->device, a, ps - a);
            d->be.unmap(d->be.ctx, d->device, ps, s->page);
            a = ps + s->page;
        }
        uintptr_t z = b ? b->addr : s->addr + s->size;
        if (z > a)
            d->be.unmap(d->be.ctx, d->device, a, z - a);
    }
    block_free_chain(s->first);
    d->be.va_release(d->be.ctx, d->device, s->addr, s->size);
    hostalloc_free(s);
}
