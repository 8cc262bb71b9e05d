/*
 * The race detector.  Every queued operation declares the device ranges it
 * reads and writes.  A record of each range stays here until the host has
 * observed the operation's completion (then every later operation is ordered
 * after it).  A new operation races with a record when the ranges overlap,
 * at least one of the two writes, and the record's operation does not happen
 * before the new one by the vector clocks.  Called with sim.lock held.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

typedef struct race_rec_s {
    uintptr_t lo, hi; /* device range [lo, hi) (a physical key range for virtual memory) */
    uintptr_t va;     /* the address of lo as the operation used it */
    bool write;
    int slot; /* the operation: (slot, seq) */
    uint64_t seq;
    const char *what;
    char stream[96]; /* its stream, named for reports */
} race_rec_t;

typedef struct sim_race_s {
    race_rec_t *recs;
    size_t n, cap;
    unsigned long count; /* races reported */
    char last[1024];     /* text of the last report */
    unsigned adds_since_gc;
} sim_race_t;

static sim_race_t race_state;

void race_init(void)
{
    sim.race = &race_state;
}

/* Drops the records every future operation is ordered after. */
void race_gc(void)
{
    sim_race_t *r = sim.race;
    if (!r)
        return;
    size_t j = 0;
    for (size_t i = 0; i < r->n; i++)
        if (vc_get(sim.host_vc, r->recs[i].slot) < r->recs[i].seq)
            r->recs[j++] = r->recs[i];
    r->n = j;
    r->adds_since_gc = 0;
}

void race_forget(uintptr_t lo, uintptr_t hi)
{
    sim_race_t *r = sim.race;
    if (!r)
        return;
    size_t j = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->recs[i].hi <= lo || r->recs[i].lo >= hi)
            r->recs[j++] = r->recs[i];
    r->n = j;
}

static void report(const race_rec_t *old, const sim_op_t *op, const sim_range_t *rg)
{
    sim_race_t *r = sim.race;
    char name[96];
    sim_stream_name(op->stream, name, sizeof name);
    uintptr_t lo = old->lo > rg->lo ? old->lo : rg->lo;
    uintptr_t hi = old->hi < rg->hi ? old->hi : rg->hi;
    char where[256];
    if (!sim_vmm_describe_key(lo, hi, where, sizeof where))
        snprintf(where, sizeof where, "[0x%lx, 0x%lx)", (unsigned long)lo, (unsigned long)hi);
    snprintf(r->last, sizeof r->last,
             "RACE on device memory %s (%lu bytes): %s on %s, op %lu, %s it while %s on %s, op %lu, "
             "which %s it, may still be running; no stream order, event or synchronisation orders them",
             where, (unsigned long)(hi - lo), op->what, name, (unsigned long)op->seq, rg->write ? "writes" : "reads",
             old->what, old->stream, (unsigned long)old->seq, old->write ? "writes" : "reads");
    r->count++;
    sim_log("%s", r->last);
    if (sim.cfg.race_fatal) {
        sim_log("CUCACHE_SIM_RACE_FATAL=1: aborting on the first race");
        abort();
    }
}

static void add_record(const sim_op_t *op, const sim_range_t *rg)
{
    sim_race_t *r = sim.race;
    /* A write ordered after older records that it covers makes them moot:
     * anything unordered with them but ordered after this write is still
     * checked against this write. */
    if (rg->write) {
        size_t j = 0;
        for (size_t i = 0; i < r->n; i++) {
            race_rec_t *o = &r->recs[i];
            bool covered = o->lo >= rg->lo && o->hi <= rg->hi && vc_get(op->vc, o->slot) >= o->seq;
            if (!covered)
                r->recs[j++] = *o;
        }
        r->n = j;
    }
    r->recs = sim_array_room(r->recs, r->n, &r->cap, sizeof *r->recs, 256);
    race_rec_t *n = &r->recs[r->n++];
    n->lo = rg->lo;
    n->hi = rg->hi;
    n->va = rg->va;
    n->write = rg->write;
    n->slot = op->slot;
    n->seq = op->seq;
    n->what = op->what;
    sim_stream_name(op->stream, n->stream, sizeof n->stream);
}

/* The op's ranges as physical memory: mapped addresses of the virtual
 * memory API become their physical allocations' keys (aliases meet).
 * *n gets the count; the array is `local` when it fits, else allocated. */
static sim_range_t *physical_ranges(const sim_op_t *op, sim_range_t *local, size_t cap, size_t *n)
{
    const sim_range_t *ranges = op->nranges > 2 ? op->xranges : op->ranges;
    size_t total = 0;
    for (uint32_t k = 0; k < op->nranges; k++)
        total += sim_vmm_translate(&ranges[k], NULL, 0);
    sim_range_t *out = total <= cap ? local : sim_xmalloc(total * sizeof *out);
    size_t at = 0;
    for (uint32_t k = 0; k < op->nranges; k++)
        at += sim_vmm_translate(&ranges[k], out + at, total - at);
    *n = total;
    return out;
}

void race_check_and_add(const sim_op_t *op)
{
    sim_race_t *r = sim.race;
    sim_range_t local[8];
    size_t nranges;
    sim_range_t *ranges = physical_ranges(op, local, 8, &nranges);
    bool reported = false;
    for (size_t k = 0; k < nranges && !reported; k++) {
        const sim_range_t *rg = &ranges[k];
        for (size_t i = 0; i < r->n; i++) {
            const race_rec_t *o = &r->recs[i];
            if (o->hi <= rg->lo || rg->hi <= o->lo || !(o->write || rg->write))
                continue;
            if (vc_get(op->vc, o->slot) >= o->seq)
                continue;
            report(o, op, rg);
            reported = true;
            break;
        }
    }
    for (size_t k = 0; k < nranges; k++)
        if (ranges[k].hi > ranges[k].lo)
            add_record(op, &ranges[k]);
    if (ranges != local)
        free(ranges);
    if (++r->adds_since_gc >= 1024)
        race_gc();
}

/* Record o touches physical [lo, hi) through addresses [va, va + hi - lo). */
static bool unmap_hits(const race_rec_t *o, uintptr_t va, uintptr_t lo, uintptr_t hi)
{
    if (o->hi <= lo || hi <= o->lo)
        return false;
    uintptr_t a = o->lo > lo ? o->lo : lo, b = o->hi < hi ? o->hi : hi;
    uintptr_t ova = o->va + (a - o->lo); /* where the operation saw byte a */
    return ova == va + (a - lo) && b > a;
}

bool race_check_unmap(uintptr_t va, uintptr_t lo, uintptr_t hi, const char *what)
{
    sim_race_t *r = sim.race;
    if (!sim.cfg.race || !r)
        return false;
    for (size_t i = 0; i < r->n; i++) {
        race_rec_t o = r->recs[i];
        if (!unmap_hits(&o, va, lo, hi) || vc_get(sim.host_vc, o.slot) >= o.seq)
            continue;
        uintptr_t a = o.lo > lo ? o.lo : lo, b = o.hi < hi ? o.hi : hi;
        snprintf(r->last, sizeof r->last,
                 "RACE on device memory [0x%lx, 0x%lx) (%lu bytes): %s takes it away while %s on %s, op %lu, which %s "
                 "it, may still be running; no synchronisation orders them",
                 (unsigned long)(va + (a - lo)), (unsigned long)(va + (b - lo)), (unsigned long)(b - a), what, o.what,
                 o.stream, (unsigned long)o.seq, o.write ? "writes" : "reads");
        r->count++;
        sim_log("%s", r->last);
        if (sim.cfg.race_fatal) {
            sim_log("CUCACHE_SIM_RACE_FATAL=1: aborting on the first race");
            abort();
        }
        return true;
    }
    return false;
}

bool race_wait_unmap(uintptr_t va, uintptr_t lo, uintptr_t hi)
{
    sim_race_t *r = sim.race;
    if (!sim.cfg.race || !r) {
        /* Nothing is recorded: wait for every device, so that the simulator
         * never touches memory it has unmapped (docs/simulator.md). */
        if (!sim_devices_busy())
            return false;
        for (int i = 0; i < sim.ndev; i++)
            sim_device_wait_idle(&sim.dev[i]);
        return true;
    }
    for (size_t i = 0; i < r->n; i++) {
        race_rec_t o = r->recs[i];
        if (!unmap_hits(&o, va, lo, hi) || sim.completed[o.slot] >= o.seq)
            continue;
        sim_wait_seq(o.slot, o.seq);
        return true;
    }
    return false;
}

/* ------------------------------------------------------------------------
 * Extension API for tests
 * ---------------------------------------------------------------------- */

SIM_API unsigned long cucacheSimRaceCount(void)
{
    sim_lock();
    unsigned long n = race_state.count;
    sim_unlock();
    return n;
}

SIM_API size_t cucacheSimLastRace(char *buf, size_t len)
{
    sim_lock();
    size_t n = strlen(race_state.last);
    if (buf && len) {
        size_t m = n < len - 1 ? n : len - 1;
        memcpy(buf, race_state.last, m);
        buf[m] = 0;
    }
    sim_unlock();
    return n;
}

SIM_API void cucacheSimRaceReset(void)
{
    sim_lock();
    race_state.count = 0;
    race_state.last[0] = 0;
    sim_unlock();
}
