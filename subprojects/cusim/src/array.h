/*
 * The simulator's host memory: allocations that abort when the host is out
 * of memory, and growable, sorted arrays (array.c implements them).
 * Included by engine.h.
 */
#ifndef CUCACHE_SIM_ARRAY_H
#define CUCACHE_SIM_ARRAY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* malloc and calloc that log and abort when the host is out of memory. */
void *sim_xmalloc(size_t n);
void *sim_xcalloc(size_t n, size_t m);

/* The growable arrays (the allocation table, free extents, small pages,
 * reservations, IPC records, race records), each a base, a count n and a
 * capacity.  sim_array_room: base with room for one more element of elem
 * bytes, the capacity doubled (from first) when full; aborts when out of
 * host memory.  sim_array_open: moves elements i..n-1 up one and returns
 * slot i.  sim_array_close: moves elements i+1..n-1 down over slot i.  The
 * caller updates n. */
void *sim_array_room(void *base, size_t n, size_t *cap, size_t elem, size_t first);
void *sim_array_open(void *base, size_t n, size_t elem, size_t i);
void sim_array_close(void *base, size_t n, size_t elem, size_t i);

/* In an array of n elements of elem bytes sorted by the uintptr_t at byte
 * offset key of each, the index of the first whose key is above x. */
static inline size_t sim_array_upper(const void *base, size_t n, size_t elem, size_t key, uintptr_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uintptr_t k;
        memcpy(&k, (const char *)base + mid * elem + key, sizeof k);
        if (k <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The same array's last element whose key is x or below, or NULL. */
static inline void *sim_array_floor(const void *base, size_t n, size_t elem, size_t key, uintptr_t x)
{
    size_t i = sim_array_upper(base, n, elem, key, x);
    return i ? (char *)base + (i - 1) * elem : NULL;
}

#endif
