/*
 * The caching allocator's internal types: a map.
 *
 * A device (core_dev_t) holds segments, each one allocation from the
 * backend.  A segment is tiled by blocks (block_t), chained in address order
 * through prev/next, so a block's neighbours are found in O(1).  Blocks of
 * different segments are never merged: the device frees only whole
 * segments.
 *
 * Each block is in exactly one state:
 *   FREE      in its pool's free bins for its stream (pool_bins_t): in the
 *             tree of its size class, ordered by (size, address);
 *   UNMAPPED  addresses of an expandable segment with no memory behind them
 *             (core/expand.c): whole pages, in no tree or list;
 *   ALLOCATED handed to the program; in the device's address map;
 *   PENDING   freed by the program but maybe still in use by queued work:
 *             on a pending list until its fence or event completes, or
 *             until a rule that hands out orders the device after its fence
 *             (hand_out.h), or its own stream is made to wait for its event
 *             (cross.h), then FREE; or still used by another process
 *             (core_hold): on the held list until the backend says the hold
 *             is over, then behind a fence;
 *   LENT      a shared page's piece lent to another mapping of the page,
 *   FOREIGN   and in that mapping, its bytes that are not the borrower's
 *             (core/share.c; expand.h, "Shared pages"): in no tree or list.
 *
 * A pool (pool_t) is its free bins, one pool_bins_t per stream that has
 * segments in it, plus its class (small or large) and the private pool
 * (ppool_t) it belongs to; the default pools are private pool 0's.  Blocks
 * never move between pools: a segment is created for one pool and all its
 * blocks stay there.  A stream's bins are size classes (POOL_BINS, finer
 * than powers of two), each a tree ordered by (size, address), and a
 * bitmap of the classes that hold blocks: the best fit (smallest size,
 * then lowest address) is the first block at or above the request in its
 * class, or the first block of the next class the bitmap names.
 *
 * Invariants (core_check re-derives every one):
 *   - a segment's blocks tile it exactly: first->addr == seg->addr, each
 *     next->addr == addr + size, the sizes sum to seg->size;
 *   - no two address-adjacent blocks of a segment are both FREE, or both
 *     UNMAPPED;
 *   - UNMAPPED blocks exist only in expandable segments and start and end
 *     on their segment's page boundaries; an expandable segment's mapped
 *     bytes and the pages it maps a second time (aliased) are the sum of
 *     its other blocks (the mapped bytes counted as reserved: its addresses
 *     are not, nor is it counted as a segment, as in PyTorch);
 *   - a LENT and a FOREIGN block point at each other, both blocks of their
 *     segments, and split one page between them;
 *   - a FREE block is in its pool's bins for its stream exactly once, in
 *     the tree of its size class (pool_bin_of), and no other block is; a
 *     class's bit is set when its tree holds a block; a segment points at
 *     its pool's bins for its stream, and a bins' segs counts those
 *     segments;
 *   - an ALLOCATED block is in the address map exactly once, no other is;
 *   - a PENDING block is on exactly one pending list (a fence batch, the
 *     open batch, the event list or the held list); a held block has a
 *     hold;
 *   - the counters of pending frees: each batch's bytes are its blocks';
 *     open.bytes is the open batch's; fenced_bytes is the open and the
 *     closed batches' (what a hand-out can take); pending_bytes is every
 *     pending list's (held and event-pending blocks too), and equals the
 *     PENDING blocks' bytes in the segments;
 *   - LENT and FOREIGN blocks are as many;
 *   - the address map's count is the ALLOCATED blocks';
 *   - the stats (PyTorch's gauges: allocation, segment, active,
 *     inactive_split and their bytes, per pool class) equal the sums
 *     recomputed from the blocks; a gauge's all entry keeps only its
 *     peak (at least the classes' summed current), the rest being the
 *     classes' sums (stat_all_current, stats_sum_all).
 * Not re-derivable from the state alone: a block's idle flag (whether
 * queued work may still use its memory) depends on the device's history;
 * test_core_random's shadow model follows it instead.
 *
 * Files, and the prefix of what each shares with the others (declared
 * below, file by file; the public core_* API is core.h's):
 *   pool.c      pool_ block_ map_  sizes and rounding, free bins, block
 *                                  split and merge, block structs, the
 *                                  address map
 *   hit.h       pool_take hit_     the hit path's inner steps, inline in
 *                                  alloc.c and pool.c: taking a free block,
 *                                  the address map, the alloc/free counters
 *   alloc.c     seg_ (core_*)      segments, the hit path, the retry
 *                                  ladder, garbage collection, the free
 *                                  modes, threads' routes to private pools
 *   device.c    ppool_ (core_*)    devices made and destroyed, settings
 *                                  while running, empty cache, private pools
 *   query.c     (core_*)           what a pointer is, holds, recorded
 *                                  streams, usage and fit
 *   expand.c    exp_               expandable segments (expand.h): growth
 *   share.c     share_             expandable segments: shared pages
 *   unmap.c     exp_               expandable segments: giving pages back
 *   pending.c   pend_              frees behind fences, events and holds
 *   hand_out.c  hand_out_          frees behind fences handed out early
 *                                  (hand_out.h: when, how much, the stop)
 *   cross.c     cross_             frees on another stream reused early, the
 *                                  stream waiting on the device; CUDA's
 *                                  reuse policies, one row each (cross.h)
 *   rules.c     (core_rules)       the reuse rules, one row each (rules.h)
 *   stream_key.h (core_stream_key) the key of a stream: one encoding for
 *                                  the interposer and the replay
 *   journal.c   jr_                the history of the calls (what-if, trace)
 *   whatif.c    (core_whatif_*)    replaying the history under other settings
 *   stats.c     stats_ stat_       PyTorch's counters
 *   layout.c    (core_layout)      the snapshot's view of segments and blocks
 *   check.c     (core_check)       re-derives the invariants above
 *   conf.c      conf_              CUCACHE_CONF: the key table, parsing, help
 *   conf_read.c conf_              its tokenizer and value readers (conf_read.h);
 *                                  conf_show, how every layer shows a refused value
 *   backend_mem.c mem_backend_     an in-process device for tests, the
 *                                  replay and the what-if
 *   rbtree.c    rb_                the free bins' red-black tree
 *   hashtab.c   ht_                the one hash table (uint64 -> uint64)
 *   vec.c       vec_               the one growable array
 *   hostalloc.c hostalloc_         metadata memory (hidden jemalloc arena)
 *   proc.c      proc_              processes as /proc tells them (proc.h), for
 *                                  the tables several processes share
 */
#ifndef CUCACHE_CORE_TYPES_H
#define CUCACHE_CORE_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "hashtab.h"
#include "rbtree.h"
#include "rules.h"
#include "stats.h"

typedef struct block_s block_t;
typedef struct seg_s seg_t;
typedef struct pool_s pool_t;
typedef struct ppool_s ppool_t;
typedef struct pool_bins_s pool_bins_t;

typedef enum block_state_e {
    BLOCK_FREE = 1,
    BLOCK_ALLOCATED,
    BLOCK_PENDING,
    BLOCK_UNMAPPED,
    /* expandable_share_pages (core/share.c; expand.h, "Shared pages"): the free tail
     * or head of a page, lent to the block of another mapping of the page
     * (never free, allocated or unmapped here) ... */
    BLOCK_LENT,
    /* ... and, in that other mapping, the rest of the page: the lender's
     * bytes, never used through this mapping.  Each points at the other
     * (alias). */
    BLOCK_FOREIGN,
} block_state_t;

struct block_s {
    uintptr_t addr;       /* device address of the first byte */
    size_t size;          /* bytes; a multiple of min_block_size */
    size_t requested;     /* bytes the program asked for (ALLOCATED/PENDING), else 0 */
    block_t *prev, *next; /* address neighbours in the segment; NULL at the ends */
    seg_t *seg;           /* owning segment */
    pool_t *pool;         /* owning pool (the segment's) */
    core_stream_t stream; /* stream key (the segment's) */
    block_state_t state;
    rb_node_t node;      /* FREE: in seg->bins->bin[pool_bin_of(size)] */
    block_t *map_next;   /* ALLOCATED: address map chain */
    block_t *pend_next;  /* PENDING: list link */
    uint64_t event;      /* PENDING behind an event: its handle (0: the fence list) */
    core_stream_t *uses; /* record_stream: extra streams (hostalloc'ed), NULL if none */
    uint32_t nuses;
    uint32_t site; /* ALLOCATED/PENDING: the caller's call site (core_malloc_site; 0: none) */
    uint64_t epoch; /* ALLOCATED/PENDING: the backend's work_epoch as handed out, odd (core_epoch_note; CORE_EPOCH_UNSEEN: unknown) */
    uint32_t born; /* ALLOCATED/PENDING: when allocated, ms since the device's state was made + 1, while birth
                    * times are kept (core_set_birth_times); else 0 */
    uint64_t id;   /* ALLOCATED/PENDING: unique per allocation, never reused (core_describe) */
    uint64_t hold; /* ALLOCATED/PENDING: a core_hold token (0: none); PENDING on d->held while held */
    block_t *alias; /* LENT: the FOREIGN block of the page's other mapping; FOREIGN: the LENT block */
    bool idle;     /* FREE: no queued work can use it (freed behind a completed fence or event, or the
                    * device was synchronised since); a stream-ordered free is not idle: unmapping its
                    * pages needs a synchronisation first.  ALLOCATED/PENDING: taken from idle memory (no
                    * work queued before its allocation can still use it), so a completed fence or event
                    * makes it idle when it is freed; taken from memory that was not, it stays not idle
                    * until a synchronisation */
};

struct seg_s {
    uintptr_t addr; /* backend address */
    size_t size;    /* bytes */
    pool_t *pool;
    core_stream_t stream;
    block_t *first;      /* lowest-address block */
    seg_t *prev, *next;  /* the device's segment list (allocation order) */
    pool_bins_t *bins;   /* its pool's free bins for its stream */
    uint64_t free_since; /* alloc_clock when the segment last became entirely free */
    bool oversize;       /* size >= max_split_size */
    bool direct;         /* preallocate: a request larger than the chunk, returned to the device on free */
    bool expandable;     /* addresses reserved whole, pages mapped on demand (core/expand.c) */
    size_t page;         /* expandable: the unit of mapping */
    size_t mapped;       /* expandable: bytes mapped */
    size_t aliased;      /* expandable: bytes of pages mapped a second time here (shared pages; not in
                          * mapped, nor in the reserved bytes: their memory is another mapping's) */
    uint32_t site;       /* the call site of the allocation that created it (core_malloc_site; 0: none) */
};

/* Size classes: 8 per power of two from 256 bytes (min_block_size's
 * least) up; smaller sizes are class 0. */
#define POOL_BIN_SUB 8
#define POOL_BINS (56 * POOL_BIN_SUB)
#define POOL_BIN_WORDS (POOL_BINS / 64)

/* The FREE blocks of one (pool, stream). */
struct pool_bins_s {
    core_stream_t stream;
    size_t segs;                   /* segments of (pool, stream) pointing here; at 0 the bins go */
    uint64_t map[POOL_BIN_WORDS];  /* bit c: bin[c] holds a block */
    uint64_t words;                /* bit w: map[w] is not 0 */
    rb_tree_t bin[POOL_BINS];      /* size class c: blocks ordered by (size, addr) */
    pool_bins_t *next;             /* the pool's list, most recently searched first */
};

struct pool_s {
    pool_bins_t *bins; /* per stream with segments here (or made for one); NULL: none */
    bool small;     /* the small-request pool */
    ppool_t *owner;
};

struct ppool_s {
    int id; /* 0: the default pools */
    pool_t small, large;
    bool destroyed;  /* released by the program; freed when its last segment goes */
    size_t segments; /* live segments */
    ppool_t *next;
};

/* A batch of fenced frees: blocks waiting behind one fence. */
typedef struct fence_batch_s {
    uint64_t event;  /* the fence; 0 while the batch is open (not recorded yet) */
    block_t *blocks; /* pend_next list */
    size_t bytes;    /* of the blocks */
    struct fence_batch_s *next; /* older to newer */
} fence_batch_t;

/* The address map of allocated blocks: open hashing with chains through
 * block->map_next; grows by doubling. */
typedef struct addr_map_s {
    block_t **buckets;
    size_t mask; /* buckets - 1 (power of two) */
    size_t count;
} addr_map_t;

/* journal.c: the history of the allocator's calls (core_set_history) */
typedef enum jr_op_e {
    JR_ALLOC = 1,      /* size: requested; id: the allocation's number; s1: its stream key */
    JR_ALLOC_FAIL = 2, /* size: requested; id: the number the next allocation gets; s1: its stream key */
    JR_FREE = 3,       /* size, id, pool, s1: the allocation's; how: core_free_t (| JR_HOW_MULTI); s2: the free's
                        * stream (a fenced free with a stream is not a plain free: it stays fenced in a replay) */
    JR_POLL = 4,
    JR_FENCE = 5,
    JR_SYNC = 6,
    JR_CAPTURE = 7,     /* how: on (1) or off (0) */
    JR_EMPTY = 8,       /* pool: core_empty_cache's argument (0xFFFF: all) */
    JR_POOL_CREATE = 9, /* pool: its id */
    JR_POOL_DESTROY = 10,
    JR_RECORD_STREAM = 11, /* id: the allocation; s2: the stream */
    JR_STREAMS = 12,       /* size: the program's live streams after (core_set_streams); id: before */
    JR_NO_HAND_OUTS = 13,  /* core_stop_hand_outs */
} jr_op_t;

/* w: op (8 bits) | how (8) | pool (16) | s1 (16) | s2 (16); streams as
 * indices into the journal's table of keys (0: key 0). */
typedef struct jr_rec_s {
    uint64_t w, size, id;
} jr_rec_t;

typedef struct journal_s {
    jr_rec_t *ring; /* cap records, allocated at the first push */
    size_t cap;     /* a power of two; 0: no history */
    uint64_t head;  /* records pushed so far */
    bool broken;    /* out of host memory: nothing is kept */
    /* stream keys, interned: keys[i - 1] has index i */
    core_stream_t *keys;
    uint32_t nkeys;
    core_stream_t last_key;
    uint32_t last_index;
    /* kept after last_key, so that what jr_note reads (ring, cap, head,
     * last_key, last_index) shares its cache lines */
    size_t keys_cap; /* of keys (vec_reserve) */
    ht_t index;      /* key -> its index */
} journal_t;

/* An allocation live when a copied window begins. */
typedef struct jr_live_s {
    uint64_t id, size;
    int pool;
    uint64_t key; /* the stream key's index in the copy's keys */
    bool multi; /* used on other streams (record_stream) before the window */
} jr_live_t;

/* In a JR_FREE's how, beside the core_free_t: the block had been used on
 * other streams (its free was forced behind the fence). */
#define JR_HOW_MULTI 0x80
/* The stream key a replay records on a prelude allocation that was used on
 * other streams (any key but its own does). */
#define JR_MULTI_STREAM ((core_stream_t)0xFFFF0001u)

/* A copy of the window for the what-if: rec[0 .. nrec) are records
 * first .. first + nrec - 1; keys[i] is the stream key of index i. */
typedef struct jr_copy_s {
    jr_rec_t *rec;
    size_t nrec;
    uint64_t first;
    core_stream_t *keys;
    size_t nkeys;
    jr_live_t *live; /* by allocation number */
    size_t nlive;
    unsigned streams; /* the program's live streams when the window begins (core_set_streams) */
    bool orders;      /* the device's backend has fence_order: the replays' has it too */
    bool no_hand_out; /* hand-outs were stopped when the window begins (core_stop_hand_outs) */
} jr_copy_t;

struct core_dev_s {
    _Atomic uint32_t lock; /* every field below (dev_lock): 0 free, 1 held, 2 held and waited for; not taken when
                            * solo */
    bool solo;            /* one thread only, ever (a what-if replay's device): no locking */
    int device;
    uint64_t gen; /* unique per core_dev_new: tags the threads' pool routing (alloc.c) */
    conf_t conf;
    core_backend_t be;
    ppool_t defaults;  /* id 0 */
    ppool_t *privates; /* ids > 0 */
    int next_pool_id;
    seg_t *segs; /* every segment, newest first */
    addr_map_t map;
    /* pending frees */
    fence_batch_t *fences; /* closed batches, oldest first */
    fence_batch_t *fences_tail;
    fence_batch_t open;     /* frees since the last fence */
    block_t *event_pending; /* blocks behind per-stream events (pend_next) */
    block_t *held;          /* freed blocks others still hold (core_hold; pend_next) */
    size_t pending_bytes;   /* bytes of every pending list (fences, events, held) */
    uint64_t next_id;       /* allocations so far: block ids */
    uint32_t site_now;      /* the call site of the allocation in progress (core_malloc_site) */
    bool births;            /* stamp each allocation's time (block_t.born): the leak report asks for it */
    uint64_t born_ns;       /* CLOCK_MONOTONIC when the state was made: born's zero */
    /* block objects */
    block_t *spare; /* free block_t structs (pend_next) */
    /* preallocate strategy */
    size_t chunk_size;    /* 0 until the first use reserved the chunk */
    uint64_t alloc_clock; /* allocations so far: the garbage collector's clock */
    /* limits */
    size_t allowed; /* bytes this allocator may hold (SIZE_MAX: no limit) */
    /* expandable segments: the pages of the small and large pools (0: not expandable) */
    size_t exp_page_small, exp_page_large;
    /* a CUDA graph capture is in progress on the device: no fence, wait,
     * sync or release call may be made (core_set_capturing) */
    bool capturing;
    /* the program's live streams (core_set_streams): while 0, a rule that hands out
     * hands out any frees behind fences that could serve a hit */
    unsigned streams;
    /* bytes of the open batch and the closed ones (what hand_out can
     * hand out; pending_bytes also counts held and event-pending blocks) */
    size_t fenced_bytes;
    /* hand-outs behind fences stopped for good (core_stop_hand_outs): an
     * agent the ordering does not reach may touch the device's memory */
    bool no_hand_out;
    /* the reuse policies (CORE_REUSE_*, cross.h) turned off, as the backend
     * said at the last slow path while frees waited on events: what a hit
     * reads (0: CUDA's defaults, all on) */
    unsigned reuse_off;
    /* statistics and observation */
    core_stats_t stats; /* the gauges' all entries: peak only (stats_sum_all) */
    core_observer_fn observer;
    void *observer_ctx;
    journal_t jr; /* the history (journal.c) */
};

/* ------------------------------------------------------------------------
 * Shared between core files (the prefixes of the map above)
 * ---------------------------------------------------------------------- */

/* pool.c: sizes, free bins, split and merge, the address map; the
 * rounding and the pool choice are inline (every allocation makes them) */
/* n rounded up to a multiple of to. */
static inline size_t pool_round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

/* The next 1/divs step between the powers of two around size: with 4
 * divisions, 1200 -> 1280 (steps of 256 between 1024 and 2048). */
static inline size_t pool_round_division(size_t size, unsigned divs)
{
    if (size <= 4 || divs <= 1)
        return size;
    if ((size & (size - 1)) == 0)
        return size;
    unsigned log = 63u - (unsigned)__builtin_clzll((unsigned long long)size);
    size_t floor2 = (size_t)1 << log;
    size_t step = floor2 / divs;
    if (step == 0)
        return size;
    return pool_round_up(size, step);
}

/* A request's size as PyTorch's round_size makes it. */
static inline size_t pool_round_size(const conf_t *c, size_t size)
{
    size_t min = c->min_block_size;
    if (size < min)
        return min;
    unsigned divs = conf_roundup_divisions(c, size);
    if (divs > 1 && size > min * divs)
        return pool_round_up(pool_round_division(size, divs), min);
    return pool_round_up(size, min);
}

/* The pool (small or large) of pp that serves a request of `rounded`. */
static inline pool_t *pool_for(core_dev_t *d, ppool_t *pp, size_t rounded)
{
    if (d->conf.strategy == CONF_STRATEGY_PREALLOCATE && pp->id == 0)
        return &pp->large; /* the chunk serves every size */
    return rounded <= d->conf.small_size ? &pp->small : &pp->large;
}
size_t pool_alloc_size(const conf_t *c, size_t rounded);
block_t *pool_find_free(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t rounded);
void pool_release_block(core_dev_t *d, block_t *b, bool idle);
void pool_tree_insert(pool_t *pool, block_t *b);
void pool_tree_remove(pool_t *pool, block_t *b);
/* The pool's bins for stream, made if there are none; NULL: out of host
 * memory.  A segment links to them (seg_link), so that putting its blocks
 * in them never allocates. */
pool_bins_t *pool_bins_get(pool_t *pool, core_stream_t stream);
/* A segment no longer points at bins (empty then when no other does). */
void pool_bins_unref(pool_t *pool, pool_bins_t *bins);
/* Frees the pool's bins (the device or the private pool goes). */
void pool_fini(pool_t *pool);
/* FREE blocks in the pool's bins, O(n). */
size_t pool_free_count(const pool_t *pool);
block_t *block_new(core_dev_t *d);
void block_delete(core_dev_t *d, block_t *b);
/* n new block structs into out[0..n), or none (false: out of host memory). */
bool block_new_n(core_dev_t *d, block_t **out, int n);
/* Frees a destroyed segment's block structs, first and every one after it
 * (their record_stream lists too), to the host, not to the spares. */
void block_free_chain(block_t *first);
/* Splits block b at `at` (b->addr < at < its end) with the block struct r:
 * b keeps the low part; r, a copy of b, the high part, in no tree.  Trees
 * and statistics are the caller's. */
void block_split(block_t *b, uintptr_t at, block_t *r);
/* b takes in its address neighbour n (on either side), whose struct is
 * deleted; b's state and other fields stay b's.  Trees and statistics are
 * the caller's. */
void block_absorb(core_dev_t *d, block_t *b, block_t *n);
/* b (FREE, not in a tree) merged with its FREE neighbours and put in its
 * pool's tree; returns the merged block. */
block_t *pool_insert_free(core_dev_t *d, block_t *b);
/* pool_take, pool_release_block's body, the map's insert and remove: inline, hit.h */
void map_insert(core_dev_t *d, block_t *b);
block_t *map_remove(core_dev_t *d, uintptr_t addr);
block_t *map_find(const core_dev_t *d, uintptr_t addr);
bool map_grow(core_dev_t *d);

/* Why a new segment (or new pages) could not be had. */
typedef struct seg_failure_s {
    bool limit_hit;
    int backend_error;
} seg_failure_t;

/* journal.c (under the device lock); jr_take takes it itself.  jr_take
 * copies the records up to number `upto` and the allocations live when the
 * copy begins: 0, or -1 (no history, that record is gone, no host memory). */
void jr_push(core_dev_t *d, jr_op_t op, unsigned how, int pool, core_stream_t s1, core_stream_t s2, uint64_t size,
             uint64_t id);
/* A pool id as a record keeps it: ids above 0xFFFE as 0xFFFE, -1 (all
 * pools) as 0xFFFF. */
static inline uint64_t jr_pool_field(int pool)
{
    return pool < 0 ? 0xFFFF : pool > 0xFFFE ? 0xFFFE : (uint64_t)pool;
}

/* A record's first word. */
static inline uint64_t jr_pack(jr_op_t op, unsigned how, int pool, uint32_t s1, uint32_t s2)
{
    uint64_t p = jr_pool_field(pool);
    return (uint64_t)op | (uint64_t)(how & 0xFF) << 8 | p << 16 | (uint64_t)(s1 & 0xFFFF) << 32 |
           (uint64_t)(s2 & 0xFFFF) << 48;
}

static inline void jr_note(core_dev_t *d, jr_op_t op, unsigned how, int pool, core_stream_t s1, core_stream_t s2,
                           uint64_t size, uint64_t id)
{
    journal_t *j = &d->jr;
    if (!j->cap)
        return;
    /* the common case inline: the ring exists, no stream or the last one
     * (last_key is never 0: key 0 has index 0) */
    if (__builtin_expect(j->ring && (s1 == 0 || s1 == j->last_key) && (s2 == 0 || s2 == j->last_key), 1)) {
        jr_rec_t *r = &j->ring[j->head++ & (j->cap - 1)];
        r->w = jr_pack(op, how, pool, s1 ? j->last_index : 0, s2 ? j->last_index : 0);
        r->size = size;
        r->id = id;
        return;
    }
    jr_push(d, op, how, pool, s1, s2, size, id);
}
int jr_take(core_dev_t *d, uint64_t upto, jr_copy_t *out);
void jr_copy_free(jr_copy_t *c);
void jr_fini(journal_t *j);

/* What an allocation the slow path could not serve asked for, and why:
 * what its core_oom_t reports. */
typedef struct seg_miss_s {
    size_t size, rounded; /* bytes asked for, and after rounding */
    size_t alloc_size;    /* the segment (expandable: the mapped bytes) it needed */
    int pool_id;          /* its private pool (0: the default pools) */
    seg_failure_t why;
} seg_miss_t;

/* alloc.c: segments and the retry ladder.  The slow path: the address, or
 * 0 with *miss filled. */
uintptr_t seg_malloc_slow(core_dev_t *d, ppool_t *pp, size_t size, size_t rounded, core_stream_t stream,
                          seg_miss_t *miss);
void seg_release(core_dev_t *d, seg_t *s);
/* The structs of a segment the backend refused (either may be NULL) given
 * back, the error noted: NULL. */
seg_t *seg_refused(core_dev_t *d, seg_t *s, block_t *b, int r, seg_failure_t *why);
/* Fills a new segment s at [addr, addr+size) of (pool, bins->stream)
 * (bins: pool_bins_get's), its one block b covering it in `state` (the
 * other fields zero), and links it into the device's list, its pool's
 * count and its bins' count. */
void seg_link(core_dev_t *d, seg_t *s, block_t *b, pool_t *pool, pool_bins_t *bins, uintptr_t addr, size_t size,
              block_state_t state);
/* Unlinks a segment and frees it (and its pool when destroyed and empty). */
void seg_unlink_free(core_dev_t *d, seg_t *s);
bool seg_may_release(const core_dev_t *d, const seg_t *s, const ppool_t *only);
bool seg_is_free(const seg_t *s);
size_t seg_release_free(core_dev_t *d, ppool_t *only, bool oversize_only, size_t want);
/* The largest FREE block's bytes, over every pool. */
size_t seg_largest_free(const core_dev_t *d);

/* device.c: devices and private pools */
ppool_t *ppool_find(core_dev_t *d, int id);
/* Unlinks a destroyed private pool with no segment left and frees it. */
void ppool_unlink_free(core_dev_t *d, ppool_t *pp);

/* expand.c, share.c, unmap.c: expandable segments (expand.h has their shared helpers) */
/* A FREE block with room for `rounded` at its start in (pool, stream)'s
 * expandable segments, mapping pages as needed (a new segment when none
 * has room); NULL with *why filled when neither the limit nor the device
 * allows it. */
block_t *exp_grow(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t rounded, seg_failure_t *why);
/* Unmaps whole free pages of the expandable segments of `only` (NULL:
 * every pool that may give memory back) until `want` bytes went back;
 * segments left with nothing mapped are released.  Pages of blocks that
 * are not idle need one device synchronisation first; while capturing
 * (no synchronisation allowed) only idle pages go.  Returns the bytes. */
size_t exp_unmap_free(core_dev_t *d, ppool_t *only, size_t want);
/* Bytes of whole pages that are free (now) or free or pending with no hold
 * (later) in an expandable segment. */
void exp_releasable(const seg_t *s, size_t *now, size_t *later);
/* The device is idle (the program synchronised it): every block of an
 * expandable segment is idle (the live ones once their own work is done). */
void exp_all_idle(core_dev_t *d);
/* core_dev_destroy: unmaps everything and releases the addresses. */
void exp_seg_destroy(core_dev_t *d, seg_t *s);
/* The new memory a request of `rounded` bytes needs at most: whole pages
 * of its pool (the small one up to small_size, as pool_for chooses). */
size_t exp_need(const core_dev_t *d, size_t rounded);

/* pending.c: fences, events and holds */
void pend_fenced(core_dev_t *d, block_t *b);
/* A freed block with a hold: on the held list until the backend releases
 * the hold (asked now, and at every poll), then fenced. */
void pend_held(core_dev_t *d, block_t *b);
int pend_after_stream(core_dev_t *d, block_t *b, core_stream_t stream);
/* Pending behind one marker on every stream b was used on (core_record_stream)
 * and on `stream` (the free's) unless it is b's own: 0, or -1 when the
 * backend cannot record it (b unchanged). */
int pend_after_streams(core_dev_t *d, block_t *b, core_stream_t stream);
/* Moves every pending block whose fence/event completed to the free trees;
 * returns the bytes released. */
size_t pend_poll(core_dev_t *d);
/* pend_poll, the events' blocks only when `events` (the opportunistic
 * policy, cross.h). */
size_t pend_poll_some(core_dev_t *d, bool events);
/* The kinds of event-pending blocks: freed on one other stream than their
 * own (cudaFreeAsync), or used on several (record_stream: the marker is on
 * each). */
enum { PEND_ONE_STREAM = 1, PEND_MANY_STREAMS = 2 };
/* Event-pending blocks of (pool, stream) made free for a request of
 * `rounded` bytes: those whose event completed, idle (when `completed`: the
 * opportunistic policy); then, of the kinds in `waits` (0: none), the
 * oldest that serves the request alone, or, none doing, all of them, not
 * idle, the stream made to wait for each one's event on the device (backend
 * stream_wait, which the caller checked; stops at the first wait refused).
 * Returns their bytes. */
size_t pend_wait_on_device(core_dev_t *d, const pool_t *pool, core_stream_t stream, size_t rounded, bool completed,
                           unsigned waits);
/* Records the open batch's fence if it has blocks. */
void pend_close(core_dev_t *d);
/* Waits for the oldest fence or event; false when nothing is pending. */
bool pend_wait_oldest(core_dev_t *d);
/* Records the open batch's fence, when it has blocks and no capture is in
 * progress; when no fence can be recorded, synchronises the device and
 * releases everything instead (or leaves the batch open, when it cannot). */
void pend_record_fence(core_dev_t *d);
/* Releases the closed batches whose fences completed, oldest first, as
 * idle; returns their bytes. */
size_t pend_release_completed(core_dev_t *d);
/* Why pending blocks are released. */
typedef enum pend_why_e {
    PEND_DONE,       /* their fence or event completed, or was waited for: idle */
    PEND_HANDED_OUT, /* the device was ordered after their fence (hand_out): work before it may still run */
} pend_why_t;
/* Releases the oldest closed batch. */
size_t pend_release_oldest(core_dev_t *d, pend_why_t why);
/* How pend_release_all knows the device is idle. */
typedef enum pend_idle_e {
    PEND_WAIT,  /* waits for every fence and event (and synchronises for the open batch) */
    PEND_KNOWN, /* the program synchronised: everything queued has completed */
} pend_idle_t;
/* Everything pending becomes free (the device is idle); held blocks stay
 * held unless their hold is over. */
void pend_release_all(core_dev_t *d, pend_idle_t how);

/* stats.c */
/* Inline: the hit pair makes about thirty of these updates. */
static inline void stat_add(core_stat_t *s, int64_t delta)
{
    s->current += delta;
    if (delta > 0) {
        s->allocated += (uint64_t)delta;
        if (s->current > s->peak)
            s->peak = s->current;
    } else {
        s->freed += (uint64_t)-delta;
    }
}

/* stat_add(-down) then stat_add(+up), in one pass (either may be 0): the
 * peak can only be passed at the end, and only when up > down. */
static inline void stat_move(core_stat_t *s, uint64_t down, uint64_t up)
{
    s->current += (int64_t)(up - down);
    s->allocated += up;
    s->freed += down;
    if (up > down && s->current > s->peak)
        s->peak = s->current;
}

/* A gauge array's all entry (CORE_POOL_ALL) keeps only its peak: its
 * current, allocated and freed are the sums of the two classes', added up
 * when the stats are read (stats_sum_all), so each update writes one class
 * and, when the sum may have passed it, the all peak. */
static inline int64_t stat_all_current(const core_stat_t *arr)
{
    return arr[CORE_POOL_SMALL].current + arr[CORE_POOL_LARGE].current;
}

static inline void stat_all_peak(core_stat_t *arr)
{
    int64_t all = stat_all_current(arr);
    if (all > arr[CORE_POOL_ALL].peak)
        arr[CORE_POOL_ALL].peak = all;
}

/* stat_move on a gauge's cls entry (cls: a pool class), and the all peak. */
static inline void stat_move2(core_stat_t *arr, int cls, uint64_t down, uint64_t up)
{
    stat_move(&arr[cls], down, up);
    if (up > down)
        stat_all_peak(arr);
}

/* stat_add(+up) on one entry: no test of up (0 leaves current at most peak). */
static inline void stat_up(core_stat_t *s, uint64_t up)
{
    s->current += (int64_t)up;
    s->allocated += up;
    if (s->current > s->peak)
        s->peak = s->current;
}

/* stat_add(+up) on a gauge's cls entry, and the all peak; no sign test. */
static inline void stat_up2(core_stat_t *arr, int cls, uint64_t up)
{
    stat_up(&arr[cls], up);
    stat_all_peak(arr);
}

/* stat_add(-down) on a gauge's cls entry (the all peak cannot move). */
static inline void stat_down2(core_stat_t *arr, int cls, uint64_t down)
{
    stat_move(&arr[cls], down, 0);
}

/* stat_add(delta) on a gauge's cls entry, and the all peak. */
static inline void stat_add2(core_stat_t *arr, int cls, int64_t delta)
{
    stat_add(&arr[cls], delta);
    if (delta > 0)
        stat_all_peak(arr);
}

/* Fills every gauge array's all current, allocated and freed from the
 * classes' (a copy's, for whoever reads the stats). */
void stats_sum_all(core_stats_t *s);
static inline void core_emit(core_dev_t *d, core_event_kind_t kind, uintptr_t addr, size_t size, core_stream_t stream,
                             int pool_id, uint32_t site)
{
    if (d->observer) {
        core_event_t e = {kind, d->device, pool_id, addr, size, stream, site};
        d->observer(d->observer_ctx, &e);
    }
}

/* A size's class: monotonic in size, POOL_BIN_SUB classes per power of
 * two from 256 bytes. */
static inline unsigned pool_bin_of(size_t size)
{
    if (size < 256)
        return 0;
    unsigned log = 63u - (unsigned)__builtin_clzll((unsigned long long)size);
    return (log - 8) * POOL_BIN_SUB + (unsigned)((size >> (log - 3)) & (POOL_BIN_SUB - 1));
}

/* A bin's order: (size, address). */
static inline int block_bin_cmp(const rb_node_t *x, const rb_node_t *y)
{
    const block_t *a = rb_entry(x, block_t, node), *b = rb_entry(y, block_t, node);
    if (a->size != b->size)
        return a->size < b->size ? -1 : 1;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

/* device.c: the device lock's contended paths (a futex). */
void dev_lock_wait(core_dev_t *d);
void dev_lock_wake(core_dev_t *d);

/* The device lock, skipped for a device only one thread uses
 * (core_dev_solo): one compare-and-swap to take it and one exchange to
 * give it back when no thread waits, the futex only when one does. */
static inline void dev_lock(core_dev_t *d)
{
    uint32_t free_word = 0;
    if (__builtin_expect(!d->solo, 1) &&
        __builtin_expect(!atomic_compare_exchange_strong_explicit(&d->lock, &free_word, 1, memory_order_acquire,
                                                                  memory_order_relaxed),
                         0))
        dev_lock_wait(d);
}

static inline void dev_unlock(core_dev_t *d)
{
    if (__builtin_expect(!d->solo, 1) &&
        __builtin_expect(atomic_exchange_explicit(&d->lock, 0, memory_order_release) == 2, 0))
        dev_lock_wake(d);
}

/* The pool class index for stats. */
static inline int pool_class(const pool_t *p)
{
    return p->small ? CORE_POOL_SMALL : CORE_POOL_LARGE;
}

#endif
