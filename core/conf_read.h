/*
 * Shared by conf.c (the option table, parsing, help) and conf_read.c (the
 * tokenizer, the value readers, text helpers): what both need, nothing of
 * it for other files (they use conf.h).
 */
#ifndef CUCACHE_CORE_CONF_READ_H
#define CUCACHE_CORE_CONF_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* Sizes stop at 1024T, so the core may add two of them without overflow. */
#define CONF_SIZE_CAP ((uint64_t)1 << 50)

#define CONF_DIVS_MAX 1024u      /* largest roundup_power2_divisions value */
#define CONF_DIVS_KEY_MAX 32768u /* MiB: the key of the last interval (32 GiB) */

#define CONF_LINE_MAX 512  /* one line of conf_help / conf_describe */
#define CONF_VALUE_MAX 256 /* one formatted value (the roundup list is the longest) */
#define CONF_KEY_MAX 48    /* longest unknown key we look for a near match of */
#define CONF_KEY_COLUMN 28 /* width of the key column in help and describe */

typedef struct conf_err_s {
    char *buf;  /* the caller's buffer, or NULL */
    size_t len; /* its size in bytes */
} conf_err_t;

/* Writes "CUCACHE_CONF: " and the message into e (truncated, NUL-terminated); returns -1. */
__attribute__((format(printf, 2, 3))) int conf_fail(conf_err_t *e, const char *fmt, ...);
/* Drops the whitespace at both ends of s[0..n). */
void conf_trim(const char **s, size_t *n);
bool conf_eq(const char *s, size_t n, const char *word);
bool conf_is_pow2(uint64_t v);
/* A size as `20M`, `1536K`, `512` (or `512B` when a bare number would mean MiB). */
void conf_fmt_size(char *buf, size_t len, size_t v, bool bare_is_bytes);
/* A fraction with up to six decimals and no trailing zeros; x in [0, 1e12). */
void conf_fmt_frac(char *buf, size_t len, double x);
/*
 * A plain decimal (`0.8`, `1`, `.5`, `1.`): digits and one optional point,
 * nothing else.  The digits are read as one integer and divided once by a
 * power of ten (exact up to 1e22), so `0.92` is the double nearest 0.92.
 */
bool conf_read_frac(const char *s, size_t n, double *out);
/* PyTorch writes True/False; 1/0 and lower case are accepted too. */
bool conf_read_bool(const char *s, size_t n, bool *out);
bool conf_read_div(const char *s, size_t n, unsigned *out, char *why, size_t whylen);
/* floor(log2(v)) for v > 0 */
unsigned conf_log2(uint64_t v);
/*
 * `[256:1,512:2,1024:4,>:8]`, PyTorch's semantics: a key is a size in MiB
 * (a power of two from 1 to 32768) and sets the interval floor(log2(key));
 * the first key's value also fills every interval below it; `>` fills every
 * interval after the last key (all of them when it comes alone); intervals
 * between listed keys stay 0.  Keys must increase; nothing follows `>`.
 */
bool conf_read_divs_list(const char *s, size_t n, unsigned divs[CONF_ROUNDUP_INTERVALS], char *why, size_t whylen);

#endif
