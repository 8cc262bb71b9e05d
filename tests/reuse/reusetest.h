/*
 * Shared fixture of the reuse-safety suites (tests/reuse): ordinary CUDA
 * programs run with libcucache.so preloaded on the simulated device, whose
 * race detector proves that a freed block is never handed out while queued
 * work still uses it.
 *
 * The same program runs under each reuse policy (CUCACHE_CONF=reuse:...) and
 * in one of three modes (REUSE_EXPECT):
 *
 *   unset  every test must pass: the data the readers saw is the data they
 *          were meant to see, and the detector (fatal) reports nothing;
 *   race   the detector is not fatal; a test that plants a hazard (a reader
 *          behind a gate while the program frees and reallocates) must be
 *          caught: a race reported on the freed block and the reader's data
 *          overwritten.  Run under reuse:stream, it proves that the hazard
 *          tests can fail;
 *   abort  the detector is fatal and must kill the process (meson:
 *          should_fail).  main() then exits 0 whatever cmocka says, so that
 *          only a death by signal counts as the expected failure.
 *
 * REUSE_ONLY=<test name> runs one test (cmocka's filter).  REUSE_BARE=1 runs
 * the program without cucache (it must then be absent), on the simulator's
 * own allocator, to show that the workload itself is a correct CUDA program.
 *
 * Under reuse:sync every free synchronises the device, so a closed gate
 * would deadlock it: reuse_free() first arms an opener (a helper thread)
 * for every gate the test still holds closed, and checks afterwards that
 * the free did wait for them.
 */
#ifndef REUSETEST_H
#define REUSETEST_H

#include "simtest.h"

#include <stdint.h>

#define LEGACY ((cudaStream_t)0)

/* What the tests expect of the reuse rule CUCACHE_CONF selects, from the
 * rule's row (core/rules.h); the default rule when none is named. */
typedef enum reuse_policy_e {
    REUSE_FENCED, /* a safe rule that fences and does not hand out (fenced, fenced-host: the same for these
                   * tests, which submit work) */
    REUSE_STREAM, /* trusts stream order: unsafe across streams */
    REUSE_SYNC,   /* synchronises the device on every free */
    REUSE_ORDERED, /* hands a freed block out behind its fence with the device ordered after it: the new owner's
                    * work waits on the device for the old owner's, so the tests never wait for it while the old
                    * owner's readers are held; the race detector and the readers' data judge */
} reuse_policy_t;

typedef enum reuse_expect_e {
    REUSE_EXPECT_SAFE,  /* REUSE_EXPECT unset */
    REUSE_EXPECT_RACE,  /* REUSE_EXPECT=race */
    REUSE_EXPECT_ABORT, /* REUSE_EXPECT=abort */
} reuse_expect_t;

enum {
    REUSE_SYNC_OPEN_MS = 50,     /* reuse:sync: gates open this long after a free starts */
    REUSE_HOST_BYTES = 16 << 20, /* bytes of each pinned host buffer */
};

/* The policy CUCACHE_CONF names (reuse:fenced when it names none). */
reuse_policy_t reuse_policy(void);
const char *reuse_policy_name(void);
reuse_expect_t reuse_expect(void);
/* REUSE_BARE=1: no cucache in the process, on purpose. */
bool reuse_bare(void);

/* Pinned host buffers (REUSE_HOST_BYTES each) and streams of each kind,
 * created by reuse_group_setup. */
struct reuse_fixture {
    unsigned char *dst, *dst2; /* pinned host buffers */
    unsigned char *pageable;   /* REUSE_HOST_BYTES of malloc'ed host memory */
    cudaStream_t nb, nb2, nb3; /* non-blocking streams */
    cudaStream_t bl;           /* a blocking stream */
};
extern struct reuse_fixture rf;

/* Group setup: cucache must be preloaded (its API answers dlsym), the device
 * answers, the fixture is created.  Group teardown destroys it. */
int reuse_group_setup(void **state);
int reuse_group_teardown(void **state);
/* Per test: the device idle, the detector's count reset, no gate held. */
int reuse_setup(void **state);
int reuse_teardown(void **state);

#define REUSETEST(f) cmocka_unit_test_setup_teardown(f, reuse_setup, reuse_teardown)

/* Runs the group with REUSE_ONLY as filter and turns its result into the
 * exit status the mode wants (see above). */
int reuse_run(const char *name, const struct CMUnitTest *tests, size_t n);
#define REUSE_RUN(name, tests) reuse_run(name, tests, sizeof(tests) / sizeof((tests)[0]))

/* ---- cucache's public API (dlsym: absent when cucache is not preloaded) -- */

/* cucache_stat(0, key); fails the test when the key or the API is absent
 * (-1 under REUSE_BARE). */
int64_t reuse_stat(const char *key);

/* ---- gates the policy must respect ------------------------------------ */

/* A closed gate, remembered so that reuse_free can release it under
 * reuse:sync. */
simtest_gate_t *reuse_gate(void);
/* A gate queued on s (cudaLaunchHostFunc); s is held. */
simtest_gate_t *reuse_gate_on(cudaStream_t s);
/* s is held behind a gate queued another way (another thread's per-thread
 * stream: pass cudaStreamPerThread).  A held blocking or per-thread stream
 * holds the legacy stream too. */
void reuse_hold(cudaStream_t s);
/* Waits until the fixture's non-blocking streams and the legacy stream are
 * idle, except those held: every fence event recorded on them so far has
 * completed, so a fence that forgot a held reader would now say done. */
void reuse_drain_unheld(void);
/* Opens every gate of the test (and waits for nothing). */
void reuse_open_all(void);
/* Every gate of the test still closed opens ms from now, whatever the
 * policy: for a synchronisation the program itself makes. */
void reuse_open_all_after(unsigned ms);

/* reuse:sync: every gate of the test still closed opens REUSE_SYNC_OPEN_MS
 * from now, for a call (on any thread) that synchronises the device;
 * returns a mask of the gates armed (index: creation order).  No-op under
 * the other policies. */
uint32_t reuse_arm_openers(void);
/* Fails unless every gate in the mask has passed. */
void reuse_expect_passed(uint32_t armed, const char *call);

/* The test holds device memory p: reuse_teardown frees it unless
 * reuse_free or reuse_free_async did (a test that fails midway must not
 * leave the next one a cache that is not empty). */
void reuse_track(void *p);
/* p was freed another way (cudaFreeAsync_ptsz, another thread). */
void reuse_untrack(void *p);

/* cudaFree(p).  reuse:sync: arms the openers first, then checks that every
 * gate held before the call had passed when it returned. */
void reuse_free(void *p);
/* cudaFreeAsync(p, s); reuse:sync: arms the openers first, in case the
 * policy synchronises there too. */
void reuse_free_async(void *p, cudaStream_t s);

/* ---- making allocations miss the cache ---------------------------------- */

/* Every test starts from an empty cache (reuse_setup).  reuse_fill takes
 * every cached free block with pads (cudaMalloc, or cudaMallocAsync on s),
 * tracked, so that the next allocation misses and runs the
 * fence logic instead of a cache hit that trivially avoids the freed block.
 * Call it before the free: afterwards the freed block itself (reuse:stream)
 * would be taken. */
void reuse_fill(cudaStream_t s, bool async);

/* After the free of A (an bytes) while its reader is held: B = cudaMalloc(n)
 * (a miss: under reuse:fenced it must record a fence and not return A),
 * overwritten by write(B, n, writer); then every unheld stream drained, the
 * cache filled again, and C = cudaMalloc(n), which must still not be A under
 * reuse:fenced, overwritten the same way.  Under reuse:stream B is A.  B
 * and C are tracked. */
void reuse_realloc_twice(const void *a, size_t an, size_t n, void (*write)(void *p, size_t n, cudaStream_t s),
                         cudaStream_t writer, void **b, void **c);

/* The count of blocks handed out ahead of their fences so far
 * (num_fence_hand_outs; 0 without cucache), for reuse_expect_handed_out. */
int64_t reuse_hand_outs(void);
/* reuse:ordered: fails unless `call` handed something out ahead of a fence
 * since the count was `before`: otherwise the test did not exercise the
 * hand-out.  No-op under the other rules. */
void reuse_expect_handed_out(int64_t before, const char *call);

/* ---- buffers and checks ------------------------------------------------ */

/* cudaMalloc(n) filled with simtest's pattern `seed` (synchronous copy);
 * tracked. */
void *reuse_alloc_filled(size_t n, unsigned seed);
/* Whether [a, a+an) and [b, b+bn) share a byte. */
bool reuse_overlap(const void *a, size_t an, const void *b, size_t bn);
/* reuse:fenced never hands out bytes of a block that queued work still
 * reads (reuse:sync may: its free waited for that work); reuse:stream under
 * REUSE_EXPECT=race must, or the hazard was not exercised. */
void reuse_expect_disjoint(const void *fresh, size_t fn, const void *freed, size_t an);
/* Only the reuse:fenced half of it. */
void reuse_expect_disjoint_if_fenced(const void *fresh, size_t fn, const void *freed, size_t an);

/* The verdict of a test that planted a hazard on `freed` (n bytes), the
 * readers having seen the expected data or not (data_ok).  Waits for the
 * device.  REUSE_EXPECT=race: a race on the block and wrong data are
 * required; otherwise no race and the right data. */
void reuse_verdict_hazard(const void *freed, size_t n, bool data_ok, const char *what);
/* The same with several freed blocks: the report must name one of them. */
void reuse_verdict_hazard_n(const void *const *freed, const size_t *n, int count, bool data_ok, const char *what);
/* For hazards that reuse:stream may or may not expose (stream-ordered frees,
 * whose handling the policy need not change): under REUSE_EXPECT=race,
 * either a race on the block with wrong data, or no race with the right
 * data, and it says which on stdout; otherwise as reuse_verdict_hazard. */
void reuse_verdict_hazard_maybe(const void *freed, size_t n, bool data_ok, const char *what);
/* The verdict of a test whose reuse is ordered by the program itself: no
 * race and the right data in every mode and policy. */
void reuse_verdict_safe(bool data_ok, const char *what);

/* Whether host buffer `buf` holds pattern `seed` (n bytes from offset 0);
 * prints the first differing offset otherwise. */
bool reuse_data_is(const void *buf, size_t n, unsigned seed, const char *what);
/* The same for a buffer of one byte value. */
bool reuse_bytes_are(const void *buf, size_t n, unsigned char value, const char *what);

/* ---- the simulated kernel: a read of a device range -------------------- */

/* Queues on s a simulated kernel (cucacheSimLaunch) that declares a read of
 * [src, src+n) and copies it to host memory dst when it runs. */
void reuse_kernel_read(cudaStream_t s, void *dst, const void *src, size_t n);

#endif
