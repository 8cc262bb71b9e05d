/*
 * The output sink: one line at a time on stderr, prefixed "cucache: ",
 * formatted into a stack buffer and written with one write(2), so lines of
 * several threads never interleave.  Never allocates, keeps errno.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hook.h"

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
    (void)!write(2, buf, n);
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

static void fmt_bytes(char *buf, size_t len, size_t v)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double x = (double)v;
    int u = 0;
    while (x >= 1024.0 && u < 6) {
        x /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%zu B", v);
    else
        snprintf(buf, len, "%.2f %s", x, unit[u]);
}

void hook_report_oom(const hook_dev_t *hd, const core_oom_t *oom)
{
    char rounded[32], requested[32], dfree[32], dtotal[32], alloc[32], reserved[32], largest[32], limit[32];
    fmt_bytes(rounded, sizeof rounded, oom->rounded);
    fmt_bytes(requested, sizeof requested, oom->requested);
    fmt_bytes(dfree, sizeof dfree, oom->device_free);
    fmt_bytes(dtotal, sizeof dtotal, oom->device_total);
    fmt_bytes(alloc, sizeof alloc, oom->allocated);
    fmt_bytes(reserved, sizeof reserved, oom->reserved > oom->allocated ? oom->reserved - oom->allocated : 0);
    fmt_bytes(largest, sizeof largest, oom->largest_free);
    if (oom->limit_hit)
        fmt_bytes(limit, sizeof limit, oom->limit);
    hook_warn(HOOK_WARN_OOM,
              "out of memory: tried to allocate %s (%s requested) on GPU %d%s%s; %s total, %s free on the device; "
              "%s allocated through cucache, %s reserved but unallocated, largest free cached block %s",
              rounded, requested, hd->ordinal, oom->limit_hit ? ", over the configured limit of " : "",
              oom->limit_hit ? limit : "", dtotal, dfree, alloc, reserved, largest);
}
