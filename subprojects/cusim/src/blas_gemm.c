/*
 * libcublas.so.12's computations: GEMM in every form PyTorch calls (typed,
 * Ex, strided batches, pointer-array batches), GEMV, DOT and TRSM.  Each
 * checks its arguments as cuBLAS does and queues one timed kernel on the
 * handle's stream touching its operands (blas_internal.h); no value is
 * computed.
 */
#include "blas_gemm.h"

static bool op_ok(cublasOperation_t op)
{
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

static int64_t max1(int64_t v)
{
    return v > 1 ? v : 1;
}

/* A kernel of handle h's stream, named after the call. */
static blas_kernel_t kernel_of(const blas_handle_t *h, const char *call)
{
    blas_kernel_t k = {.call = call, .stream = (CUstream)h->stream};
    return k;
}

/* The workspace the handle was given: read and written by its kernels. */
static void kernel_workspace(blas_kernel_t *k, const blas_handle_t *h)
{
    if (h->workspace_bytes)
        blas_kernel_range(k, "the workspace", h->workspace, h->workspace_bytes, true);
}

/* In device pointer mode the kernel reads alpha and beta. */
static void kernel_scalars(blas_kernel_t *k, const blas_handle_t *h, const void *alpha, const void *beta,
                           cudaDataType scale)
{
    if (h->pointer_mode != CUBLAS_POINTER_MODE_DEVICE)
        return;
    blas_kernel_range(k, "alpha", alpha, blas_type_bytes(scale), false);
    blas_kernel_range(k, "beta", beta, blas_type_bytes(scale), false);
}

/* ------------------------------------------------------------------------
 * GEMM
 * ---------------------------------------------------------------------- */

/* A matrix operand: where, its type, its leading dimension and the
 * stride between a batch's matrices (elements). */
typedef struct gemm_operand_s {
    const void *ptr; /* C is written through it */
    cudaDataType type;
    int64_t ld, stride;
} gemm_operand_t;

typedef struct blas_gemm_s {
    const char *call;
    cublasOperation_t transa, transb;
    int64_t m, n, k; /* op(A) m x k, op(B) k x n, C m x n */
    const void *alpha, *beta;
    cudaDataType scale;     /* alpha's and beta's type */
    gemm_operand_t a, b, c; /* A, B, C */
    int64_t batch;          /* matrices of each operand */
    bool arrays;            /* a, b and c point to device arrays of batch pointers */
    bool fast;              /* 32-bit floats may use TF32 */
} blas_gemm_t;

static cublasStatus_t gemm_run(cublasHandle_t handle, const blas_gemm_t *g)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int64_t arows = g->transa == CUBLAS_OP_N ? g->m : g->k, acols = g->transa == CUBLAS_OP_N ? g->k : g->m;
    int64_t brows = g->transb == CUBLAS_OP_N ? g->k : g->n, bcols = g->transb == CUBLAS_OP_N ? g->n : g->k;
    if (!op_ok(g->transa) || !op_ok(g->transb) || g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0 ||
        g->a.ld < max1(arows) || g->b.ld < max1(brows) || g->c.ld < max1(g->m) || !g->alpha || !g->beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    size_t ea = blas_type_bytes(g->a.type), eb = blas_type_bytes(g->b.type), ec = blas_type_bytes(g->c.type);
    if (!ea || !eb || !ec || !blas_type_bytes(g->scale) || g->a.type != g->b.type)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (g->m == 0 || g->n == 0 || g->batch == 0)
        return CUBLAS_STATUS_SUCCESS;

    blas_kernel_t k = kernel_of(h, g->call);
    kernel_scalars(&k, h, g->alpha, g->beta, g->scale);
    if (g->arrays) { /* the matrices are behind pointers in device memory: the arrays only */
        blas_kernel_range(&k, "Aarray", g->a.ptr, (uint64_t)g->batch * sizeof(void *), false);
        blas_kernel_range(&k, "Barray", g->b.ptr, (uint64_t)g->batch * sizeof(void *), false);
        blas_kernel_range(&k, "Carray", g->c.ptr, (uint64_t)g->batch * sizeof(void *), false);
    } else {
        if (g->k > 0) {
            blas_kernel_matrix(&k, "A", g->a.ptr, arows, acols, g->a.ld, g->a.stride, g->batch, ea, false);
            blas_kernel_matrix(&k, "B", g->b.ptr, brows, bcols, g->b.ld, g->b.stride, g->batch, eb, false);
        }
        /* C is written; read first when beta is not zero, which a written
         * range covers for the race detector */
        blas_kernel_matrix(&k, "C", g->c.ptr, g->m, g->n, g->c.ld, g->c.stride, g->batch, ec, true);
    }
    kernel_workspace(&k, h);
    k.flops =
        2.0 * (double)g->m * (double)g->n * (double)g->k * (double)g->batch * (blas_type_complex(g->a.type) ? 4 : 1);
    bool tf32 = ((unsigned)h->math & 0xfu) == CUBLAS_TF32_TENSOR_OP_MATH || g->fast;
    k.tflops = blas_tflops(g->a.type, tf32);
    return blas_kernel_launch(&k, h->lt.ctx);
}

/* The scale type of a compute type (or of the cudaDataType older callers
 * pass); 0 with ok false for an unknown one. */
static cudaDataType compute_scale(cublasComputeType_t ct, cudaDataType tc, bool *ok, bool *fast)
{
    bool cplx = blas_type_complex(tc);
    *ok = true;
    *fast =
        ct == CUBLAS_COMPUTE_32F_FAST_TF32 || ct == CUBLAS_COMPUTE_32F_FAST_16F || ct == CUBLAS_COMPUTE_32F_FAST_16BF;
    switch ((int)ct) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
        return cplx ? CUDA_C_16F : CUDA_R_16F;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
        return cplx ? CUDA_C_32F : CUDA_R_32F;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
        return cplx ? CUDA_C_64F : CUDA_R_64F;
    case CUBLAS_COMPUTE_32I:
    case CUBLAS_COMPUTE_32I_PEDANTIC:
        return CUDA_R_32I;
    default:
        if ((int)ct >= 0 && (int)ct < 64 && blas_type_bytes((cudaDataType)ct))
            return (cudaDataType)ct; /* a cudaDataType, as before CUDA 11 */
        *ok = false;
        return CUDA_R_32F;
    }
}

static bool algo_ok(cublasGemmAlgo_t algo)
{
    return (algo >= CUBLAS_GEMM_DEFAULT && algo <= 23) || (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= 115);
}

/* The Ex forms: types and compute type given. */
static cublasStatus_t gemm_ex(cublasHandle_t handle, blas_gemm_t *g, cublasComputeType_t ct, cublasGemmAlgo_t algo)
{
    bool ok;
    g->scale = compute_scale(ct, g->c.type, &ok, &g->fast);
    if (!blas_handle(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!algo_ok(algo))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!ok)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_run(handle, g);
}

/* One type for all: the typed forms. */
static cublasStatus_t gemm_typed(cublasHandle_t handle, const char *call, cublasOperation_t transa,
                                 cublasOperation_t transb, int64_t m, int64_t n, int64_t k, const void *alpha,
                                 const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                                 const void *beta, void *C, int64_t ldc, int64_t sc, int64_t batch, cudaDataType t)
{
    blas_gemm_t g = {.call = call,
                     .transa = transa,
                     .transb = transb,
                     .m = m,
                     .n = n,
                     .k = k,
                     .alpha = alpha,
                     .beta = beta,
                     .scale = t,
                     .a = {A, t, lda, sa},
                     .b = {B, t, ldb, sb},
                     .c = {C, t, ldc, sc},
                     .batch = batch};
    return gemm_run(handle, &g);
}

BLAS_API cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                       int n, int k, const float *alpha, const float *A, int lda, const float *B,
                                       int ldb, const float *beta, float *C, int ldc)
{
    return gemm_typed(handle, __func__, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                      CUDA_R_32F);
}

BLAS_API cublasStatus_t cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                       int n, int k, const double *alpha, const double *A, int lda, const double *B,
                                       int ldb, const double *beta, double *C, int ldc)
{
    return gemm_typed(handle, __func__, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                      CUDA_R_64F);
}

BLAS_API cublasStatus_t cublasCgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                       int n, int k, const cublas_complex_t *alpha, const cublas_complex_t *A, int lda,
                                       const cublas_complex_t *B, int ldb, const cublas_complex_t *beta,
                                       cublas_complex_t *C, int ldc)
{
    return gemm_typed(handle, __func__, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                      CUDA_C_32F);
}

BLAS_API cublasStatus_t cublasZgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                       int n, int k, const cublas_double_complex_t *alpha,
                                       const cublas_double_complex_t *A, int lda, const cublas_double_complex_t *B,
                                       int ldb, const cublas_double_complex_t *beta, cublas_double_complex_t *C,
                                       int ldc)
{
    return gemm_typed(handle, __func__, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                      CUDA_C_64F);
}

BLAS_API cublasStatus_t cublasHgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                    int n, int k, const cublas_half_t *alpha, const cublas_half_t *A, int lda,
                                    const cublas_half_t *B, int ldb, const cublas_half_t *beta, cublas_half_t *C,
                                    int ldc)
{
    return gemm_typed(handle, __func__, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                      CUDA_R_16F);
}

BLAS_API cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                  cublasOperation_t transb, int m, int n, int k, const float *alpha,
                                                  const float *A, int lda, long long strideA, const float *B, int ldb,
                                                  long long strideB, const float *beta, float *C, int ldc,
                                                  long long strideC, int batchCount)
{
    return gemm_typed(handle, __func__, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                      strideC, batchCount, CUDA_R_32F);
}

BLAS_API cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                  cublasOperation_t transb, int m, int n, int k, const double *alpha,
                                                  const double *A, int lda, long long strideA, const double *B, int ldb,
                                                  long long strideB, const double *beta, double *C, int ldc,
                                                  long long strideC, int batchCount)
{
    return gemm_typed(handle, __func__, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                      strideC, batchCount, CUDA_R_64F);
}

BLAS_API cublasStatus_t cublasCgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                  cublasOperation_t transb, int m, int n, int k,
                                                  const cublas_complex_t *alpha, const cublas_complex_t *A, int lda,
                                                  long long strideA, const cublas_complex_t *B, int ldb,
                                                  long long strideB, const cublas_complex_t *beta, cublas_complex_t *C,
                                                  int ldc, long long strideC, int batchCount)
{
    return gemm_typed(handle, __func__, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                      strideC, batchCount, CUDA_C_32F);
}

BLAS_API cublasStatus_t cublasZgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                  cublasOperation_t transb, int m, int n, int k,
                                                  const cublas_double_complex_t *alpha,
                                                  const cublas_double_complex_t *A, int lda, long long strideA,
                                                  const cublas_double_complex_t *B, int ldb, long long strideB,
                                                  const cublas_double_complex_t *beta, cublas_double_complex_t *C,
                                                  int ldc, long long strideC, int batchCount)
{
    return gemm_typed(handle, __func__, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                      strideC, batchCount, CUDA_C_64F);
}

BLAS_API cublasStatus_t cublasHgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                  cublasOperation_t transb, int m, int n, int k,
                                                  const cublas_half_t *alpha, const cublas_half_t *A, int lda,
                                                  long long strideA, const cublas_half_t *B, int ldb, long long strideB,
                                                  const cublas_half_t *beta, cublas_half_t *C, int ldc,
                                                  long long strideC, int batchCount)
{
    return gemm_typed(handle, __func__, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                      strideC, batchCount, CUDA_R_16F);
}

/* float alpha and beta, the matrices' types given */
BLAS_API cublasStatus_t cublasSgemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                      int n, int k, const float *alpha, const void *A, cudaDataType Atype, int lda,
                                      const void *B, cudaDataType Btype, int ldb, const float *beta, void *C,
                                      cudaDataType Ctype, int ldc)
{
    blas_gemm_t g = {.call = __func__,
                     .transa = transa,
                     .transb = transb,
                     .m = m,
                     .n = n,
                     .k = k,
                     .alpha = alpha,
                     .beta = beta,
                     .scale = CUDA_R_32F,
                     .a = {A, Atype, lda, 0},
                     .b = {B, Btype, ldb, 0},
                     .c = {C, Ctype, ldc, 0},
                     .batch = 1};
    return gemm_run(handle, &g);
}

BLAS_API cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                     int n, int k, const void *alpha, const void *A, cudaDataType Atype, int lda,
                                     const void *B, cudaDataType Btype, int ldb, const void *beta, void *C,
                                     cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                     cublasGemmAlgo_t algo)
{
    blas_gemm_t g = {.call = __func__,
                     .transa = transa,
                     .transb = transb,
                     .m = m,
                     .n = n,
                     .k = k,
                     .alpha = alpha,
                     .beta = beta,
                     .a = {A, Atype, lda, 0},
                     .b = {B, Btype, ldb, 0},
                     .c = {C, Ctype, ldc, 0},
                     .batch = 1};
    return gemm_ex(handle, &g, computeType, algo);
}

BLAS_API cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                   cublasOperation_t transb, int m, int n, int k, const void *alpha,
                                                   const void *A, cudaDataType Atype, int lda, long long strideA,
                                                   const void *B, cudaDataType Btype, int ldb, long long strideB,
                                                   const void *beta, void *C, cudaDataType Ctype, int ldc,
                                                   long long strideC, int batchCount, cublasComputeType_t computeType,
                                                   cublasGemmAlgo_t algo)
{
    blas_gemm_t g = {.call = __func__,
                     .transa = transa,
                     .transb = transb,
                     .m = m,
                     .n = n,
                     .k = k,
                     .alpha = alpha,
                     .beta = beta,
                     .a = {A, Atype, lda, strideA},
                     .b = {B, Btype, ldb, strideB},
                     .c = {C, Ctype, ldc, strideC},
                     .batch = batchCount};
    return gemm_ex(handle, &g, computeType, algo);
}

BLAS_API cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                            int m, int n, int k, const void *alpha, const void *const Aarray[],
                                            cudaDataType Atype, int lda, const void *const Barray[], cudaDataType Btype,
                                            int ldb, const void *beta, void *const Carray[], cudaDataType Ctype,
                                            int ldc, int batchCount, cublasComputeType_t computeType,
                                            cublasGemmAlgo_t algo)
{
    blas_gemm_t g = {.call = __func__,
                     .transa = transa,
                     .transb = transb,
                     .m = m,
                     .n = n,
                     .k = k,
                     .alpha = alpha,
                     .beta = beta,
                     .a = {Aarray, Atype, lda, 0},
                     .b = {Barray, Btype, ldb, 0},
                     .c = {Carray, Ctype, ldc, 0},
                     .batch = batchCount,
                     .arrays = true};
    return gemm_ex(handle, &g, computeType, algo);
}

/* ------------------------------------------------------------------------
 * GEMV
 * ---------------------------------------------------------------------- */

static cublasStatus_t gemv(cublasHandle_t handle, const char *call, cublasOperation_t trans, int m, int n,
                           const void *alpha, const void *A, int lda, const void *x, int incx, const void *beta,
                           void *y, int incy, cudaDataType t)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!op_ok(trans) || m < 0 || n < 0 || lda < max1(m) || incx == 0 || incy == 0 || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    size_t e = blas_type_bytes(t);
    blas_kernel_t k = kernel_of(h, call);
    kernel_scalars(&k, h, alpha, beta, t);
    blas_kernel_matrix(&k, "A", A, m, n, lda, 0, 1, e, false);
    blas_kernel_vector(&k, "x", x, trans == CUBLAS_OP_N ? n : m, incx, e, false);
    blas_kernel_vector(&k, "y", y, trans == CUBLAS_OP_N ? m : n, incy, e, true);
    kernel_workspace(&k, h);
    k.flops = 2.0 * m * n * (blas_type_complex(t) ? 4 : 1);
    k.tflops = blas_tflops(t, false);
    return blas_kernel_launch(&k, h->lt.ctx);
}

BLAS_API cublasStatus_t cublasSgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n, const float *alpha,
                                       const float *A, int lda, const float *x, int incx, const float *beta, float *y,
                                       int incy)
{
    return gemv(handle, __func__, trans, m, n, alpha, A, lda, x, incx, beta, y, incy, CUDA_R_32F);
}

BLAS_API cublasStatus_t cublasDgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
                                       const double *alpha, const double *A, int lda, const double *x, int incx,
                                       const double *beta, double *y, int incy)
{
    return gemv(handle, __func__, trans, m, n, alpha, A, lda, x, incx, beta, y, incy, CUDA_R_64F);
}

BLAS_API cublasStatus_t cublasCgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
                                       const cublas_complex_t *alpha, const cublas_complex_t *A, int lda,
                                       const cublas_complex_t *x, int incx, const cublas_complex_t *beta,
                                       cublas_complex_t *y, int incy)
{
    return gemv(handle, __func__, trans, m, n, alpha, A, lda, x, incx, beta, y, incy, CUDA_C_32F);
}

BLAS_API cublasStatus_t cublasZgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
                                       const cublas_double_complex_t *alpha, const cublas_double_complex_t *A, int lda,
                                       const cublas_double_complex_t *x, int incx, const cublas_double_complex_t *beta,
                                       cublas_double_complex_t *y, int incy)
{
    return gemv(handle, __func__, trans, m, n, alpha, A, lda, x, incx, beta, y, incy, CUDA_C_64F);
}

/* ------------------------------------------------------------------------
 * DOT: in host pointer mode the call waits for its kernel, as cuBLAS does
 * before it writes the host result; the result is not computed, so the
 * host's value stays as it was.
 * ---------------------------------------------------------------------- */

static cublasStatus_t dot(cublasHandle_t handle, const char *call, int n, const void *x, cudaDataType tx, int incx,
                          const void *y, cudaDataType ty, int incy, void *result, cudaDataType tr)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!result)
        return CUBLAS_STATUS_INVALID_VALUE;
    size_t ex = blas_type_bytes(tx), ey = blas_type_bytes(ty), er = blas_type_bytes(tr);
    if (!ex || !ey || !er)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    blas_kernel_t k = kernel_of(h, call);
    blas_kernel_vector(&k, "x", x, n, incx, ex, false);
    blas_kernel_vector(&k, "y", y, n, incy, ey, false);
    bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    if (device)
        blas_kernel_range(&k, "result", result, er, true);
    kernel_workspace(&k, h);
    k.flops = 2.0 * (n > 0 ? n : 0) * (blas_type_complex(tx) ? 4 : 1);
    k.tflops = blas_tflops(tx, false);
    cublasStatus_t s = blas_kernel_launch(&k, h->lt.ctx);
    if (s == CUBLAS_STATUS_SUCCESS && !device)
        s = blas_stream_wait(k.stream);
    return s;
}

BLAS_API cublasStatus_t cublasSdot_v2(cublasHandle_t handle, int n, const float *x, int incx, const float *y, int incy,
                                      float *result)
{
    return dot(handle, __func__, n, x, CUDA_R_32F, incx, y, CUDA_R_32F, incy, result, CUDA_R_32F);
}

BLAS_API cublasStatus_t cublasDdot_v2(cublasHandle_t handle, int n, const double *x, int incx, const double *y,
                                      int incy, double *result)
{
    return dot(handle, __func__, n, x, CUDA_R_64F, incx, y, CUDA_R_64F, incy, result, CUDA_R_64F);
}

BLAS_API cublasStatus_t cublasCdotu_v2(cublasHandle_t handle, int n, const cublas_complex_t *x, int incx,
                                       const cublas_complex_t *y, int incy, cublas_complex_t *result)
{
    return dot(handle, __func__, n, x, CUDA_C_32F, incx, y, CUDA_C_32F, incy, result, CUDA_C_32F);
}

BLAS_API cublasStatus_t cublasCdotc_v2(cublasHandle_t handle, int n, const cublas_complex_t *x, int incx,
                                       const cublas_complex_t *y, int incy, cublas_complex_t *result)
{
    return dot(handle, __func__, n, x, CUDA_C_32F, incx, y, CUDA_C_32F, incy, result, CUDA_C_32F);
}

BLAS_API cublasStatus_t cublasZdotu_v2(cublasHandle_t handle, int n, const cublas_double_complex_t *x, int incx,
                                       const cublas_double_complex_t *y, int incy, cublas_double_complex_t *result)
{
    return dot(handle, __func__, n, x, CUDA_C_64F, incx, y, CUDA_C_64F, incy, result, CUDA_C_64F);
}

BLAS_API cublasStatus_t cublasZdotc_v2(cublasHandle_t handle, int n, const cublas_double_complex_t *x, int incx,
                                       const cublas_double_complex_t *y, int incy, cublas_double_complex_t *result)
{
    return dot(handle, __func__, n, x, CUDA_C_64F, incx, y, CUDA_C_64F, incy, result, CUDA_C_64F);
}

BLAS_API cublasStatus_t cublasDotEx(cublasHandle_t handle, int n, const void *x, cudaDataType xType, int incx,
                                    const void *y, cudaDataType yType, int incy, void *result, cudaDataType resultType,
                                    cudaDataType executionType)
{
    if (blas_handle(handle) && !blas_type_bytes(executionType))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return dot(handle, __func__, n, x, xType, incx, y, yType, incy, result, resultType);
}

/* ------------------------------------------------------------------------
 * TRSM: A triangular, ka x ka (ka = m on the left, n on the right), read;
 * B m x n, read and overwritten with the solution.
 * ---------------------------------------------------------------------- */

static cublasStatus_t trsm(cublasHandle_t handle, const char *call, cublasSideMode_t side, cublasFillMode_t uplo,
                           cublasOperation_t trans, cublasDiagType_t diag, int m, int n, const void *alpha,
                           const void *A, int lda, void *B, int ldb, cudaDataType t)
{
    blas_handle_t *h = blas_handle(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int ka = side == CUBLAS_SIDE_LEFT ? m : n;
    if ((side != CUBLAS_SIDE_LEFT && side != CUBLAS_SIDE_RIGHT) ||
        (uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER) || !op_ok(trans) ||
        (diag != CUBLAS_DIAG_NON_UNIT && diag != CUBLAS_DIAG_UNIT) || m < 0 || n < 0 || lda < max1(ka) ||
        ldb < max1(m) || !alpha)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    size_t e = blas_type_bytes(t);
    blas_kernel_t k = kernel_of(h, call);
    if (h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE)
        blas_kernel_range(&k, "alpha", alpha, e, false);
    blas_kernel_matrix(&k, "A", A, ka, ka, lda, 0, 1, e, false);
    blas_kernel_matrix(&k, "B", B, m, n, ldb, 0, 1, e, true);
    kernel_workspace(&k, h);
    k.flops = (double)m * n * ka * (blas_type_complex(t) ? 4 : 1);
    k.tflops = blas_tflops(t, false);
    return blas_kernel_launch(&k, h->lt.ctx);
}

BLAS_API cublasStatus_t cublasStrsm_v2(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,
                                       cublasOperation_t trans, cublasDiagType_t diag, int m, int n, const float *alpha,
                                       const float *A, int lda, float *B, int ldb)
{
    return trsm(handle, __func__, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb, CUDA_R_32F);
}

BLAS_API cublasStatus_t cublasDtrsm_v2(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,
                                       cublasOperation_t trans, cublasDiagType_t diag, int m, int n,
                                       const double *alpha, const double *A, int lda, double *B, int ldb)
{
    return trsm(handle, __func__, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb, CUDA_R_64F);
}

BLAS_API cublasStatus_t cublasCtrsm_v2(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,
                                       cublasOperation_t trans, cublasDiagType_t diag, int m, int n,
                                       const cublas_complex_t *alpha, const cublas_complex_t *A, int lda,
                                       cublas_complex_t *B, int ldb)
{
    return trsm(handle, __func__, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb, CUDA_C_32F);
}

BLAS_API cublasStatus_t cublasZtrsm_v2(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,
                                       cublasOperation_t trans, cublasDiagType_t diag, int m, int n,
                                       const cublas_double_complex_t *alpha, const cublas_double_complex_t *A, int lda,
                                       cublas_double_complex_t *B, int ldb)
{
    return trsm(handle, __func__, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb, CUDA_C_64F);
}
