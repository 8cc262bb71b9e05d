/*
 * Cross-stream reuse: CUDA's reuse policies, one row each, and the step
 * that serves a stream from its blocks freed on other streams before
 * their events complete (cross.h says when and why).
 */
#include "cross.h"

/* clang-format off */
const cross_policy_t cross_policies[3] = {
    /* columns: bit, cuda, step (cross.h) */
    {CORE_REUSE_FOLLOW_EVENTS, "cudaMemPoolReuseFollowEventDependencies",   CROSS_NO_STEP},
    {CORE_REUSE_OPPORTUNISTIC, "cudaMemPoolReuseAllowOpportunistic",        CROSS_POLL},
    {CORE_REUSE_INTERNAL_DEPS, "cudaMemPoolReuseAllowInternalDependencies", CROSS_WAIT},
};
/* clang-format on */

unsigned cross_policy(core_dev_t *d)
{
    unsigned policy = d->be.reuse_policy ? d->be.reuse_policy(d->be.ctx, d->device) : CORE_REUSE_ALL;
    d->reuse_off = CORE_REUSE_ALL & ~policy;
    return policy;
}

bool cross_allows(unsigned policy, cross_step_t step)
{
    for (size_t i = 0; i < sizeof cross_policies / sizeof cross_policies[0]; i++)
        if (cross_policies[i].step == step)
            return (policy & cross_policies[i].bit) != 0;
    return true; /* no policy governs it */
}

/* clang-format off */
const unsigned cross_waits[CROSS_AT_COUNT] = {
    [CROSS_AT_HIT]  = PEND_ONE_STREAM,
    [CROSS_AT_MISS] = PEND_ONE_STREAM,
    [CROSS_AT_FULL] = PEND_ONE_STREAM | PEND_MANY_STREAMS,
};
/* clang-format on */

size_t cross_release(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t rounded, unsigned policy,
                     cross_at_t at)
{
    /* key 0 is no stream: nothing to make wait */
    if (!d->be.stream_wait || d->capturing || stream == 0)
        return 0;
    return pend_wait_on_device(d, pool, stream, rounded, cross_allows(policy, CROSS_POLL), cross_waits[at]);
}

bool cross_release_on_hit(core_dev_t *d, pool_t *pool, core_stream_t stream, size_t rounded)
{
    unsigned policy = CORE_REUSE_ALL & ~d->reuse_off;
    return cross_allows(policy, CROSS_WAIT) && cross_release(d, pool, stream, rounded, policy, CROSS_AT_HIT) > 0;
}
