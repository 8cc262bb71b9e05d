/*
 * What cucache tells the user, and when: the OOM report, the exit summary
 * and leak check, and snapshots, over stats/ (which formats; this file
 * gathers the inputs and decides when).  The variables that ask for them
 * are read in env.c; the log they go to is log.c's, the SIGUSR1 thread
 * signal.c's.
 *
 * Nothing here calls CUDA: the summary and snapshots read the allocator's
 * own state, so they work at exit after the runtime is gone, and from the
 * signal thread.  The first OOM report asks nvml.c who holds the device's
 * memory (a driver call for the device's UUID, then NVML).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "conf.h" /* conf_show */
#include "diag.h"
#include "env.h"
#include "fail.h"
#include "hook.h"
#include "hostalloc.h"
#include "log.h"
#include "nvml_procs.h"
#include "st.h"
#include "state.h"
#include "yield.h"

static struct {
    char conf_text[1024];       /* CUCACHE_CONF as written (cut to fit), for reports and snapshots */
    _Atomic size_t ring_events; /* 0: no ring; devices opened later get this many */
} diag;

atomic_bool hook_stacks;

static st_ring_t rings[HOOK_MAX_DEVICES];
static pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER; /* one snapshot at a time */
static unsigned snap_seq;
static atomic_ulong oom_count;

/* ------------------------------------------------------------------------
 * Start-up
 * ---------------------------------------------------------------------- */

static void at_exit(void);

/* The first bad variable env.c found, into err; -1. */
static int env_error(const hook_env_t *env, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", env->why);
    return -1;
}

int hook_diag_start(char *err, size_t errlen)
{
    const hook_env_t *env = hook_env();
    snprintf(diag.conf_text, sizeof diag.conf_text, "%s", env->conf ? env->conf : "");

    /* The log opens first, so that a bad value of any other variable is
     * reported in it.  Stacks are enabled where CUCACHE_STACKS is read: a
     * bad variable read before it is reported instead of a failure to
     * enable them, one read after it only once they are enabled. */
    if (env->log && hook_log_open(env->log, err, errlen) != 0)
        return -1;
    if (env->bad != HOOK_ENV_OK && env->bad <= HOOK_ENV_STACKS)
        return env_error(env, err, errlen);
    if (env->stack_depth) {
        char why[256];
        bool on;
        if (st_stacks_enable((st_stack_mode_t)env->stack_mode, env->stack_depth, &on, why, sizeof why) != 0) {
            char shown[CONF_SHOW_BUF];
            snprintf(err, errlen, "CUCACHE_STACKS: '%s': %s", conf_show(shown, env->stacks, strlen(env->stacks)), why);
            return -1;
        }
        atomic_store(&hook_stacks, on);
    }
    if (env->bad != HOOK_ENV_OK)
        return env_error(env, err, errlen);

    atomic_store(&diag.ring_events, env->ring_events);
    if ((env->snapshot_on & HOOK_SNAP_ON_SIGNAL) && hook_signal_start(err, errlen) != 0)
        return -1;
    if (env->report_exit || (env->snapshot_on & HOOK_SNAP_ON_EXIT) || env->leak_exitcode)
        atexit(at_exit);
    return 0;
}

void hook_diag_dev_opened(int ordinal, core_dev_t *d)
{
    const hook_env_t *env = hook_env();
    core_set_history(d, env->history);
    /* the exit leak report says when each group's first allocation was made */
    core_set_birth_times(d, env->report_exit || env->leak_exitcode);
    size_t events = atomic_load(&diag.ring_events);
    if (!events || (unsigned)ordinal >= HOOK_MAX_DEVICES)
        return;
    st_ring_t *r = &rings[ordinal];
    if (r->ev) { /* a fork child, or a device reset: start over in the same memory */
        r->pushed = 0;
    } else if (st_ring_init(r, events) != 0) {
        hook_warn(HOOK_WARN_BACKEND,
                  "device %d: out of host memory for %zu snapshot events; snapshots of it "
                  "will have no trace",
                  ordinal, events);
        return;
    }
    core_set_observer(d, st_ring_observe, r);
}

int hook_record_history(size_t max_entries, int mode, int depth, char *err, size_t errlen)
{
    if (max_entries > HOOK_RING_EVENTS_MAX) {
        snprintf(err, errlen, "max_entries %zu is more than %zu", max_entries, HOOK_RING_EVENTS_MAX);
        return -1;
    }
    if (depth > 0) {
        bool on;
        if (st_stacks_enable((st_stack_mode_t)mode, depth, &on, err, errlen) != 0)
            return -1;
        if (!on) {
            snprintf(err, errlen, "%s stacks: no Python interpreter (3.11 or later) in this process",
                     st_stack_modes[mode].name);
            return -1;
        }
        atomic_store(&hook_stacks, true);
    } else if (depth == 0) {
        atomic_store(&hook_stacks, false);
    }
    /* no snapshot reads a ring while it changes (snapshots hold snap_lock;
     * the allocator pushes only through the observer, set under the device
     * lock) */
    pthread_mutex_lock(&snap_lock);
    atomic_store(&diag.ring_events, max_entries);
    int rc = 0;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        core_dev_t *d = hook_dev_core(&hook_devs[i]);
        if (!d)
            continue;
        st_ring_t *r = &rings[i];
        if (!max_entries) { /* stop; what was recorded stays for the next snapshot */
            core_set_observer(d, NULL, NULL);
            continue;
        }
        if (r->capacity != max_entries) {
            core_set_observer(d, NULL, NULL);
            st_ring_fini(r);
            if (st_ring_init(r, max_entries) != 0) {
                snprintf(err, errlen, "device %d: no host memory for %zu events", i, max_entries);
                rc = -1;
                continue;
            }
        }
        core_set_observer(d, st_ring_observe, r);
    }
    pthread_mutex_unlock(&snap_lock);
    return rc;
}

/* ------------------------------------------------------------------------
 * Text: whole blocks in one write, so that other threads' lines never land
 * inside a report
 * ---------------------------------------------------------------------- */

static void text_line(void *ctx, const char *line)
{
    st_buf_t *b = ctx;
    st_buf_put(b, "cucache: ", 9);
    st_buf_put(b, line, strlen(line));
    st_buf_put(b, "\n", 1);
}

/* Out of host memory while building: each line on its own, unbuffered. */
static void direct_line(void *ctx, const char *line)
{
    (void)ctx;
    hook_log("%s", line);
}

static void text_flush(st_buf_t *b)
{
    size_t off = 0;
    while (off < b->len) {
        ssize_t n = write(hook_log_fd, b->data + off, b->len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    st_buf_free(b);
}

/* Runs emit into one buffered block, or line by line when host memory ran
 * out on the way. */
static void emit_block(void (*emit)(void *arg, st_sink_fn sink, void *ctx), void *arg)
{
    int saved = errno;
    st_buf_t b = {0};
    emit(arg, text_line, &b);
    if (b.failed) {
        st_buf_free(&b);
        emit(arg, direct_line, NULL);
    } else {
        text_flush(&b);
    }
    errno = saved;
}

/* ------------------------------------------------------------------------
 * Snapshots
 * ---------------------------------------------------------------------- */

typedef struct ring_take_s {
    st_ring_t *ring;
    st_trace_ev_t *trace;
    size_t ntrace;
    uint64_t active; /* the device's active bytes, for the "snapshot" event */
} ring_take_t;

static void take_ring(void *ctx)
{
    ring_take_t *t = ctx;
    if (!t->ring || !t->ring->ev)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    st_trace_ev_t mark = {
        .action = ST_SNAPSHOT,
        .size = t->active,
        .time_us = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u,
    };
    st_ring_push(t->ring, &mark);
    t->ntrace = st_ring_copy(t->ring, &t->trace);
}

static int write_one(const char *path, const st_buf_t *b, char *err, size_t errlen)
{
    if (b->failed) {
        snprintf(err, errlen, "%s: out of host memory while building the snapshot", path);
        return -1;
    }
    return st_write_file(path, b->data, b->len, err, errlen);
}

/* The pickle's and the JSON's names: a template ending in ".json" names the
 * JSON file and the pickle goes beside it (".pickle"); any other names the
 * pickle (st_json_name gives the JSON's). */
static bool pair_names(char *path, char *json, size_t len)
{
    size_t n = strlen(path);
    if (n > 5 && strcmp(path + n - 5, ".json") == 0) {
        if (n + 3 > len)
            return false;
        memcpy(json, path, n + 1);
        memcpy(path + n - 5, ".pickle", 8);
        return true;
    }
    return st_json_name(path, json, len) == 0;
}

/* Writes a snapshot of every device with allocator state to the expanded
 * template.  Reports success or failure in one line; never fatal. */
int hook_snapshot(const char *tmpl, int device, const char *why)
{
    char err[4800];
    int rc = -1;
    st_snap_dev_t devs[HOOK_MAX_DEVICES];
    core_layout_t layouts[HOOK_MAX_DEVICES];
    ring_take_t takes[HOOK_MAX_DEVICES];
    size_t n = 0, nsegs = 0, nevents = 0;

    pthread_mutex_lock(&snap_lock);
    unsigned seq = snap_seq++;
    char path[4096], json[4096];
    if (st_expand_name(tmpl, device, seq, path, sizeof path, err, sizeof err) != 0)
        goto out;
    if (!pair_names(path, json, sizeof json)) {
        snprintf(err, sizeof err, "%s: the file name beside it is too long", path);
        goto out;
    }
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        core_dev_t *d = hook_dev_core(&hook_devs[i]);
        if (!d)
            continue;
        core_stats_t s;
        core_stats_get(d, &s);
        takes[n] = (ring_take_t){.ring = rings[i].ev ? &rings[i] : NULL,
                                 .active = (uint64_t)s.active_bytes[CORE_POOL_ALL].current};
        if (core_layout(d, &layouts[n], take_ring, &takes[n]) != 0) {
            snprintf(err, sizeof err, "%s: out of host memory while copying device %d's segments", path, i);
            hostalloc_free(takes[n].trace);
            goto free_layouts;
        }
        devs[n] = (st_snap_dev_t){i,
                                  &layouts[n],
                                  takes[n].trace,
                                  takes[n].ntrace,
                                  s.num_yields_given,
                                  s.yield_bytes_given,
                                  s.num_yields_received,
                                  s.yield_bytes_received};
        nsegs += layouts[n].nsegs;
        nevents += takes[n].ntrace;
        n++;
    }
    st_snapshot_t snap = {devs, n, &hook_conf, diag.conf_text};
    st_buf_t pk = {0}, js = {0};
    st_snapshot_pickle(&snap, &pk);
    st_snapshot_json(&snap, &js);
    if (write_one(path, &pk, err, sizeof err) == 0 && write_one(json, &js, err, sizeof err) == 0) {
        hook_log("snapshot (%s) written to %s and %s: %zu device%s, %zu segments, %zu events", why, path, json, n,
                 n == 1 ? "" : "s", nsegs, nevents);
        rc = 0;
    }
    st_buf_free(&pk);
    st_buf_free(&js);
free_layouts:
    for (size_t i = 0; i < n; i++) {
        core_layout_free(&layouts[i]);
        hostalloc_free(takes[i].trace);
    }
out:
    pthread_mutex_unlock(&snap_lock);
    if (rc != 0)
        hook_log("snapshot (%s) not written: %s", why, err);
    return rc;
}

const char *hook_snapshot_template(void)
{
    return hook_env()->snapshot;
}

/* ------------------------------------------------------------------------
 * The OOM report
 * ---------------------------------------------------------------------- */

typedef struct oom_ctx_s {
    st_oom_input_t in;
    unsigned long count;
} oom_ctx_t;

static void emit_oom(void *arg, st_sink_fn sink, void *ctx)
{
    oom_ctx_t *o = arg;
    if (o->count == 1)
        st_report_oom(&o->in, sink, ctx);
    else
        st_report_oom_repeat(&o->in, o->count, sink, ctx);
}

void hook_report_oom(const hook_dev_t *hd, const hook_fail_t *f)
{
    const hook_env_t *env = hook_env();
    const core_oom_t *oom = &f->oom;
    unsigned long count = atomic_fetch_add(&oom_count, 1) + 1;
    core_dev_t *d = hook_dev_core((hook_dev_t *)hd);
    core_stats_t stats;
    conf_t conf;
    core_layout_t layout;
    bool have_layout = false;
    if (d) {
        core_stats_get(d, &stats);
        core_conf(d, &conf);
        if (count == 1)
            have_layout = core_layout(d, &layout, NULL, NULL) == 0;
    } else {
        memset(&stats, 0, sizeof stats);
        conf = hook_conf;
    }
    /* the first failure: the history replayed under other settings */
    core_whatif_t *w = NULL;
    if (count == 1 && d && env->whatif_ms && (w = hostalloc_calloc(1, sizeof *w)) && !oom->history) {
        w->status = CORE_WHATIF_NO_HISTORY; /* the report says so */
    } else if (w) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        core_whatif_opts_t wo = {.capacity = oom->device_free + oom->reserved,
                                 .total = oom->device_total,
                                 .budget_s = env->whatif_ms / 1000.0,
                                 .threads = cpus < 1   ? 1
                                            : cpus > 8 ? 8
                                                       : (int)cpus,
                                 .conf_text = diag.conf_text};
        core_whatif(d, oom, &wo, w);
    }
    /* the first failure: who holds the device's memory */
    st_gpu_procs_t gpu = {0};
    char gpu_why[256] = "";
    if (count == 1) {
        hook_nvml_procs(hd, &gpu, gpu_why, sizeof gpu_why);
        hook_yield_fill(hd, &f->ask, &gpu);
    }
    oom_ctx_t o = {
        .in = {hd->ordinal, oom, &stats, have_layout ? &layout : NULL, &conf, diag.conf_text, w,
               count == 1 ? &gpu : NULL},
        .count = count,
    };
    emit_block(emit_oom, &o);
    hostalloc_free((void *)gpu.procs);
    hostalloc_free(w);
    if (have_layout)
        core_layout_free(&layout);
    if (count == 1 && (env->snapshot_on & HOOK_SNAP_ON_OOM))
        hook_snapshot(env->snapshot, hd->ordinal, "out of memory");
}

static atomic_ulong fallback_count;

HOOK_TLS bool hook_fallback_now;

void hook_fallback_served(const hook_dev_t *hd, const core_oom_t *oom)
{
    hook_fallback_now = true;
    core_dev_t *d = hook_dev_core((hook_dev_t *)hd);
    if (d)
        core_fallback_served(d);
    if (atomic_fetch_add(&fallback_count, 1) != 0)
        return;
    char a[32], b[32];
    st_fmt_size(a, sizeof a, oom->requested);
    st_fmt_size(b, sizeof b, oom->reserved);
    hook_log("GPU %d: cucache could not serve %s (it holds %s) and the CUDA runtime's own allocator served it: "
             "not an out-of-memory failure, the program got its memory (uncached; said once, counted in "
             "num_fallback_served and the exit summary)",
             hd->ordinal, a, b);
}

/* ------------------------------------------------------------------------
 * The summary
 * ---------------------------------------------------------------------- */

typedef struct summary_ctx_s {
    int device;
    core_stats_t stats;
} summary_ctx_t;

static void emit_summary(void *arg, st_sink_fn sink, void *ctx)
{
    summary_ctx_t *s = arg;
    st_summary(s->device, &s->stats, sink, ctx);
}

int hook_summary(int device, st_sink_fn sink, void *ctx)
{
    if ((unsigned)device >= HOOK_MAX_DEVICES)
        return -1;
    core_dev_t *d = hook_dev_core(&hook_devs[device]);
    if (!d)
        return -1;
    summary_ctx_t s = {.device = device};
    core_stats_get(d, &s.stats);
    if (sink)
        emit_summary(&s, sink, ctx);
    else
        emit_block(emit_summary, &s);
    return 0;
}

void hook_summary_core(core_dev_t *d, int device)
{
    summary_ctx_t s = {.device = device};
    core_stats_get(d, &s.stats);
    emit_block(emit_summary, &s);
}

typedef struct leak_ctx_s {
    int device;
    const core_layout_t *layout;
    uint64_t allocs;
    size_t live;
} leak_ctx_t;

static void emit_leak(void *arg, st_sink_fn sink, void *ctx)
{
    leak_ctx_t *l = arg;
    l->live = st_leak_report(l->device, l->layout, l->allocs, sink, ctx);
}

/* The live allocations of a device at exit, listed; returns their count. */
static size_t leak_check(int device)
{
    core_dev_t *d = hook_dev_core(&hook_devs[device]);
    if (!d)
        return 0;
    core_stats_t s;
    core_stats_get(d, &s);
    if (s.allocation[CORE_POOL_ALL].current <= 0)
        return 0;
    core_layout_t layout;
    if (core_layout(d, &layout, NULL, NULL) != 0) {
        hook_log("leak check: GPU %d: %lld allocations still live at exit (no host memory to list them)", device,
                 (long long)s.allocation[CORE_POOL_ALL].current);
        return (size_t)s.allocation[CORE_POOL_ALL].current;
    }
    leak_ctx_t l = {device, &layout, s.allocation[CORE_POOL_ALL].allocated, 0};
    emit_block(emit_leak, &l);
    core_layout_free(&layout);
    return l.live;
}

static void at_exit(void)
{
    /* A process that never allocated through cucache (a launcher, a shell
     * between cucache-run and the job, a fork child) prints and writes
     * nothing. */
    const hook_env_t *env = hook_env();
    if (env->report_exit) {
        for (int i = 0; i < HOOK_MAX_DEVICES; i++)
            hook_summary(i, NULL, NULL);
        /* created contexts the program never destroyed (their destruction
         * prints theirs: hook_ctx.c) */
        for (int i = HOOK_MAX_DEVICES; i < HOOK_MAX_SLOTS; i++) {
            core_dev_t *d = hook_dev_core(&hook_devs[i]);
            if (d)
                hook_summary_core(d, hook_devs[i].ordinal);
        }
    }
    bool used = false;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        used |= hook_dev_core(&hook_devs[i]) != NULL;
    if ((env->snapshot_on & HOOK_SNAP_ON_EXIT) && used)
        hook_snapshot(env->snapshot, -1, "exit");
    size_t live = 0;
    if (env->report_exit || env->leak_exitcode)
        for (int i = 0; i < HOOK_MAX_DEVICES; i++)
            live += leak_check(i);
    if (env->leak_exitcode && live) {
        hook_log("exit status %d (CUCACHE_LEAK_EXITCODE): %zu allocation%s still live at exit", env->leak_exitcode,
                 live, live == 1 ? "" : "s");
        fflush(NULL);
        _exit(env->leak_exitcode);
    }
}
