/*
 * bench_yield: what a yield costs the process that asks for one
 * (docs/performance.md, "Sharing a GPU"): the time of a cudaMalloc that
 * fails on a full device, asks the neighbours' cucache for their idle
 * cache, waits for their answer and succeeds on its retry, end to end,
 * against the same cudaMalloc when the memory is simply free.
 *
 * Run under LD_PRELOAD=libcucache.so on a shared device (scripts/bench-
 * phased: CUCACHE_SIM_SHARED=KEY).  The process (the asker) starts -n
 * minus one neighbours, itself again with -N, talking to each over a pair
 * of pipes.  Each iteration:
 *   1. every neighbour allocates and frees X bytes (-f of the device
 *      shared among the neighbours), so that it holds X of idle cache and
 *      the device has about (1 - f) of its bytes free;
 *   2. the asker allocates X, more than is free: the call fails in the
 *      device, asks, and is retried (timed: "yield");
 *   3. the asker frees it and empties its cache (cucache_empty_cache), the
 *      neighbours empty theirs, and the asker allocates X again, from free
 *      memory this time (timed: "free"), then frees it and empties again.
 * The asker checks with cucache_stat that every timed yield was one
 * (num_yields_received grew by one).
 *
 * Prints one line:
 *   result nproc=N iters=I yield_p50_us=A yield_p99_us=B free_p50_us=C free_p99_us=D
 *
 * -s: what a yield costs the neighbour that gives: each neighbour runs a
 * thread of cache hits (cudaMalloc and cudaFree of 4 KiB, timed each) the
 * whole time, and sorts the timings by phase: while the asker's timed
 * allocation (which makes a neighbour give a segment back) is under way,
 * and while nothing is asked.  One more line:
 *   stall hit_us yielding p50=.. p99=.. max=.. quiet p50=.. p99=.. max=..
 * (all neighbours' timings together).
 */
#include "cucache/cucache.h"
#include "cusim/cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <errno.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"

const char bench_prog[] = "bench_yield";

extern char **environ;

enum {
    MAX_NEIGHBOURS = 63,
};

/* The commands the asker writes to a neighbour; it answers each with one
 * byte, 'k'. */
#define CMD_FILL 'f'  /* allocate and free X bytes: hold them as idle cache */
#define CMD_EMPTY 'e' /* give every cached byte back to the device */
#define CMD_QUIT 'q'
#define CMD_YIELDING 'y' /* -s: the timings from now on are of the yield phase */
#define CMD_QUIET 'u'    /* -s: ... of the quiet phase */

enum { STALL_SAMPLES = 1 << 20 }; /* timings kept per phase */

/* -s, in a neighbour: the hit loop's timings, by phase. */
typedef struct stall_s {
    atomic_int phase; /* 0 quiet, 1 yielding */
    atomic_bool stop;
    float *us[2];
    size_t n[2];
} stall_t;

static void *stall_loop(void *arg)
{
    stall_t *st = arg;
    while (!atomic_load(&st->stop)) {
        void *p;
        int ph = atomic_load(&st->phase);
        uint64_t t0 = bench_now_ns();
        if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess)
            bench_die("neighbour: the hit loop's cudaMalloc/cudaFree failed");
        uint64_t t1 = bench_now_ns();
        if (st->n[ph] < STALL_SAMPLES)
            st->us[ph][st->n[ph]++] = (float)((double)(t1 - t0) / 1e3);
    }
    return NULL;
}

typedef struct cucache_api_s {
    __typeof__(cucache_empty_cache) *empty;
    __typeof__(cucache_stat) *stat;
} cucache_api_t;

static void cucache_api(cucache_api_t *a)
{
    /* POSIX's way from a void * to a function pointer */
    *(void **)&a->empty = dlsym(RTLD_DEFAULT, "cucache_empty_cache");
    *(void **)&a->stat = dlsym(RTLD_DEFAULT, "cucache_stat");
    if (!a->empty || !a->stat)
        bench_die("libcucache.so is not loaded: run under LD_PRELOAD=libcucache.so");
}

static void check(cudaError_t rc, const char *what, size_t size)
{
    if (rc != cudaSuccess)
        bench_die("%s(%zu bytes) failed: %s", what, size, cudaGetErrorString(rc));
}

static void io_byte(int fd, char *c, bool write_it)
{
    for (;;) {
        ssize_t n = write_it ? write(fd, c, 1) : read(fd, c, 1);
        if (n == 1)
            return;
        if (n < 0 && errno == EINTR)
            continue;
        bench_die("pipe to a neighbour: %s", n ? strerror(errno) : "closed");
    }
}

/* The -s timings of a neighbour, one line on `out`: "n p50 p99 max" of
 * each phase, yielding first. */
static void stall_report(stall_t *st, int out)
{
    char line[256];
    int len = 0;
    for (int ph = 1; ph >= 0; ph--) {
        double *d = malloc((st->n[ph] ? st->n[ph] : 1) * sizeof *d), mx = 0;
        if (!d)
            bench_die("out of host memory");
        for (size_t i = 0; i < st->n[ph]; i++) {
            d[i] = st->us[ph][i];
            mx = d[i] > mx ? d[i] : mx;
        }
        len += snprintf(line + len, sizeof line - (size_t)len, "%zu %.1f %.1f %.1f ", st->n[ph],
                        st->n[ph] ? bench_quantile(d, st->n[ph], 0.5) : 0.0,
                        st->n[ph] ? bench_quantile(d, st->n[ph], 0.99) : 0.0, mx);
        free(d);
    }
    line[len - 1] = '\n';
    if (write(out, line, (size_t)len) != len)
        bench_die("pipe to the asker: %s", strerror(errno));
}

/* A neighbour: obeys the commands on fd `in`, answers on `out`. */
static int neighbour(int in, int out, size_t x, bool stall)
{
    cucache_api_t api;
    cucache_api(&api);
    static stall_t st;
    pthread_t loop;
    if (stall) {
        st.us[0] = malloc(STALL_SAMPLES * sizeof(float));
        st.us[1] = malloc(STALL_SAMPLES * sizeof(float));
        if (!st.us[0] || !st.us[1] || pthread_create(&loop, NULL, stall_loop, &st) != 0)
            bench_die("neighbour: the hit loop could not start");
    }
    for (;;) {
        char c, ok = 'k';
        io_byte(in, &c, false);
        if (c == CMD_QUIT) {
            if (stall) {
                atomic_store(&st.stop, true);
                pthread_join(loop, NULL);
                stall_report(&st, out);
            }
            return 0;
        }
        if (c == CMD_YIELDING || c == CMD_QUIET)
            atomic_store(&st.phase, c == CMD_YIELDING);
        if (c == CMD_FILL) {
            void *p;
            check(cudaMalloc(&p, x), "neighbour: cudaMalloc", x);
            check(cudaFree(p), "neighbour: cudaFree", x);
        } else if (c == CMD_EMPTY) {
            api.empty(0);
        }
        io_byte(out, &ok, true);
    }
}

typedef struct peer_s {
    pid_t pid;
    int to, from; /* the asker's ends */
} peer_t;

/* The neighbour's ends of its pipes, in the neighbour: fixed numbers, so
 * that every other descriptor of the asker (other neighbours' pipes) can
 * be close-on-exec and a neighbour sees end of file when the asker dies. */
#define PEER_IN_FD 200
#define PEER_OUT_FD 201

static void spawn_peer(peer_t *p, size_t x, bool stall)
{
    int down[2], up[2];
    if (pipe2(down, O_CLOEXEC) || pipe2(up, O_CLOEXEC))
        bench_die("pipe: %s", strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, down[0], PEER_IN_FD);
    posix_spawn_file_actions_adddup2(&fa, up[1], PEER_OUT_FD);
    char in[16], out[16], xs[32];
    snprintf(in, sizeof in, "%d", PEER_IN_FD);
    snprintf(out, sizeof out, "%d", PEER_OUT_FD);
    snprintf(xs, sizeof xs, "%zu", x);
    char *argv[] = {(char *)"bench_yield", (char *)(stall ? "-S" : "-N"), in, out, xs, NULL};
    int rc = posix_spawn(&p->pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc)
        bench_die("posix_spawn: %s", strerror(rc));
    close(down[0]);
    close(up[1]);
    p->to = down[1];
    p->from = up[0];
}

/* Sends c to every peer and waits for every answer. */
static void tell_all(peer_t *peers, int n, char c)
{
    for (int i = 0; i < n; i++)
        io_byte(peers[i].to, &c, true);
    for (int i = 0; i < n; i++) {
        char a;
        io_byte(peers[i].from, &a, false);
    }
}

static double timed_alloc_us(size_t x)
{
    void *p;
    uint64_t t0 = bench_now_ns();
    cudaError_t rc = cudaMalloc(&p, x);
    uint64_t t1 = bench_now_ns();
    check(rc, "cudaMalloc", x);
    check(cudaFree(p), "cudaFree", x);
    return (double)(t1 - t0) / 1e3;
}

static int64_t yields_received(const cucache_api_t *api)
{
    int64_t v = -1;
    if (api->stat(0, "num_yields_received", &v) != 0)
        bench_die("cucache_stat(num_yields_received) failed");
    return v;
}

int main(int argc, char **argv)
{
    if (argc == 5 && (!strcmp(argv[1], "-N") || !strcmp(argv[1], "-S")))
        return neighbour(atoi(argv[2]), atoi(argv[3]), (size_t)strtoull(argv[4], NULL, 10), argv[1][1] == 'S');
    int nproc = 2, iters = 200;
    bool stall = false;
    double frac = 0.9;
    int c;
    while ((c = getopt(argc, argv, "n:i:f:sh")) != -1) {
        switch (c) {
        case 's':
            stall = true;
            break;
        case 'n':
            nproc = (int)bench_number("-n", optarg, 2, MAX_NEIGHBOURS + 1);
            break;
        case 'i':
            iters = (int)bench_number("-i", optarg, 1, 1000000);
            break;
        case 'f':
            frac = bench_number("-f", optarg, 0.1, 0.99);
            break;
        default:
            fprintf(stderr, "usage: bench_yield [-n NPROC] [-i ITERS] [-f FRACTION] [-s]\n");
            return 2;
        }
    }
    cucache_api_t api;
    cucache_api(&api);
    size_t free_b, total;
    check(cudaMemGetInfo(&free_b, &total), "cudaMemGetInfo", 0);
    timed_alloc_us(512); /* the device's allocator exists from the first allocation on */
    api.empty(0);
    int npeers = nproc - 1;
    size_t x = (size_t)(frac * (double)total / npeers) / (2u << 20) * (2u << 20);
    peer_t peers[MAX_NEIGHBOURS];
    for (int i = 0; i < npeers; i++)
        spawn_peer(&peers[i], x, stall);

    double *yield_us = malloc((size_t)iters * sizeof *yield_us), *free_us = malloc((size_t)iters * sizeof *free_us);
    if (!yield_us || !free_us)
        bench_die("out of host memory");
    for (int i = 0; i < iters; i++) {
        tell_all(peers, npeers, CMD_FILL);
        int64_t before = yields_received(&api);
        if (stall)
            tell_all(peers, npeers, CMD_YIELDING);
        yield_us[i] = timed_alloc_us(x);
        if (stall)
            tell_all(peers, npeers, CMD_QUIET);
        if (yields_received(&api) != before + 1)
            bench_die("iteration %d: the allocation of %zu bytes was not served by a yield (num_yields_received "
                      "%lld -> %lld): is the device full, is CUCACHE_YIELD on?",
                      i, x, (long long)before, (long long)yields_received(&api));
        api.empty(0);
        tell_all(peers, npeers, CMD_EMPTY);
        free_us[i] = timed_alloc_us(x);
        api.empty(0);
    }
    /* -s: every neighbour's timings, weighted by their counts */
    double sn[2] = {0}, s50[2] = {0}, s99[2] = {0}, smax[2] = {0};
    for (int i = 0; i < npeers; i++) {
        char q = CMD_QUIT;
        io_byte(peers[i].to, &q, true);
        if (stall) {
            char line[256];
            size_t len = 0;
            while (len < sizeof line - 1) {
                io_byte(peers[i].from, &line[len], false);
                if (line[len++] == '\n')
                    break;
            }
            line[len] = 0;
            double v[8];
            if (sscanf(line, "%lf %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                       &v[7]) != 8)
                bench_die("a neighbour's timings: '%s'", line);
            for (int ph = 0; ph < 2; ph++) {
                double *w = &v[4 * ph];
                sn[ph] += w[0];
                s50[ph] += w[0] * w[1];
                s99[ph] = w[2] > s99[ph] ? w[2] : s99[ph];
                smax[ph] = w[3] > smax[ph] ? w[3] : smax[ph];
            }
        }
        waitpid(peers[i].pid, NULL, 0);
    }
    if (stall)
        printf("stall hit_us yielding n=%.0f p50=%.1f p99=%.1f max=%.1f quiet n=%.0f p50=%.1f p99=%.1f max=%.1f\n",
               sn[0], sn[0] ? s50[0] / sn[0] : 0, s99[0], smax[0], sn[1], sn[1] ? s50[1] / sn[1] : 0, s99[1],
               smax[1]);
    double y50 = bench_quantile(yield_us, (size_t)iters, 0.5), y99 = bench_quantile(yield_us, (size_t)iters, 0.99);
    double f50 = bench_quantile(free_us, (size_t)iters, 0.5), f99 = bench_quantile(free_us, (size_t)iters, 0.99);
    printf("result nproc=%d iters=%d bytes=%zu yield_p50_us=%.1f yield_p99_us=%.1f free_p50_us=%.1f "
           "free_p99_us=%.1f\n",
           nproc, iters, x, y50, y99, f50, f99);
    free(yield_us);
    free(free_us);
    return 0;
}
