/*
 * One simulated device shared by several processes: the file, its checks,
 * the process table and its robust lock.  shared.h says what is shared and
 * how death is handled.
 */
#include "shared.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* How long a locker waits for the table's lock before giving up: only a
 * live process that stopped while holding it (or a corrupt lock) makes it
 * wait at all. */
#define LOCK_WAIT_S 10

struct sim_shared_s {
    sim_shared_region_t *r;
    int self; /* this process's entry, or -1 (a reader) */
    char path[128];
};

const char *sim_shared_key_error(const char *key)
{
    static const char want[] = "1 to 64 letters, digits, '.', '_' or '-', not starting with '.'";
    size_t n = strlen(key);
    if (n == 0 || n > SIM_SHARED_KEY_MAX || key[0] == '.')
        return want;
    for (size_t i = 0; i < n; i++) {
        char c = key[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return want;
    }
    return NULL;
}

bool sim_shared_path(const char *key, char *buf, size_t len)
{
    int n = snprintf(buf, len, SIM_SHARED_DIR "/" SIM_SHARED_PREFIX "%u-%s", (unsigned)geteuid(), key);
    return n > 0 && (size_t)n < len;
}

/* ------------------------------------------------------------------------
 * Processes: alive, and which one
 * ---------------------------------------------------------------------- */

bool sim_proc_stat(int32_t pid, uint64_t *start, char *state, char comm[16])
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    /* the command name may hold spaces and parentheses: it ends at the last ')' */
    char *open_paren = strchr(buf, '('), *close_paren = strrchr(buf, ')');
    if (!open_paren || !close_paren || close_paren < open_paren)
        return false;
    if (comm) {
        size_t len = (size_t)(close_paren - open_paren - 1);
        if (len > 15)
            len = 15;
        memcpy(comm, open_paren + 1, len);
        comm[len] = 0;
    }
    /* After the command: field 3 (state) ... field 22 (starttime). */
    char *p = close_paren + 1;
    for (int field = 3; field <= 22; field++) {
        while (*p == ' ')
            p++;
        if (!*p)
            return false;
        if (field == 3)
            *state = *p;
        if (field == 22) {
            char *end;
            *start = strtoull(p, &end, 10);
            return end != p;
        }
        while (*p && *p != ' ')
            p++;
    }
    return false;
}

/* Whether the process of an entry still runs: the same pid, started at the
 * same time, and not a zombie (the driver gives a process's memory back
 * before its parent reaps it). */
static bool entry_alive(const sim_shared_proc_t *e)
{
    uint64_t start;
    char state;
    if (e->pid <= 0 || !sim_proc_stat(e->pid, &start, &state, NULL))
        return false;
    return start == e->start && state != 'Z' && state != 'X';
}

/* Frees the entries of dead processes (lock held). */
static void reap(sim_shared_t *sh)
{
    for (int i = 0; i < SIM_SHARED_PROCS; i++) {
        sim_shared_proc_t *e = &sh->r->proc[i];
        if (e->pid == 0 || i == sh->self || entry_alive(e))
            continue;
        memset(e->bytes, 0, sizeof e->bytes);
        __atomic_store_n(&e->pid, 0, __ATOMIC_RELEASE);
    }
}

/* ------------------------------------------------------------------------
 * The lock
 * ---------------------------------------------------------------------- */

/* Takes the table's lock.  When its holder died holding it, what the
 * holder was writing belongs to a dead process: reaping makes the table
 * consistent again. */
static bool lock(sim_shared_t *sh)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += LOCK_WAIT_S;
    int rc = pthread_mutex_timedlock(&sh->r->lock, &until);
    if (rc == EOWNERDEAD) {
        reap(sh);
        rc = pthread_mutex_consistent(&sh->r->lock);
        if (rc != 0)
            pthread_mutex_unlock(&sh->r->lock);
    }
    if (rc == ETIMEDOUT)
        sim_log("%s: its lock has been held for over %d s (a process stopped while holding it?)", sh->path,
                LOCK_WAIT_S);
    else if (rc != 0)
        sim_log("%s: cannot take its lock: %s (remove the file when no process uses it)", sh->path, strerror(rc));
    return rc == 0;
}

static void unlock(sim_shared_t *sh)
{
    pthread_mutex_unlock(&sh->r->lock);
}

/* ------------------------------------------------------------------------
 * The file
 * ---------------------------------------------------------------------- */

/* Creates the file of path with identity *id, fully initialised before it
 * appears under its name (written under a temporary name, then linked):
 * 0 on success, EEXIST when another process created it first, or -errno-like
 * failure (printed). */
static int region_create(const char *path, const sim_shared_identity_t *id)
{
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    unlink(tmp);
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        sim_log("%s: cannot create it: %s", tmp, strerror(errno));
        return -1;
    }
    sim_shared_region_t *r = MAP_FAILED;
    if (fchmod(fd, 0600) == 0 && ftruncate(fd, (off_t)sizeof *r) == 0)
        r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (r == MAP_FAILED) {
        sim_log("%s: cannot create it: %s", tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&r->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    r->version = SIM_SHARED_VERSION;
    r->size = (uint32_t)sizeof *r;
    r->nprocs = SIM_SHARED_PROCS;
    r->id = *id;
    memcpy(r->magic, SIM_SHARED_MAGIC, 8);
    munmap(r, sizeof *r);
    int rc = link(tmp, path) == 0 ? 0 : errno;
    unlink(tmp);
    if (rc != 0 && rc != EEXIST)
        sim_log("%s: cannot create it: %s", path, strerror(rc));
    return rc == 0 ? 0 : rc == EEXIST ? EEXIST : -1;
}

/* Opens and maps an existing file after checking who owns it, its mode and
 * size, and its header; NULL after printing what is wrong. */
static sim_shared_region_t *region_map(const char *path, bool *absent)
{
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        *absent = errno == ENOENT;
        if (!*absent)
            sim_log("%s: cannot open it: %s", path,
                    errno == ELOOP ? "it is a symbolic link, refused" : strerror(errno));
        return NULL;
    }
    struct stat st;
    const char *bad = NULL;
    char why[160];
    if (fstat(fd, &st) != 0) {
        snprintf(why, sizeof why, "cannot stat it: %s", strerror(errno));
        bad = why;
    } else if (!S_ISREG(st.st_mode)) {
        bad = "not a regular file";
    } else if (st.st_uid != geteuid()) {
        snprintf(why, sizeof why, "owned by uid %u, not by this user (%u): refused", (unsigned)st.st_uid,
                 (unsigned)geteuid());
        bad = why;
    } else if ((st.st_mode & 07777) != 0600) {
        snprintf(why, sizeof why, "mode %04o, expected 0600 (this user's alone): refused",
                 (unsigned)(st.st_mode & 07777));
        bad = why;
    } else if ((uint64_t)st.st_size != sizeof(sim_shared_region_t)) {
        snprintf(why, sizeof why, "%llu bytes, expected %zu (truncated, or another version's)",
                 (unsigned long long)st.st_size, sizeof(sim_shared_region_t));
        bad = why;
    }
    sim_shared_region_t *r = MAP_FAILED;
    if (!bad) {
        r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (r == MAP_FAILED) {
            snprintf(why, sizeof why, "cannot map it: %s", strerror(errno));
            bad = why;
        }
    }
    close(fd);
    if (!bad && memcmp(r->magic, SIM_SHARED_MAGIC, 8) != 0)
        bad = "not a simulated device's table (its first bytes are not " SIM_SHARED_MAGIC ")";
    else if (!bad && r->version != SIM_SHARED_VERSION) {
        snprintf(why, sizeof why, "version %u, this simulator reads version %u", r->version, SIM_SHARED_VERSION);
        bad = why;
    } else if (!bad && (r->size != sizeof *r || r->nprocs != SIM_SHARED_PROCS || r->id.ndev == 0 ||
                        r->id.ndev > SIM_SHARED_DEVICES || r->id.capacity == 0)) {
        bad = "its header is corrupt (size, table length, device count or capacity)";
    }
    if (bad) {
        sim_log("%s: %s", path, bad);
        if (r != MAP_FAILED)
            munmap(r, sizeof *r);
        *absent = false;
        return NULL;
    }
    madvise(r, sizeof *r, MADV_DONTFORK);
    return r;
}

/* Refuses a file whose devices are not the ones this process simulates. */
static bool identity_check(const char *path, const sim_shared_identity_t *have, const sim_shared_identity_t *want)
{
    if (have->ndev == want->ndev && have->capacity == want->capacity &&
        memcmp(have->uuid, want->uuid, sizeof have->uuid[0] * want->ndev) == 0)
        return true;
    sim_log("%s: the shared device is %u device(s) of %llu bytes; this process asks for %u of %llu bytes "
            "(CUCACHE_SIM_DEVICES and CUCACHE_SIM_CAPACITY must agree across the processes of a key)",
            path, have->ndev, (unsigned long long)have->capacity, want->ndev, (unsigned long long)want->capacity);
    return false;
}

/* Enters this process in the table (lock held); false when it is full. */
static bool join(sim_shared_t *sh)
{
    sim_shared_proc_t me = {.pid = (int32_t)getpid()};
    char state;
    if (!sim_proc_stat(me.pid, &me.start, &state, me.comm)) {
        sim_log("%s: cannot read /proc/self/stat", sh->path);
        return false;
    }
    reap(sh);
    for (int i = 0; i < SIM_SHARED_PROCS; i++) {
        sim_shared_proc_t *e = &sh->r->proc[i];
        if (e->pid != 0)
            continue;
        e->start = me.start;
        memcpy(e->comm, me.comm, sizeof e->comm);
        memset(e->bytes, 0, sizeof e->bytes);
        __atomic_store_n(&e->pid, me.pid, __ATOMIC_RELEASE);
        sh->self = i;
        return true;
    }
    sim_log("%s: %d processes use the shared device already", sh->path, SIM_SHARED_PROCS);
    return false;
}

sim_shared_t *sim_shared_open(const char *key, const sim_shared_identity_t *want, bool enter)
{
    sim_shared_t *sh = calloc(1, sizeof *sh);
    if (!sh)
        return NULL;
    sh->self = -1;
    if (sim_shared_key_error(key) || !sim_shared_path(key, sh->path, sizeof sh->path)) {
        sim_log("CUCACHE_SIM_SHARED: bad key: expected %s", sim_shared_key_error(key));
        free(sh);
        return NULL;
    }
    bool absent = false;
    sh->r = region_map(sh->path, &absent);
    if (!sh->r && absent && want && region_create(sh->path, want) >= 0)
        sh->r = region_map(sh->path, &absent);
    if (!sh->r) {
        if (absent)
            sim_log("%s: no process has opened the shared device of key %s", sh->path, key);
        free(sh);
        return NULL;
    }
    bool ok = !want || identity_check(sh->path, &sh->r->id, want);
    if (ok && enter) {
        ok = lock(sh);
        if (ok) {
            ok = join(sh);
            unlock(sh);
        }
    }
    if (!ok) {
        sim_shared_close(sh);
        return NULL;
    }
    return sh;
}

void sim_shared_close(sim_shared_t *sh)
{
    if (!sh)
        return;
    if (sh->self >= 0 && lock(sh)) {
        sim_shared_proc_t *e = &sh->r->proc[sh->self];
        memset(e->bytes, 0, sizeof e->bytes);
        __atomic_store_n(&e->pid, 0, __ATOMIC_RELEASE);
        unlock(sh);
    }
    munmap(sh->r, sizeof *sh->r);
    free(sh);
}

const sim_shared_identity_t *sim_shared_identity(const sim_shared_t *sh)
{
    return &sh->r->id;
}

/* ------------------------------------------------------------------------
 * Accounting
 * ---------------------------------------------------------------------- */

static uint64_t used_locked(const sim_shared_t *sh, int dev)
{
    uint64_t used = 0;
    for (int i = 0; i < SIM_SHARED_PROCS; i++)
        if (sh->r->proc[i].pid != 0)
            used += sh->r->proc[i].bytes[dev];
    return used;
}

bool sim_shared_charge(sim_shared_t *sh, int dev, uint64_t bytes)
{
    if (sh->self < 0 || !lock(sh))
        return false;
    uint64_t cap = sh->r->id.capacity;
    uint64_t used = used_locked(sh, dev);
    if (used > cap || bytes > cap - used) {
        reap(sh);
        used = used_locked(sh, dev);
    }
    bool fits = used <= cap && bytes <= cap - used;
    if (fits)
        sh->r->proc[sh->self].bytes[dev] += bytes;
    unlock(sh);
    return fits;
}

void sim_shared_uncharge(sim_shared_t *sh, int dev, uint64_t bytes)
{
    if (sh->self < 0 || !lock(sh))
        return;
    uint64_t *mine = &sh->r->proc[sh->self].bytes[dev];
    *mine = *mine > bytes ? *mine - bytes : 0;
    unlock(sh);
}

uint64_t sim_shared_used(sim_shared_t *sh, int dev)
{
    if (!lock(sh))
        return sh->r->id.capacity; /* printed: nothing can be allocated */
    reap(sh);
    uint64_t used = used_locked(sh, dev);
    unlock(sh);
    return used;
}

size_t sim_shared_procs(sim_shared_t *sh, sim_shared_proc_t *out, size_t max)
{
    if (!lock(sh))
        return 0;
    reap(sh);
    size_t n = 0;
    for (int i = 0; i < SIM_SHARED_PROCS; i++)
        if (sh->r->proc[i].pid != 0) {
            if (n < max)
                out[n] = sh->r->proc[i];
            n++;
        }
    unlock(sh);
    return n;
}

bool sim_shared_hold_lock(sim_shared_t *sh)
{
    return lock(sh);
}
