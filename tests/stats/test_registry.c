/*
 * The GPU registry (stats/registry.c): its file refused with one reason for
 * each way it can be wrong, slots claimed, published, read and left,
 * processes that died or whose pid was reused cleared, and asks answered,
 * or not, within their bound, by real processes.
 *
 * Seen to fail: with the mode check gone, the 0644 file is used; with the
 * version check gone, the newer file is used; with reap() not comparing
 * start times, the reused pid's slot stays listed; with st_reg_wait_answer
 * not checking that the owner still runs, the killed owner's ask waits out
 * its whole deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "registry.h"

#define UUID "GPU-00000000-1111-2222-3333-444444444444"
#define TOTAL ((uint64_t)80 << 30)

static char path[160];

static int setup(void **state)
{
    (void)state;
    snprintf(path, sizeof path, "/dev/shm/cucache-test-registry-%d", (int)getpid());
    unlink(path);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

static void open_ok(st_reg_t *r, bool create)
{
    char why[320] = "";
    int rc = st_reg_open(path, UUID, TOTAL, create, r, why, sizeof why);
    if (rc != 0)
        fail_msg("st_reg_open: %d: %s", rc, why);
}

static void test_create_and_reopen(void **state)
{
    (void)state;
    st_reg_t r, again;
    char why[320] = "";
    assert_int_equal(st_reg_open(path, UUID, TOTAL, false, &r, why, sizeof why), -1); /* absent */
    open_ok(&r, true);
    assert_memory_equal(r.f->magic, ST_REG_MAGIC, 8);
    assert_int_equal(r.f->version, ST_REG_VERSION);
    assert_int_equal(r.f->total, TOTAL);
    assert_string_equal(r.f->uuid, UUID);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal((size_t)st.st_size, ST_REG_BYTES);
    open_ok(&again, false);
    st_reg_close(&again);
    st_reg_close(&r);
}

/* ------------------------------------------------------------------------
 * Refusals: one row per way the file can be wrong
 * ---------------------------------------------------------------------- */

static void set_version(st_reg_file_t *f, uint32_t v)
{
    f->version = v;
}

typedef struct refusal_s {
    const char *what;
    void (*spoil)(void); /* makes the good file bad */
    const char *reason;  /* in the line */
} refusal_t;

static st_reg_file_t *map_file(void)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    void *m = mmap(NULL, ST_REG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(m != MAP_FAILED);
    return m;
}

static void spoil_magic(void)
{
    st_reg_file_t *f = map_file();
    memcpy(f->magic, "NOTCUCAC", 8);
    munmap(f, ST_REG_BYTES);
}
static void spoil_newer(void)
{
    st_reg_file_t *f = map_file();
    set_version(f, ST_REG_VERSION + 1);
    munmap(f, ST_REG_BYTES);
}
static void spoil_older(void)
{
    st_reg_file_t *f = map_file();
    set_version(f, ST_REG_VERSION - 1);
    munmap(f, ST_REG_BYTES);
}
static void spoil_truncated(void)
{
    assert_int_equal(truncate(path, (off_t)(ST_REG_BYTES / 2)), 0);
}
static void spoil_header_only(void)
{
    assert_int_equal(truncate(path, 16), 0);
}
static void spoil_mode(void)
{
    assert_int_equal(chmod(path, 0644), 0);
}
static void spoil_uuid(void)
{
    st_reg_file_t *f = map_file();
    f->uuid[5] = 'f';
    munmap(f, ST_REG_BYTES);
}
static void spoil_symlink(void)
{
    char target[200];
    snprintf(target, sizeof target, "%s.target", path);
    assert_int_equal(rename(path, target), 0);
    assert_int_equal(symlink(target, path), 0);
}
static void spoil_owner(void)
{
    assert_int_equal(chown(path, 65534, 65534), 0);
}

static const refusal_t refusals[] = {
    {"bad magic", spoil_magic, "not a cucache GPU registry (bad magic)"},
    {"a newer version", spoil_newer, "written by a newer cucache (registry version 3; this one reads version 2)"},
    {"an older version", spoil_older, "written by an older cucache (registry version 1; this one reads version 2)"},
    {"truncated", spoil_truncated, "truncated ("},
    {"header cut", spoil_header_only, "truncated: shorter than a registry's header"},
    {"mode 0644", spoil_mode, "mode 644, not 0600: others could read or write it, refused"},
    {"another GPU", spoil_uuid, "corrupt header (another GPU's UUID)"},
    {"a symbolic link", spoil_symlink, "a symbolic link, refused"},
    {"another owner", spoil_owner, "owned by another user (uid 65534), refused"},
};

/* A good file spoilt one way, then refused with that way's reason. */
static void check_refusal(const refusal_t *c)
{
    st_reg_t r;
    open_ok(&r, true);
    st_reg_close(&r);
    c->spoil();
    char why[320] = "";
    int rc = st_reg_open(path, UUID, TOTAL, true, &r, why, sizeof why);
    if (rc != -2 || !strstr(why, c->reason) || strncmp(why, path, strlen(path)) != 0)
        fail_msg("%s: rc %d, \"%s\" (wanted -2 and \"%s\")", c->what, rc, why, c->reason);
    char target[200];
    snprintf(target, sizeof target, "%s.target", path);
    unlink(target);
    unlink(path);
}

/* Every refusal but another owner's (test_refusal_another_owner). */
static void test_refusals(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++)
        if (refusals[i].spoil != spoil_owner)
            check_refusal(&refusals[i]);
}

/* A file another user owns.  Needs root to give the file away; skipped
 * otherwise. */
static void test_refusal_another_owner(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++)
        if (refusals[i].spoil == spoil_owner)
            check_refusal(&refusals[i]);
}

/* Another user can neither read the figures nor ask: the file is the
 * owner's alone (as root: a child that became nobody cannot open it).
 * Needs root to become another user; skipped otherwise. */
static void test_other_user_shut_out(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    st_reg_t r;
    open_ok(&r, true);
    int slot = st_reg_claim(&r);
    assert_true(slot >= 0);
    pid_t child = fork();
    if (child == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(2);
        st_reg_t other;
        char why[320] = "";
        int rc = st_reg_open(path, UUID, TOTAL, false, &other, why, sizeof why);
        int fd = open(path, O_RDONLY);
        _exit(rc == -2 && strstr(why, "Permission denied") && fd < 0 ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    st_reg_leave(&r, slot);
    st_reg_close(&r);
}

/* ------------------------------------------------------------------------
 * Slots
 * ---------------------------------------------------------------------- */

static size_t list(st_reg_t *r, st_reg_view_t *v)
{
    return st_reg_list(r, v, ST_REG_SLOTS);
}

static void test_claim_publish_leave(void **state)
{
    (void)state;
    static st_reg_view_t v[ST_REG_SLOTS];
    st_reg_t r;
    open_ok(&r, true);
    int slot = st_reg_claim(&r);
    assert_true(slot >= 0);
    st_reg_figs_t f = {.reserved = 3u << 30, .allocated = 1u << 30, .idle = 1u << 29, .hits = 7, .allocs = 9};
    st_reg_publish(&r, slot, &f);
    assert_int_equal(list(&r, v), 1);
    assert_int_equal(v[0].pid, getpid());
    assert_false(v[0].stale);
    assert_int_equal(v[0].figs.reserved, 3u << 30);
    assert_int_equal(v[0].figs.idle, 1u << 29);
    assert_int_equal(v[0].figs.hits, 7);
    assert_true(v[0].figs.updated_ns > 0);
    /* a second process in it: the file stays when this one leaves */
    int other = st_reg_claim(&r);
    assert_true(other >= 0);
    st_reg_leave(&r, slot);
    assert_int_equal(list(&r, v), 1);
    assert_int_equal(access(path, F_OK), 0);
    /* the last one out removes it */
    st_reg_leave(&r, other);
    assert_int_equal(list(&r, v), 0);
    assert_int_not_equal(access(path, F_OK), 0);
    st_reg_close(&r);
}

/* A process that claimed a slot and died, one whose pid now names another
 * process (another start time), one killed while publishing: all cleared
 * at the next look; a live writer caught mid-way is listed as stale. */
static void test_dead_reused_and_torn(void **state)
{
    (void)state;
    static st_reg_view_t v[ST_REG_SLOTS];
    st_reg_t r;
    open_ok(&r, true);
    pid_t child = fork();
    if (child == 0) {
        st_reg_t c;
        char why[320];
        if (st_reg_open(path, UUID, TOTAL, false, &c, why, sizeof why) != 0 || st_reg_claim(&c) < 0)
            _exit(1);
        _exit(0); /* without leaving */
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_int_equal(WEXITSTATUS(status), 0);
    int dead = -1;
    for (unsigned i = 0; i < ST_REG_SLOTS; i++)
        if (atomic_load(&r.f->slot[i].pid) == child)
            dead = (int)i;
    assert_true(dead >= 0);

    /* our own pid with another start time: a reused pid */
    int mine = st_reg_claim(&r);
    assert_true(mine >= 0);
    r.f->slot[mine].start += 1;

    /* a live process (this one) caught mid-publication */
    int torn = st_reg_claim(&r);
    assert_true(torn >= 0);
    atomic_store(&r.f->slot[torn].seq, 1);

    assert_int_equal(list(&r, v), 1);
    assert_int_equal(v[0].slot, torn);
    assert_true(v[0].stale);
    assert_int_equal(atomic_load(&r.f->slot[dead].pid), 0);
    assert_int_equal(atomic_load(&r.f->slot[mine].pid), 0);
    st_reg_leave(&r, torn);
    st_reg_close(&r);
}

/* ------------------------------------------------------------------------
 * Asks
 * ---------------------------------------------------------------------- */

typedef struct owner_s {
    st_reg_t *r;
    int slot;
    atomic_bool stop;
    atomic_ulong served;
} owner_t;

/* Gives 1 MiB per answer. */
static void *owner_main(void *arg)
{
    owner_t *o = arg;
    uint32_t served = atomic_load(&o->r->f->slot[o->slot].answered);
    while (!atomic_load(&o->stop)) {
        uint32_t a = st_reg_wait_ask(o->r, o->slot, served, 5000000);
        if (a != served) {
            st_reg_take_want(o->r, o->slot);
            st_reg_answer(o->r, o->slot, a, 1u << 20);
            served = a;
            atomic_fetch_add(&o->served, 1);
        }
    }
    return NULL;
}

/* st_reg_sweep: a file whose only process died without leaving, and one
 * no process ever claimed, are removed; one with a live process and one
 * refused (mode 0644) stay. */
static void test_sweep(void **state)
{
    (void)state;
    enum { DEAD, EMPTY, LIVE, REFUSED, NFILES };
    char uuid[NFILES][48], at[NFILES][160], why[320];
    for (int i = 0; i < NFILES; i++) {
        snprintf(uuid[i], sizeof uuid[i], "GPU-5eeb%04x-0000-0000-0000-%012d", i, (int)getpid());
        st_reg_path(uuid[i], at[i], sizeof at[i]);
        unlink(at[i]);
    }
    pid_t child = fork();
    if (child == 0) {
        st_reg_t c;
        if (st_reg_open(at[DEAD], uuid[DEAD], TOTAL, true, &c, why, sizeof why) != 0 || st_reg_claim(&c) < 0)
            _exit(1);
        _exit(0); /* without leaving */
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_int_equal(WEXITSTATUS(status), 0);
    st_reg_t r[NFILES];
    for (int i = EMPTY; i < NFILES; i++)
        assert_int_equal(st_reg_open(at[i], uuid[i], TOTAL, true, &r[i], why, sizeof why), 0);
    int slot = st_reg_claim(&r[LIVE]);
    assert_true(slot >= 0);
    assert_int_equal(chmod(at[REFUSED], 0644), 0);

    assert_true(st_reg_sweep() >= 2);
    struct stat st;
    assert_int_equal(stat(at[DEAD], &st), -1);
    assert_int_equal(stat(at[EMPTY], &st), -1);
    assert_int_equal(stat(at[LIVE], &st), 0);
    assert_int_equal(stat(at[REFUSED], &st), 0);
    assert_true(st_reg_current(&r[LIVE]));

    st_reg_leave(&r[LIVE], slot); /* the last to leave removes it */
    assert_int_equal(stat(at[LIVE], &st), -1);
    for (int i = EMPTY; i < NFILES; i++)
        st_reg_close(&r[i]);
    unlink(at[REFUSED]);
}

static void test_ask_answered(void **state)
{
    (void)state;
    st_reg_t r;
    open_ok(&r, true);
    owner_t o = {.r = &r, .slot = st_reg_claim(&r)};
    assert_true(o.slot >= 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, owner_main, &o), 0);
    int32_t me = (int32_t)getpid();
    uint64_t t0 = st_reg_now_ns();
    uint32_t ticket = st_reg_ask(&r, o.slot, 64u << 20);
    st_reg_answer_t ans = st_reg_wait_answer(&r, o.slot, me, ticket, t0 + 10000000000ull, t0 + 10000000000ull);
    assert_int_equal(ans.end, ST_REG_ANSWERED);
    assert_int_equal(ans.given, 1u << 20);
    assert_true(ans.at_ns >= t0 && ans.at_ns <= st_reg_now_ns());
    assert_int_equal(atomic_load(&r.f->slot[o.slot].giving), 0); /* cleared with the answer */

    /* many processes asking at once: every ask answered, none lost */
    enum { ASKERS = 8, ASKS = 40 };
    pid_t kids[ASKERS];
    for (int k = 0; k < ASKERS; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            st_reg_t c;
            char why[320];
            if (st_reg_open(path, UUID, TOTAL, false, &c, why, sizeof why) != 0)
                _exit(2);
            for (int i = 0; i < ASKS; i++) {
                uint32_t tk = st_reg_ask(&c, o.slot, 1);
                uint64_t until = st_reg_now_ns() + 10000000000ull;
                if (st_reg_wait_answer(&c, o.slot, me, tk, until, until).end != ST_REG_ANSWERED)
                    _exit(3);
            }
            _exit(0);
        }
    }
    for (int k = 0; k < ASKERS; k++) {
        int status;
        assert_int_equal(waitpid(kids[k], &status, 0), kids[k]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    atomic_store(&o.stop, true);
    st_reg_wake_owner(&r, o.slot);
    pthread_join(t, NULL);
    assert_true(atomic_load(&o.served) >= 1); /* answers may cover several asks each */
    st_reg_leave(&r, o.slot);
    st_reg_close(&r);
}

/* No answer: the wait ends at its deadline; an owner killed meanwhile ends
 * it at once. */
static void test_ask_unanswered(void **state)
{
    (void)state;
    st_reg_t r;
    open_ok(&r, true);
    int keep = st_reg_claim(&r); /* keeps the file while the others leave */
    int slot = st_reg_claim(&r); /* ours, and no thread answers */
    assert_true(keep >= 0 && slot >= 0);
    int32_t me = (int32_t)getpid();
    uint64_t t0 = st_reg_now_ns();
    uint32_t ticket = st_reg_ask(&r, slot, 1);
    /* not giving: the bound does not stretch the wait */
    assert_int_equal(st_reg_wait_answer(&r, slot, me, ticket, t0 + 50000000ull, t0 + 5000000000ull).end,
                     ST_REG_NO_ANSWER);
    assert_true(st_reg_now_ns() - t0 >= 50000000ull);
    assert_true(st_reg_now_ns() - t0 < 2000000000ull);
    st_reg_leave(&r, slot);

    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t child = fork();
    if (child == 0) {
        st_reg_t c;
        char why[320];
        int s = -1;
        if (st_reg_open(path, UUID, TOTAL, false, &c, why, sizeof why) == 0)
            s = st_reg_claim(&c);
        if (write(pipefd[1], &s, sizeof s) != sizeof s || s < 0)
            _exit(1);
        pause(); /* never answers */
        _exit(0);
    }
    int s = -1;
    assert_int_equal(read(pipefd[0], &s, sizeof s), sizeof s);
    assert_true(s >= 0);
    ticket = st_reg_ask(&r, s, 1);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    t0 = st_reg_now_ns();
    assert_int_equal(st_reg_wait_answer(&r, s, child, ticket, t0 + 60000000000ull, t0 + 60000000000ull).end,
                     ST_REG_GONE);
    assert_true(st_reg_now_ns() - t0 < 30000000000ull); /* well before the deadline */
    close(pipefd[0]);
    close(pipefd[1]);
    st_reg_leave(&r, keep);
    st_reg_close(&r);
}

/* An owner whose give takes `give_ms`: it takes the ask (giving), sleeps,
 * answers 2 MiB once. */
typedef struct slow_owner_s {
    st_reg_t *r;
    int slot;
    unsigned give_ms;
} slow_owner_t;

static void *slow_owner_main(void *arg)
{
    slow_owner_t *o = arg;
    uint32_t served = atomic_load(&o->r->f->slot[o->slot].answered), a = served;
    while (a == served)
        a = st_reg_wait_ask(o->r, o->slot, served, 1000000000ull);
    st_reg_take_want(o->r, o->slot);
    usleep(o->give_ms * 1000u);
    st_reg_answer(o->r, o->slot, a, 2u << 20);
    return NULL;
}

/* A give that takes longer than the deadline: the asker waits on while the
 * owner is giving (st_reg_list shows it), and takes the answer; one that
 * takes longer than the bound ends the wait at the bound, still giving. */
static void test_ask_giving(void **state)
{
    (void)state;
    st_reg_t r;
    open_ok(&r, true);
    int32_t me = (int32_t)getpid();
    slow_owner_t o = {.r = &r, .slot = st_reg_claim(&r), .give_ms = 300};
    assert_true(o.slot >= 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, slow_owner_main, &o), 0);
    uint64_t t0 = st_reg_now_ns();
    uint32_t ticket = st_reg_ask(&r, o.slot, 1);
    /* seen giving by a reader */
    static st_reg_view_t v[ST_REG_SLOTS];
    bool seen = false;
    while (!seen && st_reg_now_ns() - t0 < 200000000ull) {
        assert_int_equal(list(&r, v), 1);
        seen = v[0].giving;
    }
    assert_true(seen);
    /* deadline 50 ms, bound 5 s: answered at about 300 ms */
    st_reg_answer_t ans = st_reg_wait_answer(&r, o.slot, me, ticket, t0 + 50000000ull, t0 + 5000000000ull);
    assert_int_equal(ans.end, ST_REG_ANSWERED);
    assert_int_equal(ans.given, 2u << 20);
    assert_true(ans.at_ns - t0 >= 300000000ull);
    pthread_join(t, NULL);

    /* deadline 50 ms, bound 150 ms, a give of 600 ms: cut at the bound */
    o.give_ms = 600;
    assert_int_equal(pthread_create(&t, NULL, slow_owner_main, &o), 0);
    t0 = st_reg_now_ns();
    ticket = st_reg_ask(&r, o.slot, 1);
    ans = st_reg_wait_answer(&r, o.slot, me, ticket, t0 + 50000000ull, t0 + 150000000ull);
    uint64_t waited = st_reg_now_ns() - t0;
    assert_int_equal(ans.end, ST_REG_STILL_GIVING);
    if (waited < 150000000ull || waited > 550000000ull)
        fail_msg("waited %.1f ms for an owner still giving, bound 150 ms", (double)waited / 1e6);
    pthread_join(t, NULL);
    st_reg_leave(&r, o.slot);
    st_reg_close(&r);
}

/* An owner that dies while giving ends the wait at once, past the deadline
 * too, and the asker is told it died while giving. */
static void test_ask_died_giving(void **state)
{
    (void)state;
    st_reg_t r;
    open_ok(&r, true);
    int keep = st_reg_claim(&r); /* keeps the file */
    assert_true(keep >= 0);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t child = fork();
    if (child == 0) {
        st_reg_t c;
        char why[320];
        int s = -1;
        if (st_reg_open(path, UUID, TOTAL, false, &c, why, sizeof why) == 0)
            s = st_reg_claim(&c);
        if (write(pipefd[1], &s, sizeof s) != sizeof s || s < 0)
            _exit(1);
        uint32_t served = atomic_load(&c.f->slot[s].answered);
        while (st_reg_wait_ask(&c, s, served, 1000000000ull) == served)
            ;
        st_reg_take_want(&c, s); /* giving, and never answers */
        pause();
        _exit(0);
    }
    int s = -1;
    assert_int_equal(read(pipefd[0], &s, sizeof s), sizeof s);
    assert_true(s >= 0);
    uint64_t t0 = st_reg_now_ns();
    uint32_t ticket = st_reg_ask(&r, s, 1);
    while (!atomic_load(&r.f->slot[s].giving))
        usleep(1000);
    /* past the deadline (10 ms) it waits on for the giver, killed at 100 ms */
    pid_t killer = fork();
    if (killer == 0) {
        usleep(100000);
        kill(child, SIGKILL);
        _exit(0);
    }
    st_reg_answer_t ans = st_reg_wait_answer(&r, s, child, ticket, t0 + 10000000ull, t0 + 60000000000ull);
    uint64_t waited = st_reg_now_ns() - t0;
    assert_int_equal(ans.end, ST_REG_DIED_GIVING);
    if (waited < 90000000ull || waited > 5000000000ull)
        fail_msg("waited %.1f ms for an owner killed while giving at 100 ms", (double)waited / 1e6);
    waitpid(killer, NULL, 0);
    waitpid(child, NULL, 0);
    close(pipefd[0]);
    close(pipefd[1]);
    st_reg_leave(&r, keep);
    st_reg_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_and_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusal_another_owner, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_user_shut_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_publish_leave, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_reused_and_torn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sweep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ask_answered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ask_unanswered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ask_giving, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ask_died_giving, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
