/*
 * What if (core_whatif): at an out-of-memory failure, the device's history
 * (journal.c) replayed through fresh allocators under other settings, on
 * an in-process device of the memory this allocator could have had, to
 * find the settings under which the failed request would have been served.
 *
 * The replay starts from the allocations live when the kept window begins
 * (allocated in their order), then makes the window's calls in the order
 * the device lock took them: allocations (in the pool they went to, on
 * their stream), frees (a plain free follows the setting's reuse rule, a
 * stream-ordered one its stream), polls, fences, synchronisations,
 * captures, empty_cache and private pools.  The device is idle: a fence or
 * event has completed when it is queried, as on a GPU whose kernels have
 * finished.  A setting "fits" when every allocation the program got is
 * served and so is the failed request; an allocation that failed in the
 * run is tried and, when served, freed at once (what the program would
 * have done with it is unknown).
 *
 * The current settings are replayed first: when they do not fail where the
 * run failed, the model does not explain the failure (work still queued on
 * the device, memory outside the allocator that changed) and no setting is
 * claimed.  Settings are replayed on worker threads against one deadline;
 * those not finished by then are reported as not tried.
 *
 * A setting that differs from the current ones only in max_split_size is
 * not replayed when no segment the current settings' replay made
 * reached that size: max_split_size decides only for blocks and requests at
 * or above it (which blocks a request may take, whether a block splits,
 * what the retry ladder releases), so with every block below it the two
 * replays take the same steps.  Such settings are replayed last, after the
 * current settings' replay has finished, and take its result.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_mem.h"
#include "hostalloc.h"
#include "types.h"

/* The settings tried, each on top of the current ones (skipped when it
 * changes nothing or the combination is refused), in this order: the
 * prefixes, each reuse rule the rule table offers to the what-if
 * (core_rule_t.whatif) alone, the other settings, then each such rule with
 * each combination. */
static const char *const candidate_prefixes[] = {
    "expandable_segments:true",
    "expandable_segments:true,expandable_share_pages:true",
};
static const char *const candidate_others[] = {
    "max_split_size_mb:20",
    "max_split_size_mb:64",
    "max_split_size_mb:128",
    "max_split_size_mb:256",
    "max_split_size_mb:512",
    "roundup_power2_divisions:2",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:8",
    "roundup_power2_divisions:16",
    "garbage_collection_threshold:0.8",
    "strategy:auto_growth",
    "strategy:preallocate",
};
static const char *const candidate_with_rules[] = {
    "expandable_segments:true",
    "max_split_size_mb:64",
};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define CANDIDATE_LEN sizeof(((core_whatif_row_t *)0)->change)

/* candidates[0 .. ncandidates): the settings tried, with room for the
 * current settings in row 0 */
static char candidates[CORE_WHATIF_MAX - 1][CANDIDATE_LEN];
static size_t ncandidates;
static pthread_once_t candidates_once = PTHREAD_ONCE_INIT;

/* Adds "first,reuse:rule" (either part may be empty: "" and NULL).  A
 * setting past the rows' room, or longer than a row's change text, is left
 * out (with today's rows and keys neither happens). */
static void candidate_add(const char *first, const core_rule_t *rule)
{
    if (ncandidates == NELEM(candidates))
        return;
    int n = snprintf(candidates[ncandidates], CANDIDATE_LEN, "%s%s%s%s", first, *first && rule ? "," : "",
                     rule ? "reuse:" : "", rule ? rule->name : "");
    if (n > 0 && (size_t)n < CANDIDATE_LEN)
        ncandidates++;
}

static void candidates_build(void)
{
    for (size_t i = 0; i < NELEM(candidate_prefixes); i++)
        candidate_add(candidate_prefixes[i], NULL);
    for (int r = 0; r < CONF_REUSE_COUNT; r++)
        if (core_rules[r].whatif)
            candidate_add("", &core_rules[r]);
    for (size_t i = 0; i < NELEM(candidate_others); i++)
        candidate_add(candidate_others[i], NULL);
    for (size_t i = 0; i < NELEM(candidate_with_rules); i++)
        for (int r = 0; r < CONF_REUSE_COUNT; r++)
            if (core_rules[r].whatif)
                candidate_add(candidate_with_rules[i], &core_rules[r]);
}

const char *core_whatif_candidate(size_t i)
{
    pthread_once(&candidates_once, candidates_build);
    return i < ncandidates ? candidates[i] : NULL;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* What one worker shares with the others. */
typedef struct job_s {
    const jr_copy_t *c;
    const core_whatif_opts_t *o;
    int device;
    conf_t confs[CORE_WHATIF_MAX];
    core_whatif_row_t *rows;
    size_t nrows;
    _Atomic size_t next;
    size_t order[CORE_WHATIF_MAX]; /* the busy pass: rows that fit when idle, lowest peak first */
    size_t norder;
    _Atomic size_t proven; /* rows the busy pass kept */
    double deadline;
    _Atomic bool late;
    /* the first pass: rows in the order replayed (the current settings
     * first, those that may take their result last) */
    size_t first_order[CORE_WHATIF_MAX];
    bool split_only[CORE_WHATIF_MAX]; /* differs from the current settings only in max_split_size */
    pthread_mutex_t lock;             /* guards current_done, current_max_seg */
    pthread_cond_t current_ready;
    bool current_done;        /* rows[0] is final */
    bool busy_reproduced;     /* the current settings failed at the request on a busy device */
    size_t current_max_seg; /* the largest segment or reservation its replay made */
} job_t;

/* The pool ids of the run -> the replay's (created on first use). */
typedef struct pools_s {
    int from[64], to[64];
    size_t n;
} pools_t;

static int pool_map(core_dev_t *d, pools_t *p, int id)
{
    if (id == 0)
        return 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->from[i] == id)
            return p->to[i];
    int to = p->n < 64 ? core_pool_create(d) : -1;
    if (to < 0)
        return 0; /* more private pools than followed: the default pools */
    p->from[p->n] = id;
    p->to[p->n++] = to;
    return to;
}

static void pool_forget(pools_t *p, int id)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->from[i] == id) {
            p->from[i] = p->from[--p->n];
            p->to[i] = p->to[p->n];
            return;
        }
}

static uintptr_t replay_alloc(core_dev_t *d, pools_t *p, int pool, core_stream_t key, uint64_t size)
{
    int to = pool_map(d, p, pool);
    if (to)
        core_pool_use(d, to);
    uintptr_t a = core_malloc(d, (size_t)size, key, NULL);
    if (to)
        core_pool_use(d, 0);
    return a;
}

/* One setting over the window.  A candidate stops at its first allocation
 * not served (it cannot fit: its peak is then the peak so far); the current
 * settings go to the end.  Returns false when the deadline passed. */
static bool replay_one(job_t *j, const conf_t *conf, core_whatif_row_t *row, bool to_the_end, bool busy,
                       size_t *max_seg)
{
    const jr_copy_t *c = j->c;
    mem_backend_t m;
    mem_backend_init(&m, j->o->capacity);
    m.total = j->o->total;
    m.auto_complete = !busy;
    m.solo = true; /* this thread's alone, as is the device */
    m.orders = c->orders; /* as the device's backend: hand-outs behind fences */
    core_backend_t be = mem_backend_vtable(&m);
    core_dev_t *d = core_dev_new(&be, j->device, conf);
    if (d) {
        core_dev_solo(d);
        d->streams = c->streams;
        d->no_hand_out = c->no_hand_out;
    }
    ht_t tab = {0}; /* allocation number -> address in the replay */
    pools_t pools = {.n = 0};
    bool ok = d && ht_reserve(&tab, c->nlive);
    bool capturing = false;
    row->ooms = 0;
    row->first_oom = UINT64_MAX;
    for (size_t i = 0; ok && i < c->nlive; i++) {
        const jr_live_t *l = &c->live[i];
        uintptr_t a = replay_alloc(d, &pools, l->pool, (core_stream_t)l->key, l->size);
        if (a && l->multi) /* used on other streams before the window: its free waits for the fence, as in the run */
            core_record_stream(d, a, JR_MULTI_STREAM);
        if (a)
            ht_put(&tab, l->id, a); /* no host memory: forgotten (its free is then skipped) */
        else if (row->ooms++ == 0)
            row->first_oom = 0;
    }
    for (size_t i = 0; ok && i < c->nrec; i++) {
        if ((i & 1023) == 1023 && now_s() > j->deadline) {
            atomic_store(&j->late, true);
            ok = false;
            break;
        }
        const jr_rec_t *r = &c->rec[i];
        unsigned op = r->w & 0xFF, how = (r->w >> 8) & 0xFF;
        int pool = (int)((r->w >> 16) & 0xFFFF);
        core_stream_t s1 = (r->w >> 32) & 0xFFFF, s2 = (r->w >> 48) & 0xFFFF;
        bool last = i + 1 == c->nrec;
        switch (op) {
        case JR_ALLOC: {
            uintptr_t a = replay_alloc(d, &pools, pool, s1, r->size);
            if (a)
                ht_put(&tab, r->id, a);
            else if (row->ooms++ == 0)
                row->first_oom = i + 1;
            if (!a && !to_the_end)
                i = c->nrec; /* leaves the loop */
            break;
        }
        case JR_ALLOC_FAIL: {
            uintptr_t a = replay_alloc(d, &pools, pool, s1, r->size);
            if (last) {
                row->fits = a != 0 && row->ooms == 0;
                if (!a && row->ooms++ == 0)
                    row->first_oom = i + 1;
            }
            if (a)
                core_free(d, a, CORE_FREE_FENCED, 0);
            break;
        }
        case JR_FREE: {
            uint64_t a;
            if (!ht_del(&tab, r->id, &a))
                break; /* its allocation failed here */
            core_free_t h = (core_free_t)(how & ~JR_HOW_MULTI);
            if (s2 == 0 && h != CORE_FREE_AFTER_STREAM) /* a plain free: the setting's reuse rule */
                h = rule_plain_free(conf_rule(conf), !capturing);
            core_free(d, (uintptr_t)a, h, s2);
            break;
        }
        case JR_POLL: /* after a stream or event synchronisation (busy: taken for the device's) */
            if (busy)
                mem_backend_complete_all(&m);
            core_poll(d);
            break;
        case JR_FENCE:
            core_fence(d);
            break;
        case JR_STREAMS:
            core_set_streams(d, (unsigned)r->size);
            break;
        case JR_NO_HAND_OUTS:
            core_stop_hand_outs(d);
            break;
        case JR_SYNC:
            if (busy)
                mem_backend_complete_all(&m);
            core_synchronized(d);
            break;
        case JR_CAPTURE:
            capturing = how != 0;
            core_set_capturing(d, capturing);
            break;
        case JR_EMPTY:
            core_empty_cache(d, pool == 0xFFFF ? -1 : pool_map(d, &pools, pool));
            break;
        case JR_POOL_CREATE:
            pool_map(d, &pools, pool);
            break;
        case JR_POOL_DESTROY:
            core_pool_destroy(d, pool_map(d, &pools, pool));
            pool_forget(&pools, pool);
            break;
        case JR_RECORD_STREAM: {
            uint64_t a;
            if (ht_get(&tab, r->id, &a))
                core_record_stream(d, (uintptr_t)a, s2);
            break;
        }
        default:
            break;
        }
    }
    if (d) {
        core_stats_t st;
        core_stats_get(d, &st);
        row->peak_reserved = (size_t)st.reserved_bytes[CORE_POOL_ALL].peak;
    }
    row->tried = ok;
    if (!ok)
        row->fits = false;
    if (max_seg)
        *max_seg = m.max_seg;
    ht_fini(&tab);
    core_dev_destroy(d);
    mem_backend_fini(&m);
    return ok;
}

/* Whether row i, which differs from the current settings only in
 * max_split_size, takes their result: they failed where the run failed
 * and no segment of theirs reached either max_split_size.  Waits for their
 * replay (another thread's, started first). */
static bool takes_current(job_t *j, size_t i)
{
    pthread_mutex_lock(&j->lock);
    while (!j->current_done)
        pthread_cond_wait(&j->current_ready, &j->lock);
    size_t largest = j->current_max_seg;
    pthread_mutex_unlock(&j->lock);
    const core_whatif_row_t *cur = &j->rows[0];
    size_t split = j->confs[i].max_split_size < j->confs[0].max_split_size ? j->confs[i].max_split_size
                                                                          : j->confs[0].max_split_size;
    if (!cur->tried || cur->ooms != 1 || cur->first_oom != j->c->nrec || largest >= split)
        return false;
    core_whatif_row_t *row = &j->rows[i];
    row->tried = true;
    row->fits = false;
    row->ooms = cur->ooms;
    row->first_oom = cur->first_oom;
    row->peak_reserved = cur->peak_reserved;
    row->same_as_current = true;
    return true;
}

static void *worker(void *arg)
{
    job_t *j = arg;
    for (size_t k; (k = atomic_fetch_add(&j->next, 1)) < j->nrows;) {
        size_t i = j->first_order[k];
        if (i == 0) {
            size_t largest = SIZE_MAX;
            if (!atomic_load(&j->late))
                replay_one(j, &j->confs[0], &j->rows[0], true, false, &largest);
            pthread_mutex_lock(&j->lock);
            j->current_done = true;
            j->current_max_seg = largest;
            pthread_cond_broadcast(&j->current_ready);
            pthread_mutex_unlock(&j->lock);
            continue;
        }
        if (atomic_load(&j->late))
            continue;
        if (j->split_only[i] && takes_current(j, i))
            continue;
        replay_one(j, &j->confs[i], &j->rows[i], false, false, NULL);
    }
    return NULL;
}

/* The second pass: each setting that fits on an idle device, on a busy one
 * (a fence or event completes only when the allocator waits for it or the
 * job synchronises): it must fit there too. */
static void *worker_busy(void *arg)
{
    job_t *j = arg;
    for (size_t k; (k = atomic_fetch_add(&j->next, 1)) < j->norder;) {
        size_t i = j->order[k];
        /* every row that fits when idle, whatever the threads' timing (a
         * count of rows proven first would depend on it), unless the time
         * is up */
        if (atomic_load(&j->late)) {
            j->rows[i].fits = false; /* not checked: not claimed */
            j->rows[i].unchecked = true;
            continue;
        }
        core_whatif_row_t busy = j->rows[i];
        if (!replay_one(j, &j->confs[i], &busy, false, true, NULL))
            j->rows[i].tried = false;
        j->rows[i].fits = busy.fits;
        if (busy.fits)
            atomic_fetch_add(&j->proven, 1);
    }
    return NULL;
}

/* The current settings on a busy device, when the idle one did not fail:
 * on a worker thread like every replay (a replay routes its thread's
 * allocations to its own pools, core_pool_use). */
static void *worker_current_busy(void *arg)
{
    job_t *j = arg;
    if (atomic_fetch_add(&j->next, 1) != 0)
        return NULL;
    core_whatif_row_t busy = j->rows[0];
    if (replay_one(j, &j->confs[0], &busy, true, true, NULL) && busy.ooms == 1 && busy.first_oom == j->c->nrec) {
        j->rows[0] = busy;
        j->busy_reproduced = true;
    }
    return NULL;
}

/* Runs fn on up to `threads` threads over the job's rows; false when no
 * thread could be started. */
static bool run_workers(job_t *j, int threads, void *(*fn)(void *))
{
    int nt = threads < 1 ? 1 : threads > 16 ? 16 : threads;
    atomic_store(&j->proven, 0);
    pthread_t th[16];
    int started = 0;
    atomic_store(&j->next, 0);
    for (int t = 0; t < nt; t++)
        if (pthread_create(&th[started], NULL, fn, j) == 0)
            started++;
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    return started > 0;
}

int core_whatif(core_dev_t *d, const core_oom_t *oom, const core_whatif_opts_t *o, core_whatif_t *out)
{
    memset(out, 0, sizeof *out);
    double t0 = now_s();
    if (!oom->history)
        return out->status = CORE_WHATIF_NO_HISTORY;
    jr_copy_t c;
    if (jr_take(d, oom->history_pos, &c) != 0)
        return out->status = CORE_WHATIF_NO_HISTORY;
    out->events = c.nrec;
    out->whole = c.first == 0 && c.nlive == 0;
    out->prelude = c.nlive;
    for (size_t i = 0; i < c.nlive; i++)
        out->prelude_bytes += c.live[i].size;
    out->limited = oom->limit < o->capacity; /* a limit is in every setting tried */
    out->capacity = out->limited ? oom->limit : o->capacity;
    out->request = oom->requested;
    /* live just before the request: the prelude and the window's net */
    int64_t live = (int64_t)out->prelude_bytes;
    for (size_t i = 0; i + 1 < c.nrec; i++) {
        unsigned op = c.rec[i].w & 0xFF;
        if (op == JR_ALLOC)
            live += (int64_t)c.rec[i].size;
        else if (op == JR_FREE)
            live -= (int64_t)c.rec[i].size;
    }
    out->live_bytes = live > 0 ? (size_t)live : 0;

    job_t *j = hostalloc_calloc(1, sizeof *j);
    if (!j) {
        jr_copy_free(&c);
        return out->status = CORE_WHATIF_NO_MEMORY;
    }
    j->c = &c;
    j->o = o;
    j->device = d->device;
    j->rows = out->rows;
    /* row 0: the settings the device runs with; the candidates: what the
     * user gets by adding the candidate to CUCACHE_CONF, as the hint says */
    conf_t cur, base;
    core_conf(d, &cur);
    j->confs[0] = cur; /* rows[0].change stays "" */
    char err[256];
    conf_defaults(&base);
    if (o->conf_text && conf_parse(&base, o->conf_text, err, sizeof err) != 0)
        base = cur;
    bool vmm = d->be.vmm_granularity && d->be.vmm_granularity(d->be.ctx, d->device) != 0;
    size_t n = 1;
    pthread_once(&candidates_once, candidates_build);
    for (size_t i = 0; i < ncandidates; i++) {
        conf_t t = base;
        if (conf_parse(&t, candidates[i], err, sizeof err) != 0 || memcmp(&t, &base, sizeof t) == 0)
            continue;
        if (t.expandable_segments && !vmm)
            continue; /* the device has no virtual memory: the setting would be ignored there */
        bool dup = false;
        for (size_t k = 1; k < n && !dup; k++)
            dup = memcmp(&t, &j->confs[k], sizeof t) == 0;
        if (dup)
            continue;
        j->confs[n] = t;
        memcpy(out->rows[n].change, candidates[i], sizeof out->rows[n].change); /* the same size */
        n++;
    }
    j->nrows = n;
    j->deadline = t0 + o->budget_s;
    /* the current settings first, the rows that may take their result last */
    size_t k = 0;
    j->first_order[k++] = 0;
    for (int last = 0; last < 2; last++)
        for (size_t i = 1; i < n; i++) {
            conf_t t = j->confs[i];
            t.max_split_size = j->confs[0].max_split_size;
            j->split_only[i] = memcmp(&t, &j->confs[0], sizeof t) == 0;
            if (j->split_only[i] == (last == 1))
                j->first_order[k++] = i;
        }
    if (out->live_bytes + out->request > out->capacity) {
        /* no setting can serve it: nothing to replay */
        out->beyond = true;
        out->reproduced = true;
        out->nrows = n;
        out->seconds = now_s() - t0;
        hostalloc_free(j);
        jr_copy_free(&c);
        return out->status = CORE_WHATIF_RAN;
    }
    /* every setting on worker threads, the current ones first: a replay
     * routes its thread to its own pools (core_pool_use), which must not
     * touch the routing of the thread that failed */
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->current_ready, NULL);
    if (!run_workers(j, o->threads, worker)) {
        pthread_cond_destroy(&j->current_ready);
        pthread_mutex_destroy(&j->lock);
        hostalloc_free(j);
        jr_copy_free(&c);
        return out->status = CORE_WHATIF_NO_MEMORY;
    }
    /* the current settings must fail where the run failed, and only there;
     * otherwise no candidate is judged.  A run that failed because frees
     * were still waiting on queued work fails in the replay only on a busy
     * device: tried there too before giving up (the candidates must fit on
     * both anyway) */
    out->reproduced = out->rows[0].tried && out->rows[0].ooms == 1 && out->rows[0].first_oom == c.nrec;
    if (!out->reproduced && out->rows[0].tried && !atomic_load(&j->late) &&
        run_workers(j, 1, worker_current_busy) && j->busy_reproduced)
        out->reproduced = out->reproduced_busy = true;
    for (size_t i = 1; i < n && !out->reproduced; i++)
        out->rows[i].fits = false;
    if (out->reproduced) {
        for (size_t i = 1; i < n; i++)
            if (out->rows[i].fits)
                j->order[j->norder++] = i;
        for (size_t a = 1; a < j->norder; a++) /* by peak, then the order tried: few rows */
            for (size_t b = a; b > 0 && out->rows[j->order[b]].peak_reserved < out->rows[j->order[b - 1]].peak_reserved;
                 b--) {
                size_t t = j->order[b];
                j->order[b] = j->order[b - 1];
                j->order[b - 1] = t;
            }
        /* every row that fits when idle is checked (the report names the best few) */
        if (!run_workers(j, o->threads, worker_busy))
            for (size_t i = 1; i < n; i++)
                out->rows[i].fits = false;
    }
    out->nrows = n;
    out->cut_short = atomic_load(&j->late);
    out->seconds = now_s() - t0;
    pthread_cond_destroy(&j->current_ready);
    pthread_mutex_destroy(&j->lock);
    hostalloc_free(j);
    jr_copy_free(&c);
    return out->status = CORE_WHATIF_RAN;
}
