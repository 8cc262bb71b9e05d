/*
 * The SVG of cucache-replay --plot (replay/plot.c).  Proves: one polyline
 * per drawn curve (reserved and allocated per configuration with a curve,
 * PyTorch's reserved), long curves merged by maximum to at most 2000
 * points without losing the peak, a single bucket drawn as a flat segment,
 * the y axis in the unit the data calls for with 5 to 8 ticks of 1, 2 or
 * 5 x 10^k up to a tick above the maximum, the event axis likewise, text
 * escaped (and bytes that are not UTF-8 replaced) so that the document is
 * well formed, "no data" for no panel and for a panel without curves, no
 * nan or inf ever (random inputs included), long labels wrapped, panels
 * growing with their legend, and the file written whole.
 * PLOT_TEST_OUT=dir keeps every SVG for a person to look at.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hostalloc.h"
#include "replay.h"

#define GiB ((uint64_t)1 << 30)
#define MiB ((uint64_t)1 << 20)

static size_t count(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, what)); p++)
        n++;
    return n;
}

/* nb buckets of `per` events: allocated a saw tooth below scale, reserved
 * scale with one bucket at 3 x scale. */
static rp_curve_t curve(size_t nb, size_t per, uint64_t scale, size_t peak_at)
{
    rp_curve_t c = {.nbuckets = nb, .events_per_bucket = per};
    c.allocated = calloc(nb ? nb : 1, sizeof *c.allocated);
    c.reserved = calloc(nb ? nb : 1, sizeof *c.reserved);
    assert_non_null(c.allocated);
    assert_non_null(c.reserved);
    for (size_t i = 0; i < nb; i++) {
        c.allocated[i] = scale * (i % 100) / 100;
        c.reserved[i] = scale;
    }
    if (nb)
        c.reserved[peak_at] = scale * 3;
    return c;
}

static void curve_free(rp_curve_t *c)
{
    free(c->allocated);
    free(c->reserved);
    *c = (rp_curve_t){0};
}

/* The SVG into $PLOT_TEST_OUT/name when set. */
static void keep(const char *name, const char *svg, size_t len)
{
    const char *dir = getenv("PLOT_TEST_OUT");
    if (!dir || !*dir)
        return;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(svg, 1, len, f), len);
    fclose(f);
}

/* A small XML checker for what plot.c writes: tags nest and close, one
 * root element, attribute values quoted, every '&' an entity, no '<' in
 * values nor '>' in text, no control characters. */
static bool well_formed(const char *s)
{
    static const char *const ent[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
    char stack[16][32];
    int depth = 0, roots = 0;
    if (strncmp(s, "<?xml", 5) == 0) {
        s = strstr(s, "?>");
        if (!s)
            return false;
        s += 2;
    }
    for (; *s; s++) {
        if ((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t')
            return false;
        if (*s == '&') {
            bool ok = false;
            for (size_t i = 0; i < 5; i++)
                ok |= strncmp(s, ent[i], strlen(ent[i])) == 0;
            if (!ok)
                return false;
        }
        if (*s == '>')
            return false;
        if (*s != '<')
            continue;
        bool closing = s[1] == '/';
        const char *name = s + 1 + closing;
        size_t n = strcspn(name, " \t\n/>");
        if (n == 0 || n >= 32)
            return false;
        const char *p = name + n;
        char quote = 0;
        for (; *p && (quote || *p != '>'); p++) {
            if (*p == '<')
                return false;
            if (*p == '"' || *p == '\'')
                quote = quote == *p ? 0 : quote ? quote : *p;
        }
        if (!*p)
            return false;
        bool empty = p[-1] == '/';
        if (closing) {
            if (depth == 0 || strlen(stack[depth - 1]) != n || strncmp(stack[depth - 1], name, n) != 0)
                return false;
            depth--;
        } else if (!empty) {
            if (depth == 16)
                return false;
            roots += depth == 0;
            memcpy(stack[depth], name, n);
            stack[depth++][n] = '\0';
        } else {
            roots += depth == 0;
        }
        s = p;
    }
    return depth == 0 && roots == 1;
}

/* The checks every SVG passes; kept as name. */
static void common(const char *name, const char *svg, size_t len)
{
    keep(name, svg, len);
    assert_int_equal(strlen(svg), len);
    assert_true(strncmp(svg, "<?xml", 5) == 0);
    assert_non_null(strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_non_null(strstr(svg, "viewBox=\"0 0 1000 "));
    assert_non_null(strstr(svg, "font-family=\"sans-serif\""));
    assert_non_null(strstr(svg, "fill=\"#fff\""));
    assert_null(strstr(svg, "nan"));
    assert_null(strstr(svg, "inf"));
    assert_null(strstr(svg, "NaN"));
    assert_null(strstr(svg, "e+"));
    assert_true(well_formed(svg));
    assert_string_equal(svg + len - 7, "</svg>\n");
}

/* The labels of the ticks of one class ("xtick", "ytick"), as numbers
 * (k, M and G read as 1e3, 1e6, 1e9). */
static int ticks(const char *svg, const char *cls, double *v, int max)
{
    char key[32];
    snprintf(key, sizeof key, "class=\"%s\"", cls);
    int n = 0;
    for (const char *p = svg; (p = strstr(p, key)); p++) {
        const char *t = strchr(p, '>') + 1;
        char *end;
        double x = strtod(t, &end);
        assert_true(end > t);
        x *= *end == 'k' ? 1e3 : *end == 'M' ? 1e6 : *end == 'G' ? 1e9 : 1;
        assert_true(n < max);
        v[n++] = x;
    }
    return n;
}

/* Ticks from 0 at a step of 1, 2 or 5 x 10^k, 5 to 8 of them; the last. */
static double check_ticks(const char *svg, const char *cls)
{
    double v[64];
    int n = ticks(svg, cls, v, 64);
    assert_in_range(n, 5, 8);
    assert_true(v[0] == 0);
    double step = v[1] - v[0], mag = pow(10, floor(log10(step) + 1e-9)), m = step / mag;
    assert_true(fabs(m - 1) < 1e-6 || fabs(m - 2) < 1e-6 || fabs(m - 5) < 1e-6);
    for (int i = 1; i < n; i++)
        assert_true(fabs(v[i] - i * step) < step * 1e-6);
    return v[n - 1];
}

/* The plot area: the frame of the panel'th panel. */
static void frame(const char *svg, int panel, double *x, double *y, double *w, double *h)
{
    const char *p = svg;
    for (int i = 0; i <= panel; i++) {
        p = strstr(p, "class=\"frame\"");
        assert_non_null(p);
        p++;
    }
    assert_int_equal(sscanf(p - 1, "class=\"frame\" x=\"%lf\" y=\"%lf\" width=\"%lf\" height=\"%lf\"", x, y, w, h), 4);
}

/* The points of the i'th polyline. */
static size_t points(const char *svg, int i, double *xs, double *ys, size_t max)
{
    const char *p = svg;
    for (int k = 0; k <= i; k++) {
        p = strstr(p, "<polyline");
        assert_non_null(p);
        p++;
    }
    p = strstr(p, "points=\"") + 8;
    size_t n = 0;
    while (*p != '"') {
        int used;
        assert_true(n < max);
        assert_int_equal(sscanf(p, "%lf,%lf%n", &xs[n], &ys[n], &used), 2);
        n++;
        p += used;
        p += *p == ' ';
    }
    return n;
}

static char *render(const rp_plot_panel_t *p, size_t n, size_t *len)
{
    char *svg = rp_plot_render(p, n, len);
    assert_non_null(svg);
    return svg;
}

static void test_two_configs_and_reference(void **state)
{
    rp_config_t cfgs[3] = {{.label = "default"}, {.label = "max_split<&>\"'"}, {.label = "empty"}};
    rp_result_t res[3] = {0};
    res[0].curve = curve(3000, 2, 3 * GiB, 1234);
    res[1].curve = curve(3000, 2, 2 * GiB, 10);
    rp_curve_t ref = curve(3000, 2, 4 * GiB, 5); /* peak 12 GiB */
    free(ref.allocated);
    ref.allocated = NULL; /* as main.c builds it */
    rp_plot_panel_t p = {"trace <1>", 6000, cfgs, res, 3, &ref};
    size_t len;
    char *svg = render(&p, 1, &len);
    common("two.svg", svg, len);
    assert_int_equal(count(svg, "<polyline"), 5); /* 2 x (allocated, reserved) + PyTorch's */
    assert_non_null(strstr(svg, ">max_split&lt;&amp;&gt;&quot;&apos;</text>"));
    assert_null(strstr(svg, "<&>"));
    assert_non_null(strstr(svg, ">default</text>"));
    assert_null(strstr(svg, ">empty</text>")); /* no curve, no legend entry */
    assert_non_null(strstr(svg, "trace &lt;1&gt; (6,000 events)"));
    assert_non_null(strstr(svg, "memory (GiB)"));
    assert_non_null(strstr(svg, ">PyTorch reserved</text>"));
    assert_non_null(strstr(svg, ">reserved</text>"));
    assert_non_null(strstr(svg, ">allocated</text>"));
    assert_int_equal(count(svg, "stroke=\"#1f77b4\""), 3); /* two polylines and the swatch */
    assert_int_equal(count(svg, "stroke=\"#d62728\""), 3);
    assert_non_null(strstr(svg, "height=\"420\""));

    /* axes: 0 .. 14 GiB in steps of 2 (the first tick above 12), 0 .. 6k */
    double v[16];
    assert_int_equal(ticks(svg, "ytick", v, 16), 8);
    for (int i = 0; i < 8; i++)
        assert_true(v[i] == 2 * i);
    assert_int_equal(ticks(svg, "xtick", v, 16), 7);
    assert_non_null(strstr(svg, ">6k</text>"));

    /* every polyline: 3000 buckets by 2 = 1500 points, inside the frame,
     * left to right; the peak kept by the merge: one point at 3 x the rest */
    double fx, fy, fw, fh;
    frame(svg, 0, &fx, &fy, &fw, &fh);
    static double xs[2100], ys[2100];
    for (int i = 0; i < 5; i++) {
        size_t n = points(svg, i, xs, ys, 2100);
        assert_int_equal(n, 1500);
        for (size_t k = 0; k < n; k++) {
            assert_true(xs[k] >= fx && xs[k] <= fx + fw);
            assert_true(ys[k] >= fy && ys[k] <= fy + fh);
            assert_true(k == 0 || xs[k] > xs[k - 1]);
        }
    }
    size_t n = points(svg, 1, xs, ys, 2100); /* default's reserved */
    double base = fy + fh, top = base, low = fy;
    size_t at = 0;
    for (size_t k = 0; k < n; k++)
        if (ys[k] < top)
            top = ys[k], at = k;
    for (size_t k = 0; k < n; k++)
        if (k != at)
            low = ys[k] > low ? ys[k] : low;
    assert_int_equal(at, 1234 / 2);
    assert_true(fabs((base - top) / (base - low) - 3.0) < 0.01);
    assert_true(fabs((base - top) / fh - 9.0 / 14.0) < 0.001); /* 9 GiB on a 14 GiB axis */
    /* the point sits at the middle of its events (2468 .. 2472 of 6000) */
    assert_true(fabs(xs[at] - (fx + fw * 2470.0 / 6000.0)) < 0.06);
    hostalloc_free(svg);
    for (int k = 0; k < 3; k++)
        curve_free(&res[k].curve);
    curve_free(&ref);
}

static void test_empty_and_zero(void **state)
{
    size_t len;
    char *svg = render(NULL, 0, &len);
    common("none.svg", svg, len);
    assert_non_null(strstr(svg, ">no data</text>"));
    assert_int_equal(count(svg, "<polyline"), 0);
    hostalloc_free(svg);

    /* all zero in one bucket: 0 .. 1 MiB, a flat segment across the panel;
     * panels without events or curves: "no data" */
    rp_config_t cfg[2] = {{.label = "zero"}, {.label = "never"}};
    rp_result_t res[2] = {0};
    res[0].curve = curve(1, 1, 0, 0);
    rp_curve_t ref = {0};
    rp_plot_panel_t panels[3] = {
        {"zeros", 1, cfg, res, 2, &ref}, {"nothing", 0, cfg, NULL, 0, NULL}, {NULL, 7, cfg + 1, res + 1, 1, NULL}};
    svg = render(panels, 3, &len);
    common("zero.svg", svg, len);
    assert_non_null(strstr(svg, "zeros (1 event)"));
    assert_non_null(strstr(svg, "nothing (0 events)"));
    assert_non_null(strstr(svg, "> (7 events)"));
    assert_int_equal(count(svg, "memory (MiB)"), 1);
    assert_int_equal(count(svg, ">no data</text>"), 2);
    assert_int_equal(count(svg, "<polyline"), 2);
    assert_null(strstr(svg, "PyTorch reserved")); /* an empty reference is not drawn */
    assert_null(strstr(svg, ">never</text>"));
    assert_non_null(strstr(svg, "height=\"1260\""));
    assert_true(check_ticks(svg, "ytick") == 1);
    double fx, fy, fw, fh, xs[4], ys[4];
    frame(svg, 0, &fx, &fy, &fw, &fh);
    assert_int_equal(points(svg, 1, xs, ys, 4), 2);
    assert_true(xs[0] == fx && xs[1] == fx + fw);
    assert_true(ys[0] == fy + fh && ys[1] == fy + fh);
    hostalloc_free(svg);
    curve_free(&res[0].curve);
}

/* The units and ticks over a range of maxima and lengths. */
static void test_axes(void **state)
{
    static const struct {
        uint64_t max;
        const char *unit;
        double end; /* the y axis's last tick */
    } ys[] = {
        {1, "bytes", 1.2},       {1000, "bytes", 1200},   {1024, "KiB", 1.2},        {500 << 10, "KiB", 600},
        {MiB, "MiB", 1.2},       {100 * MiB, "MiB", 120}, {1023 * MiB, "MiB", 1200}, {GiB + GiB / 2, "GiB", 2},
        {3 * GiB, "GiB", 3.5},   {12 * GiB, "GiB", 14},   {80 * GiB, "GiB", 100},    {1023 * GiB, "GiB", 1200},
        {GiB << 10, "TiB", 1.2}, {UINT64_MAX, "EiB", 20},
    };
    rp_config_t cfg = {.label = "c"};
    rp_result_t res = {0};
    for (size_t i = 0; i < sizeof ys / sizeof ys[0]; i++) {
        res.curve = curve(10, 1, 0, 0);
        res.curve.reserved[4] = ys[i].max;
        rp_plot_panel_t p = {"t", 10, &cfg, &res, 1, NULL};
        size_t len;
        char *svg = render(&p, 1, &len);
        common("axes.svg", svg, len);
        char want[32];
        snprintf(want, sizeof want, "memory (%s)", ys[i].unit);
        if (!strstr(svg, want) || fabs(check_ticks(svg, "ytick") - ys[i].end) > 1e-9)
            fail_msg("max %llu: want %s up to %g", (unsigned long long)ys[i].max, ys[i].unit, ys[i].end);
        hostalloc_free(svg);
        curve_free(&res.curve);
    }
    /* events: 5 to 8 ticks of 1, 2, 5 x 10^k, the last less than a step
     * past the last event */
    static const size_t ns[] = {4,       5,       7,         8,           10,          15,    16,     19,
                                20,      21,      99,        100,         101,         999,   1000,   1001,
                                1600,    1999,    2500,      6000,        12345,       99999, 160000, 1000000,
                                1999999, 2500001, 123456789, (size_t)4e9, (size_t)19e9};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        res.curve = curve(1, ns[i], MiB, 0);
        rp_plot_panel_t p = {"t", ns[i], &cfg, &res, 1, NULL};
        size_t len;
        char *svg = render(&p, 1, &len);
        common("events.svg", svg, len);
        double last = check_ticks(svg, "xtick"), v[16];
        ticks(svg, "xtick", v, 16);
        if (last - v[1] >= (double)ns[i])
            fail_msg("%zu events: more than a step past the end", ns[i]);
        hostalloc_free(svg);
        curve_free(&res.curve);
    }
    /* fewer than 4 events: a tick per event */
    res.curve = curve(3, 1, MiB, 0);
    rp_plot_panel_t p = {"t", 3, &cfg, &res, 1, NULL};
    size_t len;
    char *svg = render(&p, 1, &len);
    common("three.svg", svg, len);
    double v[8];
    assert_int_equal(ticks(svg, "xtick", v, 8), 4);
    assert_true(v[3] == 3);
    hostalloc_free(svg);
    curve_free(&res.curve);
}

/* Names that are not UTF-8, long labels, many configurations. */
static void test_text_and_legend(void **state)
{
    enum { N = 12 };
    rp_config_t cfgs[N];
    rp_result_t res[N] = {0};
    static const char *const labels[N] = {
        "default",
        "max_split_size_mb:40,roundup_power2_divisions:4,garbage_collection_threshold:0.6",
        "a_label_without_any_break_that_is_far_too_long_for_one_line_of_the_legend_and_then_more_and_more_text",
        "caf\xc3\xa9 \xe2\x82\xac",
    };
    for (int k = 0; k < N; k++) {
        cfgs[k] = (rp_config_t){.label = labels[k] ? labels[k] : "x"};
        res[k].curve = curve(100, 10, (uint64_t)(k + 1) * 100 * MiB, (size_t)k);
    }
    cfgs[N - 1].label = NULL;
    rp_plot_panel_t p = {"bad\xff\xfe name\x01\xed\xa0\x80.pickle", 1000, cfgs, res, N, NULL};
    size_t len;
    char *svg = render(&p, 1, &len);
    common("text.svg", svg, len);
    assert_non_null(strstr(svg, "bad\xef\xbf\xbd\xef\xbf\xbd name\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                                ".pickle (1,000 events)"));
    assert_non_null(strstr(svg, ">caf\xc3\xa9 \xe2\x82\xac</text>"));
    /* wrapped after commas; the unbreakable one cut, the rest an ellipsis */
    assert_non_null(strstr(svg, ">max_split_size_mb:40,</text>"));
    assert_non_null(strstr(svg, ">roundup_power2_divisions:4,</text>"));
    assert_non_null(strstr(svg, ">garbage_collection_threshold:0.6</text>"));
    assert_non_null(strstr(svg, ">a_label_without_any_break_that_</text>"));
    assert_int_equal(count(svg, "\xe2\x80\xa6</text>"), 1);
    /* the palette cycles after eight; the legend made the panel taller */
    assert_int_equal(count(svg, "stroke=\"#1f77b4\""), 6);
    assert_int_equal(count(svg, "<polyline"), 2 * N);
    unsigned h;
    assert_int_equal(sscanf(strstr(svg, "height=\""), "height=\"%u\"", &h), 1);
    assert_true(h > 420);
    double fx, fy, fw, fh;
    frame(svg, 0, &fx, &fy, &fw, &fh);
    assert_true(fy + fh + 54 == h);
    hostalloc_free(svg);
    for (int k = 0; k < N; k++)
        curve_free(&res[k].curve);
}

/* A pseudo-random number (xorshift64). */
static uint64_t xorshift(uint64_t *r)
{
    *r ^= *r << 13;
    *r ^= *r >> 7;
    *r ^= *r << 17;
    return *r;
}

/* Random panels (deterministic): labels of XML specials, control bytes
 * and broken UTF-8, curves of any length, scale and bucket width (0
 * included), event counts that do not match the buckets.  Every SVG is
 * well formed, prints no nan or inf, and has at most 2000 points a curve. */
static void test_random_inputs(void **state)
{
    static const char alphabet[] = "<>&\"' ,:_/xyz09\x01\x7f\xff\xc3\xa9\xe2\x82";
    uint64_t r = 88172645463325252ull;
    static char text[5][64];
    static double xs[2100], ys[2100];
    for (int it = 0; it < 60; it++) {
        rp_config_t cfgs[4];
        rp_result_t res[4] = {0};
        size_t n = xorshift(&r) % 5;
        for (size_t k = 0; k < 5; k++) {
            size_t len = xorshift(&r) % 63;
            for (size_t i = 0; i < len; i++)
                text[k][i] = alphabet[xorshift(&r) % (sizeof alphabet - 1)];
            text[k][len] = '\0';
        }
        for (size_t k = 0; k < n; k++) {
            cfgs[k] = (rp_config_t){.label = text[k]};
            size_t nb = xorshift(&r) % 3 ? xorshift(&r) % 5000 : 0;
            size_t per = xorshift(&r) % 4 ? xorshift(&r) % 1000 : 0;
            res[k].curve = curve(nb, per, 0, 0);
            for (size_t b = 0; b < res[k].curve.nbuckets; b++) {
                res[k].curve.allocated[b] = xorshift(&r) >> (it % 64);
                res[k].curve.reserved[b] = xorshift(&r) >> (it % 64);
            }
        }
        size_t nevents = xorshift(&r) % 3 ? xorshift(&r) % 100000000 : 0;
        rp_plot_panel_t p = {text[4], nevents, cfgs, res, n, n ? &res[0].curve : NULL};
        size_t len;
        char *svg = render(&p, 1, &len);
        common("random.svg", svg, len);
        for (int i = 0; i < (int)count(svg, "<polyline"); i++)
            assert_true(points(svg, i, xs, ys, 2100) <= 2000);
        hostalloc_free(svg);
        for (size_t k = 0; k < n; k++)
            curve_free(&res[k].curve);
    }
}

static void test_written_whole(void **state)
{
    char dir[] = "/tmp/test_plot.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[600], err[256];
    snprintf(path, sizeof path, "%s/p.svg", dir);
    rp_config_t cfg = {.label = "a"};
    rp_result_t res = {0};
    res.curve = curve(10, 1, 5 * MiB, 3);
    rp_plot_panel_t p[2] = {{"t", 10, &cfg, &res, 1, NULL}, {"u", 10, &cfg, &res, 1, &res.curve}};
    assert_int_equal(rp_plot_svg(path, p, 2, err, sizeof err), 0);
    size_t len;
    char *svg = render(p, 2, &len);
    common("written.svg", svg, len);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *back = malloc(len + 1);
    assert_non_null(back);
    assert_int_equal(fread(back, 1, len + 1, f), len);
    fclose(f);
    assert_memory_equal(back, svg, len);
    /* a directory that does not exist: an error naming it */
    snprintf(path, sizeof path, "%s/missing/p.svg", dir);
    assert_int_equal(rp_plot_svg(path, p, 2, err, sizeof err), -1);
    assert_non_null(strstr(err, "missing"));
    snprintf(path, sizeof path, "%s/p.svg", dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0); /* nothing else was left behind */
    free(back);
    hostalloc_free(svg);
    curve_free(&res.curve);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_configs_and_reference),
        cmocka_unit_test(test_empty_and_zero),
        cmocka_unit_test(test_axes),
        cmocka_unit_test(test_text_and_legend),
        cmocka_unit_test(test_random_inputs),
        cmocka_unit_test(test_written_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
