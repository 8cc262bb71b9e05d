/*
 * Frameworks that keep a cache of their own in front of cudaMalloc, one row
 * each.  Under such a cache cucache sees only the framework's segments:
 * freed tensors stay in the framework's cache, cucache's reports show
 * segments, not tensors, and two caches hold memory where one would.
 * Read by cucache-run, which turns the cache off unless told to keep it,
 * and by libcucache.so (framework.c), which says once, when it opens its
 * first device, that a framework in the process has its cache on.
 */
#ifndef CUCACHE_INTERPOSE_FRAMEWORK_H
#define CUCACHE_INTERPOSE_FRAMEWORK_H

#include <stdbool.h>

typedef struct hook_framework_s {
    const char *name;        /* as users call it */
    const char *library;     /* part of the file name of one of its libraries: it is in the process */
    const char *off_var;     /* the variable that turns its cache off; the framework reads only whether it is set */
    const char *off_value;   /* what cucache-run sets it to */
    const char *keep_option; /* cucache-run's option that leaves the cache on */
    const char *route_var;   /* a variable that can route its allocations around its cache... */
    const char *route_value; /* ...when its value contains this */
    const char *advice;      /* what else serves the framework's tensors from cucache */
    /* with its cache off, the framework checks its own cudaMalloc calls
     * like any CUDA call (a generic error), where its cache would raise its
     * out-of-memory error: a failed cudaMalloc that the library calls is
     * thrown to it as that error (hook_framework_throws_oom) */
    bool oom_throw;
} hook_framework_t;

static const hook_framework_t hook_frameworks[] = {
    {"PyTorch", "libc10_cuda.so", "PYTORCH_NO_CUDA_MEMORY_CACHING", "1", "--keep-torch-cache",
     "PYTORCH_CUDA_ALLOC_CONF", "cudaMallocAsync", "or call cucache.torch.enable() before the first CUDA tensor", true},
};

#define HOOK_NFRAMEWORKS (sizeof hook_frameworks / sizeof hook_frameworks[0])

/* libcucache.so (framework.c): the check, once, at the first device opened;
 * and the note that the program made cucache its framework's allocator
 * (PyTorch's pluggable allocator: no cache of the framework's in front). */
void hook_framework_check(void);
void hook_framework_pluggable(void);
/* Whether a cudaMalloc that failed, called from `caller` (its return
 * address), is thrown to a framework with its cache off as its
 * out-of-memory error (the row's oom_throw): caller lies in the row's
 * library, which catches C++ exceptions, and its cache-off variable is
 * set (with its cache on, the framework handles the failure itself: it
 * frees its cache and tries again). */
bool hook_framework_throws_oom(const void *caller);

#endif
