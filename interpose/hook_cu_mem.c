/*
 * Driver memory hooks: cuMemAlloc_v2, cuMemFree_v2, cuMemGetInfo_v2 and the
 * stream-ordered cuMemAllocAsync / cuMemFreeAsync (and their _ptsz twins).
 * Programs linked with the static runtime (nvcc's default) and frameworks
 * that call the driver are cached here; they reach these through the
 * exports, dlsym and cuGetProcAddress (hook_lookup.c).  Calls made while a
 * created context is current use that context's allocator: hook.h,
 * "Contexts".
 */
#include "backend.h"
#include "diag.h"
#include "fail.h"
#include "hook.h"
#include "log.h"
#include "meminfo.h"
#include "real.h"
#include "recorder.h"
#include "state.h"
#include "streams.h"
#include "trace.h"

__attribute__((noinline)) static CUresult cu_oom(hook_dev_t *hd, const hook_fail_t *f)
{
    if (f->oom.backend_error == CORE_EFAIL)
        return hook_backend_error != CUDA_SUCCESS ? hook_backend_error : CUDA_ERROR_OUT_OF_MEMORY;
    hook_report_oom(hd, f);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

__attribute__((noinline)) static CUresult cu_bad_free(CUdeviceptr p, const char *api)
{
    hook_warn(HOOK_WARN_BAD_FREE,
              "%s(0x%llx): not a live allocation (double free, or a pointer inside a block); returning "
              "CUDA_ERROR_INVALID_VALUE, the cache is unchanged",
              api, (unsigned long long)p);
    return CUDA_ERROR_INVALID_VALUE;
}

static inline CUresult cu_alloc(CUdeviceptr *dptr, size_t bytesize)
{
    hook_dev_t *hd;
    core_dev_t *d;
    if (HOOK_UNLIKELY(hook_bypass() || !dptr || bytesize == 0) || !(hd = hook_cu_device(true)) ||
        !(d = hook_dev_core(hd)))
        return CU_REAL(cuMemAlloc_v2, dptr, bytesize);
    hook_fail_t f;
    uintptr_t p = hook_alloc(&(hook_req_t){hd, d, bytesize, 0, hook_site(), HOOK_POOL_ROUTE}, &f);
    if (HOOK_LIKELY(p != 0)) {
        *dptr = (CUdeviceptr)p;
        return CUDA_SUCCESS;
    }
    return cu_oom(hd, &f);
}

static inline CUresult cu_free(CUdeviceptr dptr)
{
    if (HOOK_UNLIKELY(hook_bypass() || dptr == 0))
        return CU_REAL(cuMemFree_v2, dptr);
    hook_dev_t *hd = hook_cu_device(false);
    bool inside;
    core_free_t how = hd ? hook_free_policy(hd) : CORE_FREE_FENCED;
    if (HOOK_LIKELY(hook_free_any(hd, (uintptr_t)dptr, how, 0, &inside) == CORE_FREED))
        return CUDA_SUCCESS;
    if (inside)
        return cu_bad_free(dptr, "cuMemFree");
    CUresult r = CU_REAL(cuMemFree_v2, dptr);
    if (r == CUDA_ERROR_INVALID_VALUE)
        hook_warn(HOOK_WARN_BAD_FREE, "cuMemFree(0x%llx): not a device allocation (neither cucache's nor CUDA's)",
                  (unsigned long long)dptr);
    return r;
}

/* The recorded twins (CUCACHE_TRACE): as in hook_rt_mem.c. */
__attribute__((noinline)) static void record_alloc(unsigned api, CUresult r, CUdeviceptr *dptr, size_t size, CUstream s)
{
    if (r == CUDA_SUCCESS)
        hook_trace_put(TRACE_ALLOC, api, hook_last_dev, (uintptr_t)s, (uint64_t)*dptr, size, 0);
    else
        hook_trace_put(TRACE_ALLOC_FAIL, api, hook_last_dev, (uintptr_t)s, (uint64_t)r, size, 0);
}

__attribute__((noinline)) static void record_free(unsigned api, CUresult r, CUdeviceptr p, CUstream s, uint64_t when)
{
    if (r == CUDA_SUCCESS && p)
        hook_trace_put(TRACE_FREE, api, hook_last_dev, (uintptr_t)s, (uint64_t)p, 0, when);
}

HOOK_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    if (HOOK_LIKELY(!hook_trace_on()))
        return cu_alloc(dptr, bytesize);
    CUresult r = cu_alloc(dptr, bytesize);
    if (dptr)
        record_alloc(TRACE_API_CU_MEM_ALLOC, r, dptr, bytesize, NULL);
    return r;
}

HOOK_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    if (HOOK_LIKELY(!hook_trace_on()))
        return cu_free(dptr);
    uint64_t when = hook_trace_now();
    CUresult r = cu_free(dptr);
    record_free(TRACE_API_CU_MEM_ALLOC, r, dptr, NULL, when);
    return r;
}

HOOK_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    size_t f = 0, t = 0;
    CUresult r = CU_REAL(cuMemGetInfo_v2, &f, &t);
    if (r == CUDA_SUCCESS)
        hook_meminfo_answer(false, f, t, free, total);
    return r;
}

static CUresult cu_alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream s, bool pt)
{
    hook_dev_t *hd;
    core_dev_t *d;
    if (HOOK_UNLIKELY(hook_bypass() || !dptr || bytesize == 0) || !(hd = hook_stream_device(s, false)) ||
        !(d = hook_dev_core(hd)) || hook_stream_capturing(hd, s, pt))
        return pt ? CU_REAL(cuMemAllocAsync_ptsz, dptr, bytesize, s) : CU_REAL(cuMemAllocAsync, dptr, bytesize, s);
    hook_fail_t f;
    uintptr_t p = hook_alloc(&(hook_req_t){hd, d, bytesize, hook_stream_key(s, pt), hook_site(), HOOK_POOL_ROUTE}, &f);
    if (HOOK_LIKELY(p != 0)) {
        *dptr = (CUdeviceptr)p;
        return CUDA_SUCCESS;
    }
    return cu_oom(hd, &f);
}

static CUresult cu_free_async(CUdeviceptr dptr, CUstream s, bool pt)
{
    if (HOOK_UNLIKELY(hook_bypass() || dptr == 0))
        return pt ? CU_REAL(cuMemFreeAsync_ptsz, dptr, s) : CU_REAL(cuMemFreeAsync, dptr, s);
    hook_dev_t *hd = hook_stream_device(s, false);
    bool inside;
    if (HOOK_LIKELY(hook_free_any(hd, (uintptr_t)dptr, CORE_FREE_AFTER_STREAM, hook_stream_key(s, pt), &inside) ==
                    CORE_FREED))
        return CUDA_SUCCESS;
    if (inside)
        return cu_bad_free(dptr, "cuMemFreeAsync");
    return pt ? CU_REAL(cuMemFreeAsync_ptsz, dptr, s) : CU_REAL(cuMemFreeAsync, dptr, s);
}

static CUresult cu_alloc_async_traced(CUdeviceptr *dptr, size_t bytesize, CUstream s, bool pt)
{
    if (HOOK_LIKELY(!hook_trace_on()))
        return cu_alloc_async(dptr, bytesize, s, pt);
    CUresult r = cu_alloc_async(dptr, bytesize, s, pt);
    if (dptr)
        record_alloc(TRACE_API_CU_MEM_ALLOC_ASYNC, r, dptr, bytesize, hook_trace_stream(s, pt));
    return r;
}

static CUresult cu_free_async_traced(CUdeviceptr dptr, CUstream s, bool pt)
{
    if (HOOK_LIKELY(!hook_trace_on()))
        return cu_free_async(dptr, s, pt);
    uint64_t when = hook_trace_now();
    CUresult r = cu_free_async(dptr, s, pt);
    record_free(TRACE_API_CU_MEM_ALLOC_ASYNC, r, dptr, hook_trace_stream(s, pt), when);
    return r;
}

HOOK_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return cu_alloc_async_traced(dptr, bytesize, hStream, false);
}

HOOK_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return cu_alloc_async_traced(dptr, bytesize, hStream, true);
}

HOOK_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return cu_free_async_traced(dptr, hStream, false);
}

HOOK_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return cu_free_async_traced(dptr, hStream, true);
}
