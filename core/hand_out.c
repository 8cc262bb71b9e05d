/*
 * Hand-outs: frees behind fences serving allocations before the fences
 * complete, the device ordered after them (hand_out.h says when and why).
 */
#include "hand_out.h"

void hand_out_slice(core_dev_t *d)
{
    /* Not from pend_fenced: pend_close's walk of the held list calls that,
     * and a fence that cannot be recorded releases everything. */
    if (hand_out_paced(d) && d->open.blocks && hand_out_allowed(d) && d->open.bytes >= hand_out_part(d, HAND_OUT_SLICE))
        pend_record_fence(d);
}

void hand_out_stop(core_dev_t *d)
{
    if (d->no_hand_out)
        return;
    jr_note(d, JR_NO_HAND_OUTS, 0, 0, 0, 0, 0, 0);
    d->no_hand_out = true;
    d->stats.num_hand_out_stops = conf_rule(&d->conf)->hands_out;
}

bool hand_out(core_dev_t *d, size_t keep)
{
    if (!hand_out_allowed(d))
        return false;
    /* The oldest fences first: their work is the likeliest to have run, so
     * the streams ordered after them wait least.  Enough of them to leave
     * at most `keep` bytes behind fences; with too few closed, the frees
     * since the last fence get theirs, and all are handed out.  (Held and
     * event-pending blocks are not handed out, and not counted.) */
    if (keep == 0 || d->open.bytes > keep)
        pend_close(d);
    /* fences that completed free their blocks as idle (their pages can go
     * back without a synchronisation) and need no ordering */
    bool done = pend_release_completed(d) > 0;
    if (!d->fences || (done && d->fenced_bytes - d->open.bytes <= keep))
        return done;
    /* The fence that covers the older ones: the device ordered after it is
     * ordered after them all (each was recorded on every stream after the
     * one before). */
    fence_batch_t *upto = d->fences;
    size_t left = d->fenced_bytes - upto->bytes;
    while (upto->next && left > keep) {
        upto = upto->next;
        left -= upto->bytes;
    }
    int rc = d->be.fence_order(d->be.ctx, d->device, upto->event, d->next_id + 1);
    if (rc == CORE_ESTOP)
        hand_out_stop(d);
    if (rc != CORE_OK)
        return false;
    for (bool last = false; !last;) {
        last = d->fences == upto;
        pend_release_oldest(d, PEND_HANDED_OUT);
        d->stats.num_fence_hand_outs++;
    }
    return true;
}
