/*
 * The pickle reader (replay/pickle.c).  Proves: the plain types read as
 * Python wrote them (a protocol-4 pickle made by Python is embedded below),
 * memo references share values, integers of every width and sign; every
 * opcode that names or calls a global is refused with its name and offset;
 * every prefix of a valid pickle is an error, never a crash; malformed
 * stacks, memo references and trailing bytes are named.  With
 * PK_TEST_FILE=path it also reads that file (the shared snapshots).
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

static int parse(const uint8_t *d, size_t n, pk_doc_t *doc, char *err)
{
    return pk_parse(d, n, doc, err, 256);
}

static void test_python_protocol4(void **state)
{
    pk_doc_t doc;
    char err[256];
    if (parse(python4, sizeof python4, &doc, err) != 0)
        fail_msg("%s", err);
    const pk_val_t *root = doc.root;
    assert_int_equal(root->type, PK_DICT);
    const pk_val_t *traces = pk_get(root, "device_traces");
    assert_non_null(traces);
    assert_int_equal(traces->type, PK_LIST);
    assert_int_equal(traces->n, 1);
    const pk_val_t *evs = traces->items[0];
    assert_int_equal(evs->n, 2);
    int64_t v;
    assert_true(pk_str_eq(pk_get(evs->items[0], "action"), "alloc"));
    assert_true(pk_int(pk_get(evs->items[0], "addr"), &v));
    assert_int_equal(v, 140000000000000ll);
    assert_true(pk_int(pk_get(evs->items[0], "size"), &v));
    assert_int_equal(v, 512);
    /* the second dict's keys are memo references to the first's strings */
    assert_true(pk_str_eq(pk_get(evs->items[1], "action"), "free_completed"));
    assert_ptr_equal(evs->items[1]->keys[0], evs->items[0]->keys[0]);
    assert_true(pk_int(pk_get(root, "n"), &v));
    assert_int_equal(v, -5);
    assert_false(pk_int(pk_get(root, "big"), &v)); /* 2**70 */
    assert_true(pk_get(root, "big")->big);
    assert_true(pk_int(pk_get(root, "neg"), &v));
    assert_int_equal(v, -(1ll << 40));
    assert_true(pk_get(root, "f")->f == 1.5);
    const pk_val_t *t = pk_get(root, "t");
    assert_int_equal(t->type, PK_TUPLE);
    assert_int_equal(t->n, 4);
    assert_true(pk_str_eq(t->items[1], "x"));
    assert_int_equal(t->items[2]->type, PK_NONE);
    assert_true(t->items[3]->b);
    assert_int_equal(pk_get(root, "s")->type, PK_SET);
    assert_int_equal(pk_get(root, "s")->n, 1);
    assert_int_equal(pk_get(root, "b")->type, PK_BYTES);
    assert_int_equal(pk_get(root, "b")->len, 2);
    assert_null(pk_get(root, "missing"));
    assert_string_equal(pk_type_name(pk_get(root, "segments")), "list");
    pk_free(&doc);
}

static void test_every_prefix_is_an_error(void **state)
{
    for (size_t n = 0; n < sizeof python4; n++) {
        pk_doc_t doc;
        char err[256] = "";
        assert_int_equal(parse(python4, n, &doc, err), -1);
        assert_non_null(strstr(err, "offset "));
        assert_null(doc.root);
    }
}

static void expect(const uint8_t *d, size_t n, const char *want)
{
    pk_doc_t doc;
    char err[256] = "";
    assert_int_equal(parse(d, n, &doc, err), -1);
    if (!strstr(err, want))
        fail_msg("error '%s' does not say '%s'", err, want);
}

#define EXPECT(want, ...)                                                                                              \
    do {                                                                                                               \
        static const uint8_t d_[] = {__VA_ARGS__};                                                                     \
        expect(d_, sizeof d_, want);                                                                                   \
    } while (0)

static void test_globals_refused(void **state)
{
    /* GLOBAL 'os\nsystem\n' at offset 2 */
    EXPECT("offset 2: opcode 0x63 (GLOBAL) refused", 0x80, 0x02, 'c', 'o', 's', '\n', 's', 'y', 's', 't', 'e', 'm',
           '\n', '.');
    /* STACK_GLOBAL after two strings, at offset 10 */
    EXPECT("offset 10: opcode 0x93 (STACK_GLOBAL) refused", 0x80, 0x04, 0x8c, 0x02, 'o', 's', 0x8c, 0x01, 'x', 0x94,
           0x93, '.');
    EXPECT("offset 4: opcode 0x52 (REDUCE)", 0x80, 0x02, 'N', ')', 'R', '.');
    EXPECT("offset 4: opcode 0x62 (BUILD)", 0x80, 0x02, '}', '}', 'b', '.');
    EXPECT("offset 2: opcode 0x69 (INST)", 0x80, 0x02, 'i', 'a', '\n', 'b', '\n', '.');
    EXPECT("offset 3: opcode 0x6f (OBJ)", 0x80, 0x02, '(', 'o', '.');
    EXPECT("offset 4: opcode 0x81 (NEWOBJ)", 0x80, 0x02, 'N', ')', 0x81, '.');
    EXPECT("offset 2: opcode 0x50 (PERSID)", 0x80, 0x02, 'P', 'x', '\n', '.');
    EXPECT("offset 2: opcode 0x82 (EXT1)", 0x80, 0x02, 0x82, 0x01, '.');
    EXPECT("offset 2: opcode 0x49 (INT, pickle protocol 0)", 0x80, 0x02, 'I', '1', '\n', '.');
    EXPECT("offset 2: unknown opcode 0xff", 0x80, 0x02, 0xff, '.');
    EXPECT("pickle protocol 9", 0x80, 0x09, 'N', '.');
}

static void test_malformed(void **state)
{
    EXPECT("memo index 3 was never stored", 0x80, 0x02, 'h', 0x03, '.');
    EXPECT("offset 4: 1 bytes after STOP", 0x80, 0x02, 'N', '.', 'N');
    EXPECT("POP: the stack is empty", 0x80, 0x02, '0', 'N', '.');
    EXPECT("SETITEMS with an odd number of items (1)", 0x80, 0x02, '}', '(', 'N', 'u', '.');
    EXPECT("APPENDS onto a dict", 0x80, 0x02, '}', '(', 'N', 'e', '.');
    EXPECT("SETITEM onto a list", 0x80, 0x02, ']', 'N', 'N', 's', '.');
    EXPECT("APPENDS without a MARK", 0x80, 0x02, ']', 'e', '.');
    EXPECT("STOP with 1 MARK(s) still open", 0x80, 0x02, '(', 'N', '.');
    EXPECT("STOP with 2 values on the stack", 0x80, 0x02, 'N', 'N', '.');
    EXPECT("file ends inside a BINUNICODE of 4000 bytes", 0x80, 0x02, 'X', 0xa0, 0x0f, 0x00, 0x00, 'a');
    EXPECT("FRAME of 100 bytes, only 2 left", 0x80, 0x04, 0x95, 100, 0, 0, 0, 0, 0, 0, 0, 'N', '.');
    EXPECT("beyond what a file", 0x80, 0x02, 'N', 'r', 0xff, 0xff, 0xff, 0xff, '.');
    EXPECT("TUPLE2 needs 2 values", 0x80, 0x02, 'N', 0x86, '.');
    EXPECT("without a STOP", 0x80, 0x02, 'N');
}

static void test_mark_opcodes_and_cycles(void **state)
{
    /* a 5-tuple (MARK ... TUPLE), a list that contains itself, a DICT */
    static const uint8_t d[] = {0x80, 0x02, ']', 'q', 0x00, 'h', 0x00, 'a', '(', 'K', 1, 'K', 2, 'K', 3, 'K', 4, 'K',
                                5,    't',  '(', 'K', 7,    'K', 8,    'd', 0x87, '.'};
    pk_doc_t doc;
    char err[256];
    if (parse(d, sizeof d, &doc, err) != 0)
        fail_msg("%s", err);
    const pk_val_t *t = doc.root;
    assert_int_equal(t->type, PK_TUPLE);
    assert_int_equal(t->items[0]->type, PK_LIST);
    assert_ptr_equal(t->items[0]->items[0], t->items[0]); /* the cycle */
    assert_int_equal(t->items[1]->n, 5);
    assert_int_equal(t->items[2]->type, PK_DICT);
    pk_free(&doc);
}

static void test_file(void **state)
{
    const char *path = getenv("PK_TEST_FILE");
    if (!path)
        skip();
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    pk_doc_t doc;
    char err[256];
    if (parse(buf, (size_t)n, &doc, err) != 0)
        fail_msg("%s: %s", path, err);
    const pk_val_t *tr = pk_get(doc.root, "device_traces");
    assert_non_null(tr);
    printf("%s: %zu devices, %zu events on device 0\n", path, tr->n, tr->n ? tr->items[0]->n : 0);
    pk_free(&doc);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_python_protocol4), cmocka_unit_test(test_every_prefix_is_an_error),
        cmocka_unit_test(test_globals_refused),  cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_mark_opcodes_and_cycles), cmocka_unit_test(test_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
