/*
 * IPC of cucache blocks (docs/interposer.md, "IPC").  The hooks are in
 * hook_ipc.c; this file keeps the state both sides need.
 *
 * CUDA's handle names a whole allocation, and a cucache block is part of a
 * segment: the plain handle of the segment would let a peer map the
 * segment's start, another block's bytes, without any error.  So, by
 * default (ipc:peer), cucache hands the program a handle of its own (a
 * "tag", 64 bytes that CUDA itself refuses), and publishes what a peer
 * needs to open exactly the block in an export table:
 *
 *   - the export table is a memfd of the exporting process, mode 0600,
 *     that a peer of the same user maps through /proc/PID/fd/N (the tag
 *     names both).  It disappears with the exporter; nothing is left behind;
 *   - an entry holds the segment's real CUDA handle, the block's offset,
 *     size and id, a checksum, and one atomic word: generation, state
 *     (free, live, held) and the peers' open count;
 *   - a peer running cucache (children inherit LD_PRELOAD) validates the
 *     tag and the entry, counts its open, opens the real handle and returns
 *     the segment's mapping plus the offset: exactly the block.  A peer
 *     without cucache passes the tag to CUDA, which refuses it;
 *   - the exporter marks the exported block with core_hold: when the
 *     program frees it, it stays pending (no new owner) until the backend's
 *     hold_query sees no peer has it open; the first query after the free
 *     turns the entry from live to held, so no peer opens it any more.
 *
 * ipc:strict hands out plain CUDA handles for blocks at the start of their
 * segment and refuses the others with one line; cucache cannot see such
 * peers, so a freed exported block is never reused (it stays held until
 * the device is reset or the process exits): a late peer never reads a new
 * owner's bytes.
 *
 * Locking: ipc_lock guards this process's export table and its imports; the
 * entry words are shared with other processes and only changed atomically.
 * hold_query runs under a core device lock and takes no lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "hook.h"
#include "ipc.h"
#include "log.h"
#include "order.h"
#include "real.h"
#include "state.h"
#include "vec.h"

#define TAG_MAGIC "cucache\x01"
#define TABLE_MAGIC "cucacheR"
#define TABLE_VERSION 1u
#define TABLE_ENTRIES 4096u

/* An entry's word: generation (32 bits) | state (2) | opens (30). */
enum { ENTRY_FREE = 0, ENTRY_LIVE = 1, ENTRY_HELD = 2 };
#define W_GEN(w) ((uint32_t)((w) >> 32))
#define W_STATE(w) ((unsigned)((w) >> 30) & 3u)
#define W_OPENS(w) ((uint32_t)(w)&0x3fffffffu)
#define W_MAKE(gen, state, opens) ((uint64_t)(gen) << 32 | (uint64_t)(state) << 30 | (uint64_t)(opens))

typedef struct entry_s {
    _Atomic uint64_t word;
    char real[64];   /* the segment's CUDA handle */
    uint64_t id;     /* the block's allocation id */
    uint64_t offset; /* its offset in the segment */
    uint64_t size;   /* its requested bytes */
    uint32_t device; /* the exporter's ordinal */
    uint32_t check;  /* entry_check() when written */
} entry_t;

typedef struct table_s {
    char magic[8];
    uint32_t version, nentries;
    uint64_t nonce; /* tells this table from one of a later process with the same pid */
    int32_t pid;
    uint32_t pad;
    entry_t e[];
} table_t;

#define TABLE_BYTES (sizeof(table_t) + TABLE_ENTRIES * sizeof(entry_t))

/* The 64 bytes the program gets instead of CUDA's handle. */
typedef struct tag_s {
    char magic[8];
    int32_t pid;    /* the exporter */
    int32_t fd;     /* its export table's descriptor */
    uint32_t index; /* the entry */
    uint32_t gen;   /* its generation when exported */
    uint64_t nonce; /* the export table's */
    uint64_t id, offset, size;
    uint32_t device;
    uint32_t check; /* tag_check() */
} tag_t;
_Static_assert(sizeof(tag_t) == 64, "a tag fills an IPC handle exactly");

/* core_hold tokens: (index + 1) << 32 | generation; strict: never over. */
#define HOLD_STRICT UINT64_MAX

typedef struct import_s {
    int32_t pid;
    uint64_t nonce;
    uint32_t index, gen;
    unsigned refs;
    uintptr_t ptr;      /* what the program got: the block */
    CUdeviceptr base;   /* the segment's mapping (the real open) */
    size_t size;        /* the block's requested bytes */
    uint64_t id;        /* its id in this process (pointer queries) */
    hook_dev_t *ctx_hd; /* primary context pushed around the real calls, or NULL */
    table_t *remote;    /* the exporter's export table, mapped */
} import_t;

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static table_t *table; /* this process's export table (NULL until the first export) */
static int table_fd = -1;
static import_t *imports;
static size_t nimports, cap_imports;
static uint64_t import_ids;

static uint32_t fnv(uint32_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

static uint32_t entry_check(const table_t *r, uint32_t index, const entry_t *e)
{
    uint32_t h = fnv(2166136261u, &r->nonce, sizeof r->nonce);
    h = fnv(h, &index, sizeof index);
    h = fnv(h, e->real, sizeof e->real);
    h = fnv(h, &e->id, sizeof e->id);
    h = fnv(h, &e->offset, sizeof e->offset);
    h = fnv(h, &e->size, sizeof e->size);
    return fnv(h, &e->device, sizeof e->device);
}

static uint32_t tag_check(const tag_t *t)
{
    return fnv(2166136261u, t, offsetof(tag_t, check));
}

/* A fork child has neither the parent's export table (MADV_DONTFORK) nor its
 * CUDA mappings: it starts with none of either. */
static void atfork_child(void)
{
    pthread_mutex_init(&ipc_lock, NULL);
    table = NULL;
    table_fd = -1;
    imports = NULL;
    nimports = cap_imports = 0;
}

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, atfork_child);
}

/* ------------------------------------------------------------------------
 * The exporter
 * ---------------------------------------------------------------------- */

/* Creates this process's export table (ipc_lock held). */
static int table_create(void)
{
    int fd = memfd_create("cucache-ipc", MFD_CLOEXEC);
    if (fd < 0 || fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)TABLE_BYTES) != 0) {
        hook_warn(HOOK_WARN_IPC, "IPC: cannot create the export table peers read (%s); not exporting", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    table_t *r = mmap(NULL, TABLE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r == MAP_FAILED) {
        close(fd);
        return -1;
    }
    madvise(r, TABLE_BYTES, MADV_DONTFORK);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    memcpy(r->magic, TABLE_MAGIC, 8);
    r->version = TABLE_VERSION;
    r->nentries = TABLE_ENTRIES;
    r->nonce = (uint64_t)ts.tv_nsec << 32 ^ (uint64_t)ts.tv_sec ^ (uint64_t)getpid() << 40 ^ (uintptr_t)r;
    r->pid = (int32_t)getpid();
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_atfork);
    table = r;
    table_fd = fd;
    return 0;
}

/* An entry for the block (ipc_lock held): the one already exporting it,
 * or a free one made live.  NULL when all are taken. */
static entry_t *entry_for(const core_ptr_info_t *info, uint32_t device, const char real[64], uint32_t *index)
{
    entry_t *spare = NULL;
    for (uint32_t i = 0; i < TABLE_ENTRIES; i++) {
        entry_t *e = &table->e[i];
        uint64_t w = atomic_load(&e->word);
        if (W_STATE(w) == ENTRY_LIVE && e->id == info->id) {
            *index = i;
            return e;
        }
        if (!spare && W_STATE(w) == ENTRY_FREE) {
            spare = e;
            *index = i;
        }
    }
    if (!spare)
        return NULL;
    memcpy(spare->real, real, 64);
    spare->id = info->id;
    spare->offset = info->base - info->seg_base;
    spare->size = info->requested;
    spare->device = device;
    spare->check = entry_check(table, *index, spare);
    uint64_t w = atomic_load(&spare->word);
    atomic_store(&spare->word, W_MAKE(W_GEN(w) + 1, ENTRY_LIVE, 0));
    return spare;
}

CUresult hook_ipc_export(hook_dev_t *hd, const core_ptr_info_t *info, char handle[64])
{
    /* another process's streams do not wait for the fences the device was
     * ordered after (hand-outs give blocks out ahead of them): those
     * complete first */
    hook_order_wait(hd, hook_alloc_number(info->id));
    if (info->stream != 0)
        return CUDA_ERROR_INVALID_VALUE; /* stream-ordered: CUDA's pools are not exportable this way either */
    core_dev_t *d = hook_dev_core(hd);
    if (d && core_expandable(d)) {
        hook_warn(HOOK_WARN_IPC,
                  "cudaIpcGetMemHandle(0x%lx): with CUCACHE_CONF=expandable_segments:true this block lies on CUDA's "
                  "virtual memory, which CUDA IPC handles cannot share (cudaErrorInvalidValue, as for PyTorch's "
                  "expandable segments); run with expandable_segments:false to share memory this way",
                  (unsigned long)info->base);
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUipcMemHandle real;
    hook_scope_t sc;
    if (!d || !hook_enter(hd, false, &sc))
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r = CU_REAL(cuIpcGetMemHandle, &real, (CUdeviceptr)info->seg_base);
    hook_leave(&sc);
    if (r != CUDA_SUCCESS)
        return r;
    size_t offset = info->base - info->seg_base;
    if (hook_conf.ipc == CONF_IPC_STRICT) {
        if (offset != 0) {
            hook_warn(HOOK_WARN_IPC,
                      "cudaIpcGetMemHandle(0x%lx): this block lies %zu bytes into a cucache segment, and a peer "
                      "would map the segment's start; refused under CUCACHE_CONF=ipc:strict "
                      "(CUDA_ERROR_INVALID_VALUE). Without it the handle opens exactly the block in peers that run "
                      "cucache",
                      (unsigned long)info->base, offset);
            return CUDA_ERROR_INVALID_VALUE;
        }
        if (core_hold(d, info->base, HOLD_STRICT) != CORE_FREED)
            return CUDA_ERROR_INVALID_VALUE; /* freed meanwhile */
        memcpy(handle, real.reserved, 64);
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&ipc_lock);
    uint32_t index = 0;
    entry_t *e = table || table_create() == 0 ? entry_for(info, (uint32_t)hd->ordinal, real.reserved, &index) : NULL;
    if (!e) {
        pthread_mutex_unlock(&ipc_lock);
        if (table)
            hook_warn(HOOK_WARN_IPC, "cudaIpcGetMemHandle: %u blocks are exported at once, the most cucache tracks",
                      TABLE_ENTRIES);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint32_t gen = W_GEN(atomic_load(&e->word));
    if (core_hold(d, info->base, (uint64_t)(index + 1) << 32 | gen) != CORE_FREED) {
        atomic_store(&e->word, W_MAKE(gen, ENTRY_FREE, 0)); /* freed meanwhile */
        pthread_mutex_unlock(&ipc_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    tag_t t = {.pid = table->pid,
               .fd = table_fd,
               .index = index,
               .gen = gen,
               .nonce = table->nonce,
               .id = e->id,
               .offset = e->offset,
               .size = e->size,
               .device = e->device};
    memcpy(t.magic, TAG_MAGIC, 8);
    t.check = tag_check(&t);
    memcpy(handle, &t, sizeof t);
    pthread_mutex_unlock(&ipc_lock);
    return CUDA_SUCCESS;
}

int hook_ipc_hold_query(uint64_t token)
{
    if (token == HOLD_STRICT)
        return 0;
    uint32_t index = (uint32_t)(token >> 32) - 1, gen = (uint32_t)token;
    if (!table || index >= TABLE_ENTRIES)
        return 1;
    entry_t *e = &table->e[index];
    for (;;) {
        uint64_t w = atomic_load(&e->word);
        if (W_GEN(w) != gen || W_STATE(w) == ENTRY_FREE)
            return 1;
        uint64_t next = W_STATE(w) == ENTRY_LIVE ? W_MAKE(gen, ENTRY_HELD, W_OPENS(w)) /* freed: no new opens */
                        : W_OPENS(w) == 0        ? W_MAKE(gen, ENTRY_FREE, 0)
                                                 : w;
        if (next == w)
            return 0; /* a peer still has it open */
        atomic_compare_exchange_strong(&e->word, &w, next);
    }
}

void hook_ipc_dev_dropped(int ordinal)
{
    pthread_mutex_lock(&ipc_lock);
    for (uint32_t i = 0; table && i < TABLE_ENTRIES; i++) {
        entry_t *e = &table->e[i];
        uint64_t w = atomic_load(&e->word);
        while (W_STATE(w) == ENTRY_LIVE && e->device == (uint32_t)ordinal &&
               !atomic_compare_exchange_strong(&e->word, &w, W_MAKE(W_GEN(w), ENTRY_HELD, W_OPENS(w))))
            ;
    }
    pthread_mutex_unlock(&ipc_lock);
}

/* ------------------------------------------------------------------------
 * The peer
 * ---------------------------------------------------------------------- */

bool hook_ipc_is_ours(const char handle[64])
{
    return memcmp(handle, TAG_MAGIC, 8) == 0;
}

/* Maps the exporter's export table and checks it is the one the tag names;
 * NULL with *r set otherwise (and a line where cucache refuses). */
static table_t *table_open(const tag_t *t, CUresult *r)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)t->pid, (int)t->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ESRCH) {
            *r = CUDA_ERROR_INVALID_HANDLE; /* the exporter exited: a stale handle */
        } else {
            hook_warn(HOOK_WARN_IPC,
                      "cudaIpcOpenMemHandle: cannot read the export table of the exporting process %d (%s): "
                      "a handle of another user's process? Refused (CUDA_ERROR_INVALID_VALUE)",
                      (int)t->pid, strerror(errno));
            *r = CUDA_ERROR_INVALID_VALUE;
        }
        return NULL;
    }
    struct stat st;
    table_t *tb = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == TABLE_BYTES)
        tb = mmap(NULL, TABLE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (tb != MAP_FAILED && memcmp(tb->magic, TABLE_MAGIC, 8) == 0 && tb->version == TABLE_VERSION &&
        tb->nentries == TABLE_ENTRIES && tb->nonce == t->nonce && tb->pid == t->pid) {
        madvise(tb, TABLE_BYTES, MADV_DONTFORK);
        return tb;
    }
    if (tb != MAP_FAILED)
        munmap(tb, TABLE_BYTES);
    /* the exporter exited and its pid (and descriptor) went to another program */
    *r = CUDA_ERROR_INVALID_HANDLE;
    return NULL;
}

/* Counts this process's open of the entry, if it is still the tag's and
 * live.  CUDA_SUCCESS, a stale handle, or a corrupted entry. */
static CUresult entry_open(table_t *tb, const tag_t *t)
{
    entry_t *e = &tb->e[t->index];
    if (e->check != entry_check(tb, t->index, e) || e->id != t->id || e->offset != t->offset || e->size != t->size ||
        e->device != t->device) {
        if (W_GEN(atomic_load(&e->word)) != t->gen)
            return CUDA_ERROR_INVALID_HANDLE; /* reused for another export since */
        hook_warn(HOOK_WARN_IPC,
                  "cudaIpcOpenMemHandle: the exporting process %d's export table entry %u does not match "
                  "the handle (corrupted); refused (CUDA_ERROR_INVALID_VALUE)",
                  (int)t->pid, t->index);
        return CUDA_ERROR_INVALID_VALUE;
    }
    uint64_t w = atomic_load(&e->word);
    do {
        if (W_GEN(w) != t->gen || W_STATE(w) != ENTRY_LIVE)
            return CUDA_ERROR_INVALID_HANDLE; /* the exporter freed it */
    } while (!atomic_compare_exchange_weak(&e->word, &w, w + 1));
    return CUDA_SUCCESS;
}

CUresult hook_ipc_open(const char handle[64], unsigned flags, hook_dev_t *ctx_hd, uintptr_t *out)
{
    tag_t t;
    memcpy(&t, handle, sizeof t);
    if (t.check != tag_check(&t) || t.index >= TABLE_ENTRIES || t.pid <= 0) {
        hook_warn(HOOK_WARN_IPC, "cudaIpcOpenMemHandle: a cucache IPC handle that fails its checksum (corrupted "
                                 "in transit?); refused (CUDA_ERROR_INVALID_VALUE)");
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (t.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* CUDA's answer to opening in the exporting process */
    pthread_mutex_lock(&ipc_lock);
    for (size_t i = 0; i < nimports; i++) {
        import_t *m = &imports[i];
        if (m->pid == t.pid && m->nonce == t.nonce && m->index == t.index && m->gen == t.gen) {
            m->refs++; /* opened again: the same pointer, one more close */
            *out = m->ptr;
            pthread_mutex_unlock(&ipc_lock);
            return CUDA_SUCCESS;
        }
    }
    CUresult r = CUDA_SUCCESS;
    table_t *tb = table_open(&t, &r);
    if (tb)
        r = entry_open(tb, &t);
    import_t *m = NULL;
    if (r == CUDA_SUCCESS && !vec_reserve((void **)&imports, &cap_imports, nimports + 1, sizeof *imports))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    CUdeviceptr base = 0;
    if (r == CUDA_SUCCESS) {
        CUipcMemHandle real;
        memcpy(real.reserved, tb->e[t.index].real, 64);
        hook_scope_t sc = {0};
        if (ctx_hd && !hook_enter(ctx_hd, false, &sc))
            r = CUDA_ERROR_INVALID_CONTEXT;
        else
            r = CU_REAL(cuIpcOpenMemHandle_v2, &base, real, flags);
        hook_leave(&sc);
        if (r != CUDA_SUCCESS)
            atomic_fetch_sub(&tb->e[t.index].word, 1);
    }
    if (r != CUDA_SUCCESS) {
        if (tb)
            munmap(tb, TABLE_BYTES);
        pthread_mutex_unlock(&ipc_lock);
        return r;
    }
    m = &imports[nimports++];
    *m = (import_t){t.pid,  t.nonce, t.index, t.gen, 1, (uintptr_t)base + (uintptr_t)t.offset, base, (size_t)t.size,
                    CORE_ID_TAG | (uint64_t)1 << 61 | ++import_ids, ctx_hd, tb};
    *out = m->ptr;
    pthread_mutex_unlock(&ipc_lock);
    return CUDA_SUCCESS;
}

CUresult hook_ipc_close(uintptr_t addr)
{
    pthread_mutex_lock(&ipc_lock);
    for (size_t i = 0; i < nimports; i++) {
        import_t *m = &imports[i];
        if (m->ptr != addr)
            continue;
        CUresult r = CUDA_SUCCESS;
        if (--m->refs == 0) {
            hook_scope_t sc = {0};
            if (m->ctx_hd && !hook_enter(m->ctx_hd, false, &sc))
                r = CUDA_ERROR_INVALID_CONTEXT;
            else
                r = CU_REAL(cuIpcCloseMemHandle, m->base);
            hook_leave(&sc);
            atomic_fetch_sub(&m->remote->e[m->index].word, 1); /* the exporter may reuse it now */
            munmap(m->remote, TABLE_BYTES);
            *m = imports[--nimports];
        }
        pthread_mutex_unlock(&ipc_lock);
        return r;
    }
    /* the start of a segment another open still maps: closing it through
     * CUDA would take that open's mapping away */
    CUresult r = CUDA_ERROR_NOT_FOUND;
    for (size_t i = 0; i < nimports && r == CUDA_ERROR_NOT_FOUND; i++)
        if (imports[i].base == addr)
            r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&ipc_lock);
    return r;
}

bool hook_ipc_describe(uintptr_t addr, core_ptr_info_t *info)
{
    bool found = false;
    pthread_mutex_lock(&ipc_lock);
    for (size_t i = 0; i < nimports && !found; i++) {
        const import_t *m = &imports[i];
        if (addr >= m->ptr && addr - m->ptr < m->size) {
            *info = (core_ptr_info_t){.where = CORE_WHERE_LIVE,
                                      .base = m->ptr,
                                      .requested = m->size,
                                      .size = m->size,
                                      .id = m->id,
                                      .seg_base = m->ptr,
                                      .seg_size = m->size};
            found = true;
        }
    }
    pthread_mutex_unlock(&ipc_lock);
    return found;
}
