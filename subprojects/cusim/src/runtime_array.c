/*
 * The simulated runtime's arrays: allocation of arrays and mipmapped
 * arrays, copies to, from and between them, and texture and surface
 * objects, each a translation to the driver (driver_array.c,
 * driver_copy.c, driver_texture.c).  A channel descriptor is a format and
 * a channel count of the driver through array_format.h's table; one that
 * names no format the simulator lays out is
 * cudaErrorInvalidChannelDescriptor.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "array_format.h"
#include "runtime_internal.h"
#include "runtime_major.h"

/* ------------------------------------------------------------------------
 * Channel descriptors
 * ---------------------------------------------------------------------- */

/* The driver's format and channel count of a channel descriptor: 1, 2 or 4
 * leading channels of equal bits, whose kind and size are a row of the
 * table. */
static cudaError_t rt_format(const struct cudaChannelFormatDesc *d, CUarray_format *f, unsigned *n)
{
    const int bits[4] = {d->x, d->y, d->z, d->w};
    unsigned k = 0;
    while (k < 4 && bits[k] > 0)
        k++;
    for (unsigned i = k; i < 4; i++)
        if (bits[i] != 0)
            return cudaErrorInvalidChannelDescriptor;
    for (unsigned i = 1; i < k; i++)
        if (bits[i] != bits[0])
            return cudaErrorInvalidChannelDescriptor;
    for (size_t i = 0; i < sizeof sim_formats / sizeof sim_formats[0]; i++) {
        const sim_format_t *row = &sim_formats[i];
        if (row->kind == d->f && (int)row->channel_bytes * 8 == bits[0] && sim_format_elem(row, k)) {
            *f = row->format;
            *n = k;
            return cudaSuccess;
        }
    }
    return cudaErrorInvalidChannelDescriptor;
}

static struct cudaChannelFormatDesc rt_channel_desc(CUarray_format f, unsigned n)
{
    struct cudaChannelFormatDesc d = {0, 0, 0, 0, cudaChannelFormatKindNone};
    const sim_format_t *row = sim_format_find(f);
    if (!row)
        return d;
    int b = (int)row->channel_bytes * 8;
    d = (struct cudaChannelFormatDesc){b, n > 1 ? b : 0, n > 2 ? b : 0, n > 3 ? b : 0, row->kind};
    return d;
}

/* An exported function as well as the header's template. */
RT_API struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, enum cudaChannelFormatKind f)
{
    return (struct cudaChannelFormatDesc){.x = x, .y = y, .z = z, .w = w, .f = f};
}

/* ------------------------------------------------------------------------
 * Arrays
 * ---------------------------------------------------------------------- */

static CUarray rt_arr(const struct cudaArray *a)
{
    return (CUarray)(uintptr_t)a;
}

/* An array's driver descriptor and element size. */
static cudaError_t rt_array_desc(const struct cudaArray *a, CUDA_ARRAY3D_DESCRIPTOR *d, size_t *elem)
{
    cudaError_t e = rt_err(RT_DRV->cuArray3DGetDescriptor_v2(d, rt_arr(a)));
    if (e == cudaSuccess)
        *elem = sim_format_elem(sim_format_find(d->Format), d->NumChannels);
    return e;
}

/* The descriptor of an array of extent e (height, depth 0 where absent). */
static cudaError_t rt_desc3d(const struct cudaChannelFormatDesc *desc, struct cudaExtent e, unsigned flags,
                             CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (!desc)
        return cudaErrorInvalidValue;
    *d = (CUDA_ARRAY3D_DESCRIPTOR){.Width = e.width, .Height = e.height, .Depth = e.depth, .Flags = flags};
    return rt_format(desc, &d->Format, &d->NumChannels);
}

RT_API cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                     struct cudaExtent extent, unsigned int flags)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUarray a = NULL;
    if (!array)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_desc3d(desc, extent, flags, &d);
    if (e == cudaSuccess)
        e = RT_FORWARD(RT_DRV->cuArray3DCreate_v2(&a, &d));
    if (e == cudaSuccess)
        *array = (cudaArray_t)(void *)a;
    return rt_ret(e);
}

RT_API cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, size_t width,
                                   size_t height, unsigned int flags)
{
    return cudaMalloc3DArray(array, desc, (struct cudaExtent){width, height, 0}, flags);
}

RT_API cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t *mipmappedArray,
                                            const struct cudaChannelFormatDesc *desc, struct cudaExtent extent,
                                            unsigned int numLevels, unsigned int flags)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUmipmappedArray m = NULL;
    if (!mipmappedArray)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_desc3d(desc, extent, flags, &d);
    if (e == cudaSuccess)
        e = RT_FORWARD(RT_DRV->cuMipmappedArrayCreate(&m, &d, numLevels));
    if (e == cudaSuccess)
        *mipmappedArray = (cudaMipmappedArray_t)(void *)m;
    return rt_ret(e);
}

RT_API cudaError_t cudaGetMipmappedArrayLevel(cudaArray_t *levelArray, cudaMipmappedArray_const_t mipmappedArray,
                                              unsigned int level)
{
    CUarray a = NULL;
    if (!levelArray)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = RT_FORWARD(
        RT_DRV->cuMipmappedArrayGetLevel(&a, (CUmipmappedArray)(uintptr_t)mipmappedArray, level));
    if (e == cudaSuccess)
        *levelArray = (cudaArray_t)(void *)a;
    return rt_ret(e);
}

/* Freeing NULL does nothing, as the real runtime. */
RT_API cudaError_t cudaFreeArray(cudaArray_t array)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess || !array)
        return rt_ret(e);
    return rt_ret(rt_err(RT_DRV->cuArrayDestroy(rt_arr(array))));
}

RT_API cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmappedArray)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess || !mipmappedArray)
        return rt_ret(e);
    return rt_ret(rt_err(RT_DRV->cuMipmappedArrayDestroy((CUmipmappedArray)(void *)mipmappedArray)));
}

/* Any of the answers may be left out (NULL). */
RT_API cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc *desc, struct cudaExtent *extent,
                                    unsigned int *flags, cudaArray_t array)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    size_t elem;
    cudaError_t e = rt_enter();
    if (e == cudaSuccess)
        e = rt_array_desc(array, &d, &elem);
    if (e != cudaSuccess)
        return rt_ret(e);
    if (desc)
        *desc = rt_channel_desc(d.Format, d.NumChannels);
    if (extent)
        *extent = (struct cudaExtent){d.Width, d.Height, d.Depth};
    if (flags)
        *flags = d.Flags;
    return cudaSuccess;
}

RT_API cudaError_t cudaGetChannelDesc(struct cudaChannelFormatDesc *desc, cudaArray_const_t array)
{
    if (!desc)
        return rt_ret(cudaErrorInvalidValue);
    return cudaArrayGetInfo(desc, NULL, NULL, (cudaArray_t)(uintptr_t)array);
}

_Static_assert(sizeof(struct cudaArrayMemoryRequirements) == sizeof(CUDA_ARRAY_MEMORY_REQUIREMENTS),
               "memory requirements layouts differ");

RT_API cudaError_t cudaArrayGetMemoryRequirements(struct cudaArrayMemoryRequirements *memoryRequirements,
                                                  cudaArray_t array, int device)
{
    CUdevice dev;
    cudaError_t e = rt_enter();
    if (e == cudaSuccess)
        e = rt_device(device, &dev);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuArrayGetMemoryRequirements((CUDA_ARRAY_MEMORY_REQUIREMENTS *)(void *)memoryRequirements,
                                                        rt_arr(array), dev));
    return rt_ret(e);
}

RT_API cudaError_t cudaMipmappedArrayGetMemoryRequirements(struct cudaArrayMemoryRequirements *memoryRequirements,
                                                           cudaMipmappedArray_t mipmap, int device)
{
    CUdevice dev;
    cudaError_t e = rt_enter();
    if (e == cudaSuccess)
        e = rt_device(device, &dev);
    if (e == cudaSuccess)
        e = rt_err(RT_DRV->cuMipmappedArrayGetMemoryRequirements(
            (CUDA_ARRAY_MEMORY_REQUIREMENTS *)(void *)memoryRequirements, (CUmipmappedArray)(void *)mipmap, dev));
    return rt_ret(e);
}

/* ------------------------------------------------------------------------
 * Copies (the side that is not an array is unified: the driver finds it)
 * ---------------------------------------------------------------------- */

static cudaError_t rt_kind_check(enum cudaMemcpyKind kind)
{
    if ((unsigned)kind > (unsigned)cudaMemcpyDefault)
        return cudaErrorInvalidMemcpyDirection;
    return rt_enter();
}

static cudaError_t rt_copy2d(const rt_driver_t *d, const CUDA_MEMCPY2D *c, cudaStream_t stream, bool async)
{
    return rt_err(async ? d->cuMemcpy2DAsync_v2(c, stream) : d->cuMemcpy2D_v2(c));
}

/* One rectangle between an array (at wOffset bytes, hOffset rows) and
 * unified memory of pitch `pitch`; to: into the array. */
static cudaError_t rt_array_rect(const rt_driver_t *d, bool to, const struct cudaArray *arr, size_t wOffset,
                                 size_t hOffset, const void *mem, size_t pitch, size_t width, size_t height,
                                 enum cudaMemcpyKind kind, cudaStream_t stream, bool async)
{
    cudaError_t e = rt_kind_check(kind);
    if (e != cudaSuccess || width == 0 || height == 0)
        return e;
    if (width > pitch)
        return cudaErrorInvalidPitchValue;
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.WidthInBytes = width;
    c.Height = height;
    if (to) {
        c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
        c.dstArray = rt_arr(arr);
        c.dstXInBytes = wOffset;
        c.dstY = hOffset;
        c.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
        c.srcDevice = (CUdeviceptr)(uintptr_t)mem;
        c.srcPitch = pitch;
    } else {
        c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
        c.srcArray = rt_arr(arr);
        c.srcXInBytes = wOffset;
        c.srcY = hOffset;
        c.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
        c.dstDevice = (CUdeviceptr)(uintptr_t)mem;
        c.dstPitch = pitch;
    }
    return rt_copy2d(d, &c, stream, async);
}

static cudaError_t rt_2d_to_array(const rt_driver_t *d, cudaArray_t dst, size_t wOffset, size_t hOffset,
                                  const void *src, size_t spitch, size_t width, size_t height,
                                  enum cudaMemcpyKind kind)
{
    return rt_array_rect(d, true, dst, wOffset, hOffset, src, spitch, width, height, kind, NULL, false);
}

static cudaError_t rt_2d_to_array_async(const rt_driver_t *d, cudaArray_t dst, size_t wOffset, size_t hOffset,
                                        const void *src, size_t spitch, size_t width, size_t height,
                                        enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return rt_array_rect(d, true, dst, wOffset, hOffset, src, spitch, width, height, kind, stream, true);
}

static cudaError_t rt_2d_from_array(const rt_driver_t *d, void *dst, size_t dpitch, cudaArray_const_t src,
                                    size_t wOffset, size_t hOffset, size_t width, size_t height,
                                    enum cudaMemcpyKind kind)
{
    return rt_array_rect(d, false, src, wOffset, hOffset, dst, dpitch, width, height, kind, NULL, false);
}

static cudaError_t rt_2d_from_array_async(const rt_driver_t *d, void *dst, size_t dpitch, cudaArray_const_t src,
                                          size_t wOffset, size_t hOffset, size_t width, size_t height,
                                          enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return rt_array_rect(d, false, src, wOffset, hOffset, dst, dpitch, width, height, kind, stream, true);
}

static cudaError_t rt_2d_array_to_array(const rt_driver_t *d, cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                        cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc, size_t width,
                                        size_t height, enum cudaMemcpyKind kind)
{
    cudaError_t e = rt_kind_check(kind);
    if (e != cudaSuccess || width == 0 || height == 0)
        return e;
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.dstMemoryType = c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.dstArray = rt_arr(dst);
    c.dstXInBytes = wOffsetDst;
    c.dstY = hOffsetDst;
    c.srcArray = rt_arr(src);
    c.srcXInBytes = wOffsetSrc;
    c.srcY = hOffsetSrc;
    c.WidthInBytes = width;
    c.Height = height;
    return rt_copy2d(d, &c, NULL, false);
}

/* The deprecated linear copies: count bytes from (wOffset, hOffset) on,
 * row after row.  At most three rectangles: the rest of the first row,
 * whole rows, the start of the last; the whole range is checked first so
 * that a refused copy moves nothing. */
static cudaError_t rt_array_linear(const rt_driver_t *d, bool to, const struct cudaArray *arr, size_t wOffset,
                                   size_t hOffset, const void *mem, size_t count, enum cudaMemcpyKind kind,
                                   cudaStream_t stream, bool async)
{
    CUDA_ARRAY3D_DESCRIPTOR ad;
    size_t elem;
    cudaError_t e = rt_kind_check(kind);
    if (e != cudaSuccess || count == 0)
        return e;
    e = rt_array_desc(arr, &ad, &elem);
    if (e != cudaSuccess)
        return e;
    size_t row = ad.Width * elem, rows = (ad.Height ? ad.Height : 1) * (ad.Depth ? ad.Depth : 1);
    if (wOffset >= row || hOffset >= rows || count > (rows - hOffset) * row - wOffset)
        return cudaErrorInvalidValue;
    const uint8_t *p = mem;
    size_t first = count < row - wOffset ? count : row - wOffset;
    e = rt_array_rect(d, to, arr, wOffset, hOffset, p, first, first, 1, kind, stream, async);
    size_t whole = (count - first) / row, last = (count - first) % row;
    if (e == cudaSuccess && whole)
        e = rt_array_rect(d, to, arr, 0, hOffset + 1, p + first, row, row, whole, kind, stream, async);
    if (e == cudaSuccess && last)
        e = rt_array_rect(d, to, arr, 0, hOffset + 1 + whole, p + first + whole * row, last, last, 1, kind, stream,
                          async);
    return e;
}

static cudaError_t rt_to_array(const rt_driver_t *d, cudaArray_t dst, size_t wOffset, size_t hOffset,
                               const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return rt_array_linear(d, true, dst, wOffset, hOffset, src, count, kind, NULL, false);
}

static cudaError_t rt_to_array_async(const rt_driver_t *d, cudaArray_t dst, size_t wOffset, size_t hOffset,
                                     const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return rt_array_linear(d, true, dst, wOffset, hOffset, src, count, kind, stream, true);
}

static cudaError_t rt_from_array(const rt_driver_t *d, void *dst, cudaArray_const_t src, size_t wOffset,
                                 size_t hOffset, size_t count, enum cudaMemcpyKind kind)
{
    return rt_array_linear(d, false, src, wOffset, hOffset, dst, count, kind, NULL, false);
}

static cudaError_t rt_from_array_async(const rt_driver_t *d, void *dst, cudaArray_const_t src, size_t wOffset,
                                       size_t hOffset, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return rt_array_linear(d, false, src, wOffset, hOffset, dst, count, kind, stream, true);
}

/* Offsets into both arrays' whole layouts (cuMemcpyAtoA). */
static cudaError_t rt_array_to_array(const rt_driver_t *d, cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                     cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc, size_t count,
                                     enum cudaMemcpyKind kind)
{
    CUDA_ARRAY3D_DESCRIPTOR dd, sd;
    size_t de, se;
    cudaError_t e = rt_kind_check(kind);
    if (e == cudaSuccess)
        e = rt_array_desc(dst, &dd, &de);
    if (e == cudaSuccess)
        e = rt_array_desc(src, &sd, &se);
    if (e != cudaSuccess || count == 0)
        return e;
    return rt_err(d->cuMemcpyAtoA_v2(rt_arr(dst), hOffsetDst * dd.Width * de + wOffsetDst, rt_arr(src),
                                     hOffsetSrc * sd.Width * se + wOffsetSrc, count));
}

/* One side of a cudaMemcpy3DParms: an array (positions in elements) or a
 * pitched pointer (positions in bytes).  *elem: the array's element size. */
static cudaError_t rt_3d_side(const struct cudaArray *arr, struct cudaPos pos, struct cudaPitchedPtr ptr,
                              CUmemorytype *type, CUarray *a, CUdeviceptr *dev, size_t *x, size_t *pitch,
                              size_t *height, size_t *elem)
{
    *elem = 0;
    if ((arr != NULL) == (ptr.ptr != NULL))
        return cudaErrorInvalidValue;
    if (arr) {
        CUDA_ARRAY3D_DESCRIPTOR d;
        cudaError_t e = rt_array_desc(arr, &d, elem);
        if (e != cudaSuccess)
            return e;
        *type = CU_MEMORYTYPE_ARRAY;
        *a = rt_arr(arr);
        *x = pos.x * *elem;
        return cudaSuccess;
    }
    *type = CU_MEMORYTYPE_UNIFIED;
    *dev = (CUdeviceptr)(uintptr_t)ptr.ptr;
    *x = pos.x;
    *pitch = ptr.pitch;
    *height = ptr.ysize;
    return cudaSuccess;
}

static cudaError_t rt_memcpy3d_any(const rt_driver_t *d, const struct cudaMemcpy3DParms *p, cudaStream_t stream,
                                   bool async)
{
    if (!p)
        return cudaErrorInvalidValue;
    cudaError_t e = rt_kind_check(p->kind);
    if (e != cudaSuccess)
        return e;
    CUDA_MEMCPY3D c;
    size_t selem, delem;
    memset(&c, 0, sizeof c);
    e = rt_3d_side(p->srcArray, p->srcPos, p->srcPtr, &c.srcMemoryType, &c.srcArray, &c.srcDevice, &c.srcXInBytes,
                   &c.srcPitch, &c.srcHeight, &selem);
    if (e == cudaSuccess)
        e = rt_3d_side(p->dstArray, p->dstPos, p->dstPtr, &c.dstMemoryType, &c.dstArray, &c.dstDevice,
                       &c.dstXInBytes, &c.dstPitch, &c.dstHeight, &delem);
    if (e != cudaSuccess)
        return e;
    if (p->extent.width == 0 || p->extent.height == 0 || p->extent.depth == 0)
        return cudaSuccess;
    /* the extent's width is in elements when an array takes part */
    size_t elem = selem ? selem : delem ? delem : 1;
    c.srcY = p->srcPos.y;
    c.srcZ = p->srcPos.z;
    c.dstY = p->dstPos.y;
    c.dstZ = p->dstPos.z;
    c.WidthInBytes = p->extent.width * elem;
    c.Height = p->extent.height;
    c.Depth = p->extent.depth;
    return rt_err(async ? d->cuMemcpy3DAsync_v2(&c, stream) : d->cuMemcpy3D_v2(&c));
}

static cudaError_t rt_memcpy3d(const rt_driver_t *d, const struct cudaMemcpy3DParms *p)
{
    return rt_memcpy3d_any(d, p, NULL, false);
}

static cudaError_t rt_memcpy3d_async(const rt_driver_t *d, const struct cudaMemcpy3DParms *p, cudaStream_t stream)
{
    return rt_memcpy3d_any(d, p, stream, true);
}

RT_STREAM_API(cudaMemcpy2DToArray, cudaMemcpy2DToArray_ptds, rt_2d_to_array,
              (cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width,
               size_t height, enum cudaMemcpyKind kind),
              dst, wOffset, hOffset, src, spitch, width, height, kind)
RT_STREAM_API(cudaMemcpy2DToArrayAsync, cudaMemcpy2DToArrayAsync_ptsz, rt_2d_to_array_async,
              (cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width,
               size_t height, enum cudaMemcpyKind kind, cudaStream_t stream),
              dst, wOffset, hOffset, src, spitch, width, height, kind, stream)
RT_STREAM_API(cudaMemcpy2DFromArray, cudaMemcpy2DFromArray_ptds, rt_2d_from_array,
              (void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width,
               size_t height, enum cudaMemcpyKind kind),
              dst, dpitch, src, wOffset, hOffset, width, height, kind)
RT_STREAM_API(cudaMemcpy2DFromArrayAsync, cudaMemcpy2DFromArrayAsync_ptsz, rt_2d_from_array_async,
              (void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width,
               size_t height, enum cudaMemcpyKind kind, cudaStream_t stream),
              dst, dpitch, src, wOffset, hOffset, width, height, kind, stream)
RT_STREAM_API(cudaMemcpy2DArrayToArray, cudaMemcpy2DArrayToArray_ptds, rt_2d_array_to_array,
              (cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc,
               size_t hOffsetSrc, size_t width, size_t height, enum cudaMemcpyKind kind),
              dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind)
RT_STREAM_API(cudaMemcpyToArray, cudaMemcpyToArray_ptds, rt_to_array,
              (cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count,
               enum cudaMemcpyKind kind),
              dst, wOffset, hOffset, src, count, kind)
RT_STREAM_API(cudaMemcpyToArrayAsync, cudaMemcpyToArrayAsync_ptsz, rt_to_array_async,
              (cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count,
               enum cudaMemcpyKind kind, cudaStream_t stream),
              dst, wOffset, hOffset, src, count, kind, stream)
RT_STREAM_API(cudaMemcpyFromArray, cudaMemcpyFromArray_ptds, rt_from_array,
              (void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,
               enum cudaMemcpyKind kind),
              dst, src, wOffset, hOffset, count, kind)
RT_STREAM_API(cudaMemcpyFromArrayAsync, cudaMemcpyFromArrayAsync_ptsz, rt_from_array_async,
              (void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,
               enum cudaMemcpyKind kind, cudaStream_t stream),
              dst, src, wOffset, hOffset, count, kind, stream)
RT_STREAM_API(cudaMemcpyArrayToArray, cudaMemcpyArrayToArray_ptds, rt_array_to_array,
              (cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc,
               size_t hOffsetSrc, size_t count, enum cudaMemcpyKind kind),
              dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, kind)
RT_STREAM_API(cudaMemcpy3D, cudaMemcpy3D_ptds, rt_memcpy3d, (const struct cudaMemcpy3DParms *p), p)
RT_STREAM_API(cudaMemcpy3DAsync, cudaMemcpy3DAsync_ptsz, rt_memcpy3d_async,
              (const struct cudaMemcpy3DParms *p, cudaStream_t stream), p, stream)

/* ------------------------------------------------------------------------
 * Texture and surface objects
 * ---------------------------------------------------------------------- */

/* The caller's resource description has rt_abi.resource_desc bytes. */
static cudaError_t rt_res_to_cu(const struct cudaResourceDesc *caller, CUDA_RESOURCE_DESC *out)
{
    struct cudaResourceDesc whole = {0};
    const struct cudaResourceDesc *in = &whole;
    memcpy(&whole, caller, rt_abi.resource_desc);
    memset(out, 0, sizeof *out);
    out->resType = (CUresourcetype)in->resType;
    out->flags = in->flags;
    switch ((int)in->resType) {
    case cudaResourceTypeArray:
        out->res.array.hArray = rt_arr(in->res.array.array);
        return cudaSuccess;
    case cudaResourceTypeMipmappedArray:
        out->res.mipmap.hMipmappedArray = (CUmipmappedArray)(void *)in->res.mipmap.mipmap;
        return cudaSuccess;
    case cudaResourceTypeLinear:
        out->res.linear.devPtr = (CUdeviceptr)(uintptr_t)in->res.linear.devPtr;
        out->res.linear.sizeInBytes = in->res.linear.sizeInBytes;
        return rt_format(&in->res.linear.desc, &out->res.linear.format, &out->res.linear.numChannels);
    case cudaResourceTypePitch2D:
        out->res.pitch2D.devPtr = (CUdeviceptr)(uintptr_t)in->res.pitch2D.devPtr;
        out->res.pitch2D.width = in->res.pitch2D.width;
        out->res.pitch2D.height = in->res.pitch2D.height;
        out->res.pitch2D.pitchInBytes = in->res.pitch2D.pitchInBytes;
        return rt_format(&in->res.pitch2D.desc, &out->res.pitch2D.format, &out->res.pitch2D.numChannels);
    default:
        return cudaErrorInvalidValue;
    }
}

static void rt_res_from_cu(const CUDA_RESOURCE_DESC *in, struct cudaResourceDesc *out)
{
    memset(out, 0, sizeof *out);
    out->resType = (enum cudaResourceType)in->resType;
    out->flags = in->flags;
    switch ((int)in->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
        out->res.array.array = (cudaArray_t)(void *)in->res.array.hArray;
        break;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        out->res.mipmap.mipmap = (cudaMipmappedArray_t)(void *)in->res.mipmap.hMipmappedArray;
        break;
    case CU_RESOURCE_TYPE_LINEAR:
        out->res.linear.devPtr = (void *)(uintptr_t)in->res.linear.devPtr;
        out->res.linear.desc = rt_channel_desc(in->res.linear.format, in->res.linear.numChannels);
        out->res.linear.sizeInBytes = in->res.linear.sizeInBytes;
        break;
    case CU_RESOURCE_TYPE_PITCH2D:
        out->res.pitch2D.devPtr = (void *)(uintptr_t)in->res.pitch2D.devPtr;
        out->res.pitch2D.desc = rt_channel_desc(in->res.pitch2D.format, in->res.pitch2D.numChannels);
        out->res.pitch2D.width = in->res.pitch2D.width;
        out->res.pitch2D.height = in->res.pitch2D.height;
        out->res.pitch2D.pitchInBytes = in->res.pitch2D.pitchInBytes;
        break;
    }
}

/* The runtime's read mode, coordinates and options are the driver's flags,
 * one row each (cudaReadModeElementType reads integers as integers). */
static const struct {
    size_t field; /* offset of an int-sized field of struct cudaTextureDesc */
    int when;     /* its value that sets the flag */
    unsigned flag;
} rt_tex_flags[] = {
    {offsetof(struct cudaTextureDesc, readMode), cudaReadModeElementType, CU_TRSF_READ_AS_INTEGER},
    {offsetof(struct cudaTextureDesc, normalizedCoords), 1, CU_TRSF_NORMALIZED_COORDINATES},
    {offsetof(struct cudaTextureDesc, sRGB), 1, CU_TRSF_SRGB},
    {offsetof(struct cudaTextureDesc, disableTrilinearOptimization), 1, CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION},
    {offsetof(struct cudaTextureDesc, seamlessCubemap), 1, CU_TRSF_SEAMLESS_CUBEMAP},
};

static int *rt_tex_field(struct cudaTextureDesc *t, size_t off)
{
    return (int *)(void *)((char *)t + off);
}

static cudaError_t rt_tex_to_cu(const struct cudaTextureDesc *in, CUDA_TEXTURE_DESC *out)
{
    struct cudaTextureDesc t = *in;
    if ((unsigned)t.readMode > cudaReadModeNormalizedFloat)
        return cudaErrorInvalidValue;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 3; i++)
        out->addressMode[i] = (CUaddress_mode)t.addressMode[i];
    out->filterMode = (CUfilter_mode)t.filterMode;
    for (size_t i = 0; i < sizeof rt_tex_flags / sizeof rt_tex_flags[0]; i++)
        if ((*rt_tex_field(&t, rt_tex_flags[i].field) != 0) == (rt_tex_flags[i].when != 0))
            out->flags |= rt_tex_flags[i].flag;
    out->maxAnisotropy = t.maxAnisotropy;
    out->mipmapFilterMode = (CUfilter_mode)t.mipmapFilterMode;
    out->mipmapLevelBias = t.mipmapLevelBias;
    out->minMipmapLevelClamp = t.minMipmapLevelClamp;
    out->maxMipmapLevelClamp = t.maxMipmapLevelClamp;
    memcpy(out->borderColor, t.borderColor, sizeof out->borderColor);
    return cudaSuccess;
}

static void rt_tex_from_cu(const CUDA_TEXTURE_DESC *in, struct cudaTextureDesc *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 3; i++)
        out->addressMode[i] = (enum cudaTextureAddressMode)in->addressMode[i];
    out->filterMode = (enum cudaTextureFilterMode)in->filterMode;
    out->readMode = cudaReadModeNormalizedFloat;
    for (size_t i = 0; i < sizeof rt_tex_flags / sizeof rt_tex_flags[0]; i++)
        if (in->flags & rt_tex_flags[i].flag)
            *rt_tex_field(out, rt_tex_flags[i].field) = rt_tex_flags[i].when;
    out->maxAnisotropy = in->maxAnisotropy;
    out->mipmapFilterMode = (enum cudaTextureFilterMode)in->mipmapFilterMode;
    out->mipmapLevelBias = in->mipmapLevelBias;
    out->minMipmapLevelClamp = in->minMipmapLevelClamp;
    out->maxMipmapLevelClamp = in->maxMipmapLevelClamp;
    memcpy(out->borderColor, in->borderColor, sizeof out->borderColor);
}

/* A view's layout and format numbers are the driver's. */
_Static_assert(sizeof(struct cudaResourceViewDesc) == sizeof(CUDA_RESOURCE_VIEW_DESC), "view layouts differ");

RT_API cudaError_t cudaCreateTextureObject(cudaTextureObject_t *pTexObject, const struct cudaResourceDesc *pResDesc,
                                           const struct cudaTextureDesc *pTexDesc,
                                           const struct cudaResourceViewDesc *pResViewDesc)
{
    CUDA_RESOURCE_DESC r;
    CUDA_TEXTURE_DESC t;
    CUDA_RESOURCE_VIEW_DESC v;
    CUtexObject o = 0;
    if (!pTexObject || !pResDesc || !pTexDesc)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_res_to_cu(pResDesc, &r);
    if (e == cudaSuccess)
        e = rt_tex_to_cu(pTexDesc, &t);
    memset(&v, 0, sizeof v);
    if (pResViewDesc)
        memcpy(&v, pResViewDesc, rt_abi.resource_view_desc);
    if (e == cudaSuccess)
        e = RT_FORWARD(RT_DRV->cuTexObjectCreate(&o, &r, &t, pResViewDesc ? &v : NULL));
    if (e == cudaSuccess)
        *pTexObject = o;
    return rt_ret(e);
}

RT_API cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuTexObjectDestroy(texObject)));
}

/* cudaGet{Texture,Surface}ObjectResourceDesc: the driver's answer for
 * the object h in the runtime's struct.  The driver call is picked inside
 * RT_FORWARD, once the table is loaded. */
static cudaError_t rt_object_res_desc(struct cudaResourceDesc *out, unsigned long long h, bool surface)
{
    CUDA_RESOURCE_DESC r;
    if (!out)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = RT_FORWARD(
        (surface ? RT_DRV->cuSurfObjectGetResourceDesc : RT_DRV->cuTexObjectGetResourceDesc)(&r, h));
    if (e == cudaSuccess) {
        struct cudaResourceDesc whole;
        rt_res_from_cu(&r, &whole);
        memcpy(out, &whole, rt_abi.resource_desc);
    }
    return rt_ret(e);
}

RT_API cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *pResDesc, cudaTextureObject_t texObject)
{
    return rt_object_res_desc(pResDesc, texObject, false);
}

RT_API cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc *pTexDesc, cudaTextureObject_t texObject)
{
    CUDA_TEXTURE_DESC t;
    if (!pTexDesc)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = RT_FORWARD(RT_DRV->cuTexObjectGetTextureDesc(&t, texObject));
    if (e == cudaSuccess)
        rt_tex_from_cu(&t, pTexDesc);
    return rt_ret(e);
}

RT_API cudaError_t cudaGetTextureObjectResourceViewDesc(struct cudaResourceViewDesc *pResViewDesc,
                                                        cudaTextureObject_t texObject)
{
    CUDA_RESOURCE_VIEW_DESC v;
    if (!pResViewDesc)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = RT_FORWARD(RT_DRV->cuTexObjectGetResourceViewDesc(&v, texObject));
    if (e == cudaSuccess)
        memcpy(pResViewDesc, &v, rt_abi.resource_view_desc);
    return rt_ret(e);
}

RT_API cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t *pSurfObject, const struct cudaResourceDesc *pResDesc)
{
    CUDA_RESOURCE_DESC r;
    CUsurfObject o = 0;
    if (!pSurfObject || !pResDesc)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_res_to_cu(pResDesc, &r);
    if (e == cudaSuccess)
        e = RT_FORWARD(RT_DRV->cuSurfObjectCreate(&o, &r));
    if (e == cudaSuccess)
        *pSurfObject = o;
    return rt_ret(e);
}

RT_API cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t surfObject)
{
    return rt_ret(RT_FORWARD(RT_DRV->cuSurfObjectDestroy(surfObject)));
}

RT_API cudaError_t cudaGetSurfaceObjectResourceDesc(struct cudaResourceDesc *pResDesc, cudaSurfaceObject_t surfObject)
{
    return rt_object_res_desc(pResDesc, surfObject, true);
}
