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
 *     with the report taking only answers, it says "0 bytes so far";
 *   - it fits: while the neighbour asked stalls, a process outside cucache
 *     frees enough; the asker tries again at once (within 600 ms of the
 *     ask), not at the bound.  Seen to fail: with the wait ending only on
 *     answers and bounds, it waits 1 s past that free.
 *
 * Plain segments only: expandable ones go back unmapped, not through the
 * cuMemFree that CUCACHE_SIM_FREE_US slows.
 */
#include "itest.h"
#include "peer.h"
#include "registry.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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
    fprintf(stderr, "steady: %s\n", line);
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
    fprintf(stderr, "stalled: %s\n", line);
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
    fprintf(stderr, "endless: %s\n", line);
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

/* The registry of the shared device, opened by this process. */
static void open_registry(st_reg_t *reg)
{
    CUdevice dev;
    CUuuid u;
    assert_int_equal(cuInit(0), CUDA_SUCCESS);
    assert_int_equal(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    assert_int_equal(cuDeviceGetUuid_v2(&u, dev), CUDA_SUCCESS);
    char uuid[48], at[160], why[320];
    st_reg_uuid_string((const uint8_t *)u.bytes, uuid);
    st_reg_path(uuid, at, sizeof at);
    if (st_reg_open(at, uuid, 0, false, reg, why, sizeof why) != 0)
        fail_msg("the registry %s: %s", at, why);
}

/* A child of this process that, once pid's registry slot says it is
 * giving back, waits 100 ms and has the peer `other` free `block` (it
 * gives up after 10 s: exit 1). */
static pid_t free_when_giving(st_reg_t *reg, pid_t pid, peer_t *other, unsigned long long block)
{
    pid_t k = fork();
    if (k != 0)
        return k;
    static st_reg_view_t v[ST_REG_SLOTS];
    for (int tries = 0; tries < 10000; tries++) {
        size_t n = st_reg_list(reg, v, ST_REG_SLOTS);
        for (size_t i = 0; i < n && i < ST_REG_SLOTS; i++)
            if (v[i].pid == pid && v[i].giving) {
                usleep(100000);
                _exit(strcmp(peer_cmd(other, "free %llx", block), "ok") == 0 ? 0 : 2);
            }
        usleep(1000);
    }
    _exit(1);
}

/* While the neighbour asked stalls (a free of 3 s), a process outside
 * cucache frees enough: the asker tries again at once, well before the
 * bound (1 s without progress). */
static void test_tries_once_it_fits(void **state)
{
    (void)state;
    if (!plain_only("test_tries_once_it_fits"))
        return;
    static peer_t wall, holder;
    char *preload = strdup(getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "");
    unsetenv("LD_PRELOAD"); /* outside cucache: its free goes back to the device */
    peer_start(&wall);
    setenv("LD_PRELOAD", preload, 1);
    free(preload);
    unsigned long long live = 0;
    assert_int_equal(sscanf(peer_cmd(&wall, "alloc %zx", 512 * MIB), "ok %llx", &live), 1);
    start_slow_holder(&holder, 1, 480, "3000000");
    st_reg_t reg;
    open_registry(&reg);
    pid_t freer = free_when_giving(&reg, holder.pid, &wall, live);
    static itest_run_t r;
    const char *child = itest_helper("ITEST_CHILD");
    const char *argv[] = {child, "leak", "0", "400", NULL};
    const char *set[] = {"CUCACHE_YIELD_MS=200", "CUCACHE_REPORT=exit", NULL};
    itest_spawn(child, argv, set, NULL, 30000, &r);
    int status;
    assert_int_equal(waitpid(freer, &status, 0), freer);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0); /* the holder was seen giving; the wall freed */
    itest_expect_exit(&r, 0);
    char line[512];
    line_with(r.err, "yield waits: ", line, sizeof line);
    double ms = ms_after(line, "(the longest ");
    if (ms < 100 || ms > 600) /* the free 100 ms into the give; the bound would be 1 s after it */
        fail_msg("waited %.1f ms, though the request fit 100 ms into the give: %s", ms, line);
    fprintf(stderr, "fits: %s\n", line);
    st_reg_close(&reg);
    assert_int_equal(peer_stop(&holder), 0);
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
        cmocka_unit_test(test_tries_once_it_fits),
    };
    return cmocka_run_group_tests(tests, NULL, group_teardown);
}
