/*
 * File names from templates, and whole-file writes.
 *
 * A snapshot is written where a crash, a second process or a careless path
 * could leave something misleading behind, so st_write_file never writes
 * the target itself: the data goes to a temporary file beside it
 * (".<base>.tmp.<pid>.<n>", created exclusively, never through a link),
 * is flushed to disk, and replaces the target with one rename.  A reader
 * sees the old file or the new one, never half of one.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h" /* conf_show: a template in an error line */
#include "st.h"

/* Writes go out in chunks of this size (the test hook sees each one). */
#define ST_WRITE_CHUNK ((size_t)64 << 10)

void (*st_write_file_test_hook)(const char *tmp_path, size_t written);

static void errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------
 * Templates
 * ---------------------------------------------------------------------- */

/* The first rank variable set to a decimal number, else "0".  A value that
 * is not a number (it could hold a '/') is passed over. */
static const char *rank_text(void)
{
    static const char *const vars[] = {"RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = secure_getenv(vars[i]);
        if (!v || !*v || strlen(v) > 9)
            continue;
        if (strspn(v, "0123456789") == strlen(v))
            return v;
    }
    return "0";
}

int st_expand_name(const char *tmpl, int device, unsigned seq, char *out, size_t len, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    char shown[CONF_SHOW_BUF], what[CONF_SHOW_BUF];
    conf_show(shown, tmpl, strlen(tmpl));
    if (len == 0) {
        errf(err, errlen, "file name template '%s': no room for the name", shown);
        return -1;
    }
    size_t n = 0; /* < len: room for the NUL is kept */
    for (const char *p = tmpl; *p; p++) {
        char piece[24];
        const char *add = piece;
        if (*p != '%') {
            piece[0] = *p;
            piece[1] = '\0';
        } else {
            switch (p[1]) {
            case 'p':
                snprintf(piece, sizeof piece, "%ld", (long)getpid());
                break;
            case 'r':
                add = rank_text();
                break;
            case 'd':
                if (device < 0)
                    add = "all";
                else
                    snprintf(piece, sizeof piece, "%d", device);
                break;
            case 'n':
                snprintf(piece, sizeof piece, "%u", seq);
                break;
            case '%':
                add = "%";
                break;
            case '\0':
                errf(err, errlen, "file name template '%s': a lone %% at the end (%%%% writes a percent sign)", shown);
                return -1;
            default:
                errf(err, errlen, "file name template '%s': unknown %%%s (known: %%p %%r %%d %%n %%%%)", shown,
                     conf_show(what, p + 1, 1));
                return -1;
            }
            p++;
        }
        size_t k = strlen(add);
        if (k >= len - n) {
            errf(err, errlen, "file name template '%s': the name is longer than %zu bytes", shown, len - 1);
            return -1;
        }
        memcpy(out + n, add, k);
        n += k;
    }
    out[n] = '\0';
    return 0;
}

static bool ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

int st_json_name(const char *path, char *out, size_t len)
{
    size_t n = strlen(path);
    if (ends_with(path, n, ".pickle"))
        n -= strlen(".pickle");
    else if (ends_with(path, n, ".pkl"))
        n -= strlen(".pkl");
    if (len == 0 || n + strlen(".json") >= len)
        return -1;
    memcpy(out, path, n);
    memcpy(out + n, ".json", sizeof ".json");
    return 0;
}

/* ------------------------------------------------------------------------
 * Whole-file writes
 * ---------------------------------------------------------------------- */

/* Distinguishes the temporary files of threads of one process. */
static atomic_uint st_write_counter;

static const char *errno_text(int e, char *buf, size_t len)
{
    return strerror_r(e, buf, len); /* GNU: returns the message */
}

/* Writes all of data to fd, in chunks; 0, or -1 with errno set. */
static int write_all(int fd, const char *tmp, const unsigned char *data, size_t len)
{
    size_t done = 0;
    while (done < len) {
        size_t chunk = len - done < ST_WRITE_CHUNK ? len - done : ST_WRITE_CHUNK;
        size_t end = done + chunk;
        while (done < end) {
            ssize_t w = write(fd, data + done, end - done);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                return -1;
            if (w == 0) {
                errno = EIO; /* a regular file that accepts nothing */
                return -1;
            }
            done += (size_t)w;
        }
        if (st_write_file_test_hook)
            st_write_file_test_hook(tmp, done);
    }
    return 0;
}

/* Creates the temporary file beside path: its name in tmp, the descriptor
 * returned; -1 with errno set. */
static int create_temp(const char *path, char *tmp, size_t tmplen)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dirlen = slash ? (int)(slash - path + 1) : 0; /* with the slash */
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned n = atomic_fetch_add(&st_write_counter, 1);
        int k = snprintf(tmp, tmplen, "%.*s.%s.tmp.%ld.%u", dirlen, path, base, (long)getpid(), n);
        if (k < 0 || (size_t)k >= tmplen) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST)
            return fd;
        /* left by a process of the same pid (a recycled pid, a killed writer): take the next name */
    }
    return -1;
}

/* Flushes the directory holding path, so that the rename itself is on
 * disk.  Best effort: the data is already safe, and some file systems
 * refuse fsync on a directory. */
static void sync_dir(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    while (fsync(fd) != 0 && errno == EINTR)
        ;
    close(fd);
}

int st_write_file(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
    const int saved_errno = errno;
    char why[256], shown[CONF_SHOW_BUF], shown_tmp[CONF_SHOW_BUF];
    if (err && errlen)
        err[0] = '\0';
    conf_show(shown, path, strlen(path));

    /* The rename below replaces a link rather than writing through it, so
     * a link planted after this check cannot redirect the data either; the
     * check is for saying so instead of silently replacing the link. */
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        errf(err, errlen, "%s: is a symbolic link; not writing through it (remove it or choose another name)", shown);
        errno = saved_errno;
        return -1;
    }
    size_t plen = strlen(path);
    if (plen == 0 || path[plen - 1] == '/') {
        errf(err, errlen, "%s: not a file name (it names a directory)", path[0] ? shown : "\"\"");
        errno = saved_errno;
        return -1;
    }

    char tmp[PATH_MAX];
    int fd = create_temp(path, tmp, sizeof tmp);
    if (fd < 0) {
        int e = errno;
        errf(err, errlen, "%s: cannot create a temporary file beside it: %s", shown, errno_text(e, why, sizeof why));
        errno = saved_errno;
        return -1;
    }
    const char *step = "write";
    int failed = write_all(fd, tmp, data, len);
    if (failed == 0) {
        step = "fsync";
        while ((failed = fsync(fd)) != 0 && errno == EINTR)
            ;
    }
    int e = errno;
    /* close reports late write errors on some file systems (NFS); not
     * retried on EINTR, the descriptor is gone either way (Linux). */
    if (close(fd) != 0 && failed == 0 && errno != EINTR) {
        step = "close";
        failed = -1;
        e = errno;
    }
    if (failed == 0) {
        step = "rename";
        failed = rename(tmp, path);
        e = errno;
    }
    if (failed != 0) {
        unlink(tmp);
        errf(err, errlen, "%s: %s of %s failed: %s", shown, step, conf_show(shown_tmp, tmp, strlen(tmp)),
             errno_text(e, why, sizeof why));
        errno = saved_errno;
        return -1;
    }
    sync_dir(path);
    errno = saved_errno;
    return 0;
}

int st_open_regular(const char *path, size_t *len, char *err, size_t errlen)
{
    char shown[CONF_SHOW_BUF];
    conf_show(shown, path, strlen(path));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", shown, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", shown);
        close(fd);
        return -1;
    }
    *len = (size_t)st.st_size;
    return fd;
}
