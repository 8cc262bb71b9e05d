/*
 * The simulated device's engine, part two: streams and their worker
 * threads, queueing with CUDA's implicit dependencies, host waits and stream
 * capture.  See engine.h for the model.
 */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "handles.h"

/* ------------------------------------------------------------------------
 * Streams and their workers
 * ---------------------------------------------------------------------- */

static int slot_alloc(void)
{
    for (int i = 0; i < sim.nslots; i++)
        if (!sim.slot_used[i] && vc_get(sim.host_vc, i) >= sim.slot_seq[i] && sim.completed[i] >= sim.slot_seq[i]) {
            sim.slot_used[i] = true;
            return i;
        }
    if (sim.nslots == SIM_MAX_SLOTS)
        return -1;
    sim.slot_used[sim.nslots] = true;
    return sim.nslots++;
}

static void *stream_worker(void *arg);

struct CUstream_st *sim_stream_create(struct CUctx_st *ctx, sim_stream_kind_t kind, unsigned flags, int prio)
{
    int slot = slot_alloc();
    if (slot < 0)
        return NULL;
    struct CUstream_st *s = sim_xcalloc(1, sizeof *s);
    s->magic = SIM_MAGIC_STREAM;
    s->ctx = ctx;
    s->kind = kind;
    s->flags = flags;
    s->priority = prio;
    s->slot = slot;
    s->last_seq = sim.slot_seq[slot];
    s->id = ++sim.stream_ids;
    s->ctx_next = ctx->streams;
    ctx->streams = s;
    handle_add(s, SIM_MAGIC_STREAM);
    return s;
}

bool sim_stream_valid(const struct CUstream_st *s)
{
    return s && handle_is(s, SIM_MAGIC_STREAM);
}

bool sim_stream_is_blocking(const struct CUstream_st *s)
{
    return s->kind != SIM_STREAM_LEGACY && !(s->flags & CU_STREAM_NON_BLOCKING);
}

static void ctx_unlink_stream(struct CUstream_st *s)
{
    for (struct CUstream_st **p = &s->ctx->streams; *p; p = &(*p)->ctx_next)
        if (*p == s) {
            *p = s->ctx_next;
            return;
        }
}

/* Freed handle structs wait here before free(), so that a stale handle the
 * program still holds is not revived by a new object at the same address. */
#define SIM_QUARANTINE 256
static void *quarantine[SIM_QUARANTINE];
static size_t quarantine_next;

void sim_handle_release(void *p)
{
    free(quarantine[quarantine_next]);
    quarantine[quarantine_next] = p;
    quarantine_next = (quarantine_next + 1) % SIM_QUARANTINE;
}

/* Frees a stream whose worker is gone (or never started).  Until then it
 * stays in its context's list: the legacy stream still waits for its work. */
static void stream_free(struct CUstream_st *s)
{
    /* Its work stays ordered before whatever the context's synchronisation
     * (and, for a blocking stream, the legacy stream) orders after it. */
    vc_join(&s->ctx->retired_vc, s->vc);
    if (sim_stream_is_blocking(s))
        vc_join(&s->ctx->retired_blocking_vc, s->vc);
    ctx_unlink_stream(s);
    struct CUctx_st *ctx = s->ctx;
    sim.slot_used[s->slot] = false;
    vc_release(s->vc);
    s->magic = SIM_MAGIC_DEAD;
    sim_handle_release(s);
    if (!ctx->streams && !ctx->primary && !handle_is(ctx, SIM_MAGIC_CTX)) {
        /* the last stream of a destroyed context */
        vc_release(ctx->retired_vc);
        vc_release(ctx->retired_blocking_vc);
        ctx->magic = SIM_MAGIC_DEAD;
        sim_handle_release(ctx);
    }
}

/* The program destroyed s: it disappears at once for the program, its
 * pending work still runs, and the worker frees it when drained. */
void sim_stream_destroy(struct CUstream_st *s)
{
    handle_del(s);
    if (s->capture) {
        if (s->capture->origin == s)
            s->capture->invalidated = true;
        s->capture = NULL;
        sim_graph_capture_deps(s, NULL, 0, false);
    }
    if (s->ctx->legacy == s)
        s->ctx->legacy = NULL;
    s->dying = true;
    if (!s->worker_started)
        stream_free(s);
    else
        pthread_cond_broadcast(&sim.cv);
}

CUresult sim_stream_resolve(struct CUctx_st *ctx, CUstream h, bool ptds, struct CUstream_st **out)
{
    if (h == NULL)
        h = ptds ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    if (h == CU_STREAM_LEGACY) {
        *out = ctx->legacy;
        return *out ? CUDA_SUCCESS : CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    if (h == CU_STREAM_PER_THREAD) {
        sim_thread_t *t = sim_thread();
        size_t i = (size_t)(ctx->dev->ordinal * 2 + (ctx->primary ? 0 : 1));
        struct CUstream_st *s = t->pts[i];
        if (!s || t->pts_ctx[i] != ctx || t->pts_gen[i] != ctx->generation || !sim_stream_valid(s)) {
            s = sim_stream_create(ctx, SIM_STREAM_PER_THREAD, 0, 0);
            if (!s)
                return CUDA_ERROR_OUT_OF_MEMORY;
            t->pts[i] = s;
            t->pts_ctx[i] = ctx;
            t->pts_gen[i] = ctx->generation;
        }
        *out = s;
        return CUDA_SUCCESS;
    }
    /* A stream of another device is fine: copies and synchronisation may
     * use it whatever the current device (callers that launch work check). */
    if (!sim_stream_valid(h))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = h;
    return CUDA_SUCCESS;
}

sim_op_t *sim_op_new(sim_op_kind_t kind, const char *what)
{
    sim_op_t *op = sim_xcalloc(1, sizeof *op);
    op->kind = kind;
    op->what = what;
    op->height = 1;
    op->elem = 1;
    return op;
}

void sim_op_free(sim_op_t *op)
{
    vc_release(op->vc);
    free(op->deps);
    free(op->xranges);
    free(op->staging);
    free(op);
}

void sim_op_add_dep(sim_op_t *op, int slot, uint64_t seq)
{
    if (sim.completed[slot] >= seq)
        return;
    op->deps = realloc(op->deps, (op->ndeps + 1) * sizeof *op->deps);
    if (!op->deps)
        abort();
    op->deps[op->ndeps++] = (sim_dep_t){slot, seq};
}

CUresult sim_stream_wait_for(struct CUstream_st *s, int slot, uint64_t seq, const sim_vc_t *vc, const char *what)
{
    sim_op_t *op = sim_op_new(SIM_OP_WAIT, what);
    sim_op_add_dep(op, slot, seq);
    vc_join(&op->vc, vc);
    return sim_enqueue(s, op);
}

static bool op_ready(const sim_op_t *op)
{
    for (uint32_t i = 0; i < op->ndeps; i++)
        if (sim.completed[op->deps[i].slot] < op->deps[i].seq)
            return false;
    return true;
}

/* Copies the op for a capture graph: payload only, no clock. */
sim_op_t *sim_op_clone(const sim_op_t *op)
{
    sim_op_t *t = sim_op_new(op->kind, op->what);
    *t = *op;
    t->next = NULL;
    t->stream = NULL;
    t->vc = NULL;
    t->deps = NULL;
    t->ndeps = 0;
    if (op->nranges > 2) {
        t->xranges = sim_xcalloc(op->nranges, sizeof *t->xranges);
        memcpy(t->xranges, op->xranges, op->nranges * sizeof *t->xranges);
    }
    if (op->staging) {
        t->staging = sim_xmalloc(op->bytes * op->height);
        memcpy(t->staging, op->staging, op->bytes * op->height);
        t->src = t->staging;
    }
    return t;
}

/* The implicit dependencies of CUDA's legacy default stream. */
static void add_implicit_deps(struct CUstream_st *s, sim_op_t *op)
{
    struct CUctx_st *ctx = s->ctx;
    if (s->kind == SIM_STREAM_LEGACY) {
        vc_join(&op->vc, ctx->retired_blocking_vc);
        for (struct CUstream_st *b = ctx->streams; b; b = b->ctx_next)
            if (b != s && sim_stream_is_blocking(b) && b->last_seq) {
                sim_op_add_dep(op, b->slot, b->last_seq);
                vc_join(&op->vc, b->vc);
            }
    } else if (sim_stream_is_blocking(s) && ctx->legacy && ctx->legacy->last_seq) {
        sim_op_add_dep(op, ctx->legacy->slot, ctx->legacy->last_seq);
        vc_join(&op->vc, ctx->legacy->vc);
    }
}

static uint64_t op_start(const struct CUstream_st *s, const sim_op_t *op);

/* Called with the lock held: op, off its stream's queue, completed at
 * device time `end`: its event is done (when this was its last record), the
 * stream's clock and completion move on, and the waiters wake. */
static void op_complete(struct CUstream_st *s, sim_op_t *op, uint64_t end)
{
    if (op->kind == SIM_OP_RECORD) {
        struct CUevent_st *e = op->event;
        if (e->seq == op->seq && e->slot == op->slot) {
            e->done = true;
            e->time_ns = end;
        }
        if (op->ipc_gen)
            sim_ipc_event_done(e, op->ipc_gen); /* other processes see it complete */
        if (--e->pending == 0 && e->dead)
            sim_event_free(e);
    }
    sim.slot_end[s->slot] = end;
    sim.ends[s->slot][op->seq % SIM_END_RING].seq = op->seq;
    sim.ends[s->slot][op->seq % SIM_END_RING].end = end;
    sim.completed[s->slot] = op->seq;
    sim_op_free(op);
    pthread_cond_broadcast(&sim.cv);
}

/* An event record or a wait on a stream with nothing queued, whose
 * dependencies completed, completes as it is queued, as on a GPU (within
 * microseconds, however busy the host): it does no work, and the stream's
 * worker thread, which a loaded host may run milliseconds later, need not
 * get to it.  Called with the lock held, after op was numbered and
 * clocked. */
static bool retire_at_once(struct CUstream_st *s, sim_op_t *op)
{
    if ((op->kind != SIM_OP_RECORD && op->kind != SIM_OP_WAIT) || s->head || !op_ready(op))
        return false;
    op_complete(s, op, op_start(s, op));
    return true;
}

CUresult sim_enqueue(struct CUstream_st *s, sim_op_t *op)
{
    if (s->ctx->sticky != CUDA_SUCCESS) {
        CUresult r = s->ctx->sticky;
        sim_op_free(op);
        return r;
    }
    if (s->capture) {
        if (op->kind == SIM_OP_WAIT)
            sim_op_free(op);
        else
            sim_graph_capture_op(s, op); /* engine_graph.c */
        return CUDA_SUCCESS;
    }
    CUresult r = sim_capture_check_implicit(s);
    if (r != CUDA_SUCCESS) {
        sim_op_free(op);
        return r;
    }
    op->stream = s;
    op->slot = s->slot;
    op->enq_ns = sim_now_ns();
    vc_join(&op->vc, s->vc);
    vc_join(&op->vc, sim.host_vc);
    add_implicit_deps(s, op);
    op->seq = ++sim.slot_seq[s->slot];
    vc_own(&op->vc, (uint32_t)s->slot + 1)->c[s->slot] = op->seq;
    vc_release(s->vc);
    s->vc = vc_retain(op->vc);
    s->last_seq = op->seq;
    if (op->kind == SIM_OP_RECORD) {
        struct CUevent_st *e = op->event;
        vc_release(e->vc);
        e->vc = vc_retain(op->vc);
        e->slot = s->slot;
        e->seq = op->seq;
        e->recorded = true;
        e->done = false;
        e->captured = NULL;
        e->pending++;
        if (e->ipc)
            op->ipc_gen = sim_ipc_event_recorded(e);
    }
    if (sim.cfg.race)
        race_check_and_add(op);
    if (retire_at_once(s, op))
        return CUDA_SUCCESS;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    if (!s->worker_started) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&s->worker, &attr, stream_worker, s) != 0) {
            sim_log("cannot start a stream worker thread");
            abort();
        }
        pthread_attr_destroy(&attr);
        s->worker_started = true;
    }
    pthread_cond_broadcast(&sim.cv);
    return CUDA_SUCCESS;
}

/* Device time a copy of n bytes takes at the configured bandwidth. */
static uint64_t copy_ns(size_t n)
{
    if (sim.cfg.copy_gbps <= 0)
        return 0;
    double ns = (double)n / sim.cfg.copy_gbps;
    return ns > 1e10 ? 10000000000u : (uint64_t)ns;
}

/* Fills n bytes with an elem-byte-wide value. */
static void fill(uint8_t *d, size_t n, unsigned elem, uint32_t value)
{
    if (elem == 1) {
        memset(d, (int)(value & 0xff), n);
        return;
    }
    for (size_t i = 0; i + elem <= n; i += elem) {
        if (elem == 2) {
            uint16_t v = (uint16_t)value;
            memcpy(d + i, &v, 2);
        } else {
            memcpy(d + i, &value, 4);
        }
    }
}

/* ------------------------------------------------------------------------
 * Device time
 *
 * Each op starts when the stream's previous op ended, its dependencies
 * ended and it was queued, whichever is last, and ends after its duration
 * (a kernel's, a copy's at the bandwidth; 0 for records and waits; a host
 * function's real time).  The worker waits until the end before it marks
 * the op complete, so nothing ever sees an op done early; the end is
 * computed, not read from the clock after the wait, so a worker that wakes
 * late delays only when the host sees completion, never the ops after it
 * (a short nanosleep can overshoot by several times its length on a busy
 * machine: docs/simulator.md).  Event timestamps are these ends.
 * ---------------------------------------------------------------------- */

/* When the op (slot, seq) ended: from the ring of recent ends, else the
 * slot's last end (later or equal: a safe bound). */
static uint64_t dep_end(int slot, uint64_t seq)
{
    unsigned i = (unsigned)(seq % SIM_END_RING);
    return sim.ends[slot][i].seq == seq ? sim.ends[slot][i].end : sim.slot_end[slot];
}

static uint64_t op_start(const struct CUstream_st *s, const sim_op_t *op)
{
    uint64_t t = sim.slot_end[s->slot] > op->enq_ns ? sim.slot_end[s->slot] : op->enq_ns;
    for (uint32_t i = 0; i < op->ndeps; i++) {
        uint64_t e = dep_end(op->deps[i].slot, op->deps[i].seq);
        t = e > t ? e : t;
    }
    return t;
}

/* Runs op's work from device time `start`; returns its end.  Called
 * without the lock. */
static uint64_t op_execute(sim_op_t *op, uint64_t start)
{
    uint64_t end = start, now;
    switch (op->kind) {
    case SIM_OP_COPY:
        for (size_t r = 0; r < op->height; r++)
            memmove((uint8_t *)op->dst + r * op->dpitch, (const uint8_t *)op->src + r * op->spitch, op->bytes);
        end = start + copy_ns(op->bytes * op->height);
        sim_wait_until_ns(end);
        break;
    case SIM_OP_SET:
        for (size_t r = 0; r < op->height; r++)
            fill((uint8_t *)op->dst + r * op->dpitch, op->bytes, op->elem, op->value);
        end = start + copy_ns(op->bytes * op->height);
        sim_wait_until_ns(end);
        break;
    case SIM_OP_HOSTFN:
        op->fn(op->arg);
        now = sim_now_ns();
        end = now > start ? now : start;
        break;
    case SIM_OP_KERNEL:
        end = start + op->dur_ns;
        sim_wait_until_ns(end);
        if (op->fn)
            op->fn(op->arg);
        break;
    case SIM_OP_CALLBACK:
    case SIM_OP_RECORD:
    case SIM_OP_WAIT:
    case SIM_OP_FREE:
    case SIM_OP_FAULT:
        break;
    }
    return end;
}

/* The program's host function op is about to run on a host thread (the
 * stream's worker): whatever that thread does, and whatever any host thread
 * does after it saw the function's effects, happens after the work before
 * op on its stream.  The simulator cannot see the host threads' own
 * signals, so the host clock joins that work's clock now, as if the host
 * had synchronised with it (engine.h, "Happens-before"). */
static void host_fn_starts(const sim_op_t *op)
{
    sim_vc_t *before = vc_retain(op->vc);
    vc_own(&before, (uint32_t)op->slot + 1)->c[op->slot] = op->seq - 1;
    sim_host_observe(before);
    vc_release(before);
}

static void *stream_worker(void *arg)
{
    struct CUstream_st *s = arg;
    sim_lock();
    for (;;) {
        while (!s->head && !s->dying)
            pthread_cond_wait(&sim.cv, &sim.lock);
        if (!s->head)
            break;
        sim_op_t *op = s->head;
        while (!op_ready(op))
            pthread_cond_wait(&sim.cv, &sim.lock);
        bool skip = s->ctx->sticky != CUDA_SUCCESS;
        if (!skip && op->kind == SIM_OP_FAULT) {
            s->ctx->sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
            sim_log("device %d: a simulated kernel on stream #%lu faulted (illegal address); the context is "
                    "unusable until it is reset",
                    s->ctx->dev->ordinal, s->id);
        }
        CUresult status = s->ctx->sticky;
        uint64_t start = op_start(s, op), end = start;
        if (op->host_fn && (op->kind == SIM_OP_CALLBACK || !skip))
            host_fn_starts(op);
        sim_unlock();
        if (op->kind == SIM_OP_CALLBACK) {
            op->cb(op->cb_stream, status, op->arg); /* exactly once, with the error if any */
            uint64_t now = sim_now_ns();
            end = now > start ? now : start;
        } else if (!skip) {
            end = op_execute(op, start);
        }
        sim_lock();
        if (op->kind == SIM_OP_FREE && op->free_addr) {
            /* cuMemFreeAsync of cuMemAlloc memory: released in stream order.
             * The next owner of the range gets it only now, after the free
             * and all it was ordered after: the range's race records go,
             * or the next owner's first use would be reported against the
             * free itself (the allocation is the ordering the detector
             * cannot see). */
            sim_alloc_t *a = sim_alloc_exact(op->free_addr);
            if (a && a->freeing && a->kind == SIM_ALLOC_IPC) {
                sim_ipc_free_import(a); /* an imported pool's allocation: this process's mapping only */
            } else if (a && a->freeing) {
                race_forget(a->addr, a->addr + a->reserved);
                sim_dev_free(a);
            }
        }
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        op_complete(s, op, end);
    }
    stream_free(s);
    sim_unlock();
    return NULL;
}

/* ------------------------------------------------------------------------
 * Host waits
 * ---------------------------------------------------------------------- */

void sim_wait_seq(int slot, uint64_t seq)
{
    while (sim.completed[slot] < seq)
        pthread_cond_wait(&sim.cv, &sim.lock);
}

sim_device_t *sim_device_of(uintptr_t addr)
{
    for (int i = 0; i < sim.ndev; i++)
        if (addr >= (uintptr_t)sim.dev[i].base && addr - (uintptr_t)sim.dev[i].base < sim.dev[i].span)
            return &sim.dev[i];
    return NULL;
}

void sim_event_free(struct CUevent_st *e)
{
    sim_ipc_event_release(e);
    vc_release(e->vc);
    e->magic = SIM_MAGIC_DEAD;
    sim_handle_release(e);
}

bool sim_stream_done(const struct CUstream_st *s)
{
    return sim.completed[s->slot] >= s->last_seq;
}

CUresult sim_stream_wait_idle(struct CUstream_st *s)
{
    int slot = s->slot;
    uint64_t seq = s->last_seq;
    sim_vc_t *vc = vc_retain(s->vc);
    struct CUctx_st *ctx = s->ctx;
    sim_wait_seq(slot, seq);
    sim_host_observe(vc);
    vc_release(vc);
    return ctx->sticky;
}

CUresult sim_ctx_wait_idle(struct CUctx_st *ctx)
{
    /* Snapshot the positions first: the list may change while we wait. */
    size_t n = 0;
    for (struct CUstream_st *s = ctx->streams; s; s = s->ctx_next)
        n++;
    sim_dep_t *pos = sim_xcalloc(n, sizeof *pos);
    sim_vc_t **vcs = sim_xcalloc(n, sizeof *vcs);
    size_t i = 0;
    for (struct CUstream_st *s = ctx->streams; s; s = s->ctx_next, i++) {
        pos[i] = (sim_dep_t){s->slot, s->last_seq};
        vcs[i] = vc_retain(s->vc);
    }
    for (i = 0; i < n; i++) {
        sim_wait_seq(pos[i].slot, pos[i].seq);
        sim_host_observe(vcs[i]);
        vc_release(vcs[i]);
    }
    free(pos);
    free(vcs);
    sim_host_observe(ctx->retired_vc);
    return ctx->sticky;
}

bool sim_devices_busy(void)
{
    struct CUctx_st **ctxs = NULL;
    size_t n = handle_list(SIM_MAGIC_CTX, (void ***)&ctxs);
    bool busy = false;
    for (size_t i = 0; i < n && !busy; i++)
        for (struct CUstream_st *s = ctxs[i]->streams; s && !busy; s = s->ctx_next)
            busy = !sim_stream_done(s);
    free(ctxs);
    return busy;
}

void sim_device_wait_idle(sim_device_t *dev)
{
    struct CUctx_st **ctxs = NULL;
    size_t n = handle_list(SIM_MAGIC_CTX, (void ***)&ctxs);
    for (size_t i = 0; i < n; i++)
        if (ctxs[i]->dev == dev)
            sim_ctx_wait_idle(ctxs[i]);
    free(ctxs);
}

/* ------------------------------------------------------------------------
 * Stream capture
 * ---------------------------------------------------------------------- */

static bool capture_prohibits(const sim_capture_t *c, CUstreamCaptureMode thread_mode)
{
    if (c->invalidated)
        return false;
    bool mine = pthread_equal(c->thread, pthread_self());
    if (mine)
        return c->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    return thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
}

CUresult sim_capture_check_unsafe(void)
{
    CUstreamCaptureMode tm = sim_thread()->capture_mode;
    if (tm == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    bool prohibited = false;
    for (sim_capture_t *c = sim.captures; c; c = c->next)
        if (capture_prohibits(c, tm)) {
            c->invalidated = true;
            prohibited = true;
        }
    return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult sim_capture_check_implicit(struct CUstream_st *s)
{
    if (s->kind != SIM_STREAM_LEGACY)
        return CUDA_SUCCESS;
    bool implicit = false;
    for (struct CUstream_st *b = s->ctx->streams; b; b = b->ctx_next)
        if (b->capture && sim_stream_is_blocking(b)) {
            b->capture->invalidated = true;
            implicit = true;
        }
    return implicit ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
}

void sim_capture_end_all(struct CUctx_st *ctx)
{
    for (sim_capture_t **p = &sim.captures; *p;) {
        sim_capture_t *c = *p;
        if (c->graph->ctx == ctx) {
            for (struct CUstream_st *s = ctx->streams; s; s = s->ctx_next)
                if (s->capture == c) {
                    s->capture = NULL;
                    sim_graph_capture_deps(s, NULL, 0, false);
                }
            *p = c->next;
            if (!c->to_graph)
                sim_graph_free(c->graph);
            free(c);
        } else {
            p = &c->next;
        }
    }
}
