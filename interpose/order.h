/*
 * The device ordered after fences (order.c): hand-outs' waits and stops,
 * and the probe of the legacy default stream before a plain free.
 */
#ifndef CUCACHE_INTERPOSE_ORDER_H
#define CUCACHE_INTERPOSE_ORDER_H

#include <stdint.h>

#include "core.h"
#include "cucache/cuda_api.h"
#include "hook.h"

/* The backend's fence_order (core.h): orders the device after the fence. */
int hook_order_fence(void *ctx, int device, uint64_t event, uint64_t first_alloc);
/* A non-blocking stream created on hd's device waits for the fences the
 * device was ordered after (called with hd->lock held). */
void hook_order_new_stream(hook_dev_t *hd, CUstream s);
/* The device's context is gone (hook_dev_drop; hd->lock held): forgets the
 * fences the device was ordered after without touching their events. */
void hook_order_drop(hook_dev_t *hd);
/* Waits on the host for the fences the device was ordered after that may
 * have handed out memory of allocation number `alloc` (core_ptr_info_t.id's
 * number; UINT64_MAX: all of them): before memory leaves this process's
 * streams (an IPC export, a library's question before RDMA, a second
 * context). */
void hook_order_wait(hook_dev_t *hd, uint64_t alloc);
/* The allocation number of a block id (core_ptr_info_t.id). */
static inline uint64_t hook_alloc_number(uint64_t id)
{
    return (id & ~CORE_ID_TAG) >> 6;
}
/* Stops the device's hand-outs for good (core_stop_hand_outs, and a trace
 * record, once), then waits for the fences handed out so far;
 * every call waits. */
void hook_order_stop(hook_dev_t *hd);
/* Before a plain free, while the program has one stream of its own: whether
 * its work also runs on the legacy default stream (order.c's probe, at most
 * once a millisecond); if so, counts it (hook_stream_default_busy). */
void hook_order_probe(hook_dev_t *hd);
/* The trace's record that the device stopped handing out, once. */
void hook_order_note_stopped(hook_dev_t *hd);

#endif
