/*
 * A program's __device__ and __constant__ variables: nvcc's host code
 * registers each (__cudaRegisterVar: its host shadow's address, its device
 * name and size) with the fatbin it is in.  The driver gives each variable
 * of a loaded module device memory of its own, initialised from the image
 * (driver_module.c); the runtime finds a variable by its shadow's address,
 * loads its registration's module in the current context as a launch
 * would, and asks the driver where the variable lies (cuModuleGetGlobal).
 * The copies are the driver's cuMemcpy and cuMemcpyAsync, so they are
 * ordered, timed and checked for races like any copy.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_internal.h"

typedef struct rt_var_s {
    void **fatbin;    /* the registration it came with */
    const void *host; /* its host shadow: what the program passes as `symbol` */
    char *name;       /* its device name (a copy) */
    size_t size;
} rt_var_t;

static pthread_mutex_t rt_vars_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_var_t *rt_vars; /* under rt_vars_lock */
static size_t rt_nvars;

void rt_var_register(void **fatCubinHandle, const void *host, const char *name, size_t size)
{
    char *copy = name ? strdup(name) : NULL;
    if (!copy || !host)
        return free(copy);
    pthread_mutex_lock(&rt_vars_lock);
    rt_var_t *v = realloc(rt_vars, (rt_nvars + 1) * sizeof *v);
    if (v) {
        rt_vars = v;
        rt_vars[rt_nvars++] = (rt_var_t){fatCubinHandle, host, copy, size};
    } else {
        free(copy);
    }
    pthread_mutex_unlock(&rt_vars_lock);
}

void rt_vars_unregister(void **fatCubinHandle)
{
    pthread_mutex_lock(&rt_vars_lock);
    size_t n = 0;
    for (size_t i = 0; i < rt_nvars; i++) {
        if (rt_vars[i].fatbin == fatCubinHandle)
            free(rt_vars[i].name);
        else
            rt_vars[n++] = rt_vars[i];
    }
    rt_nvars = n;
    pthread_mutex_unlock(&rt_vars_lock);
}

/* Where the variable whose shadow is `symbol` lies in the current context:
 * cudaErrorInvalidSymbol when it was never registered or its module does
 * not define it. */
static cudaError_t rt_symbol(const rt_driver_t *d, const void *symbol, CUdeviceptr *dptr, size_t *size)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess)
        return e;
    void **fatbin = NULL;
    char name[1024] = "";
    pthread_mutex_lock(&rt_vars_lock);
    for (size_t i = 0; i < rt_nvars && !fatbin; i++)
        if (rt_vars[i].host == symbol && strlen(rt_vars[i].name) < sizeof name) {
            fatbin = rt_vars[i].fatbin;
            strcpy(name, rt_vars[i].name);
        }
    pthread_mutex_unlock(&rt_vars_lock);
    if (!fatbin)
        return cudaErrorInvalidSymbol;
    CUmodule m;
    CUresult r = rt_fatbin_module(d, fatbin, &m);
    if (r == CUDA_SUCCESS)
        r = d->cuModuleGetGlobal_v2(dptr, size, m, name);
    return r == CUDA_ERROR_NOT_FOUND ? cudaErrorInvalidSymbol : rt_err(r);
}

RT_API cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
    if (!devPtr)
        return rt_ret(cudaErrorInvalidValue);
    CUdeviceptr p;
    size_t size;
    cudaError_t e = rt_symbol(RT_DRV, symbol, &p, &size);
    if (e == cudaSuccess)
        *devPtr = (void *)(uintptr_t)p;
    return rt_ret(e);
}

RT_API cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol)
{
    if (!size)
        return rt_ret(cudaErrorInvalidValue);
    CUdeviceptr p;
    return rt_ret(rt_symbol(RT_DRV, symbol, &p, size));
}

/* [offset, offset + count) of the variable, after checking the direction
 * (to_symbol: the copy's destination is the variable). */
static cudaError_t rt_symbol_range(const rt_driver_t *d, const void *symbol, size_t count, size_t offset,
                                   enum cudaMemcpyKind kind, bool to_symbol, CUdeviceptr *p)
{
    enum cudaMemcpyKind from_host = to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    if (kind != from_host && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return cudaErrorInvalidMemcpyDirection;
    size_t size;
    cudaError_t e = rt_symbol(d, symbol, p, &size);
    if (e != cudaSuccess)
        return e;
    if (offset > size || count > size - offset)
        return cudaErrorInvalidValue;
    *p += offset;
    return cudaSuccess;
}

static cudaError_t rt_to_symbol(const rt_driver_t *d, const void *symbol, const void *src, size_t count,
                                size_t offset, enum cudaMemcpyKind kind)
{
    CUdeviceptr p;
    cudaError_t e = rt_symbol_range(d, symbol, count, offset, kind, true, &p);
    return e != cudaSuccess || !count ? e : rt_err(d->cuMemcpy(p, (CUdeviceptr)(uintptr_t)src, count));
}

static cudaError_t rt_from_symbol(const rt_driver_t *d, void *dst, const void *symbol, size_t count, size_t offset,
                                  enum cudaMemcpyKind kind)
{
    CUdeviceptr p;
    cudaError_t e = rt_symbol_range(d, symbol, count, offset, kind, false, &p);
    return e != cudaSuccess || !count ? e : rt_err(d->cuMemcpy((CUdeviceptr)(uintptr_t)dst, p, count));
}

static cudaError_t rt_to_symbol_async(const rt_driver_t *d, const void *symbol, const void *src, size_t count,
                                      size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    CUdeviceptr p;
    cudaError_t e = rt_symbol_range(d, symbol, count, offset, kind, true, &p);
    return e != cudaSuccess || !count ? e
                                      : rt_err(d->cuMemcpyAsync(p, (CUdeviceptr)(uintptr_t)src, count, stream));
}

static cudaError_t rt_from_symbol_async(const rt_driver_t *d, void *dst, const void *symbol, size_t count,
                                        size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    CUdeviceptr p;
    cudaError_t e = rt_symbol_range(d, symbol, count, offset, kind, false, &p);
    return e != cudaSuccess || !count ? e
                                      : rt_err(d->cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, p, count, stream));
}

cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t count, size_t offset,
                                    enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src, size_t count, size_t offset,
                                         enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol, size_t count, size_t offset,
                                           enum cudaMemcpyKind kind, cudaStream_t stream);

RT_STREAM_API(cudaMemcpyToSymbol, cudaMemcpyToSymbol_ptds, rt_to_symbol,
              (const void *symbol, const void *src, size_t count, size_t offset, enum cudaMemcpyKind kind), symbol,
              src, count, offset, kind)
RT_STREAM_API(cudaMemcpyFromSymbol, cudaMemcpyFromSymbol_ptds, rt_from_symbol,
              (void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind), dst, symbol,
              count, offset, kind)
RT_STREAM_API(cudaMemcpyToSymbolAsync, cudaMemcpyToSymbolAsync_ptsz, rt_to_symbol_async,
              (const void *symbol, const void *src, size_t count, size_t offset, enum cudaMemcpyKind kind,
               cudaStream_t stream),
              symbol, src, count, offset, kind, stream)
RT_STREAM_API(cudaMemcpyFromSymbolAsync, cudaMemcpyFromSymbolAsync_ptsz, rt_from_symbol_async,
              (void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind,
               cudaStream_t stream),
              dst, symbol, count, offset, kind, stream)
