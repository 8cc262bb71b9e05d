/*
 * The program's CUDA contexts (hook_ctx.c): a second one stops every
 * device's hand-outs.
 */
#ifndef CUCACHE_INTERPOSE_CONTEXTS_H
#define CUCACHE_INTERPOSE_CONTEXTS_H

#include <stdatomic.h>

/* The process has (or may have) a second CUDA context: stops the hand-outs
 * on every device and waits for those made (hook_ctx.c); every call waits,
 * so that no context's creator returns before the fences completed. */
void hook_second_context(void);
/* Set for good once the program has a second CUDA context (hook_ctx.c):
 * the backend's fence_order then refuses. */
extern atomic_bool hook_many_contexts;
/* Context creations and primary-context retains the hooks saw (a process
 * statistic, contexts_seen: whether the runtime's reach these hooks). */
extern atomic_ulong hook_contexts_seen;

#endif
