/*
 * The simulated device's engine: the state behind the driver API.
 *
 * Map of the main types:
 *   - sim_device_t: one simulated GPU.  Its memory is counted in physical
 *     pages of 2 MiB, wherever they lie: an allocation succeeds whenever
 *     enough pages are free.  Addresses come from a virtual range several
 *     times the capacity (first fit, so a freed address is handed out again
 *     soon, as on a GPU), backed by a memfd at offset = address - base so
 *     that another process can map the same bytes (IPC).  Small requests
 *     are packed at 512 bytes into pages of their own.  A sorted table of
 *     live allocations answers "which allocation holds this address".
 *     Each device has a primary context and a default memory pool.
 *     With CUCACHE_SIM_SHARED the pages are charged to this process's
 *     entry of a table that every process of the key shares
 *     (engine_shared.c, shared.h): the device is full when all of them
 *     together hold its capacity.
 *   - struct CUctx_st: a context (primary or created).  It owns a legacy
 *     default stream, the streams created in it, and a sticky error.
 *   - struct CUstream_st: a FIFO of operations run by one worker thread.
 *     Every stream has a *slot* in the process-wide clock table; an operation
 *     is named by (slot, seq) and carries a vector clock saying which
 *     operations of other slots happen before it.  The worker runs an
 *     operation once its explicit dependencies (other slots' seqs) completed;
 *     an event record or a wait queued on an idle stream whose dependencies
 *     completed completes as it is queued (engine_stream.c, retire_at_once).
 *   - struct CUevent_st: a recorded position (slot, seq) plus that
 *     operation's vector clock.
 *   - sim_op_t: one queued operation (copy, memset, host function, event
 *     record, wait, stream-ordered free, fault).
 *   - struct CUgraph_st / CUgraphNode_st: a graph, a DAG of nodes each
 *     holding its incoming edges and, for work, an operation as a
 *     template; struct CUgraphExec_st: an instance, its nodes ordered by
 *     their edges, launched on lanes of its own (engine_graph.c); a
 *     graph's allocations are blocks of the device's graph memory pool
 *     (sim_device_t.graph_mem).
 *
 * Ordering rules (CUDA's): an operation on a context's legacy stream depends
 * on the last operation of every blocking stream of the context (created
 * without cudaStreamNonBlocking, and the per-thread default streams), and an
 * operation on a blocking stream depends on the last operation of the legacy
 * stream.  Non-blocking streams have no implicit dependencies.
 *
 * Happens-before: the host is one more participant.  Whenever the host
 * observes a completion (stream, event or device synchronisation, a query
 * that returns success, a synchronous copy), the host clock joins the
 * completed operation's clock, and every operation enqueued afterwards joins
 * the host clock.  All host threads share one host clock: ordering that
 * threads establish among themselves is invisible to the simulator, so this
 * errs towards missing a race, never towards inventing one.  A host function
 * of the program (cuLaunchHostFunc, cuStreamAddCallback) counts as such an
 * observation: as it starts, the host clock joins the clock of the work
 * before it on its stream (engine_stream.c, host_fn_starts), because a host
 * thread may wait for its signal, which the simulator cannot see.  That can
 * hide a race whose second half the host queued, without waiting, after the
 * function happened to run; a simulated kernel's body orders nothing.
 *
 * The race detector (engine_race.c) checks every new operation's device
 * ranges against the ranges of earlier operations that do not happen before
 * it.
 *
 * Locking: one engine mutex `sim.lock` protects everything here; workers
 * drop it while they move bytes.  `sim.cv` is broadcast on every completion.
 *
 * Files (sim_ throughout; the exported CUDA names, cucacheSim* and the
 * NVML's nvml* are the only symbols the libraries export: libcuda.map,
 * libnvidia-ml.map; the runtimes' are made from exports/ by gen-exports):
 *   config.c         the CUCACHE_SIM_* variables (config.h; the NVML reads
 *                    them too): their readers (sizes: parse_size) and how
 *                    a refusal shows a value (show)
 *   log.c            sim_log, the one message sink (the NVML's too)
 *   array.c          host memory that aborts when out, the sorted
 *                    arrays (array.h; the cuDNN stand-in's too)
 *   engine.c         initialisation, vector
 *                    clocks, host threads, contexts
 *   engine_stream.c  streams and their workers, CUDA's implicit
 *                    dependencies, device-side waits, host waits,
 *                    stream-ordered frees
 *   engine_mem.c     pages and addresses, the live-allocation table, host
 *                    and managed memory, memory pools; an array's bytes
 *                    are an allocation of their own (SIM_ALLOC_ARRAY)
 *                    that no program pointer reaches
 *   engine_vmm.c     virtual memory (engine_vmm.h: shared with the driver)
 *   engine_graph.c   graphs, their instances and launches on lanes, the
 *                    graph memory pool
 *   engine_ipc.c     IPC between processes that both run the simulator:
 *                    memory, pool allocations and interprocess events
 *   engine_shared.c  the device shared by processes: its file, its table of
 *                    processes and their bytes, its robust lock, and
 *                    sim_proc_stat (/proc/PID/stat) (shared.h; uses no
 *                    engine state)
 *   engine_race.c    the race detector
 *   handles.c        the table of live handles (handles.h)
 *   driver*.c        the driver API (driver.h: entering a call): driver.c
 *                    init, devices, contexts, errors; driver_mem.c memory;
 *                    driver_copy.c copies and memsets; driver_ptr.c pointer
 *                    attributes; driver_stream.c streams, events, capture;
 *                    driver_graph.c graphs (driver_graph_params.c: the
 *                    generic node calls, one row per node kind);
 *                    driver_vmm.c, driver_ipc.c
 *                    (memory and events); driver_peer.c peer access, links,
 *                    peer copies; driver_pool_share.c pools shared between
 *                    processes and pool access; driver_module.c modules,
 *                    libraries, their variables and timed kernels
 *                    (module_image.c reads the images: cubin, fatbin, PTX,
 *                    with kernel attributes and variables, a fatbin's
 *                    entries those the device's SM loads;
 *                    fatbin_decompress.c its compressed entries);
 *                    driver_func.c
 *                    kernel attributes and the occupancy calculator;
 *                    driver_link.c the JIT linker; driver_array.c
 *                    arrays and mipmapped arrays (array_format.h: the
 *                    formats laid out);
 *                    driver_texture.c texture and surface objects;
 *                    driver_misc.c limits, PCI ids, stream attributes,
 *                    managed-memory hints; driver_procaddr.c
 *                    cuGetProcAddress
 *   runtime*.c       the runtime over the driver (runtime_internal.h):
 *                    runtime_core.c, runtime_mem.c, runtime_stream.c,
 *                    runtime_module.c (registration and launch),
 *                    runtime_graph.c (graphs built by hand),
 *                    runtime_peer.c (peers, IPC events, shared pools),
 *                    runtime_func.c (attributes, occupancy, launch
 *                    variants), runtime_symbol.c (variables),
 *                    runtime_array.c (arrays, textures), runtime_misc.c;
 *                    runtime_stub.c the runtime's "not supported";
 *                    runtime12.c, runtime13.c each major's exports of
 *                    the calls CUDA 13 changed (runtime_major.h; CUDA
 *                    12.4's declarations: runtime12.h)
 *   stub.h           the generated weak stubs of every real entry point
 *                    not simulated (exports/cuda.txt, exports/cudart.txt,
 *                    exports/cudart12.txt list all, gen-exports writes the stubs
 *                    and the runtimes' version scripts; the driver's
 *                    answer is in driver.c)
 *   errors.h         the error codes, names and texts the driver and the
 *                    runtime share
 *   nvml.c           the simulated NVML, libnvidia-ml.so.1 (nvml.h: its ABI):
 *                    the devices of the same settings, their memory and
 *                    processes read from the shared table
 *   nvml_query.c     the NVML's device and system queries (PCI, clocks,
 *                    versions, no NvLink)
 *   nvml_seam.h,     the NVML's one call into the driver of its process:
 *   driver_nvml.c    a device of the process's own lists the process
 *   dnn.c, dnn_desc.c the cuDNN stand-in, libcudnn.so.9 (dnn.h): handles,
 *                    versions, descriptors; computing calls are stubs
 *   blas_*.c         the simulated cuBLAS and cuBLASLt, libcublas.so.12 and
 *                    libcublasLt.so.12 (blas_internal.h: their map; blas.h:
 *                    their API): no engine state, the driver by dlopen, each
 *                    BLAS call one cucacheSimLaunchTimed
 */
#ifndef CUCACHE_SIM_ENGINE_H
#define CUCACHE_SIM_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cusim/cuda_api.h"
#include "cusim/sim.h"
#include "array.h"
#include "config.h"
#include "module_image.h"
#include "shared.h"

#define SIM_API __attribute__((visibility("default")))

#define SIM_MAX_DEVICES 16
_Static_assert(SIM_MAX_DEVICES == SIM_SHARED_DEVICES, "the shared table counts bytes of every device");
_Static_assert(sizeof(((sim_config_t *)0)->shared_key) == SIM_SHARED_KEY_MAX + 1, "a key and its NUL");
#define SIM_MAX_SLOTS 4096
#define SIM_MAGIC_CTX 0x43545853u    /* "SXTC" */
#define SIM_MAGIC_STREAM 0x4d525453u /* "STRM" */
#define SIM_MAGIC_EVENT 0x544e5645u  /* "EVNT" */
#define SIM_MAGIC_POOL 0x4c4f4f50u   /* "POOL" */
#define SIM_MAGIC_GRAPH 0x48505247u  /* "GRPH" */
#define SIM_MAGIC_EXEC 0x43455847u   /* "GXEC" */
#define SIM_MAGIC_NODE 0x45444f4eu   /* "NODE" */
#define SIM_MAGIC_MODULE 0x4c444f4du /* "MODL" */
#define SIM_MAGIC_FUNC 0x434e5546u   /* "FUNC" */
#define SIM_MAGIC_LIBRARY 0x5242494cu /* "LIBR" */
#define SIM_MAGIC_KERNEL 0x4e52454bu  /* "KERN" */
#define SIM_MAGIC_ARRAY 0x59415241u   /* "ARAY" */
#define SIM_MAGIC_MIPMAP 0x50414d4du  /* "MMAP" */
#define SIM_MAGIC_TEXOBJ 0x4a424f54u  /* "TOBJ" */
#define SIM_MAGIC_SURFOBJ 0x4a424f53u /* "SOBJ" */
#define SIM_MAGIC_DEAD 0xdeadbeefu

/* ------------------------------------------------------------------------
 * Vector clocks
 * ---------------------------------------------------------------------- */

/* A vector clock: c[slot] = the highest seq of that slot known to happen
 * before (or be) the owner.  Immutable once shared; reference counted. */
typedef struct sim_vc_s {
    uint32_t refs; /* owners; freed at 0 (under sim.lock) */
    uint32_t n;    /* entries in c; missing entries are 0 */
    uint64_t c[];
} sim_vc_t;

sim_vc_t *vc_new(uint32_t n);
sim_vc_t *vc_retain(sim_vc_t *vc);
void vc_release(sim_vc_t *vc);
/* A private (unshared) clock with at least n entries holding *a's values. */
sim_vc_t *vc_own(sim_vc_t **a, uint32_t n);
/* a := a joined with b (a is replaced by a new clock when shared or short). */
void vc_join(sim_vc_t **a, const sim_vc_t *b);
static inline uint64_t vc_get(const sim_vc_t *vc, int slot)
{
    return vc && (uint32_t)slot < vc->n ? vc->c[slot] : 0;
}

/* ------------------------------------------------------------------------
 * Device memory
 * ---------------------------------------------------------------------- */

typedef enum sim_alloc_kind_e {
    SIM_ALLOC_DEVICE = 1, /* cuMemAlloc */
    SIM_ALLOC_POOL,       /* stream-ordered pool memory (cuMemAllocAsync) */
    SIM_ALLOC_HOST,       /* pinned host memory (cuMemAllocHost) */
    SIM_ALLOC_MANAGED,    /* managed memory: plain host memory here */
    SIM_ALLOC_REGISTERED, /* the program's host memory, page-locked (cuMemHostRegister) */
    SIM_ALLOC_IPC,        /* another process's allocation, opened (cuIpcOpenMemHandle) */
    SIM_ALLOC_VMM,        /* a mapping of the virtual memory API (cuMemMap; engine_vmm.c) */
    SIM_ALLOC_GRAPH,      /* a graph's allocation (cuGraphAddMemAllocNode; engine_graph.c) */
    SIM_ALLOC_MODULE,     /* a module's __device__ and __constant__ variables (driver_module.c): freed at unload */
    SIM_ALLOC_ARRAY,      /* the bytes of a CUDA array (driver_array.c): device memory no pointer names */
} sim_alloc_kind_t;

struct sim_phys_s;

/* One live allocation, device or registered host. */
typedef struct sim_alloc_s {
    uintptr_t addr;  /* first byte handed out */
    size_t size;     /* bytes requested */
    size_t reserved; /* bytes taken from the device (rounded); 0 for host */
    sim_alloc_kind_t kind;
    int device;         /* ordinal */
    uint64_t buffer_id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID: never reused */
    unsigned flags;     /* HOST: cuMemHostAlloc's flags; REGISTERED: cuMemHostRegister's */
    bool sync_memops;   /* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS */
    uint32_t ipc_slot;  /* DEVICE: 1 + its slot in the export table once exported (engine_ipc.c); 0 */
    struct CUctx_st *ctx;
    struct CUmemPoolHandle_st *pool; /* SIM_ALLOC_POOL: owning pool */
    bool pool_free;                  /* pool block freed by cuMemFreeAsync, reusable per rules */
    bool freeing;                    /* cuMemAlloc memory passed to cuMemFreeAsync: released when the free runs */
    int free_slot;                   /* pool block: slot and seq of the freeing op */
    uint64_t free_seq;
    sim_vc_t *free_vc; /* clock of the freeing op */
    struct sim_phys_s *phys;         /* VMM: the physical allocation mapped here (from its start) */
    struct sim_hints_s *hints;       /* MANAGED: cuMemAdvise's and cuMemPrefetchAsync's record, or NULL */
    uint8_t access[SIM_MAX_DEVICES]; /* VMM: CU_MEM_ACCESS_FLAGS_PROT_* of each device (cuMemSetAccess) */
} sim_alloc_t;

/* The unit of device memory (cuMemGetInfo counts these), the packing of
 * small requests inside a page, and the largest small request. */
#define SIM_PAGE ((size_t)2 << 20)
#define SIM_SMALL_GRAIN ((size_t)512)
#define SIM_SMALL_MAX ((size_t)1 << 20)
#define SIM_SMALL_GRAINS (SIM_PAGE / SIM_SMALL_GRAIN)
_Static_assert(SIM_PAGE == SIM_CONFIG_PAGE, "capacities are whole pages");

typedef struct sim_extent_s {
    size_t off, len; /* free range [off, off+len) of a range of addresses */
} sim_extent_t;

/* The free parts of a range of addresses, sorted by offset, never adjacent. */
typedef struct sim_extents_s {
    sim_extent_t *ext;
    size_t n, cap;
} sim_extents_t;

/* Starts with [0, len) free. */
void sim_ext_init(sim_extents_t *x, size_t len);
/* Takes len bytes at an offset where base + offset is a multiple of align
 * (a power of two), first fit, or exactly at `at` when at != SIZE_MAX and
 * that range is free; the offset or SIZE_MAX. */
size_t sim_ext_take(sim_extents_t *x, uintptr_t base, size_t len, size_t align, size_t at);
/* Returns [off, off+len), merged with its free neighbours. */
void sim_ext_give(sim_extents_t *x, size_t off, size_t len);

/* A page holding small allocations, 512-byte grains first fit. */
typedef struct sim_smallpage_s {
    uintptr_t addr;                       /* page-aligned */
    uint64_t bits[SIM_SMALL_GRAINS / 64]; /* grain i in use: bit i */
    size_t used;                          /* grains in use; the page is returned at 0 */
} sim_smallpage_t;

typedef struct sim_device_s {
    int ordinal;
    uint8_t *base;     /* the device's address range, `span` bytes */
    size_t span;       /* several times the capacity: addresses never run out first */
    int memfd;         /* its bytes: file offset = address - base (shared with importers) */
    size_t capacity;   /* bytes, a whole number of pages; cuMemGetInfo's total */
    size_t pages;      /* capacity / SIM_PAGE */
    size_t pages_used; /* pages charged to this process's live allocations (and small pages) */
    sim_extents_t addrs;    /* its free addresses (offsets from base) */
    size_t vmm_bytes;       /* physical allocations of the virtual memory API (cuMemCreate) */
    struct {                /* the graph memory pool (engine_graph.c): bytes */
        size_t reserved, reserved_high; /* charged to the device */
        size_t used, used_high;         /* of allocations a launch made and nothing freed yet */
        size_t mapped;                  /* of reserved, bound to a graph's allocation */
    } graph_mem;
    sim_smallpage_t *small; /* pages of small allocations, sorted by address */
    size_t nsmall, cap_small;
    struct CUctx_st *primary;
    unsigned primary_flags;
    int primary_refs;
    struct CUmemPoolHandle_st *default_pool;
    struct CUmemPoolHandle_st *current_pool;
} sim_device_t;

/* ------------------------------------------------------------------------
 * Contexts, streams, events, pools, graphs
 * ---------------------------------------------------------------------- */

struct CUctx_st {
    uint32_t magic;
    sim_device_t *dev;
    bool primary;
    CUresult sticky;               /* CUDA_SUCCESS or the error every call returns */
    struct CUstream_st *legacy;    /* the legacy default stream */
    struct CUstream_st *streams;   /* all live streams of the context (list) */
    uint64_t generation;           /* bumped on reset: per-thread streams re-made */
    sim_vc_t *retired_vc;          /* clocks of its destroyed, drained streams */
    sim_vc_t *retired_blocking_vc; /* the same, blocking streams only */
    size_t limit[CU_LIMIT_MAX];    /* cuCtxSetLimit's values; 0 where never set (driver_misc.c) */
    bool limit_set[CU_LIMIT_MAX];
    CUfunc_cache cache_config;     /* cuCtxSetCacheConfig */
};

typedef enum sim_stream_kind_e {
    SIM_STREAM_LEGACY,
    SIM_STREAM_PER_THREAD,
    SIM_STREAM_CREATED,
} sim_stream_kind_t;

typedef struct sim_op_s sim_op_t;
typedef struct sim_capture_s sim_capture_t;

struct CUstream_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    sim_stream_kind_t kind;
    unsigned flags; /* CU_STREAM_NON_BLOCKING or 0 */
    int priority;
    int slot;              /* clock slot */
    uint64_t last_seq;     /* seq of the last enqueued op (0: none yet) */
    sim_vc_t *vc;          /* clock of the last enqueued op */
    sim_op_t *head, *tail; /* pending ops, run in order by the worker */
    pthread_t worker;
    bool worker_started;
    bool dying;                   /* destroyed by the program; worker exits when drained */
    sim_capture_t *capture;       /* non-NULL while capturing (or joined to a capture) */
    struct CUgraphNode_st **cap_deps; /* capturing: the nodes its next captured work follows */
    size_t ncap_deps;
    struct CUstream_st *ctx_next; /* list of the context's streams */
    unsigned long id;             /* creation number, for reports */
    CUaccessPolicyWindow access_window; /* cuStreamSetAttribute: recorded, not modelled (driver_misc.c) */
    CUsynchronizationPolicy sync_policy; /* 0: never set (CU_SYNC_POLICY_AUTO) */
};

struct CUevent_st {
    uint32_t magic;
    unsigned flags;
    struct CUctx_st *ctx;
    bool recorded;
    int slot; /* position recorded: (slot, seq) */
    uint64_t seq;
    sim_vc_t *vc;
    bool done;               /* the record op ran */
    uint64_t time_ns;        /* CLOCK_MONOTONIC when the record op ran */
    sim_capture_t *captured; /* recorded into this capture */
    struct CUgraphNode_st *cap_node; /* ... as this node: a wait on it follows the node */
    unsigned pending;        /* record ops queued and not yet run */
    bool dead;               /* destroyed; freed when pending reaches 0 */
    struct sim_ipc_event_s *ipc; /* CU_EVENT_INTERPROCESS: its slot shared with other processes (engine_ipc.c) */
    uint64_t ipc_gen;            /* the number of this process's last record of it in that slot (0: none) */
};

struct CUmemPoolHandle_st {
    uint32_t magic;
    sim_device_t *dev;
    bool is_default;
    uint64_t release_threshold;
    uint64_t reserved_cur, reserved_high; /* bytes held from the device */
    uint64_t used_cur, used_high;         /* bytes handed to the program */
    int reuse_follow_events, reuse_opportunistic, reuse_internal_deps;
    bool dead; /* destroyed by the program; freed with its last block */
    unsigned handle_types;           /* CUmemAllocationHandleType bits it may be exported as (the default: none) */
    uint8_t access[SIM_MAX_DEVICES]; /* CU_MEM_ACCESS_FLAGS_PROT_* of each device (cuMemPoolSetAccess) */
    bool imported;                   /* another process's pool (cuMemPoolImportFromShareableHandle): no allocations */
    int32_t exporter_pid;            /* imported: the exporting process and its IPC table's nonce */
    uint64_t exporter_nonce;
};

/* Graphs (engine_graph.c; the API is driver_graph.c).  A graph is a DAG of
 * nodes, each holding its incoming edges; a node that does work holds an
 * operation as a template, copied into the launch stream's lanes at each
 * launch.  A capture builds the same DAG: each captured operation becomes
 * a node after the capturing stream's current dependencies. */
typedef struct sim_gblock_s sim_gblock_t;

/* A conditional handle (cuGraphConditionalHandleCreate): owned by its
 * graph; the CUgraphConditionalHandle is its address, accepted only when
 * found in the list of the node's graph or of a graph enclosing it.  No
 * device code runs on the simulator, so nothing sets it after creation:
 * each launch reads `value`. */
typedef struct sim_cond_s {
    struct CUctx_st *ctx;
    unsigned value;          /* the default launch value */
    unsigned flags;          /* CU_GRAPH_COND_ASSIGN_DEFAULT or 0 */
    struct sim_cond_s *next; /* the graph's handles */
} sim_cond_t;

struct CUgraphNode_st {
    uint32_t magic;
    struct CUgraph_st *graph;
    CUgraphNodeType type;
    sim_op_t *op;              /* KERNEL, MEMCPY, MEMSET, HOST: the work, as a template */
    struct CUgraph_st *child;  /* GRAPH: its own copy of the child graph */
    struct CUevent_st *event;  /* EVENT_RECORD, WAIT_EVENT */
    sim_gblock_t *block;       /* MEM_ALLOC, MEM_FREE: the graph memory */
    sim_cond_t *cond;          /* CONDITIONAL: its handle (owned by a graph) */
    CUgraphConditionalNodeType cond_type;
    struct CUgraph_st **bodies; /* CONDITIONAL: its body graphs, the node's (phGraph_out) */
    unsigned nbodies;
    struct CUctx_st *ctx;      /* the context of its work */
    union {                    /* the parameters as given, for the getters */
        CUDA_KERNEL_NODE_PARAMS_v2 kernel;
        CUDA_MEMCPY3D copy;
        CUDA_MEMSET_NODE_PARAMS memset;
        CUDA_HOST_NODE_PARAMS host;
        CUDA_MEM_ALLOC_NODE_PARAMS alloc;
    } p;
    struct CUgraphNode_st **deps; /* incoming edges */
    size_t ndeps;
    struct CUgraphNode_st *origin; /* the node this one was cloned from (cuGraphNodeFindInClone) */
};

struct CUgraph_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    struct CUgraphNode_st **nodes; /* in creation order */
    size_t nnodes;
    bool has_mem;                /* holds memory nodes: one instance at a time, no clone */
    struct CUgraphExec_st *exec; /* that instance, when has_mem */
    bool is_child;               /* a child node's copy or a conditional body: destroyed with the node */
    bool has_cond;               /* holds conditional nodes (here or in a body): one instance, no clone */
    struct CUgraphNode_st *owner; /* a conditional body: the node holding it */
    sim_cond_t *conds;           /* the conditional handles created on it */
};

/* An instance: the nodes in an order where each follows its dependencies. */
typedef struct sim_xnode_s {
    const struct CUgraphNode_st *origin; /* compared, never read: the graph may be gone */
    size_t gindex;                       /* its index in the graph's nodes (cuGraphExecUpdate pairs by it) */
    CUgraphNodeType type;
    sim_op_t *op;
    struct CUgraphExec_st *child;
    struct CUevent_st *event;
    sim_gblock_t *block;
    bool own; /* MEM_FREE: the allocation is this graph's own */
    struct CUgraphExec_st **bodies; /* CONDITIONAL: instances of its bodies */
    unsigned nbodies;
    CUgraphConditionalNodeType cond_type;
    unsigned cond_value; /* the handle's value at each launch */
    size_t *deps; /* earlier positions */
    size_t ndeps;
    bool enabled;
} sim_xnode_t;

struct CUgraphExec_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    struct CUgraph_st *graph; /* instantiated from (NULL once that graph is gone) */
    unsigned long long flags;
    sim_xnode_t *nodes;
    size_t nnodes;
    struct CUstream_st **lanes; /* streams its launches run on (a top-level instance's) */
    size_t nlanes;
    int end_slot; /* the last launch's end on its launch stream (0 seq: none) */
    uint64_t end_seq;
    sim_vc_t *end_vc;
};

/* A variable of a module image (__device__, __constant__): its bytes at
 * load are init's, or zero. */
typedef struct sim_global_s {
    const char *name; /* interned */
    size_t size;
    uint8_t *init; /* malloc'ed copy, or NULL */
    bool constant;
} sim_global_t;

/* What a module is made of: its kernels (names and what the image states
 * about each) and its variables.  A library keeps one; a module is made
 * from one. */
typedef struct sim_image_desc_s {
    const char **names; /* interned */
    sim_kernel_info_t *infos; /* infos[i] is names[i]'s */
    size_t nnames;
    sim_global_t *globals;
    size_t nglobals;
    bool open; /* the image's names were unreadable (compressed): any name is a kernel */
} sim_image_desc_t;

/* A variable of a loaded module: device memory of its context's device
 * (SIM_ALLOC_MODULE), `size` bytes at addr. */
typedef struct sim_modvar_s {
    const char *name; /* interned */
    uintptr_t addr;
    size_t size;
} sim_modvar_t;

/* A loaded module (driver_module.c; its image read by module_image.c):
 * its kernels by name, each a function handle made at load, and its
 * variables. */
struct CUmod_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    struct CUlib_st *lib; /* the library it was made for in ctx, or NULL */
    struct CUfunc_st **funcs;
    size_t nfuncs;
    sim_modvar_t *vars;
    size_t nvars;
    bool open; /* as sim_image_desc_t.open */
};

/* A kernel: its name, how long it runs (CUCACHE_SIM_KERNEL_US), what its
 * image states and what the program set (driver_func.c). */
struct CUfunc_st {
    uint32_t magic;
    struct CUmod_st *mod;
    const char *name; /* interned: valid for the process */
    uint64_t ns;
    sim_kernel_info_t info;
    int max_dynamic_shared; /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    bool dynamic_optin;     /* it was set above the default (the occupancy calculator's opt-in) */
    int carveout;           /* PREFERRED_SHARED_MEMORY_CARVEOUT: -1 (none) or percent */
    int cluster[3];         /* REQUIRED_CLUSTER_WIDTH, HEIGHT, DEPTH: 0 none */
    int nonportable_cluster; /* NON_PORTABLE_CLUSTER_SIZE_ALLOWED */
    int cluster_policy;     /* CLUSTER_SCHEDULING_POLICY_PREFERENCE */
    int cache_config;       /* CUfunc_cache (cuFuncSetCacheConfig) */
    int shared_config;      /* CUsharedconfig (cuFuncSetSharedMemConfig) */
};

/* A library (cuLibraryLoadData): a module image's description, for no
 * context in particular; each context that asks gets a module of it. */
struct CUlib_st {
    uint32_t magic;
    sim_image_desc_t desc;
    struct CUkern_st **kernels; /* handed out by cuLibraryGetKernel */
    size_t nkernels;
};

/* A kernel of a library (cuLibraryGetKernel): a name, made a function of
 * the current context by cuKernelGetFunction or a launch. */
struct CUkern_st {
    uint32_t magic;
    struct CUlib_st *lib;
    const char *name; /* interned */
};

/* A CUDA array (driver_array.c): device memory of its own, an allocation of
 * kind SIM_ALLOC_ARRAY at addr that no program pointer reaches.  Layout:
 * rows of Width elements packed (row pitch = Width * elem bytes), max(Height,
 * 1) rows per layer, max(Depth, 1) layers, in that order; copies address it
 * by (x in bytes, y, z) through that layout. */
struct CUarray_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    CUDA_ARRAY3D_DESCRIPTOR desc; /* as created (a 1D array keeps Height 0) */
    unsigned elem;                /* bytes of one element: the format's channel size x channels */
    uintptr_t addr;               /* its bytes */
    size_t pitch, rows, layers;   /* Width * elem; max(Height, 1); max(Depth, 1) */
    struct CUmipmappedArray_st *mip; /* a level of this mipmapped array (freed with it), or NULL */
};

/* A mipmapped array: its levels, each an array of its own (level i halves
 * every extent of level i-1, down to 1). */
struct CUmipmappedArray_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    unsigned nlevels;
    struct CUarray_st **levels;
};

/* A texture or surface object (driver_texture.c): the descriptions it was
 * made of; its handle is the struct's address. */
typedef struct sim_texobj_s {
    uint32_t magic; /* SIM_MAGIC_TEXOBJ or SIM_MAGIC_SURFOBJ */
    struct CUctx_st *ctx;
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;       /* texture objects */
    CUDA_RESOURCE_VIEW_DESC view;
    bool has_view;
} sim_texobj_t;

/* Frees the arrays, mipmapped arrays and texture and surface objects of a
 * context that goes (driver_array.c, driver_texture.c). */
void sim_arrays_free_ctx(struct CUctx_st *ctx);
void sim_texobjs_free_ctx(struct CUctx_st *ctx);

/* What the program told the driver about a range of managed memory
 * (driver_misc.c): kept per allocation. */
typedef struct sim_hints_s {
    bool read_mostly;
    CUmemLocation preferred;     /* type CU_MEM_LOCATION_TYPE_INVALID: none */
    CUmemLocation last_prefetch; /* the same */
    uint32_t accessed_by;        /* bit d: device d (SET_ACCESSED_BY) */
    bool accessed_by_host;
    unsigned attach;             /* cuStreamAttachMemAsync's flags, 0 before any */
} sim_hints_t;

struct sim_capture_s {
    struct CUstream_st *origin;
    struct CUgraph_st *graph;
    CUstreamCaptureMode mode;
    pthread_t thread; /* thread that began it */
    bool invalidated;
    bool to_graph;       /* cuStreamBeginCaptureToGraph: the graph is the program's */
    uint64_t id;         /* cuStreamGetCaptureInfo's */
    sim_capture_t *next; /* list of live captures */
};

/* ------------------------------------------------------------------------
 * Operations
 * ---------------------------------------------------------------------- */

typedef enum sim_op_kind_e {
    SIM_OP_COPY,     /* `height` rows of `bytes`: memcpy(dst + r*dpitch, src + r*spitch, bytes) */
    SIM_OP_SET,      /* `height` rows of `bytes` filled with `value`, `elem` bytes wide */
    SIM_OP_HOSTFN,   /* fn(arg) (cuLaunchHostFunc, cucacheSimLaunch) */
    SIM_OP_CALLBACK, /* cb(cb_stream, status, arg) (cuStreamAddCallback): runs even after a fault */
    SIM_OP_RECORD, /* event record: timestamps the event */
    SIM_OP_WAIT,   /* no work: carries a dependency (cuStreamWaitEvent) */
    SIM_OP_FREE,   /* stream-ordered free: the block becomes free at run */
    SIM_OP_FAULT,  /* sets the context's sticky CUDA_ERROR_ILLEGAL_ADDRESS */
    SIM_OP_KERNEL, /* occupies the stream for dur_ns of device time, then fn(arg) if any */
} sim_op_kind_t;

typedef struct sim_range_s {
    uintptr_t lo, hi; /* device range [lo, hi) */
    bool write;
    uintptr_t va; /* race detector: the address of lo (lo may be a physical key, engine_vmm.c) */
} sim_range_t;

typedef struct sim_dep_s {
    int slot;
    uint64_t seq;
} sim_dep_t;

struct sim_op_s {
    sim_op_t *next;
    sim_op_kind_t kind;
    const char *what; /* "memcpy HtoD", ... for reports */
    uint64_t enq_ns;  /* device time (CLOCK_MONOTONIC ns) when it was queued: it starts no earlier */
    uint64_t dur_ns;  /* KERNEL: how long it runs */
    struct CUstream_st *stream;
    int slot;
    uint64_t seq;
    sim_vc_t *vc;
    sim_dep_t *deps; /* must complete before this op runs */
    uint32_t ndeps;
    sim_range_t ranges[2];
    sim_range_t *xranges; /* cucacheSimLaunch: more ranges */
    uint32_t nranges;
    /* payload */
    void *dst;
    const void *src;
    size_t bytes;          /* COPY, SET: bytes of each row */
    size_t height;         /* COPY, SET: rows (1 for a linear operation) */
    size_t dpitch, spitch; /* COPY, SET: bytes from one row to the next */
    unsigned elem;         /* SET: 1, 2 or 4 */
    uint32_t value;
    void (*fn)(void *);
    void *arg;
    bool host_fn; /* HOSTFN, CALLBACK: the program's host function (not a simulated kernel's body): the host
                     joins the clock of the work before it as it starts (engine.h, "Happens-before") */
    CUstreamCallback cb; /* CALLBACK: called with cb_stream, the context's error and arg */
    CUstream cb_stream;
    void *staging; /* owned copy of pageable host source (rows packed) */
    struct CUevent_st *event;
    uint64_t ipc_gen; /* RECORD of an IPC event: its number in the event's shared slot (engine_ipc.c) */
    uintptr_t free_addr;
};

/* ------------------------------------------------------------------------
 * Configuration and global state
 * ---------------------------------------------------------------------- */

#define SIM_END_RING 64 /* device times of the last ops of each slot, for what waits on them */

typedef struct sim_state_s {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    bool initialized;
    CUresult init_result;
    sim_config_t cfg;
    sim_shared_t *shared; /* the device shared with other processes (CUCACHE_SIM_SHARED), or NULL */
    sim_device_t dev[SIM_MAX_DEVICES];
    int ndev;
    /* clock slots */
    uint64_t completed[SIM_MAX_SLOTS]; /* highest completed seq per slot */
    uint64_t slot_seq[SIM_MAX_SLOTS];  /* highest seq ever used per slot */
    /* the device's timeline: when each slot's last completed op ended (ns,
     * CLOCK_MONOTONIC's scale), and the ends of its last few ops by seq.
     * Ends are computed, not observed: a worker that wakes late does not
     * delay what follows (engine_stream.c: op_start, op_execute,
     * op_complete) */
    uint64_t slot_end[SIM_MAX_SLOTS];
    struct {
        uint64_t seq, end;
    } ends[SIM_MAX_SLOTS][SIM_END_RING];
    bool slot_used[SIM_MAX_SLOTS];
    int nslots; /* slots ever handed out */
    sim_vc_t *host_vc;
    /* allocations (device and host), sorted by addr */
    sim_alloc_t *allocs;
    size_t nallocs, cap_allocs;
    /* captures */
    sim_capture_t *captures;
    unsigned long stream_ids;
    /* race detector */
    struct sim_race_s *race;
    uint64_t next_buffer_id; /* last CU_POINTER_ATTRIBUTE_BUFFER_ID handed out */
    /* statistics for tests */
    atomic_ulong device_allocs, device_frees;
} sim_state_t;

extern sim_state_t sim;

/* Thread state: current context and capture mode. */
typedef struct sim_thread_s {
    struct CUctx_st *ctx_stack[8];
    int depth; /* ctx_stack[depth-1] is current; 0: none */
    CUstreamCaptureMode capture_mode;
    struct CUstream_st *pts[SIM_MAX_DEVICES * 2]; /* per-thread default streams */
    struct CUctx_st *pts_ctx[SIM_MAX_DEVICES * 2];
    uint64_t pts_gen[SIM_MAX_DEVICES * 2];
    bool registered;
} sim_thread_t;

sim_thread_t *sim_thread(void);

/* ------------------------------------------------------------------------
 * Engine functions.  Unless said otherwise, call with sim.lock held.
 * ---------------------------------------------------------------------- */

/* Initialisation (cuInit); takes the lock itself. */
CUresult sim_init(void);
/* CUDA_ERROR_NOT_INITIALIZED before cuInit, else CUDA_SUCCESS. */
CUresult sim_check_init(void);
void sim_lock(void);
void sim_unlock(void);
void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Contexts */
struct CUctx_st *sim_ctx_current(void);
CUresult sim_ctx_get(struct CUctx_st **out); /* current ctx, checked, sticky */
bool sim_ctx_valid(const struct CUctx_st *ctx);
struct CUctx_st *sim_ctx_create(sim_device_t *dev, bool primary);
void sim_ctx_destroy(struct CUctx_st *ctx); /* waits for its work; frees memory */
void sim_modules_free_ctx(struct CUctx_st *ctx); /* its modules and kernels (driver_module.c) */
/* Modules (driver_module.c): a module of desc in ctx, its variables
 * allocated and set (CUDA_ERROR_OUT_OF_MEMORY when they do not fit). */
CUresult sim_module_new(struct CUctx_st *ctx, const sim_image_desc_t *desc, struct CUmod_st **out);
/* The kernel of m by that name (made now in an open module), or NULL. */
struct CUfunc_st *sim_module_function(struct CUmod_st *m, const char *name);
/* A kernel of a library as a function of ctx (made on first use). */
struct CUfunc_st *sim_kernel_function(struct CUkern_st *k, struct CUctx_st *ctx);
/* Kernel attributes and occupancy (driver_func.c): a new function's
 * settable attributes at their defaults; blocks of `block` threads and
 * `dyn` dynamic shared bytes resident on one SM at once (0: none fits). */
void sim_func_defaults(struct CUfunc_st *f);
int sim_device_sms(void); /* the modelled device's multiprocessors */
int sim_occupancy_blocks(const struct CUfunc_st *f, int block, size_t dyn);
/* A launch configuration's cluster dimensions, when it has the attribute
 * (driver_module.c): dims is left alone otherwise. */
void sim_launch_cluster_dims(const CUlaunchConfig *config, unsigned dims[3]);

/* Streams */
CUresult sim_stream_resolve(struct CUctx_st *ctx, CUstream h, bool ptds, struct CUstream_st **out);
struct CUstream_st *sim_stream_create(struct CUctx_st *ctx, sim_stream_kind_t kind, unsigned flags, int prio);
void sim_stream_destroy(struct CUstream_st *s);
bool sim_stream_valid(const struct CUstream_st *s);
bool sim_stream_is_blocking(const struct CUstream_st *s);
/* Queue op on s (or record it into s's capture): fills seq, vc, deps, checks
 * races, starts the worker.  Takes ownership of op. */
CUresult sim_enqueue(struct CUstream_st *s, sim_op_t *op);
sim_op_t *sim_op_new(sim_op_kind_t kind, const char *what);
/* A copy of op's payload (for graphs), without clock or dependencies. */
sim_op_t *sim_op_clone(const sim_op_t *op);
void sim_op_add_dep(sim_op_t *op, int slot, uint64_t seq);
/* Queues on s a device-side wait for (slot, seq), whose clock is vc: s's
 * later work starts after it and is ordered after it (cuStreamWaitEvent,
 * and a pool's inserted dependency).  what names the op in reports. */
CUresult sim_stream_wait_for(struct CUstream_st *s, int slot, uint64_t seq, const sim_vc_t *vc, const char *what);
/* Which device, if any, owns the address (inside its region). */
sim_device_t *sim_device_of(uintptr_t addr);
void sim_event_free(struct CUevent_st *e);
/* Frees a handle struct after a delay (see engine.c). */
void sim_handle_release(void *p);
void sim_op_free(sim_op_t *op);
/* Host waits: they drop and retake the lock while waiting. */
CUresult sim_stream_wait_idle(struct CUstream_st *s);
void sim_wait_seq(int slot, uint64_t seq);
CUresult sim_ctx_wait_idle(struct CUctx_st *ctx);
void sim_device_wait_idle(sim_device_t *dev);
/* Whether any stream of any context has work not yet done. */
bool sim_devices_busy(void);
bool sim_stream_done(const struct CUstream_st *s);
/* The host observed that (slot, seq) completed, whose clock is vc. */
void sim_host_observe(const sim_vc_t *vc);

/* Capture */
/* Returns CUDA_SUCCESS or the error for a potentially unsafe call, and
 * invalidates the captures that prohibit it. */
CUresult sim_capture_check_unsafe(void);
/* Legacy-stream work while a blocking stream of ctx captures. */
CUresult sim_capture_check_implicit(struct CUstream_st *s);
void sim_capture_end_all(struct CUctx_st *ctx);

/* Graphs (engine_graph.c) */
struct CUgraph_st *sim_graph_new(struct CUctx_st *ctx);
void sim_graph_free(struct CUgraph_st *g);
/* Frees a node taken out of its graph (its work, child graph, bodies). */
void sim_graph_node_free(struct CUgraphNode_st *node);
/* A node of kind type after deps[0..n) (checked by the caller), added to g. */
struct CUgraphNode_st *sim_graph_node_add(struct CUgraph_st *g, CUgraphNodeType type, struct CUgraphNode_st *const *deps,
                                          size_t n);
/* Records op (owned) into s's capture as a node after s's capture dependencies. */
void sim_graph_capture_op(struct CUstream_st *s, sim_op_t *op);
/* s's capture dependencies become nodes[0..n) (add: joined to them). */
void sim_graph_capture_deps(struct CUstream_st *s, struct CUgraphNode_st *const *nodes, size_t n, bool add);
CUresult sim_graph_instantiate(struct CUgraph_st *g, unsigned long long flags, struct CUgraphExec_st **out,
                               struct CUgraphNode_st **err_node);
void sim_exec_free(struct CUgraphExec_st *x);
/* Reserves x's graph memory (cuGraphUpload) / queues x on s. */
CUresult sim_exec_upload(struct CUgraphExec_st *x);
CUresult sim_exec_launch(struct CUgraphExec_st *x, struct CUstream_st *s);
/* Graph memory: a new allocation of g's device (its address fixed for the
 * graph's life); the block of a graph allocation at addr; freeing one
 * outside its graph (cuMemFree, cuMemFreeAsync); trimming the pool. */
CUresult sim_gblock_new(struct CUctx_st *ctx, size_t size, sim_gblock_t **out);
sim_gblock_t *sim_gblock_at(uintptr_t addr);
uintptr_t sim_gblock_addr(const sim_gblock_t *b);
bool sim_gblock_freed_in_graph(const sim_gblock_t *b);
void sim_gblock_mark_freed(sim_gblock_t *b);
void sim_gblock_retain(sim_gblock_t *b);
CUresult sim_gblock_free_outside(sim_gblock_t *b);
void sim_graph_mem_trim(sim_device_t *d);

/* Memory (engine_mem.c) */
sim_alloc_t *sim_alloc_find(uintptr_t addr); /* allocation containing addr */
sim_alloc_t *sim_alloc_exact(uintptr_t addr);
CUresult sim_dev_alloc(sim_device_t *dev, size_t size, sim_alloc_kind_t kind, struct CUctx_st *ctx, sim_alloc_t **out);
void sim_dev_free(sim_alloc_t *a); /* returns the range to the device */
/* The bytes a device allocation of `size` takes (the real granularity). */
size_t sim_dev_round(size_t size);
/* The device's free bytes: its free pages (shared: less every process's). */
size_t sim_dev_free_bytes(const sim_device_t *dev);
/* Charges bytes of pages to the device (shared: to this process's entry)
 * if that many are free / gives them back.  Every change of pages_used and
 * vmm_bytes goes with one of these. */
bool sim_dev_charge(sim_device_t *d, size_t bytes);
void sim_dev_uncharge(sim_device_t *d, size_t bytes);
/* Sets up a device's address range, memory and page count. */
CUresult sim_dev_init(sim_device_t *d, int ordinal, size_t capacity, size_t span);
/* Frees any allocation: pool accounting, device or host memory, and a
 * destroyed pool with its last block. */
void sim_alloc_release(sim_alloc_t *a);
/* Pinned or managed memory of ctx's device. */
CUresult sim_host_alloc(size_t size, sim_alloc_kind_t kind, struct CUctx_st *ctx, void **out);
/* Frees pinned or managed memory, or forgets a registration. */
void sim_host_free(sim_alloc_t *a);
/* Adds an allocation of ctx's device at addr to the table (host memory:
 * pinned, managed, registered, or an IPC mapping). */
sim_alloc_t *sim_alloc_add(uintptr_t addr, size_t size, sim_alloc_kind_t kind, unsigned flags, struct CUctx_st *ctx);
/* Adds an entry to the table, with a new buffer id and the rest zero, for
 * the caller to fill in / removes one. */
sim_alloc_t *sim_alloc_new(uintptr_t addr, size_t size, sim_alloc_kind_t kind, int device);
void sim_alloc_remove(sim_alloc_t *a);
/* Records [p, p+size) of the program's memory as registered. */
CUresult sim_host_register(void *p, size_t size, unsigned flags, struct CUctx_st *ctx);
/* Whether any allocation or registration overlaps [lo, hi). */
bool sim_alloc_overlaps(uintptr_t lo, uintptr_t hi);
/* The allocation containing addr that the program still holds (not freed
 * by cuMemFreeAsync, in stream order or in a pool), or NULL. */
sim_alloc_t *sim_alloc_live(uintptr_t addr);
bool sim_range_ok(uintptr_t addr, size_t bytes, sim_alloc_t **out);
void sim_pool_trim(struct CUmemPoolHandle_st *pool, size_t keep);
void sim_pools_trim_after_sync(struct CUctx_st *ctx);
struct CUmemPoolHandle_st *sim_pool_new(sim_device_t *dev, bool is_default);
/* Frees a destroyed pool once no block refers to it. */
void sim_pool_maybe_release(struct CUmemPoolHandle_st *pool);
void sim_free_ctx_memory(struct CUctx_st *ctx);

/* IPC (engine_ipc.c; the API is driver_ipc.c).  An exported allocation
 * freed while another process has it open keeps its pages and addresses
 * until the last importer closes it, as CUDA keeps such memory alive. */
/* The 64 bytes of a CUipcMemHandle, as the simulated driver fills them. */
typedef struct sim_ipc_handle_s {
    char magic[8];      /* IPC_MAGIC */
    uint32_t version;   /* IPC_VERSION */
    int32_t pid;        /* the exporter */
    int32_t mem_fd;     /* its descriptor of the device's memory */
    int32_t table_fd;   /* its descriptor of the export table */
    uint32_t device;    /* the device ordinal in the exporter */
    uint32_t slot;      /* the export's slot in the table */
    uint64_t offset;    /* the allocation's offset in the device's memory */
    uint64_t size;      /* its size as requested */
    uint64_t buffer_id; /* its buffer id in the exporter (the slot must match) */
    uint64_t nonce;     /* the table's: tells a reused pid apart */
} sim_ipc_handle_t;
_Static_assert(sizeof(struct sim_ipc_handle_s) == CU_IPC_HANDLE_SIZE, "an IPC handle is 64 bytes");

/* The magics of the two handles of an allocation: cuIpcGetMemHandle's and
 * cuMemPoolExportPointer's (an allocation of an exported pool). */
#define SIM_IPC_MAGIC_MEM "CUSIMIPC"
#define SIM_IPC_MAGIC_POOL_PTR "CUSIMPPT"
/* Fills the handle of a live device allocation (exporting it) with magic. */
CUresult sim_ipc_export(sim_alloc_t *a, const char magic[8], sim_ipc_handle_t *h);
/* Maps another process's export of that magic into device dev's addresses
 * for ctx (which owns the mapping); *out is the address. */
CUresult sim_ipc_open(struct CUctx_st *ctx, sim_device_t *dev, const char magic[8], const sim_ipc_handle_t *h,
                      uintptr_t *out);
/* Closes one open of the import at addr (all: every open). */
CUresult sim_ipc_close(uintptr_t addr, bool all);
/* The import at addr, if any: its device (for the wait before the last
 * close) and whether this close is its last. */
bool sim_ipc_is_open(uintptr_t addr, int *device, bool *last);
/* An allocation is being freed: false when importers still have it open
 * (its memory is then kept until they close it). */
bool sim_ipc_freeing(sim_alloc_t *a);
/* Gives back the memory of exports freed while open that every importer
 * has closed since. */
void sim_ipc_sweep(void);
/* This process's pid and the nonce of its export table (created if need
 * be): who an exported pool belongs to. */
CUresult sim_ipc_identity(int32_t *pid, uint64_t *nonce);
/* The import at a (an allocation of an imported pool) is freed by the
 * program (cuMemFree, cuMemFreeAsync as it runs): one open is closed. */
void sim_ipc_free_import(sim_alloc_t *a);

/* IPC events (engine_ipc.c; the API is driver_ipc.c).  An event created
 * with CU_EVENT_INTERPROCESS has a slot in the export table from its
 * creation; every record of it, in any process, takes the next number of
 * the slot, and the slot keeps the highest number whose record completed.
 * The processes share no clocks: where the latest record is another
 * process's, a wait (cuStreamWaitEvent) is an operation that waits, in real
 * time, until that number completed, and the host's query or synchronise
 * reads it; where it is this process's own, the event behaves as any. */
typedef struct sim_ipc_event_s sim_ipc_event_t;
/* The 64 bytes of a CUipcEventHandle, as the simulated driver fills them. */
typedef struct sim_ipc_event_handle_s {
    char magic[8];    /* "CUSIMIPE" */
    uint32_t version; /* the table's layout */
    int32_t pid;      /* the exporter */
    int32_t table_fd; /* its descriptor of the export table */
    uint32_t slot;    /* the event's slot */
    uint64_t id;      /* the event's id in the exporter (the slot must hold it) */
    uint64_t nonce;   /* the table's */
    uint32_t device;  /* the event's device ordinal */
    uint8_t pad[20];
} sim_ipc_event_handle_t;
_Static_assert(sizeof(struct sim_ipc_event_handle_s) == CU_IPC_HANDLE_SIZE, "an IPC event handle is 64 bytes");
/* Gives an interprocess event its slot (cuEventCreate). */
CUresult sim_ipc_event_create(struct CUevent_st *e);
CUresult sim_ipc_event_export(const struct CUevent_st *e, sim_ipc_event_handle_t *h);
/* Opens another process's event as a new event of ctx. */
CUresult sim_ipc_event_open(struct CUctx_st *ctx, const sim_ipc_event_handle_t *h, struct CUevent_st **out);
/* The number of a record of e being queued (sim_enqueue) / that completed. */
uint64_t sim_ipc_event_recorded(struct CUevent_st *e);
void sim_ipc_event_done(struct CUevent_st *e, uint64_t gen);
/* The event is freed: its slot is given back (exporter) or closed. */
void sim_ipc_event_release(struct CUevent_st *e);
/* The number of e's latest record when another process made it (the
 * caller then waits for that number), else 0 (none, or this process's own:
 * the local event says all). */
uint64_t sim_ipc_event_foreign(const struct CUevent_st *e);
/* Whether the record numbered gen (or a later one) completed. */
bool sim_ipc_event_reached(const struct CUevent_st *e, uint64_t gen);
/* The host waits for that (sim.lock held; dropped while it polls). */
void sim_ipc_event_host_wait(const struct CUevent_st *e, uint64_t gen);
/* A wait for record gen of e, for a stream (not capturable). */
sim_op_t *sim_ipc_event_wait_op(const struct CUevent_st *e, uint64_t gen);

/* Peers (driver_peer.c) */
/* The context is going: every peer access to or from it goes. */
void sim_peer_forget(struct CUctx_st *ctx);

/* Returns a kept allocation's pages and addresses (engine_mem.c). */
void sim_dev_release_range(int device, uintptr_t addr, size_t reserved);
/* Addresses only, no pages: for mapping another process's memory. */
uintptr_t sim_dev_addr_take(sim_device_t *d, size_t len);
void sim_dev_addr_give(sim_device_t *d, uintptr_t addr, size_t len);

/* Virtual memory (engine_vmm.c; the API is driver_vmm.c).  Reservations
 * come from one range of addresses of their own; a physical allocation is
 * a memfd charged to its device; a mapping is an entry of the allocation
 * table (SIM_ALLOC_VMM) whose bytes are the memfd's. */
/* Sets up the range of reservable addresses (at cuInit). */
CUresult sim_vmm_init(void);
/* Whether addr lies in the reservable range (mapped or not). */
bool sim_vmm_region(uintptr_t addr);
/* [addr, addr+bytes) lies in mappings, adjacent and accessible by the device
 * (-1: by any), for writing too when `write`. */
bool sim_vmm_range_ok(uintptr_t addr, size_t bytes, bool write, int device);
/* The ranges of physical memory behind [lo, hi) for the race detector:
 * writes at most max of them to out and returns how many there are (a
 * range outside the reservable addresses is itself). */
size_t sim_vmm_translate(const sim_range_t *in, sim_range_t *out, size_t max);
/* Names [lo, hi) of physical keys for a race report (the handle, the
 * offsets and where it is mapped); false for plain addresses. */
bool sim_vmm_describe_key(uintptr_t lo, uintptr_t hi, char *buf, size_t len);
/* Spends the configured time of one call (without sim.lock). */
void sim_vmm_cost(sim_vmm_call_t call);
/* Every range of op in mapped memory is still mapped and accessible by
 * the device (a graph launched again after an unmap is not). */
bool sim_vmm_op_ok(const sim_op_t *op, int device);
/* Gives back exported allocations whose last descriptor in this process
 * is closed (cuMemGetInfo). */
void sim_vmm_sweep(void);
/* The injected failure of this call, or CUDA_SUCCESS (counts the call). */
CUresult sim_vmm_injected(sim_vmm_call_t call);

/* Race detector (engine_race.c) */
void race_init(void);
void race_check_and_add(const sim_op_t *op);
void race_gc(void);
/* Device memory [lo, hi) went back to the device when a stream-ordered
 * free ran, or when a pool released a completed free's block: whoever is
 * handed it next is ordered after that free, so its records go (sim.lock
 * held). */
void race_forget(uintptr_t lo, uintptr_t hi);
/* The host takes [lo, hi) of physical memory, mapped at va, away
 * (cuMemUnmap): reports a race with the first operation on it, through
 * those addresses, that the host has not seen complete (true when it did).
 * Does not wait (race_wait_unmap does; the simulator must not fault). */
bool race_check_unmap(uintptr_t va, uintptr_t lo, uintptr_t hi, const char *what);
/* Waits for the recorded work on physical [lo, hi) through addresses
 * [va, va + hi - lo) that has not completed; false when there was none (the
 * lock was not dropped). */
bool race_wait_unmap(uintptr_t va, uintptr_t lo, uintptr_t hi);

/* Misc */
uint64_t sim_now_ns(void);
/* Until CLOCK_MONOTONIC reaches t: sleeps, then spins the last spin_us
 * (yielding), so that device time is kept to a few microseconds. */
void sim_wait_until_ns(uint64_t t);
/* A kernel's time by name (CUCACHE_SIM_KERNEL_US). */
uint64_t sim_kernel_ns(const char *name);
void sim_sleep_us(unsigned us);
const char *sim_stream_name(const struct CUstream_st *s, char *buf, size_t len);

#endif
