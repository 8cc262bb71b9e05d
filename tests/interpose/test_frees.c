/*
 * Proves how cucache answers frees of memory it did not hand out or that is
 * no longer allocated: a pointer of a cuCtxCreate'd context goes back to
 * that context's own cache from whichever context frees it, never to the
 * primary context's, and is foreign once its context is destroyed;
 * pointers from cudaMallocFromPoolAsync (both kinds of pool) go to the real
 * free and succeed without a warning; memory freed by destroying its context is
 * forgotten (its address, reused by the device for cucache, is cucache's);
 * an interior pointer, a never-allocated address and a double free return
 * cudaErrorInvalidValue (CUDA_ERROR_INVALID_VALUE from cuMemFree_v2) with
 * exactly one stderr line starting with "cucache: ", a hundred of them give
 * far fewer than a hundred lines, and afterwards the cache still works: the
 * block survives with its data, a double-freed block is not handed out
 * twice, and the counts are unchanged.
 *
 * The warning lines are counted in child processes (this program run with
 * --child SCENARIO), so that each scenario starts with a fresh rate limit;
 * the child marks the start and end of the bad free on stderr.
 *
 * Seen to fail: without LD_PRELOAD the return codes still pass (they are the
 * simulated driver's own), and every warning and consistency check fails.
 */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MARK_BEGIN "itest-mark: begin"
#define MARK_END "itest-mark: end"

static int host_word; /* a host address no allocator knows */

/* ---- foreign pointers ------------------------------------------------ */

static void test_free_null(void **state)
{
    (void)state;
    SIM_OK(cudaFree(NULL));
    CU_OK(cuMemFree_v2(0));
    itest_require_cucache();
}

/* Memory of a created context is its own allocator's: freed in that
 * context or from the primary one (cudaFree, silently), it stays cached
 * there (no real free, no block for the primary context); the context's
 * destruction gives it back, and a free of its pointer afterwards gets
 * CUDA's own answer. */
static void test_created_context_pointer_goes_to_its_own_cache(void **state)
{
    (void)state;
    const size_t n = MIB + 100;
    CUdevice dev = 0;
    CUcontext primary = NULL, c = NULL, popped = NULL;
    CU_OK(cuDeviceGet(&dev, 0));
    CU_OK(cuCtxGetCurrent(&primary));
    assert_non_null(primary);
    int64_t live0 = itest_stat(0, "allocation.all.current");

    CU_OK(cuCtxCreate_v2(&c, 0, dev));
    CUdeviceptr x = 0, y = 0;
    CU_OK(cuMemAlloc_v2(&x, n));
    CU_OK(cuMemAlloc_v2(&y, n));
    CU_OK(cuMemsetD8_v2(x, 0x3C, n));
    unsigned char *h = malloc(n);
    assert_non_null(h);
    CU_OK(cuMemcpyDtoH_v2(h, x, n));
    assert_int_equal(simtest_check_byte(h, n, 0x3C), -1);
    /* freed in its own context: cached */
    unsigned long frees0 = itest_dev_frees();
    CU_OK(cuMemFree_v2(y));
    assert_int_equal(itest_dev_frees(), frees0);
    CU_OK(cuCtxPopCurrent_v2(&popped));
    assert_ptr_equal(popped, c);

    /* freed from the primary context, through the runtime, silently, to
     * its own context's cache */
    CUcontext cur = NULL;
    CU_OK(cuCtxGetCurrent(&cur));
    assert_ptr_equal(cur, primary);
    static char err[4096];
    itest_stderr_begin();
    cudaError_t rc = cudaFree((void *)(uintptr_t)x);
    itest_stderr_end(err, sizeof err);
    SIM_OK(rc);
    assert_int_equal(itest_dev_frees(), frees0);
    if (itest_count_lines(err, "cucache: ") != 0) {
        print_error("freeing another context's pointer warned:\n%s\n", err);
        fail();
    }
    assert_int_equal(itest_stat(0, "allocation.all.current"), live0);
    /* the primary context never gets those blocks */
    SIM_OK(cudaDeviceSynchronize());
    void *q = NULL;
    SIM_OK(cudaMalloc(&q, n));
    assert_true((CUdeviceptr)(uintptr_t)q != x && (CUdeviceptr)(uintptr_t)q != y);
    SIM_OK(cudaFree(q));

    CU_OK(cuCtxDestroy_v2(c));
    assert_true(itest_dev_frees() > frees0); /* its segments went back */
    itest_stderr_begin();
    CUresult r = cuMemFree_v2(x); /* foreign now: CUDA answers */
    itest_stderr_end(err, sizeof err);
    assert_int_equal(r, CUDA_ERROR_INVALID_VALUE);
    free(h);
    assert_int_equal(itest_stat(0, "allocation.all.current"), live0);
}

/* A created context destroyed with memory still allocated in it: the
 * driver frees that memory, and when the device later gives the same
 * address to cucache, cucache owns it like any other segment (it neither
 * hands the free to the real driver nor refuses it). */
static void test_destroyed_context_memory_is_forgotten(void **state)
{
    (void)state;
    enum { MAX = 48 };
    const size_t n = 24 * MIB;
    if (itest_expandable()) {
        /* its premise is a cudaMalloc segment at a recycled address */
        print_message("expandable segments: cucache's memory is virtual memory, never at x: nothing to prove\n");
        skip();
    }
    CUdevice dev = 0;
    CUcontext c = NULL, cur = NULL;
    CU_OK(cuDeviceGet(&dev, 0));
    CU_OK(cuCtxCreate_v2(&c, 0, dev));
    CUdeviceptr x = 0;
    CU_OK(cuMemAlloc_v2(&x, n));
    CU_OK(cuCtxDestroy_v2(c)); /* x is freed with its context */
    CU_OK(cuCtxGetCurrent(&cur));
    if (cur != NULL && cur == c) {
        print_error("the destroyed context is still current\n");
        fail();
    }
    SIM_OK(cudaFree(NULL));
    /* allocate until the device hands out x's address again */
    void *p[MAX];
    int k = 0, at_x = -1;
    while (k < MAX && at_x < 0) {
        p[k] = NULL;
        if (cudaMalloc(&p[k], n) != cudaSuccess)
            break;
        itest_defer_free(p[k]);
        if ((CUdeviceptr)(uintptr_t)p[k] == x)
            at_x = k;
        k++;
    }
    (void)cudaGetLastError();
    if (at_x < 0) {
        print_error("the device never gave the address %p out again (%d blocks)\n", (void *)(uintptr_t)x, k);
        fail();
    }
    itest_put(p[at_x], n, 15);
    itest_expect(p[at_x], n, 15);
    itest_require_cucache();
    unsigned long frees0 = itest_dev_frees(), allocs0 = itest_dev_allocs();
    SIM_OK(cudaFree(p[at_x]));
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(itest_dev_frees(), frees0); /* cached, not given to the real free */
    void *q = NULL;
    SIM_OK(cudaMalloc(&q, n));
    assert_int_equal(itest_dev_allocs(), allocs0); /* and served again */
    itest_put(q, n, 16);
    itest_expect(q, n, 16);
    SIM_OK(cudaFree(q));
    for (int i = 0; i < k; i++)
        if (i != at_x)
            SIM_OK(cudaFree(p[i]));
}

static uint64_t pool_used(cudaMemPool_t pool)
{
    uint64_t v = 0;
    SIM_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v));
    return v;
}

/* cudaMallocFromPoolAsync passes through: the memory is the pool's (its used
 * bytes grow), cucache does not count it, and both cudaFreeAsync and
 * cudaFree give it back to the pool. */
static void test_pool_pointer_goes_to_the_real_free(void **state)
{
    (void)state;
    const size_t n = 3 * MIB + 5;
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pools[2] = {NULL, NULL};
    SIM_OK(cudaDeviceGetDefaultMemPool(&pools[0], 0));
    SIM_OK(cudaMemPoolCreate(&pools[1], &props));
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int64_t live0 = itest_stat(0, "allocation.all.current");
    for (int i = 0; i < 2; i++) {
        cudaMemPool_t pool = pools[i];
        SIM_OK(cudaDeviceSynchronize());
        uint64_t used0 = pool_used(pool);
        void *p = NULL, *q = NULL, *r = NULL;
        SIM_OK(cudaMallocFromPoolAsync(&p, n, pool, s));
        SIM_OK(cudaMallocFromPoolAsync(&q, n, pool, s));
        SIM_OK(cudaMallocFromPoolAsync_ptsz(&r, n, pool, 0));
        SIM_OK(cudaDeviceSynchronize());
        assert_true(pool_used(pool) >= used0 + 3 * n);
        itest_put(p, n, 10 + (unsigned)i);
        itest_expect(p, n, 10 + (unsigned)i);
        SIM_OK(cudaFreeAsync(p, s));
        SIM_OK(cudaFreeAsync_ptsz(r, 0));
        SIM_OK(cudaDeviceSynchronize());
        assert_true(pool_used(pool) < used0 + 2 * n);
        static char err[4096];
        itest_stderr_begin();
        cudaError_t rc = cudaFree(q);
        itest_stderr_end(err, sizeof err);
        SIM_OK(rc);
        SIM_OK(cudaDeviceSynchronize());
        assert_int_equal(pool_used(pool), used0);
        if (itest_count_lines(err, "cucache: ") != 0) {
            print_error("freeing a pool pointer warned:\n%s\n", err);
            fail();
        }
    }
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaMemPoolDestroy(pools[1]));
    assert_int_equal(itest_stat(0, "allocation.all.current"), live0);
}

/* ---- bad frees: return codes and consistency ------------------------- */

/* The counts cucache keeps, which a refused free must not change. */
typedef struct counts {
    int64_t allocs, bytes, reserved;
} counts_t;

static counts_t counts_now(void)
{
    counts_t c = {itest_stat(0, "allocation.all.current"), itest_stat(0, "allocated_bytes.all.current"),
                  itest_stat(0, "reserved_bytes.all.current")};
    return c;
}

static void expect_counts(counts_t a, counts_t b)
{
    assert_int_equal(a.allocs, b.allocs);
    assert_int_equal(a.bytes, b.bytes);
    assert_int_equal(a.reserved, b.reserved);
}

/* An interior pointer is refused; the block keeps its data and stays
 * allocated (nothing else is handed its bytes). */
static void test_interior_pointer_is_refused(void **state)
{
    (void)state;
    static const size_t blk[] = {4096, MIB, 8 * MIB, 30 * MIB};
    for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) {
        size_t n = blk[i];
        void *p = NULL;
        SIM_OK(cudaMalloc(&p, n));
        itest_put(p, n, 20 + (unsigned)i);
        SIM_OK(cudaDeviceSynchronize());
        counts_t before = itest_have_cucache() ? counts_now() : (counts_t){0, 0, 0};
        char *pc = p;
        SIM_EXPECT(cudaFree(pc + 512), cudaErrorInvalidValue);
        SIM_EXPECT(cudaFree(pc + n / 2), cudaErrorInvalidValue);
        SIM_EXPECT(cudaFree(pc + n - 1), cudaErrorInvalidValue);
        CU_EXPECT(cuMemFree_v2((CUdeviceptr)(uintptr_t)(pc + 256)), CUDA_ERROR_INVALID_VALUE);
        (void)cudaGetLastError();
        SIM_OK(cudaDeviceSynchronize());
        if (itest_have_cucache())
            expect_counts(before, counts_now()); /* the refused frees changed nothing */
        /* other allocations of every size stay out of the block */
        void *q[3] = {NULL, NULL, NULL};
        SIM_OK(cudaMalloc(&q[0], 512));
        SIM_OK(cudaMalloc(&q[1], n / 2));
        SIM_OK(cudaMalloc(&q[2], n));
        assert_false(itest_overlap(p, n, q[0], 512));
        assert_false(itest_overlap(p, n, q[1], n / 2));
        assert_false(itest_overlap(p, n, q[2], n));
        itest_expect(p, n, 20 + (unsigned)i);
        for (int k = 0; k < 3; k++)
            SIM_OK(cudaFree(q[k]));
        SIM_OK(cudaDeviceSynchronize());
        itest_require_cucache();
        counts_t after = counts_now();
        assert_int_equal(after.allocs, before.allocs);
        assert_int_equal(after.bytes, before.bytes);
        SIM_OK(cudaFree(p));
    }
}

/* A double free is refused, and the block is not put in the cache twice:
 * the next two allocations of its size are two different blocks. */
static void test_double_free_is_refused(void **state)
{
    (void)state;
    static const size_t blk[] = {512, 100000, 2 * MIB, 24 * MIB};
    for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) {
        size_t n = blk[i];
        void *p = NULL, *a = NULL, *b = NULL;
        SIM_OK(cudaMalloc(&p, n));
        SIM_OK(cudaFree(p));
        SIM_OK(cudaDeviceSynchronize());
        counts_t before = itest_have_cucache() ? counts_now() : (counts_t){0, 0, 0};
        SIM_EXPECT(cudaFree(p), cudaErrorInvalidValue);
        CU_EXPECT(cuMemFree_v2((CUdeviceptr)(uintptr_t)p), CUDA_ERROR_INVALID_VALUE);
        (void)cudaGetLastError();
        SIM_OK(cudaDeviceSynchronize());
        SIM_OK(cudaMalloc(&a, n));
        SIM_OK(cudaMalloc(&b, n));
        assert_non_null(a);
        assert_non_null(b);
        if (itest_overlap(a, n, b, n)) {
            print_error("after a double free of %p, two live allocations of %zu bytes overlap: %p and %p\n", p, n, a,
                        b);
            fail();
        }
        itest_put(a, n, 30);
        itest_put(b, n, 31);
        itest_expect(a, n, 30);
        itest_expect(b, n, 31);
        SIM_OK(cudaFree(a));
        SIM_OK(cudaFree(b));
        SIM_OK(cudaDeviceSynchronize());
        itest_require_cucache();
        counts_t after = counts_now();
        assert_int_equal(after.allocs, before.allocs);
        assert_int_equal(after.bytes, before.bytes);
    }
}

/* Addresses no allocator handed out are refused by the real free. */
static void test_never_allocated_address_is_refused(void **state)
{
    (void)state;
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 4096));
    counts_t before = itest_have_cucache() ? counts_now() : (counts_t){0, 0, 0};
    SIM_EXPECT(cudaFree(&host_word), cudaErrorInvalidValue);
    SIM_EXPECT(cudaFree((void *)(uintptr_t)0x10000), cudaErrorInvalidValue);
    CU_EXPECT(cuMemFree_v2((CUdeviceptr)(uintptr_t)&host_word), CUDA_ERROR_INVALID_VALUE);
    (void)cudaGetLastError();
    itest_put(p, 4096, 40);
    itest_expect(p, 4096, 40);
    itest_require_cucache();
    expect_counts(before, counts_now());
    SIM_OK(cudaFree(p));
}

/* cudaFreeAsync of an interior pointer or of a freed block is refused too. */
static void test_bad_free_async_is_refused(void **state)
{
    (void)state;
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *p = NULL, *q = NULL;
    SIM_OK(cudaMallocAsync(&p, 2 * MIB, s));
    SIM_OK(cudaMallocAsync(&q, 2 * MIB, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_EXPECT(cudaFreeAsync((char *)p + 4096, s), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    SIM_OK(cudaFreeAsync(q, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_EXPECT(cudaFreeAsync(q, s), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    SIM_OK(cudaStreamSynchronize(s));
    itest_put(p, 2 * MIB, 41);
    itest_expect(p, 2 * MIB, 41);
    SIM_OK(cudaFreeAsync(p, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaStreamDestroy(s));
    itest_require_cucache();
}

/* ---- the warning line ------------------------------------------------ */

/* Runs in the child: one scenario, the bad free(s) between the marks.  Exit
 * 0 when every call answered what CUDA answers. */
static int child_main(const char *scenario)
{
    int bad = 0;
    void *p = NULL;
    CUdeviceptr x = 0;
#define WANT(call, code)                                                                                               \
    do {                                                                                                               \
        int rc_ = (int)(call);                                                                                         \
        if (rc_ != (int)(code)) {                                                                                      \
            fprintf(stdout, "child: %s returned %d, expected %d\n", #call, rc_, (int)(code));                          \
            bad++;                                                                                                     \
        }                                                                                                              \
    } while (0)
    WANT(cudaFree(NULL), cudaSuccess);
    WANT(cudaMalloc(&p, 8 * MIB), cudaSuccess);
    WANT(cuMemAlloc_v2(&x, 4096), CUDA_SUCCESS);
    if (bad)
        return 1;
    char *pc = p;
    fputs(MARK_BEGIN "\n", stderr);
    if (strcmp(scenario, "interior") == 0) {
        WANT(cudaFree(pc + 512), cudaErrorInvalidValue);
    } else if (strcmp(scenario, "interior-large") == 0) {
        WANT(cudaFree(pc + 3 * MIB), cudaErrorInvalidValue);
    } else if (strcmp(scenario, "never") == 0) {
        WANT(cudaFree(&host_word), cudaErrorInvalidValue);
    } else if (strcmp(scenario, "double") == 0) {
        WANT(cudaFree(p), cudaSuccess);
        WANT(cudaFree(p), cudaErrorInvalidValue);
        p = NULL;
    } else if (strcmp(scenario, "driver-interior") == 0) {
        WANT(cuMemFree_v2(x + 512), CUDA_ERROR_INVALID_VALUE);
    } else if (strcmp(scenario, "driver-double") == 0) {
        WANT(cuMemFree_v2(x), CUDA_SUCCESS);
        WANT(cuMemFree_v2(x), CUDA_ERROR_INVALID_VALUE);
        x = 0;
    } else if (strcmp(scenario, "burst") == 0) {
        for (int i = 0; i < 100; i++) {
            if (i % 2)
                WANT(cudaFree(pc + 512 * (size_t)(i + 1)), cudaErrorInvalidValue);
            else
                WANT(cudaFree(&host_word), cudaErrorInvalidValue);
        }
    } else {
        fprintf(stdout, "child: unknown scenario %s\n", scenario);
        bad++;
    }
    fputs(MARK_END "\n", stderr);
    (void)cudaGetLastError();
    WANT(cudaFree(p), cudaSuccess);
    WANT(cuMemFree_v2(x), CUDA_SUCCESS);
    WANT(cudaDeviceSynchronize(), cudaSuccess);
#undef WANT
    return bad ? 1 : 0;
}

/* The text between the child's marks. */
static const char *between_marks(itest_run_t *r)
{
    char *b = strstr(r->err, MARK_BEGIN "\n");
    char *e = b ? strstr(b, MARK_END "\n") : NULL;
    if (!b || !e) {
        print_error("the child's stderr lacks the marks:\n%s\n", r->err);
        fail();
    }
    *e = '\0';
    return b + strlen(MARK_BEGIN "\n");
}

static void run_child(const char *scenario, itest_run_t *r)
{
    const char *argv[] = {"test_interpose_frees", "--child", scenario, NULL};
    itest_spawn("/proc/self/exe", argv, NULL, NULL, 20000, r);
    itest_expect_exit(r, 0);
}

static void test_each_bad_free_warns_once(void **state)
{
    (void)state;
    itest_require_cucache();
    static const char *const scenarios[] = {"interior", "interior-large",  "never",
                                            "double",   "driver-interior", "driver-double"};
    static itest_run_t r;
    int wrong = 0;
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
        run_child(scenarios[i], &r);
        const char *text = between_marks(&r);
        int all = itest_count_lines(text, ""), ours = itest_count_lines(text, "cucache: ");
        if (all != 1 || ours != 1) {
            print_error("%s: expected one line starting with \"cucache: \" on stderr, got %d lines (%d of them "
                        "cucache's):\n%s\n",
                        scenarios[i], all, ours, text);
            wrong++;
        }
    }
    assert_int_equal(wrong, 0);
}

static void test_warnings_are_rate_limited(void **state)
{
    (void)state;
    itest_require_cucache();
    static itest_run_t r;
    run_child("burst", &r);
    const char *text = between_marks(&r);
    int all = itest_count_lines(text, ""), ours = itest_count_lines(text, "cucache: ");
    if (ours < 1 || all != ours || ours > 20) {
        print_error("100 bad frees: expected 1 to 20 lines, all starting with \"cucache: \"; got %d lines (%d of "
                    "them cucache's):\n%s\n",
                    all, ours, text);
        fail();
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--child") == 0)
        return child_main(argv[2]);
    const struct CMUnitTest tests[] = {
        ITEST(test_free_null),
        ITEST(test_created_context_pointer_goes_to_its_own_cache),
        ITEST(test_destroyed_context_memory_is_forgotten),
        ITEST(test_pool_pointer_goes_to_the_real_free),
        ITEST(test_interior_pointer_is_refused),
        ITEST(test_double_free_is_refused),
        ITEST(test_never_allocated_address_is_refused),
        ITEST(test_bad_free_async_is_refused),
        ITEST(test_each_bad_free_warns_once),
        ITEST(test_warnings_are_rate_limited),
    };
    return ITEST_RUN("interpose.frees", tests, itest_group_setup);
}
