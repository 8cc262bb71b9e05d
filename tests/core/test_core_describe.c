/*
 * Proves what the core tells the interposer about memory, for the calls
 * that describe it: core_describe says whether an address is inside a live
 * allocation (and which: base, requested and rounded size, stream, id),
 * inside a segment but in no live allocation (freed, pending, cached, or a
 * block's rounding), or foreign; allocation ids are unique, tagged, and
 * never reused, also for a new allocation at a freed one's address;
 * core_hold keeps a freed block from reuse whatever the program
 * synchronises until the backend releases the hold, then behind a fence;
 * core_usage's releasable bytes are exactly the whole free segments the
 * retry ladder would give back (none of a live private pool, none while
 * capturing); core_fit's answer is a request the allocator serves on a
 * device with exactly that room, under several rounding configurations, and
 * a larger one is not.
 *
 * Seen to fail: with pend_held fencing a held block at once (the hold
 * ignored), test_hold_survives_synchronisation finds nothing held; with
 * poll_held not closing a fence, test_hold_released_then_fenced records no
 * fence and the block stays pending.
 */
#include "coretest.h"

static void test_describe(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, GiB, NULL);
    f.m.auto_complete = false;
    uintptr_t p = fx_alloc(&f, 3000, 0);
    uintptr_t q = fx_alloc(&f, 5000, 7);
    core_ptr_info_t i;
    assert_int_equal(core_describe(f.d, p + 10, &i), CORE_WHERE_LIVE);
    assert_int_equal(i.base, p);
    assert_int_equal(i.requested, 3000);
    assert_int_equal(i.size, 3072);
    assert_int_equal(i.stream, 0);
    assert_true(i.id & CORE_ID_TAG);
    assert_int_equal(i.seg_size, 2 * MiB);
    assert_true(p >= i.seg_base && p < i.seg_base + i.seg_size);
    assert_int_equal(core_describe(f.d, p + 3000, &i), CORE_WHERE_DEAD); /* the block's rounding */
    assert_int_equal(core_describe(f.d, q, &i), CORE_WHERE_LIVE);
    assert_int_equal(i.stream, 7);
    assert_int_equal(core_describe(f.d, 0x1000, &i), CORE_WHERE_NONE);
    assert_int_equal(i.seg_base, 0);
    /* freed: pending behind its fence, then cached */
    fx_free(&f, p, CORE_FREE_FENCED, 0);
    assert_int_equal(core_describe(f.d, p, &i), CORE_WHERE_DEAD);
    assert_int_equal(i.base, 0);
    mem_backend_complete_all(&f.m);
    core_synchronized(f.d);
    assert_int_equal(core_describe(f.d, p + 100, &i), CORE_WHERE_DEAD);
    fx_free(&f, q, CORE_FREE_NOW, 7);
    fx_close(&f);
}

static void test_ids_never_reused(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, GiB, NULL);
    core_ptr_info_t i;
    uint64_t seen[64];
    for (int k = 0; k < 64; k++) {
        uintptr_t p = fx_alloc(&f, 4096, 0);
        assert_int_equal(core_describe(f.d, p, &i), CORE_WHERE_LIVE);
        for (int j = 0; j < k; j++)
            assert_true(seen[j] != i.id);
        seen[k] = i.id;
        fx_free(&f, p, CORE_FREE_NOW, 0); /* the same block, handed out again */
    }
    fx_close(&f);
}

static void test_hold_survives_synchronisation(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, GiB, NULL);
    uintptr_t p = fx_alloc(&f, 4 * MiB, 0);
    assert_int_equal(core_hold(f.d, p, 5), CORE_FREED);
    assert_int_equal(core_hold(f.d, 0x1000, 5), CORE_NOT_MINE);
    fx_free(&f, p, CORE_FREE_NOW, 0);
    core_usage_t u;
    core_usage(f.d, &u);
    assert_int_equal(u.held, 4 * MiB);
    assert_int_equal(u.pending, 4 * MiB);
    core_synchronized(f.d);
    core_poll(f.d);
    CHECK(f.d);
    uintptr_t again = fx_alloc(&f, 4 * MiB, 0);
    assert_true(again != p); /* not handed out while held */
    core_ptr_info_t i;
    assert_int_equal(core_describe(f.d, p, &i), CORE_WHERE_DEAD);
    fx_free(&f, again, CORE_FREE_NOW, 0);
    f.m.holds_over = 5; /* the other process closed it */
    fx_close(&f);
}

static void test_hold_released_then_fenced(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, GiB, NULL);
    f.m.auto_complete = false;
    uintptr_t p = fx_alloc(&f, 4 * MiB, 0);
    assert_int_equal(core_hold(f.d, p, 9), CORE_FREED);
    fx_free(&f, p, CORE_FREE_NOW, 0);
    f.m.holds_over = 9;
    core_poll(f.d); /* the hold is over: behind a fence now */
    CHECK(f.d);
    core_usage_t u;
    core_usage(f.d, &u);
    assert_int_equal(u.held, 0);
    assert_int_equal(u.pending, 4 * MiB);
    uint64_t records = f.m.n_fence;
    assert_true(records >= 1);
    mem_backend_complete_all(&f.m);
    core_poll(f.d);
    core_usage(f.d, &u);
    assert_int_equal(u.pending, 0);
    assert_int_equal(fx_alloc(&f, 4 * MiB, 0), p); /* reusable at last */
    fx_free(&f, p, CORE_FREE_NOW, 0);

    /* a hold already over when the block is freed: fenced at once */
    uintptr_t q = fx_alloc(&f, 4 * MiB, 0);
    assert_int_equal(core_hold(f.d, q, 3), CORE_FREED);
    fx_free(&f, q, CORE_FREE_NOW, 0);
    core_usage(f.d, &u);
    assert_int_equal(u.held, 0);
    assert_int_equal(u.pending, 4 * MiB);
    mem_backend_complete_all(&f.m);
    fx_close(&f);
}

static void test_releasable(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, GiB, NULL);
    uintptr_t a = fx_alloc(&f, 24 * MiB, 0); /* a segment of its own */
    uintptr_t b = fx_alloc(&f, 1000, 0);     /* a small segment, kept busy */
    uintptr_t c = fx_alloc(&f, 1000, 0);
    core_usage_t u;
    core_usage(f.d, &u);
    assert_int_equal(u.releasable, 0);
    fx_free(&f, a, CORE_FREE_NOW, 0);
    fx_free(&f, b, CORE_FREE_NOW, 0);
    core_usage(f.d, &u);
    assert_int_equal(u.releasable, 24 * MiB); /* the small segment still holds c */
    core_set_capturing(f.d, true);
    core_usage(f.d, &u);
    assert_int_equal(u.releasable, 0); /* nothing is released during a capture */
    core_set_capturing(f.d, false);
    /* a live private pool keeps its free segments */
    int pool = core_pool_create(f.d);
    assert_int_equal(core_pool_use(f.d, pool), 0);
    uintptr_t d = fx_alloc(&f, 12 * MiB, 0);
    assert_int_equal(core_pool_use(f.d, 0), 0);
    fx_free(&f, d, CORE_FREE_NOW, 0);
    core_usage(f.d, &u);
    assert_int_equal(u.releasable, 24 * MiB);
    assert_int_equal(core_pool_destroy(f.d, pool), 0);
    fx_free(&f, c, CORE_FREE_NOW, 0);
    core_usage(f.d, &u);
    assert_int_equal(u.releasable, 24 * MiB + 2 * MiB);
    core_empty_cache(f.d, -1);
    core_usage(f.d, &u);
    assert_int_equal(u.releasable, 0);
    assert_int_equal(u.reserved, 0);
    fx_close(&f);
}

/* core_fit(room): served on an empty device of `room` bytes; in the large
 * range (where the answer is exact) a request one segment step larger is
 * not. */
static void fit_case(const char *conf, size_t room)
{
    fx_t f;
    fx_open(&f, room, conf);
    size_t fit = core_fit(f.d, room);
    core_oom_t oom;
    uintptr_t p = fit ? core_malloc(f.d, fit, 0, &oom) : 1;
    if (!p)
        fail_msg("%s: core_fit(%zu) = %zu, which fails", conf ? conf : "defaults", room, fit);
    if (fit)
        fx_free(&f, p, CORE_FREE_NOW, 0);
    core_empty_cache(f.d, -1);
    if (fit >= 10 * MiB) {
        uintptr_t q = core_malloc(f.d, fit + 2 * MiB, 0, NULL);
        if (q)
            fail_msg("%s: core_fit(%zu) = %zu, but %zu is served too", conf ? conf : "defaults", room, fit,
                     fit + 2 * MiB);
    }
    fx_close(&f);
}

static void test_fit(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, GiB, NULL);
    assert_int_equal(core_fit(f.d, 100 * MiB), 100 * MiB);
    assert_int_equal(core_fit(f.d, 101 * MiB), 100 * MiB);
    assert_int_equal(core_fit(f.d, 20 * MiB), 20 * MiB);
    assert_int_equal(core_fit(f.d, 8 * MiB), MiB); /* 1-10 MiB requests take 20 MiB segments */
    assert_int_equal(core_fit(f.d, MiB), 0);       /* even a small one takes a 2 MiB segment */
    fx_close(&f);
    fx_open(&f, 4 * GiB, "roundup_power2_divisions:4");
    size_t fit = core_fit(f.d, 3 * GiB + 200 * MiB);
    assert_int_equal(fit, 3 * GiB); /* 3.2 GiB would round to 3.5 GiB */
    fx_close(&f);
    static const char *const confs[] = {NULL, "roundup_power2_divisions:4", "max_split_size_mb:64",
                                        "roundup_power2_divisions:[1:2,256:8,>:16]"};
    static const size_t rooms[] = {2 * MiB, 9 * MiB, 20 * MiB, 46 * MiB + 512 * KiB, 1000 * MiB};
    for (size_t i = 0; i < sizeof confs / sizeof confs[0]; i++)
        for (size_t j = 0; j < sizeof rooms / sizeof rooms[0]; j++)
            fit_case(confs[i], rooms[j]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_ids_never_reused),
        cmocka_unit_test(test_hold_survives_synchronisation),
        cmocka_unit_test(test_hold_released_then_fenced),
        cmocka_unit_test(test_releasable),
        cmocka_unit_test(test_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
