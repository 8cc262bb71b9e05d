/*
 * Decoders of compressed fatbin entries (fatbin_decompress.h): one row per
 * codec, keyed by the entry flag that names it.  LZ4's block format is
 * decoded here; zstd through libzstd.so.1, opened with dlopen on the first
 * zstd entry (no build dependency; without it zstd entries are left
 * compressed and the module reader skips them).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "fatbin_decompress.h"

/* ------------------------------------------------------------------------
 * LZ4 block format: sequences of a token (literal length in the high
 * nibble, match length - 4 in the low one; 15 continues in bytes of 255
 * and a last byte below it), the literals, a u16 match offset back into
 * the output, the match length's continuation.  The last sequence stops
 * after its literals.
 * ---------------------------------------------------------------------- */

enum {
    LZ4_MIN_MATCH = 4,
    LZ4_RUN_MASK = 15,
    LZ4_MAX_EXPANSION = 255, /* one length byte adds at most 255 bytes of output */
};

/* A fault, said by *why. */
static sim_decomp_t corrupt(const char **why, const char *what)
{
    *why = what;
    return SIM_DECOMP_CORRUPT;
}

/* Adds the continuation bytes of a length that reached 15; false when the
 * stream ends inside it. */
static bool lz4_length(const uint8_t **ip, const uint8_t *iend, size_t *len)
{
    uint8_t b;
    do {
        if (*ip >= iend)
            return false;
        b = *(*ip)++;
        *len += b;
    } while (b == 255);
    return true;
}

static sim_decomp_t lz4_decode(const uint8_t *src, size_t n, uint8_t *dst, size_t cap, const char **why)
{
    const uint8_t *ip = src, *iend = src + n;
    uint8_t *op = dst, *oend = dst + cap;
    while (ip < iend) {
        uint8_t token = *ip++;
        size_t lit = token >> 4, match = token & LZ4_RUN_MASK;
        if (lit == LZ4_RUN_MASK && !lz4_length(&ip, iend, &lit))
            return corrupt(why, "LZ4: the stream ends inside a literal length");
        if (lit > (size_t)(iend - ip))
            return corrupt(why, "LZ4: literals run past the stream's end");
        if (lit > (size_t)(oend - op))
            return corrupt(why, "LZ4: literals run past the declared size");
        memcpy(op, ip, lit);
        ip += lit;
        op += lit;
        if (ip == iend)
            break; /* the last sequence: literals only */
        if (iend - ip < 2)
            return corrupt(why, "LZ4: the stream ends inside a match offset");
        size_t off = (size_t)ip[0] | (size_t)ip[1] << 8;
        ip += 2;
        if (off == 0 || off > (size_t)(op - dst))
            return corrupt(why, "LZ4: a match reaches before the start of the output");
        if (match == LZ4_RUN_MASK && !lz4_length(&ip, iend, &match))
            return corrupt(why, "LZ4: the stream ends inside a match length");
        match += LZ4_MIN_MATCH;
        if (match > (size_t)(oend - op))
            return corrupt(why, "LZ4: a match runs past the declared size");
        const uint8_t *from = op - off;
        if (off >= match) {
            memcpy(op, from, match);
            op += match;
        } else {
            for (size_t i = 0; i < match; i++) /* overlapping: a run repeating the last off bytes */
                *op++ = *from++;
        }
    }
    if (op != oend)
        return corrupt(why, "LZ4: the stream ends short of the declared size");
    return SIM_DECOMP_OK;
}

static uint64_t lz4_bound(size_t n)
{
    return (uint64_t)n * LZ4_MAX_EXPANSION + LZ4_RUN_MASK + LZ4_MIN_MATCH;
}

/* ------------------------------------------------------------------------
 * zstd frames, through libzstd.so.1 (its stable API: ZSTD_decompress,
 * ZSTD_isError, ZSTD_getErrorName)
 * ---------------------------------------------------------------------- */

static struct {
    size_t (*decompress)(void *dst, size_t cap, const void *src, size_t n);
    unsigned (*is_error)(size_t code);
    const char *(*error_name)(size_t code);
} zstd;
static pthread_once_t zstd_once = PTHREAD_ONCE_INIT;

static void zstd_open(void)
{
    void *h = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    *(void **)&zstd.decompress = dlsym(h, "ZSTD_decompress");
    *(void **)&zstd.is_error = dlsym(h, "ZSTD_isError");
    *(void **)&zstd.error_name = dlsym(h, "ZSTD_getErrorName");
    if (!zstd.decompress || !zstd.is_error || !zstd.error_name) {
        memset(&zstd, 0, sizeof zstd);
        dlclose(h);
    }
}

static bool zstd_available(void)
{
    pthread_once(&zstd_once, zstd_open);
    return zstd.decompress != NULL;
}

static sim_decomp_t zstd_decode(const uint8_t *src, size_t n, uint8_t *dst, size_t cap, const char **why)
{
    if (!zstd_available())
        return SIM_DECOMP_UNAVAILABLE;
    size_t got = zstd.decompress(dst, cap, src, n); /* never writes past cap */
    if (zstd.is_error(got))
        return corrupt(why, zstd.error_name(got));
    if (got != cap)
        return corrupt(why, "zstd: the frames hold less than the declared size");
    return SIM_DECOMP_OK;
}

static uint64_t zstd_bound(size_t n)
{
    (void)n; /* a zstd frame may repeat one byte for as long as it likes */
    return SIM_DECOMP_MAX;
}

/* ------------------------------------------------------------------------
 * The codecs
 * ---------------------------------------------------------------------- */

/* One row per entry flag that marks a compressed payload; decode NULL: a
 * format not decoded here (the entry stays compressed). */
static const struct {
    uint64_t flag;
    const char *name;
    sim_decomp_t (*decode)(const uint8_t *src, size_t n, uint8_t *dst, size_t cap, const char **why);
    bool (*available)(void); /* NULL: always */
    uint64_t (*bound)(size_t n);
} codecs[] = {
    {0x2000, "LZ4", lz4_decode, NULL, lz4_bound},
    {0x8000, "zstd", zstd_decode, zstd_available, zstd_bound},
    {0x1000, "an older LZ format", NULL, NULL, NULL},
};

#define NCODECS (sizeof codecs / sizeof codecs[0])

/* The row flags select: the first whose flag they carry, or -1. */
static int codec_of(uint64_t flags)
{
    for (size_t i = 0; i < NCODECS; i++)
        if (flags & codecs[i].flag)
            return (int)i;
    return -1;
}

uint64_t sim_fatbin_compressed_flags(void)
{
    uint64_t all = 0;
    for (size_t i = 0; i < NCODECS; i++)
        all |= codecs[i].flag;
    return all;
}

const char *sim_fatbin_codec(uint64_t flags)
{
    int c = codec_of(flags);
    return c < 0 ? NULL : codecs[c].name;
}

int sim_fatbin_codec_available(uint64_t flags)
{
    int c = codec_of(flags);
    return c >= 0 && codecs[c].decode && (!codecs[c].available || codecs[c].available());
}

uint64_t sim_fatbin_inflate_bound(uint64_t flags, size_t n)
{
    int c = codec_of(flags);
    if (c < 0 || !codecs[c].bound)
        return 0;
    uint64_t b = codecs[c].bound(n);
    return b < SIM_DECOMP_MAX ? b : SIM_DECOMP_MAX;
}

sim_decomp_t sim_fatbin_decompress(uint64_t flags, const uint8_t *src, size_t n, uint8_t *dst, size_t cap,
                                   const char **why)
{
    *why = "";
    if (!sim_fatbin_codec_available(flags))
        return SIM_DECOMP_UNAVAILABLE;
    return codecs[codec_of(flags)].decode(src, n, dst, cap, why);
}
