/*
 * Symbol lookup: how programs that never call our exports by name still
 * reach the driver hooks.
 *
 *   - dlsym (dlsym_entry.S): a lookup of a hooked driver name, with any
 *     handle, returns the hook; any other lookup tail-jumps into the C
 *     library's dlsym, so RTLD_NEXT stays relative to the real caller.
 *   - cuGetProcAddress / _v2: the driver answers first, honouring the
 *     requested version and per-thread flag; when its answer is the address
 *     of a driver entry point we hook, the hook of exactly that entry point
 *     is returned instead (so cuMemAllocAsync asked with the per-thread flag
 *     gives cuMemAllocAsync_ptsz's hook, and an old ABI variant we do not
 *     hook stays the driver's).  Asking for the resolver itself gives ours
 *     (vgpu-manager's routing by pointer; vcuda-controller PR 31).
 */
#include <dlfcn.h>
#include <stdbool.h>

#include "hook.h"
#include "real.h"
#include "submit.h"

HOOK_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
HOOK_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);

/* Every hook below is defined in a hook_*.c file; cuda_api.h declares it. */
#define ROUTE(name) {#name, (void *)name, NULL},

route_t hook_routes[] = {
    ROUTE(cuGetProcAddress)
    ROUTE(cuGetProcAddress_v2)
    ROUTE(cuMemAlloc_v2)
    ROUTE(cuMemFree_v2)
    ROUTE(cuMemGetInfo_v2)
    ROUTE(cuMemAllocAsync)
    ROUTE(cuMemAllocAsync_ptsz)
    ROUTE(cuMemFreeAsync)
    ROUTE(cuMemFreeAsync_ptsz)
    ROUTE(cuCtxSynchronize)
    ROUTE(cuStreamSynchronize)
    ROUTE(cuStreamSynchronize_ptsz)
    ROUTE(cuEventSynchronize)
    ROUTE(cuStreamCreate)
    ROUTE(cuStreamCreateWithPriority)
    ROUTE(cuStreamDestroy_v2)
    ROUTE(cuStreamBeginCapture_v2)
    ROUTE(cuStreamBeginCapture_v2_ptsz)
    ROUTE(cuStreamEndCapture)
    ROUTE(cuStreamEndCapture_ptsz)
    ROUTE(cuDevicePrimaryCtxRetain)
    ROUTE(cuCtxCreate_v2)
    ROUTE(cuCtxCreate_v3)
    ROUTE(cuCtxCreate_v4)
    ROUTE(cuDevicePrimaryCtxReset_v2)
    ROUTE(cuCtxDestroy_v2)
    ROUTE(cuPointerGetAttribute)
    ROUTE(cuPointerGetAttributes)
    ROUTE(cuPointerSetAttribute)
    ROUTE(cuMemGetAddressRange_v2)
    ROUTE(cuMemGetHandleForAddressRange)
    ROUTE(cuIpcGetMemHandle)
    ROUTE(cuIpcOpenMemHandle)
    ROUTE(cuIpcOpenMemHandle_v2)
    ROUTE(cuIpcCloseMemHandle)
    ROUTE(cuCtxEnablePeerAccess)
    ROUTE(cuCtxDisablePeerAccess)
};
const size_t hook_nroutes = sizeof hook_routes / sizeof hook_routes[0];

#undef ROUTE

/* Called by dlsym_entry.S: the hook for `symbol`, or NULL to let the C
 * library answer.  Exact names only: matching a "cu" prefix would also
 * catch cudnn* and recurse (HAMi-core PR 215). */
void *hook_dlsym_find(void *handle, const char *symbol);

/* Runs inside sanitizers' start-up too (real.c): no instrumentation and no
 * intercepted libc call (strcmp is one). */
HOOK_NO_SANITIZE static bool same_name(const char *a, const char *b)
{
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

HOOK_NO_SANITIZE void *hook_dlsym_find(void *handle, const char *symbol)
{
    (void)handle;
    hook_real_dlsym_init();
    if (!symbol || symbol[0] != 'c' || symbol[1] != 'u' || (symbol[2] >= 'a' && symbol[2] <= 'z'))
        return NULL;
    for (size_t i = 0; i < hook_nroutes; i++)
        if (same_name(hook_routes[i].name, symbol))
            return hook_routes[i].hook;
    /* work submitted through a looked-up pointer must be counted: the
     * counting trampoline of that name; a submitting name without one, an
     * unknown or an opaque name makes the count blind (submit.c) */
    void *tramp = hook_submit_export(symbol);
    if (tramp)
        return tramp;
    /* only a name the program can get matters (RTLD_NEXT's answer depends
     * on the caller: whether any object defines it is asked instead) */
    if (hook_api_kind(symbol) != HOOK_API_QUIET && hook_real_dlsym(handle == RTLD_NEXT ? RTLD_DEFAULT : handle, symbol))
        hook_submit_go_blind();
    return NULL;
}

HOOK_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult *symbolStatus)
{
    if (!hook_real_driver() || !real_cu.cuGetProcAddress_v2)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real_cu.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = hook_submit_wrap(symbol, hook_route(*pfn));
    return r;
}

HOOK_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    if (!hook_real_driver() || !real_cu.cuGetProcAddress)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real_cu.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = hook_submit_wrap(symbol, hook_route(*pfn));
    return r;
}
