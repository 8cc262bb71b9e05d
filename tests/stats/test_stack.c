/*
 * Proves stats/stack.c: a stack taken twice from one call site is one id
 * and names its function; stacks taken from many threads at once (new ones
 * racing to be interned, known ones looked up without a lock) each come
 * back whole; addresses in no module or without symbols symbolise as "??"
 * with what is known (module and offset, or the address); the table's
 * bound; live allocations grouped by site, and a site whose stack was not
 * kept said so; Python frame records in a stack, and the report's folding
 * of library and native frames around the program's own.  Skipped (77) when built without libunwind.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hostalloc.h"
#include "st.h"

typedef struct lines_s {
    char text[8192];
    size_t len;
} lines_t;

static void collect(void *ctx, const char *line)
{
    lines_t *l = ctx;
    l->len += (size_t)snprintf(l->text + l->len, sizeof l->text - l->len, "%s\n", line);
    if (l->len >= sizeof l->text)
        l->len = sizeof l->text - 1;
}

__attribute__((noinline)) static uint32_t capture_here(void)
{
    uint32_t id = st_stack_capture();
    __asm__ volatile("" ::: "memory"); /* no tail call */
    return id;
}

__attribute__((noinline)) static uint32_t capture_elsewhere(void)
{
    volatile int differ = 1; /* not folded into capture_here (identical code folding) */
    (void)differ;
    uint32_t id = st_stack_capture();
    __asm__ volatile("" ::: "memory");
    return id;
}

static void test_one_site_one_id(void **state)
{
    (void)state;
    uint32_t a = capture_here(), b = capture_here(), c = capture_elsewhere();
    assert_true(a >= ST_STACK_FIRST);
    /* the two calls of capture_here differ in their return address in this
     * function, so compare calls made from one place */
    uint32_t same[2];
    for (volatile int i = 0; i < 2; i++) /* volatile: one call instruction, not an unrolled two */
        same[i] = capture_here();
    assert_int_equal(same[0], same[1]);
    assert_int_not_equal(a, c);
    (void)b;
    st_frame_t f[4];
    size_t n = st_stack_frames(a, f, 4);
    assert_true(n >= 2);
    assert_string_equal(f[0].name, "capture_here");
    assert_string_equal(f[1].name, "test_one_site_one_id");
    assert_non_null(f[0].module);
    n = st_stack_frames(c, f, 1);
    assert_int_equal(n, 1);
    assert_string_equal(f[0].name, "capture_elsewhere");
    char text[256];
    st_frame_text(&f[0], text, sizeof text);
    assert_non_null(strstr(text, "capture_elsewhere ("));
}

enum { THREADS = 4, ROUNDS = 2000 };

/* Under ThreadSanitizer a thread that called libunwind crashes at exit in
 * TSan's mutex interceptor, called from libunwind's thread-specific-data
 * destructor (the two do not get along; nothing of cucache's runs there):
 * the threads then race on interning and lookups only. */
#if defined(__SANITIZE_THREAD__)
#define CAPTURE_IN_THREADS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CAPTURE_IN_THREADS 0
#endif
#endif
#ifndef CAPTURE_IN_THREADS
#define CAPTURE_IN_THREADS 1
#endif

static void *race(void *arg)
{
    uintptr_t salt = (uintptr_t)arg, bad = 0;
    for (int i = 0; i < ROUNDS; i++) {
        /* stacks of made-up addresses: new ones race to be interned, the
         * same ones are found by every thread */
        uintptr_t pc[3] = {0x1000 + (uintptr_t)(i % 97), 0x2000 + salt, 0x3000 + (uintptr_t)i};
        int n = 1 + i % 3;
        uint32_t id = st_stack_intern(pc, n);
        const uintptr_t *got;
        if (st_stack_pcs(id, &got) != (size_t)n || memcmp(got, pc, (size_t)n * sizeof *pc) != 0)
            bad++;
        if (CAPTURE_IN_THREADS && capture_here() < ST_STACK_FIRST)
            bad++;
    }
    return (void *)bad;
}

static void test_threads(void **state)
{
    (void)state;
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, race, (void *)(i % 2)), 0);
    for (int i = 0; i < THREADS; i++) {
        void *bad;
        pthread_join(t[i], &bad);
        assert_int_equal((uintptr_t)bad, 0);
    }
}

static void test_unknown_addresses(void **state)
{
    (void)state;
    /* an address in no module, and one inside this program's mapping but
     * between its symbols' ends is hard to name portably: use a heap
     * address (mapped, no module) and a tiny one */
    char *heap = hostalloc_malloc(64);
    uintptr_t pc[2] = {0x10, (uintptr_t)heap + 8};
    uint32_t id = st_stack_intern(pc, 2);
    assert_true(id >= ST_STACK_FIRST);
    st_frame_t f[2];
    assert_int_equal(st_stack_frames(id, f, 2), 2);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(f[i].name, "??");
        assert_null(f[i].file);
        assert_int_equal(f[i].line, 0);
        assert_int_equal(f[i].pc, pc[i]);
    }
    char text[128];
    st_frame_text(&f[0], text, sizeof text);
    assert_string_equal(text, "?? (0x10)");
    /* 0, the dropped id and ids never handed out have no frames */
    const uintptr_t *got;
    assert_int_equal(st_stack_pcs(0, &got), 0);
    assert_int_equal(st_stack_pcs(ST_STACK_DROPPED, &got), 0);
    assert_int_equal(st_stack_pcs(ST_STACKS_MAX - 1, &got), 0);
    assert_int_equal(st_stack_frames(ST_STACK_DROPPED, f, 2), 0);
    hostalloc_free(heap);
}

static void test_group_by_site(void **state)
{
    (void)state;
    uintptr_t pc[1] = {0x20};
    uint32_t s1 = capture_here(), s2 = st_stack_intern(pc, 1);
    core_block_info_t blocks[6] = {
        {0x1000, 4096, 4000, CORE_BLOCK_ALLOCATED, 1, s1, 1501}, /* allocated 1.50 s in */
        {0x2000, 4096, 0, CORE_BLOCK_FREE, 0, 0, 0},
        {0x3000, 8192, 8000, CORE_BLOCK_ALLOCATED, 2, s1, 2001},
        {0x5000, 1 << 20, 1 << 20, CORE_BLOCK_ALLOCATED, 3, s2, 0}, /* not stamped */
        {0x105000, 4096, 100, CORE_BLOCK_ALLOCATED, 4, ST_STACK_DROPPED, 0},
        {0x106000, 4096, 100, CORE_BLOCK_PENDING, 5, s1, 0},
    };
    core_layout_t l = {.blocks = blocks, .nblocks = 6};
    st_site_group_t *g;
    size_t ng = st_group_by_site(&l, &g);
    assert_int_equal(ng, 3);
    assert_int_equal(g[0].site, s2); /* the most bytes first */
    assert_int_equal(g[1].site, s1);
    assert_int_equal(g[1].count, 2);
    assert_int_equal(g[1].bytes, 12000);
    assert_int_equal(g[1].min, 4000);
    assert_int_equal(g[1].max, 8000);
    assert_int_equal(g[1].first, 1);
    assert_int_equal(g[1].born, 1501);
    lines_t out = {0};
    st_site_lines(g, ng, 2, 5, collect, &out);
    assert_non_null(
        strstr(out.text, "  1 x 1024.00 KiB = 1024.00 KiB, the first allocation 3 of 5, at\n      ?? (0x20)\n"));
    assert_non_null(strstr(out.text, "  2 allocations of 3.91 KiB to 7.81 KiB = 11.72 KiB, the first allocation 1 of 5 "
                                     "(t=1.50 s), at\n      capture_here ("));
    assert_non_null(strstr(out.text, "  ... 1 more call site: 1 allocation, 100 bytes\n"));
    out.len = 0;
    st_site_lines(g, ng, 3, 0, collect, &out);
    assert_non_null(strstr(out.text, "  1 x 100 bytes = 100 bytes, call stack not recorded\n"));
    hostalloc_free(g);
    /* no sites: nothing to group (the reports fall back to sizes) */
    for (int i = 0; i < 6; i++)
        blocks[i].site = 0;
    assert_int_equal(st_group_by_site(&l, &g), 0);
    assert_null(g);
}

/* A stack of Python frames (st_py_intern's records, as pystack.c makes
 * them) reads back innermost first, and the site lines show the program's
 * own frames with library runs and native frames folded. */
static void test_python_frames(void **state)
{
    (void)state;
    const char *numba = "/usr/lib/python3/dist-packages/numba/cuda/cudadrv/driver.py";
    uint32_t py[7] = {
        st_py_intern(numba, "Context.memalloc", 1372),
        st_py_intern("/usr/lib/python3/dist-packages/numba/cuda/api.py", "device_array", 83),
        st_py_intern("/home/u/train.py", "load_weights", 26),
        st_py_intern("/usr/lib/python3.11/contextlib.py", "inner", 81),
        st_py_intern("/home/u/train.py", "main", 57),
        st_py_intern("/home/u/pkg/__init__.py", "<module>", 3),
        st_py_intern("<frozen runpy>", "_run_code", 88),
    };
    for (int i = 0; i < 7; i++)
        assert_true(py[i] != 0);
    assert_int_equal(st_py_intern(numba, "Context.memalloc", 1372), py[0]);
    uintptr_t pc[2] = {0x30, 0x40};
    uint32_t mixed = st_stack_intern_mixed(pc, 2, py, 7), only = st_stack_intern_mixed(NULL, 0, py, 7);
    assert_true(mixed >= ST_STACK_FIRST && only >= ST_STACK_FIRST && mixed != only);
    st_frame_t f[ST_STACK_FRAMES_MAX];
    assert_int_equal(st_stack_frames(mixed, f, ST_STACK_FRAMES_MAX), 9);
    assert_false(f[0].python);
    assert_int_equal(f[1].pc, 0x40);
    assert_true(f[2].python && f[4].python);
    assert_string_equal(f[2].file, numba);
    assert_string_equal(f[4].name, "load_weights");
    assert_int_equal(f[4].line, 26);
    assert_null(f[4].module);
    char text[256];
    st_frame_text(&f[7], text, sizeof text);
    assert_string_equal(text, "<module> (pkg/__init__.py:3)");
    const char *where;
    assert_true(st_py_library(numba, &where));
    assert_string_equal(where, "numba/cuda/cudadrv/driver.py");
    assert_true(st_py_library("/usr/lib/python3.11/contextlib.py", &where));
    assert_string_equal(where, "contextlib.py");
    assert_false(st_py_library("/home/u/train.py", &where));

    core_block_info_t blocks[2] = {
        {0x1000, 4096, 4096, CORE_BLOCK_ALLOCATED, 1, mixed, 0},
        {0x2000, 4096, 100, CORE_BLOCK_ALLOCATED, 2, ST_STACK_NO_PYTHON, 0},
    };
    core_layout_t l = {.blocks = blocks, .nblocks = 2};
    st_site_group_t *g;
    size_t ng = st_group_by_site(&l, &g);
    assert_int_equal(ng, 2);
    lines_t out = {0};
    st_site_lines(g, ng, 2, 0, collect, &out);
    assert_string_equal(out.text, "  1 x 4.00 KiB = 4.00 KiB, at\n"
                                  "      ... 2 native frames, innermost ?? (0x30)\n"
                                  "      ... 2 library frames, from numba/cuda/cudadrv/driver.py\n"
                                  "      load_weights (train.py:26)\n"
                                  "      ... 1 library frame, from contextlib.py\n"
                                  "      main (train.py:57)\n"
                                  "      <module> (pkg/__init__.py:3)\n"
                                  "      ... 1 more frame\n"
                                  "  1 x 100 bytes = 100 bytes, no Python frames (a thread Python does not know, or "
                                  "at shutdown)\n");
    hostalloc_free(g);
    /* every frame library code: nothing folded */
    uint32_t lib = st_stack_intern_mixed(NULL, 0, py, 2);
    blocks[0].site = lib;
    l.nblocks = 1;
    ng = st_group_by_site(&l, &g);
    out.len = 0;
    st_site_lines(g, ng, 1, 0, collect, &out);
    assert_string_equal(out.text, "  1 x 4.00 KiB = 4.00 KiB, at\n"
                                  "      Context.memalloc (driver.py:1372)\n"
                                  "      device_array (api.py:83)\n");
    hostalloc_free(g);
}

/* The rows of memory kept for the life of the process (stats/kept.c): a
 * stack through PyTorch's cuBLAS handle pool or inside libcublas is kept;
 * the same function name in another library, a Python frame of that name,
 * or an ordinary program's stack is not. */
static void test_kept_rows(void **state)
{
    (void)state;
    st_frame_t torch[] = {
        {.name = "??", .module = "/usr/lib/x86_64-linux-gnu/libc10_cuda.so.2.6.0"},
        {.name = "at::cuda::getCurrentCUDABlasHandle()", .module = "/usr/lib/x86_64-linux-gnu/libtorch_cuda.so.2.6.0"},
        {.name = "main", .module = "/usr/bin/python3.13"},
    };
    const st_kept_t *k = st_kept_frames(torch, 3);
    assert_non_null(k);
    assert_string_equal(k->owner, "PyTorch");
    assert_non_null(strstr(k->what, "cuBLAS workspace"));
    assert_null(st_kept_frames(torch, 1)); /* the allocator's frame alone says nothing */

    st_frame_t cublas[] = {{.name = "??", .module = "libcublas.so.12"}, {.name = "main", .module = "prog"}};
    k = st_kept_frames(cublas, 2);
    assert_non_null(k);
    assert_string_equal(k->owner, "libcublas");

    st_frame_t elsewhere[] = {{.name = "getCurrentCUDABlasHandle", .module = "/opt/app/libmine.so"},
                              {.name = "getCurrentCUDABlasHandle", .file = "x.py", .python = true},
                              {.name = "main", .module = "leaky_prog"}};
    assert_null(st_kept_frames(elsewhere, 3));
    assert_null(st_kept_frames(NULL, 0));
    assert_null(st_kept_site(0, NULL)); /* no stack taken */
    bool native = true;
    assert_null(st_kept_site(ST_STACK_NO_PYTHON, &native));
    assert_false(native);
}

int main(void)
{
    char err[256];
    bool on;
    if (st_stacks_enable(ST_STACKS_NATIVE, 8, &on, err, sizeof err) != 0) {
        printf("skipped: %s\n", err);
        return 77;
    }
    assert_true(st_stacks_on());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_site_one_id),   cmocka_unit_test(test_threads),
        cmocka_unit_test(test_unknown_addresses), cmocka_unit_test(test_group_by_site),
        cmocka_unit_test(test_python_frames),  cmocka_unit_test(test_kept_rows),
    };
    return cmocka_run_group_tests_name("stats_stack", tests, NULL, NULL);
}
