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

HOOK_API cudaError_t cudaDeviceSynchronize(void)
{
    hook_dev_t *hd = hook_bypass() ? NULL : before_sync(hook_rt_device(false));
    cudaError_t e = RT_REAL(cudaDeviceSynchronize);
    if (e == cudaSuccess) {
        progressed(hd);
        traced(TRACE_DEVICE_SYNC, NULL, 0);
    }
    return e;
}

HOOK_API CUresult cuCtxSynchronize(void)
{
    hook_dev_t *hd = hook_bypass() ? NULL : before_sync(hook_cu_device(false));
    CUresult r = CU_REAL(cuCtxSynchronize);
    if (r == CUDA_SUCCESS) {
        progressed(hd);
        traced(TRACE_DEVICE_SYNC, NULL, 0);
    }
    return r;
}

#define RT_PROGRESS(call, kind, handle)                                                                                \
    do {                                                                                                               \
        bool bypass_ = hook_bypass();                                                                                  \
        cudaError_t e_ = call;                                                                                         \
        if (e_ == cudaSuccess && !bypass_) {                                                                           \
            progressed(hook_rt_device(false));                                                                         \
            traced((kind), (handle), 0);                                                                               \
        }                                                                                                              \
        return e_;                                                                                                     \
    } while (0)

#define CU_PROGRESS(call, kind, handle)                                                                                \
    do {                                                                                                               \
        bool bypass_ = hook_bypass();                                                                                  \
        CUresult r_ = call;                                                                                            \
        if (r_ == CUDA_SUCCESS && !bypass_) {                                                                          \
            progressed(hook_cu_device(false));                                                                         \
            traced((kind), (handle), 0);                                                                               \
        }                                                                                                              \
        return r_;                                                                                                     \
    } while (0)

HOOK_API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    RT_PROGRESS(RT_REAL(cudaStreamSynchronize, stream), TRACE_STREAM_SYNC, stream);
}

HOOK_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
    RT_PROGRESS(RT_REAL(cudaStreamSynchronize_ptsz, stream), TRACE_STREAM_SYNC, stream);
}

HOOK_API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    RT_PROGRESS(RT_REAL(cudaEventSynchronize, event), TRACE_EVENT_SYNC, event);
}

HOOK_API CUresult cuStreamSynchronize(CUstream hStream)
{
    CU_PROGRESS(CU_REAL(cuStreamSynchronize, hStream), TRACE_STREAM_SYNC, hStream);
}

HOOK_API CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    CU_PROGRESS(CU_REAL(cuStreamSynchronize_ptsz, hStream), TRACE_STREAM_SYNC, hStream);
}

HOOK_API CUresult cuEventSynchronize(CUevent hEvent)
{
    CU_PROGRESS(CU_REAL(cuEventSynchronize, hEvent), TRACE_EVENT_SYNC, hEvent);
}

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

/* Before a stream's destruction: its last work remembered, and the stream
 * out of the lists (its counted trace record written there). */
static int destroying(CUstream s, unsigned *flags)
{
    hook_stream_retiring(s);
    int dev = hook_stream_forget(s, flags);
    if (dev < 0)
        traced(TRACE_STREAM_DESTROY, s, 0);
    return dev;
}

/* After it: a failed destruction puts a counted stream back. */
static void destroyed(bool ok, CUstream s, int dev, unsigned flags)
{
    if (ok)
        hook_stream_destroyed(s);
    else if (dev >= 0)
        hook_stream_created(&hook_devs[dev], s, flags);
}

HOOK_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    bool mine = !hook_bypass();
    cudaError_t e = RT_REAL(cudaStreamCreateWithFlags, pStream, flags);
    created(mine && e == cudaSuccess, true, pStream, flags);
    return e;
}

HOOK_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    bool mine = !hook_bypass();
    cudaError_t e = RT_REAL(cudaStreamCreateWithPriority, pStream, flags, priority);
    created(mine && e == cudaSuccess, true, pStream, flags);
    return e;
}

HOOK_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    bool mine = !hook_bypass();
    CUresult r = CU_REAL(cuStreamCreate, phStream, Flags);
    created(mine && r == CUDA_SUCCESS, false, phStream, Flags);
    return r;
}

HOOK_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    bool mine = !hook_bypass();
    CUresult r = CU_REAL(cuStreamCreateWithPriority, phStream, flags, priority);
    created(mine && r == CUDA_SUCCESS, false, phStream, flags);
    return r;
}

/* Destruction: the stream's last work is remembered before it goes. */
HOOK_API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    bool mine = !hook_bypass();
    unsigned flags = 0;
    int dev = mine ? destroying(stream, &flags) : -1;
    cudaError_t e = RT_REAL(cudaStreamDestroy, stream);
    if (mine)
        destroyed(e == cudaSuccess, stream, dev, flags);
    return e;
}

HOOK_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    bool mine = !hook_bypass();
    unsigned flags = 0;
    int dev = mine ? destroying(hStream, &flags) : -1;
    CUresult r = CU_REAL(cuStreamDestroy_v2, hStream);
    if (mine)
        destroyed(r == CUDA_SUCCESS, hStream, dev, flags);
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

HOOK_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    bool mine = !hook_bypass();
    cudaError_t e = RT_REAL(cudaStreamBeginCapture, stream, mode);
    capture_began(mine && e == cudaSuccess, true, stream, false, (unsigned)mode);
    return e;
}

HOOK_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    bool mine = !hook_bypass();
    cudaError_t e = RT_REAL(cudaStreamBeginCapture_ptsz, stream, mode);
    capture_began(mine && e == cudaSuccess, true, stream, true, (unsigned)mode);
    return e;
}

HOOK_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    bool mine = !hook_bypass();
    CUresult r = CU_REAL(cuStreamBeginCapture_v2, hStream, mode);
    capture_began(mine && r == CUDA_SUCCESS, false, hStream, false, (unsigned)mode);
    return r;
}

HOOK_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    bool mine = !hook_bypass();
    CUresult r = CU_REAL(cuStreamBeginCapture_v2_ptsz, hStream, mode);
    capture_began(mine && r == CUDA_SUCCESS, false, hStream, true, (unsigned)mode);
    return r;
}

/* The capture is over unless the call came from the wrong thread (the
 * runtime's and the driver's codes are both 908). */
HOOK_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    bool mine = !hook_bypass();
    cudaError_t e = RT_REAL(cudaStreamEndCapture, stream, pGraph);
    if (mine && e != cudaErrorStreamCaptureWrongThread) {
        hook_capture_end(stream, false);
        traced(TRACE_CAPTURE_END, stream, 0);
    }
    return e;
}

HOOK_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
    bool mine = !hook_bypass();
    cudaError_t e = RT_REAL(cudaStreamEndCapture_ptsz, stream, pGraph);
    if (mine && e != cudaErrorStreamCaptureWrongThread) {
        hook_capture_end(stream, true);
        traced(TRACE_CAPTURE_END, stream, 0);
    }
    return e;
}

HOOK_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    bool mine = !hook_bypass();
    CUresult r = CU_REAL(cuStreamEndCapture, hStream, phGraph);
    if (mine && r != CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD) {
        hook_capture_end(hStream, false);
        traced(TRACE_CAPTURE_END, hStream, 0);
    }
    return r;
}

HOOK_API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    bool mine = !hook_bypass();
    CUresult r = CU_REAL(cuStreamEndCapture_ptsz, hStream, phGraph);
    if (mine && r != CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD) {
        hook_capture_end(hStream, true);
        traced(TRACE_CAPTURE_END, hStream, 0);
    }
    return r;
}

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
    return RT_REAL(cudaDeviceReset);
}

HOOK_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    if (!hook_bypass() && hook_real_driver()) {
        int ordinal = hook_ordinal_of(dev);
        if (ordinal >= 0 && hook_dev_core(&hook_devs[ordinal]))
            hook_dev_drop(&hook_devs[ordinal]);
    }
    return CU_REAL(cuDevicePrimaryCtxReset_v2, dev);
}

/* Destroying a device's primary context (drivers refuse it; if one did
 * not, the cache's segments would die with it): drop the cache first.
 * Created contexts hold nothing cached. */
HOOK_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    if (!hook_bypass() && ctx)
        for (int i = 0; i < HOOK_MAX_DEVICES; i++)
            if (hook_dev_core(&hook_devs[i]) && hook_devs[i].primary == ctx)
                hook_dev_drop(&hook_devs[i]);
    return CU_REAL(cuCtxDestroy_v2, ctx);
}
