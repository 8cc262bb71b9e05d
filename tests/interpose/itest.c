/* Helpers shared by the interposer's acceptance tests: cucache's API through
 * dlsym, the simulated driver's counters, device data patterns, stderr
 * capture and child processes. */
#include "itest.h"
#include "rules.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- cucache's public API -------------------------------------------- */

typedef int (*stat_fn)(int device, const char *key, int64_t *value);
typedef int (*empty_fn)(int device);

static void *cucache_sym(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}

bool itest_have_cucache(void)
{
    return cucache_sym("cucache_stat") != NULL && cucache_sym("cucache_empty_cache") != NULL;
}

bool itest_expandable(void)
{
    const char *c = getenv("CUCACHE_CONF");
    return itest_have_cucache() && c && strstr(c, "expandable_segments:true");
}

bool itest_hands_out(void)
{
    const char *c = getenv("CUCACHE_CONF"), *coherent = getenv("CUCACHE_SIM_COHERENT");
    if (!itest_have_cucache() || (coherent && strcmp(coherent, "1") == 0))
        return false;
    char err[256];
    conf_t conf;
    conf_defaults(&conf);
    if (conf_parse(&conf, c, err, sizeof err) < 0)
        fail_msg("%s", err);
    return conf_rule(&conf)->hands_out;
}

void itest_require_cucache_at(const char *file, int line)
{
    if (itest_have_cucache())
        return;
    print_error("cucache's API (cucache_stat) is not in this process: the test must run with "
                "LD_PRELOAD=libcucache.so (LD_PRELOAD=%s)\n",
                getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "(unset)");
    _fail(file, line);
}

int itest_stat_raw(int device, const char *key, int64_t *value)
{
    itest_require_cucache();
    stat_fn f = (stat_fn)(uintptr_t)cucache_sym("cucache_stat");
    return f(device, key, value);
}

int64_t itest_stat_at(int device, const char *key, const char *file, int line)
{
    itest_require_cucache_at(file, line);
    int64_t v = 0;
    stat_fn f = (stat_fn)(uintptr_t)cucache_sym("cucache_stat");
    if (f(device, key, &v) != 0) {
        print_error("cucache_stat(%d, \"%s\") answered -1 (unknown key, or no allocator state)\n", device, key);
        _fail(file, line);
    }
    return v;
}

int itest_empty_cache(int device)
{
    itest_require_cucache();
    empty_fn f = (empty_fn)(uintptr_t)cucache_sym("cucache_empty_cache");
    return f(device);
}

/* ---- the simulated driver's counters --------------------------------- */

static unsigned long sim_counter(const char *name)
{
    unsigned long (*f)(void) = (unsigned long (*)(void))(uintptr_t)simtest_sim_sym(name);
    if (!f) {
        print_error("%s is not in the loaded libcuda.so.1: not the simulated driver\n", name);
        fail();
    }
    return f();
}

unsigned long itest_dev_allocs(void)
{
    return sim_counter("cucacheSimDeviceAllocs");
}

unsigned long itest_dev_frees(void)
{
    return sim_counter("cucacheSimDeviceFrees");
}

unsigned long itest_races(void)
{
    return sim_counter("cucacheSimRaceCount");
}

/* ---- where a function lives ------------------------------------------ */

bool itest_fn_in(const void *fn, const char *lib_substr)
{
    Dl_info info;
    memset(&info, 0, sizeof info);
    if (!fn || dladdr(fn, &info) == 0 || !info.dli_fname) {
        print_error("dladdr(%p) finds no object\n", fn);
        return false;
    }
    if (strstr(info.dli_fname, lib_substr))
        return true;
    print_error("%p lies in %s (symbol %s), not in %s\n", fn, info.dli_fname, info.dli_sname ? info.dli_sname : "?",
                lib_substr);
    return false;
}

/* ---- device data ----------------------------------------------------- */

void itest_put(void *d, size_t n, unsigned seed)
{
    unsigned char *h = malloc(n ? n : 1);
    assert_non_null(h);
    simtest_fill(h, n, seed);
    SIM_OK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    free(h);
}

void itest_expect_at(const void *d, size_t n, unsigned seed, const char *file, int line)
{
    unsigned char *h = malloc(n ? n : 1);
    assert_non_null(h);
    memset(h, 0, n);
    cudaError_t rc = cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);
    long bad = rc == cudaSuccess ? simtest_check(h, n, seed, 0) : 0;
    free(h);
    if (rc != cudaSuccess) {
        print_error("cudaMemcpy(host, %p, %zu, DeviceToHost) returned %d (%s)\n", d, n, (int)rc, cudaGetErrorName(rc));
        _fail(file, line);
    }
    if (bad >= 0) {
        print_error("device block %p (%zu bytes, seed %u): byte %ld differs from the pattern written\n", d, n, seed,
                    bad);
        _fail(file, line);
    }
}

bool itest_overlap(const void *a, size_t na, const void *b, size_t nb)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + nb && y < x + na;
}

/* ---- stderr of this process ------------------------------------------ */

static int stderr_saved = -1;
static int stderr_file = -1;

static int temp_fd(void)
{
    char name[] = "/tmp/itest-XXXXXX";
    int fd = mkstemp(name);
    assert_true(fd >= 0);
    unlink(name);
    return fd;
}

static void read_all(int fd, char *buf, size_t len)
{
    lseek(fd, 0, SEEK_SET);
    size_t used = 0;
    ssize_t n;
    while (used + 1 < len && (n = read(fd, buf + used, len - 1 - used)) > 0)
        used += (size_t)n;
    buf[used] = '\0';
}

void itest_stderr_begin(void)
{
    assert_int_equal(stderr_saved, -1);
    fflush(stderr);
    stderr_file = temp_fd();
    stderr_saved = dup(2);
    assert_true(stderr_saved >= 0);
    assert_int_equal(dup2(stderr_file, 2), 2);
}

void itest_stderr_end(char *buf, size_t len)
{
    assert_true(stderr_saved >= 0);
    fflush(stderr);
    dup2(stderr_saved, 2);
    close(stderr_saved);
    stderr_saved = -1;
    read_all(stderr_file, buf, len);
    close(stderr_file);
    stderr_file = -1;
}

int itest_count_lines(const char *text, const char *prefix)
{
    int n = 0;
    size_t pl = strlen(prefix);
    for (const char *p = text; *p;) {
        const char *end = strchr(p, '\n');
        size_t ll = end ? (size_t)(end - p) : strlen(p);
        if (ll > 0 && strncmp(p, prefix, pl) == 0)
            n++;
        p += ll + (end ? 1 : 0);
    }
    return n;
}

/* ---- child processes ------------------------------------------------- */

static bool named_in(const char *entry, const char *const *names)
{
    for (size_t i = 0; names && names[i]; i++) {
        const char *eq = strchr(names[i], '=');
        size_t n = eq ? (size_t)(eq - names[i]) : strlen(names[i]);
        if (strncmp(entry, names[i], n) == 0 && entry[n] == '=')
            return true;
    }
    return false;
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void itest_spawn(const char *path, const char *const *argv, const char *const *set, const char *const *unset,
                 unsigned timeout_ms, itest_run_t *r)
{
    size_t n = 0, ns = 0;
    while (environ[n])
        n++;
    while (set && set[ns])
        ns++;
    const char **env = calloc(n + ns + 1, sizeof *env);
    assert_non_null(env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!named_in(environ[i], unset) && !named_in(environ[i], set))
            env[k++] = environ[i];
    for (size_t i = 0; i < ns; i++)
        env[k++] = set[i];
    env[k] = NULL;

    int out = temp_fd(), err = temp_fd();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    posix_spawn_file_actions_adddup2(&fa, err, 2);
    pid_t pid;
    int rc = posix_spawn(&pid, path, &fa, NULL, (char *const *)argv, (char *const *)env);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    if (rc != 0) {
        print_error("posix_spawn(%s): %s\n", path, strerror(rc));
        fail();
    }
    r->hung = false;
    long deadline = now_ms() + (long)timeout_ms;
    for (;;) {
        pid_t w = waitpid(pid, &r->status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            print_error("waitpid: %s\n", strerror(errno));
            fail();
        }
        if (now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &r->status, 0);
            r->hung = true;
            r->status = -1;
            break;
        }
        simtest_sleep_ms(5);
    }
    read_all(out, r->out, sizeof r->out);
    read_all(err, r->err, sizeof r->err);
    close(out);
    close(err);
}

const char *itest_helper(const char *var)
{
    const char *v = getenv(var);
    if (!v || !*v) {
        print_error("%s is not set (meson passes the helper's path)\n", var);
        fail();
    }
    return v;
}

void itest_expect_exit_at(const itest_run_t *r, int code, const char *file, int line)
{
    if (!r->hung && WIFEXITED(r->status) && WEXITSTATUS(r->status) == code)
        return;
    if (r->hung)
        print_error("the child hung and was killed\n");
    else if (WIFSIGNALED(r->status))
        print_error("the child died of signal %d (%s), expected exit %d\n", WTERMSIG(r->status),
                    strsignal(WTERMSIG(r->status)), code);
    else
        print_error("the child exited with %d, expected %d\n", WEXITSTATUS(r->status), code);
    print_error("child stdout:\n%s\nchild stderr:\n%s\n", r->out, r->err);
    _fail(file, line);
}

/* ---- fixtures -------------------------------------------------------- */

enum { DEFER_MAX = 256 };
static void *deferred_mem[DEFER_MAX];
static cudaStream_t deferred_streams[DEFER_MAX];
static int deferred_mem_n, deferred_streams_n;

void *itest_defer_free(void *p)
{
    assert_true(deferred_mem_n < DEFER_MAX);
    deferred_mem[deferred_mem_n++] = p;
    return p;
}

cudaStream_t itest_defer_stream(cudaStream_t s)
{
    assert_true(deferred_streams_n < DEFER_MAX);
    deferred_streams[deferred_streams_n++] = s;
    return s;
}

/* Teardown of what a failed test left behind; a passing test has freed and
 * destroyed everything itself, and then these calls fail harmlessly. */
static void run_deferred(void)
{
    for (int i = 0; i < deferred_streams_n; i++) {
        cudaStream_t s = deferred_streams[i];
        enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(s, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
            cudaGraph_t g = NULL;
            if (cudaStreamEndCapture(s, &g) == cudaSuccess && g)
                cudaGraphDestroy(g);
        }
    }
    deferred_streams_n = 0;
    (void)cudaGetLastError();
    (void)cudaDeviceSynchronize();
    for (int i = 0; i < deferred_mem_n; i++)
        (void)cudaFree(deferred_mem[i]);
    deferred_mem_n = 0;
    (void)cudaGetLastError();
}

static unsigned long races_before;

int itest_setup(void **state)
{
    (void)state;
    unsigned long (*f)(void) = (unsigned long (*)(void))(uintptr_t)simtest_sim_sym("cucacheSimRaceCount");
    races_before = f ? f() : 0;
    return 0;
}

int itest_teardown(void **state)
{
    simtest_teardown(state);
    run_deferred();
    unsigned long (*f)(void) = (unsigned long (*)(void))(uintptr_t)simtest_sim_sym("cucacheSimRaceCount");
    size_t (*last)(char *, size_t) = (size_t(*)(char *, size_t))(uintptr_t)simtest_sim_sym("cucacheSimLastRace");
    unsigned long now = f ? f() : 0;
    if (now != races_before) {
        char text[1024] = "";
        if (last)
            last(text, sizeof text);
        fprintf(stderr, "itest: the race detector reported %lu race(s) during this test; the last:\n%s\n",
                now - races_before, text);
        return -1;
    }
    return 0;
}

int itest_group_setup(void **state)
{
    if (simtest_group_setup(state) != 0)
        return -1;
    void *p = NULL;
    cudaError_t rc = cudaFree(NULL);
    if (rc == cudaSuccess)
        rc = cudaMalloc(&p, 4096);
    if (rc == cudaSuccess)
        rc = cudaFree(p);
    if (rc == cudaSuccess)
        rc = cudaDeviceSynchronize();
    if (rc != cudaSuccess) {
        fprintf(stderr, "itest: the first CUDA calls returned %d (%s)\n", (int)rc, cudaGetErrorName(rc));
        return -1;
    }
    return 0;
}

int itest_group_setup_devices(void **state, int n)
{
    if (itest_group_setup(state) != 0)
        return -1;
    int have = 0;
    if (cudaGetDeviceCount(&have) != cudaSuccess || have != n) {
        fprintf(stderr, "itest: expected %d devices (CUCACHE_SIM_DEVICES=%d), got %d\n", n, n, have);
        return -1;
    }
    return 0;
}

int itest_run_group(const char *name, const struct CMUnitTest *tests, size_t count, int (*group_setup)(void **state))
{
    const char *filter = getenv("ITEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return _cmocka_run_group_tests(name, tests, count, group_setup, NULL);
}
