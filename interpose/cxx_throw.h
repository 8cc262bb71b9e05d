/*
 * A C++ exception thrown from C (cxx_throw.c), for a C++ caller that takes
 * a failure only as an exception: PyTorch's pluggable allocator stores what
 * its malloc function returns, NULL included, and goes on; PyTorch with its
 * cache off raises a generic error for a failed cudaMalloc where its cache
 * raises OutOfMemoryError (framework.h, oom_throw).
 */
#ifndef CUCACHE_INTERPOSE_CXX_THROW_H
#define CUCACHE_INTERPOSE_CXX_THROW_H

/* What failed: out of memory is thrown as PyTorch's c10::OutOfMemoryError
 * where the process has PyTorch (torch.OutOfMemoryError in Python), every
 * failure else as std::runtime_error. */
typedef enum {
    HOOK_CXX_ERROR,
    HOOK_CXX_OUT_OF_MEMORY,
} hook_cxx_failure_t;

/* Throws `what` through the C++ libraries already loaded in the process;
 * returns only where none is (a C program) or libstdc++ lacks an entry
 * point (said once).  Call it with no lock held and nothing of cucache's
 * in flight: the C frames it unwinds run no cleanup. */
void hook_cxx_throw(hook_cxx_failure_t failure, const char *what);

#endif
