/*
 * Runtime memory hooks: cudaMalloc, cudaFree, cudaMemGetInfo and the
 * stream-ordered cudaMallocAsync / cudaFreeAsync (and their per-thread
 * default stream twins, _ptsz).
 *
 * The hit path: the guard, the device (cudaGetDevice) and core_malloc.
 * Everything else (out of memory, foreign pointers, captures) is out of line.
 */
#include <stdio.h>

#include "backend.h"
#include "cxx_throw.h"
#include "diag.h"
#include "fail.h"
#include "framework.h"
#include "hook.h"
#include "log.h"
#include "meminfo.h"
#include "real.h"
#include "recorder.h"
#include "st.h"
#include "state.h"
#include "streams.h"
#include "trace.h"

/* Which runtime entry point a shared slow path stands in for. */
typedef enum rt_api_e {
    RT_PLAIN,      /* cudaMalloc / cudaFree */
    RT_ASYNC,      /* cudaMallocAsync / cudaFreeAsync */
    RT_ASYNC_PTSZ, /* their _ptsz twins */
} rt_api_t;

/* What an allocation cucache could not serve returns.  A device error is
 * returned as the device gave it.  Out of memory: unless a limit refused it
 * or a capture is on, the runtime gets one try of its own first, which sets
 * the runtime's last error the way the program expects; when that serves
 * the call (foreign memory) the program saw no failure, so there is no OOM
 * report, only the count of calls the fallback served.  Otherwise the
 * report, then the error. */
__attribute__((noinline)) static cudaError_t rt_oom(hook_dev_t *hd, const hook_fail_t *f, void **devPtr, size_t size,
                                                    cudaStream_t stream, rt_api_t api)
{
    if (f->oom.backend_error == CORE_EFAIL)
        return hook_backend_error != CUDA_SUCCESS ? (cudaError_t)hook_backend_error : cudaErrorMemoryAllocation;
    if (f->oom.limit_hit || atomic_load(&hd->capturing)) {
        hook_report_oom(hd, f);
        return cudaErrorMemoryAllocation;
    }
    cudaError_t e;
    switch (api) {
    case RT_PLAIN:
        e = RT_REAL(cudaMalloc, devPtr, size);
        break;
    case RT_ASYNC:
        e = RT_REAL(cudaMallocAsync, devPtr, size, stream);
        break;
    default:
        e = RT_REAL(cudaMallocAsync_ptsz, devPtr, size, stream);
        break;
    }
    if (e == cudaSuccess)
        hook_fallback_served(hd, &f->oom);
    else
        hook_report_oom(hd, f);
    return e;
}

static inline cudaError_t rt_malloc(void **devPtr, size_t size)
{
    hook_dev_t *hd;
    core_dev_t *d;
    if (HOOK_UNLIKELY(hook_bypass() || !devPtr || size == 0) || !(hd = hook_rt_device(true)) ||
        !(d = hook_dev_core(hd)))
        return RT_REAL(cudaMalloc, devPtr, size);
    hook_fail_t f;
    uintptr_t p = hook_alloc(&(hook_req_t){hd, d, size, 0, hook_site(), HOOK_POOL_ROUTE}, &f);
    if (HOOK_LIKELY(p != 0)) {
        *devPtr = (void *)p;
        return cudaSuccess;
    }
    return rt_oom(hd, &f, devPtr, size, NULL, RT_PLAIN);
}

/* A free cucache cannot take: a foreign pointer goes to the runtime; a
 * pointer inside cucache's memory that is not a live allocation is the
 * program's bug, answered as the runtime answers a bad pointer. */
__attribute__((noinline)) static cudaError_t rt_not_mine(void *devPtr, bool inside, cudaStream_t s, rt_api_t api)
{
    if (inside) {
        hook_warn(HOOK_WARN_BAD_FREE,
                  "%s(%p): not a live allocation (double free, or a pointer inside a block); returning "
                  "cudaErrorInvalidValue, the cache is unchanged",
                  api == RT_PLAIN ? "cudaFree" : "cudaFreeAsync", devPtr);
        /* The runtime's last error must say so too (cudaGetLastError).  It
         * is set by the runtime itself, freeing an address that can never
         * be a device allocation (never devPtr: it lies in one of our
         * segments, which the real free would release). */
        cudaError_t e = RT_REAL(cudaFree, (void *)(uintptr_t)1);
        return e != cudaSuccess ? e : cudaErrorInvalidValue;
    }
    cudaError_t e;
    switch (api) {
    case RT_PLAIN:
        e = RT_REAL(cudaFree, devPtr);
        break;
    case RT_ASYNC:
        e = RT_REAL(cudaFreeAsync, devPtr, s);
        break;
    default:
        e = RT_REAL(cudaFreeAsync_ptsz, devPtr, s);
        break;
    }
    if (e == cudaErrorInvalidValue)
        hook_warn(HOOK_WARN_BAD_FREE, "%s(%p): not a device allocation (neither cucache's nor CUDA's)",
                  api == RT_PLAIN ? "cudaFree" : "cudaFreeAsync", devPtr);
    return e;
}

static inline cudaError_t rt_free(void *devPtr)
{
    if (HOOK_UNLIKELY(hook_bypass() || !devPtr))
        return RT_REAL(cudaFree, devPtr);
    hook_dev_t *hd = hook_rt_device(false);
    bool inside;
    core_free_t how = hd ? hook_free_policy(hd) : CORE_FREE_FENCED;
    if (HOOK_LIKELY(hook_free_any(hd, (uintptr_t)devPtr, how, 0, &inside) == CORE_FREED))
        return cudaSuccess;
    return rt_not_mine(devPtr, inside, NULL, RT_PLAIN);
}

/* ------------------------------------------------------------------------
 * The recorded twins (CUCACHE_TRACE): an allocation is stamped after it
 * returned, a free before it began (trace.c says why)
 * ---------------------------------------------------------------------- */

__attribute__((noinline)) static void record_alloc(unsigned api, cudaError_t e, void **devPtr, size_t size,
                                                  cudaStream_t s)
{
    bool fallback = hook_fallback_now;
    hook_fallback_now = false;
    if (e == cudaSuccess)
        hook_trace_put_flags(TRACE_ALLOC, api, hook_last_dev, (uintptr_t)s, (uintptr_t)*devPtr, size, 0,
                             fallback ? TRACE_REC_FALLBACK : 0);
    else
        hook_trace_put(TRACE_ALLOC_FAIL, api, hook_last_dev, (uintptr_t)s, (uint64_t)e, size, 0);
}

__attribute__((noinline)) static void record_free(unsigned api, cudaError_t e, void *devPtr, cudaStream_t s,
                                                 uint64_t when)
{
    if (e == cudaSuccess && devPtr)
        hook_trace_put(TRACE_FREE, api, hook_last_dev, (uintptr_t)s, (uintptr_t)devPtr, 0, when);
}

/* A failed cudaMalloc whose caller is a framework with its cache off that
 * takes it as its out-of-memory exception (framework.h, oom_throw): the
 * runtime's last error cleared (the framework would never read it, and its
 * next launch check would), then thrown; else nothing. */
static __attribute__((noinline, cold)) void rt_oom_thrown(const void *caller, size_t size)
{
    if (!hook_framework_throws_oom(caller))
        return;
    (void)RT_REAL(cudaGetLastError);
    int dev = -1;
    (void)RT_REAL(cudaGetDevice, &dev);
    char sz[32], what[256];
    st_fmt_size(sz, sizeof sz, size);
    snprintf(what, sizeof what,
             "CUDA out of memory. Tried to allocate %s. GPU %d: cudaMalloc under cucache (PyTorch's cache off) "
             "failed: cucache's report (stderr, or CUCACHE_LOG's file) says why.",
             sz, dev);
    hook_cxx_throw(HOOK_CXX_OUT_OF_MEMORY, what);
}

HOOK_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    cudaError_t e = rt_malloc(devPtr, size);
    if (HOOK_UNLIKELY(hook_trace_on()) && devPtr)
        record_alloc(TRACE_API_CUDA_MALLOC, e, devPtr, size, NULL);
    if (HOOK_UNLIKELY(e == cudaErrorMemoryAllocation))
        rt_oom_thrown(__builtin_return_address(0), size);
    return e;
}

HOOK_API cudaError_t cudaFree(void *devPtr)
{
    if (HOOK_LIKELY(!hook_trace_on()))
        return rt_free(devPtr);
    uint64_t when = hook_trace_now();
    cudaError_t e = rt_free(devPtr);
    record_free(TRACE_API_CUDA_MALLOC, e, devPtr, NULL, when);
    return e;
}

/* Free memory is what one allocation of that size could then obtain, so
 * that a program that allocates the reported free memory (workspace
 * sizing does) succeeds: the device's free memory plus the segments the
 * cache gives back, whole free ones and those whose frees are still
 * pending (an allocation that needs them waits for their work, as
 * cudaFree would have; free space inside partly used segments serves no
 * such allocation, and blocks an IPC peer still has open are not given
 * back), within a limit (limit_mb, per_process_memory_fraction, then the
 * total), and no more than a request whose rounding and segment
 * (core_fit) fit in that room. */
void hook_adjust_meminfo(hook_dev_t *hd, size_t *free_bytes, size_t *total)
{
    core_dev_t *d = hd ? hook_dev_core(hd) : NULL;
    if (!d)
        return;
    core_usage_t u;
    core_poll(d); /* frees whose work completed, holds that ended */
    core_usage(d, &u);
    size_t room = *free_bytes + u.reclaimable;
    if (u.allowed != SIZE_MAX) {
        if (u.allowed < *total)
            *total = u.allowed;
        size_t kept = u.reserved - u.reclaimable;
        size_t left = u.allowed > kept ? u.allowed - kept : 0;
        if (room > left)
            room = left;
    }
    *free_bytes = core_fit(d, room < *total ? room : *total);
}

void hook_meminfo_answer(bool runtime, size_t f, size_t t, size_t *free_bytes, size_t *total)
{
    if (!hook_bypass())
        hook_adjust_meminfo(runtime ? hook_rt_device(false) : hook_cu_device(false), &f, &t);
    if (free_bytes)
        *free_bytes = f;
    if (total)
        *total = t;
}

HOOK_API cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
    size_t f = 0, t = 0;
    cudaError_t e = RT_REAL(cudaMemGetInfo, &f, &t);
    if (e == cudaSuccess)
        hook_meminfo_answer(true, f, t, free, total);
    return e;
}

/* ------------------------------------------------------------------------
 * Stream-ordered allocation
 * ---------------------------------------------------------------------- */

static cudaError_t rt_malloc_async(void **devPtr, size_t size, cudaStream_t s, bool pt)
{
    hook_dev_t *hd;
    core_dev_t *d;
    /* on a capturing stream it is a graph node: the graph owns that memory */
    if (HOOK_UNLIKELY(hook_bypass() || !devPtr || size == 0) || !(hd = hook_stream_device(s, true)) ||
        !(d = hook_dev_core(hd)) || hook_stream_capturing(hd, s, pt))
        return pt ? RT_REAL(cudaMallocAsync_ptsz, devPtr, size, s) : RT_REAL(cudaMallocAsync, devPtr, size, s);
    hook_fail_t f;
    uintptr_t p = hook_alloc(&(hook_req_t){hd, d, size, hook_stream_key(s, pt), hook_site(), HOOK_POOL_ROUTE}, &f);
    if (HOOK_LIKELY(p != 0)) {
        *devPtr = (void *)p;
        return cudaSuccess;
    }
    return rt_oom(hd, &f, devPtr, size, s, pt ? RT_ASYNC_PTSZ : RT_ASYNC);
}

static cudaError_t rt_free_async(void *devPtr, cudaStream_t s, bool pt)
{
    if (HOOK_UNLIKELY(hook_bypass() || !devPtr))
        return pt ? RT_REAL(cudaFreeAsync_ptsz, devPtr, s) : RT_REAL(cudaFreeAsync, devPtr, s);
    hook_dev_t *hd = hook_stream_device(s, true);
    bool inside;
    if (HOOK_LIKELY(hook_free_any(hd, (uintptr_t)devPtr, CORE_FREE_AFTER_STREAM, hook_stream_key(s, pt), &inside) ==
                    CORE_FREED))
        return cudaSuccess;
    return rt_not_mine(devPtr, inside, s, pt ? RT_ASYNC_PTSZ : RT_ASYNC);
}

static cudaError_t rt_malloc_async_traced(void **devPtr, size_t size, cudaStream_t s, bool pt)
{
    if (HOOK_LIKELY(!hook_trace_on()))
        return rt_malloc_async(devPtr, size, s, pt);
    cudaError_t e = rt_malloc_async(devPtr, size, s, pt);
    if (devPtr)
        record_alloc(TRACE_API_CUDA_MALLOC_ASYNC, e, devPtr, size, hook_trace_stream(s, pt));
    return e;
}

static cudaError_t rt_free_async_traced(void *devPtr, cudaStream_t s, bool pt)
{
    if (HOOK_LIKELY(!hook_trace_on()))
        return rt_free_async(devPtr, s, pt);
    uint64_t when = hook_trace_now();
    cudaError_t e = rt_free_async(devPtr, s, pt);
    record_free(TRACE_API_CUDA_MALLOC_ASYNC, e, devPtr, hook_trace_stream(s, pt), when);
    return e;
}

HOOK_API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    return rt_malloc_async_traced(devPtr, size, hStream, false);
}

HOOK_API cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    return rt_malloc_async_traced(devPtr, size, hStream, true);
}

HOOK_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    return rt_free_async_traced(devPtr, hStream, false);
}

HOOK_API cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    return rt_free_async_traced(devPtr, hStream, true);
}
