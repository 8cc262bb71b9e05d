/*
 * Proves PyTorch's pluggable allocator entry points (interpose/torch_alloc.c)
 * called exactly as torch.cuda.memory.CUDAPluggableAllocator calls them:
 * found by name in the library (dlsym), alloc(size, device, stream) and
 * free(ptr, size, device, stream), on two devices (CUCACHE_SIM_DEVICES=2)
 * and from two threads at once.  PyTorch's stream semantics: a block freed
 * on its own stream is reusable at once there and never on another stream;
 * a block record_stream marked as used on a second stream is not handed
 * out again while that stream's work is still queued (a host function
 * holds the stream); memory lands on the device asked for, holds its data,
 * and an allocation beyond the device returns NULL with cucache's report
 * (a C program: no C++ library to throw through; test_torch_oom.cpp proves
 * the throw PyTorch gets).
 * A sequence of allocations and frees on two streams gives every statistic
 * the same value through these entry points as through the preload's
 * cudaMallocAsync/cudaFreeAsync, which have the same stream semantics.
 *
 * Seen to fail: with cucache_torch_free ordering frees by the fence
 * instead of the block's stream, the "reusable at once" check fails; with
 * record_stream ignored, the held-stream check fails; with frees behind
 * the fence, the statistics differ (22 segments against 6, ...).
 */
#include "itest.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void *(*malloc_fn)(size_t, int, cudaStream_t);
typedef void (*free_fn)(void *, size_t, int, cudaStream_t);
typedef void (*record_fn)(void *, cudaStream_t);
typedef void (*fraction_fn)(double, int);

static malloc_fn t_malloc;
static free_fn t_free;
static record_fn t_record;
static fraction_fn t_fraction;

static int torch_setup(void **state)
{
    if (itest_group_setup_devices(state, 2) != 0)
        return -1;
    t_malloc = (malloc_fn)dlsym(RTLD_DEFAULT, "cucache_torch_malloc");
    t_free = (free_fn)dlsym(RTLD_DEFAULT, "cucache_torch_free");
    t_record = (record_fn)dlsym(RTLD_DEFAULT, "cucache_torch_record_stream");
    t_fraction = (fraction_fn)dlsym(RTLD_DEFAULT, "cucache_torch_memory_fraction");
    return 0;
}

static void need_entry_points(void)
{
    itest_require_cucache();
    assert_non_null(t_malloc);
    assert_non_null(t_free);
    assert_non_null(t_record);
    assert_non_null(t_fraction);
}

static cudaStream_t new_stream(int device)
{
    cudaStream_t s;
    SIM_OK(cudaSetDevice(device));
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return itest_defer_stream(s);
}

static int device_of(const void *p)
{
    struct cudaPointerAttributes a;
    a.device = -1;
    SIM_OK(cudaPointerGetAttributes(&a, p));
    return a.device;
}

static void test_stream_semantics(void **state)
{
    (void)state;
    need_entry_points();
    cudaStream_t s1 = new_stream(0), s2 = new_stream(0);
    void *p = t_malloc(8 * MIB, 0, s1);
    assert_non_null(p);
    assert_int_equal(device_of(p), 0);
    itest_put(p, 8 * MIB, 3);
    itest_expect(p, 8 * MIB, 3);
    t_free(p, 8 * MIB, 0, s1);
    /* reusable at once on its own stream, as PyTorch's allocator */
    void *again = t_malloc(8 * MIB, 0, s1);
    assert_ptr_equal(again, p);
    t_free(again, 8 * MIB, 0, s1);
    /* never on another stream */
    void *other = t_malloc(8 * MIB, 0, s2);
    assert_non_null(other);
    assert_ptr_not_equal(other, p);
    t_free(other, 8 * MIB, 0, s2);
    SIM_OK(cudaDeviceSynchronize());
}

static atomic_int gate;

/* Holds its stream until the test opens the gate, or 5 s at most (a
 * failed assertion leaves the gate shut; the stream must still drain). */
static void hold(void *arg)
{
    (void)arg;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while (!atomic_load(&gate) && t.tv_sec - t0.tv_sec < 5);
}

static void test_record_stream_waits_for_the_other_stream(void **state)
{
    (void)state;
    need_entry_points();
    cudaStream_t s1 = new_stream(0), s2 = new_stream(0);
    atomic_store(&gate, 0);
    SIM_OK(cudaLaunchHostFunc(s2, hold, NULL)); /* s2's work stays queued */
    void *p = t_malloc(6 * MIB, 0, s1);
    assert_non_null(p);
    t_record(p, s2);
    t_free(p, 6 * MIB, 0, s1);
    for (int i = 0; i < 20; i++) { /* polls cannot complete s2's fence */
        void *q = t_malloc(6 * MIB, 0, s1);
        assert_non_null(q);
        if (q == p) {
            /* reuse:ordered handed it out (with expandable segments the
             * cache is small, so p's 6 MiB are a share of it): s1 waits on
             * the device for s2's queued work */
            assert_true(itest_hands_out());
            SIM_OK(cudaMemsetAsync(q, 1, 4096, s1));
            assert_int_equal(cudaStreamQuery(s1), cudaErrorNotReady);
        }
        t_free(q, 6 * MIB, 0, s1);
    }
    atomic_store(&gate, 1);
    SIM_OK(cudaStreamSynchronize(s2));
    SIM_OK(cudaDeviceSynchronize());
}

static void test_two_devices(void **state)
{
    (void)state;
    need_entry_points();
    cudaStream_t s0 = new_stream(0), s1 = new_stream(1);
    SIM_OK(cudaSetDevice(0));
    int64_t before = itest_stat(1, "allocation.all.current");
    void *a = t_malloc(4 * MIB, 1, s1); /* device 1 while device 0 is current */
    void *b = t_malloc(4 * MIB, 0, s0);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(device_of(a), 1);
    assert_int_equal(device_of(b), 0);
    assert_int_equal(itest_stat(1, "allocation.all.current"), before + 1);
    SIM_OK(cudaSetDevice(1));
    itest_put(a, 4 * MIB, 7);
    itest_expect(a, 4 * MIB, 7);
    SIM_OK(cudaSetDevice(0));
    t_free(a, 4 * MIB, 1, s1);
    t_free(b, 4 * MIB, 0, s0);
    assert_int_equal(itest_stat(1, "allocation.all.current"), before);
}

typedef struct worker_s {
    int device;
    cudaStream_t s;
    int failures;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    if (cudaSetDevice(w->device) != cudaSuccess)
        w->failures++;
    for (int i = 0; i < 200 && !w->failures; i++) {
        size_t n = (size_t)(1 + i % 7) * 512 * KIB;
        unsigned char *p = t_malloc(n, w->device, w->s);
        unsigned char v = (unsigned char)(i + w->device * 31), back[64];
        if (!p || cudaMemsetAsync(p, v, n, w->s) != cudaSuccess ||
            cudaMemcpyAsync(back, p + n - sizeof back, sizeof back, cudaMemcpyDeviceToHost, w->s) != cudaSuccess ||
            cudaStreamSynchronize(w->s) != cudaSuccess) {
            w->failures++;
            break;
        }
        for (size_t k = 0; k < sizeof back; k++)
            w->failures += back[k] != v;
        t_free(p, n, w->device, w->s);
    }
    return NULL;
}

static void test_two_threads(void **state)
{
    (void)state;
    need_entry_points();
    worker_t w[2] = {{0, new_stream(0), 0}, {1, new_stream(1), 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    assert_int_equal(itest_races(), 0);
    SIM_OK(cudaSetDevice(0));
}

/* A failed allocation returns NULL only where there is no libstdc++ to
 * throw through.  A sanitizer's runtime loads one into this C program: the
 * throw, which nothing here could catch, is test_torch_oom.cpp's to test,
 * and the cases that fail an allocation skip. */
static void skip_where_failures_throw(void)
{
    void *cxx = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (cxx) {
        dlclose(cxx);
        skip();
    }
}

static void test_out_of_memory_returns_null(void **state)
{
    (void)state;
    need_entry_points();
    skip_where_failures_throw();
    cudaStream_t s = new_stream(0);
    char err[8192];
    itest_stderr_begin();
    void *p = t_malloc(64 * GIB, 0, s);
    itest_stderr_end(err, sizeof err);
    assert_null(p);
    if (!strstr(err, "CUDA out of memory. Tried to allocate 64.00 GiB"))
        fail_msg("no OOM report:\n%s", err);
    t_free(NULL, 0, 0, s); /* PyTorch may free what it never got: nothing happens */
}

/* memory_fraction(fraction, device): a quarter of the 1 GiB device refuses
 * 300 MiB while the device has all of it free (the OOM test before made
 * this the process's second failure: one line); back to 1, it is served. */
static void test_memory_fraction(void **state)
{
    (void)state;
    need_entry_points();
    skip_where_failures_throw();
    cudaStream_t s = new_stream(1);
    t_fraction(0.25, 1);
    char err[8192];
    itest_stderr_begin();
    void *p = t_malloc(300 * MIB, 1, s);
    itest_stderr_end(err, sizeof err);
    assert_null(p);
    if (!strstr(err, "tried to allocate 300.00 MiB (300.00 MiB requested) on GPU 1; 1024.00 MiB free of 1024.00 MiB"))
        fail_msg("refused with the device free (the fraction's limit):\n%s", err);
    t_fraction(1.0, 1);
    p = t_malloc(300 * MIB, 1, s);
    assert_non_null(p);
    t_free(p, 300 * MIB, 1, s);
    itest_stderr_begin();
    t_fraction(1.5, 1); /* out of range: refused, said, nothing changed */
    itest_stderr_end(err, sizeof err);
    assert_non_null(strstr(err, "cucache_torch_memory_fraction(1.5, device 1): not set"));
    p = t_malloc(300 * MIB, 1, s);
    assert_non_null(p);
    t_free(p, 300 * MIB, 1, s);
    SIM_OK(cudaSetDevice(0));
}

/* ---- statistics: the same sequence through both paths ---------------- */

typedef struct stat_table_s {
    int n;
    char key[256][64];
    int64_t value[256];
} stat_table_t;

static void collect(void *ctx, const char *key, int64_t value)
{
    stat_table_t *t = ctx;
    if (t->n < 256) {
        snprintf(t->key[t->n], sizeof t->key[0], "%s", key);
        t->value[t->n++] = value;
    }
}

/* The device's statistics after one run of the sequence, from a clean
 * start: the cache emptied, peaks and totals reset. */
static void run_sequence(bool torch_path, stat_table_t *out)
{
    int (*reset_acc)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "cucache_reset_accumulated_stats");
    int (*reset_peak)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "cucache_reset_peak_stats");
    int (*foreach)(int, void (*)(void *, const char *, int64_t), void *) =
        (int (*)(int, void (*)(void *, const char *, int64_t), void *))dlsym(RTLD_DEFAULT, "cucache_stats_foreach");
    assert_true(reset_acc && reset_peak && foreach);
    cudaStream_t s[2] = {new_stream(0), new_stream(0)};
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(itest_empty_cache(0), 0);
    assert_int_equal(reset_acc(0), 0);
    assert_int_equal(reset_peak(0), 0);
    enum { SLOTS = 24, STEPS = 400 };
    void *live[SLOTS] = {0};
    size_t size[SLOTS] = {0};
    int on[SLOTS] = {0};
    unsigned seed = 12345;
    for (int step = 0; step < STEPS; step++) {
        seed = seed * 1103515245u + 12345u;
        int i = (int)((seed >> 8) % SLOTS);
        if (live[i]) {
            if (torch_path)
                t_free(live[i], size[i], 0, s[on[i]]);
            else
                SIM_OK(cudaFreeAsync(live[i], s[on[i]]));
            live[i] = NULL;
            continue;
        }
        size[i] = (size_t)512 << ((seed >> 16) % 15); /* 512 B - 8 MiB */
        size[i] += (seed >> 4) % 4096;
        on[i] = (int)((seed >> 24) & 1);
        if (torch_path)
            live[i] = t_malloc(size[i], 0, s[on[i]]);
        else
            SIM_OK(cudaMallocAsync(&live[i], size[i], s[on[i]]));
        assert_non_null(live[i]);
    }
    for (int i = 0; i < SLOTS; i++) {
        if (!live[i])
            continue;
        if (torch_path)
            t_free(live[i], size[i], 0, s[on[i]]);
        else
            SIM_OK(cudaFreeAsync(live[i], s[on[i]]));
    }
    memset(out, 0, sizeof(*out));
    assert_true(foreach (0, collect, out) > 0);
    SIM_OK(cudaDeviceSynchronize());
}

/* PyTorch's entry points and the preload's stream-ordered calls
 * (cudaMallocAsync/cudaFreeAsync: the same stream semantics) make the same
 * sequence give the same statistics, every key. */
static void test_statistics_equal_the_preload_path(void **state)
{
    (void)state;
    need_entry_points();
    static stat_table_t via_torch, via_preload;
    run_sequence(true, &via_torch);
    run_sequence(false, &via_preload);
    assert_int_equal(via_torch.n, via_preload.n);
    int differ = 0;
    for (int i = 0; i < via_torch.n; i++) {
        assert_string_equal(via_torch.key[i], via_preload.key[i]);
        if (via_torch.value[i] != via_preload.value[i]) {
            print_error("%s: %lld through cucache_torch_*, %lld through cudaMallocAsync\n", via_torch.key[i],
                        (long long)via_torch.value[i], (long long)via_preload.value[i]);
            differ++;
        }
    }
    assert_int_equal(differ, 0);
    int64_t allocs = 0;
    for (int i = 0; i < via_torch.n; i++)
        if (strcmp(via_torch.key[i], "allocation.all.allocated") == 0)
            allocs = via_torch.value[i];
    assert_true(allocs > 100); /* the sequence ran */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        ITEST(test_stream_semantics),
        ITEST(test_record_stream_waits_for_the_other_stream),
        ITEST(test_two_devices),
        ITEST(test_two_threads),
        ITEST(test_out_of_memory_returns_null),
        ITEST(test_memory_fraction),
        ITEST(test_statistics_equal_the_preload_path),
    };
    return ITEST_RUN("interpose.torch", tests, torch_setup);
}
