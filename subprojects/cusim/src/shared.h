/*
 * One simulated device shared by several processes (CUCACHE_SIM_SHARED=KEY;
 * engine_shared.c).  Without a key every process has a device of its own.
 *
 * What is shared lives in one file, /dev/shm/cucache-sim-UID-KEY, created
 * for the user alone (mode 0600; a file owned by another user, with other
 * permissions or behind a symbolic link is refused): the devices' identity
 * (their count, capacity and UUIDs, which every process must agree on) and
 * a table of the processes that use them, each with its pid, its start
 * time (/proc/PID/stat, which tells a reused pid apart), its command name
 * and the bytes it holds on each device.  A device's free memory is its
 * capacity less every live process's bytes; each process still has its own
 * addresses and bytes (the memfd of engine_mem.c), as on a GPU.
 *
 * Death: an entry whose process is gone (no such pid, another start time,
 * a zombie) is reaped whenever the table is read or an allocation would
 * not fit, so a process that exits or is killed gives all its memory back.
 * The table's lock is a robust process-shared mutex: when its holder dies
 * the next locker reaps every dead entry and marks the lock consistent.
 * Each process writes only its own entry, and a field that says an entry
 * is in use (pid) is written last and cleared last, so whatever a holder
 * killed mid-update left behind belongs to a dead process and is reaped.
 *
 * This file and engine_shared.c do not use the engine's state: the
 * simulated NVML links them too.  sim_log is the linking library's.
 */
#ifndef CUCACHE_SIM_SHARED_H
#define CUCACHE_SIM_SHARED_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_SHARED_MAGIC "CUSIMSHD"
#define SIM_SHARED_VERSION 1u
#define SIM_SHARED_DEVICES 16 /* engine.h's SIM_MAX_DEVICES */
#define SIM_SHARED_PROCS 256  /* processes using the device at once */
#define SIM_SHARED_KEY_MAX 64 /* bytes of a key */
#define SIM_SHARED_DIR "/dev/shm"
#define SIM_SHARED_PREFIX "cucache-sim-"

/* One process's entry in the table. */
typedef struct sim_shared_proc_s {
    int32_t pid; /* 0: free; written last, cleared last */
    uint32_t pad;
    uint64_t start;                     /* its start time: /proc/PID/stat field 22, clock ticks since boot */
    char comm[16];                      /* its command name, NUL-terminated */
    uint64_t bytes[SIM_SHARED_DEVICES]; /* device memory it holds, by ordinal (charged pages) */
} sim_shared_proc_t;

/* What every process of a key must agree on. */
typedef struct sim_shared_identity_s {
    uint32_t ndev; /* devices, 1 to SIM_SHARED_DEVICES */
    uint32_t pad;
    uint64_t capacity;                    /* bytes of each device */
    uint8_t uuid[SIM_SHARED_DEVICES][16]; /* cuDeviceGetUuid's bytes of each */
} sim_shared_identity_t;

/* The file's layout (version SIM_SHARED_VERSION). */
typedef struct sim_shared_region_s {
    char magic[8];    /* SIM_SHARED_MAGIC */
    uint32_t version; /* SIM_SHARED_VERSION */
    uint32_t size;    /* sizeof(sim_shared_region_t) */
    uint32_t nprocs;  /* SIM_SHARED_PROCS */
    uint32_t pad;
    sim_shared_identity_t id;
    pthread_mutex_t lock; /* robust, process-shared: guards proc[] */
    sim_shared_proc_t proc[SIM_SHARED_PROCS];
} sim_shared_region_t;

typedef struct sim_shared_s sim_shared_t;

/* NULL when key is a valid key (1 to SIM_SHARED_KEY_MAX bytes of letters,
 * digits, '.', '_', '-', not starting with '.'), else what a key must be. */
const char *sim_shared_key_error(const char *key);
/* The file of key for this user, into buf; false when it does not fit. */
bool sim_shared_path(const char *key, char *buf, size_t len);
/* Opens the shared device of key.  want not NULL: creates the file if there
 * is none (with *want) and checks that its identity is *want; NULL: opens
 * an existing file.  enter: enters this process in the table (a process
 * using the device; the NVML only reads).  NULL after printing one line
 * naming the file and what is wrong. */
sim_shared_t *sim_shared_open(const char *key, const sim_shared_identity_t *want, bool enter);
void sim_shared_close(sim_shared_t *sh);
const sim_shared_identity_t *sim_shared_identity(const sim_shared_t *sh);
/* Charges bytes to this process on device dev if that many are free
 * (reaping dead processes before saying no); false when they are not, or
 * the lock cannot be taken (printed). */
bool sim_shared_charge(sim_shared_t *sh, int dev, uint64_t bytes);
void sim_shared_uncharge(sim_shared_t *sh, int dev, uint64_t bytes);
/* Bytes all live processes hold on dev (dead ones reaped first). */
uint64_t sim_shared_used(sim_shared_t *sh, int dev);
/* The live processes (dead ones reaped first): copies at most max entries
 * to out and returns how many there are. */
size_t sim_shared_procs(sim_shared_t *sh, sim_shared_proc_t *out, size_t max);
/* Tests only: takes the table's lock and keeps it (the process is then
 * killed holding it). */
bool sim_shared_hold_lock(sim_shared_t *sh);

/* Reads /proc/PID/stat: its start time (clock ticks since boot, which
 * tells a reused pid apart), its state letter and (comm not NULL) its
 * command name; false when there is no such process. */
bool sim_proc_stat(int32_t pid, uint64_t *start, char *state, char comm[16]);

/* The simulated library's message sink ("cucache-sim: ..." on stderr). */
void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
