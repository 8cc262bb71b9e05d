/*
 * Peer access (hook_peer.c; docs/interposer.md "Expandable segments"): the
 * mappings of expandable segments follow it.
 */
#ifndef CUCACHE_INTERPOSE_PEER_H
#define CUCACHE_INTERPOSE_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "cucache/cuda_api.h"
#include "hook.h"

/* The access descriptors (read and write) of the devices that have peer
 * access to device `peer`'s primary context, for a new mapping of its
 * memory: into out (room for HOOK_MAX_DEVICES), their number. */
size_t hook_peer_access(int peer, CUmemAccessDesc *out);
/* The primary context of device `ordinal` is reset: its peer access, both
 * ways, ends (the other devices lose their access to its mappings). */
void hook_peer_reset(int ordinal);
/* backend.c: sets device `to`'s access (CU_MEM_ACCESS_FLAGS_PROT_*) to
 * [addr, addr+size) of hd's mapped pages (whole mappings), warning when the
 * driver refuses.  Called under the core's device lock (core_each_mapped). */
void hook_vmm_set_access(hook_dev_t *hd, CUdevice to, unsigned flags, uintptr_t addr, size_t size);

#endif
