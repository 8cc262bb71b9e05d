/*
 * stats/: what cucache tells people about their memory, built on the core's
 * counters (core/stats.h), its layout copy (core_layout) and its events
 * (core_set_observer).  Nothing here calls CUDA or the interposer: the
 * interposer gathers the inputs and passes them in, so that every text and
 * file is testable on constructed states (tests/stats).
 *
 *   report.c    the OOM report (full block, then one line per repeat)
 *   hint.c      its hint: the cause and the CUCACHE_CONF to try (report.h
 *               holds what the two share)
 *   summary.c   the exit summary in torch.cuda.memory_summary()'s layout
 *   ring.c      the bounded ring of recent events for snapshots
 *   stack.c     call stacks of allocations: captured, interned, symbolised
 *   kept.c      memory a library keeps for the life of the process, told
 *               from a leak by its call stack (one row per library call)
 *   pystack.c   their Python frames: the interpreter found in the process,
 *               bound at run time, its frames read under its GIL
 *   intern.c    the lock-free interning tables stacks and frames use
 *   snapshot.c  snapshots as a pickle in torch.cuda.memory._dump_snapshot's
 *               schema, and as JSON with the same content
 *   file.c      file names from templates (%p %r %d %n), whole-file writes
 *   fmt.c       sizes in PyTorch's format, the line sink
 *   nvml_abi.c  NVML's process list for the OOM report and cucache-top
 *               (nvml_abi.h: NVML's codes, layouts and entry points)
 *   registry.c  the GPU registry: what every cucache process on a GPU
 *               holds, and how one asks another for idle cache (registry.h)
 *   trace_read.c reading a cucache trace (trace.h: the format, which
 *               interpose/trace.c writes)
 *
 * Text goes to a line sink, one line per call without the newline and
 * without the "cucache: " prefix (the interposer's log adds it).  Host
 * memory comes from hostalloc, never from the program's malloc.
 */
#ifndef CUCACHE_STATS_ST_H
#define CUCACHE_STATS_ST_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "core.h"
#include "stats.h" /* core/stats.h: core_stats_t, core_event_t */

typedef void (*st_sink_fn)(void *ctx, const char *line);

/* ------------------------------------------------------------------------
 * fmt.c
 * ---------------------------------------------------------------------- */

/* PyTorch's format_size: "512 bytes" (<= 1024), "1.50 KiB" (<= 1 MiB),
 * "20.00 MiB" (<= 1 GiB), else "1.17 GiB"; two decimals. */
void st_fmt_size(char *buf, size_t len, uint64_t bytes);
/* A count with thousands separated by commas: 12345 -> "12,345". */
void st_fmt_count(char *buf, size_t len, uint64_t v);

/* ", the first allocation N of M", and " (t=S.SS s)" when born (a
 * core_block_info_t.born) says when: seconds after the device's state was
 * made. */
void st_fmt_first(char *buf, size_t len, uint64_t number, uint64_t allocs, uint32_t born);

/* printf into the sink as one line (truncated at 1023 characters). */
void st_linef(st_sink_fn sink, void *ctx, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------------
 * report.c: the OOM report
 * ---------------------------------------------------------------------- */

/* One process holding memory on the device, as NVML lists it. */
typedef struct st_gpu_proc_s {
    unsigned pid;
    uint64_t bytes; /* NVML's usedGpuMemory (on a GPU: with the context's own memory) */
    char comm[64];  /* /proc/PID/comm, or cmdline's first word; "?" when the pid is not visible */
    bool cucache;   /* the process runs cucache (the GPU registry lists it): the figures below */
    bool torn;      /* ... but its figures could not be read (it stopped or died while publishing) */
    bool asked;     /* it was asked to give idle cache back for this request */
    bool answered;  /* ... and answered within the wait (else: no answer in time) */
    uint64_t allocated, reserved; /* its cache: live and held bytes */
    uint64_t given;               /* bytes it gave back for this request (still giving: landed so far) */
    uint64_t age_ms;              /* how old its figures are (published by it; 0 for this process) */
    /* the ask's end, beyond answered (interpose/yield.c) */
    bool still_giving;  /* no answer: it was still giving back when the wait's bound passed */
    uint64_t answer_ms; /* answered: this many ms after the ask */
} st_gpu_proc_t;

/* The processes on the failing device (the interposer asks NVML at the
 * failure): `procs` in any order, the report sorts them. */
typedef struct st_gpu_procs_s {
    const char *unavailable; /* NULL: NVML answered; else why it could not (one phrase) */
    unsigned self_pid;       /* this process (getpid) */
    const st_gpu_proc_t *procs;
    size_t n;
    /* this request's ask of the neighbours (interpose/yield.c) */
    bool yield_on;      /* CUCACHE_YIELD and the registry were on */
    unsigned asked;     /* cucache processes asked */
    uint64_t given;     /* bytes they gave back in all */
    uint64_t waited_ns; /* how long the allocation waited for them */
    unsigned gone;      /* asked ones that died or left before answering */
    unsigned gone_pid;  /* ... the first of them */
    bool gone_giving;   /* ... which died while giving back */
} st_gpu_procs_t;

typedef struct st_oom_input_s {
    int device;                  /* CUDA ordinal */
    const core_oom_t *oom;       /* what the failed allocation knew */
    const core_stats_t *stats;   /* the device's counters, taken after the failure */
    const core_layout_t *layout; /* segments and blocks after the failure; NULL if none could be taken */
    const conf_t *conf;          /* the device's configuration */
    const char *conf_text;       /* CUCACHE_CONF as the user wrote it ("" when unset) */
    const core_whatif_t *whatif; /* the history replayed under other settings (core_whatif); NULL: not run */
    const st_gpu_procs_t *gpu;   /* who holds the device's memory (NVML); NULL: not asked */
} st_oom_input_t;

/* The full report: PyTorch's sentence with real numbers, then the detail
 * (largest free block, fragmentation, pools, memory held outside cucache
 * split into other processes and this one's, the processes on the device
 * largest first, live allocations by size, a capped segment map) and a hint naming the
 * CUCACHE_CONF to try.  Deterministic for a given input. */
void st_report_oom(const st_oom_input_t *in, st_sink_fn sink, void *ctx);

/* One line for a repeated failure: the sizes, the device, and `count`, the
 * number of out-of-memory failures so far in the process. */
void st_report_oom_repeat(const st_oom_input_t *in, unsigned long count, st_sink_fn sink, void *ctx);

/* ------------------------------------------------------------------------
 * summary.c: CUCACHE_REPORT=exit
 * ---------------------------------------------------------------------- */

/* The table of torch.cuda.memory_summary() (75 columns, every metric with
 * current/peak/total allocated/total freed and its large/small pool rows)
 * titled for cucache, then cucache's own lines: cache hit rate, device
 * allocations avoided, time spent waiting on fences and on the neighbours'
 * answers (registry.h: st_reg_waits), and the verdict
 * ("everything freed" or "N bytes in M allocations still live"). */
void st_summary(int device, const core_stats_t *s, st_sink_fn sink, void *ctx);

/* The leak check at exit: the live allocations of a device's layout
 * grouped by the bytes asked for, largest total first, each group with the
 * number of its first allocation (allocations are numbered 1, 2, ... on the
 * device; `allocs` is how many there were): "leak check: GPU 0: 660.00 MiB
 * in 220 allocations still live at exit, by requested size:", then a row a
 * size.  With call stacks, by call site, and the allocations a library
 * keeps for the life of the process (kept.c) apart, as not leaks.  Nothing
 * when none is live.  Returns the leaks: the live allocations less those
 * kept. */
size_t st_leak_report(int device, const core_layout_t *l, uint64_t allocs, st_sink_fn sink, void *ctx);

/* ------------------------------------------------------------------------
 * ring.c: recent events for snapshots
 * ---------------------------------------------------------------------- */

typedef enum st_action_e {
    ST_ALLOC,          /* "alloc" */
    ST_FREE_REQUESTED, /* "free_requested" */
    ST_FREE_COMPLETED, /* "free_completed" */
    ST_SEGMENT_ALLOC,  /* "segment_alloc" */
    ST_SEGMENT_FREE,   /* "segment_free" */
    ST_OOM,            /* "oom": addr holds the device's free bytes */
    ST_SNAPSHOT,       /* "snapshot" */
    ST_SEGMENT_MAP,    /* "segment_map": pages of an expandable segment mapped */
    ST_SEGMENT_UNMAP,  /* "segment_unmap": and given back */
} st_action_t;

typedef struct st_trace_ev_s {
    uint64_t time_us; /* microseconds since the epoch (CLOCK_REALTIME) */
    uintptr_t addr;   /* block or segment address; ST_OOM: device free bytes */
    uint64_t size;
    uint64_t stream;
    int32_t pool_id;
    uint8_t action; /* st_action_t */
    uint32_t site;  /* the allocation's call site (stack.c id; 0: none) */
} st_trace_ev_t;

/* A bounded ring of the last `capacity` events of one device.  Not locked:
 * the core calls its observer with the device lock held, and snapshots
 * copy the ring under the same lock (core_layout's under_lock). */
typedef struct st_ring_s {
    st_trace_ev_t *ev;
    size_t capacity;
    uint64_t pushed; /* events ever pushed; the ring holds the last min(pushed, capacity) */
} st_ring_t;

/* 0, or -1 when out of host memory. */
int st_ring_init(st_ring_t *r, size_t capacity);
void st_ring_fini(st_ring_t *r);
/* A core_observer_fn: ctx is the st_ring_t.  Stamps the time. */
void st_ring_observe(void *ctx, const core_event_t *e);
void st_ring_push(st_ring_t *r, const st_trace_ev_t *e);
/* Copies the held events, oldest first, into out (hostalloc'ed; NULL and 0
 * when empty or out of memory). */
size_t st_ring_copy(const st_ring_t *r, st_trace_ev_t **out);

/* ------------------------------------------------------------------------
 * snapshot.c
 * ---------------------------------------------------------------------- */

typedef struct st_snap_dev_s {
    int device;
    const core_layout_t *layout;
    const st_trace_ev_t *trace; /* oldest first */
    size_t ntrace;
    /* idle cache given back to other processes and received from them
     * (core/stats.h's num_yields_given ... yield_bytes_received) */
    uint64_t yields_given, yield_bytes_given, yields_received, yield_bytes_received;
} st_snap_dev_t;

typedef struct st_snapshot_s {
    const st_snap_dev_t *devs; /* devices with allocator state, ascending */
    size_t ndevs;
    const conf_t *conf;
    const char *conf_text; /* CUCACHE_CONF ("" when unset) */
} st_snapshot_t;

/* A growable byte buffer on hostalloc. */
typedef struct st_buf_s {
    unsigned char *data;
    size_t len, cap;
    bool failed; /* an allocation failed: the content is incomplete */
} st_buf_t;

/* Appends n bytes; on a failed allocation sets failed and drops them. */
void st_buf_put(st_buf_t *b, const void *data, size_t n);
void st_buf_free(st_buf_t *b);

/* The snapshot as a pickle (protocol 2; only dicts, lists, tuples, ints,
 * strings, booleans and None: loads with every global refused) in the
 * schema of torch.cuda.memory._snapshot(): segments (device, address,
 * total_size, allocated_size, active_size, requested_size (of the active
 * blocks), stream, segment_type, segment_pool_id, is_expandable, frames
 * (of the allocation that made it), blocks (address, size, requested_size
 * (0 when inactive), state, frames)), device_traces (one list per device,
 * up to the highest ordinal; action, addr or device_free, size, stream,
 * time_us, frames (segment events: the segment's), compile_context ('N/A'
 * as PyTorch's), user_metadata), allocator_settings,
 * external_annotations.  Encoded as CPython's pickler encodes it: items in
 * batches of 1000, each string, stack and frame written once and fetched
 * from the memo after.  0, or -1 when out of memory. */
int st_snapshot_pickle(const st_snapshot_t *s, st_buf_t *out);
/* The same content as one JSON object. */
int st_snapshot_json(const st_snapshot_t *s, st_buf_t *out);

/* ------------------------------------------------------------------------
 * intern.c: keys of bytes given 32-bit ids for the life of the process
 * ---------------------------------------------------------------------- */

/* Zeroed, then st_intern_init.  Lookups take no lock; insertions take
 * `lock`; entries are never freed. */
typedef struct st_intern_s {
    _Atomic(_Atomic uint32_t *) slots;      /* nslots ids; 0: empty (release: the table is set up) */
    struct st_interned_s *_Atomic *entries; /* by id, 1..max */
    size_t nslots;                          /* a power of two, at least twice max */
    uint32_t count, max;                    /* the next id (under lock); the most entries */
    pthread_mutex_t lock;
} st_intern_t;

/* The table's memory (a second call does nothing); 0, or -1 without host
 * memory. */
int st_intern_init(st_intern_t *t, uint32_t max);
/* The id of key[0..len), interned if new; 0 when the table is full, not
 * set up, or host memory ran out.  Lock-free unless the key is new. */
uint32_t st_intern(st_intern_t *t, const void *key, size_t len);
/* The key of id (8-aligned), its length in *len; NULL for 0 and unknown ids. */
const void *st_intern_key(st_intern_t *t, uint32_t id, size_t *len);
/* A fork child: another thread of the parent may have held the lock. */
void st_intern_atfork_child(st_intern_t *t);

/* ------------------------------------------------------------------------
 * stack.c: call stacks of allocations (CUCACHE_STACKS)
 * ---------------------------------------------------------------------- */

enum {
    ST_STACK_DEPTH_MAX = 64,     /* native frames, and Python frames, kept at most per stack */
    ST_STACK_FRAMES_MAX = 128,   /* frames of both kinds in one stack at most */
    ST_STACK_DEPTH_DEFAULT = 24, /* CUCACHE_STACKS=native (or python...) without :DEPTH */
    ST_STACKS_MAX = 1 << 16,     /* distinct stacks kept; then ST_STACK_DROPPED */
    ST_STACK_DROPPED = 1,        /* an id: a stack was taken but not kept (table full, or no frame) */
    ST_STACK_NO_PYTHON = 2,      /* an id: CUCACHE_STACKS=python on a thread with no Python frames to read */
    ST_STACK_FIRST = 3,          /* the first id of a kept stack; 0: none taken */
};

/* What a stack holds (CUCACHE_STACKS; the names are st_stack_modes'). */
typedef enum st_stack_mode_e {
    ST_STACKS_OFF,
    ST_STACKS_NATIVE,        /* native return addresses */
    ST_STACKS_PYTHON,        /* the calling thread's Python frames */
    ST_STACKS_PYTHON_NATIVE, /* the native frames up to the interpreter's, then the Python frames */
    ST_STACKS_MODES,
} st_stack_mode_t;

/* One row per mode: CUCACHE_STACKS's word for it, and what it records. */
typedef struct st_stack_mode_row_s {
    const char *name;
    bool native, python;
} st_stack_mode_row_t;
extern const st_stack_mode_row_t st_stack_modes[ST_STACKS_MODES];

/* One frame, symbolised: name is never NULL ("??" when unknown); file and
 * line where debug information names them (file NULL otherwise); module
 * (the object's file name, NULL when the address is in none) and the
 * offset of pc in it.  A Python frame (python true): file is the code's
 * co_filename as Python gave it, line the frame's line, name its
 * co_qualname; no module, pc or offset.  The strings live as long as the
 * process. */
typedef struct st_frame_s {
    const char *name, *file, *module;
    int line;
    bool python;
    uintptr_t pc, offset;
} st_frame_t;

/* Turns capturing on in `mode` with `depth` frames of each kind
 * (1..ST_STACK_DEPTH_MAX).  0, or -1 with err saying why (no libunwind for
 * native frames, a bad depth, no memory).  A Python mode in a process with
 * no interpreter (pystack.c) turns nothing on and returns 0: *on says
 * whether capture is on. */
int st_stacks_enable(st_stack_mode_t mode, int depth, bool *on, char *err, size_t errlen);
bool st_stacks_on(void);
/* The calling thread's stack, interned: its id, ST_STACK_DROPPED,
 * ST_STACK_NO_PYTHON, or 0 when capturing is off.  cucache's own frames
 * are left out.  Lock-free unless the stack is new or Python frames are
 * read on a thread that does not hold the GIL (pystack.c). */
uint32_t st_stack_capture(void);
/* Interns a given native stack (tests: addresses with no symbols); 0 when
 * the table was never enabled. */
uint32_t st_stack_intern(const uintptr_t *pc, int n);
/* Interns pc[0..n) followed by Python frame records py[0..np) (pystack.c's
 * ids); tests. */
uint32_t st_stack_intern_mixed(const uintptr_t *pc, int n, const uint32_t *py, int np);
/* The return addresses of stack `id`, innermost first; 0 for 0,
 * ST_STACK_DROPPED and unknown ids. */
size_t st_stack_pcs(uint32_t id, const uintptr_t **pc);
/* Its first `max` frames, innermost first: the native ones symbolised
 * (libdw, else dladdr), then the Python ones; the count. */
size_t st_stack_frames(uint32_t id, st_frame_t *out, size_t max);
/* "name (file.c:42)", "name (libx.so+0x1234)", "?? (0x7f00...)", or for a
 * Python frame "name (train.py:42)" (the file's base name; a package's
 * "__init__.py" or "__main__.py" with its directory). */
void st_frame_text(const st_frame_t *f, char *buf, size_t len);
/* The executable segment [*lo, *hi) of the loaded object holding addr;
 * false when no object holds it. */
bool st_exec_segment(uintptr_t addr, uintptr_t *lo, uintptr_t *hi);

/* ------------------------------------------------------------------------
 * pystack.c: Python frames
 * ---------------------------------------------------------------------- */

enum {
    ST_PY_FRAMES_MAX = 1 << 18,  /* distinct (file, function, line) frames kept */
    ST_PY_STRINGS_MAX = 1 << 16, /* distinct file and function names kept */
};

/* Binds to the CPython (3.11 or later) whose C API the process exports,
 * once; true when there is one.  Never loads a library. */
bool st_py_bind(void);
/* pc lies in the interpreter's code (the executable or libpython that
 * defines the C API).  False when not bound. */
bool st_py_in_interpreter(uintptr_t pc);
/* The calling thread's Python frames, innermost first, as frame record
 * ids into py[0..max); the count, 0 when it has none to read (no
 * interpreter, a thread Python does not know, finalization; pystack.c says
 * each case).  Takes the GIL when the thread is known to Python and does
 * not hold it. */
int st_py_capture(uint32_t *py, int max);
/* Frame record `rec` as a Python st_frame_t; false for an unknown id. */
bool st_py_frame(uint32_t rec, st_frame_t *f);
/* Interns a frame (tests); its record id, 0 when not kept. */
uint32_t st_py_intern(const char *file, const char *name, int line);
/* Whether a Python file is library code (an installed package or the
 * standard library): folded in reports.  Then *where is the path from the
 * package's directory on ("numba/cuda/api.py"). */
bool st_py_library(const char *file, const char **where);

/* The live allocations of a layout with one call site. */
typedef struct st_site_group_s {
    uint32_t site;
    size_t count;
    size_t bytes;    /* requested, summed */
    size_t min, max; /* the smallest and largest request */
    uint64_t first;  /* the lowest allocation number */
    uint32_t born;   /* its time (core_block_info_t.born; 0: not stamped) */
} st_site_group_t;

/* The n live allocations of a layout (the caller counted them), in a
 * hostalloc'ed array sorted by cmp; NULL without host memory. */
const core_block_info_t **st_live_blocks(const core_layout_t *l, size_t n, int (*cmp)(const void *, const void *));

/* The live allocations grouped by site, most bytes first (hostalloc'ed
 * into *out, the count returned); 0 and NULL when none has a site (stacks
 * were off) or without host memory. */
size_t st_group_by_site(const core_layout_t *l, st_site_group_t **out);
/* The first `rows` groups, each "N x SIZE = TOTAL[, the first allocation
 * F of ALLOCS], at" and its innermost frames, one a line; then one line for
 * the rest.  `allocs` 0 leaves the first allocation out. */
void st_site_lines(const st_site_group_t *g, size_t ng, size_t rows, uint64_t allocs, st_sink_fn sink, void *ctx);
/* One call site's stack under a line "WHAT, at" (Python frames first, as
 * st_site_lines shows them); a line saying so for a thread without Python
 * frames; nothing when no stack was taken. */
void st_site_stack(uint32_t site, const char *what, st_sink_fn sink, void *ctx);


/* ------------------------------------------------------------------------
 * kept.c: memory kept for the life of the process
 * ---------------------------------------------------------------------- */

/* A library call that allocates device memory it keeps until exit. */
typedef struct st_kept_s {
    const char *module;   /* the object's file name starts with this ("libtorch_cuda.so") */
    const char *function; /* the frame's name holds this; NULL: any frame of the module */
    const char *owner;    /* who keeps it, for the report ("PyTorch") */
    const char *what;     /* what it is and how long it lives */
} st_kept_t;

/* The row a stack's native frames pass through, NULL when none does
 * (Python frames have no module: they match no row). */
const st_kept_t *st_kept_frames(const st_frame_t *f, size_t n);
/* The same for a kept stack's id; *native (when not NULL) says whether the
 * stack has native frames at all (without them nothing can be told). */
const st_kept_t *st_kept_site(uint32_t site, bool *native);

/* ------------------------------------------------------------------------
 * file.c
 * ---------------------------------------------------------------------- */

/* Expands a file name template: %p the process id, %r the rank (RANK,
 * else LOCAL_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID; 0 when
 * none is set), %d the device ordinal (-1 prints "all"), %n `seq`, %% a
 * percent sign.  0, or -1 with err naming the problem (an unknown %
 * sequence, a result longer than len). */
int st_expand_name(const char *tmpl, int device, unsigned seq, char *out, size_t len, char *err, size_t errlen);

/* The JSON file name beside a snapshot: "x.pickle" and "x.pkl" become
 * "x.json", anything else gets ".json" appended.  0 or -1 (too long). */
int st_json_name(const char *path, char *out, size_t len);

/* Writes data to path whole: into a new temporary file in the same
 * directory (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0644 less the umask), fsync,
 * then rename over path.  A reader never sees a partial file; a writer
 * killed half way leaves path as it was.  Refuses when path is a symbolic
 * link.  0, or -1 with err naming the path and the reason (nothing is left
 * behind). */
int st_write_file(const char *path, const void *data, size_t len, char *err, size_t errlen);
/* Opens path for reading, a regular file (its size in *len): the
 * descriptor (O_CLOEXEC), or -1 with "PATH: why" in err. */
int st_open_regular(const char *path, size_t *len, char *err, size_t errlen);

/* Tests only: when set, st_write_file calls it after each chunk (64 KiB)
 * written to the temporary file, with that file's name and the bytes
 * written so far (tests/stats kills a writer half way from here). */
extern void (*st_write_file_test_hook)(const char *tmp_path, size_t written);

#endif
