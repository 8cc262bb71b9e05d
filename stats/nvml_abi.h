/*
 * NVML's ABI as cucache reads it: the codes, layouts and entry points of
 * NVIDIA's nvml.h that interpose/nvml.c (the OOM report's process list)
 * and top/cucache_top.c (cucache-top) call, declared here in this
 * project's own words, and the process-list call both make (nvml_abi.c).
 *
 * libnvidia-ml.so.1 is never linked: each caller opens it with dlopen and
 * resolves its entry points with its own dlsym (the interposer's real one,
 * the tool's libc one), passed in as an st_nvml_sym_fn.  The simulator's
 * subprojects/cusim/src/nvml.h is the other side of this ABI: the simulated
 * library that tests run on.
 */
#ifndef CUCACHE_STATS_NVML_ABI_H
#define CUCACHE_STATS_NVML_ABI_H

#include <stddef.h>
#include <stdint.h>

enum {
    ST_NVML_OK = 0,                /* NVML_SUCCESS */
    ST_NVML_INSUFFICIENT_SIZE = 7, /* NVML_ERROR_INSUFFICIENT_SIZE */
    ST_NVML_NO_HOST_MEMORY = -1,   /* ours: st_nvml_procs had no host memory for the array */
};

typedef void *st_nvml_dev_t; /* nvmlDevice_t */

/* nvmlMemory_t */
typedef struct st_nvml_mem_s {
    unsigned long long total, free, used;
} st_nvml_mem_t;

/* nvmlProcessInfo_v1_t (the unversioned call) and nvmlProcessInfo_t (the
 * _v2 and _v3 calls): pid and bytes at the same offsets in both */
typedef struct st_nvml_proc_v1_s {
    unsigned pid;
    unsigned long long used; /* usedGpuMemory; ~0: not available */
} st_nvml_proc_v1_t;
typedef struct st_nvml_proc_v2_s {
    unsigned pid;
    unsigned long long used;
    unsigned gpu_instance, compute_instance;
} st_nvml_proc_v2_t;

_Static_assert(sizeof(st_nvml_mem_t) == 24, "nvmlMemory_t");
_Static_assert(sizeof(st_nvml_proc_v1_t) == 16, "nvmlProcessInfo_v1_t");
_Static_assert(sizeof(st_nvml_proc_v2_t) == 24, "nvmlProcessInfo_t");

typedef int (*st_nvml_init_fn)(void);                                             /* nvmlInit_v2, nvmlInit */
typedef const char *(*st_nvml_error_fn)(int rc);                                  /* nvmlErrorString */
typedef int (*st_nvml_count_fn)(unsigned *count);                                 /* nvmlDeviceGetCount_v2 */
typedef int (*st_nvml_by_index_fn)(unsigned index, st_nvml_dev_t *dev);           /* nvmlDeviceGetHandleByIndex_v2 */
typedef int (*st_nvml_by_uuid_fn)(const char *uuid, st_nvml_dev_t *dev);          /* nvmlDeviceGetHandleByUUID */
typedef int (*st_nvml_string_fn)(st_nvml_dev_t dev, char *buf, unsigned len);     /* nvmlDeviceGetName, _GetUUID */
typedef int (*st_nvml_mem_fn)(st_nvml_dev_t dev, st_nvml_mem_t *mem);             /* nvmlDeviceGetMemoryInfo */
typedef int (*st_nvml_procs_fn)(st_nvml_dev_t dev, unsigned *count, void *infos); /* ..ComputeRunningProcesses */

/* The caller's dlsym. */
typedef void *(*st_nvml_sym_fn)(void *lib, const char *name);

/* The process-list call a library has. */
typedef struct st_nvml_list_s {
    st_nvml_procs_fn call; /* NULL: the library has none */
    size_t row;            /* bytes of one entry of its array */
} st_nvml_list_t;

/* One process of a list. */
typedef struct st_nvml_proc_s {
    unsigned pid;
    uint64_t used; /* its bytes on the device; 0 where NVML has no figure */
} st_nvml_proc_t;

/* The newest process-list call lib has, through sym:
 * nvmlDeviceGetComputeRunningProcesses_v3, else _v2, else the unversioned
 * one (one row per version in nvml_abi.c). */
st_nvml_list_t st_nvml_find_list(void *lib, st_nvml_sym_fn sym);

/* nvmlErrorString's text for rc through error (NULL: not resolved), else
 * "unknown error". */
const char *st_nvml_text(st_nvml_error_fn error, int rc);

/* dev's processes by list's call into *procs (*n of them, from hostalloc:
 * hostalloc_free it; NULL when the call failed).  The first ask is for
 * `first` rows; while NVML answers NVML_ERROR_INSUFFICIENT_SIZE the array
 * is grown to the count it gave plus `first` (room for processes that
 * start meanwhile), `tries` asks in all.  Returns NVML's code of the last
 * ask, or ST_NVML_NO_HOST_MEMORY. */
int st_nvml_procs(st_nvml_list_t list, st_nvml_dev_t dev, unsigned first, int tries, st_nvml_proc_t **procs,
                  unsigned *n);

#endif
