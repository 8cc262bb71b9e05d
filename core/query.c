/*
 * What the program and the reports ask of a device's allocator: what a
 * pointer is (core_describe, core_lookup, core_owns), holds and streams
 * recorded on a block, usage and fit figures, the mapped ranges of
 * expandable segments (core_each_mapped).
 */
#include <string.h>

#include "hostalloc.h"
#include "types.h"

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

/* Every block free or pending, none held by another process: the segment
 * is whole again once its pending frees complete. */
static bool seg_reclaimable(const seg_t *s)
{
    for (const block_t *b = s->first; b; b = b->next)
        if (b->state == BLOCK_ALLOCATED || (b->state == BLOCK_PENDING && b->hold))
            return false;
    return true;
}

core_where_t core_describe(core_dev_t *d, uintptr_t addr, core_ptr_info_t *out)
{
    memset(out, 0, sizeof *out);
    dev_lock(d);
    const block_t *b = map_find(d, addr);
    const seg_t *s = b ? b->seg : NULL;
    for (const seg_t *t = d->segs; !s && t; t = t->next)
        if (addr >= t->addr && addr - t->addr < t->size)
            s = t;
    for (const block_t *x = s && !b ? s->first : NULL; x; x = x->next)
        if (addr >= x->addr && addr - x->addr < x->size) {
            b = x->state == BLOCK_ALLOCATED && addr - x->addr < x->requested ? x : NULL;
            break;
        }
    if (s) {
        out->where = b ? CORE_WHERE_LIVE : CORE_WHERE_DEAD;
        out->seg_base = s->addr;
        out->seg_size = s->size;
    }
    if (b) {
        out->base = b->addr;
        out->requested = b->requested;
        out->size = b->size;
        out->stream = b->stream;
        out->id = b->id;
    }
    dev_unlock(d);
    return out->where;
}

int core_hold(core_dev_t *d, uintptr_t addr, uint64_t token)
{
    dev_lock(d);
    block_t *b = map_find(d, addr);
    if (b)
        b->hold = token;
    dev_unlock(d);
    return b ? CORE_FREED : CORE_NOT_MINE;
}

bool core_lookup(core_dev_t *d, uintptr_t addr, uintptr_t *base, size_t *size, core_stream_t *stream)
{
    core_ptr_info_t info;
    if (core_describe(d, addr, &info) != CORE_WHERE_LIVE)
        return false;
    if (base)
        *base = info.base;
    if (size)
        *size = info.requested;
    if (stream)
        *stream = info.stream;
    return true;
}

int core_record_stream(core_dev_t *d, uintptr_t addr, core_stream_t stream)
{
    dev_lock(d);
    block_t *b = map_find(d, addr);
    int r = CORE_NOT_MINE;
    if (b) {
        r = CORE_FREED;
        bool known = stream == b->stream;
        for (uint32_t i = 0; i < b->nuses && !known; i++)
            known = b->uses[i] == stream;
        if (!known)
            jr_note(d, JR_RECORD_STREAM, 0, 0, 0, stream, 0, (b->id & ~CORE_ID_TAG) >> 6);
        if (!known) {
            core_stream_t *u = hostalloc_realloc(b->uses, (b->nuses + 1) * sizeof *u);
            if (u) {
                u[b->nuses++] = stream;
                b->uses = u;
            } else {
                r = CORE_EFAIL;
            }
        }
    }
    dev_unlock(d);
    return r;
}

bool core_owns(core_dev_t *d, uintptr_t addr)
{
    dev_lock(d);
    bool in = false;
    for (const seg_t *s = d->segs; s && !in; s = s->next)
        in = addr >= s->addr && addr - s->addr < s->size;
    dev_unlock(d);
    return in;
}

void core_usage(core_dev_t *d, core_usage_t *u)
{
    dev_lock(d);
    u->allocated = (size_t)stat_all_current(d->stats.allocated_bytes);
    u->reserved = (size_t)stat_all_current(d->stats.reserved_bytes);
    u->pending = d->pending_bytes;
    u->cached_free = u->reserved - (size_t)stat_all_current(d->stats.active_bytes);
    u->largest_free = seg_largest_free(d);
    u->allowed = d->allowed;
    u->releasable = u->reclaimable = 0;
    for (const seg_t *s = d->capturing ? NULL : d->segs; s; s = s->next) {
        if (!seg_may_release(d, s, NULL))
            continue;
        if (s->expandable) {
            size_t now, later;
            exp_releasable(s, &now, &later);
            u->releasable += now;
            u->reclaimable += later;
            continue;
        }
        if (seg_is_free(s))
            u->releasable += s->size;
        if (seg_reclaimable(s))
            u->reclaimable += s->size;
    }
    u->held = 0;
    for (const block_t *b = d->held; b; b = b->pend_next)
        u->held += b->size;
    dev_unlock(d);
}

/* The new memory a request of `size` bytes needs: a segment, or pages of
 * an expandable one. */
static size_t seg_need(const core_dev_t *d, size_t size)
{
    size_t rounded = pool_round_size(&d->conf, size);
    return d->conf.expandable_segments ? exp_need(d, rounded) : pool_alloc_size(&d->conf, rounded);
}

/* Three ranges where the segment a request needs does not shrink as the
 * request grows: small requests, large ones below min_large_alloc (one
 * large segment each), and the rest.  A binary search in each keeps only
 * requests that fit, so the answer always fits, and is the largest one
 * whenever rounding keeps the ranges monotonic. */
size_t core_fit(core_dev_t *d, size_t avail)
{
    const conf_t *c = &d->conf; /* fixed once the device exists */
    size_t lo[3] = {1, c->small_size + 1, c->min_large_alloc};
    size_t hi[3] = {c->small_size, c->min_large_alloc - 1, avail};
    size_t best = 0;
    for (int k = 0; k < 3; k++) {
        size_t l = lo[k], h = hi[k] < avail ? hi[k] : avail;
        if (l > h || seg_need(d, l) > avail)
            continue;
        while (l < h) {
            size_t m = l + (h - l + 1) / 2;
            if (seg_need(d, m) <= avail)
                l = m;
            else
                h = m - 1;
        }
        if (l > best)
            best = l;
    }
    return best;
}

/* ------------------------------------------------------------------------
 * Private pools
 * ---------------------------------------------------------------------- */

bool core_expandable(core_dev_t *d)
{
    dev_lock(d);
    bool on = d->conf.expandable_segments;
    dev_unlock(d);
    return on;
}

void core_each_mapped(core_dev_t *d, void (*fn)(void *arg, uintptr_t addr, size_t size), void *arg)
{
    dev_lock(d);
    for (const seg_t *s = d->segs; s; s = s->next) {
        if (!s->expandable)
            continue;
        uintptr_t run = 0; /* the start of the run of mapped blocks so far (0: none) */
        for (const block_t *b = s->first; b; b = b->next) {
            if (b->state != BLOCK_UNMAPPED && !run)
                run = b->addr;
            if (b->state == BLOCK_UNMAPPED && run) {
                fn(arg, run, b->addr - run);
                run = 0;
            }
        }
        if (run)
            fn(arg, run, s->addr + s->size - run);
    }
    dev_unlock(d);
}
