/*
 * Every CUCACHE_* variable libcucache.so reads (env.h), read once with
 * secure_getenv and checked here; diag.c, log.c, signal.c and trace.c act
 * on the values:
 *
 *   CUCACHE_CONF=KEY:VALUE,... the allocator's settings (core/conf.h; the
 *                              constructor in state.c parses them), kept
 *                              as written for reports, snapshots and traces
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
 *   CUCACHE_STACKS=MODE[:N]    the call stack of each allocation (N frames
 *                              of each kind, default 24, at most 64; off:
 *                              none, the default): native (return
 *                              addresses), python (the thread's Python
 *                              frames), python+native (the native frames up
 *                              to the interpreter's, then the Python ones);
 *                              named when a report or a snapshot is
 *                              written: snapshot frames, live allocations
 *                              by call site in the OOM and leak reports
 *                              (stats/stack.c, stats/pystack.c)
 *   CUCACHE_SNAPSHOT_EVENTS=N  events kept per device for device_traces
 *                              (default 100000; 0: none).  The event ring
 *                              is only recorded when CUCACHE_SNAPSHOT or
 *                              this variable is set: otherwise the core's
 *                              observer stays unset and costs nothing.
 *   CUCACHE_TRACE=TEMPLATE     the trace of every allocator call (trace.c)
 *   CUCACHE_REGISTRY=on|off    this process in its GPUs' registries
 *                              (yield.c; default on): what it holds, for
 *                              cucache-top and the neighbours' OOM reports
 *   CUCACHE_YIELD=on|off       with the registry: a failed allocation asks
 *                              the other cucache processes on the GPU to
 *                              give idle cache back, and this process gives
 *                              its own when asked (default on)
 *   CUCACHE_YIELD_MS=N         how long a failed allocation waits for their
 *                              answers (default 200, at most 60000; 0:
 *                              never asks, still gives)
 *
 * Reading has no effect of its own: the log is opened, stacks enabled and
 * threads started by the files that own them, so a bad value is reported
 * before any of that (diag.c keeps the order in which it used to be found).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h" /* conf_show: a value in an error line */
#include "env.h"
#include "st.h"

#define DEFAULT_HISTORY ((size_t)1 << 18)
#define MAX_HISTORY ((size_t)1 << 30)
#define DEFAULT_WHATIF_MS 1000
#define MAX_WHATIF_MS 600000
#define DEFAULT_RING_EVENTS 100000
#define DEFAULT_YIELD_MS 200
#define MAX_YIELD_MS 60000

static hook_env_t env = {.history = DEFAULT_HISTORY,
                         .whatif_ms = DEFAULT_WHATIF_MS,
                         .registry = true,
                         .yield = true,
                         .yield_ms = DEFAULT_YIELD_MS};
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/* A variable's value, NULL when unset or empty.  Each variable is read
 * with a call spelled out, secure_getenv("CUCACHE_..."): tests/run/check_man.py
 * finds them so, and requires each in cucache(7). */
static const char *nonempty(const char *v)
{
    return v && *v ? v : NULL;
}

/* Records the first bad variable; returns -1. */
__attribute__((format(printf, 2, 3))) static int env_bad(hook_env_var_t var, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(env.why, sizeof env.why, fmt, ap);
    va_end(ap);
    env.bad = var;
    return -1;
}

/* A whole decimal number from min to max in variable `name` ("what" says
 * what it is: "a number of milliseconds"), into *out; NULL text (unset):
 * *out stays; -1 naming the variable when out of range or not a number. */
/* "on" or "off" in variable `name`, into *out; NULL text (unset): *out
 * stays; -1 naming the variable otherwise. */
static int env_switch(hook_env_var_t var, const char *name, const char *text, bool *out)
{
    if (!text)
        return 0;
    if (strcmp(text, "on") == 0 || strcmp(text, "off") == 0) {
        *out = text[1] == 'n';
        return 0;
    }
    char shown[CONF_SHOW_BUF];
    return env_bad(var, "%s: '%s' is not on or off", name, conf_show(shown, text, strlen(text)));
}

static int env_count(hook_env_var_t var, const char *name, const char *text, unsigned long long min,
                     unsigned long long max, const char *what, unsigned long long *out)
{
    if (!text)
        return 0;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(text, &end, 10);
    if (errno || *end || end == text || text[0] == '-' || n < min || n > max) {
        char shown[CONF_SHOW_BUF];
        return env_bad(var, "%s: '%s' is not %s from %llu to %llu", name, conf_show(shown, text, strlen(text)), what,
                       min, max);
    }
    *out = n;
    return 0;
}

int hook_stacks_parse(const char *text, int *mode, int *depth, char *err, size_t errlen)
{
    unsigned long long n = ST_STACK_DEPTH_DEFAULT;
    for (int m = 0; m < ST_STACKS_MODES; m++) {
        const char *name = st_stack_modes[m].name;
        size_t len = strlen(name);
        if (strncmp(text, name, len) != 0 || (text[len] && text[len] != ':'))
            continue;
        if (m == ST_STACKS_OFF && text[len])
            break;
        if (text[len] == ':') {
            char *end;
            errno = 0;
            n = strtoull(text + len + 1, &end, 10);
            if (errno || *end || end == text + len + 1 || text[len + 1] == '-' || n < 1 || n > ST_STACK_DEPTH_MAX) {
                char shown[CONF_SHOW_BUF];
                snprintf(err, errlen, "%s:DEPTH: '%s' is not a number of frames from 1 to %d", name,
                         conf_show(shown, text + len + 1, strlen(text + len + 1)), ST_STACK_DEPTH_MAX);
                return -1;
            }
        }
        *mode = m;
        *depth = m == ST_STACKS_OFF ? 0 : (int)n;
        return 0;
    }
    char shown[CONF_SHOW_BUF];
    snprintf(err, errlen, "'%s' is not one of native, python, python+native (each with :DEPTH), off",
             conf_show(shown, text, strlen(text)));
    return -1;
}

/* CUCACHE_STACKS (enabling them is diag.c's). */
static int env_stacks(const char *text)
{
    char why[256];
    if (hook_stacks_parse(text, &env.stack_mode, &env.stack_depth, why, sizeof why) != 0)
        return env_bad(HOOK_ENV_STACKS, "CUCACHE_STACKS%s%s", why[0] == '\'' ? ": " : "=", why);
    return 0;
}

static int env_snapshot_on(const char *text)
{
    unsigned on = 0;
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n == 3 && strncmp(p, "oom", n) == 0)
            on |= HOOK_SNAP_ON_OOM;
        else if (n == 4 && strncmp(p, "exit", n) == 0)
            on |= HOOK_SNAP_ON_EXIT;
        else if ((n == 6 && strncmp(p, "signal", n) == 0) || (n == 7 && strncmp(p, "sigusr1", n) == 0))
            on |= HOOK_SNAP_ON_SIGNAL;
        else if (n == 4 && strncmp(p, "none", n) == 0)
            ;
        else {
            char shown[CONF_SHOW_BUF];
            return env_bad(HOOK_ENV_SNAPSHOT_ON, "CUCACHE_SNAPSHOT_ON: '%s' is not one of oom, exit, signal, none",
                           conf_show(shown, p, n));
        }
        p += n;
        if (*p == ',')
            p++;
    }
    env.snapshot_on = on;
    return 0;
}

/* The checked variables, in order; stops at the first bad one. */
static int env_check(void)
{
    const char *report = nonempty(secure_getenv("CUCACHE_REPORT"));
    if (report && strcmp(report, "off") != 0) {
        if (strcmp(report, "exit") != 0) {
            char shown[CONF_SHOW_BUF];
            return env_bad(HOOK_ENV_REPORT, "CUCACHE_REPORT: '%s' is not one of exit, off",
                           conf_show(shown, report, strlen(report)));
        }
        env.report_exit = true;
    }

    const char *snap = nonempty(secure_getenv("CUCACHE_SNAPSHOT"));
    if (snap) {
        char probe[4096], why[sizeof env.why];
        if (st_expand_name(snap, 0, 0, probe, sizeof probe, why, sizeof why) != 0)
            return env_bad(HOOK_ENV_SNAPSHOT, "CUCACHE_SNAPSHOT: %s", why);
        env.snapshot = snap;
        env.snapshot_on = HOOK_SNAP_ON_OOM;
        env.ring_events = DEFAULT_RING_EVENTS;
    }
    const char *on = nonempty(secure_getenv("CUCACHE_SNAPSHOT_ON"));
    if (on) {
        if (env_snapshot_on(on) != 0)
            return -1;
        char shown[CONF_SHOW_BUF];
        if (env.snapshot_on && !env.snapshot)
            return env_bad(HOOK_ENV_SNAPSHOT_ON, "CUCACHE_SNAPSHOT_ON: '%s' needs CUCACHE_SNAPSHOT (where to write)",
                           conf_show(shown, on, strlen(on)));
    }
    unsigned long long events = env.ring_events, history = env.history, leak = (unsigned)env.leak_exitcode,
                       whatif = env.whatif_ms;
    if (env_count(HOOK_ENV_SNAPSHOT_EVENTS, "CUCACHE_SNAPSHOT_EVENTS",
                  nonempty(secure_getenv("CUCACHE_SNAPSHOT_EVENTS")), 0, HOOK_RING_EVENTS_MAX, "a number of events",
                  &events) != 0 ||
        env_count(HOOK_ENV_HISTORY, "CUCACHE_HISTORY", nonempty(secure_getenv("CUCACHE_HISTORY")), 0, MAX_HISTORY,
                  "a number of allocator calls", &history) != 0 ||
        env_count(HOOK_ENV_LEAK_EXITCODE, "CUCACHE_LEAK_EXITCODE", nonempty(secure_getenv("CUCACHE_LEAK_EXITCODE")), 1,
                  255, "an exit status", &leak) != 0)
        return -1;
    env.ring_events = (size_t)events;
    env.history = (size_t)history;
    env.leak_exitcode = (int)leak;
    env.stacks = nonempty(secure_getenv("CUCACHE_STACKS"));
    if (env.stacks && env_stacks(env.stacks) != 0)
        return -1;
    if (env_count(HOOK_ENV_WHATIF_MS, "CUCACHE_WHATIF_MS", nonempty(secure_getenv("CUCACHE_WHATIF_MS")), 0,
                  MAX_WHATIF_MS, "a number of milliseconds", &whatif) != 0)
        return -1;
    env.whatif_ms = (unsigned)whatif;
    unsigned long long yield_ms = env.yield_ms;
    if (env_switch(HOOK_ENV_REGISTRY, "CUCACHE_REGISTRY", nonempty(secure_getenv("CUCACHE_REGISTRY")), &env.registry) !=
            0 ||
        env_switch(HOOK_ENV_YIELD, "CUCACHE_YIELD", nonempty(secure_getenv("CUCACHE_YIELD")), &env.yield) != 0 ||
        env_count(HOOK_ENV_YIELD_MS, "CUCACHE_YIELD_MS", nonempty(secure_getenv("CUCACHE_YIELD_MS")), 0, MAX_YIELD_MS,
                  "a number of milliseconds", &yield_ms) != 0)
        return -1;
    env.yield_ms = (unsigned)yield_ms;
    return 0;
}

static void env_read(void)
{
    env.conf = secure_getenv("CUCACHE_CONF");
    env.log = nonempty(secure_getenv("CUCACHE_LOG"));
    env.trace = nonempty(secure_getenv("CUCACHE_TRACE"));
    env.test_no_stream_wait = nonempty(secure_getenv("CUCACHE_TEST_NO_STREAM_WAIT")) != NULL; /* tests only */
    env_check();
}

const hook_env_t *hook_env(void)
{
    pthread_once(&env_once, env_read);
    return &env;
}
