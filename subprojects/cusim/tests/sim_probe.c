/*
 * Reports what the simulated device looks like under the CUCACHE_SIM_*
 * variables of its environment, one key=value per line, for test_config:
 *
 *   count=<rc of cudaGetDeviceCount> devices=<n>
 *   total=<bytes, device 0> free=<bytes>
 *   malloc=<rc of a 1 MiB cudaMalloc>
 *   total<d>=<bytes of device d> for every device
 *   ats=<CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES
 *        of device 0>
 *
 * Exit status 0 whatever the answers; the test judges them.
 */
#include "cusim/cuda_api.h"

#include <stdio.h>

int main(void)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    printf("count=%d devices=%d\n", (int)rc, rc == cudaSuccess ? n : 0);
    size_t free_b = 0, total = 0;
    rc = cudaMemGetInfo(&free_b, &total);
    printf("meminfo=%d total=%zu free=%zu\n", (int)rc, total, free_b);
    void *p = NULL;
    rc = cudaMalloc(&p, 1 << 20);
    printf("malloc=%d\n", (int)rc);
    if (rc == cudaSuccess)
        cudaFree(p);
    for (int d = 0; d < n; d++) {
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, d) == cudaSuccess)
            printf("total%d=%zu\n", d, prop.totalGlobalMem);
    }
    int ats = -1;
    if (cuDeviceGetAttribute(&ats, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, 0) != CUDA_SUCCESS)
        ats = -1;
    printf("ats=%d\n", ats);
    fflush(stdout);
    return 0;
}
