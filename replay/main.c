/*
 * cucache-replay: what would another allocator setting have done on this
 * job?  Replays each TRACE (a cucache trace, a PyTorch snapshot pickle or
 * an RMM log; the format is detected) through the real core once per
 * --conf, next to two references: "no cache" (every allocation from the
 * device) and the floor (the live bytes alone).  replay.h is the map.
 *
 * Exit status: 0; 1 when an input could not be read (the others are still
 * replayed); 2 for a bad command line or configuration.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "core.h"
#include "replay.h"
#include "st.h"

#ifndef CUCACHE_VERSION
#define CUCACHE_VERSION "unknown"
#endif

enum { MAX_CONFS = 32, PLOT_BUCKETS = 1200 };

static int by_peak(const void *a, const void *b, void *res)
{
    const rp_result_t *r = res;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    bool fx = r[x].ooms == 0, fy = r[y].ooms == 0;
    if (fx != fy)
        return fx ? -1 : 1;
    if (fx && r[x].peak_reserved != r[y].peak_reserved)
        return r[x].peak_reserved < r[y].peak_reserved ? -1 : 1;
    if (!fx && r[x].ooms != r[y].ooms)
        return r[x].ooms < r[y].ooms ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* --fit: the table of settings, those that fit first. */
static void print_fit(const rp_input_t *in, const rp_config_t *cfgs, const rp_result_t *res, size_t n,
                      uint64_t capacity)
{
    size_t order[MAX_CONFS + 2];
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, n, sizeof *order, by_peak, (void *)res);
    char cap[32];
    st_fmt_size(cap, sizeof cap, capacity);
    size_t nfit = 0;
    for (size_t i = 0; i < n; i++)
        nfit += res[i].ooms == 0;
    printf("%s (%s): %zu events; %zu of %zu settings fit in %s per device%s\n", in->name, rp_format_name(in->format),
           in->nev, nfit, n, cap, nfit ? ", best first:" : "");
    for (size_t i = 0; i < n; i++) {
        const rp_result_t *r = &res[order[i]];
        const rp_config_t *c = &cfgs[order[i]];
        char peak[32], text[1200];
        st_fmt_size(peak, sizeof peak, r->peak_reserved);
        snprintf(text, sizeof text, "CUCACHE_CONF=%s", c->conf_text[0] ? c->conf_text : "(the defaults)");
        if (r->ooms == 0)
            printf("  fits      %-60s peak reserved %s\n", text, peak);
        else
            printf("  no        %-60s %llu OOM%s, the first at event %lld (%.2f MiB)\n", text,
                   (unsigned long long)r->ooms, r->ooms == 1 ? "" : "s", r->first_oom_event,
                   (double)r->first_oom_size / (1 << 20));
    }
}

static void usage(FILE *f)
{
    fputs("usage: cucache-replay [options] TRACE...\n"
          "\n"
          "Replays what a job asked of the allocator through cucache's core, once per\n"
          "configuration, and compares peak memory, fragmentation and device calls.\n"
          "TRACE: a cucache trace (CUCACHE_TRACE, cucache-run --trace), a PyTorch memory\n"
          "snapshot (torch.cuda.memory._dump_snapshot) or an RMM logging_resource_adaptor\n"
          "CSV; the format is detected.\n"
          "\n"
          "options:\n"
          "  --conf K:V,...   a configuration in CUCACHE_CONF syntax (repeat for more;\n"
          "                   'default' or '' is the defaults; 'help' lists the keys);\n"
          "                   without --conf: the defaults\n"
          "  --capacity SIZE  device memory per device (512M, 40G, ...; default: what a\n"
          "                   cucache trace recorded as free at each device's first use,\n"
          "                   else 80G)\n"
          "  --json           one JSON object per line per trace and configuration\n"
          "  --plot FILE.svg  allocated and reserved over the events, per configuration\n"
          "  --no-reference   leave out the 'no cache' and 'floor' columns\n"
          "  --preload        replay a PyTorch snapshot's or an RMM log's allocations and\n"
          "                   frees as cudaMalloc and cudaFree: what cucache serves when\n"
          "                   cucache-run runs the job (the framework's cache off), the\n"
          "                   runtime's allocator serving what cucache's path cannot\n"
          "  --dump           print each trace's events as text (what a replay reads) and\n"
          "                   replay nothing\n"
          "  --busy           queued work completes only at the job's synchronisations;\n"
          "                   cucache traces only\n"
          "  --idle           queued work completes at once, as on an idle GPU.  Default\n"
          "                   for a cucache trace that records its run: the model under\n"
          "                   which its own settings reproduce the run's failures; else idle\n"
          "  --fit SIZE       the settings under which each trace fits in SIZE per device:\n"
          "                   the first --conf (or the defaults) and each candidate the OOM\n"
          "                   report's what-if tries on top of it, replayed at that\n"
          "                   capacity, those with no OOM first by peak reserved; exit 3\n"
          "                   when none fits\n"
          "  --version, --help\n",
          f);
}

/* A size with an optional binary unit: 4096, 512K, 40G, 1.5T, 2GiB, 2Ki (a
 * fraction of a byte is dropped); at least one byte, at most 1024T. */
static conf_num_t parse_size(const char *s, uint64_t *out)
{
    uint64_t v;
    conf_num_t rc = conf_read_size(s, strlen(s), 1, CONF_SIZE_ROUND_DOWN | CONF_SIZE_LAX_I, &v);
    if (rc == CONF_NUM_OK && v == 0)
        return CONF_NUM_BAD;
    if (rc == CONF_NUM_OK)
        *out = v;
    return rc;
}

static void help_line(void *ctx, const char *line)
{
    fprintf(ctx, "%s\n", line);
}

/* A progress bar on a terminal, for long traces. */
typedef struct progress_s {
    const char *name, *label;
} progress_t;

static void progress(void *ctx, size_t done, size_t total)
{
    const progress_t *p = ctx;
    int pct = (int)(100.0 * (double)done / (double)total);
    char bar[31];
    int fill = pct * 30 / 100;
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    fprintf(stderr, "\r%s [%s] %s %3d%%", p->name, p->label, bar, pct);
    fflush(stderr);
}

/* PyTorch's reserved curve bucketed like the replay's curves. */
static int ref_curve(const rp_input_t *in, const rp_curve_t *like, rp_curve_t *out)
{
    *out = (rp_curve_t){.nbuckets = like->nbuckets, .events_per_bucket = like->events_per_bucket};
    out->reserved = calloc(like->nbuckets ? like->nbuckets : 1, sizeof *out->reserved);
    if (!out->reserved)
        return -1;
    for (size_t i = 0; i < in->nev && like->nbuckets; i++) {
        size_t b = i / like->events_per_bucket;
        if (b < out->nbuckets && in->ref_reserved[i] > out->reserved[b])
            out->reserved[b] = in->ref_reserved[i];
    }
    return 0;
}

/* The file name without its directories, for plot titles. */
static const char *basename_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

typedef struct done_s {
    rp_input_t in;
    rp_result_t *res;
    rp_curve_t ref;
    rp_opts_t opts;       /* this trace's: capacity and device model */
    char model_note[768]; /* why that device model */
    bool ok;
} done_t;

/* Whether the trace recorded any device's memory (TRACE_DEVICE). */
static bool recorded_capacity(const rp_input_t *in)
{
    for (int k = 0; k < 64; k++)
        if (in->recorded_free[k])
            return true;
    return false;
}

/* The failures of a replay as the recorded run counts them. */
static bool reproduces(const rp_input_t *in, const rp_result_t *r)
{
    return r->ooms == in->recorded_ooms && r->fallbacks == in->recorded_fallbacks;
}

static void failures_text(char *buf, size_t len, uint64_t ooms, uint64_t fallbacks)
{
    snprintf(buf, len, "%llu OOM%s, %llu served by the runtime", (unsigned long long)ooms, ooms == 1 ? "" : "s",
             (unsigned long long)fallbacks);
}

/* A cucache trace that records its run, with no --busy or --idle given:
 * the device model under which the run's own settings, at its recorded
 * capacity, fail as the run did (idle tried first).  0, or -1 with err. */
static int choose_model(done_t *d, char *err, size_t errlen)
{
    const rp_input_t *in = &d->in;
    rp_config_t rec = {.label = "recorded", .mode = RP_MODE_CORE, .conf_text = in->recorded_conf};
    conf_defaults(&rec.conf);
    char why[256];
    if (in->recorded_conf[0] && conf_parse(&rec.conf, in->recorded_conf, why, sizeof why) != 0) {
        snprintf(d->model_note, sizeof d->model_note, "idle (the recorded CUCACHE_CONF does not parse here: %s)", why);
        return 0;
    }
    char want[96], got[2][96];
    failures_text(want, sizeof want, in->recorded_ooms, in->recorded_fallbacks);
    /* the run as it was: its device's memory and the runtime's fallback,
     * whatever --capacity or --fit then replays at */
    for (int busy = 0; busy < 2; busy++) {
        rp_opts_t o = d->opts;
        o.busy = busy;
        o.fallback = true;
        if (recorded_capacity(in))
            o.dev_capacity = in->recorded_free;
        o.curve_buckets = 0;
        o.progress = NULL;
        rp_result_t r;
        if (rp_replay(in, &rec, &o, &r, err, errlen) != 0)
            return -1;
        failures_text(got[busy], sizeof got[busy], r.ooms, r.fallbacks);
        bool same = reproduces(in, &r);
        rp_result_free(&r);
        if (same) {
            d->opts.busy = busy;
            snprintf(d->model_note, sizeof d->model_note,
                     "%s: the recorded settings replayed under it fail as the run did (%s)%s%s", busy ? "busy" : "idle",
                     want, busy ? "; idle gives " : "", busy ? got[0] : "");
            return 0;
        }
    }
    d->opts.busy = false;
    snprintf(d->model_note, sizeof d->model_note,
             "idle, though neither model reproduces the run (%s): idle gives %s, busy %s", want, got[0], got[1]);
    return 0;
}

int main(int argc, char **argv)
{
    rp_config_t cfgs[MAX_CONFS + 2];
    size_t ncfg = 0;
    rp_opts_t opts = {.capacity = (uint64_t)80 << 30};
    const char *plot = NULL;
    bool json = false, reference = true, dump = false, fit = false, model_given = false, capacity_given = false;
    bool preload = false;
    static char fit_text[MAX_CONFS][1200];
    char err[1024];
    /* the traces are gathered at the front of argv: slot 1 + ntraces is
     * never beyond the argument being read */
    char **traces = argv + 1;
    int ntraces = 0;
    bool dashdash = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (dashdash || a[0] != '-' || a[1] == '\0') {
            traces[ntraces++] = argv[i]; /* options and traces may mix; "--" ends the options */
        } else if (strcmp(a, "--") == 0) {
            dashdash = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--version") == 0) {
            printf("cucache-replay %s\n", CUCACHE_VERSION);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--no-reference") == 0) {
            reference = false;
        } else if (strcmp(a, "--busy") == 0 || strcmp(a, "--idle") == 0) {
            opts.busy = strcmp(a, "--busy") == 0;
            model_given = true;
        } else if (strcmp(a, "--dump") == 0) {
            dump = true;
        } else if (strcmp(a, "--preload") == 0) {
            preload = true;
        } else if (strcmp(a, "--conf") == 0 || strcmp(a, "--capacity") == 0 || strcmp(a, "--plot") == 0 ||
                   strcmp(a, "--fit") == 0) {
            if (!val) {
                fprintf(stderr, "cucache-replay: %s needs a value\n", a);
                return 2;
            }
            i++;
            if (strcmp(a, "--plot") == 0) {
                plot = val;
            } else if (strcmp(a, "--capacity") == 0 || strcmp(a, "--fit") == 0) {
                conf_num_t rc = parse_size(val, &opts.capacity);
                if (rc != CONF_NUM_OK) {
                    char shown[CONF_SHOW_BUF];
                    fprintf(stderr, "cucache-replay: %s %s: expected a size (4096, 512M, 40G)%s\n", a,
                            conf_show(shown, val, strlen(val)), rc == CONF_NUM_BIG ? " of at most 1024T" : "");
                    return 2;
                }
                fit = fit || strcmp(a, "--fit") == 0;
                capacity_given = true;
            } else {
                if (ncfg == MAX_CONFS) {
                    fprintf(stderr, "cucache-replay: at most %d --conf\n", MAX_CONFS);
                    return 2;
                }
                rp_config_t *c = &cfgs[ncfg];
                conf_defaults(&c->conf);
                bool dflt = val[0] == '\0' || strcmp(val, "default") == 0;
                int rc = dflt ? 0 : conf_parse(&c->conf, val, err, sizeof err);
                if (rc == 1) {
                    conf_help(help_line, stdout);
                    return 0;
                }
                if (rc != 0) {
                    fprintf(stderr, "cucache-replay: --conf %s\n", err);
                    return 2;
                }
                c->mode = RP_MODE_CORE;
                c->label = dflt ? "default" : val;
                c->conf_text = dflt ? "" : val;
                ncfg++;
            }
        } else {
            char shown[CONF_SHOW_BUF];
            fprintf(stderr, "cucache-replay: unknown option %s (--help lists them)\n", conf_show(shown, a, strlen(a)));
            return 2;
        }
    }
    if (ntraces == 0) {
        usage(stderr);
        return 2;
    }
    if (ncfg == 0) {
        conf_defaults(&cfgs[0].conf);
        cfgs[0] = (rp_config_t){.label = "default", .mode = RP_MODE_CORE, .conf = cfgs[0].conf, .conf_text = ""};
        ncfg = 1;
    }
    if (fit) {
        /* the first configuration, and each candidate on top of it */
        ncfg = 1;
        const char *base = cfgs[0].conf_text;
        for (size_t i = 0; core_whatif_candidate(i) && ncfg < MAX_CONFS; i++) {
            rp_config_t *c = &cfgs[ncfg];
            c->conf = cfgs[0].conf;
            if (conf_parse(&c->conf, core_whatif_candidate(i), err, sizeof err) != 0 ||
                memcmp(&c->conf, &cfgs[0].conf, sizeof c->conf) == 0)
                continue;
            snprintf(fit_text[ncfg], sizeof fit_text[ncfg], "%s%s%s", base, base[0] ? "," : "",
                     core_whatif_candidate(i));
            c->mode = RP_MODE_CORE;
            c->label = c->conf_text = fit_text[ncfg];
            ncfg++;
        }
        reference = false;
    }
    if (reference) {
        cfgs[ncfg++] = (rp_config_t){.label = "no cache", .mode = RP_MODE_NOCACHE};
        cfgs[ncfg++] = (rp_config_t){.label = "floor", .mode = RP_MODE_FLOOR};
    }
    opts.curve_buckets = plot ? PLOT_BUCKETS : 0;
    bool tty = isatty(STDERR_FILENO);

    int status = 0;
    done_t *done = calloc((size_t)ntraces, sizeof *done);
    if (!done) {
        fprintf(stderr, "cucache-replay: out of host memory\n");
        return 1;
    }
    for (int t = 0; t < ntraces; t++) {
        done_t *d = &done[t];
        if (rp_input_load(traces[t], &d->in, err, sizeof err) != 0) {
            fprintf(stderr, "cucache-replay: %s\n", err);
            status = 1;
            continue;
        }
        if (preload)
            rp_input_as_preload(&d->in);
        if (dump) {
            rp_print_events(stdout, &d->in);
            continue;
        }
        d->res = calloc(ncfg, sizeof *d->res);
        if (!d->res) {
            fprintf(stderr, "cucache-replay: out of host memory\n");
            status = 1;
            continue;
        }
        /* this trace's device: its recorded memory unless --capacity says
         * otherwise, the runtime's fallback as the interposer has it, and
         * the device model that reproduces the recorded run */
        d->opts = opts;
        if (!capacity_given && recorded_capacity(&d->in))
            d->opts.dev_capacity = d->in.recorded_free;
        d->opts.fallback = !fit && (d->in.format == RP_FORMAT_CUCACHE || preload);
        if (!model_given && d->in.format == RP_FORMAT_CUCACHE && d->in.recorded_settings &&
            choose_model(d, err, sizeof err) != 0) {
            fprintf(stderr, "cucache-replay: %s: the recorded settings: %s\n", d->in.name, err);
            status = 1;
            continue;
        }
        d->opts.model_note = d->model_note[0] ? d->model_note : NULL;
        d->ok = true;
        for (size_t k = 0; k < ncfg && d->ok; k++) {
            progress_t pg = {d->in.name, cfgs[k].label};
            d->opts.progress = tty && d->in.nev >= (1u << 21) ? progress : NULL;
            d->opts.progress_ctx = &pg;
            if (rp_replay(&d->in, &cfgs[k], &d->opts, &d->res[k], err, sizeof err) != 0) {
                fprintf(stderr, "cucache-replay: %s: %s: %s\n", d->in.name, cfgs[k].label, err);
                status = 1;
                d->ok = false;
            }
            if (d->opts.progress)
                fprintf(stderr, "\r%*s\r", 72, "");
        }
        if (!d->ok)
            continue;
        bool any = false;
        for (size_t k = 0; k < ncfg; k++)
            any = any || d->res[k].ooms == 0;
        if (fit && !any && status == 0)
            status = 3;
        if (json)
            for (size_t k = 0; k < ncfg; k++)
                rp_print_json(stdout, &d->in, &cfgs[k], &d->res[k], &d->opts);
        else if (fit)
            print_fit(&d->in, cfgs, d->res, ncfg, opts.capacity);
        else
            rp_print_table(stdout, &d->in, cfgs, d->res, ncfg, &d->opts);
        fflush(stdout);
        if (plot && d->in.ref_reserved && ref_curve(&d->in, &d->res[0].curve, &d->ref) != 0) {
            fprintf(stderr, "cucache-replay: out of host memory\n");
            status = 1;
        }
    }
    if (plot) {
        rp_plot_panel_t *panels = calloc((size_t)ntraces, sizeof *panels);
        size_t np = 0;
        for (int t = 0; panels && t < ntraces; t++)
            if (done[t].ok)
                panels[np++] = (rp_plot_panel_t){basename_of(done[t].in.name), done[t].in.nev, cfgs, done[t].res, ncfg,
                                                 done[t].ref.reserved ? &done[t].ref : NULL};
        if (!panels || rp_plot_svg(plot, panels, np, err, sizeof err) != 0) {
            char shown[CONF_SHOW_BUF];
            fprintf(stderr, "cucache-replay: --plot %s: %s\n", conf_show(shown, plot, strlen(plot)),
                    panels ? err : "out of host memory");
            status = 1;
        } else if (!json) {
            printf("plot: %s\n", plot);
        }
        free(panels);
    }
    for (int t = 0; t < ntraces; t++) {
        for (size_t k = 0; done[t].res && k < ncfg; k++)
            rp_result_free(&done[t].res[k]);
        free(done[t].res);
        free(done[t].ref.reserved);
        rp_input_free(&done[t].in);
    }
    free(done);
    return status;
}
