/*
 * Shared fixture of the race-detector suites (test_race*.c): device buffers,
 * pinned host buffers and streams of each kind, a per-test reset of the
 * detector, and checks of its verdicts and of what its reports name.
 */
#ifndef SIMRACE_H
#define SIMRACE_H

#include "simtest.h"

#define LEGACY ((cudaStream_t)0)
enum { RACE_BUF = 1 << 20 }; /* bytes of each buffer */

struct simrace_fixture {
    unsigned char *x, *y;        /* device buffers X and Y, RACE_BUF bytes */
    unsigned char *host, *host2; /* pinned host buffers, RACE_BUF bytes */
    cudaStream_t nb, nb2;        /* non-blocking streams */
    cudaStream_t bl, bl2;        /* blocking streams */
};

/* Group setup/teardown helpers (0 on success). */
int simrace_fixture_create(struct simrace_fixture *f);
void simrace_fixture_destroy(struct simrace_fixture *f);
/* Per-test setup: the device idle and the detector's count reset. */
int simrace_setup(void **state);

/* After all queued work is done: at least one race was reported / none. */
void race_expect(void);
void race_expect_none(void);
/* The last report names both streams (by kind, two distinct stream ids)
 * and a range starting at addr. */
void race_expect_names(cudaStream_t s1, cudaStream_t s2, const void *addr);

#define RACETEST(f) cmocka_unit_test_setup_teardown(f, simrace_setup, simtest_teardown)

#endif
