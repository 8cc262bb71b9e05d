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
 *   alloc_fail  of memory (rp_failed_for_memory): tried again, in every
 *               column, the reference models too; if it succeeds here, it
 *               is freed at once (the job saw a failure and never used it)
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
 * Addresses: the job's addresses only match frees to allocations; a map
 * (live.c) takes each recorded address to the replay's.  The device
 * under the core is backend.c's.  Allocated and reserved
 * bytes are followed through the core's observer, at every change, so a
 * peak inside one call (a segment allocated before the retry ladder frees
 * others) counts as it does in the core's own statistics.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "rules.h"
#include "stats.h"
#include "stream_key.h"

#define RP_STREAM_LEGACY 0x1u     /* cudaStreamLegacy / CU_STREAM_LEGACY */
#define RP_STREAM_PER_THREAD 0x2u /* cudaStreamPerThread / CU_STREAM_PER_THREAD */

/* ------------------------------------------------------------------------
 * Replay state
 * ---------------------------------------------------------------------- */

typedef struct replay_s {
    const rp_input_t *in;
    const rp_config_t *cfg;
    const rp_opts_t *opts;
    rp_result_t *res;
    rp_dev_t *devs[RP_MAX_DEVICES];
    rp_livemap_t live;                       /* by recorded address */
    uint64_t allocated, reserved, requested; /* sums over devices */
    size_t event;                            /* the event being replayed */
    bool new_peak;                           /* the current event set a reserved peak */
} replay_t;

/* The levels changed (on rd, when not NULL): follow the peaks and the
 * curve. */
static void level(replay_t *r, const rp_dev_t *rd)
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
    rp_dev_t *rd = r->devs[e->device];
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

/* The memory of a device: the recorded one where given, else --capacity. */
static uint64_t capacity_of(const replay_t *r, int device)
{
    const uint64_t *dc = r->opts->dev_capacity;
    return dc && device >= 0 && device < RP_MAX_DEVICES && dc[device] ? dc[device] : r->opts->capacity;
}

/* The device's state, created at its first use.  NULL: out of memory. */
static rp_dev_t *rdev(replay_t *r, int device, char *err, size_t errlen)
{
    if (device < 0)
        device = 0;
    if (r->devs[device])
        return r->devs[device];
    rp_dev_t *rd = rp_dev_new(device, capacity_of(r, device), r->opts->busy,
                              r->cfg->mode == RP_MODE_CORE ? &r->cfg->conf : NULL, r->res);
    if (!rd) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    if (rd->core) {
        core_set_observer(rd->core, observe, r);
        /* a trace that does not say which streams cucache counted: taken
         * as having some (hits then hand out only a share); one from before
         * the legacy stream was counted on its own: counted from the start,
         * so that the first stream of the program's paces as it did */
        rd->streams = r->in->streams_unknown ? 2 : r->in->default_counted ? 1 : 0;
        core_set_streams(rd->core, rd->streams);
        if (r->opts->history)
            core_set_history(rd->core, r->opts->history);
    }
    r->devs[device] = rd;
    return rd;
}

/* The core key of a recorded stream, as the interposer computes it: a
 * per-thread default stream's thread is the recorded thread. */
static core_stream_t stream_key(const trace_event_t *e)
{
    if (e->stream == 0 || e->stream == RP_STREAM_LEGACY)
        return core_stream_key(CORE_STREAM_LEGACY, 0, 0);
    if (e->stream == RP_STREAM_PER_THREAD)
        return core_stream_key(CORE_STREAM_PER_THREAD, 0, e->tid);
    return core_stream_key(CORE_STREAM_HANDLE, (uintptr_t)e->stream, 0);
}

static bool stream_ordered(unsigned api)
{
    return api == TRACE_API_CUDA_MALLOC_ASYNC || api == TRACE_API_CU_MEM_ALLOC_ASYNC;
}

/* Whether tid is capturing on the device (its cudaMalloc goes to the
 * capture pool), or, with stream != 0, whether that stream is. */
static bool capturing(const rp_dev_t *rd, uint32_t tid, uint64_t stream)
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
static int do_alloc(replay_t *r, rp_dev_t *rd, const trace_event_t *e, uint64_t *addr, bool *fallback)
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
static void do_free(replay_t *r, rp_dev_t *rd, const rp_live_t *l, const trace_event_t *e)
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
        rp_dev_t *rd = r->devs[i];
        if (!rd || !rd->core || (device >= 0 && device != i))
            continue;
        if (fence)
            core_fence(rd->core);
        mem_backend_complete_all(&rd->mb);
        core_poll(rd->core);
    }
}

static void capture_begin(rp_dev_t *rd, const trace_event_t *e)
{
    if (!rd->core || rd->ncaptures == RP_MAX_CAPTURES)
        return;
    if (rd->capture_pool == 0)
        rd->capture_pool = core_pool_create(rd->core);
    if (rd->ncaptures++ == 0)
        core_set_capturing(rd->core, true);
    rd->captures[rd->ncaptures - 1] = (rp_capture_t){e->tid, e->stream};
}

static void capture_end(rp_dev_t *rd, const trace_event_t *e)
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
    rp_dev_t *rd = rdev(r, e->device, err, errlen);
    if (!rd)
        return -1;
    switch (e->kind) {
    case TRACE_ALLOC: {
        uint64_t addr;
        bool fallback;
        if (do_alloc(r, rd, e, &addr, &fallback) != 0)
            return -1;
        /* allocated again without a free in between: the trace lost the
         * free; the old allocation stays held, as it would in the job, and
         * its entry is replaced */
        if (rp_livemap_find(&r->live, e->addr))
            r->res->skipped++;
        rp_live_t *l = rp_livemap_put(&r->live, e->addr);
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
        /* the request the recorded run failed is asked again at its moment
         * in every column, the references too (a user asks whether a setting
         * would have served it: the floor must count it, and "no cache"
         * fail where it does not fit); served, it is freed at once, as the
         * job never used it.  A failure for another reason than memory is
         * asked in none: no setting serves it. */
        if (!rp_failed_for_memory(r->in, e))
            return 0;
        uint64_t addr;
        bool fallback;
        trace_event_t once = *e;
        if (do_alloc(r, rd, e, &addr, &fallback) != 0)
            return -1;
        if (addr) {
            rp_live_t l = {.addr = addr,
                           .requested = e->size,
                           .charged = charged(r, e->size),
                           .held = held(r, e->size),
                           .device = (int16_t)(e->device < 0 ? 0 : e->device),
                           .fallback = fallback};
            if (!fallback && r->requested + e->size > r->res->peak_requested)
                r->res->peak_requested = r->requested + e->size;
            once.api = TRACE_API_IMPORTED; /* at once: the job never used it */
            do_free(r, rd, &l, &once);
        }
        return 0;
    }
    case TRACE_FREE: {
        rp_live_t *l = rp_livemap_find(&r->live, e->addr);
        if (!l) {
            r->res->skipped++; /* never allocated in the trace */
            return 0;
        }
        if (l->addr) {
            rp_dev_t *owner = r->devs[l->device];
            do_free(r, owner, l, e);
            if (!l->fallback)
                r->requested -= l->requested;
        }
        rp_livemap_del(&r->live, e->addr);
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
    case TRACE_DEFAULT_BUSY:
        /* the streams the recording cucache counted on the device */
        if ((e->flags & TRACE_REC_COUNTED) && !r->in->streams_unknown && rd->core) {
            if (e->kind != TRACE_STREAM_DESTROY)
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
        rp_dev_t *rd = r->devs[i];
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
        rp_dev_t *rd = r->devs[i];
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
        }
        rp_dev_free(rd);
        r->devs[i] = NULL;
    }
    res->utilization = res->peak_reserved ? (double)res->peak_allocated / (double)res->peak_reserved : 1.0;
    rp_livemap_fini(&r->live);
}

int rp_replay(const rp_input_t *in, const rp_config_t *cfg, const rp_opts_t *opts, rp_result_t *res, char *err,
              size_t errlen)
{
    memset(res, 0, sizeof *res);
    res->first_oom_event = -1;
    res->reserved_covers = true;
    res->stats_agree = true;
    replay_t r = {.in = in, .cfg = cfg, .opts = opts, .res = res};
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
