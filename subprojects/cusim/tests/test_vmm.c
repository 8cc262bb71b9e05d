/*
 * Proves the simulated device's virtual memory API (cuMemAddressReserve,
 * cuMemCreate, cuMemMap, cuMemSetAccess and the rest) with CUDA's rules and
 * error codes: the granularity and what cuMemCreate accepts; reservations
 * (alignment, hint, exact free); physical allocations charged to the device
 * at creation and given back only when the last reference and the last
 * mapping are gone (cuMemGetInfo); mapping only inside a reservation, never
 * twice, unmapping whole mappings only (several at once); nothing
 * accessible before cuMemSetAccess, read-only access refusing writes;
 * aliases (one allocation at two addresses) sharing bytes, copies spanning
 * adjacent mappings; the race detector seeing work through either alias
 * and an unmap under queued work; pointer attributes of mappings;
 * cudaFree, cuMemFree and cudaIpcGetMemHandle refusing such memory;
 * retain, properties, export and import of POSIX descriptors, in this
 * process and in another one (tests/ipc_peer); failure injection; the
 * entry points through cuGetProcAddress.  Meson runs it with
 * CUCACHE_SIM_CAPACITY=1G at the default 2 MiB granularity, and again at
 * 64 KiB (CUCACHE_SIM_VMM_GRANULARITY=64K): nothing here assumes the value.
 */
#include "peer.h"
#include "simtest.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static CUdevice dev;
static CUcontext ctx;
static size_t gran;
static peer_t peer;
static bool peer_started;

static CUmemAllocationProp device_prop(unsigned handle_types)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.requestedHandleTypes = (CUmemAllocationHandleType)handle_types;
    return p;
}

static int group_setup(void **state)
{
    (void)state;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return -1;
    CUmemAllocationProp p = device_prop(0);
    if (cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return peer_started && peer_stop(&peer) != 0 ? -1 : 0;
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    CU_OK(cuMemGetInfo_v2(&f, &t));
    return f;
}

static CUmemGenericAllocationHandle create(size_t size, unsigned handle_types)
{
    CUmemAllocationProp p = device_prop(handle_types);
    CUmemGenericAllocationHandle h = 0;
    CU_OK(cuMemCreate(&h, size, &p, 0));
    return h;
}

static CUdeviceptr reserve(size_t size)
{
    CUdeviceptr p = 0;
    CU_OK(cuMemAddressReserve(&p, size, 0, 0, 0));
    assert_true(p != 0);
    return p;
}

static void set_access(CUdeviceptr p, size_t size, CUmemAccess_flags flags)
{
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, flags};
    CU_OK(cuMemSetAccess(p, size, &d, 1));
}

/* Reserve, create, map and make read-write: the usual four steps. */
static CUdeviceptr map_new(size_t size, CUmemGenericAllocationHandle *out)
{
    CUdeviceptr p = reserve(size);
    CUmemGenericAllocationHandle h = create(size, 0);
    CU_OK(cuMemMap(p, size, 0, h, 0));
    set_access(p, size, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    if (out)
        *out = h;
    else
        CU_OK(cuMemRelease(h));
    return p;
}

static void unmap_free(CUdeviceptr p, size_t size)
{
    CU_OK(cuMemUnmap(p, size));
    CU_OK(cuMemAddressFree(p, size));
}

static void fill(CUdeviceptr p, size_t n, unsigned seed)
{
    unsigned char *buf = malloc(n);
    simtest_fill(buf, n, seed);
    SIM_OK(cudaMemcpy((void *)(uintptr_t)p, buf, n, cudaMemcpyHostToDevice));
    free(buf);
}

static void check_byte(CUdeviceptr p, size_t n, unsigned char value)
{
    unsigned char *buf = malloc(n);
    SIM_OK(cudaMemcpy(buf, (const void *)(uintptr_t)p, n, cudaMemcpyDeviceToHost));
    long bad = simtest_check_byte(buf, n, value);
    free(buf);
    if (bad >= 0)
        fail_msg("byte %ld is not %u", bad, value);
}

static void check(CUdeviceptr p, size_t n, unsigned seed, size_t off)
{
    unsigned char *buf = malloc(n);
    SIM_OK(cudaMemcpy(buf, (const void *)(uintptr_t)p, n, cudaMemcpyDeviceToHost));
    long bad = simtest_check(buf, n, seed, off);
    free(buf);
    if (bad >= 0)
        fail_msg("byte %ld differs", bad);
}

/* ------------------------------------------------------------------------ */

static void test_granularity_and_props(void **state)
{
    (void)state;
    int v = 0;
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
    assert_int_equal(v, 1);
    const char *want = getenv("CUCACHE_SIM_VMM_GRANULARITY");
    assert_int_equal(gran, want && strcmp(want, "64K") == 0 ? 64 * 1024 : 2 * MIB);
    size_t rec = 0;
    CUmemAllocationProp p = device_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CU_OK(cuMemGetAllocationGranularity(&rec, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    assert_int_equal(rec, gran);
    CU_EXPECT(cuMemGetAllocationGranularity(&rec, &p, (CUmemAllocationGranularity_flags)7), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemGetAllocationGranularity(NULL, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemGetAllocationGranularity(&rec, NULL, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);

    /* what cuMemCreate refuses, and with which code */
    CUmemGenericAllocationHandle h = 0;
    p = device_prop(0);
    p.type = CU_MEM_ALLOCATION_TYPE_INVALID;
    CU_EXPECT(cuMemCreate(&h, gran, &p, 0), CUDA_ERROR_INVALID_VALUE);
    p = device_prop(0);
    p.location.id = 7;
    CU_EXPECT(cuMemCreate(&h, gran, &p, 0), CUDA_ERROR_INVALID_DEVICE);
    CU_EXPECT(cuMemGetAllocationGranularity(&rec, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_DEVICE);
    p = device_prop(0);
    p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
    CU_EXPECT(cuMemCreate(&h, gran, &p, 0), CUDA_ERROR_INVALID_VALUE);
    p = device_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    p.location.type = CU_MEM_LOCATION_TYPE_HOST; /* host memory must not ask for handle types */
    CU_EXPECT(cuMemCreate(&h, gran, &p, 0), CUDA_ERROR_INVALID_VALUE);
    p = device_prop(0);
    p.location.type = CU_MEM_LOCATION_TYPE_HOST; /* host memory through this API is not simulated */
    CU_EXPECT(cuMemCreate(&h, gran, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
    p = device_prop(CU_MEM_HANDLE_TYPE_FABRIC);
    CU_EXPECT(cuMemCreate(&h, gran, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
    p = device_prop(0x40);
    CU_EXPECT(cuMemCreate(&h, gran, &p, 0), CUDA_ERROR_INVALID_VALUE);
    p = device_prop(0);
    p.allocFlags.compressionType = 1;
    CU_EXPECT(cuMemCreate(&h, gran, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
    p = device_prop(0);
    p.allocFlags.usage = 2; /* hardware decompression: documented, not simulated */
    CU_EXPECT(cuMemCreate(&h, gran, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
    p = device_prop(0);
    p.allocFlags.usage = 4;
    CU_EXPECT(cuMemCreate(&h, gran, &p, 0), CUDA_ERROR_INVALID_VALUE);
    p = device_prop(0);
    CU_EXPECT(cuMemCreate(&h, gran, &p, 1), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemCreate(&h, gran / 2, &p, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemCreate(&h, gran + 4096, &p, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemCreate(&h, 0, &p, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemCreate(NULL, gran, &p, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemCreate(&h, gran, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemCreate(&h, (size_t)2 << 30, &p, 0), CUDA_ERROR_OUT_OF_MEMORY); /* a 1 GiB device */
}

static void test_physical_accounting(void **state)
{
    (void)state;
    size_t before = free_bytes();
    CUdeviceptr p = reserve(64 * MIB);
    assert_int_equal(free_bytes(), before); /* addresses cost nothing */
    CUmemGenericAllocationHandle h = create(64 * MIB, 0);
    assert_int_equal(free_bytes(), before - 64 * MIB); /* charged at creation */
    CU_OK(cuMemMap(p, 64 * MIB, 0, h, 0));
    assert_int_equal(free_bytes(), before - 64 * MIB); /* not again at mapping */
    CU_OK(cuMemRelease(h));
    assert_int_equal(free_bytes(), before - 64 * MIB);    /* the mapping keeps it */
    CU_EXPECT(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE); /* no reference left */
    CU_OK(cuMemUnmap(p, 64 * MIB));
    assert_int_equal(free_bytes(), before); /* the last mapping gone: given back */
    CU_EXPECT(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemRelease(0x1234), CUDA_ERROR_INVALID_VALUE);

    /* cuMemAlloc and cuMemCreate draw on the same memory */
    size_t most = free_bytes() / gran * gran - 2 * MIB;
    CUmemGenericAllocationHandle big = create(most, 0);
    CUdeviceptr d = 0;
    CU_EXPECT(cuMemAlloc_v2(&d, 64 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemRelease(big)); /* never mapped: given back at once */
    CU_OK(cuMemAlloc_v2(&d, 64 * MIB));
    CU_OK(cuMemFree_v2(d));
    CU_OK(cuMemAddressFree(p, 64 * MIB));
    assert_int_equal(free_bytes(), before);
}

static void test_reservations(void **state)
{
    (void)state;
    CUdeviceptr p = 0;
    CU_EXPECT(cuMemAddressReserve(&p, 4097, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemAddressReserve(&p, 0, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemAddressReserve(&p, gran, 3 * gran, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemAddressReserve(&p, gran, 0, 12345, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemAddressReserve(&p, gran, 0, 0, 1), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemAddressReserve(NULL, gran, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    /* alignment honoured */
    CU_OK(cuMemAddressReserve(&p, 4 * gran, (size_t)1 << 30, 0, 0));
    assert_int_equal(p % ((size_t)1 << 30), 0);
    /* a free hint is taken */
    CUdeviceptr q = 0;
    CU_OK(cuMemAddressReserve(&q, 4 * gran, 0, p + 16 * gran, 0));
    assert_true(q == p + 16 * gran);
    /* a taken one is only a hint */
    CUdeviceptr r = 0;
    CU_OK(cuMemAddressReserve(&r, 4 * gran, 0, p, 0));
    assert_true(r != p && (r + 4 * gran <= p || r >= p + 4 * gran));
    /* a reservation is not memory */
    CU_EXPECT(cuMemsetD8_v2(p, 1, 16), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr base;
    size_t size;
    CU_EXPECT(cuMemGetAddressRange_v2(&base, &size, p), CUDA_ERROR_NOT_FOUND);
    unsigned char mapped = 9;
    CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_MAPPED;
    void *data = &mapped;
    CU_OK(cuPointerGetAttributes(1, &attr, &data, p));
    assert_int_equal(mapped, 0);
    CUdeviceptr rs = 0; /* an unmapped address still names its reservation, as DALI's tests expect */
    attr = CU_POINTER_ATTRIBUTE_RANGE_START_ADDR;
    data = &rs;
    CU_OK(cuPointerGetAttributes(1, &attr, &data, p + gran));
    assert_true(rs == p);
    /* freed exactly as reserved, once */
    CU_EXPECT(cuMemAddressFree(p, 2 * gran), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemAddressFree(p + gran, 3 * gran), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemAddressFree(p, 4 * gran));
    CU_EXPECT(cuMemAddressFree(p, 4 * gran), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemAddressFree(q, 4 * gran));
    CU_OK(cuMemAddressFree(r, 4 * gran));
}

static void test_mapping_rules(void **state)
{
    (void)state;
    CUdeviceptr p = reserve(8 * gran);
    CUmemGenericAllocationHandle h = create(2 * gran, 0), h2 = create(2 * gran, 0);
    CU_EXPECT(cuMemMap(p + 4096, 2 * gran, 0, h, 0), gran > 4096 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
    CU_EXPECT(cuMemMap(p, 2 * gran, gran, h, 0), CUDA_ERROR_INVALID_VALUE); /* offset must be 0 */
    CU_EXPECT(cuMemMap(p, 2 * gran, 0, h, 1), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemMap(p, 4 * gran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);            /* larger than the handle */
    CU_EXPECT(cuMemMap(p + 7 * gran, 2 * gran, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* leaves the reservation */
    CU_EXPECT(cuMemMap(p, 2 * gran, 0, 0x99, 0), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc_v2(&d, 4 * MIB));
    CU_EXPECT(cuMemMap(d, 2 * gran, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* not a reservation */
    CU_OK(cuMemFree_v2(d));
    /* a mapping may show the start of a larger allocation */
    CU_OK(cuMemMap(p, gran, 0, h, 0));
    CU_EXPECT(cuMemMap(p, gran, 0, h2, 0), CUDA_ERROR_INVALID_VALUE); /* no double map */
    CU_OK(cuMemMap(p + gran, 2 * gran, 0, h2, 0));
    CU_EXPECT(cuMemMap(p + 2 * gran, 2 * gran, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* overlaps */
    CU_OK(cuMemMap(p + 4 * gran, 2 * gran, 0, h, 0)); /* the same allocation again: an alias */
    /* unmapping takes whole mappings, several at once, nothing unmapped */
    CU_EXPECT(cuMemUnmap(p + gran, gran), CUDA_ERROR_INVALID_VALUE);         /* half of h2's */
    CU_EXPECT(cuMemUnmap(p, 2 * gran), CUDA_ERROR_INVALID_VALUE);            /* ends inside h2's */
    CU_EXPECT(cuMemUnmap(p + 3 * gran, 3 * gran), CUDA_ERROR_INVALID_VALUE); /* starts unmapped */
    CU_EXPECT(cuMemUnmap(p + 4 * gran, 4 * gran), CUDA_ERROR_INVALID_VALUE); /* ends unmapped */
    CU_EXPECT(cuMemUnmap(p, (size_t)0 - p), CUDA_ERROR_INVALID_VALUE);       /* wraps around */
    CUmemAccessDesc ro = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READ};
    CU_EXPECT(cuMemSetAccess(p, (size_t)0 - p, &ro, 1), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemUnmap(p, 3 * gran)); /* h's and h2's together */
    CU_EXPECT(cuMemUnmap(p, gran), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemRelease(h2));
    CU_OK(cuMemRelease(h));
    CU_OK(cuMemUnmap(p + 4 * gran, 2 * gran));
    CU_OK(cuMemAddressFree(p, 8 * gran));
    size_t res = 9, alloc = 9, maps = 9;
    void (*counts)(size_t *, size_t *, size_t *) =
        (void (*)(size_t *, size_t *, size_t *))simtest_sim_sym("cucacheSimVmmCounts");
    assert_non_null(counts);
    counts(&res, &alloc, &maps);
    assert_int_equal(res, 0);
    assert_int_equal(alloc, 0);
    assert_int_equal(maps, 0);
}

static void test_access(void **state)
{
    (void)state;
    size_t n = 2 * gran;
    CUdeviceptr p = reserve(n);
    CUmemGenericAllocationHandle h = create(n, 0);
    CU_OK(cuMemMap(p, n, 0, h, 0));
    unsigned char buf[64] = {1};
    /* mapped, not yet accessible: copies and memsets fail as on a GPU */
    SIM_EXPECT(cudaMemcpy((void *)(uintptr_t)p, buf, sizeof buf, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemcpy(buf, (void *)(uintptr_t)p, sizeof buf, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    CU_EXPECT(cuMemsetD8_v2(p, 1, 16), CUDA_ERROR_INVALID_VALUE);
    unsigned long long flags = 9;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CU_OK(cuMemGetAccess(&flags, &loc, p + 100));
    assert_int_equal(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    /* the rules of cuMemSetAccess */
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READ};
    CU_EXPECT(cuMemSetAccess(p, gran, &d, 1), CUDA_ERROR_INVALID_VALUE);  /* part of a mapping */
    CU_EXPECT(cuMemSetAccess(p, 2 * n, &d, 1), CUDA_ERROR_INVALID_VALUE); /* beyond it */
    CU_EXPECT(cuMemSetAccess(p, n, &d, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemSetAccess(p, n, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    CUmemAccessDesc bad = {{CU_MEM_LOCATION_TYPE_DEVICE, 5}, CU_MEM_ACCESS_FLAGS_PROT_READ};
    CU_EXPECT(cuMemSetAccess(p, n, &bad, 1), CUDA_ERROR_INVALID_DEVICE);
    bad = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, 0}, (CUmemAccess_flags)2};
    CU_EXPECT(cuMemSetAccess(p, n, &bad, 1), CUDA_ERROR_INVALID_VALUE);
    /* read-only: reads work, writes do not */
    CU_OK(cuMemSetAccess(p, n, &d, 1));
    CU_OK(cuMemGetAccess(&flags, &loc, p));
    assert_int_equal(flags, CU_MEM_ACCESS_FLAGS_PROT_READ);
    SIM_OK(cudaMemcpy(buf, (void *)(uintptr_t)p, sizeof buf, cudaMemcpyDeviceToHost));
    SIM_EXPECT(cudaMemcpy((void *)(uintptr_t)p, buf, sizeof buf, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    CU_EXPECT(cuMemsetD8_v2(p, 1, 16), CUDA_ERROR_INVALID_VALUE);
    unsigned acc = 9;
    CU_OK(cuPointerGetAttribute(&acc, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, p));
    assert_int_equal(acc, CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ);
    /* read-write */
    set_access(p, n, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    fill(p, n, 3);
    check(p, n, 3, 0);
    /* a new mapping starts inaccessible again */
    CU_OK(cuMemUnmap(p, n));
    CU_OK(cuMemMap(p, n, 0, h, 0));
    CU_EXPECT(cuMemsetD8_v2(p, 1, 16), CUDA_ERROR_INVALID_VALUE);
    set_access(p, n, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    check(p, n, 3, 0); /* the same physical memory: the bytes stayed */
    CU_OK(cuMemRelease(h));
    unmap_free(p, n);
    CU_EXPECT(cuMemGetAccess(&flags, &loc, p), CUDA_ERROR_INVALID_VALUE);
}

static void test_aliases_and_spans(void **state)
{
    (void)state;
    size_t n = 2 * gran;
    CUmemGenericAllocationHandle h;
    CUdeviceptr a = map_new(n, &h);
    CUdeviceptr b = reserve(n);
    CU_OK(cuMemMap(b, n, 0, h, 0));
    set_access(b, n, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CU_OK(cuMemRelease(h));
    fill(a, n, 5);
    check(b, n, 5, 0); /* the same bytes through the other address */
    CU_OK(cuMemsetD8_v2(b + 10, 0x5a, 1));
    unsigned char byte = 0;
    SIM_OK(cudaMemcpy(&byte, (void *)(uintptr_t)(a + 10), 1, cudaMemcpyDeviceToHost));
    assert_int_equal(byte, 0x5a);
    /* aliases: same physical block, own buffer ids */
    unsigned long long ba = 0, bb = 0, ia = 0, ib = 0;
    CU_OK(cuPointerGetAttribute(&ba, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, a));
    CU_OK(cuPointerGetAttribute(&bb, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, b));
    CU_OK(cuPointerGetAttribute(&ia, CU_POINTER_ATTRIBUTE_BUFFER_ID, a));
    CU_OK(cuPointerGetAttribute(&ib, CU_POINTER_ATTRIBUTE_BUFFER_ID, b));
    assert_true(ba == bb && ia != ib);
    unmap_free(b, n);
    check(a + 16, n - 16, 5, 16); /* the other alias still holds the memory */
    unmap_free(a, n);

    /* one copy across two adjacent mappings of different allocations */
    CUdeviceptr r = reserve(2 * n);
    CUmemGenericAllocationHandle h1 = create(n, 0), h2 = create(n, 0);
    CU_OK(cuMemMap(r, n, 0, h1, 0));
    CU_OK(cuMemMap(r + n, n, 0, h2, 0));
    set_access(r, 2 * n, CU_MEM_ACCESS_FLAGS_PROT_READWRITE); /* one call over both */
    fill(r + n / 2, n, 7);
    check(r + n / 2, n, 7, 0);
    CU_OK(cuMemRelease(h1));
    CU_OK(cuMemRelease(h2));
    CU_OK(cuMemUnmap(r + n, n));
    /* the copy no longer fits in mapped memory */
    SIM_EXPECT(cudaMemset((void *)(uintptr_t)(r + n / 2), 0, n), cudaErrorInvalidValue);
    CU_OK(cuMemUnmap(r, n));
    CU_EXPECT(cuMemAddressFree(r, n), CUDA_ERROR_INVALID_VALUE); /* not as reserved */
    CU_OK(cuMemAddressFree(r, 2 * n));
}

static void test_race_through_alias(void **state)
{
    (void)state;
    size_t n = gran;
    CUmemGenericAllocationHandle h;
    CUdeviceptr a = map_new(n, &h);
    CUdeviceptr b = reserve(n);
    CU_OK(cuMemMap(b, n, 0, h, 0));
    set_access(b, n, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CU_OK(cuMemRelease(h));
    cudaStream_t s1, s2;
    SIM_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    SIM_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    unsigned long (*count)(void) = (unsigned long (*)(void))simtest_sim_sym("cucacheSimRaceCount");
    size_t (*last)(char *, size_t) = (size_t(*)(char *, size_t))simtest_sim_sym("cucacheSimLastRace");
    assert_non_null(count);
    unsigned long before = count();
    /* ordered by an event: no race */
    cudaEvent_t e;
    SIM_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    SIM_OK(cudaMemsetAsync((void *)(uintptr_t)a, 1, 256, s1));
    SIM_OK(cudaEventRecord(e, s1));
    SIM_OK(cudaStreamWaitEvent(s2, e, 0));
    SIM_OK(cudaMemsetAsync((void *)(uintptr_t)(b + 128), 2, 256, s2));
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(count(), before);
    /* unordered, through the other alias: a race */
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s1);
    SIM_OK(cudaMemsetAsync((void *)(uintptr_t)a, 3, 256, s1));
    SIM_OK(cudaMemsetAsync((void *)(uintptr_t)(b + 128), 4, 256, s2));
    simtest_gate_open(g);
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(count(), before + 1);
    char text[1024];
    last(text, sizeof text);
    assert_non_null(strstr(text, "cuMemCreate handle"));
    /* the report names the addresses of both aliases */
    char where[64];
    snprintf(where, sizeof where, "[0x%lx,", (unsigned long)(b + 128));
    assert_non_null(strstr(text, where));
    snprintf(where, sizeof where, "[0x%lx,", (unsigned long)(a + 128));
    assert_non_null(strstr(text, where));
    SIM_OK(cudaEventDestroy(e));
    SIM_OK(cudaStreamDestroy(s1));
    SIM_OK(cudaStreamDestroy(s2));
    unmap_free(a, n);
    unmap_free(b, n);
}

static void test_unmap_under_queued_work(void **state)
{
    (void)state;
    size_t n = gran;
    unsigned long (*count)(void) = (unsigned long (*)(void))simtest_sim_sym("cucacheSimRaceCount");
    size_t (*last)(char *, size_t) = (size_t(*)(char *, size_t))simtest_sim_sym("cucacheSimLastRace");
    cudaStream_t s;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned long before = count();
    /* the host waited for the work: no race */
    CUdeviceptr p = map_new(n, NULL);
    SIM_OK(cudaMemsetAsync((void *)(uintptr_t)p, 1, n, s));
    SIM_OK(cudaStreamSynchronize(s));
    unmap_free(p, n);
    assert_int_equal(count(), before);
    /* work still queued when the pages go: a race, and the unmap waits for it */
    p = map_new(n, NULL);
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    SIM_OK(cudaMemsetAsync((void *)(uintptr_t)p, 1, n, s));
    simtest_gate_open_after(g, 50);
    CU_OK(cuMemUnmap(p, n));
    assert_int_equal(count(), before + 1);
    char text[1024];
    last(text, sizeof text);
    assert_non_null(strstr(text, "cuMemUnmap takes it away while memset"));
    assert_true(simtest_gate_passed(g));
    CU_OK(cuMemAddressFree(p, n));
    SIM_OK(cudaStreamDestroy(s));
}

/* Unmapping one alias while work through the other is queued is not a race
 * (the other mapping keeps the memory), and nothing waits for it. */
static void test_unmap_alias_of_busy_memory(void **state)
{
    (void)state;
    size_t n = gran;
    unsigned long (*count)(void) = (unsigned long (*)(void))simtest_sim_sym("cucacheSimRaceCount");
    CUmemGenericAllocationHandle h;
    CUdeviceptr a = map_new(n, &h);
    CUdeviceptr b = reserve(n);
    CU_OK(cuMemMap(b, n, 0, h, 0));
    CU_OK(cuMemRelease(h));
    cudaStream_t s;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned long before = count();
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    SIM_OK(cudaMemsetAsync((void *)(uintptr_t)a, 1, n, s));
    unmap_free(b, n); /* returns with the gate still closed */
    assert_false(simtest_gate_passed(g));
    assert_int_equal(count(), before);
    simtest_gate_open(g);
    SIM_OK(cudaStreamSynchronize(s));
    check_byte(a, n, 1);
    /* taking access away waits for the queued work on it (no fault) */
    simtest_gate_t *g2 = simtest_gate_new();
    simtest_gate_block(g2, s);
    SIM_OK(cudaMemsetAsync((void *)(uintptr_t)a, 2, n, s));
    simtest_gate_open_after(g2, 50);
    set_access(a, n, CU_MEM_ACCESS_FLAGS_PROT_READ);
    assert_true(simtest_gate_passed(g2));
    check_byte(a, n, 2);
    /* a simulated kernel may read read-only memory, not write it */
    CUresult (*launch)(CUstream, void (*)(void *), void *, const struct cucache_sim_access *, unsigned) =
        (CUresult(*)(CUstream, void (*)(void *), void *, const struct cucache_sim_access *, unsigned))simtest_sim_sym(
            "cucacheSimLaunch");
    assert_non_null(launch);
    struct cucache_sim_access w = {(void *)(uintptr_t)a, 64, 1}, r = {(void *)(uintptr_t)a, 64, 0};
    CU_EXPECT(launch((CUstream)s, simtest_mark_fn, simtest_mark_new(), &w, 1), CUDA_ERROR_INVALID_VALUE);
    CU_OK(launch((CUstream)s, simtest_mark_fn, simtest_mark_new(), &r, 1));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaStreamDestroy(s));
    unmap_free(a, n);
}

/* A captured graph launched after its memory was unmapped faults (in a
 * context of its own: the fault is sticky). */
static void test_graph_after_unmap_faults(void **state)
{
    (void)state;
    CUcontext own;
    CU_OK(cuCtxCreate_v2(&own, 0, dev));
    size_t n = gran;
    CUdeviceptr p = map_new(n, NULL);
    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUgraph graph;
    CUgraphExec exec;
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU_OK(cuMemsetD8Async(p, 7, n, s));
    CU_OK(cuStreamEndCapture(s, &graph));
    CU_OK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    CU_OK(cuGraphLaunch(exec, s));
    CU_OK(cuStreamSynchronize(s));
    check_byte(p, n, 7);
    unmap_free(p, n);
    CU_OK(cuGraphLaunch(exec, s));
    CU_EXPECT(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
    (void)cuGraphExecDestroy(exec);
    (void)cuGraphDestroy(graph);
    CU_OK(cuCtxDestroy_v2(own));
    CU_OK(cuCtxSetCurrent(ctx));
}

/* Memory released while a descriptor exported from it is still open stays
 * charged until the descriptor closes; imported again meanwhile, it is the
 * same memory. */
static void test_exported_memory_outlives_release(void **state)
{
    (void)state;
    size_t before = free_bytes();
    CUmemGenericAllocationHandle h = create(2 * gran, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    int fd = -1;
    CU_OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CU_OK(cuMemRelease(h));
    assert_int_equal(free_bytes(), before - 2 * gran); /* the descriptor keeps it */
    CUmemGenericAllocationHandle i = 0;
    CU_OK(cuMemImportFromShareableHandle(&i, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    assert_int_equal(free_bytes(), before - 2 * gran); /* the same memory, charged once */
    CU_OK(cuMemRelease(i));
    close(fd);
    assert_int_equal(free_bytes(), before); /* the last descriptor closed */
}

static void test_pointer_attributes(void **state)
{
    (void)state;
    size_t n = 2 * gran;
    CUdeviceptr r = reserve(2 * n);
    CUmemGenericAllocationHandle h = create(n, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CU_OK(cuMemMap(r + n, n, 0, h, 0));
    set_access(r + n, n, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUdeviceptr p = r + n + 100;
    unsigned type = 0;
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
    assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
    CUdeviceptr start = 0;
    size_t size = 0;
    CU_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p));
    CU_OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p));
    assert_true(start == r && size == 2 * n); /* the reservation (cuda.h), not the mapping */
    CUdeviceptr mbase = 0;
    CU_OK(cuPointerGetAttribute(&mbase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, p));
    assert_true(mbase == r + n);
    CU_OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, p));
    assert_int_equal(size, n);
    CUdeviceptr base = 0;
    CU_OK(cuMemGetAddressRange_v2(&base, &size, p));
    assert_true(base == r + n && size == n);
    unsigned char c = 9;
    CU_OK(cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
    assert_int_equal(c, 0);
    CU_OK(cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_MAPPED, p));
    assert_int_equal(c, 1);
    unsigned long long types = 0;
    CU_OK(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, p));
    assert_int_equal(types, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    int ordinal = -1;
    CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    assert_int_equal(ordinal, 0);
    CUcontext owner = (CUcontext)1;
    CU_OK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p));
    assert_null(owner);
    struct cudaPointerAttributes rt;
    SIM_OK(cudaPointerGetAttributes(&rt, (void *)(uintptr_t)p));
    assert_int_equal(rt.type, cudaMemoryTypeDevice);
    assert_int_equal(rt.device, 0);
    /* the unmapped half of the reservation is unknown memory */
    CU_EXPECT(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, r), CUDA_ERROR_INVALID_VALUE);
    /* cudaMalloc's calls refuse it */
    SIM_EXPECT(cudaFree((void *)(uintptr_t)(r + n)), cudaErrorInvalidValue);
    CU_EXPECT(cuMemFree_v2(r + n), CUDA_ERROR_INVALID_VALUE);
    cudaIpcMemHandle_t ih;
    SIM_EXPECT(cudaIpcGetMemHandle(&ih, (void *)(uintptr_t)(r + n)), cudaErrorInvalidValue);
    CU_OK(cuMemsetD8_v2(r + n, 1, n)); /* and it is still there */
    CU_OK(cuCtxSynchronize());         /* (a memset of device memory does not wait) */
    CU_OK(cuMemRelease(h));
    CU_OK(cuMemUnmap(r + n, n));
    CU_OK(cuMemAddressFree(r, 2 * n));
}

static void test_retain_and_properties(void **state)
{
    (void)state;
    size_t before = free_bytes();
    size_t n = 2 * gran;
    CUmemGenericAllocationHandle h;
    CUdeviceptr p = map_new(n, &h);
    CUmemGenericAllocationHandle r = 0;
    CU_OK(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(p + n - 1)));
    assert_true(r == h);
    CUmemAllocationProp prop;
    memset(&prop, 0xff, sizeof prop);
    CU_OK(cuMemGetAllocationPropertiesFromHandle(&prop, h));
    assert_int_equal(prop.type, CU_MEM_ALLOCATION_TYPE_PINNED);
    assert_int_equal(prop.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
    assert_int_equal(prop.location.id, 0);
    assert_int_equal(prop.requestedHandleTypes, 0);
    CU_OK(cuMemRelease(h));                                  /* creation's reference */
    CU_OK(cuMemGetAllocationPropertiesFromHandle(&prop, h)); /* the retained one is left */
    CU_OK(cuMemRelease(r));
    CU_EXPECT(cuMemGetAllocationPropertiesFromHandle(&prop, h), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(free_bytes(), before - n); /* still mapped */
    /* NCCL's order: retain, release, address range, unmap, release, free */
    CU_OK(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)p));
    CU_OK(cuMemRelease(r));
    CU_OK(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)p));
    CUdeviceptr base;
    size_t size;
    CU_OK(cuMemGetAddressRange_v2(&base, &size, p));
    CU_OK(cuMemUnmap(base, size));
    CU_OK(cuMemRelease(r));
    CU_OK(cuMemAddressFree(base, size));
    assert_int_equal(free_bytes(), before);
    CU_EXPECT(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)p), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemRetainAllocationHandle(NULL, (void *)(uintptr_t)p), CUDA_ERROR_INVALID_VALUE);
}

static void test_address_free_unmaps(void **state)
{
    (void)state;
    size_t before = free_bytes();
    CUdeviceptr p = map_new(2 * gran, NULL);
    CU_OK(cuMemAddressFree(p, 2 * gran)); /* the mapping goes with it (the simulator's choice) */
    assert_int_equal(free_bytes(), before);
    CU_EXPECT(cuMemsetD8_v2(p, 1, 16), CUDA_ERROR_INVALID_VALUE);
}

static void test_export_import_same_process(void **state)
{
    (void)state;
    CUmemGenericAllocationHandle h = create(gran, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    int fd = -1;
    CU_EXPECT(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_WIN32, 0), CUDA_ERROR_NOT_SUPPORTED);
    CU_EXPECT(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1),
              CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemExportToShareableHandle(NULL, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    assert_true(fd >= 0);
    /* imported in its own process: the same allocation, one more reference */
    CUmemGenericAllocationHandle i = 0;
    CU_OK(cuMemImportFromShareableHandle(&i, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    assert_true(i == h);
    CU_OK(cuMemRelease(h));
    CU_OK(cuMemGetAllocationPropertiesFromHandle(&(CUmemAllocationProp){0}, h));
    CU_OK(cuMemRelease(i));
    close(fd);
    /* an allocation created without the type cannot be exported with it */
    h = create(gran, 0);
    CU_EXPECT(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemRelease(h));
    /* descriptors that are not exported allocations */
    int other = open("/dev/null", O_RDONLY);
    assert_true(other >= 0);
    CU_EXPECT(cuMemImportFromShareableHandle(&i, (void *)(intptr_t)other, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_ERROR_INVALID_VALUE);
    close(other);
    CU_EXPECT(cuMemImportFromShareableHandle(&i, (void *)(intptr_t)-1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemImportFromShareableHandle(&i, (void *)(intptr_t)0, CU_MEM_HANDLE_TYPE_FABRIC),
              CUDA_ERROR_NOT_SUPPORTED);
}

static void test_export_import_peer(void **state)
{
    (void)state;
    if (!peer_started) {
        peer_start(&peer);
        peer_started = true;
    }
    size_t n = 4 * gran;
    size_t before = free_bytes();
    CUdeviceptr p = reserve(n);
    CUmemGenericAllocationHandle h = create(n, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CU_OK(cuMemMap(p, n, 0, h, 0));
    set_access(p, n, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    peer_fill((void *)(uintptr_t)p, n, 1);
    int fd = -1;
    CU_OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    const char *a = peer_cmd(&peer, "vmmimport %d %d %zx", (int)getpid(), fd, n);
    unsigned long long q = 0;
    size_t qn = 0;
    if (sscanf(a, "ok %llx %zx", &q, &qn) != 2)
        fail_msg("peer: %s", a);
    assert_int_equal(qn, n);
    peer_expect(peer_cmd(&peer, "check %llx %zx 1", q, n), "ok");
    peer_expect(peer_cmd(&peer, "fill %llx %zx 2", q + gran, gran), "ok");
    peer_check((void *)(uintptr_t)(p + gran), gran, 2);
    close(fd);
    /* the exporter lets go while the peer still maps it: its bytes stay */
    CU_OK(cuMemRelease(h));
    unmap_free(p, n);
    assert_int_equal(free_bytes(), before); /* the exporter's device no longer counts it */
    peer_expect(peer_cmd(&peer, "check %llx %zx 2", q + gran, gran), "ok");
    peer_expect(peer_cmd(&peer, "vmmfree %llx", q), "ok");
}

static void test_failure_injection(void **state)
{
    (void)state;
    void (*inject)(enum cucache_sim_vmm_call, unsigned, CUresult) =
        (void (*)(enum cucache_sim_vmm_call, unsigned, CUresult))simtest_sim_sym("cucacheSimVmmFail");
    assert_non_null(inject);
    size_t before = free_bytes();
    CUdeviceptr p = reserve(4 * gran);
    CUmemGenericAllocationHandle h[3];
    for (int i = 0; i < 3; i++)
        h[i] = create(gran, 0);
    inject(CUCACHE_SIM_VMM_MAP, 1, CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemMap(p, gran, 0, h[0], 0));
    CU_EXPECT(cuMemMap(p + gran, gran, 0, h[1], 0), CUDA_ERROR_OUT_OF_MEMORY);
    CU_EXPECT(cuMemUnmap(p + gran, gran), CUDA_ERROR_INVALID_VALUE); /* nothing was mapped */
    CU_OK(cuMemMap(p + gran, gran, 0, h[1], 0));                     /* once only */
    inject(CUCACHE_SIM_VMM_CREATE, 0, CUDA_ERROR_OUT_OF_MEMORY);
    CUmemGenericAllocationHandle x = 0;
    CUmemAllocationProp prop = device_prop(0);
    CU_EXPECT(cuMemCreate(&x, gran, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    inject(CUCACHE_SIM_VMM_SET_ACCESS, 0, CUDA_ERROR_OUT_OF_MEMORY);
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU_EXPECT(cuMemSetAccess(p, 2 * gran, &d, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CU_EXPECT(cuMemsetD8_v2(p, 1, 16), CUDA_ERROR_INVALID_VALUE); /* no access was given */
    inject(CUCACHE_SIM_VMM_MAP, 0, CUDA_ERROR_OUT_OF_MEMORY);
    inject(CUCACHE_SIM_VMM_MAP, 0, CUDA_SUCCESS); /* cancelled */
    CU_OK(cuMemMap(p + 2 * gran, gran, 0, h[2], 0));
    for (int i = 0; i < 3; i++)
        CU_OK(cuMemRelease(h[i]));
    CU_OK(cuMemUnmap(p, 3 * gran));
    CU_OK(cuMemAddressFree(p, 4 * gran));
    assert_int_equal(free_bytes(), before);
}

static void test_proc_address(void **state)
{
    (void)state;
    static const char *const names[] = {
        "cuMemAddressReserve",
        "cuMemAddressFree",
        "cuMemCreate",
        "cuMemRelease",
        "cuMemMap",
        "cuMemUnmap",
        "cuMemSetAccess",
        "cuMemGetAccess",
        "cuMemExportToShareableHandle",
        "cuMemImportFromShareableHandle",
        "cuMemGetAllocationGranularity",
        "cuMemGetAllocationPropertiesFromHandle",
        "cuMemRetainAllocationHandle",
    };
    void *self = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(self);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult q;
        CU_OK(cuGetProcAddress_v2(names[i], &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
        if (fn != dlsym(self, names[i]))
            fail_msg("%s: cuGetProcAddress and dlsym disagree", names[i]);
    }
    dlclose(self);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_granularity_and_props),
        SIMTEST(test_physical_accounting),
        SIMTEST(test_reservations),
        SIMTEST(test_mapping_rules),
        SIMTEST(test_access),
        SIMTEST(test_aliases_and_spans),
        SIMTEST(test_race_through_alias),
        SIMTEST(test_unmap_under_queued_work),
        SIMTEST(test_unmap_alias_of_busy_memory),
        SIMTEST(test_graph_after_unmap_faults),
        SIMTEST(test_exported_memory_outlives_release),
        SIMTEST(test_pointer_attributes),
        SIMTEST(test_retain_and_properties),
        SIMTEST(test_address_free_unmaps),
        SIMTEST(test_export_import_same_process),
        SIMTEST(test_export_import_peer),
        SIMTEST(test_failure_injection),
        SIMTEST(test_proc_address),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
