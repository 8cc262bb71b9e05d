/*
 * The driver's side of nvml_seam.h: what the simulated NVML of this
 * process reports about a device of the process's own.
 */
#include <stdlib.h>

#include "driver.h"
#include "handles.h"
#include "nvml_seam.h"

SIM_API int cucacheSimNvmlUsage(int ordinal, unsigned long long *bytes);

/* True when a created (not primary) context of the process is on d. */
static bool created_ctx_on(const sim_device_t *d)
{
    void **ctxs;
    size_t n = handle_list(SIM_MAGIC_CTX, &ctxs);
    bool found = false;
    for (size_t i = 0; i < n && !found; i++)
        found = ((struct CUctx_st *)ctxs[i])->dev == d && !((struct CUctx_st *)ctxs[i])->primary;
    free(ctxs);
    return found;
}

SIM_API int cucacheSimNvmlUsage(int ordinal, unsigned long long *bytes)
{
    if (!bytes)
        return 0;
    pthread_mutex_lock(&sim.lock);
    int in_use = 0;
    if (sim.initialized && sim.init_result == CUDA_SUCCESS && ordinal >= 0 && ordinal < sim.ndev) {
        sim_device_t *d = &sim.dev[ordinal];
        size_t used = d->capacity - sim_dev_free_bytes(d);
        in_use = d->primary_refs > 0 || used > 0 || created_ctx_on(d);
        *bytes = used;
    }
    pthread_mutex_unlock(&sim.lock);
    return in_use;
}
