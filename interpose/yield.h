/*
 * Sharing a GPU with other processes (yield.c; stats/registry.h): this
 * process in the GPU's registry, and the neighbours asked for idle cache
 * after a failure.
 */
#ifndef CUCACHE_INTERPOSE_YIELD_H
#define CUCACHE_INTERPOSE_YIELD_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"
#include "hook.h"
#include "registry.h"

enum {
    HOOK_ASK_MAX = 32,    /* neighbours asked for one allocation, at most */
    HOOK_YIELD_BOUND = 5, /* a give that frees nothing this many times CUCACHE_YIELD_MS ends the asker's wait */
    HOOK_YIELD_CAP = 50,  /* a give that keeps freeing holds the asker this many times CUCACHE_YIELD_MS at most */
};

/* The neighbours' answer to one ask (hook_yield_ask), for the OOM report. */
typedef struct hook_ask_s {
    unsigned n; /* neighbours asked: who[0..n); 0: none */
    struct {
        int32_t pid;
        st_reg_wait_t end; /* how its wait ended: ST_REG_ANSWERED, ... */
        uint64_t given;    /* bytes it gave back (answered; still giving: what landed so far) */
        uint64_t after_ns; /* the answer came this long after the ask (answered) */
    } who[HOOK_ASK_MAX];
    uint64_t given;     /* bytes given in all: the answers', or the device's free memory growth when more */
    uint64_t waited_ns; /* how long the allocation waited for the answers */
} hook_ask_t;

/* A device's allocator opened: enters the process in the GPU's registry
 * and starts the device's registry thread (CUCACHE_REGISTRY, fork
 * children excepted).  Called under open_lock. */
void hook_yield_dev_opened(hook_dev_t *hd);
/* An allocation on hd failed for want of device memory: asks the other
 * cucache processes on the GPU to give idle cache back and waits for their
 * answers (CUCACHE_YIELD, CUCACHE_YIELD_MS; past it while one is giving
 * back and free memory grows, up to HOOK_YIELD_BOUND times it without
 * growth and HOOK_YIELD_CAP times it in all; not past the moment the
 * request fits).  Their answer; n 0: no one was
 * asked (no neighbour, or the process is not in the registry). */
hook_ask_t hook_yield_ask(hook_dev_t *hd, const core_oom_t *oom);
/* The OOM report's view of the neighbours: marks the cucache processes
 * among out's rows with their figures and what they gave for this
 * request (its ask). */
struct st_gpu_procs_s;
void hook_yield_fill(const hook_dev_t *hd, const hook_ask_t *ask, struct st_gpu_procs_s *out);

#endif
