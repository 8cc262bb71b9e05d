/*
 * IPC between processes that both run the simulated device.
 *
 * A device's memory is a memfd mapped at [base, base + span) with file
 * offset = address - base (engine_mem.c), so another process can map the
 * same bytes: the handle names the exporter's pid, that memfd's descriptor
 * number and the allocation's offset, and the importer opens
 * /proc/<pid>/fd/<n> (allowed for processes of the same user) and maps the
 * range into addresses of its own device.  The race detector does not span
 * processes: it sees the importer's own work on the mapping only.
 *
 * The export table.  What CUDA keeps across processes (an exported
 * allocation stays alive while an importer has it open; a handle of a freed
 * allocation is stale) lives in a second memfd per process, created at the
 * first export and mapped by importers: a slot per exported allocation with
 * its buffer id, its state and the importers' open count, all atomic.
 *
 *   importer open:  opens += 1, then checks the slot is live with that
 *                   buffer id (else opens -= 1: a stale handle);
 *   exporter free:  state = FREED, then reads opens: 0 gives the memory
 *                   back now; otherwise it is kept (its pages charged, its
 *                   addresses unused) until a sweep finds opens at 0.
 *
 * With sequentially consistent atomics an open that succeeds is always
 * seen by the free.  Errors: a malformed handle is CUDA_ERROR_INVALID_VALUE,
 * one whose exporter is gone or whose allocation was freed is
 * CUDA_ERROR_INVALID_HANDLE, opening in the exporting process is
 * CUDA_ERROR_INVALID_CONTEXT (as the real driver answers), closing an
 * address that is not open is CUDA_ERROR_INVALID_VALUE.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"

#define IPC_MAGIC "CUSIMIPC"
#define IPC_VERSION 1u
#define IPC_SLOTS 4096u

enum { SLOT_EMPTY = 0, SLOT_LIVE = 1, SLOT_FREED = 2 };

typedef struct slot_s {
    _Atomic uint64_t buffer_id;
    _Atomic uint32_t state; /* SLOT_* */
    _Atomic uint32_t opens; /* importers' mappings */
} slot_t;

typedef struct table_s {
    char magic[8];
    uint64_t nonce;
    uint32_t nslots;
    uint32_t pad;
    slot_t slot[];
} table_t;

#define TABLE_BYTES (sizeof(table_t) + IPC_SLOTS * sizeof(slot_t))

/* An export freed while open: its memory, kept until opens reaches 0. */
typedef struct kept_s {
    uint32_t slot;
    int device;
    uintptr_t addr;
    size_t reserved;
} kept_t;

/* An open import: one mapping per handle, counted. */
typedef struct import_s {
    int32_t pid;
    uint64_t nonce;
    uint32_t slot;
    uint64_t buffer_id;
    unsigned refs;
    uintptr_t addr;     /* what the program got */
    uintptr_t map;      /* the mapping's start (a page boundary below addr) */
    size_t map_len;     /* bytes mapped */
    int device;         /* the importer's device whose addresses it uses */
    table_t *remote;    /* the exporter's table, mapped */
} import_t;

static struct {
    int table_fd; /* this process's export table (0 until the first export) */
    table_t *table;
    kept_t *kept;
    size_t nkept, cap_kept;
    import_t *imports;
    size_t nimports, cap_imports;
} ipc;

/* ------------------------------------------------------------------------
 * Exporting
 * ---------------------------------------------------------------------- */

static CUresult table_create(void)
{
    int fd = memfd_create("cucache-sim-ipc", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)TABLE_BYTES) != 0) {
        sim_log("IPC: cannot create the export table: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    table_t *t = mmap(NULL, TABLE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (t == MAP_FAILED) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    madvise(t, TABLE_BYTES, MADV_DONTFORK);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    memcpy(t->magic, IPC_MAGIC, 8);
    t->nonce = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 17) ^ (uintptr_t)t;
    t->nslots = IPC_SLOTS;
    ipc.table = t;
    ipc.table_fd = fd;
    return CUDA_SUCCESS;
}

CUresult sim_ipc_export(sim_alloc_t *a, sim_ipc_handle_t *h)
{
    if (!ipc.table) {
        CUresult r = table_create();
        if (r != CUDA_SUCCESS)
            return r;
    }
    if (!a->ipc_slot) {
        for (uint32_t i = 0; i < IPC_SLOTS && !a->ipc_slot; i++) {
            slot_t *s = &ipc.table->slot[i];
            if (atomic_load(&s->state) == SLOT_EMPTY && atomic_load(&s->opens) == 0) {
                atomic_store(&s->buffer_id, a->buffer_id);
                atomic_store(&s->state, SLOT_LIVE);
                a->ipc_slot = i + 1;
            }
        }
        if (!a->ipc_slot)
            return CUDA_ERROR_OUT_OF_MEMORY; /* IPC_SLOTS exports live at once */
    }
    sim_device_t *d = &sim.dev[a->device];
    memset(h, 0, sizeof *h);
    memcpy(h->magic, IPC_MAGIC, 8);
    h->version = IPC_VERSION;
    h->pid = (int32_t)getpid();
    h->mem_fd = d->memfd;
    h->table_fd = ipc.table_fd;
    h->device = (uint32_t)a->device;
    h->slot = a->ipc_slot - 1;
    h->offset = a->addr - (uintptr_t)d->base;
    h->size = a->size;
    h->buffer_id = a->buffer_id;
    h->nonce = ipc.table->nonce;
    return CUDA_SUCCESS;
}

bool sim_ipc_freeing(sim_alloc_t *a)
{
    if (!a->ipc_slot)
        return true;
    slot_t *s = &ipc.table->slot[a->ipc_slot - 1];
    atomic_store(&s->state, SLOT_FREED);
    if (atomic_load(&s->opens) == 0) {
        atomic_store(&s->state, SLOT_EMPTY);
        return true;
    }
    ipc.kept = sim_array_room(ipc.kept, ipc.nkept, &ipc.cap_kept, sizeof *ipc.kept, 16);
    ipc.kept[ipc.nkept++] = (kept_t){a->ipc_slot - 1, a->device, a->addr, a->reserved};
    return false;
}

void sim_ipc_sweep(void)
{
    size_t j = 0;
    for (size_t i = 0; i < ipc.nkept; i++) {
        kept_t k = ipc.kept[i];
        slot_t *s = &ipc.table->slot[k.slot];
        if (atomic_load(&s->opens) != 0) {
            ipc.kept[j++] = k;
            continue;
        }
        sim_dev_release_range(k.device, k.addr, k.reserved);
        atomic_store(&s->state, SLOT_EMPTY);
    }
    ipc.nkept = j;
}

/* ------------------------------------------------------------------------
 * Importing
 * ---------------------------------------------------------------------- */

/* Opens another process's descriptor; -1 when it is gone or not ours. */
static int peer_fd(int32_t pid, int32_t fd)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)fd);
    return open(path, O_RDWR | O_CLOEXEC);
}

static import_t *import_find(const sim_ipc_handle_t *h)
{
    for (size_t i = 0; i < ipc.nimports; i++) {
        import_t *m = &ipc.imports[i];
        if (m->pid == h->pid && m->nonce == h->nonce && m->slot == h->slot && m->buffer_id == h->buffer_id)
            return m;
    }
    return NULL;
}

/* Maps the exporter's table and counts this process's open on the slot:
 * CUDA_SUCCESS with *out, or the error for a stale or foreign handle. */
static CUresult remote_open(const sim_ipc_handle_t *h, table_t **out)
{
    int fd = peer_fd(h->pid, h->table_fd);
    if (fd < 0)
        return CUDA_ERROR_INVALID_HANDLE; /* the exporter is gone */
    struct stat st;
    table_t *t = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == TABLE_BYTES)
        t = mmap(NULL, TABLE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (t == MAP_FAILED)
        return CUDA_ERROR_INVALID_HANDLE;
    if (memcmp(t->magic, IPC_MAGIC, 8) != 0 || t->nonce != h->nonce || t->nslots != IPC_SLOTS) {
        munmap(t, TABLE_BYTES);
        return CUDA_ERROR_INVALID_HANDLE; /* another process now has that pid */
    }
    slot_t *s = &t->slot[h->slot];
    atomic_fetch_add(&s->opens, 1);
    if (atomic_load(&s->state) != SLOT_LIVE || atomic_load(&s->buffer_id) != h->buffer_id) {
        atomic_fetch_sub(&s->opens, 1);
        munmap(t, TABLE_BYTES);
        return CUDA_ERROR_INVALID_HANDLE; /* freed since it was exported */
    }
    madvise(t, TABLE_BYTES, MADV_DONTFORK);
    *out = t;
    return CUDA_SUCCESS;
}

static void remote_close(table_t *t, uint32_t slot)
{
    atomic_fetch_sub(&t->slot[slot].opens, 1);
    munmap(t, TABLE_BYTES);
}

CUresult sim_ipc_open(struct CUctx_st *ctx, const sim_ipc_handle_t *h, uintptr_t *out)
{
    if (memcmp(h->magic, IPC_MAGIC, 8) != 0 || h->version != IPC_VERSION || h->slot >= IPC_SLOTS || h->size == 0 ||
        h->pid <= 0 || h->offset > SIZE_MAX - h->size)
        return CUDA_ERROR_INVALID_VALUE;
    if (h->pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT;
    import_t *m = import_find(h);
    if (m) {
        m->refs++;
        *out = m->addr;
        return CUDA_SUCCESS;
    }
    table_t *t;
    CUresult r = remote_open(h, &t);
    if (r != CUDA_SUCCESS)
        return r;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint64_t lo = h->offset & ~(uint64_t)(page - 1);
    size_t map_len = (size_t)((h->offset + sim_dev_round(h->size) - lo + page - 1) / page * page);
    sim_device_t *d = ctx->dev;
    uintptr_t va = sim_dev_addr_take(d, map_len);
    int fd = va ? peer_fd(h->pid, h->mem_fd) : -1;
    void *p = fd >= 0 ? mmap((void *)va, map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)lo)
                      : MAP_FAILED;
    if (fd >= 0)
        close(fd);
    if (p == MAP_FAILED) {
        if (va)
            sim_dev_addr_give(d, va, map_len);
        remote_close(t, h->slot);
        return va ? CUDA_ERROR_MAP_FAILED : CUDA_ERROR_OUT_OF_MEMORY;
    }
    ipc.imports = sim_array_room(ipc.imports, ipc.nimports, &ipc.cap_imports, sizeof *ipc.imports, 16);
    m = &ipc.imports[ipc.nimports++];
    *m = (import_t){h->pid, h->nonce, h->slot, h->buffer_id, 1, va + (uintptr_t)(h->offset - lo), va, map_len,
                    d->ordinal, t};
    sim_alloc_add(m->addr, (size_t)h->size, SIM_ALLOC_IPC, 0, ctx);
    *out = m->addr;
    return CUDA_SUCCESS;
}

/* Drops an import entirely: the mapping goes back to this device's own
 * memory, the addresses to its free ranges, the open to the exporter. */
static void import_drop(size_t i)
{
    import_t m = ipc.imports[i];
    sim_device_t *d = &sim.dev[m.device];
    mmap((void *)m.map, m.map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, d->memfd,
         (off_t)(m.map - (uintptr_t)d->base));
    sim_dev_addr_give(d, m.map, m.map_len);
    remote_close(m.remote, m.slot);
    ipc.imports[i] = ipc.imports[--ipc.nimports];
}

bool sim_ipc_is_open(uintptr_t addr, int *device, bool *last)
{
    for (size_t i = 0; i < ipc.nimports; i++)
        if (ipc.imports[i].addr == addr) {
            *device = ipc.imports[i].device;
            *last = ipc.imports[i].refs == 1;
            return true;
        }
    return false;
}

CUresult sim_ipc_close(uintptr_t addr, bool all)
{
    for (size_t i = 0; i < ipc.nimports; i++) {
        import_t *m = &ipc.imports[i];
        if (m->addr != addr)
            continue;
        if (!all && --m->refs > 0)
            return CUDA_SUCCESS;
        sim_alloc_t *a = sim_alloc_exact(addr);
        if (a && a->kind == SIM_ALLOC_IPC)
            sim_host_free(a);
        import_drop(i);
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}
