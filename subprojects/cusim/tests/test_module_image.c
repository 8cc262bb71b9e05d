/*
 * Proves the module image reader (src/module_image.c) on the images nvcc
 * made (tests/modules): each gives exactly its kernels (not the
 * __device__ function, not twice); every truncation of the cubin and of
 * the fatbin, at every offset, is CUDA_ERROR_INVALID_IMAGE, and every
 * truncation of the PTX gives a subset of its names; no single corrupted
 * byte makes the reader read outside the image (each case is parsed from
 * a buffer of exactly its length, so AddressSanitizer builds catch a
 * stray read); a fatbin entry compressed in a form not decoded is skipped
 * and counted, and one falsely marked compressed is refused, named.
 * (tests/test_fatbin_decompress.c proves the decompression itself.)
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

#include "cusim/sim.h"
#include "fatbin_decompress.h"
#include "fixture.h"
#include "module_image.h"

/* The names found, as one text "a,b," in the order reported. */
typedef struct found_s {
    char text[4096];
} found_t;

static void collect(void *arg, const char *name, size_t len)
{
    found_t *f = arg;
    size_t at = strlen(f->text);
    if (at + len + 2 < sizeof f->text) {
        memcpy(f->text + at, name, len);
        memcpy(f->text + at + len, ",", 2);
    }
}

/* Parses a copy of image[0, len) in a buffer of exactly len bytes. */
static CUresult parse_exact(const unsigned char *image, size_t len, found_t *found, sim_image_info_t *info)
{
    unsigned char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, image, len);
    memset(found, 0, sizeof *found);
    CUresult r = sim_image_parse(copy, len, collect, found, info);
    free(copy);
    return r;
}

/* One row per fixture: its kernels as the reader reports them, and what a
 * truncation answers. */
static const struct {
    const char *file;
    const char *names;      /* in the order reported */
    const char *names_zstd; /* the same where zstd is decoded (its PTX entry is) */
    unsigned entries;       /* fatbin code entries */
    bool truncation_bad;    /* every shorter prefix is CUDA_ERROR_INVALID_IMAGE */
} fixtures[] = {
    {"kernels.sm_90.cubin", "_Z5scalePffi,add_one,", NULL, 0, true},
    {"kernels.fatbin", "_Z5scalePffi,add_one,", "add_one,_Z5scalePffi,_Z5scalePffi,add_one,", 2, true},
    {"kernels.ptx", "add_one,_Z5scalePffi,", NULL, 0, false},
};

static void test_names(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
        size_t len;
        unsigned char *b = simtest_fixture(fixtures[i].file, &len);
        found_t found;
        sim_image_info_t info;
        /* the PTX's NUL is part of the text cuModuleLoadData gets */
        assert_int_equal(parse_exact(b, len + 1, &found, &info), CUDA_SUCCESS);
        bool zstd = fixtures[i].names_zstd && sim_fatbin_codec_available(0x8000);
        assert_string_equal(found.text, zstd ? fixtures[i].names_zstd : fixtures[i].names);
        assert_int_equal(info.entries, fixtures[i].entries);
        free(b);
    }
}

static void test_truncations(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
        size_t len;
        unsigned char *b = simtest_fixture(fixtures[i].file, &len);
        for (size_t k = 0; k < len; k++) {
            found_t found;
            CUresult r = parse_exact(b, k, &found, NULL);
            if (fixtures[i].truncation_bad) {
                if (r != CUDA_ERROR_INVALID_IMAGE)
                    fail_msg("%s cut to %zu bytes: %d, not CUDA_ERROR_INVALID_IMAGE", fixtures[i].file, k, r);
            } else if (r == CUDA_SUCCESS) {
                /* PTX cut short: each name found is a prefix of a kernel's */
                for (char *n = strtok(found.text, ","); n; n = strtok(NULL, ","))
                    if (strncmp(n, "add_one", strlen(n)) != 0 && strncmp(n, "_Z5scalePffi", strlen(n)) != 0)
                        fail_msg("%s cut to %zu bytes gave the name %s", fixtures[i].file, k, n);
            }
        }
        free(b);
    }
}

static void test_corrupt_bytes(void **state)
{
    (void)state;
    static const unsigned char flips[] = {0xff, 0x80, 0x01};
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
        size_t len;
        unsigned char *b = simtest_fixture(fixtures[i].file, &len);
        for (size_t at = 0; at < len; at++)
            for (size_t f = 0; f < sizeof flips; f++) {
                b[at] ^= flips[f];
                found_t found;
                CUresult r = parse_exact(b, len, &found, NULL);
                assert_true(r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_IMAGE);
                b[at] ^= flips[f];
            }
        free(b);
    }
}

/* The fatbin with both entries marked compressed in the older LZ format,
 * which is not decoded: both are skipped and counted, and no name is
 * read.  Its uncompressed cubin marked LZ4 instead (no compressed size in
 * its header): the image is refused, and the error names the entry. */
static void test_compressed(void **state)
{
    (void)state;
    size_t len;
    unsigned char *b = simtest_fixture("kernels.fatbin", &len);
    uint32_t ehsize;
    uint64_t psize, flags;
    size_t cubin = 0;
    for (size_t at = 16; at + 64 <= len; at += ehsize + psize) {
        memcpy(&ehsize, b + at + 4, 4);
        memcpy(&psize, b + at + 8, 8);
        memcpy(&flags, b + at + 40, 8);
        cubin = b[at] == 2 ? at : cubin;
        flags = (flags & ~(uint64_t)0xa000) | 0x1000;
        memcpy(b + at + 40, &flags, 8);
    }
    found_t found;
    sim_image_info_t info;
    assert_int_equal(parse_exact(b, len, &found, &info), CUDA_SUCCESS);
    assert_int_equal(info.entries, 2);
    assert_int_equal(info.compressed, 2);
    assert_int_equal(info.inflated, 0);
    assert_string_equal(found.text, "");

    assert_int_not_equal(cubin, 0);
    memcpy(&flags, b + cubin + 40, 8);
    flags = (flags & ~(uint64_t)0x1000) | 0x2000;
    memcpy(b + cubin + 40, &flags, 8);
    assert_int_equal(parse_exact(b, len, &found, &info), CUDA_ERROR_INVALID_IMAGE);
    char want[64];
    snprintf(want, sizeof want, "fatbin entry 1 (cubin for sm_90 at byte %zu", cubin);
    if (strncmp(info.error, want, strlen(want)) != 0)
        fail_msg("error \"%s\" does not start \"%s\"", info.error, want);
    free(b);
}

/* What the driver does with a bare address: the extent the header claims,
 * and the wrapper followed to its container. */
static void test_extent_and_wrapper(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
        size_t len;
        unsigned char *b = simtest_fixture(fixtures[i].file, &len);
        size_t want = strstr(fixtures[i].file, ".ptx") ? len + 1 : len;
        assert_int_equal(sim_image_extent(b), want);
        struct {
            uint32_t magic, version;
            const void *data, *filename;
        } w = {0x466243B1u, 1, b, NULL};
        assert_ptr_equal(sim_image_unwrap(&w), b);
        assert_ptr_equal(sim_image_unwrap(b), b);
        free(b);
    }
    assert_int_equal(sim_image_extent(CUCACHE_SIM_MODULE_MAGIC "k\n"), strlen(CUCACHE_SIM_MODULE_MAGIC) + 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_corrupt_bytes),
        cmocka_unit_test(test_compressed),
        cmocka_unit_test(test_extent_and_wrapper),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
