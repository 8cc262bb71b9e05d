/*
 * The environment of libcucache.so: every CUCACHE_* variable it reads, read
 * once with secure_getenv into one struct (env.c), its values checked there.
 * The files that act on a variable read the struct, never the environment.
 */
#ifndef CUCACHE_INTERPOSE_ENV_H
#define CUCACHE_INTERPOSE_ENV_H

#include <stdbool.h>
#include <stddef.h>

/* When a snapshot is written besides the API call (CUCACHE_SNAPSHOT_ON). */
enum {
    HOOK_SNAP_ON_OOM = 1,    /* the process's first out-of-memory failure */
    HOOK_SNAP_ON_EXIT = 2,   /* at exit */
    HOOK_SNAP_ON_SIGNAL = 4, /* on SIGUSR1 (signal.c) */
};

/* Events a device's ring may keep (CUCACHE_SNAPSHOT_EVENTS,
 * cucache_record_memory_history). */
#define HOOK_RING_EVENTS_MAX ((size_t)1 << 26)

/* The variables env.c checks, in the order it reads them: the first bad one
 * is reported, as if the program had stopped there. */
typedef enum hook_env_var_e {
    HOOK_ENV_OK, /* every value is good */
    HOOK_ENV_REPORT,
    HOOK_ENV_SNAPSHOT,
    HOOK_ENV_SNAPSHOT_ON,
    HOOK_ENV_SNAPSHOT_EVENTS,
    HOOK_ENV_HISTORY,
    HOOK_ENV_LEAK_EXITCODE,
    HOOK_ENV_STACKS,
    HOOK_ENV_WHATIF_MS,
    HOOK_ENV_REGISTRY,
    HOOK_ENV_YIELD,
    HOOK_ENV_YIELD_MS,
} hook_env_var_t;

/* A value set to the empty string counts as unset, but for CUCACHE_CONF,
 * which is kept as written (an empty configuration is the defaults). */
typedef struct hook_env_s {
    const char *conf;     /* CUCACHE_CONF as written; NULL: unset */
    const char *log;      /* CUCACHE_LOG: file name template; NULL: stderr */
    bool report_exit;     /* CUCACHE_REPORT=exit */
    const char *snapshot; /* CUCACHE_SNAPSHOT: file name template; NULL: none */
    unsigned snapshot_on; /* CUCACHE_SNAPSHOT_ON: HOOK_SNAP_ON_*; OOM by default when snapshot is set */
    size_t ring_events;   /* CUCACHE_SNAPSHOT_EVENTS: events kept per device; 0: no ring; 100000 with a snapshot */
    size_t history;       /* CUCACHE_HISTORY: allocator calls kept per device for the what-if; 0: none */
    int leak_exitcode;    /* CUCACHE_LEAK_EXITCODE: 1..255; 0: no leak check */
    const char *stacks;   /* CUCACHE_STACKS as written; NULL: unset */
    int stack_mode;       /* its st_stack_mode_t; ST_STACKS_OFF when unset */
    int stack_depth;      /* its frames of each kind per stack; 0: off */
    unsigned whatif_ms;   /* CUCACHE_WHATIF_MS: the what-if's time budget; 0: no what-if */
    const char *trace;    /* CUCACHE_TRACE: file name template; NULL: no trace */
    bool registry;        /* CUCACHE_REGISTRY: in the GPU registry (yield.c); on by default */
    bool yield;           /* CUCACHE_YIELD: asks neighbours at OOM and answers them; on by default */
    unsigned yield_ms;    /* CUCACHE_YIELD_MS: how long a failed allocation waits for their answers */
    /* CUCACHE_TEST_NO_STREAM_WAIT, for tests only: the backend's stream_wait
     * (a free on another stream reused early) inserts no wait and says it
     * did, so that tests/interpose/test_xstream.c sees the race detector
     * catch the reuse (backend.c) */
    bool test_no_stream_wait;
    hook_env_var_t bad;   /* the first variable with a bad value; HOOK_ENV_OK: none */
    char why[512];        /* then: one line naming the variable and its value */
} hook_env_t;

/* The environment, read and checked on the first call (the constructor's);
 * the same struct afterwards, in every thread and in a fork child. */
const hook_env_t *hook_env(void);

/* A CUCACHE_STACKS value (also cucache_record_memory_history_stacks'):
 * its st_stack_mode_t and depth (0 for off); 0, or -1 with err saying what
 * is wrong (without the variable's name, which the caller adds). */
int hook_stacks_parse(const char *text, int *mode, int *depth, char *err, size_t errlen);

#endif
