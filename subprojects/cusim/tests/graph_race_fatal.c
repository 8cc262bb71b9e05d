/*
 * A graph of two memset nodes writing the same memory, run with
 * CUCACHE_SIM_RACE_FATAL=1: "planted" (no edge between them: unordered
 * branches) must die on abort() at the first report (meson: should_fail),
 * "ordered" (an edge from one to the other) must exit 0.
 *
 * Usage: graph_race_fatal planted|ordered
 */
#include "cusim/cuda_api.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

enum { N = 1 << 20 };

static int check(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess)
        fprintf(stderr, "graph_race_fatal: %s failed: %s\n", what, cudaGetErrorName(rc));
    return rc != cudaSuccess;
}

int main(int argc, char **argv)
{
    bool ordered = argc > 1 && strcmp(argv[1], "ordered") == 0;
    if (argc < 2 || (!ordered && strcmp(argv[1], "planted") != 0)) {
        fprintf(stderr, "usage: graph_race_fatal planted|ordered\n");
        return 2;
    }
    void *x = NULL;
    cudaStream_t s = NULL;
    cudaGraph_t g = NULL;
    cudaGraphNode_t a, b;
    cudaGraphExec_t e = NULL;
    struct cudaMemsetParams pa = {NULL, 0, 1, 1, N, 1}, pb = {NULL, 0, 2, 1, N, 1};
    if (check(cudaMalloc(&x, N), "cudaMalloc") ||
        check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags") ||
        check(cudaGraphCreate(&g, 0), "cudaGraphCreate"))
        return 1;
    pa.dst = pb.dst = x;
    if (check(cudaGraphAddMemsetNode(&a, g, NULL, 0, &pa), "cudaGraphAddMemsetNode") ||
        check(cudaGraphAddMemsetNode(&b, g, ordered ? &a : NULL, ordered ? 1 : 0, &pb), "cudaGraphAddMemsetNode") ||
        check(cudaGraphInstantiate(&e, g, 0), "cudaGraphInstantiate") ||
        check(cudaGraphLaunch(e, s), "cudaGraphLaunch") || check(cudaStreamSynchronize(s), "cudaStreamSynchronize"))
        return 1;
    printf("graph ran\n");
    cudaGraphExecDestroy(e);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    cudaFree(x);
    return 0;
}
