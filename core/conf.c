/*
 * CUCACHE_CONF parsing (core/conf.h).
 *
 * Three layers, each tested on its own in tests/core/test_conf.c (the first
 * two in conf_read.c, the table here):
 *
 *   - the tokenizer (conf_tokenize) splits the text into `key:value` items at
 *     top-level commas (commas inside [...] belong to the value), trims the
 *     whitespace around keys and values, and knows nothing about keys;
 *   - the value readers read a size, a fraction, a boolean, a name or the
 *     roundup list out of one value;
 *   - the option table (conf_opts) gives each key one row: name, type,
 *     default, accepted values, meaning, handler.  conf_check applies the
 *     constraints between keys once every item has been read.
 *
 * Rules that are ours rather than PyTorch's: a repeated key is not an error,
 * the last one wins (roundup_power2_divisions is then replaced as a whole);
 * an empty item (`a:1,,b:2`, a trailing comma) is an error; so is an unknown
 * key.  Lines handed to the write callbacks carry no prefix and no newline:
 * the caller's sink adds both.
 *
 * conf_parse works on a copy and commits only when everything is valid.
 * Nothing here allocates or keeps state: buffers are on the stack and the
 * configuration belongs to the caller.  Numbers are read and written without
 * the C library's locale-dependent functions (strtod, %f, isdigit): the
 * library runs inside programs that may call setlocale.
 */
#include "conf.h"
#include "conf_read.h"
#include "rules.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(conf_strategy_t) == sizeof(int), "choice fields are stored as int");
_Static_assert(sizeof(conf_reuse_t) == sizeof(int), "choice fields are stored as int");
_Static_assert(sizeof(conf_ipc_t) == sizeof(int), "choice fields are stored as int");
_Static_assert(sizeof(size_t) == sizeof(uint64_t), "sizes are read as uint64_t");


typedef struct conf_opt_s conf_opt_t;

/* Reads the value v[0..n) into c or writes an error into e and returns -1. */
typedef int (*conf_set_fn)(const conf_opt_t *o, conf_t *c, const char *v, size_t n, conf_err_t *e);
/* Writes the field's current value, as describe shows it. */
typedef void (*conf_show_fn)(const conf_opt_t *o, const conf_t *c, char *buf, size_t len);

enum {
    CONF_F_POW2 = 1u << 0,      /* size: a power of two */
    CONF_F_ZERO_OK = 1u << 1,   /* size: 0 is accepted below min */
    CONF_F_HI_CLOSED = 1u << 2, /* fraction: hi itself is accepted */
};

struct conf_opt_s {
    const char *name;         /* the key */
    const char *type;         /* as help shows it */
    const char *def;          /* the default as help shows it; equals show() of conf_defaults (tested) */
    const char *range;        /* accepted values, in help and in error messages */
    const char *meaning;      /* one line */
    conf_set_fn set;          /* the handler */
    conf_show_fn show;        /* the effective value */
    size_t off;               /* offsetof(conf_t, field) for the generic handlers */
    uint64_t unit;            /* size: bytes in a bare number (1 or MiB) */
    uint64_t min, max;        /* size: bounds, inclusive (max 0: CONF_SIZE_CAP) */
    const char *too_small;    /* size: why a value below min is refused (NULL: no more than "too small") */
    unsigned flags;           /* CONF_F_* */
    double lo, hi;            /* fraction: bounds, exclusive unless CONF_F_HI_CLOSED */
    const char *const *names; /* choice: accepted names, indexed by the enum value (NULL: the reuse rules) */
};

static void conf_get(const conf_opt_t *o, const conf_t *c, void *v, size_t n)
{
    memcpy(v, (const char *)c + o->off, n);
}

static void conf_put(const conf_opt_t *o, conf_t *c, const void *v, size_t n)
{
    memcpy((char *)c + o->off, v, n);
}

static int conf_size_fail(const conf_opt_t *o, const char *v, size_t n, const char *why, conf_err_t *e)
{
    char q[CONF_SHOW_BUF];
    return conf_fail(e, "%s:%s: %sexpected a size of %s (%s)", o->name, conf_show(q, v, n), why, o->range,
                     o->unit == MiB ? "a number of MiB, or with a unit: 512M, 2G"
                                    : "a number of bytes, or with a unit: 4096, 64K, 2M");
}

static int conf_set_size(const conf_opt_t *o, conf_t *c, const char *v, size_t n, conf_err_t *e)
{
    uint64_t x = 0, max = o->max ? o->max : CONF_SIZE_CAP;
    switch (conf_read_size(v, n, o->unit, 0, &x)) {
    case CONF_NUM_OK:
        break;
    case CONF_NUM_NEG:
        return conf_size_fail(o, v, n, "negative; ", e);
    case CONF_NUM_BIG:
        return conf_size_fail(o, v, n, "too large (sizes stop at 1024T); ", e);
    case CONF_NUM_FRAC:
        return conf_size_fail(o, v, n, "not a whole number of bytes; ", e);
    case CONF_NUM_BAD:
        return conf_size_fail(o, v, n, "", e);
    }
    if (x < o->min && !(x == 0 && (o->flags & CONF_F_ZERO_OK))) {
        char why[CONF_LINE_MAX];
        snprintf(why, sizeof why, "too small%s%s%s; ", o->too_small ? " (" : "", o->too_small ? o->too_small : "",
                 o->too_small ? ")" : "");
        return conf_size_fail(o, v, n, why, e);
    }
    if (x > max)
        return conf_size_fail(o, v, n, "too large; ", e);
    if ((o->flags & CONF_F_POW2) && !conf_is_pow2(x))
        return conf_size_fail(o, v, n, "not a power of two; ", e);
    size_t sz = (size_t)x;
    conf_put(o, c, &sz, sizeof sz);
    return 0;
}

static void conf_show_size(const conf_opt_t *o, const conf_t *c, char *buf, size_t len)
{
    size_t v;
    conf_get(o, c, &v, sizeof v);
    conf_fmt_size(buf, len, v, o->unit == 1);
}

static int conf_set_frac(const conf_opt_t *o, conf_t *c, const char *v, size_t n, conf_err_t *e)
{
    char q[CONF_SHOW_BUF];
    double x;
    bool hi_ok = o->flags & CONF_F_HI_CLOSED;
    if (!conf_read_frac(v, n, &x) || x <= o->lo || x > o->hi || (x == o->hi && !hi_ok))
        return conf_fail(e, "%s:%s: expected a number %s (for example 0.8)", o->name, conf_show(q, v, n), o->range);
    conf_put(o, c, &x, sizeof x);
    return 0;
}

static void conf_show_frac(const conf_opt_t *o, const conf_t *c, char *buf, size_t len)
{
    double v;
    conf_get(o, c, &v, sizeof v);
    conf_fmt_frac(buf, len, v);
}

/* The choice's i-th name, NULL past the last. */
static const char *conf_choice_name(const conf_opt_t *o, int i)
{
    if (o->names)
        return o->names[i];
    return i < CONF_REUSE_COUNT ? core_rules[i].name : NULL;
}

/* The reuse rules' names, "a, b or c" (range), or each with its help line
 * (meaning), from the rule table. */
static const char *conf_rules_text(char *buf, size_t len, bool meaning)
{
    size_t k = 0;
    buf[0] = 0;
    if (meaning)
        k = (size_t)snprintf(buf, len, "when a block a plain free gave back serves again: ");
    for (int i = 0; i < CONF_REUSE_COUNT && k < len; i++) {
        const char *sep = i == 0 ? "" : meaning ? "; " : i == CONF_REUSE_COUNT - 1 ? " or " : ", ";
        if (meaning)
            k += (size_t)snprintf(buf + k, len - k, "%s%s: %s", sep, core_rules[i].name, core_rules[i].help);
        else
            k += (size_t)snprintf(buf + k, len - k, "%s%s", sep, core_rules[i].name);
    }
    return buf;
}

/* The option's accepted values, as help and errors show them. */
static const char *conf_range(const conf_opt_t *o, char *buf, size_t len)
{
    return o->range ? o->range : conf_rules_text(buf, len, false);
}

static int conf_set_choice(const conf_opt_t *o, conf_t *c, const char *v, size_t n, conf_err_t *e)
{
    char q[CONF_SHOW_BUF], r[CONF_VALUE_MAX];
    for (int i = 0; conf_choice_name(o, i); i++) {
        if (conf_eq(v, n, conf_choice_name(o, i))) {
            conf_put(o, c, &i, sizeof i);
            return 0;
        }
    }
    return conf_fail(e, "%s:%s: expected %s", o->name, conf_show(q, v, n), conf_range(o, r, sizeof r));
}

static void conf_show_choice(const conf_opt_t *o, const conf_t *c, char *buf, size_t len)
{
    int v;
    conf_get(o, c, &v, sizeof v);
    snprintf(buf, len, "%s", conf_choice_name(o, v));
}

static int conf_set_bool(const conf_opt_t *o, conf_t *c, const char *v, size_t n, conf_err_t *e)
{
    char q[CONF_SHOW_BUF];
    bool x;
    if (!conf_read_bool(v, n, &x))
        return conf_fail(e, "%s:%s: expected true or false (also True, False, 1, 0)", o->name, conf_show(q, v, n));
    conf_put(o, c, &x, sizeof x);
    return 0;
}

static void conf_show_bool(const conf_opt_t *o, const conf_t *c, char *buf, size_t len)
{
    bool v;
    conf_get(o, c, &v, sizeof v);
    snprintf(buf, len, "%s", v ? "true" : "false");
}

/* backend: PyTorch's allocator backend.  cucache sits under the native one. */
static int conf_set_backend(const conf_opt_t *o, conf_t *c, const char *v, size_t n, conf_err_t *e)
{
    char q[CONF_SHOW_BUF];
    (void)c;
    if (conf_eq(v, n, "native"))
        return 0;
    if (conf_eq(v, n, "cudaMallocAsync"))
        return conf_fail(e, "%s:%s: cucache replaces that backend; accepted: %s", o->name, conf_show(q, v, n),
                         o->range);
    return conf_fail(e, "%s:%s: expected %s", o->name, conf_show(q, v, n), o->range);
}

static void conf_show_backend(const conf_opt_t *o, const conf_t *c, char *buf, size_t len)
{
    (void)o;
    (void)c;
    snprintf(buf, len, "native");
}

static int conf_set_divs(const conf_opt_t *o, conf_t *c, const char *v, size_t n, conf_err_t *e)
{
    char q[CONF_SHOW_BUF], why[2 * CONF_SHOW_BUF + 64];
    unsigned divs[CONF_ROUNDUP_INTERVALS] = {0};
    bool ok;
    if (n && v[0] == '[') {
        ok = conf_read_divs_list(v, n, divs, why, sizeof why);
    } else {
        unsigned d = 0;
        ok = conf_read_div(v, n, &d, why, sizeof why);
        for (unsigned i = 0; i < CONF_ROUNDUP_INTERVALS; i++)
            divs[i] = d;
    }
    if (!ok)
        return conf_fail(e, "%s:%s: %s; expected %s", o->name, conf_show(q, v, n), why, o->range);
    memcpy(c->roundup_divs, divs, sizeof divs);
    return 0;
}

/*
 * One number when every interval agrees; otherwise the shortest list that
 * reads back the same: the first key ends the leading run, each interval
 * up to the trailing run is listed, and `>` covers the trailing run.
 */
static void conf_show_divs(const conf_opt_t *o, const conf_t *c, char *buf, size_t len)
{
    const unsigned *d = c->roundup_divs;
    unsigned lead = 0, tail = CONF_ROUNDUP_INTERVALS - 1;
    (void)o;
    while (lead + 1 < CONF_ROUNDUP_INTERVALS && d[lead + 1] == d[0])
        lead++;
    if (lead == CONF_ROUNDUP_INTERVALS - 1) {
        snprintf(buf, len, "%u", d[0]);
        return;
    }
    while (d[tail - 1] == d[CONF_ROUNDUP_INTERVALS - 1])
        tail--; /* stops above lead: d[lead + 1] differs from d[0] */
    size_t k = 0;
    for (unsigned i = lead; i < tail && k < len; i++) {
        int w = snprintf(buf + k, len - k, "%s%u:%u", i == lead ? "[" : ",", 1u << i, d[i]);
        k += w > 0 ? (size_t)w : 0;
    }
    if (k < len)
        snprintf(buf + k, len - k, ",>:%u]", d[CONF_ROUNDUP_INTERVALS - 1]);
}

static const char *const conf_strategy_names[] = {"auto_growth", "preallocate", NULL};
static const char *const conf_ipc_names[] = {"peer", "strict", NULL};

#define CONF_DIVS_RANGE                                                                                                \
    "0 or a power of two up to 1024, or a list [MiB:N,...,>:N] whose keys are powers of two from 1 to 32768 in "       \
    "increasing order"

#define F(field) offsetof(conf_t, field)

/* clang-format off */
static const conf_opt_t conf_opts[] = {
    /* PyTorch's keys, same meaning */
    {"max_split_size_mb", "MiB", "unlimited", "at least 20M",
     "blocks this large or larger are never split; smaller requests never get one",
     conf_set_size, conf_show_size, .off = F(max_split_size), .unit = MiB, .min = 20 * MiB,
     .too_small = "PyTorch refuses it too: the least is the 20 MiB of the large pool's smallest segments"},
    {"max_non_split_rounding_mb", "MiB", "20M", "at least 20M",
     "an unsplit block serves a request only if it is less than this much larger",
     conf_set_size, conf_show_size, .off = F(max_non_split_rounding), .unit = MiB, .min = 20 * MiB},
    {"roundup_power2_divisions", "list", "0", CONF_DIVS_RANGE,
     "round requests up to 1/N steps between powers of two, per size interval (0 = off)",
     conf_set_divs, conf_show_divs, .off = F(roundup_divs)},
    {"garbage_collection_threshold", "fraction", "0", "more than 0 and less than 1",
     "above this share of the allowed memory, release old unsplit cached blocks (0 = off)",
     conf_set_frac, conf_show_frac, .off = F(gc_threshold), .lo = 0, .hi = 1},
    {"expandable_segments", "bool", "false", "true or false",
     "one growing segment per stream and pool on virtual memory: pages mapped on demand, free pages given back",
     conf_set_bool, conf_show_bool, .off = F(expandable_segments)},
    {"expandable_page_mb", "MiB", "2M", "at least 2M, a multiple of 2M",
     "expandable segments: the unit in which the large pool maps and gives back memory (small pool: 2M)",
     conf_set_size, conf_show_size, .off = F(expandable_page), .unit = MiB, .min = 2 * MiB},
    {"per_process_memory_fraction", "fraction", "1", "more than 0, at most 1",
     "share of the device's memory this process may hold",
     conf_set_frac, conf_show_frac, .off = F(memory_fraction), .lo = 0, .hi = 1, .flags = CONF_F_HI_CLOSED},
    {"backend", "choice", "native", "native",
     "PyTorch's allocator backend; cucache caches under the native one",
     conf_set_backend, conf_show_backend, .off = 0 /* no field */},
    /* cucache's and Paddle's keys */
    {"expandable_share_pages", "bool", "false", "true or false",
     "expandable segments, memory tight: a request that maps pages may start in the free end of a page another "
     "block ends in, or end in the free start of one, that page mapped a second time (up to two pages fewer)",
     conf_set_bool, conf_show_bool, .off = F(share_pages)},
    {"limit_mb", "MiB", "0", "0 (none) or at least 1M",
     "most device memory held at once, even when the device has more (Paddle's FLAGS_gpu_memory_limit_mb)",
     conf_set_size, conf_show_size, .off = F(limit), .unit = MiB, .min = MiB, .flags = CONF_F_ZERO_OK},
    {"strategy", "choice", "auto_growth", "auto_growth or preallocate",
     "grow on demand and cache on free, or reserve `fraction` of free memory at first use",
     conf_set_choice, conf_show_choice, .off = F(strategy), .names = conf_strategy_names},
    {"fraction", "fraction", "0.92", "more than 0, at most 1",
     "strategy:preallocate: share of free memory reserved at first use",
     conf_set_frac, conf_show_frac, .off = F(fraction), .lo = 0, .hi = 1, .flags = CONF_F_HI_CLOSED},
    {"reuse", "choice", "ordered", NULL, NULL, /* the rule table's names and lines (rules.h) */
     conf_set_choice, conf_show_choice, .off = F(reuse), .names = NULL},
    {"max_pending_mb", "MiB", "256M", "0 or at least 1M",
     "frees still behind fences the cache may hold beyond the live bytes before a miss waits for a fence",
     conf_set_size, conf_show_size, .off = F(max_pending), .unit = MiB, .min = MiB, .flags = CONF_F_ZERO_OK},
    {"ipc", "choice", "peer", "peer or strict",
     "IPC handles of cucache blocks open exactly the block in peers that run cucache, or are plain CUDA handles "
     "(a block not at its segment's start then cannot be exported)",
     conf_set_choice, conf_show_choice, .off = F(ipc), .names = conf_ipc_names},
    /* PyTorch's constants, configurable */
    {"min_block_size", "bytes", "512", "a power of two from 256 to 64K",
     "every request rounds up to a multiple of this",
     conf_set_size, conf_show_size, .off = F(min_block_size), .unit = 1, .min = 256, .max = 64 * KiB,
     .flags = CONF_F_POW2},
    {"small_size", "bytes", "1M", "more than 0, at most small_segment_size",
     "requests up to this size use the small pool",
     conf_set_size, conf_show_size, .off = F(small_size), .unit = 1, .min = 1},
    {"small_segment_size", "bytes", "2M", "at least small_size, a multiple of min_block_size",
     "segment size for small requests",
     conf_set_size, conf_show_size, .off = F(small_segment_size), .unit = 1, .min = 1},
    {"min_large_alloc", "bytes", "10M", "more than 0, less than large_segment_size_mb",
     "large requests below this get large_segment_size_mb segments",
     conf_set_size, conf_show_size, .off = F(min_large_alloc), .unit = 1, .min = 1},
    {"large_segment_size_mb", "MiB", "20M", "more than min_large_alloc, a multiple of min_block_size",
     "segment size for requests above small_size and below min_large_alloc",
     conf_set_size, conf_show_size, .off = F(large_segment_size), .unit = MiB, .min = 1},
    {"round_large", "bytes", "2M", "a power of two, at least min_block_size",
     "requests of min_large_alloc or more round their segment up to a multiple of this",
     conf_set_size, conf_show_size, .off = F(round_large), .unit = 1, .min = 1, .flags = CONF_F_POW2},
};
/* clang-format on */

#define CONF_NOPTS (sizeof conf_opts / sizeof conf_opts[0])

/* Constraints between keys, checked once every item is read. */
static int conf_check(const conf_t *c, conf_err_t *e)
{
    char a[32], b[32];
#define CONF_CHECK(ok, ka, va, rel, kb, vb)                                                                            \
    do {                                                                                                               \
        if (!(ok)) {                                                                                                   \
            conf_fmt_size(a, sizeof a, va, false);                                                                     \
            conf_fmt_size(b, sizeof b, vb, false);                                                                     \
            return conf_fail(e, "%s (%s) must be %s %s (%s)", ka, a, rel, kb, b);                                      \
        }                                                                                                              \
    } while (0)
    CONF_CHECK(c->small_segment_size >= c->small_size, "small_segment_size", c->small_segment_size, "at least",
               "small_size", c->small_size);
    CONF_CHECK(c->small_segment_size % c->min_block_size == 0, "small_segment_size", c->small_segment_size,
               "a multiple of", "min_block_size", c->min_block_size);
    CONF_CHECK(c->large_segment_size > c->min_large_alloc, "large_segment_size_mb", c->large_segment_size, "more than",
               "min_large_alloc", c->min_large_alloc);
    CONF_CHECK(c->large_segment_size % c->min_block_size == 0, "large_segment_size_mb", c->large_segment_size,
               "a multiple of", "min_block_size", c->min_block_size);
    CONF_CHECK(c->round_large >= c->min_block_size, "round_large", c->round_large, "at least", "min_block_size",
               c->min_block_size);
#undef CONF_CHECK
    if (c->expandable_page % (2 * MiB))
        return conf_fail(e, "expandable_page_mb (%s) must be a multiple of 2M (the devices' mapping granularity)",
                         (conf_fmt_size(a, sizeof a, c->expandable_page, false), a));
    if (c->share_pages && !c->expandable_segments)
        return conf_fail(e, "expandable_share_pages:true shares the pages of expandable segments: it needs "
                            "expandable_segments:true");
    if (c->expandable_segments && c->strategy == CONF_STRATEGY_PREALLOCATE)
        return conf_fail(e, "expandable_segments:true and strategy:preallocate exclude each other (one grows "
                            "segments on demand, the other reserves one chunk up front): choose one");
    return 0;
}

/* ------------------------------------------------------------------------
 * Parsing
 * ---------------------------------------------------------------------- */

/* Levenshtein distance, for "did you mean"; both strings at most CONF_KEY_MAX. */
static size_t conf_distance(const char *a, size_t na, const char *b, size_t nb)
{
    size_t row[CONF_KEY_MAX + 1];
    for (size_t j = 0; j <= nb; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

/* The key nearest to key[0..n) when it is close enough to be a typo, else NULL. */
static const char *conf_near_key(const char *key, size_t n)
{
    const char *best = NULL;
    size_t best_d = 4; /* at most 3 edits */
    if (n < 3 || n > CONF_KEY_MAX)
        return NULL;
    for (size_t i = 0; i < CONF_NOPTS; i++) {
        size_t len = strlen(conf_opts[i].name);
        size_t d = len <= CONF_KEY_MAX ? conf_distance(key, n, conf_opts[i].name, len) : SIZE_MAX;
        if (d < best_d) {
            best_d = d;
            best = conf_opts[i].name;
        }
    }
    return best;
}

typedef struct conf_parse_ctx_s {
    conf_t *c; /* the working copy */
    conf_err_t e;
} conf_parse_ctx_t;

static int conf_apply_item(void *ctx, const char *key, size_t klen, const char *val, size_t vlen, size_t col)
{
    conf_parse_ctx_t *p = ctx;
    (void)col;
    for (size_t i = 0; i < CONF_NOPTS; i++)
        if (conf_eq(key, klen, conf_opts[i].name))
            return conf_opts[i].set(&conf_opts[i], p->c, val, vlen, &p->e) ? -1 : 0;
    char qk[CONF_SHOW_BUF], qv[CONF_SHOW_BUF], hint[CONF_KEY_MAX + 32] = "";
    const char *near = conf_near_key(key, klen);
    if (near)
        snprintf(hint, sizeof hint, " (did you mean %s?)", near);
    return conf_fail(&p->e, "%s:%s: unknown key%s; run with CUCACHE_CONF=help for the list of keys",
                     conf_show(qk, key, klen), conf_show(qv, val, vlen), hint);
}

void conf_defaults(conf_t *c)
{
    memset(c, 0, sizeof *c);
    c->min_block_size = 512;
    c->small_size = 1 * MiB;
    c->small_segment_size = 2 * MiB;
    c->min_large_alloc = 10 * MiB;
    c->large_segment_size = 20 * MiB;
    c->round_large = 2 * MiB;
    c->max_split_size = SIZE_MAX;
    c->max_non_split_rounding = 20 * MiB;
    /* roundup_divs: all 0 (off) */
    c->gc_threshold = 0;
    c->expandable_segments = false;
    c->expandable_page = 2 * MiB;
    c->share_pages = false;
    c->memory_fraction = 1.0;
    c->limit = 0;
    c->strategy = CONF_STRATEGY_AUTO_GROWTH;
    c->fraction = 0.92;
    c->reuse = CONF_REUSE_ORDERED;
    c->max_pending = 256 * MiB;
    c->ipc = CONF_IPC_PEER;
}

int conf_parse(conf_t *c, const char *text, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!text)
        return 0;
    const char *t = text;
    size_t n = strlen(text);
    conf_trim(&t, &n);
    if (conf_eq(t, n, "help"))
        return 1;
    conf_t work = *c;
    conf_parse_ctx_t p = {&work, {err, errlen}};
    if (conf_tokenize(text, conf_apply_item, &p, err, errlen) || conf_check(&work, &p.e))
        return -1;
    *c = work;
    return 0;
}

/* ------------------------------------------------------------------------
 * Help and describe
 * ---------------------------------------------------------------------- */

void conf_help(void (*write)(void *ctx, const char *line), void *ctx)
{
    char line[CONF_LINE_MAX], range[CONF_VALUE_MAX], meaning[CONF_LINE_MAX];
    write(ctx, "CUCACHE_CONF=key:value,key:value,...  Sizes: 4096, 64K, 20M, 2G (binary units; keys ending in _mb "
               "read a bare number as MiB).  A repeated key: the last one wins.");
    snprintf(line, sizeof line, "%-*s %-8s %-11s %s", CONF_KEY_COLUMN, "key", "type", "default",
             "meaning [accepted values]");
    write(ctx, line);
    for (size_t i = 0; i < CONF_NOPTS; i++) {
        const conf_opt_t *o = &conf_opts[i];
        snprintf(line, sizeof line, "%-*s %-8s %-11s %s [%s]", CONF_KEY_COLUMN, o->name, o->type, o->def,
                 o->meaning ? o->meaning : conf_rules_text(meaning, sizeof meaning, true),
                 conf_range(o, range, sizeof range));
        write(ctx, line);
    }
}

void conf_describe(const conf_t *c, void (*write)(void *ctx, const char *line), void *ctx)
{
    char line[CONF_LINE_MAX], key[CONF_KEY_COLUMN + 8], now[CONF_VALUE_MAX], def[CONF_VALUE_MAX];
    conf_t d;
    conf_defaults(&d);
    for (size_t i = 0; i < CONF_NOPTS; i++) {
        const conf_opt_t *o = &conf_opts[i];
        o->show(o, c, now, sizeof now);
        o->show(o, &d, def, sizeof def);
        snprintf(key, sizeof key, "%s:", o->name);
        snprintf(line, sizeof line, "%-*s %s (%s)", CONF_KEY_COLUMN + 1, key, now,
                 strcmp(now, def) ? "CUCACHE_CONF" : "default");
        write(ctx, line);
    }
}
