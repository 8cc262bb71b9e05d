/*
 * fuzz_core: libFuzzer drives the caching core (core/, in-process backend)
 * with arbitrary operation sequences and proves that every invariant of
 * core/types.h holds after every operation (core_check), that the core
 * agrees with a model of the live allocations (no overlap, exact lookups,
 * foreign and interior frees refused), and that destroying the device
 * returns every segment and every host byte (the backend's counters, and
 * AddressSanitizer's leak check).  Any disagreement aborts with a message.
 *
 * Built with clang only (-fsanitize=fuzzer,address,undefined), from the
 * core sources directly; scripts/test runs it for a minute on the seed
 * corpus in tests/core/fuzz_corpus/ (tests/meson.build says how).
 *
 * Input: byte 0 picks configuration keys (bits, see fuzz_confs), byte 1 the
 * device capacity (16 MiB steps, its low five bits) and expandable
 * segments (its high bit, unless preallocate is picked; bit 6 then gives
 * the large pool 4 MiB pages, bit 5 shares pages: expandable_share_pages),
 * then 4-byte records [op, a, b, c]:
 *
 *   0 alloc        size (b | c << 8) + 1 shifted left by a & 15 (0-11); 12:
 *                  0 bytes, 13: too large for any device, 14: just above the
 *                  capacity, 15: 1 << (c % 28); stream key (a >> 4) & 3
 *   1 free         live allocation b; a % 3: now, fenced, after stream
 *                  (a >> 2) & 3
 *   2 record       record_stream of live allocation b on stream a & 3; with
 *                  a & 8, core_hold of it instead (token 1 + c: another
 *                  process has it open)
 *   3 synchronized the program synchronised the device
 *   4 complete     every event recorded so far completes, and every hold
 *                  with a token up to a is over
 *   5 empty cache  a % 3: all pools, the default pools, private pool b
 *   6 pool create
 *   7 pool use     a & 1: back to the default pools, else private pool b
 *   8 pool destroy private pool b
 *   9 fail         the backend's next a % 4 segment allocations fail, with
 *                  CORE_EFAIL when b & 1, else CORE_ENOMEM
 *  10 idle         a & 1: events complete as recorded (auto_complete);
 *                  (a >> 1) & 3: the program's live streams (core_set_streams:
 *                  under the default reuse:ordered, 0 hands out any pending
 *                  free at a hit, more paces the hand-outs)
 *  11 lookup       an address inside live allocation b (offset from c):
 *                  core_lookup and core_describe agree with the model
 *  12 bad free     an interior or foreign address: must be refused
 *  13 usage        core_usage against the model and the backend
 *  14 stats        core_stats_get: every peak >= current; a & 1 resets the
 *                  peaks, a & 2 the accumulated counts; the flat listing
 *  15 observer     a & 1: install an observer that checks each event, else
 *                  remove it
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_mem.h"
#include "check.h"
#include "core.h"
#include "types.h"
#include "stats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
    FUZZ_MAX_LIVE = 256, /* allocations the model tracks; more are not attempted */
    FUZZ_MAX_POOLS = 8,
    FUZZ_STREAMS = 4, /* stream keys 0..3 (0: not stream-ordered) */
    FUZZ_MIN_ALIGN = 512,
};

#define MiB ((size_t)1 << 20)

/* Configuration keys, one per bit of byte 0. */
static const char *const fuzz_confs[8] = {
    "max_split_size_mb:20",
    "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.6",
    "limit_mb:48",
    "strategy:preallocate,fraction:0.5",
    "per_process_memory_fraction:0.75",
    "min_block_size:4096",
    "roundup_power2_divisions:[1:2,4:4,>:8]",
};

typedef struct live_s {
    uintptr_t addr;
    size_t size; /* requested */
    core_stream_t stream;
} live_t;

typedef struct fuzz_s {
    mem_backend_t mem;
    core_dev_t *d;
    size_t capacity;
    live_t live[FUZZ_MAX_LIVE];
    size_t nlive;
    int pools[FUZZ_MAX_POOLS];
    size_t npools;
    size_t step; /* operation number, for messages */
    bool whatif_done; /* the what-if ran at this input's first OOM */
} fuzz_t;

static void fuzz_fail(const fuzz_t *f, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));

static void fuzz_fail(const fuzz_t *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz_core: step %zu: ", f->step);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

static void check(fuzz_t *f, const char *after)
{
    char why[512];
    if (core_check(f->d, why, sizeof why) != 0)
        fuzz_fail(f, "core_check after %s: %s", after, why);
}

/* ------------------------------------------------------------------------
 * Operations
 * ---------------------------------------------------------------------- */

static size_t alloc_size(const fuzz_t *f, uint8_t a, uint8_t b, uint8_t c)
{
    unsigned shift = a & 15;
    size_t base = ((size_t)b | (size_t)c << 8) + 1;
    switch (shift) {
    case 12:
        return 0;
    case 13:
        return SIZE_MAX / 2;
    case 14:
        return f->capacity + 1 + base;
    case 15:
        return (size_t)1 << (c % 28);
    default:
        return base << shift;
    }
}

static void op_alloc(fuzz_t *f, uint8_t a, uint8_t b, uint8_t c)
{
    if (f->nlive == FUZZ_MAX_LIVE)
        return;
    size_t size = alloc_size(f, a, b, c);
    core_stream_t stream = (a >> 4) & 3;
    core_oom_t oom;
    memset(&oom, 0xa5, sizeof oom);
    uintptr_t p = core_malloc(f->d, size, stream, &oom);
    if (!p) {
        if (oom.requested != size)
            fuzz_fail(f, "alloc %zu failed and the OOM report says %zu bytes were requested", size, oom.requested);
        if (oom.backend_error != CORE_ENOMEM && oom.backend_error != CORE_EFAIL)
            fuzz_fail(f, "alloc %zu failed with backend error %d", size, oom.backend_error);
        if (!f->whatif_done && oom.history) { /* the history, wrapped or not, rebuilds what is live */
            f->whatif_done = true;
            core_whatif_opts_t wo = {oom.device_free + oom.reserved, oom.device_total, 0.05, 1, NULL};
            core_whatif_t w;
            if (core_whatif(f->d, &oom, &wo, &w) != CORE_WHATIF_RAN)
                fuzz_fail(f, "the what-if did not run (status %d)", w.status);
            size_t live = 0;
            for (size_t i = 0; i < f->nlive; i++)
                live += f->live[i].size;
            if (w.live_bytes != live || w.request != size || w.events < 1 || w.events > 1024)
                fuzz_fail(f, "what-if: %zu bytes live and a request of %zu in %llu calls; the fuzzer has %zu and %zu",
                          w.live_bytes, w.request, (unsigned long long)w.events, live, size);
        }
        return;
    }
    if (size > f->capacity)
        fuzz_fail(f, "alloc %zu succeeded on a device of %zu bytes", size, f->capacity);
    if (p % FUZZ_MIN_ALIGN)
        fuzz_fail(f, "alloc %zu returned 0x%lx, not aligned to %d", size, (unsigned long)p, FUZZ_MIN_ALIGN);
    size_t span = size ? size : 1;
    for (size_t i = 0; i < f->nlive; i++) {
        const live_t *l = &f->live[i];
        size_t lspan = l->size ? l->size : 1;
        if (p < l->addr + lspan && l->addr < p + span)
            fuzz_fail(f, "alloc %zu at 0x%lx overlaps live allocation 0x%lx (%zu bytes)", size, (unsigned long)p,
                      (unsigned long)l->addr, l->size);
    }
    /* preallocate's default pool carves every stream's requests from one
     * chunk: those blocks carry stream key 0 (core_malloc) */
    const block_t *blk = map_find(f->d, p);
    if (blk && f->d->conf.strategy == CONF_STRATEGY_PREALLOCATE && blk->pool->owner->id == 0)
        stream = 0;
    f->live[f->nlive++] = (live_t){p, size, stream};
}

static void op_free(fuzz_t *f, uint8_t a, uint8_t b)
{
    if (!f->nlive)
        return;
    size_t i = b % f->nlive;
    static const core_free_t kinds[3] = {CORE_FREE_NOW, CORE_FREE_FENCED, CORE_FREE_AFTER_STREAM};
    live_t l = f->live[i];
    int r = core_free(f->d, l.addr, kinds[a % 3], (a >> 2) & 3);
    if (r != CORE_FREED)
        fuzz_fail(f, "free of live allocation 0x%lx returned %d", (unsigned long)l.addr, r);
    f->live[i] = f->live[--f->nlive];
    /* a second free of the same address is refused */
    r = core_free(f->d, l.addr, CORE_FREE_NOW, 0);
    if (r != CORE_NOT_MINE)
        fuzz_fail(f, "double free of 0x%lx returned %d", (unsigned long)l.addr, r);
}

static void op_record(fuzz_t *f, uint8_t a, uint8_t b, uint8_t c)
{
    if (!f->nlive)
        return;
    const live_t *l = &f->live[b % f->nlive];
    if (a & 8) {
        if (core_hold(f->d, l->addr, 1 + (uint64_t)c) != CORE_FREED)
            fuzz_fail(f, "core_hold of live allocation 0x%lx refused", (unsigned long)l->addr);
        return;
    }
    int r = core_record_stream(f->d, l->addr, a & 3);
    if (r != CORE_FREED && r != CORE_EFAIL)
        fuzz_fail(f, "record_stream of live allocation 0x%lx returned %d", (unsigned long)l->addr, r);
}

static int pick_pool(const fuzz_t *f, uint8_t b)
{
    return f->npools ? f->pools[b % f->npools] : 1;
}

static void op_lookup(fuzz_t *f, uint8_t b, uint8_t c)
{
    if (!f->nlive)
        return;
    const live_t *l = &f->live[b % f->nlive];
    size_t off = l->size ? ((size_t)c * 0x9e3779b1u) % l->size : 0;
    uintptr_t base = 0;
    size_t size = 0;
    core_stream_t stream = 99;
    if (!core_lookup(f->d, l->addr + off, &base, &size, &stream))
        fuzz_fail(f, "lookup of 0x%lx (live 0x%lx + %zu) found nothing", (unsigned long)(l->addr + off),
                  (unsigned long)l->addr, off);
    if (base != l->addr || size != l->size || stream != l->stream)
        fuzz_fail(f, "lookup of 0x%lx + %zu: base 0x%lx size %zu stream %lu, expected %zu bytes on stream %lu",
                  (unsigned long)l->addr, off, (unsigned long)base, size, (unsigned long)stream, l->size,
                  (unsigned long)l->stream);
    core_ptr_info_t info;
    if (core_describe(f->d, l->addr + off, &info) != CORE_WHERE_LIVE || info.base != l->addr ||
        info.requested != l->size || info.size < l->size || !(info.id & CORE_ID_TAG) || info.seg_base > l->addr ||
        l->addr + info.size > info.seg_base + info.seg_size)
        fuzz_fail(f, "describe of 0x%lx + %zu: where %d, base 0x%lx, %zu/%zu bytes, id %llx, segment 0x%lx+%zu",
                  (unsigned long)l->addr, off, (int)info.where, (unsigned long)info.base, info.requested, info.size,
                  (unsigned long long)info.id, (unsigned long)info.seg_base, info.seg_size);
    /* the block's rounding is not the allocation */
    if (info.size > l->size && l->size &&
        core_describe(f->d, l->addr + l->size, &info) != CORE_WHERE_DEAD)
        fuzz_fail(f, "describe of 0x%lx past its %zu requested bytes: where %d", (unsigned long)l->addr, l->size,
                  (int)info.where);
}

static void op_bad_free(fuzz_t *f, uint8_t b, uint8_t c)
{
    uintptr_t addr = (uintptr_t)0x1000 * (1 + c); /* below every device address of the backend */
    if (f->nlive && (b & 1)) {
        const live_t *l = &f->live[b % f->nlive];
        if (l->size < 2)
            return;
        addr = l->addr + 1 + (size_t)c % (l->size - 1); /* inside it, not its base */
    }
    int r = core_free(f->d, addr, CORE_FREE_NOW, 0);
    if (r != CORE_NOT_MINE)
        fuzz_fail(f, "free of interior or foreign address 0x%lx returned %d", (unsigned long)addr, r);
}

static void op_usage(fuzz_t *f)
{
    core_usage_t u;
    core_usage(f->d, &u);
    size_t requested = 0;
    for (size_t i = 0; i < f->nlive; i++)
        requested += f->live[i].size;
    if (u.allocated < requested)
        fuzz_fail(f, "usage: %zu bytes allocated, the program holds %zu", u.allocated, requested);
    if (u.allocated > u.reserved || u.cached_free > u.reserved || u.largest_free > u.cached_free)
        fuzz_fail(f, "usage: allocated %zu, cached free %zu, largest free %zu, reserved %zu", u.allocated,
                  u.cached_free, u.largest_free, u.reserved);
    if (u.releasable > u.reserved - u.allocated || u.held > u.pending || u.reclaimable < u.releasable ||
        u.reclaimable > u.reserved)
        fuzz_fail(f, "usage: releasable %zu, reclaimable %zu of %zu reserved (%zu allocated), held %zu of %zu pending",
                  u.releasable, u.reclaimable, u.reserved, u.allocated, u.held, u.pending);
    pthread_mutex_lock(&f->mem.lock);
    size_t used = f->mem.used;
    pthread_mutex_unlock(&f->mem.lock);
    if (u.reserved != used)
        fuzz_fail(f, "usage: %zu bytes reserved, the device has %zu in segments", u.reserved, used);
}

static void count_key(void *ctx, const char *key, int64_t value)
{
    (void)key, (void)value;
    ++*(size_t *)ctx;
}

static void op_stats(fuzz_t *f, uint8_t a)
{
    core_stats_t s;
    core_stats_get(f->d, &s);
#define CHECK_PEAK(name)                                                                                               \
    for (int i = 0; i < CORE_POOL_CLASSES; i++)                                                                        \
        if (s.name[i].peak < s.name[i].current)                                                                        \
            fuzz_fail(f, "stat " #name "[%d]: peak %lld below current %lld", i, (long long)s.name[i].peak,             \
                      (long long)s.name[i].current);
    CORE_STAT_ARRAYS(CHECK_PEAK)
#undef CHECK_PEAK
    size_t keys = 0;
    core_stats_foreach(&s, count_key, &keys);
    if (keys == 0)
        fuzz_fail(f, "core_stats_foreach listed nothing");
    if (a & 1)
        core_stats_reset_peaks(f->d);
    if (a & 2)
        core_stats_reset_accumulated(f->d);
}

/* Called with the device lock held: checks the event, calls nothing back. */
static void observe(void *ctx, const core_event_t *e)
{
    fuzz_t *f = ctx;
    if (e->device != 0 || (unsigned)e->kind > CORE_EV_PIECE_OUT ||
        (e->kind != CORE_EV_OOM && e->addr % FUZZ_MIN_ALIGN))
        fuzz_fail(f, "observer: event kind %d on device %d at 0x%lx", (int)e->kind, e->device, (unsigned long)e->addr);
}

static void step(fuzz_t *f, const uint8_t *r)
{
    uint8_t op = r[0] % 16, a = r[1], b = r[2], c = r[3];
    static const char *const names[16] = {
        "alloc",        "free", "record_stream", "synchronized", "complete", "empty_cache", "pool_create", "pool_use",
        "pool_destroy", "fail", "idle",          "lookup",       "bad_free", "usage",       "stats",       "observer",
    };
    switch (op) {
    case 0:
        op_alloc(f, a, b, c);
        break;
    case 1:
        op_free(f, a, b);
        break;
    case 2:
        op_record(f, a, b, c);
        break;
    case 3:
        core_synchronized(f->d);
        break;
    case 4:
        mem_backend_complete_all(&f->mem);
        pthread_mutex_lock(&f->mem.lock);
        f->mem.holds_over = a;
        pthread_mutex_unlock(&f->mem.lock);
        break;
    case 5:
        if (a % 3 == 0) {
            /* everything reclaimable goes back: pending frees are waited for */
            core_usage_t u, v;
            core_usage(f->d, &u);
            core_empty_cache(f->d, -1);
            core_usage(f->d, &v);
            if (v.reserved > u.reserved - u.reclaimable)
                fuzz_fail(f, "empty_cache: %zu bytes reserved after, %zu before with %zu reclaimable", v.reserved,
                          u.reserved, u.reclaimable);
        } else {
            core_empty_cache(f->d, a % 3 == 1 ? 0 : pick_pool(f, b));
        }
        break;
    case 6:
        if (f->npools < FUZZ_MAX_POOLS) {
            int id = core_pool_create(f->d);
            if (id <= 0)
                fuzz_fail(f, "pool_create returned %d", id);
            f->pools[f->npools++] = id;
        }
        break;
    case 7:
        core_pool_use(f->d, a & 1 ? 0 : pick_pool(f, b)); /* -1 for a destroyed pool is fine */
        break;
    case 8:
        core_pool_destroy(f->d, pick_pool(f, b));
        break;
    case 9:
        pthread_mutex_lock(&f->mem.lock);
        f->mem.fail_allocs = a % 4;
        f->mem.fail_code = b & 1 ? CORE_EFAIL : CORE_ENOMEM;
        f->mem.fail_maps = (a >> 2) % 3;
        pthread_mutex_unlock(&f->mem.lock);
        break;
    case 10:
        pthread_mutex_lock(&f->mem.lock);
        f->mem.auto_complete = a & 1;
        pthread_mutex_unlock(&f->mem.lock);
        core_set_streams(f->d, (a >> 1) & 3);
        break;
    case 11:
        op_lookup(f, b, c);
        break;
    case 12:
        op_bad_free(f, b, c);
        break;
    case 13:
        op_usage(f);
        break;
    case 14:
        op_stats(f, a);
        break;
    case 15:
        core_set_observer(f->d, a & 1 ? observe : NULL, f);
        break;
    }
    check(f, names[op]);
}

/* ------------------------------------------------------------------------
 * One input
 * ---------------------------------------------------------------------- */

static void setup(fuzz_t *f, uint8_t confbits, uint8_t cap)
{
    char text[512] = "", err[256];
    for (int i = 0; i < 8; i++)
        if (confbits >> i & 1) {
            if (text[0])
                strcat(text, ",");
            strcat(text, fuzz_confs[i]);
        }
    if ((cap & 0x80) && !(confbits & 0x10))
        strcat(text, cap & 0x40 ? (text[0] ? ",expandable_segments:true,expandable_page_mb:4"
                                           : "expandable_segments:true,expandable_page_mb:4")
                                : (text[0] ? ",expandable_segments:true" : "expandable_segments:true"));
    if ((cap & 0x80) && !(confbits & 0x10) && (cap & 0x20))
        strcat(text, ",expandable_share_pages:true");
    conf_t conf;
    conf_defaults(&conf);
    if (conf_parse(&conf, text, err, sizeof err) != 0)
        fuzz_fail(f, "configuration \"%s\" refused: %s", text, err);
    f->capacity = (1 + (size_t)(cap % 32)) * 16 * MiB;
    mem_backend_init(&f->mem, f->capacity);
    f->mem.orders = true; /* as the interposer's backend: reuse:ordered hands frees behind fences out */
    core_backend_t be = mem_backend_vtable(&f->mem);
    f->d = core_dev_new(&be, 0, &conf);
    if (!f->d)
        fuzz_fail(f, "core_dev_new failed");
    core_set_history(f->d, 1024); /* small: it wraps */
    f->whatif_done = false;
}

static void teardown(fuzz_t *f)
{
    core_pool_use(f->d, 0); /* the routing is per thread: the next input starts on the default pools */
    core_dev_destroy(f->d);
    if (f->mem.nsegs || f->mem.used || f->mem.n_bad_free)
        fuzz_fail(f, "after destroy: %zu segments (%zu bytes) still held, %llu bad segment frees", f->mem.nsegs,
                  f->mem.used, (unsigned long long)f->mem.n_bad_free);
    if (f->mem.n_alloc != f->mem.n_free)
        fuzz_fail(f, "after destroy: %llu segments allocated, %llu freed", (unsigned long long)f->mem.n_alloc,
                  (unsigned long long)f->mem.n_free);
    mem_backend_fini(&f->mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fuzz_t f; /* large: not on the stack */
    if (size < 2)
        return 0;
    memset(&f, 0, sizeof f);
    setup(&f, data[0], data[1]);
    check(&f, "setup");
    for (size_t i = 2; i + 4 <= size; i += 4) {
        f.step++;
        step(&f, data + i);
    }
    teardown(&f);
    return 0;
}
