/*
 * The ring of recent events behind a snapshot's device_traces.
 *
 * The core calls st_ring_observe with the device lock held, on the
 * allocation path, so an event costs one clock read and one store: no lock
 * (the device lock already orders every push and every copy), no
 * allocation, no formatting.  Snapshots copy the ring under the same lock
 * (core_layout's under_lock) and format outside it.
 */
#include <string.h>
#include <time.h>

#include "hostalloc.h"
#include "st.h"

int st_ring_init(st_ring_t *r, size_t capacity)
{
    memset(r, 0, sizeof *r);
    if (capacity == 0)
        return 0; /* a ring that keeps nothing */
    r->ev = hostalloc_calloc(capacity, sizeof *r->ev);
    if (!r->ev)
        return -1;
    r->capacity = capacity;
    return 0;
}

void st_ring_fini(st_ring_t *r)
{
    hostalloc_free(r->ev);
    memset(r, 0, sizeof *r);
}

/* One to one; the core has no snapshot event (the caller pushes those). */
static st_action_t action_of(core_event_kind_t kind)
{
    switch (kind) {
    case CORE_EV_ALLOC:
        return ST_ALLOC;
    case CORE_EV_FREE_REQUESTED:
        return ST_FREE_REQUESTED;
    case CORE_EV_FREE_COMPLETED:
        return ST_FREE_COMPLETED;
    case CORE_EV_SEGMENT_ALLOC:
        return ST_SEGMENT_ALLOC;
    case CORE_EV_SEGMENT_FREE:
        return ST_SEGMENT_FREE;
    case CORE_EV_SEGMENT_MAP:
    case CORE_EV_PIECE_IN: /* a shared page's bytes, reached from here now */
        return ST_SEGMENT_MAP;
    case CORE_EV_SEGMENT_UNMAP:
    case CORE_EV_PIECE_OUT:
        return ST_SEGMENT_UNMAP;
    case CORE_EV_OOM:
        break;
    }
    return ST_OOM;
}

void st_ring_observe(void *ctx, const core_event_t *e)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* For CORE_EV_OOM the core passes the device's free bytes as addr
     * (the snapshot's device_free; 0 when the query failed, as PyTorch). */
    const st_trace_ev_t ev = {
        .time_us = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u,
        .addr = e->addr,
        .size = e->size,
        .stream = e->stream,
        .pool_id = e->pool_id,
        .site = e->site,
        .action = (uint8_t)action_of(e->kind),
    };
    st_ring_push(ctx, &ev);
}

void st_ring_push(st_ring_t *r, const st_trace_ev_t *e)
{
    if (r->capacity == 0)
        return;
    r->ev[r->pushed % r->capacity] = *e;
    r->pushed++;
}

size_t st_ring_copy(const st_ring_t *r, st_trace_ev_t **out)
{
    *out = NULL;
    size_t n = r->pushed < r->capacity ? (size_t)r->pushed : r->capacity;
    if (n == 0)
        return 0;
    st_trace_ev_t *copy = hostalloc_malloc(n * sizeof *copy);
    if (!copy)
        return 0;
    /* The oldest held event sits where the next push will land. */
    size_t start = (size_t)(r->pushed % r->capacity);
    if (r->pushed < r->capacity)
        start = 0;
    size_t first = r->capacity - start < n ? r->capacity - start : n;
    memcpy(copy, r->ev + start, first * sizeof *copy);
    memcpy(copy + first, r->ev, (n - first) * sizeof *copy);
    *out = copy;
    return n;
}
