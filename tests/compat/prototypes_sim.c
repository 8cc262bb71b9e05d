/*
 * The compat check of the simulator's CUDA declarations (tests/compat), as
 * prototypes.c does for cucache's: the real cuda.h and cuda_runtime_api.h
 * first, then cusim/sim.h with the cusim/cuda_api.h it includes in its check
 * mode (every typedef, macro and prototype, no enum or struct bodies).
 * Compiling this file is the check: its full copy of the CUDA API and the
 * types its extensions use must agree with the real headers.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaProfiler.h>
#include <cuda_profiler_api.h>

#define CUSIM_CUDA_CHECK_AGAINST_REAL 1
#include "cusim/sim.h"
