/*
 * Fences (backend.c makes them, order.c orders the device after them): one
 * event on every stream that could use a device's memory, and the spare
 * events they are made of.
 */
#ifndef CUCACHE_INTERPOSE_FENCE_H
#define CUCACHE_INTERPOSE_FENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cucache/cuda_api.h"
#include "hook.h"

/* A fence: one event on every stream that could use the device's memory. */
typedef struct fence_s {
    size_t n;             /* events */
    size_t owned;         /* ev[0..owned) are the fence's; the rest are retired
                             streams' events it holds a reference on */
    bool ordered;         /* on hd->ordered: the device waits for it (fence_order) */
    bool released;        /* the core released it: freed once it completes */
    CUevent hub;          /* ordered: recorded on the hub stream after it waited for
                             every event (NULL: each stream waits for every event) */
    uint64_t first_alloc; /* ordered: the number of the first allocation after
                             the hand-out (core.h, fence_order) */
    uint64_t gen;         /* hd->streams_gen when recorded */
    CUstream *on;         /* on[i]: the stream ev[i] was recorded on (NULL for a
                             retired stream's event); after ev[] */
    CUevent ev[];         /* all must complete */
} fence_t;

/* Called with hd->lock held and the primary context current: a spare event,
 * or a new one (NULL on failure). */
CUevent hook_event_get(hook_dev_t *hd);
/* Called with hd->lock held: back among the spares (or destroyed). */
void hook_event_put(hook_dev_t *hd, CUevent e);
/* Called with hd->lock held: gives the fence's events back and frees it. */
void hook_fence_free(hook_dev_t *hd, fence_t *f);
/* Called with hd->lock held: whether every event of f completed (an error,
 * a faulted context, counts as completed). */
bool hook_fence_done(const fence_t *f);

#endif
