/*
 * Proves that a CUDA program built with the real toolkit (real
 * cuda_runtime_api.h, real libcudart.so at link time) and run on the
 * simulated runtime with cucache preloaded gets cucache's cudaMalloc: its
 * data holds at every size, malloc/free and cudaMallocAsync/cudaFreeAsync
 * loops are served from the cache (hits grow, the device's allocation count
 * stays flat), and cudaMemGetInfo counts the cache as free.  Built twice by
 * meson: plain, and with CUDA_API_PER_THREAD_DEFAULT_STREAM so that the real
 * header routes the calls to the _ptsz/_ptds entry points.  Exit 0 when
 * every check passes, 1 otherwise.
 *
 * Seen to fail: without LD_PRELOAD it exits 1 at "cucache is not preloaded".
 */
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)

static int failures;

#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        cudaError_t rc_ = (call);                                                                                      \
        if (rc_ != cudaSuccess) {                                                                                      \
            fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(rc_));                    \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

#define EXPECT(cond)                                                                                                   \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                                        \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

typedef int (*stat_fn)(int, const char *, int64_t *);
static stat_fn cucache_stat_p;
static unsigned long (*sim_allocs)(void);

static int64_t stat(const char *key)
{
    int64_t v = -1;
    if (cucache_stat_p(0, key, &v) != 0) {
        fprintf(stderr, "cucache_stat(0, %s) failed\n", key);
        failures++;
    }
    return v;
}

static unsigned char pattern(size_t i, unsigned seed)
{
    return (unsigned char)(i * 151u + seed * 13u + (i >> 10));
}

static void roundtrip(void *d, size_t n, unsigned seed)
{
    unsigned char *h = malloc(n), *back = malloc(n);
    if (!h || !back)
        abort();
    for (size_t i = 0; i < n; i++)
        h[i] = pattern(i, seed);
    memset(back, 0, n);
    CHECK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost));
    if (memcmp(h, back, n) != 0) {
        fprintf(stderr, "data of %p (%zu bytes) differs\n", d, n);
        failures++;
    }
    free(h);
    free(back);
}

int main(void)
{
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    EXPECT(count >= 1);
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    sim_allocs = drv ? (unsigned long (*)(void))(uintptr_t)dlsym(drv, "cucacheSimDeviceAllocs") : NULL;
    if (!sim_allocs) {
        fprintf(stderr, "not running on the simulated driver\n");
        return 1;
    }
    cucache_stat_p = (stat_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "cucache_stat");
    if (!cucache_stat_p) {
        fprintf(stderr, "cucache is not preloaded (no cucache_stat)\n");
        return 1;
    }
    Dl_info info;
    memset(&info, 0, sizeof info);
    EXPECT(dladdr((void *)(uintptr_t)&cudaMalloc, &info) != 0 && info.dli_fname &&
           strstr(info.dli_fname, "libcucache.so") != NULL);

    /* every size holds its data, all live at once */
    static const size_t sizes[] = {1, 511, 4096, 65537, MIB, 2 * MIB + 3, 21 * MIB, 64 * MIB};
    enum { N = sizeof sizes / sizeof sizes[0] };
    void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = NULL;
        CHECK(cudaMalloc(&p[i], sizes[i]));
        EXPECT(p[i] != NULL && (uintptr_t)p[i] % 256 == 0);
    }
    if (failures)
        return 1;
    for (int i = 0; i < N; i++)
        roundtrip(p[i], sizes[i], (unsigned)i);
    for (int i = 0; i < N; i++)
        CHECK(cudaFree(p[i]));
    CHECK(cudaDeviceSynchronize());

    /* a malloc/free loop is served from the cache */
    unsigned long a0 = sim_allocs();
    int64_t h0 = stat("num_cache_hits");
    for (int r = 0; r < 50; r++) {
        for (int i = 0; i < N; i++)
            CHECK(cudaMalloc(&p[i], sizes[i]));
        for (int i = 0; i < N; i++)
            CHECK(cudaFree(p[i]));
        CHECK(cudaDeviceSynchronize());
    }
    EXPECT(sim_allocs() == a0);
    EXPECT(stat("num_cache_hits") >= h0 + 50 * N);

    /* stream-ordered allocation: data, then a loop of hits */
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned char *hb = NULL;
    CHECK(cudaMallocHost((void **)&hb, MIB));
    void *a = NULL;
    CHECK(cudaMallocAsync(&a, 5 * MIB, s));
    CHECK(cudaMemsetAsync(a, 0x4E, 5 * MIB, s));
    CHECK(cudaMemcpyAsync(hb, a, MIB, cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(a, s));
    CHECK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < MIB; i++)
        if (hb[i] != 0x4E) {
            EXPECT(!"stream-ordered data");
            break;
        }
    CHECK(cudaMallocAsync(&a, MIB, 0)); /* warm up stream 0 as well */
    CHECK(cudaFreeAsync(a, 0));
    CHECK(cudaStreamSynchronize(0));
    a0 = sim_allocs();
    h0 = stat("num_cache_hits");
    for (int r = 0; r < 50; r++) {
        CHECK(cudaMallocAsync(&a, 5 * MIB, s));
        CHECK(cudaFreeAsync(a, s));
        CHECK(cudaMallocAsync(&a, MIB, 0)); /* per-thread in the _ptds build */
        CHECK(cudaFreeAsync(a, 0));
    }
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamSynchronize(0));
    EXPECT(sim_allocs() == a0);
    EXPECT(stat("num_cache_hits") >= h0 + 100);

    /* the cache counts as free */
    size_t f = 0, t = 0;
    CHECK(cudaMemGetInfo(&f, &t));
    EXPECT(stat("reserved_bytes.all.current") > 0);
    EXPECT(f + (size_t)stat("allocated_bytes.all.current") + 2 * MIB >= t);

    CHECK(cudaFreeHost(hb));
    CHECK(cudaStreamDestroy(s));
    if (failures) {
        fprintf(stderr, "interpose real_program: %d failures\n", failures);
        return 1;
    }
    printf("interpose real_program: all checks passed\n");
    return 0;
}
