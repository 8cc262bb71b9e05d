/*
 * A driver-API program that loads real modules nvcc made (the fixtures in
 * tests/modules: a cubin for sm_90, a fatbin, PTX text) on the
 * simulated device: through cuModuleLoadData, cuModuleLoad (the file),
 * cuModuleLoadDataEx (JIT options, the log buffers answered),
 * cuModuleLoadFatBinary and the fatbin wrapper nvcc's host stub registers,
 * and cuLibraryLoadData / cuLibraryLoadFromFile with cuLibraryGetKernel and
 * cuKernelGetFunction (and a CUkernel launched as it is).  For each, both
 * kernels are found, the __device__ function and an absent name are
 * CUDA_ERROR_NOT_FOUND, and each kernel runs for the device time
 * CUCACHE_SIM_KERNEL_US gives its name (meson: add_one=3000,
 * _Z5scalePffi=5000, any other 1 us), measured between events while a
 * host function holds the stream, so that the time is exact; the data it
 * was given stays as it was (no device code runs).  Corrupt images are
 * CUDA_ERROR_INVALID_IMAGE, a missing file CUDA_ERROR_FILE_NOT_FOUND; a
 * module unloads with no context current.
 *
 * It prints one line per check, without addresses: the test in
 * tests/interpose runs it alone and under libcucache.so and compares the
 * two outputs.  Usage: module_prog FIXTURE_DIR; exit 0 when all passed.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cusim/cuda_api.h"
#include "cusim/sim.h"

static int failures;

static const char *err_name(CUresult r)
{
    const char *s = NULL;
    cuGetErrorName(r, &s);
    return s ? s : "?";
}

#define EXPECT(what, call, want)                                                                                       \
    do {                                                                                                               \
        CUresult r_ = (call);                                                                                          \
        printf("%s: %s\n", what, err_name(r_));                                                                        \
        if (r_ != (want)) {                                                                                            \
            printf("FAIL %s:%d %s: %s, expected %s\n", __FILE__, __LINE__, #call, err_name(r_), err_name(want));       \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

#define OK(call)                                                                                                       \
    do {                                                                                                               \
        CUresult r_ = (call);                                                                                          \
        if (r_ != CUDA_SUCCESS) {                                                                                      \
            printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, err_name(r_));                                    \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static char *read_file(const char *dir, const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("FAIL cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = calloc(1, (size_t)n + 1); /* NUL-terminated: PTX is text */
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        printf("FAIL cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* A host function that holds its stream until opened. */
static void gate_wait(void *arg)
{
    atomic_int *open = arg;
    while (!atomic_load(open)) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

static CUstream stream;
static CUdeviceptr dbuf;
static int host[256];

/* Launches f once between two events with the stream held until all is
 * queued; prints its device time; the buffer it was given is unchanged. */
static void launch(const char *what, CUfunction f, double want_ms)
{
    CUevent a, b;
    OK(cuEventCreate(&a, 0));
    OK(cuEventCreate(&b, 0));
    atomic_int open = 0;
    OK(cuLaunchHostFunc(stream, gate_wait, &open));
    OK(cuEventRecord(a, stream));
    int n = 256;
    float scale = 2;
    void *params[] = {&dbuf, &scale, &n};
    EXPECT(what, cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, stream, params, NULL), CUDA_SUCCESS);
    OK(cuEventRecord(b, stream));
    atomic_store(&open, 1);
    OK(cuEventSynchronize(b));
    float ms = 0;
    OK(cuEventElapsedTime_v2(&ms, a, b));
    printf("%s: %.3f ms\n", what, ms);
    if (ms < want_ms * 0.999 || ms > want_ms * 1.001) {
        printf("FAIL %s ran %.3f ms of device time, expected %.3f\n", what, ms, want_ms);
        failures++;
    }
    int back[256];
    OK(cuMemcpyDtoH_v2(back, dbuf, sizeof back));
    if (memcmp(back, host, sizeof back) != 0) {
        printf("FAIL %s changed the data\n", what);
        failures++;
    }
    OK(cuEventDestroy_v2(a));
    OK(cuEventDestroy_v2(b));
}

/* The module's kernels are found and run; the others are not found. */
static void check_module(const char *what, CUmodule m)
{
    char line[256];
    CUfunction add, scale, other;
    snprintf(line, sizeof line, "%s: get add_one", what);
    EXPECT(line, cuModuleGetFunction(&add, m, "add_one"), CUDA_SUCCESS);
    snprintf(line, sizeof line, "%s: get _Z5scalePffi", what);
    EXPECT(line, cuModuleGetFunction(&scale, m, "_Z5scalePffi"), CUDA_SUCCESS);
    snprintf(line, sizeof line, "%s: get scale (unmangled)", what);
    EXPECT(line, cuModuleGetFunction(&other, m, "scale"), CUDA_ERROR_NOT_FOUND);
    snprintf(line, sizeof line, "%s: get a __device__ function", what);
    EXPECT(line, cuModuleGetFunction(&other, m, "_Z14fixture_helperi"), CUDA_ERROR_NOT_FOUND);
    const char *name = NULL;
    OK(cuFuncGetName(&name, add));
    printf("%s: cuFuncGetName %s\n", what, name);
    snprintf(line, sizeof line, "%s: launch add_one", what);
    launch(line, add, 3.0);
    snprintf(line, sizeof line, "%s: launch _Z5scalePffi", what);
    launch(line, scale, 5.0);
}

/* The library's kernels are found and run, as functions and as CUkernels. */
static void check_library(const char *what, CUlibrary lib)
{
    char line[256];
    CUkernel k, other;
    CUfunction f;
    snprintf(line, sizeof line, "%s: kernel add_one", what);
    EXPECT(line, cuLibraryGetKernel(&k, lib, "add_one"), CUDA_SUCCESS);
    snprintf(line, sizeof line, "%s: kernel missing", what);
    EXPECT(line, cuLibraryGetKernel(&other, lib, "missing"), CUDA_ERROR_NOT_FOUND);
    snprintf(line, sizeof line, "%s: function of add_one", what);
    EXPECT(line, cuKernelGetFunction(&f, k), CUDA_SUCCESS);
    snprintf(line, sizeof line, "%s: launch add_one", what);
    launch(line, f, 3.0);
    snprintf(line, sizeof line, "%s: launch the CUkernel _Z5scalePffi", what);
    EXPECT(line, cuLibraryGetKernel(&k, lib, "_Z5scalePffi"), CUDA_SUCCESS);
    launch(line, (CUfunction)k, 5.0);
}

/* The wrapper nvcc's host stub registers (the toolkit's fatbinary_section.h's
 * layout: magic, version, the container's address, a file name). */
struct fatbin_wrapper {
    uint32_t magic, version;
    const void *data;
    const void *filename;
};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    CUdevice dev;
    CUcontext ctx;
    OK(cuInit(0));
    OK(cuDeviceGet(&dev, 0));
    OK(cuDevicePrimaryCtxRetain(&ctx, dev));
    OK(cuCtxSetCurrent(ctx));
    OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 256; i++)
        host[i] = i * 7;
    OK(cuMemAlloc_v2(&dbuf, sizeof host));
    OK(cuMemcpyHtoD_v2(dbuf, host, sizeof host));

    static const char *const fixtures[] = {"kernels.sm_90.cubin", "kernels.fatbin", "kernels.ptx"};
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
        char what[256], path[4096];
        size_t len;
        char *image = read_file(dir, fixtures[i], &len);
        snprintf(path, sizeof path, "%s/%s", dir, fixtures[i]);
        CUmodule m;

        snprintf(what, sizeof what, "%s cuModuleLoadData", fixtures[i]);
        EXPECT(what, cuModuleLoadData(&m, image), CUDA_SUCCESS);
        check_module(what, m);
        OK(cuModuleUnload(m));

        snprintf(what, sizeof what, "%s cuModuleLoad", fixtures[i]);
        EXPECT(what, cuModuleLoad(&m, path), CUDA_SUCCESS);
        check_module(what, m);
        OK(cuModuleUnload(m));

        char log[64], errlog[64];
        memset(log, 'x', sizeof log);
        memset(errlog, 'x', sizeof errlog);
        CUjit_option opt[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                              CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_MAX_REGISTERS};
        void *val[] = {log, (void *)(uintptr_t)sizeof log, errlog, (void *)(uintptr_t)sizeof errlog,
                       (void *)(uintptr_t)32};
        snprintf(what, sizeof what, "%s cuModuleLoadDataEx", fixtures[i]);
        EXPECT(what, cuModuleLoadDataEx(&m, image, 5, opt, val), CUDA_SUCCESS);
        if (log[0] != 0 || errlog[0] != 0 || val[1] != NULL || val[3] != NULL) {
            printf("FAIL %s: the log buffers were not answered\n", what);
            failures++;
        }
        check_module(what, m);
        OK(cuModuleUnload(m));
        CUjit_option bad = (CUjit_option)999;
        snprintf(what, sizeof what, "%s cuModuleLoadDataEx, an unknown option", fixtures[i]);
        EXPECT(what, cuModuleLoadDataEx(&m, image, 1, &bad, val), CUDA_ERROR_INVALID_VALUE);

        CUlibrary lib;
        snprintf(what, sizeof what, "%s cuLibraryLoadData", fixtures[i]);
        EXPECT(what, cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
        check_library(what, lib);
        OK(cuLibraryUnload(lib));
        snprintf(what, sizeof what, "%s cuLibraryLoadFromFile", fixtures[i]);
        EXPECT(what, cuLibraryLoadFromFile(&lib, path, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
        check_library(what, lib);
        OK(cuLibraryUnload(lib));

        if (strstr(fixtures[i], "fatbin")) {
            snprintf(what, sizeof what, "%s cuModuleLoadFatBinary", fixtures[i]);
            EXPECT(what, cuModuleLoadFatBinary(&m, image), CUDA_SUCCESS);
            check_module(what, m);
            OK(cuModuleUnload(m));
            struct fatbin_wrapper w = {0x466243B1u, 1, image, NULL};
            snprintf(what, sizeof what, "%s in its wrapper, cuModuleLoadData", fixtures[i]);
            EXPECT(what, cuModuleLoadData(&m, &w), CUDA_SUCCESS);
            check_module(what, m);
            OK(cuModuleUnload(m));
        }
        free(image);
    }

    /* corrupt images: each a copy of a fixture with one field broken */
    size_t len;
    CUmodule m;
    /* a module is unloaded with no context current (numba's deallocations) */
    OK(cuModuleLoadData(&m, CUCACHE_SIM_MODULE_MAGIC "k\n"));
    OK(cuCtxSetCurrent(NULL));
    EXPECT("cuModuleUnload with no current context", cuModuleUnload(m), CUDA_SUCCESS);
    OK(cuCtxSetCurrent(ctx));
    char *cubin = read_file(dir, "kernels.sm_90.cubin", &len);
    memset(cubin + 40, 0xff, 8); /* e_shoff far past the end */
    EXPECT("cubin, section headers past its end", cuModuleLoadData(&m, cubin), CUDA_ERROR_INVALID_IMAGE);
    free(cubin);
    cubin = read_file(dir, "kernels.sm_90.cubin", &len);
    cubin[18] = 62; /* e_machine x86-64: no cubin */
    EXPECT("a host ELF", cuModuleLoadData(&m, cubin), CUDA_ERROR_INVALID_IMAGE);
    free(cubin);
    char *fatbin = read_file(dir, "kernels.fatbin", &len);
    memset(fatbin + 16 + 4, 0, 4); /* the first entry's header size */
    EXPECT("fatbin, an entry of no header", cuModuleLoadData(&m, fatbin), CUDA_ERROR_INVALID_IMAGE);
    free(fatbin);
    fatbin = read_file(dir, "kernels.fatbin", &len);
    memset(fatbin + 16 + 8, 0x7f, 8); /* the first entry's payload far past the container */
    EXPECT("fatbin, a payload past its end", cuModuleLoadData(&m, fatbin), CUDA_ERROR_INVALID_IMAGE);
    free(fatbin);
    EXPECT("PTX with no .target", cuModuleLoadData(&m, ".version 9.0\n.visible .entry k()\n{\n}\n"),
           CUDA_ERROR_INVALID_IMAGE);
    EXPECT("text that is no image", cuModuleLoadData(&m, "hello"), CUDA_ERROR_INVALID_IMAGE);
    EXPECT("a missing file", cuModuleLoad(&m, "/nonexistent/kernels.cubin"), CUDA_ERROR_FILE_NOT_FOUND);

    OK(cuMemFree_v2(dbuf));
    OK(cuStreamDestroy_v2(stream));
    OK(cuDevicePrimaryCtxRelease_v2(dev));
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
