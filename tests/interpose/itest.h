/*
 * Shared helpers of the interposer's acceptance tests (tests/interpose).
 *
 * The programs under test are ordinary CUDA programs: they link the simulated
 * runtime (and the driver when they call it), never libcucache.so, and run
 * with LD_PRELOAD=libcucache.so.  What they can see of cucache is its public
 * API, found with dlsym(RTLD_DEFAULT, ...), and what the simulated driver
 * counts (cucacheSimDeviceAllocs/Frees, the race detector).
 *
 * Every check that depends on cucache goes through itest_require_cucache()
 * (directly or through itest_stat()), which FAILS the test when the API is
 * absent: a test run without the preload must fail loudly, not skip.
 *
 * Children: itest_spawn() runs a program with the test's environment plus or
 * minus some variables, captures its stdout and stderr, and kills it after a
 * bound, so a hang is reported as one instead of stalling the suite.
 */
#ifndef ITEST_H
#define ITEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simtest.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

/* CUCACHE_SIM_CAPACITY that meson gives every interpose test. */
#define ITEST_CAPACITY GIB

/* ---- cucache's public API -------------------------------------------- */

/* Whether cucache's API (cucache_stat, cucache_empty_cache, ...) is in the
 * process, i.e. whether libcucache.so is preloaded. */
bool itest_have_cucache(void);
/* Whether cucache runs with expandable segments (CUCACHE_CONF has
 * expandable_segments:true): its segments are then CUDA virtual memory. */
bool itest_expandable(void);
/* Whether cucache hands out frees behind fences with the device ordered
 * after them (reuse:ordered, the default; CUCACHE_CONF names no other reuse
 * rule), on a device whose memory the CPU does not share
 * (CUCACHE_SIM_COHERENT). */
bool itest_hands_out(void);
/* Fails the current test, saying that cucache is not preloaded, unless it is. */
void itest_require_cucache_at(const char *file, int line);
#define itest_require_cucache() itest_require_cucache_at(__FILE__, __LINE__)

/* cucache_stat(device, key); fails the test when cucache is absent or the
 * call answers -1 (unknown key, or no allocator state on the device). */
int64_t itest_stat_at(int device, const char *key, const char *file, int line);
#define itest_stat(device, key) itest_stat_at((device), (key), __FILE__, __LINE__)
/* The raw call: 0 and *value, or -1.  Fails the test only when cucache is absent. */
int itest_stat_raw(int device, const char *key, int64_t *value);
/* cucache_empty_cache(device); fails the test when cucache is absent. */
int itest_empty_cache(int device);

/* ---- the simulated driver's counters --------------------------------- */

/* cucacheSimDeviceAllocs / cucacheSimDeviceFrees / cucacheSimRaceCount;
 * fail the test when the simulated driver is not the one loaded. */
unsigned long itest_dev_allocs(void);
unsigned long itest_dev_frees(void);
unsigned long itest_races(void);

/* ---- where a function lives ------------------------------------------ */

/* Whether fn lies in an object whose file name contains lib_substr
 * ("libcucache.so", "libcuda.so.1"); prints the object's name when not. */
bool itest_fn_in(const void *fn, const char *lib_substr);

/* ---- device data ----------------------------------------------------- */

/* Fill n bytes of device memory at d with the pattern of seed (through a host
 * buffer and a synchronous cudaMemcpy). */
void itest_put(void *d, size_t n, unsigned seed);
/* Read n bytes back and fail the test, naming the first bad offset, unless
 * they hold the pattern of seed. */
void itest_expect_at(const void *d, size_t n, unsigned seed, const char *file, int line);
#define itest_expect(d, n, seed) itest_expect_at((d), (n), (seed), __FILE__, __LINE__)
/* Whether [a, a+na) and [b, b+nb) overlap. */
bool itest_overlap(const void *a, size_t na, const void *b, size_t nb);

/* ---- stderr of this process ------------------------------------------ */

/* Redirect fd 2 to a temporary file until itest_stderr_end, which restores
 * it and returns what was written (NUL-terminated, truncated to len-1). */
void itest_stderr_begin(void);
void itest_stderr_end(char *buf, size_t len);
/* Number of lines of text that start with prefix (all lines when ""). */
int itest_count_lines(const char *text, const char *prefix);

/* ---- child processes ------------------------------------------------- */

typedef struct itest_run {
    int status;      /* as from waitpid; -1 when it had to be killed */
    bool hung;       /* killed after the bound */
    char out[65536]; /* stdout */
    char err[65536]; /* stderr */
} itest_run_t;

/* Run path with argv (argv[0] included, NULL-ended) and this process's
 * environment, minus every variable named in unset (NULL-ended, may be NULL),
 * plus every "NAME=value" in set (NULL-ended, may be NULL).  Waits at most
 * timeout_ms, then kills the child with SIGKILL. */
void itest_spawn(const char *path, const char *const *argv, const char *const *set, const char *const *unset,
                 unsigned timeout_ms, itest_run_t *r);
/* The value of the environment variable meson sets to a helper's path;
 * fails the test when unset. */
const char *itest_helper(const char *var);
/* Fails the test, printing the child's output, unless it exited with code. */
void itest_expect_exit_at(const itest_run_t *r, int code, const char *file, int line);
#define itest_expect_exit(r, code) itest_expect_exit_at((r), (code), __FILE__, __LINE__)

/* ---- fixtures -------------------------------------------------------- */

/* Things a test hands to its teardown, so that a failed assertion does not
 * leave them to the next test: device memory (cudaFree'd) and streams (a
 * capture still in progress on them is ended and its graph destroyed; the
 * stream itself is left alone, a passing test destroys it).  Both return
 * their argument. */
void *itest_defer_free(void *p);
cudaStream_t itest_defer_stream(cudaStream_t s);

/* Per-test setup: notes the race detector's count.  Per-test teardown:
 * simtest_teardown, then a failure when the race detector reported a race
 * during the test (a block reused while some stream still used it). */
int itest_setup(void **state);
int itest_teardown(void **state);
/* simtest_group_setup plus a first cudaFree(NULL) and one allocation, so
 * the device is initialised and has allocator state (cucache_stat answers)
 * before the first test measures anything. */
int itest_group_setup(void **state);
/* itest_group_setup, and exactly `n` devices (CUCACHE_SIM_DEVICES=n). */
int itest_group_setup_devices(void **state, int n);

#define ITEST(f) cmocka_unit_test_setup_teardown(f, itest_setup, itest_teardown)

/* Runs the group; ITEST_FILTER=<pattern> (cmocka's test filter, * and ?
 * allowed) runs only the matching tests. */
int itest_run_group(const char *name, const struct CMUnitTest *tests, size_t count, int (*group_setup)(void **state));
#define ITEST_RUN(name, tests, setup) itest_run_group((name), (tests), sizeof(tests) / sizeof((tests)[0]), (setup))

#endif
