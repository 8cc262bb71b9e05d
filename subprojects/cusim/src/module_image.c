/*
 * Reading module images for their kernel names, what they state about each
 * kernel and their variables (module_image.h).  Every
 * read goes through img_u16/u32/u64 or img_span, which check it against
 * the image's length; nothing here allocates but a compressed fatbin
 * entry's decompressed bytes and a cubin's index of its sections, each
 * freed once its entry is read, so the parser runs alone under a fuzzer
 * (tests/fuzz_image.c).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cusim/sim.h"
#include "fatbin_decompress.h"
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
    ELF_STT_OBJECT = 1,        /* ELF64_ST_TYPE(st_info): a variable */
    ELF_STT_FUNC = 2,          /* ELF64_ST_TYPE(st_info) */
    ELF_ABI_FLAGS_V8 = 8,      /* e_ident[EI_ABIVERSION] from which e_flags holds the sm in bits 8-15 */
    ELF_STO_CUDA_ENTRY = 0x10, /* st_other: a __global__ function, not a __device__ one */

    FATBIN_MAGIC = SIM_FATBIN_MAGIC,    /* container */
    FATBIN_WRAPPER_MAGIC = 0x466243B1u, /* what nvcc's host stub registers */
    FATBIN_HEADER_SIZE = SIM_FATBIN_HEADER_SIZE,
    FATBIN_ENTRY_MIN = SIM_FATBIN_ENTRY_SIZE, /* the entry header's fixed part */
    FATBIN_KIND_PTX = SIM_FATBIN_KIND_PTX,
    FATBIN_KIND_ELF = SIM_FATBIN_KIND_ELF,
    FATBIN_ENTRY_PACKED = 16,   /* u32 compressed bytes of the payload (the rest is padding) */
    FATBIN_ENTRY_ARCH = 28,     /* u32 sm (90) */
    FATBIN_ENTRY_UNPACKED = 56, /* u64 bytes the payload decompresses to */

    /* .nv.info records: u8 format, u8 attribute, then a u16 value, or for
     * EIFMT_SVAL a u16 size and that many bytes */
    EIFMT_SVAL = 4,
    EIATTR_MAX_THREADS = 0x05,      /* SVAL: u32 x, y, z */
    EIATTR_REQNTID = 0x10,          /* SVAL: u32 x, y, z */
    EIATTR_FRAME_SIZE = 0x11,       /* SVAL in .nv.info: u32 symbol, u32 bytes */
    EIATTR_CBANK_PARAM_SIZE = 0x19, /* u16 bytes */
    EIATTR_REGCOUNT = 0x2f,         /* SVAL in .nv.info: u32 symbol, u32 registers */
    SM80_RESERVED_SHARED = 1024,    /* what .nv.shared.<name> holds before the kernel's own (sm_80 on) */
};

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
    sim_image_name_fn fn;         /* or NULL */
    const sim_image_sink_t *sink; /* or NULL */
    void *arg;
    unsigned sm; /* the device's SM the image is read for (sim_arch_use), or 0: every entry */
    sim_image_info_t info;
} parse_t;

static void report(parse_t *ps, const char *name, size_t len, const sim_kernel_info_t *ki)
{
    ps->info.names++;
    if (ps->fn)
        ps->fn(ps->arg, name, len);
    if (ps->sink && ps->sink->kernel)
        ps->sink->kernel(ps->arg, name, len, ki);
}

static void report_global(parse_t *ps, const sim_global_info_t *g)
{
    if (ps->sink && ps->sink->global)
        ps->sink->global(ps->arg, g);
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

/* A named section, a row of the index sorted by name. */
typedef struct elf_sec_s {
    const char *name; /* in the image's section name table, not NUL-terminated */
    size_t len;
    uint32_t i; /* its index: of two of one name, the lower sorts first */
    elf_shdr_t sh;
} elf_sec_t;

/* An ELF image's section headers, checked, and what is looked up per
 * kernel, indexed once per image: reading a cubin is n log n in its
 * sections and linear in its .nv.info records. */
typedef struct elf_s {
    const img_t *im;
    uint64_t shoff;
    uint16_t shentsize, shnum;
    elf_shdr_t shstr;
    unsigned sm;       /* the cubin's sm: 90 */
    elf_sec_t *byname; /* the sections the headers and name table let us read, sorted by name */
    uint32_t nbyname;
    uint32_t nsyms;  /* entries of the largest symbol table: the bound of the two below */
    uint32_t *regs;  /* by symbol index: .nv.info's EIATTR_REGCOUNT, the last one; 0 if none */
    uint32_t *frame; /* by symbol index: .nv.info's EIATTR_FRAME_SIZE, the same */
} elf_t;

/* The name of section sh (NULL when out of the image). */
static const char *elf_sname(const elf_t *e, const elf_shdr_t *sh, size_t *len)
{
    return img_str(e->im, e->shstr.offset, e->shstr.offset + e->shstr.size, e->shstr.offset + sh->name, len);
}

/* Names in memcmp's order, a shorter one first where one begins the
 * other; equal names by section index. */
static int elf_sec_cmp(const void *pa, const void *pb)
{
    const elf_sec_t *a = pa, *b = pb;
    int c = memcmp(a->name, b->name, a->len < b->len ? a->len : b->len);
    if (c)
        return c;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

/* prefix + suffix against a name, in elf_sec_cmp's order. */
static int elf_key_cmp(const char *prefix, size_t plen, const char *suffix, size_t slen, const elf_sec_t *sec)
{
    int c = memcmp(prefix, sec->name, plen < sec->len ? plen : sec->len);
    if (c || sec->len < plen)
        return c ? c : 1;
    size_t rest = sec->len - plen;
    c = memcmp(suffix, sec->name + plen, slen < rest ? slen : rest);
    if (c)
        return c;
    return (slen > rest) - (slen < rest);
}

/* The first section named prefix + suffix, if any (binary search). */
static bool elf_find(const elf_t *e, const char *prefix, const char *suffix, size_t slen, elf_shdr_t *out)
{
    size_t plen = strlen(prefix), lo = 0, hi = e->nbyname;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (elf_key_cmp(prefix, plen, suffix, slen, &e->byname[mid]) > 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == e->nbyname || elf_key_cmp(prefix, plen, suffix, slen, &e->byname[lo]) != 0)
        return false;
    *out = e->byname[lo].sh;
    return true;
}

/* Calls fn for each record of the .nv.info section sh: its attribute, the
 * offset of its value and the value's size (a u16 value: 2 at offset+0). */
static void nvinfo_each(const elf_t *e, const elf_shdr_t *sh,
                        void (*fn)(const img_t *im, unsigned attr, uint64_t at, unsigned size, void *arg), void *arg)
{
    if (sh->type == ELF_SHT_NOBITS || !img_span(e->im, sh->offset, sh->size))
        return; /* no bytes in the image (elf_shdr lets a NOBITS section point anywhere) */
    for (uint64_t at = sh->offset, end = sh->offset + sh->size; at + 4 <= end;) {
        uint8_t fmt = e->im->p[at], attr = e->im->p[at + 1];
        uint16_t v;
        if (!img_u16(e->im, at + 2, &v))
            return;
        if (fmt == EIFMT_SVAL) {
            if (at + 4 + v > end)
                return;
            fn(e->im, attr, at + 4, v, arg);
            at += 4 + (uint64_t)v;
        } else {
            fn(e->im, attr, at + 2, 2, arg);
            at += 4;
        }
    }
}

/* .nv.info: the module's records, each naming its function's symbol,
 * into e->regs and e->frame. */
static void nvinfo_module(const img_t *im, unsigned attr, uint64_t at, unsigned size, void *arg)
{
    elf_t *e = arg;
    uint32_t sym, v;
    if (size < 8 || !img_u32(im, at, &sym) || !img_u32(im, at + 4, &v) || sym >= e->nsyms)
        return;
    if (attr == EIATTR_REGCOUNT)
        e->regs[sym] = v;
    else if (attr == EIATTR_FRAME_SIZE)
        e->frame[sym] = v;
}

/* .nv.info.<kernel>: the kernel's own records, into the sim_kernel_info_t arg. */
static void nvinfo_kernel(const img_t *im, unsigned attr, uint64_t at, unsigned size, void *arg)
{
    sim_kernel_info_t *ki = arg;
    uint32_t x, y, z;
    uint16_t v;
    if ((attr == EIATTR_MAX_THREADS || attr == EIATTR_REQNTID) && size >= 12 && img_u32(im, at, &x) &&
        img_u32(im, at + 4, &y) && img_u32(im, at + 8, &z) && (uint64_t)x * y * z <= 1024)
        ki->max_threads = x * y * z;
    else if (attr == EIATTR_CBANK_PARAM_SIZE && size == 2 && img_u16(im, at, &v))
        ki->param_bytes = v;
}

/* What the cubin states about the kernel of symbol index sym. */
static void elf_kernel_info(const elf_t *e, uint32_t sym, const char *name, size_t len, sim_kernel_info_t *ki)
{
    memset(ki, 0, sizeof *ki);
    ki->cubin = true;
    ki->binary_version = ki->ptx_version = e->sm;
    elf_shdr_t sh;
    if (sym < e->nsyms) {
        ki->regs = e->regs[sym];
        ki->local_bytes = e->frame[sym];
    }
    if (elf_find(e, ".nv.info.", name, len, &sh))
        nvinfo_each(e, &sh, nvinfo_kernel, ki);
    if (elf_find(e, ".nv.shared.", name, len, &sh) && sh.size <= UINT32_MAX) {
        uint64_t reserve = e->sm >= 80 && sh.size >= SM80_RESERVED_SHARED ? SM80_RESERVED_SHARED : 0;
        ki->shared_bytes = (unsigned)(sh.size - reserve);
    }
    if (elf_find(e, ".nv.constant3", "", 0, &sh) && sh.size <= UINT32_MAX)
        ki->const_bytes = (unsigned)sh.size;
}

/* A variable: a symbol of type STT_OBJECT in .nv.global (zero),
 * .nv.global.init or a user constant bank (.nv.constant3 on). */
static CUresult elf_global(const elf_t *e, parse_t *ps, const char *name, size_t nlen, uint16_t shndx, uint64_t value,
                           uint64_t size)
{
    elf_shdr_t sec;
    size_t slen;
    const char *sname;
    if (shndx == 0 || shndx >= e->shnum || !size)
        return CUDA_SUCCESS; /* undefined here, or an absolute symbol */
    if (!elf_shdr(e->im, e->shoff, e->shentsize, shndx, &sec) || !(sname = elf_sname(e, &sec, &slen)))
        return CUDA_ERROR_INVALID_IMAGE;
    bool global = (slen == 10 && memcmp(sname, ".nv.global", 10) == 0) ||
                  (slen == 15 && memcmp(sname, ".nv.global.init", 15) == 0);
    bool constant = slen == 13 && memcmp(sname, ".nv.constant", 12) == 0 && sname[12] >= '3' && sname[12] <= '9';
    if (!global && !constant)
        return CUDA_SUCCESS;
    if (value > sec.size || size > sec.size - value)
        return CUDA_ERROR_INVALID_IMAGE;
    sim_global_info_t g = {name, nlen, size, NULL, constant};
    if (sec.type != ELF_SHT_NOBITS)
        g.init = e->im->p + sec.offset + value;
    report_global(ps, &g);
    return CUDA_SUCCESS;
}

/* The ELF header and section headers of a cubin, checked, into e. */
static CUresult elf_header(const img_t *im, elf_t *e)
{
    uint16_t shstrndx;
    if (!elf_is(im) || !img_span(im, 0, ELF_EHDR_SIZE) || im->p[4] != ELF_CLASS64 || im->p[5] != ELF_DATA_LSB)
        return CUDA_ERROR_INVALID_IMAGE;
    uint16_t machine;
    uint32_t flags;
    if (!img_u16(im, 18, &machine) || machine != ELF_EM_CUDA || !img_u64(im, 40, &e->shoff) ||
        !img_u32(im, 48, &flags) || !img_u16(im, 58, &e->shentsize) || !img_u16(im, 60, &e->shnum) ||
        !img_u16(im, 62, &shstrndx))
        return CUDA_ERROR_INVALID_IMAGE;
    e->sm = im->p[8] >= ELF_ABI_FLAGS_V8 ? (flags >> 8) & 0xff : flags & 0xff;
    if (e->shentsize < ELF_SHDR_SIZE || shstrndx >= e->shnum ||
        !img_span(im, e->shoff, (uint64_t)e->shnum * e->shentsize))
        return CUDA_ERROR_INVALID_IMAGE;
    uint64_t phoff;
    uint16_t phentsize, phnum;
    if (!img_u64(im, 32, &phoff) || !img_u16(im, 54, &phentsize) || !img_u16(im, 56, &phnum) ||
        !img_span(im, phoff, (uint64_t)phnum * phentsize))
        return CUDA_ERROR_INVALID_IMAGE; /* the program headers: the image ends no sooner */
    if (!elf_shdr(im, e->shoff, e->shentsize, shstrndx, &e->shstr))
        return CUDA_ERROR_INVALID_IMAGE;
    return CUDA_SUCCESS;
}

/* Indexes e's sections by name and the module's .nv.info records by
 * symbol (free e->byname, e->regs, e->frame).  CUDA_ERROR_INVALID_IMAGE
 * for a section header out of the image, CUDA_ERROR_OUT_OF_MEMORY. */
static CUresult elf_index(elf_t *e)
{
    e->byname = malloc(((size_t)e->shnum + 1) * sizeof *e->byname);
    if (!e->byname)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < e->shnum; i++) {
        elf_sec_t *sec = &e->byname[e->nbyname];
        if (!elf_shdr(e->im, e->shoff, e->shentsize, i, &sec->sh))
            return CUDA_ERROR_INVALID_IMAGE;
        if (sec->sh.type == ELF_SHT_SYMTAB && sec->sh.size / ELF_SYM_SIZE > e->nsyms)
            e->nsyms = (uint32_t)(sec->sh.size / ELF_SYM_SIZE); /* in the image: fewer than 2^32 */
        if (!(sec->name = elf_sname(e, &sec->sh, &sec->len)))
            continue; /* a name out of the table: no lookup finds it */
        sec->i = i;
        e->nbyname++;
    }
    qsort(e->byname, e->nbyname, sizeof *e->byname, elf_sec_cmp);
    e->regs = calloc((size_t)e->nsyms + 1, sizeof *e->regs);
    e->frame = calloc((size_t)e->nsyms + 1, sizeof *e->frame);
    if (!e->regs || !e->frame)
        return CUDA_ERROR_OUT_OF_MEMORY;
    elf_shdr_t sh;
    if (elf_find(e, ".nv.info", "", 0, &sh))
        nvinfo_each(e, &sh, nvinfo_module, e);
    return CUDA_SUCCESS;
}

/* Kernels and variables, from each symbol table. */
static CUresult elf_symbols(const elf_t *e, parse_t *ps)
{
    const img_t *im = e->im;
    for (uint32_t i = 0; i < e->shnum; i++) {
        elf_shdr_t sym;
        if (!elf_shdr(im, e->shoff, e->shentsize, i, &sym))
            return CUDA_ERROR_INVALID_IMAGE;
        if (sym.type != ELF_SHT_SYMTAB)
            continue;
        elf_shdr_t str;
        if (sym.link >= e->shnum || !elf_shdr(im, e->shoff, e->shentsize, sym.link, &str) || sym.size % ELF_SYM_SIZE)
            return CUDA_ERROR_INVALID_IMAGE;
        for (uint64_t at = sym.offset; at < sym.offset + sym.size; at += ELF_SYM_SIZE) {
            uint32_t st_name;
            uint16_t st_shndx;
            uint64_t st_value, st_size;
            if (!img_u32(im, at, &st_name) || !img_u16(im, at + 6, &st_shndx) || !img_u64(im, at + 8, &st_value) ||
                !img_u64(im, at + 16, &st_size))
                return CUDA_ERROR_INVALID_IMAGE;
            uint8_t st_info = im->p[at + 4], st_other = im->p[at + 5];
            bool kernel = (st_info & 0xf) == ELF_STT_FUNC && (st_other & ELF_STO_CUDA_ENTRY);
            if (!kernel && (st_info & 0xf) != ELF_STT_OBJECT)
                continue;
            size_t nlen, slen;
            const char *name = img_str(im, str.offset, str.offset + str.size, str.offset + st_name, &nlen);
            if (!name)
                return CUDA_ERROR_INVALID_IMAGE;
            if (!kernel) {
                CUresult r = elf_global(e, ps, name, nlen, st_shndx, st_value, st_size);
                if (r != CUDA_SUCCESS)
                    return r;
                continue;
            }
            elf_shdr_t text;
            if (st_shndx >= e->shnum || !elf_shdr(im, e->shoff, e->shentsize, st_shndx, &text))
                return CUDA_ERROR_INVALID_IMAGE;
            const char *sname = elf_sname(e, &text, &slen);
            if (!sname)
                return CUDA_ERROR_INVALID_IMAGE;
            if (nlen && slen == nlen + 6 && memcmp(sname, ".text.", 6) == 0 && memcmp(sname + 6, name, nlen) == 0) {
                sim_kernel_info_t ki;
                elf_kernel_info(e, (uint32_t)((at - sym.offset) / ELF_SYM_SIZE), name, nlen, &ki);
                report(ps, name, nlen, &ki);
            }
        }
    }
    return CUDA_SUCCESS;
}

/* Kernels: the symbols of type STT_FUNC marked STO_CUDA_ENTRY whose section
 * is ".text.<their name>" (a __device__ function has a .text section of
 * its own too, but no entry mark).  Variables: elf_global. */
static CUresult elf_parse(const img_t *im, parse_t *ps)
{
    elf_t e = {.im = im};
    CUresult r = elf_header(im, &e);
    if (r == CUDA_SUCCESS && ps->sm && sim_arch_use(FATBIN_KIND_ELF, e.sm, false, ps->sm) == SIM_ARCH_NONE) {
        snprintf(ps->info.error, sizeof ps->info.error, "a cubin for sm_%u: no code a device of sm_%u runs", e.sm,
                 ps->sm);
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    if (r == CUDA_SUCCESS)
        r = elf_index(&e);
    if (r == CUDA_SUCCESS)
        r = elf_symbols(&e, ps);
    free(e.byname);
    free(e.regs);
    free(e.frame);
    return r;
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

/* The unsigned number at t[*i] (after spaces), or false. */
static bool ptx_number(const uint8_t *t, size_t n, size_t *i, uint64_t *v)
{
    while (*i < n && ptx_space(t[*i]))
        (*i)++;
    size_t start = *i;
    *v = 0;
    for (; *i < n && t[*i] >= '0' && t[*i] <= '9'; (*i)++)
        *v = *v * 10 + (uint64_t)(t[*i] - '0');
    return *i > start && *v < ((uint64_t)1 << 40);
}

/* Whether the directive `d` starts at t[i] and ends there (a space or
 * punctuation follows). */
static bool ptx_at(const uint8_t *t, size_t n, size_t i, const char *d)
{
    size_t len = strlen(d);
    return n - i > len && memcmp(t + i, d, len) == 0 && !ptx_ident_char(t[i + len]) &&
           (i == 0 || !ptx_ident_char(t[i - 1]));
}

/* The performance directives between an entry's name and its body:
 * .maxntid / .reqntid x[, y[, z]]. */
static void ptx_entry_info(const uint8_t *t, size_t n, size_t i, sim_kernel_info_t *ki)
{
    for (; i < n && t[i] != '{' && t[i] != ';'; i++) {
        if (t[i] != '.' || !(ptx_at(t, n, i, ".maxntid") || ptx_at(t, n, i, ".reqntid")))
            continue;
        i += 8;
        uint64_t threads = 1, v;
        for (int d = 0; d < 3 && ptx_number(t, n, &i, &v); d++) {
            threads *= v;
            while (i < n && ptx_space(t[i]))
                i++;
            if (i >= n || t[i] != ',')
                break;
            i++;
        }
        if (threads <= 1024)
            ki->max_threads = (unsigned)threads;
    }
}

/* The bytes of a PTX fundamental type (".u32"), 0 for another word. */
static unsigned ptx_type_size(const uint8_t *t, size_t len)
{
    static const struct {
        const char *name;
        unsigned size;
    } types[] = {
        {".b8", 1},  {".u8", 1},  {".s8", 1},  {".b16", 2}, {".u16", 2}, {".s16", 2}, {".f16", 2}, {".bf16", 2},
        {".b32", 4}, {".u32", 4}, {".s32", 4}, {".f32", 4}, {".b64", 8}, {".u64", 8}, {".s64", 8}, {".f64", 8},
    };
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        if (strlen(types[k].name) == len && memcmp(types[k].name, t, len) == 0)
            return types[k].size;
    return 0;
}

/* A module-scope ".global" or ".const" declaration at t[i]: its name and
 * size (type x vector x array lengths).  Initialisers are not read: the
 * variable starts as zero (docs/simulator.md). */
static void ptx_global(parse_t *ps, const uint8_t *t, size_t n, size_t i, bool constant)
{
    unsigned elem = 0;
    uint64_t count = 1, v;
    i += constant ? 6 : 7;
    for (;;) {
        while (i < n && ptx_space(t[i]))
            i++;
        if (i >= n || t[i] != '.')
            break;
        size_t start = i++;
        while (i < n && ptx_ident_char(t[i]))
            i++;
        if (i - start == 6 && memcmp(t + start, ".align", 6) == 0) {
            if (!ptx_number(t, n, &i, &v))
                return;
        } else if (i - start == 3 && t[start + 1] == 'v' && t[start + 2] >= '2' && t[start + 2] <= '8') {
            count *= (uint64_t)(t[start + 2] - '0');
        } else if (ptx_type_size(t + start, i - start)) {
            elem = ptx_type_size(t + start, i - start);
        }
    }
    size_t start = i;
    while (i < n && ptx_ident_char(t[i]))
        i++;
    if (!elem || i == start)
        return;
    size_t nlen = i - start;
    while (i < n && t[i] == '[') {
        i++;
        if (!ptx_number(t, n, &i, &v) || v == 0 || i >= n || t[i] != ']')
            return; /* unsized ([]): defined elsewhere */
        count *= v;
        i++;
        if (count > ((uint64_t)1 << 40))
            return;
    }
    sim_global_info_t g = {(const char *)t + start, nlen, count * elem, NULL, constant};
    report_global(ps, &g);
}

/* Kernels: the name after each ".entry" directive (".visible .entry",
 * ".weak .entry", a bare ".entry"), outside comments, with the thread
 * limits it declares; variables: the .global and .const declarations
 * outside any function. */
static CUresult ptx_parse(const img_t *im, parse_t *ps)
{
    size_t n;
    if (!ptx_is(im, &n))
        return CUDA_ERROR_INVALID_IMAGE;
    const uint8_t *t = im->p;
    sim_kernel_info_t base = {.binary_version = ps->sm}; /* compiled at load for the device, if read for one */
    for (size_t i = 0; i + 7 < n; i++)
        if (t[i] == '.' && ptx_at(t, n, i, ".target")) {
            size_t j = i + 7;
            while (j < n && ptx_space(t[j]))
                j++;
            uint64_t v;
            j += 3;
            if (j <= n && memcmp(t + j - 3, "sm_", 3) == 0 && ptx_number(t, n, &j, &v) && v < 1000)
                base.ptx_version = (unsigned)v;
            break;
        }
    int depth = 0, parens = 0;
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
            sim_kernel_info_t ki = base;
            ptx_entry_info(t, n, i, &ki);
            report(ps, (const char *)t + start, i - start, &ki);
        } else if (t[i] == '.' && depth == 0 && parens == 0 &&
                   (ptx_at(t, n, i, ".global") || ptx_at(t, n, i, ".const"))) {
            ptx_global(ps, t, n, i, t[i + 1] == 'c');
            i++;
        } else {
            depth += t[i] == '{' ? 1 : t[i] == '}' && depth > 0 ? -1 : 0;
            parens += t[i] == '(' ? 1 : t[i] == ')' && parens > 0 ? -1 : 0;
            i++;
        }
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Architectures: which entry a device loads
 * ---------------------------------------------------------------------- */

/* No SM stated: the simulator's linker output (driver_link.c), one
 * program whose every entry loads; CUDA's own fatbins state one. */
static bool arch_unstated(unsigned arch, bool specific, unsigned dev)
{
    (void)specific, (void)dev;
    return arch == 0;
}

static bool arch_exact(unsigned arch, bool specific, unsigned dev)
{
    (void)specific;
    return arch == dev;
}

/* Binary compatibility: a cubin runs on its major's later minors. */
static bool arch_minor(unsigned arch, bool specific, unsigned dev)
{
    return !specific && arch / 10 == dev / 10 && arch < dev;
}

/* PTX compiles for its virtual architecture and every later one. */
static bool arch_not_above(unsigned arch, bool specific, unsigned dev)
{
    return specific ? arch == dev : arch <= dev;
}

/* CUDA's rule, one row per case, best first (the enum's order). */
static const struct {
    sim_arch_use_t use;
    unsigned kind; /* SIM_FATBIN_KIND_*, or 0: either */
    bool (*fits)(unsigned arch, bool specific, unsigned dev);
} arch_rules[] = {
    {SIM_ARCH_LINKED, 0, arch_unstated},
    {SIM_ARCH_EXACT, FATBIN_KIND_ELF, arch_exact},
    {SIM_ARCH_MINOR, FATBIN_KIND_ELF, arch_minor},
    {SIM_ARCH_JIT, FATBIN_KIND_PTX, arch_not_above},
};

sim_arch_use_t sim_arch_use(unsigned kind, unsigned arch, bool specific, unsigned dev)
{
    for (size_t i = 0; i < sizeof arch_rules / sizeof arch_rules[0]; i++)
        if ((arch_rules[i].kind == kind || !arch_rules[i].kind) && arch_rules[i].fits(arch, specific, dev))
            return arch_rules[i].use;
    return SIM_ARCH_NONE;
}

/* ------------------------------------------------------------------------
 * Fatbin containers
 * ---------------------------------------------------------------------- */

static bool fatbin_is(const img_t *im)
{
    uint32_t magic;
    return img_u32(im, 0, &magic) && magic == FATBIN_MAGIC;
}

/* One entry's header: u16 kind, u16 version, u32 header size, u64 payload
 * size, ..., u64 flags at 40; the payload follows the header. */
typedef struct fb_entry_s {
    uint64_t at; /* the header's offset in the image */
    uint16_t kind;
    uint32_t hsize;
    uint64_t psize, flags;
} fb_entry_t;

/* The entry at `at`, whose header and payload lie before end. */
static bool fatbin_entry(const img_t *im, uint64_t at, uint64_t end, fb_entry_t *e)
{
    img_t body = {im->p, (size_t)end};
    e->at = at;
    return img_u16(&body, at, &e->kind) && img_u32(&body, at + 4, &e->hsize) && img_u64(&body, at + 8, &e->psize) &&
           img_u64(&body, at + 40, &e->flags) && e->hsize >= FATBIN_ENTRY_MIN &&
           img_span(&body, at + e->hsize, e->psize);
}

/* Says in error why entry `index` cannot be read. */
static void entry_error(char *error, size_t size, const img_t *im, const fb_entry_t *e, unsigned index, const char *why)
{
    uint32_t arch = 0;
    img_u32(im, e->at + FATBIN_ENTRY_ARCH, &arch);
    const char *codec = sim_fatbin_codec(e->flags);
    snprintf(error, size, "fatbin entry %u (%s for sm_%u at byte %llu of the image%s%s): %s", index,
             e->kind == FATBIN_KIND_ELF ? "cubin" : "PTX", arch, (unsigned long long)e->at,
             codec ? ", compressed with " : "", codec ? codec : "", why);
}

/* The entry's payload as its kind reads it: the bytes in the image, or
 * decompressed into *buf (the caller frees it).  SIM_DECOMP_UNAVAILABLE:
 * left compressed; SIM_DECOMP_CORRUPT: error names the entry and the
 * fault. */
static sim_decomp_t entry_payload(const img_t *im, const fb_entry_t *e, unsigned index, img_t *payload, uint8_t **buf,
                                  char *error, size_t size)
{
    *buf = NULL;
    *payload = (img_t){im->p + e->at + e->hsize, (size_t)e->psize};
    if (!(e->flags & sim_fatbin_compressed_flags()))
        return SIM_DECOMP_OK;
    if (!sim_fatbin_codec_available(e->flags))
        return SIM_DECOMP_UNAVAILABLE;
    uint32_t packed = 0;
    uint64_t unpacked = 0;
    img_u32(im, e->at + FATBIN_ENTRY_PACKED, &packed); /* inside the header: hsize >= FATBIN_ENTRY_MIN */
    img_u64(im, e->at + FATBIN_ENTRY_UNPACKED, &unpacked);
    const char *why = NULL;
    if (packed == 0 || packed > e->psize)
        why = "its compressed size is not within its payload";
    else if (unpacked == 0 || unpacked > sim_fatbin_inflate_bound(e->flags, packed))
        why = "its declared size is 0 or more than its stream could hold";
    else if (!(*buf = malloc((size_t)unpacked)))
        why = "no memory for its declared size";
    else if (sim_fatbin_decompress(e->flags, payload->p, packed, *buf, (size_t)unpacked, &why) == SIM_DECOMP_OK)
        why = NULL;
    if (why) {
        entry_error(error, size, im, e, index, why);
        free(*buf);
        *buf = NULL;
        return SIM_DECOMP_CORRUPT;
    }
    *payload = (img_t){*buf, (size_t)unpacked};
    return SIM_DECOMP_OK;
}

/* An entry's use on a device of SM dev and the SM it is for. */
typedef struct fb_use_s {
    sim_arch_use_t use;
    unsigned arch;
} fb_use_t;

static fb_use_t entry_use(const img_t *im, const fb_entry_t *e, unsigned dev)
{
    uint32_t arch = 0;
    img_u32(im, e->at + FATBIN_ENTRY_ARCH, &arch); /* inside the header: hsize >= FATBIN_ENTRY_MIN */
    return (fb_use_t){sim_arch_use(e->kind, arch, e->flags & SIM_FATBIN_ARCH_SPECIFIC, dev), arch};
}

/* The entries [at, end) a device of SM dev loads: the best case of
 * sim_arch_use, the highest SM of it; use SIM_ARCH_NONE when none fits
 * (error then lists what the fatbin holds). */
static CUresult fatbin_choose(const img_t *im, uint64_t at, uint64_t end, unsigned dev, fb_use_t *best, char *error,
                              size_t size)
{
    *best = (fb_use_t){SIM_ARCH_NONE, 0};
    int w = snprintf(error, size, "no entry of the fatbin runs on a device of sm_%u; it holds", dev);
    fb_entry_t e;
    for (; at < end; at += e.hsize + e.psize) {
        if (!fatbin_entry(im, at, end, &e))
            return CUDA_ERROR_INVALID_IMAGE;
        if (e.kind != FATBIN_KIND_PTX && e.kind != FATBIN_KIND_ELF)
            continue;
        fb_use_t u = entry_use(im, &e, dev);
        if (w >= 0 && (size_t)w < size)
            w += snprintf(error + w, size - (size_t)w, " %s_%u%s", e.kind == FATBIN_KIND_ELF ? "sm" : "compute", u.arch,
                          e.flags & SIM_FATBIN_ARCH_SPECIFIC ? "a" : "");
        if (u.use != SIM_ARCH_NONE &&
            (best->use == SIM_ARCH_NONE || u.use < best->use || (u.use == best->use && u.arch > best->arch)))
            *best = u;
    }
    if (best->use != SIM_ARCH_NONE)
        error[0] = 0;
    return CUDA_SUCCESS;
}

/* Each entry's payload (a compressed one decompressed) is read like an
 * image of its own, of those a device loads when read for one; an entry
 * compressed in a form not decoded here is skipped and counted. */
static CUresult fatbin_parse(const img_t *im, parse_t *ps)
{
    uint16_t hsize;
    uint64_t body;
    if (!img_u16(im, 6, &hsize) || !img_u64(im, 8, &body) || hsize < FATBIN_HEADER_SIZE || !img_span(im, hsize, body))
        return CUDA_ERROR_INVALID_IMAGE;
    fb_use_t best = {SIM_ARCH_NONE, 0};
    if (ps->sm) {
        CUresult r = fatbin_choose(im, hsize, hsize + body, ps->sm, &best, ps->info.error, sizeof ps->info.error);
        if (r != CUDA_SUCCESS || best.use == SIM_ARCH_NONE)
            return r != CUDA_SUCCESS ? r : CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    fb_entry_t e;
    unsigned code = 0; /* code entries met */
    for (uint64_t at = hsize, end = hsize + body; at < end; at += e.hsize + e.psize) {
        if (!fatbin_entry(im, at, end, &e))
            return CUDA_ERROR_INVALID_IMAGE;
        if (e.kind != FATBIN_KIND_PTX && e.kind != FATBIN_KIND_ELF)
            continue; /* other kinds (LTO IR, ...) name no kernel the device could load */
        unsigned index = code++;
        fb_use_t u = entry_use(im, &e, ps->sm);
        if (ps->sm && (u.use != best.use || u.arch != best.arch)) {
            ps->info.other_arch++;
            continue;
        }
        ps->info.entries++;
        img_t payload;
        uint8_t *buf;
        sim_decomp_t d = entry_payload(im, &e, index, &payload, &buf, ps->info.error, sizeof ps->info.error);
        if (d == SIM_DECOMP_CORRUPT)
            return CUDA_ERROR_INVALID_IMAGE;
        if (d == SIM_DECOMP_UNAVAILABLE) {
            ps->info.compressed++;
            continue;
        }
        ps->info.inflated += buf != NULL;
        CUresult r = e.kind == FATBIN_KIND_ELF ? elf_parse(&payload, ps) : ptx_parse(&payload, ps);
        free(buf);
        if (r != CUDA_SUCCESS) {
            if (buf)
                entry_error(ps->info.error, sizeof ps->info.error, im, &e, index,
                            "what it decompresses to is no image of its kind");
            return r;
        }
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
            report(ps, (const char *)im->p + i, len, NULL);
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

static CUresult image_parse(const void *image, size_t len, parse_t *ps, sim_image_info_t *info)
{
    img_t im = {image, image ? len : 0};
    CUresult r = CUDA_ERROR_INVALID_IMAGE;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].is(&im)) {
            r = kinds[i].parse(&im, ps);
            break;
        }
    if (info)
        *info = ps->info;
    return r;
}

CUresult sim_image_parse(const void *image, size_t len, sim_image_name_fn fn, void *arg, sim_image_info_t *info)
{
    parse_t ps = {fn, NULL, arg, 0, {0}};
    return image_parse(image, len, &ps, info);
}

CUresult sim_image_read(const void *image, size_t len, const sim_image_sink_t *sink, void *arg, sim_image_info_t *info)
{
    parse_t ps = {NULL, sink, arg, 0, {0}};
    return image_parse(image, len, &ps, info);
}

CUresult sim_image_read_for(const void *image, size_t len, unsigned sm, const sim_image_sink_t *sink, void *arg,
                            sim_image_info_t *info)
{
    parse_t ps = {NULL, sink, arg, sm, {0}};
    return image_parse(image, len, &ps, info);
}

CUresult sim_image_entries(const void *image, size_t len, sim_image_entry_fn fn, void *arg)
{
    CUresult r = sim_image_parse(image, len, NULL, NULL, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    img_t im = {image, len};
    if (elf_is(&im) || ptx_is_image(&im)) {
        size_t textlen = len;
        if (!elf_is(&im))
            ptx_is(&im, &textlen);
        fn(arg, elf_is(&im) ? FATBIN_KIND_ELF : FATBIN_KIND_PTX, 0, image, elf_is(&im) ? len : textlen);
        return CUDA_SUCCESS;
    }
    if (!fatbin_is(&im))
        return CUDA_ERROR_INVALID_IMAGE; /* the simulator's list: no code to link */
    uint16_t hsize = 0;
    uint64_t body = 0;
    img_u16(&im, 6, &hsize);
    img_u64(&im, 8, &body);
    fb_entry_t e;
    unsigned index = 0;
    for (uint64_t at = hsize, end = hsize + body; at < end && fatbin_entry(&im, at, end, &e); at += e.hsize + e.psize) {
        if (e.kind != FATBIN_KIND_PTX && e.kind != FATBIN_KIND_ELF)
            continue;
        img_t payload;
        uint8_t *buf;
        char error[sizeof((sim_image_info_t *)0)->error];
        sim_decomp_t d = entry_payload(&im, &e, index++, &payload, &buf, error, sizeof error);
        if (d == SIM_DECOMP_CORRUPT)
            return CUDA_ERROR_INVALID_IMAGE; /* only when memory ran out: the parse above read it */
        fn(arg, e.kind, buf ? e.flags & ~sim_fatbin_compressed_flags() : e.flags, payload.p, payload.len);
        free(buf);
    }
    return CUDA_SUCCESS;
}
