/*
 * The simulated NVML's device and system queries beyond memory and
 * processes (nvml.c): PCI identity, clocks, temperature, power,
 * utilisation, compute capability, modes, versions, and NvLink, which the
 * simulated device does not have (the answers of a GPU without links).
 * The figures are an idle H100's and agree with the driver's attributes
 * (driver.c): clocks, PCI ids, compute capability.
 */
#include <stdio.h>

#include "nvml.h"

/* nvmlSystemGetDriverVersion: a driver of the CUDA version the simulated
 * libcuda reports (cuDriverGetVersion 13000). */
#define NVML_DRIVER_VERSION "580.82.07"
#define NVML_CUDA_DRIVER_VERSION 13000
#define NVML_PCI_DEVICE_ID 0x233010DEu /* CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID */
#define NVML_PCI_SUBSYSTEM_ID 0x16C110DEu
#define NVML_NVLINK_MAX_LINKS 18
#define NVML_CLOCK_TYPES 4 /* nvmlClockType_t: GRAPHICS, SM, MEM, VIDEO */

/* MHz per nvmlClockType_t: current (idle boost) and maximum. */
static const struct {
    unsigned int now, max;
} clocks[NVML_CLOCK_TYPES] = {
    {1980, 1980}, /* graphics: CU_DEVICE_ATTRIBUTE_CLOCK_RATE */
    {1980, 1980}, /* SM */
    {2619, 2619}, /* memory: CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE */
    {1755, 1755}, /* video */
};

/* One answer: the device is checked, then out must not be NULL. */
static nvmlReturn_t answer_uint(nvmlDevice_t device, unsigned int *out, unsigned int value)
{
    nvmlReturn_t r = nvml_check_out(device, out);
    if (r != NVML_SUCCESS)
        return r;
    *out = value;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Identity
 * ---------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    return answer_uint(device, index, device ? (unsigned int)device->ordinal : 0);
}

NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    return answer_uint(device, minorNumber, device ? (unsigned int)device->ordinal : 0);
}

static void pci_of(int ordinal, nvml_pci_t *p)
{
    *p = (nvml_pci_t){.domain = 0,
                      .bus = NVML_PCI_BUS(ordinal),
                      .device = 0,
                      .pciDeviceId = NVML_PCI_DEVICE_ID,
                      .pciSubSystemId = NVML_PCI_SUBSYSTEM_ID};
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%04X:%02X:%02X.0", p->domain, p->bus, p->device);
    snprintf(p->busId, sizeof p->busId, "%08X:%02X:%02X.0", p->domain, p->bus, p->device);
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvml_pci_t *pci)
{
    nvmlReturn_t r = nvml_check_out(device, pci);
    if (r != NVML_SUCCESS)
        return r;
    pci_of(device->ordinal, pci);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    nvmlReturn_t r = nvml_check(device);
    if (r != NVML_SUCCESS)
        return r;
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = 9;
    *minor = 0;
    return NVML_SUCCESS;
}

/* nvmlEnableState_t ENABLED: a data-centre GPU keeps persistence mode on. */
NVML_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, unsigned int *mode)
{
    return answer_uint(device, mode, 1);
}

/* nvmlComputeMode_t DEFAULT: several contexts (and processes) at once. */
NVML_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, unsigned int *mode)
{
    return answer_uint(device, mode, 0);
}

/* ------------------------------------------------------------------------
 * Sensors: an idle device
 * ---------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvml_utilization_t *utilization)
{
    nvmlReturn_t r = nvml_check_out(device, utilization);
    if (r != NVML_SUCCESS)
        return r;
    *utilization = (nvml_utilization_t){0, 0};
    return NVML_SUCCESS;
}

/* nvmlTemperatureSensors_t: only NVML_TEMPERATURE_GPU (0). */
NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensorType, unsigned int *temp)
{
    if (sensorType != 0 && nvml_check(device) == NVML_SUCCESS)
        return NVML_ERROR_INVALID_ARGUMENT;
    return answer_uint(device, temp, 32);
}

/* milliwatts */
NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    return answer_uint(device, power, 72000);
}

static nvmlReturn_t clock_of(nvmlDevice_t device, unsigned int type, unsigned int *mhz, int max)
{
    if (type >= NVML_CLOCK_TYPES && nvml_check(device) == NVML_SUCCESS)
        return NVML_ERROR_INVALID_ARGUMENT;
    return answer_uint(device, mhz, type < NVML_CLOCK_TYPES ? (max ? clocks[type].max : clocks[type].now) : 0);
}

NVML_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock)
{
    return clock_of(device, type, clock, 0);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock)
{
    return clock_of(device, type, clock, 1);
}

/* ------------------------------------------------------------------------
 * NvLink: none.  A link number out of range is an invalid argument; any
 * other is NVML_ERROR_NOT_SUPPORTED, as on a GPU without links (callers
 * such as PyTorch's topology probe skip such a link).
 * ---------------------------------------------------------------------- */

static nvmlReturn_t no_link(nvmlDevice_t device, unsigned int link, const void *out)
{
    nvmlReturn_t r = nvml_check_out(device, out);
    if (r != NVML_SUCCESS)
        return r;
    if (link >= NVML_NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *isActive)
{
    return no_link(device, link, isActive);
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvml_pci_t *pci)
{
    return no_link(device, link, pci);
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                          unsigned int *pNvLinkDeviceType)
{
    return no_link(device, link, pNvLinkDeviceType);
}

/* ------------------------------------------------------------------------
 * System
 * ---------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (nvml_check(NULL) == NVML_ERROR_UNINITIALIZED)
        return NVML_ERROR_UNINITIALIZED;
    return nvml_copy_string(NVML_DRIVER_VERSION, version, length);
}

/* Needs no nvmlInit, as NVIDIA's. */
NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = NVML_CUDA_DRIVER_VERSION;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}
