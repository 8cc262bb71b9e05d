/*
 * A C++ exception thrown from C (cxx_throw.c), for a C++ caller that takes
 * a failure only as an exception: PyTorch's pluggable allocator stores what
 * its malloc function returns, NULL included, and goes on.
 */
#ifndef CUCACHE_INTERPOSE_CXX_THROW_H
#define CUCACHE_INTERPOSE_CXX_THROW_H

/* Throws std::runtime_error(what) through the libstdc++ already loaded in
 * the process; returns only where none is (a C program) or it lacks an
 * entry point (said once).  Call it with no lock held and nothing of
 * cucache's in flight: the C frames it unwinds run no cleanup. */
void hook_cxx_throw(const char *what);

#endif
