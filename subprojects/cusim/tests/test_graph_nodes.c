/*
 * Proves the generic node calls and conditional nodes act as CUDA
 * documents: cudaGraphAddNode makes each kind the simulator models (the
 * work done in the order of the edges), refuses reserved or unused bytes
 * that are not zero and kinds it does not model; cudaGraphNodeSetParams
 * changes the graph and cudaGraphExecNodeSetParams only the instance; a
 * child graph moved into its parent belongs to it; conditional nodes run
 * the body their handle's default value picks (IF with and without an
 * else, SWITCH, a WHILE ends), a graph holding one is neither cloned nor
 * instantiated twice, a body holds only the kinds CUDA allows, and a body
 * runs after the node's dependencies and before its dependents, as the
 * race detector sees.  Meson runs it with CUCACHE_SIM_RACE=1, _FATAL=0.
 */
#include "simrace.h"

#include <string.h>

enum { N = RACE_BUF };

static struct simrace_fixture fixture;
static unsigned char *x, *host;
static cudaStream_t s;

static int group_setup(void **state)
{
    (void)state;
    if (simrace_fixture_create(&fixture) != 0)
        return -1;
    x = fixture.x;
    host = fixture.host;
    s = fixture.nb;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    simrace_fixture_destroy(&fixture);
    return 0;
}

static void count_fn(void *arg)
{
    (*(int *)arg)++;
}

static void all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            fail_msg("byte %zu is %u, not %u", i, p[i], v);
}

static struct cudaGraphNodeParams memset_node(void *dst, unsigned value)
{
    struct cudaGraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeMemset;
    p.memset = (struct cudaMemsetParamsV2){dst, 0, value, 1, N, 1};
    return p;
}

static struct cudaGraphNodeParams copy_to_host(void)
{
    struct cudaGraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeMemcpy;
    p.memcpy.copyParams.srcPtr = (struct cudaPitchedPtr){x, N, N, 1};
    p.memcpy.copyParams.dstPtr = (struct cudaPitchedPtr){host, N, N, 1};
    p.memcpy.copyParams.extent = (struct cudaExtent){N, 1, 1};
    p.memcpy.copyParams.kind = cudaMemcpyDeviceToHost;
    return p;
}

/* Launches g once on s and waits; g's instance is destroyed. */
static void run_once(cudaGraph_t g)
{
    cudaGraphExec_t e;
    SIM_OK(cudaGraphInstantiate(&e, g, 0));
    SIM_OK(cudaGraphLaunch(e, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaGraphExecDestroy(e));
}

static size_t node_count(cudaGraph_t g)
{
    size_t n = 0;
    SIM_OK(cudaGraphGetNodes(g, NULL, &n));
    return n;
}

/* memset -> copy to the host -> host node, then an empty node and an
 * event record; an allocation and its free: each of its kind. */
static void test_add_each_kind(void **state)
{
    (void)state;
    cudaGraph_t g;
    SIM_OK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t set, copy, hostn, empty, rec, alloc, freen;
    struct cudaGraphNodeParams p = memset_node(x, 7);
    SIM_OK(cudaGraphAddNode(&set, g, NULL, NULL, 0, &p));
    p = copy_to_host();
    SIM_OK(cudaGraphAddNode(&copy, g, &set, NULL, 1, &p));
    int calls = 0;
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeHost;
    p.host = (struct cudaHostNodeParamsV2){count_fn, &calls};
    SIM_OK(cudaGraphAddNode(&hostn, g, &copy, NULL, 1, &p));
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeEmpty;
    SIM_OK(cudaGraphAddNode(&empty, g, &hostn, NULL, 1, &p));
    cudaEvent_t ev;
    SIM_OK(cudaEventCreate(&ev));
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeEventRecord;
    p.eventRecord.event = ev;
    SIM_OK(cudaGraphAddNode(&rec, g, &empty, NULL, 1, &p));
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeMemAlloc;
    p.alloc.poolProps.allocType = cudaMemAllocationTypePinned;
    p.alloc.poolProps.location = (struct cudaMemLocation){cudaMemLocationTypeDevice, 0};
    p.alloc.bytesize = 4096;
    SIM_OK(cudaGraphAddNode(&alloc, g, NULL, NULL, 0, &p));
    void *dptr = p.alloc.dptr;
    assert_non_null(dptr);
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeMemFree;
    p.free.dptr = dptr;
    SIM_OK(cudaGraphAddNode(&freen, g, &alloc, NULL, 1, &p));
    static const enum cudaGraphNodeType want[] = {cudaGraphNodeTypeMemset,     cudaGraphNodeTypeMemcpy,
                                                  cudaGraphNodeTypeHost,       cudaGraphNodeTypeEmpty,
                                                  cudaGraphNodeTypeEventRecord, cudaGraphNodeTypeMemAlloc,
                                                  cudaGraphNodeTypeMemFree};
    cudaGraphNode_t made[] = {set, copy, hostn, empty, rec, alloc, freen};
    for (size_t i = 0; i < sizeof made / sizeof *made; i++) {
        enum cudaGraphNodeType t;
        SIM_OK(cudaGraphNodeGetType(made[i], &t));
        assert_int_equal(t, want[i]);
    }
    struct cudaMemsetParams m;
    SIM_OK(cudaGraphMemsetNodeGetParams(set, &m));
    assert_int_equal(m.value, 7);
    memset(host, 0, N);
    run_once(g);
    all_bytes(host, N, 7);
    assert_int_equal(calls, 1);
    SIM_OK(cudaEventQuery(ev));
    SIM_OK(cudaGraphDestroy(g));
    SIM_OK(cudaEventDestroy(ev));
    race_expect_none();
}

/* Reserved and unused bytes, kinds without a model, a bad kind: each
 * refused, and no node made. */
static void test_add_refused(void **state)
{
    (void)state;
    cudaGraph_t g;
    SIM_OK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t n = NULL;
    struct cudaGraphNodeParams p = memset_node(x, 1);
    p.reserved0[1] = 1;
    assert_int_equal(cudaGraphAddNode(&n, g, NULL, NULL, 0, &p), cudaErrorInvalidValue);
    p = memset_node(x, 1);
    p.reserved2 = 1;
    assert_int_equal(cudaGraphAddNode(&n, g, NULL, NULL, 0, &p), cudaErrorInvalidValue);
    p = memset_node(x, 1);
    p.reserved1[28] = 1; /* past the memset member */
    assert_int_equal(cudaGraphAddNode(&n, g, NULL, NULL, 0, &p), cudaErrorInvalidValue);
    p = copy_to_host();
    p.memcpy.flags = 1;
    assert_int_equal(cudaGraphAddNode(&n, g, NULL, NULL, 0, &p), cudaErrorInvalidValue);
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeExtSemaphoreSignal;
    assert_int_equal(cudaGraphAddNode(&n, g, NULL, NULL, 0, &p), cudaErrorNotSupported);
    p.type = (enum cudaGraphNodeType)99;
    assert_int_equal(cudaGraphAddNode(&n, g, NULL, NULL, 0, &p), cudaErrorInvalidValue);
    cudaGetLastError();
    assert_int_equal(node_count(g), 0);
    /* the driver's CUDA 12.2 form, without edge data */
    CUgraphNodeParams d;
    memset(&d, 0, sizeof d);
    d.type = CU_GRAPH_NODE_TYPE_EMPTY;
    assert_int_equal(cuGraphAddNode(&n, g, NULL, 0, &d), CUDA_SUCCESS);
    d.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
    assert_int_equal(cuGraphAddNode(&n, g, NULL, 0, &d), CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(node_count(g), 1);
    SIM_OK(cudaGraphDestroy(g));
}

/* cudaGraphNodeSetParams changes the graph (and later instances);
 * cudaGraphExecNodeSetParams one instance, not the graph. */
static void test_set_params(void **state)
{
    (void)state;
    cudaGraph_t g;
    SIM_OK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t set, copy, alloc;
    struct cudaGraphNodeParams p = memset_node(x, 1);
    SIM_OK(cudaGraphAddNode(&set, g, NULL, NULL, 0, &p));
    p = copy_to_host();
    SIM_OK(cudaGraphAddNode(&copy, g, &set, NULL, 1, &p));
    p = memset_node(x, 9);
    SIM_OK(cudaGraphNodeSetParams(set, &p));
    run_once(g);
    all_bytes(host, N, 9);
    cudaGraphExec_t e;
    SIM_OK(cudaGraphInstantiate(&e, g, 0));
    p = memset_node(x, 5);
    SIM_OK(cudaGraphExecNodeSetParams(e, set, &p));
    SIM_OK(cudaGraphLaunch(e, s));
    SIM_OK(cudaStreamSynchronize(s));
    all_bytes(host, N, 5);
    struct cudaMemsetParams m;
    SIM_OK(cudaGraphMemsetNodeGetParams(set, &m));
    assert_int_equal(m.value, 9); /* the graph's node is as it was */
    p = memset_node(x, 5);
    assert_int_equal(cudaGraphNodeSetParams(copy, &p), cudaErrorInvalidValue); /* not a memset node */
    SIM_OK(cudaGraphExecDestroy(e));
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeMemAlloc;
    p.alloc.poolProps.allocType = cudaMemAllocationTypePinned;
    p.alloc.poolProps.location = (struct cudaMemLocation){cudaMemLocationTypeDevice, 0};
    p.alloc.bytesize = 4096;
    cudaGraph_t g2;
    SIM_OK(cudaGraphCreate(&g2, 0));
    SIM_OK(cudaGraphAddNode(&alloc, g2, NULL, NULL, 0, &p));
    assert_int_equal(cudaGraphNodeSetParams(alloc, &p), cudaErrorNotSupported);
    cudaGetLastError();
    SIM_OK(cudaGraphDestroy(g2));
    SIM_OK(cudaGraphDestroy(g));
}

/* A child graph moved into its parent is the parent's: not destroyed on
 * its own, run with the parent. */
static void test_child_moved(void **state)
{
    (void)state;
    cudaGraph_t g, c;
    SIM_OK(cudaGraphCreate(&g, 0));
    SIM_OK(cudaGraphCreate(&c, 0));
    cudaGraphNode_t n, copy;
    struct cudaGraphNodeParams p = memset_node(x, 3);
    SIM_OK(cudaGraphAddNode(&n, c, NULL, NULL, 0, &p));
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeGraph;
    p.graph = (struct cudaChildGraphNodeParams){c, cudaGraphChildGraphOwnershipMove};
    cudaGraphNode_t child;
    SIM_OK(cudaGraphAddNode(&child, g, NULL, NULL, 0, &p));
    assert_int_equal(cudaGraphDestroy(c), cudaErrorInvalidValue);
    cudaGraph_t got;
    SIM_OK(cudaGraphChildGraphNodeGetGraph(child, &got));
    assert_ptr_equal(got, c);
    p = copy_to_host();
    SIM_OK(cudaGraphAddNode(&copy, g, &child, NULL, 1, &p));
    run_once(g);
    all_bytes(host, N, 3);
    SIM_OK(cudaGraphDestroy(g));
    cudaGetLastError();
    race_expect_none();
}

/* A conditional node of kind `type` with `size` bodies, the handle's
 * default `value`, after the nodes deps; bodies[i] sets x to i + 1. */
static cudaGraphNode_t add_cond(cudaGraph_t g, enum cudaGraphConditionalNodeType type, unsigned size, unsigned value,
                                const cudaGraphNode_t *deps, size_t ndeps)
{
    cudaGraphConditionalHandle h;
    SIM_OK(cudaGraphConditionalHandleCreate(&h, g, value, cudaGraphCondAssignDefault));
    struct cudaGraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeConditional;
    p.conditional = (struct cudaConditionalNodeParams){h, type, size, NULL};
    cudaGraphNode_t node;
    SIM_OK(cudaGraphAddNode(&node, g, deps, NULL, ndeps, &p));
    assert_non_null(p.conditional.phGraph_out);
    for (unsigned b = 0; b < size; b++) {
        cudaGraphNode_t n;
        struct cudaGraphNodeParams m = memset_node(x, b + 1);
        SIM_OK(cudaGraphAddNode(&n, p.conditional.phGraph_out[b], NULL, NULL, 0, &m));
    }
    return node;
}

/* x set to 0xee, then the conditional node, then x copied to the host:
 * the host sees which body ran (0xee: none). */
static unsigned char cond_result(enum cudaGraphConditionalNodeType type, unsigned size, unsigned value)
{
    cudaGraph_t g;
    SIM_OK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t first, cond, copy;
    struct cudaGraphNodeParams p = memset_node(x, 0xee);
    SIM_OK(cudaGraphAddNode(&first, g, NULL, NULL, 0, &p));
    cond = add_cond(g, type, size, value, &first, 1);
    p = copy_to_host();
    SIM_OK(cudaGraphAddNode(&copy, g, &cond, NULL, 1, &p));
    memset(host, 0, N);
    run_once(g);
    SIM_OK(cudaGraphDestroy(g));
    for (size_t i = 1; i < N; i++)
        assert_int_equal(host[i], host[0]);
    return host[0];
}

static void test_conditional_bodies(void **state)
{
    (void)state;
    assert_int_equal(cond_result(cudaGraphCondTypeIf, 1, 1), 1);
    assert_int_equal(cond_result(cudaGraphCondTypeIf, 1, 0), 0xee);
    assert_int_equal(cond_result(cudaGraphCondTypeIf, 2, 7), 1);
    assert_int_equal(cond_result(cudaGraphCondTypeIf, 2, 0), 2); /* the else body */
    assert_int_equal(cond_result(cudaGraphCondTypeSwitch, 3, 2), 3);
    assert_int_equal(cond_result(cudaGraphCondTypeSwitch, 3, 0), 1);
    assert_int_equal(cond_result(cudaGraphCondTypeSwitch, 3, 3), 0xee); /* no such body */
    assert_int_equal(cond_result(cudaGraphCondTypeWhile, 1, 0), 0xee);
    assert_int_equal(cond_result(cudaGraphCondTypeWhile, 1, 1), 1); /* once, and the launch ends */
    race_expect_none();
}

/* What CUDA refuses: bad handles and sizes, a clone, a second instance,
 * a body holding a host node. */
static void test_conditional_refused(void **state)
{
    (void)state;
    cudaGraph_t g, other;
    SIM_OK(cudaGraphCreate(&g, 0));
    SIM_OK(cudaGraphCreate(&other, 0));
    cudaGraphConditionalHandle h, foreign;
    SIM_OK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
    SIM_OK(cudaGraphConditionalHandleCreate(&foreign, other, 1, 0));
    assert_int_equal(cudaGraphConditionalHandleCreate(&h, g, 1, 2), cudaErrorInvalidValue);
    struct cudaGraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeConditional;
    cudaGraphNode_t node;
    static const struct {
        enum cudaGraphConditionalNodeType type;
        unsigned size;
    } bad[] = {{cudaGraphCondTypeIf, 3}, {cudaGraphCondTypeIf, 0}, {cudaGraphCondTypeWhile, 2},
               {cudaGraphCondTypeSwitch, 0}, {(enum cudaGraphConditionalNodeType)3, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        p.conditional = (struct cudaConditionalNodeParams){h, bad[i].type, bad[i].size, NULL};
        assert_int_equal(cudaGraphAddNode(&node, g, NULL, NULL, 0, &p), cudaErrorInvalidValue);
    }
    p.conditional = (struct cudaConditionalNodeParams){foreign, cudaGraphCondTypeIf, 1, NULL};
    assert_int_equal(cudaGraphAddNode(&node, g, NULL, NULL, 0, &p), cudaErrorInvalidValue);
    cudaGetLastError();
    assert_int_equal(node_count(g), 0);
    p.conditional = (struct cudaConditionalNodeParams){h, cudaGraphCondTypeIf, 1, NULL};
    SIM_OK(cudaGraphAddNode(&node, g, NULL, NULL, 0, &p));
    cudaGraph_t body = p.conditional.phGraph_out[0];
    assert_int_equal(cudaGraphDestroy(body), cudaErrorInvalidValue); /* the node's */
    cudaGraph_t clone;
    assert_int_equal(cudaGraphClone(&clone, g), cudaErrorNotSupported);
    cudaGraphExec_t e, e2;
    SIM_OK(cudaGraphInstantiate(&e, g, 0));
    assert_int_equal(cudaGraphInstantiate(&e2, g, 0), cudaErrorInvalidValue);
    SIM_OK(cudaGraphExecDestroy(e));
    int calls = 0;
    struct cudaHostNodeParams hp = {count_fn, &calls};
    cudaGraphNode_t hn;
    SIM_OK(cudaGraphAddHostNode(&hn, body, NULL, 0, &hp));
    assert_int_equal(cudaGraphInstantiate(&e, g, 0), cudaErrorInvalidValue);
    cudaGetLastError();
    SIM_OK(cudaGraphDestroy(g));
    SIM_OK(cudaGraphDestroy(other));
}

/* A body writing x races with a memset of x that is not ordered with the
 * conditional node, and not with one the node follows. */
static void test_conditional_race(void **state)
{
    (void)state;
    for (int ordered = SIMTEST_TSAN; ordered < 2; ordered++) {
        cudaGraph_t g;
        SIM_OK(cudaGraphCreate(&g, 0));
        cudaGraphNode_t first;
        struct cudaGraphNodeParams p = memset_node(x, 0xee);
        SIM_OK(cudaGraphAddNode(&first, g, NULL, NULL, 0, &p));
        add_cond(g, cudaGraphCondTypeIf, 1, 1, &first, ordered ? 1 : 0);
        cucacheSimRaceReset();
        run_once(g);
        if (ordered)
            race_expect_none();
        else
            race_expect();
        SIM_OK(cudaGraphDestroy(g));
    }
}

/* cudaMallocAsync/cudaFreeAsync captured: allocation and free nodes, the
 * address given at capture; memory used only from a launch; an
 * allocation the graph does not free refuses a relaunch until freed
 * outside (not before the graph made it), or with AutoFreeOnLaunch;
 * a graph may free only graph memory. */
static void test_capture_alloc(void **state)
{
    (void)state;
    for (int freed_in_graph = 1; freed_in_graph >= 0; freed_in_graph--) {
        void *p = NULL;
        SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        SIM_OK(cudaMallocAsync(&p, N, s));
        assert_non_null(p);
        SIM_OK(cudaMemsetAsync(p, 4, N, s));
        SIM_OK(cudaMemcpyAsync(host, p, N, cudaMemcpyDeviceToHost, s));
        if (freed_in_graph)
            SIM_OK(cudaFreeAsync(p, s));
        cudaGraph_t g;
        SIM_OK(cudaStreamEndCapture(s, &g));
        cudaGraphNode_t nodes[4];
        size_t n = 4;
        SIM_OK(cudaGraphGetNodes(g, nodes, &n));
        assert_int_equal(n, 3 + freed_in_graph);
        enum cudaGraphNodeType t;
        SIM_OK(cudaGraphNodeGetType(nodes[0], &t));
        assert_int_equal(t, cudaGraphNodeTypeMemAlloc);
        struct cudaMemAllocNodeParams ap;
        SIM_OK(cudaGraphMemAllocNodeGetParams(nodes[0], &ap));
        assert_ptr_equal(ap.dptr, p);
        assert_int_equal(ap.bytesize, N);
        if (freed_in_graph) {
            SIM_OK(cudaGraphNodeGetType(nodes[3], &t));
            assert_int_equal(t, cudaGraphNodeTypeMemFree);
        }
        cudaGraphExec_t e;
        SIM_OK(cudaGraphInstantiate(&e, g, 0));
        if (!freed_in_graph)
            assert_int_equal(cudaFreeAsync(p, s), cudaErrorInvalidValue); /* not allocated yet */
        cuuint64_t used = 1;
        SIM_OK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
        assert_int_equal(used, 0);
        memset(host, 0, N);
        SIM_OK(cudaGraphLaunch(e, s));
        SIM_OK(cudaStreamSynchronize(s));
        all_bytes(host, N, 4);
        SIM_OK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
        assert_int_equal(used, freed_in_graph ? 0 : 2u << 20); /* whole 2 MiB pages */
        if (freed_in_graph) {
            assert_int_equal(cudaFreeAsync(p, s), cudaErrorInvalidValue); /* the graph freed it */
            SIM_OK(cudaGraphLaunch(e, s));
        } else {
            assert_int_equal(cudaGraphLaunch(e, s), cudaErrorInvalidValue); /* still allocated */
            SIM_OK(cudaFreeAsync(p, s));
            SIM_OK(cudaGraphLaunch(e, s));
            SIM_OK(cudaStreamSynchronize(s));
            cudaGraphExec_t af;
            SIM_OK(cudaGraphExecDestroy(e));
            SIM_OK(cudaGraphInstantiateWithFlags(&af, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
            SIM_OK(cudaGraphLaunch(af, s));
            e = af;
        }
        SIM_OK(cudaStreamSynchronize(s));
        cudaGetLastError();
        SIM_OK(cudaGraphExecDestroy(e));
        if (!freed_in_graph)
            SIM_OK(cudaFreeAsync(p, s));
        SIM_OK(cudaGraphDestroy(g));
        SIM_OK(cudaDeviceGraphMemTrim(0));
    }
    void *plain;
    SIM_OK(cudaMalloc(&plain, 4096));
    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    assert_int_equal(cudaFreeAsync(plain, s), cudaErrorInvalidValue); /* not graph memory */
    cudaGraph_t g;
    SIM_OK(cudaStreamEndCapture(s, &g));
    assert_int_equal(node_count(g), 0);
    SIM_OK(cudaGraphDestroy(g));
    SIM_OK(cudaFree(plain));
    cudaGetLastError();
    race_expect_none();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        RACETEST(test_add_each_kind),      RACETEST(test_add_refused),         RACETEST(test_set_params),
        RACETEST(test_child_moved),        RACETEST(test_conditional_bodies),  RACETEST(test_conditional_refused),
        RACETEST(test_conditional_race),   RACETEST(test_capture_alloc),
    };
    return cmocka_run_group_tests_name("sim.graph_nodes", tests, group_setup, group_teardown);
}
