/*
 * The GPU registry's file, slots, figures and asks (registry.h).
 */
#include "registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"

_Static_assert(sizeof(st_reg_slot_t) % 8 == 0, "slots are 8-byte aligned in the file");

uint64_t st_reg_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t st_reg_age_ms(const st_reg_figs_t *figs)
{
    uint64_t now = wall_ns();
    return now > figs->updated_ns ? (now - figs->updated_ns) / 1000000u : 0;
}

/* The futex of a word in the shared file: waits while *w == val, at most
 * ns; wakes every waiter. */
static void futex_wait(_Atomic uint32_t *w, uint32_t val, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void st_reg_uuid_string(const uint8_t u[16], char out[48])
{
    snprintf(out, 48, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

void st_reg_path(const char *uuid, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s%u-%s", ST_REG_DIR, ST_REG_PREFIX, (unsigned)geteuid(), uuid);
}

/* ------------------------------------------------------------------------
 * The file
 * ---------------------------------------------------------------------- */

/* NULL when the header and size are this version's, else what is wrong. */
static const char *reg_check(const st_reg_file_t *f, size_t size)
{
    static char why[128];
    if (size < sizeof *f)
        return "truncated: shorter than a registry's header";
    if (memcmp(f->magic, ST_REG_MAGIC, sizeof f->magic) != 0)
        return "not a cucache GPU registry (bad magic)";
    if (f->version != ST_REG_VERSION) {
        snprintf(why, sizeof why, "written by %s cucache (registry version %u; this one reads version %u)",
                 f->version > ST_REG_VERSION ? "a newer" : "an older", (unsigned)f->version, ST_REG_VERSION);
        return why;
    }
    if (f->header_size != sizeof *f || f->slot_size != sizeof(st_reg_slot_t) || f->nslots != ST_REG_SLOTS)
        return "corrupt header (its sizes are not this version's)";
    if (size != ST_REG_BYTES) {
        snprintf(why, sizeof why, "%s (%zu bytes; a registry has %zu)", size < ST_REG_BYTES ? "truncated" : "oversized",
                 size, (size_t)ST_REG_BYTES);
        return why;
    }
    if (memchr(f->uuid, 0, sizeof f->uuid) == NULL)
        return "corrupt header (no UUID)";
    return NULL;
}

/* Makes the file whole under a temporary name and links it into place:
 * 0, or -1 with errno (EEXIST: another process made it first). */
static int reg_create(const char *path, const char *uuid, uint64_t total)
{
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    unlink(tmp);
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int rc = -1;
    st_reg_file_t *f = MAP_FAILED;
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)ST_REG_BYTES) != 0)
        goto out;
    f = mmap(NULL, ST_REG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (f == MAP_FAILED)
        goto out;
    f->version = ST_REG_VERSION;
    f->header_size = sizeof *f;
    f->slot_size = sizeof(st_reg_slot_t);
    f->nslots = ST_REG_SLOTS;
    f->total = total;
    snprintf(f->uuid, sizeof f->uuid, "%s", uuid);
    memcpy(f->magic, ST_REG_MAGIC, sizeof f->magic);
    rc = link(tmp, path);
out:
    {
        int e = errno;
        if (f != MAP_FAILED)
            munmap(f, ST_REG_BYTES);
        close(fd);
        unlink(tmp);
        errno = e;
    }
    return rc;
}

int st_reg_open(const char *path, const char *uuid, uint64_t total, bool create, st_reg_t *out, char *why,
                size_t len)
{
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", path);
    for (int attempt = 0; attempt < 3; attempt++) {
        int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ELOOP) {
                snprintf(why, len, "%s: a symbolic link, refused", path);
                return -2;
            }
            if (errno != ENOENT) {
                snprintf(why, len, "%s: %s", path, strerror(errno));
                return -2;
            }
            if (!create)
                return -1;
            if (reg_create(path, uuid, total) != 0 && errno != EEXIST) {
                snprintf(why, len, "%s: cannot be created: %s", path, strerror(errno));
                return -2;
            }
            continue;
        }
        struct stat st;
        const char *bad = NULL;
        char buf[96];
        if (fstat(fd, &st) != 0)
            bad = strerror(errno);
        else if (!S_ISREG(st.st_mode))
            bad = "not a regular file";
        else if (st.st_uid != geteuid()) {
            snprintf(buf, sizeof buf, "owned by another user (uid %u), refused", (unsigned)st.st_uid);
            bad = buf;
        } else if ((st.st_mode & 0777) != 0600) {
            snprintf(buf, sizeof buf, "mode %03o, not 0600: others could read or write it, refused",
                     (unsigned)(st.st_mode & 0777));
            bad = buf;
        }
        void *m = MAP_FAILED;
        if (!bad && st.st_size >= (off_t)sizeof(st_reg_file_t)) {
            m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m == MAP_FAILED)
                bad = strerror(errno);
        }
        if (!bad) {
            static const st_reg_file_t none;
            bad = reg_check(m == MAP_FAILED ? &none : m, (size_t)st.st_size);
            if (!bad && m != MAP_FAILED && strcmp(((st_reg_file_t *)m)->uuid, uuid) != 0)
                bad = "corrupt header (another GPU's UUID)";
        }
        close(fd);
        if (bad) {
            if (m != MAP_FAILED)
                munmap(m, (size_t)st.st_size);
            snprintf(why, len, "%s: %s", path, bad);
            return -2;
        }
        out->f = m;
        out->dev = (uint64_t)st.st_dev;
        out->ino = (uint64_t)st.st_ino;
        return 0;
    }
    snprintf(why, len, "%s: appeared and vanished while being opened", path);
    return -2;
}

void st_reg_close(st_reg_t *r)
{
    if (r->f)
        munmap(r->f, ST_REG_BYTES);
    r->f = NULL;
}

/* ------------------------------------------------------------------------
 * Slots
 * ---------------------------------------------------------------------- */

/* Clears the slot if its process is gone: a slot in use whose pid does not
 * run since its start time, or one being set up by a pid that is gone. */
static void reap(st_reg_slot_t *s)
{
    int32_t pid = atomic_load(&s->pid);
    if (pid == 0)
        return;
    bool gone = pid > 0 ? !proc_alive(pid, s->start) : kill(-pid, 0) != 0 && errno == ESRCH;
    if (gone)
        atomic_compare_exchange_strong(&s->pid, &pid, 0);
}

/* Whether no process lives in the registry: every slot free once the
 * dead are cleared. */
static bool reg_empty(st_reg_t *r)
{
    for (unsigned i = 0; i < ST_REG_SLOTS; i++) {
        reap(&r->f->slot[i]);
        if (atomic_load(&r->f->slot[i].pid) != 0)
            return false;
    }
    return true;
}

int st_reg_claim(st_reg_t *r)
{
    int32_t me = (int32_t)getpid();
    uint64_t start = 0;
    char comm[16] = "", state;
    proc_stat(me, &start, &state, comm);
    for (int pass = 0; pass < 2; pass++) {
        for (unsigned i = 0; i < ST_REG_SLOTS; i++) {
            st_reg_slot_t *s = &r->f->slot[i];
            if (pass)
                reap(s);
            int32_t zero = 0;
            if (!atomic_compare_exchange_strong(&s->pid, &zero, -me))
                continue;
            s->start = start;
            memcpy(s->comm, comm, sizeof s->comm);
            atomic_store(&s->seq, 0);
#define ST_REG_ZERO(name) atomic_store_explicit(&s->figs.name, 0, memory_order_relaxed);
            ST_REG_FIGURES(ST_REG_ZERO)
#undef ST_REG_ZERO
            atomic_store(&s->want, 0);
            atomic_store(&s->given, 0);
            atomic_store(&s->giving, 0);
            atomic_store(&s->answered_ns, 0);
            atomic_store(&s->answered, atomic_load(&s->asks));
            atomic_store(&s->pid, me);
            return (int)i;
        }
    }
    return -1;
}

void st_reg_leave(st_reg_t *r, int slot)
{
    st_reg_slot_t *s = &r->f->slot[slot];
    int32_t me = (int32_t)getpid();
    atomic_store(&s->given, 0); /* no asker waits on a process that left, nor takes an old answer for its own */
    atomic_store(&s->answered, atomic_load(&s->asks));
    atomic_store(&s->giving, 0);
    futex_wake(&s->answered);
    atomic_compare_exchange_strong(&s->pid, &me, 0);
    if (reg_empty(r) && st_reg_current(r))
        unlink(r->path);
}

size_t st_reg_sweep(void)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s%u-", ST_REG_PREFIX, (unsigned)geteuid());
    size_t plen = strlen(prefix), removed = 0;
    DIR *d = opendir(ST_REG_DIR);
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, prefix, plen) != 0 || (len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0))
            continue;
        char path[sizeof ((st_reg_t *)0)->path], why[320];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", ST_REG_DIR, e->d_name) >= sizeof path)
            continue;
        st_reg_t r;
        if (st_reg_open(path, e->d_name + plen, 0, false, &r, why, sizeof why) != 0)
            continue; /* gone meanwhile, or refused: its reader says why */
        if (reg_empty(&r) && st_reg_current(&r) && unlink(path) == 0)
            removed++;
        st_reg_close(&r);
    }
    closedir(d);
    return removed;
}

bool st_reg_current(const st_reg_t *r)
{
    struct stat st;
    return lstat(r->path, &st) == 0 && (uint64_t)st.st_dev == r->dev && (uint64_t)st.st_ino == r->ino;
}

void st_reg_publish(st_reg_t *r, int slot, const st_reg_figs_t *figs)
{
    st_reg_slot_t *s = &r->f->slot[slot];
    st_reg_figs_t f = *figs;
    f.updated_ns = wall_ns();
    uint32_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, q + 1, memory_order_relaxed);
    /* release stores (not a fence, which ThreadSanitizer does not model):
     * a reader that sees one of them sees the odd count before it */
#define ST_REG_PUT(name) atomic_store_explicit(&s->figs.name, f.name, memory_order_release);
    ST_REG_FIGURES(ST_REG_PUT)
#undef ST_REG_PUT
    atomic_store_explicit(&s->seq, q + 2, memory_order_release);
}

/* A whole copy of the slot's figures: false when none could be read (the
 * writer is mid-way, or died there). */
static bool read_figs(const st_reg_slot_t *s, st_reg_figs_t *out)
{
    for (int tries = 0; tries < 100; tries++) {
        uint32_t a = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (a & 1) {
            sched_yield();
            continue;
        }
        /* acquire loads: the second look at the count comes after them */
#define ST_REG_GET(name) out->name = atomic_load_explicit(&s->figs.name, memory_order_acquire);
        ST_REG_FIGURES(ST_REG_GET)
#undef ST_REG_GET
        if (atomic_load_explicit(&s->seq, memory_order_relaxed) == a)
            return true;
    }
    memset(out, 0, sizeof *out);
    return false;
}

size_t st_reg_list(st_reg_t *r, st_reg_view_t *out, size_t max)
{
    size_t n = 0;
    for (unsigned i = 0; i < ST_REG_SLOTS; i++) {
        st_reg_slot_t *s = &r->f->slot[i];
        reap(s);
        int32_t pid = atomic_load(&s->pid);
        if (pid <= 0)
            continue;
        if (n < max) {
            st_reg_view_t *v = &out[n];
            v->slot = (int)i;
            v->pid = pid;
            v->start = s->start;
            memcpy(v->comm, s->comm, sizeof v->comm);
            v->comm[sizeof v->comm - 1] = 0;
            v->stale = !read_figs(s, &v->figs);
            v->giving = atomic_load(&s->giving) != 0;
        }
        n++;
    }
    return n;
}

/* ------------------------------------------------------------------------
 * Asks
 * ---------------------------------------------------------------------- */

uint32_t st_reg_ask(st_reg_t *r, int slot, uint64_t want)
{
    st_reg_slot_t *s = &r->f->slot[slot];
    uint64_t w = atomic_load(&s->want);
    while (w < want && !atomic_compare_exchange_weak(&s->want, &w, want))
        ;
    atomic_store(&s->asker, (int32_t)getpid());
    uint32_t ticket = atomic_fetch_add(&s->asks, 1) + 1;
    futex_wake(&s->asks);
    return ticket;
}

/* Whether the process of pid still holds the slot and runs. */
static bool owner_alive(const st_reg_slot_t *s, int32_t pid)
{
    return atomic_load(&s->pid) == pid && proc_alive(pid, s->start);
}

static uint64_t fixed_bound(void *arg, uint64_t now_ns)
{
    (void)now_ns;
    return *(const uint64_t *)arg;
}

st_reg_answer_t st_reg_wait_answer(st_reg_t *r, int slot, int32_t pid, uint32_t ticket, uint64_t deadline_ns,
                                   uint64_t bound_ns)
{
    if (!bound_ns) /* 0 ends a wait at once: a fixed bound of 0 is the deadline's */
        bound_ns = deadline_ns;
    return st_reg_wait_answer_by(r, slot, pid, ticket, deadline_ns, fixed_bound, &bound_ns);
}

st_reg_answer_t st_reg_wait_answer_by(st_reg_t *r, int slot, int32_t pid, uint32_t ticket, uint64_t deadline_ns,
                                      st_reg_bound_fn bound, void *arg)
{
    st_reg_slot_t *s = &r->f->slot[slot];
    bool seen_giving = false;
    for (;;) {
        uint32_t a = atomic_load(&s->answered);
        bool giving = atomic_load(&s->giving) != 0;
        if (!giving) /* its answer may have come between the two loads */
            a = atomic_load(&s->answered);
        seen_giving |= giving;
        if ((int32_t)(a - ticket) >= 0) {
            int32_t now_pid = atomic_load(&s->pid);
            if (now_pid != pid && now_pid != 0) /* the slot's next owner, claiming, marked every ask answered */
                return (st_reg_answer_t){.end = ST_REG_GONE};
            return (st_reg_answer_t){ST_REG_ANSWERED, atomic_load(&s->given), atomic_load(&s->answered_ns)};
        }
        uint64_t now = st_reg_now_ns(), bound_ns = bound(arg, now);
        uint64_t until = giving && bound_ns > deadline_ns ? bound_ns : deadline_ns;
        if (!bound_ns || now >= until)
            return (st_reg_answer_t){.end = giving ? ST_REG_STILL_GIVING : ST_REG_NO_ANSWER};
        /* a slice at a time: a process that died without answering is
         * seen gone at the next look */
        uint64_t left = until - now;
        futex_wait(&s->answered, a, left < 10000000ull ? left : 10000000ull);
        if (!owner_alive(s, pid))
            return (st_reg_answer_t){.end = seen_giving || atomic_load(&s->giving) ? ST_REG_DIED_GIVING : ST_REG_GONE};
    }
}

uint32_t st_reg_wait_ask(st_reg_t *r, int slot, uint32_t served, uint64_t timeout_ns)
{
    st_reg_slot_t *s = &r->f->slot[slot];
    uint32_t a = atomic_load(&s->asks);
    if (a == served) {
        futex_wait(&s->asks, served, timeout_ns);
        a = atomic_load(&s->asks);
    }
    return a;
}

void st_reg_wake_owner(st_reg_t *r, int slot)
{
    futex_wake(&r->f->slot[slot].asks);
}

uint64_t st_reg_take_want(st_reg_t *r, int slot)
{
    atomic_store(&r->f->slot[slot].giving, 1);
    return atomic_exchange(&r->f->slot[slot].want, 0);
}

void st_reg_answer(st_reg_t *r, int slot, uint32_t asks, uint64_t given)
{
    st_reg_slot_t *s = &r->f->slot[slot];
    atomic_store(&s->given, given);
    atomic_store(&s->answered_ns, st_reg_now_ns());
    atomic_store(&s->answered, asks);
    /* after the answer (an asker that sees giving clear reads answered
     * again); still giving when another ask came meanwhile: the thread
     * serves it next */
    if (atomic_load(&s->asks) == asks)
        atomic_store(&s->giving, 0);
    futex_wake(&s->answered);
}

/* ------------------------------------------------------------------------
 * This process's waits, for the exit summary
 * ---------------------------------------------------------------------- */

static struct {
    _Atomic uint64_t asks, total_ns, max_ns, given;
} waits[ST_REG_DEVICES];

void st_reg_note_wait(int device, uint64_t ns, uint64_t given)
{
    if ((unsigned)device >= ST_REG_DEVICES)
        return;
    atomic_fetch_add(&waits[device].asks, 1);
    atomic_fetch_add(&waits[device].total_ns, ns);
    atomic_fetch_add(&waits[device].given, given);
    uint64_t m = atomic_load(&waits[device].max_ns);
    while (m < ns && !atomic_compare_exchange_weak(&waits[device].max_ns, &m, ns))
        ;
}

st_reg_waits_t st_reg_waits(int device)
{
    if ((unsigned)device >= ST_REG_DEVICES)
        return (st_reg_waits_t){0};
    return (st_reg_waits_t){atomic_load(&waits[device].asks), atomic_load(&waits[device].total_ns),
                            atomic_load(&waits[device].max_ns), atomic_load(&waits[device].given)};
}
