/*
 * The real entry points: the typed tables real.c fills once, by the exact
 * versioned names (the driver's from libcuda.so.1, the runtime's with
 * RTLD_NEXT), the calls through them (RT_REAL, CU_REAL), and the routes of
 * exported driver hooks.
 */
#ifndef CUCACHE_INTERPOSE_REAL_H
#define CUCACHE_INTERPOSE_REAL_H

#include <stdbool.h>
#include <stddef.h>

#include "cucache/cuda_api.h"
#include "hook.h" /* HOOK_REAL: the guard RT_REAL raises */

/* ------------------------------------------------------------------------
 * Real entry points (real.c)
 * ---------------------------------------------------------------------- */

/* X(name): the driver's export of that exact name; its prototype in
 * cuda_api.h gives the type. */
#define HOOK_DRIVER_FUNCS(X)                                                                                           \
    X(cuInit)                                                                                                          \
    X(cuDeviceGet)                                                                                                     \
    X(cuDeviceGetCount)                                                                                                \
    X(cuDeviceGetUuid_v2)                                                                                              \
    X(cuDeviceTotalMem_v2)                                                                                             \
    X(cuDevicePrimaryCtxRetain)                                                                                        \
    X(cuDevicePrimaryCtxReset_v2)                                                                                      \
    X(cuDevicePrimaryCtxGetState)                                                                                      \
    X(cuDevicePrimaryCtxRelease_v2)                                                                                    \
    X(cuCtxDestroy_v2)                                                                                                 \
    X(cuCtxCreate_v2)                                                                                                  \
    X(cuCtxCreate_v3)                                                                                                  \
    X(cuCtxCreate_v4)                                                                                                  \
    X(cuCtxGetCurrent)                                                                                                 \
    X(cuCtxGetDevice)                                                                                                  \
    X(cuCtxPushCurrent_v2)                                                                                             \
    X(cuCtxPopCurrent_v2)                                                                                              \
    X(cuCtxSynchronize)                                                                                                \
    X(cuCtxEnablePeerAccess)                                                                                           \
    X(cuCtxDisablePeerAccess)                                                                                          \
    X(cuMemAlloc_v2)                                                                                                   \
    X(cuMemFree_v2)                                                                                                    \
    X(cuMemGetInfo_v2)                                                                                                 \
    X(cuMemAllocAsync)                                                                                                 \
    X(cuMemAllocAsync_ptsz)                                                                                            \
    X(cuMemFreeAsync)                                                                                                  \
    X(cuMemFreeAsync_ptsz)                                                                                             \
    X(cuStreamCreate)                                                                                                  \
    X(cuStreamCreateWithPriority)                                                                                      \
    X(cuStreamDestroy_v2)                                                                                              \
    X(cuStreamGetCtx)                                                                                                  \
    X(cuStreamGetCtx_ptsz)                                                                                             \
    X(cuStreamSynchronize)                                                                                             \
    X(cuStreamSynchronize_ptsz)                                                                                        \
    X(cuStreamQuery)                                                                                                   \
    X(cuStreamIsCapturing)                                                                                             \
    X(cuStreamIsCapturing_ptsz)                                                                                        \
    X(cuStreamBeginCapture_v2)                                                                                         \
    X(cuStreamBeginCapture_v2_ptsz)                                                                                    \
    X(cuStreamEndCapture)                                                                                              \
    X(cuStreamEndCapture_ptsz)                                                                                         \
    X(cuThreadExchangeStreamCaptureMode)                                                                               \
    X(cuEventCreate)                                                                                                   \
    X(cuEventRecord)                                                                                                   \
    X(cuStreamWaitEvent)                                                                                               \
    X(cuEventQuery)                                                                                                    \
    X(cuEventSynchronize)                                                                                              \
    X(cuEventDestroy_v2)                                                                                               \
    X(cuDeviceGetMemPool)                                                                                              \
    X(cuMemPoolGetAttribute)                                                                                           \
    X(cuPointerGetAttribute)                                                                                           \
    X(cuPointerGetAttributes)                                                                                          \
    X(cuPointerSetAttribute)                                                                                           \
    X(cuMemGetAddressRange_v2)                                                                                         \
    X(cuMemGetHandleForAddressRange)                                                                                   \
    X(cuIpcGetMemHandle)                                                                                               \
    X(cuIpcOpenMemHandle_v2)                                                                                           \
    X(cuIpcCloseMemHandle)                                                                                             \
    X(cuDeviceGetAttribute)                                                                                            \
    X(cuMemAddressReserve)                                                                                             \
    X(cuMemAddressFree)                                                                                                \
    X(cuMemCreate)                                                                                                     \
    X(cuMemRelease)                                                                                                    \
    X(cuMemMap)                                                                                                        \
    X(cuMemUnmap)                                                                                                      \
    X(cuMemSetAccess)                                                                                                  \
    X(cuMemGetAllocationGranularity)                                                                                   \
    X(cuMemRetainAllocationHandle)                                                                                     \
    X(cuGetProcAddress_v2)

/* X(name): the runtime's export of that name, found with RTLD_NEXT. */
#define HOOK_RUNTIME_FUNCS(X)                                                                                          \
    X(cudaGetDevice)                                                                                                   \
    X(cudaMalloc)                                                                                                      \
    X(cudaFree)                                                                                                        \
    X(cudaMemGetInfo)                                                                                                  \
    X(cudaMallocAsync)                                                                                                 \
    X(cudaMallocAsync_ptsz)                                                                                            \
    X(cudaFreeAsync)                                                                                                   \
    X(cudaFreeAsync_ptsz)                                                                                              \
    X(cudaDeviceReset)                                                                                                 \
    X(cudaDeviceSynchronize)                                                                                           \
    X(cudaStreamSynchronize)                                                                                           \
    X(cudaStreamSynchronize_ptsz)                                                                                      \
    X(cudaEventSynchronize)                                                                                            \
    X(cudaStreamCreate)                                                                                                \
    X(cudaStreamCreateWithFlags)                                                                                       \
    X(cudaStreamCreateWithPriority)                                                                                    \
    X(cudaStreamDestroy)                                                                                               \
    X(cudaStreamBeginCapture)                                                                                          \
    X(cudaStreamBeginCapture_ptsz)                                                                                     \
    X(cudaStreamEndCapture)                                                                                            \
    X(cudaStreamEndCapture_ptsz)                                                                                       \
    X(cudaPointerGetAttributes)                                                                                        \
    X(cudaIpcGetMemHandle)                                                                                             \
    X(cudaIpcOpenMemHandle)                                                                                            \
    X(cudaIpcCloseMemHandle)                                                                                           \
    X(cudaDeviceEnablePeerAccess)                                                                                      \
    X(cudaDeviceDisablePeerAccess)                                                                                     \
    X(cudaGetLastError)

/* The 11.3 form of the resolver; cuda_api.h declares only _v2. */
typedef CUresult (*hook_getproc_fn)(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

typedef struct hook_driver_s {
#define HOOK_FIELD(name) __typeof__(name) *name;
    HOOK_DRIVER_FUNCS(HOOK_FIELD)
    hook_getproc_fn cuGetProcAddress; /* the 11.3 resolver */
} hook_driver_t;

typedef struct hook_runtime_s {
    HOOK_RUNTIME_FUNCS(HOOK_FIELD)
#undef HOOK_FIELD
} hook_runtime_t;

/* Valid after hook_real_driver() / hook_real_runtime() returned true;
 * entries the library lacks stay NULL. */
extern hook_driver_t real_cu;
extern hook_runtime_t real_rt;

/* The real dlsym (glibc's, found with dlvsym); never NULL once
 * hook_real_dlsym_init() ran.  Read by dlsym_entry.S. */
extern void *(*hook_real_dlsym)(void *handle, const char *symbol);
void hook_real_dlsym_init(void);

/* Whether a table was resolved (real.c): 0 not yet, 1 usable, -1 not
 * (stored with release once the table is complete). */
extern atomic_int hook_real_driver_state, hook_real_runtime_state;
/* The first call's work behind hook_real_driver/hook_real_runtime (a
 * pthread_once); every later call reads the state above. */
bool hook_real_driver_resolve(void);
bool hook_real_runtime_resolve(void);

/* Loads libcuda.so.1 and resolves the driver table once; false when the
 * driver or one of its required entry points is missing. */
static inline bool hook_real_driver(void)
{
    int s = atomic_load_explicit(&hook_real_driver_state, memory_order_acquire);
    return HOOK_LIKELY(s != 0) ? s > 0 : hook_real_driver_resolve();
}

/* Resolves the runtime table once (RTLD_NEXT); false without a runtime. */
static inline bool hook_real_runtime(void)
{
    int s = atomic_load_explicit(&hook_real_runtime_state, memory_order_acquire);
    return HOOK_LIKELY(s != 0) ? s > 0 : hook_real_runtime_resolve();
}

/* The real runtime call, with the guard up: what it asks of the driver
 * passes through the driver hooks uncached. */
#define RT_REAL(name, ...)                                                                                             \
    (hook_real_runtime() && real_rt.name ? HOOK_REAL(real_rt.name(__VA_ARGS__)) : cudaErrorInsufficientDriver)
/* The real driver call (the driver calls no hook, so no guard is needed). */
#define CU_REAL(name, ...) (hook_real_driver() && real_cu.name ? real_cu.name(__VA_ARGS__) : CUDA_ERROR_NOT_INITIALIZED)

/* One hooked driver entry point (hook_lookup.c's table). */
typedef struct route_s {
    const char *name; /* exact exported name, e.g. "cuMemAllocAsync_ptsz" */
    void *hook;       /* our export of that name */
    void *real;       /* the driver's export of that name (real.c fills it) */
} route_t;

extern route_t hook_routes[];
extern const size_t hook_nroutes;

/* The hook of an exported driver entry point whose real address is p (the
 * cuGetProcAddress answer), or p itself. */
void *hook_route(void *p);
/* The driver's own export of `name` (its dlopen handle); NULL without. */
void *hook_real_driver_sym(const char *name);

#endif
