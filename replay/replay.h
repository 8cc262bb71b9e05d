/*
 * cucache-replay: what a job asked of the allocator, replayed
 * through the real core on the in-process backend, once per configuration.
 *
 *   input.c        reads a TRACE argument: detects the format and turns it
 *                  into an rp_input_t (cucache trace, PyTorch snapshot, RMM CSV);
 *                  an import as cucache-run would serve it (--preload)
 *   pickle.c       a pickle reader that refuses every global (PyTorch snapshots)
 *   import_torch.c PyTorch snapshot -> rp_input_t (blocks live before the
 *                  recording began, PyTorch's own reserved curve)
 *   import_rmm.c   RMM logging_resource_adaptor CSV -> rp_input_t
 *   engine.c       one replay: rp_input_t x configuration -> rp_result_t,
 *                  event by event through the core or a reference model
 *   backend.c      a replayed device: the core's backend over device.c
 *   live.c         the live allocations by recorded address
 *                  (engine.h: the types these three share)
 *   device.c       the device it replays on: pages and addresses
 *   output.c       the tables and the JSON lines
 *   plot.c         the SVG plot
 *   main.c         the command line
 *
 * The replay tool is an executable: host memory is the C library's, and
 * through core/hostalloc.h (the C library's too in an executable) where an
 * array grows (core/vec.h) or a map holds it (core/hashtab.h).
 * Every reader returns -1 with an error naming the problem and, where the
 * input is binary or textual, its byte offset or line.
 */
#ifndef CUCACHE_REPLAY_H
#define CUCACHE_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "conf.h"
#include "core.h"  /* core_dev_t, core_oom_t: the tests' OOM hook */
#include "trace.h" /* stats/trace.h: trace_event_t, the kinds and apis */

/* ------------------------------------------------------------------------
 * Inputs
 * ---------------------------------------------------------------------- */

typedef enum rp_format_e {
    RP_FORMAT_CUCACHE = 1, /* a CUCACHE_TRACE file */
    RP_FORMAT_TORCH = 2,   /* a torch.cuda.memory._dump_snapshot pickle */
    RP_FORMAT_RMM = 3,     /* an RMM logging_resource_adaptor CSV */
} rp_format_t;

/* What a replay needs, whatever the format.  Events are in replay order.
 * Allocations are TRACE_ALLOC (addr = the address the job got, which the
 * replay only uses to match the free), frees TRACE_FREE; the other kinds
 * are those of stats/trace.h.  api says how a free is to be treated:
 * TRACE_API_IMPORTED frees are reusable at once on their stream (PyTorch's
 * free_completed, RMM's deallocate); the interposer's apis are treated as
 * the interposer treats them (cudaFree pends behind the fence, a
 * stream-ordered free behind an event on its stream). */
typedef struct rp_input_s {
    char *name;         /* the file name as given */
    rp_format_t format;
    trace_event_t *ev;  /* hostalloc'ed (rp_input_free) */
    size_t nev;
    size_t nprelude;    /* ev[0 .. nprelude) are allocations already live when
                         * the recording began (imports), replayed first */
    /* PyTorch snapshots: PyTorch's own reserved bytes after each event
     * (ref_reserved[i] after ev[i]); NULL for other formats. */
    uint64_t *ref_reserved;
    uint64_t ref_peak_reserved;
    size_t ref_segments_final; /* segments in the snapshot's final list */
    /* What the reader noticed, for the table's header (NUL-terminated, may
     * be empty): "truncated at offset 4160 (a crash?): 102 whole records
     * kept", "12 frees of blocks never seen", ... */
    char notes[512];
    int ndevices;       /* 1 + the highest device ordinal seen (at least 1) */
    /* What the recorded run saw.  Every format: the out-of-memory failures
     * the job saw (ALLOC_FAIL events; a cucache trace's of error 2 only).
     * Cucache traces of version 2 also carry the settings, each device's
     * memory at cucache's first use, and the allocations the runtime's own
     * allocator served after cucache's path failed. */
    uint64_t recorded_ooms;
    uint64_t recorded_fallbacks; /* TRACE_REC_FALLBACK allocations */
    bool recorded_settings;      /* recorded_conf holds the run's CUCACHE_CONF, whole */
    bool streams_unknown;        /* a cucache trace before version 3: its stream records do not say which
                                  * streams cucache counted (TRACE_REC_COUNTED) */
    bool default_counted;        /* a cucache trace before version 5: the recording cucache counted the legacy
                                  * default stream with the program's first stream (no TRACE_DEFAULT_BUSY) */
    char recorded_conf[1024];    /* "" when it was unset */
    uint64_t recorded_free[64];  /* per device: free bytes at cucache's first use; 0 when not recorded */
    uint64_t recorded_total[64]; /* ... and its total bytes */
} rp_input_t;

/* Reads `path`, detecting its format from its first bytes: "CUCTRACE" is a
 * cucache trace, a pickle opcode 0x80 (PROTO) a PyTorch snapshot, a line
 * starting with "Thread," an RMM CSV.  0, or -1 with err set. */
int rp_input_load(const char *path, rp_input_t *out, char *err, size_t errlen);
/* The same from memory (the fuzzer's entry); name is copied. */
int rp_input_parse(const char *name, const uint8_t *data, size_t len, rp_input_t *out, char *err, size_t errlen);
void rp_input_free(rp_input_t *in);
const char *rp_format_name(rp_format_t f); /* "cucache trace", "PyTorch snapshot", "RMM log" */

/* The importers (from memory).  Same contract as rp_input_parse. */
int rp_import_torch(const uint8_t *data, size_t len, rp_input_t *out, char *err, size_t errlen);
int rp_import_rmm(const uint8_t *data, size_t len, rp_input_t *out, char *err, size_t errlen);
/* A parsed cucache trace (trace_parse) as an input; takes the events. */
int rp_input_from_trace(trace_t *t, rp_input_t *out, char *err, size_t errlen);

/* Whether an event is a request the recorded run failed for want of
 * memory: every ALLOC_FAIL of an import (PyTorch's oom, RMM's allocate
 * failure), a cucache trace's of error 2 only (its other errors: an
 * invalid argument, a call refused during a capture).  These are the run's
 * OOMs (recorded_ooms) and the failed requests every column of a replay
 * asks again at their moment (the references too); the others are asked
 * in none. */
bool rp_failed_for_memory(const rp_input_t *in, const trace_event_t *e);

/* An import as the job would ask cucache under cucache-run, the framework's
 * cache off: each allocation a cudaMalloc, each free a cudaFree, treated as
 * the interposer treats them (the reuse rule, fences), where the import's
 * frees are reusable at once (the framework's own cache).  The number of
 * events changed: 0 for a cucache trace, which records the calls themselves. */
size_t rp_input_as_preload(rp_input_t *in);

/* Appends to in->notes (as "; "-separated items, truncated when full). */
void rp_note(rp_input_t *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------
 * The replay
 * ---------------------------------------------------------------------- */

typedef enum rp_mode_e {
    RP_MODE_CORE,    /* through the core with a configuration */
    RP_MODE_NOCACHE, /* every allocation straight from the device */
    RP_MODE_FLOOR,   /* the live allocations alone, each rounded to 512 bytes: the lower bound (a
                      * request the run failed for memory counts at its moment, as in every column) */
} rp_mode_t;

typedef struct rp_config_s {
    const char *label; /* column title: the --conf text, "default", "no cache", "floor" */
    rp_mode_t mode;
    conf_t conf;       /* RP_MODE_CORE */
    const char *conf_text;
} rp_config_t;

/* The timeline the plot draws: per bucket of consecutive events, the
 * highest allocated and reserved bytes seen in it (summed over devices). */
typedef struct rp_curve_s {
    size_t nbuckets;
    size_t events_per_bucket; /* the last bucket may hold fewer */
    uint64_t *allocated, *reserved; /* malloc'ed, nbuckets each */
} rp_curve_t;

typedef struct rp_result_s {
    /* peaks of the sum over devices, bytes */
    uint64_t peak_allocated;
    uint64_t peak_reserved;
    uint64_t peak_requested;  /* live requested bytes, unrounded */
    double utilization;       /* peak_allocated / peak_reserved (1 when both 0) */
    double frag_at_peak;      /* at the event of peak reserved: 1 - largest free block / free bytes (0 when none free) */
    uint64_t free_at_peak;    /* reserved - allocated at that event */
    size_t peak_event;        /* index of the event of peak reserved */
    uint64_t device_allocs, device_frees;
    /* expandable segments: calls of the virtual memory API the replay made
     * (one map call: a create, map and release per page, one set access;
     * one unmap call: one unmap) */
    uint64_t vmm_map_calls, vmm_map_pages, vmm_unmap_calls, vmm_unmap_bytes, vmm_reserves;
    uint64_t vmm_alias_calls; /* pages mapped a second time (expandable_share_pages) */
    uint64_t allocs, hits;    /* allocations replayed, and those served from the cache */
    uint64_t ooms;            /* allocations that failed at the capacity (the job would have seen them) */
    uint64_t fallbacks;       /* cudaMalloc calls cucache's core failed and the runtime's allocator served
                               * (opts->fallback): no OOM, but uncached memory */
    long long first_oom_event; /* its event index, -1 when none */
    uint64_t first_oom_size;
    uint64_t first_oom_time_ns;
    bool reserved_covers;      /* reserved >= allocated held at every change, on every device */
    bool stats_agree;          /* the peaks followed here equal the core's own statistics, per device */
    uint64_t skipped;          /* events the replay could not apply (frees of failed or unknown allocations) */
    uint64_t events;           /* events replayed */
    double seconds;            /* wall time of the replay loop */
    /* per device (the core's own allocated_bytes/reserved_bytes peaks) */
    uint64_t dev_peak_allocated[64], dev_peak_reserved[64];
    uint64_t dev_ooms[64], dev_fallbacks[64];
    rp_curve_t curve;          /* when requested */
} rp_result_t;

/* The device a replay runs on (device.c): memory counted in 2 MiB pages,
 * wherever they lie, as the simulated device and a GPU count it; addresses
 * first fit from a range eight times the capacity; requests up to 1 MiB
 * packed at 512 bytes into pages of their own. */
typedef struct rp_extent_s rp_extent_t;
typedef struct rp_smallpage_s rp_smallpage_t;
typedef struct rp_space_s {
    uint64_t base, span;        /* the device's addresses: [base, base + span) */
    uint64_t capacity;          /* bytes, a whole number of pages */
    uint64_t pages, pages_used; /* pages in all, and charged */
    rp_extent_t *ext;           /* free addresses, sorted, merged */
    size_t next, cap_ext;
    rp_smallpage_t *small;      /* pages of small requests, by address */
    size_t nsmall, cap_small;
} rp_space_t;

/* 0, or -1 when out of host memory. */
int rp_space_init(rp_space_t *s, int device, uint64_t capacity);
void rp_space_fini(rp_space_t *s);
/* CORE_OK with *addr, CORE_ENOMEM (too few free pages), CORE_EFAIL. */
int rp_space_alloc(rp_space_t *s, uint64_t size, uint64_t *addr);
void rp_space_free(rp_space_t *s, uint64_t addr, uint64_t size);
/* The free pages' bytes (cuMemGetInfo's free). */
uint64_t rp_space_free_bytes(const rp_space_t *s);
/* Virtual memory: pages charged for a mapping of `size` bytes (a multiple
 * of 2 MiB), anywhere; CORE_OK or CORE_ENOMEM.  And given back. */
int rp_space_map(rp_space_t *s, uint64_t size);
void rp_space_unmap(rp_space_t *s, uint64_t size);

typedef struct rp_opts_s {
    uint64_t capacity;  /* bytes per device (default 80 GiB) */
    /* false (idle): every marker the replay records (a fence, an event on a
     * stream) has completed when queried, as on a GPU whose kernels have
     * finished: frees are reusable at the first poll (a lower bound for
     * a rule that fences).  true (busy): a marker completes only at the job's
     * next synchronisation of its device, stream or event, or when the
     * allocator itself waits for it (an upper bound). */
    bool busy;
    /* Per device (64 entries; 0: use capacity), or NULL: a cucache trace's
     * recorded memory at cucache's first use of each device. */
    const uint64_t *dev_capacity;
    /* Model the interposer's last resort: a cudaMalloc or cudaMallocAsync
     * the core cannot serve (not at a limit, not during a capture) goes to
     * the CUDA runtime's own allocator, which takes exactly the request from
     * the device's free pages; counted in fallbacks, not in ooms. */
    bool fallback;
    /* Why this device model, for the table and JSON (NULL: none given). */
    const char *model_note;
    /* Tests: each device keeps `history` allocator calls (core_set_history)
     * and at the replay's first OOM on_oom is called with that device and
     * the failure, as the interposer's report is (tests/replay/
     * test_whatif_traces.c runs the what-if there). */
    size_t history;
    void (*on_oom)(void *ctx, core_dev_t *d, const core_oom_t *oom);
    void *on_oom_ctx;
    size_t curve_buckets; /* 0: no curve */
    /* called every 2^20 events with (done, total): a progress bar */
    void (*progress)(void *ctx, size_t done, size_t total);
    void *progress_ctx;
} rp_opts_t;

/* Replays `in` under `cfg`.  0, or -1 with err set (host memory, a
 * configuration the core refused).  Deterministic: the same input and
 * configuration give the same result, bit for bit, apart from seconds. */
int rp_replay(const rp_input_t *in, const rp_config_t *cfg, const rp_opts_t *opts, rp_result_t *res, char *err,
              size_t errlen);
void rp_result_free(rp_result_t *res);

/* ------------------------------------------------------------------------
 * Output
 * ---------------------------------------------------------------------- */

/* The table for one input: one column per configuration. */
void rp_print_table(FILE *out, const rp_input_t *in, const rp_config_t *cfgs, const rp_result_t *res, size_t n,
                    const rp_opts_t *opts);
/* The input's events as text, one per line (--dump): index, time, thread,
 * device, kind, api, stream, address, size, and PyTorch's reserved bytes
 * after the event when known. */
void rp_print_events(FILE *out, const rp_input_t *in);
/* One JSON object on one line for one input and configuration. */
void rp_print_json(FILE *out, const rp_input_t *in, const rp_config_t *cfg, const rp_result_t *res,
                   const rp_opts_t *opts);

/* The plot: one panel per input, stacked; in each, per configuration its
 * reserved bytes (solid) and allocated bytes (dashed) over the event
 * timeline in one colour, PyTorch's reserved curve when known (black,
 * dotted), axes with units and a legend. */
typedef struct rp_plot_panel_s {
    const char *title;        /* the input's name */
    size_t nevents;
    const rp_config_t *cfgs;  /* n configurations ... */
    const rp_result_t *res;   /* ... and their results, each with a curve */
    size_t n;
    const rp_curve_t *ref;    /* PyTorch's reserved (its .reserved), or NULL */
} rp_plot_panel_t;

/* Writes the SVG to path (whole or not at all: st_write_file).  0, or -1
 * with err set. */
int rp_plot_svg(const char *path, const rp_plot_panel_t *panels, size_t npanels, char *err, size_t errlen);
/* The SVG text itself, NUL-terminated (*len without the NUL), for
 * hostalloc_free; NULL when out of memory. */
char *rp_plot_render(const rp_plot_panel_t *panels, size_t npanels, size_t *len);

#endif
