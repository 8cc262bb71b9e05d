/*
 * Proves what cucache tells the user on the simulated device:
 * the OOM report's numbers are what this program holds (device capacity,
 * bytes allocated and reserved, the request), a second failure gets one line
 * with the count, the first failure writes a snapshot (CUCACHE_SNAPSHOT,
 * set by meson to a directory of the build tree) whose content names this
 * program's live allocations; cucache_memory_summary and cucache_snapshot
 * (a symbolic link at the target refused, the link's file untouched);
 * SIGUSR1 writes a snapshot; CUCACHE_REPORT=exit prints the summary and its
 * verdict at exit; a bad value of any variable the library reads stops
 * the program before main with a line naming the variable, and a hostile
 * one (tests/hostile.h: escape sequences, control bytes, invalid UTF-8,
 * 10 KB) is shown bounded and escaped.
 *
 * Seen to fail: without LD_PRELOAD every cucache check fails; with the
 * report's allocated figure taken from reserved (a scratch diag.c), the
 * report test fails on the "allocated by cucache" figure.
 */
#include "itest.h"

#include "../../core/conf.h" /* conf_show: how a refusal shows a value */
#include "../hostile.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char err_text[1 << 16];

/* st_fmt_size's format (PyTorch's format_size), for the expected figures. */
static void fmt_size(char *buf, size_t len, uint64_t b)
{
    if (b <= 1024)
        snprintf(buf, len, "%llu bytes", (unsigned long long)b);
    else if (b <= ((uint64_t)1 << 20))
        snprintf(buf, len, "%.2f KiB", (double)b / 1024.0);
    else if (b <= ((uint64_t)1 << 30))
        snprintf(buf, len, "%.2f MiB", (double)b / 1048576.0);
    else
        snprintf(buf, len, "%.2f GiB", (double)b / 1073741824.0);
}

static void expect_in(const char *text, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void expect_in(const char *text, const char *what, const char *fmt, ...)
{
    char needle[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(needle, sizeof needle, fmt, ap);
    va_end(ap);
    if (!strstr(text, needle))
        fail_msg("%s: \"%s\" not found in:\n%s", what, needle, text);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t k;
    while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

/* CUCACHE_SNAPSHOT expanded for this process's first snapshot (%p, %n). */
static void first_snapshot_path(char *out, size_t len, bool json)
{
    const char *dir = getenv("ITEST_SNAPDIR");
    if (!dir)
        fail_msg("ITEST_SNAPDIR is not set (meson sets it)");
    snprintf(out, len, "%s/oom-%d-0.%s", dir, (int)getpid(), json ? "json" : "pickle");
}

/* ---- the OOM report --------------------------------------------------- */

static void test_oom_report_numbers(void **state)
{
    (void)state;
    itest_require_cucache();
    itest_empty_cache(0);
    /* what this program holds: three 100 MiB blocks and five of 2 MiB live;
     * one 100 MiB block cached (the retry ladder gives it back), and five
     * 2 MiB blocks free inside the 20 MiB segment the live ones share
     * (inactive split: reserved but unallocated, which stays) */
    void *big[4], *small[10];
    for (int i = 0; i < 4; i++)
        SIM_OK(cudaMalloc(&big[i], 100 * MIB));
    for (int i = 0; i < 10; i++)
        SIM_OK(cudaMalloc(&small[i], 2 * MIB));
    SIM_OK(cudaFree(big[3]));
    for (int i = 0; i < 10; i += 2)
        SIM_OK(cudaFree(small[i]));
    SIM_OK(cudaDeviceSynchronize());
    int64_t allocated = itest_stat(0, "allocated_bytes.all.current");
    assert_int_equal(allocated, 300 * MIB + 10 * MIB);

    itest_stderr_begin();
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, 3 * GIB);
    itest_stderr_end(err_text, sizeof err_text);
    (void)cudaGetLastError();
    assert_int_equal(rc, cudaErrorMemoryAllocation);
    /* the report describes the state after the failure (the retry ladder
     * gave the cached block back first) */
    int64_t reserved = itest_stat(0, "reserved_bytes.all.current");
    assert_int_equal(itest_stat(0, "allocated_bytes.all.current"), allocated);
    if (itest_expandable()) /* the free pages went back to the device */
        assert_true(reserved >= allocated && reserved < allocated + (int64_t)(10 * MIB));
    else
        assert_true(reserved >= allocated + (int64_t)(10 * MIB)); /* the inactive split stays reserved */

    char want[64];
    expect_in(err_text, "the PyTorch sentence", "CUDA out of memory. Tried to allocate ");
    fmt_size(want, sizeof want, 3 * GIB);
    expect_in(err_text, "the request", "%s", want);
    fmt_size(want, sizeof want, ITEST_CAPACITY);
    expect_in(err_text, "the capacity", "GPU 0 has a total capacity of %s", want);
    fmt_size(want, sizeof want, (uint64_t)allocated);
    expect_in(err_text, "allocated", "%s is allocated by cucache", want);
    fmt_size(want, sizeof want, (uint64_t)(reserved - allocated));
    expect_in(err_text, "reserved but unallocated", "%s is reserved by cucache but unallocated", want);
    if (itest_count_lines(err_text, "cucache: ") < 8)
        fail_msg("the full report should be a block of lines, got:\n%s", err_text);
    if (itest_count_lines(err_text, "") != itest_count_lines(err_text, "cucache: "))
        fail_msg("every line of the report starts with \"cucache: \":\n%s", err_text);
    expect_in(err_text, "the snapshot line", "snapshot (out of memory) written to ");

    /* the snapshot names what is live */
    char path[512];
    first_snapshot_path(path, sizeof path, true);
    size_t len = 0;
    char *json = read_file(path, &len);
    if (!json)
        fail_msg("no JSON snapshot at %s: %s", path, strerror(errno));
    assert_true(len > 0 && json[0] == '{');
    char addr[32];
    snprintf(addr, sizeof addr, "%llu", (unsigned long long)(uintptr_t)big[0]);
    expect_in(json, "a live block in the snapshot", "%s", addr);
    expect_in(json, "the OOM event", "\"oom\"");
    free(json);
    first_snapshot_path(path, sizeof path, false);
    char *pk = read_file(path, &len);
    if (!pk)
        fail_msg("no pickle snapshot at %s: %s", path, strerror(errno));
    assert_true(len > 3 && (unsigned char)pk[0] == 0x80 && pk[1] == 2 && pk[len - 1] == '.');
    free(pk);

    /* a second failure: one line, with the count */
    itest_stderr_begin();
    rc = cudaMalloc(&p, 3 * GIB);
    itest_stderr_end(err_text, sizeof err_text);
    (void)cudaGetLastError();
    assert_int_equal(rc, cudaErrorMemoryAllocation);
    assert_int_equal(itest_count_lines(err_text, "cucache: "), 1);
    expect_in(err_text, "the count", "2");

    for (int i = 0; i < 3; i++)
        SIM_OK(cudaFree(big[i]));
    for (int i = 1; i < 10; i += 2)
        SIM_OK(cudaFree(small[i]));
}

/* ---- the API ---------------------------------------------------------- */

typedef long (*summary_fn)(int, char *, size_t);
typedef int (*snapshot_fn)(const char *);

static void *api(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    if (!f)
        fail_msg("%s is not in this process (is cucache preloaded?)", name);
    return f;
}

static void test_api_summary(void **state)
{
    (void)state;
    summary_fn summary = (summary_fn)(uintptr_t)api("cucache_memory_summary");
    void *p = NULL;
    SIM_OK(cudaMalloc(&p, 3 * MIB));
    itest_defer_free(p);
    long n = summary(0, NULL, 0);
    assert_true(n > 1000);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(summary(0, buf, (size_t)n + 1), n);
    assert_int_equal(strlen(buf), (size_t)n);
    expect_in(buf, "the title", "memory summary, device ID 0");
    expect_in(buf, "a row", "Allocated memory");
    expect_in(buf, "the verdict", "verdict:");
    /* a short buffer: cut, terminated, the whole length returned */
    char small[16];
    assert_int_equal(summary(0, small, sizeof small), n);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_memory_equal(small, buf, sizeof small - 1);
    free(buf);
    assert_int_equal(summary(7, small, sizeof small), -1);
}

static void test_api_snapshot_and_symlink(void **state)
{
    (void)state;
    snapshot_fn snap = (snapshot_fn)(uintptr_t)api("cucache_snapshot");
    const char *dir = getenv("ITEST_SNAPDIR");
    assert_non_null(dir);
    char path[512], json[512];
    snprintf(path, sizeof path, "%s/api-%d.pickle", dir, (int)getpid());
    snprintf(json, sizeof json, "%s/api-%d.json", dir, (int)getpid());
    unlink(path);
    unlink(json);
    assert_int_equal(snap(path), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 100);
    assert_int_equal(stat(json, &st), 0);

    /* a symbolic link at the target: refused, its file untouched */
    char victim[512];
    snprintf(victim, sizeof victim, "%s/victim-%d", dir, (int)getpid());
    FILE *f = fopen(victim, "w");
    assert_non_null(f);
    fputs("precious\n", f);
    fclose(f);
    unlink(path);
    assert_int_equal(symlink(victim, path), 0);
    itest_stderr_begin();
    int rc = snap(path);
    itest_stderr_end(err_text, sizeof err_text);
    assert_int_equal(rc, -1);
    expect_in(err_text, "the refusal", "not written");
    expect_in(err_text, "the path", "%s", path);
    char *text = read_file(victim, NULL);
    assert_string_equal(text, "precious\n");
    free(text);
    unlink(path);
    unlink(victim);
}

static void test_sigusr1_snapshot(void **state)
{
    (void)state;
    itest_require_cucache();
    const char *dir = getenv("ITEST_SNAPDIR");
    char path[512];
    /* the OOM test's snapshot was number 0, the API's does not count (it
     * names its own file): SIGUSR1's is the template's next number */
    int found = 0;
    itest_stderr_begin();
    raise(SIGUSR1);
    for (int i = 0; i < 1000 && !found; i++) { /* the snapshot thread writes it */
        for (int seq = 1; seq < 4 && !found; seq++) {
            snprintf(path, sizeof path, "%s/oom-%d-%d.pickle", dir, (int)getpid(), seq);
            found = access(path, F_OK) == 0;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    itest_stderr_end(err_text, sizeof err_text);
    if (!found)
        fail_msg("SIGUSR1 wrote no snapshot in %s; stderr:\n%s", dir, err_text);
}

/* ---- the exit summary and bad settings ---------------------------------- */

static void test_exit_summary(void **state)
{
    (void)state;
    const char *child = itest_helper("ITEST_CHILD");
    itest_run_t *r = malloc(sizeof *r);
    const char *const report[] = {"CUCACHE_REPORT=exit", NULL};
    const char *const alloc_argv[] = {child, "alloc", NULL};
    itest_spawn(child, alloc_argv, report, NULL, 30000, r);
    itest_expect_exit(r, 0);
    expect_in(r->err, "the table", "cucache: |");
    expect_in(r->err, "the title", "memory summary, device ID 0");
    expect_in(r->err, "the verdict", "verdict: everything freed");

    const char *const live_argv[] = {child, "live-exit", NULL};
    itest_spawn(child, live_argv, report, NULL, 30000, r);
    itest_expect_exit(r, 0);
    expect_in(r->err, "the verdict", "still live");
    free(r);
}

static void test_bad_settings_stop_the_program(void **state)
{
    (void)state;
    const char *child = itest_helper("ITEST_CHILD");
    itest_run_t *r = malloc(sizeof *r);
    const char *const argv[] = {child, "alloc", NULL};
    static const struct {
        const char *set, *says;
    } cases[] = {
        {"CUCACHE_REPORT=sometimes", "CUCACHE_REPORT: 'sometimes'"},
        {"CUCACHE_REPORT=exit\x1b[2J", "CUCACHE_REPORT: 'exit\\x1b[2J' is not one of exit, off"},
        {"CUCACHE_SNAPSHOT_ON=oom,\x07", "CUCACHE_SNAPSHOT_ON: '\\x07' is not one of"},
        {"CUCACHE_SNAPSHOT_ON=crash", "CUCACHE_SNAPSHOT_ON: 'crash'"},
        {"CUCACHE_SNAPSHOT=/tmp/x-%q.pickle", "CUCACHE_SNAPSHOT: file name template '/tmp/x-%q.pickle': unknown %q"},
        {"CUCACHE_LOG=/tmp/x-%q.log", "CUCACHE_LOG: file name template '/tmp/x-%q.log': unknown %q"},
        {"CUCACHE_TRACE=/tmp/x-%q.trace", "CUCACHE_TRACE: file name template '/tmp/x-%q.trace': unknown %q"},
        {"CUCACHE_STACKS=foreign", "CUCACHE_STACKS: 'foreign'"},
        {"CUCACHE_CONF=bogus_key:1", "CUCACHE_CONF: "},
        {"CUCACHE_SNAPSHOT_EVENTS=lots", "CUCACHE_SNAPSHOT_EVENTS: 'lots'"},
        {"CUCACHE_HISTORY=-5", "CUCACHE_HISTORY: '-5' is not a number of allocator calls"},
        {"CUCACHE_HISTORY=1\x01", "CUCACHE_HISTORY: '1\\x01'"},
        {"CUCACHE_WHATIF_MS=1e3", "CUCACHE_WHATIF_MS: '1e3' is not a number of milliseconds"},
        {"CUCACHE_WHATIF_MS=9999999", "from 0 to 600000"},
        {"CUCACHE_LEAK_EXITCODE=0", "CUCACHE_LEAK_EXITCODE: '0' is not an exit status from 1 to 255"},
        {"CUCACHE_LEAK_EXITCODE=256", "CUCACHE_LEAK_EXITCODE: '256' is not an exit status from 1 to 255"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *const set[] = {cases[i].set, NULL};
        itest_spawn(child, argv, set, NULL, 30000, r);
        itest_expect_exit(r, 1);
        expect_in(r->err, cases[i].set, "%s", cases[i].says);
        if (strstr(r->out, "itest_child: main"))
            fail_msg("%s: main ran", cases[i].set);
    }
    /* CUCACHE_SNAPSHOT_ON without CUCACHE_SNAPSHOT */
    const char *const unset[] = {"CUCACHE_SNAPSHOT", NULL};
    const char *const set[] = {"CUCACHE_SNAPSHOT_ON=exit", NULL};
    itest_spawn(child, argv, set, unset, 30000, r);
    itest_expect_exit(r, 1);
    expect_in(r->err, "needs", "needs CUCACHE_SNAPSHOT");
    free(r);
}

/* Every variable the library reads, set to a hostile value: refused before
 * main, named, and shown bounded and escaped (conf_show).  Seen to fail
 * with env.c's refusal of CUCACHE_SNAPSHOT_ON printing the value raw, and
 * with CUCACHE_SNAPSHOT's template error not naming the variable. */
static void test_hostile_settings_shown_safely(void **state)
{
    (void)state;
    const char *child = itest_helper("ITEST_CHILD");
    itest_run_t *r = malloc(sizeof *r);
    const char *const argv[] = {child, "alloc", NULL};
    static const char *const vars[] = {
        "CUCACHE_CONF",   "CUCACHE_REPORT",          "CUCACHE_SNAPSHOT", "CUCACHE_SNAPSHOT_ON",
        "CUCACHE_LOG",    "CUCACHE_SNAPSHOT_EVENTS", "CUCACHE_HISTORY",  "CUCACHE_LEAK_EXITCODE",
        "CUCACHE_STACKS", "CUCACHE_WHATIF_MS",       "CUCACHE_TRACE",
    };
    static char setting[HOSTILE_LEN + 64];
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *const set[] = {hostile_setting(setting, sizeof setting, vars[i]), NULL};
        /* the suite's snapshot settings are left out: each case refuses one variable */
        const char *const unset[] = {"CUCACHE_SNAPSHOT", "CUCACHE_SNAPSHOT_ON", NULL};
        itest_spawn(child, argv, set, unset, 30000, r);
        itest_expect_exit(r, 1);
        char why[128];
        if (!hostile_shown_safely(r->err, vars[i], why, sizeof why))
            fail_msg("%s=<hostile>: %s\nstderr:\n%.2000s", vars[i], why, r->err);
        if (strstr(r->out, "itest_child: main"))
            fail_msg("%s=<hostile>: main ran", vars[i]);
    }
    free(r);
}

/* ---- the leak check at exit ---------------------------------------------- */

/* Live cucache memory at exit, listed by the bytes asked for with the first
 * allocation of each size, and the exit status CUCACHE_LEAK_EXITCODE asks
 * for; a run that frees everything keeps its own status and lists nothing. */
static void test_leak_exit_code(void **state)
{
    (void)state;
    const char *child = itest_helper("ITEST_CHILD");
    itest_run_t *r = malloc(sizeof *r);
    const char *const code[] = {"CUCACHE_LEAK_EXITCODE=7", NULL};
    const char *const leak_argv[] = {child, "leak", "20", "1", NULL};
    itest_spawn(child, leak_argv, code, NULL, 30000, r);
    itest_expect_exit(r, 7);
    expect_in(r->err, "the title",
              "cucache: leak check: GPU 0: 61.00 MiB in 21 allocations still live at exit, "
              "by requested size:");
    expect_in(r->err, "the leaked buffers",
              "cucache:         20 x   3.00 MiB (3145728 bytes) = 60.00 MiB, the first "
              "allocation 2 of 41");
    expect_in(r->err, "the status",
              "cucache: exit status 7 (CUCACHE_LEAK_EXITCODE): 21 allocations still live at exit");
    const char *const alloc_argv[] = {child, "alloc", NULL};
    itest_spawn(child, alloc_argv, code, NULL, 30000, r);
    itest_expect_exit(r, 0);
    if (strstr(r->err, "leak check"))
        fail_msg("a leak check for a run that freed everything:\n%s", r->err);
    free(r);
}

/* The leak report says when each group's first allocation was made: the
 * 7 MiB buffer allocated 1.2 s after the 5 MiB one shows t >= 1.2 s, the
 * 5 MiB one well under it.  Seen to fail with the stamp taken at the
 * device's start (both t=0.00). */
static double leak_time(const char *err, const char *row)
{
    const char *at = strstr(err, row);
    if (!at)
        fail_msg("no leak row '%s':\n%s", row, err);
    double t = -1;
    const char *tt = strstr(at, "(t=");
    if (!tt || sscanf(tt, "(t=%lf s)", &t) != 1)
        fail_msg("no time on the leak row '%s':\n%s", row, err);
    return t;
}

static void test_leak_report_times(void **state)
{
    (void)state;
    const char *child = itest_helper("ITEST_CHILD");
    itest_run_t *r = malloc(sizeof *r);
    const char *const report[] = {"CUCACHE_REPORT=exit", NULL};
    const char *const argv[] = {child, "leak-late", NULL};
    itest_spawn(child, argv, report, NULL, 30000, r);
    itest_expect_exit(r, 0);
    double early = leak_time(r->err, "1 x   5.00 MiB (5242880 bytes) = 5.00 MiB, the first allocation 1 of 2");
    double late = leak_time(r->err, "1 x   7.00 MiB (7340032 bytes) = 7.00 MiB, the first allocation 2 of 2");
    if (!(early >= 0 && early < 1.0 && late >= 1.15 && late < 10.0 && late - early >= 1.15))
        fail_msg("leak times %.2f s and %.2f s, expected the second 1.2 s after the first:\n%s", early, late, r->err);
    free(r);
}

/* CUCACHE_LOG: every line goes to the file (appended, %p expanded), none to
 * stderr; a symbolic link is refused before the program starts. */
static void test_log_file(void **state)
{
    (void)state;
    const char *child = itest_helper("ITEST_CHILD");
    const char *dir = getenv("ITEST_SNAPDIR");
    assert_non_null(dir);
    itest_run_t *r = malloc(sizeof *r);
    char tmpl[512], path[512], link_path[512], var[600], code[] = "CUCACHE_LEAK_EXITCODE=7";
    snprintf(tmpl, sizeof tmpl, "%s/log-%d-%%p.txt", dir, (int)getpid());
    snprintf(var, sizeof var, "CUCACHE_LOG=%s", tmpl);
    const char *const set[] = {var, code, NULL};
    const char *const argv[] = {child, "leak", "5", "1", NULL};
    itest_spawn(child, argv, set, NULL, 30000, r);
    itest_expect_exit(r, 7);
    if (strstr(r->err, "cucache:"))
        fail_msg("cucache wrote to stderr with CUCACHE_LOG set:\n%s", r->err);
    /* the child's pid is not known here: the one file named after this test's pid */
    char prefix[512];
    snprintf(prefix, sizeof prefix, "log-%d-", (int)getpid());
    bool found = false;
    DIR *dh = opendir(dir);
    assert_non_null(dh);
    for (struct dirent *e; !found && (e = readdir(dh));)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            found = true;
        }
    closedir(dh);
    assert_true(found);
    size_t len;
    char *text = read_file(path, &len);
    assert_non_null(text);
    expect_in(text, "the log", "cucache: leak check: GPU 0: 16.00 MiB in 6 allocations still live at exit");
    expect_in(text, "the log", "cucache: exit status 7 (CUCACHE_LEAK_EXITCODE)");
    free(text);
    unlink(path);

    snprintf(link_path, sizeof link_path, "%s/log-link-%d.txt", dir, (int)getpid());
    unlink(link_path);
    assert_int_equal(symlink("/nonexistent/elsewhere", link_path), 0);
    snprintf(var, sizeof var, "CUCACHE_LOG=%s", link_path);
    const char *const bad[] = {var, NULL};
    const char *const alloc_argv[] = {child, "alloc", NULL};
    itest_spawn(child, alloc_argv, bad, NULL, 30000, r);
    itest_expect_exit(r, 1);
    char shown[CONF_SHOW_BUF];
    expect_in(r->err, "the refusal",
              "CUCACHE_LOG: cannot open '%s': Too many levels of symbolic links (a symbolic link "
              "is refused)",
              conf_show(shown, link_path, strlen(link_path)));
    unlink(link_path);
    free(r);
}

/* ---- the hint, proven and applied --------------------------------------- */

/* The leak loop (itest_child leak): the OOM report names settings only
 * where replaying the job's history serves the failed request; each one
 * named, applied to the same program, serves it. */
/* Every CUCACHE_CONF the report in `err` names, applied to the same run:
 * each must serve the request (exit 0).  Returns how many were named, and
 * in *with how many of them contain `key` (NULL: not counted). */
static size_t apply_named_hints(const char *child, const char *const *argv, const char *err, const char *key,
                                size_t *with)
{
    itest_run_t *again = malloc(sizeof *again);
    size_t named = 0;
    for (const char *p = err; (p = strstr(p, "hint:   CUCACHE_CONF="));) {
        p += strlen("hint:   ");
        size_t n = strcspn(p, " \n");
        char var[256];
        snprintf(var, sizeof var, "%.*s", (int)n, p);
        const char *const set[] = {var, NULL};
        itest_spawn(child, argv, set, NULL, 60000, again);
        if (again->status != 0)
            fail_msg("the hint %s, applied, does not serve the request:\n%s%s", var, again->out, again->err);
        named++;
        if (key && with)
            *with += strstr(var, key) != NULL;
    }
    free(again);
    return named;
}

static void test_oom_hint_holds_when_applied(void **state)
{
    (void)state;
    const char *child = itest_helper("ITEST_CHILD");
    itest_run_t *r = malloc(sizeof *r), *again = malloc(sizeof *again);
    const char *const argv[] = {child, "leak", "220", "300", NULL};
    itest_spawn(child, argv, NULL, NULL, 60000, r);
    /* under expandable_segments:true it is served or not depending on when
     * the simulated device completes its fences (the what-if names only
     * what serves it either way) */
    if (itest_expandable() && !r->hung && WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0) {
        free(r);
        free(again);
        return;
    }
    itest_expect_exit(r, 3);
    expect_in(r->err, "the replay", "hint: replaying all 661 allocator calls of GPU 0");
    expect_in(r->err, "the setting", "hint:   CUCACHE_CONF=expandable_segments:true (peak reserved");
    assert_true(apply_named_hints(child, argv, r->err, NULL, NULL) >= 1);
    /* the rejected rule of thumb stays unnamed, and applied it indeed fails */
    if (strstr(r->err, "max_split_size_mb"))
        fail_msg("max_split_size_mb named, though it does not help here:\n%s", r->err);
    const char *const split[] = {"CUCACHE_CONF=max_split_size_mb:64", NULL};
    itest_spawn(child, argv, split, NULL, 60000, again);
    itest_expect_exit(again, 3);
    free(r);
    free(again);
}

/* Where max_split_size_mb does help (itest_child split: 30 MiB requests
 * carve a cached 600 MiB block under the defaults, which then cannot be
 * released for 700 MiB): the hint names it, and every setting it names,
 * applied, serves the request. */
static void test_oom_hint_split(void **state)
{
    (void)state;
    if (itest_expandable())
        skip(); /* the case is about plain segments */
    const char *child = itest_helper("ITEST_CHILD");
    itest_run_t *r = malloc(sizeof *r);
    const char *const argv[] = {child, "split", NULL};
    itest_spawn(child, argv, NULL, NULL, 60000, r);
    itest_expect_exit(r, 3);
    expect_in(r->err, "the replay", "hint: replaying all 18 allocator calls of GPU 0");
    size_t split = 0;
    assert_true(apply_named_hints(child, argv, r->err, "max_split_size_mb", &split) >= 1);
    if (!split)
        fail_msg("max_split_size_mb helps here but is not named:\n%s", r->err);
    free(r);
}

/* More live than the device: no setting, and the numbers that say so. */
static void test_oom_hint_nothing_fits(void **state)
{
    (void)state;
    const char *child = itest_helper("ITEST_CHILD");
    itest_run_t *r = malloc(sizeof *r);
    const char *const argv[] = {child, "leak", "250", "400", NULL};
    itest_spawn(child, argv, NULL, NULL, 60000, r);
    itest_expect_exit(r, 3);
    expect_in(r->err, "the verdict",
              "hint: no setting can serve it: live allocations (750.00 MiB) and this request "
              "(400.00 MiB) need 1.12 GiB, more than the 1024.00 MiB cucache could have");
    if (strstr(r->err, "hint:   CUCACHE_CONF="))
        fail_msg("a setting named where none can help:\n%s", r->err);
    /* without history nothing is claimed, and the report says why */
    const char *const off[] = {"CUCACHE_HISTORY=0", NULL};
    itest_spawn(child, argv, off, NULL, 60000, r);
    itest_expect_exit(r, 3);
    expect_in(r->err, "no history", "is not in the history (CUCACHE_HISTORY=0");
    free(r);
}

int main(void)
{
    const char *dir = getenv("ITEST_SNAPDIR");
    if (dir && mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "test_interpose_diag: mkdir %s: %s\n", dir, strerror(errno));
        return 1;
    }
    const struct CMUnitTest tests[] = {
        ITEST(test_oom_report_numbers),
        ITEST(test_api_summary),
        ITEST(test_api_snapshot_and_symlink),
        ITEST(test_sigusr1_snapshot),
        ITEST(test_exit_summary),
        ITEST(test_bad_settings_stop_the_program),
        ITEST(test_hostile_settings_shown_safely),
        ITEST(test_oom_hint_holds_when_applied),
        ITEST(test_oom_hint_nothing_fits),
        ITEST(test_oom_hint_split),
        ITEST(test_leak_exit_code),
        ITEST(test_leak_report_times),
        ITEST(test_log_file),
    };
    return ITEST_RUN("interpose_diag", tests, itest_group_setup);
}
