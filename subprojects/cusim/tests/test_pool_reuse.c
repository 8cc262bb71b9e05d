/*
 * Proves the stream-ordered pools' reuse policies on the simulated device
 * (CUDA Programming Guide, "Memory Reuse Policies"): with CUDA's defaults a
 * block freed on stream B while B is held serves an allocation on stream A
 * once the device is full, by a dependency the driver inserts (same address,
 * no device allocation, A's later work waits for the free, nothing races);
 * with that policy and opportunistic reuse off it is not reused until an
 * event orders A after the free, and not even then with event dependencies
 * off; opportunistic reuse takes a completed free the host has not seen;
 * the inserted wait, planted away, is caught by the race detector; a pool
 * out of memory releases only completed frees, race-free; and the three
 * attributes default to on and are honoured on the default pool, the
 * current pool and a created one, read and written through the runtime and
 * the driver alike.  Meson runs it with CUCACHE_SIM_CAPACITY=1G.
 */
#include "simtest.h"

#include <stdatomic.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
#define BLOCK (400 * MIB) /* two fit the 1 GiB device, a third does not */

static const enum cudaMemPoolAttr reuse_attrs[] = {
    cudaMemPoolReuseFollowEventDependencies,
    cudaMemPoolReuseAllowOpportunistic,
    cudaMemPoolReuseAllowInternalDependencies,
};

static cudaStream_t stream_new(void)
{
    cudaStream_t s = NULL;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}

static cudaMemPool_t default_pool(void)
{
    cudaMemPool_t pool = NULL;
    SIM_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
    return pool;
}

static cudaMemPool_t pool_create(void)
{
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    cudaMemPool_t pool = NULL;
    SIM_OK(cudaMemPoolCreate(&pool, &props));
    return pool;
}

static void flag_set(cudaMemPool_t pool, enum cudaMemPoolAttr attr, int on)
{
    SIM_OK(cudaMemPoolSetAttribute(pool, attr, &on));
}

/* The flag as the driver reads it. */
static int flag_get(cudaMemPool_t pool, enum cudaMemPoolAttr attr)
{
    int v = -1;
    CU_OK(cuMemPoolGetAttribute(pool, (CUmemPool_attribute)attr, &v));
    return v;
}

static void noop(void *arg)
{
    (void)arg;
}

/* A simulated kernel on s touching [p, p + n). */
static void kernel(cudaStream_t s, void *p, size_t n, int write)
{
    struct cucache_sim_access acc = {p, n, write};
    CU_OK(cucacheSimLaunch(s, noop, NULL, &acc, 1));
}

static void set_flag_fn(void *flag)
{
    atomic_store((atomic_int *)flag, 1);
}

/* Waits until everything queued on s so far has run, without the host
 * observing it: a kernel's body orders nothing (a host function or a query
 * would), so a free before it is complete but not synchronised. */
static void wait_unobserved(cudaStream_t s)
{
    static atomic_int flag;
    atomic_store(&flag, 0);
    CU_OK(cucacheSimLaunch(s, set_flag_fn, &flag, NULL, 0));
    for (int i = 0; i < SIMTEST_WAIT_MS && !atomic_load(&flag); i++)
        simtest_sleep_ms(1);
    assert_true(atomic_load(&flag));
}

/* The cross-stream pattern: two blocks from `pool` allocated and written on
 * a, read on b behind an event and a closed gate, freed on b.  The device
 * then has no room for a third. */
struct pattern {
    cudaStream_t a, b;
    simtest_gate_t *gate;
    void *p[2];
};

static void pattern_run(struct pattern *t, cudaMemPool_t pool)
{
    t->a = stream_new();
    t->b = stream_new();
    t->gate = simtest_gate_new();
    cudaEvent_t e;
    SIM_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (int i = 0; i < 2; i++) {
        SIM_OK(cudaMallocFromPoolAsync(&t->p[i], BLOCK, pool, t->a));
        kernel(t->a, t->p[i], BLOCK, 1);
    }
    SIM_OK(cudaEventRecord(e, t->a));
    SIM_OK(cudaStreamWaitEvent(t->b, e, 0));
    simtest_gate_block(t->gate, t->b);
    for (int i = 0; i < 2; i++) {
        kernel(t->b, t->p[i], BLOCK, 0);
        SIM_OK(cudaFreeAsync(t->p[i], t->b));
    }
    SIM_OK(cudaEventDestroy(e));
}

static bool is_pattern_block(const struct pattern *t, const void *q)
{
    return q == t->p[0] || q == t->p[1];
}

static void pattern_end(struct pattern *t)
{
    simtest_gate_open(t->gate);
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaStreamDestroy(t->a));
    SIM_OK(cudaStreamDestroy(t->b));
}

static int reset(void **state)
{
    (void)state;
    cucacheSimRaceReset();
    cucacheSimPlantReuseWithoutWait(0);
    cudaMemPool_t pool = default_pool();
    for (size_t i = 0; i < sizeof reuse_attrs / sizeof reuse_attrs[0]; i++)
        flag_set(pool, reuse_attrs[i], 1);
    SIM_OK(cudaDeviceSetMemPool(0, pool));
    return 0;
}

static int teardown(void **state)
{
    cucacheSimPlantReuseWithoutWait(0);
    int r = simtest_teardown(state);
    SIM_OK(cudaMemPoolTrimTo(default_pool(), 0));
    return r;
}

#define REUSETEST(f) cmocka_unit_test_setup_teardown(f, reset, teardown)

/* The pattern, then the third allocation on a from `pool`, used by a kernel
 * on a; returns whether the block was reused.  A's later work waits for
 * the free, and nothing races. */
static void expect_reuse_by_inserted_dependency(cudaMemPool_t pool)
{
    struct pattern t;
    pattern_run(&t, pool);
    unsigned long allocs = cucacheSimDeviceAllocs();
    void *q = NULL;
    SIM_OK(cudaMallocFromPoolAsync(&q, BLOCK, pool, t.a));
    assert_true(is_pattern_block(&t, q));
    assert_int_equal(cucacheSimDeviceAllocs(), allocs);
    kernel(t.a, q, BLOCK, 1);
    simtest_mark_t *m = simtest_mark_new();
    simtest_mark_on(m, t.a);
    simtest_settle();
    assert_false(simtest_mark_ran(m)); /* a waits for b's free on the device */
    simtest_gate_open(t.gate);
    assert_true(simtest_mark_wait(m));
    SIM_OK(cudaFreeAsync(q, t.a));
    pattern_end(&t);
    assert_int_equal(cucacheSimRaceCount(), 0);
}

static void test_defaults_reuse_pending_free_by_inserted_dependency(void **state)
{
    (void)state;
    expect_reuse_by_inserted_dependency(default_pool());
}

/* With room on the device, a pending free on another stream is not taken:
 * CUDA inserts a dependency only once it fails to get more memory. */
static void test_pending_free_not_taken_while_device_has_room(void **state)
{
    (void)state;
    cudaStream_t a = stream_new(), b = stream_new();
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, b);
    void *p = NULL, *q = NULL;
    SIM_OK(cudaMallocAsync(&p, BLOCK, b));
    SIM_OK(cudaFreeAsync(p, b));
    SIM_OK(cudaMallocAsync(&q, BLOCK, a));
    assert_ptr_not_equal(q, p);
    simtest_mark_t *m = simtest_mark_new();
    simtest_mark_on(m, a);
    assert_true(simtest_mark_wait(m)); /* no wait was inserted */
    SIM_OK(cudaFreeAsync(q, a));
    simtest_gate_open(g);
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(b));
}

/* Internal dependencies and opportunistic reuse off: the pending frees do
 * not serve a (out of memory) until an event orders a after them; then
 * they do, while still pending, and a's work waits for them. */
static void test_no_internal_dependency_reuse_follows_events(void **state)
{
    (void)state;
    cudaMemPool_t pool = default_pool();
    flag_set(pool, cudaMemPoolReuseAllowInternalDependencies, 0);
    flag_set(pool, cudaMemPoolReuseAllowOpportunistic, 0);
    struct pattern t;
    pattern_run(&t, pool);
    void *q = NULL;
    SIM_EXPECT(cudaMallocAsync(&q, BLOCK, t.a), cudaErrorMemoryAllocation);
    SIM_EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
    cudaEvent_t e;
    SIM_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    SIM_OK(cudaEventRecord(e, t.b));
    SIM_OK(cudaStreamWaitEvent(t.a, e, 0));
    SIM_OK(cudaMallocAsync(&q, BLOCK, t.a));
    assert_true(is_pattern_block(&t, q));
    kernel(t.a, q, BLOCK, 1);
    simtest_mark_t *m = simtest_mark_new();
    simtest_mark_on(m, t.a);
    simtest_settle();
    assert_false(simtest_mark_ran(m));
    SIM_OK(cudaFreeAsync(q, t.a));
    SIM_OK(cudaEventDestroy(e));
    pattern_end(&t);
    assert_int_equal(cucacheSimRaceCount(), 0);
}

/* Event dependencies off too: an event wait does not make a pending free of
 * another stream reusable. */
static void test_event_dependencies_off_not_followed(void **state)
{
    (void)state;
    cudaMemPool_t pool = default_pool();
    for (size_t i = 0; i < sizeof reuse_attrs / sizeof reuse_attrs[0]; i++)
        flag_set(pool, reuse_attrs[i], 0);
    struct pattern t;
    pattern_run(&t, pool);
    cudaEvent_t e;
    SIM_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    SIM_OK(cudaEventRecord(e, t.b));
    SIM_OK(cudaStreamWaitEvent(t.a, e, 0));
    void *q = NULL;
    SIM_EXPECT(cudaMallocAsync(&q, BLOCK, t.a), cudaErrorMemoryAllocation);
    SIM_EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
    SIM_OK(cudaEventDestroy(e));
    pattern_end(&t);
    /* the host synchronised past the frees: reusable whatever the policies */
    unsigned long allocs = cucacheSimDeviceAllocs();
    uint64_t keep = UINT64_MAX;
    SIM_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    cudaStream_t c = stream_new();
    SIM_OK(cudaMallocAsync(&q, BLOCK, c));
    SIM_OK(cudaFreeAsync(q, c));
    SIM_OK(cudaStreamSynchronize(c));
    cudaStream_t d = stream_new();
    SIM_OK(cudaMallocAsync(&q, BLOCK, d));
    assert_int_equal(cucacheSimDeviceAllocs(), allocs + 1);
    SIM_OK(cudaFreeAsync(q, d));
    keep = 0;
    SIM_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaStreamDestroy(c));
    SIM_OK(cudaStreamDestroy(d));
}

/* Opportunistic reuse: a free that completed, unseen by the host and
 * unordered with a, serves a with room still on the device; with the
 * policy off it does not. */
static void opportunistic_case(int on)
{
    cudaMemPool_t pool = default_pool();
    flag_set(pool, cudaMemPoolReuseAllowOpportunistic, on);
    flag_set(pool, cudaMemPoolReuseAllowInternalDependencies, 0);
    cudaStream_t a = stream_new(), b = stream_new();
    void *p = NULL, *q = NULL;
    SIM_OK(cudaMallocAsync(&p, 64 * MIB, b));
    kernel(b, p, 64 * MIB, 1);
    SIM_OK(cudaFreeAsync(p, b));
    wait_unobserved(b);
    unsigned long allocs = cucacheSimDeviceAllocs();
    SIM_OK(cudaMallocAsync(&q, 64 * MIB, a));
    kernel(a, q, 64 * MIB, 1);
    if (on) {
        assert_ptr_equal(q, p);
        assert_int_equal(cucacheSimDeviceAllocs(), allocs);
    } else {
        assert_ptr_not_equal(q, p);
        assert_int_equal(cucacheSimDeviceAllocs(), allocs + 1);
    }
    SIM_OK(cudaFreeAsync(q, a));
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(cucacheSimRaceCount(), 0);
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(b));
}

static void test_opportunistic_reuse_of_completed_free(void **state)
{
    (void)state;
    opportunistic_case(1);
}

static void test_opportunistic_off_completed_free_not_reused(void **state)
{
    (void)state;
    opportunistic_case(0);
}

/* The inserted wait left out (cucacheSimPlantReuseWithoutWait): a's write
 * of the reused block races with b's read of it, and the detector says so. */
static void test_planted_missing_wait_is_caught(void **state)
{
    (void)state;
    cucacheSimPlantReuseWithoutWait(1);
    struct pattern t;
    pattern_run(&t, default_pool());
    void *q = NULL;
    SIM_OK(cudaMallocAsync(&q, BLOCK, t.a));
    assert_true(is_pattern_block(&t, q));
    kernel(t.a, q, BLOCK, 1);
    cucacheSimPlantReuseWithoutWait(0);
    assert_true(cucacheSimRaceCount() > 0);
    char text[1024];
    cucacheSimLastRace(text, sizeof text);
    assert_non_null(strstr(text, "RACE on device memory"));
    assert_non_null(strstr(text, "cuMemFreeAsync")); /* with the simulator's own free */
    SIM_OK(cudaFreeAsync(q, t.a));
    pattern_end(&t);
}

/* Out of memory, a request no freed block fits (700 MiB): the pool gives
 * back a completed free (unseen by the host) and the new block at its
 * address races with nothing; a pending free is never given back. */
static void test_out_of_memory_releases_only_completed_frees(void **state)
{
    (void)state;
    cudaMemPool_t pool = default_pool();
    cudaStream_t a = stream_new(), b = stream_new();
    void *p = NULL, *q = NULL;
    SIM_OK(cudaMallocAsync(&p, BLOCK, a));
    kernel(a, p, BLOCK, 1);
    cudaEvent_t e;
    SIM_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    SIM_OK(cudaEventRecord(e, a));
    SIM_OK(cudaStreamWaitEvent(b, e, 0));
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, b);
    kernel(b, p, BLOCK, 0);
    SIM_OK(cudaFreeAsync(p, b));
    SIM_EXPECT(cudaMallocAsync(&q, 700 * MIB, a), cudaErrorMemoryAllocation);
    SIM_EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
    uint64_t reserved = 0;
    SIM_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
    assert_true(reserved >= BLOCK); /* the pending free's block stays */
    simtest_gate_open(g);
    wait_unobserved(b);
    SIM_OK(cudaMallocAsync(&q, 700 * MIB, a));
    assert_ptr_equal(q, p); /* first fit: the released block's address */
    kernel(a, q, 700 * MIB, 1);
    SIM_OK(cudaFreeAsync(q, a));
    SIM_OK(cudaDeviceSynchronize());
    assert_int_equal(cucacheSimRaceCount(), 0);
    SIM_OK(cudaEventDestroy(e));
    SIM_OK(cudaStreamDestroy(a));
    SIM_OK(cudaStreamDestroy(b));
}

/* All three policies on by default in every pool, written through either
 * API and read through the other; a bad attribute is refused. */
static void test_policy_attributes_default_on_both_apis(void **state)
{
    (void)state;
    cudaMemPool_t created = pool_create(), pools[] = {default_pool(), created};
    for (size_t k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof reuse_attrs / sizeof reuse_attrs[0]; i++) {
            enum cudaMemPoolAttr attr = reuse_attrs[i];
            int v = -1;
            SIM_OK(cudaMemPoolGetAttribute(pools[k], attr, &v));
            assert_int_equal(v, 1);
            flag_set(pools[k], attr, 0);
            assert_int_equal(flag_get(pools[k], attr), 0);
            int on = 7; /* any nonzero is on, read back as 1 */
            CU_OK(cuMemPoolSetAttribute(pools[k], (CUmemPool_attribute)attr, &on));
            SIM_OK(cudaMemPoolGetAttribute(pools[k], attr, &v));
            assert_int_equal(v, 1);
        }
    int v = 0;
    SIM_EXPECT(cudaMemPoolSetAttribute(created, (enum cudaMemPoolAttr)99, &v), cudaErrorInvalidValue);
    SIM_EXPECT(cudaMemPoolGetAttribute(created, cudaMemPoolReuseAllowOpportunistic, NULL), cudaErrorInvalidValue);
    SIM_OK(cudaMemPoolDestroy(created));
}

/* A created pool made current: cudaMallocAsync follows its policies, not
 * the default pool's (internal dependencies off there: out of memory; on:
 * reused), and cudaMallocFromPoolAsync of it the same. */
static void test_current_and_created_pools_honour_policies(void **state)
{
    (void)state;
    cudaMemPool_t pool = pool_create();
    SIM_OK(cudaDeviceSetMemPool(0, pool));
    flag_set(pool, cudaMemPoolReuseAllowInternalDependencies, 0);
    struct pattern t;
    pattern_run(&t, pool);
    void *q = NULL;
    SIM_EXPECT(cudaMallocAsync(&q, BLOCK, t.a), cudaErrorMemoryAllocation);
    SIM_EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
    flag_set(pool, cudaMemPoolReuseAllowInternalDependencies, 1);
    SIM_OK(cudaMallocAsync(&q, BLOCK, t.a));
    assert_true(is_pattern_block(&t, q));
    SIM_OK(cudaFreeAsync(q, t.a));
    pattern_end(&t);
    expect_reuse_by_inserted_dependency(pool);
    SIM_OK(cudaDeviceSetMemPool(0, default_pool()));
    SIM_OK(cudaMemPoolDestroy(pool));
    assert_int_equal(cucacheSimRaceCount(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        REUSETEST(test_defaults_reuse_pending_free_by_inserted_dependency),
        REUSETEST(test_pending_free_not_taken_while_device_has_room),
        REUSETEST(test_no_internal_dependency_reuse_follows_events),
        REUSETEST(test_event_dependencies_off_not_followed),
        REUSETEST(test_opportunistic_reuse_of_completed_free),
        REUSETEST(test_opportunistic_off_completed_free_not_reused),
        REUSETEST(test_planted_missing_wait_is_caught),
        REUSETEST(test_out_of_memory_releases_only_completed_frees),
        REUSETEST(test_policy_attributes_default_on_both_apis),
        REUSETEST(test_current_and_created_pools_honour_policies),
    };
    return cmocka_run_group_tests_name("sim.pool_reuse", tests, simtest_group_setup, NULL);
}
