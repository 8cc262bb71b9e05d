/*
 * Proves what cucache does over a process's life: a fork child starts with
 * a clean cache (no statistics carried over, never a block of the parent's
 * cache or live set, no crash, no hang) while the parent goes on caching; a
 * process that exits with memory live, cached, stream-ordered and queued
 * (returning from main, calling exit, or exiting from one thread while
 * another allocates) exits with status 0; an invalid CUCACHE_CONF stops the
 * program before main with a non-zero status and one stderr line naming the
 * key, a valid one runs it, and CUCACHE_CONF=help prints the key table and
 * exits 0; cudaDeviceReset and cuDevicePrimaryCtxReset_v2 drop the device's
 * cache, after which allocation works from fresh device memory.
 *
 * The whole-process cases run itest_child (ITEST_CHILD) with a modified
 * environment.  Seen to fail: without LD_PRELOAD every case fails at its
 * first check, that cucache's API is in the process.
 */
#include "itest.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- fork ------------------------------------------------------------- */

enum { SETS = 4 };
static const size_t fork_sizes[SETS] = {512, 300000, 2 * MIB, 24 * MIB};

enum child_code {
    CHILD_OK = 0,
    CHILD_DIRTY_STATS = 3,  /* statistics of the parent's cache */
    CHILD_PARENT_BLOCK = 4, /* a block of the parent */
};

/* In the child: no cmocka (an assertion would resume the parent's test run
 * in the child), only exit codes. */
static int child_checks(void *const *live, void *const *cached)
{
    typedef int (*stat_fn)(int, const char *, int64_t *);
    stat_fn stat = (stat_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "cucache_stat");
    int64_t v = 0;
    static const char *const keys[] = {"allocation.all.current", "reserved_bytes.all.current",
                                       "allocated_bytes.all.current", "segment.all.current"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (stat && stat(0, keys[i], &v) == 0 && v != 0) {
            fprintf(stderr, "fork child: %s = %lld, inherited from the parent\n", keys[i], (long long)v);
            return CHILD_DIRTY_STATS;
        }
    for (int i = 0; i < SETS; i++) {
        void *p = NULL;
        cudaError_t rc = cudaMalloc(&p, fork_sizes[i]);
        fprintf(stderr, "fork child: cudaMalloc(%zu) -> %d, %p\n", fork_sizes[i], (int)rc, p);
        if (rc != cudaSuccess)
            continue; /* CUDA after fork may refuse; what it must not do is reuse */
        for (int k = 0; k < SETS; k++)
            if (itest_overlap(p, fork_sizes[i], live[k], fork_sizes[k]) ||
                itest_overlap(p, fork_sizes[i], cached[k], fork_sizes[k])) {
                fprintf(stderr, "fork child: got %p, a block of the parent\n", p);
                return CHILD_PARENT_BLOCK;
            }
    }
    return CHILD_OK;
}

static void test_fork_child_starts_clean(void **state)
{
    (void)state;
    itest_require_cucache();
    void *live[SETS], *cached[SETS];
    for (int i = 0; i < SETS; i++) {
        SIM_OK(cudaMalloc(&live[i], fork_sizes[i]));
        SIM_OK(cudaMalloc(&cached[i], fork_sizes[i]));
        itest_put(live[i], fork_sizes[i], 10 + (unsigned)i);
    }
    for (int i = 0; i < SETS; i++)
        SIM_OK(cudaFree(cached[i]));
    SIM_OK(cudaDeviceSynchronize());
    assert_true(itest_stat(0, "reserved_bytes.all.current") > 0);

    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int code = child_checks(live, cached);
        fflush(stderr);
        exit(code); /* exit, not _exit: atexit handlers and destructors run in the child */
    }
    int status = 0;
    bool done = false;
    for (int waited = 0; waited < 20000 && !done; waited += 5) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            done = true;
        else
            simtest_sleep_ms(5);
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        print_error("the fork child hung (killed after 20 s)\n");
        fail();
    }
    if (WIFSIGNALED(status)) {
        print_error("the fork child died of signal %d (%s)\n", WTERMSIG(status), strsignal(WTERMSIG(status)));
        fail();
    }
    if (WEXITSTATUS(status) != CHILD_OK) {
        print_error("the fork child exited with %d (%s)\n", WEXITSTATUS(status),
                    WEXITSTATUS(status) == CHILD_DIRTY_STATS ? "it inherited the parent's statistics"
                                                             : "it was handed a block of the parent");
        fail();
    }

    /* the parent goes on: its live data is intact and its cache serves */
    for (int i = 0; i < SETS; i++)
        itest_expect(live[i], fork_sizes[i], 10 + (unsigned)i);
    unsigned long allocs0 = itest_dev_allocs();
    int64_t hits0 = itest_stat(0, "num_cache_hits");
    for (int i = 0; i < SETS; i++) {
        SIM_OK(cudaMalloc(&cached[i], fork_sizes[i]));
        itest_put(cached[i], fork_sizes[i], 20 + (unsigned)i);
        itest_expect(cached[i], fork_sizes[i], 20 + (unsigned)i);
    }
    assert_int_equal(itest_dev_allocs(), allocs0);
    assert_int_equal(itest_stat(0, "num_cache_hits"), hits0 + SETS);
    for (int i = 0; i < SETS; i++) {
        SIM_OK(cudaFree(live[i]));
        SIM_OK(cudaFree(cached[i]));
    }
}

/* ---- whole processes -------------------------------------------------- */

static itest_run_t run; /* large: not on the stack */

static void child(const char *mode, const char *const *set)
{
    const char *argv[] = {"itest_child", mode, NULL};
    itest_spawn(itest_helper("ITEST_CHILD"), argv, set, NULL, 20000, &run);
}

static void expect_no_sanitizer_report(void)
{
    if (strstr(run.err, "AddressSanitizer") || strstr(run.err, "runtime error:") ||
        strstr(run.err, "ThreadSanitizer")) {
        print_error("the child's stderr has a sanitizer report:\n%s\n", run.err);
        fail();
    }
}

static void test_exit_with_memory_live(void **state)
{
    (void)state;
    itest_require_cucache();
    static const char *const modes[] = {"live", "live-exit", "live-thread"};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        for (int rep = 0; rep < 3; rep++) {
            child(modes[i], NULL);
            if (run.hung || !WIFEXITED(run.status) || WEXITSTATUS(run.status) != 0)
                print_error("itest_child %s (run %d):\n", modes[i], rep + 1);
            itest_expect_exit(&run, 0);
            expect_no_sanitizer_report();
        }
    }
}

/* The lines of text that are not empty. */
static int lines(const char *text)
{
    return itest_count_lines(text, "");
}

static void test_bad_conf_stops_the_program_before_main(void **state)
{
    (void)state;
    itest_require_cucache();
    static const struct {
        const char *conf, *key;
    } bad[] = {
        {"CUCACHE_CONF=bogus:1", "bogus"},
        {"CUCACHE_CONF=limit_mb:abc", "limit_mb"},
        {"CUCACHE_CONF=reuse:never", "reuse"},
        {"CUCACHE_CONF=max_split_size_mb:1", "max_split_size_mb"},
        {"CUCACHE_CONF=reuse:sync,garbage_collection_threshold:2", "garbage_collection_threshold"},
    };
    int wrong = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *set[] = {bad[i].conf, NULL};
        child("alloc", set);
        bool ok = !run.hung && WIFEXITED(run.status) && WEXITSTATUS(run.status) != 0 && lines(run.err) == 1 &&
                  strstr(run.err, bad[i].key) != NULL && strstr(run.out, "itest_child: main") == NULL;
        if (!ok) {
            const char *how = "signal";
            int code = run.hung ? 0 : WTERMSIG(run.status);
            if (run.hung)
                how = "hung";
            else if (WIFEXITED(run.status))
                how = "exit", code = WEXITSTATUS(run.status);
            print_error("%s: expected the program to stop before main with a non-zero status and one stderr line "
                        "naming %s; got %s %d\nstdout:\n%s\nstderr (%d lines):\n%s\n",
                        bad[i].conf, bad[i].key, how, code, run.out, lines(run.err), run.err);
            wrong++;
        }
    }
    assert_int_equal(wrong, 0);
}

static void test_good_conf_runs_the_program(void **state)
{
    (void)state;
    itest_require_cucache();
    static const char *const good[] = {"CUCACHE_CONF=reuse:sync,limit_mb:512", "CUCACHE_CONF=reuse:stream",
                                       "CUCACHE_CONF=max_split_size_mb:64,roundup_power2_divisions:4", "CUCACHE_CONF="};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        const char *set[] = {good[i], NULL};
        child("alloc", set);
        if (run.hung || !WIFEXITED(run.status) || WEXITSTATUS(run.status) != 0 ||
            !strstr(run.out, "itest_child: done") || lines(run.err) != 0) {
            print_error("%s: expected a normal run (exit 0, \"done\", nothing on stderr)\n", good[i]);
            itest_expect_exit(&run, 0);
            print_error("stdout:\n%s\nstderr:\n%s\n", run.out, run.err);
            fail();
        }
    }
}

static void test_conf_help_prints_the_table(void **state)
{
    (void)state;
    itest_require_cucache();
    const char *set[] = {"CUCACHE_CONF=help", NULL};
    child("alloc", set);
    itest_expect_exit(&run, 0);
    static const char *const keys[] = {
        "max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold", "limit_mb", "reuse",
        "strategy"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strstr(run.out, keys[i]) && !strstr(run.err, keys[i])) {
            print_error("CUCACHE_CONF=help does not list %s:\nstdout:\n%s\nstderr:\n%s\n", keys[i], run.out, run.err);
            fail();
        }
    if (strstr(run.out, "itest_child: done")) {
        print_error("CUCACHE_CONF=help printed the table but let the program run\n");
        fail();
    }
}

/* ---- reset ------------------------------------------------------------ */

static int64_t stat_or_zero(const char *key)
{
    int64_t v = 0;
    return itest_stat_raw(0, key, &v) == 0 ? v : 0;
}

/* kind 0: cudaDeviceReset; kind 1: cuDevicePrimaryCtxReset_v2 */
static void reset_drops_the_cache(int kind)
{
    itest_require_cucache();
    const size_t n = 12 * MIB;
    void *live = NULL, *cached = NULL;
    SIM_OK(cudaMalloc(&live, n));
    SIM_OK(cudaMalloc(&cached, n));
    SIM_OK(cudaFree(cached));
    SIM_OK(cudaDeviceSynchronize());
    assert_true(itest_stat(0, "reserved_bytes.all.current") >= (int64_t)n);
    size_t f = 0, t = 0;
    if (kind == 0) {
        SIM_OK(cudaDeviceReset());
    } else {
        CUdevice dev = 0;
        CU_OK(cuDeviceGet(&dev, 0));
        CU_OK(cuDevicePrimaryCtxReset_v2(dev));
    }
    SIM_OK(cudaFree(NULL)); /* the runtime makes a new primary context */
    /* the cache is gone: nothing reserved, nothing held, all memory free */
    assert_int_equal(stat_or_zero("reserved_bytes.all.current"), 0);
    assert_int_equal(stat_or_zero("allocation.all.current"), 0);
    SIM_OK(cudaMemGetInfo(&f, &t));
    assert_int_equal(f, t);
    /* allocation works, from fresh device memory */
    unsigned long allocs0 = itest_dev_allocs();
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, n));
    /* one segment, or (expandable segments) one physical allocation per page */
    assert_int_equal(itest_dev_allocs(), allocs0 + (itest_expandable() ? n / (2 * MIB) : 1));
    itest_put(p, n, 50 + (unsigned)kind);
    itest_expect(p, n, 50 + (unsigned)kind);
    SIM_OK(cudaFree(p));
    SIM_OK(cudaDeviceSynchronize());
    allocs0 = itest_dev_allocs();
    SIM_OK(cudaMalloc(&p, n));
    assert_int_equal(itest_dev_allocs(), allocs0); /* and caches again */
    SIM_OK(cudaFree(p));
}

static void test_device_reset_drops_the_cache(void **state)
{
    (void)state;
    reset_drops_the_cache(0);
}

static void test_primary_ctx_reset_drops_the_cache(void **state)
{
    (void)state;
    reset_drops_the_cache(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        ITEST(test_fork_child_starts_clean),
        ITEST(test_exit_with_memory_live),
        ITEST(test_bad_conf_stops_the_program_before_main),
        ITEST(test_good_conf_runs_the_program),
        ITEST(test_conf_help_prints_the_table),
        ITEST(test_device_reset_drops_the_cache),
        ITEST(test_primary_ctx_reset_drops_the_cache),
    };
    return ITEST_RUN("interpose.process", tests, itest_group_setup);
}
