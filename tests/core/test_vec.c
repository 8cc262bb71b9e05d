/*
 * Proves that core/vec's vec_reserve gives room for at least the elements
 * asked for, keeps what the array held, grows by doubling (appending n
 * elements one by one reallocates O(log n) times), does nothing when there
 * is room already, and refuses a size that does not fit a size_t, leaving
 * the array and its capacity unchanged.
 *
 * Seen to fail: with vec_grow growing to exactly `need` instead of
 * doubling, test_append_doubles fails on the count of reallocations.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hostalloc.h"
#include "vec.h"

typedef struct big_s {
    uint64_t a[37]; /* larger than vec's first capacity in bytes */
} big_t;

static void test_append_doubles(void **state)
{
    (void)state;
    uint32_t *a = NULL;
    size_t n = 0, cap = 0, grows = 0;
    for (uint32_t i = 0; i < 1000000; i++) {
        size_t before = cap;
        assert_true(vec_reserve((void **)&a, &cap, n + 1, sizeof *a));
        assert_true(cap >= n + 1);
        if (cap != before) {
            assert_true(before == 0 || cap == before * 2);
            grows++;
        }
        a[n++] = i * 7u;
    }
    assert_true(grows <= 20);
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(a[i], i * 7u);
    hostalloc_free(a);
}

static void test_reserve_many_at_once(void **state)
{
    (void)state;
    big_t *b = NULL;
    size_t cap = 0;
    assert_true(vec_reserve((void **)&b, &cap, 1, sizeof *b));
    assert_true(cap >= 1);
    b[0].a[36] = 42;
    assert_true(vec_reserve((void **)&b, &cap, 1000, sizeof *b)); /* a jump past double */
    assert_true(cap >= 1000);
    assert_int_equal(b[0].a[36], 42);
    b[999].a[0] = 1;
    big_t *p = b;
    size_t c = cap;
    assert_true(vec_reserve((void **)&b, &cap, 10, sizeof *b)); /* room already: nothing moves */
    assert_true(vec_reserve((void **)&b, &cap, cap, sizeof *b));
    assert_ptr_equal(b, p);
    assert_int_equal(cap, c);
    hostalloc_free(b);
}

static void test_refuses_overflow(void **state)
{
    (void)state;
    uint64_t *a = NULL;
    size_t cap = 0;
    assert_true(vec_reserve((void **)&a, &cap, 3, sizeof *a));
    a[2] = 5;
    uint64_t *p = a;
    size_t c = cap;
    assert_false(vec_reserve((void **)&a, &cap, SIZE_MAX / 4, sizeof *a));
    assert_false(vec_reserve((void **)&a, &cap, SIZE_MAX, 1 + sizeof *a));
    assert_ptr_equal(a, p);
    assert_int_equal(cap, c);
    assert_int_equal(a[2], 5);
    hostalloc_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_doubles),
        cmocka_unit_test(test_reserve_many_at_once),
        cmocka_unit_test(test_refuses_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
