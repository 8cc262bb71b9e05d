/*
 * The real entry points, resolved once by exact name into typed tables.
 *
 * The real dlsym comes from dlvsym (GLIBC_2.34, then the first version of the
 * architecture): libcucache exports its own dlsym (hook_lookup.c), so
 * calling the public name from here would find the hook.  The driver table
 * comes from dlopen("libcuda.so.1") — loaded lazily, on the first hooked
 * call, never at load time, so a process that never uses CUDA never loads
 * it.  The runtime table comes from RTLD_NEXT: the runtime the program
 * linked, which comes after libcucache in the search order.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hook.h"
#include "real.h"
#include "submit.h"

void *(*hook_real_dlsym)(void *handle, const char *symbol);
hook_driver_t real_cu;
hook_runtime_t real_rt;

/* ------------------------------------------------------------------------
 * dlsym
 * ---------------------------------------------------------------------- */

/* No pthread_once and no instrumented code here: AddressSanitizer and
 * ThreadSanitizer look up their interceptors' targets with dlsym while they
 * initialise, before their shadow memory exists, and that dlsym is ours.
 * Resolving twice is harmless (every thread finds the same address). */
HOOK_NO_SANITIZE void hook_real_dlsym_init(void)
{
    if (__atomic_load_n(&hook_real_dlsym, __ATOMIC_ACQUIRE))
        return;
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    union {
        void *obj;
        void *(*fn)(void *, const char *);
    } p = {NULL};
    for (size_t i = 0; !p.obj && i < sizeof versions / sizeof versions[0]; i++)
        p.obj = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (!p.obj) {
        /* Nothing can work without it, and returning would make dlsym
         * callers crash somewhere less obvious. */
        static const char msg[] = "cucache: cannot find the C library's dlsym (dlvsym failed); giving up\n";
        (void)!write(2, msg, sizeof msg - 1);
        abort();
    }
    __atomic_store_n(&hook_real_dlsym, p.fn, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------------------
 * Driver
 * ---------------------------------------------------------------------- */

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static bool driver_ok;
static void *driver_handle;

static void *driver_sym(const char *name)
{
    return driver_handle ? hook_real_dlsym(driver_handle, name) : NULL;
}

void *hook_real_driver_sym(const char *name)
{
    return hook_real_driver() ? driver_sym(name) : NULL;
}

/* The entry point `name` of handle into *slot, a function pointer of any
 * type (NULL when absent). */
static void resolve_into(void *handle, const char *name, void *slot)
{
    void *p = hook_real_dlsym(handle, name);
    memcpy(slot, &p, sizeof p);
}

static void resolve_driver(void)
{
    hook_real_dlsym_init();
    driver_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!driver_handle)
        return;
#define RESOLVE(name) resolve_into(driver_handle, #name, &real_cu.name);
    HOOK_DRIVER_FUNCS(RESOLVE)
#undef RESOLVE
    resolve_into(driver_handle, "cuGetProcAddress", &real_cu.cuGetProcAddress);
    for (size_t i = 0; i < hook_nroutes; i++)
        hook_routes[i].real = hook_real_dlsym(driver_handle, hook_routes[i].name);
    hook_submit_resolve_all(driver_sym);
    /* What the allocator cannot do without. */
    driver_ok = real_cu.cuInit && real_cu.cuDeviceGet && real_cu.cuDevicePrimaryCtxRetain && real_cu.cuCtxGetCurrent &&
                real_cu.cuCtxGetDevice && real_cu.cuCtxPushCurrent_v2 && real_cu.cuCtxPopCurrent_v2 &&
                real_cu.cuCtxSynchronize && real_cu.cuMemAlloc_v2 && real_cu.cuMemFree_v2 && real_cu.cuMemGetInfo_v2 &&
                real_cu.cuEventCreate && real_cu.cuEventRecord && real_cu.cuEventQuery && real_cu.cuEventSynchronize &&
                real_cu.cuEventDestroy_v2;
}

atomic_int hook_real_driver_state;

static void resolve_driver_once(void)
{
    resolve_driver();
    atomic_store_explicit(&hook_real_driver_state, driver_ok ? 1 : -1, memory_order_release);
}

bool hook_real_driver_resolve(void)
{
    pthread_once(&driver_once, resolve_driver_once);
    return driver_ok;
}

void *hook_route(void *p)
{
    if (!p || !hook_real_driver())
        return p;
    for (size_t i = 0; i < hook_nroutes; i++)
        if (hook_routes[i].real == p)
            return hook_routes[i].hook;
    return p;
}

/* ------------------------------------------------------------------------
 * Runtime
 * ---------------------------------------------------------------------- */

static pthread_once_t runtime_once = PTHREAD_ONCE_INIT;
static bool runtime_ok;

static void resolve_runtime(void)
{
    hook_real_dlsym_init();
#define RESOLVE(name) resolve_into(RTLD_NEXT, #name, &real_rt.name);
    HOOK_RUNTIME_FUNCS(RESOLVE)
#undef RESOLVE
    runtime_ok = real_rt.cudaGetDevice && real_rt.cudaMalloc && real_rt.cudaFree;
}

atomic_int hook_real_runtime_state;

static void resolve_runtime_once(void)
{
    resolve_runtime();
    atomic_store_explicit(&hook_real_runtime_state, runtime_ok ? 1 : -1, memory_order_release);
}

bool hook_real_runtime_resolve(void)
{
    pthread_once(&runtime_once, resolve_runtime_once);
    return runtime_ok;
}
