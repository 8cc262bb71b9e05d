/*
 * Proves that every context the program creates (cuCtxCreate) is cached by
 * an allocator of its own: switching between contexts on one thread
 * (cuCtxSetCurrent, cuCtxPushCurrent, cuCtxPopCurrent) allocates each in
 * the current one's memory (CU_POINTER_ATTRIBUTE_CONTEXT) and hands a block
 * out again only in the context that freed it, whichever context freed it;
 * contexts on two devices keep their own memory, and a free from another
 * device's context finds its owner; stream-ordered allocation on a stream
 * of a context not current goes to that stream's context; cuMemGetInfo_v2
 * in a created context counts its own cache as free; destroying a context
 * with blocks still live gives all its memory back.  Reuse safety: a
 * block freed while its context's queued work (on the legacy stream, or
 * on a non-blocking stream of that context) still reads it is not handed
 * to a writer on the context's other stream before that work is done,
 * also when another context frees it; the race detector (fatal) judges,
 * under every safe reuse rule (meson runs the group under the default,
 * reuse:fenced and reuse:sync).
 *
 * Run as `caught` under reuse:stream with the detector not fatal, the
 * hazard tests of one context must see a race on the freed block instead:
 * the proof that they can fail.  (A free from another context waits for
 * its owner's fence under every rule, reuse:stream's too: state.c's
 * hook_free_any.)  Seen to fail: without LD_PRELOAD every
 * allocator check fails; with ctx_devs.c's hook_ctx_dev answering NULL
 * the context and cache checks fail.
 */
#include "itest.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cusim/sim.h"

static bool caught_mode;

/* Fails unless p's memory belongs to c (CU_POINTER_ATTRIBUTE_CONTEXT).
 * Expandable segments are virtual memory, which belongs to no context:
 * nothing to check there. */
static void expect_ctx(CUdeviceptr p, CUcontext c)
{
    if (itest_expandable())
        return;
    CUcontext got = NULL;
    CU_OK(cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_CONTEXT, p));
    assert_ptr_equal(got, c);
}

/* The device allocations since allocs0 are k segments.  Expandable
 * segments are mapped page by page (a device allocation each): their
 * count is the pages', not checked here. */
static void expect_new_segments(unsigned long allocs0, unsigned long k)
{
    if (!itest_expandable())
        assert_int_equal(itest_dev_allocs(), allocs0 + k);
}

static int ordinal_of(CUdeviceptr p)
{
    int o = -1;
    CU_OK(cuPointerGetAttribute(&o, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    return o;
}

static CUcontext create(int ordinal)
{
    CUdevice dev;
    CUcontext c = NULL;
    CU_OK(cuDeviceGet(&dev, ordinal));
    CU_OK(cuCtxCreate_v2(&c, 0, dev));
    return c;
}

static void destroy(CUcontext c)
{
    CUcontext cur = NULL, popped;
    CU_OK(cuCtxGetCurrent(&cur));
    if (cur == c)
        CU_OK(cuCtxPopCurrent_v2(&popped));
    CU_OK(cuCtxDestroy_v2(c));
}

/* ---- allocators of their own ----------------------------------------- */

static void test_switching_contexts_on_one_thread(void **state)
{
    (void)state;
    itest_require_cucache();
    const size_t n = 3 * MIB;
    unsigned long allocs_start = itest_dev_allocs(), frees_start = itest_dev_frees();
    CUcontext a = create(0);
    CUdeviceptr x, y, z, w, v;
    CU_OK(cuMemAlloc_v2(&x, n));
    expect_ctx(x, a);
    CU_OK(cuMemFree_v2(x));
    CU_OK(cuCtxSynchronize());

    CUcontext b = create(0); /* pushed over a */
    unsigned long allocs0 = itest_dev_allocs();
    CU_OK(cuMemAlloc_v2(&y, n));
    assert_true(y != x);
    expect_ctx(y, b);
    expect_new_segments(allocs0, 1); /* b's own segment */

    CU_OK(cuCtxSetCurrent(a)); /* the stack's top is a now */
    CU_OK(cuMemAlloc_v2(&z, n));
    assert_true(z == x); /* a's cached block */
    expect_new_segments(allocs0, 1);

    CU_OK(cuCtxPushCurrent_v2(b));
    CU_OK(cuMemFree_v2(z)); /* a's pointer, freed while b is current: back to a */
    CU_OK(cuCtxSynchronize());
    CU_OK(cuMemAlloc_v2(&w, n));
    assert_true(w != z && w != y);
    expect_ctx(w, b);
    CU_OK(cuMemFree_v2(w));
    CU_OK(cuMemFree_v2(y));

    CUcontext popped;
    CU_OK(cuCtxPopCurrent_v2(&popped));
    assert_ptr_equal(popped, b);
    CU_OK(cuCtxSynchronize());
    CU_OK(cuMemAlloc_v2(&v, n));
    assert_true(v == x); /* a's block, never b's */
    CU_OK(cuMemFree_v2(v));

    destroy(a); /* current: popped first, then b is current */
    destroy(b);
    assert_int_equal(itest_dev_frees() - frees_start, itest_dev_allocs() - allocs_start);
}

static void test_contexts_on_two_devices(void **state)
{
    (void)state;
    itest_require_cucache();
    const size_t n = 5 * MIB;
    CUcontext c0 = create(0);
    CUcontext c1 = create(1);
    unsigned long allocs0 = itest_dev_allocs(), frees0 = itest_dev_frees();
    CUdeviceptr p, q, r;
    CU_OK(cuMemAlloc_v2(&p, n));
    assert_int_equal(ordinal_of(p), 1);
    expect_ctx(p, c1);
    CU_OK(cuMemFree_v2(p));
    CU_OK(cuCtxSynchronize());
    CU_OK(cuMemAlloc_v2(&q, n));
    assert_true(q == p);
    expect_new_segments(allocs0, 1);

    CU_OK(cuCtxSetCurrent(c0));
    CU_OK(cuMemFree_v2(q)); /* device 1's block freed in device 0's context */
    assert_int_equal(itest_dev_frees(), frees0);
    CU_OK(cuMemAlloc_v2(&r, n));
    assert_int_equal(ordinal_of(r), 0);
    expect_ctx(r, c0);
    assert_true(r != q);
    CU_OK(cuMemFree_v2(r));
    CUcontext popped;
    CU_OK(cuCtxPopCurrent_v2(&popped)); /* c0 (set over c1), then c0 below */
    CU_OK(cuCtxDestroy_v2(c1));
    CU_OK(cuCtxDestroy_v2(c0));
    assert_int_equal(itest_dev_frees() - frees0, itest_dev_allocs() - allocs0);
}

static void test_stream_ordered_on_another_contexts_stream(void **state)
{
    (void)state;
    itest_require_cucache();
    const size_t n = 2 * MIB;
    CUcontext a = create(0);
    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUcontext b = create(0);
    CUdeviceptr p, q;
    CU_OK(cuMemAllocAsync(&p, n, s)); /* b is current; s is a's */
    expect_ctx(p, a);
    CU_OK(cuMemFreeAsync(p, s));
    CU_OK(cuMemAllocAsync(&q, n, s));
    assert_true(q == p); /* the same stream of the same context: reused at once */
    CU_OK(cuMemFreeAsync(q, s));
    CU_OK(cuStreamSynchronize(s));
    destroy(b);
    CU_OK(cuStreamDestroy_v2(s));
    destroy(a);
}

static void test_meminfo_counts_the_contexts_cache(void **state)
{
    (void)state;
    itest_require_cucache();
    const size_t n = 64 * MIB;
    CUcontext c = create(0);
    size_t f0, t0, f1, t1;
    CU_OK(cuMemGetInfo_v2(&f0, &t0));
    CUdeviceptr p;
    CU_OK(cuMemAlloc_v2(&p, n));
    CU_OK(cuMemFree_v2(p));
    CU_OK(cuCtxSynchronize());
    CU_OK(cuMemGetInfo_v2(&f1, &t1)); /* the segment is cached, and counted as free */
    assert_int_equal(t1, t0);
    assert_true(f1 + 2 * MIB >= f0);
    destroy(c);
}

static void test_destroy_gives_live_memory_back(void **state)
{
    (void)state;
    itest_require_cucache();
    unsigned long allocs0 = itest_dev_allocs(), frees0 = itest_dev_frees();
    CUcontext c = create(0);
    CUdeviceptr live, freed;
    CU_OK(cuMemAlloc_v2(&live, 30 * MIB));
    CU_OK(cuMemAlloc_v2(&freed, 100 * KIB));
    CU_OK(cuMemFree_v2(freed));
    assert_true(itest_dev_allocs() > allocs0);
    destroy(c);
    assert_int_equal(itest_dev_frees() - frees0, itest_dev_allocs() - allocs0);
}

/* Slots are reused: contexts created and destroyed one after another are
 * each cached.  At most 64 have an allocator at once (interpose/hook.h,
 * HOOK_MAX_CONTEXTS): the 65th is warned about once and passes through,
 * and works. */
static void test_contexts_beyond_the_table(void **state)
{
    (void)state;
    enum { SERIAL = 100, TABLE = 64 };
    itest_require_cucache();
    int64_t cached0 = itest_stat(0, "contexts_cached");
    for (int i = 0; i < SERIAL; i++) {
        CUcontext c = create(0);
        CUdeviceptr p;
        CU_OK(cuMemAlloc_v2(&p, 4 * KIB));
        CU_OK(cuMemFree_v2(p));
        destroy(c);
    }
    assert_int_equal(itest_stat(0, "contexts_cached"), cached0 + SERIAL);

    CUcontext held[TABLE + 1];
    for (int i = 0; i < TABLE; i++) {
        held[i] = create(0);
        CUcontext popped;
        CU_OK(cuCtxPopCurrent_v2(&popped));
    }
    static char err[4096];
    itest_stderr_begin();
    held[TABLE] = create(0);
    itest_stderr_end(err, sizeof err);
    if (itest_count_lines(err, "cucache: 64 created contexts already have an allocator") != 1) {
        print_error("the context over the table was not warned about once:\n%s\n", err);
        fail();
    }
    unsigned long allocs0 = itest_dev_allocs(), frees0 = itest_dev_frees();
    CUdeviceptr p;
    CU_OK(cuMemAlloc_v2(&p, 4 * KIB)); /* to the driver */
    CU_OK(cuMemFree_v2(p));
    assert_int_equal(itest_dev_allocs(), allocs0 + 1);
    assert_int_equal(itest_dev_frees(), frees0 + 1);
    destroy(held[TABLE]);
    for (int i = 0; i < TABLE; i++)
        CU_OK(cuCtxDestroy_v2(held[i]));
}

/* Threads at once: each of four pushes one of two shared contexts in
 * turn, allocates blocks of mixed sizes, writes and reads them back, frees
 * them; a fifth creates and destroys contexts of its own meanwhile (the
 * table changing under the others).  Every block holds its data, and lies
 * in the memory of the context current at its allocation.  The threads
 * report their first failure as text (cmocka asserts on the test's own
 * thread only). */
typedef struct worker_s {
    CUcontext ctx[2];
    int id;
    char failed[256]; /* empty: every check passed */
} worker_t;

enum { WORKER_ROUNDS = 40, CHURN_CONTEXTS = 20 };

#define WORKER_CHECK(w, cond)                                                                                          \
    do {                                                                                                               \
        if (!(cond) && !(w)->failed[0])                                                                                \
            snprintf((w)->failed, sizeof(w)->failed, "thread %d, line %d: %s", (w)->id, __LINE__, #cond);              \
    } while (0)

/* Whether p's memory belongs to c (any answer under expandable segments:
 * virtual memory belongs to no context). */
static bool in_ctx(CUdeviceptr p, CUcontext c)
{
    CUcontext got = NULL;
    return itest_expandable() ||
           (cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_CONTEXT, p) == CUDA_SUCCESS && got == c);
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    unsigned char *h = malloc(2 * MIB), *back = malloc(2 * MIB);
    WORKER_CHECK(w, h && back);
    for (int r = 0; r < WORKER_ROUNDS && !w->failed[0]; r++) {
        CUcontext c = w->ctx[(r + w->id) % 2], popped = NULL;
        size_t n = ((size_t)(r * 7 + w->id * 13) % 16 + 1) * 128 * KIB;
        unsigned seed = (unsigned)(w->id * 1000 + r);
        CUdeviceptr p = 0;
        WORKER_CHECK(w, cuCtxPushCurrent_v2(c) == CUDA_SUCCESS);
        WORKER_CHECK(w, cuMemAlloc_v2(&p, n) == CUDA_SUCCESS);
        WORKER_CHECK(w, in_ctx(p, c));
        simtest_fill(h, n, seed);
        WORKER_CHECK(w, cuMemcpyHtoD_v2(p, h, n) == CUDA_SUCCESS);
        WORKER_CHECK(w, cuMemcpyDtoH_v2(back, p, n) == CUDA_SUCCESS);
        WORKER_CHECK(w, simtest_check(back, n, seed, 0) == -1);
        WORKER_CHECK(w, cuMemFree_v2(p) == CUDA_SUCCESS);
        WORKER_CHECK(w, cuCtxPopCurrent_v2(&popped) == CUDA_SUCCESS && popped == c);
    }
    free(h);
    free(back);
    return NULL;
}

static void *churner(void *arg)
{
    worker_t *w = arg;
    CUdevice dev;
    WORKER_CHECK(w, cuDeviceGet(&dev, 0) == CUDA_SUCCESS);
    for (int i = 0; i < CHURN_CONTEXTS && !w->failed[0]; i++) {
        CUcontext c = NULL, popped = NULL;
        CUdeviceptr p = 0;
        WORKER_CHECK(w, cuCtxCreate_v2(&c, 0, dev) == CUDA_SUCCESS);
        WORKER_CHECK(w, cuMemAlloc_v2(&p, 64 * KIB) == CUDA_SUCCESS);
        WORKER_CHECK(w, in_ctx(p, c));
        WORKER_CHECK(w, cuMemFree_v2(p) == CUDA_SUCCESS);
        WORKER_CHECK(w, cuCtxPopCurrent_v2(&popped) == CUDA_SUCCESS && popped == c);
        WORKER_CHECK(w, cuCtxDestroy_v2(c) == CUDA_SUCCESS);
    }
    return NULL;
}

static void test_threads_in_shared_contexts(void **state)
{
    (void)state;
    itest_require_cucache();
    enum { WORKERS = 4 };
    CUcontext ctx[2], popped;
    for (int i = 0; i < 2; i++) {
        ctx[i] = create(i);
        CU_OK(cuCtxPopCurrent_v2(&popped)); /* floating: any thread pushes it */
    }
    worker_t w[WORKERS + 1];
    pthread_t t[WORKERS + 1];
    for (int i = 0; i <= WORKERS; i++) {
        w[i] = (worker_t){{ctx[0], ctx[1]}, i, ""};
        assert_int_equal(pthread_create(&t[i], NULL, i < WORKERS ? worker : churner, &w[i]), 0);
    }
    for (int i = 0; i <= WORKERS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i <= WORKERS; i++)
        if (w[i].failed[0])
            fail_msg("%s", w[i].failed);
    for (int i = 0; i < 2; i++)
        CU_OK(cuCtxDestroy_v2(ctx[i]));
}

/* ---- reuse safety ------------------------------------------------------ */

/* A reader on one stream of a created context (held behind a gate) still
 * uses x when it is freed (in that context, or in another created one);
 * a block of the same size is then allocated there and written on the
 * context's other stream.  Safe rules: no race (fatal).  caught: the
 * unsafe rule hands x out and the detector sees the write. */
static void hazard(bool reader_on_legacy, bool free_elsewhere)
{
    const size_t n = 4 * MIB;
    CUcontext other = free_elsewhere ? create(0) : NULL;
    CUcontext c = create(0);
    CUstream ns;
    CU_OK(cuStreamCreate(&ns, CU_STREAM_NON_BLOCKING));
    CUstream rs = reader_on_legacy ? CU_STREAM_LEGACY : ns, ws = reader_on_legacy ? ns : CU_STREAM_LEGACY;
    CUdeviceptr x, y;
    CU_OK(cuMemAlloc_v2(&x, n));
    CU_OK(cuMemsetD8_v2(x, 1, n));
    CU_OK(cuCtxSynchronize());
    simtest_gate_t *g = simtest_gate_new();
    CU_OK(cuLaunchHostFunc(rs, simtest_gate_fn, g));
    struct cucache_sim_access acc = {(const void *)(uintptr_t)x, n, 0};
    CU_OK(cucacheSimLaunch(rs, NULL, NULL, &acc, 1));
    simtest_gate_open_after(g, 300); /* reuse:sync's free waits for the reader */
    unsigned long races0 = itest_races();
    if (free_elsewhere) {
        CUcontext popped;
        CU_OK(cuCtxPushCurrent_v2(other));
        CU_OK(cuMemFree_v2(x));
        CU_OK(cuCtxPopCurrent_v2(&popped));
    } else {
        CU_OK(cuMemFree_v2(x));
    }
    CU_OK(cuMemAlloc_v2(&y, n));
    CU_OK(cuMemsetD8Async(y, 2, n, ws));
    CU_OK(cuCtxSynchronize());
    if (caught_mode && !free_elsewhere) {
        assert_true(y == x);
        assert_true(itest_races() > races0);
        cucacheSimRaceReset();
    }
    CU_OK(cuMemFree_v2(y));
    CU_OK(cuStreamDestroy_v2(ns));
    destroy(c);
    if (other)
        CU_OK(cuCtxDestroy_v2(other));
}

static void test_reader_on_the_legacy_stream(void **state)
{
    (void)state;
    hazard(true, false);
}

static void test_reader_on_a_nonblocking_stream(void **state)
{
    (void)state;
    hazard(false, false);
}

static void test_freed_from_another_context(void **state)
{
    (void)state;
    hazard(true, true);
}

static int caught_teardown(void **state)
{
    return simtest_teardown(state);
}

static int contexts_setup(void **state)
{
    return itest_group_setup_devices(state, 2);
}

#define CAUGHT(f) cmocka_unit_test_setup_teardown(f, itest_setup, caught_teardown)

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "caught") == 0) {
        caught_mode = true;
        const struct CMUnitTest caught[] = {
            CAUGHT(test_reader_on_the_legacy_stream),
            CAUGHT(test_reader_on_a_nonblocking_stream),
        };
        return ITEST_RUN("interpose.contexts.caught", caught, contexts_setup);
    }
    const struct CMUnitTest tests[] = {
        ITEST(test_switching_contexts_on_one_thread),
        ITEST(test_contexts_on_two_devices),
        ITEST(test_stream_ordered_on_another_contexts_stream),
        ITEST(test_meminfo_counts_the_contexts_cache),
        ITEST(test_destroy_gives_live_memory_back),
        ITEST(test_threads_in_shared_contexts),
        ITEST(test_reader_on_the_legacy_stream),
        ITEST(test_reader_on_a_nonblocking_stream),
        ITEST(test_freed_from_another_context),
        /* last: failing, it may leave the table full for the tests after it */
        ITEST(test_contexts_beyond_the_table),
    };
    return ITEST_RUN("interpose.contexts", tests, contexts_setup);
}
