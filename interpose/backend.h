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

/* The core's seam: real driver calls in the device's primary context,
 * capture-aware; fences over streams (fence.h). */
extern const core_backend_t hook_backend;

/* What hook_enter changed on the calling thread, for hook_leave to undo. */
typedef struct hook_scope_s {
    bool pushed;              /* hd's primary context was pushed */
    bool relaxed;             /* the thread's capture mode was relaxed */
    CUstreamCaptureMode mode; /* relaxed: the mode to restore */
} hook_scope_t;
/* Makes hd's primary context current on the calling thread for one of
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
