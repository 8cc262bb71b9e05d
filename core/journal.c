/*
 * The history of a device's allocator (core_set_history): every call that
 * changes what it holds, in the order the device lock took them, kept in a
 * bounded ring for the what-if at an out-of-memory failure (whatif.c).
 *
 * A record is 24 bytes: the operation, how a free was ordered, the pool,
 * the stream keys (interned: an index into the journal's table of keys),
 * the requested bytes and the allocation's number (the core's next_id at
 * its allocation, which only grows).  A free carries the size, pool and
 * stream of what it frees, so a window that starts after an allocation
 * still knows the allocation it frees.  Pushing is a few stores under the
 * device lock the call already holds: no atomic, no allocation after the
 * ring's first use.
 *
 * When the ring wraps, the oldest records are lost: jr_take rebuilds the
 * allocations that were live when the kept window begins (the prelude)
 * from the live blocks now and the frees in the window.
 */
#include <stdlib.h>
#include <string.h>

#include "hostalloc.h"
#include "types.h"
#include "vec.h"

enum { JR_STREAMS_MAX = 0xFFFF }; /* index JR_STREAMS_MAX: every stream past the table's end */

void core_set_history(core_dev_t *d, size_t capacity)
{
    size_t cap = 0;
    if (capacity) {
        cap = 1024;
        while (cap < capacity && cap < ((size_t)1 << 30))
            cap <<= 1;
    }
    dev_lock(d);
    hostalloc_free(d->jr.ring);
    d->jr.ring = NULL;
    d->jr.cap = cap;
    d->jr.head = 0;
    d->jr.broken = false;
    dev_unlock(d);
}

void jr_fini(journal_t *j)
{
    hostalloc_free(j->ring);
    hostalloc_free(j->keys);
    ht_fini(&j->index);
    memset(j, 0, sizeof *j);
}

/* The index of stream key k when the table has it (0 is key 0), else
 * JR_STREAMS_MAX; adds nothing. */
static uint32_t key_lookup(const journal_t *j, core_stream_t k)
{
    uint64_t index;
    if (k == 0)
        return 0;
    return ht_get(&j->index, k, &index) ? (uint32_t)index : JR_STREAMS_MAX;
}

/* The index of stream key k (0 is key 0); JR_STREAMS_MAX when the table is
 * full or host memory is short. */
static uint32_t key_index(journal_t *j, core_stream_t k)
{
    if (k == 0)
        return 0;
    if (k == j->last_key)
        return j->last_index;
    const uint64_t *found = ht_find(&j->index, k);
    uint32_t index;
    if (found) {
        index = (uint32_t)*found;
    } else {
        if (j->nkeys + 1 >= JR_STREAMS_MAX ||
            !vec_reserve((void **)&j->keys, &j->keys_cap, j->nkeys + 1, sizeof *j->keys) ||
            !ht_put(&j->index, k, j->nkeys + 1))
            return JR_STREAMS_MAX;
        j->keys[j->nkeys] = k;
        index = ++j->nkeys;
    }
    j->last_key = k;
    j->last_index = index; /* index + 1 into keys: index 0 is key 0 */
    return index;
}

void jr_push(core_dev_t *d, jr_op_t op, unsigned how, int pool, core_stream_t s1, core_stream_t s2, uint64_t size,
             uint64_t id)
{
    journal_t *j = &d->jr;
    if (!j->ring) {
        if (j->broken || !(j->ring = hostalloc_malloc(j->cap * sizeof *j->ring))) {
            j->broken = true; /* no host memory: no history, and the what-if says so */
            return;
        }
    }
    jr_rec_t *r = &j->ring[j->head & (j->cap - 1)];
    r->w = jr_pack(op, how, pool, key_index(j, s1), key_index(j, s2));
    r->size = size;
    r->id = id;
    j->head++;
}

/* ------------------------------------------------------------------------
 * The copy for the what-if
 * ---------------------------------------------------------------------- */

static int by_id(const void *a, const void *b)
{
    uint64_t x = ((const jr_live_t *)a)->id, y = ((const jr_live_t *)b)->id;
    return x < y ? -1 : x > y;
}

static int pool_of(uint64_t w)
{
    return (int)((w >> 16) & 0xFFFF);
}

/* Appends an allocation live when the window begins (*cap: out->live's). */
static bool live_add(jr_copy_t *out, size_t *cap, jr_live_t l)
{
    if (!vec_reserve((void **)&out->live, cap, out->nlive + 1, sizeof *out->live))
        return false;
    out->live[out->nlive++] = l;
    return true;
}

/*
 * The allocations live when the window [first, upto] begins: those made
 * before it (numbers up to `before`: below the window's first allocation,
 * and not after the failure, whose record carries the number the next
 * allocation would get) that were still live then.  Each was either freed
 * since (in the window, or after the failure by another thread: the
 * records after upto) or is live now.  Called with the device lock held.
 */
static bool gather_live(core_dev_t *d, uint64_t first, uint64_t upto, jr_copy_t *out)
{
    journal_t *j = &d->jr;
    uint64_t min_id = UINT64_MAX, fail_next = j->ring[upto & (j->cap - 1)].id;
    for (uint64_t i = first; i <= upto && min_id == UINT64_MAX; i++)
        if ((j->ring[i & (j->cap - 1)].w & 0xFF) == JR_ALLOC)
            min_id = j->ring[i & (j->cap - 1)].id;
    uint64_t before = (min_id != UINT64_MAX ? min_id : fail_next) - 1; /* numbers start at 1 */
    size_t cap = 0;
    for (size_t i = 0; d->map.buckets && i <= d->map.mask; i++)
        for (const block_t *b = d->map.buckets[i]; b; b = b->map_next) {
            uint64_t id = (b->id & ~CORE_ID_TAG) >> 6;
            if (id <= before && !live_add(out, &cap,
                                          (jr_live_t){.id = id,
                                                      .size = b->requested,
                                                      .pool = (int)jr_pool_field(b->pool->owner->id),
                                                      .key = key_lookup(j, b->stream),
                                                      .multi = b->nuses > 0}))
                return false;
        }
    for (uint64_t i = first; i < j->head; i++) {
        const jr_rec_t *r = &j->ring[i & (j->cap - 1)];
        if ((r->w & 0xFF) != JR_FREE || r->id > before)
            continue;
        jr_live_t l = {.id = r->id,
                       .size = r->size,
                       .pool = pool_of(r->w),
                       .key = (r->w >> 32) & 0xFFFF,
                       .multi = ((r->w >> 8) & JR_HOW_MULTI) != 0};
        if (!live_add(out, &cap, l))
            return false;
    }
    return true;
}

int jr_take(core_dev_t *d, uint64_t upto, jr_copy_t *out)
{
    memset(out, 0, sizeof *out);
    dev_lock(d);
    journal_t *j = &d->jr;
    if (!j->ring || j->broken || upto >= j->head || j->head - upto > j->cap ||
        (j->ring[upto & (j->cap - 1)].w & 0xFF) != JR_ALLOC_FAIL) {
        dev_unlock(d);
        return -1; /* no history, or the record asked for is gone */
    }
    uint64_t first = j->head > j->cap ? j->head - j->cap : 0, n = upto + 1 - first;
    out->rec = hostalloc_malloc(n * sizeof *out->rec);
    out->keys = hostalloc_malloc((j->nkeys + 1) * sizeof *out->keys);
    if (!out->rec || !out->keys || !gather_live(d, first, upto, out)) {
        dev_unlock(d);
        jr_copy_free(out);
        return -1;
    }
    out->orders = d->be.fence_order != NULL;
    for (uint64_t i = 0; i < n; i++)
        out->rec[i] = j->ring[(first + i) & (j->cap - 1)];
    out->nrec = n;
    /* the count when the window begins: the one before the first change
     * from there on (to the journal's head: another thread may have
     * changed it after the failure), else the current one */
    out->streams = d->streams;
    out->no_hand_out = d->no_hand_out;
    bool streams_found = false;
    for (uint64_t k = first; k < j->head; k++) {
        jr_rec_t r = j->ring[k & (j->cap - 1)];
        if ((r.w & 0xFF) == JR_STREAMS && !streams_found) {
            out->streams = (unsigned)r.id;
            streams_found = true;
        }
        if ((r.w & 0xFF) == JR_NO_HAND_OUTS)
            out->no_hand_out = false; /* stopped within the window: the replay stops there too */
    }
    out->first = first;
    out->keys[0] = 0;
    if (j->nkeys)
        memcpy(out->keys + 1, j->keys, j->nkeys * sizeof *j->keys);
    out->nkeys = j->nkeys + 1;
    dev_unlock(d);
    if (out->nlive)
        qsort(out->live, out->nlive, sizeof *out->live, by_id);
    return 0;
}

void jr_copy_free(jr_copy_t *c)
{
    hostalloc_free(c->rec);
    hostalloc_free(c->keys);
    hostalloc_free(c->live);
    memset(c, 0, sizeof *c);
}
