/*
 * The simulated NVML (libnvidia-ml.so.1): what a memory tool asks of the
 * simulated devices, with NVML's ABI.  The devices are the ones the
 * CUCACHE_SIM_* variables describe (config.c); with CUCACHE_SIM_SHARED
 * their memory and processes are read from the shared table
 * (engine_shared.c), without entering this process in it (a monitor is
 * not a compute process).  Without a key no other process's memory is
 * visible: a device is this process's own, and its memory and the process
 * itself are the driver's of this process (nvml_seam.h), as a GPU lists
 * the process using it.  nvml_query.c answers the device's other
 * queries; every other function of NVIDIA's NVML is a generated stub.
 *
 * The ABI is nvml.h's (this directory's, after NVIDIA's); symbols are
 * exported unversioned (libnvidia-ml.map).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "nvml.h"
#include "nvml_seam.h"
#include "shared.h"
#include "stub.h"

#define NVML_NO_MIG 0xFFFFFFFFu

static struct {
    pthread_mutex_t lock;
    unsigned refs; /* nvmlInit minus nvmlShutdown */
    sim_config_t cfg;
    sim_shared_t *shared;  /* CUCACHE_SIM_SHARED's table, or NULL */
    sim_nvml_usage_fn own; /* without a table: this process's driver, or NULL */
    nvml_device_t dev[SIM_SHARED_DEVICES];
} nvml = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* nvmlErrorString's answers: one row per code. */
static const struct {
    nvmlReturn_t code;
    const char *text;
} error_texts[] = {
    {NVML_SUCCESS, "Success"},
    {NVML_ERROR_UNINITIALIZED, "Uninitialized"},
    {NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"},
    {NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"},
    {NVML_ERROR_NOT_SUPPORTED, "Not Supported"},
    {NVML_ERROR_NOT_FOUND, "Not Found"},
    {NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size"},
    {NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"},
    {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "Argument Version Mismatch"},
    {NVML_ERROR_UNKNOWN, "Unknown Error"},
};

NVML_API const char *nvmlErrorString(nvmlReturn_t result)
{
    for (size_t i = 0; i < sizeof error_texts / sizeof error_texts[0]; i++)
        if (error_texts[i].code == result)
            return error_texts[i].text;
    return "Unknown Error";
}

int sim_stub_nvml(atomic_flag *once, const char *name)
{
    if (!atomic_flag_test_and_set(once))
        sim_log("%s is not simulated (NVML_ERROR_NOT_SUPPORTED)", name);
    return NVML_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------------
 * Initialisation
 * ---------------------------------------------------------------------- */

/* Reads the configuration and opens the shared table (lock held): the
 * first nvmlInit.  A bad setting or table is printed, and is
 * NVML_ERROR_DRIVER_NOT_LOADED (no simulated device to report on). */
static nvmlReturn_t start(void)
{
    memset(&nvml.cfg, 0, sizeof nvml.cfg);
    if (!sim_config_read(&nvml.cfg))
        return NVML_ERROR_DRIVER_NOT_LOADED;
    sim_shared_identity_t id;
    sim_config_identity(&nvml.cfg, &id);
    if (nvml.cfg.shared_key[0]) {
        nvml.shared = sim_shared_open(nvml.cfg.shared_key, &id, false);
        if (!nvml.shared)
            return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    void *cuda = nvml.shared ? NULL : dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    nvml.own = cuda ? (sim_nvml_usage_fn)dlsym(cuda, SIM_NVML_SEAM) : NULL;
    if (cuda)
        dlclose(cuda); /* NOLOAD took a reference of its own; the program keeps the library */
    for (int i = 0; i < nvml.cfg.devices; i++) {
        const uint8_t *u = id.uuid[i];
        nvml.dev[i].ordinal = i;
        snprintf(nvml.dev[i].uuid, sizeof nvml.dev[i].uuid,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
                 u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    }
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags; /* NO_GPUS, NO_ATTACH: there are always devices, nothing to attach */
    pthread_mutex_lock(&nvml.lock);
    nvmlReturn_t r = nvml.refs ? NVML_SUCCESS : start();
    if (r == NVML_SUCCESS)
        nvml.refs++;
    pthread_mutex_unlock(&nvml.lock);
    return r;
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&nvml.lock);
    nvmlReturn_t r = nvml.refs ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (nvml.refs && --nvml.refs == 0) {
        sim_shared_close(nvml.shared);
        nvml.shared = NULL;
    }
    pthread_mutex_unlock(&nvml.lock);
    return r;
}

/* NVML_SUCCESS when initialised and d is one of the devices. */
nvmlReturn_t nvml_check(nvmlDevice_t d)
{
    if (!nvml.refs)
        return NVML_ERROR_UNINITIALIZED;
    if (!d || d < nvml.dev || d >= nvml.dev + nvml.cfg.devices)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

/* nvml_check, then NVML_ERROR_INVALID_ARGUMENT when out is NULL. */
nvmlReturn_t nvml_check_out(nvmlDevice_t d, const void *out)
{
    nvmlReturn_t r = nvml_check(d);
    if (r != NVML_SUCCESS)
        return r;
    return out ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* ------------------------------------------------------------------------
 * Devices
 * ---------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (!nvml.refs)
        return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned int)nvml.cfg.devices;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!nvml.refs)
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned int)nvml.cfg.devices)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &nvml.dev[index];
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (!nvml.refs)
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < nvml.cfg.devices; i++)
        if (strcmp(uuid, nvml.dev[i].uuid) == 0) {
            *device = &nvml.dev[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

/* Copies s into buf of length bytes, or NVML_ERROR_INSUFFICIENT_SIZE. */
nvmlReturn_t nvml_copy_string(const char *s, char *buf, unsigned int length)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(s);
    if (length < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, n + 1);
    return NVML_SUCCESS;
}

/* A PCI bus id as nvmlDeviceGetHandleByPciBusId takes it: [domain:]bus:device[.function],
 * hexadecimal, any case; the domain of 4 or 8 digits. */
NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    if (!nvml.refs)
        return NVML_ERROR_UNINITIALIZED;
    if (!pciBusId || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned domain = 0, bus, slot, fn = 0;
    char end;
    if (sscanf(pciBusId, "%x:%x:%x.%x%c", &domain, &bus, &slot, &fn, &end) != 4 &&
        (domain = 0, sscanf(pciBusId, "%x:%x:%x%c", &domain, &bus, &slot, &end) != 3) &&
        (domain = 0, sscanf(pciBusId, "%x:%x.%x%c", &bus, &slot, &fn, &end) != 3))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < nvml.cfg.devices; i++)
        if (domain == 0 && bus == NVML_PCI_BUS(i) && slot == 0 && fn == 0) {
            *device = &nvml.dev[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    nvmlReturn_t r = nvml_check(device);
    return r != NVML_SUCCESS ? r : nvml_copy_string(SIM_DEVICE_NAME, name, length);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    nvmlReturn_t r = nvml_check(device);
    return r != NVML_SUCCESS ? r : nvml_copy_string(device->uuid, uuid, length);
}

/* ------------------------------------------------------------------------
 * Memory and processes
 * ---------------------------------------------------------------------- */

/* This process's bytes on a device of its own, or 0 when it does not use
 * it: false then. */
static bool own_use(nvmlDevice_t d, unsigned long long *bytes)
{
    *bytes = 0;
    return nvml.own && nvml.own(d->ordinal, bytes);
}

/* Capacity and bytes in use of a device (every process's). */
static void memory(nvmlDevice_t d, unsigned long long *total, unsigned long long *used)
{
    *total = nvml.cfg.capacity / SIM_CONFIG_PAGE * SIM_CONFIG_PAGE;
    if (nvml.shared)
        *used = sim_shared_used(nvml.shared, d->ordinal);
    else
        own_use(d, used);
    if (*used > *total)
        *used = *total;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvml_memory_t *m)
{
    nvmlReturn_t r = nvml_check_out(device, m);
    if (r != NVML_SUCCESS)
        return r;
    memory(device, &m->total, &m->used);
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvml_memory_v2_t *m)
{
    nvmlReturn_t r = nvml_check_out(device, m);
    if (r != NVML_SUCCESS)
        return r;
    if (m->version != NVML_MEMORY_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory(device, &m->total, &m->used);
    m->reserved = 0;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

/* The processes holding memory on the device, into infos (entries of
 * `size` bytes, v1 or v2 layout) as NVML's contract says: with too small
 * an array, *infoCount becomes the number needed and the answer is
 * NVML_ERROR_INSUFFICIENT_SIZE (NVML_SUCCESS when there are none). */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned int *infoCount, void *infos, size_t size)
{
    nvmlReturn_t r = nvml_check_out(device, infoCount);
    if (r != NVML_SUCCESS)
        return r;
    static sim_shared_proc_t procs[SIM_SHARED_PROCS]; /* under nvml.lock */
    static nvml_process_v2_t found[SIM_SHARED_PROCS];
    pthread_mutex_lock(&nvml.lock);
    unsigned int nfound = 0;
    unsigned long long own_bytes;
    if (nvml.shared) {
        size_t n = sim_shared_procs(nvml.shared, procs, SIM_SHARED_PROCS);
        for (size_t i = 0; i < n && i < SIM_SHARED_PROCS; i++)
            if (procs[i].bytes[device->ordinal])
                found[nfound++] = (nvml_process_v2_t){(unsigned int)procs[i].pid, procs[i].bytes[device->ordinal],
                                                      NVML_NO_MIG, NVML_NO_MIG};
    } else if (own_use(device, &own_bytes)) {
        /* listed from its first context, memory or not, as on a GPU */
        found[nfound++] = (nvml_process_v2_t){(unsigned int)getpid(), own_bytes, NVML_NO_MIG, NVML_NO_MIG};
    }
    if (nfound > *infoCount || (nfound && !infos)) {
        r = nfound > *infoCount ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_ERROR_INVALID_ARGUMENT;
        *infoCount = nfound;
        pthread_mutex_unlock(&nvml.lock);
        return r;
    }
    for (unsigned int i = 0; i < nfound; i++) {
        if (size == sizeof(nvml_process_v1_t))
            memcpy((char *)infos + i * size, &(nvml_process_v1_t){found[i].pid, found[i].usedGpuMemory}, size);
        else
            memcpy((char *)infos + i * size, &found[i], size);
    }
    *infoCount = nfound;
    pthread_mutex_unlock(&nvml.lock);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                           nvml_process_v1_t *infos)
{
    return processes(device, infoCount, infos, sizeof *infos);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvml_process_v2_t *infos)
{
    return processes(device, infoCount, infos, sizeof *infos);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvml_process_v2_t *infos)
{
    return processes(device, infoCount, infos, sizeof *infos);
}
