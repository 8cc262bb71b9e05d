/*
 * Proves that the simulated driver describes memory as CUDA does, for the
 * libraries that act on the answers (NCCL, UCX, MPI register buffers by
 * range and buffer id; numba's driver binding asks for host registration,
 * device pointers of pinned memory, stream callbacks and device attributes):
 *
 *   - cuPointerGetAttribute(s) and cuMemGetAddressRange on device, pool,
 *     pinned, registered and managed memory, at the start and inside, every
 *     attribute of CUDA 13.0; unknown and freed memory as CUDA answers it
 *     (an error for the single query, defaults for the array form);
 *   - BUFFER_ID unique per allocation and never reused, also for a new
 *     allocation at a freed one's address;
 *   - cuPointerSetAttribute(SYNC_MEMOPS), and the P2P_TOKENS side effect;
 *   - pinned memory through its device pointer: its range, and memsets
 *     (numba sizes and clears mapped arrays that way);
 *   - cuMemHostRegister/Unregister and cuMemHostGetDevicePointer, with
 *     CUDA's codes for overlaps, device memory, unmapped ranges and
 *     unknown flags;
 *   - cuMemFree and cuMemFreeHost with no context current (unified
 *     addressing finds the allocation);
 *   - cuStreamAddCallback: in stream order, with the stream as given, once,
 *     and with the context's error after a fault;
 *   - every device attribute up to CU_DEVICE_ATTRIBUTE_MAX answers.
 * Meson runs it with CUCACHE_SIM_CAPACITY=1G.
 */
#include "simtest.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static CUdevice dev;
static CUcontext ctx;

static int setup(void **state)
{
    (void)state;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return -1;
    return 0;
}

static unsigned long long buffer_id(CUdeviceptr p)
{
    unsigned long long id = 0;
    CU_OK(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
    return id;
}

/* Every attribute of one pointer through cuPointerGetAttributes. */
typedef struct attrs_s {
    CUcontext context;
    unsigned type;
    CUdeviceptr dptr;
    void *hptr;
    unsigned char sync, managed, ipc, mapped, rdma, decompress;
    unsigned long long id, block, handles;
    int ordinal;
    CUdeviceptr start, map_base;
    size_t size, map_size;
    unsigned access;
    CUmemoryPool pool;
} attrs_t;

static CUresult attrs_get(CUdeviceptr p, attrs_t *a)
{
    memset(a, 0x5c, sizeof *a); /* nothing stays as it was */
    CUpointer_attribute which[] = {
        CU_POINTER_ATTRIBUTE_CONTEXT,           CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        CU_POINTER_ATTRIBUTE_DEVICE_POINTER,    CU_POINTER_ATTRIBUTE_HOST_POINTER,
        CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,       CU_POINTER_ATTRIBUTE_BUFFER_ID,
        CU_POINTER_ATTRIBUTE_IS_MANAGED,        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CU_POINTER_ATTRIBUTE_RANGE_SIZE,        CU_POINTER_ATTRIBUTE_MAPPED,
        CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE,
        CU_POINTER_ATTRIBUTE_ACCESS_FLAGS,      CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
        CU_POINTER_ATTRIBUTE_MAPPING_SIZE,      CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
        CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID,   CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE,
    };
    void *data[] = {&a->context, &a->type,    &a->dptr,  &a->hptr,    &a->sync,     &a->id,     &a->managed,
                    &a->ordinal, &a->ipc,     &a->start, &a->size,    &a->mapped,   &a->handles, &a->rdma,
                    &a->access,  &a->pool,    &a->map_size, &a->map_base, &a->block, &a->decompress};
    /* booleans are one byte: clear the bytes after them so the checks
     * below see what the driver wrote */
    return cuPointerGetAttributes(sizeof which / sizeof which[0], which, data, p);
}

static void test_device_memory(void **state)
{
    (void)state;
    CUdeviceptr p = 0;
    CU_OK(cuMemAlloc_v2(&p, 1000));
    attrs_t a;
    CU_OK(attrs_get(p + 100, &a));
    assert_ptr_equal(a.context, ctx);
    assert_int_equal(a.type, CU_MEMORYTYPE_DEVICE);
    assert_int_equal(a.dptr, p + 100);
    assert_null(a.hptr);
    assert_int_equal(a.sync, 0);
    assert_int_equal(a.managed, 0);
    assert_int_equal(a.ordinal, 0);
    assert_int_equal(a.ipc, 1);
    assert_int_equal(a.start, p);
    assert_int_equal(a.size, 1000);
    assert_int_equal(a.mapped, 1);
    assert_int_equal(a.handles, 0);
    assert_int_equal(a.rdma, 1);
    assert_int_equal(a.access, CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
    assert_null(a.pool);
    assert_int_equal(a.map_base, p);
    assert_int_equal(a.map_size, 1024);
    assert_int_equal(a.block, a.id);
    assert_int_equal(a.decompress, 0);
    assert_int_equal(a.id, buffer_id(p + 999));

    CUdeviceptr base = 0;
    size_t size = 0;
    CU_OK(cuMemGetAddressRange_v2(&base, &size, p + 999));
    assert_int_equal(base, p);
    assert_int_equal(size, 1000);
    CU_OK(cuMemGetAddressRange_v2(NULL, &size, p)); /* either output may be NULL */
    CU_EXPECT(cuMemGetAddressRange_v2(&base, &size, p + 1000), CUDA_ERROR_NOT_FOUND); /* one past the end */
    void *host = NULL;
    CU_EXPECT(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, p), CUDA_ERROR_INVALID_VALUE);

    /* a large allocation maps whole pages */
    CUdeviceptr big = 0;
    CU_OK(cuMemAlloc_v2(&big, 3 * MIB));
    size_t mapping = 0;
    CU_OK(cuPointerGetAttribute(&mapping, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, big + MIB));
    assert_int_equal(mapping, 4 * MIB);
    CU_OK(cuMemFree_v2(big));
    CU_OK(cuMemFree_v2(p));
}

/* A freed allocation is unknown memory; a new one at its address has a new
 * buffer id, as CUDA promises (MPI and UCX invalidate their registration
 * caches on exactly that). */
static void test_freed_memory_and_buffer_ids(void **state)
{
    (void)state;
    CUdeviceptr p = 0, q = 0, other = 0;
    CU_OK(cuMemAlloc_v2(&p, 4 * MIB));
    CU_OK(cuMemAlloc_v2(&other, 4 * MIB));
    unsigned long long first = buffer_id(p), second = buffer_id(other);
    assert_true(first != second);
    CU_OK(cuMemFree_v2(p));
    unsigned long long id = 7;
    CU_EXPECT(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 8), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr base;
    size_t size;
    CU_EXPECT(cuMemGetAddressRange_v2(&base, &size, p), CUDA_ERROR_NOT_FOUND);
    attrs_t a;
    CU_OK(attrs_get(p, &a));
    assert_null(a.context);
    assert_int_equal(a.type, 0);
    assert_int_equal(a.dptr, 0);
    assert_null(a.hptr);
    assert_int_equal(a.id, 0);
    assert_int_equal(a.ordinal, -2);
    assert_int_equal(a.start, 0);
    assert_int_equal(a.size, 0);
    assert_int_equal(a.mapped, 0);
    assert_int_equal(a.ipc, 0);
    assert_int_equal(a.map_size, 0);

    CU_OK(cuMemAlloc_v2(&q, 4 * MIB));
    assert_int_equal(q, p); /* the same address again */
    unsigned long long third = buffer_id(q);
    assert_true(third != first && third != second);
    CU_OK(cuMemFree_v2(q));
    CU_OK(cuMemFree_v2(other));
}

static void test_pool_memory(void **state)
{
    (void)state;
    CUdeviceptr p = 0;
    CUmemoryPool pool = NULL;
    CU_OK(cuDeviceGetDefaultMemPool(&pool, dev));
    CU_OK(cuMemAllocAsync(&p, 5000, NULL));
    attrs_t a;
    CU_OK(attrs_get(p + 4999, &a));
    assert_int_equal(a.type, CU_MEMORYTYPE_DEVICE);
    assert_ptr_equal(a.pool, pool);
    assert_int_equal(a.ipc, 0); /* the default pool has no IPC handle type */
    assert_int_equal(a.start, p);
    assert_int_equal(a.size, 5000);
    CU_OK(cuMemFreeAsync(p, NULL));
    CU_OK(cuStreamSynchronize(NULL));
    CU_EXPECT(cuPointerGetAttribute(&a.type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), CUDA_ERROR_INVALID_VALUE);
}

static void test_host_memory(void **state)
{
    (void)state;
    void *pinned = NULL;
    CU_OK(cuMemAllocHost_v2(&pinned, 10000));
    attrs_t a;
    CU_OK(attrs_get((CUdeviceptr)(uintptr_t)pinned + 10, &a));
    assert_int_equal(a.type, CU_MEMORYTYPE_HOST);
    assert_ptr_equal(a.hptr, (char *)pinned + 10);
    assert_int_equal(a.dptr, (CUdeviceptr)(uintptr_t)pinned + 10);
    assert_int_equal(a.rdma, 0);
    assert_int_equal(a.ipc, 0);
    CUdeviceptr d = 0, base = 0;
    size_t size = 0;
    CU_OK(cuMemHostGetDevicePointer_v2(&d, (char *)pinned + 10, 0));
    assert_int_equal(d, (CUdeviceptr)(uintptr_t)pinned + 10);
    CU_EXPECT(cuMemHostGetDevicePointer_v2(&d, pinned, 1), CUDA_ERROR_INVALID_VALUE); /* flags must be 0 */
    CU_OK(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)pinned + 10)); /* mapped memory */
    assert_int_equal(base, (CUdeviceptr)(uintptr_t)pinned);
    assert_int_equal(size, 10000);
    /* the device writes it; a synchronous memset of host-visible memory
     * returns once the bytes are there, behind what the stream had queued */
    simtest_gate_t *g = simtest_gate_new();
    CU_OK(cuLaunchHostFunc(NULL, simtest_gate_fn, g));
    simtest_gate_open_after(g, 50);
    CU_OK(cuMemsetD8_v2((CUdeviceptr)(uintptr_t)pinned, 0xab, 32));
    assert_int_equal(simtest_check_byte(pinned, 32, 0xab), -1);
    CU_EXPECT(cuMemsetD8_v2((CUdeviceptr)(uintptr_t)pinned, 0, 10001), CUDA_ERROR_INVALID_VALUE);
    unsigned flags = 99;
    CU_OK(cuMemHostGetFlags(&flags, pinned));
    assert_int_equal(flags, 0);
    CU_OK(cuMemFreeHost(pinned));

    CUdeviceptr managed = 0;
    CU_OK(cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL));
    CU_OK(attrs_get(managed, &a));
    assert_int_equal(a.managed, 1);
    assert_int_equal(a.hptr, (void *)(uintptr_t)managed);
    CU_OK(cuMemFree_v2(managed));

    /* plain host memory: unknown to CUDA */
    int local = 0;
    CU_OK(attrs_get((CUdeviceptr)(uintptr_t)&local, &a));
    assert_int_equal(a.type, 0);
    assert_int_equal(a.ordinal, -2);
    CU_EXPECT(cuMemHostGetDevicePointer_v2(&d, &local, 0), CUDA_ERROR_INVALID_VALUE);
}

static void test_host_register(void **state)
{
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *buf = mmap(NULL, 8 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(buf != MAP_FAILED);
    CU_OK(cuMemHostRegister_v2(buf, 4 * page, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
    attrs_t a;
    CU_OK(attrs_get((CUdeviceptr)(uintptr_t)buf + 5, &a));
    assert_int_equal(a.type, CU_MEMORYTYPE_HOST);
    assert_ptr_equal(a.hptr, buf + 5);
    assert_int_equal(a.start, (CUdeviceptr)(uintptr_t)buf);
    assert_int_equal(a.size, 4 * page);
    CUdeviceptr d = 0;
    CU_OK(cuMemHostGetDevicePointer_v2(&d, buf + page, 0));
    assert_int_equal(d, (CUdeviceptr)(uintptr_t)(buf + page));
    /* copies use it as device-visible host memory */
    CUdeviceptr dev_mem = 0;
    CU_OK(cuMemAlloc_v2(&dev_mem, page));
    simtest_fill(buf, page, 7);
    CU_OK(cuMemcpyHtoD_v2(dev_mem, buf, page));
    CU_OK(cuMemcpyDtoH_v2(buf + page, dev_mem, page));
    assert_int_equal(simtest_check(buf + page, page, 7, 0), -1);
    CU_OK(cuMemFree_v2(dev_mem));

    CU_EXPECT(cuMemHostRegister_v2(buf + 2 * page, 4 * page, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CU_EXPECT(cuMemHostRegister_v2(buf + 4 * page, page, 0x40), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemHostRegister_v2(NULL, page, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemHostRegister_v2(buf + 4 * page, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemHostUnregister(buf + page), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED); /* not its start */
    CU_OK(cuMemHostUnregister(buf));
    CU_EXPECT(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    CU_OK(attrs_get((CUdeviceptr)(uintptr_t)buf, &a));
    assert_int_equal(a.type, 0);

    /* device memory and unmapped memory cannot be registered */
    CUdeviceptr p = 0;
    CU_OK(cuMemAlloc_v2(&p, page));
    CU_EXPECT(cuMemHostRegister_v2((void *)(uintptr_t)p, page, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemFree_v2(p));
    munmap(buf + 6 * page, 2 * page);
    CU_EXPECT(cuMemHostRegister_v2(buf + 5 * page, 2 * page, 0), CUDA_ERROR_INVALID_VALUE);
    munmap(buf, 6 * page);
}

static void test_sync_memops_and_p2p_tokens(void **state)
{
    (void)state;
    CUdeviceptr p = 0;
    CU_OK(cuMemAlloc_v2(&p, MIB));
    unsigned char sync = 9;
    CU_OK(cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p));
    assert_int_equal(sync, 0);
    unsigned int on = 1;
    CU_OK(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p + 10));
    CU_OK(cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p));
    assert_int_equal(sync, 1);
    CU_EXPECT(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_BUFFER_ID, p), CUDA_ERROR_INVALID_VALUE);
    unsigned int off = 0;
    CU_OK(cuPointerSetAttribute(&off, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p));
    CUDA_POINTER_ATTRIBUTE_P2P_TOKENS t = {0, 0};
    CU_OK(cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_P2P_TOKENS, p));
    assert_int_equal(t.p2pToken, buffer_id(p));
    CU_OK(cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p));
    assert_int_equal(sync, 1); /* the documented side effect */
    CU_OK(cuMemFree_v2(p));
    CU_EXPECT(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuPointerGetAttribute(&sync, (CUpointer_attribute)99, p), CUDA_ERROR_INVALID_VALUE);
}

/* cuMemGetHandleForAddressRange: a dma-buf fd of a page-aligned range of
 * one allocation the program holds; the device says it supports them. */
static void test_dma_buf(void **state)
{
    (void)state;
    int yes = 0;
    CU_OK(cuDeviceGetAttribute(&yes, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, 0));
    assert_int_equal(yes, 1);
    CUdeviceptr p = 0;
    CU_OK(cuMemAlloc_v2(&p, 4 * MIB));
    int fd = -1;
    const CUmemRangeHandleType dmabuf = CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD;
    CU_OK(cuMemGetHandleForAddressRange(&fd, p, 4 * MIB, dmabuf, 0));
    assert_true(fd >= 0);
    assert_int_equal(close(fd), 0);
    CU_OK(cuMemGetHandleForAddressRange(&fd, p + 4096, 8192, dmabuf, 1)); /* a part, PCIe mapping */
    assert_int_equal(close(fd), 0);
    CU_EXPECT(cuMemGetHandleForAddressRange(&fd, p + 100, 4096, dmabuf, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemGetHandleForAddressRange(&fd, p, 100, dmabuf, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemGetHandleForAddressRange(&fd, p, 8 * MIB, dmabuf, 0), CUDA_ERROR_INVALID_VALUE); /* past its end */
    CU_EXPECT(cuMemGetHandleForAddressRange(&fd, p, 4096, (CUmemRangeHandleType)2, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemGetHandleForAddressRange(&fd, p, 4096, dmabuf, 2), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemGetHandleForAddressRange(NULL, p, 4096, dmabuf, 0), CUDA_ERROR_INVALID_VALUE);
    void *host = NULL;
    CU_OK(cuMemAllocHost_v2(&host, 4 * MIB));
    CU_EXPECT(cuMemGetHandleForAddressRange(&fd, (CUdeviceptr)host, 4096, dmabuf, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemFreeHost(host));
    CU_OK(cuMemFree_v2(p));
    CU_EXPECT(cuMemGetHandleForAddressRange(&fd, p, 4096, dmabuf, 0), CUDA_ERROR_INVALID_VALUE); /* freed */
}

/* Real CUDA frees by address through unified addressing: no context need
 * be current. */
static void test_free_without_context(void **state)
{
    (void)state;
    CUdeviceptr p = 0;
    void *pinned = NULL;
    CU_OK(cuMemAlloc_v2(&p, MIB));
    CU_OK(cuMemAllocHost_v2(&pinned, 4096));
    CUcontext popped = NULL;
    CU_OK(cuCtxPopCurrent_v2(&popped));
    CUcontext cur = (CUcontext)1;
    CU_OK(cuCtxGetCurrent(&cur));
    assert_null(cur);
    CU_EXPECT(cuMemAlloc_v2(&p, MIB), CUDA_ERROR_INVALID_CONTEXT); /* allocation still needs one */
    unsigned type = 0;
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
    assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
    CUdeviceptr dp;
    CU_EXPECT(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p), CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(cuMemFree_v2(p));
    CU_OK(cuMemFreeHost(pinned));
    CU_EXPECT(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuCtxSetCurrent(ctx));
}

typedef struct cb_s {
    CUstream stream;
    CUresult status;
    atomic_int calls; /* counted last: the fields above are set when it is seen */
    long seq;
    simtest_mark_t *before; /* ran before the callback, on the same stream */
} cb_t;

static void callback(CUstream stream, CUresult status, void *data)
{
    cb_t *c = data;
    c->stream = stream;
    c->status = status;
    c->seq = simtest_mark_ran(c->before) ? simtest_mark_seq(c->before) : -1;
    atomic_fetch_add(&c->calls, 1);
}

static void test_stream_callback(void **state)
{
    (void)state;
    CUstream s = NULL;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    simtest_gate_t *g = simtest_gate_new();
    cb_t c = {.status = CUDA_ERROR_UNKNOWN, .before = simtest_mark_new()};
    simtest_gate_block(g, s);
    simtest_mark_on(c.before, s);
    CU_OK(cuStreamAddCallback(s, callback, &c, 0));
    simtest_settle();
    assert_int_equal(c.calls, 0); /* behind the gate */
    simtest_gate_open(g);
    CU_OK(cuStreamSynchronize(s));
    assert_int_equal(c.calls, 1);
    assert_ptr_equal(c.stream, s);
    assert_int_equal(c.status, CUDA_SUCCESS);
    assert_true(c.seq > 0); /* the mark queued before it ran first */
    CU_EXPECT(cuStreamAddCallback(s, callback, &c, 1), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuStreamAddCallback(s, NULL, &c, 0), CUDA_ERROR_INVALID_VALUE);
    /* the legacy stream, as handle 0 */
    cb_t c0 = {.before = simtest_mark_new()};
    CU_OK(cuStreamAddCallback(NULL, callback, &c0, 0));
    CU_OK(cuCtxSynchronize());
    assert_int_equal(c0.calls, 1);
    assert_null(c0.stream);
    CU_OK(cuStreamDestroy_v2(s));
}

/* After a fault the callback still runs, once, and is told the error. */
static void test_stream_callback_after_fault(void **state)
{
    (void)state;
    CUresult (*fault)(CUstream) = (CUresult(*)(CUstream))simtest_sim_sym("cucacheSimLaunchFault");
    assert_non_null(fault);
    CUcontext own = NULL;
    CU_OK(cuCtxCreate_v2(&own, 0, dev));
    cb_t c = {.before = simtest_mark_new()};
    simtest_gate_t *g = simtest_gate_new(); /* both are queued before the fault runs */
    CU_OK(cuLaunchHostFunc(NULL, simtest_gate_fn, g));
    CU_OK(fault(NULL));
    CU_OK(cuStreamAddCallback(NULL, callback, &c, 0));
    simtest_gate_open(g);
    for (int i = 0; i < 500 && atomic_load(&c.calls) == 0; i++)
        simtest_sleep_ms(10);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.status, CUDA_ERROR_ILLEGAL_ADDRESS);
    CU_OK(cuCtxDestroy_v2(own));
    CU_OK(cuCtxSetCurrent(ctx));
}

static void test_every_device_attribute(void **state)
{
    (void)state;
    for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; a++) {
        int v = -12345;
        CUresult r = cuDeviceGetAttribute(&v, (CUdevice_attribute)a, dev);
        if (r != CUDA_SUCCESS)
            fail_msg("device attribute %d: error %d", a, (int)r);
    }
    int v = 0;
    CU_EXPECT(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, dev), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuDeviceGetAttribute(&v, (CUdevice_attribute)0, dev), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    assert_int_equal(v, 9);
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, dev));
    assert_int_equal(v, 1);
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
    assert_int_equal(v, 1); /* the virtual memory API (tests/test_vmm.c) */
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev));
    assert_int_equal(v, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_device_memory),
        SIMTEST(test_freed_memory_and_buffer_ids),
        SIMTEST(test_pool_memory),
        SIMTEST(test_host_memory),
        SIMTEST(test_host_register),
        SIMTEST(test_sync_memops_and_p2p_tokens),
        SIMTEST(test_dma_buf),
        SIMTEST(test_free_without_context),
        SIMTEST(test_stream_callback),
        SIMTEST(test_stream_callback_after_fault),
        SIMTEST(test_every_device_attribute),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
