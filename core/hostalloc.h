/*
 * hostalloc: the host-side memory of cucache's own metadata (blocks, segment
 * records, stream tables, trace buffers).
 *
 * Library code never calls malloc/calloc/realloc/free (nor libc functions that
 * return malloc'ed memory: strdup, asprintf, getline, ...) directly; it calls
 * these.  Two reasons:
 *
 *   - in the jemalloc build, the static libjemalloc_pic.a linked into the
 *     library defines unprefixed malloc/free.  Its symbols are kept out of the
 *     dynamic symbol table (-Wl,--exclude-libs, carried by hostalloc_dep), so
 *     the host program keeps glibc's allocator, but inside the library the
 *     name `malloc` binds to jemalloc's copy: a pointer from libc's strdup
 *     freed there would corrupt both heaps;
 *   - metadata comes from a jemalloc arena of its own, so cucache's
 *     allocations neither fragment the program's heap nor appear in its
 *     malloc statistics, and the program's heap corruption cannot reach them.
 *
 * Without jemalloc (feature off, archive missing, or a sanitizer build, where
 * ASan must see every metadata access) the same functions are glibc's.
 *
 * All functions are thread-safe and may be called before any other cucache
 * initialisation.  Semantics follow the C library, with two precisions:
 * hostalloc_malloc(0) returns a unique pointer, and hostalloc_realloc(p, 0)
 * frees p and returns NULL.
 */
#ifndef CUCACHE_CORE_HOSTALLOC_H
#define CUCACHE_CORE_HOSTALLOC_H

#include <stddef.h>

void *hostalloc_malloc(size_t size);
void *hostalloc_calloc(size_t nmemb, size_t size);
void *hostalloc_realloc(void *ptr, size_t size);
void hostalloc_free(void *ptr);

/* Frees memory that another library of the process allocated with the
 * process's malloc and handed to cucache to free (__cxa_demangle's result):
 * the process's free, never cucache's copy. */
void hostalloc_free_foreign(void *ptr);

/* "jemalloc" or "libc": which allocator serves the functions above. */
const char *hostalloc_backend(void);

#endif
