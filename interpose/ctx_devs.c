/*
 * The allocators of the contexts the program creates (cuCtxCreate): one
 * each, in hook_devs[HOOK_MAX_DEVICES + i], beside the primary contexts'.
 *
 * A created context's allocator is a device's in every way but its
 * context: its own core_dev_t, over a copy of the backend whose ctx names
 * it (backend.c runs its driver calls in that context), its own streams
 * (those created while it is current), its own fences (recorded on its
 * legacy stream and its streams) and its own stream keys.  A block is
 * never handed from one context's allocator to another's: memory of one
 * context is not guaranteed usable from another (that needs unified
 * addressing and, for a kernel, peer access between the contexts), and
 * a block freed in one context may still be read by that context's work,
 * which no other context's streams are ordered after.  A free made in
 * another context finds its owner (state.c: hook_free_any) and waits for
 * the owner's fence.
 *
 * The slot is taken at the creation and its allocator opened on the
 * first cached call in the context; cuCtxDestroy gives the memory back
 * before the real destroy (the allocator waits for its pending frees and
 * returns every segment), and frees the slot.  Its pointers are then
 * foreign: the real free answers for them.
 */
#include <string.h>

#include "backend.h"
#include "contexts.h"
#include "diag.h"
#include "env.h"
#include "hook.h"
#include "log.h"
#include "real.h"
#include "state.h"
#include "streams.h"

atomic_ulong hook_contexts_cached;

/* The backend of each slot: hook_backend with ctx naming the slot. */
static core_backend_t backends[HOOK_MAX_CONTEXTS];
/* Slots taken (a created context registered): none means no lookup. */
static atomic_uint ntaken;

/* The slot of a created context, under open_lock; NULL when none. */
static hook_dev_t *slot_of(CUcontext ctx)
{
    for (int i = HOOK_MAX_DEVICES; i < HOOK_MAX_SLOTS; i++)
        if (hook_devs[i].primary == ctx)
            return &hook_devs[i];
    return NULL;
}

/* Under open_lock: the slot's allocator dropped, and the slot made free,
 * as new (its lists keep their host memory for the next context).  With
 * CUCACHE_REPORT=exit the allocator's summary first: the exit summary
 * never sees it. */
static void slot_release(hook_dev_t *hd)
{
    core_dev_t *d = hook_dev_core(hd);
    if (d && hook_env()->report_exit) {
        hook_log("context %p of device %d is destroyed; what its allocator served:", (void *)hd->primary, hd->ordinal);
        hook_summary_core(d, hd->ordinal);
    }
    hook_dev_drop_locked(hd);
    hook_streams_of_context_gone(); /* no thread's cache maps a stream to this slot any more */
    pthread_mutex_lock(&hd->lock);
    hd->nlost = 0;
    hd->handle = 0;
    hd->ordinal = -1;
    atomic_store(&hd->stopped, false);
    atomic_store(&hd->default_busy, false);
    atomic_store(&hd->counted, 0);
    atomic_store(&hd->probe_next, 0);
    hd->clear_at = 0;
    atomic_store(&hd->yielding, false);
    pthread_mutex_unlock(&hd->lock);
    atomic_fetch_sub(&ntaken, 1);
}

void hook_ctx_forked(void)
{
    atomic_store(&ntaken, 0);
}

void hook_ctx_register(CUcontext ctx, CUdevice dev)
{
    if (!ctx || !hook_real_driver())
        return;
    int ordinal = hook_ordinal_of(dev);
    if (ordinal < 0)
        return;
    hook_open_lock();
    hook_dev_t *stale = slot_of(ctx);
    if (stale) /* destroyed unseen (cucache was off), and the handle reused */
        slot_release(stale);
    hook_dev_t *hd = slot_of(NULL);
    if (hd) {
        hd->primary = ctx;
        hd->handle = dev;
        hd->ordinal = ordinal;
        atomic_fetch_add(&ntaken, 1);
    }
    hook_open_unlock();
    if (!hd)
        hook_warn(HOOK_WARN_BACKEND,
                  "%d created contexts already have an allocator: the context %p on device %d is not cached "
                  "(its calls go to CUDA)",
                  HOOK_MAX_CONTEXTS, (void *)ctx, ordinal);
}

hook_dev_t *hook_ctx_dev(CUcontext ctx, bool open)
{
    if (HOOK_LIKELY(atomic_load_explicit(&ntaken, memory_order_relaxed) == 0) || !ctx)
        return NULL;
    hook_open_lock();
    hook_dev_t *hd = slot_of(ctx);
    if (hd && !hook_dev_core(hd) && open) {
        int i = (int)(hd - &hook_devs[HOOK_MAX_DEVICES]);
        backends[i] = hook_backend;
        backends[i].ctx = hd;
        if (hook_dev_attach(hd, &backends[i]))
            atomic_fetch_add(&hook_contexts_cached, 1);
    }
    hook_open_unlock();
    return hd && hook_dev_core(hd) ? hd : NULL;
}

void hook_ctx_destroying(CUcontext ctx)
{
    if (atomic_load(&ntaken) == 0 || !ctx)
        return;
    hook_open_lock();
    hook_dev_t *hd = slot_of(ctx);
    if (hd)
        slot_release(hd);
    hook_open_unlock();
}
