/*
 * The cucache trace format: what CUCACHE_TRACE records and what
 * cucache-replay reads.  docs/trace-format.md is the reference for people;
 * this header is the reference for code.  Everything is little-endian.
 *
 *   file    = header chunk*
 *   header  = 64 bytes (trace_header_t)
 *   chunk   = chunk header (32 bytes, trace_chunk_t) + nrecords records
 *   record  = 40 bytes (trace_rec_t)
 *
 * Each recording thread fills a buffer of its own and appends it as one
 * chunk with one write(2) (O_APPEND), so chunks of different threads
 * interleave in the file and records of one thread stay in order.  Records
 * carry a timestamp in ticks of the recorder's clock (the TSC on x86-64,
 * else CLOCK_MONOTONIC nanoseconds); the header and every chunk header carry
 * a (ticks, nanoseconds) pair, from which a reader converts ticks to
 * nanoseconds since the start of the recording by linear interpolation.
 * Readers order records by (time, thread, position in the thread): a free
 * is stamped before the allocator releases the block, an allocation after
 * it returns, so a block's free always sorts before the allocation that
 * reuses it, whichever threads made them.
 *
 * A file cut short (a crash) ends inside a chunk: a reader keeps every whole
 * record before the cut and says where the cut is.
 */
#ifndef CUCACHE_STATS_TRACE_H
#define CUCACHE_STATS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRACE_MAGIC "CUCTRACE"  /* 8 bytes, no terminator in the file */
#define TRACE_CHUNK_MAGIC 0x4B4E4843u /* "CHNK" */
#define TRACE_VERSION 5 /* 1: no TRACE_DEVICE, TRACE_CONF or flags; 2: no TRACE_REC_COUNTED; 3: no \
                         * TRACE_NO_HAND_OUTS; 4: no TRACE_DEFAULT_BUSY, the legacy stream counted with \
                         * the first stream (all still read) */

enum {
    TRACE_HEADER_SIZE = 64,
    TRACE_CHUNK_SIZE = 32,
    TRACE_REC_SIZE = 40,
    TRACE_CHUNK_MAX_RECORDS = 1 << 20, /* a reader refuses more in one chunk */
};

/* Record kinds. */
typedef enum trace_kind_e {
    TRACE_ALLOC = 1,          /* addr = result, size = requested bytes, stream (0: not stream-ordered) */
    TRACE_ALLOC_FAIL = 2,     /* size = requested bytes; addr = the error code returned */
    TRACE_FREE = 3,           /* addr = pointer, stream (0: not stream-ordered) */
    TRACE_STREAM_SYNC = 4,    /* stream */
    TRACE_DEVICE_SYNC = 5,    /* the device (context) */
    TRACE_EVENT_SYNC = 6,     /* addr = the event handle */
    TRACE_STREAM_CREATE = 7,  /* stream; size = flags */
    TRACE_STREAM_DESTROY = 8, /* stream */
    TRACE_CAPTURE_BEGIN = 9,  /* stream; size = capture mode */
    TRACE_CAPTURE_END = 10,   /* stream */
    /* version 2: what the recorded run was, for a replay that agrees with it */
    TRACE_DEVICE = 11, /* cucache's first use of the device: addr = its free bytes then, size = its total bytes */
    TRACE_CONF = 12,   /* a piece of the run's CUCACHE_CONF text: its bytes at offset `flags` (less
                        * TRACE_CONF_LAST), 24 at most, in stream, addr, size (little-endian byte order,
                        * NUL-padded); device -1.  Written once, at the start, as consecutive records of one
                        * thread, the last with TRACE_CONF_LAST; one empty piece when unset */
    /* version 4 */
    TRACE_NO_HAND_OUTS = 13, /* the device stopped handing out frees behind fences for good (a rule that hands out; a second
                              * CUDA context appeared in the process, or the CPU reads device memory coherently) */
    /* version 5 */
    TRACE_DEFAULT_BUSY = 14, /* stream (CU_STREAM_LEGACY); flags TRACE_REC_COUNTED: the program's work was seen on
                              * the legacy default stream beside a stream of its own, counted from here on as one */
    TRACE_KIND_MAX = 14,
} trace_kind_t;

/* trace_rec_t.flags of an ALLOC (version 2). */
enum {
    TRACE_REC_FALLBACK = 1, /* cucache's own path failed and the CUDA runtime's (or driver's) allocator served it */
};

/* trace_rec_t.flags of a STREAM_CREATE / STREAM_DESTROY (version 3) and a DEFAULT_BUSY. */
enum {
    TRACE_REC_COUNTED = 2, /* a stream of the device's primary context (the record's device), which cucache
                            * counts: while the device has fewer than two, a hit under a rule that hands out takes
                            * any frees behind fences, else only a share (a replay needs the count to agree) */
};

/* trace_rec_t.flags of a CONF piece: the text's last piece (the rest of
 * flags is the piece's byte offset). */
#define TRACE_CONF_LAST 0x80000000u

/* Which API made an ALLOC / ALLOC_FAIL / FREE record. */
typedef enum trace_api_e {
    TRACE_API_NONE = 0,
    TRACE_API_CUDA_MALLOC = 1,       /* cudaMalloc / cudaFree */
    TRACE_API_CUDA_MALLOC_ASYNC = 2, /* cudaMallocAsync / cudaFreeAsync (+_ptsz) */
    TRACE_API_CU_MEM_ALLOC = 3,      /* cuMemAlloc_v2 / cuMemFree_v2 */
    TRACE_API_CU_MEM_ALLOC_ASYNC = 4, /* cuMemAllocAsync / cuMemFreeAsync (+_ptsz) */
    TRACE_API_IMPORTED = 5,          /* from another format (an importer) */
    TRACE_API_MAX = 5,
} trace_api_t;

/* The file header. */
typedef struct trace_header_s {
    char magic[8];         /* TRACE_MAGIC */
    uint16_t version;      /* TRACE_VERSION */
    uint16_t header_size;  /* TRACE_HEADER_SIZE */
    uint16_t chunk_size;   /* TRACE_CHUNK_SIZE */
    uint16_t rec_size;     /* TRACE_REC_SIZE */
    uint64_t start_ticks;  /* the clock at the start */
    uint64_t start_ns;     /* CLOCK_MONOTONIC at the start */
    uint64_t start_unix_ns; /* CLOCK_REALTIME at the start (for people) */
    uint32_t pid;
    uint32_t flags; /* TRACE_FLAG_* */
    uint8_t reserved[16];
} trace_header_t;

enum {
    TRACE_FLAG_TSC = 1, /* ticks are TSC cycles; else nanoseconds */
};

/* A chunk: nrecords records of one thread follow. */
typedef struct trace_chunk_s {
    uint32_t magic;    /* TRACE_CHUNK_MAGIC */
    uint32_t nrecords;
    uint32_t tid;      /* the recording thread's number (1, 2, ...; never reused) */
    uint32_t reserved;
    uint64_t ticks;    /* the clock when the chunk was written */
    uint64_t ns;       /* CLOCK_MONOTONIC at the same moment */
} trace_chunk_t;

typedef struct trace_rec_s {
    uint8_t kind;    /* trace_kind_t */
    uint8_t api;     /* trace_api_t */
    int16_t device;  /* CUDA ordinal; -1 when unknown */
    uint32_t flags;  /* TRACE_REC_* (ALLOC), the byte offset (CONF); 0 in version 1 */
    uint64_t ticks;  /* when */
    uint64_t stream; /* the stream handle (0: none / the legacy default stream for syncs) */
    uint64_t addr;
    uint64_t size;
} trace_rec_t;

_Static_assert(sizeof(trace_header_t) == TRACE_HEADER_SIZE, "trace header layout");
_Static_assert(sizeof(trace_chunk_t) == TRACE_CHUNK_SIZE, "trace chunk layout");
_Static_assert(sizeof(trace_rec_t) == TRACE_REC_SIZE, "trace record layout");

/* ------------------------------------------------------------------------
 * Reading (stats/trace_read.c)
 * ---------------------------------------------------------------------- */

/* One event as a reader gives it: a record with its thread and its time in
 * nanoseconds since the start of the recording. */
typedef struct trace_event_s {
    uint64_t time_ns;
    uint32_t tid;
    uint8_t kind, api;
    int16_t device;
    uint32_t flags;
    uint64_t stream, addr, size;
} trace_event_t;

typedef struct trace_s {
    trace_header_t header;
    trace_event_t *events; /* ordered by (time_ns, tid, position in the thread) */
    size_t nevents;
    size_t nchunks;
    uint32_t nthreads;
    bool truncated;           /* the file ends inside a chunk */
    uint64_t truncated_at;    /* byte offset where the last whole record ends */
    uint64_t dropped_records; /* records the recorder reported it could not write (0 in v1) */
} trace_t;

/* Reads a whole trace from memory.  0, or -1 with err naming the problem
 * and its byte offset ("offset 4160: chunk 3 has magic 0x..., expected
 * CHNK"); a cut-short file is not an error (truncated is set).  The events
 * are hostalloc'ed: trace_free. */
int trace_parse(const void *data, size_t len, trace_t *out, char *err, size_t errlen);
/* trace_parse on a file. */
int trace_load(const char *path, trace_t *out, char *err, size_t errlen);
void trace_free(trace_t *t);
const char *trace_kind_name(unsigned kind); /* "alloc", ...; "?" when unknown */
const char *trace_api_name(unsigned api);

#endif
