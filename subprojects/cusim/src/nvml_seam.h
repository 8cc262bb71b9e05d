/*
 * The one seam between the simulated NVML and the driver of the same
 * process (driver_nvml.c): on a device of the process's own (no
 * CUCACHE_SIM_SHARED), NVML lists the process that holds it, as a GPU's
 * NVML lists every process with a context on it.  The NVML finds the
 * function with dlsym in a libcuda.so.1 already loaded; without one, no
 * process uses the device.
 */
#ifndef CUCACHE_SIM_NVML_SEAM_H
#define CUCACHE_SIM_NVML_SEAM_H

#define SIM_NVML_SEAM "cucacheSimNvmlUsage"

/* This process's use of device `ordinal`: 1 with *bytes its device memory
 * (cuMemGetInfo's total less free) when it has a context there or holds
 * memory; 0 when it does not use the device (or the driver is not
 * initialised). */
typedef int (*sim_nvml_usage_fn)(int ordinal, unsigned long long *bytes);

#endif
