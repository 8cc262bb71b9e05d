/*
 * Sharing a GPU with other processes (docs/interposer.md, "Sharing a
 * GPU"): this process in each of its GPUs' registries (stats/registry.h),
 * and idle cache given back when a neighbour's allocation would fail.
 *
 * Publishing: each device with an allocator has a thread of its own that
 * publishes the cache's figures in the process's slot every
 * YIELD_PERIOD_NS, and at once after answering an ask.  The allocation
 * path never touches the registry: the thread reads the core's usage and
 * counters under the device lock, four times a second.
 *
 * Yielding: once the process is in the registry (hd->yielding), an
 * allocation's first try is uncounted (not counted, no OOM event, not in
 * the history), and one that failed after the core's own retries (not a
 * limit's refusal, not during a capture) asks the cucache processes on the
 * GPU that hold cache, the most idle first, until what they published as
 * idle covers the missing bytes (all of them holding cache when it does
 * not), waits for their answers up to CUCACHE_YIELD_MS, and past it while
 * a neighbour is visibly giving back (its slot's `giving` word) and making
 * progress (the device's free memory grows): HOOK_YIELD_BOUND times
 * CUCACHE_YIELD_MS without growth ends the wait, and HOOK_YIELD_CAP times
 * it from the ask ends it in any case, so that a give that never ends
 * holds nobody.  As soon as the device's free memory covers the request
 * the wait ends without the answers.  Then the allocation is tried once
 * more, counted (the flow is fail.c's; hook_yield_ask asks and returns the
 * answer, in which what landed beyond the answers counts as given, by the
 * one neighbour still giving when there was one).  The
 * asked process's thread gives back, with core_yield, whole free segments
 * only: what no queued work can touch, without waiting for any; the device
 * lock is taken once per segment; it publishes its figures, then answers.
 * A neighbour that does not answer in time (busy, stopped, killed, or
 * giving past the bound or the cap) costs the asker the wait and nothing
 * else; what it gives after the asker stopped waiting is free device
 * memory, which the asker's next allocation (or anyone's) takes.
 *
 * The thread blocks every signal (the program's handlers run on its own
 * threads), goes through open_lock to reach the allocator (a reset may
 * destroy it), and is stopped and joined at exit before the slot is given
 * back.  A fork child has no thread and leaves its parent's slot alone:
 * it never enters a registry.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "env.h"
#include "hook.h"
#include "hostalloc.h"
#include "log.h"
#include "nvml_procs.h"
#include "real.h"
#include "registry.h"
#include "st.h"
#include "state.h"
#include "yield.h"

#define YIELD_PERIOD_NS 250000000ull

typedef struct yield_dev_s {
    hook_dev_t *hd;
    st_reg_t reg;
    int slot; /* -1: not in the registry */
    pthread_t thread;
    bool running;
    atomic_bool stop;
} yield_dev_t;

static yield_dev_t ydev[HOOK_MAX_DEVICES];

static pthread_once_t yield_once = PTHREAD_ONCE_INIT;
static atomic_bool forked; /* this is a fork child: no registry */

/* ------------------------------------------------------------------------
 * The thread
 * ---------------------------------------------------------------------- */

static void take_figures(core_dev_t *d, void *arg)
{
    st_reg_figs_t *f = arg;
    core_usage_t u;
    core_stats_t s;
    core_usage(d, &u);
    core_stats_get(d, &s);
    *f = (st_reg_figs_t){
        .reserved = u.reserved,
        .allocated = u.allocated,
        .cached = u.cached_free,
        .idle = u.releasable,
        .pending = u.pending,
        .allocs = s.allocation[CORE_POOL_ALL].allocated,
        .hits = s.num_cache_hits,
        .ooms = s.num_ooms,
        .yields_given = s.num_yields_given,
        .bytes_given = s.yield_bytes_given,
        .yields_received = s.num_yields_received,
        .bytes_received = s.yield_bytes_received,
    };
}

static void publish(yield_dev_t *y)
{
    st_reg_figs_t f = {0};
    hook_dev_with_core(y->hd, take_figures, &f);
    st_reg_publish(&y->reg, y->slot, &f);
}

typedef struct give_s {
    uint64_t want, given;
} give_t;

static void give(core_dev_t *d, void *arg)
{
    give_t *g = arg;
    g->given = core_yield(d, g->want > SIZE_MAX ? SIZE_MAX : (size_t)g->want);
}

static void *yield_main(void *arg)
{
    yield_dev_t *y = arg;
    uint32_t served = atomic_load(&y->reg.f->slot[y->slot].answered);
    publish(y);
    uint64_t next = st_reg_now_ns() + YIELD_PERIOD_NS;
    while (!atomic_load(&y->stop)) {
        uint64_t now = st_reg_now_ns();
        uint32_t a = st_reg_wait_ask(&y->reg, y->slot, served, next > now ? next - now : 1);
        if (atomic_load(&y->stop))
            break;
        if (a != served) {
            give_t g = {st_reg_take_want(&y->reg, y->slot), 0};
            if (g.want && hook_env()->yield)
                hook_dev_with_core(y->hd, give, &g);
            publish(y); /* before the answer: the asker's report reads the figures after the give */
            st_reg_answer(&y->reg, y->slot, a, g.given);
            served = a;
        }
        if (st_reg_now_ns() >= next) {
            publish(y);
            next = st_reg_now_ns() + YIELD_PERIOD_NS;
        }
    }
    return NULL;
}

/* At exit: every thread stopped and joined, then the slots given back. */
static void yield_exit(void)
{
    if (atomic_load(&forked))
        return;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        yield_dev_t *y = &ydev[i];
        if (y->slot < 0 || !y->reg.f)
            continue;
        if (y->running) {
            atomic_store(&y->stop, true);
            st_reg_wake_owner(&y->reg, y->slot);
            pthread_join(y->thread, NULL);
            y->running = false;
        }
        st_reg_leave(&y->reg, y->slot);
        y->slot = -1;
    }
}

static void yield_atfork_child(void)
{
    atomic_store(&forked, true);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        ydev[i].slot = -1; /* the parent's */
        ydev[i].running = false;
    }
}

static void yield_init(void)
{
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        ydev[i].slot = -1;
    st_reg_sweep(); /* the files of processes that died before they could leave */
    pthread_atfork(NULL, NULL, yield_atfork_child);
    atexit(yield_exit);
}

void hook_yield_dev_opened(hook_dev_t *hd)
{
    const hook_env_t *env = hook_env();
    if (!env->registry || atomic_load(&forked) || (unsigned)hd->ordinal >= HOOK_MAX_DEVICES)
        return;
    pthread_once(&yield_once, yield_init);
    yield_dev_t *y = &ydev[hd->ordinal];
    if (y->slot >= 0) /* a reset device opened again: the same slot and thread */
        return;
    char uuid[48], path[160], why[320];
    size_t total = 0;
    if (!hook_device_uuid(hd, uuid) || real_cu.cuDeviceTotalMem_v2(&total, hd->handle) != CUDA_SUCCESS)
        return;
    st_reg_path(uuid, path, sizeof path);
    int slot = -1;
    for (int tries = 0; tries < 3; tries++) {
        if (st_reg_open(path, uuid, total, true, &y->reg, why, sizeof why) != 0) {
            hook_warn(HOOK_WARN_BACKEND,
                      "GPU %d: registry not used: %s; this process neither gives nor asks for idle cache on this GPU",
                      hd->ordinal, why);
            return;
        }
        slot = st_reg_claim(&y->reg);
        if (slot < 0 || st_reg_current(&y->reg))
            break;
        st_reg_leave(&y->reg, slot); /* its last process removed it meanwhile: open again */
        st_reg_close(&y->reg);
        slot = -1;
    }
    if (slot < 0) {
        if (y->reg.f) {
            hook_warn(HOOK_WARN_BACKEND, "GPU %d: registry %s is full (%u processes); this process is not listed",
                      hd->ordinal, path, ST_REG_SLOTS);
            st_reg_close(&y->reg);
        }
        return;
    }
    y->hd = hd;
    y->slot = slot;
    /* from the first allocation on, failures ask the neighbours first */
    atomic_store_explicit(&hd->yielding, env->yield && env->yield_ms, memory_order_relaxed);
    atomic_store(&y->stop, false);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    y->running = pthread_create(&y->thread, NULL, yield_main, y) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!y->running)
        hook_warn(HOOK_WARN_BACKEND, "GPU %d: the registry thread could not start; this process's figures stay as "
                  "they were when it opened the GPU, and it gives no idle cache back",
                  hd->ordinal);
}

/* ------------------------------------------------------------------------
 * Asking
 * ---------------------------------------------------------------------- */

static int by_idle(const void *a, const void *b)
{
    const st_reg_view_t *x = a, *y = b;
    if (x->figs.idle != y->figs.idle)
        return x->figs.idle > y->figs.idle ? -1 : 1;
    uint64_t cx = x->figs.reserved - x->figs.allocated, cy = y->figs.reserved - y->figs.allocated;
    return cx > cy ? -1 : cx < cy;
}

/* What the asker watches while it waits: the device's free memory, which
 * grows as the neighbours' segments land. */
typedef struct watch_s {
    hook_dev_t *hd;
    uint64_t fits;    /* the request fits once the device has this free */
    uint64_t free0;   /* the device's free bytes at the ask */
    uint64_t best;    /* the most seen free since */
    uint64_t last_ns; /* when it last grew (the ask at first) */
    uint64_t span_ns; /* a give that shows no progress this long ends the wait */
    uint64_t cap_ns;  /* the wait ends here, progress or not */
    bool landed;      /* enough has landed: try again now */
} watch_t;

/* The device's free bytes now; false when they cannot be read.  The
 * failure's device error (hook_backend_error) stays the allocation's. */
static bool device_free(hook_dev_t *hd, uint64_t *out)
{
    size_t f = 0, t = 0;
    CUresult kept = hook_backend_error;
    bool ok = hook_backend.mem_info(hook_backend_ctx(hd), hd->ordinal, &f, &t) == CORE_OK;
    hook_backend_error = kept;
    if (ok)
        *out = f;
    return ok;
}

/* The wait's bound (st_reg_bound_fn): HOOK_YIELD_BOUND times
 * CUCACHE_YIELD_MS from the last growth of free memory, HOOK_YIELD_CAP
 * times it from the ask at most; 0 once the request fits. */
static uint64_t watch_bound(void *arg, uint64_t now_ns)
{
    watch_t *w = arg;
    uint64_t f;
    if (!w->landed && device_free(w->hd, &f) && f > w->best) {
        w->best = f;
        w->last_ns = now_ns;
        w->landed = f >= w->fits;
    }
    if (w->landed)
        return 0;
    uint64_t b = w->last_ns + w->span_ns;
    return b < w->cap_ns ? b : w->cap_ns;
}

/* What landed while the asker waited beyond the answers (free memory's
 * growth less what answered): the part-way give of the neighbours still
 * giving when the wait ended (named when there is one).  When every
 * neighbour answered, the answers are what was given: the device's free
 * memory also moves with frees that are not gives (another process's). */
static void note_landed(hook_ask_t *a, const watch_t *w)
{
    uint64_t landed = w->best - w->free0;
    if (landed <= a->given)
        return;
    unsigned giving = 0, at = 0;
    for (unsigned i = 0; i < a->n; i++)
        if (a->who[i].end == ST_REG_STILL_GIVING)
            giving++, at = i;
    if (giving == 0)
        return;
    if (giving == 1)
        a->who[at].given = landed - a->given;
    a->given = landed;
}

hook_ask_t hook_yield_ask(hook_dev_t *hd, const core_oom_t *oom)
{
    const hook_env_t *env = hook_env();
    hook_ask_t a = {0};
    if (!env->registry || !env->yield || !env->yield_ms || (unsigned)hd->ordinal >= HOOK_MAX_DEVICES)
        return a;
    yield_dev_t *y = &ydev[hd->ordinal];
    if (y->slot < 0 || atomic_load(&forked))
        return a;
    st_reg_view_t *v = hostalloc_malloc(ST_REG_SLOTS * sizeof *v);
    if (!v)
        return a;
    size_t n = st_reg_list(&y->reg, v, ST_REG_SLOTS), m = 0;
    if (n > ST_REG_SLOTS)
        n = ST_REG_SLOTS;
    int32_t me = (int32_t)getpid();
    for (size_t i = 0; i < n; i++) /* the neighbours */
        if (v[i].pid != me)
            v[m++] = v[i];
    qsort(v, m, sizeof *v, by_idle);
    if (m > HOOK_ASK_MAX)
        m = HOOK_ASK_MAX;
    uint64_t need = oom->alloc_size > oom->device_free ? oom->alloc_size - oom->device_free : oom->alloc_size;
    if (!need)
        need = 1;
    uint32_t ticket[HOOK_ASK_MAX];
    uint64_t t0 = st_reg_now_ns(), ms = (uint64_t)env->yield_ms * 1000000ull, deadline = t0 + ms;
    watch_t w = {.hd = hd,
                 .fits = oom->alloc_size,
                 .free0 = oom->device_free,
                 .last_ns = t0,
                 .span_ns = HOOK_YIELD_BOUND * ms,
                 .cap_ns = t0 + HOOK_YIELD_CAP * ms};
    device_free(hd, &w.free0);
    w.best = w.free0;
    /* first those whose published idle cache covers the need, then, when
     * they gave less, the rest (what they published may be older than
     * their last frees) */
    size_t k = 0;
    for (int round = 0; round < 2 && a.given < need && !w.landed && k < m; round++) {
        size_t from = k;
        uint64_t idle = 0;
        while (k < m && (round == 1 || (v[k].figs.reserved > v[k].figs.allocated && idle < need))) {
            idle += v[k].figs.idle;
            a.who[k].pid = v[k].pid;
            ticket[k] = st_reg_ask(&y->reg, v[k].slot, need - a.given);
            k++;
        }
        for (size_t i = from; i < k; i++) {
            st_reg_answer_t ans =
                st_reg_wait_answer_by(&y->reg, v[i].slot, v[i].pid, ticket[i], deadline, watch_bound, &w);
            a.who[i].end = ans.end;
            if (ans.end == ST_REG_ANSWERED) {
                a.who[i].given = ans.given;
                a.who[i].after_ns = ans.at_ns > t0 ? ans.at_ns - t0 : 0;
            }
            a.given += a.who[i].given;
        }
    }
    a.n = (unsigned)k;
    a.waited_ns = st_reg_now_ns() - t0;
    note_landed(&a, &w);
    st_reg_note_wait(hd->ordinal, a.waited_ns, a.given);
    hostalloc_free(v);
    return a;
}

/* ------------------------------------------------------------------------
 * The OOM report's view
 * ---------------------------------------------------------------------- */

void hook_yield_fill(const hook_dev_t *hd, const hook_ask_t *ask, st_gpu_procs_t *out)
{
    const hook_env_t *env = hook_env();
    if ((unsigned)hd->ordinal >= HOOK_MAX_DEVICES)
        return;
    yield_dev_t *y = &ydev[hd->ordinal];
    out->yield_on = env->registry && env->yield && env->yield_ms && y->slot >= 0;
    out->asked = ask->n;
    out->given = ask->given;
    out->waited_ns = ask->waited_ns;
    for (unsigned i = 0; i < ask->n; i++) {
        bool died_giving = ask->who[i].end == ST_REG_DIED_GIVING;
        if (!died_giving && ask->who[i].end != ST_REG_GONE)
            continue;
        if (!out->gone++ || (died_giving && !out->gone_giving)) { /* the first, or the first that was giving */
            out->gone_pid = (unsigned)ask->who[i].pid;
            out->gone_giving = died_giving;
        }
    }
    if (y->slot < 0 || !out->n)
        return;
    st_reg_view_t *v = hostalloc_malloc(ST_REG_SLOTS * sizeof *v);
    if (!v)
        return;
    size_t n = st_reg_list(&y->reg, v, ST_REG_SLOTS);
    if (n > ST_REG_SLOTS)
        n = ST_REG_SLOTS;
    st_gpu_proc_t *rows = (st_gpu_proc_t *)out->procs;
    core_dev_t *d = hook_dev_core((hook_dev_t *)hd);
    core_usage_t self = {0};
    if (d)
        core_usage(d, &self);
    for (size_t r = 0; r < out->n; r++) {
        if (rows[r].pid == out->self_pid) { /* its own figures now, not as last published */
            rows[r].cucache = d != NULL;
            rows[r].allocated = self.allocated;
            rows[r].reserved = self.reserved;
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            if ((unsigned)v[i].pid != rows[r].pid)
                continue;
            rows[r].cucache = true;
            rows[r].torn = v[i].stale;
            rows[r].allocated = v[i].figs.allocated;
            rows[r].reserved = v[i].figs.reserved;
            rows[r].age_ms = st_reg_age_ms(&v[i].figs);
        }
        for (unsigned i = 0; i < ask->n; i++)
            if ((unsigned)ask->who[i].pid == rows[r].pid) {
                rows[r].asked = true;
                rows[r].answered = ask->who[i].end == ST_REG_ANSWERED;
                rows[r].still_giving = ask->who[i].end == ST_REG_STILL_GIVING;
                rows[r].given = ask->who[i].given;
                rows[r].answer_ms = ask->who[i].after_ns / 1000000u;
            }
    }
    hostalloc_free(v);
}
