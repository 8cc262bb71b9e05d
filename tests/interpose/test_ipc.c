/*
 * Proves IPC of cucache blocks between two processes that both run under
 * cucache (this test exports; the simulator's ipc_peer, started with
 * this process's environment and so with LD_PRELOAD, opens):
 *
 *   - a block at any offset of its segment opens in the peer as exactly
 *     that block (its bytes, its range), never the segment's start, and the
 *     peer's writes come back; many blocks at once; opening a handle twice
 *     gives the same pointer and needs two closes, a third fails;
 *   - a block freed while the peer has it open is not handed to a new owner
 *     (the peer still reads its bytes) until the peer closes it, then it is
 *     reused; a handle of a block freed with no peer is stale;
 *   - a handle opened in its own process, a corrupted handle, a handle whose
 *     export table belongs to another process now, one of a process of
 *     another user, and memory cucache cannot export (freed,
 *     stream-ordered) get CUDA's codes, with one line where cucache refuses;
 *   - under CUCACHE_CONF=ipc:strict (run as `test_interpose_ipc strict`) a
 *     block at its segment's start exports a plain CUDA handle that opens
 *     in a peer, and one inside a segment is refused with one line.
 *
 * Seen to fail: with hook_ipc_export handing out the segment's plain CUDA
 * handle, test_block_at_any_offset sees the segment (a 2 MiB range for a
 * 1000-byte block) and test_freed_while_open gets the block the peer still
 * reads; with core_hold never called, test_freed_while_open gets it too.
 */
#include "itest.h"
#include "peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KIB ((size_t)1 << 10)

static peer_t peer;

static int group_setup(void **state)
{
    if (itest_group_setup(state) != 0)
        return -1;
    peer_start(&peer);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return peer_stop(&peer) == 0 ? 0 : -1;
}

static uintptr_t open_in_peer(void *d)
{
    cudaIpcMemHandle_t h;
    SIM_OK(cudaIpcGetMemHandle(&h, d));
    return peer_ptr(peer_open(&peer, &h, cudaIpcMemLazyEnablePeerAccess));
}

static void test_block_at_any_offset(void **state)
{
    (void)state;
    itest_require_cucache();
    enum { N = 6 };
    void *d[N];
    size_t size[N] = {1000, 3000, 64 * KIB, 100, 200 * KIB, 12345};
    for (int i = 0; i < N; i++) { /* one 2 MiB segment, packed */
        SIM_OK(cudaMalloc(&d[i], size[i]));
        peer_fill(d[i], size[i], 20 + (unsigned)i);
    }
    assert_true((uintptr_t)d[1] > (uintptr_t)d[0]); /* inside the segment, not at its start */
    for (int i = 0; i < N; i++) {
        uintptr_t p = open_in_peer(d[i]);
        peer_expect(peer_cmd(&peer, "check %lx %zx %x", (unsigned long)p, size[i], 20 + i), "ok");
        char want[80];
        snprintf(want, sizeof want, "ok %lx %zx", (unsigned long)p, size[i]);
        peer_expect(peer_cmd(&peer, "range %lx", (unsigned long)p + size[i] / 2), want);
        peer_expect(peer_cmd(&peer, "fill %lx %zx %x", (unsigned long)p, size[i], 40 + i), "ok");
        peer_check(d[i], size[i], 40 + (unsigned)i);
        peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p), "ok");
    }
    for (int i = 0; i < N; i++) /* the neighbours kept their bytes */
        peer_check(d[i], size[i], 40 + (unsigned)i);
    for (int i = 0; i < N; i++)
        SIM_OK(cudaFree(d[i]));
}

static void test_many_blocks_and_repeated_opens(void **state)
{
    (void)state;
    itest_require_cucache();
    enum { N = 48 };
    void *d[N];
    uintptr_t p[N];
    size_t size[N];
    for (int i = 0; i < N; i++) {
        size[i] = i % 4 == 0 ? 5 * MIB + (size_t)i : 700 + (size_t)i * 1000;
        SIM_OK(cudaMalloc(&d[i], size[i]));
        peer_fill(d[i], size[i], (unsigned)i);
    }
    for (int i = 0; i < N; i++)
        p[i] = open_in_peer(d[i]);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < N; i++) {
            assert_int_equal(open_in_peer(d[i]), p[i]); /* opened again: the same pointer */
            peer_expect(peer_cmd(&peer, "check %lx %zx %x", (unsigned long)p[i], size[i], i), "ok");
            peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p[i]), "ok");
        }
    for (int i = 0; i < N; i++) {
        peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p[i]), "ok");
        peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p[i]), "err 1"); /* closed twice */
        SIM_OK(cudaFree(d[i]));
    }
}

static void test_freed_while_open(void **state)
{
    (void)state;
    itest_require_cucache();
    void *keep = NULL, *d = NULL, *q[8];
    SIM_OK(cudaMalloc(&keep, 4 * KIB));
    SIM_OK(cudaMalloc(&d, 64 * KIB));
    peer_fill(d, 64 * KIB, 7);
    uintptr_t p = open_in_peer(d);
    SIM_OK(cudaFree(d));
    SIM_OK(cudaDeviceSynchronize()); /* would make an ordinary freed block reusable */
    for (int i = 0; i < 8; i++) {
        SIM_OK(cudaMalloc(&q[i], 64 * KIB));
        if (itest_overlap(q[i], 64 * KIB, d, 64 * KIB))
            fail_msg("cudaMalloc got %p, the block a peer still has open", q[i]);
        peer_fill(q[i], 64 * KIB, 100 + (unsigned)i);
    }
    peer_expect(peer_cmd(&peer, "check %lx %zx 7", (unsigned long)p, 64 * KIB), "ok");
    /* the program sees it as freed */
    CUdeviceptr base;
    size_t size;
    CU_EXPECT(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)d), CUDA_ERROR_NOT_FOUND);
    cudaIpcMemHandle_t h;
    SIM_EXPECT(cudaIpcGetMemHandle(&h, d), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p), "ok");
    /* now it may go to a new owner */
    for (int i = 0; i < 8; i++)
        SIM_OK(cudaFree(q[i]));
    SIM_OK(cudaDeviceSynchronize());
    bool reused = false;
    void *r[16];
    for (int i = 0; i < 16; i++) {
        SIM_OK(cudaMalloc(&r[i], 64 * KIB));
        reused |= r[i] == d;
    }
    assert_true(reused);
    for (int i = 0; i < 16; i++)
        SIM_OK(cudaFree(r[i]));
    SIM_OK(cudaFree(keep));
}

/* cudaMemGetInfo does not count a freed block a peer still has open (no
 * allocation can get it), and counts it again once the peer closed it. */
static void test_held_is_not_free(void **state)
{
    (void)state;
    itest_require_cucache();
    assert_int_equal(itest_empty_cache(0), 0);
    size_t f0 = 0, f1 = 0, t = 0;
    SIM_OK(cudaMemGetInfo(&f0, &t));
    void *d = NULL;
    SIM_OK(cudaMalloc(&d, 64 * MIB));
    uintptr_t p = open_in_peer(d);
    SIM_OK(cudaFree(d));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaMemGetInfo(&f1, &t));
    assert_int_equal(f1, f0 - 64 * MIB);
    peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p), "ok");
    SIM_OK(cudaMemGetInfo(&f1, &t));
    assert_int_equal(f1, f0);
}

static void test_stale_and_bad_handles(void **state)
{
    (void)state;
    itest_require_cucache();
    void *d = NULL, *p = NULL;
    cudaIpcMemHandle_t h, bad;
    SIM_OK(cudaMalloc(&d, 5000));
    SIM_OK(cudaIpcGetMemHandle(&h, d));
    SIM_EXPECT(cudaIpcOpenMemHandle(&p, h, 1), cudaErrorDeviceUninitialized); /* its own process */
    (void)cudaGetLastError();
    CUdeviceptr dp = 0;
    CUipcMemHandle ch;
    memcpy(ch.reserved, h.reserved, 64);
    CU_EXPECT(cuIpcOpenMemHandle_v2(&dp, ch, 1), CUDA_ERROR_INVALID_CONTEXT);
    SIM_OK(cudaFree(d));
    SIM_OK(cudaDeviceSynchronize());
    peer_expect(peer_open(&peer, &h, 1), "err 400"); /* stale: freed with no peer */

    /* corrupted: a flipped bit fails the checksum; the peer says why */
    SIM_OK(cudaMalloc(&d, 5000));
    SIM_OK(cudaIpcGetMemHandle(&h, d));
    bad = h;
    bad.reserved[40] ^= 0x10;
    peer_expect(peer_open(&peer, &bad, 1), "err 1");
    /* garbage that is not cucache's goes to CUDA, which refuses it */
    memset(&bad, 0x3c, sizeof bad);
    peer_expect(peer_open(&peer, &bad, 1), "err 1");
    /* an export table of another process now: the nonce differs (checksum redone) */
    bad = h;
    bad.reserved[24] ^= 1;
    uint32_t check = 2166136261u;
    for (int i = 0; i < 60; i++)
        check = (check ^ (unsigned char)bad.reserved[i]) * 16777619u;
    memcpy(bad.reserved + 60, &check, 4);
    peer_expect(peer_open(&peer, &bad, 1), "err 400");
    /* what cucache cannot export */
    SIM_OK(cudaMallocAsync(&p, 5000, cudaStreamLegacy));
    SIM_EXPECT(cudaIpcGetMemHandle(&h, p), cudaErrorInvalidValue); /* as CUDA's pools */
    (void)cudaGetLastError();
    CU_EXPECT(cuIpcGetMemHandle(&ch, (CUdeviceptr)(uintptr_t)p), CUDA_ERROR_INVALID_VALUE);
    SIM_OK(cudaFreeAsync(p, cudaStreamLegacy));
    SIM_EXPECT(cudaIpcCloseMemHandle(d), cudaErrorInvalidValue); /* not opened */
    (void)cudaGetLastError();
    SIM_OK(cudaFree(d));
}

/* A process of another user cannot read the export table: refused with a line,
 * nothing lost.  Needs root to become another user; skipped otherwise. */
static void test_another_users_handle(void **state)
{
    (void)state;
    itest_require_cucache();
    if (geteuid() != 0)
        skip(); /* cannot run a process of another user */
    void *d = NULL;
    cudaIpcMemHandle_t h;
    SIM_OK(cudaMalloc(&d, 5000));
    SIM_OK(cudaIpcGetMemHandle(&h, d));
    int out[2];
    assert_int_equal(pipe(out), 0);
    pid_t pid = fork();
    if (pid == 0) {
        /* the child: nobody, asking the driver hook directly (a fork child
         * has no CUDA, and the export table is read before any CUDA call) */
        dup2(out[1], 2);
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(3);
        CUipcMemHandle ch;
        CUdeviceptr p = 0;
        memcpy(ch.reserved, h.reserved, 64);
        _exit(cuIpcOpenMemHandle_v2(&p, ch, 1) == CUDA_ERROR_INVALID_VALUE ? 0 : 4);
    }
    close(out[1]);
    char err[2048] = {0};
    ssize_t n = read(out[0], err, sizeof err - 1);
    close(out[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0 || n <= 0 || !strstr(err, "another user"))
        fail_msg("child exit %d, stderr: %s", WEXITSTATUS(status), err);
    SIM_OK(cudaFree(d));
}

/* ---- ipc:strict --------------------------------------------------------- */

static void expect_strict(void)
{
    const char *conf = getenv("CUCACHE_CONF");
    if (!conf || strcmp(conf, "ipc:strict") != 0)
        fail_msg("the strict tests run under CUCACHE_CONF=ipc:strict (meson's interpose_ipc_strict)");
    itest_require_cucache();
}

static void test_strict_segment_start_is_plain(void **state)
{
    (void)state;
    expect_strict();
    void *d = NULL, *inner = NULL;
    SIM_OK(cudaMalloc(&d, 24 * MIB)); /* a segment of its own: the block starts it */
    peer_fill(d, 24 * MIB, 9);
    cudaIpcMemHandle_t h;
    SIM_OK(cudaIpcGetMemHandle(&h, d));
    assert_true(memcmp(h.reserved, "cucache", 7) != 0); /* CUDA's own handle */
    uintptr_t p = peer_ptr(peer_open(&peer, &h, 1));
    peer_expect(peer_cmd(&peer, "check %lx %zx 9", (unsigned long)p, 24 * MIB), "ok");
    peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p), "ok");
    /* a freed exported block is never reused: cucache cannot see such peers */
    SIM_OK(cudaFree(d));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaMalloc(&inner, 24 * MIB));
    assert_false(itest_overlap(inner, 24 * MIB, d, 24 * MIB));
    SIM_OK(cudaFree(inner));
}

static void test_strict_refuses_inner_blocks(void **state)
{
    (void)state;
    expect_strict();
    void *a = NULL, *b = NULL;
    SIM_OK(cudaMalloc(&a, 1000));
    SIM_OK(cudaMalloc(&b, 1000));
    void *inner = (uintptr_t)b > (uintptr_t)a ? b : a;
    cudaIpcMemHandle_t h;
    itest_stderr_begin();
    cudaError_t e = cudaIpcGetMemHandle(&h, inner);
    char err[4096];
    itest_stderr_end(err, sizeof err);
    assert_int_equal(e, cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    assert_int_equal(itest_count_lines(err, "cucache: cudaIpcGetMemHandle("), 1);
    assert_non_null(strstr(err, "ipc:strict"));
    SIM_OK(cudaFree(a));
    SIM_OK(cudaFree(b));
}

/* Expandable segments live on CUDA's virtual memory, which CUDA IPC handles
 * cannot share: the export fails as CUDA's would, with a line saying why. */
static void test_expandable_refuses_with_a_message(void **state)
{
    (void)state;
    void *d = NULL;
    SIM_OK(cudaMalloc(&d, 4 * MIB));
    cudaIpcMemHandle_t h;
    char err[4096];
    itest_stderr_begin();
    cudaError_t rc = cudaIpcGetMemHandle(&h, d);
    itest_stderr_end(err, sizeof err);
    assert_int_equal(rc, cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    assert_non_null(strstr(err, "expandable_segments:true"));
    assert_non_null(strstr(err, "expandable_segments:false"));
    itest_put(d, 4 * MIB, 9); /* the block is intact */
    itest_expect(d, 4 * MIB, 9);
    SIM_OK(cudaFree(d));
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "strict") == 0) {
        const struct CMUnitTest strict[] = {
            ITEST(test_strict_segment_start_is_plain),
            ITEST(test_strict_refuses_inner_blocks),
        };
        int rc = ITEST_RUN("interpose.ipc_strict", strict, group_setup);
        return group_teardown(NULL) != 0 ? 1 : rc;
    }
    if (itest_expandable()) {
        const struct CMUnitTest expandable[] = {
            ITEST(test_expandable_refuses_with_a_message),
        };
        int rc = ITEST_RUN("interpose.ipc_expandable", expandable, group_setup);
        return group_teardown(NULL) != 0 ? 1 : rc;
    }
    const struct CMUnitTest tests[] = {
        ITEST(test_block_at_any_offset),
        ITEST(test_many_blocks_and_repeated_opens),
        ITEST(test_freed_while_open),
        ITEST(test_held_is_not_free),
        ITEST(test_stale_and_bad_handles),
        ITEST(test_another_users_handle),
    };
    int rc = ITEST_RUN("interpose.ipc", tests, group_setup);
    return group_teardown(NULL) != 0 ? 1 : rc;
}
