/*
 * Shared helpers of the simulated-device test suites (tests/).
 *
 * The suites prove ordering rules without ever asserting on a duration.  The
 * tools for that are:
 *
 *   - gates: a host function (cudaLaunchHostFunc) that blocks its stream until
 *     the test opens the gate, so the work queued behind it is provably
 *     pending for as long as the test wants;
 *   - marks: a host function that records that (and in which global order) it
 *     ran, so the test can observe whether work on some other stream has run
 *     while a gate was closed;
 *   - data patterns, so copies and memsets are checked byte for byte.
 *
 * Work that must NOT run while a gate is closed is checked after
 * simtest_settle(), a short sleep that gives a wrong simulator a chance to
 * run it; a right simulator passes whatever the delay.  Work that MUST run is
 * waited for with a generous bound (seconds), so slow machines and sanitizers
 * do not matter.  Every gate opens by itself after SIMTEST_GATE_TIMEOUT_MS so
 * that a simulator bug fails a test instead of hanging the suite, and
 * simtest_teardown() opens every gate and waits for the device, so a failed
 * assertion never leaves a stream blocked for the next test.
 */
#ifndef SIMTEST_H
#define SIMTEST_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "cusim/cuda_api.h"
#include "cusim/sim.h"

enum {
    SIMTEST_GATE_TIMEOUT_MS = 10000, /* a gate opens by itself after this */
    SIMTEST_WAIT_MS = 5000,          /* bound on waiting for work that must run */
    SIMTEST_SETTLE_MS = 30,          /* chance given to work that must not run */
};

/* ---- checking CUDA calls --------------------------------------------- */

/* Fails the current test, naming the call, the code it returned and the code
 * that was expected. */
void simtest_expect_rc(int got, int want, const char *call, const char *file, int line);
void simtest_expect_not_rc(int got, int unwanted, const char *call, const char *file, int line);

/* 1 under ThreadSanitizer: a test that plants a race on purpose and cannot
 * keep the two simulated workers apart in time (the branches of one graph
 * launch) leaves that case out there, as ThreadSanitizer would report the
 * planted race itself. */
#if defined(__SANITIZE_THREAD__)
#define SIMTEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SIMTEST_TSAN 1
#endif
#endif
#ifndef SIMTEST_TSAN
#define SIMTEST_TSAN 0
#endif

#define SIM_OK(call) simtest_expect_rc((int)(call), cudaSuccess, #call, __FILE__, __LINE__)
#define SIM_EXPECT(call, want) simtest_expect_rc((int)(call), (int)(want), #call, __FILE__, __LINE__)
#define SIM_FAILS(call) simtest_expect_not_rc((int)(call), cudaSuccess, #call, __FILE__, __LINE__)
#define CU_OK(call) simtest_expect_rc((int)(call), CUDA_SUCCESS, #call, __FILE__, __LINE__)
#define CU_EXPECT(call, want) simtest_expect_rc((int)(call), (int)(want), #call, __FILE__, __LINE__)

/* ---- gates ----------------------------------------------------------- */

typedef struct simtest_gate simtest_gate_t;

/* A closed gate.  Gates live in a static pool for the whole process (a host
 * function may still hold one when a test fails), so they are never freed. */
simtest_gate_t *simtest_gate_new(void);
/* Queue the gate's host function on a stream (cudaLaunchHostFunc). */
void simtest_gate_block(simtest_gate_t *g, cudaStream_t s);
/* The same through the per-thread entry point cudaLaunchHostFunc_ptsz. */
void simtest_gate_block_ptsz(simtest_gate_t *g, cudaStream_t s);
/* The host function itself, for callers that queue it another way. */
void simtest_gate_fn(void *gate);
void simtest_gate_open(simtest_gate_t *g);
/* Open the gate from a helper thread once ms have passed, for calls that
 * block the test thread (synchronisations). Joined by simtest_teardown. */
void simtest_gate_open_after(simtest_gate_t *g, unsigned ms);
/* Whether the host function has started waiting / has returned. */
bool simtest_gate_entered(simtest_gate_t *g);
bool simtest_gate_passed(simtest_gate_t *g);
/* Wait (bounded) until the host function has started waiting. */
bool simtest_gate_wait_entered(simtest_gate_t *g);
/* Whether the gate gave up waiting (SIMTEST_GATE_TIMEOUT_MS): a hung test. */
bool simtest_gate_timed_out(simtest_gate_t *g);
/* Global sequence number taken when the host function returned (0: not yet). */
long simtest_gate_seq(simtest_gate_t *g);

/* ---- marks ----------------------------------------------------------- */

typedef struct simtest_mark simtest_mark_t;

simtest_mark_t *simtest_mark_new(void);
void simtest_mark_fn(void *mark);
/* Queue the mark's host function on a stream (cudaLaunchHostFunc / _ptsz). */
void simtest_mark_on(simtest_mark_t *m, cudaStream_t s);
void simtest_mark_on_ptsz(simtest_mark_t *m, cudaStream_t s);
bool simtest_mark_ran(simtest_mark_t *m);
/* Wait (bounded) until the mark has run; returns whether it did. */
bool simtest_mark_wait(simtest_mark_t *m);
/* Global sequence number taken when it ran (0: not yet). */
long simtest_mark_seq(simtest_mark_t *m);

/* ---- helper threads -------------------------------------------------- */

typedef struct simtest_thread simtest_thread_t;

/* Run fn(arg) on a new thread and return once it has returned; the thread
 * stays alive (its per-thread default stream with it) until
 * simtest_thread_finish lets it exit and joins it. */
simtest_thread_t *simtest_thread_start(void (*fn)(void *), void *arg);
void simtest_thread_finish(simtest_thread_t *t);

/* ---- waiting and time ------------------------------------------------ */

void simtest_sleep_ms(unsigned ms);
/* Sleep SIMTEST_SETTLE_MS: give work that must not run a chance to run. */
void simtest_settle(void);
/* Poll cudaStreamQuery until it stops answering cudaErrorNotReady or
 * SIMTEST_WAIT_MS pass; returns the last answer. */
cudaError_t simtest_stream_wait_idle(cudaStream_t s);
/* The same with cudaEventQuery. */
cudaError_t simtest_event_wait_done(cudaEvent_t e);

/* ---- data patterns --------------------------------------------------- */

/* Fill n bytes with a pattern that depends on seed and on the offset. */
void simtest_fill(void *buf, size_t n, unsigned seed);
/* Offset of the first byte differing from the pattern (seed, starting at
 * pattern offset off), or -1 when all match. */
long simtest_check(const void *buf, size_t n, unsigned seed, size_t off);
/* Offset of the first byte that is not value, or -1. */
long simtest_check_byte(const void *buf, size_t n, unsigned char value);

/* ---- simulator extensions -------------------------------------------- */

/* An extension of the simulated driver (sim.h), looked up in the loaded
 * libcuda.so.1; NULL on a real driver. */
void *simtest_sim_sym(const char *name);

/* ---- fixtures -------------------------------------------------------- */

/* Per-test teardown: open every gate, join opener threads, wait for the
 * device, clear the last error.  Use with cmocka_unit_test_teardown. */
int simtest_teardown(void **state);
/* Group setup: make sure the device initialises (first CUDA call). */
int simtest_group_setup(void **state);

#define SIMTEST(f) cmocka_unit_test_teardown(f, simtest_teardown)

#endif
