/*
 * Peer access: cudaDeviceEnablePeerAccess, cudaDeviceDisablePeerAccess,
 * cuCtxEnablePeerAccess and cuCtxDisablePeerAccess.
 *
 * CUDA's peer access lets device D's kernels reach every cudaMalloc or
 * cuMemAlloc allocation of the peer, but not memory mapped through the
 * virtual memory API, which each device reaches only once cuMemSetAccess
 * gave it access to each mapping.  Under expandable segments cucache's
 * blocks are such memory (backend.c), so without these hooks a program
 * that enables peer access would see its kernels fault on the peer's
 * blocks where CUDA without a cache runs them.  Each hook calls the real
 * function first; when it succeeded, it counts D's access to the peer
 * (`grants`), and the peer's mappings follow the count: map and map_alias
 * give every device that has access its share of each new mapping
 * (hook_peer_access), and the mappings already made are set at once, one
 * cuMemSetAccess per run of mapped pages (core_each_mapped), read and
 * write on enable, none on disable (CUDA revokes: D's later kernels on
 * the peer's memory fault).  Plain segments need nothing: they are
 * cuMemAlloc allocations, which peer access already reaches.
 *
 * What counts.  Access from any context of D (its primary context, the
 * runtime's, or one it created: virtual memory access is per device) to
 * the peer's primary context, the one cucache allocates in; a created
 * context of the peer holds none of cucache's memory.  A count, not a
 * flag: D's primary and created contexts may each enable it, and access
 * stays while one has it.  A reset of a device's primary context ends its
 * peer access both ways (hook_peer_reset); a created context destroyed
 * with access enabled keeps its count (D keeps reaching the peer's
 * blocks, where CUDA would fault).
 *
 * Order.  The count changes before the walk, and the walk reads it under
 * the core's device lock, under which every page is mapped: a mapping made
 * meanwhile either read the new count or is walked, and the walk that
 * runs last sets what the last count says.  Locks: open_lock
 * (hook_dev_with_core), then the core's device lock; no hd->lock.
 */
#include "hook.h"
#include "peer.h"
#include "real.h"
#include "state.h"

/* grants[peer][from]: contexts of device `from` with access to the
 * primary context of device `peer` (enables that succeeded, less the
 * disables). */
static atomic_uint grants[HOOK_MAX_DEVICES][HOOK_MAX_DEVICES];
/* The driver's handle of each device that was given access (the access
 * descriptor names it). */
static _Atomic CUdevice handles[HOOK_MAX_DEVICES];

size_t hook_peer_access(int peer, CUmemAccessDesc *out)
{
    size_t n = 0;
    for (int from = 0; from < HOOK_MAX_DEVICES && (unsigned)peer < HOOK_MAX_DEVICES; from++)
        if (atomic_load(&grants[peer][from]))
            out[n++] = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, (int)atomic_load(&handles[from])},
                                         CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    return n;
}

/* ------------------------------------------------------------------------
 * The peer's mappings follow the count
 * ---------------------------------------------------------------------- */

typedef struct settle_s {
    hook_dev_t *hd; /* the peer */
    int from;
} settle_t;

static void settle_range(void *arg, uintptr_t addr, size_t size)
{
    const settle_t *st = arg;
    unsigned flags = atomic_load(&grants[st->hd->ordinal][st->from]) ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                                                     : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    hook_vmm_set_access(st->hd, atomic_load(&handles[st->from]), flags, addr, size);
}

static void settle_core(core_dev_t *d, void *arg)
{
    core_each_mapped(d, settle_range, arg);
}

/* Device from's access to every page mapped now on peer: what its count says. */
static void settle(int peer, int from)
{
    settle_t st = {&hook_devs[peer], from};
    hook_dev_with_core(st.hd, settle_core, &st);
}

/* Device from (driver handle h) gained (+1) or lost (-1) a context's
 * access to peer's primary context. */
static void changed(int from, CUdevice h, int peer, int step)
{
    if ((unsigned)from >= HOOK_MAX_DEVICES || (unsigned)peer >= HOOK_MAX_DEVICES || from == peer)
        return;
    atomic_store(&handles[from], h);
    atomic_uint *g = &grants[peer][from];
    unsigned n = atomic_load(g);
    do {
        if (step < 0 && n == 0)
            return; /* access cucache never saw given */
    } while (!atomic_compare_exchange_weak(g, &n, step > 0 ? n + 1 : n - 1));
    settle(peer, from);
}

void hook_peer_reset(int ordinal)
{
    if ((unsigned)ordinal >= HOOK_MAX_DEVICES)
        return;
    for (int other = 0; other < HOOK_MAX_DEVICES; other++) {
        atomic_store(&grants[ordinal][other], 0); /* its mappings went with its allocator */
        if (atomic_exchange(&grants[other][ordinal], 0))
            settle(other, ordinal);
    }
}

/* ------------------------------------------------------------------------
 * Runtime
 * ---------------------------------------------------------------------- */

/* The current device (the one whose access changed) gained or lost access
 * to peerDevice. */
static void rt_changed(int peerDevice, int step)
{
    int dev = -1;
    CUdevice h;
    if (hook_real_driver() && HOOK_REAL(real_rt.cudaGetDevice(&dev)) == cudaSuccess &&
        real_cu.cuDeviceGet(&h, dev) == CUDA_SUCCESS)
        changed(dev, h, peerDevice, step);
}

HOOK_API cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    cudaError_t e = RT_REAL(cudaDeviceEnablePeerAccess, peerDevice, flags);
    if (e == cudaSuccess && !hook_bypass())
        rt_changed(peerDevice, +1);
    return e;
}

HOOK_API cudaError_t cudaDeviceDisablePeerAccess(int peerDevice)
{
    cudaError_t e = RT_REAL(cudaDeviceDisablePeerAccess, peerDevice);
    if (e == cudaSuccess && !hook_bypass())
        rt_changed(peerDevice, -1);
    return e;
}

/* ------------------------------------------------------------------------
 * Driver
 * ---------------------------------------------------------------------- */

/* The ordinal of the device whose primary context ctx is, or -1 (a
 * created context, or none). */
static int primary_ordinal(CUcontext ctx)
{
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        if (ctx && hook_devs[i].primary == ctx)
            return i;
    /* a device cucache has not opened: ctx's device, whose primary
     * context, if active, a retain answers without creating it */
    CUcontext popped, pc = NULL;
    CUdevice h;
    unsigned flags;
    int active = 0;
    if (!ctx || !real_cu.cuDevicePrimaryCtxRelease_v2 || real_cu.cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS)
        return -1;
    CUresult r = real_cu.cuCtxGetDevice(&h);
    real_cu.cuCtxPopCurrent_v2(&popped);
    if (r != CUDA_SUCCESS || real_cu.cuDevicePrimaryCtxGetState(h, &flags, &active) != CUDA_SUCCESS || !active ||
        real_cu.cuDevicePrimaryCtxRetain(&pc, h) != CUDA_SUCCESS)
        return -1;
    real_cu.cuDevicePrimaryCtxRelease_v2(h);
    return pc == ctx ? hook_ordinal_of(h) : -1;
}

/* The current context's device gained or lost access to peerContext. */
static void cu_changed(CUcontext peerContext, int step)
{
    CUdevice h;
    if (!hook_real_driver() || real_cu.cuCtxGetDevice(&h) != CUDA_SUCCESS)
        return;
    int peer = primary_ordinal(peerContext);
    if (peer >= 0)
        changed(hook_ordinal_of(h), h, peer, step);
}

HOOK_API CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    CUresult r = CU_REAL(cuCtxEnablePeerAccess, peerContext, Flags);
    if (r == CUDA_SUCCESS && !hook_bypass())
        cu_changed(peerContext, +1);
    return r;
}

HOOK_API CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
    CUresult r = CU_REAL(cuCtxDisablePeerAccess, peerContext);
    if (r == CUDA_SUCCESS && !hook_bypass())
        cu_changed(peerContext, -1);
    return r;
}
