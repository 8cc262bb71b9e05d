/*
 * Streams and captures (streams.c): the core's key of a stream handle, the
 * program's streams counted for the core, the captures in progress.
 */
#ifndef CUCACHE_INTERPOSE_STREAMS_H
#define CUCACHE_INTERPOSE_STREAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"
#include "cucache/cuda_api.h"
#include "hook.h"
#include "stream_key.h"

/* This thread's per-thread default stream's key (core/stream_key.h), with
 * a thread number of its own: never reused, so a new thread never inherits
 * the blocks of an exited thread's stream (whose work may still run). */
extern HOOK_TLS core_stream_t hook_ptds_key;
core_stream_t hook_key_ptds_new(void);
static inline core_stream_t hook_key_ptds(void)
{
    core_stream_t k = hook_ptds_key;
    return HOOK_LIKELY(k != 0) ? k : hook_key_ptds_new();
}

/* The core key of a stream handle; per_thread: the call was a _ptsz entry
 * point (handle 0 is the per-thread default stream). */
static inline core_stream_t hook_stream_key(CUstream s, bool per_thread)
{
    uintptr_t v = (uintptr_t)s;
    if (v == 0)
        return per_thread ? hook_key_ptds() : core_stream_key(CORE_STREAM_LEGACY, 0, 0);
    if (v == (uintptr_t)CU_STREAM_LEGACY)
        return core_stream_key(CORE_STREAM_LEGACY, 0, 0);
    if (v == (uintptr_t)CU_STREAM_PER_THREAD)
        return hook_key_ptds();
    return core_stream_key(CORE_STREAM_HANDLE, v, 0);
}

/* A stream the program created in hd's primary context: true when counted
 * (the core told, and the trace given a counted record). */
bool hook_stream_created(hook_dev_t *hd, CUstream s, unsigned flags);
/* Called with hd->lock held: the streams the program has on the device
 * (core_set_streams' count): those it created, and the legacy default
 * stream once seen busy beside them (hd->default_busy). */
unsigned hook_live_streams(const hook_dev_t *hd);
/* The program's work was seen on the legacy default stream: counted, with
 * the trace's counted record, once (called with no lock held). */
void hook_stream_default_busy(hook_dev_t *hd);
/* A stream about to be destroyed leaves the lists before the real call, so
 * that a creation on another thread that gets the same handle back is
 * counted and fenced: the device it was counted on (its flags set), or -1.
 * If the destruction fails, hook_stream_created puts it back. */
int hook_stream_forget(CUstream s, unsigned *flags);
/* After a successful destruction. */
void hook_stream_destroyed(CUstream s);
/* A created context is destroyed: its streams are gone with it, and their
 * handles may name new streams of other contexts (ctx_devs.c). */
void hook_streams_of_context_gone(void);
/* A stream is about to be destroyed: if it is a known non-blocking stream,
 * an event recorded on it now joins every later fence until it completes
 * (the destroyed stream's queued work still runs and may read memory the
 * program frees afterwards). */
void hook_stream_retiring(CUstream s);
/* A capture began / ended on stream s (per_thread: _ptsz entry point). */
void hook_capture_begin(hook_dev_t *hd, CUstream s, bool per_thread);
void hook_capture_end(CUstream s, bool per_thread);
/* Whether s is being captured (then stream-ordered calls on it pass
 * through: they become graph nodes). */
bool hook_stream_capturing(hook_dev_t *hd, CUstream s, bool per_thread);

/* The device whose memory a stream-ordered call on s must use: the
 * stream's own (a created stream may belong to another device than the
 * current one), or, for the default streams, the current device (runtime:
 * cudaGetDevice; driver: the current context).  NULL: pass through. */
hook_dev_t *hook_stream_device(CUstream s, bool runtime);

#endif
