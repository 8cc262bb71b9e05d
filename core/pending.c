/*
 * Pending frees: blocks the program freed that queued work may still use.
 *
 * Fenced frees (a plain cudaFree under the rules that fence) join the open batch.  The
 * batch's fence is recorded lazily, when an allocation first needs memory
 * the cache cannot give: a fence recorded later than the frees covers them
 * (it orders after everything queued before it), and one fence serves every
 * free since the previous one, so its cost is shared.  Closed batches
 * complete in order.
 *
 * Frees ordered on another stream than the block's (cudaFreeAsync on a
 * second stream) wait behind an event recorded on that stream at the free;
 * frees of blocks used on other streams (record_stream), behind one marker
 * on each of those streams and the free's (pend_after_streams).  An
 * allocation on the block's own stream may take them before the marker
 * completes, its stream made to wait for it on the device (cross.h).
 *
 * A block another process holds (core_hold: an IPC peer has it open) goes
 * on the held list when freed and stays there, whatever the program
 * synchronises, until the backend says the hold is over; then it waits for
 * a fence like any fenced free, for the work this process queued on it.
 *
 * A pending block is still active (PyTorch's meaning) and not in any free
 * tree; when its fence or event completes it is released: merged with free
 * neighbours and put back in its pool.
 */
#include <time.h>

#include "hostalloc.h"
#include "types.h"

/* The streams one marker of a free covers at most (pend_after_streams);
 * a block used on more waits for the fence. */
#define PEND_STREAMS_MAX 16

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void pend_fenced(core_dev_t *d, block_t *b)
{
    b->state = BLOCK_PENDING;
    b->event = 0;
    b->pend_next = d->open.blocks;
    d->open.blocks = b;
    d->open.bytes += b->size;
    d->fenced_bytes += b->size;
    d->pending_bytes += b->size;
}

/* Whether the hold on b is over (the backend is asked). */
static bool hold_over(core_dev_t *d, const block_t *b)
{
    return d->be.hold_query && d->be.hold_query(d->be.ctx, d->device, b->hold) == 1;
}

void pend_held(core_dev_t *d, block_t *b)
{
    if (hold_over(d, b)) {
        b->hold = 0;
        pend_fenced(d, b);
        return;
    }
    b->state = BLOCK_PENDING;
    b->event = 0;
    b->pend_next = d->held;
    d->held = b;
    d->pending_bytes += b->size;
}

/* Moves held blocks whose hold ended behind the fence; returns how many. */
static size_t poll_held(core_dev_t *d)
{
    size_t n = 0;
    for (block_t **p = &d->held; *p;) {
        block_t *b = *p;
        if (!hold_over(d, b)) {
            p = &b->pend_next;
            continue;
        }
        *p = b->pend_next;
        d->pending_bytes -= b->size;
        b->hold = 0;
        pend_fenced(d, b);
        n++;
    }
    return n;
}

/* b pending behind the marker ev, on the event list. */
static void pend_on_event(core_dev_t *d, block_t *b, uint64_t ev)
{
    b->state = BLOCK_PENDING;
    b->event = ev;
    b->pend_next = d->event_pending;
    d->event_pending = b;
    d->pending_bytes += b->size;
}

/* Pending behind an event on `stream` (and one on each record_stream use). */
int pend_after_stream(core_dev_t *d, block_t *b, core_stream_t stream)
{
    uint64_t ev = 0;
    if (d->be.event_record(d->be.ctx, d->device, stream, &ev) != CORE_OK)
        return -1;
    pend_on_event(d, b, ev);
    return 0;
}

int pend_after_streams(core_dev_t *d, block_t *b, core_stream_t stream)
{
    if (!d->be.event_record_on)
        return -1;
    core_stream_t on[PEND_STREAMS_MAX];
    size_t n = 0;
    for (uint32_t i = 0; i < b->nuses; i++) {
        if (n == PEND_STREAMS_MAX)
            return -1; /* more than a marker is made for: the fence covers them all */
        on[n++] = b->uses[i];
    }
    if (stream != b->stream) {
        bool known = false;
        for (size_t i = 0; i < n && !known; i++)
            known = on[i] == stream;
        if (!known) {
            if (n == PEND_STREAMS_MAX)
                return -1;
            on[n++] = stream;
        }
    }
    uint64_t ev = 0;
    if (d->be.event_record_on(d->be.ctx, d->device, on, n, &ev) != CORE_OK)
        return -1;
    pend_on_event(d, b, ev);
    return 0;
}

void pend_record_fence(core_dev_t *d)
{
    if (!d->open.blocks || d->capturing)
        return;
    uint64_t ev = 0;
    if (d->be.event_record(d->be.ctx, d->device, 0, &ev) != CORE_OK) {
        /* No fence: the only safe thing is to wait for the device; when
         * even that cannot be done (a capture began on another thread),
         * the batch stays open, its blocks pending. */
        if (d->be.device_sync(d->be.ctx, d->device) == CORE_OK) {
            d->stats.num_sync_all_streams++;
            pend_release_all(d, PEND_KNOWN);
        }
        return;
    }
    fence_batch_t *f = hostalloc_malloc(sizeof *f);
    if (!f) {
        d->be.event_wait(d->be.ctx, d->device, ev);
        d->be.event_release(d->be.ctx, d->device, ev);
        pend_release_all(d, PEND_KNOWN);
        return;
    }
    *f = d->open;
    f->event = ev;
    f->next = NULL;
    if (d->fences_tail)
        d->fences_tail->next = f;
    else
        d->fences = f;
    d->fences_tail = f;
    d->open.blocks = NULL;
    d->open.bytes = 0;
    d->stats.num_fences++;
}

void pend_close(core_dev_t *d)
{
    if (d->held && !d->capturing)
        poll_held(d); /* holds that ended join this fence */
    pend_record_fence(d);
}

/* idle: their fence or event completed (else the device is only ordered
 * after it: work before it may still run) */
static size_t release_list(core_dev_t *d, block_t *b, bool idle)
{
    size_t bytes = 0;
    while (b) {
        block_t *next = b->pend_next;
        b->pend_next = NULL;
        bytes += b->size;
        d->pending_bytes -= b->size;
        pool_release_block(d, b, idle);
        b = next;
    }
    return bytes;
}

size_t pend_release_oldest(core_dev_t *d, pend_why_t why)
{
    fence_batch_t *f = d->fences;
    d->fences = f->next;
    if (!d->fences)
        d->fences_tail = NULL;
    d->be.event_release(d->be.ctx, d->device, f->event);
    d->fenced_bytes -= f->bytes;
    size_t bytes = release_list(d, f->blocks, why == PEND_DONE);
    hostalloc_free(f);
    return bytes;
}

/* Takes the event-pending block at *p off the list, its event released,
 * and frees it (idle: its event completed); returns its bytes. */
static size_t event_block_release(core_dev_t *d, block_t **p, bool idle)
{
    block_t *b = *p;
    size_t bytes = b->size;
    *p = b->pend_next;
    d->be.event_release(d->be.ctx, d->device, b->event);
    b->pend_next = NULL;
    b->event = 0;
    d->pending_bytes -= bytes;
    pool_release_block(d, b, idle);
    return bytes;
}

/* Releases the event-pending blocks whose event completed (wait: all). */
static size_t poll_events(core_dev_t *d, bool wait)
{
    size_t bytes = 0;
    for (block_t **p = &d->event_pending; *p;) {
        block_t *b = *p;
        if (wait)
            d->be.event_wait(d->be.ctx, d->device, b->event);
        else if (d->be.event_query(d->be.ctx, d->device, b->event) != 1) {
            p = &b->pend_next;
            continue;
        }
        bytes += event_block_release(d, p, true); /* its fence or event completed */
    }
    return bytes;
}

/* Whether event-pending block b is one of (pool, stream)'s, of one of the
 * kinds (PEND_ONE_STREAM, PEND_MANY_STREAMS bits). */
static inline bool pend_of(const block_t *b, const pool_t *pool, core_stream_t stream, unsigned kinds)
{
    return b->pool == pool && b->stream == stream && (kinds & (b->nuses ? PEND_MANY_STREAMS : PEND_ONE_STREAM));
}

size_t pend_wait_on_device(core_dev_t *d, const pool_t *pool, core_stream_t stream, size_t rounded, bool completed,
                           unsigned waits)
{
    /* 1. frees whose event completed (when `completed`): released idle, no
     * wait (the list is newest first, so the oldest fitting one is the last
     * seen) */
    size_t bytes = 0;
    bool fits = false;
    block_t **oldest_fit = NULL;
    for (block_t **p = &d->event_pending; *p;) {
        block_t *b = *p;
        if (!pend_of(b, pool, stream, PEND_ONE_STREAM | PEND_MANY_STREAMS)) {
            p = &b->pend_next;
            continue;
        }
        if (completed && d->be.event_query(d->be.ctx, d->device, b->event) == 1) {
            fits |= b->size >= rounded;
            bytes += event_block_release(d, p, true);
            continue;
        }
        if (b->size >= rounded && pend_of(b, pool, stream, waits))
            oldest_fit = p;
        p = &b->pend_next;
    }
    if (fits || !waits)
        return bytes;
    /* 2. the oldest free that serves the request alone: the stream waits
     * for the least recent work (the likeliest to have run) */
    if (oldest_fit) {
        if (d->be.stream_wait(d->be.ctx, d->device, stream, (*oldest_fit)->event) != CORE_OK)
            return bytes;
        return bytes + event_block_release(d, oldest_fit, false); /* work before the event may still run */
    }
    /* 3. none does alone: all of them, merged with their neighbours */
    for (block_t **p = &d->event_pending; *p;) {
        block_t *b = *p;
        if (!pend_of(b, pool, stream, waits)) {
            p = &b->pend_next;
            continue;
        }
        /* refused: the stream cannot wait now, the rest stay pending */
        if (d->be.stream_wait(d->be.ctx, d->device, stream, b->event) != CORE_OK)
            break;
        bytes += event_block_release(d, p, false); /* work before the event may still run */
    }
    return bytes;
}

size_t pend_release_completed(core_dev_t *d)
{
    size_t bytes = 0;
    while (d->fences && d->be.event_query(d->be.ctx, d->device, d->fences->event) == 1)
        bytes += pend_release_oldest(d, PEND_DONE);
    return bytes;
}

size_t pend_poll_some(core_dev_t *d, bool events)
{
    if (d->held && poll_held(d))
        pend_record_fence(d); /* their fence: they are released once it completes */
    size_t bytes = pend_release_completed(d);
    if (d->event_pending && events)
        bytes += poll_events(d, false);
    return bytes;
}

size_t pend_poll(core_dev_t *d)
{
    return pend_poll_some(d, true);
}

bool pend_wait_oldest(core_dev_t *d)
{
    pend_close(d);
    uint64_t t0 = now_ns();
    bool waited = false;
    if (d->fences) {
        d->be.event_wait(d->be.ctx, d->device, d->fences->event);
        pend_release_oldest(d, PEND_DONE);
        waited = true;
    } else if (d->event_pending) {
        block_t *oldest = d->event_pending;
        while (oldest->pend_next)
            oldest = oldest->pend_next;
        d->be.event_wait(d->be.ctx, d->device, oldest->event);
        poll_events(d, false);
        waited = true;
    }
    if (waited) {
        d->stats.num_fence_waits++;
        d->stats.fence_wait_ns += now_ns() - t0;
    }
    return waited;
}

/* Everything pending becomes free: after waiting for each fence and event
 * (wait), or because the device is known idle (the program synchronised).
 * Held blocks stay held, unless their hold is over (asked now). */
void pend_release_all(core_dev_t *d, pend_idle_t how)
{
    bool wait = how == PEND_WAIT;
    uint64_t t0 = now_ns();
    if (d->held)
        poll_held(d); /* into the open batch, released below */
    bool any = d->fences || d->event_pending;
    while (d->fences) {
        if (wait)
            d->be.event_wait(d->be.ctx, d->device, d->fences->event);
        pend_release_oldest(d, PEND_DONE);
    }
    poll_events(d, true);
    block_t *open = d->open.blocks;
    if (open && wait) {
        if (d->be.device_sync(d->be.ctx, d->device) != CORE_OK)
            open = NULL; /* not synchronised (a capture began): the open batch stays pending */
        any = true;
    }
    if (open) {
        d->open.blocks = NULL;
        d->fenced_bytes -= d->open.bytes;
        d->open.bytes = 0;
        release_list(d, open, true);
    }
    if (wait && any) {
        d->stats.num_sync_all_streams++;
        d->stats.fence_wait_ns += now_ns() - t0;
    }
}
