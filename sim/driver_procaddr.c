/*
 * cuGetProcAddress: how the runtime, and frameworks that look up the driver
 * themselves, obtain driver entry points.  A lookup names the base symbol
 * ("cuMemAlloc"), the CUDA version whose ABI the caller wants (1000 * major
 * + 10 * minor) and whether stream handle 0 means the legacy or the
 * per-thread default stream; the answer is the newest variant not newer than
 * that version, in its _ptsz/_ptds form when per-thread is asked for.
 */
#include <string.h>

#include "driver.h"

typedef struct procaddr_s {
    const char *name; /* base name */
    int version;      /* first CUDA version whose ABI this entry is */
    void *legacy;     /* entry point */
    void *per_thread; /* per-thread default stream variant, or NULL */
} procaddr_t;

SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
SIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
/* The CUDA 11 forms, which cuda.h no longer declares (driver_misc.c). */
SIM_API CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);
SIM_API CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);
SIM_API CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);

#define E(name, ver, fn)                                                                                               \
    {                                                                                                                  \
        name, ver, (void *)fn, NULL                                                                                    \
    }
#define P(name, ver, fn, pt)                                                                                           \
    {                                                                                                                  \
        name, ver, (void *)fn, (void *)pt                                                                              \
    }

static const procaddr_t table[] = {
    E("cuInit", 2000, cuInit),
    E("cuDriverGetVersion", 2020, cuDriverGetVersion),
    E("cuGetErrorString", 6000, cuGetErrorString),
    E("cuGetErrorName", 6000, cuGetErrorName),
    E("cuGetProcAddress", 11030, cuGetProcAddress),
    E("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    E("cuDeviceGet", 2000, cuDeviceGet),
    E("cuDeviceGetCount", 2000, cuDeviceGetCount),
    E("cuDeviceGetName", 2000, cuDeviceGetName),
    E("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    E("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    E("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    E("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    E("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    E("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),
    E("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    E("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    E("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    E("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    E("cuDevicePrimaryCtxSetFlags", 11000, cuDevicePrimaryCtxSetFlags_v2),
    E("cuCtxCreate", 3020, cuCtxCreate_v2),
    E("cuCtxCreate", 11040, cuCtxCreate_v3),
    E("cuCtxCreate", 12050, cuCtxCreate_v4),
    E("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    E("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    E("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    E("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    E("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    E("cuCtxGetDevice", 2000, cuCtxGetDevice),
    E("cuCtxSynchronize", 2000, cuCtxSynchronize),
    E("cuCtxGetStreamPriorityRange", 5050, cuCtxGetStreamPriorityRange),
    E("cuMemAlloc", 3020, cuMemAlloc_v2),
    E("cuMemFree", 3020, cuMemFree_v2),
    E("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    E("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    E("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    E("cuMemHostAlloc", 2020, cuMemHostAlloc),
    E("cuMemFreeHost", 2000, cuMemFreeHost),
    E("cuMemAllocManaged", 6000, cuMemAllocManaged),
    E("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    E("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    E("cuPointerSetAttribute", 6000, cuPointerSetAttribute),
    E("cuMemGetHandleForAddressRange", 11070, cuMemGetHandleForAddressRange),
    E("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    E("cuMemHostUnregister", 4000, cuMemHostUnregister),
    E("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    E("cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    E("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    E("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    E("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle),
    E("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    E("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    E("cuIpcGetEventHandle", 4010, cuIpcGetEventHandle),
    E("cuIpcOpenEventHandle", 4010, cuIpcOpenEventHandle),
    E("cuDeviceCanAccessPeer", 4000, cuDeviceCanAccessPeer),
    E("cuCtxEnablePeerAccess", 4000, cuCtxEnablePeerAccess),
    E("cuCtxDisablePeerAccess", 4000, cuCtxDisablePeerAccess),
    E("cuDeviceGetP2PAttribute", 8000, cuDeviceGetP2PAttribute),
    P("cuMemcpyPeer", 4000, cuMemcpyPeer, cuMemcpyPeer_ptds),
    P("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz),
    P("cuMemcpy3DPeer", 4000, cuMemcpy3DPeer, cuMemcpy3DPeer_ptds),
    P("cuMemcpy3DPeerAsync", 4000, cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync_ptsz),
    E("cuMemAddressReserve", 10020, cuMemAddressReserve),
    E("cuMemAddressFree", 10020, cuMemAddressFree),
    E("cuMemCreate", 10020, cuMemCreate),
    E("cuMemRelease", 10020, cuMemRelease),
    E("cuMemMap", 10020, cuMemMap),
    E("cuMemUnmap", 10020, cuMemUnmap),
    E("cuMemSetAccess", 10020, cuMemSetAccess),
    E("cuMemGetAccess", 10020, cuMemGetAccess),
    E("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    E("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    E("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    E("cuMemGetAllocationPropertiesFromHandle", 10020, cuMemGetAllocationPropertiesFromHandle),
    E("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    P("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
    P("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
    P("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    P("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    P("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    P("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    P("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    P("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    P("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    P("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
    P("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
    P("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz),
    P("cuMemsetD16", 3020, cuMemsetD16_v2, cuMemsetD16_v2_ptds),
    P("cuMemsetD16Async", 3020, cuMemsetD16Async, cuMemsetD16Async_ptsz),
    P("cuMemcpy2D", 3020, cuMemcpy2D_v2, cuMemcpy2D_v2_ptds),
    P("cuMemcpy2DUnaligned", 3020, cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds),
    P("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz),
    P("cuMemsetD2D8", 3020, cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds),
    P("cuMemsetD2D16", 3020, cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds),
    P("cuMemsetD2D32", 3020, cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds),
    P("cuMemsetD2D8Async", 3020, cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz),
    P("cuMemsetD2D16Async", 3020, cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz),
    P("cuMemsetD2D32Async", 3020, cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz),
    P("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    P("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    P("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz),
    E("cuMemPoolCreate", 11020, cuMemPoolCreate),
    E("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    E("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    E("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    E("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    E("cuMemPoolSetAccess", 11020, cuMemPoolSetAccess),
    E("cuMemPoolGetAccess", 11020, cuMemPoolGetAccess),
    E("cuMemPoolExportToShareableHandle", 11020, cuMemPoolExportToShareableHandle),
    E("cuMemPoolImportFromShareableHandle", 11020, cuMemPoolImportFromShareableHandle),
    E("cuMemPoolExportPointer", 11020, cuMemPoolExportPointer),
    E("cuMemPoolImportPointer", 11020, cuMemPoolImportPointer),
    E("cuStreamCreate", 2000, cuStreamCreate),
    E("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    E("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    P("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    P("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
    P("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    P("cuStreamGetFlags", 5050, cuStreamGetFlags, cuStreamGetFlags_ptsz),
    P("cuStreamGetCtx", 9020, cuStreamGetCtx, cuStreamGetCtx_ptsz),
    P("cuStreamGetPriority", 5050, cuStreamGetPriority, cuStreamGetPriority_ptsz),
    P("cuLaunchHostFunc", 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
    P("cuStreamAddCallback", 5000, cuStreamAddCallback, cuStreamAddCallback_ptsz),
    E("cuGetExportTable", 3000, cuGetExportTable),
    E("cuModuleLoad", 2000, cuModuleLoad),
    E("cuModuleLoadData", 2000, cuModuleLoadData),
    E("cuModuleLoadDataEx", 2010, cuModuleLoadDataEx),
    E("cuModuleLoadFatBinary", 2000, cuModuleLoadFatBinary),
    E("cuLibraryLoadData", 12000, cuLibraryLoadData),
    E("cuLibraryLoadFromFile", 12000, cuLibraryLoadFromFile),
    E("cuLibraryUnload", 12000, cuLibraryUnload),
    E("cuLibraryGetKernel", 12000, cuLibraryGetKernel),
    E("cuLibraryGetModule", 12000, cuLibraryGetModule),
    E("cuKernelGetFunction", 12000, cuKernelGetFunction),
    E("cuKernelGetName", 12030, cuKernelGetName),
    E("cuModuleUnload", 2000, cuModuleUnload),
    E("cuModuleGetFunction", 2000, cuModuleGetFunction),
    E("cuFuncGetName", 12030, cuFuncGetName),
    E("cuFuncGetModule", 11000, cuFuncGetModule),
    E("cuFuncGetAttribute", 2020, cuFuncGetAttribute),
    E("cuFuncSetAttribute", 9000, cuFuncSetAttribute),
    E("cuFuncSetCacheConfig", 3000, cuFuncSetCacheConfig),
    E("cuFuncSetSharedMemConfig", 4020, cuFuncSetSharedMemConfig),
    E("cuKernelGetAttribute", 12000, cuKernelGetAttribute),
    E("cuKernelSetAttribute", 12000, cuKernelSetAttribute),
    E("cuKernelSetCacheConfig", 12000, cuKernelSetCacheConfig),
    E("cuKernelGetLibrary", 12050, cuKernelGetLibrary),
    E("cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050, cuOccupancyMaxActiveBlocksPerMultiprocessor),
    E("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000,
      cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags),
    E("cuOccupancyMaxPotentialBlockSize", 6050, cuOccupancyMaxPotentialBlockSize),
    E("cuOccupancyMaxPotentialBlockSizeWithFlags", 7000, cuOccupancyMaxPotentialBlockSizeWithFlags),
    E("cuOccupancyAvailableDynamicSMemPerBlock", 10020, cuOccupancyAvailableDynamicSMemPerBlock),
    E("cuOccupancyMaxPotentialClusterSize", 11070, cuOccupancyMaxPotentialClusterSize),
    E("cuOccupancyMaxActiveClusters", 11070, cuOccupancyMaxActiveClusters),
    E("cuModuleGetGlobal", 3020, cuModuleGetGlobal_v2),
    E("cuLibraryGetGlobal", 12000, cuLibraryGetGlobal),
    E("cuLibraryGetManaged", 12000, cuLibraryGetManaged),
    /* the 5.5 and 6.5 forms share a signature: both are served by one code */
    E("cuLinkCreate", 5050, cuLinkCreate_v2),
    E("cuLinkCreate", 6050, cuLinkCreate_v2),
    E("cuLinkAddData", 5050, cuLinkAddData_v2),
    E("cuLinkAddData", 6050, cuLinkAddData_v2),
    E("cuLinkAddFile", 5050, cuLinkAddFile_v2),
    E("cuLinkAddFile", 6050, cuLinkAddFile_v2),
    E("cuLinkComplete", 5050, cuLinkComplete),
    E("cuLinkDestroy", 5050, cuLinkDestroy),
    P("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz),
    P("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
    P("cuLaunchKernelEx", 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
    P("cuStreamBeginCapture", 10000, cuStreamBeginCapture, cuStreamBeginCapture_ptsz),
    P("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    P("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    P("cuStreamIsCapturing", 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    E("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    E("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    E("cuGraphInstantiate", 10000, cuGraphInstantiate),
    E("cuGraphInstantiate", 11000, cuGraphInstantiate_v2),
    E("cuGraphInstantiate", 12000, cuGraphInstantiateWithFlags),
    P("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    E("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    E("cuGraphDestroy", 10000, cuGraphDestroy),
    E("cuGraphCreate", 10000, cuGraphCreate),
    E("cuGraphAddKernelNode", 10000, cuGraphAddKernelNode),
    E("cuGraphAddKernelNode", 12000, cuGraphAddKernelNode_v2),
    E("cuGraphKernelNodeGetParams", 10000, cuGraphKernelNodeGetParams),
    E("cuGraphKernelNodeGetParams", 12000, cuGraphKernelNodeGetParams_v2),
    E("cuGraphKernelNodeSetParams", 10000, cuGraphKernelNodeSetParams),
    E("cuGraphKernelNodeSetParams", 12000, cuGraphKernelNodeSetParams_v2),
    E("cuGraphAddMemcpyNode", 10000, cuGraphAddMemcpyNode),
    E("cuGraphMemcpyNodeGetParams", 10000, cuGraphMemcpyNodeGetParams),
    E("cuGraphMemcpyNodeSetParams", 10000, cuGraphMemcpyNodeSetParams),
    E("cuGraphAddMemsetNode", 10000, cuGraphAddMemsetNode),
    E("cuGraphMemsetNodeGetParams", 10000, cuGraphMemsetNodeGetParams),
    E("cuGraphMemsetNodeSetParams", 10000, cuGraphMemsetNodeSetParams),
    E("cuGraphAddHostNode", 10000, cuGraphAddHostNode),
    E("cuGraphHostNodeGetParams", 10000, cuGraphHostNodeGetParams),
    E("cuGraphHostNodeSetParams", 10000, cuGraphHostNodeSetParams),
    E("cuGraphAddChildGraphNode", 10000, cuGraphAddChildGraphNode),
    E("cuGraphChildGraphNodeGetGraph", 10000, cuGraphChildGraphNodeGetGraph),
    E("cuGraphAddEmptyNode", 10000, cuGraphAddEmptyNode),
    E("cuGraphAddEventRecordNode", 11010, cuGraphAddEventRecordNode),
    E("cuGraphEventRecordNodeGetEvent", 11010, cuGraphEventRecordNodeGetEvent),
    E("cuGraphEventRecordNodeSetEvent", 11010, cuGraphEventRecordNodeSetEvent),
    E("cuGraphAddEventWaitNode", 11010, cuGraphAddEventWaitNode),
    E("cuGraphEventWaitNodeGetEvent", 11010, cuGraphEventWaitNodeGetEvent),
    E("cuGraphEventWaitNodeSetEvent", 11010, cuGraphEventWaitNodeSetEvent),
    E("cuGraphAddMemAllocNode", 11040, cuGraphAddMemAllocNode),
    E("cuGraphMemAllocNodeGetParams", 11040, cuGraphMemAllocNodeGetParams),
    E("cuGraphAddMemFreeNode", 11040, cuGraphAddMemFreeNode),
    E("cuGraphMemFreeNodeGetParams", 11040, cuGraphMemFreeNodeGetParams),
    E("cuDeviceGraphMemTrim", 11040, cuDeviceGraphMemTrim),
    E("cuDeviceGetGraphMemAttribute", 11040, cuDeviceGetGraphMemAttribute),
    E("cuDeviceSetGraphMemAttribute", 11040, cuDeviceSetGraphMemAttribute),
    E("cuGraphClone", 10000, cuGraphClone),
    E("cuGraphNodeFindInClone", 10000, cuGraphNodeFindInClone),
    E("cuGraphNodeGetType", 10000, cuGraphNodeGetType),
    E("cuGraphGetNodes", 10000, cuGraphGetNodes),
    E("cuGraphGetRootNodes", 10000, cuGraphGetRootNodes),
    E("cuGraphGetEdges", 10000, cuGraphGetEdges),
    E("cuGraphGetEdges", 12030, cuGraphGetEdges_v2),
    E("cuGraphNodeGetDependencies", 10000, cuGraphNodeGetDependencies),
    E("cuGraphNodeGetDependencies", 12030, cuGraphNodeGetDependencies_v2),
    E("cuGraphNodeGetDependentNodes", 10000, cuGraphNodeGetDependentNodes),
    E("cuGraphNodeGetDependentNodes", 12030, cuGraphNodeGetDependentNodes_v2),
    E("cuGraphAddDependencies", 10000, cuGraphAddDependencies),
    E("cuGraphAddDependencies", 12030, cuGraphAddDependencies_v2),
    E("cuGraphRemoveDependencies", 10000, cuGraphRemoveDependencies),
    E("cuGraphRemoveDependencies", 12030, cuGraphRemoveDependencies_v2),
    E("cuGraphDestroyNode", 10000, cuGraphDestroyNode),
    E("cuGraphDebugDotPrint", 11030, cuGraphDebugDotPrint),
    P("cuGraphInstantiateWithParams", 12000, cuGraphInstantiateWithParams, cuGraphInstantiateWithParams_ptsz),
    E("cuGraphExecGetFlags", 12000, cuGraphExecGetFlags),
    E("cuGraphExecKernelNodeSetParams", 10010, cuGraphExecKernelNodeSetParams),
    E("cuGraphExecKernelNodeSetParams", 12000, cuGraphExecKernelNodeSetParams_v2),
    E("cuGraphExecMemcpyNodeSetParams", 10020, cuGraphExecMemcpyNodeSetParams),
    E("cuGraphExecMemsetNodeSetParams", 10020, cuGraphExecMemsetNodeSetParams),
    E("cuGraphExecHostNodeSetParams", 10020, cuGraphExecHostNodeSetParams),
    E("cuGraphExecChildGraphNodeSetParams", 11010, cuGraphExecChildGraphNodeSetParams),
    E("cuGraphExecEventRecordNodeSetEvent", 11010, cuGraphExecEventRecordNodeSetEvent),
    E("cuGraphExecEventWaitNodeSetEvent", 11010, cuGraphExecEventWaitNodeSetEvent),
    E("cuGraphNodeSetEnabled", 11060, cuGraphNodeSetEnabled),
    E("cuGraphNodeGetEnabled", 11060, cuGraphNodeGetEnabled),
    E("cuGraphExecUpdate", 10020, cuGraphExecUpdate),
    E("cuGraphExecUpdate", 12000, cuGraphExecUpdate_v2),
    P("cuGraphUpload", 11010, cuGraphUpload, cuGraphUpload_ptsz),
    P("cuStreamBeginCaptureToGraph", 12030, cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz),
    P("cuStreamGetCaptureInfo", 10010, cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_ptsz),
    P("cuStreamGetCaptureInfo", 11030, cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v2_ptsz),
    P("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz),
    P("cuStreamUpdateCaptureDependencies", 11030, cuStreamUpdateCaptureDependencies,
      cuStreamUpdateCaptureDependencies_ptsz),
    P("cuStreamUpdateCaptureDependencies", 12030, cuStreamUpdateCaptureDependencies_v2,
      cuStreamUpdateCaptureDependencies_v2_ptsz),
    E("cuEventCreate", 2000, cuEventCreate),
    P("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz),
    E("cuEventQuery", 2000, cuEventQuery),
    E("cuEventSynchronize", 2000, cuEventSynchronize),
    /* v1 and v2 share a signature; both are served by the v2 code. */
    E("cuEventElapsedTime", 2000, cuEventElapsedTime_v2),
    E("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    E("cuEventDestroy", 4000, cuEventDestroy_v2),
    /* arrays (driver_array.c, driver_copy.c) */
    E("cuArrayCreate", 3020, cuArrayCreate_v2),
    E("cuArrayGetDescriptor", 3020, cuArrayGetDescriptor_v2),
    E("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    E("cuArray3DGetDescriptor", 3020, cuArray3DGetDescriptor_v2),
    E("cuArrayGetMemoryRequirements", 11060, cuArrayGetMemoryRequirements),
    E("cuArrayDestroy", 2000, cuArrayDestroy),
    E("cuMipmappedArrayCreate", 5000, cuMipmappedArrayCreate),
    E("cuMipmappedArrayGetLevel", 5000, cuMipmappedArrayGetLevel),
    E("cuMipmappedArrayGetMemoryRequirements", 11060, cuMipmappedArrayGetMemoryRequirements),
    E("cuMipmappedArrayDestroy", 5000, cuMipmappedArrayDestroy),
    P("cuMemcpy3D", 3020, cuMemcpy3D_v2, cuMemcpy3D_v2_ptds),
    P("cuMemcpy3DAsync", 3020, cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz),
    P("cuMemcpyHtoA", 3020, cuMemcpyHtoA_v2, cuMemcpyHtoA_v2_ptds),
    P("cuMemcpyAtoH", 3020, cuMemcpyAtoH_v2, cuMemcpyAtoH_v2_ptds),
    P("cuMemcpyDtoA", 3020, cuMemcpyDtoA_v2, cuMemcpyDtoA_v2_ptds),
    P("cuMemcpyAtoD", 3020, cuMemcpyAtoD_v2, cuMemcpyAtoD_v2_ptds),
    P("cuMemcpyAtoA", 3020, cuMemcpyAtoA_v2, cuMemcpyAtoA_v2_ptds),
    P("cuMemcpyHtoAAsync", 3020, cuMemcpyHtoAAsync_v2, cuMemcpyHtoAAsync_v2_ptsz),
    P("cuMemcpyAtoHAsync", 3020, cuMemcpyAtoHAsync_v2, cuMemcpyAtoHAsync_v2_ptsz),
    /* texture and surface objects (driver_texture.c) */
    E("cuTexObjectCreate", 5000, cuTexObjectCreate),
    E("cuTexObjectDestroy", 5000, cuTexObjectDestroy),
    E("cuTexObjectGetResourceDesc", 5000, cuTexObjectGetResourceDesc),
    E("cuTexObjectGetTextureDesc", 5000, cuTexObjectGetTextureDesc),
    E("cuTexObjectGetResourceViewDesc", 5000, cuTexObjectGetResourceViewDesc),
    E("cuSurfObjectCreate", 5000, cuSurfObjectCreate),
    E("cuSurfObjectDestroy", 5000, cuSurfObjectDestroy),
    E("cuSurfObjectGetResourceDesc", 5000, cuSurfObjectGetResourceDesc),
    /* limits, configuration, PCI ids, profiler, stream attributes, managed
     * memory hints (driver_misc.c) */
    E("cuCtxSetLimit", 3010, cuCtxSetLimit),
    E("cuCtxGetLimit", 3010, cuCtxGetLimit),
    E("cuCtxSetCacheConfig", 3020, cuCtxSetCacheConfig),
    E("cuCtxGetCacheConfig", 3020, cuCtxGetCacheConfig),
    E("cuCtxSetSharedMemConfig", 4020, cuCtxSetSharedMemConfig),
    E("cuCtxGetSharedMemConfig", 4020, cuCtxGetSharedMemConfig),
    E("cuCtxResetPersistingL2Cache", 11000, cuCtxResetPersistingL2Cache),
    E("cuDevicePrimaryCtxSetFlags", 7000, cuDevicePrimaryCtxSetFlags),
    E("cuDeviceGetByPCIBusId", 4010, cuDeviceGetByPCIBusId),
    E("cuDeviceGetPCIBusId", 4010, cuDeviceGetPCIBusId),
    E("cuFlushGPUDirectRDMAWrites", 11030, cuFlushGPUDirectRDMAWrites),
    E("cuProfilerInitialize", 4000, cuProfilerInitialize),
    E("cuProfilerStart", 4000, cuProfilerStart),
    E("cuProfilerStop", 4000, cuProfilerStop),
    P("cuStreamGetAttribute", 11000, cuStreamGetAttribute, cuStreamGetAttribute_ptsz),
    P("cuStreamSetAttribute", 11000, cuStreamSetAttribute, cuStreamSetAttribute_ptsz),
    P("cuStreamAttachMemAsync", 6000, cuStreamAttachMemAsync, cuStreamAttachMemAsync_ptsz),
    P("cuMemPrefetchAsync", 8000, cuMemPrefetchAsync, cuMemPrefetchAsync_ptsz),
    P("cuMemPrefetchAsync", 12020, cuMemPrefetchAsync_v2, cuMemPrefetchAsync_v2_ptsz),
    E("cuMemAdvise", 8000, cuMemAdvise),
    E("cuMemAdvise", 12020, cuMemAdvise_v2),
    E("cuMemRangeGetAttribute", 8000, cuMemRangeGetAttribute),
    E("cuMemRangeGetAttributes", 8000, cuMemRangeGetAttributes),
};

SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *symbolStatus)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    const procaddr_t *best = NULL;
    bool named = false;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) != 0)
            continue;
        named = true;
        if (table[i].version <= cudaVersion && (!best || table[i].version > best->version))
            best = &table[i];
    }
    *pfn = NULL;
    if (!best) {
        if (symbolStatus)
            *symbolStatus = named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    *pfn = per_thread && best->per_thread ? best->per_thread : best->legacy;
    if (symbolStatus)
        *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

/* The CUDA 11.3 form, without the status argument. */
SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
