/*
 * Live-handle table: open addressing on the pointer value, with tombstones.
 */
#include "handles.h"

#include <stdlib.h>

#include "engine.h"

typedef struct slot_s {
    uintptr_t key; /* 0: empty, 1: tombstone */
    uint32_t magic;
} slot_t;

static slot_t *table;
static size_t cap, used, live;

static size_t hash(uintptr_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

static void grow(void)
{
    size_t ncap = cap ? cap * 2 : 256;
    slot_t *old = table;
    size_t ocap = cap;
    table = sim_xcalloc(ncap, sizeof *table);
    cap = ncap;
    used = live = 0;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].key > 1)
            handle_add((const void *)old[i].key, old[i].magic);
    free(old);
}

void handle_add(const void *h, uint32_t magic)
{
    if ((used + 1) * 2 > cap)
        grow();
    uintptr_t k = (uintptr_t)h;
    for (size_t i = hash(k) & (cap - 1);; i = (i + 1) & (cap - 1)) {
        if (table[i].key <= 1) {
            if (table[i].key == 0)
                used++;
            table[i] = (slot_t){k, magic};
            live++;
            return;
        }
    }
}

static slot_t *find(uintptr_t k)
{
    if (!cap || k <= 1)
        return NULL;
    for (size_t i = hash(k) & (cap - 1);; i = (i + 1) & (cap - 1)) {
        if (table[i].key == 0)
            return NULL;
        if (table[i].key == k)
            return &table[i];
    }
}

void handle_del(const void *h)
{
    slot_t *s = find((uintptr_t)h);
    if (s) {
        s->key = 1;
        live--;
    }
}

bool handle_is(const void *h, uint32_t magic)
{
    slot_t *s = find((uintptr_t)h);
    return s && s->magic == magic;
}

bool handle_take(const void *h, uint32_t magic)
{
    if (!handle_is(h, magic))
        return false;
    handle_del(h);
    return true;
}

size_t handle_list(uint32_t magic, void ***out)
{
    void **v = sim_xcalloc(live + 1, sizeof *v);
    size_t n = 0;
    for (size_t i = 0; i < cap; i++)
        if (table[i].key > 1 && table[i].magic == magic)
            v[n++] = (void *)table[i].key;
    *out = v;
    return n;
}
