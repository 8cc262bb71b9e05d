/*
 * CUCACHE_CONF parsing, the layers below the option table (conf.c has the
 * overview): the tokenizer, the value readers (sizes, fractions, booleans,
 * the roundup list) and the text helpers both use.  Locale-free: no strtod,
 * %f or isdigit.
 */
#include "conf_read.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Errors and text helpers
 * ---------------------------------------------------------------------- */

/* Writes "CUCACHE_CONF: " and the message into e (truncated, NUL-terminated); returns -1. */
__attribute__((format(printf, 2, 3))) int conf_fail(conf_err_t *e, const char *fmt, ...)
{
    if (!e->buf || !e->len)
        return -1;
    int n = snprintf(e->buf, e->len, "CUCACHE_CONF: ");
    if (n >= 0 && (size_t)n < e->len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->buf + n, e->len - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static bool conf_is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

static bool conf_is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static char conf_lower(char ch)
{
    return ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
}

/* Drops the whitespace at both ends of s[0..n). */
void conf_trim(const char **s, size_t *n)
{
    while (*n && conf_is_space(**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n && conf_is_space((*s)[*n - 1]))
        (*n)--;
}

bool conf_eq(const char *s, size_t n, const char *word)
{
    return strlen(word) == n && memcmp(s, word, n) == 0;
}

/* One byte as it may appear on a terminal: printable ASCII as itself, a
 * backslash doubled, every other byte (control bytes, escape sequences'
 * ESC, every byte of a multibyte or invalid UTF-8 sequence) as \xNN. */
static size_t conf_show_byte(char out[4], unsigned char ch)
{
    static const char hex[] = "0123456789abcdef";
    if (ch == '\\') {
        out[0] = out[1] = '\\';
        return 2;
    }
    if (ch >= 0x20 && ch < 0x7f) {
        out[0] = (char)ch;
        return 1;
    }
    out[0] = '\\', out[1] = 'x', out[2] = hex[ch >> 4], out[3] = hex[ch & 15];
    return 4;
}

const char *conf_show(char out[CONF_SHOW_BUF], const char *s, size_t n)
{
    size_t k = 0, i = 0;
    for (; i < n; i++) {
        char piece[4];
        size_t m = conf_show_byte(piece, (unsigned char)s[i]);
        if (k + m > CONF_SHOW_MAX)
            break;
        memcpy(out + k, piece, m);
        k += m;
    }
    if (i < n)
        snprintf(out + k, CONF_SHOW_BUF - k, "... (%zu bytes)", n);
    else
        out[k] = '\0';
    return out;
}

bool conf_is_pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

/* A size as `20M`, `1536K`, `512` (or `512B` when a bare number would mean MiB). */
void conf_fmt_size(char *buf, size_t len, size_t v, bool bare_is_bytes)
{
    static const char units[] = "KMGT";
    if (v == SIZE_MAX) {
        snprintf(buf, len, "unlimited");
        return;
    }
    for (int k = 4; k >= 1; k--) {
        size_t unit = (size_t)1 << (10 * k);
        if (v && v % unit == 0) {
            snprintf(buf, len, "%zu%c", v / unit, units[k - 1]);
            return;
        }
    }
    snprintf(buf, len, "%zu%s", v, v && !bare_is_bytes ? "B" : "");
}

/* A fraction with up to six decimals and no trailing zeros; x in [0, 1e12). */
void conf_fmt_frac(char *buf, size_t len, double x)
{
    uint64_t r = (uint64_t)(x * 1e6 + 0.5);
    unsigned frac = (unsigned)(r % 1000000);
    int digits = 6;
    while (frac && frac % 10 == 0) {
        frac /= 10;
        digits--;
    }
    if (frac)
        snprintf(buf, len, "%llu.%0*u", (unsigned long long)(r / 1000000), digits, frac);
    else
        snprintf(buf, len, "%llu", (unsigned long long)(r / 1000000));
}

/* ------------------------------------------------------------------------
 * The tokenizer
 * ---------------------------------------------------------------------- */

/* One item text[start..end): trims it, splits it at its first ':' and hands it on. */
static int conf_split_item(const char *text, size_t start, size_t end, conf_item_fn item, void *ctx, conf_err_t *e)
{
    const char *s = text + start;
    size_t n = end - start;
    conf_trim(&s, &n);
    size_t col = (size_t)(s - text) + 1;
    char q[CONF_SHOW_BUF];
    if (!n)
        return conf_fail(
            e, "empty item at column %zu (two commas in a row, or a comma at an end); expected key:value,key:value",
            start + 1);
    const char *colon = memchr(s, ':', n);
    if (!colon)
        return conf_fail(e, "'%s' at column %zu: expected key:value (run with CUCACHE_CONF=help for the keys)",
                         conf_show(q, s, n), col);
    const char *key = s, *val = colon + 1;
    size_t klen = (size_t)(colon - s), vlen = n - klen - 1;
    conf_trim(&key, &klen);
    conf_trim(&val, &vlen);
    if (!klen)
        return conf_fail(e, "'%s' at column %zu: no key before ':'; expected key:value", conf_show(q, s, n), col);
    return item(ctx, key, klen, val, vlen, col);
}

int conf_tokenize(const char *text, conf_item_fn item, void *ctx, char *err, size_t errlen)
{
    conf_err_t e = {err, errlen};
    if (!text)
        return 0;
    const char *all = text;
    size_t n = strlen(text);
    conf_trim(&all, &n);
    if (!n)
        return 0; /* only whitespace: no items */
    n = strlen(text);
    size_t start = 0;
    for (;;) {
        size_t i = start, open = 0;
        bool inside = false;
        for (; i < n; i++) {
            if (text[i] == '[') {
                if (inside)
                    return conf_fail(&e, "'[' at column %zu inside the list opened at column %zu; lists do not nest",
                                     i + 1, open + 1);
                inside = true;
                open = i;
            } else if (text[i] == ']') {
                if (!inside)
                    return conf_fail(&e, "']' at column %zu closes no '['", i + 1);
                inside = false;
            } else if (text[i] == ',' && !inside) {
                break;
            }
        }
        if (inside)
            return conf_fail(&e, "'[' at column %zu is never closed; expected [...]", open + 1);
        int rc = conf_split_item(text, start, i, item, ctx, &e);
        if (rc)
            return rc;
        if (i == n)
            return 0;
        start = i + 1;
    }
}

/* ------------------------------------------------------------------------
 * Value readers
 * ---------------------------------------------------------------------- */

/* Reads decimal digits from s[*i..n) into *v; sets *ovf when they overflow. Returns how many. */
static size_t conf_digits(const char *s, size_t n, size_t *i, uint64_t *v, bool *ovf)
{
    size_t count = 0;
    for (; *i < n && conf_is_digit(s[*i]); (*i)++, count++) {
        unsigned d = (unsigned)(s[*i] - '0');
        if (*v > (UINT64_MAX - d) / 10)
            *ovf = true;
        else
            *v = *v * 10 + d;
    }
    return count;
}

/* 10, 20, 30, 40 for K, M, G, T (either case); 0 for anything else. */
static unsigned conf_unit_shift(char ch)
{
    switch (conf_lower(ch)) {
    case 'k':
        return 10;
    case 'm':
        return 20;
    case 'g':
        return 30;
    case 't':
        return 40;
    default:
        return 0;
    }
}

/* The size grammar is in conf.h; `flags` relax it for the tools (CONF_SIZE_*). */
conf_num_t conf_read_size(const char *s, size_t n, uint64_t bare, unsigned flags, uint64_t *out)
{
    size_t i = 0;
    bool lax_i = flags & CONF_SIZE_LAX_I;
    if (n && s[0] == '-')
        return CONF_NUM_NEG;
    uint64_t whole = 0, frac = 0, den = 1;
    bool ovf = false, inexact = false;
    size_t digits = conf_digits(s, n, &i, &whole, &ovf);
    if (i < n && s[i] == '.') {
        for (i++; i < n && conf_is_digit(s[i]); i++, digits++) {
            if (den <= UINT64_MAX / 100) { /* 18 decimals are plenty */
                frac = frac * 10 + (uint64_t)(s[i] - '0');
                den *= 10;
            } else if (s[i] != '0') {
                inexact = true;
            }
        }
    }
    if (!digits)
        return CONF_NUM_BAD;
    while (i < n && conf_is_space(s[i]))
        i++;
    uint64_t mult = bare;
    unsigned shift = i < n ? conf_unit_shift(s[i]) : 0;
    if (shift) {
        mult = (uint64_t)1 << shift;
        i++;
        if (i < n && conf_lower(s[i]) == 'i') {
            i++;
            if (!lax_i && (i == n || conf_lower(s[i]) != 'b'))
                return CONF_NUM_BAD;
        }
        if (i < n && conf_lower(s[i]) == 'b')
            i++;
    } else {
        if (lax_i && i < n && conf_lower(s[i]) == 'i')
            i++;
        if (i < n && conf_lower(s[i]) == 'b') {
            mult = 1;
            i++;
        }
    }
    if (i != n)
        return CONF_NUM_BAD;
    if (ovf || __builtin_mul_overflow(whole, mult, &whole))
        return CONF_NUM_BIG;
    if (flags & CONF_SIZE_ROUND_DOWN) {
        /* frac < den: the product fits 128 bits and the quotient is less than mult */
        uint64_t part = (uint64_t)((unsigned __int128)frac * mult / den);
        if (__builtin_add_overflow(whole, part, &whole))
            return CONF_NUM_BIG;
    } else if (frac) {
        uint64_t part;
        if (inexact || __builtin_mul_overflow(frac, mult, &part) || part % den)
            return CONF_NUM_FRAC;
        if (__builtin_add_overflow(whole, part / den, &whole))
            return CONF_NUM_BIG;
    } else if (inexact) {
        return CONF_NUM_FRAC;
    }
    if (whole > CONF_SIZE_CAP)
        return CONF_NUM_BIG;
    *out = whole;
    return CONF_NUM_OK;
}

/*
 * A plain decimal (`0.8`, `1`, `.5`, `1.`): digits and one optional point,
 * nothing else.  The digits are read as one integer and divided once by a
 * power of ten (exact up to 1e22), so `0.92` is the double nearest 0.92.
 */
bool conf_read_frac(const char *s, size_t n, double *out)
{
    const uint64_t keep = 100000000000000000u; /* 17 significant digits are plenty */
    uint64_t mant = 0;
    unsigned decimals = 0;
    size_t i = 0, digits = 0;
    bool huge = false;
    for (; i < n && conf_is_digit(s[i]); i++, digits++) {
        if (mant < keep)
            mant = mant * 10 + (uint64_t)(s[i] - '0');
        else
            huge = true;
    }
    if (i < n && s[i] == '.') {
        for (i++; i < n && conf_is_digit(s[i]); i++, digits++) {
            if (mant < keep && decimals < 22) {
                mant = mant * 10 + (uint64_t)(s[i] - '0');
                decimals++;
            }
        }
    }
    if (!digits || i != n)
        return false;
    double scale = 1;
    for (unsigned k = 0; k < decimals; k++)
        scale *= 10;
    *out = huge ? 1e300 : (double)mant / scale;
    return true;
}

/* PyTorch writes True/False; 1/0 and lower case are accepted too. */
bool conf_read_bool(const char *s, size_t n, bool *out)
{
    bool yes = conf_eq(s, n, "true") || conf_eq(s, n, "True") || conf_eq(s, n, "1");
    bool no = conf_eq(s, n, "false") || conf_eq(s, n, "False") || conf_eq(s, n, "0");
    *out = yes;
    return yes || no;
}

/* A plain unsigned integer, digits only (the roundup list's keys and values). */
static bool conf_read_uint(const char *s, size_t n, uint64_t *out)
{
    size_t i = 0;
    bool ovf = false;
    *out = 0;
    return conf_digits(s, n, &i, out, &ovf) && i == n && !ovf;
}

/* ------------------------------------------------------------------------
 * roundup_power2_divisions
 * ---------------------------------------------------------------------- */

/* One division count: 0 or a power of two up to CONF_DIVS_MAX.  On error writes why. */
bool conf_read_div(const char *s, size_t n, unsigned *out, char *why, size_t whylen)
{
    char q[CONF_SHOW_BUF];
    uint64_t v;
    if (!conf_read_uint(s, n, &v)) {
        snprintf(why, whylen, "'%s' is not a number", conf_show(q, s, n));
        return false;
    }
    if (v > CONF_DIVS_MAX) {
        snprintf(why, whylen, "%s is more than %u", conf_show(q, s, n), CONF_DIVS_MAX);
        return false;
    }
    if (v && !conf_is_pow2(v)) {
        snprintf(why, whylen, "%s is not 0 or a power of two", conf_show(q, s, n));
        return false;
    }
    *out = (unsigned)v;
    return true;
}

/* floor(log2(v)) for v > 0 */
unsigned conf_log2(uint64_t v)
{
    return 63u - (unsigned)__builtin_clzll((unsigned long long)v);
}

/*
 * `[256:1,512:2,1024:4,>:8]`, PyTorch's semantics: a key is a size in MiB
 * (a power of two from 1 to 32768) and sets the interval floor(log2(key));
 * the first key's value also fills every interval below it; `>` fills every
 * interval after the last key (all of them when it comes alone); intervals
 * between listed keys stay 0.  Keys must increase; nothing follows `>`.
 */
bool conf_read_divs_list(const char *s, size_t n, unsigned divs[CONF_ROUNDUP_INTERVALS], char *why, size_t whylen)
{
    char q[CONF_SHOW_BUF], q2[CONF_SHOW_BUF];
    if (n < 2 || s[n - 1] != ']') {
        snprintf(why, whylen, "text after ']'");
        return false;
    }
    const char *p = s + 1, *end = s + n - 1;
    const char *last_key = NULL;
    size_t last_klen = 0;
    unsigned last = 0; /* interval of the last key */
    bool any = false, closed = false;
    {
        const char *t = p;
        size_t tn = (size_t)(end - p);
        conf_trim(&t, &tn);
        if (!tn) {
            snprintf(why, whylen, "the list is empty");
            return false;
        }
    }
    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        const char *el = p, *key, *val;
        size_t elen = (size_t)(stop - p), klen, vlen;
        p = stop + 1;
        conf_trim(&el, &elen);
        if (!elen) {
            snprintf(why, whylen, "empty entry in the list");
            return false;
        }
        if (closed) {
            snprintf(why, whylen, "'%s' after '>': '>' must come last", conf_show(q, el, elen));
            return false;
        }
        const char *colon = memchr(el, ':', elen);
        if (!colon) {
            snprintf(why, whylen, "'%s' is not MiB:divisions", conf_show(q, el, elen));
            return false;
        }
        key = el;
        klen = (size_t)(colon - el);
        val = colon + 1;
        vlen = elen - klen - 1;
        conf_trim(&key, &klen);
        conf_trim(&val, &vlen);
        unsigned d;
        if (!conf_read_div(val, vlen, &d, why, whylen))
            return false;
        if (conf_eq(key, klen, ">")) {
            for (unsigned i = any ? last + 1 : 0; i < CONF_ROUNDUP_INTERVALS; i++)
                divs[i] = d;
            closed = true;
            continue;
        }
        uint64_t mib;
        if (!conf_read_uint(key, klen, &mib)) {
            snprintf(why, whylen, "key '%s' is not a number of MiB or '>'", conf_show(q, key, klen));
            return false;
        }
        if (!conf_is_pow2(mib) || mib > CONF_DIVS_KEY_MAX) {
            snprintf(why, whylen, "key %s is not a power of two from 1 to %u", conf_show(q, key, klen),
                     CONF_DIVS_KEY_MAX);
            return false;
        }
        unsigned idx = conf_log2(mib);
        if (any && idx <= last) {
            snprintf(why, whylen, "keys must increase: %s comes after %s", conf_show(q, key, klen),
                     conf_show(q2, last_key, last_klen));
            return false;
        }
        if (!any)
            for (unsigned i = 0; i < idx; i++)
                divs[i] = d;
        divs[idx] = d;
        last = idx;
        last_key = key;
        last_klen = klen;
        any = true;
    }
    return true;
}

/* ------------------------------------------------------------------------
 * The option table
 * ---------------------------------------------------------------------- */
