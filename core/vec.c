/*
 * The growable array (see vec.h).
 */
#include "vec.h"

#include <stdint.h>

#include "hostalloc.h"

/* The first capacity, in bytes: small arrays do not grow from one element. */
enum { VEC_MIN_BYTES = 256 };

bool vec_grow(void **items, size_t *cap, size_t need, size_t elem)
{
    if (elem == 0 || need > SIZE_MAX / elem)
        return false;
    size_t c = *cap ? *cap : (VEC_MIN_BYTES / elem ? VEC_MIN_BYTES / elem : 1);
    while (c < need)
        c = c <= SIZE_MAX / elem / 2 ? c * 2 : need;
    void *p = hostalloc_realloc(*items, c * elem);
    if (!p)
        return false;
    *items = p;
    *cap = c;
    return true;
}
