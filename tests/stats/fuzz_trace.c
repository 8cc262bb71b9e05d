/*
 * fuzz_trace: libFuzzer feeds arbitrary bytes to the trace reader
 * (stats/trace_read.c, trace_parse) and checks what it answers: an error
 * leaves nothing allocated and a message starting with "offset "; a success
 * has its events in (time, thread) order, kinds and apis in range, as many
 * events as whole records fit in the input, and truncated_at inside it.
 * AddressSanitizer and UndefinedBehaviorSanitizer watch every read.
 *
 * Built with clang only, from the reader's sources; scripts/test runs it
 * for 30 s on tests/stats/fuzz_trace_corpus/ (seeds from
 * tests/stats/fuzz_trace_seeds.py).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz_trace: %s:%d: %s\n", __FILE__, __LINE__, #cond);                                     \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    trace_t t;
    char err[256] = "";
    if (trace_parse(data, size, &t, err, sizeof err) != 0) {
        FUZZ_CHECK(strncmp(err, "offset ", 7) == 0 || strstr(err, "out of host memory"));
        FUZZ_CHECK(t.events == NULL && t.nevents == 0);
        return 0;
    }
    FUZZ_CHECK(size >= TRACE_HEADER_SIZE);
    FUZZ_CHECK(t.truncated_at <= size);
    FUZZ_CHECK(t.nevents <= (size - TRACE_HEADER_SIZE) / TRACE_REC_SIZE);
    FUZZ_CHECK(t.nthreads <= t.nchunks);
    for (size_t i = 0; i < t.nevents; i++) {
        const trace_event_t *e = &t.events[i];
        FUZZ_CHECK(e->kind >= 1 && e->kind <= TRACE_KIND_MAX);
        FUZZ_CHECK(e->api <= TRACE_API_MAX);
        if (i > 0) {
            const trace_event_t *p = &t.events[i - 1];
            FUZZ_CHECK(p->time_ns < e->time_ns || (p->time_ns == e->time_ns && p->tid <= e->tid));
        }
    }
    trace_free(&t);
    return 0;
}
