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
 *      cucache (with NVML's list: other processes' and this one's, and the
 *      processes on the device, largest first);
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
#include "report.h"

/* The sink with a line longer than st_linef's (hints quote CUCACHE_CONF). */
void rep_line(st_sink_fn sink, void *ctx, const char *fmt, ...)
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

/* Most bytes first; equal bytes: the lower pid first. */
static int proc_cmp(const void *a, const void *b)
{
    const st_gpu_proc_t *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/* ", as it published N ms ago" (N.N s from REP_STALE_MS on). */
static void rep_age(char *buf, size_t len, uint64_t age_ms)
{
    if (age_ms >= REP_STALE_MS)
        snprintf(buf, len, ", as it published %.1f s ago", (double)age_ms / 1000.0);
    else
        snprintf(buf, len, ", as it published %llu ms ago", (unsigned long long)age_ms);
}

/* One line per process as PyTorch prints them ("Process 1234 has 10.00 GiB
 * memory in use"), with the command; the largest REP_PROC_ROWS. */
static void rep_procs(const rep_t *r, const st_gpu_procs_t *g, st_sink_fn sink, void *ctx)
{
    if (!g->n) {
        st_linef(sink, ctx, "processes on GPU %d (NVML): none listed", r->in->device);
        return;
    }
    st_gpu_proc_t *p = hostalloc_malloc(g->n * sizeof *p);
    if (p) {
        memcpy(p, g->procs, g->n * sizeof *p);
        qsort(p, g->n, sizeof *p, proc_cmp);
    }
    const st_gpu_proc_t *list = p ? p : g->procs;
    st_linef(sink, ctx, "processes on GPU %d (NVML), %s:", r->in->device,
             p ? "largest first" : "as NVML listed them (no host memory to sort them)");
    size_t rest_bytes = 0;
    for (size_t i = 0; i < g->n; i++) {
        if (i >= REP_PROC_ROWS) {
            rest_bytes += list[i].bytes;
            continue;
        }
        const st_gpu_proc_t *q = &list[i];
        char mine[160] = "", asked[160] = "", age[48] = "";
        if (q->pid != g->self_pid) /* a neighbour's figures are as it last published them */
            rep_age(age, sizeof age, q->age_ms);
        if (q->cucache && q->torn)
            snprintf(mine, sizeof mine, "; cucache, its figures unreadable (it stopped while publishing them)");
        else if (q->cucache)
            snprintf(mine, sizeof mine, "; cucache: %s allocated, %s cached%s", sz(q->allocated).s,
                     sz(sub0(q->reserved, q->allocated)).s, age);
        if (q->asked && q->still_giving)
            snprintf(asked, sizeof asked, "; asked for idle cache, still giving it back when the wait ended, %s so far",
                     sz(q->given).s);
        else if (q->asked && !q->answered)
            snprintf(asked, sizeof asked, "; asked for idle cache, no answer in time");
        else if (q->asked)
            snprintf(asked, sizeof asked, "; gave back %s for this request, %llu ms after the ask", sz(q->given).s,
                     (unsigned long long)q->answer_ms);
        st_linef(sink, ctx, "  Process %u has %s memory in use (%s%s%s%s)", q->pid, sz(q->bytes).s,
                 q->comm[0] ? q->comm : "?", q->pid == g->self_pid ? ", this process" : "", mine, asked);
    }
    if (g->n > REP_PROC_ROWS)
        st_linef(sink, ctx, "  ... %zu more %s, %s", g->n - REP_PROC_ROWS,
                 plural(g->n - REP_PROC_ROWS, "process", "processes"), sz(rest_bytes).s);
    hostalloc_free(p);
}

/*
 * Memory outside cucache: cuMemGetInfo's view (total - free - reserved).
 * With NVML's list of processes it is split into the other processes' sum
 * and this process's own use beyond what cucache reserved (its context and
 * what it allocated through paths cucache does not cache), then the
 * processes are listed.  Without NVML, one line says why it is not split;
 * where NVML's list cannot hold cucache's own figure (no process listed,
 * this one missing or below what cucache reserved) the report says that
 * instead of a share.
 */
/* What the other cucache processes on the GPU gave back for this request
 * (CUCACHE_YIELD). */
static void rep_yield(const rep_t *r, const st_gpu_procs_t *g, st_sink_fn sink, void *ctx)
{
    if (!g->yield_on) /* CUCACHE_YIELD=off, CUCACHE_REGISTRY=off, or no registry: nothing was asked */
        return;
    if (!g->asked) {
        st_linef(sink, ctx, "other cucache processes: none on GPU %d held cache to give back", r->in->device);
        return;
    }
    char waited[32], gone[128] = "", more[32] = "";
    snprintf(waited, sizeof waited, "%.1f ms", (double)g->waited_ns / 1e6);
    if (g->gone > 1)
        snprintf(more, sizeof more, " (and %u more)", g->gone - 1);
    if (g->gone)
        snprintf(gone, sizeof gone, "; process %u%s died %s", g->gone_pid, more,
                 g->gone_giving ? "while giving back, before it answered" : "or left before it answered");
    st_linef(sink, ctx,
             "other cucache processes: %u asked for idle cache gave back %s in all (waited %s)%s; the allocation "
             "was tried again and still failed",
             g->asked, sz(g->given).s, waited, gone);
}

/* NVML answered but listed no process on the device: the figure stays
 * whole, and when cucache holds memory for this process the list is
 * plainly incomplete (NVML sees no pid of another PID namespace, as in a
 * container), so nothing is split. */
static void rep_outside_unlisted(const rep_t *r, st_sink_fn sink, void *ctx)
{
    st_linef(sink, ctx,
             "outside cucache: %s (device total - device free - cucache reserved: other processes, or this "
             "process through paths cucache does not cache)",
             sz(r->outside).s);
    if (r->oom->reserved)
        st_linef(sink, ctx,
                 "processes on GPU %d (NVML): none listed, not even this one, which cucache holds %s for: NVML's "
                 "list is incomplete here (it sees no process of another PID namespace), so this is not split",
                 r->in->device, sz(r->oom->reserved).s);
    else
        st_linef(sink, ctx, "processes on GPU %d (NVML): none listed, so this is not split", r->in->device);
}

/* This process's share of the memory outside cucache: NVML's figure for
 * it less what cucache reserved, said only when NVML's figure covers
 * cucache's; otherwise what is known, never a figure clamped at 0. */
static void rep_outside_self(const rep_t *r, bool listed, size_t bytes, st_sink_fn sink, void *ctx)
{
    size_t reserved = r->oom->reserved;
    if (!listed && !reserved)
        st_linef(sink, ctx, "  this process: not in NVML's list, and cucache holds nothing for it");
    else if (!listed)
        st_linef(sink, ctx,
                 "  this process: not in NVML's list, though cucache holds %s for it: NVML's list is incomplete "
                 "here, so its use outside cucache is not known",
                 sz(reserved).s);
    else if (bytes < reserved)
        st_linef(sink, ctx,
                 "  this process: NVML's figure for it (%s) is below what cucache holds (%s): NVML does not count "
                 "all of its memory here, so its use outside cucache is not known",
                 sz(bytes).s, sz(reserved).s);
    else
        st_linef(sink, ctx, "  this process, outside cucache: %s (its %s in use less the %s cucache reserved)",
                 sz(bytes - reserved).s, sz(bytes).s, sz(reserved).s);
}

static void rep_outside(const rep_t *r, st_sink_fn sink, void *ctx)
{
    const st_gpu_procs_t *g = r->in->gpu;
    if (g)
        rep_yield(r, g, sink, ctx);
    if (!g || g->unavailable) {
        st_linef(sink, ctx,
                 "outside cucache: %s (device total - device free - cucache reserved: other processes, or this "
                 "process through paths cucache does not cache)",
                 sz(r->outside).s);
        if (g)
            st_linef(sink, ctx, "processes on GPU %d: not known (%s), so this is not split", r->in->device,
                     g->unavailable);
        return;
    }
    if (!g->n) {
        rep_outside_unlisted(r, sink, ctx);
        return;
    }
    size_t others = 0, other_bytes = 0, self_bytes = 0;
    bool self_listed = false;
    for (size_t i = 0; i < g->n; i++) {
        if (g->procs[i].pid == g->self_pid) {
            self_bytes += g->procs[i].bytes;
            self_listed = true;
        } else {
            others++;
            other_bytes += g->procs[i].bytes;
        }
    }
    st_linef(sink, ctx,
             "outside cucache: %s (device total - device free - cucache reserved), by NVML:", sz(r->outside).s);
    st_linef(sink, ctx, "  other processes: %s in %zu %s", sz(other_bytes).s, others,
             plural(others, "process", "processes"));
    rep_outside_self(r, self_listed, self_bytes, sink, ctx);
    rep_procs(r, g, sink, ctx);
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
             "needed: %s requested, rounded to %s, in the %s: %s %s; the device could give "
             "at most %s (its free memory)%s",
             sz(o->requested).s, sz(o->rounded).s, pool, o->expandable_va ? "pages of" : "a new segment of",
             sz(o->alloc_size).s, sz(o->device_free).s, o->limit_hit ? "; a limit refused it" : "");
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
    if (o->expandable_va) /* reserved counts mapped pages only, as PyTorch counts them */
        st_linef(sink, ctx,
                 "cache: expandable segments: %s mapped of %s of reserved addresses; free whole pages were given "
                 "back first (only those known idle during a capture)",
                 sz(o->reserved).s, sz(o->expandable_va).s);
    size_t inactive = r->st ? stat_cur(&r->st->inactive_split_bytes[CORE_POOL_ALL]) : 0;
    st_linef(sink, ctx,
             "cache: %s inactive split (free blocks in partly used segments), %s pending (freed, waiting on fences or "
             "events)",
             sz(inactive).s, sz(o->pending).s);
    rep_outside(r, sink, ctx);
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
    st_linef(sink, ctx, "live allocations: %zu %s, %s (%s requested, %s rounding waste), by requested size:", a->live,
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
    /* by the bytes asked for: one call site asking for 3 MiB gets blocks of
     * several sizes (a split's rest too small to keep stays with the block) */
    size_t n = 0, ng = 0;
    for (size_t i = 0; i < lay->nblocks && n < a->live; i++)
        if (lay->blocks[i].state == CORE_BLOCK_ALLOCATED)
            sizes[n++] = lay->blocks[i].requested;
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
            /* two sizes that print alike get their bytes */
            bool alike = false;
            for (size_t k = 0; k < ng && k < REP_SIZE_ROWS && !alike; k++)
                alike = k != i && strcmp(sz(groups[k].size).s, sz(groups[i].size).s) == 0;
            char exact[48] = "";
            if (alike)
                snprintf(exact, sizeof exact, " (%zu bytes)", groups[i].size);
            st_linef(sink, ctx, "  %8zu x %10s%s = %s", groups[i].count, sz(groups[i].size).s, exact,
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

/* With call stacks recorded: the live allocations by call site, the sites
 * holding the most bytes first. */
static void rep_sites(const rep_t *r, st_sink_fn sink, void *ctx)
{
    st_site_group_t *g;
    size_t ng = st_group_by_site(r->lay, &g);
    if (!ng)
        return;
    st_linef(sink, ctx, "largest live allocations by call site (innermost frame first):");
    st_site_lines(g, ng, REP_SITE_ROWS, 0, sink, ctx);
    hostalloc_free(g);
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
 * Entry points
 * ---------------------------------------------------------------------- */

void st_report_oom(const st_oom_input_t *in, st_sink_fn sink, void *ctx)
{
    rep_t r;
    rep_gather(&r, in);
    rep_sentence(&r, sink, ctx);
    st_site_stack(in->oom->site, "the request", sink, ctx);
    rep_detail(&r, sink, ctx);
    if (r.lay) {
        rep_pools(&r, sink, ctx);
        rep_sizes(&r, sink, ctx);
        rep_sites(&r, sink, ctx);
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
