/*
 * hostalloc: metadata allocation through a private jemalloc arena, or glibc.
 * See hostalloc.h for why library code allocates only through here.
 *
 * CUCACHE_HOSTALLOC_JEMALLOC is set by core/meson.build when the static
 * libjemalloc_pic.a is linked.  This file is then the only place that names
 * jemalloc's API; it never names malloc/free, which inside the library are
 * jemalloc's unprefixed (and hidden) copies.
 */
#include "hostalloc.h"

#include <errno.h>

#if CUCACHE_HOSTALLOC_JEMALLOC

#include <dlfcn.h>
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdatomic.h>

/* ------------------------------------------------------------------------
 * jemalloc backend
 * ---------------------------------------------------------------------- */

static pthread_once_t hostalloc_once = PTHREAD_ONCE_INIT;

/* mallocx/rallocx flags: our own arena, no thread cache.  Written once under
 * hostalloc_once, read-only afterwards.  Without a thread cache every call
 * takes the arena's bin lock; metadata allocation is off the hit path, and
 * implicit thread caches would be shared with nobody here anyway (an explicit
 * "tcaches.create" cache may only be used by one thread at a time). */
static int hostalloc_flags = MALLOCX_TCACHE_NONE;

/* Create the private arena.  If jemalloc refuses (it never should), the
 * automatic arenas of our private jemalloc copy serve us instead, which is
 * still isolated from the host program's heap. */
static void hostalloc_init_once(void)
{
    unsigned arena = 0;
    size_t len = sizeof(arena);

    if (mallctl("arenas.create", &arena, &len, NULL, 0) == 0)
        hostalloc_flags = MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE;
}

static inline int hostalloc_mallocx_flags(void)
{
    pthread_once(&hostalloc_once, hostalloc_init_once);
    return hostalloc_flags;
}

void *hostalloc_malloc(size_t size)
{
    /* mallocx(0, ...) is undefined; malloc(0) returns a unique pointer. */
    void *p = mallocx(size ? size : 1, hostalloc_mallocx_flags());

    if (!p)
        errno = ENOMEM;
    return p;
}

void *hostalloc_calloc(size_t nmemb, size_t size)
{
    size_t bytes;
    void *p;

    if (__builtin_mul_overflow(nmemb, size, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    p = mallocx(bytes ? bytes : 1, hostalloc_mallocx_flags() | MALLOCX_ZERO);
    if (!p)
        errno = ENOMEM;
    return p;
}

void *hostalloc_realloc(void *ptr, size_t size)
{
    void *p;

    if (!ptr)
        return hostalloc_malloc(size);
    if (size == 0) {
        hostalloc_free(ptr);
        return NULL;
    }
    p = rallocx(ptr, size, hostalloc_mallocx_flags());
    if (!p)
        errno = ENOMEM;
    return p;
}

void hostalloc_free(void *ptr)
{
    /* dallocx(NULL, ...) is undefined.  A pointer can only come from
     * hostalloc_malloc, so the arena is already set up: no need to init. */
    if (ptr)
        dallocx(ptr, MALLOCX_TCACHE_NONE);
}

/* The process's free: the first `free` in the global scope, which never is
 * this library's hidden jemalloc copy. */
void hostalloc_free_foreign(void *ptr)
{
    static void (*_Atomic process_free)(void *);
    void (*f)(void *) = process_free;
    if (!f) {
        f = (void (*)(void *))dlsym(RTLD_DEFAULT, "free");
        process_free = f;
    }
    if (ptr && f)
        f(ptr);
}

const char *hostalloc_backend(void)
{
    return "jemalloc";
}

#else /* !CUCACHE_HOSTALLOC_JEMALLOC */

/* ------------------------------------------------------------------------
 * glibc backend: the only place in library code allowed to call malloc.
 * ---------------------------------------------------------------------- */

#include <stdlib.h>

void *hostalloc_malloc(size_t size)
{
    return malloc(size);
}

void *hostalloc_calloc(size_t nmemb, size_t size)
{
    size_t bytes;

    /* Checked here too, so that an overflow is ENOMEM on every backend
     * (AddressSanitizer's calloc would abort the program instead). */
    if (__builtin_mul_overflow(nmemb, size, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    return calloc(nmemb, size);
}

void *hostalloc_realloc(void *ptr, size_t size)
{
    if (ptr && size == 0) { /* C23 made this undefined: pin glibc's meaning */
        free(ptr);
        return NULL;
    }
    return realloc(ptr, size);
}

void hostalloc_free(void *ptr)
{
    free(ptr);
}

void hostalloc_free_foreign(void *ptr)
{
    free(ptr); /* the process's: this build has no other */
}

const char *hostalloc_backend(void)
{
    return "libc";
}

#endif
