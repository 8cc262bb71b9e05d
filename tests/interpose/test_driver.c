/*
 * Proves that cucache caches the driver API wherever a program finds it:
 * the exported cuMemAlloc_v2/cuMemFree_v2/cuMemGetInfo_v2 and
 * cuMemAllocAsync/cuMemFreeAsync (+_ptsz), the same names through
 * dlsym(dlopen("libcuda.so.1"), ...) and dlsym(RTLD_DEFAULT, ...), and
 * through cuGetProcAddress_v2 with the legacy and per-thread flags (two
 * different hooks, both in libcucache.so, per dladdr) and through the
 * resolver that the self-lookup of "cuGetProcAddress" returns (cucache's, in
 * both its 12.0 and 11.3 forms); that unhooked names resolve to the driver's
 * own entry points (RTLD_NEXT relative to the caller, version and not-found
 * answers kept); that allocations in a cuCtxCreate'd context are cached by
 * an allocator of that context, apart from the primary context's, which
 * gives its memory back when the context is destroyed; and that runtime
 * and driver frees accept each other's pointers.
 *
 * Seen to fail: without LD_PRELOAD every "lies in libcucache.so" check and
 * every hit count fails; the plain driver checks pass.
 */
#include "itest.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FN(f) ((void *)(uintptr_t)(f))

typedef __typeof__(cuMemAlloc_v2) alloc_fn;
typedef __typeof__(cuMemFree_v2) free_fn;
typedef __typeof__(cuMemGetInfo_v2) info_fn;
typedef __typeof__(cuMemAllocAsync) alloc_async_fn;
typedef __typeof__(cuMemFreeAsync) free_async_fn;
typedef __typeof__(cuGetProcAddress_v2) getproc_v2_fn;
/* The 11.3 form of the resolver; cuda_api.h declares only _v2. */
typedef CUresult getproc_fn(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

static void *libcuda(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    return h;
}

static void expect_in(const void *fn, const char *lib, const char *what)
{
    if (!itest_fn_in(fn, lib)) {
        print_error("%s: expected it in %s\n", what, lib);
        fail();
    }
}

/* Data through a driver allocation: set, copy to the host, check. */
static void check_bytes(CUdeviceptr x, size_t n, unsigned char v)
{
    unsigned char *h = malloc(n);
    assert_non_null(h);
    CU_OK(cuMemsetD8_v2(x, v, n));
    memset(h, 0, n);
    CU_OK(cuMemcpyDtoH_v2(h, x, n));
    assert_int_equal(simtest_check_byte(h, n, v), -1);
    free(h);
}

/* A malloc/free loop through the given entry points, synchronised with
 * cuCtxSynchronize: no device allocation after the first, one hit each. */
static void expect_cached_loop(alloc_fn *a, free_fn *f, const char *what)
{
    enum { ROUNDS = 30 };
    const size_t n = 3 * MIB + 17;
    CUdeviceptr x = 0;
    CU_OK(a(&x, n));
    CU_OK(f(x));
    CU_OK(cuCtxSynchronize());
    unsigned long allocs0 = itest_dev_allocs(), frees0 = itest_dev_frees();
    int64_t hits0 = itest_stat(0, "num_cache_hits");
    for (int r = 0; r < ROUNDS; r++) {
        x = 0;
        CU_OK(a(&x, n));
        assert_true(x != 0);
        if (r % 10 == 0)
            check_bytes(x, n, (unsigned char)r);
        CU_OK(f(x));
        CU_OK(cuCtxSynchronize());
    }
    if (itest_dev_allocs() != allocs0 || itest_dev_frees() != frees0 ||
        itest_stat(0, "num_cache_hits") < hits0 + ROUNDS) {
        print_error("%s: %d rounds took %lu device allocations, %lu device frees, %lld hits\n", what, ROUNDS,
                    itest_dev_allocs() - allocs0, itest_dev_frees() - frees0,
                    (long long)(itest_stat(0, "num_cache_hits") - hits0));
        fail();
    }
}

/* The same for the stream-ordered pair, on stream s, without any sync: a
 * block freed on s is reusable at once on s. */
static void expect_cached_async_loop(alloc_async_fn *a, free_async_fn *f, CUstream s, const char *what)
{
    enum { ROUNDS = 30 };
    const size_t n = 700 * KIB;
    CUdeviceptr x = 0;
    CU_OK(a(&x, n, s));
    CU_OK(f(x, s));
    CU_OK(cuCtxSynchronize());
    unsigned long allocs0 = itest_dev_allocs();
    int64_t hits0 = itest_stat(0, "num_cache_hits");
    for (int r = 0; r < ROUNDS; r++) {
        x = 0;
        CU_OK(a(&x, n, s));
        assert_true(x != 0);
        CU_OK(f(x, s));
    }
    CU_OK(cuCtxSynchronize());
    if (itest_dev_allocs() != allocs0 || itest_stat(0, "num_cache_hits") < hits0 + ROUNDS) {
        print_error("%s: %d rounds took %lu device allocations and %lld hits\n", what, ROUNDS,
                    itest_dev_allocs() - allocs0, (long long)(itest_stat(0, "num_cache_hits") - hits0));
        fail();
    }
}

/* ---- the exported symbols --------------------------------------------- */

static void test_exported_entry_points_are_cucache(void **state)
{
    (void)state;
    CUdeviceptr x = 0;
    CU_OK(cuMemAlloc_v2(&x, MIB));
    check_bytes(x, MIB, 0x61);
    CU_EXPECT(cuMemAlloc_v2(NULL, MIB), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr z = 0;
    CU_EXPECT(cuMemAlloc_v2(&z, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemFree_v2(x));
    itest_require_cucache();
    expect_in(FN(cuMemAlloc_v2), "libcucache.so", "cuMemAlloc_v2 as the program links it");
    expect_in(FN(cuMemFree_v2), "libcucache.so", "cuMemFree_v2 as the program links it");
    expect_in(FN(cuMemGetInfo_v2), "libcucache.so", "cuMemGetInfo_v2 as the program links it");
    expect_in(FN(cuMemAllocAsync_ptsz), "libcucache.so", "cuMemAllocAsync_ptsz as the program links it");
    expect_cached_loop(cuMemAlloc_v2, cuMemFree_v2, "exported cuMemAlloc_v2/cuMemFree_v2");
}

static void test_exported_async_entry_points_are_cached(void **state)
{
    (void)state;
    itest_require_cucache();
    CUstream s = NULL;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    expect_cached_async_loop(cuMemAllocAsync, cuMemFreeAsync, s, "exported cuMemAllocAsync on a created stream");
    expect_cached_async_loop(cuMemAllocAsync, cuMemFreeAsync, CU_STREAM_LEGACY, "exported cuMemAllocAsync, legacy");
    expect_cached_async_loop(cuMemAllocAsync_ptsz, cuMemFreeAsync_ptsz, NULL, "exported cuMemAllocAsync_ptsz");
    CUstream sp = NULL;
    int least = 0, greatest = 0;
    CU_OK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CU_OK(cuStreamCreateWithPriority(&sp, CU_STREAM_NON_BLOCKING, greatest));
    expect_cached_async_loop(cuMemAllocAsync, cuMemFreeAsync, sp, "exported cuMemAllocAsync, stream with priority");
    CU_OK(cuStreamDestroy_v2(sp));
    /* data, in stream order */
    CUdeviceptr x = 0;
    unsigned char *h = NULL;
    CU_OK(cuMemAllocHost_v2((void **)&h, MIB));
    memset(h, 0, MIB);
    CU_OK(cuMemAllocAsync(&x, MIB, s));
    CU_OK(cuMemsetD8Async(x, 0x62, MIB, s));
    CU_OK(cuMemcpyDtoHAsync_v2(h, x, MIB, s));
    CU_OK(cuMemFreeAsync(x, s));
    CU_OK(cuStreamSynchronize(s));
    assert_int_equal(simtest_check_byte(h, MIB, 0x62), -1);
    CU_OK(cuMemFreeHost(h));
    CU_OK(cuStreamDestroy_v2(s));
}

static void test_meminfo_through_the_driver(void **state)
{
    (void)state;
    size_t f = 0, t = 0, rf = 0, rt = 0;
    CU_OK(cuMemGetInfo_v2(&f, &t));
    SIM_OK(cudaMemGetInfo(&rf, &rt));
    assert_int_equal(t, ITEST_CAPACITY);
    assert_int_equal(rt, t);
    assert_int_equal(rf, f);
    CU_OK(cuMemGetInfo_v2(NULL, &t));
    assert_int_equal(t, ITEST_CAPACITY);
    CU_OK(cuMemGetInfo_v2(&f, NULL));
    assert_int_equal(f, rf);
    CU_OK(cuMemGetInfo_v2(NULL, NULL));
    itest_require_cucache();
}

/* ---- dlsym ------------------------------------------------------------ */

static const char *const hooked[] = {"cuMemAlloc_v2",        "cuMemFree_v2",
                                     "cuMemGetInfo_v2",      "cuMemAllocAsync",
                                     "cuMemAllocAsync_ptsz", "cuMemFreeAsync",
                                     "cuMemFreeAsync_ptsz",  "cuGetProcAddress",
                                     "cuGetProcAddress_v2",  "cuCtxSynchronize",
                                     "cuStreamSynchronize",  "cuStreamSynchronize_ptsz",
                                     "cuEventSynchronize",   "cuStreamCreate",
                                     "cuStreamDestroy_v2",   "cuStreamCreateWithPriority",
                                     "cuCtxDestroy_v2",      "cuStreamBeginCapture_v2",
                                     "cuStreamEndCapture",   "cuDevicePrimaryCtxReset_v2",
                                     "cuPointerGetAttribute", "cuPointerGetAttributes",
                                     "cuMemGetAddressRange_v2", "cuIpcGetMemHandle",
                                     "cuIpcOpenMemHandle",    "cuIpcOpenMemHandle_v2",
                                     "cuIpcCloseMemHandle",   "cuPointerSetAttribute",
                                     "cuDevicePrimaryCtxRetain", "cuCtxCreate_v2",
                                     "cuCtxCreate_v3",        "cuCtxCreate_v4",
                                     "cuMemGetHandleForAddressRange", "cuCtxEnablePeerAccess",
                                     "cuCtxDisablePeerAccess"};

static const char *const unhooked[] = {"cuInit", "cuDevicePrimaryCtxRelease_v2", "cuMemAllocFromPoolAsync",
                                       "cuEventRecord", "cucacheSimDeviceAllocs"};

/* entry points that submit work: cucache's counting trampolines
 * (interpose/submit.c) */
static const char *const counted[] = {"cuMemcpy", "cuMemcpyHtoD_v2", "cuLaunchKernel", "cuMemsetD8Async_ptsz",
                                      "cuLaunchHostFunc"};

static void test_dlsym_returns_the_hooks(void **state)
{
    (void)state;
    itest_require_cucache();
    void *h = libcuda();
    int wrong = 0;
    for (size_t i = 0; i < sizeof hooked / sizeof hooked[0]; i++) {
        void *a = dlsym(h, hooked[i]), *b = dlsym(RTLD_DEFAULT, hooked[i]);
        if (!a || !b || !itest_fn_in(a, "libcucache.so") || !itest_fn_in(b, "libcucache.so")) {
            print_error("dlsym(libcuda.so.1 / RTLD_DEFAULT, \"%s\") = %p / %p: not cucache's hook\n", hooked[i], a, b);
            wrong++;
        }
    }
    for (size_t i = 0; i < sizeof unhooked / sizeof unhooked[0]; i++) {
        void *a = dlsym(h, unhooked[i]);
        if (!a || !itest_fn_in(a, "libcuda.so.1")) {
            print_error("dlsym(libcuda.so.1, \"%s\") = %p: not the driver's own\n", unhooked[i], a);
            wrong++;
        }
    }
    for (size_t i = 0; i < sizeof counted / sizeof counted[0]; i++) {
        void *a = dlsym(h, counted[i]), *b = dlsym(RTLD_DEFAULT, counted[i]);
        if (!a || a != b || !itest_fn_in(a, "libcucache.so")) {
            print_error("dlsym(libcuda.so.1 / RTLD_DEFAULT, \"%s\") = %p / %p: not cucache's counting trampoline\n",
                        counted[i], a, b);
            wrong++;
        }
    }
    assert_int_equal(wrong, 0);
    /* RTLD_NEXT is relative to the caller, this executable: the next object
     * is the preloaded libcucache.so */
    void *v = dlsym(RTLD_NEXT, "cucache_version");
    if (!v || !itest_fn_in(v, "libcucache.so")) {
        print_error("dlsym(RTLD_NEXT, \"cucache_version\") from the program = %p: RTLD_NEXT was not resolved "
                    "relative to the program\n",
                    v);
        fail();
    }
    void *m = dlsym(RTLD_NEXT, "cuMemcpy");
    assert_non_null(m);
    assert_true(itest_fn_in(m, "libcucache.so")); /* counted */
    assert_null(dlsym(h, "cuNoSuchEntryPoint"));

    /* what dlsym gave is cached */
    expect_cached_loop((alloc_fn *)(uintptr_t)dlsym(h, "cuMemAlloc_v2"), (free_fn *)(uintptr_t)dlsym(h, "cuMemFree_v2"),
                       "dlsym'd cuMemAlloc_v2/cuMemFree_v2");
    size_t f = 0, t = 0, rf = 0;
    info_fn *info = (info_fn *)(uintptr_t)dlsym(h, "cuMemGetInfo_v2");
    CU_OK(info(&f, &t));
    SIM_OK(cudaMemGetInfo(&rf, NULL));
    assert_int_equal(f, rf);
    assert_int_equal(t, ITEST_CAPACITY);
}

/* ---- cuGetProcAddress ------------------------------------------------- */

static void *lookup_with(getproc_v2_fn *gp, const char *name, int version, cuuint64_t flags)
{
    void *fn = (void *)0x1;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    CUresult rc = gp(name, &fn, version, flags, &st);
    if (rc != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !fn) {
        print_error("cuGetProcAddress_v2(%s, %d, %llu): rc %d status %d fn %p\n", name, version,
                    (unsigned long long)flags, (int)rc, (int)st, fn);
        fail();
    }
    return fn;
}

static void *lookup(const char *name, int version, cuuint64_t flags)
{
    return lookup_with(cuGetProcAddress_v2, name, version, flags);
}

static void test_get_proc_address_returns_the_hooks(void **state)
{
    (void)state;
    itest_require_cucache();
    const cuuint64_t dflt = CU_GET_PROC_ADDRESS_DEFAULT, legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                     pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    expect_in(FN(cuGetProcAddress_v2), "libcucache.so", "cuGetProcAddress_v2 as the program links it");
    static const char *const plain[] = {"cuMemAlloc",     "cuMemFree",       "cuMemGetInfo",      "cuCtxSynchronize",
                                        "cuStreamCreate", "cuStreamDestroy", "cuEventSynchronize",
                                        "cuCtxEnablePeerAccess", "cuCtxDisablePeerAccess"};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        void *fn = lookup(plain[i], 13000, dflt);
        if (!itest_fn_in(fn, "libcucache.so")) {
            print_error("cuGetProcAddress_v2(\"%s\") did not answer cucache's hook\n", plain[i]);
            fail();
        }
    }
    static const char *const per_thread[] = {"cuMemAllocAsync", "cuMemFreeAsync", "cuStreamSynchronize",
                                             "cuStreamBeginCapture", "cuStreamEndCapture"};
    for (size_t i = 0; i < sizeof per_thread / sizeof per_thread[0]; i++) {
        void *l = lookup(per_thread[i], 13000, legacy), *p = lookup(per_thread[i], 13000, pt);
        void *d = lookup(per_thread[i], 13000, dflt);
        if (!itest_fn_in(l, "libcucache.so") || !itest_fn_in(p, "libcucache.so") || !itest_fn_in(d, "libcucache.so") ||
            l == p || d == p) {
            print_error("%s: legacy %p, per-thread %p, default %p: expected two different cucache hooks\n",
                        per_thread[i], l, p, d);
            fail();
        }
    }
    /* what the lookups gave is cached, per-thread and legacy alike */
    expect_cached_loop((alloc_fn *)(uintptr_t)lookup("cuMemAlloc", 13000, dflt),
                       (free_fn *)(uintptr_t)lookup("cuMemFree", 13000, dflt), "cuGetProcAddress'd cuMemAlloc");
    expect_cached_async_loop((alloc_async_fn *)(uintptr_t)lookup("cuMemAllocAsync", 13000, pt),
                             (free_async_fn *)(uintptr_t)lookup("cuMemFreeAsync", 13000, pt), NULL,
                             "cuGetProcAddress'd per-thread cuMemAllocAsync, stream 0");
    expect_cached_async_loop((alloc_async_fn *)(uintptr_t)lookup("cuMemAllocAsync", 13000, legacy),
                             (free_async_fn *)(uintptr_t)lookup("cuMemFreeAsync", 13000, legacy), NULL,
                             "cuGetProcAddress'd legacy cuMemAllocAsync, stream 0");
}

static void test_get_proc_address_keeps_the_drivers_answers(void **state)
{
    (void)state;
    void *h = libcuda();
    const cuuint64_t dflt = CU_GET_PROC_ADDRESS_DEFAULT, pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    /* unhooked names: the driver's own entry points; submitting ones the
     * counting trampoline of the exact variant the driver answered */
    void *m = lookup("cuMemcpy", 13000, dflt);
    expect_in(m, "libcucache.so", "cuGetProcAddress_v2(\"cuMemcpy\")");
    assert_ptr_equal(m, dlsym(h, "cuMemcpy"));
    assert_ptr_equal(lookup("cuMemcpyAsync", 13000, pt), dlsym(h, "cuMemcpyAsync_ptsz"));
    assert_ptr_not_equal(lookup("cuMemcpyAsync", 13000, pt), lookup("cuMemcpyAsync", 13000, dflt));
    assert_ptr_equal(lookup("cuMemAllocFromPoolAsync", 13000, dflt), dlsym(h, "cuMemAllocFromPoolAsync"));
    expect_in(lookup("cuMemAllocFromPoolAsync", 13000, dflt), "libcuda.so.1", "cuMemAllocFromPoolAsync");
    /* not found stays not found, with the driver's status */
    void *fn = (void *)0x1;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    CU_EXPECT(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 10000, dflt, &st), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    assert_null(fn);
    fn = (void *)0x1;
    CU_EXPECT(cuGetProcAddress_v2("cuNoSuchEntryPoint", &fn, 13000, dflt, &st), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    assert_null(fn);
    /* a NULL status pointer is allowed */
    fn = NULL;
    CU_OK(cuGetProcAddress_v2("cuMemAlloc", &fn, 13000, dflt, NULL));
    assert_non_null(fn);
    itest_require_cucache();
    assert_true(itest_fn_in(fn, "libcucache.so"));
}

/* The resolver the program gets back for "cuGetProcAddress" is cucache's,
 * so lookups made through it stay hooked. */
static void test_get_proc_address_self_lookup(void **state)
{
    (void)state;
    itest_require_cucache();
    const cuuint64_t dflt = CU_GET_PROC_ADDRESS_DEFAULT;
    getproc_v2_fn *gp2 = (getproc_v2_fn *)(uintptr_t)lookup("cuGetProcAddress", 12000, dflt);
    expect_in(FN(gp2), "libcucache.so", "cuGetProcAddress_v2(\"cuGetProcAddress\", 12000)");
    void *a = lookup_with(gp2, "cuMemAlloc", 13000, dflt);
    expect_in(a, "libcucache.so", "cuMemAlloc through the looked-up resolver");
    expect_in(lookup_with(gp2, "cuMemcpy", 13000, dflt), "libcucache.so",
              "cuMemcpy (counted) through the looked-up resolver");
    expect_in(lookup_with(gp2, "cuInit", 13000, dflt), "libcuda.so.1", "cuInit through the looked-up resolver");
    /* the 11.3 form */
    getproc_fn *gp = (getproc_fn *)(uintptr_t)lookup("cuGetProcAddress", 11030, dflt);
    expect_in(FN(gp), "libcucache.so", "cuGetProcAddress_v2(\"cuGetProcAddress\", 11030)");
    void *fr = NULL;
    CU_OK(gp("cuMemFree", &fr, 13000, dflt));
    expect_in(fr, "libcucache.so", "cuMemFree through the 11.3 resolver");
    void *pt = NULL, *leg = NULL;
    CU_OK(gp("cuMemAllocAsync", &pt, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
    CU_OK(gp("cuMemAllocAsync", &leg, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM));
    expect_in(pt, "libcucache.so", "per-thread cuMemAllocAsync through the 11.3 resolver");
    expect_in(leg, "libcucache.so", "legacy cuMemAllocAsync through the 11.3 resolver");
    assert_ptr_not_equal(pt, leg);
    /* dlsym's answer for the 11.3 name is the same resolver family */
    getproc_fn *dl = (getproc_fn *)(uintptr_t)dlsym(libcuda(), "cuGetProcAddress");
    expect_in(FN(dl), "libcucache.so", "dlsym(libcuda.so.1, \"cuGetProcAddress\")");
    void *da = NULL;
    CU_OK(dl("cuMemAlloc", &da, 13000, dflt));
    expect_in(da, "libcucache.so", "cuMemAlloc through dlsym's cuGetProcAddress");
    /* and what the resolvers gave is cached */
    expect_cached_loop((alloc_fn *)(uintptr_t)a, (free_fn *)(uintptr_t)fr, "entry points of the looked-up resolvers");
    expect_cached_loop((alloc_fn *)(uintptr_t)da, (free_fn *)(uintptr_t)fr, "cuMemAlloc of dlsym's resolver");
}

/* ---- contexts and layers ---------------------------------------------- */

/* Rounds in a created context take one segment from the driver, not one
 * each; the primary context's counts do not move; the context's
 * destruction returns that segment.  Seen to fail with ctx_devs.c's
 * hook_ctx_dev answering NULL (every round reaches the driver). */
static void test_created_context_has_its_own_cache(void **state)
{
    (void)state;
    enum { ROUNDS = 5 };
    itest_require_cucache();
    CUdevice dev = 0;
    CUcontext c = NULL, popped = NULL;
    CU_OK(cuDeviceGet(&dev, 0));
    int64_t hits0 = itest_stat(0, "num_cache_hits");
    int64_t live0 = itest_stat(0, "allocation.all.current");
    int64_t cached0 = itest_stat(0, "contexts_cached");
    CU_OK(cuCtxCreate_v2(&c, 0, dev));
    unsigned long allocs0 = itest_dev_allocs(), frees0 = itest_dev_frees();
    for (int r = 0; r < ROUNDS; r++) {
        CUdeviceptr x = 0;
        CU_OK(cuMemAlloc_v2(&x, 2 * MIB));
        check_bytes(x, 2 * MIB, (unsigned char)(0x70 + r));
        CU_OK(cuMemFree_v2(x));
        CU_OK(cuCtxSynchronize());
    }
    assert_int_equal(itest_dev_allocs(), allocs0 + 1);
    assert_int_equal(itest_dev_frees(), frees0);
    assert_int_equal(itest_stat(0, "contexts_cached"), cached0 + 1);
    CU_OK(cuCtxPopCurrent_v2(&popped));
    assert_ptr_equal(popped, c);
    CU_OK(cuCtxDestroy_v2(c));
    assert_int_equal(itest_dev_frees(), frees0 + 1); /* its segment went back with it */
    assert_int_equal(itest_stat(0, "num_cache_hits"), hits0);
    assert_int_equal(itest_stat(0, "allocation.all.current"), live0);
}

/* Every route to a submitting entry point adds exactly one to the count
 * (cucache_stat's num_submissions, interpose/submit.c): the exported name,
 * dlsym of the driver, cuGetProcAddress (legacy and per-thread), the
 * runtime's own calls (which reach the driver through cuGetProcAddress);
 * quiet calls add nothing, and nothing here makes the count blind.
 * Seen to fail with the increment taken out of the trampolines. */
typedef __typeof__(cuMemsetD8_v2) memset_fn;
typedef __typeof__(cuMemsetD8Async) memset_async_fn;

static int64_t submissions(void)
{
    return itest_stat(0, "num_submissions");
}

static void test_submissions_counted_by_every_route(void **state)
{
    (void)state;
    itest_require_cucache();
    CUdeviceptr x;
    CU_OK(cuMemAlloc_v2(&x, 4096));
    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int64_t n = submissions();
    CU_OK(cuMemsetD8_v2(x, 1, 4096)); /* by name */
    assert_int_equal(submissions(), n + 1);
    memset_fn *by_dlsym = (memset_fn *)(uintptr_t)dlsym(libcuda(), "cuMemsetD8_v2");
    CU_OK(by_dlsym(x, 2, 4096));
    assert_int_equal(submissions(), n + 2);
    memset_fn *by_proc = (memset_fn *)(uintptr_t)lookup("cuMemsetD8", 13000, CU_GET_PROC_ADDRESS_DEFAULT);
    CU_OK(by_proc(x, 3, 4096));
    assert_int_equal(submissions(), n + 3);
    CU_OK(cuCtxSynchronize()); /* a memset of device memory does not wait: order it before the stream's */
    memset_async_fn *pt =
        (memset_async_fn *)(uintptr_t)lookup("cuMemsetD8Async", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    CU_OK(pt(x, 4, 4096, s));
    assert_int_equal(submissions(), n + 4);
    SIM_OK(cudaMemsetAsync((void *)x, 5, 4096, (cudaStream_t)s)); /* the runtime: through cuGetProcAddress */
    assert_int_equal(submissions(), n + 5);
    /* quiet calls */
    CUevent e;
    CU_OK(cuEventCreate(&e, 0));
    CU_OK(cuEventRecord(e, s));
    CU_OK(cuStreamWaitEvent(s, e, 0));
    CU_OK(cuStreamSynchronize(s));
    CU_OK(cuEventDestroy_v2(e));
    assert_int_equal(submissions(), n + 5);
    assert_int_equal(itest_stat(0, "submissions_unseen"), 0);
    CU_OK(cuStreamDestroy_v2(s));
    CU_OK(cuMemFree_v2(x));
}

static void test_runtime_and_driver_free_each_others_pointers(void **state)
{
    (void)state;
    const size_t n = 5 * MIB;
    int64_t live0 = itest_have_cucache() ? itest_stat(0, "allocation.all.current") : 0;
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, n));
    check_bytes((CUdeviceptr)(uintptr_t)p, n, 0x7A);
    CU_OK(cuMemFree_v2((CUdeviceptr)(uintptr_t)p));
    CUdeviceptr x = 0;
    CU_OK(cuMemAlloc_v2(&x, n));
    check_bytes(x, n, 0x7B);
    SIM_OK(cudaFree((void *)(uintptr_t)x));
    SIM_OK(cudaDeviceSynchronize());
    SIM_EXPECT(cudaFree(p), cudaErrorInvalidValue);
    CU_EXPECT(cuMemFree_v2(x), CUDA_ERROR_INVALID_VALUE);
    (void)cudaGetLastError();
    itest_require_cucache();
    assert_int_equal(itest_stat(0, "allocation.all.current"), live0);
    /* the blocks went back to the cache: allocating them again is a hit */
    unsigned long allocs0 = itest_dev_allocs();
    int64_t hits0 = itest_stat(0, "num_cache_hits"), reserved0 = itest_stat(0, "reserved_bytes.all.current");
    SIM_OK(cudaMalloc(&p, n));
    CU_OK(cuMemAlloc_v2(&x, n));
    if (!itest_expandable()) {
        assert_int_equal(itest_dev_allocs(), allocs0);
    } else {
        /* expandable segments may have given free pages back (an earlier
         * allocation that found the device short, timing-dependent): the
         * cached pages serve, and at most the two blocks' pages are new */
        assert_true(itest_stat(0, "num_cache_hits") > hits0);
        assert_true(itest_stat(0, "reserved_bytes.all.current") <= reserved0 + (int64_t)(2 * n));
    }
    SIM_OK(cudaFree(p));
    CU_OK(cuMemFree_v2(x));
}

/* The program's own virtual memory calls (NCCL's, a framework's) pass
 * through untouched: its memory works, its pointers answer as the driver
 * says, cucache's counters do not move, and cudaMemGetInfo and the OOM
 * report see it as memory outside cucache. */
static void test_programs_own_virtual_memory_passes_through(void **state)
{
    (void)state;
    itest_require_cucache();
    const size_t n = 64 * MIB;
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(itest_empty_cache(0), 0);
    int64_t reserved0 = itest_stat(0, "reserved_bytes.all.current");
    size_t f0 = 0, t = 0;
    SIM_OK(cudaMemGetInfo(&f0, &t));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr va = 0;
    CU_OK(cuMemCreate(&h, n, &prop, 0));
    CU_OK(cuMemAddressReserve(&va, 2 * n, 0, 0, 0));
    CU_OK(cuMemMap(va, n, 0, h, 0));
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU_OK(cuMemSetAccess(va, n, &acc, 1));
    check_bytes(va, n, 0x5E);
    /* the driver's answers, not a block's */
    CUdeviceptr start = 0;
    size_t size = 0;
    CU_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + 100));
    CU_OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + 100));
    assert_true(start == va && size == 2 * n); /* the reservation */
    CU_OK(cuMemGetAddressRange_v2(&start, &size, va + 100));
    assert_true(start == va && size == n); /* the mapping */
    assert_int_equal(itest_stat(0, "reserved_bytes.all.current"), reserved0);
    size_t f1 = 0;
    SIM_OK(cudaMemGetInfo(&f1, &t));
    assert_int_equal(f0 - f1, n);
    /* an OOM report counts it outside cucache */
    void *big = NULL;
    char err[8192];
    itest_stderr_begin();
    cudaError_t rc = cudaMalloc(&big, f1 + 64 * MIB);
    itest_stderr_end(err, sizeof err);
    (void)cudaGetLastError();
    assert_int_equal(rc, cudaErrorMemoryAllocation);
    char want[96];
    snprintf(want, sizeof want, "outside cucache: %zu.00 MiB", (t - f1 - (size_t)reserved0) >> 20);
    if (!strstr(err, want))
        fail_msg("the OOM report does not say \"%s\":\n%s", want, err);
    CU_OK(cuMemUnmap(va, n));
    CU_OK(cuMemRelease(h));
    CU_OK(cuMemAddressFree(va, 2 * n));
    SIM_OK(cudaMemGetInfo(&f1, &t));
    assert_int_equal(f1, f0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        ITEST(test_programs_own_virtual_memory_passes_through),
        ITEST(test_exported_entry_points_are_cucache),
        ITEST(test_exported_async_entry_points_are_cached),
        ITEST(test_meminfo_through_the_driver),
        ITEST(test_dlsym_returns_the_hooks),
        ITEST(test_get_proc_address_returns_the_hooks),
        ITEST(test_get_proc_address_keeps_the_drivers_answers),
        ITEST(test_get_proc_address_self_lookup),
        ITEST(test_submissions_counted_by_every_route),
        ITEST(test_created_context_has_its_own_cache),
        ITEST(test_runtime_and_driver_free_each_others_pointers),
    };
    return ITEST_RUN("interpose.driver", tests, itest_group_setup);
}
