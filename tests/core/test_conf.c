/*
 * Proves that CUCACHE_CONF parsing (core/conf.c) does what core/conf.h
 * promises: the tokenizer splits items at top-level commas only, trims the
 * whitespace around keys and values and reports malformed text by column;
 * sizes read their units (and only them), fractions, booleans and names read
 * exactly the accepted words; every key takes its whole range and refuses
 * the rest with one line that names the key, the value as written and what
 * is accepted; roundup_power2_divisions follows PyTorch's list rules and
 * conf_roundup_divisions picks the right interval; the constraints between
 * keys are checked whatever the order; an error leaves the configuration
 * byte for byte unchanged; help lists every key with the default that
 * conf_defaults really sets; describe marks exactly the changed keys, and
 * what it shows for them reads back to the same configuration.
 *
 * Seen to fail: each of 27 bugs planted one at a time in a scratch copy of
 * conf.c fails at least one test here, among them commas inside [] ending
 * an item, values left untrimmed, `>` overwriting the last listed interval
 * (PyTorch before the fix), the first key not filling below, decreasing keys
 * accepted, a bare `_mb` number read as bytes, unchecked overflow, decimals
 * that are not whole bytes, parsing straight into *c, `>=` for `>` in a
 * cross-key check, a fraction's closed bound opened, conf_roundup_divisions
 * off by one interval or clamped at 14, help dropping a row, describe
 * marking nothing, a default drifting from help's text, unknown keys
 * ignored, empty items accepted, control characters quoted raw.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conf.h"
#include "rules.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define TiB ((size_t)1 << 40)

#define ERRLEN 512

/* Every key of the option table, in its order. */
static const char *const all_keys[] = {
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "roundup_power2_divisions",
    "garbage_collection_threshold",
    "expandable_segments",
    "expandable_page_mb",
    "per_process_memory_fraction",
    "backend",
    "expandable_share_pages",
    "limit_mb",
    "strategy",
    "fraction",
    "reuse",
    "max_pending_mb",
    "ipc",
    "min_block_size",
    "small_size",
    "small_segment_size",
    "min_large_alloc",
    "large_segment_size_mb",
    "round_large",
};
#define NKEYS (sizeof all_keys / sizeof all_keys[0])

static const char *const divs_accepted =
    "expected 0 or a power of two up to 1024, or a list [MiB:N,...,>:N] whose keys are powers of two from 1 to 32768 "
    "in increasing order";

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

/* Parses text over the defaults; it must succeed with an empty message. */
static conf_t parse_ok(const char *text)
{
    conf_t c;
    char err[ERRLEN] = "not cleared";
    conf_defaults(&c);
    int rc = conf_parse(&c, text, err, sizeof err);
    if (rc != 0)
        fail_msg("conf_parse(\"%s\") = %d: %s", text, rc, err);
    assert_string_equal(err, "");
    return c;
}

/*
 * Parses text over the defaults; it must fail, leave the configuration
 * untouched, and write one line starting "CUCACHE_CONF: " that contains each
 * of the NULL-terminated strings that follow.
 */
static void expect_error(const char *text, ...)
{
    conf_t c, before;
    char err[ERRLEN];
    conf_defaults(&c);
    memcpy(&before, &c, sizeof c);
    int rc = conf_parse(&c, text, err, sizeof err);
    if (rc != -1)
        fail_msg("conf_parse(\"%s\") = %d, expected -1", text, rc);
    if (memcmp(&c, &before, sizeof c) != 0)
        fail_msg("conf_parse(\"%s\") changed the configuration on error", text);
    if (strncmp(err, "CUCACHE_CONF: ", 14) != 0 || strchr(err, '\n'))
        fail_msg("conf_parse(\"%s\"): not one CUCACHE_CONF line: \"%s\"", text, err);
    va_list ap;
    va_start(ap, text);
    for (const char *want; (want = va_arg(ap, const char *));)
        if (!strstr(err, want))
            fail_msg("conf_parse(\"%s\"): message \"%s\" lacks \"%s\"", text, err, want);
    va_end(ap);
}
#define ERR(...) expect_error(__VA_ARGS__, (const char *)NULL)

/* A bad size for limit_mb: its message says what a limit_mb size is. */
#define LIMIT_ERR(value, ...)                                                                                          \
    ERR("limit_mb:" value, "limit_mb:" value ": ",                                                                     \
        "expected a size of 0 (none) or at least 1M (a number of MiB, or with a unit: 512M, 2G)", __VA_ARGS__)

static bool conf_same(const conf_t *a, const conf_t *b)
{
    return a->min_block_size == b->min_block_size && a->small_size == b->small_size &&
           a->small_segment_size == b->small_segment_size && a->min_large_alloc == b->min_large_alloc &&
           a->large_segment_size == b->large_segment_size && a->round_large == b->round_large &&
           a->max_split_size == b->max_split_size && a->max_non_split_rounding == b->max_non_split_rounding &&
           memcmp(a->roundup_divs, b->roundup_divs, sizeof a->roundup_divs) == 0 &&
           a->gc_threshold == b->gc_threshold && a->expandable_segments == b->expandable_segments &&
           a->memory_fraction == b->memory_fraction && a->limit == b->limit && a->strategy == b->strategy &&
           a->fraction == b->fraction && a->reuse == b->reuse && a->ipc == b->ipc;
}

static void assert_divs(const conf_t *c, const unsigned want[CONF_ROUNDUP_INTERVALS])
{
    for (unsigned i = 0; i < CONF_ROUNDUP_INTERVALS; i++)
        if (c->roundup_divs[i] != want[i])
            fail_msg("interval %u: %u divisions, expected %u", i, c->roundup_divs[i], want[i]);
}

/* Lines written through a conf_help / conf_describe callback. */
typedef struct lines_s {
    int n;
    char line[64][ERRLEN];
} lines_t;

static void lines_add(void *ctx, const char *line)
{
    lines_t *l = ctx;
    assert_true(l->n < 64);
    assert_null(strchr(line, '\n'));
    snprintf(l->line[l->n++], ERRLEN, "%s", line);
}

/* The describe line of key, or fails. */
static const char *describe_line(const lines_t *l, const char *key)
{
    size_t n = strlen(key);
    for (int i = 0; i < l->n; i++)
        if (strncmp(l->line[i], key, n) == 0 && l->line[i][n] == ':')
            return l->line[i];
    fail_msg("describe has no line for %s", key);
    return NULL;
}

/* The value of a describe line "key:   value (mark)", into out. */
static void describe_value(const char *line, char *out, size_t len)
{
    const char *v = strchr(line, ':') + 1;
    while (*v == ' ')
        v++;
    const char *end = strrchr(line, '(');
    assert_non_null(end);
    snprintf(out, len, "%.*s", (int)(end - 1 - v), v);
}

/* Items seen by the tokenizer. */
typedef struct items_s {
    int n;
    int stop_at; /* return 7 from this item (1-based); 0: never */
    char key[8][64];
    char val[8][128];
    size_t col[8];
} items_t;

static int items_add(void *ctx, const char *key, size_t klen, const char *val, size_t vlen, size_t col)
{
    items_t *it = ctx;
    assert_true(it->n < 8);
    snprintf(it->key[it->n], 64, "%.*s", (int)klen, key);
    snprintf(it->val[it->n], 128, "%.*s", (int)vlen, val);
    it->col[it->n] = col;
    it->n++;
    return it->n == it->stop_at ? 7 : 0;
}

static int tokenize(const char *text, items_t *it, char *err)
{
    memset(it, 0, sizeof *it);
    err[0] = '\0';
    return conf_tokenize(text, items_add, it, err, ERRLEN);
}

static void expect_syntax_error(const char *text, const char *want)
{
    items_t it;
    char err[ERRLEN];
    int rc = tokenize(text, &it, err);
    if (rc != -1)
        fail_msg("conf_tokenize(\"%s\") = %d, expected -1", text, rc);
    if (strncmp(err, "CUCACHE_CONF: ", 14) != 0 || !strstr(err, want))
        fail_msg("conf_tokenize(\"%s\"): message \"%s\" lacks \"%s\"", text, err, want);
    ERR(text, want); /* and conf_parse reports the same */
}

/* ------------------------------------------------------------------------
 * Tokenizer
 * ---------------------------------------------------------------------- */

static void test_tokenize_items(void **state)
{
    items_t it;
    char err[ERRLEN];
    (void)state;

    assert_int_equal(tokenize(" a : 1 ,\tb:2\n,c:[x:1, y : 2 ] ", &it, err), 0);
    assert_int_equal(it.n, 3);
    assert_string_equal(it.key[0], "a");
    assert_string_equal(it.val[0], "1");
    assert_int_equal(it.col[0], 2);
    assert_string_equal(it.key[1], "b");
    assert_string_equal(it.val[1], "2");
    assert_int_equal(it.col[1], 10);
    assert_string_equal(it.key[2], "c");
    assert_string_equal(it.val[2], "[x:1, y : 2 ]");
    assert_int_equal(it.col[2], 15);

    /* the first colon splits; the value keeps the rest, empty or not */
    assert_int_equal(tokenize("a:b:c,k:", &it, err), 0);
    assert_int_equal(it.n, 2);
    assert_string_equal(it.key[0], "a");
    assert_string_equal(it.val[0], "b:c");
    assert_string_equal(it.key[1], "k");
    assert_string_equal(it.val[1], "");

    /* two lists in a row: commas inside each belong to it */
    assert_int_equal(tokenize("a:[1,2],b:[3,4]", &it, err), 0);
    assert_int_equal(it.n, 2);
    assert_string_equal(it.val[0], "[1,2]");
    assert_string_equal(it.val[1], "[3,4]");

    /* nothing at all is no items */
    assert_int_equal(tokenize("", &it, err), 0);
    assert_int_equal(it.n, 0);
    assert_int_equal(tokenize(" \t\r\n ", &it, err), 0);
    assert_int_equal(it.n, 0);
    assert_int_equal(tokenize(NULL, &it, err), 0);
    assert_int_equal(it.n, 0);
    assert_string_equal(err, "");

    /* a nonzero return from the callback stops the walk and comes back */
    memset(&it, 0, sizeof it);
    it.stop_at = 2;
    assert_int_equal(conf_tokenize("a:1,b:2,c:3", items_add, &it, err, ERRLEN), 7);
    assert_int_equal(it.n, 2);
}

static void test_tokenize_errors(void **state)
{
    (void)state;
    expect_syntax_error("reuse:sync,,fraction:0.5", "empty item at column 12");
    expect_syntax_error("reuse:sync, ,fraction:0.5", "empty item at column 12");
    expect_syntax_error("reuse:sync,", "empty item at column 12");
    expect_syntax_error(",reuse:sync", "empty item at column 1");
    expect_syntax_error("reuse", "'reuse' at column 1: expected key:value (run with CUCACHE_CONF=help");
    expect_syntax_error("reuse:sync,  fraction", "'fraction' at column 14: expected key:value");
    expect_syntax_error(" : 1", "': 1' at column 2: no key before ':'");
    expect_syntax_error("roundup_power2_divisions:[256:1,>:2", "'[' at column 26 is never closed");
    expect_syntax_error("roundup_power2_divisions:256:1]", "']' at column 31 closes no '['");
    expect_syntax_error("roundup_power2_divisions:[[256:1]]", "'[' at column 27 inside the list opened at column 26");
}

/* ------------------------------------------------------------------------
 * parse: whole-text behaviour
 * ---------------------------------------------------------------------- */

static void test_defaults(void **state)
{
    conf_t c;
    (void)state;
    memset(&c, 0xa5, sizeof c);
    conf_defaults(&c);
    assert_int_equal(c.min_block_size, 512);
    assert_int_equal(c.small_size, 1 * MiB);
    assert_int_equal(c.small_segment_size, 2 * MiB);
    assert_int_equal(c.min_large_alloc, 10 * MiB);
    assert_int_equal(c.large_segment_size, 20 * MiB);
    assert_int_equal(c.round_large, 2 * MiB);
    assert_true(c.max_split_size == SIZE_MAX);
    assert_int_equal(c.max_non_split_rounding, 20 * MiB);
    for (unsigned i = 0; i < CONF_ROUNDUP_INTERVALS; i++)
        assert_int_equal(c.roundup_divs[i], 0);
    assert_true(c.gc_threshold == 0);
    assert_false(c.expandable_segments);
    assert_true(c.memory_fraction == 1.0);
    assert_int_equal(c.limit, 0);
    assert_int_equal(c.strategy, CONF_STRATEGY_AUTO_GROWTH);
    assert_true(c.fraction == 0.92);
    assert_int_equal(c.reuse, CONF_REUSE_ORDERED);
}

static void test_empty_text(void **state)
{
    conf_t c, d;
    char err[ERRLEN] = "stale";
    (void)state;
    conf_defaults(&d);
    c = parse_ok("");
    assert_true(conf_same(&c, &d));
    c = parse_ok(" \t\n");
    assert_true(conf_same(&c, &d));
    conf_defaults(&c);
    assert_int_equal(conf_parse(&c, NULL, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_true(conf_same(&c, &d));
}

static void test_help_keyword(void **state)
{
    conf_t c, d;
    char err[ERRLEN];
    (void)state;
    conf_defaults(&d);
    const char *help[] = {"help", " help", "help\n", "\t help \r\n"};
    for (size_t i = 0; i < sizeof help / sizeof help[0]; i++) {
        conf_defaults(&c);
        assert_int_equal(conf_parse(&c, help[i], err, sizeof err), 1);
        assert_true(conf_same(&c, &d));
    }
    ERR("help,reuse:sync", "'help' at column 1: expected key:value");
    ERR("reuse:sync,help", "'help' at column 12");
    ERR("HELP", "'HELP'");
    ERR("help:1", "help:1: unknown key");
}

static void test_whitespace_and_order(void **state)
{
    (void)state;
    conf_t c =
        parse_ok("\n max_split_size_mb : 100 ,\n\treuse:\tsync\n, roundup_power2_divisions : [ 256 : 1 , > : 8 ]\n");
    assert_int_equal(c.max_split_size, 100 * MiB);
    assert_int_equal(c.reuse, CONF_REUSE_SYNC);
    assert_int_equal(c.roundup_divs[8], 1);
    assert_int_equal(c.roundup_divs[9], 8);
}

static void test_last_key_wins(void **state)
{
    (void)state;
    conf_t c = parse_ok("reuse:sync,max_split_size_mb:100,reuse:stream,max_split_size_mb:200");
    assert_int_equal(c.reuse, CONF_REUSE_STREAM);
    assert_int_equal(c.max_split_size, 200 * MiB);
    /* a repeated list replaces the whole table, not just the listed intervals */
    c = parse_ok("roundup_power2_divisions:4,roundup_power2_divisions:[256:1]");
    static const unsigned want[CONF_ROUNDUP_INTERVALS] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    assert_divs(&c, want);
}

/* conf_parse works over the current contents: keys not named keep their value. */
static void test_parse_over_current(void **state)
{
    conf_t c;
    char err[ERRLEN];
    (void)state;
    conf_defaults(&c);
    assert_int_equal(conf_parse(&c, "reuse:sync,limit_mb:100", err, sizeof err), 0);
    assert_int_equal(conf_parse(&c, "fraction:0.5", err, sizeof err), 0);
    assert_int_equal(c.reuse, CONF_REUSE_SYNC);
    assert_int_equal(c.limit, 100 * MiB);
    assert_true(c.fraction == 0.5);
}

/* An error anywhere, even after good items or in the cross-key checks, changes nothing. */
static void test_unchanged_on_error(void **state)
{
    conf_t c, before;
    char err[ERRLEN];
    (void)state;
    const char *bad[] = {
        "max_split_size_mb:100,reuse:bogus",
        "reuse:sync,limit_mb:100,fraction:2",
        "roundup_power2_divisions:[256:1,>:8],bogus:1",
        "reuse:sync,small_size:4M",
        "reuse:sync,,limit_mb:1",
        "reuse:sync,expandable_page_mb:3",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        conf_defaults(&c);
        assert_int_equal(conf_parse(&c, "strategy:preallocate,limit_mb:7", err, sizeof err), 0);
        memcpy(&before, &c, sizeof c);
        assert_int_equal(conf_parse(&c, bad[i], err, sizeof err), -1);
        if (memcmp(&c, &before, sizeof c) != 0)
            fail_msg("\"%s\" changed the configuration", bad[i]);
        ERR(bad[i], "CUCACHE_CONF: ");
    }
}

static void test_error_buffer(void **state)
{
    conf_t c;
    char err[8];
    (void)state;
    conf_defaults(&c);
    memset(err, 'x', sizeof err);
    assert_int_equal(conf_parse(&c, "reuse:bogus", err, sizeof err), -1);
    assert_string_equal(err, "CUCACHE");
    err[0] = 'x';
    assert_int_equal(conf_parse(&c, "reuse:bogus", err, 1), -1);
    assert_int_equal(err[0], '\0');
    assert_int_equal(conf_parse(&c, "reuse:bogus", NULL, 0), -1);
    assert_int_equal(conf_parse(&c, "reuse:sync", NULL, 0), 0);
    assert_int_equal(c.reuse, CONF_REUSE_SYNC);
}

/* A value is shown on one line (conf_show), cut after CONF_SHOW_MAX bytes
 * with its whole length. */
static void test_error_quotes_safely(void **state)
{
    char text[500], err[ERRLEN];
    conf_t c;
    (void)state;
    char want[CONF_SHOW_MAX + 40] = "reuse:";
    snprintf(text, sizeof text, "reuse:%0400d", 7);
    memset(want + 6, '0', CONF_SHOW_MAX);
    strcpy(want + 6 + CONF_SHOW_MAX, "... (400 bytes): expected");
    conf_defaults(&c);
    assert_int_equal(conf_parse(&c, text, err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("\"%s\" lacks \"%s\"", err, want);
    assert_true(strlen(err) < 400);
    ERR("reuse:a\nb", "reuse:a\\x0ab: expected ordered, fenced, stream, sync or fenced-host");
    ERR("reuse:a\001b", "reuse:a\\x01b: expected");
}

/* conf_show, the one way every layer shows a value in a refusal: printable
 * ASCII as it is, a backslash doubled, every other byte \xNN, at most
 * CONF_SHOW_MAX bytes of text then "... (N bytes)".  Seen to fail with
 * bytes above 0x7e passed through, and with the cut not counting the
 * escapes (the output then ran past CONF_SHOW_MAX). */
static void test_conf_show(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        const char *out;
    } cases[] = {
        {"plain text 1.5G", "plain text 1.5G"},
        {"", ""},
        {"a\x1b[2Jb", "a\\x1b[2Jb"},
        {"\x07\r\n\t\x7f", "\\x07\\x0d\\x0a\\x09\\x7f"},
        {"caf\xc3\xa9 \xff\xfe", "caf\\xc3\\xa9 \\xff\\xfe"},
        {"\xe2\x80\xae", "\\xe2\\x80\\xae"}, /* U+202E, right-to-left override */
        {"a\\x41", "a\\\\x41"},              /* a typed \x41 stays distinguishable */
    };
    char out[CONF_SHOW_BUF];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_string_equal(conf_show(out, cases[i].in, strlen(cases[i].in)), cases[i].out);
    /* exactly CONF_SHOW_MAX bytes fit; one more is cut */
    char in[4096];
    memset(in, 'x', sizeof in);
    assert_int_equal(strlen(conf_show(out, in, CONF_SHOW_MAX)), CONF_SHOW_MAX);
    conf_show(out, in, CONF_SHOW_MAX + 1);
    char cut[32];
    snprintf(cut, sizeof cut, "... (%d bytes)", CONF_SHOW_MAX + 1);
    assert_string_equal(out + CONF_SHOW_MAX, cut);
    /* a long hostile value: bounded, nothing raw, its length given */
    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (char)(i % 3 == 0 ? 0x1b : i % 3 == 1 ? 0xff : 'A');
    conf_show(out, in, sizeof in);
    assert_true(strlen(out) < CONF_SHOW_BUF);
    assert_non_null(strstr(out, "... (4096 bytes)"));
    for (const char *p = out; *p; p++)
        assert_true(*p >= 0x20 && *p < 0x7f);
    assert_true(strlen(out) - strlen("... (4096 bytes)") <= CONF_SHOW_MAX);
}

static void test_unknown_key(void **state)
{
    (void)state;
    ERR("max_split_size:100",
        "CUCACHE_CONF: max_split_size:100: unknown key (did you mean max_split_size_mb?); run with CUCACHE_CONF=help "
        "for the list of keys");
    ERR("garbage_collection_treshold:0.5", "(did you mean garbage_collection_threshold?)");
    ERR("limit:100", "limit:100: unknown key (did you mean limit_mb?)");
    ERR("pinned_use_cuda_host_register:True",
        "pinned_use_cuda_host_register:True: unknown key; run with CUCACHE_CONF=help");
    ERR("MAX_SPLIT_SIZE_MB:100", "MAX_SPLIT_SIZE_MB:100: unknown key;");
    ERR("x:1", "x:1: unknown key; run with CUCACHE_CONF=help");
}

/* ------------------------------------------------------------------------
 * Sizes
 * ---------------------------------------------------------------------- */

static void test_size_units(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        size_t bytes;
    } ok[] = {
        /* limit_mb: a bare number is MiB */
        {"limit_mb:1", 1 * MiB},
        {"limit_mb:1M", 1 * MiB},
        {"limit_mb:1m", 1 * MiB},
        {"limit_mb:1MB", 1 * MiB},
        {"limit_mb:1mb", 1 * MiB},
        {"limit_mb:1MiB", 1 * MiB},
        {"limit_mb:1mib", 1 * MiB},
        {"limit_mb:1MIB", 1 * MiB},
        {"limit_mb:1 M", 1 * MiB},
        {"limit_mb:1024K", 1 * MiB},
        {"limit_mb:1024kib", 1 * MiB},
        {"limit_mb:1048576B", 1 * MiB},
        {"limit_mb:1048576b", 1 * MiB},
        {"limit_mb:0.5G", 512 * MiB},
        {"limit_mb:1.5G", 1536 * MiB},
        {"limit_mb:1.50g", 1536 * MiB},
        {"limit_mb:.5g", 512 * MiB},
        {"limit_mb:3.", 3 * MiB},
        {"limit_mb:2.25", 2 * MiB + 256 * KiB},
        {"limit_mb:007", 7 * MiB},
        {"limit_mb:1T", 1 * TiB},
        {"limit_mb:1024T", 1024 * TiB},
        {"limit_mb:0", 0},
        /* min_block_size: a bare number is bytes */
        {"min_block_size:512", 512},
        {"min_block_size:512B", 512},
        {"min_block_size:0.5K", 512},
        {"min_block_size:1k", 1024},
        {"min_block_size:4096", 4096},
        {"min_block_size:64KiB", 64 * KiB},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        conf_t c = parse_ok(ok[i].text);
        size_t got = strncmp(ok[i].text, "limit_mb", 8) == 0 ? c.limit : c.min_block_size;
        if (got != ok[i].bytes)
            fail_msg("%s: %zu bytes, expected %zu", ok[i].text, got, ok[i].bytes);
    }
}

static void test_size_errors(void **state)
{
    (void)state;
    LIMIT_ERR("", "limit_mb:: expected");
    LIMIT_ERR("abc", "limit_mb:abc: expected");
    LIMIT_ERR("-1", "negative; ");
    LIMIT_ERR("-0.5G", "negative; ");
    LIMIT_ERR("+1", "limit_mb:+1: expected");
    LIMIT_ERR(".", "limit_mb:.: expected");
    LIMIT_ERR("1..5", "limit_mb:1..5: expected");
    LIMIT_ERR("M", "limit_mb:M: expected");
    LIMIT_ERR("MiB", "limit_mb:MiB: expected");
    LIMIT_ERR("5iB", "limit_mb:5iB: expected");
    LIMIT_ERR("5Ki", "limit_mb:5Ki: expected");
    LIMIT_ERR("5KiBB", "limit_mb:5KiBB: expected");
    LIMIT_ERR("5X", "limit_mb:5X: expected");
    LIMIT_ERR("5MX", "limit_mb:5MX: expected");
    LIMIT_ERR("5M B", "limit_mb:5M B: expected");
    LIMIT_ERR("1 5", "limit_mb:1 5: expected");
    LIMIT_ERR("1e3", "limit_mb:1e3: expected");
    LIMIT_ERR("0x10", "limit_mb:0x10: expected");
    LIMIT_ERR("1025T", "too large (sizes stop at 1024T); ");
    LIMIT_ERR("1073741825", "too large (sizes stop at 1024T); "); /* MiB: just past 1024T */
    LIMIT_ERR("17592186044416", "too large");                     /* MiB: 2^64 bytes */
    LIMIT_ERR("18446744073709551615", "too large");
    LIMIT_ERR("99999999999999999999999", "too large"); /* the digits overflow */
    LIMIT_ERR("16777216T", "too large");
    LIMIT_ERR("1.0000001", "not a whole number of bytes; ");
    LIMIT_ERR("1.0000000000000000000001", "not a whole number of bytes; ");
    LIMIT_ERR("0.5", "too small; ");
    ERR("min_block_size:0.5", "min_block_size:0.5: not a whole number of bytes; ",
        "expected a size of a power of two from 256 to 64K (a number of bytes, or with a unit: 4096, 64K, 2M)");
    ERR("min_block_size:1.5B", "not a whole number of bytes");
}

/* conf_read_size on its own, as the tools call it: flags 0 is CUCACHE_CONF's
 * syntax; CONF_SIZE_ROUND_DOWN drops a fraction of a byte; CONF_SIZE_LAX_I
 * takes an 'i' without a unit or a 'B' (the simulator's and cucache-run's
 * forms); neither accepts anything else. */
static void test_size_reader_flags(void **state)
{
    (void)state;
    const unsigned tool = CONF_SIZE_ROUND_DOWN | CONF_SIZE_LAX_I;
    static const struct {
        const char *text;
        unsigned flags;
        conf_num_t rc;
        uint64_t bytes;
    } cases[] = {
        {"4096", 0, CONF_NUM_OK, 4096},
        {"1.5G", 0, CONF_NUM_OK, 1536 * MiB},
        {"0.1G", 0, CONF_NUM_FRAC, 0},
        {"0.1G", CONF_SIZE_ROUND_DOWN, CONF_NUM_OK, GiB / 10},
        {"1.9", CONF_SIZE_ROUND_DOWN, CONF_NUM_OK, 1},
        {"3.99M", tool, CONF_NUM_OK, 4183818},
        {"0.1234567890123456789T", tool, CONF_NUM_OK, 135742175046}, /* 18 decimals read, the rest dropped */
        {"2Ki", 0, CONF_NUM_BAD, 0},
        {"2Ki", CONF_SIZE_LAX_I, CONF_NUM_OK, 2048},
        {"64i", CONF_SIZE_LAX_I, CONF_NUM_OK, 64},
        {"64iB", CONF_SIZE_LAX_I, CONF_NUM_OK, 64},
        {"64iB", 0, CONF_NUM_BAD, 0},
        {"512MiB", tool, CONF_NUM_OK, 512 * MiB},
        {"64mb", tool, CONF_NUM_OK, 64 * MiB},
        {"0.5GB", tool, CONF_NUM_OK, 512 * MiB},
        {"16T", tool, CONF_NUM_OK, 16 * TiB},
        {"1025T", tool, CONF_NUM_BIG, 0},
        {"-1G", tool, CONF_NUM_NEG, 0},
        {"+1G", tool, CONF_NUM_BAD, 0},
        {" 8G", tool, CONF_NUM_BAD, 0},
        {"8G8", tool, CONF_NUM_BAD, 0},
        {"0x10G", tool, CONF_NUM_BAD, 0},
        {"1e3G", tool, CONF_NUM_BAD, 0},
        {"inf", tool, CONF_NUM_BAD, 0},
        {"nan", tool, CONF_NUM_BAD, 0},
        {"G", tool, CONF_NUM_BAD, 0},
        {"", tool, CONF_NUM_BAD, 0},
        {"8Gii", tool, CONF_NUM_BAD, 0},
        {"8GBi", tool, CONF_NUM_BAD, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t got = 12345;
        conf_num_t rc = conf_read_size(cases[i].text, strlen(cases[i].text), 1, cases[i].flags, &got);
        if (rc != cases[i].rc)
            fail_msg("\"%s\" (flags %u): status %d, expected %d", cases[i].text, cases[i].flags, rc, cases[i].rc);
        if (rc == CONF_NUM_OK && got != cases[i].bytes)
            fail_msg("\"%s\" (flags %u): %llu bytes, expected %llu", cases[i].text, cases[i].flags,
                     (unsigned long long)got, (unsigned long long)cases[i].bytes);
        if (rc != CONF_NUM_OK && got != 12345)
            fail_msg("\"%s\": *out written on an error", cases[i].text);
    }
    /* the bare unit applies to a bare number only */
    uint64_t v = 0;
    assert_int_equal(conf_read_size("3", 1, MiB, 0, &v), CONF_NUM_OK);
    assert_int_equal(v, 3 * MiB);
    assert_int_equal(conf_read_size("3B", 2, MiB, 0, &v), CONF_NUM_OK);
    assert_int_equal(v, 3);
}

/* ------------------------------------------------------------------------
 * Each key
 * ---------------------------------------------------------------------- */

static void test_key_max_split_size(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("max_split_size_mb:20").max_split_size, 20 * MiB);
    assert_int_equal(parse_ok("max_split_size_mb:20M").max_split_size, 20 * MiB);
    assert_int_equal(parse_ok("max_split_size_mb:21.5").max_split_size, 21 * MiB + 512 * KiB);
    assert_int_equal(parse_ok("max_split_size_mb:1G").max_split_size, 1 * GiB);
    assert_int_equal(parse_ok("max_split_size_mb:20480K").max_split_size, 20 * MiB);
    assert_int_equal(parse_ok("max_split_size_mb:20971520B").max_split_size, 20 * MiB);
    /* the example in conf.h, to the letter */
    conf_t c;
    char err[ERRLEN];
    conf_defaults(&c);
    assert_int_equal(conf_parse(&c, "max_split_size_mb:abc", err, sizeof err), -1);
    assert_string_equal(err, "CUCACHE_CONF: max_split_size_mb:abc: expected a size of at least 20M (a number of MiB, "
                             "or with a unit: 512M, 2G)");
    const char *accepted = "expected a size of at least 20M (a number of MiB, or with a unit: 512M, 2G)";
    /* below 20 MiB refused as PyTorch refuses it, saying so; 20 itself is
     * accepted, as PyTorch's shared allocator config does (">= 20"), where
     * PyTorch 2.6's CUDA config refused it ("must be > 20"): man/cucache.7.scd */
    const char *pytorch = "too small (PyTorch refuses it too: the least is the 20 MiB of the large pool's smallest "
                          "segments); ";
    ERR("max_split_size_mb:19", "CUCACHE_CONF: max_split_size_mb:19: ", pytorch, accepted);
    ERR("max_split_size_mb:0", "max_split_size_mb:0: ", pytorch);
    ERR("max_split_size_mb:1", "max_split_size_mb:1: ", pytorch);
    ERR("max_split_size_mb:20479K", "max_split_size_mb:20479K: ", pytorch, accepted);
    ERR("max_split_size_mb:19.5", "max_split_size_mb:19.5: ", pytorch);
    ERR("max_split_size_mb:-20", "max_split_size_mb:-20: negative; ", accepted);
    ERR("max_split_size_mb:", "max_split_size_mb:: ", accepted);
    ERR("max_split_size_mb:unlimited", "max_split_size_mb:unlimited: ", accepted);
}

static void test_key_max_non_split_rounding(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("max_non_split_rounding_mb:20").max_non_split_rounding, 20 * MiB);
    assert_int_equal(parse_ok("max_non_split_rounding_mb:40").max_non_split_rounding, 40 * MiB);
    assert_int_equal(parse_ok("max_non_split_rounding_mb:1G").max_non_split_rounding, 1 * GiB);
    const char *accepted = "expected a size of at least 20M (a number of MiB";
    ERR("max_non_split_rounding_mb:19", "max_non_split_rounding_mb:19: too small; ", accepted);
    ERR("max_non_split_rounding_mb:0", "max_non_split_rounding_mb:0: too small; ", accepted);
    ERR("max_non_split_rounding_mb:big", "max_non_split_rounding_mb:big: ", accepted);
}

static void test_key_limit(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("limit_mb:0").limit, 0);
    assert_int_equal(parse_ok("limit_mb:1").limit, 1 * MiB);
    assert_int_equal(parse_ok("limit_mb:2G").limit, 2 * GiB);
    assert_int_equal(parse_ok("limit_mb:1024K").limit, 1 * MiB);
    LIMIT_ERR("512K", "limit_mb:512K: too small; ");
    LIMIT_ERR("1023K", "too small; ");
    LIMIT_ERR("-1", "negative");
}

static void test_key_gc_threshold(void **state)
{
    (void)state;
    assert_true(parse_ok("garbage_collection_threshold:0.8").gc_threshold == 0.8);
    assert_true(parse_ok("garbage_collection_threshold:.5").gc_threshold == 0.5);
    assert_true(parse_ok("garbage_collection_threshold:0.000001").gc_threshold == 0.000001);
    assert_true(parse_ok("garbage_collection_threshold:0.999").gc_threshold == 0.999);
    const char *accepted = "expected a number more than 0 and less than 1 (for example 0.8)";
    const char *bad[] = {"0", "0.0", "1", "1.0", "1.5", "-0.5", "0.5x", "abc", "", ".", "1e-1", "0.5.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[64], want[80];
        snprintf(text, sizeof text, "garbage_collection_threshold:%s", bad[i]);
        snprintf(want, sizeof want, "garbage_collection_threshold:%s: ", bad[i]);
        ERR(text, want, accepted);
    }
}

static void test_key_memory_fraction(void **state)
{
    (void)state;
    assert_true(parse_ok("per_process_memory_fraction:1").memory_fraction == 1.0);
    assert_true(parse_ok("per_process_memory_fraction:1.0").memory_fraction == 1.0);
    assert_true(parse_ok("per_process_memory_fraction:0.5").memory_fraction == 0.5);
    assert_true(parse_ok("per_process_memory_fraction:0.01").memory_fraction == 0.01);
    const char *accepted = "expected a number more than 0, at most 1 (for example 0.8)";
    ERR("per_process_memory_fraction:0", "per_process_memory_fraction:0: ", accepted);
    ERR("per_process_memory_fraction:1.01", "per_process_memory_fraction:1.01: ", accepted);
    ERR("per_process_memory_fraction:", "per_process_memory_fraction:: ", accepted);
    ERR("per_process_memory_fraction:half", "per_process_memory_fraction:half: ", accepted);
}

static void test_key_fraction(void **state)
{
    (void)state;
    assert_true(parse_ok("fraction:0.92").fraction == 0.92);
    assert_true(parse_ok("fraction:1").fraction == 1.0);
    assert_true(parse_ok("fraction:0.5").fraction == 0.5);
    const char *accepted = "expected a number more than 0, at most 1 (for example 0.8)";
    ERR("fraction:0", "fraction:0: ", accepted);
    ERR("fraction:2", "fraction:2: ", accepted);
    ERR("fraction:92%", "fraction:92%: ", accepted);
}

static void test_key_expandable_segments(void **state)
{
    (void)state;
    char err[ERRLEN];
    conf_t c;
    assert_false(parse_ok("expandable_segments:false").expandable_segments);
    assert_false(parse_ok("expandable_segments:False").expandable_segments);
    assert_false(parse_ok("expandable_segments:0").expandable_segments);
    assert_true(parse_ok("expandable_segments:true").expandable_segments);
    assert_true(parse_ok("expandable_segments:True").expandable_segments);
    assert_true(parse_ok("expandable_segments:1").expandable_segments);
    const char *accepted = "expected true or false (also True, False, 1, 0)";
    ERR("expandable_segments:yes", "expandable_segments:yes: ", accepted);
    ERR("expandable_segments:TRUE", "expandable_segments:TRUE: ", accepted);
    ERR("expandable_segments:", "expandable_segments:: ", accepted);
    ERR("expandable_segments:true,strategy:preallocate",
        "expandable_segments:true and strategy:preallocate exclude each other");
    /* the large pool's page */
    assert_int_equal(parse_ok("").expandable_page, 2 * MiB);
    assert_int_equal(parse_ok("expandable_page_mb:20").expandable_page, 20 * MiB);
    assert_int_equal(parse_ok("expandable_page_mb:4M").expandable_page, 4 * MiB);
    ERR("expandable_page_mb:3", "expandable_page_mb (3M) must be a multiple of 2M");
    ERR("expandable_page_mb:1", "expandable_page_mb:1: ", "at least 2M");
    conf_defaults(&c);
    assert_int_equal(conf_parse(&c, "expandable_segments:true,expandable_page_mb:20", err, sizeof err), 0);
    assert_true(c.expandable_segments);
}

static void test_key_backend(void **state)
{
    conf_t d;
    (void)state;
    conf_defaults(&d);
    conf_t c = parse_ok("backend:native");
    assert_true(conf_same(&c, &d));
    ERR("backend:cudaMallocAsync", "backend:cudaMallocAsync: cucache replaces that backend; accepted: native");
    ERR("backend:Native", "backend:Native: expected native");
    ERR("backend:", "backend:: expected native");
}

static void test_key_strategy(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("strategy:preallocate").strategy, CONF_STRATEGY_PREALLOCATE);
    assert_int_equal(parse_ok("strategy:preallocate,strategy:auto_growth").strategy, CONF_STRATEGY_AUTO_GROWTH);
    ERR("strategy:preAllocate", "strategy:preAllocate: expected auto_growth or preallocate");
    ERR("strategy:", "strategy:: expected auto_growth or preallocate");
}

static void test_key_reuse(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("reuse:stream").reuse, CONF_REUSE_STREAM);
    assert_int_equal(parse_ok("reuse:sync").reuse, CONF_REUSE_SYNC);
    assert_int_equal(parse_ok("ipc:strict").ipc, CONF_IPC_STRICT);
    assert_int_equal(parse_ok("ipc:peer").ipc, CONF_IPC_PEER);
    assert_int_equal(parse_ok("reuse:sync,reuse:fenced").reuse, CONF_REUSE_FENCED);
    assert_int_equal(parse_ok("reuse:fenced-host").reuse, CONF_REUSE_FENCED_HOST);
    ERR("reuse:fence", "reuse:fence: expected ordered, fenced, stream, sync or fenced-host");
    ERR("reuse:1", "reuse:1: expected ordered, fenced, stream, sync or fenced-host");
    ERR("ipc:none", "ipc:none: expected peer or strict");
}

/* Every row of the rule table is selected by its name, shown by it, and
 * listed in help; a plain free follows the row. */
static void test_rule_table(void **state)
{
    (void)state;
    static lines_t help;
    memset(&help, 0, sizeof help);
    conf_help(lines_add, &help);
    const char *reuse_line = NULL;
    for (int i = 0; i < help.n; i++)
        if (strncmp(help.line[i], "reuse ", 6) == 0)
            reuse_line = help.line[i];
    assert_non_null(reuse_line);
    for (int i = 0; i < CONF_REUSE_COUNT; i++) {
        const core_rule_t *r = &core_rules[i];
        char text[128], shown[256];
        snprintf(text, sizeof text, "reuse:%s", r->name);
        conf_t c = parse_ok(text);
        assert_int_equal(c.reuse, i);
        assert_ptr_equal(conf_rule(&c), r);
        static lines_t desc;
        memset(&desc, 0, sizeof desc);
        conf_describe(&c, lines_add, &desc);
        describe_value(describe_line(&desc, "reuse"), shown, sizeof shown);
        assert_string_equal(shown, r->name);
        snprintf(text, sizeof text, "%s: %s", r->name, r->help);
        if (!strstr(reuse_line, text))
            fail_msg("help's reuse line lacks \"%s\": %s", text, reuse_line);
        core_free_t synced = rule_plain_free(r, true), unsynced = rule_plain_free(r, false);
        assert_int_equal(synced, r->plain == RULE_PLAIN_FENCED ? CORE_FREE_FENCED : CORE_FREE_NOW);
        assert_int_equal(unsynced, r->plain == RULE_PLAIN_NOW ? CORE_FREE_NOW : CORE_FREE_FENCED);
        assert_true(r->safe || r->plain == RULE_PLAIN_NOW); /* only trusting stream order is unsafe */
    }
    conf_t d;
    conf_defaults(&d);
    assert_true(conf_rule(&d)->hands_out && conf_rule(&d)->safe);
}

static void test_key_min_block_size(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("min_block_size:256").min_block_size, 256);
    assert_int_equal(parse_ok("min_block_size:1K").min_block_size, 1024);
    assert_int_equal(parse_ok("min_block_size:64K").min_block_size, 64 * KiB);
    const char *accepted =
        "expected a size of a power of two from 256 to 64K (a number of bytes, or with a unit: 4096, 64K, 2M)";
    ERR("min_block_size:128", "min_block_size:128: too small; ", accepted);
    ERR("min_block_size:0", "min_block_size:0: too small; ", accepted);
    ERR("min_block_size:128K", "min_block_size:128K: too large; ", accepted);
    ERR("min_block_size:768", "min_block_size:768: not a power of two; ", accepted);
    ERR("min_block_size:x", "min_block_size:x: ", accepted);
}

static void test_key_small_size(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("small_size:512K").small_size, 512 * KiB);
    assert_int_equal(parse_ok("small_size:2M").small_size, 2 * MiB);
    assert_int_equal(parse_ok("small_size:1").small_size, 1);
    ERR("small_size:0", "small_size:0: too small; ",
        "expected a size of more than 0, at most small_segment_size (a number of bytes");
}

static void test_key_small_segment_size(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("small_segment_size:4M").small_segment_size, 4 * MiB);
    assert_int_equal(parse_ok("small_segment_size:1M").small_segment_size, 1 * MiB);
    ERR("small_segment_size:2Q", "small_segment_size:2Q: ",
        "expected a size of at least small_size, a multiple of min_block_size (a number of bytes");
}

static void test_key_min_large_alloc(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("min_large_alloc:5M").min_large_alloc, 5 * MiB);
    assert_int_equal(parse_ok("min_large_alloc:19M").min_large_alloc, 19 * MiB);
    ERR("min_large_alloc:0", "min_large_alloc:0: too small; ",
        "expected a size of more than 0, less than large_segment_size_mb (a number of bytes");
}

static void test_key_large_segment_size(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("large_segment_size_mb:40").large_segment_size, 40 * MiB);
    assert_int_equal(parse_ok("large_segment_size_mb:15.5").large_segment_size, 15 * MiB + 512 * KiB);
    ERR("large_segment_size_mb:0", "large_segment_size_mb:0: too small; ",
        "expected a size of more than min_large_alloc, a multiple of min_block_size (a number of MiB");
}

static void test_key_round_large(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("round_large:4M").round_large, 4 * MiB);
    assert_int_equal(parse_ok("round_large:512").round_large, 512);
    const char *accepted = "expected a size of a power of two, at least min_block_size (a number of bytes";
    ERR("round_large:3M", "round_large:3M: not a power of two; ", accepted);
    ERR("round_large:0", "round_large:0: too small; ", accepted);
}

/* ------------------------------------------------------------------------
 * Constraints between keys
 * ---------------------------------------------------------------------- */

static void test_cross_keys(void **state)
{
    (void)state;
    ERR("small_size:4M", "CUCACHE_CONF: small_segment_size (2M) must be at least small_size (4M)");
    ERR("small_segment_size:512K", "small_segment_size (512K) must be at least small_size (1M)");
    ERR("min_block_size:1K,small_segment_size:1049088",
        "small_segment_size (1049088B) must be a multiple of min_block_size (1K)");
    ERR("min_large_alloc:20M", "large_segment_size_mb (20M) must be more than min_large_alloc (20M)");
    ERR("large_segment_size_mb:10", "large_segment_size_mb (10M) must be more than min_large_alloc (10M)");
    ERR("large_segment_size_mb:20971776B",
        "large_segment_size_mb (20971776B) must be a multiple of min_block_size (512B)");
    ERR("round_large:256", "round_large (256B) must be at least min_block_size (512B)");
    ERR("min_block_size:4K,round_large:2K", "round_large (2K) must be at least min_block_size (4K)");

    /* satisfied together, in any order */
    conf_t c = parse_ok("small_size:4M,small_segment_size:8M");
    assert_int_equal(c.small_size, 4 * MiB);
    assert_int_equal(c.small_segment_size, 8 * MiB);
    c = parse_ok("small_segment_size:8M,small_size:4M");
    assert_int_equal(c.small_size, 4 * MiB);
    c = parse_ok("large_segment_size_mb:40,min_large_alloc:30M");
    assert_int_equal(c.min_large_alloc, 30 * MiB);
    c = parse_ok("min_large_alloc:30M,large_segment_size_mb:40");
    assert_int_equal(c.large_segment_size, 40 * MiB);
    c = parse_ok("min_block_size:256,large_segment_size_mb:20971776B,round_large:256");
    assert_int_equal(c.large_segment_size, 20 * MiB + 256);
    c = parse_ok("min_block_size:64K,round_large:64K");
    assert_int_equal(c.round_large, 64 * KiB);
}

/* ------------------------------------------------------------------------
 * roundup_power2_divisions
 * ---------------------------------------------------------------------- */

static void test_roundup_single(void **state)
{
    (void)state;
    static const unsigned values[] = {0, 1, 2, 4, 8, 1024};
    for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
        char text[64];
        unsigned want[CONF_ROUNDUP_INTERVALS];
        snprintf(text, sizeof text, "roundup_power2_divisions:%u", values[v]);
        for (unsigned i = 0; i < CONF_ROUNDUP_INTERVALS; i++)
            want[i] = values[v];
        conf_t c = parse_ok(text);
        assert_divs(&c, want);
    }
    ERR("roundup_power2_divisions:3", "roundup_power2_divisions:3: 3 is not 0 or a power of two; ", divs_accepted);
    ERR("roundup_power2_divisions:2048", "roundup_power2_divisions:2048: 2048 is more than 1024; ", divs_accepted);
    ERR("roundup_power2_divisions:-1", "roundup_power2_divisions:-1: '-1' is not a number; ", divs_accepted);
    ERR("roundup_power2_divisions:4K", "'4K' is not a number", divs_accepted);
    ERR("roundup_power2_divisions:", "roundup_power2_divisions:: '' is not a number; ", divs_accepted);
    ERR("roundup_power2_divisions:99999999999999999999999", "is not a number", divs_accepted);
}

static void test_roundup_list(void **state)
{
    (void)state;
    /* PyTorch's example: the first key fills below, '>' fills after the last key */
    static const unsigned pytorch[CONF_ROUNDUP_INTERVALS] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8};
    conf_t c = parse_ok("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
    assert_divs(&c, pytorch);
    /* intervals between listed keys stay 0, and so does the tail without '>' */
    static const unsigned gaps[CONF_ROUNDUP_INTERVALS] = {8, 8, 8, 8, 8, 8, 8, 0, 4};
    c = parse_ok("roundup_power2_divisions:[64:8,256:4]");
    assert_divs(&c, gaps);
    static const unsigned low[CONF_ROUNDUP_INTERVALS] = {2, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4};
    c = parse_ok("roundup_power2_divisions:[1:2,>:4]");
    assert_divs(&c, low);
    static const unsigned all8[CONF_ROUNDUP_INTERVALS] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
    c = parse_ok("roundup_power2_divisions:[>:8]");
    assert_divs(&c, all8);
    static const unsigned top[CONF_ROUNDUP_INTERVALS] = {16, 16, 16, 16, 16, 16, 16, 16,
                                                         16, 16, 16, 16, 16, 16, 16, 16};
    c = parse_ok("roundup_power2_divisions:[32768:16]");
    assert_divs(&c, top);
    static const unsigned zeros[CONF_ROUNDUP_INTERVALS] = {0, 0, 2};
    c = parse_ok("roundup_power2_divisions:[4:0,4096:0,8192:0]");
    assert_divs(&c, (unsigned[CONF_ROUNDUP_INTERVALS]){0});
    c = parse_ok("roundup_power2_divisions:[2:0,4:2]");
    assert_divs(&c, zeros);
    c = parse_ok("roundup_power2_divisions: [ 256 : 1 ,512:2 , 1024:4,\n>:8 ] ");
    assert_divs(&c, pytorch);

    ERR("roundup_power2_divisions:[]", "roundup_power2_divisions:[]: the list is empty; ", divs_accepted);
    ERR("roundup_power2_divisions:[ ]", "the list is empty; ", divs_accepted);
    ERR("roundup_power2_divisions:[256:1,128:2]",
        "roundup_power2_divisions:[256:1,128:2]: keys must increase: 128 comes after 256; ", divs_accepted);
    ERR("roundup_power2_divisions:[256:1,256:2]", "keys must increase: 256 comes after 256", divs_accepted);
    ERR("roundup_power2_divisions:[300:1]", "key 300 is not a power of two from 1 to 32768; ", divs_accepted);
    ERR("roundup_power2_divisions:[65536:1]", "key 65536 is not a power of two from 1 to 32768", divs_accepted);
    ERR("roundup_power2_divisions:[0:1]", "key 0 is not a power of two", divs_accepted);
    ERR("roundup_power2_divisions:[256:3]", "roundup_power2_divisions:[256:3]: 3 is not 0 or a power of two; ",
        divs_accepted);
    ERR("roundup_power2_divisions:[256:2048]", "2048 is more than 1024", divs_accepted);
    ERR("roundup_power2_divisions:[>:1,256:2]", "'256:2' after '>': '>' must come last", divs_accepted);
    ERR("roundup_power2_divisions:[>:1,>:2]", "'>:2' after '>'", divs_accepted);
    ERR("roundup_power2_divisions:[256]", "'256' is not MiB:divisions", divs_accepted);
    ERR("roundup_power2_divisions:[256:1,]", "empty entry in the list", divs_accepted);
    ERR("roundup_power2_divisions:[,256:1]", "empty entry in the list", divs_accepted);
    ERR("roundup_power2_divisions:[a:1]", "key 'a' is not a number of MiB or '>'", divs_accepted);
    ERR("roundup_power2_divisions:[256M:1]", "key '256M' is not a number of MiB", divs_accepted);
    ERR("roundup_power2_divisions:[256:]", "'' is not a number", divs_accepted);
    ERR("roundup_power2_divisions:[256:1]x", "roundup_power2_divisions:[256:1]x: text after ']'", divs_accepted);
    ERR("roundup_power2_divisions:x[256:1]", "'x[256:1]' is not a number", divs_accepted);
}

static void test_roundup_interval(void **state)
{
    (void)state;
    conf_t c = parse_ok("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
    static const struct {
        size_t size;
        unsigned divs;
    } pytorch[] = {
        {0, 1},         {1, 1},       {MiB, 1}, {2 * MiB - 1, 1}, {2 * MiB, 1}, {256 * MiB, 1}, {512 * MiB - 1, 1},
        {512 * MiB, 2}, {GiB - 1, 2}, {GiB, 4}, {2 * GiB - 1, 4}, {2 * GiB, 8}, {32 * GiB, 8},  {64 * GiB, 8},
        {SIZE_MAX, 8},
    };
    for (size_t i = 0; i < sizeof pytorch / sizeof pytorch[0]; i++)
        if (conf_roundup_divisions(&c, pytorch[i].size) != pytorch[i].divs)
            fail_msg("size %zu: %u divisions, expected %u", pytorch[i].size,
                     conf_roundup_divisions(&c, pytorch[i].size), pytorch[i].divs);

    /* the ends: below 2 MiB is interval 0, 32 GiB and up is interval 15 */
    c = parse_ok("roundup_power2_divisions:[1:2,2:4]");
    assert_int_equal(conf_roundup_divisions(&c, 0), 2);
    assert_int_equal(conf_roundup_divisions(&c, MiB - 1), 2);
    assert_int_equal(conf_roundup_divisions(&c, 2 * MiB - 1), 2);
    assert_int_equal(conf_roundup_divisions(&c, 2 * MiB), 4);
    assert_int_equal(conf_roundup_divisions(&c, 4 * MiB - 1), 4);
    assert_int_equal(conf_roundup_divisions(&c, 4 * MiB), 0);
    c = parse_ok("roundup_power2_divisions:[16384:2,32768:4]");
    assert_int_equal(conf_roundup_divisions(&c, 16 * GiB), 2);
    assert_int_equal(conf_roundup_divisions(&c, 32 * GiB - 1), 2);
    assert_int_equal(conf_roundup_divisions(&c, 32 * GiB), 4);
    assert_int_equal(conf_roundup_divisions(&c, TiB), 4);
    assert_int_equal(conf_roundup_divisions(&c, SIZE_MAX), 4);
    assert_int_equal(conf_roundup_divisions(&c, 0), 2);
}

/* ------------------------------------------------------------------------
 * help and describe
 * ---------------------------------------------------------------------- */

static void test_help_lists_every_key(void **state)
{
    static lines_t help, desc;
    conf_t d;
    (void)state;
    memset(&help, 0, sizeof help);
    memset(&desc, 0, sizeof desc);
    conf_help(lines_add, &help);
    conf_defaults(&d);
    conf_describe(&d, lines_add, &desc);
    assert_int_equal(help.n, 2 + (int)NKEYS);
    assert_non_null(strstr(help.line[0], "CUCACHE_CONF=key:value"));
    assert_non_null(strstr(help.line[1], "default"));
    assert_non_null(strstr(help.line[1], "meaning"));
    for (size_t k = 0; k < NKEYS; k++) {
        /* row k+2 is the key's: "name type default meaning [accepted]" */
        const char *line = help.line[2 + k];
        char name[64], type[16], def[64], want[64];
        if (sscanf(line, "%63s %15s %63s", name, type, def) != 3)
            fail_msg("help line \"%s\" is not a table row", line);
        assert_string_equal(name, all_keys[k]);
        assert_non_null(strchr(line, '['));
        assert_true(strlen(line) > 40 + strlen(name)); /* a meaning follows */
        /* the default help shows is the one conf_defaults sets */
        describe_value(describe_line(&desc, all_keys[k]), want, sizeof want);
        if (strcmp(def, want) != 0)
            fail_msg("%s: help says default %s, conf_defaults gives %s", name, def, want);
    }
}

static void test_describe_marks(void **state)
{
    static lines_t l;
    char v[256];
    conf_t d;
    (void)state;
    memset(&l, 0, sizeof l);
    conf_defaults(&d);
    conf_describe(&d, lines_add, &l);
    assert_int_equal(l.n, (int)NKEYS);
    for (size_t k = 0; k < NKEYS; k++) {
        const char *line = describe_line(&l, all_keys[k]);
        size_t n = strlen(line);
        if (n < 10 || strcmp(line + n - 10, " (default)") != 0)
            fail_msg("default configuration, line \"%s\" not marked (default)", line);
    }
    describe_value(describe_line(&l, "max_split_size_mb"), v, sizeof v);
    assert_string_equal(v, "unlimited");
    describe_value(describe_line(&l, "fraction"), v, sizeof v);
    assert_string_equal(v, "0.92");
    describe_value(describe_line(&l, "min_block_size"), v, sizeof v);
    assert_string_equal(v, "512");

    static const struct {
        const char *key, *value;
    } changed[] = {
        {"max_split_size_mb", "100M"},
        {"reuse", "sync"},
        {"roundup_power2_divisions", "[256:1,512:2,1024:4,>:8]"},
        {"fraction", "0.5"},
        {"garbage_collection_threshold", "0.05"},
        {"limit_mb", "1536K"},
        {"small_size", "1000"},
    };
    conf_t c = parse_ok("max_split_size_mb:100,reuse:sync,roundup_power2_divisions:[256:1,512:2,1024:4,>:8],"
                        "fraction:0.5,garbage_collection_threshold:0.05,limit_mb:1.5,small_size:1000");
    memset(&l, 0, sizeof l);
    conf_describe(&c, lines_add, &l);
    assert_int_equal(l.n, (int)NKEYS);
    for (size_t k = 0; k < NKEYS; k++) {
        const char *line = describe_line(&l, all_keys[k]), *want_mark = "(default)";
        for (size_t j = 0; j < sizeof changed / sizeof changed[0]; j++) {
            if (strcmp(changed[j].key, all_keys[k]) == 0) {
                want_mark = "(CUCACHE_CONF)";
                describe_value(line, v, sizeof v);
                if (strcmp(v, changed[j].value) != 0)
                    fail_msg("%s: describe shows %s, expected %s", all_keys[k], v, changed[j].value);
            }
        }
        if (!strstr(line, want_mark))
            fail_msg("line \"%s\" is not marked %s", line, want_mark);
    }
}

/* The values describe marks (CUCACHE_CONF) read back, through conf_parse, to the same configuration. */
static void test_describe_reads_back(void **state)
{
    static const char *const texts[] = {
        "roundup_power2_divisions:[64:8,256:4],fraction:0.123456,limit_mb:1048577B,min_block_size:1K",
        "roundup_power2_divisions:[1:2,2:4,4:8,1024:0,>:1],reuse:stream,strategy:preallocate,max_split_size_mb:20.5",
        "roundup_power2_divisions:[32768:16],small_size:3000,small_segment_size:3M,round_large:16M",
        "roundup_power2_divisions:[2:1,8:2,32:4,128:8,512:16,2048:32,8192:64,32768:128],min_large_alloc:1",
        ("per_process_memory_fraction:0.75,garbage_collection_threshold:0.6,large_segment_size_mb:15.5,"
         "max_non_split_rounding_mb:1T"),
    };
    (void)state;
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        static lines_t l;
        char back[2048] = "", v[256], err[ERRLEN];
        conf_t c = parse_ok(texts[t]), again;
        memset(&l, 0, sizeof l);
        conf_describe(&c, lines_add, &l);
        for (size_t k = 0; k < NKEYS; k++) {
            const char *line = describe_line(&l, all_keys[k]);
            if (strstr(line, "(default)"))
                continue; /* not every default can be written (unlimited, a threshold of 0) */
            describe_value(line, v, sizeof v);
            size_t n = strlen(back);
            snprintf(back + n, sizeof back - n, "%s%s:%s", n ? "," : "", all_keys[k], v);
        }
        conf_defaults(&again);
        if (conf_parse(&again, back, err, sizeof err) != 0)
            fail_msg("describe's \"%s\" does not parse: %s", back, err);
        if (!conf_same(&c, &again))
            fail_msg("\"%s\" reads back differently from \"%s\"", back, texts[t]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenize_items),
        cmocka_unit_test(test_tokenize_errors),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_empty_text),
        cmocka_unit_test(test_help_keyword),
        cmocka_unit_test(test_whitespace_and_order),
        cmocka_unit_test(test_last_key_wins),
        cmocka_unit_test(test_parse_over_current),
        cmocka_unit_test(test_unchanged_on_error),
        cmocka_unit_test(test_error_buffer),
        cmocka_unit_test(test_error_quotes_safely),
        cmocka_unit_test(test_conf_show),
        cmocka_unit_test(test_unknown_key),
        cmocka_unit_test(test_size_units),
        cmocka_unit_test(test_size_errors),
        cmocka_unit_test(test_size_reader_flags),
        cmocka_unit_test(test_key_max_split_size),
        cmocka_unit_test(test_key_max_non_split_rounding),
        cmocka_unit_test(test_key_limit),
        cmocka_unit_test(test_key_gc_threshold),
        cmocka_unit_test(test_key_memory_fraction),
        cmocka_unit_test(test_key_fraction),
        cmocka_unit_test(test_key_expandable_segments),
        cmocka_unit_test(test_key_backend),
        cmocka_unit_test(test_key_strategy),
        cmocka_unit_test(test_key_reuse),
        cmocka_unit_test(test_rule_table),
        cmocka_unit_test(test_key_min_block_size),
        cmocka_unit_test(test_key_small_size),
        cmocka_unit_test(test_key_small_segment_size),
        cmocka_unit_test(test_key_min_large_alloc),
        cmocka_unit_test(test_key_large_segment_size),
        cmocka_unit_test(test_key_round_large),
        cmocka_unit_test(test_cross_keys),
        cmocka_unit_test(test_roundup_single),
        cmocka_unit_test(test_roundup_list),
        cmocka_unit_test(test_roundup_interval),
        cmocka_unit_test(test_help_lists_every_key),
        cmocka_unit_test(test_describe_marks),
        cmocka_unit_test(test_describe_reads_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
