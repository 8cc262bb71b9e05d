/*
 * rt_prog: the live half of the round-trip test (tests/replay/roundtrip.sh).
 * Run under cucache-run --sim --trace, it makes a seeded mix of what a
 * multi-stream job asks of the allocator, on every device it is given:
 * cudaMalloc/cudaFree of sizes from 512 B to 96 MiB, cudaMallocAsync and
 * cudaFreeAsync on non-blocking streams, on the legacy stream and (_ptsz)
 * on the per-thread stream, frees on another stream than the allocation's,
 * stream and device synchronisations, and a capture window whose cudaMalloc
 * calls go to the capture pool.  No kernels: the device stays idle, as the
 * replay's backend assumes.
 *
 * Each allocation is preceded by a cudaDeviceSynchronize of its device: on
 * the simulated device an event on an idle stream completes when the
 * stream's worker thread gets to it, so without the synchronisation whether
 * a free is reusable at the next allocation would depend on thread timing,
 * in the live run itself.  With it, every free made before is reusable, in
 * the live run and in the replay alike (the trace records the
 * synchronisation), and the comparison can be exact.
 *
 * At the end it prints, per device, the peaks cucache's own statistics saw:
 *   device D peak_allocated N peak_reserved M device_allocs K ooms F fallbacks B
 * which the replay of its trace must reproduce exactly.
 *
 * With "oom" (a run that runs out of memory): cudaMalloc only (the
 * interposer's fallback to the runtime's allocator is then the simulated
 * driver's cudaMalloc, which the replay's device models page for page), of
 * 1-4 MiB or 1-96 MiB, with no capture, after one request on each device
 * that only the fallback can serve; an out-of-memory failure is counted (ooms: the
 * failures the program saw; fallbacks: cucache's statistic
 * num_fallback_served) and the program goes on.
 *
 * With "handouts" (run it under reuse:ordered): one device,
 * cudaMalloc/cudaFree only, each allocation written by a cudaMemsetAsync
 * (submitted work, so its free waits behind a fence) and no
 * synchronisation before the allocations: cucache hands the frees behind
 * fences out, the device ordered after them, which does not depend on
 * thread timing (at a miss every fence is handed out or completed, and a
 * hit hands out or not by the pending bytes and the program's streams).
 * The first and last thirds have no stream of the program's own (a hit
 * hands out any pending free that could serve it) and write on the legacy
 * stream; the middle third creates two (a hit hands out once the pending
 * frees hold an eighth of the cache, and leaves the newest) and writes on
 * the first.  (With one, the legacy stream counts too only once the
 * probe finds work queued there, which a host loaded enough to delay the
 * simulated streams' workers may make it find; the trace records it, but
 * which fences a paced hit then finds completed depends on that delay.)  The line per
 * device adds the hand-outs (num_fence_hand_outs), which the round trip
 * requires to be some.  With "handouts-late" (two devices), the last third
 * begins by giving device 1 its context: the process has two, cucache
 * hands nothing out from then on and the trace (version 4) records where;
 * the round trip requires that record.  That third synchronises before
 * each allocation: without hand-outs, what a free behind a fence serves
 * would depend on when the simulated device ran its work.
 *
 * Usage: rt_prog SEED STEPS [oom|handouts|handouts-late]
 */
#include "cucache/cucache.h"
#include "cusim/cuda_api.h"

#include <stdbool.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LIVE = 96, NSTREAMS = 3, MAX_DEV = 4 };

typedef struct live_s {
    void *p;
    int dev;
    int stream; /* -1: cudaMalloc; else the stream index it was allocated on (NSTREAMS: legacy, +1: ptsz) */
} live_t;

static uint64_t rng;
static int oom_mode;
static long ooms[MAX_DEV];

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* 512 B .. 96 MiB, log-uniform, with repeats of a few common sizes. */
static size_t pick_size(void)
{
    static const size_t common[] = {4096, 1 << 20, 3 << 20, 12 << 20, 25 << 20};
    if (oom_mode) /* half of them small enough for 20 MiB segments, which a full device may refuse when the
                   * request itself would still fit: the runtime's fallback serves it */
        return ((size_t)1 << 20) + (size_t)(next() % (next() % 2 ? (3u << 20) : (95u << 20)));
    if (next() % 4 == 0)
        return common[next() % 5];
    unsigned shift = 9 + (unsigned)(next() % 18); /* 2^9 .. 2^26 */
    size_t s = ((size_t)1 << shift) + (size_t)(next() % ((size_t)1 << shift));
    return s > (96u << 20) ? (96u << 20) : s;
}

#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "rt_prog: %s: error %d\n", #call, (int)e_);                                                \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static cudaStream_t stream_of(cudaStream_t *streams, int dev, int k)
{
    return k < NSTREAMS ? streams[dev * NSTREAMS + k] : NULL;
}

static void do_free(live_t *l, cudaStream_t *streams)
{
    CHECK(cudaSetDevice(l->dev));
    if (l->stream < 0) {
        CHECK(cudaFree(l->p));
        return;
    }
    /* stream-ordered: on its own stream, or now and then on another one */
    int k = next() % 3 == 0 ? (int)(next() % (NSTREAMS + 1)) : l->stream;
    if (k == NSTREAMS + 1)
        CHECK(cudaFreeAsync_ptsz(l->p, NULL));
    else
        CHECK(cudaFreeAsync(l->p, stream_of(streams, l->dev, k > NSTREAMS ? NSTREAMS : k)));
}

static void print_stats(int ndev, const long *nooms, bool hand_outs);

/* rt_prog SEED STEPS handouts|handouts-late (above). */
static int handouts(uint64_t seed, long steps, bool late)
{
    rng = seed * 0x9E3779B97F4A7C15ull + 1;
    CHECK(cudaSetDevice(0));
    void *live[MAX_LIVE];
    int nlive = 0;
    cudaStream_t own = NULL, other = NULL;
    for (long i = 0; i < steps; i++) {
        bool middle = i >= steps / 3 && i < 2 * steps / 3;
        if (i == steps / 3) {
            CHECK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
            CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
        }
        if (i == 2 * steps / 3) {
            CHECK(cudaDeviceSynchronize());
            CHECK(cudaStreamDestroy(own));
            CHECK(cudaStreamDestroy(other));
            own = other = NULL;
            if (late) {
                CHECK(cudaSetDevice(1));
                CHECK(cudaFree(NULL)); /* device 1's context */
                CHECK(cudaSetDevice(0));
            }
        }
        uint64_t r = next() % 100;
        if (r < 50 && nlive < MAX_LIVE) {
            size_t size = pick_size();
            if (late && i >= 2 * steps / 3)
                CHECK(cudaDeviceSynchronize());
            CHECK(cudaMalloc(&live[nlive], size));
            CHECK(cudaMemsetAsync(live[nlive], 0, size < 4096 ? size : 4096, middle ? own : NULL));
            nlive++;
        } else if (r < 95 && nlive > 0) {
            int k = (int)(next() % (uint64_t)nlive);
            CHECK(cudaFree(live[k]));
            live[k] = live[--nlive];
        } else {
            CHECK(cudaDeviceSynchronize());
        }
    }
    while (nlive > 0)
        CHECK(cudaFree(live[--nlive]));
    CHECK(cudaDeviceSynchronize());
    long none[MAX_DEV] = {0};
    print_stats(1, none, true);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 && !(argc == 4 && (strcmp(argv[3], "oom") == 0 || strcmp(argv[3], "handouts") == 0 ||
                                     strcmp(argv[3], "handouts-late") == 0))) {
        fprintf(stderr, "usage: rt_prog SEED STEPS [oom|handouts|handouts-late]\n");
        return 2;
    }
    oom_mode = argc == 4 && strcmp(argv[3], "oom") == 0;
    if (argc == 4 && !oom_mode)
        return handouts(strtoull(argv[1], NULL, 0), strtol(argv[2], NULL, 0), strcmp(argv[3], "handouts-late") == 0);
    rng = strtoull(argv[1], NULL, 0) * 0x9E3779B97F4A7C15ull + 1;
    long steps = strtol(argv[2], NULL, 0);
    int ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    if (ndev > MAX_DEV)
        ndev = MAX_DEV;
    cudaStream_t streams[MAX_DEV * NSTREAMS];
    for (int d = 0; d < ndev; d++) {
        CHECK(cudaSetDevice(d));
        for (int k = 0; k < NSTREAMS; k++)
            CHECK(cudaStreamCreateWithFlags(&streams[d * NSTREAMS + k], cudaStreamNonBlocking));
    }
    live_t live[MAX_LIVE];
    int nlive = 0;
    if (oom_mode) {
        /* one certain fallback per device: all but 10 MiB taken, then 3 MiB,
         * for which cucache wants a 20 MiB segment and the runtime takes 4 */
        for (int d = 0; d < ndev; d++) {
            size_t free_b = 0, total = 0;
            CHECK(cudaSetDevice(d));
            CHECK(cudaMemGetInfo(&free_b, &total));
            live[nlive] = (live_t){NULL, d, -1};
            CHECK(cudaMalloc(&live[nlive++].p, (total - (10u << 20)) & ~(size_t)((2u << 20) - 1)));
            live[nlive] = (live_t){NULL, d, -1};
            CHECK(cudaMalloc(&live[nlive++].p, 3u << 20));
        }
    }
    for (long i = 0; i < steps; i++) {
        uint64_t r = next() % 100;
        if (i == steps / 2 && !oom_mode) {
            /* a capture window: its cudaMalloc calls go to the capture pool */
            cudaStream_t s = streams[0];
            CHECK(cudaSetDevice(0));
            CHECK(cudaDeviceSynchronize());
            CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
            for (int k = 0; k < 3 && nlive < MAX_LIVE; k++, nlive++) {
                live[nlive] = (live_t){NULL, 0, -1};
                CHECK(cudaMalloc(&live[nlive].p, pick_size()));
            }
            cudaGraph_t g;
            CHECK(cudaStreamEndCapture(s, &g));
            CHECK(cudaGraphDestroy(g));
        } else if (r < 50 && nlive < MAX_LIVE) {
            live_t *l = &live[nlive++];
            l->dev = (int)(next() % (uint64_t)ndev);
            CHECK(cudaSetDevice(l->dev));
            CHECK(cudaDeviceSynchronize());
            size_t size = pick_size();
            if (oom_mode) {
                l->stream = -1;
                cudaError_t e = cudaMalloc(&l->p, size);
                if (e == cudaErrorMemoryAllocation) {
                    ooms[l->dev]++;
                    nlive--;
                    (void)cudaGetLastError();
                } else {
                    CHECK(e);
                }
            } else if (next() % 2) {
                l->stream = -1;
                CHECK(cudaMalloc(&l->p, size));
            } else {
                l->stream = (int)(next() % (NSTREAMS + 2));
                if (l->stream == NSTREAMS + 1)
                    CHECK(cudaMallocAsync_ptsz(&l->p, size, NULL));
                else
                    CHECK(cudaMallocAsync(&l->p, size, stream_of(streams, l->dev, l->stream)));
            }
        } else if (r < 92 && nlive > 0) {
            int k = (int)(next() % (uint64_t)nlive);
            do_free(&live[k], streams);
            live[k] = live[--nlive];
        } else if (r < 96) {
            int d = (int)(next() % (uint64_t)ndev);
            CHECK(cudaStreamSynchronize(stream_of(streams, d, (int)(next() % NSTREAMS))));
        } else {
            CHECK(cudaSetDevice((int)(next() % (uint64_t)ndev)));
            CHECK(cudaDeviceSynchronize());
        }
    }
    while (nlive > 0)
        do_free(&live[--nlive], streams);
    for (int d = 0; d < ndev; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaDeviceSynchronize());
    }
    print_stats(ndev, ooms, false);
    for (int d = 0; d < ndev; d++) {
        CHECK(cudaSetDevice(d));
        for (int k = 0; k < NSTREAMS; k++)
            CHECK(cudaStreamDestroy(streams[d * NSTREAMS + k]));
    }
    return 0;
}

static void print_stats(int ndev, const long *nooms, bool hand_outs)
{
    int (*stat)(int, const char *, int64_t *) = (int (*)(int, const char *, int64_t *))dlsym(RTLD_DEFAULT,
                                                                                              "cucache_stat");
    if (!stat) {
        fprintf(stderr, "rt_prog: cucache is not loaded\n");
        exit(1);
    }
    for (int d = 0; d < ndev; d++) {
        int64_t pa = -1, pr = -1, da = -1, fb = -1, ho = -1;
        stat(d, "allocated_bytes.all.peak", &pa);
        stat(d, "reserved_bytes.all.peak", &pr);
        stat(d, "num_device_alloc", &da);
        stat(d, "num_fallback_served", &fb);
        stat(d, "num_fence_hand_outs", &ho);
        printf("device %d peak_allocated %lld peak_reserved %lld device_allocs %lld ooms %ld fallbacks %lld", d,
               (long long)pa, (long long)pr, (long long)da, nooms[d], (long long)fb);
        if (hand_outs)
            printf(" hand_outs %lld", (long long)ho);
        printf("\n");
    }
}
