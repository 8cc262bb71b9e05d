/*
 * The allocator's entry points, segments, and the slow path: the retry
 * ladder when no cached block fits (PyTorch's order, with cucache's pending
 * frees woven in), limits, garbage collection, Paddle's preallocation, empty
 * cache and private pools.
 */
#include <string.h>
#include <time.h>

#include "hand_out.h"
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
static _Atomic uint64_t dev_generations;

/* ------------------------------------------------------------------------
 * Devices
 * ---------------------------------------------------------------------- */

static void ppool_init(ppool_t *pp, int id)
{
    memset(pp, 0, sizeof *pp);
    pp->id = id;
    pp->small.small = true;
    pp->small.owner = pp;
    pp->large.owner = pp;
}

/* The bytes this allocator may hold: per_process_memory_fraction of the
 * device, and limit_mb, whichever is smaller. */
static size_t allowed_bytes(const core_dev_t *d)
{
    size_t allowed = SIZE_MAX;
    size_t free_bytes = 0, total = 0;
    if (d->conf.memory_fraction < 1.0 && d->be.mem_info(d->be.ctx, d->device, &free_bytes, &total) == CORE_OK)
        allowed = (size_t)(d->conf.memory_fraction * (double)total);
    if (d->conf.limit && d->conf.limit < allowed)
        allowed = d->conf.limit;
    return allowed;
}

core_dev_t *core_dev_new(const core_backend_t *backend, int device, const conf_t *conf)
{
    core_dev_t *d = hostalloc_calloc(1, sizeof *d);
    if (!d)
        return NULL;
    pthread_mutex_init(&d->lock, NULL);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    d->born_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    d->device = device;
    d->gen = ++dev_generations;
    d->conf = *conf;
    /* Preallocate carves every request from one chunk: max_split_size would
     * make the chunk's rest an oversize block that no request below it may
     * take, so each would miss, ask for a chunk of its own and run out. */
    if (conf->strategy == CONF_STRATEGY_PREALLOCATE)
        d->conf.max_split_size = SIZE_MAX;
    d->be = *backend;
    ppool_init(&d->defaults, 0);
    d->allowed = allowed_bytes(d);
    d->stats.max_split_size = d->conf.max_split_size; /* the effective value */
    /* Expandable segments need the backend's virtual memory: without it the
     * setting is ignored (the caller reports it, core_expandable). */
    size_t g =
        conf->expandable_segments && backend->vmm_granularity ? backend->vmm_granularity(backend->ctx, device) : 0;
    if (g && (g & (g - 1)) == 0 && backend->va_reserve && backend->va_release && backend->map && backend->unmap) {
        d->exp_page_small = g > d->conf.small_segment_size ? g : d->conf.small_segment_size;
        d->exp_page_large = (d->conf.expandable_page + g - 1) / g * g;
    } else {
        d->conf.expandable_segments = false;
    }
    if (!map_grow(d)) {
        hostalloc_free(d);
        return NULL;
    }
    return d;
}

ppool_t *ppool_find(core_dev_t *d, int id)
{
    if (id == 0)
        return &d->defaults;
    for (ppool_t *p = d->privates; p; p = p->next)
        if (p->id == id && !p->destroyed)
            return p;
    return NULL;
}

static void ppool_unlink_free(core_dev_t *d, ppool_t *pp)
{
    for (ppool_t **p = &d->privates; *p; p = &(*p)->next)
        if (*p == pp) {
            *p = pp->next;
            hostalloc_free(pp);
            return;
        }
}

void core_dev_destroy(core_dev_t *d)
{
    if (!d)
        return;
    dev_lock(d);
    pend_release_all(d, true);
    for (seg_t *s = d->segs, *next; s; s = next) {
        next = s->next;
        if (s->expandable) {
            exp_seg_destroy(d, s);
            continue;
        }
        for (block_t *b = s->first, *bn; b; b = bn) {
            bn = b->next;
            hostalloc_free(b->uses);
            hostalloc_free(b);
        }
        d->be.seg_free(d->be.ctx, d->device, s->addr, s->size);
        hostalloc_free(s);
    }
    while (d->spare) {
        block_t *b = d->spare;
        d->spare = b->pend_next;
        hostalloc_free(b);
    }
    while (d->privates) {
        ppool_t *p = d->privates;
        d->privates = p->next;
        hostalloc_free(p);
    }
    hostalloc_free(d->map.buckets);
    jr_fini(&d->jr);
    dev_unlock(d);
    pthread_mutex_destroy(&d->lock);
    hostalloc_free(d);
}

/* ------------------------------------------------------------------------
 * Segments
 * ---------------------------------------------------------------------- */

bool seg_is_free(const seg_t *s)
{
    return !s->expandable && s->first->state == BLOCK_FREE && !s->first->next;
}

/* Every block free or pending, none held by another process: the segment
 * is whole again once its pending frees complete. */
static bool seg_reclaimable(const seg_t *s)
{
    for (const block_t *b = s->first; b; b = b->next)
        if (b->state == BLOCK_ALLOCATED || (b->state == BLOCK_PENDING && b->hold))
            return false;
    return true;
}

static void seg_stats(core_dev_t *d, const seg_t *s, int sign)
{
    int cls = pool_class(s->pool);
    stat_add(&d->stats.segment[CORE_POOL_ALL], sign);
    stat_add(&d->stats.segment[cls], sign);
    stat_add(&d->stats.reserved_bytes[CORE_POOL_ALL], sign * (int64_t)s->size);
    stat_add(&d->stats.reserved_bytes[cls], sign * (int64_t)s->size);
    if (s->oversize)
        stat_add(&d->stats.oversize_segments, sign);
}

/* A new segment of `size` bytes for pool/stream, whole and free in the
 * pool's tree.  NULL when the limit or the device refuses. */
static seg_t *seg_new(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t size, bool direct, seg_failure_t *why)
{
    if ((size_t)d->stats.reserved_bytes[CORE_POOL_ALL].current + size > d->allowed || size > d->allowed) {
        why->limit_hit = true;
        return NULL;
    }
    seg_t *s = hostalloc_calloc(1, sizeof *s);
    block_t *b = block_new(d);
    uintptr_t addr = 0;
    int r = s && b ? d->be.seg_alloc(d->be.ctx, d->device, size, &addr) : CORE_EFAIL;
    if (r != CORE_OK)
        return seg_refused(d, s, b, r, why);
    *s = (seg_t){.addr = addr,
                 .size = size,
                 .pool = pool,
                 .stream = stream,
                 .first = b,
                 .next = d->segs,
                 .free_since = d->alloc_clock,
                 .oversize = size >= d->conf.max_split_size,
                 .direct = direct};
    seg_link(d, s);
    b->addr = addr;
    b->size = size;
    b->seg = s;
    b->pool = pool;
    b->stream = stream;
    b->state = BLOCK_FREE;
    pool_tree_insert(pool, b);
    seg_stats(d, s, +1);
    d->stats.num_device_alloc++;
    core_emit(d, CORE_EV_SEGMENT_ALLOC, addr, size, stream, pool->owner->id, 0);
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

void seg_link(core_dev_t *d, seg_t *s)
{
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
    core_emit(d, CORE_EV_SEGMENT_FREE, s->addr, s->size, s->stream, s->pool->owner->id, 0);
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
    size_t reserved = (size_t)d->stats.reserved_bytes[CORE_POOL_ALL].current;
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

static size_t largest_free_block(const core_dev_t *d)
{
    size_t largest = 0;
    for (const seg_t *s = d->segs; s; s = s->next)
        for (const block_t *b = s->first; b; b = b->next)
            if (b->state == BLOCK_FREE && b->size > largest)
                largest = b->size;
    return largest;
}

static void fill_oom(core_dev_t *d, core_oom_t *oom, size_t size, size_t rounded, size_t alloc_size, int pool_id,
                     const seg_failure_t *why)
{
    size_t dev_free = 0, dev_total = 0;
    if (d->be.mem_info(d->be.ctx, d->device, &dev_free, &dev_total) != CORE_OK)
        dev_free = dev_total = 0;
    core_emit(d, CORE_EV_OOM, dev_free, size, 0, pool_id,
              d->site_now); /* the snapshot's oom event: the device's free bytes */
    d->stats.num_ooms++;
    if (!oom)
        return;
    memset(oom, 0, sizeof *oom);
    oom->requested = size;
    oom->rounded = rounded;
    oom->alloc_size = alloc_size;
    oom->pool_id = pool_id;
    oom->limit_hit = why->limit_hit;
    oom->limit = d->allowed;
    oom->backend_error = why->backend_error ? why->backend_error : CORE_ENOMEM;
    oom->device_free = dev_free;
    oom->device_total = dev_total;
    oom->allocated = (size_t)d->stats.allocated_bytes[CORE_POOL_ALL].current;
    oom->reserved = (size_t)d->stats.reserved_bytes[CORE_POOL_ALL].current;
    oom->largest_free = largest_free_block(d);
    oom->pending = d->pending_bytes;
    for (const seg_t *s = d->segs; s; s = s->next)
        if (s->expandable)
            oom->expandable_va += s->size;
}

/* The history's record of a failed allocation (it carries the number the
 * next allocation gets), and where it is, for core_whatif. */
static void note_failure(core_dev_t *d, int pool, core_stream_t stream, size_t size, core_oom_t *oom)
{
    jr_note(d, JR_ALLOC_FAIL, 0, pool, stream, 0, size, d->next_id + 1);
    if (oom && d->jr.cap && !d->jr.broken) {
        oom->history = true;
        oom->history_pos = d->jr.head - 1;
    }
}

static uintptr_t take(core_dev_t *d, block_t *b, size_t rounded, size_t size)
{
    b = pool_take(d, b, rounded, size);
    return b ? b->addr : 0;
}

uintptr_t seg_malloc_slow(core_dev_t *d, ppool_t *pp, size_t size, size_t rounded, core_stream_t stream,
                          core_oom_t *oom)
{
    pool_t *pool = pool_for(d, pp, rounded);
    seg_failure_t why = {false, 0};
    bool direct = false;
    /* Preallocation serves the default pools from the chunk; private pools
     * grow on demand as under auto_growth. */
    size_t alloc_size = d->conf.strategy == CONF_STRATEGY_PREALLOCATE && pp == &d->defaults
                            ? prealloc_size(d, rounded, &direct)
                            : pool_alloc_size(&d->conf, rounded);
    if (d->conf.expandable_segments)
        alloc_size = exp_need(d, rounded);
    block_t *b;
    seg_t *s;
    uintptr_t addr;
#define TAKE(blk, ...)                                                                                                 \
    do {                                                                                                               \
        if (!(addr = take(d, blk, __VA_ARGS__)))                                                                       \
            goto no_host_memory;                                                                                       \
        return addr;                                                                                                   \
    } while (0)
    /* New room: a new segment, or pages mapped into an expandable one. */
#define GROW()                                                                                                         \
    do {                                                                                                               \
        if (d->conf.expandable_segments) {                                                                             \
            if ((b = exp_grow(d, pool, stream, rounded, &why)))                                                        \
                TAKE(b, rounded, size);                                                                                \
        } else if ((s = seg_new(d, pool, stream, alloc_size, direct, &why))) {                                         \
            TAKE(s->first, rounded, size);                                                                             \
        }                                                                                                              \
    } while (0)
    if (d->map.count >= d->map.mask && !map_grow(d))
        goto no_host_memory;
    /* during a capture: a new segment or nothing (core_set_capturing) */
    if (d->capturing) {
        GROW();
        /* expandable: pages known idle can go back without a synchronisation */
        if (d->conf.expandable_segments && exp_unmap_free(d, NULL, alloc_size)) {
            why = (seg_failure_t){false, 0};
            GROW();
        }
        goto oom;
    }
    /* 1. frees whose fence or event completed; record the open batch's fence */
    if (d->pending_bytes) {
        if (pend_poll(d) && (b = pool_find_free(d, pool, stream, rounded)))
            TAKE(b, rounded, size);
        pend_close(d);
        if (pend_poll(d) && (b = pool_find_free(d, pool, stream, rounded)))
            TAKE(b, rounded, size);
    }
    /* 1b. frees still behind fences: handed out now, the device ordered
     * after their fences, instead of growing the cache or waiting on the
     * host (a rule that hands out; hand_out.h).  Whatever their bytes: merged with
     * free neighbours they may serve a larger request, and a replay, whose
     * idle device completes every fence at step 1, finds the same blocks
     * free whether or not the live run's fences had completed. */
    if (d->pending_bytes && hand_out(d, 0) && (b = pool_find_free(d, pool, stream, rounded)))
        TAKE(b, rounded, size);
    /* 2. garbage collection above the threshold */
    if (d->conf.gc_threshold > 0 && d->allowed != SIZE_MAX)
        gc_collect(d);
    /* 3. a new segment, unless the cache is mostly waiting on fences: a
     * program that frees and allocates faster than its fences complete
     * would otherwise grow the cache by a block per iteration.  Beyond
     * max_pending_mb and beyond the live bytes, wait for the oldest fence
     * first, as cudaFree would have. */
    while (d->pending_bytes >= rounded && d->pending_bytes > d->conf.max_pending &&
           d->pending_bytes > (size_t)d->stats.allocated_bytes[CORE_POOL_ALL].current && pend_wait_oldest(d))
        if ((b = pool_find_free(d, pool, stream, rounded)))
            TAKE(b, rounded, size);
    GROW();
    if (why.backend_error == CORE_EFAIL)
        goto oom;
    /* 4. memory is short: wait for the oldest fences, as cudaFree would have */
    while (d->pending_bytes && pend_wait_oldest(d))
        if ((b = pool_find_free(d, pool, stream, rounded)))
            TAKE(b, rounded, size);
    /* 5. release cached oversize blocks (expandable segments: free pages),
     * then retry */
    if ((d->conf.max_split_size != SIZE_MAX || d->conf.expandable_segments) &&
        seg_release_free(d, NULL, !d->conf.expandable_segments, alloc_size)) {
        why = (seg_failure_t){false, 0};
        GROW();
    }
    /* 6. wait for everything pending, release every free segment, retry */
    pend_release_all(d, true);
    if ((b = pool_find_free(d, pool, stream, rounded)))
        TAKE(b, rounded, size);
    seg_release_free(d, NULL, false, SIZE_MAX);
    d->stats.num_alloc_retries++;
    why = (seg_failure_t){false, 0};
    GROW();
oom:
    fill_oom(d, oom, size, rounded, alloc_size, pp->id, &why);
    return 0;
no_host_memory: /* a fitting block, but no block struct for the split */
    why = (seg_failure_t){false, CORE_EFAIL};
    goto oom;
#undef GROW
#undef TAKE
}

/* ------------------------------------------------------------------------
 * Entry points
 * ---------------------------------------------------------------------- */

/* The hit path when a cached block fits: the lock, rounding, one tree
 * lookup, the split, the address map and PyTorch's counters.  About 490
 * instructions here and 390 in core_free (callgrind on bench_core's hit_4k,
 * gcc 12 -O3; docs/performance.md); everything else is seg_malloc_slow. */
uintptr_t core_malloc(core_dev_t *d, size_t size, core_stream_t stream, core_oom_t *oom)
{
    return core_malloc_site(d, size, stream, 0, oom);
}

uintptr_t core_malloc_site(core_dev_t *d, size_t size, core_stream_t stream, uint32_t site, core_oom_t *oom)
{
    if (__builtin_expect(size > (SIZE_MAX >> 2), 0)) {
        dev_lock(d);
        d->site_now = site;
        seg_failure_t why = {false, CORE_ENOMEM};
        fill_oom(d, oom, size, size, size, 0, &why);
        note_failure(d, 0, stream, size, oom);
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
        if (__builtin_expect(b != NULL, 1) && (addr = take(d, b, rounded, size))) {
            d->stats.num_cache_hits++;
            jr_note(d, JR_ALLOC, 0, pp->id, asked, 0, size, d->next_id);
            dev_unlock(d);
            return addr;
        }
    }
    addr = seg_malloc_slow(d, pp, size, rounded, stream, oom);
    if (addr) {
        jr_note(d, JR_ALLOC, 0, pp->id, asked, 0, size, d->next_id);
    } else {
        note_failure(d, pp->id, asked, size, oom);
    }
    dev_unlock(d);
    return addr;
}

/* The idle shortcut (core_rule_t.idle_shortcut; core.h, "Free modes as
 * applied", row 1): no work was submitted since the block was handed out,
 * so none can name it and a fenced free needs no fence (the count is the
 * backend's work_epoch, which interpose/submit.c keeps). */
static inline bool free_is_idle(const core_dev_t *d, const block_t *b, core_free_t how)
{
    return how == CORE_FREE_FENCED && conf_rule(&d->conf)->idle_shortcut && !b->nuses && b->hold == 0 &&
           !(b->epoch & CORE_EPOCH_UNSEEN) && d->be.work_epoch &&
           atomic_load_explicit(d->be.work_epoch, memory_order_relaxed) == b->epoch;
}

/* The mode a free of an unheld block is applied with (core.h, "Free modes
 * as applied", rows 3 to 6); an AFTER_STREAM result has its event recorded. */
static core_free_t free_mode(core_dev_t *d, block_t *b, core_free_t how, core_stream_t stream)
{
    if (b->nuses)
        return CORE_FREE_FENCED; /* used on several streams: the device-wide fence covers them all */
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
    block_t *b = map_remove(d, addr);
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
        pool_release_block(d, b, idle); /* else its own stream's queued work may still use it */
    else if (how == CORE_FREE_FENCED) {
        pend_fenced(d, b);
        hand_out_slice(d);
    }
    dev_unlock(d);
    return CORE_FREED;
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

int core_set_memory_fraction(core_dev_t *d, double fraction)
{
    if (!(fraction > 0.0 && fraction <= 1.0))
        return -1;
    dev_lock(d);
    d->conf.memory_fraction = fraction;
    d->allowed = allowed_bytes(d);
    dev_unlock(d);
    return 0;
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

void core_poll(core_dev_t *d)
{
    dev_lock(d);
    jr_note(d, JR_POLL, 0, 0, 0, 0, 0, 0);
    if (d->pending_bytes && !d->capturing)
        pend_poll(d);
    dev_unlock(d);
}

void core_fence(core_dev_t *d)
{
    dev_lock(d);
    jr_note(d, JR_FENCE, 0, 0, 0, 0, 0, 0);
    pend_close(d); /* nothing while capturing */
    dev_unlock(d);
}

void core_set_streams(core_dev_t *d, unsigned n)
{
    dev_lock(d);
    if (n != d->streams) {
        jr_note(d, JR_STREAMS, 0, 0, 0, 0, n, d->streams);
        d->streams = n;
    }
    dev_unlock(d);
}

void core_stop_hand_outs(core_dev_t *d)
{
    dev_lock(d);
    hand_out_stop(d);
    dev_unlock(d);
}

void core_set_capturing(core_dev_t *d, bool on)
{
    dev_lock(d);
    jr_note(d, JR_CAPTURE, on, 0, 0, 0, 0, 0);
    d->capturing = on;
    dev_unlock(d);
}

void core_fallback_served(core_dev_t *d)
{
    dev_lock(d);
    if (d->stats.num_ooms)
        d->stats.num_ooms--;
    d->stats.num_fallback_served++;
    dev_unlock(d);
}

void core_synchronized(core_dev_t *d)
{
    dev_lock(d);
    jr_note(d, JR_SYNC, 0, 0, 0, 0, 0, 0);
    if (d->pending_bytes)
        pend_release_all(d, false);
    if (d->conf.expandable_segments)
        exp_all_idle(d);
    dev_unlock(d);
}

void core_empty_cache(core_dev_t *d, int pool_id)
{
    dev_lock(d);
    jr_note(d, JR_EMPTY, 0, pool_id, 0, 0, 0, 0);
    if (d->capturing) { /* waits and releases are illegal now */
        dev_unlock(d);
        return;
    }
    pend_release_all(d, true);
    if (pool_id < 0) {
        seg_release_free(d, NULL, false, SIZE_MAX);
    } else {
        ppool_t *pp = ppool_find(d, pool_id);
        if (pp == &d->defaults)
            seg_release_free(d, pp, false, SIZE_MAX);
        /* a live private pool keeps its segments */
    }
    dev_unlock(d);
}

void core_usage(core_dev_t *d, core_usage_t *u)
{
    dev_lock(d);
    u->allocated = (size_t)d->stats.allocated_bytes[CORE_POOL_ALL].current;
    u->reserved = (size_t)d->stats.reserved_bytes[CORE_POOL_ALL].current;
    u->pending = d->pending_bytes;
    u->cached_free = u->reserved - (size_t)d->stats.active_bytes[CORE_POOL_ALL].current;
    u->largest_free = largest_free_block(d);
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

int core_pool_create(core_dev_t *d)
{
    ppool_t *pp = hostalloc_malloc(sizeof *pp);
    if (!pp)
        return -1;
    dev_lock(d);
    ppool_init(pp, ++d->next_pool_id);
    jr_note(d, JR_POOL_CREATE, 0, pp->id, 0, 0, 0, 0);
    pp->next = d->privates;
    d->privates = pp;
    int id = pp->id;
    dev_unlock(d);
    return id;
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

void core_dev_solo(core_dev_t *d)
{
    d->solo = true;
}

void core_set_birth_times(core_dev_t *d, bool on)
{
    dev_lock(d);
    d->births = on;
    dev_unlock(d);
}

int core_pool_current(core_dev_t *d)
{
    if ((unsigned)d->device >= CORE_MAX_DEVICES)
        return 0;
    const tls_route_t *route = &tls_pool[d->device];
    return route->gen == d->gen ? route->pool : 0;
}

int core_pool_destroy(core_dev_t *d, int pool_id)
{
    dev_lock(d);
    ppool_t *pp = pool_id > 0 ? ppool_find(d, pool_id) : NULL;
    if (!pp) {
        dev_unlock(d);
        return -1;
    }
    /* Its blocks still pending go back when their fences complete, and their
     * segments with them. */
    jr_note(d, JR_POOL_DESTROY, 0, pool_id, 0, 0, 0, 0);
    pp->destroyed = true;
    if (pp->segments == 0)
        ppool_unlink_free(d, pp);
    else /* seg_release frees pp with its last segment: pp is not read after this */
        seg_release_free(d, pp, false, SIZE_MAX);
    dev_unlock(d);
    return 0;
}
