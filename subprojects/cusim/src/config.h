/*
 * The simulated device's configuration (CUCACHE_SIM_* variables, read by
 * config.c: DEVICES, CAPACITY, ALLOC_US, FREE_US, COPY_GBPS, RACE,
 * RACE_FATAL, VMM_GRANULARITY, VMM_US, KERNEL_US, SPIN_US, COHERENT,
 * SHARED; README.md's settings table) and the virtual memory calls that
 * cost time.  Included by engine.h.
 */
#ifndef CUCACHE_SIM_CONFIG_H
#define CUCACHE_SIM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cusim/sim.h"

#define SIM_KERNEL_TIMES 32

/* The calls of the virtual memory API that cost time (CUCACHE_SIM_VMM_US)
 * and can be made to fail (cucacheSimVmmFail): sim.h's enum. */
typedef enum cucache_sim_vmm_call sim_vmm_call_t;
#define SIM_VMM_RESERVE CUCACHE_SIM_VMM_RESERVE
#define SIM_VMM_ADDRESS_FREE CUCACHE_SIM_VMM_ADDRESS_FREE
#define SIM_VMM_CREATE CUCACHE_SIM_VMM_CREATE
#define SIM_VMM_RELEASE CUCACHE_SIM_VMM_RELEASE
#define SIM_VMM_MAP CUCACHE_SIM_VMM_MAP
#define SIM_VMM_UNMAP CUCACHE_SIM_VMM_UNMAP
#define SIM_VMM_SET_ACCESS CUCACHE_SIM_VMM_SET_ACCESS
#define SIM_VMM_NCALLS 7

typedef struct sim_config_s {
    int devices;
    size_t capacity;
    unsigned alloc_us, free_us;
    double copy_gbps; /* 0: instant */
    bool race;
    bool race_fatal;
    size_t vmm_granularity;          /* cuMemGetAllocationGranularity's answer, minimum and recommended */
    uint64_t vmm_ns[SIM_VMM_NCALLS]; /* cost of each call of the virtual memory API (sim_vmm_call_t) */
    /* kernels (CUCACHE_SIM_KERNEL_US): the first entry whose name is part
     * of the kernel's name gives its time, else the default */
    uint64_t kernel_ns;
    struct {
        char name[64];
        uint64_t ns;
    } kernels[SIM_KERNEL_TIMES];
    unsigned nkernels;
    unsigned spin_us; /* CUCACHE_SIM_SPIN_US: a worker spins this close to an op's end instead of sleeping */
    bool coherent;    /* CUCACHE_SIM_COHERENT: the devices say the CPU shares their memory coherently (ATS) */
    char shared_key[65]; /* CUCACHE_SIM_SHARED: the key of the device shared with other processes; "": per-process */
} sim_config_t;

/* Reads the CUCACHE_SIM_* variables in this order, with their defaults for
 * those unset; false after printing the first bad one (its name, its value
 * shown safely, what it accepts). */
bool sim_config_read(sim_config_t *cfg);

/* What the devices are called (cuDeviceGetName, nvmlDeviceGetName). */
#define SIM_DEVICE_NAME "cucache simulated GPU (H100-like)"
/* The unit a device's capacity is rounded down to (engine.h's SIM_PAGE). */
#define SIM_CONFIG_PAGE ((size_t)2 << 20)
/* The 16 bytes of cuDeviceGetUuid for device ordinal: distinct for each
 * simulated GPU, as a real GPU's are.  A shared device's are derived from
 * its key, so every process of the key sees the same; a per-process
 * device's from the process (pid and start time), so two processes that
 * each have their own device never see the same UUID. */
void sim_device_uuid(const sim_config_t *cfg, int ordinal, uint8_t out[16]);
/* The identity of the devices cfg describes, as the processes sharing
 * them must agree on it (shared.h). */
struct sim_shared_identity_s;
void sim_config_identity(const sim_config_t *cfg, struct sim_shared_identity_s *id);

#endif
