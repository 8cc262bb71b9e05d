/*
 * Driver API of the simulated device: streams, events, host functions and
 * stream capture (graphs: driver_graph.c), and the kernel-like test extensions.
 */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

/* ------------------------------------------------------------------------
 * Streams
 * ---------------------------------------------------------------------- */

static CUresult stream_create(CUstream *ph, unsigned flags, int prio)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (prio > 0)
        prio = 0;
    if (prio < -5)
        prio = -5;
    struct CUstream_st *s = sim_stream_create(ctx, SIM_STREAM_CREATED, flags, prio);
    if (!s)
        return drv_leave(CUDA_ERROR_OUT_OF_MEMORY);
    *ph = s;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return stream_create(phStream, Flags, 0);
}

SIM_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    return stream_create(phStream, flags, priority);
}

SIM_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
        !sim_stream_valid(hStream) || hStream->kind != SIM_STREAM_CREATED)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    sim_stream_destroy(hStream);
    return drv_leave(CUDA_SUCCESS);
}

/* The stream of a call that no capture can record (a synchronisation, a
 * query): on a capturing stream the call fails and the capture is
 * invalidated, as in CUDA. */
static CUresult stream_uncaptured(struct CUctx_st *ctx, CUstream h, bool ptds, struct CUstream_st **s)
{
    CUresult r = sim_stream_resolve(ctx, h, ptds, s);
    if (r == CUDA_SUCCESS && (*s)->capture) {
        (*s)->capture->invalidated = true;
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return r;
}

static CUresult stream_sync(CUstream h, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = stream_uncaptured(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS)
        r = sim_capture_check_implicit(s);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    r = sim_stream_wait_idle(s);
    sim_pools_trim_after_sync(ctx);
    return drv_leave(r);
}

static CUresult stream_query(CUstream h, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = stream_uncaptured(ctx, h, ptds, &s);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (!sim_stream_done(s))
        return drv_leave(CUDA_ERROR_NOT_READY);
    sim_host_observe(s->vc);
    return drv_leave(CUDA_SUCCESS);
}

/* The capture e was last recorded into, if that capture is still going. */
static sim_capture_t *event_capture(const struct CUevent_st *e)
{
    for (sim_capture_t *c = sim.captures; c; c = c->next)
        if (c == e->captured)
            return c;
    return NULL;
}

static CUresult stream_wait_event(CUstream h, CUevent e, unsigned flags, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && (!handle_is(e, SIM_MAGIC_EVENT) || flags > 1))
        r = !handle_is(e, SIM_MAGIC_EVENT) ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_capture_t *cap = event_capture(e);
    if (cap) {
        /* Waiting on an event of a capture joins the capture: the stream's
         * next captured work follows the event's node too. */
        if (!s->capture)
            s->capture = cap;
        if (s->capture == cap && e->cap_node)
            sim_graph_capture_deps(s, &e->cap_node, 1, true);
        return drv_leave(CUDA_SUCCESS);
    }
    uint64_t foreign = sim_ipc_event_foreign(e);
    if (foreign) {
        /* another process recorded it last: a wait in real time, which a
         * graph cannot hold */
        if (s->capture) {
            s->capture->invalidated = true;
            return drv_leave(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        return drv_leave(sim_enqueue(s, sim_ipc_event_wait_op(e, foreign)));
    }
    if (!e->recorded || s->capture)
        return drv_leave(CUDA_SUCCESS);
    return drv_leave(sim_stream_wait_for(s, e->slot, e->seq, e->vc, "cuStreamWaitEvent"));
}

/* What cuStreamGet{Flags,Ctx,Priority} read. */
typedef enum stream_field_e { STREAM_FLAGS, STREAM_CTX, STREAM_PRIORITY } stream_field_t;

static CUresult stream_get(CUstream h, void *out, stream_field_t field, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && !out)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    switch (field) {
    case STREAM_FLAGS:
        *(unsigned *)out = s->flags;
        break;
    case STREAM_CTX:
        *(CUcontext *)out = s->ctx;
        break;
    case STREAM_PRIORITY:
        *(int *)out = s->priority;
        break;
    }
    return drv_leave(CUDA_SUCCESS);
}

DRV_PTSZ(cuStreamSynchronize, stream_sync, (CUstream hStream), (hStream))
DRV_PTSZ(cuStreamQuery, stream_query, (CUstream hStream), (hStream))
DRV_PTSZ(cuStreamWaitEvent, stream_wait_event, (CUstream hStream, CUevent hEvent, unsigned int Flags),
         (hStream, hEvent, Flags))
DRV_PTSZ(cuStreamGetFlags, stream_get, (CUstream hStream, unsigned int *flags), (hStream, flags, STREAM_FLAGS))
DRV_PTSZ(cuStreamGetCtx, stream_get, (CUstream hStream, CUcontext *pctx), (hStream, pctx, STREAM_CTX))
DRV_PTSZ(cuStreamGetPriority, stream_get, (CUstream hStream, int *priority), (hStream, priority, STREAM_PRIORITY))

/* ------------------------------------------------------------------------
 * Host functions and simulated kernels
 * ---------------------------------------------------------------------- */

CUresult drv_access_ok(const struct CUstream_st *s, const struct cucache_sim_access *acc, unsigned nacc)
{
    if (nacc && !acc)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < nacc; i++)
        if (acc[i].bytes &&
            !(sim_vmm_region((uintptr_t)acc[i].ptr)
                  ? sim_vmm_range_ok((uintptr_t)acc[i].ptr, acc[i].bytes, acc[i].write != 0, s->ctx->dev->ordinal)
                  : sim_range_ok((uintptr_t)acc[i].ptr, acc[i].bytes, NULL)))
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

void drv_access_set(sim_op_t *op, const struct cucache_sim_access *acc, unsigned nacc)
{
    sim_range_t *rg = op->ranges;
    if (nacc > 2)
        rg = op->xranges = sim_xcalloc(nacc, sizeof *rg);
    for (unsigned i = 0; i < nacc; i++)
        rg[i] = (sim_range_t){(uintptr_t)acc[i].ptr, (uintptr_t)acc[i].ptr + acc[i].bytes, acc[i].write != 0,
                              (uintptr_t)acc[i].ptr};
    op->nranges = nacc;
}

/* Queues fn(arg) with the given ranges.  A kernel (unlike a host function)
 * must go to a stream of the current device, as in CUDA. */
static CUresult launch(CUstream h, void (*fn)(void *), void *arg, const struct cucache_sim_access *acc, unsigned nacc,
                       bool ptds, bool kernel)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && kernel && s->ctx->dev != ctx->dev)
        r = CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS)
        r = drv_access_ok(s, acc, nacc);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_op_t *fault = kernel ? drv_peer_fault(s, acc, nacc) : NULL;
    if (fault) /* another device's memory without access: the kernel faults, as on a GPU */
        return drv_leave(sim_enqueue(s, fault));
    sim_op_t *op = sim_op_new(SIM_OP_HOSTFN, kernel ? "simulated kernel" : "host function");
    op->fn = fn;
    op->arg = arg;
    op->host_fn = !kernel;
    drv_access_set(op, acc, nacc);
    return drv_leave(sim_enqueue(s, op));
}

static void nothing(void *arg)
{
    (void)arg;
}

static CUresult host_func(CUstream h, CUhostFn fn, void *data, bool ptds)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(h, fn, data, NULL, 0, ptds, false);
}

DRV_PTSZ(cuLaunchHostFunc, host_func, (CUstream hStream, CUhostFn fn, void *userData), (hStream, fn, userData))

/* The older form of a host function: called with the stream as given and
 * the context's error, exactly once, even after a fault; not capturable
 * (cuLaunchHostFunc is). */
static CUresult add_callback(CUstream h, CUstreamCallback cb, void *data, unsigned flags, bool ptds)
{
    if (!cb || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && s->capture)
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_op_t *op = sim_op_new(SIM_OP_CALLBACK, "stream callback");
    op->cb = cb;
    op->host_fn = true;
    op->cb_stream = h;
    op->arg = data;
    return drv_leave(sim_enqueue(s, op));
}

DRV_PTSZ(cuStreamAddCallback, add_callback,
         (CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags),
         (hStream, callback, userData, flags))

SIM_API CUresult cucacheSimLaunch(CUstream hStream, void (*fn)(void *), void *arg, const struct cucache_sim_access *acc,
                                  unsigned int nacc)
{
    return launch(hStream, fn ? fn : nothing, arg, acc, nacc, false, true);
}

SIM_API CUresult cucacheSimLaunchFault(CUstream hStream)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, hStream, false, &s);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    return drv_leave(sim_enqueue(s, sim_op_new(SIM_OP_FAULT, "faulting kernel")));
}

/* ------------------------------------------------------------------------
 * Events
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phEvent || (Flags & ~7u) || ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUevent_st *e = sim_xcalloc(1, sizeof *e);
    e->magic = SIM_MAGIC_EVENT;
    e->flags = Flags;
    e->ctx = ctx;
    r = Flags & CU_EVENT_INTERPROCESS ? sim_ipc_event_create(e) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS) {
        free(e);
        return drv_leave(r);
    }
    handle_add(e, SIM_MAGIC_EVENT);
    *phEvent = e;
    return drv_leave(CUDA_SUCCESS);
}

/* The stream of a call that queues work for a handle (an event to record,
 * a graph to launch): the handle, of kind magic, is checked first. */
static CUresult stream_for_handle(struct CUctx_st *ctx, const void *x, uint32_t magic, CUstream h, bool ptds,
                                  struct CUstream_st **s)
{
    if (!handle_is(x, magic))
        return CUDA_ERROR_INVALID_HANDLE;
    return sim_stream_resolve(ctx, h, ptds, s);
}

static CUresult event_record(CUevent e, CUstream h, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = stream_for_handle(ctx, e, SIM_MAGIC_EVENT, h, ptds, &s);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (e->ctx->dev != s->ctx->dev)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    sim_op_t *op = sim_op_new(SIM_OP_RECORD, "event record");
    op->event = e;
    return drv_leave(sim_enqueue(s, op));
}

DRV_PTSZ(cuEventRecord, event_record, (CUevent hEvent, CUstream hStream), (hEvent, hStream))

/* An event the host may query or wait for: live, and not last recorded
 * into a capture still going. */
static CUresult event_host_check(CUevent e)
{
    if (!handle_is(e, SIM_MAGIC_EVENT))
        return CUDA_ERROR_INVALID_HANDLE;
    return event_capture(e) ? CUDA_ERROR_CAPTURED_EVENT : CUDA_SUCCESS;
}

SIM_API CUresult cuEventQuery(CUevent hEvent)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    r = event_host_check(hEvent);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (hEvent->ctx->sticky != CUDA_SUCCESS)
        return drv_leave(hEvent->ctx->sticky);
    uint64_t foreign = sim_ipc_event_foreign(hEvent);
    if (foreign)
        return drv_leave(sim_ipc_event_reached(hEvent, foreign) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
    if (!hEvent->recorded)
        return drv_leave(CUDA_SUCCESS);
    if (sim.completed[hEvent->slot] < hEvent->seq)
        return drv_leave(CUDA_ERROR_NOT_READY);
    sim_host_observe(hEvent->vc);
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuEventSynchronize(CUevent hEvent)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    r = event_host_check(hEvent);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    struct CUevent_st *e = hEvent;
    uint64_t foreign = sim_ipc_event_foreign(e);
    if (foreign) {
        /* another process's record: read its completion from the slot */
        sim_ipc_event_host_wait(e, foreign);
        return drv_leave(e->ctx->sticky);
    }
    if (e->recorded) {
        sim_vc_t *vc = vc_retain(e->vc);
        struct CUctx_st *ctx = e->ctx;
        sim_wait_seq(e->slot, e->seq);
        sim_host_observe(vc);
        vc_release(vc);
        sim_pools_trim_after_sync(ctx);
        return drv_leave(ctx->sticky);
    }
    return drv_leave(e->ctx->sticky);
}

SIM_API CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    sim_lock();
    if (!pMilliseconds)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(hStart, SIM_MAGIC_EVENT) || !handle_is(hEnd, SIM_MAGIC_EVENT))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    if ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING || !hStart->recorded || !hEnd->recorded)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    if (!hStart->done || !hEnd->done)
        return drv_leave(CUDA_ERROR_NOT_READY);
    *pMilliseconds = (float)(((double)hEnd->time_ns - (double)hStart->time_ns) / 1e6);
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
    sim_lock();
    if (!handle_take(hEvent, SIM_MAGIC_EVENT))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    hEvent->dead = true;
    if (hEvent->pending == 0)
        sim_event_free(hEvent);
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Stream capture
 * ---------------------------------------------------------------------- */

/* Starts a capture of s into g (a new graph when NULL) after deps[0..n). */
static CUresult begin_capture_into(CUstream h, CUstreamCaptureMode mode, bool ptds, struct CUgraph_st *g,
                                   struct CUgraphNode_st *const *deps, size_t n)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (g && (!handle_is(g, SIM_MAGIC_GRAPH) || (n && !deps)))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    for (size_t i = 0; i < n; i++)
        if (!handle_is(deps[i], SIM_MAGIC_NODE) || deps[i]->graph != g)
            return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (s->kind == SIM_STREAM_LEGACY)
        return drv_leave(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (s->capture)
        return drv_leave(CUDA_ERROR_ILLEGAL_STATE);
    static uint64_t capture_ids;
    sim_capture_t *c = sim_xcalloc(1, sizeof *c);
    ctx = s->ctx;
    c->origin = s;
    c->mode = mode;
    c->thread = pthread_self();
    c->graph = g ? g : sim_graph_new(ctx);
    c->to_graph = g != NULL;
    c->id = ++capture_ids;
    c->next = sim.captures;
    sim.captures = c;
    s->capture = c;
    sim_graph_capture_deps(s, deps, n, false);
    return drv_leave(CUDA_SUCCESS);
}

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, bool ptds)
{
    return begin_capture_into(h, mode, ptds, NULL, NULL, 0);
}

/* The CUDA 10.0 form: global mode. */
static CUresult begin_capture_v1(CUstream h, bool ptds)
{
    return begin_capture_into(h, CU_STREAM_CAPTURE_MODE_GLOBAL, ptds, NULL, NULL, 0);
}

static CUresult begin_capture_to_graph(CUstream h, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data,
                                       size_t n, CUstreamCaptureMode mode, bool ptds)
{
    (void)data; /* default edges only: the ports and types are not modelled */
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    return begin_capture_into(h, mode, ptds, g, deps, n);
}

static CUresult end_capture(CUstream h, CUgraph *phGraph, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && !phGraph)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_capture_t *c = s->capture;
    if (!c)
        return drv_leave(CUDA_ERROR_ILLEGAL_STATE);
    if (c->origin != s)
        return drv_leave(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self()))
        return drv_leave(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    for (struct CUstream_st *o = ctx->streams; o; o = o->ctx_next)
        if (o->capture == c) {
            o->capture = NULL;
            sim_graph_capture_deps(o, NULL, 0, false);
        }
    for (sim_capture_t **p = &sim.captures; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    struct CUgraph_st *g = c->graph;
    bool invalid = c->invalidated, to_graph = c->to_graph;
    free(c);
    if (invalid) {
        if (!to_graph)
            sim_graph_free(g);
        *phGraph = NULL;
        return drv_leave(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    }
    if (!to_graph)
        handle_add(g, SIM_MAGIC_GRAPH);
    *phGraph = g;
    return drv_leave(CUDA_SUCCESS);
}

static CUresult is_capturing(CUstream h, CUstreamCaptureStatus *status, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && !status)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (s->kind == SIM_STREAM_LEGACY)
        for (struct CUstream_st *b = ctx->streams; b; b = b->ctx_next)
            if (b->capture && sim_stream_is_blocking(b))
                return drv_leave(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    *status = !s->capture               ? CU_STREAM_CAPTURE_STATUS_NONE
              : s->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                        : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    return drv_leave(CUDA_SUCCESS);
}

DRV_PTSZ(cuStreamBeginCapture_v2, begin_capture, (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode))
DRV_PTSZ(cuStreamBeginCapture, begin_capture_v1, (CUstream hStream), (hStream))
DRV_PTSZ(cuStreamBeginCaptureToGraph, begin_capture_to_graph,
         (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,
          size_t numDependencies, CUstreamCaptureMode mode),
         (hStream, hGraph, dependencies, dependencyData, numDependencies, mode))
DRV_PTSZ(cuStreamEndCapture, end_capture, (CUstream hStream, CUgraph *phGraph), (hStream, phGraph))
DRV_PTSZ(cuStreamIsCapturing, is_capturing, (CUstream hStream, CUstreamCaptureStatus *captureStatus),
         (hStream, captureStatus))

/* cuStreamGetCaptureInfo, every version: the status, the capture's id,
 * its graph and the nodes the stream's next captured work follows (valid
 * until the stream captures more or the capture ends); no edge data (all
 * edges are default ones: zeros where asked). */
static CUresult capture_info(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **data, size_t *ndeps, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && !status)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (s->kind == SIM_STREAM_LEGACY)
        for (struct CUstream_st *b = ctx->streams; b; b = b->ctx_next)
            if (b->capture && sim_stream_is_blocking(b))
                return drv_leave(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    sim_capture_t *c = s->capture;
    *status = !c ? CU_STREAM_CAPTURE_STATUS_NONE
              : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                               : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (c && id)
        *id = c->id;
    if (graph)
        *graph = c ? c->graph : NULL;
    if (deps)
        *deps = c ? (const CUgraphNode *)s->cap_deps : NULL;
    if (data)
        *data = NULL;
    if (ndeps)
        *ndeps = c ? s->ncap_deps : 0;
    return drv_leave(CUDA_SUCCESS);
}

static CUresult capture_info_v1(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, bool ptds)
{
    return capture_info(h, status, id, NULL, NULL, NULL, NULL, ptds);
}

static CUresult capture_info_v2(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                const CUgraphNode **deps, size_t *ndeps, bool ptds)
{
    return capture_info(h, status, id, graph, deps, NULL, ndeps, ptds);
}

DRV_PTSZ(cuStreamGetCaptureInfo, capture_info_v1,
         (CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out),
         (hStream, captureStatus_out, id_out))
DRV_PTSZ(cuStreamGetCaptureInfo_v2, capture_info_v2,
         (CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out, CUgraph *graph_out,
          const CUgraphNode **dependencies_out, size_t *numDependencies_out),
         (hStream, captureStatus_out, id_out, graph_out, dependencies_out, numDependencies_out))
DRV_PTSZ(cuStreamGetCaptureInfo_v3, capture_info,
         (CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out, CUgraph *graph_out,
          const CUgraphNode **dependencies_out, const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out),
         (hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out, numDependencies_out))

/* The nodes the stream's next captured work follows: set, or joined to. */
static CUresult update_capture_deps(CUstream h, CUgraphNode *deps, const CUgraphEdgeData *data, size_t n,
                                    unsigned flags, bool ptds)
{
    (void)data;
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && !s->capture)
        r = CUDA_ERROR_ILLEGAL_STATE;
    if (r == CUDA_SUCCESS && (flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES || (n && !deps)))
        r = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++)
        if (!handle_is(deps[i], SIM_MAGIC_NODE) || deps[i]->graph != s->capture->graph)
            r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_graph_capture_deps(s, deps, n, flags == CU_STREAM_ADD_CAPTURE_DEPENDENCIES);
    return drv_leave(CUDA_SUCCESS);
}

static CUresult update_capture_deps_v1(CUstream h, CUgraphNode *deps, size_t n, unsigned flags, bool ptds)
{
    return update_capture_deps(h, deps, NULL, n, flags, ptds);
}

DRV_PTSZ(cuStreamUpdateCaptureDependencies, update_capture_deps_v1,
         (CUstream hStream, CUgraphNode *dependencies, size_t numDependencies, unsigned int flags),
         (hStream, dependencies, numDependencies, flags))
DRV_PTSZ(cuStreamUpdateCaptureDependencies_v2, update_capture_deps,
         (CUstream hStream, CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData, size_t numDependencies,
          unsigned int flags),
         (hStream, dependencies, dependencyData, numDependencies, flags))

SIM_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    sim_thread_t *t = sim_thread();
    CUstreamCaptureMode old = t->capture_mode;
    t->capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}
