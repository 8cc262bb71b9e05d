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
 * The process list comes from stats/nvml_abi.c (the newest call the
 * library has, its array grown while NVML answers
 * NVML_ERROR_INSUFFICIENT_SIZE), with nvml_abi.h's declarations of NVML.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hook.h"
#include "hostalloc.h"
#include "nvml_abi.h"
#include "nvml_procs.h"
#include "real.h"
#include "registry.h"
#include "st.h"

enum {
    NVML_FIRST_ROWS = 32, /* the first array asked for */
    NVML_TRIES = 4,       /* growths before giving up on a list that keeps growing */
};

static struct {
    pthread_once_t once;
    char why[160]; /* "": ready */
    st_nvml_error_fn error;
    st_nvml_by_uuid_fn by_uuid;
    st_nvml_list_t procs;
} nvml = {.once = PTHREAD_ONCE_INIT};

static void *sym(void *lib, const char *name)
{
    hook_real_dlsym_init();
    return hook_real_dlsym(lib, name);
}

static void nvml_load(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_LOCAL | RTLD_NOW);
    if (!lib) {
        snprintf(nvml.why, sizeof nvml.why, "NVML: libnvidia-ml.so.1 cannot be loaded");
        return;
    }
    st_nvml_init_fn init = (st_nvml_init_fn)sym(lib, "nvmlInit_v2");
    if (!init)
        init = (st_nvml_init_fn)sym(lib, "nvmlInit");
    nvml.error = (st_nvml_error_fn)sym(lib, "nvmlErrorString");
    nvml.by_uuid = (st_nvml_by_uuid_fn)sym(lib, "nvmlDeviceGetHandleByUUID");
    nvml.procs = st_nvml_find_list(lib, sym);
    if (!init || !nvml.by_uuid || !nvml.procs.call) {
        snprintf(nvml.why, sizeof nvml.why, "NVML: libnvidia-ml.so.1 lacks %s",
                 !init           ? "nvmlInit_v2"
                 : !nvml.by_uuid ? "nvmlDeviceGetHandleByUUID"
                                 : "nvmlDeviceGetComputeRunningProcesses");
        return;
    }
    int rc = init();
    if (rc != ST_NVML_OK)
        snprintf(nvml.why, sizeof nvml.why, "NVML: nvmlInit_v2 failed: %s", st_nvml_text(nvml.error, rc));
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

void hook_nvml_procs(const hook_dev_t *hd, st_gpu_procs_t *out, char *why, size_t whylen)
{
    *out = (st_gpu_procs_t){.unavailable = why, .self_pid = (unsigned)getpid()};
    pthread_once(&nvml.once, nvml_load);
    if (nvml.why[0]) {
        snprintf(why, whylen, "%s", nvml.why);
        return;
    }
    char uuid[48];
    st_nvml_dev_t dev;
    int rc;
    if (!hook_device_uuid(hd, uuid)) {
        snprintf(why, whylen, "cuDeviceGetUuid failed for GPU %d", hd->ordinal);
        return;
    }
    if ((rc = nvml.by_uuid(uuid, &dev)) != ST_NVML_OK) {
        snprintf(why, whylen, "NVML: nvmlDeviceGetHandleByUUID(%s) failed: %s", uuid, st_nvml_text(nvml.error, rc));
        return;
    }
    st_nvml_proc_t *rows;
    unsigned n;
    rc = st_nvml_procs(nvml.procs, dev, NVML_FIRST_ROWS, NVML_TRIES, &rows, &n);
    if (rc == ST_NVML_NO_HOST_MEMORY) {
        snprintf(why, whylen, "no host memory for NVML's process list");
        return;
    }
    if (rc != ST_NVML_OK) {
        snprintf(why, whylen, "NVML: the process list failed: %s", st_nvml_text(nvml.error, rc));
        return;
    }
    st_gpu_proc_t *procs = n ? hostalloc_malloc(n * sizeof *procs) : NULL;
    if (n && !procs) {
        snprintf(why, whylen, "no host memory for the process list");
        hostalloc_free(rows);
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        procs[i] = (st_gpu_proc_t){.pid = rows[i].pid, .bytes = rows[i].used};
        proc_comm(rows[i].pid, procs[i].comm, sizeof procs[i].comm);
    }
    hostalloc_free(rows);
    *out = (st_gpu_procs_t){.self_pid = (unsigned)getpid(), .procs = procs, .n = n};
}
