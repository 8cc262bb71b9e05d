/*
 * The in-process backend (see backend_mem.h).
 */
#include "backend_mem.h"

#include <string.h>

#include "hostalloc.h"
#include "vec.h"

void mem_backend_init(mem_backend_t *m, size_t capacity)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
    m->capacity = capacity;
    m->next_addr = (uintptr_t)1 << 40; /* looks like a device address; never 0 */
    m->auto_complete = true;
    m->fail_code = CORE_ENOMEM;
    m->granularity = (size_t)2 << 20;
}

void mem_backend_fini(mem_backend_t *m)
{
    hostalloc_free(m->segs);
    hostalloc_free(m->pages);
    hostalloc_free(m->alias);
    pthread_mutex_destroy(&m->lock);
}

/* The backend's lock, skipped when one thread owns it (solo). */
static inline void mb_lock(mem_backend_t *m)
{
    if (!m->solo)
        pthread_mutex_lock(&m->lock);
}

static inline void mb_unlock(mem_backend_t *m)
{
    if (!m->solo)
        pthread_mutex_unlock(&m->lock);
}

static int seg_alloc(void *ctx, int device, size_t size, uintptr_t *addr)
{
    mem_backend_t *m = ctx;
    (void)device;
    mb_lock(m);
    int r = CORE_OK;
    if (m->fail_allocs > 0) {
        m->fail_allocs--;
        r = m->fail_code;
    } else if (size > m->capacity - m->used) {
        r = CORE_ENOMEM;
    } else if (!vec_reserve((void **)&m->segs, &m->cap_segs, m->nsegs + 1, sizeof *m->segs)) {
        r = CORE_EFAIL;
    }
    if (r == CORE_OK) {
        *addr = m->next_addr;
        m->next_addr += (size + 4095) & ~(size_t)4095;
        m->used += size;
        m->segs[m->nsegs].addr = *addr;
        m->segs[m->nsegs].size = size;
        m->nsegs++;
        m->n_alloc++;
        if (size > m->max_seg)
            m->max_seg = size;
    }
    mb_unlock(m);
    return r;
}

static void seg_free(void *ctx, int device, uintptr_t addr, size_t size)
{
    mem_backend_t *m = ctx;
    (void)device;
    mb_lock(m);
    size_t i = 0;
    while (i < m->nsegs && m->segs[i].addr != addr)
        i++;
    if (i == m->nsegs || m->segs[i].size != size) {
        m->n_bad_free++;
    } else {
        m->used -= size;
        m->segs[i] = m->segs[m->nsegs - 1];
        m->nsegs--;
        m->n_free++;
    }
    mb_unlock(m);
}

static int mem_info(void *ctx, int device, size_t *free_bytes, size_t *total)
{
    mem_backend_t *m = ctx;
    (void)device;
    mb_lock(m);
    *free_bytes = m->capacity - m->used;
    *total = m->total ? m->total : m->capacity;
    mb_unlock(m);
    return CORE_OK;
}

static int event_record(void *ctx, int device, core_stream_t stream, uint64_t *event)
{
    mem_backend_t *m = ctx;
    (void)device;
    mb_lock(m);
    if (m->fail_records > 0) {
        m->fail_records--;
        mb_unlock(m);
        return CORE_EFAIL;
    }
    *event = ++m->next_event;
    if (m->auto_complete)
        m->completed = m->next_event;
    m->n_record++;
    if (stream == 0)
        m->n_fence++;
    mb_unlock(m);
    return CORE_OK;
}

/* One timeline: a marker on several streams is one event. */
static int event_record_on(void *ctx, int device, const core_stream_t *streams, size_t n, uint64_t *event)
{
    (void)streams, (void)n;
    return event_record(ctx, device, 1, event);
}

static int event_query(void *ctx, int device, uint64_t event)
{
    mem_backend_t *m = ctx;
    (void)device;
    mb_lock(m);
    m->n_query++;
    int done = event <= m->completed;
    mb_unlock(m);
    return done;
}

/* Waiting makes the event (and, the timeline being one, all before it)
 * complete. */
static void event_wait(void *ctx, int device, uint64_t event)
{
    mem_backend_t *m = ctx;
    (void)device;
    mb_lock(m);
    m->n_wait++;
    if (event > m->completed)
        m->completed = event;
    mb_unlock(m);
}

static void event_release(void *ctx, int device, uint64_t event)
{
    (void)ctx, (void)device, (void)event;
}

static int device_sync(void *ctx, int device)
{
    mem_backend_t *m = ctx;
    (void)device;
    mb_lock(m);
    if (m->fail_syncs > 0) {
        m->fail_syncs--;
        mb_unlock(m);
        return CORE_EFAIL;
    }
    m->n_sync++;
    m->completed = m->next_event;
    mb_unlock(m);
    return CORE_OK;
}

static int hold_query(void *ctx, int device, uint64_t token)
{
    mem_backend_t *m = ctx;
    (void)device;
    mb_lock(m);
    m->n_hold_query++;
    int over = token <= m->holds_over;
    mb_unlock(m);
    return over;
}

/* ------------------------------------------------------------------------
 * Virtual memory
 * ---------------------------------------------------------------------- */

static size_t vmm_granularity(void *ctx, int device)
{
    mem_backend_t *m = ctx;
    (void)device;
    return m->granularity;
}

static int va_reserve(void *ctx, int device, size_t size, size_t align, uintptr_t *addr)
{
    mem_backend_t *m = ctx;
    (void)device;
    mb_lock(m);
    if (size > m->max_seg)
        m->max_seg = size;
    m->next_addr = (m->next_addr + align - 1) / align * align;
    *addr = m->next_addr;
    m->next_addr += size;
    m->n_va++;
    mb_unlock(m);
    return CORE_OK;
}

static void va_release(void *ctx, int device, uintptr_t addr, size_t size)
{
    mem_backend_t *m = ctx;
    (void)device, (void)addr, (void)size;
    mb_lock(m);
    m->n_va_release++;
    mb_unlock(m);
}

/* Index of the first mapped page >= addr. */
static size_t page_lower(const mem_backend_t *m, uintptr_t addr)
{
    size_t lo = 0, hi = m->npages;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->pages[mid] < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Mapped memory is kept as granules (whatever the page of the call). */
static void unmap_locked(mem_backend_t *m, uintptr_t addr, size_t size)
{
    size_t g = m->granularity;
    size_t i = page_lower(m, addr), j = i;
    while (j < m->npages && m->pages[j] < addr + size)
        j++;
    if (size % g || (j - i) * g != size) {
        m->n_bad_unmap++;
        return;
    }
    memmove(&m->pages[i], &m->pages[j], (m->npages - j) * sizeof *m->pages);
    m->npages -= j - i;
    m->used -= size;
    m->n_unmap_pages += size / (m->page ? m->page : g);
}

static int map(void *ctx, int device, uintptr_t addr, size_t size, size_t page)
{
    mem_backend_t *m = ctx;
    (void)device;
    mb_lock(m);
    size_t g = m->granularity, n = g ? size / g : 0;
    int r = CORE_OK;
    if (!g || !page || size % page || page % g) {
        r = CORE_EFAIL;
    } else if (size > m->capacity - m->used) {
        r = CORE_ENOMEM;
    } else if (!vec_reserve((void **)&m->pages, &m->cap_pages, m->npages + n, sizeof *m->pages)) {
        r = CORE_EFAIL;
    }
    size_t i = page_lower(m, addr);
    if (r == CORE_OK && i < m->npages && m->pages[i] < addr + size)
        r = CORE_EFAIL; /* already mapped */
    if (r == CORE_OK) {
        m->page = page;
        memmove(&m->pages[i + n], &m->pages[i], (m->npages - i) * sizeof *m->pages);
        for (size_t k = 0; k < n; k++)
            m->pages[i + k] = addr + k * g;
        m->npages += n;
        m->used += size;
        if (m->fail_maps > 0) { /* fail half way, as a driver can, and undo */
            m->fail_maps--;
            unmap_locked(m, addr, size);
            m->n_unmap_pages -= size / page;
            r = CORE_ENOMEM;
        } else {
            m->n_map++;
            m->n_map_pages += size / page;
        }
    }
    mb_unlock(m);
    return r;
}

/* Index of the second mapping that overlaps [addr, addr+size), or nalias. */
static size_t alias_find(const mem_backend_t *m, uintptr_t addr, size_t size)
{
    for (size_t i = 0; i < m->nalias; i++)
        if (addr < m->alias[i].addr + m->alias[i].size && m->alias[i].addr < addr + size)
            return i;
    return m->nalias;
}

static void unmap(void *ctx, int device, uintptr_t addr, size_t size)
{
    mem_backend_t *m = ctx;
    (void)device;
    mb_lock(m);
    m->n_unmap++;
    m->n_unmap_busy += m->completed < m->next_event;
    size_t i = alias_find(m, addr, size);
    if (i == m->nalias) {
        unmap_locked(m, addr, size);
    } else if (m->alias[i].addr == addr && m->alias[i].size == size) {
        m->alias[i] = m->alias[--m->nalias];
    } else {
        m->n_bad_unmap++; /* part of a second mapping, or more than it */
    }
    mb_unlock(m);
}

static int map_alias(void *ctx, int device, uintptr_t addr, uintptr_t from, size_t size)
{
    mem_backend_t *m = ctx;
    (void)device;
    mb_lock(m);
    m->n_alias++;
    size_t g = m->granularity, i = page_lower(m, from), j = page_lower(m, addr);
    bool mapped = g && size && size % g == 0 && i + size / g <= m->npages && m->pages[i] == from &&
                  m->pages[i + size / g - 1] == from + size - g;
    bool taken = (j < m->npages && m->pages[j] < addr + size) || alias_find(m, addr, size) < m->nalias;
    int r = mapped && !taken ? CORE_OK : CORE_EFAIL;
    if (r == CORE_OK && !vec_reserve((void **)&m->alias, &m->cap_alias, m->nalias + 1, sizeof *m->alias))
        r = CORE_EFAIL;
    if (r == CORE_OK) {
        m->alias[m->nalias++] = (struct mem_alias_s){addr, from, size};
    } else {
        m->n_bad_alias++;
    }
    mb_unlock(m);
    return r;
}

uintptr_t mem_backend_resolve(mem_backend_t *m, uintptr_t addr)
{
    mb_lock(m);
    size_t i = alias_find(m, addr, 1);
    if (i < m->nalias)
        addr = m->alias[i].from + (addr - m->alias[i].addr);
    mb_unlock(m);
    return addr;
}

size_t mem_backend_mapped(mem_backend_t *m)
{
    mb_lock(m);
    size_t n = m->npages * m->granularity;
    mb_unlock(m);
    return n;
}

void mem_backend_complete_all(mem_backend_t *m)
{
    mb_lock(m);
    m->completed = m->next_event;
    mb_unlock(m);
}

static int fence_order(void *ctx, int device, uint64_t fence, uint64_t first_alloc)
{
    (void)device;
    (void)first_alloc;
    mem_backend_t *m = ctx;
    mb_lock(m);
    m->n_order++;
    if (fence > m->ordered)
        m->ordered = fence;
    mb_unlock(m);
    return CORE_OK;
}

core_backend_t mem_backend_vtable(mem_backend_t *m)
{
    return (core_backend_t){
        .ctx = m,
        .seg_alloc = seg_alloc,
        .seg_free = seg_free,
        .mem_info = mem_info,
        .event_record = event_record,
        .event_record_on = event_record_on,
        .event_query = event_query,
        .event_wait = event_wait,
        .event_release = event_release,
        .device_sync = device_sync,
        .hold_query = hold_query,
        .vmm_granularity = vmm_granularity,
        .va_reserve = va_reserve,
        .va_release = va_release,
        .map = map,
        .unmap = unmap,
        .map_alias = map_alias,
        .fence_order = m->orders ? fence_order : NULL,
    };
}
