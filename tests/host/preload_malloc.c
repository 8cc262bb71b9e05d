/*
 * Proves that a program run with a cucache library preloaded keeps glibc's
 * malloc, while the library's own metadata comes from its private jemalloc.
 *
 * Run by meson with LD_PRELOAD=<lib> and the arguments
 *     --lib <path of the preloaded library> --symbol <a function it exports
 *     that returns its hostalloc backend> --backend jemalloc|libc [--probe]
 * --probe: the library is tests/host's libhostalloc_probe.so, which also
 * exports hostalloc_probe_malloc/free, so the test can watch where the
 * library's allocations go.
 *
 * Checks:
 *   1. the library is really preloaded (the test must not pass without it);
 *   2. malloc, free, ... resolve (dlsym(RTLD_DEFAULT) and the program's own
 *      reference) to libc.so.6, never to the library, and jemalloc's own API
 *      (mallocx, mallctl, ...) is not visible at all;
 *   3. a small malloc shows in glibc's mallinfo2(), so glibc really served it;
 *   4. the library reports the expected backend, and (--probe) its
 *      allocations do not show in glibc's mallinfo2() when that backend is
 *      jemalloc, and do when it is libc.
 * Under AddressSanitizer the sanitizer owns malloc: 2 then only checks that
 * the library does not, and 3 and the mallinfo2 part of 4 are skipped.
 *
 * A plain program rather than cmocka: the mallinfo2() measurements must not
 * see a test harness allocating between them.
 *
 * That the checks can fail was verified by linking the probe library without
 * -Wl,--exclude-libs: check 2 fails (malloc resolves to libhostalloc_probe.so)
 * and so does 3 (DEVELOPERS.md, "Host memory in library code").
 */
#include <dlfcn.h>
#include <limits.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define HOST_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HOST_TEST_ASAN 1
#endif
#endif
#ifndef HOST_TEST_ASAN
#define HOST_TEST_ASAN 0
#endif

static int failures;

/* Print one TAP-like result line; count failures. */
static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
    va_list ap;

    printf("%s - ", ok ? "ok" : "not ok");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    if (!ok)
        failures++;
}

/* The object file that defines addr ("?" if none). */
static const char *object_of(void *addr, void **base)
{
    Dl_info info;

    if (!addr || !dladdr(addr, &info) || !info.dli_fname) {
        *base = NULL;
        return "?";
    }
    *base = info.dli_fbase;
    return info.dli_fname;
}

static int is_libc(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;

    return strncmp(name, "libc.so", 7) == 0;
}

/* 2: name resolves outside the library under test (to libc without ASan). */
static void check_resolves_to_libc(const char *name, void *direct, void *lib_base)
{
    void *addr = dlsym(RTLD_DEFAULT, name);
    void *base;
    const char *obj = object_of(addr, &base);

    check(addr != NULL, "%s is defined", name);
    if (!addr)
        return;
    check(base != lib_base, "%s resolves outside the preloaded library (to %s)", name, obj);
    if (!HOST_TEST_ASAN)
        check(is_libc(obj), "%s resolves to libc (to %s)", name, obj);
    if (direct) {
        void *dbase;
        const char *dobj = object_of(direct, &dbase);

        check(dbase == base, "the program's own reference to %s binds to the same object (%s)", name, dobj);
    }
}

typedef void *(*probe_malloc_fn)(size_t);
typedef void (*probe_free_fn)(void *);

/* 4 (--probe): where do the library's own allocations go? */
static void check_probe_allocations(const char *backend)
{
    enum { N = 64, SIZE = 2000 };
    probe_malloc_fn pmalloc = (probe_malloc_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "hostalloc_probe_malloc");
    probe_free_fn pfree = (probe_free_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "hostalloc_probe_free");
    void *blocks[N];
    size_t before, after;

    check(pmalloc && pfree, "the probe library exports hostalloc_probe_malloc/free");
    if (!pmalloc || !pfree)
        return;
    pfree(pmalloc(SIZE)); /* first use: creates the arena */
    before = mallinfo2().uordblks;
    for (int i = 0; i < N; i++) {
        blocks[i] = pmalloc(SIZE);
        if (blocks[i])
            memset(blocks[i], i, SIZE);
    }
    after = mallinfo2().uordblks;
    for (int i = 0; i < N; i++)
        pfree(blocks[i]);
    for (int i = 0; i < N; i++)
        check(blocks[i] != NULL, "hostalloc allocation %d succeeded", i);

    if (HOST_TEST_ASAN) {
        printf("ok - # SKIP mallinfo2 of the library's allocations (AddressSanitizer owns malloc)\n");
    } else if (strcmp(backend, "jemalloc") == 0) {
        check(after - before < SIZE, "%d KB of hostalloc allocations left glibc's heap alone (in use grew by %zu)",
              N * SIZE / 1000, after - before);
    } else {
        check(after - before >= (size_t)N * SIZE,
              "libc backend: %d KB of hostalloc allocations are in glibc's heap "
              "(in use grew by %zu)",
              N * SIZE / 1000, after - before);
    }
}

int main(int argc, char **argv)
{
    const char *lib = NULL, *symbol = NULL, *backend = NULL;
    int probe = 0;
    char want[PATH_MAX], got[PATH_MAX];
    void *lib_base;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--lib") == 0 && i + 1 < argc)
            lib = argv[++i];
        else if (strcmp(argv[i], "--symbol") == 0 && i + 1 < argc)
            symbol = argv[++i];
        else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc)
            backend = argv[++i];
        else if (strcmp(argv[i], "--probe") == 0)
            probe = 1;
    }
    if (!lib || !symbol || !backend) {
        fprintf(stderr, "usage: LD_PRELOAD=LIB %s --lib LIB --symbol NAME --backend jemalloc|libc [--probe]\n",
                argv[0]);
        return 2;
    }
    printf("# LD_PRELOAD=%s, AddressSanitizer: %s\n", getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "(unset)",
           HOST_TEST_ASAN ? "yes" : "no");

    /* 1: the library is preloaded */
    const char *(*get_backend)(void) = (const char *(*)(void))(uintptr_t)dlsym(RTLD_DEFAULT, symbol);
    const char *obj = object_of((void *)(uintptr_t)get_backend, &lib_base);
    check(get_backend != NULL, "%s is visible: the library is preloaded", symbol);
    if (!get_backend)
        return 1;
    check(realpath(lib, want) && realpath(obj, got) && strcmp(want, got) == 0, "%s comes from %s (found in %s)", symbol,
          lib, obj);

    /* 2: the host's allocator is glibc's, jemalloc's API is invisible */
    check_resolves_to_libc("malloc", (void *)(uintptr_t)malloc, lib_base);
    check_resolves_to_libc("free", (void *)(uintptr_t)free, lib_base);
    check_resolves_to_libc("calloc", (void *)(uintptr_t)calloc, lib_base);
    check_resolves_to_libc("realloc", (void *)(uintptr_t)realloc, lib_base);
    check_resolves_to_libc("posix_memalign", (void *)(uintptr_t)posix_memalign, lib_base);
    check_resolves_to_libc("aligned_alloc", (void *)(uintptr_t)aligned_alloc, lib_base);
    check_resolves_to_libc("malloc_usable_size", (void *)(uintptr_t)malloc_usable_size, lib_base);
    static const char *const jemalloc_only[] = {"mallocx", "rallocx",     "dallocx",   "sdallocx",  "nallocx",
                                                "mallctl", "malloc_conf", "je_malloc", "je_mallocx"};
    for (size_t i = 0; i < sizeof(jemalloc_only) / sizeof(jemalloc_only[0]); i++)
        check(dlsym(RTLD_DEFAULT, jemalloc_only[i]) == NULL, "%s is not visible to the program", jemalloc_only[i]);

    /* 3: glibc serves the host's malloc */
    if (HOST_TEST_ASAN) {
        printf("ok - # SKIP mallinfo2 of the program's malloc (AddressSanitizer owns malloc)\n");
    } else {
        size_t before = mallinfo2().uordblks;
        char *volatile p = malloc(4000); /* far below the mmap threshold */
        size_t after = mallinfo2().uordblks;

        check(p && after - before >= 4000, "malloc(4000) is counted by glibc's mallinfo2 (in use grew by %zu)",
              after - before);
        free(p);
    }

    /* 4: the library's own allocator */
    check(strcmp(get_backend(), backend) == 0, "%s() is \"%s\" (got \"%s\")", symbol, backend, get_backend());
    if (probe)
        check_probe_allocations(backend);

    printf("# %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
