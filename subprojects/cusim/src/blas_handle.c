/*
 * libcublas.so.12: handles and their settings, versions, status names.
 * A handle belongs to the context current when it was made; its work goes
 * to its stream (the legacy default stream until cublasSetStream_v2).
 */
#include <stdlib.h>

#include "blas_gemm.h"

#define BLAS_HANDLE_MAGIC 0x63624c53u /* "cbLS" */

blas_handle_t *blas_handle(cublasHandle_t h)
{
    return h && h->magic == BLAS_HANDLE_MAGIC ? h : NULL;
}

BLAS_API cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    CUcontext ctx = blas_context();
    if (!ctx)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    blas_handle_t *h = calloc(1, sizeof *h);
    if (!h)
        return CUBLAS_STATUS_ALLOC_FAILED;
    h->lt = (struct cublasLtContext){BLAS_LT_MAGIC, ctx};
    h->magic = BLAS_HANDLE_MAGIC;
    h->math = CUBLAS_DEFAULT_MATH;
    h->pointer_mode = CUBLAS_POINTER_MODE_HOST;
    h->atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    h->lt.magic = 0;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version)
{
    if (!blas_handle(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!version)
        return CUBLAS_STATUS_INVALID_VALUE;
    *version = CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value)
{
    return blas_property(type, value);
}

BLAS_API size_t cublasGetCudartVersion(void)
{
    return BLAS_CUDART_VERSION;
}

BLAS_API const char *cublasGetStatusName(cublasStatus_t status)
{
    return blas_status_name(status);
}

BLAS_API const char *cublasGetStatusString(cublasStatus_t status)
{
    return blas_status_string(status);
}

/* Setting the stream gives the handle back its default workspace (none
 * here), as cuBLAS documents. */
BLAS_API cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = streamId;
    h->workspace = NULL;
    h->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *streamId)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!streamId)
        return CUBLAS_STATUS_INVALID_VALUE;
    *streamId = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

/* The workspace must be 256-byte aligned; NULL with 0 bytes: none. */
BLAS_API cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((uintptr_t)workspace % 256 || (!workspace && workspaceSizeInBytes))
        return CUBLAS_STATUS_INVALID_VALUE;
    h->workspace = workspace;
    h->workspace_bytes = workspace ? workspaceSizeInBytes : 0;
    return CUBLAS_STATUS_SUCCESS;
}

/* A mode: one of the four in its low bits, and the reduction flag. */
BLAS_API cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    unsigned m = (unsigned)mode & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (m > CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->math;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_ATOMICS_NOT_ALLOWED && mode != CUBLAS_ATOMICS_ALLOWED)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->atomics = mode;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t *mode)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->atomics;
    return CUBLAS_STATUS_SUCCESS;
}

/* 0: every multiprocessor */
BLAS_API cublasStatus_t cublasSetSmCountTarget(cublasHandle_t handle, int smCountTarget)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (smCountTarget < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->sm_count_target = smCountTarget;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasGetSmCountTarget(cublasHandle_t handle, int *smCountTarget)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!smCountTarget)
        return CUBLAS_STATUS_INVALID_VALUE;
    *smCountTarget = h->sm_count_target;
    return CUBLAS_STATUS_SUCCESS;
}
