/*
 * Driver API of the simulated device: virtual memory management
 * (engine_vmm.c has the model).  The rules and error codes are CUDA's
 * (driver API, "Virtual Memory Management"; shared/notes/vmm.md 1.2), with
 * these choices where CUDA documents none:
 *
 *   - a bad handle (never created, or released) is CUDA_ERROR_INVALID_VALUE
 *     everywhere, cuMemRelease included (undefined behaviour in CUDA);
 *   - cuMemMap over addresses already mapped is CUDA_ERROR_INVALID_VALUE;
 *   - cuMemUnmap and cuMemSetAccess take runs of whole mappings (one call
 *     may cover several adjacent ones); a range that starts or ends inside
 *     a mapping, or covers unmapped addresses, is CUDA_ERROR_INVALID_VALUE;
 *   - cuMemAddressFree of a reservation that still has mappings unmaps them
 *     (with cuMemUnmap's race check), as a report says CUDA does; cuMemMap
 *     into it meanwhile is refused;
 *   - location HOST and HOST_NUMA (host memory through this API) are
 *     CUDA_ERROR_NOT_SUPPORTED, as the device attributes say; so are
 *     WIN32 and FABRIC handles, compression, RDMA-capable, tile-pool and
 *     hardware-decompression allocations;
 *   - cuMemSetAccess that takes access away waits for the devices' queued
 *     work first (the call is documented as synchronous), so that queued
 *     copies never fault the simulator;
 *   - exporting a type the allocation was not created with is
 *     CUDA_ERROR_INVALID_VALUE; a descriptor that is not an exported
 *     allocation of the simulated device is CUDA_ERROR_INVALID_VALUE.
 *
 * Each call spends its configured cost (CUCACHE_SIM_VMM_US) before taking
 * the engine lock; none waits for queued work, as on a GPU, except: cuMemUnmap
 * waits for work it reports as a race (with the race detector off, for the
 * devices to be idle), and cuMemSetAccess as above.  Stream capture does
 * not restrict them.
 */
#include <string.h>
#include <unistd.h>

#include "driver.h"
#include "engine_vmm.h"

static bool valid_device(int id)
{
    return id >= 0 && id < sim.ndev;
}

/* cuMemCreate's and cuMemGetAllocationGranularity's checks of a prop. */
static CUresult check_prop(const CUmemAllocationProp *prop)
{
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned types = (unsigned)prop->requestedHandleTypes;
    if (types & ~0xfu)
        return CUDA_ERROR_INVALID_VALUE;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!valid_device(prop->location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        return types ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (types & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (prop->allocFlags.usage & ~3u) /* tile pool (1), hardware decompression (2) */
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->allocFlags.compressionType || prop->allocFlags.gpuDirectRDMACapable || prop->allocFlags.usage)
        return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

static size_t host_page(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static bool aligned(uintptr_t v, size_t to)
{
    return v % to == 0;
}

/* ------------------------------------------------------------------------
 * Reservations
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags)
{
    sim_vmm_cost(SIM_VMM_RESERVE);
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ptr || size == 0 || !aligned(size, host_page()) || !aligned(addr, host_page()) ||
        (alignment & (alignment - 1)) || flags)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    r = sim_vmm_injected(SIM_VMM_RESERVE);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    size_t align = alignment > sim.cfg.vmm_granularity ? alignment : sim.cfg.vmm_granularity;
    uintptr_t p = 0;
    r = sim_vmm_reserve(size, align, (uintptr_t)addr, &p);
    if (r == CUDA_SUCCESS)
        *ptr = (CUdeviceptr)p;
    return drv_leave(r);
}

SIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    sim_vmm_cost(SIM_VMM_ADDRESS_FREE);
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_reservation_t *res = sim_vmm_reservation_of((uintptr_t)ptr);
    if (!res || res->addr != ptr || res->size != size || res->freeing)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    r = sim_vmm_injected(SIM_VMM_ADDRESS_FREE);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    return drv_leave(sim_vmm_address_free((uintptr_t)ptr, size));
}

/* ------------------------------------------------------------------------
 * Physical allocations
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                             unsigned long long flags)
{
    sim_vmm_cost(SIM_VMM_CREATE);
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle || !prop || flags)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    r = check_prop(prop);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (size == 0 || !aligned(size, sim.cfg.vmm_granularity))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    r = sim_vmm_injected(SIM_VMM_CREATE);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_phys_t *p;
    r = sim_vmm_create(size, prop, &p);
    if (r == CUDA_SUCCESS)
        *handle = sim_vmm_handle(p);
    return drv_leave(r);
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    sim_vmm_cost(SIM_VMM_RELEASE);
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_phys_t *p = sim_vmm_phys(handle);
    if (!p || p->refs == 0)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    r = sim_vmm_injected(SIM_VMM_RELEASE);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    return drv_leave(sim_vmm_release(p));
}

SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_alloc_t *a = sim_vmm_mapping((uintptr_t)addr);
    if (!handle || !a)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    a->phys->refs++;
    *handle = sim_vmm_handle(a->phys);
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_phys_t *p = sim_vmm_phys(handle);
    if (!prop || !p || p->refs == 0)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *prop = p->prop;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!granularity || !prop ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    r = check_prop(prop);
    if (r == CUDA_SUCCESS)
        *granularity = sim.cfg.vmm_granularity;
    return drv_leave(r);
}

/* ------------------------------------------------------------------------
 * Sharing between processes: POSIX file descriptors
 * ---------------------------------------------------------------------- */

static CUresult check_handle_type(CUmemAllocationHandleType type)
{
    switch ((unsigned)type) {
    case CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR:
        return CUDA_SUCCESS;
    case CU_MEM_HANDLE_TYPE_WIN32:
    case CU_MEM_HANDLE_TYPE_WIN32_KMT:
    case CU_MEM_HANDLE_TYPE_FABRIC:
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType, unsigned long long flags)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_phys_t *p = sim_vmm_phys(handle);
    if (!shareableHandle || !p || p->refs == 0 || flags)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    r = check_handle_type(handleType);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (!(p->prop.requestedHandleTypes & handleType))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    int fd = -1;
    r = sim_vmm_export_fd(p, &fd);
    if (r == CUDA_SUCCESS)
        *(int *)shareableHandle = fd;
    return drv_leave(r);
}

SIM_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    r = check_handle_type(shHandleType);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    /* the descriptor is passed in the pointer's bits, as in CUDA */
    sim_phys_t *p;
    r = sim_vmm_import_fd((int)(intptr_t)osHandle, &p);
    if (r == CUDA_SUCCESS)
        *handle = sim_vmm_handle(p);
    return drv_leave(r);
}

/* ------------------------------------------------------------------------
 * Mappings and access
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags)
{
    sim_vmm_cost(SIM_VMM_MAP);
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    size_t g = sim.cfg.vmm_granularity;
    sim_phys_t *p = sim_vmm_phys(handle);
    if (flags || offset || !p || p->refs == 0 || size == 0 || !aligned(ptr, g) || !aligned(size, g) || size > p->size)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_reservation_t *res = sim_vmm_reservation_of((uintptr_t)ptr);
    if (!res || res->freeing || size > res->size - (ptr - res->addr) || sim_alloc_overlaps(ptr, ptr + size))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    r = sim_vmm_injected(SIM_VMM_MAP);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    return drv_leave(sim_vmm_map(ptr, size, p));
}

SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    sim_vmm_cost(SIM_VMM_UNMAP);
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    size_t g = sim.cfg.vmm_granularity;
    if (!aligned(ptr, g) || !aligned(size, g) || !sim_vmm_whole_mappings(ptr, size))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    r = sim_vmm_injected(SIM_VMM_UNMAP);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    return drv_leave(sim_vmm_unmap(ptr, size, "cuMemUnmap"));
}

SIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    sim_vmm_cost(SIM_VMM_SET_ACCESS);
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!desc || count == 0 || !sim_vmm_whole_mappings(ptr, size))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    for (size_t i = 0; i < count; i++) {
        unsigned f = (unsigned)desc[i].flags;
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
             f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            return drv_leave(CUDA_ERROR_INVALID_VALUE);
        if (!valid_device(desc[i].location.id))
            return drv_leave(CUDA_ERROR_INVALID_DEVICE);
    }
    r = sim_vmm_injected(SIM_VMM_SET_ACCESS);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    for (size_t i = 0; i < count; i++)
        sim_vmm_set_access(ptr, size, desc[i].location.id, (unsigned)desc[i].flags);
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_alloc_t *a = sim_vmm_mapping((uintptr_t)ptr);
    if (!flags || !location || !a || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(location->id))
        return drv_leave(CUDA_ERROR_INVALID_DEVICE);
    *flags = a->access[location->id];
    return drv_leave(CUDA_SUCCESS);
}
