/*
 * interpose/: the hooks of libcucache.so, and what only an interposer knows.
 *
 * How a call travels:
 *
 *   program ──► exported hook: hook_rt_mem.c (cudaMalloc ...), hook_cu_mem.c
 *                 │  (cuMemAlloc_v2 ...), hook_sync.c (synchronisation,
 *                 │  streams, capture, reset), hook_ctx.c (contexts),
 *                 │  hook_ptr.c (pointer questions), hook_ipc.c (IPC),
 *                 │  hook_peer.c (peer access: the mappings of expandable
 *                 │  segments follow it), torch_alloc.c (PyTorch's
 *                 │  pluggable allocator: a failure thrown to PyTorch as a
 *                 │  C++ exception by cxx_throw.c),
 *                 │  cucache.c (the public API), hook_lookup.c and
 *                 │  dlsym_entry.S (dlsym, cuGetProcAddress)
 *                 │  bypass? (re-entry guard, cucache off) ──► real entry point (real.c)
 *                 ▼
 *               hook_dev_t of the call's context: the device's primary
 *               one (state.c) or a created one (ctx_devs.c); streams.c:
 *               the program's streams and captures; ipc.c: exports and
 *               imports
 *                 │
 *                 ▼  an allocation: hook_alloc, one flow (fail.c): the try,
 *                 │  the neighbours asked (yield.c), the counted try; the
 *                 │  report (diag.c) gets the failure as a value
 *               core_* (core/) ──► backend.c: the core's device seam (real
 *                                  driver calls in the allocator's
 *                                  context, capture-aware; fences over
 *                                  streams; a stream made to wait for a
 *                                  free on another stream, never into a
 *                                  capture: the free then waits as
 *                                  before) ──► order.c: the device ordered
 *                                  after fences (hand-outs), its waits and
 *                                  stops
 *               (a plain free first runs order.c's probe: whether the
 *               program's work also runs on the legacy stream)
 *
 * Beside the path: submit.c and submit_entry.S see every submission of
 * work (a count per thread, and the core's work_epoch, moved on by the
 * first submission after a hand-out; submit_table.h is generated,
 * submit_sim.h the simulator's kernel extensions); trace.c records CUCACHE_TRACE;
 * diag.c, log.c and signal.c report (below), nvml.c names the processes
 * on a device for the OOM report; yield.c keeps this process in each GPU's
 * registry (a thread per device) and asks the other processes for idle
 * cache after a failure; run/cucache_run.c is the
 * cucache-run launcher, a program of its own.
 *
 * Locks, in the order they nest (a thread holding one takes only locks
 * below it; none is held across a call into the program):
 *   1. open_lock (state.c)            a device's allocator made once
 *   2. snap_lock (diag.c)             one snapshot or report at a time
 *      torch_pools_lock (torch_alloc.c) PyTorch's pool ids
 *   3. hd->count_lock                 the streams counted (core_set_streams
 *                                     is called under it)
 *   4. the core's device lock         core/ (dev_lock); the backend is
 *                                     called under it
 *   5. hd->lock                       streams, captures, events, fences
 *                                     (backend.c, order.c, streams.c); no
 *                                     core call is made under it
 *   6. ipc_lock (ipc.c), the trace's lock (trace.c), stats/stack.c's
 *      locks, submit.c's list of threads that submitted: leaves, nothing
 *      is taken under them.
 * A device's registry thread (yield.c) takes open_lock, then the core's
 * lock (hook_dev_with_core); it waits for no other process under either.
 * The submission epoch (submit.c) and hook_dev_t.core are atomics, read
 * without a lock on the hit path; the trampolines take no lock (each
 * thread counts its own submissions, and only a thread's first
 * submission takes the list's lock).
 *
 * Real entry points are resolved once, by their exact versioned names, into
 * typed tables (real.h, real.c): the driver's from libcuda.so.1, the runtime's with
 * RTLD_NEXT.  Nothing links libcuda or libcudart.
 *
 * Layers.  Runtime hooks (cudaMalloc, ...) serve programs that link the
 * shared runtime; driver hooks (cuMemAlloc_v2, ...) serve the static runtime
 * and frameworks that call the driver.  They reach the driver hooks through
 * the dlsym override and the cuGetProcAddress hooks (hook_lookup.c).  An
 * allocation is cached by the outermost hook the program called: while a
 * hook runs the real runtime on the program's behalf, the thread's guard
 * (hook_depth, raised by HOOK_REAL) makes every hook pass straight through.
 *
 * Contexts.  Each device has an allocator (core_dev_t) for its primary
 * context, the one the runtime uses, in hook_devs[ordinal]; each context
 * the program creates (cuCtxCreate) has one of its own, in a slot after
 * them (ctx_devs.c), used by the driver calls made while it is current or
 * on its streams.  A block never moves between contexts; a free finds its
 * owner across all of them (state.c); cuCtxDestroy gives the context's
 * memory back first (hook_ctx.c).
 *
 * Streams.  The core keys blocks by stream (core_stream_t).  Key 0 is
 * memory not tied to a stream (cudaMalloc); the keys of streams are
 * core/stream_key.h's (the replay's too): hook_stream_key (streams.h) maps
 * a CUstream handle to its kind, and a thread's per-thread default stream
 * is keyed by a thread number never reused (hook_key_ptds).
 *
 * Environment.  Every CUCACHE_* variable is read once, into one struct
 * (env.c, env.h); diag.c (reports and snapshots, and when), log.c (the
 * sink, CUCACHE_LOG), signal.c (snapshots on SIGUSR1) and trace.c act on it.
 *
 * Headers.  This one holds what nearly every file needs: the export and
 * branch macros, the re-entry guard, the device (hook_dev_t).  Each of the
 * others declares one file's functions, or one tight group's, and a file
 * includes those it uses:
 *   real.h         the real entry points' typed tables (real.c), RT_REAL, CU_REAL
 *   state.h        devices found, opened and dropped; frees and pointer
 *                  questions across devices (state.c)
 *   streams.h      stream keys, the program's streams, captures (streams.c)
 *   contexts.h     a second context stops the hand-outs (hook_ctx.c);
 *                  created contexts' allocators (ctx_devs.c)
 *   backend.h      the core's device seam, hook_enter/hook_leave (backend.c)
 *   fence.h        fences and their spare events (backend.c), for order.c
 *   order.h        the device ordered after fences: waits, stops, the probe (order.c)
 *   peer.h         peer access (hook_peer.c) and backend.c's hook_vmm_set_access
 *   ipc.h          exports and imports (ipc.c)
 *   fail.h         an allocation's one flow, its failure as a value (fail.c)
 *   yield.h        the GPU's registry, the neighbours asked (yield.c)
 *   meminfo.h      cudaMemGetInfo's answer, and the driver's (hook_rt_mem.c)
 *   submit.h       the submissions counted, the work epoch (submit.c, submit_entry.S)
 *   recorder.h     the trace recorder (trace.c)
 *   log.h          the output sink, rate-limited warnings (log.c)
 *   framework.h    frameworks' own caches, one row each: cucache-run turns them off, framework.c says once when one is on,
 *                  and with it off throws a failed cudaMalloc to the framework as its OOM error (hook_rt_mem.c)
 *   diag.h         reports, snapshots, allocation sites (diag.c, signal.c)
 *   cxx_throw.h    C++ exceptions thrown from C: PyTorch's OutOfMemoryError or a runtime error (cxx_throw.c: make_c10_oom, make_runtime_error)
 *   nvml_procs.h   who holds a device's memory (nvml.c)
 *   env.h          every CUCACHE_* variable (env.c)
 *   submit_table.h and submit_sim.h: the entry points that submit work
 *                  (generated; the simulator's kernels)
 */
#ifndef CUCACHE_INTERPOSE_HOOK_H
#define CUCACHE_INTERPOSE_HOOK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "cucache/cuda_api.h"

#define HOOK_API __attribute__((visibility("default")))
#define HOOK_TLS __thread __attribute__((tls_model("initial-exec")))
/* For code that runs inside a sanitizer's own start-up (the dlsym path). */
#define HOOK_NO_SANITIZE __attribute__((no_sanitize("address", "undefined", "thread")))
#define HOOK_LIKELY(x) __builtin_expect(!!(x), 1)
#define HOOK_UNLIKELY(x) __builtin_expect(!!(x), 0)

enum {
    HOOK_MAX_DEVICES = 64,  /* devices with an allocator (CORE_MAX_DEVICES) */
    HOOK_MAX_CONTEXTS = 64, /* created contexts with an allocator at once (ctx_devs.c) */
    /* hook_devs: the primary contexts' by ordinal, then the created ones' */
    HOOK_MAX_SLOTS = HOOK_MAX_DEVICES + HOOK_MAX_CONTEXTS,
    HOOK_MAX_CAPTURES = 64, /* captures in progress per device */
};

/* ------------------------------------------------------------------------
 * The re-entry guard
 * ---------------------------------------------------------------------- */

extern HOOK_TLS int hook_depth;

/* True when the calling hook must pass straight through: cucache runs the
 * real API on this thread, or is off in this process. */
static inline bool hook_bypass(void)
{
    extern atomic_bool hook_off;
    return hook_depth != 0 || atomic_load_explicit(&hook_off, memory_order_relaxed);
}

#define HOOK_REAL(call)                                                                                                \
    __extension__({                                                                                                    \
        hook_depth++;                                                                                                  \
        __typeof__(call) hook_r_ = (call);                                                                             \
        hook_depth--;                                                                                                  \
        hook_r_;                                                                                                       \
    })

/* ------------------------------------------------------------------------
 * Devices (state.c; state.h finds, opens and drops them)
 * ---------------------------------------------------------------------- */

/* An event recorded on a non-blocking stream as it was destroyed. */
typedef struct hook_retired_s {
    CUevent ev;
    unsigned refs; /* fences holding it (they do not own it) */
    bool done;     /* seen completed */
} hook_retired_t;

typedef struct hook_dev_s {
    _Atomic(core_dev_t *) core; /* NULL until the first cached call on the device */
    /* the context the allocator serves, where its driver calls run: the
     * retained primary context, or a created one (ctx_devs.c); set before core */
    CUcontext primary;
    CUdevice handle;            /* the driver's handle of the ordinal */
    int ordinal;
    pthread_mutex_t lock; /* streams, captures, events below */
    /* live non-blocking streams of the primary context: the fence records
     * one event on each */
    CUstream *streams;
    size_t nstreams, streams_cap;
    /* bumped as a non-blocking stream is destroyed (a new one may take its
     * handle): a fence recorded before waits on every stream for each of its
     * events (order.c, wait_fence) */
    uint64_t streams_gen;
    /* live blocking streams the program created in the primary context:
     * with the non-blocking ones, the count the core is told
     * (core_set_streams; count_lock orders the updates) */
    CUstream *blocking;
    size_t nblocking, blocking_cap;
    size_t nlost; /* streams no list could take (out of host memory): counted as alive for good */
    pthread_mutex_t count_lock;
    /* captures in progress; while any, the core makes no fence, sync or
     * release call (core_set_capturing) */
    CUstream captures[HOOK_MAX_CAPTURES]; /* capturing streams (a per-thread one as its key) */
    int ncaptures;
    atomic_int capturing; /* ncaptures, readable without the lock */
    int capture_pool;     /* private pool of capture allocations (0: none yet) */
    /* the last work of destroyed non-blocking streams, which may still run:
     * every fence waits for these too until they complete */
    hook_retired_t *retired;
    size_t nretired, retired_cap;
    /* spare events for fences (created disabled-timing, in `primary`) */
    CUevent *spare_events;
    size_t nspare, spare_cap;
    /* fences the device was ordered after (fence_order) that may not have
     * completed: a stream created meanwhile waits for them too */
    struct fence_s **ordered;
    size_t nordered, ordered_cap;
    /* cucache's own non-blocking stream that gathers an ordered fence's
     * events into one (order.c: fence_gather); NULL until needed */
    CUstream hub;
    /* its hand-outs stopped for good, and the trace says so (order.c) */
    atomic_bool stopped;
    /* the program's work was seen on the legacy default stream beside one
     * stream of its own: counted as a stream (hook_live_streams; order.c's
     * probe sets it, for good) */
    atomic_bool default_busy;
    atomic_uint counted;         /* the count the core was last told (core_set_streams) */
    _Atomic uint64_t probe_next; /* the probe's next question, not before (coarse clock, ns) */
    uint64_t clear_at;           /* when the last fence on `ordered` was found completed (the same clock) */
    /* the process is in the GPU's registry and yields (yield.c): an
     * allocation's first try is uncounted, its failure not the program's
     * until the neighbours were asked (hook_alloc) */
    atomic_bool yielding;
} hook_dev_t;

extern hook_dev_t hook_devs[HOOK_MAX_SLOTS];

/* The device whose allocator serves the ordinal, without opening one. */
static inline core_dev_t *hook_dev_core(const hook_dev_t *hd)
{
    return atomic_load_explicit(&hd->core, memory_order_acquire);
}

/* Whether hd serves a device's primary context (else a created one's). */
static inline bool hook_dev_is_primary(const hook_dev_t *hd)
{
    return hd < &hook_devs[HOOK_MAX_DEVICES];
}

#endif
