/*
 * Proves the kernel families of the simulated device on real nvcc images
 * (tests/modules/symbols.*, kernels.*): the attributes
 * cuFuncGetAttribute answers are what ptxas reported for the cubin (the
 * fixtures' README), settable ones take CUDA's range and read-only ones
 * refuse; the occupancy calculator gives the values worked out by hand
 * below from the H100's limits; cooperative and cluster launches are
 * refused as CUDA refuses them; a module's variables are device memory
 * holding the image's bytes, counted in cuMemGetInfo until unloaded; the
 * linker joins a cubin and PTX into one loadable image and names a bad
 * input in its error log; and the runtime's registration path answers
 * cudaFuncGetAttributes and the symbol copies.
 */
#include "simtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static CUdevice dev;
static CUcontext ctx;
static CUmodule mod;
static CUfunction lookup, spill;

static char *bufs[16]; /* fixtures read, freed at teardown */
static int nbufs;

/* A fixture's bytes (NUL-terminated), from SIMTEST_MODULES. */
static char *fixture(const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", getenv("SIMTEST_MODULES"), name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_true(nbufs < 16);
    char *b = malloc(1 << 20);
    assert_non_null(b);
    size_t n = fread(b, 1, (1 << 20) - 1, f);
    fclose(f);
    b[n] = 0;
    *len = n;
    bufs[nbufs++] = b;
    return b;
}

static char *fixture_path(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", getenv("SIMTEST_MODULES"), name);
    return path;
}

static int funcs_setup(void **state)
{
    (void)state;
    if (!getenv("SIMTEST_MODULES") || cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return -1;
    if (cuModuleLoad(&mod, fixture_path("symbols.sm_90.cubin")) != CUDA_SUCCESS ||
        cuModuleGetFunction(&lookup, mod, "lookup") != CUDA_SUCCESS ||
        cuModuleGetFunction(&spill, mod, "spill") != CUDA_SUCCESS)
        return -1;
    return 0;
}

static int funcs_teardown(void **state)
{
    (void)state;
    cuModuleUnload(mod);
    for (int i = 0; i < nbufs; i++)
        free(bufs[i]);
    return 0;
}

static int attr(CUfunction f, CUfunction_attribute a)
{
    int v = -12345;
    CU_OK(cuFuncGetAttribute(&v, a, f));
    return v;
}

/* What ptxas said: lookup 17 registers, 512 bytes smem, launch bounds 128;
 * spill 40 registers, 1024 bytes stack; 64 bytes of __constant__. */
static void test_attributes_from_the_cubin(void **state)
{
    (void)state;
    assert_int_equal(attr(lookup, CU_FUNC_ATTRIBUTE_NUM_REGS), 17);
    assert_int_equal(attr(lookup, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES), 512);
    assert_int_equal(attr(lookup, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 128);
    assert_int_equal(attr(lookup, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES), 64);
    assert_int_equal(attr(lookup, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES), 0);
    assert_int_equal(attr(lookup, CU_FUNC_ATTRIBUTE_PTX_VERSION), 90);
    assert_int_equal(attr(lookup, CU_FUNC_ATTRIBUTE_BINARY_VERSION), 90);
    assert_int_equal(attr(lookup, CU_FUNC_ATTRIBUTE_CACHE_MODE_CA), 0);
    assert_int_equal(attr(lookup, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), 49152 - 512);
    assert_int_equal(attr(lookup, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT), -1);
    assert_int_equal(attr(lookup, CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET), 0);
    assert_int_equal(attr(lookup, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH), 0);
    assert_int_equal(attr(spill, CU_FUNC_ATTRIBUTE_NUM_REGS), 40);
    assert_int_equal(attr(spill, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES), 1024);
    assert_int_equal(attr(spill, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES), 0);
    assert_int_equal(attr(spill, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 1024);
    int v;
    CU_EXPECT(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX, lookup), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuFuncGetAttribute(NULL, CU_FUNC_ATTRIBUTE_NUM_REGS, lookup), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, (CUfunction)&v), CUDA_ERROR_INVALID_HANDLE);
    /* PTX states the launch bounds, not the registers: the default */
    CUmodule ptx;
    CU_OK(cuModuleLoad(&ptx, fixture_path("symbols.ptx")));
    CUfunction f;
    CU_OK(cuModuleGetFunction(&f, ptx, "lookup"));
    assert_int_equal(attr(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 128);
    assert_int_equal(attr(f, CU_FUNC_ATTRIBUTE_NUM_REGS), 32);
    CU_OK(cuModuleUnload(ptx));
}

static void test_settable_attributes(void **state)
{
    (void)state;
    CU_EXPECT(cuFuncSetAttribute(spill, CU_FUNC_ATTRIBUTE_NUM_REGS, 8), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuFuncSetAttribute(spill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 232448 + 1),
              CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuFuncSetAttribute(spill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 232448));
    assert_int_equal(attr(spill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), 232448);
    CU_EXPECT(cuFuncSetAttribute(spill, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 101),
              CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuFuncSetAttribute(spill, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50));
    assert_int_equal(attr(spill, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT), 50);
    CU_EXPECT(cuFuncSetAttribute(spill, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, 9), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuFuncSetCacheConfig(spill, (CUfunc_cache)4), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuFuncSetCacheConfig(spill, CU_FUNC_CACHE_PREFER_L1));
    CU_OK(cuFuncSetSharedMemConfig(spill, CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE));
    /* a 228 KiB block fits once opted in: one at a time */
    int n = -1;
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, spill, 32, 232448));
    assert_int_equal(n, 1);
    CU_OK(cuFuncSetAttribute(spill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 49152));
    CU_OK(cuFuncSetAttribute(spill, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, -1));
    CU_OK(cuFuncSetCacheConfig(spill, CU_FUNC_CACHE_PREFER_NONE));
}

/* By hand, from the H100's limits (64 warps, 32 blocks, 65536 registers in
 * four sub-partitions given 256 at a time to a warp, 228 KiB of shared
 * memory given 128 bytes at a time plus 1 KiB reserved per block):
 *   lookup, 128 threads: 4 warps -> 16 by warps; 17 registers -> 768 a
 *     warp, 16384/768 = 21 warps a sub-partition, 84/4 = 21 by registers;
 *     512 + 1024 shared bytes -> 152 by shared memory: 16.
 *   lookup, 128 threads and 32 KiB dynamic: 33280 + 1024 = 34304 bytes a
 *     block, 233472/34304 = 6.
 *   lookup, 48 KiB dynamic: more than 48 KiB + 1 KiB a block without
 *     opting in: 0.  256 threads: more than its launch bounds: 0.
 *   spill, 256 threads: 8 warps -> 8; 40 registers -> 1280 a warp, 12
 *     warps a sub-partition, 48/8 = 6: 6.  1024 threads: 48/32 = 1. */
static void test_occupancy_by_hand(void **state)
{
    (void)state;
    int n = -1;
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, lookup, 128, 0));
    assert_int_equal(n, 16);
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, lookup, 128, 32768));
    assert_int_equal(n, 6);
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, lookup, 128, 49152));
    assert_int_equal(n, 0);
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, lookup, 256, 0));
    assert_int_equal(n, 0);
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, spill, 256, 0, 1));
    assert_int_equal(n, 6);
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, spill, 1024, 0));
    assert_int_equal(n, 1);
    CU_EXPECT(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, spill, 256, 0, 2), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, spill, 0, 0), CUDA_ERROR_INVALID_VALUE);
    /* the best block size: lookup fills an SM at 128 (16 x 128 = 2048);
     * spill's best is 1536 threads, first reached going down at 768 (2
     * blocks of 24 warps): grids of 16 and 2 blocks an SM, 132 SMs */
    int grid = -1, block = -1;
    CU_OK(cuOccupancyMaxPotentialBlockSize(&grid, &block, lookup, NULL, 0, 0));
    assert_int_equal(block, 128);
    assert_int_equal(grid, 16 * 132);
    CU_OK(cuOccupancyMaxPotentialBlockSize(&grid, &block, spill, NULL, 0, 0));
    assert_int_equal(block, 768);
    assert_int_equal(grid, 2 * 132);
    CU_OK(cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, spill, NULL, 0, 256, 0));
    assert_int_equal(block, 256);
    assert_int_equal(grid, 6 * 132);
    /* 16 blocks of lookup on an SM: 233472/16 = 14592 each, less its 512 */
    size_t dyn = 0;
    CU_OK(cuOccupancyAvailableDynamicSMemPerBlock(&dyn, lookup, 16, 128));
    assert_int_equal(dyn, 14592 - 512);
    CU_EXPECT(cuOccupancyAvailableDynamicSMemPerBlock(&dyn, lookup, 17, 128), CUDA_ERROR_INVALID_VALUE);
}

static void test_cooperative_and_cluster_launches(void **state)
{
    (void)state;
    /* 16 blocks of lookup an SM, 132 SMs: 2112 at once */
    CU_EXPECT(cuLaunchCooperativeKernel(lookup, 2113, 1, 1, 128, 1, 1, 0, NULL, NULL),
              CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    CU_OK(cuLaunchCooperativeKernel(lookup, 2112, 1, 1, 128, 1, 1, 0, NULL, NULL));
    CU_EXPECT(cuLaunchKernel(lookup, 1, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    /* the driver's launch attributes: id, 4 bytes of padding, 64 of value */
    struct {
        int id;
        char pad[4];
        union {
            char pad[64];
            int i;
            unsigned dim[3];
        } v;
    } attrs[2] = {{4, {0}, {.dim = {2, 1, 1}}}, {8, {0}, {.i = 1}}};
    CUlaunchConfig cfg = {3, 1, 1, 128, 1, 1, 0, NULL, (CUlaunchAttribute *)(void *)attrs, 2};
    CU_EXPECT(cuLaunchKernelEx(&cfg, lookup, NULL, NULL), CUDA_ERROR_INVALID_CLUSTER_SIZE);
    cfg.gridDimX = 4;
    CU_OK(cuLaunchKernelEx(&cfg, lookup, NULL, NULL));
    attrs[1].id = 2; /* cooperative */
    cfg.gridDimX = 2114;
    CU_EXPECT(cuLaunchKernelEx(&cfg, lookup, NULL, NULL), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    attrs[1].id = 99;
    CU_EXPECT(cuLaunchKernelEx(&cfg, lookup, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    int clusters = -1;
    attrs[1].id = 0;
    cfg.gridDimX = 4;
    CU_OK(cuOccupancyMaxActiveClusters(&clusters, lookup, &cfg));
    assert_int_equal(clusters, 16 * 16 / 2 * (132 / 16));
    CU_OK(cuOccupancyMaxPotentialClusterSize(&clusters, lookup, &cfg));
    assert_int_equal(clusters, 8);
    CU_OK(cuCtxSynchronize());
}

static void test_module_variables(void **state)
{
    (void)state;
    size_t free0, free1, total;
    CU_OK(cuModuleUnload(mod)); /* its variables share a page of small allocations */
    CU_OK(cuMemGetInfo_v2(&free0, &total));
    CUmodule m;
    CU_OK(cuModuleLoad(&m, fixture_path("symbols.fatbin")));
    CU_OK(cuMemGetInfo_v2(&free1, &total));
    assert_true(free1 < free0); /* its variables' memory is the device's */
    CUdeviceptr table, scale, counter;
    size_t size = 0;
    CU_OK(cuModuleGetGlobal_v2(&table, &size, m, "table"));
    assert_int_equal(size, 64);
    const int fib[16] = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597};
    int got[16];
    CU_OK(cuMemcpy((CUdeviceptr)got, table, sizeof got));
    assert_memory_equal(got, fib, sizeof fib);
    CU_OK(cuModuleGetGlobal_v2(&scale, &size, m, "dev_scale"));
    float f = 0;
    CU_OK(cuMemcpy((CUdeviceptr)&f, scale, sizeof f));
    assert_true(f == 2.5f);
    CU_OK(cuModuleGetGlobal_v2(&counter, NULL, m, "dev_counter"));
    int c = -1;
    CU_OK(cuMemcpy((CUdeviceptr)&c, counter, sizeof c));
    assert_int_equal(c, 0);
    CU_EXPECT(cuModuleGetGlobal_v2(&table, &size, m, "lookup"), CUDA_ERROR_NOT_FOUND);
    CU_EXPECT(cuModuleGetGlobal_v2(NULL, NULL, m, "table"), CUDA_ERROR_INVALID_VALUE);
    unsigned type = 0;
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, table));
    assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
    CU_EXPECT(cuMemFree_v2(table), CUDA_ERROR_INVALID_VALUE); /* the module's, not the program's */
    /* two loads: two copies */
    CUmodule m2;
    CUdeviceptr table2;
    CU_OK(cuModuleLoad(&m2, fixture_path("symbols.sm_90.cubin")));
    CU_OK(cuModuleGetGlobal_v2(&table2, NULL, m2, "table"));
    assert_true(table2 != table);
    CU_OK(cuModuleUnload(m2));
    CU_OK(cuModuleUnload(m));
    CU_OK(cuMemGetInfo_v2(&free1, &total));
    assert_int_equal(free1, free0);
    CU_EXPECT(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, table), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuModuleLoad(&mod, fixture_path("symbols.sm_90.cubin")));
    CU_OK(cuModuleGetFunction(&lookup, mod, "lookup"));
    CU_OK(cuModuleGetFunction(&spill, mod, "spill"));
    /* a library's variables, in the current context */
    size_t len;
    const char *image = fixture("symbols.sm_90.cubin", &len);
    CUlibrary lib;
    CU_OK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
    CU_OK(cuLibraryGetGlobal(&table, &size, lib, "table"));
    CU_OK(cuMemcpy((CUdeviceptr)got, table, sizeof got));
    assert_memory_equal(got, fib, sizeof fib);
    CU_EXPECT(cuLibraryGetManaged(&table, &size, lib, "table"), CUDA_ERROR_NOT_FOUND);
    CUkernel k;
    CU_OK(cuLibraryGetKernel(&k, lib, "spill"));
    int v = 0;
    CU_OK(cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, k, dev));
    assert_int_equal(v, 1024);
    CUlibrary back;
    CU_OK(cuKernelGetLibrary(&back, k));
    assert_ptr_equal(back, lib);
    CU_OK(cuLibraryUnload(lib));
}

static void test_linker(void **state)
{
    (void)state;
    char log[256] = "untouched";
    CUjit_option opt[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *val[2] = {log, (void *)(uintptr_t)sizeof log};
    CUlinkState l;
    CU_OK(cuLinkCreate_v2(2, opt, val, &l));
    size_t clen, plen;
    char *cubin = fixture("symbols.sm_90.cubin", &clen), *ptx = fixture("kernels.ptx", &plen);
    CU_OK(cuLinkAddData_v2(l, CU_JIT_INPUT_CUBIN, cubin, clen, "symbols.sm_90.cubin", 0, NULL, NULL));
    CU_OK(cuLinkAddData_v2(l, CU_JIT_INPUT_PTX, ptx, plen + 1, "kernels.ptx", 0, NULL, NULL));
    /* a cubin defining add_one again */
    CU_EXPECT(cuLinkAddFile_v2(l, CU_JIT_INPUT_CUBIN, fixture_path("kernels.sm_90.cubin"), 0, NULL, NULL),
              CUDA_ERROR_INVALID_IMAGE);
    assert_non_null(strstr(log, "kernels.sm_90.cubin"));
    assert_non_null(strstr(log, "already defines"));
    /* PTX passed as a cubin */
    CU_EXPECT(cuLinkAddData_v2(l, CU_JIT_INPUT_CUBIN, ptx, plen + 1, "mislabelled.ptx", 0, NULL, NULL),
              CUDA_ERROR_INVALID_IMAGE);
    assert_non_null(strstr(log, "'mislabelled.ptx' is not a cubin"));
    assert_int_equal((size_t)(uintptr_t)val[1], strlen(log) + 1);
    CU_EXPECT(cuLinkAddData_v2(l, CU_JIT_INPUT_OBJECT, cubin, clen, "host.o", 0, NULL, NULL), CUDA_ERROR_NOT_SUPPORTED);
    CU_EXPECT(cuLinkAddFile_v2(l, CU_JIT_INPUT_PTX, "/nonexistent.ptx", 0, NULL, NULL), CUDA_ERROR_FILE_NOT_FOUND);
    void *out = NULL;
    size_t olen = 0;
    CU_OK(cuLinkComplete(l, &out, &olen));
    CUmodule m;
    CU_OK(cuModuleLoadData(&m, out));
    CUfunction f;
    const char *names[] = {"lookup", "spill", "add_one", "_Z5scalePffi"};
    for (size_t i = 0; i < 4; i++)
        CU_OK(cuModuleGetFunction(&f, m, names[i]));
    CU_OK(cuModuleGetFunction(&f, m, "lookup"));
    assert_int_equal(attr(f, CU_FUNC_ATTRIBUTE_NUM_REGS), 17);
    CUdeviceptr table;
    CU_OK(cuModuleGetGlobal_v2(&table, NULL, m, "table"));
    CU_OK(cuModuleUnload(m));
    CU_OK(cuLinkDestroy(l));
    CU_EXPECT(cuLinkDestroy(l), CUDA_ERROR_INVALID_HANDLE);
    CU_OK(cuLinkCreate_v2(0, NULL, NULL, &l));
    CU_EXPECT(cuLinkComplete(l, &out, &olen), CUDA_ERROR_INVALID_IMAGE);
    CU_OK(cuLinkDestroy(l));
}

/* The runtime's path: nvcc's registration of a fatbin (the wrapper its
 * host stub registers), a kernel and a variable. */
static char lookup_stub, table_shadow[64];
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);
void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
                       size_t size, int constant, int global);

static void test_runtime_registration(void **state)
{
    (void)state;
    size_t len;
    static struct {
        unsigned magic, version;
        const void *data;
        void *unused;
    } wrapper;
    wrapper.magic = 0x466243B1u;
    wrapper.version = 1;
    wrapper.data = fixture("symbols.fatbin", &len);
    void **h = __cudaRegisterFatBinary(&wrapper);
    __cudaRegisterFunction(h, &lookup_stub, (char *)"lookup", "lookup", -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterVar(h, table_shadow, (char *)"table", "table", 0, 64, 1, 0);
    struct cudaFuncAttributes a;
    memset(&a, 0xff, sizeof a);
    SIM_OK(cudaFuncGetAttributes(&a, &lookup_stub));
    assert_int_equal(a.numRegs, 17);
    assert_int_equal(a.sharedSizeBytes, 512);
    assert_int_equal(a.constSizeBytes, 64);
    assert_int_equal(a.maxThreadsPerBlock, 128);
    assert_int_equal(a.maxDynamicSharedSizeBytes, 49152 - 512);
    assert_int_equal(a.binaryVersion, 90);
    int n = 0;
    SIM_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, &lookup_stub, 128, 0));
    assert_int_equal(n, 16);
    const char *name = NULL;
    SIM_OK(cudaFuncGetName(&name, &lookup_stub));
    assert_string_equal(name, "lookup");
    SIM_EXPECT(cudaFuncGetAttributes(&a, &n), cudaErrorInvalidDeviceFunction);
    int values[16], back[16];
    for (int i = 0; i < 16; i++)
        values[i] = i * i;
    SIM_OK(cudaMemcpyToSymbol(table_shadow, values, sizeof values, 0, cudaMemcpyHostToDevice));
    SIM_OK(cudaMemcpyFromSymbol(back, table_shadow, sizeof back, 0, cudaMemcpyDeviceToHost));
    assert_memory_equal(back, values, sizeof values);
    SIM_OK(cudaMemcpyFromSymbolAsync(back, table_shadow, 8, 56, cudaMemcpyDeviceToHost, NULL));
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(back[0], 14 * 14);
    size_t size = 0;
    SIM_OK(cudaGetSymbolSize(&size, table_shadow));
    assert_int_equal(size, 64);
    void *p = NULL;
    SIM_OK(cudaGetSymbolAddress(&p, table_shadow));
    assert_non_null(p);
    SIM_EXPECT(cudaMemcpyToSymbol(table_shadow, values, 8, 60, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemcpyToSymbol(table_shadow, values, 8, 0, cudaMemcpyDeviceToHost),
               cudaErrorInvalidMemcpyDirection);
    SIM_EXPECT(cudaMemcpyToSymbol(values, values, 8, 0, cudaMemcpyHostToDevice), cudaErrorInvalidSymbol);
    cudaGetLastError();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attributes_from_the_cubin),
        cmocka_unit_test(test_settable_attributes),
        cmocka_unit_test(test_occupancy_by_hand),
        cmocka_unit_test(test_cooperative_and_cluster_launches),
        cmocka_unit_test(test_module_variables),
        cmocka_unit_test(test_linker),
        cmocka_unit_test(test_runtime_registration),
    };
    return cmocka_run_group_tests_name("sim.funcs", tests, funcs_setup, funcs_teardown);
}
