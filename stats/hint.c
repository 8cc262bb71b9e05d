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

/* Items of CUCACHE_CONF text are split by conf_tokenize (core/conf.h), the
 * tokenizer conf_parse uses; the texts here are the user's, which conf_parse
 * accepted, and the what-if's candidates. */

typedef struct item_find_s {
    const char *key, *val; /* the item looked for; val NULL: any value */
    size_t klen, vlen;
} item_find_t;

/* conf_tokenize's callback: 1 (stop) at the item looked for. */
static int item_is(void *ctx, const char *key, size_t klen, const char *val, size_t vlen, size_t col)
{
    const item_find_t *f = ctx;
    (void)col;
    return klen == f->klen && memcmp(key, f->key, klen) == 0 &&
           (!f->val || (vlen == f->vlen && memcmp(val, f->val, vlen) == 0));
}

/* Whether the items of `text` set key[0..kl). */
static bool sets_key(const char *text, const char *key, size_t kl)
{
    item_find_t f = {key, NULL, kl, 0};
    return conf_tokenize(text, item_is, &f, NULL, 0) == 1;
}

/* conf_tokenize's callback: 1 (stop) at an item of a that b lacks. */
static int item_not_in(void *ctx, const char *key, size_t klen, const char *val, size_t vlen, size_t col)
{
    item_find_t f = {key, val, klen, vlen};
    (void)col;
    return conf_tokenize(ctx, item_is, &f, NULL, 0) == 1 ? 0 : 1;
}

/* Whether every item of a is one of b's. */
static bool items_within(const char *a, const char *b)
{
    return conf_tokenize(a, item_not_in, (void *)b, NULL, 0) == 0;
}

typedef struct conf_keep_s {
    const char *add; /* the suggestion's items */
    char *value;     /* the items kept so far, each followed by ',' */
    size_t len, k;
} conf_keep_t;

/* conf_tokenize's callback: keeps the item as the user wrote it (from its
 * key to the end of its value, or to its ':' when the value is empty)
 * unless the suggestion sets its key. */
static int keep_item(void *ctx, const char *key, size_t klen, const char *val, size_t vlen, size_t col)
{
    conf_keep_t *c = ctx;
    (void)col;
    if (sets_key(c->add, key, klen))
        return 0;
    const char *end = vlen ? val + vlen : (const char *)memchr(key + klen, ':', (size_t)(val - key - klen)) + 1;
    conf_cat(c->value, c->len, &c->k, key, (size_t)(end - key));
    conf_cat(c->value, c->len, &c->k, ",", 1);
    return 0;
}

/*
 * "CUCACHE_CONF=<the user's text>,<add>": the user's items in their order,
 * less any that sets add's key (the suggestion replaces it; conf_parse
 * would take the last one anyway, this only reads better), then add.  Text
 * the tokenizer refuses (cut short by the report's copy) is kept whole
 * before add.  Single-quoted when the shell would read something in it
 * (brackets, '>', spaces).
 */
static void conf_with(const rep_t *r, const char *add, char *out, size_t len)
{
    const char *t = r->in->conf_text ? r->in->conf_text : "";
    size_t k;
    char value[1280] = "";
    conf_keep_t keep = {add, value, sizeof value, 0};
    if (conf_tokenize(t, keep_item, &keep, NULL, 0) != 0) {
        keep.k = 0;
        value[0] = '\0';
        conf_cat(value, sizeof value, &keep.k, t, strlen(t));
        conf_cat(value, sizeof value, &keep.k, ",", 1);
    }
    k = keep.k;
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

/* Where the user finds who holds it: the report's own list when NVML gave
 * one, the host's nvidia-smi when NVML here listed nobody. */
static const char *outside_who(const rep_t *r)
{
    const st_gpu_procs_t *g = r->in->gpu;
    if (!g || g->unavailable)
        return "nvidia-smi lists the processes";
    if (!g->n)
        return "NVML lists no process here; nvidia-smi on the host lists them";
    return "the processes are listed above";
}

static void hint_outside(const rep_t *r, st_sink_fn sink, void *ctx)
{
    st_linef(sink, ctx,
             "hint: memory held outside cucache (%s) is more than what was missing (%s): other processes on GPU %d, or "
             "this process through paths cucache does not cache; no CUCACHE_CONF setting frees it (%s)",
             sz(r->outside).s, sz(r->shortfall).s, r->in->device, outside_who(r));
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
    bool chunk = r->conf.strategy == CONF_STRATEGY_PREALLOCATE && o->pool_id == 0;
    st_linef(sink, ctx,
             "hint: fragmentation%s: %s is free in the blocks this request could use, but the largest is %s, less "
             "than the %s needed",
             chunk ? " inside the preallocated chunk" : "", sz(u->free_bytes).s, sz(u->free_largest).s,
             sz(o->rounded).s);
    size_t waste = sub0(r->all.live_bytes, r->all.live_requested);
    if (waste && waste >= r->all.live_bytes / 8 && divs_in_use(r) > 1)
        st_linef(sink, ctx, "hint: rounding wastes %s of the %s live (roundup_power2_divisions rounds to 1/%u steps)",
                 sz(waste).s, sz(r->all.live_bytes).s, divs_in_use(r));
}

static void hint_live(const rep_t *r, st_sink_fn sink, void *ctx)
{
    const core_oom_t *o = r->oom;
    if (r->shortfall)
        st_linef(sink, ctx,
                 "hint: the memory is in use: live allocations hold %s of the %s cucache holds, and the device lacks "
                 "%s for this request",
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


static int by_peak(const void *a, const void *b)
{
    const core_whatif_row_t *x = *(const core_whatif_row_t *const *)a, *y = *(const core_whatif_row_t *const *)b;
    if (x->peak_reserved != y->peak_reserved)
        return x->peak_reserved < y->peak_reserved ? -1 : 1;
    return x < y ? -1 : x > y; /* the order tried: single settings first */
}

/* What the replay covered: "the last 12,345 allocator calls of GPU 0 (from
 * the 80 allocations live before them)" or "all 1,234 ...". */
static void window_text(const rep_t *r, const core_whatif_t *w, char *out, size_t len)
{
    char n[32];
    st_fmt_count(n, sizeof n, w->events);
    if (w->whole)
        snprintf(out, len, "all %s allocator calls of GPU %d", n, r->in->device);
    else
        snprintf(out, len, "the last %s allocator calls of GPU %d (from the %zu allocations, %s, live before them)", n,
                 r->in->device, w->prelude, sz(w->prelude_bytes).s);
}

static void rep_whatif(const rep_t *r, st_sink_fn sink, void *ctx)
{
    const core_whatif_t *w = r->in->whatif;
    if (!w)
        return;
    if (w->status == CORE_WHATIF_NO_HISTORY) {
        st_linef(sink, ctx,
                 "hint: settings are suggested only when replaying the job's history proves them, and this failure "
                 "is not in the history (CUCACHE_HISTORY=0, or it wrapped past it)");
        return;
    }
    if (w->status != CORE_WHATIF_RAN) {
        st_linef(sink, ctx,
                 "hint: no setting is suggested: the replay of the history could not run (no host memory "
                 "or thread)");
        return;
    }
    char win[256], secs[32];
    window_text(r, w, win, sizeof win);
    snprintf(secs, sizeof secs, "%.2f s", w->seconds);
    size_t need = w->live_bytes + w->request;
    if (w->beyond) {
        if (w->limited)
            rep_line(sink, ctx,
                     "hint: no setting serves it within the limit: live allocations (%s) and this request (%s) "
                     "need %s, more than the %s the limit allows",
                     sz(w->live_bytes).s, sz(w->request).s, sz(need).s, sz(w->capacity).s);
        else
            rep_line(sink, ctx,
                     "hint: no setting can serve it: live allocations (%s) and this request (%s) need %s, more than "
                     "the %s cucache could have on GPU %d; the job needs less memory at once (a smaller batch, fewer "
                     "tensors kept alive)",
                     sz(w->live_bytes).s, sz(w->request).s, sz(need).s, sz(w->capacity).s, r->in->device);
        return;
    }
    if (!w->reproduced) {
        if (!w->rows[0].tried)
            st_linef(sink, ctx,
                     "hint: no setting is suggested: replaying %s did not finish in the time budget (%s; "
                     "CUCACHE_WHATIF_MS raises it)",
                     win, secs);
        else
            st_linef(sink, ctx,
                     "hint: no setting is suggested: replaying %s on an idle device with the %s cucache could have "
                     "does not fail here under the current settings, so the failure comes from what the replay "
                     "cannot see (work still queued on the device, memory taken outside cucache since)",
                     win, sz(w->capacity).s);
        return;
    }
    const core_whatif_row_t *fit[CORE_WHATIF_MAX];
    size_t nfit = 0, untried = 0, unchecked = 0;
    for (size_t i = 1; i < w->nrows; i++) {
        if (w->rows[i].fits)
            fit[nfit++] = &w->rows[i];
        untried += !w->rows[i].tried;
        unchecked += w->rows[i].unchecked;
    }
    char cut[160] = "";
    if (w->cut_short)
        snprintf(cut, sizeof cut,
                 " (the time budget ran out after %s: %zu of %zu settings not tried; "
                 "CUCACHE_WHATIF_MS raises it)",
                 secs, untried, w->nrows - 1);
    if (nfit) {
        qsort(fit, nfit, sizeof *fit, by_peak);
        /* a setting that only adds items to one already listed, at no lower
         * peak, says nothing more: left out (the minimal change is named) */
        size_t kept = 0, all = nfit;
        for (size_t i = 0; i < nfit; i++) {
            bool extra = false;
            for (size_t j = 0; j < kept && !extra; j++)
                extra = items_within(fit[j]->change, fit[i]->change) && fit[j]->peak_reserved <= fit[i]->peak_reserved;
            if (!extra)
                fit[kept++] = fit[i];
        }
        nfit = kept;
        char more[96] = "";
        if (unchecked)
            snprintf(more, sizeof more, " (and %zu more on an idle device, not checked on a busy one)", unchecked);
        rep_line(sink, ctx,
                 "hint: replaying %s on the %s cucache could have: the current settings fail at this request%s, and "
                 "%zu of %zu settings tried serve every allocation and this request, whether the device is idle or "
                 "busy%s%s:",
                 win, sz(w->capacity).s,
                 w->reproduced_busy ? " (on a busy device, where frees wait for the work queued before them)" : "",
                 all, w->nrows - 1, more, cut);
        for (size_t i = 0; i < nfit && i < CORE_WHATIF_NAMED; i++) {
            char conf[1400];
            conf_with(r, fit[i]->change, conf, sizeof conf);
            rep_line(sink, ctx, "hint:   %s (peak reserved %s in the replay)", conf, sz(fit[i]->peak_reserved).s);
        }
        rep_line(sink, ctx,
                 "hint: the replay ends at this request: what the job allocates after it is not known, and may need "
                 "more than any setting gives; run again with the setting to see");
        return;
    }
    rep_line(sink, ctx,
             "hint: none of the %zu settings tried serves every allocation and this request in a replay of %s%s; "
             "live allocations (%s) and this request (%s) need %s of the %s cucache could have: the rest is lost "
             "to how the blocks lie (allocating the largest buffers first, or fewer distinct sizes, helps)",
             w->nrows - 1, win, cut, sz(w->live_bytes).s, sz(w->request).s, sz(need).s, sz(w->capacity).s);
}

static void hint_error(const rep_t *r, st_sink_fn sink, void *ctx)
{
    (void)r;
    st_linef(sink, ctx,
             "hint: the device (or cucache's host memory) failed with an error other than out of memory: this is "
             "not a shortage of device memory, and no CUCACHE_CONF setting changes it");
}

/* The hint of each cause, one row each; the what-if follows every one but
 * an error's (no setting changes an error). */
static const struct {
    void (*hint)(const rep_t *r, st_sink_fn sink, void *ctx);
    bool whatif;
} hints[] = {
    [CAUSE_ERROR] = {hint_error, false},
    [CAUSE_LIMIT] = {hint_limit, true},
    [CAUSE_OUTSIDE] = {hint_outside, true},
    [CAUSE_FRAGMENTED] = {hint_fragmented, true},
    [CAUSE_LIVE] = {hint_live, true},
};

void rep_hint(const rep_t *r, st_sink_fn sink, void *ctx)
{
    int cause = rep_cause(r);
    hints[cause].hint(r, sink, ctx);
    if (hints[cause].whatif)
        rep_whatif(r, sink, ctx);
}

