/*
 * The core's device seam over the real driver (core/core.h's backend).
 *
 * Every call runs in the device's primary context: pushed for the call when
 * another context (or none) is current on the calling thread, as when a
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
 * Expandable segments (expandable_segments:true) use the driver's virtual
 * memory: cuMemAddressReserve for a segment's addresses, and per page a
 * cuMemCreate, cuMemMap and cuMemRelease (the mapping keeps the memory, so
 * cuMemUnmap gives it back), then one cuMemSetAccess over the run for the
 * segment's own device, as PyTorch does.  Peers get no access: a program
 * that reads this memory from another device must keep expandable segments
 * off.
 */
#include <stdlib.h>
#include <string.h>

#include "hook.h"
#include "hostalloc.h"
#include "trace.h"

HOOK_TLS CUresult hook_backend_error;

enum { SPARE_EVENTS_MAX = 256 };
/* fence_gather: a fence of this many events or more is gathered on the hub */
enum { HUB_MIN_EVENTS = 8 };

bool hook_ctx_enter(hook_dev_t *hd, bool *pushed)
{
    *pushed = false;
    CUcontext cur = NULL;
    if (real_cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == hd->primary && cur)
        return true;
    CUresult r = hd->primary ? real_cu.cuCtxPushCurrent_v2(hd->primary) : CUDA_ERROR_INVALID_CONTEXT;
    if (r != CUDA_SUCCESS) {
        hook_backend_error = r;
        return false;
    }
    *pushed = true;
    return true;
}

void hook_ctx_leave(bool pushed)
{
    CUcontext popped;
    if (pushed)
        real_cu.cuCtxPopCurrent_v2(&popped);
}

/* Relaxes the thread's capture mode around one of our own calls while the
 * device captures; restores it after. */
static bool relax(hook_dev_t *hd, CUstreamCaptureMode *mode)
{
    *mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    return atomic_load_explicit(&hd->capturing, memory_order_relaxed) && real_cu.cuThreadExchangeStreamCaptureMode &&
           real_cu.cuThreadExchangeStreamCaptureMode(mode) == CUDA_SUCCESS;
}

static void unrelax(bool relaxed, CUstreamCaptureMode *mode)
{
    if (relaxed)
        real_cu.cuThreadExchangeStreamCaptureMode(mode);
}

/* ------------------------------------------------------------------------
 * Segments and memory information
 * ---------------------------------------------------------------------- */

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
    (void)ctx;
    hook_dev_t *hd = &hook_devs[device];
    bool pushed;
    if (!hook_ctx_enter(hd, &pushed))
        return CORE_EFAIL;
    CUstreamCaptureMode mode;
    bool relaxed = relax(hd, &mode);
    CUdeviceptr p = 0;
    CUresult r = real_cu.cuMemAlloc_v2(&p, size);
    unrelax(relaxed, &mode);
    hook_ctx_leave(pushed);
    *addr = (uintptr_t)p;
    return core_code(r);
}

static void seg_free(void *ctx, int device, uintptr_t addr, size_t size)
{
    (void)ctx;
    (void)size;
    hook_dev_t *hd = &hook_devs[device];
    bool pushed;
    if (!hook_ctx_enter(hd, &pushed))
        return;
    CUstreamCaptureMode mode;
    bool relaxed = relax(hd, &mode);
    CUresult r = real_cu.cuMemFree_v2((CUdeviceptr)addr);
    unrelax(relaxed, &mode);
    hook_ctx_leave(pushed);
    if (r != CUDA_SUCCESS)
        hook_warn(HOOK_WARN_BACKEND, "device %d: returning a segment of %zu bytes at 0x%lx to CUDA failed (error %d)",
                  device, size, (unsigned long)addr, (int)r);
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
    (void)ctx;
    hook_dev_t *hd = &hook_devs[device];
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
    (void)ctx;
    hook_dev_t *hd = &hook_devs[device];
    bool pushed;
    if (!hook_ctx_enter(hd, &pushed))
        return CORE_EFAIL;
    CUdeviceptr p = 0;
    CUresult r = real_cu.cuMemAddressReserve(&p, size, align, 0, 0);
    hook_ctx_leave(pushed);
    *addr = (uintptr_t)p;
    return core_code(r);
}

static void va_release(void *ctx, int device, uintptr_t addr, size_t size)
{
    (void)ctx;
    hook_dev_t *hd = &hook_devs[device];
    bool pushed;
    if (!hook_ctx_enter(hd, &pushed))
        return;
    CUresult r = real_cu.cuMemAddressFree((CUdeviceptr)addr, size);
    hook_ctx_leave(pushed);
    if (r != CUDA_SUCCESS)
        hook_warn(HOOK_WARN_BACKEND, "device %d: freeing %zu bytes of addresses at 0x%lx failed (error %d)", device,
                  size, (unsigned long)addr, (int)r);
}

static int map(void *ctx, int device, uintptr_t addr, size_t size, size_t page)
{
    (void)ctx;
    hook_dev_t *hd = &hook_devs[device];
    bool pushed;
    if (!hook_ctx_enter(hd, &pushed))
        return CORE_EFAIL;
    CUstreamCaptureMode mode;
    bool relaxed = relax(hd, &mode);
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
        CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, (int)hd->handle}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        r = real_cu.cuMemSetAccess((CUdeviceptr)addr, size, &acc, 1);
    }
    if (r != CUDA_SUCCESS && done) /* all or nothing */
        real_cu.cuMemUnmap((CUdeviceptr)addr, done);
    unrelax(relaxed, &mode);
    hook_ctx_leave(pushed);
    return core_code(r);
}

/* Shared pages (expandable_share_pages): the page's physical allocation,
 * retained from its first mapping, mapped again at addr (offset 0: each
 * page is one cuMemCreate), with the device's access; its handle let go
 * after, as map does (the mappings keep the memory). */
static int map_alias(void *ctx, int device, uintptr_t addr, uintptr_t from, size_t size)
{
    (void)ctx;
    hook_dev_t *hd = &hook_devs[device];
    bool pushed;
    if (!hook_ctx_enter(hd, &pushed))
        return CORE_EFAIL;
    CUstreamCaptureMode mode;
    bool relaxed = relax(hd, &mode);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = real_cu.cuMemRetainAllocationHandle ? real_cu.cuMemRetainAllocationHandle(&h, (void *)from)
                                                     : CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_SUCCESS) {
        r = real_cu.cuMemMap((CUdeviceptr)addr, size, 0, h, 0);
        real_cu.cuMemRelease(h);
    }
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, (int)hd->handle}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        r = real_cu.cuMemSetAccess((CUdeviceptr)addr, size, &acc, 1);
        if (r != CUDA_SUCCESS)
            real_cu.cuMemUnmap((CUdeviceptr)addr, size);
    }
    unrelax(relaxed, &mode);
    hook_ctx_leave(pushed);
    /* refused, the core maps the request's pages the plain way: the error
     * is not the allocation's, and stays out of its report */
    CUresult kept = hook_backend_error;
    int rc = core_code(r);
    hook_backend_error = kept;
    return rc;
}

static void unmap(void *ctx, int device, uintptr_t addr, size_t size)
{
    (void)ctx;
    hook_dev_t *hd = &hook_devs[device];
    bool pushed;
    if (!hook_ctx_enter(hd, &pushed))
        return;
    CUstreamCaptureMode mode;
    bool relaxed = relax(hd, &mode);
    CUresult r = real_cu.cuMemUnmap((CUdeviceptr)addr, size);
    unrelax(relaxed, &mode);
    hook_ctx_leave(pushed);
    if (r != CUDA_SUCCESS)
        hook_warn(HOOK_WARN_BACKEND, "device %d: unmapping %zu bytes at 0x%lx failed (error %d)", device, size,
                  (unsigned long)addr, (int)r);
}

static int mem_info(void *ctx, int device, size_t *free_bytes, size_t *total)
{
    (void)ctx;
    hook_dev_t *hd = &hook_devs[device];
    bool pushed;
    if (!hook_ctx_enter(hd, &pushed))
        return CORE_EFAIL;
    CUresult r = real_cu.cuMemGetInfo_v2(free_bytes, total);
    hook_ctx_leave(pushed);
    if (r != CUDA_SUCCESS) {
        hook_backend_error = r;
        return CORE_EFAIL;
    }
    return CORE_OK;
}

static int device_sync(void *ctx, int device)
{
    (void)ctx;
    hook_dev_t *hd = &hook_devs[device];
    bool pushed;
    if (atomic_load(&hd->capturing) || !hook_ctx_enter(hd, &pushed))
        return CORE_EFAIL; /* a capture began on another thread (the core learns it next), or no context */
    CUresult r = real_cu.cuCtxSynchronize();
    hook_ctx_leave(pushed);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_ILLEGAL_ADDRESS && r != CUDA_ERROR_LAUNCH_FAILED) {
        hook_backend_error = r;
        return CORE_EFAIL;
    }
    return CORE_OK; /* a faulted context runs nothing any more */
}

/* ------------------------------------------------------------------------
 * Events and fences
 * ---------------------------------------------------------------------- */

typedef struct fence_s {
    size_t n;      /* events */
    size_t owned;  /* ev[0..owned) are the fence's; the rest are retired
                        streams' events it holds a reference on */
    bool ordered;  /* on hd->ordered: the device waits for it (fence_order) */
    bool released; /* the core released it: freed once it completes */
    CUevent hub;   /* ordered: recorded on the hub stream after it waited for
                      every event (NULL: each stream waits for every event) */
    uint64_t first_alloc; /* ordered: the number of the first allocation after
                             the hand-out (core.h, fence_order) */
    uint64_t gen;  /* hd->streams_gen when recorded */
    CUstream *on;  /* on[i]: the stream ev[i] was recorded on (NULL for a
                      retired stream's event); after ev[] */
    CUevent ev[];  /* all must complete */
} fence_t;

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

/* Called with hd->lock held and the primary context current. */
static CUevent event_get(hook_dev_t *hd)
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

/* Called with hd->lock held. */
static void event_put(hook_dev_t *hd, CUevent e)
{
    if (hd->nspare == hd->spare_cap && hd->spare_cap < SPARE_EVENTS_MAX) {
        size_t cap = hd->spare_cap ? hd->spare_cap * 2 : 16;
        CUevent *n = hostalloc_realloc(hd->spare_events, cap * sizeof *n);
        if (n) {
            hd->spare_events = n;
            hd->spare_cap = cap;
        }
    }
    if (hd->nspare < hd->spare_cap)
        hd->spare_events[hd->nspare++] = e;
    else
        real_cu.cuEventDestroy_v2(e);
}

/* The handle to record an event on for a stream key; NULL when this thread
 * cannot name that stream (another thread's per-thread default stream: the
 * core then falls back to the fence). */
static CUstream stream_handle(core_stream_t key)
{
    if (key == HOOK_KEY_LEGACY)
        return CU_STREAM_LEGACY;
    if (hook_key_is_ptds(key))
        return key == hook_key_ptds() ? CU_STREAM_PER_THREAD : NULL;
    return (CUstream)key;
}

static int event_record(void *ctx, int device, core_stream_t stream, uint64_t *event)
{
    (void)ctx;
    hook_dev_t *hd = &hook_devs[device];
    if (atomic_load(&hd->capturing))
        return CORE_EFAIL;
    bool pushed;
    if (!hook_ctx_enter(hd, &pushed))
        return CORE_EFAIL;
    pthread_mutex_lock(&hd->lock);
    size_t n = stream == 0 ? 1 + hd->nstreams : 1;
    size_t borrowed = 0;
    if (stream == 0 && hd->nretired) {
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
        CUstream s = stream != 0 ? stream_handle(stream) : done == 0 ? CU_STREAM_LEGACY : hd->streams[done - 1];
        if (!s) {
            rc = CORE_EFAIL;
            break;
        }
        CUevent e = event_get(hd);
        CUresult r = e ? real_cu.cuEventRecord(e, s) : CUDA_ERROR_OUT_OF_MEMORY;
        if (r != CUDA_SUCCESS) {
            hook_backend_error = r;
            if (e)
                event_put(hd, e);
            rc = CORE_EFAIL;
            break;
        }
        f->ev[done] = e;
        f->on[done] = s;
    }
    if (rc != CORE_OK) {
        for (size_t i = 0; f && i < done; i++)
            event_put(hd, f->ev[i]);
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
    hook_ctx_leave(pushed);
    return rc;
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

/* Called with hd->lock held: gives the fence's events back and frees it. */
static void fence_free(hook_dev_t *hd, fence_t *f)
{
    for (size_t i = 0; i < f->owned; i++) {
        if (hd->primary)
            event_put(hd, f->ev[i]);
    }
    if (f->hub && hd->primary)
        event_put(hd, f->hub);
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

/* Called with hd->lock held: whether every event of f completed (an error,
 * a faulted context, counts as completed). */
static bool fence_done(const fence_t *f)
{
    for (size_t i = 0; i < f->n; i++)
        if (real_cu.cuEventQuery(f->ev[i]) == CUDA_ERROR_NOT_READY)
            return false;
    return true;
}

/* Called with hd->lock held: forgets ordered fences that completed. */
static void ordered_sweep(hook_dev_t *hd)
{
    size_t j = 0;
    for (size_t i = 0; i < hd->nordered; i++) {
        fence_t *f = hd->ordered[i];
        if (fence_done(f)) {
            f->ordered = false;
            if (f->released)
                fence_free(hd, f);
        } else {
            hd->ordered[j++] = f;
        }
    }
    hd->nordered = j;
}

static void event_release(void *ctx, int device, uint64_t event)
{
    (void)ctx;
    hook_dev_t *hd = &hook_devs[device];
    fence_t *f = (fence_t *)(uintptr_t)event;
    pthread_mutex_lock(&hd->lock);
    f->released = true;
    if (!f->ordered)
        fence_free(hd, f); /* else when it completes (ordered_sweep) */
    pthread_mutex_unlock(&hd->lock);
}

/* Makes stream s wait for fence f on the device: for its hub event when it
 * has one, else for every event but the one recorded on s itself (s is in
 * order after its own earlier work; a stream destroyed since, whose handle
 * a new stream may have taken, changed hd->streams_gen); false on an
 * error.  Called with hd->lock held. */
static bool wait_fence(const hook_dev_t *hd, CUstream s, const fence_t *f)
{
    const CUevent *ev = f->hub ? &f->hub : f->ev;
    size_t n = f->hub ? 1 : f->n;
    bool same = f->gen == hd->streams_gen || s == CU_STREAM_LEGACY;
    for (size_t i = 0; i < n; i++) {
        if (!f->hub && same && f->on[i] == s)
            continue;
        CUresult r = real_cu.cuStreamWaitEvent(s, ev[i], 0);
        if (r != CUDA_SUCCESS) {
            hook_backend_error = r;
            return false;
        }
    }
    return true;
}

/* Called with hd->lock held and the primary context current: with many
 * events, gathers f's events into one on the hub, a non-blocking stream of
 * cucache's own that waits for each of them and then records f->hub, so
 * that ordering each of n streams after f costs one wait instead of n - 1
 * (3n + 1 calls in all, not n (n - 1)).  With few, each stream waits for
 * the others' events directly: the hub's hop delays the streams' next work
 * (on bench_train's four streams it cost 4% of the step time on the
 * simulated device), and n (n - 1) calls are at most twice 3n + 1 up to
 * HUB_MIN_EVENTS - 1.  Leaves f->hub NULL when it is not used or fails:
 * each stream then waits for every event but its own. */
static void fence_gather(hook_dev_t *hd, fence_t *f)
{
    if (f->n < HUB_MIN_EVENTS)
        return;
    if (!hd->hub && real_cu.cuStreamCreate(&hd->hub, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        hd->hub = NULL;
        return;
    }
    CUevent h = event_get(hd);
    if (!h)
        return;
    if (!wait_fence(hd, hd->hub, f) || real_cu.cuEventRecord(h, hd->hub) != CUDA_SUCCESS) {
        event_put(hd, h);
        return;
    }
    f->hub = h;
}

void hook_backend_note_stopped(hook_dev_t *hd)
{
    if (!atomic_exchange(&hd->stopped, true) && hook_trace_on())
        hook_trace_put_flags(TRACE_NO_HAND_OUTS, TRACE_API_NONE, hd->ordinal, 0, 0, 0, 0, 0);
}

/* Whether another device's primary context is active: the runtime made it
 * (or the program retained it) by a path hook_ctx.c did not see (the real
 * runtime may reach the driver's context calls through cuGetExportTable's
 * private interface).  Only with more than one device: one driver call per
 * other device (cuDevicePrimaryCtxGetState answers for this process). */
static bool other_primary_active(const hook_dev_t *hd)
{
    static atomic_int ndev = -1;
    static CUdevice handles[HOOK_MAX_DEVICES];
    int n = atomic_load(&ndev);
    if (n < 0) {
        if (real_cu.cuDeviceGetCount(&n) != CUDA_SUCCESS)
            return true; /* cannot tell: as if there were one */
        if (n > HOOK_MAX_DEVICES)
            n = HOOK_MAX_DEVICES;
        for (int i = 0; i < n; i++)
            if (real_cu.cuDeviceGet(&handles[i], i) != CUDA_SUCCESS)
                return true;
        atomic_store(&ndev, n);
    }
    if (n > 1 && !real_cu.cuDevicePrimaryCtxGetState)
        return true;
    for (int i = 0; i < n; i++) {
        unsigned flags = 0;
        int active = 0;
        if (i != hd->ordinal && (real_cu.cuDevicePrimaryCtxGetState(handles[i], &flags, &active) != CUDA_SUCCESS || active))
            return true;
    }
    return false;
}

/* A rule that hands out (core/hand_out.h) hands out the blocks behind a fence at once:
 * from now on the legacy stream (which orders every blocking and
 * per-thread default stream's later work) and every known non-blocking
 * stream wait on the device for the fence, and so does a non-blocking
 * stream created before it completes.  Not during a capture: a wait there
 * would join the graph. */
static int fence_order(void *ctx, int device, uint64_t event, uint64_t first_alloc)
{
    (void)ctx;
    hook_dev_t *hd = &hook_devs[device];
    fence_t *f = (fence_t *)(uintptr_t)event;
    if (atomic_load(&hd->capturing))
        return CORE_EFAIL;
    bool pushed;
    if (!hook_ctx_enter(hd, &pushed))
        return CORE_EFAIL;
    /* a context the hooks did not see (a runtime that creates it by a
     * path no interposer reaches) is caught here, before the lock */
    bool unseen = !atomic_load(&hook_many_contexts) && other_primary_active(hd);
    if (unseen)
        atomic_store(&hook_many_contexts, true);
    pthread_mutex_lock(&hd->lock);
    int rc = CORE_OK;
    /* under the lock: a second context stops the hand-outs and then waits
     * for the fences on hd->ordered (hook_ctx.c), so a fence ordered here
     * either is on that list by then or is refused.  (A device whose
     * memory the CPU shares never asks: its core is stopped before it is
     * published, state.c.) */
    if (atomic_load(&hook_many_contexts)) {
        hook_backend_note_stopped(hd);
        rc = CORE_ESTOP;
    } else if (hd->ncaptures || !real_cu.cuStreamWaitEvent) {
        rc = CORE_EFAIL;
    }
    /* forget the ordered fences that completed before the list grows: with
     * a hand-out at most allocations, it would otherwise keep every fence
     * (and its events) of the run */
    bool grow = false;
    if (rc == CORE_OK && hd->nordered == hd->ordered_cap) {
        ordered_sweep(hd);
        grow = hd->ordered_cap == 0 || hd->nordered > hd->ordered_cap / 2;
    }
    if (grow) {
        size_t cap = hd->ordered_cap ? hd->ordered_cap * 2 : 16;
        fence_t **n = hostalloc_realloc(hd->ordered, cap * sizeof *n);
        if (n) {
            hd->ordered = n;
            hd->ordered_cap = cap;
        } else {
            rc = CORE_EFAIL;
        }
    }
    /* A fence of one event, on the legacy stream, with no non-blocking
     * stream alive: the legacy stream is in order after it, and so is
     * every blocking and per-thread default stream's later work (it waits
     * for the legacy stream's earlier work): nothing needs to wait. */
    bool only_legacy = f->n == 1 && f->owned == 1 && hd->nstreams == 0;
    if (rc == CORE_OK && !f->hub && !only_legacy)
        fence_gather(hd, f);
    /* waits already placed when a later one fails only order more */
    if (rc == CORE_OK && !only_legacy && !wait_fence(hd, CU_STREAM_LEGACY, f))
        rc = CORE_EFAIL;
    for (size_t i = 0; rc == CORE_OK && i < hd->nstreams; i++)
        if (!wait_fence(hd, hd->streams[i], f))
            rc = CORE_EFAIL;
    if (rc == CORE_OK) {
        f->ordered = true;
        f->first_alloc = first_alloc;
        hd->ordered[hd->nordered++] = f;
    }
    pthread_mutex_unlock(&hd->lock);
    hook_ctx_leave(pushed);
    if (unseen) /* its first work may reach blocks handed out so far, on any device */
        for (int i = 0; i < HOOK_MAX_DEVICES; i++)
            if (hook_dev_core(&hook_devs[i]))
                hook_backend_wait_ordered(&hook_devs[i], UINT64_MAX);
    return rc;
}

void hook_backend_drop_ordered(hook_dev_t *hd)
{
    /* their events die with the context, reset next: neither queried
     * later nor put back among the spares (core_dev_destroy released
     * them all) */
    for (size_t i = 0; i < hd->nordered; i++)
        hostalloc_free(hd->ordered[i]);
    hd->nordered = 0;
}

void hook_backend_order_new_stream(hook_dev_t *hd, CUstream s)
{
    if (!hd->nordered)
        return;
    ordered_sweep(hd);
    for (size_t i = 0; i < hd->nordered; i++)
        if (!wait_fence(hd, s, hd->ordered[i]))
            hook_warn(HOOK_WARN_BACKEND,
                      "a new stream could not be made to wait for memory handed out before its earlier work "
                      "completed (error %d); it may see that memory early",
                      (int)hook_backend_error);
}

void hook_backend_wait_ordered(hook_dev_t *hd, uint64_t alloc)
{
    if (!hd->primary)
        return;
    bool pushed;
    bool entered = hook_ctx_enter(hd, &pushed);
    CUstreamCaptureMode mode;
    bool relaxed = relax(hd, &mode); /* a library may ask while the program captures */
    pthread_mutex_lock(&hd->lock);
    for (size_t i = 0; i < hd->nordered; i++)
        if (hd->ordered[i]->first_alloc <= alloc)
            for (size_t k = 0; k < hd->ordered[i]->n; k++)
                real_cu.cuEventSynchronize(hd->ordered[i]->ev[k]);
    ordered_sweep(hd);
    pthread_mutex_unlock(&hd->lock);
    unrelax(relaxed, &mode);
    if (entered)
        hook_ctx_leave(pushed);
}

void hook_stop_hand_outs(hook_dev_t *hd)
{
    core_dev_t *d = hook_dev_core(hd);
    if (!d)
        return;
    hook_backend_note_stopped(hd);
    core_stop_hand_outs(d);
    hook_backend_wait_ordered(hd, UINT64_MAX);
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
    .work_epoch = &hook_submissions, /* interpose/submit.c */
    .fence_order = fence_order,
};
