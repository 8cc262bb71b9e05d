/*
 * fuzz_replay: cucache-replay's readers under libFuzzer, AddressSanitizer and
 * UndefinedBehaviorSanitizer.  Every input goes through format
 * detection and the matching reader (cucache trace, PyTorch snapshot pickle,
 * RMM CSV); what reads is replayed through the core (1 GiB per device, a
 * curve) and through the floor.  A reader must return an error, never crash,
 * hang or leak; a replay must finish with reserved covering allocated.
 * Seeds: tests/replay/fuzz_corpus (one file of each format).
 */
#include <stdint.h>
#include <stdlib.h>

#include "replay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    rp_input_t in;
    char err[512];
    if (rp_input_parse("fuzz", data, len, &in, err, sizeof err) != 0)
        return 0;
    rp_config_t cfgs[2] = {{.label = "default", .mode = RP_MODE_CORE}, {.label = "floor", .mode = RP_MODE_FLOOR}};
    conf_defaults(&cfgs[0].conf);
    rp_opts_t opts = {.capacity = 1ull << 30, .curve_buckets = 8};
    for (int k = 0; k < 2; k++) {
        rp_result_t r;
        if (rp_replay(&in, &cfgs[k], &opts, &r, err, sizeof err) == 0) {
            if (!r.reserved_covers)
                abort();
            rp_result_free(&r);
        }
    }
    rp_input_free(&in);
    return 0;
}
