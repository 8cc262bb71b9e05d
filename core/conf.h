/*
 * CUCACHE_CONF: the allocator's configuration, parsed in one place.
 *
 * Syntax, in the style of PYTORCH_CUDA_ALLOC_CONF: `key:value,key:value`,
 * whitespace ignored, lists in brackets (`roundup_power2_divisions:[256:1,
 * 512:2,>:8]`).  Keys keep PyTorch's names where the meaning is the same.
 * Sizes take units (`4096`, `512K`, `20M`, `2G`, `1T`; binary multiples;
 * optional `B`/`iB`); a key ending in `_mb` reads a bare number as MiB.
 * Booleans: true/false (PyTorch's True/False accepted).
 *
 * Every key is one row of the option table in conf.c: name, type, default,
 * range, one-line meaning.  The tokenizer is separate from the value
 * handlers; both are unit-tested (tests/core/test_conf.c).
 */
#ifndef CUCACHE_CORE_CONF_H
#define CUCACHE_CORE_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* roundup_power2_divisions intervals: index = floor(log2(size in MiB)),
 * clamped to [0, 15] (sizes below 2 MiB use 0, 32 GiB and above use 15). */
#define CONF_ROUNDUP_INTERVALS 16

typedef enum conf_strategy_e {
    CONF_STRATEGY_AUTO_GROWTH, /* grow on demand, cache on free (default) */
    CONF_STRATEGY_PREALLOCATE, /* reserve `fraction` of free memory at first use */
} conf_strategy_t;

/* The reuse rules: one row each in core_rules (rules.h), in this order. */
typedef enum conf_reuse_e {
    CONF_REUSE_ORDERED,
    CONF_REUSE_FENCED,
    CONF_REUSE_STREAM,
    CONF_REUSE_SYNC,
    CONF_REUSE_FENCED_HOST,
    CONF_REUSE_COUNT
} conf_reuse_t;

typedef enum conf_ipc_e {
    CONF_IPC_PEER,   /* handles of cucache blocks open in peers running cucache (default) */
    CONF_IPC_STRICT, /* plain CUDA handles; a block not at its segment's start is refused */
} conf_ipc_t;

typedef struct conf_s {
    /* sizes, in bytes */
    size_t min_block_size;         /* every request rounds up to a multiple; 512; power of two */
    size_t small_size;             /* requests up to this go to the small pool; 1 MiB */
    size_t small_segment_size;     /* segment size for small requests; 2 MiB; >= small_size */
    size_t min_large_alloc;        /* large requests below this get large_segment_size segments; 10 MiB */
    size_t large_segment_size;     /* large_segment_size_mb; 20 MiB; > min_large_alloc */
    size_t round_large;            /* larger requests round their segment up to this; 2 MiB */
    size_t max_split_size;         /* max_split_size_mb; SIZE_MAX = unlimited; >= 20 MiB */
    size_t max_non_split_rounding; /* max_non_split_rounding_mb; 20 MiB; >= 20 MiB */
    unsigned roundup_divs[CONF_ROUNDUP_INTERVALS]; /* 0 or 1: off; else power of two */
    double gc_threshold;                           /* garbage_collection_threshold; 0 = off, else in (0, 1) */
    bool expandable_segments; /* one growing segment per stream and pool on virtual memory (core/expand.c) */
    size_t expandable_page;   /* expandable_page_mb: the large pool's mapping unit; 2 MiB; a multiple of 2 MiB */
    bool share_pages;         /* expandable_share_pages: a growing request may start in another block's page */
    double memory_fraction;   /* per_process_memory_fraction; (0, 1]; 1 = whole device */
    size_t limit;             /* limit_mb; 0 = none */
    conf_strategy_t strategy; /* strategy:auto_growth|preallocate */
    double fraction;          /* preallocate: share of free memory reserved; (0, 1]; 0.92 */
    conf_reuse_t reuse;       /* reuse:<rule>: the row of core_rules (rules.h) */
    size_t max_pending;       /* max_pending_mb; pending bytes beyond the live ones before a miss waits; 256 MiB */
    conf_ipc_t ipc;           /* ipc:peer|strict (the interposer's IPC export, docs/interposer.md) */
} conf_t;

/* The defaults (PyTorch's policy, Paddle's auto_growth, the first reuse rule). */
void conf_defaults(conf_t *c);

/* Parses `text` over the current contents of *c (call conf_defaults first).
 * On error returns -1, leaves *c unchanged, and writes into err (always
 * NUL-terminated) one line naming the key, the value and what is accepted,
 * e.g. "CUCACHE_CONF: max_split_size_mb:abc: expected a size of at least
 * 20M (a number of MiB, or with a unit: 512M, 2G)".  "help" is not an error:
 * conf_parse returns 1 and sets nothing (the caller prints conf_help).
 * Returns 0 on success.  NULL or empty text is success. */
int conf_parse(conf_t *c, const char *text, char *err, size_t errlen);

/* Writes the table of keys (name, default, meaning), one line per key, as
 * `CUCACHE_CONF=help` prints it, through write(ctx, line).  Never allocates. */
void conf_help(void (*write)(void *ctx, const char *line), void *ctx);

/* Writes the effective configuration, one `key: value` line per key, each
 * marked "(default)" or "(CUCACHE_CONF)" against the defaults. */
void conf_describe(const conf_t *c, void (*write)(void *ctx, const char *line), void *ctx);

/* The rounding divisions for a request of `size` bytes (0 or 1 = off):
 * interval floor(log2(MiB)), 0 below 2 MiB.  Inline: every allocation asks. */
static inline unsigned conf_roundup_divisions(const conf_t *c, size_t size)
{
    size_t mib = size >> 20;
    unsigned i = mib ? 63u - (unsigned)__builtin_clzll((unsigned long long)mib) : 0;
    return c->roundup_divs[i < CONF_ROUNDUP_INTERVALS ? i : CONF_ROUNDUP_INTERVALS - 1];
}

/* ------------------------------------------------------------------------
 * The pieces conf_parse is made of, for every other reader of a size or of
 * CUCACHE_CONF text: the command-line tools, the OOM report's hint (the
 * simulated device, a project of its own, has its own copy of the size
 * reader and of conf_show).  Nothing else in cucache parses a size or
 * splits CUCACHE_CONF.
 * ---------------------------------------------------------------------- */

/*
 * A value a user gave, for an error message that names it (every refusal
 * of every layer: CUCACHE_CONF, the library's variables, cucache-run's and
 * cucache-replay's options): at most CONF_SHOW_MAX bytes of text, on one
 * line, safe on a terminal.  Printable ASCII stays as it is, a backslash
 * is doubled, and every other byte (control bytes, ESC, each byte of a
 * non-ASCII or invalid UTF-8 sequence) is written \xNN.  A value that does
 * not fit ends in "... (N bytes)", N its whole length.  Returns out.
 */
#define CONF_SHOW_MAX 160                  /* bytes of shown text, escapes included: a long file name fits */
#define CONF_SHOW_BUF (CONF_SHOW_MAX + 32) /* out's size: the text, "... (N bytes)" and the NUL */
const char *conf_show(char out[CONF_SHOW_BUF], const char *s, size_t n);

/* What conf_read_size found. */
typedef enum conf_num_e {
    CONF_NUM_OK,
    CONF_NUM_BAD,  /* not a number of the expected form */
    CONF_NUM_NEG,  /* starts with '-' */
    CONF_NUM_BIG,  /* overflows, or more than 1024T */
    CONF_NUM_FRAC, /* a decimal that is not a whole number of bytes */
} conf_num_t;

/* conf_read_size's flags; 0 is CUCACHE_CONF's own syntax. */
enum {
    CONF_SIZE_ROUND_DOWN = 1u << 0, /* a fraction of a byte is dropped ("0.1G", "1.5") instead of CONF_NUM_FRAC */
    CONF_SIZE_LAX_I = 1u << 1,      /* an 'i' needs neither a unit before it nor a 'B' after it ("2Ki", "64i") */
};

/*
 * Reads the size s[0..n) into *out, in bytes: decimal digits with an
 * optional decimal part, optional whitespace, then an optional unit K/M/G/T
 * (binary: powers of 1024) with an optional `B` or `iB`, or a lone `B` for
 * bytes; case-insensitive; nothing else (no sign, exponent, hexadecimal or
 * surrounding whitespace).  A bare number counts `bare` bytes a unit (1, or
 * 1 MiB for the `_mb` keys).  Sizes stop at 1024T.  Locale-independent and
 * allocation-free.  *out is set only on CONF_NUM_OK; the caller words the
 * error and checks its own range.
 */
conf_num_t conf_read_size(const char *s, size_t n, uint64_t bare, unsigned flags, uint64_t *out);

/*
 * The tokenizer of CUCACHE_CONF text on its own: splits it into `key:value`
 * items at top-level commas (commas inside [...] belong to the value).
 * Calls item() once per item, in order, with the trimmed key and value
 * (pointers into text, not NUL-terminated) and the 1-based column of the
 * key.  Returns 0; -1 with err written ("CUCACHE_CONF: ..." naming the
 * column) on a syntax error; or the first nonzero value item() returned.
 * NULL or blank text has no items.  To read a configuration, use conf_parse.
 */
typedef int (*conf_item_fn)(void *ctx, const char *key, size_t klen, const char *val, size_t vlen, size_t col);
int conf_tokenize(const char *text, conf_item_fn item, void *ctx, char *err, size_t errlen);

#endif
