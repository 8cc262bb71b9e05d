/*
 * The hit path's inner steps, inline where they run: taking a found free
 * block (the split, the address map, PyTorch's counters) and the address
 * map's insert and remove.  alloc.c (core_malloc, core_free) and pool.c
 * (the same steps for the other paths) include it: one copy of each.
 */
#ifndef CUCACHE_CORE_HIT_H
#define CUCACHE_CORE_HIT_H

#include "hostalloc.h"
#include "types.h"

/* ms since the device's state was made, + 1 (pool.c), while birth times
 * are kept (core_set_birth_times). */
uint32_t pool_birth_now(const core_dev_t *d);

/* ------------------------------------------------------------------------
 * The address map of allocated blocks
 * ---------------------------------------------------------------------- */

static inline size_t map_hash(uintptr_t addr, size_t mask)
{
    uint64_t k = (uint64_t)addr >> 9;
    k *= 0x9e3779b97f4a7c15ull;
    return (size_t)(k >> 32) & mask;
}

/* The map is grown before any insert that would overload it (see
 * core_malloc), so an insert never allocates. */
static inline void hit_map_insert(core_dev_t *d, block_t *b)
{
    size_t h = map_hash(b->addr, d->map.mask);
    b->map_next = d->map.buckets[h];
    d->map.buckets[h] = b;
    d->map.count++;
}

static inline block_t *hit_map_remove(core_dev_t *d, uintptr_t addr)
{
    if (__builtin_expect(!d->map.buckets, 0))
        return NULL;
    for (block_t **p = &d->map.buckets[map_hash(addr, d->map.mask)]; *p; p = &(*p)->map_next) {
        block_t *b = *p;
        if (b->addr == addr) {
            *p = b->map_next;
            b->map_next = NULL;
            d->map.count--;
            return b;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------
 * PyTorch's counters as a block is handed out and freed
 * ---------------------------------------------------------------------- */

static inline void stats_block_alloc(core_dev_t *d, const block_t *b)
{
    int cls = pool_class(b->pool);
    core_stats_t *s = &d->stats;
    stat_up2(s->allocation, cls, 1);
    stat_up2(s->allocated_bytes, cls, b->size);
    stat_up2(s->requested_bytes, cls, b->requested);
    stat_up2(s->active, cls, 1);
    stat_up2(s->active_bytes, cls, b->size);
    if (b->size >= d->conf.max_split_size)
        stat_add(&s->oversize_allocations, 1);
    core_emit(d, CORE_EV_ALLOC, b->addr, b->size, b->stream, b->pool->owner->id, b->site);
}

/* The program freed b; it stays active until its last use is over. */
static inline void stats_block_free(core_dev_t *d, const block_t *b)
{
    int cls = pool_class(b->pool);
    core_stats_t *s = &d->stats;
    stat_down2(s->allocation, cls, 1);
    stat_down2(s->allocated_bytes, cls, b->size);
    stat_down2(s->requested_bytes, cls, b->requested);
    if (b->size >= d->conf.max_split_size)
        stat_add(&s->oversize_allocations, -1);
    core_emit(d, CORE_EV_FREE_REQUESTED, b->addr, b->size, b->stream, b->pool->owner->id, b->site);
}

/* ------------------------------------------------------------------------
 * Taking a free block
 * ---------------------------------------------------------------------- */

/* A block struct with undefined contents (the caller fills every field). */
static inline block_t *block_get(core_dev_t *d)
{
    block_t *b = d->spare;
    if (__builtin_expect(b != NULL, 1)) {
        d->spare = b->pend_next;
        return b;
    }
    return hostalloc_malloc(sizeof *b);
}

/* Counted as inactive split: free, and not a whole segment (never in an
 * expandable segment, as in PyTorch). */
static inline bool inactive_split(const block_t *b)
{
    return b->state == BLOCK_FREE && (b->prev || b->next) && !b->seg->expandable;
}

/* The inactive split gauges: `gone` blocks of `gone_bytes` stop counting,
 * then `came` blocks of `came_bytes` start (stat_move2's order). */
static inline void inactive_move(core_dev_t *d, const pool_t *pool, uint64_t gone, uint64_t gone_bytes, uint64_t came,
                                 uint64_t came_bytes)
{
    int cls = pool_class(pool);
    stat_move2(d->stats.inactive_split, cls, gone, came);
    stat_move2(d->stats.inactive_split_bytes, cls, gone_bytes, came_bytes);
}

static inline bool should_split(const core_dev_t *d, const block_t *b, size_t size)
{
    size_t remaining = b->size - size;
    if (b->seg->direct)
        return false; /* returned whole to the device on free */
    if (b->seg->expandable)
        return remaining >= d->conf.min_block_size; /* its free pages can go back to the device */
    if (b->pool->small || (d->conf.strategy == CONF_STRATEGY_PREALLOCATE && b->pool->owner->id == 0))
        return remaining >= d->conf.min_block_size;
    return size < d->conf.max_split_size && remaining > d->conf.small_size;
}

/* block_split for a FREE block b: r gets the high part, FREE, with the
 * fields a free block reads (the allocated-only ones and the tree node are
 * set when it is taken or put in a tree); b keeps the low part. */
static inline void hit_split_free(block_t *b, uintptr_t at, block_t *r)
{
    r->addr = at;
    r->size = b->addr + b->size - at;
    r->requested = 0;
    r->prev = b;
    r->next = b->next;
    r->seg = b->seg;
    r->pool = b->pool;
    r->stream = b->stream;
    r->state = BLOCK_FREE;
    r->uses = NULL;
    r->nuses = 0;
    r->hold = 0;
    r->alias = NULL;
    r->idle = b->idle;
    if (r->next)
        r->next->prev = r;
    b->next = r;
    b->size = at - b->addr;
}

/* Takes the free block b for a request: splits off the rest when the split
 * rules say so, and makes the (low-address) part allocated.  Returns the
 * allocated block, or NULL when a block struct cannot be had (b untouched). */
static inline __attribute__((always_inline)) block_t *pool_take(core_dev_t *d, block_t *b, size_t rounded,
                                                                size_t requested)
{
    bool was = inactive_split(b);
    size_t size = b->size;
    if (should_split(d, b, rounded)) {
        block_t *rest = block_get(d);
        if (__builtin_expect(!rest, 0))
            return NULL;
        pool_tree_remove(b->pool, b);
        hit_split_free(b, b->addr + rounded, rest);
        pool_tree_insert(rest->pool, rest);
        if (!b->seg->expandable) /* rest, after b, is inactive split */
            inactive_move(d, b->pool, was, was ? size : 0, 1, rest->size);
    } else {
        pool_tree_remove(b->pool, b);
        if (was)
            inactive_move(d, b->pool, 1, size, 0, 0);
    }
    b->state = BLOCK_ALLOCATED;
    b->requested = requested;
    b->id = CORE_ID_TAG | ++d->next_id << 6 | (uint64_t)(d->device & 63);
    b->hold = 0;
    b->site = d->site_now;
    b->born = __builtin_expect(d->births, 0) ? pool_birth_now(d) : 0;
    b->epoch = d->be.work_epoch ? core_epoch_note(d->be.work_epoch) : CORE_EPOCH_UNSEEN;
    hit_map_insert(d, b);
    stats_block_alloc(d, b);
    return b;
}

/* ------------------------------------------------------------------------
 * A block becoming free
 * ---------------------------------------------------------------------- */

/* Merges free neighbour n into b (n is absorbed and deleted); counts it
 * in *gone when it was inactive split. */
static inline void merge_into(core_dev_t *d, block_t *b, block_t *n, uint64_t gone[2])
{
    if (inactive_split(n))
        gone[0]++, gone[1] += n->size;
    pool_tree_remove(n->pool, n);
    b->idle = b->idle && n->idle;
    block_absorb(d, b, n);
}

/* b becomes FREE: merged with its free neighbours (b absorbs them) and put
 * in its pool's tree. */
static inline block_t *merge_insert(core_dev_t *d, block_t *b)
{
    uint64_t gone[2] = {0, 0}; /* inactive split blocks merged in, and their bytes */
    b->state = BLOCK_FREE;
    if (b->prev && b->prev->state == BLOCK_FREE)
        merge_into(d, b, b->prev, gone);
    if (b->next && b->next->state == BLOCK_FREE)
        merge_into(d, b, b->next, gone);
    pool_tree_insert(b->pool, b);
    bool came = inactive_split(b);
    if (gone[0] || came)
        inactive_move(d, b->pool, gone[0], gone[1], came, came ? b->size : 0);
    return b;
}

/* A block whose last use is over becomes free: merged with its free
 * neighbours and put in its pool's tree.  Its segment is released at once
 * when it is direct (preallocate's oversize requests) or belongs to a
 * destroyed private pool.  pool_release_block for the other paths. */
static inline __attribute__((always_inline)) void hit_release(core_dev_t *d, block_t *b, bool idle)
{
    b->idle = idle && b->idle; /* work queued before it was taken may still be under way */
    int cls = pool_class(b->pool);
    stat_down2(d->stats.active, cls, 1);
    stat_down2(d->stats.active_bytes, cls, b->size);
    core_emit(d, CORE_EV_FREE_COMPLETED, b->addr, b->size, b->stream, b->pool->owner->id, b->site);
    if (__builtin_expect(b->uses != NULL, 0)) {
        hostalloc_free(b->uses);
        b->uses = NULL;
    }
    b->nuses = 0;
    b->requested = 0;
    b = merge_insert(d, b);
    seg_t *s = b->seg;
    if (!b->prev && !b->next) { /* only then can the segment be free */
        s->free_since = d->alloc_clock;
        if (seg_is_free(s) && (s->pool->owner->destroyed || s->direct))
            seg_release(d, s);
    }
}

#endif
