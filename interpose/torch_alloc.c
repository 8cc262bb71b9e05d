/*
 * PyTorch's pluggable allocator: the entry points
 * torch.cuda.memory.CUDAPluggableAllocator loads by name from this library,
 *
 *   void *cucache_torch_malloc(size_t size, int device, cudaStream_t stream);
 *   void  cucache_torch_free(void *ptr, size_t size, int device, cudaStream_t stream);
 *
 * (PyTorch's MallocFuncType and FreeFuncType), and the optional ones its C++
 * setters take: init(int device_count), record_stream(void *ptr,
 * cudaStream_t stream), empty_cache(void), memory_fraction(double fraction,
 * int device).  With them a PyTorch program keeps
 * PyTorch's caching allocator turned off in favour of cucache's while it
 * keeps PyTorch's stream semantics, which are cudaMallocAsync's: a block
 * allocated for stream S and freed on S is reusable at once on S (stream
 * order); freed on another stream it waits for an event there; a block
 * record_stream marked as used on other streams waits for a marker on each
 * of them (core.h, free modes, row 3; served before it completes once the
 * device is full, its stream waiting on the device: core/cross.h).  Reports, snapshots, traces, limits and the replay then cover
 * PyTorch's tensors too (python/cucache/torch.py plugs them in).
 *
 * These run in the process whether or not libcucache.so was preloaded
 * (PyTorch dlopens it by path): the allocator starts at the first call.
 *
 * A failure is thrown, never returned: PyTorch's CUDAPluggableAllocator
 * stores what malloc returns without a check, so a NULL would become a
 * tensor at address 0 and the program would go on.  cucache_torch_malloc
 * reports it, then throws PyTorch's c10::OutOfMemoryError (cxx_throw.c)
 * with no lock held; PyTorch's Python binding raises it as
 * torch.OutOfMemoryError, its message starting with PyTorch's own OOM
 * words.  A C++ program without PyTorch gets std::runtime_error; only a
 * process without a C++ library (a C program) gets NULL.
 *
 * Private pools: PyTorch's begin_allocate_to_pool(device, MempoolId_t,
 * std::function<bool(cudaStream_t)> filter), end_allocate_to_pool(device,
 * MempoolId_t) and release_pool(device, MempoolId_t), which CUDA graph
 * capture calls (and torch.cuda.use_mem_pool where PyTorch lets a pluggable
 * allocator have MemPools), with the semantics of PyTorch's own allocator:
 * while a pool is being allocated to, an allocation on the device whose
 * stream the filter accepts lands in that pool (a cucache private pool),
 * any other in the default pools (never the interposer's capture pool:
 * PyTorch decides); begin on a pool that exists shares it (a use count);
 * release drops one use, and the last one destroys the pool (its free
 * memory goes back now, the rest as its blocks are freed).  A begin on a
 * pool being allocated to is refused with a line but counted, as PyTorch
 * counts it before it throws, and its end is ignored.  Filters are called
 * with no lock held: PyTorch's may throw.  PyTorch's Python binding calls
 * the function pointer it is given as a C++ function of that type: the
 * MempoolId_t (a pair of unsigned long long, trivially copyable) comes in
 * two registers like cucache_torch_pool_id_t, and the std::function (not
 * trivially copyable) by reference, destroyed by the caller after the
 * call.  The filter is kept by cloning it through libstdc++'s std::function
 * layout (torch_filter_t below), the C++ library PyTorch's Linux builds use;
 * tests/interpose/test_torch_pools.cpp calls these exactly as the binding
 * does, from C++.
 */
#include "cucache/cucache.h"
#include "cxx_throw.h"
#include "diag.h"
#include "fail.h"
#include "framework.h"
#include "hook.h"
#include "hostalloc.h"
#include "log.h"
#include "st.h"
#include "state.h"
#include "streams.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define CUCACHE_EXPORT __attribute__((visibility("default")))

/* The device's allocator, opened at its first use; NULL when the device
 * does not exist or cucache is off. */
static core_dev_t *torch_device(int device, hook_dev_t **hd)
{
    hook_framework_pluggable();
    if (hook_bypass() || (*hd = hook_dev_open(device)) == NULL)
        return NULL;
    return hook_dev_core(*hd);
}

/* ------------------------------------------------------------------------
 * Private pools: PyTorch's MempoolId_t to cucache's pool ids
 * ---------------------------------------------------------------------- */

/* libstdc++'s std::function<bool(cudaStream_t)>: the functor's storage
 * (_Any_data, 16 bytes), its manager (clone, destroy, ...) and its invoker.
 * An empty function has no manager. */
typedef struct torch_filter_s {
    void *functor[2];
    bool (*manager)(void *dest, const void *src, int op); /* op: TORCH_FN_* */
    bool (*invoker)(const void *functor, void **stream);  /* stream passed as cudaStream_t&& */
} torch_filter_t;

enum { TORCH_FN_CLONE = 2, TORCH_FN_DESTROY = 3 }; /* libstdc++'s _Manager_operation */

/* A copy of a filter, reference counted: it is called outside every lock
 * (PyTorch's filter may throw, and an exception must not leave a lock
 * held), so an end or a release meanwhile only drops its reference. */
typedef struct torch_filter_ref_s {
    torch_filter_t f;
    int refs; /* under torch_pools_lock */
} torch_filter_ref_t;

/* One of PyTorch's pools on one device. */
typedef struct torch_pool_s {
    struct torch_pool_s *next;
    int device;
    cucache_torch_pool_id_t id; /* PyTorch's MempoolId_t */
    int pool;                   /* cucache's private pool id (> 0) */
    int uses;                   /* begins not yet released (PyTorch's use_count) */
    int refused;                /* begins refused while routing; their ends are ignored */
    bool routing;               /* between begin and end: allocations go here */
    torch_filter_ref_t *filter; /* while routing: which streams' allocations (NULL: all) */
} torch_pool_t;

static pthread_mutex_t torch_pools_lock = PTHREAD_MUTEX_INITIALIZER;
static torch_pool_t *torch_pools;                   /* under torch_pools_lock */
static _Atomic int torch_routing[HOOK_MAX_DEVICES]; /* pools routing, per device: the malloc fast path's test */
static _Atomic bool torch_hooks_used;               /* a pool was ever begun: allocations bypass the interposer's
                                                    * own capture routing (PyTorch decides the pools) */

static torch_pool_t *torch_pool_find(int device, cucache_torch_pool_id_t id)
{
    for (torch_pool_t *tp = torch_pools; tp; tp = tp->next)
        if (tp->device == device && tp->id.first == id.first && tp->id.second == id.second)
            return tp;
    return NULL;
}

/* Drops a reference (under the lock); the last destroys the copy. */
static void filter_unref(torch_filter_ref_t *r)
{
    if (r && --r->refs == 0) {
        if (r->f.manager)
            r->f.manager(r->f.functor, r->f.functor, TORCH_FN_DESTROY);
        hostalloc_free(r);
    }
}

/* An allocation on a device some pool is routing on: the first routing pool
 * whose filter takes the stream gets it, else the default pools.  The
 * filters are called without a lock held (they ask CUDA about the stream,
 * never the allocator, and may throw). */
enum { TORCH_MAX_ROUTING = 8 };

static int torch_pick_pool(int device, void *stream)
{
    int ids[TORCH_MAX_ROUTING];
    torch_filter_ref_t *refs[TORCH_MAX_ROUTING];
    int n = 0;
    pthread_mutex_lock(&torch_pools_lock);
    for (torch_pool_t *tp = torch_pools; tp && n < TORCH_MAX_ROUTING; tp = tp->next)
        if (tp->device == device && tp->routing) {
            ids[n] = tp->pool;
            refs[n] = tp->filter;
            if (refs[n])
                refs[n]->refs++;
            n++;
        }
    pthread_mutex_unlock(&torch_pools_lock);
    int pool = 0;
    for (int i = 0; i < n && pool == 0; i++) {
        void *s = stream;
        if (!refs[i] || !refs[i]->f.manager || refs[i]->f.invoker(refs[i]->f.functor, &s))
            pool = ids[i];
    }
    pthread_mutex_lock(&torch_pools_lock);
    for (int i = 0; i < n; i++)
        filter_unref(refs[i]);
    pthread_mutex_unlock(&torch_pools_lock);
    return pool;
}

/* A begin that routes nothing: the filter's copy dropped, the lock
 * released, then why said. */
static void begin_refused(torch_filter_ref_t *copy, int device, cucache_torch_pool_id_t id, const char *why)
{
    filter_unref(copy);
    pthread_mutex_unlock(&torch_pools_lock);
    hook_warn(HOOK_WARN_BACKEND, "cucache_torch_begin_allocate_to_pool(device %d, pool (%llu, %llu)): %s", device,
              id.first, id.second, why);
}

CUCACHE_EXPORT void cucache_torch_begin_allocate_to_pool(int device, cucache_torch_pool_id_t id, const void *filter)
{
    hook_dev_t *hd;
    core_dev_t *d = torch_device(device, &hd);
    if (!d) {
        hook_warn(HOOK_WARN_BACKEND,
                  "cucache_torch_begin_allocate_to_pool(device %d): no such device, or cucache is off", device);
        return;
    }
    /* a copy of PyTorch's filter, made before any lock (the argument is the
     * caller's, destroyed when this returns; a clone may throw) */
    const torch_filter_t *theirs = filter;
    torch_filter_ref_t *copy = NULL;
    if (theirs && theirs->manager) {
        copy = hostalloc_calloc(1, sizeof *copy);
        if (copy) {
            theirs->manager(copy->f.functor, theirs->functor, TORCH_FN_CLONE);
            copy->f.manager = theirs->manager;
            copy->f.invoker = theirs->invoker;
            copy->refs = 1;
        }
    }
    atomic_store(&torch_hooks_used, true);
    pthread_mutex_lock(&torch_pools_lock);
    torch_pool_t *tp = torch_pool_find(device, id);
    if (tp && tp->routing) {
        /* PyTorch counts the use, then throws "already recording to
         * mempool_id", so its caller neither ends nor releases what it
         * began; here nothing throws: the use is counted as PyTorch counts
         * it, and the end that comes is ignored */
        tp->uses++;
        tp->refused++;
        begin_refused(copy, device, id, "already allocating to this pool; ignored");
        return;
    }
    if (!tp) {
        int pool = core_pool_create(d);
        tp = pool > 0 ? hostalloc_calloc(1, sizeof(*tp)) : NULL;
        if (!tp) {
            if (pool > 0)
                core_pool_destroy(d, pool);
            begin_refused(copy, device, id, "no private pool could be made; allocations stay in the default pools");
            return;
        }
        *tp = (torch_pool_t){.next = torch_pools, .device = device, .id = id, .pool = pool};
        torch_pools = tp;
    }
    tp->uses++;
    tp->filter = copy;
    tp->routing = true;
    atomic_fetch_add_explicit(&torch_routing[device], 1, memory_order_release);
    pthread_mutex_unlock(&torch_pools_lock);
}

CUCACHE_EXPORT void cucache_torch_end_allocate_to_pool(int device, cucache_torch_pool_id_t id)
{
    const char *why = NULL;
    pthread_mutex_lock(&torch_pools_lock);
    torch_pool_t *tp = (unsigned)device < HOOK_MAX_DEVICES ? torch_pool_find(device, id) : NULL;
    if (!tp) {
        why = "no such pool";
    } else if (tp->refused > 0) {
        tp->refused--; /* the end of a refused begin */
    } else if (!tp->routing) {
        why = "not allocating to this pool";
    } else {
        tp->routing = false;
        filter_unref(tp->filter);
        tp->filter = NULL;
        atomic_fetch_sub_explicit(&torch_routing[device], 1, memory_order_release);
    }
    pthread_mutex_unlock(&torch_pools_lock);
    if (why)
        hook_warn(HOOK_WARN_BACKEND, "cucache_torch_end_allocate_to_pool(device %d, pool (%llu, %llu)): %s", device,
                  id.first, id.second, why);
}

CUCACHE_EXPORT void cucache_torch_release_pool(int device, cucache_torch_pool_id_t id)
{
    int destroy = 0;
    pthread_mutex_lock(&torch_pools_lock);
    torch_pool_t **at = &torch_pools;
    while (*at && !((*at)->device == device && (*at)->id.first == id.first && (*at)->id.second == id.second))
        at = &(*at)->next;
    torch_pool_t *tp = *at;
    if (tp && --tp->uses <= 0) {
        if (tp->routing) {
            filter_unref(tp->filter);
            atomic_fetch_sub_explicit(&torch_routing[device], 1, memory_order_release);
        }
        *at = tp->next;
        destroy = tp->pool;
        hostalloc_free(tp);
    }
    pthread_mutex_unlock(&torch_pools_lock);
    if (!tp) {
        hook_warn(HOOK_WARN_BACKEND, "cucache_torch_release_pool(device %d, pool (%llu, %llu)): no such pool", device,
                  id.first, id.second);
        return;
    }
    core_dev_t *d = destroy ? hook_dev_core(&hook_devs[device]) : NULL;
    if (d)
        core_pool_destroy(d, destroy);
}

/* The pool an allocation goes to (hook_req_t.pool): while pools route,
 * the first whose filter takes the stream (0: none does); else, once the
 * pool hooks were used, the default pools whatever the thread's route;
 * else the thread's route. */
static inline int torch_pool_of(int device, void *stream)
{
    if (HOOK_UNLIKELY(atomic_load_explicit(&torch_routing[device], memory_order_acquire) != 0))
        return torch_pick_pool(device, stream);
    if (HOOK_UNLIKELY(atomic_load_explicit(&torch_hooks_used, memory_order_relaxed)))
        return 0;
    return HOOK_POOL_ROUTE;
}

/* A request not served, already said or reported: thrown to the C++
 * caller (PyTorch), or NULL where the process has no C++ library. */
static __attribute__((noinline, cold)) void *torch_refuse(hook_cxx_failure_t failure, const char *what)
{
    hook_cxx_throw(failure, what);
    return NULL;
}

/* Out of memory: the report, then PyTorch's OOM words and the sizes of the
 * report's first sentence in the exception. */
static __attribute__((noinline, cold)) void *torch_oom(hook_dev_t *hd, const hook_fail_t *f)
{
    hook_report_oom(hd, f);
    char rounded[32], requested[32], what[256];
    st_fmt_size(rounded, sizeof rounded, f->oom.rounded);
    st_fmt_size(requested, sizeof requested, f->oom.requested);
    snprintf(what, sizeof what,
             "CUDA out of memory. Tried to allocate %s (%s requested). GPU %d: cucache, PyTorch's allocator "
             "(cucache.torch.enable()), could not serve it: its report (stderr, or CUCACHE_LOG's file) says why.",
             rounded, requested, hd->ordinal);
    return torch_refuse(HOOK_CXX_OUT_OF_MEMORY, what);
}

CUCACHE_EXPORT void *cucache_torch_malloc(size_t size, int device, void *stream)
{
    hook_dev_t *hd;
    core_dev_t *d = torch_device(device, &hd);
    if (!d) {
        char what[128];
        snprintf(what, sizeof what, "cucache_torch_malloc(%zu, device %d): no such device, or cucache is off", size,
                 device);
        hook_warn(HOOK_WARN_BACKEND, "%s", what);
        return torch_refuse(HOOK_CXX_ERROR, what);
    }
    hook_fail_t f;
    hook_req_t r = {hd, d, size, hook_stream_key((CUstream)stream, false), hook_site(), torch_pool_of(device, stream)};
    uintptr_t p = hook_alloc(&r, &f);
    if (HOOK_LIKELY(p != 0))
        return (void *)p;
    return torch_oom(hd, &f);
}

CUCACHE_EXPORT void cucache_torch_free(void *ptr, size_t size, int device, void *stream)
{
    (void)size;
    if (!ptr)
        return;
    hook_dev_t *hd = (unsigned)device < HOOK_MAX_DEVICES ? &hook_devs[device] : NULL;
    bool inside;
    if (hook_free_any(hd, (uintptr_t)ptr, CORE_FREE_AFTER_STREAM, hook_stream_key((CUstream)stream, false), &inside) !=
        CORE_FREED)
        hook_warn(HOOK_WARN_BAD_FREE,
                  "cucache_torch_free(%p, device %d): not a live allocation of cucache's (%s); nothing freed", ptr,
                  device, inside ? "a double free, or a pointer inside a block" : "a foreign pointer");
}

CUCACHE_EXPORT void cucache_torch_init(int device_count)
{
    (void)device_count; /* devices open at their first allocation */
    hook_framework_pluggable();
}

CUCACHE_EXPORT void cucache_torch_record_stream(void *ptr, void *stream)
{
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        core_dev_t *d = hook_dev_core(&hook_devs[i]);
        if (d && core_record_stream(d, (uintptr_t)ptr, hook_stream_key((CUstream)stream, false)) == CORE_FREED)
            return;
    }
    hook_warn(HOOK_WARN_BAD_FREE, "cucache_torch_record_stream(%p): not a live allocation of cucache's", ptr);
}

CUCACHE_EXPORT void cucache_torch_memory_fraction(double fraction, int device)
{
    hook_dev_t *hd;
    core_dev_t *d = torch_device(device, &hd); /* opens it: PyTorch may set the fraction first */
    if (!d || core_set_memory_fraction(d, fraction) != 0)
        hook_warn(HOOK_WARN_BACKEND,
                  "cucache_torch_memory_fraction(%g, device %d): not set (a fraction outside (0, 1], or no "
                  "such device)",
                  fraction, device);
}

CUCACHE_EXPORT void cucache_torch_empty_cache(void)
{
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        if (hook_dev_core(&hook_devs[i]))
            cucache_empty_cache(i);
}
