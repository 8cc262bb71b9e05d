/*
 * Proves the decompression of compressed fatbin entries
 * (src/fatbin_decompress.c through src/module_image.c): hand-made LZ4
 * streams decode to their bytes, and each way a stream can lie (a match
 * before the output's start, past the declared size, a stream cut inside
 * a length or an offset, one short of the declared size) is an error,
 * never a write past the buffer; the fatbins nvcc 13 compressed
 * (tests/modules: KIND.lz4.fatbin, KIND.zstd.fatbin) give every entry
 * decompressed, the same kernels, attributes and variables' bytes as the
 * uncompressed ones; every truncation, corrupted byte and lying size
 * field of them is CUDA_ERROR_INVALID_IMAGE (or a success) with an error
 * that names the entry; the linker gets the entries decompressed.  The
 * zstd rows are skipped where libzstd.so.1 is not.
 *
 * Meson sets SIMTEST_MODULES to the fixture directory.
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

#include "fatbin_decompress.h"
#include "fixture.h"
#include "module_image.h"

enum { LZ4 = 0x2000, ZSTD = 0x8000 };

/* ------------------------------------------------------------------------
 * LZ4 streams made by hand
 * ---------------------------------------------------------------------- */

/* One row per stream: its bytes, the declared size, and the bytes it
 * decodes to or the start of the fault it is. */
static const struct {
    const char *what;
    const char *src;
    size_t n, cap;
    const char *out; /* NULL: a fault */
    const char *why; /* the fault's text starts so */
} lz4_cases[] = {
    {"literals only",
     "\x30"
     "abc",
     4, 3, "abc", NULL},
    {"an overlapping match repeats",
     "\x12"
     "a"
     "\x01\x00"
     "\x10"
     "b",
     6, 8, "aaaaaaab", NULL},
    {"a match of earlier bytes",
     "\x20"
     "ab"
     "\x02\x00"
     "\x00",
     6, 6, "ababab", NULL},
    {"lengths past 15 continue",
     "\xf0\x01"
     "0123456789abcdef",
     18, 16, "0123456789abcdef", NULL},
    {"a match length past 15",
     "\x1f"
     "z"
     "\x01\x00"
     "\x02",
     5, 1 + 4 + 15 + 2, "zzzzzzzzzzzzzzzzzzzzzz", NULL},
    {"offset 0",
     "\x11"
     "a"
     "\x00\x00",
     4, 6, NULL, "LZ4: a match reaches before"},
    {"offset before the output",
     "\x10"
     "a"
     "\x02\x00",
     4, 5, NULL, "LZ4: a match reaches before"},
    {"a match past the declared size",
     "\x10"
     "a"
     "\x01\x00",
     4, 3, NULL, "LZ4: a match runs past"},
    {"literals past the declared size",
     "\x30"
     "abc",
     4, 2, NULL, "LZ4: literals run past the declared"},
    {"literals past the stream",
     "\x50"
     "abc",
     4, 5, NULL, "LZ4: literals run past the stream"},
    {"cut inside a literal length", "\xf0\xff", 2, 300, NULL, "LZ4: the stream ends inside a literal"},
    {"cut inside an offset",
     "\x10"
     "a"
     "\x01",
     3, 5, NULL, "LZ4: the stream ends inside a match offset"},
    {"cut inside a match length",
     "\x1f"
     "a"
     "\x01\x00\xff",
     5, 300, NULL, "LZ4: the stream ends inside a match length"},
    {"short of the declared size",
     "\x30"
     "abc",
     4, 4, NULL, "LZ4: the stream ends short"},
    {"empty", "", 0, 1, NULL, "LZ4: the stream ends short"},
};

static void test_lz4_streams(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof lz4_cases / sizeof lz4_cases[0]; i++) {
        size_t cap = lz4_cases[i].cap;
        /* exact-size buffers: a sanitizer build catches a stray access */
        uint8_t *src = malloc(lz4_cases[i].n ? lz4_cases[i].n : 1), *dst = malloc(cap);
        assert_non_null(src);
        assert_non_null(dst);
        memcpy(src, lz4_cases[i].src, lz4_cases[i].n);
        const char *why;
        sim_decomp_t d = sim_fatbin_decompress(0x2011, src, lz4_cases[i].n, dst, cap, &why);
        if (lz4_cases[i].out) {
            if (d != SIM_DECOMP_OK || memcmp(dst, lz4_cases[i].out, cap) != 0)
                fail_msg("%s: %d (%s)", lz4_cases[i].what, d, why);
        } else if (d != SIM_DECOMP_CORRUPT || strncmp(why, lz4_cases[i].why, strlen(lz4_cases[i].why)) != 0) {
            fail_msg("%s: %d \"%s\", not the fault \"%s\"", lz4_cases[i].what, d, why, lz4_cases[i].why);
        }
        free(src);
        free(dst);
    }
    /* what flags name */
    assert_string_equal(sim_fatbin_codec(0x2011), "LZ4");
    assert_string_equal(sim_fatbin_codec(0x8011), "zstd");
    assert_null(sim_fatbin_codec(0x11));
    assert_false(sim_fatbin_codec_available(0x1011));                   /* the older format: not decoded */
    assert_int_equal(sim_fatbin_inflate_bound(LZ4, 10), 10 * 255 + 19); /* every byte a length byte, at most */
    assert_true(sim_fatbin_inflate_bound(ZSTD, 10) <= SIM_DECOMP_MAX);
}

/* ------------------------------------------------------------------------
 * The fixtures nvcc compressed
 * ---------------------------------------------------------------------- */

/* What a read reports, as text: kernels with their attributes, variables
 * with their first bytes. */
typedef struct seen_s {
    char text[8192];
} seen_t;

static void seen_kernel(void *arg, const char *name, size_t len, const sim_kernel_info_t *ki)
{
    seen_t *s = arg;
    size_t at = strlen(s->text);
    snprintf(s->text + at, sizeof s->text - at, "%.*s%s regs=%u threads=%u shared=%u local=%u params=%u;", (int)len,
             name, ki->cubin ? "(cubin)" : "(ptx)", ki->regs, ki->max_threads, ki->shared_bytes, ki->local_bytes,
             ki->param_bytes);
}

static void seen_global(void *arg, const sim_global_info_t *g)
{
    seen_t *s = arg;
    size_t at = strlen(s->text);
    unsigned first = 0;
    if (g->init && g->size >= 4)
        memcpy(&first, g->init, 4);
    snprintf(s->text + at, sizeof s->text - at, "%.*s size=%llu first=%u;", (int)g->len, g->name,
             (unsigned long long)g->size, first);
}

static const sim_image_sink_t sink = {seen_kernel, seen_global};

/* Reads a copy of image[0, len) in a buffer of exactly len bytes. */
static CUresult read_exact(const unsigned char *image, size_t len, seen_t *seen, sim_image_info_t *info)
{
    unsigned char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, image, len);
    memset(seen, 0, sizeof *seen);
    CUresult r = sim_image_read(copy, len, &sink, seen, info);
    free(copy);
    return r;
}

/* One row per compressed fixture: the codec, and the fixture it must read
 * as (nvcc 13: its cubin uncompressed, its PTX zstd). */
static const struct {
    const char *file, *plain;
    uint64_t codec;
} packed[] = {
    {"kernels.lz4.fatbin", "kernels.fatbin", LZ4},
    {"kernels.zstd.fatbin", "kernels.fatbin", ZSTD},
    {"symbols.lz4.fatbin", "symbols.fatbin", LZ4},
    {"symbols.zstd.fatbin", "symbols.fatbin", ZSTD},
};

#define NPACKED (sizeof packed / sizeof packed[0])

/* The rows this process can decode (LZ4 always), else a note that they
 * are skipped. */
static bool decodable(size_t i)
{
    if (packed[i].codec == LZ4 || sim_fatbin_codec_available(packed[i].codec))
        return true;
    printf("%s: no libzstd.so.1 here, not read\n", packed[i].file);
    return false;
}

/* Calls check on each compressed fixture this process can decode, read
 * into a buffer of its own that check may change. */
static void each_packed(void (*check)(size_t i, unsigned char *b, size_t len))
{
    for (size_t i = 0; i < NPACKED; i++) {
        if (!decodable(i))
            continue;
        size_t len;
        unsigned char *b = simtest_fixture(packed[i].file, &len);
        check(i, b, len);
        free(b);
    }
}

/* The same kernels, attributes and variables as the uncompressed one. */
static void reads_as_plain(size_t i, unsigned char *b, size_t len)
{
    size_t plen;
    unsigned char *p = simtest_fixture(packed[i].plain, &plen);
    seen_t seen, want;
    sim_image_info_t info, pinfo;
    assert_int_equal(read_exact(b, len, &seen, &info), CUDA_SUCCESS);
    assert_int_equal(read_exact(p, plen, &want, &pinfo), CUDA_SUCCESS);
    assert_int_equal(info.entries, 2);
    assert_int_equal(info.inflated, 2); /* fails when decompression is off */
    assert_int_equal(info.compressed, 0);
    if (sim_fatbin_codec_available(ZSTD)) /* the plain one's PTX is zstd */
        assert_string_equal(seen.text, want.text);
    assert_non_null(strstr(seen.text, "(cubin)")); /* the attributes come from a cubin */
    free(p);
}

static void test_fixtures(void **state)
{
    (void)state;
    each_packed(reads_as_plain);
    /* what ptxas said of symbols.cu, read through LZ4 */
    size_t len;
    unsigned char *b = simtest_fixture("symbols.lz4.fatbin", &len);
    seen_t seen;
    assert_int_equal(read_exact(b, len, &seen, NULL), CUDA_SUCCESS);
    assert_non_null(strstr(seen.text, "lookup(cubin) regs=17 threads=128 shared=512"));
    assert_non_null(strstr(seen.text, "spill(cubin) regs=40 threads=0 shared=0 local=1024"));
    assert_non_null(strstr(seen.text, "table size=64 first=1;"));
    assert_non_null(strstr(seen.text, "dev_scale size=4 first=1075838976;")); /* 2.5f */
    free(b);
}

/* Every truncation is CUDA_ERROR_INVALID_IMAGE. */
static void truncations(size_t i, unsigned char *b, size_t len)
{
    for (size_t k = 0; k < len; k++) {
        seen_t seen;
        CUresult r = read_exact(b, k, &seen, NULL);
        if (r != CUDA_ERROR_INVALID_IMAGE)
            fail_msg("%s cut to %zu bytes: %d, not CUDA_ERROR_INVALID_IMAGE", packed[i].file, k, r);
    }
}

static void test_truncations(void **state)
{
    (void)state;
    each_packed(truncations);
}

/* Every corrupted byte is a success or CUDA_ERROR_INVALID_IMAGE. */
static void corrupt_bytes(size_t i, unsigned char *b, size_t len)
{
    (void)i;
    static const unsigned char flips[] = {0xff, 0x80, 0x01};
    for (size_t at = 0; at < len; at++)
        for (size_t f = 0; f < sizeof flips; f++) {
            b[at] ^= flips[f];
            seen_t seen;
            sim_image_info_t info;
            CUresult r = read_exact(b, len, &seen, &info);
            assert_true(r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_IMAGE);
            b[at] ^= flips[f];
        }
}

static void test_corrupt_bytes(void **state)
{
    (void)state;
    each_packed(corrupt_bytes);
}

/* The size fields of each entry made to lie, one at a time: refused, and
 * the error names the entry. */
static void lying_sizes(size_t i, unsigned char *b, size_t len)
{
    static const struct {
        size_t at, width; /* the field in the entry header */
        int64_t delta;    /* added to it; 0: set to `value` */
        uint64_t value;
    } lies[] = {
        {16, 4, 0, 0},                 /* no compressed bytes */
        {16, 4, 8, 0},                 /* more than the payload */
        {16, 4, -1, 0},                /* the stream cut by a byte */
        {56, 8, 0, 0},                 /* declared empty */
        {56, 8, 1, 0},                 /* a byte more than the stream holds */
        {56, 8, -1, 0},                /* a byte less */
        {56, 8, 0, (uint64_t)1 << 40}, /* beyond any sane size */
        {56, 8, 0, UINT64_MAX},
    };
    uint32_t ehsize;
    uint64_t psize;
    unsigned index = 0;
    for (size_t e = 16; e + 64 <= len; e += ehsize + psize, index++) {
        memcpy(&ehsize, b + e + 4, 4);
        memcpy(&psize, b + e + 8, 8);
        for (size_t l = 0; l < sizeof lies / sizeof lies[0]; l++) {
            uint64_t was = 0, v;
            memcpy(&was, b + e + lies[l].at, lies[l].width);
            v = lies[l].delta ? was + (uint64_t)lies[l].delta : lies[l].value;
            memcpy(b + e + lies[l].at, &v, lies[l].width);
            seen_t seen;
            sim_image_info_t info;
            CUresult r = read_exact(b, len, &seen, &info);
            char want[64];
            snprintf(want, sizeof want, "fatbin entry %u (", index);
            if (r != CUDA_ERROR_INVALID_IMAGE || strncmp(info.error, want, strlen(want)) != 0)
                fail_msg("%s entry %u, field %zu %s: %d \"%s\"", packed[i].file, index, lies[l].at,
                         lies[l].delta ? "moved" : "set", r, info.error);
            memcpy(b + e + lies[l].at, &was, lies[l].width);
        }
    }
}

static void test_lying_sizes(void **state)
{
    (void)state;
    each_packed(lying_sizes);
}

/* What sim_image_entries hands the linker: the payloads decompressed, their
 * flags marking no compression. */
static void entry_seen(void *arg, unsigned kind, uint64_t flags, const void *payload, size_t size)
{
    unsigned *n = arg;
    assert_int_equal(flags & sim_fatbin_compressed_flags(), 0);
    if (kind == 2)
        assert_memory_equal(payload,
                            "\x7f"
                            "ELF",
                            4);
    else
        assert_non_null(memmem(payload, size, ".version", 8));
    (*n)++;
}

static void entries_for_linker(size_t i, unsigned char *b, size_t len)
{
    (void)i;
    unsigned n = 0;
    assert_int_equal(sim_image_entries(b, len, entry_seen, &n), CUDA_SUCCESS);
    assert_int_equal(n, 2);
}

static void test_entries_for_linker(void **state)
{
    (void)state;
    each_packed(entries_for_linker);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lz4_streams), cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_truncations), cmocka_unit_test(test_corrupt_bytes),
        cmocka_unit_test(test_lying_sizes), cmocka_unit_test(test_entries_for_linker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
