/*
 * The runtime's answer to a function it does not simulate (src/stub.h).
 * Only the shared runtimes have stubs: in libcudart_static.a a weak stub
 * could be pulled in before the member holding the real definition.
 */
#include "runtime_internal.h"
#include "shared.h"
#include "stub.h"

int sim_stub_runtime(atomic_flag *once, const char *name)
{
    if (!atomic_flag_test_and_set(once))
        sim_log("%s is not simulated (cudaErrorNotSupported)", name);
    return (int)rt_ret(cudaErrorNotSupported);
}
