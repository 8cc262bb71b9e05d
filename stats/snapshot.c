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
 * reduce), so that it loads with every global refused.  Its batches and
 * its memo are those of Python's pickler (the emitter's section says
 * how), so that a snapshot of any size opens in PyTorch's browser viewer
 * and takes about as many bytes as PyTorch's own.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hashtab.h"
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
 *
 * The pickle is written as CPython's pickler (the C one, which
 * pickle.dump uses) writes protocol 2, so that every reader of PyTorch's
 * files reads ours the same way:
 *   - a container's items go in batches of PK_BATCH, each between MARK and
 *     APPENDS or SETITEMS (the last batch too, however short); a container
 *     with one item in all is that item and APPEND or SETITEM, an empty one
 *     is EMPTY_LIST or EMPTY_DICT alone.  The items of one batch are
 *     spread onto a JavaScript stack by the viewer's own unpickler
 *     (MemoryViz.js, APPENDS): one batch of a hundred thousand events
 *     overflows it, a thousand never does.
 *   - a string is written once and put in the memo (BINPUT, LONG_BINPUT
 *     past index 255); each repetition is a BINGET or LONG_BINGET.  The
 *     keys, the action and state names and the frames' file and function
 *     names are nearly all repetitions.  PyTorch's frames are shared too,
 *     each list (one per distinct stack) and each frame (one per distinct
 *     function, file and line): a stack's list and a frame's dict are
 *     written once, their later uses fetch them from the memo.
 *   - integers in the smallest of BININT1, BININT2, BININT and LONG1.
 * The MARK of a container is written with its first item, so that a memo
 * put can follow the EMPTY_LIST as Python's does, and an empty container
 * needs nothing taken back.
 * ---------------------------------------------------------------------- */

enum {
    PK_PROTO = 0x80,
    PK_STOP = '.',
    PK_MARK = '(',
    PK_EMPTY_DICT = '}',
    PK_SETITEM = 's',
    PK_SETITEMS = 'u',
    PK_EMPTY_LIST = ']',
    PK_APPEND = 'a',
    PK_APPENDS = 'e',
    PK_TUPLE2 = 0x86,
    PK_BININT = 'J',
    PK_BININT1 = 'K',
    PK_BININT2 = 'M',
    PK_LONG1 = 0x8a,
    PK_BINUNICODE = 'X',
    PK_BINFLOAT = 'G',
    PK_NEWTRUE = 0x88,
    PK_NEWFALSE = 0x89,
    PK_NONE = 'N',
    PK_BINPUT = 'q',
    PK_LONG_BINPUT = 'r',
    PK_BINGET = 'h',
    PK_LONG_BINGET = 'j',
};

enum {
    PK_BATCH = 1000,     /* items between one MARK and its APPENDS or SETITEMS (CPython's BATCHSIZE) */
    PK_MEMO_SHORT = 256, /* memo indices below this take BINPUT and BINGET (one byte) */
};

#define EM_MAX_DEPTH 8 /* the schema nests six deep (a block's frames) */

typedef enum em_format_e { EM_PICKLE, EM_JSON } em_format_t;

/* One open dict or list. */
typedef struct em_level_s {
    bool dict;
    size_t values;  /* values written in it (a dict's keys count as values) */
    size_t mark_at; /* pickle: the offset of its first batch's MARK */
} em_level_t;

/* A string in the memo: where its bytes are in the output. */
typedef struct em_memo_str_s {
    size_t at, len;
} em_memo_str_t;

/* A frame's dict in the memo: its name's and file's entries in str, its
 * line, its memo index. */
typedef struct em_memo_frame_s {
    uint32_t name, file, index;
    int64_t line;
} em_memo_frame_t;

typedef struct em_s {
    st_buf_t *out;
    em_format_t format;
    int depth;                      /* open dicts and lists */
    em_level_t level[EM_MAX_DEPTH]; /* level[depth - 1]: the innermost */
    bool no_sep;                    /* JSON: the next value needs no comma (it follows "key":) */
    /* pickle: the memo.  Indices are given in order, to strings, lists of
     * frames and frames' dicts alike. */
    uint32_t memo_next;
    ht_t strings;       /* ht_key_bytes of a string's text -> its index in str */
    em_memo_str_t *str; /* by the order of strings put */
    size_t nstr, str_cap;
    ht_t stacks;            /* a stack id (stack.c) -> the memo index of its list of frames */
    ht_t frames;            /* frame_key -> its entry in frame */
    em_memo_frame_t *frame; /* the frames' dicts put, in order */
    size_t nframe, frame_cap;
} em_t;

static void em_fini(em_t *em)
{
    ht_fini(&em->strings);
    ht_fini(&em->stacks);
    ht_fini(&em->frames);
    hostalloc_free(em->str);
    hostalloc_free(em->frame);
}

/* BINPUT or BINGET (short), LONG_BINPUT or LONG_BINGET with index i. */
static void pickle_memo_op(st_buf_t *b, unsigned char short_op, unsigned char long_op, uint32_t i)
{
    if (i < PK_MEMO_SHORT) {
        const unsigned char op[2] = {short_op, (unsigned char)i};
        st_buf_put(b, op, 2);
        return;
    }
    unsigned char op[5] = {long_op};
    for (int k = 0; k < 4; k++)
        op[1 + k] = (unsigned char)(i >> (8 * k));
    st_buf_put(b, op, 5);
}

/* Before every value: JSON's comma; the pickle's batches.  A dict's key
 * and value are two values: a pair starts at an even count. */
static void em_value(em_t *em)
{
    if (em->format == EM_JSON) {
        if (em->no_sep) {
            em->no_sep = false;
            return;
        }
        if (em->depth > 0 && em->level[em->depth - 1].values++ > 0)
            buf_byte(em->out, ',');
        return;
    }
    if (em->depth == 0)
        return;
    em_level_t *l = &em->level[em->depth - 1];
    size_t per_item = l->dict ? 2 : 1;
    if (l->values == 0) {
        l->mark_at = em->out->len;
        buf_byte(em->out, PK_MARK);
    } else if (l->values % (per_item * PK_BATCH) == 0) {
        /* a full batch is behind: close it, open the next */
        buf_byte(em->out, l->dict ? PK_SETITEMS : PK_APPENDS);
        buf_byte(em->out, PK_MARK);
    }
    l->values++;
}

static void em_open(em_t *em, bool dict)
{
    em_value(em);
    buf_byte(em->out, em->format == EM_JSON ? (dict ? '{' : '[') : (dict ? PK_EMPTY_DICT : PK_EMPTY_LIST));
    if (em->depth == EM_MAX_DEPTH) {
        em->out->failed = true; /* cannot happen with this schema */
        return;
    }
    em->level[em->depth++] = (em_level_t){.dict = dict};
}

static void em_close(em_t *em)
{
    if (em->depth == 0)
        return;
    const em_level_t *l = &em->level[--em->depth];
    if (em->format == EM_JSON) {
        buf_byte(em->out, l->dict ? '}' : ']');
        return;
    }
    size_t items = l->dict ? l->values / 2 : l->values;
    if (items == 0)
        return; /* EMPTY_DICT or EMPTY_LIST alone */
    if (items == 1 && !em->out->failed) {
        /* one item in all: no MARK, and SETITEM or APPEND.  The strings
         * the item put in the memo move back with it (they are the last
         * ones put). */
        st_buf_t *b = em->out;
        memmove(b->data + l->mark_at, b->data + l->mark_at + 1, b->len - l->mark_at - 1);
        b->len--;
        for (size_t i = em->nstr; i > 0 && em->str[i - 1].at > l->mark_at; i--)
            em->str[i - 1].at--;
        buf_byte(b, l->dict ? PK_SETITEM : PK_APPEND);
        return;
    }
    buf_byte(em->out, l->dict ? PK_SETITEMS : PK_APPENDS);
}

static void em_dict_open(em_t *em)
{
    em_open(em, true);
}

static void em_dict_close(em_t *em)
{
    em_close(em);
}

static void em_list_open(em_t *em)
{
    em_open(em, false);
}

static void em_list_close(em_t *em)
{
    em_close(em);
}

/* A stack's list of frames was written before: fetches it from the memo
 * (the pickle; JSON writes every list). */
static bool em_stack_seen(em_t *em, uint32_t site)
{
    uint64_t i;
    if (em->format != EM_PICKLE || site < ST_STACK_FIRST || !ht_get(&em->stacks, site, &i))
        return false;
    em_value(em);
    pickle_memo_op(em->out, PK_BINGET, PK_LONG_BINGET, (uint32_t)i);
    return true;
}

/* Puts the list just opened, a stack's frames, in the memo. */
static void em_stack_put(em_t *em, uint32_t site)
{
    if (em->format != EM_PICKLE || site < ST_STACK_FIRST || em->memo_next == UINT32_MAX ||
        !ht_put(&em->stacks, site, em->memo_next))
        return;
    pickle_memo_op(em->out, PK_BINPUT, PK_LONG_BINPUT, em->memo_next++);
}

/* The string's text as BINUNICODE (invalid UTF-8 replaced). */
static void pickle_unicode(st_buf_t *b, const char *s)
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

/* The entry in str of a string already in the memo. */
static bool em_str_entry(const em_t *em, const char *s, uint32_t *entry)
{
    size_t n = strlen(s);
    uint64_t i;
    if (!ht_get(&em->strings, ht_key_bytes(s, n), &i))
        return false;
    const em_memo_str_t *m = &em->str[(uint32_t)i];
    *entry = (uint32_t)i;
    return m->len == n && memcmp(em->out->data + m->at, s, n) == 0;
}

static uint64_t frame_key(const char *name, const char *file, int64_t line)
{
    return ht_key_bytes(name, strlen(name)) * 31 ^ ht_key_bytes(file, strlen(file)) ^
           (uint64_t)line * 0x9e3779b97f4a7c15ull;
}

/* The same frame was written before: fetches its dict from the memo. */
static bool em_frame_seen(em_t *em, const char *name, const char *file, int64_t line)
{
    uint64_t e;
    uint32_t ne, fe;
    if (em->format != EM_PICKLE || !ht_get(&em->frames, frame_key(name, file, line), &e))
        return false;
    const em_memo_frame_t *f = &em->frame[e];
    if (f->line != line || !em_str_entry(em, name, &ne) || ne != f->name || !em_str_entry(em, file, &fe) ||
        fe != f->file)
        return false;
    em_value(em);
    pickle_memo_op(em->out, PK_BINGET, PK_LONG_BINGET, f->index);
    return true;
}

/* Opens a frame's dict and puts it in the memo: its index (UINT32_MAX:
 * not put). */
static uint32_t em_frame_open(em_t *em)
{
    em_dict_open(em);
    if (em->format != EM_PICKLE || em->memo_next == UINT32_MAX)
        return UINT32_MAX;
    pickle_memo_op(em->out, PK_BINPUT, PK_LONG_BINPUT, em->memo_next);
    return em->memo_next++;
}

/* Closes it and notes it under its content, its strings now in the memo. */
static void em_frame_close(em_t *em, const char *name, const char *file, int64_t line, uint32_t index)
{
    em_dict_close(em);
    em_memo_frame_t f = {.index = index, .line = line};
    if (index == UINT32_MAX || em->out->failed || !em_str_entry(em, name, &f.name) ||
        !em_str_entry(em, file, &f.file) ||
        !vec_reserve((void **)&em->frame, &em->frame_cap, em->nframe + 1, sizeof *em->frame) ||
        !ht_put(&em->frames, frame_key(name, file, line), em->nframe))
        return;
    em->frame[em->nframe++] = f;
}

/* A string: fetched from the memo when the same text was written before;
 * else written and put in it (unless another text has its key, or host
 * memory is short: then it is only written). */
static void pickle_str(em_t *em, const char *s)
{
    st_buf_t *b = em->out;
    size_t n = strlen(s);
    uint64_t key = ht_key_bytes(s, n), i;
    if (ht_get(&em->strings, key, &i)) {
        const em_memo_str_t *m = &em->str[(uint32_t)i];
        if (m->len == n && memcmp(b->data + m->at, s, n) == 0) {
            pickle_memo_op(b, PK_BINGET, PK_LONG_BINGET, (uint32_t)(i >> 32));
            return;
        }
        pickle_unicode(b, s); /* another text with the same key */
        return;
    }
    pickle_unicode(b, s);
    if (b->failed || em->memo_next == UINT32_MAX ||
        !vec_reserve((void **)&em->str, &em->str_cap, em->nstr + 1, sizeof *em->str))
        return;
    /* the value: the memo index above, the entry in str below */
    if (!ht_put(&em->strings, key, (uint64_t)em->memo_next << 32 | em->nstr))
        return;
    em->str[em->nstr++] = (em_memo_str_t){.at = b->len - n, .len = n};
    pickle_memo_op(b, PK_BINPUT, PK_LONG_BINPUT, em->memo_next++);
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
    em_value(em);
    if (em->format == EM_PICKLE)
        pickle_str(em, s);
    else
        json_str(em->out, s);
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
 * the smallest of BININT1, BININT2, BININT and LONG1 that holds it. */
static void pickle_int(st_buf_t *b, uint64_t bits, unsigned char ext)
{
    if (ext == 0 && bits <= 0xff) {
        const unsigned char op[2] = {PK_BININT1, (unsigned char)bits};
        st_buf_put(b, op, 2);
        return;
    }
    if (ext == 0 && bits <= 0xffff) {
        const unsigned char op[3] = {PK_BININT2, (unsigned char)bits, (unsigned char)(bits >> 8)};
        st_buf_put(b, op, 3);
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

/* Integers as JSON text. */
static void json_uint(st_buf_t *b, uint64_t v)
{
    char text[24];
    size_t n = sizeof text;
    do
        text[--n] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    st_buf_put(b, text + n, sizeof text - n);
}

static void json_int(st_buf_t *b, int64_t v)
{
    if (v < 0)
        buf_byte(b, '-');
    json_uint(b, v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
}

static void em_uint(em_t *em, uint64_t v)
{
    em_value(em);
    if (em->format == EM_PICKLE)
        pickle_int(em->out, v, 0);
    else
        json_uint(em->out, v);
}

static void em_int(em_t *em, int64_t v)
{
    em_value(em);
    if (em->format == EM_PICKLE)
        pickle_int(em->out, (uint64_t)v, v < 0 ? 0xff : 0);
    else
        json_int(em->out, v);
}

static void em_bool(em_t *em, bool v)
{
    em_value(em);
    if (em->format == EM_PICKLE)
        buf_byte(em->out, v ? PK_NEWTRUE : PK_NEWFALSE);
    else
        buf_str(em->out, v ? "true" : "false");
}

static void em_none(em_t *em)
{
    em_value(em);
    buf_str(em->out, em->format == EM_PICKLE ? "N" : "null");
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
    em_value(em);
    if (em->format == EM_PICKLE) {
        uint64_t bits;
        memcpy(&bits, &v, sizeof bits);
        unsigned char op[9] = {PK_BINFLOAT};
        for (int i = 0; i < 8; i++)
            op[1 + i] = (unsigned char)(bits >> (56 - 8 * i));
        st_buf_put(em->out, op, 9);
    } else {
        json_double(em->out, v);
    }
}

/* PyTorch's pool ids are pairs: (0, id) is what a snapshot shows for a
 * pool made outside graph capture. */
static void em_pair(em_t *em, int64_t a, int64_t b)
{
    em_value(em);
    if (em->format == EM_PICKLE) {
        pickle_int(em->out, (uint64_t)a, a < 0 ? 0xff : 0);
        pickle_int(em->out, (uint64_t)b, b < 0 ? 0xff : 0);
        buf_byte(em->out, PK_TUPLE2);
    } else {
        buf_byte(em->out, '[');
        json_int(em->out, a);
        buf_byte(em->out, ',');
        json_int(em->out, b);
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
/* One of PyTorch's frames; the pickle writes a frame once. */
static void emit_frame(em_t *em, const char *name, const char *file, int64_t line)
{
    if (em_frame_seen(em, name, file, line))
        return;
    uint32_t index = em_frame_open(em);
    kv_str(em, "name", name);
    kv_str(em, "filename", file);
    kv_int(em, "line", line);
    em_frame_close(em, name, file, line, index);
}

static void kv_frames(em_t *em, uint32_t site)
{
    em_key(em, "frames");
    if (em_stack_seen(em, site))
        return;
    st_frame_t f[ST_STACK_FRAMES_MAX];
    size_t n = site ? st_stack_frames(site, f, ST_STACK_FRAMES_MAX) : 0;
    em_list_open(em);
    em_stack_put(em, site);
    for (size_t i = 0; i < n; i++)
        emit_frame(em, f[i].name, f[i].file ? f[i].file : f[i].module ? f[i].module : "??", f[i].file ? f[i].line : 0);
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

/* An inactive block's requested_size is 0.  PyTorch's is whatever its
 * block struct last held: the request of the last allocation it served
 * (the struct that survives a merge keeps its own), or 0 for a piece
 * split off and never handed out; its viewers read requested_size of
 * live and pending blocks only. */
static void emit_block(em_t *em, const core_block_info_t *b)
{
    em_dict_open(em);
    kv_uint(em, "address", b->addr);
    kv_uint(em, "size", b->size);
    kv_uint(em, "requested_size", b->state == CORE_BLOCK_FREE ? 0 : b->requested);
    kv_str(em, "state", block_state_name(b->state));
    kv_frames(em, b->site);
    em_dict_close(em);
}

static void emit_segment(em_t *em, int device, const core_layout_t *l, const core_seg_info_t *s)
{
    /* PyTorch's sums: allocated = live blocks, active = live or waiting for
     * their last use, requested = what the program asked for in the active
     * ones. */
    uint64_t allocated = 0, active = 0, requested = 0;
    const core_block_info_t *blocks = l->blocks + s->first_block;
    for (size_t i = 0; i < s->nblocks; i++) {
        if (blocks[i].state == CORE_BLOCK_ALLOCATED)
            allocated += blocks[i].size;
        if (blocks[i].state != CORE_BLOCK_FREE) {
            active += blocks[i].size;
            requested += blocks[i].requested;
        }
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
    kv_frames(em, s->site); /* the allocation that made the segment, as PyTorch's */
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
    kv_str(em, "compile_context", "N/A"); /* PyTorch's when no torch.compile context is set */
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

    /* cucache's own: what each device gave to and received from the other
     * processes on its GPU (CUCACHE_YIELD); PyTorch's readers ignore it */
    em_key(em, "cucache_yields");
    em_list_open(em);
    for (size_t i = 0; i < s->ndevs; i++) {
        const st_snap_dev_t *dev = &s->devs[i];
        em_dict_open(em);
        kv_int(em, "device", dev->device);
        kv_uint(em, "given", dev->yields_given);
        kv_uint(em, "given_bytes", dev->yield_bytes_given);
        kv_uint(em, "received", dev->yields_received);
        kv_uint(em, "received_bytes", dev->yield_bytes_received);
        em_dict_close(em);
    }
    em_list_close(em);

    em_dict_close(em);
}

int st_snapshot_pickle(const st_snapshot_t *s, st_buf_t *out)
{
    em_t em = {.out = out, .format = EM_PICKLE};
    const unsigned char proto[2] = {PK_PROTO, 2};
    st_buf_put(out, proto, 2);
    snap_emit(&em, s);
    buf_byte(out, PK_STOP);
    em_fini(&em);
    return out->failed ? -1 : 0;
}

int st_snapshot_json(const st_snapshot_t *s, st_buf_t *out)
{
    em_t em = {.out = out, .format = EM_JSON};
    snap_emit(&em, s);
    buf_byte(out, '\n');
    return out->failed ? -1 : 0;
}
