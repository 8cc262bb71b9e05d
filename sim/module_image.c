/*
 * Reading module images for their kernel names (module_image.h).  Every
 * read goes through img_u16/u32/u64 or img_span, which check it against
 * the image's length; nothing here allocates, so the parser runs alone
 * under a fuzzer (tests/sim/fuzz_image.c).
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cucache/sim.h"
#include "module_image.h"

/* ------------------------------------------------------------------------
 * Layout constants (docs/simulator.md, "Modules", says where each comes
 * from)
 * ---------------------------------------------------------------------- */

enum {
    ELF_EHDR_SIZE = 64,        /* Elf64_Ehdr */
    ELF_SHDR_SIZE = 64,        /* Elf64_Shdr */
    ELF_SYM_SIZE = 24,         /* Elf64_Sym */
    ELF_CLASS64 = 2,           /* e_ident[EI_CLASS] */
    ELF_DATA_LSB = 1,          /* e_ident[EI_DATA] */
    ELF_EM_CUDA = 190,         /* e_machine */
    ELF_SHT_SYMTAB = 2,        /* sh_type */
    ELF_SHT_NOBITS = 8,        /* sh_type: no bytes in the file */
    ELF_STT_FUNC = 2,          /* ELF64_ST_TYPE(st_info) */
    ELF_STO_CUDA_ENTRY = 0x10, /* st_other: a __global__ function, not a __device__ one */

    FATBIN_MAGIC = 0xBA55ED50u,         /* container */
    FATBIN_WRAPPER_MAGIC = 0x466243B1u, /* what nvcc's host stub registers */
    FATBIN_HEADER_SIZE = 16,            /* u32 magic, u16 version, u16 header size, u64 entries' bytes */
    FATBIN_ENTRY_MIN = 64,              /* the entry header's fixed part */
    FATBIN_KIND_PTX = 1,
    FATBIN_KIND_ELF = 2,
};

/* Entry flags that mean the payload is compressed (LZ-style and zstd). */
static const uint64_t fatbin_compressed_flags = 0x1000u | 0x2000u | 0x8000u;

/* ------------------------------------------------------------------------
 * Bounded reads (little-endian, any alignment)
 * ---------------------------------------------------------------------- */

typedef struct img_s {
    const uint8_t *p;
    size_t len;
} img_t;

/* [off, off + n) lies in the image. */
static bool img_span(const img_t *im, uint64_t off, uint64_t n)
{
    return off <= im->len && n <= im->len - off;
}

static bool img_u16(const img_t *im, uint64_t off, uint16_t *v)
{
    if (!img_span(im, off, 2))
        return false;
    *v = (uint16_t)(im->p[off] | im->p[off + 1] << 8);
    return true;
}

static bool img_u32(const img_t *im, uint64_t off, uint32_t *v)
{
    if (!img_span(im, off, 4))
        return false;
    *v = 0;
    for (int i = 3; i >= 0; i--)
        *v = *v << 8 | im->p[off + i];
    return true;
}

static bool img_u64(const img_t *im, uint64_t off, uint64_t *v)
{
    if (!img_span(im, off, 8))
        return false;
    *v = 0;
    for (int i = 7; i >= 0; i--)
        *v = *v << 8 | im->p[off + i];
    return true;
}

/* The NUL-terminated string at off inside [lo, hi) of the image, or NULL. */
static const char *img_str(const img_t *im, uint64_t lo, uint64_t hi, uint64_t off, size_t *len)
{
    if (off < lo || off >= hi || hi > im->len)
        return NULL;
    const uint8_t *s = im->p + off, *nul = memchr(s, 0, hi - off);
    if (!nul)
        return NULL;
    *len = (size_t)(nul - s);
    return (const char *)s;
}

typedef struct parse_s {
    sim_image_name_fn fn;
    void *arg;
    sim_image_info_t info;
} parse_t;

static void report(parse_t *ps, const char *name, size_t len)
{
    ps->info.names++;
    ps->fn(ps->arg, name, len);
}

/* ------------------------------------------------------------------------
 * ELF cubins
 * ---------------------------------------------------------------------- */

typedef struct elf_shdr_s {
    uint32_t name, type, link;
    uint64_t offset, size;
} elf_shdr_t;

static bool elf_is(const img_t *im)
{
    return img_span(im, 0, 4) && memcmp(im->p,
                                        "\x7f"
                                        "ELF",
                                        4) == 0;
}

static bool elf_shdr(const img_t *im, uint64_t shoff, uint16_t shentsize, uint32_t i, elf_shdr_t *sh)
{
    uint64_t at = shoff + (uint64_t)i * shentsize;
    return img_u32(im, at, &sh->name) && img_u32(im, at + 4, &sh->type) && img_u64(im, at + 24, &sh->offset) &&
           img_u64(im, at + 32, &sh->size) && img_u32(im, at + 40, &sh->link) &&
           (sh->type == ELF_SHT_NOBITS || img_span(im, sh->offset, sh->size));
}

/* Kernels: the symbols of type STT_FUNC marked STO_CUDA_ENTRY whose section
 * is ".text.<their name>" (a __device__ function has a .text section of
 * its own too, but no entry mark). */
static CUresult elf_parse(const img_t *im, parse_t *ps)
{
    uint64_t shoff;
    uint16_t shentsize, shnum, shstrndx;
    if (!elf_is(im) || !img_span(im, 0, ELF_EHDR_SIZE) || im->p[4] != ELF_CLASS64 || im->p[5] != ELF_DATA_LSB)
        return CUDA_ERROR_INVALID_IMAGE;
    uint16_t machine;
    if (!img_u16(im, 18, &machine) || machine != ELF_EM_CUDA || !img_u64(im, 40, &shoff) ||
        !img_u16(im, 58, &shentsize) || !img_u16(im, 60, &shnum) || !img_u16(im, 62, &shstrndx))
        return CUDA_ERROR_INVALID_IMAGE;
    if (shentsize < ELF_SHDR_SIZE || shstrndx >= shnum || !img_span(im, shoff, (uint64_t)shnum * shentsize))
        return CUDA_ERROR_INVALID_IMAGE;
    uint64_t phoff;
    uint16_t phentsize, phnum;
    if (!img_u64(im, 32, &phoff) || !img_u16(im, 54, &phentsize) || !img_u16(im, 56, &phnum) ||
        !img_span(im, phoff, (uint64_t)phnum * phentsize))
        return CUDA_ERROR_INVALID_IMAGE; /* the program headers: the image ends no sooner */
    elf_shdr_t shstr;
    if (!elf_shdr(im, shoff, shentsize, shstrndx, &shstr))
        return CUDA_ERROR_INVALID_IMAGE;
    for (uint32_t i = 0; i < shnum; i++) {
        elf_shdr_t sym;
        if (!elf_shdr(im, shoff, shentsize, i, &sym))
            return CUDA_ERROR_INVALID_IMAGE;
        if (sym.type != ELF_SHT_SYMTAB)
            continue;
        elf_shdr_t str;
        if (sym.link >= shnum || !elf_shdr(im, shoff, shentsize, sym.link, &str) || sym.size % ELF_SYM_SIZE)
            return CUDA_ERROR_INVALID_IMAGE;
        for (uint64_t at = sym.offset; at < sym.offset + sym.size; at += ELF_SYM_SIZE) {
            uint32_t st_name;
            uint16_t st_shndx;
            if (!img_u32(im, at, &st_name) || !img_u16(im, at + 6, &st_shndx))
                return CUDA_ERROR_INVALID_IMAGE;
            uint8_t st_info = im->p[at + 4], st_other = im->p[at + 5];
            if ((st_info & 0xf) != ELF_STT_FUNC || !(st_other & ELF_STO_CUDA_ENTRY))
                continue;
            size_t nlen, slen;
            const char *name = img_str(im, str.offset, str.offset + str.size, str.offset + st_name, &nlen);
            elf_shdr_t text;
            if (!name || st_shndx >= shnum || !elf_shdr(im, shoff, shentsize, st_shndx, &text))
                return CUDA_ERROR_INVALID_IMAGE;
            const char *sname = img_str(im, shstr.offset, shstr.offset + shstr.size, shstr.offset + text.name, &slen);
            if (!sname)
                return CUDA_ERROR_INVALID_IMAGE;
            if (nlen && slen == nlen + 6 && memcmp(sname, ".text.", 6) == 0 && memcmp(sname + 6, name, nlen) == 0)
                report(ps, name, nlen);
        }
    }
    return CUDA_SUCCESS;
}

/* The furthest byte the header's tables reach (section and program
 * headers); the sections themselves are checked against it when parsed. */
static size_t elf_extent(const uint8_t *p)
{
    img_t im = {p, ELF_EHDR_SIZE};
    uint64_t phoff, shoff;
    uint16_t phentsize, phnum, shentsize, shnum;
    if (!img_u64(&im, 32, &phoff) || !img_u64(&im, 40, &shoff) || !img_u16(&im, 54, &phentsize) ||
        !img_u16(&im, 56, &phnum) || !img_u16(&im, 58, &shentsize) || !img_u16(&im, 60, &shnum))
        return 0;
    uint64_t end = ELF_EHDR_SIZE, limit = (uint64_t)1 << 40; /* no cubin is a terabyte: a corrupt header */
    if (phoff < limit && phoff + (uint64_t)phnum * phentsize > end)
        end = phoff + (uint64_t)phnum * phentsize;
    if (shoff < limit && shoff + (uint64_t)shnum * shentsize > end)
        end = shoff + (uint64_t)shnum * shentsize;
    return end < limit && end <= SIZE_MAX ? (size_t)end : 0;
}

/* ------------------------------------------------------------------------
 * PTX text
 * ---------------------------------------------------------------------- */

static bool ptx_ident_char(uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           c == '%';
}

static bool ptx_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* The text up to its NUL (or the end) has the two directives every PTX
 * module opens with. */
static bool ptx_is(const img_t *im, size_t *textlen)
{
    const uint8_t *nul = memchr(im->p, 0, im->len);
    size_t n = nul ? (size_t)(nul - im->p) : im->len;
    bool version = false, target = false;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = im->p[i];
        if (c != '\t' && c != '\n' && c != '\r' && c < ' ')
            return false; /* control bytes: not text */
        if (c == '.' && (i == 0 || !ptx_ident_char(im->p[i - 1]))) {
            version |= n - i >= 9 && memcmp(im->p + i, ".version", 8) == 0 && ptx_space(im->p[i + 8]);
            target |= n - i >= 8 && memcmp(im->p + i, ".target", 7) == 0 && ptx_space(im->p[i + 7]);
        }
    }
    *textlen = n;
    return version && target;
}

static bool ptx_is_image(const img_t *im)
{
    size_t n;
    return ptx_is(im, &n);
}

/* Kernels: the name after each ".entry" directive (".visible .entry",
 * ".weak .entry", a bare ".entry"), outside comments. */
static CUresult ptx_parse(const img_t *im, parse_t *ps)
{
    size_t n;
    if (!ptx_is(im, &n))
        return CUDA_ERROR_INVALID_IMAGE;
    const uint8_t *t = im->p;
    for (size_t i = 0; i < n;) {
        if (t[i] == '/' && i + 1 < n && t[i + 1] == '/') {
            while (i < n && t[i] != '\n')
                i++;
        } else if (t[i] == '/' && i + 1 < n && t[i + 1] == '*') {
            i += 2;
            while (i < n && !(t[i] == '*' && i + 1 < n && t[i + 1] == '/'))
                i++;
            i += 2;
        } else if (t[i] == '"') {
            for (i++; i < n && t[i] != '"'; i++)
                ;
            i++;
        } else if (t[i] == '.' && (i == 0 || ptx_space(t[i - 1])) && n - i > 6 && memcmp(t + i, ".entry", 6) == 0 &&
                   ptx_space(t[i + 6])) {
            i += 6;
            while (i < n && ptx_space(t[i]))
                i++;
            size_t start = i;
            while (i < n && ptx_ident_char(t[i]))
                i++;
            if (i == start)
                return CUDA_ERROR_INVALID_IMAGE; /* ".entry" and no name */
            report(ps, (const char *)t + start, i - start);
        } else {
            i++;
        }
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Fatbin containers
 * ---------------------------------------------------------------------- */

static bool fatbin_is(const img_t *im)
{
    uint32_t magic;
    return img_u32(im, 0, &magic) && magic == FATBIN_MAGIC;
}

/* Entries one after another: u16 kind, u16 version, u32 header size, u64
 * payload size, ..., u64 flags at 40; the payload follows the header.  A
 * compressed payload is skipped (the device does not inflate it); a
 * cubin or PTX payload is read like an image of its own. */
static CUresult fatbin_parse(const img_t *im, parse_t *ps)
{
    uint16_t hsize;
    uint64_t body;
    if (!img_u16(im, 6, &hsize) || !img_u64(im, 8, &body) || hsize < FATBIN_HEADER_SIZE || !img_span(im, hsize, body))
        return CUDA_ERROR_INVALID_IMAGE;
    for (uint64_t at = hsize, end = hsize + body; at < end;) {
        uint16_t kind;
        uint32_t ehsize;
        uint64_t psize, flags;
        img_t entry = {im->p, (size_t)end};
        if (!img_u16(&entry, at, &kind) || !img_u32(&entry, at + 4, &ehsize) || !img_u64(&entry, at + 8, &psize) ||
            !img_u64(&entry, at + 40, &flags) || ehsize < FATBIN_ENTRY_MIN || !img_span(&entry, at + ehsize, psize))
            return CUDA_ERROR_INVALID_IMAGE;
        img_t payload = {im->p + at + ehsize, (size_t)psize};
        at += ehsize + psize;
        if (kind != FATBIN_KIND_PTX && kind != FATBIN_KIND_ELF)
            continue; /* other kinds (LTO IR, ...) name no kernel the device could load */
        ps->info.entries++;
        if (flags & fatbin_compressed_flags) {
            ps->info.compressed++;
            continue;
        }
        CUresult r = kind == FATBIN_KIND_ELF ? elf_parse(&payload, ps) : ptx_parse(&payload, ps);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * The simulator's own list
 * ---------------------------------------------------------------------- */

static bool list_is(const img_t *im)
{
    size_t m = strlen(CUCACHE_SIM_MODULE_MAGIC);
    return img_span(im, 0, m) && memcmp(im->p, CUCACHE_SIM_MODULE_MAGIC, m) == 0;
}

static CUresult list_parse(const img_t *im, parse_t *ps)
{
    const uint8_t *nul = memchr(im->p, 0, im->len);
    size_t n = nul ? (size_t)(nul - im->p) : im->len;
    for (size_t i = strlen(CUCACHE_SIM_MODULE_MAGIC); i < n;) {
        const uint8_t *nl = memchr(im->p + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (im->p + i)) : n - i;
        if (len)
            report(ps, (const char *)im->p + i, len);
        i += len + 1;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Entry points
 * ---------------------------------------------------------------------- */

/* One row per kind of image: how it is recognised and read. */
static const struct {
    bool (*is)(const img_t *im);
    CUresult (*parse)(const img_t *im, parse_t *ps);
} kinds[] = {
    {list_is, list_parse},
    {elf_is, elf_parse},
    {fatbin_is, fatbin_parse},
    {ptx_is_image, ptx_parse}, /* last: any text with the two directives */
};

const void *sim_image_unwrap(const void *image)
{
    const uint8_t *p = image;
    img_t im = {p, 16}; /* u32 magic, u32 version, the container's address */
    uint32_t magic;
    uint64_t data;
    if (p && img_u32(&im, 0, &magic) && magic == FATBIN_WRAPPER_MAGIC && img_u64(&im, 8, &data))
        return (const void *)(uintptr_t)data;
    return image;
}

size_t sim_image_extent(const void *image)
{
    const uint8_t *p = image;
    if (!p)
        return 0;
    img_t head = {p, 4};
    if (elf_is(&head))
        return elf_extent(p);
    if (fatbin_is(&head)) {
        img_t im = {p, FATBIN_HEADER_SIZE};
        uint16_t hsize;
        uint64_t body;
        if (!img_u16(&im, 6, &hsize) || !img_u64(&im, 8, &body) || body > SIZE_MAX - hsize)
            return 0;
        return hsize + (size_t)body;
    }
    /* text: the simulator's list or PTX, up to its NUL */
    return strlen((const char *)p) + 1;
}

CUresult sim_image_parse(const void *image, size_t len, sim_image_name_fn fn, void *arg, sim_image_info_t *info)
{
    parse_t ps = {fn, arg, {0, 0, 0}};
    img_t im = {image, image ? len : 0};
    CUresult r = CUDA_ERROR_INVALID_IMAGE;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].is(&im)) {
            r = kinds[i].parse(&im, &ps);
            break;
        }
    if (info)
        *info = ps.info;
    return r;
}
