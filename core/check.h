/*
 * The invariant checker (tests and debug builds): 0 when every invariant of
 * core/types.h holds, else -1 with the first violation described in why.
 */
#ifndef CUCACHE_CORE_CHECK_H
#define CUCACHE_CORE_CHECK_H

#include <stddef.h>

#include "core.h"

int core_check(core_dev_t *d, char *why, size_t len);
/* The same, for a caller that holds the device lock. */
int core_check_locked(const core_dev_t *d, char *why, size_t len);

#endif
