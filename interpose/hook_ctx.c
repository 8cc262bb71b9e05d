/*
 * Contexts: cuDevicePrimaryCtxRetain, cuCtxCreate_v2, _v3 and _v4,
 * cuCtxDestroy_v2.  A created context gets an allocator of its own
 * (ctx_devs.c); its destruction gives that allocator's memory back first.
 *
 * A rule that hands out (core/hand_out.h) hands a block out before the
 * old owner's work on it is done, with the device's streams made to wait
 * for that work.
 * The waits reach the primary context's streams only.  Work in any other
 * context could reach the block first: another device's kernel by peer
 * access, a copy between devices queued on the other device's stream, a
 * created context's copy by unified addressing.  So the hand-outs go on
 * only while the process has one context, the primary context of one
 * device.  What gives it a second one stops them on every device, for
 * good, and then waits on the host for the fences handed out so far (the
 * new context's first work may be about to reach those blocks, and nothing
 * orders it after them) before it returns:
 *   - these hooks: a retain of another device's primary context (the
 *     runtime's, when it reaches the driver by the public entry point; the
 *     real runtime may use a private one instead), any created context;
 *   - cucache opening its allocator on a second device (state.c: the
 *     program made a call there: an allocation, a stream, a query);
 *   - the backend's next hand-out, which asks the driver whether another
 *     device's primary context is active (backend.c: a context nothing
 *     above saw; work it queued before that hand-out is not covered).
 * A context that was destroyed since still counts (it is cheaper to stay
 * safe than to track which contexts touched what).
 *
 * Green contexts (cuGreenCtxCreate) are not seen here: the simulator does
 * not model them yet, and their streams are neither fenced nor ordered
 * (docs/interposer.md lists the gap).
 */
#include "contexts.h"
#include "hook.h"
#include "order.h"
#include "real.h"
#include "state.h"

/* The hooks note a context even inside cucache's own call into the real
 * runtime (hook_depth > 0: a cudaFree(NULL) passed through initialises the
 * device's context there); cucache's own driver calls use real_cu and
 * never come here. */

atomic_bool hook_many_contexts;
atomic_ulong hook_contexts_seen;

/* Bit d: the program retained device d's primary context (d < 64). */
static _Atomic uint64_t primaries;

/* Called with no lock held.  Every call waits: a second thread making a
 * context while the first still waits must not return earlier. */
void hook_second_context(void)
{
    atomic_store(&hook_many_contexts, true);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        hook_dev_t *hd = &hook_devs[i];
        if (hook_dev_core(hd))
            hook_order_stop(hd);
    }
}

/* A context the program now has: the primary context of dev (is_primary),
 * or one it created. */
static void context_seen(bool is_primary, CUdevice dev)
{
    atomic_fetch_add(&hook_contexts_seen, 1);
    if (is_primary && dev >= 0 && dev < 64 && !atomic_load(&hook_many_contexts)) {
        uint64_t bit = (uint64_t)1 << dev;
        uint64_t before = atomic_fetch_or(&primaries, bit);
        if ((before | bit) == bit)
            return; /* still the one */
    }
    hook_second_context();
}

/* A context the program created: a second context, and an allocator's
 * slot (ctx_devs.c).  One cucache creates for itself never comes here. */
static void context_created(CUcontext ctx, CUdevice dev)
{
    context_seen(false, dev);
    hook_ctx_register(ctx, dev);
}

HOOK_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult r = CU_REAL(cuDevicePrimaryCtxRetain, pctx, dev);
    if (r == CUDA_SUCCESS)
        context_seen(true, dev);
    return r;
}

HOOK_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUresult r = CU_REAL(cuCtxCreate_v2, pctx, flags, dev);
    if (r == CUDA_SUCCESS)
        context_created(*pctx, dev);
    return r;
}

HOOK_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                 unsigned int flags, CUdevice dev)
{
    CUresult r = CU_REAL(cuCtxCreate_v3, pctx, paramsArray, numParams, flags, dev);
    if (r == CUDA_SUCCESS)
        context_created(*pctx, dev);
    return r;
}

HOOK_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
                                 CUdevice dev)
{
    CUresult r = CU_REAL(cuCtxCreate_v4, pctx, ctxCreateParams, flags, dev);
    if (r == CUDA_SUCCESS)
        context_created(*pctx, dev);
    return r;
}

/* A created context's allocator gives its memory back while the context
 * still exists (its pending frees waited for, its segments freed in it).
 * A device's primary context (drivers refuse to destroy it; if one did
 * not, the cache's segments would die with it): its cache dropped first. */
HOOK_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    if (!hook_bypass() && ctx) {
        hook_ctx_destroying(ctx);
        for (int i = 0; i < HOOK_MAX_DEVICES; i++)
            if (hook_dev_core(&hook_devs[i]) && hook_devs[i].primary == ctx)
                hook_dev_drop(&hook_devs[i]);
    }
    return CU_REAL(cuCtxDestroy_v2, ctx);
}
