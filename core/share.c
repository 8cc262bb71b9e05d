/*
 * Expandable segments, shared pages (expandable_share_pages; expand.h has
 * the design): which free pieces of other blocks' pages a growing request
 * borrows, mapping them a second time, and ending the sharing once the
 * borrowed bytes are free and idle.
 */
#include "expand.h"

/* Whether the page of segment s at page boundary ps is mapped a second
 * time here (a FOREIGN block at its start or its end): its memory is
 * another mapping's, lent already.  b: a block on that page. */
static bool on_alias_page(const block_t *b, uintptr_t ps)
{
    const block_t *h = b;
    while (h->prev && h->addr > ps)
        h = h->prev;
    if (h->state == BLOCK_FOREIGN)
        return true;
    const block_t *t = b;
    while (t->next && t->next->addr < ps + b->seg->page)
        t = t->next;
    return t->state == BLOCK_FOREIGN;
}

/* The free tail of free block b's first page (b covers it to the page's
 * end), 0 when there is none: b starts on a page boundary, ends before the
 * page does, or the page is mapped a second time here. */
static size_t lendable_tail(const block_t *b)
{
    const seg_t *s = b->seg;
    size_t off = (b->addr - s->addr) % s->page;
    if (!off || b->size < s->page - off || on_alias_page(b, b->addr - off))
        return 0;
    return s->page - off;
}

/* The free head of free block b's last page (b covers it from the page's
 * start), 0 when there is none. */
static size_t lendable_head(const block_t *b)
{
    const seg_t *s = b->seg;
    uintptr_t end = b->addr + b->size;
    size_t eoff = (end - s->addr) % s->page;
    if (!eoff || b->size < eoff || on_alias_page(b, end - eoff))
        return 0;
    return eoff;
}

/* The new bytes a request of `rounded` needs besides pieces of t and h
 * bytes: whole pages. */
static size_t share_fresh(size_t rounded, size_t t, size_t h, size_t page)
{
    return rounded > t + h ? up(rounded - t - h, page) : 0;
}

/* Whether free block b of segment s may lend a piece to a request of
 * `stream`: idle, or of that stream's own segment (stream order). */
static bool may_lend(const seg_t *s, const block_t *b, core_stream_t stream)
{
    return b->state == BLOCK_FREE && (b->idle || s->stream == stream);
}

/* The smallest piece (a tail, or a head) of the pool's free blocks, other
 * than `not`, with which the request needs no more new bytes than `fresh`
 * besides `other` bytes of another piece; NULL if none. */
static block_t *smallest_piece(core_dev_t *d, pool_t *pool, core_stream_t stream, bool head, size_t rounded,
                               size_t other, size_t fresh, const block_t * not, size_t *bytes)
{
    block_t *best = NULL;
    for (seg_t *s = d->segs; s; s = s->next) {
        if (!s->expandable || s->pool != pool)
            continue;
        for (block_t *b = s->first; b; b = b->next) {
            size_t v = b != not &&may_lend(s, b, stream) ? (head ? lendable_head(b) : lendable_tail(b)) : 0;
            if (v && (!best || v < *bytes) && share_fresh(rounded, other, v, s->page) <= fresh) {
                best = b;
                *bytes = v;
            }
        }
    }
    return best;
}

/* The share that maps fewer new bytes than `need` (a plain placement's)
 * for `rounded` bytes of (pool, stream), and the lowest unmapped range of
 * the request's segments that holds it.  The fewest new bytes, then the
 * fewest pages shared (a tail before a head), then the smallest pieces
 * that give them (the larger ones are kept for larger requests).  A piece
 * of another stream's segment is lent only when idle (no queued work can
 * use it). */
bool share_pick(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t rounded, size_t need, share_t *out)
{
    /* the largest tail and head, and the largest of each from another
     * block than the other's (a block lends one piece at a time) */
    size_t page = exp_page(d, pool), tm = 0, hm = 0, tm2 = 0, hm2 = 0;
    block_t *tmax = NULL, *hmax = NULL;
    for (seg_t *s = d->segs; s; s = s->next) {
        if (!s->expandable || s->pool != pool)
            continue;
        for (block_t *b = s->first; b; b = b->next) {
            if (!may_lend(s, b, stream))
                continue;
            size_t t = lendable_tail(b), h = lendable_head(b);
            if (t > tm)
                tmax = b, tm = t;
            if (h > hm)
                hmax = b, hm = h;
        }
    }
    for (seg_t *s = d->segs; tmax && tmax == hmax && s; s = s->next) {
        if (!s->expandable || s->pool != pool)
            continue;
        for (block_t *b = s->first; b; b = b->next)
            if (b != tmax && may_lend(s, b, stream)) {
                size_t t = lendable_tail(b), h = lendable_head(b);
                tm2 = t > tm2 ? t : tm2;
                hm2 = h > hm2 ? h : hm2;
            }
    }
    *out = (share_t){0};
    size_t best = need, f;
    if (tmax && (f = share_fresh(rounded, tm, 0, page)) < best) {
        size_t t = 0;
        block_t *tb = smallest_piece(d, pool, stream, false, rounded, 0, f, NULL, &t);
        *out = (share_t){tb, NULL, t, 0, NULL, f};
        best = f;
    }
    if (hmax && (f = share_fresh(rounded, 0, hm, page)) < best) {
        size_t h = 0;
        block_t *hb = smallest_piece(d, pool, stream, true, rounded, 0, f, NULL, &h);
        *out = (share_t){NULL, hb, 0, h, NULL, f};
        best = f;
    }
    /* both: the largest pair from two blocks, then the smallest tail that
     * does as well with the head, and the smallest head with that tail */
    size_t pt = tm, ph = hm;
    if (tmax == hmax) {
        if (tm + hm2 >= tm2 + hm)
            ph = hm2;
        else
            pt = tm2;
    }
    if (pt && ph && (f = share_fresh(rounded, pt, ph, page)) < best) {
        size_t t = 0, h = 0;
        block_t *tb = smallest_piece(d, pool, stream, false, rounded, ph, f, NULL, &t);
        block_t *hb = tb ? smallest_piece(d, pool, stream, true, rounded, t, f, tb, &h) : NULL;
        if (hb)
            *out = (share_t){tb, hb, t, h, NULL, f};
    }
    if (!out->tail_donor && !out->head_donor)
        return false;
    size_t span = out->fresh + page * (!!out->tail_donor + !!out->head_donor);
    for (seg_t *s = d->segs; s && !out->room; s = s->next) {
        if (!s->expandable || s->pool != pool || s->stream != stream)
            continue;
        for (block_t *b = s->first; b && !out->room; b = b->next)
            if (b->state == BLOCK_UNMAPPED && b->size >= span)
                out->room = b;
    }
    return out->room != NULL;
}

/* The lent piece `lent` is reached from `at` (its second mapping) when
 * `out`, from where it lies again when not: the events that say so. */
void share_piece_moved(core_dev_t *d, const block_t *lent, uintptr_t at, bool out)
{
    const seg_t *s1 = lent->seg, *s2 = lent->alias->seg;
    core_emit(d, out ? CORE_EV_PIECE_OUT : CORE_EV_PIECE_IN, lent->addr, lent->size, s1->stream, s1->pool->owner->id,
              0);
    core_emit(d, out ? CORE_EV_PIECE_IN : CORE_EV_PIECE_OUT, at, lent->size, s2->stream, s2->pool->owner->id, 0);
}

/* Takes the piece of `bytes` of donor b (a head: its end; a tail: its
 * start) out of its free tree as a LENT block, the rest staying free;
 * spare: a block struct, taken (NULL'ed) when used.  Returns the piece. */
static block_t *lend(block_t *b, size_t bytes, bool head, block_t **spare)
{
    pool_tree_remove(b->pool, b);
    block_t *lent = b;
    if (b->size > bytes) {
        block_split(b, head ? b->addr + b->size - bytes : b->addr + bytes, *spare);
        if (head) {
            lent = *spare;
            pool_tree_insert(b->pool, b);
        } else {
            pool_tree_insert((*spare)->pool, *spare);
        }
        *spare = NULL;
    }
    lent->state = BLOCK_LENT;
    return lent;
}

/* Maps and links share p: returns the free block at the request's start
 * (for pool_take), NULL (nothing changed) when the backend refuses. */
block_t *share_take(core_dev_t *d, const share_t *p, size_t rounded, seg_failure_t *why)
{
    block_t *u = p->room;
    seg_t *s2 = u->seg;
    size_t page = s2->page;
    /* the range: [the tail's page][fresh][the head's page] */
    uintptr_t q0 = u->addr, fa = q0 + (p->tail_donor ? page : 0), ha = fa + p->fresh;
    uintptr_t end = ha + (p->head_donor ? page : 0);
    uintptr_t tfrom = p->tail_donor ? p->tail_donor->addr + p->tail - page : 0;
    uintptr_t hfrom = p->head_donor ? p->head_donor->addr + p->head_donor->size - p->head : 0;
    block_t *spare[6] = {0};
    if (!block_new_n(d, spare, 6)) {
        why->backend_error = CORE_EFAIL;
        return NULL;
    }
    int r = CORE_OK;
    bool tmapped = false, hmapped = false;
    if (p->tail_donor && (r = d->be.map_alias(d->be.ctx, d->device, q0, tfrom, page)) == CORE_OK)
        tmapped = true;
    if (r == CORE_OK && p->head_donor && (r = d->be.map_alias(d->be.ctx, d->device, ha, hfrom, page)) == CORE_OK)
        hmapped = true;
    if (r == CORE_OK && p->fresh)
        r = d->be.map(d->be.ctx, d->device, fa, p->fresh, page);
    if (r != CORE_OK) {
        if (tmapped)
            d->be.unmap(d->be.ctx, d->device, q0, page);
        if (hmapped)
            d->be.unmap(d->be.ctx, d->device, ha, page);
        for (int i = 0; i < 6; i++)
            block_delete(d, spare[i]);
        why->backend_error = r;
        return NULL;
    }
    bool idle = (!p->tail_donor || p->tail_donor->idle) && (!p->head_donor || p->head_donor->idle);
    block_t *tl = p->tail_donor ? lend(p->tail_donor, p->tail, false, &spare[0]) : NULL;
    block_t *hl = p->head_donor ? lend(p->head_donor, p->head, true, &spare[1]) : NULL;
    /* the borrower's range [q0, end): foreign bytes before the tail and
     * after the head, the rest free */
    if (u->addr + u->size > end)
        exp_split_unmapped(u, end, &spare[2]);
    block_t *room = u;
    if (tl) {
        room = spare[3];
        spare[3] = NULL;
        block_split(u, q0 + page - p->tail, room);
        u->state = BLOCK_FOREIGN;
        u->alias = tl;
        tl->alias = u;
    }
    if (hl) {
        block_t *f = spare[4];
        spare[4] = NULL;
        block_split(room, ha + p->head, f);
        f->state = BLOCK_FOREIGN;
        f->alias = hl;
        hl->alias = f;
    }
    if (tl)
        share_piece_moved(d, tl, q0 + page - p->tail, true);
    if (hl)
        share_piece_moved(d, hl, ha, true);
    room->state = BLOCK_UNMAPPED; /* for pool_insert_free, which frees it */
    s2->aliased += page * (!!tl + !!hl);
    d->stats.num_shared_pages += !!tl + !!hl;
    if (p->fresh)
        exp_mapped_stat(d, s2, fa, p->fresh, +1);
    room = pool_insert_free(d, room);
    if (!idle)
        room->idle = false; /* the lent bytes: the lender's stream's queued work may still use them */
    /* with a head alone the request ends where the piece does: the free
     * front before it stays */
    uintptr_t at = !tl && hl ? ha + p->head - rounded : room->addr;
    if (at > room->addr) {
        exp_carve(room, at, spare[5]);
        spare[5] = NULL;
        room = room->next;
    }
    for (int i = 0; i < 6; i++)
        if (spare[i])
            block_delete(d, spare[i]);
    return room;
}

/* Whether FOREIGN block f starts its page (the second mapping lends a
 * tail: the borrower's bytes follow f) or ends it (a head: they precede). */
bool share_foreign_first(const block_t *f)
{
    return (f->addr - f->seg->addr) % f->seg->page == 0;
}

/* The free block that covers the borrower's bytes of FOREIGN block f's
 * page (they are all free again), else NULL. */
block_t *share_over(const block_t *f)
{
    const seg_t *s = f->seg;
    if (share_foreign_first(f)) {
        block_t *n = f->next;
        return n && n->state == BLOCK_FREE && n->addr + n->size >= f->addr + s->page ? n : NULL;
    }
    block_t *n = f->prev;
    uintptr_t ps = f->addr + f->size - s->page;
    return n && n->state == BLOCK_FREE && n->addr <= ps ? n : NULL;
}

/* Ends the sharing of FOREIGN block f's page once its borrowed bytes are
 * free and idle: the second mapping is unmapped (its addresses unmapped
 * again) and the lent piece is free where it lies.  False when it cannot
 * end yet (or no block struct can be had). */
bool share_end(core_dev_t *d, block_t *f)
{
    block_t *n = share_over(f);
    if (!n || !n->idle)
        return false;
    seg_t *s = f->seg;
    bool first = share_foreign_first(f);
    uintptr_t ps = first ? f->addr : f->addr + f->size - s->page, pe = ps + s->page;
    /* the free bytes beyond the page stay free */
    bool cut = first ? n->addr + n->size > pe : n->addr < ps;
    block_t *rest = cut ? block_new(d) : NULL;
    if (cut && !rest)
        return false;
    pool_tree_remove(n->pool, n);
    if (cut) {
        block_split(n, first ? pe : ps, rest); /* n: the low part, rest: the high */
        if (first) {
            pool_tree_insert(rest->pool, rest);
        } else {
            pool_tree_insert(n->pool, n);
            n = rest;
        }
    }
    /* n is now exactly the borrower's bytes: f takes them in, unmapped */
    if (first) {
        f->next = n->next;
        if (n->next)
            n->next->prev = f;
    } else {
        f->prev = n->prev;
        if (n->prev)
            n->prev->next = f;
        else
            s->first = f;
    }
    block_delete(d, n);
    block_t *lent = f->alias;
    share_piece_moved(d, lent, first ? ps + f->size : ps, false);
    d->be.unmap(d->be.ctx, d->device, ps, s->page);
    s->aliased -= s->page;
    f->alias = NULL;
    f->addr = ps;
    f->size = s->page;
    f->state = BLOCK_UNMAPPED;
    exp_unmapped_merge(d, f);
    lent->alias = NULL;
    pool_insert_free(d, lent); /* idle: the borrower's bytes were */
    return true;
}
