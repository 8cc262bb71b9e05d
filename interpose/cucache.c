/*
 * cucache's public API (include/cucache/cucache.h): statistics, empty cache
 * and private pools, for programs and Python (ctypes) running under
 * cucache.  Each call names a device ordinal; a device without allocator
 * state answers -1.
 */
#include <string.h>

#include "contexts.h"
#include "cucache/cucache.h"
#include "diag.h"
#include "env.h"
#include "hook.h"
#include "hostalloc.h"
#include "log.h"
#include "st.h"
#include "state.h"
#include "stats.h"
#include "submit.h"

#define CUCACHE_EXPORT __attribute__((visibility("default")))

static core_dev_t *device_core(int device)
{
    if ((unsigned)device >= HOOK_MAX_DEVICES)
        return NULL;
    return hook_dev_core(&hook_devs[device]);
}

CUCACHE_EXPORT const char *cucache_version(void)
{
    return CUCACHE_VERSION;
}

CUCACHE_EXPORT const char *cucache_hostalloc_backend(void)
{
    return hostalloc_backend();
}

typedef struct foreach_s {
    void (*fn)(void *ctx, const char *key, int64_t value);
    void *ctx;
    int count;
} foreach_t;

static void foreach_one(void *ctx, const char *key, int64_t value)
{
    foreach_t *f = ctx;
    f->fn(f->ctx, key, value);
    f->count++;
}

/* The process's keys after the device's: calls that submitted work, as
 * cucache saw them (interpose/submit.c), and whether one may have gone
 * unseen (then every plain free waits behind a fence). */
static void process_keys(void (*fn)(void *ctx, const char *key, int64_t value), void *ctx)
{
    fn(ctx, "num_submissions", (int64_t)hook_submit_count());
    fn(ctx, "submissions_unseen", hook_submit_unseen());
    fn(ctx, "contexts_seen", (int64_t)atomic_load(&hook_contexts_seen));
    fn(ctx, "contexts_many", atomic_load(&hook_many_contexts));
    fn(ctx, "contexts_cached", (int64_t)atomic_load(&hook_contexts_cached));
}

CUCACHE_EXPORT int cucache_stats_foreach(int device, void (*fn)(void *ctx, const char *key, int64_t value), void *ctx)
{
    core_dev_t *d = device_core(device);
    if (!d || !fn)
        return -1;
    core_stats_t s;
    core_stats_get(d, &s);
    foreach_t f = {fn, ctx, 0};
    core_stats_foreach(&s, foreach_one, &f);
    process_keys(foreach_one, &f);
    return f.count;
}

typedef struct find_s {
    const char *key;
    int64_t value;
    bool found;
} find_t;

static void find_one(void *ctx, const char *key, int64_t value)
{
    find_t *f = ctx;
    if (!f->found && strcmp(key, f->key) == 0) {
        f->value = value;
        f->found = true;
    }
}

CUCACHE_EXPORT int cucache_stat(int device, const char *key, int64_t *value)
{
    core_dev_t *d = device_core(device);
    if (!d || !key)
        return -1;
    core_stats_t s;
    core_stats_get(d, &s);
    find_t f = {key, 0, false};
    core_stats_foreach(&s, find_one, &f);
    process_keys(find_one, &f);
    if (!f.found)
        return -1;
    if (value)
        *value = f.value;
    return 0;
}

/* Applies reset to the device's statistics: 0, or -1 for a device with no
 * allocator. */
static int reset_stats(int device, void (*reset)(core_dev_t *))
{
    core_dev_t *d = device_core(device);
    if (!d)
        return -1;
    reset(d);
    return 0;
}

CUCACHE_EXPORT int cucache_reset_peak_stats(int device)
{
    return reset_stats(device, core_stats_reset_peaks);
}

CUCACHE_EXPORT int cucache_reset_accumulated_stats(int device)
{
    return reset_stats(device, core_stats_reset_accumulated);
}

typedef struct text_out_s {
    char *buf;
    size_t len;
    size_t used; /* the whole text's length so far */
} text_out_t;

static void text_out_line(void *ctx, const char *line)
{
    text_out_t *t = ctx;
    size_t n = strlen(line);
    for (size_t i = 0; i <= n; i++) {
        char c = i < n ? line[i] : '\n';
        if (t->used + 1 < t->len)
            t->buf[t->used] = c;
        t->used++;
    }
}

CUCACHE_EXPORT long cucache_memory_summary(int device, char *buf, size_t len)
{
    text_out_t t = {buf, buf ? len : 0, 0};
    if (hook_summary(device, text_out_line, &t) != 0)
        return -1;
    if (t.len > 0)
        t.buf[t.used < t.len ? t.used : t.len - 1] = '\0';
    return (long)t.used;
}

CUCACHE_EXPORT int cucache_snapshot(const char *path)
{
    if (!path)
        path = hook_snapshot_template();
    if (!path) {
        hook_log("cucache_snapshot: no path given and CUCACHE_SNAPSHOT is not set");
        return -1;
    }
    return hook_snapshot(path, -1, "cucache_snapshot");
}

CUCACHE_EXPORT int cucache_record_memory_history(size_t max_entries, int stacks)
{
    char err[512];
    if (stacks < -1 || stacks > 64) {
        hook_log("cucache_record_memory_history: stacks %d is not -1, 0 or a depth from 1 to 64", stacks);
        return -1;
    }
    if (hook_record_history(max_entries, ST_STACKS_NATIVE, stacks, err, sizeof err) != 0) {
        hook_log("cucache_record_memory_history: %s", err);
        return -1;
    }
    return 0;
}

CUCACHE_EXPORT int cucache_record_memory_history_stacks(size_t max_entries, const char *stacks)
{
    char err[512];
    int mode = ST_STACKS_NATIVE, depth = -1;
    if (stacks && hook_stacks_parse(stacks, &mode, &depth, err, sizeof err) != 0) {
        hook_log("cucache_record_memory_history_stacks: %s", err);
        return -1;
    }
    if (hook_record_history(max_entries, mode, depth, err, sizeof err) != 0) {
        hook_log("cucache_record_memory_history_stacks: %s", err);
        return -1;
    }
    return 0;
}

CUCACHE_EXPORT int cucache_set_per_process_memory_fraction(double fraction, int device)
{
    core_dev_t *d = device_core(device);
    if (!d)
        return -1;
    if (core_set_memory_fraction(d, fraction) != 0) {
        hook_log("cucache_set_per_process_memory_fraction(%g, %d): the fraction must be more than 0 and at most 1",
                 fraction, device);
        return -1;
    }
    return 0;
}

CUCACHE_EXPORT int cucache_empty_cache(int device)
{
    core_dev_t *d = device_core(device);
    if (!d)
        return -1;
    core_empty_cache(d, -1);
    return 0;
}

CUCACHE_EXPORT int cucache_pool_create(int device)
{
    hook_dev_t *hd = hook_dev_open(device);
    core_dev_t *d = hd ? hook_dev_core(hd) : NULL;
    return d ? core_pool_create(d) : -1;
}

CUCACHE_EXPORT int cucache_pool_use(int device, int pool_id)
{
    core_dev_t *d = device_core(device);
    return d ? core_pool_use(d, pool_id) : -1;
}

CUCACHE_EXPORT int cucache_pool_destroy(int device, int pool_id)
{
    core_dev_t *d = device_core(device);
    return d ? core_pool_destroy(d, pool_id) : -1;
}
