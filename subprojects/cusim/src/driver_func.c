/*
 * Kernel attributes and occupancy: cuFuncGetAttribute, cuFuncSetAttribute,
 * cuFuncSetCacheConfig, cuFuncSetSharedMemConfig, the library API's
 * cuKernelGetAttribute, cuKernelSetAttribute, cuKernelSetCacheConfig,
 * cuKernelGetLibrary, and the occupancy calculator cuOccupancy*.
 *
 * A kernel's attributes are what its image states (module_image.c reads a
 * cubin's .nv.info records and sections, PTX's .maxntid/.reqntid) or the
 * documented defaults (driver_module.c, `unstated`), and what the program
 * set.  Occupancy is computed as CUDA's occupancy calculator does for the
 * modelled H100 (compute capability 9.0), from the limits in `sm90` below,
 * which agree with the device attributes (driver.c): registers are given to
 * warps in units of 256 within four sub-partitions, shared memory to blocks
 * in units of 128 bytes plus the 1 KiB the driver reserves for each block,
 * and the SM's shared memory is the carveout the function prefers, rounded
 * up to one the hardware has.  docs/simulator.md, "Kernel attributes and
 * occupancy".
 */
#include <limits.h>

#include "driver.h"

/* The modelled device's limits the calculator uses (compute capability
 * 9.0; the same values as cuDeviceGetAttribute's). */
static const struct {
    int warp;               /* threads */
    int threads_per_block;  /* MAX_THREADS_PER_BLOCK */
    int threads_per_sm;     /* MAX_THREADS_PER_MULTIPROCESSOR */
    int blocks_per_sm;      /* MAX_BLOCKS_PER_MULTIPROCESSOR */
    int regs_per_sm;        /* MAX_REGISTERS_PER_MULTIPROCESSOR */
    int regs_per_block;     /* MAX_REGISTERS_PER_BLOCK */
    int regs_per_thread;    /* the most a thread may use */
    int reg_unit;           /* registers are given to a warp in multiples of this */
    int sub_partitions;     /* an SM's register files */
    int smem_per_sm;        /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
    int smem_per_block;     /* MAX_SHARED_MEMORY_PER_BLOCK: without opting in */
    int smem_optin;         /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    int smem_reserved;      /* RESERVED_SHARED_MEMORY_PER_BLOCK */
    int smem_unit;          /* shared memory is given to a block in multiples of this */
    int sms;                /* MULTIPROCESSOR_COUNT */
    int cluster_portable;   /* blocks in a cluster, portably */
    int cluster_nonportable; /* with NON_PORTABLE_CLUSTER_SIZE_ALLOWED */
} sm90 = {32, 1024, 2048, 32, 65536, 65536, 255, 256, 4, 233472, 49152, 232448, 1024, 128, 132, 8, 16};

/* The shared memory sizes an SM can be configured with (KiB), smallest
 * first: a carveout is rounded up to one of them. */
static const int sm90_carveouts_kib[] = {0, 8, 16, 32, 64, 100, 132, 164, 196, 228};

static int round_up(int x, int unit)
{
    return (x + unit - 1) / unit * unit;
}

static int imin(int a, int b)
{
    return a < b ? a : b;
}

/* The SM's shared memory configuration that holds `bytes`. */
static int carveout_round(int bytes)
{
    for (size_t i = 0; i < sizeof sm90_carveouts_kib / sizeof sm90_carveouts_kib[0]; i++)
        if (bytes <= sm90_carveouts_kib[i] * 1024)
            return sm90_carveouts_kib[i] * 1024;
    return sm90.smem_per_sm;
}

/* The shared memory of an SM the function prefers (its carveout, else its
 * cache configuration's; none: all of it). */
static int smem_preference(const struct CUfunc_st *f)
{
    /* one row per cache configuration: the carveout it stands for */
    static const int cache_carveout[] = {
        [CU_FUNC_CACHE_PREFER_NONE] = -1,
        [CU_FUNC_CACHE_PREFER_SHARED] = 100,
        [CU_FUNC_CACHE_PREFER_L1] = 0,
        [CU_FUNC_CACHE_PREFER_EQUAL] = 50,
    };
    int percent = f->carveout >= 0 ? f->carveout : cache_carveout[f->cache_config];
    return percent < 0 ? sm90.smem_per_sm : carveout_round(percent * sm90.smem_per_sm / 100);
}

/* The most threads a block of f may have: its launch bounds, and what its
 * registers allow a block (warps in multiples of the sub-partitions). */
static int func_max_threads(const struct CUfunc_st *f)
{
    int per_warp = round_up((int)f->info.regs * sm90.warp, sm90.reg_unit);
    int warps = per_warp ? sm90.regs_per_block / per_warp / sm90.sub_partitions * sm90.sub_partitions : INT_MAX / 64;
    return imin((int)f->info.max_threads, imin(sm90.threads_per_block, warps * sm90.warp));
}

/* The dynamic shared memory a block may ask for before opting in. */
static int default_max_dynamic(const struct CUfunc_st *f)
{
    return sm90.smem_per_block - (int)f->info.shared_bytes;
}

int sim_device_sms(void)
{
    return sm90.sms;
}

void sim_func_defaults(struct CUfunc_st *f)
{
    f->max_dynamic_shared = default_max_dynamic(f);
    f->carveout = -1;
}

/* Blocks of `block` threads and `dyn` dynamic shared bytes that fit on an
 * SM at once: the least of the limits of warps, blocks, registers and
 * shared memory (0: not even one). */
int sim_occupancy_blocks(const struct CUfunc_st *f, int block, size_t dyn)
{
    if (block <= 0 || block > func_max_threads(f) || dyn > (size_t)sm90.smem_optin)
        return 0;
    int warps = (block + sm90.warp - 1) / sm90.warp;
    int by_warps = sm90.threads_per_sm / sm90.warp / warps;
    int regs_warp = round_up((int)f->info.regs * sm90.warp, sm90.reg_unit);
    if ((int)f->info.regs > sm90.regs_per_thread ||
        regs_warp * round_up(warps, sm90.sub_partitions) > sm90.regs_per_block)
        return 0;
    int by_regs = regs_warp ? sm90.regs_per_sm / sm90.sub_partitions / regs_warp * sm90.sub_partitions / warps : INT_MAX;
    int static_smem = (int)f->info.shared_bytes + sm90.smem_reserved;
    int alloc = round_up(static_smem + (int)dyn, sm90.smem_unit);
    bool optin = f->dynamic_optin && static_smem + f->max_dynamic_shared > sm90.smem_per_block;
    int limit = (optin ? sm90.smem_optin : sm90.smem_per_block) + sm90.smem_reserved;
    if ((f->dynamic_optin && (int)dyn > f->max_dynamic_shared) || alloc > limit)
        return 0;
    int pref = smem_preference(f);
    int per_sm = pref >= alloc ? pref : carveout_round(alloc);
    int by_smem = alloc ? per_sm / alloc : INT_MAX;
    return imin(imin(by_warps, sm90.blocks_per_sm), imin(by_regs, by_smem));
}

/* ------------------------------------------------------------------------
 * Attributes
 * ---------------------------------------------------------------------- */

/* One row per attribute: its value, and for a settable one whether a value
 * is accepted and where it goes (NULL: read-only). */
typedef struct func_attr_s {
    int (*get)(const struct CUfunc_st *f);
    bool (*set)(struct CUfunc_st *f, int v);
} func_attr_t;

static int get_max_threads(const struct CUfunc_st *f)
{
    return func_max_threads(f);
}
static int get_shared(const struct CUfunc_st *f)
{
    return (int)f->info.shared_bytes;
}
static int get_const(const struct CUfunc_st *f)
{
    return (int)f->info.const_bytes;
}
static int get_local(const struct CUfunc_st *f)
{
    return (int)f->info.local_bytes;
}
static int get_regs(const struct CUfunc_st *f)
{
    return (int)f->info.regs;
}
static int get_ptx(const struct CUfunc_st *f)
{
    return (int)f->info.ptx_version;
}
static int get_binary(const struct CUfunc_st *f)
{
    return (int)f->info.binary_version;
}
static int get_zero(const struct CUfunc_st *f)
{
    (void)f;
    return 0;
}
static int get_max_dynamic(const struct CUfunc_st *f)
{
    return f->max_dynamic_shared;
}
static bool set_max_dynamic(struct CUfunc_st *f, int v)
{
    if (v < 0 || v > sm90.smem_optin - (int)f->info.shared_bytes)
        return false;
    f->max_dynamic_shared = v;
    f->dynamic_optin = v > default_max_dynamic(f);
    return true;
}
static int get_carveout(const struct CUfunc_st *f)
{
    return f->carveout;
}
static bool set_carveout(struct CUfunc_st *f, int v)
{
    if (v < -1 || v > 100)
        return false;
    f->carveout = v;
    return true;
}
static int get_cluster_w(const struct CUfunc_st *f)
{
    return f->cluster[0];
}
static int get_cluster_h(const struct CUfunc_st *f)
{
    return f->cluster[1];
}
static int get_cluster_d(const struct CUfunc_st *f)
{
    return f->cluster[2];
}
static bool set_cluster(struct CUfunc_st *f, int i, int v)
{
    if (v < 0 || v > (f->nonportable_cluster ? sm90.cluster_nonportable : sm90.cluster_portable))
        return false;
    f->cluster[i] = v;
    return true;
}
static bool set_cluster_w(struct CUfunc_st *f, int v)
{
    return set_cluster(f, 0, v);
}
static bool set_cluster_h(struct CUfunc_st *f, int v)
{
    return set_cluster(f, 1, v);
}
static bool set_cluster_d(struct CUfunc_st *f, int v)
{
    return set_cluster(f, 2, v);
}
static int get_nonportable(const struct CUfunc_st *f)
{
    return f->nonportable_cluster;
}
static bool set_nonportable(struct CUfunc_st *f, int v)
{
    if (v != 0 && v != 1)
        return false;
    f->nonportable_cluster = v;
    return true;
}
static int get_policy(const struct CUfunc_st *f)
{
    return f->cluster_policy;
}
static bool set_policy(struct CUfunc_st *f, int v)
{
    if (v < 0 || v > 2) /* CU_CLUSTER_SCHEDULING_POLICY_DEFAULT, SPREAD, LOAD_BALANCING */
        return false;
    f->cluster_policy = v;
    return true;
}

static const func_attr_t func_attrs[CU_FUNC_ATTRIBUTE_MAX] = {
    [CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = {get_max_threads, NULL},
    [CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES] = {get_shared, NULL},
    [CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES] = {get_const, NULL},
    [CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES] = {get_local, NULL},
    [CU_FUNC_ATTRIBUTE_NUM_REGS] = {get_regs, NULL},
    [CU_FUNC_ATTRIBUTE_PTX_VERSION] = {get_ptx, NULL},
    [CU_FUNC_ATTRIBUTE_BINARY_VERSION] = {get_binary, NULL},
    [CU_FUNC_ATTRIBUTE_CACHE_MODE_CA] = {get_zero, NULL},
    [CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = {get_max_dynamic, set_max_dynamic},
    [CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT] = {get_carveout, set_carveout},
    [CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET] = {get_zero, NULL},
    [CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] = {get_cluster_w, set_cluster_w},
    [CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT] = {get_cluster_h, set_cluster_h},
    [CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH] = {get_cluster_d, set_cluster_d},
    [CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED] = {get_nonportable, set_nonportable},
    [CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE] = {get_policy, set_policy},
};

/* The function h names (a CUfunction, or a CUkernel cast to one, made a
 * function of ctx), or NULL. */
static struct CUfunc_st *func_of(void *h, struct CUctx_st *ctx)
{
    if (handle_is(h, SIM_MAGIC_FUNC))
        return h;
    if (ctx && handle_is(h, SIM_MAGIC_KERNEL))
        return sim_kernel_function(h, ctx);
    return NULL;
}

static CUresult attr_get(int *pi, CUfunction_attribute attrib, struct CUfunc_st *f)
{
    if (!pi || (unsigned)attrib >= CU_FUNC_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *pi = func_attrs[attrib].get(f);
    return CUDA_SUCCESS;
}

static CUresult attr_set(struct CUfunc_st *f, CUfunction_attribute attrib, int value)
{
    if ((unsigned)attrib >= CU_FUNC_ATTRIBUTE_MAX || !func_attrs[attrib].set)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    return func_attrs[attrib].set(f, value) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    return drv_leave(attr_get(pi, attrib, func_of(hfunc, sim_ctx_current())));
}

SIM_API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    return drv_leave(attr_set(func_of(hfunc, sim_ctx_current()), attrib, value));
}

SIM_API CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUfunc_st *f = func_of(hfunc, sim_ctx_current());
    if (!f)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    f->cache_config = config;
    return drv_leave(CUDA_SUCCESS);
}

/* The bank size is a setting of Kepler only: accepted and kept. */
SIM_API CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUfunc_st *f = func_of(hfunc, sim_ctx_current());
    if (!f)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    if ((unsigned)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    f->shared_config = config;
    return drv_leave(CUDA_SUCCESS);
}

/* A library kernel's function on device dev: in the current context when
 * it is dev's, else in dev's primary context when that is active. */
static CUresult kernel_on(CUkernel kernel, CUdevice dev, struct CUfunc_st **out)
{
    if (!handle_is(kernel, SIM_MAGIC_KERNEL))
        return CUDA_ERROR_INVALID_HANDLE;
    if (dev < 0 || dev >= sim.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    struct CUctx_st *ctx = sim_ctx_current();
    if (!sim_ctx_valid(ctx) || ctx->dev->ordinal != dev)
        ctx = sim.dev[dev].primary;
    if (!sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = sim_kernel_function(kernel, ctx);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUfunc_st *f = NULL;
    r = kernel_on(kernel, dev, &f);
    return drv_leave(r != CUDA_SUCCESS ? r : attr_get(pi, attrib, f));
}

SIM_API CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUfunc_st *f = NULL;
    r = kernel_on(kernel, dev, &f);
    return drv_leave(r != CUDA_SUCCESS ? r : attr_set(f, attrib, val));
}

SIM_API CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUfunc_st *f = NULL;
    r = kernel_on(kernel, dev, &f);
    if (r == CUDA_SUCCESS && (unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        f->cache_config = config;
    return drv_leave(r);
}

SIM_API CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pLib)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(kernel, SIM_MAGIC_KERNEL))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    *pLib = kernel->lib;
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Occupancy
 * ---------------------------------------------------------------------- */

/* The flags the calculator takes: CU_OCCUPANCY_DEFAULT and
 * CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE (which changes nothing on a device
 * without partitioned global caching). */
#define OCC_FLAGS 0x1u

/* Enters an occupancy query of func: the function in the current context
 * (a CUkernel too) into *f and CUDA_SUCCESS with the lock held, or the
 * error with it released. */
static CUresult occ_enter(CUfunction func, struct CUfunc_st **f)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    *f = func_of(func, ctx);
    if (!*f)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func, int blockSize,
                                                                      size_t dynamicSMemSize, unsigned int flags)
{
    struct CUfunc_st *f;
    CUresult r = occ_enter(func, &f);
    if (r != CUDA_SUCCESS)
        return r;
    if (!numBlocks || blockSize <= 0 || (flags & ~OCC_FLAGS))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    *numBlocks = sim_occupancy_blocks(f, blockSize, dynamicSMemSize);
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                             size_t dynamicSMemSize)
{
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

/* The block size of the most threads resident on an SM, trying every
 * multiple of the warp size from the largest down (the callback, when
 * given, says the dynamic shared memory of each; it runs without the
 * engine lock), and the grid that fills the device with it. */
SIM_API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
                                                           CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                           size_t dynamicSMemSize, int blockSizeLimit,
                                                           unsigned int flags)
{
    struct CUfunc_st *f;
    CUresult r = occ_enter(func, &f);
    if (r != CUDA_SUCCESS)
        return r;
    if (!minGridSize || !blockSize || blockSizeLimit < 0 || (flags & ~OCC_FLAGS))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    int limit = func_max_threads(f);
    if (blockSizeLimit > 0 && blockSizeLimit < limit)
        limit = blockSizeLimit;
    int best = 0, best_size = 0, best_blocks = 0;
    for (int aligned = round_up(limit, sm90.warp); aligned > 0; aligned -= sm90.warp) {
        int size = imin(limit, aligned);
        size_t dyn = dynamicSMemSize;
        if (blockSizeToDynamicSMemSize) {
            sim_unlock();
            dyn = blockSizeToDynamicSMemSize(size);
            sim_lock();
            if (!handle_is(f, SIM_MAGIC_FUNC)) /* its module unloaded meanwhile */
                return drv_leave(CUDA_ERROR_INVALID_HANDLE);
        }
        int blocks = sim_occupancy_blocks(f, size, dyn);
        if (blocks * size > best) {
            best = blocks * size;
            best_size = size;
            best_blocks = blocks;
        }
        if (best == sm90.threads_per_sm)
            break;
    }
    *minGridSize = best_blocks * sm90.sms;
    *blockSize = best_size;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                                  CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize,
                                                  int blockSizeLimit)
{
    return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                                     dynamicSMemSize, blockSizeLimit, 0);
}

/* The dynamic shared memory each of numBlocks blocks of blockSize threads
 * may have with all of them resident on one SM. */
SIM_API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks,
                                                         int blockSize)
{
    struct CUfunc_st *f;
    CUresult r = occ_enter(func, &f);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (sim_occupancy_blocks(f, blockSize, 0) < numBlocks)
        return drv_leave(CUDA_ERROR_INVALID_VALUE); /* not even without dynamic shared memory */
    int limit = (f->dynamic_optin ? sm90.smem_optin : sm90.smem_per_block) + sm90.smem_reserved;
    int per_sm = numBlocks == 1 ? limit : imin(smem_preference(f), sm90.smem_per_sm);
    if (numBlocks > 1 && per_sm == 0)
        per_sm = carveout_round(1);
    int avail = per_sm / numBlocks / sm90.smem_unit * sm90.smem_unit;
    avail = imin(avail, limit) - (int)f->info.shared_bytes; /* as the calculator: the reserve stays counted */
    if (avail > f->max_dynamic_shared)
        avail = f->max_dynamic_shared;
    *dynamicSmemSize = avail > 0 ? (size_t)avail : 0;
    return drv_leave(CUDA_SUCCESS);
}

/* Clusters: an H100 runs clusters of up to 8 blocks (16 when the function
 * allows a non-portable size), and as many at once as their blocks fit
 * on the SMs of a GPC (the simulated device counts 16 SMs a GPC). */
enum { SIM_SMS_PER_GPC = 16 };

static int cluster_size_limit(const struct CUfunc_st *f)
{
    return f->nonportable_cluster ? sm90.cluster_nonportable : sm90.cluster_portable;
}

SIM_API CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func, const CUlaunchConfig *config)
{
    struct CUfunc_st *f;
    CUresult r = occ_enter(func, &f);
    if (r != CUDA_SUCCESS)
        return r;
    if (!clusterSize || !config)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    int block = (int)(config->blockDimX * config->blockDimY * config->blockDimZ);
    int per_sm = sim_occupancy_blocks(f, block, config->sharedMemBytes);
    *clusterSize = per_sm ? imin(cluster_size_limit(f), per_sm * SIM_SMS_PER_GPC) : 0;
    return drv_leave(CUDA_SUCCESS);
}

/* The cluster size is the launch's cluster-dimension attribute, else the
 * function's required one, else 1. */
SIM_API CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config)
{
    struct CUfunc_st *f;
    CUresult r = occ_enter(func, &f);
    if (r != CUDA_SUCCESS)
        return r;
    if (!numClusters || !config || (config->numAttrs && !config->attrs))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    int block = (int)(config->blockDimX * config->blockDimY * config->blockDimZ);
    unsigned dims[3] = {1, 1, 1};
    if (f->cluster[0])
        for (int i = 0; i < 3; i++)
            dims[i] = f->cluster[i] ? (unsigned)f->cluster[i] : 1;
    sim_launch_cluster_dims(config, dims);
    long cluster = (long)dims[0] * dims[1] * dims[2];
    int per_sm = sim_occupancy_blocks(f, block, config->sharedMemBytes);
    if (cluster > cluster_size_limit(f) || !per_sm) {
        *numClusters = 0;
        return drv_leave(CUDA_SUCCESS);
    }
    int per_gpc = per_sm * SIM_SMS_PER_GPC / (int)cluster;
    *numClusters = per_gpc * (sm90.sms / SIM_SMS_PER_GPC);
    return drv_leave(CUDA_SUCCESS);
}
