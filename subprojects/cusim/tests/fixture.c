/*
 * The fixtures of the sim tests (fixture.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "fixture.h"

const char *simtest_fixture_path(const char *name)
{
    static char path[4096];
    const char *dir = getenv("SIMTEST_MODULES");
    assert_non_null(dir);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

unsigned char *simtest_fixture(const char *name, size_t *len)
{
    FILE *f = fopen(simtest_fixture_path(name), "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}
