/*
 * The exit summary (st_summary): torch.cuda.memory_summary()'s table, then
 * what cucache adds (hit rate, device allocations avoided, fences, the
 * verdict).
 *
 * The table keeps PyTorch's layout to the column: 75 characters between
 * the bars of every line, the same row groups in the same order, each with
 * its "from large pool" and "from small pool" rows, and PyTorch's number
 * formats:
 *   sizes   "%6d %s" with B/KiB/MiB/GiB/TiB/PiB ("B" padded to three);
 *   counts  "%7d %s " with " "/K/M;
 * a column steps up a unit while the "all" row's value in that column is
 * at least 768 KiB (sizes) or 750 thousand (counts), and every row of the
 * group divides by the same steps (integer floor division, as Python's //).
 * Only the title differs: "cucache memory summary", starting at PyTorch's
 * column.
 *
 * Percentages and times are printed with integer arithmetic: the library
 * runs inside programs that may call setlocale.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostalloc.h"
#include "registry.h"
#include "st.h"

#define SUM_WIDTH 75 /* characters between the bars */

/* One table line: the text padded to SUM_WIDTH and wrapped in bars. */
__attribute__((format(printf, 3, 4))) static void sum_row(st_sink_fn sink, void *ctx, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    st_linef(sink, ctx, "|%-*s|", SUM_WIDTH, text);
}

/* A rule of `ch` across the table. */
static void sum_rule(st_sink_fn sink, void *ctx, char ch)
{
    char rule[SUM_WIDTH + 1];
    memset(rule, ch, SUM_WIDTH);
    rule[SUM_WIDTH] = '\0';
    st_linef(sink, ctx, "|%s|", rule);
}

/* Python's floor division by a positive divisor. */
static int64_t floor_div(int64_t v, int64_t d)
{
    int64_t q = v / d;
    return (v % d != 0 && v < 0) ? q - 1 : q;
}

typedef void (*sum_fmt_fn)(char *out, size_t len, int64_t v, int64_t pref);

/* A column's units: each `base` times the one before; a value takes the
 * largest that keeps its row's reference value (pref) below `limit`. */
typedef struct sum_scale_s {
    const char *const *unit;
    size_t nunits;
    int64_t base;
    double limit;
    int width;        /* of the number */
    const char *tail; /* after the unit */
} sum_scale_t;

static void fmt_scaled(char *out, size_t len, int64_t v, int64_t pref, const sum_scale_t *sc)
{
    size_t u = 0;
    double p = (double)pref;
    while (u + 1 < sc->nunits && !(p < sc->limit)) {
        u++;
        v = floor_div(v, sc->base);
        p /= (double)sc->base;
    }
    snprintf(out, len, "%*lld %s%s", sc->width, (long long)v, sc->unit[u], sc->tail);
}

static void fmt_bytes(char *out, size_t len, int64_t v, int64_t pref)
{
    static const char *const unit[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
    static const sum_scale_t sc = {unit, sizeof unit / sizeof unit[0], 1024, 768.0 * 1024.0, 6, ""};
    fmt_scaled(out, len, v, pref, &sc);
}

static void fmt_count(char *out, size_t len, int64_t v, int64_t pref)
{
    static const char *const unit[] = {" ", "K", "M"};
    static const sum_scale_t sc = {unit, sizeof unit / sizeof unit[0], 1000, 750.0 * 1000.0, 7, " "};
    fmt_scaled(out, len, v, pref, &sc);
}

/* current, peak, allocated, freed of one stat, as the table's columns. */
static void stat_cols(const core_stat_t *s, int64_t col[4])
{
    col[0] = s->current;
    col[1] = s->peak;
    col[2] = (int64_t)s->allocated;
    col[3] = (int64_t)s->freed;
}

static void metric_row(st_sink_fn sink, void *ctx, const char *name, const int64_t col[4], const int64_t pref[4],
                       sum_fmt_fn fmt)
{
    char c[4][32];
    for (int i = 0; i < 4; i++)
        fmt(c[i], sizeof c[i], col[i], pref[i]);
    sum_row(sink, ctx, " %-21s | %s | %s | %s | %s ", name, c[0], c[1], c[2], c[3]);
}

/* A row group: the "all" row, then the large and small pool rows, each
 * column scaled by the "all" row's value. */
static void metric_group(st_sink_fn sink, void *ctx, const char *name, const core_stat_t arr[CORE_POOL_CLASSES],
                         sum_fmt_fn fmt)
{
    int64_t all[4], col[4];
    sum_rule(sink, ctx, '-');
    stat_cols(&arr[CORE_POOL_ALL], all);
    metric_row(sink, ctx, name, all, all, fmt);
    stat_cols(&arr[CORE_POOL_LARGE], col);
    metric_row(sink, ctx, "      from large pool", col, all, fmt);
    stat_cols(&arr[CORE_POOL_SMALL], col);
    metric_row(sink, ctx, "      from small pool", col, all, fmt);
}

static void metric_plain(st_sink_fn sink, void *ctx, const char *name, const core_stat_t *s)
{
    int64_t col[4];
    sum_rule(sink, ctx, '-');
    stat_cols(s, col);
    metric_row(sink, ctx, name, col, col, fmt_count);
}

static void sum_table(int device, const core_stats_t *s, st_sink_fn sink, void *ctx)
{
    sum_rule(sink, ctx, '=');
    sum_row(sink, ctx, " %16s cucache memory summary, device ID %-17d", "", device);
    sum_rule(sink, ctx, '-');
    sum_row(sink, ctx, "  %9s CUDA OOMs: %-12llu | %6s cudaMalloc retries: %-8llu  ", "",
            (unsigned long long)s->num_ooms, "", (unsigned long long)s->num_alloc_retries);
    sum_rule(sink, ctx, '=');
    sum_row(sink, ctx, "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");
    metric_group(sink, ctx, "Allocated memory", s->allocated_bytes, fmt_bytes);
    metric_group(sink, ctx, "Active memory", s->active_bytes, fmt_bytes);
    metric_group(sink, ctx, "Requested memory", s->requested_bytes, fmt_bytes);
    metric_group(sink, ctx, "GPU reserved memory", s->reserved_bytes, fmt_bytes);
    metric_group(sink, ctx, "Non-releasable memory", s->inactive_split_bytes, fmt_bytes);
    metric_group(sink, ctx, "Allocations", s->allocation, fmt_count);
    metric_group(sink, ctx, "Active allocs", s->active, fmt_count);
    metric_group(sink, ctx, "GPU reserved segments", s->segment, fmt_count);
    metric_group(sink, ctx, "Non-releasable allocs", s->inactive_split, fmt_count);
    metric_plain(sink, ctx, "Oversize allocations", &s->oversize_allocations);
    metric_plain(sink, ctx, "Oversize GPU segments", &s->oversize_segments);
    sum_rule(sink, ctx, '=');
}

/* ------------------------------------------------------------------------
 * cucache's lines
 * ---------------------------------------------------------------------- */

/* num / den in percent with one decimal; "n/a" when den is 0. */
static void fmt_pct(char *out, size_t len, uint64_t num, uint64_t den)
{
    if (!den) {
        snprintf(out, len, "n/a");
        return;
    }
    unsigned long long pm = (unsigned long long)((double)num * 1000.0 / (double)den + 0.5);
    snprintf(out, len, "%llu.%llu%%", pm / 10, pm % 10);
}

/* Nanoseconds as "12.345 ms", or "3.210 s" from a second up. */
static void fmt_ns(char *out, size_t len, uint64_t ns)
{
    unsigned long long v = ns;
    if (v >= 1000000000ull)
        snprintf(out, len, "%llu.%03llu s", v / 1000000000ull, v / 1000000ull % 1000);
    else
        snprintf(out, len, "%llu.%03llu ms", v / 1000000ull, v / 1000ull % 1000);
}

static const char *plural(uint64_t n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

/* w: this process's waits for its neighbours on the device (registry.h). */
static void sum_cucache(const core_stats_t *s, const st_reg_waits_t *w, st_sink_fn sink, void *ctx)
{
    char p[24], t[32];
    uint64_t allocs = s->allocation[CORE_POOL_ALL].allocated;
    fmt_pct(p, sizeof p, s->num_cache_hits, allocs);
    st_linef(sink, ctx, "cache hit rate: %s (%llu of %llu %s served from cached blocks)", p,
             (unsigned long long)s->num_cache_hits, (unsigned long long)allocs,
             plural(allocs, "allocation", "allocations"));
    uint64_t avoided = allocs > s->num_device_alloc ? allocs - s->num_device_alloc : 0;
    st_linef(sink, ctx, "device allocations avoided: %llu (%llu %s, %llu device %s)", (unsigned long long)avoided,
             (unsigned long long)allocs, plural(allocs, "allocation", "allocations"),
             (unsigned long long)s->num_device_alloc, plural(s->num_device_alloc, "allocation", "allocations"));
    st_linef(sink, ctx, "device allocations: %llu, device frees: %llu", (unsigned long long)s->num_device_alloc,
             (unsigned long long)s->num_device_free);
    if (s->num_fallback_served)
        st_linef(sink, ctx,
                 "served outside the cache: %llu %s cucache could not serve, the CUDA runtime's own allocator did "
                 "(not counted as CUDA OOMs: the program got its memory)",
                 (unsigned long long)s->num_fallback_served,
                 plural(s->num_fallback_served, "allocation", "allocations"));
    if (s->num_yields_given || s->num_yields_received) {
        char given[32], got[32];
        st_fmt_size(given, sizeof given, s->yield_bytes_given);
        st_fmt_size(got, sizeof got, s->yield_bytes_received);
        st_linef(sink, ctx,
                 "yields: gave %s of idle cache back to other processes on this GPU (%llu %s); received %s for "
                 "%llu failed %s (CUCACHE_YIELD)",
                 given, (unsigned long long)s->num_yields_given, plural(s->num_yields_given, "ask", "asks"), got,
                 (unsigned long long)s->num_yields_received,
                 plural(s->num_yields_received, "allocation", "allocations"));
    }
    if (w->asks) {
        char total[32], longest[32], given[32];
        fmt_ns(total, sizeof total, w->total_ns);
        fmt_ns(longest, sizeof longest, w->max_ns);
        st_fmt_size(given, sizeof given, w->given);
        st_linef(sink, ctx,
                 "yield waits: %s waiting for other processes on this GPU to give idle cache back, in %llu %s (the "
                 "longest %s; CUCACHE_YIELD_MS); %s given while it waited",
                 total, (unsigned long long)w->asks, plural(w->asks, "ask", "asks"), longest, given);
    }
    fmt_ns(t, sizeof t, s->fence_wait_ns);
    st_linef(sink, ctx, "fences: %llu recorded, %llu handed out before they completed (the device ordered after them), "
             "%llu %s for a fence or event, %s waiting",
             (unsigned long long)s->num_fences, (unsigned long long)s->num_fence_hand_outs,
             (unsigned long long)s->num_fence_waits, plural(s->num_fence_waits, "wait", "waits"), t);
    if (s->num_hand_out_stops)
        st_linef(sink, ctx,
                 "hand-outs stopped: a second CUDA context appeared in the process (or the CPU shares this device's "
                 "memory), which the device's ordering does not reach; later frees waited for their fences");
    if (s->num_shared_pages)
        st_linef(sink, ctx,
                 "shared pages: %llu %s mapped a second time to start or end a request in another block's page "
                 "(expandable_share_pages), no memory of %s own",
                 (unsigned long long)s->num_shared_pages, plural(s->num_shared_pages, "page", "pages"),
                 plural(s->num_shared_pages, "its", "their"));
    int64_t live = s->allocation[CORE_POOL_ALL].current;
    if (live <= 0) {
        st_linef(sink, ctx, "verdict: everything freed");
        return;
    }
    int64_t bytes = s->allocated_bytes[CORE_POOL_ALL].current;
    char size[32];
    st_fmt_size(size, sizeof size, bytes > 0 ? (uint64_t)bytes : 0);
    st_linef(sink, ctx, "verdict: %lld %s in %lld %s still live (%s)", (long long)bytes,
             plural((uint64_t)bytes, "byte", "bytes"), (long long)live,
             plural((uint64_t)live, "allocation", "allocations"), size);
}

void st_summary(int device, const core_stats_t *s, st_sink_fn sink, void *ctx)
{
    sum_table(device, s, sink, ctx);
    st_reg_waits_t w = st_reg_waits(device);
    sum_cucache(s, &w, sink, ctx);
}

/* ------------------------------------------------------------------------
 * The leak check at exit
 * ---------------------------------------------------------------------- */

typedef struct leak_group_s {
    size_t size, count;
    uint64_t first; /* the lowest allocation number */
    uint32_t born;  /* its time (core_block_info_t.born; 0: not stamped) */
} leak_group_t;

static int leak_by_size(const void *a, const void *b)
{
    const core_block_info_t *x = *(const core_block_info_t *const *)a, *y = *(const core_block_info_t *const *)b;
    return x->requested != y->requested ? (x->requested > y->requested ? -1 : 1)
                                        : (x->number > y->number) - (x->number < y->number);
}

static int leak_by_total(const void *a, const void *b)
{
    const leak_group_t *x = a, *y = b;
    size_t tx = x->size * x->count, ty = y->size * y->count;
    if (tx != ty)
        return tx > ty ? -1 : 1;
    return (x->first > y->first) - (x->first < y->first);
}

enum { LEAK_ROWS = 10 };

/* The groups whose call stacks pass through a kept_rules row (kept.c)
 * moved after the others: returns how many come first (the leaks); kept[i]
 * is the row of group i after the move.  *no_native: a leak's stack has no
 * native frames, so whether a library keeps it is not known. */
static size_t leak_split(st_site_group_t *g, size_t ng, const st_kept_t **kept, bool *no_native)
{
    size_t nleak = 0, nkept = 0;
    st_site_group_t *held = hostalloc_malloc(ng * sizeof *held);
    if (!held)
        return ng; /* no host memory: every group listed as live, as before */
    *no_native = false;
    for (size_t i = 0; i < ng; i++) {
        bool native = false;
        const st_kept_t *k = st_kept_site(g[i].site, &native);
        if (k) {
            kept[nkept] = k;
            held[nkept++] = g[i];
        } else {
            *no_native |= !native && g[i].site >= ST_STACK_FIRST;
            g[nleak++] = g[i];
        }
    }
    memcpy(g + nleak, held, nkept * sizeof *held);
    memmove(kept + nleak, kept, nkept * sizeof *kept);
    hostalloc_free(held);
    return nleak;
}

/* The groups a library keeps for the life of the process: not leaks. */
static void leak_kept_lines(const st_site_group_t *g, const st_kept_t *const *kept, size_t ng, uint64_t allocs,
                            st_sink_fn sink, void *ctx)
{
    for (size_t i = 0; i < ng; i++) {
        char total[32], first[96] = "", frame[512] = "";
        st_fmt_size(total, sizeof total, g[i].bytes);
        if (allocs)
            st_fmt_first(first, sizeof first, g[i].first, allocs, g[i].born);
        st_frame_t f[ST_STACK_FRAMES_MAX];
        size_t nf = st_stack_frames(g[i].site, f, ST_STACK_FRAMES_MAX);
        for (size_t k = 0; k < nf && !frame[0]; k++)
            if (st_kept_frames(&f[k], 1) == kept[i])
                st_frame_text(&f[k], frame, sizeof frame);
        st_linef(sink, ctx, "  %zu %s = %s%s: kept by %s, %s; allocated in %s", g[i].count,
                 plural(g[i].count, "allocation", "allocations"), total, first, kept[i]->owner, kept[i]->what, frame);
    }
}

/* Returns the leaks listed (the allocations no kept_rules row claims). */
static size_t leak_by_site(int device, st_site_group_t *g, size_t ng, uint64_t allocs, st_sink_fn sink, void *ctx)
{
    const st_kept_t **kept = hostalloc_malloc(ng * sizeof *kept);
    bool no_native = false;
    size_t nleak = kept ? leak_split(g, ng, kept, &no_native) : ng;
    size_t n = 0, bytes = 0, kn = 0, kbytes = 0;
    for (size_t i = 0; i < ng; i++) {
        if (i < nleak)
            n += g[i].count, bytes += g[i].bytes;
        else
            kn += g[i].count, kbytes += g[i].bytes;
    }
    char b[32];
    if (nleak) {
        if (no_native)
            st_linef(sink, ctx,
                     "leak check: GPU %d: call stacks of Python frames only cannot tell memory a library keeps for the "
                     "life of the process (PyTorch's cuBLAS workspaces) from a leak; CUCACHE_STACKS=python+native "
                     "tells",
                     device);
        st_fmt_size(b, sizeof b, bytes);
        st_linef(sink, ctx, "leak check: GPU %d: %s in %zu %s still live at exit, by call site:", device, b, n,
                 plural(n, "allocation", "allocations"));
        st_site_lines(g, nleak, LEAK_ROWS, allocs, sink, ctx);
    }
    if (nleak < ng) {
        st_fmt_size(b, sizeof b, kbytes);
        st_linef(sink, ctx,
                 "leak check: GPU %d: %s%s in %zu %s still live at exit, kept for the life of the process "
                 "by the library that made %s, not leaks:",
                 device, nleak ? "" : "no leaks; ", b, kn, plural(kn, "allocation", "allocations"),
                 plural(kn, "it", "them"));
        leak_kept_lines(g + nleak, kept + nleak, ng - nleak, allocs, sink, ctx);
    }
    hostalloc_free(kept);
    return n;
}

size_t st_leak_report(int device, const core_layout_t *l, uint64_t allocs, st_sink_fn sink, void *ctx)
{
    size_t n = 0, bytes = 0;
    for (size_t i = 0; i < l->nblocks; i++)
        if (l->blocks[i].state == CORE_BLOCK_ALLOCATED)
            n++, bytes += l->blocks[i].requested;
    if (!n)
        return 0;
    char b[32], t[32], f[32];
    st_fmt_size(b, sizeof b, bytes);
    st_site_group_t *sites;
    size_t nsites = st_group_by_site(l, &sites);
    if (nsites) {
        size_t leaks = leak_by_site(device, sites, nsites, allocs, sink, ctx);
        hostalloc_free(sites);
        return leaks;
    }
    st_linef(sink, ctx,
             "leak check: GPU %d: without call stacks cucache cannot tell memory a library keeps for the life of the "
             "process (PyTorch's cuBLAS workspaces) from a leak; CUCACHE_STACKS=native tells",
             device);
    st_linef(sink, ctx, "leak check: GPU %d: %s in %zu %s still live at exit, by requested size:", device, b, n,
             plural(n, "allocation", "allocations"));
    const core_block_info_t **live = st_live_blocks(l, n, leak_by_size);
    leak_group_t *g = hostalloc_malloc(n * sizeof *g);
    if (!live || !g) {
        st_linef(sink, ctx, "  (no host memory to group them)");
        hostalloc_free(live);
        hostalloc_free(g);
        return n;
    }
    size_t ng = 0;
    for (size_t i = 0; i < n; i++) {
        if (ng && g[ng - 1].size == live[i]->requested)
            g[ng - 1].count++;
        else
            g[ng++] = (leak_group_t){live[i]->requested, 1, live[i]->number, live[i]->born};
    }
    qsort(g, ng, sizeof *g, leak_by_total);
    size_t rest = 0, rest_bytes = 0;
    for (size_t i = 0; i < ng; i++) {
        if (i >= LEAK_ROWS) {
            rest += g[i].count, rest_bytes += g[i].size * g[i].count;
            continue;
        }
        st_fmt_size(t, sizeof t, g[i].size * g[i].count);
        st_fmt_size(f, sizeof f, g[i].size);
        char first[96];
        st_fmt_first(first, sizeof first, g[i].first, allocs, g[i].born);
        st_linef(sink, ctx, "  %8zu x %10s (%zu bytes) = %s%s", g[i].count, f, g[i].size, t, first);
    }
    if (rest) {
        st_fmt_size(t, sizeof t, rest_bytes);
        st_linef(sink, ctx, "  ... %zu more %s: %zu %s, %s", ng - LEAK_ROWS, plural(ng - LEAK_ROWS, "size", "sizes"),
                 rest, plural(rest, "allocation", "allocations"), t);
    }
    hostalloc_free(live);
    hostalloc_free(g);
    return n;
}
