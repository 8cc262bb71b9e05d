/*
 * Proves texture and surface objects on the simulated device: an object
 * over an array, a mipmapped array, linear or pitched memory is made with
 * a nonzero handle and gives back the descriptions it was made of (the
 * runtime's and the driver's); CUDA's rules refuse a pitched resource
 * that is too small for its rows, misaligned (textureAlignment 512,
 * texturePitchAlignment 32 of the modelled H100) or of a pitch narrower
 * than a row, a linear one past its allocation, a surface over an array
 * made without cudaArraySurfaceLoadStore or over linear memory, a view on
 * linear memory, and a destroyed or made-up handle.  Meson runs it with
 * CUCACHE_SIM_CAPACITY=1G.
 */
#include "simtest.h"

#include <string.h>

static struct cudaTextureDesc point_desc(void)
{
    struct cudaTextureDesc t;
    memset(&t, 0, sizeof t);
    t.addressMode[0] = cudaAddressModeClamp;
    t.addressMode[1] = cudaAddressModeWrap;
    t.filterMode = cudaFilterModePoint;
    t.readMode = cudaReadModeElementType;
    t.normalizedCoords = 1;
    t.borderColor[2] = 0.5f;
    return t;
}

static void test_array_texture(void **state)
{
    (void)state;
    struct cudaChannelFormatDesc d = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
    cudaArray_t a = NULL;
    SIM_OK(cudaMallocArray(&a, &d, 64, 32, 0));
    struct cudaResourceDesc r;
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypeArray;
    r.res.array.array = a;
    struct cudaTextureDesc t = point_desc(), tg;
    cudaTextureObject_t tex = 0;
    SIM_OK(cudaCreateTextureObject(&tex, &r, &t, NULL));
    assert_true(tex != 0);
    struct cudaResourceDesc rg;
    SIM_OK(cudaGetTextureObjectResourceDesc(&rg, tex));
    assert_int_equal(rg.resType, cudaResourceTypeArray);
    assert_ptr_equal(rg.res.array.array, a);
    SIM_OK(cudaGetTextureObjectTextureDesc(&tg, tex));
    assert_memory_equal(&tg, &t, sizeof t);
    CUDA_TEXTURE_DESC ct;
    CU_OK(cuTexObjectGetTextureDesc(&ct, tex));
    assert_int_equal(ct.flags, CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES);
    struct cudaResourceViewDesc v;
    SIM_EXPECT(cudaGetTextureObjectResourceViewDesc(&v, tex), cudaErrorInvalidValue); /* made without one */

    /* with a view */
    cudaTextureObject_t tex2 = 0;
    memset(&v, 0, sizeof v);
    v.format = (enum cudaResourceViewFormat)0x16; /* cudaResViewFormatFloat1 */
    v.width = 64;
    v.height = 32;
    SIM_OK(cudaCreateTextureObject(&tex2, &r, &t, &v));
    assert_true(tex2 != tex);
    struct cudaResourceViewDesc vg;
    SIM_OK(cudaGetTextureObjectResourceViewDesc(&vg, tex2));
    assert_memory_equal(&vg, &v, sizeof v);

    SIM_OK(cudaDestroyTextureObject(tex2));
    SIM_OK(cudaDestroyTextureObject(tex));
    SIM_EXPECT(cudaDestroyTextureObject(tex), cudaErrorInvalidValue);
    SIM_EXPECT(cudaGetTextureObjectResourceDesc(&rg, tex), cudaErrorInvalidValue);
    SIM_EXPECT(cudaDestroyTextureObject(0x1234), cudaErrorInvalidValue);
    /* an array freed before the object is made */
    SIM_OK(cudaFreeArray(a));
    SIM_EXPECT(cudaCreateTextureObject(&tex, &r, &t, NULL), cudaErrorInvalidValue);
    (void)cudaGetLastError();
}

static void test_pitch2d_rules(void **state)
{
    (void)state;
    enum { W = 100, H = 16, PITCH = 512 }; /* 100 float2: 800 bytes a row */
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 1024 * H));
    struct cudaResourceDesc r;
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypePitch2D;
    r.res.pitch2D.devPtr = p;
    r.res.pitch2D.desc = cudaCreateChannelDesc(32, 32, 0, 0, cudaChannelFormatKindFloat);
    r.res.pitch2D.width = W;
    r.res.pitch2D.height = H;
    r.res.pitch2D.pitchInBytes = 1024;
    struct cudaTextureDesc t = point_desc();
    cudaTextureObject_t tex = 0;
    SIM_OK(cudaCreateTextureObject(&tex, &r, &t, NULL));
    struct cudaResourceDesc rg;
    SIM_OK(cudaGetTextureObjectResourceDesc(&rg, tex));
    assert_int_equal(rg.res.pitch2D.pitchInBytes, 1024);
    assert_int_equal(rg.res.pitch2D.desc.x, 32);
    assert_int_equal(rg.res.pitch2D.desc.y, 32);
    assert_int_equal(rg.res.pitch2D.desc.f, cudaChannelFormatKindFloat);
    SIM_OK(cudaDestroyTextureObject(tex));

    r.res.pitch2D.pitchInBytes = PITCH; /* narrower than a row */
    SIM_EXPECT(cudaCreateTextureObject(&tex, &r, &t, NULL), cudaErrorInvalidValue);
    r.res.pitch2D.pitchInBytes = 1024 + 16; /* not a multiple of 32 (the rows would fit) */
    r.res.pitch2D.height = 4;
    SIM_EXPECT(cudaCreateTextureObject(&tex, &r, &t, NULL), cudaErrorInvalidValue);
    r.res.pitch2D.height = H;
    r.res.pitch2D.pitchInBytes = 1024;
    r.res.pitch2D.devPtr = (char *)p + 256; /* not aligned to 512 (the rows would fit) */
    r.res.pitch2D.height = 4;
    SIM_EXPECT(cudaCreateTextureObject(&tex, &r, &t, NULL), cudaErrorInvalidValue);
    r.res.pitch2D.devPtr = p;
    r.res.pitch2D.height = H + 1; /* a row past the allocation */
    SIM_EXPECT(cudaCreateTextureObject(&tex, &r, &t, NULL), cudaErrorInvalidValue);
    r.res.pitch2D.height = H;
    r.res.pitch2D.desc = cudaCreateChannelDesc(32, 32, 32, 0, cudaChannelFormatKindFloat);
    SIM_EXPECT(cudaCreateTextureObject(&tex, &r, &t, NULL), cudaErrorInvalidChannelDescriptor);
    (void)cudaGetLastError();

    /* the driver's own check, on the same rules */
    CUDA_RESOURCE_DESC cr;
    memset(&cr, 0, sizeof cr);
    cr.resType = CU_RESOURCE_TYPE_PITCH2D;
    cr.res.pitch2D.devPtr = (CUdeviceptr)(uintptr_t)p;
    cr.res.pitch2D.format = CU_AD_FORMAT_FLOAT;
    cr.res.pitch2D.numChannels = 2;
    cr.res.pitch2D.width = W;
    cr.res.pitch2D.height = H;
    cr.res.pitch2D.pitchInBytes = 800; /* a multiple of 32, one row exactly */
    CUDA_TEXTURE_DESC ct;
    memset(&ct, 0, sizeof ct);
    CUtexObject ctex = 0;
    CU_OK(cuTexObjectCreate(&ctex, &cr, &ct, NULL));
    CU_OK(cuTexObjectDestroy(ctex));
    ct.filterMode = (CUfilter_mode)2;
    CU_EXPECT(cuTexObjectCreate(&ctex, &cr, &ct, NULL), CUDA_ERROR_INVALID_VALUE);
    ct.filterMode = CU_TR_FILTER_MODE_POINT;
    CUDA_RESOURCE_VIEW_DESC v;
    memset(&v, 0, sizeof v);
    CU_EXPECT(cuTexObjectCreate(&ctex, &cr, &ct, &v), CUDA_ERROR_INVALID_VALUE); /* a view of memory */
    SIM_OK(cudaFree(p));
    CU_EXPECT(cuTexObjectCreate(&ctex, &cr, &ct, NULL), CUDA_ERROR_INVALID_VALUE); /* freed */
}

static void test_linear(void **state)
{
    (void)state;
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 4096));
    struct cudaResourceDesc r;
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypeLinear;
    r.res.linear.devPtr = p;
    r.res.linear.desc = cudaCreateChannelDesc(8, 0, 0, 0, cudaChannelFormatKindUnsigned);
    r.res.linear.sizeInBytes = 4096;
    struct cudaTextureDesc t = point_desc();
    cudaTextureObject_t tex = 0;
    SIM_OK(cudaCreateTextureObject(&tex, &r, &t, NULL));
    SIM_OK(cudaDestroyTextureObject(tex));
    r.res.linear.sizeInBytes = 4097;
    SIM_EXPECT(cudaCreateTextureObject(&tex, &r, &t, NULL), cudaErrorInvalidValue);
    /* host memory is no texture's */
    static char host[4096] __attribute__((aligned(512)));
    r.res.linear.devPtr = host;
    r.res.linear.sizeInBytes = sizeof host;
    SIM_EXPECT(cudaCreateTextureObject(&tex, &r, &t, NULL), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    SIM_OK(cudaFree(p));
}

static void test_surface(void **state)
{
    (void)state;
    struct cudaChannelFormatDesc d = cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsigned);
    cudaArray_t plain = NULL, ldst = NULL;
    SIM_OK(cudaMallocArray(&plain, &d, 32, 32, 0));
    SIM_OK(cudaMallocArray(&ldst, &d, 32, 32, cudaArraySurfaceLoadStore));
    struct cudaResourceDesc r;
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypeArray;
    r.res.array.array = plain;
    cudaSurfaceObject_t s = 0;
    SIM_EXPECT(cudaCreateSurfaceObject(&s, &r), cudaErrorInvalidValue);
    r.res.array.array = ldst;
    SIM_OK(cudaCreateSurfaceObject(&s, &r));
    assert_true(s != 0);
    struct cudaResourceDesc rg;
    SIM_OK(cudaGetSurfaceObjectResourceDesc(&rg, s));
    assert_ptr_equal(rg.res.array.array, ldst);
    /* a surface handle is no texture */
    SIM_EXPECT(cudaDestroyTextureObject(s), cudaErrorInvalidValue);
    SIM_OK(cudaDestroySurfaceObject(s));
    SIM_EXPECT(cudaDestroySurfaceObject(s), cudaErrorInvalidValue);
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 4096));
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypeLinear;
    r.res.linear.devPtr = p;
    r.res.linear.desc = d;
    r.res.linear.sizeInBytes = 4096;
    SIM_EXPECT(cudaCreateSurfaceObject(&s, &r), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    SIM_OK(cudaFree(p));
    SIM_OK(cudaFreeArray(plain));
    SIM_OK(cudaFreeArray(ldst));
}

static void test_mipmapped_texture(void **state)
{
    (void)state;
    struct cudaChannelFormatDesc d = cudaCreateChannelDesc(16, 0, 0, 0, cudaChannelFormatKindFloat);
    cudaMipmappedArray_t m = NULL;
    SIM_OK(cudaMallocMipmappedArray(&m, &d, (struct cudaExtent){64, 64, 0}, 3, 0));
    struct cudaResourceDesc r;
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypeMipmappedArray;
    r.res.mipmap.mipmap = m;
    struct cudaTextureDesc t = point_desc();
    t.readMode = cudaReadModeNormalizedFloat;
    t.maxMipmapLevelClamp = 2.0f;
    cudaTextureObject_t tex = 0;
    SIM_OK(cudaCreateTextureObject(&tex, &r, &t, NULL));
    struct cudaTextureDesc tg;
    SIM_OK(cudaGetTextureObjectTextureDesc(&tg, tex));
    assert_memory_equal(&tg, &t, sizeof t);
    SIM_OK(cudaDestroyTextureObject(tex));
    SIM_OK(cudaFreeMipmappedArray(m));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_array_texture), SIMTEST(test_pitch2d_rules), SIMTEST(test_linear),
        SIMTEST(test_surface),       SIMTEST(test_mipmapped_texture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
