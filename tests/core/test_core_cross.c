/*
 * Proves the core's cross-stream reuse (core/cross.h) on the in-process
 * backend with a stream_wait and a reuse_policy of the test's own: a block
 * of stream A freed on stream B serves A's next miss at once, A made to
 * wait for the free's event (one stream_wait, no host wait, no new
 * segment), and is released not idle (its pages need a synchronisation
 * before they go back); a hit takes it before cutting up a larger block;
 * only A's blocks of the request's pool are taken;
 * nothing is taken for key 0, during a capture, when the backend refuses
 * the wait, or when the program turned the internal-dependencies policy
 * off; with the opportunistic policy off a completed free serves only
 * after a synchronisation.  core_check runs after every step and the
 * counters are compared exactly.
 */
#include "coretest.h"

enum { A = 1, B = 2, C = 3 };

/* What the test's backend was asked, and what it answers. */
static struct {
    unsigned waits;        /* stream_wait calls */
    core_stream_t stream;  /* the last one's stream ... */
    uint64_t event;        /* ... and event */
    int answer;            /* what stream_wait returns */
    unsigned policy;       /* what reuse_policy returns */
    unsigned policy_asked; /* reuse_policy calls */
} be_log;

static int test_stream_wait(void *ctx, int device, core_stream_t stream, uint64_t event)
{
    (void)ctx, (void)device;
    be_log.waits++;
    be_log.stream = stream;
    be_log.event = event;
    return be_log.answer;
}

static unsigned test_reuse_policy(void *ctx, int device)
{
    (void)ctx, (void)device;
    be_log.policy_asked++;
    return be_log.policy;
}

/* fx_open with the test's stream_wait and reuse_policy; events complete
 * only when the test says. */
static void cx_open(fx_t *f, const char *conf_text)
{
    char err[256];
    memset(f, 0, sizeof *f);
    memset(&be_log, 0, sizeof be_log);
    be_log.answer = CORE_OK;
    be_log.policy = CORE_REUSE_ALL;
    mem_backend_init(&f->m, GiB);
    f->m.auto_complete = false;
    conf_defaults(&f->conf);
    if (conf_parse(&f->conf, conf_text, err, sizeof err) != 0)
        fail_msg("conf_parse(%s): %s", conf_text ? conf_text : "(null)", err);
    core_backend_t be = mem_backend_vtable(&f->m);
    be.stream_wait = test_stream_wait;
    be.reuse_policy = test_reuse_policy;
    f->d = core_dev_new(&be, 0, &f->conf);
    assert_non_null(f->d);
    core_set_history(f->d, 1 << 16);
    assert_int_equal(core_pool_use(f->d, 0), 0);
    CHECK(f->d);
}

static size_t pending(fx_t *f)
{
    core_usage_t u;
    core_usage(f->d, &u);
    return u.pending;
}

/* A's block freed on B serves A's next miss at once: one wait of A on the
 * free's event, no host wait, no segment, exact counters. */
static void test_cross_reuse_waits_on_device(void **state)
{
    (void)state;
    fx_t f;
    cx_open(&f, NULL);
    uintptr_t p = fx_alloc(&f, 30 * MiB, A);
    fx_free(&f, p, CORE_FREE_AFTER_STREAM, B);
    assert_int_equal(f.m.n_record, 1);
    uint64_t ev = f.m.next_event;
    assert_int_equal(pending(&f), 30 * MiB);
    uintptr_t q = fx_alloc(&f, 30 * MiB, A);
    assert_int_equal(q, p);
    assert_int_equal(be_log.waits, 1);
    assert_int_equal(be_log.stream, A);
    assert_int_equal(be_log.event, ev);
    assert_int_equal(f.m.n_wait, 0); /* the host never waited */
    assert_int_equal(f.m.n_sync, 0);
    assert_int_equal(pending(&f), 0);
    core_stats_t s = fx_stats(&f);
    assert_int_equal(s.num_fence_waits, 0);
    assert_int_equal(s.num_device_alloc, 1);
    assert_int_equal(s.num_cache_hits, 0); /* a miss, served by the slow path */
    assert_int_equal(s.allocation[CORE_POOL_ALL].current, 1);
    assert_int_equal(s.active[CORE_POOL_ALL].current, 1);
    assert_int_equal(s.active_bytes[CORE_POOL_ALL].current, 30 * MiB);
    assert_int_equal(s.allocated_bytes[CORE_POOL_ALL].current, 30 * MiB);
    assert_int_equal(s.reserved_bytes[CORE_POOL_ALL].peak, 30 * MiB);
    fx_free(&f, q, CORE_FREE_AFTER_STREAM, A);
    fx_close(&f);
}

/* Released by a device-side wait, a block is not idle: work queued before
 * the wait may still use it, so the pages of what the request left free go
 * back only after a synchronisation (expandable segments). */
static void test_cross_reuse_is_not_idle(void **state)
{
    (void)state;
    fx_t f;
    cx_open(&f, "expandable_segments:true");
    uintptr_t p = fx_alloc(&f, 4 * MiB, A);
    fx_free(&f, p, CORE_FREE_AFTER_STREAM, B);
    uintptr_t q = fx_alloc(&f, 2 * MiB, A); /* the 4 MiB block released, split */
    assert_int_equal(q, p);
    assert_int_equal(be_log.waits, 1);
    core_empty_cache(f.d, -1); /* the free half's page */
    CHECK(f.d);
    assert_int_equal(f.m.n_sync, 1);       /* synchronised before unmapping ... */
    assert_int_equal(f.m.n_unmap_busy, 0); /* ... so no page went while B's work could run */
    assert_int_equal(mem_backend_mapped(&f.m), 2 * MiB);
    fx_free(&f, q, CORE_FREE_AFTER_STREAM, A);
    fx_close(&f);
}

/* A hit that would cut up a larger free block of the stream takes the
 * stream's exact-fit free pending on another stream instead (a wait); once
 * a miss has read the internal-dependencies policy off, it splits. */
static void test_cross_hit_before_splitting(void **state)
{
    (void)state;
    fx_t f;
    cx_open(&f, NULL);
    uintptr_t big = fx_alloc(&f, 30 * MiB, A);
    uintptr_t p = fx_alloc(&f, 20 * MiB, A);
    fx_free(&f, big, CORE_FREE_NOW, A); /* free in A's bins */
    fx_free(&f, p, CORE_FREE_AFTER_STREAM, B);
    uintptr_t q = fx_alloc(&f, 20 * MiB, A);
    assert_int_equal(q, p);
    assert_int_equal(be_log.waits, 1);
    assert_int_equal(fx_stats(&f).num_cache_hits, 1);
    assert_int_equal(fx_stats(&f).num_device_alloc, 2);

    be_log.policy = CORE_REUSE_ALL & ~(unsigned)CORE_REUSE_INTERNAL_DEPS;
    fx_free(&f, q, CORE_FREE_AFTER_STREAM, B);
    uintptr_t m = fx_alloc(&f, 40 * MiB, A); /* a miss reads the policy */
    assert_true(be_log.policy_asked > 0);
    uintptr_t r = fx_alloc(&f, 20 * MiB, A);
    assert_int_equal(r, big); /* split from the 30 MiB block */
    assert_int_equal(be_log.waits, 1);
    assert_int_equal(pending(&f), 20 * MiB);
    fx_free(&f, m, CORE_FREE_NOW, A);
    fx_free(&f, r, CORE_FREE_NOW, A);
    fx_close(&f);
}

/* Only the allocating stream's blocks of the request's pool are taken:
 * C's block, and A's small block for a large request, stay pending. */
static void test_cross_takes_own_stream_and_pool(void **state)
{
    (void)state;
    fx_t f;
    cx_open(&f, NULL);
    uintptr_t a = fx_alloc(&f, 30 * MiB, A);
    uintptr_t small = fx_alloc(&f, 4096, A);
    uintptr_t c = fx_alloc(&f, 30 * MiB, C);
    fx_free(&f, a, CORE_FREE_AFTER_STREAM, B);
    fx_free(&f, small, CORE_FREE_AFTER_STREAM, B);
    fx_free(&f, c, CORE_FREE_AFTER_STREAM, B);
    uintptr_t q = fx_alloc(&f, 30 * MiB, A);
    assert_int_equal(q, a);
    assert_int_equal(be_log.waits, 1);
    assert_int_equal(be_log.stream, A);
    assert_int_equal(pending(&f), 30 * MiB + 4096); /* C's block and the small one */
    fx_free(&f, q, CORE_FREE_AFTER_STREAM, A);
    fx_close(&f);
}

/* Nothing is taken with a wait for key 0 (no stream to make wait), during
 * a capture, or when the backend refuses the wait: the cache grows and
 * the free stays pending. */
static void test_cross_no_wait_cases(void **state)
{
    (void)state;
    fx_t f;
    cx_open(&f, NULL);
    uintptr_t z = fx_alloc(&f, 30 * MiB, 0);
    fx_free(&f, z, CORE_FREE_AFTER_STREAM, B);
    uintptr_t z2 = fx_alloc(&f, 30 * MiB, 0);
    assert_int_not_equal(z2, z);
    assert_int_equal(be_log.waits, 0);

    uintptr_t big = fx_alloc(&f, 60 * MiB, A);
    fx_free(&f, big, CORE_FREE_NOW, A);
    uintptr_t p = fx_alloc(&f, 30 * MiB, A); /* a hit, split from big */
    assert_int_equal(p, big);
    fx_free(&f, p, CORE_FREE_AFTER_STREAM, B);
    core_set_capturing(f.d, true);
    uintptr_t q = fx_alloc(&f, 20 * MiB, A); /* a hit that splits the other half */
    core_set_capturing(f.d, false);
    assert_int_equal(q, big + 30 * MiB);
    assert_int_equal(be_log.waits, 0);

    be_log.answer = CORE_EFAIL;
    uintptr_t r = fx_alloc(&f, 30 * MiB, A); /* a miss: the wait asked for, refused */
    assert_int_not_equal(r, p);
    assert_int_equal(be_log.waits, 1);
    assert_int_equal(pending(&f), 2 * 30 * MiB);
    assert_int_equal(f.m.n_wait, 0);
    assert_int_equal(fx_stats(&f).num_device_alloc, 4);
    fx_free(&f, z2, CORE_FREE_NOW, 0);
    fx_free(&f, q, CORE_FREE_NOW, A);
    fx_free(&f, r, CORE_FREE_NOW, A);
    fx_close(&f);
}

/* The program's policies: without internal dependencies no wait is made;
 * without opportunistic reuse a completed free serves only once the
 * program synchronised (core_poll); with it, at once and idle. */
static void test_cross_policies(void **state)
{
    (void)state;
    fx_t f;
    cx_open(&f, NULL);
    be_log.policy = CORE_REUSE_ALL & ~(unsigned)CORE_REUSE_INTERNAL_DEPS;
    uintptr_t p = fx_alloc(&f, 30 * MiB, A);
    assert_int_equal(be_log.policy_asked, 0); /* asked only while frees wait on events */
    fx_free(&f, p, CORE_FREE_AFTER_STREAM, B);
    uintptr_t q = fx_alloc(&f, 30 * MiB, A);
    assert_int_not_equal(q, p);
    assert_int_equal(be_log.waits, 0);
    assert_true(be_log.policy_asked > 0);

    be_log.policy = CORE_REUSE_FOLLOW_EVENTS; /* neither opportunistic nor internal */
    mem_backend_complete_all(&f.m);
    uintptr_t r = fx_alloc(&f, 30 * MiB, A);
    assert_int_not_equal(r, p);
    assert_int_equal(pending(&f), 30 * MiB);
    core_poll(f.d); /* the program synchronised: observed, released */
    CHECK(f.d);
    assert_int_equal(pending(&f), 0);
    uintptr_t s = fx_alloc(&f, 30 * MiB, A);
    assert_int_equal(s, p);

    be_log.policy = CORE_REUSE_OPPORTUNISTIC;
    fx_free(&f, s, CORE_FREE_AFTER_STREAM, B);
    mem_backend_complete_all(&f.m);
    uintptr_t t = fx_alloc(&f, 30 * MiB, A);
    assert_int_equal(t, p);
    assert_int_equal(be_log.waits, 0);
    assert_int_equal(f.m.n_wait, 0);
    assert_int_equal(fx_stats(&f).num_device_alloc, 3);
    fx_free(&f, q, CORE_FREE_NOW, A);
    fx_free(&f, r, CORE_FREE_NOW, A);
    fx_free(&f, t, CORE_FREE_NOW, A);
    fx_close(&f);
}

/* The cross-stream loop: allocated on A, freed on B, 50 times; one
 * segment, no host wait, a device-side wait each time. */
static void test_cross_loop_never_waits_on_host(void **state)
{
    (void)state;
    fx_t f;
    cx_open(&f, NULL);
    uintptr_t first = fx_alloc(&f, 400 * MiB, A);
    uintptr_t p = first;
    for (int i = 0; i < 50; i++) {
        fx_free(&f, p, CORE_FREE_AFTER_STREAM, B);
        p = fx_alloc(&f, 400 * MiB, A);
        assert_int_equal(p, first);
    }
    assert_int_equal(be_log.waits, 50);
    assert_int_equal(f.m.n_wait, 0);
    core_stats_t s = fx_stats(&f);
    assert_int_equal(s.num_fence_waits, 0);
    assert_int_equal(s.num_device_alloc, 1);
    assert_int_equal(s.allocation[CORE_POOL_ALL].allocated, 51);
    assert_int_equal(s.allocation[CORE_POOL_ALL].freed, 50);
    fx_free(&f, p, CORE_FREE_NOW, A);
    fx_close(&f);
}

/* What the test's event_record_on was asked last. */
static struct {
    unsigned calls;
    core_stream_t on[4];
    size_t n;
} marker_log;

static int test_event_record_on(void *ctx, int device, const core_stream_t *streams, size_t n, uint64_t *event)
{
    marker_log.calls++;
    marker_log.n = n;
    for (size_t i = 0; i < n && i < 4; i++)
        marker_log.on[i] = streams[i];
    core_stream_t one = streams[0];
    return mem_backend_vtable(ctx).event_record(ctx, device, one, event);
}

/* cx_open with the test's event_record_on on a device of `capacity`. */
static void cx_open_marked(fx_t *f, size_t capacity, bool markers)
{
    memset(f, 0, sizeof *f);
    memset(&be_log, 0, sizeof be_log);
    memset(&marker_log, 0, sizeof marker_log);
    be_log.answer = CORE_OK;
    be_log.policy = CORE_REUSE_ALL;
    mem_backend_init(&f->m, capacity);
    f->m.auto_complete = false;
    conf_defaults(&f->conf);
    core_backend_t be = mem_backend_vtable(&f->m);
    be.stream_wait = test_stream_wait;
    be.reuse_policy = test_reuse_policy;
    be.event_record_on = markers ? test_event_record_on : NULL;
    f->d = core_dev_new(&be, 0, &f->conf);
    assert_non_null(f->d);
    assert_int_equal(core_pool_use(f->d, 0), 0);
    CHECK(f->d);
}

/* A block used on other streams (record_stream) freed on its own stream
 * waits behind one marker on the streams it was used on, not the fence;
 * while the device has room the stream does not wait for it (the cache
 * grows, as PyTorch's allocator does: the program's streams overlap); once
 * the device is full, the stream waits for it on the device, never the
 * host. */
static void test_cross_record_stream_marker(void **state)
{
    (void)state;
    fx_t f;
    cx_open_marked(&f, GiB, true);
    uintptr_t keep = fx_alloc(&f, 350 * MiB, A); /* live bytes: the frees are not most of the cache */
    uintptr_t p = fx_alloc(&f, 300 * MiB, A);
    assert_int_equal(core_record_stream(f.d, p, B), CORE_FREED);
    assert_int_equal(core_record_stream(f.d, p, C), CORE_FREED);
    fx_free(&f, p, CORE_FREE_AFTER_STREAM, A);
    assert_int_equal(marker_log.calls, 1);
    assert_int_equal(marker_log.n, 2); /* B and C, not A: its own stream orders its own work */
    assert_int_equal(marker_log.on[0], B);
    assert_int_equal(marker_log.on[1], C);
    assert_int_equal(f.m.n_fence, 0);
    assert_int_equal(pending(&f), 300 * MiB);
    /* room on the device: a new segment, no wait */
    uintptr_t q = fx_alloc(&f, 300 * MiB, A);
    assert_true(q != p);
    assert_int_equal(be_log.waits, 0);
    assert_int_equal(pending(&f), 300 * MiB);
    /* the device full (1 GiB: 950 MiB reserved, 200 asked): the marked free
     * serves, A waiting on the device */
    uintptr_t r = fx_alloc(&f, 200 * MiB, A);
    assert_int_equal(r, p);
    assert_int_equal(be_log.waits, 1);
    assert_int_equal(be_log.stream, A);
    assert_int_equal(f.m.n_wait, 0);
    assert_int_equal(f.m.n_sync, 0);
    core_stats_t s = fx_stats(&f);
    assert_int_equal(s.num_fence_waits, 0);
    assert_int_equal(s.num_device_alloc, 3);
    /* a plain free of a block used on other streams still waits for the fence */
    assert_int_equal(core_record_stream(f.d, q, B), CORE_FREED);
    fx_free(&f, q, CORE_FREE_FENCED, 0);
    assert_int_equal(marker_log.calls, 1);
    fx_free(&f, r, CORE_FREE_NOW, A);
    fx_free(&f, keep, CORE_FREE_NOW, A);
    fx_close(&f);
    /* a backend that cannot mark several streams: the fence */
    cx_open_marked(&f, GiB, false);
    p = fx_alloc(&f, 30 * MiB, A);
    assert_int_equal(core_record_stream(f.d, p, B), CORE_FREED);
    fx_free(&f, p, CORE_FREE_AFTER_STREAM, A);
    assert_int_equal(pending(&f), 30 * MiB);
    uintptr_t q2 = fx_alloc(&f, 30 * MiB, A); /* the fence, recorded now, handed out */
    assert_true(f.m.n_fence >= 1);
    fx_free(&f, q2, CORE_FREE_NOW, A);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cross_reuse_waits_on_device),
        cmocka_unit_test(test_cross_reuse_is_not_idle),
        cmocka_unit_test(test_cross_hit_before_splitting),
        cmocka_unit_test(test_cross_takes_own_stream_and_pool),
        cmocka_unit_test(test_cross_no_wait_cases),
        cmocka_unit_test(test_cross_policies),
        cmocka_unit_test(test_cross_loop_never_waits_on_host),
        cmocka_unit_test(test_cross_record_stream_marker),
    };
    return cmocka_run_group_tests_name("core_cross", tests, NULL, NULL);
}
