/*
 * PyTorch memory snapshots (torch.cuda.memory._dump_snapshot) as replay
 * inputs.  The pickle is read by pickle.c, which refuses every global; this
 * file walks the plain data by schema:
 *
 *   device_traces[d][i] = {action, addr, size, stream, time_us, ...}
 *   segments[k] = {device, address, total_size, stream, blocks: [{address,
 *                  size, requested_size, state}, ...], ...}
 *
 * Events: `alloc` becomes an allocation, `free_completed` a free (the moment
 * PyTorch's cache could reuse the block; `free_requested` only says the
 * program let go of it), `oom` a failed allocation.  The segment events
 * (`segment_alloc`, `segment_free`, `segment_map`, `segment_unmap`) are not
 * replayed: they are PyTorch's own decisions, kept as its reserved curve.
 *
 * Recording usually starts in the middle of a run, so some blocks were
 * already live.  They are (1) the blocks freed in the trace before any
 * allocation at their address, and (2) the active blocks of the final
 * `segments` list whose address the trace never mentions.  They become the
 * prelude: allocations at time 0, in address order (their sizes: the free
 * event's size, or the block's size: what PyTorch held for it, the unsplit
 * rest of its block included).
 *
 * PyTorch's reserved bytes before the first event are the final segments'
 * total minus what the trace's segment events added since (allocs and maps
 * minus frees and unmaps); after each event they follow the segment events.
 */
#include <stdlib.h>
#include <string.h>

#include "hashtab.h"
#include "hostalloc.h"
#include "pickle.h"
#include "replay.h"
#include "vec.h"

enum { MAX_EVENT_DEVICES = 64 };
#define MAX_BYTES ((int64_t)1 << 50) /* a size beyond a PiB is a corrupt file */

typedef struct tev_s {
    int64_t time_us;
    int device;
    size_t pos;         /* position in its device's list: the tie breaker */
    const pk_val_t *v;  /* the event dict */
} tev_t;

typedef struct timp_s {
    rp_input_t *in;
    char *err;
    size_t errlen;
    trace_event_t *ev; /* being built */
    uint64_t *ref;     /* ref[i]: PyTorch's reserved bytes after ev[i] */
    size_t nev, cap_ev, cap_ref;
} timp_t;

static int tev_cmp(const void *a, const void *b)
{
    const tev_t *x = a, *y = b;
    if (x->time_us != y->time_us)
        return x->time_us < y->time_us ? -1 : 1;
    if (x->device != y->device)
        return x->device < y->device ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* An integer field of a dict, with an error naming where it is. */
static int field_int(timp_t *t, const pk_val_t *d, const char *key, const char *where, size_t i, size_t j,
                     int64_t *out)
{
    const pk_val_t *v = pk_get(d, key);
    if (pk_int(v, out))
        return 0;
    snprintf(t->err, t->errlen, "%s[%zu][%zu]: '%s' is %s, expected an integer", where, i, j, key,
             v ? pk_type_name(v) : "missing");
    return -1;
}

static int push(timp_t *t, const trace_event_t *e, uint64_t ref)
{
    if (!vec_reserve((void **)&t->ev, &t->cap_ev, t->nev + 1, sizeof *t->ev) ||
        !vec_reserve((void **)&t->ref, &t->cap_ref, t->nev + 1, sizeof *t->ref)) {
        snprintf(t->err, t->errlen, "out of host memory");
        return -1;
    }
    t->ref[t->nev] = ref;
    t->ev[t->nev++] = *e;
    return 0;
}

static int prelude_cmp(const void *a, const void *b)
{
    const trace_event_t *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* The blocks of the final segments that are live and never mentioned
 * (seen: every address the trace mentions). */
static int untouched_blocks(timp_t *t, const pk_val_t *segs, const ht_t *seen, trace_event_t **pre, size_t *npre,
                            size_t *cap, uint64_t *total)
{
    for (size_t k = 0; segs && k < segs->n; k++) {
        const pk_val_t *sg = segs->items[k];
        int64_t size, dev = 0, stream = 0;
        if (sg->type != PK_DICT || !pk_int(pk_get(sg, "total_size"), &size) || size < 0 || size > MAX_BYTES) {
            snprintf(t->err, t->errlen, "segments[%zu]: not a segment (a dict with a total_size of 0 to 2^50)", k);
            return -1;
        }
        *total += (uint64_t)size;
        pk_int(pk_get(sg, "device"), &dev);
        pk_int(pk_get(sg, "stream"), &stream);
        if (dev < 0 || dev >= 64) {
            snprintf(t->err, t->errlen, "segments[%zu]: device %lld (at most 64 devices)", k, (long long)dev);
            return -1;
        }
        const pk_val_t *blocks = pk_get(sg, "blocks");
        if (!blocks || blocks->type != PK_LIST)
            continue;
        for (size_t j = 0; j < blocks->n; j++) {
            const pk_val_t *b = blocks->items[j];
            const pk_val_t *state = pk_get(b, "state");
            int64_t addr, bsize;
            if (!pk_str_eq(state, "active_allocated") && !pk_str_eq(state, "active_pending_free"))
                continue;
            if (field_int(t, b, "address", "segments.blocks", k, j, &addr) != 0 ||
                field_int(t, b, "size", "segments.blocks", k, j, &bsize) != 0)
                return -1;
            if (bsize < 0 || bsize > MAX_BYTES) {
                snprintf(t->err, t->errlen, "segments[%zu].blocks[%zu]: size %lld", k, j, (long long)bsize);
                return -1;
            }
            if (ht_get(seen, (uint64_t)addr, NULL))
                continue;
            if (!vec_reserve((void **)pre, cap, *npre + 1, sizeof **pre)) {
                snprintf(t->err, t->errlen, "out of host memory");
                return -1;
            }
            (*pre)[(*npre)++] = (trace_event_t){.tid = 1, .kind = TRACE_ALLOC, .api = TRACE_API_IMPORTED,
                                                .device = (int16_t)dev, .stream = (uint64_t)stream,
                                                .addr = (uint64_t)addr, .size = (uint64_t)bsize};
        }
    }
    return 0;
}

static int import(timp_t *t, const pk_val_t *root)
{
    rp_input_t *in = t->in;
    const pk_val_t *traces = pk_get(root, "device_traces");
    const pk_val_t *segs = pk_get(root, "segments");
    if (root->type != PK_DICT || !traces || traces->type != PK_LIST) {
        snprintf(t->err, t->errlen, "not a PyTorch memory snapshot: no device_traces list (was it dumped with "
                                    "torch.cuda.memory._record_memory_history enabled?)");
        return -1;
    }
    if (segs && segs->type != PK_LIST) {
        snprintf(t->err, t->errlen, "segments is %s, expected a list", pk_type_name(segs));
        return -1;
    }
    if (traces->n > MAX_EVENT_DEVICES) {
        snprintf(t->err, t->errlen, "device_traces has %zu devices (at most 64)", traces->n);
        return -1;
    }
    /* every event, in time order */
    size_t n = 0;
    for (size_t d = 0; d < traces->n; d++) {
        if (traces->items[d]->type != PK_LIST) {
            snprintf(t->err, t->errlen, "device_traces[%zu] is %s, expected a list", d,
                     pk_type_name(traces->items[d]));
            return -1;
        }
        n += traces->items[d]->n;
    }
    tev_t *all = malloc((n ? n : 1) * sizeof *all);
    ht_t seen = {0}; /* every address the trace mentions -> an allocation at it is live (1) */
    trace_event_t *pre = NULL;
    size_t npre = 0, precap = 0;
    int rc = -1;
    if (!all || !ht_reserve(&seen, n)) {
        snprintf(t->err, t->errlen, "out of host memory");
        goto out;
    }
    n = 0;
    for (size_t d = 0; d < traces->n; d++) {
        const pk_val_t *list = traces->items[d];
        for (size_t j = 0; j < list->n; j++) {
            const pk_val_t *e = list->items[j];
            int64_t time_us = 0, addr;
            if (e->type != PK_DICT || !pk_get(e, "action") || pk_get(e, "action")->type != PK_STR) {
                snprintf(t->err, t->errlen, "device_traces[%zu][%zu]: not an event (a dict with a string action)",
                         d, j);
                goto out;
            }
            pk_int(pk_get(e, "time_us"), &time_us);
            all[n++] = (tev_t){time_us, (int)d, j, e};
            if (pk_int(pk_get(e, "addr"), &addr) && !ht_put(&seen, (uint64_t)addr, 0)) {
                snprintf(t->err, t->errlen, "out of host memory");
                goto out;
            }
        }
    }
    qsort(all, n, sizeof *all, tev_cmp);

    /* pass 1: the prelude (blocks live before the recording) and the
     * segment bytes the trace added */
    int64_t seg_delta = 0;
    uint64_t seg_total = 0;
    size_t pre_freed = 0;
    for (size_t i = 0; i < n; i++) {
        const pk_val_t *e = all[i].v, *action = pk_get(e, "action");
        int64_t addr, size;
        bool is_alloc = pk_str_eq(action, "alloc"), is_free = pk_str_eq(action, "free_completed");
        bool seg_plus = pk_str_eq(action, "segment_alloc") || pk_str_eq(action, "segment_map");
        bool seg_minus = pk_str_eq(action, "segment_free") || pk_str_eq(action, "segment_unmap");
        if (!is_alloc && !is_free && !seg_plus && !seg_minus)
            continue;
        if (field_int(t, e, "addr", "device_traces", (size_t)all[i].device, all[i].pos, &addr) != 0 ||
            field_int(t, e, "size", "device_traces", (size_t)all[i].device, all[i].pos, &size) != 0)
            goto out;
        if (size < 0 || size > MAX_BYTES) {
            snprintf(t->err, t->errlen, "device_traces[%d][%zu]: size %lld (0 to 2^50 expected)", all[i].device,
                     all[i].pos, (long long)size);
            goto out;
        }
        if (seg_plus || seg_minus) {
            seg_delta += seg_plus ? size : -size;
            continue;
        }
        uint64_t *live = ht_find(&seen, (uint64_t)addr);
        if (is_alloc) {
            *live = 1;
        } else if (*live) {
            *live = 0;
        } else {
            int64_t stream = 0;
            pk_int(pk_get(e, "stream"), &stream);
            if (!vec_reserve((void **)&pre, &precap, npre + 1, sizeof *pre)) {
                snprintf(t->err, t->errlen, "out of host memory");
                goto out;
            }
            pre[npre++] = (trace_event_t){.tid = 1, .kind = TRACE_ALLOC, .api = TRACE_API_IMPORTED,
                                          .device = (int16_t)all[i].device, .stream = (uint64_t)stream,
                                          .addr = (uint64_t)addr, .size = (uint64_t)size};
            pre_freed++;
        }
    }
    if (untouched_blocks(t, segs, &seen, &pre, &npre, &precap, &seg_total) != 0)
        goto out;
    if (npre)
        qsort(pre, npre, sizeof *pre, prelude_cmp);

    /* PyTorch's reserved bytes: at the start, then after each event */
    int64_t reserved = (int64_t)seg_total - seg_delta;
    if (reserved < 0) {
        rp_note(in, "the segment events add up to more than the final segments (%lld bytes): PyTorch's reserved "
                    "curve starts at 0",
                (long long)-reserved);
        reserved = 0;
    }
    uint64_t peak = (uint64_t)reserved;
    for (size_t i = 0; i < npre; i++)
        if (push(t, &pre[i], (uint64_t)reserved) != 0)
            goto out;
    in->nprelude = npre;

    /* pass 2: the events */
    int64_t t0 = n ? all[0].time_us : 0;
    for (size_t i = 0; i < n; i++) {
        const pk_val_t *e = all[i].v, *action = pk_get(e, "action");
        int64_t addr = 0, size = 0, stream = 0;
        pk_int(pk_get(e, "addr"), &addr);
        pk_int(pk_get(e, "size"), &size);
        pk_int(pk_get(e, "stream"), &stream);
        if (size < 0 || size > MAX_BYTES)
            size = 0; /* only an oom's size can still be out of range here: it is a request that cannot fit */
        trace_event_t ev = {.time_ns = ((uint64_t)all[i].time_us - (uint64_t)t0) * 1000u, .tid = 1,
                            .api = TRACE_API_IMPORTED, .device = (int16_t)all[i].device,
                            .stream = (uint64_t)stream, .addr = (uint64_t)addr, .size = (uint64_t)size};
        if (pk_str_eq(action, "segment_alloc") || pk_str_eq(action, "segment_map")) {
            reserved += size;
        } else if (pk_str_eq(action, "segment_free") || pk_str_eq(action, "segment_unmap")) {
            reserved -= size;
        } else if (pk_str_eq(action, "alloc")) {
            ev.kind = TRACE_ALLOC;
        } else if (pk_str_eq(action, "free_completed")) {
            ev.kind = TRACE_FREE;
        } else if (pk_str_eq(action, "oom")) {
            ev.kind = TRACE_ALLOC_FAIL;
            ev.addr = 0;
        }
        if (reserved > 0 && (uint64_t)reserved > peak)
            peak = (uint64_t)reserved;
        if (ev.kind && push(t, &ev, reserved > 0 ? (uint64_t)reserved : 0) != 0)
            goto out;
    }
    in->ev = t->ev;
    in->ref_reserved = t->ref;
    in->nev = t->nev;
    t->ev = NULL;
    t->ref = NULL;
    in->ref_peak_reserved = peak;
    in->ref_segments_final = segs ? segs->n : 0;
    in->ndevices = traces->n ? (int)traces->n : 1;
    if (npre)
        rp_note(in, "%zu blocks were live before the recording began (%zu freed in it, %zu never touched)", npre,
                pre_freed, npre - pre_freed);
    rc = 0;
out:
    free(all);
    ht_fini(&seen);
    hostalloc_free(pre);
    return rc;
}

int rp_import_torch(const uint8_t *data, size_t len, rp_input_t *out, char *err, size_t errlen)
{
    pk_doc_t doc;
    out->format = RP_FORMAT_TORCH;
    if (pk_parse(data, len, &doc, err, errlen) != 0)
        return -1;
    timp_t t = {.in = out, .err = err, .errlen = errlen};
    int rc = import(&t, doc.root);
    hostalloc_free(t.ev);
    hostalloc_free(t.ref);
    pk_free(&doc);
    return rc;
}
