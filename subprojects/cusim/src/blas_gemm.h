/*
 * libcublas.so.12's handle (blas_handle.c) and its GEMM core (blas_gemm.c).
 */
#ifndef CUSIM_BLAS_GEMM_H
#define CUSIM_BLAS_GEMM_H

#include "blas_internal.h"

/* A cuBLAS handle: a cuBLASLt handle first (blas_internal.h). */
typedef struct cublasContext {
    struct cublasLtContext lt;        /* lt.ctx: current at cublasCreate_v2, where its work runs */
    uint32_t magic;                   /* BLAS_HANDLE_MAGIC while alive, 0 once destroyed */
    cudaStream_t stream;              /* cublasSetStream_v2; 0: the legacy default stream */
    void *workspace;                  /* cublasSetWorkspace_v2, 256-byte aligned; NULL: none */
    size_t workspace_bytes;           /* 0 when workspace is NULL */
    cublasMath_t math;                /* cublasSetMathMode */
    cublasPointerMode_t pointer_mode; /* where alpha, beta and results are */
    cublasAtomicsMode_t atomics;      /* accepted, no effect */
    int sm_count_target;              /* accepted, no effect; 0: all */
} blas_handle_t;

/* The live handle h, or NULL (a null or destroyed one). */
blas_handle_t *blas_handle(cublasHandle_t h);

#endif
