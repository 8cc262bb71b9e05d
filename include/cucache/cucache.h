/*
 * cucache's public API, exported by libcucache.so next to the CUDA hooks.
 *
 * A program run under cucache (LD_PRELOAD=libcucache.so, or cucache-run)
 * reaches these with dlsym(RTLD_DEFAULT, "cucache_stat") or Python's
 * ctypes.CDLL(None).cucache_stat, so that the same program still runs
 * without cucache.  Nothing here calls CUDA except where a comment says so;
 * all of it is thread-safe.
 *
 * Devices are CUDA ordinals (cudaGetDevice's numbering).  A device has
 * allocator state once the program allocated on it through cucache; before
 * that the calls below answer -1.
 */
#ifndef CUCACHE_H
#define CUCACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of cucache, "MAJOR.MINOR.PATCH". */
const char *cucache_version(void);

/* "jemalloc" or "libc": the allocator of cucache's own host-side metadata. */
const char *cucache_hostalloc_backend(void);

/* Calls fn once per statistic of the device, with PyTorch's flat key names
 * (torch.cuda.memory_stats(): "allocated_bytes.all.current", "num_ooms",
 * ...) plus cucache's own ("num_cache_hits", "num_fences", ...).  Returns
 * the number of keys, or -1 when the device has no allocator state. */
int cucache_stats_foreach(int device, void (*fn)(void *ctx, const char *key, int64_t value), void *ctx);

/* One statistic by key: 0 and *value set, or -1 (unknown key or device). */
int cucache_stat(int device, const char *key, int64_t *value);

/* torch.cuda.reset_peak_memory_stats(): every peak := its current value. */
int cucache_reset_peak_stats(int device);

/* torch.cuda.empty_cache(): waits for pending frees and returns every free
 * cached segment of the device to CUDA (this calls CUDA).  0 or -1. */
int cucache_empty_cache(int device);

/* torch.cuda.reset_accumulated_memory_stats(): zeroes every total
 * allocated/freed and the counters (num_ooms, num_alloc_retries, ...). */
int cucache_reset_accumulated_stats(int device);

/* torch.cuda.memory_summary(): the device's summary table (the one
 * CUCACHE_REPORT=exit prints), as text with a newline after each line,
 * written into buf (always terminated when len > 0, cut short when too
 * small).  Returns the length of the whole text (like snprintf: call again
 * with a larger buffer when it is >= len), or -1 when the device has no
 * allocator state. */
long cucache_memory_summary(int device, char *buf, size_t len);

/* torch.cuda.memory._dump_snapshot(): writes a snapshot of every device
 * (segments, blocks, recent events when recorded) as a pickle PyTorch's
 * memory viewer opens, and the same content as JSON beside it (x.pickle ->
 * x.json).  path may use %p (pid), %r (rank), %d (device: "all"), %n (a
 * sequence number) and %%; NULL uses CUCACHE_SNAPSHOT.  The file is written
 * whole (temporary file, then rename); a symbolic link at path is refused.
 * One line on stderr says where it went or why not.  0 or -1. */
int cucache_snapshot(const char *path);

/* Starts or stops recording at run time, as
 * torch.cuda.memory._record_memory_history does: max_entries > 0 keeps the
 * last max_entries allocator events of each device for snapshots'
 * device_traces (devices opened later too), 0 stops recording (what was
 * recorded stays for the next snapshot).  stacks: record each allocation's
 * native call stack with that many frames (1-64), 0 stop, -1 leave as it
 * is.  0, or -1 with a line saying why (no libunwind.so.8, a bad value). */
int cucache_record_memory_history(size_t max_entries, int stacks);

/* The same, with stacks as CUCACHE_STACKS takes them: "native",
 * "python", "python+native", each with ":DEPTH" (1-64, 24 by default), or
 * "off"; NULL leaves them as they are.  A Python mode needs a CPython
 * (3.11 or later) in the process.  0, or -1 with a line saying why. */
int cucache_record_memory_history_stacks(size_t max_entries, const char *stacks);

/* PyTorch's pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator:
 * its MallocFuncType and FreeFuncType; stream is a cudaStream_t): allocate
 * for `stream` on `device` (when it cannot: an OOM report, then a C++
 * std::runtime_error thrown to the caller, PyTorch; NULL only in a process
 * without libstdc++ loaded), free as
 * PyTorch's allocator does (reusable at once on the block's own stream;
 * after an event on another).  The optional ones: init, record_stream (the
 * block is also used on `stream`: its free waits for the device-wide
 * fence), empty_cache (every device), memory_fraction (PyTorch's
 * set_memory_fraction_fn order: fraction, device).  python/cucache/torch.py
 * plugs the first two into PyTorch.  cucache_set_per_process_memory_fraction
 * is torch.cuda.set_per_process_memory_fraction: 0, or -1 for a fraction
 * outside (0, 1] or a device without allocator state. */
int cucache_set_per_process_memory_fraction(double fraction, int device);
void *cucache_torch_malloc(size_t size, int device, void *stream);
void cucache_torch_free(void *ptr, size_t size, int device, void *stream);
void cucache_torch_init(int device_count);
void cucache_torch_record_stream(void *ptr, void *stream);
void cucache_torch_empty_cache(void);
void cucache_torch_memory_fraction(double fraction, int device);
/* PyTorch's pool hooks (set_begin_allocate_to_pool, set_end_allocate_to_pool_fn,
 * set_release_pool): CUDA graph capture and torch.cuda.MemPool.  id is
 * PyTorch's MempoolId_t; filter is PyTorch's std::function<bool(cudaStream_t)>
 * (libstdc++'s), passed by reference as a C++ caller passes it by value:
 * while a pool is being allocated to, allocations on the device for a stream
 * the filter accepts land in it.  begin on an existing pool shares it;
 * release drops one use and the last one destroys the pool. */
typedef struct cucache_torch_pool_id_s {
    unsigned long long first, second;
} cucache_torch_pool_id_t;
void cucache_torch_begin_allocate_to_pool(int device, cucache_torch_pool_id_t id, const void *filter);
void cucache_torch_end_allocate_to_pool(int device, cucache_torch_pool_id_t id);
void cucache_torch_release_pool(int device, cucache_torch_pool_id_t id);

/* Private pools (seed 002, torch.cuda.MemPool): create returns an id > 0 or
 * -1; use routes the calling thread's allocations on the device to the pool
 * (0: back to the default pools); destroy releases the pool's free
 * segments now and the rest as their blocks are freed.  0 or -1. */
int cucache_pool_create(int device);
int cucache_pool_use(int device, int pool_id);
int cucache_pool_destroy(int device, int pool_id);

#ifdef __cplusplus
}
#endif

#endif
