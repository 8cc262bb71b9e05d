/*
 * Proves PyTorch's pool hooks of the pluggable allocator
 * (cucache_torch_begin_allocate_to_pool, _end_allocate_to_pool,
 * _release_pool in interpose/torch_alloc.c) called exactly as PyTorch calls
 * them: the address found by name, cast to the C++ function type PyTorch's
 * binding casts it to (void(int, MempoolId_t, std::function<bool(cudaStream_t)>)
 * and void(int, MempoolId_t)), wrapped in a std::function, and called with
 * the lambdas PyTorch passes: the capture stream's filter (CUDA graph
 * capture, a functor stored in place) and a thread's filter with more state
 * (torch.cuda.MemPool's use_mem_pool, a functor on the heap: the clone and
 * destroy paths, checked by ASan in build-asan).  With the semantics of
 * PyTorch's own allocator: while a pool is allocated to, an allocation for
 * a stream the filter accepts lands in it and others do not; a block freed
 * in the pool is never handed out by the default pools; begin on an
 * existing pool shares it and reuses its blocks; the pool's memory goes
 * back when the last use is released, not before; a second begin on a
 * pool being allocated to, and an unknown pool, are refused with a line.
 *
 * Seen to fail: with torch_malloc_routed ignoring the pools, the capture
 * and thread tests fail (the default pool hands the pool's block out); with
 * release destroying the pool at its first use, the use-count test fails.
 */
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include <dlfcn.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {  // Debian's cmocka.h has no C++ guard
#include <cmocka.h>

#include "stderr_capture.hpp"
}

// The few runtime calls it makes, declared as CUDA's headers do
// (include/cucache/cuda_api.h is C only: opaque enum typedefs).
typedef struct CUstream_st *cudaStream_t;
typedef struct CUgraph_st *cudaGraph_t;
extern "C" {
int cudaStreamBeginCapture(cudaStream_t stream, int mode);
int cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph);
int cudaGraphDestroy(cudaGraph_t graph);
int cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
int cudaStreamDestroy(cudaStream_t stream);
int cudaDeviceSynchronize(void);
int cudaFree(void *ptr);
}

namespace {

constexpr size_t MIB = size_t(1) << 20;

// cucache's API, found as PyTorch finds the allocator's entry points
int64_t stat_of(const char *key)
{
    auto fn = reinterpret_cast<int (*)(int, const char *, int64_t *)>(dlsym(RTLD_DEFAULT, "cucache_stat"));
    int64_t v = -1;
    if (!fn || fn(0, key, &v) != 0)
        fail_msg("cucache_stat(0, %s) failed: is libcucache.so preloaded?", key);
    return v;
}

void empty_cache()
{
    auto fn = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "cucache_empty_cache"));
    assert_non_null(reinterpret_cast<void *>(fn));
    assert_int_equal(fn(0), 0);
}

bool overlap(const void *a, size_t na, const void *b, size_t nb)
{
    auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
    return x < y + nb && y < x + na;
}


cudaStream_t streams[8];
int nstreams;

cudaStream_t new_stream()
{
    cudaStream_t s = nullptr;
    assert_int_equal(cudaStreamCreateWithFlags(&s, 1 /* cudaStreamNonBlocking */), 0);
    streams[nstreams++] = s;
    return s;
}

int teardown(void **state)
{
    (void)state;
    cudaDeviceSynchronize();
    while (nstreams > 0)
        cudaStreamDestroy(streams[--nstreams]);
    return 0;
}

// PyTorch's types (c10/cuda/MemPool.h, torch/csrc/cuda/Module.cpp)
using CaptureId_t = unsigned long long;
using MempoolId_t = std::pair<CaptureId_t, CaptureId_t>;
using MallocFuncType = void *(size_t, int, cudaStream_t);
using FreeFuncType = void(void *, size_t, int, cudaStream_t);
using BeginFuncType = void(int, MempoolId_t, std::function<bool(cudaStream_t)>);
using EndFuncType = void(int, MempoolId_t);

std::function<MallocFuncType> t_malloc;
std::function<FreeFuncType> t_free;
std::function<BeginFuncType> t_begin;
std::function<EndFuncType> t_end;
std::function<EndFuncType> t_release;

// What the binding does with the address Python hands it
// (ctypes.cast(lib.name, c_void_p).value).
template <typename FuncType> std::function<FuncType> from_address(const char *name)
{
    uint64_t func_ptr = reinterpret_cast<uint64_t>(dlsym(RTLD_DEFAULT, name));
    if (func_ptr == 0)
        return nullptr;
    return reinterpret_cast<FuncType *>(func_ptr);
}

int pools_setup(void **state)
{
    (void)state;
    cudaFree(nullptr);  // the device, initialised
    t_malloc = from_address<MallocFuncType>("cucache_torch_malloc");
    t_free = from_address<FreeFuncType>("cucache_torch_free");
    t_begin = from_address<BeginFuncType>("cucache_torch_begin_allocate_to_pool");
    t_end = from_address<EndFuncType>("cucache_torch_end_allocate_to_pool");
    t_release = from_address<EndFuncType>("cucache_torch_release_pool");
    return 0;
}

void need_entry_points()
{
    if (!(t_malloc && t_free && t_begin && t_end && t_release))
        fail_msg("cucache_torch_* not found: is libcucache.so preloaded?");
}

int64_t reserved()
{
    return stat_of("reserved_bytes.all.current");
}

// CUDA graph capture: PyTorch's _cuda_beginAllocateCurrentStreamToPool
// filter, [stream](cudaStream_t target) { return target == stream; }.
void test_capture_stream_goes_to_the_pool(void **state)
{
    (void)state;
    need_entry_points();
    cudaStream_t s = new_stream(), t = new_stream();
    assert_int_equal(cudaDeviceSynchronize(), 0);
    empty_cache();
    int64_t before = reserved();
    const MempoolId_t pool{7, 0};

    t_begin(0, pool, [s](cudaStream_t target) { return target == s; });
    void *a = t_malloc(MIB, 0, s);  // the captured stream: the pool
    void *b = t_malloc(MIB, 0, t);  // another stream: the default pools
    t_end(0, pool);
    assert_non_null(a);
    assert_non_null(b);
    t_free(a, MIB, 0, s);
    t_free(b, MIB, 0, t);

    // a is free in the pool: the default pools never hand it out, on its
    // stream either (in the default pools a block freed on s is reusable at
    // once on s)
    void *c = t_malloc(MIB, 0, s);
    assert_non_null(c);
    assert_false(overlap(c, MIB, a, MIB));
    void *d = t_malloc(MIB, 0, t);
    assert_ptr_equal(d, b);  // b was the default pool's, freed on t
    t_free(c, MIB, 0, s);
    t_free(d, MIB, 0, t);

    // a second capture into the same pool shares it: a comes back
    t_begin(0, pool, [s](cudaStream_t target) { return target == s; });
    void *e = t_malloc(MIB, 0, s);
    t_end(0, pool);
    assert_ptr_equal(e, a);
    t_free(e, MIB, 0, s);

    // two uses: the first release keeps the pool, the second gives it back
    empty_cache();  // the default pools' cached blocks
    int64_t with_pool = reserved();
    assert_true(with_pool > before);
    t_release(0, pool);
    assert_int_equal(reserved(), with_pool);
    t_release(0, pool);
    assert_int_equal(reserved(), before);
}

// torch.cuda.MemPool's use_mem_pool: allocations of this thread, any
// stream; the filter carries more than fits in std::function's own storage.
void test_thread_filter_goes_to_the_pool(void **state)
{
    (void)state;
    need_entry_points();
    cudaStream_t s = new_stream();
    const MempoolId_t pool{0, 3};
    std::thread::id me = std::this_thread::get_id();
    std::string label(200, 'x');  // heap-stored functor: clone and destroy
    std::atomic<int> calls{0};
    t_begin(0, pool, [me, label, &calls](cudaStream_t) {
        calls++;
        return label.size() == 200 && std::this_thread::get_id() == me;
    });
    void *mine = t_malloc(MIB, 0, s);
    void *theirs = nullptr;
    std::thread other([&] { theirs = t_malloc(MIB, 0, s); });
    other.join();
    t_end(0, pool);
    assert_non_null(mine);
    assert_non_null(theirs);
    assert_true(calls.load() >= 2);
    t_free(mine, MIB, 0, s);
    t_free(theirs, MIB, 0, s);
    int after_end = calls.load();

    // the other thread's block went to the default pools (back at once on
    // s), this thread's to the pool (never from the default pools)
    void *x = t_malloc(MIB, 0, s);
    assert_non_null(x);
    assert_false(overlap(x, MIB, mine, MIB));
    assert_true(overlap(x, MIB, theirs, MIB));
    t_free(x, MIB, 0, s);
    assert_int_equal(calls.load(), after_end);  // no filter after end
    t_release(0, pool);
}

/* A second begin on a pool being allocated to is refused with a line but
 * counted as PyTorch counts it (PyTorch then throws, and its caller never
 * ends or releases): its end is ignored, so the first capture keeps
 * routing, and the pool takes two releases.  Unknown pools and an end of
 * a pool not being allocated to are named. */
void test_refusals(void **state)
{
    (void)state;
    need_entry_points();
    cudaStream_t s = new_stream();
    const MempoolId_t pool{11, 12};
    t_begin(0, pool, [s](cudaStream_t target) { return target == s; });
    Stderr said;
    t_begin(0, pool, [](cudaStream_t) { return true; });  // PyTorch: "already recording to mempool_id"
    std::string err = said.end();
    if (err.find("pool (11, 12)): already allocating to this pool; ignored") == std::string::npos)
        fail_msg("no refusal:\n%s", err.c_str());
    t_end(0, pool);  // the refused begin's: ignored, the first still routes
    void *a = t_malloc(MIB, 0, s);
    t_end(0, pool);
    t_free(a, MIB, 0, s);
    void *b = t_malloc(MIB, 0, s);  // the default pools: never a (it is the pool's)
    assert_false(overlap(a, MIB, b, MIB));
    t_free(b, MIB, 0, s);
    Stderr said1;
    t_end(0, pool);
    err = said1.end();
    if (err.find("cucache_torch_end_allocate_to_pool(device 0, pool (11, 12)): not allocating to this pool") ==
        std::string::npos)
        fail_msg("a second end not named:\n%s", err.c_str());
    t_release(0, pool);  // two uses: one release keeps it
    Stderr said2;
    t_release(0, pool);
    err = said2.end();
    if (!err.empty())
        fail_msg("the second release was refused:\n%s", err.c_str());
    Stderr said3;
    t_release(0, pool);
    t_end(0, MempoolId_t{99, 99});
    err = said3.end();
    if (err.find("cucache_torch_release_pool(device 0, pool (11, 12)): no such pool") == std::string::npos ||
        err.find("cucache_torch_end_allocate_to_pool(device 0, pool (99, 99)): no such pool") == std::string::npos)
        fail_msg("unknown pools not named:\n%s", err.c_str());
}

/* While a stream captures under the preload, cucache routes the capturing
 * thread's own cudaMalloc calls to its capture pool; PyTorch's allocations
 * through these entry points follow PyTorch's pools instead: one its
 * filter rejects goes to the default pools, reusable there after the
 * capture (seen to fail with the thread's capture route kept). */
void test_rejected_during_capture_goes_to_the_default_pools(void **state)
{
    (void)state;
    need_entry_points();
    cudaStream_t s = new_stream(), t = new_stream();
    const MempoolId_t pool{21, 0};
    assert_int_equal(cudaStreamBeginCapture(s, 0 /* global */), 0);
    t_begin(0, pool, [s](cudaStream_t target) { return target == s; });
    void *x = t_malloc(MIB, 0, t);  // another stream: rejected
    assert_non_null(x);
    t_end(0, pool);
    void *z = t_malloc(2 * MIB, 0, t);  // no pool routing, still capturing
    assert_non_null(z);
    cudaGraph_t g = nullptr;
    assert_int_equal(cudaStreamEndCapture(s, &g), 0);
    assert_int_equal(cudaGraphDestroy(g), 0);
    t_free(x, MIB, 0, t);
    t_free(z, 2 * MIB, 0, t);
    void *y = t_malloc(MIB, 0, t), *w = t_malloc(2 * MIB, 0, t);
    assert_ptr_equal(y, x);  // freed on t, reusable at once on t: the default pools
    assert_ptr_equal(w, z);
    t_free(y, MIB, 0, t);
    t_free(w, 2 * MIB, 0, t);
    t_release(0, pool);
}

}  // namespace

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_capture_stream_goes_to_the_pool, teardown),
        cmocka_unit_test_teardown(test_thread_filter_goes_to_the_pool, teardown),
        cmocka_unit_test_teardown(test_refusals, teardown),
        cmocka_unit_test_teardown(test_rejected_during_capture_goes_to_the_default_pools, teardown),
    };
    return cmocka_run_group_tests_name("interpose.torch_pools", tests, pools_setup, nullptr);
}
