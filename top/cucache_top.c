/*
 * cucache-top: each GPU of the machine with every process on it, and what
 * cucache holds in each process that runs it (docs/top.md).
 *
 *   cucache-top [-d SECONDS] [-n N] [--once] [--json] [--prometheus FILE]
 *
 * Two sources, read afresh at every refresh:
 *   - NVML (libnvidia-ml.so.1, opened with dlopen, never linked): the GPUs
 *     (name, UUID, memory) and the compute processes on each with their
 *     bytes.  The process-list call is the newest the library has (one row
 *     per version, in stats/nvml_abi.c, which interpose/nvml.c uses too).
 *   - the GPU registry of each GPU (stats/registry.h), opened read-side
 *     (never created): every cucache process's figures, matched to NVML's
 *     rows by pid.  A cucache process that NVML does not list (holding
 *     nothing on the device) is shown too.  A registry file of this user
 *     whose GPU NVML does not list is shown when it has processes or is
 *     refused; without NVML every one is.
 *
 * A refused registry (st_reg_open's reason) is one line under its GPU.
 * Output: the screen redrawn like top (ANSI clear and home, rows cut to
 * the window, 'q' quits, the terminal restored at exit and on
 * SIGINT/SIGTERM), one plain table (--once), one JSON document (--json),
 * or the Prometheus text format into a file (--prometheus; written to
 * FILE.tmp and renamed, at each refresh).
 *
 * Exit status: 0; 1 when a file cannot be written; 2 for a usage error.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "hostalloc.h"
#include "nvml_abi.h"
#include "proc.h"
#include "registry.h"
#include "st.h"

enum {
    TOP_MAX_GPUS = 64,
    TOP_MAX_PROCS = 2 * ST_REG_SLOTS, /* NVML's rows and the registry's, per GPU */
};
/* Figures older than this are shown with their age: a process publishes
 * four times a second, so its publishing thread is stuck or stopped. */
#define TOP_OLD_FIGURES_NS (2000000000ull)
/* The COMMAND column's characters. */
#define TOP_COMMAND_WIDTH 24

/* ------------------------------------------------------------------------
 * What one refresh sees
 * ---------------------------------------------------------------------- */

typedef struct top_proc_s {
    unsigned pid;
    char comm[64];
    bool on_nvml;  /* NVML lists it (used is its bytes) */
    uint64_t used; /* NVML's usedGpuMemory */
    bool cucache;  /* the registry lists it: figs below */
    bool stale;    /* ... but its figures could not be read whole */
    st_reg_figs_t figs;
    int32_t gave_to;      /* the asker its last answer served; 0: it never answered one */
    uint64_t gave_bytes;  /* bytes that answer gave back (0: it had nothing idle) */
    uint64_t gave_ago_ns; /* how long before this refresh it answered */
} top_proc_t;

typedef struct top_gpu_s {
    int index; /* NVML's index; -1: a registry NVML does not list */
    char uuid[96];
    char name[96]; /* "" without NVML */
    uint64_t total, used;
    char refused[320]; /* the registry's refusal, "" when read or absent */
    top_proc_t proc[TOP_MAX_PROCS];
    size_t n;
} top_gpu_t;

typedef struct top_view_s {
    time_t time;
    char nvml_why[160]; /* "" when NVML answered */
    top_gpu_t *gpu;     /* TOP_MAX_GPUS of them */
    size_t ngpus;
} top_view_t;

/* ------------------------------------------------------------------------
 * NVML
 * ---------------------------------------------------------------------- */

static struct {
    bool loaded;
    char why[160];
    st_nvml_error_fn error;
    st_nvml_count_fn count;
    st_nvml_by_index_fn by_index;
    st_nvml_string_fn name, uuid;
    st_nvml_mem_fn mem;
    st_nvml_list_t procs;
} nvml;

/* Loads and initialises NVML once; nvml.why says why not. */
static void nvml_load(void)
{
    if (nvml.loaded)
        return;
    nvml.loaded = true;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_LOCAL | RTLD_NOW);
    if (!lib) {
        snprintf(nvml.why, sizeof nvml.why, "NVML: libnvidia-ml.so.1 cannot be loaded");
        return;
    }
    st_nvml_init_fn init = (st_nvml_init_fn)dlsym(lib, "nvmlInit_v2");
    nvml.error = (st_nvml_error_fn)dlsym(lib, "nvmlErrorString");
    nvml.count = (st_nvml_count_fn)dlsym(lib, "nvmlDeviceGetCount_v2");
    nvml.by_index = (st_nvml_by_index_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    nvml.name = (st_nvml_string_fn)dlsym(lib, "nvmlDeviceGetName");
    nvml.uuid = (st_nvml_string_fn)dlsym(lib, "nvmlDeviceGetUUID");
    nvml.mem = (st_nvml_mem_fn)dlsym(lib, "nvmlDeviceGetMemoryInfo");
    nvml.procs = st_nvml_find_list(lib, dlsym);
    const char *lacks = !init              ? "nvmlInit_v2"
                        : !nvml.count      ? "nvmlDeviceGetCount_v2"
                        : !nvml.by_index   ? "nvmlDeviceGetHandleByIndex_v2"
                        : !nvml.name       ? "nvmlDeviceGetName"
                        : !nvml.uuid       ? "nvmlDeviceGetUUID"
                        : !nvml.mem        ? "nvmlDeviceGetMemoryInfo"
                        : !nvml.procs.call ? "nvmlDeviceGetComputeRunningProcesses"
                                           : NULL;
    if (lacks) {
        snprintf(nvml.why, sizeof nvml.why, "NVML: libnvidia-ml.so.1 lacks %s", lacks);
        return;
    }
    int rc = init();
    if (rc != ST_NVML_OK)
        snprintf(nvml.why, sizeof nvml.why, "NVML: nvmlInit_v2 failed: %s", st_nvml_text(nvml.error, rc));
}

/* Interpreters, whose command name says less than the script they run:
 * one row each, matched on the start of the command name. */
static const char *const top_interpreters[] = {"python", "perl", "ruby", "node", "bash", "sh", "julia", "Rscript"};

/* The script an interpreter's command line runs and the words after it,
 * as many as fit in len ("train.py --epochs 3"); false when argv has none
 * (an option such as -c or -m first, or no argument). */
static bool top_script(const char *argv, size_t n, char *out, size_t len)
{
    const char *word = argv + strlen(argv) + 1; /* past the interpreter */
    if (word >= argv + n || word[0] == '-' || !word[0])
        return false;
    const char *base = strrchr(word, '/');
    size_t used = (size_t)snprintf(out, len, "%s", base ? base + 1 : word);
    for (word += strlen(word) + 1; word < argv + n && used < len; word += strlen(word) + 1) {
        if (used + 1 + strlen(word) >= len)
            break;
        used += (size_t)snprintf(out + used, len - used, " %s", word);
    }
    return true;
}

/* The command of pid: /proc/PID/comm, or for an interpreter the script it
 * runs with its arguments (top_script); "?" when it is not visible. */
static void top_comm(unsigned pid, char *out, size_t len)
{
    uint64_t start;
    char state, comm[16];
    if (!proc_stat((int32_t)pid, &start, &state, comm)) {
        snprintf(out, len, "?");
        return;
    }
    snprintf(out, len, "%s", comm);
    bool interpreter = false;
    for (size_t i = 0; i < sizeof top_interpreters / sizeof top_interpreters[0]; i++)
        interpreter = interpreter || strncmp(comm, top_interpreters[i], strlen(top_interpreters[i])) == 0;
    char path[64], argv[512];
    snprintf(path, sizeof path, "/proc/%u/cmdline", pid);
    FILE *f = interpreter ? fopen(path, "re") : NULL;
    if (!f)
        return;
    size_t n = fread(argv, 1, sizeof argv - 1, f);
    fclose(f);
    argv[n] = '\0';
    char script[TOP_COMMAND_WIDTH + 1]; /* whole words that fit the column */
    if (n && top_script(argv, n, script, sizeof script))
        snprintf(out, len, "%s", script);
}

static top_proc_t *gpu_proc(top_gpu_t *g, unsigned pid)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->proc[i].pid == pid)
            return &g->proc[i];
    if (g->n == TOP_MAX_PROCS)
        return NULL;
    top_proc_t *p = &g->proc[g->n++];
    memset(p, 0, sizeof *p);
    p->pid = pid;
    return p;
}

/* NVML's processes on dev into g: one ask, for as many rows as g holds. */
static void nvml_procs(st_nvml_dev_t dev, top_gpu_t *g)
{
    st_nvml_proc_t *rows;
    unsigned n;
    if (st_nvml_procs(nvml.procs, dev, TOP_MAX_PROCS, 1, &rows, &n) != ST_NVML_OK)
        return; /* the GPU is still shown, with the registry's processes */
    for (unsigned i = 0; i < n; i++) {
        top_proc_t *p = gpu_proc(g, rows[i].pid);
        if (!p)
            break;
        p->on_nvml = true;
        p->used = rows[i].used;
        top_comm(rows[i].pid, p->comm, sizeof p->comm);
    }
    hostalloc_free(rows);
}

/* ------------------------------------------------------------------------
 * Registries
 * ---------------------------------------------------------------------- */

/* The last ask the process of slot answered: whom, what it gave, when.
 * Its owner writes these words apart, so a give under way may show the
 * ask before its bytes: the next refresh has both. */
static void registry_last_give(st_reg_slot_t *slot, top_proc_t *p)
{
    uint64_t at = atomic_load(&slot->answered_ns);
    p->gave_to = at ? atomic_load(&slot->asker) : 0;
    p->gave_bytes = atomic_load(&slot->given);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* answered_ns's clock */
    uint64_t now_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    p->gave_ago_ns = now_ns > at ? now_ns - at : 0;
}

/* The registry of g's UUID into g: its processes, or its refusal.  false
 * when there is no registry file. */
static bool registry_read(top_gpu_t *g, const char *path)
{
    st_reg_t r;
    char why[sizeof g->refused];
    int rc = st_reg_open(path, g->uuid, 0, false, &r, why, sizeof why);
    if (rc == -1)
        return false;
    if (rc != 0) {
        snprintf(g->refused, sizeof g->refused, "%s", why);
        return true;
    }
    if (!g->total)
        g->total = r.f->total;
    static st_reg_view_t views[ST_REG_SLOTS];
    size_t n = st_reg_list(&r, views, ST_REG_SLOTS);
    for (size_t i = 0; i < n && i < ST_REG_SLOTS; i++) {
        top_proc_t *p = gpu_proc(g, (unsigned)views[i].pid);
        if (!p)
            break;
        p->cucache = true;
        p->stale = views[i].stale;
        p->figs = views[i].figs;
        registry_last_give(&r.f->slot[views[i].slot], p);
        if (!p->comm[0])
            snprintf(p->comm, sizeof p->comm, "%s", views[i].comm);
    }
    st_reg_close(&r);
    return true;
}

/* The registry files of this user in ST_REG_DIR whose GPU is not in the
 * view yet: every one when all, else those with processes or refused. */
static void registry_others(top_view_t *v, bool all)
{
    st_reg_sweep(); /* no process lives in them: nothing to show */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s%u-", ST_REG_PREFIX, (unsigned)geteuid());
    DIR *d = opendir(ST_REG_DIR);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && v->ngpus < TOP_MAX_GPUS) {
        const char *uuid = e->d_name + strlen(prefix);
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || (len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0))
            continue;
        bool known = false;
        for (size_t i = 0; i < v->ngpus; i++)
            known = known || strcmp(v->gpu[i].uuid, uuid) == 0;
        if (known)
            continue;
        top_gpu_t *g = &v->gpu[v->ngpus];
        memset(g, 0, offsetof(top_gpu_t, proc));
        g->n = 0;
        g->index = -1;
        snprintf(g->uuid, sizeof g->uuid, "%s", uuid);
        char path[512];
        snprintf(path, sizeof path, "%s/%s", ST_REG_DIR, e->d_name);
        if (registry_read(g, path) && (all || g->n || g->refused[0]))
            v->ngpus++;
    }
    closedir(d);
}

/* One refresh: NVML's GPUs and processes, then the registries. */
static void view_take(top_view_t *v)
{
    v->time = time(NULL);
    v->ngpus = 0;
    nvml_load();
    snprintf(v->nvml_why, sizeof v->nvml_why, "%s", nvml.why);
    unsigned count = 0;
    int rc = nvml.why[0] ? ST_NVML_OK : nvml.count(&count);
    if (rc != ST_NVML_OK)
        snprintf(v->nvml_why, sizeof v->nvml_why, "NVML: nvmlDeviceGetCount_v2 failed: %s",
                 st_nvml_text(nvml.error, rc));
    for (unsigned i = 0; !v->nvml_why[0] && i < count && v->ngpus < TOP_MAX_GPUS; i++) {
        st_nvml_dev_t dev;
        if (nvml.by_index(i, &dev) != ST_NVML_OK)
            continue;
        top_gpu_t *g = &v->gpu[v->ngpus++];
        memset(g, 0, offsetof(top_gpu_t, proc));
        g->n = 0;
        g->index = (int)i;
        if (nvml.name(dev, g->name, sizeof g->name) != ST_NVML_OK)
            snprintf(g->name, sizeof g->name, "?");
        if (nvml.uuid(dev, g->uuid, sizeof g->uuid) != ST_NVML_OK)
            snprintf(g->uuid, sizeof g->uuid, "?");
        st_nvml_mem_t m;
        if (nvml.mem(dev, &m) == ST_NVML_OK) {
            g->total = m.total;
            g->used = m.used;
        }
        nvml_procs(dev, g);
        char path[256];
        st_reg_path(g->uuid, path, sizeof path);
        registry_read(g, path);
    }
    registry_others(v, v->nvml_why[0] != 0);
}

/* ------------------------------------------------------------------------
 * Text: the table of --once and of the screen
 * ---------------------------------------------------------------------- */

typedef void (*top_line_fn)(void *ctx, const char *line);

static void size_or_dash(char *buf, size_t len, bool have, uint64_t bytes)
{
    if (have)
        st_fmt_size(buf, len, bytes);
    else
        snprintf(buf, len, "-");
}

/* "850 ms", "12 s", "4 min", "3 h": how long ago, as a column shows it. */
static void top_fmt_age(char *buf, size_t len, uint64_t ns)
{
    uint64_t ms = ns / 1000000u, s = ms / 1000u;
    if (s < 1)
        snprintf(buf, len, "%llu ms", (unsigned long long)ms);
    else if (s < 120)
        snprintf(buf, len, "%llu s", (unsigned long long)s);
    else if (s < 7200)
        snprintf(buf, len, "%llu min", (unsigned long long)(s / 60));
    else
        snprintf(buf, len, "%llu h", (unsigned long long)(s / 3600));
}

/* CLOCK_REALTIME in ns: the clock of a slot's updated_ns. */
static uint64_t top_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The cucache columns of p: live, cached, idle, pending, hit rate, OOMs,
 * given, received, its last give (to whom, how long ago); dashes for a
 * process without cucache.  "Holds nothing" only where NVML lists the GPU:
 * it alone knows.  Figures older than TOP_OLD_FIGURES_NS say their age. */
static void proc_row(const top_gpu_t *g, const top_proc_t *p, char *out, size_t len)
{
    char used[24], live[24], cached[24], idle[24], pending[24], given[24], received[24], hit[16], ooms[24];
    size_or_dash(used, sizeof used, p->on_nvml, p->used);
    bool c = p->cucache && !p->stale;
    const st_reg_figs_t *f = &p->figs;
    size_or_dash(live, sizeof live, c, f->allocated);
    size_or_dash(cached, sizeof cached, c, f->reserved > f->allocated ? f->reserved - f->allocated : 0);
    size_or_dash(idle, sizeof idle, c, f->idle);
    size_or_dash(pending, sizeof pending, c, f->pending);
    size_or_dash(given, sizeof given, c, f->bytes_given);
    size_or_dash(received, sizeof received, c, f->bytes_received);
    if (c && f->allocs)
        snprintf(hit, sizeof hit, "%.1f%%", 100.0 * (double)f->hits / (double)f->allocs);
    else
        snprintf(hit, sizeof hit, "-");
    if (c)
        st_fmt_count(ooms, sizeof ooms, f->ooms);
    else
        snprintf(ooms, sizeof ooms, "-");
    char gave[64], bytes[24], ago[24], old[64] = "";
    if (c && p->gave_to) {
        st_fmt_size(bytes, sizeof bytes, p->gave_bytes);
        top_fmt_age(ago, sizeof ago, p->gave_ago_ns);
        snprintf(gave, sizeof gave, "%s to %d, %s ago", bytes, p->gave_to, ago);
    } else {
        snprintf(gave, sizeof gave, "-");
    }
    uint64_t now_ns = (uint64_t)top_now_ns();
    if (c && now_ns > f->updated_ns + TOP_OLD_FIGURES_NS) {
        top_fmt_age(ago, sizeof ago, now_ns - f->updated_ns);
        snprintf(old, sizeof old, "  (figures of %s ago: not publishing)", ago);
    }
    snprintf(out, len, "%8u %-*.*s %11s %11s %11s %11s %11s %6s %5s %11s %11s  %-27s%s%s", p->pid, TOP_COMMAND_WIDTH,
             TOP_COMMAND_WIDTH, p->comm, used, live, cached, idle, pending, hit, ooms, given, received, gave,
             p->stale                                     ? "  (figures being written)"
             : p->cucache && !p->on_nvml && g->index >= 0 ? "  (cucache, holds nothing on the GPU)"
                                                          : "",
             old);
    for (size_t n = strlen(out); n && out[n - 1] == ' '; n--)
        out[n - 1] = '\0'; /* the last column's padding, when no note follows */
}

static void text_lines(const top_view_t *v, top_line_fn line, void *ctx)
{
    char buf[512], used[24], total[24];
    if (v->nvml_why[0]) {
        snprintf(buf, sizeof buf,
                 "%s: the GPUs' processes are not known; the cucache registries found in %s:", v->nvml_why, ST_REG_DIR);
        line(ctx, buf);
    }
    if (!v->ngpus)
        line(ctx, v->nvml_why[0] ? "(none)" : "no GPU");
    for (size_t i = 0; i < v->ngpus; i++) {
        const top_gpu_t *g = &v->gpu[i];
        line(ctx, "");
        st_fmt_size(total, sizeof total, g->total);
        st_fmt_size(used, sizeof used, g->used);
        if (g->index >= 0)
            snprintf(buf, sizeof buf, "GPU %d  %s  %s  %s used of %s", g->index, g->name, g->uuid, used, total);
        else
            snprintf(buf, sizeof buf, "GPU %s (registry only: %s)%s%s", g->uuid,
                     v->nvml_why[0] ? "no NVML" : "not listed by NVML", g->total ? "  total " : "",
                     g->total ? total : "");
        line(ctx, buf);
        if (g->refused[0]) {
            snprintf(buf, sizeof buf, "  registry refused: %s", g->refused);
            line(ctx, buf);
        }
        if (!g->n) {
            line(ctx, "  no processes");
            continue;
        }
        snprintf(buf, sizeof buf, "%8s %-*s %11s %11s %11s %11s %11s %6s %5s %11s %11s  %s", "PID", TOP_COMMAND_WIDTH,
                 "COMMAND", "USED", "LIVE", "CACHED", "IDLE", "PENDING", "HIT", "OOMS", "GIVEN", "RECEIVED",
                 "LAST GIVE");
        line(ctx, buf);
        for (size_t j = 0; j < g->n; j++) {
            proc_row(g, &g->proc[j], buf, sizeof buf);
            line(ctx, buf);
        }
    }
}

static void line_to_stdout(void *ctx, const char *line)
{
    (void)ctx;
    fputs(line, stdout);
    fputc('\n', stdout);
}

/* ------------------------------------------------------------------------
 * JSON and Prometheus
 * ---------------------------------------------------------------------- */

/* s as a JSON string: quotes, backslashes and control bytes escaped. */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20 || *c == 0x7f)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    }
    fputc('"', f);
}

static void json_write(const top_view_t *v, FILE *f)
{
    fprintf(f, "{\"time\":%lld,\"nvml\":", (long long)v->time);
    if (v->nvml_why[0])
        json_string(f, v->nvml_why);
    else
        fputs("null", f);
    fputs(",\"gpus\":[", f);
    for (size_t i = 0; i < v->ngpus; i++) {
        const top_gpu_t *g = &v->gpu[i];
        fprintf(f, "%s{\"index\":", i ? "," : "");
        g->index >= 0 ? fprintf(f, "%d", g->index) : fputs("null", f);
        fputs(",\"uuid\":", f);
        json_string(f, g->uuid);
        fputs(",\"name\":", f);
        g->name[0] ? json_string(f, g->name) : (void)fputs("null", f);
        fprintf(f, ",\"total\":%llu,\"used\":", (unsigned long long)g->total);
        g->index >= 0 ? fprintf(f, "%llu", (unsigned long long)g->used) : fputs("null", f);
        fputs(",\"refused\":", f);
        g->refused[0] ? json_string(f, g->refused) : (void)fputs("null", f);
        fputs(",\"processes\":[", f);
        for (size_t j = 0; j < g->n; j++) {
            const top_proc_t *p = &g->proc[j];
            fprintf(f, "%s{\"pid\":%u,\"command\":", j ? "," : "", p->pid);
            json_string(f, p->comm);
            fputs(",\"used\":", f);
            p->on_nvml ? fprintf(f, "%llu", (unsigned long long)p->used) : fputs("null", f);
            fputs(",\"cucache\":", f);
            if (!p->cucache || p->stale) {
                fputs("null}", f);
                continue;
            }
            char sep = '{';
#define TOP_JSON_FIG(name) fprintf(f, "%c\"" #name "\":%llu", sep, (unsigned long long)p->figs.name), sep = ',';
            ST_REG_FIGURES(TOP_JSON_FIG)
#undef TOP_JSON_FIG
            fputs("},\"last_give\":", f);
            if (p->gave_to)
                fprintf(f, "{\"to\":%d,\"bytes\":%llu,\"ago_ms\":%llu}}", p->gave_to, (unsigned long long)p->gave_bytes,
                        (unsigned long long)(p->gave_ago_ns / 1000000u));
            else
                fputs("null}", f);
        }
        fputs("]}", f);
    }
    fputs("]}\n", f);
}

/* s as a label value of the exposition format: \, " and newline escaped. */
static void prom_label(FILE *f, const char *name, const char *s, bool more)
{
    fprintf(f, "%s=\"", name);
    for (const char *c = s; *c; c++) {
        if (*c == '\\' || *c == '"')
            fprintf(f, "\\%c", *c);
        else if (*c == '\n')
            fputs("\\n", f);
        else
            fputc(*c, f);
    }
    fprintf(f, "\"%s", more ? "," : "");
}

/* The metrics: one row each (name, type, help, what it reads). */
typedef enum {
    PM_GPU_TOTAL,
    PM_GPU_USED,
    PM_USED,
    PM_ALLOCATED,
    PM_CACHED,
    PM_IDLE,
    PM_PENDING,
    PM_ALLOCS,
    PM_HITS,
    PM_OOMS,
    PM_YIELDED
} prom_what_t;
static const struct {
    const char *name, *type, *help;
    prom_what_t what;
} prom_metrics[] = {
    {"cucache_gpu_memory_total_bytes", "gauge", "The GPU's memory (NVML).", PM_GPU_TOTAL},
    {"cucache_gpu_memory_used_bytes", "gauge", "The GPU's memory in use (NVML).", PM_GPU_USED},
    {"cucache_process_memory_used_bytes", "gauge", "A process's memory on the GPU (NVML).", PM_USED},
    {"cucache_process_allocated_bytes", "gauge", "Live allocations of a cucache process.", PM_ALLOCATED},
    {"cucache_process_cached_bytes", "gauge", "Memory a cucache process holds free for reuse.", PM_CACHED},
    {"cucache_process_idle_bytes", "gauge", "Cache a cucache process would give back now.", PM_IDLE},
    {"cucache_process_pending_bytes", "gauge", "Freed memory waiting on queued work.", PM_PENDING},
    {"cucache_process_allocations_total", "counter", "Allocations a cucache process served.", PM_ALLOCS},
    {"cucache_process_cache_hits_total", "counter", "Allocations served from the cache.", PM_HITS},
    {"cucache_process_ooms_total", "counter", "Allocations that failed.", PM_OOMS},
    {"cucache_process_yielded_bytes_total", "counter",
     "Idle cache given back to other processes, or received from them.", PM_YIELDED},
};

static void prom_gpu_labels(FILE *f, const top_gpu_t *g, bool more)
{
    char idx[16];
    snprintf(idx, sizeof idx, "%d", g->index);
    prom_label(f, "gpu", g->index >= 0 ? idx : "", true);
    prom_label(f, "uuid", g->uuid, more);
}

static void prom_sample(FILE *f, const char *name, const top_gpu_t *g, const top_proc_t *p, const char *dir,
                        uint64_t value)
{
    fprintf(f, "%s{", name);
    prom_gpu_labels(f, g, p != NULL);
    if (p) {
        char pid[16];
        snprintf(pid, sizeof pid, "%u", p->pid);
        prom_label(f, "pid", pid, true);
        prom_label(f, "command", p->comm, dir != NULL);
        if (dir)
            prom_label(f, "direction", dir, false);
    }
    fprintf(f, "} %llu\n", (unsigned long long)value);
}

static void prom_write(const top_view_t *v, FILE *f)
{
    for (size_t m = 0; m < sizeof prom_metrics / sizeof prom_metrics[0]; m++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", prom_metrics[m].name, prom_metrics[m].help, prom_metrics[m].name,
                prom_metrics[m].type);
        prom_what_t w = prom_metrics[m].what;
        for (size_t i = 0; i < v->ngpus; i++) {
            const top_gpu_t *g = &v->gpu[i];
            if (w == PM_GPU_TOTAL || w == PM_GPU_USED) {
                if (g->index >= 0 || w == PM_GPU_TOTAL)
                    prom_sample(f, prom_metrics[m].name, g, NULL, NULL, w == PM_GPU_TOTAL ? g->total : g->used);
                continue;
            }
            for (size_t j = 0; j < g->n; j++) {
                const top_proc_t *p = &g->proc[j];
                const st_reg_figs_t *s = &p->figs;
                if (w == PM_USED) {
                    if (p->on_nvml)
                        prom_sample(f, prom_metrics[m].name, g, p, NULL, p->used);
                    continue;
                }
                if (!p->cucache || p->stale)
                    continue;
                uint64_t value = w == PM_ALLOCATED ? s->allocated
                                 : w == PM_CACHED  ? (s->reserved > s->allocated ? s->reserved - s->allocated : 0)
                                 : w == PM_IDLE    ? s->idle
                                 : w == PM_PENDING ? s->pending
                                 : w == PM_ALLOCS  ? s->allocs
                                 : w == PM_HITS    ? s->hits
                                 : w == PM_OOMS    ? s->ooms
                                                   : s->bytes_given;
                prom_sample(f, prom_metrics[m].name, g, p, w == PM_YIELDED ? "given" : NULL, value);
                if (w == PM_YIELDED)
                    prom_sample(f, prom_metrics[m].name, g, p, "received", s->bytes_received);
            }
        }
    }
}

/* The exposition into path.tmp, renamed to path: 0, or -1 with one line
 * on stderr. */
static int prom_file(const top_view_t *v, const char *path)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        fprintf(stderr, "cucache-top: --prometheus: the file name is too long\n");
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "cucache-top: --prometheus: cannot write %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    prom_write(v, f);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        fprintf(stderr, "cucache-top: --prometheus: cannot write %s: %s\n", path, strerror(errno ? errno : EIO));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * The screen
 * ---------------------------------------------------------------------- */

static struct termios saved_tty;
static bool tty_raw;
static volatile sig_atomic_t stop_signal;

static void tty_restore(void)
{
    if (tty_raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
    tty_raw = false;
}

static void on_stop(int sig)
{
    stop_signal = sig;
}

/* Keys one at a time, no echo: 'q' is read without Enter. */
static void tty_setup(void)
{
    struct sigaction sa = {.sa_handler = on_stop}; /* no SA_RESTART: poll returns */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_tty) != 0)
        return;
    struct termios raw = saved_tty;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0) {
        tty_raw = true;
        atexit(tty_restore);
    }
}

typedef struct screen_s {
    unsigned rows, cols, done;
} screen_t;

/* One line of the screen, cut to the window; the last row says what was
 * left out. */
static void line_to_screen(void *ctx, const char *line)
{
    screen_t *s = ctx;
    if (s->done >= s->rows)
        return;
    if (s->done + 1 == s->rows) {
        printf("\n...");
        s->done++;
        return;
    }
    printf("%s%.*s\033[K", s->done ? "\n" : "", (int)s->cols, line);
    s->done++;
}

static void screen_draw(const top_view_t *v, double interval)
{
    struct winsize ws;
    screen_t s = {.rows = 24, .cols = 80};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
        s.rows = ws.ws_row;
        s.cols = ws.ws_col;
    }
    char when[64], head[160];
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&v->time, &tm));
    snprintf(head, sizeof head, "cucache-top  %s  every %g s  (q quits)", when, interval);
    fputs("\033[H\033[2J", stdout);
    line_to_screen(&s, head);
    text_lines(v, line_to_screen, &s);
    fflush(stdout);
}

/* Waits up to seconds for 'q' or a stop signal: true to go on. */
static bool screen_wait(double seconds)
{
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    long long end_ms = (long long)end.tv_sec * 1000 + end.tv_nsec / 1000000 + (long long)(seconds * 1000);
    for (;;) {
        if (stop_signal)
            return false;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long left = end_ms - ((long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
        if (left <= 0)
            return true;
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        int rc = poll(&pfd, tty_raw ? 1 : 0, (int)left);
        if (rc > 0) {
            char c;
            if (read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q'))
                return false;
        }
    }
}

/* ------------------------------------------------------------------------
 * Options
 * ---------------------------------------------------------------------- */

static void top_usage(FILE *f)
{
    fputs("usage: cucache-top [OPTIONS]\n"
          "Each GPU with every process on it (NVML) and what cucache holds in each.\n"
          "\n"
          "  -d, --interval SECONDS  refresh every SECONDS (default 1)\n"
          "  -n, --iterations N      stop after N refreshes\n"
          "  --once                  print one plain table and exit\n"
          "  --json                  print one JSON document and exit\n"
          "  --prometheus FILE       write the Prometheus text format into FILE at each\n"
          "                          refresh (with --once: once), instead of the screen\n"
          "  -h, --help              this text\n"
          "  --version               the version\n"
          "\n"
          "Interactive: q quits.  Exit status: 0; 1 when FILE cannot be written; 2 for a\n"
          "usage error.\n",
          f);
}

static int bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("cucache-top: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (cucache-top --help lists the options)\n", stderr);
    va_end(ap);
    return 2;
}

int main(int argc, char **argv)
{
    enum { OPT_ONCE = 256, OPT_JSON, OPT_PROM, OPT_VERSION };
    static const struct option longs[] = {
        {"interval", required_argument, NULL, 'd'},
        {"iterations", required_argument, NULL, 'n'},
        {"once", no_argument, NULL, OPT_ONCE},
        {"json", no_argument, NULL, OPT_JSON},
        {"prometheus", required_argument, NULL, OPT_PROM},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    double interval = 1.0;
    long long iterations = 0; /* 0: until q */
    bool once = false, json = false;
    const char *prom = NULL;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":d:n:h", longs, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'd':
            errno = 0;
            interval = strtod(optarg, &end);
            if (end == optarg || *end || errno || !isfinite(interval) || interval < 0.1 || interval > 86400)
                return bad_usage("-d/--interval: '%s' is not a number of seconds from 0.1 to 86400", optarg);
            break;
        case 'n':
            errno = 0;
            iterations = strtoll(optarg, &end, 10);
            if (end == optarg || *end || errno || iterations < 1)
                return bad_usage("-n/--iterations: '%s' is not a positive whole number", optarg);
            break;
        case OPT_ONCE:
            once = true;
            break;
        case OPT_JSON:
            json = true;
            break;
        case OPT_PROM:
            if (!*optarg)
                return bad_usage("--prometheus: the file name is empty");
            prom = optarg;
            break;
        case 'h':
            top_usage(stdout);
            return 0;
        case OPT_VERSION:
            printf("cucache-top %s\n", CUCACHE_VERSION);
            return 0;
        case ':':
            return bad_usage("%s needs a value", argv[optind - 1]);
        default:
            if (optopt)
                return bad_usage("unknown option '-%c'", optopt);
            return bad_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return bad_usage("unexpected argument '%s'", argv[optind]);
    if (json && prom)
        return bad_usage("--json and --prometheus cannot be used together");

    top_view_t v = {.gpu = calloc(TOP_MAX_GPUS, sizeof(top_gpu_t))};
    if (!v.gpu) {
        fprintf(stderr, "cucache-top: out of memory\n");
        return 1;
    }
    int rc = 0;
    if (json || (once && !prom)) {
        view_take(&v);
        json ? json_write(&v, stdout) : text_lines(&v, line_to_stdout, NULL);
        rc = fflush(stdout) == 0 ? 0 : 1;
        goto out;
    }
    if (prom) {
        struct sigaction sa = {.sa_handler = on_stop};
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        for (long long i = 0; !stop_signal; i++) {
            view_take(&v);
            if (prom_file(&v, prom) != 0) {
                rc = 1;
                break;
            }
            if (once || (iterations && i + 1 >= iterations))
                break;
            struct timespec ts = {(time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9)};
            nanosleep(&ts, NULL);
        }
        goto out;
    }
    tty_setup();
    for (long long i = 0;; i++) {
        view_take(&v);
        screen_draw(&v, interval);
        if ((iterations && i + 1 >= iterations) || !screen_wait(interval))
            break;
    }
    fputs("\n", stdout);
    tty_restore();
out:
    free(v.gpu);
    return rc;
}
