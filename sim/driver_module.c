/*
 * Modules and kernels: cuModuleLoadData of a module the device
 * can run, cuModuleGetFunction, cuFuncGetName, cuModuleUnload, and the
 * launches cuLaunchKernel and cuLaunchKernelEx (and their _ptsz forms).
 *
 * The device runs no device code.  A kernel is a timed operation: it
 * occupies its stream for the time CUCACHE_SIM_KERNEL_US gives its name
 * (engine_stream.c keeps the device's time), after what it is ordered
 * behind, in graphs too, and touches nothing the race detector can see
 * (cucacheSimLaunchTimed declares ranges for tests).  A module image is
 * CUCACHE_SIM_MODULE_MAGIC followed by kernel names, one a line; the
 * runtime makes one from what nvcc registered.  Any other image (PTX, a
 * cubin, a fatbin) is CUDA_ERROR_INVALID_IMAGE, said once.
 */
#include <stdlib.h>
#include <string.h>

#include "cucache/sim.h"
#include "driver.h"

/* ------------------------------------------------------------------------
 * Modules
 * ---------------------------------------------------------------------- */

/* Kernel names, kept for the process: queued and captured launches name
 * their kernel (op->what) after its module is gone. */
static char **names;
static size_t nnames;

static const char *name_intern(const char *p, size_t len)
{
    for (size_t i = 0; i < nnames; i++)
        if (strlen(names[i]) == len && memcmp(names[i], p, len) == 0)
            return names[i];
    char *n = sim_xmalloc(len + 1);
    memcpy(n, p, len);
    n[len] = 0;
    names = realloc(names, (nnames + 1) * sizeof *names);
    if (!names)
        abort();
    names[nnames++] = n;
    return n;
}

static void module_free(struct CUmod_st *m)
{
    for (size_t i = 0; i < m->nfuncs; i++) {
        handle_del(m->funcs[i]);
        m->funcs[i]->magic = SIM_MAGIC_DEAD;
        free(m->funcs[i]);
    }
    free(m->funcs);
    handle_del(m);
    m->magic = SIM_MAGIC_DEAD;
    free(m);
}

/* Said once per process: the images the device cannot load. */
static void foreign_image(void)
{
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        sim_log("cuModuleLoadData: the simulated device runs no device code and loads only the modules its runtime "
                "makes (a list of kernel names, include/cucache/sim.h); PTX, cubins and fatbins are "
                "CUDA_ERROR_INVALID_IMAGE");
}

SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    DRV_ENTER(ctx);
    if (!module || !image)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    const char *text = image;
    size_t magic = strlen(CUCACHE_SIM_MODULE_MAGIC);
    if (strncmp(text, CUCACHE_SIM_MODULE_MAGIC, magic) != 0) {
        foreign_image();
        return drv_leave(CUDA_ERROR_INVALID_IMAGE);
    }
    struct CUmod_st *m = sim_xcalloc(1, sizeof *m);
    m->magic = SIM_MAGIC_MODULE;
    m->ctx = ctx;
    for (const char *p = text + magic; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len) {
            struct CUfunc_st *f = sim_xcalloc(1, sizeof *f);
            f->magic = SIM_MAGIC_FUNC;
            f->mod = m;
            f->name = name_intern(p, len);
            f->ns = sim_kernel_ns(f->name);
            m->funcs = realloc(m->funcs, (m->nfuncs + 1) * sizeof *m->funcs);
            if (!m->funcs)
                abort();
            m->funcs[m->nfuncs++] = f;
            handle_add(f, SIM_MAGIC_FUNC);
        }
        p += len + (nl != NULL);
    }
    handle_add(m, SIM_MAGIC_MODULE);
    *module = m;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuModuleUnload(CUmodule hmod)
{
    DRV_ENTER(ctx);
    (void)ctx;
    if (!handle_is(hmod, SIM_MAGIC_MODULE))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    module_free(hmod);
    return drv_leave(CUDA_SUCCESS);
}

/* A destroyed context's modules go with it. */
void sim_modules_free_ctx(struct CUctx_st *ctx)
{
    void **list;
    size_t n = handle_list(SIM_MAGIC_MODULE, &list);
    for (size_t i = 0; i < n; i++)
        if (((struct CUmod_st *)list[i])->ctx == ctx)
            module_free(list[i]);
    free(list);
}

SIM_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    DRV_ENTER(ctx);
    (void)ctx;
    if (!hfunc || !name)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(hmod, SIM_MAGIC_MODULE))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    for (size_t i = 0; i < hmod->nfuncs; i++)
        if (strcmp(hmod->funcs[i]->name, name) == 0) {
            *hfunc = hmod->funcs[i];
            return drv_leave(CUDA_SUCCESS);
        }
    return drv_leave(CUDA_ERROR_NOT_FOUND);
}

SIM_API CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    DRV_ENTER_ANY();
    if (!name || !hfunc)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(hfunc, SIM_MAGIC_FUNC))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    *name = hfunc->name;
    return drv_leave(CUDA_SUCCESS);
}

/* The runtime's private function tables: the simulated device has none
 * (its runtime never asks). */
SIM_API CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    *ppExportTable = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------------
 * Launches
 * ---------------------------------------------------------------------- */

/* Queues a kernel of `ns` on h (a stream of the current device).  f, when
 * not NULL, must be a kernel of a module of the current context; the grid
 * and block must be non-empty, with at most 1024 threads a block. */
static CUresult kernel(struct CUfunc_st *f, uint64_t ns, const unsigned grid[3], const unsigned block[3], CUstream h,
                       void (*fn)(void *), void *arg, const struct cucache_sim_access *acc, unsigned nacc, bool ptds)
{
    DRV_ENTER(ctx);
    if (f && !handle_is(f, SIM_MAGIC_FUNC))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    if (f && f->mod->ctx != ctx)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    /* an H100's limits: grid 2^31-1 x 65535 x 65535, block 1024 x 1024 x
     * 64 and 1024 threads */
    static const unsigned grid_max[3] = {0x7fffffffu, 65535, 65535}, block_max[3] = {1024, 1024, 64};
    for (int i = 0; i < 3; i++)
        if (grid[i] == 0 || block[i] == 0 || grid[i] > grid_max[i] || block[i] > block_max[i])
            return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if ((uint64_t)block[0] * block[1] * block[2] > 1024)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    struct CUstream_st *s = NULL;
    CUresult r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && s->ctx->dev != ctx->dev)
        r = CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS)
        r = drv_access_ok(s, acc, nacc);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_op_t *op = sim_op_new(SIM_OP_KERNEL, f ? f->name : "timed kernel");
    op->dur_ns = ns;
    op->fn = fn;
    op->arg = arg;
    drv_access_set(op, acc, nacc);
    return drv_leave(sim_enqueue(s, op));
}

/* The kernel's time; an invalid handle is the launch's error (checked under
 * the lock in kernel()). */
static uint64_t func_ns(CUfunction f)
{
    sim_lock();
    uint64_t ns = handle_is(f, SIM_MAGIC_FUNC) ? f->ns : 0;
    sim_unlock();
    return ns;
}

static CUresult launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                              unsigned bz, unsigned shared, CUstream h, void **params, void **extra, bool ptds)
{
    (void)shared;
    sim_lock();
    CUresult r = sim_check_init();
    sim_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (params && extra) /* cuda.h: one way of passing the parameters, not both */
        return CUDA_ERROR_INVALID_VALUE;
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return kernel(f, func_ns(f), grid, block, h, NULL, NULL, NULL, 0, ptds);
}

DRV_PTSZ(cuLaunchKernel, launch_kernel,
         (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
          unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
          void **kernelParams, void **extra),
         (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams,
          extra))

static CUresult launch_kernel_ex(const CUlaunchConfig *config, CUfunction f, void **params, void **extra, bool ptds)
{
    if (!config || (config->numAttrs && !config->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    return launch_kernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                         config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream, params, extra,
                         ptds);
}

DRV_PTSZ(cuLaunchKernelEx, launch_kernel_ex,
         (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
         (config, f, kernelParams, extra))

SIM_API CUresult cucacheSimLaunchTimed(CUstream hStream, unsigned int us, void (*fn)(void *), void *arg,
                                       const struct cucache_sim_access *acc, unsigned int nacc)
{
    const unsigned one[3] = {1, 1, 1};
    return kernel(NULL, (uint64_t)us * 1000u, one, one, hStream, fn, arg, acc, nacc, false);
}
