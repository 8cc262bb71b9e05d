/*
 * Snapshots in the schema of torch.cuda.memory._snapshot(), as a pickle
 * (what torch.cuda.memory._dump_snapshot writes, so PyTorch's viewers load
 * it) and as JSON.
 *
 * One walk over the snapshot (snap_emit) drives one emitter with two
 * output formats, so the pickle and the JSON cannot disagree: the walk
 * says "a dict", "the key address", "an unsigned integer", and the emitter
 * writes the pickle opcodes or the JSON text for it.
 *
 * The pickle uses protocol 2 opcodes only, and no global (no class, no
 * reduce), so that it loads with every global refused; no memo either,
 * since nothing is shared.  Python's unpickler accepts any number of items
 * between MARK and SETITEMS/APPENDS.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostalloc.h"
#include "st.h"
#include "vec.h"

/* ------------------------------------------------------------------------
 * The byte buffer
 * ---------------------------------------------------------------------- */

void st_buf_free(st_buf_t *b)
{
    hostalloc_free(b->data);
    memset(b, 0, sizeof *b);
}

/* Room for n more bytes; false (and b->failed) when there is none. */
static bool buf_reserve(st_buf_t *b, size_t n)
{
    if (!b->failed && (n > SIZE_MAX - b->len || !vec_reserve((void **)&b->data, &b->cap, b->len + n, 1)))
        b->failed = true;
    return !b->failed;
}

void st_buf_put(st_buf_t *b, const void *data, size_t n)
{
    if (n == 0 || !buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, data, n);
    b->len += n;
}

static void buf_byte(st_buf_t *b, unsigned char c)
{
    st_buf_put(b, &c, 1);
}

static void buf_str(st_buf_t *b, const char *s)
{
    st_buf_put(b, s, strlen(s));
}

/* ------------------------------------------------------------------------
 * Text as valid UTF-8
 *
 * Pickle strings and JSON must be UTF-8; conf_text is what the user wrote
 * and may not be.  A byte that does not start a well-formed sequence reads
 * as U+FFFD.
 * ---------------------------------------------------------------------- */

/* The length of the well-formed UTF-8 sequence at s (1 to 4), or 0. */
static size_t utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        return (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        unsigned char lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf; /* no overlong, no surrogate */
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        unsigned char lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf; /* no overlong, <= U+10FFFF */
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 && (s[3] & 0xc0) == 0x80 ? 4 : 0;
    }
    return 0;
}

static const char utf8_replacement[] = "\xef\xbf\xbd"; /* U+FFFD */

/* ------------------------------------------------------------------------
 * The emitter: pickle opcodes or JSON text
 * ---------------------------------------------------------------------- */

enum {
    PK_PROTO = 0x80,
    PK_STOP = '.',
    PK_MARK = '(',
    PK_EMPTY_DICT = '}',
    PK_SETITEMS = 'u',
    PK_EMPTY_LIST = ']',
    PK_APPENDS = 'e',
    PK_TUPLE2 = 0x86,
    PK_BININT = 'J',
    PK_BININT1 = 'K',
    PK_LONG1 = 0x8a,
    PK_BINUNICODE = 'X',
    PK_BINFLOAT = 'G',
    PK_NEWTRUE = 0x88,
    PK_NEWFALSE = 0x89,
    PK_NONE = 'N',
};

#define EM_MAX_DEPTH 8 /* the schema nests six deep (a block's frames) */

typedef enum em_format_e { EM_PICKLE, EM_JSON } em_format_t;

typedef struct em_s {
    st_buf_t *out;
    em_format_t format;
    int depth;                /* open dicts and lists */
    bool empty[EM_MAX_DEPTH]; /* JSON: nothing written yet in the container at this depth */
    bool no_sep;              /* JSON: the next value needs no comma (it follows "key": or a sign) */
} em_t;

/* JSON: the comma before a value or key, unless it opens its container. */
static void json_sep(em_t *em)
{
    if (em->no_sep) {
        em->no_sep = false;
        return;
    }
    if (em->depth > 0 && !em->empty[em->depth - 1])
        buf_byte(em->out, ',');
    if (em->depth > 0)
        em->empty[em->depth - 1] = false;
}

static void em_open(em_t *em, unsigned char pickle_op, char json_ch)
{
    if (em->format == EM_PICKLE) {
        buf_byte(em->out, pickle_op);
        buf_byte(em->out, PK_MARK);
    } else {
        json_sep(em);
        buf_byte(em->out, (unsigned char)json_ch);
    }
    if (em->depth == EM_MAX_DEPTH) {
        em->out->failed = true; /* cannot happen with this schema */
        return;
    }
    em->empty[em->depth++] = true;
}

static void em_close(em_t *em, unsigned char pickle_op, char json_ch)
{
    if (em->depth > 0)
        em->depth--;
    buf_byte(em->out, em->format == EM_PICKLE ? pickle_op : (unsigned char)json_ch);
}

static void em_dict_open(em_t *em)
{
    em_open(em, PK_EMPTY_DICT, '{');
}

static void em_dict_close(em_t *em)
{
    em_close(em, PK_SETITEMS, '}');
}

static void em_list_open(em_t *em)
{
    em_open(em, PK_EMPTY_LIST, '[');
}

static void em_list_close(em_t *em)
{
    em_close(em, PK_APPENDS, ']');
}

static void pickle_str(st_buf_t *b, const char *s)
{
    buf_byte(b, PK_BINUNICODE);
    size_t at = b->len;
    st_buf_put(b, "\0\0\0\0", 4); /* the length, filled in below */
    size_t start = b->len;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t n = utf8_len(p);
        if (n)
            st_buf_put(b, p, n);
        else
            buf_str(b, utf8_replacement);
        p += n ? n : 1;
    }
    if (b->failed)
        return;
    size_t n = b->len - start;
    if (n > UINT32_MAX) {
        b->failed = true;
        return;
    }
    for (int i = 0; i < 4; i++)
        b->data[at + (size_t)i] = (unsigned char)(n >> (8 * i));
}

static void json_str(st_buf_t *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    buf_byte(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        unsigned char c = *p;
        size_t n = utf8_len(p);
        if (c == '"' || c == '\\') {
            const char esc[2] = {'\\', (char)c};
            st_buf_put(b, esc, 2);
        } else if (c == '\n') {
            buf_str(b, "\\n");
        } else if (c == '\t') {
            buf_str(b, "\\t");
        } else if (c == '\r') {
            buf_str(b, "\\r");
        } else if (c < 0x20) {
            const char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            st_buf_put(b, esc, 6);
        } else if (n) {
            st_buf_put(b, p, n);
        } else {
            buf_str(b, utf8_replacement);
        }
        p += n ? n : 1;
    }
    buf_byte(b, '"');
}

static void em_str(em_t *em, const char *s)
{
    if (em->format == EM_PICKLE) {
        pickle_str(em->out, s);
    } else {
        json_sep(em);
        json_str(em->out, s);
    }
}

static void em_key(em_t *em, const char *name)
{
    em_str(em, name);
    if (em->format == EM_JSON) {
        buf_byte(em->out, ':');
        em->no_sep = true;
    }
}

/* An integer given as its 64-bit two's complement and the byte that extends
 * it (0x00 for an unsigned or non-negative value, 0xff for a negative one):
 * the smallest of BININT1, BININT and LONG1 that holds it. */
static void pickle_int(st_buf_t *b, uint64_t bits, unsigned char ext)
{
    if (ext == 0 && bits <= 0xff) {
        const unsigned char op[2] = {PK_BININT1, (unsigned char)bits};
        st_buf_put(b, op, 2);
        return;
    }
    if ((ext == 0 && bits <= INT32_MAX) || (ext == 0xff && bits >= (uint64_t)INT32_MIN)) {
        unsigned char op[5] = {PK_BININT};
        for (int i = 0; i < 4; i++)
            op[1 + i] = (unsigned char)(bits >> (8 * i));
        st_buf_put(b, op, 5);
        return;
    }
    /* LONG1: n little-endian bytes, two's complement; drop the top bytes
     * that only repeat the sign. */
    unsigned char le[9];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(bits >> (8 * i));
    le[8] = ext;
    size_t n = 9;
    while (n > 1 && le[n - 1] == ext && (le[n - 2] & 0x80) == (ext & 0x80))
        n--;
    const unsigned char op[2] = {PK_LONG1, (unsigned char)n};
    st_buf_put(b, op, 2);
    st_buf_put(b, le, n);
}

static void em_uint(em_t *em, uint64_t v)
{
    if (em->format == EM_PICKLE) {
        pickle_int(em->out, v, 0);
    } else {
        char text[24];
        size_t n = sizeof text;
        do
            text[--n] = (char)('0' + v % 10);
        while ((v /= 10) != 0);
        json_sep(em);
        st_buf_put(em->out, text + n, sizeof text - n);
    }
}

static void em_int(em_t *em, int64_t v)
{
    if (v >= 0) {
        em_uint(em, (uint64_t)v);
    } else if (em->format == EM_PICKLE) {
        pickle_int(em->out, (uint64_t)v, 0xff);
    } else {
        json_sep(em);
        buf_byte(em->out, '-');
        em->no_sep = true; /* no separator between the sign and the digits */
        em_uint(em, 0 - (uint64_t)v);
    }
}

static void em_bool(em_t *em, bool v)
{
    if (em->format == EM_PICKLE) {
        buf_byte(em->out, v ? PK_NEWTRUE : PK_NEWFALSE);
    } else {
        json_sep(em);
        buf_str(em->out, v ? "true" : "false");
    }
}

static void em_none(em_t *em)
{
    if (em->format == EM_PICKLE) {
        buf_byte(em->out, PK_NONE);
    } else {
        json_sep(em);
        buf_str(em->out, "null");
    }
}

/* A double as JSON: the fewest significant digits (up to 17) that read
 * back as the same value.  printf and strtod follow the program's locale
 * for the decimal point (this runs inside any program): they agree with
 * each other, and the point is written as '.' afterwards. */
static void json_double(st_buf_t *b, double v)
{
    char text[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, v);
        if (strtod(text, NULL) == v)
            break;
    }
    char out[48];
    size_t n = 0;
    bool point = false, fraction = false;
    for (const char *p = text; *p && n < sizeof out - 3; p++) {
        if ((*p >= '0' && *p <= '9') || *p == '-' || *p == '+') {
            out[n++] = *p;
        } else if (*p == 'e' || *p == 'E') {
            out[n++] = 'e';
            fraction = true;
        } else if (!point) {
            out[n++] = '.'; /* the locale's decimal point, however many bytes */
            point = fraction = true;
        }
    }
    if (!fraction) {
        out[n++] = '.'; /* "1" would read back as an integer */
        out[n++] = '0';
    }
    st_buf_put(b, out, n);
}

/* A double: BINFLOAT (8 bytes, big-endian) or JSON; None when it is not
 * finite (JSON has no NaN). */
static void em_double(em_t *em, double v)
{
    if (!isfinite(v)) {
        em_none(em);
        return;
    }
    if (em->format == EM_PICKLE) {
        uint64_t bits;
        memcpy(&bits, &v, sizeof bits);
        unsigned char op[9] = {PK_BINFLOAT};
        for (int i = 0; i < 8; i++)
            op[1 + i] = (unsigned char)(bits >> (56 - 8 * i));
        st_buf_put(em->out, op, 9);
    } else {
        json_sep(em);
        json_double(em->out, v);
    }
}

/* PyTorch's pool ids are pairs: (0, id) is what a snapshot shows for a
 * pool made outside graph capture. */
static void em_pair(em_t *em, int64_t a, int64_t b)
{
    if (em->format == EM_PICKLE) {
        em_int(em, a);
        em_int(em, b);
        buf_byte(em->out, PK_TUPLE2);
    } else {
        json_sep(em);
        buf_byte(em->out, '[');
        em->no_sep = true;
        em_int(em, a);
        buf_byte(em->out, ',');
        em->no_sep = true;
        em_int(em, b);
        buf_byte(em->out, ']');
    }
}

/* key: value, for the common value types. */
static void kv_uint(em_t *em, const char *key, uint64_t v)
{
    em_key(em, key);
    em_uint(em, v);
}

static void kv_int(em_t *em, const char *key, int64_t v)
{
    em_key(em, key);
    em_int(em, v);
}

static void kv_str(em_t *em, const char *key, const char *v)
{
    em_key(em, key);
    em_str(em, v);
}

static void kv_bool(em_t *em, const char *key, bool v)
{
    em_key(em, key);
    em_bool(em, v);
}

static void kv_empty_list(em_t *em, const char *key)
{
    em_key(em, key);
    em_list_open(em);
    em_list_close(em);
}

/* A call stack (stack.c) as PyTorch's frames, innermost first: name,
 * filename, line.  A frame without line information names its module (or
 * "??") as the file and line 0; no stack: an empty list. */
static void kv_frames(em_t *em, uint32_t site)
{
    st_frame_t f[ST_STACK_DEPTH_MAX];
    size_t n = site ? st_stack_frames(site, f, ST_STACK_DEPTH_MAX) : 0;
    em_key(em, "frames");
    em_list_open(em);
    for (size_t i = 0; i < n; i++) {
        em_dict_open(em);
        kv_str(em, "name", f[i].name);
        kv_str(em, "filename", f[i].file ? f[i].file : f[i].module ? f[i].module : "??");
        kv_int(em, "line", f[i].file ? f[i].line : 0);
        em_dict_close(em);
    }
    em_list_close(em);
}

/* ------------------------------------------------------------------------
 * The walk
 * ---------------------------------------------------------------------- */

static const char *block_state_name(core_block_state_t state)
{
    switch (state) {
    case CORE_BLOCK_ALLOCATED:
        return "active_allocated";
    case CORE_BLOCK_PENDING:
        return "active_pending_free";
    case CORE_BLOCK_FREE:
        break;
    }
    return "inactive";
}

static const char *const action_names[] = {
    [ST_ALLOC] = "alloc",
    [ST_FREE_REQUESTED] = "free_requested",
    [ST_FREE_COMPLETED] = "free_completed",
    [ST_SEGMENT_ALLOC] = "segment_alloc",
    [ST_SEGMENT_FREE] = "segment_free",
    [ST_OOM] = "oom",
    [ST_SNAPSHOT] = "snapshot",
    [ST_SEGMENT_MAP] = "segment_map",
    [ST_SEGMENT_UNMAP] = "segment_unmap",
};

static void emit_block(em_t *em, const core_block_info_t *b)
{
    em_dict_open(em);
    kv_uint(em, "address", b->addr);
    kv_uint(em, "size", b->size);
    kv_uint(em, "requested_size", b->requested);
    kv_str(em, "state", block_state_name(b->state));
    kv_frames(em, b->site);
    em_dict_close(em);
}

static void emit_segment(em_t *em, int device, const core_layout_t *l, const core_seg_info_t *s)
{
    /* PyTorch's sums: allocated = live blocks, active = live or waiting for
     * their last use, requested = what the program asked for in them. */
    uint64_t allocated = 0, active = 0, requested = 0;
    const core_block_info_t *blocks = l->blocks + s->first_block;
    for (size_t i = 0; i < s->nblocks; i++) {
        if (blocks[i].state == CORE_BLOCK_ALLOCATED)
            allocated += blocks[i].size;
        if (blocks[i].state != CORE_BLOCK_FREE)
            active += blocks[i].size;
        requested += blocks[i].requested;
    }
    em_dict_open(em);
    kv_int(em, "device", device);
    kv_uint(em, "address", s->addr);
    kv_uint(em, "total_size", s->size);
    kv_uint(em, "allocated_size", allocated);
    kv_uint(em, "active_size", active);
    kv_uint(em, "requested_size", requested);
    kv_uint(em, "stream", s->stream);
    kv_str(em, "segment_type", s->small ? "small" : "large");
    em_key(em, "segment_pool_id");
    em_pair(em, 0, s->pool_id);
    kv_bool(em, "is_expandable", s->expandable);
    kv_empty_list(em, "frames");
    em_key(em, "blocks");
    em_list_open(em);
    for (size_t i = 0; i < s->nblocks; i++)
        emit_block(em, &blocks[i]);
    em_list_close(em);
    em_dict_close(em);
}

static void emit_trace_entry(em_t *em, const st_trace_ev_t *e)
{
    const char *action = e->action < sizeof action_names / sizeof action_names[0] ? action_names[e->action] : NULL;
    em_dict_open(em);
    kv_str(em, "action", action ? action : "unknown");
    kv_uint(em, e->action == ST_OOM ? "device_free" : "addr", e->addr);
    kv_uint(em, "size", e->size);
    kv_uint(em, "stream", e->stream);
    kv_uint(em, "time_us", e->time_us);
    kv_frames(em, e->site);
    kv_str(em, "compile_context", "");
    kv_str(em, "user_metadata", "");
    em_dict_close(em);
}

static const st_snap_dev_t *find_dev(const st_snapshot_t *s, int device)
{
    for (size_t i = 0; i < s->ndevs; i++)
        if (s->devs[i].device == device)
            return &s->devs[i];
    return NULL;
}

/* PyTorch's allocator_settings where cucache has the same setting; the
 * configuration text under CUCACHE_CONF where PyTorch has its own
 * variable's. */
static void emit_settings(em_t *em, const st_snapshot_t *s)
{
    conf_t defaults;
    const conf_t *c = s->conf;
    if (!c) {
        conf_defaults(&defaults);
        c = &defaults;
    }
    em_dict_open(em);
    kv_str(em, "CUCACHE_CONF", s->conf_text ? s->conf_text : "");
    /* int64_t(size_t) in PyTorch: unlimited (SIZE_MAX) reads -1 */
    kv_int(em, "max_split_size", c->max_split_size == SIZE_MAX ? -1 : (int64_t)c->max_split_size);
    em_key(em, "garbage_collection_threshold");
    em_double(em, c->gc_threshold);
    kv_bool(em, "expandable_segments", c->expandable_segments);
    /* one entry per interval, keyed by its lower bound in MiB: "1", "2", "4", ... */
    em_key(em, "roundup_power2_divisions");
    em_dict_open(em);
    for (int i = 0; i < CONF_ROUNDUP_INTERVALS; i++) {
        char key[8];
        size_t n = sizeof key;
        unsigned v = 1u << i;
        key[--n] = '\0';
        do
            key[--n] = (char)('0' + v % 10);
        while ((v /= 10) != 0);
        kv_uint(em, key + n, c->roundup_divs[i]);
    }
    em_dict_close(em);
    em_dict_close(em);
}

static void snap_emit(em_t *em, const st_snapshot_t *s)
{
    em_dict_open(em);

    em_key(em, "segments");
    em_list_open(em);
    for (size_t i = 0; i < s->ndevs; i++) {
        const core_layout_t *l = s->devs[i].layout;
        for (size_t k = 0; l && k < l->nsegs; k++)
            emit_segment(em, s->devs[i].device, l, &l->segs[k]);
    }
    em_list_close(em);

    /* One list per ordinal up to the highest device with state. */
    int max_device = -1;
    for (size_t i = 0; i < s->ndevs; i++)
        if (s->devs[i].device > max_device)
            max_device = s->devs[i].device;
    em_key(em, "device_traces");
    em_list_open(em);
    for (int device = 0; device <= max_device; device++) {
        const st_snap_dev_t *dev = find_dev(s, device);
        em_list_open(em);
        for (size_t k = 0; dev && k < dev->ntrace; k++)
            emit_trace_entry(em, &dev->trace[k]);
        em_list_close(em);
    }
    em_list_close(em);

    em_key(em, "allocator_settings");
    emit_settings(em, s);

    kv_empty_list(em, "external_annotations");

    em_dict_close(em);
}

int st_snapshot_pickle(const st_snapshot_t *s, st_buf_t *out)
{
    em_t em = {.out = out, .format = EM_PICKLE};
    const unsigned char proto[2] = {PK_PROTO, 2};
    st_buf_put(out, proto, 2);
    snap_emit(&em, s);
    buf_byte(out, PK_STOP);
    return out->failed ? -1 : 0;
}

int st_snapshot_json(const st_snapshot_t *s, st_buf_t *out)
{
    em_t em = {.out = out, .format = EM_JSON};
    snap_emit(&em, s);
    buf_byte(out, '\n');
    return out->failed ? -1 : 0;
}
