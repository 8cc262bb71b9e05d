#!/usr/bin/env python3
"""Synthetic multi-stream traces through cucache-replay.

Usage: check_synthetic.py CUCACHE_REPLAY GEN_TRACE

For every pattern of gen_trace.py (churn, streams, threads, devices,
capture, mixed) and two seeds: the replay reads every event; the floor's
peak equals the generator's own peak of live requested bytes; under each
configuration reserved covers allocated at every event, allocated is at
least the floor, nothing is skipped but graph nodes, and a second run gives
the same figures.  Then the error paths on generated files: a file cut
short is read up to its last whole record and says so; a corrupted magic, a
corrupted chunk and another version are refused with the offset; a small
capacity gives OOMs and names the first.
"""
import json
import os
import subprocess
import sys
import tempfile

import rptest
from rptest import check, failures

REPLAY, GEN = sys.argv[1], sys.argv[2]
CONFS = ["default", "reuse:stream", "max_split_size_mb:40", "roundup_power2_divisions:4", "strategy:preallocate"]


def gen(tmp, pattern, seed, *extra):
    out = os.path.join(tmp, f"{pattern}-{seed}.trace")
    exp = out + ".json"
    subprocess.run([sys.executable, GEN, "--pattern", pattern, "--seed", str(seed), "--events", "20000",
                    "-o", out, "--expect", exp, *extra], check=True)
    with open(exp) as f:
        return out, json.load(f)


def replay(*args):
    return rptest.replay(REPLAY, *args)


def rows(path, *extra):
    args = ["--json", *extra]
    for c in CONFS:
        args += ["--conf", c]
    p = replay(*args, path)
    check(p.returncode == 0, f"{path}: exit {p.returncode}: {p.stderr.strip()}")
    return [json.loads(line) for line in p.stdout.splitlines()] if p.returncode == 0 else []


def stable(r):
    return {k: v for k, v in r.items() if k != "seconds"}


with tempfile.TemporaryDirectory() as tmp:
    for pattern in ("churn", "streams", "threads", "devices", "capture", "mixed"):
        for seed in (1, 2):
            path, exp = gen(tmp, pattern, seed)
            got = rows(path)
            if not got:
                continue
            by = {r["config"]: r for r in got}
            floor = by["floor"]
            print(f"{pattern}/{seed}: {floor['events']} events, floor {floor['peak_allocated']}, "
                  + ", ".join(f"{c} {by[c]['peak_reserved']}" for c in CONFS))
            check(floor["events"] == exp["events"], f"{pattern}/{seed}: {floor['events']} events, "
                  f"the generator wrote {exp['events']}")
            check(floor["peak_requested"] == exp["peak_requested"],
                  f"{pattern}/{seed}: floor {floor['peak_requested']}, generator's peak {exp['peak_requested']}")
            check(floor["devices"] == exp["devices"], f"{pattern}/{seed}: {floor['devices']} devices")
            for c in CONFS:
                r = by[c]
                check(r["reserved_covers_allocated"], f"{pattern}/{seed} [{c}]: reserved fell below allocated")
                check(r["stats_agree"], f"{pattern}/{seed} [{c}]: peaks differ from the core's statistics")
                check(r["peak_allocated"] >= floor["peak_allocated"], f"{pattern}/{seed} [{c}]: allocated below floor")
                check(r["peak_reserved"] >= r["peak_allocated"], f"{pattern}/{seed} [{c}]: reserved below allocated")
                check(r["ooms"] == 0, f"{pattern}/{seed} [{c}]: {r['ooms']} OOMs at 80 GiB")
                if pattern not in ("capture", "mixed"):
                    check(r["skipped"] == 0, f"{pattern}/{seed} [{c}]: {r['skipped']} events skipped")
            again = rows(path)
            check([stable(r) for r in again] == [stable(r) for r in got], f"{pattern}/{seed}: not deterministic")
            # the busy device: frees wait for the job's synchronisations
            for r in rows(path, "--busy"):
                check(r["device_model"] == "busy", f"{pattern}/{seed}: --busy not in the JSON")
                check(r["reserved_covers_allocated"] and r["stats_agree"] and r["ooms"] == 0,
                      f"{pattern}/{seed} [{r['config']}] --busy: {r}")

    # --dump: one line per event the replay reads, in its order
    path, exp = gen(tmp, "threads", 5)
    p = replay("--dump", path)
    lines = [l for l in p.stdout.splitlines() if not l.startswith("#")]
    check(p.returncode == 0 and len(lines) == exp["events"], f"--dump: {p.returncode}, {len(lines)} lines")
    kinds = [l.split()[4] for l in lines]
    check(kinds.count("alloc") == exp["allocs"] and kinds.count("free") == exp["frees"],
          f"--dump: {kinds.count('alloc')} allocs, {kinds.count('free')} frees; generator {exp['allocs']}, {exp['frees']}")
    check([int(l.split()[0]) for l in lines] == list(range(len(lines))), "--dump: indices out of order")

    # a file cut short: the whole records before the cut
    path, exp = gen(tmp, "streams", 3)
    size = os.path.getsize(path)
    cut = os.path.join(tmp, "cut.trace")
    with open(path, "rb") as f, open(cut, "wb") as g:
        g.write(f.read(size - 17))
    p = replay("--json", cut)
    ok = p.returncode == 0 and json.loads(p.stdout.splitlines()[0])["events"] < exp["events"]
    check(ok and "cut short at offset" in p.stdout, f"cut-short trace: {p.returncode} {p.stdout[:300]} {p.stderr}")
    t = replay(cut)
    check("cut short at offset" in t.stdout, "the table does not say the trace was cut short")

    def expect_error(name, offset, byte, *want):
        bad = os.path.join(tmp, name)
        with open(path, "rb") as f:
            data = bytearray(f.read())
        data[offset] = byte
        with open(bad, "wb") as f:
            f.write(data)
        rptest.expect_error(REPLAY, bad, *want)

    expect_error("version.trace", 8, 9, "cucache trace", "version 9")
    expect_error("chunk.trace", 64, 0x58, "cucache trace", "offset 64")
    expect_error("magic.trace", 0, ord("X"), "not a trace this tool reads")

    # a capacity too small: OOMs, and the first one's place
    p = replay("--json", "--capacity", "64M", path)
    r = json.loads(p.stdout.splitlines()[0]) if p.returncode == 0 else {}
    check(r.get("ooms", 0) > 0 and isinstance(r.get("first_oom_event"), int),
          f"64M capacity: {p.returncode} {p.stdout[:300]} {p.stderr}")

    # the plot
    svg = os.path.join(tmp, "p.svg")
    p = replay("--plot", svg, "--conf", "default", "--conf", "reuse:stream", path)
    check(p.returncode == 0 and os.path.getsize(svg) > 1000, f"--plot: {p.returncode} {p.stderr}")
    if os.path.exists(svg):
        import xml.etree.ElementTree as ET
        ET.parse(svg)
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
