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

enum {
    HOOK_ASK_MAX = 32, /* neighbours asked for one allocation, at most */
};

/* The neighbours' answer to one ask (hook_yield_ask), for the OOM report. */
typedef struct hook_ask_s {
    unsigned n; /* neighbours asked: who[0..n); 0: none */
    struct {
        int32_t pid;
        bool answered;  /* within CUCACHE_YIELD_MS */
        uint64_t given; /* bytes it gave back */
    } who[HOOK_ASK_MAX];
    uint64_t given;     /* bytes given in all */
    uint64_t waited_ns; /* how long the allocation waited for the answers */
} hook_ask_t;

/* A device's allocator opened: enters the process in the GPU's registry
 * and starts the device's registry thread (CUCACHE_REGISTRY, fork
 * children excepted).  Called under open_lock. */
void hook_yield_dev_opened(hook_dev_t *hd);
/* An allocation on hd failed for want of device memory: asks the other
 * cucache processes on the GPU to give idle cache back and waits for their
 * answers (CUCACHE_YIELD, CUCACHE_YIELD_MS).  Their answer; n 0: no one
 * was asked (no neighbour, or the process is not in the registry). */
hook_ask_t hook_yield_ask(hook_dev_t *hd, const core_oom_t *oom);
/* The OOM report's view of the neighbours: marks the cucache processes
 * among out's rows with their figures and what they gave for this
 * request (its ask). */
struct st_gpu_procs_s;
void hook_yield_fill(const hook_dev_t *hd, const hook_ask_t *ask, struct st_gpu_procs_s *out);

#endif
