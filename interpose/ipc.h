/*
 * IPC (ipc.c; the hooks are hook_ipc.c, docs/interposer.md "IPC"): the
 * export table, exports and imports of cucache's blocks.
 */
#ifndef CUCACHE_INTERPOSE_IPC_H
#define CUCACHE_INTERPOSE_IPC_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"
#include "cucache/cuda_api.h"
#include "hook.h"

/* Exports the live block at addr (in info, on hd) for another process:
 * fills the 64 bytes of a CUipcMemHandle/cudaIpcMemHandle_t.  CUDA's
 * error otherwise (a stream-ordered block is not exportable, as pool
 * memory is not; under ipc:strict a block not at its segment's start is
 * refused with a line). */
CUresult hook_ipc_export(hook_dev_t *hd, const core_ptr_info_t *info, char handle[64]);
/* Whether the 64 bytes are a handle cucache made (then hook_ipc_open
 * answers them; otherwise the real call does). */
bool hook_ipc_is_ours(const char handle[64]);
/* Opens a handle cucache made in another process: *out is exactly the
 * exported block.  ctx_hd: a device whose primary context is pushed around
 * the real calls (the runtime's hooks), or NULL for the current context.  CUDA's error otherwise, with a line where cucache
 * refuses (a corrupted handle or export table, one another user made). */
CUresult hook_ipc_open(const char handle[64], unsigned flags, hook_dev_t *ctx_hd, uintptr_t *out);
/* Closes an open of hook_ipc_open: CUDA_SUCCESS, or CUDA_ERROR_NOT_FOUND
 * when addr is not one (the real call answers then). */
CUresult hook_ipc_close(uintptr_t addr);
/* The backend's hold_query: whether an exported block the program freed
 * may be reused (no peer has it open any more). */
int hook_ipc_hold_query(uint64_t token);
/* addr inside a block this process opened by IPC: fills info (LIVE). */
bool hook_ipc_describe(uintptr_t addr, core_ptr_info_t *info);
/* A device's allocator is dropped (reset): its exports open no more. */
void hook_ipc_dev_dropped(int ordinal);

#endif
