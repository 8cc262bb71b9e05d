/*
 * Who holds a device's memory, from NVML, for the OOM report: the
 * processes on the device with their bytes and command names.
 *
 * Asked only at an out-of-memory failure, never on the allocation path.
 * libnvidia-ml.so.1 is opened at the first question (RTLD_LOCAL: its
 * symbols stay out of the program's lookups) and initialised once; it is
 * never shut down, as the process may ask again.  The CUDA device is found
 * in NVML by its UUID (cuDeviceGetUuid's 16 bytes written in NVML's
 * "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"), never by its index:
 * CUDA_VISIBLE_DEVICES renumbers CUDA's devices, not NVML's.
 *
 * The process list comes from nvmlDeviceGetComputeRunningProcesses_v3,
 * else _v2 (both nvmlProcessInfo_t), else the unversioned call
 * (nvmlProcessInfo_v1_t), with the array grown while NVML answers
 * NVML_ERROR_INSUFFICIENT_SIZE.  The layouts and codes are nvml.h's; the
 * declarations here are this file's own.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hook.h"
#include "hostalloc.h"
#include "registry.h"
#include "st.h"

enum {
    NVML_OK = 0,
    NVML_INSUFFICIENT_SIZE = 7,
    NVML_FIRST_ROWS = 32, /* the first array asked for */
    NVML_TRIES = 4,       /* growths before giving up on a list that keeps growing */
};

typedef void *nvml_dev_t;

/* nvmlProcessInfo_v1_t and nvmlProcessInfo_t (v2) */
typedef struct nvml_proc_v1_s {
    unsigned pid;
    unsigned long long used;
} nvml_proc_v1_t;
typedef struct nvml_proc_v2_s {
    unsigned pid;
    unsigned long long used;
    unsigned gpu_instance, compute_instance;
} nvml_proc_v2_t;

typedef int (*nvml_init_fn)(void);
typedef const char *(*nvml_error_fn)(int);
typedef int (*nvml_by_uuid_fn)(const char *uuid, nvml_dev_t *dev);
typedef int (*nvml_procs_fn)(nvml_dev_t dev, unsigned *count, void *infos);

static struct {
    pthread_once_t once;
    char why[160]; /* "": ready */
    nvml_error_fn error;
    nvml_by_uuid_fn by_uuid;
    nvml_procs_fn procs;
    size_t row; /* bytes of one entry of procs' array */
} nvml = {.once = PTHREAD_ONCE_INIT};

static const char *nvml_text(int rc)
{
    const char *t = nvml.error ? nvml.error(rc) : NULL;
    return t ? t : "unknown error";
}

static void *sym(void *lib, const char *name)
{
    hook_real_dlsym_init();
    return hook_real_dlsym(lib, name);
}

/* The process-list calls, best first: one row per version. */
static const struct {
    const char *name;
    size_t row;
} procs_calls[] = {
    {"nvmlDeviceGetComputeRunningProcesses_v3", sizeof(nvml_proc_v2_t)},
    {"nvmlDeviceGetComputeRunningProcesses_v2", sizeof(nvml_proc_v2_t)},
    {"nvmlDeviceGetComputeRunningProcesses", sizeof(nvml_proc_v1_t)},
};

static void nvml_load(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_LOCAL | RTLD_NOW);
    if (!lib) {
        snprintf(nvml.why, sizeof nvml.why, "NVML: libnvidia-ml.so.1 cannot be loaded");
        return;
    }
    nvml_init_fn init = (nvml_init_fn)sym(lib, "nvmlInit_v2");
    if (!init)
        init = (nvml_init_fn)sym(lib, "nvmlInit");
    nvml.error = (nvml_error_fn)sym(lib, "nvmlErrorString");
    nvml.by_uuid = (nvml_by_uuid_fn)sym(lib, "nvmlDeviceGetHandleByUUID");
    for (size_t i = 0; i < sizeof procs_calls / sizeof procs_calls[0] && !nvml.procs; i++) {
        nvml.procs = (nvml_procs_fn)sym(lib, procs_calls[i].name);
        nvml.row = procs_calls[i].row;
    }
    if (!init || !nvml.by_uuid || !nvml.procs) {
        snprintf(nvml.why, sizeof nvml.why, "NVML: libnvidia-ml.so.1 lacks %s",
                 !init           ? "nvmlInit_v2"
                 : !nvml.by_uuid ? "nvmlDeviceGetHandleByUUID"
                                 : "nvmlDeviceGetComputeRunningProcesses");
        return;
    }
    int rc = init();
    if (rc != NVML_OK)
        snprintf(nvml.why, sizeof nvml.why, "NVML: nvmlInit_v2 failed: %s", nvml_text(rc));
}

/* The command of pid: /proc/PID/comm, else cmdline's first word, else "?". */
static void proc_comm(unsigned pid, char *out, size_t len)
{
    static const char *const sources[] = {"comm", "cmdline"};
    for (size_t s = 0; s < sizeof sources / sizeof sources[0]; s++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%u/%s", pid, sources[s]);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, out, len - 1);
        close(fd);
        if (n <= 0)
            continue;
        out[n] = '\0';
        out[strcspn(out, "\n ")] = '\0'; /* comm's newline; cmdline's words are NUL-separated */
        if (out[0])
            return;
    }
    snprintf(out, len, "?");
}

bool hook_device_uuid(const hook_dev_t *hd, char out[48])
{
    CUuuid u;
    if (!hook_real_driver() || !real_cu.cuDeviceGetUuid_v2 ||
        real_cu.cuDeviceGetUuid_v2(&u, hd->handle) != CUDA_SUCCESS)
        return false;
    st_reg_uuid_string((const uint8_t *)u.bytes, out);
    return true;
}

/* NVML's rows into out (n of them): pid and bytes. */
static void copy_rows(const void *rows, unsigned n, st_gpu_proc_t *out)
{
    for (unsigned i = 0; i < n; i++) {
        const char *r = (const char *)rows + (size_t)i * nvml.row;
        unsigned pid;
        unsigned long long used;
        memcpy(&pid, r + offsetof(nvml_proc_v1_t, pid), sizeof pid);
        memcpy(&used, r + offsetof(nvml_proc_v1_t, used), sizeof used); /* the same offsets in v2 */
        out[i] = (st_gpu_proc_t){.pid = pid, .bytes = used == ~0ull ? 0 : used};
        proc_comm(pid, out[i].comm, sizeof out[i].comm);
    }
}

void hook_nvml_procs(const hook_dev_t *hd, st_gpu_procs_t *out, char *why, size_t whylen)
{
    *out = (st_gpu_procs_t){.unavailable = why, .self_pid = (unsigned)getpid()};
    pthread_once(&nvml.once, nvml_load);
    if (nvml.why[0]) {
        snprintf(why, whylen, "%s", nvml.why);
        return;
    }
    char uuid[48];
    nvml_dev_t dev;
    int rc;
    if (!hook_device_uuid(hd, uuid)) {
        snprintf(why, whylen, "cuDeviceGetUuid failed for GPU %d", hd->ordinal);
        return;
    }
    if ((rc = nvml.by_uuid(uuid, &dev)) != NVML_OK) {
        snprintf(why, whylen, "NVML: nvmlDeviceGetHandleByUUID(%s) failed: %s", uuid, nvml_text(rc));
        return;
    }
    unsigned cap = NVML_FIRST_ROWS, n = 0;
    void *rows = NULL;
    for (int t = 0; t < NVML_TRIES; t++) {
        hostalloc_free(rows);
        if (!(rows = hostalloc_malloc((size_t)cap * nvml.row))) {
            snprintf(why, whylen, "no host memory for NVML's process list");
            return;
        }
        n = cap;
        rc = nvml.procs(dev, &n, rows);
        if (rc != NVML_INSUFFICIENT_SIZE)
            break;
        cap = n + NVML_FIRST_ROWS; /* room for processes that start meanwhile */
    }
    st_gpu_proc_t *procs = rc == NVML_OK && n ? hostalloc_malloc(n * sizeof *procs) : NULL;
    if (rc != NVML_OK)
        snprintf(why, whylen, "NVML: the process list failed: %s", nvml_text(rc));
    else if (n && !procs)
        snprintf(why, whylen, "no host memory for the process list");
    if (rc != NVML_OK || (n && !procs)) {
        hostalloc_free(rows);
        return;
    }
    copy_rows(rows, n, procs);
    hostalloc_free(rows);
    *out = (st_gpu_procs_t){.self_pid = (unsigned)getpid(), .procs = procs, .n = n};
}
