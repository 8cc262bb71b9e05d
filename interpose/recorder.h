/*
 * The trace recorder (trace.c; CUCACHE_TRACE, stats/trace.h): what the
 * hooks call to record the program's calls.
 */
#ifndef CUCACHE_INTERPOSE_RECORDER_H
#define CUCACHE_INTERPOSE_RECORDER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cucache/cuda_api.h"
#include "hook.h"

/* A trace is being recorded (CUCACHE_TRACE). */
extern atomic_bool hook_tracing;
/* The device of this thread's last runtime or driver call (-1: none):
 * what the recorder writes in a record's device field. */
extern HOOK_TLS int hook_last_dev;

/* Reads CUCACHE_TRACE and opens the file (the constructor); 0, or -1 with
 * err naming the variable and the problem. */
int hook_trace_start(char *err, size_t errlen);

/* Whether this hook call is to be recorded: tracing, and an application
 * call (not one cucache makes through the real API). */
static inline bool hook_trace_on(void)
{
    return HOOK_UNLIKELY(atomic_load_explicit(&hook_tracing, memory_order_relaxed)) && hook_depth == 0;
}
/* The recorder's clock now (for a record stamped before the call). */
uint64_t hook_trace_now(void);
/* Appends one record (stats/trace.h's kinds and apis) to this thread's
 * buffer; when: hook_trace_now() taken earlier, or 0 for now. */
void hook_trace_put(unsigned kind, unsigned api, int device, uint64_t stream, uint64_t addr, uint64_t size,
                    uint64_t when);
/* The same with the record's flags (TRACE_REC_*, a TRACE_CONF offset). */
void hook_trace_put_flags(unsigned kind, unsigned api, int device, uint64_t stream, uint64_t addr, uint64_t size,
                          uint64_t when, uint32_t flags);
/* A TRACE_DEVICE record for a device cucache has just opened (its free and
 * total bytes), when recording. */
void hook_trace_device(int ordinal);

/* The stream handle a trace records: a _ptsz call on handle 0 means the
 * per-thread default stream, recorded as CU_STREAM_PER_THREAD so that a
 * replay keys it per thread. */
static inline void *hook_trace_stream(void *s, bool per_thread)
{
    return per_thread && s == NULL ? (void *)CU_STREAM_PER_THREAD : s;
}

#endif
