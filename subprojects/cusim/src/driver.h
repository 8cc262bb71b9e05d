/*
 * Shared by the driver API files (driver*.c): entering a call with the
 * engine lock held and the current context checked.
 */
#ifndef CUCACHE_SIM_DRIVER_H
#define CUCACHE_SIM_DRIVER_H

#include "engine.h"
#include "handles.h"

/* Takes the lock and fetches the current context into *ctx: CUDA_SUCCESS
 * with the lock held, or the error (init, no context, sticky) with it
 * released.  A call on a stream then looks it up with sim_stream_resolve,
 * whose result the caller checks and returns through drv_leave. */
static inline CUresult drv_enter(struct CUctx_st **ctx)
{
    *ctx = NULL;
    sim_lock();
    CUresult r = sim_ctx_get(ctx);
    if (r != CUDA_SUCCESS)
        sim_unlock();
    return r;
}

/* Takes the lock and checks initialisation only (the lock released on
 * failure): like the real driver, the calls that name an allocation find
 * it by its address (unified addressing), whatever context is current,
 * or none. */
static inline CUresult drv_enter_any(void)
{
    sim_lock();
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        sim_unlock();
    return r;
}

/* Unlocks and returns r. */
static inline CUresult drv_leave(CUresult r)
{
    sim_unlock();
    return r;
}

#define DRV_UNPAREN(...) __VA_ARGS__

struct cucache_sim_access;
/* A simulated kernel's declared ranges (cucacheSimLaunch*): each inside
 * device memory of s's device (mapped with the access it needs). */
CUresult drv_access_ok(const struct CUstream_st *s, const struct cucache_sim_access *acc, unsigned nacc);
/* Gives op the ranges for the race detector. */
void drv_access_set(sim_op_t *op, const struct cucache_sim_access *acc, unsigned nacc);

/* A copy of n bytes or of a CUDA_MEMCPY2D on stream h (driver_copy.c):
 * sync gives cuMemcpy's blocking of the host (device-to-device copies do
 * not block); `what` names it in race reports. */
CUresult drv_copy_linear(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool ptds, bool sync,
                         const char *what);
CUresult drv_copy_2d(const CUDA_MEMCPY2D *p, CUstream h, bool ptds, bool sync, const char *what);
/* A simulated kernel's fault when a declared range lies in another
 * device's memory its context may not use (driver_peer.c), else NULL. */
sim_op_t *drv_peer_fault(const struct CUstream_st *s, const struct cucache_sim_access *acc, unsigned nacc);
/* The address of (pos[0] bytes, pos[1] rows, pos[2] layers) in array h for
 * a copy of `height` rows of `width` bytes, and the array's row pitch;
 * linear: pos[0] is a byte offset into the whole array and the copy one
 * row (cuMemcpyHtoA ...).  CUDA_ERROR_INVALID_VALUE for a handle that is
 * no live array, an offset or width that is no whole number of elements,
 * or a copy that leaves the array (driver_array.c). */
CUresult drv_array_at(CUarray h, const size_t pos[3], size_t width, size_t height, bool linear, uintptr_t *addr,
                      size_t *pitch);
/* Whether h is a live array of that device. */
bool drv_array_of(CUarray h, int device);
/* A file's bytes, NUL-terminated after len (PTX is text), in *buf (free
 * it); CUDA_ERROR_FILE_NOT_FOUND when it cannot be read (driver_module.c;
 * driver_link.c's cuLinkAddFile reads with it too). */
CUresult drv_file_read(const char *path, char **buf, size_t *len);

/* Graph nodes the generic calls make (driver_graph.c; driver_graph_params.c
 * maps CUgraphNodeParams onto these and the per-kind entry points): a child
 * graph copied or moved; a child node's graph replaced by a copy; a
 * conditional node with its empty bodies (p->phGraph_out set); whether a
 * node is of a kind. */
CUresult drv_graph_add_child(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n,
                             const CUDA_CHILD_GRAPH_NODE_PARAMS *p);
CUresult drv_graph_set_child(CUgraphNode h, CUgraph child);
CUresult drv_graph_add_conditional(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n,
                                   CUDA_CONDITIONAL_NODE_PARAMS *p);
CUresult drv_graph_node_type_is(CUgraphNode h, CUgraphNodeType type);
/* Stream-ordered allocation on a capturing stream (driver_mem.c): an
 * allocation node of the capture's graph after s's capture dependencies,
 * its address fixed now; a free node of a graph allocation (only graph
 * memory may be freed in a graph, once). */
CUresult drv_graph_capture_alloc(struct CUstream_st *s, size_t size, CUdeviceptr *dptr);
CUresult drv_graph_capture_free(struct CUstream_st *s, sim_gblock_t *b);

/* Exports a legacy-stream entry point and its per-thread-default-stream
 * twin, both calling impl(..., ptds): the twin of a call that takes a
 * stream is name_ptsz, of one that does not (a synchronous copy) name_ptds. */
#define DRV_TWINS(name, twin, impl, params, args)                                                                      \
    SIM_API CUresult name params                                                                                       \
    {                                                                                                                  \
        return impl(DRV_UNPAREN args, false);                                                                          \
    }                                                                                                                  \
    SIM_API CUresult twin params                                                                                       \
    {                                                                                                                  \
        return impl(DRV_UNPAREN args, true);                                                                           \
    }
#define DRV_PTSZ(name, impl, params, args) DRV_TWINS(name, name##_ptsz, impl, params, args)
#define DRV_PTDS(name, impl, params, args) DRV_TWINS(name, name##_ptds, impl, params, args)

#endif
