/*
 * The simulated device's configuration: the CUCACHE_SIM_* variables
 * (config.h), read by the driver at cuInit and by the simulated NVML.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shared.h"

/* ------------------------------------------------------------------------
 * Sizes, and values shown in a refusal
 * ---------------------------------------------------------------------- */

#define SIZE_CAP ((uint64_t)1 << 50) /* 1024T: no size above it is read */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* 10, 20, 30, 40 for K, M, G, T (either case); 0 for anything else. */
static unsigned unit_shift(char c)
{
    switch (lower(c)) {
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

/* "80G", "512M", "1.5G", "64MiB", "2Ki", "1024" (bytes): digits with an
 * optional decimal part, optional whitespace, then an optional unit K/M/G/T
 * (powers of 1024) followed by an optional 'i' and an optional 'B', or a
 * lone 'i' and/or 'B' after a number of bytes; case-insensitive; a fraction
 * of a byte dropped; at most 1024T.  False on anything else.  cucache-run
 * checks --sim=CAPACITY with the same grammar. */
static bool parse_size(const char *s, size_t *out)
{
    size_t n = strlen(s), i = 0, digits = 0;
    uint64_t whole = 0, frac = 0, den = 1, mult = 1;
    bool ovf = false;
    for (; i < n && is_digit(s[i]); i++, digits++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (whole > (UINT64_MAX - d) / 10)
            ovf = true;
        else
            whole = whole * 10 + d;
    }
    if (i < n && s[i] == '.')
        for (i++; i < n && is_digit(s[i]); i++, digits++)
            if (den <= UINT64_MAX / 100) { /* 18 decimals are plenty; the rest is dropped */
                frac = frac * 10 + (uint64_t)(s[i] - '0');
                den *= 10;
            }
    if (!digits)
        return false;
    while (i < n && is_space(s[i]))
        i++;
    unsigned shift = i < n ? unit_shift(s[i]) : 0;
    if (shift) {
        mult = (uint64_t)1 << shift;
        i++;
    }
    if (i < n && lower(s[i]) == 'i')
        i++;
    if (i < n && lower(s[i]) == 'b')
        i++;
    if (i != n || ovf || __builtin_mul_overflow(whole, mult, &whole))
        return false;
    /* frac < den: the product fits 128 bits and the quotient is less than mult */
    uint64_t part = (uint64_t)((unsigned __int128)frac * mult / den);
    if (__builtin_add_overflow(whole, part, &whole) || whole > SIZE_CAP)
        return false;
    *out = (size_t)whole;
    return true;
}

#define SHOW_MAX 160             /* bytes of shown text, escapes included */
#define SHOW_BUF (SHOW_MAX + 32) /* the text, "... (N bytes)" and the NUL */

/* A value a user gave, for the message that refuses it: at most SHOW_MAX
 * bytes on one line, safe on a terminal.  Printable ASCII stays as it is, a
 * backslash is doubled, every other byte is written \xNN; a value that does
 * not fit ends in "... (N bytes)", N its whole length.  Returns out. */
static const char *show(char out[SHOW_BUF], const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = strlen(s), k = 0, i = 0;
    for (; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char piece[4];
        size_t m = 4;
        if (c == '\\')
            piece[0] = piece[1] = '\\', m = 2;
        else if (c >= 0x20 && c < 0x7f)
            piece[0] = (char)c, m = 1;
        else
            piece[0] = '\\', piece[1] = 'x', piece[2] = hex[c >> 4], piece[3] = hex[c & 15];
        if (k + m > SHOW_MAX)
            break;
        memcpy(out + k, piece, m);
        k += m;
    }
    if (i < n)
        snprintf(out + k, SHOW_BUF - k, "... (%zu bytes)", n);
    else
        out[k] = '\0';
    return out;
}

/* ------------------------------------------------------------------------
 * Numbers and lists
 * ---------------------------------------------------------------------- */

static bool parse_uint(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (end == s || *end || errno || v > max || s[0] == '-')
        return false;
    *out = v;
    return true;
}

/* Microseconds at s (fractions allowed, at most 10 s) into *ns, rounded to
 * the nearest nanosecond, and *end just after them; false when s starts
 * with no such number. */
static bool parse_us(const char *s, char **end, uint64_t *ns)
{
    errno = 0;
    double us = strtod(s, end);
    if (*end == s || errno || !(us >= 0 && us <= 10000000))
        return false;
    *ns = (uint64_t)(us * 1000 + 0.5);
    return true;
}

/* The calls of CUCACHE_SIM_VMM_US, in sim_vmm_call_t's order, and their
 * default costs in nanoseconds: the A100 figures of shared/notes/vmm.md
 * (1.7), where the release of a handle and of a reservation, not measured
 * there, take an unmap's time. */
static const char *const vmm_call_names[SIM_VMM_NCALLS] = {"reserve", "addressfree", "create", "release",
                                                           "map",     "unmap",       "access"};
static const uint64_t vmm_default_ns[SIM_VMM_NCALLS] = {19000, 25600, 193000, 25600, 1450, 25600, 36000};

/* "0" (every call free) or a comma-separated list of CALL=MICROSECONDS
 * (fractions allowed); calls not named keep their cost. */
static bool parse_vmm_costs(const char *v, uint64_t ns[SIM_VMM_NCALLS])
{
    if (strcmp(v, "0") == 0) {
        memset(ns, 0, SIM_VMM_NCALLS * sizeof *ns);
        return true;
    }
    const char *p = v;
    while (*p) {
        const char *eq = strchr(p, '=');
        if (!eq)
            return false;
        int call = -1;
        for (int i = 0; i < SIM_VMM_NCALLS; i++)
            if (strlen(vmm_call_names[i]) == (size_t)(eq - p) && strncmp(p, vmm_call_names[i], (size_t)(eq - p)) == 0)
                call = i;
        char *end;
        uint64_t cost;
        if (call < 0 || !parse_us(eq + 1, &end, &cost) || (*end && *end != ','))
            return false;
        ns[call] = cost;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p)
            return false;
    }
    return true;
}

/* CUCACHE_SIM_KERNEL_US: "DEFAULT", "NAME=US,...", or both ("5,gemm=300");
 * microseconds, fractions allowed, at most 10 s; names of 1-63 bytes. */
static bool parse_kernel_times(const char *v, sim_config_t *cfg)
{
    const char *p = v;
    cfg->nkernels = 0;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        const char *num = eq ? eq + 1 : p;
        char *end;
        uint64_t ns;
        if (!parse_us(num, &end, &ns) || end != p + len)
            return false;
        if (eq) {
            size_t n = (size_t)(eq - p);
            if (n == 0 || n >= sizeof cfg->kernels[0].name || cfg->nkernels == SIM_KERNEL_TIMES)
                return false;
            memcpy(cfg->kernels[cfg->nkernels].name, p, n);
            cfg->kernels[cfg->nkernels].name[n] = 0;
            cfg->kernels[cfg->nkernels++].ns = ns;
        } else {
            cfg->kernel_ns = ns;
        }
        if (!comma)
            break;
        p = comma + 1;
        if (!*p)
            return false;
    }
    return true;
}

#define SIM_STR_(x) #x
#define SIM_STR(x) SIM_STR_(x)

/* Says what a CUCACHE_SIM_* variable should have held; returns false. */
static bool env_bad(const char *name, const char *v, const char *expected)
{
    char shown[SHOW_BUF];
    sim_log("%s: '%s': expected %s", name, show(shown, v), expected);
    return false;
}

/* The whole number in variable name, min to max, into *out, which stays
 * as it is when the variable is unset; false (env_bad) on anything else. */
static bool env_uint(const char *name, unsigned long min, unsigned long max, unsigned long *out, const char *expected)
{
    const char *v = secure_getenv(name);
    unsigned long u;
    if (!v)
        return true;
    if (!parse_uint(v, max, &u) || u < min)
        return env_bad(name, v, expected);
    *out = u;
    return true;
}

/* env_uint into an unsigned, from 0 to max. */
static bool env_unsigned(const char *name, unsigned max, unsigned *out, const char *expected)
{
    unsigned long u = *out;
    bool ok = env_uint(name, 0, max, &u, expected);
    *out = (unsigned)u;
    return ok;
}

/* env_uint into a switch: 0 or 1. */
static bool env_bool(const char *name, bool *out, const char *expected)
{
    unsigned long u = *out;
    bool ok = env_uint(name, 0, 1, &u, expected);
    *out = u == 1;
    return ok;
}

bool sim_config_read(sim_config_t *cfg)
{
    cfg->devices = 1;
    cfg->capacity = (size_t)80 << 30;
    cfg->alloc_us = 20;
    cfg->free_us = 30;
    cfg->copy_gbps = 25;
    cfg->race = true;
    cfg->race_fatal = false;
    cfg->vmm_granularity = (size_t)2 << 20;
    memcpy(cfg->vmm_ns, vmm_default_ns, sizeof cfg->vmm_ns);
    cfg->kernel_ns = 5000; /* a small kernel's time on a GPU */
    cfg->spin_us = 100;

    const char *v;
    unsigned long devices = (unsigned long)cfg->devices;
    bool ok = env_uint("CUCACHE_SIM_DEVICES", 1, SIM_SHARED_DEVICES, &devices,
                       "a number of devices from 1 to " SIM_STR(SIM_SHARED_DEVICES));
    cfg->devices = (int)devices;
    if (ok && (v = secure_getenv("CUCACHE_SIM_CAPACITY")) &&
        (!parse_size(v, &cfg->capacity) || cfg->capacity < ((size_t)4 << 20) || cfg->capacity > ((size_t)1 << 44)))
        ok = env_bad("CUCACHE_SIM_CAPACITY", v, "a size from 4M to 16T, like 80G or 512M");
    ok = ok && env_unsigned("CUCACHE_SIM_ALLOC_US", 10000000, &cfg->alloc_us, "microseconds, 0 to 10000000");
    ok = ok && env_unsigned("CUCACHE_SIM_FREE_US", 10000000, &cfg->free_us, "microseconds, 0 to 10000000");
    if (ok && (v = secure_getenv("CUCACHE_SIM_COPY_GBPS"))) {
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (end == v || *end || errno || d < 0)
            ok = env_bad("CUCACHE_SIM_COPY_GBPS", v, "a bandwidth in GB/s (0 = instant copies)");
        else
            cfg->copy_gbps = d;
    }
    ok = ok && env_bool("CUCACHE_SIM_RACE", &cfg->race, "0 (race detector off) or 1 (on)");
    ok = ok && env_bool("CUCACHE_SIM_RACE_FATAL", &cfg->race_fatal, "0 (count races) or 1 (abort on the first)");
    if (ok && (v = secure_getenv("CUCACHE_SIM_VMM_GRANULARITY"))) {
        size_t g;
        if (!parse_size(v, &g) || g < 4096 || g > ((size_t)1 << 30) || (g & (g - 1)))
            ok = env_bad("CUCACHE_SIM_VMM_GRANULARITY", v, "a power of two from 4K to 1G, like 2M");
        else
            cfg->vmm_granularity = g;
    }
    if (ok && (v = secure_getenv("CUCACHE_SIM_VMM_US")) && !parse_vmm_costs(v, cfg->vmm_ns))
        ok = env_bad("CUCACHE_SIM_VMM_US", v,
                     "0 or CALL=MICROSECONDS,... with CALL one of reserve, addressfree, create, release, map, unmap, "
                     "access");
    if (ok && (v = secure_getenv("CUCACHE_SIM_KERNEL_US")) && (!*v || !parse_kernel_times(v, cfg)))
        ok = env_bad("CUCACHE_SIM_KERNEL_US", v,
                     "DEFAULT and/or NAME=MICROSECONDS,... (for example 5,gemm=300: kernels whose name contains gemm "
                     "take 300 us, others 5 us; at most " SIM_STR(SIM_KERNEL_TIMES) " names of 1-63 bytes)");
    ok = ok && env_unsigned("CUCACHE_SIM_SPIN_US", 100000, &cfg->spin_us, "microseconds, 0 to 100000");
    ok = ok && env_bool("CUCACHE_SIM_COHERENT", &cfg->coherent,
                        "0 (a discrete GPU) or 1 (the CPU shares device memory coherently, as on Grace Hopper)");
    if (ok && (v = secure_getenv("CUCACHE_SIM_SHARED"))) {
        const char *bad = sim_shared_key_error(v);
        if (bad)
            ok = env_bad("CUCACHE_SIM_SHARED", v, bad);
        else
            snprintf(cfg->shared_key, sizeof cfg->shared_key, "%s", v);
    }
    return ok;
}

/* FNV-1a, 64 bits. */
static uint64_t fnv64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

void sim_device_uuid(const sim_config_t *cfg, int ordinal, uint8_t out[16])
{
    static const char stem[6] = {'c', 'c', '-', 's', 'i', 'm'};
    uint64_t h = 0xcbf29ce484222325ull;
    if (cfg->shared_key[0]) {
        h = fnv64(h, "key", 3);
        h = fnv64(h, cfg->shared_key, strlen(cfg->shared_key));
    } else {
        int32_t pid = (int32_t)getpid();
        uint64_t start = 0;
        char state;
        sim_proc_stat(pid, &start, &state, NULL);
        h = fnv64(h, &pid, sizeof pid);
        h = fnv64(h, &start, sizeof start);
    }
    memcpy(out, stem, sizeof stem);
    out[6] = (uint8_t)ordinal;
    out[7] = cfg->shared_key[0] ? 's' : 'p';
    for (int i = 0; i < 8; i++)
        out[8 + i] = (uint8_t)(h >> (8 * i));
}

void sim_config_identity(const sim_config_t *cfg, sim_shared_identity_t *id)
{
    memset(id, 0, sizeof *id);
    id->ndev = (uint32_t)cfg->devices;
    id->capacity = cfg->capacity / SIM_CONFIG_PAGE * SIM_CONFIG_PAGE;
    for (int i = 0; i < cfg->devices; i++)
        sim_device_uuid(cfg, i, id->uuid[i]);
}
