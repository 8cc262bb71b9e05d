/*
 * Driver API of the simulated device: graphs built by hand (nodes, edges,
 * parameters, clones), their instances (instantiation, update, upload,
 * launch) and the device's graph memory.  The engine is engine_graph.c.
 *
 * What is not modelled answers CUDA_ERROR_NOT_SUPPORTED: array copies,
 * 3D copies whose slices are not contiguous, CUkernel handles in kernel
 * nodes, device launch; external semaphore and batch memory operation
 * nodes keep their generated stubs.  Conditional nodes and their handles
 * are here; the generic node calls are driver_graph_params.c.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "stub.h"

/* ------------------------------------------------------------------------
 * Checks shared by the calls
 * ---------------------------------------------------------------------- */

/* Takes the lock and checks h, a live graph, node or instance (magic):
 * CUDA_SUCCESS with the lock held, or the error of an uninitialised driver
 * or a bad handle with it released. */
static CUresult graph_enter(const void *h, uint32_t magic)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_is(h, magic))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    return CUDA_SUCCESS;
}

/* deps[0..n): nodes of g, none twice. */
static bool deps_ok(const struct CUgraph_st *g, const CUgraphNode *deps, size_t n)
{
    if (n && !deps)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!handle_is(deps[i], SIM_MAGIC_NODE) || deps[i]->graph != g)
            return false;
        for (size_t j = 0; j < i; j++)
            if (deps[j] == deps[i])
                return false;
    }
    return true;
}

static bool has_edge(const struct CUgraphNode_st *from, const struct CUgraphNode_st *to)
{
    for (size_t i = 0; i < to->ndeps; i++)
        if (to->deps[i] == from)
            return true;
    return false;
}

/* ------------------------------------------------------------------------
 * Node parameters to operations
 * ---------------------------------------------------------------------- */

static CUresult kernel_op(const CUDA_KERNEL_NODE_PARAMS_v2 *p, sim_op_t **out, struct CUctx_st **ctx)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUfunc_st *f = p->func;
    if (!f)
        return p->kern ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    if (!handle_is(f, SIM_MAGIC_FUNC))
        return handle_is(f, SIM_MAGIC_KERNEL) ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_HANDLE;
    const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    static const unsigned grid_max[3] = {0x7fffffffu, 65535, 65535}, block_max[3] = {1024, 1024, 64};
    for (int i = 0; i < 3; i++)
        if (grid[i] == 0 || block[i] == 0 || grid[i] > grid_max[i] || block[i] > block_max[i])
            return CUDA_ERROR_INVALID_VALUE;
    if ((uint64_t)block[0] * block[1] * block[2] > 1024 || (p->kernelParams && p->extra))
        return CUDA_ERROR_INVALID_VALUE;
    sim_op_t *op = sim_op_new(SIM_OP_KERNEL, f->name);
    op->dur_ns = f->ns;
    *out = op;
    *ctx = f->mod->ctx;
    return CUDA_SUCCESS;
}

/* A side of a copy: its address and, in device memory, its range for the
 * race detector (the allocation checked). */
static CUresult copy_side(CUmemorytype type, const void *host, CUdeviceptr dev, CUarray array, size_t x, size_t y,
                          size_t z, size_t pitch, size_t height, size_t rows, size_t width, bool write, uintptr_t *addr,
                          sim_range_t *rg, uint32_t *nrg)
{
    if (type == CU_MEMORYTYPE_ARRAY || array)
        return CUDA_ERROR_NOT_SUPPORTED;
    uintptr_t base = type == CU_MEMORYTYPE_HOST ? (uintptr_t)host : (uintptr_t)dev;
    if (type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
        return CUDA_ERROR_INVALID_VALUE;
    if (!base)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t a = base + (z * height + y) * pitch + x;
    size_t span = (rows - 1) * pitch + width;
    bool device = type == CU_MEMORYTYPE_DEVICE || (type == CU_MEMORYTYPE_UNIFIED && sim_device_of(a));
    if (device) {
        bool ok = sim_vmm_region(a) ? sim_vmm_range_ok(a, span, write, -1) : sim_range_ok(a, span, NULL);
        if (!ok)
            return CUDA_ERROR_INVALID_VALUE;
        rg[(*nrg)++] = (sim_range_t){a, a + span, write, a};
    }
    *addr = a;
    return CUDA_SUCCESS;
}

static CUresult copy_op(const CUDA_MEMCPY3D *c, sim_op_t **out)
{
    if (!c || c->WidthInBytes == 0 || c->Height == 0 || c->Depth == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t rows = c->Height * c->Depth;
    size_t spitch = c->srcPitch ? c->srcPitch : c->WidthInBytes;
    size_t dpitch = c->dstPitch ? c->dstPitch : c->WidthInBytes;
    if (rows > 1 && (spitch < c->WidthInBytes || dpitch < c->WidthInBytes))
        return CUDA_ERROR_INVALID_VALUE;
    /* the slices of a 3D copy are rows of one 2D copy only when contiguous */
    size_t sheight = c->srcHeight ? c->srcHeight : c->Height, dheight = c->dstHeight ? c->dstHeight : c->Height;
    if (c->Depth > 1 && (sheight != c->Height || dheight != c->Height))
        return CUDA_ERROR_NOT_SUPPORTED;
    sim_op_t *op = sim_op_new(SIM_OP_COPY, "graph memcpy");
    uintptr_t src = 0, dst = 0;
    CUresult r = copy_side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes, c->srcY, c->srcZ,
                           spitch, sheight, rows, c->WidthInBytes, false, &src, op->ranges, &op->nranges);
    if (r == CUDA_SUCCESS)
        r = copy_side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes, c->dstY, c->dstZ, dpitch,
                      dheight, rows, c->WidthInBytes, true, &dst, op->ranges, &op->nranges);
    if (r != CUDA_SUCCESS) {
        sim_op_free(op);
        return r;
    }
    op->src = (const void *)src;
    op->dst = (void *)dst;
    op->bytes = c->WidthInBytes;
    op->height = rows;
    op->spitch = spitch;
    op->dpitch = dpitch;
    *out = op;
    return CUDA_SUCCESS;
}

static CUresult memset_op(const CUDA_MEMSET_NODE_PARAMS *m, sim_op_t **out)
{
    if (!m || (m->elementSize != 1 && m->elementSize != 2 && m->elementSize != 4) || m->width == 0 || m->height == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t bytes = m->width * m->elementSize;
    size_t pitch = m->height > 1 ? m->pitch : bytes;
    if (pitch < bytes)
        return CUDA_ERROR_INVALID_VALUE;
    size_t span = (m->height - 1) * pitch + bytes;
    bool ok = sim_vmm_region(m->dst) ? sim_vmm_range_ok(m->dst, span, true, -1) : sim_range_ok(m->dst, span, NULL);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    sim_op_t *op = sim_op_new(SIM_OP_SET, "graph memset");
    op->dst = (void *)(uintptr_t)m->dst;
    op->bytes = bytes;
    op->height = m->height;
    op->dpitch = pitch;
    op->elem = m->elementSize;
    op->value = m->elementSize == 4 ? m->value : m->value & ((1u << (8 * m->elementSize)) - 1);
    op->ranges[op->nranges++] = (sim_range_t){m->dst, m->dst + span, true, m->dst};
    *out = op;
    return CUDA_SUCCESS;
}

static CUresult host_op(const CUDA_HOST_NODE_PARAMS *h, sim_op_t **out)
{
    if (!h || !h->fn)
        return CUDA_ERROR_INVALID_VALUE;
    sim_op_t *op = sim_op_new(SIM_OP_HOSTFN, "graph host node");
    op->fn = h->fn;
    op->arg = h->userData;
    op->host_fn = true;
    *out = op;
    return CUDA_SUCCESS;
}

/* The work of a node of one of the kinds above, from its parameters (as
 * the node keeps them). */
static CUresult node_params_op(struct CUgraphNode_st *node, sim_op_t **out, struct CUctx_st **ctx)
{
    switch (node->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        return kernel_op(&node->p.kernel, out, ctx);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return copy_op(&node->p.copy, out);
    case CU_GRAPH_NODE_TYPE_MEMSET:
        return memset_op(&node->p.memset, out);
    case CU_GRAPH_NODE_TYPE_HOST:
        return host_op(&node->p.host, out);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* ------------------------------------------------------------------------
 * Graphs and their nodes
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phGraph || flags != 0)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUgraph_st *g = sim_graph_new(ctx);
    handle_add(g, SIM_MAGIC_GRAPH);
    *phGraph = g;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphDestroy(CUgraph hGraph)
{
    sim_lock();
    if (!handle_is(hGraph, SIM_MAGIC_GRAPH) || hGraph->is_child)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_graph_free(hGraph);
    return drv_leave(CUDA_SUCCESS);
}

/* Adds a node whose parameters the caller fills in (under the lock). */
static CUresult node_begin(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeType type,
                           struct CUgraphNode_st **out)
{
    if (!ph || !deps_ok(g, deps, n))
        return CUDA_ERROR_INVALID_VALUE;
    *out = sim_graph_node_add(g, type, deps, n);
    *ph = *out;
    return CUDA_SUCCESS;
}

/* The node just added could not be made: it goes again. */
static void node_abandon(struct CUgraph_st *g, struct CUgraphNode_st *node, CUgraphNode *ph)
{
    g->nnodes--;
    handle_del(node);
    free(node->deps);
    node->magic = SIM_MAGIC_DEAD;
    sim_handle_release(node);
    *ph = NULL;
}

/* Adds a node of a kind whose work comes from its parameters. */
static CUresult add_work_node(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeType type,
                              const void *params, size_t size)
{
    CUresult r = graph_enter(g, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    if (!params)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUgraphNode_st *node = NULL;
    r = node_begin(ph, g, deps, n, type, &node);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    memcpy(&node->p, params, size);
    struct CUctx_st *ctx = g->ctx;
    r = node_params_op(node, &node->op, &ctx);
    if (r != CUDA_SUCCESS) {
        node_abandon(g, node, ph);
        return drv_leave(r);
    }
    node->ctx = ctx;
    return drv_leave(CUDA_SUCCESS);
}

static CUresult node_set_work(CUgraphNode h, CUgraphNodeType type, const void *params, size_t size)
{
    CUresult r = graph_enter(h, SIM_MAGIC_NODE);
    if (r != CUDA_SUCCESS)
        return r;
    if (!params || h->type != type)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUgraphNode_st tmp = *h;
    memcpy(&tmp.p, params, size);
    sim_op_t *op = NULL;
    struct CUctx_st *ctx = h->ctx;
    r = node_params_op(&tmp, &op, &ctx);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_op_free(h->op);
    h->op = op;
    h->p = tmp.p;
    h->ctx = ctx;
    return drv_leave(CUDA_SUCCESS);
}

static CUresult node_get(CUgraphNode h, CUgraphNodeType type, void *out, size_t size)
{
    CUresult r = graph_enter(h, SIM_MAGIC_NODE);
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || h->type != type)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    memcpy(out, &h->p, size);
    return drv_leave(CUDA_SUCCESS);
}

/* The v1 kernel parameters are the v2 ones without kern and ctx. */
static CUDA_KERNEL_NODE_PARAMS_v2 kernel_v2(const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUDA_KERNEL_NODE_PARAMS_v2 v = {0};
    if (p)
        memcpy(&v, p, sizeof *p);
    return v;
}

SIM_API CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)
{
    return add_work_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_KERNEL, nodeParams,
                         sizeof *nodeParams);
}

SIM_API CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    CUDA_KERNEL_NODE_PARAMS_v2 v = kernel_v2(nodeParams);
    return cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, nodeParams ? &v : NULL);
}

SIM_API CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)
{
    return node_get(hNode, CU_GRAPH_NODE_TYPE_KERNEL, nodeParams, sizeof *nodeParams);
}

SIM_API CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    return node_get(hNode, CU_GRAPH_NODE_TYPE_KERNEL, nodeParams, sizeof *nodeParams);
}

SIM_API CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)
{
    return node_set_work(hNode, CU_GRAPH_NODE_TYPE_KERNEL, nodeParams, sizeof *nodeParams);
}

SIM_API CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    CUDA_KERNEL_NODE_PARAMS_v2 v = kernel_v2(nodeParams);
    return cuGraphKernelNodeSetParams_v2(hNode, nodeParams ? &v : NULL);
}

SIM_API CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    (void)ctx; /* the graph's context does the copy */
    return add_work_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEMCPY, copyParams,
                         sizeof *copyParams);
}

SIM_API CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams)
{
    return node_get(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, nodeParams, sizeof *nodeParams);
}

SIM_API CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
    return node_set_work(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, nodeParams, sizeof *nodeParams);
}

SIM_API CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                      CUcontext ctx)
{
    (void)ctx;
    return add_work_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEMSET, memsetParams,
                         sizeof *memsetParams);
}

SIM_API CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    return node_get(hNode, CU_GRAPH_NODE_TYPE_MEMSET, nodeParams, sizeof *nodeParams);
}

SIM_API CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    return node_set_work(hNode, CU_GRAPH_NODE_TYPE_MEMSET, nodeParams, sizeof *nodeParams);
}

SIM_API CUresult cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                    size_t numDependencies, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    return add_work_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_HOST, nodeParams,
                         sizeof *nodeParams);
}

SIM_API CUresult cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams)
{
    return node_get(hNode, CU_GRAPH_NODE_TYPE_HOST, nodeParams, sizeof *nodeParams);
}

SIM_API CUresult cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    return node_set_work(hNode, CU_GRAPH_NODE_TYPE_HOST, nodeParams, sizeof *nodeParams);
}

SIM_API CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                     size_t numDependencies)
{
    CUresult r = graph_enter(hGraph, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUgraphNode_st *node = NULL;
    return drv_leave(node_begin(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_EMPTY, &node));
}

/* A copy of g (its nodes, parameters and edges); graphs with memory or
 * conditional nodes cannot be copied, as in CUDA. */
static CUresult graph_clone(struct CUgraph_st *g, struct CUgraph_st **out)
{
    if (g->has_mem || g->has_cond)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct CUgraph_st *c = sim_graph_new(g->ctx);
    for (size_t i = 0; i < g->nnodes; i++) {
        struct CUgraphNode_st *o = g->nodes[i];
        struct CUgraphNode_st **deps = sim_xcalloc(o->ndeps ? o->ndeps : 1, sizeof *deps);
        for (size_t d = 0; d < o->ndeps; d++)
            for (size_t k = 0; k < i; k++)
                if (g->nodes[k] == o->deps[d])
                    deps[d] = c->nodes[k];
        struct CUgraphNode_st *node = sim_graph_node_add(c, o->type, deps, o->ndeps);
        free(deps);
        node->ctx = o->ctx;
        node->p = o->p;
        node->event = o->event;
        node->origin = o;
        node->op = o->op ? sim_op_clone(o->op) : NULL;
        if (o->child) {
            CUresult r = graph_clone(o->child, &node->child);
            if (r != CUDA_SUCCESS) {
                sim_graph_free(c);
                return r;
            }
            node->child->is_child = true;
            handle_add(node->child, SIM_MAGIC_GRAPH);
        }
    }
    *out = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          size_t numDependencies, CUgraph childGraph)
{
    CUresult r = graph_enter(hGraph, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_is(childGraph, SIM_MAGIC_GRAPH) || childGraph == hGraph || !phGraphNode ||
        !deps_ok(hGraph, dependencies, numDependencies))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUgraph_st *copy = NULL;
    r = graph_clone(childGraph, &copy); /* a graph with memory nodes: only moved, never copied */
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    copy->is_child = true;
    handle_add(copy, SIM_MAGIC_GRAPH);
    struct CUgraphNode_st *node = NULL;
    node_begin(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_GRAPH, &node);
    node->child = copy;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
    CUresult r = graph_enter(hNode, SIM_MAGIC_NODE);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phGraph || hNode->type != CU_GRAPH_NODE_TYPE_GRAPH)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *phGraph = hNode->child;
    return drv_leave(CUDA_SUCCESS);
}

CUresult drv_graph_add_child(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n,
                             const CUDA_CHILD_GRAPH_NODE_PARAMS *p)
{
    if (p->ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
        return cuGraphAddChildGraphNode(ph, g, deps, n, p->graph);
    if (p->ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = graph_enter(g, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUgraph_st *c = p->graph;
    /* a graph of the program's, not instantiated, moved once, into another graph */
    if (!handle_is(c, SIM_MAGIC_GRAPH) || c == g || c->is_child || !ph || !deps_ok(g, deps, n) ||
        (c->exec && handle_is(c->exec, SIM_MAGIC_EXEC)) || c->has_cond)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (c->has_mem) { /* memory nodes below the top level are not modelled */
        static atomic_flag once = ATOMIC_FLAG_INIT;
        return drv_leave(sim_stub_driver(&once, "cuGraphAddNode (a moved child graph holding memory nodes)"));
    }
    c->is_child = true;
    struct CUgraphNode_st *node = NULL;
    node_begin(ph, g, deps, n, CU_GRAPH_NODE_TYPE_GRAPH, &node);
    node->child = c;
    return drv_leave(CUDA_SUCCESS);
}

CUresult drv_graph_set_child(CUgraphNode h, CUgraph child)
{
    CUresult r = graph_enter(h, SIM_MAGIC_NODE);
    if (r != CUDA_SUCCESS)
        return r;
    if (h->type != CU_GRAPH_NODE_TYPE_GRAPH || !handle_is(child, SIM_MAGIC_GRAPH) || child == h->graph)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUgraph_st *copy = NULL;
    r = graph_clone(child, &copy);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    copy->is_child = true;
    handle_add(copy, SIM_MAGIC_GRAPH);
    sim_graph_free(h->child);
    h->child = copy;
    return drv_leave(CUDA_SUCCESS);
}

static CUresult add_event_node(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUevent e,
                               CUgraphNodeType type)
{
    CUresult r = graph_enter(g, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_is(e, SIM_MAGIC_EVENT))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUgraphNode_st *node = NULL;
    r = node_begin(ph, g, deps, n, type, &node);
    if (r == CUDA_SUCCESS)
        node->event = e;
    return drv_leave(r);
}

static CUresult event_node_get(CUgraphNode h, CUevent *out, CUgraphNodeType type)
{
    CUresult r = graph_enter(h, SIM_MAGIC_NODE);
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || h->type != type)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *out = h->event;
    return drv_leave(CUDA_SUCCESS);
}

static CUresult event_node_set(CUgraphNode h, CUevent e, CUgraphNodeType type)
{
    CUresult r = graph_enter(h, SIM_MAGIC_NODE);
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_is(e, SIM_MAGIC_EVENT) || h->type != type)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    h->event = e;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                           size_t numDependencies, CUevent event)
{
    return add_event_node(phGraphNode, hGraph, dependencies, numDependencies, event, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

SIM_API CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
    return event_node_get(hNode, event_out, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

SIM_API CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    return event_node_set(hNode, event, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

SIM_API CUresult cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, CUevent event)
{
    return add_event_node(phGraphNode, hGraph, dependencies, numDependencies, event, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

SIM_API CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
    return event_node_get(hNode, event_out, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

SIM_API CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    return event_node_set(hNode, event, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

/* ------------------------------------------------------------------------
 * Conditional nodes
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out, CUgraph hGraph, CUcontext ctx,
                                                unsigned int defaultLaunchValue, unsigned int flags)
{
    CUresult r = graph_enter(hGraph, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pHandle_out || !sim_ctx_valid(ctx) || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_cond_t *c = sim_xcalloc(1, sizeof *c);
    *c = (sim_cond_t){.ctx = ctx, .value = defaultLaunchValue, .flags = flags, .next = hGraph->conds};
    hGraph->conds = c;
    *pHandle_out = (CUgraphConditionalHandle)(uintptr_t)c;
    return drv_leave(CUDA_SUCCESS);
}

/* The handle h when it was created on g or on a graph enclosing g. */
static sim_cond_t *cond_find(struct CUgraph_st *g, CUgraphConditionalHandle h)
{
    for (; g; g = g->owner ? g->owner->graph : NULL)
        for (sim_cond_t *c = g->conds; c; c = c->next)
            if ((CUgraphConditionalHandle)(uintptr_t)c == h)
                return c;
    return NULL;
}

/* The number of bodies each kind takes (size), at most (0: any). */
static const struct {
    unsigned min, max;
} cond_sizes[] = {
    [CU_GRAPH_COND_TYPE_IF] = {1, 2},
    [CU_GRAPH_COND_TYPE_WHILE] = {1, 1},
    [CU_GRAPH_COND_TYPE_SWITCH] = {1, 0},
};

CUresult drv_graph_add_conditional(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n,
                                   CUDA_CONDITIONAL_NODE_PARAMS *p)
{
    CUresult r = graph_enter(g, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    sim_cond_t *c = cond_find(g, p->handle);
    if (!c || (unsigned)p->type > CU_GRAPH_COND_TYPE_SWITCH || p->size < cond_sizes[p->type].min ||
        (cond_sizes[p->type].max && p->size > cond_sizes[p->type].max) || (p->ctx && p->ctx != c->ctx) ||
        g->is_child != (g->owner != NULL)) /* not in a child graph's copy: only in the program's graphs and bodies */
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUgraphNode_st *node = NULL;
    r = node_begin(ph, g, deps, n, CU_GRAPH_NODE_TYPE_CONDITIONAL, &node);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    node->ctx = c->ctx;
    node->cond = c;
    node->cond_type = p->type;
    node->nbodies = p->size;
    node->bodies = sim_xcalloc(p->size, sizeof *node->bodies);
    for (unsigned b = 0; b < p->size; b++) {
        struct CUgraph_st *body = sim_graph_new(c->ctx);
        body->is_child = true;
        body->owner = node;
        handle_add(body, SIM_MAGIC_GRAPH);
        node->bodies[b] = body;
    }
    for (struct CUgraph_st *up = g; up; up = up->owner ? up->owner->graph : NULL)
        up->has_cond = true;
    p->phGraph_out = node->bodies;
    return drv_leave(CUDA_SUCCESS);
}

CUresult drv_graph_node_type_is(CUgraphNode h, CUgraphNodeType type)
{
    CUresult r = graph_enter(h, SIM_MAGIC_NODE);
    if (r != CUDA_SUCCESS)
        return r;
    return drv_leave(h->type == type ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

/* ------------------------------------------------------------------------
 * Memory nodes and the graph memory pool
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                        size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    CUresult r = graph_enter(hGraph, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    if (!nodeParams || !phGraphNode || !deps_ok(hGraph, dependencies, numDependencies))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    const CUmemPoolProps *pp = &nodeParams->poolProps;
    if (pp->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || pp->handleTypes != 0 ||
        pp->location.type != CU_MEM_LOCATION_TYPE_DEVICE || pp->location.id != hGraph->ctx->dev->ordinal ||
        nodeParams->bytesize == 0)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_gblock_t *b = NULL;
    r = sim_gblock_new(hGraph->ctx, nodeParams->bytesize, &b);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    struct CUgraphNode_st *node = NULL;
    node_begin(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &node);
    node->block = b;
    nodeParams->dptr = sim_gblock_addr(b);
    node->p.alloc = *nodeParams;
    node->p.alloc.accessDescs = NULL; /* the program's array: not kept */
    node->p.alloc.accessDescCount = 0;
    return drv_leave(CUDA_SUCCESS);
}

CUresult drv_graph_capture_alloc(struct CUstream_st *s, size_t size, CUdeviceptr *dptr)
{
    struct CUgraph_st *g = s->capture->graph;
    sim_gblock_t *b = NULL;
    CUresult r = sim_gblock_new(s->ctx, size, &b);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUgraphNode_st *node = sim_graph_node_add(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC, s->cap_deps, s->ncap_deps);
    node->ctx = s->ctx;
    node->block = b;
    node->p.alloc = (CUDA_MEM_ALLOC_NODE_PARAMS){
        .poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                      .location = {CU_MEM_LOCATION_TYPE_DEVICE, s->ctx->dev->ordinal}},
        .bytesize = size,
        .dptr = sim_gblock_addr(b)};
    sim_graph_capture_deps(s, &node, 1, false);
    *dptr = sim_gblock_addr(b);
    return CUDA_SUCCESS;
}

CUresult drv_graph_capture_free(struct CUstream_st *s, sim_gblock_t *b)
{
    struct CUgraph_st *g = s->capture->graph;
    if (sim_gblock_freed_in_graph(b))
        return CUDA_ERROR_INVALID_VALUE;
    bool own = false;
    for (size_t i = 0; i < g->nnodes && !own; i++)
        own = g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && g->nodes[i]->block == b;
    struct CUgraphNode_st *node = sim_graph_node_add(g, CU_GRAPH_NODE_TYPE_MEM_FREE, s->cap_deps, s->ncap_deps);
    node->ctx = s->ctx;
    node->block = b;
    sim_gblock_retain(b);
    if (own)
        sim_gblock_mark_freed(b);
    sim_graph_capture_deps(s, &node, 1, false);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
    return node_get(hNode, CU_GRAPH_NODE_TYPE_MEM_ALLOC, params_out, sizeof *params_out);
}

SIM_API CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                       size_t numDependencies, CUdeviceptr dptr)
{
    CUresult r = graph_enter(hGraph, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    sim_gblock_t *b = sim_gblock_at(dptr);
    /* only a graph allocation's address, freed at most once in its graph */
    if (!b || sim_gblock_freed_in_graph(b) || !phGraphNode || !deps_ok(hGraph, dependencies, numDependencies))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    bool own = false;
    for (size_t i = 0; i < hGraph->nnodes && !own; i++)
        own = hGraph->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && hGraph->nodes[i]->block == b;
    struct CUgraphNode_st *node = NULL;
    node_begin(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEM_FREE, &node);
    node->block = b;
    sim_gblock_retain(b);
    if (own)
        sim_gblock_mark_freed(b);
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out)
{
    CUresult r = graph_enter(hNode, SIM_MAGIC_NODE);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr_out || hNode->type != CU_GRAPH_NODE_TYPE_MEM_FREE)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *dptr_out = sim_gblock_addr(hNode->block);
    return drv_leave(CUDA_SUCCESS);
}

static CUresult graph_mem_device(CUdevice device, sim_device_t **d)
{
    sim_lock();
    CUresult r = sim_check_init();
    if (r == CUDA_SUCCESS && (device < 0 || device >= sim.ndev))
        r = CUDA_ERROR_INVALID_DEVICE;
    if (r == CUDA_SUCCESS)
        *d = &sim.dev[device];
    return r;
}

SIM_API CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    sim_device_t *d = NULL;
    CUresult r = graph_mem_device(device, &d);
    if (r == CUDA_SUCCESS)
        sim_graph_mem_trim(d);
    return drv_leave(r);
}

SIM_API CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    sim_device_t *d = NULL;
    CUresult r = graph_mem_device(device, &d);
    if (r != CUDA_SUCCESS || !value)
        return drv_leave(r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE);
    cuuint64_t v;
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
        v = d->graph_mem.used;
        break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
        v = d->graph_mem.used_high;
        break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
        v = d->graph_mem.reserved;
        break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
        v = d->graph_mem.reserved_high;
        break;
    default:
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    }
    *(cuuint64_t *)value = v;
    return drv_leave(CUDA_SUCCESS);
}

/* Only the high-water marks may be set, and only to 0 (a reset). */
SIM_API CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    sim_device_t *d = NULL;
    CUresult r = graph_mem_device(device, &d);
    if (r != CUDA_SUCCESS || !value || *(cuuint64_t *)value != 0)
        return drv_leave(r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE);
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
        d->graph_mem.used_high = 0;
    else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
        d->graph_mem.reserved_high = 0;
    else
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Structure: clones, node lists, edges
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    CUresult r = graph_enter(originalGraph, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phGraphClone)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUgraph_st *c = NULL;
    r = graph_clone(originalGraph, &c);
    if (r == CUDA_SUCCESS) {
        handle_add(c, SIM_MAGIC_GRAPH);
        *phGraphClone = c;
    }
    return drv_leave(r);
}

SIM_API CUresult cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode, CUgraph hClonedGraph)
{
    CUresult r = graph_enter(hClonedGraph, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phNode || !handle_is(hOriginalNode, SIM_MAGIC_NODE))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    for (size_t i = 0; i < hClonedGraph->nnodes; i++)
        if (hClonedGraph->nodes[i]->origin == hOriginalNode) {
            *phNode = hClonedGraph->nodes[i];
            return drv_leave(CUDA_SUCCESS);
        }
    return drv_leave(CUDA_ERROR_INVALID_VALUE);
}

SIM_API CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    CUresult r = graph_enter(hNode, SIM_MAGIC_NODE);
    if (r != CUDA_SUCCESS)
        return r;
    if (!type)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *type = hNode->type;
    return drv_leave(CUDA_SUCCESS);
}

/* Fills out[0..*n) with the nodes keep() accepts, or counts them when out
 * is NULL; *n becomes the count when out is NULL or the count is smaller
 * (the rest of out then NULL), as CUDA's list calls do. */
typedef bool (*node_pred_t)(const struct CUgraphNode_st *node, const void *arg);

static CUresult list_nodes(struct CUgraphNode_st *const *nodes, size_t count, node_pred_t keep, const void *arg,
                           CUgraphNode *out, CUgraphEdgeData *data, size_t *n)
{
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    size_t k = 0;
    for (size_t i = 0; i < count; i++) {
        if (keep && !keep(nodes[i], arg))
            continue;
        if (out && k < *n) {
            out[k] = nodes[i];
            if (data)
                memset(&data[k], 0, sizeof data[k]);
        }
        k++;
    }
    if (out)
        for (size_t i = k; i < *n; i++) {
            out[i] = NULL;
            if (data)
                memset(&data[i], 0, sizeof data[i]);
        }
    if (!out || k < *n)
        *n = k;
    return CUDA_SUCCESS;
}

static bool is_root(const struct CUgraphNode_st *node, const void *arg)
{
    (void)arg;
    return node->ndeps == 0;
}

static bool depends_on(const struct CUgraphNode_st *node, const void *arg)
{
    return has_edge(arg, node);
}

SIM_API CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    CUresult r = graph_enter(hGraph, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    return drv_leave(list_nodes(hGraph->nodes, hGraph->nnodes, NULL, NULL, nodes, NULL, numNodes));
}

SIM_API CUresult cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes)
{
    CUresult r = graph_enter(hGraph, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    return drv_leave(list_nodes(hGraph->nodes, hGraph->nnodes, is_root, NULL, rootNodes, NULL, numRootNodes));
}

SIM_API CUresult cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *dependencies, CUgraphEdgeData *edgeData,
                                               size_t *numDependencies)
{
    CUresult r = graph_enter(hNode, SIM_MAGIC_NODE);
    if (r != CUDA_SUCCESS)
        return r;
    return drv_leave(list_nodes(hNode->deps, hNode->ndeps, NULL, NULL, dependencies, edgeData, numDependencies));
}

SIM_API CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies, size_t *numDependencies)
{
    return cuGraphNodeGetDependencies_v2(hNode, dependencies, NULL, numDependencies);
}

SIM_API CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                                 CUgraphEdgeData *edgeData, size_t *numDependentNodes)
{
    CUresult r = graph_enter(hNode, SIM_MAGIC_NODE);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUgraph_st *g = hNode->graph;
    return drv_leave(list_nodes(g->nodes, g->nnodes, depends_on, hNode, dependentNodes, edgeData, numDependentNodes));
}

SIM_API CUresult cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes, size_t *numDependentNodes)
{
    return cuGraphNodeGetDependentNodes_v2(hNode, dependentNodes, NULL, numDependentNodes);
}

SIM_API CUresult cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edgeData,
                                    size_t *numEdges)
{
    CUresult r = graph_enter(hGraph, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    if (!numEdges || (!from) != (!to))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    size_t k = 0;
    for (size_t i = 0; i < hGraph->nnodes; i++)
        for (size_t d = 0; d < hGraph->nodes[i]->ndeps; d++, k++)
            if (from && k < *numEdges) {
                from[k] = hGraph->nodes[i]->deps[d];
                to[k] = hGraph->nodes[i];
                if (edgeData)
                    memset(&edgeData[k], 0, sizeof edgeData[k]);
            }
    if (from)
        for (size_t i = k; i < *numEdges; i++) {
            from[i] = to[i] = NULL;
            if (edgeData)
                memset(&edgeData[i], 0, sizeof edgeData[i]);
        }
    if (!from || k < *numEdges)
        *numEdges = k;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges)
{
    return cuGraphGetEdges_v2(hGraph, from, to, NULL, numEdges);
}

/* Edges from[i] -> to[i], all checked before any is added or removed. */
static CUresult edges_change(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *data,
                             size_t n, bool add)
{
    CUresult r = graph_enter(g, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    if (n && (!from || !to))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!add && g->has_mem) /* the edges of a graph with memory nodes stay */
        return drv_leave(CUDA_ERROR_NOT_SUPPORTED);
    for (size_t i = 0; i < n; i++) {
        if (!deps_ok(g, &from[i], 1) || !deps_ok(g, &to[i], 1) || from[i] == to[i] || has_edge(from[i], to[i]) != !add)
            return drv_leave(CUDA_ERROR_INVALID_VALUE);
        if (data) /* default edges only */
            for (size_t b = 0; b < sizeof data[i]; b++)
                if (((const unsigned char *)&data[i])[b])
                    return drv_leave(CUDA_ERROR_NOT_SUPPORTED);
    }
    for (size_t i = 0; i < n; i++) {
        struct CUgraphNode_st *t = to[i];
        if (add) {
            t->deps = realloc(t->deps, (t->ndeps + 1) * sizeof *t->deps);
            if (!t->deps)
                abort();
            t->deps[t->ndeps++] = from[i];
            continue;
        }
        for (size_t d = 0; d < t->ndeps; d++)
            if (t->deps[d] == from[i]) {
                t->deps[d] = t->deps[--t->ndeps];
                break;
            }
    }
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                           const CUgraphEdgeData *edgeData, size_t numDependencies)
{
    return edges_change(hGraph, from, to, edgeData, numDependencies, true);
}

SIM_API CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                        size_t numDependencies)
{
    return edges_change(hGraph, from, to, NULL, numDependencies, true);
}

SIM_API CUresult cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                              const CUgraphEdgeData *edgeData, size_t numDependencies)
{
    return edges_change(hGraph, from, to, edgeData, numDependencies, false);
}

SIM_API CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                           size_t numDependencies)
{
    return edges_change(hGraph, from, to, NULL, numDependencies, false);
}

SIM_API CUresult cuGraphDestroyNode(CUgraphNode hNode)
{
    CUresult r = graph_enter(hNode, SIM_MAGIC_NODE);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUgraph_st *g = hNode->graph;
    if (g->has_mem) /* the nodes of a graph with memory nodes stay */
        return drv_leave(CUDA_ERROR_NOT_SUPPORTED);
    for (size_t i = 0; i < g->nnodes; i++) {
        struct CUgraphNode_st *t = g->nodes[i];
        for (size_t d = 0; d < t->ndeps;)
            if (t->deps[d] == hNode)
                memmove(&t->deps[d], &t->deps[d + 1], (--t->ndeps - d) * sizeof *t->deps);
            else
                d++;
    }
    for (size_t i = 0; i < g->nnodes; i++)
        if (g->nodes[i] == hNode) {
            memmove(&g->nodes[i], &g->nodes[i + 1], (g->nnodes - i - 1) * sizeof *g->nodes);
            g->nnodes--;
            break;
        }
    sim_graph_node_free(hNode);
    return drv_leave(CUDA_SUCCESS);
}

static const char *const node_type_names[] = {
    [CU_GRAPH_NODE_TYPE_KERNEL] = "kernel",         [CU_GRAPH_NODE_TYPE_MEMCPY] = "memcpy",
    [CU_GRAPH_NODE_TYPE_MEMSET] = "memset",         [CU_GRAPH_NODE_TYPE_HOST] = "host",
    [CU_GRAPH_NODE_TYPE_GRAPH] = "graph",           [CU_GRAPH_NODE_TYPE_EMPTY] = "empty",
    [CU_GRAPH_NODE_TYPE_WAIT_EVENT] = "wait event", [CU_GRAPH_NODE_TYPE_EVENT_RECORD] = "event record",
    [CU_GRAPH_NODE_TYPE_MEM_ALLOC] = "mem alloc",   [CU_GRAPH_NODE_TYPE_MEM_FREE] = "mem free",
    [CU_GRAPH_NODE_TYPE_CONDITIONAL] = "conditional",
};

/* A minimal DOT file: one box per node (its kind, and the kernel's name),
 * one arrow per edge; child graphs as clusters. */
static void dot_graph(FILE *f, const struct CUgraph_st *g, const char *prefix)
{
    for (size_t i = 0; i < g->nnodes; i++) {
        const struct CUgraphNode_st *n = g->nodes[i];
        const char *kind =
            (size_t)n->type < sizeof node_type_names / sizeof *node_type_names && node_type_names[n->type]
                ? node_type_names[n->type]
                : "node";
        fprintf(f, "  \"%s%zu\" [shape=box label=\"%s%s%s\"];\n", prefix, i, kind, n->op ? "\\n" : "",
                n->op ? n->op->what : "");
        if (n->child) {
            char sub[64];
            snprintf(sub, sizeof sub, "%s%zu_", prefix, i);
            fprintf(f, "  subgraph \"cluster_%s\" {\n", sub);
            dot_graph(f, n->child, sub);
            fprintf(f, "  }\n");
        }
        for (size_t d = 0; d < n->ndeps; d++)
            for (size_t k = 0; k < g->nnodes; k++)
                if (g->nodes[k] == n->deps[d])
                    fprintf(f, "  \"%s%zu\" -> \"%s%zu\";\n", prefix, k, prefix, i);
    }
}

SIM_API CUresult cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags)
{
    (void)flags;
    CUresult r = graph_enter(hGraph, SIM_MAGIC_GRAPH);
    if (r != CUDA_SUCCESS)
        return r;
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    fprintf(f, "digraph dot {\n");
    dot_graph(f, hGraph, "n");
    fprintf(f, "}\n");
    bool ok = fclose(f) == 0;
    return drv_leave(ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

/* ------------------------------------------------------------------------
 * Instances
 * ---------------------------------------------------------------------- */

#define INSTANTIATE_FLAGS                                                                                              \
    (CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |                            \
     CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)

/* Instantiates g (the lock held); the upload stream for FLAG_UPLOAD. */
static CUresult instantiate(CUgraphExec *out, CUgraph g, unsigned long long flags, CUstream upload, bool ptds,
                            CUgraphNode *err_node)
{
    if (!out || !handle_is(g, SIM_MAGIC_GRAPH) || (flags & ~(unsigned long long)INSTANTIATE_FLAGS))
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH)
        return CUDA_ERROR_NOT_SUPPORTED; /* no device-side launch on the simulator */
    struct CUstream_st *s = NULL;
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
        struct CUctx_st *ctx = NULL;
        CUresult r = sim_ctx_get(&ctx);
        if (r == CUDA_SUCCESS)
            r = sim_stream_resolve(ctx, upload, ptds, &s);
        if (r != CUDA_SUCCESS)
            return r;
    }
    struct CUgraphNode_st *bad = NULL;
    CUresult r = sim_graph_instantiate(g, flags, out, &bad);
    if (err_node)
        *err_node = bad;
    if (r == CUDA_SUCCESS && s)
        r = sim_exec_upload(*out);
    return r;
}

SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    sim_lock();
    CUresult r = sim_check_init();
    if (r == CUDA_SUCCESS && (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)) /* only with cuGraphInstantiateWithParams */
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = instantiate(phGraphExec, hGraph, flags, NULL, false, NULL);
    return drv_leave(r);
}

/* The CUDA 10 forms: an error node and a log buffer. */
SIM_API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                       char *logBuffer, size_t bufferSize)
{
    sim_lock();
    CUresult r = sim_check_init();
    if (r == CUDA_SUCCESS)
        r = instantiate(phGraphExec, hGraph, 0, NULL, false, phErrorNode);
    if (logBuffer && bufferSize)
        snprintf(logBuffer, bufferSize, "%s", r == CUDA_SUCCESS ? "" : "graph instantiation failed");
    return drv_leave(r);
}

SIM_API CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
                                    size_t bufferSize)
{
    return cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

static CUresult instantiate_with_params(CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *p,
                                        bool ptds)
{
    sim_lock();
    CUresult r = sim_check_init();
    if (r == CUDA_SUCCESS && !p)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    p->hErrNode_out = NULL;
    r = instantiate(phGraphExec, hGraph, p->flags, p->hUploadStream, ptds, &p->hErrNode_out);
    p->result_out = r == CUDA_SUCCESS               ? CUDA_GRAPH_INSTANTIATE_SUCCESS
                    : r == CUDA_ERROR_NOT_SUPPORTED ? CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED
                    : p->hErrNode_out               ? CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE
                                                    : CUDA_GRAPH_INSTANTIATE_ERROR;
    return drv_leave(r);
}

DRV_PTSZ(cuGraphInstantiateWithParams, instantiate_with_params,
         (CUgraphExec * phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams),
         (phGraphExec, hGraph, instantiateParams))

SIM_API CUresult cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t *flags)
{
    CUresult r = graph_enter(hGraphExec, SIM_MAGIC_EXEC);
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *flags = hGraphExec->flags;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    sim_lock();
    if (!handle_take(hGraphExec, SIM_MAGIC_EXEC))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_exec_free(hGraphExec);
    return drv_leave(CUDA_SUCCESS);
}

static sim_xnode_t *exec_node(struct CUgraphExec_st *x, const struct CUgraphNode_st *node)
{
    for (size_t i = 0; i < x->nnodes; i++)
        if (x->nodes[i].origin == node)
            return &x->nodes[i];
    return NULL;
}

/* cuGraphExecUpdate's checks of x against g: the same nodes by creation
 * order, kinds and edges; what may not change in a node.  Writes the
 * result and the nodes at fault. */
static bool update_check(struct CUgraphExec_st *x, struct CUgraph_st *g, CUgraphExecUpdateResultInfo *info)
{
    if (g->nnodes != x->nnodes) {
        info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        return false;
    }
    for (size_t k = 0; k < x->nnodes; k++) {
        sim_xnode_t *xn = &x->nodes[k];
        struct CUgraphNode_st *node = g->nodes[xn->gindex];
        info->errorNode = node;
        if (node->type != xn->type) {
            info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
            return false;
        }
        if (node->ndeps != xn->ndeps) {
            info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
            return false;
        }
        for (size_t d = 0; d < node->ndeps; d++) {
            bool found = false;
            for (size_t e = 0; e < xn->ndeps && !found; e++)
                found = g->nodes[x->nodes[xn->deps[e]].gindex] == node->deps[d];
            if (!found) {
                info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
                info->errorFromNode = node->deps[d];
                return false;
            }
        }
        if ((xn->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || xn->type == CU_GRAPH_NODE_TYPE_MEM_FREE) &&
            node->block != xn->block) {
            info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
            return false;
        }
        if (xn->type == CU_GRAPH_NODE_TYPE_KERNEL && node->ctx != x->ctx) {
            info->result = CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE;
            return false;
        }
        if (xn->child && !update_check(xn->child, node->child, info))
            return false;
        if (xn->nbodies != node->nbodies || (xn->nbodies && xn->cond_type != node->cond_type)) {
            info->result = CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
            return false;
        }
        for (unsigned b = 0; b < xn->nbodies; b++)
            if (!update_check(xn->bodies[b], node->bodies[b], info))
                return false;
    }
    info->errorNode = NULL;
    return true;
}

static void update_apply(struct CUgraphExec_st *x, struct CUgraph_st *g)
{
    for (size_t k = 0; k < x->nnodes; k++) {
        sim_xnode_t *xn = &x->nodes[k];
        struct CUgraphNode_st *node = g->nodes[xn->gindex];
        if (xn->op)
            sim_op_free(xn->op);
        xn->op = node->op ? sim_op_clone(node->op) : NULL;
        xn->event = node->event;
        if (xn->child)
            update_apply(xn->child, node->child);
        if (xn->nbodies)
            xn->cond_value = node->cond->value;
        for (unsigned b = 0; b < xn->nbodies; b++)
            update_apply(xn->bodies[b], node->bodies[b]);
    }
}

SIM_API CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo)
{
    CUresult r = graph_enter(hGraphExec, SIM_MAGIC_EXEC);
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_is(hGraph, SIM_MAGIC_GRAPH) || !resultInfo)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *resultInfo = (CUgraphExecUpdateResultInfo){CU_GRAPH_EXEC_UPDATE_SUCCESS, NULL, NULL};
    if (!update_check(hGraphExec, hGraph, resultInfo))
        return drv_leave(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    update_apply(hGraphExec, hGraph);
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                                   CUgraphExecUpdateResult *updateResult_out)
{
    CUgraphExecUpdateResultInfo info;
    if (!hErrorNode_out || !updateResult_out)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuGraphExecUpdate_v2(hGraphExec, hGraph, &info);
    *hErrorNode_out = info.errorNode;
    *updateResult_out = info.result;
    return r;
}

/* An instance's copy of a node gets new work from parameters. */
static CUresult exec_set_work(CUgraphExec x, CUgraphNode h, CUgraphNodeType type, const void *params, size_t size)
{
    CUresult r = graph_enter(x, SIM_MAGIC_EXEC);
    if (r != CUDA_SUCCESS)
        return r;
    sim_xnode_t *xn = handle_is(h, SIM_MAGIC_NODE) ? exec_node(x, h) : NULL;
    if (!params || !xn || xn->type != type)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUgraphNode_st tmp = {.type = type};
    memcpy(&tmp.p, params, size);
    sim_op_t *op = NULL;
    struct CUctx_st *ctx = x->ctx;
    r = node_params_op(&tmp, &op, &ctx);
    if (r == CUDA_SUCCESS && ctx != x->ctx)
        r = CUDA_ERROR_INVALID_VALUE; /* a kernel of another context */
    if (r != CUDA_SUCCESS) {
        if (op)
            sim_op_free(op);
        return drv_leave(r);
    }
    sim_op_free(xn->op);
    xn->op = op;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)
{
    return exec_set_work(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_KERNEL, nodeParams, sizeof *nodeParams);
}

SIM_API CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    CUDA_KERNEL_NODE_PARAMS_v2 v = kernel_v2(nodeParams);
    return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, nodeParams ? &v : NULL);
}

SIM_API CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    (void)ctx;
    return exec_set_work(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMCPY, copyParams, sizeof *copyParams);
}

SIM_API CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    (void)ctx;
    return exec_set_work(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMSET, memsetParams, sizeof *memsetParams);
}

SIM_API CUresult cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                              const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    return exec_set_work(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_HOST, nodeParams, sizeof *nodeParams);
}

SIM_API CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraph childGraph)
{
    CUresult r = graph_enter(hGraphExec, SIM_MAGIC_EXEC);
    if (r != CUDA_SUCCESS)
        return r;
    sim_xnode_t *xn = handle_is(hNode, SIM_MAGIC_NODE) ? exec_node(hGraphExec, hNode) : NULL;
    if (!xn || xn->type != CU_GRAPH_NODE_TYPE_GRAPH || !handle_is(childGraph, SIM_MAGIC_GRAPH))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    CUgraphExecUpdateResultInfo info = {0};
    if (!update_check(xn->child, childGraph, &info))
        return drv_leave(CUDA_ERROR_INVALID_VALUE); /* only parameters may change, not the topology */
    update_apply(xn->child, childGraph);
    return drv_leave(CUDA_SUCCESS);
}

static CUresult exec_set_event(CUgraphExec x, CUgraphNode h, CUevent e, CUgraphNodeType type)
{
    CUresult r = graph_enter(x, SIM_MAGIC_EXEC);
    if (r != CUDA_SUCCESS)
        return r;
    sim_xnode_t *xn = handle_is(h, SIM_MAGIC_NODE) ? exec_node(x, h) : NULL;
    if (!xn || xn->type != type || !handle_is(e, SIM_MAGIC_EVENT))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    xn->event = e;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event)
{
    return exec_set_event(hGraphExec, hNode, event, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

SIM_API CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event)
{
    return exec_set_event(hGraphExec, hNode, event, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

/* Kernel, memcpy and memset nodes may be disabled (they then do nothing). */
static sim_xnode_t *enable_node(CUgraphExec x, CUgraphNode h)
{
    sim_xnode_t *xn = handle_is(h, SIM_MAGIC_NODE) ? exec_node(x, h) : NULL;
    if (!xn || (xn->type != CU_GRAPH_NODE_TYPE_KERNEL && xn->type != CU_GRAPH_NODE_TYPE_MEMCPY &&
                xn->type != CU_GRAPH_NODE_TYPE_MEMSET))
        return NULL;
    return xn;
}

SIM_API CUresult cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled)
{
    CUresult r = graph_enter(hGraphExec, SIM_MAGIC_EXEC);
    if (r != CUDA_SUCCESS)
        return r;
    sim_xnode_t *xn = enable_node(hGraphExec, hNode);
    if (!xn)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    xn->enabled = isEnabled != 0;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int *isEnabled)
{
    CUresult r = graph_enter(hGraphExec, SIM_MAGIC_EXEC);
    if (r != CUDA_SUCCESS)
        return r;
    sim_xnode_t *xn = enable_node(hGraphExec, hNode);
    if (!xn || !isEnabled)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *isEnabled = xn->enabled;
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Upload and launch
 * ---------------------------------------------------------------------- */

static CUresult graph_upload(CUgraphExec x, CUstream h, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = handle_is(x, SIM_MAGIC_EXEC) ? sim_stream_resolve(ctx, h, ptds, &s) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = sim_exec_upload(x);
    return drv_leave(r);
}

DRV_PTSZ(cuGraphUpload, graph_upload, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream))

static CUresult graph_launch(CUgraphExec x, CUstream h, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_is(x, SIM_MAGIC_EXEC))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (s->capture) {
        /* captured: a child node holding a copy of the instance's graph */
        struct CUgraph_st *copy = NULL;
        r = x->graph ? graph_clone(x->graph, &copy) : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        if (r != CUDA_SUCCESS)
            return drv_leave(r);
        copy->is_child = true;
        handle_add(copy, SIM_MAGIC_GRAPH);
        struct CUgraphNode_st *node =
            sim_graph_node_add(s->capture->graph, CU_GRAPH_NODE_TYPE_GRAPH, s->cap_deps, s->ncap_deps);
        node->child = copy;
        sim_graph_capture_deps(s, &node, 1, false);
        return drv_leave(CUDA_SUCCESS);
    }
    return drv_leave(sim_exec_launch(x, s));
}

DRV_PTSZ(cuGraphLaunch, graph_launch, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream))
