/*
 * Proves that under cucache every CUDA call that describes a pointer
 * answers for the block as CUDA without a cache answers for an allocation
 * of that size, by every route a program reaches the driver (the exported
 * names, dlsym on libcuda.so.1, cuGetProcAddress_v2 and the runtime's
 * cudaGetDriverEntryPointByVersion) and through the runtime's
 * cudaPointerGetAttributes.  The reference is the simulated driver itself:
 * an allocation of the same size made by this program run again as a child
 * without the preload (--reference SIZE OFFSET).  For blocks of many sizes and at many offsets inside their
 * segments: the range and mapping are the block's, not the segment's; the
 * buffer id is unique, and a block handed out again at the same address
 * gets a new one; a freed block reads as freed memory (an error for
 * cuPointerGetAttribute, the defaults for cuPointerGetAttributes,
 * CUDA_ERROR_NOT_FOUND, "unregistered"), also the rounding past its
 * requested bytes; a stream-ordered block answers as pool memory; foreign
 * pointers (pinned, managed, host, another context's) and bad input
 * (NULL outputs, unknown attributes) get the driver's own answers.
 *
 * Seen to fail: with hook_ptr.c's four names left out of interpose/cucache.map
 * and of the routes in hook_lookup.c, every test but the last fails (the
 * segment's range and a shared buffer id show through, freed blocks read as
 * live).
 */
#include "itest.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef __typeof__(cuPointerGetAttribute) attr_fn;
typedef __typeof__(cuPointerGetAttributes) attrs_fn;
typedef __typeof__(cuMemGetAddressRange_v2) range_fn;

/* One route to the three driver entry points. */
typedef struct route_s {
    const char *name;
    attr_fn *attr;
    attrs_fn *attrs;
    range_fn *range;
} route_t;

static route_t routes[4];

static void *by_getproc(const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult q;
    CU_OK(cuGetProcAddress_v2(name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
    return fn;
}

static void *by_runtime(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    SIM_OK(cudaGetDriverEntryPointByVersion(name, &fn, 13000, 0, &q));
    return fn;
}

static int group_setup(void **state)
{
    if (itest_group_setup(state) != 0)
        return -1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return -1;
    routes[0] = (route_t){"exported names", cuPointerGetAttribute, cuPointerGetAttributes, cuMemGetAddressRange_v2};
    routes[1] = (route_t){"dlsym(libcuda.so.1)", (attr_fn *)dlsym(h, "cuPointerGetAttribute"),
                          (attrs_fn *)dlsym(h, "cuPointerGetAttributes"), (range_fn *)dlsym(h, "cuMemGetAddressRange_v2")};
    routes[2] = (route_t){"cuGetProcAddress_v2", (attr_fn *)by_getproc("cuPointerGetAttribute"),
                          (attrs_fn *)by_getproc("cuPointerGetAttributes"), (range_fn *)by_getproc("cuMemGetAddressRange")};
    routes[3] = (route_t){"cudaGetDriverEntryPointByVersion", (attr_fn *)by_runtime("cuPointerGetAttribute"),
                          (attrs_fn *)by_runtime("cuPointerGetAttributes"),
                          (range_fn *)by_runtime("cuMemGetAddressRange")};
    for (int i = 0; i < 4; i++)
        if (!routes[i].attr || !routes[i].attrs || !routes[i].range)
            return -1;
    return 0;
}

/* Every attribute, one call. */
typedef struct attrs_s {
    unsigned type, access;
    int ordinal;
    unsigned char mapped, ipc, rdma, managed;
    unsigned long long id, block;
    CUdeviceptr start, map_base;
    size_t size, map_size;
    CUmemoryPool pool;
} attrs_t;

static CUresult attrs_get(const route_t *r, CUdeviceptr p, attrs_t *a)
{
    memset(a, 0x5c, sizeof *a);
    CUpointer_attribute which[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,       CU_POINTER_ATTRIBUTE_ACCESS_FLAGS,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,    CU_POINTER_ATTRIBUTE_MAPPED,
        CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE,
        CU_POINTER_ATTRIBUTE_IS_MANAGED,        CU_POINTER_ATTRIBUTE_BUFFER_ID,
        CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID,   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        CU_POINTER_ATTRIBUTE_MAPPING_SIZE,      CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
    };
    void *data[] = {&a->type,  &a->access,   &a->ordinal, &a->mapped,   &a->ipc,  &a->rdma,     &a->managed,
                    &a->id,    &a->block,    &a->start,   &a->map_base, &a->size, &a->map_size, &a->pool};
    return r->attrs(sizeof which / sizeof which[0], which, data, p);
}

/* The attributes as one line of text, and back (the child's answer). */
#define ATTRS_FMT "%u %u %d %hhu %hhu %hhu %hhu %llu %llu %llu %llu %zu %zu %p %d"

/* The child (--reference SIZE OFFSET, run without the preload): the
 * simulated driver's answers for a SIZE-byte allocation at OFFSET, live
 * and freed, and the single query's result once freed, on stdout. */
static int reference_child(size_t size, size_t off)
{
    CUdevice dev;
    CUcontext ctx = NULL;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 2;
    route_t r = {"exported names", cuPointerGetAttribute, cuPointerGetAttributes, cuMemGetAddressRange_v2};
    CUdeviceptr p = 0;
    attrs_t live, freed;
    if (cuMemAlloc_v2(&p, size) != CUDA_SUCCESS || attrs_get(&r, p + off, &live) != CUDA_SUCCESS ||
        cuMemFree_v2(p) != CUDA_SUCCESS || attrs_get(&r, p + off, &freed) != CUDA_SUCCESS)
        return 3;
    unsigned long long id;
    CUresult single = cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p + off);
    const attrs_t *a[] = {&live, &freed}; /* the live range relative to p, as the parent's blocks are */
    for (int i = 0; i < 2; i++)
        printf(ATTRS_FMT "\n", a[i]->type, a[i]->access, a[i]->ordinal, a[i]->mapped, a[i]->ipc, a[i]->rdma,
               a[i]->managed, a[i]->id, a[i]->block, a[i]->start - (i ? 0 : p), a[i]->map_base - (i ? 0 : p),
               a[i]->size, a[i]->map_size, (void *)a[i]->pool, (int)single);
    return 0;
}

static void reference_parse(const char *line, attrs_t *a, CUresult *single)
{
    memset(a, 0, sizeof *a);
    void *pool = NULL;
    int r = 0;
    int n = sscanf(line, ATTRS_FMT, &a->type, &a->access, &a->ordinal, &a->mapped, &a->ipc, &a->rdma, &a->managed,
                   &a->id, &a->block, &a->start, &a->map_base, &a->size, &a->map_size, &pool, &r);
    if (n != 15)
        fail_msg("the reference child's line \"%s\" has %d fields, not 15", line, n);
    a->pool = (CUmemoryPool)pool;
    *single = (CUresult)r;
}

/* The simulated driver's own answers for a `size`-byte allocation at
 * offset `off`, asked of a child without cucache.  Its addresses and ids
 * are its own; the rest must match. */
static void reference(size_t size, size_t off, attrs_t *live, attrs_t *freed, CUresult *freed_single)
{
    char sz[32], of[32];
    snprintf(sz, sizeof sz, "%zu", size);
    snprintf(of, sizeof of, "%zu", off);
    const char *argv[] = {"test_interpose_pointer", "--reference", sz, of, NULL};
    const char *unset[] = {"LD_PRELOAD", NULL};
    static itest_run_t run;
    itest_spawn("/proc/self/exe", argv, NULL, unset, 30000, &run);
    itest_expect_exit(&run, 0);
    char *second = strchr(run.out, '\n');
    if (!second)
        fail_msg("the reference child printed \"%s\"", run.out);
    CUresult unused;
    reference_parse(run.out, live, &unused);
    reference_parse(second + 1, freed, freed_single);
}

static void expect_same(const attrs_t *got, const attrs_t *want, const char *what, const char *route, size_t size)
{
#define SAME(f)                                                                                                        \
    if (got->f != want->f)                                                                                             \
        fail_msg("%s, %zu bytes, by %s: " #f " is %llu, CUDA without cucache answers %llu", what, size, route,        \
                 (unsigned long long)got->f, (unsigned long long)want->f);
    SAME(type)
    SAME(access)
    SAME(ordinal)
    SAME(mapped)
    if (itest_expandable()) {
        /* CUDA's virtual memory, which expandable segments are: no legacy
         * IPC (cudaIpcGetMemHandle refuses it, as cucache does), and RDMA
         * only where the device supports it for such memory */
        int rdma = 0;
        CU_OK(cuDeviceGetAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0));
        if (got->ipc != 0 || got->rdma != (unsigned)(rdma != 0))
            fail_msg("%s, %zu bytes, by %s: ipc %u rdma %u; virtual memory answers 0 and %d", what, size, route,
                     (unsigned)got->ipc, (unsigned)got->rdma, rdma != 0);
    } else {
        SAME(ipc)
        SAME(rdma)
    }
    SAME(managed)
    SAME(start)
    SAME(map_base)
    SAME(size)
    SAME(map_size)
#undef SAME
}

static const size_t sizes[] = {1, 100, 512, 1000, 4097, 65536, 1000000, 1 << 20, (1 << 20) + 1, 3 << 20, 12345678};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };

static void test_live_blocks_by_every_route(void **state)
{
    (void)state;
    itest_require_cucache();
    void *keep[NSIZES], *p[NSIZES];
    for (size_t i = 0; i < NSIZES; i++) {
        /* a neighbour first, so most blocks lie inside their segment */
        SIM_OK(cudaMalloc(&keep[i], sizes[i]));
        SIM_OK(cudaMalloc(&p[i], sizes[i]));
    }
    for (size_t i = 0; i < NSIZES; i++) {
        size_t offs[] = {0, sizes[i] / 2, sizes[i] - 1};
        for (size_t k = 0; k < 3; k++) {
            attrs_t want, freed;
            CUresult single;
            reference(sizes[i], offs[k], &want, &freed, &single);
            want.start = (CUdeviceptr)(uintptr_t)p[i];
            want.map_base = (CUdeviceptr)(uintptr_t)p[i];
            for (int r = 0; r < 4; r++) {
                attrs_t got;
                CU_OK(attrs_get(&routes[r], (CUdeviceptr)(uintptr_t)p[i] + offs[k], &got));
                expect_same(&got, &want, "a live block", routes[r].name, sizes[i]);
                assert_int_equal(got.id, got.block);
                assert_null(got.pool);
                CUdeviceptr base = 0;
                size_t size = 0;
                CU_OK(routes[r].range(&base, &size, (CUdeviceptr)(uintptr_t)p[i] + offs[k]));
                assert_int_equal(base, (CUdeviceptr)(uintptr_t)p[i]);
                assert_int_equal(size, sizes[i]);
                unsigned long long id = 0;
                CU_OK(routes[r].attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)p[i] + offs[k]));
                assert_int_equal(id, got.id);
            }
        }
    }
    /* every block has its own id */
    for (size_t i = 0; i < NSIZES; i++)
        for (size_t j = 0; j < NSIZES; j++) {
            attrs_t a, b;
            CU_OK(attrs_get(&routes[0], (CUdeviceptr)(uintptr_t)p[i], &a));
            CU_OK(attrs_get(&routes[0], (CUdeviceptr)(uintptr_t)keep[j], &b));
            assert_true(a.id != b.id);
        }
    for (size_t i = 0; i < NSIZES; i++) {
        SIM_OK(cudaFree(p[i]));
        SIM_OK(cudaFree(keep[i]));
    }
    SIM_OK(cudaDeviceSynchronize());
}

static void test_freed_blocks_read_as_freed(void **state)
{
    (void)state;
    itest_require_cucache();
    for (size_t i = 0; i < NSIZES; i++) {
        void *keep = NULL, *p = NULL;
        SIM_OK(cudaMalloc(&keep, sizes[i]));
        SIM_OK(cudaMalloc(&p, sizes[i]));
        attrs_t want_live, want, got;
        CUresult want_single;
        reference(sizes[i], 0, &want_live, &want, &want_single);
        SIM_OK(cudaFree(p)); /* pending behind its fence, then cached */
        for (int stage = 0; stage < 2; stage++) {
            for (int r = 0; r < 4; r++) {
                CU_OK(attrs_get(&routes[r], (CUdeviceptr)(uintptr_t)p, &got));
                expect_same(&got, &want, stage ? "a cached block" : "a pending block", routes[r].name, sizes[i]);
                assert_int_equal(got.id, 0);
                unsigned long long id = 0;
                CU_EXPECT(routes[r].attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)p), want_single);
                CUdeviceptr base;
                size_t size;
                CU_EXPECT(routes[r].range(&base, &size, (CUdeviceptr)(uintptr_t)p), CUDA_ERROR_NOT_FOUND);
            }
            struct cudaPointerAttributes pa;
            SIM_OK(cudaPointerGetAttributes(&pa, p));
            assert_int_equal(pa.type, cudaMemoryTypeUnregistered);
            assert_int_equal(pa.device, -2);
            assert_ptr_equal(pa.hostPointer, p);
            assert_null(pa.devicePointer);
            SIM_OK(cudaDeviceSynchronize());
        }
        SIM_OK(cudaFree(keep));
    }
    /* the rounding past a block's requested bytes is not the allocation */
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 1000));
    attrs_t got;
    CU_OK(attrs_get(&routes[0], (CUdeviceptr)(uintptr_t)p + 1000, &got));
    assert_int_equal(got.type, 0);
    assert_int_equal(got.ordinal, -2);
    SIM_OK(cudaFree(p));
}

/* A dma-buf of a block (cuMemGetHandleForAddressRange): its own range, or
 * part of it, is exported; a range past its end (the rest of cucache's
 * segment, another block's memory, which the driver would accept) and a
 * freed block are refused as CUDA refuses a range outside an allocation.
 * Seen to fail (the range past the end exported) without the hook. */
static void test_dma_buf_of_a_block(void **state)
{
    (void)state;
    itest_require_cucache();
    if (itest_expandable())
        skip(); /* the simulator exports one mapping only: expandable pages are several */
    const CUmemRangeHandleType dmabuf = CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD;
    void *p = NULL, *keep = NULL;
    SIM_OK(cudaMalloc(&p, 4 * MIB));
    SIM_OK(cudaMalloc(&keep, 4 * MIB)); /* p's neighbour in the same segment */
    assert_ptr_equal(keep, (char *)p + 4 * MIB);
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
    int fd = -1;
    CU_OK(cuMemGetHandleForAddressRange(&fd, d, 4 * MIB, dmabuf, 0));
    assert_int_equal(close(fd), 0);
    CU_OK(cuMemGetHandleForAddressRange(&fd, d + 2 * MIB, 2 * MIB, dmabuf, 0));
    assert_int_equal(close(fd), 0);
    CU_EXPECT(cuMemGetHandleForAddressRange(&fd, d, 8 * MIB, dmabuf, 0), CUDA_ERROR_INVALID_VALUE);
    SIM_OK(cudaFree(p));
    CU_EXPECT(cuMemGetHandleForAddressRange(&fd, d, 4 * MIB, dmabuf, 0), CUDA_ERROR_INVALID_VALUE);
    SIM_OK(cudaFree(keep));
}

/* A block handed out again at the same address is a new allocation. */
static void test_reuse_changes_the_buffer_id(void **state)
{
    (void)state;
    itest_require_cucache();
    void *p = NULL, *q = NULL;
    unsigned long long ids[8];
    SIM_OK(cudaMalloc(&p, 3000));
    void *first = p;
    for (int k = 0; k < 8; k++) {
        CU_OK(cuPointerGetAttribute(&ids[k], CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)p));
        for (int j = 0; j < k; j++)
            assert_true(ids[j] != ids[k]);
        SIM_OK(cudaFree(p));
        SIM_OK(cudaDeviceSynchronize());
        SIM_OK(cudaMalloc(&q, 3000));
        assert_ptr_equal(q, first); /* the cache hands the same block out again */
        p = q;
    }
    SIM_OK(cudaFree(p));
}

/* cudaMallocAsync memory answers as CUDA's pool memory does. */
static void test_stream_ordered_block(void **state)
{
    (void)state;
    itest_require_cucache();
    void *p = NULL;
    SIM_OK(cudaMallocAsync(&p, 5000, cudaStreamLegacy));
    attrs_t got;
    CU_OK(attrs_get(&routes[0], (CUdeviceptr)(uintptr_t)p + 10, &got));
    CUmemoryPool pool = NULL;
    SIM_OK(cudaDeviceGetMemPool(&pool, 0));
    assert_ptr_equal(got.pool, pool);
    assert_int_equal(got.ipc, 0);
    assert_int_equal(got.size, 5000);
    assert_int_equal(got.start, (CUdeviceptr)(uintptr_t)p);
    CUDA_POINTER_ATTRIBUTE_P2P_TOKENS t;
    CU_EXPECT(cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_P2P_TOKENS, (CUdeviceptr)(uintptr_t)p),
              CUDA_ERROR_INVALID_VALUE);
    SIM_OK(cudaFreeAsync(p, cudaStreamLegacy));
    SIM_OK(cudaStreamSynchronize(cudaStreamLegacy));
}

/* What cucache did not allocate is the driver's to describe, and bad
 * input gets the driver's codes. */
static void test_foreign_pointers_and_bad_input(void **state)
{
    (void)state;
    void *pinned = NULL, *managed = NULL;
    SIM_OK(cudaMallocHost(&pinned, 4096));
    SIM_OK(cudaMallocManaged(&managed, 4096, cudaMemAttachGlobal));
    attrs_t a;
    CU_OK(attrs_get(&routes[0], (CUdeviceptr)(uintptr_t)pinned, &a));
    assert_int_equal(a.type, CU_MEMORYTYPE_HOST);
    assert_int_equal(a.size, 4096);
    CU_OK(attrs_get(&routes[0], (CUdeviceptr)(uintptr_t)managed, &a));
    assert_int_equal(a.managed, 1);
    int local = 0;
    CU_OK(attrs_get(&routes[0], (CUdeviceptr)(uintptr_t)&local, &a));
    assert_int_equal(a.type, 0);
    CUdeviceptr base;
    size_t size;
    CU_OK(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)pinned));
    assert_int_equal(base, (CUdeviceptr)(uintptr_t)pinned);
    assert_int_equal(size, 4096);
    struct cudaPointerAttributes pa;
    SIM_OK(cudaPointerGetAttributes(&pa, &local));
    assert_int_equal(pa.type, cudaMemoryTypeUnregistered);
    SIM_OK(cudaFreeHost(pinned));
    SIM_OK(cudaFree(managed));

    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 1000));
    CU_EXPECT(cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)p),
              CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuPointerGetAttribute(&size, (CUpointer_attribute)99, (CUdeviceptr)(uintptr_t)p),
              CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuPointerGetAttributes(1, NULL, NULL, (CUdeviceptr)(uintptr_t)p), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemGetAddressRange_v2(NULL, NULL, (CUdeviceptr)(uintptr_t)p + 5));
    SIM_EXPECT(cudaPointerGetAttributes(NULL, p), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    /* another context's allocation is the driver's */
    CUcontext created = NULL, popped = NULL;
    CUdevice dev;
    CU_OK(cuDeviceGet(&dev, 0));
    CU_OK(cuCtxCreate_v2(&created, 0, dev));
    CUdeviceptr other = 0;
    CU_OK(cuMemAlloc_v2(&other, 3 << 20));
    CU_OK(cuMemGetAddressRange_v2(&base, &size, other + 100));
    assert_int_equal(base, other);
    assert_int_equal(size, 3 << 20);
    CU_OK(cuMemFree_v2(other));
    CU_OK(cuCtxPopCurrent_v2(&popped));
    CU_OK(cuCtxDestroy_v2(created));
    SIM_OK(cudaFree(p));
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--reference") == 0)
        return reference_child(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10));
    const struct CMUnitTest tests[] = {
        ITEST(test_live_blocks_by_every_route),
        ITEST(test_freed_blocks_read_as_freed),
        ITEST(test_reuse_changes_the_buffer_id),
        ITEST(test_dma_buf_of_a_block),
        ITEST(test_stream_ordered_block),
        ITEST(test_foreign_pointers_and_bad_input),
    };
    return ITEST_RUN("interpose.pointer", tests, group_setup);
}
