/*
 * One replay: an input's events through the core, on the in-process backend
 * (core/backend_mem.c), under one configuration; or through the two
 * reference models, "no cache" and the floor.
 *
 * The replay makes the calls the interposer would have made for each
 * recorded event, so that a trace recorded under cucache and replayed with
 * the same configuration reproduces the live run (the round-trip test):
 *
 *   alloc       core_malloc on the event's device, for key 0 (cudaMalloc,
 *               cuMemAlloc) or the stream's key (stream-ordered calls,
 *               imports); the capturing thread's cudaMalloc goes to the
 *               device's capture pool; a stream-ordered call on a
 *               capturing stream is a graph node and is not cached
 *   alloc_fail  tried again: if it succeeds here, it is freed at once (the
 *               job saw a failure and never used it)
 *   free        cudaFree/cuMemFree as reuse:* says (fenced, at once, or
 *               after a device synchronisation); a stream-ordered free
 *               behind an event on its stream; an imported free
 *               (PyTorch's free_completed, RMM's deallocate) at once
 *   device sync core_fence, then core_poll
 *   stream/event sync  core_poll
 *   capture begin/end  core_set_capturing and the capture pool
 *
 * By default the device is idle: every marker it records has completed by
 * the time it is queried, as on a GPU whose kernels finished, and pending
 * frees become reusable at the first poll, as in a live run on the
 * simulated device that synchronised (the round trip).  With opts->busy a
 * marker completes only at the job's next synchronisation or when the core
 * waits for it: the other bound.
 *
 * Addresses: the job's addresses only match frees to allocations; a hash
 * map takes each recorded address to the replay's.  Allocated and reserved
 * bytes are followed through the core's observer, at every change, so a
 * peak inside one call (a segment allocated before the retry ladder frees
 * others) counts as it does in the core's own statistics.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_mem.h"
#include "core.h"
#include "replay.h"
#include "rules.h"
#include "stats.h"

enum {
    RP_MAX_DEVICES = 64, /* the core's limit (core/alloc.c) */
    RP_KEY_LEGACY = 1,   /* the interposer's key of the legacy stream */
    RP_KEY_PTDS_TAG = 3, /* ... and the tag of per-thread default streams */
    RP_MAX_CAPTURES = 64,
};

#define RP_STREAM_LEGACY 0x1u     /* cudaStreamLegacy / CU_STREAM_LEGACY */
#define RP_STREAM_PER_THREAD 0x2u /* cudaStreamPerThread / CU_STREAM_PER_THREAD */

/* ------------------------------------------------------------------------
 * The address map: recorded address -> the replay's allocation
 * ---------------------------------------------------------------------- */

typedef struct live_s {
    uint64_t key;       /* the recorded address; 0 = empty slot */
    uint64_t addr;      /* the replay's address; 0: not held here (failed, or a graph node) */
    uint64_t requested; /* bytes asked for */
    uint64_t charged;   /* bytes the reference models reserve */
    uint64_t held;      /* ... and count as allocated */
    int16_t device;
    bool fallback; /* addr is the runtime's allocation (opts->fallback), not the core's */
} live_t;

typedef struct livemap_s {
    live_t *slots;
    size_t mask; /* capacity - 1 (a power of two) */
    size_t n;
    live_t zero;    /* the entry of address 0 (0 marks empty slots) */
    bool has_zero;
} livemap_t;

static inline size_t live_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

static int livemap_init(livemap_t *m, size_t expect)
{
    size_t cap = 64;
    while (cap < expect * 2)
        cap <<= 1;
    m->slots = calloc(cap, sizeof *m->slots);
    m->mask = cap - 1;
    m->n = 0;
    return m->slots ? 0 : -1;
}

static live_t *livemap_find(livemap_t *m, uint64_t key)
{
    if (key == 0)
        return m->has_zero ? &m->zero : NULL;
    for (size_t i = live_hash(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->slots[i].key == key)
            return &m->slots[i];
        if (m->slots[i].key == 0)
            return NULL;
    }
}

static int livemap_grow(livemap_t *m)
{
    livemap_t g;
    if (livemap_init(&g, (m->mask + 1)) != 0)
        return -1;
    for (size_t i = 0; i <= m->mask; i++) {
        if (m->slots[i].key == 0)
            continue;
        size_t j = live_hash(m->slots[i].key) & g.mask;
        while (g.slots[j].key != 0)
            j = (j + 1) & g.mask;
        g.slots[j] = m->slots[i];
    }
    g.n = m->n;
    free(m->slots);
    m->slots = g.slots, m->mask = g.mask;
    return 0;
}

/* Inserts (or overwrites) the entry for key.  NULL when out of memory. */
static live_t *livemap_put(livemap_t *m, uint64_t key)
{
    if (key == 0) {
        m->has_zero = true;
        m->zero = (live_t){0};
        return &m->zero;
    }
    if ((m->n + 1) * 2 > m->mask + 1 && livemap_grow(m) != 0)
        return NULL;
    size_t i = live_hash(key) & m->mask;
    while (m->slots[i].key != 0 && m->slots[i].key != key)
        i = (i + 1) & m->mask;
    if (m->slots[i].key == 0)
        m->n++;
    m->slots[i].key = key;
    return &m->slots[i];
}

/* Removes e (a slot of m), shifting the probe chain back over the hole. */
static void livemap_del(livemap_t *m, live_t *e)
{
    if (e == &m->zero) {
        m->has_zero = false;
        return;
    }
    size_t hole = (size_t)(e - m->slots);
    m->slots[hole].key = 0;
    m->n--;
    for (size_t i = (hole + 1) & m->mask; m->slots[i].key != 0; i = (i + 1) & m->mask) {
        size_t home = live_hash(m->slots[i].key) & m->mask;
        /* the entry may move to the hole when the hole lies on its probe
         * path, i.e. cyclically within [home, i) */
        if (((i - home) & m->mask) >= ((i - hole) & m->mask)) {
            m->slots[hole] = m->slots[i];
            m->slots[i].key = 0;
            hole = i;
        }
    }
}

/* ------------------------------------------------------------------------
 * Replay state
 * ---------------------------------------------------------------------- */

typedef struct capture_s {
    uint32_t tid;
    uint64_t stream;
} capture_t;

typedef struct rdev_s {
    mem_backend_t mb;   /* markers (events, fences): always completed */
    core_backend_t mem; /* mb's vtable */
    rp_space_t space;   /* pages and addresses (device.c) */
    core_dev_t *core;
    int capture_pool;                   /* 0 until the first capture */
    capture_t captures[RP_MAX_CAPTURES]; /* captures under way */
    int ncaptures;
    uint64_t allocated, reserved; /* followed through the observer */
    int device;
    uint64_t va_next; /* expandable segments' addresses: a range of their own */
    unsigned streams; /* the program's streams the recording counted (TRACE_REC_COUNTED) */
    rp_result_t *res; /* for the virtual memory call counts */
    uintptr_t *alias; /* second mappings of shared pages (map_alias): their addresses, charged nothing */
    size_t nalias, cap_alias;
} rdev_t;

typedef struct replay_s {
    const rp_input_t *in;
    const rp_config_t *cfg;
    const rp_opts_t *opts;
    rp_result_t *res;
    rdev_t *devs[RP_MAX_DEVICES];
    livemap_t live;
    uint64_t allocated, reserved, requested; /* sums over devices */
    size_t event;                            /* the event being replayed */
    bool new_peak;                           /* the current event set a reserved peak */
} replay_t;

/* The levels changed (on rd, when not NULL): follow the peaks and the
 * curve. */
static void level(replay_t *r, const rdev_t *rd)
{
    rp_result_t *res = r->res;
    if (rd) {
        if (rd->reserved < rd->allocated)
            res->reserved_covers = false;
        if (rd->allocated > res->dev_peak_allocated[rd->device])
            res->dev_peak_allocated[rd->device] = rd->allocated;
        if (rd->reserved > res->dev_peak_reserved[rd->device])
            res->dev_peak_reserved[rd->device] = rd->reserved;
    }
    if (r->reserved < r->allocated)
        res->reserved_covers = false;
    if (r->allocated > res->peak_allocated)
        res->peak_allocated = r->allocated;
    if (r->reserved > res->peak_reserved) {
        res->peak_reserved = r->reserved;
        r->new_peak = true;
    }
    rp_curve_t *c = &res->curve;
    if (c->nbuckets) {
        size_t b = r->event / c->events_per_bucket;
        if (b >= c->nbuckets)
            b = c->nbuckets - 1;
        if (r->allocated > c->allocated[b])
            c->allocated[b] = r->allocated;
        if (r->reserved > c->reserved[b])
            c->reserved[b] = r->reserved;
    }
}

/* The core's observer: allocated and reserved bytes at every change. */
static void observe(void *ctx, const core_event_t *e)
{
    replay_t *r = ctx;
    rdev_t *rd = r->devs[e->device];
    switch (e->kind) {
    case CORE_EV_ALLOC:
        rd->allocated += e->size, r->allocated += e->size;
        break;
    case CORE_EV_FREE_REQUESTED:
        rd->allocated -= e->size, r->allocated -= e->size;
        break;
    case CORE_EV_SEGMENT_ALLOC:
    case CORE_EV_SEGMENT_MAP: /* expandable: reserved = mapped, as in PyTorch */
        rd->reserved += e->size, r->reserved += e->size;
        break;
    case CORE_EV_SEGMENT_FREE:
    case CORE_EV_SEGMENT_UNMAP:
        rd->reserved -= e->size, r->reserved -= e->size;
        break;
    default:
        return;
    }
    level(r, rd);
}

/* ------------------------------------------------------------------------
 * The device: pages and addresses as the simulated device has them
 * (device.c); where segments land decides the core's address-ordered
 * choices (best fit ties, garbage collection), so a bump pointer, which
 * never reuses a range, would not replay a run whose device reused them.
 * Markers are mem_backend's: always completed.
 * ---------------------------------------------------------------------- */

static int dev_seg_alloc(void *ctx, int device, size_t size, uintptr_t *addr)
{
    rdev_t *rd = ctx;
    uint64_t a = 0;
    int rc = rp_space_alloc(&rd->space, size, &a);
    *addr = (uintptr_t)a;
    return rc;
}

static void dev_seg_free(void *ctx, int device, uintptr_t addr, size_t size)
{
    rdev_t *rd = ctx;
    rp_space_free(&rd->space, addr, size);
}

static int dev_mem_info(void *ctx, int device, size_t *free_bytes, size_t *total)
{
    rdev_t *rd = ctx;
    *free_bytes = (size_t)rp_space_free_bytes(&rd->space);
    *total = (size_t)rd->space.capacity;
    return CORE_OK;
}

static int dev_event_record(void *ctx, int device, core_stream_t stream, uint64_t *event)
{
    rdev_t *rd = ctx;
    return rd->mem.event_record(rd->mem.ctx, device, stream, event);
}

static int dev_event_query(void *ctx, int device, uint64_t event)
{
    rdev_t *rd = ctx;
    return rd->mem.event_query(rd->mem.ctx, device, event);
}

static void dev_event_wait(void *ctx, int device, uint64_t event)
{
    rdev_t *rd = ctx;
    rd->mem.event_wait(rd->mem.ctx, device, event);
}

static void dev_event_release(void *ctx, int device, uint64_t event)
{
    rdev_t *rd = ctx;
    rd->mem.event_release(rd->mem.ctx, device, event);
}

/* The interposer orders the device after a fence (hand-outs); an idle or
 * busy device here has no streams to order: it always can. */
static int dev_fence_order(void *ctx, int device, uint64_t fence, uint64_t first_alloc)
{
    rdev_t *rd = ctx;
    return rd->mem.fence_order(rd->mem.ctx, device, fence, first_alloc);
}

static int dev_sync(void *ctx, int device)
{
    rdev_t *rd = ctx;
    return rd->mem.device_sync(rd->mem.ctx, device);
}

/* Virtual memory, as the simulated device has it: 2 MiB granularity,
 * mappings charged page by page wherever they lie, addresses of their own
 * (above every device's range, never charged). */
#define VMM_GRANULARITY ((size_t)2 << 20)

static size_t dev_vmm_granularity(void *ctx, int device)
{
    (void)ctx, (void)device;
    return VMM_GRANULARITY;
}

static int dev_va_reserve(void *ctx, int device, size_t size, size_t align, uintptr_t *addr)
{
    rdev_t *rd = ctx;
    if (!rd->va_next)
        rd->va_next = ((uint64_t)RP_MAX_DEVICES + 2 + (uint64_t)device) << 44;
    rd->va_next = (rd->va_next + align - 1) / align * align;
    *addr = (uintptr_t)rd->va_next;
    rd->va_next += size;
    rd->res->vmm_reserves++;
    return CORE_OK;
}

static void dev_va_release(void *ctx, int device, uintptr_t addr, size_t size)
{
    (void)ctx, (void)device, (void)addr, (void)size;
}

static int dev_map(void *ctx, int device, uintptr_t addr, size_t size, size_t page)
{
    rdev_t *rd = ctx;
    (void)addr;
    int rc = rp_space_map(&rd->space, size);
    if (rc == CORE_OK) {
        rd->res->vmm_map_calls++;
        rd->res->vmm_map_pages += size / page;
    }
    return rc;
}

static void dev_unmap(void *ctx, int device, uintptr_t addr, size_t size)
{
    rdev_t *rd = ctx;
    (void)device;
    rd->res->vmm_unmap_calls++;
    for (size_t i = 0; i < rd->nalias; i++)
        if (rd->alias[i] == addr) { /* a second mapping: the memory stays the first's */
            rd->alias[i] = rd->alias[--rd->nalias];
            return;
        }
    rp_space_unmap(&rd->space, size);
    rd->res->vmm_unmap_bytes += size;
}

/* A page mapped a second time (expandable_share_pages): a call, no memory. */
static int dev_map_alias(void *ctx, int device, uintptr_t addr, uintptr_t from, size_t size)
{
    rdev_t *rd = ctx;
    (void)device, (void)from, (void)size;
    if (rd->nalias == rd->cap_alias) {
        size_t cap = rd->cap_alias ? rd->cap_alias * 2 : 64;
        uintptr_t *a = realloc(rd->alias, cap * sizeof *a);
        if (!a)
            return CORE_EFAIL;
        rd->alias = a;
        rd->cap_alias = cap;
    }
    rd->alias[rd->nalias++] = addr;
    rd->res->vmm_alias_calls++;
    return CORE_OK;
}

/* The memory of a device: the recorded one where given, else --capacity. */
static uint64_t capacity_of(const replay_t *r, int device)
{
    const uint64_t *dc = r->opts->dev_capacity;
    return dc && device >= 0 && device < RP_MAX_DEVICES && dc[device] ? dc[device] : r->opts->capacity;
}

/* The device's state, created at its first use.  NULL: out of memory. */
static rdev_t *rdev(replay_t *r, int device, char *err, size_t errlen)
{
    if (device < 0)
        device = 0;
    if (r->devs[device])
        return r->devs[device];
    rdev_t *rd = calloc(1, sizeof *rd);
    if (!rd) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    rd->device = device;
    rd->res = r->res;
    uint64_t capacity = capacity_of(r, device);
    mem_backend_init(&rd->mb, capacity);
    rd->mb.auto_complete = !r->opts->busy;
    rd->mb.orders = true;
    rd->mem = mem_backend_vtable(&rd->mb);
    if (r->cfg->mode == RP_MODE_CORE) {
        core_backend_t be = {.ctx = rd,
                             .seg_alloc = dev_seg_alloc,
                             .seg_free = dev_seg_free,
                             .mem_info = dev_mem_info,
                             .event_record = dev_event_record,
                             .event_query = dev_event_query,
                             .event_wait = dev_event_wait,
                             .event_release = dev_event_release,
                             .device_sync = dev_sync,
                             .fence_order = dev_fence_order,
                             .vmm_granularity = dev_vmm_granularity,
                             .va_reserve = dev_va_reserve,
                             .va_release = dev_va_release,
                             .map = dev_map,
                             .unmap = dev_unmap,
                             .map_alias = dev_map_alias};
        if (rp_space_init(&rd->space, device, capacity) == 0)
            rd->core = core_dev_new(&be, device, &r->cfg->conf);
        if (!rd->core) {
            mem_backend_fini(&rd->mb);
            rp_space_fini(&rd->space);
            free(rd);
            snprintf(err, errlen, "out of host memory");
            return NULL;
        }
        core_set_observer(rd->core, observe, r);
        /* a trace that does not say which streams cucache counted: taken
         * as having some (hits then hand out only a share) */
        core_set_streams(rd->core, r->in->streams_unknown ? 1 : 0);
        if (r->opts->history)
            core_set_history(rd->core, r->opts->history);
    }
    r->devs[device] = rd;
    return rd;
}

/* The core key of a recorded stream, as the interposer computes it. */
static core_stream_t stream_key(const trace_event_t *e)
{
    if (e->stream == 0 || e->stream == RP_STREAM_LEGACY)
        return RP_KEY_LEGACY;
    if (e->stream == RP_STREAM_PER_THREAD)
        return ((core_stream_t)e->tid << 4) | RP_KEY_PTDS_TAG;
    return (core_stream_t)e->stream;
}

static bool stream_ordered(unsigned api)
{
    return api == TRACE_API_CUDA_MALLOC_ASYNC || api == TRACE_API_CU_MEM_ALLOC_ASYNC;
}

/* Whether tid is capturing on the device (its cudaMalloc goes to the
 * capture pool), or, with stream != 0, whether that stream is. */
static bool capturing(const rdev_t *rd, uint32_t tid, uint64_t stream)
{
    for (int i = 0; i < rd->ncaptures; i++)
        if (stream ? rd->captures[i].stream == stream : rd->captures[i].tid == tid)
            return true;
    return false;
}

/* The reference models' reserved bytes for an allocation: "no cache" is
 * cudaMalloc per allocation, packed to 512 bytes up to 1 MiB and rounded to
 * the driver's 2 MiB pages above (an approximation: the driver's own
 * packing is not documented); the floor reserves what it holds. */
static uint64_t charged(const replay_t *r, uint64_t size)
{
    if (r->cfg->mode == RP_MODE_CORE)
        return 0;
    if (r->cfg->mode == RP_MODE_FLOOR || size <= (1u << 20))
        return size == 0 ? 512 : (size + 511) & ~(uint64_t)511;
    return (size + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
}

/* What the reference models count as allocated: each allocation's bytes
 * rounded up to 512, the least block any allocator with PyTorch's
 * granularity gives. */
static uint64_t held(const replay_t *r, uint64_t size)
{
    if (r->cfg->mode == RP_MODE_CORE)
        return 0;
    return size == 0 ? 512 : (size + 511) & ~(uint64_t)511;
}

/* One allocation: 0 with *addr (0 when it failed at the capacity or is a
 * graph node; *fallback when the runtime's allocator served it), or -1 for
 * an internal error. */
static int do_alloc(replay_t *r, rdev_t *rd, const trace_event_t *e, uint64_t *addr, bool *fallback)
{
    rp_result_t *res = r->res;
    core_oom_t why; /* the core's failure (RP_MODE_CORE) */
    res->allocs++;
    *addr = 0;
    *fallback = false;
    if (r->cfg->mode != RP_MODE_CORE) {
        uint64_t c = charged(r, e->size), h = held(r, e->size);
        if (r->cfg->mode == RP_MODE_NOCACHE && rd->reserved + c > capacity_of(r, rd->device))
            goto oom;
        rd->allocated += h, rd->reserved += c;
        r->allocated += h, r->reserved += c;
        if (r->cfg->mode == RP_MODE_NOCACHE)
            res->device_allocs++;
        *addr = 1; /* held: the models keep no addresses */
        level(r, rd);
        return 0;
    }
    bool ordered = stream_ordered(e->api);
    if (ordered && rd->ncaptures && capturing(rd, 0, e->stream)) {
        res->skipped++; /* a graph node: the graph owns it */
        return 0;
    }
    bool pooled = !ordered && e->api != TRACE_API_IMPORTED && rd->ncaptures && capturing(rd, e->tid, 0);
    if (pooled)
        core_pool_use(rd->core, rd->capture_pool);
    core_stream_t key = ordered || e->api == TRACE_API_IMPORTED ? stream_key(e) : 0;
    uintptr_t p = core_malloc(rd->core, (size_t)e->size, key, &why);
    if (pooled)
        core_pool_use(rd->core, 0);
    if (p) {
        *addr = p;
        return 0;
    }
    /* the interposer's last resort (hook_rt_mem.c, rt_oom): the runtime's
     * allocator, for the runtime's calls, unless a limit refused it or the
     * device is capturing */
    uint64_t a;
    if (r->opts->fallback && (e->api == TRACE_API_CUDA_MALLOC || e->api == TRACE_API_CUDA_MALLOC_ASYNC) &&
        !why.limit_hit && why.backend_error != CORE_EFAIL && rd->ncaptures == 0 &&
        rp_space_alloc(&rd->space, e->size ? e->size : 1, &a) == CORE_OK) {
        *addr = a;
        *fallback = true;
        res->fallbacks++;
        res->dev_fallbacks[rd->device]++;
        return 0;
    }
oom:
    res->dev_ooms[rd->device]++;
    if (res->ooms == 0 && r->opts->on_oom && r->cfg->mode == RP_MODE_CORE)
        r->opts->on_oom(r->opts->on_oom_ctx, rd->core, &why);
    if (res->ooms++ == 0) {
        res->first_oom_event = (long long)r->event;
        res->first_oom_size = e->size;
        res->first_oom_time_ns = e->time_ns;
    }
    return 0;
}

/* Frees what do_alloc gave (addr != 0) for the entry. */
static void do_free(replay_t *r, rdev_t *rd, const live_t *l, const trace_event_t *e)
{
    if (l->fallback) { /* the runtime's: cucache passes the free on */
        rp_space_free(&rd->space, l->addr, l->requested ? l->requested : 1);
        return;
    }
    if (r->cfg->mode != RP_MODE_CORE) {
        rd->allocated -= l->held, rd->reserved -= l->charged;
        r->allocated -= l->held, r->reserved -= l->charged;
        if (r->cfg->mode == RP_MODE_NOCACHE)
            r->res->device_frees++;
        level(r, rd);
        return;
    }
    core_free_t how = CORE_FREE_FENCED;
    core_stream_t key = 0;
    if (e->api == TRACE_API_IMPORTED) {
        how = CORE_FREE_NOW;
    } else if (stream_ordered(e->api)) {
        /* on another device than its own the interposer falls back to
         * that device's fence */
        if (e->device < 0 || e->device == l->device)
            how = CORE_FREE_AFTER_STREAM, key = stream_key(e);
    } else {
        /* a rule that synchronises first: the idle device has nothing queued */
        how = rule_plain_free(conf_rule(&r->cfg->conf), rd->ncaptures == 0);
    }
    core_free(rd->core, (uintptr_t)l->addr, how, key);
}

/* A synchronisation of the job completed: what was queued before it has
 * completed too (on a busy device, every marker so far: a stream's or an
 * event's synchronisation is taken for the device's, an over-estimate). */
static void synchronised(replay_t *r, int device, bool fence)
{
    for (int i = 0; i < RP_MAX_DEVICES; i++) {
        rdev_t *rd = r->devs[i];
        if (!rd || !rd->core || (device >= 0 && device != i))
            continue;
        if (fence)
            core_fence(rd->core);
        mem_backend_complete_all(&rd->mb);
        core_poll(rd->core);
    }
}

static void capture_begin(rdev_t *rd, const trace_event_t *e)
{
    if (!rd->core || rd->ncaptures == RP_MAX_CAPTURES)
        return;
    if (rd->capture_pool == 0)
        rd->capture_pool = core_pool_create(rd->core);
    if (rd->ncaptures++ == 0)
        core_set_capturing(rd->core, true);
    rd->captures[rd->ncaptures - 1] = (capture_t){e->tid, e->stream};
}

static void capture_end(rdev_t *rd, const trace_event_t *e)
{
    for (int i = 0; i < rd->ncaptures; i++) {
        if (rd->captures[i].stream != e->stream)
            continue;
        rd->captures[i] = rd->captures[--rd->ncaptures];
        if (rd->ncaptures == 0 && rd->core)
            core_set_capturing(rd->core, false);
        return;
    }
}

/* One event.  0, or -1 with err set. */
static int step(replay_t *r, const trace_event_t *e, char *err, size_t errlen)
{
    rdev_t *rd = rdev(r, e->device, err, errlen);
    if (!rd)
        return -1;
    switch (e->kind) {
    case TRACE_ALLOC: {
        uint64_t addr;
        bool fallback;
        if (do_alloc(r, rd, e, &addr, &fallback) != 0)
            return -1;
        live_t *old = livemap_find(&r->live, e->addr);
        if (old) {
            /* allocated again without a free in between: the trace lost the
             * free; the old allocation stays held, as it would in the job */
            r->res->skipped++;
            livemap_del(&r->live, old);
        }
        live_t *l = livemap_put(&r->live, e->addr);
        if (!l) {
            snprintf(err, errlen, "out of host memory");
            return -1;
        }
        l->addr = addr;
        l->requested = e->size;
        l->charged = charged(r, e->size);
        l->held = held(r, e->size);
        l->device = (int16_t)(e->device < 0 ? 0 : e->device);
        l->fallback = fallback;
        if (addr && !fallback) {
            r->requested += e->size;
            if (r->requested > r->res->peak_requested)
                r->res->peak_requested = r->requested;
        }
        return 0;
    }
    case TRACE_ALLOC_FAIL: {
        /* the reference models describe what the job held: a request that
         * failed held nothing (a job probing 1 TiB is not a 1 TiB job) */
        if (r->cfg->mode != RP_MODE_CORE)
            return 0;
        uint64_t addr;
        bool fallback;
        trace_event_t once = *e;
        if (do_alloc(r, rd, e, &addr, &fallback) != 0)
            return -1;
        if (addr) {
            live_t l = {.addr = addr,
                        .requested = e->size,
                        .charged = charged(r, e->size),
                        .held = held(r, e->size),
                        .device = (int16_t)(e->device < 0 ? 0 : e->device),
                        .fallback = fallback};
            once.api = TRACE_API_IMPORTED; /* at once: the job never used it */
            do_free(r, rd, &l, &once);
        }
        return 0;
    }
    case TRACE_FREE: {
        live_t *l = livemap_find(&r->live, e->addr);
        if (!l) {
            r->res->skipped++; /* never allocated in the trace */
            return 0;
        }
        if (l->addr) {
            rdev_t *owner = r->devs[l->device];
            do_free(r, owner, l, e);
            if (!l->fallback)
                r->requested -= l->requested;
        }
        livemap_del(&r->live, l);
        return 0;
    }
    case TRACE_DEVICE_SYNC: /* with device -1: every device */
        synchronised(r, e->device, true);
        return 0;
    case TRACE_STREAM_SYNC:
    case TRACE_EVENT_SYNC:
        synchronised(r, e->device, false);
        return 0;
    case TRACE_CAPTURE_BEGIN:
        capture_begin(rd, e);
        return 0;
    case TRACE_CAPTURE_END:
        capture_end(rd, e);
        return 0;
    case TRACE_STREAM_CREATE:
    case TRACE_STREAM_DESTROY:
        /* the streams the recording cucache counted on the device */
        if ((e->flags & TRACE_REC_COUNTED) && !r->in->streams_unknown && rd->core) {
            if (e->kind == TRACE_STREAM_CREATE)
                rd->streams++;
            else if (rd->streams)
                rd->streams--;
            core_set_streams(rd->core, rd->streams);
        }
        return 0;
    case TRACE_NO_HAND_OUTS:
        if (rd->core)
            core_stop_hand_outs(rd->core);
        return 0;
    default:
        return 0;
    }
}

/* After an event that set a reserved peak: the fragmentation there. */
static void measure_peak(replay_t *r)
{
    uint64_t free_bytes = 0, largest = 0;
    for (int i = 0; i < RP_MAX_DEVICES; i++) {
        rdev_t *rd = r->devs[i];
        if (!rd || !rd->core)
            continue;
        core_usage_t u;
        core_usage(rd->core, &u);
        free_bytes += u.reserved - u.allocated;
        if (u.largest_free > largest)
            largest = u.largest_free;
    }
    r->res->peak_event = r->event;
    r->res->free_at_peak = r->reserved - r->allocated;
    r->res->frag_at_peak = free_bytes ? 1.0 - (double)largest / (double)free_bytes : 0.0;
}

static void finish(replay_t *r)
{
    rp_result_t *res = r->res;
    for (int i = 0; i < RP_MAX_DEVICES; i++) {
        rdev_t *rd = r->devs[i];
        if (!rd)
            continue;
        if (rd->core) {
            core_stats_t s;
            core_stats_get(rd->core, &s);
            if ((uint64_t)s.allocated_bytes[CORE_POOL_ALL].peak != res->dev_peak_allocated[i] ||
                (uint64_t)s.reserved_bytes[CORE_POOL_ALL].peak != res->dev_peak_reserved[i])
                res->stats_agree = false;
            res->device_allocs += s.num_device_alloc;
            res->device_frees += s.num_device_free;
            res->hits += s.num_cache_hits;
            core_dev_destroy(rd->core);
        }
        mem_backend_fini(&rd->mb);
        rp_space_fini(&rd->space);
        free(rd->alias);
        free(rd);
        r->devs[i] = NULL;
    }
    res->utilization = res->peak_reserved ? (double)res->peak_allocated / (double)res->peak_reserved : 1.0;
    free(r->live.slots);
}

int rp_replay(const rp_input_t *in, const rp_config_t *cfg, const rp_opts_t *opts, rp_result_t *res, char *err,
              size_t errlen)
{
    memset(res, 0, sizeof *res);
    res->first_oom_event = -1;
    res->reserved_covers = true;
    res->stats_agree = true;
    replay_t r = {.in = in, .cfg = cfg, .opts = opts, .res = res};
    if (livemap_init(&r.live, 1024) != 0)
        goto nomem;
    if (opts->curve_buckets && in->nev) {
        rp_curve_t *c = &res->curve;
        c->nbuckets = opts->curve_buckets < in->nev ? opts->curve_buckets : in->nev;
        c->events_per_bucket = (in->nev + c->nbuckets - 1) / c->nbuckets;
        c->nbuckets = (in->nev + c->events_per_bucket - 1) / c->events_per_bucket;
        c->allocated = calloc(c->nbuckets, sizeof *c->allocated);
        c->reserved = calloc(c->nbuckets, sizeof *c->reserved);
        if (!c->allocated || !c->reserved)
            goto nomem;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < in->nev; i++) {
        const trace_event_t *e = &in->ev[i];
        r.event = i;
        if (e->device >= RP_MAX_DEVICES) {
            snprintf(err, errlen, "event %zu: device %d (at most %d devices)", i, e->device, RP_MAX_DEVICES);
            goto fail;
        }
        if (step(&r, e, err, errlen) != 0)
            goto fail;
        level(&r, NULL); /* the bucket of an event that changed nothing */
        if (r.new_peak) {
            r.new_peak = false;
            measure_peak(&r);
        }
        if (opts->progress && (i & ((1u << 20) - 1)) == 0 && i)
            opts->progress(opts->progress_ctx, i, in->nev);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    res->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    res->events = in->nev;
    finish(&r);
    return 0;
nomem:
    snprintf(err, errlen, "out of host memory");
fail:
    finish(&r);
    rp_result_free(res);
    return -1;
}

void rp_result_free(rp_result_t *res)
{
    free(res->curve.allocated);
    free(res->curve.reserved);
    res->curve = (rp_curve_t){0};
}
