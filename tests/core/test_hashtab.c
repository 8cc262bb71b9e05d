/*
 * Proves that core/hashtab keeps exactly the contents of a reference model
 * through seeded random inserts, replacements and deletes over many keys
 * (key 0 and UINT64_MAX included), checking after each step that every key
 * is reachable from its home slot without crossing an empty slot, that no
 * key is held twice and that the load stays at most one half; that
 * deleting from the middle, the start and the end of probe runs (one that
 * wraps round the array's end included) leaves every other key found and
 * no tombstone behind (a million inserts and deletes with few keys live
 * never grow the table); that a table grows by doubling and that
 * ht_reserve avoids the growth; and that the zeroed table is empty.
 *
 * Seen to fail: with the backward shift in ht_del removed (the hole left
 * empty), or with its condition inverted, four tests fail (ht_check finds
 * a key cut off from its home slot, or a key is no longer found).
 *
 * The random test prints its seed; HASHTAB_SEED=<n> replays a run.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "hashtab.h"

static uint64_t seed; /* the run's seed (HASHTAB_SEED or clock) */
static uint64_t rng;  /* splitmix64 state */

static uint64_t rng_next(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Re-derives the table's invariants: capacity a power of two and shift to
 * match, the load at most one half, used equal to the keys in the slots,
 * each key once and reachable from its home slot (no empty slot between). */
static void ht_check(const ht_t *t)
{
    if (!t->cap) {
        assert_null(t->slots);
        assert_int_equal(t->used, 0);
        return;
    }
    assert_true(t->cap >= HT_MIN_CAP && (t->cap & (t->cap - 1)) == 0);
    assert_int_equal((size_t)1 << (64 - t->shift), t->cap);
    assert_true(t->used * 2 <= t->cap);
    size_t used = 0, mask = t->cap - 1;
    for (size_t i = 0; i < t->cap; i++) {
        uint64_t k = t->slots[i].key;
        if (!k)
            continue;
        used++;
        for (size_t j = ht_home(t, k); j != i; j = (j + 1) & mask) {
            assert_true(t->slots[j].key != 0); /* an empty slot would end the probe before i */
            assert_true(t->slots[j].key != k);
        }
        assert_int_equal(ht_index(t, k), i);
    }
    assert_int_equal(used, t->used);
}

/* ------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------- */

static void test_empty(void **state)
{
    (void)state;
    ht_t t = {0};
    uint64_t v = 7;
    assert_null(ht_find(&t, 1));
    assert_null(ht_find(&t, 0));
    assert_false(ht_get(&t, 5, &v));
    assert_int_equal(v, 7);
    assert_false(ht_del(&t, 5, &v));
    assert_false(ht_del(&t, 0, NULL));
    assert_int_equal(ht_count(&t), 0);
    ht_check(&t);
    ht_fini(&t);
    ht_fini(&t); /* an empty table again: fini twice is harmless */
}

static void test_put_get_replace(void **state)
{
    (void)state;
    ht_t t = {0};
    static const uint64_t keys[] = {0, 1, 2, UINT64_MAX, (uint64_t)1 << 63, 0x7f0000001000ull};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        assert_true(ht_put(&t, keys[i], 100 + i));
    assert_int_equal(ht_count(&t), 6);
    ht_check(&t);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        uint64_t v = 0;
        assert_true(ht_get(&t, keys[i], &v));
        assert_int_equal(v, 100 + i);
        assert_non_null(ht_find(&t, keys[i]));
        assert_int_equal(*ht_find(&t, keys[i]), 100 + i);
    }
    /* replace: no new key */
    assert_true(ht_put(&t, UINT64_MAX, 9));
    assert_true(ht_put(&t, 0, 8));
    assert_int_equal(ht_count(&t), 6);
    *ht_find(&t, 2) = 77; /* the value in place */
    uint64_t v;
    assert_true(ht_get(&t, UINT64_MAX, &v) && v == 9);
    assert_true(ht_get(&t, 0, &v) && v == 8);
    assert_true(ht_get(&t, 2, &v) && v == 77);
    assert_true(ht_get(&t, 1, NULL));
    assert_false(ht_get(&t, 3, NULL));
    /* delete hands the value back */
    assert_true(ht_del(&t, 0, &v) && v == 8);
    assert_false(ht_get(&t, 0, NULL));
    assert_true(ht_del(&t, UINT64_MAX, &v) && v == 9);
    assert_false(ht_del(&t, UINT64_MAX, &v));
    assert_int_equal(ht_count(&t), 4);
    ht_check(&t);
    ht_fini(&t);
    assert_int_equal(ht_count(&t), 0);
}

/* Keys whose home slot in a table of `cap` slots is `home`. */
static void keys_with_home(size_t cap, size_t home, uint64_t *out, size_t n, uint64_t from)
{
    ht_t probe = {.cap = cap, .shift = 64};
    for (size_t c = cap; c > 1; c >>= 1)
        probe.shift--;
    for (uint64_t k = from; n; k++)
        if (ht_home(&probe, k) == home)
            *out++ = k, n--;
}

/* A run of keys of one home, then keys of the next home behind them, at
 * the array's end so that the run wraps to slot 0: deleting each position
 * leaves the others found and the run without holes. */
static void test_delete_runs(void **state)
{
    (void)state;
    enum { N = 5 };
    for (size_t home = HT_MIN_CAP - 3; home < HT_MIN_CAP + 1; home++) {
        for (size_t victim = 0; victim < N + 2; victim++) {
            ht_t t = {0};
            assert_true(ht_reserve(&t, 1)); /* HT_MIN_CAP slots */
            assert_int_equal(t.cap, HT_MIN_CAP);
            uint64_t k[N + 2];
            keys_with_home(t.cap, home % t.cap, k, N, 1);
            keys_with_home(t.cap, (home + 1) % t.cap, k + N, 2, 1);
            for (size_t i = 0; i < N + 2; i++)
                assert_true(ht_put(&t, k[i], k[i] * 3));
            assert_int_equal(t.cap, HT_MIN_CAP); /* 7 keys: no growth */
            ht_check(&t);
            uint64_t v;
            assert_true(ht_del(&t, k[victim], &v));
            assert_int_equal(v, k[victim] * 3);
            ht_check(&t);
            for (size_t i = 0; i < N + 2; i++) {
                assert_int_equal(ht_get(&t, k[i], &v), i != victim);
                if (i != victim)
                    assert_int_equal(v, k[i] * 3);
            }
            /* the run holds no hole: the slots taken are contiguous from home */
            size_t taken = 0;
            for (size_t s = home % t.cap; t.slots[s].key; s = (s + 1) & (t.cap - 1))
                taken++;
            assert_int_equal(taken, N + 1);
            ht_fini(&t);
        }
    }
}

/* Deletes leave no tombstones: a million inserts and deletes of distinct
 * keys with at most eight live never grow the table past its first size. */
static void test_churn_no_growth(void **state)
{
    (void)state;
    ht_t t = {0};
    uint64_t live[8] = {0};
    for (uint64_t i = 1; i <= 1000000; i++) {
        size_t s = i % 8;
        if (live[s])
            assert_true(ht_del(&t, live[s], NULL));
        live[s] = i * 0x10000; /* aligned, like addresses */
        assert_true(ht_put(&t, live[s], i));
    }
    assert_int_equal(t.cap, HT_MIN_CAP);
    assert_int_equal(ht_count(&t), 8);
    ht_check(&t);
    assert_null(ht_find(&t, 12345)); /* a missing key's probe ends */
    ht_fini(&t);
}

/* Growth by doubling over many sequential and aligned keys; ht_reserve
 * ahead of the inserts keeps the slots where they are. */
static void test_growth_and_reserve(void **state)
{
    (void)state;
    ht_t t = {0};
    size_t grows = 0, cap = 0;
    for (uint64_t i = 1; i <= 200000; i++) {
        assert_true(ht_put(&t, i, i));
        if (t.cap != cap) {
            assert_true(cap == 0 || t.cap == cap * 2);
            cap = t.cap, grows++;
        }
    }
    assert_true(grows <= 16);
    assert_int_equal(ht_count(&t), 200000);
    ht_check(&t);
    for (uint64_t i = 1; i <= 200000; i++) {
        uint64_t v;
        assert_true(ht_get(&t, i, &v) && v == i);
    }
    assert_false(ht_get(&t, 200001, NULL));
    ht_fini(&t);

    assert_true(ht_reserve(&t, 5000));
    assert_true(t.cap >= 10000);
    ht_slot_t *slots = t.slots;
    for (uint64_t i = 0; i < 5000; i++)
        assert_true(ht_put(&t, (i + 1) << 21, i));
    assert_ptr_equal(t.slots, slots);
    assert_true(ht_reserve(&t, 10)); /* already room: nothing moves */
    assert_ptr_equal(t.slots, slots);
    ht_check(&t);
    ht_fini(&t);
}

/* Seeded random puts, replacements, deletes and lookups over a universe of
 * keys (0 and UINT64_MAX among them) against a reference. */
static void test_random(void **state)
{
    (void)state;
    enum { KEYS = 3000, OPS = 300000 };
    static uint64_t key[KEYS], val[KEYS];
    static bool in[KEYS];
    rng = seed;
    for (size_t i = 0; i < KEYS; i++) {
        /* a mix of random, small and clustered keys */
        uint64_t r = rng_next();
        key[i] = i % 3 == 0 ? r : i % 3 == 1 ? i : (r & ~(uint64_t)0xFFFFF) | 0x200;
        in[i] = false;
    }
    key[0] = 0, key[1] = UINT64_MAX;
    for (size_t i = 0; i < KEYS; i++) /* the universe's keys distinct */
        for (size_t j = 0; j < i; j++)
            if (key[j] == key[i])
                key[i] = rng_next() | 1, j = (size_t)-1;
    ht_t t = {0};
    size_t n = 0;
    for (size_t op = 0; op < OPS; op++) {
        size_t i = (size_t)(rng_next() % KEYS);
        uint64_t v;
        switch (rng_next() % 4) {
        case 0:
        case 1: /* put, or replace */
            val[i] = rng_next();
            n += !in[i];
            in[i] = true;
            assert_true(ht_put(&t, key[i], val[i]));
            break;
        case 2:
            assert_int_equal(ht_del(&t, key[i], &v), in[i]);
            if (in[i]) {
                assert_int_equal(v, val[i]);
                n--;
            }
            in[i] = false;
            break;
        default:
            assert_int_equal(ht_get(&t, key[i], &v), in[i]);
            if (in[i])
                assert_int_equal(v, val[i]);
            break;
        }
        assert_int_equal(ht_count(&t), n);
        if (op % 5000 == 0) {
            ht_check(&t);
            for (size_t k = 0; k < KEYS; k++)
                assert_int_equal(ht_get(&t, key[k], NULL), in[k]);
        }
    }
    ht_check(&t);
    for (size_t k = 0; k < KEYS; k++) {
        uint64_t v;
        assert_int_equal(ht_get(&t, key[k], &v), in[k]);
        if (in[k])
            assert_int_equal(v, val[k]);
    }
    ht_fini(&t);
}

int main(void)
{
    const char *env = getenv("HASHTAB_SEED");
    seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_hashtab: seed %" PRIu64 " (replay: HASHTAB_SEED=%" PRIu64 ")\n", seed, seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_put_get_replace),
        cmocka_unit_test(test_delete_runs),
        cmocka_unit_test(test_churn_no_growth),
        cmocka_unit_test(test_growth_and_reserve),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
