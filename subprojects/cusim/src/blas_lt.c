/*
 * libcublasLt.so.12: handles, matmul descriptors, matrix layouts,
 * preferences, the heuristic and cublasLtMatmul.  Each descriptor's
 * attributes are a table, one row per attribute (its id, its size, its
 * field): SetAttribute and GetAttribute take exactly that size, as
 * cuBLASLt does.  The heuristic offers one algorithm, which uses all the
 * workspace the preference allows; cublasLtMatmul queues one timed kernel
 * on the given stream (blas_internal.h).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "blas_internal.h"

#define LT_DESC_MAGIC 0x634c5444u    /* "cLTD" */
#define LT_LAYOUT_MAGIC 0x634c544cu  /* "cLTL" */
#define LT_PREF_MAGIC 0x634c5450u    /* "cLTP" */
#define LT_ALGO_ID 0x6375736d0001ull /* data[0] of the one algorithm: "cusm", 1 */

struct cublasLtMatmulDescOpaque_s {
    uint32_t magic;
    int32_t compute, scale, pointer_mode, transa, transb, transc, fill;
    uint32_t epilogue;
    const void *bias; /* read by BIAS epilogues, written by BGRAD ones */
    int64_t bias_stride, aux_ld, aux_stride, alpha_stride;
    const void *aux, *a_scale, *b_scale, *c_scale, *d_scale, *amax_d, *aux_scale, *aux_amax, *in_counters,
        *out_counters;
    int32_t sm_count, aux_type, bias_type, chunks_rows, chunks_cols;
    int8_t fast_accum;
};

struct cublasLtMatrixLayoutOpaque_s {
    uint32_t magic;
    uint32_t type; /* cudaDataType */
    int32_t order; /* CUBLASLT_ORDER_COL or _ROW */
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;  /* matrices, 1 or more */
    int64_t stride; /* between them, elements */
    int64_t plane;
};

struct cublasLtMatmulPreferenceOpaque_s {
    uint32_t magic;
    uint32_t search, reduction, align_a, align_b, align_c, align_d;
    uint64_t max_workspace; /* bytes the algorithm may use */
    float max_waves;
    uint64_t impl;
};

/* ------------------------------------------------------------------------
 * Attributes: one row each.
 * ---------------------------------------------------------------------- */

typedef struct lt_attr_s {
    int id;
    size_t size;   /* exact bytes of its value */
    size_t offset; /* of its field */
} lt_attr_t;

#define LT_DESC(id, field)                                                                                             \
    {                                                                                                                  \
        id, sizeof(((struct cublasLtMatmulDescOpaque_s *)0)->field),                                                   \
            offsetof(struct cublasLtMatmulDescOpaque_s, field)                                                         \
    }
static const lt_attr_t desc_attrs[] = {
    LT_DESC(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, compute),
    LT_DESC(CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale),
    LT_DESC(CUBLASLT_MATMUL_DESC_POINTER_MODE, pointer_mode),
    LT_DESC(CUBLASLT_MATMUL_DESC_TRANSA, transa),
    LT_DESC(CUBLASLT_MATMUL_DESC_TRANSB, transb),
    LT_DESC(CUBLASLT_MATMUL_DESC_TRANSC, transc),
    LT_DESC(CUBLASLT_MATMUL_DESC_FILL_MODE, fill),
    LT_DESC(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue),
    LT_DESC(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias),
    LT_DESC(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, bias_stride),
    LT_DESC(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux),
    LT_DESC(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld),
    LT_DESC(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, aux_stride),
    LT_DESC(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, alpha_stride),
    LT_DESC(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, sm_count),
    LT_DESC(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale),
    LT_DESC(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale),
    LT_DESC(CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, c_scale),
    LT_DESC(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, d_scale),
    LT_DESC(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax_d),
    LT_DESC(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, aux_type),
    LT_DESC(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, aux_scale),
    LT_DESC(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, aux_amax),
    LT_DESC(CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum),
    LT_DESC(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type),
    LT_DESC(CUBLASLT_MATMUL_DESC_ATOMIC_SYNC_NUM_CHUNKS_D_ROWS, chunks_rows),
    LT_DESC(CUBLASLT_MATMUL_DESC_ATOMIC_SYNC_NUM_CHUNKS_D_COLS, chunks_cols),
    LT_DESC(CUBLASLT_MATMUL_DESC_ATOMIC_SYNC_IN_COUNTERS_POINTER, in_counters),
    LT_DESC(CUBLASLT_MATMUL_DESC_ATOMIC_SYNC_OUT_COUNTERS_POINTER, out_counters),
};

#define LT_LAYOUT(id, field)                                                                                           \
    {                                                                                                                  \
        id, sizeof(((struct cublasLtMatrixLayoutOpaque_s *)0)->field),                                                 \
            offsetof(struct cublasLtMatrixLayoutOpaque_s, field)                                                       \
    }
static const lt_attr_t layout_attrs[] = {
    LT_LAYOUT(CUBLASLT_MATRIX_LAYOUT_TYPE, type),
    LT_LAYOUT(CUBLASLT_MATRIX_LAYOUT_ORDER, order),
    LT_LAYOUT(CUBLASLT_MATRIX_LAYOUT_ROWS, rows),
    LT_LAYOUT(CUBLASLT_MATRIX_LAYOUT_COLS, cols),
    LT_LAYOUT(CUBLASLT_MATRIX_LAYOUT_LD, ld),
    LT_LAYOUT(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch),
    LT_LAYOUT(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride),
    LT_LAYOUT(CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, plane),
};

#define LT_PREF(id, field)                                                                                             \
    {                                                                                                                  \
        id, sizeof(((struct cublasLtMatmulPreferenceOpaque_s *)0)->field),                                             \
            offsetof(struct cublasLtMatmulPreferenceOpaque_s, field)                                                   \
    }
static const lt_attr_t pref_attrs[] = {
    LT_PREF(CUBLASLT_MATMUL_PREF_SEARCH_MODE, search),
    LT_PREF(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, max_workspace),
    LT_PREF(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reduction),
    LT_PREF(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a),
    LT_PREF(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b),
    LT_PREF(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c),
    LT_PREF(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d),
    LT_PREF(CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, max_waves),
    LT_PREF(CUBLASLT_MATMUL_PREF_IMPL_MASK, impl),
};

#define LT_COUNT(t) (sizeof t / sizeof t[0])

static const lt_attr_t *attr_find(const lt_attr_t *t, size_t n, int id)
{
    for (size_t i = 0; i < n; i++)
        if (t[i].id == id)
            return &t[i];
    return NULL;
}

static cublasStatus_t attr_set(void *obj, const lt_attr_t *t, size_t n, int id, const void *buf, size_t size)
{
    const lt_attr_t *a = attr_find(t, n, id);
    if (!a || !buf || size != a->size)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy((char *)obj + a->offset, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

/* size 0 with sizeWritten: the size only */
static cublasStatus_t attr_get(const void *obj, const lt_attr_t *t, size_t n, int id, void *buf, size_t size,
                               size_t *written)
{
    const lt_attr_t *a = attr_find(t, n, id);
    if (!a || (size == 0 && !written) || (size != 0 && (!buf || size != a->size)))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (written)
        *written = a->size;
    if (size)
        memcpy(buf, (const char *)obj + a->offset, size);
    return CUBLAS_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Handles, versions
 * ---------------------------------------------------------------------- */

BLAS_API cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle)
{
    if (!lightHandle)
        return CUBLAS_STATUS_INVALID_VALUE;
    CUcontext ctx = blas_context();
    if (!ctx)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    struct cublasLtContext *h = calloc(1, sizeof *h);
    if (!h)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *h = (struct cublasLtContext){BLAS_LT_MAGIC, ctx};
    *lightHandle = h;
    return CUBLAS_STATUS_SUCCESS;
}

static struct cublasLtContext *lt_handle(cublasLtHandle_t h)
{
    return h && h->magic == BLAS_LT_MAGIC ? h : NULL;
}

BLAS_API cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle)
{
    struct cublasLtContext *h = lt_handle(lightHandle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API const char *cublasLtGetStatusName(cublasStatus_t status)
{
    return blas_status_name(status);
}

BLAS_API const char *cublasLtGetStatusString(cublasStatus_t status)
{
    return blas_status_string(status);
}

BLAS_API size_t cublasLtGetVersion(void)
{
    return CUBLAS_VERSION;
}

BLAS_API size_t cublasLtGetCudartVersion(void)
{
    return BLAS_CUDART_VERSION;
}

BLAS_API cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int *value)
{
    return blas_property(type, value);
}

/* ------------------------------------------------------------------------
 * Descriptors: three kinds, one row each; every object opens with its
 * kind's magic.
 * ---------------------------------------------------------------------- */

typedef struct lt_kind_s {
    uint32_t magic;         /* while alive; 0 once destroyed */
    size_t size;            /* of its object */
    const lt_attr_t *attrs; /* its attribute table */
    size_t count;           /* rows in attrs */
} lt_kind_t;

typedef enum { LT_KIND_LAYOUT, LT_KIND_DESC, LT_KIND_PREF } lt_kind_id_t;

static const lt_kind_t lt_kinds[] = {
    [LT_KIND_LAYOUT] = {LT_LAYOUT_MAGIC, sizeof(struct cublasLtMatrixLayoutOpaque_s), layout_attrs,
                        LT_COUNT(layout_attrs)},
    [LT_KIND_DESC] = {LT_DESC_MAGIC, sizeof(struct cublasLtMatmulDescOpaque_s), desc_attrs, LT_COUNT(desc_attrs)},
    [LT_KIND_PREF] = {LT_PREF_MAGIC, sizeof(struct cublasLtMatmulPreferenceOpaque_s), pref_attrs, LT_COUNT(pref_attrs)},
};

_Static_assert(offsetof(struct cublasLtMatrixLayoutOpaque_s, magic) == 0 &&
                   offsetof(struct cublasLtMatmulDescOpaque_s, magic) == 0 &&
                   offsetof(struct cublasLtMatmulPreferenceOpaque_s, magic) == 0,
               "every descriptor opens with its magic");

/* The live object of that kind, or NULL (a null, destroyed or other one). */
static void *lt_object(const void *obj, lt_kind_id_t kind)
{
    return obj && *(const uint32_t *)obj == lt_kinds[kind].magic ? (void *)obj : NULL;
}

/* A new object holding init, with its kind's magic. */
static cublasStatus_t lt_create(lt_kind_id_t kind, const void *init, void **out)
{
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    void *obj = calloc(1, lt_kinds[kind].size);
    if (!obj)
        return CUBLAS_STATUS_ALLOC_FAILED;
    memcpy(obj, init, lt_kinds[kind].size);
    *(uint32_t *)obj = lt_kinds[kind].magic;
    *out = obj;
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t lt_destroy(void *obj, lt_kind_id_t kind)
{
    if (!lt_object(obj, kind))
        return CUBLAS_STATUS_INVALID_VALUE;
    *(uint32_t *)obj = 0;
    free(obj);
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t lt_set(void *obj, lt_kind_id_t kind, int attr, const void *buf, size_t size)
{
    if (!lt_object(obj, kind))
        return CUBLAS_STATUS_INVALID_VALUE;
    return attr_set(obj, lt_kinds[kind].attrs, lt_kinds[kind].count, attr, buf, size);
}

static cublasStatus_t lt_get(const void *obj, lt_kind_id_t kind, int attr, void *buf, size_t size, size_t *written)
{
    if (!lt_object(obj, kind))
        return CUBLAS_STATUS_INVALID_VALUE;
    return attr_get(obj, lt_kinds[kind].attrs, lt_kinds[kind].count, attr, buf, size, written);
}

static struct cublasLtMatrixLayoutOpaque_s *lt_layout(cublasLtMatrixLayout_t l)
{
    return lt_object(l, LT_KIND_LAYOUT);
}

static struct cublasLtMatmulDescOpaque_s *lt_desc(cublasLtMatmulDesc_t d)
{
    return lt_object(d, LT_KIND_DESC);
}

static struct cublasLtMatmulPreferenceOpaque_s *lt_pref(cublasLtMatmulPreference_t p)
{
    return lt_object(p, LT_KIND_PREF);
}

BLAS_API cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows,
                                                   uint64_t cols, int64_t ld)
{
    struct cublasLtMatrixLayoutOpaque_s init = {
        .type = type, .order = CUBLASLT_ORDER_COL, .rows = rows, .cols = cols, .ld = ld, .batch = 1};
    return lt_create(LT_KIND_LAYOUT, &init, (void **)matLayout);
}

BLAS_API cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout)
{
    return lt_destroy(matLayout, LT_KIND_LAYOUT);
}

BLAS_API cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                         cublasLtMatrixLayoutAttribute_t attr, const void *buf,
                                                         size_t sizeInBytes)
{
    return lt_set(matLayout, LT_KIND_LAYOUT, attr, buf, sizeInBytes);
}

BLAS_API cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout,
                                                         cublasLtMatrixLayoutAttribute_t attr, void *buf,
                                                         size_t sizeInBytes, size_t *sizeWritten)
{
    return lt_get(matLayout, LT_KIND_LAYOUT, attr, buf, sizeInBytes, sizeWritten);
}

BLAS_API cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                                 cudaDataType_t scaleType)
{
    struct cublasLtMatmulDescOpaque_s init = {.compute = computeType,
                                              .scale = scaleType,
                                              .pointer_mode = CUBLAS_POINTER_MODE_HOST,
                                              .transa = CUBLAS_OP_N,
                                              .transb = CUBLAS_OP_N,
                                              .transc = CUBLAS_OP_N,
                                              .fill = CUBLAS_FILL_MODE_FULL,
                                              .epilogue = CUBLASLT_EPILOGUE_DEFAULT,
                                              .bias_type = -1};
    return lt_create(LT_KIND_DESC, &init, (void **)matmulDesc);
}

BLAS_API cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc)
{
    return lt_destroy(matmulDesc, LT_KIND_DESC);
}

BLAS_API cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                       cublasLtMatmulDescAttributes_t attr, const void *buf,
                                                       size_t sizeInBytes)
{
    return lt_set(matmulDesc, LT_KIND_DESC, attr, buf, sizeInBytes);
}

BLAS_API cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                       cublasLtMatmulDescAttributes_t attr, void *buf,
                                                       size_t sizeInBytes, size_t *sizeWritten)
{
    return lt_get(matmulDesc, LT_KIND_DESC, attr, buf, sizeInBytes, sizeWritten);
}

BLAS_API cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    struct cublasLtMatmulPreferenceOpaque_s init = {
        .reduction = 0x7, .align_a = 256, .align_b = 256, .align_c = 256, .align_d = 256, .impl = UINT64_MAX};
    return lt_create(LT_KIND_PREF, &init, (void **)pref);
}

BLAS_API cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    return lt_destroy(pref, LT_KIND_PREF);
}

BLAS_API cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                             cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                             size_t sizeInBytes)
{
    return lt_set(pref, LT_KIND_PREF, attr, buf, sizeInBytes);
}

BLAS_API cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                             cublasLtMatmulPreferenceAttributes_t attr, void *buf,
                                                             size_t sizeInBytes, size_t *sizeWritten)
{
    return lt_get(pref, LT_KIND_PREF, attr, buf, sizeInBytes, sizeWritten);
}

/* ------------------------------------------------------------------------
 * The problem, the heuristic, the matmul
 * ---------------------------------------------------------------------- */

/* A matmul's shape, checked: D (m x n) = op(A) (m x k) op(B) (k x n) + C. */
typedef struct lt_problem_s {
    const struct cublasLtMatmulDescOpaque_s *desc;
    const struct cublasLtMatrixLayoutOpaque_s *a, *b, *c, *d;
    int64_t m, n, k, batch;
} lt_problem_t;

/* A layout's leading dimension fits its order. */
static bool layout_ok(const struct cublasLtMatrixLayoutOpaque_s *l)
{
    uint64_t lead = l->order == CUBLASLT_ORDER_ROW ? l->cols : l->rows;
    return l->ld >= 1 && (uint64_t)l->ld >= lead && l->batch >= 1 && blas_type_bytes((cudaDataType)l->type);
}

static cublasStatus_t lt_problem(lt_problem_t *p, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A,
                                 cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D)
{
    p->desc = lt_desc(desc);
    p->a = lt_layout(A), p->b = lt_layout(B), p->c = lt_layout(C), p->d = lt_layout(D);
    if (!p->desc || !p->a || !p->b || !p->c || !p->d)
        return CUBLAS_STATUS_INVALID_VALUE;
    const struct cublasLtMatrixLayoutOpaque_s *l[] = {p->a, p->b, p->c, p->d};
    for (int i = 0; i < 4; i++) {
        if (l[i]->order != CUBLASLT_ORDER_COL && l[i]->order != CUBLASLT_ORDER_ROW)
            return CUBLAS_STATUS_NOT_SUPPORTED;
        if (!layout_ok(l[i]))
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    bool ta = p->desc->transa != CUBLAS_OP_N, tb = p->desc->transb != CUBLAS_OP_N;
    p->m = (int64_t)p->d->rows;
    p->n = (int64_t)p->d->cols;
    p->k = (int64_t)(ta ? p->a->rows : p->a->cols);
    p->batch = p->d->batch;
    if ((int64_t)(ta ? p->a->cols : p->a->rows) != p->m || (int64_t)(tb ? p->b->cols : p->b->rows) != p->k ||
        (int64_t)(tb ? p->b->rows : p->b->cols) != p->n || p->c->rows != p->d->rows || p->c->cols != p->d->cols ||
        p->a->batch != p->batch || p->b->batch != p->batch || p->c->batch != p->batch)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (p->a->type != p->b->type)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                                       cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                       cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                       cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                                       cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                                       int *returnAlgoCount)
{
    if (!lt_handle(lightHandle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    const struct cublasLtMatmulPreferenceOpaque_s *pref = lt_pref(preference);
    if (!pref || requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returnAlgoCount = 0;
    lt_problem_t p;
    cublasStatus_t s = lt_problem(&p, operationDesc, Adesc, Bdesc, Cdesc, Ddesc);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    cublasLtMatmulHeuristicResult_t *r = &heuristicResultsArray[0];
    memset(r, 0, sizeof *r);
    r->algo.data[0] = LT_ALGO_ID;
    r->algo.data[1] = pref->max_workspace; /* the workspace it uses */
    r->workspaceSize = pref->max_workspace;
    r->state = CUBLAS_STATUS_SUCCESS;
    r->wavesCount = 1.0f;
    *returnAlgoCount = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* The bias an epilogue reads (BIAS) or writes (BGRADA: m, BGRADB: n). */
static void kernel_bias(blas_kernel_t *k, const lt_problem_t *p)
{
    uint32_t e = p->desc->epilogue;
    cudaDataType t = p->desc->bias_type >= 0 ? (cudaDataType)p->desc->bias_type : (cudaDataType)p->d->type;
    size_t bytes = blas_type_bytes(t);
    int64_t count = p->desc->bias_stride ? p->batch : 1;
    if (e & CUBLASLT_EPILOGUE_BGRADB)
        blas_kernel_matrix(k, "bias", p->desc->bias, p->n, 1, p->n, p->desc->bias_stride, count, bytes, true);
    else if (e & (CUBLASLT_EPILOGUE_BGRADA | 16u)) /* BGRADA, DRELU_BGRAD, DGELU_BGRAD */
        blas_kernel_matrix(k, "bias", p->desc->bias, p->m, 1, p->m, p->desc->bias_stride, count, bytes, true);
    else if (e & CUBLASLT_EPILOGUE_BIAS)
        blas_kernel_matrix(k, "bias", p->desc->bias, p->m, 1, p->m, p->desc->bias_stride, count, bytes, false);
}

/* A layout's operand: its rows and columns in memory order. */
static void kernel_layout(blas_kernel_t *k, const char *what, const void *ptr,
                          const struct cublasLtMatrixLayoutOpaque_s *l, bool write)
{
    bool row = l->order == CUBLASLT_ORDER_ROW;
    blas_kernel_matrix(k, what, ptr, (int64_t)(row ? l->cols : l->rows), (int64_t)(row ? l->rows : l->cols), l->ld,
                       l->stride, l->batch, blas_type_bytes((cudaDataType)l->type), write);
}

BLAS_API cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                       const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                                       cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                                       cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                                       const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspaceSizeInBytes,
                                       cudaStream_t stream)
{
    struct cublasLtContext *h = lt_handle(lightHandle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    lt_problem_t p;
    cublasStatus_t s = lt_problem(&p, computeDesc, Adesc, Bdesc, Cdesc, Ddesc);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    if (!alpha || !beta || (algo && algo->data[0] != LT_ALGO_ID))
        return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t need = algo ? algo->data[1] : workspaceSizeInBytes; /* no algorithm: the one that takes what is given */
    if (workspaceSizeInBytes < need || (need && !workspace))
        return CUBLAS_STATUS_INVALID_VALUE;
    cudaDataType scale = (cudaDataType)p.desc->scale;
    if (!blas_type_bytes(scale))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (p.m == 0 || p.n == 0)
        return CUBLAS_STATUS_SUCCESS;

    blas_kernel_t k = {.call = __func__, .stream = (CUstream)stream};
    bool device = p.desc->pointer_mode != CUBLAS_POINTER_MODE_HOST;
    if (device) {
        blas_kernel_range(&k, "alpha", alpha, blas_type_bytes(scale), false);
        blas_kernel_range(&k, "beta", beta, blas_type_bytes(scale), false);
    }
    if (p.k > 0) {
        kernel_layout(&k, "A", A, p.a, false);
        kernel_layout(&k, "B", B, p.b, false);
    }
    if (C != D && (device || !blas_scalar_is_zero(beta, scale)))
        kernel_layout(&k, "C", C, p.c, false);
    kernel_layout(&k, "D", D, p.d, true); /* C in place when C == D: read, which written covers */
    kernel_bias(&k, &p);
    if (need)
        blas_kernel_range(&k, "the workspace", workspace, need, true);
    bool fast = p.desc->compute == CUBLAS_COMPUTE_32F_FAST_TF32 || p.desc->compute == CUBLAS_COMPUTE_32F_FAST_16F ||
                p.desc->compute == CUBLAS_COMPUTE_32F_FAST_16BF;
    k.flops = 2.0 * (double)p.m * (double)p.n * (double)p.k * (double)p.batch *
              (blas_type_complex((cudaDataType)p.a->type) ? 4 : 1);
    k.tflops = blas_tflops((cudaDataType)p.a->type, fast);
    return blas_kernel_launch(&k, h->ctx);
}
