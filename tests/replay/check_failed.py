#!/usr/bin/env python3
"""A replayed run that ended in an OOM: every column treats the request the
recorded run failed the same way, asked again at its moment.

Usage: check_failed.py CUCACHE_RUN CUCACHE_REPLAY ITEST_CHILD

1. PyTorch snapshots that end in an `oom` event (Python's pickle of plain
   dicts, as check_import.py makes them): one whose failed request cannot
   fit the capacity beside what is live, one where it can.
2. A cucache trace of an OOM: the leak loop (itest_child leak 220 300: 3 MiB
   kept per step, then 300 MiB) recorded with CUCACHE_TRACE on the simulated
   device of 1 GiB (cucache-run --sim=1G --trace), replayed at its recorded
   capacity.

In each: the floor's peak includes the failed request on top of what was
live at it; a column that has an OOM has it at that request's event, one
that does not served it and needed at least the floor; where the floor is
above the capacity, every column fails there, "no cache" included; and the
table says in one line how failed requests are replayed.  Seen to fail with
the reference models skipping the failed request (the floor 660 MiB, below
what any column needed; "no cache" without the OOM the run had).
"""
import json
import os
import pickle
import subprocess
import sys
import tempfile

from rptest import check, failures

RUN, REPLAY, CHILD = sys.argv[1:4]
M = 1 << 20
LINE = "in the run): each is asked again at its moment in every column; the floor counts it"


def replay(*args):
    p = subprocess.run([REPLAY, *args], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"cucache-replay {args}: exit {p.returncode}: {p.stderr}")
    return p.stdout


def agree(what, path, failed_event, live, request, capacity, *extra):
    """The columns of a replay of path agree about the request at failed_event."""
    rows = [json.loads(l) for l in replay("--json", "--conf", "default", "--conf", "expandable_segments:true",
                                          *extra, path).splitlines()]
    by = {r["config"]: r for r in rows}
    floor = by["floor"]
    need = live + request
    check(floor["peak_allocated"] >= need,
          f"{what}: the floor's peak {floor['peak_allocated']} leaves out the failed request ({live} + {request})")
    for name, r in by.items():
        if name == "floor":
            continue
        if r["ooms"]:
            check(r["first_oom_event"] == failed_event,
                  f"{what} [{name}]: first OOM at event {r['first_oom_event']}, the run failed at {failed_event}")
        else:
            check(r["peak_allocated"] >= floor["peak_allocated"],
                  f"{what} [{name}]: served everything with a peak {r['peak_allocated']} below the floor's "
                  f"{floor['peak_allocated']}")
        if need > capacity:
            check(r["ooms"] >= 1 and r["first_oom_event"] == failed_event,
                  f"{what} [{name}]: the floor needs {need} > {capacity} at event {failed_event}, yet no OOM there")
    text = replay("--conf", "default", *extra, path)
    check(LINE in text, f"{what}: the table does not say how failed requests are replayed:\n{text}")
    return by


def snapshot(tmp, name, live_mib, oom_mib):
    ev = lambda action, addr, size, t: {"action": action, "addr": addr, "size": size, "stream": 0,
                                        "time_us": t, "frames": []}
    snap = {"segments": [], "allocator_settings": {},
            "device_traces": [[ev("alloc", 0x10000000, live_mib * M, 100),
                               ev("alloc", 0x90000000, 512, 101),
                               ev("free_completed", 0x90000000, 512, 102),
                               {"action": "oom", "device_free": 1234, "size": oom_mib * M, "stream": 0,
                                "time_us": 103, "frames": []}]]}
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    return path


with tempfile.TemporaryDirectory() as tmp:
    # 1. PyTorch snapshots ending in an oom, on a device of 64 MiB
    for name, live, oom in (("nofit.pickle", 40, 30), ("fits.pickle", 10, 30)):
        path = snapshot(tmp, name, live, oom)
        by = agree(name, path, 3, live * M, oom * M, 64 * M, "--capacity", "64M")
        if live + oom <= 64:
            for col in ("default", "no cache"):
                check(by[col]["ooms"] == 0, f"{name} [{col}]: the failed request fits here, yet {by[col]['ooms']} OOMs")

    # 2. a cucache trace of an OOM on the simulated device
    trace = os.path.join(tmp, "leak.trace")
    env = dict(os.environ)
    env.pop("CUCACHE_CONF", None)
    r = subprocess.run([RUN, "--sim=1G", "--trace", trace, "--", CHILD, "leak", "220", "300"], capture_output=True,
                       text=True, env=env, timeout=120)
    check(r.returncode == 3, f"the leak loop should fail its 300 MiB request (exit 3), got {r.returncode}: {r.stderr}")
    if r.returncode == 3:
        dump = replay("--dump", trace).splitlines()
        fails = [l.split() for l in dump if not l.startswith("#") and l.split()[4] == "alloc_fail"]
        check(len(fails) == 1, f"the trace has {len(fails)} failed requests, expected 1")
        if fails:
            event, size = int(fails[0][0]), int(fails[0][8])
            by = agree("leak.trace", trace, event, 220 * 3 * M, size, 1 << 30)
            # 220 x 3 MiB live plus 300 MiB: 960 MiB, the floor
            check(by["floor"]["peak_allocated"] == 960 * M,
                  f"leak.trace: the floor's peak {by['floor']['peak_allocated']}, expected {960 * M}")
            # without a cache each 3 MiB takes two 2 MiB pages: 880 MiB, and 300 MiB more does not fit
            check(by["no cache"]["ooms"] == 1, f"leak.trace: no cache has {by['no cache']['ooms']} OOMs, expected 1")
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
