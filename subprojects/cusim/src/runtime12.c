/*
 * libcudart.so.12's forms of the calls whose signature or struct CUDA 13
 * changed (runtime12.h; CUDA 12.4's headers are the facts), over the
 * implementation both majors share (runtime_major.h), and the CUDA 12
 * names CUDA 13 dropped.
 */
#include <stddef.h>
#include <string.h>

#include "runtime12.h"
#include "runtime_internal.h"
#include "runtime_major.h"

/* CUDA 12's lengths: no reserved words at the end of the pointer
 * attributes and the view; the resource union ends after pitch2D and no
 * flags follow. */
RT_HIDDEN const rt_abi_t rt_abi = {
    .pointer_attributes = offsetof(struct cudaPointerAttributes, hostPointer) + sizeof(void *),
    .resource_desc = offsetof(struct cudaResourceDesc, res) + sizeof(((struct cudaResourceDesc *)0)->res.pitch2D),
    .resource_view_desc = offsetof(struct cudaResourceViewDesc, lastLayer) + sizeof(unsigned int),
};

/* ------------------------------------------------------------------------
 * Device properties
 * ---------------------------------------------------------------------- */

/* The fields CUDA 12 and 13 both have, copied from CUDA 13's struct. */
/* clang-format off */
#define RT12_PROP_COMMON(X)                                                                                            \
    X(name)                                                                                                            \
    X(uuid)                                                                                                            \
    X(luid)                                                                                                            \
    X(luidDeviceNodeMask)                                                                                              \
    X(totalGlobalMem)                                                                                                  \
    X(sharedMemPerBlock)                                                                                               \
    X(regsPerBlock)                                                                                                    \
    X(warpSize)                                                                                                        \
    X(memPitch)                                                                                                        \
    X(maxThreadsPerBlock)                                                                                              \
    X(maxThreadsDim)                                                                                                   \
    X(maxGridSize)                                                                                                     \
    X(totalConstMem)                                                                                                   \
    X(major)                                                                                                           \
    X(minor)                                                                                                           \
    X(textureAlignment)                                                                                                \
    X(texturePitchAlignment)                                                                                           \
    X(multiProcessorCount)                                                                                             \
    X(integrated)                                                                                                      \
    X(canMapHostMemory)                                                                                                \
    X(maxTexture1D)                                                                                                    \
    X(maxTexture2D)                                                                                                    \
    X(maxTexture2DMipmap)                                                                                              \
    X(maxTexture2DLinear)                                                                                              \
    X(maxTexture2DGather)                                                                                              \
    X(maxTexture3D)                                                                                                    \
    X(maxTexture3DAlt)                                                                                                 \
    X(maxTextureCubemap)                                                                                               \
    X(maxTexture1DLayered)                                                                                             \
    X(maxTexture2DLayered)                                                                                             \
    X(maxTextureCubemapLayered)                                                                                        \
    X(maxSurface1D)                                                                                                    \
    X(maxSurface2D)                                                                                                    \
    X(maxSurface3D)                                                                                                    \
    X(maxSurface1DLayered)                                                                                             \
    X(maxSurface2DLayered)                                                                                             \
    X(maxSurfaceCubemap)                                                                                               \
    X(maxSurfaceCubemapLayered)                                                                                        \
    X(surfaceAlignment)                                                                                                \
    X(ECCEnabled)                                                                                                      \
    X(pciBusID)                                                                                                        \
    X(pciDeviceID)                                                                                                     \
    X(pciDomainID)                                                                                                     \
    X(tccDriver)                                                                                                       \
    X(asyncEngineCount)                                                                                                \
    X(unifiedAddressing)                                                                                               \
    X(memoryBusWidth)                                                                                                  \
    X(l2CacheSize)                                                                                                     \
    X(maxThreadsPerMultiProcessor)                                                                                     \
    X(streamPrioritiesSupported)                                                                                       \
    X(globalL1CacheSupported)                                                                                          \
    X(localL1CacheSupported)                                                                                           \
    X(sharedMemPerMultiprocessor)                                                                                      \
    X(managedMemory)                                                                                                   \
    X(isMultiGpuBoard)                                                                                                 \
    X(multiGpuBoardGroupID)                                                                                            \
    X(hostNativeAtomicSupported)                                                                                       \
    X(pageableMemoryAccess)                                                                                            \
    X(concurrentManagedAccess)                                                                                         \
    X(canUseHostPointerForRegisteredMem)                                                                               \
    X(cooperativeLaunch)                                                                                               \
    X(sharedMemPerBlockOptin)                                                                                          \
    X(directManagedMemAccessFromHost)                                                                                  \
    X(maxBlocksPerMultiProcessor)                                                                                      \
    X(accessPolicyMaxWindowSize)                                                                                       \
    X(reservedSharedMemPerBlock)                                                                                       \
    X(hostRegisterSupported)                                                                                           \
    X(sparseCudaArraySupported)                                                                                        \
    X(hostRegisterReadOnlySupported)                                                                                   \
    X(timelineSemaphoreInteropSupported)                                                                               \
    X(memoryPoolsSupported)                                                                                            \
    X(gpuDirectRDMASupported)                                                                                          \
    X(gpuDirectRDMAFlushWritesOptions)                                                                                 \
    X(gpuDirectRDMAWritesOrdering)                                                                                     \
    X(memoryPoolSupportedHandleTypes)                                                                                  \
    X(deferredMappingCudaArraySupported)                                                                               \
    X(ipcEventSupported)                                                                                               \
    X(clusterLaunch)                                                                                                   \
    X(unifiedFunctionPointers)
/* clang-format on */

/* The fields CUDA 13 removed: each is a device attribute, one row each. */
static const struct {
    size_t off;              /* of an int of struct rt12_device_prop */
    CUdevice_attribute attr; /* the same number as the runtime's */
} rt12_prop_attrs[] = {
    {offsetof(struct rt12_device_prop, clockRate), CU_DEVICE_ATTRIBUTE_CLOCK_RATE},
    {offsetof(struct rt12_device_prop, deviceOverlap), CU_DEVICE_ATTRIBUTE_GPU_OVERLAP},
    {offsetof(struct rt12_device_prop, kernelExecTimeoutEnabled), CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT},
    {offsetof(struct rt12_device_prop, computeMode), CU_DEVICE_ATTRIBUTE_COMPUTE_MODE},
    {offsetof(struct rt12_device_prop, maxTexture1DLinear), CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH},
    {offsetof(struct rt12_device_prop, memoryClockRate), CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE},
    {offsetof(struct rt12_device_prop, singleToDoublePrecisionPerfRatio),
     CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO},
    {offsetof(struct rt12_device_prop, cooperativeMultiDeviceLaunch),
     CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH},
};

/* The properties in CUDA 12's layout, `bytes` of them written to *prop
 * (all of it, or CUDA 11's prefix), nothing on failure. */
static cudaError_t rt12_props(struct rt12_device_prop *prop, int device, size_t bytes)
{
    struct cudaDeviceProp p13;
    struct rt12_device_prop p;
    if (!prop)
        return cudaErrorInvalidValue;
    cudaError_t e = rt_props(&p13, device);
    if (e != cudaSuccess)
        return e;
    memset(&p, 0, sizeof p);
#define RT12_COPY(f)                                                                                                   \
    _Static_assert(sizeof p.f == sizeof p13.f, #f " differs");                                                         \
    memcpy(&p.f, &p13.f, sizeof p.f);
    RT12_PROP_COMMON(RT12_COPY)
#undef RT12_COPY
    for (size_t i = 0; e == cudaSuccess && i < sizeof rt12_prop_attrs / sizeof rt12_prop_attrs[0]; i++) {
        int v = 0;
        e = cudaDeviceGetAttribute(&v, (enum cudaDeviceAttr)rt12_prop_attrs[i].attr, device);
        memcpy((char *)&p + rt12_prop_attrs[i].off, &v, sizeof v);
    }
    if (e == cudaSuccess)
        memcpy(prop, &p, bytes);
    return e;
}

RT_API cudaError_t cudaGetDeviceProperties_v2(struct rt12_device_prop *prop, int device)
{
    return rt_ret(rt12_props(prop, device, sizeof *prop));
}

/* The name CUDA 12's headers no longer call: CUDA 11's struct, which ended
 * at reservedSharedMemPerBlock. */
RT_API cudaError_t rt12_get_device_properties(struct rt12_device_prop *prop, int device)
{
    return rt_ret(
        rt12_props(prop, device, offsetof(struct rt12_device_prop, reservedSharedMemPerBlock) + sizeof(size_t)));
}

/* ------------------------------------------------------------------------
 * Capture: plain without graph or edges, _v2 without edges, _v3 all
 * ---------------------------------------------------------------------- */

static cudaError_t rt12_capture_info(const rt_driver_t *d, cudaStream_t stream,
                                     enum cudaStreamCaptureStatus *captureStatus_out, unsigned long long *id_out)
{
    return rt_get_capture_info(d, stream, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

static cudaError_t rt12_capture_info_v2(const rt_driver_t *d, cudaStream_t stream,
                                        enum cudaStreamCaptureStatus *captureStatus_out, unsigned long long *id_out,
                                        cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out,
                                        size_t *numDependencies_out)
{
    return rt_get_capture_info(d, stream, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
                               numDependencies_out);
}

static cudaError_t rt12_update_deps(const rt_driver_t *d, cudaStream_t stream, cudaGraphNode_t *dependencies,
                                    size_t numDependencies, unsigned int flags)
{
    return rt_update_capture_deps(d, stream, dependencies, NULL, numDependencies, flags);
}

RT_STREAM_API(rt12_get_capture_info, rt12_get_capture_info_ptsz, rt12_capture_info,
              (cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out, unsigned long long *id_out),
              stream, captureStatus_out, id_out)
RT_STREAM_API(cudaStreamGetCaptureInfo_v2, cudaStreamGetCaptureInfo_v2_ptsz, rt12_capture_info_v2,
              (cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out, unsigned long long *id_out,
               cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out, size_t *numDependencies_out),
              stream, captureStatus_out, id_out, graph_out, dependencies_out, numDependencies_out)
RT_STREAM_API(cudaStreamGetCaptureInfo_v3, cudaStreamGetCaptureInfo_v3_ptsz, rt_get_capture_info,
              (cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out, unsigned long long *id_out,
               cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out, const cudaGraphEdgeData **edgeData_out,
               size_t *numDependencies_out),
              stream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out, numDependencies_out)
RT_STREAM_API(rt12_update_capture_deps, rt12_update_capture_deps_ptsz, rt12_update_deps,
              (cudaStream_t stream, cudaGraphNode_t *dependencies, size_t numDependencies, unsigned int flags), stream,
              dependencies, numDependencies, flags)
RT_STREAM_API(cudaStreamUpdateCaptureDependencies_v2, cudaStreamUpdateCaptureDependencies_v2_ptsz,
              rt_update_capture_deps,
              (cudaStream_t stream, cudaGraphNode_t *dependencies, const cudaGraphEdgeData *dependencyData,
               size_t numDependencies, unsigned int flags),
              stream, dependencies, dependencyData, numDependencies, flags)

/* ------------------------------------------------------------------------
 * Graph edges: plain without edge data, _v2 with
 * ---------------------------------------------------------------------- */

RT_API cudaError_t rt12_graph_get_edges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to, size_t *numEdges)
{
    return rt_graph_get_edges(graph, from, to, NULL, numEdges);
}

RT_API cudaError_t cudaGraphGetEdges_v2(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
                                        cudaGraphEdgeData *edgeData, size_t *numEdges)
{
    return rt_graph_get_edges(graph, from, to, edgeData, numEdges);
}

RT_API cudaError_t rt12_graph_node_get_dependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                                    size_t *pNumDependencies)
{
    return rt_graph_node_get_dependencies(node, pDependencies, NULL, pNumDependencies);
}

RT_API cudaError_t cudaGraphNodeGetDependencies_v2(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                                   cudaGraphEdgeData *edgeData, size_t *pNumDependencies)
{
    return rt_graph_node_get_dependencies(node, pDependencies, edgeData, pNumDependencies);
}

RT_API cudaError_t rt12_graph_node_get_dependent_nodes(cudaGraphNode_t node, cudaGraphNode_t *pDependentNodes,
                                                       size_t *pNumDependentNodes)
{
    return rt_graph_node_get_dependent_nodes(node, pDependentNodes, NULL, pNumDependentNodes);
}

RT_API cudaError_t cudaGraphNodeGetDependentNodes_v2(cudaGraphNode_t node, cudaGraphNode_t *pDependentNodes,
                                                     cudaGraphEdgeData *edgeData, size_t *pNumDependentNodes)
{
    return rt_graph_node_get_dependent_nodes(node, pDependentNodes, edgeData, pNumDependentNodes);
}

RT_API cudaError_t rt12_graph_add_dependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                               const cudaGraphNode_t *to, size_t numDependencies)
{
    return rt_graph_add_dependencies(graph, from, to, NULL, numDependencies);
}

RT_API cudaError_t cudaGraphAddDependencies_v2(cudaGraph_t graph, const cudaGraphNode_t *from,
                                               const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
                                               size_t numDependencies)
{
    return rt_graph_add_dependencies(graph, from, to, edgeData, numDependencies);
}

RT_API cudaError_t rt12_graph_remove_dependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                                  const cudaGraphNode_t *to, size_t numDependencies)
{
    return rt_graph_remove_dependencies(graph, from, to, NULL, numDependencies);
}

RT_API cudaError_t cudaGraphRemoveDependencies_v2(cudaGraph_t graph, const cudaGraphNode_t *from,
                                                  const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
                                                  size_t numDependencies)
{
    return rt_graph_remove_dependencies(graph, from, to, edgeData, numDependencies);
}

RT_API cudaError_t rt12_graph_add_node(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                       const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                       struct cudaGraphNodeParams *nodeParams)
{
    return rt_graph_add_node(pGraphNode, graph, pDependencies, NULL, numDependencies, nodeParams);
}

RT_API cudaError_t cudaGraphAddNode_v2(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                       const cudaGraphNode_t *pDependencies, const cudaGraphEdgeData *dependencyData,
                                       size_t numDependencies, struct cudaGraphNodeParams *nodeParams)
{
    return rt_graph_add_node(pGraphNode, graph, pDependencies, dependencyData, numDependencies, nodeParams);
}

/* ------------------------------------------------------------------------
 * Managed memory hints: plain by device (the 12.0 forms), _v2 by location
 * ---------------------------------------------------------------------- */

/* The CUDA 12.0 forms' device: cudaCpuDeviceId is the host. */
static struct cudaMemLocation rt12_location(int device)
{
    return device == cudaCpuDeviceId ? (struct cudaMemLocation){cudaMemLocationTypeHost, 0}
                                     : (struct cudaMemLocation){cudaMemLocationTypeDevice, device};
}

static cudaError_t rt12_prefetch_device(const rt_driver_t *d, const void *devPtr, size_t count, int dstDevice,
                                        cudaStream_t stream)
{
    return rt_prefetch(d, devPtr, count, rt12_location(dstDevice), 0, stream);
}

RT_STREAM_API(rt12_prefetch, rt12_prefetch_ptsz, rt12_prefetch_device,
              (const void *devPtr, size_t count, int dstDevice, cudaStream_t stream), devPtr, count, dstDevice, stream)
RT_STREAM_API(cudaMemPrefetchAsync_v2, cudaMemPrefetchAsync_v2_ptsz, rt_prefetch,
              (const void *devPtr, size_t count, struct cudaMemLocation location, unsigned int flags,
               cudaStream_t stream),
              devPtr, count, location, flags, stream)

RT_API cudaError_t rt12_advise(const void *devPtr, size_t count, enum cudaMemoryAdvise advice, int device)
{
    return rt_ret(rt_advise(devPtr, count, advice, rt12_location(device)));
}

RT_API cudaError_t cudaMemAdvise_v2(const void *devPtr, size_t count, enum cudaMemoryAdvise advice,
                                    struct cudaMemLocation location)
{
    return rt_ret(rt_advise(devPtr, count, advice, location));
}

/* ------------------------------------------------------------------------
 * Names CUDA 13 removed
 * ---------------------------------------------------------------------- */

/* The cudaThread* calls are CUDA 4's names of the cudaDevice* ones. */
RT_API cudaError_t cudaThreadExit(void)
{
    return cudaDeviceReset();
}

RT_API cudaError_t cudaThreadSynchronize(void)
{
    return cudaDeviceSynchronize();
}

RT_API cudaError_t cudaThreadSetLimit(enum cudaLimit limit, size_t value)
{
    return cudaDeviceSetLimit(limit, value);
}

RT_API cudaError_t cudaThreadGetLimit(size_t *pValue, enum cudaLimit limit)
{
    return cudaDeviceGetLimit(pValue, limit);
}

RT_API cudaError_t cudaThreadSetCacheConfig(enum cudaFuncCache cacheConfig)
{
    return cudaDeviceSetCacheConfig(cacheConfig);
}

RT_API cudaError_t cudaThreadGetCacheConfig(enum cudaFuncCache *pCacheConfig)
{
    return cudaDeviceGetCacheConfig(pCacheConfig);
}

/* Every modelled device computes in double precision: nothing to convert. */
RT_API cudaError_t cudaSetDoubleForDevice(double *d)
{
    (void)d;
    return cudaSuccess;
}

RT_API cudaError_t cudaSetDoubleForHost(double *d)
{
    (void)d;
    return cudaSuccess;
}
