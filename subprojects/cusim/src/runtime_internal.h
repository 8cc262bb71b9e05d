/*
 * The simulated CUDA runtime's private header.
 *
 * The runtime (libcudart.so.12, libcudart.so.13, libcudart_static.a) is a
 * thin translation layer over the driver, like NVIDIA's: it holds no device
 * state beyond the calling thread's current device and last error and the
 * primary contexts it retained.  It reaches the driver only through
 * dlopen("libcuda.so.1") + cuGetProcAddress_v2, so a preloaded interposer
 * sees every lookup and every call.
 *
 * Files:
 *   runtime_core.c    driver loading, errors, devices, contexts, versions,
 *                     device properties, driver entry points
 *   runtime_mem.c     allocation, pointer attributes, copies, memsets,
 *                     stream-ordered allocation and memory pools
 *   runtime_stream.c  streams, events, host functions, capture, graphs
 *   runtime_module.c  module registration and launch
 *   runtime_graph.c   graphs built by hand, graph memory, capture info
 *   runtime_peer.c    peer access and copies, IPC events, pools shared
 *                     between processes
 *   runtime_func.c    kernel attributes, occupancy, cudaLaunchKernelExC and
 *                     cooperative launches
 *   runtime_symbol.c  __device__ and __constant__ variables: the symbol copies
 *   runtime_array.c   arrays, mipmapped arrays, copies to and from them,
 *                     texture and surface objects
 *   runtime_misc.c    device flags, limits, cache configuration, PCI bus
 *                     ids, the profiler, stream attributes, managed
 *                     memory hints
 *   runtime_stub.c    the answer of the functions not simulated (stub.h;
 *                     shared runtimes only)
 *   runtime12.c       libcudart.so.12's forms of the calls CUDA 13 changed
 *   runtime13.c       libcudart.so.13's (and the static archive's); both
 *                     over runtime_major.h, CUDA 12.4's ABI in runtime12.h
 *
 * Every runtime call with a _ptsz/_ptds twin is implemented once, taking the
 * driver table to use: rt_drv[RT_LEGACY] (entry points looked up with
 * CU_GET_PROC_ADDRESS_LEGACY_STREAM) or rt_drv[RT_PTDS] (looked up with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, so stream 0 means the
 * per-thread default stream).  RT_STREAM_API generates both exports.
 */
#ifndef CUCACHE_SIM_RUNTIME_INTERNAL_H
#define CUCACHE_SIM_RUNTIME_INTERNAL_H

#include <stdbool.h>

#include "cusim/cuda_api.h"

#ifndef SIM_CUDART_MAJOR
#error "SIM_CUDART_MAJOR must be 12 or 13"
#endif

/* The version this runtime reports and asks the driver for (12000, 13000). */
#define RT_CUDART_VERSION (SIM_CUDART_MAJOR * 1000)

/* Exported runtime entry points; everything else stays hidden. */
#define RT_API __attribute__((visibility("default")))
/* Cross-file internals: hidden even in the static archive's final link. */
#define RT_HIDDEN __attribute__((visibility("hidden")))

/* Devices the runtime keeps a primary-context record for. */
#define RT_MAX_DEVICES 64

/* ------------------------------------------------------------------------
 * Driver table
 * ---------------------------------------------------------------------- */

/* X(field, base): `field` is the driver's exported name, whose prototype in
 * cuda_api.h gives the pointer type; `base` is the name without _v2/_ptsz/
 * _ptds, as cuGetProcAddress_v2 expects it. */
#define RT_DRIVER_FUNCS(X)                                                                                             \
    X(cuInit, "cuInit")                                                                                                \
    X(cuDriverGetVersion, "cuDriverGetVersion")                                                                        \
    X(cuDeviceGet, "cuDeviceGet")                                                                                      \
    X(cuDeviceGetCount, "cuDeviceGetCount")                                                                            \
    X(cuDeviceGetName, "cuDeviceGetName")                                                                              \
    X(cuDeviceGetUuid_v2, "cuDeviceGetUuid")                                                                           \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem")                                                                         \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                                                                    \
    X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool")                                                          \
    X(cuDeviceGetMemPool, "cuDeviceGetMemPool")                                                                        \
    X(cuDeviceSetMemPool, "cuDeviceSetMemPool")                                                                        \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                                                            \
    X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease")                                                       \
    X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset")                                                           \
    X(cuCtxSetCurrent, "cuCtxSetCurrent")                                                                              \
    X(cuCtxSynchronize, "cuCtxSynchronize")                                                                            \
    X(cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange")                                                      \
    X(cuMemAlloc_v2, "cuMemAlloc")                                                                                     \
    X(cuMemFree_v2, "cuMemFree")                                                                                       \
    X(cuMemGetInfo_v2, "cuMemGetInfo")                                                                                 \
    X(cuMemAllocHost_v2, "cuMemAllocHost")                                                                             \
    X(cuMemHostAlloc, "cuMemHostAlloc")                                                                                \
    X(cuMemFreeHost, "cuMemFreeHost")                                                                                  \
    X(cuMemAllocManaged, "cuMemAllocManaged")                                                                          \
    X(cuPointerGetAttributes, "cuPointerGetAttributes")                                                                \
    X(cuMemHostRegister_v2, "cuMemHostRegister")                                                                       \
    X(cuMemHostUnregister, "cuMemHostUnregister")                                                                      \
    X(cuMemHostGetDevicePointer_v2, "cuMemHostGetDevicePointer")                                                       \
    X(cuMemHostGetFlags, "cuMemHostGetFlags")                                                                          \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch")                                                                           \
    X(cuMemcpy2D_v2, "cuMemcpy2D")                                                                                     \
    X(cuMemcpy2DAsync_v2, "cuMemcpy2DAsync")                                                                           \
    X(cuMemsetD2D8_v2, "cuMemsetD2D8")                                                                                 \
    X(cuMemsetD2D8Async, "cuMemsetD2D8Async")                                                                          \
    X(cuIpcGetMemHandle, "cuIpcGetMemHandle")                                                                          \
    X(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle")                                                                     \
    X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle")                                                                      \
    X(cuIpcGetEventHandle, "cuIpcGetEventHandle")                                                                      \
    X(cuIpcOpenEventHandle, "cuIpcOpenEventHandle")                                                                    \
    X(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer")                                                                  \
    X(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess")                                                                  \
    X(cuCtxDisablePeerAccess, "cuCtxDisablePeerAccess")                                                                \
    X(cuDeviceGetP2PAttribute, "cuDeviceGetP2PAttribute")                                                              \
    X(cuMemcpyPeer, "cuMemcpyPeer")                                                                                    \
    X(cuMemcpyPeerAsync, "cuMemcpyPeerAsync")                                                                          \
    X(cuMemcpy, "cuMemcpy")                                                                                            \
    X(cuMemcpyAsync, "cuMemcpyAsync")                                                                                  \
    X(cuMemsetD8_v2, "cuMemsetD8")                                                                                     \
    X(cuMemsetD8Async, "cuMemsetD8Async")                                                                              \
    X(cuMemAllocAsync, "cuMemAllocAsync")                                                                              \
    X(cuMemFreeAsync, "cuMemFreeAsync")                                                                                \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync")                                                              \
    X(cuMemPoolCreate, "cuMemPoolCreate")                                                                              \
    X(cuMemPoolDestroy, "cuMemPoolDestroy")                                                                            \
    X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute")                                                                  \
    X(cuMemPoolGetAttribute, "cuMemPoolGetAttribute")                                                                  \
    X(cuMemPoolTrimTo, "cuMemPoolTrimTo")                                                                              \
    X(cuMemPoolSetAccess, "cuMemPoolSetAccess")                                                                        \
    X(cuMemPoolGetAccess, "cuMemPoolGetAccess")                                                                        \
    X(cuMemPoolExportToShareableHandle, "cuMemPoolExportToShareableHandle")                                            \
    X(cuMemPoolImportFromShareableHandle, "cuMemPoolImportFromShareableHandle")                                        \
    X(cuMemPoolExportPointer, "cuMemPoolExportPointer")                                                                \
    X(cuMemPoolImportPointer, "cuMemPoolImportPointer")                                                                \
    X(cuStreamCreate, "cuStreamCreate")                                                                                \
    X(cuStreamCreateWithPriority, "cuStreamCreateWithPriority")                                                        \
    X(cuStreamDestroy_v2, "cuStreamDestroy")                                                                           \
    X(cuStreamSynchronize, "cuStreamSynchronize")                                                                      \
    X(cuStreamQuery, "cuStreamQuery")                                                                                  \
    X(cuStreamWaitEvent, "cuStreamWaitEvent")                                                                          \
    X(cuStreamGetFlags, "cuStreamGetFlags")                                                                            \
    X(cuStreamGetPriority, "cuStreamGetPriority")                                                                      \
    X(cuLaunchHostFunc, "cuLaunchHostFunc")                                                                            \
    X(cuStreamAddCallback, "cuStreamAddCallback")                                                                      \
    X(cuModuleLoadData, "cuModuleLoadData")                                                                            \
    X(cuModuleGetFunction, "cuModuleGetFunction")                                                                      \
    X(cuLaunchKernel, "cuLaunchKernel")                                                                                \
    X(cuStreamBeginCapture_v2, "cuStreamBeginCapture")                                                                 \
    X(cuStreamEndCapture, "cuStreamEndCapture")                                                                        \
    X(cuStreamIsCapturing, "cuStreamIsCapturing")                                                                      \
    X(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode")                                          \
    X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags")                                                      \
    X(cuGraphLaunch, "cuGraphLaunch")                                                                                  \
    X(cuGraphExecDestroy, "cuGraphExecDestroy")                                                                        \
    X(cuGraphDestroy, "cuGraphDestroy")                                                                                \
    X(cuGraphCreate, "cuGraphCreate")                                                                                  \
    X(cuGraphAddKernelNode_v2, "cuGraphAddKernelNode")                                                                 \
    X(cuGraphKernelNodeGetParams_v2, "cuGraphKernelNodeGetParams")                                                     \
    X(cuGraphKernelNodeSetParams_v2, "cuGraphKernelNodeSetParams")                                                     \
    X(cuGraphAddMemcpyNode, "cuGraphAddMemcpyNode")                                                                    \
    X(cuGraphMemcpyNodeGetParams, "cuGraphMemcpyNodeGetParams")                                                        \
    X(cuGraphMemcpyNodeSetParams, "cuGraphMemcpyNodeSetParams")                                                        \
    X(cuGraphAddMemsetNode, "cuGraphAddMemsetNode")                                                                    \
    X(cuGraphMemsetNodeGetParams, "cuGraphMemsetNodeGetParams")                                                        \
    X(cuGraphMemsetNodeSetParams, "cuGraphMemsetNodeSetParams")                                                        \
    X(cuGraphAddHostNode, "cuGraphAddHostNode")                                                                        \
    X(cuGraphHostNodeGetParams, "cuGraphHostNodeGetParams")                                                            \
    X(cuGraphHostNodeSetParams, "cuGraphHostNodeSetParams")                                                            \
    X(cuGraphAddChildGraphNode, "cuGraphAddChildGraphNode")                                                            \
    X(cuGraphChildGraphNodeGetGraph, "cuGraphChildGraphNodeGetGraph")                                                  \
    X(cuGraphAddEmptyNode, "cuGraphAddEmptyNode")                                                                      \
    X(cuGraphAddEventRecordNode, "cuGraphAddEventRecordNode")                                                          \
    X(cuGraphEventRecordNodeGetEvent, "cuGraphEventRecordNodeGetEvent")                                                \
    X(cuGraphEventRecordNodeSetEvent, "cuGraphEventRecordNodeSetEvent")                                                \
    X(cuGraphAddEventWaitNode, "cuGraphAddEventWaitNode")                                                              \
    X(cuGraphEventWaitNodeGetEvent, "cuGraphEventWaitNodeGetEvent")                                                    \
    X(cuGraphEventWaitNodeSetEvent, "cuGraphEventWaitNodeSetEvent")                                                    \
    X(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode")                                                                \
    X(cuGraphMemAllocNodeGetParams, "cuGraphMemAllocNodeGetParams")                                                    \
    X(cuGraphAddMemFreeNode, "cuGraphAddMemFreeNode")                                                                  \
    X(cuGraphMemFreeNodeGetParams, "cuGraphMemFreeNodeGetParams")                                                      \
    X(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim")                                                                    \
    X(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute")                                                    \
    X(cuDeviceSetGraphMemAttribute, "cuDeviceSetGraphMemAttribute")                                                    \
    X(cuGraphClone, "cuGraphClone")                                                                                    \
    X(cuGraphNodeFindInClone, "cuGraphNodeFindInClone")                                                                \
    X(cuGraphNodeGetType, "cuGraphNodeGetType")                                                                        \
    X(cuGraphGetNodes, "cuGraphGetNodes")                                                                              \
    X(cuGraphGetRootNodes, "cuGraphGetRootNodes")                                                                      \
    X(cuGraphDestroyNode, "cuGraphDestroyNode")                                                                        \
    X(cuGraphDebugDotPrint, "cuGraphDebugDotPrint")                                                                    \
    X(cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams")                                                    \
    X(cuGraphExecGetFlags, "cuGraphExecGetFlags")                                                                      \
    X(cuGraphExecKernelNodeSetParams_v2, "cuGraphExecKernelNodeSetParams")                                             \
    X(cuGraphExecMemcpyNodeSetParams, "cuGraphExecMemcpyNodeSetParams")                                                \
    X(cuGraphExecMemsetNodeSetParams, "cuGraphExecMemsetNodeSetParams")                                                \
    X(cuGraphExecHostNodeSetParams, "cuGraphExecHostNodeSetParams")                                                    \
    X(cuGraphExecChildGraphNodeSetParams, "cuGraphExecChildGraphNodeSetParams")                                        \
    X(cuGraphExecEventRecordNodeSetEvent, "cuGraphExecEventRecordNodeSetEvent")                                        \
    X(cuGraphExecEventWaitNodeSetEvent, "cuGraphExecEventWaitNodeSetEvent")                                            \
    X(cuGraphNodeSetEnabled, "cuGraphNodeSetEnabled")                                                                  \
    X(cuGraphNodeGetEnabled, "cuGraphNodeGetEnabled")                                                                  \
    X(cuGraphExecUpdate_v2, "cuGraphExecUpdate")                                                                       \
    X(cuGraphUpload, "cuGraphUpload")                                                                                  \
    X(cuEventCreate, "cuEventCreate")                                                                                  \
    X(cuEventRecord, "cuEventRecord")                                                                                  \
    X(cuEventQuery, "cuEventQuery")                                                                                    \
    X(cuEventSynchronize, "cuEventSynchronize")                                                                        \
    X(cuEventElapsedTime_v2, "cuEventElapsedTime")                                                                     \
    X(cuEventDestroy_v2, "cuEventDestroy")                                                                             \
    X(cuFuncGetAttribute, "cuFuncGetAttribute")                                                                        \
    X(cuFuncSetAttribute, "cuFuncSetAttribute")                                                                        \
    X(cuFuncSetCacheConfig, "cuFuncSetCacheConfig")                                                                    \
    X(cuFuncSetSharedMemConfig, "cuFuncSetSharedMemConfig")                                                            \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags")    \
    X(cuOccupancyAvailableDynamicSMemPerBlock, "cuOccupancyAvailableDynamicSMemPerBlock")                              \
    X(cuOccupancyMaxPotentialClusterSize, "cuOccupancyMaxPotentialClusterSize")                                        \
    X(cuOccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters")                                                    \
    X(cuLaunchKernelEx, "cuLaunchKernelEx")                                                                            \
    X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel")                                                          \
    X(cuModuleGetGlobal_v2, "cuModuleGetGlobal")                                                                       \
    X(cuArray3DCreate_v2, "cuArray3DCreate")                                                                           \
    X(cuArray3DGetDescriptor_v2, "cuArray3DGetDescriptor")                                                             \
    X(cuArrayGetMemoryRequirements, "cuArrayGetMemoryRequirements")                                                    \
    X(cuArrayDestroy, "cuArrayDestroy")                                                                                \
    X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate")                                                                \
    X(cuMipmappedArrayGetLevel, "cuMipmappedArrayGetLevel")                                                            \
    X(cuMipmappedArrayGetMemoryRequirements, "cuMipmappedArrayGetMemoryRequirements")                                  \
    X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy")                                                              \
    X(cuMemcpy3D_v2, "cuMemcpy3D")                                                                                     \
    X(cuMemcpy3DAsync_v2, "cuMemcpy3DAsync")                                                                           \
    X(cuMemcpyAtoA_v2, "cuMemcpyAtoA")                                                                                 \
    X(cuTexObjectCreate, "cuTexObjectCreate")                                                                          \
    X(cuTexObjectDestroy, "cuTexObjectDestroy")                                                                        \
    X(cuTexObjectGetResourceDesc, "cuTexObjectGetResourceDesc")                                                        \
    X(cuTexObjectGetTextureDesc, "cuTexObjectGetTextureDesc")                                                          \
    X(cuTexObjectGetResourceViewDesc, "cuTexObjectGetResourceViewDesc")                                                \
    X(cuSurfObjectCreate, "cuSurfObjectCreate")                                                                        \
    X(cuSurfObjectDestroy, "cuSurfObjectDestroy")                                                                      \
    X(cuSurfObjectGetResourceDesc, "cuSurfObjectGetResourceDesc")                                                      \
    X(cuCtxSetLimit, "cuCtxSetLimit")                                                                                  \
    X(cuCtxGetLimit, "cuCtxGetLimit")                                                                                  \
    X(cuCtxSetCacheConfig, "cuCtxSetCacheConfig")                                                                      \
    X(cuCtxGetCacheConfig, "cuCtxGetCacheConfig")                                                                      \
    X(cuCtxSetSharedMemConfig, "cuCtxSetSharedMemConfig")                                                              \
    X(cuCtxGetSharedMemConfig, "cuCtxGetSharedMemConfig")                                                              \
    X(cuCtxResetPersistingL2Cache, "cuCtxResetPersistingL2Cache")                                                      \
    X(cuDevicePrimaryCtxSetFlags_v2, "cuDevicePrimaryCtxSetFlags")                                                     \
    X(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState")                                                        \
    X(cuDeviceGetByPCIBusId, "cuDeviceGetByPCIBusId")                                                                  \
    X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId")                                                                      \
    X(cuFlushGPUDirectRDMAWrites, "cuFlushGPUDirectRDMAWrites")                                                        \
    X(cuProfilerStart, "cuProfilerStart")                                                                              \
    X(cuProfilerStop, "cuProfilerStop")                                                                                \
    X(cuStreamSetAttribute, "cuStreamSetAttribute")                                                                    \
    X(cuStreamGetAttribute, "cuStreamGetAttribute")                                                                    \
    X(cuStreamAttachMemAsync, "cuStreamAttachMemAsync")                                                                \
    X(cuMemRangeGetAttributes, "cuMemRangeGetAttributes")

/* Entry points whose ABI is newer than the oldest runtime (12000): looked
 * up at that version whatever RT_CUDART_VERSION is, so that both runtimes
 * call the one form (the CUDA 12.0 forms of the first two take a device,
 * not a location; the graph calls do not exist in 12.0). */
#define RT_DRIVER_FUNCS_AT(X)                                                                                          \
    X(cuMemPrefetchAsync_v2, "cuMemPrefetchAsync", 12020)                                                              \
    X(cuMemAdvise_v2, "cuMemAdvise", 12020)                                                                            \
    X(cuGraphAddNode_v2, "cuGraphAddNode", 12030)                                                                      \
    X(cuGraphNodeSetParams, "cuGraphNodeSetParams", 12020)                                                             \
    X(cuGraphExecNodeSetParams, "cuGraphExecNodeSetParams", 12020)                                                     \
    X(cuGraphConditionalHandleCreate, "cuGraphConditionalHandleCreate", 12030)

/* One typed table of driver entry points, all resolved or the runtime is
 * unusable.  Only the type comes from the prototype: no link reference. */
typedef struct rt_driver_s {
#define RT_DRIVER_FIELD(field, base) __typeof__(field) *field;
#define RT_DRIVER_FIELD_AT(field, base, version) __typeof__(field) *field;
    RT_DRIVER_FUNCS(RT_DRIVER_FIELD)
    RT_DRIVER_FUNCS_AT(RT_DRIVER_FIELD_AT)
#undef RT_DRIVER_FIELD
#undef RT_DRIVER_FIELD_AT
} rt_driver_t;

enum { RT_LEGACY = 0, RT_PTDS = 1 };

/* [RT_LEGACY], [RT_PTDS]; valid once rt_ready() returned cudaSuccess. */
RT_HIDDEN extern rt_driver_t rt_drv[2];

/* The legacy table, for calls without a per-thread twin. */
#define RT_DRV (&rt_drv[RT_LEGACY])

/* ------------------------------------------------------------------------
 * Shared helpers (runtime_core.c)
 * ---------------------------------------------------------------------- */

/* Loads the driver and runs cuInit once; the load result afterwards. */
RT_HIDDEN cudaError_t rt_ready(void);

/* rt_ready(), then makes the calling thread's current device's primary
 * context current (retaining it on first use). */
RT_HIDDEN cudaError_t rt_enter(void);

/* After rt_enter(): the context it made current, its device and the reset
 * generation it belongs to (a cudaDeviceReset makes a new one). */
RT_HIDDEN void rt_current(CUcontext *ctx, int *device, unsigned *gen);

/* Driver result to runtime error: the numeric values are the same. */
RT_HIDDEN cudaError_t rt_err(CUresult r);

/* A runtime call that is one driver call: rt_enter(), then `call` (not
 * made when that failed), whose result becomes the runtime's error. */
#define RT_FORWARD(call)                                                                                               \
    __extension__({                                                                                                    \
        cudaError_t rt_fwd_ = rt_enter();                                                                              \
        rt_fwd_ != cudaSuccess ? rt_fwd_ : rt_err(call);                                                               \
    })

/* A driver entry point outside the table, for a newer CUDA version than
 * this runtime's (NULL when the driver has none). */
RT_HIDDEN void *rt_driver_proc(const char *base, int version, bool ptds);

/* Records a failure as the calling thread's last error; returns e. */
RT_HIDDEN cudaError_t rt_ret(cudaError_t e);

/* Checks a device ordinal (rt_ready() must have succeeded) and gives its
 * driver handle. */
RT_HIDDEN cudaError_t rt_device(int ordinal, CUdevice *dev);

/* The primary context of a device, retained on first use like rt_enter's
 * (not made current). */
RT_HIDDEN cudaError_t rt_primary_ctx(int ordinal, CUcontext *ctx);

/* Registered kernels and variables (runtime_module.c, runtime_symbol.c) */

/* The kernel whose host stub is func, as a function of the current
 * context (its module loaded there on first use; again when reload): NULL
 * and *e set when func was never registered or its module cannot be made.
 * After rt_enter(). */
RT_HIDDEN CUfunction rt_function(const rt_driver_t *d, const void *func, bool reload, cudaError_t *e);
/* The kernel's registered device name, or NULL. */
RT_HIDDEN const char *rt_function_name(const void *func);
/* The module of a registration (__cudaRegisterFatBinary's handle) in the
 * current context, loaded there on first use.  After rt_enter(). */
RT_HIDDEN CUresult rt_fatbin_module(const rt_driver_t *d, void **fatCubinHandle, CUmodule *m);
/* Records a __device__ or __constant__ variable (__cudaRegisterVar); a
 * registration's go with it (__cudaUnregisterFatBinary). */
RT_HIDDEN void rt_var_register(void **fatCubinHandle, const void *host, const char *name, size_t size);
RT_HIDDEN void rt_vars_unregister(void **fatCubinHandle);

/* Defines the legacy-stream export `plain` and its per-thread twin
 * `suffixed`; both call impl(table, args...) and record its error. */
#define RT_STREAM_API(plain, suffixed, impl, params, ...)                                                              \
    RT_API cudaError_t plain params                                                                                    \
    {                                                                                                                  \
        return rt_ret(impl(&rt_drv[RT_LEGACY], __VA_ARGS__));                                                          \
    }                                                                                                                  \
    RT_API cudaError_t suffixed params                                                                                 \
    {                                                                                                                  \
        return rt_ret(impl(&rt_drv[RT_PTDS], __VA_ARGS__));                                                            \
    }

#endif /* CUCACHE_SIM_RUNTIME_INTERNAL_H */
