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

/* Step 1c: the blocks of (pool, stream) pending behind other streams'
 * events serve now, the stream made to wait on each event on the device
 * (not idle).  Returns the bytes released (0: none, or the backend cannot:
 * no stream_wait, a capture, stream key 0). */
size_t cross_release(core_dev_t *d, pool_t *pool, core_stream_t stream);

/* A hit that would split a block (or take one larger than asked for)
 * while frees of its stream wait on other streams' events: step 1c first,
 * under the policies the last slow path read, so that the frees serve
 * before the stream's larger blocks are cut up.  Whether any was
 * released (the caller finds its block again). */
bool cross_release_on_hit(core_dev_t *d, pool_t *pool, core_stream_t stream);

#endif
