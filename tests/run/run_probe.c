/*
 * run_probe: what a command started by cucache-run sees.  It prints, one
 * "key=value" line each, the cucache_version() of the libcucache.so loaded
 * in the process ("none" when dlsym(RTLD_DEFAULT) cannot find it: cucache
 * is not loaded) and the variables cucache-run sets; built with
 * RUN_PROBE_CUDA (run_probe_cuda, linked against libcudart.so.13 by SONAME)
 * also the name and total memory of CUDA device 0, from whichever runtime
 * LD_LIBRARY_PATH made the loader pick.
 *
 * Usage: run_probe [STATUS | term]: exits with STATUS (default 0), or
 * raises SIGTERM, so that check_run.sh can see the status pass through.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RUN_PROBE_CUDA
#include "cusim/cuda_api.h"
#endif

static void print_var(const char *name)
{
    const char *v = getenv(name);
    printf("%s=%s\n", name, v ? v : "(unset)");
}

#ifdef RUN_PROBE_CUDA
static int print_device(void)
{
    struct cudaDeviceProp prop;
    size_t free_bytes = 0, total = 0;
    memset(&prop, 0, sizeof prop);
    cudaError_t rc = cudaGetDeviceProperties(&prop, 0);
    if (rc == cudaSuccess)
        rc = cudaMemGetInfo(&free_bytes, &total);
    if (rc != cudaSuccess) {
        printf("cuda_error=%s\n", cudaGetErrorString(rc));
        return 1;
    }
    printf("device=%s\n", prop.name);
    printf("total=%zu\n", total);
    return 0;
}
#endif

int main(int argc, char **argv)
{
    const char *(*version)(void) = NULL;
    /* POSIX's way from a void * to a function pointer */
    *(void **)&version = dlsym(RTLD_DEFAULT, "cucache_version");
    printf("cucache_version=%s\n", version ? version() : "none");
    static const char *const vars[] = {"LD_PRELOAD",     "LD_LIBRARY_PATH", "CUCACHE_SIM_CAPACITY", "CUCACHE_CONF",
                                       "CUCACHE_REPORT", "CUCACHE_TRACE",   "CUCACHE_SNAPSHOT"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        print_var(vars[i]);
#ifdef RUN_PROBE_CUDA
    if (print_device() != 0)
        return 1;
#endif
    fflush(stdout);
    if (argc > 1 && strcmp(argv[1], "term") == 0)
        raise(SIGTERM);
    return argc > 1 ? atoi(argv[1]) : 0;
}
