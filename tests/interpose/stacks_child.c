/*
 * A CUDA program with known call sites, for CUCACHE_STACKS
 * (tests/interpose/check_stacks.py reads the SITE markers below to know
 * which line each allocation is made on).
 *
 *   stacks_child [GIB]   load_weights keeps 4 x 64 MiB, grow_cache keeps
 *                        8 x 8 MiB through a stripped library's frame, then
 *                        forward asks for GIB GiB (default 64: more than
 *                        the device) and fails; nothing is freed.
 *
 * Exit 0 when forward failed and everything else was served, 1 otherwise.
 */
#include "cusim/cuda_api.h"

#include <stdio.h>
#include <stdlib.h>

void (*stacks_stripped_entry(void))(void (*)(int), int);

static int failures;

__attribute__((noinline)) static void load_weights(void)
{
    for (int i = 0; i < 4; i++) {
        void *p = NULL;
        cudaError_t rc = cudaMalloc(&p, 64 << 20); /* SITE:weights */
        failures += rc != cudaSuccess;
    }
}

__attribute__((noinline)) static void cache_alloc(int n)
{
    for (int i = 0; i < n; i++) {
        void *p = NULL;
        cudaError_t rc = cudaMalloc(&p, 8 << 20); /* SITE:cache */
        failures += rc != cudaSuccess;
    }
}

__attribute__((noinline)) static void grow_cache(void)
{
    stacks_stripped_entry()(cache_alloc, 8); /* SITE:grow */
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static cudaError_t forward(size_t gib)
{
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, gib << 30); /* SITE:forward */
    __asm__ volatile("" ::: "memory");
    return rc;
}

int main(int argc, char **argv)
{
    size_t gib = argc > 1 ? strtoull(argv[1], NULL, 10) : 64;
    load_weights(); /* SITE:main-weights */
    grow_cache();
    cudaError_t rc = forward(gib);
    printf("stacks_child: forward(%zu GiB): %s\n", gib, rc == cudaSuccess ? "served" : "failed");
    return failures || rc == cudaSuccess ? 1 : 0;
}
