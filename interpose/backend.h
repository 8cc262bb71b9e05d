/*
 * The core's device seam (backend.c): hook_backend, and the pair every
 * cucache call into the driver on a device's behalf goes through.
 */
#ifndef CUCACHE_INTERPOSE_BACKEND_H
#define CUCACHE_INTERPOSE_BACKEND_H

#include <stdbool.h>

#include "core.h"
#include "cucache/cuda_api.h"
#include "hook.h"

/* The core's seam: real driver calls in the context the allocator serves,
 * capture-aware; fences over streams (fence.h).  Its ctx is NULL for a
 * device's primary context; a created context's allocator gets a copy whose
 * ctx is its hook_dev_t (ctx_devs.c). */
extern const core_backend_t hook_backend;

/* The allocator a backend call serves: ctx's, or the device's primary one. */
static inline hook_dev_t *hook_backend_dev(void *ctx, int device)
{
    return ctx ? (hook_dev_t *)ctx : &hook_devs[device];
}
/* The backend's ctx for hd's allocator (hook_backend_dev's inverse). */
static inline void *hook_backend_ctx(hook_dev_t *hd)
{
    return hook_dev_is_primary(hd) ? NULL : hd;
}

/* What hook_enter changed on the calling thread, for hook_leave to undo. */
typedef struct hook_scope_s {
    bool pushed;              /* hd's context (hd->primary) was pushed */
    bool relaxed;             /* the thread's capture mode was relaxed */
    CUstreamCaptureMode mode; /* relaxed: the mode to restore */
} hook_scope_t;
/* Makes hd's context (hd->primary) current on the calling thread for one of
 * cucache's own driver calls (pushed when another context, or none, is
 * current) and, with relax, relaxes the thread's capture mode while the
 * device captures, so that the call is not refused in global capture mode.
 * False when the context cannot be made current (hook_backend_error set;
 * nothing to undo).  Every cucache call into the driver on a device's
 * behalf goes through this pair. */
bool hook_enter(hook_dev_t *hd, bool relax, hook_scope_t *sc);
void hook_leave(hook_scope_t *sc);

/* The CUresult of the last failed device call the backend made on this
 * thread (CUDA_SUCCESS when none): what a CORE_EFAIL stands for. */
extern HOOK_TLS CUresult hook_backend_error;

#endif
