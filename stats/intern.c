/*
 * Interning tables (st.h, st_intern_t): a key of bytes is given a 32-bit
 * id once and keeps it for the life of the process.  Call stacks
 * (stack.c), and the file names, function names and frames of Python
 * stacks (pystack.c), are interned here, so that an allocation carries
 * one id and a loop allocating from one place a million times keeps one
 * entry.
 *
 * Lookups take no lock: an entry is written once and published with a
 * release store of its id into its hash slot, and an entry is never
 * changed or freed.  Insertions (a key never seen before) take the table's
 * mutex.  A table holds at most `max` entries; past that, or without host
 * memory, st_intern returns 0 and the caller says what that means.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "hostalloc.h"
#include "st.h"

struct st_interned_s {
    uint64_t hash;
    uint32_t len;   /* bytes of key */
    uint64_t key[]; /* len bytes; 8-aligned, so that a key of words reads back as words */
};

static uint64_t intern_hash(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = 0x9e3779b97f4a7c15u ^ (uint64_t)len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h ^= w;
        h *= 0xff51afd7ed558ccdu;
        h ^= h >> 33;
    }
    uint64_t tail = 0;
    memcpy(&tail, p + i, len - i);
    h ^= tail;
    h *= 0xc4ceb9fe1a85ec53u;
    h ^= h >> 33;
    return h;
}

int st_intern_init(st_intern_t *t, uint32_t max)
{
    if (t->slots)
        return 0;
    size_t nslots = 2;
    while (nslots < (size_t)max * 2) /* twice the entries, so that probes stay short */
        nslots <<= 1;
    _Atomic uint32_t *slots = hostalloc_calloc(nslots, sizeof *slots);
    struct st_interned_s *_Atomic *entries = hostalloc_calloc((size_t)max + 1, sizeof *entries);
    if (!slots || !entries) {
        hostalloc_free((void *)slots);
        hostalloc_free((void *)entries);
        return -1;
    }
    pthread_mutex_init(&t->lock, NULL);
    t->nslots = nslots;
    t->max = max;
    t->count = 1; /* id 0: none */
    t->entries = entries;
    atomic_store_explicit(&t->slots, slots, memory_order_release);
    return 0;
}

static bool intern_same(const struct st_interned_s *e, uint64_t h, const void *key, size_t len)
{
    return e->hash == h && e->len == len && memcmp(e->key, key, len) == 0;
}

uint32_t st_intern(st_intern_t *t, const void *key, size_t len)
{
    _Atomic uint32_t *slots = atomic_load_explicit(&t->slots, memory_order_acquire);
    if (!slots || len > UINT32_MAX)
        return 0;
    uint64_t h = intern_hash(key, len);
    size_t mask = t->nslots - 1, i = (size_t)h & mask;
    for (;; i = (i + 1) & mask) {
        uint32_t id = atomic_load_explicit(&slots[i], memory_order_acquire);
        if (!id)
            break;
        if (intern_same(atomic_load_explicit(&t->entries[id], memory_order_relaxed), h, key, len))
            return id;
    }
    /* new: the slot found empty may have been taken since */
    pthread_mutex_lock(&t->lock);
    uint32_t id;
    for (;; i = (i + 1) & mask) {
        id = atomic_load_explicit(&slots[i], memory_order_relaxed);
        if (!id)
            break;
        if (intern_same(atomic_load_explicit(&t->entries[id], memory_order_relaxed), h, key, len)) {
            pthread_mutex_unlock(&t->lock);
            return id;
        }
    }
    struct st_interned_s *e = t->count <= t->max ? hostalloc_malloc(sizeof *e + len) : NULL;
    if (!e) {
        pthread_mutex_unlock(&t->lock);
        return 0;
    }
    e->hash = h;
    e->len = (uint32_t)len;
    memcpy(e->key, key, len);
    id = t->count++;
    atomic_store_explicit(&t->entries[id], e, memory_order_relaxed);
    atomic_store_explicit(&slots[i], id, memory_order_release); /* publishes the entry */
    pthread_mutex_unlock(&t->lock);
    return id;
}

const void *st_intern_key(st_intern_t *t, uint32_t id, size_t *len)
{
    if (!atomic_load_explicit(&t->slots, memory_order_acquire) || id == 0 || id > t->max)
        return NULL;
    const struct st_interned_s *e = atomic_load_explicit(&t->entries[id], memory_order_acquire);
    if (!e)
        return NULL;
    *len = e->len;
    return e->key;
}

void st_intern_atfork_child(st_intern_t *t)
{
    pthread_mutex_init(&t->lock, NULL);
}
