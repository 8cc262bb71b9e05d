/*
 * Driver API of the simulated device: texture and surface objects.
 *
 * An object is the descriptions it was made of, checked against its
 * resource as CUDA checks them, and its handle is the address of the
 * simulator's record (a nonzero 64-bit value, validated through the handle
 * table: a destroyed or made-up handle is CUDA_ERROR_INVALID_VALUE).  No
 * kernel reads through one: simulated kernels are timed, with declared
 * accesses only (docs/simulator.md), so a texture fetch reads nothing as
 * far as the simulator knows.
 *
 * The resources, one rule each (the device's limits are its attributes):
 *   array      a live array; a surface needs CUDA_ARRAY3D_SURFACE_LDST
 *   mipmapped  a live mipmapped array (textures only)
 *   linear     devPtr aligned to TEXTURE_ALIGNMENT, sizeInBytes a whole
 *              number of elements, at most MAXIMUM_TEXTURE1D_LINEAR_WIDTH
 *              of them, inside one live device allocation (textures only)
 *   pitch2D    devPtr aligned to TEXTURE_ALIGNMENT, pitchInBytes a
 *              multiple of TEXTURE_PITCH_ALIGNMENT and at least a row,
 *              width, height and pitch within MAXIMUM_TEXTURE2D_LINEAR_*,
 *              every row inside one live device allocation (textures only)
 * and every failure is CUDA_ERROR_INVALID_VALUE, the one error cuda.h
 * lists for them.
 */
#include <stdlib.h>
#include <string.h>

#include "array_format.h"
#include "driver.h"

/* The value of a device attribute of the current context's device. */
static size_t attr(struct CUctx_st *ctx, CUdevice_attribute a)
{
    int v = 0;
    cuDeviceGetAttribute(&v, a, ctx->dev->ordinal);
    return (size_t)v;
}

/* A linear or pitched resource's memory: `span` bytes from p, inside one
 * live device allocation of the context's device. */
static bool memory_ok(struct CUctx_st *ctx, CUdeviceptr p, size_t span)
{
    sim_alloc_t *a;
    if (!sim_range_ok(p, span, &a))
        return false;
    return a->kind != SIM_ALLOC_HOST && a->kind != SIM_ALLOC_REGISTERED && a->kind != SIM_ALLOC_MANAGED &&
           a->device == ctx->dev->ordinal;
}

static CUresult linear_check(struct CUctx_st *ctx, const CUDA_RESOURCE_DESC *r)
{
    unsigned elem = sim_format_elem(sim_format_find(r->res.linear.format), r->res.linear.numChannels);
    size_t n = r->res.linear.sizeInBytes;
    if (!elem || !r->res.linear.devPtr || r->res.linear.devPtr % attr(ctx, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT) ||
        n == 0 || n % elem || n / elem > attr(ctx, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH) ||
        !memory_ok(ctx, r->res.linear.devPtr, n))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult pitch2d_check(struct CUctx_st *ctx, const CUDA_RESOURCE_DESC *r)
{
    unsigned elem = sim_format_elem(sim_format_find(r->res.pitch2D.format), r->res.pitch2D.numChannels);
    size_t w = r->res.pitch2D.width, h = r->res.pitch2D.height, pitch = r->res.pitch2D.pitchInBytes;
    if (!elem || !r->res.pitch2D.devPtr || r->res.pitch2D.devPtr % attr(ctx, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT) ||
        pitch % attr(ctx, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT) || w == 0 || h == 0 ||
        w > attr(ctx, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH) ||
        h > attr(ctx, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT) ||
        pitch > attr(ctx, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH) || w * elem > pitch)
        return CUDA_ERROR_INVALID_VALUE;
    return memory_ok(ctx, r->res.pitch2D.devPtr, (h - 1) * pitch + w * elem) ? CUDA_SUCCESS
                                                                               : CUDA_ERROR_INVALID_VALUE;
}

/* Checks a resource for a texture (surface: for a surface). */
static CUresult resource_check(struct CUctx_st *ctx, const CUDA_RESOURCE_DESC *r, bool surface)
{
    if (r->flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    switch ((int)r->resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
        CUDA_ARRAY3D_DESCRIPTOR d;
        if (!handle_is(r->res.array.hArray, SIM_MAGIC_ARRAY))
            return CUDA_ERROR_INVALID_VALUE;
        d = r->res.array.hArray->desc;
        return surface && !(d.Flags & CUDA_ARRAY3D_SURFACE_LDST) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        return !surface && handle_is(r->res.mipmap.hMipmappedArray, SIM_MAGIC_MIPMAP) ? CUDA_SUCCESS
                                                                                       : CUDA_ERROR_INVALID_VALUE;
    case CU_RESOURCE_TYPE_LINEAR:
        return surface ? CUDA_ERROR_INVALID_VALUE : linear_check(ctx, r);
    case CU_RESOURCE_TYPE_PITCH2D:
        return surface ? CUDA_ERROR_INVALID_VALUE : pitch2d_check(ctx, r);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

#define TEX_FLAGS_KNOWN                                                                                                \
    (CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_SRGB |                                         \
     CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION | CU_TRSF_SEAMLESS_CUBEMAP)

static CUresult texture_check(const CUDA_TEXTURE_DESC *t)
{
    for (int i = 0; i < 3; i++)
        if ((unsigned)t->addressMode[i] > CU_TR_ADDRESS_MODE_BORDER)
            return CUDA_ERROR_INVALID_VALUE;
    if ((unsigned)t->filterMode > CU_TR_FILTER_MODE_LINEAR || (unsigned)t->mipmapFilterMode > CU_TR_FILTER_MODE_LINEAR ||
        (t->flags & ~(unsigned)TEX_FLAGS_KNOWN) || t->maxAnisotropy > 16)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* A view applies to an array or a mipmapped array only. */
static CUresult view_check(const CUDA_RESOURCE_DESC *r, const CUDA_RESOURCE_VIEW_DESC *v)
{
    if (r->resType != CU_RESOURCE_TYPE_ARRAY && r->resType != CU_RESOURCE_TYPE_MIPMAPPED_ARRAY)
        return CUDA_ERROR_INVALID_VALUE;
    if ((unsigned)v->format > CU_RES_VIEW_FORMAT_UNSIGNED_BC7 || v->firstMipmapLevel > v->lastMipmapLevel ||
        v->firstLayer > v->lastLayer)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static sim_texobj_t *object_new(struct CUctx_st *ctx, uint32_t magic, const CUDA_RESOURCE_DESC *r)
{
    sim_texobj_t *o = sim_xcalloc(1, sizeof *o);
    o->magic = magic;
    o->ctx = ctx;
    o->res = *r;
    handle_add(o, magic);
    return o;
}

/* The live object a handle names, or NULL. */
static sim_texobj_t *object_get(unsigned long long h, uint32_t magic)
{
    void *p = (void *)(uintptr_t)h;
    return handle_is(p, magic) ? p : NULL;
}

static void object_free(sim_texobj_t *o)
{
    handle_del(o);
    o->magic = SIM_MAGIC_DEAD;
    free(o);
}

SIM_API CUresult cuTexObjectCreate(CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *pResDesc,
                                   const CUDA_TEXTURE_DESC *pTexDesc, const CUDA_RESOURCE_VIEW_DESC *pResViewDesc)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pTexObject || !pResDesc || !pTexDesc)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    r = resource_check(ctx, pResDesc, false);
    if (r == CUDA_SUCCESS)
        r = texture_check(pTexDesc);
    if (r == CUDA_SUCCESS && pResViewDesc)
        r = view_check(pResDesc, pResViewDesc);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_texobj_t *o = object_new(ctx, SIM_MAGIC_TEXOBJ, pResDesc);
    o->tex = *pTexDesc;
    if (pResViewDesc) {
        o->view = *pResViewDesc;
        o->has_view = true;
    }
    *pTexObject = (CUtexObject)(uintptr_t)o;
    return drv_leave(CUDA_SUCCESS);
}

/* cu{Tex,Surf}ObjectDestroy: the object h of that kind freed. */
static CUresult object_destroy(unsigned long long h, uint32_t magic)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_texobj_t *o = object_get(h, magic);
    if (!o)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    object_free(o);
    return drv_leave(CUDA_SUCCESS);
}

/* cu{Tex,Surf}ObjectGetResourceDesc: the resource the object h of that
 * kind was made over. */
static CUresult object_res_desc(CUDA_RESOURCE_DESC *out, unsigned long long h, uint32_t magic)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_texobj_t *o = object_get(h, magic);
    if (!o || !out)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *out = o->res;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuTexObjectDestroy(CUtexObject texObject)
{
    return object_destroy(texObject, SIM_MAGIC_TEXOBJ);
}

SIM_API CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUtexObject texObject)
{
    return object_res_desc(pResDesc, texObject, SIM_MAGIC_TEXOBJ);
}

SIM_API CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *pTexDesc, CUtexObject texObject)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_texobj_t *o = object_get(texObject, SIM_MAGIC_TEXOBJ);
    if (!o || !pTexDesc)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *pTexDesc = o->tex;
    return drv_leave(CUDA_SUCCESS);
}

/* An object made without a view has none to return. */
SIM_API CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *pResViewDesc, CUtexObject texObject)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_texobj_t *o = object_get(texObject, SIM_MAGIC_TEXOBJ);
    if (!o || !pResViewDesc || !o->has_view)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *pResViewDesc = o->view;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuSurfObjectCreate(CUsurfObject *pSurfObject, const CUDA_RESOURCE_DESC *pResDesc)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pSurfObject || !pResDesc)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    r = resource_check(ctx, pResDesc, true);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    *pSurfObject = (CUsurfObject)(uintptr_t)object_new(ctx, SIM_MAGIC_SURFOBJ, pResDesc);
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuSurfObjectDestroy(CUsurfObject surfObject)
{
    return object_destroy(surfObject, SIM_MAGIC_SURFOBJ);
}

SIM_API CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUsurfObject surfObject)
{
    return object_res_desc(pResDesc, surfObject, SIM_MAGIC_SURFOBJ);
}

void sim_texobjs_free_ctx(struct CUctx_st *ctx)
{
    static const uint32_t kinds[] = {SIM_MAGIC_TEXOBJ, SIM_MAGIC_SURFOBJ};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        void **list;
        size_t n = handle_list(kinds[k], &list);
        for (size_t i = 0; i < n; i++)
            if (((sim_texobj_t *)list[i])->ctx == ctx)
                object_free(list[i]);
        free(list);
    }
}
