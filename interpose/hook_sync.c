/*
 * Hooks that only keep cucache informed, runtime and driver alike:
 * synchronisations (a completed one makes pending frees reusable), stream
 * creation and destruction (the non-blocking streams a fence must cover),
 * stream capture (no illegal call while it lasts, and a private pool for
 * what it allocates), and device reset (that device's cache is dropped).
 *
 * A runtime hook runs the real runtime with the guard up, so the driver hook
 * the runtime reaches passes through and nothing is counted twice.
 */
#include "hook.h"
#include "peer.h"
#include "real.h"
#include "recorder.h"
#include "state.h"
#include "streams.h"
#include "trace.h"

/* ------------------------------------------------------------------------
 * Synchronisation
 * ---------------------------------------------------------------------- */

/* A device synchronisation is about to begin: fence the frees made so far,
 * so that the synchronisation completes that fence (and only frees made
 * before it began are released after it: another thread's free during the
 * synchronisation may still be in use). */
static hook_dev_t *before_sync(hook_dev_t *hd)
{
    core_dev_t *d = hd ? hook_dev_core(hd) : NULL;
    if (d)
        core_fence(d);
    return hd;
}

/* Some work completed: release the frees whose fences say so. */
static void progressed(hook_dev_t *hd)
{
    core_dev_t *d = hd ? hook_dev_core(hd) : NULL;
    if (d)
        core_poll(d);
}

/* CUCACHE_TRACE: a synchronisation (kind) that returned, or a stream or
 * capture event. */
static void traced(unsigned kind, const void *handle, uint64_t size)
{
    if (HOOK_UNLIKELY(hook_trace_on()))
        hook_trace_put(kind, TRACE_API_NONE, hook_last_dev, (uintptr_t)handle, 0, size, 0);
}

/* After a device synchronisation that began with before_sync(hd). */
static void device_synced(hook_dev_t *hd, bool ok)
{
    if (!ok)
        return;
    progressed(hd);
    traced(TRACE_DEVICE_SYNC, NULL, 0);
}

HOOK_API cudaError_t cudaDeviceSynchronize(void)
{
    hook_dev_t *hd = hook_bypass() ? NULL : before_sync(hook_rt_device(false));
    cudaError_t e = RT_REAL(cudaDeviceSynchronize);
    device_synced(hd, e == cudaSuccess);
    return e;
}

HOOK_API CUresult cuCtxSynchronize(void)
{
    hook_dev_t *hd = hook_bypass() ? NULL : before_sync(hook_cu_device(false));
    CUresult r = CU_REAL(cuCtxSynchronize);
    device_synced(hd, r == CUDA_SUCCESS);
    return r;
}

/* The tests of a real call's result that HOOK_THEN takes. */
static bool rt_ok(cudaError_t r)
{
    return r == cudaSuccess;
}

static bool cu_ok(CUresult r)
{
    return r == CUDA_SUCCESS;
}

/* A capture's end ended it unless called from the wrong thread. */
static bool rt_ended(cudaError_t r)
{
    return r != cudaErrorStreamCaptureWrongThread;
}

static bool cu_ended(CUresult r)
{
    return r != CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
}

/* The real call's result, after telling cucache: `then(ok, ...)`, ok
 * saying that the call was the program's own (not made under the guard)
 * and that good(its result) holds.  RT_THEN and CU_THEN: good is
 * success.  The hook returns it. */
#define HOOK_THEN(type, call, good, then, ...)                                                                         \
    __extension__({                                                                                                    \
        bool mine_ = !hook_bypass();                                                                                   \
        type r_ = call;                                                                                                \
        then(mine_ &&good(r_), __VA_ARGS__);                                                                           \
        r_;                                                                                                            \
    })
#define RT_THEN(call, then, ...) HOOK_THEN(cudaError_t, call, rt_ok, then, __VA_ARGS__)
#define CU_THEN(call, then, ...) HOOK_THEN(CUresult, call, cu_ok, then, __VA_ARGS__)

/* After a stream's or an event's synchronisation (kind): work completed. */
static void synced(bool ok, bool runtime, unsigned kind, const void *handle)
{
    if (!ok)
        return;
    progressed(runtime ? hook_rt_device(false) : hook_cu_device(false));
    traced(kind, handle, 0);
}

/* The synchronisations on one stream or event (kind), runtime and driver. */
#define RT_SYNC_HOOK(name, handle_t, kind)                                                                             \
    HOOK_API cudaError_t name(handle_t h)                                                                              \
    {                                                                                                                  \
        return RT_THEN(RT_REAL(name, h), synced, true, kind, h);                                                       \
    }
#define CU_SYNC_HOOK(name, handle_t, kind)                                                                             \
    HOOK_API CUresult name(handle_t h)                                                                                 \
    {                                                                                                                  \
        return CU_THEN(CU_REAL(name, h), synced, false, kind, h);                                                      \
    }

RT_SYNC_HOOK(cudaStreamSynchronize, cudaStream_t, TRACE_STREAM_SYNC)
RT_SYNC_HOOK(cudaStreamSynchronize_ptsz, cudaStream_t, TRACE_STREAM_SYNC)
RT_SYNC_HOOK(cudaEventSynchronize, cudaEvent_t, TRACE_EVENT_SYNC)
CU_SYNC_HOOK(cuStreamSynchronize, CUstream, TRACE_STREAM_SYNC)
CU_SYNC_HOOK(cuStreamSynchronize_ptsz, CUstream, TRACE_STREAM_SYNC)
CU_SYNC_HOOK(cuEventSynchronize, CUevent, TRACE_EVENT_SYNC)

/* ------------------------------------------------------------------------
 * Streams
 * ---------------------------------------------------------------------- */

/* The device of a hook's call, for bookkeeping after it (opened if new). */
static hook_dev_t *call_device(bool runtime)
{
    return runtime ? hook_rt_device(true) : hook_cu_device(true);
}

/* After a stream creation: ok when the program's own call succeeded.  The
 * runtime's cudaStreamNonBlocking is CU_STREAM_NON_BLOCKING.  A counted
 * stream gets its trace record (TRACE_REC_COUNTED) in streams.c, before the
 * core sees the new count; any other is recorded here, with the thread's
 * last device. */
static void created(bool ok, bool runtime, CUstream *ps, unsigned flags)
{
    if (!ok)
        return;
    hook_dev_t *hd = call_device(runtime);
    if (!(hd && hook_stream_created(hd, *ps, flags)))
        traced(TRACE_STREAM_CREATE, *ps, flags);
}

/* A stream's destruction, from before the real call to after it. */
typedef struct destroy_s {
    CUstream s;
    bool mine;      /* the program's own call */
    int dev;        /* the device it was counted on, or -1 */
    unsigned flags; /* its creation flags, when counted */
} destroy_t;

/* Before it: the stream's last work remembered, and the stream out of the
 * lists (its counted trace record written there). */
static destroy_t destroying(CUstream s)
{
    destroy_t d = {s, !hook_bypass(), -1, 0};
    if (!d.mine)
        return d;
    hook_stream_retiring(s);
    d.dev = hook_stream_forget(s, &d.flags);
    if (d.dev < 0)
        traced(TRACE_STREAM_DESTROY, s, 0);
    return d;
}

/* After it: a failed destruction puts a counted stream back. */
static void destroyed(const destroy_t *d, bool ok)
{
    if (!d->mine)
        return;
    if (ok)
        hook_stream_destroyed(d->s);
    else if (d->dev >= 0)
        hook_stream_created(&hook_devs[d->dev], d->s, d->flags);
}

HOOK_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    return RT_THEN(RT_REAL(cudaStreamCreateWithFlags, pStream, flags), created, true, pStream, flags);
}

HOOK_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    return RT_THEN(RT_REAL(cudaStreamCreateWithPriority, pStream, flags, priority), created, true, pStream, flags);
}

HOOK_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return CU_THEN(CU_REAL(cuStreamCreate, phStream, Flags), created, false, phStream, Flags);
}

HOOK_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    return CU_THEN(CU_REAL(cuStreamCreateWithPriority, phStream, flags, priority), created, false, phStream, flags);
}

/* Destruction: the stream's last work is remembered before it goes. */
HOOK_API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    destroy_t d = destroying(stream);
    cudaError_t e = RT_REAL(cudaStreamDestroy, stream);
    destroyed(&d, e == cudaSuccess);
    return e;
}

HOOK_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    destroy_t d = destroying(hStream);
    CUresult r = CU_REAL(cuStreamDestroy_v2, hStream);
    destroyed(&d, r == CUDA_SUCCESS);
    return r;
}

/* ------------------------------------------------------------------------
 * Capture
 * ---------------------------------------------------------------------- */

static void capture_began(bool ok, bool runtime, CUstream s, bool per_thread, unsigned mode)
{
    hook_dev_t *hd;
    if (ok && (hd = call_device(runtime)))
        hook_capture_begin(hd, s, per_thread);
    if (ok)
        traced(TRACE_CAPTURE_BEGIN, s, mode);
}

/* The capture is over unless the call came from the wrong thread (the
 * runtime's and the driver's codes are both 908). */
static void capture_ended(bool ok, CUstream s, bool per_thread)
{
    if (!ok)
        return;
    hook_capture_end(s, per_thread);
    traced(TRACE_CAPTURE_END, s, 0);
}

/* A capture's beginning and end, runtime and driver, each with its
 * per-thread-default-stream twin (per_thread). */
#define RT_CAPTURE_HOOKS(begin, end, per_thread)                                                                       \
    HOOK_API cudaError_t begin(cudaStream_t stream, enum cudaStreamCaptureMode mode)                                   \
    {                                                                                                                  \
        return RT_THEN(RT_REAL(begin, stream, mode), capture_began, true, stream, per_thread, (unsigned)mode);         \
    }                                                                                                                  \
    HOOK_API cudaError_t end(cudaStream_t stream, cudaGraph_t *pGraph)                                                 \
    {                                                                                                                  \
        return HOOK_THEN(cudaError_t, RT_REAL(end, stream, pGraph), rt_ended, capture_ended, stream, per_thread);      \
    }
#define CU_CAPTURE_HOOKS(begin, end, per_thread)                                                                       \
    HOOK_API CUresult begin(CUstream hStream, CUstreamCaptureMode mode)                                                \
    {                                                                                                                  \
        return CU_THEN(CU_REAL(begin, hStream, mode), capture_began, false, hStream, per_thread, (unsigned)mode);      \
    }                                                                                                                  \
    HOOK_API CUresult end(CUstream hStream, CUgraph *phGraph)                                                          \
    {                                                                                                                  \
        return HOOK_THEN(CUresult, CU_REAL(end, hStream, phGraph), cu_ended, capture_ended, hStream, per_thread);      \
    }

RT_CAPTURE_HOOKS(cudaStreamBeginCapture, cudaStreamEndCapture, false)
RT_CAPTURE_HOOKS(cudaStreamBeginCapture_ptsz, cudaStreamEndCapture_ptsz, true)
CU_CAPTURE_HOOKS(cuStreamBeginCapture_v2, cuStreamEndCapture, false)
CU_CAPTURE_HOOKS(cuStreamBeginCapture_v2_ptsz, cuStreamEndCapture_ptsz, true)

/* ------------------------------------------------------------------------
 * Device reset
 * ---------------------------------------------------------------------- */

/* The cache is dropped first, while its context still exists: its
 * segments go back to CUDA, then the program's reset destroys the rest. */
HOOK_API cudaError_t cudaDeviceReset(void)
{
    hook_dev_t *hd;
    if (!hook_bypass() && (hd = hook_rt_device(false)))
        hook_dev_drop(hd);
    int dev;
    if (!hook_bypass() && hook_real_runtime() && HOOK_REAL(real_rt.cudaGetDevice(&dev)) == cudaSuccess)
        hook_peer_reset(dev); /* its context's peer access ends, both ways */
    return RT_REAL(cudaDeviceReset);
}

HOOK_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    if (!hook_bypass() && hook_real_driver()) {
        int ordinal = hook_ordinal_of(dev);
        if (ordinal >= 0 && hook_dev_core(&hook_devs[ordinal]))
            hook_dev_drop(&hook_devs[ordinal]);
        hook_peer_reset(ordinal);
    }
    return CU_REAL(cuDevicePrimaryCtxReset_v2, dev);
}
