/*
 * Proves that an asker keeps waiting while a neighbour visibly gives its
 * idle cache back, and no longer (interpose/yield.c, docs/interposer.md
 * "Sharing a GPU"): on one simulated device shared by several processes
 * (CUCACHE_SIM_SHARED, a key of this run's own), neighbours (the
 * simulator's ipc_peer under cucache) hold idle cache in many segments,
 * each cuMemFree slowed by CUCACHE_SIM_FREE_US, and itest_child asks them
 * with CUCACHE_YIELD_MS small.
 *
 *   - steady: a give of 6 segments of 200 ms each outlasts HOOK_YIELD_BOUND
 *     x CUCACHE_YIELD_MS (500 ms) but frees a segment every 200 ms: the
 *     asker waits on, is served, and its exit summary says what was given
 *     while it waited.  Seen to fail: with the bound counted from the ask
 *     (not from the last progress), the child fails (exit 3) at 500 ms;
 *   - stalled: one segment whose free takes 3 s shows no progress: the
 *     asker gives up at the bound (500 ms), fails, and its report says the
 *     neighbour was still giving, 0 bytes so far.  Seen to fail: with a
 *     neighbour's `giving` word alone taken for progress, the child waits
 *     for the answer at 3 s and is served;
 *   - endless: a give of 48 segments of 100 ms each (4.8 s) that cannot
 *     cover the request (a neighbour that does not yield holds the rest)
 *     holds the asker until HOOK_YIELD_CAP x CUCACHE_YIELD_MS (3 s), no
 *     longer; its report says what the neighbour had given so far, not 0.
 *     Seen to fail: without the cap, the wait runs to the answer (4.8 s);
 *     with the report taking only answers, it says "0 bytes so far".
 *
 * Plain segments only: expandable ones go back unmapped, not through the
 * cuMemFree that CUCACHE_SIM_FREE_US slows.
 */
#include "itest.h"
#include "peer.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_SEGS = 64 };

static char key[64];

static int group_teardown(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/cucache-sim-%u-%s", (unsigned)geteuid(), key);
    unlink(path); /* absent when every test skipped */
    return 0;
}

/* The first line of text containing needle, copied into out (fails when none). */
static void line_with(const char *text, const char *needle, char *out, size_t len)
{
    const char *at = strstr(text, needle);
    if (!at) {
        fprintf(stderr, "test_yieldwait: no line has \"%s\" in:\n%s\n", needle, text);
        fail_msg("no line has \"%s\" (the text is above)", needle);
    }
    const char *start = at;
    while (start > text && start[-1] != '\n')
        start--;
    const char *end = strchr(at, '\n');
    size_t n = end ? (size_t)(end - start) : strlen(start);
    if (n >= len)
        n = len - 1;
    memcpy(out, start, n);
    out[n] = '\0';
}

/* A neighbour holding `segs` idle segments of `mib` each, every cuMemFree
 * of which takes `free_us`. */
static void start_slow_holder(peer_t *p, unsigned segs, size_t mib, const char *free_us)
{
    assert_true(segs <= MAX_SEGS);
    setenv("CUCACHE_SIM_FREE_US", free_us, 1);
    peer_start(p);
    unsetenv("CUCACHE_SIM_FREE_US");
    unsigned long long block[MAX_SEGS];
    for (unsigned i = 0; i < segs; i++) /* all live at once: each its own segment */
        assert_int_equal(sscanf(peer_cmd(p, "alloc %zx", mib * MIB), "ok %llx", &block[i]), 1);
    for (unsigned i = 0; i < segs; i++)
        assert_string_equal(peer_cmd(p, "free %llx", block[i]), "ok");
}

/* A number after `prefix` in line (fails when absent). */
static double number_after(const char *line, const char *prefix)
{
    const char *at = strstr(line, prefix);
    double v = 0;
    if (!at || sscanf(at + strlen(prefix), "%lf", &v) != 1)
        fail_msg("no \"%s\" followed by a number in: %s", prefix, line);
    return v;
}

/* A duration after `prefix` in line, as the summary writes it ("312.400
 * ms", "1.201 s"), in ms. */
static double ms_after(const char *line, const char *prefix)
{
    const char *at = strstr(line, prefix);
    double v = 0;
    char unit[4] = "";
    if (!at || sscanf(at + strlen(prefix), "%lf %3[a-z]", &v, unit) != 2 || (strcmp(unit, "ms") && strcmp(unit, "s")))
        fail_msg("no \"%s\" followed by a duration in: %s", prefix, line);
    return strcmp(unit, "s") == 0 ? v * 1000 : v;
}

static bool plain_only(const char *test)
{
    if (!itest_expandable())
        return true;
    fprintf(stderr, "%s: plain segments only, skipped\n", test);
    return false;
}

static void test_steady_give_is_waited_for(void **state)
{
    (void)state;
    if (!plain_only("test_steady_give_is_waited_for"))
        return;
    static peer_t holder;
    start_slow_holder(&holder, 16, 48, "200000");
    static itest_run_t r;
    const char *child = itest_helper("ITEST_CHILD");
    const char *argv[] = {child, "leak", "0", "512", NULL};
    const char *set[] = {"CUCACHE_YIELD_MS=100", "CUCACHE_REPORT=exit", NULL};
    itest_spawn(child, argv, set, NULL, 30000, &r);
    itest_expect_exit(&r, 0);
    assert_non_null(strstr(r.out, "cudaMalloc(512 MiB) after 0 steps: served"));
    char line[512];
    line_with(r.err, "yield waits: ", line, sizeof line);
    double ms = ms_after(line, "(the longest ");
    if (ms < 500 || ms > 5000) /* past the bound from the ask, short of the cap */
        fail_msg("waited %.1f ms for a give of 6 x 200 ms (bound 500 ms from the last progress): %s", ms, line);
    double mib = number_after(line, "CUCACHE_YIELD_MS); ");
    if (!strstr(line, " MiB given while it waited") || mib < 256)
        fail_msg("the wait should say what was given (256 MiB or more): %s", line);
    line_with(r.err, "yields: ", line, sizeof line);
    assert_non_null(strstr(line, " for 1 failed allocation"));
    assert_int_equal(peer_stop(&holder), 0);
}

static void test_stalled_give_ends_the_wait(void **state)
{
    (void)state;
    if (!plain_only("test_stalled_give_ends_the_wait"))
        return;
    static peer_t holder;
    start_slow_holder(&holder, 1, 768, "3000000");
    static itest_run_t r;
    const char *child = itest_helper("ITEST_CHILD");
    const char *argv[] = {child, "leak", "0", "512", NULL};
    const char *set[] = {"CUCACHE_YIELD_MS=100", NULL};
    itest_spawn(child, argv, set, NULL, 30000, &r);
    itest_expect_exit(&r, 3);
    char line[512], want[160];
    snprintf(want, sizeof want, "Process %d has ", (int)holder.pid);
    line_with(r.err, want, line, sizeof line);
    assert_non_null(strstr(line, "; asked for idle cache, still giving it back when the wait ended, 0 bytes so far)"));
    line_with(r.err, "other cucache processes: ", line, sizeof line);
    double waited = number_after(line, "(waited ");
    if (waited < 500 || waited > 2500)
        fail_msg("waited %.1f ms for a give that stalled, bound 500 ms: %s", waited, line);
    assert_int_equal(peer_stop(&holder), 0);
}

static void test_endless_give_is_capped(void **state)
{
    (void)state;
    if (!plain_only("test_endless_give_is_capped"))
        return;
    static peer_t wall, holder;
    setenv("CUCACHE_YIELD", "off", 1);
    peer_start(&wall);
    unsetenv("CUCACHE_YIELD");
    unsigned long long live = 0;
    assert_int_equal(sscanf(peer_cmd(&wall, "alloc %zx", 128 * MIB), "ok %llx", &live), 1);
    start_slow_holder(&holder, 48, 16, "100000");
    static itest_run_t r;
    const char *child = itest_helper("ITEST_CHILD");
    const char *argv[] = {child, "leak", "0", "1000", NULL};
    const char *set[] = {"CUCACHE_YIELD_MS=60", "CUCACHE_REPORT=exit", NULL};
    itest_spawn(child, argv, set, NULL, 30000, &r);
    itest_expect_exit(&r, 3);
    char line[512], want[160];
    line_with(r.err, "other cucache processes: ", line, sizeof line);
    double waited = number_after(line, "(waited ");
    if (waited < 3000 || waited > 4500)
        fail_msg("waited %.1f ms for a give of 4.8 s, cap 3000 ms: %s", waited, line);
    double in_all = number_after(line, "gave back ");
    if (!strstr(line, " MiB in all") || in_all < 16)
        fail_msg("the report should say what was given so far: %s", line);
    snprintf(want, sizeof want, "Process %d has ", (int)holder.pid);
    line_with(r.err, want, line, sizeof line);
    double so_far = number_after(line, "still giving it back when the wait ended, ");
    if (!strstr(line, " MiB so far)") || so_far < 16 || so_far > 768)
        fail_msg("the neighbour's row should say what it gave so far: %s", line);
    line_with(r.err, "yield waits: ", line, sizeof line);
    if (number_after(line, "CUCACHE_YIELD_MS); ") < 16)
        fail_msg("the exit summary should say what was given while it waited: %s", line);
    assert_int_equal(peer_stop(&holder), 0);
    assert_string_equal(peer_cmd(&wall, "free %llx", live), "ok");
    assert_int_equal(peer_stop(&wall), 0);
}

int main(void)
{
    /* one key per run: the peers and the children inherit it */
    snprintf(key, sizeof key, "itest-yieldwait-%d", (int)getpid());
    setenv("CUCACHE_SIM_SHARED", key, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steady_give_is_waited_for),
        cmocka_unit_test(test_stalled_give_ends_the_wait),
        cmocka_unit_test(test_endless_give_is_capped),
    };
    return cmocka_run_group_tests(tests, NULL, group_teardown);
}
