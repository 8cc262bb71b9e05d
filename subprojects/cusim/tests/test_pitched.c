/*
 * Proves pitched memory on the simulated device: cudaMallocPitch and
 * cudaMalloc3D pad rows to 512 bytes; cudaMemcpy2D(Async) moves exactly
 * the rows and columns asked for, in every direction, from pageable memory
 * staged at the call; cudaMemset2D and cuMemsetD2D8/16/32 fill only their
 * rectangle; a row wider than a pitch is cudaErrorInvalidPitchValue, a
 * rectangle that leaves its allocation cudaErrorInvalidValue, and nothing
 * is written then; the race detector sees pitched operations (reported
 * against a copy of the same rows on an unordered stream, not when an
 * event orders them).  Meson runs it with CUCACHE_SIM_CAPACITY=1G.
 */
#include "simrace.h"

#include <stdlib.h>
#include <string.h>

enum { W = 1000, H = 50, PITCH = 1024 };

static struct simrace_fixture fx;

static int group_setup(void **state)
{
    (void)state;
    return simrace_fixture_create(&fx);
}

static int group_teardown(void **state)
{
    (void)state;
    simrace_fixture_destroy(&fx);
    return 0;
}

static void test_malloc_pitch(void **state)
{
    (void)state;
    void *p = NULL;
    size_t pitch = 0;
    SIM_OK(cudaMallocPitch(&p, &pitch, W, H));
    assert_int_equal(pitch, PITCH);
    assert_int_equal((uintptr_t)p % 512, 0);
    size_t size = 0;
    CU_OK(cuMemGetAddressRange_v2(NULL, &size, (CUdeviceptr)(uintptr_t)p));
    assert_int_equal(size, PITCH * H);
    SIM_OK(cudaFree(p));
    CUdeviceptr d = 0;
    CU_EXPECT(cuMemAllocPitch_v2(&d, &pitch, W, H, 3), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemAllocPitch_v2(&d, &pitch, 0, H, 4), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemAllocPitch_v2(&d, &pitch, 513, 2, 16));
    assert_int_equal(pitch, 1024);
    CU_OK(cuMemFree_v2(d));

    struct cudaPitchedPtr pp;
    SIM_OK(cudaMalloc3D(&pp, (struct cudaExtent){100, 7, 3}));
    assert_int_equal(pp.pitch, 512);
    assert_int_equal(pp.xsize, 100);
    assert_int_equal(pp.ysize, 7);
    SIM_OK(cudaMemset(pp.ptr, 0x11, 512 * 7 * 3)); /* the whole of it is addressable */
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaFree(pp.ptr));
}

/* Host rows of W bytes, to device rows of PITCH, back to rows of 1200. */
static void test_copy_2d_round_trip(void **state)
{
    (void)state;
    unsigned char *h = malloc(W * H), *back = malloc(1200 * H);
    assert_non_null(h);
    assert_non_null(back);
    simtest_fill(h, W * H, 3);
    memset(back, 0xEE, 1200 * H);
    void *d = NULL, *e = NULL;
    size_t pitch = 0;
    SIM_OK(cudaMallocPitch(&d, &pitch, W, H));
    SIM_OK(cudaMallocPitch(&e, &pitch, W, H));
    SIM_OK(cudaMemset(d, 0x77, PITCH * H));
    SIM_OK(cudaMemcpy2D(d, PITCH, h, W, W, H, cudaMemcpyHostToDevice));
    SIM_OK(cudaMemcpy2D(e, PITCH, d, PITCH, W, H, cudaMemcpyDeviceToDevice));
    SIM_OK(cudaMemcpy2D(back, 1200, e, PITCH, W, H, cudaMemcpyDefault));
    for (int r = 0; r < H; r++) {
        assert_int_equal(simtest_check(back + r * 1200, W, 3, (size_t)r * W), -1);
        assert_int_equal(simtest_check_byte(back + r * 1200 + W, 200, 0xEE), -1); /* untouched */
    }
    /* the padding of d kept the memset's bytes */
    unsigned char pad[PITCH - W];
    SIM_OK(cudaMemcpy(pad, (char *)d + 7 * PITCH + W, sizeof pad, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check_byte(pad, sizeof pad, 0x77), -1);
    SIM_OK(cudaFree(d));
    SIM_OK(cudaFree(e));
    free(h);
    free(back);
}

/* A 2D copy from pageable memory is staged at the call. */
static void test_copy_2d_async_stages_pageable(void **state)
{
    (void)state;
    unsigned char *h = malloc(64 * 8);
    assert_non_null(h);
    simtest_fill(h, 64 * 8, 5);
    void *d = NULL;
    size_t pitch = 0;
    SIM_OK(cudaMallocPitch(&d, &pitch, 64, 8));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, fx.nb);
    SIM_OK(cudaMemcpy2DAsync(d, pitch, h, 64, 64, 8, cudaMemcpyHostToDevice, fx.nb));
    memset(h, 0, 64 * 8); /* after the call: the copy must not see it */
    simtest_gate_open(g);
    SIM_OK(cudaStreamSynchronize(fx.nb));
    unsigned char back[64 * 8];
    SIM_OK(cudaMemcpy2D(back, 64, d, pitch, 64, 8, cudaMemcpyDeviceToHost));
    simtest_fill(h, 64 * 8, 5);
    assert_memory_equal(back, h, sizeof back);
    SIM_OK(cudaFree(d));
    free(h);
}

static void test_memset_2d(void **state)
{
    (void)state;
    void *d = NULL;
    size_t pitch = 0;
    SIM_OK(cudaMallocPitch(&d, &pitch, W, H));
    SIM_OK(cudaMemset(d, 0, pitch * H));
    SIM_OK(cudaDeviceSynchronize()); /* fx.nb is not ordered after the legacy stream */
    SIM_OK(cudaMemset2D((char *)d + 2 * pitch + 10, pitch, 0xAB, 20, 3));
    SIM_OK(cudaMemset2DAsync((char *)d + 10 * pitch, pitch, 0xCD, 4, 2, fx.nb));
    CUdeviceptr base = (CUdeviceptr)(uintptr_t)d;
    CU_OK(cuMemsetD2D16_v2(base + 20 * pitch, pitch, 0x1234, 3, 2));
    CU_OK(cuMemsetD2D32Async(base + 30 * pitch + 8, pitch, 0xA1B2C3D4u, 2, 2, NULL));
    CU_OK(cuMemsetD16_v2(base + 40 * pitch, 0xBEEF, 2));
    SIM_OK(cudaDeviceSynchronize());
    unsigned char *h = malloc(pitch * H);
    assert_non_null(h);
    SIM_OK(cudaMemcpy(h, d, pitch * H, cudaMemcpyDeviceToHost));
    for (size_t r = 0; r < H; r++)
        for (size_t c = 0; c < pitch; c++) {
            unsigned char want = 0;
            if (r >= 2 && r < 5 && c >= 10 && c < 30)
                want = 0xAB;
            else if (r >= 10 && r < 12 && c < 4)
                want = 0xCD;
            else if (r >= 20 && r < 22 && c < 6)
                want = c % 2 ? 0x12 : 0x34;
            else if (r >= 30 && r < 32 && c >= 8 && c < 16)
                want = (unsigned char[]){0xD4, 0xC3, 0xB2, 0xA1}[(c - 8) % 4];
            else if (r == 40 && c < 4)
                want = c % 2 ? 0xBE : 0xEF;
            if (h[r * pitch + c] != want)
                fail_msg("row %zu column %zu: 0x%02x, expected 0x%02x", r, c, h[r * pitch + c], want);
        }
    free(h);
    SIM_OK(cudaFree(d));
}

static void test_pitched_errors(void **state)
{
    (void)state;
    void *d = NULL;
    size_t pitch = 0;
    unsigned char h[PITCH];
    SIM_OK(cudaMallocPitch(&d, &pitch, W, 4));
    SIM_OK(cudaMemset(d, 0x42, pitch * 4));
    SIM_EXPECT(cudaMemcpy2D(d, 100, h, W, 200, 2, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
    SIM_EXPECT(cudaMemcpy2D(d, pitch, h, 10, 200, 2, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
    /* five rows of a four-row allocation */
    SIM_EXPECT(cudaMemcpy2D(d, pitch, h, 0 + W, W, 5, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemset2D(d, pitch, 0, W, 5), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemset2D(d, 10, 0, 20, 2), cudaErrorInvalidValue); /* pitch below the width */
    CU_EXPECT(cuMemsetD2D32_v2((CUdeviceptr)(uintptr_t)d + 2, pitch, 0, 2, 2), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuMemcpy2D_v2(NULL), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = (CUdeviceptr)(uintptr_t)d;
    c.WidthInBytes = 4;
    c.Height = 1;
    CU_EXPECT(cuMemcpy2D_v2(&c), CUDA_ERROR_INVALID_VALUE); /* an array side without an array */
    (void)cudaGetLastError();
    SIM_OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    assert_int_equal(simtest_check_byte(h, sizeof h, 0x42), -1); /* nothing written */
    SIM_OK(cudaFree(d));
}

/* The detector checks a pitched operation's rows like a copy's range. */
static void test_pitched_race(void **state)
{
    (void)state;
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, fx.nb);
    SIM_OK(cudaMemset2DAsync(fx.x, 4096, 1, 512, 16, fx.nb));
    SIM_OK(cudaMemcpyAsync(fx.host, fx.x + 3 * 4096, 256, cudaMemcpyDeviceToHost, fx.nb2));
    SIM_OK(simtest_stream_wait_idle(fx.nb2)); /* the reader really ran first (no real overlap for TSan) */
    simtest_gate_open(g);
    SIM_OK(cudaDeviceSynchronize());
    race_expect();
}

static void test_pitched_ordered_no_race(void **state)
{
    (void)state;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreate(&ev));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, fx.nb);
    SIM_OK(cudaMemcpy2DAsync(fx.y, 4096, fx.x, 4096, 512, 16, cudaMemcpyDeviceToDevice, fx.nb));
    SIM_OK(cudaEventRecord(ev, fx.nb));
    SIM_OK(cudaStreamWaitEvent(fx.nb2, ev, 0));
    SIM_OK(cudaMemset2DAsync(fx.y, 4096, 0, 512, 16, fx.nb2));
    simtest_gate_open(g);
    SIM_OK(cudaDeviceSynchronize());
    race_expect_none();
    SIM_OK(cudaEventDestroy(ev));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_malloc_pitch),
        SIMTEST(test_copy_2d_round_trip),
        SIMTEST(test_copy_2d_async_stages_pageable),
        SIMTEST(test_memset_2d),
        SIMTEST(test_pitched_errors),
        RACETEST(test_pitched_race),
        RACETEST(test_pitched_ordered_no_race),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
