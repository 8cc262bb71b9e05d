/*
 * A replayed device (engine.h): the core's backend over the pages and
 * addresses the simulated device has (device.c).  Where segments land
 * decides the core's address-ordered choices (best fit ties, garbage
 * collection), so a bump pointer, which never reuses a range, would not
 * replay a run whose device reused them.  Markers (events, fences) are
 * core/backend_mem.c's: completed at once on an idle device, at the job's
 * synchronisations on a busy one.
 */
#include <stdlib.h>

#include "engine.h"
#include "hostalloc.h"
#include "vec.h"

static int dev_seg_alloc(void *ctx, int device, size_t size, uintptr_t *addr)
{
    rp_dev_t *rd = ctx;
    uint64_t a = 0;
    int rc = rp_space_alloc(&rd->space, size, &a);
    *addr = (uintptr_t)a;
    return rc;
}

static void dev_seg_free(void *ctx, int device, uintptr_t addr, size_t size)
{
    rp_dev_t *rd = ctx;
    rp_space_free(&rd->space, addr, size);
}

static int dev_mem_info(void *ctx, int device, size_t *free_bytes, size_t *total)
{
    rp_dev_t *rd = ctx;
    *free_bytes = (size_t)rp_space_free_bytes(&rd->space);
    *total = (size_t)rd->space.capacity;
    return CORE_OK;
}

static int dev_event_record(void *ctx, int device, core_stream_t stream, uint64_t *event)
{
    rp_dev_t *rd = ctx;
    return rd->mem.event_record(rd->mem.ctx, device, stream, event);
}

static int dev_event_query(void *ctx, int device, uint64_t event)
{
    rp_dev_t *rd = ctx;
    return rd->mem.event_query(rd->mem.ctx, device, event);
}

static void dev_event_wait(void *ctx, int device, uint64_t event)
{
    rp_dev_t *rd = ctx;
    rd->mem.event_wait(rd->mem.ctx, device, event);
}

static void dev_event_release(void *ctx, int device, uint64_t event)
{
    rp_dev_t *rd = ctx;
    rd->mem.event_release(rd->mem.ctx, device, event);
}

/* The interposer orders the device after a fence (hand-outs); an idle or
 * busy device here has no streams to order: it always can. */
static int dev_fence_order(void *ctx, int device, uint64_t fence, uint64_t first_alloc)
{
    rp_dev_t *rd = ctx;
    return rd->mem.fence_order(rd->mem.ctx, device, fence, first_alloc);
}

static int dev_sync(void *ctx, int device)
{
    rp_dev_t *rd = ctx;
    return rd->mem.device_sync(rd->mem.ctx, device);
}

/* Virtual memory, as the simulated device has it: 2 MiB granularity,
 * mappings charged page by page wherever they lie, addresses of their own
 * (above every device's range, never charged). */
#define VMM_GRANULARITY ((size_t)2 << 20)

static size_t dev_vmm_granularity(void *ctx, int device)
{
    (void)ctx, (void)device;
    return VMM_GRANULARITY;
}

static int dev_va_reserve(void *ctx, int device, size_t size, size_t align, uintptr_t *addr)
{
    rp_dev_t *rd = ctx;
    if (!rd->va_next)
        rd->va_next = ((uint64_t)RP_MAX_DEVICES + 2 + (uint64_t)device) << 44;
    rd->va_next = (rd->va_next + align - 1) / align * align;
    *addr = (uintptr_t)rd->va_next;
    rd->va_next += size;
    rd->res->vmm_reserves++;
    return CORE_OK;
}

static void dev_va_release(void *ctx, int device, uintptr_t addr, size_t size)
{
    (void)ctx, (void)device, (void)addr, (void)size;
}

static int dev_map(void *ctx, int device, uintptr_t addr, size_t size, size_t page)
{
    rp_dev_t *rd = ctx;
    (void)addr;
    int rc = rp_space_map(&rd->space, size);
    if (rc == CORE_OK) {
        rd->res->vmm_map_calls++;
        rd->res->vmm_map_pages += size / page;
    }
    return rc;
}

static void dev_unmap(void *ctx, int device, uintptr_t addr, size_t size)
{
    rp_dev_t *rd = ctx;
    (void)device;
    rd->res->vmm_unmap_calls++;
    for (size_t i = 0; i < rd->nalias; i++)
        if (rd->alias[i] == addr) { /* a second mapping: the memory stays the first's */
            rd->alias[i] = rd->alias[--rd->nalias];
            return;
        }
    rp_space_unmap(&rd->space, size);
    rd->res->vmm_unmap_bytes += size;
}

/* A page mapped a second time (expandable_share_pages): a call, no memory. */
static int dev_map_alias(void *ctx, int device, uintptr_t addr, uintptr_t from, size_t size)
{
    rp_dev_t *rd = ctx;
    (void)device, (void)from, (void)size;
    if (!vec_reserve((void **)&rd->alias, &rd->cap_alias, rd->nalias + 1, sizeof *rd->alias))
        return CORE_EFAIL;
    rd->alias[rd->nalias++] = addr;
    rd->res->vmm_alias_calls++;
    return CORE_OK;
}

rp_dev_t *rp_dev_new(int device, uint64_t capacity, bool busy, const conf_t *conf, rp_result_t *res)
{
    rp_dev_t *rd = calloc(1, sizeof *rd);
    if (!rd)
        return NULL;
    rd->device = device;
    rd->res = res;
    mem_backend_init(&rd->mb, capacity);
    rd->mb.auto_complete = !busy;
    rd->mb.orders = true;
    rd->mem = mem_backend_vtable(&rd->mb);
    if (conf) {
        core_backend_t be = {.ctx = rd,
                             .seg_alloc = dev_seg_alloc,
                             .seg_free = dev_seg_free,
                             .mem_info = dev_mem_info,
                             .event_record = dev_event_record,
                             .event_query = dev_event_query,
                             .event_wait = dev_event_wait,
                             .event_release = dev_event_release,
                             .device_sync = dev_sync,
                             .fence_order = dev_fence_order,
                             .vmm_granularity = dev_vmm_granularity,
                             .va_reserve = dev_va_reserve,
                             .va_release = dev_va_release,
                             .map = dev_map,
                             .unmap = dev_unmap,
                             .map_alias = dev_map_alias};
        if (rp_space_init(&rd->space, device, capacity) == 0)
            rd->core = core_dev_new(&be, device, conf);
        if (!rd->core) {
            rp_dev_free(rd);
            return NULL;
        }
    }
    return rd;
}

void rp_dev_free(rp_dev_t *rd)
{
    if (rd->core)
        core_dev_destroy(rd->core);
    mem_backend_fini(&rd->mb);
    rp_space_fini(&rd->space);
    hostalloc_free(rd->alias);
    free(rd);
}
