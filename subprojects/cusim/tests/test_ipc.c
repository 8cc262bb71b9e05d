/*
 * Proves IPC of device memory between two processes on the simulated
 * device (this test exports, tests/ipc_peer opens): the peer sees the
 * bytes this process wrote and this process sees the peer's; a handle
 * taken anywhere inside an allocation opens at the allocation's start, as
 * on a GPU; opening a handle twice gives the same pointer and needs two
 * closes, a third is CUDA_ERROR_INVALID_VALUE; a handle opened in its own
 * process is cudaErrorDeviceUninitialized (CUDA_ERROR_INVALID_CONTEXT);
 * garbage is cudaErrorInvalidValue, a handle of freed memory or of another
 * process that now has the pid cudaErrorInvalidResourceHandle; pool and
 * host memory cannot be exported; an allocation freed while the peer has
 * it open keeps its bytes and its pages until the peer closes it, and is
 * not given to a new allocation meanwhile; many allocations of many sizes
 * at once.  Meson runs it with CUCACHE_SIM_CAPACITY=1G.
 */
#include "peer.h"
#include "simtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)

static peer_t peer;

static int group_setup(void **state)
{
    (void)state;
    int n;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        return -1;
    peer_start(&peer);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return peer_stop(&peer) == 0 ? 0 : -1;
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    SIM_OK(cudaMemGetInfo(&f, &t));
    return f;
}

static void test_both_ways(void **state)
{
    (void)state;
    void *d = NULL;
    cudaIpcMemHandle_t h;
    SIM_OK(cudaMalloc(&d, 4 * MIB));
    peer_fill(d, 4 * MIB, 1);
    SIM_OK(cudaIpcGetMemHandle(&h, d));
    uintptr_t p = peer_ptr(peer_open(&peer, &h, cudaIpcMemLazyEnablePeerAccess));
    peer_expect(peer_cmd(&peer, "check %lx %zx 1", (unsigned long)p, 4 * MIB), "ok");
    peer_expect(peer_cmd(&peer, "fill %lx %zx 2", (unsigned long)p + MIB, 2 * MIB), "ok");
    peer_check((char *)d + MIB, 2 * MIB, 2);
    char want[64];
    snprintf(want, sizeof want, "ok %lx %zx", (unsigned long)p, 4 * MIB);
    peer_expect(peer_cmd(&peer, "range %lx", (unsigned long)p + 12345), want);
    peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p), "ok");
    SIM_OK(cudaFree(d));
}

/* The peer's mapping covers the exporter's whole allocation as the device
 * rounded it: MAPPING_SIZE answers what it answers in the exporter. */
static void test_mapping_size(void **state)
{
    (void)state;
    void *d = NULL;
    cudaIpcMemHandle_t h;
    SIM_OK(cudaMalloc(&d, 1000));
    size_t own = 0;
    CU_OK(cuPointerGetAttribute(&own, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, (CUdeviceptr)(uintptr_t)d));
    assert_int_equal(own, 1024);
    SIM_OK(cudaIpcGetMemHandle(&h, d));
    uintptr_t p = peer_ptr(peer_open(&peer, &h, 1));
    peer_expect(peer_cmd(&peer, "mapping %lx", (unsigned long)p + 10), "ok 400");
    peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p), "ok");
    SIM_OK(cudaFree(d));
}

/* A handle names the whole allocation: from a pointer inside it, the peer
 * gets the allocation's start (on a GPU, a sub-allocation of cudaMalloc's
 * own shares its whole block the same way). */
static void test_inner_pointer_opens_the_start(void **state)
{
    (void)state;
    void *d = NULL;
    cudaIpcMemHandle_t h0, h1;
    SIM_OK(cudaMalloc(&d, 3 * MIB));
    peer_fill(d, 3 * MIB, 3);
    SIM_OK(cudaIpcGetMemHandle(&h0, d));
    SIM_OK(cudaIpcGetMemHandle(&h1, (char *)d + 4096));
    assert_memory_equal(&h0, &h1, sizeof h0);
    uintptr_t p = peer_ptr(peer_open(&peer, &h1, 1));
    peer_expect(peer_cmd(&peer, "check %lx %zx 3", (unsigned long)p, 3 * MIB), "ok");
    peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p), "ok");
    SIM_OK(cudaFree(d));
}

static void test_open_twice_close_twice(void **state)
{
    (void)state;
    void *d = NULL;
    cudaIpcMemHandle_t h;
    SIM_OK(cudaMalloc(&d, MIB));
    peer_fill(d, MIB, 4);
    SIM_OK(cudaIpcGetMemHandle(&h, d));
    uintptr_t p1 = peer_ptr(peer_open(&peer, &h, 1));
    uintptr_t p2 = peer_ptr(peer_open(&peer, &h, 0));
    assert_int_equal(p1, p2);
    peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p1), "ok");
    peer_expect(peer_cmd(&peer, "check %lx %zx 4", (unsigned long)p1, MIB), "ok");
    peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p1), "ok");
    peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p1), "err 1");
    peer_expect(peer_cmd(&peer, "close 0"), "err 1");
    peer_expect(peer_open(&peer, &h, 2), "err 1"); /* unknown flags */
    SIM_OK(cudaFree(d));
}

static void test_bad_handles(void **state)
{
    (void)state;
    void *d = NULL, *p = NULL;
    cudaIpcMemHandle_t h, bad;
    SIM_OK(cudaMalloc(&d, MIB));
    SIM_OK(cudaIpcGetMemHandle(&h, d));
    SIM_EXPECT(cudaIpcOpenMemHandle(&p, h, 1), cudaErrorDeviceUninitialized); /* its own process */
    (void)cudaGetLastError();
    memset(&bad, 0x3c, sizeof bad); /* garbage */
    peer_expect(peer_open(&peer, &bad, 1), "err 1");
    memset(&bad, 0, sizeof bad);
    peer_expect(peer_open(&peer, &bad, 1), "err 1");
    bad = h;
    bad.reserved[56] ^= 1; /* the table's nonce: another process with that pid */
    peer_expect(peer_open(&peer, &bad, 1), "err 400");
    bad = h;
    bad.reserved[30] = 0x7f; /* a slot out of range */
    peer_expect(peer_open(&peer, &bad, 1), "err 1");
    SIM_OK(cudaFree(d));
    peer_expect(peer_open(&peer, &h, 1), "err 400"); /* stale: freed */

    /* what cannot be exported */
    SIM_EXPECT(cudaIpcGetMemHandle(NULL, d), cudaErrorInvalidValue);
    SIM_OK(cudaMallocAsync(&p, MIB, NULL));
    SIM_EXPECT(cudaIpcGetMemHandle(&h, p), cudaErrorInvalidValue); /* the default pool has no IPC */
    SIM_OK(cudaFreeAsync(p, NULL));
    SIM_OK(cudaMallocHost(&p, 4096));
    SIM_EXPECT(cudaIpcGetMemHandle(&h, p), cudaErrorInvalidValue);
    SIM_OK(cudaFreeHost(p));
    SIM_EXPECT(cudaIpcGetMemHandle(&h, d), cudaErrorInvalidValue); /* freed */
    SIM_EXPECT(cudaIpcCloseMemHandle(d), cudaErrorInvalidValue);
    (void)cudaGetLastError();
}

/* CUDA keeps exported memory alive while an importer has it open. */
static void test_freed_while_open(void **state)
{
    (void)state;
    void *d = NULL, *again = NULL;
    cudaIpcMemHandle_t h;
    size_t f0 = free_bytes();
    SIM_OK(cudaMalloc(&d, 8 * MIB));
    peer_fill(d, 8 * MIB, 5);
    SIM_OK(cudaIpcGetMemHandle(&h, d));
    uintptr_t p = peer_ptr(peer_open(&peer, &h, 1));
    SIM_OK(cudaFree(d));
    assert_int_equal(free_bytes(), f0 - 8 * MIB); /* still charged */
    SIM_OK(cudaMalloc(&again, 8 * MIB));
    assert_true(again != d); /* not given to a new owner meanwhile */
    peer_fill(again, 8 * MIB, 6);
    peer_expect(peer_cmd(&peer, "check %lx %zx 5", (unsigned long)p, 8 * MIB), "ok");
    /* the peer's own second open counts on its mapping, as CUDA's does */
    assert_int_equal(peer_ptr(peer_open(&peer, &h, 1)), p);
    peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p), "ok");
    peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p), "ok");
    peer_expect(peer_open(&peer, &h, 1), "err 400"); /* closed and freed: stale */
    assert_int_equal(free_bytes(), f0 - 8 * MIB); /* only `again` */
    SIM_OK(cudaFree(again));
    assert_int_equal(free_bytes(), f0);
}

static void test_many(void **state)
{
    (void)state;
    enum { N = 40 };
    void *d[N];
    uintptr_t p[N];
    size_t size[N];
    for (int i = 0; i < N; i++) {
        size[i] = i % 3 == 0 ? 1000 + (size_t)i * 512 : i % 3 == 1 ? 3 * MIB + (size_t)i : MIB;
        SIM_OK(cudaMalloc(&d[i], size[i]));
        peer_fill(d[i], size[i], 10 + (unsigned)i);
    }
    for (int i = 0; i < N; i++) {
        cudaIpcMemHandle_t h;
        SIM_OK(cudaIpcGetMemHandle(&h, d[i]));
        p[i] = peer_ptr(peer_open(&peer, &h, 1));
    }
    for (int i = 0; i < N; i++) {
        peer_expect(peer_cmd(&peer, "check %lx %zx %x", (unsigned long)p[i], size[i], 10 + i), "ok");
        peer_expect(peer_cmd(&peer, "fill %lx %zx %x", (unsigned long)p[i], size[i], 100 + i), "ok");
    }
    for (int i = 0; i < N; i++) {
        peer_check(d[i], size[i], 100 + (unsigned)i);
        peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p[i]), "ok");
        SIM_OK(cudaFree(d[i]));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_both_ways),
        SIMTEST(test_mapping_size),
        SIMTEST(test_inner_pointer_opens_the_start),
        SIMTEST(test_open_twice_close_twice),
        SIMTEST(test_bad_handles),
        SIMTEST(test_freed_while_open),
        SIMTEST(test_many),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
