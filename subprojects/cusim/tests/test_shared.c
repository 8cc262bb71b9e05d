/*
 * Proves one simulated device shared by several processes
 * (CUCACHE_SIM_SHARED=KEY), with tests/ipc_peer as the other process:
 * each sees the other's memory in cudaMemGetInfo; an allocation fails
 * while the other holds the memory and succeeds once it frees it; a holder
 * killed with SIGKILL, even while it holds the table's lock, gives all its
 * memory back; an entry of a reused pid (another start time) is reaped;
 * IPC memory is counted once, to its exporter; two keys are two devices
 * that never see each other.  The refusals of a bad file are in
 * test_config.c.  Meson runs it with CUCACHE_SIM_CAPACITY=1G.
 */
#include "peer.h"
#include "simtest.h"

#include "../src/shared.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define CAP ((size_t)1 << 30)

static char key[64], other_key[64];

static void key_path(const char *k, char *buf, size_t len)
{
    snprintf(buf, len, SIM_SHARED_DIR "/" SIM_SHARED_PREFIX "%u-%s", (unsigned)geteuid(), k);
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(key, sizeof key, "simtest-shared-%d", (int)getpid());
    snprintf(other_key, sizeof other_key, "simtest-shared-%d-other", (int)getpid());
    setenv("CUCACHE_SIM_SHARED", key, 1);
    int n;
    return cudaGetDeviceCount(&n) == cudaSuccess ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    char path[256];
    key_path(key, path, sizeof path);
    unlink(path);
    key_path(other_key, path, sizeof path);
    unlink(path);
    return 0;
}

static size_t my_free(void)
{
    size_t f = 0, t = 0;
    SIM_OK(cudaMemGetInfo(&f, &t));
    assert_int_equal(t, CAP);
    return f;
}

static size_t peer_free(peer_t *p)
{
    unsigned long long f = 0, t = 0;
    const char *a = peer_cmd(p, "meminfo");
    if (sscanf(a, "ok %llx %llx", &f, &t) != 2)
        fail_msg("the peer answered \"%s\" to meminfo", a);
    assert_int_equal(t, CAP);
    return (size_t)f;
}

static uintptr_t peer_alloc(peer_t *p, size_t size)
{
    return peer_ptr(peer_cmd(p, "alloc %zx", size));
}

/* Kills the peer with SIGKILL and waits until it is dead but not yet
 * reaped (a zombie, as a killed process's parent may leave it). */
static void peer_kill_unreaped(peer_t *p)
{
    assert_int_equal(kill(p->pid, SIGKILL), 0);
    siginfo_t si;
    assert_int_equal(waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOWAIT), 0);
}

static void peer_reap(peer_t *p)
{
    fclose(p->to);
    fclose(p->from);
    p->to = p->from = NULL;
    int status;
    assert_int_equal(waitpid(p->pid, &status, 0), p->pid);
}

static void test_usage_seen_both_ways(void **state)
{
    (void)state;
    peer_t peer;
    peer_start(&peer);
    size_t base = my_free();
    assert_int_equal(peer_free(&peer), base);
    uintptr_t q = peer_alloc(&peer, 256 * MIB);
    assert_int_equal(my_free(), base - 256 * MIB);
    void *d = NULL;
    SIM_OK(cudaMalloc(&d, 128 * MIB));
    assert_int_equal(peer_free(&peer), base - 384 * MIB);
    peer_expect(peer_cmd(&peer, "free %lx", (unsigned long)q), "ok");
    assert_int_equal(my_free(), base - 128 * MIB);
    SIM_OK(cudaFree(d));
    assert_int_equal(peer_free(&peer), base);
    assert_int_equal(peer_stop(&peer), 0);
}

static void test_full_until_the_other_frees(void **state)
{
    (void)state;
    peer_t peer;
    peer_start(&peer);
    size_t base = my_free();
    uintptr_t q = peer_alloc(&peer, base - 64 * MIB);
    void *d = NULL;
    assert_int_equal(cudaMalloc(&d, 128 * MIB), cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    SIM_OK(cudaMalloc(&d, 64 * MIB)); /* what is left still fits */
    SIM_OK(cudaFree(d));
    peer_expect(peer_cmd(&peer, "free %lx", (unsigned long)q), "ok");
    SIM_OK(cudaMalloc(&d, 128 * MIB));
    SIM_OK(cudaFree(d));
    assert_int_equal(peer_stop(&peer), 0);
}

static void test_sigkill_gives_memory_back(void **state)
{
    (void)state;
    peer_t peer;
    peer_start(&peer);
    size_t base = my_free();
    peer_alloc(&peer, 512 * MIB);
    peer_alloc(&peer, 256 * MIB);
    peer_alloc(&peer, 1000); /* a small page */
    assert_int_equal(my_free(), base - 770 * MIB);
    peer_kill_unreaped(&peer);
    assert_int_equal(my_free(), base); /* a zombie holds nothing */
    peer_reap(&peer);
    void *d = NULL;
    SIM_OK(cudaMalloc(&d, base));
    SIM_OK(cudaFree(d));
}

/* The lock's holder dies: the next locker makes the table consistent,
 * without waiting, and the dead holder's memory is free. */
static void test_killed_holding_the_lock(void **state)
{
    (void)state;
#ifdef __SANITIZE_THREAD__
    /* ThreadSanitizer takes a robust mutex that pthread_mutex_timedlock
     * returned with EOWNERDEAD (the holder died in another process) as
     * not locked, and reports its unlock; the plain and ASan builds run it */
    skip();
#endif
    peer_t peer;
    peer_start(&peer);
    size_t base = my_free();
    peer_alloc(&peer, 512 * MIB);
    peer_expect(peer_cmd(&peer, "holdlock"), "ok");
    peer_kill_unreaped(&peer);
    assert_int_equal(my_free(), base);
    void *d = NULL;
    SIM_OK(cudaMalloc(&d, base));
    SIM_OK(cudaFree(d));
    peer_reap(&peer);
}

/* An entry whose pid is alive but started at another time is a process
 * that has gone, its pid now someone else's: it is reaped. */
static void test_reused_pid_is_reaped(void **state)
{
    (void)state;
    size_t base = my_free();
    char path[256];
    key_path(key, path, sizeof path);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    sim_shared_region_t *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(r != MAP_FAILED);
    int slot = -1;
    for (int i = 0; i < SIM_SHARED_PROCS && slot < 0; i++)
        if (r->proc[i].pid == 0)
            slot = i;
    assert_true(slot >= 0);
    sim_shared_proc_t *e = &r->proc[slot];
    e->start = 1; /* clock tick 1 after boot: not this process's start */
    snprintf(e->comm, sizeof e->comm, "gone");
    e->bytes[0] = 512 * MIB;
    e->pid = (int32_t)getpid(); /* alive: this very process */
    void *d = NULL;
    SIM_OK(cudaMalloc(&d, base)); /* would not fit beside the fake entry */
    SIM_OK(cudaFree(d));
    assert_int_equal(e->pid, 0);
    assert_int_equal(my_free(), base);
    munmap(r, sizeof *r);
}

static void test_ipc_counted_once(void **state)
{
    (void)state;
    peer_t peer;
    peer_start(&peer);
    size_t base = my_free();
    void *d = NULL;
    SIM_OK(cudaMalloc(&d, 256 * MIB));
    cudaIpcMemHandle_t h;
    SIM_OK(cudaIpcGetMemHandle(&h, d));
    uintptr_t p = peer_ptr(peer_open(&peer, &h, cudaIpcMemLazyEnablePeerAccess));
    assert_int_equal(peer_free(&peer), base - 256 * MIB);
    assert_int_equal(my_free(), base - 256 * MIB);
    peer_expect(peer_cmd(&peer, "close %lx", (unsigned long)p), "ok");
    SIM_OK(cudaFree(d));
    assert_int_equal(peer_free(&peer), base);
    assert_int_equal(peer_stop(&peer), 0);
}

/* A peer with another key has a device of its own: neither sees the
 * other's memory, and both can fill their device. */
static void test_two_keys_never_meet(void **state)
{
    (void)state;
    peer_t peer;
    setenv("CUCACHE_SIM_SHARED", other_key, 1);
    peer_start(&peer);
    setenv("CUCACHE_SIM_SHARED", key, 1);
    size_t base = my_free();
    assert_int_equal(peer_free(&peer), CAP);
    uintptr_t q = peer_alloc(&peer, 768 * MIB);
    assert_int_equal(my_free(), base);
    void *d = NULL;
    SIM_OK(cudaMalloc(&d, 768 * MIB));
    assert_int_equal(peer_free(&peer), CAP - 768 * MIB);
    SIM_OK(cudaFree(d));
    peer_expect(peer_cmd(&peer, "free %lx", (unsigned long)q), "ok");
    assert_int_equal(peer_stop(&peer), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_seen_both_ways),      cmocka_unit_test(test_full_until_the_other_frees),
        cmocka_unit_test(test_sigkill_gives_memory_back), cmocka_unit_test(test_killed_holding_the_lock),
        cmocka_unit_test(test_reused_pid_is_reaped),      cmocka_unit_test(test_ipc_counted_once),
        cmocka_unit_test(test_two_keys_never_meet),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
