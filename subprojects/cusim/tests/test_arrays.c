/*
 * Proves CUDA arrays on the simulated device: an array takes device memory
 * that cuMemGetInfo sees and gives it back when freed; cudaArrayGetInfo
 * and cuArray3DGetDescriptor give back what was asked for; bytes copied in
 * with cudaMemcpy2DToArray, cudaMemcpyToArray, cuMemcpyHtoA and
 * cudaMemcpy3D come back unchanged through every way out, and between
 * arrays; a copy that leaves the array, an unaligned offset, a destroyed
 * array, a channel descriptor or format CUDA does not lay out, and an
 * impossible shape are refused with CUDA's error and move nothing;
 * mipmapped arrays have their levels' extents.  Meson runs it with
 * CUCACHE_SIM_CAPACITY=1G.
 */
#include "simtest.h"

#include <stdlib.h>
#include <string.h>

enum { W = 100, H = 20, ELEM = 4 }; /* a W x H array of uchar4 */

static struct cudaChannelFormatDesc uchar4_desc(void)
{
    return cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsigned);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 7 + seed);
}

static void test_memory_counted(void **state)
{
    (void)state;
    size_t free0, free1, free2, total;
    SIM_OK(cudaFree(NULL));
    SIM_OK(cudaMemGetInfo(&free0, &total));
    struct cudaChannelFormatDesc d = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
    cudaArray_t a = NULL;
    SIM_OK(cudaMalloc3DArray(&a, &d, (struct cudaExtent){1024, 1024, 4}, 0)); /* 16 MiB */
    SIM_OK(cudaMemGetInfo(&free1, &total));
    assert_int_equal(free0 - free1, (size_t)16 << 20);
    SIM_OK(cudaFreeArray(a));
    SIM_OK(cudaMemGetInfo(&free2, &total));
    assert_int_equal(free2, free0);
    SIM_OK(cudaFreeArray(NULL));
    /* more than the device holds */
    SIM_EXPECT(cudaMalloc3DArray(&a, &d, (struct cudaExtent){16384, 16384, 2}, 0), cudaErrorMemoryAllocation);
}

static void test_info(void **state)
{
    (void)state;
    struct cudaChannelFormatDesc d = uchar4_desc(), got;
    struct cudaExtent e;
    unsigned flags = 99;
    cudaArray_t a = NULL;
    SIM_OK(cudaMallocArray(&a, &d, W, H, cudaArraySurfaceLoadStore));
    SIM_OK(cudaArrayGetInfo(&got, &e, &flags, a));
    assert_int_equal(got.x, 8);
    assert_int_equal(got.y, 8);
    assert_int_equal(got.z, 8);
    assert_int_equal(got.w, 8);
    assert_int_equal(got.f, cudaChannelFormatKindUnsigned);
    assert_int_equal(e.width, W);
    assert_int_equal(e.height, H);
    assert_int_equal(e.depth, 0);
    assert_int_equal(flags, cudaArraySurfaceLoadStore);
    CUDA_ARRAY3D_DESCRIPTOR d3;
    CU_OK(cuArray3DGetDescriptor_v2(&d3, (CUarray)(void *)a));
    assert_int_equal(d3.Format, CU_AD_FORMAT_UNSIGNED_INT8);
    assert_int_equal(d3.NumChannels, 4);
    CUDA_ARRAY_DESCRIPTOR d2;
    CU_OK(cuArrayGetDescriptor_v2(&d2, (CUarray)(void *)a));
    assert_int_equal(d2.Width, W);
    assert_int_equal(d2.Height, H);
    SIM_OK(cudaFreeArray(a));
    SIM_EXPECT(cudaArrayGetInfo(&got, &e, &flags, a), cudaErrorInvalidResourceHandle);
    SIM_EXPECT(cudaFreeArray(a), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
}

static void test_refused_shapes(void **state)
{
    (void)state;
    cudaArray_t a = NULL;
    struct cudaChannelFormatDesc d = uchar4_desc();
    struct cudaChannelFormatDesc three = cudaCreateChannelDesc(8, 8, 8, 0, cudaChannelFormatKindUnsigned);
    struct cudaChannelFormatDesc mixed = cudaCreateChannelDesc(8, 16, 0, 0, cudaChannelFormatKindUnsigned);
    struct cudaChannelFormatDesc f8 = cudaCreateChannelDesc(8, 0, 0, 0, cudaChannelFormatKindFloat);
    SIM_EXPECT(cudaMallocArray(&a, &three, W, H, 0), cudaErrorInvalidChannelDescriptor);
    SIM_EXPECT(cudaMallocArray(&a, &mixed, W, H, 0), cudaErrorInvalidChannelDescriptor);
    SIM_EXPECT(cudaMallocArray(&a, &f8, W, H, 0), cudaErrorInvalidChannelDescriptor);
    SIM_EXPECT(cudaMallocArray(&a, &d, 0, H, 0), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMallocArray(&a, &d, 131073, 0, 0), cudaErrorInvalidValue); /* past maxTexture1D */
    SIM_EXPECT(cudaMalloc3DArray(&a, &d, (struct cudaExtent){W, 0, 3}, 0), cudaErrorInvalidValue); /* no layers */
    SIM_EXPECT(cudaMalloc3DArray(&a, &d, (struct cudaExtent){W, H, 6}, cudaArrayCubemap), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMallocArray(&a, &d, W, H, cudaArraySparse), cudaErrorNotSupported);
    (void)cudaGetLastError();
    CUarray ca = NULL;
    CUDA_ARRAY3D_DESCRIPTOR bc = {.Width = 64, .Height = 64, .Format = CU_AD_FORMAT_BC1_UNORM, .NumChannels = 4};
    CU_EXPECT(cuArray3DCreate_v2(&ca, &bc), CUDA_ERROR_NOT_SUPPORTED);
    CUDA_ARRAY3D_DESCRIPTOR odd = {.Width = 64, .Format = (CUarray_format)0x77, .NumChannels = 1};
    CU_EXPECT(cuArray3DCreate_v2(&ca, &odd), CUDA_ERROR_INVALID_VALUE);
    CUDA_ARRAY3D_DESCRIPTOR cube = {.Width = 32, .Height = 32, .Depth = 6, .Format = CU_AD_FORMAT_FLOAT,
                                    .NumChannels = 1, .Flags = CUDA_ARRAY3D_CUBEMAP};
    CU_OK(cuArray3DCreate_v2(&ca, &cube));
    CUDA_ARRAY_DESCRIPTOR d2;
    CU_EXPECT(cuArrayGetDescriptor_v2(&d2, ca), CUDA_ERROR_INVALID_VALUE); /* not 1D or 2D */
    CU_OK(cuArrayDestroy(ca));
    CU_EXPECT(cuArrayDestroy(ca), CUDA_ERROR_INVALID_HANDLE);
}

/* 2D in, 2D out, and the deprecated linear calls across rows. */
static void test_round_trip_2d(void **state)
{
    (void)state;
    struct cudaChannelFormatDesc d = uchar4_desc();
    cudaArray_t a = NULL;
    SIM_OK(cudaMallocArray(&a, &d, W, H, 0));
    const size_t row = W * ELEM, spitch = row + 24;
    uint8_t *in = malloc(spitch * H), *out = calloc(1, row * H);
    fill(in, spitch * H, 3);
    SIM_OK(cudaMemcpy2DToArray(a, 0, 0, in, spitch, row, H, cudaMemcpyHostToDevice));
    SIM_OK(cudaMemcpy2DFromArray(out, row, a, 0, 0, row, H, cudaMemcpyDeviceToHost));
    for (size_t y = 0; y < H; y++)
        assert_memory_equal(out + y * row, in + y * spitch, row);

    /* a sub-rectangle through device memory, on a stream */
    void *dev = NULL;
    cudaStream_t s;
    SIM_OK(cudaStreamCreate(&s));
    SIM_OK(cudaMalloc(&dev, 16 * 3));
    SIM_OK(cudaMemcpy2DFromArrayAsync(dev, 16, a, 8 * ELEM, 5, 16, 3, cudaMemcpyDeviceToDevice, s));
    uint8_t sub[48];
    SIM_OK(cudaMemcpyAsync(sub, dev, sizeof sub, cudaMemcpyDeviceToHost, s));
    SIM_OK(cudaStreamSynchronize(s));
    for (size_t y = 0; y < 3; y++)
        assert_memory_equal(sub + y * 16, in + (5 + y) * spitch + 8 * ELEM, 16);

    /* linear: from row 2, byte 40, across three rows */
    size_t n = 2 * row + 100;
    uint8_t *lin = malloc(n), *back = calloc(1, n);
    fill(lin, n, 99);
    SIM_OK(cudaMemcpyToArray(a, 40, 2, lin, n, cudaMemcpyHostToDevice));
    SIM_OK(cudaMemcpyFromArray(back, a, 40, 2, n, cudaMemcpyDeviceToHost));
    assert_memory_equal(back, lin, n);
    CU_OK(cuMemcpyAtoH_v2(back, (CUarray)(void *)a, 2 * row + 40, n));
    assert_memory_equal(back, lin, n);

    /* array to array */
    cudaArray_t b = NULL;
    SIM_OK(cudaMallocArray(&b, &d, W, H, 0));
    SIM_OK(cudaMemcpy2DArrayToArray(b, 0, 0, a, 0, 0, row, H, cudaMemcpyDeviceToDevice));
    SIM_OK(cudaMemcpy2DFromArray(out, row, b, 0, 0, row, H, cudaMemcpyDeviceToHost));
    SIM_OK(cudaMemcpy2DFromArray(in, row, a, 0, 0, row, H, cudaMemcpyDeviceToHost));
    assert_memory_equal(out, in, row * H);
    memset(out, 0, row * H);
    SIM_OK(cudaMemcpyArrayToArray(b, 0, 1, a, 0, 0, row, cudaMemcpyDeviceToDevice)); /* row 0 of a to row 1 */
    SIM_OK(cudaMemcpy2DFromArray(out, row, b, 0, 1, row, 1, cudaMemcpyDeviceToHost));
    assert_memory_equal(out, in, row);

    SIM_OK(cudaFreeArray(b));
    SIM_OK(cudaFreeArray(a));
    SIM_OK(cudaFree(dev));
    SIM_OK(cudaStreamDestroy(s));
    free(in);
    free(out);
    free(lin);
    free(back);
}

static void test_bounds(void **state)
{
    (void)state;
    struct cudaChannelFormatDesc d = uchar4_desc();
    cudaArray_t a = NULL;
    const size_t row = W * ELEM;
    SIM_OK(cudaMallocArray(&a, &d, W, H, 0));
    uint8_t *buf = malloc(row * (H + 1));
    memset(buf, 0x5a, row * (H + 1));
    SIM_OK(cudaMemcpy2DToArray(a, 0, 0, buf, row, row, H, cudaMemcpyHostToDevice));
    memset(buf, 0x11, row * (H + 1));
    /* one row too many, one byte too wide, an offset that is no element */
    SIM_EXPECT(cudaMemcpy2DToArray(a, 0, 0, buf, row, row, H + 1, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemcpy2DToArray(a, ELEM, 0, buf, row, row, 1, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemcpy2DToArray(a, 2, 0, buf, row, 8, 1, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemcpy2DToArray(a, 0, 0, buf, 8, 16, 1, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
    SIM_EXPECT(cudaMemcpyToArray(a, 0, 1, buf, row * H, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    CU_EXPECT(cuMemcpyHtoA_v2((CUarray)(void *)a, row * H - 4, buf, 8), CUDA_ERROR_INVALID_VALUE);
    (void)cudaGetLastError();
    /* nothing was written */
    SIM_OK(cudaMemcpy2DFromArray(buf, row, a, 0, 0, row, H, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check_byte(buf, row * H, 0x5a), -1);
    SIM_OK(cudaFreeArray(a));
    SIM_EXPECT(cudaMemcpy2DToArray(a, 0, 0, buf, row, row, 1, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    free(buf);
}

/* A 3D array in and out through cudaMemcpy3D: pitched device memory to
 * the array, the array to host memory, positions in elements. */
static void test_round_trip_3d(void **state)
{
    (void)state;
    enum { X = 30, Y = 7, Z = 5 };
    struct cudaChannelFormatDesc d = cudaCreateChannelDesc(16, 0, 0, 0, cudaChannelFormatKindSigned);
    cudaArray_t a = NULL;
    SIM_OK(cudaMalloc3DArray(&a, &d, (struct cudaExtent){X, Y, Z}, 0));
    struct cudaPitchedPtr dev;
    SIM_OK(cudaMalloc3D(&dev, (struct cudaExtent){X * 2, Y, Z}));
    size_t n = dev.pitch * Y * Z;
    uint8_t *in = malloc(n), *out = calloc(1, X * 2 * Y * Z);
    fill(in, n, 11);
    SIM_OK(cudaMemcpy(dev.ptr, in, n, cudaMemcpyHostToDevice));
    struct cudaMemcpy3DParms p;
    memset(&p, 0, sizeof p);
    p.srcPtr = dev;
    p.dstArray = a;
    p.extent = (struct cudaExtent){X, Y, Z};
    p.kind = cudaMemcpyDeviceToDevice;
    SIM_OK(cudaMemcpy3D(&p));
    memset(&p, 0, sizeof p);
    p.srcArray = a;
    p.dstPtr = (struct cudaPitchedPtr){out, X * 2, X * 2, Y};
    p.extent = (struct cudaExtent){X, Y, Z};
    p.kind = cudaMemcpyDeviceToHost;
    SIM_OK(cudaMemcpy3D(&p));
    for (size_t z = 0; z < Z; z++)
        for (size_t y = 0; y < Y; y++)
            assert_memory_equal(out + (z * Y + y) * X * 2, in + (z * Y + y) * dev.pitch, X * 2);
    /* one slice of 2 x 2 elements at (3, 4, 2) */
    uint8_t small[8] = {0};
    p.srcPos = (struct cudaPos){3, 4, 2};
    p.dstPtr = (struct cudaPitchedPtr){small, 4, 4, 2};
    p.extent = (struct cudaExtent){2, 2, 1};
    SIM_OK(cudaMemcpy3D(&p));
    assert_memory_equal(small, in + (2 * Y + 4) * dev.pitch + 6, 4);
    assert_memory_equal(small + 4, in + (2 * Y + 5) * dev.pitch + 6, 4);
    /* a sixth slice, and both sides named on one end */
    p.srcPos = (struct cudaPos){0, 0, 0};
    p.dstPtr = (struct cudaPitchedPtr){out, X * 2, X * 2, Y};
    p.extent = (struct cudaExtent){X, Y, Z + 1};
    SIM_EXPECT(cudaMemcpy3D(&p), cudaErrorInvalidValue);
    p.extent = (struct cudaExtent){X, Y, Z};
    p.srcPtr = dev;
    SIM_EXPECT(cudaMemcpy3D(&p), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    SIM_OK(cudaFreeArray(a));
    SIM_OK(cudaFree(dev.ptr));
    free(in);
    free(out);
}

static void test_mipmapped(void **state)
{
    (void)state;
    struct cudaChannelFormatDesc d = cudaCreateChannelDesc(32, 32, 0, 0, cudaChannelFormatKindFloat);
    cudaMipmappedArray_t m = NULL;
    size_t free0, free1, total;
    SIM_OK(cudaFree(NULL));
    SIM_OK(cudaMemGetInfo(&free0, &total));
    SIM_OK(cudaMallocMipmappedArray(&m, &d, (struct cudaExtent){1024, 256, 0}, 4, 0));
    SIM_OK(cudaMemGetInfo(&free1, &total));
    assert_true(free0 - free1 >= (size_t)8 * 1024 * 256 * 4 / 3); /* 2 MiB + 512 KiB + ... */
    static const size_t want_w[] = {1024, 512, 256, 128}, want_h[] = {256, 128, 64, 32};
    for (unsigned l = 0; l < 4; l++) {
        cudaArray_t lv = NULL;
        struct cudaExtent e;
        SIM_OK(cudaGetMipmappedArrayLevel(&lv, m, l));
        SIM_OK(cudaArrayGetInfo(NULL, &e, NULL, lv));
        assert_int_equal(e.width, want_w[l]);
        assert_int_equal(e.height, want_h[l]);
    }
    cudaArray_t lv = NULL;
    SIM_EXPECT(cudaGetMipmappedArrayLevel(&lv, m, 4), cudaErrorInvalidValue);
    SIM_OK(cudaGetMipmappedArrayLevel(&lv, m, 0));
    SIM_EXPECT(cudaFreeArray(lv), cudaErrorInvalidResourceHandle); /* a level goes with its array */
    SIM_EXPECT(cudaMallocMipmappedArray(&m, &d, (struct cudaExtent){16, 16, 0}, 6, 0), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    SIM_OK(cudaFreeMipmappedArray(m));
    size_t free2;
    SIM_OK(cudaMemGetInfo(&free2, &total));
    assert_int_equal(free2, free0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_memory_counted, simtest_teardown),
        cmocka_unit_test_teardown(test_info, simtest_teardown),
        cmocka_unit_test_teardown(test_refused_shapes, simtest_teardown),
        cmocka_unit_test_teardown(test_round_trip_2d, simtest_teardown),
        cmocka_unit_test_teardown(test_bounds, simtest_teardown),
        cmocka_unit_test_teardown(test_round_trip_3d, simtest_teardown),
        cmocka_unit_test_teardown(test_mipmapped, simtest_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
