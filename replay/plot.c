/*
 * cucache-replay --plot: an SVG a person can read.  One panel per trace,
 * stacked; in each, per configuration its reserved bytes (solid) and
 * allocated bytes (dashed) over the event timeline in one colour, and
 * PyTorch's own reserved curve (black, dotted) when the trace has one.
 * Axes carry units: events on x (1, 2, 5 x 10^k steps, k/M suffixes),
 * bytes on y in MiB or GiB, whichever the panel's maximum calls for.
 *
 * Curves come bucketed (rp_curve_t: the highest value in each bucket of
 * events); more than MAX_POINTS buckets are merged by maximum, so the file
 * stays small whatever the trace's length and a peak is never lost.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "st.h"

enum {
    WIDTH = 1000,
    PANEL_H = 420,
    LEFT = 80, /* margins inside a panel */
    RIGHT = 200,
    TOP = 40,
    BOTTOM = 50,
    MAX_POINTS = 2000,
};

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};

typedef struct out_s {
    char *buf;
    size_t len, cap;
    bool failed;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(out_t *o, const char *fmt, ...)
{
    if (o->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->failed = true;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = (o->cap + (size_t)n + 1) * 2;
        char *b = realloc(o->buf, cap);
        if (!b) {
            o->failed = true;
            return;
        }
        o->buf = b, o->cap = cap;
    }
}

/* Text with the XML specials escaped. */
static void put_text(out_t *o, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': put(o, "&amp;"); break;
        case '<': put(o, "&lt;"); break;
        case '>': put(o, "&gt;"); break;
        case '"': put(o, "&quot;"); break;
        case '\'': put(o, "&apos;"); break;
        default:
            if ((unsigned char)*s >= 0x20)
                put(o, "%c", *s);
        }
    }
}

/* The least 1, 2 or 5 x 10^k step giving at most `ticks` intervals up to max. */
static double nice_step(double max, int ticks)
{
    double raw = max / ticks, mag = pow(10, floor(log10(raw)));
    for (int i = 0; i < 3; i++) {
        double m = (double[]){1, 2, 5}[i] * mag;
        if (m >= raw)
            return m;
    }
    return 10 * mag;
}

static void fmt_events(char *b, size_t l, double v)
{
    if (v >= 1e6)
        snprintf(b, l, "%gM", v / 1e6);
    else if (v >= 1e3)
        snprintf(b, l, "%gk", v / 1e3);
    else
        snprintf(b, l, "%g", v);
}

/* One curve as a polyline of at most MAX_POINTS points. */
static void polyline(out_t *o, const uint64_t *v, const rp_curve_t *c, size_t nevents, double x0, double y0, double w,
                     double h, double ymax, const char *colour, const char *dash, double width)
{
    if (!c->nbuckets || !v)
        return;
    size_t merge = (c->nbuckets + MAX_POINTS - 1) / MAX_POINTS;
    put(o, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\"%s%s%s points=\"", colour, width,
        dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
    for (size_t i = 0; i < c->nbuckets; i += merge) {
        uint64_t m = 0;
        for (size_t j = i; j < i + merge && j < c->nbuckets; j++)
            m = v[j] > m ? v[j] : m;
        /* each point at the middle of its events */
        double ev = ((double)i + merge / 2.0) * (double)c->events_per_bucket;
        if (ev > (double)nevents)
            ev = (double)nevents;
        double x = x0 + (nevents ? ev / (double)nevents : 0.5) * w;
        double y = y0 + h - (double)m / ymax * h;
        put(o, "%s%.1f,%.1f", i ? " " : "", x, y);
        if (c->nbuckets == 1)
            put(o, " %.1f,%.1f", x0 + w, y); /* one bucket: a flat line across */
    }
    put(o, "\"/>\n");
}

static void panel(out_t *o, const rp_plot_panel_t *p, double top)
{
    double x0 = LEFT, y0 = top + TOP, w = WIDTH - LEFT - RIGHT, h = PANEL_H - TOP - BOTTOM;
    /* the y range */
    uint64_t max = 0;
    for (size_t k = 0; k < p->n; k++)
        for (size_t i = 0; i < p->res[k].curve.nbuckets; i++) {
            uint64_t a = p->res[k].curve.allocated[i], r = p->res[k].curve.reserved[i];
            max = a > max ? a : max;
            max = r > max ? r : max;
        }
    for (size_t i = 0; p->ref && i < p->ref->nbuckets; i++)
        max = p->ref->reserved[i] > max ? p->ref->reserved[i] : max;
    bool gib = max >= (uint64_t)2 << 30;
    double unit = gib ? 1073741824.0 : 1048576.0;
    double top_units = max ? (double)max / unit : 1.0;
    double ystep = nice_step(top_units, 6);
    double ymax_units = ceil(top_units / ystep) * ystep;
    if (ymax_units <= 0)
        ymax_units = ystep;
    double ymax = ymax_units * unit;
    double xstep = nice_step(p->nevents ? (double)p->nevents : 1.0, 7);

    char n[32];
    fmt_events(n, sizeof n, (double)p->nevents);
    put(o, "<text x=\"%d\" y=\"%.1f\" font-size=\"15\" font-weight=\"bold\">", LEFT, top + 24);
    put_text(o, p->title ? p->title : "");
    put(o, " (%zu events)</text>\n", p->nevents);
    /* grid, ticks and labels */
    for (double v = 0; v <= ymax_units + ystep / 2; v += ystep) {
        double y = y0 + h - v / ymax_units * h;
        put(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", x0, y, x0 + w, y);
        put(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n", x0 - 6, y + 4, v);
    }
    for (double v = 0; p->nevents && v <= (double)p->nevents; v += xstep) {
        double x = x0 + v / (double)p->nevents * w;
        fmt_events(n, sizeof n, v);
        put(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", x, y0, x, y0 + h);
        put(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", x, y0 + h + 16, n);
    }
    put(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n", x0, y0, w, h);
    put(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">event</text>\n", x0 + w / 2,
        y0 + h + 36);
    put(o,
        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">"
        "memory (%s)</text>\n",
        x0 - 55, y0 + h / 2, x0 - 55, y0 + h / 2, gib ? "GiB" : "MiB");
    /* curves and legend */
    double ly = y0 + 6;
    size_t colour = 0;
    for (size_t k = 0; k < p->n; k++) {
        const rp_curve_t *c = &p->res[k].curve;
        if (!c->nbuckets)
            continue;
        const char *col = palette[colour++ % (sizeof palette / sizeof palette[0])];
        polyline(o, c->reserved, c, p->nevents, x0, y0, w, h, ymax, col, NULL, 1.6);
        polyline(o, c->allocated, c, p->nevents, x0, y0, w, h, ymax, col, "5,3", 1.0);
        put(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n",
            x0 + w + 12, ly, x0 + w + 32, ly, col);
        put(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">", x0 + w + 38, ly + 4);
        put_text(o, p->cfgs[k].label ? p->cfgs[k].label : "");
        put(o, "</text>\n");
        ly += 18;
    }
    if (p->ref && p->ref->nbuckets) {
        polyline(o, p->ref->reserved, p->ref, p->nevents, x0, y0, w, h, ymax, "#000", "2,3", 1.4);
        put(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-dasharray=\"2,3\"/>\n",
            x0 + w + 12, ly, x0 + w + 32, ly);
        put(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">PyTorch reserved</text>\n", x0 + w + 38, ly + 4);
        ly += 18;
    }
    if (colour == 0 && !(p->ref && p->ref->nbuckets))
        put(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" text-anchor=\"middle\">no data</text>\n", x0 + w / 2,
            y0 + h / 2);
    else
        put(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#555\">solid: reserved; dashed: allocated</text>\n",
            x0 + w + 12, ly + 8);
}

char *rp_plot_render(const rp_plot_panel_t *panels, size_t npanels, size_t *len)
{
    out_t o = {0};
    size_t height = npanels ? npanels * PANEL_H : 120;
    put(&o,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%zu\" viewBox=\"0 0 %d %zu\" "
        "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
        WIDTH, height, WIDTH, height);
    if (npanels == 0)
        put(&o, "<text x=\"%d\" y=\"60\" font-size=\"14\" text-anchor=\"middle\">no data</text>\n", WIDTH / 2);
    for (size_t i = 0; i < npanels; i++)
        panel(&o, &panels[i], (double)(i * PANEL_H));
    put(&o, "</svg>\n");
    if (o.failed) {
        free(o.buf);
        return NULL;
    }
    *len = o.len;
    return o.buf;
}

int rp_plot_svg(const char *path, const rp_plot_panel_t *panels, size_t npanels, char *err, size_t errlen)
{
    size_t len;
    char *svg = rp_plot_render(panels, npanels, &len);
    if (!svg) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    int rc = st_write_file(path, svg, len, err, errlen);
    free(svg);
    return rc;
}
