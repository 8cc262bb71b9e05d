#!/usr/bin/env python3
"""cucache-replay --fit: the settings under which a trace fits.

Usage: check_fit.py CUCACHE_REPLAY TRACE_DIR

1. On a shared trace at a capacity between its floor and PyTorch's
   reserved figure: exit 0, the settings that fit listed first, best (lowest
   peak reserved) first, and every verdict the same as a plain replay of that
   setting at that capacity (no OOM for "fits", some for "no").
2. A capacity nothing fits in: exit 3, "0 of N settings fit".
3. A base configuration (--conf) is kept in every candidate.
4. A bad capacity: exit 2 with a message naming the option.
"""
import json
import os
import re
import subprocess
import sys

REPLAY, TRACES = sys.argv[1], sys.argv[2]
TRACE = os.path.join(TRACES, "bcrafton_cs336.pickle")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(*args):
    return subprocess.run([REPLAY, *args], capture_output=True, text=True)


ROW = re.compile(r"^  (fits|no) +CUCACHE_CONF=(\S+) +(?:peak reserved ([\d.]+) GiB)?")

# 1. between the floor (3.59 GiB) and PyTorch's 3.95 GiB
r = run("--fit", "3700M", TRACE)
check(r.returncode == 0, f"--fit 3700M exits 0 (got {r.returncode}: {r.stderr})")
rows = [ROW.match(line) for line in r.stdout.splitlines()[1:]]
check(all(rows) and len(rows) >= 10, f"one row per setting:\n{r.stdout}")
rows = [m.groups() for m in rows if m]
verdicts = [v for v, _, _ in rows]
check(verdicts == sorted(verdicts, key=lambda v: v != "fits"), "the settings that fit come first")
peaks = [float(p) for v, _, p in rows if v == "fits"]
check(peaks and peaks == sorted(peaks), f"best first: {peaks}")
check(any(c == "expandable_segments:true" for v, c, _ in rows if v == "fits"),
      "expandable_segments:true fits (docs/fragmentation.md: 3,688 MiB)")
for v, conf, _ in rows:
    conf = "default" if conf == "(the" else conf
    p = run("--json", "--no-reference", "--capacity", "3700M", "--conf", conf, TRACE)
    res = json.loads(p.stdout.splitlines()[0])
    check((res["ooms"] == 0) == (v == "fits"), f"{conf}: --fit says {v}, a plain replay has {res['ooms']} OOMs")

# 2. below the floor
r = run("--fit", "3000M", TRACE)
check(r.returncode == 3, f"--fit 3000M exits 3 (got {r.returncode})")
check(re.search(r": 4771 events; 0 of \d+ settings fit in 2.93 GiB per device", r.stdout), r.stdout)

# 3. the base configuration stays in every candidate
r = run("--conf", "max_split_size_mb:64", "--fit", "3700M", TRACE)
lines = r.stdout.splitlines()[1:]
check(lines and all("CUCACHE_CONF=max_split_size_mb:64" in line for line in lines), r.stdout)

# 4. bad input
r = run("--fit", "12Q", TRACE)
check(r.returncode == 2 and "--fit 12Q: expected a size" in r.stderr, f"bad capacity: {r.returncode} {r.stderr}")

print(f"check_fit: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
