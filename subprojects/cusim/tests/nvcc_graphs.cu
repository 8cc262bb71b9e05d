// A CUDA program as nvcc builds it that builds a graph by hand: a memory
// allocation node, a memset, a kernel node of a real kernel (also launched
// with <<<>>>), a copy to the host and a free node, plus a host node after
// the copy; it checks the bytes it copied back, that cudaMemGetInfo sees
// the graph's memory once the graph is uploaded and not after a trim.
// With "oom" it then asks for more than the device has left while the
// graph's memory is reserved (run under cucache, the OOM report counts
// that memory as this process's, outside cucache).  The output is the
// same on the simulator alone and under cucache (tests/interpose).
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "nvcc_check.h"

__global__ void scale(unsigned char *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] *= 2;
}

static void done(void *arg)
{
    *(int *)arg = 1;
}

static size_t free_now()
{
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    return f;
}

int main(int argc, char **argv)
{
    bool oom = argc > 1 && std::strcmp(argv[1], "oom") == 0;
    const int n = 1 << 20;
    const size_t graph_bytes = oom ? (size_t)512 << 20 : (size_t)4 << 20;
    static unsigned char host[1 << 20];
    int ran = 0;
    cudaStream_t s;
    if (!CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)))
        return 1;
    scale<<<1, 32, 0, s>>>(nullptr, 0); // a <<<>>> launch of the same kernel
    if (!CHECK(cudaGetLastError()))
        return 1;

    cudaGraph_t g;
    if (!CHECK(cudaGraphCreate(&g, 0)))
        return 1;
    cudaMemAllocNodeParams ap;
    std::memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = 0;
    ap.bytesize = graph_bytes;
    cudaGraphNode_t alloc, set, kern, copy, host_node, release;
    if (!CHECK(cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap)))
        return 1;
    unsigned char *d = (unsigned char *)ap.dptr;
    cudaMemsetParams mp = {d, 0, 0x21, 1, (size_t)n, 1};
    if (!CHECK(cudaGraphAddMemsetNode(&set, g, &alloc, 1, &mp)))
        return 1;
    int count = n;
    void *args[] = {&d, &count};
    cudaKernelNodeParams kp = {(void *)scale, dim3(n / 256), dim3(256), 0, args, nullptr};
    if (!CHECK(cudaGraphAddKernelNode(&kern, g, &set, 1, &kp)))
        return 1;
    if (!CHECK(cudaGraphAddMemcpyNode1D(&copy, g, &kern, 1, host, d, n, cudaMemcpyDeviceToHost)))
        return 1;
    cudaHostNodeParams hp = {done, &ran};
    if (!CHECK(cudaGraphAddHostNode(&host_node, g, &copy, 1, &hp)))
        return 1;
    if (!CHECK(cudaGraphAddMemFreeNode(&release, g, &copy, 1, d)))
        return 1;
    size_t nodes = 0;
    if (!CHECK(cudaGraphGetNodes(g, nullptr, &nodes)))
        return 1;
    std::printf("graph: %zu nodes\n", nodes);

    size_t before = free_now();
    cudaGraphExec_t e;
    if (!CHECK(cudaGraphInstantiate(&e, g, 0)))
        return 1;
    if (!CHECK(cudaGraphUpload(e, s)))
        return 1;
    std::printf("uploaded: cudaMemGetInfo sees %zu MiB less\n", (before - free_now()) >> 20);
    if (oom) {
        void *p = nullptr;
        cudaError_t r = cudaMalloc(&p, (size_t)768 << 20);
        std::printf("cudaMalloc of 768 MiB with the graph's memory reserved: %s\n", cudaGetErrorName(r));
        cudaGetLastError();
    }
    for (int i = 0; i < 2; i++) {
        std::memset(host, 0, sizeof host);
        ran = 0;
        if (!CHECK(cudaGraphLaunch(e, s)))
            return 1;
        if (!CHECK(cudaStreamSynchronize(s)))
            return 1;
        for (int k = 0; k < n; k++)
            if (host[k] != 0x21) { // a timed kernel moves no bytes
                std::printf("FAIL byte %d is %#x\n", k, host[k]);
                return 1;
            }
        std::printf("launch %d: %d bytes of 0x21 back, host node ran: %d\n", i, n, ran);
    }
    unsigned long long used_high = 0, reserved = 0;
    if (!CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &used_high)))
        return 1;
    if (!CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved)))
        return 1;
    std::printf("graph memory: used high %llu MiB, reserved %llu MiB\n", used_high >> 20, reserved >> 20);
    if (!CHECK(cudaGraphExecDestroy(e)))
        return 1;
    if (!CHECK(cudaGraphDestroy(g)))
        return 1;
    if (!CHECK(cudaDeviceGraphMemTrim(0)))
        return 1;
    std::printf("trimmed: cudaMemGetInfo sees %zu MiB less than before\n", (before - free_now()) >> 20);
    if (!CHECK(cudaStreamDestroy(s)))
        return 1;
    return 0;
}
