/*
 * The SVG of cucache-replay --plot (replay/plot.c).  Proves: one polyline
 * per non-empty curve (reserved and allocated per configuration, PyTorch's
 * reserved), long curves merged to at most 2000 points without losing the
 * peak, the y axis in the unit the data calls for, labels escaped, no NaN
 * or infinity printed for empty or all-zero data, and the file written
 * whole.  PLOT_TEST_OUT=dir keeps the files for a person to look at.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "replay.h"

static size_t count(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, what)); p++)
        n++;
    return n;
}

static rp_curve_t curve(size_t nb, size_t per, uint64_t scale, uint64_t peak_at)
{
    rp_curve_t c = {.nbuckets = nb, .events_per_bucket = per};
    c.allocated = calloc(nb ? nb : 1, sizeof *c.allocated);
    c.reserved = calloc(nb ? nb : 1, sizeof *c.reserved);
    for (size_t i = 0; i < nb; i++) {
        c.allocated[i] = scale * (i % 100) / 100;
        c.reserved[i] = scale;
    }
    if (nb)
        c.reserved[peak_at] = scale * 3; /* one bucket's peak */
    return c;
}

static void keep(const char *name, const char *svg, size_t len)
{
    const char *dir = getenv("PLOT_TEST_OUT");
    if (!dir)
        return;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fwrite(svg, 1, len, f);
        fclose(f);
    }
}

static void test_two_configs_and_reference(void **state)
{
    rp_config_t cfgs[3] = {{.label = "default"}, {.label = "max_split<&>\"'"}, {.label = "empty"}};
    rp_result_t res[3] = {0};
    res[0].curve = curve(3000, 2, (uint64_t)3 << 30, 1234);
    res[1].curve = curve(3000, 2, (uint64_t)2 << 30, 10);
    rp_curve_t ref = curve(3000, 2, (uint64_t)4 << 30, 5);
    rp_plot_panel_t p = {"trace <1>", 6000, cfgs, res, 3, &ref};
    size_t len;
    char *svg = rp_plot_render(&p, 1, &len);
    assert_non_null(svg);
    keep("two.svg", svg, len);
    assert_int_equal(strlen(svg), len);
    assert_true(strncmp(svg, "<?xml", 5) == 0);
    assert_non_null(strstr(svg, "xmlns=\"http://www.w3.org/2000/svg\""));
    assert_int_equal(count(svg, "<polyline"), 5); /* 2 x (reserved, allocated) + PyTorch's */
    assert_non_null(strstr(svg, "max_split&lt;&amp;&gt;&quot;&apos;"));
    assert_null(strstr(svg, "<&>"));
    assert_non_null(strstr(svg, "trace &lt;1&gt; (6000 events)"));
    assert_non_null(strstr(svg, "memory (GiB)"));
    assert_non_null(strstr(svg, "PyTorch reserved"));
    assert_null(strstr(svg, "nan"));
    assert_null(strstr(svg, "inf"));
    /* 3000 buckets merged into at most 2000 points per polyline */
    const char *pl = strstr(svg, "points=\"");
    const char *end = strchr(pl + 8, '"');
    size_t points = 1;
    for (const char *q = pl + 8; q < end; q++)
        points += *q == ' ';
    assert_true(points <= 2000 && points >= 1000);
    /* the peak (12 GiB on a 12 GiB axis) is drawn at the top: y == TOP of the plot area */
    assert_non_null(strstr(svg, ",40.0"));
    free(svg);
    for (int k = 0; k < 2; k++) {
        free(res[k].curve.allocated);
        free(res[k].curve.reserved);
    }
    free(ref.allocated);
    free(ref.reserved);
}

static void test_empty_and_zero(void **state)
{
    size_t len;
    char *svg = rp_plot_render(NULL, 0, &len);
    assert_non_null(svg);
    assert_non_null(strstr(svg, "no data"));
    free(svg);

    rp_config_t cfg = {.label = "zero"};
    rp_result_t res = {0};
    res.curve = curve(1, 1, 0, 0);
    rp_plot_panel_t panels[2] = {{"zeros", 1, &cfg, &res, 1, NULL}, {"nothing", 0, &cfg, NULL, 0, NULL}};
    svg = rp_plot_render(panels, 2, &len);
    assert_non_null(svg);
    keep("zero.svg", svg, len);
    assert_non_null(strstr(svg, "memory (MiB)"));
    assert_int_equal(count(svg, "<polyline"), 2);
    assert_non_null(strstr(svg, "no data"));
    assert_null(strstr(svg, "nan"));
    assert_null(strstr(svg, "inf"));
    free(svg);
    free(res.curve.allocated);
    free(res.curve.reserved);
}

static void test_written_whole(void **state)
{
    char dir[] = "/tmp/test_plot.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[600], err[256];
    snprintf(path, sizeof path, "%s/p.svg", dir);
    rp_config_t cfg = {.label = "a"};
    rp_result_t res = {0};
    res.curve = curve(10, 1, 5u << 20, 3);
    rp_plot_panel_t p = {"t", 10, &cfg, &res, 1, NULL};
    assert_int_equal(rp_plot_svg(path, &p, 1, err, sizeof err), 0);
    size_t len;
    char *svg = rp_plot_render(&p, 1, &len);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *back = malloc(len + 1);
    assert_int_equal(fread(back, 1, len + 1, f), len);
    fclose(f);
    assert_memory_equal(back, svg, len);
    /* a directory that does not exist: an error naming it */
    snprintf(path, sizeof path, "%s/missing/p.svg", dir);
    assert_int_equal(rp_plot_svg(path, &p, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "missing"));
    snprintf(path, sizeof path, "%s/p.svg", dir);
    unlink(path);
    rmdir(dir);
    free(back);
    free(svg);
    free(res.curve.allocated);
    free(res.curve.reserved);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_configs_and_reference),
        cmocka_unit_test(test_empty_and_zero),
        cmocka_unit_test(test_written_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
