/*
 * The simulated cuDNN (libcudnn.so.9): handles, versions, error strings
 * and the answer of every function that would compute (dnn.h says what
 * it keeps; dnn_desc.c the descriptors).  A program that binds cuDNN 9 at
 * load (PyTorch's libtorch_cuda.so) starts; its convolutions, batch
 * norms, RNNs and backend graphs get CUDNN_STATUS_NOT_SUPPORTED, once
 * said on stderr per function.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnn.h"
#include "handles.h"
#include "shared.h"
#include "stub.h"

pthread_mutex_t dnn_lock = PTHREAD_MUTEX_INITIALIZER;

/* cudnnGetLastErrorString's message: the calling thread's last refusal. */
static _Thread_local char last_error[160];

int sim_stub_dnn(atomic_flag *once, const char *name)
{
    if (!atomic_flag_test_and_set(once))
        sim_log("%s is not simulated (CUDNN_STATUS_NOT_SUPPORTED)", name);
    snprintf(last_error, sizeof last_error, "%s is not simulated", name);
    return CUDNN_STATUS_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------------
 * Versions and errors
 * ---------------------------------------------------------------------- */

DNN_API size_t cudnnGetVersion(void)
{
    return DNN_VERSION;
}

DNN_API size_t cudnnGetMaxDeviceVersion(void)
{
    return DNN_MAX_DEVICE_VERSION;
}

/* The runtime the process loaded (cuDNN reports the one it was built
 * for; the stand-in serves both CUDA 12 and 13). */
DNN_API size_t cudnnGetCudartVersion(void)
{
    int (*get)(int *) = (int (*)(int *))dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion");
    int v = 0;
    if (get && get(&v) == 0 && v > 0)
        return (size_t)v;
    return DNN_CUDART_FALLBACK;
}

DNN_API cudnnStatus_t cudnnGetProperty(int type, int *value)
{
    static const int parts[] = {
        [DNN_MAJOR_VERSION] = DNN_MAJOR, [DNN_MINOR_VERSION] = DNN_MINOR, [DNN_PATCH_LEVEL] = DNN_PATCH};
    if (!value)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    if (type < 0 || type > DNN_PATCH_LEVEL)
        return CUDNN_STATUS_BAD_PARAM;
    *value = parts[type];
    return CUDNN_STATUS_SUCCESS;
}

/* The sub-libraries' cross checks: one library, always consistent. */
DNN_API cudnnStatus_t cudnnGraphVersionCheck(void)
{
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnOpsVersionCheck(void)
{
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnCnnVersionCheck(void)
{
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnAdvVersionCheck(void)
{
    return CUDNN_STATUS_SUCCESS;
}

/* cudnnGetErrorString's answers: cuDNN 9's codes, one row each. */
static const struct {
    int code;
    const char *name;
} status_names[] = {
    {0, "CUDNN_STATUS_SUCCESS"},
    {1001, "CUDNN_STATUS_NOT_INITIALIZED"},
    {1002, "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH"},
    {1003, "CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH"},
    {1004, "CUDNN_STATUS_DEPRECATED"},
    {1005, "CUDNN_STATUS_LICENSE_ERROR"},
    {1006, "CUDNN_STATUS_RUNTIME_IN_PROGRESS"},
    {1007, "CUDNN_STATUS_RUNTIME_FP_OVERFLOW"},
    {1008, "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED"},
    {2000, "CUDNN_STATUS_BAD_PARAM"},
    {2002, "CUDNN_STATUS_BAD_PARAM_NULL_POINTER"},
    {2003, "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER"},
    {2004, "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED"},
    {2005, "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND"},
    {2006, "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT"},
    {2007, "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH"},
    {2008, "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH"},
    {2009, "CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES"},
    {2010, "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE"},
    {2011, "CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH"},
    {2012, "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE"},
    {3000, "CUDNN_STATUS_NOT_SUPPORTED"},
    {3001, "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN"},
    {3002, "CUDNN_STATUS_NOT_SUPPORTED_SHAPE"},
    {3003, "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE"},
    {3004, "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT"},
    {3005, "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER"},
    {3006, "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART"},
    {3007, "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH"},
    {3008, "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING"},
    {3009, "CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE"},
    {3010, "CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT"},
    {3011, "CUDNN_STATUS_NOT_SUPPORTED_PADDING"},
    {3012, "CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM"},
    {3013, "CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API"},
    {3014, "CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE"},
    {4000, "CUDNN_STATUS_INTERNAL_ERROR"},
    {4001, "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED"},
    {4002, "CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE"},
    {4003, "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED"},
    {4004, "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"},
    {4005, "CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM"},
    {4006, "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED"},
    {5000, "CUDNN_STATUS_EXECUTION_FAILED"},
    {5001, "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER"},
    {5002, "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS"},
    {5003, "CUDNN_STATUS_EXECUTION_FAILED_CUDART"},
    {5004, "CUDNN_STATUS_EXECUTION_FAILED_CURAND"},
};

DNN_API const char *cudnnGetErrorString(int status)
{
    for (size_t i = 0; i < sizeof status_names / sizeof status_names[0]; i++)
        if (status_names[i].code == status)
            return status_names[i].name;
    return "CUDNN_UNKNOWN_STATUS_FOUND";
}

DNN_API void cudnnGetLastErrorString(char *message, size_t max_size)
{
    if (!message || !max_size)
        return;
    snprintf(message, max_size, "%s", last_error);
    last_error[0] = '\0';
}

/* ------------------------------------------------------------------------
 * Handles
 * ---------------------------------------------------------------------- */

int dnn_handle_live(const void *h)
{
    pthread_mutex_lock(&dnn_lock);
    int live = handle_is(h, DNN_MAGIC_HANDLE);
    pthread_mutex_unlock(&dnn_lock);
    return live;
}

DNN_API cudnnStatus_t cudnnCreate(dnn_handle_t **handle)
{
    if (!handle)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    dnn_handle_t *h = calloc(1, sizeof *h);
    if (!h)
        return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    pthread_mutex_lock(&dnn_lock);
    handle_add(h, DNN_MAGIC_HANDLE);
    pthread_mutex_unlock(&dnn_lock);
    *handle = h;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnDestroy(dnn_handle_t *handle)
{
    pthread_mutex_lock(&dnn_lock);
    int live = handle_take(handle, DNN_MAGIC_HANDLE);
    pthread_mutex_unlock(&dnn_lock);
    if (!live)
        return CUDNN_STATUS_BAD_PARAM;
    free(handle);
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnSetStream(dnn_handle_t *handle, void *stream)
{
    if (!dnn_handle_live(handle))
        return CUDNN_STATUS_BAD_PARAM;
    handle->stream = stream;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnGetStream(dnn_handle_t *handle, void **stream)
{
    if (!stream)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    if (!dnn_handle_live(handle))
        return CUDNN_STATUS_BAD_PARAM;
    *stream = handle->stream;
    return CUDNN_STATUS_SUCCESS;
}
