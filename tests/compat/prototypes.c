/*
 * The compat check of cucache's CUDA declarations (tests/compat): the real
 * cuda.h and cuda_runtime_api.h first, then include/cucache/cuda_api.h in
 * its check mode, which keeps every typedef, macro and prototype and leaves
 * out the enum and struct bodies.  C allows a typedef, a macro or a prototype
 * to be declared twice only if both declarations agree, so compiling this
 * file is the check: any disagreement is a compile error that names the
 * declaration in cuda_api.h and the real one.  check_prototypes.py compiles
 * it once per mode of the real headers (default; per-thread default stream,
 * which declares the _ptsz/_ptds entry points; and the driver's internal
 * mode, which declares older ABI versions such as cuCtxCreate_v2).  Enum
 * values and struct layouts are compared by gen_layout.py/diff_layout.py.
 * The simulator's declarations are checked the same way, in a file of their
 * own (prototypes_sim.c): the two headers never meet in one file.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaProfiler.h>
#include <cuda_profiler_api.h>

#define CUCACHE_CUDA_CHECK_AGAINST_REAL 1
#include "cucache/cuda_api.h"
