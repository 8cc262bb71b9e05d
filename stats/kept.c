/*
 * Memory a library keeps for the life of the process, told from a leak by
 * where it was allocated: one row per library call known to allocate
 * device memory it never frees before exit.  A live allocation at exit
 * whose native call stack passes through a row's function (or, for a row
 * without one, through its library) is that library's, not the program's
 * leak.  Without native frames nothing can be told: the leak check says
 * so (summary.c).
 */
#include <string.h>

#include "st.h"

static const st_kept_t kept_rules[] = {
    /* PyTorch's handle pool gives each (handle, stream) a cuBLAS workspace
     * from its allocator and keeps it in a static map until exit */
    {"libtorch_cuda.so", "getCurrentCUDABlasHandle", "PyTorch",
     "its cuBLAS workspace, one per handle and stream, for the life of the process"},
    {"libtorch_cuda.so", "getCUDABlasLtWorkspace", "PyTorch", "its cuBLASLt workspace, for the life of the process"},
    /* cuBLAS allocates for a handle and frees at cublasDestroy, which
     * frameworks leave to process exit */
    {"libcublas.so", NULL, "libcublas", "a handle's workspace, until cublasDestroy (at exit, if ever)"},
    {"libcublasLt.so", NULL, "libcublasLt", "a handle's workspace, until cublasLtDestroy (at exit, if ever)"},
};

/* The object's file name starts with the row's (any version suffix). */
static bool module_is(const char *module, const char *want)
{
    if (!module)
        return false;
    const char *base = strrchr(module, '/');
    base = base ? base + 1 : module;
    return strncmp(base, want, strlen(want)) == 0;
}

const st_kept_t *st_kept_frames(const st_frame_t *f, size_t n)
{
    for (size_t i = 0; i < n; i++) { /* a Python frame has no module: never a row's */
        for (size_t r = 0; r < sizeof kept_rules / sizeof kept_rules[0]; r++) {
            const st_kept_t *k = &kept_rules[r];
            if (module_is(f[i].module, k->module) && (!k->function || strstr(f[i].name, k->function)))
                return k;
        }
    }
    return NULL;
}

const st_kept_t *st_kept_site(uint32_t site, bool *native)
{
    st_frame_t f[ST_STACK_FRAMES_MAX];
    size_t n = site >= ST_STACK_FIRST ? st_stack_frames(site, f, ST_STACK_FRAMES_MAX) : 0;
    bool any = false;
    for (size_t i = 0; i < n; i++)
        any |= !f[i].python;
    if (native)
        *native = any;
    return st_kept_frames(f, n);
}
