/*
 * Cross-stream reuse (cross.c): a block freed on another stream than its
 * own (cudaFreeAsync(p, B) of a block allocated on A) waits behind an event
 * recorded on B (pending.c).  CUDA's pool reuses such a block for A in
 * three ways, each switched by a pool attribute the program may set
 * (cudaMemPoolReuse*, all on by default); cucache follows the attributes of
 * the pool it stands in for (the backend's reuse_policy), one row each:
 *
 *   policy (CORE_REUSE_*) CUDA reuses the free when ...   cucache, on the slow path
 *   FOLLOW_EVENTS         A already waits for B past the  nothing: it does not see the
 *                         free (the program's events)     program's events (no step)
 *   OPPORTUNISTIC         B has passed the free           step 1 polls the frees' events:
 *                                                         a completed one serves (idle)
 *   INTERNAL_DEPS         at once, A made to wait for     step 1c: A's pending frees of the
 *                         the free on the device          pool serve at once, A waiting on
 *                                                         their events (backend stream_wait)
 *
 * Off, a policy's step is skipped: the frees wait for the program's
 * synchronisations (core_poll, core_synchronized) or, memory being short,
 * for the host's waits of steps 4 and 6.  CUDA takes internal dependencies
 * only once the device is full; cucache takes them before it grows the
 * cache (alloc.c, step 1c), and before a hit cuts up a larger free block
 * of the stream (cross_release_on_hit), so that frees on other streams
 * cost no more memory than frees on the block's own stream
 * (docs/performance.md, "Frees on another stream").  The hit path reads
 * the policies the last slow path asked for: a change the program makes
 * counts from the next miss.
 *
 * A block released by a device-side wait is FREE but not idle, like a
 * hand-out (hand_out.h): work queued before the wait may still use it, so
 * its pages stay mapped until a synchronisation.  Only the allocating
 * stream waits, and blocks of A's bins serve only A, so no other stream can
 * reach it early.  Never while capturing (core_set_capturing), nor on a
 * stream the backend cannot make wait (then the frees wait as above).
 *
 * The replays (cucache-replay, the what-if) have no stream_wait: there a
 * free on another stream waits for the next poll, as before this step
 * (their idle device has completed its event by then).  A trace with such
 * frees may so replay a split or a growth where the live run reused the
 * free; one without them replays exactly as before.  The journal keeps no
 * record of these releases.
 */
#ifndef CUCACHE_CORE_CROSS_H
#define CUCACHE_CORE_CROSS_H

#include <stdbool.h>

#include "types.h"

/* What cucache's slow path does under a reuse policy. */
typedef enum cross_step_e {
    CROSS_NO_STEP, /* nothing of cucache's depends on it */
    CROSS_POLL,    /* step 1: a free whose event completed serves */
    CROSS_WAIT,    /* step 1c: a pending free serves, the stream waiting on the device */
} cross_step_t;

typedef struct cross_policy_s {
    unsigned bit;      /* CORE_REUSE_* */
    const char *cuda;  /* the pool attribute that switches it */
    cross_step_t step; /* cucache's step under it */
} cross_policy_t;

extern const cross_policy_t cross_policies[3];

/* The policies in force now (the backend's answer; CORE_REUSE_ALL without
 * one), kept for the hits (core_dev_t.reuse_off). */
unsigned cross_policy(core_dev_t *d);

/* Whether `step` may be taken under the policies `policy`. */
bool cross_allows(unsigned policy, cross_step_t step);

/* Where an allocation may make its stream wait for its frees pending on
 * other streams. */
typedef enum cross_at_e {
    CROSS_AT_HIT,  /* a hit that would cut up a larger block */
    CROSS_AT_MISS, /* the ladder's step 1c, before the cache grows */
    CROSS_AT_FULL, /* step 3b: the device could not give a new segment, before the host waits */
    CROSS_AT_COUNT,
} cross_at_t;

/* Which kinds of pending free (PEND_ONE_STREAM, PEND_MANY_STREAMS) the
 * stream waits for at each place, one row each:
 *
 *   place  freed on one other stream      used on several (record_stream)
 *   HIT    yes: no larger block cut up    no: the split serves; the program
 *   MISS   yes: the cache does not grow   overlaps the streams' work (see below)
 *   FULL   yes                            yes: instead of the host waiting
 *
 * A free on one other stream (cudaFreeAsync) is waited for as early as
 * possible: its stream's blocks serve only it, and waiting costs the
 * device nothing on scripts/bench-train's shapes while growing costs
 * memory that CUDA's pool, which lets any stream take a completed free,
 * would not.  A block used on several streams (PyTorch's record_stream:
 * made on one stream, read by another's work, freed) is one whose stream
 * would wait for that other stream's work, which the program queued to run
 * beside its own: PyTorch's own allocator grows instead, and so does
 * cucache while the device has room (docs/performance.md, "record_stream");
 * once it has none, the stream waits on the device where PyTorch waits on
 * the host. */
extern const unsigned cross_waits[CROSS_AT_COUNT];

/* The blocks of (pool, stream) pending behind other streams' events serve
 * a request of `rounded` at `at`: those whose event completed (idle, under
 * the opportunistic policy), else, of the kinds cross_waits names there,
 * the oldest that serves it alone, else all, the stream made to wait on
 * their events on the device (not idle; pend_wait_on_device).  Returns the
 * bytes released (0: none, or the backend cannot: no stream_wait, a
 * capture, stream key 0). */
size_t cross_release(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t rounded, unsigned policy,
                     cross_at_t at);

/* A hit that would split a block (or take one larger than asked for)
 * while frees of its stream wait on other streams' events: step 1c first,
 * under the policies the last slow path read, so that the frees serve
 * before the stream's larger blocks are cut up.  Whether any was
 * released (the caller finds its block again). */
bool cross_release_on_hit(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t rounded);

#endif
