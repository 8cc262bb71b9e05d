/*
 * The simulated runtime's graphs built by hand, graph memory and the
 * capture calls added with them: each is the driver call in the current
 * device's primary context, its parameters translated where the runtime's
 * structs differ (copies by kind and pitched pointers, kernels by their
 * host stub, void * device pointers).  Enum values and the layouts of the
 * host node, memset and pool properties are the driver's.
 */
#include <string.h>

#include "runtime_internal.h"
#include "runtime_major.h"

RT_API cudaError_t cudaGetFuncBySymbol(cudaFunction_t *functionPtr, const void *symbolPtr);

#define FWD(call) rt_ret(RT_FORWARD(call))

/* The driver's CUDA 12.3 forms (edge data, the third capture info): looked
 * up by that version, whatever this runtime's, so that libcudart.so.12 and
 * .13 call the same ABI (their table would get different ones). */
#define NEWER(var, fn, base, ptds)                                                                                     \
    __typeof__(fn) *var = NULL;                                                                                        \
    do {                                                                                                               \
        void *p_ = rt_driver_proc(base, 12030, ptds);                                                                  \
        memcpy(&var, &p_, sizeof p_);                                                                                  \
    } while (0)

/* ------------------------------------------------------------------------
 * Parameters
 * ---------------------------------------------------------------------- */

static cudaError_t kernel_params(const struct cudaKernelNodeParams *p, CUDA_KERNEL_NODE_PARAMS_v2 *k)
{
    if (!p)
        return cudaErrorInvalidValue;
    CUfunction f = NULL;
    cudaError_t e = cudaGetFuncBySymbol(&f, p->func);
    if (e != cudaSuccess)
        return e;
    *k = (CUDA_KERNEL_NODE_PARAMS_v2){.func = f,
                                      .gridDimX = p->gridDim.x,
                                      .gridDimY = p->gridDim.y,
                                      .gridDimZ = p->gridDim.z,
                                      .blockDimX = p->blockDim.x,
                                      .blockDimY = p->blockDim.y,
                                      .blockDimZ = p->blockDim.z,
                                      .sharedMemBytes = p->sharedMemBytes,
                                      .kernelParams = p->kernelParams,
                                      .extra = p->extra};
    return cudaSuccess;
}

/* Where each side of a copy of a kind lies. */
static const struct {
    CUmemorytype src, dst;
} copy_kinds[] = {
    [cudaMemcpyHostToHost] = {CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_HOST},
    [cudaMemcpyHostToDevice] = {CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE},
    [cudaMemcpyDeviceToHost] = {CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST},
    [cudaMemcpyDeviceToDevice] = {CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE},
    [cudaMemcpyDefault] = {CU_MEMORYTYPE_UNIFIED, CU_MEMORYTYPE_UNIFIED},
};

static cudaError_t copy_params(const struct cudaMemcpy3DParms *p, CUDA_MEMCPY3D *c)
{
    if (!p || (unsigned)p->kind > cudaMemcpyDefault)
        return cudaErrorInvalidValue;
    if (p->srcArray || p->dstArray)
        return cudaErrorNotSupported;
    memset(c, 0, sizeof *c);
    c->srcMemoryType = copy_kinds[p->kind].src;
    c->dstMemoryType = copy_kinds[p->kind].dst;
    c->srcHost = p->srcPtr.ptr;
    c->srcDevice = (CUdeviceptr)(uintptr_t)p->srcPtr.ptr;
    c->dstHost = p->dstPtr.ptr;
    c->dstDevice = (CUdeviceptr)(uintptr_t)p->dstPtr.ptr;
    c->srcXInBytes = p->srcPos.x;
    c->srcY = p->srcPos.y;
    c->srcZ = p->srcPos.z;
    c->dstXInBytes = p->dstPos.x;
    c->dstY = p->dstPos.y;
    c->dstZ = p->dstPos.z;
    c->srcPitch = p->srcPtr.pitch;
    c->srcHeight = p->srcPtr.ysize;
    c->dstPitch = p->dstPtr.pitch;
    c->dstHeight = p->dstPtr.ysize;
    c->WidthInBytes = p->extent.width;
    c->Height = p->extent.height;
    c->Depth = p->extent.depth;
    return cudaSuccess;
}

static struct cudaMemcpy3DParms copy_1d(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    struct cudaMemcpy3DParms p = {0};
    p.srcPtr = (struct cudaPitchedPtr){(void *)src, count, count, 1};
    p.dstPtr = (struct cudaPitchedPtr){dst, count, count, 1};
    p.extent = (struct cudaExtent){count, 1, 1};
    p.kind = kind;
    return p;
}

static CUDA_MEMSET_NODE_PARAMS memset_params(const struct cudaMemsetParams *p)
{
    return (CUDA_MEMSET_NODE_PARAMS){
        (CUdeviceptr)(uintptr_t)p->dst, p->pitch, p->value, p->elementSize, p->width, p->height};
}

_Static_assert(sizeof(struct cudaHostNodeParams) == sizeof(CUDA_HOST_NODE_PARAMS), "the same layout");
_Static_assert(sizeof(struct cudaMemPoolProps) == sizeof(CUmemPoolProps), "the same layout");

/* ------------------------------------------------------------------------
 * Graphs and nodes
 * ---------------------------------------------------------------------- */

RT_API cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)
{
    return FWD(RT_DRV->cuGraphCreate(pGraph, flags));
}

RT_API cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                          const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                          const struct cudaKernelNodeParams *pNodeParams)
{
    cudaError_t e = rt_enter();
    CUDA_KERNEL_NODE_PARAMS_v2 k;
    if (e == cudaSuccess)
        e = kernel_params(pNodeParams, &k);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuGraphAddKernelNode_v2(pGraphNode, graph, pDependencies, numDependencies, &k));
    return rt_ret(e);
}

/* The function handle stands for the kernel (the host stub is not kept). */
RT_API cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, struct cudaKernelNodeParams *pNodeParams)
{
    CUDA_KERNEL_NODE_PARAMS_v2 k;
    cudaError_t e = pNodeParams ? RT_FORWARD(RT_DRV->cuGraphKernelNodeGetParams_v2(node, &k)) : cudaErrorInvalidValue;
    if (e == cudaSuccess)
        *pNodeParams = (struct cudaKernelNodeParams){(void *)k.func,
                                                     {k.gridDimX, k.gridDimY, k.gridDimZ},
                                                     {k.blockDimX, k.blockDimY, k.blockDimZ},
                                                     k.sharedMemBytes,
                                                     k.kernelParams,
                                                     k.extra};
    return rt_ret(e);
}

RT_API cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const struct cudaKernelNodeParams *pNodeParams)
{
    cudaError_t e = rt_enter();
    CUDA_KERNEL_NODE_PARAMS_v2 k;
    if (e == cudaSuccess)
        e = kernel_params(pNodeParams, &k);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuGraphKernelNodeSetParams_v2(node, &k));
    return rt_ret(e);
}

RT_API cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                          const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                          const struct cudaMemcpy3DParms *pCopyParams)
{
    cudaError_t e = rt_enter();
    CUDA_MEMCPY3D c;
    if (e == cudaSuccess)
        e = copy_params(pCopyParams, &c);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuGraphAddMemcpyNode(pGraphNode, graph, pDependencies, numDependencies, &c, NULL));
    return rt_ret(e);
}

RT_API cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                            const cudaGraphNode_t *pDependencies, size_t numDependencies, void *dst,
                                            const void *src, size_t count, enum cudaMemcpyKind kind)
{
    struct cudaMemcpy3DParms p = copy_1d(dst, src, count, kind);
    return cudaGraphAddMemcpyNode(pGraphNode, graph, pDependencies, numDependencies, &p);
}

RT_API cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, struct cudaMemcpy3DParms *pNodeParams)
{
    CUDA_MEMCPY3D c;
    cudaError_t e = pNodeParams ? RT_FORWARD(RT_DRV->cuGraphMemcpyNodeGetParams(node, &c)) : cudaErrorInvalidValue;
    if (e != cudaSuccess)
        return rt_ret(e);
    memset(pNodeParams, 0, sizeof *pNodeParams);
    pNodeParams->srcPtr = (struct cudaPitchedPtr){
        c.srcMemoryType == CU_MEMORYTYPE_HOST ? (void *)c.srcHost : (void *)(uintptr_t)c.srcDevice, c.srcPitch,
        c.WidthInBytes, c.srcHeight};
    pNodeParams->dstPtr =
        (struct cudaPitchedPtr){c.dstMemoryType == CU_MEMORYTYPE_HOST ? c.dstHost : (void *)(uintptr_t)c.dstDevice,
                                c.dstPitch, c.WidthInBytes, c.dstHeight};
    pNodeParams->srcPos = (struct cudaPos){c.srcXInBytes, c.srcY, c.srcZ};
    pNodeParams->dstPos = (struct cudaPos){c.dstXInBytes, c.dstY, c.dstZ};
    pNodeParams->extent = (struct cudaExtent){c.WidthInBytes, c.Height, c.Depth};
    for (unsigned k = 0; k <= cudaMemcpyDefault; k++)
        if (copy_kinds[k].src == c.srcMemoryType && copy_kinds[k].dst == c.dstMemoryType)
            pNodeParams->kind = (enum cudaMemcpyKind)k;
    return cudaSuccess;
}

RT_API cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const struct cudaMemcpy3DParms *pNodeParams)
{
    cudaError_t e = rt_enter();
    CUDA_MEMCPY3D c;
    if (e == cudaSuccess)
        e = copy_params(pNodeParams, &c);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuGraphMemcpyNodeSetParams(node, &c));
    return rt_ret(e);
}

RT_API cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void *dst, const void *src, size_t count,
                                                  enum cudaMemcpyKind kind)
{
    struct cudaMemcpy3DParms p = copy_1d(dst, src, count, kind);
    return cudaGraphMemcpyNodeSetParams(node, &p);
}

RT_API cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                          const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                          const struct cudaMemsetParams *pMemsetParams)
{
    if (!pMemsetParams)
        return rt_ret(cudaErrorInvalidValue);
    CUDA_MEMSET_NODE_PARAMS m = memset_params(pMemsetParams);
    return FWD(RT_DRV->cuGraphAddMemsetNode(pGraphNode, graph, pDependencies, numDependencies, &m, NULL));
}

RT_API cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, struct cudaMemsetParams *pNodeParams)
{
    CUDA_MEMSET_NODE_PARAMS m;
    cudaError_t e = pNodeParams ? RT_FORWARD(RT_DRV->cuGraphMemsetNodeGetParams(node, &m)) : cudaErrorInvalidValue;
    if (e == cudaSuccess)
        *pNodeParams =
            (struct cudaMemsetParams){(void *)(uintptr_t)m.dst, m.pitch, m.value, m.elementSize, m.width, m.height};
    return rt_ret(e);
}

RT_API cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const struct cudaMemsetParams *pNodeParams)
{
    if (!pNodeParams)
        return rt_ret(cudaErrorInvalidValue);
    CUDA_MEMSET_NODE_PARAMS m = memset_params(pNodeParams);
    return FWD(RT_DRV->cuGraphMemsetNodeSetParams(node, &m));
}

RT_API cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                        const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                        const struct cudaHostNodeParams *pNodeParams)
{
    return FWD(RT_DRV->cuGraphAddHostNode(pGraphNode, graph, pDependencies, numDependencies,
                                          (const CUDA_HOST_NODE_PARAMS *)pNodeParams));
}

RT_API cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, struct cudaHostNodeParams *pNodeParams)
{
    return FWD(RT_DRV->cuGraphHostNodeGetParams(node, (CUDA_HOST_NODE_PARAMS *)pNodeParams));
}

RT_API cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const struct cudaHostNodeParams *pNodeParams)
{
    return FWD(RT_DRV->cuGraphHostNodeSetParams(node, (const CUDA_HOST_NODE_PARAMS *)pNodeParams));
}

RT_API cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                              const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                              cudaGraph_t childGraph)
{
    return FWD(RT_DRV->cuGraphAddChildGraphNode(pGraphNode, graph, pDependencies, numDependencies, childGraph));
}

RT_API cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t *pGraph)
{
    return FWD(RT_DRV->cuGraphChildGraphNodeGetGraph(node, pGraph));
}

RT_API cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                         const cudaGraphNode_t *pDependencies, size_t numDependencies)
{
    return FWD(RT_DRV->cuGraphAddEmptyNode(pGraphNode, graph, pDependencies, numDependencies));
}

RT_API cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                               cudaEvent_t event)
{
    return FWD(RT_DRV->cuGraphAddEventRecordNode(pGraphNode, graph, pDependencies, numDependencies, event));
}

RT_API cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event_out)
{
    return FWD(RT_DRV->cuGraphEventRecordNodeGetEvent(node, event_out));
}

RT_API cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event)
{
    return FWD(RT_DRV->cuGraphEventRecordNodeSetEvent(node, event));
}

RT_API cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                             const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                             cudaEvent_t event)
{
    return FWD(RT_DRV->cuGraphAddEventWaitNode(pGraphNode, graph, pDependencies, numDependencies, event));
}

RT_API cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event_out)
{
    return FWD(RT_DRV->cuGraphEventWaitNodeGetEvent(node, event_out));
}

RT_API cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event)
{
    return FWD(RT_DRV->cuGraphEventWaitNodeSetEvent(node, event));
}

/* ------------------------------------------------------------------------
 * Graph memory
 * ---------------------------------------------------------------------- */

RT_API cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                            const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                            struct cudaMemAllocNodeParams *nodeParams)
{
    if (!nodeParams)
        return rt_ret(cudaErrorInvalidValue);
    CUDA_MEM_ALLOC_NODE_PARAMS p = {.accessDescs = (const CUmemAccessDesc *)nodeParams->accessDescs,
                                    .accessDescCount = nodeParams->accessDescCount,
                                    .bytesize = nodeParams->bytesize};
    memcpy(&p.poolProps, &nodeParams->poolProps, sizeof p.poolProps);
    cudaError_t e = RT_FORWARD(RT_DRV->cuGraphAddMemAllocNode(pGraphNode, graph, pDependencies, numDependencies, &p));
    if (e == cudaSuccess)
        nodeParams->dptr = (void *)(uintptr_t)p.dptr;
    return rt_ret(e);
}

RT_API cudaError_t cudaGraphMemAllocNodeGetParams(cudaGraphNode_t node, struct cudaMemAllocNodeParams *params_out)
{
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    cudaError_t e = params_out ? RT_FORWARD(RT_DRV->cuGraphMemAllocNodeGetParams(node, &p)) : cudaErrorInvalidValue;
    if (e == cudaSuccess) {
        memcpy(&params_out->poolProps, &p.poolProps, sizeof p.poolProps);
        params_out->accessDescs = NULL;
        params_out->accessDescCount = 0;
        params_out->bytesize = p.bytesize;
        params_out->dptr = (void *)(uintptr_t)p.dptr;
    }
    return rt_ret(e);
}

RT_API cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                           const cudaGraphNode_t *pDependencies, size_t numDependencies, void *dptr)
{
    return FWD(
        RT_DRV->cuGraphAddMemFreeNode(pGraphNode, graph, pDependencies, numDependencies, (CUdeviceptr)(uintptr_t)dptr));
}

/* dptr_out is a void **, typed void * in the header. */
RT_API cudaError_t cudaGraphMemFreeNodeGetParams(cudaGraphNode_t node, void *dptr_out)
{
    CUdeviceptr p = 0;
    cudaError_t e = dptr_out ? RT_FORWARD(RT_DRV->cuGraphMemFreeNodeGetParams(node, &p)) : cudaErrorInvalidValue;
    if (e == cudaSuccess)
        *(void **)dptr_out = (void *)(uintptr_t)p;
    return rt_ret(e);
}

RT_API cudaError_t cudaDeviceGraphMemTrim(int device)
{
    cudaError_t e = rt_ready();
    CUdevice d;
    if (e == cudaSuccess)
        e = rt_device(device, &d);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuDeviceGraphMemTrim(d));
    return rt_ret(e);
}

static cudaError_t graph_mem_attr(int device, enum cudaGraphMemAttributeType attr, void *value, bool set)
{
    cudaError_t e = rt_ready();
    CUdevice d;
    if (e == cudaSuccess)
        e = rt_device(device, &d);
    if (e == cudaSuccess)
        e = rt_err(set ? RT_DRV->cuDeviceSetGraphMemAttribute(d, (CUgraphMem_attribute)attr, value)
                       : RT_DRV->cuDeviceGetGraphMemAttribute(d, (CUgraphMem_attribute)attr, value));
    return rt_ret(e);
}

RT_API cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
    return graph_mem_attr(device, attr, value, false);
}

RT_API cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
    return graph_mem_attr(device, attr, value, true);
}

/* ------------------------------------------------------------------------
 * Structure
 * ---------------------------------------------------------------------- */

RT_API cudaError_t cudaGraphClone(cudaGraph_t *pGraphClone, cudaGraph_t originalGraph)
{
    return FWD(RT_DRV->cuGraphClone(pGraphClone, originalGraph));
}

RT_API cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t *pNode, cudaGraphNode_t originalNode,
                                            cudaGraph_t clonedGraph)
{
    return FWD(RT_DRV->cuGraphNodeFindInClone(pNode, originalNode, clonedGraph));
}

RT_API cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *pType)
{
    return FWD(RT_DRV->cuGraphNodeGetType(node, (CUgraphNodeType *)pType));
}

RT_API cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes)
{
    return FWD(RT_DRV->cuGraphGetNodes(graph, nodes, numNodes));
}

RT_API cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t *pRootNodes, size_t *pNumRootNodes)
{
    return FWD(RT_DRV->cuGraphGetRootNodes(graph, pRootNodes, pNumRootNodes));
}

RT_HIDDEN cudaError_t rt_graph_get_edges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
                                         cudaGraphEdgeData *edgeData, size_t *numEdges)
{
    cudaError_t e = rt_enter();
    NEWER(fn, cuGraphGetEdges_v2, "cuGraphGetEdges", false);
    if (e == cudaSuccess)
        e = fn ? rt_err(fn(graph, from, to, (CUgraphEdgeData *)edgeData, numEdges)) : cudaErrorNotSupported;
    return rt_ret(e);
}

RT_HIDDEN cudaError_t rt_graph_node_get_dependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                                     cudaGraphEdgeData *edgeData, size_t *pNumDependencies)
{
    cudaError_t e = rt_enter();
    NEWER(fn, cuGraphNodeGetDependencies_v2, "cuGraphNodeGetDependencies", false);
    if (e == cudaSuccess)
        e = fn ? rt_err(fn(node, pDependencies, (CUgraphEdgeData *)edgeData, pNumDependencies)) : cudaErrorNotSupported;
    return rt_ret(e);
}

RT_HIDDEN cudaError_t rt_graph_node_get_dependent_nodes(cudaGraphNode_t node, cudaGraphNode_t *pDependentNodes,
                                                        cudaGraphEdgeData *edgeData, size_t *pNumDependentNodes)
{
    cudaError_t e = rt_enter();
    NEWER(fn, cuGraphNodeGetDependentNodes_v2, "cuGraphNodeGetDependentNodes", false);
    if (e == cudaSuccess)
        e = fn ? rt_err(fn(node, pDependentNodes, (CUgraphEdgeData *)edgeData, pNumDependentNodes))
               : cudaErrorNotSupported;
    return rt_ret(e);
}

RT_HIDDEN cudaError_t rt_graph_add_dependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                                const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
                                                size_t numDependencies)
{
    cudaError_t e = rt_enter();
    NEWER(fn, cuGraphAddDependencies_v2, "cuGraphAddDependencies", false);
    if (e == cudaSuccess)
        e = fn ? rt_err(fn(graph, from, to, (const CUgraphEdgeData *)edgeData, numDependencies))
               : cudaErrorNotSupported;
    return rt_ret(e);
}

RT_HIDDEN cudaError_t rt_graph_remove_dependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                                   const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
                                                   size_t numDependencies)
{
    cudaError_t e = rt_enter();
    NEWER(fn, cuGraphRemoveDependencies_v2, "cuGraphRemoveDependencies", false);
    if (e == cudaSuccess)
        e = fn ? rt_err(fn(graph, from, to, (const CUgraphEdgeData *)edgeData, numDependencies))
               : cudaErrorNotSupported;
    return rt_ret(e);
}

RT_API cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node)
{
    return FWD(RT_DRV->cuGraphDestroyNode(node));
}

RT_API cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char *path, unsigned int flags)
{
    return FWD(RT_DRV->cuGraphDebugDotPrint(graph, path, flags));
}

/* ------------------------------------------------------------------------
 * Instances
 * ---------------------------------------------------------------------- */

RT_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                 unsigned long long flags)
{
    return FWD(RT_DRV->cuGraphInstantiateWithFlags(pGraphExec, graph, flags));
}

static cudaError_t rt_instantiate_with_params(const rt_driver_t *d, cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                              cudaGraphInstantiateParams *p)
{
    if (!p)
        return cudaErrorInvalidValue;
    CUDA_GRAPH_INSTANTIATE_PARAMS q = {p->flags, p->uploadStream, NULL, CUDA_GRAPH_INSTANTIATE_SUCCESS};
    cudaError_t e = RT_FORWARD(d->cuGraphInstantiateWithParams(pGraphExec, graph, &q));
    p->errNode_out = q.hErrNode_out;
    p->result_out = (cudaGraphInstantiateResult)q.result_out;
    return e;
}

RT_STREAM_API(cudaGraphInstantiateWithParams, cudaGraphInstantiateWithParams_ptsz, rt_instantiate_with_params,
              (cudaGraphExec_t * pGraphExec, cudaGraph_t graph, cudaGraphInstantiateParams *instantiateParams),
              pGraphExec, graph, instantiateParams)

RT_API cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t graphExec, unsigned long long *flags)
{
    return FWD(RT_DRV->cuGraphExecGetFlags(graphExec, (cuuint64_t *)flags));
}

RT_API cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                    const struct cudaKernelNodeParams *pNodeParams)
{
    cudaError_t e = rt_enter();
    CUDA_KERNEL_NODE_PARAMS_v2 k;
    if (e == cudaSuccess)
        e = kernel_params(pNodeParams, &k);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuGraphExecKernelNodeSetParams_v2(hGraphExec, node, &k));
    return rt_ret(e);
}

RT_API cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                    const struct cudaMemcpy3DParms *pNodeParams)
{
    cudaError_t e = rt_enter();
    CUDA_MEMCPY3D c;
    if (e == cudaSuccess)
        e = copy_params(pNodeParams, &c);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuGraphExecMemcpyNodeSetParams(hGraphExec, node, &c, NULL));
    return rt_ret(e);
}

RT_API cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, void *dst,
                                                      const void *src, size_t count, enum cudaMemcpyKind kind)
{
    struct cudaMemcpy3DParms p = copy_1d(dst, src, count, kind);
    return cudaGraphExecMemcpyNodeSetParams(hGraphExec, node, &p);
}

RT_API cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                    const struct cudaMemsetParams *pNodeParams)
{
    if (!pNodeParams)
        return rt_ret(cudaErrorInvalidValue);
    CUDA_MEMSET_NODE_PARAMS m = memset_params(pNodeParams);
    return FWD(RT_DRV->cuGraphExecMemsetNodeSetParams(hGraphExec, node, &m, NULL));
}

RT_API cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                  const struct cudaHostNodeParams *pNodeParams)
{
    return FWD(RT_DRV->cuGraphExecHostNodeSetParams(hGraphExec, node, (const CUDA_HOST_NODE_PARAMS *)pNodeParams));
}

RT_API cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                        cudaGraph_t childGraph)
{
    return FWD(RT_DRV->cuGraphExecChildGraphNodeSetParams(hGraphExec, node, childGraph));
}

RT_API cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                                        cudaEvent_t event)
{
    return FWD(RT_DRV->cuGraphExecEventRecordNodeSetEvent(hGraphExec, hNode, event));
}

RT_API cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                                      cudaEvent_t event)
{
    return FWD(RT_DRV->cuGraphExecEventWaitNodeSetEvent(hGraphExec, hNode, event));
}

RT_API cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, unsigned int isEnabled)
{
    return FWD(RT_DRV->cuGraphNodeSetEnabled(hGraphExec, hNode, isEnabled));
}

RT_API cudaError_t cudaGraphNodeGetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, unsigned int *isEnabled)
{
    return FWD(RT_DRV->cuGraphNodeGetEnabled(hGraphExec, hNode, isEnabled));
}

RT_API cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                       cudaGraphExecUpdateResultInfo *resultInfo)
{
    return FWD(RT_DRV->cuGraphExecUpdate_v2(hGraphExec, hGraph, (CUgraphExecUpdateResultInfo *)resultInfo));
}

static cudaError_t rt_graph_upload(const rt_driver_t *d, cudaGraphExec_t graphExec, cudaStream_t stream)
{
    return RT_FORWARD(d->cuGraphUpload(graphExec, stream));
}

RT_STREAM_API(cudaGraphUpload, cudaGraphUpload_ptsz, rt_graph_upload, (cudaGraphExec_t graphExec, cudaStream_t stream),
              graphExec, stream)

/* ------------------------------------------------------------------------
 * Capture
 * ---------------------------------------------------------------------- */

static cudaError_t rt_begin_capture_to_graph(const rt_driver_t *d, cudaStream_t stream, cudaGraph_t graph,
                                             const cudaGraphNode_t *dependencies,
                                             const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                                             enum cudaStreamCaptureMode mode)
{
    (void)d;
    cudaError_t e = rt_enter();
    if (e != cudaSuccess)
        return e;
    NEWER(fn, cuStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph", d == &rt_drv[RT_PTDS]);
    if (!fn)
        return cudaErrorNotSupported;
    return rt_err(fn(stream, graph, dependencies, (const CUgraphEdgeData *)dependencyData, numDependencies,
                     (CUstreamCaptureMode)mode));
}

RT_STREAM_API(cudaStreamBeginCaptureToGraph, cudaStreamBeginCaptureToGraph_ptsz, rt_begin_capture_to_graph,
              (cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t *dependencies,
               const cudaGraphEdgeData *dependencyData, size_t numDependencies, enum cudaStreamCaptureMode mode),
              stream, graph, dependencies, dependencyData, numDependencies, mode)

RT_HIDDEN cudaError_t rt_get_capture_info(const rt_driver_t *d, cudaStream_t stream,
                                          enum cudaStreamCaptureStatus *captureStatus_out, unsigned long long *id_out,
                                          cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out,
                                          const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    if (!captureStatus_out)
        return cudaErrorInvalidValue;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cudaError_t e = rt_enter();
    NEWER(fn, cuStreamGetCaptureInfo_v3, "cuStreamGetCaptureInfo", d == &rt_drv[RT_PTDS]);
    if (e == cudaSuccess)
        e = fn ? rt_err(fn(stream, &st, (cuuint64_t *)id_out, graph_out, dependencies_out,
                           (const CUgraphEdgeData **)edgeData_out, numDependencies_out))
               : cudaErrorNotSupported;
    if (e == cudaSuccess)
        *captureStatus_out = (enum cudaStreamCaptureStatus)st;
    return e;
}

RT_HIDDEN cudaError_t rt_update_capture_deps(const rt_driver_t *d, cudaStream_t stream, cudaGraphNode_t *dependencies,
                                             const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                                             unsigned int flags)
{
    cudaError_t e = rt_enter();
    NEWER(fn, cuStreamUpdateCaptureDependencies_v2, "cuStreamUpdateCaptureDependencies", d == &rt_drv[RT_PTDS]);
    if (e == cudaSuccess)
        e = fn ? rt_err(fn(stream, dependencies, (const CUgraphEdgeData *)dependencyData, numDependencies, flags))
               : cudaErrorNotSupported;
    return e;
}

/* ------------------------------------------------------------------------
 * Generic node parameters and conditional nodes
 * ---------------------------------------------------------------------- */

/* The size of each kind's member of cudaGraphNodeParams' union (the bytes
 * after it must be zero); 0 for a kind the driver refuses or checks. */
static const size_t rt_param_sizes[] = {
    [cudaGraphNodeTypeKernel] = sizeof(struct cudaKernelNodeParamsV2),
    [cudaGraphNodeTypeMemcpy] = sizeof(struct cudaMemcpyNodeParams),
    [cudaGraphNodeTypeMemset] = sizeof(struct cudaMemsetParamsV2),
    [cudaGraphNodeTypeHost] = sizeof(struct cudaHostNodeParamsV2),
    [cudaGraphNodeTypeGraph] = sizeof(struct cudaChildGraphNodeParams),
    [cudaGraphNodeTypeWaitEvent] = sizeof(struct cudaEventWaitNodeParams),
    [cudaGraphNodeTypeEventRecord] = sizeof(struct cudaEventRecordNodeParams),
    [cudaGraphNodeTypeMemAlloc] = sizeof(struct cudaMemAllocNodeParamsV2),
    [cudaGraphNodeTypeMemFree] = sizeof(struct cudaMemFreeNodeParams),
    [cudaGraphNodeTypeConditional] = sizeof(struct cudaConditionalNodeParams),
};

_Static_assert(sizeof(struct cudaGraphNodeParams) == sizeof(CUgraphNodeParams), "the same size");

/* The driver's parameters for p (its unused bytes checked here, the
 * driver's own fields zero, the kinds without a member passed as they
 * are for the driver to refuse). */
static cudaError_t node_params(const struct cudaGraphNodeParams *p, CUgraphNodeParams *d)
{
    if (!p)
        return cudaErrorInvalidValue;
    memset(d, 0, sizeof *d);
    d->type = (CUgraphNodeType)p->type;
    memcpy(d->reserved0, p->reserved0, sizeof d->reserved0);
    d->reserved2 = p->reserved2;
    size_t used = (unsigned)p->type < sizeof rt_param_sizes / sizeof *rt_param_sizes ? rt_param_sizes[p->type] : 0;
    const unsigned char *b = (const unsigned char *)&p->reserved1;
    for (size_t i = used; used && i < sizeof p->reserved1; i++)
        if (b[i])
            return cudaErrorInvalidValue;
    cudaError_t e = cudaSuccess;
    switch (p->type) {
    case cudaGraphNodeTypeKernel: {
        struct cudaKernelNodeParams k = {p->kernel.func,         p->kernel.gridDim,      p->kernel.blockDim,
                                         p->kernel.sharedMemBytes, p->kernel.kernelParams, p->kernel.extra};
        CUDA_KERNEL_NODE_PARAMS_v2 v;
        e = kernel_params(&k, &v);
        memcpy(&d->kernel, &v, sizeof v);
        break;
    }
    case cudaGraphNodeTypeMemcpy:
        if (p->memcpy.flags || p->memcpy.reserved[0] || p->memcpy.reserved[1] || p->memcpy.reserved[2])
            return cudaErrorInvalidValue;
        e = copy_params(&p->memcpy.copyParams, &d->memcpy.copyParams);
        break;
    case cudaGraphNodeTypeMemset:
        d->memset = (CUDA_MEMSET_NODE_PARAMS_v2){(CUdeviceptr)(uintptr_t)p->memset.dst,
                                                 p->memset.pitch,
                                                 p->memset.value,
                                                 p->memset.elementSize,
                                                 p->memset.width,
                                                 p->memset.height,
                                                 NULL};
        break;
    case cudaGraphNodeTypeHost:
        d->host = (CUDA_HOST_NODE_PARAMS_v2){p->host.fn, p->host.userData};
        break;
    case cudaGraphNodeTypeGraph:
        d->graph = (CUDA_CHILD_GRAPH_NODE_PARAMS){p->graph.graph, (CUgraphChildGraphNodeOwnership)p->graph.ownership};
        break;
    case cudaGraphNodeTypeWaitEvent:
        d->eventWait.event = p->eventWait.event;
        break;
    case cudaGraphNodeTypeEventRecord:
        d->eventRecord.event = p->eventRecord.event;
        break;
    case cudaGraphNodeTypeMemAlloc:
        memcpy(&d->alloc.poolProps, &p->alloc.poolProps, sizeof d->alloc.poolProps);
        d->alloc.accessDescs = (const CUmemAccessDesc *)p->alloc.accessDescs;
        d->alloc.accessDescCount = p->alloc.accessDescCount;
        d->alloc.bytesize = p->alloc.bytesize;
        break;
    case cudaGraphNodeTypeMemFree:
        d->free.dptr = (CUdeviceptr)(uintptr_t)p->free.dptr;
        break;
    case cudaGraphNodeTypeConditional: {
        int dev;
        unsigned gen;
        rt_current(&d->conditional.ctx, &dev, &gen);
        d->conditional.handle = p->conditional.handle;
        d->conditional.type = (CUgraphConditionalNodeType)p->conditional.type;
        d->conditional.size = p->conditional.size;
        break;
    }
    default: /* the driver names what it refuses */
        break;
    }
    return e;
}

RT_HIDDEN cudaError_t rt_graph_add_node(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                        const cudaGraphNode_t *pDependencies, const cudaGraphEdgeData *dependencyData,
                                        size_t numDependencies, struct cudaGraphNodeParams *nodeParams)
{
    cudaError_t e = rt_enter();
    CUgraphNodeParams d;
    if (e == cudaSuccess)
        e = node_params(nodeParams, &d);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuGraphAddNode_v2(pGraphNode, graph, pDependencies, (const CUgraphEdgeData *)dependencyData,
                                             numDependencies, &d));
    if (e == cudaSuccess && nodeParams->type == cudaGraphNodeTypeMemAlloc)
        nodeParams->alloc.dptr = (void *)(uintptr_t)d.alloc.dptr;
    if (e == cudaSuccess && nodeParams->type == cudaGraphNodeTypeConditional)
        nodeParams->conditional.phGraph_out = d.conditional.phGraph_out;
    return rt_ret(e);
}

RT_API cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, struct cudaGraphNodeParams *nodeParams)
{
    cudaError_t e = rt_enter();
    CUgraphNodeParams d;
    if (e == cudaSuccess)
        e = node_params(nodeParams, &d);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuGraphNodeSetParams(node, &d));
    return rt_ret(e);
}

RT_API cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t graphExec, cudaGraphNode_t node,
                                              struct cudaGraphNodeParams *nodeParams)
{
    cudaError_t e = rt_enter();
    CUgraphNodeParams d;
    if (e == cudaSuccess)
        e = node_params(nodeParams, &d);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuGraphExecNodeSetParams(graphExec, node, &d));
    return rt_ret(e);
}

/* The handle belongs to the current device's primary context. */
RT_API cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *pHandle_out, cudaGraph_t graph,
                                                    unsigned int defaultLaunchValue, unsigned int flags)
{
    cudaError_t e = rt_enter();
    CUcontext ctx = NULL;
    int dev;
    unsigned gen;
    if (e == cudaSuccess) {
        rt_current(&ctx, &dev, &gen);
        e = rt_err(RT_DRV->cuGraphConditionalHandleCreate((CUgraphConditionalHandle *)pHandle_out, graph, ctx,
                                                          defaultLaunchValue, flags));
    }
    return rt_ret(e);
}
