/*
 * Diagnostics (diag.c, signal.c): the OOM report, the exit summary,
 * snapshots and their triggers, the allocation sites (CUCACHE_STACKS).
 */
#ifndef CUCACHE_INTERPOSE_DIAG_H
#define CUCACHE_INTERPOSE_DIAG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "fail.h"
#include "hook.h"

/* Acts on the environment (env.h; the constructor): opens CUCACHE_LOG's
 * file, enables stacks, starts the signal thread, registers the exit
 * report; 0, or -1 with err naming the variable and the value. */
int hook_diag_start(char *err, size_t errlen);
/* The thread that writes a snapshot on SIGUSR1 (signal.c); 0, or -1 with err set. */
int hook_signal_start(char *err, size_t errlen);
/* A device's allocator opened: installs its event ring when snapshots are on. */
void hook_diag_dev_opened(int ordinal, core_dev_t *d);
/* Reports an allocation cucache could not serve: the full report on the
 * process's first failure, one line with the count afterwards; the first
 * also writes a snapshot when CUCACHE_SNAPSHOT_ON has oom. */
void hook_report_oom(const hook_dev_t *hd, const hook_fail_t *f);
/* cucache could not serve an allocation and the runtime's own allocator
 * did: counted, and said once per process (the program saw no failure). */
void hook_fallback_served(const hook_dev_t *hd, const core_oom_t *oom);
/* Set by hook_fallback_served: this thread's allocation in progress was
 * served by the runtime's allocator after cucache's path failed; the
 * recorder reads and clears it (TRACE_REC_FALLBACK). */
extern HOOK_TLS bool hook_fallback_now;
/* Writes a snapshot of every device to the expanded template (device: %d,
 * -1 for all); why names the trigger in the line it prints.  0 or -1. */
int hook_snapshot(const char *tmpl, int device, const char *why);
/* CUCACHE_SNAPSHOT, or NULL. */
const char *hook_snapshot_template(void);
/* The memory summary of a device into sink (NULL: stderr, one block);
 * -1 when the device has no allocator. */
int hook_summary(int device, void (*sink)(void *ctx, const char *line), void *ctx);
/* The memory summary of one allocator (a created context's, before it is
 * destroyed: the exit summary never sees it), on stderr, one block. */
void hook_summary_core(core_dev_t *d, int device);

/* CUCACHE_STACKS (diag.c): each allocation's call stack, interned by
 * stats/stack.c, as the block's site.  Off, the hooks pay one predictable
 * branch.  It runs before the allocator takes any lock, and holds none
 * when it returns: with Python frames it may wait for the GIL
 * (stats/pystack.c), which must not happen under a cucache lock. */
extern atomic_bool hook_stacks;
uint32_t st_stack_capture(void); /* stats/st.h */

static inline uint32_t hook_site(void)
{
    return HOOK_UNLIKELY(atomic_load_explicit(&hook_stacks, memory_order_relaxed)) ? st_stack_capture() : 0;
}

/* What cucache_record_memory_history does (diag.c): the event ring of every device,
 * and of those opened later, on (max_entries > 0) or off (0); stacks in
 * `mode` (st_stack_mode_t) with `depth` frames of each kind (1..64), depth
 * 0 off, -1 as they are.  0, or -1 with err set. */
int hook_record_history(size_t max_entries, int mode, int depth, char *err, size_t errlen);

#endif
