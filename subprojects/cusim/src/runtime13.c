/*
 * libcudart.so.13's forms of the calls whose signature CUDA 13 changed
 * (runtime_major.h): each is the shared implementation, exported under the
 * plain name.  Also in libcudart_static.a.
 */
#include "runtime_internal.h"
#include "runtime_major.h"

RT_HIDDEN const rt_abi_t rt_abi = {
    .pointer_attributes = sizeof(struct cudaPointerAttributes),
    .resource_desc = sizeof(struct cudaResourceDesc),
    .resource_view_desc = sizeof(struct cudaResourceViewDesc),
};

RT_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    return rt_ret(rt_props(prop, device));
}

RT_STREAM_API(cudaStreamGetCaptureInfo, cudaStreamGetCaptureInfo_ptsz, rt_get_capture_info,
              (cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out, unsigned long long *id_out,
               cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out, const cudaGraphEdgeData **edgeData_out,
               size_t *numDependencies_out),
              stream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out, numDependencies_out)

RT_STREAM_API(cudaStreamUpdateCaptureDependencies, cudaStreamUpdateCaptureDependencies_ptsz, rt_update_capture_deps,
              (cudaStream_t stream, cudaGraphNode_t *dependencies, const cudaGraphEdgeData *dependencyData,
               size_t numDependencies, unsigned int flags),
              stream, dependencies, dependencyData, numDependencies, flags)

RT_API cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
                                     cudaGraphEdgeData *edgeData, size_t *numEdges)
{
    return rt_graph_get_edges(graph, from, to, edgeData, numEdges);
}

RT_API cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                                cudaGraphEdgeData *edgeData, size_t *pNumDependencies)
{
    return rt_graph_node_get_dependencies(node, pDependencies, edgeData, pNumDependencies);
}

RT_API cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t *pDependentNodes,
                                                  cudaGraphEdgeData *edgeData, size_t *pNumDependentNodes)
{
    return rt_graph_node_get_dependent_nodes(node, pDependentNodes, edgeData, pNumDependentNodes);
}

RT_API cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                                            const cudaGraphEdgeData *edgeData, size_t numDependencies)
{
    return rt_graph_add_dependencies(graph, from, to, edgeData, numDependencies);
}

RT_API cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                               const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
                                               size_t numDependencies)
{
    return rt_graph_remove_dependencies(graph, from, to, edgeData, numDependencies);
}

RT_API cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                    const cudaGraphNode_t *pDependencies, const cudaGraphEdgeData *dependencyData,
                                    size_t numDependencies, struct cudaGraphNodeParams *nodeParams)
{
    return rt_graph_add_node(pGraphNode, graph, pDependencies, dependencyData, numDependencies, nodeParams);
}

RT_STREAM_API(cudaMemPrefetchAsync, cudaMemPrefetchAsync_ptsz, rt_prefetch,
              (const void *devPtr, size_t count, struct cudaMemLocation location, unsigned int flags,
               cudaStream_t stream),
              devPtr, count, location, flags, stream)

RT_API cudaError_t cudaMemAdvise(const void *devPtr, size_t count, enum cudaMemoryAdvise advice,
                                 struct cudaMemLocation location)
{
    return rt_ret(rt_advise(devPtr, count, advice, location));
}
