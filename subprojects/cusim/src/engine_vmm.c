/*
 * The simulated device's virtual memory (CUDA's cuMemAddressReserve,
 * cuMemCreate, cuMemMap family): the model behind driver_vmm.c.
 *
 * Three kinds of object, as in CUDA:
 *   - a reservation: addresses only, from one range of the process's address
 *     space kept for them (PROT_NONE, no memory), first fit at the asked
 *     alignment;
 *   - a physical allocation (sim_phys_t): a memfd of its size, charged to
 *     its device when created here (cuMemGetInfo counts it) and given back
 *     when the last reference (creation, retain, import) is released and the
 *     last mapping is gone.  Its handle is an opaque value naming it;
 *   - a mapping: [addr, addr+size) of a reservation showing the first size
 *     bytes of a physical allocation (mmap of its memfd, MAP_SHARED), an
 *     entry of the allocation table of kind SIM_ALLOC_VMM.  It is not
 *     accessible, from the device or the host, before cuMemSetAccess (the
 *     host mapping is PROT_NONE until then).  One physical allocation may
 *     be mapped at several addresses (aliases): they share the bytes.
 *
 * The race detector sees physical memory: sim_vmm_translate turns a range
 * of mapped addresses into ranges of the physical allocations' keys (each
 * physical allocation has keys of its own, never reused, above every
 * address), so work through one alias is checked against work through
 * another.  cuMemUnmap is checked like a write by the host: work on the
 * pages that the host has not seen complete is a race.
 *
 * Exporting (POSIX file descriptors) hands out a duplicate of the memfd; its
 * name says which device the memory is on and which handle types it was
 * created with, so an importer in another process learns them from the
 * descriptor alone.  Accounting across processes: the exporter's device is
 * charged until the exporter's own references and mappings are gone; the
 * bytes live on while an importer holds them (the memfd), uncharged.
 *
 * All functions are called with sim.lock held except sim_vmm_cost.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine_vmm.h"

/* The first key of physical memory for the race detector: above every
 * address a process can have. */
#define KEY_BASE ((uint64_t)1 << 62)

sim_vmm_t vmm;

/* ------------------------------------------------------------------------
 * The range of reservable addresses
 * ---------------------------------------------------------------------- */

CUresult sim_vmm_init(void)
{
    /* Thirty-two times the capacity of all devices (PyTorch reserves 9/8 of
     * a device per expandable segment), at most 32 TiB; half as much, down
     * to the capacity, where the process cannot have that many addresses. */
    size_t total = 0;
    for (int i = 0; i < sim.ndev; i++)
        total += sim.dev[i].capacity;
    size_t span = total > ((size_t)1 << 45) / 32 ? (size_t)1 << 45 : total * 32;
    size_t g = sim.cfg.vmm_granularity;
    span = span / g * g;
    void *raw = MAP_FAILED;
    while ((raw = mmap(NULL, span + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)) == MAP_FAILED) {
        span = span / 2 / g * g;
        if (span == 0 || span < total) {
            sim_log("virtual memory: cannot reserve %zu bytes of addresses: %s", total, strerror(errno));
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    vmm.base = (uint8_t *)(((uintptr_t)raw + g - 1) & ~(uintptr_t)(g - 1));
    vmm.span = span;
    vmm.next_key = KEY_BASE;
    sim_ext_init(&vmm.addrs, span);
    return CUDA_SUCCESS;
}

bool sim_vmm_region(uintptr_t addr)
{
    return vmm.base && addr >= (uintptr_t)vmm.base && addr - (uintptr_t)vmm.base < vmm.span;
}

void sim_vmm_cost(sim_vmm_call_t call)
{
    uint64_t ns = sim.cfg.vmm_ns[call];
    if (!ns)
        return;
    /* Sleeps overshoot by tens of microseconds: short costs are spun. */
    if (ns >= 200000) {
        sim_sleep_us(ns / 1000);
        return;
    }
    uint64_t end = sim_now_ns() + ns;
    while (sim_now_ns() < end) {
    }
}

/* ------------------------------------------------------------------------
 * Reservations
 * ---------------------------------------------------------------------- */

sim_reservation_t *sim_vmm_reservation_of(uintptr_t addr)
{
    sim_reservation_t *r = sim_array_floor(vmm.res, vmm.nres, sizeof *vmm.res, offsetof(sim_reservation_t, addr), addr);
    return r && addr - r->addr < r->size ? r : NULL;
}

CUresult sim_vmm_reserve(size_t size, size_t align, uintptr_t hint, uintptr_t *out)
{
    size_t at = SIZE_MAX;
    if (hint && sim_vmm_region(hint) && hint % align == 0)
        at = hint - (uintptr_t)vmm.base;
    size_t off = sim_ext_take(&vmm.addrs, (uintptr_t)vmm.base, size, align, at);
    if (off == SIZE_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    vmm.res = sim_array_room(vmm.res, vmm.nres, &vmm.cap_res, sizeof *vmm.res, 16);
    uintptr_t addr = (uintptr_t)vmm.base + off;
    size_t i = sim_array_upper(vmm.res, vmm.nres, sizeof *vmm.res, offsetof(sim_reservation_t, addr), addr);
    sim_reservation_t *r = sim_array_open(vmm.res, vmm.nres++, sizeof *vmm.res, i);
    *r = (sim_reservation_t){.addr = addr, .size = size};
    *out = addr;
    return CUDA_SUCCESS;
}

static void reservation_free(sim_reservation_t *r)
{
    sim_ext_give(&vmm.addrs, r->addr - (uintptr_t)vmm.base, r->size);
    sim_array_close(vmm.res, vmm.nres--, sizeof *vmm.res, (size_t)(r - vmm.res));
}

/* ------------------------------------------------------------------------
 * Physical allocations
 * ---------------------------------------------------------------------- */

static size_t phys_lower(uint64_t id)
{
    size_t lo = 0, hi = vmm.nphys;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (vmm.phys[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

sim_phys_t *sim_vmm_phys(CUmemGenericAllocationHandle h)
{
    if ((h & ~SIM_VMM_ID_MASK) != SIM_VMM_HANDLE_TAG)
        return NULL;
    size_t i = phys_lower(h & SIM_VMM_ID_MASK);
    return i < vmm.nphys && vmm.phys[i]->id == (h & SIM_VMM_ID_MASK) && !vmm.phys[i]->lingering ? vmm.phys[i] : NULL;
}

CUmemGenericAllocationHandle sim_vmm_handle(const sim_phys_t *p)
{
    return SIM_VMM_HANDLE_TAG | p->id;
}

/* Adds p (ids only grow: appended) and gives it its keys. */
static void phys_add(sim_phys_t *p)
{
    vmm.phys = sim_array_room(vmm.phys, vmm.nphys, &vmm.cap_phys, sizeof *vmm.phys, 64);
    p->id = ++vmm.next_id;
    p->block_id = ++sim.next_buffer_id;
    p->key = vmm.next_key;
    vmm.next_key += p->size;
    vmm.phys[vmm.nphys++] = p;
}

/* Whether a descriptor other than p's own refers to p's memfd in this
 * process (an exported one the program has not closed). */
static bool descriptor_open(const sim_phys_t *p)
{
    DIR *dir = opendir("/proc/self/fd");
    if (!dir)
        return false;
    bool open = false;
    int self = dirfd(dir);
    for (struct dirent *e; !open && (e = readdir(dir));) {
        int fd = atoi(e->d_name);
        struct stat st;
        if (e->d_name[0] == '.' || fd == p->fd || fd == self || fstat(fd, &st) != 0)
            continue;
        open = st.st_dev == p->st_dev && st.st_ino == p->st_ino;
    }
    closedir(dir);
    return open;
}

/* Gives p back once nothing refers to it: its device's charge, its bytes.
 * Memory released while a descriptor exported from it is still open in
 * this process lingers, charged, until the descriptor closes (CUDA frees it
 * once "all shareable handles are closed and the allocation is released");
 * a descriptor held by another process is not seen. */
static void phys_maybe_free(sim_phys_t *p)
{
    if (p->refs || p->maps)
        return;
    if (p->exported && descriptor_open(p)) {
        p->lingering = true;
        return;
    }
    if (p->charged) {
        sim.dev[p->device].vmm_bytes -= p->size;
        sim_dev_uncharge(&sim.dev[p->device], p->size);
        atomic_fetch_add(&sim.device_frees, 1);
    }
    close(p->fd);
    size_t i = phys_lower(p->id); /* before the count changes: it searches vmm.nphys entries */
    sim_array_close(vmm.phys, vmm.nphys--, sizeof *vmm.phys, i);
    free(p);
}

void sim_vmm_sweep(void)
{
    for (size_t i = 0; i < vmm.nphys;) {
        sim_phys_t *p = vmm.phys[i];
        size_t before = vmm.nphys;
        if (p->lingering)
            phys_maybe_free(p);
        if (vmm.nphys == before)
            i++;
    }
}

/* The memfd's name: "cucache-sim-vmm:DEVICE:HANDLE_TYPES". */
#define MEMFD_PREFIX "cucache-sim-vmm:"

CUresult sim_vmm_create(size_t size, const CUmemAllocationProp *prop, sim_phys_t **out)
{
    int device = prop->location.id;
    sim_device_t *d = &sim.dev[device];
    sim_ipc_sweep();
    sim_vmm_sweep();
    if (!sim_dev_charge(d, size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    char name[64];
    snprintf(name, sizeof name, MEMFD_PREFIX "%d:%u", device, (unsigned)prop->requestedHandleTypes);
    int fd = memfd_create(name, MFD_CLOEXEC);
    struct stat st;
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        sim_dev_uncharge(d, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sim_phys_t *p = sim_xcalloc(1, sizeof *p);
    p->fd = fd;
    p->size = size;
    p->device = device;
    p->prop = *prop;
    p->refs = 1;
    p->charged = true;
    p->st_dev = st.st_dev;
    p->st_ino = st.st_ino;
    d->vmm_bytes += size;
    phys_add(p);
    atomic_fetch_add(&sim.device_allocs, 1);
    *out = p;
    return CUDA_SUCCESS;
}

CUresult sim_vmm_release(sim_phys_t *p)
{
    if (p->refs == 0)
        return CUDA_ERROR_INVALID_VALUE;
    p->refs--;
    phys_maybe_free(p);
    return CUDA_SUCCESS;
}

CUresult sim_vmm_export_fd(sim_phys_t *p, int *out)
{
    int fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->exported = true;
    *out = fd;
    return CUDA_SUCCESS;
}

CUresult sim_vmm_import_fd(int fd, sim_phys_t **out)
{
    char link[64], target[128];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    struct stat st;
    if (fd < 0 || n <= 0 || fstat(fd, &st) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    target[n] = 0;
    int device;
    unsigned types;
    char tail;
    if (sscanf(target, "/memfd:" MEMFD_PREFIX "%d:%u%c", &device, &types, &tail) != 3 || tail != ' ' ||
        !(types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) || st.st_size <= 0 ||
        (size_t)st.st_size % sim.cfg.vmm_granularity)
        return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= sim.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    /* The process's own memory comes back as the same allocation. */
    for (size_t i = 0; i < vmm.nphys; i++)
        if (vmm.phys[i]->st_dev == st.st_dev && vmm.phys[i]->st_ino == st.st_ino) {
            vmm.phys[i]->lingering = false; /* released, and back through its descriptor */
            vmm.phys[i]->refs++;
            *out = vmm.phys[i];
            return CUDA_SUCCESS;
        }
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_phys_t *p = sim_xcalloc(1, sizeof *p);
    p->fd = own;
    p->size = (size_t)st.st_size;
    p->device = device;
    p->prop = (CUmemAllocationProp){
        .type = CU_MEM_ALLOCATION_TYPE_PINNED,
        .requestedHandleTypes = (CUmemAllocationHandleType)types,
        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
    };
    p->refs = 1;
    p->st_dev = st.st_dev;
    p->st_ino = st.st_ino;
    phys_add(p);
    *out = p;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Mappings
 * ---------------------------------------------------------------------- */

/* Puts the reservation's PROT_NONE addresses back over [addr, addr+len). */
static void addresses_restore(uintptr_t addr, size_t len)
{
    if (mmap((void *)addr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) ==
        MAP_FAILED) {
        sim_log("virtual memory: cannot restore addresses [0x%lx, 0x%lx): %s", (unsigned long)addr,
                (unsigned long)(addr + len), strerror(errno));
        abort();
    }
}

CUresult sim_vmm_map(uintptr_t addr, size_t size, sim_phys_t *p)
{
    void *m = mmap((void *)addr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd, 0);
    if (m == MAP_FAILED) {
        addresses_restore(addr, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* A fork child does not inherit device memory. */
    madvise(m, size, MADV_DONTFORK);
    sim_alloc_new(addr, size, SIM_ALLOC_VMM, p->device)->phys = p;
    p->maps++;
    return CUDA_SUCCESS;
}

sim_alloc_t *sim_vmm_mapping(uintptr_t addr)
{
    sim_alloc_t *a = sim_alloc_find(addr);
    return a && a->kind == SIM_ALLOC_VMM ? a : NULL;
}

bool sim_vmm_whole_mappings(uintptr_t addr, size_t size)
{
    uintptr_t end = addr + size;
    if (size == 0 || end < addr)
        return false;
    for (uintptr_t at = addr; at < end;) {
        sim_alloc_t *a = sim_alloc_exact(at);
        if (!a || a->kind != SIM_ALLOC_VMM || a->size > end - at)
            return false;
        at += a->size;
    }
    return size > 0;
}

CUresult sim_vmm_unmap(uintptr_t addr, size_t size, const char *what)
{
    /* 1. work still queued on these pages, through these addresses, races
     * with the unmap: reported once */
    for (uintptr_t at = addr; at < addr + size;) {
        sim_alloc_t *a = sim_alloc_exact(at);
        race_check_unmap(at, a->phys->key, a->phys->key + a->size, what);
        at += a->size;
    }
    /* 2. the simulator waits for it all the same; the lock drops while it
     * waits, so the mappings are looked up again each time */
    for (bool waited = true; waited;) {
        if (!sim_vmm_whole_mappings(addr, size))
            return CUDA_ERROR_INVALID_VALUE; /* another thread unmapped them meanwhile */
        waited = false;
        for (uintptr_t at = addr; at < addr + size && !waited;) {
            sim_alloc_t *a = sim_alloc_exact(at);
            size_t len = a->size;
            waited = race_wait_unmap(at, a->phys->key, a->phys->key + len);
            at += len;
        }
    }
    /* 3. unmapped, the lock held throughout */
    for (uintptr_t at = addr; at < addr + size;) {
        sim_alloc_t *a = sim_alloc_exact(at);
        size_t len = a->size;
        sim_phys_t *p = a->phys;
        addresses_restore(at, len);
        sim_alloc_remove(a);
        p->maps--;
        phys_maybe_free(p);
        at += len;
    }
    return CUDA_SUCCESS;
}

CUresult sim_vmm_address_free(uintptr_t ptr, size_t size)
{
    sim_reservation_t *res = sim_vmm_reservation_of(ptr);
    if (!res || res->addr != ptr || res->size != size || res->freeing)
        return CUDA_ERROR_INVALID_VALUE;
    res->freeing = true; /* cuMemMap refuses it from now on */
    for (;;) {
        const sim_alloc_t *left = NULL;
        for (size_t i = 0; i < sim.nallocs && !left; i++)
            if (sim.allocs[i].kind == SIM_ALLOC_VMM && sim.allocs[i].addr - ptr < size)
                left = &sim.allocs[i];
        if (!left)
            break;
        sim_vmm_unmap(left->addr, left->size, "cuMemAddressFree");
    }
    reservation_free(sim_vmm_reservation_of(ptr)); /* the array may have moved while waiting */
    return CUDA_SUCCESS;
}

bool sim_vmm_op_ok(const sim_op_t *op, int device)
{
    const sim_range_t *rg = op->nranges > 2 ? op->xranges : op->ranges;
    for (uint32_t k = 0; k < op->nranges; k++)
        if (rg[k].hi > rg[k].lo && sim_vmm_region(rg[k].lo) &&
            !sim_vmm_range_ok(rg[k].lo, rg[k].hi - rg[k].lo, rg[k].write, device))
            return false;
    return true;
}

/* The host's protection for a mapping: what the most permissive device has. */
static int host_prot(const sim_alloc_t *a)
{
    unsigned most = 0;
    for (int i = 0; i < sim.ndev; i++)
        most |= a->access[i];
    return most == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
           : most & CU_MEM_ACCESS_FLAGS_PROT_READ     ? PROT_READ
                                                      : PROT_NONE;
}

void sim_vmm_set_access(uintptr_t addr, size_t size, int device, unsigned flags)
{
    /* Taking access away waits for the devices' queued work, as the call's
     * "synchronous behavior" allows: queued copies must not fault the
     * simulator (on a GPU they would fault, or not, by timing). */
    bool shrinks = false;
    for (uintptr_t at = addr; at < addr + size && !shrinks;) {
        sim_alloc_t *a = sim_alloc_exact(at);
        shrinks = (a->access[device] & ~flags) != 0;
        at += a->size;
    }
    for (int i = 0; shrinks && i < sim.ndev; i++)
        sim_device_wait_idle(&sim.dev[i]);
    if (shrinks && !sim_vmm_whole_mappings(addr, size))
        return; /* unmapped by another thread meanwhile */
    for (uintptr_t at = addr; at < addr + size;) {
        sim_alloc_t *a = sim_alloc_exact(at);
        a->access[device] = (uint8_t)flags;
        if (mprotect((void *)at, a->size, host_prot(a)) != 0) {
            sim_log("virtual memory: mprotect of [0x%lx, 0x%lx): %s", (unsigned long)at, (unsigned long)(at + a->size),
                    strerror(errno));
            abort();
        }
        at += a->size;
    }
}

bool sim_vmm_range_ok(uintptr_t addr, size_t bytes, bool write, int device)
{
    if (bytes == 0)
        bytes = 1;
    uintptr_t end = addr + bytes;
    if (end < addr)
        return false;
    for (uintptr_t at = addr; at < end;) {
        sim_alloc_t *a = sim_vmm_mapping(at);
        if (!a)
            return false;
        unsigned acc = 0;
        if (device >= 0)
            acc = a->access[device];
        else
            for (int i = 0; i < sim.ndev; i++)
                acc |= a->access[i];
        if (!(acc & CU_MEM_ACCESS_FLAGS_PROT_READ) || (write && acc != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            return false;
        at = a->addr + a->size;
    }
    return true;
}

size_t sim_vmm_translate(const sim_range_t *in, sim_range_t *out, size_t max)
{
    size_t n = 0;
    if (!sim_vmm_region(in->lo)) {
        if (max)
            out[0] = (sim_range_t){in->lo, in->hi, in->write, in->lo};
        return 1;
    }
    for (uintptr_t at = in->lo; at < in->hi;) {
        sim_alloc_t *a = sim_vmm_mapping(at);
        if (!a) { /* not mapped (not reached for checked ranges): the addresses themselves */
            if (n < max)
                out[n] = (sim_range_t){at, in->hi, in->write, at};
            return n + 1;
        }
        uintptr_t stop = a->addr + a->size < in->hi ? a->addr + a->size : in->hi;
        if (n < max)
            out[n] = (sim_range_t){a->phys->key + (at - a->addr), a->phys->key + (stop - a->addr), in->write, at};
        n++;
        at = stop;
    }
    return n;
}

bool sim_vmm_describe_key(uintptr_t lo, uintptr_t hi, char *buf, size_t len)
{
    if (lo < KEY_BASE)
        return false;
    for (size_t i = 0; i < vmm.nphys; i++) {
        const sim_phys_t *p = vmm.phys[i];
        if (lo < p->key || lo - p->key >= p->size)
            continue;
        size_t off = lo - p->key, end = hi - p->key;
        /* every address showing these bytes: [a, b) = [c, d) ... */
        size_t n = 0;
        int aliases = 0;
        for (size_t k = 0; k < sim.nallocs && n < len; k++) {
            const sim_alloc_t *a = &sim.allocs[k];
            if (a->kind != SIM_ALLOC_VMM || a->phys != p || a->size < end)
                continue;
            n += (size_t)snprintf(buf + n, len - n, "%s[0x%lx, 0x%lx)", aliases++ ? " = " : "",
                                  (unsigned long)(a->addr + off), (unsigned long)(a->addr + end));
        }
        if (n < len)
            snprintf(buf + n, len - n, "%s(bytes %#zx-%#zx of cuMemCreate handle %#llx%s)", aliases ? " " : "", off,
                     end, (unsigned long long)sim_vmm_handle(p), aliases ? "" : ", unmapped");
        return true;
    }
    snprintf(buf, len, "of a released cuMemCreate allocation");
    return true;
}

/* ------------------------------------------------------------------------
 * Extension API for tests
 * ---------------------------------------------------------------------- */

static struct {
    bool armed;
    unsigned after;
    CUresult error;
} inject[SIM_VMM_NCALLS];

CUresult sim_vmm_injected(sim_vmm_call_t call)
{
    if (!inject[call].armed)
        return CUDA_SUCCESS;
    if (inject[call].after > 0) {
        inject[call].after--;
        return CUDA_SUCCESS;
    }
    inject[call].armed = false;
    return inject[call].error;
}

SIM_API void cucacheSimVmmFail(enum cucache_sim_vmm_call call, unsigned after, CUresult error)
{
    if ((unsigned)call >= SIM_VMM_NCALLS)
        return;
    sim_lock();
    inject[call].armed = error != CUDA_SUCCESS;
    inject[call].after = after;
    inject[call].error = error;
    sim_unlock();
}

SIM_API void cucacheSimVmmCounts(size_t *reservations, size_t *allocations, size_t *mappings)
{
    sim_lock();
    size_t maps = 0;
    for (size_t i = 0; i < sim.nallocs; i++)
        maps += sim.allocs[i].kind == SIM_ALLOC_VMM;
    if (reservations)
        *reservations = vmm.nres;
    if (allocations)
        *allocations = vmm.nphys;
    if (mappings)
        *mappings = maps;
    sim_unlock();
}
