/*
 * Proves that a failed allocation of PyTorch's pluggable allocator never
 * reaches PyTorch as a null pointer: cucache_torch_malloc (interpose/
 * torch_alloc.c), called as PyTorch's CUDAPluggableAllocator::malloc calls
 * it (the address found by name, wrapped in a std::function, the result
 * stored unchecked), throws a std::exception whose what() starts with
 * PyTorch's OOM words, after cucache's report; the caller's frames are
 * unwound (their destructors run); no lock stays held (another thread then
 * allocates); the program that catches it frees and allocates again.  A
 * device cucache cannot open throws too, with its own words.
 *
 * Seen to fail: with cucache_torch_malloc returning NULL after the report
 * (the old behaviour), every test here fails ("returned NULL to PyTorch").
 */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include <dlfcn.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" { // Debian's cmocka.h has no C++ guard
#include <cmocka.h>

#include "stderr_capture.hpp"
}

typedef struct CUstream_st *cudaStream_t;
extern "C" {
int cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
int cudaStreamDestroy(cudaStream_t stream);
int cudaDeviceSynchronize(void);
int cudaFree(void *ptr);
}

namespace
{

constexpr size_t MIB = size_t(1) << 20;
constexpr size_t GIB = size_t(1) << 30;

using MallocFuncType = void *(size_t, int, cudaStream_t);
using FreeFuncType = void(void *, size_t, int, cudaStream_t);

// PyTorch's CUDAPluggableAllocator, the part that matters here: malloc
// calls alloc_fn_ and records whatever comes back under its mutex, NULL
// included; raw_delete looks the pointer up and calls free_fn_.
class Pluggable
{
  public:
    Pluggable()
    {
        alloc_fn_ = reinterpret_cast<MallocFuncType *>(dlsym(RTLD_DEFAULT, "cucache_torch_malloc"));
        free_fn_ = reinterpret_cast<FreeFuncType *>(dlsym(RTLD_DEFAULT, "cucache_torch_free"));
    }
    bool found() const
    {
        return alloc_fn_ && free_fn_;
    }
    void *malloc(size_t size, int device, cudaStream_t stream)
    {
        void *r = alloc_fn_(size, device, stream);
        std::lock_guard<std::mutex> lock(mutex_);
        meta_.emplace(r, size);
        return r;
    }
    void free(void *ptr, int device, cudaStream_t stream)
    {
        size_t size;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            size = meta_.at(ptr);
            meta_.erase(ptr);
        }
        free_fn_(ptr, size, device, stream);
    }

  private:
    std::function<MallocFuncType> alloc_fn_;
    std::function<FreeFuncType> free_fn_;
    std::mutex mutex_;
    std::unordered_map<void *, size_t> meta_;
};

Pluggable *torch;


// A frame of PyTorch's between the binding and the allocator: its
// destructor must run as the exception passes.
struct Frame {
    bool *unwound;
    ~Frame()
    {
        *unwound = true;
    }
};

// What the allocation threw (its what()), or fails the test if it returned.
std::string allocation_throws(size_t size, int device, cudaStream_t stream, std::string *err = nullptr)
{
    bool unwound = false;
    Stderr said;
    std::string what;
    try {
        Frame f{&unwound};
        void *p = torch->malloc(size, device, stream);
        std::string text = said.end();
        fail_msg("cucache_torch_malloc(%zu, device %d) returned %p to PyTorch instead of throwing%s\n%s", size, device,
                 p, p ? "" : " (returned NULL to PyTorch)", text.c_str());
    } catch (const std::exception &e) { // PyTorch's binding: RuntimeError(e.what())
        what = e.what();
    }
    std::string text = said.end();
    if (err)
        *err = text;
    assert_true(unwound);
    return what;
}

bool starts_with(const std::string &s, const char *prefix)
{
    return s.compare(0, strlen(prefix), prefix) == 0;
}

cudaStream_t stream;

int setup(void **state)
{
    (void)state;
    cudaFree(nullptr);
    torch = new Pluggable;
    if (!torch->found())
        return 0;
    return cudaStreamCreateWithFlags(&stream, 1 /* cudaStreamNonBlocking */) == 0 ? 0 : -1;
}

int teardown(void **state)
{
    (void)state;
    cudaDeviceSynchronize();
    if (stream)
        cudaStreamDestroy(stream);
    delete torch;
    return 0;
}

void need_entry_points()
{
    if (!torch->found())
        fail_msg("cucache_torch_malloc not found: is libcucache.so preloaded?");
}

// Beyond the device: PyTorch's words, the sizes of the report's first
// sentence, the report itself on stderr.
void test_oom_throws_pytorchs_words(void **state)
{
    (void)state;
    need_entry_points();
    std::string err;
    std::string what = allocation_throws(64 * GIB, 0, stream, &err);
    if (!starts_with(what, "CUDA out of memory. Tried to allocate 64.00 GiB (64.00 GiB requested). GPU 0: cucache"))
        fail_msg("not PyTorch's OOM words: %s", what.c_str());
    if (what.find("its report") == std::string::npos)
        fail_msg("the exception does not point at cucache's report: %s", what.c_str());
    if (err.find("cucache: CUDA out of memory. Tried to allocate 64.00 GiB") == std::string::npos)
        fail_msg("no OOM report before the exception:\n%s", err.c_str());
}

// After the exception nothing of cucache's is held: another thread
// allocates (a lock left held would hang it), and this one frees and
// allocates a smaller block, as a program that caught the error does.
void test_oom_leaves_cucache_usable(void **state)
{
    (void)state;
    need_entry_points();
    void *kept = torch->malloc(64 * MIB, 0, stream);
    assert_non_null(kept);
    allocation_throws(64 * GIB, 0, stream);
    void *other = nullptr;
    std::thread t([&] { other = torch->malloc(8 * MIB, 0, stream); });
    t.join();
    assert_non_null(other);
    torch->free(other, 0, stream);
    torch->free(kept, 0, stream);
    void *smaller = torch->malloc(32 * MIB, 0, stream);
    assert_non_null(smaller);
    torch->free(smaller, 0, stream);
}

// A device cucache cannot open: thrown with what cucache said.
void test_no_such_device_throws(void **state)
{
    (void)state;
    need_entry_points();
    std::string what = allocation_throws(MIB, 40, stream);
    if (what != "cucache_torch_malloc(1048576, device 40): no such device, or cucache is off")
        fail_msg("unexpected message: %s", what.c_str());
}

} // namespace

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oom_throws_pytorchs_words),
        cmocka_unit_test(test_oom_leaves_cucache_usable),
        cmocka_unit_test(test_no_such_device_throws),
    };
    return cmocka_run_group_tests_name("interpose.torch_oom", tests, setup, teardown);
}
