/*
 * The output sink: one line at a time on stderr (or CUCACHE_LOG's file,
 * opened O_APPEND at start-up by hook_log_open: hook_log_fd), prefixed
 * "cucache: ", formatted into a stack buffer and written with one write(2),
 * so lines of several threads never interleave.  Never allocates, keeps
 * errno.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "conf.h" /* conf_show */
#include "env.h"
#include "log.h"
#include "st.h"

int hook_log_fd = 2; /* CUCACHE_LOG's file, or stderr */

int hook_log_open(const char *tmpl, char *err, size_t errlen)
{
    char path[4096], shown[CONF_SHOW_BUF], why[384];
    if (st_expand_name(tmpl, 0, 0, path, sizeof path, why, sizeof why) != 0) {
        snprintf(err, errlen, "CUCACHE_LOG: %s", why);
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "CUCACHE_LOG: cannot open '%s': %s%s", conf_show(shown, path, strlen(path)), strerror(e),
                 e == ELOOP ? " (a symbolic link is refused)" : "");
        return -1;
    }
    hook_log_fd = fd;
    return 0;
}

static void vlog(const char *fmt, va_list ap)
{
    int saved = errno;
    char buf[1024];
    size_t n = sizeof "cucache: " - 1;
    memcpy(buf, "cucache: ", n);
    int k = vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
    if (k < 0)
        k = 0;
    n += (size_t)k < sizeof buf - n - 1 ? (size_t)k : sizeof buf - n - 2;
    buf[n++] = '\n';
    (void)!write(hook_log_fd, buf, n);
    errno = saved;
}

void hook_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
}

static atomic_ulong warn_count[HOOK_WARN_KINDS];

enum { WARN_FIRST = 5 }; /* printed in full before rate limiting */

void hook_warn(hook_warn_t kind, const char *fmt, ...)
{
    unsigned long n = atomic_fetch_add(&warn_count[kind], 1) + 1;
    if (n > WARN_FIRST && (n & (n - 1)) != 0)
        return;
    char line[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n <= WARN_FIRST)
        hook_log("%s%s", line, n == WARN_FIRST ? " (further warnings of this kind: one line per doubling)" : "");
    else
        hook_log("%s (%lu such warnings so far)", line, n);
}
