/*
 * Proves that reuse stays race-free under concurrency: four threads, each
 * with two non-blocking streams and its per-thread default stream, allocate
 * (cudaMalloc, cudaMallocAsync) buffers of random sizes, write a per-thread
 * pattern (cudaMemcpyAsync from pageable memory, cudaMemsetAsync), read
 * windows of them on other streams (ordered by events, as a correct program
 * must; copies, and simulated kernels that hold their stream a little),
 * free them with cudaFree while those reads may still be queued, or (for
 * stream-ordered memory) with cudaFreeAsync ordered after every use,
 * synchronise streams and now and then the whole device while the other
 * threads go on, and check every read and every live buffer; thousands of
 * operations.  Under reuse:fenced, reuse:sync and reuse:ordered the fatal
 * race detector must stay silent and every byte must be right; under
 * reuse:stream (REUSE_EXPECT=race or abort) the same workload is caught,
 * which shows the test able to fail.  REUSE_BARE=1 runs it without cucache,
 * on the simulator's own allocator: the workload itself is race-free.  Seen
 * to fail: with a cudaDeviceSynchronize that makes every pending free
 * reusable, including those other threads made while it ran (about 9 runs
 * in 10); with the fence's events on non-blocking streams dropped (6 in
 * 10); with reuse:sync's synchronisation removed.
 *
 * The seed is printed; REUSE_STRESS_SEED=<n> replays each thread's sequence
 * of operations (the interleaving of threads is the scheduler's).
 * REUSE_STRESS_OPS sets the operations per thread (default 3000).
 */
#include "reusetest.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    THREADS = 4,
    STREAMS = 3,           /* per thread: 0 = per-thread default, 1 and 2 non-blocking */
    SLOTS = 12,            /* live buffers per thread */
    READS = 8,             /* reads in flight per thread */
    WINDOW_MAX = 64 << 10, /* bytes of one read */
    SIZE_MAX_BYTES = 4 << 20,
    DEFAULT_OPS = 3000,
};

struct buf {
    unsigned char *p; /* NULL: free slot */
    size_t n;
    int owner;      /* stream it was written on */
    bool async;     /* from cudaMallocAsync */
    bool is_memset; /* written by a memset of `value`, else pattern `seed` */
    unsigned seed;  /* pattern seed, or the memset value */
    uint32_t users; /* streams that read it since */
};

struct pread {
    bool live;
    int stream;
    unsigned char *landing; /* WINDOW_MAX pinned bytes */
    const unsigned char *src;
    size_t off, len;
    bool is_memset;
    unsigned seed;
    unsigned delay_us; /* simulated kernel: holds its stream this long first */
};

struct worker {
    int id;
    uint64_t rng;
    unsigned ops;
    cudaStream_t s[STREAMS];
    cudaEvent_t ev;
    struct buf bufs[SLOTS];
    struct pread reads[READS];
    unsigned char *landing; /* READS * WINDOW_MAX pinned */
    unsigned char *check;   /* SIZE_MAX_BYTES pinned, whole-buffer checks */
    unsigned char *pageable;
    /* counters */
    unsigned long allocs, async_allocs, frees, async_frees, reads_done, kernels, checks, ooms, syncs;
    unsigned long data_errors;
    char error[512]; /* the first failure */
};

static struct worker workers[THREADS];
static unsigned stress_seed;

/* ---- random numbers ---------------------------------------------------- */

static uint64_t next_u64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static unsigned below(struct worker *w, unsigned n)
{
    return (unsigned)(next_u64(&w->rng) % n);
}

/* Mostly small, some up to 1 MiB, a few up to 4 MiB. */
static size_t random_size(struct worker *w)
{
    unsigned r = below(w, 100);
    if (r < 70)
        return 1 + below(w, 64 << 10);
    if (r < 95)
        return (64 << 10) + below(w, 960 << 10);
    return (1 << 20) + below(w, 3 << 20);
}

/* ---- failures --------------------------------------------------------- */

static bool failed(struct worker *w)
{
    return w->error[0] != '\0';
}

static void failf(struct worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(struct worker *w, const char *fmt, ...)
{
    if (failed(w))
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(w->error, sizeof w->error, "thread %d, op %u: ", w->id, w->ops);
    vsnprintf(w->error + n, sizeof w->error - (size_t)n, fmt, ap);
    va_end(ap);
}

static bool ok(struct worker *w, cudaError_t rc, const char *call)
{
    if (rc == cudaSuccess)
        return true;
    failf(w, "%s returned %d (%s)", call, (int)rc, cudaGetErrorName(rc));
    return false;
}

#define OK(w, call) ok(w, (call), #call)

/* ---- ordering helpers ------------------------------------------------- */

/* Work queued next on stream `to` waits for everything queued so far on
 * `from`. */
static bool order(struct worker *w, int from, int to)
{
    if (from == to)
        return true;
    return OK(w, cudaEventRecord(w->ev, w->s[from])) && OK(w, cudaStreamWaitEvent(w->s[to], w->ev, 0));
}

/* ---- reads ------------------------------------------------------------ */

static void kernel_read_fn(void *arg)
{
    struct pread *r = arg;
    if (r->delay_us) {
        struct timespec ts = {0, (long)r->delay_us * 1000};
        nanosleep(&ts, NULL);
    }
    memcpy(r->landing, r->src + r->off, r->len);
}

static bool expect_bytes(struct worker *w, const unsigned char *got, size_t len, bool is_memset, unsigned seed,
                         size_t off, const char *what, const void *dev)
{
    long at = is_memset ? simtest_check_byte(got, len, (unsigned char)seed) : simtest_check(got, len, seed, off);
    if (at < 0)
        return true;
    w->data_errors++;
    failf(w, "%s of buffer %p: byte %zu is 0x%02x, expected %s", what, dev, off + (size_t)at, got[at],
          is_memset ? "the memset value" : "the pattern");
    return false;
}

/* Waits for a read's stream and checks what it landed. */
static void collect(struct worker *w, struct pread *r)
{
    if (!r->live)
        return;
    if (!OK(w, cudaStreamSynchronize(w->s[r->stream])))
        return;
    expect_bytes(w, r->landing, r->len, r->is_memset, r->seed, r->off, "a deferred read", r->src);
    r->live = false;
    w->reads_done++;
}

static struct pread *free_read_slot(struct worker *w)
{
    for (int i = 0; i < READS; i++)
        if (!w->reads[i].live)
            return &w->reads[i];
    struct pread *r = &w->reads[below(w, READS)];
    collect(w, r);
    return r->live ? NULL : r;
}

/* A window of b read on stream `on` into a landing slot, checked later. */
static void read_window(struct worker *w, struct buf *b, int on)
{
    struct pread *r = free_read_slot(w);
    if (!r || !order(w, b->owner, on))
        return;
    size_t len = 1 + below(w, (unsigned)(b->n < WINDOW_MAX ? b->n : WINDOW_MAX));
    size_t off = below(w, (unsigned)(b->n - len + 1));
    *r = (struct pread){true, on, r->landing, b->p, off, len, b->is_memset, b->seed, 0};
    if (below(w, 4) == 0) {
        /* a simulated kernel that holds its stream up to 200 us */
        r->delay_us = below(w, 200);
        struct cucache_sim_access acc = {b->p + off, len, 0};
        CUresult cr = cucacheSimLaunch((CUstream)w->s[on], kernel_read_fn, r, &acc, 1);
        if (cr != CUDA_SUCCESS) {
            failf(w, "cucacheSimLaunch returned %d", (int)cr);
            r->live = false;
            return;
        }
        w->kernels++;
    } else if (!OK(w, cudaMemcpyAsync(r->landing, b->p + off, len, cudaMemcpyDeviceToHost, w->s[on]))) {
        r->live = false;
        return;
    }
    b->users |= 1u << on;
}

/* The whole buffer, now. */
static void check_whole(struct worker *w, struct buf *b, int on)
{
    if (!order(w, b->owner, on) || !OK(w, cudaMemcpyAsync(w->check, b->p, b->n, cudaMemcpyDeviceToHost, w->s[on])) ||
        !OK(w, cudaStreamSynchronize(w->s[on])))
        return;
    b->users |= 1u << on;
    expect_bytes(w, w->check, b->n, b->is_memset, b->seed, 0, "a whole-buffer check", b->p);
    w->checks++;
}

/* ---- allocation and free ---------------------------------------------- */

static void alloc_into(struct worker *w, struct buf *b)
{
    size_t n = random_size(w);
    int on = (int)below(w, STREAMS);
    bool async = below(w, 2) == 0;
    void *p = NULL;
    cudaError_t rc = async ? cudaMallocAsync(&p, n, w->s[on]) : cudaMalloc(&p, n);
    if (rc == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        w->ooms++;
        return;
    }
    if (!ok(w, rc, async ? "cudaMallocAsync" : "cudaMalloc"))
        return;
    *b = (struct buf){p, n, on, async, below(w, 3) == 0, 0, 0};
    if (b->is_memset) {
        b->seed = 1 + below(w, 255);
        rc = cudaMemsetAsync(p, (int)b->seed, n, w->s[on]);
    } else {
        b->seed = (unsigned)w->id << 24 | below(w, 1u << 24);
        simtest_fill(w->pageable, n, b->seed);
        rc = cudaMemcpyAsync(p, w->pageable, n, cudaMemcpyHostToDevice, w->s[on]); /* staged at the call */
    }
    OK(w, rc);
    async ? w->async_allocs++ : w->allocs++;
}

static void free_buf(struct worker *w, struct buf *b)
{
    if (!b->async || below(w, 2) == 0) {
        /* cudaFree: legal whatever is queued (a real one waits for the device).
         * cudaFreeAsync only for stream-ordered memory: the simulator, like
         * the documentation, orders nothing after the stream-ordered free
         * of cudaMalloc memory, so the workload would race by itself. */
        OK(w, cudaFree(b->p));
        w->frees++;
    } else {
        /* cudaFreeAsync on stream f, after every stream that used the buffer */
        int f = (int)below(w, STREAMS);
        uint32_t used = b->users | 1u << b->owner;
        for (int u = 0; u < STREAMS; u++)
            if ((used & (1u << u)) && !order(w, u, f))
                return;
        OK(w, cudaFreeAsync(b->p, w->s[f]));
        w->async_frees++;
    }
    b->p = NULL;
}

/* ---- the worker ------------------------------------------------------- */

static void hold_stream(void *arg)
{
    struct timespec ts = {0, (long)(uintptr_t)arg * 1000};
    nanosleep(&ts, NULL);
}

static void step(struct worker *w)
{
    struct buf *b = &w->bufs[below(w, SLOTS)];
    unsigned r = below(w, 1000);
    if (!b->p) {
        alloc_into(w, b);
    } else if (r < 380) {
        read_window(w, b, (int)below(w, STREAMS));
    } else if (r < 700) {
        free_buf(w, b);
    } else if (r < 730) {
        check_whole(w, b, (int)below(w, STREAMS));
    } else if (r < 800) {
        collect(w, &w->reads[below(w, READS)]);
    } else if (r < 850) {
        /* hold a stream a little, so that work piles up behind it */
        OK(w, cudaLaunchHostFunc(w->s[below(w, STREAMS)], hold_stream, (void *)(uintptr_t)below(w, 300)));
    } else if (r < 870) {
        /* other threads' work keeps being queued meanwhile */
        OK(w, cudaDeviceSynchronize());
        w->syncs++;
    } else if (r < 890) {
        OK(w, cudaStreamSynchronize(w->s[below(w, STREAMS)]));
    } else {
        read_window(w, b, b->owner);
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    w->s[0] = cudaStreamPerThread;
    if (!OK(w, cudaStreamCreateWithFlags(&w->s[1], cudaStreamNonBlocking)) ||
        !OK(w, cudaStreamCreateWithFlags(&w->s[2], cudaStreamNonBlocking)) ||
        !OK(w, cudaEventCreateWithFlags(&w->ev, cudaEventDisableTiming)) ||
        !OK(w, cudaMallocHost((void **)&w->landing, (size_t)READS * WINDOW_MAX)) ||
        !OK(w, cudaMallocHost((void **)&w->check, SIZE_MAX_BYTES)))
        return NULL;
    w->pageable = malloc(SIZE_MAX_BYTES);
    if (!w->pageable) {
        failf(w, "%s", "out of host memory");
        return NULL;
    }
    for (int i = 0; i < READS; i++)
        w->reads[i].landing = w->landing + (size_t)i * WINDOW_MAX;

    unsigned total = w->ops;
    for (w->ops = 0; w->ops < total && !failed(w); w->ops++)
        step(w);

    /* drain: every read, every live buffer checked, then freed */
    for (int i = 0; i < READS && !failed(w); i++)
        collect(w, &w->reads[i]);
    for (int i = 0; i < SLOTS && !failed(w); i++) {
        if (!w->bufs[i].p)
            continue;
        check_whole(w, &w->bufs[i], (int)below(w, STREAMS));
        free_buf(w, &w->bufs[i]);
    }
    OK(w, cudaStreamSynchronize(cudaStreamPerThread));
    cudaStreamDestroy(w->s[1]);
    cudaStreamDestroy(w->s[2]);
    cudaEventDestroy(w->ev);
    cudaFreeHost(w->landing);
    cudaFreeHost(w->check);
    free(w->pageable);
    return NULL;
}

static unsigned env_unsigned(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    return (unsigned)strtoul(v, NULL, 0);
}

static void test_stress(void **state)
{
    (void)state;
    unsigned ops = env_unsigned("REUSE_STRESS_OPS", DEFAULT_OPS);
    stress_seed = env_unsigned("REUSE_STRESS_SEED", (unsigned)time(NULL) ^ (unsigned)getpid() * 2654435761u);
    print_message("reuse stress: seed %u (replay: REUSE_STRESS_SEED=%u), %d threads x %u operations, reuse:%s\n",
                  stress_seed, stress_seed, THREADS, ops, reuse_policy_name());

    if (reuse_bare()) {
        /* The simulator's own pool releases, at any synchronisation, blocks
         * whose stream-ordered free has run but that no host call observed;
         * the detector then reports their next user (a limitation of the
         * simulator, not of the workload).  Keep the pool's memory. */
        cudaMemPool_t pool;
        uint64_t keep = UINT64_MAX;
        SIM_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
        SIM_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    }
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        memset(&workers[i], 0, sizeof workers[i]);
        workers[i].id = i;
        workers[i].ops = ops;
        workers[i].rng = (uint64_t)stress_seed * 0x100000001B3ull + (uint64_t)i * 0x9E3779B97F4A7C15ull;
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &workers[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    SIM_OK(cudaDeviceSynchronize());

    unsigned long data_errors = 0, total_ops = 0;
    for (int i = 0; i < THREADS; i++) {
        struct worker *w = &workers[i];
        data_errors += w->data_errors;
        total_ops += w->ops;
        print_message("  thread %d: %u ops, %lu cudaMalloc, %lu cudaMallocAsync, %lu cudaFree, %lu cudaFreeAsync, "
                      "%lu reads (%lu kernels), %lu whole checks, %lu device syncs, %lu OOM\n",
                      i, w->ops, w->allocs, w->async_allocs, w->frees, w->async_frees, w->reads_done, w->kernels,
                      w->checks, w->syncs, w->ooms);
    }
    print_message("  cucache: %" PRId64 " cache hits, %" PRId64 " device allocations, %" PRId64 " fences, %" PRId64
                  " fence waits, %" PRId64 " alloc retries\n",
                  reuse_stat("num_cache_hits"), reuse_stat("num_device_alloc"), reuse_stat("num_fences"),
                  reuse_stat("num_fence_waits"), reuse_stat("num_alloc_retries"));
    unsigned long races = cucacheSimRaceCount();
    char text[1024] = "";
    if (races)
        cucacheSimLastRace(text, sizeof text);

    if (reuse_expect() == REUSE_EXPECT_RACE) {
        print_message("  reuse:%s: %lu race(s), %lu wrong read(s) (seed %u)\n", reuse_policy_name(), races, data_errors,
                      stress_seed);
        if (races == 0)
            fail_msg("reuse:%s: the stress workload was not caught: no race (seed %u)", reuse_policy_name(),
                     stress_seed);
        return;
    }
    for (int i = 0; i < THREADS; i++)
        if (failed(&workers[i]))
            fail_msg("%s (seed %u)", workers[i].error, stress_seed);
    if (races)
        fail_msg("%lu race(s) (seed %u); last: %s", races, stress_seed, text);
    assert_true(total_ops >= (unsigned long)THREADS * ops);
    if (reuse_bare())
        return;
    assert_true(reuse_stat("num_cache_hits") > 0);
    if (reuse_policy() == REUSE_FENCED)
        assert_true(reuse_stat("num_fences") > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        REUSETEST(test_stress),
    };
    return REUSE_RUN("reuse.stress", tests);
}
