/*
 * A pickle reader for plain data: what torch.cuda.memory._dump_snapshot
 * writes (dicts, lists, tuples, strings, ints, floats, booleans, None).
 * Every opcode that would name or call a global (GLOBAL, STACK_GLOBAL,
 * INST, OBJ, REDUCE, NEWOBJ, NEWOBJ_EX, BUILD, EXT1/2/4, PERSID,
 * BINPERSID) is refused with an error naming it, as is any opcode it does
 * not know; nothing from the file is ever executed or looked up.
 *
 * Protocols 0-5 framing is accepted (PROTO, FRAME), with the binary
 * opcodes of protocols 1-5 for the plain types; the text opcodes of
 * protocol 0 are refused (no snapshot uses them).
 *
 * The result is a tree of pk_val_t in one arena freed by pk_free; strings
 * point into the input buffer, which must outlive the document.  A memo
 * reference (BINGET) shares the value, so the "tree" may be a graph, even
 * a cyclic one in a hostile file: walk it by schema, never recursively
 * without a depth bound.
 */
#ifndef CUCACHE_REPLAY_PICKLE_H
#define CUCACHE_REPLAY_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum pk_type_e {
    PK_NONE,
    PK_BOOL,
    PK_INT,   /* i; big: did not fit in int64 (i is then 0) */
    PK_FLOAT, /* f */
    PK_STR,   /* str, len: UTF-8 as in the file, not NUL-terminated */
    PK_BYTES, /* str, len */
    PK_LIST,  /* items[0 .. n) */
    PK_TUPLE, /* items[0 .. n) */
    PK_DICT,  /* keys[k], vals[k] for k in [0, n), in insertion order; a
               * repeated key keeps both entries (pk_get finds the last) */
    PK_SET,   /* items (EMPTY_SET/ADDITEMS, FROZENSET) */
} pk_type_t;

typedef struct pk_val_s pk_val_t;
struct pk_val_s {
    pk_type_t type;
    bool big;
    bool b;
    int64_t i;
    double f;
    const char *str;
    size_t len;
    pk_val_t **items; /* list, tuple, set */
    pk_val_t **keys;  /* dict */
    pk_val_t **vals;  /* dict */
    size_t n;
    size_t cap;
};

typedef struct pk_doc_s {
    pk_val_t *root;
    void *arena; /* private */
} pk_doc_t;

/* Parses a whole pickle.  0, or -1 with err naming the problem and its
 * byte offset ("offset 1234: opcode 0x63 'c' (GLOBAL) refused: only plain
 * data is read"; "offset 99: file ends inside a BINUNICODE string of 4000
 * bytes"; "offset 57: memo index 12 was never stored").  Trailing bytes
 * after STOP are an error too.  Limits: nesting of MARKs and the stack are
 * bounded only by the input's length; host memory failure is an error. */
int pk_parse(const uint8_t *data, size_t len, pk_doc_t *doc, char *err, size_t errlen);
void pk_free(pk_doc_t *doc);

/* The value under string key `key` in a dict (the last if repeated), or
 * NULL (also when d is NULL or not a dict). */
const pk_val_t *pk_get(const pk_val_t *d, const char *key);
/* Whether v is a string equal to s. */
bool pk_str_eq(const pk_val_t *v, const char *s);
/* v as an integer (PK_INT not big, or PK_BOOL); false otherwise. */
bool pk_int(const pk_val_t *v, int64_t *out);
/* A short name of v's type ("dict", "list", "str", ...) for errors. */
const char *pk_type_name(const pk_val_t *v);

#endif
