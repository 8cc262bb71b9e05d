/*
 * Proves that the simulated device counts its memory in 2 MiB pages,
 * wherever they lie, as a GPU does: an allocation succeeds whenever enough
 * pages are free, whatever pattern of frees scattered them (first fit over
 * one contiguous range would refuse), cudaMemGetInfo reports exactly the
 * free pages, small allocations are packed at 512 bytes into pages of their
 * own (one page charged while any of them lives), and addresses stay unique
 * among live allocations, with a freed address handed out again.  Meson
 * runs it with CUCACHE_SIM_CAPACITY=1G.
 *
 * Seen to fail: with src/engine_mem.c taking the addresses from a range of
 * exactly the capacity (span = capacity), test_scattered_free_pages_serve
 * a_large_request fails its 256 MiB cudaMalloc with cudaErrorMemoryAllocation
 * while cudaMemGetInfo reports 512 MiB free.
 */
#include "simtest.h"

#include <stdlib.h>
#include <string.h>

#define CAPACITY ((size_t)1 << 30) /* CUCACHE_SIM_CAPACITY=1G in meson.build */
#define MIB ((size_t)1 << 20)
#define PAGE (2 * MIB)

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    SIM_OK(cudaMemGetInfo(&f, &t));
    assert_int_equal(t, CAPACITY);
    return f;
}

/* Fills the device with `piece` allocations until one fails; returns how
 * many succeeded (at most max). */
static size_t fill(void **p, size_t max, size_t piece)
{
    size_t n = 0;
    while (n < max && cudaMalloc(&p[n], piece) == cudaSuccess)
        n++;
    (void)cudaGetLastError();
    return n;
}

static void test_scattered_free_pages_serve_a_large_request(void **state)
{
    (void)state;
    enum { MAX = 512 };
    void *p[MAX];
    assert_int_equal(free_bytes(), CAPACITY);
    size_t n = fill(p, MAX, 4 * MIB);
    assert_int_equal(n, CAPACITY / (4 * MIB));
    assert_int_equal(free_bytes(), 0);
    /* every other one back: 512 MiB free, in 4 MiB holes */
    for (size_t i = 0; i < n; i += 2)
        SIM_OK(cudaFree(p[i]));
    assert_int_equal(free_bytes(), CAPACITY / 2);
    void *big = NULL, *rest = NULL;
    SIM_OK(cudaMalloc(&big, 256 * MIB));
    assert_int_equal(free_bytes(), CAPACITY / 2 - 256 * MIB);
    SIM_OK(cudaMalloc(&rest, CAPACITY / 2 - 256 * MIB));
    assert_int_equal(free_bytes(), 0);
    void *none = NULL;
    SIM_EXPECT(cudaMalloc(&none, 1), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    /* both are usable to their last byte and distinct from the live ones */
    SIM_OK(cudaMemset((char *)big + 255 * MIB, 0x5A, MIB));
    SIM_OK(cudaMemset((char *)rest + CAPACITY / 2 - 257 * MIB, 0xA5, MIB));
    for (size_t i = 1; i < n; i += 2) {
        uintptr_t a = (uintptr_t)p[i];
        assert_true(a + 4 * MIB <= (uintptr_t)big || (uintptr_t)big + 256 * MIB <= a);
        assert_true(a + 4 * MIB <= (uintptr_t)rest || (uintptr_t)rest + 256 * MIB <= a);
    }
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaFree(big));
    SIM_OK(cudaFree(rest));
    for (size_t i = 1; i < n; i += 2)
        SIM_OK(cudaFree(p[i]));
    assert_int_equal(free_bytes(), CAPACITY);
}

static void test_meminfo_counts_pages(void **state)
{
    (void)state;
    size_t f0 = free_bytes();
    void *a = NULL, *b = NULL;
    SIM_OK(cudaMalloc(&a, 2 * MIB + 1)); /* two pages */
    assert_int_equal(free_bytes(), f0 - 2 * PAGE);
    SIM_OK(cudaMalloc(&b, 3 * MIB)); /* two more */
    assert_int_equal(free_bytes(), f0 - 4 * PAGE);
    SIM_OK(cudaFree(a));
    assert_int_equal(free_bytes(), f0 - 2 * PAGE);
    SIM_OK(cudaFree(b));
    assert_int_equal(free_bytes(), f0);
}

static void test_small_allocations_share_a_page(void **state)
{
    (void)state;
    enum { PER_PAGE = (int)(PAGE / 1024) };
    size_t f0 = free_bytes();
    void **p = calloc(PER_PAGE + 1, sizeof *p);
    assert_non_null(p);
    for (int i = 0; i < PER_PAGE; i++) {
        SIM_OK(cudaMalloc(&p[i], 1000)); /* 1024 bytes each: 2048 fill a page */
        assert_int_equal((uintptr_t)p[i] % 512, 0);
    }
    assert_int_equal(free_bytes(), f0 - PAGE);
    SIM_OK(cudaMalloc(&p[PER_PAGE], 1)); /* the page is full: a second one */
    assert_int_equal(free_bytes(), f0 - 2 * PAGE);
    /* a freed slot is reused, and no page is given back while one lives */
    void *again = NULL;
    SIM_OK(cudaFree(p[7]));
    SIM_OK(cudaMalloc(&again, 1024));
    assert_ptr_equal(again, p[7]);
    assert_int_equal(free_bytes(), f0 - 2 * PAGE);
    for (int i = 0; i <= PER_PAGE; i++)
        SIM_OK(cudaFree(p[i]));
    assert_int_equal(free_bytes(), f0);
    free(p);
}

static void test_addresses_unique_and_reused(void **state)
{
    (void)state;
    void *a = NULL, *b = NULL, *c = NULL;
    SIM_OK(cudaMalloc(&a, 8 * MIB));
    SIM_OK(cudaMalloc(&b, 8 * MIB));
    assert_true((uintptr_t)a + 8 * MIB <= (uintptr_t)b || (uintptr_t)b + 8 * MIB <= (uintptr_t)a);
    SIM_OK(cudaFree(a));
    SIM_OK(cudaMalloc(&c, 8 * MIB));
    assert_ptr_equal(c, a); /* first fit: the freed range comes back */
    SIM_OK(cudaFree(b));
    SIM_OK(cudaFree(c));
}

/* A request larger than the capacity fails at once, one equal to it
 * succeeds on an empty device. */
static void test_whole_capacity(void **state)
{
    (void)state;
    void *p = NULL;
    SIM_EXPECT(cudaMalloc(&p, CAPACITY + 1), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    SIM_OK(cudaMalloc(&p, CAPACITY));
    assert_int_equal(free_bytes(), 0);
    SIM_OK(cudaMemset((char *)p + CAPACITY - MIB, 1, MIB));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaFree(p));
    assert_int_equal(free_bytes(), CAPACITY);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scattered_free_pages_serve_a_large_request),
        cmocka_unit_test(test_meminfo_counts_pages),
        cmocka_unit_test(test_small_allocations_share_a_page),
        cmocka_unit_test(test_addresses_unique_and_reused),
        cmocka_unit_test(test_whole_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
