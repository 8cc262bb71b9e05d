/*
 * cucache-replay --plot: an SVG a person can read.  One panel per trace,
 * stacked; in each, per configuration its reserved bytes (solid) and
 * allocated bytes (dashed) over the event timeline in one colour of a
 * fixed palette of eight (cycling), and PyTorch's own reserved curve
 * (black, dotted) when the trace has one.
 *
 *   - Curves come bucketed (rp_curve_t: the highest value in each bucket).
 *     Beyond MAX_POINTS buckets they are merged by maximum: the file stays
 *     small and a peak is never lost.  A point sits at the middle of its
 *     events; a single point is drawn as a flat segment across them.  A
 *     configuration without a curve is left out, legend included.
 *   - Axes: bytes on y in the binary unit of the panel's maximum ("memory
 *     (GiB)"), from 0 to the first tick above it (to 1 MiB when all is 0);
 *     events on x, to the last event (or to the next tick when that alone
 *     gives a fifth).  5 to 8 ticks, steps of 1, 2 or 5 x 10^k; event ticks
 *     read 800, 1.5k, 2M.
 *   - The legend, right of the plot: the two line styles once, then a
 *     swatch and the label per configuration, wrapped; a panel grows
 *     taller when its legend needs it.
 *   - Text is escaped; what is not UTF-8 (file names are bytes) and control
 *     characters become U+FFFD, so the file parses whatever the names.
 *     Coordinates go through fin(): one decimal, never nan or inf, in the C
 *     locale (the tool never calls setlocale).
 *   - The text grows in one buffer (core/vec.h); any failed allocation and
 *     rp_plot_render returns NULL.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "hostalloc.h"
#include "replay.h"
#include "st.h"
#include "vec.h"

enum {
    WIDTH = 1000,      /* the SVG's width */
    PANEL_H = 420,     /* a panel's height, unless its legend needs more */
    LEFT = 80,         /* the margins around a panel's plot area */
    RIGHT = 256,       /* the legend's column */
    TOP = 46,          /* the title */
    BOTTOM = 54,       /* the event ticks and the axis label */
    EMPTY_H = 120,     /* the whole SVG when there is no panel */
    MAX_POINTS = 2000, /* per polyline */
    TITLE_CHARS = 90,
    LEGEND_CHARS = 32, /* per legend line */
    LEGEND_LINES = 3,  /* per label */
    LINE_H = 14,       /* a legend line */
    ITEM_GAP = 6,      /* between legend entries */
    KEY_H = 2 * 16 + 8 /* the two line styles */
};

#define NPALETTE 8
static const char *const palette[NPALETTE] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                              "#9467bd", "#8c564b", "#e377c2", "#17becf"};
static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */
static const char ellipsis[] = "\xE2\x80\xA6";    /* U+2026 */

typedef struct out_s {
    char *buf;
    size_t len, cap;
    bool failed; /* an allocation failed: the text is incomplete */
} out_t;

/* One axis: ticks at i * step for i in 0 .. n; the axis runs from 0 to end. */
typedef struct axis_s {
    double step, end;
    int n;
} axis_t;

/* Where a panel's plot area is and what it shows. */
typedef struct area_s {
    double x0, y0, w, h;
    double events; /* the last event drawn (the curves end there) */
    double xend;   /* the x axis's end, in events */
    double yend;   /* the y axis's end, in bytes */
} area_t;

/* A legend label's line: n bytes at s. */
typedef struct line_s {
    const char *s;
    size_t n;
} line_t;

/* Room for `more` bytes and a NUL; false (and failed) when out of memory. */
static bool grow(out_t *o, size_t more)
{
    if (!o->failed && (more > SIZE_MAX - 1 - o->len || !vec_reserve((void **)&o->buf, &o->cap, o->len + more + 1, 1)))
        o->failed = true;
    return !o->failed;
}

/* printf onto the text. */
__attribute__((format(printf, 2, 3))) static void put(out_t *o, const char *fmt, ...)
{
    size_t more = 256;
    while (grow(o, more)) {
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
        more = (size_t)n;
    }
}

/* A number that can be printed: nan and inf become 0. */
static double fin(double v)
{
    return isfinite(v) ? v : 0.0;
}

/* The length of the UTF-8 sequence at s (n bytes left) when it is one XML
 * character, else 0 (a stray byte, an overlong form, a surrogate, a
 * control character, U+FFFE or U+FFFF). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return c >= 0x20 && c != 0x7f ? 1 : 0;
    size_t k = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (k == 0 || k > n)
        return 0;
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    for (size_t i = 1; i < k; i++, lo = 0x80, hi = 0xBF)
        if (s[i] < lo || s[i] > hi)
            return 0;
    return c == 0xEF && s[1] == 0xBF && s[2] >= 0xBE ? 0 : k;
}

/* n bytes of text, escaped for XML; what is not a character becomes U+FFFD. */
static void put_text(out_t *o, const char *s, size_t n)
{
    static const char *const entity[128] = {
        ['&'] = "&amp;", ['<'] = "&lt;", ['>'] = "&gt;", ['"'] = "&quot;", ['\''] = "&apos;"};
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0, k; i < n; i += k ? k : 1) {
        k = utf8_len(u + i, n - i);
        if (k == 1 && entity[u[i]])
            put(o, "%s", entity[u[i]]);
        else
            put(o, "%.*s", k ? (int)k : 3, k ? s + i : replacement);
    }
}

/* The bytes of the first `chars` characters of s (a byte that is not
 * UTF-8 counts as one). */
static size_t clip(const char *s, size_t chars)
{
    size_t n = 0, len = strlen(s);
    for (; chars && n < len; chars--) {
        size_t k = utf8_len((const unsigned char *)s + n, len - n);
        n += k ? k : 1;
    }
    return n;
}

/* A legend label cut into lines: after the last comma or space in reach,
 * else after the last ':', '_', '/', '=' or '-', else at LEGEND_CHARS;
 * *more when the label did not fit.  At least one line. */
static size_t wrap(const char *s, line_t lines[LEGEND_LINES], bool *more)
{
    size_t k = 0;
    *more = false;
    lines[0] = (line_t){s, 0};
    for (; *s; k++) {
        if (k == LEGEND_LINES) {
            *more = true;
            break;
        }
        size_t n = clip(s, LEGEND_CHARS), b = 0;
        for (size_t t = 0; s[n] && !b && t < 2; t++)
            for (b = n; b > 0 && !strchr(t ? ":_/=-" : ", ", s[b - 1]); b--)
                ;
        lines[k] = (line_t){s, b ? b : n};
        for (s += lines[k].n; *s == ' '; s++)
            ;
    }
    return k ? k : 1;
}

/* v with thousands separators: 1,234,567. */
static void put_thousands(out_t *o, uint64_t v)
{
    if (v < 1000) {
        put(o, "%u", (unsigned)v);
        return;
    }
    put_thousands(o, v / 1000);
    put(o, ",%03u", (unsigned)(v % 1000));
}

/* An event tick: 800, 1.5k, 20k, 2M, 1.5G. */
static void fmt_events(char *b, size_t len, double v)
{
    int i = 0;
    for (; i < 3 && v >= 1e3; i++)
        v /= 1e3;
    snprintf(b, len, "%g%.*s", v, i > 0, &" kMG"[i]);
}

/* The ticks over [0, top] (top > 0): the least step of 1, 2 or 5 x 10^k
 * from `first` up leaving at most 7 intervals, the axis ending at the
 * first tick above top (`above`) or at top; taken on to a fourth interval
 * when the step had to jump by 2.5 and left only three. */
static axis_t nice_axis(double top, double first, bool above)
{
    static const double mant[3] = {1, 2, 5};
    axis_t a = {.step = first};
    double k = 0;
    for (int i = 0; i < 66; i++) {
        a.step = first * mant[i % 3] * pow(10, i / 3);
        k = floor(top / a.step + 1e-9) + (above ? 1 : 0);
        if (k <= 7)
            break;
    }
    bool longer = k < 4 && top >= 4 * first;
    a.n = longer ? 4 : (int)k;
    a.end = above || longer ? a.n * a.step : top;
    return a;
}

/* A configuration's curve that can be drawn; PyTorch's (k == p->n). */
static const rp_curve_t *drawn(const rp_plot_panel_t *p, size_t k)
{
    const rp_curve_t *c = k < p->n ? (p->res ? &p->res[k].curve : NULL) : p->ref;
    return c && c->nbuckets && c->reserved && (k == p->n || c->allocated) ? c : NULL;
}

/* A configuration's label ("" when none). */
static const char *label(const rp_plot_panel_t *p, size_t k)
{
    return p->cfgs && p->cfgs[k].label ? p->cfgs[k].label : "";
}

/* The plot area's height for p: PANEL_H's, or what its legend needs. */
static int area_height(const rp_plot_panel_t *p)
{
    int h = 10 + KEY_H;
    line_t lines[LEGEND_LINES];
    bool more;
    for (size_t k = 0; k <= p->n; k++)
        if (drawn(p, k))
            h += (k < p->n ? (int)wrap(label(p, k), lines, &more) : 1) * LINE_H + ITEM_GAP;
    return h > PANEL_H - TOP - BOTTOM ? h : PANEL_H - TOP - BOTTOM;
}

/* The x of event e in the area. */
static double ax(const area_t *a, double e)
{
    return fin(a->x0 + a->w * e / a->xend);
}

/* The y of `bytes` in the area. */
static double ay(const area_t *a, double bytes)
{
    return fin(a->y0 + a->h - a->h * bytes / a->yend);
}

/* One series of a curve as one polyline, buckets merged by maximum down
 * to at most MAX_POINTS points. */
static void polyline(out_t *o, const area_t *a, const rp_curve_t *c, const uint64_t *v, const char *style)
{
    size_t merge = (c->nbuckets + MAX_POINTS - 1) / MAX_POINTS;
    double per = c->events_per_bucket ? (double)c->events_per_bucket : 1.0;
    put(o, "<polyline fill=\"none\" stroke-linejoin=\"round\" %s points=\"", style);
    for (size_t i = 0; i < c->nbuckets; i += merge) {
        size_t end = c->nbuckets - i > merge ? i + merge : c->nbuckets;
        uint64_t m = 0;
        for (size_t j = i; j < end; j++)
            m = v[j] > m ? v[j] : m;
        double e0 = fmin((double)i * per, a->events), e1 = fmin((double)end * per, a->events);
        double y = ay(a, (double)m);
        if (i == 0 && end == c->nbuckets) /* a single point: a flat segment */
            put(o, "%.1f,%.1f %.1f,%.1f", ax(a, e0), y, ax(a, e1), y);
        else
            put(o, "%s%.1f,%.1f", i ? " " : "", ax(a, (e0 + e1) / 2), y);
    }
    put(o, "\"/>\n");
}

/* A legend entry at (x, y): a sample of the line, then text lines. */
static void legend(out_t *o, double x, double y, const char *style, const line_t *lines, size_t n, bool more)
{
    put(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" %s/>\n", x, y, x + 22, y, style);
    for (size_t j = 0; j < n; j++) {
        put(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">", x + 28, y + 4 + (double)j * LINE_H);
        put_text(o, lines[j].s, lines[j].n);
        put(o, "%s</text>\n", more && j + 1 == n ? ellipsis : "");
    }
}

/* The plot area's border. */
static void frame(out_t *o, const area_t *a)
{
    put(o,
        "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n",
        a->x0, a->y0, a->w, a->h);
}

/* The grid, the frame, the ticks and the axis labels. */
static void axes(out_t *o, const area_t *a, axis_t xa, axis_t ya, const char *unit)
{
    char b[48];
    for (int i = 0; i <= ya.n; i++) {
        double y = ay(a, a->yend * i / ya.n);
        put(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", a->x0, y, a->x0 + a->w,
            y);
        put(o, "<text class=\"ytick\" x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n",
            a->x0 - 6, y + 4, fin(i * ya.step));
    }
    for (int i = 0; i <= xa.n; i++) {
        double x = ax(a, i * xa.step);
        fmt_events(b, sizeof b, fin(i * xa.step));
        put(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", x, a->y0, x,
            a->y0 + a->h);
        put(o, "<text class=\"xtick\" x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", x,
            a->y0 + a->h + 16, b);
    }
    put(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">event</text>\n", a->x0 + a->w / 2,
        a->y0 + a->h + 40);
    frame(o, a);
    double lx = a->x0 - 58, ly = a->y0 + a->h / 2;
    put(o,
        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">"
        "memory (%s)</text>\n",
        lx, ly, lx, ly, unit);
}

/* One panel with its top edge at `top`; returns its height. */
static int panel(out_t *o, const rp_plot_panel_t *p, int top)
{
    area_t a = {.x0 = LEFT, .y0 = top + TOP, .w = WIDTH - LEFT - RIGHT, .h = area_height(p)};
    const char *title = p->title ? p->title : "";
    size_t tn = clip(title, TITLE_CHARS);
    put(o, "<text x=\"%d\" y=\"%d\" font-size=\"15\" font-weight=\"bold\">", LEFT, top + 28);
    put_text(o, title, tn);
    put(o, "%s (", title[tn] ? ellipsis : "");
    put_thousands(o, p->nevents);
    put(o, " %s)</text>\n", p->nevents == 1 ? "event" : "events");

    /* the data's extent: the last event and the highest value */
    uint64_t max = 0;
    double span = 0; /* 0: nothing to draw */
    for (size_t k = 0; k <= p->n; k++) {
        const rp_curve_t *c = drawn(p, k);
        if (!c)
            continue;
        span = fmax(span, (double)c->nbuckets * (double)(c->events_per_bucket ? c->events_per_bucket : 1));
        for (size_t i = 0; i < c->nbuckets; i++) {
            max = c->reserved[i] > max ? c->reserved[i] : max;
            max = k < p->n && c->allocated[i] > max ? c->allocated[i] : max;
        }
    }
    if (span == 0) {
        frame(o, &a);
        put(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" fill=\"#666\" text-anchor=\"middle\">no data</text>\n",
            a.x0 + a.w / 2, a.y0 + a.h / 2);
        return TOP + (int)a.h + BOTTOM;
    }
    a.events = p->nevents ? (double)p->nevents : span;

    /* the axes: the unit of the maximum; 0 .. 1 MiB when all is 0 */
    int u = 0;
    while (u + 1 < (int)(sizeof units / sizeof units[0]) && max >> (10 * (u + 1)))
        u++;
    axis_t ya = {.step = 0.2, .end = 1, .n = 5};
    if (max)
        ya = nice_axis((double)max / ldexp(1, 10 * u), 0.1, true);
    else
        u = 2;
    axis_t xa = nice_axis(a.events, 1, false);
    a.xend = xa.end, a.yend = ya.end * ldexp(1, 10 * u);
    axes(o, &a, xa, ya, units[u]);

    /* the curves, allocated under reserved, PyTorch's on top; the legend */
    double lx = a.x0 + a.w + 16, ly = a.y0 + 10;
    legend(o, lx, ly, "stroke=\"#555\" stroke-width=\"1.8\"", &(line_t){"reserved", 8}, 1, false);
    legend(o, lx, ly + 16, "stroke=\"#555\" stroke-width=\"1.2\" stroke-dasharray=\"6,3\"", &(line_t){"allocated", 9},
           1, false);
    ly += KEY_H;
    char style[96];
    size_t colour = 0;
    for (size_t k = 0; k < p->n; k++) {
        const rp_curve_t *c = drawn(p, k);
        if (!c)
            continue;
        const char *col = palette[colour++ % NPALETTE];
        snprintf(style, sizeof style, "stroke=\"%s\" stroke-width=\"1.2\" stroke-dasharray=\"6,3\"", col);
        polyline(o, &a, c, c->allocated, style);
        snprintf(style, sizeof style, "stroke=\"%s\" stroke-width=\"1.8\"", col);
        polyline(o, &a, c, c->reserved, style);
        snprintf(style, sizeof style, "stroke=\"%s\" stroke-width=\"3\"", col);
        line_t lines[LEGEND_LINES];
        bool more;
        size_t nl = wrap(label(p, k), lines, &more);
        legend(o, lx, ly, style, lines, nl, more);
        ly += (double)nl * LINE_H + ITEM_GAP;
    }
    if (drawn(p, p->n)) {
        const char *dotted = "stroke=\"#000\" stroke-width=\"1.6\" stroke-dasharray=\"2,3\"";
        polyline(o, &a, p->ref, p->ref->reserved, dotted);
        legend(o, lx, ly, dotted, &(line_t){"PyTorch reserved", 16}, 1, false);
    }
    return TOP + (int)a.h + BOTTOM;
}

char *rp_plot_render(const rp_plot_panel_t *panels, size_t npanels, size_t *len)
{
    out_t o = {0};
    if (!panels)
        npanels = 0;
    size_t height = npanels ? 0 : EMPTY_H;
    for (size_t i = 0; i < npanels; i++)
        height += (size_t)(TOP + area_height(&panels[i]) + BOTTOM);
    put(&o,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%zu\" viewBox=\"0 0 %d %zu\" "
        "font-family=\"sans-serif\">\n<rect width=\"%d\" height=\"%zu\" fill=\"#fff\"/>\n",
        WIDTH, height, WIDTH, height, WIDTH, height);
    if (npanels == 0)
        put(&o, "<text x=\"%d\" y=\"%d\" font-size=\"14\" fill=\"#666\" text-anchor=\"middle\">no data</text>\n",
            WIDTH / 2, EMPTY_H / 2);
    int top = 0;
    for (size_t i = 0; i < npanels; i++) {
        if (i)
            put(&o, "<line x1=\"0\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ccc\"/>\n", top, WIDTH, top);
        top += panel(&o, &panels[i], top);
    }
    put(&o, "</svg>\n");
    if (o.failed) {
        hostalloc_free(o.buf);
        return NULL;
    }
    if (len)
        *len = o.len;
    return o.buf;
}

int rp_plot_svg(const char *path, const rp_plot_panel_t *panels, size_t npanels, char *err, size_t errlen)
{
    size_t len;
    char *svg = rp_plot_render(panels, npanels, &len);
    if (!svg) {
        if (err && errlen)
            snprintf(err, errlen, "out of host memory");
        return -1;
    }
    int rc = st_write_file(path, svg, len, err, errlen);
    hostalloc_free(svg);
    return rc;
}
