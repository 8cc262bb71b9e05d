/*
 * What cucache tells the user: the OOM report, the exit summary and
 * snapshots, over stats/ (which formats; this file gathers the inputs and
 * decides when).
 *
 * Environment, read once by the constructor (state.c calls hook_diag_start):
 *   CUCACHE_REPORT=exit        the memory summary of every device at exit
 *                              (off: none; the default)
 *   CUCACHE_SNAPSHOT=TEMPLATE  where snapshots go: a pickle in the schema of
 *                              torch.cuda.memory._dump_snapshot, and the same
 *                              content as JSON beside it; %p %r %d %n %%
 *                              (stats/st.h, st_expand_name)
 *   CUCACHE_SNAPSHOT_ON=LIST   when, besides the API call: oom (the first
 *                              out-of-memory failure; the default), exit,
 *                              signal (SIGUSR1), none; comma-separated
 *   CUCACHE_LOG=TEMPLATE       every line cucache prints goes to this file
 *                              instead of stderr (%p pid, %r rank; opened
 *                              for appending, each line or report written
 *                              whole with one write; a symbolic link is
 *                              refused)
 *   CUCACHE_LEAK_EXITCODE=N    at exit, list the live allocations of every
 *                              device by requested size and, when any is
 *                              live, end the process with status N (1-255;
 *                              CUCACHE_REPORT=exit lists them too)
 *   CUCACHE_HISTORY=N          allocator calls kept per device for the
 *                              what-if at the first out-of-memory failure
 *                              (core_whatif; default 262144, 24 bytes each,
 *                              allocated at the device's first call; 0: none)
 *   CUCACHE_WHATIF_MS=N        its time budget (default 1000; 0: no what-if)
 *   CUCACHE_STACKS=native[:N]  the call stack of each allocation (N frames,
 *                              default 24, at most 64; off: none, the
 *                              default), symbolised when a report or a
 *                              snapshot is written: snapshot frames, live
 *                              allocations by call site in the OOM and leak
 *                              reports (stats/stack.c)
 *   CUCACHE_SNAPSHOT_EVENTS=N  events kept per device for device_traces
 *                              (default 100000; 0: none).  The event ring
 *                              is only recorded when CUCACHE_SNAPSHOT or
 *                              this variable is set: otherwise the core's
 *                              observer stays unset and costs nothing.
 *
 * Nothing here calls CUDA: the summary and snapshots read the allocator's
 * own state, so they work at exit after the runtime is gone, and from the
 * signal thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hook.h"
#include "hostalloc.h"
#include "st.h"

enum {
    SNAP_ON_OOM = 1,
    SNAP_ON_EXIT = 2,
    SNAP_ON_SIGNAL = 4,
};

#define DEFAULT_HISTORY ((size_t)1 << 18)
#define MAX_HISTORY ((size_t)1 << 30)
#define DEFAULT_WHATIF_MS 1000
#define MAX_WHATIF_MS 600000
#define DEFAULT_RING_EVENTS 100000
#define MAX_RING_EVENTS ((size_t)1 << 26)

static struct {
    bool report_exit;
    const char *snapshot; /* template; NULL: none */
    unsigned snapshot_on; /* SNAP_ON_* */
    _Atomic size_t ring_events; /* 0: no ring; devices opened later get this many */
    size_t history;       /* CUCACHE_HISTORY */
    int leak_exitcode;    /* CUCACHE_LEAK_EXITCODE; 0: none */
    unsigned whatif_ms;   /* CUCACHE_WHATIF_MS */
    char conf_text[1024]; /* CUCACHE_CONF as written */
    int signal_pipe[2];
} diag = {.signal_pipe = {-1, -1}, .history = DEFAULT_HISTORY, .whatif_ms = DEFAULT_WHATIF_MS};

atomic_bool hook_stacks;

static st_ring_t rings[HOOK_MAX_DEVICES];
static pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER; /* one snapshot at a time */
static unsigned snap_seq;
static atomic_ulong oom_count;

/* ------------------------------------------------------------------------
 * Start-up
 * ---------------------------------------------------------------------- */

/* text for an error line: control bytes as \xNN, cut at `len` with "...". */
static void shown_value(char *out, size_t len, const char *text)
{
    size_t k = 0;
    const unsigned char *p = (const unsigned char *)text;
    for (; *p && k + 8 < len; p++)
        k += (size_t)(*p < 0x20 || *p == 0x7f ? snprintf(out + k, len - k, "\\x%02x", *p)
                                              : snprintf(out + k, len - k, "%c", *p));
    if (*p)
        k += (size_t)snprintf(out + k, len - k, "...");
    out[k < len ? k : len - 1] = '\0';
}

/* A whole decimal number from min to max in variable `name` ("what" says
 * what it is: "a number of milliseconds"); -1 with err naming the variable
 * otherwise. */
static int parse_count(const char *name, const char *text, unsigned long long min, unsigned long long max,
                       const char *what, unsigned long long *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(text, &end, 10);
    if (errno || *end || end == text || text[0] == '-' || n < min || n > max) {
        char shown[64];
        shown_value(shown, sizeof shown, text);
        snprintf(err, errlen, "%s: '%s' is not %s from %llu to %llu", name, shown, what, min, max);
        return -1;
    }
    *out = n;
    return 0;
}

/* CUCACHE_STACKS: off, native or native:N. */
static int parse_stacks(const char *text, char *err, size_t errlen)
{
    if (strcmp(text, "off") == 0)
        return 0;
    unsigned long long depth = ST_STACK_DEPTH_DEFAULT;
    char why[256];
    if (strncmp(text, "native", 6) != 0 || (text[6] && text[6] != ':')) {
        char shown[64];
        shown_value(shown, sizeof shown, text);
        snprintf(err, errlen, "CUCACHE_STACKS: '%s' is not one of native, native:DEPTH, off", shown);
        return -1;
    }
    if (text[6] == ':' && parse_count("CUCACHE_STACKS=native:DEPTH", text + 7, 1, ST_STACK_DEPTH_MAX,
                                      "a number of frames", &depth, err, errlen) != 0)
        return -1;
    if (st_stacks_enable((int)depth, why, sizeof why) != 0) {
        snprintf(err, errlen, "CUCACHE_STACKS=%s: %s", text, why);
        return -1;
    }
    atomic_store(&hook_stacks, true);
    return 0;
}

static int parse_snapshot_on(const char *text, unsigned *out, char *err, size_t errlen)
{
    unsigned on = 0;
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n == 3 && strncmp(p, "oom", n) == 0)
            on |= SNAP_ON_OOM;
        else if (n == 4 && strncmp(p, "exit", n) == 0)
            on |= SNAP_ON_EXIT;
        else if ((n == 6 && strncmp(p, "signal", n) == 0) || (n == 7 && strncmp(p, "sigusr1", n) == 0))
            on |= SNAP_ON_SIGNAL;
        else if (n == 4 && strncmp(p, "none", n) == 0)
            ;
        else {
            char item[64], shown[64];
            snprintf(item, sizeof item, "%.*s", (int)(n < sizeof item ? n : sizeof item - 1), p);
            shown_value(shown, sizeof shown, item);
            snprintf(err, errlen, "CUCACHE_SNAPSHOT_ON: '%s' is not one of oom, exit, signal, none", shown);
            return -1;
        }
        p += n;
        if (*p == ',')
            p++;
    }
    *out = on;
    return 0;
}

static void *signal_thread(void *arg);
static void at_exit(void);

static void on_sigusr1(int sig)
{
    (void)sig;
    int saved = errno;
    char c = 1;
    (void)!write(diag.signal_pipe[1], &c, 1);
    errno = saved;
}

static int start_signal(char *err, size_t errlen)
{
    if (pipe2(diag.signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(err, errlen, "CUCACHE_SNAPSHOT_ON=signal: pipe: %s", strerror(errno));
        return -1;
    }
    /* the reading end blocks; the handler's end must never block */
    fcntl(diag.signal_pipe[0], F_SETFL, 0);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* the thread takes no signal of the program's */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(&t, &attr, signal_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (r != 0) {
        snprintf(err, errlen, "CUCACHE_SNAPSHOT_ON=signal: cannot start the snapshot thread: %s", strerror(r));
        return -1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    return 0;
}

/* CUCACHE_LOG: the file cucache's lines go to from now on. */
static int open_log(const char *tmpl, char *err, size_t errlen)
{
    char path[4096], shown[256];
    if (st_expand_name(tmpl, 0, 0, path, sizeof path, err, errlen) != 0)
        return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        shown_value(shown, sizeof shown, path);
        snprintf(err, errlen, "CUCACHE_LOG: cannot open '%s': %s%s", shown, strerror(e),
                 e == ELOOP ? " (a symbolic link is refused)" : "");
        return -1;
    }
    hook_log_fd = fd;
    return 0;
}

int hook_diag_start(char *err, size_t errlen)
{
    const char *conf = secure_getenv("CUCACHE_CONF");
    snprintf(diag.conf_text, sizeof diag.conf_text, "%s", conf ? conf : "");

    const char *logt = secure_getenv("CUCACHE_LOG");
    if (logt && *logt && open_log(logt, err, errlen) != 0)
        return -1;

    const char *report = secure_getenv("CUCACHE_REPORT");
    if (report && *report && strcmp(report, "off") != 0) {
        if (strcmp(report, "exit") != 0) {
            char shown[64];
            shown_value(shown, sizeof shown, report);
            snprintf(err, errlen, "CUCACHE_REPORT: '%s' is not one of exit, off", shown);
            return -1;
        }
        diag.report_exit = true;
    }

    const char *snap = secure_getenv("CUCACHE_SNAPSHOT");
    if (snap && *snap) {
        char probe[4096];
        if (st_expand_name(snap, 0, 0, probe, sizeof probe, err, errlen) != 0)
            return -1;
        diag.snapshot = snap;
        diag.snapshot_on = SNAP_ON_OOM;
        diag.ring_events = DEFAULT_RING_EVENTS;
    }
    const char *on = secure_getenv("CUCACHE_SNAPSHOT_ON");
    if (on && *on) {
        if (parse_snapshot_on(on, &diag.snapshot_on, err, errlen) != 0)
            return -1;
        if (diag.snapshot_on && !diag.snapshot) {
            snprintf(err, errlen, "CUCACHE_SNAPSHOT_ON=%s needs CUCACHE_SNAPSHOT (where to write)", on);
            return -1;
        }
    }
    const char *events = secure_getenv("CUCACHE_SNAPSHOT_EVENTS");
    unsigned long long n;
    if (events && *events) {
        if (parse_count("CUCACHE_SNAPSHOT_EVENTS", events, 0, MAX_RING_EVENTS, "a number of events", &n, err,
                        errlen) != 0)
            return -1;
        diag.ring_events = (size_t)n;
    }

    const char *history = secure_getenv("CUCACHE_HISTORY");
    if (history && *history) {
        if (parse_count("CUCACHE_HISTORY", history, 0, MAX_HISTORY, "a number of allocator calls", &n, err, errlen) !=
            0)
            return -1;
        diag.history = (size_t)n;
    }
    const char *leak = secure_getenv("CUCACHE_LEAK_EXITCODE");
    if (leak && *leak) {
        if (parse_count("CUCACHE_LEAK_EXITCODE", leak, 1, 255, "an exit status", &n, err, errlen) != 0)
            return -1;
        diag.leak_exitcode = (int)n;
    }
    const char *stacks = secure_getenv("CUCACHE_STACKS");
    if (stacks && *stacks && parse_stacks(stacks, err, errlen) != 0)
        return -1;
    const char *whatif = secure_getenv("CUCACHE_WHATIF_MS");
    if (whatif && *whatif) {
        if (parse_count("CUCACHE_WHATIF_MS", whatif, 0, MAX_WHATIF_MS, "a number of milliseconds", &n, err, errlen) !=
            0)
            return -1;
        diag.whatif_ms = (unsigned)n;
    }

    if ((diag.snapshot_on & SNAP_ON_SIGNAL) && start_signal(err, errlen) != 0)
        return -1;
    if (diag.report_exit || (diag.snapshot_on & SNAP_ON_EXIT) || diag.leak_exitcode)
        atexit(at_exit);
    return 0;
}

void hook_diag_dev_opened(int ordinal, core_dev_t *d)
{
    core_set_history(d, diag.history);
    /* the exit leak report says when each group's first allocation was made */
    core_set_birth_times(d, diag.report_exit || diag.leak_exitcode);
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

int hook_record_history(size_t max_entries, int stacks, char *err, size_t errlen)
{
    if (max_entries > MAX_RING_EVENTS) {
        snprintf(err, errlen, "max_entries %zu is more than %zu", max_entries, (size_t)MAX_RING_EVENTS);
        return -1;
    }
    if (stacks > 0) {
        if (st_stacks_enable(stacks, err, errlen) != 0)
            return -1;
        atomic_store(&hook_stacks, true);
    } else if (stacks == 0) {
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
        devs[n] = (st_snap_dev_t){i, &layouts[n], takes[n].trace, takes[n].ntrace};
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
    return diag.snapshot;
}

static void *signal_thread(void *arg)
{
    (void)arg;
    for (;;) {
        char c[16];
        ssize_t n = read(diag.signal_pipe[0], c, sizeof c);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return NULL;
        hook_snapshot(diag.snapshot, -1, "SIGUSR1");
    }
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

void hook_report_oom(const hook_dev_t *hd, const core_oom_t *oom)
{
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
    if (count == 1 && d && diag.whatif_ms && (w = hostalloc_calloc(1, sizeof *w)) && !oom->history) {
        w->status = CORE_WHATIF_NO_HISTORY; /* the report says so */
    } else if (w) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        core_whatif_opts_t wo = {.capacity = oom->device_free + oom->reserved,
                                 .total = oom->device_total,
                                 .budget_s = diag.whatif_ms / 1000.0,
                                 .threads = cpus < 1   ? 1
                                            : cpus > 8 ? 8
                                                       : (int)cpus,
                                 .conf_text = diag.conf_text};
        core_whatif(d, oom, &wo, w);
    }
    oom_ctx_t o = {
        .in = {hd->ordinal, oom, &stats, have_layout ? &layout : NULL, &conf, diag.conf_text, w},
        .count = count,
    };
    emit_block(emit_oom, &o);
    hostalloc_free(w);
    if (have_layout)
        core_layout_free(&layout);
    if (count == 1 && (diag.snapshot_on & SNAP_ON_OOM))
        hook_snapshot(diag.snapshot, hd->ordinal, "out of memory");
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
    if (diag.report_exit)
        for (int i = 0; i < HOOK_MAX_DEVICES; i++)
            hook_summary(i, NULL, NULL);
    bool used = false;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        used |= hook_dev_core(&hook_devs[i]) != NULL;
    if ((diag.snapshot_on & SNAP_ON_EXIT) && used)
        hook_snapshot(diag.snapshot, -1, "exit");
    size_t live = 0;
    if (diag.report_exit || diag.leak_exitcode)
        for (int i = 0; i < HOOK_MAX_DEVICES; i++)
            live += leak_check(i);
    if (diag.leak_exitcode && live) {
        hook_log("exit status %d (CUCACHE_LEAK_EXITCODE): %zu allocation%s still live at exit", diag.leak_exitcode,
                 live, live == 1 ? "" : "s");
        fflush(NULL);
        _exit(diag.leak_exitcode);
    }
}
