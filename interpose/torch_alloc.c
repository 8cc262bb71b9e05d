/*
 * PyTorch's pluggable allocator (issue 15): the entry points
 * torch.cuda.memory.CUDAPluggableAllocator loads by name from this library,
 *
 *   void *cucache_torch_malloc(size_t size, int device, cudaStream_t stream);
 *   void  cucache_torch_free(void *ptr, size_t size, int device, cudaStream_t stream);
 *
 * (PyTorch's MallocFuncType and FreeFuncType), and the optional ones its C++
 * setters take: init(int device_count), record_stream(void *ptr,
 * cudaStream_t stream), empty_cache(void), memory_fraction(double fraction,
 * int device).  With them a PyTorch program keeps
 * PyTorch's caching allocator turned off in favour of cucache's while it
 * keeps PyTorch's stream semantics, which are cudaMallocAsync's: a block
 * allocated for stream S and freed on S is reusable at once on S (stream
 * order); freed on another stream it waits for an event there; a block
 * record_stream marked as used on other streams waits for the device-wide
 * fence.  Reports, snapshots, traces, limits and the replay then cover
 * PyTorch's tensors too (python/cucache/torch.py plugs them in).
 *
 * These run in the process whether or not libcucache.so was preloaded
 * (PyTorch dlopens it by path): the allocator starts at the first call.
 */
#include "cucache/cucache.h"
#include "hook.h"

#define CUCACHE_EXPORT __attribute__((visibility("default")))

/* The device's allocator, opened at its first use; NULL when the device
 * does not exist or cucache is off. */
static core_dev_t *torch_device(int device, hook_dev_t **hd)
{
    if (hook_bypass() || (*hd = hook_dev_open(device)) == NULL)
        return NULL;
    return hook_dev_core(*hd);
}

CUCACHE_EXPORT void *cucache_torch_malloc(size_t size, int device, void *stream)
{
    hook_dev_t *hd;
    core_dev_t *d = torch_device(device, &hd);
    if (!d) {
        hook_warn(HOOK_WARN_BACKEND, "cucache_torch_malloc(%zu, device %d): no such device, or cucache is off", size,
                  device);
        return NULL;
    }
    core_oom_t oom;
    uintptr_t p = core_malloc_site(d, size, hook_stream_key((CUstream)stream, false), hook_site(), &oom);
    if (HOOK_LIKELY(p != 0))
        return (void *)p;
    hook_report_oom(hd, &oom); /* PyTorch raises its OutOfMemoryError on NULL */
    return NULL;
}

CUCACHE_EXPORT void cucache_torch_free(void *ptr, size_t size, int device, void *stream)
{
    (void)size;
    if (!ptr)
        return;
    hook_dev_t *hd = (unsigned)device < HOOK_MAX_DEVICES ? &hook_devs[device] : NULL;
    bool inside;
    if (hook_free_any(hd, (uintptr_t)ptr, CORE_FREE_AFTER_STREAM, hook_stream_key((CUstream)stream, false), &inside) !=
        CORE_FREED)
        hook_warn(HOOK_WARN_BAD_FREE,
                  "cucache_torch_free(%p, device %d): not a live allocation of cucache's (%s); nothing freed", ptr,
                  device, inside ? "a double free, or a pointer inside a block" : "a foreign pointer");
}

CUCACHE_EXPORT void cucache_torch_init(int device_count)
{
    (void)device_count; /* devices open at their first allocation */
}

CUCACHE_EXPORT void cucache_torch_record_stream(void *ptr, void *stream)
{
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        core_dev_t *d = hook_dev_core(&hook_devs[i]);
        if (d && core_record_stream(d, (uintptr_t)ptr, hook_stream_key((CUstream)stream, false)) == CORE_FREED)
            return;
    }
    hook_warn(HOOK_WARN_BAD_FREE, "cucache_torch_record_stream(%p): not a live allocation of cucache's", ptr);
}

CUCACHE_EXPORT void cucache_torch_memory_fraction(double fraction, int device)
{
    hook_dev_t *hd;
    core_dev_t *d = torch_device(device, &hd); /* opens it: PyTorch may set the fraction first */
    if (!d || core_set_memory_fraction(d, fraction) != 0)
        hook_warn(HOOK_WARN_BACKEND,
                  "cucache_torch_memory_fraction(%g, device %d): not set (a fraction outside (0, 1], or no "
                  "such device)",
                  fraction, device);
}

CUCACHE_EXPORT void cucache_torch_empty_cache(void)
{
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        if (hook_dev_core(&hook_devs[i]))
            cucache_empty_cache(i);
}
