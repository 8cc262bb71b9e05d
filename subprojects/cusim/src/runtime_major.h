/*
 * What the runtime's two majors share and where they differ.
 *
 * One implementation serves libcudart.so.12 and .13: the functions below
 * take CUDA 13's arguments and structs, and each major's file exports them
 * under its own names and signatures (runtime13.c: CUDA 13's, also in the
 * static archive; runtime12.c: CUDA 12.4's, with runtime12.h's layouts).
 * Structs that CUDA 13 only lengthened are read and written through
 * rt_abi: the caller's size, the rest of CUDA 13's struct zero.
 */
#ifndef CUCACHE_SIM_RUNTIME_MAJOR_H
#define CUCACHE_SIM_RUNTIME_MAJOR_H

#include <stddef.h>

#include "runtime_internal.h"

/* Bytes of each caller's struct that this major's layout has: a prefix of
 * CUDA 13's (which only appended reserved words or fields). */
typedef struct rt_abi_s {
    size_t pointer_attributes; /* struct cudaPointerAttributes */
    size_t resource_desc;      /* struct cudaResourceDesc (12: no flags, a shorter union) */
    size_t resource_view_desc; /* struct cudaResourceViewDesc */
} rt_abi_t;

/* This major's sizes (runtime12.c or runtime13.c). */
RT_HIDDEN extern const rt_abi_t rt_abi;

/* runtime_core.c: the properties in CUDA 13's layout, unrecorded. */
RT_HIDDEN cudaError_t rt_props(struct cudaDeviceProp *prop, int device);

/* runtime_misc.c: managed memory hints by location, unrecorded. */
RT_HIDDEN cudaError_t rt_prefetch(const rt_driver_t *d, const void *devPtr, size_t count,
                                  struct cudaMemLocation location, unsigned flags, cudaStream_t stream);
RT_HIDDEN cudaError_t rt_advise(const void *devPtr, size_t count, enum cudaMemoryAdvise advice,
                                struct cudaMemLocation location);

/* runtime_graph.c: capture queries with edge data, unrecorded (each
 * major's RT_STREAM_API records them). */
RT_HIDDEN cudaError_t rt_get_capture_info(const rt_driver_t *d, cudaStream_t stream,
                                          enum cudaStreamCaptureStatus *captureStatus_out, unsigned long long *id_out,
                                          cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out,
                                          const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out);
RT_HIDDEN cudaError_t rt_update_capture_deps(const rt_driver_t *d, cudaStream_t stream, cudaGraphNode_t *dependencies,
                                             const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                                             unsigned int flags);

/* runtime_graph.c: edges with edge data (NULL: none), recorded. */
RT_HIDDEN cudaError_t rt_graph_get_edges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
                                         cudaGraphEdgeData *edgeData, size_t *numEdges);
RT_HIDDEN cudaError_t rt_graph_node_get_dependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                                     cudaGraphEdgeData *edgeData, size_t *pNumDependencies);
RT_HIDDEN cudaError_t rt_graph_node_get_dependent_nodes(cudaGraphNode_t node, cudaGraphNode_t *pDependentNodes,
                                                        cudaGraphEdgeData *edgeData, size_t *pNumDependentNodes);
RT_HIDDEN cudaError_t rt_graph_add_dependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                                const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
                                                size_t numDependencies);
RT_HIDDEN cudaError_t rt_graph_remove_dependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                                   const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
                                                   size_t numDependencies);
RT_HIDDEN cudaError_t rt_graph_add_node(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                        const cudaGraphNode_t *pDependencies, const cudaGraphEdgeData *dependencyData,
                                        size_t numDependencies, struct cudaGraphNodeParams *nodeParams);

#endif /* CUCACHE_SIM_RUNTIME_MAJOR_H */
