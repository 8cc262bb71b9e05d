/*
 * Submissions of work (submit.c, submit_entry.S, submit_table.h): every
 * call that may put work on a stream is counted, and the first one after a
 * hand-out moves the core's work_epoch on.
 */
#ifndef CUCACHE_INTERPOSE_SUBMIT_H
#define CUCACHE_INTERPOSE_SUBMIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core.h"

enum {
    HOOK_API_QUIET = 0,   /* puts no work on a stream */
    HOOK_API_SUBMITS = 1, /* may put work that uses device memory on a stream */
    HOOK_API_OPAQUE = 2,  /* effects unknown (cuGetExportTable) */
    HOOK_API_UNKNOWN = 3, /* not in the table (a newer CUDA's) */
};

/* Set in hook_submit_epoch for good once a submission may go unseen. */
#define HOOK_SUBMIT_BLIND CORE_EPOCH_UNSEEN

/* The core's work_epoch: odd once a block was handed out at its value,
 * moved on to the next even value by the first submission after
 * (| HOOK_SUBMIT_BLIND); submit.c says why a free comparing it is exact. */
extern _Atomic uint64_t hook_submit_epoch;

/* HOOK_API_* of a driver name (exact or base: suffixes are ignored). */
int hook_api_kind(const char *symbol);
/* The counting trampoline exported as `symbol`, or NULL. */
void *hook_submit_export(const char *symbol);
/* What a caller gets for the driver's answer `real` to a lookup of
 * `symbol`: a counting trampoline for a submitting name, `real` itself for
 * a quiet one; an unknown or opaque name makes the count blind. */
void *hook_submit_wrap(const char *symbol, void *real);
void hook_submit_go_blind(void);
/* Fills every exported trampoline's driver address that is still empty. */
void hook_submit_resolve_all(void *(*lookup)(const char *name));
/* Calls that submitted so far, summed over the threads. */
uint64_t hook_submit_count(void);
/* Whether a submission may have gone unseen (HOOK_SUBMIT_BLIND). */
bool hook_submit_unseen(void);

#endif
