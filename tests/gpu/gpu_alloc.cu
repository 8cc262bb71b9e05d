/*
 * The real-GPU acceptance program of cucache (scripts/gpu-check builds it
 * twice with nvcc: --cudart shared and --cudart static, and runs it plain
 * and under cucache-run).  It proves, on a real device, that memory handed
 * out by cudaMalloc/cudaFree and cudaMallocAsync/cudaFreeAsync holds its
 * data and never overlaps a live allocation, and that a block freed while a
 * kernel on another stream still reads it is not handed out again under
 * that kernel (the "race" checks: what a real cudaFree guarantees by
 * synchronising the device, and cucache's default, reuse:ordered, must keep).
 *
 * Checks (each prints "check NAME: PASS|FAIL ..."):
 *   selftest      the device-side checker finds a wrong pattern (it can fail)
 *   sizes         1 B .. 256 MiB, all live at once, pattern written by a
 *                 kernel, every byte checked on the device (and, in round 0,
 *                 on the host after a copy back), ranges never overlap
 *   churn         seeded random cudaMalloc/cudaFree over 48 slots, 1 B ..
 *                 64 MiB, each block checked before it is freed
 *   async         seeded random cudaMallocAsync/cudaFreeAsync on the legacy,
 *                 per-thread, two blocking and two non-blocking streams,
 *                 checked and freed on the owner or on another stream
 *                 (ordered by an event, as a correct program must)
 * Race checks ("race NAME: PASS|FAIL ..."; they hold without cucache and
 * under reuse:ordered, reuse:fenced and reuse:sync, and may fail under
 * reuse:stream):
 *   race-*        a kernel on stream R spins ~100 ms, then copies A into C;
 *                 meanwhile the host cudaFree(A)s, cudaMalloc(B) of the same
 *                 size and memsets B on stream W; C must equal A's content.
 *                 "armed: yes" means the memset of B completed while the
 *                 reader was still running (cudaFree did not wait for it).
 *   race-stress   seeded: cudaMalloc, fill on a random stream, a spinning
 *                 check on that stream, cudaFree at once, next allocation.
 * Then "timing: NAME NS ns/pair" for cudaMalloc+cudaFree (4 KiB, 8 MiB) and
 * cudaMallocAsync+cudaFreeAsync (4 KiB), 10000 pairs each, and, when cucache
 * is in the process (dlsym(RTLD_DEFAULT, "cucache_stat")), its counters
 * (contexts_seen and num_submissions/submissions_unseen among them: whether
 * the runtime's context retains and launches reached cucache's hooks).
 *
 * Options: --expect-cucache (fail unless cucache is loaded and had cache
 * hits), --race-informational (print race results, do not let them decide
 * the exit status: for reuse:stream), --quick (a fifth of the churn, async,
 * race-stress and timing lengths and two rounds of sizes: a second try in
 * little time), --smoke (selftest and the smoke check alone, a second or
 * two: three rounds of eight sizes filled and checked, cudaMallocAsync
 * pairs; with --expect-cucache, the first answer to "does cucache load and
 * serve this runtime"), --oom (instead of the checks: fill the device with
 * blocks of a 320th of its memory, free every other one, then ask for 1 GiB
 * more than the device has free; passes when that returns
 * cudaErrorMemoryAllocation and the blocks still held keep their data: the
 * run that shows cucache's OOM report and snapshot on a real device).
 * GPU_ALLOC_SEED=<n> replays the seeded checks.  Exit status: 0 when every
 * deciding check passed, 1 otherwise (also on any CUDA error, which is
 * printed).
 *
 * Not yet seen to fail on a GPU (written in a session without one).  The
 * selftest check shows the checker counting a wrong pattern; under
 * --conf reuse:stream the race checks are expected to report mismatches.
 */
#include <cuda_runtime.h>

#include <dlfcn.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* Every CUDA error ends the program: a device error is a failure, and the
 * checks after it would only report its consequences. */
#define CK(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t rc_ = (call);                                                                                      \
        if (rc_ != cudaSuccess) {                                                                                      \
            printf("gpu_alloc: %s:%d: %s -> %s (%s)\n", __FILE__, __LINE__, #call, cudaGetErrorName(rc_),              \
                   cudaGetErrorString(rc_));                                                                           \
            printf("gpu_alloc: RESULT FAIL (CUDA error)\n");                                                           \
            fflush(stdout);                                                                                            \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

#define LAUNCH_CK() CK(cudaGetLastError())

/* How long each check runs: the full lengths, or a fifth of them (two
 * rounds of sizes) under --quick, for a second try in little time. */
static int size_rounds = 4;      /* rounds of the sizes check */
static int churn_ops = 3000;     /* random cudaMalloc/cudaFree operations */
static int async_ops = 3000;     /* random cudaMallocAsync/cudaFreeAsync operations */
static int stress_iters = 600;   /* race-stress allocations */
static int timing_pairs = 10000; /* pairs per timing line */

static int failures;      /* deciding checks that failed */
static int race_failures; /* race checks that failed */
static int expect_cucache;
static int race_informational;
static unsigned long long seed0 = 20261122;

/* ------------------------------------------------------------------------
 * Device-side fill and check
 * ---------------------------------------------------------------------- */

/* The byte at offset i of a buffer filled with seed; any two seeds, and
 * neighbouring offsets, differ. */
__host__ __device__ static inline unsigned char pat(size_t i, unsigned seed)
{
    unsigned x = (unsigned)i * 0x9E3779B1u ^ (unsigned)(i >> 32) * 0x27d4eb2fu ^ seed * 0x85EBCA77u;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    return (unsigned char)x;
}

/* In pinned, mapped host memory: never in memory the allocator under test
 * hands out. */
struct counters {
    unsigned long long bad;       /* mismatched bytes */
    unsigned long long first_bad; /* min of (tag << 32 | offset); ~0: none */
};

static counters *hctr; /* host view */
static counters *dctr; /* device view */

__device__ static inline unsigned long long now_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ static void spin_ns(unsigned long long ns)
{
    if (!ns)
        return;
    unsigned long long t0 = now_ns();
    while (now_ns() - t0 < ns) {
    }
}

__global__ void k_fill(unsigned char *p, size_t n, unsigned seed)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = pat(i, seed);
}

/* Counts bytes that differ from pat(i, seed), or from `value` when
 * is_const; spins first for spin ns (a reader that is still running when
 * the host goes on). */
__global__ void k_check(const unsigned char *p, size_t n, unsigned seed, int is_const, unsigned char value,
                        unsigned tag, unsigned long long spin, counters *c)
{
    spin_ns(spin);
    unsigned long long bad = 0, first = ~0ull;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned char want = is_const ? value : pat(i, seed);
        if (p[i] != want) {
            if (!bad)
                first = ((unsigned long long)tag << 32) | (i < 0xffffffffu ? i : 0xffffffffu);
            bad++;
        }
    }
    if (bad) {
        atomicAdd(&c->bad, bad);
        atomicMin(&c->first_bad, first);
    }
}

/* The slow reader: spins, then copies a into c. */
__global__ void k_slow_copy(const unsigned char *a, unsigned char *c, size_t n, unsigned long long spin)
{
    spin_ns(spin);
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        c[i] = a[i];
}

enum { THREADS = 256, MAX_BLOCKS = 2048, SPIN_BLOCKS = 8 };

static unsigned blocks_for(size_t n, unsigned max)
{
    size_t b = (n + THREADS - 1) / THREADS;
    if (b < 1)
        b = 1;
    return (unsigned)(b < max ? b : max);
}

static void fill(void *p, size_t n, unsigned seed, cudaStream_t s)
{
    k_fill<<<blocks_for(n, MAX_BLOCKS), THREADS, 0, s>>>((unsigned char *)p, n, seed);
    LAUNCH_CK();
}

static void check(const void *p, size_t n, unsigned seed, unsigned tag, cudaStream_t s)
{
    k_check<<<blocks_for(n, MAX_BLOCKS), THREADS, 0, s>>>((const unsigned char *)p, n, seed, 0, 0, tag, 0, dctr);
    LAUNCH_CK();
}

static void check_spin(const void *p, size_t n, unsigned seed, unsigned tag, unsigned long long spin, cudaStream_t s)
{
    k_check<<<blocks_for(n, SPIN_BLOCKS), THREADS, 0, s>>>((const unsigned char *)p, n, seed, 0, 0, tag, spin, dctr);
    LAUNCH_CK();
}

static void check_const(const void *p, size_t n, unsigned char value, unsigned tag, cudaStream_t s)
{
    k_check<<<blocks_for(n, MAX_BLOCKS), THREADS, 0, s>>>((const unsigned char *)p, n, 0, 1, value, tag, 0, dctr);
    LAUNCH_CK();
}

static void counters_reset(void)
{
    volatile counters *c = hctr;
    c->bad = 0;
    c->first_bad = ~0ull;
}

/* Waits for the device, returns the mismatches counted since the last
 * call (and the first one's tag and offset), and resets the counters. */
static unsigned long long counters_take(unsigned *tag, unsigned *offset)
{
    CK(cudaDeviceSynchronize());
    volatile counters *c = hctr;
    unsigned long long bad = c->bad, first = c->first_bad;
    if (tag)
        *tag = (unsigned)(first >> 32);
    if (offset)
        *offset = (unsigned)first;
    counters_reset();
    return bad;
}

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static unsigned long long rng_state;

static unsigned long long rng_next(void)
{
    /* splitmix64 */
    unsigned long long z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static unsigned rng_below(unsigned n)
{
    return (unsigned)(rng_next() % n);
}

/* Log-uniform in [1, max]: as many tiny as huge sizes. */
static size_t rng_size(size_t max)
{
    double u = (double)(rng_next() >> 11) / 9007199254740992.0;
    size_t n = (size_t)exp(u * log((double)max));
    return n < 1 ? 1 : (n > max ? max : n);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct range {
    uintptr_t lo, hi; /* [lo, hi) */
    int id;
};

static int range_cmp(const void *a, const void *b)
{
    const range *x = (const range *)a, *y = (const range *)b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Counts pairs of overlapping ranges (sorts r) and names the first. */
static int overlaps(range *r, int n, const char *what)
{
    int bad = 0;
    qsort(r, (size_t)n, sizeof *r, range_cmp);
    for (int i = 1; i < n; i++)
        if (r[i].lo < r[i - 1].hi) {
            if (!bad)
                printf("  %s: live allocations %d [%#" PRIxPTR ", %#" PRIxPTR ") and %d [%#" PRIxPTR ", %#" PRIxPTR
                       ") overlap\n",
                       what, r[i - 1].id, r[i - 1].lo, r[i - 1].hi, r[i].id, r[i].lo, r[i].hi);
            bad++;
        }
    return bad;
}

static int misaligned(const void *p)
{
    return ((uintptr_t)p & 255u) != 0;
}

static void report(const char *kind, const char *name, int ok, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void report(const char *kind, const char *name, int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s %s: %s ", kind, name, ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

/* ------------------------------------------------------------------------
 * Checks
 * ---------------------------------------------------------------------- */

/* The checker must see a wrong pattern, or no check below can fail. */
static void check_selftest(void)
{
    const size_t n = 4 * KIB;
    void *p = NULL;
    CK(cudaMalloc(&p, n));
    fill(p, n, 1, 0);
    check(p, n, 1, 0, 0);
    unsigned long long right = counters_take(NULL, NULL);
    check(p, n, 2, 0, 0);
    unsigned long long wrong = counters_take(NULL, NULL);
    unsigned char host[4096];
    CK(cudaMemcpy(host, p, n, cudaMemcpyDeviceToHost));
    size_t host_bad = 0;
    for (size_t i = 0; i < n; i++)
        host_bad += host[i] != pat(i, 1);
    CK(cudaFree(p));
    int ok = right == 0 && wrong > n / 2 && host_bad == 0;
    failures += !ok;
    report("check", "selftest", ok, "(right pattern: %llu bad bytes; wrong pattern: %llu of %zu; host copy: %zu bad)",
           right, wrong, n, host_bad);
}

/* clang-format off */
static const size_t sizes_list[] = {
    1, 2, 3, 7, 100, 255, 256, 257, 511, 512, 513, 1000, 4095, 4096, 4097, 65535, 65536, 100000,
    MIB - 1, MIB, MIB + 1, 2 * MIB - 1, 2 * MIB, 3 * MIB + 7, 8 * MIB, 10 * MIB - 1, 10 * MIB + 1, 20 * MIB,
    32 * MIB + 5, 64 * MIB, 100 * MIB + 3, 128 * MIB, 200 * MIB, 256 * MIB - 1, 256 * MIB,
};
/* clang-format on */
enum { NSIZES = sizeof sizes_list / sizeof sizes_list[0] };

static void check_sizes(void)
{
    void *p[NSIZES];
    range r[NSIZES];
    unsigned char *host = (unsigned char *)malloc(256 * MIB);
    unsigned long long bad = 0;
    size_t host_bad = 0, total = 0;
    int overlap = 0, misal = 0, allocs = 0;
    unsigned first_tag = 0, first_off = 0;
    if (!host) {
        printf("gpu_alloc: out of host memory\n");
        exit(1);
    }
    for (int round = 0; round < size_rounds; round++) {
        for (int k = 0; k < NSIZES; k++) {
            int i = round % 2 ? NSIZES - 1 - k : k;
            p[i] = NULL;
            CK(cudaMalloc(&p[i], sizes_list[i]));
            misal += misaligned(p[i]);
            r[i].lo = (uintptr_t)p[i];
            r[i].hi = r[i].lo + sizes_list[i];
            r[i].id = i;
            allocs++;
            total += sizes_list[i];
        }
        overlap += overlaps(r, NSIZES, "sizes");
        for (int i = 0; i < NSIZES; i++)
            fill(p[i], sizes_list[i], (unsigned)(round * 1000 + i), 0);
        for (int i = 0; i < NSIZES; i++)
            check(p[i], sizes_list[i], (unsigned)(round * 1000 + i), (unsigned)i, 0);
        if (round == 0)
            for (int i = 0; i < NSIZES; i++) {
                CK(cudaMemcpy(host, p[i], sizes_list[i], cudaMemcpyDeviceToHost));
                for (size_t j = 0; j < sizes_list[i]; j++)
                    host_bad += host[j] != pat(j, (unsigned)i);
            }
        /* free forward, backward, or evens then odds */
        for (int k = 0; k < NSIZES; k++) {
            const int half = (NSIZES + 1) / 2;
            int i = round % 3 == 0 ? k : round % 3 == 1 ? NSIZES - 1 - k : k < half ? 2 * k : 2 * (k - half) + 1;
            CK(cudaFree(p[i]));
        }
        unsigned tag, off;
        unsigned long long b = counters_take(&tag, &off);
        if (b && !bad) {
            first_tag = tag;
            first_off = off;
        }
        bad += b;
    }
    free(host);
    int ok = bad == 0 && host_bad == 0 && overlap == 0 && misal == 0;
    failures += !ok;
    report("check", "sizes", ok,
           "(%d rounds x %d sizes, 1 B .. 256 MiB, %d allocations, %.1f GiB written and checked; bad bytes: %llu on "
           "the device, %zu on the host; overlaps: %d; not 256-byte aligned: %d)",
           size_rounds, NSIZES, allocs, (double)total / (1 << 30), bad, host_bad, overlap, misal);
    if (bad)
        printf("  first bad byte: size %zu at offset %u\n", sizes_list[first_tag % NSIZES], first_off);
}

enum { CHURN_SLOTS = 48 };

static void check_churn(void)
{
    void *p[CHURN_SLOTS] = {0};
    size_t n[CHURN_SLOTS] = {0};
    unsigned seed[CHURN_SLOTS] = {0};
    range r[CHURN_SLOTS];
    int overlap = 0, misal = 0, allocs = 0;
    rng_state = seed0 ^ 0xC1;
    for (int op = 0; op < churn_ops + CHURN_SLOTS; op++) {
        int s = op < churn_ops ? (int)rng_below(CHURN_SLOTS) : op - churn_ops; /* the tail frees everything */
        if (p[s]) {
            check(p[s], n[s], seed[s], (unsigned)s, 0);
            CK(cudaFree(p[s]));
            p[s] = NULL;
            continue;
        }
        if (op >= churn_ops)
            continue;
        n[s] = rng_size(64 * MIB);
        seed[s] = (unsigned)op;
        CK(cudaMalloc(&p[s], n[s]));
        misal += misaligned(p[s]);
        allocs++;
        int live = 0;
        for (int i = 0; i < CHURN_SLOTS; i++)
            if (p[i]) {
                r[live].lo = (uintptr_t)p[i];
                r[live].hi = r[live].lo + n[i];
                r[live].id = i;
                live++;
            }
        overlap += overlaps(r, live, "churn");
        fill(p[s], n[s], seed[s], 0);
    }
    unsigned tag, off;
    unsigned long long bad = counters_take(&tag, &off);
    int ok = bad == 0 && overlap == 0 && misal == 0;
    failures += !ok;
    report("check", "churn", ok,
           "(seed %llu: %d ops over %d slots, %d allocations of 1 B .. 64 MiB; bad bytes: %llu; overlaps: %d; not "
           "256-byte aligned: %d)",
           seed0, churn_ops, CHURN_SLOTS, allocs, bad, overlap, misal);
    if (bad)
        printf("  first bad byte: slot %u at offset %u\n", tag, off);
}

enum { NSTREAMS = 6, ASYNC_SLOTS = 32 };

/* 0: legacy default, 1: per-thread default, 2-3: blocking, 4-5: non-blocking. */
static void streams_create(cudaStream_t *s)
{
    s[0] = cudaStreamLegacy;
    s[1] = cudaStreamPerThread;
    CK(cudaStreamCreateWithFlags(&s[2], cudaStreamDefault));
    CK(cudaStreamCreateWithFlags(&s[3], cudaStreamDefault));
    CK(cudaStreamCreateWithFlags(&s[4], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s[5], cudaStreamNonBlocking));
}

static void streams_destroy(cudaStream_t *s)
{
    for (int i = 2; i < NSTREAMS; i++)
        CK(cudaStreamDestroy(s[i]));
}

static void check_async(void)
{
    cudaStream_t s[NSTREAMS];
    cudaEvent_t ev;
    void *p[ASYNC_SLOTS] = {0};
    size_t n[ASYNC_SLOTS] = {0};
    unsigned seed[ASYNC_SLOTS] = {0};
    int owner[ASYNC_SLOTS] = {0};
    range r[ASYNC_SLOTS];
    int overlap = 0, misal = 0, allocs = 0, cross = 0;
    streams_create(s);
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    rng_state = seed0 ^ 0xA5;
    for (int op = 0; op < async_ops + ASYNC_SLOTS; op++) {
        int k = op < async_ops ? (int)rng_below(ASYNC_SLOTS) : op - async_ops;
        int j = (int)rng_below(NSTREAMS);
        if (p[k]) {
            /* check and free on the owner, or on stream j after an event */
            if (j != owner[k] && op < async_ops) {
                CK(cudaEventRecord(ev, s[owner[k]]));
                CK(cudaStreamWaitEvent(s[j], ev, 0));
                cross++;
            } else {
                j = owner[k];
            }
            check(p[k], n[k], seed[k], (unsigned)k, s[j]);
            CK(cudaFreeAsync(p[k], s[j]));
            p[k] = NULL;
            continue;
        }
        if (op >= async_ops)
            continue;
        n[k] = rng_size(16 * MIB);
        seed[k] = (unsigned)op;
        owner[k] = j;
        CK(cudaMallocAsync(&p[k], n[k], s[j]));
        misal += misaligned(p[k]);
        allocs++;
        int live = 0;
        for (int i = 0; i < ASYNC_SLOTS; i++)
            if (p[i]) {
                r[live].lo = (uintptr_t)p[i];
                r[live].hi = r[live].lo + n[i];
                r[live].id = i;
                live++;
            }
        overlap += overlaps(r, live, "async");
        fill(p[k], n[k], seed[k], s[j]);
    }
    unsigned tag, off;
    unsigned long long bad = counters_take(&tag, &off);
    CK(cudaEventDestroy(ev));
    streams_destroy(s);
    int ok = bad == 0 && overlap == 0 && misal == 0;
    failures += !ok;
    report("check", "async", ok,
           "(seed %llu: %d ops over %d slots on %d streams, %d cudaMallocAsync of 1 B .. 16 MiB, %d freed on "
           "another stream; bad bytes: %llu; overlaps: %d; not 256-byte aligned: %d)",
           seed0, async_ops, ASYNC_SLOTS, NSTREAMS, allocs, cross, bad, overlap, misal);
    if (bad)
        printf("  first bad byte: slot %u at offset %u\n", tag, off);
}

static void race_result(const char *name, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void race_result(const char *name, int ok, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    race_failures += !ok;
    report("race", name, ok, "%s", detail);
}

/* A reader on stream sr spins, then copies A into C; meanwhile the host
 * frees A, allocates B of A's size and memsets B on stream sw. */
static void race_once(const char *name, size_t n, cudaStream_t sr, cudaStream_t sw)
{
    const unsigned long long spin = 100ull * 1000 * 1000; /* 100 ms */
    void *a = NULL, *b = NULL, *c = NULL;
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&c, n));
    fill(a, n, 77, 0);
    CK(cudaMemset(c, 0, n));
    CK(cudaDeviceSynchronize());

    k_slow_copy<<<SPIN_BLOCKS, THREADS, 0, sr>>>((const unsigned char *)a, (unsigned char *)c, n, spin);
    LAUNCH_CK();
    double t0 = now_s();
    CK(cudaFree(a));
    double t_free = now_s() - t0;
    CK(cudaMalloc(&b, n));
    int same = b == a;
    int overlap = (uintptr_t)b < (uintptr_t)a + n && (uintptr_t)a < (uintptr_t)b + n;
    CK(cudaMemsetAsync(b, 0xEE, n, sw));
    CK(cudaEventRecord(ev, sw));
    CK(cudaEventSynchronize(ev));
    cudaError_t q = cudaStreamQuery(sr);
    if (q != cudaSuccess && q != cudaErrorNotReady)
        CK(q);
    (void)cudaGetLastError();
    int armed = q == cudaErrorNotReady;
    CK(cudaStreamSynchronize(sr));

    check(c, n, 77, 0, 0);
    unsigned long long bad_c = counters_take(NULL, NULL);
    check_const(b, n, 0xEE, 0, 0);
    unsigned long long bad_b = counters_take(NULL, NULL);
    CK(cudaFree(b));
    CK(cudaFree(c));
    CK(cudaEventDestroy(ev));
    const char *where = same ? "is" : overlap ? "overlaps" : "is apart from";
    race_result(name, bad_c == 0 && bad_b == 0,
                "(%zu bytes; cudaFree(A) took %.1f ms; B %s A; armed: %s; C differs from A in %llu bytes, B from its "
                "memset in %llu)",
                n, t_free * 1e3, where, armed ? "yes" : "no", bad_c, bad_b);
}

static void check_race(void)
{
    cudaStream_t s[NSTREAMS];
    streams_create(s);
    static const size_t n[] = {64 * KIB, 16 * MIB};
    for (int i = 0; i < 2; i++) {
        char name[64];
        snprintf(name, sizeof name, "race-nonblocking-reader-%zuKiB", n[i] / KIB);
        race_once(name, n[i], s[4], s[0]); /* reader non-blocking, writer legacy */
        snprintf(name, sizeof name, "race-legacy-reader-%zuKiB", n[i] / KIB);
        race_once(name, n[i], s[0], s[5]); /* reader legacy, writer non-blocking */
        snprintf(name, sizeof name, "race-blocking-reader-%zuKiB", n[i] / KIB);
        race_once(name, n[i], s[2], s[4]); /* reader blocking, writer non-blocking */
    }
    streams_destroy(s);
}

/* Allocate, fill on a random stream, check on it after a random spin,
 * free at once; the next allocation's fill runs on another stream. */
static void check_race_stress(void)
{
    cudaStream_t s[NSTREAMS];
    void *prev = NULL;
    int reused = 0;
    streams_create(s);
    rng_state = seed0 ^ 0x5E;
    for (int it = 0; it < stress_iters; it++) {
        int k = (int)rng_below(NSTREAMS);
        size_t n = rng_size(4 * MIB);
        unsigned long long spin = 1000ull * rng_below(200); /* 0 .. 199 us */
        void *p = NULL;
        CK(cudaMalloc(&p, n));
        reused += p == prev;
        fill(p, n, (unsigned)it, s[k]);
        check_spin(p, n, (unsigned)it, (unsigned)it, spin, s[k]);
        CK(cudaFree(p));
        prev = p;
    }
    unsigned tag, off;
    unsigned long long bad = counters_take(&tag, &off);
    streams_destroy(s);
    race_result("race-stress", bad == 0,
                "(seed %llu: %d allocations filled and checked on random streams and freed at once, %d handed the "
                "address just freed; bad bytes: %llu)",
                seed0, stress_iters, reused, bad);
    if (bad)
        printf("  first bad byte: iteration %u at offset %u\n", tag, off);
}

/* ------------------------------------------------------------------------
 * --smoke: does cucache load and serve this runtime
 * ---------------------------------------------------------------------- */

/* Three rounds of eight sizes (4 KiB .. 64 MiB) allocated, filled by a
 * kernel, checked and freed, then cudaMallocAsync/cudaFreeAsync pairs on a
 * non-blocking stream: a second or two, after which cucache's counters say
 * whether it served the allocations (rounds 2 and 3 are cache hits), saw
 * the runtime's context retain and counted its launches. */
static void check_smoke(void)
{
    static const size_t n[] = {4 * KIB, 64 * KIB + 13, MIB, MIB + 1, 3 * MIB + 5, 8 * MIB, 20 * MIB, 64 * MIB};
    enum { NS = sizeof n / sizeof n[0], ROUNDS = 3, ASYNC_PAIRS = 16 };
    void *p[NS];
    int misal = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < NS; i++) {
            CK(cudaMalloc(&p[i], n[i]));
            misal += misaligned(p[i]);
            fill(p[i], n[i], (unsigned)(round * 100 + i), 0);
        }
        for (int i = 0; i < NS; i++)
            check(p[i], n[i], (unsigned)(round * 100 + i), (unsigned)i, 0);
        for (int i = 0; i < NS; i++)
            CK(cudaFree(p[i]));
    }
    unsigned long long bad = counters_take(NULL, NULL);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < ASYNC_PAIRS; i++) {
        void *q = NULL;
        CK(cudaMallocAsync(&q, MIB, s));
        fill(q, MIB, (unsigned)i, s);
        check(q, MIB, (unsigned)i, 0, s);
        CK(cudaFreeAsync(q, s));
    }
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
    bad += counters_take(NULL, NULL);
    int ok = bad == 0 && misal == 0;
    failures += !ok;
    report("check", "smoke", ok,
           "(%d rounds x %d sizes, 4 KiB .. 64 MiB, and %d cudaMallocAsync pairs; bad bytes: %llu; not 256-byte "
           "aligned: %d)",
           ROUNDS, NS, ASYNC_PAIRS, bad, misal);
}

/* ------------------------------------------------------------------------
 * Timing
 * ---------------------------------------------------------------------- */

static void time_pairs(const char *name, size_t n)
{
    void *p = NULL;
    for (int i = 0; i < 10; i++) {
        CK(cudaMalloc(&p, n));
        CK(cudaFree(p));
    }
    CK(cudaDeviceSynchronize());
    double t0 = now_s();
    for (int i = 0; i < timing_pairs; i++) {
        CK(cudaMalloc(&p, n));
        CK(cudaFree(p));
    }
    double t = now_s() - t0;
    printf("timing: %s %.0f ns/pair (%d pairs)\n", name, t * 1e9 / timing_pairs, timing_pairs);
}

static void time_async_pairs(const char *name, size_t n)
{
    cudaStream_t s;
    void *p = NULL;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < 10; i++) {
        CK(cudaMallocAsync(&p, n, s));
        CK(cudaFreeAsync(p, s));
    }
    CK(cudaStreamSynchronize(s));
    double t0 = now_s();
    for (int i = 0; i < timing_pairs; i++) {
        CK(cudaMallocAsync(&p, n, s));
        CK(cudaFreeAsync(p, s));
    }
    CK(cudaStreamSynchronize(s));
    double t = now_s() - t0;
    CK(cudaStreamDestroy(s));
    printf("timing: %s %.0f ns/pair (%d pairs, stream synchronised at the end)\n", name, t * 1e9 / timing_pairs,
           timing_pairs);
}

/* ------------------------------------------------------------------------
 * cucache, when it is in the process
 * ---------------------------------------------------------------------- */

typedef int (*stat_fn)(int, const char *, int64_t *);

static void cucache_counters(void)
{
    stat_fn st = (stat_fn)dlsym(RTLD_DEFAULT, "cucache_stat");
    const char *(*ver)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "cucache_version");
    if (!st) {
        printf("cucache: not loaded (no cucache_stat in the process)\n");
        if (expect_cucache) {
            printf("gpu_alloc: --expect-cucache, but cucache is not loaded\n");
            failures++;
        }
        return;
    }
    static const char *const keys[] = {"num_cache_hits",     "num_device_alloc",   "num_device_free",
                                       "num_fences",         "num_fence_waits",    "fence_wait_ns",
                                       "num_alloc_retries",  "num_ooms",           "reserved_bytes.all.peak",
                                       "num_fence_hand_outs", "num_hand_out_stops", "contexts_seen",
                                       "contexts_many",      "num_submissions",    "submissions_unseen"};
    int64_t hits = -1;
    printf("cucache: loaded, version %s; device 0:", ver ? ver() : "?");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int64_t v = -1;
        if (st(0, keys[i], &v) != 0)
            v = -1;
        if (i == 0)
            hits = v;
        printf(" %s=%" PRId64, keys[i], v);
    }
    printf("\n");
    if (expect_cucache && hits <= 0) {
        printf("gpu_alloc: --expect-cucache, but cucache served no allocation from its cache\n");
        failures++;
    }
}

/* ------------------------------------------------------------------------
 * --oom: a forced, fragmented out-of-memory failure
 * ---------------------------------------------------------------------- */

/* The block that fills the device in about OOM_BLOCKS pieces, whatever its
 * size (256 MiB on an 80 GiB card, 444 MiB on a 139 GiB one): the time
 * to fill it and the snapshot's size stay the same on any card. */
enum { OOM_BLOCKS = 320 };

static size_t oom_block(size_t total)
{
    size_t b = total / OOM_BLOCKS & ~(2 * MIB - 1);
    return b < 64 * MIB ? 64 * MIB : b;
}

static int run_oom(void)
{
    enum { MAX_BLOCKS = 4 * OOM_BLOCKS };
    static void *blocks[MAX_BLOCKS];
    size_t free0 = 0, total0 = 0;
    CK(cudaMemGetInfo(&free0, &total0));
    const size_t block = oom_block(total0);
    size_t n = 0;
    while (n < MAX_BLOCKS) {
        void *p = NULL;
        cudaError_t rc = cudaMalloc(&p, block);
        if (rc != cudaSuccess) {
            (void)cudaGetLastError();
            break;
        }
        CK(cudaMemset(p, (int)(n & 0xff), block));
        blocks[n++] = p;
    }
    for (size_t i = 0; i < n; i += 2) {
        CK(cudaFree(blocks[i]));
        blocks[i] = NULL;
    }
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    printf("gpu_alloc: --oom: %zu blocks of %zu MiB filled the device, every other one freed; %.2f GiB free of "
           "%.2f GiB\n",
           n, block / MIB, (double)free_b / (1 << 30), (double)total_b / (1 << 30));
    void *big = NULL;
    size_t ask = free_b + 1024 * MIB;
    cudaError_t rc = cudaMalloc(&big, ask);
    cudaError_t last = cudaGetLastError();
    printf("gpu_alloc: --oom: cudaMalloc(%zu) returned %s, cudaGetLastError %s\n", ask, cudaGetErrorName(rc),
           cudaGetErrorName(last));
    int ok = rc == cudaErrorMemoryAllocation;
    for (size_t i = 1; i < n; i += 2) {
        unsigned char h[2];
        CK(cudaMemcpy(&h[0], blocks[i], 1, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&h[1], (char *)blocks[i] + block - 1, 1, cudaMemcpyDeviceToHost));
        if (h[0] != (unsigned char)(i & 0xff) || h[1] != (unsigned char)(i & 0xff)) {
            printf("gpu_alloc: --oom: block %zu lost its data\n", i);
            ok = 0;
        }
        CK(cudaFree(blocks[i]));
    }
    if (big && rc == cudaSuccess)
        CK(cudaFree(big));
    printf("gpu_alloc: RESULT %s (--oom)\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

/* ------------------------------------------------------------------------
 * main
 * ---------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    int oom_mode = 0, smoke = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--expect-cucache") == 0)
            expect_cucache = 1;
        else if (strcmp(argv[i], "--race-informational") == 0)
            race_informational = 1;
        else if (strcmp(argv[i], "--oom") == 0)
            oom_mode = 1;
        else if (strcmp(argv[i], "--smoke") == 0)
            smoke = 1;
        else if (strcmp(argv[i], "--quick") == 0) {
            size_rounds = 2;
            churn_ops = 600;
            async_ops = 600;
            stress_iters = 120;
            timing_pairs = 2000;
        } else {
            fprintf(stderr, "usage: %s [--expect-cucache] [--race-informational] [--quick] [--smoke | --oom]\n",
                    argv[0]);
            return 2;
        }
    }
    const char *env_seed = getenv("GPU_ALLOC_SEED");
    if (env_seed && *env_seed)
        seed0 = strtoull(env_seed, NULL, 0);

    int rt = 0, drv = 0, dev = 0;
    cudaDeviceProp prop;
    CK(cudaRuntimeGetVersion(&rt));
    CK(cudaDriverGetVersion(&drv));
    CK(cudaSetDevice(0));
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    Dl_info info;
    memset(&info, 0, sizeof info);
    cudaError_t (*malloc_fn)(void **, size_t) = cudaMalloc; /* the C entry point, not the C++ template */
    dladdr((void *)(uintptr_t)malloc_fn, &info);
    printf("gpu_alloc: device %d: %s (sm_%d%d, %.1f GiB); runtime %d, driver %d; cudaMalloc resolves to %s\n", dev,
           prop.name, prop.major, prop.minor, (double)prop.totalGlobalMem / (1 << 30), rt, drv,
           info.dli_fname ? info.dli_fname : "?");
    printf("gpu_alloc: seed %llu (GPU_ALLOC_SEED)%s%s\n", seed0, expect_cucache ? ", --expect-cucache" : "",
           race_informational ? ", --race-informational" : "");

    if (oom_mode)
        return run_oom();
    CK(cudaHostAlloc((void **)&hctr, sizeof *hctr, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&dctr, hctr, 0));
    counters_reset();

    double t0 = now_s();
    check_selftest();
    if (smoke) {
        check_smoke();
    } else {
        check_sizes();
        check_churn();
        check_async();
        check_race();
        check_race_stress();
    }
    printf("gpu_alloc: checks took %.2f s\n", now_s() - t0);

    if (!smoke) {
        time_pairs("malloc_free_4KiB", 4 * KIB);
        time_pairs("malloc_free_8MiB", 8 * MIB);
        time_async_pairs("mallocasync_freeasync_4KiB", 4 * KIB);
    }

    cucache_counters();
    CK(cudaFreeHost(hctr));

    if (race_failures && race_informational)
        printf("gpu_alloc: %d race check(s) failed (informational: --race-informational)\n", race_failures);
    int fail = failures || (race_failures && !race_informational);
    printf("gpu_alloc: RESULT %s (%d check(s) failed, %d race check(s) failed%s)\n", fail ? "FAIL" : "PASS", failures,
           race_failures, race_informational ? ", race checks informational" : "");
    return fail ? 1 : 0;
}
