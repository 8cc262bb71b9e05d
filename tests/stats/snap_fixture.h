/*
 * The snapshot fixture shared by test_snapshot.c and snap_write.c: a real
 * core state on the in-process backend (segments with live, pending and
 * free blocks, small and large, a private pool, a released segment and an
 * out-of-memory failure in the event ring), taken the way the interposer
 * takes it (core_layout copying the ring under the device lock), plus a
 * constructed device 2 whose addresses and stream key need all 64 bits.
 * Device 1 has no state: its trace list must be empty.
 */
#ifndef CUCACHE_TESTS_STATS_SNAP_FIXTURE_H
#define CUCACHE_TESTS_STATS_SNAP_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "backend_mem.h"
#include "st.h"

#define SNAP_CONF_TEXT                                                                                                 \
    "max_split_size_mb:64,garbage_collection_threshold:0.8,roundup_power2_divisions:[256:1,512:2,>:8]"
#define SNAP_OOM_SIZE ((size_t)100 << 30) /* the request that fails */
#define SNAP_FAR_DEVICE 2
#define SNAP_FAR_ADDR (UINT64_MAX - ((uint64_t)2 << 20) + 1) /* the last 2 MiB of the address space */
#define SNAP_FAR_STREAM UINT64_MAX
#define SNAP_FAR_FREE ((uint64_t)5 << 30) /* device_free of device 2's oom event */

typedef struct snap_fixture_s {
    mem_backend_t m;
    conf_t conf;
    core_dev_t *d;
    st_ring_t ring;
    /* device 0's blocks, by what the program did with them */
    uintptr_t live_small;    /* 1000 bytes on stream 7, live */
    uintptr_t freed_small;   /* freed at once: an inactive block */
    uintptr_t pending_small; /* freed behind a fence that never completes */
    uintptr_t live_large;    /* 12 MiB on stream 0 */
    uintptr_t pool_block;    /* 6 MiB in the private pool */
    int pool_id;
    uint64_t t_before, t_after; /* CLOCK_REALTIME microseconds around the events */
    /* the snapshot's input */
    core_layout_t layout; /* device 0, from core_layout */
    st_trace_ev_t *trace; /* device 0's ring, copied under the lock */
    size_t ntrace;
    core_seg_info_t far_seg;
    core_block_info_t far_blocks[3];
    core_layout_t far_layout; /* device 2, constructed */
    st_trace_ev_t far_trace[3];
    st_snap_dev_t devs[2];
    st_snapshot_t snap;
} snap_fixture_t;

/* 0, or -1 with why filled. */
int snap_fixture_open(snap_fixture_t *f, char *why, size_t len);
void snap_fixture_close(snap_fixture_t *f);

#endif
