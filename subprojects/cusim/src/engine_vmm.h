/*
 * The simulated device's virtual memory, shared by engine_vmm.c (the model)
 * and the driver files that answer for it (driver_vmm.c, driver_ptr.c).
 * Called with sim.lock held.
 */
#ifndef CUCACHE_SIM_ENGINE_VMM_H
#define CUCACHE_SIM_ENGINE_VMM_H

#include <sys/types.h>

#include "engine.h"

/* A handle is this tag with the allocation's id in the low bits. */
#define SIM_VMM_HANDLE_TAG 0x5c4d000000000000ull
#define SIM_VMM_ID_MASK 0x0000ffffffffffffull

/* A physical allocation: cuMemCreate's, or one imported from a descriptor. */
typedef struct sim_phys_s {
    uint64_t id; /* its handle's low bits; never reused */
    int fd;      /* the memfd holding its bytes */
    size_t size; /* bytes (a multiple of the granularity) */
    int device;  /* where it lives */
    CUmemAllocationProp prop;
    unsigned refs;     /* references: creation or import, and each retain */
    unsigned maps;     /* mappings of it */
    bool charged;      /* created here: counted in its device's vmm_bytes */
    bool exported;     /* a descriptor was handed out (cuMemExportToShareableHandle) */
    bool lingering;    /* released, but a descriptor of it is still open here: charged until it closes */
    uint64_t key;      /* its first key for the race detector */
    uint64_t block_id; /* CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID */
    dev_t st_dev;      /* the memfd's identity: an import of the process's own */
    ino_t st_ino;
} sim_phys_t;

typedef struct sim_reservation_s {
    uintptr_t addr;
    size_t size;
    bool freeing; /* cuMemAddressFree is unmapping what is left: no new mappings */
} sim_reservation_t;

typedef struct sim_vmm_s {
    uint8_t *base; /* the reservable addresses: [base, base + span) */
    size_t span;
    sim_extents_t addrs;    /* the free ones */
    sim_reservation_t *res; /* reservations, sorted by address */
    size_t nres, cap_res;
    sim_phys_t **phys; /* physical allocations, sorted by id */
    size_t nphys, cap_phys;
    uint64_t next_id;
    uint64_t next_key;
} sim_vmm_t;

extern sim_vmm_t vmm;

sim_reservation_t *sim_vmm_reservation_of(uintptr_t addr);
/* align: a power of two; hint: where to place it if free there, or 0. */
CUresult sim_vmm_reserve(size_t size, size_t align, uintptr_t hint, uintptr_t *out);

sim_phys_t *sim_vmm_phys(CUmemGenericAllocationHandle h);
CUmemGenericAllocationHandle sim_vmm_handle(const sim_phys_t *p);
/* prop already checked. */
CUresult sim_vmm_create(size_t size, const CUmemAllocationProp *prop, sim_phys_t **out);
/* One reference less (CUDA_ERROR_INVALID_VALUE when none is left). */
CUresult sim_vmm_release(sim_phys_t *p);
CUresult sim_vmm_export_fd(sim_phys_t *p, int *out);
CUresult sim_vmm_import_fd(int fd, sim_phys_t **out);

/* Maps the first size bytes of p at addr (checked: free, in a reservation). */
CUresult sim_vmm_map(uintptr_t addr, size_t size, sim_phys_t *p);
/* The mapping containing addr, or NULL. */
sim_alloc_t *sim_vmm_mapping(uintptr_t addr);
/* [addr, addr+size) is exactly a run of adjacent whole mappings. */
bool sim_vmm_whole_mappings(uintptr_t addr, size_t size);
/* Unmaps a run of whole mappings (checked), after the race check and the
 * wait for queued work on them; CUDA_ERROR_INVALID_VALUE when another
 * thread unmapped some of them meanwhile. */
CUresult sim_vmm_unmap(uintptr_t addr, size_t size, const char *what);
/* cuMemAddressFree: unmaps what is left mapped, then frees (checked here). */
CUresult sim_vmm_address_free(uintptr_t ptr, size_t size);
/* Sets one device's access to a run of whole mappings (checked). */
void sim_vmm_set_access(uintptr_t addr, size_t size, int device, unsigned flags);

#endif
