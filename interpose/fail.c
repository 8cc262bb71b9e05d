/*
 * An allocation the core could not serve at once: the one flow every hook
 * that allocates goes through (hook_rt_mem.c, hook_cu_mem.c,
 * torch_alloc.c), docs/interposer.md "Sharing a GPU".
 *
 *   1. the try (hook_alloc, fail.h: the hit path inline): the core's own
 *      allocation with its retry ladder (core_malloc_site).  Where the
 *      process yields (hd->yielding) the try is CORE_TRY_UNCOUNTED: its
 *      failure is not yet the program's, so nothing is counted;
 *   2. the neighbours asked (hook_alloc_failed, below; hook_yield_ask in
 *      yield.c), for a failure that was the device's want of memory (not a
 *      limit's refusal, not another error), outside a capture, in a
 *      process that yields.  Their answer (who was asked, who answered,
 *      what each gave, the wait) is a value kept in the failure
 *      (hook_fail_t.ask);
 *   3. the counted try: when anyone was asked, the same request once more,
 *      CORE_TRY_COUNTED; when no one was, the first try's failure stands
 *      and is counted as it is (core_count_failure);
 *   4. the report: the caller's, with the failure as a value
 *      (hook_report_oom, diag.c, which gives the answer to hook_yield_fill
 *      for the report's process rows).  A device error is returned as it
 *      is (cu_oom, rt_oom), and the runtime hooks let the runtime's own
 *      allocator try first (rt_oom: hook_fallback_served when it serves).
 */
#include "fail.h"
#include "yield.h"

uintptr_t hook_malloc_in_pool(core_dev_t *d, int pool, size_t size, core_stream_t key, uint32_t site, core_try_t t,
                              core_oom_t *oom)
{
    int before = core_pool_current(d);
    if (before == pool || core_pool_use(d, pool) != 0)
        return core_malloc_site(d, size, key, site, t, oom);
    uintptr_t p = core_malloc_site(d, size, key, site, t, oom);
    core_pool_use(d, before);
    return p;
}

/* Whether neighbours could help: the device lacked memory (not a limit's
 * refusal nor another error) and no capture is on. */
static bool may_ask(const hook_req_t *r, const core_oom_t *oom)
{
    return !oom->limit_hit && oom->backend_error == CORE_ENOMEM && !atomic_load(&r->hd->capturing);
}

__attribute__((noinline)) uintptr_t hook_alloc_failed(hook_req_t req, core_try_t t, hook_fail_t *f)
{
    const hook_req_t *r = &req;
    f->ask = (hook_ask_t){0};
    if (t == CORE_TRY_COUNTED) /* the process does not yield: the try's failure is the program's */
        return 0;
    if (may_ask(r, &f->oom))
        f->ask = hook_yield_ask(r->hd, &f->oom);
    if (f->ask.n == 0) { /* no one to ask: the failure stands */
        core_count_failure(r->d, &f->oom, r->key, r->site);
        return 0;
    }
    if (f->ask.given)
        core_note_yield_received(r->d, f->ask.given);
    return hook_try(r, CORE_TRY_COUNTED, &f->oom);
}
