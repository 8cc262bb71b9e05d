/*
 * What only an interposer can know about streams: which non-blocking
 * streams are alive (each needs its own event in a fence, because the legacy
 * stream does not order them), and which streams are capturing (cucache must
 * then make no call that is illegal in global capture mode on the device,
 * and the capturing thread's allocations go to a private pool).
 *
 * Lock order: a core's lock before hd->lock (the backend records fences
 * under the core's lock); nothing here calls the core with hd->lock held.
 */
#include <string.h>

#include "backend.h"
#include "contexts.h"
#include "hook.h"
#include "log.h"
#include "order.h"
#include "real.h"
#include "recorder.h"
#include "state.h"
#include "streams.h"
#include "trace.h"
#include "vec.h"

/* A per-thread default stream handle names a different stream in each
 * thread: remember it by the thread's key. */
static CUstream capture_id(CUstream s, bool per_thread)
{
    uintptr_t v = (uintptr_t)s;
    if ((v == 0 && per_thread) || v == (uintptr_t)CU_STREAM_PER_THREAD)
        return (CUstream)hook_key_ptds();
    return s;
}

HOOK_TLS core_stream_t hook_ptds_key;

core_stream_t hook_key_ptds_new(void)
{
    static atomic_ulong next_thread = 1;
    hook_ptds_key = core_stream_key(CORE_STREAM_PER_THREAD, 0, atomic_fetch_add(&next_thread, 1));
    return hook_ptds_key;
}

/* Called with hd->lock held: adds s to a list of streams (false when the
 * list cannot grow). */
static bool list_add(CUstream **list, size_t *n, size_t *cap, CUstream s)
{
    if (!vec_reserve((void **)list, cap, *n + 1, sizeof **list))
        return false;
    (*list)[(*n)++] = s;
    return true;
}

/* Called with hd->lock held: removes s from a list; whether it was there. */
static bool list_remove(CUstream *list, size_t *n, CUstream s)
{
    for (size_t i = 0; i < *n; i++)
        if (list[i] == s) {
            list[i] = list[--*n];
            return true;
        }
    return false;
}

static bool list_has(const CUstream *list, size_t n, CUstream s)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] == s)
            return true;
    return false;
}

unsigned hook_live_streams(const hook_dev_t *hd)
{
    size_t n = hd->nstreams + hd->nblocking + hd->nlost + atomic_load(&hd->default_busy);
    return n > UINT32_MAX ? UINT32_MAX : (unsigned)n;
}

/* Called with hd->count_lock held and hd->lock not: stream s was counted
 * in (TRACE_STREAM_CREATE) or out, and the device now has n.  The trace's
 * counted record goes first, so that every allocation the core decides
 * under the new count comes after it; then the core is told
 * (hand-outs at hits are paced by the count). */
static void count_changed(hook_dev_t *hd, unsigned kind, CUstream s, unsigned flags, unsigned n)
{
    if (hook_trace_on())
        hook_trace_put_flags(kind, TRACE_API_NONE, hd->ordinal, (uintptr_t)s, 0, flags, 0, TRACE_REC_COUNTED);
    atomic_store_explicit(&hd->counted, n, memory_order_relaxed); /* hook_order_probe */
    core_dev_t *d = hook_dev_core(hd);
    if (d)
        core_set_streams(d, n);
}

void hook_stream_default_busy(hook_dev_t *hd)
{
    pthread_mutex_lock(&hd->count_lock);
    if (!atomic_exchange(&hd->default_busy, true)) {
        pthread_mutex_lock(&hd->lock);
        unsigned n = hook_live_streams(hd);
        pthread_mutex_unlock(&hd->lock);
        count_changed(hd, TRACE_DEFAULT_BUSY, CU_STREAM_LEGACY, 0, n);
    }
    pthread_mutex_unlock(&hd->count_lock);
}

bool hook_stream_created(hook_dev_t *hd, CUstream s, unsigned flags)
{
    if (!s)
        return false;
    bool nonblocking = (flags & CU_STREAM_NON_BLOCKING) != 0, added = false;
    pthread_mutex_lock(&hd->count_lock);
    pthread_mutex_lock(&hd->lock);
    bool known = list_has(hd->streams, hd->nstreams, s) || list_has(hd->blocking, hd->nblocking, s);
    if (!known) {
        added = nonblocking ? list_add(&hd->streams, &hd->nstreams, &hd->streams_cap, s)
                            : list_add(&hd->blocking, &hd->nblocking, &hd->blocking_cap, s);
        if (!added && nonblocking)
            hook_warn(HOOK_WARN_BACKEND, "out of host memory: a non-blocking stream is not fenced; "
                                         "cudaFree'd memory it uses may be reused too early");
        if (nonblocking)
            hook_order_new_stream(hd, s); /* memory handed out ahead of its fence */
    }
    if (!added && !known)
        hd->nlost++; /* not on a list: counted as alive for good */
    unsigned n = hook_live_streams(hd);
    pthread_mutex_unlock(&hd->lock);
    if (!known)
        count_changed(hd, TRACE_STREAM_CREATE, s, flags, n);
    pthread_mutex_unlock(&hd->count_lock);
    return !known;
}

/* Bumped by every stream destruction: a handle may name a new stream after. */
static atomic_ulong streams_gen = 1;

/* The last created stream a thread asked about, and its device. */
static HOOK_TLS CUstream tls_stream;
static HOOK_TLS unsigned long tls_stream_gen;
static HOOK_TLS hook_dev_t *tls_stream_dev;

hook_dev_t *hook_stream_device(CUstream s, bool runtime)
{
    uintptr_t v = (uintptr_t)s;
    if (v == 0 || v == (uintptr_t)CU_STREAM_LEGACY || v == (uintptr_t)CU_STREAM_PER_THREAD || !hook_real_driver() ||
        !real_cu.cuStreamGetCtx)
        return runtime ? hook_rt_device(true) : hook_cu_device(true);
    unsigned long gen = atomic_load_explicit(&streams_gen, memory_order_acquire);
    if (HOOK_LIKELY(s == tls_stream && gen == tls_stream_gen && tls_stream_dev && hook_dev_core(tls_stream_dev))) {
        hook_last_dev = tls_stream_dev->ordinal;
        return tls_stream_dev;
    }
    CUcontext ctx = NULL;
    if (real_cu.cuStreamGetCtx(s, &ctx) != CUDA_SUCCESS || !ctx)
        return runtime ? hook_rt_device(true) : hook_cu_device(true);
    hook_dev_t *hd = NULL;
    for (int i = 0; i < HOOK_MAX_DEVICES && !hd; i++)
        if (hook_dev_core(&hook_devs[i]) && hook_devs[i].primary == ctx)
            hd = &hook_devs[i];
    if (!hd) /* a stream of a created context (ctx_devs.c: its table read under its lock) */
        hd = hook_ctx_dev(ctx, true);
    if (!hd) {
        CUdevice h;
        CUcontext popped;
        if (real_cu.cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS)
            return NULL;
        CUresult r = real_cu.cuCtxGetDevice(&h);
        real_cu.cuCtxPopCurrent_v2(&popped);
        hd = r == CUDA_SUCCESS ? hook_dev_open(hook_ordinal_of(h)) : NULL;
        if (hd && hd->primary != ctx)
            return NULL; /* a stream of a context cucache does not serve */
    }
    tls_stream = s;
    tls_stream_gen = gen;
    tls_stream_dev = hd;
    if (hd)
        hook_last_dev = hd->ordinal;
    return hd;
}

int hook_stream_forget(CUstream s, unsigned *flags)
{
    if (!s)
        return -1;
    int found = -1;
    for (int d = 0; d < HOOK_MAX_SLOTS && found < 0; d++) {
        hook_dev_t *hd = &hook_devs[d];
        if (!hook_dev_core(hd))
            continue;
        pthread_mutex_lock(&hd->count_lock);
        pthread_mutex_lock(&hd->lock);
        bool nonblocking = list_remove(hd->streams, &hd->nstreams, s);
        hd->streams_gen += nonblocking;
        bool was = nonblocking || list_remove(hd->blocking, &hd->nblocking, s);
        unsigned n = hook_live_streams(hd);
        pthread_mutex_unlock(&hd->lock);
        if (was) {
            *flags = nonblocking ? CU_STREAM_NON_BLOCKING : 0;
            found = d;
            count_changed(hd, TRACE_STREAM_DESTROY, s, 0, n);
        }
        pthread_mutex_unlock(&hd->count_lock);
    }
    return found;
}

void hook_stream_destroyed(CUstream s)
{
    if (s)
        atomic_fetch_add_explicit(&streams_gen, 1, memory_order_release);
}

void hook_streams_of_context_gone(void)
{
    atomic_fetch_add_explicit(&streams_gen, 1, memory_order_release);
}

void hook_capture_begin(hook_dev_t *hd, CUstream s, bool per_thread)
{
    core_dev_t *d = hook_dev_core(hd);
    if (!d)
        return;
    /* the pool first, outside hd->lock (lock order) */
    pthread_mutex_lock(&hd->lock);
    int pool = hd->capture_pool;
    pthread_mutex_unlock(&hd->lock);
    if (pool == 0) {
        int fresh = core_pool_create(d);
        pthread_mutex_lock(&hd->lock);
        if (hd->capture_pool == 0)
            hd->capture_pool = fresh;
        else if (fresh > 0)
            fresh = -fresh; /* lost a race: destroy ours below */
        pool = hd->capture_pool;
        pthread_mutex_unlock(&hd->lock);
        if (fresh < 0)
            core_pool_destroy(d, -fresh);
    }
    pthread_mutex_lock(&hd->lock);
    bool first = hd->ncaptures == 0;
    if (hd->ncaptures < HOOK_MAX_CAPTURES)
        hd->captures[hd->ncaptures++] = capture_id(s, per_thread);
    atomic_store(&hd->capturing, hd->ncaptures);
    pthread_mutex_unlock(&hd->lock);
    if (first)
        core_set_capturing(d, true);
    if (pool > 0)
        core_pool_use(d, pool);
}

void hook_capture_end(CUstream s, bool per_thread)
{
    CUstream id = capture_id(s, per_thread);
    for (int dev = 0; dev < HOOK_MAX_SLOTS; dev++) {
        hook_dev_t *hd = &hook_devs[dev];
        core_dev_t *d = hook_dev_core(hd);
        if (!d || atomic_load(&hd->capturing) == 0)
            continue;
        pthread_mutex_lock(&hd->lock);
        bool found = false;
        for (int i = 0; i < hd->ncaptures && !found; i++)
            if (hd->captures[i] == id) {
                hd->captures[i] = hd->captures[--hd->ncaptures];
                found = true;
            }
        int left = hd->ncaptures;
        atomic_store(&hd->capturing, left);
        pthread_mutex_unlock(&hd->lock);
        if (!found)
            continue;
        core_pool_use(d, 0);
        if (left == 0)
            core_set_capturing(d, false);
        return;
    }
}

bool hook_stream_capturing(hook_dev_t *hd, CUstream s, bool per_thread)
{
    if (HOOK_LIKELY(atomic_load_explicit(&hd->capturing, memory_order_relaxed) == 0))
        return false;
    CUstream id = capture_id(s, per_thread);
    pthread_mutex_lock(&hd->lock);
    bool found = false;
    for (int i = 0; i < hd->ncaptures && !found; i++)
        found = hd->captures[i] == id;
    pthread_mutex_unlock(&hd->lock);
    return found;
}

void hook_stream_retiring(CUstream s)
{
    if (!s || !hook_real_driver())
        return;
    for (int d = 0; d < HOOK_MAX_SLOTS; d++) {
        hook_dev_t *hd = &hook_devs[d];
        if (!hook_dev_core(hd))
            continue;
        pthread_mutex_lock(&hd->lock);
        /* a blocking stream too: that a later legacy-stream operation waits
         * for a destroyed stream's queued work is not documented */
        bool known = list_has(hd->streams, hd->nstreams, s) || list_has(hd->blocking, hd->nblocking, s);
        bool room =
            known && vec_reserve((void **)&hd->retired, &hd->retired_cap, hd->nretired + 1, sizeof *hd->retired);
        bool kept = false;
        hook_scope_t sc;
        CUevent e = NULL;
        if (room && hook_enter(hd, false, &sc)) {
            if (real_cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
                kept = real_cu.cuEventRecord(e, s) == CUDA_SUCCESS;
                if (kept)
                    hd->retired[hd->nretired++] = (hook_retired_t){e, 0, false};
                else
                    real_cu.cuEventDestroy_v2(e);
            }
            hook_leave(&sc);
        }
        if (known && !kept)
            real_cu.cuStreamSynchronize(s); /* cannot remember its work: wait for it */
        pthread_mutex_unlock(&hd->lock);
    }
}
