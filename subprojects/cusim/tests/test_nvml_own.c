/*
 * Proves the simulated NVML on devices of this process's own (no
 * CUCACHE_SIM_SHARED; two devices of 1 GiB): the process is not listed
 * before it uses a device, is listed with its pid once it has a context
 * there, with the bytes it holds, which GetMemoryInfo's used equals, and
 * only on the device it uses; NVML's contract for a short array
 * (INSUFFICIENT_SIZE and the count needed); handles by PCI bus id in the
 * forms PyTorch and nvidia-smi write, the bus id cudaDeviceProp gives
 * finding its device, NOT_FOUND for another; the device queries and the
 * NvLink answers of a GPU without links; the system versions; the
 * error codes before nvmlInit and for NULLs; and every device getter's
 * UNINITIALIZED before nvmlInit and after nvmlShutdown, and its
 * INVALID_ARGUMENT for a handle that is not one of the devices.
 */
#include "simtest.h"

#include "../src/nvml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB ((unsigned long long)1 << 20)

static nvmlDevice_t dev(unsigned int i)
{
    nvmlDevice_t d = NULL;
    assert_int_equal(nvmlDeviceGetHandleByIndex_v2(i, &d), NVML_SUCCESS);
    return d;
}

/* ------------------------------------------------------------------------
 * Every device getter checks NVML is initialised and that its handle is
 * one of the devices before it answers.  Each row calls one getter with
 * good output arguments; the answer a device gives is in want.
 * ---------------------------------------------------------------------- */

static nvmlReturn_t memory_info(nvmlDevice_t d)
{
    nvml_memory_t m;
    return nvmlDeviceGetMemoryInfo(d, &m);
}

static nvmlReturn_t memory_info_v2(nvmlDevice_t d)
{
    nvml_memory_v2_t m = {.version = NVML_MEMORY_V2};
    return nvmlDeviceGetMemoryInfo_v2(d, &m);
}

static nvmlReturn_t processes_v1(nvmlDevice_t d)
{
    nvml_process_v1_t p[4];
    unsigned int n = 4;
    return nvmlDeviceGetComputeRunningProcesses(d, &n, p);
}

static nvmlReturn_t processes_v2(nvmlDevice_t d)
{
    nvml_process_v2_t p[4];
    unsigned int n = 4;
    return nvmlDeviceGetComputeRunningProcesses_v2(d, &n, p);
}

static nvmlReturn_t processes_v3(nvmlDevice_t d)
{
    nvml_process_v2_t p[4];
    unsigned int n = 4;
    return nvmlDeviceGetComputeRunningProcesses_v3(d, &n, p);
}

static nvmlReturn_t pci_info(nvmlDevice_t d)
{
    nvml_pci_t pci;
    return nvmlDeviceGetPciInfo_v3(d, &pci);
}

static nvmlReturn_t utilization(nvmlDevice_t d)
{
    nvml_utilization_t u;
    return nvmlDeviceGetUtilizationRates(d, &u);
}

static nvmlReturn_t name(nvmlDevice_t d)
{
    char s[96];
    return nvmlDeviceGetName(d, s, sizeof s);
}

static nvmlReturn_t uuid(nvmlDevice_t d)
{
    char s[96];
    return nvmlDeviceGetUUID(d, s, sizeof s);
}

static nvmlReturn_t compute_capability(nvmlDevice_t d)
{
    int major, minor;
    return nvmlDeviceGetCudaComputeCapability(d, &major, &minor);
}

static nvmlReturn_t link_pci(nvmlDevice_t d)
{
    nvml_pci_t pci;
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(d, 0, &pci);
}

static unsigned int uint_out;
static nvmlReturn_t index_of(nvmlDevice_t d)
{
    return nvmlDeviceGetIndex(d, &uint_out);
}

static nvmlReturn_t minor_number(nvmlDevice_t d)
{
    return nvmlDeviceGetMinorNumber(d, &uint_out);
}

static nvmlReturn_t persistence(nvmlDevice_t d)
{
    return nvmlDeviceGetPersistenceMode(d, &uint_out);
}

static nvmlReturn_t compute_mode(nvmlDevice_t d)
{
    return nvmlDeviceGetComputeMode(d, &uint_out);
}

static nvmlReturn_t temperature(nvmlDevice_t d)
{
    return nvmlDeviceGetTemperature(d, 0, &uint_out);
}

static nvmlReturn_t power(nvmlDevice_t d)
{
    return nvmlDeviceGetPowerUsage(d, &uint_out);
}

static nvmlReturn_t clock_now(nvmlDevice_t d)
{
    return nvmlDeviceGetClockInfo(d, 0, &uint_out);
}

static nvmlReturn_t clock_max(nvmlDevice_t d)
{
    return nvmlDeviceGetMaxClockInfo(d, 2, &uint_out);
}

static nvmlReturn_t link_state(nvmlDevice_t d)
{
    return nvmlDeviceGetNvLinkState(d, 0, &uint_out);
}

static nvmlReturn_t link_type(nvmlDevice_t d)
{
    return nvmlDeviceGetNvLinkRemoteDeviceType(d, 0, &uint_out);
}

static const struct {
    const char *name;
    nvmlReturn_t (*call)(nvmlDevice_t d);
    nvmlReturn_t want; /* on a device */
} getters[] = {
    {"nvmlDeviceGetMemoryInfo", memory_info, NVML_SUCCESS},
    {"nvmlDeviceGetMemoryInfo_v2", memory_info_v2, NVML_SUCCESS},
    {"nvmlDeviceGetComputeRunningProcesses", processes_v1, NVML_SUCCESS},
    {"nvmlDeviceGetComputeRunningProcesses_v2", processes_v2, NVML_SUCCESS},
    {"nvmlDeviceGetComputeRunningProcesses_v3", processes_v3, NVML_SUCCESS},
    {"nvmlDeviceGetIndex", index_of, NVML_SUCCESS},
    {"nvmlDeviceGetMinorNumber", minor_number, NVML_SUCCESS},
    {"nvmlDeviceGetPciInfo_v3", pci_info, NVML_SUCCESS},
    {"nvmlDeviceGetPersistenceMode", persistence, NVML_SUCCESS},
    {"nvmlDeviceGetComputeMode", compute_mode, NVML_SUCCESS},
    {"nvmlDeviceGetUtilizationRates", utilization, NVML_SUCCESS},
    {"nvmlDeviceGetTemperature", temperature, NVML_SUCCESS},
    {"nvmlDeviceGetPowerUsage", power, NVML_SUCCESS},
    {"nvmlDeviceGetClockInfo", clock_now, NVML_SUCCESS},
    {"nvmlDeviceGetMaxClockInfo", clock_max, NVML_SUCCESS},
    {"nvmlDeviceGetNvLinkState", link_state, NVML_ERROR_NOT_SUPPORTED},
    {"nvmlDeviceGetNvLinkRemotePciInfo_v2", link_pci, NVML_ERROR_NOT_SUPPORTED},
    {"nvmlDeviceGetNvLinkRemoteDeviceType", link_type, NVML_ERROR_NOT_SUPPORTED},
    {"nvmlDeviceGetName", name, NVML_SUCCESS},
    {"nvmlDeviceGetUUID", uuid, NVML_SUCCESS},
    {"nvmlDeviceGetCudaComputeCapability", compute_capability, NVML_SUCCESS},
};

/* Every getter answers want with handle d. */
static void getters_answer(nvmlDevice_t d, nvmlReturn_t want, const char *handle)
{
    for (size_t i = 0; i < sizeof getters / sizeof getters[0]; i++) {
        nvmlReturn_t want_i = want == NVML_SUCCESS ? getters[i].want : want;
        nvmlReturn_t got = getters[i].call(d);
        if (got != want_i)
            fail_msg("%s with %s: %d (%s), expected %d (%s)", getters[i].name, handle, got, nvmlErrorString(got),
                     want_i, nvmlErrorString(want_i));
    }
}

/* Not a device: a device's shape elsewhere in memory (ordinal 0, so a
 * getter that skipped the check would answer rather than crash). */
static nvml_device_t not_a_device;

static void test_getters_check_init_and_handle(void **state)
{
    (void)state;
    getters_answer(&not_a_device, NVML_ERROR_UNINITIALIZED, "a non-device, before nvmlInit");
    getters_answer(NULL, NVML_ERROR_UNINITIALIZED, "NULL, before nvmlInit");
    assert_int_equal(nvmlInit_v2(), NVML_SUCCESS);
    unsigned int n;
    assert_int_equal(nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
    getters_answer(dev(0), NVML_SUCCESS, "device 0");
    getters_answer(dev(n - 1), NVML_SUCCESS, "the last device");
    getters_answer(&not_a_device, NVML_ERROR_INVALID_ARGUMENT, "a non-device");
    getters_answer(dev(n - 1) + 1, NVML_ERROR_INVALID_ARGUMENT, "one past the last device");
    getters_answer(NULL, NVML_ERROR_INVALID_ARGUMENT, "NULL");
    nvmlDevice_t d0 = dev(0);
    assert_int_equal(nvmlShutdown(), NVML_SUCCESS);
    getters_answer(d0, NVML_ERROR_UNINITIALIZED, "device 0, after nvmlShutdown");
}

static void test_uninitialised(void **state)
{
    (void)state;
    unsigned int n;
    nvmlDevice_t d;
    assert_int_equal(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(nvmlDeviceGetHandleByPciBusId_v2("00000000:18:00.0", &d), NVML_ERROR_UNINITIALIZED);
    char v[80];
    assert_int_equal(nvmlSystemGetDriverVersion(v, sizeof v), NVML_ERROR_UNINITIALIZED);
}

static void test_own_process(void **state)
{
    (void)state;
    assert_int_equal(nvmlInit_v2(), NVML_SUCCESS);
    nvml_process_v2_t p[4];
    unsigned int n = 4;
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses_v3(dev(1), &n, p), NVML_SUCCESS);
    assert_int_equal(n, 0); /* no context yet */

    void *ptr;
    assert_int_equal(cudaSetDevice(1), cudaSuccess);
    assert_int_equal(cudaMalloc(&ptr, 64 * MIB), cudaSuccess);
    n = 4;
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses_v3(dev(1), &n, p), NVML_SUCCESS);
    assert_int_equal(n, 1);
    assert_int_equal(p[0].pid, (unsigned int)getpid());
    assert_int_equal(p[0].usedGpuMemory, 64 * MIB);
    nvml_memory_t m;
    assert_int_equal(nvmlDeviceGetMemoryInfo(dev(1), &m), NVML_SUCCESS);
    assert_int_equal(m.used, p[0].usedGpuMemory);
    assert_int_equal(m.free, m.total - m.used);
    size_t fr, tot;
    assert_int_equal(cudaMemGetInfo(&fr, &tot), cudaSuccess);
    assert_int_equal(m.free, fr);

    nvml_process_v1_t v1[1];
    n = 0; /* too short: the count needed */
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses(dev(1), &n, v1), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(n, 1);
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses(dev(1), &n, v1), NVML_SUCCESS);
    assert_int_equal(v1[0].usedGpuMemory, 64 * MIB);
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses(dev(1), NULL, v1), NVML_ERROR_INVALID_ARGUMENT);

    n = 4; /* the other device is not used */
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses_v3(dev(0), &n, p), NVML_SUCCESS);
    assert_int_equal(n, 0);
    assert_int_equal(cudaFree(ptr), cudaSuccess);
    n = 4; /* a context without memory is still listed */
    assert_int_equal(nvmlDeviceGetComputeRunningProcesses_v3(dev(1), &n, p), NVML_SUCCESS);
    assert_int_equal(n, 1);
    assert_int_equal(p[0].usedGpuMemory, 0);
    assert_int_equal(nvmlShutdown(), NVML_SUCCESS);
}

static void test_pci(void **state)
{
    (void)state;
    assert_int_equal(nvmlInit_v2(), NVML_SUCCESS);
    struct cudaDeviceProp prop;
    assert_int_equal(cudaGetDeviceProperties(&prop, 1), cudaSuccess);
    char id[32];
    snprintf(id, sizeof id, "%08X:%02X:%02X.0", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    nvmlDevice_t d = NULL;
    assert_int_equal(nvmlDeviceGetHandleByPciBusId_v2(id, &d), NVML_SUCCESS);
    assert_ptr_equal(d, dev(1));
    nvml_pci_t pci;
    assert_int_equal(nvmlDeviceGetPciInfo_v3(dev(1), &pci), NVML_SUCCESS);
    assert_string_equal(pci.busId, id);
    assert_int_equal(nvmlDeviceGetHandleByPciBusId_v2(pci.busIdLegacy, &d), NVML_SUCCESS);
    assert_ptr_equal(d, dev(1));
    assert_int_equal(nvmlDeviceGetHandleByPciBusId_v2("0000:18:00.0", &d), NVML_SUCCESS);
    assert_ptr_equal(d, dev(0));
    assert_int_equal(nvmlDeviceGetHandleByPciBusId_v2("00000000:7F:00.0", &d), NVML_ERROR_NOT_FOUND);
    assert_int_equal(nvmlDeviceGetHandleByPciBusId_v2("not a bus id", &d), NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(nvmlDeviceGetHandleByPciBusId_v2(NULL, &d), NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &d), NVML_ERROR_NOT_FOUND);
    unsigned int idx;
    assert_int_equal(nvmlDeviceGetIndex(dev(1), &idx), NVML_SUCCESS);
    assert_int_equal(idx, 1);
    assert_int_equal(nvmlShutdown(), NVML_SUCCESS);
}

static void test_queries(void **state)
{
    (void)state;
    assert_int_equal(nvmlInit_v2(), NVML_SUCCESS);
    int major, minor;
    assert_int_equal(nvmlDeviceGetCudaComputeCapability(dev(0), &major, &minor), NVML_SUCCESS);
    assert_int_equal(major * 10 + minor, 90);
    unsigned int v;
    assert_int_equal(nvmlDeviceGetClockInfo(dev(0), 0, &v), NVML_SUCCESS);
    int khz;
    assert_int_equal(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0), cudaSuccess);
    assert_int_equal(v, (unsigned int)khz / 1000);
    assert_int_equal(nvmlDeviceGetClockInfo(dev(0), 99, &v), NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(nvmlDeviceGetTemperature(dev(0), 0, &v), NVML_SUCCESS);
    assert_int_equal(nvmlDeviceGetPowerUsage(dev(0), &v), NVML_SUCCESS);
    assert_int_equal(nvmlDeviceGetPowerUsage(dev(0), NULL), NVML_ERROR_INVALID_ARGUMENT);
    nvml_utilization_t u;
    assert_int_equal(nvmlDeviceGetUtilizationRates(dev(0), &u), NVML_SUCCESS);
    assert_int_equal(nvmlDeviceGetComputeMode(dev(0), &v), NVML_SUCCESS);
    assert_int_equal(v, 0);
    /* no NvLink: NOT_SUPPORTED for a link, INVALID_ARGUMENT past the last */
    assert_int_equal(nvmlDeviceGetNvLinkState(dev(0), 0, &v), NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(nvmlDeviceGetNvLinkRemoteDeviceType(dev(0), 0, &v), NVML_ERROR_NOT_SUPPORTED);
    nvml_pci_t pci;
    assert_int_equal(nvmlDeviceGetNvLinkRemotePciInfo_v2(dev(0), 0, &pci), NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(nvmlDeviceGetNvLinkState(dev(0), 18, &v), NVML_ERROR_INVALID_ARGUMENT);
    char ver[80];
    assert_int_equal(nvmlSystemGetDriverVersion(ver, 4), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(nvmlSystemGetDriverVersion(ver, sizeof ver), NVML_SUCCESS);
    int cuda, drv;
    assert_int_equal(nvmlSystemGetCudaDriverVersion_v2(&cuda), NVML_SUCCESS);
    assert_int_equal(cuDriverGetVersion(&drv), CUDA_SUCCESS);
    assert_int_equal(cuda, drv);
    assert_string_equal(nvmlErrorString(NVML_ERROR_NOT_FOUND), "Not Found");
    assert_int_equal(nvmlShutdown(), NVML_SUCCESS);
}

int main(void)
{
    unsetenv("CUCACHE_SIM_SHARED");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uninitialised),
        cmocka_unit_test(test_own_process),
        cmocka_unit_test(test_pci),
        cmocka_unit_test(test_queries),
        cmocka_unit_test(test_getters_check_init_and_handle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
