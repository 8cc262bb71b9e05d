/*
 * Hand-outs (hand_out.c): under a rule that hands out (core_rule_t.hands_out,
 * the default), frees still behind fences serve allocations before their
 * fences complete; the device is ordered after the fences instead
 * (core_backend_t.fence_order: every stream that could use the memory waits
 * for them), so no queued work of the old owner can overlap the new one's.
 *
 * This header and hand_out.c hold every decision about them:
 *   - whether they are allowed now (hand_out_allowed): the rule, a backend
 *     that can order the device, no capture, not stopped;
 *   - when a hit hands out rather than split a block (hand_out_due) and how
 *     much it leaves behind fences (hand_out_keep), paced while the program
 *     runs on two streams or more (hand_out_paced);
 *   - the slices: the open batch gets its fence once it holds a slice of
 *     the cache (hand_out_slice), so that there are old fences to take;
 *   - the stop, for good, when something the ordering cannot reach may touch
 *     the memory (hand_out_stop).
 * A miss hands out everything behind fences (hand_out(d, 0), alloc.c's slow
 * path, step 1b).
 *
 * With the program's work on one stream the ordering holds nothing back
 * (that stream is in order after its own work; the fence already orders the
 * default streams): a hit hands out any pending free that could serve it.
 * With work on two streams or more each hand-out makes every stream wait
 * for every stream's work before the fence, which serialises streams that
 * would overlap, so:
 *   - a hit hands out only once the frees behind fences hold
 *     1/HAND_OUT_SHARE of the reserved bytes;
 *   - it hands out the oldest fences' frees and leaves the newest, up to
 *     1/HAND_OUT_KEEP of the reserved bytes: their work is the likeliest to
 *     have run, so the streams wait least;
 *   - the open batch gets its fence at every 1/HAND_OUT_SLICE of the
 *     reserved bytes freed.
 * The constants were chosen on scripts/bench-train's multi-stream shapes;
 * the measurements and the alternatives tried are in docs/performance.md
 * ("A GPU-bound training step": how the hand-outs are paced with streams).
 * The count (core_set_streams) is the streams the program created, and the
 * legacy default stream once its work was seen there beside one of them (the
 * interposer's probe, interpose/order.c): a program computing on the legacy
 * stream beside one stream of its own serialises unpaced, one whose legacy
 * stream idles loses nothing.
 */
#ifndef CUCACHE_CORE_HAND_OUT_H
#define CUCACHE_CORE_HAND_OUT_H

#include "types.h"

#define HAND_OUT_SHARE 8
#define HAND_OUT_KEEP 24
#define HAND_OUT_SLICE 96

/* Whether hand-outs are allowed now: the rule hands out, the backend can
 * order the device (fence_order), no capture is in progress and they were
 * not stopped.  A rule that does not hand out may serve an agent the
 * device's ordering does not reach (a NIC by GPUDirect RDMA with no CUDA
 * call in between), which cudaFree never lets see a reused block early. */
static inline bool hand_out_allowed(const core_dev_t *d)
{
    return d->be.fence_order && !d->capturing && !d->no_hand_out && conf_rule(&d->conf)->hands_out;
}

/* Whether hand-outs are paced: with two streams or more the program's work
 * runs on (core_set_streams). */
static inline bool hand_out_paced(const core_dev_t *d)
{
    return d->streams > 1;
}

/* The reserved bytes divided by n (the pacing's unit). */
static inline size_t hand_out_part(const core_dev_t *d, unsigned n)
{
    return (size_t)stat_all_current(d->stats.reserved_bytes) / n;
}

/* Whether a hit that would split a block (or take one larger than asked
 * for) hands out the frees behind fences instead. */
static inline bool hand_out_due(const core_dev_t *d, size_t rounded)
{
    if (d->fenced_bytes < rounded)
        return false;
    return !hand_out_paced(d) || d->fenced_bytes >= hand_out_part(d, HAND_OUT_SHARE);
}

/* What a hit's hand-out leaves behind fences: nothing while not paced, else
 * the newest frees up to 1/HAND_OUT_KEEP of the cache. */
static inline size_t hand_out_keep(const core_dev_t *d)
{
    return hand_out_paced(d) ? hand_out_part(d, HAND_OUT_KEEP) : 0;
}

/* Orders the device after the oldest fences that leave at most `keep`
 * bytes behind fences (0: all, the open batch's fence recorded first) and
 * makes their blocks free (not idle: work before the fence may still run);
 * fences already completed free theirs as idle, with no ordering.  False
 * when nothing was freed, or hand-outs are not allowed now. */
bool hand_out(core_dev_t *d, size_t keep);
/* After a fenced free: while paced and allowed, the open batch gets its
 * fence once it holds 1/HAND_OUT_SLICE of the cache. */
void hand_out_slice(core_dev_t *d);
/* Stops the hand-outs for good (core_stop_hand_outs, or a backend's
 * CORE_ESTOP): journalled, and counted under a rule that hands out. */
void hand_out_stop(core_dev_t *d);

#endif
