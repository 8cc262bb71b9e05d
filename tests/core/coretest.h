/*
 * Shared by the core's test files: a device on the in-process backend, a
 * checker macro that fails the test with core_check's message, and short
 * readers for the counters.
 */
#ifndef CUCACHE_TESTS_CORE_CORETEST_H
#define CUCACHE_TESTS_CORE_CORETEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "backend_mem.h"
#include "check.h"
#include "rules.h"
#include "conf.h"
#include "core.h"
#include "stats.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* Fails the running test with the checker's message when an invariant is broken. */
#define CHECK(d)                                                                                                       \
    do {                                                                                                               \
        char why_[512];                                                                                                \
        if (core_check((d), why_, sizeof why_) != 0)                                                                   \
            fail_msg("core_check (%s:%d): %s", __FILE__, __LINE__, why_);                                              \
    } while (0)

/* The last segment events the observer saw. */
#define FX_EVENTS 64

typedef struct fx_s {
    mem_backend_t m;
    conf_t conf;
    core_dev_t *d;
    core_event_t ev[FX_EVENTS]; /* ring of the last events */
    size_t nev;                 /* events seen so far */
} fx_t;

static inline void fx_observe(void *ctx, const core_event_t *e)
{
    fx_t *f = ctx;
    f->ev[f->nev % FX_EVENTS] = *e;
    f->nev++;
}

/* A device of `capacity` bytes configured by conf_parse(conf_text), its
 * history kept (core_set_history). */
/* orders: the backend can order the device after a fence (fence_order), as
 * the interposer's can: reuse:ordered hands frees behind fences out. */
static inline void fx_open_orders(fx_t *f, size_t capacity, const char *conf_text, bool orders)
{
    char err[256];
    memset(f, 0, sizeof *f);
    mem_backend_init(&f->m, capacity);
    f->m.orders = orders;
    conf_defaults(&f->conf);
    if (conf_parse(&f->conf, conf_text, err, sizeof err) != 0)
        fail_msg("conf_parse(%s): %s", conf_text ? conf_text : "(null)", err);
    core_backend_t be = mem_backend_vtable(&f->m);
    f->d = core_dev_new(&be, 0, &f->conf);
    assert_non_null(f->d);
    core_set_history(f->d, 1 << 16); /* on, as under the interposer */
    core_set_observer(f->d, fx_observe, f);
    assert_int_equal(core_pool_use(f->d, 0), 0); /* this thread routes to the default pools */
    CHECK(f->d);
}

/* What the interposer makes of a plain cudaFree under the setting's reuse
 * rule (interpose/state.c), no capture in progress (a rule that
 * synchronises first has then synchronised). */
static inline core_free_t conf_plain_free(const conf_t *c)
{
    return rule_plain_free(conf_rule(c), true);
}

static inline void fx_open(fx_t *f, size_t capacity, const char *conf_text)
{
    fx_open_orders(f, capacity, conf_text, false);
}

static inline void fx_close(fx_t *f)
{
    CHECK(f->d);
    core_dev_destroy(f->d);
    assert_int_equal(f->m.n_bad_free, 0);
    assert_int_equal(f->m.n_bad_unmap, 0);
    assert_int_equal(f->m.used, 0);
    assert_int_equal(f->m.nalias, 0);
    mem_backend_fini(&f->m);
}

/* The most recent event of `kind` (fails when none is in the ring). */
static inline core_event_t fx_last(const fx_t *f, core_event_kind_t kind)
{
    for (size_t i = 0; i < f->nev && i < FX_EVENTS; i++) {
        const core_event_t *e = &f->ev[(f->nev - 1 - i) % FX_EVENTS];
        if (e->kind == kind)
            return *e;
    }
    fail_msg("no event of kind %d among the last %d", (int)kind, FX_EVENTS);
    core_event_t none = {0};
    return none;
}

static inline core_stats_t fx_stats(const fx_t *f)
{
    core_stats_t s;
    core_stats_get(f->d, &s);
    return s;
}

/* Allocates and checks the invariants; fails the test on OOM. */
static inline uintptr_t fx_alloc(fx_t *f, size_t size, core_stream_t stream)
{
    core_oom_t oom;
    uintptr_t p = core_malloc(f->d, size, stream, &oom);
    if (!p)
        fail_msg("core_malloc(%zu, stream %lu) failed: limit_hit %d, reserved %zu, device free %zu", size,
                 (unsigned long)stream, (int)oom.limit_hit, oom.reserved, oom.device_free);
    CHECK(f->d);
    return p;
}

static inline void fx_free(fx_t *f, uintptr_t p, core_free_t how, core_stream_t stream)
{
    assert_int_equal(core_free(f->d, p, how, stream), CORE_FREED);
    CHECK(f->d);
}

#endif
