/*
 * The simulated runtime's streams, events, host functions, stream capture
 * and graphs.  Stream handles, flags, capture modes and statuses have the
 * driver's values, so each call is the driver call in the current device's
 * primary context.  Stream 0 means the legacy default stream for the plain
 * exports and the per-thread default stream for the _ptsz ones: the driver
 * entry point of the matching table gives it that meaning.
 */
#include <stdlib.h>

#include "runtime_internal.h"

/* ------------------------------------------------------------------------
 * Streams
 * ---------------------------------------------------------------------- */

RT_API cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuStreamCreate(pStream, cudaStreamDefault)));
}

RT_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuStreamCreate(pStream, flags)));
}

RT_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuStreamCreateWithPriority(pStream, flags, priority)));
}

RT_API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuStreamDestroy_v2(stream)));
}

static cudaError_t rt_stream_synchronize(const rt_driver_t *d, cudaStream_t stream)
{
    return RT_FORWARD(d->cuStreamSynchronize(stream));
}

static cudaError_t rt_stream_query(const rt_driver_t *d, cudaStream_t stream)
{
    return RT_FORWARD(d->cuStreamQuery(stream));
}

static cudaError_t rt_stream_wait_event(const rt_driver_t *d, cudaStream_t stream, cudaEvent_t event,
                                        unsigned int flags)
{
    return RT_FORWARD(d->cuStreamWaitEvent(stream, event, flags));
}

static cudaError_t rt_stream_get_flags(const rt_driver_t *d, cudaStream_t stream, unsigned int *flags)
{
    return RT_FORWARD(d->cuStreamGetFlags(stream, flags));
}

static cudaError_t rt_stream_get_priority(const rt_driver_t *d, cudaStream_t stream, int *priority)
{
    return RT_FORWARD(d->cuStreamGetPriority(stream, priority));
}

static cudaError_t rt_launch_host_func(const rt_driver_t *d, cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    return RT_FORWARD(d->cuLaunchHostFunc(stream, fn, userData));
}

RT_STREAM_API(cudaStreamSynchronize, cudaStreamSynchronize_ptsz, rt_stream_synchronize, (cudaStream_t stream), stream)
RT_STREAM_API(cudaStreamQuery, cudaStreamQuery_ptsz, rt_stream_query, (cudaStream_t stream), stream)
RT_STREAM_API(cudaStreamWaitEvent, cudaStreamWaitEvent_ptsz, rt_stream_wait_event,
              (cudaStream_t stream, cudaEvent_t event, unsigned int flags), stream, event, flags)
RT_STREAM_API(cudaStreamGetFlags, cudaStreamGetFlags_ptsz, rt_stream_get_flags,
              (cudaStream_t hStream, unsigned int *flags), hStream, flags)
RT_STREAM_API(cudaStreamGetPriority, cudaStreamGetPriority_ptsz, rt_stream_get_priority,
              (cudaStream_t hStream, int *priority), hStream, priority)
RT_STREAM_API(cudaLaunchHostFunc, cudaLaunchHostFunc_ptsz, rt_launch_host_func,
              (cudaStream_t stream, cudaHostFn_t fn, void *userData), stream, fn, userData)

/* cudaStreamAddCallback: the driver's callback has the driver's types; a
 * trampoline calls the program's with the runtime's, once (a callback
 * always runs exactly once, and cannot be captured into a graph). */
typedef struct rt_callback_s {
    cudaStreamCallback_t fn;
    void *data;
} rt_callback_t;

static void rt_callback_tramp(CUstream stream, CUresult status, void *arg)
{
    rt_callback_t c = *(rt_callback_t *)arg;
    free(arg);
    c.fn(stream, rt_err(status), c.data);
}

static cudaError_t rt_stream_add_callback(const rt_driver_t *d, cudaStream_t stream, cudaStreamCallback_t callback,
                                          void *userData, unsigned int flags)
{
    if (!callback)
        return cudaErrorInvalidValue;
    cudaError_t e = rt_enter();
    if (e != cudaSuccess)
        return e;
    rt_callback_t *c = malloc(sizeof *c);
    if (!c)
        return cudaErrorMemoryAllocation;
    *c = (rt_callback_t){callback, userData};
    e = rt_err(d->cuStreamAddCallback(stream, rt_callback_tramp, c, flags));
    if (e != cudaSuccess)
        free(c);
    return e;
}

RT_STREAM_API(cudaStreamAddCallback, cudaStreamAddCallback_ptsz, rt_stream_add_callback,
              (cudaStream_t stream, cudaStreamCallback_t callback, void *userData, unsigned int flags), stream,
              callback, userData, flags)

/* ------------------------------------------------------------------------
 * Events
 * ---------------------------------------------------------------------- */

RT_API cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuEventCreate(event, cudaEventDefault)));
}

/* The cudaEvent* flags have the CU_EVENT_* values. */
RT_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuEventCreate(event, flags)));
}

static cudaError_t rt_event_record(const rt_driver_t *d, cudaEvent_t event, cudaStream_t stream)
{
    return RT_FORWARD(d->cuEventRecord(event, stream));
}

RT_STREAM_API(cudaEventRecord, cudaEventRecord_ptsz, rt_event_record, (cudaEvent_t event, cudaStream_t stream), event,
              stream)

RT_API cudaError_t cudaEventQuery(cudaEvent_t event)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuEventQuery(event)));
}

RT_API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuEventSynchronize(event)));
}

RT_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuEventElapsedTime_v2(ms, start, end)));
}

RT_API cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuEventDestroy_v2(event)));
}

/* ------------------------------------------------------------------------
 * Stream capture (enum values are the driver's; copied, not aliased)
 * ---------------------------------------------------------------------- */

static cudaError_t rt_begin_capture(const rt_driver_t *d, cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    return RT_FORWARD(d->cuStreamBeginCapture_v2(stream, (CUstreamCaptureMode)mode));
}

static cudaError_t rt_end_capture(const rt_driver_t *d, cudaStream_t stream, cudaGraph_t *pGraph)
{
    return RT_FORWARD(d->cuStreamEndCapture(stream, pGraph));
}

static cudaError_t rt_is_capturing(const rt_driver_t *d, cudaStream_t stream,
                                   enum cudaStreamCaptureStatus *pCaptureStatus)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!pCaptureStatus)
        return cudaErrorInvalidValue;
    cudaError_t e = rt_enter();
    if (e == cudaSuccess)
        e = rt_err(d->cuStreamIsCapturing(stream, &st));
    if (e == cudaSuccess)
        *pCaptureStatus = (enum cudaStreamCaptureStatus)st;
    return e;
}

RT_STREAM_API(cudaStreamBeginCapture, cudaStreamBeginCapture_ptsz, rt_begin_capture,
              (cudaStream_t stream, enum cudaStreamCaptureMode mode), stream, mode)
RT_STREAM_API(cudaStreamEndCapture, cudaStreamEndCapture_ptsz, rt_end_capture,
              (cudaStream_t stream, cudaGraph_t *pGraph), stream, pGraph)
RT_STREAM_API(cudaStreamIsCapturing, cudaStreamIsCapturing_ptsz, rt_is_capturing,
              (cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus), stream, pCaptureStatus)

RT_API cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    if (!mode)
        return rt_ret(cudaErrorInvalidValue);
    CUstreamCaptureMode m = (CUstreamCaptureMode)*mode;
    cudaError_t e = rt_enter();
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuThreadExchangeStreamCaptureMode(&m));
    if (e == cudaSuccess)
        *mode = (enum cudaStreamCaptureMode)m;
    return rt_ret(e);
}

/* ------------------------------------------------------------------------
 * Graphs
 * ---------------------------------------------------------------------- */

/* CUDA 12+'s cudaGraphInstantiate takes flags: the driver's WithFlags. */
RT_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuGraphInstantiateWithFlags(pGraphExec, graph, flags)));
}

static cudaError_t rt_graph_launch(const rt_driver_t *d, cudaGraphExec_t graphExec, cudaStream_t stream)
{
    return RT_FORWARD(d->cuGraphLaunch(graphExec, stream));
}

RT_STREAM_API(cudaGraphLaunch, cudaGraphLaunch_ptsz, rt_graph_launch, (cudaGraphExec_t graphExec, cudaStream_t stream),
              graphExec, stream)

RT_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuGraphExecDestroy(graphExec)));
}

RT_API cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuGraphDestroy(graph)));
}
