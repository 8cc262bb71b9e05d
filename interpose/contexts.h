/*
 * The program's CUDA contexts: a second one stops every device's
 * hand-outs (hook_ctx.c), and each context it creates has an allocator of
 * its own (ctx_devs.c).
 */
#ifndef CUCACHE_INTERPOSE_CONTEXTS_H
#define CUCACHE_INTERPOSE_CONTEXTS_H

#include <stdatomic.h>
#include <stdbool.h>

#include "cucache/cuda_api.h"
#include "hook.h"

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

/* A context the program created (cuCtxCreate) on device handle dev: it
 * gets a slot of hook_devs, its allocator opened on its first cached call
 * (ctx_devs.c).  Warns once and leaves it uncached when every slot is taken. */
void hook_ctx_register(CUcontext ctx, CUdevice dev);
/* The allocator serving the created context ctx (opened if open and not
 * yet), or NULL: not a context the program created through the hooks. */
hook_dev_t *hook_ctx_dev(CUcontext ctx, bool open);
/* The created context ctx is about to be destroyed: its allocator waits
 * for its pending frees, gives its segments back and is destroyed, and its
 * slot is free again.  Nothing when ctx is not one of them. */
void hook_ctx_destroying(CUcontext ctx);
/* In a fork child, after its devices were reset (state.c): no slot taken. */
void hook_ctx_forked(void);
/* Created contexts whose allocator was opened, ever (a process statistic,
 * contexts_cached). */
extern atomic_ulong hook_contexts_cached;

#endif
