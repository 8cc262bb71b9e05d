/*
 * Proves the reuse rule that seeing every submission allows (core_free's
 * idle shortcut, interpose/submit.c): under reuse:fenced and the default
 * reuse:ordered, a block freed with cudaFree when no work was submitted
 * since it was handed out is reusable at once, with no fence (the next
 * cudaMalloc of its size gets it back); a block that queued work may still
 * use (a simulated kernel reading it behind a gate) is not, and a kernel
 * writing the new owner's block never races the old owner's reader; work
 * submitted by each route (the runtime, the driver by name, a kernel
 * launched through a module) makes the next free wait behind a fence;
 * reuse:fenced-host takes no shortcut (a fence for every plain free).  The
 * last test looks up cuGetExportTable, whose effects nobody documents: the
 * count becomes unseen and every plain free waits behind a fence from then
 * on.
 *
 * Seen to fail: with the trampolines' increment taken out, the kernel's
 * block is handed out again at once and the race detector reports the new
 * owner's memset against the old owner's reader.
 */
#include "itest.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int64_t stat_of(const char *key)
{
    return itest_stat(0, key);
}

static bool fenced_host(void)
{
    const char *c = getenv("CUCACHE_CONF");
    return c && strstr(c, "fenced-host");
}

/* No work at all: the block comes back at once, no fence recorded. */
static void test_no_work_reuses_at_once(void **state)
{
    (void)state;
    itest_require_cucache();
    SIM_OK(cudaDeviceSynchronize());
    int64_t fences = stat_of("num_fences"), idle = stat_of("num_idle_frees");
    for (int i = 0; i < 100; i++) {
        void *p = NULL, *q = NULL;
        SIM_OK(cudaMalloc(&p, 8 * MIB));
        SIM_OK(cudaFree(p));
        SIM_OK(cudaMalloc(&q, 8 * MIB));
        if (!fenced_host())
            assert_ptr_equal(q, p);
        SIM_OK(cudaFree(q));
    }
    if (fenced_host()) {
        assert_int_equal(stat_of("num_idle_frees"), idle);
        assert_true(stat_of("num_fences") > fences);
    } else {
        assert_int_equal(stat_of("num_idle_frees"), idle + 200);
        assert_int_equal(stat_of("num_fences"), fences);
    }
}

/* A block of `size` that a simulated kernel on `*s` reads once gate `*g`
 * opens (both streams non-blocking, created here); the block's contents
 * are set first. */
static void *gated_reader(size_t size, cudaStream_t *s, cudaStream_t *t, simtest_gate_t **g)
{
    void *p = NULL;
    SIM_OK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
    SIM_OK(cudaStreamCreateWithFlags(t, cudaStreamNonBlocking));
    SIM_OK(cudaMalloc(&p, size));
    SIM_OK(cudaMemset(p, 1, size));
    SIM_OK(cudaDeviceSynchronize());
    *g = simtest_gate_new();
    simtest_gate_block(*g, *s);
    struct cucache_sim_access acc = {p, size, 0};
    CU_OK(cucacheSimLaunch((CUstream)*s, NULL, NULL, &acc, 1));
    return p;
}

/* Lets the gated reader run, waits for the device, and requires that the
 * race detector saw no race. */
static void open_and_check(simtest_gate_t *g)
{
    simtest_gate_open(g);
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(itest_races(), 0);
}

/* An idle device and an empty cache: the next allocation of 12 MiB is a
 * segment of its own. */
static void start_empty(void)
{
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(itest_empty_cache(0), 0);
}

/* Frees p (queued work still uses it) and allocates n bytes: with `out`,
 * p's block comes back at once, handed out ahead of its fence (one
 * hand-out more); without, another block and no hand-out. */
static void *free_and_realloc(void *p, size_t n, bool out)
{
    void *q = NULL;
    int64_t hand_outs = stat_of("num_fence_hand_outs");
    SIM_OK(cudaFree(p));
    SIM_OK(cudaMalloc(&q, n));
    if (out)
        assert_ptr_equal(q, p);
    else
        assert_ptr_not_equal(q, p);
    assert_int_equal(stat_of("num_fence_hand_outs"), hand_outs + out);
    return q;
}

/* A kernel queued behind a gate reads the block when it is freed: the free
 * waits behind a fence, the next allocation of its size is another block
 * (or waits), and the new owner's memset never races the reader. */
static void test_queued_reader_is_waited_for(void **state)
{
    (void)state;
    itest_require_cucache();
    cudaStream_t s, t;
    simtest_gate_t *g;
    void *p = gated_reader(8 * MIB, &s, &t, &g), *q = NULL;
    int64_t idle = stat_of("num_idle_frees");
    SIM_OK(cudaFree(p));
    assert_int_equal(stat_of("num_idle_frees"), idle);
    SIM_OK(cudaMalloc(&q, 8 * MIB));
    SIM_OK(cudaMemsetAsync(q, 2, 8 * MIB, t)); /* the new owner writes its block */
    open_and_check(g);
    SIM_OK(cudaFree(q));
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaStreamDestroy(t));
}

/* Work by any route between the allocation and the free: a fence. */
static void test_any_route_makes_the_free_fenced(void **state)
{
    (void)state;
    itest_require_cucache();
    CUmodule m;
    CUfunction f;
    CU_OK(cuModuleLoadData(&m, CUCACHE_SIM_MODULE_MAGIC "touch\n"));
    CU_OK(cuModuleGetFunction(&f, m, "touch"));
    for (int route = 0; route < 3; route++) {
        void *p = NULL;
        SIM_OK(cudaMalloc(&p, 4 * MIB));
        int64_t idle = stat_of("num_idle_frees");
        if (route == 0)
            SIM_OK(cudaMemsetAsync(p, 0, 4 * MIB, NULL)); /* the runtime */
        else if (route == 1)
            CU_OK(cuMemsetD8_v2((CUdeviceptr)p, 0, 4 * MIB)); /* the driver by name */
        else
            CU_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL)); /* a kernel */
        SIM_OK(cudaFree(p));
        if (stat_of("num_idle_frees") != idle)
            fail_msg("route %d: the free was taken as idle after work was submitted", route);
        SIM_OK(cudaDeviceSynchronize());
    }
    CU_OK(cuModuleUnload(m));
}

/* Whether blocks behind fences are handed out: reuse:ordered (the
 * default), unless the device says the CPU shares its memory coherently
 * (CUCACHE_SIM_COHERENT=1: a CPU access would not wait for the device's
 * ordering, so cucache hands nothing out and every test expects
 * reuse:fenced's behaviour). */
static bool ordered(void)
{
    return itest_hands_out();
}

/* reuse:ordered: a block freed while a kernel behind a gate still reads
 * it is handed out at once on the next miss, and the device is ordered
 * after its fence instead of the host waiting: the new owner's memset on
 * another stream, and on a stream created after the hand-out, waits on the
 * device for the reader (the host goes on), and the race detector sees no
 * race.  Seen to fail (a race) with fence_order placing no waits, and with
 * new streams not made to wait. */
static void test_ordered_hands_out_behind_the_fence(void **state)
{
    (void)state;
    itest_require_cucache();
    if (!ordered())
        skip();
    SIM_OK(cudaDeviceSynchronize());
    /* nothing cached, and 12 MiB is a segment of its own: the miss must use
     * p's fence */
    assert_int_equal(itest_empty_cache(0), 0);
    cudaStream_t s, t, u;
    simtest_gate_t *g;
    void *p = gated_reader(12 * MIB, &s, &t, &g);
    void *q = free_and_realloc(p, 12 * MIB, true); /* handed out at once */
    SIM_OK(cudaMemsetAsync(q, 2, 6 * MIB, t));
    SIM_OK(cudaStreamCreateWithFlags(&u, cudaStreamNonBlocking)); /* after the hand-out */
    SIM_OK(cudaMemsetAsync((char *)q + 6 * MIB, 3, 6 * MIB, u));
    /* the writers wait on the device, the host does not */
    assert_int_equal(cudaStreamQuery(t), cudaErrorNotReady);
    assert_int_equal(cudaStreamQuery(u), cudaErrorNotReady);
    open_and_check(g);
    SIM_OK(cudaFree(q));
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaStreamDestroy(t));
    SIM_OK(cudaStreamDestroy(u));
}

/* reuse:ordered on the hit path: with an eighth of the cache behind a
 * fence, an allocation that would split a larger free block takes the
 * freed block instead (merged with its free neighbour), the device ordered
 * after the fence: the new owner's memset waits on the device for the
 * reader.  Under the other rules the allocation splits the free rest.
 * Seen to fail (a race) with fence_order placing no waits. */
static void test_ordered_hands_out_on_a_hit(void **state)
{
    (void)state;
    itest_require_cucache();
    start_empty();
    cudaStream_t s, t;
    simtest_gate_t *g;
    /* 4 MiB of a 20 MiB segment: 16 MiB stay free beside it */
    void *p = gated_reader(4 * MIB, &s, &t, &g), *q = NULL;
    int64_t hand_outs = stat_of("num_fence_hand_outs"), segments = stat_of("segment.all.current");
    SIM_OK(cudaFree(p));
    SIM_OK(cudaMalloc(&q, 4 * MIB));
    assert_int_equal(stat_of("segment.all.current"), segments); /* a hit either way */
    if (ordered()) {
        assert_ptr_equal(q, p);
        assert_int_equal(stat_of("num_fence_hand_outs"), hand_outs + 1);
    } else {
        assert_ptr_equal(q, (char *)p + 4 * MIB);
        assert_int_equal(stat_of("num_fence_hand_outs"), hand_outs);
    }
    SIM_OK(cudaMemsetAsync(q, 2, 4 * MIB, t));
    if (ordered())
        assert_int_equal(cudaStreamQuery(t), cudaErrorNotReady); /* behind the reader, on the device */
    open_and_check(g);
    SIM_OK(cudaFree(q));
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaStreamDestroy(t));
}

/* reuse:ordered and the questions a library asks before something outside
 * the device's streams reaches a block (a NIC by GPUDirect RDMA, a CPU
 * mapping by GDRCopy): a handed-out block's buffer id, its range (by
 * cuPointerGetAttributes and by cuMemGetAddressRange), its P2P tokens,
 * setting SYNC_MEMOPS and a dma-buf of it each wait on the host for the old
 * owner's reader first.  The questions every framework asks (the device pointer, the
 * memory type; Triton asks before each launch) do not wait, and neither
 * does a question about a block allocated before the hand-out (its memory
 * cannot be what was handed out).  Seen to fail with hook_ptr.c's
 * revealed() doing nothing, and (the older block waited) with every
 * ordered fence waited for. */
static void test_ordered_outside_agents_wait(void **state)
{
    (void)state;
    itest_require_cucache();
    if (!ordered())
        skip();
    for (int how = 0; how < 6; how++) {
        start_empty();
        cudaStream_t s, t;
        simtest_gate_t *g;
        void *older = NULL;
        SIM_OK(cudaMalloc(&older, MIB));
        void *p = gated_reader(12 * MIB, &s, &t, &g);
        CUdeviceptr q = (CUdeviceptr)free_and_realloc(p, 12 * MIB, true);
        CUdeviceptr dp = 0, base = 0;
        unsigned type = 0;
        unsigned long long id = 0;
        CU_OK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, q));
        CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, q));
        CU_OK(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)older));
        assert_false(simtest_gate_passed(g));
        simtest_gate_open_after(g, 200);
        size_t size = 0;
        CUDA_POINTER_ATTRIBUTE_P2P_TOKENS tokens;
        switch (how) {
        case 0:
            CU_OK(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, q));
            break;
        case 1: {
            CUpointer_attribute a[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
            void *v[2] = {&type, &base};
            CU_OK(cuPointerGetAttributes(2, a, v, q));
            assert_true(base == q);
            break;
        }
        case 2:
            CU_OK(cuMemGetAddressRange_v2(&base, &size, q));
            assert_int_equal(size, 12 * MIB);
            break;
        case 3: /* tokens are for cuMemAlloc memory: an error on virtual memory, after the wait all the same */
            CU_EXPECT(cuPointerGetAttribute(&tokens, CU_POINTER_ATTRIBUTE_P2P_TOKENS, q),
                      itest_expandable() ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
            break;
        case 4: {
            unsigned one = 1;
            CU_OK(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, q));
            break;
        }
        default: { /* the simulator makes a dma-buf of one mapping only: expandable pages are several */
            int fd = -1;
            CUresult r = cuMemGetHandleForAddressRange(&fd, q, 12 * MIB, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
            assert_int_equal(r, itest_expandable() ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
            if (r == CUDA_SUCCESS)
                assert_int_equal(close(fd), 0);
            break;
        }
        }
        if (!simtest_gate_passed(g))
            fail_msg("question %d answered before the old owner's reader finished", how);
        SIM_OK(cudaDeviceSynchronize());
        assert_int_equal(itest_races(), 0);
        SIM_OK(cudaFree((void *)q));
        SIM_OK(cudaFree(older));
        SIM_OK(cudaStreamDestroy(s));
        SIM_OK(cudaStreamDestroy(t));
    }
}

/* reuse:ordered and graph launches: the old owner reads the block in a
 * graph launched behind a gate, and the new owner writes it through a
 * graph instantiated before the hand-out and launched after it: the launch
 * waits on the device for the reader.  Seen to fail (a race) with
 * fence_order placing no waits. */
static void test_ordered_graph_launches(void **state)
{
    (void)state;
    itest_require_cucache();
    if (!ordered())
        skip();
    start_empty();
    cudaStream_t s, t;
    void *p = NULL, *q = NULL, *other = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    SIM_OK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
    SIM_OK(cudaMalloc(&other, 12 * MIB));
    SIM_OK(cudaMalloc(&p, 12 * MIB));
    SIM_OK(cudaMemset(p, 1, 12 * MIB));
    cudaGraph_t rg, wg;
    cudaGraphExec_t reader, writer;
    SIM_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    SIM_OK(cudaMemcpyAsync(other, p, 12 * MIB, cudaMemcpyDeviceToDevice, s));
    SIM_OK(cudaStreamEndCapture(s, &rg));
    SIM_OK(cudaStreamBeginCapture(t, cudaStreamCaptureModeGlobal));
    SIM_OK(cudaMemsetAsync(p, 2, 12 * MIB, t));
    SIM_OK(cudaStreamEndCapture(t, &wg));
    SIM_OK(cudaGraphInstantiate(&reader, rg, 0));
    SIM_OK(cudaGraphInstantiate(&writer, wg, 0));
    SIM_OK(cudaDeviceSynchronize());
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    SIM_OK(cudaGraphLaunch(reader, s));
    q = free_and_realloc(p, 12 * MIB, true);
    SIM_OK(cudaGraphLaunch(writer, t));
    assert_int_equal(cudaStreamQuery(t), cudaErrorNotReady);
    open_and_check(g);
    SIM_OK(cudaGraphExecDestroy(reader));
    SIM_OK(cudaGraphExecDestroy(writer));
    SIM_OK(cudaGraphDestroy(rg));
    SIM_OK(cudaGraphDestroy(wg));
    SIM_OK(cudaFree(q));
    SIM_OK(cudaFree(other));
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaStreamDestroy(t));
}

/* reuse:ordered during a capture: no wait can be placed (it would join
 * the graph), so nothing is handed out ahead of its fence; the capture's
 * allocation gets other memory, and the graph's write, launched after the
 * capture, never races the reader.  This checks the outcome, not one
 * guard: with the capture checks of hand_out and fence_order both
 * removed it still passes, because the capture's allocation comes from
 * the capture's private pool and no fence is recorded during a capture
 * (close_batch), so there is nothing to hand out. */
static void test_ordered_not_during_capture(void **state)
{
    (void)state;
    itest_require_cucache();
    if (!ordered())
        skip();
    start_empty();
    cudaStream_t s, t, c;
    simtest_gate_t *g;
    void *p = gated_reader(12 * MIB, &s, &t, &g), *q = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
    int64_t hand_outs = stat_of("num_fence_hand_outs");
    SIM_OK(cudaFree(p));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    SIM_OK(cudaStreamBeginCapture(c, cudaStreamCaptureModeGlobal));
    SIM_OK(cudaMalloc(&q, 12 * MIB));
    SIM_OK(cudaMemsetAsync(q, 2, 12 * MIB, c));
    SIM_OK(cudaStreamEndCapture(c, &graph));
    assert_ptr_not_equal(q, p);
    assert_int_equal(stat_of("num_fence_hand_outs"), hand_outs);
    SIM_OK(cudaGraphInstantiate(&exec, graph, 0));
    SIM_OK(cudaGraphLaunch(exec, c));
    open_and_check(g);
    SIM_OK(cudaGraphExecDestroy(exec));
    SIM_OK(cudaGraphDestroy(graph));
    SIM_OK(cudaFree(q));
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaStreamDestroy(t));
    SIM_OK(cudaStreamDestroy(c));
}

/* No stream of the program's own left: the old owner's reader ran on a
 * stream the program created and destroyed before the free (its last work
 * still queued, behind a gate).  reuse:ordered hands the block out at
 * once, and the new owner's memset on the legacy stream waits on the
 * device for the reader (the fence holds the destroyed stream's last
 * event), the host does not; the other rules hand nothing out ahead of the
 * fence.  Seen to fail (a race) with fence_order placing no waits. */
static void test_no_stream_of_its_own_destroyed_reader(void **state)
{
    (void)state;
    itest_require_cucache();
    start_empty();
    cudaStream_t s, t;
    simtest_gate_t *g;
    void *p = gated_reader(12 * MIB, &s, &t, &g), *q = NULL;
    SIM_OK(cudaStreamDestroy(s)); /* its reader still queued */
    SIM_OK(cudaStreamDestroy(t));
    q = free_and_realloc(p, 12 * MIB, ordered());
    SIM_OK(cudaMemsetAsync(q, 2, 12 * MIB, NULL));
    if (ordered())
        assert_int_equal(cudaStreamQuery(NULL), cudaErrorNotReady); /* behind the reader, on the device */
    open_and_check(g);
    SIM_OK(cudaFree(q));
}

/* A reader of `bytes` at `p` on the calling thread's per-thread default
 * stream, behind gate `g` (a helper thread's body). */
typedef struct ptds_reader_s {
    void *p;
    size_t bytes;
    simtest_gate_t *g;
} ptds_reader_t;

static void read_on_own_ptds(void *arg)
{
    ptds_reader_t *r = arg;
    simtest_gate_block_ptsz(r->g, NULL);
    struct cucache_sim_access acc = {r->p, r->bytes, 0};
    CU_OK(cucacheSimLaunch(CU_STREAM_PER_THREAD, NULL, NULL, &acc, 1));
}

/* No stream of the program's own, and under reuse:ordered the fence needs
 * no wait at all: the old owner's reader runs on another thread's
 * per-thread default stream (behind a gate) and the new owner writes on
 * this thread's; the fence's event on the legacy stream waits for the
 * reader and the writer waits for it.  Seen to fail (a race) with the
 * fence recorded on a stream of cucache's own instead of the legacy
 * stream. */
static void test_no_stream_of_its_own_per_thread_streams(void **state)
{
    (void)state;
    itest_require_cucache();
    start_empty();
    void *p = NULL, *q = NULL;
    SIM_OK(cudaMalloc(&p, 12 * MIB));
    SIM_OK(cudaMemset(p, 1, 12 * MIB));
    SIM_OK(cudaDeviceSynchronize());
    ptds_reader_t r = {p, 12 * MIB, simtest_gate_new()};
    simtest_thread_t *th = simtest_thread_start(read_on_own_ptds, &r); /* stays alive */
    int64_t hand_outs = stat_of("num_fence_hand_outs");
    SIM_OK(cudaFree(p));
    SIM_OK(cudaMalloc(&q, 12 * MIB));
    if (ordered()) {
        assert_ptr_equal(q, p);
        assert_int_equal(stat_of("num_fence_hand_outs"), hand_outs + 1);
    } else {
        assert_ptr_not_equal(q, p);
    }
    SIM_OK(cudaMemsetAsync_ptsz(q, 2, 12 * MIB, NULL)); /* this thread's per-thread stream */
    open_and_check(r.g);
    simtest_thread_finish(th);
    SIM_OK(cudaFree(q));
}

/* The legacy stream's probe (interpose/order.c) asks at most once a
 * millisecond, and only 20 ms after it found the fences the device was
 * ordered after completed, on a clock of a few milliseconds' resolution: a
 * free that lets it find them, and a pause, so that the next free asks. */
static void probe_ready(void)
{
    void *x = NULL;
    SIM_OK(cudaMalloc(&x, 512));
    simtest_sleep_ms(10);
    SIM_OK(cudaFree(x));
    simtest_sleep_ms(30);
}

/* reuse:ordered at a hit that would split a block: with the program's work
 * on two streams or more (a stream of its own alive, blocking by the
 * runtime, non-blocking by the driver, or both, and the legacy stream,
 * where its gated memset runs), a free behind a fence holding less than an
 * eighth of the cache stays behind it (the hit splits the free rest); with
 * the legacy stream alone it is handed out (the ordering holds back
 * nothing that could overlap).  The writer on the legacy stream waits for
 * the gated memset either way.  Under the other rules nothing is handed
 * out.  Seen to fail (round 1) with the probe never counting the legacy
 * stream, and (round 4) with the pacing from one stream on. */
static void test_ordered_hit_follows_the_streams(void **state)
{
    (void)state;
    itest_require_cucache();
    start_empty();
    void *big = NULL;
    SIM_OK(cudaMalloc(&big, 100 * MIB)); /* cached, free: an eighth of the cache is 15 MiB */
    SIM_OK(cudaFree(big));
    cudaStream_t b = NULL;
    CUstream c = NULL;
    for (int round = 0; round < 5; round++) {
        if (round == 1)
            SIM_OK(cudaStreamCreate(&b)); /* blocking, by the runtime */
        if (round == 2)
            CU_OK(cuStreamCreate(&c, CU_STREAM_NON_BLOCKING)); /* and one by the driver */
        if (round == 3)
            SIM_OK(cudaStreamDestroy(b));
        if (round == 4)
            CU_OK(cuStreamDestroy_v2(c));
        /* 4 MiB of a 20 MiB segment, written behind a gate on the legacy
         * stream, then freed: 4 MiB behind a fence, 16 MiB free beside it */
        void *p = NULL, *q = NULL;
        SIM_OK(cudaMalloc(&p, 4 * MIB));
        simtest_gate_t *g = simtest_gate_new();
        simtest_gate_block(g, NULL);
        SIM_OK(cudaMemsetAsync(p, 1, 4 * MIB, NULL));
        probe_ready();
        int own = round == 1 || round == 3 ? 1 : round == 2 ? 2 : 0;
        print_message("round %d: %d streams of its own, and the legacy stream's work\n", round, own);
        q = free_and_realloc(p, 4 * MIB, ordered() && own == 0);
        SIM_OK(cudaMemsetAsync(q, 2, 4 * MIB, NULL));
        open_and_check(g);
        SIM_OK(cudaFree(q));
        start_empty();
        SIM_OK(cudaMalloc(&big, 100 * MIB));
        SIM_OK(cudaFree(big));
    }
}

/* reuse:ordered with one stream of the program's own: while all its work
 * runs there, a free behind a fence holding less than an eighth of the
 * cache is handed out at a hit (that stream is in order after its own
 * work; nothing is held back); once its work was seen on the legacy stream
 * too (a gated memset there when the probe asks), it stays behind its
 * fence, for good, as with two streams of its own.  The new owner's writer
 * waits for the old owner's gated work either way.  Seen to fail (the
 * first part) with the pacing from one stream of the program's own, and
 * (the second) with the probe never counting the legacy stream. */
static void test_ordered_one_stream_paced_by_the_legacy_stream(void **state)
{
    (void)state;
    itest_require_cucache();
    /* the legacy stream counts for good once seen busy beside a stream of
     * the program's (earlier tests here): forgotten with the context */
    SIM_OK(cudaDeviceReset());
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int legacy = 0; legacy < 2; legacy++) {
        start_empty();
        void *big = NULL, *p = NULL, *q = NULL;
        SIM_OK(cudaMalloc(&big, 100 * MIB)); /* cached, free: an eighth of the cache is 15 MiB */
        SIM_OK(cudaFree(big));
        SIM_OK(cudaMalloc(&p, 4 * MIB));
        cudaStream_t on = legacy ? NULL : s;
        simtest_gate_t *g = simtest_gate_new();
        simtest_gate_block(g, on);
        SIM_OK(cudaMemsetAsync(p, 1, 4 * MIB, on));
        probe_ready();
        print_message("the program's work on %s\n", legacy ? "the legacy stream too" : "its stream");
        q = free_and_realloc(p, 4 * MIB, ordered() && !legacy);
        SIM_OK(cudaMemsetAsync(q, 2, 4 * MIB, s));
        open_and_check(g);
        SIM_OK(cudaFree(q));
    }
    SIM_OK(cudaStreamDestroy(s));
}

/* reuse:ordered with many streams (eight of the program's own, non-blocking,
 * and the legacy stream: the fence's events are gathered on cucache's hub
 * stream, backend.c fence_gather): a block freed while a gated kernel on
 * one of them reads it is handed out, and a writer on each of the streams
 * waits on the device for the reader.  With two streams (below the hub's
 * threshold) each waits for the others' events directly, and a writer on
 * the reader's own stream needs no wait (stream order).  Seen to fail (a
 * race) with the hub's waits left out, and with each stream's wait for the
 * events but its own left out. */
static void test_ordered_many_streams(void **state)
{
    (void)state;
    itest_require_cucache();
    if (!ordered())
        skip();
    for (int many = 0; many < 2; many++) {
        start_empty();
        enum { N = 8 };
        cudaStream_t st[N];
        int n = many ? N : 2;
        for (int i = 0; i < n; i++)
            SIM_OK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
        void *p = NULL;
        SIM_OK(cudaMalloc(&p, 16 * MIB));
        SIM_OK(cudaMemset(p, 1, 16 * MIB));
        SIM_OK(cudaDeviceSynchronize());
        simtest_gate_t *g = simtest_gate_new();
        simtest_gate_block(g, st[1]);
        struct cucache_sim_access acc = {p, 16 * MIB, 0};
        CU_OK(cucacheSimLaunch((CUstream)st[1], NULL, NULL, &acc, 1));
        void *q = free_and_realloc(p, 16 * MIB, true); /* a miss: handed out whatever the pacing */
        size_t slice = 16 * MIB / (size_t)(n + 1);
        for (int i = 0; i < n; i++)
            SIM_OK(cudaMemsetAsync((char *)q + (size_t)i * slice, 2, slice, st[i]));
        SIM_OK(cudaMemsetAsync((char *)q + (size_t)n * slice, 3, slice, NULL));
        for (int i = 0; i < n; i++)
            if (cudaStreamQuery(st[i]) != cudaErrorNotReady)
                fail_msg("%d streams: stream %d's writer ran before the reader", n, i);
        assert_int_equal(cudaStreamQuery(NULL), cudaErrorNotReady);
        open_and_check(g);
        SIM_OK(cudaFree(q));
        for (int i = 0; i < n; i++)
            SIM_OK(cudaStreamDestroy(st[i]));
    }
}

/* reuse:ordered across a device reset: a fence handed out before the reset
 * (its reader done, but still on the list of fences the device was ordered
 * after) is forgotten with the context, so that the hand-outs after it
 * work: a new stream's wait, the next fence and the next hand-out use
 * live events.  Seen to fail (no hand-out after the reset: the dead events
 * went back among the spares and the next fence could not be recorded)
 * with hook_dev_drop leaving the list as it was. */
static void test_ordered_after_device_reset(void **state)
{
    (void)state;
    itest_require_cucache();
    if (!ordered())
        skip();
    for (int round = 0; round < 2; round++) {
        start_empty();
        cudaStream_t s, t;
        simtest_gate_t *g;
        void *p = gated_reader(12 * MIB, &s, &t, &g);
        void *q = free_and_realloc(p, 12 * MIB, true);
        SIM_OK(cudaMemsetAsync(q, 2, 12 * MIB, t));
        assert_int_equal(cudaStreamQuery(t), cudaErrorNotReady); /* behind the reader */
        open_and_check(g);
        SIM_OK(cudaFree(q));
        SIM_OK(cudaStreamDestroy(s));
        SIM_OK(cudaStreamDestroy(t));
        if (round == 0) {
            SIM_OK(cudaDeviceReset());
            void *x = NULL; /* the cache opens again */
            SIM_OK(cudaMalloc(&x, 1));
            SIM_OK(cudaFree(x));
        }
    }
}

/* Last: a lookup of cuGetExportTable makes the count unseen for good. */
static void test_unseen_submissions_fall_back(void **state)
{
    (void)state;
    itest_require_cucache();
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    assert_int_equal(stat_of("submissions_unseen"), 0);
    assert_non_null(dlsym(h, "cuGetExportTable"));
    assert_int_equal(stat_of("submissions_unseen"), 1);
    int64_t idle = stat_of("num_idle_frees");
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 8 * MIB));
    SIM_OK(cudaFree(p));
    assert_int_equal(stat_of("num_idle_frees"), idle);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        ITEST(test_no_work_reuses_at_once),
        ITEST(test_queued_reader_is_waited_for),
        ITEST(test_any_route_makes_the_free_fenced),
        ITEST(test_ordered_hands_out_behind_the_fence),
        ITEST(test_ordered_hands_out_on_a_hit),
        ITEST(test_ordered_graph_launches),
        ITEST(test_ordered_outside_agents_wait),
        ITEST(test_ordered_not_during_capture),
        ITEST(test_no_stream_of_its_own_destroyed_reader),
        ITEST(test_no_stream_of_its_own_per_thread_streams),
        ITEST(test_ordered_hit_follows_the_streams),
        ITEST(test_ordered_one_stream_paced_by_the_legacy_stream),
        ITEST(test_ordered_many_streams),
        ITEST(test_ordered_after_device_reset),
        ITEST(test_unseen_submissions_fall_back),
    };
    return ITEST_RUN("interpose.idle", tests, itest_group_setup);
}
