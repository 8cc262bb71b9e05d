/*
 * Proves that under cucache cudaMemGetInfo and cuMemGetInfo_v2 report as
 * free what a program can then allocate: the device's free memory plus the
 * segments cucache gives back (whole free ones, and those whose frees wait
 * for queued work: an allocation waits for it), not the free space inside
 * partly used segments (no allocation of that size could use it).  The
 * scenario: small buffers kept alive across many segments; the
 * program then allocates the reported free memory in one piece, and again
 * in 24 MiB pieces, and both succeed; the report is exact before and after
 * (the device's free pages, plus the cached whole segments); frees behind
 * unfinished work count, and allocating them waits; NULL out-parameters
 * are accepted.
 *
 * Seen to fail: with free reported as device free + reserved - allocated,
 * the first three: test_report_is_exact sees 864 MiB free
 * where 224 MiB can be had, the one-piece and the 24 MiB-pieces tests get
 * cudaErrorMemoryAllocation for memory cudaMemGetInfo reported free; with
 * whole free segments only (pending frees left out), test_pending_frees_
 * are_free sees 512 MiB less than the program can allocate.
 */
#include "itest.h"

#include <pthread.h>
#include <stdlib.h>

static size_t mem_free(void)
{
    size_t f = 0, t = 0;
    SIM_OK(cudaMemGetInfo(&f, &t));
    assert_int_equal(t, ITEST_CAPACITY);
    size_t cf = 0, ct = 0;
    CU_OK(cuMemGetInfo_v2(&cf, &ct));
    assert_int_equal(cf, f);
    assert_int_equal(ct, t);
    return f;
}

/* The device's own free memory (through the simulator, not cucache). */
static size_t device_free(void)
{
    int64_t reserved = itest_stat(0, "reserved_bytes.all.current");
    return ITEST_CAPACITY - (size_t)reserved;
}

/* Keeps n small buffers alive, each in a 20 MiB segment of its own (a
 * 1-10 MiB request takes one; the segment's other 16 MiB serve only
 * requests up to that size), then frees a 100 MiB block so that one whole
 * segment is cached too. */
enum { N = 40 };
static void *small_live[N];

static void scatter(void)
{
    void *fill[N];
    for (int i = 0; i < N; i++) {
        SIM_OK(cudaMalloc(&small_live[i], 4 * MIB)); /* a 20 MiB segment each... */
        SIM_OK(cudaMalloc(&fill[i], 16 * MIB));      /* ...filled up */
    }
    for (int i = 0; i < N; i++)
        SIM_OK(cudaFree(fill[i])); /* 16 MiB free in each segment, 640 MiB in all */
    void *whole = NULL;
    SIM_OK(cudaMalloc(&whole, 100 * MIB));
    SIM_OK(cudaFree(whole));
    SIM_OK(cudaDeviceSynchronize());
}

static void unscatter(void)
{
    for (int i = 0; i < N; i++) {
        if (small_live[i])
            SIM_OK(cudaFree(small_live[i]));
        small_live[i] = NULL;
    }
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(itest_empty_cache(0), 0);
}

/* A failed test leaves its buffers: the next one starts clean anyway. */
static int teardown(void **state)
{
    for (int i = 0; i < N; i++) {
        if (small_live[i])
            cudaFree(small_live[i]);
        small_live[i] = NULL;
    }
    cudaDeviceSynchronize();
    if (itest_have_cucache())
        itest_empty_cache(0);
    return itest_teardown(state);
}

#define MEMTEST(f) cmocka_unit_test_setup_teardown(f, itest_setup, teardown)

static void test_report_is_exact(void **state)
{
    (void)state;
    itest_require_cucache();
    assert_int_equal(itest_empty_cache(0), 0);
    scatter();
    size_t f = mem_free();
    if (!itest_expandable()) {
        /* 40 x 20 MiB segments and the 100 MiB one reserved; only the
         * latter is whole and free */
        assert_int_equal(itest_stat(0, "reserved_bytes.all.current"), (int64_t)(N * 20 * MIB + 100 * MIB));
        assert_int_equal(f, device_free() + 100 * MIB);
    } else {
        /* one segment: the 40 pairs mapped, and the 100 MiB block placed
         * where the fewest new pages were needed (after the last freed
         * 16 MiB); every page not under a live 4 MiB block can go back */
        assert_int_equal(itest_stat(0, "reserved_bytes.all.current"), (int64_t)(N * 20 * MIB + 100 * MIB - 16 * MIB));
        assert_int_equal(f, device_free() + (N * 20 * MIB + 84 * MIB) - N * 4 * MIB);
    }
    unscatter();
    assert_int_equal(mem_free(), ITEST_CAPACITY);
}

static void test_allocate_what_is_reported_in_one_piece(void **state)
{
    (void)state;
    itest_require_cucache();
    scatter();
    size_t f = mem_free();
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, f));
    itest_put((char *)p + f - MIB, MIB, 3); /* its last byte is usable */
    itest_expect((char *)p + f - MIB, MIB, 3);
    SIM_OK(cudaFree(p));
    SIM_OK(cudaDeviceSynchronize());
    unscatter();
}

static void test_allocate_what_is_reported_in_24_mib_pieces(void **state)
{
    (void)state;
    itest_require_cucache();
    scatter();
    size_t f = mem_free(), n = f / (24 * MIB);
    assert_true(n > 4);
    void **p = calloc(n, sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        SIM_OK(cudaMalloc(&p[i], 24 * MIB));
    for (size_t i = 0; i < n; i++)
        SIM_OK(cudaFree(p[i]));
    free(p);
    SIM_OK(cudaDeviceSynchronize());
    unscatter();
}

/* Frees still waiting for work queued before them are free, as CUDA's
 * cudaFree (which waits) shows them: an allocation that needs them waits
 * for that work and gets them.  Here the work is held back by a gate that
 * a second thread opens; the allocation of all the reported memory waits
 * for it and succeeds. */
typedef struct {
    simtest_gate_t *g;
} opener_t;

static void *open_later(void *arg)
{
    simtest_sleep_ms(50);
    simtest_gate_open(((opener_t *)arg)->g);
    return NULL;
}

static void test_pending_frees_are_free(void **state)
{
    (void)state;
    itest_require_cucache();
    assert_int_equal(itest_empty_cache(0), 0);
    size_t f0 = mem_free();
    cudaStream_t s;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s); /* work queued before the frees may still run */
    void *p[8];
    for (int i = 0; i < 8; i++)
        SIM_OK(cudaMalloc(&p[i], 64 * MIB));
    for (int i = 0; i < 8; i++)
        SIM_OK(cudaFree(p[i]));
    assert_int_equal(device_free(), f0 - 8 * 64 * MIB); /* still the cache's */
    assert_int_equal(mem_free(), f0);
    opener_t o = {g};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, open_later, &o), 0);
    void *all = NULL;
    SIM_OK(cudaMalloc(&all, f0)); /* waits for the gate */
    assert_int_equal(pthread_join(t, NULL), 0);
    SIM_OK(cudaFree(all));
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(mem_free(), f0);
    SIM_OK(cudaStreamDestroy(s));
}

/* Blocks an IPC peer still has open are not given back: test_ipc. */

static void test_null_out_parameters(void **state)
{
    (void)state;
    size_t only = 0;
    SIM_OK(cudaMemGetInfo(NULL, &only));
    assert_int_equal(only, ITEST_CAPACITY);
    SIM_OK(cudaMemGetInfo(&only, NULL));
    assert_true(only > 0 && only <= ITEST_CAPACITY);
    SIM_OK(cudaMemGetInfo(NULL, NULL));
    CU_OK(cuMemGetInfo_v2(NULL, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        MEMTEST(test_report_is_exact),
        MEMTEST(test_allocate_what_is_reported_in_one_piece),
        MEMTEST(test_allocate_what_is_reported_in_24_mib_pieces),
        MEMTEST(test_pending_frees_are_free),
        MEMTEST(test_null_out_parameters),
    };
    return ITEST_RUN("interpose.meminfo", tests, itest_group_setup);
}
