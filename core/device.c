/*
 * A device's allocator state: made and destroyed, its settings changed
 * while it runs (memory fraction, capture, streams, hand-outs), the
 * program's synchronisations and polls, empty cache, and private pools
 * created and destroyed (a thread's route to one is alloc.c's, beside the
 * hit path that reads it).
 */
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hand_out.h"
#include "hostalloc.h"
#include "types.h"

/* core_dev_t.gen: unique per device state made */
static _Atomic uint64_t dev_generations;

/* ------------------------------------------------------------------------
 * Devices
 * ---------------------------------------------------------------------- */

/* ------------------------------------------------------------------------
 * The device lock's contended paths (types.h, dev_lock): a waiter marks
 * the word 2 and sleeps on it; whoever gives back a word it finds 2 wakes
 * one waiter, which takes the lock marked 2 again (another may wait).
 * ---------------------------------------------------------------------- */

void dev_lock_wait(core_dev_t *d)
{
    while (atomic_exchange_explicit(&d->lock, 2, memory_order_acquire) != 0)
        syscall(SYS_futex, (uint32_t *)&d->lock, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

void dev_lock_wake(core_dev_t *d)
{
    syscall(SYS_futex, (uint32_t *)&d->lock, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void ppool_init(ppool_t *pp, int id)
{
    memset(pp, 0, sizeof *pp);
    pp->id = id;
    pp->small.small = true;
    pp->small.owner = pp;
    pp->large.owner = pp;
}

/* The bytes this allocator may hold: per_process_memory_fraction of the
 * device, and limit_mb, whichever is smaller. */
static size_t allowed_bytes(const core_dev_t *d)
{
    size_t allowed = SIZE_MAX;
    size_t free_bytes = 0, total = 0;
    if (d->conf.memory_fraction < 1.0 && d->be.mem_info(d->be.ctx, d->device, &free_bytes, &total) == CORE_OK)
        allowed = (size_t)(d->conf.memory_fraction * (double)total);
    if (d->conf.limit && d->conf.limit < allowed)
        allowed = d->conf.limit;
    return allowed;
}

core_dev_t *core_dev_new(const core_backend_t *backend, int device, const conf_t *conf)
{
    core_dev_t *d = hostalloc_calloc(1, sizeof *d);
    if (!d)
        return NULL;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    d->born_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    d->device = device;
    d->gen = ++dev_generations;
    d->conf = *conf;
    /* Preallocate carves every request from one chunk: max_split_size would
     * make the chunk's rest an oversize block that no request below it may
     * take, so each would miss, ask for a chunk of its own and run out. */
    if (conf->strategy == CONF_STRATEGY_PREALLOCATE)
        d->conf.max_split_size = SIZE_MAX;
    d->be = *backend;
    ppool_init(&d->defaults, 0);
    d->allowed = allowed_bytes(d);
    d->stats.max_split_size = d->conf.max_split_size; /* the effective value */
    /* Expandable segments need the backend's virtual memory: without it the
     * setting is ignored (the caller reports it, core_expandable). */
    size_t g =
        conf->expandable_segments && backend->vmm_granularity ? backend->vmm_granularity(backend->ctx, device) : 0;
    if (g && (g & (g - 1)) == 0 && backend->va_reserve && backend->va_release && backend->map && backend->unmap) {
        d->exp_page_small = g > d->conf.small_segment_size ? g : d->conf.small_segment_size;
        d->exp_page_large = (d->conf.expandable_page + g - 1) / g * g;
    } else {
        d->conf.expandable_segments = false;
    }
    if (!map_grow(d)) {
        hostalloc_free(d);
        return NULL;
    }
    return d;
}

ppool_t *ppool_find(core_dev_t *d, int id)
{
    if (id == 0)
        return &d->defaults;
    for (ppool_t *p = d->privates; p; p = p->next)
        if (p->id == id && !p->destroyed)
            return p;
    return NULL;
}

void ppool_unlink_free(core_dev_t *d, ppool_t *pp)
{
    for (ppool_t **p = &d->privates; *p; p = &(*p)->next)
        if (*p == pp) {
            *p = pp->next;
            pool_fini(&pp->small);
            pool_fini(&pp->large);
            hostalloc_free(pp);
            return;
        }
}

void core_dev_destroy(core_dev_t *d)
{
    if (!d)
        return;
    dev_lock(d);
    pend_release_all(d, PEND_WAIT);
    for (seg_t *s = d->segs, *next; s; s = next) {
        next = s->next;
        if (s->expandable) {
            exp_seg_destroy(d, s);
            continue;
        }
        block_free_chain(s->first);
        d->be.seg_free(d->be.ctx, d->device, s->addr, s->size);
        hostalloc_free(s);
    }
    while (d->spare) {
        block_t *b = d->spare;
        d->spare = b->pend_next;
        hostalloc_free(b);
    }
    pool_fini(&d->defaults.small);
    pool_fini(&d->defaults.large);
    while (d->privates) {
        ppool_t *p = d->privates;
        d->privates = p->next;
        pool_fini(&p->small);
        pool_fini(&p->large);
        hostalloc_free(p);
    }
    hostalloc_free(d->map.buckets);
    jr_fini(&d->jr);
    dev_unlock(d);
    hostalloc_free(d);
}

int core_set_memory_fraction(core_dev_t *d, double fraction)
{
    if (!(fraction > 0.0 && fraction <= 1.0))
        return -1;
    dev_lock(d);
    d->conf.memory_fraction = fraction;
    d->allowed = allowed_bytes(d);
    dev_unlock(d);
    return 0;
}

void core_poll(core_dev_t *d)
{
    dev_lock(d);
    jr_note(d, JR_POLL, 0, 0, 0, 0, 0, 0);
    if (d->pending_bytes && !d->capturing)
        pend_poll(d);
    dev_unlock(d);
}

void core_fence(core_dev_t *d)
{
    dev_lock(d);
    jr_note(d, JR_FENCE, 0, 0, 0, 0, 0, 0);
    pend_close(d); /* nothing while capturing */
    dev_unlock(d);
}

void core_set_streams(core_dev_t *d, unsigned n)
{
    dev_lock(d);
    if (n != d->streams) {
        jr_note(d, JR_STREAMS, 0, 0, 0, 0, n, d->streams);
        d->streams = n;
    }
    dev_unlock(d);
}

void core_stop_hand_outs(core_dev_t *d)
{
    dev_lock(d);
    hand_out_stop(d);
    dev_unlock(d);
}

void core_set_capturing(core_dev_t *d, bool on)
{
    dev_lock(d);
    jr_note(d, JR_CAPTURE, on, 0, 0, 0, 0, 0);
    d->capturing = on;
    dev_unlock(d);
}

void core_fallback_served(core_dev_t *d)
{
    dev_lock(d);
    if (d->stats.num_ooms)
        d->stats.num_ooms--;
    d->stats.num_fallback_served++;
    dev_unlock(d);
}

void core_synchronized(core_dev_t *d)
{
    dev_lock(d);
    jr_note(d, JR_SYNC, 0, 0, 0, 0, 0, 0);
    if (d->pending_bytes)
        pend_release_all(d, PEND_KNOWN);
    if (d->conf.expandable_segments)
        exp_all_idle(d);
    dev_unlock(d);
}

void core_empty_cache(core_dev_t *d, int pool_id)
{
    dev_lock(d);
    jr_note(d, JR_EMPTY, 0, pool_id, 0, 0, 0, 0);
    if (d->capturing) { /* waits and releases are illegal now */
        dev_unlock(d);
        return;
    }
    pend_release_all(d, PEND_WAIT);
    if (pool_id < 0) {
        seg_release_free(d, NULL, false, SIZE_MAX);
    } else {
        ppool_t *pp = ppool_find(d, pool_id);
        if (pp == &d->defaults)
            seg_release_free(d, pp, false, SIZE_MAX);
        /* a live private pool keeps its segments */
    }
    dev_unlock(d);
}

size_t core_yield(core_dev_t *d, size_t want)
{
    size_t given = 0;
    dev_lock(d);
    if (!d->capturing) {
        pend_close(d);
        if (d->pending_bytes)
            pend_poll(d);
    }
    while (!d->capturing && given < want) {
        size_t one = seg_release_free(d, NULL, false, 1);
        if (!one)
            break;
        given += one;
        dev_unlock(d); /* the program's calls may go between two releases */
        dev_lock(d);
    }
    if (given) {
        d->stats.num_yields_given++;
        d->stats.yield_bytes_given += given;
    }
    dev_unlock(d);
    return given;
}

void core_note_yield_received(core_dev_t *d, size_t bytes)
{
    dev_lock(d);
    d->stats.num_yields_received++;
    d->stats.yield_bytes_received += bytes;
    dev_unlock(d);
}

int core_pool_create(core_dev_t *d)
{
    ppool_t *pp = hostalloc_malloc(sizeof *pp);
    if (!pp)
        return -1;
    dev_lock(d);
    ppool_init(pp, ++d->next_pool_id);
    jr_note(d, JR_POOL_CREATE, 0, pp->id, 0, 0, 0, 0);
    pp->next = d->privates;
    d->privates = pp;
    int id = pp->id;
    dev_unlock(d);
    return id;
}

void core_dev_solo(core_dev_t *d)
{
    d->solo = true;
}

void core_set_birth_times(core_dev_t *d, bool on)
{
    dev_lock(d);
    d->births = on;
    dev_unlock(d);
}

int core_pool_destroy(core_dev_t *d, int pool_id)
{
    dev_lock(d);
    ppool_t *pp = pool_id > 0 ? ppool_find(d, pool_id) : NULL;
    if (!pp) {
        dev_unlock(d);
        return -1;
    }
    /* Its blocks still pending go back when their fences complete, and their
     * segments with them. */
    jr_note(d, JR_POOL_DESTROY, 0, pool_id, 0, 0, 0, 0);
    pp->destroyed = true;
    if (pp->segments == 0)
        ppool_unlink_free(d, pp);
    else /* seg_release frees pp with its last segment: pp is not read after this */
        seg_release_free(d, pp, false, SIZE_MAX);
    dev_unlock(d);
    return 0;
}
