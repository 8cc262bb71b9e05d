/*
 * bench_util: what bench_core and bench_preload share (bench_util.h says
 * what each piece is for).
 */
#include "bench_util.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* Prints "<bench_prog>: <message>" on stderr and exits with status 1. */
void bench_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", bench_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The CPU's model name from /proc/cpuinfo into buf, or "unknown". */
void bench_cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "model name", 10) == 0) {
                char *colon = strchr(line, ':');
                if (colon) {
                    snprintf(buf, len, "%s", colon + 2);
                    buf[strcspn(buf, "\n")] = 0;
                }
                break;
            }
        fclose(f);
    }
}

/* Whether name matches one of the nonly globs of only (-s NAME), or nonly
 * is 0. */
bool bench_selected(const char *const *only, int nonly, const char *name)
{
    if (nonly == 0)
        return true;
    for (int i = 0; i < nonly; i++)
        if (fnmatch(only[i], name, 0) == 0)
            return true;
    return false;
}

/* ------------------------------------------------------------------------
 * The CPU load of other processes
 * ---------------------------------------------------------------------- */

/* The machine's busy and total CPU time (/proc/stat) and this process's
 * (getrusage), now. */
bench_load_t bench_load_now(void)
{
    bench_load_t l = {0, 0, 0};
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (f) {
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]) == 8) {
            double hz = (double)sysconf(_SC_CLK_TCK);
            l.busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / hz; /* all but idle and iowait */
            l.total = (double)(v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7]) / hz;
        }
        fclose(f);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    l.self = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
             (double)ru.ru_stime.tv_usec / 1e6;
    return l;
}

/* CPUs kept busy by others between a and b (0 to the machine's count). */
double bench_load_others(const bench_load_t *a, const bench_load_t *b)
{
    double total = b->total - a->total;
    if (total <= 0)
        return 0;
    double others = (b->busy - a->busy) - (b->self - a->self);
    double cpus = (double)sysconf(_SC_NPROCESSORS_ONLN);
    return others > 0 ? others / total * cpus : 0;
}

/* ------------------------------------------------------------------------
 * Series of timed runs
 * ---------------------------------------------------------------------- */

/* qsort's order on doubles, ascending. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of s's values (s->n >= 1). */
double bench_series_median(const bench_series_t *s)
{
    double v[BENCH_MAX_RUNS];
    memcpy(v, s->v, (size_t)s->n * sizeof *v);
    qsort(v, (size_t)s->n, sizeof *v, cmp_double);
    return s->n % 2 ? v[s->n / 2] : (v[s->n / 2 - 1] + v[s->n / 2]) / 2;
}

/* The number v of option opt, from lo to hi, or bench_die naming the
 * option and what it accepts. */
double bench_number(const char *opt, const char *v, double lo, double hi)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi))
        bench_die("%s: '%s': expected a number from %g to %g", opt, v, lo, hi);
    return x;
}

/* The q-quantile (0 to 1) of the n values of v, nearest rank: sorts v in
 * place; 0 when n is 0. */
double bench_quantile(double *v, size_t n, double q)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    double rank = q * (double)n;
    size_t i = rank <= 1 ? 0 : (size_t)(rank + 0.999999) - 1;
    return v[i < n ? i : n - 1];
}

/* The smallest of s's values (s->n >= 1). */
double bench_series_min(const bench_series_t *s)
{
    double m = s->v[0];
    for (int i = 1; i < s->n; i++)
        m = s->v[i] < m ? s->v[i] : m;
    return m;
}

/* The largest of s's values (s->n >= 1). */
double bench_series_max(const bench_series_t *s)
{
    double m = s->v[0];
    for (int i = 1; i < s->n; i++)
        m = s->v[i] > m ? s->v[i] : m;
    return m;
}

/* "median (min-max)" with one decimal into buf, or "-" when s is empty. */
void bench_series_fmt(char *buf, size_t len, const bench_series_t *s)
{
    if (s->n == 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.1f (%.1f-%.1f)", bench_series_median(s), bench_series_min(s), bench_series_max(s));
}

/* ------------------------------------------------------------------------
 * Traces (bench/sizes_<trace>.txt)
 * ---------------------------------------------------------------------- */

/* realloc, or bench_die when memory is out. */
static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n);
    if (!p)
        bench_die("out of memory");
    return p;
}

/* Loads the trace at path under name; false when the file cannot be opened,
 * and bench_die when it is malformed. */
bool bench_trace_load(bench_trace_t *t, const char *path, const char *name)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    size_t cap = 0;
    bool *alive = NULL; /* per allocation: allocated and not yet freed */
    char line[128];
    while (fgets(line, sizeof line, f)) {
        char kind;
        long long v;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (sscanf(line, "%c %lld", &kind, &v) != 2 || (kind != 'a' && kind != 'f') || v < 0 ||
            (kind == 'a' && v == 0) || (kind == 'f' && ((size_t)v >= t->nalloc || !alive[v])))
            bench_die("%s: bad line (or a free of an allocation that is not live): %s", path, line);
        if (t->nops == cap) {
            cap = cap ? cap * 2 : 4096;
            t->ops = xrealloc(t->ops, cap * sizeof *t->ops);
            alive = xrealloc(alive, cap * sizeof *alive); /* nalloc <= nops */
        }
        if (kind == 'a') {
            alive[t->nalloc++] = true;
            t->ops[t->nops++] = v;
        } else {
            alive[v] = false;
            t->ops[t->nops++] = -v;
        }
    }
    fclose(f);
    free(alive);
    if (!t->nalloc)
        bench_die("%s: no allocations", path);
    t->live = calloc(t->nalloc, sizeof *t->live);
    if (!t->live)
        bench_die("out of memory");
    return true;
}

/* qsort's order on C strings, by strcmp. */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every sizes_<trace>.txt of dir, by name, into out (at most max); returns
 * the count. */
size_t bench_traces_find(const char *dir, bench_trace_t *out, size_t max)
{
    DIR *dp = opendir(dir);
    if (!dp) {
        fprintf(stderr, "%s: %s: %s (no trace scenarios)\n", bench_prog, dir, strerror(errno));
        return 0;
    }
    char *names[64];
    size_t n = 0;
    for (struct dirent *e; (e = readdir(dp)) && n < 64;) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "sizes_", 6) == 0 && len > 10 && strcmp(e->d_name + len - 4, ".txt") == 0)
            names[n++] = strdup(e->d_name);
    }
    closedir(dp);
    qsort(names, n, sizeof *names, cmp_str);
    size_t got = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096], name[64];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(name, sizeof name, "trace_%.*s", (int)(strlen(names[i]) - 10), names[i] + 6);
        if (got < max && bench_trace_load(&out[got], path, name))
            got++;
        free(names[i]);
    }
    return got;
}
