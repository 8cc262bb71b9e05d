/*
 * A copy of the device's segments and blocks, for the OOM report and
 * snapshots (stats/).  Taken under the device lock; the copy is sorted by
 * address outside it.
 */
#include <stdlib.h>
#include <string.h>

#include "hostalloc.h"
#include "types.h"

static int seg_cmp(const void *a, const void *b)
{
    const core_seg_info_t *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static core_block_state_t block_state(const block_t *b)
{
    switch (b->state) {
    case BLOCK_ALLOCATED:
        return CORE_BLOCK_ALLOCATED;
    case BLOCK_PENDING:
        return CORE_BLOCK_PENDING;
    default:
        return CORE_BLOCK_FREE;
    }
}

/* Left out of the layout, as addresses with nothing of this segment's
 * behind them: unmapped blocks, and a shared page's lent tail (shown where
 * its borrower maps it) and foreign head (the lender's). */
static bool gap(const block_t *b)
{
    return b->state == BLOCK_UNMAPPED || b->state == BLOCK_LENT || b->state == BLOCK_FOREIGN;
}

int core_layout(core_dev_t *d, core_layout_t *out, void (*under_lock)(void *ctx), void *ctx)
{
    memset(out, 0, sizeof *out);
    out->device = d->device;
    dev_lock(d);
    /* An expandable segment shows as one segment per run of mapped blocks,
     * as PyTorch's snapshots show it; its unmapped blocks are left out
     * (gap). */
    size_t nsegs = 0, nblocks = 0;
    for (const seg_t *s = d->segs; s; s = s->next) {
        nsegs += !s->expandable;
        for (const block_t *b = s->first; b; b = b->next) {
            nblocks += !gap(b);
            nsegs += s->expandable && !gap(b) && (!b->prev || gap(b->prev));
        }
    }
    core_seg_info_t *segs = hostalloc_calloc(nsegs ? nsegs : 1, sizeof *segs);
    core_block_info_t *blocks = hostalloc_calloc(nblocks ? nblocks : 1, sizeof *blocks);
    if (!segs || !blocks) {
        dev_unlock(d);
        hostalloc_free(segs);
        hostalloc_free(blocks);
        return -1;
    }
    size_t i = 0, k = 0;
    for (const seg_t *s = d->segs; s; s = s->next) {
        for (const block_t *b = s->first; b; b = b->next) {
            if (gap(b))
                continue;
            if (b == s->first || (s->expandable && gap(b->prev))) { /* a new segment or run */
                if (i > 0 || k > 0)
                    segs[i - 1].nblocks = k - segs[i - 1].first_block;
                segs[i++] = (core_seg_info_t){
                    .addr = b->addr,
                    .size = 0,
                    .stream = s->stream,
                    .pool_id = s->pool->owner->id,
                    .small = s->pool->small,
                    .oversize = s->oversize,
                    .expandable = s->expandable,
                    .site = s->site,
                    .first_block = k,
                };
            }
            segs[i - 1].size += b->size;
            blocks[k++] = (core_block_info_t){
                .addr = b->addr,
                .size = b->size,
                .requested = b->state == BLOCK_FREE ? 0 : b->requested,
                .state = block_state(b),
                .number = b->state == BLOCK_FREE ? 0 : (b->id & ~CORE_ID_TAG) >> 6,
                .site = b->state == BLOCK_FREE ? 0 : b->site,
                .born = b->state == BLOCK_FREE ? 0 : b->born,
            };
        }
    }
    if (i > 0)
        segs[i - 1].nblocks = k - segs[i - 1].first_block;
    if (under_lock)
        under_lock(ctx);
    dev_unlock(d);

    /* Address order.  Each segment's blocks move with it, so rebuild the
     * block array in the new segment order. */
    qsort(segs, nsegs, sizeof *segs, seg_cmp);
    core_block_info_t *sorted = hostalloc_calloc(nblocks ? nblocks : 1, sizeof *sorted);
    if (!sorted) {
        hostalloc_free(segs);
        hostalloc_free(blocks);
        return -1;
    }
    k = 0;
    for (i = 0; i < nsegs; i++) {
        memcpy(sorted + k, blocks + segs[i].first_block, segs[i].nblocks * sizeof *sorted);
        segs[i].first_block = k;
        k += segs[i].nblocks;
    }
    hostalloc_free(blocks);
    out->segs = segs;
    out->nsegs = nsegs;
    out->blocks = sorted;
    out->nblocks = nblocks;
    return 0;
}

void core_layout_free(core_layout_t *l)
{
    hostalloc_free(l->segs);
    hostalloc_free(l->blocks);
    memset(l, 0, sizeof *l);
}

void core_conf(core_dev_t *d, conf_t *out)
{
    dev_lock(d);
    *out = d->conf;
    dev_unlock(d);
}
