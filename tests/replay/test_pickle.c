/*
 * The pickle reader (replay/pickle.c).  Proves: the plain types read as
 * Python wrote them (pickles made by Python with protocols 2, 4 and 5 are
 * embedded below, and a snapshot-shaped one built by hand), memo references
 * share values, integers of every width and sign; every opcode that names or
 * calls a global is refused with its name and offset, and every byte that is
 * no opcode is named as unknown; every prefix of a valid pickle, and every
 * one-byte change of one, is an error or a document, never a crash;
 * malformed stacks, marks, memo references and trailing bytes are named.
 * With PK_TEST_FILE=path it also reads that file (the shared snapshots),
 * and with PK_TEST_EVENTS=n checks device_traces[0] holds n events.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pickle.h"

/* Written by Python 3.11.7: pickle.dumps({'segments': [], 'device_traces': [[{'action':
 * 'alloc', 'addr': 140000000000000, 'size': 512, 'stream': 0}, {'action':
 * 'free_completed', 'addr': 140000000000000, 'size': 512, 'stream': 0}]],
 * 'n': -5, 'big': 2**70, 'neg': -2**40, 'f': 1.5, 't': (1, 'x', None, True),
 * 's': {3}, 'b': b'ab'}, protocol=4) */
static const uint8_t python4[] = {
    0x80, 0x04, 0x95, 0xe3, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7d, 0x94, 0x28, 0x8c, 0x08, 0x73, 0x65, 0x67,
    0x6d, 0x65, 0x6e, 0x74, 0x73, 0x94, 0x5d, 0x94, 0x8c, 0x0d, 0x64, 0x65, 0x76, 0x69, 0x63, 0x65, 0x5f, 0x74, 0x72,
    0x61, 0x63, 0x65, 0x73, 0x94, 0x5d, 0x94, 0x5d, 0x94, 0x28, 0x7d, 0x94, 0x28, 0x8c, 0x06, 0x61, 0x63, 0x74, 0x69,
    0x6f, 0x6e, 0x94, 0x8c, 0x05, 0x61, 0x6c, 0x6c, 0x6f, 0x63, 0x94, 0x8c, 0x04, 0x61, 0x64, 0x64, 0x72, 0x94, 0x8a,
    0x06, 0x00, 0xc0, 0x44, 0x4a, 0x54, 0x7f, 0x8c, 0x04, 0x73, 0x69, 0x7a, 0x65, 0x94, 0x4d, 0x00, 0x02, 0x8c, 0x06,
    0x73, 0x74, 0x72, 0x65, 0x61, 0x6d, 0x94, 0x4b, 0x00, 0x75, 0x7d, 0x94, 0x28, 0x68, 0x07, 0x8c, 0x0e, 0x66, 0x72,
    0x65, 0x65, 0x5f, 0x63, 0x6f, 0x6d, 0x70, 0x6c, 0x65, 0x74, 0x65, 0x64, 0x94, 0x68, 0x09, 0x8a, 0x06, 0x00, 0xc0,
    0x44, 0x4a, 0x54, 0x7f, 0x68, 0x0a, 0x4d, 0x00, 0x02, 0x68, 0x0b, 0x4b, 0x00, 0x75, 0x65, 0x61, 0x8c, 0x01, 0x6e,
    0x94, 0x4a, 0xfb, 0xff, 0xff, 0xff, 0x8c, 0x03, 0x62, 0x69, 0x67, 0x94, 0x8a, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x40, 0x8c, 0x03, 0x6e, 0x65, 0x67, 0x94, 0x8a, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x8c,
    0x01, 0x66, 0x94, 0x47, 0x3f, 0xf8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x8c, 0x01, 0x74, 0x94, 0x28, 0x4b, 0x01,
    0x8c, 0x01, 0x78, 0x94, 0x4e, 0x88, 0x74, 0x94, 0x8c, 0x01, 0x73, 0x94, 0x8f, 0x94, 0x28, 0x4b, 0x03, 0x90, 0x8c,
    0x01, 0x62, 0x94, 0x43, 0x02, 0x61, 0x62, 0x94, 0x75, 0x2e,
};

/* Written by Python 3.11.7 (BINPUT/BINGET, no FRAME; the second event shares
 * the first's frames list): frames = [{'filename': 'train.py', 'line': 12}];
 * ev = lambda a: {'action': a, 'addr': 0x7f0000000000, 'size': 512, 'stream':
 * 0, 'frames': frames}; pickle.dumps({'segments': [{'address': 0x7f0000000000,
 * 'total_size': 2097152, 'blocks': [{'size': 512, 'state':
 * 'active_allocated'}]}], 'device_traces': [[ev('alloc'),
 * ev('free_requested')]], 't': ((1,), (-1, 2), (1.25, None, False), (1, 2, 3,
 * 4, 5)), 'max': 2**63 - 1, 'min': -2**63, 'over': 2**63, 'neg': -300,
 * 'u16': 65535}, protocol=2) */
static const uint8_t python2[] = {
    0x80, 0x02, 0x7d, 0x71, 0x00, 0x28, 0x58, 0x08, 0x00, 0x00, 0x00, 0x73, 0x65, 0x67, 0x6d, 0x65, 0x6e, 0x74, 0x73,
    0x71, 0x01, 0x5d, 0x71, 0x02, 0x7d, 0x71, 0x03, 0x28, 0x58, 0x07, 0x00, 0x00, 0x00, 0x61, 0x64, 0x64, 0x72, 0x65,
    0x73, 0x73, 0x71, 0x04, 0x8a, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7f, 0x58, 0x0a, 0x00, 0x00, 0x00, 0x74, 0x6f,
    0x74, 0x61, 0x6c, 0x5f, 0x73, 0x69, 0x7a, 0x65, 0x71, 0x05, 0x4a, 0x00, 0x00, 0x20, 0x00, 0x58, 0x06, 0x00, 0x00,
    0x00, 0x62, 0x6c, 0x6f, 0x63, 0x6b, 0x73, 0x71, 0x06, 0x5d, 0x71, 0x07, 0x7d, 0x71, 0x08, 0x28, 0x58, 0x04, 0x00,
    0x00, 0x00, 0x73, 0x69, 0x7a, 0x65, 0x71, 0x09, 0x4d, 0x00, 0x02, 0x58, 0x05, 0x00, 0x00, 0x00, 0x73, 0x74, 0x61,
    0x74, 0x65, 0x71, 0x0a, 0x58, 0x10, 0x00, 0x00, 0x00, 0x61, 0x63, 0x74, 0x69, 0x76, 0x65, 0x5f, 0x61, 0x6c, 0x6c,
    0x6f, 0x63, 0x61, 0x74, 0x65, 0x64, 0x71, 0x0b, 0x75, 0x61, 0x75, 0x61, 0x58, 0x0d, 0x00, 0x00, 0x00, 0x64, 0x65,
    0x76, 0x69, 0x63, 0x65, 0x5f, 0x74, 0x72, 0x61, 0x63, 0x65, 0x73, 0x71, 0x0c, 0x5d, 0x71, 0x0d, 0x5d, 0x71, 0x0e,
    0x28, 0x7d, 0x71, 0x0f, 0x28, 0x58, 0x06, 0x00, 0x00, 0x00, 0x61, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x71, 0x10, 0x58,
    0x05, 0x00, 0x00, 0x00, 0x61, 0x6c, 0x6c, 0x6f, 0x63, 0x71, 0x11, 0x58, 0x04, 0x00, 0x00, 0x00, 0x61, 0x64, 0x64,
    0x72, 0x71, 0x12, 0x8a, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7f, 0x68, 0x09, 0x4d, 0x00, 0x02, 0x58, 0x06, 0x00,
    0x00, 0x00, 0x73, 0x74, 0x72, 0x65, 0x61, 0x6d, 0x71, 0x13, 0x4b, 0x00, 0x58, 0x06, 0x00, 0x00, 0x00, 0x66, 0x72,
    0x61, 0x6d, 0x65, 0x73, 0x71, 0x14, 0x5d, 0x71, 0x15, 0x7d, 0x71, 0x16, 0x28, 0x58, 0x08, 0x00, 0x00, 0x00, 0x66,
    0x69, 0x6c, 0x65, 0x6e, 0x61, 0x6d, 0x65, 0x71, 0x17, 0x58, 0x08, 0x00, 0x00, 0x00, 0x74, 0x72, 0x61, 0x69, 0x6e,
    0x2e, 0x70, 0x79, 0x71, 0x18, 0x58, 0x04, 0x00, 0x00, 0x00, 0x6c, 0x69, 0x6e, 0x65, 0x71, 0x19, 0x4b, 0x0c, 0x75,
    0x61, 0x75, 0x7d, 0x71, 0x1a, 0x28, 0x68, 0x10, 0x58, 0x0e, 0x00, 0x00, 0x00, 0x66, 0x72, 0x65, 0x65, 0x5f, 0x72,
    0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x65, 0x64, 0x71, 0x1b, 0x68, 0x12, 0x8a, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x7f, 0x68, 0x09, 0x4d, 0x00, 0x02, 0x68, 0x13, 0x4b, 0x00, 0x68, 0x14, 0x68, 0x15, 0x75, 0x65, 0x61, 0x58, 0x01,
    0x00, 0x00, 0x00, 0x74, 0x71, 0x1c, 0x28, 0x4b, 0x01, 0x85, 0x71, 0x1d, 0x4a, 0xff, 0xff, 0xff, 0xff, 0x4b, 0x02,
    0x86, 0x71, 0x1e, 0x47, 0x3f, 0xf4, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x4e, 0x89, 0x87, 0x71, 0x1f, 0x28, 0x4b,
    0x01, 0x4b, 0x02, 0x4b, 0x03, 0x4b, 0x04, 0x4b, 0x05, 0x74, 0x71, 0x20, 0x74, 0x71, 0x21, 0x58, 0x03, 0x00, 0x00,
    0x00, 0x6d, 0x61, 0x78, 0x71, 0x22, 0x8a, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x58, 0x03, 0x00,
    0x00, 0x00, 0x6d, 0x69, 0x6e, 0x71, 0x23, 0x8a, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x58, 0x04,
    0x00, 0x00, 0x00, 0x6f, 0x76, 0x65, 0x72, 0x71, 0x24, 0x8a, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80,
    0x00, 0x58, 0x03, 0x00, 0x00, 0x00, 0x6e, 0x65, 0x67, 0x71, 0x25, 0x4a, 0xd4, 0xfe, 0xff, 0xff, 0x58, 0x03, 0x00,
    0x00, 0x00, 0x75, 0x31, 0x36, 0x71, 0x26, 0x4d, 0xff, 0xff, 0x75, 0x2e,
};

/* Written by Python 3.11.7: pickle.dumps([frozenset({7}), bytearray(b'xy'),
 * set(), (), b'\x00\xff', True, 0.1, -1.5e300], protocol=5) */
static const uint8_t python5[] = {
    0x80, 0x05, 0x95, 0x31, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x5d, 0x94, 0x28, 0x28,
    0x4b, 0x07, 0x91, 0x94, 0x96, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x78, 0x79,
    0x94, 0x8f, 0x94, 0x29, 0x43, 0x02, 0x00, 0xff, 0x94, 0x88, 0x47, 0x3f, 0xb9, 0x99, 0x99,
    0x99, 0x99, 0x99, 0x9a, 0x47, 0xfe, 0x41, 0xeb, 0x2d, 0x66, 0x00, 0x58, 0x35, 0x65, 0x2e,
};

/* Written by Python 3.11.7: pickle.dumps({'device_traces':
 * [collections.OrderedDict()]}, protocol=2): GLOBAL at offset 28 */
static const uint8_t global2[] = {
    0x80, 0x02, 0x7d, 0x71, 0x00, 0x58, 0x0d, 0x00, 0x00, 0x00, 0x64, 0x65, 0x76, 0x69, 0x63, 0x65,
    0x5f, 0x74, 0x72, 0x61, 0x63, 0x65, 0x73, 0x71, 0x01, 0x5d, 0x71, 0x02, 0x63, 0x63, 0x6f, 0x6c,
    0x6c, 0x65, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x73, 0x0a, 0x4f, 0x72, 0x64, 0x65, 0x72, 0x65, 0x64,
    0x44, 0x69, 0x63, 0x74, 0x0a, 0x71, 0x03, 0x29, 0x52, 0x71, 0x04, 0x61, 0x73, 0x2e,
};

/* The same with protocol=4: STACK_GLOBAL at offset 59 */
static const uint8_t global4[] = {
    0x80, 0x04, 0x95, 0x38, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7d, 0x94, 0x8c, 0x0d, 0x64, 0x65,
    0x76, 0x69, 0x63, 0x65, 0x5f, 0x74, 0x72, 0x61, 0x63, 0x65, 0x73, 0x94, 0x5d, 0x94, 0x8c, 0x0b, 0x63,
    0x6f, 0x6c, 0x6c, 0x65, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x73, 0x94, 0x8c, 0x0b, 0x4f, 0x72, 0x64, 0x65,
    0x72, 0x65, 0x64, 0x44, 0x69, 0x63, 0x74, 0x94, 0x93, 0x94, 0x29, 0x52, 0x94, 0x61, 0x73, 0x2e,
};

/* A snapshot by hand, protocol 4 style (FRAME, MEMOIZE, BINGET): {'segments':
 * [], 'device_traces': [[{'action': 'alloc', 'addr': 0x7f0000001000, 'size':
 * 1024, 'stream': 0, 'frames': []}, {'action': 'free', 'addr': 0x7f0000001000,
 * 'size': 1024, 'stream': 0, 'frames': <the first's>}]]}; the second event's
 * keys and frames are BINGETs. */
static const uint8_t snap[] = {
    0x80, 4,                                                                              /* PROTO 4 */
    0x95, 145,  0,    0,    0,    0,    0,    0,    0,                                    /* FRAME: the rest */
    '}',  0x94, '(',                                                                      /* {} memo 0, MARK */
    0x8c, 8,    's',  'e',  'g',  'm',  'e',  'n',  't',  's',  0x94,                     /* memo 1 */
    ']',  0x94,                                                                           /* memo 2 */
    0x8c, 13,   'd',  'e',  'v',  'i',  'c',  'e',  '_',  't',  'r',  'a', 'c', 'e', 's', /* 'device_traces' */
    0x94, ']',  0x94, ']',  0x94, '(',                                                    /* memo 3, 4, 5, MARK */
    '}',  0x94, '(',                                                                      /* memo 6, MARK */
    0x8c, 6,    'a',  'c',  't',  'i',  'o',  'n',  0x94,                                 /* memo 7 */
    0x8c, 5,    'a',  'l',  'l',  'o',  'c',  0x94,                                       /* memo 8 */
    0x8c, 4,    'a',  'd',  'd',  'r',  0x94,                                             /* memo 9 */
    0x8a, 6,    0x00, 0x10, 0x00, 0x00, 0x00, 0x7f,                                       /* LONG1 */
    0x8c, 4,    's',  'i',  'z',  'e',  0x94, 'M',  0x00, 0x04,                           /* memo 10, BININT2 */
    0x8c, 6,    's',  't',  'r',  'e',  'a',  'm',  0x94, 'K',  0,                        /* memo 11, BININT1 */
    0x8c, 6,    'f',  'r',  'a',  'm',  'e',  's',  0x94, ']',  0x94,                     /* memo 12, 13 */
    'u',  '}',  0x94, '(',                                                                /* SETITEMS; memo 14, MARK */
    'h',  7,    0x8c, 4,    'f',  'r',  'e',  'e',  0x94,                                 /* 'action', memo 15 */
    'h',  9,    0x8a, 6,    0x00, 0x10, 0x00, 0x00, 0x00, 0x7f,                           /* 'addr' */
    'h',  10,   'M',  0x00, 0x04, 'h',  11,   'K',  0,    'h',  12,   'h', 13,            /* 'size' .. the frames */
    'u',  'e',  'a',  'u',  '.',                                                          /* SETITEMS ... STOP */
};

static int parse(const uint8_t *d, size_t n, pk_doc_t *doc, char *err)
{
    return pk_parse(d, n, doc, err, 256);
}

/* Parses d, which must be valid. */
static void parse_ok(const uint8_t *d, size_t n, pk_doc_t *doc)
{
    char err[256] = "";
    if (parse(d, n, doc, err) != 0)
        fail_msg("%s", err);
    assert_non_null(doc->root);
}

static int64_t int_of(const pk_val_t *v)
{
    int64_t i = 0;
    if (!pk_int(v, &i))
        fail_msg("%s is not an int64", pk_type_name(v));
    return i;
}

static void test_python_protocol4(void **state)
{
    pk_doc_t doc;
    parse_ok(python4, sizeof python4, &doc);
    const pk_val_t *root = doc.root;
    assert_int_equal(root->type, PK_DICT);
    const pk_val_t *traces = pk_get(root, "device_traces");
    assert_non_null(traces);
    assert_int_equal(traces->type, PK_LIST);
    assert_int_equal(traces->n, 1);
    const pk_val_t *evs = traces->items[0];
    assert_int_equal(evs->n, 2);
    assert_true(pk_str_eq(pk_get(evs->items[0], "action"), "alloc"));
    assert_int_equal(int_of(pk_get(evs->items[0], "addr")), 140000000000000ll);
    assert_int_equal(int_of(pk_get(evs->items[0], "size")), 512);
    /* the second dict's keys are memo references to the first's strings */
    assert_true(pk_str_eq(pk_get(evs->items[1], "action"), "free_completed"));
    assert_ptr_equal(evs->items[1]->keys[0], evs->items[0]->keys[0]);
    assert_int_equal(int_of(pk_get(root, "n")), -5);
    int64_t v;
    assert_false(pk_int(pk_get(root, "big"), &v)); /* 2**70 */
    assert_true(pk_get(root, "big")->big);
    assert_int_equal(int_of(pk_get(root, "neg")), -(1ll << 40));
    assert_true(pk_get(root, "f")->f == 1.5);
    const pk_val_t *t = pk_get(root, "t");
    assert_int_equal(t->type, PK_TUPLE);
    assert_int_equal(t->n, 4);
    assert_true(pk_str_eq(t->items[1], "x"));
    assert_int_equal(t->items[2]->type, PK_NONE);
    assert_true(t->items[3]->b);
    assert_int_equal(pk_get(root, "s")->type, PK_SET);
    assert_int_equal(pk_get(root, "s")->n, 1);
    assert_int_equal(int_of(pk_get(root, "s")->items[0]), 3);
    assert_int_equal(pk_get(root, "b")->type, PK_BYTES);
    assert_int_equal(pk_get(root, "b")->len, 2);
    assert_memory_equal(pk_get(root, "b")->str, "ab", 2);
    assert_null(pk_get(root, "missing"));
    assert_string_equal(pk_type_name(pk_get(root, "segments")), "list");
    pk_free(&doc);
    assert_null(doc.root);
    assert_null(doc.arena);
}

static void test_python_protocol2(void **state)
{
    pk_doc_t doc;
    parse_ok(python2, sizeof python2, &doc);
    const pk_val_t *root = doc.root;
    const pk_val_t *seg = pk_get(root, "segments")->items[0];
    assert_int_equal(int_of(pk_get(seg, "address")), 0x7f0000000000ll);
    assert_int_equal(int_of(pk_get(seg, "total_size")), 2097152);
    assert_true(pk_str_eq(pk_get(pk_get(seg, "blocks")->items[0], "state"), "active_allocated"));
    const pk_val_t *evs = pk_get(root, "device_traces")->items[0];
    assert_int_equal(evs->n, 2);
    assert_true(pk_str_eq(pk_get(evs->items[1], "action"), "free_requested"));
    assert_int_equal(int_of(pk_get(evs->items[1], "size")), 512);
    assert_int_equal(int_of(pk_get(evs->items[1], "stream")), 0);
    const pk_val_t *frames = pk_get(evs->items[0], "frames");
    assert_ptr_equal(pk_get(evs->items[1], "frames"), frames); /* BINGET of the list */
    assert_int_equal(int_of(pk_get(frames->items[0], "line")), 12);
    const pk_val_t *t = pk_get(root, "t");
    assert_int_equal(t->n, 4);
    assert_int_equal(t->items[0]->n, 1);
    assert_int_equal(int_of(t->items[1]->items[0]), -1);
    assert_true(t->items[2]->items[0]->f == 1.25);
    assert_int_equal(t->items[2]->items[1]->type, PK_NONE);
    assert_int_equal(t->items[2]->items[2]->type, PK_BOOL);
    assert_false(t->items[2]->items[2]->b);
    assert_int_equal(t->items[3]->n, 5);
    assert_int_equal(int_of(t->items[3]->items[4]), 5);
    assert_int_equal(int_of(pk_get(root, "max")), INT64_MAX);
    assert_int_equal(int_of(pk_get(root, "min")), INT64_MIN);
    assert_true(pk_get(root, "over")->big);
    assert_int_equal(int_of(pk_get(root, "neg")), -300);
    assert_int_equal(int_of(pk_get(root, "u16")), 65535);
    pk_free(&doc);
}

static void test_python_protocol5(void **state)
{
    pk_doc_t doc;
    parse_ok(python5, sizeof python5, &doc);
    const pk_val_t *l = doc.root;
    assert_int_equal(l->type, PK_LIST);
    assert_int_equal(l->n, 8);
    assert_int_equal(l->items[0]->type, PK_SET); /* frozenset */
    assert_int_equal(int_of(l->items[0]->items[0]), 7);
    assert_int_equal(l->items[1]->type, PK_BYTES); /* bytearray */
    assert_int_equal(l->items[1]->len, 2);
    assert_memory_equal(l->items[1]->str, "xy", 2);
    assert_int_equal(l->items[2]->type, PK_SET);
    assert_int_equal(l->items[2]->n, 0);
    assert_int_equal(l->items[3]->type, PK_TUPLE);
    assert_int_equal(l->items[3]->n, 0);
    assert_int_equal(l->items[4]->len, 2);
    assert_memory_equal(l->items[4]->str, "\x00\xff", 2);
    assert_int_equal(int_of(l->items[5]), 1); /* True */
    assert_true(l->items[6]->f == 0.1);
    assert_true(l->items[7]->f == -1.5e300);
    /* strings are not copied */
    assert_true((const uint8_t *)l->items[1]->str > python5 &&
                (const uint8_t *)l->items[1]->str < python5 + sizeof python5);
    pk_free(&doc);
}

static void test_snapshot_by_hand(void **state)
{
    pk_doc_t doc;
    parse_ok(snap, sizeof snap, &doc);
    const pk_val_t *root = doc.root;
    assert_int_equal(root->n, 2);
    assert_int_equal(pk_get(root, "segments")->n, 0);
    const pk_val_t *tr = pk_get(root, "device_traces");
    assert_int_equal(tr->type, PK_LIST);
    assert_int_equal(tr->n, 1);
    const pk_val_t *evs = tr->items[0];
    assert_int_equal(evs->n, 2);
    const pk_val_t *a = evs->items[0], *f = evs->items[1];
    assert_int_equal(a->n, 5);
    assert_int_equal(f->n, 5);
    assert_true(pk_str_eq(pk_get(a, "action"), "alloc"));
    assert_true(pk_str_eq(pk_get(f, "action"), "free"));
    assert_int_equal(int_of(pk_get(a, "addr")), 0x7f0000001000ll);
    assert_int_equal(int_of(pk_get(f, "addr")), 0x7f0000001000ll);
    assert_int_equal(int_of(pk_get(f, "size")), 1024);
    assert_int_equal(int_of(pk_get(f, "stream")), 0);
    for (size_t k = 0; k < 5; k++)
        assert_ptr_equal(f->keys[k], a->keys[k]);
    assert_ptr_equal(pk_get(f, "frames"), pk_get(a, "frames"));
    assert_int_equal(pk_get(a, "frames")->type, PK_LIST);
    pk_free(&doc);
}

/* One LONG1 or LONG4 pickle: PROTO 2, the opcode, STOP. */
static void check_long(const uint8_t *bytes, size_t n, bool long4, bool big, int64_t want)
{
    uint8_t d[32];
    size_t k = 0;
    d[k++] = 0x80, d[k++] = 2;
    if (long4) {
        d[k++] = 0x8b, d[k++] = (uint8_t)n, d[k++] = 0, d[k++] = 0, d[k++] = 0;
    } else {
        d[k++] = 0x8a, d[k++] = (uint8_t)n;
    }
    memcpy(d + k, bytes, n);
    k += n;
    d[k++] = '.';
    pk_doc_t doc;
    parse_ok(d, k, &doc);
    assert_int_equal(doc.root->type, PK_INT);
    assert_int_equal(doc.root->big, big);
    if (big)
        assert_int_equal(doc.root->i, 0);
    else
        assert_int_equal(int_of(doc.root), want);
    pk_free(&doc);
}

static void test_longs(void **state)
{
    static const struct {
        uint8_t n, b[10];
        bool big;
        int64_t want;
    } cases[] = {
        {0, {0}, false, 0},
        {1, {0x7f}, false, 127},
        {1, {0x80}, false, -128},
        {1, {0xff}, false, -1},
        {2, {0x00, 0x80}, false, -32768},
        {2, {0x00, 0x01}, false, 256},
        {3, {0x00, 0x00, 0x80}, false, -(1ll << 23)},
        {5, {0x00, 0x00, 0x00, 0x00, 0x01}, false, 1ll << 32},
        {8, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, false, INT64_MAX},
        {8, {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80}, false, INT64_MIN},
        {8, {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, false, -2},
        /* 9 bytes: 2**63 and 2**64 do not fit, nor -(2**63) - 1 */
        {9, {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x00}, true, 0},
        {9, {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01}, true, 0},
        {9, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff}, true, 0},
        /* 9 or 10 bytes that only extend the sign fit */
        {9, {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0xff}, false, INT64_MIN},
        {9, {0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, false, 5},
        {10, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, false, -1},
        {10, {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80}, true, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        check_long(cases[k].b, cases[k].n, false, cases[k].big, cases[k].want);
        check_long(cases[k].b, cases[k].n, true, cases[k].big, cases[k].want);
    }
}

static void test_scalars(void **state)
{
    /* a list of: BININT -2, BININT1 255, BININT2 65535, BINFLOAT 1.5 and
     * -0.0, NEWTRUE, NEWFALSE, NONE, BINUNICODE 'ab', BINUNICODE8 'c',
     * BINBYTES, BINBYTES8, SHORT_BINBYTES, EMPTY_TUPLE; TUPLE1 etc. */
    static const uint8_t d[] = {
        0x80, 5,   ']', '(', 'J',  0xfe, 0xff, 0xff, 0xff, 'K', 0xff, 'M', 0xff, 0xff, 'G',  0x3f, 0xf8, 0,
        0,    0,   0,   0,   0,    'G',  0x80, 0,    0,    0,   0,    0,   0,    0,    0x88, 0x89, 'N',  'X',
        2,    0,   0,   0,   'a',  'b',  0x8d, 1,    0,    0,   0,    0,   0,    0,    0,    'c',  'B',  1,
        0,    0,   0,   'd', 0x8e, 0,    0,    0,    0,    0,   0,    0,   0,    'C',  0,    ')',  'K',  1,
        0x85, 'K', 1,   'K', 2,    0x86, 'K',  1,    'K',  2,   'K',  3,   0x87, 'e',  '.',
    };
    pk_doc_t doc;
    parse_ok(d, sizeof d, &doc);
    const pk_val_t *l = doc.root;
    assert_int_equal(l->n, 17);
    assert_int_equal(int_of(l->items[0]), -2);
    assert_int_equal(int_of(l->items[1]), 255);
    assert_int_equal(int_of(l->items[2]), 65535);
    assert_true(l->items[3]->type == PK_FLOAT && l->items[3]->f == 1.5);
    assert_true(l->items[4]->f == 0.0 && 1.0 / l->items[4]->f < 0); /* -0.0 */
    assert_true(l->items[5]->type == PK_BOOL && l->items[5]->b);
    assert_true(l->items[6]->type == PK_BOOL && !l->items[6]->b);
    assert_int_equal(int_of(l->items[6]), 0);
    assert_int_equal(l->items[7]->type, PK_NONE);
    assert_true(pk_str_eq(l->items[8], "ab"));
    assert_true(pk_str_eq(l->items[9], "c"));
    assert_true(l->items[10]->type == PK_BYTES && l->items[10]->len == 1 && l->items[10]->str[0] == 'd');
    assert_true(l->items[11]->type == PK_BYTES && l->items[11]->len == 0);
    assert_true(l->items[12]->type == PK_BYTES && l->items[12]->len == 0);
    assert_true(l->items[13]->type == PK_TUPLE && l->items[13]->n == 0);
    for (size_t k = 1; k <= 3; k++) {
        const pk_val_t *t = l->items[13 + k];
        assert_int_equal(t->type, PK_TUPLE);
        assert_int_equal(t->n, k);
        assert_int_equal(int_of(t->items[k - 1]), (int64_t)k);
    }
    pk_free(&doc);
}

static void test_marks_memo_and_cycles(void **state)
{
    /* a tuple by MARK ... TUPLE of: a list that contains itself (BINPUT,
     * BINGET, APPEND); a 5-tuple by MARK ... TUPLE; {7: 8} by DICT; [9] by
     * LIST; a FROZENSET {1, 2}; {2, 3} by EMPTY_SET, ADDITEMS; {1: 2} by
     * SETITEM; a value dropped by POP_MARK */
    static const uint8_t d[] = {
        0x80, 4,   '(', ']', 'q', 0,    'h', 0,   'a', '(', 'K', 1,   'K', 2,   'K', 3,   'K', 4,    'K',
        5,    't', '(', 'K', 7,   'K',  8,   'd', '(', 'K', 9,   'l', '(', 'K', 1,   'K', 2,   0x91, 0x8f,
        '(',  'K', 2,   'K', 3,   0x90, '}', 'K', 1,   'K', 2,   's', '(', 'N', '1', 't', '.',
    };
    pk_doc_t doc;
    parse_ok(d, sizeof d, &doc);
    const pk_val_t *t = doc.root;
    assert_int_equal(t->type, PK_TUPLE);
    assert_int_equal(t->n, 7);
    assert_int_equal(t->items[0]->type, PK_LIST);
    assert_int_equal(t->items[0]->n, 1);
    assert_ptr_equal(t->items[0]->items[0], t->items[0]); /* the cycle */
    assert_int_equal(t->items[1]->type, PK_TUPLE);
    assert_int_equal(t->items[1]->n, 5);
    assert_int_equal(int_of(t->items[1]->items[4]), 5);
    assert_int_equal(t->items[2]->type, PK_DICT);
    assert_int_equal(int_of(t->items[2]->keys[0]), 7);
    assert_int_equal(int_of(t->items[2]->vals[0]), 8);
    assert_int_equal(t->items[3]->type, PK_LIST);
    assert_int_equal(int_of(t->items[3]->items[0]), 9);
    assert_int_equal(t->items[4]->type, PK_SET);
    assert_int_equal(t->items[4]->n, 2);
    assert_int_equal(t->items[5]->type, PK_SET);
    assert_int_equal(int_of(t->items[5]->items[1]), 3);
    assert_int_equal(t->items[6]->type, PK_DICT);
    assert_int_equal(int_of(t->items[6]->vals[0]), 2);
    pk_free(&doc);
}

static void test_every_prefix_is_an_error(void **state)
{
    static const struct {
        const uint8_t *d;
        size_t n;
    } valid[] = {
        {python4, sizeof python4},
        {python2, sizeof python2},
        {python5, sizeof python5},
        {snap, sizeof snap},
    };
    for (size_t k = 0; k < sizeof valid / sizeof valid[0]; k++) {
        for (size_t n = 0; n < valid[k].n; n++) {
            pk_doc_t doc;
            char err[256] = "";
            /* a copy of exactly n bytes, so that ASan sees any read past it */
            uint8_t *cut = malloc(n ? n : 1);
            assert_non_null(cut);
            memcpy(cut, valid[k].d, n);
            assert_int_equal(pk_parse(cut, n, &doc, err, sizeof err), -1);
            if (strncmp(err, "offset ", 7) != 0)
                fail_msg("prefix %zu of pickle %zu: '%s'", n, k, err);
            assert_null(doc.root);
            assert_null(doc.arena);
            free(cut);
        }
    }
}

/* Every byte of snap changed to every other value: a document or an error
 * with an offset, never a crash (ASan and UBSan watch). */
static void test_every_byte_changed(void **state)
{
    uint8_t d[sizeof snap];
    size_t ok = 0;
    for (size_t at = 0; at < sizeof snap; at++) {
        for (unsigned v = 0; v < 256; v++) {
            if (v == snap[at])
                continue;
            memcpy(d, snap, sizeof snap);
            d[at] = (uint8_t)v;
            pk_doc_t doc;
            char err[256] = "";
            if (pk_parse(d, sizeof d, &doc, err, sizeof err) == 0) {
                ok++;
                pk_free(&doc);
            } else if (strncmp(err, "offset ", 7) != 0) {
                fail_msg("byte %zu = 0x%02x: '%s'", at, v, err);
            }
        }
    }
    assert_true(ok > 0); /* a different string byte is still a snapshot */
}

/* Parses d, which must fail with an error containing want. */
static void expect(const uint8_t *d, size_t n, const char *want)
{
    pk_doc_t doc;
    char err[256] = "";
    assert_int_equal(parse(d, n, &doc, err), -1);
    if (!strstr(err, want))
        fail_msg("error '%s' does not say '%s'", err, want);
    assert_null(doc.root);
}

#define EXPECT(want, ...)                                                                                              \
    do {                                                                                                               \
        static const uint8_t d_[] = {__VA_ARGS__};                                                                     \
        expect(d_, sizeof d_, want);                                                                                   \
    } while (0)

/* "opcode 0x63 'c' (GLOBAL)": the opcode, its character if printable, its name. */
static void opcode_text(char *buf, size_t len, uint8_t op, const char *name)
{
    if (op > 0x20 && op < 0x7f)
        snprintf(buf, len, "opcode 0x%02x '%c' (%s)", op, op, name);
    else
        snprintf(buf, len, "opcode 0x%02x (%s)", op, name);
}

static void test_globals_refused(void **state)
{
    static const struct {
        uint8_t op;
        const char *name;
    } refused[] = {
        {'c', "GLOBAL"},  {0x93, "STACK_GLOBAL"}, {'i', "INST"},      {'o', "OBJ"},          {'R', "REDUCE"},
        {0x81, "NEWOBJ"}, {0x92, "NEWOBJ_EX"},    {'b', "BUILD"},     {0x82, "EXT1"},        {0x83, "EXT2"},
        {0x84, "EXT4"},   {'P', "PERSID"},        {'Q', "BINPERSID"}, {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"},
    };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        /* at offset 2, and at offset 5 after two values (what REDUCE and
         * the like would take), with operand-like bytes after */
        uint8_t a[] = {0x80, 2, refused[k].op, 'o', 's', '\n', 'x', '\n', '.'};
        uint8_t b[] = {0x80, 4, 'N', 'K', 1, refused[k].op, 1, 2, 3, 4, '.'};
        char op[64], want[160];
        opcode_text(op, sizeof op, refused[k].op, refused[k].name);
        snprintf(want, sizeof want, "offset 2: %s refused", op);
        expect(a, sizeof a, want);
        snprintf(want, sizeof want, "offset 5: %s refused", op);
        expect(b, sizeof b, want);
    }
    /* what Python writes for an OrderedDict */
    expect(global2, sizeof global2, "offset 28: opcode 0x63 'c' (GLOBAL) refused: only plain data is read");
    expect(global4, sizeof global4, "offset 59: opcode 0x93 (STACK_GLOBAL) refused");
}

static void test_text_opcodes_refused(void **state)
{
    static const struct {
        uint8_t op;
        const char *name;
    } text[] = {
        {'I', "INT"}, {'L', "LONG"}, {'S', "STRING"},    {'V', "UNICODE"},         {'F', "FLOAT"},
        {'g', "GET"}, {'p', "PUT"},  {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"},
    };
    for (size_t k = 0; k < sizeof text / sizeof text[0]; k++) {
        uint8_t a[] = {0x80, 2, 'N', '0', text[k].op, '1', '\n', '.'};
        char op[64], want[160];
        opcode_text(op, sizeof op, text[k].op, text[k].name);
        snprintf(want, sizeof want, "offset 4: %s is not read", op);
        expect(a, sizeof a, want);
    }
    /* and without PROTO, as protocol 0 would be written */
    EXPECT("offset 0: opcode 0x49 'I' (INT) is not read", 'I', '1', '\n', '.');
}

/* Every byte that is no pickle opcode is named unknown, with its offset. */
static void test_unknown_opcodes(void **state)
{
    static const char known[] = "().012BCFGIJKLMNPQRSTUVX]abcdeghijlopqrstu}"; /* and 0x80 to 0x98 */
    size_t unknown = 0;
    for (unsigned op = 0; op < 256; op++) {
        if ((op >= 0x80 && op <= 0x98) || (op && memchr(known, (int)op, sizeof known - 1)))
            continue;
        uint8_t d[] = {0x80, 3, ']', (uint8_t)op, '.'};
        char want[64];
        snprintf(want, sizeof want, "offset 3: unknown opcode 0x%02x", op);
        expect(d, sizeof d, want);
        unknown++;
    }
    assert_int_equal(unknown, 256 - 68);
}

static void test_malformed(void **state)
{
    /* the memo */
    EXPECT("offset 2: memo index 3 was never stored", 0x80, 0x02, 'h', 0x03, '.');
    EXPECT("offset 5: memo index 1 was never stored", 0x80, 0x02, 'N', 'q', 0, 'h', 0x01, '.');
    EXPECT("offset 5: memo index 70000 was never stored", 0x80, 0x02, 'N', 'q', 0, 'j', 0x70, 0x11, 0x01, 0, '.');
    EXPECT("offset 3: memo index 4294967295 is beyond", 0x80, 0x02, 'N', 'r', 0xff, 0xff, 0xff, 0xff, '.');
    EXPECT("offset 3: memo index 200 is beyond", 0x80, 0x02, 'N', 'q', 200, '.');
    EXPECT("offset 2: BINPUT: the stack is empty", 0x80, 0x02, 'q', 0, 'N', '.');
    EXPECT("offset 3: MEMOIZE: the stack is empty", 0x80, 0x04, '(', 0x94, 'N', '.');
    /* after STOP, and no STOP */
    EXPECT("offset 4: 1 bytes after STOP", 0x80, 0x02, 'N', '.', 'N');
    EXPECT("offset 4: 2 bytes after STOP", 0x80, 0x02, 'N', '.', '.', '.');
    EXPECT("offset 3: file ends without a STOP", 0x80, 0x02, 'N');
    /* the stack */
    EXPECT("offset 2: POP: the stack is empty", 0x80, 0x02, '0', 'N', '.');
    EXPECT("offset 2: DUP: the stack is empty", 0x80, 0x02, '2', '.');
    EXPECT("offset 3: DUP: the stack is empty", 0x80, 0x02, '(', '2', '.');
    EXPECT("offset 3: TUPLE2 needs 2 values", 0x80, 0x02, 'N', 0x86, '.');
    EXPECT("offset 6: TUPLE3 needs 3 values", 0x80, 0x02, 'N', '(', 'N', 'N', 0x87, '.');
    EXPECT("offset 3: APPEND needs a list and 1 value(s)", 0x80, 0x02, ']', 'a', '.');
    EXPECT("offset 4: SETITEM needs a dict and 2 value(s)", 0x80, 0x02, '}', 'N', 's', '.');
    EXPECT("offset 2: STOP with 0 values on the stack", 0x80, 0x02, '.');
    EXPECT("offset 4: STOP with 2 values on the stack (expected 1)", 0x80, 0x02, 'N', 'N', '.');
    /* containers of the wrong type, odd pairs */
    EXPECT("offset 5: SETITEMS with an odd number of items (1)", 0x80, 0x02, '}', '(', 'N', 'u', '.');
    EXPECT("offset 8: SETITEMS with an odd number of items (3)", 0x80, 0x02, '}', '(', 'N', 'N', 'K', 1, 'u', '.');
    EXPECT("offset 6: DICT with an odd number of items (3)", 0x80, 0x02, '(', 'N', 'N', 'N', 'd', '.');
    EXPECT("offset 5: APPENDS onto a dict", 0x80, 0x02, '}', '(', 'N', 'e', '.');
    EXPECT("offset 4: APPEND onto a dict", 0x80, 0x02, '}', 'N', 'a', '.');
    EXPECT("offset 5: SETITEM onto a list", 0x80, 0x02, ']', 'N', 'N', 's', '.');
    EXPECT("offset 6: SETITEMS onto a tuple", 0x80, 0x04, ')', '(', 'N', 'N', 'u', '.');
    EXPECT("offset 5: ADDITEMS onto a list", 0x80, 0x04, ']', '(', 'N', 0x90, '.');
    EXPECT("offset 4: APPENDS: no list below the items", 0x80, 0x02, '(', 'N', 'e', '.');
    EXPECT("offset 5: APPENDS: no list below the items", 0x80, 0x02, ']', '(', '(', 'e', '.');
    /* marks */
    EXPECT("offset 3: APPENDS without a MARK", 0x80, 0x02, ']', 'e', '.');
    EXPECT("offset 2: SETITEMS without a MARK", 0x80, 0x02, 'u', '.');
    EXPECT("offset 3: TUPLE without a MARK", 0x80, 0x02, 'N', 't', '.');
    EXPECT("offset 2: LIST without a MARK", 0x80, 0x02, 'l', '.');
    EXPECT("offset 2: DICT without a MARK", 0x80, 0x02, 'd', '.');
    EXPECT("offset 2: FROZENSET without a MARK", 0x80, 0x04, 0x91, '.');
    EXPECT("offset 2: ADDITEMS without a MARK", 0x80, 0x04, 0x90, '.');
    EXPECT("offset 3: POP_MARK without a MARK", 0x80, 0x02, 'N', '1', '.');
    EXPECT("offset 4: STOP with 1 MARK(s) still open", 0x80, 0x02, '(', 'N', '.');
    EXPECT("offset 5: STOP with 2 MARK(s) still open", 0x80, 0x02, 'N', '(', '(', '.');
    /* lengths */
    EXPECT("offset 2: file ends inside a BINUNICODE string of 4000 bytes", 0x80, 0x02, 'X', 0xa0, 0x0f, 0x00, 0x00,
           'a');
    EXPECT("offset 2: file ends inside a BINUNICODE8 string of 18446744073709551615 bytes", 0x80, 0x04, 0x8d, 0xff,
           0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '.');
    EXPECT("offset 2: file ends inside a BINBYTES8 bytes object of 9223372036854775808 bytes", 0x80, 0x04, 0x8e, 0, 0,
           0, 0, 0, 0, 0, 0x80, '.');
    EXPECT("offset 2: file ends inside a SHORT_BINBYTES bytes object of 2 bytes", 0x80, 0x03, 'C', 2, '.');
    EXPECT("offset 2: file ends inside a LONG4 integer of 4294967295 bytes", 0x80, 0x02, 0x8b, 0xff, 0xff, 0xff, 0xff,
           '.');
    EXPECT("offset 2: file ends inside a LONG1 integer of 3 bytes", 0x80, 0x02, 0x8a, 3, 0, '.');
    EXPECT("offset 2: file ends inside the 4-byte operand of BININT (2 left)", 0x80, 0x02, 'J', 1, '.');
    EXPECT("offset 2: file ends inside the 8-byte operand of BINFLOAT", 0x80, 0x02, 'G', 0x3f, 0xf0);
    EXPECT("offset 2: FRAME of 100 bytes, only 2 left", 0x80, 0x04, 0x95, 100, 0, 0, 0, 0, 0, 0, 0, 'N', '.');
    EXPECT("offset 2: FRAME of 18446744073709551615 bytes", 0x80, 0x04, 0x95, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
           0xff, 'N', '.');
    EXPECT("offset 0: file ends inside the 1-byte operand of PROTO", 0x80);
    EXPECT("offset 0: pickle protocol 9", 0x80, 0x09, 'N', '.');
    EXPECT("offset 0: unknown opcode 0x00", 0x00);
    {
        pk_doc_t doc;
        char err[64] = "x";
        assert_int_equal(pk_parse((const uint8_t *)"", 0, &doc, err, sizeof err), -1);
        assert_string_equal(err, "offset 0: file ends without a STOP opcode (truncated?)");
    }
}

/* Python's semantics where they are not obvious: POP with only a mark
 * above the floor pops the mark; MEMOIZE stores under the number of ids
 * stored so far, not a counter of its own; PROTO 0 and 1 are accepted. */
static void test_python_semantics(void **state)
{
    /* PROTO 2, K 1, BINPUT 5, POP, K 2, MEMOIZE (-> id 1), POP, BINGET 1 */
    static const uint8_t memo[] = {0x80, 4, 'K', 1, 'q', 5, '0', 'K', 2, 0x94, '0', 'h', 1, '.'};
    static const uint8_t popmark[] = {0x80, 2, 'N', '(', '0', '.'};
    static const uint8_t proto1[] = {0x80, 1, ']', 'K', 3, 'a', '.'};
    static const uint8_t noproto[] = {'(', 'K', 1, 'l', '.'};
    pk_doc_t doc;
    parse_ok(memo, sizeof memo, &doc);
    assert_int_equal(int_of(doc.root), 2);
    pk_free(&doc);
    parse_ok(popmark, sizeof popmark, &doc);
    assert_int_equal(doc.root->type, PK_NONE);
    pk_free(&doc);
    parse_ok(proto1, sizeof proto1, &doc);
    assert_int_equal(int_of(doc.root->items[0]), 3);
    pk_free(&doc);
    parse_ok(noproto, sizeof noproto, &doc);
    assert_int_equal(doc.root->n, 1);
    pk_free(&doc);
    /* storing an id again replaces it and does not move MEMOIZE on */
    static const uint8_t again[] = {0x80, 4, 'K', 1, 'q', 0, '0', 'K', 2, 'q', 0, 0x94, '0', 'h', 1, '.'};
    parse_ok(again, sizeof again, &doc);
    assert_int_equal(int_of(doc.root), 2);
    pk_free(&doc);
    EXPECT("offset 13: memo index 2 was never stored", 0x80, 4, 'K', 1, 'q', 0, '0', 'K', 2, 'q', 0, 0x94, '0', 'h', 2,
           '.');
    /* a large id in a file long enough for it: the memo grows to hold it */
    enum { LONGSTR = 1100 };
    uint8_t *big = calloc(1, LONGSTR + 20);
    assert_non_null(big);
    size_t k = 0;
    big[k++] = 0x80, big[k++] = 2, big[k++] = 'X', big[k++] = LONGSTR & 0xff, big[k++] = LONGSTR >> 8, k += 2;
    memset(big + k, 'a', LONGSTR);
    k += LONGSTR;
    big[k++] = 'r', big[k++] = 1000 & 0xff, big[k++] = 1000 >> 8, k += 2; /* LONG_BINPUT 1000 */
    big[k++] = '0', big[k++] = 'j', big[k++] = 1000 & 0xff, big[k++] = 1000 >> 8, k += 2;
    big[k++] = '.';
    parse_ok(big, k, &doc);
    assert_int_equal(doc.root->len, LONGSTR);
    pk_free(&doc);
    free(big);
}

/* pk_get, pk_str_eq, pk_int, pk_type_name */
static void test_accessors(void **state)
{
    /* {'a': 1, 'b': 2.0, 'a': True, b'a': 4} by MARK ... DICT */
    static const uint8_t d[] = {
        0x80, 4, '(', 0x8c, 1,    'a', 'K', 1,    0x8c, 1, 'b', 'G', 0x40, 0,   0,   0,
        0,    0, 0,   0,    0x8c, 1,   'a', 0x88, 'C',  1, 'a', 'K', 4,    'd', '.',
    };
    pk_doc_t doc;
    parse_ok(d, sizeof d, &doc);
    const pk_val_t *root = doc.root;
    assert_int_equal(root->n, 4); /* a repeated key keeps both entries */
    assert_int_equal(int_of(root->vals[0]), 1);
    int64_t v = 7;
    assert_true(pk_int(pk_get(root, "a"), &v)); /* the last 'a': True */
    assert_int_equal(v, 1);
    assert_int_equal(pk_get(root, "a")->type, PK_BOOL);
    assert_false(pk_int(pk_get(root, "b"), &v)); /* a float */
    assert_true(pk_get(root, "b")->f == 2.0);
    assert_null(pk_get(root, "c"));
    assert_null(pk_get(root, ""));
    assert_null(pk_get(NULL, "a"));
    assert_null(pk_get(pk_get(root, "b"), "a")); /* not a dict */
    assert_true(pk_str_eq(root->keys[0], "a"));
    assert_false(pk_str_eq(root->keys[0], "ab"));
    assert_false(pk_str_eq(root->keys[0], ""));
    assert_false(pk_str_eq(root->keys[3], "a")); /* bytes, not str */
    assert_false(pk_str_eq(NULL, "a"));
    assert_false(pk_int(NULL, &v));
    assert_false(pk_int(root, &v));
    assert_string_equal(pk_type_name(NULL), "nothing");
    static const struct {
        pk_type_t t;
        const char *name;
    } names[] = {
        {PK_NONE, "None"},   {PK_BOOL, "bool"}, {PK_INT, "int"},     {PK_FLOAT, "float"}, {PK_STR, "str"},
        {PK_BYTES, "bytes"}, {PK_LIST, "list"}, {PK_TUPLE, "tuple"}, {PK_DICT, "dict"},   {PK_SET, "set"},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        pk_val_t x = {.type = names[k].t};
        assert_string_equal(pk_type_name(&x), names[k].name);
    }
    pk_free(&doc);
    pk_free(&doc); /* twice is harmless */
}

/* err is always a NUL-terminated string cut to errlen; NULL with 0 is fine. */
static void test_error_buffer(void **state)
{
    static const uint8_t d[] = {0x80, 2, 'c', '.'};
    pk_doc_t doc;
    char err[16];
    memset(err, 'x', sizeof err);
    assert_int_equal(pk_parse(d, sizeof d, &doc, err, 1), -1);
    assert_int_equal(err[0], '\0');
    assert_int_equal(err[1], 'x');
    memset(err, 'x', sizeof err);
    assert_int_equal(pk_parse(d, sizeof d, &doc, err, 10), -1);
    assert_string_equal(err, "offset 2:");
    assert_int_equal(err[10], 'x');
    assert_int_equal(pk_parse(d, sizeof d, &doc, NULL, 0), -1);
    assert_null(doc.root);
}

/* Depth costs no recursion: 200000 nested lists, 200000 open marks. */
static void test_deep(void **state)
{
    enum { DEPTH = 200000 };
    uint8_t *d = malloc(2 * DEPTH + 3);
    assert_non_null(d);
    size_t k = 0;
    d[k++] = 0x80, d[k++] = 2;
    for (size_t i = 0; i < DEPTH; i++)
        d[k++] = ']';
    for (size_t i = 0; i + 1 < DEPTH; i++)
        d[k++] = 'a';
    d[k++] = '.';
    pk_doc_t doc;
    parse_ok(d, k, &doc);
    const pk_val_t *v = doc.root;
    size_t depth = 1;
    while (v->n) {
        v = v->items[0];
        depth++;
    }
    assert_int_equal(depth, DEPTH);
    pk_free(&doc);
    k = 2;
    for (size_t i = 0; i < DEPTH; i++)
        d[k++] = '(';
    d[k++] = '.';
    char err[256];
    assert_int_equal(parse(d, k, &doc, err), -1);
    assert_string_equal(err, "offset 200002: STOP with 200000 MARK(s) still open");
    free(d);
}

static void test_file(void **state)
{
    const char *path = getenv("PK_TEST_FILE");
    if (!path)
        skip();
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("%s: cannot open", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    uint8_t *buf = malloc(n ? (size_t)n : 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    pk_doc_t doc;
    char err[256];
    if (parse(buf, (size_t)n, &doc, err) != 0)
        fail_msg("%s: %s", path, err);
    const pk_val_t *tr = pk_get(doc.root, "device_traces");
    assert_non_null(tr);
    assert_int_equal(tr->type, PK_LIST);
    size_t events = tr->n ? tr->items[0]->n : 0;
    printf("%s: %zu devices, %zu events on device 0\n", path, tr->n, events);
    for (size_t d = 0; d < tr->n; d++)
        for (size_t i = 0; i < tr->items[d]->n; i++)
            assert_true(pk_get(tr->items[d]->items[i], "action") &&
                        pk_get(tr->items[d]->items[i], "action")->type == PK_STR);
    const char *want = getenv("PK_TEST_EVENTS");
    if (want)
        assert_int_equal(events, strtoull(want, NULL, 10));
    pk_free(&doc);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_python_protocol4),
        cmocka_unit_test(test_python_protocol2),
        cmocka_unit_test(test_python_protocol5),
        cmocka_unit_test(test_snapshot_by_hand),
        cmocka_unit_test(test_longs),
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_marks_memo_and_cycles),
        cmocka_unit_test(test_every_prefix_is_an_error),
        cmocka_unit_test(test_every_byte_changed),
        cmocka_unit_test(test_globals_refused),
        cmocka_unit_test(test_text_opcodes_refused),
        cmocka_unit_test(test_unknown_opcodes),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_python_semantics),
        cmocka_unit_test(test_accessors),
        cmocka_unit_test(test_error_buffer),
        cmocka_unit_test(test_deep),
        cmocka_unit_test(test_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
