/*
 * Seeing every submission: each call that may put work reading
 * or writing device memory on a stream adds one to hook_submissions, by
 * every route a program reaches the driver:
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
 * The count is what the reuse rule needs (core: work_epoch): a block freed
 * when the count has not moved since it was handed out cannot be used by
 * any queued work, since any work naming it was submitted after it was
 * handed out and before it was freed (a program that submits on one thread
 * and frees on another orders the two itself, or its free would race with
 * the launch under CUDA too).  The increment is one atomic add before the
 * driver's function runs: no lock, no allocation, a few nanoseconds.
 *
 * Blind: a lookup of a driver name the table does not know (a newer CUDA's),
 * of an opaque one (cuGetExportTable: the runtime's private function
 * tables, whose effects nobody documents), dlsym(RTLD_NEXT) of a
 * submitting name, or a pool exhausted, sets HOOK_SUBMIT_BLIND in the
 * count for good: from then on no count equals an earlier one and every
 * plain free waits behind a fence, as if no count were kept: slower, never
 * unsafe.
 */
#include <stdatomic.h>
#include <string.h>

#include "hook.h"
#include "submit_sim.h"
#include "submit_table.h"

#define HOOK_SUBMIT_POOL 64
#if defined(__x86_64__)
#define HOOK_SUBMIT_POOL_STRIDE 32
#else
#define HOOK_SUBMIT_POOL_STRIDE 64
#endif

_Atomic uint64_t hook_submissions;

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
    atomic_fetch_or_explicit(&hook_submissions, HOOK_SUBMIT_BLIND, memory_order_relaxed);
}

/* Called by submit_entry.S's slow path with the trampoline's slot. */
void *hook_submit_resolve(void **slot);
void *hook_submit_resolve(void **slot)
{
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
    return atomic_load_explicit(&hook_submissions, memory_order_relaxed);
}
