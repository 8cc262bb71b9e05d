/*
 * What cucache-replay prints: a table per input with a column per
 * configuration (the reference models last), or one JSON object per line
 * for each input and configuration.  Sizes in the tables use PyTorch's
 * format (st_fmt_size); the JSON gives bytes as integers.
 */
#include <inttypes.h>
#include <string.h>

#include "replay.h"
#include "st.h"

enum {
    LABEL_W = 26, /* the row titles */
    COL_MIN = 12, /* a column's least width */
    COL_MAX = 28, /* longer configuration labels become [k] with a legend */
};


static void fmt_pct(char *buf, size_t len, double v)
{
    snprintf(buf, len, "%.1f%%", v * 100.0);
}

typedef void (*cell_fn)(char *buf, size_t len, const rp_input_t *in, const rp_config_t *cfg, const rp_result_t *r,
                        const rp_opts_t *opts);

/* A column's cell: the row's input, configuration, result and options in,
 * at most l bytes of text in b. */
#define COLUMN(name)                                                                                                   \
    static void name(char *b, size_t l, const rp_input_t *in, const rp_config_t *c, const rp_result_t *r,             \
                     const rp_opts_t *o)

/* Whether a column applies to a row: where it does not, its cell is "-". */
static bool shown(char *b, size_t l, bool applies)
{
    if (!applies)
        snprintf(b, l, "-");
    return applies;
}

COLUMN(c_peak_alloc)
{
    st_fmt_size(b, l, r->peak_allocated);
}

COLUMN(c_peak_res)
{
    st_fmt_size(b, l, r->peak_reserved);
}

COLUMN(c_vs_torch)
{
    if (!shown(b, l, in->ref_peak_reserved))
        return;
    double d = ((double)r->peak_reserved - (double)in->ref_peak_reserved) / (double)in->ref_peak_reserved;
    snprintf(b, l, "%+.1f%%", d * 100.0);
}

COLUMN(c_util)
{
    fmt_pct(b, l, r->utilization);
}

COLUMN(c_frag)
{
    if (shown(b, l, c->mode == RP_MODE_CORE))
        fmt_pct(b, l, r->frag_at_peak);
}

COLUMN(c_dev_allocs)
{
    if (shown(b, l, c->mode != RP_MODE_FLOOR))
        st_fmt_count(b, l, r->device_allocs);
}

COLUMN(c_dev_frees)
{
    if (shown(b, l, c->mode != RP_MODE_FLOOR))
        st_fmt_count(b, l, r->device_frees);
}

COLUMN(c_hits)
{
    if (shown(b, l, c->mode != RP_MODE_FLOOR))
        fmt_pct(b, l, r->allocs ? (double)r->hits / (double)r->allocs : 0.0);
}

COLUMN(c_ooms)
{
    if (shown(b, l, c->mode != RP_MODE_FLOOR))
        st_fmt_count(b, l, r->ooms);
}

COLUMN(c_fallbacks)
{
    if (shown(b, l, c->mode == RP_MODE_CORE))
        st_fmt_count(b, l, r->fallbacks);
}

COLUMN(c_first_oom)
{
    if (!shown(b, l, !(r->first_oom_event < 0)))
        return;
    char n[32], sz[32];
    st_fmt_count(n, sizeof n, (uint64_t)r->first_oom_event);
    st_fmt_size(sz, sizeof sz, r->first_oom_size);
    snprintf(b, l, "event %s: %s at %.3f s", n, sz, (double)r->first_oom_time_ns * 1e-9);
}

COLUMN(c_time)
{
    if (shown(b, l, r->events))
        snprintf(b, l, "%.0f ns", r->seconds * 1e9 / (double)r->events);
}

typedef struct row_s {
    const char *title;
    cell_fn cell;
    bool torch_only;
    bool fallback_only; /* shown when the replay models the runtime's fallback */
} row_t;

static const row_t rows[] = {
    {"peak allocated", c_peak_alloc, false, false},
    {"peak reserved", c_peak_res, false, false},
    {"  vs PyTorch's reserved", c_vs_torch, true, false},
    {"utilisation", c_util, false, false},
    {"fragmentation at peak", c_frag, false, false},
    {"device allocations", c_dev_allocs, false, false},
    {"device frees", c_dev_frees, false, false},
    {"cache hit rate", c_hits, false, false},
    {"OOMs at capacity", c_ooms, false, false},
    {"  served by the runtime", c_fallbacks, false, true},
    {"first OOM", c_first_oom, false, false},
    {"replay time per event", c_time, false, false},
};

void rp_print_table(FILE *out, const rp_input_t *in, const rp_config_t *cfgs, const rp_result_t *res, size_t n,
                    const rp_opts_t *opts)
{
    char a[64], b[64];
    st_fmt_count(a, sizeof a, in->nev);
    st_fmt_size(b, sizeof b, opts->capacity);
    fprintf(out, "%s (%s): %s events", in->name, rp_format_name(in->format), a);
    if (in->nprelude)
        fprintf(out, " (%zu of them blocks live before the recording)", in->nprelude);
    if (opts->dev_capacity) {
        fprintf(out, ", %d device%s, capacity as recorded (free at cucache's first use):", in->ndevices,
                in->ndevices == 1 ? "" : "s");
        for (int d = 0; d < in->ndevices && d < 64; d++) {
            if (opts->dev_capacity[d])
                st_fmt_size(b, sizeof b, opts->dev_capacity[d]);
            else
                st_fmt_size(b, sizeof b, opts->capacity);
            fprintf(out, "%s GPU %d %s", d ? "," : "", d, b);
            if (!opts->dev_capacity[d])
                fputs(" (not recorded)", out);
        }
        fputc('\n', out);
    } else {
        fprintf(out, ", %d device%s, capacity %s per device\n", in->ndevices, in->ndevices == 1 ? "" : "s", b);
    }
    /* imported frees are reusable at once: no model applies to them */
    if (opts->model_note)
        fprintf(out, "  device model: %s\n", opts->model_note);
    else if (in->format == RP_FORMAT_CUCACHE)
        fprintf(out, "  device model: %s\n",
                opts->busy ? "busy (queued work completes at the job's synchronisations; --busy)"
                           : "idle (queued work completes at once)");
    if (in->recorded_settings || in->recorded_ooms) {
        char f[64];
        st_fmt_count(a, sizeof a, in->recorded_ooms);
        st_fmt_count(f, sizeof f, in->recorded_fallbacks);
        fprintf(out, "  the recorded run: %s OOM%s", a, in->recorded_ooms == 1 ? "" : "s");
        if (in->format == RP_FORMAT_CUCACHE && in->recorded_settings)
            fprintf(out, ", %s served by the runtime's allocator after cucache's path failed, CUCACHE_CONF=%s", f,
                    in->recorded_conf[0] ? in->recorded_conf : "(unset)");
        fputc('\n', out);
    }
    if (in->recorded_ooms) {
        st_fmt_count(a, sizeof a, in->recorded_ooms);
        fprintf(out,
                "  failed requests (%s in the run): each is asked again at its moment in every column; the floor "
                "counts it; no cache and each setting fail there where it does not fit, and free it at once where it does\n",
                a);
    }
    if (in->notes[0])
        fprintf(out, "  note: %s\n", in->notes);

    /* column widths and heads */
    int width[64];
    char head[64][16];
    bool legend = false;
    if (n > 64)
        n = 64;
    for (size_t k = 0; k < n; k++) {
        size_t w = strlen(cfgs[k].label);
        if (w > COL_MAX) {
            snprintf(head[k], sizeof head[k], "[%zu]", k + 1);
            w = strlen(head[k]);
            legend = true;
        } else {
            head[k][0] = '\0';
        }
        width[k] = (int)(w < COL_MIN ? COL_MIN : w);
    }
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        for (size_t k = 0; k < n; k++) {
            char cell[64];
            rows[i].cell(cell, sizeof cell, in, &cfgs[k], &res[k], opts);
            if ((int)strlen(cell) > width[k])
                width[k] = (int)strlen(cell);
        }
    fprintf(out, "  %-*s", LABEL_W, "");
    for (size_t k = 0; k < n; k++)
        fprintf(out, "  %*s", width[k], head[k][0] ? head[k] : cfgs[k].label);
    fputc('\n', out);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if ((rows[i].torch_only && !in->ref_peak_reserved) || (rows[i].fallback_only && !opts->fallback))
            continue;
        fprintf(out, "  %-*s", LABEL_W, rows[i].title);
        for (size_t k = 0; k < n; k++) {
            char cell[64];
            rows[i].cell(cell, sizeof cell, in, &cfgs[k], &res[k], opts);
            fprintf(out, "  %*s", width[k], cell);
        }
        fputc('\n', out);
    }
    if (in->ref_peak_reserved) {
        st_fmt_size(a, sizeof a, in->ref_peak_reserved);
        fprintf(out, "  PyTorch's own peak reserved (from the snapshot's segments): %s\n", a);
    }
    if (legend)
        for (size_t k = 0; k < n; k++)
            if (head[k][0])
                fprintf(out, "  %s = %s\n", head[k], cfgs[k].label);
    for (size_t k = 0; k < n; k++) {
        if (!res[k].reserved_covers)
            fprintf(out, "  warning: %s: reserved fell below allocated during the replay (a core defect)\n",
                    cfgs[k].label);
        if (!res[k].stats_agree)
            fprintf(out, "  warning: %s: the replay's peaks differ from the core's own statistics (a defect)\n",
                    cfgs[k].label);
        if (res[k].skipped && cfgs[k].mode == RP_MODE_CORE)
            fprintf(out, "  %s: %" PRIu64 " events not applied (frees of allocations the trace lacks, graph nodes)\n",
                    cfgs[k].label, res[k].skipped);
    }
    fputc('\n', out);
}

/* A JSON string (quotes, backslashes and control characters escaped). */
static void json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static const char *mode_name(rp_mode_t m)
{
    return m == RP_MODE_CORE ? "cucache" : m == RP_MODE_NOCACHE ? "no cache" : "floor";
}

void rp_print_json(FILE *out, const rp_input_t *in, const rp_config_t *cfg, const rp_result_t *r,
                   const rp_opts_t *opts)
{
    fputs("{\"trace\": ", out);
    json_str(out, in->name);
    fputs(", \"format\": ", out);
    json_str(out, rp_format_name(in->format));
    fputs(", \"config\": ", out);
    json_str(out, cfg->label);
    fputs(", \"model\": ", out);
    json_str(out, mode_name(cfg->mode));
    fprintf(out,
            ", \"device_model\": \"%s\", \"capacity\": %" PRIu64 ", \"events\": %" PRIu64
            ", \"prelude\": %zu, \"devices\": %d"
            ", \"peak_allocated\": %" PRIu64 ", \"peak_reserved\": %" PRIu64 ", \"peak_requested\": %" PRIu64
            ", \"utilization\": %.6f, \"fragmentation_at_peak\": %.6f, \"peak_event\": %zu"
            ", \"device_allocs\": %" PRIu64 ", \"device_frees\": %" PRIu64 ", \"allocs\": %" PRIu64
            ", \"cache_hits\": %" PRIu64 ", \"ooms\": %" PRIu64 ", \"fallbacks\": %" PRIu64,
            opts->busy ? "busy" : "idle", opts->capacity, r->events, in->nprelude, in->ndevices, r->peak_allocated,
            r->peak_reserved, r->peak_requested, r->utilization, r->frag_at_peak, r->peak_event, r->device_allocs,
            r->device_frees, r->allocs, r->hits, r->ooms, r->fallbacks);
    fputs(", \"device_model_note\": ", out);
    if (opts->model_note)
        json_str(out, opts->model_note);
    else
        fputs("null", out);
    fprintf(out, ", \"recorded_ooms\": %" PRIu64 ", \"recorded_fallbacks\": %" PRIu64 ", \"recorded_conf\": ",
            in->recorded_ooms, in->recorded_fallbacks);
    if (in->recorded_settings)
        json_str(out, in->recorded_conf);
    else
        fputs("null", out);
    if (r->first_oom_event >= 0)
        fprintf(out, ", \"first_oom_event\": %lld, \"first_oom_size\": %" PRIu64 ", \"first_oom_time_ns\": %" PRIu64,
                r->first_oom_event, r->first_oom_size, r->first_oom_time_ns);
    else
        fputs(", \"first_oom_event\": null", out);
    fprintf(out,
            ", \"vmm_reserves\": %" PRIu64 ", \"vmm_map_calls\": %" PRIu64 ", \"vmm_map_pages\": %" PRIu64
            ", \"vmm_unmap_calls\": %" PRIu64 ", \"vmm_unmap_bytes\": %" PRIu64 ", \"vmm_alias_calls\": %" PRIu64,
            r->vmm_reserves, r->vmm_map_calls, r->vmm_map_pages, r->vmm_unmap_calls, r->vmm_unmap_bytes,
            r->vmm_alias_calls);
    fprintf(out, ", \"skipped\": %" PRIu64 ", \"reserved_covers_allocated\": %s, \"stats_agree\": %s, \"seconds\": %.6f",
            r->skipped, r->reserved_covers ? "true" : "false", r->stats_agree ? "true" : "false", r->seconds);
    if (in->format == RP_FORMAT_TORCH)
        fprintf(out, ", \"torch_peak_reserved\": %" PRIu64, in->ref_peak_reserved);
    fputs(", \"per_device\": [", out);
    for (int d = 0; d < in->ndevices && d < 64; d++)
        fprintf(out,
                "%s{\"device\": %d, \"capacity\": %" PRIu64 ", \"peak_allocated\": %" PRIu64
                ", \"peak_reserved\": %" PRIu64 ", \"ooms\": %" PRIu64 ", \"fallbacks\": %" PRIu64 "}",
                d ? ", " : "", d, opts->dev_capacity && opts->dev_capacity[d] ? opts->dev_capacity[d] : opts->capacity,
                r->dev_peak_allocated[d], r->dev_peak_reserved[d], r->dev_ooms[d], r->dev_fallbacks[d]);
    fputc(']', out);
    fputs(", \"notes\": ", out);
    json_str(out, in->notes);
    fputs("}\n", out);
}

void rp_print_events(FILE *out, const rp_input_t *in)
{
    fprintf(out, "# %s (%s): %zu events, %zu of them live before the recording\n", in->name,
            rp_format_name(in->format), in->nev, in->nprelude);
    fprintf(out, "# index time_ns tid device kind api stream addr size%s\n", in->ref_reserved ? " torch_reserved" : "");
    for (size_t i = 0; i < in->nev; i++) {
        const trace_event_t *e = &in->ev[i];
        fprintf(out, "%zu %" PRIu64 " %u %d %s %s 0x%" PRIx64 " 0x%" PRIx64 " %" PRIu64, i, e->time_ns, e->tid,
                e->device, trace_kind_name(e->kind), trace_api_name(e->api), e->stream, e->addr, e->size);
        if (in->ref_reserved)
            fprintf(out, " %" PRIu64, in->ref_reserved[i]);
        fputc('\n', out);
    }
}
