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
 *                 │  pluggable allocator),
 *                 │  cucache.c (the public API), hook_lookup.c and
 *                 │  dlsym_entry.S (dlsym, cuGetProcAddress)
 *                 │  bypass? (re-entry guard, cucache off) ──► real entry point (real.c)
 *                 ▼
 *               hook_dev_t of the call's device (state.c; streams.c: the
 *               program's streams and captures; ipc.c: exports and imports)
 *                 │
 *                 ▼  an allocation: hook_alloc, one flow (fail.c): the try,
 *                 │  the neighbours asked (yield.c), the counted try; the
 *                 │  report (diag.c) gets the failure as a value
 *               core_* (core/) ──► backend.c: the core's device seam (real
 *                                  driver calls in the device's primary
 *                                  context, capture-aware; fences over
 *                                  streams) ──► order.c: the device ordered
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
 * Contexts.  Each device has one allocator (core_dev_t), for its primary
 * context, the one the runtime uses.  Driver calls made while a created
 * context (cuCtxCreate) is current pass through uncached: memory of one
 * context is not usable from another.
 *
 * Streams.  The core keys blocks by stream (core_stream_t).  Key 0 is
 * memory not tied to a stream (cudaMalloc); the keys of streams are
 * core/stream_key.h's (the replay's too): hook_stream_key maps a CUstream
 * handle to its kind, and a thread's per-thread default stream is keyed by
 * a thread number never reused (hook_key_ptds).
 *
 * Environment.  Every CUCACHE_* variable is read once, into one struct
 * (env.c, env.h); diag.c (reports and snapshots, and when), log.c (the
 * sink, CUCACHE_LOG), signal.c (snapshots on SIGUSR1) and trace.c act on it.
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
#include "stream_key.h"

#define HOOK_API __attribute__((visibility("default")))
#define HOOK_TLS __thread __attribute__((tls_model("initial-exec")))
/* For code that runs inside a sanitizer's own start-up (the dlsym path). */
#define HOOK_NO_SANITIZE __attribute__((no_sanitize("address", "undefined", "thread")))
#define HOOK_LIKELY(x) __builtin_expect(!!(x), 1)
#define HOOK_UNLIKELY(x) __builtin_expect(!!(x), 0)

enum {
    HOOK_MAX_DEVICES = 64,  /* devices with an allocator (CORE_MAX_DEVICES) */
    HOOK_MAX_CAPTURES = 64, /* captures in progress per device */
};

/* The 11.3 form of the resolver; cuda_api.h declares only _v2. */
typedef CUresult (*hook_getproc_fn)(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

#include "real.h" /* the real entry points' typed tables (real.c) */

/* ------------------------------------------------------------------------
 * Submissions (submit.c, submit_entry.S, submit_table.h)
 * ---------------------------------------------------------------------- */

enum {
    HOOK_API_QUIET = 0,   /* puts no work on a stream */
    HOOK_API_SUBMITS = 1, /* may put work that uses device memory on a stream */
    HOOK_API_OPAQUE = 2,  /* effects unknown (cuGetExportTable) */
    HOOK_API_UNKNOWN = 3, /* not in the table (a newer CUDA's) */
};

/* Set in hook_submit_epoch for good once a submission may go unseen. */
#define HOOK_SUBMIT_BLIND CORE_EPOCH_UNSEEN

/* The core's work_epoch: odd once a block was handed out at its value,
 * moved on to the next even value by the first submission after
 * (| HOOK_SUBMIT_BLIND); submit.c says why a free comparing it is exact. */
extern _Atomic uint64_t hook_submit_epoch;

/* HOOK_API_* of a driver name (exact or base: suffixes are ignored). */
int hook_api_kind(const char *symbol);
/* The counting trampoline exported as `symbol`, or NULL. */
void *hook_submit_export(const char *symbol);
/* What a caller gets for the driver's answer `real` to a lookup of
 * `symbol`: a counting trampoline for a submitting name, `real` itself for
 * a quiet one; an unknown or opaque name makes the count blind. */
void *hook_submit_wrap(const char *symbol, void *real);
void hook_submit_go_blind(void);
/* Fills every exported trampoline's driver address that is still empty. */
void hook_submit_resolve_all(void *(*lookup)(const char *name));
/* Calls that submitted so far, summed over the threads. */
uint64_t hook_submit_count(void);
/* Whether a submission may have gone unseen (HOOK_SUBMIT_BLIND). */
bool hook_submit_unseen(void);

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

/* The real runtime call, with the guard up: what it asks of the driver
 * passes through the driver hooks uncached. */
#define RT_REAL(name, ...)                                                                                             \
    (hook_real_runtime() && real_rt.name ? HOOK_REAL(real_rt.name(__VA_ARGS__)) : cudaErrorInsufficientDriver)
/* The real driver call (the driver calls no hook, so no guard is needed). */
#define CU_REAL(name, ...) (hook_real_driver() && real_cu.name ? real_cu.name(__VA_ARGS__) : CUDA_ERROR_NOT_INITIALIZED)

/* ------------------------------------------------------------------------
 * Devices (state.c)
 * ---------------------------------------------------------------------- */

/* An event recorded on a non-blocking stream as it was destroyed. */
typedef struct hook_retired_s {
    CUevent ev;
    unsigned refs; /* fences holding it (they do not own it) */
    bool done;     /* seen completed */
} hook_retired_t;

typedef struct hook_dev_s {
    _Atomic(core_dev_t *) core; /* NULL until the first cached call on the device */
    CUcontext primary;          /* retained primary context; set before core */
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

extern hook_dev_t hook_devs[HOOK_MAX_DEVICES];
extern conf_t hook_conf;

/* ------------------------------------------------------------------------
 * Fences (backend.c) and the device's ordering after them (order.c)
 * ---------------------------------------------------------------------- */

/* A fence: one event on every stream that could use the device's memory. */
typedef struct fence_s {
    size_t n;      /* events */
    size_t owned;  /* ev[0..owned) are the fence's; the rest are retired
                        streams' events it holds a reference on */
    bool ordered;  /* on hd->ordered: the device waits for it (fence_order) */
    bool released; /* the core released it: freed once it completes */
    CUevent hub;   /* ordered: recorded on the hub stream after it waited for
                      every event (NULL: each stream waits for every event) */
    uint64_t first_alloc; /* ordered: the number of the first allocation after
                             the hand-out (core.h, fence_order) */
    uint64_t gen;  /* hd->streams_gen when recorded */
    CUstream *on;  /* on[i]: the stream ev[i] was recorded on (NULL for a
                      retired stream's event); after ev[] */
    CUevent ev[];  /* all must complete */
} fence_t;

/* Called with hd->lock held and the primary context current: a spare event,
 * or a new one (NULL on failure). */
CUevent hook_event_get(hook_dev_t *hd);
/* Called with hd->lock held: back among the spares (or destroyed). */
void hook_event_put(hook_dev_t *hd, CUevent e);
/* Called with hd->lock held: gives the fence's events back and frees it. */
void hook_fence_free(hook_dev_t *hd, fence_t *f);
/* Called with hd->lock held: whether every event of f completed (an error,
 * a faulted context, counts as completed). */
bool hook_fence_done(const fence_t *f);

/* The backend's fence_order (core.h): orders the device after the fence. */
int hook_order_fence(void *ctx, int device, uint64_t event, uint64_t first_alloc);
/* A non-blocking stream created on hd's device waits for the fences the
 * device was ordered after (called with hd->lock held). */
void hook_order_new_stream(hook_dev_t *hd, CUstream s);
/* The device's context is gone (hook_dev_drop; hd->lock held): forgets the
 * fences the device was ordered after without touching their events. */
void hook_order_drop(hook_dev_t *hd);
/* Waits on the host for the fences the device was ordered after that may
 * have handed out memory of allocation number `alloc` (core_ptr_info_t.id's
 * number; UINT64_MAX: all of them): before memory leaves this process's
 * streams (an IPC export, a library's question before RDMA, a second
 * context). */
void hook_order_wait(hook_dev_t *hd, uint64_t alloc);
/* The allocation number of a block id (core_ptr_info_t.id). */
static inline uint64_t hook_alloc_number(uint64_t id)
{
    return (id & ~CORE_ID_TAG) >> 6;
}
/* Stops the device's hand-outs for good (core_stop_hand_outs, and a trace
 * record, once), then waits for the fences handed out so far;
 * every call waits. */
void hook_order_stop(hook_dev_t *hd);
/* Before a plain free, while the program has one stream of its own: whether
 * its work also runs on the legacy default stream (order.c's probe, at most
 * once a millisecond); if so, counts it (hook_stream_default_busy). */
void hook_order_probe(hook_dev_t *hd);
/* The trace's record that the device stopped handing out, once. */
void hook_order_note_stopped(hook_dev_t *hd);
/* The process has (or may have) a second CUDA context: stops the hand-outs
 * on every device and waits for those made (hook_ctx.c); every call waits,
 * so that no context's creator returns before the fences completed. */
void hook_second_context(void);
/* Set for good once the program has a second CUDA context (hook_ctx.c):
 * the backend's fence_order then refuses. */
extern atomic_bool hook_many_contexts;
/* Context creations and primary-context retains the hooks saw (a process
 * statistic, contexts_seen: whether the runtime's reach these hooks). */
extern atomic_ulong hook_contexts_seen;

/* The device of a runtime call (cudaGetDevice), with its allocator, or NULL
 * when the call must pass through (no runtime or driver, bad device).
 * open: create the allocator if the device has none yet (else NULL). */
hook_dev_t *hook_rt_device(bool open);
/* The device of a driver call: the current context's, when that context is
 * the device's primary one; NULL means pass through (no context, a created
 * context, no driver). */
hook_dev_t *hook_cu_device(bool open);
/* The device by ordinal, opening its allocator on first use; NULL if the
 * ordinal is out of range or the driver refused. */
hook_dev_t *hook_dev_open(int ordinal);
/* The device whose allocator serves the ordinal, without opening one. */
static inline core_dev_t *hook_dev_core(const hook_dev_t *hd)
{
    return atomic_load_explicit(&hd->core, memory_order_acquire);
}
/* The ordinal of a driver device handle, or -1. */
int hook_ordinal_of(CUdevice handle);
/* Drops the device's allocator (cudaDeviceReset, cuDevicePrimaryCtxReset):
 * its segments go back to CUDA first.  The next call opens a fresh one. */
void hook_dev_drop(hook_dev_t *hd);

/* Frees addr wherever it was allocated: the given device first, then the
 * others.  CORE_FREED, or CORE_NOT_MINE with *inside set when the address
 * lies within cucache's memory (a bad pointer or a double free) rather than
 * outside it (a foreign pointer for the real free). */
int hook_free_any(hook_dev_t *first, uintptr_t addr, core_free_t how, core_stream_t stream, bool *inside);

/* cudaMemGetInfo / cuMemGetInfo_v2: adds what the cache holds unused to
 * the device's free bytes; a limit becomes the total (hook_rt_mem.c). */
void hook_adjust_meminfo(hook_dev_t *hd, size_t *free_bytes, size_t *total);
/* The answer of cudaMemGetInfo (runtime) or cuMemGetInfo_v2 from the real
 * call's figures f and t: adjusted as above unless the call is cucache's
 * own, then stored where the program asked (NULL: not wanted). */
void hook_meminfo_answer(bool runtime, size_t f, size_t t, size_t *free_bytes, size_t *total);

/* The synchronisation the reuse policy asks of a cudaFree/cuMemFree: returns
 * how the core must treat it. */
core_free_t hook_free_policy(hook_dev_t *hd);

/* What addr is to cucache, on every device with an allocator (and, in a
 * peer, among the blocks it opened by IPC: ipc.c): CORE_WHERE_LIVE inside
 * a block the program holds, CORE_WHERE_DEAD inside cucache's memory but
 * in no live block (to answer as freed memory), CORE_WHERE_NONE elsewhere
 * (foreign: the real call answers).  *hd: the device (NULL for an IPC
 * import).  For pointer queries and IPC: walks segments (state.c). */
core_where_t hook_describe(uintptr_t addr, core_ptr_info_t *info, hook_dev_t **hd);

/* ------------------------------------------------------------------------
 * IPC (ipc.c; the hooks are hook_ipc.c, docs/interposer.md "IPC")
 * ---------------------------------------------------------------------- */

/* Exports the live block at addr (in info, on hd) for another process:
 * fills the 64 bytes of a CUipcMemHandle/cudaIpcMemHandle_t.  CUDA's
 * error otherwise (a stream-ordered block is not exportable, as pool
 * memory is not; under ipc:strict a block not at its segment's start is
 * refused with a line). */
CUresult hook_ipc_export(hook_dev_t *hd, const core_ptr_info_t *info, char handle[64]);
/* Whether the 64 bytes are a handle cucache made (then hook_ipc_open
 * answers them; otherwise the real call does). */
bool hook_ipc_is_ours(const char handle[64]);
/* Opens a handle cucache made in another process: *out is exactly the
 * exported block.  ctx_hd: a device whose primary context is pushed around
 * the real calls (the runtime's hooks), or NULL for the current context.  CUDA's error otherwise, with a line where cucache
 * refuses (a corrupted handle or export table, one another user made). */
CUresult hook_ipc_open(const char handle[64], unsigned flags, hook_dev_t *ctx_hd, uintptr_t *out);
/* Closes an open of hook_ipc_open: CUDA_SUCCESS, or CUDA_ERROR_NOT_FOUND
 * when addr is not one (the real call answers then). */
CUresult hook_ipc_close(uintptr_t addr);
/* The backend's hold_query: whether an exported block the program freed
 * may be reused (no peer has it open any more). */
int hook_ipc_hold_query(uint64_t token);
/* addr inside a block this process opened by IPC: fills info (LIVE). */
bool hook_ipc_describe(uintptr_t addr, core_ptr_info_t *info);
/* A device's allocator is dropped (reset): its exports open no more. */
void hook_ipc_dev_dropped(int ordinal);

/* ------------------------------------------------------------------------
 * Peer access (hook_peer.c; docs/interposer.md "Expandable segments")
 * ---------------------------------------------------------------------- */

/* The access descriptors (read and write) of the devices that have peer
 * access to device `peer`'s primary context, for a new mapping of its
 * memory: into out (room for HOOK_MAX_DEVICES), their number. */
size_t hook_peer_access(int peer, CUmemAccessDesc *out);
/* The primary context of device `ordinal` is reset: its peer access, both
 * ways, ends (the other devices lose their access to its mappings). */
void hook_peer_reset(int ordinal);
/* backend.c: sets device `to`'s access (CU_MEM_ACCESS_FLAGS_PROT_*) to
 * [addr, addr+size) of hd's mapped pages (whole mappings), warning when the
 * driver refuses.  Called under the core's device lock (core_each_mapped). */
void hook_vmm_set_access(hook_dev_t *hd, CUdevice to, unsigned flags, uintptr_t addr, size_t size);

/* ------------------------------------------------------------------------
 * Streams and captures (streams.c)
 * ---------------------------------------------------------------------- */

/* This thread's per-thread default stream's key (core/stream_key.h), with
 * a thread number of its own: never reused, so a new thread never inherits
 * the blocks of an exited thread's stream (whose work may still run). */
extern HOOK_TLS core_stream_t hook_ptds_key;
core_stream_t hook_key_ptds_new(void);
static inline core_stream_t hook_key_ptds(void)
{
    core_stream_t k = hook_ptds_key;
    return HOOK_LIKELY(k != 0) ? k : hook_key_ptds_new();
}

/* The core key of a stream handle; per_thread: the call was a _ptsz entry
 * point (handle 0 is the per-thread default stream). */
static inline core_stream_t hook_stream_key(CUstream s, bool per_thread)
{
    uintptr_t v = (uintptr_t)s;
    if (v == 0)
        return per_thread ? hook_key_ptds() : core_stream_key(CORE_STREAM_LEGACY, 0, 0);
    if (v == (uintptr_t)CU_STREAM_LEGACY)
        return core_stream_key(CORE_STREAM_LEGACY, 0, 0);
    if (v == (uintptr_t)CU_STREAM_PER_THREAD)
        return hook_key_ptds();
    return core_stream_key(CORE_STREAM_HANDLE, v, 0);
}

/* The stream handle a trace records: a _ptsz call on handle 0 means the
 * per-thread default stream, recorded as CU_STREAM_PER_THREAD so that a
 * replay keys it per thread. */
static inline void *hook_trace_stream(void *s, bool per_thread)
{
    return per_thread && s == NULL ? (void *)CU_STREAM_PER_THREAD : s;
}

/* A stream was created in the device's primary context with these flags. */
/* A stream the program created in hd's primary context: true when counted
 * (the core told, and the trace given a counted record). */
bool hook_stream_created(hook_dev_t *hd, CUstream s, unsigned flags);
/* Called with hd->lock held: the streams the program has on the device
 * (core_set_streams' count): those it created, and the legacy default
 * stream once seen busy beside them (hd->default_busy). */
unsigned hook_live_streams(const hook_dev_t *hd);
/* The program's work was seen on the legacy default stream: counted, with
 * the trace's counted record, once (called with no lock held). */
void hook_stream_default_busy(hook_dev_t *hd);
/* A stream about to be destroyed leaves the lists before the real call, so
 * that a creation on another thread that gets the same handle back is
 * counted and fenced: the device it was counted on (its flags set), or -1.
 * If the destruction fails, hook_stream_created puts it back. */
int hook_stream_forget(CUstream s, unsigned *flags);
/* After a successful destruction. */
void hook_stream_destroyed(CUstream s);
/* A stream is about to be destroyed: if it is a known non-blocking stream,
 * an event recorded on it now joins every later fence until it completes
 * (the destroyed stream's queued work still runs and may read memory the
 * program frees afterwards). */
void hook_stream_retiring(CUstream s);
/* A capture began / ended on stream s (per_thread: _ptsz entry point). */
void hook_capture_begin(hook_dev_t *hd, CUstream s, bool per_thread);
void hook_capture_end(CUstream s, bool per_thread);
/* Whether s is being captured (then stream-ordered calls on it pass
 * through: they become graph nodes). */
bool hook_stream_capturing(hook_dev_t *hd, CUstream s, bool per_thread);

/* The device whose memory a stream-ordered call on s must use: the
 * stream's own (a created stream may belong to another device than the
 * current one), or, for the default streams, the current device (runtime:
 * cudaGetDevice; driver: the current context).  NULL: pass through. */
hook_dev_t *hook_stream_device(CUstream s, bool runtime);

/* ------------------------------------------------------------------------
 * Backend (backend.c), output (log.c)
 * ---------------------------------------------------------------------- */

extern const core_backend_t hook_backend;

/* What hook_enter changed on the calling thread, for hook_leave to undo. */
typedef struct hook_scope_s {
    bool pushed;              /* hd's primary context was pushed */
    bool relaxed;             /* the thread's capture mode was relaxed */
    CUstreamCaptureMode mode; /* relaxed: the mode to restore */
} hook_scope_t;
/* Makes hd's primary context current on the calling thread for one of
 * cucache's own driver calls (pushed when another context, or none, is
 * current) and, with relax, relaxes the thread's capture mode while the
 * device captures, so that the call is not refused in global capture mode.
 * False when the context cannot be made current (hook_backend_error set;
 * nothing to undo).  Every cucache call into the driver on a device's
 * behalf goes through this pair. */
bool hook_enter(hook_dev_t *hd, bool relax, hook_scope_t *sc);
void hook_leave(hook_scope_t *sc);

/* The CUresult of the last failed device call the backend made on this
 * thread (CUDA_SUCCESS when none): what a CORE_EFAIL stands for. */
extern HOOK_TLS CUresult hook_backend_error;

/* One line on stderr, prefixed "cucache: ".  Never allocates; errno kept. */
/* Where cucache's lines go: 2, or CUCACHE_LOG's file (hook_log_open, at start-up). */
extern int hook_log_fd;
void hook_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Sends every line from now on to the file CUCACHE_LOG's template names
 * (log.c); 0, or -1 with err naming the variable and the file. */
int hook_log_open(const char *tmpl, char *err, size_t errlen);

typedef enum hook_warn_e {
    HOOK_WARN_BAD_FREE,
    HOOK_WARN_BACKEND,
    HOOK_WARN_IPC,
    HOOK_WARN_KINDS,
} hook_warn_t;

/* hook_log, rate-limited per kind: the first few, then one line per power
 * of two with the running count. */
void hook_warn(hook_warn_t kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* CUCACHE_STACKS (diag.c): each allocation's call stack, interned by
 * stats/stack.c, as the block's site.  Off, the hooks pay one predictable
 * branch.  It runs before the allocator takes any lock, and holds none
 * when it returns: with Python frames it may wait for the GIL
 * (stats/pystack.c), which must not happen under a cucache lock. */
extern atomic_bool hook_stacks;
uint32_t st_stack_capture(void); /* stats/st.h */

static inline uint32_t hook_site(void)
{
    return HOOK_UNLIKELY(atomic_load_explicit(&hook_stacks, memory_order_relaxed)) ? st_stack_capture() : 0;
}

/* What cucache_record_memory_history does (diag.c): the event ring of every device,
 * and of those opened later, on (max_entries > 0) or off (0); stacks in
 * `mode` (st_stack_mode_t) with `depth` frames of each kind (1..64), depth
 * 0 off, -1 as they are.  0, or -1 with err set. */
int hook_record_history(size_t max_entries, int mode, int depth, char *err, size_t errlen);

/* ------------------------------------------------------------------------
 * The trace recorder (trace.c; CUCACHE_TRACE, stats/trace.h)
 * ---------------------------------------------------------------------- */

extern atomic_bool hook_tracing;
/* The device of this thread's last runtime or driver call (-1: none):
 * what the recorder writes in a record's device field. */
extern HOOK_TLS int hook_last_dev;

/* Reads CUCACHE_TRACE and opens the file (the constructor); 0, or -1 with
 * err naming the variable and the problem. */
int hook_trace_start(char *err, size_t errlen);

/* Whether this hook call is to be recorded: tracing, and an application
 * call (not one cucache makes through the real API). */
static inline bool hook_trace_on(void)
{
    return HOOK_UNLIKELY(atomic_load_explicit(&hook_tracing, memory_order_relaxed)) && hook_depth == 0;
}
/* The recorder's clock now (for a record stamped before the call). */
uint64_t hook_trace_now(void);
/* Appends one record (stats/trace.h's kinds and apis) to this thread's
 * buffer; when: hook_trace_now() taken earlier, or 0 for now. */
void hook_trace_put(unsigned kind, unsigned api, int device, uint64_t stream, uint64_t addr, uint64_t size,
                    uint64_t when);
/* The same with the record's flags (TRACE_REC_*, a TRACE_CONF offset). */
void hook_trace_put_flags(unsigned kind, unsigned api, int device, uint64_t stream, uint64_t addr, uint64_t size,
                          uint64_t when, uint32_t flags);
/* A TRACE_DEVICE record for a device cucache has just opened (its free and
 * total bytes), when recording. */
void hook_trace_device(int ordinal);
/* Set by hook_fallback_served: this thread's allocation in progress was
 * served by the runtime's allocator after cucache's path failed; the
 * recorder reads and clears it (TRACE_REC_FALLBACK). */
extern HOOK_TLS bool hook_fallback_now;

/* ------------------------------------------------------------------------
 * An allocation and its failure (fail.c: the one flow)
 * ---------------------------------------------------------------------- */

enum {
    HOOK_POOL_ROUTE = -1, /* hook_req_t.pool: the calling thread's route (core_pool_use) */
    HOOK_ASK_MAX = 32,    /* neighbours asked for one allocation, at most */
};

/* An allocation as the program asked for it: tried, and tried once more
 * after the neighbours gave (hook_alloc). */
typedef struct hook_req_s {
    hook_dev_t *hd;
    core_dev_t *d; /* hd's allocator */
    size_t size;
    core_stream_t key;
    uint32_t site; /* hook_site(), taken once for every try */
    int pool;      /* the private pool it goes to whatever the thread's route (0: the default pools), or
                    * HOOK_POOL_ROUTE */
} hook_req_t;

/* The neighbours' answer to one ask (hook_yield_ask), for the OOM report. */
typedef struct hook_ask_s {
    unsigned n; /* neighbours asked: who[0..n); 0: none */
    struct {
        int32_t pid;
        bool answered;  /* within CUCACHE_YIELD_MS */
        uint64_t given; /* bytes it gave back */
    } who[HOOK_ASK_MAX];
    uint64_t given;     /* bytes given in all */
    uint64_t waited_ns; /* how long the allocation waited for the answers */
} hook_ask_t;

/* A failed allocation, for whoever answers it (the OOM report, the
 * runtime's fallback). */
typedef struct hook_fail_s {
    core_oom_t oom; /* the last try's */
    hook_ask_t ask; /* the neighbours asked before it (n 0: none) */
} hook_fail_t;

/* core_malloc_site in private pool `pool` (0: the default pools) whatever
 * the calling thread's route, which is put back after. */
uintptr_t hook_malloc_in_pool(core_dev_t *d, int pool, size_t size, core_stream_t key, uint32_t site, core_try_t t,
                              core_oom_t *oom);
/* One try of the request on its allocator. */
static inline uintptr_t hook_try(const hook_req_t *r, core_try_t t, core_oom_t *oom)
{
    if (HOOK_LIKELY(r->pool == HOOK_POOL_ROUTE))
        return core_malloc_site(r->d, r->size, r->key, r->site, t, oom);
    return hook_malloc_in_pool(r->d, r->pool, r->size, r->key, r->site, t, oom);
}
/* After the first try (t) failed: the neighbours asked and the counted try,
 * or the failure counted as it stands; the address, or 0 with *f filled.
 * The request comes as a copy, so that no pointer to the caller's escapes. */
uintptr_t hook_alloc_failed(hook_req_t r, core_try_t t, hook_fail_t *f);
/* The allocation: the address, or 0 with *f filled for the caller's report.
 * Where the process yields, the first try's failure is not yet the
 * program's (CORE_TRY_UNCOUNTED). */
static inline uintptr_t hook_alloc(const hook_req_t *r, hook_fail_t *f)
{
    core_try_t t = atomic_load_explicit(&r->hd->yielding, memory_order_relaxed) ? CORE_TRY_UNCOUNTED : CORE_TRY_COUNTED;
    uintptr_t p = hook_try(r, t, &f->oom);
    /* copied field by field: the caller's request then stays in registers
     * on the hit path (gcc writes it to memory for a plain *r) */
    if (HOOK_UNLIKELY(!p))
        p = hook_alloc_failed((hook_req_t){r->hd, r->d, r->size, r->key, r->site, r->pool}, t, f);
    return p;
}

/* ------------------------------------------------------------------------
 * Diagnostics (diag.c): the OOM report, the exit summary, snapshots
 * ---------------------------------------------------------------------- */

/* Acts on the environment (env.h; the constructor): opens CUCACHE_LOG's
 * file, enables stacks, starts the signal thread, registers the exit
 * report; 0, or -1 with err naming the variable and the value. */
int hook_diag_start(char *err, size_t errlen);
/* The thread that writes a snapshot on SIGUSR1 (signal.c); 0, or -1 with err set. */
int hook_signal_start(char *err, size_t errlen);
/* A device's allocator opened: installs its event ring when snapshots are on. */
void hook_diag_dev_opened(int ordinal, core_dev_t *d);
/* Reports an allocation cucache could not serve: the full report on the
 * process's first failure, one line with the count afterwards; the first
 * also writes a snapshot when CUCACHE_SNAPSHOT_ON has oom. */
void hook_report_oom(const hook_dev_t *hd, const hook_fail_t *f);
/* nvml.c: the processes holding memory on hd's device, from NVML, into out
 * (out->procs from hostalloc, the caller frees it); when NVML cannot say,
 * out->unavailable points at why, written there.  Loads libnvidia-ml.so.1
 * at the first call: only for a report, never on the allocation path. */
struct st_gpu_procs_s;
void hook_nvml_procs(const hook_dev_t *hd, struct st_gpu_procs_s *out, char *why, size_t whylen);
/* NVML's form of the device's UUID ("GPU-..."); false when the driver
 * cannot say. */
bool hook_device_uuid(const hook_dev_t *hd, char out[48]);

/* ------------------------------------------------------------------------
 * Sharing a GPU with other processes (yield.c; stats/registry.h)
 * ---------------------------------------------------------------------- */

/* A device's allocator opened: enters the process in the GPU's registry
 * and starts the device's registry thread (CUCACHE_REGISTRY, fork
 * children excepted).  Called under open_lock. */
void hook_yield_dev_opened(hook_dev_t *hd);
/* An allocation on hd failed for want of device memory: asks the other
 * cucache processes on the GPU to give idle cache back and waits for their
 * answers (CUCACHE_YIELD, CUCACHE_YIELD_MS).  Their answer; n 0: no one
 * was asked (no neighbour, or the process is not in the registry). */
hook_ask_t hook_yield_ask(hook_dev_t *hd, const core_oom_t *oom);
/* The OOM report's view of the neighbours: marks the cucache processes
 * among out's rows with their figures and what they gave for this
 * request (its ask). */
void hook_yield_fill(const hook_dev_t *hd, const hook_ask_t *ask, struct st_gpu_procs_s *out);
/* state.c: runs fn on the device's allocator under open_lock, so that no
 * reset destroys it meanwhile; false when it has none. */
bool hook_dev_with_core(hook_dev_t *hd, void (*fn)(core_dev_t *d, void *arg), void *arg);
/* cucache could not serve an allocation and the runtime's own allocator
 * did: counted, and said once per process (the program saw no failure). */
void hook_fallback_served(const hook_dev_t *hd, const core_oom_t *oom);
/* Writes a snapshot of every device to the expanded template (device: %d,
 * -1 for all); why names the trigger in the line it prints.  0 or -1. */
int hook_snapshot(const char *tmpl, int device, const char *why);
/* CUCACHE_SNAPSHOT, or NULL. */
const char *hook_snapshot_template(void);
/* The memory summary of a device into sink (NULL: stderr, one block);
 * -1 when the device has no allocator. */
int hook_summary(int device, void (*sink)(void *ctx, const char *line), void *ctx);

#endif
