/*
 * The core's device seam over the real driver (core/core.h's backend).
 *
 * Every call runs in the context the allocator serves (the device's primary
 * context, or a created one: ctx_devs.c): pushed for the call when another
 * context (or none) is current on the calling thread, as when a
 * runtime program's thread has not touched CUDA yet.  Stream keys become
 * handles as hook.h describes.
 *
 * The fence (event_record on stream 0, design.md "Reuse must never race"):
 * one event on the legacy default stream, which orders every blocking
 * stream and per-thread default stream, plus one on each live non-blocking
 * stream of the device.  It has completed when all of them have.
 *
 * During a capture on the device the core makes no fence, wait, sync or
 * release call (core_set_capturing); a new segment is still allowed, with
 * the thread's capture mode relaxed for our own cuMemAlloc only, as
 * aws-ofi-nccl and Paddle do.
 *
 * A block freed on another stream may serve its own stream at once, the
 * stream made to wait for the free's event (stream_wait, core/cross.h):
 * one cuStreamWaitEvent, never into a capturing stream nor while a capture
 * is on the device (then the free waits for its event as before).  The
 * reuse policies the program set on the device's current pool
 * (reuse_policy) say whether it may.
 *
 * Expandable segments (expandable_segments:true) use the driver's virtual
 * memory: cuMemAddressReserve for a segment's addresses, and per page a
 * cuMemCreate, cuMemMap and cuMemRelease (the mapping keeps the memory, so
 * cuMemUnmap gives it back), then one cuMemSetAccess over the run for the
 * segment's own device and each device with peer access to it (hook_peer.c
 * counts them, and sets the mappings already made when that changes), as
 * PyTorch does: peer access does not reach virtual memory by itself.
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "env.h"
#include "fence.h"
#include "hook.h"
#include "hostalloc.h"
#include "ipc.h"
#include "log.h"
#include "order.h"
#include "peer.h"
#include "real.h"
#include "streams.h"
#include "submit.h"
#include "vec.h"

HOOK_TLS CUresult hook_backend_error;

enum { SPARE_EVENTS_MAX = 256 };

bool hook_enter(hook_dev_t *hd, bool relax, hook_scope_t *sc)
{
    *sc = (hook_scope_t){.pushed = false, .relaxed = false, .mode = CU_STREAM_CAPTURE_MODE_RELAXED};
    CUcontext cur = NULL;
    if (!(real_cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == hd->primary && cur)) {
        CUresult r = hd->primary ? real_cu.cuCtxPushCurrent_v2(hd->primary) : CUDA_ERROR_INVALID_CONTEXT;
        if (r != CUDA_SUCCESS) {
            hook_backend_error = r;
            return false;
        }
        sc->pushed = true;
    }
    sc->relaxed = relax && atomic_load_explicit(&hd->capturing, memory_order_relaxed) &&
                  real_cu.cuThreadExchangeStreamCaptureMode &&
                  real_cu.cuThreadExchangeStreamCaptureMode(&sc->mode) == CUDA_SUCCESS;
    return true;
}

void hook_leave(hook_scope_t *sc)
{
    CUcontext popped;
    if (sc->relaxed)
        real_cu.cuThreadExchangeStreamCaptureMode(&sc->mode);
    if (sc->pushed)
        real_cu.cuCtxPopCurrent_v2(&popped);
}

/* ------------------------------------------------------------------------
 * Segments and memory information
 * ---------------------------------------------------------------------- */

/* The device's state entered for one of the backend's calls (hook_enter),
 * or NULL when its context cannot be made current. */
static hook_dev_t *enter(void *ctx, int device, bool relax, hook_scope_t *sc)
{
    hook_dev_t *hd = hook_backend_dev(ctx, device);
    return hook_enter(hd, relax, sc) ? hd : NULL;
}

/* Warns when giving back a range failed ("device D: <verb> N bytes<of> at
 * 0xA<to> failed"): nothing the program asked for failed, but the memory
 * may stay taken. */
typedef struct range_words_s {
    const char *verb, *of, *to;
} range_words_t;

static void range_failed(CUresult r, int device, range_words_t w, uintptr_t addr, size_t size)
{
    if (r != CUDA_SUCCESS)
        hook_warn(HOOK_WARN_BACKEND, "device %d: %s%zu bytes%s at 0x%lx%s failed (error %d)", device, w.verb, size,
                  w.of, (unsigned long)addr, w.to, (int)r);
}

/* The core's code for a driver result (the error kept for the report). */
static int core_code(CUresult r)
{
    if (r == CUDA_SUCCESS)
        return CORE_OK;
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return CORE_ENOMEM;
    hook_backend_error = r;
    return CORE_EFAIL;
}

static int seg_alloc(void *ctx, int device, size_t size, uintptr_t *addr)
{
    hook_scope_t sc;
    hook_dev_t *hd = enter(ctx, device, true, &sc);
    if (!hd)
        return CORE_EFAIL;
    CUdeviceptr p = 0;
    CUresult r = real_cu.cuMemAlloc_v2(&p, size);
    hook_leave(&sc);
    *addr = (uintptr_t)p;
    return core_code(r);
}

static void seg_free(void *ctx, int device, uintptr_t addr, size_t size)
{
    (void)size;
    hook_scope_t sc;
    hook_dev_t *hd = enter(ctx, device, true, &sc);
    if (!hd)
        return;
    CUresult r = real_cu.cuMemFree_v2((CUdeviceptr)addr);
    hook_leave(&sc);
    range_failed(r, device, (range_words_t){"returning a segment of ", "", " to CUDA"}, addr, size);
}

/* ------------------------------------------------------------------------
 * Virtual memory (expandable segments)
 * ---------------------------------------------------------------------- */

/* Per device: its memory may be RDMA-capable (GPUDirect with virtual
 * memory); then cucache asks for it, so that NICs can still reach what a
 * plain cudaMalloc would have let them reach. */
static _Atomic bool vmm_rdma[HOOK_MAX_DEVICES];

static CUmemAllocationProp device_prop(const hook_dev_t *hd)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = (int)hd->handle;
    p.allocFlags.gpuDirectRDMACapable = atomic_load(&vmm_rdma[hd->ordinal]);
    return p;
}

static size_t vmm_granularity(void *ctx, int device)
{
    hook_dev_t *hd = hook_backend_dev(ctx, device);
    if (!real_cu.cuMemAddressReserve || !real_cu.cuMemAddressFree || !real_cu.cuMemCreate || !real_cu.cuMemRelease ||
        !real_cu.cuMemMap || !real_cu.cuMemUnmap || !real_cu.cuMemSetAccess || !real_cu.cuMemGetAllocationGranularity ||
        !real_cu.cuDeviceGetAttribute)
        return 0;
    int supported = 0;
    if (real_cu.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, hd->handle) !=
            CUDA_SUCCESS ||
        !supported)
        return 0;
    int rdma = 0;
    if (real_cu.cuDeviceGetAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, hd->handle) ==
        CUDA_SUCCESS)
        atomic_store(&vmm_rdma[device], rdma != 0);
    CUmemAllocationProp prop = device_prop(hd);
    size_t g = 0;
    if (real_cu.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
        return 0;
    return g;
}

static int va_reserve(void *ctx, int device, size_t size, size_t align, uintptr_t *addr)
{
    hook_scope_t sc;
    hook_dev_t *hd = enter(ctx, device, false, &sc);
    if (!hd)
        return CORE_EFAIL;
    CUdeviceptr p = 0;
    CUresult r = real_cu.cuMemAddressReserve(&p, size, align, 0, 0);
    hook_leave(&sc);
    *addr = (uintptr_t)p;
    return core_code(r);
}

/* Gives back [addr, addr+size) with one driver call (call), warning when
 * it fails. */
static void give_back(void *ctx, int device, bool relax, CUresult (*call)(CUdeviceptr, size_t), range_words_t what,
                      uintptr_t addr, size_t size)
{
    hook_scope_t sc;
    if (!enter(ctx, device, relax, &sc))
        return;
    CUresult r = call((CUdeviceptr)addr, size);
    hook_leave(&sc);
    range_failed(r, device, what, addr, size);
}

static void va_release(void *ctx, int device, uintptr_t addr, size_t size)
{
    give_back(ctx, device, false, real_cu.cuMemAddressFree, (range_words_t){"freeing ", " of addresses", ""}, addr,
              size);
}

/* The access of a new mapping of hd's memory: its own device's, and each
 * peer's that has access (hook_peer.c); the number of descriptors. */
static size_t access_of(const hook_dev_t *hd, CUmemAccessDesc acc[HOOK_MAX_DEVICES + 1])
{
    acc[0] = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, (int)hd->handle}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    return 1 + hook_peer_access(hd->ordinal, acc + 1);
}

void hook_vmm_set_access(hook_dev_t *hd, CUdevice to, unsigned flags, uintptr_t addr, size_t size)
{
    hook_scope_t sc;
    if (!hook_enter(hd, true, &sc))
        return;
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, (int)to}, (CUmemAccess_flags)flags};
    CUresult r = real_cu.cuMemSetAccess((CUdeviceptr)addr, size, &acc, 1);
    hook_leave(&sc);
    range_failed(r, hd->ordinal,
                 (range_words_t){flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ? "taking a peer's access to "
                                                                        : "giving a peer access to ",
                                 "", ""},
                 addr, size);
}

static int map(void *ctx, int device, uintptr_t addr, size_t size, size_t page)
{
    hook_scope_t sc;
    hook_dev_t *hd = enter(ctx, device, true, &sc);
    if (!hd)
        return CORE_EFAIL;
    CUmemAllocationProp prop = device_prop(hd);
    CUresult r = CUDA_SUCCESS;
    size_t done = 0;
    for (; done < size; done += page) {
        CUmemGenericAllocationHandle h = 0;
        r = real_cu.cuMemCreate(&h, page, &prop, 0);
        if (r != CUDA_SUCCESS)
            break;
        r = real_cu.cuMemMap((CUdeviceptr)(addr + done), page, 0, h, 0);
        CUresult rel = real_cu.cuMemRelease(h); /* the mapping, if any, keeps the memory */
        if (r != CUDA_SUCCESS)
            break;
        if (rel != CUDA_SUCCESS) { /* mapped, but its handle could not be let go: unmapped below */
            r = rel;
            done += page;
            break;
        }
    }
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc acc[HOOK_MAX_DEVICES + 1];
        r = real_cu.cuMemSetAccess((CUdeviceptr)addr, size, acc, access_of(hd, acc));
    }
    if (r != CUDA_SUCCESS && done) /* all or nothing */
        real_cu.cuMemUnmap((CUdeviceptr)addr, done);
    hook_leave(&sc);
    return core_code(r);
}

/* Shared pages (expandable_share_pages): the page's physical allocation,
 * retained from its first mapping, mapped again at addr (offset 0: each
 * page is one cuMemCreate), with the access map gives; its handle let go
 * after, as map does (the mappings keep the memory). */
static int map_alias(void *ctx, int device, uintptr_t addr, uintptr_t from, size_t size)
{
    hook_scope_t sc;
    hook_dev_t *hd = enter(ctx, device, true, &sc);
    if (!hd)
        return CORE_EFAIL;
    CUmemGenericAllocationHandle h = 0;
    CUresult r = real_cu.cuMemRetainAllocationHandle ? real_cu.cuMemRetainAllocationHandle(&h, (void *)from)
                                                     : CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_SUCCESS) {
        r = real_cu.cuMemMap((CUdeviceptr)addr, size, 0, h, 0);
        real_cu.cuMemRelease(h);
    }
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc acc[HOOK_MAX_DEVICES + 1];
        r = real_cu.cuMemSetAccess((CUdeviceptr)addr, size, acc, access_of(hd, acc));
        if (r != CUDA_SUCCESS)
            real_cu.cuMemUnmap((CUdeviceptr)addr, size);
    }
    hook_leave(&sc);
    /* refused, the core maps the request's pages the plain way: the error
     * is not the allocation's, and stays out of its report */
    CUresult kept = hook_backend_error;
    int rc = core_code(r);
    hook_backend_error = kept;
    return rc;
}

static void unmap(void *ctx, int device, uintptr_t addr, size_t size)
{
    give_back(ctx, device, true, real_cu.cuMemUnmap, (range_words_t){"unmapping ", "", ""}, addr, size);
}

static int mem_info(void *ctx, int device, size_t *free_bytes, size_t *total)
{
    hook_scope_t sc;
    hook_dev_t *hd = enter(ctx, device, false, &sc);
    if (!hd)
        return CORE_EFAIL;
    CUresult r = real_cu.cuMemGetInfo_v2(free_bytes, total);
    hook_leave(&sc);
    if (r != CUDA_SUCCESS) {
        hook_backend_error = r;
        return CORE_EFAIL;
    }
    return CORE_OK;
}

static int device_sync(void *ctx, int device)
{
    hook_dev_t *hd = hook_backend_dev(ctx, device);
    hook_scope_t sc;
    if (atomic_load(&hd->capturing) || !hook_enter(hd, false, &sc))
        return CORE_EFAIL; /* a capture began on another thread (the core learns it next), or no context */
    CUresult r = real_cu.cuCtxSynchronize();
    hook_leave(&sc);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_ILLEGAL_ADDRESS && r != CUDA_ERROR_LAUNCH_FAILED) {
        hook_backend_error = r;
        return CORE_EFAIL;
    }
    return CORE_OK; /* a faulted context runs nothing any more */
}

/* ------------------------------------------------------------------------
 * Events and fences
 * ---------------------------------------------------------------------- */

/* Called with hd->lock held: forgets retired events that completed and
 * that no fence holds. */
static void retired_sweep(hook_dev_t *hd)
{
    size_t j = 0;
    for (size_t i = 0; i < hd->nretired; i++) {
        hook_retired_t *r = &hd->retired[i];
        if (!r->done && real_cu.cuEventQuery(r->ev) != CUDA_ERROR_NOT_READY)
            r->done = true;
        if (r->done && r->refs == 0)
            real_cu.cuEventDestroy_v2(r->ev);
        else
            hd->retired[j++] = *r;
    }
    hd->nretired = j;
}

CUevent hook_event_get(hook_dev_t *hd)
{
    if (hd->nspare)
        return hd->spare_events[--hd->nspare];
    CUevent e = NULL;
    CUresult r = real_cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) {
        hook_backend_error = r;
        return NULL;
    }
    return e;
}

void hook_event_put(hook_dev_t *hd, CUevent e)
{
    if (hd->nspare < SPARE_EVENTS_MAX &&
        vec_reserve((void **)&hd->spare_events, &hd->spare_cap, hd->nspare + 1, sizeof *hd->spare_events))
        hd->spare_events[hd->nspare++] = e;
    else
        real_cu.cuEventDestroy_v2(e);
}

/* The handle to record an event on for a stream key; NULL when this thread
 * cannot name that stream (another thread's per-thread default stream: the
 * core then falls back to the fence). */
static CUstream stream_handle(core_stream_t key)
{
    if (key == CORE_STREAM_KEY_LEGACY)
        return CU_STREAM_LEGACY;
    if (core_stream_key_is_ptds(key))
        return key == hook_key_ptds() ? CU_STREAM_PER_THREAD : NULL;
    return (CUstream)key;
}

/* A marker: the fence (keys NULL: the legacy stream and every stream of
 * the device, and retired streams' last work), or one event on each of
 * keys[0..nkeys). */
static int record_marker(hook_dev_t *hd, const core_stream_t *keys, size_t nkeys, uint64_t *event)
{
    if (atomic_load(&hd->capturing))
        return CORE_EFAIL;
    hook_scope_t sc;
    if (!hook_enter(hd, false, &sc))
        return CORE_EFAIL;
    pthread_mutex_lock(&hd->lock);
    bool fence = keys == NULL;
    size_t n = fence ? 1 + hd->nstreams : nkeys;
    size_t borrowed = 0;
    if (fence && hd->nretired) {
        retired_sweep(hd);
        for (size_t i = 0; i < hd->nretired; i++)
            borrowed += !hd->retired[i].done;
    }
    fence_t *f = hostalloc_calloc(1, sizeof *f + (n + borrowed) * (sizeof f->ev[0] + sizeof f->on[0]));
    int rc = f ? CORE_OK : CORE_EFAIL;
    if (f) {
        f->on = (CUstream *)(void *)&f->ev[n + borrowed];
        f->gen = hd->streams_gen;
    }
    size_t done = 0;
    for (; rc == CORE_OK && done < n; done++) {
        CUstream s = !fence ? stream_handle(keys[done]) : done == 0 ? CU_STREAM_LEGACY : hd->streams[done - 1];
        if (!s) {
            rc = CORE_EFAIL;
            break;
        }
        CUevent e = hook_event_get(hd);
        CUresult r = e ? real_cu.cuEventRecord(e, s) : CUDA_ERROR_OUT_OF_MEMORY;
        if (r != CUDA_SUCCESS) {
            hook_backend_error = r;
            if (e)
                hook_event_put(hd, e);
            rc = CORE_EFAIL;
            break;
        }
        f->ev[done] = e;
        f->on[done] = s;
    }
    if (rc != CORE_OK) {
        for (size_t i = 0; f && i < done; i++)
            hook_event_put(hd, f->ev[i]);
        hostalloc_free(f);
    } else {
        f->owned = n;
        for (size_t i = 0; i < hd->nretired && borrowed; i++)
            if (!hd->retired[i].done) {
                hd->retired[i].refs++;
                f->ev[n++] = hd->retired[i].ev;
            }
        f->n = n;
        *event = (uint64_t)(uintptr_t)f;
    }
    pthread_mutex_unlock(&hd->lock);
    hook_leave(&sc);
    return rc;
}

static int event_record(void *ctx, int device, core_stream_t stream, uint64_t *event)
{
    return record_marker(hook_backend_dev(ctx, device), stream == 0 ? NULL : &stream, 1, event);
}

/* Frees of blocks used on several streams (record_stream): one event on
 * each; never into a capture (record_marker refuses while one is on). */
static int event_record_on(void *ctx, int device, const core_stream_t *streams, size_t n, uint64_t *event)
{
    return n ? record_marker(hook_backend_dev(ctx, device), streams, n, event) : CORE_EFAIL;
}

/* 1 when every event of the fence completed.  An error (a context that
 * faulted) counts as completed: nothing runs on that context any more. */
static int event_query(void *ctx, int device, uint64_t event)
{
    (void)ctx;
    (void)device;
    fence_t *f = (fence_t *)(uintptr_t)event;
    for (size_t i = 0; i < f->n; i++)
        if (real_cu.cuEventQuery(f->ev[i]) == CUDA_ERROR_NOT_READY)
            return 0;
    return 1;
}

static void event_wait(void *ctx, int device, uint64_t event)
{
    (void)ctx;
    (void)device;
    fence_t *f = (fence_t *)(uintptr_t)event;
    for (size_t i = 0; i < f->n; i++)
        real_cu.cuEventSynchronize(f->ev[i]);
}

void hook_fence_free(hook_dev_t *hd, fence_t *f)
{
    for (size_t i = 0; i < f->owned; i++) {
        if (hd->primary)
            hook_event_put(hd, f->ev[i]);
    }
    if (f->hub && hd->primary)
        hook_event_put(hd, f->hub);
    for (size_t i = f->owned; i < f->n; i++)
        for (size_t k = 0; k < hd->nretired; k++)
            if (hd->retired[k].ev == f->ev[i] && hd->retired[k].refs) {
                hd->retired[k].refs--;
                break;
            }
    if (f->n > f->owned)
        retired_sweep(hd);
    hostalloc_free(f);
}

bool hook_fence_done(const fence_t *f)
{
    for (size_t i = 0; i < f->n; i++)
        if (real_cu.cuEventQuery(f->ev[i]) == CUDA_ERROR_NOT_READY)
            return false;
    return true;
}

static void event_release(void *ctx, int device, uint64_t event)
{
    hook_dev_t *hd = hook_backend_dev(ctx, device);
    fence_t *f = (fence_t *)(uintptr_t)event;
    pthread_mutex_lock(&hd->lock);
    f->released = true;
    if (!f->ordered)
        hook_fence_free(hd, f); /* else when it completes (order.c, ordered_sweep) */
    pthread_mutex_unlock(&hd->lock);
}

/* ------------------------------------------------------------------------
 * Frees on another stream (core/cross.h)
 * ---------------------------------------------------------------------- */

/* Makes the stream of `key` wait on the device for a stream event (a fence
 * of event_record's on that one stream): one cuStreamWaitEvent per event
 * it holds.  Never into a capture: while any capture is on the device, or
 * when the driver says the stream itself captures (or cannot say), the
 * core is told it cannot, and the free waits as before.
 * CUCACHE_TEST_NO_STREAM_WAIT (tests only) leaves the wait out. */
static int stream_wait(void *ctx, int device, core_stream_t key, uint64_t event)
{
    hook_dev_t *hd = hook_backend_dev(ctx, device);
    CUstream s = stream_handle(key);
    if (!s || atomic_load(&hd->capturing) || !real_cu.cuStreamWaitEvent || !real_cu.cuStreamIsCapturing)
        return CORE_EFAIL;
    if (hook_env()->test_no_stream_wait)
        return CORE_OK;
    hook_scope_t sc;
    if (!hook_enter(hd, false, &sc))
        return CORE_EFAIL;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = real_cu.cuStreamIsCapturing(s, &st);
    if (r == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE)
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    const fence_t *f = (const fence_t *)(uintptr_t)event;
    for (size_t i = 0; r == CUDA_SUCCESS && i < f->n; i++)
        r = real_cu.cuStreamWaitEvent(s, f->ev[i], 0);
    hook_leave(&sc);
    return r == CUDA_SUCCESS ? CORE_OK : CORE_EFAIL; /* a wait half made only orders more */
}

/* CUDA's reuse policies (core.h, CORE_REUSE_*) and the pool attributes
 * that hold them. */
static const struct {
    unsigned bit;
    CUmemPool_attribute attr;
} reuse_attrs[] = {
    {CORE_REUSE_FOLLOW_EVENTS, CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES},
    {CORE_REUSE_OPPORTUNISTIC, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC},
    {CORE_REUSE_INTERNAL_DEPS, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES},
};

/* The policies of the device's current pool (cuDeviceGetMemPool: the one
 * cudaMallocAsync allocates from, which cucache stands in for), as the
 * program set them; a policy the driver cannot tell is CUDA's default
 * (on).  Pools the program creates are never cucache's
 * (cudaMallocFromPoolAsync passes through). */
static unsigned reuse_policy(void *ctx, int device)
{
    hook_dev_t *hd = hook_backend_dev(ctx, device);
    unsigned policy = CORE_REUSE_ALL;
    hook_scope_t sc;
    if (!real_cu.cuDeviceGetMemPool || !real_cu.cuMemPoolGetAttribute || !hook_enter(hd, false, &sc))
        return policy;
    CUmemoryPool pool = NULL;
    if (real_cu.cuDeviceGetMemPool(&pool, hd->handle) == CUDA_SUCCESS && pool)
        for (size_t i = 0; i < sizeof reuse_attrs / sizeof reuse_attrs[0]; i++) {
            int on = 1;
            if (real_cu.cuMemPoolGetAttribute(pool, reuse_attrs[i].attr, &on) == CUDA_SUCCESS && !on)
                policy &= ~reuse_attrs[i].bit;
        }
    hook_leave(&sc);
    return policy;
}

static int hold_query(void *ctx, int device, uint64_t token)
{
    (void)ctx;
    (void)device;
    return hook_ipc_hold_query(token);
}

const core_backend_t hook_backend = {
    .ctx = NULL,
    .seg_alloc = seg_alloc,
    .seg_free = seg_free,
    .mem_info = mem_info,
    .event_record = event_record,
    .event_record_on = event_record_on,
    .event_query = event_query,
    .event_wait = event_wait,
    .event_release = event_release,
    .device_sync = device_sync,
    .hold_query = hold_query,
    .vmm_granularity = vmm_granularity,
    .va_reserve = va_reserve,
    .va_release = va_release,
    .map = map,
    .unmap = unmap,
    .map_alias = map_alias,
    .work_epoch = &hook_submit_epoch, /* interpose/submit.c */
    .fence_order = hook_order_fence, /* order.c */
    .stream_wait = stream_wait,
    .reuse_policy = reuse_policy,
};
