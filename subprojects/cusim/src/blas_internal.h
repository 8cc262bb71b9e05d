/*
 * The simulated cuBLAS and cuBLASLt (libcublas.so.12, libcublasLt.so.12):
 * their private header.
 *
 * Neither library computes a value.  A BLAS call checks its arguments as
 * cuBLAS does, then queues one timed kernel on its stream through the
 * driver's cucacheSimLaunchTimed: the operands' device ranges (read, or
 * written) go to the race detector, and the kernel's time comes from its
 * flops and bytes (blas_kernel_us).  They reach the driver as NVIDIA's
 * libraries do, by dlopen("libcuda.so.1"), and link no runtime.
 *
 * Files:
 *   blas_device.c  shared by both libraries: the driver's entry points,
 *                  the data types' sizes and rates, the time model, the
 *                  kernel's ranges and its launch, the status names, the
 *                  stubs' answer
 *   blas_handle.c  libcublas: handles and their settings, versions
 *   blas_gemm.c    libcublas: GEMM (plain, Ex, strided and pointer-array
 *                  batches), GEMV, DOT, TRSM
 *   blas_lt.c      libcublasLt: handles, matmul descriptors, matrix
 *                  layouts, preferences, the heuristic, cublasLtMatmul
 */
#ifndef CUSIM_BLAS_INTERNAL_H
#define CUSIM_BLAS_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>

#include "blas.h"
#include "cusim/sim.h"

#define BLAS_API __attribute__((visibility("default")))

/* Ranges a kernel declares at most; an operand split into more (a strided
 * batch with gaps) is declared as one range over all its parts. */
#define BLAS_MAX_RANGES 64

/* cublasGetCudartVersion, cublasLtGetCudartVersion: the runtime the real
 * 12.4 libraries carry */
#define BLAS_CUDART_VERSION 12040

/* A cuBLASLt handle.  A cuBLAS handle begins with one, so that a
 * cublasHandle_t cast to cublasLtHandle_t is a valid cuBLASLt handle, as
 * cuBLAS documents (PyTorch passes its cuBLAS handle to cuBLASLt). */
#define BLAS_LT_MAGIC 0x634c5448u /* "cLTH" */
struct cublasLtContext {
    uint32_t magic; /* BLAS_LT_MAGIC while alive */
    CUcontext ctx;  /* current at creation: where its work runs */
};

/* ---- the driver (blas_device.c) ---------------------------------------- */

/* The context current on this thread, made current from device 0's primary
 * context when there is none (as a runtime's first call does); NULL after
 * a line saying why (no simulated driver). */
CUcontext blas_context(void);

/* ---- data types -------------------------------------------------------- */

/* Bytes of one element of t; 0 for a type the simulated libraries refuse
 * (the 4-bit ones, an unknown value). */
size_t blas_type_bytes(cudaDataType t);
/* Whether t is a complex type. */
bool blas_type_complex(cudaDataType t);
/* Whether the value of type t at p (host memory) is zero. */
bool blas_scalar_is_zero(const void *p, cudaDataType t);

/* ---- one simulated kernel ---------------------------------------------- */

typedef struct blas_kernel_s {
    const char *call; /* the API function, for messages */
    CUstream stream;  /* where it runs */
    double flops;     /* arithmetic it does */
    double bytes;     /* bytes it moves (the ranges' sum) */
    double tflops;    /* its rate: blas_tflops of its inputs' type */
    unsigned nranges; /* used entries of acc, at most BLAS_MAX_RANGES */
    struct cucache_sim_access acc[BLAS_MAX_RANGES];
    const char *what[BLAS_MAX_RANGES]; /* each range's operand name */
} blas_kernel_t;

/* The rate of a kernel whose inputs are of type t, in TFLOPS; fast: 32-bit
 * floats on the tensor cores (TF32). */
double blas_tflops(cudaDataType t, bool fast);

/* Adds operand `what`: `count` matrices of rows x cols elements of `elem`
 * bytes, column i at ptr + i * ld elements, matrix b at b * stride
 * elements.  Nothing for an empty one. */
void blas_kernel_matrix(blas_kernel_t *k, const char *what, const void *ptr, int64_t rows, int64_t cols, int64_t ld,
                        int64_t stride, int64_t count, size_t elem, bool write);
/* Adds operand `what`: a vector of n elements, inc apart. */
void blas_kernel_vector(blas_kernel_t *k, const char *what, const void *ptr, int64_t n, int64_t inc, size_t elem,
                        bool write);
/* Adds one range of bytes. */
void blas_kernel_range(blas_kernel_t *k, const char *what, const void *ptr, uint64_t bytes, bool write);

/* Queues the kernel in ctx: CUBLAS_STATUS_SUCCESS, or
 * CUBLAS_STATUS_EXECUTION_FAILED after one line naming the operand the
 * device does not hold (or the driver's error). */
cublasStatus_t blas_kernel_launch(blas_kernel_t *k, CUcontext ctx);

/* Waits for the stream (a result a host pointer receives). */
cublasStatus_t blas_stream_wait(CUstream stream);

/* ---- shared answers ---------------------------------------------------- */

const char *blas_status_name(cublasStatus_t status);
const char *blas_status_string(cublasStatus_t status);
cublasStatus_t blas_property(libraryPropertyType type, int *value);

/* The stubs' answer (stub.h): CUBLAS_STATUS_NOT_SUPPORTED, one line once. */
int sim_stub_blas(atomic_flag *once, const char *name);

void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
