/*
 * The GPU registry: what every cucache process on one GPU holds, and how
 * one asks another to give idle cache back (docs/interposer.md, "Sharing
 * a GPU").  Written by libcucache.so (interpose/yield.c), read by
 * cucache-top and by the OOM report.  No CUDA here.
 *
 * One file per GPU and user: /dev/shm/cucache-gpu-UID-GPU-xxxxxxxx-....
 * (the device's UUID as NVML writes it), mode 0600, made whole under a
 * temporary name and linked into place, so that no process ever maps a
 * half-written header.  A file of another owner, with other permissions,
 * of another size, magic or version, or behind a symbolic link is refused
 * with one line naming the file and the problem, and the process runs on
 * without the registry on that GPU.
 *
 * Layout (ST_REG_VERSION): a header (the GPU's UUID and total bytes), then
 * ST_REG_SLOTS slots, one per process.  There is no lock:
 *   - a process claims a free slot with one compare-and-swap of its pid
 *     word from 0 to -pid, writes its start time and command name, then
 *     stores pid: a negative pid is a slot being set up;
 *   - it alone writes its figures, under a sequence count that is odd
 *     while it writes; a reader keeps a copy read between two equal even
 *     counts, and calls a slot stale if it never gets one;
 *   - a slot whose process is gone (no such pid, another start time, a
 *     zombie) is cleared by whoever finds it, with a compare-and-swap from
 *     the pid it read, so a process killed at any point leaves nothing a
 *     reader can act on after the next look;
 *   - the last process to leave removes the file; one that claimed a slot
 *     checks after that the path still names the file it mapped, and
 *     opens again if not;
 *   - asking: the asker raises `want` to the bytes it needs, increments
 *     `asks` and wakes the futex on it; the owner's thread, waiting on
 *     `asks`, sets `giving`, gives back what no queued work can touch,
 *     publishes its figures, stores the bytes in `given` and the time in
 *     `answered_ns`, sets `answered` to the asks count it served, then
 *     clears `giving` (unless more asks wait) and wakes the futex on
 *     `answered`.  The asker waits there until its deadline, and past it
 *     while `giving` is set, up to a bound it may move between slices
 *     (st_reg_wait_answer_by: while what it waits for keeps landing) or
 *     end early (it has landed); an asker that finds `giving`
 *     clear reads `answered` again, so an answer stored just before is
 *     never missed.  An owner that dies while giving is seen gone (its pid)
 *     at the asker's next look, a slice of 10 ms at most.
 * Nothing in a slot makes its owner do more than give back idle cache, and
 * only a process of the same user can open the file.
 */
#ifndef CUCACHE_STATS_REGISTRY_H
#define CUCACHE_STATS_REGISTRY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ST_REG_MAGIC "CUCACHEG"
#define ST_REG_VERSION 2u
#define ST_REG_SLOTS 256u
#define ST_REG_DIR "/dev/shm"
#define ST_REG_PREFIX "cucache-gpu-"

/* One process's figures for the GPU, in bytes and counts. */
#define ST_REG_FIGURES(X)                                                                                              \
    X(reserved)        /* segments held from the device */                                                            \
    X(allocated)       /* live allocations (rounded) */                                                               \
    X(cached)          /* reserved bytes free for reuse */                                                            \
    X(idle)            /* whole free segments it would give back now, without waiting */                             \
    X(pending)         /* freed, waiting on queued work */                                                            \
    X(allocs)          /* allocations served since it started */                                                      \
    X(hits)            /* ... of which from the cache */                                                              \
    X(ooms)            /* failed allocations */                                                                       \
    X(yields_given)    /* asks that made it give memory back */                                                       \
    X(bytes_given)     /* bytes given back so */                                                                      \
    X(yields_received) /* its failed allocations retried after others gave back */                                   \
    X(bytes_received)  /* bytes others gave back for them */                                                          \
    X(updated_ns)      /* CLOCK_REALTIME of this publication, ns */

typedef struct st_reg_figs_s {
#define ST_REG_FIELD(name) uint64_t name;
    ST_REG_FIGURES(ST_REG_FIELD)
#undef ST_REG_FIELD
} st_reg_figs_t;

typedef struct st_reg_slot_s {
    _Atomic int32_t pid; /* 0: free; -pid: being set up; pid: in use */
    uint32_t pad;
    uint64_t start; /* its start time: /proc/PID/stat field 22 */
    char comm[16];  /* its command name */
    _Atomic uint32_t seq; /* figures: odd while being written */
    uint32_t pad2;
#define ST_REG_FIELD(name) _Atomic uint64_t name;
    struct {
        ST_REG_FIGURES(ST_REG_FIELD)
    } figs;
#undef ST_REG_FIELD
    _Atomic uint32_t asks;     /* futex: asks made of this process */
    _Atomic uint32_t answered; /* futex: the asks count its last answer served */
    _Atomic uint64_t want;     /* bytes the askers since the last answer need, at most */
    _Atomic uint64_t given;    /* bytes the last answer gave back */
    _Atomic int32_t asker;     /* pid of the last asker */
    _Atomic uint32_t giving;   /* 1 while its thread serves asks (gives back), else 0 */
    _Atomic uint64_t answered_ns; /* CLOCK_MONOTONIC of the last answer; 0: none yet */
} st_reg_slot_t;

typedef struct st_reg_file_s {
    char magic[8];        /* ST_REG_MAGIC */
    uint32_t version;     /* ST_REG_VERSION */
    uint32_t header_size; /* offsetof(st_reg_file_t, slot) */
    uint32_t slot_size;   /* sizeof(st_reg_slot_t) */
    uint32_t nslots;      /* ST_REG_SLOTS */
    uint64_t total;       /* the GPU's bytes */
    char uuid[48];        /* "GPU-..." */
    st_reg_slot_t slot[];
} st_reg_file_t;

#define ST_REG_BYTES (sizeof(st_reg_file_t) + ST_REG_SLOTS * sizeof(st_reg_slot_t))

typedef struct st_reg_s {
    st_reg_file_t *f;
    char path[128];
    uint64_t dev, ino; /* the file opened */
} st_reg_t;

/* NVML's form of a UUID's 16 bytes: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
void st_reg_uuid_string(const uint8_t uuid[16], char out[48]);
/* The registry file of a GPU (by its "GPU-..." UUID) for this user. */
void st_reg_path(const char *uuid, char *buf, size_t len);

/* Opens the registry of the GPU, creating it when create and absent (with
 * total).  0; -1 when absent (and not create); -2 when refused, with the
 * reason in why (the file and what is wrong with it). */
int st_reg_open(const char *path, const char *uuid, uint64_t total, bool create, st_reg_t *out, char *why,
                size_t len);
void st_reg_close(st_reg_t *r);

/* Claims a slot for this process; its index, or -1 when the table is full
 * (after reaping the dead). */
int st_reg_claim(st_reg_t *r);
/* Gives the slot back (the process leaves); the last process to leave
 * removes the file. */
void st_reg_leave(st_reg_t *r, int slot);
/* Whether the path still names the file opened (the last process to leave
 * may have removed it just before this one claimed its slot: then leave
 * and open again). */
bool st_reg_current(const st_reg_t *r);
/* Removes this user's registry files in which no process lives (every
 * slot free once the dead are cleared): those of processes killed before
 * they could leave, and of GPUs that exist no more (each private simulated
 * device has a UUID of its own).  Safe as the last leaver's removal is: a
 * process that mapped such a file and claims a slot after finds its path
 * gone (st_reg_current) and opens again.  Files refused by st_reg_open are
 * left as they are.  Returns how many were removed. */
size_t st_reg_sweep(void);
/* Publishes this process's figures in its slot. */
void st_reg_publish(st_reg_t *r, int slot, const st_reg_figs_t *figs);

/* A copy of one slot as a reader sees it. */
typedef struct st_reg_view_s {
    int slot;
    int32_t pid;
    uint64_t start;
    char comm[16];
    bool stale;  /* the figures could not be read whole (a writer died mid-way) */
    bool giving; /* its thread was giving idle cache back */
    st_reg_figs_t figs;
} st_reg_view_t;

/* The live processes of the registry (the dead are cleared first): at most
 * max copies into out; returns how many there are. */
size_t st_reg_list(st_reg_t *r, st_reg_view_t *out, size_t max);

/* Asks the process of `slot` for up to `want` bytes: returns the ticket to
 * wait for. */
uint32_t st_reg_ask(st_reg_t *r, int slot, uint64_t want);
/* How an asker's wait for one neighbour ended. */
typedef enum st_reg_wait_e {
    ST_REG_ANSWERED,     /* it answered: the bytes it gave and when */
    ST_REG_NO_ANSWER,    /* the deadline passed and it was not giving back */
    ST_REG_STILL_GIVING, /* the wait ended (its bound, or the asker's need landed) while it was still giving back */
    ST_REG_DIED_GIVING,  /* it died while giving back (seen giving, then gone) */
    ST_REG_GONE,         /* it died or left before answering, not seen giving */
} st_reg_wait_t;

/* One neighbour's answer to an ask. */
typedef struct st_reg_answer_s {
    st_reg_wait_t end;
    uint64_t given; /* bytes the answer gave back (ST_REG_ANSWERED) */
    uint64_t at_ns; /* CLOCK_MONOTONIC of the answer (ST_REG_ANSWERED) */
} st_reg_answer_t;

/* Waits until the ask `ticket` of the process `pid` in slot was answered:
 * until deadline_ns (CLOCK_MONOTONIC), and past it while the process is
 * giving back, until bound_ns at most.  Returns at once when the process
 * is gone (its slot cleared, taken by another pid, or its pid dead). */
st_reg_answer_t st_reg_wait_answer(st_reg_t *r, int slot, int32_t pid, uint32_t ticket, uint64_t deadline_ns,
                                   uint64_t bound_ns);
/* The asker's bound, asked before each slice of a wait (every 10 ms at
 * most): how long it waits for an owner that is giving back (CLOCK_MONOTONIC
 * ns), or 0 to end the wait at once (what it waited for has landed). */
typedef uint64_t (*st_reg_bound_fn)(void *arg, uint64_t now_ns);
/* st_reg_wait_answer with a bound that moves (bound(arg, now) each slice). */
st_reg_answer_t st_reg_wait_answer_by(st_reg_t *r, int slot, int32_t pid, uint32_t ticket, uint64_t deadline_ns,
                                      st_reg_bound_fn bound, void *arg);
/* The owner's side: waits up to timeout_ns for an ask beyond `served`;
 * returns the asks count (== served when none came). */
uint32_t st_reg_wait_ask(st_reg_t *r, int slot, uint32_t served, uint64_t timeout_ns);
/* Wakes the owner's thread without an ask (to stop it). */
void st_reg_wake_owner(st_reg_t *r, int slot);
/* The bytes the askers up to now want (and resets the request); marks
 * the slot giving until the answer. */
uint64_t st_reg_take_want(st_reg_t *r, int slot);
/* Answers the asks up to `asks` with the bytes given back (publish the
 * figures first: an asker that sees the answer reads them); the slot stays
 * giving when more asks came meanwhile. */
void st_reg_answer(st_reg_t *r, int slot, uint32_t asks, uint64_t given);

uint64_t st_reg_now_ns(void); /* CLOCK_MONOTONIC */

/* This process's waits for its neighbours' answers on a device (CUDA
 * ordinal below ST_REG_DEVICES), for the exit summary. */
enum { ST_REG_DEVICES = 64 };
typedef struct st_reg_waits_s {
    uint64_t asks;     /* failed allocations that asked and waited */
    uint64_t total_ns; /* time they waited in all */
    uint64_t max_ns;   /* the longest wait */
    uint64_t given;    /* bytes given to them while they waited */
} st_reg_waits_t;
void st_reg_note_wait(int device, uint64_t ns, uint64_t given);
st_reg_waits_t st_reg_waits(int device);
/* How old the figures are (their updated_ns against CLOCK_REALTIME). */
uint64_t st_reg_age_ms(const st_reg_figs_t *figs);

#endif
