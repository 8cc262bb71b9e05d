/*
 * Driver API of the simulated device: copies and memsets, linear, pitched
 * (2D) and 3D, to and from arrays too.  Every one is one operation on a
 * stream: `height` rows of `bytes`, `dpitch`/`spitch` apart (a linear one
 * is a single row); a 3D copy is one per slice.  An array side is its
 * bytes in device memory through the array's layout (driver_array.c).
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
 * host-blocking behaviour (device-to-device copies do not block).  A side
 * that is an array (darr, sarr) is found under the lock at its position
 * (dpos, spos: x in bytes, y, z; linear: a byte offset) through the
 * array's layout (drv_array_at), which sets its address and pitch. */
typedef struct copy_s {
    uintptr_t dst, src;
    size_t dpitch, spitch, width, height;
    CUstream stream;
    bool ptds, sync;
    const char *what;
    CUarray darr, sarr;
    size_t dpos[3], spos[3];
    bool linear;
} copy_t;

/* An array side: its address and pitch, in its stream's device. */
static CUresult array_side(CUarray h, const size_t pos[3], const copy_t *c, uintptr_t *addr, size_t *pitch)
{
    return drv_array_at(h, pos, c->width, c->height, c->linear, addr, pitch);
}

/* Checks one copy (with sim.lock held) and, when `enqueue`, queues it;
 * *s is its stream and *wait whether a synchronous copy must then wait. */
static CUresult copy_locked(struct CUctx_st *ctx, const copy_t *in, bool enqueue, struct CUstream_st **s, bool *wait)
{
    copy_t c = *in;
    *wait = false;
    if (c.width == 0 || c.height == 0)
        return CUDA_SUCCESS;
    bool ddev = false, dtr = false, sdev = false, str = false;
    CUresult r = CUDA_SUCCESS;
    if (c.darr) {
        r = array_side(c.darr, c.dpos, &c, &c.dst, &c.dpitch);
        ddev = dtr = true;
    }
    if (r == CUDA_SUCCESS && c.sarr) {
        r = array_side(c.sarr, c.spos, &c, &c.src, &c.spitch);
        sdev = str = true;
    }
    if (r != CUDA_SUCCESS)
        return r;
    if (!c.dst || !c.src || (c.height > 1 && (c.dpitch < c.width || c.spitch < c.width)))
        return CUDA_ERROR_INVALID_VALUE;
    size_t dspan = span_of(c.width, c.height, c.dpitch), sspan = span_of(c.width, c.height, c.spitch);
    if (dspan == SIZE_MAX || sspan == SIZE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (!c.darr)
        r = classify(c.dst, dspan, true, &ddev, &dtr);
    if (r == CUDA_SUCCESS && !c.sarr)
        r = classify(c.src, sspan, false, &sdev, &str);
    if (r == CUDA_SUCCESS)
        r = sim_stream_resolve(ctx, c.stream, c.ptds, s);
    if (r == CUDA_SUCCESS)
        r = stream_access(c.dst, dspan, true, *s);
    if (r == CUDA_SUCCESS)
        r = stream_access(c.src, sspan, false, *s);
    if (r == CUDA_SUCCESS && c.sync && (*s)->capture)
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (r != CUDA_SUCCESS || !enqueue)
        return r;
    sim_op_t *op = sim_op_new(SIM_OP_COPY, c.what);
    op->dst = (void *)c.dst;
    op->src = (const void *)c.src;
    op->bytes = c.width;
    op->height = c.height;
    op->dpitch = c.dpitch;
    op->spitch = c.spitch;
    if (dtr)
        op_range(op, c.dst, dspan, true);
    if (str)
        op_range(op, c.src, sspan, false);
    bool pageable_src = !sdev && !str && !sim_alloc_find(c.src);
    if (pageable_src && !c.sync) {
        /* CUDA stages a pageable source before returning (rows packed). */
        uint8_t *st = sim_xmalloc(c.width * c.height);
        for (size_t row = 0; row < c.height; row++)
            memcpy(st + row * c.width, (const uint8_t *)c.src + row * c.spitch, c.width);
        op->staging = st;
        op->src = st;
        op->spitch = c.width;
    }
    *wait = c.sync && !(ddev && sdev);
    return sim_enqueue(*s, op);
}

static CUresult copy(const copy_t *c)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    bool wait;
    r = copy_locked(ctx, c, true, &s, &wait);
    if (r == CUDA_SUCCESS && wait)
        r = sim_stream_wait_idle(s);
    return drv_leave(r);
}

/* A linear copy of n bytes. */
static CUresult copy1(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool ptds, bool sync, const char *what)
{
    copy_t c = {.dst = dst, .src = src, .dpitch = n, .spitch = n, .width = n, .height = 1, .stream = h, .ptds = ptds,
                .sync = sync, .what = what};
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

/* One side of a CUDA_MEMCPY2D or CUDA_MEMCPY3D: host, device or unified
 * (UVA: either) memory at (x, y, z), whose slices are `height` rows of
 * `pitch` bytes, or an array (*arr and pos: found under the lock). */
static CUresult side(CUmemorytype type, const void *host, CUdeviceptr dev, CUarray array, size_t x, size_t y,
                     size_t z, size_t pitch, size_t height, uintptr_t *out, CUarray *arr, size_t pos[3])
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
        if (!array)
            return CUDA_ERROR_INVALID_VALUE;
        *arr = array;
        pos[0] = x;
        pos[1] = y;
        pos[2] = z;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (z && height > SIZE_MAX / z)
        return CUDA_ERROR_INVALID_VALUE;
    size_t row = z * height; /* overflow of y + row is caught with the product below */
    if (!base || row > SIZE_MAX - y || ((y + row) && pitch > (UINTPTR_MAX - base - x) / (y + row)))
        return CUDA_ERROR_INVALID_VALUE;
    *out = base + (y + row) * pitch + x;
    return CUDA_SUCCESS;
}

static CUresult copy2d(const CUDA_MEMCPY2D *p, CUstream h, bool ptds, bool sync, const char *what)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    copy_t c = {.dpitch = p->dstPitch, .spitch = p->srcPitch, .width = p->WidthInBytes, .height = p->Height,
                .stream = h, .ptds = ptds, .sync = sync, .what = what};
    CUresult r = side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY, 0,
                      p->dstPitch, 0, &c.dst, &c.darr, c.dpos);
    if (r == CUDA_SUCCESS)
        r = side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY, 0, p->srcPitch, 0,
                 &c.src, &c.sarr, c.spos);
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

/* Slice k of a 3D copy: a 2D copy of its Height rows. */
static CUresult slice3d(const CUDA_MEMCPY3D *p, size_t k, copy_t *c)
{
    CUresult r = side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY,
                      p->dstZ + k, p->dstPitch, p->dstHeight, &c->dst, &c->darr, c->dpos);
    if (r == CUDA_SUCCESS)
        r = side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY, p->srcZ + k,
                 p->srcPitch, p->srcHeight, &c->src, &c->sarr, c->spos);
    return r;
}

/* A 3D copy: Depth slices, each one operation on the stream, all checked
 * before the first is queued (a refused copy moves nothing).  A pointer
 * side's slices are its Height (srcHeight, dstHeight) rows apart; an
 * array's are its layers.  Levels of detail other than 0 are refused. */
static CUresult copy3d(const CUDA_MEMCPY3D *p, CUstream h, bool ptds, bool sync, const char *what)
{
    if (!p || p->reserved0 || p->reserved1 || p->srcLOD || p->dstLOD)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->Depth > 1 && ((p->srcMemoryType != CU_MEMORYTYPE_ARRAY && p->srcHeight < p->Height) ||
                         (p->dstMemoryType != CU_MEMORYTYPE_ARRAY && p->dstHeight < p->Height)))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    bool wait = false;
    r = CUDA_SUCCESS;
    for (int enqueue = 0; enqueue < 2 && r == CUDA_SUCCESS; enqueue++)
        for (size_t k = 0; k < p->Depth && r == CUDA_SUCCESS; k++) {
            copy_t c = {.dpitch = p->dstPitch, .spitch = p->srcPitch, .width = p->WidthInBytes,
                        .height = p->Height, .stream = h, .ptds = ptds, .sync = sync, .what = what};
            r = slice3d(p, k, &c);
            if (r == CUDA_SUCCESS)
                r = copy_locked(ctx, &c, enqueue, &s, &wait);
        }
    if (r == CUDA_SUCCESS && wait)
        r = sim_stream_wait_idle(s);
    return drv_leave(r);
}

static CUresult copy3d_sync(const CUDA_MEMCPY3D *p, bool ptds)
{
    return copy3d(p, NULL, ptds, true, "memcpy 3D");
}

static CUresult copy3d_async(const CUDA_MEMCPY3D *p, CUstream h, bool ptds)
{
    return copy3d(p, h, ptds, false, "memcpy 3D (async)");
}

DRV_PTDS(cuMemcpy3D_v2, copy3d_sync, (const CUDA_MEMCPY3D *pCopy), (pCopy))
DRV_PTSZ(cuMemcpy3DAsync_v2, copy3d_async, (const CUDA_MEMCPY3D *pCopy, CUstream hStream), (pCopy, hStream))

/* The linear copies to and from arrays: a byte offset into the array's
 * whole layout (rows and layers one after another). */
static CUresult acopy(CUarray darr, size_t doff, uintptr_t dst, CUarray sarr, size_t soff, uintptr_t src, size_t n,
                      CUstream h, bool ptds, bool sync, const char *what)
{
    if (n == 0)
        return CUDA_SUCCESS;
    copy_t c = {.dst = dst, .src = src, .dpitch = n, .spitch = n, .width = n, .height = 1, .stream = h,
                .ptds = ptds, .sync = sync, .what = what, .darr = darr, .sarr = sarr, .dpos = {doff, 0, 0},
                .spos = {soff, 0, 0}, .linear = true};
    if ((c.darr == NULL) != (dst != 0) || (c.sarr == NULL) != (src != 0) || (!darr && !sarr))
        return CUDA_ERROR_INVALID_VALUE;
    return copy(&c);
}

static CUresult htoa(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, bool ptds)
{
    if (!dstArray || !srcHost)
        return CUDA_ERROR_INVALID_VALUE;
    return acopy(dstArray, dstOffset, 0, NULL, 0, (uintptr_t)srcHost, ByteCount, NULL, ptds, true, "memcpy HtoA");
}

static CUresult atoh(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, bool ptds)
{
    if (!dstHost || !srcArray)
        return CUDA_ERROR_INVALID_VALUE;
    return acopy(NULL, 0, (uintptr_t)dstHost, srcArray, srcOffset, 0, ByteCount, NULL, ptds, true, "memcpy AtoH");
}

static CUresult dtoa(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount, bool ptds)
{
    if (!dstArray || !srcDevice)
        return CUDA_ERROR_INVALID_VALUE;
    return acopy(dstArray, dstOffset, 0, NULL, 0, srcDevice, ByteCount, NULL, ptds, true, "memcpy DtoA");
}

static CUresult atod(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount, bool ptds)
{
    if (!dstDevice || !srcArray)
        return CUDA_ERROR_INVALID_VALUE;
    return acopy(NULL, 0, dstDevice, srcArray, srcOffset, 0, ByteCount, NULL, ptds, true, "memcpy AtoD");
}

static CUresult atoa(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount,
                     bool ptds)
{
    if (!dstArray || !srcArray)
        return CUDA_ERROR_INVALID_VALUE;
    return acopy(dstArray, dstOffset, 0, srcArray, srcOffset, 0, ByteCount, NULL, ptds, true, "memcpy AtoA");
}

static CUresult htoa_async(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream h,
                           bool ptds)
{
    if (!dstArray || !srcHost)
        return CUDA_ERROR_INVALID_VALUE;
    return acopy(dstArray, dstOffset, 0, NULL, 0, (uintptr_t)srcHost, ByteCount, h, ptds, false,
                 "memcpy HtoA (async)");
}

static CUresult atoh_async(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream h, bool ptds)
{
    if (!dstHost || !srcArray)
        return CUDA_ERROR_INVALID_VALUE;
    return acopy(NULL, 0, (uintptr_t)dstHost, srcArray, srcOffset, 0, ByteCount, h, ptds, false,
                 "memcpy AtoH (async)");
}

DRV_PTDS(cuMemcpyHtoA_v2, htoa, (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount),
         (dstArray, dstOffset, srcHost, ByteCount))
DRV_PTDS(cuMemcpyAtoH_v2, atoh, (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount),
         (dstHost, srcArray, srcOffset, ByteCount))
DRV_PTDS(cuMemcpyDtoA_v2, dtoa, (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount),
         (dstArray, dstOffset, srcDevice, ByteCount))
DRV_PTDS(cuMemcpyAtoD_v2, atod, (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount),
         (dstDevice, srcArray, srcOffset, ByteCount))
DRV_PTDS(cuMemcpyAtoA_v2, atoa,
         (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount),
         (dstArray, dstOffset, srcArray, srcOffset, ByteCount))
DRV_PTSZ(cuMemcpyHtoAAsync_v2, htoa_async,
         (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream hStream),
         (dstArray, dstOffset, srcHost, ByteCount, hStream))
DRV_PTSZ(cuMemcpyAtoHAsync_v2, atoh_async,
         (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream),
         (dstHost, srcArray, srcOffset, ByteCount, hStream))

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
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (n == 0 || height == 0)
        return drv_leave(CUDA_SUCCESS);
    if (n > SIZE_MAX / elem || dst % elem || (height > 1 && (pitch < n * elem || pitch % elem)))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    size_t width = n * elem, span = span_of(width, height, pitch);
    bool host = false;
    r = span == SIZE_MAX ? CUDA_ERROR_INVALID_VALUE : fill_target(dst, span, &host);
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
