/*
 * The reuse rules, one row each (rules.h).  The first row is listed first in
 * CUCACHE_CONF=help; conf_defaults picks the default.
 */
#include "rules.h"

/* clang-format off */
const core_rule_t core_rules[CONF_REUSE_COUNT] = {
    /* columns: name, plain, idle_shortcut, hands_out, safe, whatif, help (rules.h) */
    [CONF_REUSE_ORDERED]     = {"ordered",     RULE_PLAIN_FENCED,     true,  true,  true,  false, "behind a shared fence, handed out early with the device ordered after it"},
    [CONF_REUSE_FENCED]      = {"fenced",      RULE_PLAIN_FENCED,     true,  false, true,  false, "once its shared fence completed"},
    [CONF_REUSE_STREAM]      = {"stream",      RULE_PLAIN_NOW,        false, false, false, false, "at once: stream order only, as in PyTorch"},
    [CONF_REUSE_SYNC]        = {"sync",        RULE_PLAIN_AFTER_SYNC, false, false, true,  true,  "after a device synchronisation at the free"},
    [CONF_REUSE_FENCED_HOST] = {"fenced-host", RULE_PLAIN_FENCED,     false, false, true,  false, "as fenced, without the shortcut for a block no work could use"},
};
/* clang-format on */
