/*
 * A framework's own cache in front of cucache (framework.h's table): said
 * once, when the first device opens, with what to do about it; and, with
 * that cache off, whether a failed cudaMalloc reaches the framework as its
 * out-of-memory exception.
 */
#include "framework.h"

#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static _Atomic bool pluggable; /* cucache is the framework's allocator */
static atomic_flag checked = ATOMIC_FLAG_INIT;

/* Called on every allocation of the pluggable route: a load of a line that
 * is written once, not a store each time. */
void hook_framework_pluggable(void)
{
    if (!atomic_load_explicit(&pluggable, memory_order_relaxed))
        atomic_store_explicit(&pluggable, true, memory_order_relaxed);
}

static int find_library(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    return info->dlpi_name && strstr(info->dlpi_name, (const char *)arg) != NULL;
}

/* Whether the row's framework is in the process with its cache on. */
static bool cache_on(const hook_framework_t *fw)
{
    if (getenv(fw->off_var))
        return false;
    const char *route = getenv(fw->route_var);
    if (route && strstr(route, fw->route_value))
        return false;
    return dl_iterate_phdr(find_library, (void *)fw->library) != 0;
}

void hook_framework_check(void)
{
    if (atomic_flag_test_and_set(&checked) || atomic_load_explicit(&pluggable, memory_order_relaxed))
        return;
    for (size_t i = 0; i < HOOK_NFRAMEWORKS; i++) {
        const hook_framework_t *fw = &hook_frameworks[i];
        if (cache_on(fw))
            hook_log("%s's own caching allocator is on (%s is not set): freed tensors stay in its cache, so cucache "
                     "serves and reports its segments, not its tensors. Set %s=%s (cucache-run does, unless %s), %s.",
                     fw->name, fw->off_var, fw->off_var, fw->off_value, fw->keep_option, fw->advice);
    }
}

bool hook_framework_throws_oom(const void *caller)
{
    Dl_info info;
    if (!dladdr(caller, &info) || !info.dli_fname)
        return false;
    for (size_t i = 0; i < HOOK_NFRAMEWORKS; i++) {
        const hook_framework_t *fw = &hook_frameworks[i];
        if (fw->oom_throw && getenv(fw->off_var) && strstr(info.dli_fname, fw->library))
            return true;
    }
    return false;
}
