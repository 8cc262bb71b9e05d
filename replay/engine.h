/*
 * The engine's own types, shared by its three files (replay.h has the map
 * of the whole tool):
 *
 *   engine.c   the replay loop: each event through the core or a reference
 *              model, the peaks, the curve, the result
 *   backend.c  a replayed device (rp_dev_t): the core's backend over the
 *              pages and addresses of device.c, and the markers of
 *              core/backend_mem.c
 *   live.c     the live allocations by recorded address (rp_livemap_t)
 */
#ifndef CUCACHE_REPLAY_ENGINE_H
#define CUCACHE_REPLAY_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend_mem.h"
#include "core.h"
#include "hashtab.h"
#include "replay.h"

enum {
    RP_MAX_DEVICES = 64, /* the core's limit (core/alloc.c) */
    RP_MAX_CAPTURES = 64,
};

/* ------------------------------------------------------------------------
 * A replayed device (backend.c)
 * ---------------------------------------------------------------------- */

typedef struct rp_capture_s {
    uint32_t tid;
    uint64_t stream;
} rp_capture_t;

typedef struct rp_dev_s {
    mem_backend_t mb;                       /* markers (events, fences): completed at once unless the replay is busy */
    core_backend_t mem;                     /* mb's vtable */
    rp_space_t space;                       /* pages and addresses (device.c) */
    core_dev_t *core;                       /* NULL for the reference models */
    int capture_pool;                       /* 0 until the first capture */
    rp_capture_t captures[RP_MAX_CAPTURES]; /* captures under way */
    int ncaptures;
    uint64_t allocated, reserved; /* bytes, followed through the observer (or the models) */
    int device;
    uint64_t va_next; /* expandable segments' addresses: a range of their own */
    unsigned streams; /* the program's streams the recording counted (TRACE_REC_COUNTED) */
    rp_result_t *res; /* for the virtual memory call counts */
    uintptr_t *alias; /* second mappings of shared pages (map_alias): their addresses, charged nothing */
    size_t nalias, cap_alias;
} rp_dev_t;

/* A device of `capacity` bytes: with conf, the core over it (the observer
 * is the caller's to set); without, the markers alone (the reference
 * models).  busy: markers complete only when completed (rp_opts_t.busy).
 * NULL when host memory is short or the core refused. */
rp_dev_t *rp_dev_new(int device, uint64_t capacity, bool busy, const conf_t *conf, rp_result_t *res);
/* Destroys the core, then the device. */
void rp_dev_free(rp_dev_t *rd);

/* ------------------------------------------------------------------------
 * The live allocations (live.c)
 * ---------------------------------------------------------------------- */

/* One allocation of the job, by the address it got in the recording. */
typedef struct rp_live_s {
    uint64_t addr;      /* the replay's address; 0: not held here (failed, or a graph node) */
    uint64_t requested; /* bytes asked for */
    uint64_t charged;   /* bytes the reference models reserve */
    uint64_t held;      /* ... and count as allocated */
    int16_t device;
    bool fallback;    /* addr is the runtime's allocation (opts->fallback), not the core's */
    size_t next_free; /* on the free list: the next free entry's number + 1 (0: the last) */
} rp_live_t;

/* Recorded address -> entry (a number into ent, through core/hashtab);
 * freed entries are kept on a free list for the next allocation.  A
 * zeroed map is empty. */
typedef struct rp_livemap_s {
    ht_t index;     /* recorded address -> entry number */
    rp_live_t *ent; /* cap_ent entries; n_ent used or free */
    size_t n_ent, cap_ent;
    size_t free_head; /* the first free entry's number + 1; 0: none */
} rp_livemap_t;

/* The entry of a recorded address, or NULL.  Valid until the next put. */
rp_live_t *rp_livemap_find(rp_livemap_t *m, uint64_t addr);
/* A zeroed entry for addr, replacing any; NULL when host memory is short. */
rp_live_t *rp_livemap_put(rp_livemap_t *m, uint64_t addr);
/* Forgets addr's entry (when there is one). */
void rp_livemap_del(rp_livemap_t *m, uint64_t addr);
void rp_livemap_fini(rp_livemap_t *m);

#endif
