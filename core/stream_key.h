/*
 * The core's key of a stream (core_stream_t), one encoding for the
 * interposer (interpose/hook.h: hook_stream_key, from CUDA handles) and the
 * replay (replay/engine.c: from recorded trace events):
 *
 *   the legacy default stream      CORE_STREAM_KEY_LEGACY
 *   a per-thread default stream    (thread << 4) | CORE_STREAM_KEY_PTDS_TAG
 *   any other stream               its handle
 *
 * Key 0 (memory not tied to a stream) is not a stream's.  Stream handles
 * are aligned pointers, so the low bits never collide with the two above.
 * The thread number is the caller's: the interposer's is never reused (a
 * new thread never inherits the blocks of an exited thread's stream, whose
 * work may still run); the replay's is the recorded thread id.
 */
#ifndef CUCACHE_CORE_STREAM_KEY_H
#define CUCACHE_CORE_STREAM_KEY_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"

enum {
    CORE_STREAM_KEY_LEGACY = 1,     /* the legacy default stream's key */
    CORE_STREAM_KEY_PTDS_TAG = 0x3, /* low bits of a per-thread default stream's key */
    CORE_STREAM_KEY_TAG_BITS = 4,   /* the thread number starts above these */
};

typedef enum core_stream_kind_e {
    CORE_STREAM_LEGACY,     /* the legacy default stream */
    CORE_STREAM_PER_THREAD, /* a thread's per-thread default stream */
    CORE_STREAM_HANDLE,     /* a stream the program created: its handle */
} core_stream_kind_t;

/* The key of a stream of this kind; handle counts for CORE_STREAM_HANDLE
 * only, thread for CORE_STREAM_PER_THREAD only. */
static inline core_stream_t core_stream_key(core_stream_kind_t kind, uintptr_t handle, uint64_t thread)
{
    switch (kind) {
    case CORE_STREAM_LEGACY:
        return CORE_STREAM_KEY_LEGACY;
    case CORE_STREAM_PER_THREAD:
        return (core_stream_t)(thread << CORE_STREAM_KEY_TAG_BITS) | CORE_STREAM_KEY_PTDS_TAG;
    case CORE_STREAM_HANDLE:
        break;
    }
    return (core_stream_t)handle;
}

/* Whether k is a per-thread default stream's key. */
static inline bool core_stream_key_is_ptds(core_stream_t k)
{
    return (k & (((core_stream_t)1 << CORE_STREAM_KEY_TAG_BITS) - 1)) == CORE_STREAM_KEY_PTDS_TAG;
}

#endif
