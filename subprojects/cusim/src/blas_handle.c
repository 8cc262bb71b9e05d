/*
 * libcublas.so.12: handles and their settings, versions, status names.
 * A handle belongs to the context current when it was made; its work goes
 * to its stream (the legacy default stream until cublasSetStream_v2).
 */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

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

/* ------------------------------------------------------------------------
 * Settings: one row each, an int-sized field and the values it takes.
 * ---------------------------------------------------------------------- */

typedef struct handle_setting_s {
    size_t offset;  /* of its field in blas_handle_t */
    int min, max;   /* the values it takes, flag bits cleared */
    unsigned flags; /* bits a value may carry beside it */
} handle_setting_t;

typedef enum { SETTING_MATH, SETTING_POINTER_MODE, SETTING_ATOMICS, SETTING_SM_COUNT_TARGET } handle_setting_id_t;

static const handle_setting_t handle_settings[] = {
    /* a mode: one of the four in its low bits, and the reduction flag */
    [SETTING_MATH] = {offsetof(blas_handle_t, math), CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH,
                      CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION},
    [SETTING_POINTER_MODE] = {offsetof(blas_handle_t, pointer_mode), CUBLAS_POINTER_MODE_HOST,
                              CUBLAS_POINTER_MODE_DEVICE, 0},
    [SETTING_ATOMICS] = {offsetof(blas_handle_t, atomics), CUBLAS_ATOMICS_NOT_ALLOWED, CUBLAS_ATOMICS_ALLOWED, 0},
    [SETTING_SM_COUNT_TARGET] = {offsetof(blas_handle_t, sm_count_target), 0, INT_MAX, 0}, /* 0: every SM */
};

_Static_assert(sizeof(cublasMath_t) == sizeof(int) && sizeof(cublasPointerMode_t) == sizeof(int) &&
                   sizeof(cublasAtomicsMode_t) == sizeof(int),
               "each setting is an int-sized field");

static cublasStatus_t setting_set(cublasHandle_t handle, handle_setting_id_t id, int value)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    const handle_setting_t *s = &handle_settings[id];
    int v = (int)((unsigned)value & ~s->flags);
    if (v < s->min || v > s->max)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy((char *)h + s->offset, &value, sizeof value);
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t setting_get(cublasHandle_t handle, handle_setting_id_t id, void *value)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!value)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(value, (const char *)h + handle_settings[id].offset, sizeof(int));
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    return setting_set(handle, SETTING_MATH, (int)mode);
}

BLAS_API cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode)
{
    return setting_get(handle, SETTING_MATH, mode);
}

BLAS_API cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode)
{
    return setting_set(handle, SETTING_POINTER_MODE, (int)mode);
}

BLAS_API cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode)
{
    return setting_get(handle, SETTING_POINTER_MODE, mode);
}

BLAS_API cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode)
{
    return setting_set(handle, SETTING_ATOMICS, (int)mode);
}

BLAS_API cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t *mode)
{
    return setting_get(handle, SETTING_ATOMICS, mode);
}

BLAS_API cublasStatus_t cublasSetSmCountTarget(cublasHandle_t handle, int smCountTarget)
{
    return setting_set(handle, SETTING_SM_COUNT_TARGET, smCountTarget);
}

BLAS_API cublasStatus_t cublasGetSmCountTarget(cublasHandle_t handle, int *smCountTarget)
{
    return setting_get(handle, SETTING_SM_COUNT_TARGET, smCountTarget);
}
