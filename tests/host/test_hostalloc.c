/*
 * The hostalloc API (core/hostalloc.h) keeps the C library's semantics on
 * both backends: malloc(0) gives a unique pointer, calloc zeroes and refuses
 * an overflowing product, realloc keeps the contents, realloc(p, 0) frees,
 * free(NULL) is harmless, blocks are aligned for any type, and many threads
 * may allocate at once.
 *
 *   test_hostalloc --backend libc                  the functions linked in
 *                                                  (hostalloc_libc_dep)
 *   LD_PRELOAD=libhostalloc_probe.so \
 *   test_hostalloc --backend NAME --probe          the probe library's copy,
 *                                                  i.e. jemalloc when enabled
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>

#include <cmocka.h>

#include "hostalloc.h"

/* The functions under test: hostalloc_* or the probe library's copies. */
static struct {
    void *(*malloc)(size_t);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void (*free)(void *);
    const char *(*backend)(void);
} api = {hostalloc_malloc, hostalloc_calloc, hostalloc_realloc, hostalloc_free, hostalloc_backend};

static const char *expected_backend;

static void test_backend_name(void **state)
{
    assert_string_equal(api.backend(), expected_backend);
}

static void test_malloc_zero_is_unique(void **state)
{
    void *p = api.malloc(0), *q = api.malloc(0);

    assert_non_null(p);
    assert_non_null(q);
    assert_ptr_not_equal(p, q);
    api.free(p);
    api.free(q);
}

static void test_alignment(void **state)
{
    for (size_t size = 1; size <= 4096; size = size * 3 + 1) {
        void *p = api.malloc(size);

        assert_non_null(p);
        assert_int_equal((uintptr_t)p % alignof(max_align_t), 0);
        memset(p, 0xab, size);
        api.free(p);
    }
}

static void test_calloc_zeroes(void **state)
{
    enum { N = 512, SIZE = 8 };
    /* dirty blocks of the same size first, so calloc likely reuses one */
    for (int i = 0; i < 8; i++) {
        void *p = api.malloc(N * SIZE);

        assert_non_null(p);
        memset(p, 0xff, N * SIZE);
        api.free(p);
    }
    unsigned char *c = api.calloc(N, SIZE);

    assert_non_null(c);
    for (size_t i = 0; i < N * SIZE; i++)
        assert_int_equal(c[i], 0);
    api.free(c);
}

static void test_calloc_overflow(void **state)
{
    errno = 0;
    assert_null(api.calloc(SIZE_MAX / 2, 4));
    assert_int_equal(errno, ENOMEM);
}

static void test_realloc_keeps_contents(void **state)
{
    unsigned char *p = api.malloc(100);

    assert_non_null(p);
    for (int i = 0; i < 100; i++)
        p[i] = (unsigned char)i;
    p = api.realloc(p, 100000); /* grows across size classes */
    assert_non_null(p);
    for (int i = 0; i < 100; i++)
        assert_int_equal(p[i], i);
    memset(p + 100, 0x5a, 100000 - 100);
    p = api.realloc(p, 10); /* and shrinks */
    assert_non_null(p);
    for (int i = 0; i < 10; i++)
        assert_int_equal(p[i], i);
    api.free(p);
}

static void test_realloc_null_and_zero(void **state)
{
    void *p = api.realloc(NULL, 64); /* NULL: like malloc */

    assert_non_null(p);
    assert_null(api.realloc(p, 0)); /* 0: frees, returns NULL */
    api.free(NULL);                 /* harmless */
}

enum { THREADS = 4, ROUNDS = 20000, LIVE = 64 };

static void *churn(void *arg)
{
    uint32_t seed = (uint32_t)(uintptr_t)arg * 2654435761u + 1;
    unsigned char *live[LIVE] = {0};

    for (int r = 0; r < ROUNDS; r++) {
        seed = seed * 1664525u + 1013904223u;
        int slot = (int)(seed >> 8) % LIVE;
        size_t size = 1 + (seed >> 16) % 3000;

        if (live[slot] && live[slot][0] != (unsigned char)slot)
            return (void *)1; /* someone else wrote into our block */
        api.free(live[slot]);
        live[slot] = api.malloc(size);
        if (!live[slot])
            return (void *)1;
        memset(live[slot], slot, size);
    }
    for (int i = 0; i < LIVE; i++)
        api.free(live[i]);
    return NULL;
}

static void test_threads(void **state)
{
    pthread_t t[THREADS];

    for (uintptr_t i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)i), 0);
    for (int i = 0; i < THREADS; i++) {
        void *bad;

        assert_int_equal(pthread_join(t[i], &bad), 0);
        assert_null(bad);
    }
}

/* Point api at the preloaded probe library's functions. */
static int use_probe(void)
{
    api.malloc = (void *(*)(size_t))(uintptr_t)dlsym(RTLD_DEFAULT, "hostalloc_probe_malloc");
    api.calloc = (void *(*)(size_t, size_t))(uintptr_t)dlsym(RTLD_DEFAULT, "hostalloc_probe_calloc");
    api.realloc = (void *(*)(void *, size_t))(uintptr_t)dlsym(RTLD_DEFAULT, "hostalloc_probe_realloc");
    api.free = (void (*)(void *))(uintptr_t)dlsym(RTLD_DEFAULT, "hostalloc_probe_free");
    api.backend = (const char *(*)(void))(uintptr_t)dlsym(RTLD_DEFAULT, "hostalloc_probe_backend");
    return api.malloc && api.calloc && api.realloc && api.free && api.backend;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_name),
        cmocka_unit_test(test_malloc_zero_is_unique),
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_calloc_zeroes),
        cmocka_unit_test(test_calloc_overflow),
        cmocka_unit_test(test_realloc_keeps_contents),
        cmocka_unit_test(test_realloc_null_and_zero),
        cmocka_unit_test(test_threads),
    };

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
            expected_backend = argv[++i];
        } else if (strcmp(argv[i], "--probe") == 0 && !use_probe()) {
            fprintf(stderr, "test_hostalloc: --probe: preload libhostalloc_probe.so (LD_PRELOAD)\n");
            return 1;
        }
    }
    if (!expected_backend) {
        fprintf(stderr, "usage: test_hostalloc --backend jemalloc|libc [--probe]\n");
        return 2;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
