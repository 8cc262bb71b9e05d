/*
 * Proves, under CUCACHE_CONF=expandable_segments:true on the simulated
 * device, what expandable segments add to the interposer's promises:
 *
 *   - pages freed in stream order are unmapped only after the work queued
 *     on them is done: a block freed with cudaFreeAsync behind a closed
 *     gate, then memory short, makes cucache synchronise before it unmaps
 *     (the allocation returns only once the gate opened); the simulator's
 *     race detector, which reports an unmap under queued work, stays
 *     silent (itest_teardown fails the test on any race).  Seen to fail
 *     with the synchronisation removed from exp_unmap_free: the busy pages
 *     never go back (cudaErrorMemoryAllocation); with them unmapped anyway,
 *     the simulator says "RACE ... cuMemUnmap takes it away while memset
 *     ... may still be running";
 *   - a map that fails half way (the simulator's failure injection) leaves
 *     nothing mapped behind: the allocation is retried and served, the
 *     bytes are right, and the simulator's mappings are exactly cucache's
 *     mapped bytes;
 *   - an allocation no device can serve gets the OOM report with the
 *     mapped and reserved lines;
 *   - under expandable_share_pages:true (its own run), with memory tight, a
 *     request that starts in the free tail of a page a live block ends in
 *     maps that page a second time and one page fewer: the bytes written
 *     through either mapping are each block's own, a kernel writing the
 *     borrower never races the lender's reader, the pointer answers name
 *     the borrower, and once it is freed the cache gives every page back.
 *     Seen to fail (the lender's bytes overwritten) with the page before
 *     the lent one mapped the second time.
 *
 * Meson runs it with CUCACHE_SIM_CAPACITY=1G and expandable_segments:true.
 */
#include "itest.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static size_t sim_mappings(void)
{
    void (*counts)(size_t *, size_t *, size_t *) =
        (void (*)(size_t *, size_t *, size_t *))simtest_sim_sym("cucacheSimVmmCounts");
    assert_non_null(counts);
    size_t res = 0, alloc = 0, maps = 0;
    counts(&res, &alloc, &maps);
    return maps;
}

typedef struct {
    simtest_gate_t *g;
} opener_t;

static void *open_later(void *arg)
{
    simtest_sleep_ms(100);
    simtest_gate_open(((opener_t *)arg)->g);
    return NULL;
}

static void test_unmap_waits_for_stream_ordered_work(void **state)
{
    (void)state;
    itest_require_cucache();
    assert_true(itest_expandable());
    assert_int_equal(itest_empty_cache(0), 0);
    cudaStream_t s;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    itest_defer_stream(s);
    void *p = NULL;
    SIM_OK(cudaMallocAsync(&p, 512 * MIB, s));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    SIM_OK(cudaMemsetAsync(p, 7, 512 * MIB, s)); /* queued behind the gate */
    SIM_OK(cudaFreeAsync(p, s));                 /* free in stream order: cached at once */
    /* memory is short: the cache must give p's pages back, after the
     * memset (an opener thread lets it run) */
    opener_t o = {g};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, open_later, &o), 0);
    void *q = NULL;
    SIM_OK(cudaMalloc(&q, 900 * MIB));
    assert_true(simtest_gate_passed(g)); /* the unmap waited for it */
    assert_int_equal(pthread_join(t, NULL), 0);
    itest_put((char *)q + 899 * MIB, MIB, 5);
    itest_expect((char *)q + 899 * MIB, MIB, 5);
    SIM_OK(cudaFree(q));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaStreamDestroy(s));
}

static void test_map_failure_midway_rolls_back(void **state)
{
    (void)state;
    itest_require_cucache();
    void (*inject)(enum cucache_sim_vmm_call, unsigned, CUresult) =
        (void (*)(enum cucache_sim_vmm_call, unsigned, CUresult))simtest_sim_sym("cucacheSimVmmFail");
    assert_non_null(inject);
    assert_int_equal(itest_empty_cache(0), 0);
    void *a = NULL;
    SIM_OK(cudaMalloc(&a, 4 * MIB));
    /* the fourth page of the next growth fails to map */
    inject(CUCACHE_SIM_VMM_MAP, 3, CUDA_ERROR_OUT_OF_MEMORY);
    void *b = NULL;
    SIM_OK(cudaMalloc(&b, 16 * MIB)); /* retried and served */
    inject(CUCACHE_SIM_VMM_MAP, 0, CUDA_SUCCESS);
    itest_put(b, 16 * MIB, 3);
    itest_put(a, 4 * MIB, 4);
    itest_expect(b, 16 * MIB, 3);
    itest_expect(a, 4 * MIB, 4);
    /* nothing of the failed call stayed mapped: every mapping is cucache's */
    int64_t mapped = itest_stat(0, "reserved_bytes.all.current");
    assert_int_equal((int64_t)sim_mappings() * (int64_t)(2 * MIB), mapped);
    SIM_OK(cudaFree(a));
    SIM_OK(cudaFree(b));
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(itest_empty_cache(0), 0);
    assert_int_equal(sim_mappings(), 0);
}

static void test_oom_report_says_mapped_and_reserved(void **state)
{
    (void)state;
    itest_require_cucache();
    void *keep = NULL;
    SIM_OK(cudaMalloc(&keep, 100 * MIB));
    char err[16384];
    void *p = NULL;
    itest_stderr_begin();
    cudaError_t rc = cudaMalloc(&p, 2 * GIB);
    itest_stderr_end(err, sizeof err);
    (void)cudaGetLastError();
    assert_int_equal(rc, cudaErrorMemoryAllocation);
    assert_non_null(strstr(err, "cucache: CUDA out of memory. Tried to allocate 2.00 GiB"));
    assert_non_null(strstr(err, "in the large pool: pages of 2.00 GiB"));
    assert_non_null(strstr(err, "cache: expandable segments: 100.00 MiB mapped of"));
    SIM_OK(cudaFree(keep));
}

static bool sharing(void)
{
    const char *c = getenv("CUCACHE_CONF");
    return c && strstr(c, "expandable_share_pages:true");
}

static void test_shared_page(void **state)
{
    (void)state;
    itest_require_cucache();
    if (!sharing())
        skip();
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(itest_empty_cache(0), 0);
    /* memory is tight (pages are shared only then): the program's own
     * virtual memory, which cucache passes through, takes all but 32 MiB */
    size_t free0 = 0, total = 0;
    SIM_OK(cudaMemGetInfo(&free0, &total));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle ballast = 0;
    CU_OK(cuMemCreate(&ballast, (free0 - 32 * MIB) / (2 * MIB) * (2 * MIB), &prop, 0));
    /* a (3 MiB) and y (3.5 MiB) around x (1.5 MiB): pages [0, 8) MiB, full */
    void *a = NULL, *x = NULL, *y = NULL, *z = NULL;
    SIM_OK(cudaMalloc(&a, 3 * MIB));
    SIM_OK(cudaMalloc(&x, 3 * MIB / 2));
    SIM_OK(cudaMalloc(&y, 7 * MIB / 2));
    assert_ptr_equal(x, (char *)a + 3 * MIB);
    assert_ptr_equal(y, (char *)x + 3 * MIB / 2);
    itest_put(a, 3 * MIB, 11);
    itest_put(y, 7 * MIB / 2, 12);
    SIM_OK(cudaFree(x)); /* a hole: the tail of a's last page, the head of y's first */
    SIM_OK(cudaDeviceSynchronize());
    int64_t shared = itest_stat(0, "num_shared_pages"), mapped = itest_stat(0, "reserved_bytes.all.current");
    /* 2.5 MiB fits no free range: two new pages plainly, one shared */
    SIM_OK(cudaMalloc(&z, 5 * MIB / 2));
    assert_int_equal(itest_stat(0, "num_shared_pages"), shared + 1);
    assert_int_equal(itest_stat(0, "reserved_bytes.all.current"), mapped + 2 * MIB);
    /* each block's bytes are its own, through either mapping */
    itest_put(z, 5 * MIB / 2, 13);
    itest_expect(a, 3 * MIB, 11);
    itest_expect(y, 7 * MIB / 2, 12);
    itest_expect(z, 5 * MIB / 2, 13);
    /* a reader of a behind a gate, a writer of z on another stream: no race
     * (itest_teardown fails on any) */
    cudaStream_t s, t;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    SIM_OK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    struct cucache_sim_access ra = {a, 3 * MIB, 0}, wz = {z, 5 * MIB / 2, 1};
    CU_OK(cucacheSimLaunch((CUstream)s, NULL, NULL, &ra, 1));
    CU_OK(cucacheSimLaunch((CUstream)t, NULL, NULL, &wz, 1));
    simtest_gate_open(g);
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(itest_races(), 0);
    /* the pointer answers name the borrower */
    CUdeviceptr base = 0;
    size_t size = 0;
    CU_OK(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)z + MIB));
    assert_int_equal(base, (CUdeviceptr)z);
    assert_int_equal(size, 5 * MIB / 2);
    /* freed, the sharing ends and every page goes back */
    SIM_OK(cudaFree(z));
    SIM_OK(cudaFree(a));
    SIM_OK(cudaFree(y));
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaStreamDestroy(t));
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(itest_empty_cache(0), 0);
    assert_int_equal(itest_stat(0, "reserved_bytes.all.current"), 0);
    assert_int_equal(sim_mappings(), 0);
    CU_OK(cuMemRelease(ballast));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        ITEST(test_unmap_waits_for_stream_ordered_work),
        ITEST(test_map_failure_midway_rolls_back),
        ITEST(test_oom_report_says_mapped_and_reserved),
        ITEST(test_shared_page),
    };
    return ITEST_RUN("interpose.expandable", tests, itest_group_setup);
}
