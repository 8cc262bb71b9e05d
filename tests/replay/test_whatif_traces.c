/*
 * The what-if at an OOM (core/whatif.c) on the shared PyTorch traces, at
 * capacities between each trace's floor and what PyTorch reserved: the
 * trace is replayed through the core with its history kept, as
 * the interposer keeps it, and at the first OOM core_whatif runs on that
 * device as the OOM report runs it.  Then its verdicts are held against
 * plain replays of the trace up to the failed request (cucache-replay's
 * engine, on its own paged device):
 *
 *   - the current settings failed there too (reproduced);
 *   - every setting it names (fits) serves every allocation and the
 *     failed request;
 *   - every setting it tried and rejected on the idle device fails there
 *     (seen to fail with the what-if made to reject a setting that fits:
 *     expandable_segments:true,reuse:sync reported not served when idle);
 *   - the settings that --fit finds for the whole trace at that capacity
 *     are among those it names.
 *
 * Usage: test_whatif_traces TRACE_DIR
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core.h"
#include "replay.h"

#define MiB ((uint64_t)1 << 20)

static const char *trace_dir;

typedef struct hook_s {
    core_whatif_t w;
    bool ran;
} hook_t;

static void on_oom(void *ctx, core_dev_t *d, const core_oom_t *oom)
{
    hook_t *h = ctx;
    core_whatif_opts_t o = {.capacity = oom->device_free + oom->reserved,
                            .total = oom->device_total,
                            .budget_s = 60,
                            .threads = 2,
                            .conf_text = ""};
    core_whatif(d, oom, &o, &h->w);
    h->ran = true;
}

static rp_result_t replay_conf(const rp_input_t *in, const char *text, uint64_t capacity)
{
    rp_config_t c = {.label = text, .mode = RP_MODE_CORE, .conf_text = text};
    conf_defaults(&c.conf);
    char err[256];
    if (text[0] && conf_parse(&c.conf, text, err, sizeof err) != 0)
        fail_msg("%s: %s", text, err);
    rp_opts_t o = {.capacity = capacity};
    rp_result_t r;
    if (rp_replay(in, &c, &o, &r, err, sizeof err) != 0)
        fail_msg("replay %s: %s", text, err);
    return r;
}

static void check_trace(const char *file, uint64_t capacity)
{
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/%s", trace_dir, file);
    rp_input_t in;
    if (rp_input_load(path, &in, err, sizeof err) != 0)
        fail_msg("%s", err);

    /* the run: defaults, history kept, the what-if at the first OOM */
    hook_t *h = calloc(1, sizeof *h);
    assert_non_null(h);
    rp_config_t dflt = {.label = "default", .mode = RP_MODE_CORE, .conf_text = ""};
    conf_defaults(&dflt.conf);
    rp_opts_t o = {.capacity = capacity, .history = 1 << 18, .on_oom = on_oom, .on_oom_ctx = h};
    rp_result_t run;
    assert_int_equal(rp_replay(&in, &dflt, &o, &run, err, sizeof err), 0);
    assert_true(run.ooms > 0);
    assert_true(h->ran);
    const core_whatif_t *w = &h->w;
    assert_int_equal(w->status, CORE_WHATIF_RAN);
    assert_true(w->whole);
    assert_false(w->beyond);
    assert_false(w->cut_short);
    assert_true(w->reproduced);

    /* the trace up to the failed request, on an idle device; a row's ooms
     * are those of its idle replay (the busy check changes only fits) */
    rp_input_t upto = in;
    upto.nev = (size_t)run.first_oom_event + 1;
    size_t named = 0, rejected = 0;
    for (size_t i = 1; i < w->nrows; i++) {
        const core_whatif_row_t *row = &w->rows[i];
        if (!row->tried || row->unchecked)
            continue;
        rp_result_t r = replay_conf(&upto, row->change, capacity);
        if (row->fits && r.ooms != 0)
            fail_msg("%s: the what-if names %s, whose replay fails %llu times up to the request", file, row->change,
                     (unsigned long long)r.ooms);
        bool rejected_idle = row->ooms != 0;
        if (rejected_idle && r.ooms == 0)
            fail_msg("%s: the what-if rejected %s on the idle device (%llu allocation(s) not served%s), but its replay "
                     "serves every allocation up to the request",
                     file, row->change, (unsigned long long)row->ooms,
                     row->same_as_current ? ", as the current settings" : "");
        named += row->fits;
        rejected += rejected_idle;
        rp_result_free(&r);
    }
    assert_true(named >= 1);
    assert_true(rejected >= 1); /* else the check above held nothing */

    /* what fits the whole trace (--fit's verdict) is named */
    for (size_t k = 0; core_whatif_candidate(k); k++) {
        const char *cand = core_whatif_candidate(k);
        rp_result_t r = replay_conf(&in, cand, capacity);
        if (r.ooms == 0) {
            bool found = false;
            for (size_t i = 1; i < w->nrows; i++)
                found |= strcmp(w->rows[i].change, cand) == 0 && w->rows[i].fits;
            if (!found)
                fail_msg("%s: %s fits the whole trace at this capacity, but the what-if does not name it", file, cand);
        }
        rp_result_free(&r);
    }
    print_message("%s at %.2f GiB: %zu setting(s) named, %zu rejected on the idle device, %llu calls replayed in "
                  "%.3f s\n",
                  file, (double)capacity / (1 << 30), named, rejected, (unsigned long long)w->events, w->seconds);
    rp_result_free(&run);
    rp_input_free(&in);
    free(h);
}

/* floor 3.59 GiB, PyTorch reserved 3.95 GiB */
static void test_bcrafton(void **state)
{
    (void)state;
    check_trace("bcrafton_cs336.pickle", 3700 * MiB);
}

/* floor 12.97 GiB, PyTorch reserved 13.21 GiB */
static void test_magma27(void **state)
{
    (void)state;
    check_trace("magma27_cs336_lm.pickle", 13363 * MiB);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_whatif_traces TRACE_DIR\n");
        return 2;
    }
    trace_dir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bcrafton),
        cmocka_unit_test(test_magma27),
    };
    return cmocka_run_group_tests_name("replay_whatif_traces", tests, NULL, NULL);
}
