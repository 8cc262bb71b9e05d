/* The race-detector suites' fixture and report checks (see simrace.h). */
#include "simrace.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int simrace_fixture_create(struct simrace_fixture *f)
{
    if (simtest_group_setup(NULL) != 0)
        return -1;
    if (cudaMalloc((void **)&f->x, RACE_BUF) != cudaSuccess || cudaMalloc((void **)&f->y, RACE_BUF) != cudaSuccess)
        return -1;
    if (cudaMallocHost((void **)&f->host, RACE_BUF) != cudaSuccess ||
        cudaMallocHost((void **)&f->host2, RACE_BUF) != cudaSuccess)
        return -1;
    if (cudaStreamCreateWithFlags(&f->nb, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&f->nb2, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&f->bl, cudaStreamDefault) != cudaSuccess ||
        cudaStreamCreateWithFlags(&f->bl2, cudaStreamDefault) != cudaSuccess)
        return -1;
    return 0;
}

void simrace_fixture_destroy(struct simrace_fixture *f)
{
    cudaStreamDestroy(f->nb);
    cudaStreamDestroy(f->nb2);
    cudaStreamDestroy(f->bl);
    cudaStreamDestroy(f->bl2);
    cudaFree(f->x);
    cudaFree(f->y);
    cudaFreeHost(f->host);
    cudaFreeHost(f->host2);
}

int simrace_setup(void **state)
{
    (void)state;
    if (cudaDeviceSynchronize() != cudaSuccess)
        return -1;
    cucacheSimRaceReset();
    return cucacheSimRaceCount() == 0 ? 0 : -1;
}

static void last_race(char *buf, size_t len)
{
    buf[0] = '\0';
    size_t n = cucacheSimLastRace(buf, len);
    assert_true(n > 0);
    assert_true(strlen(buf) > 0);
}

void race_expect(void)
{
    SIM_OK(cudaDeviceSynchronize());
    if (cucacheSimRaceCount() == 0)
        fail_msg("%s", "expected a race report, got none");
}

void race_expect_none(void)
{
    SIM_OK(cudaDeviceSynchronize());
    unsigned long n = cucacheSimRaceCount();
    if (n != 0) {
        char buf[1024];
        cucacheSimLastRace(buf, sizeof buf);
        fail_msg("expected no race, got %lu; last: %s", n, buf);
    }
}

static bool contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return true;
    }
    return false;
}

static bool names_address(const char *text, const void *p)
{
    char hex[32];
    snprintf(hex, sizeof hex, "%lx", (unsigned long)(uintptr_t)p);
    return contains_nocase(text, hex);
}

/* The report names a stream as "stream #<id> (<kind>, device <d>)", kind
 * being "legacy default", "per-thread default", "non-blocking" or
 * "blocking"; the test knows the kind of each of its streams. */
static const char *stream_kind(cudaStream_t s)
{
    if (s == LEGACY || s == cudaStreamLegacy)
        return "(legacy default";
    if (s == cudaStreamPerThread)
        return "(per-thread default";
    unsigned flags = 0;
    SIM_OK(cudaStreamGetFlags(s, &flags));
    return (flags & cudaStreamNonBlocking) ? "(non-blocking" : "(blocking";
}

/* Number of distinct "stream #<id>" in the text. */
static int distinct_stream_ids(const char *text)
{
    long ids[8];
    int n = 0;
    for (const char *p = text; (p = strstr(p, "stream #")) != NULL && n < 8; p++) {
        long id = strtol(p + 8, NULL, 10);
        bool seen = false;
        for (int i = 0; i < n; i++)
            seen |= ids[i] == id;
        if (!seen)
            ids[n++] = id;
    }
    return n;
}

static bool names_stream(const char *text, cudaStream_t s)
{
    return contains_nocase(text, stream_kind(s));
}

void race_expect_names(cudaStream_t s1, cudaStream_t s2, const void *addr)
{
    char buf[2048];
    last_race(buf, sizeof buf);
    if (!names_stream(buf, s1) || !names_stream(buf, s2) || distinct_stream_ids(buf) != 2 || !names_address(buf, addr))
        fail_msg("race report does not name streams %p, %p and address %p: %s", (void *)s1, (void *)s2, addr, buf);
}
