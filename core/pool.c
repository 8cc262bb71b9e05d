/*
 * The hit path: size rounding, pool choice, best-fit lookup in the free
 * trees, splitting a found block and merging a freed one with its free
 * neighbours, and the address map of live allocations.  Everything here is
 * O(1) or O(log n) in the number of cached blocks and allocates no host
 * memory except when a block struct or the address map must grow.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hostalloc.h"
#include "types.h"

/* ------------------------------------------------------------------------
 * Sizes (PyTorch's round_size and get_allocation_size)
 * ---------------------------------------------------------------------- */

/* The segment size to ask the device for, for a request of `rounded`. */
size_t pool_alloc_size(const conf_t *c, size_t rounded)
{
    if (rounded <= c->small_size)
        return c->small_segment_size;
    if (rounded < c->min_large_alloc)
        return c->large_segment_size;
    return pool_round_up(rounded, c->round_large);
}

/* ------------------------------------------------------------------------
 * Free bins: per (pool, stream), size classes of trees ordered by (size,
 * address), and a bitmap of the classes that hold blocks
 * ---------------------------------------------------------------------- */

pool_bins_t *pool_bins_get(pool_t *pool, core_stream_t stream)
{
    for (pool_bins_t *e = pool->bins; e; e = e->next)
        if (e->stream == stream)
            return e;
    pool_bins_t *e = hostalloc_calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->stream = stream;
    e->next = pool->bins;
    pool->bins = e;
    return e;
}

void pool_bins_unref(pool_t *pool, pool_bins_t *bins)
{
    if (--bins->segs)
        return;
    for (pool_bins_t **p = &pool->bins; *p; p = &(*p)->next)
        if (*p == bins) {
            *p = bins->next;
            hostalloc_free(bins);
            return;
        }
}

void pool_fini(pool_t *pool)
{
    while (pool->bins) {
        pool_bins_t *e = pool->bins;
        pool->bins = e->next;
        hostalloc_free(e);
    }
}

size_t pool_free_count(const pool_t *pool)
{
    size_t n = 0;
    for (const pool_bins_t *e = pool->bins; e; e = e->next)
        for (unsigned c = 0; c < POOL_BINS; c++)
            n += rb_count(&e->bin[c]);
    return n;
}

/* The stream's bins, moved to the front of the pool's list; NULL: none. */
static pool_bins_t *bins_find(pool_t *pool, core_stream_t stream)
{
    pool_bins_t *e = pool->bins;
    if (__builtin_expect(e && e->stream == stream, 1))
        return e;
    for (pool_bins_t **p = &pool->bins; (e = *p); p = &e->next)
        if (e->stream == stream) {
            *p = e->next;
            e->next = pool->bins;
            pool->bins = e;
            return e;
        }
    return NULL;
}

/* The first class after c that holds a block, or POOL_BINS. */
static inline unsigned bins_next(const pool_bins_t *e, unsigned c)
{
    unsigned w = c / 64;
    uint64_t m = e->map[w] & (~0ull << (c % 64) << 1);
    if (m)
        return w * 64 + (unsigned)__builtin_ctzll(m);
    uint64_t words = e->words & (~0ull << w << 1);
    if (!words)
        return POOL_BINS;
    w = (unsigned)__builtin_ctzll(words);
    return w * 64 + (unsigned)__builtin_ctzll(e->map[w]);
}

void pool_tree_insert(pool_t *pool, block_t *b)
{
    (void)pool;
    pool_bins_t *e = b->seg->bins;
    unsigned c = pool_bin_of(b->size);
    rb_tree_t *t = &e->bin[c];
    if (!t->root) { /* the class's only block: a black root, no fix-up */
        e->map[c / 64] |= 1ull << (c % 64);
        e->words |= 1ull << (c / 64);
        b->node = (rb_node_t){.parent_color = RB_BLACK};
        t->root = &b->node;
        return;
    }
    rb_node_t **link = &t->root, *parent = NULL;
    while (*link) {
        parent = *link;
        const block_t *p = rb_entry(parent, block_t, node);
        bool left = b->size < p->size || (b->size == p->size && b->addr < p->addr);
        link = left ? &parent->left : &parent->right;
    }
    rb_link(&b->node, parent, link);
    rb_insert_fixup(t, &b->node);
}

void pool_tree_remove(pool_t *pool, block_t *b)
{
    (void)pool;
    pool_bins_t *e = b->seg->bins;
    unsigned c = pool_bin_of(b->size);
    rb_tree_t *t = &e->bin[c];
    if (t->root == &b->node && !b->node.left && !b->node.right)
        t->root = NULL; /* the class's only block */
    else
        rb_erase(t, &b->node);
    if (!t->root) {
        e->map[c / 64] &= ~(1ull << (c % 64));
        if (!e->map[c / 64])
            e->words &= ~(1ull << (c / 64));
    }
}

/* The first block of the tree of size >= size (the lowest address among
 * the smallest such size), or NULL. */
static inline block_t *bin_lower_bound(const rb_tree_t *t, size_t size)
{
    rb_node_t *n = t->root, *found = NULL;
    while (n) {
        if (rb_entry(n, block_t, node)->size >= size) {
            found = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return found ? rb_entry(found, block_t, node) : NULL;
}

/* Best fit for (stream, rounded), with PyTorch's oversize rules: a request
 * below max_split_size never takes an oversize block, and an oversize
 * request takes a block only if it wastes less than max_non_split_rounding.
 * Classes are monotonic in size: the best fit is in the request's class or
 * is the first block of the next class that holds one. */
block_t *pool_find_free(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t rounded)
{
    pool_bins_t *e = bins_find(pool, stream);
    if (__builtin_expect(!e, 0))
        return NULL;
    unsigned c = pool_bin_of(rounded);
    block_t *b = bin_lower_bound(&e->bin[c], rounded);
    if (!b) {
        c = bins_next(e, c);
        if (c == POOL_BINS)
            return NULL;
        b = rb_entry(rb_first(&e->bin[c]), block_t, node);
    }
    size_t max_split = d->conf.max_split_size;
    if (rounded < max_split && b->size >= max_split)
        return NULL;
    if (rounded >= max_split && b->size - rounded >= d->conf.max_non_split_rounding)
        return NULL;
    return b;
}

/* ------------------------------------------------------------------------
 * Block structs
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

block_t *block_new(core_dev_t *d)
{
    block_t *b = block_get(d);
    if (b)
        memset(b, 0, sizeof *b);
    return b;
}

void block_delete(core_dev_t *d, block_t *b)
{
    if (b->uses) {
        hostalloc_free(b->uses);
        b->uses = NULL;
    }
    b->pend_next = d->spare;
    d->spare = b;
}

/* ------------------------------------------------------------------------
 * Split and merge
 * ---------------------------------------------------------------------- */

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

static bool should_split(const core_dev_t *d, const block_t *b, size_t size)
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

/* ms since the device's state was made, + 1 (0 means "not stamped"):
 * the coarse clock, a few ns through the vDSO. */
static uint32_t birth_now(const core_dev_t *d)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    uint64_t ns = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
    uint64_t ms = ns > d->born_ns ? (ns - d->born_ns) / 1000000u : 0;
    return ms >= UINT32_MAX - 1 ? UINT32_MAX : (uint32_t)ms + 1;
}

/* Takes the free block b for a request: splits off the rest when the split
 * rules say so, and makes the (low-address) part allocated.  Returns the
 * allocated block, or NULL when a block struct cannot be had (b untouched). */
block_t *pool_take(core_dev_t *d, block_t *b, size_t rounded, size_t requested)
{
    bool was = inactive_split(b);
    size_t size = b->size;
    if (should_split(d, b, rounded)) {
        block_t *rest = block_get(d); /* every field is set from b below */
        if (!rest)
            return NULL;
        pool_tree_remove(b->pool, b);
        block_split(b, b->addr + rounded, rest);
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
    b->born = __builtin_expect(d->births, 0) ? birth_now(d) : 0;
    b->epoch = d->be.work_epoch ? core_epoch_note(d->be.work_epoch) : CORE_EPOCH_UNSEEN;
    map_insert(d, b);
    stats_block_alloc(d, b);
    return b;
}

bool block_new_n(core_dev_t *d, block_t **out, int n)
{
    for (int i = 0; i < n; i++)
        if (!(out[i] = block_new(d))) {
            while (i--)
                block_delete(d, out[i]);
            return false;
        }
    return true;
}

void block_free_chain(block_t *first)
{
    for (block_t *b = first, *next; b; b = next) {
        next = b->next;
        hostalloc_free(b->uses);
        hostalloc_free(b);
    }
}

void block_split(block_t *b, uintptr_t at, block_t *r)
{
    *r = *b;
    memset(&r->node, 0, sizeof r->node);
    r->addr = at;
    r->size = b->addr + b->size - at;
    r->prev = b;
    if (r->next)
        r->next->prev = r;
    b->next = r;
    b->size = at - b->addr;
}

void block_absorb(core_dev_t *d, block_t *b, block_t *n)
{
    if (n == b->next) {
        b->next = n->next;
        if (n->next)
            n->next->prev = b;
    } else {
        b->addr = n->addr;
        b->prev = n->prev;
        if (n->prev)
            n->prev->next = b;
        else
            b->seg->first = b;
    }
    b->size += n->size;
    block_delete(d, n);
}

/* Merges free neighbour n into b (n is absorbed and deleted); counts it
 * in *gone when it was inactive split. */
static void merge_into(core_dev_t *d, block_t *b, block_t *n, uint64_t gone[2])
{
    if (inactive_split(n))
        gone[0]++, gone[1] += n->size;
    pool_tree_remove(n->pool, n);
    b->idle = b->idle && n->idle;
    block_absorb(d, b, n);
}

/* b becomes FREE: merged with its free neighbours (b absorbs them) and put
 * in its pool's tree. */
static block_t *merge_insert(core_dev_t *d, block_t *b)
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
 * destroyed private pool. */
void pool_release_block(core_dev_t *d, block_t *b, bool idle)
{
    b->idle = idle && b->idle; /* work queued before it was taken may still be under way */
    int cls = pool_class(b->pool);
    stat_down2(d->stats.active, cls, 1);
    stat_down2(d->stats.active_bytes, cls, b->size);
    core_emit(d, CORE_EV_FREE_COMPLETED, b->addr, b->size, b->stream, b->pool->owner->id, b->site);
    if (b->uses) {
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

block_t *pool_insert_free(core_dev_t *d, block_t *b)
{
    b->idle = true; /* new pages: nothing ever used them */
    return merge_insert(d, b);
}

/* ------------------------------------------------------------------------
 * The address map of allocated blocks
 * ---------------------------------------------------------------------- */

static inline size_t map_hash(uintptr_t addr, size_t mask)
{
    uint64_t k = (uint64_t)addr >> 9;
    k *= 0x9e3779b97f4a7c15ull;
    return (size_t)(k >> 32) & mask;
}

bool map_grow(core_dev_t *d)
{
    size_t n = d->map.buckets ? (d->map.mask + 1) * 2 : 1024;
    block_t **nb = hostalloc_calloc(n, sizeof *nb);
    if (!nb)
        return false;
    for (size_t i = 0; d->map.buckets && i <= d->map.mask; i++) {
        for (block_t *b = d->map.buckets[i], *next; b; b = next) {
            next = b->map_next;
            size_t h = map_hash(b->addr, n - 1);
            b->map_next = nb[h];
            nb[h] = b;
        }
    }
    hostalloc_free(d->map.buckets);
    d->map.buckets = nb;
    d->map.mask = n - 1;
    return true;
}

/* The map is grown before any insert that would overload it (see
 * core_malloc), so an insert never allocates. */
void map_insert(core_dev_t *d, block_t *b)
{
    size_t h = map_hash(b->addr, d->map.mask);
    b->map_next = d->map.buckets[h];
    d->map.buckets[h] = b;
    d->map.count++;
}

block_t *map_find(const core_dev_t *d, uintptr_t addr)
{
    if (!d->map.buckets)
        return NULL;
    for (block_t *b = d->map.buckets[map_hash(addr, d->map.mask)]; b; b = b->map_next)
        if (b->addr == addr)
            return b;
    return NULL;
}

block_t *map_remove(core_dev_t *d, uintptr_t addr)
{
    if (!d->map.buckets)
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
