/*
 * Driver API of the simulated device: peer access between its devices
 * (CUCACHE_SIM_DEVICES of them), the links' attributes, and copies between
 * contexts.
 *
 * The model is a fabric like NVSwitch: every device reaches every other
 * one directly, all links alike.  So cuDeviceCanAccessPeer answers 1 for
 * any two different devices (0 for a device and itself, as CUDA does), and
 * each pair's attributes are the rows of p2p_attrs.  Access is granted per
 * pair of contexts, one way, as in CUDA: cuCtxEnablePeerAccess from the
 * current context to peerContext, at most SIM_PEERS_MAX peers per context
 * (CUDA_ERROR_TOO_MANY_PEERS beyond), until it is disabled or either
 * context is destroyed or reset.
 *
 * What access changes.  Copies never need it: with unified addressing a
 * copy between devices works without peer access (CUDA stages it), so
 * cuMemcpy*, cuMemcpyPeer* and cuMemcpy3DPeer* move bytes between any two
 * devices' memory.  A simulated kernel (cucacheSimLaunch) on device A whose
 * declared ranges lie in cuMemAlloc memory of device B needs access from
 * its context to a context of B, as a kernel does on a GPU; without it the
 * launch succeeds and the kernel faults (CUDA_ERROR_ILLEGAL_ADDRESS, the
 * context's sticky error).  Pool memory follows cuMemPoolSetAccess and
 * virtual memory cuMemSetAccess instead (driver_pool_share.c,
 * engine_vmm.c), never peer access.  A kernel of a real module declares no
 * ranges, so nothing is checked for it.
 *
 * cuMemcpyPeer is, as CUDA says, asynchronous to the host but ordered after
 * all work already queued in the current context, srcContext and
 * dstContext, and before all work queued there after it: the copy runs on
 * the current context's default stream after a wait on each other
 * context's legacy stream (which orders its blocking streams), and each of
 * those streams then waits for the copy.  cuMemcpyPeerAsync is a copy on
 * its stream only.  The race detector sees a peer copy's ranges on both
 * devices, like any copy's.
 */
#include <string.h>

#include "driver.h"

#define SIM_PEERS_MAX 8 /* peer contexts one context may reach */

/* One way of access: `from` reaches `to`'s memory. */
typedef struct peer_pair_s {
    struct CUctx_st *from, *to;
} peer_pair_t;

static struct {
    peer_pair_t *v;
    size_t n, cap;
} peers;

/* ------------------------------------------------------------------------
 * The pairs
 * ---------------------------------------------------------------------- */

static peer_pair_t *pair_find(const struct CUctx_st *from, const struct CUctx_st *to)
{
    for (size_t i = 0; i < peers.n; i++)
        if (peers.v[i].from == from && peers.v[i].to == to)
            return &peers.v[i];
    return NULL;
}

static size_t pairs_from(const struct CUctx_st *from)
{
    size_t n = 0;
    for (size_t i = 0; i < peers.n; i++)
        n += peers.v[i].from == from;
    return n;
}

void sim_peer_forget(struct CUctx_st *ctx)
{
    size_t j = 0;
    for (size_t i = 0; i < peers.n; i++)
        if (peers.v[i].from != ctx && peers.v[i].to != ctx)
            peers.v[j++] = peers.v[i];
    peers.n = j;
}

/* Whether ctx reaches cuMemAlloc memory of device `device`. */
static bool reaches(const struct CUctx_st *ctx, int device)
{
    if (ctx->dev->ordinal == device)
        return true;
    for (size_t i = 0; i < peers.n; i++)
        if (peers.v[i].from == ctx && peers.v[i].to->dev->ordinal == device)
            return true;
    return false;
}

/* ------------------------------------------------------------------------
 * Capability and attributes
 * ---------------------------------------------------------------------- */

/* Checks init and both ordinals. */
static CUresult devices_ok(CUdevice a, CUdevice b)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    return a < 0 || a >= sim.ndev || b < 0 || b >= sim.ndev ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    CUresult r = devices_ok(dev, peerDev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!canAccessPeer)
        return CUDA_ERROR_INVALID_VALUE;
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}

/* Every link's attributes (all links are alike): NVLink through a switch,
 * with native atomics and array access; the rank is 0, the best. */
static const struct {
    CUdevice_P2PAttribute attr;
    int value;
} p2p_attrs[] = {
    {CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, 0},
    {CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 1},
    {CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, 1},
    {CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED, 1},
    {CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED, 0},
};

SIM_API CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                         CUdevice dstDevice)
{
    CUresult r = devices_ok(srcDevice, dstDevice);
    if (r != CUDA_SUCCESS)
        return r;
    if (srcDevice == dstDevice)
        return CUDA_ERROR_INVALID_DEVICE;
    for (size_t i = 0; value && i < sizeof p2p_attrs / sizeof p2p_attrs[0]; i++)
        if (p2p_attrs[i].attr == attrib) {
            *value = p2p_attrs[i].value;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------------
 * Enabling and disabling
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!sim_ctx_valid(peerContext) || peerContext == ctx)
        return drv_leave(CUDA_ERROR_INVALID_CONTEXT);
    if (peerContext->dev == ctx->dev)
        return drv_leave(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED); /* cuDeviceCanAccessPeer answers 0 */
    if (pair_find(ctx, peerContext))
        return drv_leave(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    if (pairs_from(ctx) == SIM_PEERS_MAX)
        return drv_leave(CUDA_ERROR_TOO_MANY_PEERS);
    peers.v = sim_array_room(peers.v, peers.n, &peers.cap, sizeof *peers.v, 8);
    peers.v[peers.n++] = (peer_pair_t){ctx, peerContext};
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!sim_ctx_valid(peerContext))
        return drv_leave(CUDA_ERROR_INVALID_CONTEXT);
    peer_pair_t *p = pair_find(ctx, peerContext);
    if (!p)
        return drv_leave(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    *p = peers.v[--peers.n];
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Kernels on another device's memory
 * ---------------------------------------------------------------------- */

/* Whether device `device` may use [p, p+n) of memory a (for writing when
 * `write`): its own memory, cuMemAlloc memory (or an IPC mapping) of a
 * device its context reaches, pool memory its access allows. */
static bool allowed(const struct CUctx_st *ctx, const sim_alloc_t *a, bool write)
{
    int device = ctx->dev->ordinal;
    bool pooled = a->kind == SIM_ALLOC_POOL || (a->kind == SIM_ALLOC_IPC && a->pool);
    if (pooled) {
        unsigned f = a->pool->access[device];
        return write ? f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE : f != CU_MEM_ACCESS_FLAGS_PROT_NONE;
    }
    if (a->kind != SIM_ALLOC_DEVICE && a->kind != SIM_ALLOC_IPC)
        return true; /* host, managed; virtual memory is checked by drv_access_ok */
    return reaches(ctx, a->device);
}

sim_op_t *drv_peer_fault(const struct CUstream_st *s, const struct cucache_sim_access *acc, unsigned nacc)
{
    for (unsigned i = 0; i < nacc; i++) {
        uintptr_t p = (uintptr_t)acc[i].ptr;
        sim_alloc_t *a = acc[i].bytes && !sim_vmm_region(p) ? sim_alloc_find(p) : NULL;
        if (!a || allowed(s->ctx, a, acc[i].write != 0))
            continue;
        sim_log("device %d: a simulated kernel on stream #%lu uses 0x%lx (%zu bytes) of device %d's memory "
                "without access (%s)",
                s->ctx->dev->ordinal, s->id, (unsigned long)p, (size_t)acc[i].bytes, a->device,
                a->kind == SIM_ALLOC_POOL ? "cuMemPoolSetAccess" : "cuCtxEnablePeerAccess");
        return sim_op_new(SIM_OP_FAULT, "kernel on a peer's memory without access");
    }
    return NULL;
}

/* ------------------------------------------------------------------------
 * Copies between contexts
 * ---------------------------------------------------------------------- */

/* Queues on `waiter` a wait for the work queued on `on` so far. */
static CUresult stream_join(struct CUstream_st *waiter, struct CUstream_st *on)
{
    if (waiter == on || !on->last_seq)
        return CUDA_SUCCESS;
    sim_op_t *op = sim_op_new(SIM_OP_WAIT, "cuMemcpyPeer (ordering)");
    sim_op_add_dep(op, on->slot, on->last_seq);
    vc_join(&op->vc, on->vc);
    return sim_enqueue(waiter, op);
}

/* The contexts a synchronous peer copy is ordered with: cur, src, dst
 * without repeats. */
static size_t copy_contexts(struct CUctx_st *cur, CUcontext src, CUcontext dst, struct CUctx_st *out[3])
{
    size_t n = 0;
    struct CUctx_st *all[3] = {cur, src, dst};
    for (size_t i = 0; i < 3; i++) {
        bool seen = false;
        for (size_t j = 0; j < n; j++)
            seen |= out[j] == all[i];
        if (!seen)
            out[n++] = all[i];
    }
    return n;
}

/* Orders the default stream of the current context (the per-thread one
 * when ptds) after (before: false, after it) the work of the contexts of a
 * synchronous peer copy.  Takes the lock. */
static CUresult order_peer_copy(CUcontext src, CUcontext dst, bool ptds, bool before)
{
    struct CUctx_st *cur;
    CUresult r = drv_enter(&cur);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *l = NULL;
    r = sim_stream_resolve(cur, NULL, ptds, &l);
    struct CUctx_st *ctxs[3];
    size_t n = copy_contexts(cur, src, dst, ctxs);
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++) {
        struct CUstream_st *legacy = ctxs[i]->legacy;
        if (!legacy)
            continue;
        if (before) {
            /* an empty wait on its legacy stream gathers its blocking streams */
            if (legacy != l)
                r = sim_enqueue(legacy, sim_op_new(SIM_OP_WAIT, "cuMemcpyPeer (ordering)"));
            if (r == CUDA_SUCCESS)
                r = stream_join(l, legacy);
        } else {
            r = stream_join(legacy, l);
        }
    }
    return drv_leave(r);
}

/* Both contexts live (the driver is initialised). */
static CUresult contexts_ok(CUcontext a, CUcontext b)
{
    sim_lock();
    CUresult r = sim_check_init();
    if (r == CUDA_SUCCESS && (!sim_ctx_valid(a) || !sim_ctx_valid(b)))
        r = CUDA_ERROR_INVALID_CONTEXT;
    return drv_leave(r);
}

static CUresult peer_copy(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t n, bool ptds)
{
    CUresult r = contexts_ok(dstCtx, srcCtx);
    if (r == CUDA_SUCCESS && n)
        r = order_peer_copy(srcCtx, dstCtx, ptds, true);
    if (r == CUDA_SUCCESS && n)
        r = drv_copy_linear(dst, src, n, NULL, ptds, false, "memcpy peer");
    if (r == CUDA_SUCCESS && n)
        r = order_peer_copy(srcCtx, dstCtx, ptds, false);
    return r;
}

static CUresult peer_copy_async(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t n,
                                CUstream h, bool ptds)
{
    CUresult r = contexts_ok(dstCtx, srcCtx);
    return r == CUDA_SUCCESS ? drv_copy_linear(dst, src, n, h, ptds, false, "memcpy peer (async)") : r;
}

DRV_PTDS(cuMemcpyPeer, peer_copy,
         (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount),
         (dstDevice, dstContext, srcDevice, srcContext, ByteCount))
DRV_PTSZ(cuMemcpyPeerAsync, peer_copy_async,
         (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount,
          CUstream hStream),
         (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream))

/* A 3D copy between contexts: one 2D copy per slice (rows srcHeight and
 * dstHeight apart from one slice to the next). */
static CUresult copy3d_peer(const CUDA_MEMCPY3D_PEER *p, CUstream h, bool ptds, bool sync)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = contexts_ok(p->srcContext, p->dstContext);
    if (r != CUDA_SUCCESS)
        return r;
    if (p->Depth > 1 && (p->srcHeight < p->Height || p->dstHeight < p->Height))
        return CUDA_ERROR_INVALID_VALUE;
    if (sync)
        r = order_peer_copy(p->srcContext, p->dstContext, ptds, true);
    for (size_t z = 0; r == CUDA_SUCCESS && z < p->Depth; z++) {
        CUDA_MEMCPY2D c = {
            .srcXInBytes = p->srcXInBytes,
            .srcY = (p->srcZ + z) * p->srcHeight + p->srcY,
            .srcMemoryType = p->srcMemoryType,
            .srcHost = p->srcHost,
            .srcDevice = p->srcDevice,
            .srcArray = p->srcArray,
            .srcPitch = p->srcPitch,
            .dstXInBytes = p->dstXInBytes,
            .dstY = (p->dstZ + z) * p->dstHeight + p->dstY,
            .dstMemoryType = p->dstMemoryType,
            .dstHost = p->dstHost,
            .dstDevice = p->dstDevice,
            .dstArray = p->dstArray,
            .dstPitch = p->dstPitch,
            .WidthInBytes = p->WidthInBytes,
            .Height = p->Height,
        };
        r = drv_copy_2d(&c, h, ptds, false, sync ? "memcpy 3D peer" : "memcpy 3D peer (async)");
    }
    if (r == CUDA_SUCCESS && sync)
        r = order_peer_copy(p->srcContext, p->dstContext, ptds, false);
    return r;
}

static CUresult copy3d_peer_sync(const CUDA_MEMCPY3D_PEER *p, bool ptds)
{
    return copy3d_peer(p, NULL, ptds, true);
}

static CUresult copy3d_peer_async(const CUDA_MEMCPY3D_PEER *p, CUstream h, bool ptds)
{
    return copy3d_peer(p, h, ptds, false);
}

DRV_PTDS(cuMemcpy3DPeer, copy3d_peer_sync, (const CUDA_MEMCPY3D_PEER *pCopy), (pCopy))
DRV_PTSZ(cuMemcpy3DPeerAsync, copy3d_peer_async, (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream), (pCopy, hStream))
