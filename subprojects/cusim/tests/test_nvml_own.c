/*
 * Proves the simulated NVML on devices of this process's own (no
 * CUCACHE_SIM_SHARED; two devices of 1 GiB): the process is not listed
 * before it uses a device, is listed with its pid once it has a context
 * there, with the bytes it holds, which GetMemoryInfo's used equals, and
 * only on the device it uses; NVML's contract for a short array
 * (INSUFFICIENT_SIZE and the count needed); handles by PCI bus id in the
 * forms PyTorch and nvidia-smi write, the bus id cudaDeviceProp gives
 * finding its device, NOT_FOUND for another; the device queries and the
 * NvLink answers of a GPU without links; the system versions; and the
 * error codes before nvmlInit and for NULLs.
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
