/*
 * Proves that the OOM report, its repeat line and the exit summary say what
 * the state is: each case drives a real core on the in-process backend into
 * a state (fragmented, full, limited, crowded by another user, private
 * pools, preallocated, rounded), makes core_malloc fail, and compares
 * st_report_oom's text with tests/stats/golden/<case>.txt.  Beside the
 * golden diff, each case asserts the facts directly (the first sentence's
 * numbers equal the core_oom_t fields, the hint names the expected
 * CUCACHE_CONF key), so that a broken hint rule fails even after the
 * goldens were regenerated.
 *
 * The golden directory is argv[1] (meson passes it).  To regenerate:
 *   CUCACHE_UPDATE_GOLDEN=1 meson test -C build stats_report
 * then review the diff of tests/stats/golden/.  A mismatch leaves the text
 * produced in <case>.actual in the test's working directory.
 *
 * Addresses come from backend_mem's bump pointer (1 << 40 upwards, fresh
 * per device), so they are the same on every run; the summary's fence wait
 * time is measured with a clock and is masked to a fixed value.
 */
#include <stdlib.h>

#include "coretest.h"
#include "registry.h"
#include "st.h"

static const char *golden_dir = "golden";

/* ------------------------------------------------------------------------
 * A sink that keeps the lines
 * ---------------------------------------------------------------------- */

typedef struct text_s {
    char **line;
    size_t n, cap;
} text_t;

static void text_sink(void *ctx, const char *line)
{
    text_t *t = ctx;
    assert_null(strchr(line, '\n'));
    assert_int_not_equal(strncmp(line, "cucache: ", 9), 0);
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->line = realloc(t->line, t->cap * sizeof *t->line);
        assert_non_null(t->line);
    }
    t->line[t->n] = strdup(line);
    assert_non_null(t->line[t->n]);
    t->n++;
}

static void text_free(text_t *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->line[i]);
    free(t->line);
    memset(t, 0, sizeof *t);
}

/* The first line starting with prefix (fails when there is none). */
static const char *text_line(const text_t *t, const char *prefix)
{
    for (size_t i = 0; i < t->n; i++)
        if (strncmp(t->line[i], prefix, strlen(prefix)) == 0)
            return t->line[i];
    fail_msg("no line starts with \"%s\"", prefix);
    return "";
}

static bool text_has(const text_t *t, const char *needle)
{
    for (size_t i = 0; i < t->n; i++)
        if (strstr(t->line[i], needle))
            return true;
    return false;
}

static bool text_starts(const text_t *t, const char *prefix)
{
    for (size_t i = 0; i < t->n; i++)
        if (strncmp(t->line[i], prefix, strlen(prefix)) == 0)
            return true;
    return false;
}

/* Every "hint:" line joined, for assertions on the hint. */
static void text_hints(const text_t *t, char *out, size_t len)
{
    size_t k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < t->n; i++)
        if (strncmp(t->line[i], "hint: ", 6) == 0 && k < len)
            k += (size_t)snprintf(out + k, len - k, "%s\n", t->line[i]);
    assert_true(k > 0);
}

static void text_equal(const text_t *a, const text_t *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++)
        assert_string_equal(a->line[i], b->line[i]);
}

/* ------------------------------------------------------------------------
 * Golden files
 * ---------------------------------------------------------------------- */

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

static void write_all(const char *path, const text_t *t)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        fail_msg("cannot write %s", path);
    for (size_t i = 0; i < t->n; i++)
        fprintf(f, "%s\n", t->line[i]);
    fclose(f);
}

static void golden(const char *name, const text_t *t)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.txt", golden_dir, name);
    const char *update = getenv("CUCACHE_UPDATE_GOLDEN");
    if (update && strcmp(update, "1") == 0) {
        write_all(path, t);
        print_message("wrote %s\n", path);
        return;
    }
    char *want = read_all(path);
    if (!want)
        fail_msg("golden %s missing: run with CUCACHE_UPDATE_GOLDEN=1 and review it", path);
    const char *w = want;
    size_t i = 0;
    for (; i < t->n; i++) {
        size_t len = strlen(t->line[i]);
        if (strncmp(w, t->line[i], len) != 0 || w[len] != '\n')
            break;
        w += len + 1;
    }
    if (i == t->n && *w == '\0') {
        free(want);
        return;
    }
    char actual[1100];
    snprintf(actual, sizeof actual, "%s.actual", name);
    write_all(actual, t);
    const char *end = strchr(w, '\n');
    int wlen = end ? (int)(end - w) : (int)strlen(w);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s differs at line %zu:\n  golden: %.*s\n  actual: %s\n(whole text in %s)", path, i + 1,
             wlen, w, i < t->n ? t->line[i] : "(end of text)", actual);
    free(want);
    fail_msg("%s", msg);
}

/* ------------------------------------------------------------------------
 * Driving the core into a failure
 * ---------------------------------------------------------------------- */

typedef struct oomcase_s {
    core_oom_t oom;
    core_stats_t stats;
    core_layout_t layout;
    conf_t conf;
    core_whatif_t whatif;
    text_t text;
} oomcase_t;

static void report_input(oomcase_t *c, const char *conf_text, st_oom_input_t *in, bool with_layout)
{
    *in =
        (st_oom_input_t){0, &c->oom, &c->stats, with_layout ? &c->layout : NULL, &c->conf, conf_text, &c->whatif, NULL};
}

/* Makes core_malloc(size) fail and takes the report's inputs and text. */
static void fail_and_report(fx_t *f, oomcase_t *c, size_t size, const char *conf_text)
{
    memset(c, 0, sizeof *c);
    assert_int_equal(core_malloc(f->d, size, 0, &c->oom), 0);
    CHECK(f->d);
    core_stats_get(f->d, &c->stats);
    assert_int_equal(core_layout(f->d, &c->layout, NULL, NULL), 0);
    core_conf(f->d, &c->conf);
    core_whatif_opts_t wo = {.capacity = c->oom.device_free + c->oom.reserved,
                             .total = c->oom.device_total,
                             .budget_s = 60,
                             .threads = 2,
                             .conf_text = conf_text};
    core_whatif(f->d, &c->oom, &wo, &c->whatif);
    st_oom_input_t in;
    report_input(c, conf_text, &in, true);
    st_report_oom(&in, text_sink, &c->text);
    /* the same input prints the same text */
    text_t again = {0};
    st_report_oom(&in, text_sink, &again);
    text_equal(&c->text, &again);
    text_free(&again);
}

static void oomcase_free(oomcase_t *c)
{
    core_layout_free(&c->layout);
    text_free(&c->text);
}

static const char *fmt_size(char buf[32], uint64_t v)
{
    st_fmt_size(buf, 32, v);
    return buf;
}

/* The first two lines are PyTorch's sentence with oom's numbers. */
static void expect_sentence(const text_t *t, const core_oom_t *o, const char *allowed, const char *private_part)
{
    char a[32], b[32], c[32], d[32], e[32], g[32], want[1024];
    snprintf(want, sizeof want,
             "CUDA out of memory. Tried to allocate %s (%s requested). GPU 0 has a total capacity of %s of which %s "
             "is free.",
             fmt_size(a, o->rounded), fmt_size(b, o->requested), fmt_size(c, o->device_total),
             fmt_size(d, o->device_free));
    assert_true(t->n > 2);
    assert_string_equal(t->line[0], want);
    snprintf(want, sizeof want,
             "%sOf the allocated memory %s is allocated by cucache, %sand %s is reserved by cucache but unallocated.",
             allowed, fmt_size(e, o->allocated), private_part, fmt_size(g, o->reserved - o->allocated));
    assert_string_equal(t->line[1], want);
}

/* ------------------------------------------------------------------------
 * The cases
 * ---------------------------------------------------------------------- */

/* Four 32 MiB segments, freed, then carved into `count` blocks of
 * block_req; every other block is freed again (live[] keeps the rest). */
static void make_fragmented(fx_t *f, const char *conf_text, size_t block_req, size_t count, uintptr_t *live,
                            size_t *nlive)
{
    fx_open(f, 128 * MiB, conf_text);
    uintptr_t p[32];
    assert_true(count <= 32);
    for (int i = 0; i < 4; i++)
        p[i] = fx_alloc(f, 32 * MiB, 0);
    for (int i = 0; i < 4; i++)
        fx_free(f, p[i], CORE_FREE_NOW, 0);
    for (size_t i = 0; i < count; i++)
        p[i] = fx_alloc(f, block_req, 0);
    assert_int_equal(f->m.n_alloc, 4); /* all carved from the four segments */
    *nlive = 0;
    for (size_t i = 0; i < count; i++) {
        if (i % 2 == 0)
            fx_free(f, p[i], CORE_FREE_NOW, 0);
        else
            live[(*nlive)++] = p[i];
    }
}

/* make_fragmented's calls under conf_text, its frees made as the
 * interposer makes a cudaFree's (the setting's reuse rule), then
 * `request`: served?  How a named setting is checked when applied. */
static bool fragmented_fits(const char *conf_text, size_t block_req, size_t count, size_t request)
{
    fx_t g;
    fx_open(&g, 128 * MiB, conf_text);
    core_free_t plain = conf_plain_free(&g.conf);
    uintptr_t p[32] = {0}, r = 0;
    bool ok = true;
    for (int i = 0; i < 4 && ok; i++)
        ok = (p[i] = core_malloc(g.d, 32 * MiB, 0, NULL)) != 0;
    for (int i = 0; i < 4; i++)
        if (p[i])
            fx_free(&g, p[i], plain, 0);
    memset(p, 0, sizeof p);
    for (size_t i = 0; i < count && ok; i++)
        ok = (p[i] = core_malloc(g.d, block_req, 0, NULL)) != 0;
    for (size_t i = 0; i < count; i += 2)
        if (p[i])
            fx_free(&g, p[i], plain, 0);
    if (ok && (r = core_malloc(g.d, request, 0, NULL)))
        fx_free(&g, r, plain, 0);
    for (size_t i = 1; i < count; i += 2)
        if (p[i])
            fx_free(&g, p[i], plain, 0);
    fx_close(&g);
    return r != 0;
}

/* The other scenarios whose reports name settings, rebuilt under
 * conf_text with frees as the interposer makes a cudaFree's: served? */
static bool preallocate_fits(const char *conf_text)
{
    fx_t g;
    fx_open(&g, 128 * MiB, conf_text);
    core_free_t plain = conf_plain_free(&g.conf);
    uintptr_t p[29] = {0}, r = 0;
    bool ok = true;
    for (int i = 0; i < 29 && ok; i++)
        ok = (p[i] = core_malloc(g.d, 4 * MiB, 0, NULL)) != 0;
    for (int i = 0; i < 29; i += 2)
        if (p[i])
            fx_free(&g, p[i], plain, 0), p[i] = 0;
    if (ok && (r = core_malloc(g.d, 8 * MiB, 0, NULL)))
        fx_free(&g, r, plain, 0);
    for (int i = 0; i < 29; i++)
        if (p[i])
            fx_free(&g, p[i], plain, 0);
    fx_close(&g);
    return r != 0;
}

static bool limit_fits(const char *conf_text)
{
    fx_t g;
    fx_open(&g, 256 * MiB, conf_text);
    uintptr_t p[3] = {0}, r = 0;
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++)
        ok = (p[i] = core_malloc(g.d, 16 * MiB, 0, NULL)) != 0;
    if (ok && (r = core_malloc(g.d, 32 * MiB, 0, NULL)))
        fx_free(&g, r, CORE_FREE_NOW, 0);
    for (int i = 0; i < 3; i++)
        if (p[i])
            fx_free(&g, p[i], CORE_FREE_NOW, 0);
    fx_close(&g);
    return r != 0;
}

static bool private_pools_fits(const char *conf_text)
{
    fx_t g;
    fx_open(&g, 128 * MiB, conf_text);
    core_free_t plain = conf_plain_free(&g.conf);
    int pool = core_pool_create(g.d);
    assert_true(pool > 0);
    assert_int_equal(core_pool_use(g.d, pool), 0);
    uintptr_t a = core_malloc(g.d, 16 * MiB, 0, NULL), b = core_malloc(g.d, 16 * MiB, 0, NULL);
    uintptr_t s = core_malloc(g.d, 1000, 0, NULL);
    if (b)
        fx_free(&g, b, plain, 0);
    assert_int_equal(core_pool_use(g.d, 0), 0);
    uintptr_t x = core_malloc(g.d, 16 * MiB, 0, NULL), y = core_malloc(g.d, 4 * MiB, 0, NULL);
    uintptr_t z = core_malloc(g.d, 512, 0, NULL);
    uintptr_t r = a && b && s && x && y && z ? core_malloc(g.d, 64 * MiB, 0, NULL) : 0;
    const uintptr_t all[] = {r, x, y, z, a, s};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            fx_free(&g, all[i], CORE_FREE_NOW, 0);
    core_pool_destroy(g.d, pool);
    fx_close(&g);
    return r != 0;
}

typedef bool (*fits_fn)(const char *conf_text);

static bool fragmented_fits_4m(const char *conf_text)
{
    return fragmented_fits(conf_text, 4 * MiB - 100, 32, 24 * MiB);
}

static bool fragmented_fits_roundup(const char *conf_text)
{
    return fragmented_fits(conf_text, 5 * MiB, 20, 24 * MiB);
}

/* Every CUCACHE_CONF a report's hints name ("hint:   CUCACHE_CONF=X (peak
 * ..." and "... CUCACHE_CONF=X would have fit it"), applied to the
 * scenario that produced it: each must serve the request that failed.
 * The golden files are the docs' examples (tests/stats/check_docs.py), so
 * this is also every hint the docs show.  Returns how many were named. */
static size_t apply_every_hint(const text_t *t, fits_fn fits)
{
    size_t named = 0;
    for (size_t i = 0; i < t->n; i++) {
        const char *l = t->line[i];
        if (strncmp(l, "hint: ", 6) != 0)
            continue;
        for (const char *at = strstr(l, "CUCACHE_CONF="); at; at = strstr(at + 1, "CUCACHE_CONF=")) {
            char conf[512];
            const char *v = at + strlen("CUCACHE_CONF=");
            size_t n = strcspn(v, " ");
            if (*v == '\'') { /* quoted for the shell */
                v++;
                n = strcspn(v, "'");
            }
            snprintf(conf, sizeof conf, "%.*s", (int)n, v);
            if (!fits(conf))
                fail_msg("the hint CUCACHE_CONF=%s, applied, does not serve the request:\n%s", conf, l);
            named++;
        }
    }
    return named;
}

static void test_fragmented(void **state)
{
    (void)state;
    fx_t f;
    uintptr_t live[32];
    size_t nlive;
    make_fragmented(&f, "reuse:fenced", 4 * MiB - 100, 32, live, &nlive);
    assert_int_equal(nlive, 16);
    oomcase_t c;
    fail_and_report(&f, &c, 24 * MiB, "reuse:fenced");
    golden("fragmented", &c.text);
    assert_false(c.oom.limit_hit);
    assert_int_equal(c.oom.largest_free, 4 * MiB);
    assert_int_equal(c.oom.device_free, 0);
    expect_sentence(&c.text, &c.oom, "", "");
    assert_string_equal(text_line(&c.text, "cache: fragmentation"),
                        "cache: fragmentation 93.8% (1 - largest free block / free bytes)");
    char hints[4096];
    text_hints(&c.text, hints, sizeof hints);
    assert_non_null(strstr(hints, "hint: fragmentation: 64.00 MiB is free"));
    /* proven by the replay, and true when applied; max_split_size_mb:24
     * (the rule's old guess) is not among them: applied, it fails */
    assert_non_null(strstr(hints, "3 of 16 settings tried serve every allocation and this request"));
    assert_non_null(strstr(hints, "hint:   CUCACHE_CONF=reuse:fenced,expandable_segments:true (peak reserved"));
    assert_null(strstr(hints, "max_split_size_mb"));
    assert_int_equal(
        apply_every_hint(&c.text, fragmented_fits_4m),
        1); /* expandable_segments:true with reuse:sync or expandable_share_pages:true, which fit too, add nothing: not named */
    assert_false(fragmented_fits("reuse:fenced,max_split_size_mb:24", 4 * MiB - 100, 32, 24 * MiB));
    assert_null(strstr(hints, "roundup_power2_divisions")); /* no rounding to speak of */
    assert_true(text_has(&c.text, "      16 x   4.00 MiB = 64.00 MiB"));

    /* the layout could not be copied: what oom and the counters tell */
    st_oom_input_t in;
    text_t t = {0};
    report_input(&c, "reuse:fenced", &in, false);
    st_report_oom(&in, text_sink, &t);
    expect_sentence(&t, &c.oom, "", "");
    assert_true(text_has(&t, "layout: unavailable"));
    assert_false(text_starts(&t, "segment map:"));
    assert_false(text_starts(&t, "pools:"));
    text_hints(&t, hints, sizeof hints);
    assert_non_null(strstr(hints, "hint: fragmentation: 64.00 MiB is free")); /* the counters still show it */
    assert_non_null(strstr(hints, "CUCACHE_CONF=reuse:fenced,expandable_segments:true"));
    golden("no_layout", &t);
    assert_int_equal(apply_every_hint(&t, fragmented_fits_4m), 1);
    text_free(&t);

    /* the user's text is kept, less the keys suggested, and quoted for the shell */
    report_input(&c, "roundup_power2_divisions:[256:1,>:2], reuse:stream", &in, true);
    st_report_oom(&in, text_sink, &t);
    text_hints(&t, hints, sizeof hints);
    assert_non_null(strstr(
        hints, "CUCACHE_CONF='roundup_power2_divisions:[256:1,>:2],reuse:stream,expandable_segments:true' (peak"));
    text_free(&t);
    report_input(&c, "expandable_segments:false, roundup_power2_divisions:[256:1,>:2]", &in, true);
    st_report_oom(&in, text_sink, &t);
    text_hints(&t, hints, sizeof hints);
    assert_non_null(
        strstr(hints, "CUCACHE_CONF='roundup_power2_divisions:[256:1,>:2],expandable_segments:true' (peak"));
    text_free(&t);

    /* the repeat: one line */
    report_input(&c, "reuse:fenced", &in, true);
    st_report_oom_repeat(&in, 3, text_sink, &t);
    assert_int_equal(t.n, 1);
    assert_string_equal(t.line[0], "CUDA out of memory again (failure 3): tried to allocate 24.00 MiB (24.00 MiB "
                                   "requested) on GPU 0; 0 bytes free of 128.00 MiB, cucache holds 128.00 MiB (64.00 "
                                   "MiB allocated); full report at the first failure above");
    golden("repeat", &t);
    text_free(&t);

    oomcase_free(&c);
    for (size_t i = 0; i < nlive; i++)
        fx_free(&f, live[i], CORE_FREE_NOW, 0);
    fx_close(&f);
}

/* Rounding to 1/2 power-of-two steps: 5 MiB requests take 6 MiB blocks,
 * a sixth of the live bytes is waste, and the hint says finer steps. */
static void test_fragmented_roundup(void **state)
{
    (void)state;
    fx_t f;
    uintptr_t live[32];
    size_t nlive;
    make_fragmented(&f, "roundup_power2_divisions:2", 5 * MiB, 20, live, &nlive);
    oomcase_t c;
    fail_and_report(&f, &c, 24 * MiB, "roundup_power2_divisions:2");
    golden("fragmented_roundup", &c.text);
    expect_sentence(&c.text, &c.oom, "", "");
    char hints[4096];
    text_hints(&c.text, hints, sizeof hints);
    assert_non_null(strstr(hints, "hint:   CUCACHE_CONF=roundup_power2_divisions:2,expandable_segments:true"));
    assert_non_null(strstr(hints, "hint: rounding wastes 10.00 MiB of the 60.00 MiB live"));
    /* finer rounding was tried and does not serve it: not named */
    assert_null(strstr(hints, "CUCACHE_CONF=roundup_power2_divisions:4"));
    assert_int_equal(apply_every_hint(&c.text, fragmented_fits_roundup), 1);
    assert_false(fragmented_fits("roundup_power2_divisions:4", 5 * MiB, 20, 24 * MiB));
    oomcase_free(&c);
    for (size_t i = 0; i < nlive; i++)
        fx_free(&f, live[i], CORE_FREE_NOW, 0);
    fx_close(&f);
}

/* Paddle's preallocation: the chunk is full of holes, a second chunk does
 * not fit: grow on demand, or a fraction small enough for two chunks. */
static void test_fragmented_preallocate(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 128 * MiB, "strategy:preallocate");
    uintptr_t p[29];
    for (int i = 0; i < 29; i++)
        p[i] = fx_alloc(&f, 4 * MiB, 0);
    for (int i = 0; i < 29; i += 2)
        fx_free(&f, p[i], CORE_FREE_NOW, 0);
    oomcase_t c;
    fail_and_report(&f, &c, 8 * MiB, "strategy:preallocate");
    golden("fragmented_preallocate", &c.text);
    assert_int_equal(c.oom.alloc_size, 116 * MiB); /* another chunk */
    expect_sentence(&c.text, &c.oom, "", "");
    char hints[4096];
    text_hints(&c.text, hints, sizeof hints);
    assert_non_null(strstr(hints, "hint: fragmentation inside the preallocated chunk: 60.00 MiB is free"));
    assert_non_null(strstr(hints, "hint:   CUCACHE_CONF=strategy:auto_growth (peak reserved"));
    assert_null(strstr(hints, "max_split_size_mb"));
    assert_int_equal(apply_every_hint(&c.text, preallocate_fits), 1);
    assert_false(preallocate_fits("strategy:preallocate")); /* the failure itself */
    oomcase_free(&c);
    for (int i = 1; i < 29; i += 2)
        fx_free(&f, p[i], CORE_FREE_NOW, 0);
    fx_close(&f);
}

/* Every byte live: nothing to tune. */
static void test_full(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 64 * MiB, "");
    uintptr_t p[4];
    for (int i = 0; i < 4; i++)
        p[i] = fx_alloc(&f, 16 * MiB - 4096, 0);
    oomcase_t c;
    fail_and_report(&f, &c, 8 * MiB, "");
    golden("full", &c.text);
    assert_int_equal(c.oom.alloc_size, 20 * MiB);
    assert_int_equal(c.oom.allocated, 64 * MiB);
    expect_sentence(&c.text, &c.oom, "", "");
    assert_string_equal(text_line(&c.text, "cache: fragmentation"),
                        "cache: fragmentation n/a (1 - largest free block / free bytes)");
    char hints[4096];
    text_hints(&c.text, hints, sizeof hints);
    assert_non_null(strstr(hints, "hint: the memory is in use: live allocations hold 64.00 MiB"));
    assert_non_null(strstr(hints, "the device lacks 20.00 MiB"));
    assert_non_null(strstr(hints, "hint: no setting can serve it: live allocations (63.98 MiB) and this request "
                                  "(8.00 MiB) need 71.98 MiB, more than the 64.00 MiB cucache could have"));
    assert_null(strstr(hints, "CUCACHE_CONF="));
    oomcase_free(&c);
    for (int i = 0; i < 4; i++)
        fx_free(&f, p[i], CORE_FREE_NOW, 0);
    fx_close(&f);
}

/* limit_mb:64 on a 256 MiB device: 48 MiB held, 32 MiB more refused. */
static void test_limit(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 256 * MiB, "limit_mb:64");
    uintptr_t p[3];
    for (int i = 0; i < 3; i++)
        p[i] = fx_alloc(&f, 16 * MiB, 0);
    oomcase_t c;
    fail_and_report(&f, &c, 32 * MiB, " limit_mb:64 ");
    golden("limit", &c.text);
    assert_true(c.oom.limit_hit);
    assert_int_equal(c.oom.limit, 64 * MiB);
    expect_sentence(&c.text, &c.oom, "64.00 MiB allowed; ", "");
    char hints[4096];
    text_hints(&c.text, hints, sizeof hints);
    assert_non_null(strstr(hints, "hint: a limit refused it: limit_mb allows 64.00 MiB"));
    assert_non_null(strstr(hints, "CUCACHE_CONF=limit_mb:80 would have fit it")); /* 48 + 32 */
    assert_null(strstr(hints, "raising the limit alone"));                        /* the device has room */
    assert_int_equal(apply_every_hint(&c.text, limit_fits), 1);
    assert_false(limit_fits("limit_mb:64"));
    oomcase_free(&c);
    for (int i = 0; i < 3; i++)
        fx_free(&f, p[i], CORE_FREE_NOW, 0);
    fx_close(&f);
}

/* The same through per_process_memory_fraction: 80 MiB of 256 is 0.3125. */
static void test_limit_fraction(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 256 * MiB, "per_process_memory_fraction:0.25");
    uintptr_t p[3];
    for (int i = 0; i < 3; i++)
        p[i] = fx_alloc(&f, 16 * MiB, 0);
    oomcase_t c;
    fail_and_report(&f, &c, 32 * MiB, "per_process_memory_fraction:0.25,reuse:stream");
    assert_true(c.oom.limit_hit);
    char hints[4096];
    text_hints(&c.text, hints, sizeof hints);
    assert_non_null(strstr(hints, "per_process_memory_fraction allows 64.00 MiB"));
    assert_non_null(strstr(hints, "CUCACHE_CONF=reuse:stream,per_process_memory_fraction:0.32 would have fit it"));
    oomcase_free(&c);
    for (int i = 0; i < 3; i++)
        fx_free(&f, p[i], CORE_FREE_NOW, 0);
    fx_close(&f);
}

/* The limit refused it, and the device would not have had room either. */
static void test_limit_and_device(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 72 * MiB, "limit_mb:64");
    uintptr_t p[3];
    for (int i = 0; i < 3; i++)
        p[i] = fx_alloc(&f, 16 * MiB, 0);
    oomcase_t c;
    fail_and_report(&f, &c, 32 * MiB, "limit_mb:64");
    assert_true(c.oom.limit_hit);
    char hints[4096];
    text_hints(&c.text, hints, sizeof hints);
    assert_non_null(strstr(hints, "CUCACHE_CONF=limit_mb:80 would have fit it"));
    assert_non_null(strstr(hints, "hint: but the device has only 24.00 MiB free now, 8.00 MiB less than the segment"));
    oomcase_free(&c);
    for (int i = 0; i < 3; i++)
        fx_free(&f, p[i], CORE_FREE_NOW, 0);
    fx_close(&f);
}

/* Another user of the device holds 80 MiB of 128: nothing to tune. */
static void test_outside(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 128 * MiB, "");
    core_backend_t be = mem_backend_vtable(&f.m);
    uintptr_t other;
    assert_int_equal(be.seg_alloc(be.ctx, 0, 80 * MiB, &other), CORE_OK);
    uintptr_t p = fx_alloc(&f, 16 * MiB, 0);
    oomcase_t c;
    fail_and_report(&f, &c, 48 * MiB, "");
    golden("outside", &c.text);
    assert_int_equal(c.oom.device_free, 32 * MiB);
    expect_sentence(&c.text, &c.oom, "", "");
    assert_non_null(strstr(text_line(&c.text, "outside cucache: "), "outside cucache: 80.00 MiB"));
    char hints[4096];
    text_hints(&c.text, hints, sizeof hints);
    assert_non_null(strstr(hints, "hint: memory held outside cucache (80.00 MiB) is more than what was missing "
                                  "(16.00 MiB)"));
    assert_null(strstr(hints, "CUCACHE_CONF="));
    oomcase_free(&c);
    fx_free(&f, p, CORE_FREE_NOW, 0);
    be.seg_free(be.ctx, 0, other, 80 * MiB);
    fx_close(&f);
}

/* test_outside's failure with NVML's list of the processes on the device
 * (gpu): the report's text. */
static void report_with_gpu(oomcase_t *c, const st_gpu_procs_t *gpu, text_t *t)
{
    st_oom_input_t in;
    report_input(c, "", &in, true);
    in.gpu = gpu;
    st_report_oom(&in, text_sink, t);
    text_t again = {0};
    st_report_oom(&in, text_sink, &again);
    text_equal(t, &again);
    text_free(&again);
}

/* The line after the first that starts with prefix (fails when none). */
static const char *text_after(const text_t *t, const char *prefix)
{
    for (size_t i = 0; i + 1 < t->n; i++)
        if (strncmp(t->line[i], prefix, strlen(prefix)) == 0)
            return t->line[i + 1];
    fail_msg("no line starts with \"%s\" before another", prefix);
    return "";
}

/* The 80 MiB outside cucache, with NVML: split into the other processes'
 * 76 MiB and this process's 4 MiB beyond cucache's 16 MiB, then the
 * processes largest first, this one marked; more than REP_PROC_ROWS are
 * capped; without NVML one line says why and the text is as before. */
static void test_outside_processes(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 128 * MiB, "");
    core_backend_t be = mem_backend_vtable(&f.m);
    uintptr_t other;
    assert_int_equal(be.seg_alloc(be.ctx, 0, 80 * MiB, &other), CORE_OK);
    uintptr_t p = fx_alloc(&f, 16 * MiB, 0);
    oomcase_t c;
    fail_and_report(&f, &c, 48 * MiB, "");

    /* in NVML's order, not by size; equal sizes: the lower pid first */
    st_gpu_proc_t procs[] = {
        {.pid = 777, .bytes = 8 * MiB, .comm = "?"},
        {.pid = 100, .bytes = 20 * MiB, .comm = "train.py"},
        {.pid = 4242, .bytes = 60 * MiB, .comm = "ipc_peer"},
        {.pid = 776, .bytes = 8 * MiB, .comm = "notebook"},
    };
    st_gpu_procs_t gpu = {.unavailable = NULL, .self_pid = 100, .procs = procs, .n = 4};
    text_t t = {0};
    report_with_gpu(&c, &gpu, &t);
    golden("outside_processes", &t);
    assert_string_equal(text_line(&t, "outside cucache: "),
                        "outside cucache: 80.00 MiB (device total - device free - cucache reserved), by NVML:");
    assert_string_equal(text_after(&t, "outside cucache: "), "  other processes: 76.00 MiB in 3 processes");
    assert_string_equal(text_line(&t, "  this process, outside cucache: "),
                        "  this process, outside cucache: 4.00 MiB (its 20.00 MiB in use less the 16.00 MiB cucache "
                        "reserved)");
    assert_string_equal(text_after(&t, "processes on GPU 0 (NVML), largest first:"),
                        "  Process 4242 has 60.00 MiB memory in use (ipc_peer)");
    assert_string_equal(text_after(&t, "  Process 4242 "),
                        "  Process 100 has 20.00 MiB memory in use (train.py, this process)");
    assert_string_equal(text_after(&t, "  Process 100 "), "  Process 776 has 8.00 MiB memory in use (notebook)");
    assert_string_equal(text_after(&t, "  Process 776 "), "  Process 777 has 8.00 MiB memory in use (?)");
    text_free(&t);

    /* this process not listed though cucache holds 16 MiB for it: no share */
    st_gpu_procs_t alone = {.unavailable = NULL, .self_pid = 99, .procs = procs + 2, .n = 1};
    report_with_gpu(&c, &alone, &t);
    assert_string_equal(text_after(&t, "outside cucache: "), "  other processes: 60.00 MiB in 1 process");
    assert_string_equal(text_after(&t, "  other processes: "),
                        "  this process: not in NVML's list, though cucache holds 16.00 MiB for it: NVML's list is "
                        "incomplete here, so its use outside cucache is not known");
    text_free(&t);

    /* more processes than rows: the largest, then the rest in one line */
    st_gpu_proc_t many[20];
    for (unsigned i = 0; i < 20; i++)
        many[i] = (st_gpu_proc_t){.pid = 1000 + i, .bytes = (i + 1) * MiB, .comm = "worker"};
    st_gpu_procs_t crowd = {.unavailable = NULL, .self_pid = 1019, .procs = many, .n = 20};
    report_with_gpu(&c, &crowd, &t);
    golden("outside_processes_many", &t);
    assert_string_equal(text_after(&t, "processes on GPU 0 (NVML), largest first:"),
                        "  Process 1019 has 20.00 MiB memory in use (worker, this process)");
    assert_true(text_starts(&t, "  ... 4 more processes, 10.00 MiB"));
    assert_false(text_starts(&t, "  Process 1003 "));
    text_free(&t);

    /* no NVML: today's line, and one saying why it is not split */
    st_gpu_procs_t none = {.unavailable = "NVML: libnvidia-ml.so.1 cannot be loaded", .self_pid = 100, .procs = NULL, .n = 0};
    report_with_gpu(&c, &none, &t);
    golden("outside_no_nvml", &t);
    assert_string_equal(text_line(&t, "outside cucache: "), text_line(&c.text, "outside cucache: "));
    assert_string_equal(text_after(&t, "outside cucache: "),
                        "processes on GPU 0: not known (NVML: libnvidia-ml.so.1 cannot be loaded), so this is not "
                        "split");
    assert_int_equal(t.n, c.text.n + 1);
    text_free(&t);

    oomcase_free(&c);
    fx_free(&f, p, CORE_FREE_NOW, 0);
    be.seg_free(be.ctx, 0, other, 80 * MiB);
    fx_close(&f);
}

/* NVML's list beside cucache's own figure (16 MiB reserved): NVML absent,
 * listing nothing, listing this process below what cucache holds, and
 * above it; no line ever gives a share clamped at 0 ("its 0 bytes in use
 * less ..."), and only the last gives this process's share. */
static void test_outside_nvml_incomplete(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 128 * MiB, "");
    core_backend_t be = mem_backend_vtable(&f.m);
    uintptr_t other;
    assert_int_equal(be.seg_alloc(be.ctx, 0, 80 * MiB, &other), CORE_OK);
    uintptr_t p = fx_alloc(&f, 16 * MiB, 0);
    oomcase_t c;
    fail_and_report(&f, &c, 48 * MiB, "");
    assert_int_equal(c.oom.reserved, 16 * MiB);
    text_t t = {0};

    /* absent: the unsplit line and why */
    st_gpu_procs_t absent = {.unavailable = "NVML: nvmlInit_v2 failed", .self_pid = 100};
    report_with_gpu(&c, &absent, &t);
    assert_string_equal(text_after(&t, "outside cucache: "),
                        "processes on GPU 0: not known (NVML: nvmlInit_v2 failed), so this is not split");
    assert_false(text_has(&t, "  this process"));
    text_free(&t);

    /* lists nothing, not even this process: said, not split */
    st_gpu_procs_t nothing = {.unavailable = NULL, .self_pid = 100, .procs = NULL, .n = 0};
    report_with_gpu(&c, &nothing, &t);
    golden("outside_nvml_empty", &t);
    assert_string_equal(text_line(&t, "outside cucache: "), text_line(&c.text, "outside cucache: "));
    assert_string_equal(text_after(&t, "outside cucache: "),
                        "processes on GPU 0 (NVML): none listed, not even this one, which cucache holds 16.00 MiB "
                        "for: NVML's list is incomplete here (it sees no process of another PID namespace), so this "
                        "is not split");
    assert_false(text_has(&t, "this process, outside cucache"));
    assert_false(text_has(&t, "  other processes: "));
    char hints[4096];
    text_hints(&t, hints, sizeof hints);
    assert_non_null(strstr(hints, "(NVML lists no process here; nvidia-smi on the host lists them)"));
    text_free(&t);

    /* lists this process below what cucache holds */
    st_gpu_proc_t less[] = {
        {.pid = 100, .bytes = 12 * MiB, .comm = "train.py"},
        {.pid = 4242, .bytes = 60 * MiB, .comm = "ipc_peer"},
    };
    st_gpu_procs_t below = {.unavailable = NULL, .self_pid = 100, .procs = less, .n = 2};
    report_with_gpu(&c, &below, &t);
    golden("outside_nvml_below", &t);
    assert_string_equal(text_after(&t, "outside cucache: "), "  other processes: 60.00 MiB in 1 process");
    assert_string_equal(text_after(&t, "  other processes: "),
                        "  this process: NVML's figure for it (12.00 MiB) is below what cucache holds (16.00 MiB): "
                        "NVML does not count all of its memory here, so its use outside cucache is not known");
    assert_false(text_has(&t, "this process, outside cucache"));
    text_free(&t);

    /* exactly what cucache holds: nothing outside, said as a share */
    less[0].bytes = 16 * MiB;
    report_with_gpu(&c, &below, &t);
    assert_string_equal(text_after(&t, "  other processes: "),
                        "  this process, outside cucache: 0 bytes (its 16.00 MiB in use less the 16.00 MiB cucache "
                        "reserved)");
    text_free(&t);

    /* more than cucache holds: the share */
    less[0].bytes = 20 * MiB;
    report_with_gpu(&c, &below, &t);
    assert_string_equal(text_after(&t, "  other processes: "),
                        "  this process, outside cucache: 4.00 MiB (its 20.00 MiB in use less the 16.00 MiB cucache "
                        "reserved)");
    text_free(&t);

    oomcase_free(&c);
    fx_free(&f, p, CORE_FREE_NOW, 0);
    be.seg_free(be.ctx, 0, other, 80 * MiB);
    fx_close(&f);
}

/* The neighbours running cucache: their figures, what each gave for this
 * request or that it did not answer, stale figures with their age, and
 * the line on the ask; nothing about asking when yielding is off. */
static void test_outside_neighbours(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 128 * MiB, "");
    core_backend_t be = mem_backend_vtable(&f.m);
    uintptr_t other;
    assert_int_equal(be.seg_alloc(be.ctx, 0, 80 * MiB, &other), CORE_OK);
    uintptr_t p = fx_alloc(&f, 16 * MiB, 0);
    oomcase_t c;
    fail_and_report(&f, &c, 48 * MiB, "");
    st_gpu_proc_t procs[] = {
        {.pid = 100, .bytes = 20 * MiB, .comm = "train.py", .cucache = true, .allocated = 16 * MiB, .reserved = 16 * MiB},
        {.pid = 200, .bytes = 48 * MiB, .comm = "eval.py", .cucache = true, .asked = true, .answered = true,
         .allocated = 8 * MiB, .reserved = 40 * MiB, .given = 8 * MiB, .age_ms = 120, .answer_ms = 177},
        {.pid = 300, .bytes = 32 * MiB, .comm = "server", .cucache = true, .asked = true, .answered = false,
         .allocated = 2 * MiB, .reserved = 32 * MiB, .age_ms = 4200},
    };
    st_gpu_procs_t gpu = {.self_pid = 100, .procs = procs, .n = 3, .yield_on = true, .asked = 2, .given = 8 * MiB,
                          .waited_ns = 200400000};
    text_t t = {0};
    report_with_gpu(&c, &gpu, &t);
    golden("outside_neighbours", &t);
    assert_string_equal(text_line(&t, "other cucache processes: "),
                        "other cucache processes: 2 asked for idle cache gave back 8.00 MiB in all (waited 200.4 ms); "
                        "the allocation was tried again and still failed");
    assert_string_equal(text_line(&t, "  Process 200 "),
                        "  Process 200 has 48.00 MiB memory in use (eval.py; cucache: 8.00 MiB allocated, 32.00 MiB "
                        "cached, as it published 120 ms ago; gave back 8.00 MiB for this request, 177 ms after the "
                        "ask)");
    assert_string_equal(text_line(&t, "  Process 300 "),
                        "  Process 300 has 32.00 MiB memory in use (server; cucache: 2.00 MiB allocated, 30.00 MiB "
                        "cached, as it published 4.2 s ago; asked for idle cache, no answer in time)");
    assert_string_equal(text_line(&t, "  Process 100 "),
                        "  Process 100 has 20.00 MiB memory in use (train.py, this process; cucache: 16.00 MiB "
                        "allocated, 0 bytes cached)");
    text_free(&t);

    /* a neighbour caught mid-publication: its figures are not shown */
    procs[2].torn = true;
    report_with_gpu(&c, &gpu, &t);
    assert_string_equal(text_line(&t, "  Process 300 "),
                        "  Process 300 has 32.00 MiB memory in use (server; cucache, its figures unreadable (it stopped "
                        "while publishing them); asked for idle cache, no answer in time)");
    text_free(&t);
    procs[2].torn = false;

    /* one still giving when the wait's bound passed, one that died while giving */
    procs[2].still_giving = true;
    procs[2].given = 6 * MiB; /* what had landed of its give when the wait ended */
    gpu.gone = 2;
    gpu.gone_pid = 400;
    gpu.gone_giving = true;
    report_with_gpu(&c, &gpu, &t);
    assert_string_equal(text_line(&t, "  Process 300 "),
                        "  Process 300 has 32.00 MiB memory in use (server; cucache: 2.00 MiB allocated, 30.00 MiB "
                        "cached, as it published 4.2 s ago; asked for idle cache, still giving it back when the wait "
                        "ended, 6.00 MiB so far)");
    assert_string_equal(text_line(&t, "other cucache processes: "),
                        "other cucache processes: 2 asked for idle cache gave back 8.00 MiB in all (waited 200.4 ms); "
                        "process 400 (and 1 more) died while giving back, before it answered; the allocation was "
                        "tried again and still failed");
    text_free(&t);
    gpu.gone = 1;
    gpu.gone_giving = false;
    report_with_gpu(&c, &gpu, &t);
    assert_true(text_has(&t, "(waited 200.4 ms); process 400 died or left before it answered; the allocation"));
    text_free(&t);
    procs[2].still_giving = false;
    procs[2].given = 0;
    gpu.gone = 0;

    /* nobody to ask */
    st_gpu_procs_t alone = {.self_pid = 100, .procs = procs, .n = 1, .yield_on = true};
    report_with_gpu(&c, &alone, &t);
    assert_string_equal(text_line(&t, "other cucache processes: "),
                        "other cucache processes: none on GPU 0 held cache to give back");
    text_free(&t);

    /* yielding off: no line about it */
    gpu.yield_on = false;
    report_with_gpu(&c, &gpu, &t);
    assert_false(text_has(&t, "other cucache processes: "));
    text_free(&t);

    oomcase_free(&c);
    fx_free(&f, p, CORE_FREE_NOW, 0);
    be.seg_free(be.ctx, 0, other, 80 * MiB);
    fx_close(&f);
}

/* A private pool holds 16 MiB live and 16 MiB free that the default pools
 * cannot use; the default pools hold the rest. */
static void test_private_pools(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 128 * MiB, "");
    int pool = core_pool_create(f.d);
    assert_true(pool > 0);
    assert_int_equal(core_pool_use(f.d, pool), 0);
    uintptr_t a = fx_alloc(&f, 16 * MiB, 0), b = fx_alloc(&f, 16 * MiB, 0), s = fx_alloc(&f, 1000, 0);
    fx_free(&f, b, CORE_FREE_NOW, 0);
    assert_int_equal(core_pool_use(f.d, 0), 0);
    uintptr_t x = fx_alloc(&f, 16 * MiB, 0), y = fx_alloc(&f, 4 * MiB, 0), z = fx_alloc(&f, 512, 0);
    oomcase_t c;
    fail_and_report(&f, &c, 64 * MiB, "");
    golden("private_pools", &c.text);
    assert_int_equal(c.oom.pool_id, 0);
    expect_sentence(&c.text, &c.oom, "", "with 16.00 MiB allocated in private pools (e.g., CUDA Graphs), ");
    assert_true(text_has(&c.text, "  private 1 small "));
    assert_true(text_has(&c.text, "  private 1 large    2 segments 32.00 MiB; live 1 block 16.00 MiB; free 1 "
                                  "block 16.00 MiB"));
    char hints[4096];
    text_hints(&c.text, hints, sizeof hints);
    assert_non_null(strstr(hints, "hint: the memory is in use"));
    assert_non_null(strstr(hints, "hint: private pools (CUDA graphs, MemPool) keep 18.00 MiB free"));
    assert_int_equal(apply_every_hint(&c.text, private_pools_fits), 2);
    assert_false(private_pools_fits(""));
    oomcase_free(&c);
    fx_free(&f, x, CORE_FREE_NOW, 0);
    fx_free(&f, y, CORE_FREE_NOW, 0);
    fx_free(&f, z, CORE_FREE_NOW, 0);
    fx_free(&f, a, CORE_FREE_NOW, 0);
    fx_free(&f, s, CORE_FREE_NOW, 0);
    assert_int_equal(core_pool_destroy(f.d, pool), 0);
    fx_close(&f);
}

/* During a capture frees stay pending and the failure comes without the
 * retry ladder: the map shows them, the hint says they wait. */
static void test_pending(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 64 * MiB, "");
    uintptr_t p[3];
    for (int i = 0; i < 3; i++)
        p[i] = fx_alloc(&f, 16 * MiB - 1 * MiB, 0);
    core_set_capturing(f.d, true);
    fx_free(&f, p[1], CORE_FREE_FENCED, 0);
    oomcase_t c;
    fail_and_report(&f, &c, 32 * MiB, "");
    golden("pending", &c.text);
    assert_int_equal(c.oom.pending, 16 * MiB);
    expect_sentence(&c.text, &c.oom, "", "");
    assert_true(text_has(&c.text, "|~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~|"));
    assert_true(text_has(&c.text, "|******************************xx|"));
    char hints[4096];
    text_hints(&c.text, hints, sizeof hints);
    assert_non_null(strstr(hints, "hint: 16.00 MiB more is freed but still waiting on fences or events"));
    oomcase_free(&c);
    core_set_capturing(f.d, false);
    core_synchronized(f.d);
    fx_free(&f, p[0], CORE_FREE_NOW, 0);
    fx_free(&f, p[2], CORE_FREE_NOW, 0);
    fx_close(&f);
}

/* The device failed with an error, not for lack of memory. */
static void test_backend_error(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 128 * MiB, "");
    f.m.fail_allocs = 1;
    f.m.fail_code = CORE_EFAIL;
    oomcase_t c;
    fail_and_report(&f, &c, 4 * MiB, "");
    assert_int_equal(c.oom.backend_error, CORE_EFAIL);
    expect_sentence(&c.text, &c.oom, "", "");
    char hints[4096];
    text_hints(&c.text, hints, sizeof hints);
    assert_non_null(strstr(hints, "an error other than out of memory"));
    assert_null(strstr(hints, "CUCACHE_CONF="));
    oomcase_free(&c);
    fx_close(&f);
}

/* More than 16 segments and 8 sizes: the map and the size list are capped. */
static void test_caps(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 64 * MiB, "");
    uintptr_t p[40], q[10];
    for (int i = 0; i < 40; i++) /* 20 small segments, two 1 MiB blocks each */
        p[i] = fx_alloc(&f, 1 * MiB, 0);
    for (int i = 0; i < 40; i += 2) /* the first block of each segment */
        fx_free(&f, p[i], CORE_FREE_NOW, 0);
    for (int i = 0; i < 10; i++) /* ten sizes into the holes */
        q[i] = fx_alloc(&f, (size_t)(i + 1) * 64 * KiB, 0);
    oomcase_t c;
    fail_and_report(&f, &c, 64 * MiB, "");
    golden("caps", &c.text);
    assert_int_equal(c.layout.nsegs, 20);
    assert_true(text_has(&c.text, "segment map: the 16 of 20 segments with the most free bytes"));
    assert_true(text_has(&c.text, "  ... 4 more segments, 8.00 MiB"));
    assert_true(text_has(&c.text, "  ... 3 more sizes: 3 blocks, 384.00 KiB")); /* 64 + 128 + 192 KiB */
    size_t maplines = 0;
    for (size_t i = 0; i < c.text.n; i++)
        maplines += strncmp(c.text.line[i], "  0x", 4) == 0;
    assert_int_equal(maplines, 16);
    oomcase_free(&c);
    for (int i = 1; i < 40; i += 2)
        fx_free(&f, p[i], CORE_FREE_NOW, 0);
    for (int i = 0; i < 10; i++)
        fx_free(&f, q[i], CORE_FREE_NOW, 0);
    fx_close(&f);
}

/* ------------------------------------------------------------------------
 * The summary
 * ---------------------------------------------------------------------- */

/* Every table line is 75 characters between bars. */
static size_t check_table(const text_t *t)
{
    size_t rows = 0;
    for (size_t i = 0; i < t->n && t->line[i][0] == '|'; i++, rows++) {
        assert_int_equal(strlen(t->line[i]), 77);
        assert_int_equal(t->line[i][76], '|');
    }
    return rows;
}

static void summary_of(fx_t *f, text_t *t)
{
    core_stats_t s;
    core_stats_get(f->d, &s);
    s.fence_wait_ns = 1234567; /* measured with a clock: masked */
    st_summary(0, &s, text_sink, t);
}

static void test_summary(void **state)
{
    (void)state;
    fx_t f;
    uintptr_t live[32];
    size_t nlive;
    make_fragmented(&f, "", 4 * MiB - 100, 32, live, &nlive);
    oomcase_t c;
    fail_and_report(&f, &c, 24 * MiB, "");
    oomcase_free(&c);

    text_t t = {0};
    summary_of(&f, &t);
    golden("summary_live", &t);
    /* 1 + title + 1 + OOMs + 1 + header + 9 groups of 4 + 2 of 2 + 1 */
    assert_int_equal(check_table(&t), 6 + 9 * 4 + 2 * 2 + 1);
    assert_string_equal(t.line[1], "|                  cucache memory summary, device ID 0                      |");
    assert_string_equal(t.line[3], "|            CUDA OOMs: 1            |        cudaMalloc retries: 1         |");
    assert_string_equal(t.line[5], "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |");
    /* expected lines checked against PyTorch's own formatting code run on the same numbers */
    assert_string_equal(text_line(&t, "| Allocated memory "),
                        "| Allocated memory      |  65536 KiB | 131072 KiB | 262144 KiB | 196608 KiB |");
    assert_string_equal(text_line(&t, "| GPU reserved memory "),
                        "| GPU reserved memory   | 131072 KiB | 131072 KiB | 131072 KiB |      0 B   |");
    assert_string_equal(text_line(&t, "verdict:"), "verdict: 67108864 bytes in 16 allocations still live (64.00 MiB)");
    assert_string_equal(text_line(&t, "cache hit rate:"),
                        "cache hit rate: 88.9% (32 of 36 allocations served from cached blocks)");
    text_free(&t);

    for (size_t i = 0; i < nlive; i++)
        fx_free(&f, live[i], CORE_FREE_NOW, 0);
    summary_of(&f, &t);
    golden("summary_freed", &t);
    assert_string_equal(text_line(&t, "verdict:"), "verdict: everything freed");
    text_free(&t);
    fx_close(&f);
}

/* PyTorch's unit steps on constructed counters. */
/* One call site asking for 3 MiB gets blocks of several sizes; the report
 * groups by the bytes asked for, and sizes that print alike show their
 * bytes, so that no two rows of one site read the same. */
static void test_live_by_requested_size(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, 256 * MiB, "");
    uintptr_t p[8];
    for (int i = 0; i < 6; i++)
        p[i] = fx_alloc(&f, 3 * MiB, 0);
    p[6] = fx_alloc(&f, 3 * MiB + 1000, 0);
    p[7] = fx_alloc(&f, 3 * MiB + 1000, 0);
    oomcase_t c;
    fail_and_report(&f, &c, 1 * GiB, "");
    assert_true(text_has(&c.text, "         6 x   3.00 MiB (3145728 bytes) = 18.00 MiB"));
    assert_true(text_has(&c.text, "         2 x   3.00 MiB (3146728 bytes) = 6.00 MiB"));
    oomcase_free(&c);
    for (int i = 0; i < 8; i++)
        fx_free(&f, p[i], CORE_FREE_NOW, 0);
    fx_close(&f);
}

static void test_summary_units(void **state)
{
    (void)state;
    core_stats_t s;
    memset(&s, 0, sizeof s);
    s.allocated_bytes[CORE_POOL_ALL] = (core_stat_t){3 * (int64_t)GiB, 767 * 1024, 700 * 1024, 768 * 1024};
    s.allocated_bytes[CORE_POOL_LARGE] = (core_stat_t){3 * (int64_t)GiB - 1000, 767 * 1024, 0, 5};
    s.allocation[CORE_POOL_ALL] = (core_stat_t){1000000, 749999, 750000, 2000000000};
    s.allocation[CORE_POOL_SMALL] = (core_stat_t){1999, 5, 750000, 1};
    text_t t = {0};
    st_summary(7, &s, text_sink, &t);
    check_table(&t);
    assert_string_equal(t.line[1], "|                  cucache memory summary, device ID 7                      |");
    /* current 3 GiB: MiB; peak below 768 KiB: bytes; freed exactly 768 KiB: KiB */
    assert_string_equal(text_line(&t, "| Allocated memory "),
                        "| Allocated memory      |   3072 MiB | 785408 B   | 716800 B   |    768 KiB |");
    /* the pool rows scale by the "all" row: 3 GiB - 1000 floors to 3071 MiB */
    assert_string_equal(text_line(&t, "|       from large pool"),
                        "|       from large pool |   3071 MiB | 785408 B   |      0 B   |      0 KiB |");
    assert_string_equal(text_line(&t, "| Allocations "),
                        "| Allocations           |    1000 K  |  749999    |     750 K  |    2000 M  |");
    assert_string_equal(t.line[29], "|       from small pool |       1 K  |       5    |     750 K  |       0 M  |");
    assert_string_equal(text_line(&t, "cache hit rate:"),
                        "cache hit rate: 0.0% (0 of 750000 allocations served from cached blocks)");
    assert_string_equal(text_line(&t, "verdict:"), "verdict: 3221225472 bytes in 1000000 allocations still live "
                                                   "(3.00 GiB)");
    text_free(&t);

    memset(&s, 0, sizeof s);
    st_summary(0, &s, text_sink, &t);
    assert_string_equal(text_line(&t, "cache hit rate:"),
                        "cache hit rate: n/a (0 of 0 allocations served from cached blocks)");
    assert_string_equal(text_line(&t, "fences:"),
                        "fences: 0 recorded, 0 handed out before they completed (the device "
                        "ordered after them), 0 waits for a fence or event, 0.000 ms waiting");
    assert_false(text_has(&t, "hand-outs stopped:"));
    assert_false(text_has(&t, "shared pages:"));
    assert_string_equal(text_line(&t, "verdict:"), "verdict: everything freed");
    text_free(&t);

    /* expandable_share_pages: one page, then two */
    s.num_shared_pages = 1;
    st_summary(0, &s, text_sink, &t);
    assert_string_equal(text_line(&t, "shared pages:"),
                        "shared pages: 1 page mapped a second time to start or end a request in another block's page "
                        "(expandable_share_pages), no memory of its own");
    text_free(&t);
    s.num_shared_pages = 2;
    st_summary(0, &s, text_sink, &t);
    assert_true(text_has(&t, "shared pages: 2 pages mapped a second time"));
    text_free(&t);
    s.num_shared_pages = 0;

    /* reuse:ordered's hand-outs, and their stop (a second context) */
    s.num_fences = 40;
    s.num_fence_hand_outs = 12;
    s.num_hand_out_stops = 1;
    st_summary(0, &s, text_sink, &t);
    assert_string_equal(text_line(&t, "fences:"), "fences: 40 recorded, 12 handed out before they completed (the "
                                                  "device ordered after them), 0 waits for a fence or event, 0.000 ms "
                                                  "waiting");
    assert_true(text_has(&t, "hand-outs stopped: a second CUDA context appeared in the process"));
    text_free(&t);

    /* waits for the neighbours: none, then two on device 5 (not device 0's) */
    memset(&s, 0, sizeof s);
    st_summary(5, &s, text_sink, &t);
    assert_false(text_has(&t, "yield waits:"));
    text_free(&t);
    st_reg_note_wait(5, 312400000, 3 * 1048576);
    st_reg_note_wait(5, 1200000, 0);
    st_summary(5, &s, text_sink, &t);
    assert_string_equal(text_line(&t, "yield waits:"),
                        "yield waits: 313.600 ms waiting for other processes on this GPU to give idle cache back, in "
                        "2 asks (the longest 312.400 ms; CUCACHE_YIELD_MS); 3.00 MiB given while it waited");
    text_free(&t);
    st_summary(0, &s, text_sink, &t);
    assert_false(text_has(&t, "yield waits:"));
    text_free(&t);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        golden_dir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fragmented),
        cmocka_unit_test(test_fragmented_roundup),
        cmocka_unit_test(test_fragmented_preallocate),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_limit_fraction),
        cmocka_unit_test(test_limit_and_device),
        cmocka_unit_test(test_outside),
        cmocka_unit_test(test_outside_processes),
        cmocka_unit_test(test_outside_nvml_incomplete),
        cmocka_unit_test(test_outside_neighbours),
        cmocka_unit_test(test_private_pools),
        cmocka_unit_test(test_pending),
        cmocka_unit_test(test_backend_error),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_summary_units),
        cmocka_unit_test(test_live_by_requested_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
