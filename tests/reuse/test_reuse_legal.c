/*
 * Proves that cucache does not turn a correctly ordered reuse into a race or
 * a hang, under every reuse policy: the program's own ordering (an event
 * recorded after the read and waited for by the overwriting stream, a
 * stream synchronisation, a completed event the host observed, a free and
 * reallocation on the reading stream itself with cudaFreeAsync and
 * cudaMallocAsync, also through _ptsz) makes the reuse legal, so the fatal
 * detector must stay silent and the data must be right.  Under
 * reuse:stream the block is handed out again at once in the event-ordered
 * and same-stream cases, so the detector really saw the reuse and judged it
 * ordered.  Also: once the program synchronises the device, a block freed
 * while a reader was pending is reusable at once under every policy
 * (reuse:fenced included), without asking the device for memory.
 */
#include "reusetest.h"

#include <string.h>

enum { N = 1 << 20, OVERWRITE = 0x5A };

/* Under reuse:stream (and, for same-stream frees, reuse:fenced) the freed
 * block must come back at once: the test exercised a real reuse. */
static void expect_reused(const void *fresh, const void *freed, bool required, const char *what)
{
    if (required && !reuse_overlap(fresh, N, freed, N))
        fail_msg("reuse:%s: %s: the freed block %p was not handed out again (got %p)", reuse_policy_name(), what, freed,
                 fresh);
}

/* nb: [gate] read A, record ev; legacy waits for ev; free A, malloc B,
 * overwrite B on the legacy stream (queued behind the gate). */
static void test_reuse_ordered_by_event(void **state)
{
    (void)state;
    unsigned seed = 3001;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    void *a = reuse_alloc_filled(N, seed);
    reuse_gate_on(rf.nb);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, N, cudaMemcpyDeviceToHost, rf.nb));
    SIM_OK(cudaEventRecord(ev, rf.nb));
    SIM_OK(cudaStreamWaitEvent(LEGACY, ev, 0));
    reuse_free(a);
    void *b = NULL;
    SIM_OK(cudaMalloc(&b, N));
    reuse_track(b);
    expect_reused(b, a, reuse_policy() == REUSE_STREAM, "event-ordered reuse");
    SIM_OK(cudaMemsetAsync(b, OVERWRITE, N, LEGACY));
    SIM_OK(cudaMemcpyAsync(rf.dst2, b, N, cudaMemcpyDeviceToHost, LEGACY));
    simtest_settle();
    reuse_open_all();
    SIM_OK(cudaDeviceSynchronize());
    bool ok = reuse_data_is(rf.dst, N, seed, "the reader of A");
    ok &= reuse_bytes_are(rf.dst2, N, OVERWRITE, "B");
    reuse_verdict_safe(ok, "reuse ordered by cudaEventRecord + cudaStreamWaitEvent");
    reuse_free(b);
    SIM_OK(cudaEventDestroy(ev));
}

/* The program waits for the reader's stream before freeing. */
static void test_free_after_stream_synchronize(void **state)
{
    (void)state;
    unsigned seed = 3002;
    void *a = reuse_alloc_filled(N, seed);
    reuse_gate_on(rf.nb);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, N, cudaMemcpyDeviceToHost, rf.nb));
    reuse_open_all_after(30);
    SIM_OK(cudaStreamSynchronize(rf.nb));
    reuse_free(a);
    void *b = NULL;
    SIM_OK(cudaMalloc(&b, N));
    reuse_track(b);
    expect_reused(b, a, reuse_policy() == REUSE_STREAM, "reuse after cudaStreamSynchronize");
    SIM_OK(cudaMemsetAsync(b, OVERWRITE, N, rf.nb2));
    SIM_OK(simtest_stream_wait_idle(rf.nb2));
    reuse_verdict_safe(reuse_data_is(rf.dst, N, seed, "the reader of A"), "reuse after cudaStreamSynchronize");
    reuse_free(b);
}

/* The host saw the reader's event complete before the reallocation. */
static void test_reuse_after_host_observed_event(void **state)
{
    (void)state;
    unsigned seed = 3003;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    void *a = reuse_alloc_filled(N, seed);
    reuse_gate_on(rf.nb);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, N, cudaMemcpyDeviceToHost, rf.nb));
    SIM_OK(cudaEventRecord(ev, rf.nb));
    reuse_free(a);
    reuse_open_all();
    SIM_OK(simtest_event_wait_done(ev));
    void *b = NULL;
    SIM_OK(cudaMalloc(&b, N));
    reuse_track(b);
    SIM_OK(cudaMemsetAsync(b, OVERWRITE, N, LEGACY));
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    reuse_verdict_safe(reuse_data_is(rf.dst, N, seed, "the reader of A"), "reuse after the host saw the event");
    reuse_free(b);
    SIM_OK(cudaEventDestroy(ev));
}

/* cudaDeviceSynchronize: a block freed while its reader was pending is
 * reusable at once, from the cache. */
static void test_device_synchronize_makes_freed_block_reusable(void **state)
{
    (void)state;
    unsigned seed = 3004;
    void *a = reuse_alloc_filled(N, seed);
    reuse_gate_on(rf.nb);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, N, cudaMemcpyDeviceToHost, rf.nb));
    reuse_free(a);
    reuse_open_all_after(30);
    SIM_OK(cudaDeviceSynchronize());
    int64_t device_allocs = reuse_stat("num_device_alloc");
    void *b = NULL;
    SIM_OK(cudaMalloc(&b, N));
    reuse_track(b);
    expect_reused(b, a, true, "reuse after cudaDeviceSynchronize");
    if (reuse_stat("num_device_alloc") != device_allocs)
        fail_msg("%s", "cudaMalloc after cudaDeviceSynchronize asked the device instead of reusing the freed block");
    SIM_OK(cudaMemsetAsync(b, OVERWRITE, N, LEGACY));
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    reuse_verdict_safe(reuse_data_is(rf.dst, N, seed, "the reader of A"), "reuse after cudaDeviceSynchronize");
    reuse_free(b);
}

/* cudaFreeAsync and cudaMallocAsync on the reading stream: stream order
 * makes the reuse legal at once. */
static void test_same_stream_free_async_reuse(void **state)
{
    (void)state;
    unsigned seed = 3005;
    void *a = NULL;
    SIM_OK(cudaMallocAsync(&a, N, rf.nb));
    reuse_track(a);
    simtest_fill(rf.pageable, N, seed);
    SIM_OK(cudaMemcpyAsync(a, rf.pageable, N, cudaMemcpyHostToDevice, rf.nb));
    reuse_gate_on(rf.nb);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, N, cudaMemcpyDeviceToHost, rf.nb));
    reuse_free_async(a, rf.nb);
    void *c = NULL;
    SIM_OK(cudaMallocAsync(&c, N, rf.nb));
    reuse_track(c);
    expect_reused(c, a, reuse_policy() != REUSE_SYNC, "same-stream cudaFreeAsync + cudaMallocAsync");
    SIM_OK(cudaMemsetAsync(c, OVERWRITE, N, rf.nb));
    SIM_OK(cudaMemcpyAsync(rf.dst2, c, N, cudaMemcpyDeviceToHost, rf.nb));
    simtest_settle();
    reuse_open_all();
    SIM_OK(simtest_stream_wait_idle(rf.nb));
    bool ok = reuse_data_is(rf.dst, N, seed, "the reader of A");
    ok &= reuse_bytes_are(rf.dst2, N, OVERWRITE, "C");
    reuse_verdict_safe(ok, "same-stream cudaFreeAsync + cudaMallocAsync");
    reuse_free_async(c, rf.nb);
}

/* The same on the per-thread stream through the _ptsz entry points. */
static void test_same_stream_free_async_reuse_ptsz(void **state)
{
    (void)state;
    unsigned seed = 3006;
    void *a = NULL;
    SIM_OK(cudaMallocAsync_ptsz(&a, N, 0));
    reuse_track(a);
    simtest_fill(rf.pageable, N, seed);
    SIM_OK(cudaMemcpyAsync_ptsz(a, rf.pageable, N, cudaMemcpyHostToDevice, 0));
    simtest_gate_t *g = reuse_gate();
    simtest_gate_block_ptsz(g, 0);
    SIM_OK(cudaMemcpyAsync_ptsz(rf.dst, a, N, cudaMemcpyDeviceToHost, 0));
    (void)reuse_arm_openers();
    reuse_untrack(a);
    SIM_OK(cudaFreeAsync_ptsz(a, 0));
    void *c = NULL;
    SIM_OK(cudaMallocAsync_ptsz(&c, N, 0));
    reuse_track(c);
    expect_reused(c, a, reuse_policy() != REUSE_SYNC, "same-stream cudaFreeAsync_ptsz + cudaMallocAsync_ptsz");
    SIM_OK(cudaMemsetAsync_ptsz(c, OVERWRITE, N, 0));
    SIM_OK(cudaMemcpyAsync_ptsz(rf.dst2, c, N, cudaMemcpyDeviceToHost, 0));
    simtest_settle();
    reuse_open_all();
    SIM_OK(simtest_stream_wait_idle(cudaStreamPerThread));
    bool ok = reuse_data_is(rf.dst, N, seed, "the reader of A");
    ok &= reuse_bytes_are(rf.dst2, N, OVERWRITE, "C");
    reuse_verdict_safe(ok, "same-stream cudaFreeAsync_ptsz + cudaMallocAsync_ptsz");
    reuse_untrack(c);
    SIM_OK(cudaFreeAsync_ptsz(c, 0));
}

/* cudaMalloc memory read on nb, freed with cudaFreeAsync on nb2 after nb2
 * waited for the read's event; reallocated on nb2. */
static void test_free_async_ordered_by_event(void **state)
{
    (void)state;
    unsigned seed = 3007;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    void *a = reuse_alloc_filled(N, seed);
    reuse_gate_on(rf.nb);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, N, cudaMemcpyDeviceToHost, rf.nb));
    SIM_OK(cudaEventRecord(ev, rf.nb));
    SIM_OK(cudaStreamWaitEvent(rf.nb2, ev, 0));
    reuse_free_async(a, rf.nb2);
    void *b = NULL;
    SIM_OK(cudaMallocAsync(&b, N, rf.nb2));
    reuse_track(b);
    SIM_OK(cudaMemsetAsync(b, OVERWRITE, N, rf.nb2));
    SIM_OK(cudaMemcpyAsync(rf.dst2, b, N, cudaMemcpyDeviceToHost, rf.nb2));
    simtest_settle();
    reuse_open_all();
    SIM_OK(simtest_stream_wait_idle(rf.nb2));
    bool ok = reuse_data_is(rf.dst, N, seed, "the reader of A");
    ok &= reuse_bytes_are(rf.dst2, N, OVERWRITE, "B");
    reuse_verdict_safe(ok, "cudaFreeAsync on a stream that waited for the reader");
    reuse_free_async(b, rf.nb2);
    SIM_OK(cudaEventDestroy(ev));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        REUSETEST(test_reuse_ordered_by_event),          REUSETEST(test_free_after_stream_synchronize),
        REUSETEST(test_reuse_after_host_observed_event), REUSETEST(test_device_synchronize_makes_freed_block_reusable),
        REUSETEST(test_same_stream_free_async_reuse),    REUSETEST(test_same_stream_free_async_reuse_ptsz),
        REUSETEST(test_free_async_ordered_by_event),
    };
    return REUSE_RUN("reuse.legal", tests);
}
