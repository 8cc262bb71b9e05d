/*
 * Driver API of the simulated device: initialisation, devices, contexts,
 * error strings and the test extensions' counters.
 */
#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "errors.h"
#include "stub.h"

/* ------------------------------------------------------------------------
 * Initialisation and version
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_init();
}

SIM_API CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = 13000;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Devices
 * ---------------------------------------------------------------------- */

/* Checks init and the ordinal; returns the device or NULL with *r set. */
static sim_device_t *device_get(CUdevice dev, CUresult *r)
{
    *r = sim_check_init();
    if (*r != CUDA_SUCCESS)
        return NULL;
    if (dev < 0 || dev >= sim.ndev) {
        *r = CUDA_ERROR_INVALID_DEVICE;
        return NULL;
    }
    return &sim.dev[dev];
}

/* Takes the lock and fetches device dev into *d (device_get): CUDA_SUCCESS
 * with the lock held, or device_get's error with it released. */
static CUresult device_enter(CUdevice dev, sim_device_t **d)
{
    CUresult r;
    sim_lock();
    *d = device_get(dev, &r);
    if (!*d)
        return drv_leave(r);
    return CUDA_SUCCESS;
}

/* A call that answers through out, without the lock: the driver is
 * initialised and out is given. */
static CUresult answer_check(const void *out)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    return out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult r = answer_check(device);
    if (r != CUDA_SUCCESS)
        return r;
    if (ordinal < 0 || ordinal >= sim.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetCount(int *count)
{
    CUresult r = answer_check(count);
    if (r != CUDA_SUCCESS)
        return r;
    *count = sim.ndev;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult r;
    if (!device_get(dev, &r))
        return r;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", SIM_DEVICE_NAME);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    CUresult r;
    if (!device_get(dev, &r))
        return r;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    sim_device_uuid(&sim.cfg, dev, (uint8_t *)uuid->bytes);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult r;
    sim_device_t *d = device_get(dev, &r);
    if (!d)
        return r;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = d->capacity;
    return CUDA_SUCCESS;
}

/* The attributes of an H100 SXM5, as a program reads them: every one that
 * CUDA 13.0's cuda.h defines (the compat suite checks the list, and
 * sim_real_toolkit asks the runtime for each).  Where an H100 has a feature
 * the simulator does not model (host memory through the virtual memory
 * API, multicast), the value says it is
 * absent, so that programs take the path the simulator serves.  The
 * attributes that depend on the device or the configuration are computed
 * in attribute_value.  This table is the only source of device properties:
 * the runtime's cudaDeviceGetAttribute and every attribute field of
 * cudaGetDeviceProperties read it (runtime_core.c); docs/simulator.md says
 * where the values come from. */
static const struct {
    int value;
    bool known;
} attributes[CU_DEVICE_ATTRIBUTE_MAX] = {
    [CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = {1024, true},
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X] = {1024, true},
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y] = {1024, true},
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z] = {64, true},
    [CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X] = {2147483647, true},
    [CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y] = {65535, true},
    [CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z] = {65535, true},
    [CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK] = {49152, true},
    [CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY] = {65536, true},
    [CU_DEVICE_ATTRIBUTE_WARP_SIZE] = {32, true},
    [CU_DEVICE_ATTRIBUTE_MAX_PITCH] = {2147483647, true},
    [CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK] = {65536, true},
    [CU_DEVICE_ATTRIBUTE_CLOCK_RATE] = {1980000, true},
    [CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT] = {512, true},
    [CU_DEVICE_ATTRIBUTE_GPU_OVERLAP] = {1, true},
    [CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = {132, true},
    [CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT] = {0, true},
    [CU_DEVICE_ATTRIBUTE_INTEGRATED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY] = {1, true},
    [CU_DEVICE_ATTRIBUTE_COMPUTE_MODE] = {0, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH] = {131072, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH] = {131072, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT] = {65536, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH] = {16384, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT] = {16384, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH] = {16384, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS] = {2048, true},
    [CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT] = {512, true},
    [CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS] = {1, true},
    [CU_DEVICE_ATTRIBUTE_ECC_ENABLED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID] = {0, true},
    [CU_DEVICE_ATTRIBUTE_TCC_DRIVER] = {0, true},
    [CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE] = {2619000, true},
    [CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH] = {5120, true},
    [CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE] = {52428800, true},
    [CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR] = {2048, true},
    [CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT] = {3, true},
    [CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING] = {1, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS] = {2048, true},
    [CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER] = {1, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE] = {8192, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE] = {8192, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID] = {0, true},
    [CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT] = {32, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS] = {2046, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH] = {131072, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT] = {65536, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH] = {16384, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT] = {16384, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH] = {16384, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS] = {2048, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS] = {2048, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS] = {2046, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH] = {268435456, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH] = {131072, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT] = {65000, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH] = {2097120, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = {9, true},
    [CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR] = {0, true},
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH] = {32768, true},
    [CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR] = {233472, true},
    [CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR] = {65536, true},
    [CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY] = {1, true},
    [CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD] = {0, true},
    [CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO] = {2, true},
    [CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS] = {0, true},
    [CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS] = {1, true},
    [CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM] = {1, true},
    [CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1] = {1, true},
    [CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1] = {1, true},
    [CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1] = {1, true},
    [CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH] = {1, true},
    [CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH] = {0, true},
    [CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] = {232448, true},
    [CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES] = {0, true},
    [CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES] = {0, true},
    [CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST] = {0, true},
    [CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR] = {32, true},
    [CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE] = {41943040, true},
    [CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE] = {134213632, true},
    [CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK] = {1024, true},
    [CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED] = {0, true}, /* arrays: dense only (driver_array.c) */
    [CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS] = {1, true},
    [CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING] = {100, true},
    [CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES] = {CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, true},
    [CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH] = {1, true},
    [CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS] = {1, true},
    [CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR] = {1, true},
    [CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED] = {1, true}, /* cuMemGetHandleForAddressRange */
    [CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT] = {4, true},
    [CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED] = {1, true},
    [CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS] = {1, true},
    [CU_DEVICE_ATTRIBUTE_NUMA_CONFIG] = {0, true},
    [CU_DEVICE_ATTRIBUTE_NUMA_ID] = {-1, true},
    [CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_MPS_ENABLED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID] = {0, true},
    [CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK] = {0, true},
    [CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH] = {0, true},
    [CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID] = {0x233010DE, true},
    [CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID] = {0x16C110DE, true},
    [CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED] = {0, true},
    [CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED] = {0, true},
};

static int attribute_value(CUdevice_attribute a, CUdevice dev, bool *known)
{
    *known = true;
    switch ((int)a) {
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        return 0x18 + dev;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:
        return dev;
    /* a hardware-coherent CPU and GPU (CUCACHE_SIM_COHERENT=1): the GPU
     * uses the host's page tables, the CPU reaches managed memory in place
     * and both have native atomics over the link */
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST:
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
        return sim.cfg.coherent;
    default:
        break;
    }
    *known = (int)a > 0 && (int)a < CU_DEVICE_ATTRIBUTE_MAX && attributes[a].known;
    return *known ? attributes[a].value : 0;
}

SIM_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult r;
    if (!device_get(dev, &r))
        return r;
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    bool known;
    int v = attribute_value(attrib, dev, &known);
    if (!known)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = v;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Primary contexts
 * ---------------------------------------------------------------------- */

static CUresult primary_retain(CUcontext *pctx, CUdevice dev)
{
    sim_device_t *d;
    CUresult r = device_enter(dev, &d);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!d->primary)
        d->primary = sim_ctx_create(d, true);
    d->primary_refs++;
    *pctx = d->primary;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    return primary_retain(pctx, dev);
}

/* Test extension: the same retain under a name no interposer hooks, as a
 * runtime that reaches the driver by a private path would make it. */
SIM_API CUresult cucacheSimPrimaryCtxRetainUnseen(CUcontext *pctx, CUdevice dev)
{
    return primary_retain(pctx, dev);
}

SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    sim_device_t *d;
    CUresult r = device_enter(dev, &d);
    if (r != CUDA_SUCCESS)
        return r;
    if (d->primary_refs == 0)
        return drv_leave(CUDA_ERROR_INVALID_CONTEXT);
    if (--d->primary_refs == 0)
        sim_ctx_destroy(d->primary); /* resets it in place */
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    sim_device_t *d;
    CUresult r = device_enter(dev, &d);
    if (r != CUDA_SUCCESS)
        return r;
    if (d->primary) {
        sim_ctx_destroy(d->primary);
        d->primary_refs = 0;
    }
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    sim_device_t *d;
    CUresult r = device_enter(dev, &d);
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags || !active)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *flags = d->primary_flags;
    *active = d->primary_refs > 0;
    return drv_leave(CUDA_SUCCESS);
}

/* One scheduling policy at most, and no flag CUDA does not define. */
SIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    sim_device_t *d;
    CUresult r = device_enter(dev, &d);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned sched = flags & CU_CTX_SCHED_MASK;
    if ((flags & ~(unsigned)CU_CTX_FLAGS_MASK) || (sched & (sched - 1)))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    d->primary_flags = flags;
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Contexts and the per-thread context stack
 * ---------------------------------------------------------------------- */

/* Creates a context on dev and pushes it on this thread's stack.  Called
 * with the lock held; leaves it. */
static CUresult ctx_create(CUcontext *pctx, CUdevice dev)
{
    CUresult r;
    sim_device_t *d = device_get(dev, &r);
    if (!d)
        return drv_leave(r);
    if (!pctx)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_thread_t *t = sim_thread();
    if (t->depth == (int)(sizeof t->ctx_stack / sizeof t->ctx_stack[0]))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUctx_st *ctx = sim_ctx_create(d, false);
    t->ctx_stack[t->depth++] = ctx;
    *pctx = ctx;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    (void)flags;
    sim_lock();
    return ctx_create(pctx, dev);
}

/* Execution affinity (a share of the SMs) needs MPS, which the simulated
 * device does not run: asked for, it is unsupported, as on a GPU without
 * MPS. */
SIM_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
                                CUdevice dev)
{
    (void)flags;
    sim_lock();
    if (numParams < 0 || (numParams > 0 && !paramsArray))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (numParams > 0)
        return drv_leave(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
    return ctx_create(pctx, dev);
}

/* The same, and CIG (a graphics client's shared context) is not simulated. */
SIM_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
                                CUdevice dev)
{
    (void)flags;
    sim_lock();
    if (ctxCreateParams) {
        if (ctxCreateParams->numExecAffinityParams < 0 ||
            (ctxCreateParams->numExecAffinityParams > 0 && !ctxCreateParams->execAffinityParams))
            return drv_leave(CUDA_ERROR_INVALID_VALUE);
        if (ctxCreateParams->numExecAffinityParams > 0)
            return drv_leave(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
        if (ctxCreateParams->cigParams)
            return drv_leave(CUDA_ERROR_NOT_SUPPORTED);
    }
    return ctx_create(pctx, dev);
}

SIM_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!sim_ctx_valid(ctx) || ctx->primary)
        return drv_leave(CUDA_ERROR_INVALID_CONTEXT);
    sim_ctx_destroy(ctx);
    sim_thread_t *t = sim_thread();
    for (int i = 0; i < t->depth; i++)
        if (t->ctx_stack[i] == ctx) {
            sim_array_close(t->ctx_stack, (size_t)t->depth--, sizeof t->ctx_stack[0], (size_t)i);
            break;
        }
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult r = answer_check(pctx);
    if (r != CUDA_SUCCESS)
        return r;
    *pctx = sim_ctx_current();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_thread_t *t = sim_thread();
    if (!ctx) {
        if (t->depth)
            t->depth--;
        return drv_leave(CUDA_SUCCESS);
    }
    if (!sim_ctx_valid(ctx))
        return drv_leave(CUDA_ERROR_INVALID_CONTEXT);
    if (t->depth == 0)
        t->depth = 1;
    t->ctx_stack[t->depth - 1] = ctx;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    sim_thread_t *t = sim_thread();
    if (!sim_ctx_valid(ctx) || t->depth == (int)(sizeof t->ctx_stack / sizeof t->ctx_stack[0]))
        return drv_leave(CUDA_ERROR_INVALID_CONTEXT);
    t->ctx_stack[t->depth++] = ctx;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_thread_t *t = sim_thread();
    if (t->depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext c = t->ctx_stack[--t->depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetDevice(CUdevice *device)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!device)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *device = ctx->dev->ordinal;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxSynchronize(void)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    r = sim_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    r = sim_ctx_wait_idle(ctx);
    sim_pools_trim_after_sync(ctx);
    return drv_leave(r);
}

SIM_API CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    (void)ctx;
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5;
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Error strings
 * ---------------------------------------------------------------------- */

static const struct {
    CUresult code;
    const char *name, *text;
} errors[] = {
#define SIM_ERROR_ROW(cu, rt, text) {cu, #cu, text},
    SIM_ERRORS(SIM_ERROR_ROW)
#undef SIM_ERROR_ROW
    {CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
    {CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
     "primary context for the specified device has already been initialized"},
};

static int error_index(CUresult e)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == e)
            return (int)i;
    return -1;
}

SIM_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    int i = error_index(error);
    *pStr = i < 0 ? NULL : errors[i].text;
    return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SIM_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    int i = error_index(error);
    *pStr = i < 0 ? NULL : errors[i].name;
    return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Test extensions: counters
 * ---------------------------------------------------------------------- */

SIM_API unsigned long cucacheSimDeviceAllocs(void)
{
    return atomic_load(&sim.device_allocs);
}

SIM_API unsigned long cucacheSimDeviceFrees(void)
{
    return atomic_load(&sim.device_frees);
}

SIM_API CUresult cucacheSimSharedHoldLock(void)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!sim.shared)
        return CUDA_ERROR_NOT_SUPPORTED;
    return sim_shared_hold_lock(sim.shared) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

/* A driver function the simulator does not implement (src/stub.h). */
int sim_stub_driver(atomic_flag *once, const char *name)
{
    if (!atomic_flag_test_and_set(once))
        sim_log("%s is not simulated (CUDA_ERROR_NOT_SUPPORTED)", name);
    return CUDA_ERROR_NOT_SUPPORTED;
}
