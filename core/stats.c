/*
 * Counters: updates from the allocation paths, copies, resets, and the flat
 * listing with PyTorch's key names.
 */
#include <stdio.h>
#include <string.h>

#include "types.h"

void stats_sum_all(core_stats_t *s)
{
#define SUM_ALL(name)                                                                                                  \
    s->name[CORE_POOL_ALL].current = stat_all_current(s->name);                                                        \
    s->name[CORE_POOL_ALL].allocated = s->name[CORE_POOL_SMALL].allocated + s->name[CORE_POOL_LARGE].allocated;        \
    s->name[CORE_POOL_ALL].freed = s->name[CORE_POOL_SMALL].freed + s->name[CORE_POOL_LARGE].freed;
    CORE_STAT_ARRAYS(SUM_ALL)
#undef SUM_ALL
}

void core_stats_get(core_dev_t *d, core_stats_t *out)
{
    dev_lock(d);
    *out = d->stats;
    out->max_split_size = d->conf.max_split_size;
    dev_unlock(d);
    stats_sum_all(out);
}

static void reset_peak(core_stat_t *s)
{
    s->peak = s->current;
}

/* The all entries' peaks, from the classes' currents (their own currents
 * are not kept). */
static void reset_all_peaks(core_stats_t *s)
{
#define RESET_ALL_PEAK(name) s->name[CORE_POOL_ALL].peak = stat_all_current(s->name);
    CORE_STAT_ARRAYS(RESET_ALL_PEAK)
#undef RESET_ALL_PEAK
}

static void reset_accumulated(core_stat_t *s)
{
    s->allocated = s->freed = 0;
}

/* Applies reset to every gauge (per pool class, and the plain ones). */
static void reset_gauges(core_stats_t *s, void (*reset)(core_stat_t *))
{
#define RESET_ARRAY(name)                                                                                              \
    for (int i = 0; i < CORE_POOL_CLASSES; i++)                                                                        \
        reset(&s->name[i]);
    CORE_STAT_ARRAYS(RESET_ARRAY)
#undef RESET_ARRAY
#define RESET_PLAIN(name) reset(&s->name);
    CORE_STAT_PLAIN(RESET_PLAIN)
#undef RESET_PLAIN
}

void core_stats_reset_peaks(core_dev_t *d)
{
    dev_lock(d);
    reset_gauges(&d->stats, reset_peak);
    reset_all_peaks(&d->stats);
    dev_unlock(d);
}

void core_stats_reset_accumulated(core_dev_t *d)
{
    dev_lock(d);
    core_stats_t *s = &d->stats;
    reset_gauges(s, reset_accumulated);
#define RESET_COUNTER(name) s->name = 0;
    CORE_STAT_COUNTERS(RESET_COUNTER)
#undef RESET_COUNTER
    dev_unlock(d);
}

static void emit_stat(const char *name, const char *pool, const core_stat_t *st,
                      void (*fn)(void *, const char *, int64_t), void *ctx)
{
    static const char *const metric[] = {"current", "peak", "allocated", "freed"};
    const int64_t v[] = {st->current, st->peak, (int64_t)st->allocated, (int64_t)st->freed};
    char key[96];
    for (int m = 0; m < 4; m++) {
        if (pool)
            snprintf(key, sizeof key, "%s.%s.%s", name, pool, metric[m]);
        else
            snprintf(key, sizeof key, "%s.%s", name, metric[m]);
        fn(ctx, key, v[m]);
    }
}

void core_stats_foreach(const core_stats_t *s, void (*fn)(void *ctx, const char *key, int64_t value), void *ctx)
{
    static const char *const pools[CORE_POOL_CLASSES] = {"all", "small_pool", "large_pool"};
#define EMIT_ARRAY(name)                                                                                               \
    for (int i = 0; i < CORE_POOL_CLASSES; i++)                                                                        \
        emit_stat(#name, pools[i], &s->name[i], fn, ctx);
    CORE_STAT_ARRAYS(EMIT_ARRAY)
#undef EMIT_ARRAY
#define EMIT_PLAIN(name) emit_stat(#name, NULL, &s->name, fn, ctx);
    CORE_STAT_PLAIN(EMIT_PLAIN)
#undef EMIT_PLAIN
#define EMIT_COUNTER(name) fn(ctx, #name, (int64_t)s->name);
    CORE_STAT_COUNTERS(EMIT_COUNTER)
#undef EMIT_COUNTER
    fn(ctx, "max_split_size", (int64_t)s->max_split_size);
}

void core_set_observer(core_dev_t *d, core_observer_fn fn, void *ctx)
{
    dev_lock(d);
    d->observer = fn;
    d->observer_ctx = ctx;
    dev_unlock(d);
}
