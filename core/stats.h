/*
 * The allocator's counters, declared once.  The X-macro lists drive the
 * struct, the flat key/value listing with PyTorch's key names
 * (torch.cuda.memory_stats()), and whatever stats/ prints from them: adding
 * a statistic is one line here.
 *
 * A stat array has one entry per pool class (all, small, large) and, like
 * PyTorch's Stat, a current value, its peak, and the cumulative amounts
 * added (allocated) and removed (freed).
 */
#ifndef CUCACHE_CORE_STATS_H
#define CUCACHE_CORE_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"

/* name: PyTorch's key */
#define CORE_STAT_ARRAYS(X)                                                                                            \
    X(allocation)           /* live allocations */                                                                     \
    X(segment)              /* segments held from the device */                                                        \
    X(active)               /* blocks allocated or still waiting on a fence/event */                                   \
    X(inactive_split)       /* free blocks inside partly used segments */                                              \
    X(allocated_bytes)      /* bytes of live allocations (rounded) */                                                  \
    X(reserved_bytes)       /* bytes of segments */                                                                    \
    X(active_bytes)         /* bytes of active blocks */                                                               \
    X(inactive_split_bytes) /* bytes of inactive split blocks (cannot be released) */                                  \
    X(requested_bytes)      /* bytes the program asked for */

#define CORE_STAT_PLAIN(X)                                                                                             \
    X(oversize_allocations) /* live allocations of at least max_split_size */                                          \
    X(oversize_segments)    /* segments of at least max_split_size */

#define CORE_STAT_COUNTERS(X)                                                                                           \
    X(num_alloc_retries)   /* allocations that freed the whole cache and retried */                                     \
    X(num_ooms)            /* allocations that failed (as the program saw it: less num_fallback_served) */              \
    X(num_fallback_served) /* allocations the core could not serve that another allocator did (core_fallback_served) */ \
    X(num_sync_all_streams) /* full waits for every pending free */                                                     \
    X(num_device_alloc)     /* segments asked from the device */                                                        \
    X(num_device_free)      /* segments returned to the device */                                                       \
    X(num_cache_hits)       /* allocations served from cached blocks */                                                 \
    X(num_fences)           /* fences recorded (each shared by every free since the last) */                            \
    X(num_idle_frees)       /* plain frees reusable at once: no work submitted since the block was handed out */       \
    X(num_fence_hand_outs)   /* fences whose blocks were handed out with the device ordered after them, not waited */  \
    X(num_hand_out_stops)   /* 1 once hand-outs stopped for good (a second CUDA context, a coherent CPU) */           \
    X(num_shared_pages)     /* pages mapped a second time to start a request (expandable_share_pages) */           \
    X(num_fence_waits)      /* times an allocation waited for a fence or event */                                       \
    X(fence_wait_ns)        /* time spent in those waits */                                                             \
    X(num_yields_given)     /* times another process's request made this cache give memory back (core_yield) */        \
    X(yield_bytes_given)    /* bytes given back so */                                                                   \
    X(num_yields_received)  /* failed allocations retried after other processes gave memory back */                     \
    X(yield_bytes_received) /* bytes they gave back for them (core_note_yield_received) */

enum { CORE_POOL_ALL = 0, CORE_POOL_SMALL = 1, CORE_POOL_LARGE = 2, CORE_POOL_CLASSES = 3 };

typedef struct core_stat_s {
    int64_t current;    /* now */
    int64_t peak;       /* highest current since start or the last peak reset */
    uint64_t allocated; /* sum of increases */
    uint64_t freed;     /* sum of decreases */
} core_stat_t;

typedef struct core_stats_s {
#define CORE_STAT_FIELD_ARRAY(name) core_stat_t name[CORE_POOL_CLASSES];
    CORE_STAT_ARRAYS(CORE_STAT_FIELD_ARRAY)
#undef CORE_STAT_FIELD_ARRAY
#define CORE_STAT_FIELD_PLAIN(name) core_stat_t name;
    CORE_STAT_PLAIN(CORE_STAT_FIELD_PLAIN)
#undef CORE_STAT_FIELD_PLAIN
#define CORE_STAT_FIELD_COUNTER(name) uint64_t name;
    CORE_STAT_COUNTERS(CORE_STAT_FIELD_COUNTER)
#undef CORE_STAT_FIELD_COUNTER
    uint64_t max_split_size; /* the configured value (SIZE_MAX: unlimited) */
} core_stats_t;

/* A copy of the device's counters. */
void core_stats_get(core_dev_t *d, core_stats_t *out);
/* peak := current for every stat (torch.cuda.reset_peak_memory_stats). */
void core_stats_reset_peaks(core_dev_t *d);
/* Zeroes allocated/freed and the counters (reset_accumulated_memory_stats). */
void core_stats_reset_accumulated(core_dev_t *d);
/* Calls fn once per key in PyTorch's flat naming ("allocation.all.current",
 * "num_ooms", ...).  Never allocates. */
void core_stats_foreach(const core_stats_t *s, void (*fn)(void *ctx, const char *key, int64_t value), void *ctx);

/* ------------------------------------------------------------------------
 * Events, for traces and snapshots (stats/)
 * ---------------------------------------------------------------------- */

typedef enum core_event_kind_e {
    CORE_EV_ALLOC,
    CORE_EV_FREE_REQUESTED,
    CORE_EV_FREE_COMPLETED,
    CORE_EV_SEGMENT_ALLOC,
    CORE_EV_SEGMENT_FREE,
    CORE_EV_OOM,
    CORE_EV_SEGMENT_MAP,   /* expandable segment: pages mapped (addr, size) */
    CORE_EV_SEGMENT_UNMAP, /* expandable segment: pages given back */
    /* shared pages (expandable_share_pages): bytes of a page that move
     * between its two mappings, no memory mapped or given back.  When a
     * page is shared its lender's piece is PIECE_OUT (addr: the lender's
     * address) and the borrower's PIECE_IN (the second mapping's); when
     * the sharing ends, the other way round. */
    CORE_EV_PIECE_IN,
    CORE_EV_PIECE_OUT,
} core_event_kind_t;

typedef struct core_event_s {
    core_event_kind_t kind;
    int device;
    int pool_id;
    uintptr_t addr; /* block or segment address (0 for OOM) */
    size_t size;    /* block, segment or requested size */
    core_stream_t stream;
    uint32_t site; /* ALLOC, FREE_*: the allocation's call site; OOM: the failed call's; SEGMENT_ALLOC, SEGMENT_FREE:
                    * the site of the allocation that created the segment; SEGMENT_MAP: of the one that mapped
                    * the pages (0: none) */
} core_event_t;

typedef void (*core_observer_fn)(void *ctx, const core_event_t *e);

/* Installs (or with fn NULL removes) the device's event observer.  Called
 * with the device lock held: it must not call back into the core. */
void core_set_observer(core_dev_t *d, core_observer_fn fn, void *ctx);

#endif
