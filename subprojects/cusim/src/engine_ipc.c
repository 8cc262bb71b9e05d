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
 *
 * The same mapping serves the allocations of an exported pool
 * (cuMemPoolExportPointer, driver_pool_share.c): their handle has its own
 * magic, and the importer's mapping is freed with cuMemFree or
 * cuMemFreeAsync instead of closed.  Either way the importer charges no
 * pages: the exporter holds them, so a shared device (CUCACHE_SIM_SHARED)
 * counts the bytes once.
 *
 * Events.  The table also has a slot per interprocess event (engine.h, "IPC
 * events"): its id, state and importers' open count as above, the number
 * of its latest record (taken by whichever process records it) and the
 * highest number whose record completed.  A foreign record is waited for
 * by polling that number: a wait on an imported event ends, in real time,
 * once the exporter's record completed (its device time included), and the
 * race detector, whose clocks do not span processes, learns nothing from
 * it.  The tables of other processes that events were opened from stay
 * mapped for the life of the process (a queued wait may still read one).
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

#define IPC_MAGIC SIM_IPC_MAGIC_MEM /* the table's */
#define IPC_EVENT_MAGIC "CUSIMIPE"
#define IPC_VERSION 2u
#define IPC_SLOTS 4096u
#define IPC_EVENT_SLOTS 1024u
#define IPC_POLL_US 20 /* how often a foreign record's completion is read */

enum { SLOT_EMPTY = 0, SLOT_LIVE = 1, SLOT_FREED = 2 };

typedef struct slot_s {
    _Atomic uint64_t buffer_id;
    _Atomic uint32_t state; /* SLOT_* */
    _Atomic uint32_t opens; /* importers' mappings */
} slot_t;

/* An interprocess event's slot. */
typedef struct event_slot_s {
    _Atomic uint64_t id;       /* the event's id in the exporter */
    _Atomic uint32_t state;    /* SLOT_* */
    _Atomic uint32_t opens;    /* importers' events */
    _Atomic uint64_t recorded; /* the number of the latest record (any process), 0: never recorded */
    _Atomic uint64_t done;     /* the highest number whose record completed */
} event_slot_t;

typedef struct table_s {
    char magic[8];
    uint64_t nonce;
    uint32_t version; /* IPC_VERSION */
    uint32_t nslots;
    slot_t slot[IPC_SLOTS];
    event_slot_t event[IPC_EVENT_SLOTS];
} table_t;

#define TABLE_BYTES sizeof(table_t)

/* An interprocess event's share: its slot, in this process's table
 * (exported) or another's (imported). */
struct sim_ipc_event_s {
    event_slot_t *slot;
    bool imported;
};

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
    uint64_t event_ids;  /* last id given to an interprocess event */
    struct remote_s {    /* other processes' tables that events were opened from */
        int32_t pid;
        uint64_t nonce;
        table_t *table;
    } *remotes;
    size_t nremotes, cap_remotes;
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
    t->version = IPC_VERSION;
    t->nslots = IPC_SLOTS;
    ipc.table = t;
    ipc.table_fd = fd;
    return CUDA_SUCCESS;
}

CUresult sim_ipc_identity(int32_t *pid, uint64_t *nonce)
{
    if (!ipc.table) {
        CUresult r = table_create();
        if (r != CUDA_SUCCESS)
            return r;
    }
    *pid = (int32_t)getpid();
    *nonce = ipc.table->nonce;
    return CUDA_SUCCESS;
}

CUresult sim_ipc_export(sim_alloc_t *a, const char magic[8], sim_ipc_handle_t *h)
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
    memcpy(h->magic, magic, 8);
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

/* Maps the export table that process pid has as descriptor fd, if its
 * nonce is `nonce`; NULL when the exporter is gone (or another process now
 * has its pid). */
static table_t *remote_map(int32_t pid, int32_t fd_no, uint64_t nonce)
{
    int fd = peer_fd(pid, fd_no);
    if (fd < 0)
        return NULL;
    struct stat st;
    table_t *t = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == TABLE_BYTES)
        t = mmap(NULL, TABLE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (t == MAP_FAILED)
        return NULL;
    if (memcmp(t->magic, IPC_MAGIC, 8) != 0 || t->nonce != nonce || t->version != IPC_VERSION ||
        t->nslots != IPC_SLOTS) {
        munmap(t, TABLE_BYTES);
        return NULL;
    }
    madvise(t, TABLE_BYTES, MADV_DONTFORK);
    return t;
}

/* Maps the exporter's table and counts this process's open on the slot:
 * CUDA_SUCCESS with *out, or the error for a stale or foreign handle. */
static CUresult remote_open(const sim_ipc_handle_t *h, table_t **out)
{
    table_t *t = remote_map(h->pid, h->table_fd, h->nonce);
    if (!t)
        return CUDA_ERROR_INVALID_HANDLE; /* the exporter is gone */
    slot_t *s = &t->slot[h->slot];
    atomic_fetch_add(&s->opens, 1);
    if (atomic_load(&s->state) != SLOT_LIVE || atomic_load(&s->buffer_id) != h->buffer_id) {
        atomic_fetch_sub(&s->opens, 1);
        munmap(t, TABLE_BYTES);
        return CUDA_ERROR_INVALID_HANDLE; /* freed since it was exported */
    }
    *out = t;
    return CUDA_SUCCESS;
}

static void remote_close(table_t *t, uint32_t slot)
{
    atomic_fetch_sub(&t->slot[slot].opens, 1);
    munmap(t, TABLE_BYTES);
}

CUresult sim_ipc_open(struct CUctx_st *ctx, sim_device_t *d, const char magic[8], const sim_ipc_handle_t *h,
                      uintptr_t *out)
{
    if (memcmp(h->magic, magic, 8) != 0 || h->version != IPC_VERSION || h->slot >= IPC_SLOTS || h->size == 0 ||
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
    sim_alloc_t *a = sim_alloc_new(m->addr, (size_t)h->size, SIM_ALLOC_IPC, d->ordinal);
    a->ctx = ctx;
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

void sim_ipc_free_import(sim_alloc_t *a)
{
    uintptr_t addr = a->addr;
    for (size_t i = 0; i < ipc.nimports; i++)
        if (ipc.imports[i].addr == addr && ipc.imports[i].refs > 1) {
            ipc.imports[i].refs--;
            a->freeing = false; /* still open: usable again */
            return;
        }
    sim_ipc_close(addr, false);
}

/* ------------------------------------------------------------------------
 * Events
 * ---------------------------------------------------------------------- */

CUresult sim_ipc_event_create(struct CUevent_st *e)
{
    if (!ipc.table) {
        CUresult r = table_create();
        if (r != CUDA_SUCCESS)
            return r;
    }
    for (uint32_t i = 0; i < IPC_EVENT_SLOTS; i++) {
        event_slot_t *s = &ipc.table->event[i];
        if (atomic_load(&s->state) != SLOT_EMPTY || atomic_load(&s->opens) != 0)
            continue;
        atomic_store(&s->id, ++ipc.event_ids);
        atomic_store(&s->recorded, 0);
        atomic_store(&s->done, 0);
        atomic_store(&s->state, SLOT_LIVE);
        e->ipc = sim_xcalloc(1, sizeof *e->ipc);
        e->ipc->slot = s;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_OUT_OF_MEMORY; /* IPC_EVENT_SLOTS interprocess events live at once */
}

CUresult sim_ipc_event_export(const struct CUevent_st *e, sim_ipc_event_handle_t *h)
{
    if (!e->ipc || e->ipc->imported)
        return CUDA_ERROR_INVALID_HANDLE;
    memset(h, 0, sizeof *h);
    memcpy(h->magic, IPC_EVENT_MAGIC, 8);
    h->version = IPC_VERSION;
    h->pid = (int32_t)getpid();
    h->table_fd = ipc.table_fd;
    h->slot = (uint32_t)(e->ipc->slot - ipc.table->event);
    h->id = atomic_load(&e->ipc->slot->id);
    h->nonce = ipc.table->nonce;
    h->device = (uint32_t)e->ctx->dev->ordinal;
    return CUDA_SUCCESS;
}

/* The table of an exporter, mapped once for the life of the process. */
static table_t *remote_table(const sim_ipc_event_handle_t *h)
{
    for (size_t i = 0; i < ipc.nremotes; i++)
        if (ipc.remotes[i].pid == h->pid && ipc.remotes[i].nonce == h->nonce)
            return ipc.remotes[i].table;
    table_t *t = remote_map(h->pid, h->table_fd, h->nonce);
    if (!t)
        return NULL;
    ipc.remotes = sim_array_room(ipc.remotes, ipc.nremotes, &ipc.cap_remotes, sizeof *ipc.remotes, 4);
    ipc.remotes[ipc.nremotes++] = (struct remote_s){h->pid, h->nonce, t};
    return t;
}

CUresult sim_ipc_event_open(struct CUctx_st *ctx, const sim_ipc_event_handle_t *h, struct CUevent_st **out)
{
    if (memcmp(h->magic, IPC_EVENT_MAGIC, 8) != 0 || h->version != IPC_VERSION || h->slot >= IPC_EVENT_SLOTS ||
        h->pid <= 0 || h->id == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (h->pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT;
    table_t *t = remote_table(h);
    if (!t)
        return CUDA_ERROR_INVALID_HANDLE; /* the exporter is gone */
    event_slot_t *s = &t->event[h->slot];
    atomic_fetch_add(&s->opens, 1);
    if (atomic_load(&s->state) != SLOT_LIVE || atomic_load(&s->id) != h->id) {
        atomic_fetch_sub(&s->opens, 1);
        return CUDA_ERROR_INVALID_HANDLE; /* destroyed since it was exported */
    }
    struct CUevent_st *e = sim_xcalloc(1, sizeof *e);
    e->magic = SIM_MAGIC_EVENT;
    e->flags = CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    e->ctx = ctx;
    e->ipc = sim_xcalloc(1, sizeof *e->ipc);
    e->ipc->slot = s;
    e->ipc->imported = true;
    *out = e;
    return CUDA_SUCCESS;
}

uint64_t sim_ipc_event_recorded(struct CUevent_st *e)
{
    e->ipc_gen = atomic_fetch_add(&e->ipc->slot->recorded, 1) + 1;
    return e->ipc_gen;
}

void sim_ipc_event_done(struct CUevent_st *e, uint64_t gen)
{
    _Atomic uint64_t *done = &e->ipc->slot->done;
    uint64_t cur = atomic_load(done);
    while (cur < gen && !atomic_compare_exchange_weak(done, &cur, gen))
        ;
}

void sim_ipc_event_release(struct CUevent_st *e)
{
    if (!e->ipc)
        return;
    event_slot_t *s = e->ipc->slot;
    if (e->ipc->imported)
        atomic_fetch_sub(&s->opens, 1);
    else
        atomic_store(&s->state, SLOT_EMPTY); /* taken again once no importer has it open */
    free(e->ipc);
    e->ipc = NULL;
}

uint64_t sim_ipc_event_foreign(const struct CUevent_st *e)
{
    if (!e->ipc)
        return 0;
    uint64_t latest = atomic_load(&e->ipc->slot->recorded);
    return latest == e->ipc_gen ? 0 : latest;
}

bool sim_ipc_event_reached(const struct CUevent_st *e, uint64_t gen)
{
    return atomic_load(&e->ipc->slot->done) >= gen;
}

void sim_ipc_event_host_wait(const struct CUevent_st *e, uint64_t gen)
{
    _Atomic uint64_t *done = &e->ipc->slot->done; /* the event may be destroyed meanwhile, the slot stays mapped */
    while (atomic_load(done) < gen) {
        sim_unlock();
        sim_sleep_us(IPC_POLL_US);
        sim_lock();
    }
}

/* What a wait op polls: the slot's completed number and the one wanted. */
typedef struct ipc_wait_s {
    _Atomic uint64_t *done;
    uint64_t gen;
} ipc_wait_t;

/* A wait op's body, on its stream's worker without the lock. */
static void ipc_wait_run(void *arg)
{
    ipc_wait_t *w = arg;
    while (atomic_load(w->done) < w->gen)
        sim_sleep_us(IPC_POLL_US);
}

sim_op_t *sim_ipc_event_wait_op(const struct CUevent_st *e, uint64_t gen)
{
    sim_op_t *op = sim_op_new(SIM_OP_HOSTFN, "cuStreamWaitEvent (interprocess)");
    ipc_wait_t *w = sim_xmalloc(sizeof *w);
    *w = (ipc_wait_t){&e->ipc->slot->done, gen};
    op->fn = ipc_wait_run;
    op->arg = w;
    op->staging = w; /* freed with the op */
    return op;
}
