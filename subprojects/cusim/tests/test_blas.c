/*
 * Proves the simulated cuBLAS and cuBLASLt (src/blas_*.c): handles keep
 * their settings and refuse bad ones; GEMMs of every type and batch form,
 * GEMV, DOT, TRSM and cublasLtMatmul (on a cuBLASLt handle or a cuBLAS
 * handle cast to one) run as timed kernels on the handle's
 * (or the given) stream, after what the stream holds, for the time their
 * flops and bytes give; their operands' ranges reach the race detector (a
 * GEMM writing C on one stream while a kernel on another reads it, with no
 * event between them, is reported; ordered by an event it is not), and
 * those ranges are exactly the operands' (a strided batch one matrix
 * longer than its buffer is refused; with m, n and k, every leading
 * dimension and stride distinct, each operand of each GEMM form is its own
 * range, from its first byte to its last); bad arguments get cuBLAS's statuses,
 * a bad pointer one line naming the operand; the functions not simulated
 * answer CUBLAS_STATUS_NOT_SUPPORTED with one line, once.
 *
 * Device time is measured between events recorded while a gate holds the
 * stream, so the result does not depend on how fast the host queues.
 */
#include "simtest.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "blas.h"

#define N 64

/* Two of the functions not simulated (stubs take no arguments). */
int cublasSsyrk_v2(void);
int cublasLtMatrixTransform(void);

static cublasHandle_t handle;
static cudaStream_t sa, sb;
static float *A, *B, *C; /* N x N floats each, on the device */

static int blas_setup(void **state)
{
    (void)state;
    if (cudaMalloc((void **)&A, N * N * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&B, N * N * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&C, N * N * sizeof(float)) != cudaSuccess ||
        cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking) != cudaSuccess)
        return -1;
    return cublasCreate_v2(&handle) == CUBLAS_STATUS_SUCCESS ? 0 : -1;
}

static int blas_teardown(void **state)
{
    (void)state;
    cublasDestroy_v2(handle);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    return 0;
}

#define BLAS_EXPECT(call, want) simtest_expect_rc((int)(call), (int)(want), #call, __FILE__, __LINE__)
#define BLAS_OK(call) BLAS_EXPECT(call, CUBLAS_STATUS_SUCCESS)

static const float one = 1, zero = 0;

/* stderr into a file while fn runs; its text in out */
static void capture_stderr(void (*fn)(void), char *out, size_t len)
{
    FILE *log = tmpfile();
    int saved = dup(2);
    assert_non_null(log);
    assert_true(saved >= 0 && dup2(fileno(log), 2) >= 0);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(log);
    size_t n = fread(out, 1, len - 1, log);
    out[n] = '\0';
    fclose(log);
}

/* ------------------------------------------------------------------------ */

static void test_handle_settings(void **state)
{
    (void)state;
    int v = 0;
    BLAS_OK(cublasGetVersion_v2(handle, &v));
    assert_int_equal(v, 120405);
    BLAS_OK(cublasGetProperty(MAJOR_VERSION, &v));
    assert_int_equal(v, 12);
    BLAS_OK(cublasGetProperty(MINOR_VERSION, &v));
    assert_int_equal(v, 4);
    BLAS_EXPECT(cublasGetProperty((libraryPropertyType)7, &v), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasGetCudartVersion(), 12040);
    assert_int_equal(cublasLtGetVersion(), 120405);
    assert_string_equal(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
    assert_string_equal(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
    assert_non_null(cublasGetStatusString(CUBLAS_STATUS_SUCCESS));

    cudaStream_t s = NULL;
    BLAS_OK(cublasSetStream_v2(handle, sa));
    BLAS_OK(cublasGetStream_v2(handle, &s));
    assert_ptr_equal(s, sa);
    BLAS_OK(cublasSetStream_v2(handle, NULL));

    cublasMath_t math;
    BLAS_OK(cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH));
    BLAS_OK(cublasGetMathMode(handle, &math));
    assert_int_equal(math, CUBLAS_TF32_TENSOR_OP_MATH);
    BLAS_OK(cublasSetMathMode(handle,
                              (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    BLAS_EXPECT(cublasSetMathMode(handle, (cublasMath_t)5), CUBLAS_STATUS_INVALID_VALUE);
    BLAS_OK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));

    cublasPointerMode_t pm;
    BLAS_OK(cublasSetPointerMode_v2(handle, CUBLAS_POINTER_MODE_DEVICE));
    BLAS_OK(cublasGetPointerMode_v2(handle, &pm));
    assert_int_equal(pm, CUBLAS_POINTER_MODE_DEVICE);
    BLAS_EXPECT(cublasSetPointerMode_v2(handle, (cublasPointerMode_t)2), CUBLAS_STATUS_INVALID_VALUE);
    BLAS_OK(cublasSetPointerMode_v2(handle, CUBLAS_POINTER_MODE_HOST));

    BLAS_EXPECT(cublasSetWorkspace_v2(handle, (char *)C + 4, 1024), CUBLAS_STATUS_INVALID_VALUE); /* misaligned */
    BLAS_OK(cublasSetWorkspace_v2(handle, C, N * N * sizeof(float)));
    BLAS_OK(cublasSetWorkspace_v2(handle, NULL, 0));

    BLAS_EXPECT(cublasSetStream_v2(NULL, sa), CUBLAS_STATUS_NOT_INITIALIZED);
    BLAS_EXPECT(cublasGetVersion_v2(NULL, &v), CUBLAS_STATUS_NOT_INITIALIZED);
    cublasHandle_t other;
    BLAS_OK(cublasCreate_v2(&other));
    BLAS_OK(cublasDestroy_v2(other));
}

/* A GEMM queued behind a gate and a 2 ms timed kernel starts after both and
 * takes the time of its flops: 2 * 4096^3 at 67 TFLOPS (FP32) is 2052 us;
 * with TF32 allowed (495 TFLOPS), 278 us. */
static void gemm_after_kernel(cublasMath_t math, float want_ms)
{
    enum { M = 4096 };
    float *a, *b, *c;
    SIM_OK(cudaMalloc((void **)&a, (size_t)M * M * sizeof(float)));
    SIM_OK(cudaMalloc((void **)&b, (size_t)M * M * sizeof(float)));
    SIM_OK(cudaMalloc((void **)&c, (size_t)M * M * sizeof(float)));
    cudaEvent_t e0, e1;
    SIM_OK(cudaEventCreate(&e0));
    SIM_OK(cudaEventCreate(&e1));
    simtest_gate_t *g = simtest_gate_new();
    simtest_mark_t *done = simtest_mark_new();
    simtest_gate_block(g, sa);
    SIM_OK(cudaEventRecord(e0, sa));
    CU_OK(cucacheSimLaunchTimed(sa, 2000, NULL, NULL, NULL, 0));
    BLAS_OK(cublasSetStream_v2(handle, sa));
    BLAS_OK(cublasSetMathMode(handle, math));
    BLAS_OK(cublasSgemm_v2(handle, CUBLAS_OP_N, CUBLAS_OP_T, M, M, M, &one, a, M, b, M, &zero, c, M));
    SIM_OK(cudaEventRecord(e1, sa));
    simtest_mark_on(done, sa);
    simtest_settle();
    assert_false(simtest_mark_ran(done)); /* held behind the gate */
    simtest_gate_open(g);
    SIM_OK(cudaStreamSynchronize(sa));
    float ms = 0;
    SIM_OK(cudaEventElapsedTime(&ms, e0, e1));
    assert_float_equal(ms, 2.0f + want_ms, 0.002f);
    BLAS_OK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
    BLAS_OK(cublasSetStream_v2(handle, NULL));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
}

static void test_stream_order_and_time(void **state)
{
    (void)state;
    gemm_after_kernel(CUBLAS_DEFAULT_MATH, 2.052f);
    gemm_after_kernel(CUBLAS_TF32_TENSOR_OP_MATH, 0.278f);
}

/* A 2 ms kernel on stream A reads C; a GEMM on stream B writes C: with no
 * event between them a race, with one none. */
static void test_race_planted_and_ordered(void **state)
{
    (void)state;
    struct cucache_sim_access readc = {C, N * N * sizeof(float), 0};
    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    BLAS_OK(cublasSetStream_v2(handle, sb));
    SIM_OK(cudaDeviceSynchronize());
    unsigned long before = cucacheSimRaceCount();

    CU_OK(cucacheSimLaunchTimed(sa, 2000, NULL, NULL, &readc, 1));
    BLAS_OK(cublasSgemm_v2(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, A, N, B, N, &zero, C, N));
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(cucacheSimRaceCount(), before + 1);

    CU_OK(cucacheSimLaunchTimed(sa, 2000, NULL, NULL, &readc, 1));
    SIM_OK(cudaEventRecord(ev, sa));
    SIM_OK(cudaStreamWaitEvent(sb, ev, 0));
    BLAS_OK(cublasSgemm_v2(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, A, N, B, N, &zero, C, N));
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(cucacheSimRaceCount(), before + 1);

    /* the same through cuBLASLt on stream B */
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t l;
    BLAS_OK(cublasLtCreate(&lt));
    BLAS_OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    BLAS_OK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, N, N, N));
    CU_OK(cucacheSimLaunchTimed(sa, 2000, NULL, NULL, &readc, 1));
    BLAS_OK(cublasLtMatmul(lt, desc, &one, A, l, B, l, &zero, C, l, C, l, NULL, NULL, 0, sb));
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(cucacheSimRaceCount(), before + 2);
    CU_OK(cucacheSimLaunchTimed(sa, 2000, NULL, NULL, &readc, 1));
    SIM_OK(cudaEventRecord(ev, sa));
    SIM_OK(cudaStreamWaitEvent(sb, ev, 0));
    BLAS_OK(cublasLtMatmul(lt, desc, &one, A, l, B, l, &zero, C, l, C, l, NULL, NULL, 0, sb));
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(cucacheSimRaceCount(), before + 2);

    cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(lt);
    cudaEventDestroy(ev);
    BLAS_OK(cublasSetStream_v2(handle, NULL));
}

/* Every type and batch form runs; no race among work of one stream. */
static void test_types_and_batches(void **state)
{
    (void)state;
    enum { BATCH = 4, M = 16 };
    char *x, *y, *z, *ws;
    SIM_OK(cudaMalloc((void **)&x, BATCH * M * M * 16));
    SIM_OK(cudaMalloc((void **)&y, BATCH * M * M * 16));
    SIM_OK(cudaMalloc((void **)&z, BATCH * M * M * 16));
    SIM_OK(cudaMalloc((void **)&ws, 1 << 20));
    unsigned long before = cucacheSimRaceCount();
    BLAS_OK(cublasSetStream_v2(handle, sa));
    BLAS_OK(cublasSetWorkspace_v2(handle, ws, 1 << 20));
    const double done = 1, dzero = 0;
    const cublas_complex_t cone = {1, 0}, czero = {0, 0};
    const cublas_double_complex_t zone = {1, 0}, zzero = {0, 0};
    const cublas_half_t hone = {0x3c00}, hzero = {0};
    BLAS_OK(cublasDgemm_v2(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &done, (double *)x, M, (double *)y, M, &dzero,
                           (double *)z, M));
    BLAS_OK(cublasCgemm_v2(handle, CUBLAS_OP_C, CUBLAS_OP_N, M, M, M, &cone, (cublas_complex_t *)x, M,
                           (cublas_complex_t *)y, M, &czero, (cublas_complex_t *)z, M));
    BLAS_OK(cublasZgemm_v2(handle, CUBLAS_OP_N, CUBLAS_OP_T, M, M, M, &zone, (cublas_double_complex_t *)x, M,
                           (cublas_double_complex_t *)y, M, &zzero, (cublas_double_complex_t *)z, M));
    BLAS_OK(cublasHgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &hone, (cublas_half_t *)x, M, (cublas_half_t *)y, M,
                        &hzero, (cublas_half_t *)z, M));
    BLAS_OK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, M, M, M, &one, x, CUDA_R_16F, M, y, CUDA_R_16F, M, &zero, z,
                         CUDA_R_16F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
    BLAS_OK(cublasSgemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &one, x, CUDA_R_16BF, M, y, CUDA_R_16BF, M, &zero,
                          z, CUDA_R_32F, M));
    BLAS_OK(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &one, (float *)x, M, M * M, (float *)y,
                                      M, M * M, &zero, (float *)z, M, M * M, BATCH));
    BLAS_OK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &one, x, CUDA_R_16BF, M, M * M, y,
                                       CUDA_R_16BF, M, 0, &one, z, CUDA_R_16BF, M, M * M, BATCH, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
    void *ptrs[3 * BATCH];
    for (int i = 0; i < BATCH; i++) {
        ptrs[i] = x + i * M * M * 4;
        ptrs[BATCH + i] = y + i * M * M * 4;
        ptrs[2 * BATCH + i] = z + i * M * M * 4;
    }
    void **dptrs;
    SIM_OK(cudaMalloc((void **)&dptrs, sizeof ptrs));
    SIM_OK(cudaMemcpyAsync(dptrs, ptrs, sizeof ptrs, cudaMemcpyHostToDevice, sa));
    BLAS_OK(cublasGemmBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &one, (const void *const *)dptrs, CUDA_R_32F,
                                M, (const void *const *)dptrs + BATCH, CUDA_R_32F, M, &zero, dptrs + 2 * BATCH,
                                CUDA_R_32F, M, BATCH, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    BLAS_OK(cublasSgemv_v2(handle, CUBLAS_OP_T, M, M, &one, (float *)x, M, (float *)y, 1, &zero, (float *)z, 1));
    BLAS_OK(cublasSetPointerMode_v2(handle, CUBLAS_POINTER_MODE_DEVICE));
    BLAS_OK(cublasSdot_v2(handle, M, (float *)x, 1, (float *)y, 2, (float *)z));
    BLAS_OK(cublasSetPointerMode_v2(handle, CUBLAS_POINTER_MODE_HOST));
    float result = 5;
    BLAS_OK(cublasSdot_v2(handle, M, (float *)x, 1, (float *)y, 1, &result));
    assert_float_equal(result, 5, 0); /* values are not computed */
    BLAS_OK(cublasStrsm_v2(handle, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, M, M,
                           &one, (float *)x, M, (float *)z, M));
    SIM_OK(cudaStreamSynchronize(sa));
    assert_int_equal(cucacheSimRaceCount(), before);

    /* a strided batch is exactly its matrices: BATCH of them fit z, one
     * more does not */
    float *c4;
    SIM_OK(cudaMalloc((void **)&c4, BATCH * M * M * sizeof(float)));
    BLAS_OK(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &one, (float *)x, M, 0, (float *)y, M,
                                      0, &zero, c4, M, M * M, BATCH));
    BLAS_EXPECT(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &one, (float *)x, M, 0, (float *)y,
                                          M, 0, &zero, c4, M, M * M, BATCH + 1),
                CUBLAS_STATUS_EXECUTION_FAILED);
    SIM_OK(cudaStreamSynchronize(sa));
    BLAS_OK(cublasSetWorkspace_v2(handle, NULL, 0));
    BLAS_OK(cublasSetStream_v2(handle, NULL));
    cudaFree(c4);
    cudaFree(dptrs);
    cudaFree(x);
    cudaFree(y);
    cudaFree(z);
    cudaFree(ws);
}

/* ------------------------------------------------------------------------
 * Each operand of each GEMM form reaches the race detector as exactly its
 * own range.  m, n and k differ, as do every leading dimension and stride,
 * and each operand is alone in an allocation of exactly its bytes: a range
 * longer than its operand is refused, and one writing kernel on another
 * stream on the operand's first or on its last byte races with the call
 * only when the call's range covers that byte.
 * ---------------------------------------------------------------------- */

enum { GM = 5, GN = 7, GK = 3, GBATCH = 3 };

/* Elements a column-major batch spans: up to the last matrix's last one. */
#define SPAN(rows, cols, ld, stride, batch) (((batch)-1) * (stride) + ((cols)-1) * (ld) + (rows))

/* Each call on the handle's stream, A, B and C its three operands. */
static cublasStatus_t sgemm_nt(char *a, char *b, char *c)
{
    return cublasSgemm_v2(handle, CUBLAS_OP_N, CUBLAS_OP_T, GM, GN, GK, &one, (float *)a, 6, (float *)b, 8, &zero,
                          (float *)c, 9);
}

static cublasStatus_t gemm_ex_nn(char *a, char *b, char *c)
{
    return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, GM, GN, GK, &one, a, CUDA_R_16F, 6, b, CUDA_R_16F, 4, &zero,
                        c, CUDA_R_32F, 9, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static cublasStatus_t sgemm_strided_tn(char *a, char *b, char *c)
{
    return cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, GM, GN, GK, &one, (float *)a, 4, 20, (float *)b,
                                     5, 40, &zero, (float *)c, 11, 80, GBATCH);
}

static cublasStatus_t gemm_strided_ex_nt(char *a, char *b, char *c)
{
    return cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_T, GM, GN, GK, &one, a, CUDA_R_16BF, 7, 25, b,
                                      CUDA_R_16BF, 9, 30, &zero, c, CUDA_R_16BF, 6, 45, GBATCH, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT);
}

static cublasStatus_t gemm_batched_ex(char *a, char *b, char *c)
{
    return cublasGemmBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, GM, GN, GK, &one, (const void *const *)a, CUDA_R_32F,
                               GM, (const void *const *)b, CUDA_R_32F, GK, &zero, (void *const *)c, CUDA_R_32F, GM,
                               GBATCH, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* One row per call: its operands' exact bytes. */
static const struct {
    const char *name;
    cublasStatus_t (*call)(char *a, char *b, char *c);
    size_t bytes[3]; /* A, B, C */
} gemm_cases[] = {
    {"cublasSgemm_v2", sgemm_nt, {SPAN(GM, GK, 6, 0, 1) * 4, SPAN(GN, GK, 8, 0, 1) * 4, SPAN(GM, GN, 9, 0, 1) * 4}},
    {"cublasGemmEx", gemm_ex_nn, {SPAN(GM, GK, 6, 0, 1) * 2, SPAN(GK, GN, 4, 0, 1) * 2, SPAN(GM, GN, 9, 0, 1) * 4}},
    {"cublasSgemmStridedBatched",
     sgemm_strided_tn,
     {SPAN(GK, GM, 4, 20, GBATCH) * 4, SPAN(GK, GN, 5, 40, GBATCH) * 4, SPAN(GM, GN, 11, 80, GBATCH) * 4}},
    {"cublasGemmStridedBatchedEx",
     gemm_strided_ex_nt,
     {SPAN(GM, GK, 7, 25, GBATCH) * 2, SPAN(GN, GK, 9, 30, GBATCH) * 2, SPAN(GM, GN, 6, 45, GBATCH) * 2}},
    /* the pointer arrays only */
    {"cublasGemmBatchedEx",
     gemm_batched_ex,
     {GBATCH * sizeof(void *), GBATCH * sizeof(void *), GBATCH * sizeof(void *)}},
};

static void test_gemm_operand_ranges(void **state)
{
    (void)state;
    static const char *const names[3] = {"A", "B", "C"};
    BLAS_OK(cublasSetStream_v2(handle, sb));
    for (size_t i = 0; i < sizeof gemm_cases / sizeof gemm_cases[0]; i++) {
        char *op[3];
        for (int o = 0; o < 3; o++)
            SIM_OK(cudaMalloc((void **)&op[o], gemm_cases[i].bytes[o]));
        SIM_OK(cudaDeviceSynchronize());
        unsigned long races = cucacheSimRaceCount();
        simtest_expect_rc(gemm_cases[i].call(op[0], op[1], op[2]), CUBLAS_STATUS_SUCCESS, gemm_cases[i].name, __FILE__,
                          __LINE__);
        SIM_OK(cudaDeviceSynchronize());
        assert_int_equal(cucacheSimRaceCount(), races);
        for (int o = 0; o < 3; o++)
            for (int last = 0; last < 2; last++) {
                struct cucache_sim_access end = {op[o] + (last ? gemm_cases[i].bytes[o] - 1 : 0), 1, 1};
                CU_OK(cucacheSimLaunchTimed(sa, 2000, NULL, NULL, &end, 1));
                BLAS_OK(gemm_cases[i].call(op[0], op[1], op[2]));
                SIM_OK(cudaDeviceSynchronize());
                if (cucacheSimRaceCount() != ++races)
                    fail_msg("%s: %s's %s byte is not in the range the race detector saw", gemm_cases[i].name, names[o],
                             last ? "last" : "first");
            }
        for (int o = 0; o < 3; o++)
            cudaFree(op[o]);
    }
    BLAS_OK(cublasSetStream_v2(handle, NULL));
}

/* cuBLASLt: descriptors keep their attributes at their exact sizes; the
 * heuristic gives one algorithm within the workspace; the matmul runs. */
static void test_lt(void **state)
{
    (void)state;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
    BLAS_OK(cublasLtCreate(&lt));
    BLAS_OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t t = CUBLAS_OP_T;
    size_t written = 0;
    BLAS_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    BLAS_EXPECT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, 8), CUBLAS_STATUS_INVALID_VALUE);
    BLAS_EXPECT(cublasLtMatmulDescSetAttribute(desc, (cublasLtMatmulDescAttributes_t)9, &t, 4),
                CUBLAS_STATUS_INVALID_VALUE);
    int32_t got = 0;
    BLAS_OK(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &got, sizeof got, &written));
    assert_int_equal(got, CUBLAS_OP_T);
    assert_int_equal(written, 4);
    BLAS_OK(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, NULL, 0, &written));
    assert_int_equal(written, sizeof(void *));
    uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
    const void *bias = A;
    BLAS_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    BLAS_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));

    BLAS_OK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 32, N, 32)); /* A is k x m, transposed */
    BLAS_OK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 32, 16, 32));
    BLAS_OK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, 16, N));
    uint64_t rows = 0;
    BLAS_OK(cublasLtMatrixLayoutGetAttribute(la, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows, &written));
    assert_int_equal(rows, 32);

    BLAS_OK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t max_ws = 4096;
    BLAS_OK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws));
    cublasLtMatmulHeuristicResult_t res[4];
    int count = 0;
    BLAS_OK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 4, res, &count));
    assert_int_equal(count, 1);
    assert_int_equal(res[0].state, CUBLAS_STATUS_SUCCESS);
    assert_true(res[0].workspaceSize <= max_ws);

    unsigned long before = cucacheSimRaceCount();
    BLAS_OK(cublasLtMatmul(lt, desc, &one, A, la, B, lb, &one, C, lc, C, lc, &res[0].algo, B + 1024, max_ws, sa));
    BLAS_EXPECT(cublasLtMatmul(lt, desc, &one, A, la, B, lb, &one, C, lc, C, lc, &res[0].algo, B + 1024, 16, sa),
                CUBLAS_STATUS_INVALID_VALUE); /* less workspace than the algorithm uses */
    BLAS_EXPECT(cublasLtMatmul(lt, desc, &one, A, lb, B, lb, &one, C, lc, C, lc, NULL, NULL, 0, sa),
                CUBLAS_STATUS_INVALID_VALUE); /* A's layout does not fit D's */
    BLAS_EXPECT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 0, res, &count),
                CUBLAS_STATUS_INVALID_VALUE);
    SIM_OK(cudaStreamSynchronize(sa));
    assert_int_equal(cucacheSimRaceCount(), before);

    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    BLAS_OK(cublasLtDestroy(lt));
}

/* A cuBLAS handle is a cuBLASLt handle too, as PyTorch uses it: run first,
 * before any cublasLtCreate, so that nothing of cuBLASLt is set up yet. */
static void test_lt_on_cublas_handle(void **state)
{
    (void)state;
    cublasLtHandle_t cast = (cublasLtHandle_t)handle;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t l;
    cublasLtMatmulPreference_t pref;
    BLAS_OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F));
    BLAS_OK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, N, N, N));
    BLAS_OK(cublasLtMatmulPreferenceCreate(&pref));
    cublasLtMatmulHeuristicResult_t res;
    int count = 0;
    BLAS_OK(cublasLtMatmulAlgoGetHeuristic(cast, desc, l, l, l, l, pref, 1, &res, &count));
    assert_int_equal(count, 1);
    assert_int_equal(res.workspaceSize, 0); /* the preference allows none */
    BLAS_OK(cublasLtMatmul(cast, desc, &one, A, l, B, l, &zero, C, l, C, l, &res.algo, NULL, 0, sa));
    SIM_OK(cudaStreamSynchronize(sa));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    const cublasOperation_t n = CUBLAS_OP_N;
    BLAS_EXPECT(cublasSgemm_v2(NULL, n, n, N, N, N, &one, A, N, B, N, &zero, C, N), CUBLAS_STATUS_NOT_INITIALIZED);
    BLAS_EXPECT(cublasSgemm_v2(handle, n, n, -1, N, N, &one, A, N, B, N, &zero, C, N), CUBLAS_STATUS_INVALID_VALUE);
    BLAS_EXPECT(cublasSgemm_v2(handle, n, n, N, N, -1, &one, A, N, B, N, &zero, C, N), CUBLAS_STATUS_INVALID_VALUE);
    BLAS_EXPECT(cublasSgemm_v2(handle, n, n, N, N, N, &one, A, N - 1, B, N, &zero, C, N),
                CUBLAS_STATUS_INVALID_VALUE); /* lda < m */
    BLAS_EXPECT(cublasSgemm_v2(handle, CUBLAS_OP_T, n, N, N, 8, &one, A, 7, B, N, &zero, C, N),
                CUBLAS_STATUS_INVALID_VALUE); /* lda < k, transposed */
    BLAS_EXPECT(cublasSgemm_v2(handle, n, n, N, N, N, &one, A, N, B, N, &zero, C, N - 1),
                CUBLAS_STATUS_INVALID_VALUE); /* ldc < m */
    BLAS_EXPECT(cublasSgemm_v2(handle, (cublasOperation_t)7, n, N, N, N, &one, A, N, B, N, &zero, C, N),
                CUBLAS_STATUS_INVALID_VALUE);
    BLAS_EXPECT(cublasSgemm_v2(handle, n, n, N, N, N, NULL, A, N, B, N, &zero, C, N), CUBLAS_STATUS_INVALID_VALUE);
    BLAS_EXPECT(cublasSgemmStridedBatched(handle, n, n, N, N, N, &one, A, N, 0, B, N, 0, &zero, C, N, 0, -1),
                CUBLAS_STATUS_INVALID_VALUE);
    BLAS_EXPECT(cublasGemmEx(handle, n, n, N, N, N, &one, A, CUDA_R_32F, N, B, CUDA_R_32F, N, &zero, C, CUDA_R_32F, N,
                             CUBLAS_COMPUTE_32F, 50),
                CUBLAS_STATUS_INVALID_VALUE); /* no such algorithm */
    BLAS_EXPECT(cublasGemmEx(handle, n, n, N, N, N, &one, A, CUDA_R_32F, N, B, CUDA_R_16F, N, &zero, C, CUDA_R_32F, N,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_NOT_SUPPORTED); /* A and B of different types */
    BLAS_EXPECT(cublasSgemv_v2(handle, n, N, N, &one, A, N, B, 0, &zero, C, 1), CUBLAS_STATUS_INVALID_VALUE);
    BLAS_EXPECT(cublasStrsm_v2(handle, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_UPPER, n, CUBLAS_DIAG_UNIT, N, 2 * N, &one,
                               A, N, C, N),
                CUBLAS_STATUS_INVALID_VALUE); /* lda < n on the right */
    /* empty: nothing to do */
    BLAS_OK(cublasSgemm_v2(handle, n, n, 0, N, N, &one, A, N, B, N, &zero, C, N));
    SIM_OK(cudaDeviceSynchronize());
}

/* A host pointer as B: refused, with one line naming B. */
static float host_b[N * N];
static cublasStatus_t bad_pointer_status;
static void bad_pointer_call(void)
{
    bad_pointer_status = cublasSgemm_v2(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, A, N, host_b, N, &zero, C, N);
}

static void test_bad_pointer(void **state)
{
    (void)state;
    char out[1024];
    capture_stderr(bad_pointer_call, out, sizeof out);
    assert_int_equal(bad_pointer_status, CUBLAS_STATUS_EXECUTION_FAILED);
    char want[256];
    snprintf(want, sizeof want,
             "cucache-sim: cublasSgemm_v2: B (%p, %zu bytes) is not device memory the simulated device holds\n",
             (void *)host_b, sizeof host_b);
    assert_string_equal(out, want);
}

/* Stubs: CUBLAS_STATUS_NOT_SUPPORTED each time, one line the first. */
static int stub_status[4];
static void stub_calls(void)
{
    stub_status[0] = cublasSsyrk_v2();
    stub_status[1] = cublasSsyrk_v2();
    stub_status[2] = cublasLtMatrixTransform();
    stub_status[3] = cublasLtMatrixTransform();
}

static void test_stubs(void **state)
{
    (void)state;
    char out[1024];
    capture_stderr(stub_calls, out, sizeof out);
    for (int i = 0; i < 4; i++)
        assert_int_equal(stub_status[i], CUBLAS_STATUS_NOT_SUPPORTED);
    assert_string_equal(out, "cucache-sim: cublasSsyrk_v2 is not simulated (CUBLAS_STATUS_NOT_SUPPORTED)\n"
                             "cucache-sim: cublasLtMatrixTransform is not simulated (CUBLAS_STATUS_NOT_SUPPORTED)\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_lt_on_cublas_handle),
        SIMTEST(test_handle_settings),
        SIMTEST(test_stream_order_and_time),
        SIMTEST(test_race_planted_and_ordered),
        SIMTEST(test_types_and_batches),
        SIMTEST(test_gemm_operand_ranges),
        SIMTEST(test_lt),
        SIMTEST(test_bad_arguments),
        SIMTEST(test_bad_pointer),
        SIMTEST(test_stubs),
    };
    return cmocka_run_group_tests(tests, blas_setup, blas_teardown);
}
