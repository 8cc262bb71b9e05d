/*
 * Devices (state.c): the device of a call, found or opened, dropped at a
 * reset, and what spans every device (a free, a pointer's description).
 */
#ifndef CUCACHE_INTERPOSE_STATE_H
#define CUCACHE_INTERPOSE_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"
#include "cucache/cuda_api.h"
#include "hook.h"
#include "order.h"
#include "rules.h"

/* The configuration every device's allocator is made with (CUCACHE_CONF). */
extern conf_t hook_conf;

/* The device of a runtime call (cudaGetDevice), with its allocator, or NULL
 * when the call must pass through (no runtime or driver, bad device).
 * open: create the allocator if the device has none yet (else NULL). */
hook_dev_t *hook_rt_device(bool open);
/* The allocator of a driver call: the current context's, the device's
 * primary one or a created one's (ctx_devs.c); NULL means pass through (no
 * context, one cucache does not serve, no driver). */
hook_dev_t *hook_cu_device(bool open);
/* The device by ordinal, opening its allocator on first use; NULL if the
 * ordinal is out of range or the driver refused. */
hook_dev_t *hook_dev_open(int ordinal);
/* The ordinal of a driver device handle, or -1. */
int hook_ordinal_of(CUdevice handle);
/* Drops the device's allocator (cudaDeviceReset, cuDevicePrimaryCtxReset,
 * a created context's cuCtxDestroy): its segments go back to CUDA first.
 * The next call opens a fresh one.  _locked: with hook_open_lock held. */
void hook_dev_drop(hook_dev_t *hd);
void hook_dev_drop_locked(hook_dev_t *hd);

/* open_lock (hook.h's lock order, 1): the opening and dropping of
 * allocators; ctx_devs.c's table of created contexts changes under it. */
void hook_open_lock(void);
void hook_open_unlock(void);
/* With open_lock held: makes and publishes the allocator of hd, whose
 * context, handle and ordinal are set, over backend (its driver calls run
 * in hd->primary); NULL when out of host memory (warned). */
core_dev_t *hook_dev_attach(hook_dev_t *hd, const core_backend_t *backend);

/* Frees addr wherever it was allocated: the given device first, then the
 * others.  CORE_FREED, or CORE_NOT_MINE with *inside set when the address
 * lies within cucache's memory (a bad pointer or a double free) rather than
 * outside it (a foreign pointer for the real free). */
int hook_free_any(hook_dev_t *first, uintptr_t addr, core_free_t how, core_stream_t stream, bool *inside);

/* A free under a RULE_PLAIN_AFTER_SYNC rule: the device synchronised
 * unless a capture is on; how the core must treat it. */
core_free_t hook_free_synced(hook_dev_t *hd);

/* The synchronisation the reuse policy asks of a cudaFree/cuMemFree: returns
 * how the core must treat it. */
static inline core_free_t hook_free_policy(hook_dev_t *hd)
{
    hook_order_probe(hd); /* the streams the program's work runs on: hand-outs' pacing */
    const core_rule_t *r = conf_rule(&hook_conf);
    if (HOOK_LIKELY(r->plain != RULE_PLAIN_AFTER_SYNC))
        return rule_plain_free(r, false);
    return hook_free_synced(hd);
}

/* What addr is to cucache, on every device with an allocator (and, in a
 * peer, among the blocks it opened by IPC: ipc.c): CORE_WHERE_LIVE inside
 * a block the program holds, CORE_WHERE_DEAD inside cucache's memory but
 * in no live block (to answer as freed memory), CORE_WHERE_NONE elsewhere
 * (foreign: the real call answers).  *hd: the device (NULL for an IPC
 * import).  For pointer queries and IPC: walks segments (state.c). */
core_where_t hook_describe(uintptr_t addr, core_ptr_info_t *info, hook_dev_t **hd);

/* Runs fn on the device's allocator under open_lock, so that no
 * reset destroys it meanwhile; false when it has none. */
bool hook_dev_with_core(hook_dev_t *hd, void (*fn)(core_dev_t *d, void *arg), void *arg);

#endif
