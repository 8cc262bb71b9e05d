/*
 * Proves that a module loads the entry of a fatbin CUDA would load on the
 * device (sim_arch_use, src/module_image.c): the rule alone, case by
 * case; the reader on nvcc's multi-architecture fixtures
 * (tests/modules/arches*.fatbin) for devices of several SMs, where the
 * kernel's launch bound and shared memory (4 and 1 int per SM unit: 360
 * for sm_90) tell which entry was read; and the driver, whose
 * cuFuncGetAttribute answers the sm_90 cubin's values on the simulated
 * device (9.0), the PTX's with the device's binary version when no cubin
 * fits, and CUDA_ERROR_NO_BINARY_FOR_GPU at load when nothing does.
 *
 * Meson sets SIMTEST_MODULES to the fixture directory.
 */
#include "simtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "module_image.h"

enum { ELF = SIM_FATBIN_KIND_ELF, PTX = SIM_FATBIN_KIND_PTX };

/* One row per case of the rule, and its edges. */
static const struct {
    unsigned kind, arch;
    bool specific;
    unsigned dev;
    sim_arch_use_t use;
} rule_cases[] = {
    {ELF, 90, false, 90, SIM_ARCH_EXACT},   {ELF, 86, false, 89, SIM_ARCH_MINOR},
    {ELF, 80, false, 86, SIM_ARCH_MINOR},   {ELF, 89, false, 86, SIM_ARCH_NONE},  /* a later minor */
    {ELF, 80, false, 90, SIM_ARCH_NONE},    {ELF, 90, false, 100, SIM_ARCH_NONE}, /* another major */
    {ELF, 100, false, 103, SIM_ARCH_MINOR}, {ELF, 120, false, 121, SIM_ARCH_MINOR},
    {ELF, 90, true, 90, SIM_ARCH_EXACT},    {ELF, 100, true, 103, SIM_ARCH_NONE}, /* sm_100a: its own SM */
    {PTX, 90, false, 90, SIM_ARCH_JIT},     {PTX, 50, false, 90, SIM_ARCH_JIT},
    {PTX, 90, false, 120, SIM_ARCH_JIT},    {PTX, 100, false, 90, SIM_ARCH_NONE},
    {PTX, 90, true, 90, SIM_ARCH_JIT},      {PTX, 90, true, 100, SIM_ARCH_NONE},
    {ELF, 0, false, 90, SIM_ARCH_LINKED},   {PTX, 0, false, 90, SIM_ARCH_LINKED}, /* the simulator's linker */
    {3, 90, false, 90, SIM_ARCH_NONE},                                            /* no code kind */
};

static void test_rule(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof rule_cases / sizeof rule_cases[0]; i++) {
        sim_arch_use_t got =
            sim_arch_use(rule_cases[i].kind, rule_cases[i].arch, rule_cases[i].specific, rule_cases[i].dev);
        if (got != rule_cases[i].use)
            fail_msg("kind %u for sm_%u%s on sm_%u: use %d, expected %d", rule_cases[i].kind, rule_cases[i].arch,
                     rule_cases[i].specific ? "a" : "", rule_cases[i].dev, got, rule_cases[i].use);
    }
}

typedef struct seen_s {
    unsigned kernels;
    sim_kernel_info_t ki;
} seen_t;

static void seen_kernel(void *arg, const char *name, size_t len, const sim_kernel_info_t *ki)
{
    seen_t *s = arg;
    assert_int_equal(len, strlen("arch_probe"));
    assert_memory_equal(name, "arch_probe", len);
    s->kernels++;
    s->ki = *ki;
}

/* One row per fixture and device: the result, and what the read entry
 * states (max_threads and shared_bytes: 4 and 4 bytes per SM unit of the
 * entry's architecture; shared 0 for PTX, which states none). */
static const struct {
    const char *file;
    unsigned dev;
    CUresult r;
    unsigned binary, ptx, max_threads, shared;
    bool cubin;
} read_cases[] = {
    /* sm_75, sm_80, sm_86, compute_90, sm_90 */
    {"arches.fatbin", 90, CUDA_SUCCESS, 90, 90, 360, 360, true},
    {"arches.fatbin", 89, CUDA_SUCCESS, 86, 86, 344, 344, true}, /* same major, highest below */
    {"arches.fatbin", 87, CUDA_SUCCESS, 86, 86, 344, 344, true},
    {"arches.fatbin", 80, CUDA_SUCCESS, 80, 80, 320, 320, true},
    {"arches.fatbin", 75, CUDA_SUCCESS, 75, 75, 300, 300, true},
    {"arches.fatbin", 120, CUDA_SUCCESS, 120, 90, 360, 0, false}, /* no cubin of its major: the PTX */
    {"arches.fatbin", 70, CUDA_ERROR_NO_BINARY_FOR_GPU, 0, 0, 0, 0, false},
    /* sm_75, compute_75, sm_80, compute_80, sm_86, compute_100 */
    {"arches_ptx.fatbin", 90, CUDA_SUCCESS, 90, 80, 320, 0, false}, /* the highest PTX not above */
    {"arches_ptx.fatbin", 100, CUDA_SUCCESS, 100, 100, 400, 0, false},
    {"arches_ptx.fatbin", 86, CUDA_SUCCESS, 86, 86, 344, 344, true}, /* a cubin before PTX */
    /* sm_75, sm_80, sm_100, compute_100 */
    {"arches_none.fatbin", 90, CUDA_ERROR_NO_BINARY_FOR_GPU, 0, 0, 0, 0, false},
    {"arches_none.fatbin", 103, CUDA_SUCCESS, 100, 100, 400, 400, true},
    /* sm_90a, compute_90a */
    {"arches_90a.fatbin", 90, CUDA_SUCCESS, 90, 90, 360, 360, true},
    {"arches_90a.fatbin", 100, CUDA_ERROR_NO_BINARY_FOR_GPU, 0, 0, 0, 0, false},
};

static void test_read_for(void **state)
{
    (void)state;
    static const sim_image_sink_t sink = {seen_kernel, NULL};
    for (size_t i = 0; i < sizeof read_cases / sizeof read_cases[0]; i++) {
        size_t len;
        unsigned char *image = simtest_fixture(read_cases[i].file, &len);
        seen_t seen = {0};
        sim_image_info_t info;
        CUresult r = sim_image_read_for(image, len, read_cases[i].dev, &sink, &seen, &info);
        free(image);
        if (r != read_cases[i].r)
            fail_msg("%s on sm_%u: %d, expected %d", read_cases[i].file, read_cases[i].dev, r, read_cases[i].r);
        if (r != CUDA_SUCCESS) {
            assert_int_equal(seen.kernels, 0);
            assert_non_null(strstr(info.error, "no entry of the fatbin runs on a device of sm_"));
            continue;
        }
        const sim_kernel_info_t *ki = &seen.ki;
        if (seen.kernels != 1 || info.entries != 1 || ki->binary_version != read_cases[i].binary ||
            ki->ptx_version != read_cases[i].ptx || ki->max_threads != read_cases[i].max_threads ||
            ki->shared_bytes != read_cases[i].shared || ki->cubin != read_cases[i].cubin)
            fail_msg("%s on sm_%u: %u kernels from %u entries, binary %u ptx %u threads %u shared %u cubin %d",
                     read_cases[i].file, read_cases[i].dev, seen.kernels, info.entries, ki->binary_version,
                     ki->ptx_version, ki->max_threads, ki->shared_bytes, ki->cubin);
    }
}

/* Read for no device, every entry is read: what tools listing an image's
 * kernels want. */
static void test_read_all(void **state)
{
    (void)state;
    static const sim_image_sink_t sink = {seen_kernel, NULL};
    size_t len;
    unsigned char *image = simtest_fixture("arches.fatbin", &len);
    seen_t seen = {0};
    sim_image_info_t info;
    assert_int_equal(sim_image_read(image, len, &sink, &seen, &info), CUDA_SUCCESS);
    free(image);
    assert_int_equal(info.entries, 5);
    assert_int_equal(info.other_arch, 0);
    assert_int_equal(seen.kernels, 5);
}

static int attr(CUfunction f, CUfunction_attribute a)
{
    int v = -12345;
    CU_OK(cuFuncGetAttribute(&v, a, f));
    return v;
}

/* The simulated device is 9.0: the sm_90 cubin, fourth of five entries. */
static void test_driver_cubin(void **state)
{
    (void)state;
    int major, minor;
    CU_OK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
    CU_OK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
    assert_int_equal(10 * major + minor, 90);
    CUmodule m;
    CUfunction f;
    CU_OK(cuModuleLoad(&m, simtest_fixture_path("arches.fatbin")));
    CU_OK(cuModuleGetFunction(&f, m, "arch_probe"));
    assert_int_equal(attr(f, CU_FUNC_ATTRIBUTE_BINARY_VERSION), 90);
    assert_int_equal(attr(f, CU_FUNC_ATTRIBUTE_PTX_VERSION), 90);
    assert_int_equal(attr(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 360);
    assert_int_equal(attr(f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES), 360);
    assert_int_equal(attr(f, CU_FUNC_ATTRIBUTE_NUM_REGS), 12); /* sm_75's has 10, sm_80's 11 */
    CU_OK(cuModuleUnload(m));
}

/* No cubin of the device's major: compute_80, the highest PTX not above
 * 9.0 (not compute_100, not compute_75), compiled for the device. */
static void test_driver_ptx(void **state)
{
    (void)state;
    size_t len;
    unsigned char *image = simtest_fixture("arches_ptx.fatbin", &len);
    CUmodule m;
    CUfunction f;
    CU_OK(cuModuleLoadData(&m, image));
    CU_OK(cuModuleGetFunction(&f, m, "arch_probe"));
    assert_int_equal(attr(f, CU_FUNC_ATTRIBUTE_BINARY_VERSION), 90);
    assert_int_equal(attr(f, CU_FUNC_ATTRIBUTE_PTX_VERSION), 80);
    assert_int_equal(attr(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 320);
    CU_OK(cuModuleUnload(m));
    free(image);
}

/* Nothing for 9.0 (sm_75, sm_80, sm_100, compute_100): refused at load,
 * as CUDA refuses it, by every loader. */
static void test_driver_none(void **state)
{
    (void)state;
    size_t len;
    unsigned char *image = simtest_fixture("arches_none.fatbin", &len);
    CUmodule m = NULL;
    CU_EXPECT(cuModuleLoad(&m, simtest_fixture_path("arches_none.fatbin")), CUDA_ERROR_NO_BINARY_FOR_GPU);
    CU_EXPECT(cuModuleLoadData(&m, image), CUDA_ERROR_NO_BINARY_FOR_GPU);
    CU_EXPECT(cuModuleLoadFatBinary(&m, image), CUDA_ERROR_NO_BINARY_FOR_GPU);
    CUlibrary lib;
    CU_EXPECT(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0), CUDA_ERROR_NO_BINARY_FOR_GPU);
    const char *name = NULL;
    CU_OK(cuGetErrorName(CUDA_ERROR_NO_BINARY_FOR_GPU, &name));
    assert_string_equal(name, "CUDA_ERROR_NO_BINARY_FOR_GPU");
    free(image);
}

static int arch_setup(void **state)
{
    (void)state;
    CUdevice dev;
    CUcontext ctx;
    if (!getenv("SIMTEST_MODULES") || cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return -1;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule),         cmocka_unit_test(test_read_for),   cmocka_unit_test(test_read_all),
        cmocka_unit_test(test_driver_cubin), cmocka_unit_test(test_driver_ptx), cmocka_unit_test(test_driver_none),
    };
    return cmocka_run_group_tests(tests, arch_setup, NULL);
}
