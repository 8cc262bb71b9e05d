/*
 * An in-process backend: a device that exists only as numbers.  Segments
 * get unique addresses from a bump pointer and count against a capacity;
 * events are marks on one logical timeline.  Used by the trace replay, the
 * benchmarks and the unit tests, which also use its controls: complete the
 * recorded events, fail the next allocations, read the counters.
 *
 * By default (auto_complete) the device is idle: every event has completed
 * by the time it is queried.  Tests turn that off to keep frees pending.
 * A hold (core_hold) with token t is over once holds_over >= t: tests raise
 * it as another process would close what it had open.
 *
 * With `orders` the backend can order the device after a fence
 * (fence_order), as the interposer's does: the replays that model a live
 * run set it.
 *
 * Virtual memory: reservations take addresses only; map charges its pages
 * against the capacity like segments, page by page (one physical
 * allocation each), and unmap gives them back; unmapping a page that is
 * not mapped is counted (n_bad_unmap), not done.  A second mapping
 * (map_alias) of mapped pages charges nothing; its unmap frees nothing.
 */
#ifndef CUCACHE_CORE_BACKEND_MEM_H
#define CUCACHE_CORE_BACKEND_MEM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"

typedef struct mem_backend_s {
    pthread_mutex_t lock;
    size_t capacity;     /* bytes the device has */
    size_t total;        /* mem_info's total (0: capacity): a device of which others hold the rest */
    size_t used;         /* bytes in live segments */
    uintptr_t next_addr; /* bump pointer (addresses are never reused) */
    uint64_t next_event; /* last event handle given */
    uint64_t completed;  /* events up to this handle have completed */
    bool auto_complete;  /* events complete as they are recorded */
    bool solo;           /* one thread only (a what-if replay): the lock is not taken */
    bool orders;         /* has fence_order, as the interposer's backend has (set before mem_backend_vtable):
                          * ordering the device after a fence always succeeds, and is counted */
    uint64_t n_order;
    uint64_t ordered;    /* the newest fence the device was ordered after (fence_order) */
    int fail_allocs;     /* the next N seg_alloc calls fail ... */
    int fail_code;       /* ... with this (CORE_ENOMEM or CORE_EFAIL) */
    int fail_records;    /* the next N event_record calls fail (a capture began, a faulted context) */
    int fail_syncs;      /* the next N device_sync calls fail (a capture began) */
    uint64_t holds_over; /* core_hold tokens up to this one are released (tests raise it) */
    /* virtual memory (expandable segments) */
    size_t granularity; /* vmm_granularity's answer; 0: no virtual memory (2 MiB by default) */
    int fail_maps;      /* the next N map calls fail with CORE_ENOMEM, after mapping half their pages */
    uintptr_t *pages;   /* mapped granules' addresses, sorted */
    size_t npages, cap_pages;
    size_t page; /* the page of the last map call (for counting pages) */
    uint64_t n_va, n_va_release, n_map, n_map_pages, n_unmap, n_unmap_pages;
    uint64_t n_bad_unmap; /* unmap of a page that is not mapped */
    uint64_t n_unmap_busy; /* unmaps while an event recorded had not completed (work may be queued) */
    /* second mappings (map_alias): [addr, addr + size) maps what `from`
     * maps, charging nothing; unmapped by an unmap of exactly that range */
    struct mem_alias_s {
        uintptr_t addr, from;
        size_t size;
    } *alias;
    size_t nalias, cap_alias;
    uint64_t n_alias, n_bad_alias; /* map_alias calls, and those refused (a range not mapped, or taken) */
    uint64_t n_hold_query;
    /* counters */
    uint64_t n_alloc, n_free, n_record, n_query, n_wait, n_sync, n_fence;
    uint64_t n_bad_free; /* seg_free of an address that is not a live segment */
    size_t max_seg;      /* the largest segment or reservation made: no block was larger */
    /* live segments, for checking frees (small: segments are few) */
    struct {
        uintptr_t addr;
        size_t size;
    } *segs;
    size_t nsegs, cap_segs;
} mem_backend_t;

void mem_backend_init(mem_backend_t *m, size_t capacity);
void mem_backend_fini(mem_backend_t *m);
/* The vtable for core_dev_new (ctx = m). */
core_backend_t mem_backend_vtable(mem_backend_t *m);
/* Marks every event recorded so far completed. */
void mem_backend_complete_all(mem_backend_t *m);
/* Bytes mapped through the virtual memory calls now (second mappings not
 * counted: they hold no memory of their own). */
size_t mem_backend_mapped(mem_backend_t *m);
/* The address whose memory addr reaches: through a second mapping, the
 * first mapping's address of the same byte; else addr. */
uintptr_t mem_backend_resolve(mem_backend_t *m, uintptr_t addr);

#endif
