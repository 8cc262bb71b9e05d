/*
 * The live allocations of a replay, by the address each got in the
 * recording: the job's addresses only match frees to allocations.  The
 * address leads through core/hashtab to an entry of a growable array
 * (core/vec); a freed entry goes on a free list for the next allocation,
 * so the array stays as long as the most allocations live at once.
 */
#include "engine.h"
#include "hostalloc.h"
#include "vec.h"

rp_live_t *rp_livemap_find(rp_livemap_t *m, uint64_t addr)
{
    uint64_t i;
    return ht_get(&m->index, addr, &i) ? &m->ent[i] : NULL;
}

/* Puts entry i on the free list. */
static void entry_release(rp_livemap_t *m, size_t i)
{
    m->ent[i].next_free = m->free_head;
    m->free_head = i + 1;
}

rp_live_t *rp_livemap_put(rp_livemap_t *m, uint64_t addr)
{
    uint64_t *at = ht_find(&m->index, addr);
    size_t i;
    if (at) {
        i = (size_t)*at;
    } else {
        if (m->free_head) {
            i = m->free_head - 1;
            m->free_head = m->ent[i].next_free;
        } else if (vec_reserve((void **)&m->ent, &m->cap_ent, m->n_ent + 1, sizeof *m->ent)) {
            i = m->n_ent++;
        } else {
            return NULL;
        }
        if (!ht_put(&m->index, addr, i)) {
            entry_release(m, i);
            return NULL;
        }
    }
    m->ent[i] = (rp_live_t){0};
    return &m->ent[i];
}

void rp_livemap_del(rp_livemap_t *m, uint64_t addr)
{
    uint64_t i;
    if (ht_del(&m->index, addr, &i))
        entry_release(m, (size_t)i);
}

void rp_livemap_fini(rp_livemap_t *m)
{
    ht_fini(&m->index);
    hostalloc_free(m->ent);
    *m = (rp_livemap_t){0};
}
