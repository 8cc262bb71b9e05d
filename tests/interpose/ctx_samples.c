/*
 * Driver-API programs shaped as NVIDIA's samples that create their own
 * contexts (cuCtxCreate) rather than use the primary one, on the module
 * fixtures of the simulator (subprojects/cusim/tests/modules: add_one and
 * scale stand in for the samples' kernels; the simulator computes
 * nothing, so every result is the data as it went in):
 *   vectorAddDrv     a context, a module, three buffers, one launch, frees,
 *                    the context destroyed;
 *   matrixMulDrv     a context, three buffers of the matrices' sizes, a
 *                    launch timed between events many times, frees, the
 *                    context destroyed;
 *   threadMigration  a context per device, floating (popped), threads that
 *                    each push one, allocate, launch, free and pop it, in
 *                    rounds; the contexts destroyed at the end;
 *   vectorAddMMAP    a context whose buffers are the driver's virtual
 *                    memory (cuMemCreate, cuMemMap): nothing for cucache.
 * Each prints lines without addresses or times: ctx_samples_check.sh runs
 * it alone and under libcucache.so and compares.  Usage:
 * ctx_samples MODE FIXTURE_DIR; exit 0 when every check passed.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cusim/cuda_api.h"

static const char *err_name(CUresult r)
{
    const char *s = NULL;
    cuGetErrorName(r, &s);
    return s ? s : "?";
}

#define OK(call)                                                                                                       \
    do {                                                                                                               \
        CUresult r_ = (call);                                                                                          \
        if (r_ != CUDA_SUCCESS) {                                                                                      \
            printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, err_name(r_));                                    \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static const char *fixtures;

/* The fixture module, loaded in the current context, and one kernel of it. */
static CUfunction kernel(CUmodule *m, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/kernels.fatbin", fixtures);
    OK(cuModuleLoad(m, path));
    CUfunction f;
    OK(cuModuleGetFunction(&f, *m, name));
    return f;
}

/* Fills n ints with a pattern of seed. */
static int *pattern(size_t n, int seed)
{
    int *h = malloc(n * sizeof *h);
    if (!h) {
        printf("FAIL: no host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        h[i] = (int)(i * 7 + (size_t)seed);
    return h;
}

/* The device buffer read back equals what was written. */
static int same(CUdeviceptr d, const int *want, size_t n)
{
    int *got = malloc(n * sizeof *got);
    if (!got)
        return 0;
    OK(cuMemcpyDtoH_v2(got, d, n * sizeof *got));
    int ok = memcmp(got, want, n * sizeof *got) == 0;
    free(got);
    return ok;
}

static void launch_add_one(CUfunction f, CUdeviceptr p, int n, CUstream s)
{
    void *args[] = {&p, &n};
    OK(cuLaunchKernel(f, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static int vector_add_drv(void)
{
    enum { N = 50000 };
    CUdevice dev;
    CUcontext ctx;
    CUmodule m;
    OK(cuInit(0));
    OK(cuDeviceGet(&dev, 0));
    OK(cuCtxCreate_v2(&ctx, 0, dev));
    CUfunction f = kernel(&m, "add_one");
    int *ha = pattern(N, 1), *hb = pattern(N, 2);
    CUdeviceptr da, db, dc;
    OK(cuMemAlloc_v2(&da, N * sizeof(int)));
    OK(cuMemAlloc_v2(&db, N * sizeof(int)));
    OK(cuMemAlloc_v2(&dc, N * sizeof(int)));
    OK(cuMemcpyHtoD_v2(da, ha, N * sizeof(int)));
    OK(cuMemcpyHtoD_v2(db, hb, N * sizeof(int)));
    OK(cuMemcpyDtoD_v2(dc, da, N * sizeof(int)));
    launch_add_one(f, dc, N, NULL);
    OK(cuCtxSynchronize());
    int ok = same(dc, ha, N) && same(db, hb, N);
    printf("vectorAddDrv: %d elements, Result = %s\n", N, ok ? "PASS" : "FAIL");
    OK(cuMemFree_v2(da));
    OK(cuMemFree_v2(db));
    OK(cuMemFree_v2(dc));
    OK(cuModuleUnload(m));
    OK(cuCtxDestroy_v2(ctx));
    free(ha);
    free(hb);
    return ok ? 0 : 1;
}

static int matrix_mul_drv(void)
{
    enum { BLOCK = 32, WA = 4 * BLOCK, HA = 6 * BLOCK, WB = 4 * BLOCK, HB = WA, WC = WB, HC = HA, ITER = 10 };
    CUdevice dev;
    CUcontext ctx;
    CUmodule m;
    OK(cuInit(0));
    OK(cuDeviceGet(&dev, 0));
    OK(cuCtxCreate_v2(&ctx, 0, dev));
    CUfunction f = kernel(&m, "add_one");
    int *ha = pattern(WA * HA, 3), *hb = pattern(WB * HB, 4);
    CUdeviceptr da, db, dc;
    OK(cuMemAlloc_v2(&da, WA * HA * sizeof(int)));
    OK(cuMemAlloc_v2(&db, WB * HB * sizeof(int)));
    OK(cuMemAlloc_v2(&dc, WC * HC * sizeof(int)));
    OK(cuMemcpyHtoD_v2(da, ha, WA * HA * sizeof(int)));
    OK(cuMemcpyHtoD_v2(db, hb, WB * HB * sizeof(int)));
    CUevent start, stop;
    OK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    OK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
    OK(cuEventRecord(start, NULL));
    for (int i = 0; i < ITER; i++)
        launch_add_one(f, dc, WC * HC, NULL);
    OK(cuEventRecord(stop, NULL));
    OK(cuEventSynchronize(stop));
    float ms = -1;
    OK(cuEventElapsedTime_v2(&ms, start, stop));
    int ok = same(da, ha, WA * HA) && same(db, hb, WB * HB) && ms >= 0;
    printf("matrixMulDrv: MatrixA(%d,%d), MatrixB(%d,%d), %d launches timed, Result = %s\n", WA, HA, WB, HB, ITER,
           ok ? "PASS" : "FAIL");
    OK(cuEventDestroy_v2(start));
    OK(cuEventDestroy_v2(stop));
    OK(cuMemFree_v2(da));
    OK(cuMemFree_v2(db));
    OK(cuMemFree_v2(dc));
    OK(cuModuleUnload(m));
    OK(cuCtxDestroy_v2(ctx));
    free(ha);
    free(hb);
    return ok ? 0 : 1;
}

enum { MIGRATION_THREADS = 4, MIGRATION_ROUNDS = 3, MIGRATION_N = 1 << 16, MAX_DEVS = 16 };

typedef struct migrant_s {
    CUcontext ctx;
    CUfunction f;
    int id, ok;
} migrant_t;

static void *migrate(void *arg)
{
    migrant_t *t = arg;
    t->ok = 1;
    for (int r = 0; r < MIGRATION_ROUNDS; r++) {
        OK(cuCtxPushCurrent_v2(t->ctx));
        int *h = pattern(MIGRATION_N, t->id * 10 + r);
        CUdeviceptr d;
        OK(cuMemAlloc_v2(&d, MIGRATION_N * sizeof(int)));
        OK(cuMemcpyHtoD_v2(d, h, MIGRATION_N * sizeof(int)));
        launch_add_one(t->f, d, MIGRATION_N, NULL);
        OK(cuCtxSynchronize());
        t->ok &= same(d, h, MIGRATION_N);
        OK(cuMemFree_v2(d));
        free(h);
        CUcontext popped;
        OK(cuCtxPopCurrent_v2(&popped));
        t->ok &= popped == t->ctx;
    }
    return NULL;
}

static int thread_migration(void)
{
    int ndev = 0;
    OK(cuInit(0));
    OK(cuDeviceGetCount(&ndev));
    if (ndev > MAX_DEVS)
        ndev = MAX_DEVS;
    CUcontext ctx[MAX_DEVS];
    CUmodule mod[MAX_DEVS];
    CUfunction fn[MAX_DEVS];
    for (int d = 0; d < ndev; d++) {
        CUdevice dev;
        CUcontext popped;
        OK(cuDeviceGet(&dev, d));
        OK(cuCtxCreate_v2(&ctx[d], 0, dev));
        fn[d] = kernel(&mod[d], "add_one");
        OK(cuCtxPopCurrent_v2(&popped)); /* floating: any thread may push it */
    }
    printf("threadMigration: %d device(s), %d threads, %d rounds each\n", ndev, MIGRATION_THREADS, MIGRATION_ROUNDS);
    pthread_t th[MIGRATION_THREADS];
    migrant_t t[MIGRATION_THREADS];
    for (int i = 0; i < MIGRATION_THREADS; i++) {
        t[i] = (migrant_t){ctx[i % ndev], fn[i % ndev], i, 0};
        if (pthread_create(&th[i], NULL, migrate, &t[i]) != 0) {
            printf("FAIL: no thread\n");
            return 1;
        }
    }
    int ok = 1;
    for (int i = 0; i < MIGRATION_THREADS; i++) {
        pthread_join(th[i], NULL);
        printf("threadMigration: thread %d on device %d: %s\n", i, i % ndev, t[i].ok ? "PASS" : "FAIL");
        ok &= t[i].ok;
    }
    for (int d = 0; d < ndev; d++) {
        OK(cuCtxPushCurrent_v2(ctx[d]));
        OK(cuModuleUnload(mod[d]));
        CUcontext popped;
        OK(cuCtxPopCurrent_v2(&popped));
        OK(cuCtxDestroy_v2(ctx[d]));
    }
    printf("threadMigration: Result = %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

static int vector_add_mmap(void)
{
    enum { N = 50000 };
    CUdevice dev;
    CUcontext ctx;
    CUmodule m;
    OK(cuInit(0));
    OK(cuDeviceGet(&dev, 0));
    OK(cuCtxCreate_v2(&ctx, 0, dev));
    CUfunction f = kernel(&m, "add_one");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)dev;
    size_t g = 0;
    OK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t size = (N * sizeof(int) + g - 1) / g * g;
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    OK(cuMemAddressReserve(&va, size, 0, 0, 0));
    OK(cuMemCreate(&h, size, &prop, 0));
    OK(cuMemMap(va, size, 0, h, 0));
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, (int)dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    OK(cuMemSetAccess(va, size, &acc, 1));
    int *ha = pattern(N, 5);
    OK(cuMemcpyHtoD_v2(va, ha, N * sizeof(int)));
    launch_add_one(f, va, N, NULL);
    OK(cuCtxSynchronize());
    int ok = same(va, ha, N);
    printf("vectorAddMMAP: %d elements in virtual memory, Result = %s\n", N, ok ? "PASS" : "FAIL");
    OK(cuMemUnmap(va, size));
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, size));
    OK(cuModuleUnload(m));
    OK(cuCtxDestroy_v2(ctx));
    free(ha);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(void);
    } modes[] = {
        {"vectorAddDrv", vector_add_drv},
        {"matrixMulDrv", matrix_mul_drv},
        {"threadMigration", thread_migration},
        {"vectorAddMMAP", vector_add_mmap},
    };
    if (argc == 3)
        for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
            if (strcmp(argv[1], modes[i].name) == 0) {
                fixtures = argv[2];
                return modes[i].run();
            }
    fprintf(stderr, "usage: %s vectorAddDrv|matrixMulDrv|threadMigration|vectorAddMMAP FIXTURE_DIR\n", argv[0]);
    return 2;
}
