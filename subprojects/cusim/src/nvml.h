/*
 * The simulated NVML's ABI (libnvidia-ml.so.1; nvml.c): the return codes,
 * structs and entry points a memory tool uses, with the names, layouts and
 * values of NVIDIA's nvml.h (docs/simulator.md says which), declared here
 * in this project's own words.  Struct tags are ours; the layouts are
 * checked by size below and, from Python, by tests/nvml_ctypes.py.
 */
#ifndef CUCACHE_SIM_NVML_H
#define CUCACHE_SIM_NVML_H

#define NVML_API __attribute__((visibility("default")))

typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

/* nvmlMemory_t */
typedef struct nvml_memory_s {
    unsigned long long total, free, used;
} nvml_memory_t;

/* nvmlMemory_v2_t: version is sizeof | 2 << 24 (NVML_STRUCT_VERSION) */
typedef struct nvml_memory_v2_s {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvml_memory_v2_t;
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvml_memory_v2_t) | 2u << 24))

/* nvmlProcessInfo_v1_t (the unversioned call) */
typedef struct nvml_process_v1_s {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvml_process_v1_t;

/* nvmlProcessInfo_v2_t, which is nvmlProcessInfo_t (_v2 and _v3 calls) */
typedef struct nvml_process_v2_s {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;     /* 0xFFFFFFFF: no MIG */
    unsigned int computeInstanceId; /* 0xFFFFFFFF: no MIG */
} nvml_process_v2_t;

/* nvmlPciInfo_t (nvmlDeviceGetPciInfo_v3, nvmlDeviceGetNvLinkRemotePciInfo_v2) */
typedef struct nvml_pci_s {
    char busIdLegacy[16]; /* "%04X:%02X:%02X.0" */
    unsigned int domain, bus, device;
    unsigned int pciDeviceId;    /* device id << 16 | vendor id */
    unsigned int pciSubSystemId; /* subsystem id << 16 | vendor id */
    char busId[32];              /* "%08X:%02X:%02X.0" */
} nvml_pci_t;

/* nvmlUtilization_t: percent of the last sample period */
typedef struct nvml_utilization_s {
    unsigned int gpu, memory;
} nvml_utilization_t;

_Static_assert(sizeof(nvml_pci_t) == 68, "nvmlPciInfo_t");
_Static_assert(sizeof(nvml_utilization_t) == 8, "nvmlUtilization_t");
_Static_assert(sizeof(nvml_memory_t) == 24, "nvmlMemory_t");
_Static_assert(sizeof(nvml_memory_v2_t) == 40, "nvmlMemory_v2_t");
_Static_assert(sizeof(nvml_process_v1_t) == 16, "nvmlProcessInfo_v1_t");
_Static_assert(sizeof(nvml_process_v2_t) == 24, "nvmlProcessInfo_v2_t");

#define NVML_UUID_LEN 41 /* "GPU-" and 8-4-4-4-12 hex digits, with the NUL */

typedef struct nvml_device_s {
    int ordinal;
    char uuid[NVML_UUID_LEN];
} nvml_device_t;

typedef nvml_device_t *nvmlDevice_t;

/* The PCI bus of device i: the driver's CU_DEVICE_ATTRIBUTE_PCI_BUS_ID
 * (driver.c), domain 0, device 0, so that a bus id from
 * cudaDeviceProp finds its device. */
#define NVML_PCI_BUS(i) (0x18u + (unsigned)(i))

/* Between nvml.c and nvml_query.c: NVML_SUCCESS when initialised and d is
 * one of the devices (nvml_check_out: and out is not NULL); a string
 * copied into a caller's buffer. */
nvmlReturn_t nvml_check(nvmlDevice_t d);
nvmlReturn_t nvml_check_out(nvmlDevice_t d, const void *out);
nvmlReturn_t nvml_copy_string(const char *s, char *buf, unsigned int length);

NVML_API const char *nvmlErrorString(nvmlReturn_t result);
NVML_API nvmlReturn_t nvmlInit(void);
NVML_API nvmlReturn_t nvmlInit_v2(void);
NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
NVML_API nvmlReturn_t nvmlShutdown(void);
NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);
NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device);
NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device);
NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device);
NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvml_memory_t *memory);
NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvml_memory_v2_t *memory);
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                           nvml_process_v1_t *infos);
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvml_process_v2_t *infos);
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvml_process_v2_t *infos);

/* nvml_query.c */
NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index);
NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber);
NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvml_pci_t *pci);
NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor);
NVML_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, unsigned int *mode);
NVML_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, unsigned int *mode);
NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvml_utilization_t *utilization);
NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensorType, unsigned int *temp);
NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power);
NVML_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock);
NVML_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock);
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *isActive);
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvml_pci_t *pci);
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                          unsigned int *pNvLinkDeviceType);
NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion);
NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion);

#endif
