/*
 * CUDA 12.4's runtime ABI where CUDA 13 changed it: what libcudart.so.12
 * exports beyond CUDA 13's names and the struct it lays out otherwise
 * (runtime12.c; the facts are CUDA 12.4's cuda_runtime_api.h and
 * driver_types.h).  cuda_api.h declares CUDA 13's forms, so the CUDA 12
 * forms of a name both have are declared here under an rt12_ C name whose
 * assembler name is the exported one.
 */
#ifndef CUCACHE_SIM_RUNTIME12_H
#define CUCACHE_SIM_RUNTIME12_H

#include <stddef.h>

#include "cusim/cuda_api.h"

/* struct cudaDeviceProp of CUDA 12.0 to 12.9: CUDA 13 removed the eight
 * fields marked, and its NUMA and PCI fields sit where CUDA 12 has
 * reserved words. */
struct rt12_device_prop {
    char name[256];
    cudaUUID_t uuid;
    char luid[8];
    unsigned int luidDeviceNodeMask;
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    size_t memPitch;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate; /* 12 only */
    size_t totalConstMem;
    int major;
    int minor;
    size_t textureAlignment;
    size_t texturePitchAlignment;
    int deviceOverlap; /* 12 only */
    int multiProcessorCount;
    int kernelExecTimeoutEnabled; /* 12 only */
    int integrated;
    int canMapHostMemory;
    int computeMode; /* 12 only */
    int maxTexture1D;
    int maxTexture1DMipmap;
    int maxTexture1DLinear; /* 12 only */
    int maxTexture2D[2];
    int maxTexture2DMipmap[2];
    int maxTexture2DLinear[3];
    int maxTexture2DGather[2];
    int maxTexture3D[3];
    int maxTexture3DAlt[3];
    int maxTextureCubemap;
    int maxTexture1DLayered[2];
    int maxTexture2DLayered[3];
    int maxTextureCubemapLayered[2];
    int maxSurface1D;
    int maxSurface2D[2];
    int maxSurface3D[3];
    int maxSurface1DLayered[2];
    int maxSurface2DLayered[3];
    int maxSurfaceCubemap;
    int maxSurfaceCubemapLayered[2];
    size_t surfaceAlignment;
    int concurrentKernels;
    int ECCEnabled;
    int pciBusID;
    int pciDeviceID;
    int pciDomainID;
    int tccDriver;
    int asyncEngineCount;
    int unifiedAddressing;
    int memoryClockRate; /* 12 only */
    int memoryBusWidth;
    int l2CacheSize;
    int persistingL2CacheMaxSize;
    int maxThreadsPerMultiProcessor;
    int streamPrioritiesSupported;
    int globalL1CacheSupported;
    int localL1CacheSupported;
    size_t sharedMemPerMultiprocessor;
    int regsPerMultiprocessor;
    int managedMemory;
    int isMultiGpuBoard;
    int multiGpuBoardGroupID;
    int hostNativeAtomicSupported;
    int singleToDoublePrecisionPerfRatio; /* 12 only */
    int pageableMemoryAccess;
    int concurrentManagedAccess;
    int computePreemptionSupported;
    int canUseHostPointerForRegisteredMem;
    int cooperativeLaunch;
    int cooperativeMultiDeviceLaunch; /* 12 only */
    size_t sharedMemPerBlockOptin;
    int pageableMemoryAccessUsesHostPageTables;
    int directManagedMemAccessFromHost;
    int maxBlocksPerMultiProcessor;
    int accessPolicyMaxWindowSize;
    size_t reservedSharedMemPerBlock; /* CUDA 11's struct ended here */
    int hostRegisterSupported;
    int sparseCudaArraySupported;
    int hostRegisterReadOnlySupported;
    int timelineSemaphoreInteropSupported;
    int memoryPoolsSupported;
    int gpuDirectRDMASupported;
    unsigned int gpuDirectRDMAFlushWritesOptions;
    int gpuDirectRDMAWritesOrdering;
    unsigned int memoryPoolSupportedHandleTypes;
    int deferredMappingCudaArraySupported;
    int ipcEventSupported;
    int clusterLaunch;
    int unifiedFunctionPointers;
    int reserved2[2];
    int reserved1[1];
    int reserved[60];
};

/* Exported names CUDA 13 dropped: device properties in CUDA 12's layout
 * (_v2; the plain name writes CUDA 11's prefix of it), the capture and
 * edge calls with edge data (_v2/_v3: CUDA 13's plain forms), managed
 * memory hints by location, and the cudaThread* aliases of cudaDevice*. */
cudaError_t cudaGetDeviceProperties_v2(struct rt12_device_prop *prop, int device);
cudaError_t cudaStreamGetCaptureInfo_v2(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                        unsigned long long *id_out, cudaGraph_t *graph_out,
                                        const cudaGraphNode_t **dependencies_out, size_t *numDependencies_out);
cudaError_t cudaStreamGetCaptureInfo_v2_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                             unsigned long long *id_out, cudaGraph_t *graph_out,
                                             const cudaGraphNode_t **dependencies_out, size_t *numDependencies_out);
cudaError_t cudaStreamGetCaptureInfo_v3(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                        unsigned long long *id_out, cudaGraph_t *graph_out,
                                        const cudaGraphNode_t **dependencies_out,
                                        const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out);
cudaError_t cudaStreamGetCaptureInfo_v3_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                             unsigned long long *id_out, cudaGraph_t *graph_out,
                                             const cudaGraphNode_t **dependencies_out,
                                             const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out);
cudaError_t cudaStreamUpdateCaptureDependencies_v2(cudaStream_t stream, cudaGraphNode_t *dependencies,
                                                   const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                                                   unsigned int flags);
cudaError_t cudaStreamUpdateCaptureDependencies_v2_ptsz(cudaStream_t stream, cudaGraphNode_t *dependencies,
                                                        const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                                                        unsigned int flags);
cudaError_t cudaGraphGetEdges_v2(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
                                 cudaGraphEdgeData *edgeData, size_t *numEdges);
cudaError_t cudaGraphNodeGetDependencies_v2(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                            cudaGraphEdgeData *edgeData, size_t *pNumDependencies);
cudaError_t cudaGraphNodeGetDependentNodes_v2(cudaGraphNode_t node, cudaGraphNode_t *pDependentNodes,
                                              cudaGraphEdgeData *edgeData, size_t *pNumDependentNodes);
cudaError_t cudaGraphAddDependencies_v2(cudaGraph_t graph, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                                        const cudaGraphEdgeData *edgeData, size_t numDependencies);
cudaError_t cudaGraphRemoveDependencies_v2(cudaGraph_t graph, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                                           const cudaGraphEdgeData *edgeData, size_t numDependencies);
cudaError_t cudaGraphAddNode_v2(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies,
                                const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                                struct cudaGraphNodeParams *nodeParams);
cudaError_t cudaMemPrefetchAsync_v2(const void *devPtr, size_t count, struct cudaMemLocation location,
                                    unsigned int flags, cudaStream_t stream);
cudaError_t cudaMemPrefetchAsync_v2_ptsz(const void *devPtr, size_t count, struct cudaMemLocation location,
                                         unsigned int flags, cudaStream_t stream);
cudaError_t cudaMemAdvise_v2(const void *devPtr, size_t count, enum cudaMemoryAdvise advice,
                             struct cudaMemLocation location);
cudaError_t cudaThreadExit(void);
cudaError_t cudaThreadSynchronize(void);
cudaError_t cudaThreadSetLimit(enum cudaLimit limit, size_t value);
cudaError_t cudaThreadGetLimit(size_t *pValue, enum cudaLimit limit);
cudaError_t cudaThreadSetCacheConfig(enum cudaFuncCache cacheConfig);
cudaError_t cudaThreadGetCacheConfig(enum cudaFuncCache *pCacheConfig);
cudaError_t cudaSetDoubleForDevice(double *d);
cudaError_t cudaSetDoubleForHost(double *d);

/* CUDA 12's forms of names CUDA 13 kept with other arguments. */
cudaError_t rt12_get_device_properties(struct rt12_device_prop *prop, int device) __asm__("cudaGetDeviceProperties");
cudaError_t rt12_get_capture_info(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                  unsigned long long *id_out) __asm__("cudaStreamGetCaptureInfo");
cudaError_t rt12_get_capture_info_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                       unsigned long long *id_out) __asm__("cudaStreamGetCaptureInfo_ptsz");
cudaError_t rt12_update_capture_deps(cudaStream_t stream, cudaGraphNode_t *dependencies, size_t numDependencies,
                                     unsigned int flags) __asm__("cudaStreamUpdateCaptureDependencies");
cudaError_t rt12_update_capture_deps_ptsz(cudaStream_t stream, cudaGraphNode_t *dependencies, size_t numDependencies,
                                          unsigned int flags) __asm__("cudaStreamUpdateCaptureDependencies_ptsz");
cudaError_t rt12_graph_get_edges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
                                 size_t *numEdges) __asm__("cudaGraphGetEdges");
cudaError_t rt12_graph_node_get_dependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                             size_t *pNumDependencies) __asm__("cudaGraphNodeGetDependencies");
cudaError_t rt12_graph_node_get_dependent_nodes(cudaGraphNode_t node, cudaGraphNode_t *pDependentNodes,
                                                size_t *pNumDependentNodes) __asm__("cudaGraphNodeGetDependentNodes");
cudaError_t rt12_graph_add_dependencies(cudaGraph_t graph, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                                        size_t numDependencies) __asm__("cudaGraphAddDependencies");
cudaError_t rt12_graph_remove_dependencies(cudaGraph_t graph, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                                           size_t numDependencies) __asm__("cudaGraphRemoveDependencies");
cudaError_t rt12_graph_add_node(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies,
                                size_t numDependencies,
                                struct cudaGraphNodeParams *nodeParams) __asm__("cudaGraphAddNode");
cudaError_t rt12_prefetch(const void *devPtr, size_t count, int dstDevice,
                          cudaStream_t stream) __asm__("cudaMemPrefetchAsync");
cudaError_t rt12_prefetch_ptsz(const void *devPtr, size_t count, int dstDevice,
                               cudaStream_t stream) __asm__("cudaMemPrefetchAsync_ptsz");
cudaError_t rt12_advise(const void *devPtr, size_t count, enum cudaMemoryAdvise advice,
                        int device) __asm__("cudaMemAdvise");

#endif /* CUCACHE_SIM_RUNTIME12_H */
