/*
 * Proves that cucache never hands out a freed block that queued work still
 * reads: a copy (or a simulated kernel) held behind a gate on a non-blocking
 * stream still reads buffer A when the program calls cudaFree(A),
 * cudaMalloc(B) of the same size (or smaller) and overwrites B on the legacy
 * stream; once the gate opens, the reader must have seen A's data and the
 * race detector (fatal) must have stayed silent.  The cache is filled first,
 * so B misses and runs the fence logic; a second block C is allocated and
 * overwritten after every stream but the reader's has drained, so a fence
 * that forgot the reader would have completed by then.  Passes under
 * reuse:fenced and reuse:sync (where cudaFree must wait for the reader);
 * the same program under reuse:stream is caught (REUSE_EXPECT=race: a race
 * on A and the reader's data overwritten; REUSE_EXPECT=abort: the fatal
 * detector kills it), which shows that these tests can fail.  Also: under
 * reuse:fenced the block comes back once its fence completed, without a new
 * device allocation (caching is not given up for safety).  Seen to fail,
 * in scratch copies of interpose/: with the fence's events on non-blocking
 * streams dropped (backend.c), every test here; with reuse:sync's device
 * synchronisation removed (state.c), every test under reuse:sync.
 */
#include "reusetest.h"

#include <string.h>

typedef enum { READ_COPY, READ_KERNEL } read_kind_t;
typedef enum { WRITE_MEMSET, WRITE_COPY } write_kind_t;

/* One hazard: a gated reader of A, then free A, allocate B, overwrite B. */
struct hazard {
    size_t n;  /* bytes of A */
    size_t bn; /* bytes of B */
    read_kind_t read;
    write_kind_t write;
    const char *what;
};

enum { OVERWRITE = 0xA5, OVERWRITE_SEED = 0xB0B };

static void write_memset(void *p, size_t n, cudaStream_t s)
{
    SIM_OK(cudaMemsetAsync(p, OVERWRITE, n, s));
}

static void write_copy(void *p, size_t n, cudaStream_t s)
{
    simtest_fill(rf.pageable, n, OVERWRITE_SEED); /* pageable: staged at the call */
    SIM_OK(cudaMemcpyAsync(p, rf.pageable, n, cudaMemcpyHostToDevice, s));
}

/* Whether device buffer p holds what `how` wrote. */
static bool holds_overwrite(void *p, size_t n, write_kind_t how, const char *what)
{
    SIM_OK(cudaMemcpy(rf.dst2, p, n, cudaMemcpyDeviceToHost));
    return how == WRITE_MEMSET ? reuse_bytes_are(rf.dst2, n, OVERWRITE, what)
                               : reuse_data_is(rf.dst2, n, OVERWRITE_SEED, what);
}

static void run_hazard(const struct hazard *h)
{
    unsigned seed = 0x5eed0000u ^ (unsigned)h->n;
    void *a = reuse_alloc_filled(h->n, seed);
    reuse_fill(NULL, false); /* B and C must miss the cache */
    memset(rf.dst, 0, h->n);

    /* nb: [gate] read A */
    reuse_gate_on(rf.nb);
    if (h->read == READ_COPY)
        SIM_OK(cudaMemcpyAsync(rf.dst, a, h->n, cudaMemcpyDeviceToHost, rf.nb));
    else
        reuse_kernel_read(rf.nb, rf.dst, a, h->n);

    /* free A; B and C allocated and overwritten on the legacy stream */
    reuse_free(a);
    void *b = NULL, *c = NULL;
    reuse_realloc_twice(a, h->n, h->bn, h->write == WRITE_MEMSET ? write_memset : write_copy, LEGACY, &b, &c);

    reuse_open_all();
    SIM_OK(simtest_stream_wait_idle(rf.nb));
    bool ok = reuse_data_is(rf.dst, h->n, seed, "the reader of A");
    reuse_verdict_hazard(a, h->n, ok, h->what);
    assert_true(holds_overwrite(b, h->bn, h->write, "B"));
    assert_true(holds_overwrite(c, h->bn, h->write, "C"));
    reuse_free(b);
    reuse_free(c);
}

static void test_copy_reader_memset_reuse(void **state)
{
    (void)state;
    struct hazard h = {1 << 20, 1 << 20, READ_COPY, WRITE_MEMSET, "copy reads A, memset overwrites B"};
    run_hazard(&h);
}

static void test_copy_reader_copy_reuse_large(void **state)
{
    (void)state;
    struct hazard h = {6 << 20, 6 << 20, READ_COPY, WRITE_COPY, "copy reads A (6 MiB), copy overwrites B"};
    run_hazard(&h);
}

static void test_kernel_reader_memset_reuse(void **state)
{
    (void)state;
    struct hazard h = {64 << 10, 64 << 10, READ_KERNEL, WRITE_MEMSET, "kernel reads A, memset overwrites B"};
    run_hazard(&h);
}

static void test_kernel_reader_copy_reuse_small(void **state)
{
    (void)state;
    struct hazard h = {4096, 4096, READ_KERNEL, WRITE_COPY, "kernel reads A (4 KiB), copy overwrites B"};
    run_hazard(&h);
}

/* B smaller than A: a split of the freed block is just as unsafe. */
static void test_smaller_block_from_freed_block(void **state)
{
    (void)state;
    struct hazard h = {1 << 20, 128 << 10, READ_COPY, WRITE_MEMSET, "copy reads A, memset overwrites a smaller B"};
    run_hazard(&h);
}

/* reuse:fenced keeps caching: once the fence recorded at B's miss has
 * completed (the reader ran, the host saw its stream idle), an allocation of
 * A's size is served from the cache, not from the device. */
static void test_fenced_block_reusable_after_its_fence(void **state)
{
    (void)state;
    if (reuse_policy() != REUSE_FENCED) {
        skip();
        return;
    }
    enum { N = 12 << 20 }; /* a segment of its own: B cannot share it */
    unsigned seed = 77;
    void *a = reuse_alloc_filled(N, seed);
    reuse_gate_on(rf.nb);
    SIM_OK(cudaMemcpyAsync(rf.dst, a, 4096, cudaMemcpyDeviceToHost, rf.nb));
    int64_t fences0 = reuse_stat("num_fences");
    reuse_free(a);
    void *b = NULL;
    SIM_OK(cudaMalloc(&b, N)); /* a miss: the fence is recorded now */
    reuse_track(b);
    reuse_expect_disjoint(b, N, a, N);
    assert_true(reuse_stat("num_fences") > fences0);
    SIM_OK(cudaMemsetAsync(b, OVERWRITE, N, LEGACY));

    reuse_open_all();
    SIM_OK(simtest_stream_wait_idle(rf.nb));
    SIM_OK(simtest_stream_wait_idle(LEGACY));
    int64_t device_allocs = reuse_stat("num_device_alloc");
    void *c = NULL;
    SIM_OK(cudaMalloc(&c, N));
    reuse_track(c);
    if (reuse_stat("num_device_alloc") != device_allocs)
        fail_msg("a completed fence did not make A reusable: cudaMalloc asked the device again (A %p, C %p)", a, c);
    assert_false(reuse_overlap(c, N, b, N));
    bool ok = reuse_data_is(rf.dst, 4096, seed, "the reader of A");
    reuse_verdict_hazard(a, N, ok, "reuse after the fence completed");
    reuse_free(b);
    reuse_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        REUSETEST(test_copy_reader_memset_reuse),       REUSETEST(test_copy_reader_copy_reuse_large),
        REUSETEST(test_kernel_reader_memset_reuse),     REUSETEST(test_kernel_reader_copy_reuse_small),
        REUSETEST(test_smaller_block_from_freed_block), REUSETEST(test_fenced_block_reusable_after_its_fence),
    };
    return REUSE_RUN("reuse.core", tests);
}
