/*
 * A small CUDA program that the interpose tests run as a child process (and
 * meson runs directly), to prove what only a whole process shows: that it
 * exits cleanly with device memory still allocated, cached and queued, and
 * how it starts under a given CUCACHE_CONF.
 *
 *   itest_child alloc        prints "itest_child: main", allocates, writes,
 *                            reads back and frees, prints "itest_child: done"
 *   itest_child live         leaves cached, live and stream-ordered memory and
 *                            queued work behind and returns from main
 *   itest_child live-exit    the same, then exit(0) from main
 *   itest_child live-thread  the same, then exit(0) from a second thread while
 *                            the main thread keeps allocating and freeing
 *   itest_child leak N MB    N steps of a 3 MiB temporary (freed) and a 3 MiB
 *                            buffer kept, then cudaMalloc of MB MiB: exit 0
 *                            when it is served, 3 when it fails (the leak
 *                            loop: the freed temporaries sit cached between
 *                            the kept buffers, none large enough; for the
 *                            OOM hint)
 *   itest_child split        a 600 MiB buffer freed, then ten 30 MiB ones
 *                            (every other one freed), then 700 MiB: exit 0
 *                            when served, 3 when not (on a 1 GiB device the
 *                            30 MiB ones split the cached 600 MiB block
 *                            under the defaults; max_split_size_mb keeps it
 *                            whole, and releasable)
 *
 * The live modes need cucache (they check that it holds the memory) and exit
 * 2 when its API is absent.  Exit 0: every check passed; 1: a check failed.
 */
#include "cusim/cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        cudaError_t rc_ = (call);                                                                                      \
        if (rc_ != cudaSuccess) {                                                                                      \
            fprintf(stderr, "itest_child: %s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)rc_);                    \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

static unsigned char byte_of(size_t i, unsigned seed)
{
    return (unsigned char)(i * 131u + seed * 7u + (i >> 11));
}

static void put_and_check(void *d, size_t n, unsigned seed)
{
    unsigned char *h = malloc(n), *back = malloc(n);
    if (!h || !back)
        abort();
    for (size_t i = 0; i < n; i++)
        h[i] = byte_of(i, seed);
    memset(back, 0, n);
    CHECK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost));
    if (memcmp(h, back, n) != 0) {
        fprintf(stderr, "itest_child: data of %p differs\n", d);
        failures++;
    }
    free(h);
    free(back);
}

static int mode_alloc(void)
{
    printf("itest_child: main\n");
    fflush(stdout);
    void *p = NULL;
    CHECK(cudaMalloc(&p, 1 << 20));
    if (p)
        put_and_check(p, 1 << 20, 1);
    CHECK(cudaFree(p));
    printf("itest_child: done\n");
    fflush(stdout);
    return failures ? 1 : 0;
}

typedef int (*stat_fn)(int, const char *, int64_t *);

static int64_t stat_of(stat_fn f, const char *key)
{
    int64_t v = -1;
    if (f(0, key, &v) != 0) {
        fprintf(stderr, "itest_child: cucache_stat(0, %s) failed\n", key);
        failures++;
    }
    return v;
}

static void *churn(void *arg)
{
    (void)arg;
    for (;;) {
        void *p = NULL;
        if (cudaMalloc(&p, 4096 + (size_t)(rand() % 100000)) == cudaSuccess)
            cudaFree(p);
    }
    return NULL;
}

/* Leaves memory in every state cucache knows, and checks that cucache holds
 * it; exits 2 when cucache is not preloaded. */
static void leave_memory_behind(void)
{
    stat_fn stat = (stat_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "cucache_stat");
    if (!stat) {
        fprintf(stderr, "itest_child: cucache is not preloaded (no cucache_stat)\n");
        exit(2);
    }
    static const size_t sizes[] = {512, 70000, 1 << 20, 3 << 20, 25 << 20};
    void *live[5], *cached[5];
    for (int i = 0; i < 5; i++) {
        CHECK(cudaMalloc(&live[i], sizes[i]));
        CHECK(cudaMalloc(&cached[i], sizes[i]));
        put_and_check(live[i], sizes[i], (unsigned)i);
    }
    for (int i = 0; i < 5; i++)
        CHECK(cudaFree(cached[i])); /* pending behind a fence, then cached */
    cudaStream_t s = NULL, t = NULL;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreate(&t));
    void *a = NULL, *b = NULL;
    CHECK(cudaMallocAsync(&a, 5 << 20, s));
    CHECK(cudaMallocAsync(&b, 100000, t));
    CHECK(cudaMemsetAsync(a, 0x11, 5 << 20, s));
    CHECK(cudaFreeAsync(b, t));
    CHECK(cudaMemsetAsync(live[4], 0x22, 25 << 20, t)); /* maybe still queued at exit */
    if (stat_of(stat, "allocation.all.current") < 6) {
        fprintf(stderr, "itest_child: cucache does not count the live allocations\n");
        failures++;
    }
    if (stat_of(stat, "reserved_bytes.all.current") < (int64_t)(25 << 20)) {
        fprintf(stderr, "itest_child: cucache holds less than the live memory\n");
        failures++;
    }
    /* the streams stay alive: exit with them */
}

static int mode_leak(int steps, size_t last_mb)
{
    for (int i = 0; i < steps; i++) {
        void *t = NULL, *k = NULL;
        CHECK(cudaMalloc(&t, 3 << 20));
        CHECK(cudaMalloc(&k, 3 << 20));
        CHECK(cudaFree(t));
    }
    if (failures)
        return 1;
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, last_mb << 20);
    printf("itest_child: leak: cudaMalloc(%zu MiB) after %d steps: %s\n", last_mb, steps,
           rc == cudaSuccess ? "served" : "failed");
    return rc == cudaSuccess ? 0 : 3;
}

/* leak-late: 5 MiB kept, 1.2 s later 7 MiB kept (the exit leak report's
 * times). */
static int mode_leak_late(void)
{
    void *a = NULL, *b = NULL;
    CHECK(cudaMalloc(&a, 5 << 20));
    usleep(1200 * 1000);
    CHECK(cudaMalloc(&b, 7 << 20));
    return failures ? 1 : 0;
}

static int mode_split(void)
{
    void *big = NULL, *p[10] = {0};
    CHECK(cudaMalloc(&big, (size_t)600 << 20));
    CHECK(cudaFree(big));
    for (int i = 0; i < 10; i++)
        CHECK(cudaMalloc(&p[i], (size_t)30 << 20));
    for (int i = 0; i < 10; i += 2)
        CHECK(cudaFree(p[i]));
    if (failures)
        return 1;
    void *last = NULL;
    cudaError_t rc = cudaMalloc(&last, (size_t)700 << 20);
    printf("itest_child: split: cudaMalloc(700 MiB): %s\n", rc == cudaSuccess ? "served" : "failed");
    return rc == cudaSuccess ? 0 : 3;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "alloc";
    if (strcmp(mode, "leak") == 0 && argc == 4)
        return mode_leak(atoi(argv[2]), (size_t)strtoull(argv[3], NULL, 10));
    if (strcmp(mode, "split") == 0)
        return mode_split();
    if (strcmp(mode, "leak-late") == 0)
        return mode_leak_late();
    if (strcmp(mode, "alloc") == 0)
        return mode_alloc();
    if (strcmp(mode, "live") == 0) {
        leave_memory_behind();
        return failures ? 1 : 0;
    }
    if (strcmp(mode, "live-exit") == 0) {
        leave_memory_behind();
        exit(failures ? 1 : 0);
    }
    if (strcmp(mode, "live-thread") == 0) {
        leave_memory_behind();
        if (failures)
            return 1;
        pthread_t th;
        if (pthread_create(&th, NULL, churn, NULL) != 0)
            return 1;
        usleep(20000);
        exit(0); /* while the other thread is anywhere in cudaMalloc/cudaFree */
    }
    fprintf(stderr, "itest_child: unknown mode %s\n", mode);
    return 1;
}
