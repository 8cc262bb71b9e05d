/*
 * Reading a cucache trace (stats/trace.h; docs/trace-format.md): checks the
 * header and every chunk, keeps the whole records of a file cut short,
 * converts the recorder's ticks to nanoseconds since the start, and orders
 * the events by (time, thread, position in the thread).
 *
 * The input is untrusted (a file from anywhere; the reader is fuzzed by
 * tests/stats/fuzz_trace.c): every count is checked against the bytes
 * actually present before anything is allocated for it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostalloc.h"
#include "st.h"
#include "trace.h"
#include "vec.h"

static void errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

const char *trace_kind_name(unsigned kind)
{
    static const char *const names[] = {
        "?",           "alloc",      "alloc_fail",    "free",           "stream_sync",
        "device_sync", "event_sync", "stream_create", "stream_destroy", "capture_begin",
        "capture_end", "device",     "conf",          "no_hand_outs",   "default_busy",
    };
    _Static_assert(sizeof names / sizeof names[0] == TRACE_KIND_MAX + 1, "a name for every kind");
    return kind <= TRACE_KIND_MAX ? names[kind] : "?";
}

const char *trace_api_name(unsigned api)
{
    static const char *const names[] = {
        "-", "cudaMalloc", "cudaMallocAsync", "cuMemAlloc", "cuMemAllocAsync", "imported",
    };
    return api <= TRACE_API_MAX ? names[api] : "?";
}

/* ------------------------------------------------------------------------
 * Clock conversion: (ticks, ns) calibration points, piecewise linear
 * ---------------------------------------------------------------------- */

typedef struct calib_s {
    uint64_t ticks, ns;
} calib_t;

static int calib_cmp(const void *a, const void *b)
{
    const calib_t *x = a, *y = b;
    return x->ticks < y->ticks ? -1 : x->ticks > y->ticks;
}

/* ns since the start for t ticks, from the points p[0..n) sorted by ticks
 * (n >= 1; p holds the header's point).  Never overflows: long double. */
static uint64_t to_ns(const calib_t *p, size_t n, uint64_t start_ns, uint64_t t)
{
    size_t lo = 0, hi = n; /* the first point with ticks > t */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p[mid].ticks <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    const calib_t *a, *b;
    if (n == 1) {
        a = b = &p[0];
    } else if (lo == 0) {
        a = &p[0], b = &p[1];
    } else if (lo >= n) {
        a = &p[n - 2], b = &p[n - 1];
    } else {
        a = &p[lo - 1], b = &p[lo];
    }
    long double slope = 1.0L;
    if (b->ticks > a->ticks)
        slope = ((long double)b->ns - (long double)a->ns) / ((long double)b->ticks - (long double)a->ticks);
    long double ns = (long double)a->ns + ((long double)t - (long double)a->ticks) * slope - (long double)start_ns;
    if (!(ns > 0.0L)) /* negative, or NaN */
        return 0;
    if (ns >= 1.8e19L)
        return UINT64_MAX;
    return (uint64_t)ns;
}

/* ------------------------------------------------------------------------
 * Parsing
 * ---------------------------------------------------------------------- */

/* A record as read, before conversion: its position keeps the order of
 * its thread. */
typedef struct raw_s {
    trace_event_t ev;
    uint64_t ticks;
    uint64_t seq; /* position in the file */
} raw_t;

static int raw_cmp(const void *a, const void *b)
{
    const raw_t *x = a, *y = b;
    if (x->ev.time_ns != y->ev.time_ns)
        return x->ev.time_ns < y->ev.time_ns ? -1 : 1;
    if (x->ev.tid != y->ev.tid)
        return x->ev.tid < y->ev.tid ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int trace_parse(const void *data, size_t len, trace_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const unsigned char *d = data;
    if (len < TRACE_HEADER_SIZE) {
        errf(err, errlen, "offset 0: %zu bytes, shorter than the %d-byte header", len, TRACE_HEADER_SIZE);
        return -1;
    }
    trace_header_t h;
    memcpy(&h, d, sizeof h);
    if (memcmp(h.magic, TRACE_MAGIC, sizeof h.magic) != 0) {
        errf(err, errlen, "offset 0: not a cucache trace (the file does not start with \"%s\")", TRACE_MAGIC);
        return -1;
    }
    if (h.version < 1 || h.version > TRACE_VERSION) {
        errf(err, errlen, "offset 8: trace format version %u; this reader reads versions 1 to %d", h.version,
             TRACE_VERSION);
        return -1;
    }
    if (h.header_size != TRACE_HEADER_SIZE || h.chunk_size != TRACE_CHUNK_SIZE || h.rec_size != TRACE_REC_SIZE) {
        errf(err, errlen, "offset 10: sizes %u/%u/%u (header/chunk/record), expected %d/%d/%d", h.header_size,
             h.chunk_size, h.rec_size, TRACE_HEADER_SIZE, TRACE_CHUNK_SIZE, TRACE_REC_SIZE);
        return -1;
    }
    out->header = h;

    raw_t *raw = NULL;
    calib_t *cal = NULL;
    uint32_t *tids = NULL;
    size_t nraw = 0, raw_cap = 0, ncal = 0, cal_cap = 0, ntids = 0, tid_cap = 0;
    if (!vec_reserve((void **)&cal, &cal_cap, 1, sizeof *cal))
        goto oom;
    cal[ncal++] = (calib_t){h.start_ticks, h.start_ns};

    size_t off = TRACE_HEADER_SIZE;
    while (off < len) {
        if (len - off < TRACE_CHUNK_SIZE) {
            out->truncated = true;
            break;
        }
        trace_chunk_t c;
        memcpy(&c, d + off, sizeof c);
        if (c.magic != TRACE_CHUNK_MAGIC) {
            errf(err, errlen, "offset %zu: chunk %zu has magic 0x%08x, expected 0x%08x (\"CHNK\")", off, out->nchunks,
                 c.magic, TRACE_CHUNK_MAGIC);
            goto fail;
        }
        if (c.nrecords > TRACE_CHUNK_MAX_RECORDS) {
            errf(err, errlen, "offset %zu: chunk %zu claims %u records, more than the %d a chunk may hold", off + 4,
                 out->nchunks, c.nrecords, TRACE_CHUNK_MAX_RECORDS);
            goto fail;
        }
        size_t rec_off = off + TRACE_CHUNK_SIZE;
        size_t whole = (len - rec_off) / TRACE_REC_SIZE;
        size_t n = c.nrecords;
        bool cut = whole < n;
        if (cut)
            n = whole;
        if (!vec_reserve((void **)&raw, &raw_cap, nraw + n, sizeof *raw))
            goto oom;
        for (size_t i = 0; i < n; i++) {
            size_t at = rec_off + i * TRACE_REC_SIZE;
            trace_rec_t r;
            memcpy(&r, d + at, sizeof r);
            unsigned kind_max = h.version == 1   ? TRACE_CAPTURE_END
                                : h.version < 4 ? TRACE_CONF
                                : h.version < 5 ? TRACE_NO_HAND_OUTS
                                                : TRACE_KIND_MAX;
            if (r.kind < 1 || r.kind > kind_max) {
                errf(err, errlen, "offset %zu: record %zu of chunk %zu has kind %u, expected 1 to %u (version %u)", at,
                     i, out->nchunks, r.kind, kind_max, h.version);
                goto fail;
            }
            if (h.version == 1)
                r.flags = 0; /* reserved there */
            if (r.api > TRACE_API_MAX) {
                errf(err, errlen, "offset %zu: record %zu of chunk %zu has api %u, expected 0 to %d", at + 1, i,
                     out->nchunks, r.api, TRACE_API_MAX);
                goto fail;
            }
            raw[nraw] = (raw_t){
                .ev = {.tid = c.tid,
                       .kind = r.kind,
                       .api = r.api,
                       .device = r.device,
                       .flags = r.flags,
                       .stream = r.stream,
                       .addr = r.addr,
                       .size = r.size},
                .ticks = r.ticks,
                .seq = nraw,
            };
            nraw++;
        }
        if (!vec_reserve((void **)&tids, &tid_cap, ntids + 1, sizeof *tids))
            goto oom;
        tids[ntids++] = c.tid;
        out->nchunks++;
        if (cut) {
            out->truncated = true;
            off = rec_off + n * TRACE_REC_SIZE;
            break;
        }
        /* a whole chunk: its calibration point counts */
        if (!vec_reserve((void **)&cal, &cal_cap, ncal + 1, sizeof *cal))
            goto oom;
        cal[ncal++] = (calib_t){c.ticks, c.ns};
        off = rec_off + n * TRACE_REC_SIZE;
    }
    out->truncated_at = out->truncated ? off : len;
    if (off > len) /* cannot happen: every step stays inside */
        out->truncated_at = len;

    /* ticks -> ns since the start */
    qsort(cal, ncal, sizeof *cal, calib_cmp);
    bool tsc = (h.flags & TRACE_FLAG_TSC) != 0;
    for (size_t i = 0; i < nraw; i++) {
        if (!tsc)
            raw[i].ev.time_ns = raw[i].ticks > h.start_ticks ? raw[i].ticks - h.start_ticks : 0;
        else
            raw[i].ev.time_ns = to_ns(cal, ncal, h.start_ns, raw[i].ticks);
    }
    if (nraw) /* qsort's array must not be NULL, even for 0 elements */
        qsort(raw, nraw, sizeof *raw, raw_cmp);

    if (nraw) {
        out->events = hostalloc_malloc(nraw * sizeof *out->events);
        if (!out->events)
            goto oom;
        for (size_t i = 0; i < nraw; i++)
            out->events[i] = raw[i].ev;
    }
    out->nevents = nraw;
    if (ntids)
        qsort(tids, ntids, sizeof *tids, u32_cmp);
    for (size_t i = 0; i < ntids; i++)
        if (i == 0 || tids[i] != tids[i - 1])
            out->nthreads++;
    hostalloc_free(raw);
    hostalloc_free(cal);
    hostalloc_free(tids);
    return 0;

oom:
    errf(err, errlen, "out of host memory reading the trace");
fail:
    hostalloc_free(raw);
    hostalloc_free(cal);
    hostalloc_free(tids);
    memset(out, 0, sizeof *out);
    return -1;
}

int trace_load(const char *path, trace_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    size_t len = 0, got = 0;
    int fd = st_open_regular(path, &len, err, errlen);
    if (fd < 0)
        return -1;
    unsigned char *buf = hostalloc_malloc(len ? len : 1);
    if (!buf) {
        errf(err, errlen, "%s: out of host memory for %zu bytes", path, len);
        close(fd);
        return -1;
    }
    while (got < len) {
        ssize_t k = read(fd, buf + got, len - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            errf(err, errlen, "%s: %s", path, strerror(errno));
            hostalloc_free(buf);
            close(fd);
            return -1;
        }
        if (k == 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    char why[400];
    int rc = trace_parse(buf, got, out, why, sizeof why);
    if (rc != 0)
        errf(err, errlen, "%s: %s", path, why);
    hostalloc_free(buf);
    return rc;
}

void trace_free(trace_t *t)
{
    hostalloc_free(t->events);
    memset(t, 0, sizeof *t);
}
