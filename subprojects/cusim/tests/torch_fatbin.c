/*
 * Reads every fatbin container of PyTorch's libtorch_cuda.so (the
 * `.nv_fatbin` section; CUDA 12 compresses every entry with LZ4) with the
 * module image reader: each container must parse, and each of its
 * compressed entries must decompress to a cubin or PTX its kind's reader
 * accepts (none left compressed).  Prints the containers, entries and
 * kernel names found, and the time taken.  Exit 77 (skipped) when the
 * library is not there.  Usage: torch_fatbin [LIBRARY]
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
        for (size_t i = 0; i < ns.n; i++)
            add(&all, ns.v[i], strlen(ns.v[i]));
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
    munmap((void *)p, (size_t)st.st_size);
    return failed || !containers || !names ? 1 : 0;
}
