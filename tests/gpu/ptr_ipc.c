/*
 * What CUDA tells a program about its allocations, asked the way NCCL, UCX,
 * PyTorch's multiprocessing and workspace sizing ask it, printed so that a
 * run without cucache and a run under cucache-run can be compared line by
 * line (sub-allocation must never show through).  Plain C, no
 * kernels: built against the real CUDA headers, by nvcc in scripts/gpu-check
 * and by the C compiler in tests/interpose (linked there with the simulated
 * runtime and driver, when a toolkit's headers are found).
 *
 * Output lines:
 *   answer ...   what CUDA answered, in terms that do not depend on where the
 *                allocator placed a block (offsets from the block, sizes,
 *                memory types, error names, yes/no).  These must be the same
 *                with and without cucache: the caller compares them.
 *   check NAME: PASS|FAIL ...   a property that must hold in either run.
 *   info ...     addresses, cudaMemGetInfo's figures and other things that
 *                may differ between runs.
 *
 * Sections:
 *   pointers  two of each of seven sizes (1000 B .. 24 MiB), all live;
 *             cuMemGetAddressRange, cuPointerGetAttribute (range, mapping,
 *             type, ordinal, buffer id, ...), cuPointerGetAttributes and
 *             cudaPointerGetAttributes at offsets 0, 1, size/2 and size-1;
 *             then a block freed next to a live one, the same size
 *             allocated again (buffer ids never repeat), host, pinned and
 *             managed memory.
 *   ipc       ten blocks exported (cudaIpcGetMemHandle and cuIpcGetMemHandle
 *             alternately) to a second process (this program, --peer), which
 *             opens each, checks its bytes, writes its own, opens and closes
 *             again; the exporter sees the peer's bytes, frees a block the
 *             peer still has open and allocates over it (the peer must still
 *             read its bytes), frees another the peer closed (a stale
 *             handle); the peer closes twice and opens garbage; the exporter
 *             opens its own handle and exports an interior pointer.
 *   meminfo   many 1 MiB blocks, every other one freed, then cudaMemGetInfo's
 *             free memory allocated in 24 MiB pieces and in one piece:
 *             "info" on a GPU (the driver keeps memory of its own),
 *             a check with --strict-meminfo (the simulated device).
 *
 * Options: --expect-cucache (fail unless cucache is in the process),
 * --strict-meminfo.  Exit status 0 when every check passed.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

static int failures;
static const char *who = "ptr_ipc";

/* Every unexpected CUDA error ends the program. */
#define CK(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t rc_ = (call);                                                                                      \
        if (rc_ != cudaSuccess) {                                                                                      \
            printf("%s: %s:%d: %s -> %s\n", who, __FILE__, __LINE__, #call, cudaGetErrorName(rc_));                    \
            printf("%s: RESULT FAIL (CUDA error)\n", who);                                                             \
            fflush(stdout);                                                                                            \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)
#define DK(call)                                                                                                       \
    do {                                                                                                               \
        CUresult rc_ = (call);                                                                                         \
        if (rc_ != CUDA_SUCCESS) {                                                                                     \
            printf("%s: %s:%d: %s -> %s\n", who, __FILE__, __LINE__, #call, drv_name(rc_));                            \
            printf("%s: RESULT FAIL (CUDA error)\n", who);                                                             \
            fflush(stdout);                                                                                            \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static const char *drv_name(CUresult r)
{
    const char *s = NULL;
    if (cuGetErrorName(r, &s) != CUDA_SUCCESS || !s)
        return "(unknown CUresult)";
    return s;
}

static void check(const char *name, int ok, const char *detail)
{
    printf("check %s: %s%s%s\n", name, ok ? "PASS" : "FAIL", detail && *detail ? " " : "", detail ? detail : "");
    if (!ok)
        failures++;
}

/* ------------------------------------------------------------------------
 * pointers
 * ---------------------------------------------------------------------- */

enum { NSIZES = 7, NBLOCKS = 2 * NSIZES };
static const size_t sizes[NSIZES] = {1000, 4 * KIB, 64 * KIB + 13, MIB, MIB + 1, 3 * MIB + 5, 24 * MIB};

static const char *memtype(unsigned t)
{
    switch (t) {
    case CU_MEMORYTYPE_HOST:
        return "host";
    case CU_MEMORYTYPE_DEVICE:
        return "device";
    case CU_MEMORYTYPE_ARRAY:
        return "array";
    case CU_MEMORYTYPE_UNIFIED:
        return "unified";
    default:
        return "?";
    }
}

static const char *rt_memtype(enum cudaMemoryType t)
{
    switch (t) {
    case cudaMemoryTypeUnregistered:
        return "unregistered";
    case cudaMemoryTypeHost:
        return "host";
    case cudaMemoryTypeDevice:
        return "device";
    case cudaMemoryTypeManaged:
        return "managed";
    default:
        return "?";
    }
}

/* An address attribute as an offset from `ref` (or its error). */
static void put_addr_attr(const char *label, CUpointer_attribute a, CUdeviceptr p, CUdeviceptr ref)
{
    CUdeviceptr v = 0;
    CUresult r = cuPointerGetAttribute(&v, a, p);
    if (r == CUDA_SUCCESS)
        printf(" %s=%+" PRId64, label, (int64_t)(v - ref));
    else
        printf(" %s=%s", label, drv_name(r));
}

static void put_size_attr(const char *label, CUpointer_attribute a, CUdeviceptr p)
{
    size_t v = 0;
    CUresult r = cuPointerGetAttribute(&v, a, p);
    if (r == CUDA_SUCCESS)
        printf(" %s=%zu", label, v);
    else
        printf(" %s=%s", label, drv_name(r));
}

/* A scalar attribute, read into eight zeroed bytes (ALLOWED_HANDLE_TYPES is
 * 64 bits wide; the booleans may be written as one byte) and printed as its
 * type says. */
static void put_scalar_attr(const char *label, CUpointer_attribute a, CUdeviceptr p)
{
    uint64_t v = 0;
    CUresult r = cuPointerGetAttribute(&v, a, p);
    if (r != CUDA_SUCCESS)
        printf(" %s=%s", label, drv_name(r));
    else if (a == CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
        printf(" %s=%s", label, memtype((unsigned)v));
    else if (a == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
        printf(" %s=%d", label, (int)(uint32_t)v);
    else if (a == CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES)
        printf(" %s=%#" PRIx64, label, v);
    else /* a boolean: its first byte */
        printf(" %s=%u", label, (unsigned)(v & 0xff) != 0);
}

/* Everything the pointer queries say about p, relative to `ref` (the start
 * of the allocation it lies in, as the program knows it). */
static void describe(const char *what, CUdeviceptr p, CUdeviceptr ref)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r = cuMemGetAddressRange(&base, &size, p);
    printf("answer %s: range", what);
    if (r == CUDA_SUCCESS)
        printf(" start=%+" PRId64 " size=%zu", (int64_t)(base - ref), size);
    else
        printf(" %s", drv_name(r));
    printf(" | attr");
    put_addr_attr("start", CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p, ref);
    put_size_attr("size", CU_POINTER_ATTRIBUTE_RANGE_SIZE, p);
    put_addr_attr("mapping", CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, p, ref);
    put_size_attr("mapping_size", CU_POINTER_ATTRIBUTE_MAPPING_SIZE, p);
    put_scalar_attr("type", CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
    put_scalar_attr("ordinal", CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
    put_scalar_attr("managed", CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
    put_scalar_attr("mapped", CU_POINTER_ATTRIBUTE_MAPPED, p);
    put_scalar_attr("legacy_ipc", CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p);
    put_scalar_attr("handle_types", CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, p);
    put_addr_attr("device_pointer", CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p, ref);

    /* the same through cuPointerGetAttributes, in one call */
    CUpointer_attribute as[3] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
    CUdeviceptr s2 = 0;
    size_t z2 = 0;
    unsigned t2 = 0;
    void *out[3] = {&s2, &z2, &t2};
    r = cuPointerGetAttributes(3, as, out, p);
    if (r == CUDA_SUCCESS && s2 == 0) /* not CUDA's memory: each attribute its default */
        printf(" | attrs start=null size=%zu type=%u", z2, t2);
    else if (r == CUDA_SUCCESS)
        printf(" | attrs start=%+" PRId64 " size=%zu type=%s", (int64_t)(s2 - ref), z2, memtype(t2));
    else
        printf(" | attrs %s", drv_name(r));

    struct cudaPointerAttributes pa;
    memset(&pa, 0, sizeof pa);
    cudaError_t e = cudaPointerGetAttributes(&pa, (const void *)(uintptr_t)p);
    if (e == cudaSuccess)
        printf(" | runtime type=%s device=%d devptr=%+" PRId64 " hostptr=%s\n", rt_memtype(pa.type), pa.device,
               pa.devicePointer ? (int64_t)((uintptr_t)pa.devicePointer - ref) : 0, pa.hostPointer ? "set" : "null");
    else
        printf(" | runtime %s\n", cudaGetErrorName(e));
    cudaGetLastError(); /* a refused query sets the runtime's last error */
}

static unsigned long long buffer_id(CUdeviceptr p)
{
    unsigned long long id = 0;
    if (cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p) != CUDA_SUCCESS)
        return 0;
    return id;
}

static void section_pointers(void)
{
    printf("== pointers\n");
    CUdeviceptr b[NBLOCKS];
    size_t bs[NBLOCKS];
    for (int i = 0; i < NBLOCKS; i++) {
        void *p = NULL;
        bs[i] = sizes[i % NSIZES];
        CK(cudaMalloc(&p, bs[i]));
        b[i] = (CUdeviceptr)(uintptr_t)p;
        printf("info block %d: %zu bytes at %#" PRIx64 "\n", i, bs[i], (uint64_t)b[i]);
    }

    int starts_ok = 1, covers_ok = 1, apart_ok = 1;
    char detail[256] = "";
    for (int i = 0; i < NBLOCKS; i++) {
        const size_t offs[4] = {0, 1, bs[i] / 2, bs[i] - 1};
        for (int k = 0; k < 4; k++) {
            char what[64];
            snprintf(what, sizeof what, "block %d (%zu B) +%zu", i, bs[i], offs[k]);
            describe(what, b[i] + offs[k], b[i]);
            CUdeviceptr base = 0;
            size_t size = 0;
            if (cuMemGetAddressRange(&base, &size, b[i] + offs[k]) != CUDA_SUCCESS) {
                starts_ok = 0;
                continue;
            }
            if (base != b[i] && starts_ok) {
                starts_ok = 0;
                snprintf(detail, sizeof detail, "(block %d +%zu: start %+" PRId64 ")", i, offs[k],
                         (int64_t)(base - b[i]));
            }
            if (size < bs[i])
                covers_ok = 0;
            for (int j = 0; j < NBLOCKS; j++)
                if (j != i && b[j] >= base && b[j] < base + size)
                    apart_ok = 0;
        }
    }
    check("range-start-is-the-block", starts_ok, detail);
    check("range-covers-the-block", covers_ok, "");
    check("range-holds-no-other-block", apart_ok, "");

    unsigned long long ids[NBLOCKS + 1];
    int ids_ok = 1;
    for (int i = 0; i < NBLOCKS; i++) {
        ids[i] = buffer_id(b[i]);
        if (ids[i] == 0 || buffer_id(b[i] + bs[i] / 2) != ids[i])
            ids_ok = 0;
        for (int j = 0; j < i; j++)
            if (ids[j] == ids[i])
                ids_ok = 0;
    }
    check("buffer-ids-distinct", ids_ok, "");

    /* Freed next to a live neighbour: what CUDA says of freed memory. */
    CK(cudaFree((void *)(uintptr_t)b[0]));
    describe("freed block 0 +0", b[0], b[0]);
    describe("freed block 0 +500", b[0] + 500, b[0]);
    void *again = NULL;
    CK(cudaMalloc(&again, bs[0]));
    CUdeviceptr a = (CUdeviceptr)(uintptr_t)again;
    printf("info same size again: %s address\n", a == b[0] ? "the same" : "another");
    describe("block 0 allocated again +0", a, a);
    ids[NBLOCKS] = buffer_id(a);
    int fresh = ids[NBLOCKS] != 0;
    for (int j = 0; j < NBLOCKS; j++)
        if (ids[j] == ids[NBLOCKS])
            fresh = 0;
    check("buffer-id-new-after-reuse", fresh, a == b[0] ? "(same address)" : "(another address)");
    b[0] = a;

    /* memory cucache does not own: host, pinned, managed */
    static char host[4096];
    describe("host array", (CUdeviceptr)(uintptr_t)host, (CUdeviceptr)(uintptr_t)host);
    void *pinned = NULL, *managed = NULL;
    CK(cudaMallocHost(&pinned, 1000));
    describe("cudaMallocHost +10", (CUdeviceptr)(uintptr_t)pinned + 10, (CUdeviceptr)(uintptr_t)pinned);
    if (cudaMallocManaged(&managed, 1000, cudaMemAttachGlobal) == cudaSuccess) {
        describe("cudaMallocManaged +10", (CUdeviceptr)(uintptr_t)managed + 10, (CUdeviceptr)(uintptr_t)managed);
        CK(cudaFree(managed));
    } else {
        cudaGetLastError();
        printf("answer cudaMallocManaged: refused\n");
    }
    CK(cudaFreeHost(pinned));

    /* NULL out-parameters */
    CUdeviceptr base = 0;
    printf("answer range with no base: %s\n", drv_name(cuMemGetAddressRange(NULL, NULL, b[1])));
    printf("answer attribute into NULL: %s\n",
           drv_name(cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, b[1])));
    printf("answer runtime attributes into NULL: %s\n", cudaGetErrorName(cudaPointerGetAttributes(NULL, again)));
    cudaGetLastError();
    (void)base;

    for (int i = 0; i < NBLOCKS; i++)
        CK(cudaFree((void *)(uintptr_t)b[i]));
}

/* ------------------------------------------------------------------------
 * ipc
 * ---------------------------------------------------------------------- */

enum { NIPC = 10 };
static const size_t ipc_sizes[NIPC / 2] = {1000, 4 * KIB, 64 * KIB + 13, MIB + 1, 3 * MIB + 5};

static unsigned char pat(int k, size_t i) /* what the exporter writes */
{
    return (unsigned char)(k * 31 + i * 7 + 1);
}

static unsigned char reply(int k, size_t i) /* what the peer writes back */
{
    return (unsigned char)~pat(k, i);
}

static void hex(char *out, const void *h, size_t n)
{
    const unsigned char *b = h;
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static int unhex(void *h, const char *s, size_t n)
{
    unsigned char *b = h;
    if (strlen(s) != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        b[i] = (unsigned char)v;
    }
    return 0;
}

/* first index where the device bytes at p differ from fn(k, .), or -1 */
static long compare_bytes(const void *p, size_t n, int k, unsigned char (*fn)(int, size_t))
{
    unsigned char *h = malloc(n);
    if (!h)
        abort();
    CK(cudaMemcpy(h, p, n, cudaMemcpyDeviceToHost));
    long bad = -1;
    for (size_t i = 0; i < n && bad < 0; i++)
        if (h[i] != fn(k, i))
            bad = (long)i;
    free(h);
    return bad;
}

static void fill_bytes(void *p, size_t n, int k, unsigned char (*fn)(int, size_t))
{
    unsigned char *h = malloc(n);
    if (!h)
        abort();
    for (size_t i = 0; i < n; i++)
        h[i] = fn(k, i);
    CK(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice));
    free(h);
}

static void send_step(int fd, char c)
{
    fflush(stdout);
    if (write(fd, &c, 1) != 1) {
        printf("%s: cannot write to the other process: %s\n", who, strerror(errno));
        exit(1);
    }
}

static void wait_step(int fd, char want)
{
    char c = 0;
    ssize_t n;
    do
        n = read(fd, &c, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1 || c != want) {
        printf("%s: the other process stopped before step %c\n", who, want);
        exit(1);
    }
}

/* The peer: argv holds "handle-hex size" pairs; fd 3 reads steps from the
 * exporter, fd 4 answers. */
static int run_peer(int argc, char **argv)
{
    who = "ptr_ipc peer";
    int n = argc / 2;
    if (n != NIPC) {
        printf("%s: expected %d handles, got %d\n", who, NIPC, n);
        return 2;
    }
    cudaIpcMemHandle_t h[NIPC];
    size_t sz[NIPC];
    void *p[NIPC];
    for (int k = 0; k < NIPC; k++) {
        if (unhex(&h[k], argv[2 * k], sizeof h[k]) != 0) {
            printf("%s: bad handle %d\n", who, k);
            return 2;
        }
        sz[k] = strtoull(argv[2 * k + 1], NULL, 10);
    }
    CK(cudaFree(0));

    /* open each (runtime and driver alternately), read, write back */
    int data_ok = 1;
    for (int k = 0; k < NIPC; k++) {
        if (k % 2 == 0) {
            cudaError_t e = cudaIpcOpenMemHandle(&p[k], h[k], cudaIpcMemLazyEnablePeerAccess);
            printf("answer peer open %d (%zu B, runtime): %s\n", k, sz[k], cudaGetErrorName(e));
            if (e != cudaSuccess)
                return 1;
        } else {
            CUdeviceptr d = 0;
            CUipcMemHandle dh;
            memcpy(&dh, &h[k], sizeof dh);
            CUresult r = cuIpcOpenMemHandle(&d, dh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
            printf("answer peer open %d (%zu B, driver): %s\n", k, sz[k], drv_name(r));
            if (r != CUDA_SUCCESS)
                return 1;
            p[k] = (void *)(uintptr_t)d;
        }
        long bad = compare_bytes(p[k], sz[k], k, pat);
        if (bad >= 0) {
            printf("info peer: handle %d: byte %ld differs from what the exporter wrote\n", k, bad);
            data_ok = 0;
        }
        describe("peer's mapping", (CUdeviceptr)(uintptr_t)p[k] + 1, (CUdeviceptr)(uintptr_t)p[k]);
        fill_bytes(p[k], sz[k], k, reply);
    }
    CK(cudaDeviceSynchronize());
    check("ipc-peer-reads-the-exported-bytes", data_ok, "");

    /* open and close again, handles 0 and 1, three times over (a second
     * open of a handle this process has open is refused by CUDA: close
     * first) */
    int cycles_ok = 1;
    for (int k = 0; k < 2; k++) {
        if (k == 0)
            CK(cudaIpcCloseMemHandle(p[k]));
        else
            DK(cuIpcCloseMemHandle((CUdeviceptr)(uintptr_t)p[k]));
        for (int c = 0; c < 3; c++) {
            CK(cudaIpcOpenMemHandle(&p[k], h[k], cudaIpcMemLazyEnablePeerAccess));
            if (compare_bytes(p[k], sz[k], k, reply) >= 0)
                cycles_ok = 0;
            if (c < 2)
                CK(cudaIpcCloseMemHandle(p[k]));
        }
    }
    check("ipc-open-close-cycles", cycles_ok, "");
    send_step(4, '1');

    /* the exporter has freed block 2 and allocated over it */
    wait_step(3, '2');
    long bad = compare_bytes(p[2], sz[2], 2, reply);
    check("ipc-freed-while-open-keeps-its-bytes", bad < 0, "");
    for (int k = 0; k < NIPC; k++)
        CK(cudaIpcCloseMemHandle(p[k]));
    printf("answer peer close twice: %s\n", cudaGetErrorName(cudaIpcCloseMemHandle(p[3])));
    cudaGetLastError();
    cudaIpcMemHandle_t junk;
    for (size_t i = 0; i < sizeof junk.reserved; i++)
        junk.reserved[i] = (char)(i * 37 + 11);
    void *q = NULL;
    printf("answer peer opens garbage: %s\n",
           cudaGetErrorName(cudaIpcOpenMemHandle(&q, junk, cudaIpcMemLazyEnablePeerAccess)));
    cudaGetLastError();
    send_step(4, '3');

    /* the exporter has freed block 4, which nobody has open */
    wait_step(3, '4');
    cudaError_t e = cudaIpcOpenMemHandle(&q, h[4], cudaIpcMemLazyEnablePeerAccess);
    printf("answer peer opens a handle of freed memory: %s\n", e == cudaSuccess ? "cudaSuccess" : "refused");
    printf("info peer: that open answered %s\n", cudaGetErrorName(e));
    if (e == cudaSuccess)
        CK(cudaIpcCloseMemHandle(q));
    cudaGetLastError();
    send_step(4, '5');
    fflush(stdout);
    return failures ? 1 : 0;
}

static void section_ipc(const char *self)
{
    printf("== ipc\n");
    void *b[NIPC];
    size_t sz[NIPC];
    cudaIpcMemHandle_t h[NIPC];
    for (int k = 0; k < NIPC; k++) {
        sz[k] = ipc_sizes[k % (NIPC / 2)];
        CK(cudaMalloc(&b[k], sz[k]));
        fill_bytes(b[k], sz[k], k, pat);
        if (k % 2 == 0) {
            CK(cudaIpcGetMemHandle(&h[k], b[k]));
        } else {
            CUipcMemHandle dh;
            DK(cuIpcGetMemHandle(&dh, (CUdeviceptr)(uintptr_t)b[k]));
            memcpy(&h[k], &dh, sizeof dh);
        }
    }
    CK(cudaDeviceSynchronize());

    /* what the exporter itself is told */
    void *q = NULL;
    printf("answer exporter opens its own handle: %s\n",
           cudaGetErrorName(cudaIpcOpenMemHandle(&q, h[0], cudaIpcMemLazyEnablePeerAccess)));
    cudaGetLastError();
    cudaIpcMemHandle_t hi;
    cudaError_t e = cudaIpcGetMemHandle(&hi, (char *)b[1] + 16);
    printf("answer export of an interior pointer: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    static char host[64];
    printf("answer export of host memory: %s\n", cudaGetErrorName(cudaIpcGetMemHandle(&hi, host)));
    cudaGetLastError();
    printf("answer export into NULL: %s\n", cudaGetErrorName(cudaIpcGetMemHandle(NULL, b[0])));
    cudaGetLastError();

    /* the peer */
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) {
        printf("%s: pipe: %s\n", who, strerror(errno));
        exit(1);
    }
    char *args[3 + 2 * NIPC + 1];
    char hx[NIPC][2 * sizeof(cudaIpcMemHandle_t) + 1], sx[NIPC][32];
    int a = 0;
    args[a++] = (char *)self;
    static char peer_flag[] = "--peer";
    args[a++] = peer_flag;
    for (int k = 0; k < NIPC; k++) {
        hex(hx[k], &h[k], sizeof h[k]);
        snprintf(sx[k], sizeof sx[k], "%zu", sz[k]);
        args[a++] = hx[k];
        args[a++] = sx[k];
    }
    args[a] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, down[0], 3);
    posix_spawn_file_actions_adddup2(&fa, up[1], 4);
    fflush(stdout);
    pid_t pid;
    int rc = posix_spawn(&pid, self, &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        printf("%s: cannot start the peer %s: %s\n", who, self, strerror(rc));
        exit(1);
    }
    close(down[0]);
    close(up[1]);

    wait_step(up[0], '1');
    int seen = 1;
    for (int k = 0; k < NIPC; k++)
        if (compare_bytes(b[k], sz[k], k, reply) >= 0)
            seen = 0;
    check("ipc-exporter-sees-the-peer's-bytes", seen, "");

    /* free block 2 while the peer has it open, and allocate over it */
    CK(cudaFree(b[2]));
    void *over[8];
    for (int i = 0; i < 8; i++) {
        CK(cudaMalloc(&over[i], sz[2]));
        CK(cudaMemset(over[i], 0xEE, sz[2]));
    }
    CK(cudaDeviceSynchronize());
    send_step(down[1], '2');

    wait_step(up[0], '3');
    CK(cudaFree(b[4]));
    CK(cudaDeviceSynchronize());
    send_step(down[1], '4');
    wait_step(up[0], '5');

    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    check("ipc-peer-exit", WIFEXITED(status) && WEXITSTATUS(status) == 0, "");
    close(down[1]);
    close(up[0]);
    for (int i = 0; i < 8; i++)
        CK(cudaFree(over[i]));
    for (int k = 0; k < NIPC; k++)
        if (k != 2 && k != 4)
            CK(cudaFree(b[k]));
}

/* ------------------------------------------------------------------------
 * meminfo
 * ---------------------------------------------------------------------- */

static void section_meminfo(int strict)
{
    printf("== meminfo\n");
    enum { NSMALL = 80, MAXPIECES = 1 << 16 };
    void *small[NSMALL];
    for (int i = 0; i < NSMALL; i++)
        CK(cudaMalloc(&small[i], MIB));
    for (int i = 1; i < NSMALL; i += 2)
        CK(cudaFree(small[i]));
    size_t fr = 0, total = 0;
    CK(cudaMemGetInfo(&fr, &total));
    printf("info cudaMemGetInfo: %zu MiB free of %zu MiB, 40 blocks of 1 MiB live\n", fr / MIB, total / MIB);

    static void *pieces[MAXPIECES];
    size_t want = fr / (24 * MIB), got = 0;
    while (got < want && got < MAXPIECES && cudaMalloc(&pieces[got], 24 * MIB) == cudaSuccess)
        got++;
    cudaGetLastError();
    printf("info 24 MiB pieces: %zu of %zu allocated (%zu MiB short)\n", got, want, (want - got) * 24);
    for (size_t i = 0; i < got; i++)
        CK(cudaFree(pieces[i]));

    CK(cudaMemGetInfo(&fr, &total));
    size_t one = fr & ~(2 * MIB - 1);
    void *big = NULL;
    cudaError_t e = cudaMalloc(&big, one);
    printf("info one piece of %zu MiB (the free memory reported, in 2 MiB pages): %s\n", one / MIB,
           cudaGetErrorName(e));
    if (e == cudaSuccess)
        CK(cudaFree(big));
    cudaGetLastError();
    if (strict) {
        check("meminfo-pieces", got == want, "");
        check("meminfo-one-piece", e == cudaSuccess, "");
    }
    for (int i = 0; i < NSMALL; i += 2)
        CK(cudaFree(small[i]));
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && strcmp(argv[1], "--peer") == 0)
        return run_peer(argc - 2, argv + 2);
    int expect = 0, strict = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--expect-cucache") == 0) {
            expect = 1;
        } else if (strcmp(argv[i], "--strict-meminfo") == 0) {
            strict = 1;
        } else {
            fprintf(stderr, "usage: %s [--expect-cucache] [--strict-meminfo]\n", argv[0]);
            return 2;
        }
    }
    int (*st)(int, const char *, int64_t *) =
        (int (*)(int, const char *, int64_t *))dlsym(RTLD_DEFAULT, "cucache_stat");
    printf("info cucache: %s\n", st ? "in the process" : "not loaded");
    if (expect)
        check("cucache-loaded", st != NULL, "");
    CK(cudaSetDevice(0));
    CK(cudaFree(0));

    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        printf("%s: cannot find its own executable\n", who);
        return 1;
    }
    self[n] = '\0';

    section_pointers();
    section_ipc(self);
    section_meminfo(strict);
    if (st) {
        int64_t hits = -1;
        st(0, "num_cache_hits", &hits);
        printf("info cucache: num_cache_hits=%" PRId64 "\n", hits);
    }
    printf("%s: RESULT %s (%d check(s) failed)\n", who, failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
