/*
 * The device's ordering after fences, for a reuse rule that hands out
 * (core/hand_out.h): the backend's fence_order, and everything that keeps
 * the memory it hands out from being reached before the old owner's work
 * completed.
 *
 *   - fence_order (hook_order_fence): from now on the legacy stream and
 *     every known non-blocking stream of the device wait on the device for
 *     the fence; a fence of many events is first gathered on the hub, a
 *     stream of cucache's own (fence_gather); the fence stays on
 *     hd->ordered until it completes;
 *   - a non-blocking stream created meanwhile waits for those fences too
 *     (hook_order_new_stream, from streams.c);
 *   - before memory leaves the device's streams (an IPC export, a pointer
 *     question a library asks before RDMA, a dma-buf export) the host waits
 *     for the fences that may have handed it out (hook_order_wait);
 *   - a second CUDA context, or one no hook saw, stops the hand-outs for
 *     good and waits for every fence (hook_order_stop, from hook_ctx.c and
 *     fence_order itself), and the trace records the stop once
 *     (hook_order_note_stopped);
 *   - a device reset forgets the fences (hook_order_drop);
 *   - while the program has one stream of its own, a probe on the legacy
 *     stream tells whether its work runs there too (hook_order_probe):
 *     hand-outs are paced from two streams with work on (core/hand_out.h).
 *
 * The fences themselves (events on every stream) are backend.c's.
 */
#include <time.h>

#include "backend.h"
#include "contexts.h"
#include "fence.h"
#include "hook.h"
#include "hostalloc.h"
#include "log.h"
#include "order.h"
#include "real.h"
#include "recorder.h"
#include "rules.h"
#include "state.h"
#include "streams.h"
#include "trace.h"
#include "vec.h"

/* fence_gather: a fence of this many events or more is gathered on the hub */
enum { HUB_MIN_EVENTS = 8 };
/* hook_order_probe: asked at most this often, and this long after the last
 * ordered fence was found completed (on coarse_ns's clock) */
enum { PROBE_EVERY_NS = 1000000, PROBE_SETTLE_NS = 20000000 };

/* CLOCK_MONOTONIC_COARSE in nanoseconds: a few milliseconds' resolution, a
 * third of the precise clock's cost, read before every plain free while
 * the probe may ask. */
static uint64_t coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Called with hd->lock held: forgets ordered fences that completed (the
 * time the last one went: hd->clear_at). */
static void ordered_sweep(hook_dev_t *hd)
{
    size_t j = 0;
    for (size_t i = 0; i < hd->nordered; i++) {
        fence_t *f = hd->ordered[i];
        if (hook_fence_done(f)) {
            f->ordered = false;
            if (f->released)
                hook_fence_free(hd, f);
        } else {
            hd->ordered[j++] = f;
        }
    }
    if (j == 0 && hd->nordered)
        hd->clear_at = coarse_ns(); /* hook_order_probe */
    hd->nordered = j;
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
    CUevent h = hook_event_get(hd);
    if (!h)
        return;
    if (!wait_fence(hd, hd->hub, f) || real_cu.cuEventRecord(h, hd->hub) != CUDA_SUCCESS) {
        hook_event_put(hd, h);
        return;
    }
    f->hub = h;
}

void hook_order_note_stopped(hook_dev_t *hd)
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
        if (i != hd->ordinal &&
            (real_cu.cuDevicePrimaryCtxGetState(handles[i], &flags, &active) != CUDA_SUCCESS || active))
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
int hook_order_fence(void *ctx, int device, uint64_t event, uint64_t first_alloc)
{
    hook_dev_t *hd = hook_backend_dev(ctx, device);
    fence_t *f = (fence_t *)(uintptr_t)event;
    if (atomic_load(&hd->capturing))
        return CORE_EFAIL;
    hook_scope_t sc;
    if (!hook_enter(hd, false, &sc))
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
        hook_order_note_stopped(hd);
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
    if (grow && !vec_reserve((void **)&hd->ordered, &hd->ordered_cap, hd->ordered_cap + 1, sizeof *hd->ordered))
        rc = CORE_EFAIL;
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
    hook_leave(&sc);
    if (unseen) /* its first work may reach blocks handed out so far, on any device */
        for (int i = 0; i < HOOK_MAX_DEVICES; i++)
            if (hook_dev_core(&hook_devs[i]))
                hook_order_wait(&hook_devs[i], UINT64_MAX);
    return rc;
}

/* The legacy stream's probe: while the program has exactly one stream of
 * its own (with none the hand-outs are not paced whatever the legacy
 * stream runs, with two or more they are), whether its work also runs on
 * the legacy stream.  Asked only while no wait of cucache's is on the
 * legacy stream, and has not been for PROBE_SETTLE_NS (every fence the
 * device was ordered after was found completed that long ago: a wait whose
 * event completed leaves the stream within microseconds on a GPU; the time
 * leaves room for a loaded host running the simulated device's stream
 * workers late): then work still queued there is the
 * program's (cucache's own event records there complete as they are
 * queued), and the legacy stream is counted as one of its streams, for
 * good.  Asked at most once every PROBE_EVERY_NS. */
void hook_order_probe(hook_dev_t *hd)
{
    if (atomic_load_explicit(&hd->counted, memory_order_relaxed) != 1 ||
        atomic_load_explicit(&hd->default_busy, memory_order_relaxed) || !conf_rule(&hook_conf)->hands_out ||
        atomic_load(&hd->stopped) || atomic_load(&hd->capturing))
        return;
    uint64_t now = coarse_ns(), next = atomic_load_explicit(&hd->probe_next, memory_order_relaxed);
    if (now < next || !atomic_compare_exchange_strong(&hd->probe_next, &next, now + PROBE_EVERY_NS))
        return; /* asked less than PROBE_EVERY_NS ago, or by another thread now */
    hook_scope_t sc;
    if (!hook_enter(hd, false, &sc))
        return;
    pthread_mutex_lock(&hd->lock);
    bool busy = false;
    if (hook_live_streams(hd) == 1 && !hd->ncaptures) {
        /* the newest ordered fence completed: so did every older one */
        if (hd->nordered && hook_fence_done(hd->ordered[hd->nordered - 1]))
            ordered_sweep(hd);
        if (hd->nordered == 0 && now >= hd->clear_at + PROBE_SETTLE_NS)
            busy = real_cu.cuStreamQuery(CU_STREAM_LEGACY) == CUDA_ERROR_NOT_READY;
    }
    pthread_mutex_unlock(&hd->lock);
    hook_leave(&sc);
    if (busy)
        hook_stream_default_busy(hd);
}

void hook_order_drop(hook_dev_t *hd)
{
    /* and the streams the probe saw, and their count */
    atomic_store(&hd->default_busy, false);
    atomic_store(&hd->counted, 0);
    /* their events die with the context, reset next: neither queried
     * later nor put back among the spares (core_dev_destroy released
     * them all) */
    for (size_t i = 0; i < hd->nordered; i++)
        hostalloc_free(hd->ordered[i]);
    hd->nordered = 0;
}

void hook_order_new_stream(hook_dev_t *hd, CUstream s)
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

void hook_order_wait(hook_dev_t *hd, uint64_t alloc)
{
    if (!hd->primary)
        return;
    hook_scope_t sc; /* relaxed: a library may ask while the program captures */
    bool entered = hook_enter(hd, true, &sc);
    pthread_mutex_lock(&hd->lock);
    for (size_t i = 0; i < hd->nordered; i++)
        if (hd->ordered[i]->first_alloc <= alloc)
            for (size_t k = 0; k < hd->ordered[i]->n; k++)
                real_cu.cuEventSynchronize(hd->ordered[i]->ev[k]);
    ordered_sweep(hd);
    pthread_mutex_unlock(&hd->lock);
    if (entered)
        hook_leave(&sc);
}

void hook_order_stop(hook_dev_t *hd)
{
    core_dev_t *d = hook_dev_core(hd);
    if (!d)
        return;
    hook_order_note_stopped(hd);
    core_stop_hand_outs(d);
    hook_order_wait(hd, UINT64_MAX);
}
