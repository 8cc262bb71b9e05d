/*
 * The error codes the simulated driver and runtime both name: each row
 * gives the driver's code, the runtime's (of the same value: rt_err relies
 * on it) and the text both return, the real libraries' wording.  Codes
 * only one of them names stay in its own table (driver.c, runtime_core.c).
 */
#ifndef CUCACHE_SIM_ERRORS_H
#define CUCACHE_SIM_ERRORS_H

#define SIM_ERRORS(X)                                                                                                  \
    X(CUDA_SUCCESS, cudaSuccess, "no error")                                                                           \
    X(CUDA_ERROR_INVALID_VALUE, cudaErrorInvalidValue, "invalid argument")                                             \
    X(CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation, "out of memory")                                            \
    X(CUDA_ERROR_NOT_INITIALIZED, cudaErrorInitializationError, "initialization error")                                \
    X(CUDA_ERROR_DEINITIALIZED, cudaErrorCudartUnloading, "driver shutting down")                                      \
    X(CUDA_ERROR_NO_DEVICE, cudaErrorNoDevice, "no CUDA-capable device is detected")                                   \
    X(CUDA_ERROR_INVALID_DEVICE, cudaErrorInvalidDevice, "invalid device ordinal")                                     \
    X(CUDA_ERROR_INVALID_IMAGE, cudaErrorInvalidKernelImage, "device kernel image is invalid")                          \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU, cudaErrorNoKernelImageForDevice,                                                   \
      "no kernel image is available for execution on the device")                                                      \
    X(CUDA_ERROR_INVALID_CONTEXT, cudaErrorDeviceUninitialized, "invalid device context")                              \
    X(CUDA_ERROR_FILE_NOT_FOUND, cudaErrorFileNotFound, "file not found")                                              \
    X(CUDA_ERROR_INVALID_HANDLE, cudaErrorInvalidResourceHandle, "invalid resource handle")                            \
    X(CUDA_ERROR_UNSUPPORTED_LIMIT, cudaErrorUnsupportedLimit, "limit is not supported on this architecture")         \
    X(CUDA_ERROR_ILLEGAL_STATE, cudaErrorIllegalState, "the operation cannot be performed in the present state")       \
    X(CUDA_ERROR_NOT_FOUND, cudaErrorSymbolNotFound, "named symbol not found")                                         \
    X(CUDA_ERROR_NOT_READY, cudaErrorNotReady, "device not ready")                                                     \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, cudaErrorIllegalAddress, "an illegal memory access was encountered")                 \
    X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, cudaErrorPeerAccessUnsupported,                                              \
      "peer access is not supported between these two devices")                                                        \
    X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled")     \
    X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, cudaErrorPeerAccessNotEnabled, "peer access has not been enabled")           \
    X(CUDA_ERROR_TOO_MANY_PEERS, cudaErrorTooManyPeers, "peer mapping resources exhausted")                           \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, cudaErrorContextIsDestroyed, "context is destroyed")                            \
    X(CUDA_ERROR_LAUNCH_FAILED, cudaErrorLaunchFailure, "unspecified launch failure")                                  \
    X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, cudaErrorCooperativeLaunchTooLarge,                                     \
      "too many blocks in cooperative launch")                                                                         \
    X(CUDA_ERROR_NOT_PERMITTED, cudaErrorNotPermitted, "operation not permitted")                                      \
    X(CUDA_ERROR_NOT_SUPPORTED, cudaErrorNotSupported, "operation not supported")                                      \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cudaErrorStreamCaptureUnsupported,                                        \
      "operation not permitted when stream is capturing")                                                              \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cudaErrorStreamCaptureInvalidated,                                        \
      "operation failed due to a previous error during capture")                                                       \
    X(CUDA_ERROR_STREAM_CAPTURE_MERGE, cudaErrorStreamCaptureMerge,                                                    \
      "operation would result in a merge of separate capture sequences")                                               \
    X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, cudaErrorStreamCaptureUnmatched,                                            \
      "capture was not ended in the same stream as it began")                                                          \
    X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work")        \
    X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, cudaErrorStreamCaptureIsolation,                                            \
      "dependency created on uncaptured work in another stream")                                                       \
    X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cudaErrorStreamCaptureImplicit,                                              \
      "operation would make the legacy stream depend on a capturing blocking stream")                                  \
    X(CUDA_ERROR_CAPTURED_EVENT, cudaErrorCapturedEvent,                                                               \
      "operation not permitted on an event last recorded in a capturing stream")                                       \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, cudaErrorStreamCaptureWrongThread,                                       \
      "attempt to terminate a thread-local capture sequence from another thread")                                      \
    X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, cudaErrorGraphExecUpdateFailure,                                          \
      "the graph update was not performed because it included changes which violated constraints specific to "        \
      "instantiated graph update")                                                                                     \
    X(CUDA_ERROR_INVALID_CLUSTER_SIZE, cudaErrorInvalidClusterSize, "invalid cluster size")                            \
    X(CUDA_ERROR_UNKNOWN, cudaErrorUnknown, "unknown error")

#endif
