/*
 * The OOM report's parts, shared by report.c (the facts, the sentence, the
 * detail, the map) and hint.c (the cause and the setting to try).  Internal
 * to stats/.
 */
#ifndef CUCACHE_STATS_REPORT_H
#define CUCACHE_STATS_REPORT_H

#include <stdio.h>

#include "st.h"

#define MiB ((size_t)1 << 20)

enum {
    REP_SIZE_ROWS = 8,     /* live allocation sizes listed before "N more sizes" */
    REP_SITE_ROWS = 5,     /* call sites (CUCACHE_STACKS) listed before "N more call sites" */
    REP_MAP_SEGS = 16,     /* segment lines in the map before "N more segments" */
    REP_BAR = 32,          /* characters in a segment's bar */
    REP_PRIVATE_POOLS = 8, /* private pools listed before "N more private pools" */
    REP_PROC_ROWS = 16,    /* processes on the device listed before "N more processes" */
    REP_STALE_MS = 1000,   /* a neighbour's figures' age is given in s from this on, in ms below */
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

static inline rep_sz_t sz(uint64_t bytes)
{
    rep_sz_t r;
    st_fmt_size(r.s, sizeof r.s, bytes);
    return r;
}

/* num / den as a percentage with one decimal ("93.8%"), "n/a" when den is 0. */
typedef struct rep_pct_s {
    char s[24];
} rep_pct_t;

static inline rep_pct_t pct(uint64_t num, uint64_t den)
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

static inline const char *plural(size_t n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

static inline size_t sub0(size_t a, size_t b)
{
    return a > b ? a - b : 0;
}

/* The sink with a line longer than st_linef's (hints quote CUCACHE_CONF). */
void rep_line(st_sink_fn sink, void *ctx, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

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

/* The hint: the cause (the first rule that holds) and what to try. */
void rep_hint(const rep_t *r, st_sink_fn sink, void *ctx);

#endif
