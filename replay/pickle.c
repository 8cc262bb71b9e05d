/*
 * The pickle reader of pickle.h: a stack machine over the binary opcodes of
 * the plain types, nothing else.  Each opcode is checked against the bytes
 * left before it is read, values come from one arena, and the only loops
 * are over the input and over the stack, so a hostile file can cost time
 * and memory in proportion to its length, never more, and never run code.
 *
 * The memo is a growable array indexed by memo id, not a sparse map.
 * MEMOIZE stores under the number of ids stored so far (as Python does);
 * BINPUT and LONG_BINPUT may name any id, so an id is only accepted up to
 * the file's length: Python's pickler numbers ids 0, 1, 2, ... and every
 * store costs at least one byte, so a larger id cannot be a real pickle's,
 * and the array stays within 16 bytes per input byte (LONG_BINPUT
 * 0xffffffff in a small file is an error, not 32 GiB).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostalloc.h"
#include "pickle.h"
#include "vec.h"

enum { ARENA_CHUNK = 64 * 1024 };

/* The arena: a list of chunks; values and item arrays come from it, item
 * arrays that grow are copied (the old copy stays until pk_free). */
typedef struct chunk_s {
    struct chunk_s *next;
    size_t used, size;
    max_align_t data[];
} chunk_t;

typedef struct reader_s {
    const uint8_t *p, *start, *end;
    chunk_t *arena;
    pk_val_t **stack; /* values, with NULL entries as marks */
    size_t sp, stack_cap;
    size_t *marks; /* stack positions of the open marks */
    size_t nmarks, marks_cap;
    pk_val_t **memo; /* NULL where never stored */
    size_t memo_cap;
    size_t memo_count; /* ids stored: MEMOIZE's next id */
    char *err;
    size_t errlen;
    size_t op_at; /* offset of the opcode being run */
    int failed;
} reader_t;

static int fail(reader_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(reader_t *r, const char *fmt, ...)
{
    if (!r->failed) {
        int n = snprintf(r->err, r->errlen, "offset %zu: ", r->op_at);
        va_list ap;
        va_start(ap, fmt);
        if (n >= 0 && (size_t)n < r->errlen)
            vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    r->failed = 1;
    return -1;
}

static void *arena_alloc(reader_t *r, size_t size)
{
    size = (size + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    chunk_t *c = r->arena;
    if (!c || c->size - c->used < size) {
        size_t cap = size > ARENA_CHUNK ? size : ARENA_CHUNK;
        c = malloc(sizeof *c + cap);
        if (!c) {
            fail(r, "out of host memory");
            return NULL;
        }
        c->next = r->arena, c->used = 0, c->size = cap;
        r->arena = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += size;
    return p;
}

static pk_val_t *new_val(reader_t *r, pk_type_t type)
{
    pk_val_t *v = arena_alloc(r, sizeof *v);
    if (v) {
        memset(v, 0, sizeof *v);
        v->type = type;
    }
    return v;
}

/* Room for one more item in v's arrays (items, or keys and vals). */
static int grow(reader_t *r, pk_val_t *v)
{
    if (v->n < v->cap)
        return 0;
    size_t cap = v->cap ? v->cap * 2 : 4;
    int arrays = v->type == PK_DICT ? 2 : 1;
    pk_val_t **a = arena_alloc(r, cap * sizeof *a * (size_t)arrays);
    if (!a)
        return -1;
    if (v->type == PK_DICT) {
        if (v->n) {
            memcpy(a, v->keys, v->n * sizeof *a);
            memcpy(a + cap, v->vals, v->n * sizeof *a);
        }
        v->keys = a, v->vals = a + cap;
    } else {
        if (v->n)
            memcpy(a, v->items, v->n * sizeof *a);
        v->items = a;
    }
    v->cap = cap;
    return 0;
}

static int push(reader_t *r, pk_val_t *v)
{
    if (!v)
        return -1;
    if (!vec_reserve((void **)&r->stack, &r->stack_cap, r->sp + 1, sizeof *r->stack))
        return fail(r, "out of host memory");
    r->stack[r->sp++] = v;
    return 0;
}

/* The stack floor: values below the innermost open mark are out of reach. */
static size_t stack_floor(const reader_t *r)
{
    return r->nmarks ? r->marks[r->nmarks - 1] : 0;
}

static pk_val_t *pop(reader_t *r, const char *op)
{
    if (r->sp <= stack_floor(r)) {
        fail(r, "%s: the stack is empty", op);
        return NULL;
    }
    return r->stack[--r->sp];
}

static pk_val_t *top(reader_t *r, const char *op)
{
    if (r->sp <= stack_floor(r)) {
        fail(r, "%s: the stack is empty", op);
        return NULL;
    }
    return r->stack[r->sp - 1];
}

/* The bytes of an operand, or NULL (error set) when the file ends. */
static const uint8_t *take(reader_t *r, size_t n, const char *what)
{
    if ((size_t)(r->end - r->p) < n) {
        fail(r, "file ends inside the %zu-byte operand of %s (%zu left)", n, what, (size_t)(r->end - r->p));
        return NULL;
    }
    const uint8_t *q = r->p;
    r->p += n;
    return q;
}

static uint64_t le(const uint8_t *b, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = n; i-- > 0;)
        v = v << 8 | b[i];
    return v;
}

/* The position where the innermost mark's items start; pops the mark. */
static int pop_mark(reader_t *r, const char *op, size_t *start)
{
    if (r->nmarks == 0)
        return fail(r, "%s without a MARK", op);
    *start = r->marks[--r->nmarks];
    return 0;
}

/* The str or bytes opcodes: a length of lenbytes bytes, then the data. */
static int op_string(reader_t *r, pk_type_t type, unsigned lenbytes, const char *name)
{
    const char *what = type == PK_STR ? "string" : "bytes object";
    const uint8_t *b = take(r, lenbytes, name);
    if (!b)
        return -1;
    uint64_t n = le(b, lenbytes);
    if (n > (uint64_t)(r->end - r->p))
        return fail(r, "file ends inside a %s %s of %llu bytes", name, what, (unsigned long long)n);
    pk_val_t *v = new_val(r, type);
    if (!v)
        return -1;
    v->str = (const char *)r->p, v->len = (size_t)n;
    r->p += n;
    return push(r, v);
}

static int op_int(reader_t *r, unsigned n, bool is_signed, const char *name)
{
    const uint8_t *b = take(r, n, name);
    pk_val_t *v = b ? new_val(r, PK_INT) : NULL;
    if (!v)
        return -1;
    uint64_t u = le(b, n);
    if (is_signed && n == 4)
        v->i = (int32_t)(uint32_t)u;
    else
        v->i = (int64_t)u;
    return push(r, v);
}

/* LONG1 / LONG4: a little-endian two's complement integer of n bytes. */
static int op_long(reader_t *r, unsigned lenbytes, const char *name)
{
    const uint8_t *b = take(r, lenbytes, name);
    if (!b)
        return -1;
    uint64_t n = le(b, lenbytes);
    if (n > (uint64_t)(r->end - r->p))
        return fail(r, "file ends inside a %s integer of %llu bytes", name, (unsigned long long)n);
    const uint8_t *d = r->p;
    r->p += n;
    pk_val_t *v = new_val(r, PK_INT);
    if (!v)
        return -1;
    if (n == 0)
        return push(r, v);
    bool neg = d[n - 1] & 0x80;
    /* bytes beyond 8 must only extend the sign */
    for (uint64_t i = 8; i < n; i++)
        if (d[i] != (neg ? 0xff : 0x00))
            v->big = true;
    if (n > 8 && !v->big && ((d[7] & 0x80) != 0) != neg)
        v->big = true;
    if (v->big)
        return push(r, v);
    uint64_t u = 0;
    for (uint64_t i = n < 8 ? n : 8; i-- > 0;)
        u = u << 8 | d[i];
    if (n < 8 && neg)
        u |= ~(uint64_t)0 << (8 * n);
    v->i = (int64_t)u;
    return push(r, v);
}

static int op_float(reader_t *r)
{
    const uint8_t *b = take(r, 8, "BINFLOAT");
    pk_val_t *v = b ? new_val(r, PK_FLOAT) : NULL;
    if (!v)
        return -1;
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = u << 8 | b[i]; /* big-endian */
    memcpy(&v->f, &u, sizeof v->f);
    return push(r, v);
}

/* Replaces the values from stack position start up with a new list, tuple
 * or set of them. */
static int collect(reader_t *r, pk_type_t type, size_t start)
{
    pk_val_t *v = new_val(r, type);
    if (!v)
        return -1;
    size_t n = r->sp - start;
    if (n) {
        v->items = arena_alloc(r, n * sizeof *v->items);
        if (!v->items)
            return -1;
        memcpy(v->items, r->stack + start, n * sizeof *v->items);
    }
    v->n = v->cap = n;
    r->sp = start;
    return push(r, v);
}

/* LIST, TUPLE, FROZENSET: the values above the innermost mark. */
static int op_collect(reader_t *r, pk_type_t type, const char *name)
{
    size_t start = 0;
    return pop_mark(r, name, &start) == 0 ? collect(r, type, start) : -1;
}

/* TUPLE1, TUPLE2, TUPLE3: the top n values. */
static int op_tuple_n(reader_t *r, size_t n, const char *name)
{
    if (r->sp - stack_floor(r) < n)
        return fail(r, "%s needs %zu values on the stack", name, n);
    return collect(r, PK_TUPLE, r->sp - n);
}

/* Where the items of APPEND(S), ADDITEMS and SETITEM(S) start: above the
 * innermost mark (many, the mark is popped) or the top `single` values;
 * and the container below them, which must be of type `want`. */
static pk_val_t *items_target(reader_t *r, bool many, size_t single, pk_type_t want, const char *name, size_t *start)
{
    if (many) {
        if (pop_mark(r, name, start) != 0)
            return NULL;
    } else {
        if (r->sp < stack_floor(r) + single + 1) {
            fail(r, "%s needs a %s and %zu value(s) on the stack", name, want == PK_DICT ? "dict" : "list", single);
            return NULL;
        }
        *start = r->sp - single;
    }
    if (*start == stack_floor(r) || *start == 0) {
        fail(r, "%s: no %s below the items", name, want == PK_DICT ? "dict" : want == PK_SET ? "set" : "list");
        return NULL;
    }
    pk_val_t *target = r->stack[*start - 1];
    if (target->type != want) {
        fail(r, "%s onto a %s", name, pk_type_name(target));
        return NULL;
    }
    return target;
}

/* APPEND(S) / ADDITEMS: the items go into the list or set below them. */
static int op_append(reader_t *r, bool many, pk_type_t want, const char *name)
{
    size_t start = 0;
    pk_val_t *target = items_target(r, many, 1, want, name, &start);
    if (!target)
        return -1;
    for (size_t i = start; i < r->sp; i++) {
        if (grow(r, target) != 0)
            return -1;
        target->items[target->n++] = r->stack[i];
    }
    r->sp = start;
    return 0;
}

/* Key, value pairs from the stack at start into dict d. */
static int put_pairs(reader_t *r, pk_val_t *d, size_t start, const char *name)
{
    if ((r->sp - start) % 2)
        return fail(r, "%s with an odd number of items (%zu)", name, r->sp - start);
    for (size_t i = start; i < r->sp; i += 2) {
        if (grow(r, d) != 0)
            return -1;
        d->keys[d->n] = r->stack[i];
        d->vals[d->n++] = r->stack[i + 1];
    }
    r->sp = start;
    return 0;
}

/* SETITEM(S): key, value pairs go into the dict below them. */
static int op_setitems(reader_t *r, bool many, const char *name)
{
    size_t start = 0;
    pk_val_t *d = items_target(r, many, 2, PK_DICT, name, &start);
    return d ? put_pairs(r, d, start, name) : -1;
}

/* DICT: the pairs above the mark make a new dict. */
static int op_dict(reader_t *r)
{
    size_t start = 0;
    if (pop_mark(r, "DICT", &start) != 0)
        return -1;
    pk_val_t *d = new_val(r, PK_DICT);
    if (!d || put_pairs(r, d, start, "DICT") != 0)
        return -1;
    return push(r, d);
}

/* MEMOIZE, BINPUT, LONG_BINPUT: the top value is stored under id. */
static int memo_put(reader_t *r, uint64_t id, const char *name)
{
    pk_val_t *v = top(r, name);
    if (!v)
        return -1;
    if (id > (uint64_t)(r->end - r->start))
        return fail(r, "memo index %llu is beyond what a file of %zu bytes can use", (unsigned long long)id,
                    (size_t)(r->end - r->start));
    if (id >= r->memo_cap) {
        size_t had = r->memo_cap;
        if (!vec_reserve((void **)&r->memo, &r->memo_cap, (size_t)id + 1, sizeof *r->memo))
            return fail(r, "out of host memory");
        memset(r->memo + had, 0, (r->memo_cap - had) * sizeof *r->memo);
    }
    if (!r->memo[id])
        r->memo_count++;
    r->memo[id] = v;
    return 0;
}

/* BINGET, LONG_BINGET: the value stored under id, shared, not copied. */
static int memo_get(reader_t *r, uint64_t id)
{
    if (id >= r->memo_cap || !r->memo[id])
        return fail(r, "memo index %llu was never stored", (unsigned long long)id);
    return push(r, r->memo[id]);
}

/* Opcodes never run: those that name, build or call objects, and the text
 * opcodes of protocol 0 and Python 2 strings (no snapshot uses them). */
static const struct {
    uint8_t op;
    bool text;
    const char *name;
} unread[] = {
    {'c', false, "GLOBAL"},     {0x93, false, "STACK_GLOBAL"}, {'i', false, "INST"},
    {'o', false, "OBJ"},        {'R', false, "REDUCE"},        {0x81, false, "NEWOBJ"},
    {0x92, false, "NEWOBJ_EX"}, {'b', false, "BUILD"},         {0x82, false, "EXT1"},
    {0x83, false, "EXT2"},      {0x84, false, "EXT4"},         {'P', false, "PERSID"},
    {'Q', false, "BINPERSID"},  {0x97, false, "NEXT_BUFFER"},  {0x98, false, "READONLY_BUFFER"},
    {'I', true, "INT"},         {'L', true, "LONG"},           {'S', true, "STRING"},
    {'V', true, "UNICODE"},     {'F', true, "FLOAT"},          {'g', true, "GET"},
    {'p', true, "PUT"},         {'T', true, "BINSTRING"},      {'U', true, "SHORT_BINSTRING"},
};

/* Runs one opcode; 1 at STOP. */
static int step(reader_t *r)
{
    r->op_at = (size_t)(r->p - r->start);
    uint8_t op = *r->p++;
    const uint8_t *b;
    switch (op) {
    case 0x80: /* PROTO */
        if (!(b = take(r, 1, "PROTO")))
            return -1;
        if (b[0] > 5)
            return fail(r, "pickle protocol %u (this reader reads 0 to 5)", b[0]);
        return 0;
    case 0x95: /* FRAME: a length, then that many bytes of opcodes */
        if (!(b = take(r, 8, "FRAME")))
            return -1;
        if (le(b, 8) > (uint64_t)(r->end - r->p))
            return fail(r, "FRAME of %llu bytes, only %zu left", (unsigned long long)le(b, 8), (size_t)(r->end - r->p));
        return 0;
    case '.': return 1; /* STOP */
    case '(': /* MARK */
        if (!vec_reserve((void **)&r->marks, &r->marks_cap, r->nmarks + 1, sizeof *r->marks))
            return fail(r, "out of host memory");
        r->marks[r->nmarks++] = r->sp;
        return 0;
    case '0': /* POP: the top value, or the innermost mark if none is above it (as Python) */
        if (r->sp == stack_floor(r) && r->nmarks) {
            r->nmarks--;
            return 0;
        }
        return pop(r, "POP") ? 0 : -1;
    case '1': { /* POP_MARK */
        size_t start = 0;
        if (pop_mark(r, "POP_MARK", &start) != 0)
            return -1;
        r->sp = start;
        return 0;
    }
    case '2': { /* DUP */
        pk_val_t *v = top(r, "DUP");
        return v ? push(r, v) : -1;
    }
    case 'N': return push(r, new_val(r, PK_NONE));
    case 0x88:
    case 0x89: { /* NEWTRUE, NEWFALSE */
        pk_val_t *v = new_val(r, PK_BOOL);
        if (v)
            v->b = op == 0x88, v->i = v->b;
        return push(r, v);
    }
    case 'J': return op_int(r, 4, true, "BININT");
    case 'K': return op_int(r, 1, false, "BININT1");
    case 'M': return op_int(r, 2, false, "BININT2");
    case 0x8a: return op_long(r, 1, "LONG1");
    case 0x8b: return op_long(r, 4, "LONG4");
    case 'G': return op_float(r);
    case 0x8c: return op_string(r, PK_STR, 1, "SHORT_BINUNICODE");
    case 'X': return op_string(r, PK_STR, 4, "BINUNICODE");
    case 0x8d: return op_string(r, PK_STR, 8, "BINUNICODE8");
    case 'C': return op_string(r, PK_BYTES, 1, "SHORT_BINBYTES");
    case 'B': return op_string(r, PK_BYTES, 4, "BINBYTES");
    case 0x8e: return op_string(r, PK_BYTES, 8, "BINBYTES8");
    case 0x96: return op_string(r, PK_BYTES, 8, "BYTEARRAY8");
    case '}': return push(r, new_val(r, PK_DICT));
    case ']': return push(r, new_val(r, PK_LIST));
    case ')': return push(r, new_val(r, PK_TUPLE));
    case 0x8f: return push(r, new_val(r, PK_SET)); /* EMPTY_SET */
    case 's': return op_setitems(r, false, "SETITEM");
    case 'u': return op_setitems(r, true, "SETITEMS");
    case 'a': return op_append(r, false, PK_LIST, "APPEND");
    case 'e': return op_append(r, true, PK_LIST, "APPENDS");
    case 0x90: return op_append(r, true, PK_SET, "ADDITEMS");
    case 0x91: return op_collect(r, PK_SET, "FROZENSET");
    case 'l': return op_collect(r, PK_LIST, "LIST");
    case 't': return op_collect(r, PK_TUPLE, "TUPLE");
    case 'd': return op_dict(r);
    case 0x85: return op_tuple_n(r, 1, "TUPLE1");
    case 0x86: return op_tuple_n(r, 2, "TUPLE2");
    case 0x87: return op_tuple_n(r, 3, "TUPLE3");
    case 0x94: return memo_put(r, r->memo_count, "MEMOIZE");
    case 'q': return (b = take(r, 1, "BINPUT")) ? memo_put(r, b[0], "BINPUT") : -1;
    case 'r': return (b = take(r, 4, "LONG_BINPUT")) ? memo_put(r, le(b, 4), "LONG_BINPUT") : -1;
    case 'h': return (b = take(r, 1, "BINGET")) ? memo_get(r, b[0]) : -1;
    case 'j': return (b = take(r, 4, "LONG_BINGET")) ? memo_get(r, le(b, 4)) : -1;
    default: break;
    }
    char ch[5] = ""; /* " 'c'" for a printable opcode */
    if (op > 0x20 && op < 0x7f)
        snprintf(ch, sizeof ch, " '%c'", op);
    for (size_t k = 0; k < sizeof unread / sizeof unread[0]; k++) {
        if (unread[k].op != op)
            continue;
        if (unread[k].text)
            return fail(r, "opcode 0x%02x%s (%s) is not read: a text opcode of pickle protocol 0 or a Python 2 string",
                        op, ch, unread[k].name);
        return fail(r, "opcode 0x%02x%s (%s) refused: only plain data is read, nothing is looked up or run", op, ch,
                    unread[k].name);
    }
    return fail(r, "unknown opcode 0x%02x", op);
}

int pk_parse(const uint8_t *data, size_t len, pk_doc_t *doc, char *err, size_t errlen)
{
    reader_t r = {.p = data, .start = data, .end = data + len, .err = err, .errlen = errlen};
    int rc = 0;
    doc->root = NULL;
    doc->arena = NULL;
    if (err && errlen)
        err[0] = '\0';
    while (rc == 0) {
        if (r.p == r.end) {
            r.op_at = len;
            rc = fail(&r, "file ends without a STOP opcode (truncated?)");
            break;
        }
        rc = step(&r);
    }
    if (rc == 1) {
        r.op_at = (size_t)(r.p - r.start - 1);
        if (r.nmarks)
            rc = fail(&r, "STOP with %zu MARK(s) still open", r.nmarks);
        else if (r.sp != 1)
            rc = fail(&r, "STOP with %zu values on the stack (expected 1)", r.sp);
        else if (r.p != r.end) {
            r.op_at = (size_t)(r.p - r.start);
            rc = fail(&r, "%zu bytes after STOP", (size_t)(r.end - r.p));
        } else
            rc = 0;
    }
    if (rc == 0)
        doc->root = r.stack[0];
    hostalloc_free(r.stack);
    hostalloc_free(r.marks);
    hostalloc_free(r.memo);
    doc->arena = r.arena;
    if (rc != 0)
        pk_free(doc);
    return rc == 0 ? 0 : -1;
}

void pk_free(pk_doc_t *doc)
{
    for (chunk_t *c = doc->arena, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    doc->arena = NULL;
    doc->root = NULL;
}

const pk_val_t *pk_get(const pk_val_t *d, const char *key)
{
    if (!d || d->type != PK_DICT)
        return NULL;
    for (size_t i = d->n; i-- > 0;)
        if (pk_str_eq(d->keys[i], key))
            return d->vals[i];
    return NULL;
}

bool pk_str_eq(const pk_val_t *v, const char *s)
{
    return v && v->type == PK_STR && strlen(s) == v->len && memcmp(v->str, s, v->len) == 0;
}

bool pk_int(const pk_val_t *v, int64_t *out)
{
    if (!v || (v->type != PK_INT && v->type != PK_BOOL) || v->big)
        return false;
    *out = v->i;
    return true;
}

const char *pk_type_name(const pk_val_t *v)
{
    static const char *const names[] = {"None", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict", "set"};
    if (!v)
        return "nothing";
    return (unsigned)v->type < sizeof names / sizeof names[0] ? names[v->type] : "?";
}
