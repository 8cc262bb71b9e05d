/*
 * Who holds a device's memory (nvml.c): NVML's answer, for the OOM report
 * and the GPU's registry.
 */
#ifndef CUCACHE_INTERPOSE_NVML_PROCS_H
#define CUCACHE_INTERPOSE_NVML_PROCS_H

#include <stdbool.h>
#include <stddef.h>

#include "hook.h"

/* The processes holding memory on hd's device, from NVML, into out
 * (out->procs from hostalloc, the caller frees it); when NVML cannot say,
 * out->unavailable points at why, written there.  Loads libnvidia-ml.so.1
 * at the first call: only for a report, never on the allocation path. */
struct st_gpu_procs_s;
void hook_nvml_procs(const hook_dev_t *hd, struct st_gpu_procs_s *out, char *why, size_t whylen);
/* NVML's form of the device's UUID ("GPU-..."); false when the driver
 * cannot say. */
bool hook_device_uuid(const hook_dev_t *hd, char out[48]);

#endif
