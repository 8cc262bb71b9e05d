/*
 * bench_preload: nanoseconds per cudaMalloc+cudaFree pair as a program sees
 * them, through whatever answers its calls: the CUDA runtime alone (no
 * cache), or libcucache.so preloaded in front of it (issue 4, "hit-path cost
 * through the preload vs the core alone vs no cache").  scripts/bench
 * --preload runs it both ways on the simulated device and sets the figures
 * beside bench_core's for the core alone; docs/performance.md says what
 * they mean.
 *
 * It links libcudart.so.13 by SONAME with no rpath, like
 * tests/sim/demo_workload: LD_LIBRARY_PATH picks the simulated runtime (or
 * a real one).  Scenarios:
 *   hit_4k, hit_1m, hit_8m  cudaMalloc(size), cudaFree, repeat: a cache's
 *                           hit pair (bench_core's hit_4k and hit_8m);
 *   trace_*                 the allocations and frees of a real PyTorch
 *                           trace, in order (bench/sizes_<trace>.txt, as
 *                           bench_core's trace_* scenarios replay them).
 * Each scenario is warmed up (which fills a cache) and sized so that one run
 * lasts about -t seconds (a pair costs ~100 us on the simulated device and
 * ~100 ns through a cache); runs are repeated and the median, minimum and
 * maximum reported.
 *
 * Proof of what answered: when libcucache.so is loaded, cucache_stat (found
 * with dlsym(RTLD_DEFAULT), so the program runs without it too) gives the
 * cache hits of each scenario, and the simulated driver's
 * cucacheSimDeviceAllocs the allocations that reached the device.  With
 * --require-cache it refuses to print a figure unless cucache served the
 * scenario's allocations from its cache.
 */
#include "cucache/cucache.h"
#include "cucache/cuda_api.h"
#include "cucache/sim.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifndef BENCH_SIZES_DIR
#define BENCH_SIZES_DIR "bench"
#endif

enum {
    MAX_RUNS = 101,
    MAX_SCENARIOS = 32,
};

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench_preload: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPUs kept busy by other processes (and the hypervisor's steal) while a
 * scenario ran, from /proc/stat minus this process's CPU time, as in
 * bench_core: a figure taken while it is not near 0 is suspect.  The
 * simulated device's worker threads are this process's own time. */
typedef struct load_s {
    double busy, total, self; /* seconds of CPU time, summed over CPUs */
} load_t;

static load_t load_now(void)
{
    load_t l = {0, 0, 0};
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (f) {
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]) == 8) {
            double hz = (double)sysconf(_SC_CLK_TCK);
            l.busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / hz;
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

static double load_others(const load_t *a, const load_t *b)
{
    double total = b->total - a->total;
    double others = (b->busy - a->busy) - (b->self - a->self);
    return total > 0 && others > 0 ? others / total * (double)sysconf(_SC_NPROCESSORS_ONLN) : 0;
}

/* ------------------------------------------------------------------------
 * What answers: cucache's statistics and the simulated driver's counters,
 * each absent when that library is not there.
 * ---------------------------------------------------------------------- */

typedef struct probe_s {
    __typeof__(cucache_stat) *stat;       /* libcucache.so loaded */
    __typeof__(cucache_version) *version; /* likewise */
    unsigned long (*sim_allocs)(void);    /* the simulated driver */
} probe_t;

static void probe_init(probe_t *p)
{
    memset(p, 0, sizeof *p);
    /* POSIX's way from a void * to a function pointer */
    *(void **)&p->stat = dlsym(RTLD_DEFAULT, "cucache_stat");
    *(void **)&p->version = dlsym(RTLD_DEFAULT, "cucache_version");
    /* the runtime opens the driver RTLD_LOCAL: ask it by name (sim.h) */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (drv)
        *(void **)&p->sim_allocs = dlsym(drv, "cucacheSimDeviceAllocs");
}

/* One of cucache's statistics of device 0 ("num_cache_hits", ...), or -1
 * (not loaded, or no allocator state yet). */
static int64_t probe_stat(const probe_t *p, const char *key)
{
    int64_t v;
    return p->stat && p->stat(0, key, &v) == 0 ? v : -1;
}

static long long probe_device_allocs(const probe_t *p)
{
    return p->sim_allocs ? (long long)p->sim_allocs() : -1;
}

/* ------------------------------------------------------------------------
 * Traces (bench/sizes_<trace>.txt, written by scripts/trace-sizes; the
 * format bench_core reads): "a SIZE" allocates, "f K" frees the K-th
 * allocation.
 * ---------------------------------------------------------------------- */

typedef struct trace_s {
    char name[64];
    int64_t *ops; /* > 0: allocate that many bytes; <= 0: free allocation -op */
    size_t nops, nalloc;
    void **live; /* nalloc slots */
} trace_t;

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n);
    if (!p)
        die("out of memory");
    return p;
}

static bool trace_load(trace_t *t, const char *path, const char *name)
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
            die("%s: bad line (or a free of an allocation that is not live): %s", path, line);
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
        die("%s: no allocations", path);
    t->live = calloc(t->nalloc, sizeof *t->live);
    if (!t->live)
        die("out of memory");
    return true;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every sizes_<trace>.txt of dir, by name; returns the count. */
static size_t traces_find(const char *dir, trace_t *out, size_t max)
{
    DIR *dp = opendir(dir);
    if (!dp) {
        fprintf(stderr, "bench_preload: %s: %s (no trace scenarios)\n", dir, strerror(errno));
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
        if (got < max && trace_load(&out[got], path, name))
            got++;
        free(names[i]);
    }
    return got;
}

/* ------------------------------------------------------------------------
 * The loops: plain cudaMalloc/cudaFree calls, as a program makes them
 * ---------------------------------------------------------------------- */

static void check(cudaError_t rc, const char *what, size_t size)
{
    if (__builtin_expect(rc != cudaSuccess, 0))
        die("%s(%zu bytes) failed: %s", what, size, cudaGetErrorString(rc));
}

/* cudaMalloc(size), cudaFree, `pairs` times; ns */
static uint64_t loop_hit(size_t size, uint64_t pairs)
{
    void *p;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < pairs; i++) {
        check(cudaMalloc(&p, size), "cudaMalloc", size);
        check(cudaFree(p), "cudaFree", size);
    }
    return now_ns() - t0;
}

/* `passes` replays of the trace, each ending with the frees of whatever the
 * trace left live; ns */
static uint64_t loop_trace(trace_t *t, uint64_t passes)
{
    void **live = t->live;
    uint64_t t0 = now_ns();
    for (uint64_t p = 0; p < passes; p++) {
        size_t k = 0;
        for (size_t i = 0; i < t->nops; i++) {
            int64_t op = t->ops[i];
            if (op > 0) {
                check(cudaMalloc(&live[k], (size_t)op), "cudaMalloc", (size_t)op);
                k++;
            } else {
                check(cudaFree(live[-op]), "cudaFree", 0);
                live[-op] = NULL;
            }
        }
        for (size_t j = 0; j < t->nalloc; j++)
            if (live[j]) {
                check(cudaFree(live[j]), "cudaFree", 0);
                live[j] = NULL;
            }
    }
    return now_ns() - t0;
}

/* ------------------------------------------------------------------------
 * Scenarios
 * ---------------------------------------------------------------------- */

typedef struct scenario_s {
    const char *name;
    size_t size;    /* hit_*: the size */
    trace_t *trace; /* trace_*: the trace */
} scenario_t;

typedef struct opts_s {
    int runs;
    double seconds;     /* target length of one run */
    uint64_t max_pairs; /* at most this many pairs per run */
    const char *only[16];
    int nonly;
    const char *sizes_dir;
    bool require_cache; /* refuse to report a scenario cucache did not serve */
    bool machine;       /* one "result" line per scenario, for scripts */
} opts_t;

typedef struct result_s {
    double ns[MAX_RUNS]; /* per pair, one per run */
    int n;
    uint64_t units, pairs;   /* per run: pairs or passes, and the pairs they make */
    int64_t hits;            /* cucache's cache hits over the timed runs; -1: not loaded */
    int64_t fences;          /* cucache's fences recorded meanwhile; -1: not loaded */
    long long device_allocs; /* allocations the simulated driver served meanwhile; -1: not the simulator */
    double others;           /* CPUs other processes kept busy meanwhile */
} result_t;

static uint64_t scenario_pairs(const scenario_t *sc, uint64_t units)
{
    return sc->trace ? units * sc->trace->nalloc : units;
}

static uint64_t scenario_loop(const scenario_t *sc, uint64_t units)
{
    return sc->trace ? loop_trace(sc->trace, units) : loop_hit(sc->size, units);
}

/* Warm-up, which also fills a cache: one cold unit (pair or pass), then
 * doubling the work until a measurement takes an eighth of a run.  Returns
 * the units one run needs, from the last, warm, measurement. */
static uint64_t scenario_calibrate(const opts_t *o, const scenario_t *sc)
{
    scenario_loop(sc, 1); /* cold: the cache grows, the device allocates */
    uint64_t units = 1, ns = scenario_loop(sc, units);
    while ((double)ns < o->seconds * 1e9 / 8 && scenario_pairs(sc, units) < o->max_pairs) {
        units *= 2;
        ns = scenario_loop(sc, units);
    }
    double want = (double)units * o->seconds * 1e9 / (double)(ns ? ns : 1);
    uint64_t cap = sc->trace ? o->max_pairs / sc->trace->nalloc : o->max_pairs;
    uint64_t u = want < 1 ? 1 : (uint64_t)want;
    return u > cap ? (cap ? cap : 1) : u;
}

static void run_scenario(const opts_t *o, const probe_t *pr, const scenario_t *sc, result_t *r)
{
    memset(r, 0, sizeof *r);
    load_t l0 = load_now();
    r->units = scenario_calibrate(o, sc);
    r->pairs = scenario_pairs(sc, r->units);
    int64_t hits0 = probe_stat(pr, "num_cache_hits"), fences0 = probe_stat(pr, "num_fences");
    long long dev0 = probe_device_allocs(pr);
    for (int i = 0; i < o->runs; i++)
        r->ns[r->n++] = (double)scenario_loop(sc, r->units) / (double)r->pairs;
    int64_t hits1 = probe_stat(pr, "num_cache_hits"), fences1 = probe_stat(pr, "num_fences");
    long long dev1 = probe_device_allocs(pr);
    r->hits = hits1 >= 0 && hits0 >= 0 ? hits1 - hits0 : hits1;
    r->fences = fences1 >= 0 && fences0 >= 0 ? fences1 - fences0 : fences1;
    r->device_allocs = dev0 >= 0 ? dev1 - dev0 : -1;
    load_t l1 = load_now();
    r->others = load_others(&l0, &l1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void result_summary(const result_t *r, double *median, double *lo, double *hi)
{
    double v[MAX_RUNS];
    memcpy(v, r->ns, (size_t)r->n * sizeof *v);
    qsort(v, (size_t)r->n, sizeof *v, cmp_double);
    *median = r->n % 2 ? v[r->n / 2] : (v[r->n / 2 - 1] + v[r->n / 2]) / 2;
    *lo = v[0];
    *hi = v[r->n - 1];
}

/* ------------------------------------------------------------------------
 * Output
 * ---------------------------------------------------------------------- */

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

static void print_header(const opts_t *o, const probe_t *pr)
{
    char model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "model name", 10) == 0) {
                char *colon = strchr(line, ':');
                if (colon) {
                    snprintf(model, sizeof model, "%s", colon + 2);
                    model[strcspn(model, "\n")] = 0;
                }
                break;
            }
        fclose(f);
    }
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties", 0);
    printf("bench_preload: %d runs per scenario of ~%.2f s (at most %llu pairs); CPU: %s, %ld online\n", o->runs,
           o->seconds, (unsigned long long)o->max_pairs, model, sysconf(_SC_NPROCESSORS_ONLN));
    printf("device: %s", prop.name);
    if (pr->sim_allocs)
        printf(" (CUCACHE_SIM_ALLOC_US=%s, CUCACHE_SIM_FREE_US=%s)", env_or("CUCACHE_SIM_ALLOC_US", "20"),
               env_or("CUCACHE_SIM_FREE_US", "30"));
    printf("\ncucache: %s%s\n", pr->version ? "loaded, version " : "not loaded", pr->version ? pr->version() : "");
    if (!o->machine) {
        printf("ns per cudaMalloc+cudaFree pair, median (min-max)\n\n");
        printf("| scenario | ns per pair | pairs per run | cache hits | device allocations | pairs per fence | "
               "others' CPUs |\n");
        printf("|---|---:|---:|---:|---:|---:|---:|\n");
    }
    fflush(stdout);
}

static void print_row(const opts_t *o, const scenario_t *sc, const result_t *r)
{
    double med, lo, hi;
    result_summary(r, &med, &lo, &hi);
    uint64_t all = r->pairs * (uint64_t)r->n;
    double hit_share = r->hits >= 0 ? (double)r->hits / (double)all : -1;
    if (o->machine) {
        printf("result %s %.1f %.1f %.1f %llu %.4f %lld %.2f %lld\n", sc->name, med, lo, hi,
               (unsigned long long)r->pairs, hit_share, r->device_allocs, r->others, (long long)r->fences);
    } else {
        char hits[32] = "-", dev[48] = "-", fences[32] = "-";
        if (r->hits >= 0)
            snprintf(hits, sizeof hits, "%.1f%%", 100 * hit_share);
        if (r->device_allocs >= 0)
            snprintf(dev, sizeof dev, "%lld of %llu", r->device_allocs, (unsigned long long)all);
        if (r->fences > 0)
            snprintf(fences, sizeof fences, "%.1f", (double)all / (double)r->fences);
        printf("| %s | %.1f (%.1f-%.1f) | %llu | %s | %s | %s | %.2f |\n", sc->name, med, lo, hi,
               (unsigned long long)r->pairs, hits, dev, fences, r->others);
    }
    fflush(stdout);
}

static bool selected(const opts_t *o, const char *name)
{
    if (o->nonly == 0)
        return true;
    for (int i = 0; i < o->nonly; i++)
        if (fnmatch(o->only[i], name, 0) == 0)
            return true;
    return false;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_preload [-r RUNS] [-t SECONDS] [-n PAIRS] [-d SIZES_DIR] [-s NAME]... [-c] [-m] [-h]\n"
               "  -r RUNS     timed runs per scenario (default 7; median, min and max are reported)\n"
               "  -t SECONDS  length of one run (default 0.3); the pairs per run follow from it\n"
               "  -n PAIRS    at most this many pairs per run (default 1000000)\n"
               "  -d DIR      where sizes_<trace>.txt are (default " BENCH_SIZES_DIR ")\n"
               "  -s NAME     only the scenarios NAME matches (a glob: 'hit_*'; repeatable)\n"
               "  -c          require cucache: fail unless it is loaded and serves each scenario from its cache\n"
               "  -m          machine-readable lines: result NAME MEDIAN MIN MAX PAIRS HIT_SHARE DEVICE_ALLOCS "
               "OTHERS FENCES\n"
               "              (PAIRS per run; HIT_SHARE, DEVICE_ALLOCS, FENCES over all runs; -1: not known)\n");
}

static void parse_args(int argc, char **argv, opts_t *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "-c") == 0) {
            o->require_cache = true;
        } else if (strcmp(a, "-m") == 0) {
            o->machine = true;
        } else if (v && strcmp(a, "-r") == 0) {
            o->runs = atoi(v), i++;
        } else if (v && strcmp(a, "-t") == 0) {
            o->seconds = atof(v), i++;
        } else if (v && strcmp(a, "-n") == 0) {
            o->max_pairs = strtoull(v, NULL, 0), i++;
        } else if (v && strcmp(a, "-d") == 0) {
            o->sizes_dir = v, i++;
        } else if (v && strcmp(a, "-s") == 0 && o->nonly < 16) {
            o->only[o->nonly++] = v, i++;
        } else {
            usage(stderr);
            exit(2);
        }
    }
    if (o->runs < 1 || o->runs > MAX_RUNS || o->max_pairs < 1 || !(o->seconds > 0))
        die("-r must be 1..%d, -n at least 1 and -t above 0", MAX_RUNS);
}

int main(int argc, char **argv)
{
    opts_t o = {.runs = 7, .seconds = 0.3, .max_pairs = 1000000, .sizes_dir = BENCH_SIZES_DIR};
    parse_args(argc, argv, &o);

    check(cudaFree(NULL), "cudaFree", 0); /* initialises the runtime and loads the driver */
    probe_t pr;
    probe_init(&pr);
    if (o.require_cache && !pr.stat)
        die("cucache is not loaded (no cucache_stat in the process): refusing to report a figure "
            "(run with LD_PRELOAD=.../libcucache.so)");

    static trace_t traces[16];
    size_t ntraces = traces_find(o.sizes_dir, traces, 16);
    scenario_t sc[MAX_SCENARIOS] = {
        {"hit_4k", 4 * KiB, NULL},
        {"hit_1m", 1 * MiB, NULL},
        {"hit_8m", 8 * MiB, NULL},
    };
    size_t nsc = 3;
    for (size_t i = 0; i < ntraces && nsc < MAX_SCENARIOS; i++)
        sc[nsc++] = (scenario_t){traces[i].name, 0, &traces[i]};

    print_header(&o, &pr);
    for (size_t i = 0; i < nsc; i++) {
        if (!selected(&o, sc[i].name))
            continue;
        result_t r;
        run_scenario(&o, &pr, &sc[i], &r);
        if (o.require_cache && r.hits <= 0)
            die("%s: cucache is loaded but served none of %llu allocations from its cache "
                "(num_cache_hits did not grow): refusing to report a figure",
                sc[i].name, (unsigned long long)(r.pairs * (uint64_t)r.n));
        print_row(&o, &sc[i], &r);
    }
    if (pr.stat) {
        static const char *const keys[] = {"num_cache_hits", "num_device_alloc", "num_device_free", "num_fences",
                                           "reserved_bytes.all.peak", "allocated_bytes.all.peak"};
        printf("cucache, device 0 at exit:");
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            printf(" %s=%lld", keys[i], (long long)probe_stat(&pr, keys[i]));
        printf("\n");
    }
    if (!o.machine) {
        printf("\n  hit_*     cudaMalloc(size), cudaFree, repeat\n");
        printf("  trace_*   a real trace's allocations and frees, in order (bench/sizes_*.txt)\n");
    }
    for (size_t i = 0; i < ntraces; i++) {
        free(traces[i].ops);
        free(traces[i].live);
    }
    return 0;
}
