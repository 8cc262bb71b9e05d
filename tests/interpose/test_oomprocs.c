/*
 * Proves that the OOM report names who holds the device's memory: on one
 * simulated device shared by two processes (CUCACHE_SIM_SHARED, a key of
 * this test run's own), the simulator's ipc_peer holds 768 MiB of the 1 GiB
 * and itest_child, under cucache, runs out of memory; its report lists the
 * peer by pid, command and bytes, marks itself as this process, and splits
 * the memory outside cucache into the other processes' and its own, which
 * add up.  Without libnvidia-ml.so.1 the report says so in one line and
 * keeps the unsplit line.
 *
 * Seen to fail: with nvml.c giving the parent's pid as this process's, the
 * child is listed without "this process" and the peer's bytes count as its
 * own; with the UUID written with its bytes out of order, NVML finds no
 * device and the report says the processes are not known.
 *
 * Yielding (interpose/yield.c): the peer, under cucache too, frees its
 * 768 MiB into its cache; the child's 512 MiB then fails on the device,
 * asks the peer, which gives the idle segment back, and is served; the
 * child's exit summary counts what it received.  With CUCACHE_YIELD=off in
 * the child it fails as before and its report says nothing was asked; a
 * peer started with CUCACHE_YIELD=off keeps its cache, and the child's
 * report says it gave nothing back.  Seen to fail: with core_yield giving
 * nothing back, the child fails (exit 3); with the asker not retrying, the
 * same; with the registry thread not answering, the child waits out
 * CUCACHE_YIELD_MS and its report says "no answer in time".
 *
 * Faults: a neighbour stopped (SIGSTOP) while it holds idle cache never
 * answers: the asking process waits CUCACHE_YIELD_MS, no longer, fails as
 * before and its report says the neighbour did not answer in time.  Four
 * processes failing at once against one neighbour are all served, and the
 * neighbour's live block keeps its bytes (it gave back only what was
 * idle).  cudaMemGetInfo does not count a neighbour's idle cache as free,
 * and the free memory it reports can be allocated.
 *
 * A give that outlasts the wait: a neighbour whose cuMemFree takes 300 ms
 * (CUCACHE_SIM_FREE_US) against the asker's CUCACHE_YIELD_MS=100 is waited
 * for while it is giving (its registry slot says so) and the asker is
 * served; its exit summary gives the wait.  Seen to fail: with the wait
 * ending at CUCACHE_YIELD_MS (HOOK_YIELD_BOUND 1), the child fails (exit 3).
 * A neighbour killed while giving (its free takes 5 s) ends the wait
 * within the bound (5 x CUCACHE_YIELD_MS), and the report names it as died
 * while giving back.  Seen to fail: with st_reg_wait_answer not checking
 * that the owner runs, the report says nothing of its death (the wait runs
 * to the bound, "still giving"); without the bound, the child hangs and is
 * killed at the test's 30 s.
 */
#include "itest.h"
#include "peer.h"
#include "registry.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char key[64];
static peer_t peer;
static unsigned long long peer_block; /* the peer's 768 MiB, live after the first test */

static int group_setup(void **state)
{
    (void)state;
    peer_start(&peer);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = peer_stop(&peer);
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/cucache-sim-%u-%s", (unsigned)geteuid(), key);
    if (unlink(path) != 0) {
        fprintf(stderr, "test_oomprocs: cannot remove %s\n", path);
        rc = -1;
    }
    return rc == 0 ? 0 : -1;
}

/* The first line of text containing needle, copied into out (fails when none). */
static void line_with(const char *text, const char *needle, char *out, size_t len)
{
    const char *at = strstr(text, needle);
    if (!at) {
        fprintf(stderr, "test_oomprocs: no line has \"%s\" in:\n%s\n", needle, text); /* whole: fail_msg cuts */
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

/* itest_child leak 4 512 on the shared device: 512 MiB cannot fit beside
 * the peer's 768 MiB, so it exits 3 after cucache's report. */
static void run_oom_child(itest_run_t *r)
{
    const char *child = itest_helper("ITEST_CHILD");
    const char *argv[] = {child, "leak", "4", "512", NULL};
    itest_spawn(child, argv, NULL, NULL, 30000, r);
    itest_expect_exit(r, 3);
}

static void test_report_names_the_processes(void **state)
{
    (void)state;
    const char *got = peer_cmd(&peer, "alloc %zx", 768 * MIB);
    if (strncmp(got, "ok ", 3) != 0)
        fail_msg("the peer could not hold 768 MiB: %s", got);
    static itest_run_t r;
    run_oom_child(&r);
    char line[512], want[256];

    assert_int_equal(sscanf(got, "ok %llx", &peer_block), 1);

    /* the peer: its pid, bytes and command, as PyTorch's line begins; it
     * runs cucache, holds no idle cache, and was asked all the same */
    snprintf(want, sizeof want,
             "Process %d has 768.00 MiB memory in use (ipc_peer; cucache: 768.00 MiB allocated, 0 bytes cached, as it "
             "published ",
             (int)peer.pid);
    line_with(r.err, want, line, sizeof line);
    assert_non_null(strstr(line, " ago; gave back 0 bytes for this request, "));
    line_with(r.err, "other cucache processes: ", line, sizeof line);
    assert_non_null(strstr(line, "other cucache processes: 1 asked for idle cache gave back 0 bytes in all (waited "));

    /* the child itself, marked */
    line_with(r.err, "memory in use (itest_child, this process; cucache: 12.00 MiB allocated, ", line, sizeof line);
    unsigned self = 0;
    assert_int_equal(sscanf(strstr(line, "Process "), "Process %u has", &self), 1);
    assert_true(self != (unsigned)peer.pid && self != (unsigned)getpid());

    /* the split adds up: 768 MiB outside, all of it the peer's */
    line_with(r.err, "outside cucache: ", line, sizeof line);
    assert_non_null(
        strstr(line, "outside cucache: 768.00 MiB (device total - device free - cucache reserved), by NVML:"));
    line_with(r.err, "other processes: ", line, sizeof line);
    assert_non_null(strstr(line, "other processes: 768.00 MiB in 1 process"));
    line_with(r.err, "this process, outside cucache: ", line, sizeof line);
    assert_non_null(strstr(line, "this process, outside cucache: 0 bytes (its "));
    char its[32], reserved[32];
    assert_int_equal(sscanf(strstr(line, "(its "), "(its %31[^ ] %*s in use less the %31[^ ]", its, reserved), 2);
    assert_string_equal(its, reserved); /* the child holds only what cucache reserved */
    assert_null(strstr(r.err, "not known"));
}

static void test_without_nvml(void **state)
{
    (void)state;
    /* the library path without the directories that have
     * libnvidia-ml.so.1, and one of its own first with the simulated
     * driver and runtime of the first of those */
    static const char *const libs[] = {"libcuda.so.1", "libcudart.so.13"};
    char dir[] = "/tmp/itest-oomprocs-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *path = getenv("LD_LIBRARY_PATH");
    assert_non_null(path);
    char list[4096], env_path[4200], probe[4200], link_path[2][128];
    snprintf(list, sizeof list, "%s", path);
    int n = snprintf(env_path, sizeof env_path, "LD_LIBRARY_PATH=%s", dir);
    size_t linked = 0;
    for (char *save = NULL, *e = strtok_r(list, ":", &save); e; e = strtok_r(NULL, ":", &save)) {
        snprintf(probe, sizeof probe, "%s/libnvidia-ml.so.1", e);
        if (access(probe, F_OK) != 0) {
            n += snprintf(env_path + n, sizeof env_path - (size_t)n, ":%s", e);
            continue;
        }
        for (size_t i = 0; i < 2; i++) {
            snprintf(probe, sizeof probe, "%s/%s", e, libs[i]);
            snprintf(link_path[i], sizeof link_path[i], "%s/%s", dir, libs[i]);
            if (access(probe, F_OK) == 0 && access(link_path[i], F_OK) != 0 && symlink(probe, link_path[i]) == 0)
                linked++;
        }
    }
    const char *set[] = {env_path, NULL};
    static itest_run_t r;
    const char *child = itest_helper("ITEST_CHILD");
    const char *argv[] = {child, "leak", "4", "512", NULL};
    if (linked == 2)
        itest_spawn(child, argv, set, NULL, 30000, &r);
    for (size_t i = 0; i < linked; i++)
        unlink(link_path[i]);
    rmdir(dir);
    assert_int_equal(linked, 2);
    itest_expect_exit(&r, 3);
    char line[512];
    line_with(r.err, "outside cucache: ", line, sizeof line);
    assert_non_null(strstr(line, "(device total - device free - cucache reserved: other processes, or this process"));
    line_with(r.err, "processes on GPU 0: not known", line, sizeof line);
    assert_non_null(strstr(line, "processes on GPU 0: not known (NVML: libnvidia-ml.so.1 cannot be loaded), so this "
                                 "is not split"));
    assert_null(strstr(r.err, "memory in use"));
}

/* The peer's block freed into its cache: the child's allocation is served
 * once the peer gives it back. */
static void test_yield_gives_idle_cache(void **state)
{
    (void)state;
    assert_true(peer_block != 0);
    const char *got = peer_cmd(&peer, "free %llx", peer_block);
    assert_string_equal(got, "ok");
    peer_block = 0;

    /* asking turned off in the child: it fails, and its report asked no one */
    static itest_run_t off;
    const char *child = itest_helper("ITEST_CHILD");
    const char *argv[] = {child, "leak", "4", "512", NULL};
    const char *no[] = {"CUCACHE_YIELD=off", NULL};
    itest_spawn(child, argv, no, NULL, 30000, &off);
    itest_expect_exit(&off, 3);
    assert_null(strstr(off.err, "other cucache processes:"));

    static itest_run_t r;
    const char *report[] = {"CUCACHE_REPORT=exit", NULL};
    itest_spawn(child, argv, report, NULL, 30000, &r);
    itest_expect_exit(&r, 0);
    assert_non_null(strstr(r.out, "cudaMalloc(512 MiB) after 4 steps: served"));
    char line[512];
    line_with(r.err, "yields: ", line, sizeof line);
    /* the peer gives 768 MiB; the child tries again as soon as its 512 fit
     * (yield.c), so what it counts received is what had landed by then */
    const char *recv = strstr(line, "yields: gave 0 bytes of idle cache back to other processes on this GPU (0 asks); "
                                    "received ");
    assert_non_null(recv);
    double mib = 0;
    assert_int_equal(sscanf(strstr(recv, "received ") + strlen("received "), "%lf MiB", &mib), 1);
    if (mib < 512 || mib > 768)
        fail_msg("received %.2f MiB, not between the 512 asked and the 768 given: %s", mib, line);
    assert_non_null(strstr(line, " for 1 failed allocation (CUCACHE_YIELD)"));
    assert_null(strstr(r.err, "out of memory"));
    /* the failure before the yield was not the program's */
    line_with(r.err, "CUDA OOMs: ", line, sizeof line);
    assert_non_null(strstr(line, "CUDA OOMs: 0 "));
}

/* A neighbour with CUCACHE_YIELD=off keeps its cache: the child fails and
 * says the neighbour gave nothing back. */
static void test_neighbour_with_yield_off(void **state)
{
    (void)state;
    static peer_t keeper;
    setenv("CUCACHE_YIELD", "off", 1);
    peer_start(&keeper);
    unsetenv("CUCACHE_YIELD");
    unsigned long long block = 0;
    const char *got = peer_cmd(&keeper, "alloc %zx", 768 * MIB);
    assert_int_equal(sscanf(got, "ok %llx", &block), 1);
    assert_string_equal(peer_cmd(&keeper, "free %llx", block), "ok");
    static itest_run_t r;
    run_oom_child(&r);
    char line[512], want[256];
    snprintf(want, sizeof want,
             "Process %d has 768.00 MiB memory in use (ipc_peer; cucache: 0 bytes allocated, 768.00 MiB cached, as "
             "it published ",
             (int)keeper.pid);
    line_with(r.err, want, line, sizeof line);
    assert_non_null(strstr(line, " ago; gave back 0 bytes for this request, "));
    assert_int_equal(peer_stop(&keeper), 0);
}

/* A neighbour holding `mib` of idle cache (and `live_mib` live, filled
 * with pattern 7 when not 0): started, allocated, freed. */
static void start_holder(peer_t *p, size_t mib, size_t live_mib, unsigned long long *live)
{
    peer_start(p);
    unsigned long long block = 0;
    if (live_mib) {
        const char *got = peer_cmd(p, "alloc %zx", live_mib * MIB);
        assert_int_equal(sscanf(got, "ok %llx", live), 1);
        assert_string_equal(peer_cmd(p, "fill %llx %zx 7", *live, live_mib * MIB), "ok");
    }
    const char *got = peer_cmd(p, "alloc %zx", mib * MIB);
    assert_int_equal(sscanf(got, "ok %llx", &block), 1);
    assert_string_equal(peer_cmd(p, "free %llx", block), "ok");
}

static void test_neighbour_stopped(void **state)
{
    (void)state;
    static peer_t stopped;
    start_holder(&stopped, 768, 0, NULL);
    assert_int_equal(kill(stopped.pid, SIGSTOP), 0);
    static itest_run_t r;
    const char *child = itest_helper("ITEST_CHILD");
    const char *argv[] = {child, "leak", "4", "512", NULL};
    const char *set[] = {"CUCACHE_YIELD_MS=300", NULL};
    itest_spawn(child, argv, set, NULL, 30000, &r);
    kill(stopped.pid, SIGCONT);
    itest_expect_exit(&r, 3);
    char line[512], want[256];
    /* its figures are what it last published, whenever it stopped, or
     * unreadable if it stopped while publishing */
    snprintf(want, sizeof want, "Process %d has 768.00 MiB memory in use (ipc_peer; cucache", (int)stopped.pid);
    line_with(r.err, want, line, sizeof line);
    assert_non_null(strstr(line, "; asked for idle cache, no answer in time)"));
    line_with(r.err, "other cucache processes: ", line, sizeof line);
    double waited = 0;
    const char *w = strstr(line, "(waited ");
    assert_non_null(w);
    assert_int_equal(sscanf(w, "(waited %lf ms)", &waited), 1);
    if (waited < 300 || waited > 2300)
        fail_msg("waited %.1f ms for a stopped neighbour, bound 300 ms: %s", waited, line);
    assert_int_equal(peer_stop(&stopped), 0);
}

static void test_many_ask_at_once(void **state)
{
    (void)state;
    static peer_t holder;
    unsigned long long live = 0;
    start_holder(&holder, 768, 64, &live);
    enum { ASKERS = 4 };
    const char *child = itest_helper("ITEST_CHILD");
    pid_t kids[ASKERS];
    for (int i = 0; i < ASKERS; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            int null = open("/dev/null", O_WRONLY);
            dup2(null, 1);
            dup2(null, 2);
            execl(child, child, "leak", "0", "200", (char *)NULL);
            _exit(127);
        }
        assert_true(kids[i] > 0);
    }
    int served = 0;
    for (int i = 0; i < ASKERS; i++) {
        int status;
        assert_int_equal(waitpid(kids[i], &status, 0), kids[i]);
        served += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    assert_int_equal(served, ASKERS);
    /* the holder's live block kept its bytes, and the holder still works */
    assert_string_equal(peer_cmd(&holder, "check %llx %zx 7", live, 64 * MIB), "ok");
    const char *got = peer_cmd(&holder, "alloc %zx", 512 * MIB);
    assert_true(strncmp(got, "ok ", 3) == 0);
    assert_int_equal(peer_stop(&holder), 0);
}

static void test_meminfo_leaves_neighbour_cache_out(void **state)
{
    (void)state;
    static peer_t holder, asker;
    start_holder(&holder, 512, 0, NULL);
    peer_start(&asker);
    unsigned long long f = 0, t = 0, p = 0;
    assert_int_equal(sscanf(peer_cmd(&asker, "meminfo"), "ok %llx %llx", &f, &t), 2);
    assert_int_equal(t, 1024 * MIB);
    if (f > t - 512 * MIB)
        fail_msg("cudaMemGetInfo: %llu MiB free beside a neighbour's 512 MiB cache", f / MIB);
    /* what it reports can be had */
    assert_int_equal(sscanf(peer_cmd(&asker, "alloc %llx", f), "ok %llx", &p), 1);
    assert_string_equal(peer_cmd(&asker, "free %llx", p), "ok");
    assert_int_equal(peer_stop(&asker), 0);
    assert_int_equal(peer_stop(&holder), 0);
}

/* A registry file the process must not use (another user could read or
 * write it): one line naming it and why, and the program runs on. */
static void test_registry_refused(void **state)
{
    (void)state;
    char reg[200];
    snprintf(reg, sizeof reg, "/dev/shm/cucache-gpu-%u-*", (unsigned)geteuid());
    /* the peer is on the GPU: its registry is the only one of this key; find
     * it by the peer's pid in /proc/PID/maps */
    char maps[64], line[512], file[256] = "";
    snprintf(maps, sizeof maps, "/proc/%d/maps", (int)peer.pid);
    FILE *m = fopen(maps, "r");
    assert_non_null(m);
    while (fgets(line, sizeof line, m)) {
        char *at = strstr(line, "/dev/shm/cucache-gpu-");
        if (at) {
            at[strcspn(at, "\n")] = 0;
            snprintf(file, sizeof file, "%s", at);
        }
    }
    fclose(m);
    if (!file[0])
        fail_msg("the peer maps no registry (%s)", reg);
    assert_int_equal(chmod(file, 0644), 0);
    static itest_run_t r;
    const char *child = itest_helper("ITEST_CHILD");
    const char *argv[] = {child, "leak", "4", "16", NULL};
    itest_spawn(child, argv, NULL, NULL, 30000, &r);
    assert_int_equal(chmod(file, 0600), 0);
    itest_expect_exit(&r, 0);
    char want[400], got[512];
    snprintf(want, sizeof want, "GPU 0: registry not used: %s: mode 644, not 0600: others could read or write it, "
             "refused; this process neither gives nor asks for idle cache on this GPU", file);
    line_with(r.err, want, got, sizeof got);
}

/* A neighbour whose cuMemFree takes `free_us`, holding `mib` of idle cache. */
static void start_slow_holder(peer_t *p, size_t mib, const char *free_us)
{
    setenv("CUCACHE_SIM_FREE_US", free_us, 1);
    start_holder(p, mib, 0, NULL);
    unsetenv("CUCACHE_SIM_FREE_US");
}

/* Its give (one 768 MiB free of 300 ms) outlasts the asker's
 * CUCACHE_YIELD_MS=100: the asker waits while it gives and is served. */
static void test_give_outlasts_wait(void **state)
{
    (void)state;
    if (itest_expandable()) { /* its pages go back unmapped: no cuMemFree, which CUCACHE_SIM_FREE_US slows */
        fprintf(stderr, "test_give_outlasts_wait: plain segments only, skipped\n");
        return;
    }
    static peer_t slow;
    start_slow_holder(&slow, 768, "300000");
    static itest_run_t r;
    const char *child = itest_helper("ITEST_CHILD");
    const char *argv[] = {child, "leak", "4", "512", NULL};
    const char *set[] = {"CUCACHE_YIELD_MS=100", "CUCACHE_REPORT=exit", NULL};
    itest_spawn(child, argv, set, NULL, 30000, &r);
    itest_expect_exit(&r, 0);
    assert_non_null(strstr(r.out, "cudaMalloc(512 MiB) after 4 steps: served"));
    char line[512];
    line_with(r.err, "yields: ", line, sizeof line);
    assert_non_null(strstr(line, "received 768.00 MiB for 1 failed allocation"));
    line_with(r.err, "yield waits: ", line, sizeof line);
    const char *longest = strstr(line, "(the longest ");
    double ms = 0;
    assert_non_null(longest);
    assert_int_equal(sscanf(longest, "(the longest %lf ms", &ms), 1);
    if (ms < 300 || ms > 500 + 2000)
        fail_msg("waited %.1f ms for a 300 ms give (bound 500 ms): %s", ms, line);
    assert_non_null(strstr(line, " in 1 ask "));
    assert_int_equal(peer_stop(&slow), 0);
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

/* Kills pid once its registry slot says it is giving back (a child of
 * this process; it gives up after 10 s). */
static pid_t kill_when_giving(st_reg_t *reg, pid_t pid)
{
    pid_t k = fork();
    if (k != 0)
        return k;
    static st_reg_view_t v[ST_REG_SLOTS];
    for (int tries = 0; tries < 10000; tries++) {
        size_t n = st_reg_list(reg, v, ST_REG_SLOTS);
        for (size_t i = 0; i < n && i < ST_REG_SLOTS; i++)
            if (v[i].pid == pid && v[i].giving) {
                usleep(50000);
                kill(pid, SIGKILL);
                _exit(0);
            }
        usleep(1000);
    }
    _exit(1);
}

/* A neighbour killed while giving (a free of 5 s) ends the asker's wait
 * within its bound; the report names it.  A neighbour that does not yield
 * holds 256 MiB live, so that the 800 MiB fail even with the dead one's
 * memory back. */
static void test_neighbour_dies_giving(void **state)
{
    (void)state;
    if (itest_expandable()) { /* its pages go back unmapped: no cuMemFree, which CUCACHE_SIM_FREE_US slows */
        fprintf(stderr, "test_neighbour_dies_giving: plain segments only, skipped\n");
        return;
    }
    static peer_t wall, dying;
    setenv("CUCACHE_YIELD", "off", 1);
    peer_start(&wall);
    unsetenv("CUCACHE_YIELD");
    unsigned long long live = 0;
    const char *got = peer_cmd(&wall, "alloc %zx", 256 * MIB);
    assert_int_equal(sscanf(got, "ok %llx", &live), 1);
    start_slow_holder(&dying, 512, "5000000");
    st_reg_t reg;
    open_registry(&reg);
    pid_t killer = kill_when_giving(&reg, dying.pid);
    static itest_run_t r;
    const char *child = itest_helper("ITEST_CHILD");
    const char *argv[] = {child, "leak", "0", "800", NULL};
    const char *set[] = {"CUCACHE_YIELD_MS=200", NULL};
    itest_spawn(child, argv, set, NULL, 30000, &r);
    int status;
    assert_int_equal(waitpid(killer, &status, 0), killer);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0); /* it was seen giving, and killed */
    itest_expect_exit(&r, 3);
    char line[512], want[160];
    line_with(r.err, "other cucache processes: ", line, sizeof line);
    snprintf(want, sizeof want, "; process %d died while giving back, before it answered; ", (int)dying.pid);
    assert_non_null(strstr(line, want));
    double waited = 0;
    const char *w = strstr(line, "(waited ");
    assert_non_null(w);
    assert_int_equal(sscanf(w, "(waited %lf ms)", &waited), 1);
    if (waited > 1000 + 1000)
        fail_msg("waited %.1f ms for a neighbour killed while giving, bound 1000 ms: %s", waited, line);
    signal(SIGPIPE, SIG_IGN);                /* its pipe has no reader */
    assert_int_equal(peer_stop(&dying), -1); /* killed */
    signal(SIGPIPE, SIG_DFL);
    st_reg_close(&reg);
    assert_string_equal(peer_cmd(&wall, "free %llx", live), "ok");
    assert_int_equal(peer_stop(&wall), 0);
}

int main(void)
{
    /* one key per run: the peer and the children inherit it */
    snprintf(key, sizeof key, "itest-oomprocs-%d", (int)getpid());
    setenv("CUCACHE_SIM_SHARED", key, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_names_the_processes),
        cmocka_unit_test(test_without_nvml),
        cmocka_unit_test(test_yield_gives_idle_cache),
        cmocka_unit_test(test_neighbour_with_yield_off),
        cmocka_unit_test(test_neighbour_stopped),
        cmocka_unit_test(test_many_ask_at_once),
        cmocka_unit_test(test_give_outlasts_wait),
        cmocka_unit_test(test_neighbour_dies_giving),
        cmocka_unit_test(test_meminfo_leaves_neighbour_cache_out),
        cmocka_unit_test(test_registry_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
