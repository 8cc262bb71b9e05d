/*
 * The OOM report's hint (report.h): which cause the facts point to, and the
 * CUCACHE_CONF to try.  The rules are in the order they are tried; the
 * first that holds gives the hint.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

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

void rep_hint(const rep_t *r, st_sink_fn sink, void *ctx)
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

