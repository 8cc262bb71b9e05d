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

#include "hit.h"
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

/* 0 means "not stamped"; the coarse clock, a few ns through the vDSO. */
uint32_t pool_birth_now(const core_dev_t *d)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    uint64_t ns = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
    uint64_t ms = ns > d->born_ns ? (ns - d->born_ns) / 1000000u : 0;
    return ms >= UINT32_MAX - 1 ? UINT32_MAX : (uint32_t)ms + 1;
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

void pool_release_block(core_dev_t *d, block_t *b, bool idle)
{
    hit_release(d, b, idle);
}

block_t *pool_insert_free(core_dev_t *d, block_t *b)
{
    b->idle = true; /* new pages: nothing ever used them */
    return merge_insert(d, b);
}

/* ------------------------------------------------------------------------
 * The address map of allocated blocks
 * ---------------------------------------------------------------------- */

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

void map_insert(core_dev_t *d, block_t *b)
{
    hit_map_insert(d, b);
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
    return hit_map_remove(d, addr);
}
