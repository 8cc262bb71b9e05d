/*
 * Proves the simulated device's configuration through CUCACHE_SIM_*: the
 * defaults (one device of 80 GiB), the device count, capacities with K/M/G/T
 * units, that a bad value of any variable makes initialisation fail with a
 * message naming the variable, and the race detector's switches (off,
 * counting, fatal), and the refusals of the shared device's file
 * (CUCACHE_SIM_SHARED): another user's, open to others, a symbolic link,
 * truncated, not a table, another version, a corrupt header, devices that
 * do not agree.  Each case runs a helper program (sim_probe, race_fatal)
 * in a child process with its own environment.
 */
#include "simtest.h"

#include "hostile.h"
#include "../src/shared.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define GIB (1ull << 30)

struct run {
    int status;      /* as from waitpid */
    char out[16384]; /* stdout */
    char err[16384]; /* stderr */
};

static void read_file(int fd, char *buf, size_t len)
{
    lseek(fd, 0, SEEK_SET);
    size_t used = 0;
    ssize_t n;
    while (used + 1 < len && (n = read(fd, buf + used, len - 1 - used)) > 0)
        used += (size_t)n;
    buf[used] = '\0';
    close(fd);
}

static int temp_fd(void)
{
    char name[] = "/tmp/simtest-XXXXXX";
    int fd = mkstemp(name);
    assert_true(fd >= 0);
    unlink(name);
    return fd;
}

/* Run env var `prog` (a path) with one argument (or none), in the current
 * environment without any CUCACHE_SIM_* variable, plus `set` (NULL-ended
 * "NAME=value" strings). */
static void run_with(const char *prog_var, const char *arg, const char *const *set, struct run *r)
{
    const char *prog = getenv(prog_var);
    if (!prog) {
        print_error("%s is not set (meson passes it)\n", prog_var);
        fail();
    }
    size_t n = 0;
    while (environ[n])
        n++;
    const char **env = calloc(n + 16, sizeof *env);
    assert_non_null(env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "CUCACHE_SIM_", 12) != 0)
            env[k++] = environ[i];
    for (size_t i = 0; set && set[i] && k < n + 15; i++)
        env[k++] = set[i];
    env[k] = NULL;

    int out = temp_fd(), err = temp_fd();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    posix_spawn_file_actions_adddup2(&fa, err, 2);
    char *argv[] = {(char *)prog, (char *)arg, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, prog, &fa, NULL, argv, (char *const *)env);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    assert_int_equal(rc, 0);
    assert_int_equal(waitpid(pid, &r->status, 0), pid);
    read_file(out, r->out, sizeof r->out);
    read_file(err, r->err, sizeof r->err);
}

/* Value of "key=<number>" in text; fails the test when absent. */
static long long field(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = text; (p = strstr(p, key)) != NULL; p++) {
        if ((p == text || p[-1] == ' ' || p[-1] == '\n') && p[kl] == '=')
            return strtoll(p + kl + 1, NULL, 10);
    }
    print_error("no %s= in output:\n%s\n", key, text);
    fail();
    return 0;
}

static void expect_exit0(const struct run *r)
{
    if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0) {
        print_error("child status 0x%x\nstdout:\n%s\nstderr:\n%s\n", r->status, r->out, r->err);
        fail();
    }
}

static void probe(const char *const *set, struct run *r)
{
    run_with("SIMTEST_PROBE", NULL, set, r);
    expect_exit0(r);
}

static void test_defaults_one_device_of_80g(void **state)
{
    (void)state;
    static struct run r;
    const char *const set[] = {"CUCACHE_SIM_ALLOC_US=0", "CUCACHE_SIM_FREE_US=0", NULL};
    probe(set, &r);
    assert_int_equal(field(r.out, "count"), cudaSuccess);
    assert_int_equal(field(r.out, "devices"), 1);
    assert_int_equal(field(r.out, "total"), 80 * GIB);
    assert_int_equal(field(r.out, "total0"), 80 * GIB);
    assert_int_equal(field(r.out, "malloc"), cudaSuccess);
    assert_int_equal(field(r.out, "ats"), 0); /* a discrete GPU */
}

/* CUCACHE_SIM_COHERENT=1: the device says the CPU shares its memory. */
static void test_coherent(void **state)
{
    (void)state;
    static struct run r;
    const char *const set[] = {"CUCACHE_SIM_COHERENT=1", "CUCACHE_SIM_CAPACITY=1G", NULL};
    probe(set, &r);
    assert_int_equal(field(r.out, "ats"), 1);
}

static void test_device_count(void **state)
{
    (void)state;
    static struct run r;
    const char *const set[] = {"CUCACHE_SIM_DEVICES=3", "CUCACHE_SIM_CAPACITY=1G", NULL};
    probe(set, &r);
    assert_int_equal(field(r.out, "devices"), 3);
    assert_int_equal(field(r.out, "total0"), GIB);
    assert_int_equal(field(r.out, "total2"), GIB);
}

static void test_capacity_units(void **state)
{
    (void)state;
    static struct run r;
    static const struct {
        const char *set;
        unsigned long long bytes;
    } cases[] = {
        {"CUCACHE_SIM_CAPACITY=512M", 512ull << 20},
        {"CUCACHE_SIM_CAPACITY=1048576K", GIB},
        {"CUCACHE_SIM_CAPACITY=3G", 3 * GIB},
        /* a fraction of a terabyte: a whole one may not fit ThreadSanitizer's address space */
        {"CUCACHE_SIM_CAPACITY=0.125T", 128 * GIB},
        {"CUCACHE_SIM_CAPACITY=1073741824", GIB},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *const set[] = {cases[i].set, NULL};
        probe(set, &r);
        if ((unsigned long long)field(r.out, "total") != cases[i].bytes) {
            print_error("%s: got total=%lld, expected %llu\n", cases[i].set, field(r.out, "total"), cases[i].bytes);
            fail();
        }
        assert_int_equal(field(r.out, "malloc"), cudaSuccess);
    }
}

static void test_bad_values_fail_init_naming_the_variable(void **state)
{
    (void)state;
    static struct run r;
    static const char *const bad[] = {
        "CUCACHE_SIM_CAPACITY=lots",        "CUCACHE_SIM_CAPACITY=12Q",        "CUCACHE_SIM_DEVICES=many",
        "CUCACHE_SIM_ALLOC_US=slow",        "CUCACHE_SIM_FREE_US=-x",          "CUCACHE_SIM_COPY_GBPS=fast",
        "CUCACHE_SIM_RACE=perhaps",         "CUCACHE_SIM_RACE_FATAL=perhaps",  "CUCACHE_SIM_VMM_GRANULARITY=3M",
        "CUCACHE_SIM_VMM_GRANULARITY=1K",   "CUCACHE_SIM_VMM_GRANULARITY=big", "CUCACHE_SIM_VMM_US=map",
        "CUCACHE_SIM_VMM_US=map=-1",        "CUCACHE_SIM_VMM_US=mapp=1",       "CUCACHE_SIM_VMM_US=map=1,",
        "CUCACHE_SIM_VMM_US=map=1;unmap=2",
        "CUCACHE_SIM_KERNEL_US=",           "CUCACHE_SIM_KERNEL_US=fast",      "CUCACHE_SIM_KERNEL_US=gemm=",
        "CUCACHE_SIM_KERNEL_US==5",         "CUCACHE_SIM_KERNEL_US=5,",        "CUCACHE_SIM_KERNEL_US=-1",
        "CUCACHE_SIM_KERNEL_US=gemm=20000000", "CUCACHE_SIM_SPIN_US=always",
        "CUCACHE_SIM_COHERENT=yes",         "CUCACHE_SIM_SHARED=",             "CUCACHE_SIM_SHARED=../x",
        "CUCACHE_SIM_SHARED=.hidden",       "CUCACHE_SIM_SHARED=a b",
        "CUCACHE_SIM_SHARED=k12345678901234567890123456789012345678901234567890123456789012345",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *const set[] = {bad[i], NULL};
        probe(set, &r);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(strchr(bad[i], '=') - bad[i]), bad[i]);
        if (field(r.out, "count") == cudaSuccess || field(r.out, "malloc") == cudaSuccess ||
            strstr(r.err, name) == NULL) {
            print_error("%s: expected failing calls and a message naming %s\nstdout:\n%s\nstderr:\n%s\n", bad[i], name,
                        r.out, r.err);
            fail();
        }
    }
}

/* Every variable's refusal of a hostile value (tests/hostile.h): named,
 * bounded, shown with its control and non-ASCII bytes escaped and its
 * length.  Seen to fail with src/config.c printing the value raw. */
static void test_hostile_values_shown_safely(void **state)
{
    (void)state;
    static struct run r;
    static const char *const vars[] = {
        "CUCACHE_SIM_DEVICES",   "CUCACHE_SIM_CAPACITY",  "CUCACHE_SIM_ALLOC_US",   "CUCACHE_SIM_FREE_US",
        "CUCACHE_SIM_COPY_GBPS", "CUCACHE_SIM_RACE",      "CUCACHE_SIM_RACE_FATAL", "CUCACHE_SIM_VMM_GRANULARITY",
        "CUCACHE_SIM_VMM_US",    "CUCACHE_SIM_KERNEL_US", "CUCACHE_SIM_SPIN_US",    "CUCACHE_SIM_COHERENT",
        "CUCACHE_SIM_SHARED",
    };
    static char setting[HOSTILE_LEN + 64];
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *const set[] = {hostile_setting(setting, sizeof setting, vars[i]), NULL};
        probe(set, &r);
        char why[128];
        if (field(r.out, "count") == cudaSuccess || !hostile_shown_safely(r.err, vars[i], why, sizeof why)) {
            print_error("%s=<hostile>: %s\nstderr:\n%.2000s\n", vars[i], why, r.err);
            fail();
        }
    }
}

static void test_good_values(void **state)
{
    (void)state;
    static struct run r;
    static const char *const good[] = {
        "CUCACHE_SIM_VMM_GRANULARITY=64K",
        "CUCACHE_SIM_VMM_GRANULARITY=1G",
        "CUCACHE_SIM_VMM_US=0",
        "CUCACHE_SIM_VMM_US=map=1.45,unmap=25.6,create=193,release=0,reserve=19,addressfree=1,access=36",
        "CUCACHE_SIM_KERNEL_US=0",
        "CUCACHE_SIM_KERNEL_US=2.5,gemm=300,_Z7softmaxPfi=12.25",
        "CUCACHE_SIM_KERNEL_US=gemm=300",
        "CUCACHE_SIM_SPIN_US=0",
        "CUCACHE_SIM_COHERENT=0",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        const char *const set[] = {good[i], "CUCACHE_SIM_CAPACITY=1G", NULL};
        probe(set, &r);
        if (field(r.out, "malloc") != cudaSuccess || r.err[0]) {
            print_error("%s: expected a working device and no message\nstdout:\n%s\nstderr:\n%s\n", good[i], r.out,
                        r.err);
            fail();
        }
    }
}

static void test_race_fatal_aborts_on_planted_race(void **state)
{
    (void)state;
    static struct run r;
    const char *const set[] = {"CUCACHE_SIM_RACE_FATAL=1", NULL};
    run_with("SIMTEST_RACE_FATAL", "planted", set, &r);
    if (!WIFSIGNALED(r.status) || WTERMSIG(r.status) != SIGABRT || strstr(r.err, "race") == NULL) {
        print_error("expected SIGABRT and a race report; status 0x%x\nstdout:\n%s\nstderr:\n%s\n", r.status, r.out,
                    r.err);
        fail();
    }
    run_with("SIMTEST_RACE_FATAL", "ordered", set, &r);
    expect_exit0(&r);
    assert_int_equal(field(r.out, "races"), 0);
}

static void test_race_detector_counts_and_can_be_off(void **state)
{
    (void)state;
    static struct run r;
    const char *const counting[] = {"CUCACHE_SIM_RACE=1", "CUCACHE_SIM_RACE_FATAL=0", NULL};
    run_with("SIMTEST_RACE_FATAL", "planted", counting, &r);
    expect_exit0(&r);
    assert_true(field(r.out, "races") >= 1);
    const char *const off[] = {"CUCACHE_SIM_RACE=0", "CUCACHE_SIM_RACE_FATAL=1", NULL};
    run_with("SIMTEST_RACE_FATAL", "planted", off, &r);
    expect_exit0(&r);
    assert_int_equal(field(r.out, "races"), 0);
}

/* ------------------------------------------------------------------------
 * The shared device's file (CUCACHE_SIM_SHARED): what is refused
 * ---------------------------------------------------------------------- */

static char shared_key[64], shared_env[96], shared_file[256];

/* A fresh key (its file removed) and its variable. */
static void shared_fresh(const char *name)
{
    snprintf(shared_key, sizeof shared_key, "simtest-config-%d-%s", (int)getpid(), name);
    snprintf(shared_env, sizeof shared_env, "CUCACHE_SIM_SHARED=%s", shared_key);
    snprintf(shared_file, sizeof shared_file, SIM_SHARED_DIR "/" SIM_SHARED_PREFIX "%u-%s", (unsigned)geteuid(),
             shared_key);
    unlink(shared_file);
}

/* The probe with the shared key and capacity cap: a working device or, when
 * `refusal` is not NULL, a failed initialisation whose one message names
 * the file and says `refusal`. */
static void shared_probe(const char *cap, const char *refusal)
{
    static struct run r;
    const char *const set[] = {shared_env, cap, NULL};
    probe(set, &r);
    const char *first_end = strchr(r.err, '\n');
    bool one_line = first_end && !strchr(first_end + 1, '\n');
    bool ok = refusal ? field(r.out, "count") != cudaSuccess && field(r.out, "malloc") != cudaSuccess &&
                            strstr(r.err, shared_file) && strstr(r.err, refusal) && one_line
                      : field(r.out, "malloc") == cudaSuccess && !r.err[0];
    if (!ok) {
        print_error("%s (%s): expected %s%s\nstdout:\n%s\nstderr:\n%s\n", shared_env, cap,
                    refusal ? "a refusal saying " : "a working device", refusal ? refusal : "", r.out, r.err);
        fail();
    }
}

static void shared_write(const void *bytes, size_t len, mode_t mode)
{
    int fd = open(shared_file, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, bytes, len), (ssize_t)len);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static void test_shared_file_made_for_this_user(void **state)
{
    (void)state;
    shared_fresh("made");
    shared_probe("CUCACHE_SIM_CAPACITY=1G", NULL);
    struct stat st;
    assert_int_equal(lstat(shared_file, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_uid, geteuid());
    assert_int_equal(st.st_size, sizeof(sim_shared_region_t));
    shared_probe("CUCACHE_SIM_CAPACITY=1G", NULL); /* a second process joins it */
    unlink(shared_file);
}

/* Every process of a key simulates the same devices. */
static void test_shared_identity_must_agree(void **state)
{
    (void)state;
    shared_fresh("identity");
    shared_probe("CUCACHE_SIM_CAPACITY=1G", NULL);
    shared_probe("CUCACHE_SIM_CAPACITY=2G", "must agree");
    shared_probe("CUCACHE_SIM_DEVICES=2", "must agree");
    unlink(shared_file);
}

static void test_shared_bad_file_refused(void **state)
{
    (void)state;
    static sim_shared_region_t region;
    /* a file of the right size that is not a table */
    shared_fresh("magic");
    memset(&region, 0x5a, sizeof region);
    shared_write(&region, sizeof region, 0600);
    shared_probe("CUCACHE_SIM_CAPACITY=1G", "its first bytes are not");
    /* a truncated one */
    shared_write(&region, 100, 0600);
    shared_probe("CUCACHE_SIM_CAPACITY=1G", "100 bytes, expected");
    shared_write(&region, 0, 0600);
    shared_probe("CUCACHE_SIM_CAPACITY=1G", "0 bytes, expected");
    /* a real table of another version, and one with a corrupt header */
    unlink(shared_file);
    shared_probe("CUCACHE_SIM_CAPACITY=1G", NULL);
    int fd = open(shared_file, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &region, sizeof region, 0), (ssize_t)sizeof region);
    region.version = 99;
    assert_int_equal(pwrite(fd, &region, sizeof region, 0), (ssize_t)sizeof region);
    shared_probe("CUCACHE_SIM_CAPACITY=1G", "version 99");
    region.version = SIM_SHARED_VERSION;
    region.id.ndev = 1000;
    assert_int_equal(pwrite(fd, &region, sizeof region, 0), (ssize_t)sizeof region);
    shared_probe("CUCACHE_SIM_CAPACITY=1G", "header is corrupt");
    close(fd);
    /* permissions others could use, a symbolic link, not a file */
    unlink(shared_file);
    shared_probe("CUCACHE_SIM_CAPACITY=1G", NULL);
    assert_int_equal(chmod(shared_file, 0644), 0);
    shared_probe("CUCACHE_SIM_CAPACITY=1G", "mode 0644");
    unlink(shared_file);
    assert_int_equal(symlink("/tmp/elsewhere", shared_file), 0);
    shared_probe("CUCACHE_SIM_CAPACITY=1G", "symbolic link");
    unlink(shared_file);
    assert_int_equal(mkfifo(shared_file, 0600), 0);
    shared_probe("CUCACHE_SIM_CAPACITY=1G", "not a regular file");
    unlink(shared_file);
}

/* Another user's file (a table that user made, or a trap): refused.  Needs
 * root to give a file away; skipped otherwise. */
static void test_shared_foreign_owner_refused(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    shared_fresh("foreign");
    shared_probe("CUCACHE_SIM_CAPACITY=1G", NULL);
    assert_int_equal(chown(shared_file, 65534, 65534), 0);
    shared_probe("CUCACHE_SIM_CAPACITY=1G", "owned by uid 65534");
    unlink(shared_file);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_one_device_of_80g),
        cmocka_unit_test(test_coherent),
        cmocka_unit_test(test_device_count),
        cmocka_unit_test(test_capacity_units),
        cmocka_unit_test(test_bad_values_fail_init_naming_the_variable),
        cmocka_unit_test(test_hostile_values_shown_safely),
        cmocka_unit_test(test_good_values),
        cmocka_unit_test(test_race_fatal_aborts_on_planted_race),
        cmocka_unit_test(test_race_detector_counts_and_can_be_off),
        cmocka_unit_test(test_shared_file_made_for_this_user),
        cmocka_unit_test(test_shared_identity_must_agree),
        cmocka_unit_test(test_shared_bad_file_refused),
        cmocka_unit_test(test_shared_foreign_owner_refused),
    };
    return cmocka_run_group_tests_name("sim.config", tests, NULL, NULL);
}
