/*
 * Driver API of the simulated device: CUDA arrays and mipmapped arrays.
 *
 * An array is device memory of its own: one allocation of kind
 * SIM_ALLOC_ARRAY (counted in the device's pages like any other, so
 * cuMemGetInfo and the shared device see it) that no program pointer
 * reaches (engine_mem.c, sim_alloc_live).  Its layout is the simulator's
 * (CUDA's is opaque): rows of Width elements packed, max(Height, 1) rows
 * per layer, max(Depth, 1) layers; an element is the format's channel size
 * times its channels (array_format.h).  Copies address it through that
 * layout (drv_array_at; driver_copy.c), bounds checked against its extents.
 *
 * A mipmapped array is its levels, each an array of its own made with it
 * and freed with it; cuMipmappedArrayGetLevel hands out those arrays.
 *
 * Not simulated: sparse arrays and arrays of deferred mapping (the device
 * reports neither), block-compressed and video formats (array_format.h):
 * asked for, CUDA_ERROR_NOT_SUPPORTED.
 */
#include <stdlib.h>
#include <string.h>

#include "array_format.h"
#include "driver.h"

/* ------------------------------------------------------------------------
 * Shapes
 * ---------------------------------------------------------------------- */

/* The kinds of array a descriptor can describe, one row each: which flags
 * and which extents (0 or not) make it, and the device attributes that
 * bound its width, height and depth (0: that extent is not bounded here). */
typedef struct shape_s {
    const char *name;
    bool layered, cubemap, height, depth;
    CUdevice_attribute max_w, max_h, max_d;
} shape_t;

static const shape_t shapes[] = {
    {"1D", false, false, false, false, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH, 0, 0},
    {"2D", false, false, true, false, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH,
     CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT, 0},
    {"3D", false, false, true, true, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH,
     CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH},
    {"1D layered", true, false, false, true, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH, 0,
     CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS},
    {"2D layered", true, false, true, true, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH,
     CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS},
    {"cubemap", false, true, true, true, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH, 0, 0},
    {"layered cubemap", true, true, true, true, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH, 0,
     CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS},
};

#define ARRAY_FLAGS_KNOWN                                                                                              \
    (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_TEXTURE_GATHER |           \
     CUDA_ARRAY3D_DEPTH_TEXTURE | CUDA_ARRAY3D_COLOR_ATTACHMENT)
#define ARRAY_FLAGS_UNSIMULATED (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)

/* Whether an extent is within the device attribute's bound. */
static bool within(size_t v, CUdevice_attribute a, int device)
{
    int max = 0;
    return !a || (cuDeviceGetAttribute(&max, a, device) == CUDA_SUCCESS && v <= (size_t)max);
}

/* The values CUDA defines for the formats the simulator does not lay out
 * (block-compressed 0x91-0x9e, video 0x9f-0xb5, 10-10-10-2 0x50). */
static bool format_unsimulated(CUarray_format f)
{
    return (f >= 0x91 && f <= 0xb5) || f == 0x50;
}

/* Checks a descriptor for an array of `device`; *elem is its element size. */
static CUresult desc_check(const CUDA_ARRAY3D_DESCRIPTOR *d, int device, unsigned *elem)
{
    if (d->Flags & ARRAY_FLAGS_UNSIMULATED)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (d->Flags & ~(unsigned)ARRAY_FLAGS_KNOWN)
        return CUDA_ERROR_INVALID_VALUE;
    const sim_format_t *f = sim_format_find(d->Format);
    if (!f)
        return format_unsimulated(d->Format) ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    *elem = sim_format_elem(f, d->NumChannels);
    if (!*elem || d->Width == 0)
        return CUDA_ERROR_INVALID_VALUE;
    bool layered = d->Flags & CUDA_ARRAY3D_LAYERED, cubemap = d->Flags & CUDA_ARRAY3D_CUBEMAP;
    const shape_t *sh = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (shapes[i].layered == layered && shapes[i].cubemap == cubemap && shapes[i].height == (d->Height != 0) &&
            shapes[i].depth == (d->Depth != 0))
            sh = &shapes[i];
    if (!sh)
        return CUDA_ERROR_INVALID_VALUE;
    if (cubemap && (d->Width != d->Height || d->Depth % 6 || (!layered && d->Depth != 6)))
        return CUDA_ERROR_INVALID_VALUE;
    if ((d->Flags & CUDA_ARRAY3D_TEXTURE_GATHER) && strcmp(sh->name, "2D") != 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t depth = cubemap ? d->Depth / 6 : d->Depth;
    if (!within(d->Width, sh->max_w, device) || !within(d->Height, sh->max_h, device) ||
        !within(depth, sh->max_d, device))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Arrays
 * ---------------------------------------------------------------------- */

/* Makes an array of ctx's device (the descriptor checked). */
static CUresult array_new(struct CUctx_st *ctx, const CUDA_ARRAY3D_DESCRIPTOR *d, struct CUarray_st **out)
{
    unsigned elem = 0;
    CUresult r = desc_check(d, ctx->dev->ordinal, &elem);
    if (r != CUDA_SUCCESS)
        return r;
    size_t pitch = d->Width * elem, rows = d->Height ? d->Height : 1, layers = d->Depth ? d->Depth : 1;
    if (rows > SIZE_MAX / pitch || layers > SIZE_MAX / (pitch * rows))
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_alloc_t *a;
    r = sim_dev_alloc(ctx->dev, pitch * rows * layers, SIM_ALLOC_ARRAY, ctx, &a);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUarray_st *arr = sim_xcalloc(1, sizeof *arr);
    *arr = (struct CUarray_st){
        .magic = SIM_MAGIC_ARRAY,
        .ctx = ctx,
        .desc = *d,
        .elem = elem,
        .addr = a->addr,
        .pitch = pitch,
        .rows = rows,
        .layers = layers,
    };
    handle_add(arr, SIM_MAGIC_ARRAY);
    *out = arr;
    return CUDA_SUCCESS;
}

/* Returns an array's memory and forgets the handle. */
static void array_free(struct CUarray_st *arr)
{
    handle_del(arr);
    sim_alloc_t *a = sim_alloc_exact(arr->addr);
    if (a && a->kind == SIM_ALLOC_ARRAY)
        sim_alloc_release(a);
    arr->magic = SIM_MAGIC_DEAD;
    free(arr);
}

SIM_API CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pHandle || !pAllocateArray)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    return drv_leave(array_new(ctx, pAllocateArray, pHandle));
}

SIM_API CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
    if (!pAllocateArray)
        return cuArray3DCreate_v2(pHandle, NULL);
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = pAllocateArray->Width,
                                 .Height = pAllocateArray->Height,
                                 .Format = pAllocateArray->Format,
                                 .NumChannels = pAllocateArray->NumChannels};
    return cuArray3DCreate_v2(pHandle, &d);
}

/* The array h names, alive, or NULL. */
static struct CUarray_st *array_get(CUarray h)
{
    return handle_is(h, SIM_MAGIC_ARRAY) ? h : NULL;
}

SIM_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUarray_st *arr = array_get(hArray);
    if (!arr)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    if (!pArrayDescriptor)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *pArrayDescriptor = arr->desc;
    return drv_leave(CUDA_SUCCESS);
}

/* The 2D descriptor of a 1D or 2D array; a 3D or layered one has none. */
SIM_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUarray_st *arr = array_get(hArray);
    if (!arr)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    if (!pArrayDescriptor || arr->desc.Depth)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *pArrayDescriptor = (CUDA_ARRAY_DESCRIPTOR){arr->desc.Width, arr->desc.Height, arr->desc.Format,
                                                arr->desc.NumChannels};
    return drv_leave(CUDA_SUCCESS);
}

/* Only an array of deferred mapping has memory requirements, and the
 * simulator makes none. */
SIM_API CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *memoryRequirements, CUarray array,
                                              CUdevice device)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    (void)device;
    if (!array_get(array))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    (void)memoryRequirements;
    return drv_leave(CUDA_ERROR_INVALID_VALUE);
}

/* Like cuMemFree, waits for the device first (work may still use it).  A
 * level of a mipmapped array goes with it only. */
SIM_API CUresult cuArrayDestroy(CUarray hArray)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUarray_st *arr = array_get(hArray);
    if (!arr || arr->mip)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    sim_device_wait_idle(arr->ctx->dev);
    arr = array_get(hArray); /* another thread may have destroyed it meanwhile */
    if (!arr)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    array_free(arr);
    return drv_leave(CUDA_SUCCESS);
}

CUresult drv_array_at(CUarray h, const size_t pos[3], size_t width, size_t height, bool linear, uintptr_t *addr,
                      size_t *pitch)
{
    struct CUarray_st *arr = array_get(h);
    if (!arr)
        return CUDA_ERROR_INVALID_VALUE;
    size_t total = arr->pitch * arr->rows * arr->layers;
    if (linear) {
        if (pos[0] > total || width > total - pos[0])
            return CUDA_ERROR_INVALID_VALUE;
        *addr = arr->addr + pos[0];
        *pitch = width;
        return CUDA_SUCCESS;
    }
    if (pos[0] % arr->elem || width % arr->elem || pos[0] > arr->pitch || width > arr->pitch - pos[0] ||
        pos[1] > arr->rows || height > arr->rows - pos[1] || pos[2] >= arr->layers)
        return CUDA_ERROR_INVALID_VALUE;
    *addr = arr->addr + (pos[2] * arr->rows + pos[1]) * arr->pitch + pos[0];
    *pitch = arr->pitch;
    return CUDA_SUCCESS;
}

bool drv_array_of(CUarray h, int device)
{
    struct CUarray_st *arr = array_get(h);
    return arr && arr->ctx->dev->ordinal == device;
}

/* ------------------------------------------------------------------------
 * Mipmapped arrays
 * ---------------------------------------------------------------------- */

static struct CUmipmappedArray_st *mipmap_get(CUmipmappedArray h)
{
    return handle_is(h, SIM_MAGIC_MIPMAP) ? h : NULL;
}

static void mipmap_free(struct CUmipmappedArray_st *m)
{
    handle_del(m);
    for (unsigned i = 0; i < m->nlevels; i++)
        if (m->levels[i])
            array_free(m->levels[i]);
    free(m->levels);
    m->magic = SIM_MAGIC_DEAD;
    free(m);
}

/* An extent of level l: halved l times, at least 1 (0 stays 0). */
static size_t level_extent(size_t e, unsigned l)
{
    if (e == 0)
        return 0;
    e = l >= sizeof e * 8 ? 0 : e >> l;
    return e ? e : 1;
}

/* The levels an extent allows: 1 + floor(log2(largest extent)). */
static unsigned levels_max(const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    size_t m = d->Width;
    if (d->Height > m)
        m = d->Height;
    if (!(d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) && d->Depth > m)
        m = d->Depth;
    unsigned n = 0;
    for (; m; m >>= 1)
        n++;
    return n;
}

SIM_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                        unsigned int numMipmapLevels)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pHandle || !pMipmappedArrayDesc || numMipmapLevels == 0)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    const CUDA_ARRAY3D_DESCRIPTOR *d = pMipmappedArrayDesc;
    unsigned elem;
    r = desc_check(d, ctx->dev->ordinal, &elem);
    if (r == CUDA_SUCCESS && numMipmapLevels > levels_max(d))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    struct CUmipmappedArray_st *m = sim_xcalloc(1, sizeof *m);
    *m = (struct CUmipmappedArray_st){.magic = SIM_MAGIC_MIPMAP, .ctx = ctx, .desc = *d};
    m->levels = sim_xcalloc(numMipmapLevels, sizeof *m->levels);
    handle_add(m, SIM_MAGIC_MIPMAP);
    bool layers_kept = d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP);
    for (unsigned l = 0; l < numMipmapLevels && r == CUDA_SUCCESS; l++) {
        CUDA_ARRAY3D_DESCRIPTOR ld = *d;
        ld.Width = level_extent(d->Width, l);
        ld.Height = level_extent(d->Height, l);
        ld.Depth = layers_kept ? d->Depth : level_extent(d->Depth, l);
        if (d->Flags & CUDA_ARRAY3D_CUBEMAP)
            ld.Height = ld.Width;
        r = array_new(ctx, &ld, &m->levels[l]);
        if (r == CUDA_SUCCESS) {
            m->levels[l]->mip = m;
            m->nlevels = l + 1;
        }
    }
    if (r != CUDA_SUCCESS) {
        mipmap_free(m);
        return drv_leave(r);
    }
    *pHandle = m;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMipmappedArrayGetLevel(CUarray *pLevelArray, CUmipmappedArray hMipmappedArray, unsigned int level)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUmipmappedArray_st *m = mipmap_get(hMipmappedArray);
    if (!m)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    if (!pLevelArray || level >= m->nlevels)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *pLevelArray = m->levels[level];
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *memoryRequirements,
                                                       CUmipmappedArray mipmap, CUdevice device)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    (void)memoryRequirements;
    (void)device;
    if (!mipmap_get(mipmap))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    return drv_leave(CUDA_ERROR_INVALID_VALUE);
}

SIM_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUmipmappedArray_st *m = mipmap_get(hMipmappedArray);
    if (!m)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    sim_device_wait_idle(m->ctx->dev);
    m = mipmap_get(hMipmappedArray);
    if (!m)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    mipmap_free(m);
    return drv_leave(CUDA_SUCCESS);
}

void sim_arrays_free_ctx(struct CUctx_st *ctx)
{
    void **list;
    size_t n = handle_list(SIM_MAGIC_MIPMAP, &list);
    for (size_t i = 0; i < n; i++)
        if (((struct CUmipmappedArray_st *)list[i])->ctx == ctx)
            mipmap_free(list[i]);
    free(list);
    n = handle_list(SIM_MAGIC_ARRAY, &list);
    for (size_t i = 0; i < n; i++)
        if (((struct CUarray_st *)list[i])->ctx == ctx)
            array_free(list[i]);
    free(list);
}
