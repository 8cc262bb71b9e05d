/*
 * RMM logging_resource_adaptor logs as replay inputs.  The log is a CSV
 * with a header row naming at least Thread, Time, Action, Pointer, Size and
 * Stream (in any order; other columns are ignored):
 *
 *   Thread,Time,Action,Pointer,Size,Stream
 *   140573312345856,1634567890.234567,allocate,0x7f8a40000400,2048,0x7f8a38001020
 *
 * Actions: `allocate`, `free` or `deallocate`, and `allocate failure`
 * (RMM's versions spell them differently).  Time is seconds since the epoch
 * with a fraction, or a clock time HH:MM:SS:ffffff / HH:MM:SS.ffffff (older
 * versions).  Pointers and streams are hexadecimal (0x...) or decimal.
 * Rows are replayed in file order: the adaptor writes them under one lock,
 * in the order the calls completed.  Threads get the numbers 1, 2, ... in
 * order of first appearance.  A free is reusable at once on its stream, as
 * in RMM's stream-ordered pools.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "hostalloc.h"
#include "replay.h"
#include "vec.h"

enum { COL_THREAD, COL_TIME, COL_ACTION, COL_POINTER, COL_SIZE, COL_STREAM, NCOLS, MAX_FIELDS = 32 };

static const char *const col_names[NCOLS] = {"Thread", "Time", "Action", "Pointer", "Size", "Stream"};

typedef struct field_s {
    const char *s;
    size_t len;
} field_t;

/* Splits one line (without its newline) at commas; fields are trimmed.
 * Returns the number of fields (MAX_FIELDS + 1 when there are more). */
static size_t split(const char *line, size_t len, field_t *f)
{
    size_t n = 0, start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && line[i] != ',')
            continue;
        if (n == MAX_FIELDS)
            return MAX_FIELDS + 1;
        size_t a = start, b = i;
        while (a < b && isspace((unsigned char)line[a]))
            a++;
        while (b > a && isspace((unsigned char)line[b - 1]))
            b--;
        f[n++] = (field_t){line + a, b - a};
        start = i + 1;
    }
    return n;
}

static bool field_is(const field_t *f, const char *s)
{
    return strlen(s) == f->len && strncasecmp(f->s, s, f->len) == 0;
}

/* An unsigned integer in decimal or 0x-hexadecimal, the whole field. */
static bool field_u64(const field_t *f, uint64_t *out)
{
    const char *s = f->s, *end = f->s + f->len;
    unsigned base = 10;
    if (f->len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        base = 16, s += 2;
    if (s == end)
        return false;
    uint64_t v = 0;
    for (; s < end; s++) {
        unsigned d;
        if (*s >= '0' && *s <= '9')
            d = (unsigned)(*s - '0');
        else if (base == 16 && isxdigit((unsigned char)*s))
            d = (unsigned)(tolower((unsigned char)*s) - 'a' + 10);
        else
            return false;
        if (v > (UINT64_MAX - d) / base)
            return false;
        v = v * base + d;
    }
    *out = v;
    return true;
}

/* Time as nanoseconds: "S.F" (epoch seconds) or "H:M:S:F" / "H:M:S.F". */
static bool field_time(const field_t *f, uint64_t *ns)
{
    uint64_t part[4] = {0};
    unsigned fdigits = 0, np = 0;
    bool frac = false;
    for (size_t i = 0; i < f->len; i++) {
        char c = f->s[i];
        if (c >= '0' && c <= '9') {
            if (part[np] > UINT64_MAX / 20)
                return false;
            if (frac && fdigits == 9)
                continue; /* below a nanosecond */
            part[np] = part[np] * 10 + (uint64_t)(c - '0');
            fdigits += frac;
        } else if ((c == ':' || c == '.') && !frac && np < 3) {
            np++;
            /* the fraction: after '.', or the fourth field of H:M:S:F */
            frac = c == '.' || np == 3;
        } else {
            return false;
        }
    }
    if (!frac && np != 0 && np != 2)
        return false;
    uint64_t whole, fraction = frac ? part[np] : 0;
    if (np >= 2 && (part[0] > 100000000u || part[1] > 100000000u || part[2] > 100000000u))
        return false;
    if (np >= 2)
        whole = part[0] * 3600 + part[1] * 60 + part[2];
    else
        whole = part[0];
    for (; frac && fdigits < 9; fdigits++)
        fraction *= 10;
    if (whole > UINT64_MAX / 1000000000u - 1)
        return false;
    *ns = whole * 1000000000u + fraction;
    return true;
}

typedef struct rimp_s {
    trace_event_t *ev;
    size_t n, cap;
    uint64_t threads[256]; /* thread ids by first appearance */
    unsigned nthreads;
} rimp_t;

static uint32_t thread_number(rimp_t *r, uint64_t id)
{
    for (unsigned i = 0; i < r->nthreads; i++)
        if (r->threads[i] == id)
            return i + 1;
    if (r->nthreads < 256)
        r->threads[r->nthreads++] = id;
    return r->nthreads; /* past 256 threads, the last number is shared */
}

static int row(rimp_t *r, const field_t *f, const int *col, size_t lineno, uint64_t *t0, char *err, size_t errlen)
{
    trace_event_t e = {.api = TRACE_API_IMPORTED, .device = 0};
    const field_t *action = &f[col[COL_ACTION]];
    if (field_is(action, "allocate"))
        e.kind = TRACE_ALLOC;
    else if (field_is(action, "free") || field_is(action, "deallocate"))
        e.kind = TRACE_FREE;
    else if (field_is(action, "allocate failure") || field_is(action, "allocate_failure"))
        e.kind = TRACE_ALLOC_FAIL;
    else {
        snprintf(err, errlen, "line %zu: action '%.*s' (expected allocate, free, deallocate or allocate failure)",
                 lineno, (int)(action->len > 40 ? 40 : action->len), action->s);
        return -1;
    }
    uint64_t thread = 0, time = 0;
    static const char *const what[NCOLS] = {"a thread id", "a time (seconds.fraction or H:M:S:micros)", NULL,
                                            "a pointer", "a size in bytes", "a stream"};
    for (int c = 0; c < NCOLS; c++) {
        const field_t *x = &f[col[c]];
        bool ok = true;
        switch (c) {
        case COL_THREAD: ok = field_u64(x, &thread); break;
        case COL_TIME: ok = field_time(x, &time); break;
        case COL_POINTER: ok = field_u64(x, &e.addr) || (e.kind == TRACE_ALLOC_FAIL); break;
        case COL_SIZE: ok = field_u64(x, &e.size) && e.size <= ((uint64_t)1 << 50); break;
        case COL_STREAM: ok = field_u64(x, &e.stream); break;
        default: break;
        }
        if (!ok) {
            snprintf(err, errlen, "line %zu: %s '%.*s' is not %s", lineno, col_names[c],
                     (int)(x->len > 40 ? 40 : x->len), x->s, what[c]);
            return -1;
        }
    }
    if (e.kind == TRACE_ALLOC_FAIL)
        e.addr = 0;
    if (r->n == 0)
        *t0 = time;
    e.time_ns = time >= *t0 ? time - *t0 : 0;
    e.tid = thread_number(r, thread);
    if (!vec_reserve((void **)&r->ev, &r->cap, r->n + 1, sizeof *r->ev)) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    r->ev[r->n++] = e;
    return 0;
}

int rp_import_rmm(const uint8_t *data, size_t len, rp_input_t *out, char *err, size_t errlen)
{
    rimp_t r = {0};
    int col[NCOLS];
    size_t lineno = 0, nfields = 0;
    uint64_t t0 = 0;
    field_t f[MAX_FIELDS + 1];
    const char *p = (const char *)data, *end = p + len;
    out->format = RP_FORMAT_RMM;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
        const char *line = p;
        p = nl ? nl + 1 : end;
        lineno++;
        if (l && line[l - 1] == '\r')
            l--;
        if (memchr(line, '\0', l)) {
            snprintf(err, errlen, "line %zu: a NUL byte: not a text file", lineno);
            goto fail;
        }
        size_t n = split(line, l, f);
        if (n > MAX_FIELDS) {
            snprintf(err, errlen, "line %zu: more than %d fields", lineno, MAX_FIELDS);
            goto fail;
        }
        if (lineno == 1) {
            for (int c = 0; c < NCOLS; c++) {
                col[c] = -1;
                for (size_t i = 0; i < n; i++)
                    if (field_is(&f[i], col_names[c]))
                        col[c] = (int)i;
                if (col[c] < 0) {
                    snprintf(err, errlen, "line 1: the header has no %s column (an RMM log's header is "
                                          "Thread,Time,Action,Pointer,Size,Stream)",
                             col_names[c]);
                    goto fail;
                }
            }
            nfields = n;
            continue;
        }
        if (l == 0)
            continue;
        if (n != nfields) {
            if (!nl) { /* a last line cut short: the log was still being written */
                rp_note(out, "line %zu is cut short (%zu of %zu fields): ignored", lineno, n, nfields);
                break;
            }
            snprintf(err, errlen, "line %zu: %zu fields, the header has %zu", lineno, n, nfields);
            goto fail;
        }
        if (row(&r, f, col, lineno, &t0, err, errlen) != 0)
            goto fail;
    }
    if (lineno == 0) {
        snprintf(err, errlen, "empty file");
        goto fail;
    }
    out->ev = r.ev;
    out->nev = r.n;
    out->ndevices = 1;
    if (r.nthreads == 256)
        rp_note(out, "more than 256 threads: the later ones share a number");
    return 0;
fail:
    hostalloc_free(r.ev);
    return -1;
}
