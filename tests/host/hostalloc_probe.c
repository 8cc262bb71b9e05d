/*
 * libhostalloc_probe.so (test only): core/hostalloc linked into a shared
 * library the plain way, with default visibility and no version script.
 * Nothing but hostalloc_dep's -Wl,--exclude-libs keeps jemalloc's malloc/free
 * out of its export table, so tests/host checks that flag on its own here
 * (libcucache.so's version script would hide a missing flag).  It exports the
 * allocator so the tests can see where allocations go and check the
 * semantics of the jemalloc backend (test_hostalloc.c).
 */
#include <stddef.h>

#include "hostalloc.h"

void *hostalloc_probe_malloc(size_t size);
void *hostalloc_probe_calloc(size_t nmemb, size_t size);
void *hostalloc_probe_realloc(void *ptr, size_t size);
void hostalloc_probe_free(void *ptr);
const char *hostalloc_probe_backend(void);

void *hostalloc_probe_malloc(size_t size)
{
    return hostalloc_malloc(size);
}

void *hostalloc_probe_calloc(size_t nmemb, size_t size)
{
    return hostalloc_calloc(nmemb, size);
}

void *hostalloc_probe_realloc(void *ptr, size_t size)
{
    return hostalloc_realloc(ptr, size);
}

void hostalloc_probe_free(void *ptr)
{
    hostalloc_free(ptr);
}

const char *hostalloc_probe_backend(void)
{
    return hostalloc_backend();
}
