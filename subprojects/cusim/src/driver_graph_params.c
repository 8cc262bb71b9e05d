/*
 * Driver API of the simulated device: the generic node calls
 * (cuGraphAddNode, cuGraphNodeSetParams, cuGraphExecNodeSetParams), whose
 * CUgraphNodeParams is a tagged union.  Each kind is one row of kinds[]:
 * the size of its member (the bytes after it must be zero, as cuda.h
 * says), and what adding, setting and setting in an instance do, through
 * the per-kind entry points of driver_graph.c.  A kind without a row
 * (external semaphores, batch memory operations) answers
 * CUDA_ERROR_NOT_SUPPORTED with the stubs' line.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "stub.h"

/* The members whose layout is the older struct's plus fields at the end. */
_Static_assert(sizeof(CUDA_KERNEL_NODE_PARAMS_v3) == sizeof(CUDA_KERNEL_NODE_PARAMS_v2), "v3 is v2");
_Static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS_v2) == sizeof(CUDA_MEM_ALLOC_NODE_PARAMS_v1), "v2 is v1");
_Static_assert(offsetof(CUDA_MEMSET_NODE_PARAMS_v2, ctx) == sizeof(CUDA_MEMSET_NODE_PARAMS_v1), "v2 is v1 + ctx");

typedef CUresult (*add_fn)(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p);
typedef CUresult (*set_fn)(CUgraphNode h, CUgraphNodeParams *p);
typedef CUresult (*exec_set_fn)(CUgraphExec x, CUgraphNode h, CUgraphNodeParams *p);

/* ------------------------------------------------------------------------
 * One function per kind and call
 * ---------------------------------------------------------------------- */

static CUresult kernel_add(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    return cuGraphAddKernelNode_v2(ph, g, deps, n, (const CUDA_KERNEL_NODE_PARAMS_v2 *)&p->kernel);
}

static CUresult kernel_set(CUgraphNode h, CUgraphNodeParams *p)
{
    return cuGraphKernelNodeSetParams_v2(h, (const CUDA_KERNEL_NODE_PARAMS_v2 *)&p->kernel);
}

static CUresult kernel_exec_set(CUgraphExec x, CUgraphNode h, CUgraphNodeParams *p)
{
    return cuGraphExecKernelNodeSetParams_v2(x, h, (const CUDA_KERNEL_NODE_PARAMS_v2 *)&p->kernel);
}

/* flags and reserved must be zero */
static CUresult memcpy_add(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    if (p->memcpy.flags || p->memcpy.reserved)
        return CUDA_ERROR_INVALID_VALUE;
    return cuGraphAddMemcpyNode(ph, g, deps, n, &p->memcpy.copyParams, p->memcpy.copyCtx);
}

static CUresult memcpy_set(CUgraphNode h, CUgraphNodeParams *p)
{
    if (p->memcpy.flags || p->memcpy.reserved)
        return CUDA_ERROR_INVALID_VALUE;
    return cuGraphMemcpyNodeSetParams(h, &p->memcpy.copyParams);
}

static CUresult memcpy_exec_set(CUgraphExec x, CUgraphNode h, CUgraphNodeParams *p)
{
    if (p->memcpy.flags || p->memcpy.reserved)
        return CUDA_ERROR_INVALID_VALUE;
    return cuGraphExecMemcpyNodeSetParams(x, h, &p->memcpy.copyParams, p->memcpy.copyCtx);
}

static CUresult memset_add(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    return cuGraphAddMemsetNode(ph, g, deps, n, (const CUDA_MEMSET_NODE_PARAMS *)&p->memset, p->memset.ctx);
}

static CUresult memset_set(CUgraphNode h, CUgraphNodeParams *p)
{
    return cuGraphMemsetNodeSetParams(h, (const CUDA_MEMSET_NODE_PARAMS *)&p->memset);
}

static CUresult memset_exec_set(CUgraphExec x, CUgraphNode h, CUgraphNodeParams *p)
{
    return cuGraphExecMemsetNodeSetParams(x, h, (const CUDA_MEMSET_NODE_PARAMS *)&p->memset, p->memset.ctx);
}

static CUresult host_add(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    return cuGraphAddHostNode(ph, g, deps, n, (const CUDA_HOST_NODE_PARAMS *)&p->host);
}

static CUresult host_set(CUgraphNode h, CUgraphNodeParams *p)
{
    return cuGraphHostNodeSetParams(h, (const CUDA_HOST_NODE_PARAMS *)&p->host);
}

static CUresult host_exec_set(CUgraphExec x, CUgraphNode h, CUgraphNodeParams *p)
{
    return cuGraphExecHostNodeSetParams(x, h, (const CUDA_HOST_NODE_PARAMS *)&p->host);
}

static CUresult child_add(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    return drv_graph_add_child(ph, g, deps, n, &p->graph);
}

static CUresult child_set(CUgraphNode h, CUgraphNodeParams *p)
{
    return p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE ? drv_graph_set_child(h, p->graph.graph)
                                                                       : CUDA_ERROR_INVALID_VALUE;
}

static CUresult child_exec_set(CUgraphExec x, CUgraphNode h, CUgraphNodeParams *p)
{
    return p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE
               ? cuGraphExecChildGraphNodeSetParams(x, h, p->graph.graph)
               : CUDA_ERROR_INVALID_VALUE;
}

static CUresult empty_add(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    (void)p;
    return cuGraphAddEmptyNode(ph, g, deps, n);
}

/* An empty node has nothing to set: only its kind is checked. */
static CUresult empty_set(CUgraphNode h, CUgraphNodeParams *p)
{
    return drv_graph_node_type_is(h, p->type);
}

static CUresult empty_exec_set(CUgraphExec x, CUgraphNode h, CUgraphNodeParams *p)
{
    cuuint64_t flags; /* x checked */
    CUresult r = cuGraphExecGetFlags(x, &flags);
    return r == CUDA_SUCCESS ? drv_graph_node_type_is(h, p->type) : r;
}

static CUresult wait_add(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    return cuGraphAddEventWaitNode(ph, g, deps, n, p->eventWait.event);
}

static CUresult wait_set(CUgraphNode h, CUgraphNodeParams *p)
{
    return cuGraphEventWaitNodeSetEvent(h, p->eventWait.event);
}

static CUresult wait_exec_set(CUgraphExec x, CUgraphNode h, CUgraphNodeParams *p)
{
    return cuGraphExecEventWaitNodeSetEvent(x, h, p->eventWait.event);
}

static CUresult record_add(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    return cuGraphAddEventRecordNode(ph, g, deps, n, p->eventRecord.event);
}

static CUresult record_set(CUgraphNode h, CUgraphNodeParams *p)
{
    return cuGraphEventRecordNodeSetEvent(h, p->eventRecord.event);
}

static CUresult record_exec_set(CUgraphExec x, CUgraphNode h, CUgraphNodeParams *p)
{
    return cuGraphExecEventRecordNodeSetEvent(x, h, p->eventRecord.event);
}

static CUresult alloc_add(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    return cuGraphAddMemAllocNode(ph, g, deps, n, (CUDA_MEM_ALLOC_NODE_PARAMS *)&p->alloc);
}

static CUresult free_add(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    return cuGraphAddMemFreeNode(ph, g, deps, n, p->free.dptr);
}

static CUresult cond_add(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    return drv_graph_add_conditional(ph, g, deps, n, &p->conditional);
}

/* ------------------------------------------------------------------------
 * The kinds
 * ---------------------------------------------------------------------- */

/* A NULL set or exec_set: CUDA refuses the change (memory nodes: "API
 * unsupported", CUDA_ERROR_NOT_SUPPORTED; a conditional node's handle and
 * bodies are fixed when it is made, CUDA_ERROR_INVALID_VALUE). */
static const struct {
    size_t size; /* of the union member */
    add_fn add;
    set_fn set;
    exec_set_fn exec_set;
    CUresult refused; /* the answer of a NULL set or exec_set */
} kinds[] = {
    [CU_GRAPH_NODE_TYPE_KERNEL] = {sizeof(CUDA_KERNEL_NODE_PARAMS_v3), kernel_add, kernel_set, kernel_exec_set, 0},
    [CU_GRAPH_NODE_TYPE_MEMCPY] = {sizeof(CUDA_MEMCPY_NODE_PARAMS), memcpy_add, memcpy_set, memcpy_exec_set, 0},
    [CU_GRAPH_NODE_TYPE_MEMSET] = {sizeof(CUDA_MEMSET_NODE_PARAMS_v2), memset_add, memset_set, memset_exec_set, 0},
    [CU_GRAPH_NODE_TYPE_HOST] = {sizeof(CUDA_HOST_NODE_PARAMS_v2), host_add, host_set, host_exec_set, 0},
    [CU_GRAPH_NODE_TYPE_GRAPH] = {sizeof(CUDA_CHILD_GRAPH_NODE_PARAMS), child_add, child_set, child_exec_set, 0},
    [CU_GRAPH_NODE_TYPE_EMPTY] = {0, empty_add, empty_set, empty_exec_set, 0},
    [CU_GRAPH_NODE_TYPE_WAIT_EVENT] = {sizeof(CUDA_EVENT_WAIT_NODE_PARAMS), wait_add, wait_set, wait_exec_set, 0},
    [CU_GRAPH_NODE_TYPE_EVENT_RECORD] = {sizeof(CUDA_EVENT_RECORD_NODE_PARAMS), record_add, record_set,
                                         record_exec_set, 0},
    [CU_GRAPH_NODE_TYPE_MEM_ALLOC] = {sizeof(CUDA_MEM_ALLOC_NODE_PARAMS_v2), alloc_add, NULL, NULL,
                                      CUDA_ERROR_NOT_SUPPORTED},
    [CU_GRAPH_NODE_TYPE_MEM_FREE] = {sizeof(CUDA_MEM_FREE_NODE_PARAMS), free_add, NULL, NULL,
                                     CUDA_ERROR_NOT_SUPPORTED},
    [CU_GRAPH_NODE_TYPE_CONDITIONAL] = {sizeof(CUDA_CONDITIONAL_NODE_PARAMS), cond_add, NULL, NULL,
                                        CUDA_ERROR_INVALID_VALUE},
};

/* The kinds without a row, by name, for the stubs' line. */
static const char *const unmodelled[] = {
    [CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL] = "external semaphore signal",
    [CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT] = "external semaphore wait",
    [CU_GRAPH_NODE_TYPE_BATCH_MEM_OP] = "batch memory operation",
};

#define NKINDS (sizeof kinds / sizeof *kinds)
_Static_assert(sizeof unmodelled / sizeof *unmodelled <= NKINDS, "one table of kinds");

/* CUDA_SUCCESS when p names a kind with a row and its reserved and unused
 * bytes are zero; else the error (a kind without a row: the stubs' line,
 * once per kind, naming call). */
static CUresult params_check(const CUgraphNodeParams *p, const char *call)
{
    static atomic_flag once[NKINDS];
    if (!p || (unsigned)p->type >= NKINDS)
        return CUDA_ERROR_INVALID_VALUE;
    if (!kinds[p->type].add) {
        if (!unmodelled[p->type])
            return CUDA_ERROR_INVALID_VALUE;
        char what[96];
        snprintf(what, sizeof what, "%s (%s nodes)", call, unmodelled[p->type]);
        return sim_stub_driver(&once[p->type], what);
    }
    const unsigned char *b = (const unsigned char *)p;
    size_t used = offsetof(CUgraphNodeParams, reserved1) + kinds[p->type].size;
    for (size_t i = offsetof(CUgraphNodeParams, reserved0); i < offsetof(CUgraphNodeParams, reserved1); i++)
        if (b[i])
            return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = used; i < sizeof *p; i++)
        if (b[i])
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* Edge data other than the default (zero) is not modelled, as for
 * cuGraphAddDependencies_v2. */
static CUresult edges_default(const CUgraphEdgeData *data, size_t n)
{
    for (size_t i = 0; data && i < n; i++) {
        const unsigned char *b = (const unsigned char *)&data[i];
        for (size_t k = 0; k < sizeof data[i]; k++)
            if (b[k])
                return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                   const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                   CUgraphNodeParams *nodeParams)
{
    CUresult r = params_check(nodeParams, "cuGraphAddNode");
    if (r == CUDA_SUCCESS)
        r = edges_default(dependencyData, numDependencies);
    if (r == CUDA_SUCCESS)
        r = kinds[nodeParams->type].add(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
    return r;
}

/* The CUDA 12.2 form, without edge data. */
SIM_API CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    return cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams);
}

SIM_API CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    CUresult r = params_check(nodeParams, "cuGraphNodeSetParams");
    if (r != CUDA_SUCCESS)
        return r;
    if (!kinds[nodeParams->type].set) {
        r = drv_graph_node_type_is(hNode, nodeParams->type);
        return r == CUDA_SUCCESS ? kinds[nodeParams->type].refused : r;
    }
    return kinds[nodeParams->type].set(hNode, nodeParams);
}

SIM_API CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    CUresult r = params_check(nodeParams, "cuGraphExecNodeSetParams");
    if (r != CUDA_SUCCESS)
        return r;
    if (!kinds[nodeParams->type].exec_set) {
        r = drv_graph_node_type_is(hNode, nodeParams->type);
        return r == CUDA_SUCCESS ? kinds[nodeParams->type].refused : r;
    }
    return kinds[nodeParams->type].exec_set(hGraphExec, hNode, nodeParams);
}
