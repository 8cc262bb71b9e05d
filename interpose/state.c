/*
 * Process and device state: start-up (CUCACHE_CONF), the allocator of each
 * device, fork, and the frees that must find their device.
 *
 * Start-up reads the configuration in a constructor, before main, without
 * calling CUDA: a bad CUCACHE_CONF stops the program there with the core's
 * message, and CUCACHE_CONF=help prints the table of keys.  Everything that
 * touches CUDA is lazy: a device's allocator opens on the first cached call
 * on it.  There is no destructor: at exit the runtime may already be gone,
 * and the device takes back a process's memory anyway.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "contexts.h"
#include "diag.h"
#include "env.h"
#include "framework.h"
#include "hook.h"
#include "ipc.h"
#include "log.h"
#include "order.h"
#include "real.h"
#include "recorder.h"
#include "rules.h"
#include "state.h"
#include "streams.h"
#include "yield.h"

conf_t hook_conf;
atomic_bool hook_off;
HOOK_TLS int hook_depth;
HOOK_TLS int hook_last_dev = -1;
hook_dev_t hook_devs[HOOK_MAX_SLOTS];

/* Serialises the opening and dropping of allocators. */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;

static void help_line(void *ctx, const char *line)
{
    (void)ctx;
    hook_log("%s", line);
}

static void devices_init(void)
{
    for (int i = 0; i < HOOK_MAX_SLOTS; i++) {
        hook_dev_t *hd = &hook_devs[i];
        memset(hd, 0, sizeof *hd);
        pthread_mutex_init(&hd->lock, NULL);
        pthread_mutex_init(&hd->count_lock, NULL);
        hd->ordinal = i < HOOK_MAX_DEVICES ? i : -1; /* a created context's: set as it is registered */
    }
}

/* The child of a fork starts clean: the parent's allocators describe the
 * parent's device memory, which the child cannot use (CUDA is not usable in
 * a child after the parent initialised it).  Their host memory is left
 * behind on purpose (another thread of the parent may have held a lock),
 * reachable from hook_parent_devs. */
/* Not static: a static array never read would lose its stores, and leak
 * checkers would no longer see what the child left behind as reachable. */
extern hook_dev_t hook_parent_devs[HOOK_MAX_SLOTS];
hook_dev_t hook_parent_devs[HOOK_MAX_SLOTS] __attribute__((used));

static void atfork_child(void)
{
    pthread_mutex_init(&open_lock, NULL);
    memcpy(hook_parent_devs, hook_devs, sizeof hook_parent_devs);
    devices_init();
    hook_ctx_forked();
}

__attribute__((constructor)) static void hook_start(void)
{
    conf_defaults(&hook_conf);
    const char *text = hook_env()->conf;
    char err[512];
    int r = conf_parse(&hook_conf, text, err, sizeof err);
    if (r == 1) {
        hook_log("CUCACHE_CONF keys (key:value,key:value):");
        conf_help(help_line, NULL);
        exit(0);
    }
    if (r != 0) {
        hook_log("%s (the program was not started; CUCACHE_CONF=help lists every key)", err);
        exit(1);
    }
    if (hook_diag_start(err, sizeof err) != 0 || hook_trace_start(err, sizeof err) != 0) {
        hook_log("%s (the program was not started)", err);
        exit(1);
    }
    devices_init();
    pthread_atfork(NULL, NULL, atfork_child);
}

/* ------------------------------------------------------------------------
 * Devices
 * ---------------------------------------------------------------------- */

int hook_ordinal_of(CUdevice handle)
{
    int n = 0;
    if (real_cu.cuDeviceGetCount(&n) != CUDA_SUCCESS)
        return -1;
    for (int i = 0; i < n && i < HOOK_MAX_DEVICES; i++) {
        CUdevice h;
        if (real_cu.cuDeviceGet(&h, i) == CUDA_SUCCESS && h == handle)
            return i;
    }
    return -1;
}

void hook_open_lock(void)
{
    pthread_mutex_lock(&open_lock);
}

void hook_open_unlock(void)
{
    pthread_mutex_unlock(&open_lock);
}

core_dev_t *hook_dev_attach(hook_dev_t *hd, const core_backend_t *backend)
{
    int ordinal = hd->ordinal;
    bool primary = hook_dev_is_primary(hd);
    core_dev_t *d = core_dev_new(backend, ordinal, &hook_conf);
    if (d && hook_conf.expandable_segments && !core_expandable(d))
        hook_warn(HOOK_WARN_BACKEND,
                  "device %d: CUCACHE_CONF=expandable_segments:true, but the device or driver has no virtual "
                  "memory management (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED): its segments "
                  "are plain cudaMalloc allocations",
                  ordinal);
    if (d) {
        pthread_mutex_lock(&hd->lock);
        unsigned n = hook_live_streams(hd); /* none, unless a list outlived a core */
        pthread_mutex_unlock(&hd->lock);
        core_set_streams(d, n);
        /* a created context's allocator has no snapshot ring, no registry
         * thread and no trace device record of its own: those are the
         * device's (its primary context's) */
        hook_diag_dev_opened(primary ? ordinal : -1, d);
        if (primary) {
            hook_yield_dev_opened(hd);
            hook_trace_device(ordinal);
        }
        /* no hand-outs where the CPU reads and writes the device's
         * memory coherently (address translation services, as on
         * Grace Hopper: its access would not wait for the device's
         * ordering), nor in a process with a second context
         * (hook_ctx.c); before the core is published, so it never
         * asks */
        int ats = 0;
        bool coherent =
            real_cu.cuDeviceGetAttribute(&ats, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
                                         hd->handle) == CUDA_SUCCESS &&
            ats;
        if (coherent || atomic_load(&hook_many_contexts)) {
            hook_order_note_stopped(hd);
            core_stop_hand_outs(d);
        }
    } else
        hook_warn(HOOK_WARN_BACKEND, "device %d: out of host memory for the allocator; not caching", ordinal);
    atomic_store_explicit(&hd->core, d, memory_order_release);
    return d;
}

hook_dev_t *hook_dev_open(int ordinal)
{
    if ((unsigned)ordinal >= HOOK_MAX_DEVICES)
        return NULL;
    hook_dev_t *hd = &hook_devs[ordinal];
    if (HOOK_LIKELY(hook_dev_core(hd) != NULL))
        return hd;
    if (!hook_real_driver())
        return NULL;
    bool second = false;
    pthread_mutex_lock(&open_lock);
    if (!hook_dev_core(hd)) {
        CUdevice h;
        CUcontext pc = NULL;
        core_dev_t *d = NULL;
        if (real_cu.cuInit(0) == CUDA_SUCCESS && real_cu.cuDeviceGet(&h, ordinal) == CUDA_SUCCESS &&
            real_cu.cuDevicePrimaryCtxRetain(&pc, h) == CUDA_SUCCESS) {
            hd->handle = h;
            hd->primary = pc;
            d = hook_dev_attach(hd, &hook_backend);
        }
        for (int i = 0; d && i < HOOK_MAX_DEVICES && !second; i++)
            second = i != ordinal && hook_dev_core(&hook_devs[i]);
    }
    pthread_mutex_unlock(&open_lock);
    if (second)
        hook_second_context(); /* the program uses two devices: no hand-outs (hook_ctx.c) */
    hook_framework_check();    /* once: a framework's own cache in front of cucache */
    return hook_dev_core(hd) ? hd : NULL;
}

bool hook_dev_with_core(hook_dev_t *hd, void (*fn)(core_dev_t *d, void *arg), void *arg)
{
    pthread_mutex_lock(&open_lock);
    core_dev_t *d = hook_dev_core(hd);
    if (d)
        fn(d, arg);
    pthread_mutex_unlock(&open_lock);
    return d != NULL;
}

void hook_dev_drop(hook_dev_t *hd)
{
    pthread_mutex_lock(&open_lock);
    hook_dev_drop_locked(hd);
    pthread_mutex_unlock(&open_lock);
}

void hook_dev_drop_locked(hook_dev_t *hd)
{
    core_dev_t *d = atomic_exchange(&hd->core, NULL);
    if (d) {
        if (hook_dev_is_primary(hd)) /* IPC exports come from primary contexts' memory only (hook_ipc.c) */
            hook_ipc_dev_dropped(hd->ordinal);
        hook_depth++;
        core_dev_destroy(d);
        hook_depth--;
    }
    pthread_mutex_lock(&hd->lock);
    hd->nstreams = 0;
    hd->nblocking = 0;
    hd->ncaptures = 0;
    atomic_store(&hd->capturing, 0);
    hd->capture_pool = 0;
    /* the spare and retired events died with the context */
    hd->nspare = 0;
    hd->nretired = 0;
    hd->hub = NULL; /* and the hub stream */
    hook_order_drop(hd); /* and the events of the fences handed out */
    hd->streams_gen++;             /* the streams are gone: new ones may take their handles */
    hd->primary = NULL;
    pthread_mutex_unlock(&hd->lock);
}

hook_dev_t *hook_rt_device(bool open)
{
    if (HOOK_UNLIKELY(!hook_real_runtime()))
        return NULL;
    int dev = 0;
    if (HOOK_REAL(real_rt.cudaGetDevice(&dev)) != cudaSuccess || (unsigned)dev >= HOOK_MAX_DEVICES)
        return NULL;
    hook_last_dev = dev;
    hook_dev_t *hd = &hook_devs[dev];
    if (HOOK_LIKELY(hook_dev_core(hd) != NULL))
        return hd;
    return open ? hook_dev_open(dev) : NULL;
}

/* The last context a thread asked about and its device: a driver hook's
 * question is almost always the same as the previous one. */
static HOOK_TLS CUcontext tls_ctx;
static HOOK_TLS hook_dev_t *tls_ctx_dev;

hook_dev_t *hook_cu_device(bool open)
{
    if (HOOK_UNLIKELY(!hook_real_driver()))
        return NULL;
    CUcontext cur = NULL;
    if (real_cu.cuCtxGetCurrent(&cur) != CUDA_SUCCESS || !cur)
        return NULL;
    hook_dev_t *hd = tls_ctx_dev;
    if (HOOK_LIKELY(cur == tls_ctx && hd && hd->primary == cur && hook_dev_core(hd))) {
        hook_last_dev = hd->ordinal;
        return hd;
    }
    hd = hook_ctx_dev(cur, open); /* a created context's allocator (ctx_devs.c) */
    if (!hd) {
        CUdevice h;
        if (real_cu.cuCtxGetDevice(&h) != CUDA_SUCCESS)
            return NULL;
        int ordinal = hook_ordinal_of(h);
        if (!open && (ordinal < 0 || !hook_dev_core(&hook_devs[ordinal])))
            return NULL;
        hd = hook_dev_open(ordinal);
        if (!hd || hd->primary != cur)
            return NULL; /* a context cucache does not serve (created before it was seen, or over the table) */
    }
    tls_ctx = cur;
    tls_ctx_dev = hd;
    hook_last_dev = hd->ordinal;
    return hd;
}

/* ------------------------------------------------------------------------
 * Frees
 * ---------------------------------------------------------------------- */

int hook_free_any(hook_dev_t *first, uintptr_t addr, core_free_t how, core_stream_t stream, bool *inside)
{
    *inside = false;
    core_dev_t *d = first ? hook_dev_core(first) : NULL;
    if (d && core_free(d, addr, how, stream) == CORE_FREED)
        return CORE_FREED;
    for (int i = 0; i < HOOK_MAX_SLOTS; i++) {
        core_dev_t *o = hook_dev_core(&hook_devs[i]);
        if (!o || o == d)
            continue;
        /* a pointer of another device or context: its own stream keys mean
         * nothing there, so the free waits for that allocator's fence (the stream
         * goes along, unused, so that the history tells this free from a
         * plain cudaFree: core/whatif.c keeps it fenced under every setting) */
        if (core_free(o, addr, how == CORE_FREE_NOW ? how : CORE_FREE_FENCED, how == CORE_FREE_NOW ? 0 : stream) ==
            CORE_FREED)
            return CORE_FREED;
    }
    for (int i = 0; i < HOOK_MAX_SLOTS && !*inside; i++) {
        core_dev_t *o = hook_dev_core(&hook_devs[i]);
        *inside = o && core_owns(o, addr);
    }
    return CORE_NOT_MINE;
}

core_where_t hook_describe(uintptr_t addr, core_ptr_info_t *info, hook_dev_t **hd)
{
    *hd = NULL;
    for (int i = 0; i < HOOK_MAX_SLOTS; i++) {
        core_dev_t *d = hook_dev_core(&hook_devs[i]);
        if (d && core_describe(d, addr, info) != CORE_WHERE_NONE) {
            *hd = &hook_devs[i];
            return info->where;
        }
    }
    if (hook_ipc_describe(addr, info))
        return CORE_WHERE_LIVE;
    memset(info, 0, sizeof *info);
    return CORE_WHERE_NONE;
}

core_free_t hook_free_synced(hook_dev_t *hd)
{
    bool synced = atomic_load(&hd->capturing) == 0 && hook_dev_core(hd) &&
                  hook_backend.device_sync(hook_backend_ctx(hd), hd->ordinal) == CORE_OK;
    return rule_plain_free(conf_rule(&hook_conf), synced);
}
