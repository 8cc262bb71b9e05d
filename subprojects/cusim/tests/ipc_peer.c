/*
 * The other process of the IPC tests (tests/test_ipc.c and
 * tests/interpose/test_ipc.c): an ordinary CUDA program, linked with the
 * simulated runtime, that opens the handles its parent sends and reads and
 * writes the memory behind them.  Under cucache the test runs it with
 * LD_PRELOAD inherited, as a child of a program run under cucache is.
 *
 * One command per line on stdin, one answer per line on stdout:
 *
 *   open HANDLE FLAGS     cudaIpcOpenMemHandle (HANDLE: 128 hex digits)
 *                         -> "ok PTR" | "err CODE"
 *   fill PTR SIZE SEED    write a pattern (cudaMemcpy) -> "ok" | "err CODE"
 *   check PTR SIZE SEED   read and compare it -> "ok" | "bad OFFSET" | "err CODE"
 *   range PTR             cuMemGetAddressRange -> "ok BASE SIZE" | "err CODE"
 *   close PTR             cudaIpcCloseMemHandle -> "ok" | "err CODE"
 *   vmmimport PID FD SIZE opens /proc/PID/fd/FD (a descriptor exported by
 *                         cuMemExportToShareableHandle, as a descriptor
 *                         passed over a socket would be), imports it,
 *                         reserves SIZE, maps SIZE bytes of it and makes them read-write
 *                         -> "ok PTR SIZE" | "err CODE"
 *   vmmfree PTR           unmaps, releases and frees what vmmimport made
 *                         -> "ok" | "err CODE"
 *   alloc SIZE            cudaMalloc -> "ok PTR" | "err CODE"
 *   free PTR              cudaFree -> "ok" | "err CODE"
 *   meminfo               cudaMemGetInfo -> "ok FREE TOTAL" | "err CODE"
 *   holdlock              cucacheSimSharedHoldLock: takes the shared
 *                         device's lock and keeps it -> "ok" | "err CODE"
 *   evopen HANDLE         cudaIpcOpenEventHandle -> "ok N" | "err CODE"
 *   evwait N PTR SIZE     on its stream: cudaStreamWaitEvent on event N,
 *                         then a copy of SIZE bytes at PTR to pinned memory
 *                         -> "ok" | "err CODE"
 *   evquery N             cudaEventQuery -> "ok" | "err CODE"
 *   evsync N              cudaEventSynchronize -> "ok" | "err CODE"
 *   evdone SEED           synchronises its stream and checks the copied
 *                         bytes -> "ok" | "bad OFFSET" | "err CODE"
 *   evdestroy N           cudaEventDestroy -> "ok" | "err CODE"
 *   poolimport            receives a descriptor on the socket (peer.h,
 *                         SCM_RIGHTS) and imports the pool it exports
 *                         -> "ok N" | "err CODE"
 *   ptrimport N DATA      cudaMemPoolImportPointer from pool N (DATA: 128
 *                         hex digits) -> "ok PTR" | "err CODE"
 *   freeasync PTR         cudaFreeAsync on stream 0, then synchronises
 *                         -> "ok" | "err CODE"
 *   exit                  -> exits 0
 *
 * PTR, BASE, SIZE are hexadecimal; the pattern is peer.h's peer_pattern.
 */
#include <fcntl.h>
#include <sys/socket.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusim/cuda_api.h"
#include "cusim/sim.h"
#include "peer.h"

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int parse_handle(const char *hex, cudaIpcMemHandle_t *h)
{
    if (strlen(hex) != 2 * sizeof h->reserved)
        return -1;
    for (size_t i = 0; i < sizeof h->reserved; i++) {
        int a = hexval(hex[2 * i]), b = hexval(hex[2 * i + 1]);
        if (a < 0 || b < 0)
            return -1;
        h->reserved[i] = (char)(a << 4 | b);
    }
    return 0;
}

/* Events and pools this process opened, by index. */
static cudaEvent_t events[64];
static int nevents;
static cudaMemPool_t pools[16];
static int npools;
static cudaStream_t evstream; /* evwait's stream */
static unsigned char *evbuf;  /* its copy's pinned destination */
static size_t evbytes;

/* A descriptor passed on the socket, or -1. */
static int recv_fd(void)
{
    char byte, ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&byte, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    if (recvmsg(PEER_SOCK_FD, &m, 0) != 1)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    int fd = -1;
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

static void answer_err(cudaError_t e)
{
    (void)cudaGetLastError();
    printf("err %d\n", (int)e);
}

int main(void)
{
    char line[512], cmd[16], arg[300];
    unsigned long long a = 0, b = 0, c = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        if (sscanf(line, "%15s", cmd) != 1)
            continue;
        if (strcmp(cmd, "exit") == 0)
            return 0;
        if (strcmp(cmd, "open") == 0 && sscanf(line, "%*s %299s %llx", arg, &a) == 2) {
            cudaIpcMemHandle_t h;
            void *p = NULL;
            if (parse_handle(arg, &h) != 0) {
                printf("err -1\n");
                continue;
            }
            cudaError_t e = cudaIpcOpenMemHandle(&p, h, (unsigned)a);
            if (e != cudaSuccess)
                answer_err(e);
            else
                printf("ok %llx\n", (unsigned long long)(uintptr_t)p);
        } else if ((strcmp(cmd, "fill") == 0 || strcmp(cmd, "check") == 0) &&
                   sscanf(line, "%*s %llx %llx %llx", &a, &b, &c) == 3) {
            unsigned char *buf = malloc(b ? b : 1);
            if (!buf)
                return 2;
            cudaError_t e;
            if (cmd[0] == 'f') {
                for (size_t i = 0; i < b; i++)
                    buf[i] = peer_pattern(i, (unsigned)c);
                e = cudaMemcpy((void *)(uintptr_t)a, buf, b, cudaMemcpyHostToDevice);
                if (e == cudaSuccess)
                    printf("ok\n");
            } else {
                e = cudaMemcpy(buf, (void *)(uintptr_t)a, b, cudaMemcpyDeviceToHost);
                if (e == cudaSuccess) {
                    size_t i = 0;
                    while (i < b && buf[i] == peer_pattern(i, (unsigned)c))
                        i++;
                    if (i == b)
                        printf("ok\n");
                    else
                        printf("bad %zx\n", i);
                }
            }
            if (e != cudaSuccess)
                answer_err(e);
            free(buf);
        } else if (strcmp(cmd, "range") == 0 && sscanf(line, "%*s %llx", &a) == 1) {
            CUdeviceptr base = 0;
            size_t size = 0;
            CUresult r = cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)a);
            if (r != CUDA_SUCCESS)
                printf("err %d\n", (int)r);
            else
                printf("ok %llx %zx\n", (unsigned long long)base, size);
        } else if (strcmp(cmd, "mapping") == 0 && sscanf(line, "%*s %llx", &a) == 1) {
            size_t size = 0;
            CUresult r = cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, (CUdeviceptr)a);
            if (r != CUDA_SUCCESS)
                printf("err %d\n", (int)r);
            else
                printf("ok %zx\n", size);
        } else if (strcmp(cmd, "close") == 0 && sscanf(line, "%*s %llx", &a) == 1) {
            cudaError_t e = cudaIpcCloseMemHandle((void *)(uintptr_t)a);
            if (e != cudaSuccess)
                answer_err(e);
            else
                printf("ok\n");
        } else if (strcmp(cmd, "vmmimport") == 0 && sscanf(line, "%*s %llu %llu %llx", &a, &b, &c) == 3) {
            char path[64];
            snprintf(path, sizeof path, "/proc/%llu/fd/%llu", a, b);
            int fd = open(path, O_RDWR | O_CLOEXEC);
            (void)cuInit(0);
            CUmemGenericAllocationHandle h = 0;
            CUmemAllocationProp prop;
            CUdeviceptr p = 0;
            CUresult r = fd < 0 ? CUDA_ERROR_INVALID_VALUE
                                : cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            if (fd >= 0)
                close(fd); /* the import holds its own reference */
            if (r == CUDA_SUCCESS)
                r = cuMemGetAllocationPropertiesFromHandle(&prop, h);
            size_t size = (size_t)c;
            if (r == CUDA_SUCCESS)
                r = cuMemAddressReserve(&p, size, 0, 0, 0);
            if (r == CUDA_SUCCESS)
                r = cuMemMap(p, size, 0, h, 0);
            if (r == CUDA_SUCCESS) {
                CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, prop.location.id},
                                       CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
                r = cuMemSetAccess(p, size, &acc, 1);
            }
            if (r == CUDA_SUCCESS)
                r = cuMemRelease(h); /* the mapping keeps it */
            if (r != CUDA_SUCCESS)
                printf("err %d\n", (int)r);
            else
                printf("ok %llx %zx\n", (unsigned long long)p, size);
        } else if (strcmp(cmd, "vmmfree") == 0 && sscanf(line, "%*s %llx", &a) == 1) {
            CUdeviceptr base = 0;
            size_t size = 0;
            CUresult r = cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)a);
            if (r == CUDA_SUCCESS)
                r = cuMemUnmap(base, size);
            if (r == CUDA_SUCCESS)
                r = cuMemAddressFree(base, size);
            if (r != CUDA_SUCCESS)
                printf("err %d\n", (int)r);
            else
                printf("ok\n");
        } else if (strcmp(cmd, "alloc") == 0 && sscanf(line, "%*s %llx", &a) == 1) {
            void *p = NULL;
            cudaError_t e = cudaMalloc(&p, (size_t)a);
            if (e != cudaSuccess)
                answer_err(e);
            else
                printf("ok %llx\n", (unsigned long long)(uintptr_t)p);
        } else if (strcmp(cmd, "free") == 0 && sscanf(line, "%*s %llx", &a) == 1) {
            cudaError_t e = cudaFree((void *)(uintptr_t)a);
            if (e != cudaSuccess)
                answer_err(e);
            else
                printf("ok\n");
        } else if (strcmp(cmd, "meminfo") == 0) {
            size_t f = 0, t = 0;
            cudaError_t e = cudaMemGetInfo(&f, &t);
            if (e != cudaSuccess)
                answer_err(e);
            else
                printf("ok %zx %zx\n", f, t);
        } else if (strcmp(cmd, "holdlock") == 0) {
            CUresult r = cucacheSimSharedHoldLock();
            if (r != CUDA_SUCCESS)
                printf("err %d\n", (int)r);
            else
                printf("ok\n");
        } else if (strcmp(cmd, "evopen") == 0 && sscanf(line, "%*s %299s", arg) == 1 && nevents < 64) {
            cudaIpcEventHandle_t h;
            cudaError_t e = parse_handle(arg, (cudaIpcMemHandle_t *)&h) != 0 ? cudaErrorInvalidValue
                                                                             : cudaIpcOpenEventHandle(&events[nevents], h);
            if (e != cudaSuccess)
                answer_err(e);
            else
                printf("ok %d\n", nevents++);
        } else if (strcmp(cmd, "evwait") == 0 && sscanf(line, "%*s %llu %llx %llx", &a, &b, &c) == 3 && a < 64) {
            cudaError_t e = evstream ? cudaSuccess : cudaStreamCreateWithFlags(&evstream, cudaStreamNonBlocking);
            if (e == cudaSuccess && evbuf)
                e = cudaFreeHost(evbuf);
            evbuf = NULL;
            evbytes = (size_t)c;
            if (e == cudaSuccess)
                e = cudaMallocHost((void **)&evbuf, evbytes);
            if (e == cudaSuccess)
                e = cudaStreamWaitEvent(evstream, events[a], 0);
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(evbuf, (void *)(uintptr_t)b, evbytes, cudaMemcpyDeviceToHost, evstream);
            if (e != cudaSuccess)
                answer_err(e);
            else
                printf("ok\n");
        } else if ((strcmp(cmd, "evquery") == 0 || strcmp(cmd, "evsync") == 0 || strcmp(cmd, "evdestroy") == 0) &&
                   sscanf(line, "%*s %llu", &a) == 1 && a < 64) {
            cudaError_t e = cmd[2] == 'q'   ? cudaEventQuery(events[a])
                            : cmd[2] == 's' ? cudaEventSynchronize(events[a])
                                            : cudaEventDestroy(events[a]);
            if (e != cudaSuccess)
                answer_err(e);
            else
                printf("ok\n");
        } else if (strcmp(cmd, "evdone") == 0 && sscanf(line, "%*s %llx", &a) == 1) {
            cudaError_t e = evstream ? cudaStreamSynchronize(evstream) : cudaErrorInvalidValue;
            size_t i = 0;
            while (e == cudaSuccess && i < evbytes && evbuf[i] == peer_pattern(i, (unsigned)a))
                i++;
            if (e != cudaSuccess)
                answer_err(e);
            else if (i == evbytes)
                printf("ok\n");
            else
                printf("bad %zx\n", i);
        } else if (strcmp(cmd, "poolimport") == 0 && npools < 16) {
            int fd = recv_fd();
            cudaError_t e = fd < 0 ? cudaErrorInvalidValue
                                   : cudaMemPoolImportFromShareableHandle(&pools[npools], (void *)(intptr_t)fd,
                                                                          cudaMemHandleTypePosixFileDescriptor, 0);
            if (fd >= 0)
                close(fd); /* the pool does not keep the descriptor */
            if (e != cudaSuccess)
                answer_err(e);
            else
                printf("ok %d\n", npools++);
        } else if (strcmp(cmd, "ptrimport") == 0 && sscanf(line, "%*s %llu %299s", &a, arg) == 2 && a < 16) {
            struct cudaMemPoolPtrExportData data;
            void *p = NULL;
            cudaError_t e = parse_handle(arg, (cudaIpcMemHandle_t *)&data) != 0
                                ? cudaErrorInvalidValue
                                : cudaMemPoolImportPointer(&p, pools[a], &data);
            if (e != cudaSuccess)
                answer_err(e);
            else
                printf("ok %llx\n", (unsigned long long)(uintptr_t)p);
        } else if (strcmp(cmd, "freeasync") == 0 && sscanf(line, "%*s %llx", &a) == 1) {
            cudaError_t e = cudaFreeAsync((void *)(uintptr_t)a, 0);
            if (e == cudaSuccess)
                e = cudaStreamSynchronize(0);
            if (e != cudaSuccess)
                answer_err(e);
            else
                printf("ok\n");
        } else {
            printf("err -2\n");
        }
    }
    return 0;
}
