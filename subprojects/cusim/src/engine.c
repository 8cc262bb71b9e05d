/*
 * The simulated device's engine, part one: configuration, initialisation,
 * vector clocks, host threads and contexts.  Streams, workers, host waits
 * and capture are in engine_stream.c.  See engine.h for the model.
 */
#include "engine.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "handles.h"

sim_state_t sim = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
};

/* ------------------------------------------------------------------------
 * Small helpers
 * ---------------------------------------------------------------------- */

void sim_lock(void)
{
    pthread_mutex_lock(&sim.lock);
}

void sim_unlock(void)
{
    pthread_mutex_unlock(&sim.lock);
}

uint64_t sim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void sim_wait_until_ns(uint64_t t)
{
    uint64_t spin = (uint64_t)sim.cfg.spin_us * 1000u;
    for (;;) {
        uint64_t now = sim_now_ns();
        if (now >= t)
            return;
        if (t - now > spin) {
            uint64_t ns = t - now - spin;
            struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
            nanosleep(&ts, NULL);
        } else {
            sched_yield();
        }
    }
}

uint64_t sim_kernel_ns(const char *name)
{
    for (unsigned i = 0; i < sim.cfg.nkernels; i++)
        if (name && strstr(name, sim.cfg.kernels[i].name))
            return sim.cfg.kernels[i].ns;
    return sim.cfg.kernel_ns;
}

void sim_sleep_us(unsigned us)
{
    if (!us)
        return;
    struct timespec ts = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

const char *sim_stream_name(const struct CUstream_st *s, char *buf, size_t len)
{
    const char *kind = s->kind == SIM_STREAM_LEGACY          ? "legacy default"
                       : s->kind == SIM_STREAM_PER_THREAD    ? "per-thread default"
                       : (s->flags & CU_STREAM_NON_BLOCKING) ? "non-blocking"
                                                             : "blocking";
    if (s->kind == SIM_STREAM_CREATED)
        snprintf(buf, len, "stream #%lu %p (%s, device %d)", s->id, (const void *)s, kind, s->ctx->dev->ordinal);
    else
        snprintf(buf, len, "stream #%lu (%s, device %d)", s->id, kind, s->ctx->dev->ordinal);
    return buf;
}

/* ------------------------------------------------------------------------
 * Vector clocks
 * ---------------------------------------------------------------------- */

sim_vc_t *vc_new(uint32_t n)
{
    sim_vc_t *vc = sim_xcalloc(1, sizeof *vc + n * sizeof(uint64_t));
    vc->refs = 1;
    vc->n = n;
    return vc;
}

sim_vc_t *vc_retain(sim_vc_t *vc)
{
    if (vc)
        vc->refs++;
    return vc;
}

void vc_release(sim_vc_t *vc)
{
    if (vc && --vc->refs == 0)
        free(vc);
}

/* Returns a private clock with at least n entries holding *a's values. */
sim_vc_t *vc_own(sim_vc_t **a, uint32_t n)
{
    sim_vc_t *old = *a;
    if (old && old->refs == 1 && old->n >= n)
        return old;
    uint32_t m = old && old->n > n ? old->n : n;
    sim_vc_t *nv = vc_new(m);
    if (old) {
        memcpy(nv->c, old->c, old->n * sizeof(uint64_t));
        vc_release(old);
    }
    *a = nv;
    return nv;
}

void vc_join(sim_vc_t **a, const sim_vc_t *b)
{
    if (!b)
        return;
    bool needed = !*a || (*a)->n < b->n;
    for (uint32_t i = 0; !needed && i < b->n; i++)
        needed = b->c[i] > (*a)->c[i];
    if (!needed)
        return;
    sim_vc_t *v = vc_own(a, b->n);
    for (uint32_t i = 0; i < b->n; i++)
        if (b->c[i] > v->c[i])
            v->c[i] = b->c[i];
}

void sim_host_observe(const sim_vc_t *vc)
{
    sim_vc_t *before = sim.host_vc;
    vc_join(&sim.host_vc, vc);
    if (sim.host_vc != before || vc)
        race_gc();
}

/* ------------------------------------------------------------------------
 * Initialisation
 * ---------------------------------------------------------------------- */

/* The address range of each device: eight times its capacity, within 48
 * TiB of addresses for all devices together, and never less than the
 * capacity. */
static size_t device_span(size_t capacity, int devices)
{
    const size_t budget = ((size_t)48 << 40) / (size_t)devices;
    size_t span = capacity <= budget / 8 ? capacity * 8 : budget;
    if (span < capacity)
        span = capacity;
    return span / SIM_PAGE * SIM_PAGE;
}

static CUresult device_init(sim_device_t *d, int ordinal, size_t capacity)
{
    CUresult r = sim_dev_init(d, ordinal, capacity, device_span(capacity, sim.cfg.devices));
    if (r != CUDA_SUCCESS)
        return r;
    d->default_pool = sim_pool_new(d, true);
    d->current_pool = d->default_pool;
    return CUDA_SUCCESS;
}

/* Opens the device shared with the other processes of the configured key
 * (engine_shared.c), if any. */
static CUresult shared_open(void)
{
    if (!sim.cfg.shared_key[0])
        return CUDA_SUCCESS;
    sim_shared_identity_t id;
    sim_config_identity(&sim.cfg, &id);
    sim.shared = sim_shared_open(sim.cfg.shared_key, &id, true);
    return sim.shared ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static void atfork_child(void)
{
    /* The child has only the forking thread: no workers, and the lock may be
     * held by a thread that no longer exists.  Like a real CUDA context, the
     * simulated device is not usable in the child; make calls fail cleanly. */
    pthread_mutex_init(&sim.lock, NULL);
    pthread_cond_init(&sim.cv, NULL);
    sim.shared = NULL; /* not mapped in the child (MADV_DONTFORK); the parent's entry */
    if (sim.initialized)
        sim.init_result = CUDA_ERROR_NOT_INITIALIZED;
}

CUresult sim_init(void)
{
    sim_lock();
    if (sim.initialized) {
        CUresult r = sim.init_result;
        sim_unlock();
        return r;
    }
    CUresult r = sim_config_read(&sim.cfg) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = shared_open();
    for (int i = 0; r == CUDA_SUCCESS && i < sim.cfg.devices; i++)
        r = device_init(&sim.dev[i], i, sim.cfg.capacity);
    if (r == CUDA_SUCCESS) {
        sim.ndev = sim.cfg.devices;
        r = sim_vmm_init();
    }
    if (r == CUDA_SUCCESS) {
        sim.host_vc = vc_new(1);
        race_init();
        pthread_atfork(NULL, NULL, atfork_child);
    }
    sim.initialized = true;
    sim.init_result = r;
    sim_unlock();
    return r;
}

CUresult sim_check_init(void)
{
    if (!sim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    return sim.init_result;
}

/* ------------------------------------------------------------------------
 * Threads
 * ---------------------------------------------------------------------- */

static __thread sim_thread_t tls;
static pthread_key_t thread_key;
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;

/* At thread exit its per-thread default streams are destroyed; their
 * pending work still completes. */
static void thread_exit(void *arg)
{
    sim_thread_t *t = arg;
    sim_lock();
    for (size_t i = 0; i < SIM_MAX_DEVICES * 2; i++) {
        struct CUstream_st *s = t->pts[i];
        if (s && handle_is(s, SIM_MAGIC_STREAM) && handle_is(t->pts_ctx[i], SIM_MAGIC_CTX) &&
            t->pts_ctx[i]->generation == t->pts_gen[i])
            sim_stream_destroy(s);
        t->pts[i] = NULL;
    }
    sim_unlock();
}

static void thread_key_make(void)
{
    pthread_key_create(&thread_key, thread_exit);
}

sim_thread_t *sim_thread(void)
{
    if (!tls.registered) {
        pthread_once(&thread_key_once, thread_key_make);
        pthread_setspecific(thread_key, &tls);
        tls.registered = true;
    }
    return &tls;
}

/* ------------------------------------------------------------------------
 * Contexts
 * ---------------------------------------------------------------------- */

struct CUctx_st *sim_ctx_current(void)
{
    sim_thread_t *t = sim_thread();
    return t->depth ? t->ctx_stack[t->depth - 1] : NULL;
}

bool sim_ctx_valid(const struct CUctx_st *ctx)
{
    return ctx && handle_is(ctx, SIM_MAGIC_CTX);
}

CUresult sim_ctx_get(struct CUctx_st **out)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUctx_st *ctx = sim_ctx_current();
    if (!sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx->sticky != CUDA_SUCCESS)
        return ctx->sticky;
    *out = ctx;
    return CUDA_SUCCESS;
}

struct CUctx_st *sim_ctx_create(sim_device_t *dev, bool primary)
{
    struct CUctx_st *ctx = sim_xcalloc(1, sizeof *ctx);
    ctx->magic = SIM_MAGIC_CTX;
    ctx->dev = dev;
    ctx->primary = primary;
    ctx->sticky = CUDA_SUCCESS;
    handle_add(ctx, SIM_MAGIC_CTX);
    ctx->legacy = sim_stream_create(ctx, SIM_STREAM_LEGACY, 0, 0);
    return ctx;
}

/* Waits for the context's work, then destroys its streams and frees its
 * memory.  The struct itself stays (primary contexts are reused). */
static void ctx_teardown(struct CUctx_st *ctx)
{
    sim_ctx_wait_idle(ctx);
    sim_capture_end_all(ctx);
    for (struct CUstream_st *s = ctx->streams, *next; s; s = next) {
        next = s->ctx_next;
        if (!s->dying)
            sim_stream_destroy(s);
    }
    struct CUevent_st **evs = NULL;
    size_t nev = handle_list(SIM_MAGIC_EVENT, (void ***)&evs);
    for (size_t i = 0; i < nev; i++)
        if (evs[i]->ctx == ctx) {
            handle_del(evs[i]);
            evs[i]->dead = true;
            if (evs[i]->pending == 0)
                sim_event_free(evs[i]);
        }
    free(evs);
    sim_peer_forget(ctx);
    sim_modules_free_ctx(ctx);
    sim_texobjs_free_ctx(ctx);
    sim_arrays_free_ctx(ctx);
    sim_free_ctx_memory(ctx);
    memset(ctx->limit_set, 0, sizeof ctx->limit_set); /* a reset primary context has the defaults */
    ctx->cache_config = CU_FUNC_CACHE_PREFER_NONE;
    ctx->generation++;
}

void sim_ctx_destroy(struct CUctx_st *ctx)
{
    ctx_teardown(ctx);
    if (ctx->primary) {
        ctx->sticky = CUDA_SUCCESS;
        ctx->legacy = sim_stream_create(ctx, SIM_STREAM_LEGACY, 0, 0);
        return;
    }
    handle_del(ctx);
    /* Threads may still hold it on their stack: the handle table no longer
     * validates it, and the struct outlives a while in quarantine; streams
     * still draining keep pointing at it, so it is kept while they run. */
    if (!ctx->streams) {
        vc_release(ctx->retired_vc);
        vc_release(ctx->retired_blocking_vc);
        ctx->magic = SIM_MAGIC_DEAD;
        sim_handle_release(ctx);
    }
}
