/*
 * Driver API of the simulated device: copies and memsets, linear and
 * pitched (2D).  Every one is one operation on a stream: `height` rows of
 * `bytes`, `dpitch`/`spitch` apart (a linear one is a single row).
 *
 * Ranges.  A device range must lie inside one live allocation; the race
 * detector checks a pitched operation as the whole span from its first
 * row's start to its last row's end (the bytes between rows included: a
 * pitched operation that only touches other columns of the same rows is
 * reported, which no test relies on).
 */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

/* ------------------------------------------------------------------------
 * Classifying ranges
 * ---------------------------------------------------------------------- */

/* Classifies [p, p+n): device memory (range checked), or host memory.  A
 * pointer inside a device's region that is not a live allocation, or a
 * range that leaves its allocation, is an error; so is a range of the
 * virtual memory API that is not mapped, or not accessible (for writing
 * when `write`) by any device (stream_access then checks the device of the
 * stream that does the work). */
static CUresult classify(uintptr_t p, size_t n, bool write, bool *device, bool *tracked)
{
    *device = false;
    *tracked = false;
    if (sim_vmm_region(p)) {
        if (!sim_vmm_range_ok(p, n, write, -1))
            return CUDA_ERROR_INVALID_VALUE;
        *device = true;
        *tracked = true;
        return CUDA_SUCCESS;
    }
    if (sim_device_of(p)) {
        if (!sim_range_ok(p, n, NULL))
            return CUDA_ERROR_INVALID_VALUE;
        *device = true;
        *tracked = true;
        return CUDA_SUCCESS;
    }
    sim_alloc_t *a = sim_alloc_find(p);
    if (a && a->kind == SIM_ALLOC_MANAGED) {
        if (!sim_range_ok(p, n, NULL))
            return CUDA_ERROR_INVALID_VALUE;
        *tracked = true;
    }
    return CUDA_SUCCESS;
}

/* Memory of the virtual memory API must be accessible by the device whose
 * stream does the work (cuMemSetAccess is per device). */
static CUresult stream_access(uintptr_t p, size_t n, bool write, const struct CUstream_st *s)
{
    return !sim_vmm_region(p) || sim_vmm_range_ok(p, n, write, s->ctx->dev->ordinal) ? CUDA_SUCCESS
                                                                                     : CUDA_ERROR_INVALID_VALUE;
}

/* The bytes from a pitched region's first row to the end of its last:
 * (height - 1) * pitch + width, or SIZE_MAX when that overflows. */
static size_t span_of(size_t width, size_t height, size_t pitch)
{
    if (height == 0 || width == 0)
        return 0;
    size_t rows = height - 1;
    if (rows && pitch > (SIZE_MAX - width) / rows)
        return SIZE_MAX;
    return rows * pitch + width;
}

static void op_range(sim_op_t *op, uintptr_t lo, size_t n, bool write)
{
    op->ranges[op->nranges++] = (sim_range_t){lo, lo + n, write, lo};
}

/* ------------------------------------------------------------------------
 * Copies
 * ---------------------------------------------------------------------- */

/* One copy of `height` rows of `width` bytes.  `sync` gives cuMemcpy's
 * host-blocking behaviour (device-to-device copies do not block). */
typedef struct copy_s {
    uintptr_t dst, src;
    size_t dpitch, spitch, width, height;
    CUstream stream;
    bool ptds, sync;
    const char *what;
} copy_t;

static CUresult copy(const copy_t *c)
{
    DRV_ENTER(ctx);
    if (c->width == 0 || c->height == 0)
        return drv_leave(CUDA_SUCCESS);
    if (!c->dst || !c->src || (c->height > 1 && (c->dpitch < c->width || c->spitch < c->width)))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    size_t dspan = span_of(c->width, c->height, c->dpitch), sspan = span_of(c->width, c->height, c->spitch);
    if (dspan == SIZE_MAX || sspan == SIZE_MAX)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    bool ddev, dtr, sdev, str;
    CUresult r = classify(c->dst, dspan, true, &ddev, &dtr);
    if (r == CUDA_SUCCESS)
        r = classify(c->src, sspan, false, &sdev, &str);
    struct CUstream_st *s = NULL;
    if (r == CUDA_SUCCESS)
        r = sim_stream_resolve(ctx, c->stream, c->ptds, &s);
    if (r == CUDA_SUCCESS)
        r = stream_access(c->dst, dspan, true, s);
    if (r == CUDA_SUCCESS)
        r = stream_access(c->src, sspan, false, s);
    if (r == CUDA_SUCCESS && c->sync && s->capture)
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_op_t *op = sim_op_new(SIM_OP_COPY, c->what);
    op->dst = (void *)c->dst;
    op->src = (const void *)c->src;
    op->bytes = c->width;
    op->height = c->height;
    op->dpitch = c->dpitch;
    op->spitch = c->spitch;
    if (dtr)
        op_range(op, c->dst, dspan, true);
    if (str)
        op_range(op, c->src, sspan, false);
    bool pageable_src = !sdev && !str && !sim_alloc_find(c->src);
    if (pageable_src && !c->sync) {
        /* CUDA stages a pageable source before returning (rows packed). */
        uint8_t *st = sim_xmalloc(c->width * c->height);
        for (size_t row = 0; row < c->height; row++)
            memcpy(st + row * c->width, (const uint8_t *)c->src + row * c->spitch, c->width);
        op->staging = st;
        op->src = st;
        op->spitch = c->width;
    }
    r = sim_enqueue(s, op);
    if (r == CUDA_SUCCESS && c->sync && !(ddev && sdev))
        r = sim_stream_wait_idle(s);
    return drv_leave(r);
}

/* A linear copy of n bytes. */
static CUresult copy1(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool ptds, bool sync, const char *what)
{
    copy_t c = {dst, src, n, n, n, 1, h, ptds, sync, what};
    return copy(&c);
}

static CUresult copy_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool ptds)
{
    return copy1(dst, src, n, h, ptds, false, "memcpy (async)");
}

static CUresult copy_sync(CUdeviceptr dst, CUdeviceptr src, size_t n, bool ptds)
{
    return copy1(dst, src, n, NULL, ptds, true, "memcpy");
}

static CUresult htod_sync(CUdeviceptr dst, const void *src, size_t n, bool ptds)
{
    return copy1(dst, (CUdeviceptr)(uintptr_t)src, n, NULL, ptds, true, "memcpy HtoD");
}

static CUresult dtoh_sync(void *dst, CUdeviceptr src, size_t n, bool ptds)
{
    return copy1((CUdeviceptr)(uintptr_t)dst, src, n, NULL, ptds, true, "memcpy DtoH");
}

static CUresult dtod_sync(CUdeviceptr dst, CUdeviceptr src, size_t n, bool ptds)
{
    return copy1(dst, src, n, NULL, ptds, true, "memcpy DtoD");
}

static CUresult htod_async(CUdeviceptr dst, const void *src, size_t n, CUstream h, bool ptds)
{
    return copy1(dst, (CUdeviceptr)(uintptr_t)src, n, h, ptds, false, "memcpy HtoD (async)");
}

static CUresult dtoh_async(void *dst, CUdeviceptr src, size_t n, CUstream h, bool ptds)
{
    return copy1((CUdeviceptr)(uintptr_t)dst, src, n, h, ptds, false, "memcpy DtoH (async)");
}

static CUresult dtod_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool ptds)
{
    return copy1(dst, src, n, h, ptds, false, "memcpy DtoD (async)");
}

DRV_PTDS(cuMemcpy, copy_sync, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), (dst, src, ByteCount))
DRV_PTSZ(cuMemcpyAsync, copy_async, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream),
         (dst, src, ByteCount, hStream))
DRV_PTDS(cuMemcpyHtoD_v2, htod_sync, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),
         (dstDevice, srcHost, ByteCount))
DRV_PTDS(cuMemcpyDtoH_v2, dtoh_sync, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),
         (dstHost, srcDevice, ByteCount))
DRV_PTDS(cuMemcpyDtoD_v2, dtod_sync, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),
         (dstDevice, srcDevice, ByteCount))
DRV_PTSZ(cuMemcpyHtoDAsync_v2, htod_async,
         (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
         (dstDevice, srcHost, ByteCount, hStream))
DRV_PTSZ(cuMemcpyDtoHAsync_v2, dtoh_async, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
         (dstHost, srcDevice, ByteCount, hStream))
DRV_PTSZ(cuMemcpyDtoDAsync_v2, dtod_async,
         (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
         (dstDevice, srcDevice, ByteCount, hStream))

/* The address one side of a CUDA_MEMCPY2D names: host, device or unified
 * (UVA: either), at (x, y).  Arrays are not simulated. */
static CUresult side(CUmemorytype type, const void *host, CUdeviceptr dev, CUarray array, size_t x, size_t y,
                     size_t pitch, uintptr_t *out)
{
    uintptr_t base;
    switch ((int)type) {
    case CU_MEMORYTYPE_HOST:
        base = (uintptr_t)host;
        break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
        base = (uintptr_t)dev;
        break;
    case CU_MEMORYTYPE_ARRAY:
        (void)array;
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!base || (y && pitch > (UINTPTR_MAX - base - x) / y))
        return CUDA_ERROR_INVALID_VALUE;
    *out = base + y * pitch + x;
    return CUDA_SUCCESS;
}

static CUresult copy2d(const CUDA_MEMCPY2D *p, CUstream h, bool ptds, bool sync, const char *what)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    copy_t c = {0, 0, p->dstPitch, p->srcPitch, p->WidthInBytes, p->Height, h, ptds, sync, what};
    CUresult r = side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY, p->dstPitch,
                      &c.dst);
    if (r == CUDA_SUCCESS)
        r = side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY, p->srcPitch,
                 &c.src);
    return r == CUDA_SUCCESS ? copy(&c) : r;
}

static CUresult copy2d_sync(const CUDA_MEMCPY2D *p, bool ptds)
{
    return copy2d(p, NULL, ptds, true, "memcpy 2D");
}

static CUresult copy2d_async(const CUDA_MEMCPY2D *p, CUstream h, bool ptds)
{
    return copy2d(p, h, ptds, false, "memcpy 2D (async)");
}

DRV_PTDS(cuMemcpy2D_v2, copy2d_sync, (const CUDA_MEMCPY2D *pCopy), (pCopy))
DRV_PTDS(cuMemcpy2DUnaligned_v2, copy2d_sync, (const CUDA_MEMCPY2D *pCopy), (pCopy))
DRV_PTSZ(cuMemcpy2DAsync_v2, copy2d_async, (const CUDA_MEMCPY2D *pCopy, CUstream hStream), (pCopy, hStream))

/* ------------------------------------------------------------------------
 * Memsets (they block the host only for pinned or managed memory)
 * ---------------------------------------------------------------------- */

/* Memsets reach device memory, managed memory, and pinned or registered
 * host memory through its device pointer (mapped memory): all checked
 * against their allocation, and tracked by the race detector.  *host: the
 * host sees the bytes (managed or pinned memory), so a synchronous memset
 * blocks until they are written (CUDA's API synchronisation rules). */
static CUresult fill_target(uintptr_t dst, size_t span, bool *host)
{
    bool dev, tracked;
    CUresult r = classify(dst, span, true, &dev, &tracked);
    *host = !dev;
    if (r != CUDA_SUCCESS || tracked)
        return r;
    sim_alloc_t *a = sim_alloc_live(dst);
    if (a && (a->kind == SIM_ALLOC_HOST || a->kind == SIM_ALLOC_REGISTERED) && sim_range_ok(dst, span, NULL))
        return CUDA_SUCCESS;
    return CUDA_ERROR_INVALID_VALUE;
}

/* Fills `height` rows of `n` elements of `elem` bytes, `pitch` bytes apart.
 * sync: a synchronous entry point (it blocks for host-visible memory). */
static CUresult fill(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elem, size_t n, size_t height,
                     CUstream h, bool ptds, bool sync)
{
    DRV_ENTER(ctx);
    if (n == 0 || height == 0)
        return drv_leave(CUDA_SUCCESS);
    if (n > SIZE_MAX / elem || dst % elem || (height > 1 && (pitch < n * elem || pitch % elem)))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    size_t width = n * elem, span = span_of(width, height, pitch);
    bool host = false;
    CUresult r = span == SIZE_MAX ? CUDA_ERROR_INVALID_VALUE : fill_target(dst, span, &host);
    struct CUstream_st *s = NULL;
    if (r == CUDA_SUCCESS)
        r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS)
        r = stream_access(dst, span, true, s);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_op_t *op = sim_op_new(SIM_OP_SET, height > 1 ? "memset 2D" : "memset");
    op->dst = (void *)(uintptr_t)dst;
    op->bytes = width;
    op->height = height;
    op->dpitch = pitch;
    op->elem = elem;
    op->value = value;
    op_range(op, dst, span, true);
    r = sim_enqueue(s, op);
    if (r == CUDA_SUCCESS && sync && host)
        r = sim_stream_wait_idle(s);
    return drv_leave(r);
}

static CUresult set8(CUdeviceptr dst, unsigned char uc, size_t n, bool ptds)
{
    return fill(dst, n, uc, 1, n, 1, NULL, ptds, true);
}

static CUresult set16(CUdeviceptr dst, unsigned short us, size_t n, bool ptds)
{
    return fill(dst, 0, us, 2, n, 1, NULL, ptds, true);
}

static CUresult set32(CUdeviceptr dst, unsigned int ui, size_t n, bool ptds)
{
    return fill(dst, 0, ui, 4, n, 1, NULL, ptds, true);
}

static CUresult set8_async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream h, bool ptds)
{
    return fill(dst, n, uc, 1, n, 1, h, ptds, false);
}

static CUresult set16_async(CUdeviceptr dst, unsigned short us, size_t n, CUstream h, bool ptds)
{
    return fill(dst, 0, us, 2, n, 1, h, ptds, false);
}

static CUresult set32_async(CUdeviceptr dst, unsigned int ui, size_t n, CUstream h, bool ptds)
{
    return fill(dst, 0, ui, 4, n, 1, h, ptds, false);
}

static CUresult set2d8(CUdeviceptr dst, size_t pitch, unsigned char uc, size_t w, size_t hgt, bool ptds)
{
    return fill(dst, pitch, uc, 1, w, hgt, NULL, ptds, true);
}

static CUresult set2d16(CUdeviceptr dst, size_t pitch, unsigned short us, size_t w, size_t hgt, bool ptds)
{
    return fill(dst, pitch, us, 2, w, hgt, NULL, ptds, true);
}

static CUresult set2d32(CUdeviceptr dst, size_t pitch, unsigned int ui, size_t w, size_t hgt, bool ptds)
{
    return fill(dst, pitch, ui, 4, w, hgt, NULL, ptds, true);
}

static CUresult set2d8_async(CUdeviceptr dst, size_t pitch, unsigned char uc, size_t w, size_t hgt, CUstream h,
                             bool ptds)
{
    return fill(dst, pitch, uc, 1, w, hgt, h, ptds, false);
}

static CUresult set2d16_async(CUdeviceptr dst, size_t pitch, unsigned short us, size_t w, size_t hgt, CUstream h,
                              bool ptds)
{
    return fill(dst, pitch, us, 2, w, hgt, h, ptds, false);
}

static CUresult set2d32_async(CUdeviceptr dst, size_t pitch, unsigned int ui, size_t w, size_t hgt, CUstream h,
                              bool ptds)
{
    return fill(dst, pitch, ui, 4, w, hgt, h, ptds, false);
}

DRV_PTDS(cuMemsetD8_v2, set8, (CUdeviceptr dstDevice, unsigned char uc, size_t N), (dstDevice, uc, N))
DRV_PTDS(cuMemsetD16_v2, set16, (CUdeviceptr dstDevice, unsigned short us, size_t N), (dstDevice, us, N))
DRV_PTDS(cuMemsetD32_v2, set32, (CUdeviceptr dstDevice, unsigned int ui, size_t N), (dstDevice, ui, N))
DRV_PTSZ(cuMemsetD8Async, set8_async, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
         (dstDevice, uc, N, hStream))
DRV_PTSZ(cuMemsetD16Async, set16_async, (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream),
         (dstDevice, us, N, hStream))
DRV_PTSZ(cuMemsetD32Async, set32_async, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
         (dstDevice, ui, N, hStream))
DRV_PTDS(cuMemsetD2D8_v2, set2d8,
         (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height),
         (dstDevice, dstPitch, uc, Width, Height))
DRV_PTDS(cuMemsetD2D16_v2, set2d16,
         (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height),
         (dstDevice, dstPitch, us, Width, Height))
DRV_PTDS(cuMemsetD2D32_v2, set2d32,
         (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height),
         (dstDevice, dstPitch, ui, Width, Height))
DRV_PTSZ(cuMemsetD2D8Async, set2d8_async,
         (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height, CUstream hStream),
         (dstDevice, dstPitch, uc, Width, Height, hStream))
DRV_PTSZ(cuMemsetD2D16Async, set2d16_async,
         (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height, CUstream hStream),
         (dstDevice, dstPitch, us, Width, Height, hStream))
DRV_PTSZ(cuMemsetD2D32Async, set2d32_async,
         (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height, CUstream hStream),
         (dstDevice, dstPitch, ui, Width, Height, hStream))

/* ------------------------------------------------------------------------
 * For the other copies of the driver (driver.h)
 * ---------------------------------------------------------------------- */

CUresult drv_copy_linear(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool ptds, bool sync,
                         const char *what)
{
    return copy1(dst, src, n, h, ptds, sync, what);
}

CUresult drv_copy_2d(const CUDA_MEMCPY2D *p, CUstream h, bool ptds, bool sync, const char *what)
{
    return copy2d(p, h, ptds, sync, what);
}
