/*
 * libcucache.so: the library a program is run with (LD_PRELOAD).
 *
 * For now a shell that proves the build of the preloadable library: it
 * exports its public API (cucache_*) and nothing else, and its metadata
 * allocator is the private jemalloc of core/hostalloc.  Issue 4 adds the CUDA
 * runtime and driver hooks, one file per family (style.md habit 8), and lists
 * them in cucache.map.
 */
#include "hostalloc.h"

#define CUCACHE_EXPORT __attribute__((visibility("default")))

/* The version of cucache, "MAJOR.MINOR.PATCH". */
CUCACHE_EXPORT const char *cucache_version(void);

/* "jemalloc" or "libc": the allocator of cucache's own host-side metadata. */
CUCACHE_EXPORT const char *cucache_hostalloc_backend(void);

const char *cucache_version(void)
{
    return CUCACHE_VERSION;
}

const char *cucache_hostalloc_backend(void)
{
    return hostalloc_backend();
}
