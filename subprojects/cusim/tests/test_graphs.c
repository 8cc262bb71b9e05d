/*
 * Proves graphs built by hand run as CUDA runs them: every node kind the
 * simulator models, in the order of the edges (fork and join, a child
 * graph, a clone), with the structure queries answering what was built;
 * an instance updated in place when only parameters changed and refused
 * with the topology error when an edge changed; graph memory reserved at
 * upload (cudaMemGetInfo sees it), used from a launch to its free node,
 * released by trim, and an unfreed allocation refusing a second launch
 * unless the instance frees it on launch; the race detector seeing two
 * unordered branches writing the same memory, and no race once an edge
 * orders them.  Meson runs it with CUCACHE_SIM_RACE=1, _FATAL=0.
 */
#include "simrace.h"

#include <string.h>

enum { N = RACE_BUF, MIB = 1 << 20 };

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

static struct cudaMemsetParams memset_of(void *dst, unsigned value, size_t bytes)
{
    return (struct cudaMemsetParams){dst, 0, value, 1, bytes, 1};
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

/* memset -> (copy of each half to the host) -> host node: the copies see
 * the memset, the host node runs after both; the structure is as built. */
static void test_fork_join(void **state)
{
    (void)state;
    cudaGraph_t g;
    cudaGraphNode_t set, lo, hi, join;
    int ran = 0;
    SIM_OK(cudaGraphCreate(&g, 0));
    struct cudaMemsetParams mp = memset_of(x, 7, N);
    SIM_OK(cudaGraphAddMemsetNode(&set, g, NULL, 0, &mp));
    SIM_OK(cudaGraphAddMemcpyNode1D(&lo, g, &set, 1, host, x, N / 2, cudaMemcpyDeviceToHost));
    SIM_OK(cudaGraphAddMemcpyNode1D(&hi, g, &set, 1, host + N / 2, x + N / 2, N / 2, cudaMemcpyDeviceToHost));
    struct cudaHostNodeParams hp = {count_fn, &ran};
    cudaGraphNode_t both[2] = {lo, hi};
    SIM_OK(cudaGraphAddHostNode(&join, g, both, 2, &hp));

    size_t n = 0;
    SIM_OK(cudaGraphGetNodes(g, NULL, &n));
    assert_int_equal(n, 4);
    SIM_OK(cudaGraphGetRootNodes(g, NULL, &n));
    assert_int_equal(n, 1);
    SIM_OK(cudaGraphGetEdges(g, NULL, NULL, NULL, &n));
    assert_int_equal(n, 4);
    cudaGraphNode_t deps[4];
    n = 4;
    SIM_OK(cudaGraphNodeGetDependencies(join, deps, NULL, &n));
    assert_int_equal(n, 2);
    n = 4;
    SIM_OK(cudaGraphNodeGetDependentNodes(set, deps, NULL, &n));
    assert_int_equal(n, 2);
    enum cudaGraphNodeType type;
    SIM_OK(cudaGraphNodeGetType(join, &type));
    assert_int_equal(type, cudaGraphNodeTypeHost);
    SIM_OK(cudaGraphNodeGetType(lo, &type));
    assert_int_equal(type, cudaGraphNodeTypeMemcpy);
    struct cudaMemsetParams got;
    SIM_OK(cudaGraphMemsetNodeGetParams(set, &got));
    assert_int_equal(got.value, 7);
    assert_ptr_equal(got.dst, x);

    memset(host, 0, N);
    cudaGraphExec_t e;
    SIM_OK(cudaGraphInstantiate(&e, g, 0));
    SIM_OK(cudaGraphLaunch(e, s));
    SIM_OK(cudaStreamSynchronize(s));
    all_bytes(host, N, 7);
    assert_int_equal(ran, 1);
    SIM_OK(cudaGraphLaunch(e, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(ran, 2);
    SIM_OK(cudaGraphExecDestroy(e));
    SIM_OK(cudaGraphDestroy(g));
    race_expect_none();
}

/* A child graph (memset) inside a parent (child -> copy to host), an
 * empty node and an event record/wait pair; the clone runs the same. */
static void test_child_clone_events(void **state)
{
    (void)state;
    cudaGraph_t child, g, copy;
    cudaGraphNode_t set, sub, empty, rec, wait, out;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreate(&ev));
    SIM_OK(cudaGraphCreate(&child, 0));
    struct cudaMemsetParams mp = memset_of(x, 9, N);
    SIM_OK(cudaGraphAddMemsetNode(&set, child, NULL, 0, &mp));
    SIM_OK(cudaGraphCreate(&g, 0));
    SIM_OK(cudaGraphAddChildGraphNode(&sub, g, NULL, 0, child));
    SIM_OK(cudaGraphAddEmptyNode(&empty, g, &sub, 1));
    SIM_OK(cudaGraphAddEventRecordNode(&rec, g, &empty, 1, ev));
    SIM_OK(cudaGraphAddEventWaitNode(&wait, g, &rec, 1, ev));
    SIM_OK(cudaGraphAddMemcpyNode1D(&out, g, &wait, 1, host, x, N, cudaMemcpyDeviceToHost));
    SIM_OK(cudaGraphDestroy(child)); /* the node holds its own copy */
    cudaGraph_t inner;
    SIM_OK(cudaGraphChildGraphNodeGetGraph(sub, &inner));
    size_t n = 0;
    SIM_OK(cudaGraphGetNodes(inner, NULL, &n));
    assert_int_equal(n, 1);
    cudaEvent_t got;
    SIM_OK(cudaGraphEventWaitNodeGetEvent(wait, &got));
    assert_ptr_equal(got, ev);

    SIM_OK(cudaGraphClone(&copy, g));
    cudaGraphNode_t found;
    SIM_OK(cudaGraphNodeFindInClone(&found, out, copy));
    enum cudaGraphNodeType type;
    SIM_OK(cudaGraphNodeGetType(found, &type));
    assert_int_equal(type, cudaGraphNodeTypeMemcpy);
    SIM_OK(cudaGraphDestroy(g));

    memset(host, 0, N);
    cudaGraphExec_t e;
    SIM_OK(cudaGraphInstantiate(&e, copy, 0));
    SIM_OK(cudaGraphLaunch(e, s));
    SIM_OK(cudaStreamSynchronize(s));
    all_bytes(host, N, 9);
    SIM_OK(cudaEventQuery(ev)); /* recorded by the graph, and done */
    SIM_OK(cudaGraphExecDestroy(e));
    SIM_OK(cudaGraphDestroy(copy));
    SIM_OK(cudaEventDestroy(ev));
}

/* memset(value) -> copy to host, as a graph. */
static cudaGraph_t set_and_copy(unsigned value, cudaGraphNode_t *set, bool edge)
{
    cudaGraph_t g;
    cudaGraphNode_t out;
    SIM_OK(cudaGraphCreate(&g, 0));
    struct cudaMemsetParams mp = memset_of(x, value, N);
    SIM_OK(cudaGraphAddMemsetNode(set, g, NULL, 0, &mp));
    SIM_OK(cudaGraphAddMemcpyNode1D(&out, g, edge ? set : NULL, edge ? 1 : 0, host, x, N, cudaMemcpyDeviceToHost));
    return g;
}

static void launch_and_check(cudaGraphExec_t e, unsigned char value)
{
    memset(host, 0, N);
    SIM_OK(cudaGraphLaunch(e, s));
    SIM_OK(cudaStreamSynchronize(s));
    all_bytes(host, N, value);
}

/* Parameters update in place (whole graph or one node); a changed edge is
 * refused with cudaGraphExecUpdateErrorTopologyChanged. */
static void test_update(void **state)
{
    (void)state;
    cudaGraphNode_t set1, set2, set3;
    cudaGraph_t g1 = set_and_copy(1, &set1, true), g2 = set_and_copy(2, &set2, true);
    cudaGraphExec_t e;
    SIM_OK(cudaGraphInstantiate(&e, g1, 0));
    launch_and_check(e, 1);
    cudaGraphExecUpdateResultInfo info;
    SIM_OK(cudaGraphExecUpdate(e, g2, &info));
    assert_int_equal(info.result, cudaGraphExecUpdateSuccess);
    launch_and_check(e, 2);

    struct cudaMemsetParams mp = memset_of(x, 3, N);
    SIM_OK(cudaGraphExecMemsetNodeSetParams(e, set1, &mp));
    launch_and_check(e, 3);

    cudaGraph_t g3 = set_and_copy(4, &set3, false); /* no edge */
    SIM_EXPECT(cudaGraphExecUpdate(e, g3, &info), cudaErrorGraphExecUpdateFailure);
    assert_int_equal(info.result, cudaGraphExecUpdateErrorTopologyChanged);
    launch_and_check(e, 3); /* unchanged */

    SIM_OK(cudaGraphUpload(e, s));
    SIM_OK(cudaGraphExecDestroy(e));
    SIM_OK(cudaGraphDestroy(g1));
    SIM_OK(cudaGraphDestroy(g2));
    SIM_OK(cudaGraphDestroy(g3));
    race_expect_none();
}

static size_t graph_attr(enum cudaGraphMemAttributeType attr)
{
    unsigned long long v = 0;
    SIM_OK(cudaDeviceGetGraphMemAttribute(0, attr, &v));
    return (size_t)v;
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    SIM_OK(cudaMemGetInfo(&f, &t));
    return f;
}

static struct cudaMemAllocNodeParams alloc_params(size_t bytes)
{
    struct cudaMemAllocNodeParams p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = cudaMemAllocationTypePinned;
    p.poolProps.location.type = cudaMemLocationTypeDevice;
    p.poolProps.location.id = 0;
    p.bytesize = bytes;
    return p;
}

/* alloc -> memset -> copy to host -> free: reserved at upload (seen by
 * cudaMemGetInfo), in use during the launch only, released by trim. */
static void test_memory_nodes(void **state)
{
    (void)state;
    size_t free0 = free_bytes();
    cudaGraph_t g;
    cudaGraphNode_t alloc, set, out, release;
    SIM_OK(cudaGraphCreate(&g, 0));
    struct cudaMemAllocNodeParams ap = alloc_params(4 * MIB);
    SIM_OK(cudaGraphAddMemAllocNode(&alloc, g, NULL, 0, &ap));
    assert_non_null(ap.dptr);
    struct cudaMemsetParams mp = memset_of(ap.dptr, 5, N);
    SIM_OK(cudaGraphAddMemsetNode(&set, g, &alloc, 1, &mp));
    SIM_OK(cudaGraphAddMemcpyNode1D(&out, g, &set, 1, host, ap.dptr, N, cudaMemcpyDeviceToHost));
    SIM_OK(cudaGraphAddMemFreeNode(&release, g, &out, 1, ap.dptr));
    void *freed = NULL;
    SIM_OK(cudaGraphMemFreeNodeGetParams(release, &freed));
    assert_ptr_equal(freed, ap.dptr);
    struct cudaMemAllocNodeParams got;
    SIM_OK(cudaGraphMemAllocNodeGetParams(alloc, &got));
    assert_int_equal(got.bytesize, 4 * MIB);
    cudaGraph_t copy;
    SIM_EXPECT(cudaGraphClone(&copy, g), cudaErrorNotSupported); /* graphs with memory nodes are not cloned */

    cudaGraphExec_t e, e2;
    SIM_OK(cudaGraphInstantiate(&e, g, 0));
    SIM_FAILS(cudaGraphInstantiate(&e2, g, 0)); /* one instance at a time */
    assert_int_equal(graph_attr(cudaGraphMemAttrReservedMemCurrent), 0);
    assert_int_equal(free_bytes(), free0);
    SIM_OK(cudaGraphUpload(e, s));
    assert_int_equal(graph_attr(cudaGraphMemAttrReservedMemCurrent), 4 * MIB);
    assert_int_equal(free_bytes(), free0 - 4 * MIB);
    launch_and_check(e, 5);
    assert_int_equal(graph_attr(cudaGraphMemAttrUsedMemCurrent), 0);
    assert_int_equal(graph_attr(cudaGraphMemAttrUsedMemHigh), 4 * MIB);
    assert_int_equal(graph_attr(cudaGraphMemAttrReservedMemHigh), 4 * MIB);
    launch_and_check(e, 5); /* freed in the graph: launches again */

    SIM_OK(cudaDeviceGraphMemTrim(0));
    assert_int_equal(graph_attr(cudaGraphMemAttrReservedMemCurrent), 0);
    assert_int_equal(free_bytes(), free0);
    unsigned long long zero = 0, one = 1;
    SIM_OK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero));
    assert_int_equal(graph_attr(cudaGraphMemAttrUsedMemHigh), 0);
    SIM_EXPECT(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &one), cudaErrorInvalidValue);
    SIM_EXPECT(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &zero), cudaErrorInvalidValue);
    SIM_OK(cudaGraphExecDestroy(e));
    SIM_OK(cudaGraphDestroy(g));
}

/* An allocation the graph does not free stays in use after the launch:
 * a second launch is refused until it is freed, unless the instance frees
 * it on launch. */
static void test_unfreed_allocation(void **state)
{
    (void)state;
    cudaGraph_t g;
    cudaGraphNode_t alloc, set;
    SIM_OK(cudaGraphCreate(&g, 0));
    struct cudaMemAllocNodeParams ap = alloc_params(2 * MIB);
    SIM_OK(cudaGraphAddMemAllocNode(&alloc, g, NULL, 0, &ap));
    struct cudaMemsetParams mp = memset_of(ap.dptr, 6, 2 * MIB);
    SIM_OK(cudaGraphAddMemsetNode(&set, g, &alloc, 1, &mp));
    cudaGraphExec_t e;
    SIM_OK(cudaGraphInstantiate(&e, g, 0));
    SIM_OK(cudaGraphLaunch(e, s));
    SIM_OK(cudaStreamSynchronize(s));
    assert_int_equal(graph_attr(cudaGraphMemAttrUsedMemCurrent), 2 * MIB);
    SIM_OK(cudaMemcpy(host, ap.dptr, N, cudaMemcpyDeviceToHost)); /* usable after the graph */
    all_bytes(host, N, 6);
    SIM_EXPECT(cudaGraphLaunch(e, s), cudaErrorInvalidValue);
    SIM_OK(cudaFree(ap.dptr));
    assert_int_equal(graph_attr(cudaGraphMemAttrUsedMemCurrent), 0);
    SIM_EXPECT(cudaFree(ap.dptr), cudaErrorInvalidValue);
    SIM_OK(cudaGraphLaunch(e, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaGraphExecDestroy(e));

    SIM_OK(cudaGraphInstantiate(&e, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    unsigned long long flags = 0;
    SIM_OK(cudaGraphExecGetFlags(e, &flags));
    assert_int_equal(flags, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    SIM_OK(cudaGraphLaunch(e, s));
    SIM_OK(cudaGraphLaunch(e, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaFreeAsync(ap.dptr, s));
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaGraphExecDestroy(e));
    SIM_OK(cudaGraphDestroy(g));
    SIM_OK(cudaDeviceGraphMemTrim(0));
    assert_int_equal(graph_attr(cudaGraphMemAttrReservedMemCurrent), 0);
}

/* Two memsets of the same memory on unordered branches race; an edge
 * between them removes the race. */
static void test_branches_race(void **state)
{
    (void)state;
    for (int ordered = SIMTEST_TSAN; ordered < 2; ordered++) {
        cudaGraph_t g;
        cudaGraphNode_t a, b;
        SIM_OK(cudaGraphCreate(&g, 0));
        struct cudaMemsetParams pa = memset_of(x, 1, N), pb = memset_of(x, 2, N);
        SIM_OK(cudaGraphAddMemsetNode(&a, g, NULL, 0, &pa));
        SIM_OK(cudaGraphAddMemsetNode(&b, g, NULL, 0, &pb));
        if (ordered)
            SIM_OK(cudaGraphAddDependencies(g, &a, &b, NULL, 1));
        cudaGraphExec_t e;
        SIM_OK(cudaGraphInstantiate(&e, g, 0));
        cucacheSimRaceReset();
        SIM_OK(cudaGraphLaunch(e, s));
        SIM_OK(cudaStreamSynchronize(s));
        if (ordered)
            race_expect_none();
        else
            race_expect();
        SIM_OK(cudaGraphExecDestroy(e));
        SIM_OK(cudaGraphDestroy(g));
    }
}

/* A capture that forks through an event keeps its structure: the two
 * streams' work are two branches after the fork, joined at the end. */
static void test_capture_fork(void **state)
{
    (void)state;
    cudaStream_t t = fixture.nb2;
    cudaEvent_t fork, join;
    SIM_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    SIM_OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    SIM_OK(cudaEventRecord(fork, s));
    SIM_OK(cudaStreamWaitEvent(t, fork, 0));
    SIM_OK(cudaMemsetAsync(x, 1, N / 2, s));
    SIM_OK(cudaMemsetAsync(x + N / 2, 2, N / 2, t));
    enum cudaStreamCaptureStatus st;
    const cudaGraphNode_t *deps = NULL;
    size_t ndeps = 0;
    unsigned long long id = 0;
    SIM_OK(cudaStreamGetCaptureInfo(t, &st, &id, NULL, &deps, NULL, &ndeps));
    assert_int_equal(st, cudaStreamCaptureStatusActive);
    assert_int_equal(ndeps, 1);
    cudaGraphNode_t t_memset = deps[0]; /* valid until t's next call */
    enum cudaGraphNodeType type;
    SIM_OK(cudaGraphNodeGetType(t_memset, &type));
    assert_int_equal(type, cudaGraphNodeTypeMemset);
    SIM_OK(cudaEventRecord(join, t));
    SIM_OK(cudaStreamWaitEvent(s, join, 0));
    cudaGraph_t g;
    SIM_OK(cudaStreamEndCapture(s, &g));
    cudaGraphNode_t nodes[8];
    size_t n = 8;
    SIM_OK(cudaGraphNodeGetDependentNodes(t_memset, NULL, NULL, &n)); /* the join's record */
    assert_int_equal(n, 1);
    n = 0;
    SIM_OK(cudaGraphGetRootNodes(g, NULL, &n));
    assert_int_equal(n, 1);
    n = 8;
    SIM_OK(cudaGraphGetRootNodes(g, nodes, &n));
    size_t after_fork = 8;
    SIM_OK(cudaGraphNodeGetDependentNodes(nodes[0], NULL, NULL, &after_fork));
    assert_int_equal(after_fork, 2); /* both memsets follow the fork */
    cudaGraphExec_t e;
    SIM_OK(cudaGraphInstantiate(&e, g, 0));
    SIM_OK(cudaGraphLaunch(e, s));
    SIM_OK(cudaMemcpyAsync(host, x, N, cudaMemcpyDeviceToHost, s));
    SIM_OK(cudaStreamSynchronize(s));
    all_bytes(host, N / 2, 1);
    all_bytes(host + N / 2, N / 2, 2);
    SIM_OK(cudaGraphExecDestroy(e));
    SIM_OK(cudaGraphDestroy(g));
    SIM_OK(cudaEventDestroy(fork));
    SIM_OK(cudaEventDestroy(join));
    race_expect_none();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        RACETEST(test_fork_join),    RACETEST(test_child_clone_events), RACETEST(test_update),
        RACETEST(test_memory_nodes), RACETEST(test_unfreed_allocation), RACETEST(test_branches_race),
        RACETEST(test_capture_fork),
    };
    return cmocka_run_group_tests_name("sim.graphs", tests, group_setup, group_teardown);
}
