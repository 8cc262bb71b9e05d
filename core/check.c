/*
 * core_check: re-derives every invariant of core/types.h from the blocks
 * and compares it with the allocator's structures and counters.  Tests run
 * it after every step; it is too slow for production (O(blocks)).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "types.h"

typedef struct tally_s {
    int64_t allocation[CORE_POOL_CLASSES], allocated_bytes[CORE_POOL_CLASSES], requested_bytes[CORE_POOL_CLASSES];
    int64_t active[CORE_POOL_CLASSES], active_bytes[CORE_POOL_CLASSES];
    int64_t segment[CORE_POOL_CLASSES], reserved_bytes[CORE_POOL_CLASSES];
    int64_t inactive_split[CORE_POOL_CLASSES], inactive_split_bytes[CORE_POOL_CLASSES];
    size_t free_blocks, pending_blocks, pending_bytes;
    size_t lent, foreign; /* shared pages' blocks seen */
} tally_t;

static int fail(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *why, size_t len, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void count(int64_t *arr, int cls, int64_t v)
{
    arr[CORE_POOL_ALL] += v;
    arr[cls] += v;
}

/* One segment: tiling, neighbours, ownership; adds its blocks to t. */
static int check_segment(const core_dev_t *d, const seg_t *s, tally_t *t, char *why, size_t len)
{
    int cls = pool_class(s->pool);
    if (!s->expandable) {
        count(t->segment, cls, 1);
        count(t->reserved_bytes, cls, (int64_t)s->size);
    } else if (!s->page || s->size % s->page) {
        return fail(why, len, "expandable segment 0x%lx: page %zu does not tile it", (unsigned long)s->addr, s->page);
    }
    const pool_bins_t *e = s->pool->bins;
    while (e && e != s->bins)
        e = e->next;
    if (!e || e->stream != s->stream)
        return fail(why, len, "segment 0x%lx: its bins are not its pool's for its stream", (unsigned long)s->addr);
    size_t mapped = 0, aliased = 0;
    if (!s->first || s->first->prev || s->first->addr != s->addr)
        return fail(why, len, "segment 0x%lx: first block does not start it", (unsigned long)s->addr);
    size_t sum = 0;
    for (const block_t *b = s->first; b; b = b->next) {
        if (b->seg != s || b->pool != s->pool || b->stream != s->stream)
            return fail(why, len, "block 0x%lx: segment, pool or stream differs from its segment's",
                        (unsigned long)b->addr);
        if (b->next && (b->next->prev != b || b->next->addr != b->addr + b->size))
            return fail(why, len, "block 0x%lx: not followed by its address neighbour", (unsigned long)b->addr);
        if (b->size == 0 || b->size % d->conf.min_block_size)
            return fail(why, len, "block 0x%lx: size %zu is not a positive multiple of %zu", (unsigned long)b->addr,
                        b->size, d->conf.min_block_size);
        if (b->state == BLOCK_FREE && b->next && b->next->state == BLOCK_FREE)
            return fail(why, len, "blocks 0x%lx and 0x%lx: adjacent and both free (not coalesced)",
                        (unsigned long)b->addr, (unsigned long)b->next->addr);
        if (b->state == BLOCK_UNMAPPED) {
            if (!s->expandable)
                return fail(why, len, "block 0x%lx: unmapped in a segment that is not expandable",
                            (unsigned long)b->addr);
            if ((b->addr - s->addr) % s->page || b->size % s->page)
                return fail(why, len, "unmapped block 0x%lx (%zu bytes): not whole pages of %zu",
                            (unsigned long)b->addr, b->size, s->page);
            if (b->next && b->next->state == BLOCK_UNMAPPED)
                return fail(why, len, "blocks 0x%lx and 0x%lx: adjacent and both unmapped (not coalesced)",
                            (unsigned long)b->addr, (unsigned long)b->next->addr);
            if (map_find(d, b->addr) == b)
                return fail(why, len, "unmapped block 0x%lx: in the address map", (unsigned long)b->addr);
        } else {
            mapped += b->size;
        }
        if (b->state == BLOCK_LENT || b->state == BLOCK_FOREIGN) {
            /* a shared page: the lender's tail and the borrower's foreign
             * head are each other's complement in one page */
            const block_t *l = b->state == BLOCK_LENT ? b : b->alias, *f = b->state == BLOCK_FOREIGN ? b : b->alias;
            if (!s->expandable || !l || !f || l->state != BLOCK_LENT || f->state != BLOCK_FOREIGN || l->alias != f ||
                f->alias != l)
                return fail(why, len, "block 0x%lx: a shared page's lent and foreign blocks do not point at each other",
                            (unsigned long)b->addr);
            size_t page = s->page, loff = (l->addr - l->seg->addr) % page, foff = (f->addr - f->seg->addr) % page;
            size_t lend = (l->addr + l->size - l->seg->addr) % page, fend = (f->addr + f->size - f->seg->addr) % page;
            bool tail = loff && !lend && !foff && f->size == loff, head = !loff && lend && !fend && foff == lend;
            if (l->seg->pool != f->seg->pool || l->seg->page != page || l->size + f->size != page || !(tail || head))
                return fail(why, len,
                            "shared page: lent block 0x%lx (%zu bytes) and foreign block 0x%lx (%zu bytes) do not "
                            "split one page of %zu",
                            (unsigned long)l->addr, l->size, (unsigned long)f->addr, f->size, page);
            if (map_find(d, b->addr) == b)
                return fail(why, len, "block 0x%lx: lent or foreign, and in the address map", (unsigned long)b->addr);
            /* the partner is a block of its segment still (not a struct a
             * merge deleted) */
            const block_t *o = b->alias;
            if ((o->prev ? o->prev->next != o : o->seg->first != o) || (o->next && o->next->prev != o))
                return fail(why, len, "block 0x%lx: its shared page's partner 0x%lx is not in its segment",
                            (unsigned long)b->addr, (unsigned long)o->addr);
            if (b->state == BLOCK_FOREIGN) {
                aliased += page;
                t->foreign++;
            } else {
                t->lent++;
            }
        }
        sum += b->size;
        if (b->state == BLOCK_ALLOCATED) {
            if (map_find(d, b->addr) != b)
                return fail(why, len, "allocated block 0x%lx: not in the address map", (unsigned long)b->addr);
            count(t->allocation, cls, 1);
            count(t->allocated_bytes, cls, (int64_t)b->size);
            count(t->requested_bytes, cls, (int64_t)b->requested);
        }
        if (b->state == BLOCK_ALLOCATED || b->state == BLOCK_PENDING) {
            count(t->active, cls, 1);
            count(t->active_bytes, cls, (int64_t)b->size);
        }
        if (b->state == BLOCK_PENDING) {
            t->pending_blocks++;
            t->pending_bytes += b->size;
        }
        if (b->state == BLOCK_FREE) {
            t->free_blocks++;
            if ((b->prev || b->next) && !s->expandable) {
                count(t->inactive_split, cls, 1);
                count(t->inactive_split_bytes, cls, (int64_t)b->size);
            }
        }
    }
    if (sum != s->size)
        return fail(why, len, "segment 0x%lx: blocks sum to %zu bytes, segment has %zu", (unsigned long)s->addr, sum,
                    s->size);
    if (s->expandable) {
        if (aliased != s->aliased)
            return fail(why, len, "expandable segment 0x%lx: %zu bytes of shared pages, it counts %zu",
                        (unsigned long)s->addr, aliased, s->aliased);
        if (mapped != s->mapped + s->aliased)
            return fail(why, len, "expandable segment 0x%lx: its blocks map %zu bytes, it counts %zu (and %zu shared)",
                        (unsigned long)s->addr, mapped, s->mapped, s->aliased);
        count(t->reserved_bytes, cls, (int64_t)s->mapped);
    }
    return 0;
}

/* One stream's bins of pool p: every tree in (size, address) order, every
 * node a FREE block of that pool and stream in the tree of its class, the
 * bitmap naming exactly the classes that hold blocks, segs the segments
 * that point here. */
static int check_bins(const core_dev_t *d, const pool_t *p, const pool_bins_t *e, size_t *nodes, char *why,
                      size_t len)
{
    const char *reason = NULL;
    const char *cls = p->small ? "small" : "large";
    uint64_t words = 0;
    for (unsigned c = 0; c < POOL_BINS; c++) {
        const rb_tree_t *t = &e->bin[c];
        if (rb_check(t, block_bin_cmp, &reason) < 0)
            return fail(why, len, "free bin %u of pool %d (%s): %s", c, p->owner->id, cls, reason);
        bool bit = e->map[c / 64] >> (c % 64) & 1;
        if (bit != !rb_empty(t))
            return fail(why, len, "free bins of pool %d (%s): class %u's bit is %d, its tree %s", p->owner->id, cls, c,
                        (int)bit, rb_empty(t) ? "empty" : "not empty");
        if (bit)
            words |= 1ull << (c / 64);
        for (const rb_node_t *n = rb_first(t); n; n = rb_next(n)) {
            const block_t *b = rb_entry(n, block_t, node);
            if (b->state != BLOCK_FREE || b->pool != p)
                return fail(why, len, "free bins of pool %d hold block 0x%lx in state %d of another pool",
                            p->owner->id, (unsigned long)b->addr, (int)b->state);
            if (b->stream != e->stream || b->seg->bins != e || pool_bin_of(b->size) != c)
                return fail(why, len, "free bins of pool %d: block 0x%lx (%zu bytes) is in class %u of another stream's "
                            "or another class's bins",
                            p->owner->id, (unsigned long)b->addr, b->size, c);
            (*nodes)++;
        }
    }
    if (words != e->words)
        return fail(why, len, "free bins of pool %d (%s): the word summary is 0x%llx, the bitmap says 0x%llx",
                    p->owner->id, cls, (unsigned long long)e->words, (unsigned long long)words);
    size_t segs = 0;
    for (const seg_t *s = d->segs; s; s = s->next)
        segs += s->bins == e;
    if (segs != e->segs)
        return fail(why, len, "free bins of pool %d (%s): %zu segments point at them, they count %zu", p->owner->id,
                    cls, segs, e->segs);
    return 0;
}

/* Every stream's bins of the pool: at most one per stream. */
static int check_pool(const core_dev_t *d, const pool_t *p, size_t *nodes, char *why, size_t len)
{
    for (const pool_bins_t *e = p->bins; e; e = e->next) {
        for (const pool_bins_t *o = e->next; o; o = o->next)
            if (o->stream == e->stream)
                return fail(why, len, "pool %d has two bins for stream 0x%llx", p->owner->id,
                            (unsigned long long)e->stream);
        if (check_bins(d, p, e, nodes, why, len) < 0)
            return -1;
    }
    return 0;
}

static int check_stats(const core_dev_t *d, const tally_t *t, char *why, size_t len)
{
    static const char *const cls_name[] = {"all", "small_pool", "large_pool"};
    core_stats_t sum = d->stats;
    const core_stats_t *s = &sum;
    stats_sum_all(&sum);
#define CHECK_STAT(name)                                                                                               \
    for (int c = CORE_POOL_CLASSES - 1; c >= 0; c--) /* the classes first: all is their sum */                        \
        if (s->name[c].current != t->name[c])                                                                          \
            return fail(why, len, "stat " #name ".%s.current is %lld, the blocks say %lld", cls_name[c],               \
                        (long long)s->name[c].current, (long long)t->name[c]);
    CHECK_STAT(allocation)
    CHECK_STAT(allocated_bytes)
    CHECK_STAT(requested_bytes)
    CHECK_STAT(active)
    CHECK_STAT(active_bytes)
    CHECK_STAT(segment)
    CHECK_STAT(reserved_bytes)
    CHECK_STAT(inactive_split)
    CHECK_STAT(inactive_split_bytes)
#undef CHECK_STAT
    /* the all entries keep only their peak (stat_all_current) */
#define CHECK_ALL(name)                                                                                                \
    if (d->stats.name[CORE_POOL_ALL].current || d->stats.name[CORE_POOL_ALL].allocated ||                             \
        d->stats.name[CORE_POOL_ALL].freed || s->name[CORE_POOL_ALL].peak < s->name[CORE_POOL_ALL].current)            \
        return fail(why, len, "stat " #name ".all keeps more than its peak, or its peak is below the classes' sum");
    CORE_STAT_ARRAYS(CHECK_ALL)
#undef CHECK_ALL
    return 0;
}

static size_t pending_listed(const core_dev_t *d, size_t *bytes)
{
    size_t n = 0;
    *bytes = 0;
    for (const fence_batch_t *f = d->fences; f; f = f->next) {
        size_t mine = 0;
        for (const block_t *b = f->blocks; b; b = b->pend_next, n++)
            mine += b->size;
        if (mine != f->bytes)
            return SIZE_MAX; /* a batch's byte count is wrong */
        *bytes += mine;
    }
    size_t open = 0;
    for (const block_t *b = d->open.blocks; b; b = b->pend_next, n++)
        open += b->size;
    if (open != d->open.bytes || *bytes + open != d->fenced_bytes)
        return SIZE_MAX;
    *bytes += open;
    for (const block_t *b = d->held; b; b = b->pend_next, n++)
        *bytes += b->size;
    for (const block_t *b = d->event_pending; b; b = b->pend_next, n++)
        *bytes += b->size;
    return n;
}

int core_check_locked(const core_dev_t *d, char *why, size_t len)
{
    tally_t t;
    memset(&t, 0, sizeof t);
    for (const seg_t *s = d->segs; s; s = s->next) {
        if (s->next && s->next->prev != s)
            return fail(why, len, "segment list: broken back link after 0x%lx", (unsigned long)s->addr);
        if (check_segment(d, s, &t, why, len) < 0)
            return -1;
    }
    size_t nodes = 0;
    const ppool_t *pools[64];
    size_t np = 0;
    pools[np++] = &d->defaults;
    for (const ppool_t *p = d->privates; p && np < 64; p = p->next)
        pools[np++] = p;
    for (size_t i = 0; i < np; i++)
        if (check_pool(d, &pools[i]->small, &nodes, why, len) < 0 ||
            check_pool(d, &pools[i]->large, &nodes, why, len) < 0)
            return -1;
    if (nodes != t.free_blocks)
        return fail(why, len, "free bins hold %zu blocks, segments have %zu free blocks", nodes, t.free_blocks);
    if (t.lent != t.foreign)
        return fail(why, len, "shared pages: %zu lent blocks, %zu foreign ones", t.lent, t.foreign);
    if (d->map.count != (size_t)t.allocation[CORE_POOL_ALL])
        return fail(why, len, "address map holds %zu blocks, segments have %lld allocated", d->map.count,
                    (long long)t.allocation[CORE_POOL_ALL]);
    for (const block_t *b = d->held; b; b = b->pend_next)
        if (b->state != BLOCK_PENDING || !b->hold)
            return fail(why, len, "held block 0x%lx: state %d, hold %llu (a held block is pending with a hold)",
                        (unsigned long)b->addr, (int)b->state, (unsigned long long)b->hold);
    size_t pbytes = 0, plisted = pending_listed(d, &pbytes);
    if (plisted == SIZE_MAX)
        return fail(why, len, "a fence batch's byte count differs from its blocks' (or fenced_bytes from the batches')");
    if (plisted != t.pending_blocks || pbytes != t.pending_bytes || d->pending_bytes != t.pending_bytes)
        return fail(why, len, "pending lists hold %zu blocks (%zu bytes, counter %zu), segments have %zu (%zu bytes)",
                    plisted, pbytes, d->pending_bytes, t.pending_blocks, t.pending_bytes);
    return check_stats(d, &t, why, len);
}

int core_check(core_dev_t *d, char *why, size_t len)
{
    dev_lock(d);
    int r = core_check_locked(d, why, len);
    dev_unlock(d);
    return r;
}
