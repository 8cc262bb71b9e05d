/*
 * bench_preload: nanoseconds per cudaMalloc+cudaFree pair as a program sees
 * them, through whatever answers its calls: the CUDA runtime alone (no
 * cache), or libcucache.so preloaded in front of it: what the hit path costs
 * through the preload, beside the core alone and no cache.  scripts/bench
 * --preload runs it both ways on the simulated device and sets the figures
 * beside bench_core's for the core alone; docs/performance.md says what
 * they mean.
 *
 * It links libcudart.so.13 by SONAME with no rpath, like
 * the simulator's demo_workload: LD_LIBRARY_PATH picks the simulated runtime (or
 * a real one).  Scenarios:
 *   hit_4k, hit_1m, hit_8m  cudaMalloc(size), cudaFree, repeat: a cache's
 *                           hit pair (bench_core's hit_4k and hit_8m);
 *   trace_*                 the allocations and frees of a real PyTorch
 *                           trace, in order (bench/sizes_<trace>.txt, as
 *                           bench_core's trace_* scenarios replay them).
 * Each scenario is warmed up (which fills a cache) and sized so that one run
 * lasts about -t seconds (a pair costs orders of magnitude more on the
 * simulated device than through a cache, so a fixed count would not do);
 * runs are repeated and the median, minimum and maximum reported.
 *
 * -C makes the same calls through the driver (cuMemAlloc_v2, cuMemFree_v2)
 * in a context the program created with cuCtxCreate, as NVIDIA's
 * driver-API samples do.
 *
 * Proof of what answered: when libcucache.so is loaded, cucache_stat (found
 * with dlsym(RTLD_DEFAULT), so the program runs without it too) gives the
 * cache hits of each scenario, and the simulated driver's
 * cucacheSimDeviceAllocs the allocations that reached the device.  With
 * --require-cache it refuses to print a figure unless cucache served the
 * scenario's allocations from its cache.
 */
#include "cucache/cucache.h"
#include "cusim/sim.h" /* the simulator's extensions and its CUDA declarations */

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

#ifndef BENCH_SIZES_DIR
#define BENCH_SIZES_DIR "bench"
#endif

enum {
    MAX_RUNS = BENCH_MAX_RUNS,
    MAX_SCENARIOS = 32,
};

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

const char bench_prog[] = "bench_preload";

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
 * The loops: plain cudaMalloc/cudaFree calls, as a program makes them
 * ---------------------------------------------------------------------- */

static void check(cudaError_t rc, const char *what, size_t size)
{
    if (__builtin_expect(rc != cudaSuccess, 0))
        bench_die("%s(%zu bytes) failed: %s", what, size, cudaGetErrorString(rc));
}

static void check_cu(CUresult rc, const char *what, size_t size)
{
    if (__builtin_expect(rc != CUDA_SUCCESS, 0))
        bench_die("%s(%zu bytes) failed: CUresult %d", what, size, (int)rc);
}

/* -C: the calls are the driver's, in a context the program created
 * (cuCtxCreate), as NVIDIA's driver-API samples allocate. */
static bool driver_ctx;

static void *one_alloc(size_t size)
{
    if (driver_ctx) {
        CUdeviceptr p;
        check_cu(cuMemAlloc_v2(&p, size), "cuMemAlloc_v2", size);
        return (void *)(uintptr_t)p;
    }
    void *p;
    check(cudaMalloc(&p, size), "cudaMalloc", size);
    return p;
}

static void one_free(void *p, size_t size)
{
    if (driver_ctx)
        check_cu(cuMemFree_v2((CUdeviceptr)(uintptr_t)p), "cuMemFree_v2", size);
    else
        check(cudaFree(p), "cudaFree", size);
}

/* cudaMalloc(size), cudaFree (-C: cuMemAlloc_v2, cuMemFree_v2), `pairs`
 * times; ns */
static uint64_t loop_hit(size_t size, uint64_t pairs)
{
    uint64_t t0 = bench_now_ns();
    for (uint64_t i = 0; i < pairs; i++)
        one_free(one_alloc(size), size);
    return bench_now_ns() - t0;
}

/* The allocator bench_trace_replay is given: the same calls. */
static uintptr_t rt_alloc(void *ctx, size_t size)
{
    (void)ctx;
    return (uintptr_t)one_alloc(size);
}

static void rt_release(void *ctx, uintptr_t p)
{
    (void)ctx;
    one_free((void *)p, 0);
}

/* ------------------------------------------------------------------------
 * Scenarios
 * ---------------------------------------------------------------------- */

typedef struct scenario_s {
    const char *name;
    size_t size;          /* hit_*: the size */
    bench_trace_t *trace; /* trace_*: the trace */
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
    bench_series_t ns;       /* per pair, one per run */
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
    return sc->trace ? bench_trace_replay(sc->trace, units, NULL, rt_alloc, rt_release) : loop_hit(sc->size, units);
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
    bench_load_t l0 = bench_load_now();
    r->units = scenario_calibrate(o, sc);
    r->pairs = scenario_pairs(sc, r->units);
    int64_t hits0 = probe_stat(pr, "num_cache_hits"), fences0 = probe_stat(pr, "num_fences");
    long long dev0 = probe_device_allocs(pr);
    for (int i = 0; i < o->runs; i++)
        r->ns.v[r->ns.n++] = (double)scenario_loop(sc, r->units) / (double)r->pairs;
    int64_t hits1 = probe_stat(pr, "num_cache_hits"), fences1 = probe_stat(pr, "num_fences");
    long long dev1 = probe_device_allocs(pr);
    r->hits = hits1 >= 0 && hits0 >= 0 ? hits1 - hits0 : hits1;
    r->fences = fences1 >= 0 && fences0 >= 0 ? fences1 - fences0 : fences1;
    r->device_allocs = dev0 >= 0 ? dev1 - dev0 : -1;
    bench_load_t l1 = bench_load_now();
    r->others = bench_load_others(&l0, &l1);
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
    char model[256];
    bench_cpu_model(model, sizeof model);
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
        printf("ns per %s pair, median (min-max)\n\n",
               driver_ctx ? "cuMemAlloc_v2+cuMemFree_v2 (a context of the program's own)" : "cudaMalloc+cudaFree");
        printf("| scenario | ns per pair | pairs per run | cache hits | device allocations | pairs per fence | "
               "others' CPUs |\n");
        printf("|---|---:|---:|---:|---:|---:|---:|\n");
    }
    fflush(stdout);
}

static void print_row(const opts_t *o, const scenario_t *sc, const result_t *r)
{
    double med = bench_series_median(&r->ns), lo = bench_series_min(&r->ns), hi = bench_series_max(&r->ns);
    uint64_t all = r->pairs * (uint64_t)r->ns.n;
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

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_preload [-r RUNS] [-t SECONDS] [-n PAIRS] [-d SIZES_DIR] [-s NAME]... [-c] [-C] [-m] [-h]\n"
               "  -r RUNS     timed runs per scenario (default 7; median, min and max are reported)\n"
               "  -t SECONDS  length of one run (default 0.3); the pairs per run follow from it\n"
               "  -n PAIRS    at most this many pairs per run (default 1000000)\n"
               "  -d DIR      where sizes_<trace>.txt are (default " BENCH_SIZES_DIR ")\n"
               "  -s NAME     only the scenarios NAME matches (a glob: 'hit_*'; repeatable)\n"
               "  -c          require cucache: fail unless it is loaded and serves each scenario from its cache\n"
               "  -C          a context of the program's own (cuCtxCreate), cuMemAlloc_v2 and cuMemFree_v2 in it\n"
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
        } else if (strcmp(a, "-C") == 0) {
            driver_ctx = true;
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
        bench_die("-r must be 1..%d, -n at least 1 and -t above 0", MAX_RUNS);
}

int main(int argc, char **argv)
{
    opts_t o = {.runs = 7, .seconds = 0.3, .max_pairs = 1000000, .sizes_dir = BENCH_SIZES_DIR};
    parse_args(argc, argv, &o);

    check(cudaFree(NULL), "cudaFree", 0); /* initialises the runtime and loads the driver */
    if (driver_ctx) {
        CUdevice dev;
        CUcontext ctx;
        check_cu(cuInit(0), "cuInit", 0);
        check_cu(cuDeviceGet(&dev, 0), "cuDeviceGet", 0);
        check_cu(cuCtxCreate_v2(&ctx, 0, dev), "cuCtxCreate_v2", 0); /* current from now on */
    }
    probe_t pr;
    probe_init(&pr);
    if (o.require_cache && !pr.stat)
        bench_die("cucache is not loaded (no cucache_stat in the process): refusing to report a figure "
                  "(run with LD_PRELOAD=.../libcucache.so)");

    static bench_trace_t traces[16];
    size_t ntraces = bench_traces_find(o.sizes_dir, traces, 16);
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
        if (!bench_selected(o.only, o.nonly, sc[i].name))
            continue;
        result_t r;
        run_scenario(&o, &pr, &sc[i], &r);
        if (o.require_cache && r.hits <= 0)
            bench_die("%s: cucache is loaded but served none of %llu allocations from its cache "
                      "(num_cache_hits did not grow): refusing to report a figure",
                      sc[i].name, (unsigned long long)(r.pairs * (uint64_t)r.ns.n));
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
