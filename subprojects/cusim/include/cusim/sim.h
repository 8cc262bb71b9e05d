/*
 * Extensions of the simulated CUDA device (cusim), exported by its
 * libcuda.so.1 next to the driver API.  Tests use them to stand in for
 * kernels (work with declared device ranges), to inject a device fault and
 * to read the race detector.  A program linked only with the runtime
 * reaches them with dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD),
 * ...): the runtime opens the driver RTLD_LOCAL, like NVIDIA's, so
 * RTLD_DEFAULT does not see them.  On a real driver they are absent, and
 * the program still runs.  The names keep the cucacheSim prefix (and the
 * settings their CUCACHE_SIM_ one) that programs and tests already use.
 */
#ifndef CUSIM_SIM_H
#define CUSIM_SIM_H

#include "cusim/cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One device range a simulated kernel reads or writes. */
struct cucache_sim_access {
    const void *ptr; /* device address */
    size_t bytes;    /* length of the range */
    int write;       /* 0: read only, 1: written */
};

/* Queue fn(arg) on hStream as if it were a kernel touching the given ranges:
 * it runs on the stream's worker in stream order, and the race detector
 * checks its ranges like those of a copy.  Stream 0 is the legacy stream. */
CUresult cucacheSimLaunch(CUstream hStream, void (*fn)(void *), void *arg, const struct cucache_sim_access *acc,
                          unsigned int nacc);

/* A timed kernel: occupies hStream for `us` microseconds of device time
 * (after what it is ordered behind), touching the given ranges as the race
 * detector sees them; fn(arg), when not NULL, runs on the stream's worker
 * when the time is up (its writes land at the kernel's end). */
CUresult cucacheSimLaunchTimed(CUstream hStream, unsigned int us, void (*fn)(void *), void *arg,
                               const struct cucache_sim_access *acc, unsigned int nacc);

/* An image the simulated device loads (cuModuleLoadData) besides real
 * cubins, fatbins and PTX (cusim's docs/simulator.md, "Modules"): this line, then
 * one kernel name per line.  The runtime builds one for a kernel whose
 * registration is no fatbin. */
#define CUCACHE_SIM_MODULE_MAGIC "cucache-sim-module\n"

/* Queue an operation that faults when it runs, like a kernel dereferencing a
 * bad address: the context gets the sticky CUDA_ERROR_ILLEGAL_ADDRESS. */
CUresult cucacheSimLaunchFault(CUstream hStream);

/* Number of races reported since start (or the last reset), and the text of
 * the last report (returns its length; copies at most len-1 bytes). */
unsigned long cucacheSimRaceCount(void);
size_t cucacheSimLastRace(char *buf, size_t len);
void cucacheSimRaceReset(void);

/* cuDevicePrimaryCtxRetain under a name no interposer hooks: the context a
 * runtime makes by a private path to the driver (tests of what an
 * interposer can still learn, from cuDevicePrimaryCtxGetState). */
CUresult cucacheSimPrimaryCtxRetainUnseen(CUcontext *pctx, CUdevice dev);

/* Number of device allocations and frees the driver has served (cuMemAlloc,
 * cuMemFree, the stream-ordered pools' device-level growth, and physical
 * allocations of the virtual memory API: cuMemCreate, and their memory given
 * back), for tests that prove a cache avoided them. */
unsigned long cucacheSimDeviceAllocs(void);
unsigned long cucacheSimDeviceFrees(void);

/* Takes the lock of the table of the device shared between processes
 * (CUCACHE_SIM_SHARED) and keeps it, for tests that kill a process holding
 * it.  CUDA_ERROR_NOT_SUPPORTED when the device is not shared. */
CUresult cucacheSimSharedHoldLock(void);

/* The calls of the virtual memory API (cuMemAddressReserve ...
 * cuMemSetAccess), for their costs (CUCACHE_SIM_VMM_US) and for failure
 * injection. */
enum cucache_sim_vmm_call {
    CUCACHE_SIM_VMM_RESERVE,
    CUCACHE_SIM_VMM_ADDRESS_FREE,
    CUCACHE_SIM_VMM_CREATE,
    CUCACHE_SIM_VMM_RELEASE,
    CUCACHE_SIM_VMM_MAP,
    CUCACHE_SIM_VMM_UNMAP,
    CUCACHE_SIM_VMM_SET_ACCESS,
};

/* Makes a call of the virtual memory API fail: after `after` more calls of
 * that kind succeed, the next one returns `error` (once) and changes
 * nothing.  error CUDA_SUCCESS cancels. */
void cucacheSimVmmFail(enum cucache_sim_vmm_call call, unsigned after, CUresult error);

/* What the virtual memory API holds now: address reservations, physical
 * allocations (created or imported, not yet given back) and mappings. */
void cucacheSimVmmCounts(size_t *reservations, size_t *allocations, size_t *mappings);

/* Test only: plants a bug in the stream-ordered pools.  While on, a block
 * reused by an inserted dependency (CUDA's ReuseAllowInternalDependencies,
 * once the device is out of memory) is handed over without the inserted
 * wait, so a test can prove the race detector catches what that wait
 * prevents.  Never set by anything but such a test. */
void cucacheSimPlantReuseWithoutWait(int on);

#ifdef __cplusplus
}
#endif

#endif
