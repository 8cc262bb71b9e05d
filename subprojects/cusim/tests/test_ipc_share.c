/*
 * Proves IPC events and pools shared between processes on the simulated
 * device (this process exports, tests/ipc_peer imports), on a device
 * the two share (CUCACHE_SIM_SHARED):
 *   - an interprocess event recorded behind closed work (a gate, then a
 *     copy into exported memory) makes the peer's stream wait: the peer's
 *     query says not ready while the gate is closed, and its copy of the
 *     memory, queued behind the wait, sees the bytes written after the
 *     gate opened; the peer's cudaEventSynchronize returns once they are;
 *   - an event without cudaEventInterprocess cannot be exported
 *     (cudaErrorInvalidResourceHandle), cudaEventInterprocess without
 *     cudaEventDisableTiming is cudaErrorInvalidValue, a handle opened in
 *     its own process is cudaErrorDeviceUninitialized, garbage
 *     cudaErrorInvalidValue;
 *   - a pool created with cudaMemHandleTypePosixFileDescriptor is exported
 *     as a descriptor passed over a unix socket (SCM_RIGHTS); an allocation
 *     of it is exported as 64 bytes; the peer reads this process's bytes
 *     and this process reads the peer's; the importing process's memory
 *     use stays 0 and the device's free memory is the same in both
 *     processes (the bytes are counted once); the peer freeing its pointer
 *     (cudaFree, cudaFreeAsync) frees nothing here; the default pool cannot
 *     be exported (cudaErrorInvalidValue), nor an allocation of a pool
 *     without handle types, nor a pool imported in its own process.
 */
#include "peer.h"
#include "simtest.h"
#include "../src/shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static peer_t peer;
static char key[64];

static int group_setup(void **state)
{
    (void)state;
    snprintf(key, sizeof key, "simtest-ipcshare-%d", (int)getpid());
    setenv("CUCACHE_SIM_SHARED", key, 1);
    int n;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        return -1;
    peer_start(&peer);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = peer_stop(&peer);
    char path[256];
    snprintf(path, sizeof path, SIM_SHARED_DIR "/" SIM_SHARED_PREFIX "%u-%s", (unsigned)geteuid(), key);
    unlink(path);
    return rc == 0 ? 0 : -1;
}

/* The peer's answer "ok N": N. */
static int peer_index(const char *answer)
{
    int n = -1;
    if (sscanf(answer, "ok %d", &n) != 1)
        fail_msg("the IPC peer answered \"%s\", expected \"ok N\"", answer);
    return n;
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    SIM_OK(cudaMemGetInfo(&f, &t));
    return f;
}

static size_t peer_free(void)
{
    unsigned long long f = 0, t = 0;
    const char *a = peer_cmd(&peer, "meminfo");
    if (sscanf(a, "ok %llx %llx", &f, &t) != 2)
        fail_msg("meminfo: the peer answered \"%s\"", a);
    return (size_t)f;
}

/* ------------------------------------------------------------------------
 * Events
 * ---------------------------------------------------------------------- */

static void test_event_orders_the_peer(void **state)
{
    (void)state;
    void *d = NULL;
    SIM_OK(cudaMalloc(&d, MIB));
    SIM_OK(cudaMemset(d, 0, MIB));
    SIM_OK(cudaDeviceSynchronize());
    cudaIpcMemHandle_t mh;
    SIM_OK(cudaIpcGetMemHandle(&mh, d));
    uintptr_t pd = peer_ptr(peer_open(&peer, &mh, cudaIpcMemLazyEnablePeerAccess));

    cudaEvent_t ev;
    SIM_OK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
    cudaIpcEventHandle_t eh;
    SIM_OK(cudaIpcGetEventHandle(&eh, ev));
    char hex[129];
    peer_hex64(&eh, hex);
    int pe = peer_index(peer_cmd(&peer, "evopen %s", hex));

    /* this process: a gate, then the bytes, then the record */
    cudaStream_t s;
    SIM_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned char *h = NULL;
    SIM_OK(cudaMallocHost((void **)&h, MIB));
    for (size_t i = 0; i < MIB; i++)
        h[i] = peer_pattern(i, 7);
    simtest_gate_t *g = simtest_gate_new();
    simtest_gate_block(g, s);
    SIM_OK(cudaMemcpyAsync(d, h, MIB, cudaMemcpyHostToDevice, s));
    SIM_OK(cudaEventRecord(ev, s));
    SIM_EXPECT(cudaEventQuery(ev), cudaErrorNotReady);

    /* the peer: a wait on the event, then a copy out of the memory */
    peer_expect(peer_cmd(&peer, "evwait %d %lx %zx", pe, (unsigned long)pd, MIB), "ok");
    simtest_settle();
    char want[32];
    snprintf(want, sizeof want, "err %d", (int)cudaErrorNotReady);
    peer_expect(peer_cmd(&peer, "evquery %d", pe), want);
    assert_true(simtest_gate_entered(g));
    simtest_gate_open(g);
    peer_expect(peer_cmd(&peer, "evdone 7"), "ok"); /* its copy came after the bytes */
    peer_expect(peer_cmd(&peer, "evsync %d", pe), "ok");
    peer_expect(peer_cmd(&peer, "evquery %d", pe), "ok");
    SIM_OK(cudaEventSynchronize(ev));

    /* recorded again behind a closed gate: the peer's synchronise waits */
    simtest_gate_t *g2 = simtest_gate_new();
    simtest_gate_block(g2, s);
    SIM_OK(cudaEventRecord(ev, s));
    peer_expect(peer_cmd(&peer, "evquery %d", pe), want);
    simtest_gate_open_after(g2, 50);
    peer_expect(peer_cmd(&peer, "evsync %d", pe), "ok");
    assert_true(simtest_gate_passed(g2));

    peer_expect(peer_cmd(&peer, "evdestroy %d", pe), "ok");
    peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)pd), "ok");
    SIM_OK(cudaStreamSynchronize(s));
    SIM_OK(cudaEventDestroy(ev));
    SIM_OK(cudaStreamDestroy(s));
    SIM_OK(cudaFreeHost(h));
    SIM_OK(cudaFree(d));
}

static void test_event_errors(void **state)
{
    (void)state;
    cudaEvent_t plain, ipc, opened;
    cudaIpcEventHandle_t eh;
    SIM_OK(cudaEventCreateWithFlags(&plain, cudaEventDisableTiming));
    SIM_EXPECT(cudaIpcGetEventHandle(&eh, plain), cudaErrorInvalidResourceHandle);
    SIM_EXPECT(cudaEventCreateWithFlags(&ipc, cudaEventInterprocess), cudaErrorInvalidValue);
    SIM_OK(cudaEventCreateWithFlags(&ipc, cudaEventInterprocess | cudaEventDisableTiming));
    SIM_EXPECT(cudaIpcGetEventHandle(NULL, ipc), cudaErrorInvalidValue);
    SIM_OK(cudaIpcGetEventHandle(&eh, ipc));
    SIM_EXPECT(cudaIpcOpenEventHandle(&opened, eh), cudaErrorDeviceUninitialized);
    char hex[129], want[32];
    memset(&eh, 0, sizeof eh);
    peer_hex64(&eh, hex);
    snprintf(want, sizeof want, "err %d", (int)cudaErrorInvalidValue);
    peer_expect(peer_cmd(&peer, "evopen %s", hex), want);
    /* a destroyed event's handle is stale */
    SIM_OK(cudaIpcGetEventHandle(&eh, ipc));
    SIM_OK(cudaEventDestroy(ipc));
    peer_hex64(&eh, hex);
    snprintf(want, sizeof want, "err %d", (int)cudaErrorInvalidResourceHandle);
    peer_expect(peer_cmd(&peer, "evopen %s", hex), want);
    SIM_OK(cudaEventDestroy(plain));
    (void)cudaGetLastError();
}

/* ------------------------------------------------------------------------
 * Pools
 * ---------------------------------------------------------------------- */

static cudaMemPool_t shareable_pool(void)
{
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    SIM_OK(cudaMemPoolCreate(&pool, &props));
    return pool;
}

static void test_pool_shared(void **state)
{
    (void)state;
    cudaMemPool_t pool = shareable_pool();
    void *d = NULL;
    SIM_OK(cudaMallocFromPoolAsync(&d, 8 * MIB, pool, 0));
    peer_fill(d, 8 * MIB, 3);
    SIM_OK(cudaDeviceSynchronize());

    int fd = -1;
    SIM_OK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
    assert_true(fd >= 0);
    peer_send_fd(&peer, fd);
    close(fd);
    int pp = peer_index(peer_cmd(&peer, "poolimport"));

    struct cudaMemPoolPtrExportData data;
    SIM_OK(cudaMemPoolExportPointer(&data, d));
    char hex[129];
    peer_hex64(&data, hex);
    size_t before = peer_free();
    uintptr_t p = peer_ptr(peer_cmd(&peer, "ptrimport %d %s", pp, hex));
    /* counted once: the import charges nothing, both see the same device */
    assert_int_equal(peer_free(), before);
    assert_int_equal(peer_free(), free_bytes());

    peer_expect(peer_cmd(&peer, "check %lx %zx 3", (unsigned long)p, 8 * MIB), "ok");
    peer_expect(peer_cmd(&peer, "fill %lx %zx 4", (unsigned long)p, 2 * MIB), "ok");
    peer_check(d, 2 * MIB, 4);

    /* the peer frees its pointer: this process's allocation stays */
    size_t used = 0;
    SIM_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    peer_expect(peer_cmd(&peer, "free %lx", (unsigned long)p), "ok");
    size_t used_after = 0;
    SIM_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used_after));
    assert_int_equal(used_after, used);
    assert_int_equal(peer_free(), before);
    peer_check(d, 2 * MIB, 4);

    /* again, freed in stream order this time */
    p = peer_ptr(peer_cmd(&peer, "ptrimport %d %s", pp, hex));
    peer_expect(peer_cmd(&peer, "check %lx %zx 4", (unsigned long)p, 2 * MIB), "ok");
    peer_expect(peer_cmd(&peer, "freeasync %lx", (unsigned long)p), "ok");
    char want[32];
    snprintf(want, sizeof want, "err %d", (int)cudaErrorInvalidValue);
    peer_expect(peer_cmd(&peer, "free %lx", (unsigned long)p), want); /* gone */
    peer_check(d, 2 * MIB, 4);

    SIM_OK(cudaFreeAsync(d, 0));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaMemPoolDestroy(pool));
}

static void test_pool_refusals(void **state)
{
    (void)state;
    int fd = -1;
    cudaMemPool_t def;
    SIM_OK(cudaDeviceGetDefaultMemPool(&def, 0));
    SIM_EXPECT(cudaMemPoolExportToShareableHandle(&fd, def, cudaMemHandleTypePosixFileDescriptor, 0),
               cudaErrorInvalidValue);
    void *d = NULL;
    struct cudaMemPoolPtrExportData data;
    SIM_OK(cudaMallocAsync(&d, MIB, 0));
    SIM_EXPECT(cudaMemPoolExportPointer(&data, d), cudaErrorInvalidValue);
    SIM_OK(cudaFreeAsync(d, 0));

    cudaMemPool_t pool = shareable_pool();
    SIM_EXPECT(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 1),
               cudaErrorInvalidValue);
    SIM_OK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
    /* the exporting process itself cannot import it */
    cudaMemPool_t imported;
    SIM_EXPECT(cudaMemPoolImportFromShareableHandle(&imported, (void *)(intptr_t)fd,
                                                    cudaMemHandleTypePosixFileDescriptor, 0),
               cudaErrorInvalidValue);
    /* the peer can; its imported pool makes no allocations */
    peer_send_fd(&peer, fd);
    close(fd);
    (void)peer_index(peer_cmd(&peer, "poolimport"));
    SIM_OK(cudaDeviceSynchronize());
    SIM_OK(cudaMemPoolDestroy(pool));
    (void)cudaGetLastError();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_event_orders_the_peer),
        SIMTEST(test_event_errors),
        SIMTEST(test_pool_shared),
        SIMTEST(test_pool_refusals),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
