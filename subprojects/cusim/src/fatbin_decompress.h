/*
 * Compressed fatbin entries: the codecs an entry's flags name and their
 * decoders (fatbin_decompress.c), for module_image.c.  The payload is
 * untrusted: a decoder reads only [src, src + n), writes only
 * [dst, dst + cap), and succeeds only when it produced exactly cap bytes.
 * docs/simulator.md ("Modules") says where the formats come from.
 */
#ifndef CUCACHE_SIM_FATBIN_DECOMPRESS_H
#define CUCACHE_SIM_FATBIN_DECOMPRESS_H

#include <stddef.h>
#include <stdint.h>

/* What decompressing one payload came to. */
typedef enum sim_decomp_e {
    SIM_DECOMP_OK,          /* dst holds exactly cap bytes */
    SIM_DECOMP_UNAVAILABLE, /* a codec this process cannot decode (no libzstd.so.1, a format not known) */
    SIM_DECOMP_CORRUPT,     /* the stream is not what it claims: *why says how */
} sim_decomp_t;

/* Every entry flag that marks a compressed payload. */
uint64_t sim_fatbin_compressed_flags(void);

/* The codec flags name ("LZ4", "zstd"), or NULL when they mark none. */
const char *sim_fatbin_codec(uint64_t flags);

/* Whether this process can decode what flags name (libzstd.so.1 is looked
 * for once, on the first zstd entry). */
int sim_fatbin_codec_available(uint64_t flags);

/* The largest stream of n bytes that flags' codec could inflate to (a
 * declared size above it is corrupt), never above SIM_DECOMP_MAX. */
uint64_t sim_fatbin_inflate_bound(uint64_t flags, size_t n);

/* Decompresses the payload src[0, n) into dst[0, cap); *why (a static
 * text) names the fault when the answer is SIM_DECOMP_CORRUPT. */
sim_decomp_t sim_fatbin_decompress(uint64_t flags, const uint8_t *src, size_t n, uint8_t *dst, size_t cap,
                                   const char **why);

/* No entry inflates past this (real cubins are tens of MiB at most). */
#define SIM_DECOMP_MAX ((uint64_t)256 << 20)

#endif
