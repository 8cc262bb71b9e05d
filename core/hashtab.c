/*
 * The hash table (see hashtab.h): growth, insertion and deletion.
 */
#include "hashtab.h"

#include "hostalloc.h"

/* Places key, known absent, in the first empty slot of its probe run. */
static void slot_place(ht_t *t, uint64_t key, uint64_t val)
{
    size_t mask = t->cap - 1, i = ht_home(t, key);
    while (t->slots[i].key)
        i = (i + 1) & mask;
    t->slots[i] = (ht_slot_t){key, val};
    t->used++;
}

/* Moves every key into a new array of cap slots (a power of two, at least
 * twice the keys); false (unchanged) when host memory is short. */
static bool table_resize(ht_t *t, size_t cap)
{
    ht_slot_t *slots = hostalloc_calloc(cap, sizeof *slots);
    if (!slots)
        return false;
    ht_t n = {.slots = slots, .cap = cap, .shift = 64, .has_zero = t->has_zero, .zero_val = t->zero_val};
    for (size_t c = cap; c > 1; c >>= 1)
        n.shift--;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].key)
            slot_place(&n, t->slots[i].key, t->slots[i].val);
    hostalloc_free(t->slots);
    *t = n;
    return true;
}

bool ht_reserve(ht_t *t, size_t n)
{
    size_t cap = t->cap ? t->cap : HT_MIN_CAP;
    while (cap / 2 < n) {
        if (cap > SIZE_MAX / 2 / sizeof(ht_slot_t))
            return false;
        cap *= 2;
    }
    return cap == t->cap || table_resize(t, cap);
}

bool ht_put(ht_t *t, uint64_t key, uint64_t val)
{
    if (key == 0) {
        t->has_zero = true;
        t->zero_val = val;
        return true;
    }
    size_t i = ht_index(t, key);
    if (i != SIZE_MAX) {
        t->slots[i].val = val;
        return true;
    }
    /* past half full: double, or when host memory is short, go on filling
     * while one slot stays empty (it ends every probe run) */
    if ((t->used + 1) * 2 > t->cap && !ht_reserve(t, t->used + 1) && t->used + 1 >= t->cap)
        return false;
    slot_place(t, key, val);
    return true;
}

bool ht_del(ht_t *t, uint64_t key, uint64_t *val)
{
    if (key == 0) {
        if (!t->has_zero)
            return false;
        if (val)
            *val = t->zero_val;
        t->has_zero = false;
        return true;
    }
    size_t hole = ht_index(t, key);
    if (hole == SIZE_MAX)
        return false;
    if (val)
        *val = t->slots[hole].val;
    /* each later key of the run moves back into the hole when the hole lies
     * on its probe path, cyclically within [home, i) */
    size_t mask = t->cap - 1;
    for (size_t i = (hole + 1) & mask; t->slots[i].key; i = (i + 1) & mask) {
        size_t home = ht_home(t, t->slots[i].key);
        if (((i - home) & mask) >= ((i - hole) & mask)) {
            t->slots[hole] = t->slots[i];
            hole = i;
        }
    }
    t->slots[hole].key = 0;
    t->used--;
    return true;
}

void ht_fini(ht_t *t)
{
    hostalloc_free(t->slots);
    *t = (ht_t){0};
}
