/*
 * Allocation and free: segments, the hit path, the slow path (the retry
 * ladder when no cached block fits: PyTorch's order, with cucache's pending
 * frees woven in; limits, garbage collection, Paddle's preallocation), the
 * free modes as applied, and each thread's route to a private pool.
 * device.c makes and destroys devices; query.c answers what a pointer is.
 */
#include <string.h>

#include "cross.h"
#include "hand_out.h"
#include "hit.h"
#include "hostalloc.h"
#include "types.h"

#define CORE_MAX_DEVICES 64


/* The private pool each thread routes its allocations to, per device.  The
 * route names the device state it was set on (core_dev_t.gen): a device
 * destroyed and created again with the same index (the replay tool runs one
 * configuration after another) must not inherit a stale route to whatever
 * pool reuses the id. */
typedef struct tls_route_s {
    uint64_t gen; /* core_dev_t.gen of the device the route was set on */
    int pool;
} tls_route_t;
static __thread tls_route_t tls_pool[CORE_MAX_DEVICES];

/* ------------------------------------------------------------------------
 * Segments
 * ---------------------------------------------------------------------- */

bool seg_is_free(const seg_t *s)
{
    return !s->expandable && s->first->state == BLOCK_FREE && !s->first->next;
}

static void seg_stats(core_dev_t *d, const seg_t *s, int sign)
{
    int cls = pool_class(s->pool);
    stat_add2(d->stats.segment, cls, sign);
    stat_add2(d->stats.reserved_bytes, cls, sign * (int64_t)s->size);
    if (s->oversize)
        stat_add(&d->stats.oversize_segments, sign);
}

/* A new segment of `size` bytes for pool/stream, whole and free in the
 * pool's tree.  NULL when the limit or the device refuses. */
static seg_t *seg_new(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t size, bool direct, seg_failure_t *why)
{
    if ((size_t)stat_all_current(d->stats.reserved_bytes) + size > d->allowed || size > d->allowed) {
        why->limit_hit = true;
        return NULL;
    }
    seg_t *s = hostalloc_calloc(1, sizeof *s);
    block_t *b = block_new(d);
    pool_bins_t *bins = pool_bins_get(pool, stream);
    uintptr_t addr = 0;
    int r = s && b && bins ? d->be.seg_alloc(d->be.ctx, d->device, size, &addr) : CORE_EFAIL;
    if (r != CORE_OK)
        return seg_refused(d, s, b, r, why);
    seg_link(d, s, b, pool, bins, addr, size, BLOCK_FREE);
    s->oversize = size >= d->conf.max_split_size;
    s->direct = direct;
    s->site = d->site_now; /* a segment is made on an allocation's slow path */
    pool_tree_insert(pool, b);
    seg_stats(d, s, +1);
    d->stats.num_device_alloc++;
    core_emit(d, CORE_EV_SEGMENT_ALLOC, addr, size, stream, pool->owner->id, s->site);
    return s;
}

seg_t *seg_refused(core_dev_t *d, seg_t *s, block_t *b, int r, seg_failure_t *why)
{
    why->backend_error = r;
    hostalloc_free(s);
    if (b)
        block_delete(d, b);
    return NULL;
}

void seg_link(core_dev_t *d, seg_t *s, block_t *b, pool_t *pool, pool_bins_t *bins, uintptr_t addr, size_t size,
              block_state_t state)
{
    core_stream_t stream = bins->stream;
    *s = (seg_t){.addr = addr, .size = size, .pool = pool, .bins = bins, .stream = stream, .first = b,
                 .free_since = d->alloc_clock};
    bins->segs++;
    *b = (block_t){.addr = addr, .size = size, .seg = s, .pool = pool, .stream = stream, .state = state};
    s->prev = NULL;
    s->next = d->segs;
    if (d->segs)
        d->segs->prev = s;
    d->segs = s;
    s->pool->owner->segments++;
}

void seg_unlink_free(core_dev_t *d, seg_t *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        d->segs = s->next;
    if (s->next)
        s->next->prev = s->prev;
    ppool_t *pp = s->pool->owner;
    pool_bins_unref(s->pool, s->bins);
    hostalloc_free(s);
    if (--pp->segments == 0 && pp->destroyed)
        ppool_unlink_free(d, pp);
}

/* Returns a whole free segment to the device. */
void seg_release(core_dev_t *d, seg_t *s)
{
    block_t *b = s->first;
    pool_tree_remove(s->pool, b);
    block_delete(d, b);
    seg_stats(d, s, -1);
    d->stats.num_device_free++;
    core_emit(d, CORE_EV_SEGMENT_FREE, s->addr, s->size, s->stream, s->pool->owner->id, s->site);
    d->be.seg_free(d->be.ctx, d->device, s->addr, s->size);
    seg_unlink_free(d, s);
}

/* May the cache give this segment back?  Live private pools keep theirs. */
bool seg_may_release(const core_dev_t *d, const seg_t *s, const ppool_t *only)
{
    const ppool_t *owner = s->pool->owner;
    if (only)
        return owner == only;
    return owner == &d->defaults || owner->destroyed;
}

/* Releases free segments (of `only`, or of every releasable pool), the
 * largest first, until `want` bytes went back.  Returns the bytes released. */
size_t seg_release_free(core_dev_t *d, ppool_t *only, bool oversize_only, size_t want)
{
    size_t released = 0;
    while (released < want) {
        seg_t *best = NULL;
        for (seg_t *s = d->segs; s; s = s->next)
            if (seg_is_free(s) && seg_may_release(d, s, only) && (!oversize_only || s->oversize) &&
                (!best || s->size > best->size))
                best = s;
        if (!best)
            break;
        released += best->size;
        seg_release(d, best);
    }
    if (!oversize_only && released < want && d->conf.expandable_segments)
        released += exp_unmap_free(d, only, want - released);
    return released;
}

/* ------------------------------------------------------------------------
 * Garbage collection (garbage_collection_threshold)
 * ---------------------------------------------------------------------- */

/* Above threshold x allowed, releases whole free large segments of the
 * default pools that have been free for at least the average time, oldest
 * first in spirit (PyTorch's rule), until usage is back at the threshold. */
static void gc_collect(core_dev_t *d)
{
    size_t reserved = (size_t)stat_all_current(d->stats.reserved_bytes);
    size_t threshold = (size_t)(d->conf.gc_threshold * (double)d->allowed);
    if (reserved <= threshold)
        return;
    size_t target = reserved - threshold, reclaimed = 0;
    bool freed = true;
    while (reclaimed < target && freed) {
        uint64_t total_age = 0, count = 0;
        for (seg_t *s = d->segs; s; s = s->next)
            if (seg_is_free(s) && s->pool == &d->defaults.large) {
                total_age += d->alloc_clock - s->free_since;
                count++;
            }
        if (count == 0)
            break;
        uint64_t threshold_age = total_age / count;
        freed = false;
        for (seg_t *s = d->segs, *next; s && reclaimed < target; s = next) {
            next = s->next;
            if (seg_is_free(s) && s->pool == &d->defaults.large && d->alloc_clock - s->free_since >= threshold_age) {
                reclaimed += s->size;
                seg_release(d, s);
                freed = true;
            }
        }
    }
    /* Expandable segments give back their free pages (ages are not kept
     * per page: every free page counts as old). */
    if (reclaimed < target && d->conf.expandable_segments)
        exp_unmap_free(d, &d->defaults, target - reclaimed);
}

/* ------------------------------------------------------------------------
 * The slow path
 * ---------------------------------------------------------------------- */

/* Preallocate: the segment to ask for.  The first use reserves `fraction`
 * of the device's free memory as one chunk; requests larger than the chunk
 * get a segment of their own (direct), returned on free. */
static size_t prealloc_size(core_dev_t *d, size_t rounded, bool *direct)
{
    if (d->chunk_size == 0) {
        size_t free_bytes = 0, total = 0;
        if (d->be.mem_info(d->be.ctx, d->device, &free_bytes, &total) != CORE_OK)
            free_bytes = 0;
        size_t chunk = (size_t)(d->conf.fraction * (double)free_bytes);
        if (d->allowed != SIZE_MAX && chunk > d->allowed)
            chunk = d->allowed;
        chunk = chunk / d->conf.round_large * d->conf.round_large;
        d->chunk_size = chunk ? chunk : d->conf.round_large;
    }
    *direct = rounded > d->chunk_size;
    if (*direct)
        return (rounded + d->conf.round_large - 1) / d->conf.round_large * d->conf.round_large;
    return d->chunk_size;
}

size_t seg_largest_free(const core_dev_t *d)
{
    size_t largest = 0;
    for (const seg_t *s = d->segs; s; s = s->next)
        for (const block_t *b = s->first; b; b = b->next)
            if (b->state == BLOCK_FREE && b->size > largest)
                largest = b->size;
    return largest;
}

/* Fills *oom (when not NULL) for the allocation m describes; returns the
 * device's free bytes, which the OOM event carries. */
static size_t fill_oom(core_dev_t *d, core_oom_t *oom, const seg_miss_t *m)
{
    size_t dev_free = 0, dev_total = 0;
    if (d->be.mem_info(d->be.ctx, d->device, &dev_free, &dev_total) != CORE_OK)
        dev_free = dev_total = 0;
    if (!oom)
        return dev_free;
    memset(oom, 0, sizeof *oom);
    oom->requested = m->size;
    oom->site = d->site_now;
    oom->rounded = m->rounded;
    oom->alloc_size = m->alloc_size;
    oom->pool_id = m->pool_id;
    oom->limit_hit = m->why.limit_hit;
    oom->limit = d->allowed;
    oom->backend_error = m->why.backend_error ? m->why.backend_error : CORE_ENOMEM;
    oom->device_free = dev_free;
    oom->device_total = dev_total;
    oom->allocated = (size_t)stat_all_current(d->stats.allocated_bytes);
    oom->reserved = (size_t)stat_all_current(d->stats.reserved_bytes);
    oom->largest_free = seg_largest_free(d);
    oom->pending = d->pending_bytes;
    for (const seg_t *s = d->segs; s; s = s->next)
        if (s->expandable)
            oom->expandable_va += s->size;
    return dev_free;
}

/* The one place a failure is counted, once it is the program's: the
 * snapshot's OOM event (with the device's free bytes), num_ooms, and the
 * history's record (it carries the number the next allocation gets), whose
 * position goes in *oom for core_whatif. */
static void count_failure(core_dev_t *d, size_t dev_free, size_t size, int pool, core_stream_t stream, uint32_t site,
                          core_oom_t *oom)
{
    core_emit(d, CORE_EV_OOM, dev_free, size, 0, pool, site);
    d->stats.num_ooms++;
    jr_note(d, JR_ALLOC_FAIL, 0, pool, stream, 0, size, d->next_id + 1);
    if (oom && d->jr.cap && !d->jr.broken) {
        oom->history = true;
        oom->history_pos = d->jr.head - 1;
    }
}

/* Under the device lock: an allocation of `stream` failed; *oom filled, and
 * the failure counted when the try says it counts. */
__attribute__((noinline)) static void alloc_failed(core_dev_t *d, const seg_miss_t *m, core_stream_t stream,
                                                   core_try_t t, core_oom_t *oom)
{
    size_t dev_free = fill_oom(d, oom, m);
    if (t == CORE_TRY_COUNTED)
        count_failure(d, dev_free, m->size, m->pool_id, stream, d->site_now, oom);
}

void core_count_failure(core_dev_t *d, core_oom_t *oom, core_stream_t stream, uint32_t site)
{
    dev_lock(d);
    count_failure(d, oom->device_free, oom->requested, oom->pool_id, stream, site, oom);
    dev_unlock(d);
}

static uintptr_t take(core_dev_t *d, block_t *b, size_t rounded, size_t size)
{
    b = pool_take(d, b, rounded, size);
    return b ? b->addr : 0;
}

/* The retry ladder's request, and why it could not grow the cache. */
typedef struct ladder_s {
    pool_t *pool;
    core_stream_t stream;
    size_t rounded;
    size_t alloc_size; /* the segment to ask for (expandable: the bytes to map) */
    bool direct;       /* preallocation: a segment of the request's own, returned on free */
    unsigned policy;   /* the reuse policies (CORE_REUSE_*; cross.h): asked only while frees wait on events */
    seg_failure_t why; /* the last growth's refusal */
} ladder_t;

/* New room: a new segment, or pages mapped into an expandable one.  The
 * free block that serves the request, or NULL (l->why says why). */
static block_t *ladder_grow(core_dev_t *d, ladder_t *l)
{
    if (d->conf.expandable_segments)
        return exp_grow(d, l->pool, l->stream, l->rounded, &l->why);
    seg_t *s = seg_new(d, l->pool, l->stream, l->alloc_size, l->direct, &l->why);
    return s ? s->first : NULL;
}

static block_t *ladder_find(core_dev_t *d, const ladder_t *l)
{
    return pool_find_free(d, l->pool, l->stream, l->rounded);
}

/* The retry ladder, when no cached block fits: the free block that serves
 * the request (to take), or NULL when none could be had (l->why says why). */
static block_t *ladder_run(core_dev_t *d, ladder_t *l)
{
    block_t *b;
    /* during a capture: a new segment or nothing (core_set_capturing) */
    if (d->capturing) {
        if ((b = ladder_grow(d, l)))
            return b;
        /* expandable: pages known idle can go back without a synchronisation */
        if (d->conf.expandable_segments && exp_unmap_free(d, NULL, l->alloc_size)) {
            l->why = (seg_failure_t){false, 0};
            return ladder_grow(d, l);
        }
        return NULL;
    }
    /* 1. frees whose fence or event completed (an event's under the
     * opportunistic policy, cross.h); record the open batch's fence */
    if (d->event_pending)
        l->policy = cross_policy(d);
    if (d->pending_bytes) {
        bool events = cross_allows(l->policy, CROSS_POLL);
        if (pend_poll_some(d, events) && (b = ladder_find(d, l)))
            return b;
        pend_close(d);
        if (pend_poll_some(d, events) && (b = ladder_find(d, l)))
            return b;
    }
    /* 1b. frees still behind fences: handed out now, the device ordered
     * after their fences, instead of growing the cache or waiting on the
     * host (a rule that hands out; hand_out.h).  Whatever their bytes: merged with
     * free neighbours they may serve a larger request, and a replay, whose
     * idle device completes every fence at step 1, finds the same blocks
     * free whether or not the live run's fences had completed. */
    if (d->pending_bytes && hand_out(d, 0) && (b = ladder_find(d, l)))
        return b;
    /* 1c. this stream's frees on other streams, still behind their events:
     * served now, the stream made to wait for the events on the device
     * (the internal-dependencies policy, cross.h), before the cache grows
     * or the host waits */
    if (d->event_pending && cross_allows(l->policy, CROSS_WAIT) &&
        cross_release(d, l->pool, l->stream, l->rounded, l->policy, CROSS_AT_MISS) && (b = ladder_find(d, l)))
        return b;
    /* 2. garbage collection above the threshold */
    if (d->conf.gc_threshold > 0 && d->allowed != SIZE_MAX)
        gc_collect(d);
    /* 3. a new segment, unless the cache is mostly waiting on fences: a
     * program that frees and allocates faster than its fences complete
     * would otherwise grow the cache by a block per iteration.  Beyond
     * max_pending_mb and beyond the live bytes, wait for the oldest fence
     * first, as cudaFree would have. */
    while (d->pending_bytes >= l->rounded && d->pending_bytes > d->conf.max_pending &&
           d->pending_bytes > (size_t)stat_all_current(d->stats.allocated_bytes) && pend_wait_oldest(d))
        if ((b = ladder_find(d, l)))
            return b;
    if ((b = ladder_grow(d, l)) || l->why.backend_error == CORE_EFAIL)
        return b;
    /* 3b. the device is full: this stream's frees on other streams that
     * step 1c left (those used on several streams, cross.h), the stream
     * waiting on the device rather than the host */
    if (d->event_pending && cross_allows(l->policy, CROSS_WAIT) &&
        cross_release(d, l->pool, l->stream, l->rounded, l->policy, CROSS_AT_FULL) && (b = ladder_find(d, l)))
        return b;
    /* 4. memory is short: wait for the oldest fences, as cudaFree would have */
    while (d->pending_bytes && pend_wait_oldest(d))
        if ((b = ladder_find(d, l)))
            return b;
    /* 5. release cached oversize blocks (expandable segments: free pages),
     * then retry */
    if ((d->conf.max_split_size != SIZE_MAX || d->conf.expandable_segments) &&
        seg_release_free(d, NULL, !d->conf.expandable_segments, l->alloc_size)) {
        l->why = (seg_failure_t){false, 0};
        if ((b = ladder_grow(d, l)))
            return b;
    }
    /* 6. wait for everything pending, release every free segment, retry */
    pend_release_all(d, PEND_WAIT);
    if ((b = ladder_find(d, l)))
        return b;
    seg_release_free(d, NULL, false, SIZE_MAX);
    d->stats.num_alloc_retries++;
    l->why = (seg_failure_t){false, 0};
    return ladder_grow(d, l);
}

uintptr_t seg_malloc_slow(core_dev_t *d, ppool_t *pp, size_t size, size_t rounded, core_stream_t stream,
                          seg_miss_t *miss)
{
    ladder_t l = {.pool = pool_for(d, pp, rounded), .stream = stream, .rounded = rounded, .policy = CORE_REUSE_ALL};
    /* Preallocation serves the default pools from the chunk; private pools
     * grow on demand as under auto_growth. */
    l.alloc_size = d->conf.strategy == CONF_STRATEGY_PREALLOCATE && pp == &d->defaults
                       ? prealloc_size(d, rounded, &l.direct)
                       : pool_alloc_size(&d->conf, rounded);
    if (d->conf.expandable_segments)
        l.alloc_size = exp_need(d, rounded);
    block_t *b;
    if (d->map.count >= d->map.mask && !map_grow(d)) {
        l.why = (seg_failure_t){false, CORE_EFAIL}; /* no host memory for the address map */
    } else if ((b = ladder_run(d, &l))) {
        uintptr_t addr = take(d, b, rounded, size);
        if (addr)
            return addr;
        l.why = (seg_failure_t){false, CORE_EFAIL}; /* a fitting block, but no block struct for the split */
    }
    *miss = (seg_miss_t){size, rounded, l.alloc_size, pp->id, l.why};
    return 0;
}

/* ------------------------------------------------------------------------
 * Entry points
 * ---------------------------------------------------------------------- */

/* The hit path when a cached block fits: the lock, rounding, one lookup in
 * the stream's size-class bins, the split, the address map and PyTorch's
 * counters (core/hit.h; its cost per pair: docs/performance.md); everything
 * else is seg_malloc_slow.  Inlined into core_malloc and core_malloc_site,
 * so that core_malloc's site and try are constants. */
static inline __attribute__((always_inline)) uintptr_t malloc_at(core_dev_t *d, size_t size, core_stream_t stream,
                                                                 uint32_t site, core_try_t t, core_oom_t *oom)
{
    if (__builtin_expect(size > (SIZE_MAX >> 2), 0)) {
        dev_lock(d);
        d->site_now = site;
        seg_miss_t too_large = {size, size, size, 0, {false, CORE_ENOMEM}};
        alloc_failed(d, &too_large, stream, t, oom);
        dev_unlock(d);
        return 0;
    }
    size_t rounded = pool_round_size(&d->conf, size);
    core_stream_t asked = stream;
    const tls_route_t *route = (unsigned)d->device < CORE_MAX_DEVICES ? &tls_pool[d->device] : NULL;
    int pid = route && route->gen == d->gen ? route->pool : 0;
    dev_lock(d);
    d->site_now = site;
    ppool_t *pp = pid ? ppool_find(d, pid) : &d->defaults;
    if (__builtin_expect(!pp, 0))
        pp = &d->defaults;
    /* Paddle's preallocation carves the default pool's requests from one
     * chunk, so those blocks are not tied to a stream (key 0): frees ordered
     * on a stream go through an event (CORE_FREE_AFTER_STREAM) or the fence. */
    if (d->conf.strategy == CONF_STRATEGY_PREALLOCATE && pp == &d->defaults)
        stream = 0;
    d->alloc_clock++;
    uintptr_t addr = 0;
    if (__builtin_expect(d->map.count < d->map.mask, 1)) {
        block_t *b = pool_find_free(d, pool_for(d, pp, rounded), stream, rounded);
        if (b && b->size != rounded && hand_out_allowed(d) && hand_out_due(d, rounded)) {
            /* found again whatever happened: a hand-out that could not
             * record its fence released the pending blocks (pend_close),
             * merging b away perhaps */
            hand_out(d, hand_out_keep(d));
            b = pool_find_free(d, pool_for(d, pp, rounded), stream, rounded);
        }
        if (b && b->size != rounded && __builtin_expect(d->event_pending != NULL, 0) &&
            cross_release_on_hit(d, pool_for(d, pp, rounded), stream, rounded))
            b = pool_find_free(d, pool_for(d, pp, rounded), stream, rounded); /* cross.h: frees on other streams */
        if (__builtin_expect(b != NULL, 1) && (addr = take(d, b, rounded, size))) {
            d->stats.num_cache_hits++;
            jr_note(d, JR_ALLOC, 0, pp->id, asked, 0, size, d->next_id);
            dev_unlock(d);
            return addr;
        }
    }
    seg_miss_t miss;
    addr = seg_malloc_slow(d, pp, size, rounded, stream, &miss);
    if (addr)
        jr_note(d, JR_ALLOC, 0, pp->id, asked, 0, size, d->next_id);
    else
        alloc_failed(d, &miss, asked, t, oom);
    dev_unlock(d);
    return addr;
}

uintptr_t core_malloc(core_dev_t *d, size_t size, core_stream_t stream, core_oom_t *oom)
{
    return malloc_at(d, size, stream, 0, CORE_TRY_COUNTED, oom);
}

uintptr_t core_malloc_site(core_dev_t *d, size_t size, core_stream_t stream, uint32_t site, core_try_t t,
                           core_oom_t *oom)
{
    return malloc_at(d, size, stream, site, t, oom);
}

/* The idle shortcut (core_rule_t.idle_shortcut; core.h, "Free modes as
 * applied", row 1): no work was submitted since the block was handed out,
 * so none can name it and a fenced free needs no fence (the epoch the
 * block recorded, core_epoch_note, is still the backend's work_epoch,
 * which interpose/submit.c keeps). */
static inline bool free_is_idle(const core_dev_t *d, const block_t *b, core_free_t how)
{
    return how == CORE_FREE_FENCED && conf_rule(&d->conf)->idle_shortcut && !b->nuses && b->hold == 0 &&
           !(b->epoch & CORE_EPOCH_UNSEEN) && d->be.work_epoch &&
           atomic_load_explicit(d->be.work_epoch, memory_order_relaxed) == b->epoch;
}

/* The mode a free of an unheld block is applied with (core.h, "Free modes
 * as applied", rows 3 to 6); an AFTER_STREAM result has its event (or its
 * marker on several streams) recorded. */
static core_free_t free_mode(core_dev_t *d, block_t *b, core_free_t how, core_stream_t stream)
{
    if (b->nuses) {
        /* used on several streams: one marker on each of them, else the
         * device-wide fence covers them all */
        if (how != CORE_FREE_AFTER_STREAM || d->capturing || pend_after_streams(d, b, stream) != 0)
            return CORE_FREE_FENCED;
        return CORE_FREE_AFTER_STREAM;
    }
    if (how != CORE_FREE_AFTER_STREAM)
        return how;
    if (stream == b->stream)
        return CORE_FREE_NOW; /* stream order on the block's own stream */
    if (d->capturing)
        return CORE_FREE_FENCED; /* no event may be recorded now */
    return pend_after_stream(d, b, stream) == 0 ? CORE_FREE_AFTER_STREAM : CORE_FREE_FENCED;
}

int core_free(core_dev_t *d, uintptr_t addr, core_free_t how, core_stream_t stream)
{
    dev_lock(d);
    block_t *b = hit_map_remove(d, addr);
    if (!b) {
        dev_unlock(d);
        return CORE_NOT_MINE;
    }
    stats_block_free(d, b);
    bool idle = free_is_idle(d, b, how);
    if (idle) {
        how = CORE_FREE_NOW;
        d->stats.num_idle_frees++;
    }
    jr_note(d, JR_FREE, how | (b->nuses ? JR_HOW_MULTI : 0), b->pool->owner->id, b->stream, stream, b->requested,
            (b->id & ~CORE_ID_TAG) >> 6);
    if (__builtin_expect(b->hold != 0, 0)) {
        pend_held(d, b); /* another process may still use it: no reuse until it is done */
        dev_unlock(d);
        return CORE_FREED;
    }
    how = free_mode(d, b, how, stream);
    if (how == CORE_FREE_NOW)
        hit_release(d, b, idle); /* else its own stream's queued work may still use it */
    else if (how == CORE_FREE_FENCED) {
        pend_fenced(d, b);
        hand_out_slice(d);
    }
    dev_unlock(d);
    return CORE_FREED;
}

int core_pool_use(core_dev_t *d, int pool_id)
{
    if ((unsigned)d->device >= CORE_MAX_DEVICES)
        return -1;
    dev_lock(d);
    bool ok = ppool_find(d, pool_id) != NULL;
    dev_unlock(d);
    if (!ok)
        return -1;
    tls_pool[d->device] = (tls_route_t){d->gen, pool_id};
    return 0;
}

int core_pool_current(core_dev_t *d)
{
    if ((unsigned)d->device >= CORE_MAX_DEVICES)
        return 0;
    const tls_route_t *route = &tls_pool[d->device];
    return route->gen == d->gen ? route->pool : 0;
}
