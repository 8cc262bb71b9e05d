/*
 * Expandable segments (expandable_segments:true, PyTorch's key and
 * meaning), on the backend's virtual memory: expand.c grows them, share.c
 * shares pages, unmap.c gives pages back; this header is what the three
 * share.
 *
 * A segment reserves addresses for 9/8 of the device's memory, as PyTorch
 * does, and starts as one UNMAPPED block: addresses with nothing behind
 * them.  Memory is mapped and given back in pages (the small pool's page is
 * the device's granularity, at least small_segment_size; the large pool's
 * is expandable_page_mb).  Allocated, pending and free blocks lie on mapped
 * pages; UNMAPPED blocks cover whole pages and never touch another UNMAPPED
 * block; a free and an unmapped block never merge (types.h).
 *
 * Growing.  A request that no free block fits takes the place in its
 * (pool, stream)'s segments that needs the fewest new pages mapped, the
 * lowest address among equals, in any segment of that pool and stream; a
 * new segment when none has room.  The places tried are the start of each
 * range of free and unmapped blocks, and its end flush against the live
 * block that follows it: that block's partly used page serves part of the
 * request (docs/fragmentation.md measures both).  Mapping is all or
 * nothing: when the device or the limit refuses a page, the pages this
 * call mapped are unmapped again and the pool is as it was.
 *
 * Giving back.  exp_unmap_free unmaps every whole page inside a free block,
 * wherever the block lies (PyTorch unmaps the same pages).  Unmapping,
 * unlike cudaFree, does not wait for queued work: a free block is "idle"
 * when it became free behind a completed fence or event, or the device was
 * synchronised since; one freed in stream order (or by a rule that trusts it) is
 * not, and its pages go only after one device synchronisation (PyTorch
 * synchronises every time).  A block taken from free memory that was not
 * idle stays not idle when it is freed behind an event: the event orders
 * its own work, not the work queued before it was taken.  During a capture, where no synchronisation is
 * allowed, idle pages still go (PyTorch releases nothing then).  A segment
 * left with nothing mapped gives its addresses back.  It runs when memory
 * is short (the retry ladder), on empty_cache, and above
 * garbage_collection_threshold.
 *
 * Shared pages (expandable_share_pages:true).  A request that must map
 * pages may instead start in the free tail of a page whose head a block of
 * the same pool holds, and end in the free head of a page whose tail one
 * holds (in any segment: idle memory, or the request's own stream's; two
 * blocks, one piece each): each such page is mapped a second time at the
 * ends of a range of the request's segment (map_alias), new pages between,
 * so that the request maps up to two pages fewer.  A piece becomes a LENT
 * block where it lies, and the bytes of its second mapping that are not
 * the request's a FOREIGN block (at the page's start for a tail, at its
 * end for a head): neither is ever free, allocated or unmapped by the
 * paths above, so each byte of the page is used through one mapping only.
 * Once the borrowed bytes on the page are free and idle again,
 * exp_unmap_free unmaps the second mapping first (share_end) and the piece
 * is free where it lies.  The second mapping is not counted as reserved
 * memory (seg_t.aliased).  Pages are shared only when memory is tight
 * (memory_tight: an eighth of the device or of the allowed bytes left).
 *
 * Statistics follow PyTorch's: mapped bytes are reserved bytes, each map or
 * unmap call counts as a device allocation or free, an expandable segment
 * is not counted as a segment, and its free blocks are not inactive splits.
 */
#ifndef CUCACHE_CORE_EXPAND_H
#define CUCACHE_CORE_EXPAND_H

#include "types.h"

static inline uintptr_t up(uintptr_t a, size_t to)
{
    return (a + to - 1) / to * to;
}

static inline uintptr_t down(uintptr_t a, size_t to)
{
    return a / to * to;
}

/* Page boundaries count from the segment's start (a page need not be a
 * power of two, and addresses are aligned to the granularity only). */
static inline uintptr_t pg_up(const seg_t *s, uintptr_t a)
{
    return s->addr + up(a - s->addr, s->page);
}

static inline uintptr_t pg_down(const seg_t *s, uintptr_t a)
{
    return s->addr + down(a - s->addr, s->page);
}

/* expand.c */
/* The page of a pool's expandable segments. */
size_t exp_page(const core_dev_t *d, const pool_t *pool);
/* [addr, addr+len) of s mapped (sign 1) or unmapped (-1): reserved bytes,
 * device calls and the event. */
void exp_mapped_stat(core_dev_t *d, seg_t *s, uintptr_t addr, size_t len, int sign);
/* Splits unmapped block b at page boundary at with the spare struct *spare
 * (taken). */
void exp_split_unmapped(block_t *b, uintptr_t at, block_t **spare);
/* Splits free block m at `at` with the block struct r: both halves free, in
 * the tree, for pool_take to take the upper one at once. */
void exp_carve(block_t *m, uintptr_t at, block_t *r);

/* unmap.c */
/* Merges the UNMAPPED block b with its UNMAPPED neighbours. */
block_t *exp_unmapped_merge(core_dev_t *d, block_t *b);

/* share.c */
/* The pages to share for a request: free blocks that lend a piece of one
 * of their pages, the tail of a first page (the request starts in it) and
 * the head of a last page (the request ends in it), either or both; the
 * unmapped block of the request's segment whose range maps them a second
 * time (the tail's page first, the head's last) with the bytes of new
 * pages between. */
typedef struct share_s {
    block_t *tail_donor, *head_donor;
    size_t tail, head; /* the pieces' bytes */
    block_t *room;
    size_t fresh;
} share_t;
/* Whether pages can be shared for a request of `rounded` bytes in (pool,
 * stream) that must map `need` new bytes, and which (*sh). */
bool share_pick(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t rounded, size_t need, share_t *sh);
/* Maps the shared pages of *p and the new ones between; the block that
 * serves the request, or NULL (nothing changed; why set). */
block_t *share_take(core_dev_t *d, const share_t *p, size_t rounded, seg_failure_t *why);
/* The lent piece is reached from `at` (its second mapping) when `out`, from
 * where it lies again when not: the events that say so. */
void share_piece_moved(core_dev_t *d, const block_t *lent, uintptr_t at, bool out);
/* Whether FOREIGN block f starts its page (a tail lent) or ends it (a head). */
bool share_foreign_first(const block_t *f);
/* The free block that covers the borrower's bytes of FOREIGN block f's
 * page (they are all free again), else NULL. */
block_t *share_over(const block_t *f);
/* Ends the sharing of FOREIGN block f's page once its borrowed bytes are
 * free and idle: the second mapping is unmapped and the lent piece is free
 * where it lies.  False when it cannot end yet (or no block struct can be
 * had). */
bool share_end(core_dev_t *d, block_t *f);

#endif
