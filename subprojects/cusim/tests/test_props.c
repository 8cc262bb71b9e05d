/*
 * Proves that cudaGetDeviceProperties and cudaDeviceGetAttribute answer from
 * the driver's table of device attributes: every field of struct
 * cudaDeviceProp that has a CUdevice_attribute equals cuDeviceGetAttribute's
 * answer (this file's own table of fields, checked to cover the whole
 * struct), and so does cudaDeviceGetAttribute; the fields a program sizes
 * its work by hold an H100 SXM5's values (docs/simulator.md cites them).
 */
#include "simtest.h"

#include <stddef.h>
#include <string.h>

typedef struct prop_field_s {
    const char *name;
    size_t off, size;
    CUdevice_attribute attr;
} prop_field_t;

#define F(field, attr)                                                                                                 \
    {#field, offsetof(struct cudaDeviceProp, field), sizeof(((struct cudaDeviceProp *)0)->field),                      \
     CU_DEVICE_ATTRIBUTE_##attr}

/* The fields with an attribute, in struct order (CUDA 13's driver_types.h
 * names the attribute of each in cudaGetDeviceProperties' documentation). */
static const prop_field_t fields[] = {
    F(sharedMemPerBlock, MAX_SHARED_MEMORY_PER_BLOCK),
    F(regsPerBlock, MAX_REGISTERS_PER_BLOCK),
    F(warpSize, WARP_SIZE),
    F(memPitch, MAX_PITCH),
    F(maxThreadsPerBlock, MAX_THREADS_PER_BLOCK),
    F(maxThreadsDim[0], MAX_BLOCK_DIM_X),
    F(maxThreadsDim[1], MAX_BLOCK_DIM_Y),
    F(maxThreadsDim[2], MAX_BLOCK_DIM_Z),
    F(maxGridSize[0], MAX_GRID_DIM_X),
    F(maxGridSize[1], MAX_GRID_DIM_Y),
    F(maxGridSize[2], MAX_GRID_DIM_Z),
    F(totalConstMem, TOTAL_CONSTANT_MEMORY),
    F(major, COMPUTE_CAPABILITY_MAJOR),
    F(minor, COMPUTE_CAPABILITY_MINOR),
    F(textureAlignment, TEXTURE_ALIGNMENT),
    F(texturePitchAlignment, TEXTURE_PITCH_ALIGNMENT),
    F(multiProcessorCount, MULTIPROCESSOR_COUNT),
    F(integrated, INTEGRATED),
    F(canMapHostMemory, CAN_MAP_HOST_MEMORY),
    F(maxTexture1D, MAXIMUM_TEXTURE1D_WIDTH),
    F(maxTexture1DMipmap, MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH),
    F(maxTexture2D[0], MAXIMUM_TEXTURE2D_WIDTH),
    F(maxTexture2D[1], MAXIMUM_TEXTURE2D_HEIGHT),
    F(maxTexture2DMipmap[0], MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH),
    F(maxTexture2DMipmap[1], MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT),
    F(maxTexture2DLinear[0], MAXIMUM_TEXTURE2D_LINEAR_WIDTH),
    F(maxTexture2DLinear[1], MAXIMUM_TEXTURE2D_LINEAR_HEIGHT),
    F(maxTexture2DLinear[2], MAXIMUM_TEXTURE2D_LINEAR_PITCH),
    F(maxTexture2DGather[0], MAXIMUM_TEXTURE2D_GATHER_WIDTH),
    F(maxTexture2DGather[1], MAXIMUM_TEXTURE2D_GATHER_HEIGHT),
    F(maxTexture3D[0], MAXIMUM_TEXTURE3D_WIDTH),
    F(maxTexture3D[1], MAXIMUM_TEXTURE3D_HEIGHT),
    F(maxTexture3D[2], MAXIMUM_TEXTURE3D_DEPTH),
    F(maxTexture3DAlt[0], MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE),
    F(maxTexture3DAlt[1], MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE),
    F(maxTexture3DAlt[2], MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE),
    F(maxTextureCubemap, MAXIMUM_TEXTURECUBEMAP_WIDTH),
    F(maxTexture1DLayered[0], MAXIMUM_TEXTURE1D_LAYERED_WIDTH),
    F(maxTexture1DLayered[1], MAXIMUM_TEXTURE1D_LAYERED_LAYERS),
    F(maxTexture2DLayered[0], MAXIMUM_TEXTURE2D_LAYERED_WIDTH),
    F(maxTexture2DLayered[1], MAXIMUM_TEXTURE2D_LAYERED_HEIGHT),
    F(maxTexture2DLayered[2], MAXIMUM_TEXTURE2D_LAYERED_LAYERS),
    F(maxTextureCubemapLayered[0], MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH),
    F(maxTextureCubemapLayered[1], MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS),
    F(maxSurface1D, MAXIMUM_SURFACE1D_WIDTH),
    F(maxSurface2D[0], MAXIMUM_SURFACE2D_WIDTH),
    F(maxSurface2D[1], MAXIMUM_SURFACE2D_HEIGHT),
    F(maxSurface3D[0], MAXIMUM_SURFACE3D_WIDTH),
    F(maxSurface3D[1], MAXIMUM_SURFACE3D_HEIGHT),
    F(maxSurface3D[2], MAXIMUM_SURFACE3D_DEPTH),
    F(maxSurface1DLayered[0], MAXIMUM_SURFACE1D_LAYERED_WIDTH),
    F(maxSurface1DLayered[1], MAXIMUM_SURFACE1D_LAYERED_LAYERS),
    F(maxSurface2DLayered[0], MAXIMUM_SURFACE2D_LAYERED_WIDTH),
    F(maxSurface2DLayered[1], MAXIMUM_SURFACE2D_LAYERED_HEIGHT),
    F(maxSurface2DLayered[2], MAXIMUM_SURFACE2D_LAYERED_LAYERS),
    F(maxSurfaceCubemap, MAXIMUM_SURFACECUBEMAP_WIDTH),
    F(maxSurfaceCubemapLayered[0], MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH),
    F(maxSurfaceCubemapLayered[1], MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS),
    F(surfaceAlignment, SURFACE_ALIGNMENT),
    F(concurrentKernels, CONCURRENT_KERNELS),
    F(ECCEnabled, ECC_ENABLED),
    F(pciBusID, PCI_BUS_ID),
    F(pciDeviceID, PCI_DEVICE_ID),
    F(pciDomainID, PCI_DOMAIN_ID),
    F(tccDriver, TCC_DRIVER),
    F(asyncEngineCount, ASYNC_ENGINE_COUNT),
    F(unifiedAddressing, UNIFIED_ADDRESSING),
    F(memoryBusWidth, GLOBAL_MEMORY_BUS_WIDTH),
    F(l2CacheSize, L2_CACHE_SIZE),
    F(persistingL2CacheMaxSize, MAX_PERSISTING_L2_CACHE_SIZE),
    F(maxThreadsPerMultiProcessor, MAX_THREADS_PER_MULTIPROCESSOR),
    F(streamPrioritiesSupported, STREAM_PRIORITIES_SUPPORTED),
    F(globalL1CacheSupported, GLOBAL_L1_CACHE_SUPPORTED),
    F(localL1CacheSupported, LOCAL_L1_CACHE_SUPPORTED),
    F(sharedMemPerMultiprocessor, MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
    F(regsPerMultiprocessor, MAX_REGISTERS_PER_MULTIPROCESSOR),
    F(managedMemory, MANAGED_MEMORY),
    F(isMultiGpuBoard, MULTI_GPU_BOARD),
    F(multiGpuBoardGroupID, MULTI_GPU_BOARD_GROUP_ID),
    F(hostNativeAtomicSupported, HOST_NATIVE_ATOMIC_SUPPORTED),
    F(pageableMemoryAccess, PAGEABLE_MEMORY_ACCESS),
    F(concurrentManagedAccess, CONCURRENT_MANAGED_ACCESS),
    F(computePreemptionSupported, COMPUTE_PREEMPTION_SUPPORTED),
    F(canUseHostPointerForRegisteredMem, CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM),
    F(cooperativeLaunch, COOPERATIVE_LAUNCH),
    F(sharedMemPerBlockOptin, MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
    F(pageableMemoryAccessUsesHostPageTables, PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES),
    F(directManagedMemAccessFromHost, DIRECT_MANAGED_MEM_ACCESS_FROM_HOST),
    F(maxBlocksPerMultiProcessor, MAX_BLOCKS_PER_MULTIPROCESSOR),
    F(accessPolicyMaxWindowSize, MAX_ACCESS_POLICY_WINDOW_SIZE),
    F(reservedSharedMemPerBlock, RESERVED_SHARED_MEMORY_PER_BLOCK),
    F(hostRegisterSupported, HOST_REGISTER_SUPPORTED),
    F(sparseCudaArraySupported, SPARSE_CUDA_ARRAY_SUPPORTED),
    F(hostRegisterReadOnlySupported, READ_ONLY_HOST_REGISTER_SUPPORTED),
    F(timelineSemaphoreInteropSupported, TIMELINE_SEMAPHORE_INTEROP_SUPPORTED),
    F(memoryPoolsSupported, MEMORY_POOLS_SUPPORTED),
    F(gpuDirectRDMASupported, GPU_DIRECT_RDMA_SUPPORTED),
    F(gpuDirectRDMAFlushWritesOptions, GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS),
    F(gpuDirectRDMAWritesOrdering, GPU_DIRECT_RDMA_WRITES_ORDERING),
    F(memoryPoolSupportedHandleTypes, MEMPOOL_SUPPORTED_HANDLE_TYPES),
    F(deferredMappingCudaArraySupported, DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED),
    F(ipcEventSupported, IPC_EVENT_SUPPORTED),
    F(clusterLaunch, CLUSTER_LAUNCH),
    F(unifiedFunctionPointers, UNIFIED_FUNCTION_POINTERS),
    F(deviceNumaConfig, NUMA_CONFIG),
    F(deviceNumaId, NUMA_ID),
    F(mpsEnabled, MPS_ENABLED),
    F(hostNumaId, HOST_NUMA_ID),
    F(gpuPciDeviceID, GPU_PCI_DEVICE_ID),
    F(gpuPciSubsystemID, GPU_PCI_SUBSYSTEM_ID),
    F(hostNumaMultinodeIpcSupported, HOST_NUMA_MULTINODE_IPC_SUPPORTED),
};
#undef F

#define NFIELDS (sizeof fields / sizeof fields[0])

/* The fields without an attribute: their own driver calls, Windows-only
 * ones and the reserved tail. */
#define G(field) {#field, offsetof(struct cudaDeviceProp, field), sizeof(((struct cudaDeviceProp *)0)->field), 0}
static const prop_field_t others[] = {
    G(name), G(uuid), G(luid), G(luidDeviceNodeMask), G(totalGlobalMem), G(reserved),
};
#undef G

static long long field_value(const struct cudaDeviceProp *p, const prop_field_t *f)
{
    if (f->size == sizeof(size_t)) {
        size_t v;
        memcpy(&v, (const char *)p + f->off, sizeof v);
        return (long long)v;
    }
    int v;
    memcpy(&v, (const char *)p + f->off, sizeof v);
    return v;
}

static const prop_field_t *field_at(size_t off)
{
    for (size_t i = 0; i < NFIELDS; i++)
        if (fields[i].off == off)
            return &fields[i];
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (others[i].off == off)
            return &others[i];
    return NULL;
}

/* The two tables tile the struct: every byte is a listed field's, or
 * padding before a field the compiler had to align. */
static void test_the_table_covers_every_field(void **state)
{
    (void)state;
    size_t off = 0;
    while (off < sizeof(struct cudaDeviceProp)) {
        const prop_field_t *f = field_at(off);
        if (!f) {
            size_t next = off;
            while (next < sizeof(struct cudaDeviceProp) && !field_at(next))
                next++;
            const prop_field_t *n = field_at(next);
            size_t align = n && n->size < sizeof(size_t) ? n->size : sizeof(size_t); /* at the end: the struct's */
            bool padding = next - off < align && next % align == 0 && off % align != 0;
            if (!padding)
                fail_msg("bytes [%zu, %zu) of struct cudaDeviceProp are no listed field%s%s%s", off, next,
                         n ? " (before " : "", n ? n->name : "", n ? ")" : "");
            off = next;
            continue;
        }
        off += f->size;
    }
}

/* Every field with an attribute: the struct, cuDeviceGetAttribute and
 * cudaDeviceGetAttribute agree. */
static void test_properties_equal_the_driver_attributes(void **state)
{
    (void)state;
    struct cudaDeviceProp p;
    memset(&p, 0x5a, sizeof p);
    SIM_OK(cudaGetDeviceProperties(&p, 0));
    CUdevice dev;
    CU_OK(cuDeviceGet(&dev, 0));
    for (size_t i = 0; i < NFIELDS; i++) {
        const prop_field_t *f = &fields[i];
        int drv = -7, rt = -7;
        CU_OK(cuDeviceGetAttribute(&drv, f->attr, dev));
        SIM_OK(cudaDeviceGetAttribute(&rt, (enum cudaDeviceAttr)f->attr, 0));
        long long got = field_value(&p, f);
        if (got != drv || rt != drv)
            fail_msg("cudaDeviceProp.%s is %lld, cudaDeviceGetAttribute %d, cuDeviceGetAttribute(%d) %d", f->name, got,
                     rt, (int)f->attr, drv);
    }
    char name[256];
    CU_OK(cuDeviceGetName(name, sizeof name, dev));
    assert_string_equal(p.name, name);
    size_t total = 0;
    CU_OK(cuDeviceTotalMem_v2(&total, dev));
    assert_int_equal(p.totalGlobalMem, total);
}

/* An H100 SXM5 (compute capability 9.0). */
static void test_h100_values(void **state)
{
    (void)state;
    struct cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    SIM_OK(cudaGetDeviceProperties(&p, 0));
    assert_true(strstr(p.name, "H100") != NULL);
    assert_int_equal(p.major, 9);
    assert_int_equal(p.minor, 0);
    assert_int_equal(p.multiProcessorCount, 132);
    assert_int_equal(p.cooperativeLaunch, 1);
    assert_int_equal(p.persistingL2CacheMaxSize, 41943040);
    assert_int_equal(p.totalConstMem, 65536);
    assert_int_equal(p.regsPerBlock, 65536);
    assert_int_equal(p.regsPerMultiprocessor, 65536);
    assert_int_equal(p.maxThreadsDim[0], 1024);
    assert_int_equal(p.maxThreadsDim[1], 1024);
    assert_int_equal(p.maxThreadsDim[2], 64);
    assert_int_equal(p.maxGridSize[0], 2147483647);
    assert_int_equal(p.maxGridSize[1], 65535);
    assert_int_equal(p.maxGridSize[2], 65535);
    assert_int_equal(p.memPitch, 2147483647);
    assert_int_equal(p.textureAlignment, 512);
    assert_int_equal(p.texturePitchAlignment, 32);
    assert_int_equal(p.surfaceAlignment, 512);
    assert_int_equal(p.sharedMemPerBlock, 49152);
    assert_int_equal(p.sharedMemPerBlockOptin, 232448);
    assert_int_equal(p.sharedMemPerMultiprocessor, 233472);
    assert_int_equal(p.reservedSharedMemPerBlock, 1024);
    assert_int_equal(p.maxBlocksPerMultiProcessor, 32);
    assert_int_equal(p.maxThreadsPerMultiProcessor, 2048);
    assert_int_equal(p.l2CacheSize, 52428800);
    assert_int_equal(p.memoryBusWidth, 5120);
    assert_int_equal(p.clusterLaunch, 1);
    assert_int_equal(p.accessPolicyMaxWindowSize, 134213632);
    assert_int_equal(p.gpuPciDeviceID, 0x233010DEu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SIMTEST(test_the_table_covers_every_field),
        SIMTEST(test_properties_equal_the_driver_attributes),
        SIMTEST(test_h100_values),
    };
    return cmocka_run_group_tests_name("sim.props", tests, simtest_group_setup, NULL);
}
