/*
 * What the simulated libcublas.so.12 and libcublasLt.so.12 share (both
 * link this file): the driver's entry points, the data types, the time
 * model, one kernel's ranges and its launch, the status names.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "blas_internal.h"
#include "stub.h"

/* ------------------------------------------------------------------------
 * The driver, resolved once by dlopen + dlsym, as NVIDIA's libraries reach
 * it (a preloaded interposer sees the lookups).
 * ---------------------------------------------------------------------- */

#define BLAS_DRIVER_FUNCS(X)                                                                                           \
    X(cuInit)                                                                                                          \
    X(cuCtxGetCurrent)                                                                                                 \
    X(cuCtxSetCurrent)                                                                                                 \
    X(cuDeviceGet)                                                                                                     \
    X(cuDevicePrimaryCtxRetain)                                                                                        \
    X(cuPointerGetAttribute)                                                                                           \
    X(cuStreamSynchronize)                                                                                             \
    X(cucacheSimLaunchTimed)

static struct {
#define BLAS_FIELD(name) __typeof__(&name) name;
    BLAS_DRIVER_FUNCS(BLAS_FIELD)
#undef BLAS_FIELD
} drv;
static bool drv_ok; /* every entry point resolved */
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void drv_resolve(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        sim_log("cuBLAS: libcuda.so.1 cannot be loaded (%s)", dlerror());
        return;
    }
    bool ok = true;
#define BLAS_RESOLVE(name)                                                                                             \
    *(void **)&drv.name = dlsym(h, #name);                                                                             \
    ok = ok && drv.name;
    BLAS_DRIVER_FUNCS(BLAS_RESOLVE)
#undef BLAS_RESOLVE
    if (!ok)
        sim_log("cuBLAS: the libcuda.so.1 loaded is not the simulator's (no cucacheSimLaunchTimed)");
    drv_ok = ok;
}

/* Each library resolves its own table: a handle one library made may be
 * used by the other (a cuBLAS handle cast to a cuBLASLt one). */
static bool drv_ready(void)
{
    pthread_once(&drv_once, drv_resolve);
    return drv_ok;
}

CUcontext blas_context(void)
{
    if (!drv_ready() || drv.cuInit(0) != CUDA_SUCCESS)
        return NULL;
    CUcontext ctx = NULL;
    if (drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
        return NULL;
    if (ctx)
        return ctx;
    CUdevice dev;
    if (drv.cuDeviceGet(&dev, 0) != CUDA_SUCCESS || drv.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        drv.cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return NULL;
    return ctx;
}

/* ------------------------------------------------------------------------
 * Data types: one row each.  Rates are an H100 SXM's dense peaks: FP64 on
 * the tensor cores, FP32 without them and TF32 with them, FP16 and BF16,
 * 8-bit integers and FP8.
 * ---------------------------------------------------------------------- */

static const struct {
    cudaDataType type;
    unsigned char bytes; /* of one element */
    bool complex;        /* a pair of reals: four real products per complex one */
    float tflops;        /* the rate with these inputs */
    float tflops_fast;   /* the same allowed on the tensor cores (TF32) */
} blas_types[] = {
    {CUDA_R_16F, 2, false, 989, 989},       {CUDA_C_16F, 4, true, 989, 989},        {CUDA_R_16BF, 2, false, 989, 989},
    {CUDA_C_16BF, 4, true, 989, 989},       {CUDA_R_32F, 4, false, 67, 495},        {CUDA_C_32F, 8, true, 67, 495},
    {CUDA_R_64F, 8, false, 67, 67},         {CUDA_C_64F, 16, true, 67, 67},         {CUDA_R_8I, 1, false, 1979, 1979},
    {CUDA_C_8I, 2, true, 1979, 1979},       {CUDA_R_8U, 1, false, 1979, 1979},      {CUDA_C_8U, 2, true, 1979, 1979},
    {CUDA_R_32I, 4, false, 67, 67},         {CUDA_C_32I, 8, true, 67, 67},          {CUDA_R_32U, 4, false, 67, 67},
    {CUDA_C_32U, 8, true, 67, 67},          {CUDA_R_16I, 2, false, 67, 67},         {CUDA_C_16I, 4, true, 67, 67},
    {CUDA_R_16U, 2, false, 67, 67},         {CUDA_C_16U, 4, true, 67, 67},          {CUDA_R_64I, 8, false, 67, 67},
    {CUDA_C_64I, 16, true, 67, 67},         {CUDA_R_64U, 8, false, 67, 67},         {CUDA_C_64U, 16, true, 67, 67},
    {CUDA_R_8F_E4M3, 1, false, 1979, 1979}, {CUDA_R_8F_E5M2, 1, false, 1979, 1979},
};
#define BLAS_NTYPES (sizeof blas_types / sizeof blas_types[0])

/* An H100 SXM's memory bandwidth, bytes per microsecond. */
static const double blas_bytes_per_us = 3.35e6;

size_t blas_type_bytes(cudaDataType t)
{
    for (size_t i = 0; i < BLAS_NTYPES; i++)
        if (blas_types[i].type == t)
            return blas_types[i].bytes;
    return 0;
}

bool blas_type_complex(cudaDataType t)
{
    for (size_t i = 0; i < BLAS_NTYPES; i++)
        if (blas_types[i].type == t)
            return blas_types[i].complex;
    return false;
}

double blas_tflops(cudaDataType t, bool fast)
{
    for (size_t i = 0; i < BLAS_NTYPES; i++)
        if (blas_types[i].type == t)
            return fast ? blas_types[i].tflops_fast : blas_types[i].tflops;
    return blas_types[0].tflops;
}

bool blas_scalar_is_zero(const void *p, cudaDataType t)
{
    switch (t) {
    case CUDA_R_32F: {
        float v;
        memcpy(&v, p, sizeof v);
        return v == 0;
    }
    case CUDA_C_32F: {
        float v[2];
        memcpy(v, p, sizeof v);
        return v[0] == 0 && v[1] == 0;
    }
    case CUDA_R_64F: {
        double v;
        memcpy(&v, p, sizeof v);
        return v == 0;
    }
    case CUDA_C_64F: {
        double v[2];
        memcpy(v, p, sizeof v);
        return v[0] == 0 && v[1] == 0;
    }
    case CUDA_R_16F:
    case CUDA_R_16BF: { /* +0 and -0: every bit but the sign clear */
        uint16_t v;
        memcpy(&v, p, sizeof v);
        return (v & 0x7fffu) == 0;
    }
    default: { /* integers: every byte zero */
        size_t n = blas_type_bytes(t);
        const unsigned char *b = p;
        for (size_t i = 0; i < n; i++)
            if (b[i])
                return false;
        return n != 0;
    }
    }
}

/* ------------------------------------------------------------------------
 * One kernel: its ranges, its time, its launch.
 * ---------------------------------------------------------------------- */

void blas_kernel_range(blas_kernel_t *k, const char *what, const void *ptr, uint64_t bytes, bool write)
{
    if (!bytes || k->nranges >= BLAS_MAX_RANGES)
        return;
    k->acc[k->nranges] = (struct cucache_sim_access){ptr, (size_t)bytes, write};
    k->what[k->nranges++] = what;
    k->bytes += (double)bytes;
}

void blas_kernel_matrix(blas_kernel_t *k, const char *what, const void *ptr, int64_t rows, int64_t cols, int64_t ld,
                        int64_t stride, int64_t count, size_t elem, bool write)
{
    if (rows <= 0 || cols <= 0 || count <= 0)
        return;
    uint64_t extent = ((uint64_t)(cols - 1) * (uint64_t)ld + (uint64_t)rows) * elem; /* one matrix */
    int64_t step = stride * (int64_t)elem;                                           /* bytes, may be <= 0 */
    uint64_t span = (uint64_t)(step < 0 ? -step : step) * (uint64_t)(count - 1);
    const char *lo = (const char *)ptr - (step < 0 ? span : 0);
    if (count == 1 || (uint64_t)(step < 0 ? -step : step) <= extent || count > BLAS_MAX_RANGES / 8) {
        /* one range over them all: contiguous, overlapping, or too many parts */
        blas_kernel_range(k, what, lo, span + extent, write);
        return;
    }
    for (int64_t b = 0; b < count; b++)
        blas_kernel_range(k, what, (const char *)ptr + b * step, extent, write);
}

void blas_kernel_vector(blas_kernel_t *k, const char *what, const void *ptr, int64_t n, int64_t inc, size_t elem,
                        bool write)
{
    if (n <= 0)
        return;
    uint64_t gap = (uint64_t)(inc < 0 ? -inc : inc);
    blas_kernel_range(k, what, ptr, ((uint64_t)(n - 1) * gap + 1) * elem, write);
}

/* A roofline: the longer of its arithmetic and its memory traffic, in whole
 * microseconds, at least one (a launch). */
static unsigned kernel_us(const blas_kernel_t *k)
{
    double us = k->flops / (k->tflops * 1e6);
    double mem = k->bytes / blas_bytes_per_us;
    if (mem > us)
        us = mem;
    us = ceil(us);
    if (us < 1)
        us = 1;
    return us > 1e9 ? 1000000000u : (unsigned)us;
}

/* One line naming the first range the device does not hold. */
static bool report_bad_range(const blas_kernel_t *k)
{
    for (unsigned i = 0; i < k->nranges; i++) {
        CUdeviceptr start = 0;
        size_t size = 0;
        uintptr_t p = (uintptr_t)k->acc[i].ptr;
        if (drv.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)p) != CUDA_SUCCESS ||
            drv.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)p) != CUDA_SUCCESS ||
            p + k->acc[i].bytes > (uintptr_t)start + size) {
            sim_log("%s: %s (%p, %zu bytes) is not device memory the simulated device holds", k->call, k->what[i],
                    k->acc[i].ptr, k->acc[i].bytes);
            return true;
        }
    }
    return false;
}

cublasStatus_t blas_kernel_launch(blas_kernel_t *k, CUcontext ctx)
{
    if (!drv_ready())
        return CUBLAS_STATUS_NOT_INITIALIZED;
    CUcontext cur = NULL;
    if (drv.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && !cur)
        drv.cuCtxSetCurrent(ctx); /* a thread that has not used the device yet: the handle's */
    CUresult r = drv.cucacheSimLaunchTimed(k->stream, kernel_us(k), NULL, NULL, k->acc, k->nranges);
    if (r == CUDA_SUCCESS)
        return CUBLAS_STATUS_SUCCESS;
    if (r != CUDA_ERROR_INVALID_VALUE || !report_bad_range(k))
        sim_log("%s: the simulated kernel was refused (CUresult %d)", k->call, (int)r);
    return CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t blas_stream_wait(CUstream stream)
{
    if (!drv_ready())
        return CUBLAS_STATUS_NOT_INITIALIZED;
    return drv.cuStreamSynchronize(stream) == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

/* ------------------------------------------------------------------------
 * Status names and strings, versions, the stubs' answer.
 * ---------------------------------------------------------------------- */

static const struct {
    cublasStatus_t status;
    const char *name;
    const char *string;
} blas_statuses[] = {
    {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "success"},
    {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized"},
    {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed"},
    {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE", "an invalid value was used as an argument"},
    {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH", "the device lacks a feature the call needs"},
    {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "an access to GPU memory space failed"},
    {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "the GPU program failed to execute"},
    {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"},
    {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "the feature required is not supported"},
    {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR", "a license error"},
};

const char *blas_status_name(cublasStatus_t status)
{
    for (size_t i = 0; i < sizeof blas_statuses / sizeof blas_statuses[0]; i++)
        if (blas_statuses[i].status == status)
            return blas_statuses[i].name;
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *blas_status_string(cublasStatus_t status)
{
    for (size_t i = 0; i < sizeof blas_statuses / sizeof blas_statuses[0]; i++)
        if (blas_statuses[i].status == status)
            return blas_statuses[i].string;
    return "an unknown status";
}

cublasStatus_t blas_property(libraryPropertyType type, int *value)
{
    static const int version[] = {
        [MAJOR_VERSION] = CUBLAS_VER_MAJOR, [MINOR_VERSION] = CUBLAS_VER_MINOR, [PATCH_LEVEL] = CUBLAS_VER_PATCH};
    if (!value || (unsigned)type > PATCH_LEVEL)
        return CUBLAS_STATUS_INVALID_VALUE;
    *value = version[type];
    return CUBLAS_STATUS_SUCCESS;
}

int sim_stub_blas(atomic_flag *once, const char *name)
{
    if (!atomic_flag_test_and_set(once))
        sim_log("%s is not simulated (CUBLAS_STATUS_NOT_SUPPORTED)", name);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
