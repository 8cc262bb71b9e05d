/*
 * The OOM report (st_report_oom) and its one-line repeat.
 *
 * The report reads top to bottom as a diagnosis:
 *
 *   1. PyTorch's sentence with the real numbers, so that people and their
 *      log scrapers recognise it ("CUDA out of memory. Tried to allocate");
 *   2. what PyTorch does not say: the segment that was needed and what the
 *      device could give, the largest free block and the fragmentation of
 *      the cache, inactive split and pending bytes, memory held outside
 *      cucache;
 *   3. the pools (segments and blocks of each), the live allocations
 *      grouped by block size, and a map of the most telling segments;
 *   4. a hint computed from those numbers (rep_cause), naming the
 *      CUCACHE_CONF to try when a setting can help, and saying so when none
 *      can.
 *
 * Everything comes from the input: no clock, no environment, no CUDA, so
 * the same state prints the same text (tests/stats compares it with golden
 * files).  Host memory for sorting comes from hostalloc; when it is short
 * the parts that need it say so and the rest is printed.
 *
 * Numbers in text are printed with integer arithmetic (percentages,
 * fractions): the library runs inside programs that may call setlocale, and
 * a decimal comma in a CUCACHE_CONF value would not parse.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostalloc.h"
#include "st.h"

#define MiB ((size_t)1 << 20)

enum {
    REP_SIZE_ROWS = 8,     /* live allocation sizes listed before "N more sizes" */
    REP_MAP_SEGS = 16,     /* segment lines in the map before "N more segments" */
    REP_BAR = 32,          /* characters in a segment's bar */
    REP_PRIVATE_POOLS = 8, /* private pools listed before "N more private pools" */
    REP_LINE = 2304,       /* one line: a hint quotes CUCACHE_CONF (up to about 1 KiB) */
    REP_OUTSIDE_SHARE = 10 /* memory outside cucache is the cause only above 1/10 of the device */
};

/* max_split_size_mb accepts nothing below 20 MiB (core/conf.c). */
#define REP_MIN_SPLIT_MB 20
/* roundup_power2_divisions accepts up to 1024. */
#define REP_MAX_DIVS 1024u

/* ------------------------------------------------------------------------
 * Small formatting helpers
 * ---------------------------------------------------------------------- */

/* A size in PyTorch's format, as a temporary usable in one printf call. */
typedef struct rep_sz_s {
    char s[32];
} rep_sz_t;

static rep_sz_t sz(uint64_t bytes)
{
    rep_sz_t r;
    st_fmt_size(r.s, sizeof r.s, bytes);
    return r;
}

/* num / den as a percentage with one decimal ("93.8%"), "n/a" when den is 0. */
typedef struct rep_pct_s {
    char s[24];
} rep_pct_t;

static rep_pct_t pct(uint64_t num, uint64_t den)
{
    rep_pct_t r;
    if (!den) {
        snprintf(r.s, sizeof r.s, "n/a");
        return r;
    }
    unsigned long long pm = (unsigned long long)((double)num * 1000.0 / (double)den + 0.5);
    snprintf(r.s, sizeof r.s, "%llu.%llu%%", pm / 10, pm % 10);
    return r;
}

static const char *plural(size_t n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

static size_t sub0(size_t a, size_t b)
{
    return a > b ? a - b : 0;
}

/* The sink with a line longer than st_linef's (hints quote CUCACHE_CONF). */
__attribute__((format(printf, 3, 4))) static void rep_line(st_sink_fn sink, void *ctx, const char *fmt, ...)
{
    char line[REP_LINE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    sink(ctx, line);
}

/* ------------------------------------------------------------------------
 * The facts, gathered once
 * ---------------------------------------------------------------------- */

/* Free, live and pending blocks of a set of segments. */
typedef struct rep_blocks_s {
    size_t segs, seg_bytes;
    size_t live, live_bytes, live_requested;
    size_t free, free_bytes, free_largest;
    size_t pending, pending_bytes;
} rep_blocks_t;

typedef struct rep_s {
    const st_oom_input_t *in;
    const core_oom_t *oom;
    const core_stats_t *st;   /* NULL: no counters */
    const core_layout_t *lay; /* NULL: no layout */
    conf_t conf;              /* in->conf, or the defaults */
    bool req_small;           /* the request draws from a small pool */
    size_t shortfall;         /* alloc_size beyond the device's free bytes */
    size_t outside;           /* device total - free - reserved, clamped at 0 */
    rep_blocks_t all;         /* every segment (from the layout, or the counters) */
    rep_blocks_t usable;      /* the segments of the request's pool and class */
    size_t private_allocated; /* live bytes in private pools (layout only) */
    size_t private_free;      /* free bytes in private pools (layout only) */
} rep_t;

static bool seg_usable(const rep_t *r, const core_seg_info_t *s)
{
    return s->pool_id == r->oom->pool_id && s->small == r->req_small;
}

/* Adds segment s's blocks to b. */
static void blocks_add(rep_blocks_t *b, const core_layout_t *lay, const core_seg_info_t *s)
{
    b->segs++;
    b->seg_bytes += s->size;
    for (size_t i = 0; i < s->nblocks; i++) {
        const core_block_info_t *k = &lay->blocks[s->first_block + i];
        switch (k->state) {
        case CORE_BLOCK_ALLOCATED:
            b->live++;
            b->live_bytes += k->size;
            b->live_requested += k->requested < k->size ? k->requested : k->size;
            break;
        case CORE_BLOCK_PENDING:
            b->pending++;
            b->pending_bytes += k->size;
            break;
        default:
            b->free++;
            b->free_bytes += k->size;
            if (k->size > b->free_largest)
                b->free_largest = k->size;
            break;
        }
    }
}

static size_t stat_cur(const core_stat_t *s)
{
    return s->current > 0 ? (size_t)s->current : 0;
}

/* Without a layout: what the counters and the failure tell. */
static void blocks_from_stats(rep_t *r)
{
    const core_stats_t *st = r->st;
    const core_oom_t *o = r->oom;
    rep_blocks_t *a = &r->all;
    a->seg_bytes = o->reserved;
    a->live_bytes = o->allocated;
    a->pending_bytes = o->pending;
    a->free_bytes = sub0(o->reserved, o->allocated + o->pending);
    a->free_largest = o->largest_free;
    if (st) {
        a->segs = stat_cur(&st->segment[CORE_POOL_ALL]);
        a->live = stat_cur(&st->allocation[CORE_POOL_ALL]);
        a->live_requested = stat_cur(&st->requested_bytes[CORE_POOL_ALL]);
        int cls = r->req_small ? CORE_POOL_SMALL : CORE_POOL_LARGE;
        r->usable.free_bytes = sub0(stat_cur(&st->reserved_bytes[cls]), stat_cur(&st->active_bytes[cls]));
    } else {
        a->live_requested = o->allocated;
        r->usable.free_bytes = a->free_bytes;
    }
    if (r->usable.free_bytes > a->free_bytes)
        r->usable.free_bytes = a->free_bytes; /* the counters may mix private pools in: never claim more */
    r->usable.free_largest = o->largest_free;
}

static void rep_gather(rep_t *r, const st_oom_input_t *in)
{
    memset(r, 0, sizeof *r);
    r->in = in;
    r->oom = in->oom;
    r->st = in->stats;
    r->lay = in->layout;
    if (in->conf)
        r->conf = *in->conf;
    else
        conf_defaults(&r->conf);
    const core_oom_t *o = r->oom;
    /* Preallocate carves the default pool's requests of every size from its chunk. */
    r->req_small =
        o->rounded <= r->conf.small_size && !(r->conf.strategy == CONF_STRATEGY_PREALLOCATE && o->pool_id == 0);
    r->shortfall = sub0(o->alloc_size, o->device_free);
    r->outside = sub0(o->device_total, o->device_free + o->reserved);
    if (!r->lay) {
        blocks_from_stats(r);
        return;
    }
    for (size_t i = 0; i < r->lay->nsegs; i++) {
        const core_seg_info_t *s = &r->lay->segs[i];
        blocks_add(&r->all, r->lay, s);
        if (seg_usable(r, s))
            blocks_add(&r->usable, r->lay, s);
        if (s->pool_id > 0) {
            rep_blocks_t p = {0};
            blocks_add(&p, r->lay, s);
            r->private_allocated += p.live_bytes;
            r->private_free += p.free_bytes;
        }
    }
}

/* ------------------------------------------------------------------------
 * 1. PyTorch's sentence
 * ---------------------------------------------------------------------- */

/*
 * PyTorch's "Tried to allocate" names the segment size it asked the device
 * for.  We name the rounded request (what the program's allocation would
 * have occupied) with the bytes asked for beside it: the segment size is
 * often a pool's 2 MiB or 20 MiB, which says nothing about the program's
 * tensor.  The segment size follows on the next line ("needed: ...").
 * "Of the allocated memory X": X counts the private pools too; the
 * "with Y allocated in private pools" part appears only when Y is not 0,
 * as in PyTorch.  The sentence is split after "is free." into two lines.
 */
static void rep_sentence(const rep_t *r, st_sink_fn sink, void *ctx)
{
    const core_oom_t *o = r->oom;
    st_linef(sink, ctx,
             "CUDA out of memory. Tried to allocate %s (%s requested). GPU %d has a total capacity of %s of which %s "
             "is free.",
             sz(o->rounded).s, sz(o->requested).s, r->in->device, sz(o->device_total).s, sz(o->device_free).s);
    char allowed[64] = "", priv[96] = "";
    if (o->limit != SIZE_MAX)
        snprintf(allowed, sizeof allowed, "%s allowed; ", sz(o->limit).s);
    if (r->private_allocated)
        snprintf(priv, sizeof priv, "with %s allocated in private pools (e.g., CUDA Graphs), ",
                 sz(r->private_allocated).s);
    st_linef(sink, ctx,
             "%sOf the allocated memory %s is allocated by cucache, %sand %s is reserved by cucache but unallocated.",
             allowed, sz(o->allocated).s, priv, sz(sub0(o->reserved, o->allocated)).s);
}

/* ------------------------------------------------------------------------
 * 2. The numbers PyTorch does not give
 * ---------------------------------------------------------------------- */

static const char *pool_word(const rep_t *r)
{
    if (r->oom->pool_id > 0)
        return r->req_small ? "private small" : "private large";
    return r->req_small ? "small" : "large";
}

static void rep_detail(const rep_t *r, st_sink_fn sink, void *ctx)
{
    const core_oom_t *o = r->oom;
    char pool[48];
    if (o->pool_id > 0)
        snprintf(pool, sizeof pool, "%s pool %d", pool_word(r), o->pool_id);
    else
        snprintf(pool, sizeof pool, "%s pool", pool_word(r));
    st_linef(sink, ctx,
             "needed: %s requested, rounded to %s, in the %s: a new segment of %s; the device could give "
             "at most %s (its free memory)%s",
             sz(o->requested).s, sz(o->rounded).s, pool, sz(o->alloc_size).s, sz(o->device_free).s,
             o->limit_hit ? "; a limit refused it" : "");
    if (o->backend_error == CORE_EFAIL)
        st_linef(sink, ctx, "needed: the last attempt failed with an error other than out of memory");
    const rep_blocks_t *a = &r->all;
    size_t largest = o->largest_free < a->free_bytes ? o->largest_free : a->free_bytes;
    char nfree[48] = "";
    if (r->lay)
        snprintf(nfree, sizeof nfree, " in %zu %s", a->free, plural(a->free, "block", "blocks"));
    st_linef(sink, ctx, "cache: %s reserved in %zu %s, %s allocated, %s free%s, largest free block %s",
             sz(o->reserved).s, a->segs, plural(a->segs, "segment", "segments"), sz(o->allocated).s,
             sz(a->free_bytes).s, nfree, sz(largest).s);
    /* RMM's and BFC's measure: how much of the free memory is out of reach of one request. */
    st_linef(sink, ctx, "cache: fragmentation %s (1 - largest free block / free bytes)",
             pct(a->free_bytes - largest, a->free_bytes).s);
    size_t inactive = r->st ? stat_cur(&r->st->inactive_split_bytes[CORE_POOL_ALL]) : 0;
    st_linef(sink, ctx,
             "cache: %s inactive split (free blocks in partly used segments), %s pending (freed, waiting on fences or "
             "events)",
             sz(inactive).s, sz(o->pending).s);
    st_linef(sink, ctx,
             "outside cucache: %s (device total - device free - cucache reserved: other processes, or this process "
             "through paths cucache does not cache)",
             sz(r->outside).s);
}

/* ------------------------------------------------------------------------
 * 3. Pools, live allocations, segment map
 * ---------------------------------------------------------------------- */

static void pool_line(st_sink_fn sink, void *ctx, const char *label, const rep_blocks_t *b)
{
    if (!b->segs) {
        st_linef(sink, ctx, "  %-18s no segments", label);
        return;
    }
    st_linef(sink, ctx, "  %-18s %zu %s %s; live %zu %s %s; free %zu %s %s; pending %zu %s %s", label, b->segs,
             plural(b->segs, "segment", "segments"), sz(b->seg_bytes).s, b->live, plural(b->live, "block", "blocks"),
             sz(b->live_bytes).s, b->free, plural(b->free, "block", "blocks"), sz(b->free_bytes).s, b->pending,
             plural(b->pending, "block", "blocks"), sz(b->pending_bytes).s);
}

/* The blocks of pool `id`'s small or large segments. */
static rep_blocks_t pool_blocks(const core_layout_t *lay, int id, bool small)
{
    rep_blocks_t b = {0};
    for (size_t i = 0; i < lay->nsegs; i++)
        if (lay->segs[i].pool_id == id && lay->segs[i].small == small)
            blocks_add(&b, lay, &lay->segs[i]);
    return b;
}

/* The smallest private pool id above `after`, or 0. */
static int next_private(const core_layout_t *lay, int after)
{
    int best = 0;
    for (size_t i = 0; i < lay->nsegs; i++) {
        int id = lay->segs[i].pool_id;
        if (id > after && (!best || id < best))
            best = id;
    }
    return best;
}

static void rep_pools(const rep_t *r, st_sink_fn sink, void *ctx)
{
    const core_layout_t *lay = r->lay;
    st_linef(sink, ctx, "pools:");
    rep_blocks_t b = pool_blocks(lay, 0, true);
    pool_line(sink, ctx, "small", &b);
    b = pool_blocks(lay, 0, false);
    pool_line(sink, ctx, "large", &b);
    size_t shown = 0, more = 0;
    for (int id = next_private(lay, 0); id; id = next_private(lay, id)) {
        if (shown == REP_PRIVATE_POOLS) {
            more++;
            continue;
        }
        shown++;
        for (int small = 1; small >= 0; small--) {
            b = pool_blocks(lay, id, small);
            if (!b.segs)
                continue;
            char label[48];
            snprintf(label, sizeof label, "private %d %s", id, small ? "small" : "large");
            pool_line(sink, ctx, label, &b);
        }
    }
    if (more)
        st_linef(sink, ctx, "  ... %zu more private %s", more, plural(more, "pool", "pools"));
}

/* A group of live blocks of one size. */
typedef struct rep_group_s {
    size_t size, count;
} rep_group_t;

static int size_desc(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x > y ? -1 : x < y;
}

/* Most bytes first; equal bytes: the larger block first. */
static int group_cmp(const void *a, const void *b)
{
    const rep_group_t *x = a, *y = b;
    size_t bx = x->size * x->count, by = y->size * y->count;
    if (bx != by)
        return bx > by ? -1 : 1;
    return x->size > y->size ? -1 : x->size < y->size;
}

/* The live allocations by block size: the sizes holding the most bytes. */
static void rep_sizes(const rep_t *r, st_sink_fn sink, void *ctx)
{
    const core_layout_t *lay = r->lay;
    const rep_blocks_t *a = &r->all;
    if (!a->live) {
        st_linef(sink, ctx, "live allocations: none");
        return;
    }
    st_linef(sink, ctx, "live allocations: %zu %s, %s (%s requested, %s rounding waste), by block size:", a->live,
             plural(a->live, "block", "blocks"), sz(a->live_bytes).s, sz(a->live_requested).s,
             sz(a->live_bytes - a->live_requested).s);
    size_t *sizes = hostalloc_malloc(a->live * sizeof *sizes);
    rep_group_t *groups = hostalloc_malloc(a->live * sizeof *groups);
    if (!sizes || !groups) {
        st_linef(sink, ctx, "  (no host memory to group them)");
        hostalloc_free(sizes);
        hostalloc_free(groups);
        return;
    }
    size_t n = 0, ng = 0;
    for (size_t i = 0; i < lay->nblocks && n < a->live; i++)
        if (lay->blocks[i].state == CORE_BLOCK_ALLOCATED)
            sizes[n++] = lay->blocks[i].size;
    qsort(sizes, n, sizeof *sizes, size_desc);
    for (size_t i = 0; i < n; i++) {
        if (ng && groups[ng - 1].size == sizes[i])
            groups[ng - 1].count++;
        else
            groups[ng++] = (rep_group_t){sizes[i], 1};
    }
    qsort(groups, ng, sizeof *groups, group_cmp);
    size_t rest_blocks = 0, rest_bytes = 0;
    for (size_t i = 0; i < ng; i++) {
        if (i < REP_SIZE_ROWS) {
            st_linef(sink, ctx, "  %8zu x %10s = %s", groups[i].count, sz(groups[i].size).s,
                     sz(groups[i].size * groups[i].count).s);
        } else {
            rest_blocks += groups[i].count;
            rest_bytes += groups[i].size * groups[i].count;
        }
    }
    if (ng > REP_SIZE_ROWS)
        st_linef(sink, ctx, "  ... %zu more %s: %zu %s, %s", ng - REP_SIZE_ROWS,
                 plural(ng - REP_SIZE_ROWS, "size", "sizes"), rest_blocks, plural(rest_blocks, "block", "blocks"),
                 sz(rest_bytes).s);
    hostalloc_free(sizes);
    hostalloc_free(groups);
}

/* Bytes of [lo, hi) overlapping [a, b). */
static size_t overlap(size_t lo, size_t hi, size_t a, size_t b)
{
    size_t x = lo > a ? lo : a, y = hi < b ? hi : b;
    return y > x ? y - x : 0;
}

/*
 * A segment as REP_BAR characters, each standing for 1/REP_BAR of it:
 * '.' when that stretch is wholly free, else whichever of '*' allocated
 * (the bytes asked for), 'x' rounding waste (block size beyond them) and
 * '~' pending holds most of its bytes (ties: that order).  A dot is thus
 * a promise: a run of dots is free space at least that long, and a
 * segment with one small live block never looks free (it cannot be
 * released).
 */
static void seg_bar(const core_layout_t *lay, const core_seg_info_t *s, char bar[REP_BAR + 1])
{
    static const char mark[3] = {'*', 'x', '~'};
    for (size_t c = 0; c < REP_BAR; c++) {
        size_t lo = s->size * c / REP_BAR, hi = s->size * (c + 1) / REP_BAR;
        size_t bytes[3] = {0};
        for (size_t i = 0; i < s->nblocks; i++) {
            const core_block_info_t *k = &lay->blocks[s->first_block + i];
            size_t start = k->addr - s->addr, end = start + k->size;
            if (end <= lo || start >= hi)
                continue;
            if (k->state == CORE_BLOCK_ALLOCATED) {
                size_t req = k->requested < k->size ? k->requested : k->size;
                bytes[0] += overlap(lo, hi, start, start + req);
                bytes[1] += overlap(lo, hi, start + req, end);
            } else if (k->state == CORE_BLOCK_PENDING) {
                bytes[2] += overlap(lo, hi, start, end);
            }
        }
        int best = 0;
        for (int m = 1; m < 3; m++)
            if (bytes[m] > bytes[best])
                best = m;
        bar[c] = bytes[best] ? mark[best] : '.';
    }
    bar[REP_BAR] = '\0';
}

static void seg_label(const core_seg_info_t *s, char *buf, size_t len)
{
    if (s->pool_id > 0)
        snprintf(buf, len, "private %d %s", s->pool_id, s->small ? "small" : "large");
    else
        snprintf(buf, len, "%s", s->small ? "small" : "large");
}

/* Ordering of the map's candidates: most free and pending bytes, then the
 * larger segment, then the lower address. */
typedef struct rep_segkey_s {
    size_t idle; /* free + pending bytes */
    size_t size;
    uintptr_t addr;
    size_t index;
} rep_segkey_t;

static int segkey_interest(const void *a, const void *b)
{
    const rep_segkey_t *x = a, *y = b;
    if (x->idle != y->idle)
        return x->idle > y->idle ? -1 : 1;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int segkey_addr(const void *a, const void *b)
{
    const rep_segkey_t *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static void map_line(const core_layout_t *lay, const core_seg_info_t *s, st_sink_fn sink, void *ctx)
{
    char bar[REP_BAR + 1], label[48];
    rep_blocks_t b = {0};
    blocks_add(&b, lay, s);
    seg_bar(lay, s, bar);
    seg_label(s, label, sizeof label);
    st_linef(sink, ctx, "  0x%012llx %10s %-15s |%s| free %s, largest %s", (unsigned long long)s->addr, sz(s->size).s,
             label, bar, sz(b.free_bytes).s, sz(b.free_largest).s);
}

/* Up to REP_MAP_SEGS segments, those with the most idle bytes, shown in
 * address order; without host memory to rank them, the first ones. */
static void rep_map(const rep_t *r, st_sink_fn sink, void *ctx)
{
    const core_layout_t *lay = r->lay;
    if (!lay->nsegs) {
        st_linef(sink, ctx, "segment map: no segments");
        return;
    }
    size_t shown = lay->nsegs < REP_MAP_SEGS ? lay->nsegs : REP_MAP_SEGS;
    char which[96];
    if (shown < lay->nsegs)
        snprintf(which, sizeof which, "the %zu of %zu segments with the most free bytes", shown, lay->nsegs);
    else
        snprintf(which, sizeof which, "%zu %s", shown, plural(shown, "segment", "segments"));
    st_linef(sink, ctx,
             "segment map: %s, by address (each bar in %d steps: * allocated, x rounding waste, ~ pending, . free):",
             which, REP_BAR);
    rep_segkey_t *keys = hostalloc_malloc(lay->nsegs * sizeof *keys);
    if (keys) {
        for (size_t i = 0; i < lay->nsegs; i++) {
            rep_blocks_t b = {0};
            blocks_add(&b, lay, &lay->segs[i]);
            keys[i] = (rep_segkey_t){b.free_bytes + b.pending_bytes, lay->segs[i].size, lay->segs[i].addr, i};
        }
        qsort(keys, lay->nsegs, sizeof *keys, segkey_interest);
        qsort(keys, shown, sizeof *keys, segkey_addr);
    }
    size_t shown_bytes = 0;
    for (size_t i = 0; i < shown; i++) {
        const core_seg_info_t *s = &lay->segs[keys ? keys[i].index : i];
        shown_bytes += s->size;
        map_line(lay, s, sink, ctx);
    }
    if (lay->nsegs > shown)
        st_linef(sink, ctx, "  ... %zu more %s, %s", lay->nsegs - shown,
                 plural(lay->nsegs - shown, "segment", "segments"), sz(r->all.seg_bytes - shown_bytes).s);
    hostalloc_free(keys);
}

/* ------------------------------------------------------------------------
 * 4. The hint
 * ---------------------------------------------------------------------- */

/*
 * The cause, the first rule that holds:
 *
 *   ERROR       the last attempt failed with an error other than out of
 *               memory (backend_error CORE_EFAIL): no shortage at all, no
 *               setting helps;
 *   LIMIT       a limit refused it (limit_hit): name the limit
 *               (limit_mb, or per_process_memory_fraction) and the value
 *               that fits what cucache holds plus the segment needed;
 *   OUTSIDE     the device lacked `shortfall` bytes and memory held
 *               outside cucache is at least that, and at least a tenth of
 *               the device (a CUDA context alone holds a few hundred MiB
 *               outside any allocator, so a small outside share is not
 *               the story): other processes hold it, nothing to tune;
 *   FRAGMENTED  the free blocks the request could use (its pool, its
 *               class: free blocks of other pools cannot serve it) add up
 *               to the rounded request, yet none is large enough:
 *               max_split_size_mb (under auto_growth), or
 *               strategy:auto_growth / a lower fraction (under
 *               preallocate); and, when roundup_power2_divisions is on
 *               and rounding wastes an eighth or more of the live bytes,
 *               twice the divisions (finer steps waste less);
 *   LIVE        otherwise the memory is in use by live allocations: the
 *               job needs less; no setting fixes that.
 */
typedef enum rep_cause_e {
    CAUSE_ERROR,
    CAUSE_LIMIT,
    CAUSE_OUTSIDE,
    CAUSE_FRAGMENTED,
    CAUSE_LIVE,
} rep_cause_t;

static rep_cause_t rep_cause(const rep_t *r)
{
    const core_oom_t *o = r->oom;
    if (o->backend_error == CORE_EFAIL)
        return CAUSE_ERROR;
    if (o->limit_hit)
        return CAUSE_LIMIT;
    if (r->shortfall && r->outside >= r->shortfall && r->outside >= o->device_total / REP_OUTSIDE_SHARE)
        return CAUSE_OUTSIDE;
    const rep_blocks_t *u = &r->usable;
    if (u->free_bytes >= o->rounded && u->free_largest < o->rounded)
        return CAUSE_FRAGMENTED;
    return CAUSE_LIVE;
}

static bool conf_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

static void conf_trim(const char **s, size_t *n)
{
    while (*n && conf_space(**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n && conf_space((*s)[*n - 1]))
        (*n)--;
}

/* Appends s[0..n) to buf (truncating), keeping it NUL-terminated. */
static void conf_cat(char *buf, size_t len, size_t *k, const char *s, size_t n)
{
    if (*k + 1 >= len)
        return;
    if (n > len - 1 - *k)
        n = len - 1 - *k;
    memcpy(buf + *k, s, n);
    *k += n;
    buf[*k] = '\0';
}

/*
 * "CUCACHE_CONF=<the user's text>,<add>": the user's items in their order,
 * less any that sets add's key (the suggestion replaces it; conf_parse
 * would take the last one anyway, this only reads better), then add.
 * Items split at top-level commas, as conf_tokenize does.  Single-quoted
 * when the shell would read something in it (brackets, '>', spaces).
 */
static void conf_with(const rep_t *r, const char *add, char *out, size_t len)
{
    const char *t = r->in->conf_text ? r->in->conf_text : "";
    size_t n = strlen(t), klen = strcspn(add, ":"), k = 0;
    char value[1280] = "";
    for (size_t i = 0; i <= n; i++) {
        size_t start = i;
        int depth = 0;
        for (; i < n && (t[i] != ',' || depth > 0); i++) {
            if (t[i] == '[')
                depth++;
            else if (t[i] == ']' && depth > 0)
                depth--;
        }
        const char *item = t + start, *key = item;
        size_t ilen = i - start;
        conf_trim(&item, &ilen);
        key = item;
        size_t kl = 0;
        while (kl < ilen && item[kl] != ':')
            kl++;
        conf_trim(&key, &kl);
        if (!ilen || (kl == klen && memcmp(key, add, klen) == 0))
            continue;
        conf_cat(value, sizeof value, &k, item, ilen);
        conf_cat(value, sizeof value, &k, ",", 1);
    }
    conf_cat(value, sizeof value, &k, add, strlen(add));
    bool quote = false;
    for (const char *p = value; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:,=+-/@%", *p))
            quote = true;
    if (!quote) {
        snprintf(out, len, "CUCACHE_CONF=%s", value);
        return;
    }
    k = 0;
    out[0] = '\0';
    conf_cat(out, len, &k, "CUCACHE_CONF='", 14);
    for (const char *p = value; *p; p++) {
        if (*p == '\'')
            conf_cat(out, len, &k, "'\\''", 4); /* close, an escaped quote, reopen */
        else
            conf_cat(out, len, &k, p, 1);
    }
    conf_cat(out, len, &k, "'", 1);
}

static void hint_limit(const rep_t *r, st_sink_fn sink, void *ctx)
{
    const core_oom_t *o = r->oom;
    char conf[1400], add[64];
    size_t need = o->reserved + o->alloc_size;
    bool by_mb = r->conf.limit && r->conf.limit == o->limit;
    if (by_mb || !o->device_total) {
        snprintf(add, sizeof add, "limit_mb:%zu", (need + MiB - 1) / MiB);
    } else {
        /* the smallest fraction in hundredths that allows `need` */
        unsigned long long h = ((unsigned long long)need * 100 + o->device_total - 1) / o->device_total;
        if (h >= 100)
            snprintf(add, sizeof add, "per_process_memory_fraction:1");
        else
            snprintf(add, sizeof add, "per_process_memory_fraction:0.%02llu", h);
    }
    conf_with(r, add, conf, sizeof conf);
    rep_line(sink, ctx,
             "hint: a limit refused it: %s allows %s; cucache holds %s and needed a new segment of %s: %s would have "
             "fit it",
             by_mb ? "limit_mb" : "per_process_memory_fraction", sz(o->limit).s, sz(o->reserved).s, sz(o->alloc_size).s,
             conf);
    if (r->shortfall)
        st_linef(sink, ctx,
                 "hint: but the device has only %s free now, %s less than the segment: raising the limit alone is not "
                 "enough",
                 sz(o->device_free).s, sz(r->shortfall).s);
}

static void hint_outside(const rep_t *r, st_sink_fn sink, void *ctx)
{
    st_linef(sink, ctx,
             "hint: memory held outside cucache (%s) is more than what was missing (%s): other processes on GPU %d, or "
             "this process through paths cucache does not cache; no CUCACHE_CONF setting frees it (nvidia-smi lists "
             "the processes)",
             sz(r->outside).s, sz(r->shortfall).s, r->in->device);
}

/* The largest divisions in use (roundup_power2_divisions), 0 or 1 when off. */
static unsigned divs_in_use(const rep_t *r)
{
    unsigned d = conf_roundup_divisions(&r->conf, r->oom->rounded);
    for (unsigned i = 0; d <= 1 && i < CONF_ROUNDUP_INTERVALS; i++)
        if (r->conf.roundup_divs[i] > d)
            d = r->conf.roundup_divs[i];
    return d;
}

/*
 * Fragmentation under auto_growth: max_split_size_mb:N with N the rounded
 * request in MiB (at least 20, the smallest value accepted).  Blocks of N
 * MiB and more are then never split by smaller requests, so the segments
 * of requests like this one stay whole for them once freed.
 * Under preallocate (where max_split_size is off): grow on demand instead,
 * or a smaller chunk.  The chunk c = f x F0 (F0 the device's free memory at
 * first use) failed to get a second chunk from the d bytes left; a fraction
 * f' with 2 f' F0 <= d + f F0 lets a second chunk fit beside the first:
 * f' = f (1 + d / c) / 2, c being the segment size that was needed.
 */
static void hint_fragmented(const rep_t *r, st_sink_fn sink, void *ctx)
{
    const core_oom_t *o = r->oom;
    const rep_blocks_t *u = &r->usable;
    char conf[1400], conf2[1400], add[64];
    bool chunk = r->conf.strategy == CONF_STRATEGY_PREALLOCATE && o->pool_id == 0;
    char what[256];
    snprintf(what, sizeof what,
             "hint: fragmentation%s: %s is free in the blocks this request could use, but the largest is %s, less "
             "than the %s needed",
             chunk ? " inside the preallocated chunk" : "", sz(u->free_bytes).s, sz(u->free_largest).s,
             sz(o->rounded).s);
    if (chunk) {
        conf_with(r, "strategy:auto_growth", conf, sizeof conf);
        double c = o->alloc_size ? (double)o->alloc_size : 1.0;
        double f2 = r->conf.fraction * (1.0 + (double)o->device_free / c) / 2.0;
        unsigned h = (unsigned)(f2 * 100.0); /* hundredths, rounded down */
        unsigned hf = (unsigned)(r->conf.fraction * 100.0 + 0.5);
        if (h < 1)
            h = 1;
        if (h < hf) {
            snprintf(add, sizeof add, "fraction:0.%02u", h);
            conf_with(r, add, conf2, sizeof conf2);
            rep_line(sink, ctx, "%s: grow on demand, %s, or reserve a smaller chunk so that a second one fits, %s",
                     what, conf, conf2);
        } else {
            rep_line(sink, ctx, "%s: grow on demand, %s", what, conf);
        }
    } else {
        size_t n = o->rounded / MiB;
        if (n < REP_MIN_SPLIT_MB)
            n = REP_MIN_SPLIT_MB;
        if (r->conf.max_split_size != SIZE_MAX && r->conf.max_split_size <= n * MiB) {
            st_linef(sink, ctx,
                     "%s; max_split_size_mb is already %zu: allocating the largest buffers first, or fewer distinct "
                     "sizes, leaves fewer holes",
                     what, r->conf.max_split_size / MiB);
        } else {
            snprintf(add, sizeof add, "max_split_size_mb:%zu", n);
            conf_with(r, add, conf, sizeof conf);
            rep_line(sink, ctx, "%s: keep blocks of %zu MiB and more whole for requests that large, %s", what, n, conf);
        }
    }
    size_t waste = sub0(r->all.live_bytes, r->all.live_requested);
    unsigned divs = divs_in_use(r);
    if (waste && waste >= r->all.live_bytes / 8 && divs > 1) {
        unsigned finer = divs * 2 > REP_MAX_DIVS ? REP_MAX_DIVS : divs * 2;
        if (finer > divs) {
            snprintf(add, sizeof add, "roundup_power2_divisions:%u", finer);
            conf_with(r, add, conf, sizeof conf);
            rep_line(sink, ctx,
                     "hint: rounding wastes %s of the %s live (roundup_power2_divisions rounds to 1/%u steps between "
                     "powers of two); finer steps waste less, %s",
                     sz(waste).s, sz(r->all.live_bytes).s, divs, conf);
        }
    }
}

static void hint_live(const rep_t *r, st_sink_fn sink, void *ctx)
{
    const core_oom_t *o = r->oom;
    if (r->shortfall)
        st_linef(sink, ctx,
                 "hint: the memory is in use: live allocations hold %s of the %s cucache holds, and the device lacks "
                 "%s for this request; the job needs less memory at once (a smaller batch, fewer tensors kept "
                 "alive): no CUCACHE_CONF setting changes that",
                 sz(o->allocated).s, sz(o->reserved).s, sz(r->shortfall).s);
    else
        st_linef(sink, ctx,
                 "hint: the device refused %s although it reports %s free (memory freed since, or a device address "
                 "space too fragmented); live allocations hold %s of the %s cucache holds",
                 sz(o->alloc_size).s, sz(o->device_free).s, sz(o->allocated).s, sz(o->reserved).s);
    if (o->pending)
        st_linef(sink, ctx,
                 "hint: %s more is freed but still waiting on fences or events (during a CUDA graph capture, frees "
                 "wait for its end); it becomes reusable once that work completed",
                 sz(o->pending).s);
    if (r->private_free)
        st_linef(sink, ctx,
                 "hint: private pools (CUDA graphs, MemPool) keep %s free that other pools cannot use: releasing "
                 "those graphs or pools returns it",
                 sz(r->private_free).s);
}

static void rep_hint(const rep_t *r, st_sink_fn sink, void *ctx)
{
    switch (rep_cause(r)) {
    case CAUSE_ERROR:
        st_linef(sink, ctx,
                 "hint: the device (or cucache's host memory) failed with an error other than out of memory: this is "
                 "not a shortage of device memory, and no CUCACHE_CONF setting changes it");
        break;
    case CAUSE_LIMIT:
        hint_limit(r, sink, ctx);
        break;
    case CAUSE_OUTSIDE:
        hint_outside(r, sink, ctx);
        break;
    case CAUSE_FRAGMENTED:
        hint_fragmented(r, sink, ctx);
        break;
    case CAUSE_LIVE:
        hint_live(r, sink, ctx);
        break;
    }
}

/* ------------------------------------------------------------------------
 * Entry points
 * ---------------------------------------------------------------------- */

void st_report_oom(const st_oom_input_t *in, st_sink_fn sink, void *ctx)
{
    rep_t r;
    rep_gather(&r, in);
    rep_sentence(&r, sink, ctx);
    rep_detail(&r, sink, ctx);
    if (r.lay) {
        rep_pools(&r, sink, ctx);
        rep_sizes(&r, sink, ctx);
        rep_map(&r, sink, ctx);
    } else {
        st_linef(sink, ctx,
                 "layout: unavailable (no host memory to copy the segments): pools, live allocations by size and the "
                 "segment map are left out");
    }
    rep_hint(&r, sink, ctx);
}

void st_report_oom_repeat(const st_oom_input_t *in, unsigned long count, st_sink_fn sink, void *ctx)
{
    const core_oom_t *o = in->oom;
    st_linef(sink, ctx,
             "CUDA out of memory again (failure %lu): tried to allocate %s (%s requested) on GPU %d; %s free of %s, "
             "cucache holds %s (%s allocated); full report at the first failure above",
             count, sz(o->rounded).s, sz(o->requested).s, in->device, sz(o->device_free).s, sz(o->device_total).s,
             sz(o->reserved).s, sz(o->allocated).s);
}
