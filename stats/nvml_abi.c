/*
 * NVML's process list (nvml_abi.h): the newest call the library has, and
 * the call itself with its array grown while NVML says it is too small.
 */
#include "nvml_abi.h"

#include <string.h>

#include "hostalloc.h"

/* The process-list calls, best first: one row per version. */
static const struct {
    const char *name;
    size_t row;
} nvml_list_calls[] = {
    {"nvmlDeviceGetComputeRunningProcesses_v3", sizeof(st_nvml_proc_v2_t)},
    {"nvmlDeviceGetComputeRunningProcesses_v2", sizeof(st_nvml_proc_v2_t)},
    {"nvmlDeviceGetComputeRunningProcesses", sizeof(st_nvml_proc_v1_t)},
};

/* st_nvml_procs reads each row into the array NVML wrote, in place. */
_Static_assert(sizeof(st_nvml_proc_t) <= sizeof(st_nvml_proc_v1_t), "a read row fits in NVML's smallest");

st_nvml_list_t st_nvml_find_list(void *lib, st_nvml_sym_fn sym)
{
    st_nvml_list_t l = {0};
    for (size_t i = 0; i < sizeof nvml_list_calls / sizeof nvml_list_calls[0] && !l.call; i++) {
        l.call = (st_nvml_procs_fn)sym(lib, nvml_list_calls[i].name);
        l.row = nvml_list_calls[i].row;
    }
    return l;
}

const char *st_nvml_text(st_nvml_error_fn error, int rc)
{
    const char *t = error ? error(rc) : NULL;
    return t ? t : "unknown error";
}

/* NVML's n rows of `row` bytes at rows, read into st_nvml_proc_t from the
 * front of the same array: row i is read before out[i] is written, and
 * out[i] ends before row i + 1 starts. */
static st_nvml_proc_t *nvml_read_rows(void *rows, size_t row, unsigned n)
{
    st_nvml_proc_t *out = rows;
    for (unsigned i = 0; i < n; i++) {
        const char *r = (const char *)rows + (size_t)i * row;
        unsigned pid;
        unsigned long long used;
        memcpy(&pid, r + offsetof(st_nvml_proc_v1_t, pid), sizeof pid);
        memcpy(&used, r + offsetof(st_nvml_proc_v1_t, used), sizeof used); /* the same offsets in v2 */
        out[i] = (st_nvml_proc_t){.pid = pid, .used = used == ~0ull ? 0 : used};
    }
    return out;
}

int st_nvml_procs(st_nvml_list_t list, st_nvml_dev_t dev, unsigned first, int tries, st_nvml_proc_t **procs,
                  unsigned *n)
{
    unsigned cap = first;
    void *rows = NULL;
    int rc = ST_NVML_INSUFFICIENT_SIZE;
    *procs = NULL;
    *n = 0;
    for (int t = 0; t < tries; t++) {
        hostalloc_free(rows);
        if (!(rows = hostalloc_malloc((size_t)cap * list.row)))
            return ST_NVML_NO_HOST_MEMORY;
        *n = cap;
        rc = list.call(dev, n, rows);
        if (rc != ST_NVML_INSUFFICIENT_SIZE)
            break;
        cap = *n + first;
    }
    if (rc != ST_NVML_OK) {
        hostalloc_free(rows);
        *n = 0;
        return rc;
    }
    *procs = nvml_read_rows(rows, list.row, *n);
    return rc;
}
