/* The reuse-safety suites' fixture, policy and verdicts (see reusetest.h). */
#include "reusetest.h"
#include "rules.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct reuse_fixture rf;

/* ---- policy and mode -------------------------------------------------- */

/* The rule CUCACHE_CONF selects, read by cucache's own parser. */
static const core_rule_t *reuse_rule(void)
{
    char err[256];
    conf_t c;
    conf_defaults(&c);
    if (conf_parse(&c, getenv("CUCACHE_CONF"), err, sizeof err) < 0) {
        fprintf(stderr, "reuse: %s\n", err);
        abort();
    }
    return conf_rule(&c);
}

reuse_policy_t reuse_policy(void)
{
    /* what the tests expect follows from the rule's row */
    const core_rule_t *r = reuse_rule();
    if (!r->safe)
        return REUSE_STREAM;
    if (r->plain == RULE_PLAIN_AFTER_SYNC)
        return REUSE_SYNC;
    return r->hands_out ? REUSE_ORDERED : REUSE_FENCED;
}

const char *reuse_policy_name(void)
{
    return reuse_rule()->name;
}

reuse_expect_t reuse_expect(void)
{
    const char *e = getenv("REUSE_EXPECT");
    if (e && strcmp(e, "race") == 0)
        return REUSE_EXPECT_RACE;
    if (e && strcmp(e, "abort") == 0)
        return REUSE_EXPECT_ABORT;
    return REUSE_EXPECT_SAFE;
}

bool reuse_bare(void)
{
    const char *b = getenv("REUSE_BARE");
    return b && strcmp(b, "1") == 0;
}

static const char *expect_name(void)
{
    static const char *const names[] = {"safe", "race", "abort"};
    return names[reuse_expect()];
}

/* ---- cucache's public API --------------------------------------------- */

typedef int (*cucache_stat_fn)(int device, const char *key, int64_t *value);

static cucache_stat_fn stat_fn(void)
{
    cucache_stat_fn f;
    *(void **)&f = dlsym(RTLD_DEFAULT, "cucache_stat");
    return f;
}

int64_t reuse_stat(const char *key)
{
    cucache_stat_fn f = stat_fn();
    if (!f && reuse_bare())
        return -1;
    if (!f)
        fail_msg("%s", "cucache_stat is not there: libcucache.so is not preloaded");
    int64_t v = 0;
    if (f(0, key, &v) != 0)
        fail_msg("cucache_stat(0, \"%s\") failed (unknown key, or no allocator state on device 0)", key);
    return v;
}

/* ---- fixture ---------------------------------------------------------- */

int reuse_group_setup(void **state)
{
    (void)state;
    if (reuse_bare() && stat_fn()) {
        fprintf(stderr, "reuse: REUSE_BARE=1 but cucache is in the process\n");
        return -1;
    }
    if (!reuse_bare() && (!stat_fn() || !dlsym(RTLD_DEFAULT, "cucache_version"))) {
        fprintf(stderr, "reuse: cucache's API (cucache_stat, cucache_version) is absent: "
                        "run with LD_PRELOAD=libcucache.so\n");
        return -1;
    }
    const char *race = getenv("CUCACHE_SIM_RACE");
    const char *fatal = getenv("CUCACHE_SIM_RACE_FATAL");
    bool is_fatal = fatal && strcmp(fatal, "1") == 0;
    if (race && strcmp(race, "1") != 0) {
        fprintf(stderr, "reuse: these tests need the race detector on (CUCACHE_SIM_RACE=1)\n");
        return -1;
    }
    if (reuse_expect() == REUSE_EXPECT_RACE && is_fatal) {
        fprintf(stderr, "reuse: REUSE_EXPECT=race needs CUCACHE_SIM_RACE_FATAL=0\n");
        return -1;
    }
    if (reuse_expect() == REUSE_EXPECT_ABORT && !is_fatal) {
        fprintf(stderr, "reuse: REUSE_EXPECT=abort needs CUCACHE_SIM_RACE_FATAL=1\n");
        return -1;
    }
    if (simtest_group_setup(NULL) != 0)
        return -1;
    if (cudaMallocHost((void **)&rf.dst, REUSE_HOST_BYTES) != cudaSuccess ||
        cudaMallocHost((void **)&rf.dst2, REUSE_HOST_BYTES) != cudaSuccess)
        return -1;
    rf.pageable = malloc(REUSE_HOST_BYTES);
    if (!rf.pageable)
        return -1;
    if (cudaStreamCreateWithFlags(&rf.nb, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&rf.nb2, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&rf.nb3, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&rf.bl, cudaStreamDefault) != cudaSuccess)
        return -1;
    return 0;
}

int reuse_group_teardown(void **state)
{
    (void)state;
    cudaStreamDestroy(rf.nb);
    cudaStreamDestroy(rf.nb2);
    cudaStreamDestroy(rf.nb3);
    cudaStreamDestroy(rf.bl);
    cudaFreeHost(rf.dst);
    cudaFreeHost(rf.dst2);
    free(rf.pageable);
    return 0;
}

/* ---- gates ------------------------------------------------------------ */

enum { HELD_MAX = 32 };

static struct {
    simtest_gate_t *gate;
    bool armed; /* an opener will open it */
} held[HELD_MAX];
static int nheld;

simtest_gate_t *reuse_gate(void)
{
    if (nheld == HELD_MAX)
        fail_msg("%s", "reuse: too many gates in one test");
    simtest_gate_t *g = simtest_gate_new();
    held[nheld].gate = g;
    held[nheld].armed = false;
    nheld++;
    return g;
}

/* Streams the test holds behind a gate: reuse_drain_unheld leaves them. */
enum { HOLD_MAX = 8 };
static cudaStream_t holds[HOLD_MAX];
static int nholds;
static bool legacy_held; /* a held stream is blocking: the legacy stream waits for it */

void reuse_hold(cudaStream_t s)
{
    if (nholds == HOLD_MAX)
        fail_msg("%s", "reuse: too many held streams in one test");
    holds[nholds++] = s;
    unsigned flags = 0;
    if (s == LEGACY || s == cudaStreamLegacy || s == cudaStreamPerThread ||
        (cudaStreamGetFlags(s, &flags) == cudaSuccess && !(flags & cudaStreamNonBlocking)))
        legacy_held = true;
    (void)cudaGetLastError();
}

static bool is_held(cudaStream_t s)
{
    for (int i = 0; i < nholds; i++)
        if (holds[i] == s)
            return true;
    return false;
}

void reuse_drain_unheld(void)
{
    cudaStream_t all[] = {rf.nb, rf.nb2, rf.nb3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!is_held(all[i]))
            SIM_OK(simtest_stream_wait_idle(all[i]));
    if (!legacy_held)
        SIM_OK(simtest_stream_wait_idle(LEGACY));
}

simtest_gate_t *reuse_gate_on(cudaStream_t s)
{
    simtest_gate_t *g = reuse_gate();
    reuse_hold(s);
    simtest_gate_block(g, s);
    return g;
}

void reuse_open_all(void)
{
    for (int i = 0; i < nheld; i++)
        simtest_gate_open(held[i].gate);
}

static uint32_t arm(unsigned ms)
{
    uint32_t armed = 0;
    for (int i = 0; i < nheld; i++) {
        if (held[i].armed || simtest_gate_passed(held[i].gate))
            continue;
        simtest_gate_open_after(held[i].gate, ms);
        held[i].armed = true;
        armed |= 1u << i;
    }
    return armed;
}

void reuse_open_all_after(unsigned ms)
{
    (void)arm(ms);
}

/* reuse:sync: every gate still closed opens REUSE_SYNC_OPEN_MS from now, so
 * that a free that synchronises the device returns.  Returns a mask of the
 * gates it armed. */
uint32_t reuse_arm_openers(void)
{
    return reuse_policy() == REUSE_SYNC ? arm(REUSE_SYNC_OPEN_MS) : 0;
}

void reuse_expect_passed(uint32_t armed, const char *call)
{
    for (int i = 0; i < nheld; i++)
        if ((armed & (1u << i)) && !simtest_gate_passed(held[i].gate))
            fail_msg("reuse:sync: %s returned while the work behind gate %d had not run: "
                     "it did not synchronise the device",
                     call, i);
}

void reuse_free(void *p)
{
    reuse_untrack(p);
    uint32_t armed = reuse_arm_openers();
    SIM_OK(cudaFree(p));
    reuse_expect_passed(armed, "cudaFree");
}

void reuse_free_async(void *p, cudaStream_t s)
{
    reuse_untrack(p);
    (void)reuse_arm_openers();
    SIM_OK(cudaFreeAsync(p, s));
}

/* ---- filling the cache ------------------------------------------------ */

enum { PAD_MAX = 64, TRACK_MAX = 256 };
static void *tracked[TRACK_MAX]; /* device memory the test still holds */
static int ntracked;

void reuse_track(void *p)
{
    if (ntracked == TRACK_MAX)
        fail_msg("%s", "reuse: too many allocations tracked in one test");
    tracked[ntracked++] = p;
}

void reuse_untrack(void *p)
{
    for (int i = 0; i < ntracked; i++)
        if (tracked[i] == p) {
            tracked[i] = tracked[--ntracked];
            return;
        }
}

static int64_t stat_or_zero(const char *key)
{
    cucache_stat_fn f = stat_fn();
    int64_t v = 0;
    if (!f || f(0, key, &v) != 0)
        return 0;
    return v;
}

void reuse_fill(cudaStream_t s, bool async)
{
    if (reuse_bare())
        return;
    /* Free bytes per pool that this key cannot take (another stream's
     * blocks): learnt when a pad had to ask the device. */
    int64_t unreachable_small = 0, unreachable_large = 0;
    for (int round = 0; round < PAD_MAX; round++) {
        int64_t small = stat_or_zero("reserved_bytes.small_pool.current") -
                        stat_or_zero("active_bytes.small_pool.current") - unreachable_small;
        int64_t large = stat_or_zero("reserved_bytes.large_pool.current") -
                        stat_or_zero("active_bytes.large_pool.current") - unreachable_large;
        if (small <= 0 && large <= 0)
            return;
        size_t n = small > 0 ? (size_t)(small < (1 << 20) ? small : (1 << 20)) : (size_t)large;
        int64_t device_allocs = reuse_stat("num_device_alloc");
        void *p = NULL;
        SIM_OK(async ? cudaMallocAsync(&p, n, s) : cudaMalloc(&p, n));
        reuse_track(p);
        if (reuse_stat("num_device_alloc") != device_allocs) {
            /* nothing cached fitted: what was free is another key's */
            if (small > 0)
                unreachable_small += small;
            else
                unreachable_large += large;
        }
    }
    fail_msg("reuse: could not fill the cache (%s) with %d pads (small pool %" PRId64 " bytes free, large pool %" PRId64
             ")",
             async ? "cudaMallocAsync" : "cudaMalloc", PAD_MAX,
             stat_or_zero("reserved_bytes.small_pool.current") - stat_or_zero("active_bytes.small_pool.current"),
             stat_or_zero("reserved_bytes.large_pool.current") - stat_or_zero("active_bytes.large_pool.current"));
}

int64_t reuse_hand_outs(void)
{
    return stat_or_zero("num_fence_hand_outs");
}

void reuse_expect_handed_out(int64_t before, const char *call)
{
    if (reuse_policy() == REUSE_ORDERED && !reuse_bare() && reuse_hand_outs() == before)
        fail_msg("reuse:ordered: %s handed nothing out behind a fence: the test did not exercise it", call);
}

void reuse_realloc_twice(const void *a, size_t an, size_t n, void (*write)(void *p, size_t n, cudaStream_t s),
                         cudaStream_t writer, void **b, void **c)
{
    int64_t fences = stat_or_zero("num_fences"), hand_outs = reuse_hand_outs();
    SIM_OK(cudaMalloc(b, n));
    reuse_track(*b);
    reuse_expect_disjoint(*b, n, a, an);
    if (reuse_policy() == REUSE_FENCED && !reuse_bare() && stat_or_zero("num_fences") == fences)
        fail_msg("%s", "reuse:fenced: cudaMalloc(B) recorded no fence: the test did not exercise the fence");
    reuse_expect_handed_out(hand_outs, "cudaMalloc(B)");
    write(*b, n, writer);
    if (reuse_policy() == REUSE_ORDERED) {
        /* the writer may wait on the device for the held readers: C is
         * allocated and written while they still are */
        SIM_OK(cudaMalloc(c, n));
        reuse_track(*c);
        write(*c, n, writer);
        return;
    }
    SIM_OK(simtest_stream_wait_idle(writer));
    /* every fence event on a stream the test does not hold has completed */
    reuse_drain_unheld();
    reuse_fill(NULL, false);
    SIM_OK(cudaMalloc(c, n));
    reuse_track(*c);
    reuse_expect_disjoint_if_fenced(*c, n, a, an);
    write(*c, n, writer);
    SIM_OK(simtest_stream_wait_idle(writer));
}

/* ---- per-test setup --------------------------------------------------- */

int reuse_setup(void **state)
{
    (void)state;
    nheld = 0;
    nholds = 0;
    legacy_held = false;
    ntracked = 0;
    if (cudaDeviceSynchronize() != cudaSuccess)
        return -1;
    /* Every test starts from an empty cache, so that what a policy hands out
     * next does not depend on the tests before it. */
    int (*empty)(int);
    *(void **)&empty = dlsym(RTLD_DEFAULT, "cucache_empty_cache");
    if (!empty && !reuse_bare())
        return -1;
    if (empty)
        (void)empty(0); /* -1 before the first allocation */
    cucacheSimRaceReset();
    return cucacheSimRaceCount() == 0 ? 0 : -1;
}

int reuse_teardown(void **state)
{
    bool hung = false;
    for (int i = 0; i < nheld; i++)
        hung |= simtest_gate_timed_out(held[i].gate);
    nheld = 0;
    simtest_teardown(state);
    /* what the test did not free (pads, or a failure midway), so that the
     * next test starts from an empty cache */
    for (int i = 0; i < ntracked; i++)
        (void)cudaFree(tracked[i]);
    ntracked = 0;
    if (hung) {
        /* a call waited for a closed gate: the policy blocked where it must not */
        fprintf(stderr,
                "reuse: a gate opened by itself after %d ms: a call waited for work that only the test "
                "could release\n",
                SIMTEST_GATE_TIMEOUT_MS);
        return -1;
    }
    return 0;
}

int reuse_run(const char *name, const struct CMUnitTest *tests, size_t n)
{
    const char *only = getenv("REUSE_ONLY");
    if (only && *only)
        cmocka_set_test_filter(only);
    printf("reuse: %s under reuse:%s, expecting: %s%s%s\n", name, reuse_policy_name(), expect_name(),
           only && *only ? ", only " : "", only && *only ? only : "");
    fflush(stdout);
    int failed = _cmocka_run_group_tests(name, tests, n, reuse_group_setup, reuse_group_teardown);
    if (reuse_expect() == REUSE_EXPECT_ABORT) {
        /* should_fail: only a death by signal (the detector's abort) counts */
        fprintf(stderr,
                "reuse: expected the race detector to abort the process under reuse:%s; it did not "
                "(%d failure(s))\n",
                reuse_policy_name(), failed);
        return 0;
    }
    return failed;
}

/* ---- buffers and checks ----------------------------------------------- */

void *reuse_alloc_filled(size_t n, unsigned seed)
{
    void *p = NULL;
    assert_true(n <= REUSE_HOST_BYTES);
    SIM_OK(cudaMalloc(&p, n));
    reuse_track(p);
    simtest_fill(rf.pageable, n, seed);
    SIM_OK(cudaMemcpy(p, rf.pageable, n, cudaMemcpyHostToDevice));
    return p;
}

bool reuse_overlap(const void *a, size_t an, const void *b, size_t bn)
{
    uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    return a0 < b0 + bn && b0 < a0 + an;
}

void reuse_expect_disjoint_if_fenced(const void *fresh, size_t fn, const void *freed, size_t an)
{
    if (reuse_policy() == REUSE_FENCED && reuse_overlap(fresh, fn, freed, an))
        fail_msg("reuse:fenced handed out [%p, +%zu) while work still reads the freed block [%p, +%zu)", fresh, fn,
                 freed, an);
}

void reuse_expect_disjoint(const void *fresh, size_t fn, const void *freed, size_t an)
{
    bool overlap = reuse_overlap(fresh, fn, freed, an);
    reuse_expect_disjoint_if_fenced(fresh, fn, freed, an);
    if (reuse_policy() == REUSE_STREAM && reuse_expect() == REUSE_EXPECT_RACE && !overlap)
        fail_msg("reuse:stream did not hand the freed block [%p, +%zu) out again at once (got %p): "
                 "the hazard was not exercised",
                 freed, an, fresh);
}

/* The range [lo, hi) of the last race report. */
static bool last_race_range(uintptr_t *lo, uintptr_t *hi, char *text, size_t len)
{
    cucacheSimLastRace(text, len);
    const char *p = strstr(text, "[0x");
    unsigned long a, b;
    if (!p || sscanf(p, "[0x%lx, 0x%lx)", &a, &b) != 2)
        return false;
    *lo = a;
    *hi = b;
    return true;
}

/* Whether the last race report names a byte of one of the blocks. */
static bool report_names(const void *const *freed, const size_t *n, int count, char *text, size_t len)
{
    uintptr_t lo = 0, hi = 0;
    if (!last_race_range(&lo, &hi, text, len))
        return false;
    for (int i = 0; i < count; i++)
        if (reuse_overlap((void *)lo, hi - lo, freed[i], n[i]))
            return true;
    return false;
}

void reuse_verdict_hazard_n(const void *const *freed, const size_t *n, int count, bool data_ok, const char *what)
{
    SIM_OK(cudaDeviceSynchronize());
    unsigned long races = cucacheSimRaceCount();
    char text[1024];
    text[0] = '\0';
    if (reuse_expect() == REUSE_EXPECT_RACE) {
        if (races == 0)
            fail_msg("reuse:%s: %s: expected the detector to catch the reuse, it reported no race", reuse_policy_name(),
                     what);
        if (!report_names(freed, n, count, text, sizeof text))
            fail_msg("reuse:%s: %s: the race report does not name the freed block [%p, +%zu): %s", reuse_policy_name(),
                     what, freed[0], n[0], text);
        if (data_ok)
            fail_msg("reuse:%s: %s: the reader still saw the freed block's data: it was not overwritten under it",
                     reuse_policy_name(), what);
        print_message("reuse:%s: %s: caught (%lu race(s), the reader saw overwritten data)\n", reuse_policy_name(),
                      what, races);
        return;
    }
    if (races) {
        cucacheSimLastRace(text, sizeof text);
        fail_msg("reuse:%s: %s: %lu race(s); last: %s", reuse_policy_name(), what, races, text);
    }
    if (!data_ok)
        fail_msg("reuse:%s: %s: the reader saw data written after the free", reuse_policy_name(), what);
}

void reuse_verdict_hazard(const void *freed, size_t n, bool data_ok, const char *what)
{
    reuse_verdict_hazard_n(&freed, &n, 1, data_ok, what);
}

void reuse_verdict_hazard_maybe(const void *freed, size_t n, bool data_ok, const char *what)
{
    if (reuse_expect() != REUSE_EXPECT_RACE) {
        reuse_verdict_hazard(freed, n, data_ok, what);
        return;
    }
    SIM_OK(cudaDeviceSynchronize());
    unsigned long races = cucacheSimRaceCount();
    char text[1024];
    text[0] = '\0';
    if (races == 0 && data_ok) {
        print_message("reuse:%s: %s: not exposed (no race, the reader saw the right data)\n", reuse_policy_name(),
                      what);
        return;
    }
    if (races == 0)
        fail_msg("reuse:%s: %s: the reader saw overwritten data and the detector saw no race", reuse_policy_name(),
                 what);
    if (!report_names(&freed, &n, 1, text, sizeof text))
        fail_msg("reuse:%s: %s: the race report does not name the freed block [%p, +%zu): %s", reuse_policy_name(),
                 what, freed, n, text);
    print_message("reuse:%s: %s: caught (%lu race(s)%s)\n", reuse_policy_name(), what, races,
                  data_ok ? "" : ", the reader saw overwritten data");
}

void reuse_verdict_safe(bool data_ok, const char *what)
{
    SIM_OK(cudaDeviceSynchronize());
    unsigned long races = cucacheSimRaceCount();
    if (races) {
        char text[1024];
        cucacheSimLastRace(text, sizeof text);
        fail_msg("reuse:%s: %s: %lu race(s) in a program that orders its reuse; last: %s", reuse_policy_name(), what,
                 races, text);
    }
    if (!data_ok)
        fail_msg("reuse:%s: %s: wrong data", reuse_policy_name(), what);
}

bool reuse_data_is(const void *buf, size_t n, unsigned seed, const char *what)
{
    long at = simtest_check(buf, n, seed, 0);
    if (at >= 0)
        print_message("reuse: %s: first wrong byte at offset %ld of %zu\n", what, at, n);
    return at < 0;
}

bool reuse_bytes_are(const void *buf, size_t n, unsigned char value, const char *what)
{
    long at = simtest_check_byte(buf, n, value);
    if (at >= 0)
        print_message("reuse: %s: byte %ld of %zu is 0x%02x, expected 0x%02x\n", what, at, n,
                      ((const unsigned char *)buf)[at], value);
    return at < 0;
}

/* ---- the simulated kernel --------------------------------------------- */

enum { KREAD_POOL = 1024 };

struct kread {
    void *dst;
    const void *src;
    size_t n;
};

static struct kread kreads[KREAD_POOL];
static atomic_int kreads_used;

static void kread_fn(void *arg)
{
    struct kread *k = arg;
    memcpy(k->dst, k->src, k->n);
}

void reuse_kernel_read(cudaStream_t s, void *dst, const void *src, size_t n)
{
    int i = atomic_fetch_add(&kreads_used, 1);
    if (i >= KREAD_POOL)
        fail_msg("%s", "reuse: kernel pool exhausted");
    struct kread *k = &kreads[i];
    *k = (struct kread){dst, src, n};
    struct cucache_sim_access acc = {src, n, 0};
    CU_OK(cucacheSimLaunch((CUstream)s, kread_fn, k, &acc, 1));
}
