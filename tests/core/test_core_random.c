/*
 * Proves that the caching core keeps every invariant of core/types.h, and
 * never hands out memory that may still be in use, under seeded random
 * sequences of allocations and frees on several streams (sizes small, large
 * and oversize; frees now, fenced and after another stream; record_stream;
 * synchronisations, event completions, empty_cache, private pools, limits
 * and injected device failures), checked after every step by core_check and
 * by a shadow model of live blocks, segments and pending frees; with
 * expandable segments too, where the shadow follows the mapped pages and
 * proves that no page is unmapped before a device synchronisation followed
 * the last free of a block on it (unmapping does not wait); and that
 * core_check fails, naming the problem, when an invariant is broken on
 * purpose.  The seed is printed; CORE_SEED=<n> replays it, CORE_CONFIG=<name>
 * picks one configuration, CORE_STEPS=<n> changes the length.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>

#include "coretest.h"

#include "types.h" /* internals: block sizes, and the invariants to break */

/* ------------------------------------------------------------------------
 * The shadow model
 * ---------------------------------------------------------------------- */

#define MAX_LIVE 256
#define MAX_SEGS 4096
#define MAX_QUARANTINE 4096
#define MAX_POOLS 4

/* A block's bytes as the device has them: through a shared page's second
 * mapping (expandable_share_pages) they are the first mapping's bytes. */
typedef struct part_s {
    uintptr_t addr;
    size_t size;
} part_t;
#define MAX_PARTS 3 /* a shared tail page, new pages, a shared head page */

typedef struct live_s {
    uintptr_t addr;
    size_t size;  /* requested */
    size_t block; /* the block's bytes */
    core_stream_t stream;
    bool used_elsewhere; /* record_stream on another stream */
    part_t ph[MAX_PARTS]; /* its memory (phys_parts) */
    size_t nph;
    core_stream_t key; /* the block's stream key (0 for preallocate's chunk) */
} live_t;

/* A segment, or a 2 MiB granule of an expandable segment's mapped pages. */
typedef struct shadow_seg_s {
    uintptr_t addr;
    size_t size;
    core_stream_t stream;
    int pool_id;
} shadow_seg_t;

#define GRANULE ((size_t)2 << 20)

/* A freed block whose pages must not be unmapped before the next device
 * synchronisation (or the program's, core_synchronized), or, when it was
 * freed behind a fence or event, before an event recorded after the free
 * completed. */
typedef struct unmap_guard_s {
    uintptr_t addr;
    size_t size;
    uint64_t n_sync;
    uint64_t epoch;
    uint64_t last_event; /* fenced or after-stream frees: the last event at the free; 0: stream-ordered */
    int step;
    core_stream_t stream; /* stream-ordered frees: the stream whose later work is ordered after them */
} unmap_guard_t;
#define MAX_GUARDS 4096

/* A block freed while work may still use it: unsafe to hand out until an
 * event recorded after the free completed, the device was synchronised
 * (backend device_sync), the program said it synchronised, or
 * (reuse:ordered) the device was ordered after a fence recorded after the
 * free (every stream then waits for all work queued before it). */
typedef struct quarantine_s {
    uintptr_t addr;
    size_t size;
    uint64_t last_event; /* the backend's last event handle at the free */
    uint64_t n_sync;     /* the backend's device_sync count at the free */
    uint64_t epoch;      /* core_synchronized calls at the free */
} quarantine_t;

typedef struct run_s {
    fx_t f;
    const char *cfg;
    unsigned nstreams;
    uint64_t seed, rng;
    int step;
    live_t live[MAX_LIVE];
    size_t nlive;
    shadow_seg_t segs[MAX_SEGS];
    size_t nsegs;
    quarantine_t q[MAX_QUARANTINE];
    size_t nq;
    uint64_t epoch;
    int pools[MAX_POOLS]; /* live private pool ids */
    size_t npools;
    int routed; /* the pool this thread routes to (0: defaults) */
    uintptr_t freed_recently[16];
    size_t nplain; /* segments that are not expandable (the rest of segs are granules) */
    unmap_guard_t guard[MAX_GUARDS];
    size_t nguard;
    bool bad_unmap; /* the observer saw an unsafe unmap: reported by shadow_agree */
    char bad_unmap_why[256];
    /* totals, for the summary */
    uint64_t n_alloc, n_oom, n_free;
} run_t;

#define RFAIL(r, ...)                                                                                                  \
    do {                                                                                                               \
        print_error("config %s, seed %" PRIu64 ", step %d (replay: CORE_SEED=%" PRIu64 "): ", (r)->cfg, (r)->seed,     \
                    (r)->step, (r)->seed);                                                                             \
        fail_msg(__VA_ARGS__);                                                                                         \
    } while (0)

#define RCHECK(r)                                                                                                      \
    do {                                                                                                               \
        char why_[512];                                                                                                \
        if (core_check((r)->f.d, why_, sizeof why_) != 0)                                                              \
            RFAIL(r, "core_check: %s", why_);                                                                          \
    } while (0)

static uint64_t rnd(run_t *r)
{
    /* splitmix64 */
    uint64_t z = (r->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t below(run_t *r, uint64_t n)
{
    return n ? rnd(r) % n : 0;
}

static void guard_prune(run_t *r)
{
    for (size_t i = 0; i < r->nguard;)
        if (r->f.m.n_sync > r->guard[i].n_sync || r->epoch > r->guard[i].epoch ||
            (r->guard[i].last_event && r->f.m.completed >= r->guard[i].last_event))
            r->guard[i] = r->guard[--r->nguard];
        else
            i++;
}

/* Observer: the segments the device holds, by pool and stream, and the
 * mapped granules of expandable segments. */
static void shadow_observe(void *ctx, const core_event_t *e)
{
    run_t *r = ctx;
    if (e->kind == CORE_EV_SEGMENT_MAP) {
        for (uintptr_t a = e->addr; a < e->addr + e->size && r->nsegs < MAX_SEGS; a += GRANULE)
            r->segs[r->nsegs++] = (shadow_seg_t){a, GRANULE, e->stream, e->pool_id};
    } else if (e->kind == CORE_EV_SEGMENT_UNMAP) {
        guard_prune(r);
        for (size_t i = 0; i < r->nguard && !r->bad_unmap; i++)
            if (r->guard[i].addr < e->addr + e->size && e->addr < r->guard[i].addr + r->guard[i].size) {
                r->bad_unmap = true;
                snprintf(r->bad_unmap_why, sizeof r->bad_unmap_why,
                         "pages [0x%" PRIxPTR ", +%zu) unmapped with no device synchronisation since the free of "
                         "0x%" PRIxPTR " (+%zu) at step %d: queued work may still use them",
                         (uintptr_t)e->addr, e->size, r->guard[i].addr, r->guard[i].size, r->guard[i].step);
            }
        for (uintptr_t a = e->addr; a < e->addr + e->size; a += GRANULE) {
            size_t i = r->nplain;
            while (i < r->nsegs && r->segs[i].addr != a)
                i++;
            if (i == r->nsegs) {
                r->bad_unmap = true;
                snprintf(r->bad_unmap_why, sizeof r->bad_unmap_why, "granule 0x%" PRIxPTR " unmapped but not mapped",
                         a);
                return;
            }
            r->segs[i] = r->segs[--r->nsegs];
        }
    } else if (e->kind == CORE_EV_PIECE_IN && mem_backend_resolve(&r->f.m, e->addr) == e->addr) {
        /* a shared page's piece back where it lies: its second mapping is
         * about to be unmapped, which does not wait for queued work either */
        guard_prune(r);
        for (size_t i = 0; i < r->nguard && !r->bad_unmap; i++)
            if (r->guard[i].addr < e->addr + e->size && e->addr < r->guard[i].addr + r->guard[i].size) {
                r->bad_unmap = true;
                snprintf(r->bad_unmap_why, sizeof r->bad_unmap_why,
                         "the second mapping of [0x%" PRIxPTR ", +%zu) unmapped with no device synchronisation "
                         "since the free at step %d of a block on it: queued work may still use it",
                         (uintptr_t)e->addr, e->size, r->guard[i].step);
            }
    } else if (e->kind == CORE_EV_SEGMENT_ALLOC) {
        if (r->nsegs == MAX_SEGS)
            return; /* reported by shadow_segments_agree */
        /* plain segments first, granules after */
        if (r->nsegs > r->nplain)
            r->segs[r->nsegs] = r->segs[r->nplain];
        r->segs[r->nplain] = (shadow_seg_t){e->addr, e->size, e->stream, e->pool_id};
        r->nplain++;
        r->nsegs++;
    } else if (e->kind == CORE_EV_SEGMENT_FREE) {
        for (size_t i = 0; i < r->nplain; i++)
            if (r->segs[i].addr == e->addr && r->segs[i].size == e->size) {
                r->segs[i] = r->segs[--r->nplain];
                r->segs[r->nplain] = r->segs[--r->nsegs];
                return;
            }
        r->segs[0].size = 0; /* a segment freed twice or never allocated: fails the next check */
    }
}

/* Whether the granule at a is a second mapping of a shared page. */
static bool alias_granule(const run_t *r, uintptr_t a)
{
    return mem_backend_resolve((mem_backend_t *)&r->f.m, a) != a;
}

/* The memory of [p, p+n): the bytes of the mappings the device resolves
 * its addresses to, granule by granule, merged where they follow each
 * other; the count, or MAX_PARTS + 1 when more. */
static size_t phys_parts(run_t *r, uintptr_t p, size_t n, part_t *out)
{
    size_t k = 0;
    for (uintptr_t a = p; a < p + n;) {
        uintptr_t next = (a / GRANULE + 1) * GRANULE;
        if (next > p + n)
            next = p + n;
        uintptr_t ph = mem_backend_resolve(&r->f.m, a);
        if (k && out[k - 1].addr + out[k - 1].size == ph) {
            out[k - 1].size += next - a;
        } else {
            if (k == MAX_PARTS)
                return MAX_PARTS + 1;
            out[k++] = (part_t){ph, next - a};
        }
        a = next;
    }
    return k;
}

static const shadow_seg_t *seg_of(const run_t *r, uintptr_t addr)
{
    for (size_t i = 0; i < r->nsegs; i++)
        if (addr >= r->segs[i].addr && addr - r->segs[i].addr < r->segs[i].size)
            return &r->segs[i];
    return NULL;
}

/* [p, p+n) lies in one plain segment, or in mapped granules all of one
 * stream and pool (a shared page's second mapping counting as its
 * segment's: `own`, the block's): that segment or first granule, else
 * NULL. */
static const shadow_seg_t *covered(const run_t *r, uintptr_t p, size_t n, const shadow_seg_t *own)
{
    const shadow_seg_t *first = seg_of(r, p);
    if (first && first < r->segs + r->nplain)
        return p + n <= first->addr + first->size ? first : NULL;
    first = NULL;
    for (uintptr_t a = p / GRANULE * GRANULE; a < p + n; a += GRANULE) {
        if (alias_granule(r, a))
            continue;
        const shadow_seg_t *g = seg_of(r, a);
        if (!first)
            first = g;
        if (!g || g < r->segs + r->nplain || g->stream != first->stream || g->pool_id != first->pool_id)
            return NULL;
    }
    return first ? first : own;
}

static bool quarantine_safe(const run_t *r, const quarantine_t *q)
{
    return r->f.m.completed > q->last_event || r->f.m.n_sync > q->n_sync || r->epoch > q->epoch ||
           r->f.m.ordered > q->last_event;
}

static bool overlaps(uintptr_t a, size_t an, uintptr_t b, size_t bn)
{
    return a < b + bn && b < a + an;
}

/* Counters, backend and shadow agree. */
static void shadow_agree(run_t *r)
{
    RCHECK(r);
    core_stats_t s = fx_stats(&r->f);
    int64_t bytes = 0, requested = 0;
    for (size_t i = 0; i < r->nlive; i++) {
        bytes += (int64_t)r->live[i].block;
        requested += (int64_t)r->live[i].size;
    }
    if (s.allocation[CORE_POOL_ALL].current != (int64_t)r->nlive || s.allocated_bytes[CORE_POOL_ALL].current != bytes ||
        s.requested_bytes[CORE_POOL_ALL].current != requested)
        RFAIL(r, "stats say %lld allocations, %lld bytes, %lld requested; the program holds %zu, %lld, %lld",
              (long long)s.allocation[CORE_POOL_ALL].current, (long long)s.allocated_bytes[CORE_POOL_ALL].current,
              (long long)s.requested_bytes[CORE_POOL_ALL].current, r->nlive, (long long)bytes, (long long)requested);
    if (r->bad_unmap)
        RFAIL(r, "%s", r->bad_unmap_why);
    if (r->f.m.n_bad_unmap)
        RFAIL(r, "the core unmapped pages the device had not mapped");
    if (mem_backend_mapped(&r->f.m) != (r->nsegs - r->nplain) * GRANULE)
        RFAIL(r, "the device maps %zu bytes; map events say %zu", mem_backend_mapped(&r->f.m),
              (r->nsegs - r->nplain) * GRANULE);
    if ((size_t)s.reserved_bytes[CORE_POOL_ALL].current != r->f.m.used ||
        (size_t)s.segment[CORE_POOL_ALL].current != r->f.m.nsegs || r->f.m.nsegs != r->nplain)
        RFAIL(r, "reserved %lld bytes in %lld segments; the device holds %zu bytes in %zu; events say %zu segments",
              (long long)s.reserved_bytes[CORE_POOL_ALL].current, (long long)s.segment[CORE_POOL_ALL].current,
              r->f.m.used, r->f.m.nsegs, r->nsegs);
    if (r->f.m.n_bad_free)
        RFAIL(r, "the core freed a segment the device does not know");
    if ((size_t)s.reserved_bytes[CORE_POOL_ALL].current > r->f.d->allowed)
        RFAIL(r, "reserved %lld bytes, more than the %zu allowed", (long long)s.reserved_bytes[CORE_POOL_ALL].current,
              r->f.d->allowed);
}

/* ------------------------------------------------------------------------
 * Operations
 * ---------------------------------------------------------------------- */

static size_t random_size(run_t *r)
{
    uint64_t k = below(r, 100);
    if (k < 65) /* small: 0 .. 1 MiB, log-uniform */
        return (size_t)below(r, ((uint64_t)1 << below(r, 21)) + 1);
    if (k < 87) /* 1 - 10 MiB */
        return MiB + (size_t)below(r, 9 * MiB);
    if (k < 97) /* 10 - 40 MiB */
        return 10 * MiB + (size_t)below(r, 30 * MiB);
    return 40 * MiB + (size_t)below(r, 80 * MiB); /* oversize where max_split_size is set */
}

static int expected_pool(const run_t *r)
{
    for (size_t i = 0; i < r->npools; i++)
        if (r->pools[i] == r->routed)
            return r->routed;
    return 0; /* destroyed or none: the defaults */
}

static void op_malloc(run_t *r)
{
    if (r->nlive == MAX_LIVE)
        return;
    size_t size = random_size(r);
    core_stream_t stream = below(r, r->nstreams);
    int fail_before = r->f.m.fail_allocs;
    core_oom_t oom;
    uintptr_t p = core_malloc(r->f.d, size, stream, &oom);
    if (!p) {
        r->n_oom++;
        RCHECK(r);
        if (oom.requested != size || oom.rounded < size || oom.alloc_size < oom.rounded)
            RFAIL(r, "OOM report: requested %zu rounded %zu alloc_size %zu for %zu", oom.requested, oom.rounded,
                  oom.alloc_size, size);
        if (oom.backend_error == CORE_EFAIL && !(fail_before && r->f.m.fail_code == CORE_EFAIL))
            RFAIL(r, "CORE_EFAIL reported though the device never failed that way");
        if (!fail_before && !oom.limit_hit && oom.device_free >= oom.alloc_size)
            RFAIL(r, "out of memory with %zu bytes free on the device for a %zu-byte segment", oom.device_free,
                  oom.alloc_size);
        if (oom.limit_hit && oom.reserved + oom.alloc_size <= oom.limit)
            RFAIL(r, "limit hit, but %zu reserved + %zu fits under %zu", oom.reserved, oom.alloc_size, oom.limit);
        if (oom.allocated > oom.reserved || oom.largest_free > oom.reserved)
            RFAIL(r, "OOM report: allocated %zu, largest free %zu, reserved %zu", oom.allocated, oom.largest_free,
                  oom.reserved);
        return;
    }
    r->n_alloc++;
    block_t *b = map_find(r->f.d, p);
    if (!b || b->state != BLOCK_ALLOCATED || b->size < size || b->requested != size)
        RFAIL(r, "malloc(%zu) gave 0x%" PRIxPTR ", not an allocated block of that size", size, p);
    shadow_seg_t own = {b->seg->addr, b->seg->size, b->seg->stream, b->seg->pool->owner->id};
    const shadow_seg_t *sg = covered(r, p, b->size, &own);
    if (!sg)
        RFAIL(r, "0x%" PRIxPTR " (+%zu) is not inside a segment or mapped pages the device gave", p, b->size);
    /* preallocate's default pool carves every stream's requests from one
     * chunk: its blocks carry stream key 0 */
    core_stream_t want = r->f.d->conf.strategy == CONF_STRATEGY_PREALLOCATE && expected_pool(r) == 0 ? 0 : stream;
    if (sg->stream != want)
        RFAIL(r, "malloc on stream %lu got a block of stream %lu's segment", (unsigned long)want,
              (unsigned long)sg->stream);
    if (sg->pool_id != expected_pool(r))
        RFAIL(r, "malloc routed to pool %d got a block of pool %d", expected_pool(r), sg->pool_id);
    live_t nl = {p, size, b->size, stream, false, {{0}}, 0, want};
    nl.nph = phys_parts(r, p, b->size, nl.ph);
    if (nl.nph > MAX_PARTS)
        RFAIL(r, "0x%" PRIxPTR " (+%zu) reaches more than %d runs of memory", p, b->size, MAX_PARTS);
    /* the checks below are on memory: a shared page's bytes are the same
     * bytes through either mapping */
    for (size_t i = 0; i < r->nlive; i++)
        for (size_t x = 0; x < nl.nph; x++)
            for (size_t y = 0; y < r->live[i].nph; y++)
                if (overlaps(nl.ph[x].addr, nl.ph[x].size, r->live[i].ph[y].addr, r->live[i].ph[y].size))
                    RFAIL(r, "0x%" PRIxPTR " (+%zu) overlaps the live 0x%" PRIxPTR " (+%zu) (memory at 0x%" PRIxPTR ")",
                          p, b->size, r->live[i].addr, r->live[i].block, nl.ph[x].addr);
    for (size_t i = 0; i < r->nq;) {
        if (quarantine_safe(r, &r->q[i])) {
            r->q[i] = r->q[--r->nq];
            continue;
        }
        for (size_t x = 0; x < nl.nph; x++)
            if (overlaps(nl.ph[x].addr, nl.ph[x].size, r->q[i].addr, r->q[i].size))
                RFAIL(r,
                      "0x%" PRIxPTR " (+%zu) reuses 0x%" PRIxPTR " (+%zu) before its free was safe (freed after "
                      "event %" PRIu64 ", completed %" PRIu64 ", the device ordered after %" PRIu64 ")",
                      p, b->size, r->q[i].addr, r->q[i].size, r->q[i].last_event, r->f.m.completed, r->f.m.ordered);
        i++;
    }
    /* memory freed in stream order since the last synchronisation only on
     * that stream (its later work is ordered after the old owner's), the
     * same memory reached through a shared page's other mapping included;
     * a fenced free's once its fence completed or the device was ordered
     * after it (the quarantine above) */
    guard_prune(r);
    for (size_t x = 0; x < nl.nph; x++)
        for (size_t i = 0; i < r->nguard; i++) {
            const unmap_guard_t *g = &r->guard[i];
            bool after = g->last_event ? r->f.m.ordered >= g->last_event : g->stream == want;
            if (!after && overlaps(nl.ph[x].addr, nl.ph[x].size, g->addr, g->size))
                RFAIL(r,
                      "0x%" PRIxPTR " (+%zu) on stream %lu reaches memory (0x%" PRIxPTR ") freed at step %d on "
                      "stream %lu with no synchronisation since: its queued work may still use it",
                      p, b->size, (unsigned long)want, nl.ph[x].addr, g->step, (unsigned long)g->stream);
        }
    uintptr_t base = 0;
    size_t got = 0;
    core_stream_t st = 99;
    if (!core_lookup(r->f.d, size > 1 ? p + size - 1 : p, &base, &got, &st) || base != p || got != size || st != want)
        RFAIL(r, "core_lookup of 0x%" PRIxPTR " (size %zu) fails", p, size);
    r->live[r->nlive++] = nl;
}

static void op_free(run_t *r)
{
    if (!r->nlive)
        return;
    size_t i = below(r, r->nlive);
    live_t l = r->live[i];
    core_free_t how = (core_free_t)below(r, 3);
    core_stream_t stream = how == CORE_FREE_AFTER_STREAM ? below(r, r->nstreams) : 0;
    if (how == CORE_FREE_NOW && !below(r, 2))
        stream = l.stream;
    /* key 0 is not a stream (core.h): preallocate's blocks carry it, so a
     * free ordered on "stream 0" would read as ordered on the block's own */
    if (how == CORE_FREE_AFTER_STREAM && stream == 0 && r->f.d->conf.strategy == CONF_STRATEGY_PREALLOCATE)
        stream = r->nstreams > 1 ? 1 + below(r, r->nstreams - 1) : 1;
    bool safe_now =
        !l.used_elsewhere && (how == CORE_FREE_NOW || (how == CORE_FREE_AFTER_STREAM && stream == l.stream));
    uint64_t last_event = r->f.m.next_event, n_sync = r->f.m.n_sync;
    r->live[i] = r->live[--r->nlive];
    for (size_t x = 0; x < l.nph && r->nguard < MAX_GUARDS; x++)
        r->guard[r->nguard++] = (unmap_guard_t){l.ph[x].addr, l.ph[x].size, r->f.m.n_sync, r->epoch,
                                                safe_now ? 0 : last_event + 1, r->step, l.key};
    int rc = core_free(r->f.d, l.addr, how, stream);
    if (rc != CORE_FREED)
        RFAIL(r, "core_free(0x%" PRIxPTR ") of a live allocation returned %d", l.addr, rc);
    r->n_free++;
    for (size_t x = 0; !safe_now && x < l.nph && r->nq < MAX_QUARANTINE; x++)
        r->q[r->nq++] = (quarantine_t){l.ph[x].addr, l.ph[x].size, last_event, n_sync, r->epoch};
    r->freed_recently[below(r, 16)] = l.addr;
}

static void op_bad_free(run_t *r)
{
    uintptr_t p;
    switch (below(r, 3)) {
    case 0: /* foreign */
        p = 0x1000 + 512 * below(r, 1000);
        break;
    case 1: /* interior */
        if (!r->nlive || r->live[0].block < 1024)
            return;
        p = r->live[0].addr + 512;
        break;
    default: /* double free, unless the address was handed out again */
        p = r->freed_recently[below(r, 16)];
        for (size_t i = 0; i < r->nlive; i++)
            if (r->live[i].addr == p)
                return;
        break;
    }
    if (!p)
        return;
    core_stats_t before = fx_stats(&r->f);
    int rc = core_free(r->f.d, p, (core_free_t)below(r, 3), below(r, r->nstreams));
    core_stats_t after = fx_stats(&r->f);
    if (rc != CORE_NOT_MINE || memcmp(&before, &after, sizeof before))
        RFAIL(r, "core_free(0x%" PRIxPTR ") of no live allocation returned %d or changed the stats", p, rc);
}

static void op_record_stream(run_t *r)
{
    if (!r->nlive)
        return;
    live_t *l = &r->live[below(r, r->nlive)];
    core_stream_t s = below(r, r->nstreams);
    if (s == 0 && r->f.d->conf.strategy == CONF_STRATEGY_PREALLOCATE)
        s = 1; /* key 0 is not a stream, and preallocate's blocks carry it */
    if (core_record_stream(r->f.d, l->addr, s) != 0)
        RFAIL(r, "core_record_stream failed");
    if (s != l->stream)
        l->used_elsewhere = true;
}

static void op_pool(run_t *r)
{
    switch (below(r, 4)) {
    case 0:
        if (r->npools < MAX_POOLS) {
            int id = core_pool_create(r->f.d);
            if (id <= 0)
                RFAIL(r, "core_pool_create gave %d", id);
            r->pools[r->npools++] = id;
        }
        break;
    case 1:
    case 2: {
        int id = r->npools && below(r, 3) ? r->pools[below(r, r->npools)] : 0;
        if (core_pool_use(r->f.d, id) != 0)
            RFAIL(r, "core_pool_use(%d) of a live pool failed", id);
        r->routed = id;
        break;
    }
    default:
        if (r->npools) {
            size_t i = below(r, r->npools);
            if (core_pool_destroy(r->f.d, r->pools[i]) != 0)
                RFAIL(r, "core_pool_destroy(%d) failed", r->pools[i]);
            r->pools[i] = r->pools[--r->npools];
        }
        break;
    }
}

static void op_misc(run_t *r)
{
    switch (below(r, 10)) {
    case 0:
    case 1:
        mem_backend_complete_all(&r->f.m);
        break;
    case 2:
        r->f.m.auto_complete = !r->f.m.auto_complete;
        break;
    case 3:
        core_synchronized(r->f.d);
        r->epoch++;
        break;
    case 4: {
        int pool = below(r, 3) ? -1 : r->npools && below(r, 2) ? r->pools[below(r, r->npools)] : 0;
        core_empty_cache(r->f.d, pool);
        break;
    }
    case 5:
        r->f.m.fail_allocs = 1 + (int)below(r, 2);
        r->f.m.fail_code = below(r, 3) ? CORE_ENOMEM : CORE_EFAIL;
        r->f.m.fail_maps = (int)below(r, 3); /* half mapped, then refused */
        break;
    case 6:
        if (below(r, 2))
            core_stats_reset_peaks(r->f.d);
        else
            core_stats_reset_accumulated(r->f.d);
        break;
    case 7: {
        core_usage_t u;
        core_usage(r->f.d, &u);
        core_stats_t s = fx_stats(&r->f);
        if (u.allocated != (size_t)s.allocated_bytes[CORE_POOL_ALL].current ||
            u.reserved != (size_t)s.reserved_bytes[CORE_POOL_ALL].current || u.cached_free > u.reserved ||
            u.largest_free > u.cached_free || u.pending > u.reserved)
            RFAIL(r, "core_usage: allocated %zu reserved %zu free %zu largest %zu pending %zu", u.allocated, u.reserved,
                  u.cached_free, u.largest_free, u.pending);
        break;
    }
    case 8: /* the next synchronisations fail (a capture began on another thread) */
        if (below(r, 2))
            r->f.m.fail_syncs = 1 + (int)below(r, 3);
        else
            op_bad_free(r);
        break;
    default:
        op_bad_free(r);
        break;
    }
}

/* ------------------------------------------------------------------------
 * Runs
 * ---------------------------------------------------------------------- */

typedef struct cfg_s {
    const char *name;
    const char *conf;
    size_t capacity;
    unsigned nstreams; /* stream keys 0 .. nstreams-1 */
    int orders;        /* the backend orders the device after fences (reuse:ordered hands out): 1 with the
                        * program's streams counted as nstreams, 2 with none */
} cfg_t;

static const cfg_t configs[] = {
    {"default", NULL, GiB, 4, 0},
    {"max_split", "max_split_size_mb:40,max_non_split_rounding_mb:24", GiB, 4, 0},
    {"roundup", "roundup_power2_divisions:[1:4,4:2,>:8]", GiB, 4, 0},
    {"roundup_max_split", "roundup_power2_divisions:2,max_split_size_mb:64", GiB, 4, 0},
    /* one chunk serves every stream of the default pool; private pools grow */
    {"preallocate", "strategy:preallocate,fraction:0.3", GiB, 4, 0},
    {"preallocate_max_split", "strategy:preallocate,fraction:0.25,max_split_size_mb:40", GiB, 1, 0},
    {"gc", "per_process_memory_fraction:0.6,garbage_collection_threshold:0.4", GiB, 4, 0},
    {"limit", "limit_mb:400", 2 * GiB, 4, 0},
    {"expandable", "expandable_segments:true", GiB, 4, 0},
    {"expandable_page20", "expandable_segments:true,expandable_page_mb:20", GiB, 4, 0},
    {"expandable_limit_gc",
     "expandable_segments:true,per_process_memory_fraction:0.6,garbage_collection_threshold:0.4,limit_mb:500", GiB, 4, 0},
    {"expandable_roundup", "expandable_segments:true,roundup_power2_divisions:4,max_split_size_mb:40", GiB, 2, 0},
    /* hand-outs ahead of fences: a share at hits, the oldest fences first */
    {"ordered", "reuse:ordered", GiB, 4, 1},
    /* ... and any at a hit, with no stream of the program's own */
    {"ordered_no_streams", "reuse:ordered", GiB, 4, 2},
    {"ordered_expandable", "reuse:ordered,expandable_segments:true", GiB, 4, 1},
    /* shared pages: the tails and heads of pages lent to requests, of
     * other streams' segments when idle */
    {"expandable_share", "expandable_segments:true,expandable_share_pages:true", GiB, 4, 0},
    {"expandable_share_tight", "expandable_segments:true,expandable_share_pages:true,limit_mb:300", GiB, 3, 0},
    {"ordered_expandable_share", "reuse:ordered,expandable_segments:true,expandable_share_pages:true", GiB, 4, 1},
};
#define NCONFIGS (sizeof configs / sizeof configs[0])

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 0) : dflt;
}

static void run_one(const cfg_t *cfg, uint64_t seed, int steps)
{
    run_t *r = test_calloc(1, sizeof *r);
    r->cfg = cfg->name;
    r->nstreams = cfg->nstreams;
    r->seed = r->rng = seed;
    print_message("core_random: config %s, seed %" PRIu64 ", %d steps\n", cfg->name, seed, steps);
    fx_open_orders(&r->f, cfg->capacity, cfg->conf, cfg->orders != 0);
    if (cfg->orders)
        core_set_streams(r->f.d, cfg->orders == 1 ? cfg->nstreams : 0);
    core_set_observer(r->f.d, shadow_observe, r);
    r->f.m.auto_complete = below(r, 2);
    int grow = 45; /* percent of steps that allocate; the rest of 85 free */
    for (r->step = 0; r->step < steps; r->step++) {
        if (r->step % 400 == 0) /* phases: shrink, balanced, grow */
            grow = 25 + 20 * (int)below(r, 3);
        uint64_t k = below(r, 100);
        if (k < (uint64_t)grow)
            op_malloc(r);
        else if (k < 85)
            op_free(r);
        else if (k < 90)
            op_record_stream(r);
        else if (k < 92)
            op_pool(r);
        else
            op_misc(r);
        shadow_agree(r);
    }
    /* half the runs end with the device destroyed as it is (a process that
     * exits): everything mapped goes back, shared pages' second mappings
     * too (fx_close) */
    if (below(r, 2)) {
        print_message("core_random:   destroyed with %zu blocks live\n", r->nlive);
        fx_close(&r->f);
        test_free(r);
        return;
    }
    /* wind down: everything freed and released, the device back to empty */
    r->f.m.fail_allocs = 0;
    r->f.m.fail_maps = 0;
    r->f.m.fail_syncs = 0;
    while (r->nlive) {
        op_free(r);
        shadow_agree(r);
    }
    while (r->npools) {
        core_pool_destroy(r->f.d, r->pools[--r->npools]);
        shadow_agree(r);
    }
    core_synchronized(r->f.d);
    r->epoch++;
    shadow_agree(r);
    core_empty_cache(r->f.d, -1);
    shadow_agree(r);
    if (r->f.m.used || r->nsegs || r->f.m.nalias)
        RFAIL(r, "after freeing everything the device still holds %zu bytes (%zu pages mapped twice)", r->f.m.used,
              r->f.m.nalias);
    if (r->f.m.n_bad_alias)
        RFAIL(r, "the core mapped a second time pages the device had not mapped, or onto mapped addresses");
    core_stats_t s = fx_stats(&r->f);
    print_message("core_random:   %" PRIu64 " allocations, %" PRIu64 " OOMs, %" PRIu64 " frees, %" PRIu64
                  " segments, %" PRIu64 " fence waits, %" PRIu64 " retries\n",
                  r->n_alloc, r->n_oom, r->n_free, r->f.m.n_alloc, s.num_fence_waits, s.num_alloc_retries);
    fx_close(&r->f);
    test_free(r);
}

static void run_config(const cfg_t *cfg)
{
    const char *only = getenv("CORE_CONFIG");
    if (only && *only && strcmp(only, cfg->name)) {
        print_message("core_random: config %s skipped (CORE_CONFIG=%s)\n", cfg->name, only);
        return;
    }
    int steps = (int)env_u64("CORE_STEPS", 5000);
    uint64_t seed = env_u64("CORE_SEED", 0);
    if (seed) {
        run_one(cfg, seed, steps);
        return;
    }
    for (uint64_t i = 1; i <= 6; i++)
        run_one(cfg, 0x5eed0000u + i * 7919u + (uint64_t)(cfg - configs) * 104729u, steps);
}

static void test_random_default(void **state)
{
    (void)state;
    run_config(&configs[0]);
}

static void test_random_max_split(void **state)
{
    (void)state;
    run_config(&configs[1]);
}

static void test_random_roundup(void **state)
{
    (void)state;
    run_config(&configs[2]);
}

static void test_random_roundup_max_split(void **state)
{
    (void)state;
    run_config(&configs[3]);
}

static void test_random_preallocate(void **state)
{
    (void)state;
    run_config(&configs[4]);
}

static void test_random_preallocate_max_split(void **state)
{
    (void)state;
    run_config(&configs[5]);
}

static void test_random_gc(void **state)
{
    (void)state;
    run_config(&configs[6]);
}

static void test_random_limit(void **state)
{
    (void)state;
    run_config(&configs[7]);
}

static void test_random_expandable(void **state)
{
    (void)state;
    run_config(&configs[8]);
}

static void test_random_expandable_page20(void **state)
{
    (void)state;
    run_config(&configs[9]);
}

static void test_random_expandable_limit_gc(void **state)
{
    (void)state;
    run_config(&configs[10]);
}

static void test_random_expandable_roundup(void **state)
{
    (void)state;
    run_config(&configs[11]);
}

static void test_random_ordered(void **state)
{
    (void)state;
    run_config(&configs[12]);
}

static void test_random_ordered_no_streams(void **state)
{
    (void)state;
    run_config(&configs[13]);
}

static void test_random_ordered_expandable(void **state)
{
    (void)state;
    run_config(&configs[14]);
}

static void test_random_expandable_share(void **state)
{
    (void)state;
    run_config(&configs[15]);
}

static void test_random_expandable_share_tight(void **state)
{
    (void)state;
    run_config(&configs[16]);
}

static void test_random_ordered_expandable_share(void **state)
{
    (void)state;
    run_config(&configs[17]);
}

/* ------------------------------------------------------------------------
 * The checker can fail
 * ---------------------------------------------------------------------- */

/* core_check must return -1 with a message containing `words`. */
static void expect_broken(core_dev_t *d, const char *what, const char *words)
{
    char why[512] = "";
    if (core_check(d, why, sizeof why) != -1)
        fail_msg("%s: core_check did not notice", what);
    if (!strstr(why, words))
        fail_msg("%s: core_check said \"%s\", which does not name the problem (%s)", what, why, words);
}

/* A cache with an allocated block between two free ones in one segment,
 * a pending block, and a whole free segment. */
static void broken_setup(fx_t *f, uintptr_t *a, uintptr_t *b)
{
    fx_open(f, GiB, NULL);
    f->m.auto_complete = false;
    uintptr_t x = fx_alloc(f, 4 * KiB, 1);
    *a = fx_alloc(f, 4 * KiB, 1); /* allocated, after the free x */
    *b = fx_alloc(f, 8 * KiB, 1);
    uintptr_t w = fx_alloc(f, 12 * MiB, 2);
    fx_free(f, w, CORE_FREE_NOW, 2);
    fx_free(f, x, CORE_FREE_NOW, 1);
    fx_free(f, *b, CORE_FREE_FENCED, 0); /* pending, in the open batch */
}

static void test_check_catches_free_block_size(void **state)
{
    (void)state;
    fx_t f;
    uintptr_t a, b;
    broken_setup(&f, &a, &b);
    block_t *x = f.d->segs->next->first; /* the small segment's first block: free */
    assert_int_equal(x->state, BLOCK_FREE);
    x->size += 512;
    expect_broken(f.d, "a free block's size changed", "not followed by its address neighbour");
    x->size -= 512;
    CHECK(f.d);
    block_t *last = x;
    while (last->next)
        last = last->next;
    assert_int_equal(last->state, BLOCK_FREE);
    last->size -= 512;
    expect_broken(f.d, "the last free block shrunk", "blocks sum to");
    last->size += 512;
    CHECK(f.d);
    x->size += 100;
    expect_broken(f.d, "a size not a multiple of 512", "not followed");
    x->size -= 100;
    CHECK(f.d);
    fx_close(&f);
}

static void test_check_catches_tree(void **state)
{
    (void)state;
    fx_t f;
    uintptr_t a, b;
    broken_setup(&f, &a, &b);
    block_t *x = f.d->segs->next->first;
    pool_tree_remove(x->pool, x);
    expect_broken(f.d, "a free block missing from its tree", "free bins hold");
    pool_tree_insert(x->pool, x);
    CHECK(f.d);
    /* an allocated block put in a tree */
    block_t *ab = map_find(f.d, a);
    assert_non_null(ab);
    pool_tree_insert(ab->pool, ab);
    expect_broken(f.d, "an allocated block in a free tree", "in state");
    pool_tree_remove(ab->pool, ab);
    CHECK(f.d);
    /* a free block in another pool's tree */
    block_t *w = f.d->segs->first; /* the whole free 12 MiB segment, large pool */
    assert_int_equal(w->state, BLOCK_FREE);
    pool_bins_t *own = w->seg->bins, *small = f.d->defaults.small.bins;
    assert_non_null(small);
    pool_tree_remove(w->pool, w);
    w->seg->bins = small; /* pool_tree_insert puts a block in its segment's bins */
    pool_tree_insert(w->pool, w);
    w->seg->bins = own;
    expect_broken(f.d, "a block in the wrong pool's tree", "another pool");
    w->seg->bins = small;
    pool_tree_remove(w->pool, w);
    w->seg->bins = own;
    pool_tree_insert(w->pool, w);
    CHECK(f.d);
    fx_close(&f);
}

/* The free bins' own invariants: a block in the tree of its size class, a
 * class's bit set exactly when its tree holds blocks, the word summary, and
 * the segments that point at the bins counted. */
static void test_check_catches_bins(void **state)
{
    (void)state;
    fx_t f;
    uintptr_t a, b;
    broken_setup(&f, &a, &b);
    block_t *x = f.d->segs->next->first; /* free, small pool */
    pool_bins_t *e = x->seg->bins;
    unsigned c = pool_bin_of(x->size);
    /* in the tree of the next class */
    pool_tree_remove(x->pool, x);
    rb_insert(&e->bin[c + 1], &x->node, block_bin_cmp);
    e->map[(c + 1) / 64] |= 1ull << ((c + 1) % 64);
    e->words |= 1ull << ((c + 1) / 64);
    expect_broken(f.d, "a free block in another class's tree", "another class");
    rb_erase(&e->bin[c + 1], &x->node);
    e->map[(c + 1) / 64] &= ~(1ull << ((c + 1) % 64));
    e->words = 0;
    for (unsigned w = 0; w < POOL_BIN_WORDS; w++)
        e->words |= (uint64_t)(e->map[w] != 0) << w;
    pool_tree_insert(x->pool, x);
    CHECK(f.d);
    /* a class's bit cleared while its tree holds a block */
    e->map[c / 64] ^= 1ull << (c % 64);
    expect_broken(f.d, "a class's bit cleared", "bit is 0");
    e->map[c / 64] ^= 1ull << (c % 64);
    CHECK(f.d);
    /* the word summary */
    e->words ^= 1ull << (c / 64);
    expect_broken(f.d, "the word summary", "word summary");
    e->words ^= 1ull << (c / 64);
    CHECK(f.d);
    /* the segments that point at the bins */
    e->segs++;
    expect_broken(f.d, "the bins' segment count", "segments point at them");
    e->segs--;
    CHECK(f.d);
    fx_close(&f);
}

/* The expandable segments' invariants: unmapped blocks whole pages, never
 * two adjacent, never in a plain segment; mapped bytes counted. */
static void test_check_catches_expandable(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, GiB, "expandable_segments:true");
    uintptr_t a = core_malloc(f.d, 3 * MiB, 1, NULL);
    assert_true(a != 0);
    CHECK(f.d);
    block_t *ab = map_find(f.d, a);
    seg_t *s = ab->seg;
    assert_true(s->expandable);
    block_t *u = ab->next;
    while (u && u->state != BLOCK_UNMAPPED)
        u = u->next;
    assert_non_null(u);
    /* an unmapped block that does not start on a page */
    u->addr += 512, u->size -= 512, u->prev->size += 512;
    expect_broken(f.d, "an unmapped block off its page", "not whole pages");
    u->addr -= 512, u->size += 512, u->prev->size -= 512;
    CHECK(f.d);
    /* mapped bytes miscounted */
    s->mapped += s->page;
    expect_broken(f.d, "mapped bytes miscounted", "its blocks map");
    s->mapped -= s->page;
    CHECK(f.d);
    /* an unmapped block in a segment that is not expandable */
    s->expandable = false;
    expect_broken(f.d, "an unmapped block in a plain segment", "not expandable");
    s->expandable = true;
    CHECK(f.d);
    assert_int_equal(core_free(f.d, a, CORE_FREE_NOW, 1), CORE_FREED);
    fx_close(&f);
}

/* Shared pages' invariants: the lent and foreign blocks point at each
 * other, split one page between them, are counted, and the lent one is a
 * block of its segment still. */
static void test_check_catches_shared_pages(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 8 * MiB, "expandable_segments:true,expandable_share_pages:true"); /* tight */
    uintptr_t a = core_malloc(f.d, 2 * MiB, 1, NULL);
    uintptr_t a2 = core_malloc(f.d, 5 * MiB / 4, 1, NULL); /* pages [0, 4): an idle free tail [3.25, 4) */
    uintptr_t z = core_malloc(f.d, 5 * MiB / 2, 2, NULL);  /* starts in that tail, on a second mapping */
    assert_true(a && a2 && z);
    assert_int_equal(core_free(f.d, a2, CORE_FREE_NOW, 1), CORE_FREED); /* a free block before the lent one */
    CHECK(f.d);
    block_t *l = map_find(f.d, a)->next->next, *fb = map_find(f.d, z)->prev;
    assert_int_equal(l->state, BLOCK_LENT);
    assert_int_equal(fb->state, BLOCK_FOREIGN);
    /* the pointers */
    fb->alias = NULL;
    expect_broken(f.d, "a foreign block pointing nowhere", "do not point at each other");
    fb->alias = l;
    CHECK(f.d);
    /* the split of the page */
    fb->size += 512, fb->next->addr += 512, fb->next->size -= 512;
    expect_broken(f.d, "a foreign block a little larger", "do not split one page");
    fb->size -= 512, fb->next->addr -= 512, fb->next->size += 512;
    CHECK(f.d);
    /* the count */
    fb->seg->aliased += fb->seg->page;
    expect_broken(f.d, "shared bytes miscounted", "bytes of shared pages");
    fb->seg->aliased -= fb->seg->page;
    CHECK(f.d);
    /* the lent block swallowed by the free block before it (a merge that
     * forgot it): its struct still points at the foreign one */
    block_t *p = l->prev;
    assert_int_equal(p->state, BLOCK_FREE);
    pool_tree_remove(p->pool, p);
    p->size += l->size;
    p->next = l->next;
    l->next->prev = p;
    pool_tree_insert(p->pool, p);
    expect_broken(f.d, "a lent block merged away", "is not in its segment");
    pool_tree_remove(p->pool, p);
    p->size -= l->size;
    p->next = l;
    l->next->prev = l;
    pool_tree_insert(p->pool, p);
    CHECK(f.d);
    assert_int_equal(core_free(f.d, z, CORE_FREE_NOW, 2), CORE_FREED);
    assert_int_equal(core_free(f.d, a, CORE_FREE_NOW, 1), CORE_FREED);
    fx_close(&f);
}

static void test_check_catches_states(void **state)
{
    (void)state;
    fx_t f;
    uintptr_t a, b;
    broken_setup(&f, &a, &b);
    block_t *ab = map_find(f.d, a);
    /* two free neighbours */
    ab->state = BLOCK_FREE;
    expect_broken(f.d, "an allocated block marked free", "adjacent and both free");
    ab->state = BLOCK_ALLOCATED;
    CHECK(f.d);
    /* an allocated block missing from the address map */
    assert_ptr_equal(map_remove(f.d, a), ab);
    expect_broken(f.d, "an allocated block not in the map", "not in the address map");
    map_insert(f.d, ab);
    CHECK(f.d);
    /* a block pointing at another segment */
    seg_t *other = f.d->segs;
    seg_t *mine = ab->seg;
    ab->seg = other;
    expect_broken(f.d, "a block of the wrong segment", "differs from its segment");
    ab->seg = mine;
    CHECK(f.d);
    /* a pending block lost from its list */
    block_t *pb = f.d->open.blocks;
    assert_non_null(pb);
    assert_int_equal(pb->addr, b);
    f.d->open.blocks = NULL;
    f.d->open.bytes -= pb->size;
    f.d->fenced_bytes -= pb->size;
    expect_broken(f.d, "a pending block in no list", "pending lists");
    f.d->open.blocks = pb;
    f.d->open.bytes += pb->size;
    f.d->fenced_bytes += pb->size;
    CHECK(f.d);
    /* a batch's byte count skewed (what a hand-out counts to leave some) */
    f.d->open.bytes += 512;
    expect_broken(f.d, "the open batch's bytes skewed", "byte count");
    f.d->open.bytes -= 512;
    CHECK(f.d);
    f.d->fenced_bytes += 512;
    expect_broken(f.d, "the fenced byte counter skewed", "byte count");
    f.d->fenced_bytes -= 512;
    CHECK(f.d);
    f.d->pending_bytes += 512;
    expect_broken(f.d, "the pending counter skewed", "pending lists");
    f.d->pending_bytes -= 512;
    CHECK(f.d);
    /* the tiling: a block moved */
    block_t *n = ab->next;
    n->addr += 512;
    expect_broken(f.d, "a block moved", "not followed by its address neighbour");
    n->addr -= 512;
    CHECK(f.d);
    /* the first block not at the segment's start */
    mine->addr += 512;
    expect_broken(f.d, "a segment's start moved", "first block does not start it");
    mine->addr -= 512;
    CHECK(f.d);
    fx_close(&f);
}

static void test_check_catches_stats(void **state)
{
    (void)state;
    fx_t f;
    uintptr_t a, b;
    broken_setup(&f, &a, &b);
    core_stats_t *s = &f.d->stats;
    s->allocated_bytes[CORE_POOL_ALL].current += 512;
    expect_broken(f.d, "allocated bytes' all current kept", "stat allocated_bytes.all keeps more than its peak");
    s->allocated_bytes[CORE_POOL_ALL].current -= 512;
    CHECK(f.d);
    s->segment[CORE_POOL_LARGE].current++;
    expect_broken(f.d, "a segment count skewed", "stat segment.large_pool.current");
    s->segment[CORE_POOL_LARGE].current--;
    CHECK(f.d);
    s->inactive_split_bytes[CORE_POOL_SMALL].current--;
    expect_broken(f.d, "inactive split bytes skewed", "stat inactive_split_bytes.small_pool.current");
    s->inactive_split_bytes[CORE_POOL_SMALL].current++;
    CHECK(f.d);
    s->active[CORE_POOL_SMALL].current--;
    expect_broken(f.d, "active blocks skewed", "stat active.small_pool.current");
    s->active[CORE_POOL_SMALL].current++;
    CHECK(f.d);
    s->requested_bytes[CORE_POOL_ALL].current++;
    expect_broken(f.d, "requested bytes' all current kept", "stat requested_bytes.all keeps more than its peak");
    s->requested_bytes[CORE_POOL_ALL].current--;
    CHECK(f.d);
    int64_t peak = s->allocation[CORE_POOL_ALL].peak;
    s->allocation[CORE_POOL_ALL].peak = 0;
    expect_broken(f.d, "the all peak below the classes' sum", "its peak is below the classes' sum");
    s->allocation[CORE_POOL_ALL].peak = peak;
    CHECK(f.d);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_catches_free_block_size),
        cmocka_unit_test(test_check_catches_tree),
        cmocka_unit_test(test_check_catches_bins),
        cmocka_unit_test(test_check_catches_states),
        cmocka_unit_test(test_check_catches_expandable),
        cmocka_unit_test(test_check_catches_shared_pages),
        cmocka_unit_test(test_check_catches_stats),
        cmocka_unit_test(test_random_default),
        cmocka_unit_test(test_random_max_split),
        cmocka_unit_test(test_random_roundup),
        cmocka_unit_test(test_random_roundup_max_split),
        cmocka_unit_test(test_random_preallocate),
        cmocka_unit_test(test_random_preallocate_max_split),
        cmocka_unit_test(test_random_gc),
        cmocka_unit_test(test_random_limit),
        cmocka_unit_test(test_random_expandable),
        cmocka_unit_test(test_random_expandable_page20),
        cmocka_unit_test(test_random_expandable_limit_gc),
        cmocka_unit_test(test_random_expandable_roundup),
        cmocka_unit_test(test_random_ordered),
        cmocka_unit_test(test_random_ordered_no_streams),
        cmocka_unit_test(test_random_ordered_expandable),
        cmocka_unit_test(test_random_expandable_share),
        cmocka_unit_test(test_random_expandable_share_tight),
        cmocka_unit_test(test_random_ordered_expandable_share),
    };
    return cmocka_run_group_tests_name("core_random", tests, NULL, NULL);
}
