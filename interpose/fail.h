/*
 * An allocation and its failure (fail.c: the one flow): the try, the
 * neighbours asked (yield.h), the counted try; a failure comes back as a
 * value for the caller's report.
 */
#ifndef CUCACHE_INTERPOSE_FAIL_H
#define CUCACHE_INTERPOSE_FAIL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "hook.h"
#include "yield.h"

enum {
    HOOK_POOL_ROUTE = -1, /* hook_req_t.pool: the calling thread's route (core_pool_use) */
};

/* An allocation as the program asked for it: tried, and tried once more
 * after the neighbours gave (hook_alloc). */
typedef struct hook_req_s {
    hook_dev_t *hd;
    core_dev_t *d; /* hd's allocator */
    size_t size;
    core_stream_t key;
    uint32_t site; /* hook_site(), taken once for every try */
    int pool;      /* the private pool it goes to whatever the thread's route (0: the default pools), or
                    * HOOK_POOL_ROUTE */
} hook_req_t;

/* A failed allocation, for whoever answers it (the OOM report, the
 * runtime's fallback). */
typedef struct hook_fail_s {
    core_oom_t oom; /* the last try's */
    hook_ask_t ask; /* the neighbours asked before it (n 0: none) */
} hook_fail_t;

/* core_malloc_site in private pool `pool` (0: the default pools) whatever
 * the calling thread's route, which is put back after. */
uintptr_t hook_malloc_in_pool(core_dev_t *d, int pool, size_t size, core_stream_t key, uint32_t site, core_try_t t,
                              core_oom_t *oom);
/* One try of the request on its allocator. */
static inline uintptr_t hook_try(const hook_req_t *r, core_try_t t, core_oom_t *oom)
{
    if (HOOK_LIKELY(r->pool == HOOK_POOL_ROUTE))
        return core_malloc_site(r->d, r->size, r->key, r->site, t, oom);
    return hook_malloc_in_pool(r->d, r->pool, r->size, r->key, r->site, t, oom);
}
/* After the first try (t) failed: the neighbours asked and the counted try,
 * or the failure counted as it stands; the address, or 0 with *f filled.
 * The request comes as a copy, so that no pointer to the caller's escapes. */
uintptr_t hook_alloc_failed(hook_req_t r, core_try_t t, hook_fail_t *f);
/* The allocation: the address, or 0 with *f filled for the caller's report.
 * Where the process yields, the first try's failure is not yet the
 * program's (CORE_TRY_UNCOUNTED). */
static inline uintptr_t hook_alloc(const hook_req_t *r, hook_fail_t *f)
{
    core_try_t t = atomic_load_explicit(&r->hd->yielding, memory_order_relaxed) ? CORE_TRY_UNCOUNTED : CORE_TRY_COUNTED;
    uintptr_t p = hook_try(r, t, &f->oom);
    /* copied field by field: the caller's request then stays in registers
     * on the hit path (gcc writes it to memory for a plain *r) */
    if (HOOK_UNLIKELY(!p))
        p = hook_alloc_failed((hook_req_t){r->hd, r->d, r->size, r->key, r->site, r->pool}, t, f);
    return p;
}

#endif
