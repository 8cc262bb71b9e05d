/*
 * Host memory for the simulator's libraries: allocations that abort with
 * a line when the host is out of memory, and the growable sorted arrays
 * (array.h).  Compiled into every library that needs them (the driver,
 * the cuDNN stand-in).
 */
#include "array.h"

#include <stdlib.h>
#include <string.h>

#include "shared.h" /* sim_log */

void *sim_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        sim_log("out of host memory (%zu bytes)", n);
        abort();
    }
    return p;
}

void *sim_xcalloc(size_t n, size_t m)
{
    void *p = calloc(n ? n : 1, m ? m : 1);
    if (!p) {
        sim_log("out of host memory (%zu x %zu bytes)", n, m);
        abort();
    }
    return p;
}

void *sim_array_room(void *base, size_t n, size_t *cap, size_t elem, size_t first)
{
    if (n < *cap)
        return base;
    *cap = *cap ? *cap * 2 : first;
    base = realloc(base, *cap * elem);
    if (!base) {
        sim_log("out of host memory (%zu x %zu bytes)", *cap, elem);
        abort();
    }
    return base;
}

void *sim_array_open(void *base, size_t n, size_t elem, size_t i)
{
    char *slot = (char *)base + i * elem;
    memmove(slot + elem, slot, (n - i) * elem);
    return slot;
}

void sim_array_close(void *base, size_t n, size_t elem, size_t i)
{
    char *slot = (char *)base + i * elem;
    memmove(slot, slot + elem, (n - i - 1) * elem);
}
