/*
 * Proves that libcudart.so.12 answers CUDA 12.4's signatures and layouts
 * where CUDA 13 changed them: device properties at CUDA 12.4's offsets
 * (the plain name CUDA 11's prefix only), capture info in its three forms,
 * capture dependencies and graph edges without edge data (plain) and with
 * it (_v2), managed memory hints by device, and the structs CUDA 13
 * lengthened read and written at CUDA 12's length (guard bytes after each
 * stay as they were).  Built twice: with CUDA 12.4's own headers where
 * Debian's root holds them (SIMTEST_CUDA12_HEADERS), and with the
 * simulator's declarations of them (src/runtime12.h, whose offsets are
 * checked against numbers read from those headers).
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#ifdef SIMTEST_CUDA12_HEADERS
#include <cuda_runtime_api.h>
typedef struct cudaDeviceProp prop12_t;
#else
#include "cusim/cuda_api.h"
#include "runtime12.h"
typedef struct rt12_device_prop prop12_t;
/* the C names of CUDA 12's forms of names cuda_api.h declares as CUDA 13's */
#define cudaStreamUpdateCaptureDependencies rt12_update_capture_deps
#define cudaGraphGetEdges rt12_graph_get_edges
#define cudaGraphNodeGetDependencies rt12_graph_node_get_dependencies
#define cudaGraphNodeGetDependentNodes rt12_graph_node_get_dependent_nodes
#define cudaGraphAddDependencies rt12_graph_add_dependencies
#define cudaGraphRemoveDependencies rt12_graph_remove_dependencies
#define cudaGraphAddNode rt12_graph_add_node
#define cudaMemPrefetchAsync rt12_prefetch
#define cudaMemAdvise rt12_advise
#endif

/* CUDA 12.4's driver_types.h: sizes and offsets (read with offsetof). */
_Static_assert(sizeof(prop12_t) == 1032, "cudaDeviceProp size");
_Static_assert(offsetof(prop12_t, totalGlobalMem) == 288, "totalGlobalMem");
_Static_assert(offsetof(prop12_t, clockRate) == 348, "clockRate");
_Static_assert(offsetof(prop12_t, major) == 360, "major");
_Static_assert(offsetof(prop12_t, minor) == 364, "minor");
_Static_assert(offsetof(prop12_t, multiProcessorCount) == 388, "multiProcessorCount");
_Static_assert(offsetof(prop12_t, memoryClockRate) == 608, "memoryClockRate");
_Static_assert(offsetof(prop12_t, maxThreadsPerMultiProcessor) == 624, "maxThreadsPerMultiProcessor");
_Static_assert(offsetof(prop12_t, cooperativeMultiDeviceLaunch) == 692, "cooperativeMultiDeviceLaunch");
_Static_assert(offsetof(prop12_t, reservedSharedMemPerBlock) == 720, "reservedSharedMemPerBlock");
_Static_assert(offsetof(prop12_t, unifiedFunctionPointers) == 776, "unifiedFunctionPointers");

#define OK(call) assert_int_equal((call), cudaSuccess)
#define GUARD 0xAB

/* A struct of `size` bytes followed by guard bytes. */
typedef struct guarded_s {
    unsigned char bytes[2048];
} guarded_t;

static void guard(guarded_t *g)
{
    memset(g->bytes, GUARD, sizeof g->bytes);
}

static void assert_guard(const guarded_t *g, size_t size)
{
    for (size_t i = size; i < sizeof g->bytes; i++)
        if (g->bytes[i] != GUARD)
            fail_msg("byte %zu after a %zu-byte struct was written", i, size);
}

/* The exported symbol of a CUDA 12 form no header of the program declares. */
static void *export12(const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    assert_non_null(p);
    return p;
}

static void test_props_v2(void **state)
{
    (void)state;
    guarded_t g;
    guard(&g);
    prop12_t *p = (prop12_t *)(void *)g.bytes;
    OK(cudaGetDeviceProperties_v2(p, 0));
    assert_guard(&g, sizeof *p);
    assert_string_equal(p->name, "cucache simulated GPU (H100-like)");
    assert_int_equal(p->major, 9);
    assert_int_equal(p->minor, 0);
    assert_int_equal(p->multiProcessorCount, 132);
    assert_true(p->totalGlobalMem >= ((size_t)1 << 30));
    assert_int_equal(p->maxThreadsPerMultiProcessor, 2048);
    assert_int_equal(p->warpSize, 32);
    /* the fields CUDA 13 removed, from their attributes */
    int v;
    OK(cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, 0));
    assert_true(v > 0);
    assert_int_equal(p->clockRate, v);
    OK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, 0));
    assert_true(v > 0);
    assert_int_equal(p->memoryClockRate, v);
    OK(cudaDeviceGetAttribute(&v, (enum cudaDeviceAttr)69 /* MaxTexture1DLinearWidth */, 0));
    assert_int_equal(p->maxTexture1DLinear, v);
    assert_int_equal(p->deviceOverlap, 1);
    assert_int_equal(p->unifiedFunctionPointers, 1);
    assert_int_equal(cudaGetDeviceProperties_v2(p, 99), cudaErrorInvalidDevice);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidDevice);
    assert_int_equal(cudaGetDeviceProperties_v2(NULL, 0), cudaErrorInvalidValue);
}

/* The plain export writes CUDA 11's struct, which ended at
 * reservedSharedMemPerBlock. */
static void test_props_plain(void **state)
{
    (void)state;
    cudaError_t (*get)(prop12_t *, int) = (cudaError_t(*)(prop12_t *, int))export12("cudaGetDeviceProperties");
    guarded_t g;
    guard(&g);
    prop12_t *p = (prop12_t *)(void *)g.bytes;
    OK(get(p, 0));
    assert_guard(&g, offsetof(prop12_t, reservedSharedMemPerBlock) + sizeof(size_t));
    assert_int_equal(p->major, 9);
    assert_int_equal(p->multiProcessorCount, 132);
}

static void test_capture_info(void **state)
{
    (void)state;
    cudaError_t (*info3)(cudaStream_t, enum cudaStreamCaptureStatus *, unsigned long long *) = (cudaError_t(*)(
        cudaStream_t, enum cudaStreamCaptureStatus *, unsigned long long *))export12("cudaStreamGetCaptureInfo");
    cudaStream_t s;
    void *d;
    OK(cudaStreamCreate(&s));
    OK(cudaMalloc(&d, 4096));
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
    OK(info3(s, &st, NULL));
    assert_int_equal(st, cudaStreamCaptureStatusNone);

    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    OK(cudaMemsetAsync(d, 0, 4096, s));
    unsigned long long id3 = 0, id2 = 0, id_v3 = 0;
    OK(info3(s, &st, &id3));
    assert_int_equal(st, cudaStreamCaptureStatusActive);
    assert_true(id3 != 0);

    cudaGraph_t graph = NULL;
    const cudaGraphNode_t *deps = NULL;
    size_t n = 0;
    OK(cudaStreamGetCaptureInfo_v2(s, &st, &id2, &graph, &deps, &n));
    assert_int_equal(st, cudaStreamCaptureStatusActive);
    assert_true(id2 == id3);
    assert_non_null(graph);
    assert_int_equal(n, 1);
    cudaGraphNode_t memset_node = deps[0];

    const cudaGraphEdgeData *edges = NULL;
    n = 0;
    OK(cudaStreamGetCaptureInfo_v3(s, &st, &id_v3, NULL, &deps, &edges, &n));
    assert_true(id_v3 == id3);
    assert_int_equal(n, 1);
    assert_ptr_equal(deps[0], memset_node);

    /* CUDA 12's plain update: no edge data argument */
    OK(cudaStreamUpdateCaptureDependencies(s, NULL, 0, cudaStreamSetCaptureDependencies));
    OK(cudaStreamGetCaptureInfo_v2(s, &st, NULL, NULL, &deps, &n));
    assert_int_equal(n, 0);
    cudaGraphNode_t one[1] = {memset_node};
    OK(cudaStreamUpdateCaptureDependencies_v2(s, one, NULL, 1, cudaStreamSetCaptureDependencies));
    OK(cudaStreamGetCaptureInfo_v2(s, &st, NULL, NULL, &deps, &n));
    assert_int_equal(n, 1);

    cudaGraph_t captured;
    OK(cudaStreamEndCapture(s, &captured));
    OK(cudaGraphDestroy(captured));
    assert_int_equal(cudaStreamGetCaptureInfo_v2(s, NULL, NULL, NULL, NULL, NULL), cudaErrorInvalidValue);
    cudaGetLastError();
    OK(cudaFree(d));
    OK(cudaStreamDestroy(s));
}

static void host_fn(void *arg)
{
    (void)arg;
}

static void test_graph_edges(void **state)
{
    (void)state;
    cudaGraph_t g;
    cudaGraphNode_t a, b, c;
    OK(cudaGraphCreate(&g, 0));
    OK(cudaGraphAddEmptyNode(&a, g, NULL, 0));
    OK(cudaGraphAddEmptyNode(&b, g, NULL, 0));
    OK(cudaGraphAddDependencies(g, &a, &b, 1));

    cudaGraphNode_t from[4], to[4];
    size_t n = 4;
    OK(cudaGraphGetEdges(g, from, to, &n));
    assert_int_equal(n, 1);
    assert_ptr_equal(from[0], a);
    assert_ptr_equal(to[0], b);
    cudaGraphEdgeData data[4];
    memset(data, GUARD, sizeof data);
    n = 4;
    OK(cudaGraphGetEdges_v2(g, from, to, data, &n));
    assert_int_equal(n, 1);
    assert_int_equal(data[0].type, 0); /* the default dependency */

    cudaGraphNode_t nodes[4];
    n = 4;
    OK(cudaGraphNodeGetDependencies(b, nodes, &n));
    assert_int_equal(n, 1);
    assert_ptr_equal(nodes[0], a);
    n = 4;
    OK(cudaGraphNodeGetDependentNodes(a, nodes, &n));
    assert_int_equal(n, 1);
    assert_ptr_equal(nodes[0], b);
    n = 4;
    OK(cudaGraphNodeGetDependencies_v2(b, nodes, data, &n));
    assert_int_equal(n, 1);
    n = 4;
    OK(cudaGraphNodeGetDependentNodes_v2(a, nodes, data, &n));
    assert_int_equal(n, 1);

    /* CUDA 12's plain cudaGraphAddNode: dependencies without edge data */
    struct cudaGraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeHost;
    p.host.fn = host_fn;
    OK(cudaGraphAddNode(&c, g, &b, 1, &p));
    n = 4;
    OK(cudaGraphNodeGetDependencies(c, nodes, &n));
    assert_int_equal(n, 1);
    assert_ptr_equal(nodes[0], b);

    OK(cudaGraphRemoveDependencies(g, &a, &b, 1));
    n = 4;
    OK(cudaGraphGetEdges(g, from, to, &n));
    assert_int_equal(n, 1); /* b -> c */
    cudaGraphEdgeData plain;
    memset(&plain, 0, sizeof plain);
    OK(cudaGraphAddDependencies_v2(g, &a, &b, &plain, 1));
    OK(cudaGraphRemoveDependencies_v2(g, &a, &b, &plain, 1));
    n = 4;
    OK(cudaGraphGetEdges(g, from, to, &n));
    assert_int_equal(n, 1);
    OK(cudaGraphDestroy(g));
}

static void test_managed_hints(void **state)
{
    (void)state;
    void *m;
    OK(cudaMallocManaged(&m, 1 << 20, cudaMemAttachGlobal));
    OK(cudaMemAdvise(m, 1 << 20, cudaMemAdviseSetPreferredLocation, 0));
    int where = -7;
    OK(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributePreferredLocation, m, 1 << 20));
    assert_int_equal(where, 0);
    OK(cudaMemAdvise(m, 1 << 20, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId));
    OK(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributePreferredLocation, m, 1 << 20));
    assert_int_equal(where, cudaCpuDeviceId);
    OK(cudaMemPrefetchAsync(m, 1 << 20, 0, 0));
    assert_int_equal(cudaMemPrefetchAsync(m, 1 << 20, 42, 0), cudaErrorInvalidDevice);
    cudaGetLastError();
    OK(cudaDeviceSynchronize());
    OK(cudaFree(m));
}

static void test_pointer_attributes(void **state)
{
    (void)state;
    void *d;
    OK(cudaMalloc(&d, 4096));
    guarded_t g;
    guard(&g);
    struct cudaPointerAttributes *a = (struct cudaPointerAttributes *)(void *)g.bytes;
    OK(cudaPointerGetAttributes(a, d));
    assert_guard(&g, 24);
    assert_int_equal(a->type, cudaMemoryTypeDevice);
    assert_int_equal(a->device, 0);
    assert_ptr_equal(a->devicePointer, d);
    OK(cudaFree(d));
}

/* A texture over linear memory: CUDA 12's resource description has no
 * flags after its union; the guard bytes where CUDA 13's are must not be
 * read, and the answers must not write past CUDA 12's length. */
static void test_texture_descs(void **state)
{
    (void)state;
    void *d;
    OK(cudaMalloc(&d, 4096));
    guarded_t rg;
    guard(&rg);
    struct cudaResourceDesc *r = (struct cudaResourceDesc *)(void *)rg.bytes;
    memset(r, 0, 64);
    r->resType = cudaResourceTypeLinear;
    r->res.linear.devPtr = d;
    r->res.linear.desc = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
    r->res.linear.sizeInBytes = 4096;
    struct cudaTextureDesc t;
    memset(&t, 0, sizeof t);
    t.readMode = cudaReadModeElementType;
    cudaTextureObject_t tex;
    OK(cudaCreateTextureObject(&tex, r, &t, NULL));

    guarded_t out;
    guard(&out);
    OK(cudaGetTextureObjectResourceDesc((struct cudaResourceDesc *)(void *)out.bytes, tex));
    assert_guard(&out, 64);
    const struct cudaResourceDesc *o = (const struct cudaResourceDesc *)(const void *)out.bytes;
    assert_int_equal(o->resType, cudaResourceTypeLinear);
    assert_ptr_equal(o->res.linear.devPtr, d);
    assert_int_equal(o->res.linear.sizeInBytes, 4096);
    /* a texture over linear memory has no view to answer */
    assert_int_equal(cudaGetTextureObjectResourceViewDesc((struct cudaResourceViewDesc *)(void *)out.bytes, tex),
                     cudaErrorInvalidValue);
    cudaGetLastError();
    OK(cudaDestroyTextureObject(tex));
    OK(cudaFree(d));
}

static void test_removed_names(void **state)
{
    (void)state;
    size_t a = 0, b = 1;
    OK(cudaThreadSynchronize());
    OK(cudaThreadGetLimit(&a, cudaLimitStackSize));
    OK(cudaDeviceGetLimit(&b, cudaLimitStackSize));
    assert_int_equal(a, b);
    OK(cudaThreadSetCacheConfig(cudaFuncCachePreferShared));
    enum cudaFuncCache c = cudaFuncCachePreferNone;
    OK(cudaThreadGetCacheConfig(&c));
    assert_int_equal(c, cudaFuncCachePreferShared);
    double x = 1.5;
    OK(cudaSetDoubleForDevice(&x));
    OK(cudaSetDoubleForHost(&x));
    assert_true(x == 1.5);
    int v = 0;
    OK(cudaRuntimeGetVersion(&v));
    assert_int_equal(v / 1000, 12);
    /* CUDA 13's names stay out of the CUDA 12 runtime */
    assert_null(dlsym(RTLD_DEFAULT, "cudaStreamGetDevice"));
    assert_null(dlsym(RTLD_DEFAULT, "cudaLibraryLoadData"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_props_v2),      cmocka_unit_test(test_props_plain),
        cmocka_unit_test(test_capture_info),  cmocka_unit_test(test_graph_edges),
        cmocka_unit_test(test_managed_hints), cmocka_unit_test(test_pointer_attributes),
        cmocka_unit_test(test_texture_descs), cmocka_unit_test(test_removed_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
