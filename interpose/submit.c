/*
 * Seeing every submission: each call that may put work reading or writing
 * device memory on a stream goes through a counting trampoline, by every
 * route a program reaches the driver:
 *
 *   - by name: libcucache.so exports a counting trampoline under each such
 *     entry point of the driver (submit_entry.S, HOOK_SUBMIT_EXPORTS), so a
 *     program linked with -lcuda calls ours first;
 *   - dlsym of such a name (any handle but RTLD_NEXT) gives the same
 *     trampoline (hook_lookup.c);
 *   - cuGetProcAddress (the runtime, shared and static, and frameworks):
 *     the driver's answer for a submitting base name is swapped for the
 *     trampoline of the exported entry point at that address, or a pool
 *     trampoline that jumps to it.
 *
 * The runtime's own calls (cudaLaunchKernel, cudaMemcpyAsync, ...) reach the
 * driver through cuGetProcAddress, so they are counted there.  The
 * simulated device's kernel extensions for tests are counted the same way
 * (submit_sim.h).
 *
 * What a trampoline does before it jumps to the driver's function, with no
 * lock, no allocation and nothing written that another thread writes:
 *
 *   1. adds one to its thread's own count (hook_submit_self.count), a
 *      plain add to the thread's own memory: cucache_stat's
 *      num_submissions is the sum over the threads (hook_submit_count);
 *   2. reads the epoch (hook_submit_epoch, the core's work_epoch) and, only
 *      when it is odd, moves it on to the next even value.
 *
 * The epoch is what the reuse rule needs.  The core makes it odd when it
 * hands a block out and records that odd value in the block (core.h,
 * work_epoch); a block freed when the epoch still reads that value cannot
 * be used by any queued work, since any work naming it was submitted after
 * it was handed out and before it was freed (a program that submits on one
 * thread and frees on another orders the two itself, or its free would
 * race with the launch under CUDA too).  Why that is exact: the epoch only
 * grows.  A submission that comes after the hand-out (in the program's
 * order, by any thread) reads the recorded odd value or a later one; it
 * moves an odd value on (its compare-and-swap fails only when someone else
 * moved it), and a later one already differs from the record.  The free,
 * ordered after that submission, reads the epoch at that value or a later
 * one: never the record.  Relaxed atomics suffice: the order comes from
 * the program's own synchronisation, and each reader sees at least the
 * values written before it on a single location.  So launches on many
 * threads share one cache line that they only read, and write it once per
 * hand-out at most, instead of all writing it on every launch.
 *
 * A thread's count is listed (for the readers) on its first submission,
 * which takes the trampolines' slow path; when the thread exits, its count
 * moves to the count of threads gone, and a submission made after that
 * (from a later thread-exit destructor) adds to that count directly.  A
 * fork child keeps the counts: the parent's other threads' go to the count
 * of threads gone.
 *
 * Blind: a lookup of a driver name the table does not know (a newer CUDA's),
 * of an opaque one (cuGetExportTable: the runtime's private function
 * tables, whose effects nobody documents), dlsym(RTLD_NEXT) of a
 * submitting name, or a pool exhausted, sets HOOK_SUBMIT_BLIND in the
 * epoch for good: from then on no epoch equals an earlier one and every
 * plain free waits behind a fence, as if no epoch were kept: slower, never
 * unsafe.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "hook.h"
#include "real.h"
#include "submit.h"
#include "submit_sim.h"
#include "submit_table.h"

#define HOOK_SUBMIT_POOL 64
#if defined(__x86_64__)
#define HOOK_SUBMIT_POOL_STRIDE 64
#else
#define HOOK_SUBMIT_POOL_STRIDE 128
#endif

_Atomic uint64_t hook_submit_epoch;

/* ------------------------------------------------------------------------
 * Each thread's count
 * ---------------------------------------------------------------------- */

enum {
    SUBMIT_UNLISTED = 0, /* no submission yet: the next one takes the slow path and lists the thread */
    SUBMIT_LISTED = 1,   /* the trampolines add to count inline */
    SUBMIT_GONE = 2,     /* exited (or cannot be listed): each submission adds to threads_gone */
};

/* One thread's submissions.  submit_entry.S reads state at offset 8 and
 * adds to count at offset 0 (no lock: only the thread itself writes
 * them). */
typedef struct submit_thread_s {
    _Atomic uint64_t count;              /* submissions made on this thread while LISTED */
    uint8_t state;                       /* SUBMIT_*; read and written by this thread only */
    struct submit_thread_s *next, *prev; /* the list of listed threads (under list_lock) */
} submit_thread_t;

_Static_assert(offsetof(submit_thread_t, count) == 0, "submit_entry.S adds to the count at offset 0");
_Static_assert(offsetof(submit_thread_t, state) == 8, "submit_entry.S reads the state at offset 8");
_Static_assert(SUBMIT_LISTED == 1, "submit_entry.S compares the state with 1");

/* The calling thread's record (submit_entry.S reaches it through the
 * thread pointer). */
HOOK_TLS submit_thread_t hook_submit_self;

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static submit_thread_t *list_head;    /* every LISTED thread's record (under list_lock) */
static _Atomic uint64_t threads_gone; /* submissions of threads no longer listed */
static pthread_key_t exit_key;        /* its destructor unlists an exiting thread */
static bool have_exit_key;            /* exit_key was made (set once, under key_once) */
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void list_unlink(submit_thread_t *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        list_head = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->next = t->prev = NULL;
}

/* An exiting thread's count goes to threads_gone, while the list is locked
 * so that a reader sees it once, in one or the other. */
static void thread_exit(void *arg)
{
    submit_thread_t *t = arg;
    pthread_mutex_lock(&list_lock);
    list_unlink(t);
    atomic_fetch_add_explicit(&threads_gone, atomic_load_explicit(&t->count, memory_order_relaxed),
                              memory_order_relaxed);
    atomic_store_explicit(&t->count, 0, memory_order_relaxed);
    t->state = SUBMIT_GONE;
    pthread_mutex_unlock(&list_lock);
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&list_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&list_lock);
}

/* The child has one thread: the others' counts (their memory is still
 * there, a copy of the parent's) go to threads_gone, and the list keeps
 * this thread alone. */
static void fork_child(void)
{
    submit_thread_t *me = &hook_submit_self;
    uint64_t gone = 0;
    for (submit_thread_t *t = list_head; t; t = t->next)
        if (t != me)
            gone += atomic_load_explicit(&t->count, memory_order_relaxed);
    atomic_fetch_add_explicit(&threads_gone, gone, memory_order_relaxed);
    list_head = NULL;
    if (me->state == SUBMIT_LISTED) {
        me->next = me->prev = NULL;
        list_head = me;
    }
    pthread_mutex_init(&list_lock, NULL);
}

static void make_exit_key(void)
{
    have_exit_key = pthread_key_create(&exit_key, thread_exit) == 0;
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Lists the calling thread: its trampolines then count inline.  A thread
 * that cannot be listed (no key for its exit) counts in threads_gone. */
static void thread_list(submit_thread_t *me)
{
    pthread_once(&key_once, make_exit_key);
    if (!have_exit_key || pthread_setspecific(exit_key, me) != 0) {
        me->state = SUBMIT_GONE;
        return;
    }
    pthread_mutex_lock(&list_lock);
    me->prev = NULL;
    me->next = list_head;
    if (list_head)
        list_head->prev = me;
    list_head = me;
    me->state = SUBMIT_LISTED;
    pthread_mutex_unlock(&list_lock);
}

/* What the trampolines do inline, for their slow path: one more submission
 * on this thread, and the epoch moved on when it is odd. */
static void submit_note(void)
{
    submit_thread_t *me = &hook_submit_self;
    if (me->state == SUBMIT_UNLISTED)
        thread_list(me);
    if (me->state == SUBMIT_LISTED)
        atomic_store_explicit(&me->count, atomic_load_explicit(&me->count, memory_order_relaxed) + 1,
                              memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&threads_gone, 1, memory_order_relaxed);
    uint64_t e = atomic_load_explicit(&hook_submit_epoch, memory_order_relaxed);
    if (e & 1) /* a failure means another submission moved it on */
        atomic_compare_exchange_strong_explicit(&hook_submit_epoch, &e, e + 1, memory_order_relaxed,
                                                memory_order_relaxed);
}

/* The driver's address behind each exported trampoline (read by
 * submit_entry.S; 0 until resolved). */
#define SLOT(name) void *hook_submit_real_##name;
HOOK_SUBMIT_EXPORTS(SLOT)
HOOK_SUBMIT_SIM(SLOT)
#undef SLOT

/* The trampolines themselves, by their exported names. */
#define TRAMP(name) extern char hook_submit_tramp_##name[] __asm__(#name);
HOOK_SUBMIT_EXPORTS(TRAMP)
HOOK_SUBMIT_SIM(TRAMP)
#undef TRAMP

typedef struct submit_export_s {
    const char *name;
    void **real;
    void *tramp;
} submit_export_t;

#define ROW(name) {#name, &hook_submit_real_##name, hook_submit_tramp_##name},
static const submit_export_t exports[] = {HOOK_SUBMIT_EXPORTS(ROW) HOOK_SUBMIT_SIM(ROW)};
#undef ROW
static const size_t nexports = sizeof exports / sizeof exports[0];

void *hook_submit_pool_real[HOOK_SUBMIT_POOL];
extern char hook_submit_pool[];
static _Atomic unsigned pool_used;

typedef struct api_name_s {
    const char *name;
    unsigned char kind; /* HOOK_API_* */
} api_name_t;

#define API(name, kind) {#name, kind},
static const api_name_t api[] = {HOOK_DRIVER_API(API)};
#undef API
static const size_t napi = sizeof api / sizeof api[0];

/* Runs inside sanitizers' start-up (the dlsym path): no libc calls. */
HOOK_NO_SANITIZE static int name_cmp(const char *a, const char *b, size_t blen)
{
    size_t i = 0;
    for (; i < blen && a[i] && a[i] == b[i]; i++) {
    }
    if (i == blen)
        return a[i] ? 1 : 0;
    return (unsigned char)a[i] - (unsigned char)b[i];
}

HOOK_NO_SANITIZE static size_t name_len(const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}

/* The length of `symbol` without its _ptsz/_ptds and _vN suffixes. */
HOOK_NO_SANITIZE static size_t base_len(const char *symbol)
{
    size_t n = name_len(symbol);
    if (n > 5 && symbol[n - 5] == '_' && symbol[n - 4] == 'p' && symbol[n - 3] == 't' &&
        (symbol[n - 2] == 's' || symbol[n - 2] == 'd') && (symbol[n - 1] == 'z' || symbol[n - 1] == 's'))
        n -= 5;
    size_t d = n;
    while (d > 0 && symbol[d - 1] >= '0' && symbol[d - 1] <= '9')
        d--;
    if (d < n && d >= 2 && symbol[d - 1] == 'v' && symbol[d - 2] == '_')
        n = d - 2;
    return n;
}

HOOK_NO_SANITIZE int hook_api_kind(const char *symbol)
{
    size_t n = base_len(symbol), lo = 0, hi = napi;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = name_cmp(api[mid].name, symbol, n);
        if (c == 0)
            return api[mid].kind;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return HOOK_API_UNKNOWN;
}

HOOK_NO_SANITIZE void hook_submit_go_blind(void)
{
    atomic_fetch_or_explicit(&hook_submit_epoch, HOOK_SUBMIT_BLIND, memory_order_relaxed);
}

/* Called by submit_entry.S's slow path (a thread's first submission, or a
 * trampoline's first call) with the trampoline's slot: counts the call, and
 * returns the driver's address, resolved when it was not yet. */
void *hook_submit_slow_path(void **slot);
void *hook_submit_slow_path(void **slot)
{
    submit_note();
    void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (p || !hook_real_driver())
        return p;
    for (size_t i = 0; i < nexports; i++)
        if (exports[i].real == slot) {
            p = hook_real_driver_sym(exports[i].name);
            __atomic_store_n(slot, p, __ATOMIC_RELEASE);
        }
    return p;
}

void hook_submit_resolve_all(void *(*lookup)(const char *name))
{
    for (size_t i = 0; i < nexports; i++)
        if (!__atomic_load_n(exports[i].real, __ATOMIC_ACQUIRE))
            __atomic_store_n(exports[i].real, lookup(exports[i].name), __ATOMIC_RELEASE);
}

HOOK_NO_SANITIZE void *hook_submit_export(const char *symbol)
{
    size_t n = name_len(symbol);
    for (size_t i = 0; i < nexports; i++)
        if (name_cmp(exports[i].name, symbol, n) == 0)
            return exports[i].tramp;
    return NULL;
}

/* A pool trampoline that jumps to `real`: the one already made for it, or
 * a new one; NULL when the pool is used up. */
static void *pool_tramp(void *real)
{
    unsigned n = atomic_load(&pool_used);
    for (unsigned k = 0; k < n && k < HOOK_SUBMIT_POOL; k++)
        if (__atomic_load_n(&hook_submit_pool_real[k], __ATOMIC_ACQUIRE) == real)
            return hook_submit_pool + (size_t)k * HOOK_SUBMIT_POOL_STRIDE;
    unsigned k = atomic_fetch_add(&pool_used, 1);
    if (k >= HOOK_SUBMIT_POOL)
        return NULL;
    __atomic_store_n(&hook_submit_pool_real[k], real, __ATOMIC_RELEASE);
    return hook_submit_pool + (size_t)k * HOOK_SUBMIT_POOL_STRIDE;
}

void *hook_submit_wrap(const char *symbol, void *real)
{
    if (!real)
        return real;
    int kind = symbol ? hook_api_kind(symbol) : HOOK_API_UNKNOWN;
    if (kind == HOOK_API_QUIET)
        return real;
    if (kind != HOOK_API_SUBMITS) {
        hook_submit_go_blind();
        return real;
    }
    /* the driver's own export, or ours already: a driver whose table takes
     * its entry points' addresses through the dynamic linker gets ours,
     * since libcucache.so comes first */
    for (size_t i = 0; i < nexports; i++)
        if (__atomic_load_n(exports[i].real, __ATOMIC_ACQUIRE) == real || exports[i].tramp == real)
            return exports[i].tramp;
    void *t = pool_tramp(real);
    if (!t) {
        hook_submit_go_blind();
        return real;
    }
    return t;
}

uint64_t hook_submit_count(void)
{
    pthread_mutex_lock(&list_lock);
    uint64_t n = atomic_load_explicit(&threads_gone, memory_order_relaxed);
    for (submit_thread_t *t = list_head; t; t = t->next)
        n += atomic_load_explicit(&t->count, memory_order_relaxed);
    pthread_mutex_unlock(&list_lock);
    return n;
}

bool hook_submit_unseen(void)
{
    return atomic_load_explicit(&hook_submit_epoch, memory_order_relaxed) & HOOK_SUBMIT_BLIND;
}
