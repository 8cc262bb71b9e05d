/*
 * The output sink (log.c): one line at a time, to stderr or CUCACHE_LOG's
 * file, and warnings rate-limited per kind.
 */
#ifndef CUCACHE_INTERPOSE_LOG_H
#define CUCACHE_INTERPOSE_LOG_H

#include <stddef.h>

/* Where cucache's lines go: 2, or CUCACHE_LOG's file (hook_log_open, at start-up). */
extern int hook_log_fd;
/* One line on stderr, prefixed "cucache: ".  Never allocates; errno kept. */
void hook_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Sends every line from now on to the file CUCACHE_LOG's template names
 * (log.c); 0, or -1 with err naming the variable and the file. */
int hook_log_open(const char *tmpl, char *err, size_t errlen);

typedef enum hook_warn_e {
    HOOK_WARN_BAD_FREE,
    HOOK_WARN_BACKEND,
    HOOK_WARN_IPC,
    HOOK_WARN_KINDS,
} hook_warn_t;

/* hook_log, rate-limited per kind: the first few, then one line per power
 * of two with the running count. */
void hook_warn(hook_warn_t kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
