/*
 * The snapshot fixture (snap_fixture.h).
 */
#include "snap_fixture.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "hostalloc.h"

#define MiB ((size_t)1 << 20)

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* What the interposer does under the device lock: mark the snapshot in the
 * ring, then copy it. */
static void take_ring(void *ctx)
{
    snap_fixture_t *f = ctx;
    const st_trace_ev_t mark = {.action = ST_SNAPSHOT, .time_us = now_us()};
    st_ring_push(&f->ring, &mark);
    f->ntrace = st_ring_copy(&f->ring, &f->trace);
}

static uintptr_t alloc_or(snap_fixture_t *f, size_t size, core_stream_t stream, const char *what, char *why, size_t len)
{
    uintptr_t p = core_malloc(f->d, size, stream, NULL);
    if (!p)
        snprintf(why, len, "core_malloc(%zu) for %s failed", size, what);
    return p;
}

/* Device 2: one small segment at the top of the address space, one block
 * in each state, and three events. */
static void build_far(snap_fixture_t *f)
{
    const uintptr_t a = (uintptr_t)SNAP_FAR_ADDR;
    f->far_blocks[0] = (core_block_info_t){a, 512 * 1024, 500000, CORE_BLOCK_ALLOCATED, 1, 0, 0};
    f->far_blocks[1] = (core_block_info_t){a + 512 * 1024, 512 * 1024, 512 * 1024 - 1, CORE_BLOCK_PENDING, 2, 0, 0};
    f->far_blocks[2] = (core_block_info_t){a + MiB, MiB, 0, CORE_BLOCK_FREE, 0, 0, 0};
    f->far_seg = (core_seg_info_t){
        .addr = a,
        .size = 2 * MiB,
        .stream = (core_stream_t)SNAP_FAR_STREAM,
        .small = true,
        .first_block = 0,
        .nblocks = 3,
    };
    f->far_layout = (core_layout_t){SNAP_FAR_DEVICE, &f->far_seg, 1, f->far_blocks, 3};
    const uint64_t t = 1700000000000000u;
    f->far_trace[0] = (st_trace_ev_t){t, a, 2 * MiB, SNAP_FAR_STREAM, 0, ST_SEGMENT_ALLOC, 0};
    f->far_trace[1] = (st_trace_ev_t){t + 1, a, 512 * 1024, SNAP_FAR_STREAM, 0, ST_ALLOC, 0};
    f->far_trace[2] = (st_trace_ev_t){t + 2, SNAP_FAR_FREE, SNAP_OOM_SIZE, SNAP_FAR_STREAM, 0, ST_OOM, 0};
}

int snap_fixture_open(snap_fixture_t *f, char *why, size_t len)
{
    memset(f, 0, sizeof *f);
    why[0] = '\0';
    mem_backend_init(&f->m, (size_t)1 << 30);
    conf_defaults(&f->conf);
    if (conf_parse(&f->conf, SNAP_CONF_TEXT, why, len) != 0)
        return -1;
    core_backend_t be = mem_backend_vtable(&f->m);
    f->d = core_dev_new(&be, 0, &f->conf);
    if (!f->d || st_ring_init(&f->ring, 256) != 0) {
        snprintf(why, len, "out of host memory");
        return -1;
    }
    core_set_observer(f->d, st_ring_observe, &f->ring);
    core_pool_use(f->d, 0);
    f->t_before = now_us();

    /* a segment allocated, used, freed and released */
    uintptr_t x = alloc_or(f, 30 * MiB, 0, "the released segment", why, len);
    if (!x)
        return -1;
    core_free(f->d, x, CORE_FREE_NOW, 0);
    core_empty_cache(f->d, -1);

    /* an out-of-memory failure (before anything pends: the retry ladder
     * waits for pending frees) */
    if (core_malloc(f->d, SNAP_OOM_SIZE, 0, NULL) != 0) {
        snprintf(why, len, "core_malloc(%zu) succeeded on a 1 GiB device", SNAP_OOM_SIZE);
        return -1;
    }

    /* one small segment: live, inactive, pending, live */
    if (!(f->live_small = alloc_or(f, 1000, 7, "live_small", why, len)) ||
        !(f->freed_small = alloc_or(f, 3000, 7, "freed_small", why, len)) ||
        !(f->pending_small = alloc_or(f, 5000, 7, "pending_small", why, len)) ||
        !alloc_or(f, 7000, 7, "the last small block", why, len))
        return -1;
    core_free(f->d, f->freed_small, CORE_FREE_NOW, 7);

    if (!(f->live_large = alloc_or(f, 12 * MiB, 0, "live_large", why, len)))
        return -1;

    f->pool_id = core_pool_create(f->d);
    if (f->pool_id <= 0 || core_pool_use(f->d, f->pool_id) != 0) {
        snprintf(why, len, "core_pool_create/use failed (%d)", f->pool_id);
        return -1;
    }
    f->pool_block = alloc_or(f, 6 * MiB, 7, "pool_block", why, len);
    core_pool_use(f->d, 0);
    if (!f->pool_block)
        return -1;

    /* pending for good: the fence is recorded but never completes */
    f->m.auto_complete = false;
    core_free(f->d, f->pending_small, CORE_FREE_FENCED, 7);

    if (core_check(f->d, why, len) != 0)
        return -1;
    if (core_layout(f->d, &f->layout, take_ring, f) != 0 || !f->trace) {
        snprintf(why, len, "core_layout or st_ring_copy: out of host memory");
        return -1;
    }
    f->t_after = now_us();

    build_far(f);
    f->devs[0] = (st_snap_dev_t){.device = 0,
                                 .layout = &f->layout,
                                 .trace = f->trace,
                                 .ntrace = f->ntrace,
                                 .yields_given = 2,
                                 .yield_bytes_given = 64u << 20,
                                 .yields_received = 1,
                                 .yield_bytes_received = 20u << 20};
    f->devs[1] = (st_snap_dev_t){.device = SNAP_FAR_DEVICE, .layout = &f->far_layout, .trace = f->far_trace, .ntrace = 3};
    f->snap = (st_snapshot_t){f->devs, 2, &f->conf, SNAP_CONF_TEXT};
    return 0;
}

void snap_fixture_close(snap_fixture_t *f)
{
    if (f->d) {
        core_set_observer(f->d, NULL, NULL);
        core_dev_destroy(f->d);
    }
    core_layout_free(&f->layout);
    hostalloc_free(f->trace);
    st_ring_fini(&f->ring);
    mem_backend_fini(&f->m);
    memset(f, 0, sizeof *f);
}
