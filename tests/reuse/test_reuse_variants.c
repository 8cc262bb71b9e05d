/*
 * Proves the reuse-safety rule of test_reuse_core.c on the other shapes a
 * program can take: the overwrite on the per-thread default stream
 * (cudaStreamPerThread and the _ptsz entry points); the reader on another
 * thread's per-thread stream or on a created blocking stream (covered by
 * the legacy-stream half of the fence); the free and reallocation on a
 * second thread; another thread's cudaDeviceSynchronize that began before
 * the reader was queued and returns after the free; readers on several
 * non-blocking streams at once (one open stream keeps the whole fence
 * pending); a reader left on a stream the program destroyed before the
 * free; and stream-ordered frees (cudaFreeAsync of stream-ordered and of
 * cudaMalloc memory, reallocated on the same or another stream, also
 * through _ptsz).  Every test holds a reader behind a gate while the
 * program frees, reallocates (with the cache filled, so that allocations
 * miss) and overwrites, then checks what the reader saw; reuse:fenced and
 * reuse:sync must pass with the fatal detector, and reuse:stream is caught
 * on every cudaFree hazard (REUSE_EXPECT=race or abort).  reuse:ordered
 * must pass too: it hands the freed block out at once and orders the
 * device after its fence, so the new owner's writes are queued and never
 * waited for while the reader is held; where the tests look, a write to a
 * held reader's bytes is still pending, and it has landed once the reader
 * is done.  reuse:stream does not change cudaFreeAsync (its free always
 * waits behind an event on its stream), so the stream-ordered tests prove
 * safety only; under REUSE_EXPECT=race they say so.  Seen to fail, in
 * scratch copies of interpose/ and core/: the stream-ordered tests with
 * cudaFreeAsync made reusable at once (hook_rt_mem.c, CORE_FREE_NOW: two
 * of them) or with every stream keyed alike (streams.h: all four); the
 * non-blocking-stream tests with the fence's events on non-blocking
 * streams dropped; the blocking and per-thread reader tests with its
 * legacy-stream event dropped; under reuse:ordered, the second-thread and
 * several-stream tests with fence_order placing no waits (order.c) and
 * with hand_out not calling it (hand_out.c): the detector aborts at the
 * new owner's write, and with the detector not fatal the test finds that
 * write completed while its reader was held; and the several-stream test
 * with each stream waiting for part of the fence only: the write to the
 * second reader's block completes once the first reader is done.
 */
#include "reusetest.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

enum { OVERWRITE = 0x3C };

static void write_memset(void *p, size_t n, cudaStream_t s)
{
    SIM_OK(cudaMemsetAsync(p, OVERWRITE, n, s));
}

/* ---- new owners' writes and held readers --------------------------------- */

/* A write of OVERWRITE queued to a new owner's block [p, p+n), and an event
 * recorded after it on its stream. */
struct queued_write {
    const void *p;
    size_t n;
    cudaEvent_t done;
};

/* w: the write just queued on s to [p, p+n); records its event there. */
static void write_queued(struct queued_write *w, const void *p, size_t n, cudaStream_t s)
{
    w->p = p;
    w->n = n;
    SIM_OK(cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming));
    SIM_OK(cudaEventRecord(w->done, s));
}

/* No write reaches memory while a reader of bytes it overlaps is held:
 * each write that overlaps freed block i (fn[i] bytes) while gate g[i]
 * is still closed must still be pending, after a settle (the chance a
 * missing ordering needs to let it run).  Under reuse:ordered that is the
 * device ordered after the fence, and there must be such a write, or the
 * ordering went unexercised; under reuse:fenced no such write exists (the blocks are disjoint), under
 * reuse:sync no reader is held any more, and under REUSE_EXPECT=race the
 * write is meant to land, so nothing is checked there. */
static void expect_writes_held(const struct queued_write *w, int nw, const void *const *freed, const size_t *fn,
                               simtest_gate_t *const *g, int nf, const char *when)
{
    if (reuse_expect() == REUSE_EXPECT_RACE)
        return;
    bool settled = false;
    int held = 0;
    for (int k = 0; k < nw; k++)
        for (int i = 0; i < nf; i++) {
            if (simtest_gate_passed(g[i]) || !reuse_overlap(w[k].p, w[k].n, freed[i], fn[i]))
                continue;
            if (!settled)
                simtest_settle();
            settled = true;
            cudaError_t rc = cudaEventQuery(w[k].done);
            if (rc == cudaSuccess)
                fail_msg("reuse:%s: %s, the new owner's write to [%p, +%zu) had completed while the reader of the "
                         "freed block [%p, +%zu) it overlaps was held: nothing ordered the write after the reader",
                         reuse_policy_name(), when, w[k].p, w[k].n, freed[i], fn[i]);
            SIM_EXPECT(rc, cudaErrorNotReady);
            held++;
            break;
        }
    if (reuse_policy() == REUSE_ORDERED && held == 0)
        fail_msg("reuse:ordered: %s, no new owner's block overlaps a held reader's: the device's ordering after the "
                 "fence was not exercised",
                 when);
}

/* Waits (bounded) for each write and checks that its block holds
 * OVERWRITE: the writes ordered after the readers did land.  Then
 * forgets their events. */
static void expect_writes_landed(struct queued_write *w, int nw, const char *what)
{
    for (int k = 0; k < nw; k++)
        SIM_OK(simtest_event_wait_done(w[k].done));
    for (int k = 0; k < nw; k++) {
        SIM_OK(cudaMemcpy(rf.dst2, w[k].p, w[k].n, cudaMemcpyDeviceToHost));
        if (!reuse_bytes_are(rf.dst2, w[k].n, OVERWRITE, "a new owner's block"))
            fail_msg("reuse:%s: %s: the new owner's write to [%p, +%zu) did not land", reuse_policy_name(), what,
                     w[k].p, w[k].n);
        SIM_OK(cudaEventDestroy(w[k].done));
    }
}

/* ---- per-thread default streams -------------------------------------- */

/* nb: [gate] copy A -> host; free A; B and C allocated and overwritten by
 * write (on `writer`); open; check. */
static void hazard_with_writer(cudaStream_t writer, void (*write)(void *p, size_t n, cudaStream_t s), const char *what)
{
    enum { N = 1 << 20 };
    unsigned seed = 1001;
    void *a = reuse_alloc_filled(N, seed);
    reuse_fill(NULL, false);
    reuse_gate_on(rf.nb);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, N, cudaMemcpyDeviceToHost, rf.nb));
    reuse_free(a);
    void *b = NULL, *c = NULL;
    reuse_realloc_twice(a, N, N, write, writer, &b, &c);
    reuse_open_all();
    SIM_OK(simtest_stream_wait_idle(rf.nb));
    reuse_verdict_hazard(a, N, reuse_data_is(rf.dst, N, seed, "the reader of A"), what);
    reuse_free(b);
    reuse_free(c);
}

static void test_overwrite_on_per_thread_stream(void **state)
{
    (void)state;
    hazard_with_writer(cudaStreamPerThread, write_memset, "overwrite on cudaStreamPerThread");
}

/* Stream 0 through the _ptsz entry points is the per-thread stream. */
static void write_ptsz(void *p, size_t n, cudaStream_t s)
{
    (void)s;
    SIM_OK(cudaMemsetAsync_ptsz(p, OVERWRITE, n / 2, 0));
    simtest_fill(rf.pageable, n / 2, 5);
    SIM_OK(cudaMemcpyAsync_ptsz((char *)p + n / 2, rf.pageable, n / 2, cudaMemcpyHostToDevice, 0));
}

static void test_overwrite_through_ptsz_entry_points(void **state)
{
    (void)state;
    hazard_with_writer(cudaStreamPerThread, write_ptsz, "overwrite through cudaMemsetAsync_ptsz/cudaMemcpyAsync_ptsz");
}

/* The reader is another thread's per-thread stream: only the legacy
 * stream's half of the fence orders it. */
struct ptds_reader {
    simtest_gate_t *gate;
    void *dst;
    const void *src;
    size_t n;
    cudaError_t rc;
};

static void read_on_own_per_thread_stream(void *arg)
{
    struct ptds_reader *r = arg;
    r->rc = cudaLaunchHostFunc(cudaStreamPerThread, simtest_gate_fn, r->gate);
    if (r->rc == cudaSuccess)
        r->rc = cudaMemcpyAsync(r->dst, r->src, r->n, cudaMemcpyDeviceToHost, cudaStreamPerThread);
}

static void test_reader_on_other_threads_per_thread_stream(void **state)
{
    (void)state;
    enum { N = 512 << 10 };
    unsigned seed = 1002;
    void *a = reuse_alloc_filled(N, seed);
    reuse_fill(NULL, false);
    struct ptds_reader r = {reuse_gate(), rf.dst, a, N, cudaErrorUnknown};
    reuse_hold(cudaStreamPerThread); /* that thread's: the legacy stream waits too */
    simtest_thread_t *t = simtest_thread_start(read_on_own_per_thread_stream, &r); /* stays alive */
    SIM_OK(r.rc);
    reuse_free(a);
    void *b = NULL, *c = NULL;
    reuse_realloc_twice(a, N, N, write_memset, rf.nb2, &b, &c); /* non-blocking: not held by the reader */
    reuse_open_all();
    SIM_OK(cudaDeviceSynchronize());
    bool ok = reuse_data_is(rf.dst, N, seed, "the reader of A");
    reuse_verdict_hazard(a, N, ok, "reader on another thread's per-thread stream");
    simtest_thread_finish(t);
    reuse_free(b);
    reuse_free(c);
}

/* The reader is a created blocking stream (ordered with the legacy stream,
 * not with non-blocking ones). */
static void test_reader_on_blocking_stream(void **state)
{
    (void)state;
    enum { N = 2 << 20 };
    unsigned seed = 1003;
    void *a = reuse_alloc_filled(N, seed);
    reuse_fill(NULL, false);
    reuse_gate_on(rf.bl);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, N, cudaMemcpyDeviceToHost, rf.bl));
    reuse_free(a);
    void *b = NULL, *c = NULL;
    reuse_realloc_twice(a, N, N, write_memset, rf.nb2, &b, &c);
    reuse_open_all();
    SIM_OK(simtest_stream_wait_idle(rf.bl));
    reuse_verdict_hazard(a, N, reuse_data_is(rf.dst, N, seed, "the reader of A"), "reader on a blocking stream");
    reuse_free(b);
    reuse_free(c);
}

/* ---- other threads ------------------------------------------------------ */

struct reallocator {
    void *a, *b;
    size_t n;
    simtest_gate_t *gate;
    bool wait;                   /* wait for the overwrite (not under reuse:ordered: it waits for the reader) */
    cudaEvent_t written;         /* recorded after the overwrite */
    bool gate_passed_after_free; /* for reuse:sync */
    cudaError_t rc;
    const char *failed; /* the call that failed */
};

static void free_and_reallocate(void *arg)
{
    struct reallocator *r = arg;
    if ((r->rc = cudaFree(r->a)) != cudaSuccess) {
        r->failed = "cudaFree";
        return;
    }
    r->gate_passed_after_free = simtest_gate_passed(r->gate);
    if ((r->rc = cudaMalloc(&r->b, r->n)) != cudaSuccess) {
        r->failed = "cudaMalloc";
        return;
    }
    if ((r->rc = cudaMemsetAsync(r->b, OVERWRITE, r->n, cudaStreamPerThread)) != cudaSuccess) {
        r->failed = "cudaMemsetAsync";
        return;
    }
    if ((r->rc = cudaEventRecord(r->written, cudaStreamPerThread)) != cudaSuccess) {
        r->failed = "cudaEventRecord";
        return;
    }
    if (!r->wait)
        return;
    r->rc = simtest_stream_wait_idle(cudaStreamPerThread);
    r->failed = r->rc == cudaSuccess ? NULL : "cudaStreamQuery";
}

/* A second thread frees A, reallocates and overwrites on its per-thread
 * stream; then the main thread reallocates once more and overwrites on
 * the legacy stream.  Under the rules that keep A from the new owners
 * until its reader is done, both writes complete while the reader is
 * held.  reuse:ordered hands A out at once instead, and the writes wait on
 * the device for the reader: they are queued, not waited for; with the
 * reader held, a write to A's bytes must still be pending; once the reader
 * is released, it saw A's data and every write landed. */
static void test_second_thread_frees_and_reallocates(void **state)
{
    (void)state;
    enum { N = 256 << 10 };
    unsigned seed = 1004;
    bool ordered = reuse_policy() == REUSE_ORDERED;
    void *a = reuse_alloc_filled(N, seed);
    reuse_fill(NULL, false);
    simtest_gate_t *g = reuse_gate_on(rf.nb);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, N, cudaMemcpyDeviceToHost, rf.nb));
    struct reallocator r = {a, NULL, N, g, !ordered, NULL, false, cudaSuccess, NULL};
    SIM_OK(cudaEventCreateWithFlags(&r.written, cudaEventDisableTiming));
    int64_t hand_outs = reuse_hand_outs();
    uint32_t armed = reuse_arm_openers();
    simtest_thread_t *t = simtest_thread_start(free_and_reallocate, &r);
    reuse_untrack(a); /* freed there */
    if (r.b)
        reuse_track(r.b);
    if (r.failed)
        fail_msg("second thread: %s returned %d", r.failed, (int)r.rc);
    if (armed && !r.gate_passed_after_free)
        fail_msg("%s", "reuse:sync: cudaFree on the second thread did not wait for the reader");
    reuse_expect_disjoint(r.b, N, a, N);
    reuse_expect_handed_out(hand_outs, "cudaMalloc(B) on the second thread");
    if (!ordered)
        reuse_drain_unheld(); /* under reuse:ordered every stream now waits for the reader */
    reuse_fill(NULL, false);
    void *c = NULL;
    SIM_OK(cudaMalloc(&c, N));
    reuse_track(c);
    reuse_expect_disjoint_if_fenced(c, N, a, N);
    SIM_OK(cudaMemsetAsync(c, OVERWRITE, N, LEGACY));
    struct queued_write w[2] = {{r.b, N, r.written}};
    write_queued(&w[1], c, N, LEGACY);
    if (!ordered)
        SIM_OK(simtest_stream_wait_idle(LEGACY));
    const void *freed = a;
    const size_t fn = N;
    expect_writes_held(w, 2, &freed, &fn, &g, 1, "before the reader's gate opened");
    reuse_open_all();
    SIM_OK(simtest_stream_wait_idle(rf.nb));
    bool ok = reuse_data_is(rf.dst, N, seed, "the reader of A");
    const char *what = "a second thread frees, reallocates, overwrites on its per-thread stream";
    reuse_verdict_hazard(a, N, ok, what);
    expect_writes_landed(w, 2, what);
    simtest_thread_finish(t);
    reuse_free(r.b);
    reuse_free(c);
}

/* Another thread's cudaDeviceSynchronize, begun before the reader was
 * queued and returning after A was freed, has not waited for that reader:
 * it must not make A reusable.  Whether that thread has begun its
 * synchronisation cannot be observed, so it is given a moment (a sleep);
 * a try where it began too late is detected (it then waits for the
 * reader's gate too) and made again with a longer moment: a late start
 * never passes or fails the test, at worst it skips. */
struct syncer {
    atomic_bool started;
    atomic_bool returned;
    cudaError_t rc;
};

static void *device_sync_main(void *arg)
{
    struct syncer *sy = arg;
    atomic_store(&sy->started, true);
    sy->rc = cudaDeviceSynchronize();
    atomic_store(&sy->returned, true);
    return NULL;
}

static bool wait_flag(atomic_bool *flag)
{
    for (int ms = 0; ms < SIMTEST_WAIT_MS; ms++) {
        if (atomic_load(flag))
            return true;
        simtest_sleep_ms(1);
    }
    return atomic_load(flag);
}

/* One try: nb3's gate 1 holds another thread's cudaDeviceSynchronize;
 * after `settle_ms` (its chance to take its snapshot of the streams), nb:
 * [gate 2] reads A and A is freed; gate 1 opens.  Returns whether that
 * synchronisation returned with gate 2 still closed (it began before the
 * read); if not, it began too late and waited for gate 2 as well, which
 * this opens. */
static bool free_during_other_threads_sync(void *a, size_t n, unsigned settle_ms)
{
    simtest_gate_t *g1 = reuse_gate_on(rf.nb3);
    struct syncer sy = {false, false, cudaErrorUnknown};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, device_sync_main, &sy), 0);
    assert_true(wait_flag(&sy.started));
    simtest_sleep_ms(settle_ms);
    reuse_gate_on(rf.nb);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, n, cudaMemcpyDeviceToHost, rf.nb));
    reuse_free(a);
    simtest_gate_open(g1);
    bool window = wait_flag(&sy.returned);
    if (!window)
        reuse_open_all();
    pthread_join(th, NULL);
    SIM_OK(sy.rc);
    return window;
}

static void test_device_synchronize_on_another_thread(void **state)
{
    (void)state;
    enum { N = 1 << 20, TRIES = 4 };
    unsigned seed = 1010;
    if (reuse_policy() == REUSE_SYNC) {
        skip(); /* every free synchronises: the window does not exist */
        return;
    }
    void *a = NULL;
    bool window = false;
    for (int i = 0; i < TRIES && !window; i++) {
        a = reuse_alloc_filled(N, seed);
        reuse_fill(NULL, false);
        window = free_during_other_threads_sync(a, N, SIMTEST_SETTLE_MS << i);
    }
    if (!window) {
        print_message("the other thread's synchronisation began too late %d times; nothing was tested\n", TRIES);
        skip();
        return;
    }
    void *b = NULL, *c = NULL;
    reuse_realloc_twice(a, N, N, write_memset, LEGACY, &b, &c);
    reuse_open_all();
    SIM_OK(simtest_stream_wait_idle(rf.nb));
    bool ok = reuse_data_is(rf.dst, N, seed, "the reader of A");
    reuse_verdict_hazard(a, N, ok, "cudaDeviceSynchronize on another thread, begun before the read");
    reuse_free(b);
    reuse_free(c);
}

/* ---- several non-blocking streams -------------------------------------- */

/* Readers on nb, nb2, nb3, each behind its gate; all three blocks freed,
 * reallocated and overwritten on the legacy stream; then the first reader
 * finishes, and each block is allocated and overwritten once more.  What
 * must hold throughout is that no write reaches a block's bytes before its
 * reader is done.  Under the rules that keep the blocks from the new
 * owners meanwhile, the writes complete while the readers are held, and
 * after the first reader the other two still keep the fence, and their
 * blocks, pending.  reuse:ordered hands the blocks out at once, the device
 * ordered after the fence: the writes are queued, not waited for, and a
 * write to a block whose reader is held (all three, then the last two)
 * must still be pending. */
static void test_several_nonblocking_streams(void **state)
{
    (void)state;
    enum { K = 3 };
    bool ordered = reuse_policy() == REUSE_ORDERED;
    const size_t n[K] = {256 << 10, 1 << 20, 4 << 20};
    cudaStream_t s[K] = {rf.nb, rf.nb2, rf.nb3};
    unsigned char *dst[K] = {rf.dst, rf.dst + (1 << 20), rf.dst + (2 << 20)};
    simtest_gate_t *g[K];
    cudaEvent_t read[K]; /* recorded after each reader */
    void *a[K], *b[K], *c[K];
    struct queued_write w[2 * K]; /* to b, then to c */
    for (int i = 0; i < K; i++)
        a[i] = reuse_alloc_filled(n[i], 2000 + i);
    reuse_fill(NULL, false);
    for (int i = 0; i < K; i++) {
        g[i] = reuse_gate_on(s[i]);
        SIM_OK(cudaMemcpyAsync(dst[i], a[i], n[i], cudaMemcpyDeviceToHost, s[i]));
        SIM_OK(cudaEventCreateWithFlags(&read[i], cudaEventDisableTiming));
        SIM_OK(cudaEventRecord(read[i], s[i]));
    }
    for (int i = 0; i < K; i++)
        reuse_free(a[i]);
    int64_t hand_outs = reuse_hand_outs();
    for (int i = 0; i < K; i++) {
        SIM_OK(cudaMalloc(&b[i], n[i]));
        reuse_track(b[i]);
        for (int j = 0; j < K; j++)
            reuse_expect_disjoint_if_fenced(b[i], n[i], a[j], n[j]);
        reuse_expect_disjoint(b[i], n[i], a[i], n[i]);
        SIM_OK(cudaMemsetAsync(b[i], OVERWRITE, n[i], LEGACY));
        write_queued(&w[i], b[i], n[i], LEGACY);
    }
    reuse_expect_handed_out(hand_outs, "cudaMalloc(B)");
    if (!ordered)
        SIM_OK(simtest_stream_wait_idle(LEGACY));
    const void *freed[K] = {a[0], a[1], a[2]};
    expect_writes_held(w, K, freed, n, g, K, "with the three readers held");

    /* the first reader done (under reuse:ordered its stream now waits for
     * the other readers: the reader's event tells), everything else
     * drained */
    simtest_gate_open(g[0]);
    SIM_OK(ordered ? simtest_event_wait_done(read[0]) : simtest_stream_wait_idle(s[0]));
    if (!ordered)
        SIM_OK(simtest_stream_wait_idle(LEGACY));
    for (int i = 0; i < K; i++) {
        reuse_fill(NULL, false);
        SIM_OK(cudaMalloc(&c[i], n[i]));
        reuse_track(c[i]);
        for (int j = 1; j < K; j++)
            reuse_expect_disjoint_if_fenced(c[i], n[i], a[j], n[j]);
        SIM_OK(cudaMemsetAsync(c[i], OVERWRITE, n[i], LEGACY));
        write_queued(&w[K + i], c[i], n[i], LEGACY);
    }
    if (!ordered)
        SIM_OK(simtest_stream_wait_idle(LEGACY));
    expect_writes_held(w, 2 * K, freed, n, g, K, "with the first reader done and the other two held");

    reuse_open_all();
    bool ok = true;
    for (int i = 0; i < K; i++) {
        SIM_OK(simtest_stream_wait_idle(s[i]));
        ok &= reuse_data_is(dst[i], n[i], 2000 + i, "a reader");
        SIM_OK(cudaEventDestroy(read[i]));
    }
    const char *what = "readers on three non-blocking streams";
    reuse_verdict_hazard_n(freed, n, K, ok, what);
    expect_writes_landed(w, 2 * K, what);
    for (int i = 0; i < K; i++) {
        reuse_free(b[i]);
        reuse_free(c[i]);
    }
}

/* The reader's stream was destroyed before the free: its work still runs
 * (cudaStreamDestroy returns at once), and a real cudaFree would wait for
 * it. */
static void test_reader_on_destroyed_stream(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    unsigned seed = 1005;
    cudaStream_t tmp;
    SIM_OK(cudaStreamCreateWithFlags(&tmp, cudaStreamNonBlocking));
    void *a = reuse_alloc_filled(N, seed);
    reuse_fill(NULL, false);
    reuse_gate_on(tmp);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, N, cudaMemcpyDeviceToHost, tmp));
    SIM_OK(cudaStreamDestroy(tmp));
    reuse_free(a);
    void *b = NULL, *c = NULL;
    reuse_realloc_twice(a, N, N, write_memset, LEGACY, &b, &c);
    reuse_open_all();
    SIM_OK(cudaDeviceSynchronize());
    bool ok = reuse_data_is(rf.dst, N, seed, "the reader of A");
    reuse_verdict_hazard(a, N, ok, "reader on a stream destroyed before the free");
    reuse_free(b);
    reuse_free(c);
}

/* ---- stream-ordered frees ----------------------------------------------- */

/* A stream-ordered buffer written on s with the pattern. */
static void *alloc_async_filled(size_t n, unsigned seed, cudaStream_t s)
{
    void *p = NULL;
    SIM_OK(cudaMallocAsync(&p, n, s));
    reuse_track(p);
    simtest_fill(rf.pageable, n, seed);
    SIM_OK(cudaMemcpyAsync(p, rf.pageable, n, cudaMemcpyHostToDevice, s));
    return p;
}

/* How a stream-ordered hazard reallocates: cudaMallocAsync on `on`, or
 * cudaMalloc when async is false. */
struct realloc_how {
    bool async;
    cudaStream_t on;
    /* `on` is the freed block's own stream: its free on the reader's stream
     * may serve it at once, `on` made to wait for the reader on the device
     * (core/cross.h), so the writer cannot go idle while the reader is held */
    bool own;
};

static void *realloc_one(const struct realloc_how *how, size_t n)
{
    void *p = NULL;
    SIM_OK(how->async ? cudaMallocAsync(&p, n, how->on) : cudaMalloc(&p, n));
    reuse_track(p);
    return p;
}

/* The end of every stream-ordered hazard: B allocated and overwritten on
 * `writer`; every unheld stream drained, the cache filled again, C the
 * same; then the reader released and checked. */
static void finish_async_hazard(void *a, size_t n, unsigned seed, const struct realloc_how *how, cudaStream_t writer,
                                cudaStream_t reader, const char *what)
{
    void *bc[2];
    int count = 0;
    for (int i = 0; i < 2; i++) {
        if (i == 1) {
            reuse_drain_unheld();
            reuse_fill(how->on, how->async);
        }
        bc[count++] = realloc_one(how, n);
        bool waits = how->own && reuse_overlap(bc[i], n, a, n);
        if (!waits)
            reuse_expect_disjoint_if_fenced(bc[i], n, a, n);
        SIM_OK(cudaMemsetAsync(bc[i], OVERWRITE, n, writer));
        if (waits)
            break; /* the writer runs once the reader has: the verdict below */
        SIM_OK(simtest_stream_wait_idle(writer));
    }
    reuse_open_all();
    SIM_OK(simtest_stream_wait_idle(reader));
    SIM_OK(simtest_stream_wait_idle(writer));
    reuse_verdict_hazard_maybe(a, n, reuse_data_is(rf.dst, n, seed, "the reader of A"), what);
    for (int i = 0; i < count; i++) {
        if (how->async)
            reuse_free_async(bc[i], writer);
        else
            reuse_free(bc[i]);
    }
}

/* cudaFreeAsync(A, nb) after nb's read; B = cudaMallocAsync on nb2. */
static void test_free_async_then_malloc_async_on_other_stream(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    unsigned seed = 1006;
    void *a = alloc_async_filled(N, seed, rf.nb);
    reuse_fill(rf.nb, true);
    reuse_gate_on(rf.nb);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, N, cudaMemcpyDeviceToHost, rf.nb));
    reuse_free_async(a, rf.nb);
    struct realloc_how how = {true, rf.nb2, false};
    finish_async_hazard(a, N, seed, &how, rf.nb2, rf.nb, "cudaFreeAsync on nb, cudaMallocAsync on nb2");
}

/* cudaMalloc memory freed with cudaFreeAsync on the stream that read it;
 * B = cudaMalloc, overwritten on the legacy stream.  (cucache's design
 * covers this: the free waits for an event on that stream.) */
static void test_free_async_of_malloc_block(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    unsigned seed = 1007;
    void *a = reuse_alloc_filled(N, seed);
    reuse_fill(NULL, false);
    reuse_gate_on(rf.nb);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, N, cudaMemcpyDeviceToHost, rf.nb));
    reuse_free_async(a, rf.nb);
    struct realloc_how how = {false, NULL, false};
    finish_async_hazard(a, N, seed, &how, LEGACY, rf.nb, "cudaMalloc block freed by cudaFreeAsync on nb");
}

/* A stream-ordered block of nb2, read on nb (ordered by an event) and freed
 * there; B = cudaMallocAsync on nb2, the block's own stream. */
static void test_free_async_on_reader_stream_realloc_on_owner(void **state)
{
    (void)state;
    enum { N = 4 << 20 };
    unsigned seed = 1008;
    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    void *a = alloc_async_filled(N, seed, rf.nb2);
    reuse_fill(rf.nb2, true);
    SIM_OK(cudaEventRecord(ev, rf.nb2));
    SIM_OK(cudaStreamWaitEvent(rf.nb, ev, 0));
    reuse_gate_on(rf.nb);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, N, cudaMemcpyDeviceToHost, rf.nb));
    reuse_free_async(a, rf.nb);
    struct realloc_how how = {true, rf.nb2, true};
    finish_async_hazard(a, N, seed, &how, rf.nb2, rf.nb,
                        "nb2's block freed by cudaFreeAsync on nb, reallocated on nb2");
    SIM_OK(cudaEventDestroy(ev));
}

/* The same through the _ptsz entry points: allocated, read and freed on the
 * per-thread stream; B = cudaMallocAsync on nb2. */
static void test_free_async_ptsz(void **state)
{
    (void)state;
    enum { N = 256 << 10 };
    unsigned seed = 1009;
    void *a = NULL;
    SIM_OK(cudaMallocAsync_ptsz(&a, N, 0));
    reuse_track(a);
    simtest_fill(rf.pageable, N, seed);
    SIM_OK(cudaMemcpyAsync_ptsz(a, rf.pageable, N, cudaMemcpyHostToDevice, 0));
    reuse_fill(cudaStreamPerThread, true);
    simtest_gate_t *g = reuse_gate();
    reuse_hold(cudaStreamPerThread);
    simtest_gate_block_ptsz(g, 0);
    SIM_OK(cudaMemcpyAsync_ptsz(rf.dst, a, N, cudaMemcpyDeviceToHost, 0));
    (void)reuse_arm_openers();
    reuse_untrack(a);
    SIM_OK(cudaFreeAsync_ptsz(a, 0));
    struct realloc_how how = {true, rf.nb2, false};
    finish_async_hazard(a, N, seed, &how, rf.nb2, cudaStreamPerThread,
                        "cudaMallocAsync_ptsz/cudaFreeAsync_ptsz on the per-thread stream, cudaMallocAsync on nb2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        REUSETEST(test_overwrite_on_per_thread_stream),
        REUSETEST(test_overwrite_through_ptsz_entry_points),
        REUSETEST(test_reader_on_other_threads_per_thread_stream),
        REUSETEST(test_reader_on_blocking_stream),
        REUSETEST(test_second_thread_frees_and_reallocates),
        REUSETEST(test_device_synchronize_on_another_thread),
        REUSETEST(test_several_nonblocking_streams),
        REUSETEST(test_reader_on_destroyed_stream),
        REUSETEST(test_free_async_then_malloc_async_on_other_stream),
        REUSETEST(test_free_async_of_malloc_block),
        REUSETEST(test_free_async_on_reader_stream_realloc_on_owner),
        REUSETEST(test_free_async_ptsz),
    };
    return REUSE_RUN("reuse.variants", tests);
}
