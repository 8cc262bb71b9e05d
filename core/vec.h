/*
 * vec: the one growable array of the core, the what-if, the interposer,
 * the replay and stats.  The caller keeps the array, its length and its
 * capacity; vec_reserve makes room for `need` elements, doubling the
 * capacity, so that appending n elements one by one costs O(n) copies:
 *
 *   if (!vec_reserve((void **)&a, &cap, n + 1, sizeof *a))
 *       return fail("out of host memory");
 *   a[n++] = x;
 *
 * Memory from hostalloc_realloc (the C library's in executables: the
 * replay, tests, benchmarks); free it with hostalloc_free.  New elements
 * are not zeroed.  On failure the array and its capacity are unchanged.
 */
#ifndef CUCACHE_CORE_VEC_H
#define CUCACHE_CORE_VEC_H

#include <stdbool.h>
#include <stddef.h>

/* The growing step of vec_reserve: need > *cap. */
bool vec_grow(void **items, size_t *cap, size_t need, size_t elem);

/* Room for need elements of elem bytes in *items (of *cap elements); false
 * when host memory is short or the size does not fit a size_t. */
static inline bool vec_reserve(void **items, size_t *cap, size_t need, size_t elem)
{
    return need <= *cap || vec_grow(items, cap, need, elem);
}

#endif
