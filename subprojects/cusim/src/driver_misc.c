/*
 * Driver API of the simulated device: the calls real programs make around
 * their memory calls, answered with CUDA's values and errors and recorded
 * where a later query reads them back, but modelling nothing else:
 *
 *   context limits, cache and shared memory configuration, the persisting
 *   L2 reset; the primary context's flags (the old cuDevicePrimaryCtxSetFlags);
 *   PCI bus ids; the GPUDirect RDMA flush; the profiler's start and stop;
 *   stream attributes (access policy window, synchronisation policy,
 *   priority); managed memory: cuStreamAttachMemAsync, cuMemPrefetchAsync,
 *   cuMemAdvise and cuMemRangeGetAttribute(s).
 *
 * Managed memory is host memory here (engine_mem.c): a prefetch moves
 * nothing and queues nothing, advice changes nothing; both are checked and
 * recorded per allocation (sim_hints_t: a range that covers part of an
 * allocation speaks for all of it), and cuMemRangeGetAttribute answers
 * from that record.
 */
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "driver.h"

/* ------------------------------------------------------------------------
 * Context limits, cache and shared memory configuration
 * ---------------------------------------------------------------------- */

/* The limits, one row each: the H100's default, the largest value a set
 * keeps (0: any; larger ones are refused, or clamped where cuda.h says the
 * limit is a hint), and the error of a set the device does not take.
 * CU_LIMIT_MALLOC_HEAP_SIZE is device memory on a GPU, reserved when a
 * kernel that calls malloc() is loaded: simulated kernels call nothing, so
 * the simulator records the size and takes no pages for it. */
typedef struct limit_row_s {
    size_t dflt;
    size_t max;
    bool clamp;       /* a hint: a larger value is clamped to max */
    CUresult set_err; /* CUDA_SUCCESS: settable */
} limit_row_t;

static const limit_row_t limits[CU_LIMIT_MAX] = {
    [CU_LIMIT_STACK_SIZE] = {1024, 512 * 1024, false, CUDA_SUCCESS},
    [CU_LIMIT_PRINTF_FIFO_SIZE] = {1 << 20, 0, false, CUDA_SUCCESS},
    [CU_LIMIT_MALLOC_HEAP_SIZE] = {8 << 20, 0, false, CUDA_SUCCESS},
    /* compute capability 9.0 has no device-side synchronisation */
    [CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = {2, 0, false, CUDA_ERROR_UNSUPPORTED_LIMIT},
    [CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = {2048, 0, false, CUDA_SUCCESS},
    [CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = {64, 128, false, CUDA_SUCCESS},
    /* max: CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE (limit_max) */
    [CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = {0, 0, true, CUDA_SUCCESS},
    /* shared contexts of a graphics client (CIG) are not simulated */
    [CU_LIMIT_SHMEM_SIZE] = {0, 0, false, CUDA_ERROR_UNSUPPORTED_LIMIT},
    [CU_LIMIT_CIG_ENABLED] = {0, 0, false, CUDA_ERROR_UNSUPPORTED_LIMIT},
    [CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED] = {0, 0, false, CUDA_ERROR_UNSUPPORTED_LIMIT},
};

static size_t limit_max(struct CUctx_st *ctx, CUlimit l)
{
    if (l != CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
        return limits[l].max;
    int v = 0;
    cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, ctx->dev->ordinal);
    return (size_t)v;
}

SIM_API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if ((unsigned)limit >= CU_LIMIT_MAX)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    const limit_row_t *row = &limits[limit];
    if (row->set_err != CUDA_SUCCESS)
        return drv_leave(row->set_err);
    size_t max = limit_max(ctx, limit);
    if (max && value > max) {
        if (!row->clamp)
            return drv_leave(CUDA_ERROR_INVALID_VALUE);
        value = max;
    }
    ctx->limit[limit] = value;
    ctx->limit_set[limit] = true;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pvalue || (unsigned)limit >= CU_LIMIT_MAX)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *pvalue = ctx->limit_set[limit] ? ctx->limit[limit] : limits[limit].dflt;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    ctx->cache_config = config;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pconfig)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *pconfig = ctx->cache_config;
    return drv_leave(CUDA_SUCCESS);
}

/* The bank size is fixed at four bytes on the devices CUDA 13 supports: a
 * set is accepted and changes nothing. */
SIM_API CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    (void)ctx;
    return drv_leave((unsigned)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE ? CUDA_ERROR_INVALID_VALUE
                                                                                  : CUDA_SUCCESS);
}

SIM_API CUresult cuCtxGetSharedMemConfig(CUsharedconfig *pConfig)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    (void)ctx;
    if (!pConfig)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *pConfig = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxResetPersistingL2Cache(void)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    (void)ctx;
    return drv_leave(CUDA_SUCCESS);
}

/* The CUDA 10 form: refused while the primary context is active. */
SIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    unsigned cur;
    int active = 0;
    CUresult r = cuDevicePrimaryCtxGetState(dev, &cur, &active);
    if (r != CUDA_SUCCESS)
        return r;
    return active ? CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE : cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

/* ------------------------------------------------------------------------
 * PCI bus ids: domain 0, bus CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device 0,
 * written as CUDA writes them ("0000:18:00.0", 13 bytes with the NUL)
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    int bus = 0, domain = 0, slot = 0;
    CUresult r = cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.0", (unsigned)domain, (unsigned)bus, (unsigned)slot);
    return CUDA_SUCCESS;
}

/* Accepts "domain:bus:device.function" and "bus:device.function", hex in
 * either case, as CUDA does. */
SIM_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!dev || !pciBusId)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned domain = 0, bus, slot, fn;
    char end;
    if (sscanf(pciBusId, "%x:%x:%x.%x%c", &domain, &bus, &slot, &fn, &end) != 4 &&
        (domain = 0, sscanf(pciBusId, "%x:%x.%x%c", &bus, &slot, &fn, &end) != 3))
        return CUDA_ERROR_INVALID_VALUE;
    for (int d = 0; d < sim.ndev; d++) {
        char mine[16], theirs[16];
        cuDeviceGetPCIBusId(mine, sizeof mine, d);
        snprintf(theirs, sizeof theirs, "%04X:%02X:%02X.%X", domain, bus, slot, fn);
        if (strcasecmp(mine, theirs) == 0) {
            *dev = d;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

SIM_API CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target,
                                           CUflushGPUDirectRDMAWritesScope scope)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    (void)ctx;
    if (target != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX ||
        (scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER && scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * The profiler: no profiler is attached, so starting and stopping it are
 * successful no-ops, as on a GPU without one.
 * ---------------------------------------------------------------------- */

SIM_API CUresult cuProfilerInitialize(const char *configFile, const char *outputFile, CUoutput_mode outputMode)
{
    (void)configFile;
    (void)outputFile;
    (void)outputMode;
    return sim_check_init();
}

SIM_API CUresult cuProfilerStart(void)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    (void)ctx;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuProfilerStop(void)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    (void)ctx;
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Stream attributes
 * ---------------------------------------------------------------------- */

static CUresult stream_set_attr(CUstream h, CUstreamAttrID attr, const CUstreamAttrValue *v, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && !v)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    int max_window = 0;
    switch ((int)attr) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: {
        const CUaccessPolicyWindow *w = &v->accessPolicyWindow;
        cuDeviceGetAttribute(&max_window, CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, ctx->dev->ordinal);
        if (w->num_bytes > (size_t)max_window || !(w->hitRatio >= 0.0f && w->hitRatio <= 1.0f) ||
            (unsigned)w->hitProp > CU_ACCESS_PROPERTY_PERSISTING || (unsigned)w->missProp > CU_ACCESS_PROPERTY_PERSISTING)
            return drv_leave(CUDA_ERROR_INVALID_VALUE);
        s->access_window = *w;
        return drv_leave(CUDA_SUCCESS);
    }
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
        if (v->syncPolicy < CU_SYNC_POLICY_AUTO || v->syncPolicy > CU_SYNC_POLICY_BLOCKING_SYNC)
            return drv_leave(CUDA_ERROR_INVALID_VALUE);
        s->sync_policy = v->syncPolicy;
        return drv_leave(CUDA_SUCCESS);
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        /* clamped to cuCtxGetStreamPriorityRange's [-5, 0], as at creation */
        s->priority = v->priority > 0 ? 0 : v->priority < -5 ? -5 : v->priority;
        return drv_leave(CUDA_SUCCESS);
    default:
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    }
}

static CUresult stream_get_attr(CUstream h, CUstreamAttrID attr, CUstreamAttrValue *out, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && !out)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    (void)ctx;
    memset(out, 0, sizeof *out);
    switch ((int)attr) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
        out->accessPolicyWindow = s->access_window;
        return drv_leave(CUDA_SUCCESS);
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
        out->syncPolicy = s->sync_policy ? s->sync_policy : CU_SYNC_POLICY_AUTO;
        return drv_leave(CUDA_SUCCESS);
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        out->priority = s->priority;
        return drv_leave(CUDA_SUCCESS);
    default:
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    }
}

DRV_PTSZ(cuStreamSetAttribute, stream_set_attr, (CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *value),
         (hStream, attr, value))
DRV_PTSZ(cuStreamGetAttribute, stream_get_attr, (CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out),
         (hStream, attr, value_out))

/* ------------------------------------------------------------------------
 * Managed memory: attach, prefetch, advice and their record
 * ---------------------------------------------------------------------- */

/* The managed allocation [p, p+count) lies in, or NULL with *r set; on a
 * coherent system (CUCACHE_SIM_COHERENT) other host memory passes too,
 * with no record (*r success, NULL). */
static sim_alloc_t *managed_range(CUdeviceptr p, size_t count, CUresult *r)
{
    sim_alloc_t *a = NULL;
    *r = CUDA_SUCCESS;
    if (count == 0 || !p)
        *r = CUDA_ERROR_INVALID_VALUE;
    else if (sim_range_ok(p, count, &a) && a->kind == SIM_ALLOC_MANAGED)
        return a;
    else if (!sim.cfg.coherent || sim_device_of(p) || sim_alloc_find(p))
        *r = CUDA_ERROR_INVALID_VALUE;
    return NULL;
}

static sim_hints_t *hints_of(sim_alloc_t *a)
{
    if (!a->hints)
        a->hints = sim_xcalloc(1, sizeof *a->hints);
    return a->hints;
}

/* A location a prefetch or an advice may name. */
static CUresult location_check(CUmemLocation loc)
{
    switch ((int)loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        return loc.id >= 0 && loc.id < sim.ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        return loc.id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; /* one NUMA node */
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* The old forms' device: CU_DEVICE_CPU (-1) is the host. */
static CUmemLocation location_of_device(CUdevice d)
{
    return d == -1 ? (CUmemLocation){CU_MEM_LOCATION_TYPE_HOST, 0} : (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, d};
}

static CUresult attach(CUstream h, CUdeviceptr dptr, size_t length, unsigned flags, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    (void)ctx;
    (void)s;
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_alloc_t *a = sim_alloc_live(dptr);
    if (!a || a->kind != SIM_ALLOC_MANAGED || a->addr != dptr || (length && length != a->size))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    hints_of(a)->attach = flags;
    return drv_leave(CUDA_SUCCESS);
}

DRV_PTSZ(cuStreamAttachMemAsync, attach, (CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags),
         (hStream, dptr, length, flags))

static CUresult prefetch(CUdeviceptr p, size_t count, CUmemLocation loc, unsigned flags, CUstream h, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    (void)ctx;
    (void)s;
    if (r == CUDA_SUCCESS && flags != 0)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = location_check(loc);
    sim_alloc_t *a = r == CUDA_SUCCESS ? managed_range(p, count, &r) : NULL;
    if (a)
        hints_of(a)->last_prefetch = loc;
    return drv_leave(r);
}

static CUresult prefetch_device(CUdeviceptr p, size_t count, CUdevice d, CUstream h, bool ptds)
{
    return prefetch(p, count, location_of_device(d), 0, h, ptds);
}

DRV_PTSZ(cuMemPrefetchAsync_v2, prefetch,
         (CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags, CUstream hStream),
         (devPtr, count, location, flags, hStream))

/* The CUDA 11 form (a device; cuda.h maps the name to _v2). */
SIM_API CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);
SIM_API CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);
DRV_PTSZ(cuMemPrefetchAsync, prefetch_device, (CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream),
         (devPtr, count, dstDevice, hStream))

SIM_API CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    bool read_mostly = advice == CU_MEM_ADVISE_SET_READ_MOSTLY || advice == CU_MEM_ADVISE_UNSET_READ_MOSTLY;
    if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    r = read_mostly ? CUDA_SUCCESS : location_check(location);
    sim_alloc_t *a = r == CUDA_SUCCESS ? managed_range(devPtr, count, &r) : NULL;
    if (!a)
        return drv_leave(r);
    sim_hints_t *hn = hints_of(a);
    bool host = location.type != CU_MEM_LOCATION_TYPE_DEVICE;
    uint32_t bit = host ? 0 : (uint32_t)1 << location.id;
    switch ((int)advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
        hn->read_mostly = advice == CU_MEM_ADVISE_SET_READ_MOSTLY;
        break;
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
        hn->preferred = location;
        break;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
        hn->preferred = (CUmemLocation){CU_MEM_LOCATION_TYPE_INVALID, 0};
        break;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY: {
        bool set = advice == CU_MEM_ADVISE_SET_ACCESSED_BY;
        if (host)
            hn->accessed_by_host = set;
        else
            hn->accessed_by = set ? hn->accessed_by | bit : hn->accessed_by & ~bit;
        break;
    }
    }
    return drv_leave(CUDA_SUCCESS);
}

/* The CUDA 11 form (a device, CU_DEVICE_CPU for the host). */
SIM_API CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);
SIM_API CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
    return cuMemAdvise_v2(devPtr, count, advice, location_of_device(device));
}

/* A location as the old attributes give it: a device ordinal,
 * CU_DEVICE_CPU (-1) for the host, CU_DEVICE_INVALID (-2) for none. */
static int location_ordinal(CUmemLocation l)
{
    return l.type == CU_MEM_LOCATION_TYPE_DEVICE ? l.id : l.type == CU_MEM_LOCATION_TYPE_INVALID ? -2 : -1;
}

/* One attribute of a range (hn: its record, or NULL for none yet). */
static CUresult range_attr(void *data, size_t size, CUmem_range_attribute attr, const sim_hints_t *hn)
{
    static const sim_hints_t none = {0};
    if (!hn)
        hn = &none;
    if (attr == CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY) {
        if (size == 0 || size % sizeof(int))
            return CUDA_ERROR_INVALID_VALUE;
        int *out = data;
        size_t n = size / sizeof(int), k = 0;
        if (hn->accessed_by_host && k < n)
            out[k++] = -1;
        for (int d = 0; d < sim.ndev && k < n; d++)
            if (hn->accessed_by & ((uint32_t)1 << d))
                out[k++] = d;
        while (k < n)
            out[k++] = -2;
        return CUDA_SUCCESS;
    }
    if (size != sizeof(int))
        return CUDA_ERROR_INVALID_VALUE;
    int *out = data;
    switch ((int)attr) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
        *out = hn->read_mostly;
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
        *out = location_ordinal(hn->preferred);
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
        *out = location_ordinal(hn->last_prefetch);
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
        *out = (int)hn->preferred.type;
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
        *out = hn->preferred.id;
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
        *out = (int)hn->last_prefetch.type;
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
        *out = hn->last_prefetch.id;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_API CUresult cuMemRangeGetAttributes(void **data, size_t *dataSizes, CUmem_range_attribute *attributes,
                                         size_t numAttributes, CUdeviceptr devPtr, size_t count)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!data || !dataSizes || !attributes || numAttributes == 0)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    sim_alloc_t *a = managed_range(devPtr, count, &r);
    for (size_t i = 0; i < numAttributes && r == CUDA_SUCCESS; i++)
        r = data[i] ? range_attr(data[i], dataSizes[i], attributes[i], a ? a->hints : NULL)
                    : CUDA_ERROR_INVALID_VALUE;
    return drv_leave(r);
}

SIM_API CUresult cuMemRangeGetAttribute(void *data, size_t dataSize, CUmem_range_attribute attribute,
                                        CUdeviceptr devPtr, size_t count)
{
    return cuMemRangeGetAttributes(&data, &dataSize, &attribute, 1, devPtr, count);
}
