/*
 * Reads every fatbin container of PyTorch's libtorch_cuda.so (the
 * `.nv_fatbin` section; CUDA 12 compresses every entry with LZ4) with the
 * module image reader: each container must parse, and each of its
 * compressed entries must decompress to a cubin or PTX its kind's reader
 * accepts (none left compressed).  Prints the containers, entries and
 * kernel names found, and the time taken.  Then loads the container of
 * PyTorch's float add kernel (torch.add's vectorized_elementwise_kernel)
 * on the simulated 9.0 device: cuFuncGetAttribute must answer its sm_90
 * cubin's binary version and registers, not those of the container's
 * first cubin (sm_50).  Exit 77 (skipped) when the library is not
 * there.  Usage: torch_fatbin [LIBRARY]
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "module_image.h"

#define TORCH_CUDA "/var/cache/cucache/torch-root/usr/lib/x86_64-linux-gnu/libtorch_cuda.so.2.6.0"
#define TORCH_ADD "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEEviT0_T1_"

/* Names, each as often as reported until unique() (sorting: linear
 * scans for repeats would cost more than reading the images). */
typedef struct names_s {
    char **v;
    size_t n, cap;
} names_t;

static void add(void *arg, const char *name, size_t len)
{
    names_t *ns = arg;
    if (ns->n == ns->cap) {
        ns->cap = ns->cap ? 2 * ns->cap : 256;
        ns->v = realloc(ns->v, ns->cap * sizeof *ns->v);
    }
    if (!ns->v || !(ns->v[ns->n] = strndup(name, len)))
        abort();
    ns->n++;
}

/* What each entry of a container states about TORCH_ADD: the first
 * cubin's and the sm_90 cubin's. */
typedef struct add_seen_s {
    sim_kernel_info_t first, sm90;
} add_seen_t;

static void add_seen(void *arg, const char *name, size_t len, const sim_kernel_info_t *ki)
{
    add_seen_t *a = arg;
    if (len != strlen(TORCH_ADD) || memcmp(name, TORCH_ADD, len) != 0 || !ki->cubin)
        return;
    if (!a->first.cubin)
        a->first = *ki;
    if (ki->binary_version == 90)
        a->sm90 = *ki;
}

/* The add kernel of the container at fb as the driver loads it. */
static int check_add(const uint8_t *fb, size_t len)
{
    add_seen_t seen = {0};
    static const sim_image_sink_t sink = {add_seen, NULL};
    sim_image_read(fb, len, &sink, &seen, NULL);
    CUdevice dev;
    CUcontext ctx;
    CUmodule m;
    CUfunction f;
    int binary = 0, ptx = 0, regs = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
        cuModuleLoadData(&m, fb) != CUDA_SUCCESS || cuModuleGetFunction(&f, m, TORCH_ADD) != CUDA_SUCCESS ||
        cuFuncGetAttribute(&binary, CU_FUNC_ATTRIBUTE_BINARY_VERSION, f) != CUDA_SUCCESS ||
        cuFuncGetAttribute(&ptx, CU_FUNC_ATTRIBUTE_PTX_VERSION, f) != CUDA_SUCCESS ||
        cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f) != CUDA_SUCCESS) {
        fprintf(stderr, "torch_fatbin: the add kernel's container does not load on the simulated device\n");
        return 1;
    }
    printf("add kernel: binary version %d, PTX version %d, %d registers (its sm_%u cubin, the first: %u registers)\n",
           binary, ptx, regs, seen.first.binary_version, seen.first.regs);
    cuModuleUnload(m);
    if (binary != 90 || ptx != 90 || !seen.sm90.cubin || (unsigned)regs != seen.sm90.regs) {
        fprintf(stderr, "torch_fatbin: the add kernel is not its sm_90 cubin's (%u registers)\n", seen.sm90.regs);
        return 1;
    }
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorts the names and keeps one of each. */
static void unique(names_t *ns)
{
    qsort(ns->v, ns->n, sizeof *ns->v, by_name);
    size_t k = 0;
    for (size_t i = 0; i < ns->n; i++) {
        if (k && strcmp(ns->v[k - 1], ns->v[i]) == 0)
            free(ns->v[i]);
        else
            ns->v[k++] = ns->v[i];
    }
    ns->n = k;
}

/* The section named `want` of the ELF file p[0, len): its bytes. */
static const uint8_t *section(const uint8_t *p, size_t len, const char *want, uint64_t *size)
{
    uint64_t shoff;
    uint16_t shentsize, shnum, shstrndx;
    if (len < 64 || memcmp(p,
                           "\x7f"
                           "ELF",
                           4) != 0)
        return NULL;
    memcpy(&shoff, p + 40, 8);
    memcpy(&shentsize, p + 58, 2);
    memcpy(&shnum, p + 60, 2);
    memcpy(&shstrndx, p + 62, 2);
    if (shentsize < 64 || shoff > len || (uint64_t)shnum * shentsize > len - shoff || shstrndx >= shnum)
        return NULL;
    const uint8_t *strtab = p + shoff + (uint64_t)shstrndx * shentsize;
    uint64_t stroff, strsize;
    memcpy(&stroff, strtab + 24, 8);
    memcpy(&strsize, strtab + 32, 8);
    for (uint16_t i = 0; i < shnum; i++) {
        const uint8_t *sh = p + shoff + (uint64_t)i * shentsize;
        uint32_t name;
        uint64_t off;
        memcpy(&name, sh, 4);
        memcpy(&off, sh + 24, 8);
        memcpy(size, sh + 32, 8);
        if (name < strsize && stroff + strsize <= len &&
            strncmp((const char *)p + stroff + name, want, strsize - name) == 0 && off <= len && *size <= len - off)
            return p + off;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : TORCH_CUDA;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        printf("no %s: skipped\n", path);
        return 77;
    }
    struct stat st;
    if (fstat(fd, &st) != 0)
        return 2;
    const uint8_t *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return 2;
    uint64_t size;
    const uint8_t *fb = section(p, (size_t)st.st_size, ".nv_fatbin", &size);
    if (!fb) {
        fprintf(stderr, "torch_fatbin: %s has no .nv_fatbin section\n", path);
        return 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned containers = 0, entries = 0, inflated = 0, failed = 0;
    size_t names = 0;
    names_t all = {0};
    const uint8_t *add_at = NULL; /* the container of TORCH_ADD */
    size_t add_len = 0;
    for (uint64_t at = 0; at + 16 <= size;) {
        uint32_t magic;
        uint16_t hsize;
        uint64_t body;
        memcpy(&magic, fb + at, 4);
        memcpy(&hsize, fb + at + 6, 2);
        memcpy(&body, fb + at + 8, 8);
        if (magic != SIM_FATBIN_MAGIC) {
            at += 8; /* containers are 8-byte aligned; padding between them */
            continue;
        }
        if (body > size - at - hsize) {
            fprintf(stderr, "torch_fatbin: the container at byte %llu runs past the section\n", (unsigned long long)at);
            return 1;
        }
        names_t ns = {0};
        sim_image_info_t info;
        CUresult r = sim_image_parse(fb + at, hsize + body, add, &ns, &info);
        containers++;
        entries += info.entries;
        inflated += info.inflated;
        if (r != CUDA_SUCCESS || info.compressed || info.inflated != info.entries) {
            fprintf(stderr, "torch_fatbin: container %u at byte %llu: %s (%u entries, %u decompressed, %u left)\n",
                    containers - 1, (unsigned long long)at, info.error[0] ? info.error : "refused", info.entries,
                    info.inflated, info.compressed);
            failed++;
        }
        unique(&ns);
        names += ns.n;
        for (size_t i = 0; i < ns.n; i++) {
            add(&all, ns.v[i], strlen(ns.v[i]));
            if (!add_at && strcmp(ns.v[i], TORCH_ADD) == 0) {
                add_at = fb + at;
                add_len = hsize + body;
            }
        }
        for (size_t i = 0; i < ns.n; i++)
            free(ns.v[i]);
        free(ns.v);
        at += hsize + body;
    }
    unique(&all);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%s: %u containers, %u entries, %u decompressed, %zu kernel names (%zu distinct), %.2f s\n", path,
           containers, entries, inflated, names, all.n, s);
    for (size_t i = 0; i < all.n; i++)
        free(all.v[i]);
    free(all.v);
    if (!add_at)
        fprintf(stderr, "torch_fatbin: no container holds %s\n", TORCH_ADD);
    int add_failed = !add_at || check_add(add_at, add_len);
    munmap((void *)p, (size_t)st.st_size);
    return failed || !containers || !names || add_failed ? 1 : 0;
}
