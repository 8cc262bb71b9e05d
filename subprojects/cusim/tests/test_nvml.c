/*
 * Proves the simulated NVML (libnvidia-ml.so.1) on a shared device
 * (CUCACHE_SIM_SHARED, two devices of 1 GiB): nothing answers before
 * nvmlInit and after the last nvmlShutdown; the count, names and UUIDs
 * (the UUID is cuDeviceGetUuid's bytes in NVML's "GPU-" form, and finds
 * its device back); memory info, both layouts, counts another process's
 * memory (tests/ipc_peer) and refuses a wrong struct version; the
 * running processes, in the v1 and v2 layouts, list the peer with its
 * bytes on the device it used only, follow NVML's contract for a short
 * array, and drop the peer once it is killed.  tests/nvml_ctypes.py
 * asks the same from Python with NVIDIA's layouts.
 */
#include "peer.h"
#include "simtest.h"

#include "../src/nvml.h"
#include "../src/shared.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((unsigned long long)1 << 20)
#define CAP ((unsigned long long)1 << 30)

static char key[64];

static int group_setup(void **state)
{
    (void)state;
    snprintf(key, sizeof key, "simtest-nvml-%d", (int)getpid());
    setenv("CUCACHE_SIM_SHARED", key, 1);
    return nvmlInit_v2() == NVML_SUCCESS ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    nvmlShutdown();
    char path[256];
    snprintf(path, sizeof path, SIM_SHARED_DIR "/" SIM_SHARED_PREFIX "%u-%s", (unsigned)geteuid(), key);
    unlink(path);
    return 0;
}

static nvmlDevice_t device(unsigned i)
{
    nvmlDevice_t d = NULL;
    assert_int_equal(nvmlDeviceGetHandleByIndex_v2(i, &d), NVML_SUCCESS);
    return d;
}

static void test_init_counts(void **state)
{
    (void)state;
    unsigned n = 0;
    assert_int_equal(nvmlInitWithFlags(0), NVML_SUCCESS); /* a second reference */
    assert_int_equal(nvmlShutdown(), NVML_SUCCESS);
    assert_int_equal(nvmlDeviceGetCount_v2(&n), NVML_SUCCESS); /* the group's reference holds */
    assert_int_equal(n, 2);
    assert_int_equal(nvmlShutdown(), NVML_SUCCESS);
    assert_int_equal(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
    assert_string_equal(nvmlErrorString(NVML_ERROR_UNINITIALIZED), "Uninitialized");
    assert_int_equal(nvmlInit(), NVML_SUCCESS);
    assert_int_equal(nvmlDeviceGetCount(&n), NVML_SUCCESS);
    assert_int_equal(n, 2);
}

static void test_names_and_uuids(void **state)
{
    (void)state;
    char name[96], uuid[96], want[64];
    assert_int_equal(nvmlDeviceGetName(device(0), name, sizeof name), NVML_SUCCESS);
    char cuda_name[96];
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGetName(cuda_name, sizeof cuda_name, 0));
    assert_string_equal(name, cuda_name);
    assert_int_equal(nvmlDeviceGetName(device(0), name, 4), NVML_ERROR_INSUFFICIENT_SIZE);
    for (unsigned i = 0; i < 2; i++) {
        CUuuid u;
        CU_OK(cuDeviceGetUuid_v2(&u, (CUdevice)i));
        const unsigned char *b = (const unsigned char *)u.bytes;
        snprintf(want, sizeof want, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
        assert_int_equal(nvmlDeviceGetUUID(device(i), uuid, sizeof uuid), NVML_SUCCESS);
        assert_string_equal(uuid, want);
        nvmlDevice_t d = NULL;
        assert_int_equal(nvmlDeviceGetHandleByUUID(uuid, &d), NVML_SUCCESS);
        assert_ptr_equal(d, device(i));
    }
    assert_int_equal(nvmlDeviceGetUUID(device(0), uuid, 10), NVML_ERROR_INSUFFICIENT_SIZE);
    nvmlDevice_t d = NULL;
    assert_int_equal(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &d), NVML_ERROR_NOT_FOUND);
    assert_int_equal(nvmlDeviceGetHandleByIndex_v2(2, &d), NVML_ERROR_INVALID_ARGUMENT);
}

static unsigned long long nvml_used(unsigned i)
{
    nvml_memory_t m;
    assert_int_equal(nvmlDeviceGetMemoryInfo(device(i), &m), NVML_SUCCESS);
    assert_int_equal(m.total, CAP);
    assert_int_equal(m.free + m.used, CAP);
    nvml_memory_v2_t m2 = {.version = NVML_MEMORY_V2};
    assert_int_equal(nvmlDeviceGetMemoryInfo_v2(device(i), &m2), NVML_SUCCESS);
    assert_int_equal(m2.used, m.used);
    assert_int_equal(m2.reserved, 0);
    return m.used;
}

/* The peer allocates on device 0 (its current device); device 1 stays
 * empty. */
static void test_memory_and_processes(void **state)
{
    (void)state;
    peer_t peer;
    peer_start(&peer);
    unsigned long long before = nvml_used(0);
    uintptr_t q = peer_ptr(peer_cmd(&peer, "alloc %llx", 256 * MIB));
    assert_int_equal(nvml_used(0), before + 256 * MIB);
    assert_int_equal(nvml_used(1), 0);
    nvml_memory_v2_t bad = {.version = 1u << 24 | 40};
    assert_int_equal(nvmlDeviceGetMemoryInfo_v2(device(0), &bad), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

    unsigned n = 0;
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses_v3(device(0), &n, NULL), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(n, 1);
    nvml_process_v2_t p3[4];
    memset(p3, 0xee, sizeof p3);
    n = 0; /* an array too short: nothing written, the count needed */
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses_v3(device(0), &n, p3), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(n, 1);
    assert_int_equal(p3[0].pid, 0xeeeeeeeeu);
    n = 4;
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses_v3(device(0), &n, p3), NVML_SUCCESS);
    assert_int_equal(n, 1);
    assert_int_equal(p3[0].pid, peer.pid);
    assert_int_equal(p3[0].usedGpuMemory, 256 * MIB);
    assert_int_equal(p3[0].gpuInstanceId, 0xFFFFFFFFu);
    assert_int_equal(p3[0].computeInstanceId, 0xFFFFFFFFu);
    n = 4;
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses_v2(device(0), &n, p3), NVML_SUCCESS);
    assert_int_equal(n, 1);
    assert_int_equal(p3[0].pid, peer.pid);
    nvml_process_v1_t p1[2];
    memset(p1, 0xee, sizeof p1);
    n = 2;
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses(device(0), &n, p1), NVML_SUCCESS);
    assert_int_equal(n, 1);
    assert_int_equal(p1[0].pid, peer.pid);
    assert_int_equal(p1[0].usedGpuMemory, 256 * MIB);
    assert_int_equal(p1[1].pid, 0xeeeeeeeeu); /* the v1 layout: nothing written past one entry */
    n = 4;
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses_v3(device(1), &n, p3), NVML_SUCCESS);
    assert_int_equal(n, 0); /* it holds nothing on device 1 */

    peer_expect(peer_cmd(&peer, "free %lx", (unsigned long)q), "ok");
    n = 0;
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses_v3(device(0), &n, NULL), NVML_SUCCESS);
    assert_int_equal(n, 0);
    peer_ptr(peer_cmd(&peer, "alloc %llx", 128 * MIB));
    assert_int_equal(nvml_used(0), before + 128 * MIB);
    assert_int_equal(kill(peer.pid, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(peer.pid, &status, 0), peer.pid);
    fclose(peer.to);
    fclose(peer.from);
    assert_int_equal(nvml_used(0), before);
    n = 0;
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses_v3(device(0), &n, NULL), NVML_SUCCESS);
    assert_int_equal(n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_counts),
        cmocka_unit_test(test_names_and_uuids),
        cmocka_unit_test(test_memory_and_processes),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
