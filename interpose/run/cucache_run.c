/*
 * cucache-run: runs a command under cucache.
 *
 *   cucache-run [--sim[=CAPACITY]] [--conf K:V,...] [--report] [--trace FILE]
 *               [--snapshot FILE] [--snapshot-on WHEN] [--print-env] [--] COMMAND [ARGS...]
 *
 * It changes the environment and then becomes the command (execvp, no
 * fork), so the exit status, the pid and the signals are the command's:
 *
 *   LD_PRELOAD            libcucache.so first, then what was there;
 *   LD_LIBRARY_PATH       --sim: the simulated device's libraries first;
 *   CUCACHE_SIM_CAPACITY  --sim=CAPACITY (checked here as the simulator
 *                         checks it: a size from 4M to 16T);
 *   CUCACHE_CONF          the --conf values joined with ',' (replaces any
 *                         CUCACHE_CONF of the environment);
 *   CUCACHE_REPORT=exit   --report;
 *   CUCACHE_TRACE, CUCACHE_SNAPSHOT  --trace FILE, --snapshot FILE;
 *   CUCACHE_SNAPSHOT_ON   --snapshot-on WHEN;
 *   a framework's variable that turns its own cache off (interpose/
 *                         framework.h: PYTORCH_NO_CUDA_MEMORY_CACHING=1),
 *                         unless the environment sets it already or the
 *                         row's option keeps the cache (--keep-torch-cache).
 *
 * libcucache.so is looked for next to this executable first (an installed
 * pair, or the build directory), then at the build-tree path compiled in
 * (CUCACHE_RUN_LIBCUCACHE); the simulated libraries in CUCACHE_RUN_SIM_BUILD_REL
 * under the executable's folder (the build tree), then in
 * CUCACHE_RUN_SIM_INSTALL_REL under the libdir (an installation), then in
 * CUCACHE_RUN_SIM_LIBDIR.
 *
 * The values of --conf, --leak-exitcode, --stacks, --trace, --snapshot and
 * --snapshot-on are checked where they are read, by libcucache.so, whose
 * refusal names the variable the option sets (its line in the usage says
 * which) before the command's main runs.
 *
 * Exit status of its own: 2 for a usage error, 125 when the environment
 * cannot be prepared (a library not found), 126/127 when the command cannot
 * be run (as env(1)); otherwise the command's.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"      /* conf_read_size: the sizes every cucache program reads; conf_show */
#include "framework.h" /* frameworks' own caches: turned off unless kept */

#ifndef CUCACHE_VERSION
#define CUCACHE_VERSION "unknown"
#endif
#ifndef CUCACHE_RUN_LIBCUCACHE
#define CUCACHE_RUN_LIBCUCACHE "libcucache.so"
#endif
#ifndef CUCACHE_RUN_SIM_LIBDIR
#define CUCACHE_RUN_SIM_LIBDIR "subprojects/cusim/lib"
#endif
#ifndef CUCACHE_RUN_SIM_BUILD_REL
#define CUCACHE_RUN_SIM_BUILD_REL "subprojects/cusim/lib"
#endif
#ifndef CUCACHE_RUN_SIM_INSTALL_REL
#define CUCACHE_RUN_SIM_INSTALL_REL "cucache/sim"
#endif

enum {
    RUN_EXIT_USAGE = 2,    /* bad command line */
    RUN_EXIT_SETUP = 125,  /* the environment could not be prepared */
    RUN_EXIT_NOEXEC = 126, /* the command exists but could not be run */
    RUN_EXIT_NOTFOUND = 127,
    RUN_MAX_CHANGES = 16, /* environment variables set, at most */
};

/* The simulator's limits on CUCACHE_SIM_CAPACITY (subprojects/cusim/src/config.c). */
#define RUN_SIM_CAPACITY_MIN ((uint64_t)4 << 20)
#define RUN_SIM_CAPACITY_MAX ((uint64_t)1 << 44)

typedef struct run_opts_s {
    bool sim;                    /* --sim */
    const char *capacity;        /* --sim=CAPACITY, or NULL */
    char *conf;                  /* the --conf values joined with ',', or NULL (malloc'ed) */
    bool report;                 /* --report */
    const char *leak_exitcode;   /* --leak-exitcode N, or NULL */
    const char *stacks;          /* CUCACHE_STACKS from --stacks[=DEPTH|MODE[:DEPTH]]; NULL: none */
    const char *trace;           /* --trace FILE, or NULL */
    const char *snapshot;        /* --snapshot FILE, or NULL */
    const char *snapshot_on;     /* --snapshot-on WHEN, or NULL */
    bool print_env;              /* --print-env: print the changes, run nothing */
    bool keep[HOOK_NFRAMEWORKS]; /* hook_frameworks[i].keep_option: leave that framework's cache on */
    char **command;              /* COMMAND [ARGS...], NULL-terminated; NULL when absent */
} run_opts_t;

typedef struct env_change_s {
    const char *name;
    char *value; /* malloc'ed */
} env_change_t;

typedef struct env_plan_s {
    env_change_t change[RUN_MAX_CHANGES];
    int n;
} env_plan_t;

/* ------------------------------------------------------------------------
 * Messages and small helpers
 * ---------------------------------------------------------------------- */

static void run_die(int status, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));

static void run_die(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("cucache-run: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (status == RUN_EXIT_USAGE)
        fputs("cucache-run: try 'cucache-run --help'\n", stderr);
    exit(status);
}

static void run_usage(FILE *f)
{
    fputs("usage: cucache-run [OPTIONS] [--] COMMAND [ARGS...]\n"
          "Runs COMMAND with cucache's libcucache.so preloaded: its cudaMalloc/cudaFree\n"
          "(and their driver and stream-ordered relatives) are served from a cache.\n"
          "\n"
          "  --sim[=CAPACITY]   run on the simulated CUDA device (no GPU needed); CAPACITY\n"
          "                     is its memory, a size from 4M to 16T such as 512M or 80G\n"
          "  --conf K:V,...     allocator settings (CUCACHE_CONF); repeatable, joined\n"
          "                     with ','; '--conf help' lists the keys\n"
          "  --report           print the allocator's summary at exit (CUCACHE_REPORT=exit)\n"
          "  --leak-exitcode N  exit N (1-255) when cucache memory is still live at exit,\n"
          "                     after listing it by call site or size (CUCACHE_LEAK_EXITCODE)\n"
          "  --stacks[=DEPTH]   record each allocation's call stack (DEPTH frames, 24 by\n"
          "                     default) for snapshots and the OOM and leak reports\n"
          "                     (CUCACHE_STACKS=native)\n"
          "  --stacks=MODE[:DEPTH]  python: the Python frames; python+native: the native\n"
          "                     frames up to the interpreter, then the Python ones\n"
          "  --trace FILE       record every allocation event to FILE (CUCACHE_TRACE)\n"
          "  --snapshot FILE    where memory snapshots go: a pickle PyTorch's memory viewer\n"
          "                     opens, and JSON beside it (CUCACHE_SNAPSHOT)\n"
          "  --snapshot-on WHEN when to write one: oom (the default), exit, signal\n"
          "                     (SIGUSR1), comma-separated (CUCACHE_SNAPSHOT_ON)\n"
          "  --keep-torch-cache leave PyTorch's own caching allocator on; by default\n"
          "                     cucache-run sets PYTORCH_NO_CUDA_MEMORY_CACHING=1 (unless it\n"
          "                     is set), so that cucache serves PyTorch's tensors\n"
          "  --print-env        print the environment changes, run nothing\n"
          "  -h, --help         this text\n"
          "  --version          cucache's version\n"
          "\n"
          "FILE names accept %p (pid), %r (rank), %d (device) and %n (a sequence number).\n"
          "Exit status: COMMAND's; 2 for a usage error, 125 when libcucache.so or the\n"
          "simulated device is not found, 126/127 when COMMAND cannot be run.\n",
          f);
}

static void *run_alloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        run_die(RUN_EXIT_SETUP, "out of memory");
    return p;
}

/* a + sep + b in a new string; a alone when b is NULL or empty. */
static char *run_join(const char *a, char sep, const char *b)
{
    size_t na = strlen(a), nb = b ? strlen(b) : 0;
    char *s = run_alloc(na + nb + 2);
    memcpy(s, a, na);
    if (nb) {
        s[na] = sep;
        memcpy(s + na + 1, b, nb);
        na += nb + 1;
    }
    s[na] = '\0';
    return s;
}

static char *run_dup(const char *s)
{
    return run_join(s, 0, NULL);
}

static bool run_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The directory of this executable (no trailing '/'), or "" when
 * /proc/self/exe cannot be read. */
static void run_exe_dir(char *dir, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", dir, len - 1);
    if (n <= 0) {
        dir[0] = '\0';
        return;
    }
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        dir[0] = '\0';
}

/* ------------------------------------------------------------------------
 * CUCACHE_SIM_CAPACITY, as the simulator reads it
 * ---------------------------------------------------------------------- */

/* "80G", "512M", "1.5G", "64MiB", "8388608" (bytes): with these flags,
 * conf_read_size reads the grammar of the simulator's own reader
 * (subprojects/cusim/src/config.c, parse_size), so a value accepted here is
 * accepted there with the same meaning. */
static void run_check_capacity(const char *capacity)
{
    uint64_t bytes;
    char shown[CONF_SHOW_BUF];
    conf_show(shown, capacity, strlen(capacity));
    conf_num_t rc = conf_read_size(capacity, strlen(capacity), 1, CONF_SIZE_ROUND_DOWN | CONF_SIZE_LAX_I, &bytes);
    if (rc != CONF_NUM_OK && rc != CONF_NUM_BIG)
        run_die(RUN_EXIT_USAGE,
                "--sim=%s: not a size; expected a number with a K/M/G/T unit, like 80G or 512M "
                "(CUCACHE_SIM_CAPACITY)",
                shown);
    if (rc == CONF_NUM_BIG || bytes < RUN_SIM_CAPACITY_MIN || bytes > RUN_SIM_CAPACITY_MAX)
        run_die(RUN_EXIT_USAGE, "--sim=%s: out of range; the simulated device takes 4M to 16T (CUCACHE_SIM_CAPACITY)",
                shown);
}

/* ------------------------------------------------------------------------
 * The command line
 * ---------------------------------------------------------------------- */

/* If argv[*i] is --name or --name=VALUE, sets *value (the next argument for
 * the first form, consumed) and returns true. */
static bool run_opt_value(char **argv, int argc, int *i, const char *name, const char **value)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return false;
    if (a[n] == '=') {
        *value = a + n + 1;
    } else if (a[n] == '\0') {
        if (*i + 1 >= argc)
            run_die(RUN_EXIT_USAGE, "%s needs a value", name);
        *value = argv[++*i];
    } else {
        return false;
    }
    if (**value == '\0')
        run_die(RUN_EXIT_USAGE, "%s needs a value, got an empty one", name);
    return true;
}

/* If a is a framework's keep option (framework.h), marks it and returns true. */
static bool run_keep_option(const char *a, run_opts_t *o)
{
    for (size_t k = 0; k < HOOK_NFRAMEWORKS; k++)
        if (strcmp(a, hook_frameworks[k].keep_option) == 0) {
            o->keep[k] = true;
            return true;
        }
    return false;
}

static void run_parse_args(int argc, char **argv, run_opts_t *o)
{
    memset(o, 0, sizeof *o);
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break; /* the command */
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            run_usage(stdout);
            exit(0);
        } else if (strcmp(a, "--version") == 0) {
            printf("cucache-run %s\n", CUCACHE_VERSION);
            exit(0);
        } else if (strcmp(a, "--sim") == 0) {
            o->sim = true;
        } else if (strncmp(a, "--sim=", 6) == 0) {
            o->sim = true;
            o->capacity = a + 6;
            run_check_capacity(o->capacity);
        } else if (strcmp(a, "--stacks") == 0) {
            o->stacks = "native";
        } else if (strncmp(a, "--stacks=", 9) == 0) {
            if (!a[9])
                run_die(RUN_EXIT_USAGE, "--stacks=DEPTH needs a number of frames, or a mode (native, python, "
                                        "python+native; :DEPTH after it)");
            /* a number is native's depth; anything else is CUCACHE_STACKS's
             * value as written, which libcucache.so checks */
            o->stacks = a[9] >= '0' && a[9] <= '9' ? run_join("native", ':', a + 9) : a + 9;
        } else if (strcmp(a, "--report") == 0) {
            o->report = true;
        } else if (strcmp(a, "--print-env") == 0) {
            o->print_env = true;
        } else if (run_keep_option(a, o)) {
            /* a framework's cache kept */
        } else if (run_opt_value(argv, argc, &i, "--conf", &v)) {
            char *joined = o->conf ? run_join(o->conf, ',', v) : run_dup(v);
            free(o->conf);
            o->conf = joined;
        } else if (run_opt_value(argv, argc, &i, "--leak-exitcode", &v)) {
            o->leak_exitcode = v;
        } else if (run_opt_value(argv, argc, &i, "--trace", &v)) {
            o->trace = v;
        } else if (run_opt_value(argv, argc, &i, "--snapshot-on", &v)) {
            o->snapshot_on = v;
        } else if (run_opt_value(argv, argc, &i, "--snapshot", &v)) {
            o->snapshot = v;
        } else {
            char shown[CONF_SHOW_BUF];
            run_die(RUN_EXIT_USAGE, "unknown option '%s'", conf_show(shown, a, strlen(a)));
        }
    }
    o->command = i < argc ? argv + i : NULL;
    if (!o->command && !o->print_env)
        run_die(RUN_EXIT_USAGE, "no COMMAND to run");
}

/* ------------------------------------------------------------------------
 * The environment
 * ---------------------------------------------------------------------- */

static void plan_set(env_plan_t *plan, const char *name, char *value)
{
    plan->change[plan->n++] = (env_change_t){name, value};
}

#ifndef CUCACHE_RUN_BINDIR
#define CUCACHE_RUN_BINDIR "bin"
#endif
#ifndef CUCACHE_RUN_LIBDIR
#define CUCACHE_RUN_LIBDIR "lib"
#endif

/* Where an installation puts `rel` (under libdir), found from where this
 * program lies: <exe dir> less bindir's components is the prefix (so that
 * a relocated prefix works); an absolute libdir is taken as it is.  NULL
 * when exe_dir does not end with bindir. */
static char *run_installed(const char *exe_dir, const char *rel)
{
    if (CUCACHE_RUN_LIBDIR[0] == '/')
        return run_join(CUCACHE_RUN_LIBDIR, '/', rel);
    size_t n = strlen(exe_dir), b = strlen(CUCACHE_RUN_BINDIR);
    if (CUCACHE_RUN_BINDIR[0] == '/' || n <= b || strcmp(exe_dir + n - b, CUCACHE_RUN_BINDIR) != 0 ||
        exe_dir[n - b - 1] != '/')
        return NULL;
    char *prefix = run_alloc(n - b);
    memcpy(prefix, exe_dir, n - b - 1);
    prefix[n - b - 1] = '\0';
    char *lib = run_join(prefix, '/', CUCACHE_RUN_LIBDIR), *path = run_join(lib, '/', rel);
    free(prefix);
    free(lib);
    return path;
}

/* The first of <exe dir>/build_rel (a build tree), the installed place
 * (run_installed) and fallback (the build tree compiled in) that exists: a
 * regular file at that path, or at path/probe when probe is given.  Dies
 * naming what it looked for when none does. */
static char *run_locate(const char *exe_dir, const char *build_rel, const char *inst_rel, const char *fallback,
                        const char *probe, const char *what)
{
    char *cand[3] = {NULL, NULL, NULL}, *test[3] = {NULL, NULL, NULL};
    int n = 0, found = -1;
    if (exe_dir[0]) {
        cand[n++] = run_join(exe_dir, '/', build_rel);
        if ((cand[n] = run_installed(exe_dir, inst_rel)))
            n++;
    }
    bool dup = false;
    for (int k = 0; k < n; k++)
        dup |= strcmp(cand[k], fallback) == 0;
    if (!dup)
        cand[n++] = run_dup(fallback);
    for (int k = 0; k < n && found < 0; k++) {
        test[k] = probe ? run_join(cand[k], '/', probe) : run_dup(cand[k]);
        if (run_is_file(test[k]))
            found = k;
    }
    if (found < 0) {
        char looked[3 * PATH_MAX + 16] = "";
        for (int k = 0; k < n; k++)
            snprintf(looked + strlen(looked), sizeof looked - strlen(looked), "%s%s", k ? ", " : "",
                     test[k] ? test[k] : cand[k]);
        run_die(RUN_EXIT_SETUP, "%s not found: looked for %s (build cucache first: ninja -C build)", what, looked);
    }
    for (int k = 0; k < n; k++) {
        free(test[k]);
        if (k != found)
            free(cand[k]);
    }
    return cand[found];
}

/* path first in the ':'-separated list `name` of the environment. */
static char *run_prepend(const char *name, const char *path)
{
    if (strchr(path, ':') || (strcmp(name, "LD_PRELOAD") == 0 && strchr(path, ' ')))
        run_die(RUN_EXIT_SETUP, "%s cannot hold the path %s (it contains a separator)", name, path);
    return run_join(path, ':', secure_getenv(name));
}

static void run_plan(const run_opts_t *o, env_plan_t *plan)
{
    char exe_dir[PATH_MAX];
    run_exe_dir(exe_dir, sizeof exe_dir);
    memset(plan, 0, sizeof *plan);

    char *lib = run_locate(exe_dir, "libcucache.so", "libcucache.so.0", CUCACHE_RUN_LIBCUCACHE, NULL, "libcucache.so");
    plan_set(plan, "LD_PRELOAD", run_prepend("LD_PRELOAD", lib));
    free(lib);
    if (o->sim) {
        char *dir = run_locate(exe_dir, CUCACHE_RUN_SIM_BUILD_REL, CUCACHE_RUN_SIM_INSTALL_REL, CUCACHE_RUN_SIM_LIBDIR,
                               "libcudart.so.13", "the simulated device");
        plan_set(plan, "LD_LIBRARY_PATH", run_prepend("LD_LIBRARY_PATH", dir));
        free(dir);
        if (o->capacity)
            plan_set(plan, "CUCACHE_SIM_CAPACITY", run_dup(o->capacity));
    }
    if (o->conf)
        plan_set(plan, "CUCACHE_CONF", run_dup(o->conf));
    if (o->report)
        plan_set(plan, "CUCACHE_REPORT", run_dup("exit"));
    if (o->leak_exitcode)
        plan_set(plan, "CUCACHE_LEAK_EXITCODE", run_dup(o->leak_exitcode));
    if (o->stacks)
        plan_set(plan, "CUCACHE_STACKS", run_dup(o->stacks));
    if (o->trace)
        plan_set(plan, "CUCACHE_TRACE", run_dup(o->trace));
    if (o->snapshot)
        plan_set(plan, "CUCACHE_SNAPSHOT", run_dup(o->snapshot));
    if (o->snapshot_on)
        plan_set(plan, "CUCACHE_SNAPSHOT_ON", run_dup(o->snapshot_on));
    for (size_t k = 0; k < HOOK_NFRAMEWORKS; k++)
        if (!o->keep[k] && !secure_getenv(hook_frameworks[k].off_var))
            plan_set(plan, hook_frameworks[k].off_var, run_dup(hook_frameworks[k].off_value));
}

int main(int argc, char **argv)
{
    run_opts_t o;
    run_parse_args(argc, argv, &o);
    env_plan_t plan;
    run_plan(&o, &plan);

    if (o.print_env) {
        for (int k = 0; k < plan.n; k++) {
            printf("%s=%s\n", plan.change[k].name, plan.change[k].value);
            free(plan.change[k].value);
        }
        free(o.conf);
        return fflush(stdout) == 0 ? 0 : RUN_EXIT_SETUP;
    }
    for (int k = 0; k < plan.n; k++)
        if (setenv(plan.change[k].name, plan.change[k].value, 1) != 0)
            run_die(RUN_EXIT_SETUP, "cannot set %s: %s", plan.change[k].name, strerror(errno));

    execvp(o.command[0], o.command);
    int err = errno;
    char shown[CONF_SHOW_BUF];
    run_die(err == ENOENT ? RUN_EXIT_NOTFOUND : RUN_EXIT_NOEXEC, "cannot run %s: %s",
            conf_show(shown, o.command[0], strlen(o.command[0])), strerror(err));
}
