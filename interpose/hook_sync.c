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

#define RT_REAL(name, ...)                                                                                             \
    (hook_real_runtime() && real_rt.name ? HOOK_REAL(real_rt.name(__VA_ARGS__)) : cudaErrorInsufficientDriver)
#define CU_REAL(name, ...) (hook_real_driver() && real_cu.name ? real_cu.name(__VA_ARGS__) : CUDA_ERROR_NOT_INITIALIZED)

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

HOOK_API cudaError_t cudaDeviceSynchronize(void)
{
    hook_dev_t *hd = hook_bypass() ? NULL : before_sync(hook_rt_device(false));
    cudaError_t e = RT_REAL(cudaDeviceSynchronize);
    if (e == cudaSuccess)
        progressed(hd);
    return e;
}

HOOK_API CUresult cuCtxSynchronize(void)
{
    hook_dev_t *hd = hook_bypass() ? NULL : before_sync(hook_cu_device(false));
    CUresult r = CU_REAL(cuCtxSynchronize);
    if (r == CUDA_SUCCESS)
        progressed(hd);
    return r;
}

#define RT_PROGRESS(call)                                                                                              \
    do {                                                                                                               \
        bool bypass_ = hook_bypass();                                                                                  \
        cudaError_t e_ = call;                                                                                         \
        if (e_ == cudaSuccess && !bypass_)                                                                             \
            progressed(hook_rt_device(false));                                                                         \
        return e_;                                                                                                     \
    } while (0)

#define CU_PROGRESS(call)                                                                                              \
    do {                                                                                                               \
        bool bypass_ = hook_bypass();                                                                                  \
        CUresult r_ = call;                                                                                            \
        if (r_ == CUDA_SUCCESS && !bypass_)                                                                            \
            progressed(hook_cu_device(false));                                                                         \
        return r_;                                                                                                     \
    } while (0)

HOOK_API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    RT_PROGRESS(RT_REAL(cudaStreamSynchronize, stream));
}

HOOK_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
    RT_PROGRESS(RT_REAL(cudaStreamSynchronize_ptsz, stream));
}

HOOK_API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    RT_PROGRESS(RT_REAL(cudaEventSynchronize, event));
}

HOOK_API CUresult cuStreamSynchronize(CUstream hStream)
{
    CU_PROGRESS(CU_REAL(cuStreamSynchronize, hStream));
}

HOOK_API CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    CU_PROGRESS(CU_REAL(cuStreamSynchronize_ptsz, hStream));
}

HOOK_API CUresult cuEventSynchronize(CUevent hEvent)
{
    CU_PROGRESS(CU_REAL(cuEventSynchronize, hEvent));
}

/* ------------------------------------------------------------------------
 * Streams
 * ---------------------------------------------------------------------- */

HOOK_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    bool bypass = hook_bypass();
    cudaError_t e = RT_REAL(cudaStreamCreateWithFlags, pStream, flags);
    hook_dev_t *hd;
    if (e == cudaSuccess && !bypass && (flags & cudaStreamNonBlocking) && (hd = hook_rt_device(true)))
        hook_stream_created(hd, *pStream, CU_STREAM_NON_BLOCKING);
    return e;
}

HOOK_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    bool bypass = hook_bypass();
    cudaError_t e = RT_REAL(cudaStreamCreateWithPriority, pStream, flags, priority);
    hook_dev_t *hd;
    if (e == cudaSuccess && !bypass && (flags & cudaStreamNonBlocking) && (hd = hook_rt_device(true)))
        hook_stream_created(hd, *pStream, CU_STREAM_NON_BLOCKING);
    return e;
}

HOOK_API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    bool bypass = hook_bypass();
    if (!bypass)
        hook_stream_retiring(stream);
    cudaError_t e = RT_REAL(cudaStreamDestroy, stream);
    if (e == cudaSuccess && !bypass)
        hook_stream_destroyed(stream);
    return e;
}

HOOK_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    bool bypass = hook_bypass();
    CUresult r = CU_REAL(cuStreamCreate, phStream, Flags);
    hook_dev_t *hd;
    if (r == CUDA_SUCCESS && !bypass && (Flags & CU_STREAM_NON_BLOCKING) && (hd = hook_cu_device(true)))
        hook_stream_created(hd, *phStream, Flags);
    return r;
}

HOOK_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    bool bypass = hook_bypass();
    CUresult r = CU_REAL(cuStreamCreateWithPriority, phStream, flags, priority);
    hook_dev_t *hd;
    if (r == CUDA_SUCCESS && !bypass && (flags & CU_STREAM_NON_BLOCKING) && (hd = hook_cu_device(true)))
        hook_stream_created(hd, *phStream, flags);
    return r;
}

HOOK_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    bool bypass = hook_bypass();
    if (!bypass)
        hook_stream_retiring(hStream);
    CUresult r = CU_REAL(cuStreamDestroy_v2, hStream);
    if (r == CUDA_SUCCESS && !bypass)
        hook_stream_destroyed(hStream);
    return r;
}

/* ------------------------------------------------------------------------
 * Capture
 * ---------------------------------------------------------------------- */

HOOK_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    bool bypass = hook_bypass();
    cudaError_t e = RT_REAL(cudaStreamBeginCapture, stream, mode);
    hook_dev_t *hd;
    if (e == cudaSuccess && !bypass && (hd = hook_rt_device(true)))
        hook_capture_begin(hd, stream, false, (int)mode);
    return e;
}

HOOK_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    bool bypass = hook_bypass();
    cudaError_t e = RT_REAL(cudaStreamBeginCapture_ptsz, stream, mode);
    hook_dev_t *hd;
    if (e == cudaSuccess && !bypass && (hd = hook_rt_device(true)))
        hook_capture_begin(hd, stream, true, (int)mode);
    return e;
}

/* The capture is over unless the call came from the wrong thread. */
HOOK_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    bool bypass = hook_bypass();
    cudaError_t e = RT_REAL(cudaStreamEndCapture, stream, pGraph);
    if (e != cudaErrorStreamCaptureWrongThread && !bypass)
        hook_capture_end(stream, false);
    return e;
}

HOOK_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
    bool bypass = hook_bypass();
    cudaError_t e = RT_REAL(cudaStreamEndCapture_ptsz, stream, pGraph);
    if (e != cudaErrorStreamCaptureWrongThread && !bypass)
        hook_capture_end(stream, true);
    return e;
}

HOOK_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    bool bypass = hook_bypass();
    CUresult r = CU_REAL(cuStreamBeginCapture_v2, hStream, mode);
    hook_dev_t *hd;
    if (r == CUDA_SUCCESS && !bypass && (hd = hook_cu_device(true)))
        hook_capture_begin(hd, hStream, false, (int)mode);
    return r;
}

HOOK_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    bool bypass = hook_bypass();
    CUresult r = CU_REAL(cuStreamBeginCapture_v2_ptsz, hStream, mode);
    hook_dev_t *hd;
    if (r == CUDA_SUCCESS && !bypass && (hd = hook_cu_device(true)))
        hook_capture_begin(hd, hStream, true, (int)mode);
    return r;
}

HOOK_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    bool bypass = hook_bypass();
    CUresult r = CU_REAL(cuStreamEndCapture, hStream, phGraph);
    if (r != CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD && !bypass)
        hook_capture_end(hStream, false);
    return r;
}

HOOK_API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    bool bypass = hook_bypass();
    CUresult r = CU_REAL(cuStreamEndCapture_ptsz, hStream, phGraph);
    if (r != CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD && !bypass)
        hook_capture_end(hStream, true);
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
