/*
 * hashtab: the one hash table of the core, the what-if, the replay and
 * stats: a 64-bit key to a 64-bit value (a number, an index, or a pointer
 * through uintptr_t).
 *
 * Open addressing with linear probing over a power-of-two array of
 * {key, value} slots, so that a lookup reads one cache line in the common
 * case.  The home slot is the top bits of the key times 2^64 / phi
 * (Fibonacci hashing): every bit of the key reaches them, so sequential
 * numbers and aligned addresses spread.  The load stays at most one half:
 * the table doubles before an insert would pass it.  A delete shifts the
 * rest of its probe run back over the hole (no tombstones), so lookups do
 * not slow down after many deletes.
 *
 * Key 0 marks an empty slot; key 0 itself is kept beside the array.
 *
 * A zeroed ht_t is an empty table: nothing is allocated before the first
 * insert.  Memory from hostalloc.  Not thread-safe: the owner's lock.
 * A pointer ht_find returns is valid until the next insert or delete.
 *
 *   ht_t t = {0};
 *   if (!ht_put(&t, addr, size)) ...out of host memory...
 *   uint64_t *v = ht_find(&t, addr);      // NULL: absent
 *   ht_del(&t, addr, &size);              // false: absent
 *   ht_fini(&t);
 */
#ifndef CUCACHE_CORE_HASHTAB_H
#define CUCACHE_CORE_HASHTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ht_slot_s {
    uint64_t key; /* 0: empty */
    uint64_t val;
} ht_slot_t;

typedef struct ht_s {
    ht_slot_t *slots; /* cap slots */
    size_t cap;       /* 0 (nothing allocated), or a power of two >= HT_MIN_CAP */
    size_t used;      /* slots holding a key; used * 2 <= cap unless host memory ran short */
    unsigned shift;   /* 64 - log2(cap): the home slot is the hash's top bits */
    bool has_zero;    /* key 0 is held, its value in zero_val */
    uint64_t zero_val;
} ht_t;

enum { HT_MIN_CAP = 16 };

/* The slot where key's probe run starts (cap > 0). */
static inline size_t ht_home(const ht_t *t, uint64_t key)
{
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> t->shift);
}

/* The slot holding key (not 0), or SIZE_MAX. */
static inline size_t ht_index(const ht_t *t, uint64_t key)
{
    if (!t->cap)
        return SIZE_MAX;
    size_t mask = t->cap - 1;
    for (size_t i = ht_home(t, key);; i = (i + 1) & mask) {
        if (t->slots[i].key == key)
            return i;
        if (t->slots[i].key == 0)
            return SIZE_MAX;
    }
}

/* The value of key, or NULL when the table does not hold it. */
static inline uint64_t *ht_find(ht_t *t, uint64_t key)
{
    if (key == 0)
        return t->has_zero ? &t->zero_val : NULL;
    size_t i = ht_index(t, key);
    return i == SIZE_MAX ? NULL : &t->slots[i].val;
}

/* Whether the table holds key; its value in *val (when val is not NULL). */
static inline bool ht_get(const ht_t *t, uint64_t key, uint64_t *val)
{
    if (key == 0) {
        if (t->has_zero && val)
            *val = t->zero_val;
        return t->has_zero;
    }
    size_t i = ht_index(t, key);
    if (i != SIZE_MAX && val)
        *val = t->slots[i].val;
    return i != SIZE_MAX;
}

/* Keys held. */
static inline size_t ht_count(const ht_t *t)
{
    return t->used + t->has_zero;
}

/* A key for a byte string (64-bit FNV-1a), for tables keyed by text: two
 * texts may share a key, so a hit still compares the text. */
static inline uint64_t ht_key_bytes(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Inserts key with val, or replaces its value.  False (the table
 * unchanged) only when host memory is short and the table is full. */
bool ht_put(ht_t *t, uint64_t key, uint64_t val);
/* Removes key; false when the table does not hold it.  Its value in *val
 * (when val is not NULL). */
bool ht_del(ht_t *t, uint64_t key, uint64_t *val);
/* Room for n keys in all without growing; false when host memory is
 * short (the table unchanged). */
bool ht_reserve(ht_t *t, size_t n);
/* Frees the slots: an empty table again. */
void ht_fini(ht_t *t);

#endif
