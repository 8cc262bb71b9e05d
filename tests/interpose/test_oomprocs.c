/*
 * Proves that the OOM report names who holds the device's memory: on one
 * simulated device shared by two processes (CUCACHE_SIM_SHARED, a key of
 * this test run's own), tests/sim/ipc_peer holds 768 MiB of the 1 GiB and
 * itest_child, under cucache, runs out of memory; its report lists the
 * peer by pid, command and bytes, marks itself as this process, and splits
 * the memory outside cucache into the other processes' and its own, which
 * add up.  Without libnvidia-ml.so.1 the report says so in one line and
 * keeps the unsplit line.
 *
 * Seen to fail: with nvml.c giving the parent's pid as this process's, the
 * child is listed without "this process" and the peer's bytes count as its
 * own; with the UUID written with its bytes out of order, NVML finds no
 * device and the report says the processes are not known.
 */
#include "itest.h"
#include "peer.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char key[64];
static peer_t peer;

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
    if (!at)
        fail_msg("no line has \"%s\" in:\n%s", needle, text);
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

    /* the peer: its pid, bytes and command, as PyTorch's line begins */
    snprintf(want, sizeof want, "Process %d has 768.00 MiB memory in use (ipc_peer)", (int)peer.pid);
    line_with(r.err, want, line, sizeof line);

    /* the child itself, marked */
    line_with(r.err, "memory in use (itest_child, this process)", line, sizeof line);
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

int main(void)
{
    /* one key per run: the peer and the children inherit it */
    snprintf(key, sizeof key, "itest-oomprocs-%d", (int)getpid());
    setenv("CUCACHE_SIM_SHARED", key, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_names_the_processes),
        cmocka_unit_test(test_without_nvml),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
