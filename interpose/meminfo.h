/*
 * The answer to cudaMemGetInfo and cuMemGetInfo_v2 (hook_rt_mem.c), which
 * counts the cache's unused memory as free.
 */
#ifndef CUCACHE_INTERPOSE_MEMINFO_H
#define CUCACHE_INTERPOSE_MEMINFO_H

#include <stdbool.h>
#include <stddef.h>

#include "hook.h"

/* cudaMemGetInfo / cuMemGetInfo_v2: adds what the cache holds unused to
 * the device's free bytes; a limit becomes the total (hook_rt_mem.c). */
void hook_adjust_meminfo(hook_dev_t *hd, size_t *free_bytes, size_t *total);
/* The answer of cudaMemGetInfo (runtime) or cuMemGetInfo_v2 from the real
 * call's figures f and t: adjusted as above unless the call is cucache's
 * own, then stored where the program asked (NULL: not wanted). */
void hook_meminfo_answer(bool runtime, size_t f, size_t t, size_t *free_bytes, size_t *total);

#endif
