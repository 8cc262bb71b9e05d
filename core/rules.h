/*
 * The reuse rules: when memory that a plain free (cudaFree, cuMemFree: no
 * stream named) gave back may serve another allocation.
 *
 * One row per rule (core_rules, rules.c), indexed by conf_t.reuse.  Every
 * layer reads the row and nothing else names a rule: the core at a free
 * (the idle shortcut) and at a hit or a miss (hand-outs, hand_out.h), the
 * interposer before a plain free (whether it synchronises first), the
 * replay and the what-if when they replay one, the configuration parser
 * for the names and CUCACHE_CONF=help, and the tests for what to expect.
 * Adding a rule is adding a row (and its enum value, in conf.h).
 *
 * A free that names a stream (cudaFreeAsync) and the frees of imported or
 * held memory follow the free modes of core.h whatever the rule.
 */
#ifndef CUCACHE_CORE_RULES_H
#define CUCACHE_CORE_RULES_H

#include <stdbool.h>

#include "conf.h"
#include "core.h"

/* What a plain free becomes before the core sees it. */
typedef enum rule_plain_e {
    RULE_PLAIN_FENCED,     /* CORE_FREE_FENCED: pending behind the device-wide fence */
    RULE_PLAIN_NOW,        /* CORE_FREE_NOW: the program vouches that its stream order covers every reuse */
    RULE_PLAIN_AFTER_SYNC, /* the caller synchronises the device (backend device_sync), then CORE_FREE_NOW;
                            * CORE_FREE_FENCED when it cannot (a capture is in progress) */
} rule_plain_t;

typedef struct core_rule_s {
    const char *name;   /* reuse:<name> in CUCACHE_CONF */
    rule_plain_t plain; /* what a plain free becomes */
    /* a plain free of a block no work was submitted since it was handed out
     * is reusable at once: nothing can name it.  Needs the backend's
     * work_epoch (without it: fenced) */
    bool idle_shortcut;
    /* frees behind fences are handed out before their fences complete, the
     * device ordered after the fences (hand_out.h).  Needs the backend's
     * fence_order (without it: never handed out) */
    bool hands_out;
    /* a plain free never reaches reuse while the old owner's queued work may
     * still use the block, whatever streams the program uses */
    bool safe;
    /* the OOM report's what-if tries it, alone and with expandable segments
     * or a split limit: a safe rule that holds fewer frees behind fences */
    bool whatif;
    const char *help; /* one line: what a plain free waits for */
} core_rule_t;

extern const core_rule_t core_rules[CONF_REUSE_COUNT];

static inline const core_rule_t *conf_rule(const conf_t *c)
{
    return &core_rules[c->reuse];
}

/* The free mode of a plain free under rule r.  synced: the caller
 * synchronised the device just before (asked of RULE_PLAIN_AFTER_SYNC rules
 * only; a caller that cannot, during a capture, passes false). */
static inline core_free_t rule_plain_free(const core_rule_t *r, bool synced)
{
    return r->plain == RULE_PLAIN_NOW || (r->plain == RULE_PLAIN_AFTER_SYNC && synced) ? CORE_FREE_NOW
                                                                                       : CORE_FREE_FENCED;
}

#endif
