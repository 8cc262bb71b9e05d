/*
 * Driver API of the simulated device: memory pools shared between
 * processes, and which devices may use a pool's memory.
 *
 * A pool created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR exports a
 * descriptor: a small memfd ("cucache-sim-pool") holding who exported it
 * (pid, the nonce of its IPC table, the pool's device), which the program
 * passes to another process as any descriptor (a unix socket's SCM_RIGHTS,
 * pidfd_getfd).  The importer reads it back into an imported pool, which
 * makes no allocations of its own (cuMemAllocFromPoolAsync and
 * cuDeviceSetMemPool refuse it, as CUDA does).  Each allocation is shared
 * by cuMemPoolExportPointer's 64 bytes: the handle of engine_ipc.c under
 * its own magic, so the importer maps the exporter's bytes at addresses of
 * the pool's device and charges no pages (a shared device counts them
 * once).  The importer frees its mapping with cuMemFree or cuMemFreeAsync;
 * that never frees the exporter's allocation, which stays allocated until
 * the exporter frees it and kept, as any export, while an importer still
 * has it mapped.
 *
 * Errors, one row each:
 *   exporting the default pool, or with a handle type the pool was not
 *     created with, or non-zero flags          CUDA_ERROR_INVALID_VALUE
 *   a descriptor that is not an exported pool, or the exporter's own
 *     (import in the same process)             CUDA_ERROR_INVALID_VALUE
 *   exporting a pointer not in a live allocation of an exportable pool,
 *     importing data of another pool's exporter CUDA_ERROR_INVALID_VALUE
 *   the exporter gone, or the allocation freed CUDA_ERROR_INVALID_HANDLE
 *
 * Access (cuMemPoolSetAccess): as in CUDA, peer access
 * (cuCtxEnablePeerAccess) does not reach pool memory; each device's access
 * to a pool is its own, read-write for the pool's device (which cannot
 * lose it) and none for the others until set.  A simulated kernel
 * (cucacheSimLaunch) of a device without access faults (driver_peer.c).
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "driver.h"

#define POOL_MAGIC "CUSIMPOL"
#define POOL_VERSION 1u

/* What an exported pool's descriptor holds. */
typedef struct pool_export_s {
    char magic[8];     /* POOL_MAGIC */
    uint32_t version;  /* POOL_VERSION */
    int32_t pid;       /* the exporter */
    uint64_t nonce;    /* its IPC table's */
    uint32_t device;   /* the pool's device ordinal */
    uint32_t handle_types;
} pool_export_t;

/* ------------------------------------------------------------------------
 * Export and import of a pool
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                                  CUmemAllocationHandleType handleType, unsigned long long flags)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_out || !handle_is(pool, SIM_MAGIC_POOL) || flags != 0 || pool->imported ||
        handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !(pool->handle_types & (unsigned)handleType))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    pool_export_t x = {.version = POOL_VERSION,
                       .device = (uint32_t)pool->dev->ordinal,
                       .handle_types = pool->handle_types};
    memcpy(x.magic, POOL_MAGIC, 8);
    r = sim_ipc_identity(&x.pid, &x.nonce);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    int fd = memfd_create("cucache-sim-pool", MFD_CLOEXEC);
    if (fd < 0 || pwrite(fd, &x, sizeof x, 0) != (ssize_t)sizeof x) {
        sim_log("cuMemPoolExportToShareableHandle: cannot create the pool's descriptor: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return drv_leave(CUDA_ERROR_OUT_OF_MEMORY);
    }
    *(int *)handle_out = fd;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                                    CUmemAllocationHandleType handleType, unsigned long long flags)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    int fd = (int)(intptr_t)handle;
    pool_export_t x;
    if (!pool_out || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fd < 0 ||
        pread(fd, &x, sizeof x, 0) != (ssize_t)sizeof x || memcmp(x.magic, POOL_MAGIC, 8) != 0 ||
        x.version != POOL_VERSION || x.pid == (int32_t)getpid())
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (x.device >= (uint32_t)sim.ndev)
        return drv_leave(CUDA_ERROR_INVALID_DEVICE);
    struct CUmemPoolHandle_st *p = sim_pool_new(&sim.dev[x.device], false);
    p->imported = true;
    p->exporter_pid = x.pid;
    p->exporter_nonce = x.nonce;
    p->handle_types = x.handle_types;
    *pool_out = p;
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Export and import of an allocation
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_alloc_t *a = sim_alloc_live(ptr);
    if (!shareData_out || !a || a->kind != SIM_ALLOC_POOL || !a->pool->handle_types)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_ipc_handle_t h;
    r = sim_ipc_export(a, SIM_IPC_MAGIC_POOL_PTR, &h);
    if (r == CUDA_SUCCESS)
        memcpy(shareData_out->reserved, &h, sizeof h);
    return drv_leave(r);
}

SIM_API CUresult cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *shareData)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!ptr_out || !shareData || !handle_is(pool, SIM_MAGIC_POOL) || !pool->imported)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_ipc_handle_t h;
    memcpy(&h, shareData->reserved, sizeof h);
    if (h.pid != pool->exporter_pid || h.nonce != pool->exporter_nonce || h.device != (uint32_t)pool->dev->ordinal)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    uintptr_t p = 0;
    r = sim_ipc_open(ctx, pool->dev, SIM_IPC_MAGIC_POOL_PTR, &h, &p);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_alloc_exact(p)->pool = pool; /* freed with cuMemFree, not closed */
    *ptr_out = (CUdeviceptr)p;
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Access
 * ---------------------------------------------------------------------- */

/* A device location: CUDA_SUCCESS with its ordinal, or the error. */
static CUresult location_device(const CUmemLocation *l, int *out)
{
    if (!l || l->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (l->id < 0 || l->id >= sim.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *out = l->id;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_is(pool, SIM_MAGIC_POOL) || (count && !map))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    for (size_t i = 0; i < count; i++) { /* all checked before any is set */
        int dev;
        r = location_device(&map[i].location, &dev);
        if (r != CUDA_SUCCESS)
            return drv_leave(r);
        unsigned f = (unsigned)map[i].flags;
        if ((f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
             f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) ||
            (dev == pool->dev->ordinal && f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            return drv_leave(CUDA_ERROR_INVALID_VALUE);
    }
    for (size_t i = 0; i < count; i++)
        pool->access[map[i].location.id] = (uint8_t)map[i].flags;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool, CUmemLocation *location)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags || !handle_is(memPool, SIM_MAGIC_POOL))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    int dev;
    r = location_device(location, &dev);
    if (r == CUDA_SUCCESS)
        *flags = (CUmemAccess_flags)memPool->access[dev];
    return drv_leave(r);
}
