/*
 * The fixtures of the sim tests (tests/modules), read from the directory
 * Meson puts in SIMTEST_MODULES.  A missing directory or file fails the
 * current cmocka test.
 */
#ifndef SIMTEST_FIXTURE_H
#define SIMTEST_FIXTURE_H

#include <stddef.h>

/* The fixture's bytes, *len of them, NUL-terminated; the caller frees. */
unsigned char *simtest_fixture(const char *name, size_t *len);

/* The fixture's path, in a static buffer the next call reuses. */
const char *simtest_fixture_path(const char *name);

#endif
