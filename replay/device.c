/*
 * The replay's device: memory counted in 2 MiB pages wherever they lie, as
 * the simulated device (subprojects/cusim/src/engine_mem.c) and a GPU count it.  A request
 * fails only when too few pages are free; addresses come first fit from a
 * range eight times the capacity, so the core's address-ordered choices
 * (best-fit ties, garbage collection) see what they see in a live run on
 * the simulated device, and no pattern of frees leaves free pages that no
 * request can use.  Requests up to 1 MiB are packed at 512 bytes into pages
 * of their own, one page charged while any of them lives.
 *
 * The two implementations are kept apart on purpose (the simulator is
 * independent of cucache); the round-trip test (tests/replay/roundtrip.sh)
 * is what says they agree.
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "hostalloc.h"
#include "replay.h"
#include "vec.h"

#define PAGE ((uint64_t)2 << 20)
#define GRAIN ((uint64_t)512)
#define SMALL_MAX ((uint64_t)1 << 20)
#define GRAINS (PAGE / GRAIN)
/* Where device d's addresses start: (d + 1) * SPACE_STEP, never 0. */
#define SPACE_STEP ((uint64_t)1 << 44)

struct rp_extent_s {
    uint64_t off, len; /* free addresses [off, off+len) from the base */
};

struct rp_smallpage_s {
    uint64_t addr;
    uint64_t bits[GRAINS / 64]; /* grain i in use: bit i */
    uint64_t used;              /* grains in use */
};

int rp_space_init(rp_space_t *s, int device, uint64_t capacity)
{
    memset(s, 0, sizeof *s);
    s->pages = capacity / PAGE;
    s->capacity = s->pages * PAGE;
    s->base = SPACE_STEP * (uint64_t)(device + 1);
    s->span = capacity < (SPACE_STEP - PAGE) / 8 ? s->capacity * 8 : SPACE_STEP - PAGE;
    if (!vec_reserve((void **)&s->ext, &s->cap_ext, 64, sizeof *s->ext))
        return -1;
    s->ext[0] = (rp_extent_t){0, s->span};
    s->next = 1;
    return 0;
}

int rp_space_map(rp_space_t *s, uint64_t size)
{
    uint64_t n = size / PAGE;
    if (size % PAGE || n > s->pages - s->pages_used)
        return size % PAGE ? CORE_EFAIL : CORE_ENOMEM;
    s->pages_used += n;
    return CORE_OK;
}

void rp_space_unmap(rp_space_t *s, uint64_t size)
{
    s->pages_used -= size / PAGE;
}

void rp_space_fini(rp_space_t *s)
{
    hostalloc_free(s->ext);
    hostalloc_free(s->small);
    memset(s, 0, sizeof *s);
}

uint64_t rp_space_free_bytes(const rp_space_t *s)
{
    return (s->pages - s->pages_used) * PAGE;
}

static int ext_insert(rp_space_t *s, size_t i, rp_extent_t e)
{
    if (!vec_reserve((void **)&s->ext, &s->cap_ext, s->next + 1, sizeof *s->ext))
        return -1;
    memmove(&s->ext[i + 1], &s->ext[i], (s->next - i) * sizeof *s->ext);
    s->ext[i] = e;
    s->next++;
    return 0;
}

static void ext_remove(rp_space_t *s, size_t i)
{
    memmove(&s->ext[i], &s->ext[i + 1], (s->next - i - 1) * sizeof *s->ext);
    s->next--;
}

/* n pages charged at the first addresses long enough: CORE_OK with *addr,
 * CORE_ENOMEM, or CORE_EFAIL (out of host memory). */
static int pages_take(rp_space_t *s, uint64_t n, uint64_t *addr)
{
    if (n > s->pages - s->pages_used)
        return CORE_ENOMEM;
    for (size_t i = 0; i < s->next; i++) {
        rp_extent_t e = s->ext[i];
        if (e.len < n * PAGE)
            continue;
        if (e.len > n * PAGE) {
            s->ext[i].off += n * PAGE, s->ext[i].len -= n * PAGE;
        } else {
            ext_remove(s, i);
        }
        s->pages_used += n;
        *addr = s->base + e.off;
        return CORE_OK;
    }
    return CORE_ENOMEM;
}

static void pages_give(rp_space_t *s, uint64_t addr, uint64_t n)
{
    uint64_t off = addr - s->base, len = n * PAGE;
    size_t i = 0;
    while (i < s->next && s->ext[i].off < off)
        i++;
    if (ext_insert(s, i, (rp_extent_t){off, len}) != 0)
        return; /* out of host memory: the addresses stay lost, nothing breaks */
    s->pages_used -= n;
    if (i + 1 < s->next && s->ext[i].off + s->ext[i].len == s->ext[i + 1].off) {
        s->ext[i].len += s->ext[i + 1].len;
        ext_remove(s, i + 1);
    }
    if (i > 0 && s->ext[i - 1].off + s->ext[i - 1].len == s->ext[i].off) {
        s->ext[i - 1].len += s->ext[i].len;
        ext_remove(s, i);
    }
}

/* The first run of n clear grains of a small page, or -1. */
static long grains_find(const rp_smallpage_t *p, uint64_t n)
{
    uint64_t run = 0;
    for (uint64_t i = 0; i < GRAINS; i++) {
        run = (p->bits[i / 64] >> (i % 64)) & 1 ? 0 : run + 1;
        if (run == n)
            return (long)(i + 1 - n);
    }
    return -1;
}

static void grains_set(rp_smallpage_t *p, uint64_t first, uint64_t n, bool on)
{
    for (uint64_t i = first; i < first + n; i++) {
        if (on)
            p->bits[i / 64] |= (uint64_t)1 << (i % 64);
        else
            p->bits[i / 64] &= ~((uint64_t)1 << (i % 64));
    }
    p->used = on ? p->used + n : p->used - n;
}

static int small_take(rp_space_t *s, uint64_t len, uint64_t *addr)
{
    uint64_t n = len / GRAIN;
    for (size_t i = 0; i < s->nsmall; i++) {
        long g = GRAINS - s->small[i].used >= n ? grains_find(&s->small[i], n) : -1;
        if (g >= 0) {
            grains_set(&s->small[i], (uint64_t)g, n, true);
            *addr = s->small[i].addr + (uint64_t)g * GRAIN;
            return CORE_OK;
        }
    }
    if (!vec_reserve((void **)&s->small, &s->cap_small, s->nsmall + 1, sizeof *s->small))
        return CORE_EFAIL;
    uint64_t page;
    int rc = pages_take(s, 1, &page);
    if (rc != CORE_OK)
        return rc;
    size_t i = 0;
    while (i < s->nsmall && s->small[i].addr < page)
        i++;
    memmove(&s->small[i + 1], &s->small[i], (s->nsmall - i) * sizeof *s->small);
    s->nsmall++;
    memset(&s->small[i], 0, sizeof s->small[i]);
    s->small[i].addr = page;
    grains_set(&s->small[i], 0, n, true);
    *addr = page;
    return CORE_OK;
}

static void small_give(rp_space_t *s, uint64_t addr, uint64_t len)
{
    uint64_t page = addr & ~(PAGE - 1);
    for (size_t i = 0; i < s->nsmall; i++) {
        if (s->small[i].addr != page)
            continue;
        grains_set(&s->small[i], (addr - page) / GRAIN, len / GRAIN, false);
        if (s->small[i].used == 0) {
            memmove(&s->small[i], &s->small[i + 1], (s->nsmall - i - 1) * sizeof *s->small);
            s->nsmall--;
            pages_give(s, page, 1);
        }
        return;
    }
}

int rp_space_alloc(rp_space_t *s, uint64_t size, uint64_t *addr)
{
    if (size == 0 || size > s->capacity)
        return CORE_ENOMEM;
    if (size <= SMALL_MAX)
        return small_take(s, (size + GRAIN - 1) / GRAIN * GRAIN, addr);
    return pages_take(s, (size + PAGE - 1) / PAGE, addr);
}

void rp_space_free(rp_space_t *s, uint64_t addr, uint64_t size)
{
    if (size <= SMALL_MAX)
        small_give(s, addr, (size + GRAIN - 1) / GRAIN * GRAIN);
    else
        pages_give(s, addr, (size + PAGE - 1) / PAGE);
}
