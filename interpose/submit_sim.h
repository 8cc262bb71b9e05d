/*
 * The simulated device's test extensions that put work on a stream
 * (subprojects/cusim/include/cusim/sim.h): a kernel stand-in with declared ranges, a timed
 * kernel, a faulting kernel.  No real driver has them; tests use them as
 * kernels, so cucache counts them as the submissions they stand for
 * (submit.c), through the same trampolines as the driver's own.
 */
#ifndef CUCACHE_SUBMIT_SIM_H
#define CUCACHE_SUBMIT_SIM_H

#define HOOK_SUBMIT_SIM(X) X(cucacheSimLaunch) X(cucacheSimLaunchTimed) X(cucacheSimLaunchFault)

#endif
