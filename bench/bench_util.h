/*
 * bench_util: what bench_core and bench_preload share: fatal errors, the
 * clock, the CPU's model, the choice of scenarios by glob (-s), the CPU load
 * of other processes, series of timed runs with their median, minimum and
 * maximum, quantiles of any number of samples, and the traces of
 * bench/sizes_<trace>.txt.
 */
#ifndef CUCACHE_BENCH_UTIL_H
#define CUCACHE_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    BENCH_MAX_RUNS = 101, /* timed runs per scenario, at most */
};

/* The program's name, the prefix of its messages ("bench_core"): each
 * program defines it. */
extern const char bench_prog[];

/* Prints "<bench_prog>: <message>" on stderr and exits with status 1. */
void bench_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* The number v of option opt, from lo to hi, or bench_die naming the
 * option and what it accepts. */
double bench_number(const char *opt, const char *v, double lo, double hi);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/* The CPU's model name from /proc/cpuinfo into buf, or "unknown". */
void bench_cpu_model(char *buf, size_t len);

/* Whether name matches one of the nonly globs of only (-s NAME), or nonly
 * is 0. */
bool bench_selected(const char *const *only, int nonly, const char *name);

/* What else ran on the machine: the CPU time of every other process (and
 * the time the hypervisor stole), from /proc/stat minus this process's CPU
 * time (its own threads, a simulated device's workers included).  A figure
 * taken while it is not near zero is suspect. */
typedef struct bench_load_s {
    double busy, total, self; /* seconds of CPU time, summed over CPUs */
} bench_load_t;

/* The machine's busy and total CPU time and this process's, now. */
bench_load_t bench_load_now(void);

/* CPUs kept busy by others between a and b (0 to the machine's count). */
double bench_load_others(const bench_load_t *a, const bench_load_t *b);

/* One value per timed run (ns per pair, or Mpairs/s). */
typedef struct bench_series_s {
    double v[BENCH_MAX_RUNS];
    int n; /* values in v, 0..BENCH_MAX_RUNS */
} bench_series_t;

/* The median of s's values (s->n >= 1). */
double bench_series_median(const bench_series_t *s);

/* The smallest of s's values (s->n >= 1). */
double bench_series_min(const bench_series_t *s);

/* The largest of s's values (s->n >= 1). */
double bench_series_max(const bench_series_t *s);

/* "median (min-max)" with one decimal into buf, or "-" when s is empty. */
void bench_series_fmt(char *buf, size_t len, const bench_series_t *s);

/* The q-quantile (0 to 1) of the n values of v, nearest rank: sorts v in
 * place; 0 when n is 0. */
double bench_quantile(double *v, size_t n, double q);

/* A trace (bench/sizes_<trace>.txt, written by scripts/trace-sizes): "a
 * SIZE" allocates, "f K" frees the K-th allocation.  Loaded as ops: ops[i] >
 * 0 allocates that many bytes (allocation k for the k-th), ops[i] <= 0 frees
 * allocation -ops[i]. */
typedef struct bench_trace_s {
    char name[64]; /* "trace_<trace>" */
    int64_t *ops;
    size_t nops, nalloc;
    void **live; /* nalloc slots, all NULL: room for the replay's pointers */
} bench_trace_t;

/* Loads the trace at path under name; false when the file cannot be opened,
 * and bench_die when it is malformed. */
bool bench_trace_load(bench_trace_t *t, const char *path, const char *name);

/* Every sizes_<trace>.txt of dir, by name, into out (at most max); returns
 * the count. */
size_t bench_traces_find(const char *dir, bench_trace_t *out, size_t max);

/* The timed loops are inlined into each caller, so that the allocator they
 * are given (a constant function) is called directly. */
#define BENCH_INLINE static inline __attribute__((always_inline))

/* p, the allocation of size bytes, unless it failed (bench_die). */
BENCH_INLINE uintptr_t bench_checked(uintptr_t p, size_t size)
{
    if (__builtin_expect(!p, 0))
        bench_die("allocation of %zu bytes failed", size);
    return p;
}

/* `passes` replays of trace t through alloc and release (given ctx), each
 * ending with the releases of whatever the trace left live, so that every
 * pass starts from the same state; returns the nanoseconds taken. */
BENCH_INLINE uint64_t bench_trace_replay(bench_trace_t *t, uint64_t passes, void *ctx,
                                         uintptr_t (*alloc)(void *ctx, size_t size),
                                         void (*release)(void *ctx, uintptr_t p))
{
    void **live = t->live;
    uint64_t t0 = bench_now_ns();
    for (uint64_t p = 0; p < passes; p++) {
        size_t k = 0;
        for (size_t i = 0; i < t->nops; i++) {
            int64_t op = t->ops[i];
            if (op > 0) {
                live[k] = (void *)bench_checked(alloc(ctx, (size_t)op), (size_t)op);
                k++;
            } else {
                release(ctx, (uintptr_t)live[-op]);
                live[-op] = NULL;
            }
        }
        for (size_t j = 0; j < t->nalloc; j++)
            if (live[j]) {
                release(ctx, (uintptr_t)live[j]);
                live[j] = NULL;
            }
    }
    return bench_now_ns() - t0;
}

#endif
