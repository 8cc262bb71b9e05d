/*
 * The caching allocator: what the interposer, the replay tool, the
 * benchmarks and the tests call.  It knows nothing of CUDA: it reaches the
 * device through a backend (core_backend_t) and names streams by opaque
 * keys.
 *
 *   core_dev_t *d = core_dev_new(&backend, device, &conf);
 *   uintptr_t p = core_malloc(d, size, stream, &oom); // 0: out of memory, oom says why
 *   core_free(d, p, CORE_FREE_FENCED, 0);             // or _NOW, _AFTER_STREAM
 *
 * Streams: a block belongs to the stream key it was allocated for and is
 * only handed out again for that key (PyTorch's rule).  Key 0 stands for
 * memory not tied to a stream (cudaMalloc): usable on every stream.  Real
 * streams, the legacy default stream included, need keys other than 0.
 *
 * Reuse safety: the caller asks for a free mode,
 *   CORE_FREE_NOW          no work can still use the block (the caller
 *                          synchronised, or the free is ordered on the
 *                          block's own stream): reusable at once;
 *   CORE_FREE_FENCED       pending behind the device-wide fence (the next
 *                          one recorded covers every free since the last);
 *   CORE_FREE_AFTER_STREAM pending behind an event recorded on `stream` now
 *                          (a free ordered on another stream than the
 *                          block's);
 * a plain free (no stream named) asks for what its reuse rule's row says
 * (rules.h: rule_plain_free).  Free modes as applied, the first row that
 * matches deciding:
 *   1. FENCED, the rule has the idle shortcut, the block has no other
 *      stream, no hold, and no work was submitted since it was handed out
 *      (backend work_epoch)                            -> NOW (counted idle)
 *   2. the block is held (core_hold: another process has it open)
 *                                   -> the held list, fenced when the hold ends
 *   3. the block was used on other streams (core_record_stream):
 *      AFTER_STREAM, not capturing, the backend can mark several streams
 *      (event_record_on)          -> AFTER_STREAM behind one marker on every
 *                                    stream it was used on and the free's
 *      otherwise                  -> FENCED
 *   4. AFTER_STREAM on the block's own stream           -> NOW
 *   5. AFTER_STREAM during a capture, or its event cannot be recorded
 *                                                       -> FENCED
 *   6. otherwise                                        -> as asked.
 * A FENCED block is reusable once its fence completed (as idle memory), or
 * after a synchronisation (core_synchronized), or, under a rule that hands
 * out, at once with the device ordered after its fence (hand_out.h: not
 * idle, its pages stay until a synchronisation); an AFTER_STREAM block
 * once its event completed, or, for an allocation on the block's own
 * stream, at once with that stream made to wait for the event on the
 * device (core/cross.h: not idle either).
 *
 * Thread safety: one lock per device; nothing global on the hit path.
 */
#ifndef CUCACHE_CORE_H
#define CUCACHE_CORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"

typedef struct core_dev_s core_dev_t;
typedef uintptr_t core_stream_t; /* opaque stream key; 0 = not stream-ordered */

/* ------------------------------------------------------------------------
 * The backend: how the core reaches a device
 * ---------------------------------------------------------------------- */

enum {
    CORE_OK = 0,
    CORE_ENOMEM = 1, /* the device has no room: the retry ladder goes on */
    CORE_EFAIL = 2,  /* any other failure: reported as is */
    CORE_ESTOP = 3,  /* fence_order: never again on this device (core_stop_hand_outs) */
};

typedef struct core_backend_s {
    void *ctx;
    /* Allocates a segment of `size` bytes on `device`. */
    int (*seg_alloc)(void *ctx, int device, size_t size, uintptr_t *addr);
    /* Returns a whole segment (never part of one) to the device. */
    void (*seg_free)(void *ctx, int device, uintptr_t addr, size_t size);
    /* The device's free and total bytes. */
    int (*mem_info)(void *ctx, int device, size_t *free_bytes, size_t *total);
    /* Records a marker after all work queued so far on `stream` (0: on every
     * stream of the device: the fence) and returns its handle. */
    int (*event_record)(void *ctx, int device, core_stream_t stream, uint64_t *event);
    /* One marker after all work queued so far on each of streams[0..n)
     * (keys other than 0): it completes when all of theirs has.  Frees of
     * blocks used on several streams (core_record_stream) wait behind it.
     * NULL: not possible (those frees wait for the fence). */
    int (*event_record_on)(void *ctx, int device, const core_stream_t *streams, size_t n, uint64_t *event);
    /* 1 when the marker's work has completed, 0 when not yet. */
    int (*event_query)(void *ctx, int device, uint64_t event);
    void (*event_wait)(void *ctx, int device, uint64_t event);
    void (*event_release)(void *ctx, int device, uint64_t event);
    /* Waits for all work on the device: CORE_OK, or CORE_EFAIL when it
     * could not (a capture began, no context): then nothing may be taken
     * as done. */
    int (*device_sync)(void *ctx, int device);
    /* 1 when nothing outside this process uses the freed block held with
     * `token` any more (core_hold), 0 while something may; NULL: holds
     * never end.  Called under the device lock, at the free and at polls. */
    int (*hold_query)(void *ctx, int device, uint64_t token);
    /* Virtual memory, for expandable segments (core/expand.c); all NULL, or
     * granularity returning 0, when the device has none (the setting is then
     * ignored, see core_expandable).  The granularity: the unit of mapping
     * (a power of two).  va_reserve: addresses only, `size` bytes aligned
     * to `align`.  map: backs [addr, addr+size) (inside a reservation,
     * unmapped) with new physical memory, one allocation per `page` bytes,
     * readable and writable by the device; all or nothing: on failure
     * nothing stays mapped (CORE_ENOMEM when the device is full).  unmap:
     * gives back the physical memory of [addr, addr+size), whole pages that
     * one or several map calls mapped; the caller made sure that no work
     * still uses them. */
    size_t (*vmm_granularity)(void *ctx, int device);
    int (*va_reserve)(void *ctx, int device, size_t size, size_t align, uintptr_t *addr);
    void (*va_release)(void *ctx, int device, uintptr_t addr, size_t size);
    int (*map)(void *ctx, int device, uintptr_t addr, size_t size, size_t page);
    void (*unmap)(void *ctx, int device, uintptr_t addr, size_t size);
    /* Shared pages (expandable_share_pages): maps at [addr, addr+size)
     * (unmapped) the physical memory already mapped at [from, from+size),
     * one page that one map call mapped, so that both addresses reach the
     * same bytes; no new memory.  unmap of [addr, addr+size) undoes it and
     * leaves the memory to the first mapping.  NULL: not supported (the
     * setting is then ignored). */
    int (*map_alias)(void *ctx, int device, uintptr_t addr, uintptr_t from, size_t size);
    /* Whether work was submitted, by anyone, since a block was handed
     * out: an epoch that only grows.  The core makes it odd as it hands a
     * block out (core_epoch_note) and records that value in the block;
     * before each call that may put work using device memory on a stream,
     * the backend moves an odd epoch on to the next even value (a
     * compare-and-swap from the value it read; an even epoch it leaves
     * alone, so submissions that follow no hand-out write nothing).
     * CORE_EPOCH_UNSEEN is set for good once a submission may have gone
     * unseen.  NULL: not known.  Under a rule with the idle shortcut a
     * fenced free of a block handed out at the epoch it still reads is
     * reusable at once: no work can name it. */
    _Atomic uint64_t *work_epoch;
    /* Orders, on the device, everything submitted from now on after the
     * fence (an event_record on stream 0): every stream that could use the
     * device's memory, and those created later until the fence completes,
     * waits for it.  The fence's blocks can then be handed out at once
     * (a rule that hands out; hand_out.h).  first_alloc: the number the next
     * allocation will get (core_ptr_info_t.id's, (id & ~CORE_ID_TAG) >> 6):
     * only blocks from that one on can hold memory handed out now, so only
     * they need the host to wait for the fence before something outside
     * the device's streams reaches them.  CORE_OK, CORE_EFAIL when it
     * cannot now (a capture, an error: nothing changed), CORE_ESTOP when it
     * never will (something the ordering does not reach may touch the
     * device's memory: the core stops asking, as after
     * core_stop_hand_outs).  NULL: not possible. */
    int (*fence_order)(void *ctx, int device, uint64_t fence, uint64_t first_alloc);
    /* Makes `stream` (a key other than 0) wait, on the device, for the
     * marker `event` (an event_record's): its work submitted from now on
     * runs after the marker's.  A pending free of the stream's own blocks
     * can then serve it at once (core/cross.h).  CORE_OK, or CORE_EFAIL when
     * it cannot now (the stream is capturing, or is one this thread cannot
     * name): nothing changed.  NULL: not possible. */
    int (*stream_wait)(void *ctx, int device, core_stream_t stream, uint64_t event);
    /* The reuse policies (CORE_REUSE_* bits) the program left on for the
     * pool cucache stands in for (cudaMallocAsync's); asked on the slow
     * path, while frees wait behind other streams' events.  NULL: CUDA's
     * defaults (CORE_REUSE_ALL). */
    unsigned (*reuse_policy)(void *ctx, int device);
} core_backend_t;

/* CUDA's reuse policies of a memory pool (cudaMemPoolReuse*), as bits;
 * what cucache does under each: core/cross.h, one row each. */
enum {
    CORE_REUSE_FOLLOW_EVENTS = 1, /* cudaMemPoolReuseFollowEventDependencies */
    CORE_REUSE_OPPORTUNISTIC = 2, /* cudaMemPoolReuseAllowOpportunistic */
    CORE_REUSE_INTERNAL_DEPS = 4, /* cudaMemPoolReuseAllowInternalDependencies */
    CORE_REUSE_ALL = 7,           /* CUDA's default */
};

#define CORE_EPOCH_UNSEEN ((uint64_t)1 << 63)

/* The epoch a block handed out now records: work_epoch made odd (one
 * atomic operation only when it was even, that is when a submission came
 * since the last hand-out). */
static inline uint64_t core_epoch_note(_Atomic uint64_t *epoch)
{
    uint64_t e = atomic_load_explicit(epoch, memory_order_relaxed);
    if (!(e & 1))
        e = atomic_fetch_or_explicit(epoch, 1, memory_order_relaxed) | 1;
    return e;
}

/* ------------------------------------------------------------------------
 * Devices, allocation and free
 * ---------------------------------------------------------------------- */

/* One allocator per device; conf is copied. NULL when out of host memory. */
core_dev_t *core_dev_new(const core_backend_t *backend, int device, const conf_t *conf);
/* Promises that only the calling thread will ever use d (a what-if
 * replay's device): its lock is no longer taken. */
void core_dev_solo(core_dev_t *d);
/* Stamps each allocation from now on with its time (core_block_info_t.born;
 * a coarse clock read per allocation), for the exit leak report. */
void core_set_birth_times(core_dev_t *d, bool on);
/* Returns every segment to the device (after waiting for pending frees) and
 * frees the state.  Live allocations are dropped. */
void core_dev_destroy(core_dev_t *d);

typedef enum core_free_e {
    CORE_FREE_NOW,
    CORE_FREE_FENCED,
    CORE_FREE_AFTER_STREAM,
} core_free_t;

/* What an out-of-memory failure knows, for the OOM report. */
typedef struct core_oom_s {
    size_t requested;  /* bytes asked for */
    uint32_t site;     /* its call site (core_malloc_site; 0: none) */
    size_t rounded;    /* after rounding */
    size_t alloc_size; /* segment size that was needed */
    int pool_id;       /* 0: default pools */
    bool limit_hit;    /* a limit (limit_mb, fraction) refused it, not the device */
    size_t limit;      /* the allowed bytes (SIZE_MAX: none) */
    size_t device_free, device_total;
    size_t allocated, reserved; /* this allocator's bytes */
    size_t largest_free;        /* largest free block in the cache */
    size_t pending;             /* bytes still waiting on fences or events */
    int backend_error;          /* CORE_ENOMEM or CORE_EFAIL */
    size_t expandable_va;       /* addresses reserved by expandable segments (reserved counts their mapped bytes) */
    bool history;               /* the history holds this failure (core_set_history): ... */
    uint64_t history_pos;       /* ... as record number history_pos (core_whatif) */
} core_oom_t;

/* Allocates `size` bytes (0 is served as the minimum block) for `stream`.
 * Returns the device address, or 0 with *oom filled (oom may be NULL); the
 * failure is counted (CORE_TRY_COUNTED). */
uintptr_t core_malloc(core_dev_t *d, size_t size, core_stream_t stream, core_oom_t *oom);

/* Whether a failed allocation is the program's, as its caller says. */
typedef enum core_try_e {
    CORE_TRY_COUNTED,   /* its failure counts: num_ooms, the OOM event, the history */
    CORE_TRY_UNCOUNTED, /* the caller may try again: *oom filled (oom not NULL), nothing counted */
} core_try_t;

/* core_malloc, remembering an opaque call site for the block (an interned
 * call stack, stats/stack.c): it comes back in core_block_info_t.site and
 * in the observer's events, the OOM event included; a segment this
 * allocation makes (or pages it maps) keeps it too (core_seg_info_t.site,
 * the segment events).  `t` says whether a failure counts. */
uintptr_t core_malloc_site(core_dev_t *d, size_t size, core_stream_t stream, uint32_t site, core_try_t t,
                           core_oom_t *oom);
/* The failure of a CORE_TRY_UNCOUNTED try, described by *oom (of `stream`,
 * at `site`), stands: counted as a CORE_TRY_COUNTED try would have counted
 * it (num_ooms, the OOM event, the history; oom->history set). */
void core_count_failure(core_dev_t *d, core_oom_t *oom, core_stream_t stream, uint32_t site);

enum {
    CORE_FREED = 0,
    CORE_NOT_MINE = 1, /* no live allocation at that address */
};

/* Frees the allocation at addr.  `stream` matters for CORE_FREE_AFTER_STREAM.
 * CORE_NOT_MINE: the address is not a live allocation of this device (a
 * foreign pointer, an interior pointer or a double free); nothing changed. */
int core_free(core_dev_t *d, uintptr_t addr, core_free_t how, core_stream_t stream);

/* The live allocation containing addr: its base and requested size. */
bool core_lookup(core_dev_t *d, uintptr_t addr, uintptr_t *base, size_t *size, core_stream_t *stream);

/* What an address is to the allocator, for the calls that describe memory
 * (pointer attributes, IPC). */
typedef enum core_where_e {
    CORE_WHERE_NONE = 0, /* not in any segment of the device: foreign */
    CORE_WHERE_LIVE,     /* inside a live allocation's requested bytes */
    CORE_WHERE_DEAD,     /* inside a segment but in no live allocation: freed,
                          * pending, cached, or a block's rounding */
} core_where_t;

/* Every allocation's id has this bit set: ids never collide with a
 * driver's small buffer ids. */
#define CORE_ID_TAG ((uint64_t)1 << 62)

typedef struct core_ptr_info_s {
    core_where_t where;
    uintptr_t base;       /* LIVE: the allocation's address */
    size_t requested;     /* LIVE: bytes asked for */
    size_t size;          /* LIVE: the block's bytes (rounded) */
    core_stream_t stream; /* LIVE: its stream key (0: not stream-ordered) */
    uint64_t id;          /* LIVE: unique per allocation in the process, never reused */
    uintptr_t seg_base;   /* LIVE, DEAD: the segment holding it */
    size_t seg_size;
} core_ptr_info_t;

/* Fills *out for addr; returns out->where.  Walks the segments unless addr
 * is an allocation's first byte. */
core_where_t core_describe(core_dev_t *d, uintptr_t addr, core_ptr_info_t *out);

/* Another process uses the live allocation at addr (IPC): once the program
 * frees it, it stays pending, whatever synchronisation happens, until the
 * backend's hold_query(token) says the hold is over; then it waits for a
 * fence like a fenced free.  token != 0.  CORE_FREED or CORE_NOT_MINE. */
int core_hold(core_dev_t *d, uintptr_t addr, uint64_t token);

/* record_stream: the allocation is also used on `stream`; its free waits
 * for an event on that stream too. */
int core_record_stream(core_dev_t *d, uintptr_t addr, core_stream_t stream);

/* Whether addr lies inside one of the device's segments (live or not): a
 * free the core refused there is a double free or a bad pointer, not a
 * foreign one.  Walks the segments: for error paths. */
bool core_owns(core_dev_t *d, uintptr_t addr);

/* An allocation this core failed (core_malloc returned 0) was served by
 * another allocator (the CUDA runtime's own): the program saw no failure,
 * so num_ooms gives it back and num_fallback_served counts it. */
void core_fallback_served(core_dev_t *d);

/* The program synchronised the device: every pending block is reusable. */
void core_synchronized(core_dev_t *d);

/* Some work completed (a stream or event synchronisation): pending blocks
 * whose fence or event completed become reusable. */
void core_poll(core_dev_t *d);

/* Records the fence of every free made so far, now.  Before a device
 * synchronisation: once it returned, core_poll finds that fence completed
 * and releases exactly the frees made before it began (core_synchronized
 * would also release frees other threads made while it ran). */
void core_fence(core_dev_t *d);

/* A stream capture began (true) or the last one ended (false).  While
 * capturing, the core makes no backend call that would be illegal in
 * global capture mode: no fence or event is recorded, queried or waited
 * for, the device is not synchronised, and no cached segment is released;
 * a miss may still allocate a new segment.  Frees stay pending until the
 * capture ended and a fence completed. */
void core_set_capturing(core_dev_t *d, bool on);

/* The streams the program's work runs on, now n: those it created on the
 * device and has not destroyed (its primary context's, blocking or not),
 * and the legacy default stream once the program's work was seen there
 * (with the per-thread default streams it waits for) beside one of them.
 * While fewer than two, the program's work runs in one stream's order, or
 * on the default streams, which every fence already orders (a fence
 * records an event on the legacy stream, which waits for them and which
 * their later work waits for): handing out frees behind fences with the
 * device ordered after them then holds back no work that could have run
 * beside it, and a rule that hands out hands out any that could serve a
 * hit, not only once they hold a share of the cache (core/hand_out.h).
 * Unknown counts as two (a replay of a trace that does not say). */
void core_set_streams(core_dev_t *d, unsigned n);

/* Stops handing out frees behind fences on the device for good
 * (a rule that hands out): something the device's ordering does not reach may now
 * touch its memory (a second CUDA context in the process, whose streams do
 * not wait for this device's fences; a CPU that reads device memory
 * coherently).  The frees already handed out are the caller's to wait for;
 * the backend's fence_order is what refuses at once, this spares the core
 * the attempts. */
void core_stop_hand_outs(core_dev_t *d);

/* Releases every free segment to the device (pool_id < 0: all pools). */
void core_empty_cache(core_dev_t *d, int pool_id);

/* Another process on the device needs memory: gives back up to `want`
 * bytes (at least one segment or page when any is free) of what no queued
 * work can touch, without waiting for anything: the frees so far are
 * fenced, the fences and events that completed are collected, then whole
 * free segments of the default pools (and free pages of expandable ones)
 * go back, the largest first.  The device lock is taken once per segment,
 * so the program's own calls wait for one release at most.  Nothing while
 * capturing.  Returns the bytes given back (counted in num_yields_given,
 * yield_bytes_given when more than 0). */
size_t core_yield(core_dev_t *d, size_t want);
/* Other processes gave `bytes` back for a failed allocation of this device
 * that is being retried (num_yields_received, yield_bytes_received). */
void core_note_yield_received(core_dev_t *d, size_t bytes);

/* ------------------------------------------------------------------------
 * Private pools (CUDA graph capture, MemPool)
 * ---------------------------------------------------------------------- */

/* Creates a private pool and returns its id (> 0), or -1. */
int core_pool_create(core_dev_t *d);
/* Routes the calling thread's allocations on this device to pool_id (0:
 * back to the default pools). */
int core_pool_use(core_dev_t *d, int pool_id);
/* The pool the calling thread's allocations on this device go to (0: the
 * default pools). */
int core_pool_current(core_dev_t *d);
/* Destroys the pool: its free segments are released now, the rest as their
 * blocks are freed. */
int core_pool_destroy(core_dev_t *d, int pool_id);

/* ------------------------------------------------------------------------
 * Memory information
 * ---------------------------------------------------------------------- */

typedef struct core_usage_s {
    size_t allocated;   /* bytes in live allocations (rounded) */
    size_t reserved;    /* bytes of segments held from the device */
    size_t cached_free; /* reserved bytes free for reuse now */
    size_t pending;     /* bytes freed but waiting on fences or events */
    size_t largest_free;
    size_t allowed;    /* the limit (limit_mb, per_process_memory_fraction); SIZE_MAX: none */
    size_t releasable; /* bytes of whole free segments the cache would give back now (0 while capturing) */
    /* bytes of segments whose every block is free or pending and none held:
     * what the cache gives back once pending frees complete, as core_malloc
     * waits for them before an OOM (0 while capturing); >= releasable */
    size_t reclaimable;
    size_t held; /* bytes freed but held by another process (core_hold) */
} core_usage_t;

void core_usage(core_dev_t *d, core_usage_t *u);

/* The largest request this allocator could serve from a new segment of at
 * most `avail` bytes, after its rounding and segment sizing (a 5 MiB
 * request takes a 20 MiB segment): what cudaMemGetInfo may call free. */
size_t core_fit(core_dev_t *d, size_t avail);

/* The device's segments and blocks at one instant, for OOM reports and
 * snapshots (stats/).  Segments are in address order; each one's blocks are
 * blocks[first_block .. first_block + nblocks), in address order. */
typedef enum core_block_state_e {
    CORE_BLOCK_FREE = 1,      /* cached, reusable */
    CORE_BLOCK_ALLOCATED = 2, /* live: the program holds it */
    CORE_BLOCK_PENDING = 3,   /* freed, waiting for queued work (a fence or event) */
} core_block_state_t;

typedef struct core_block_info_s {
    uintptr_t addr;
    size_t size;      /* bytes, rounded */
    size_t requested; /* bytes the program asked for (ALLOCATED, PENDING); 0 when FREE */
    core_block_state_t state;
    uint64_t number; /* ALLOCATED, PENDING: the allocation's number on the device (1, 2, ... in order); 0 when FREE */
    uint32_t site;   /* ALLOCATED, PENDING: the call site given to core_malloc_site (0: none) */
    uint32_t born;   /* ALLOCATED, PENDING: ms after the device's state was made + 1 (core_set_birth_times); 0:
                      * not stamped */
} core_block_info_t;

typedef struct core_seg_info_s {
    uintptr_t addr;
    size_t size;
    core_stream_t stream;
    int pool_id;   /* 0: the default pools; > 0: a private pool */
    bool small;    /* the small-request pool */
    bool oversize; /* size >= max_split_size */
    bool expandable; /* one mapped run of an expandable segment (each run is listed as a segment, as PyTorch does) */
    uint32_t site;   /* the call site of the allocation that created the segment (core_malloc_site; 0: none) */
    size_t first_block, nblocks;
} core_seg_info_t;

typedef struct core_layout_s {
    int device;
    core_seg_info_t *segs;
    size_t nsegs;
    core_block_info_t *blocks;
    size_t nblocks;
} core_layout_t;

/* Fills *out with a copy of the device's segments and blocks (host memory
 * from hostalloc; release with core_layout_free).  When under_lock is not
 * NULL it is called while the device lock is still held, so that what it
 * copies (an event ring fed by the observer) is consistent with the layout;
 * it must not call back into the core.  0, or -1 when out of host memory
 * (*out is then empty). */
int core_layout(core_dev_t *d, core_layout_t *out, void (*under_lock)(void *ctx), void *ctx);
void core_layout_free(core_layout_t *l);

/* ------------------------------------------------------------------------
 * History and what-if (journal.c, whatif.c)
 * ---------------------------------------------------------------------- */

/* Keeps the device's last `capacity` allocator calls (rounded up to a power
 * of two, at least 1024; 24 bytes each, allocated at the first call) for
 * core_whatif; 0 keeps none (the default).  Forgets what was kept. */
void core_set_history(core_dev_t *d, size_t capacity);

enum {
    CORE_WHATIF_MAX = 24,  /* rows: the current settings and the candidates */
    CORE_WHATIF_NAMED = 3, /* settings a report names, lowest peak first (every setting that fits on an idle
                            * device is checked on a busy one) */
    CORE_WHATIF_RAN = 0,
    CORE_WHATIF_NO_HISTORY = 1, /* no history, or the failure's record is gone */
    CORE_WHATIF_NO_MEMORY = 2,  /* host memory or a thread could not be had */
};

typedef struct core_whatif_row_s {
    char change[64];      /* the setting tried on top of the current ones ("max_split_size_mb:64"); "": current */
    bool tried;           /* replayed to the end (false: the time budget ran out first) */
    bool fits;            /* every allocation the program got was served, and so was the failed request */
    uint64_t ooms;        /* allocations not served (of those the program got, and the request) */
    uint64_t first_oom;   /* the first: 0 in the prelude, else the window's record number + 1 */
    size_t peak_reserved; /* the replay's peak reserved bytes */
    bool unchecked;       /* fit on the idle device, but the time budget ran out before the busy one was
                           * checked (not claimed: fits is false) */
    bool same_as_current; /* not replayed: it differs from the current settings only in a max_split_size that
                           * no segment of their replay reached, so its replay is theirs step for step (it
                           * fails where they failed; the other fields are theirs) */
} core_whatif_row_t;

typedef struct core_whatif_s {
    int status;           /* CORE_WHATIF_* */
    uint64_t events;      /* calls replayed: the window, the failed request its last */
    size_t prelude;       /* allocations live when the window began ... */
    size_t prelude_bytes; /* ... and their requested bytes */
    bool whole;           /* the window is the device's whole history */
    size_t capacity;      /* the memory the replays had (the limit when lower: limited) */
    bool limited;
    size_t live_bytes; /* requested bytes live just before the request */
    size_t request;    /* the request's bytes */
    bool reproduced;   /* the current settings failed in the replay too (else no setting is judged) */
    bool reproduced_busy; /* ... only on a busy device (fences complete only when waited for): the run's
                           * failure came from work still queued */
    bool beyond;       /* live_bytes + request > capacity: no setting can serve it, nothing was replayed */
    bool cut_short;    /* the time budget ran out: rows not tried */
    double seconds;
    core_whatif_row_t rows[CORE_WHATIF_MAX]; /* rows[0]: the current settings */
    size_t nrows;
} core_whatif_t;

typedef struct core_whatif_opts_s {
    size_t capacity; /* the bytes the allocator could have held (device free + its reserved, at the failure) */
    size_t total;    /* the device's total memory (per_process_memory_fraction counts against it) */
    double budget_s; /* wall time for all the replays */
    int threads;     /* replays at once (1..16) */
    const char *conf_text; /* CUCACHE_CONF as the user wrote it (NULL: none): each candidate is this text with
                            * the candidate's items after it, as the hint prints it (stats/hint.c conf_with) */
} core_whatif_opts_t;

/* The candidate settings tried, each on top of the current ones
 * ("expandable_segments:true", ...); NULL past the last. */
const char *core_whatif_candidate(size_t i);

/* Replays the history up to the failure `oom` describes (oom->history)
 * under the current settings and each candidate setting; fills *out and
 * returns out->status.  Never holds the device lock while replaying. */
int core_whatif(core_dev_t *d, const core_oom_t *oom, const core_whatif_opts_t *o, core_whatif_t *out);

/* The device's configuration (a copy). */
void core_conf(core_dev_t *d, conf_t *out);

/* per_process_memory_fraction at run time (torch.cuda.
 * set_per_process_memory_fraction): more than 0, at most 1; the bytes the
 * allocator may hold follow at once (blocks already held stay).  0, or -1
 * for a fraction out of range. */
int core_set_memory_fraction(core_dev_t *d, double fraction);

/* Whether the device's segments are expandable: expandable_segments was
 * asked for and the backend has virtual memory. */
bool core_expandable(core_dev_t *d);

/* Calls fn for each range of mapped pages of the device's expandable
 * segments (each a run of whole pages that map or map_alias calls mapped,
 * as long as no unmapped page lies inside it), under the device lock, so
 * that no page is mapped or unmapped meanwhile: fn may call the backend,
 * never the core.  For a backend that changes who may reach the mapped
 * memory (peer access). */
void core_each_mapped(core_dev_t *d, void (*fn)(void *arg, uintptr_t addr, size_t size), void *arg);

#endif
