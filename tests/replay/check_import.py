#!/usr/bin/env python3
"""PyTorch snapshots through cucache-replay.

Usage: check_import.py CUCACHE_REPLAY TRACE_DIR

1. The shared traces (TRACE_DIR, ../shared/traces): the replay's peak
   allocated equals an independent computation here (the same definition:
   blocks live before the recording -- freed without an earlier allocation,
   or active in the final segments and never mentioned -- plus the trace's
   allocations, each rounded up to 512 bytes as the core rounds), and
   rounds to the figure in TRACE_DIR/README.md; PyTorch's peak reserved
   equals the final segments' total unwound through the segment events and
   rounds to the README's figure; under several configurations every replay
   keeps reserved >= allocated at every event.
2. Constructed snapshots (Python's pickle of plain dicts): the prelude,
   PyTorch's reserved curve from segment events, an oom event, multiple
   devices, exactly.
3. Hostile and broken files: a pickle naming a global, a truncated pickle,
   a pickle that is not a snapshot, a snapshot with a wrong field type:
   each exits 1 with an error naming the problem (and the offset where the
   bytes are at fault), never a crash.

Exit 77 (skipped) when TRACE_DIR has no traces and parts 2 and 3 passed.
"""
import json
import os
import pickle
import re
import sys
import tempfile

import rptest
from rptest import check, failures

REPLAY = sys.argv[1]
TRACES = sys.argv[2]


class NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing global {module}.{name}")


def replay(*args):
    return rptest.replay(REPLAY, *args)


def replay_json(path, *confs, capacity="80G"):
    args = ["--json", "--capacity", capacity]
    for c in confs:
        args += ["--conf", c]
    p = replay(*args, path)
    if p.returncode != 0:
        failures.append(f"cucache-replay {path}: exit {p.returncode}: {p.stderr.strip()}")
        return []
    return [json.loads(line) for line in p.stdout.splitlines()]


def r512(n):
    return 512 if n <= 0 else (n + 511) // 512 * 512


def reference(snap):
    """The floor's peak allocated (live blocks, each rounded up to 512 bytes),
    PyTorch's peak reserved, and the number of blocks live before the trace."""
    events = [(e.get("time_us", 0), d, i, e) for d, evs in enumerate(snap["device_traces"])
              for i, e in enumerate(evs)]
    events.sort(key=lambda t: t[:3])
    mentioned = {e["addr"] for *_, e in events if "addr" in e}
    live, pre, pre_freed = set(), [], {}
    seg_delta = 0
    for *_, e in events:
        a = e["action"]
        if a == "alloc":
            live.add(e["addr"])
        elif a == "free_completed":
            if e["addr"] in live:
                live.discard(e["addr"])
            else:
                pre.append(e["size"])
                pre_freed.setdefault(e["addr"], []).append(e["size"])
        elif a in ("segment_alloc", "segment_map"):
            seg_delta += e["size"]
        elif a in ("segment_free", "segment_unmap"):
            seg_delta -= e["size"]
    for seg in snap.get("segments", []):
        for b in seg["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free") and b["address"] not in mentioned:
                pre.append(b["size"])  # what PyTorch held for it
    cur = peak = sum(r512(s) for s in pre)
    sizes = {}
    reserved = sum(s["total_size"] for s in snap.get("segments", [])) - seg_delta
    rpeak = reserved
    for *_, e in events:
        a = e["action"]
        if a == "alloc":
            sizes[e["addr"]] = r512(e["size"])
            cur += sizes[e["addr"]]
        elif a == "free_completed" and e["addr"] in sizes:
            cur -= sizes.pop(e["addr"])
        elif a == "free_completed" and pre_freed.get(e["addr"]):
            cur -= r512(pre_freed[e["addr"]].pop(0))
        elif a == "oom":  # asked again in every column, the floor too; when it fits, freed at once
            peak = max(peak, cur + r512(e["size"]))
        elif a in ("segment_alloc", "segment_map"):
            reserved += e["size"]
        elif a in ("segment_free", "segment_unmap"):
            reserved -= e["size"]
        peak, rpeak = max(peak, cur), max(rpeak, reserved)
    return peak, rpeak, len(pre)


def readme_figures():
    """{file: (peak allocated GiB, PyTorch's peak reserved GiB)} from the README table."""
    out = {}
    for line in open(os.path.join(TRACES, "README.md")):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 8 and cells[1].startswith("`") and cells[1].endswith(".pickle`"):
            gib = [float(m) for m in re.findall(r"([\d.]+) GiB", line)]
            out[cells[1].strip("`")] = (gib[0], gib[1])
    return out


def shared_traces():
    """Part 1; False when the traces are not there."""
    if not os.path.isfile(os.path.join(TRACES, "README.md")):
        print(f"no shared traces at {TRACES}: that part not run")
        return False
    figures = readme_figures()
    check(len(figures) == 2, f"README.md lists {len(figures)} traces, expected 2")
    for name, (gib_alloc, gib_res) in sorted(figures.items()):
        path = os.path.join(TRACES, name)
        with open(path, "rb") as f:
            snap = NoGlobals(f).load()
        peak, rpeak, npre = reference(snap)
        rows = replay_json(path, "default", "max_split_size_mb:64", "roundup_power2_divisions:4",
                           "reuse:stream", "strategy:preallocate", "garbage_collection_threshold:0.8")
        if not rows:
            continue
        by = {r["config"]: r for r in rows}
        d, floor = by["default"], by["floor"]
        print(f"{name}: {d['events']} events ({d['prelude']} live before), the job's peak allocated "
              f"{floor['peak_allocated']} ({floor['peak_allocated'] / 2**30:.2f} GiB; README {gib_alloc}); "
              f"cucache's allocated {d['peak_allocated']}, reserved {d['peak_reserved']}; "
              f"PyTorch's reserved {d['torch_peak_reserved']} ({d['torch_peak_reserved'] / 2**30:.2f} GiB; "
              f"README {gib_res})")
        check(d["prelude"] == npre, f"{name}: prelude {d['prelude']}, expected {npre}")
        # the job's own peak: the floor (each block rounded to 512 bytes)
        check(floor["peak_allocated"] == peak, f"{name}: floor peak allocated {floor['peak_allocated']}, "
              f"expected {peak}")
        check(round(floor["peak_allocated"] / 2**30, 2) == gib_alloc,
              f"{name}: peak allocated {floor['peak_allocated'] / 2**30:.4f} GiB, README says {gib_alloc}")
        # the core's allocated adds what PyTorch's rules leave unsplit
        check(d["peak_allocated"] >= floor["peak_allocated"], f"{name}: cucache's allocated below the floor")
        check(d["torch_peak_reserved"] == rpeak, f"{name}: PyTorch's peak reserved {d['torch_peak_reserved']}, "
              f"expected {rpeak}")
        check(round(d["torch_peak_reserved"] / 2**30, 2) == gib_res,
              f"{name}: PyTorch's peak reserved {d['torch_peak_reserved'] / 2**30:.4f} GiB, README says {gib_res}")
        check(by["floor"]["peak_allocated"] <= d["peak_allocated"], f"{name}: floor above allocated")
        for r in rows:
            check(r["reserved_covers_allocated"], f"{name} [{r['config']}]: reserved fell below allocated")
            check(r["peak_reserved"] >= r["peak_allocated"], f"{name} [{r['config']}]: peak reserved below allocated")
            check(r["ooms"] == 0, f"{name} [{r['config']}]: {r['ooms']} OOMs at 80 GiB")
            check(r["skipped"] == 0, f"{name} [{r['config']}]: {r['skipped']} events skipped")
        # a capacity below the job's needs: OOMs, and where
        small = replay_json(path, "default", capacity=f"{int(peak * 0.8) >> 20}M")
        if small:
            check(small[0]["ooms"] > 0 and small[0]["first_oom_event"] is not None,
                  f"{name}: no OOM at 80% of the peak")
    return True


def constructed(tmp):
    M = 1 << 20
    ev = lambda action, addr, size, t, stream=0: {"action": action, "addr": addr, "size": size, "stream": stream,
                                                   "time_us": t, "frames": []}
    snap = {
        "segments": [
            {"device": 0, "address": 0x10000000, "total_size": 20 * M, "stream": 0, "segment_type": "large",
             "blocks": [{"address": 0x10000000, "size": 4 * M, "requested_size": 4 * M - 100, "state": "active_allocated"},
                        {"address": 0x10400000, "size": 16 * M, "requested_size": 0, "state": "inactive"}]},
            {"device": 1, "address": 0x90000000, "total_size": 2 * M, "stream": 0, "segment_type": "small",
             "blocks": [{"address": 0x90000000, "size": 2 * M, "requested_size": 0, "state": "inactive"}]},
        ],
        "device_traces": [
            [ev("free_completed", 0x20000000, 3 * M, 100),   # live before: freed without an allocation
             ev("segment_free", 0x20000000, 20 * M, 101),
             ev("alloc", 0x10400000, 10 * M, 102),
             ev("free_requested", 0x10400000, 10 * M, 103),
             ev("free_completed", 0x10400000, 10 * M, 104),
             {"action": "oom", "device_free": 1234, "size": 30 * M, "stream": 0, "time_us": 105, "frames": []}],
            [ev("segment_alloc", 0x90000000, 2 * M, 101),
             ev("alloc", 0x90000000, 1000, 103)],
        ],
        "allocator_settings": {},
    }
    path = os.path.join(tmp, "made.pickle")
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    rows = replay_json(path, "default")
    if not rows:
        return
    d, floor = rows[0], rows[-1]
    peak, rpeak, npre = reference(snap)
    check(d["prelude"] == 2 and npre == 2, f"constructed: prelude {d['prelude']}, expected 2")
    # 4 MiB live throughout, 1000 B on device 1 from t=103, and the failed
    # 30 MiB, which fits at 80 GiB: every column asks it again at its moment
    # and releases it at once, the floor too (check_failed.py has more)
    check(d["peak_allocated"] == 4 * M + 30 * M + 1024 == peak,
          f"constructed: peak allocated {d['peak_allocated']}, expected {4 * M + 30 * M + 1024} ({peak})")
    check(floor["peak_allocated"] == 4 * M + 30 * M + 1024,
          f"constructed: the floor's peak {floor['peak_allocated']}, expected {4 * M + 30 * M + 1024} "
          "(the failed request counted)")
    # reserved before: 22 MiB final - 2 MiB allocated + 20 MiB freed = 40 MiB; peak 40 MiB
    check(d["torch_peak_reserved"] == 40 * M == rpeak,
          f"constructed: PyTorch's peak reserved {d['torch_peak_reserved']}, expected {40 * M}")
    check(d["devices"] == 2, f"constructed: {d['devices']} devices, expected 2")
    check(d["ooms"] == 0, "constructed: the oom event, retried at 80 GiB, should fit")
    check(d["events"] == 2 + 5, f"constructed: {d['events']} events, expected 7")
    per = {p["device"]: p for p in d["per_device"]}
    check(per[1]["peak_allocated"] == 1024, f"constructed: device 1 peak allocated {per[1]['peak_allocated']}")
    # the table names PyTorch's figure
    t = replay(path)
    check(t.returncode == 0 and "PyTorch's own peak reserved" in t.stdout and "vs PyTorch's reserved" in t.stdout,
          f"constructed: the table lacks PyTorch's reserved: {t.stdout}{t.stderr}")


def broken(tmp):
    import collections

    def expect_error(name, data, *want):
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        rptest.expect_error(REPLAY, path, *want)

    expect_error("global.pickle", pickle.dumps({"device_traces": collections.OrderedDict()}, protocol=2),
                 "offset", "GLOBAL", "refused")
    expect_error("stack_global.pickle", pickle.dumps({"device_traces": [collections.OrderedDict()]}, protocol=4),
                 "offset", "STACK_GLOBAL")
    good = pickle.dumps({"device_traces": [[{"action": "alloc", "addr": 4096, "size": 512}]]}, protocol=4)
    for cut in (3, len(good) // 2, len(good) - 1):
        expect_error(f"cut{cut}.pickle", good[:cut], "PyTorch snapshot", "offset")
    expect_error("list.pickle", pickle.dumps([1, 2, 3], protocol=4), "not a PyTorch memory snapshot")
    expect_error("badfield.pickle",
                 pickle.dumps({"device_traces": [[{"action": "alloc", "addr": "0x10", "size": 512}]]}, protocol=4),
                 "device_traces[0][0]: 'addr' is str")
    expect_error("empty.bin", b"", "empty file")
    expect_error("text.txt", b"hello\n", "not a trace this tool reads")
    p = replay(os.path.join(tmp, "does-not-exist"))
    check(p.returncode == 1 and "No such file" in p.stderr, f"missing file: {p.stderr!r}")
    # the other traces are still replayed
    made = os.path.join(tmp, "made.pickle")
    p = replay("--json", os.path.join(tmp, "text.txt"), made)
    check(p.returncode == 1 and '"trace": ' in p.stdout, "a bad trace stopped the good one after it")
    p = replay("--conf", "max_split_size_mb:abc", made)
    check(p.returncode == 2 and "max_split_size_mb" in p.stderr, f"bad --conf: {p.returncode} {p.stderr!r}")
    for args, want in ((["--bogus", made], "unknown option --bogus"), ([], "usage:"),
                       (["--capacity", "lots", made], "--capacity lots"), ([made, "--conf"], "--conf needs a value")):
        p = replay(*args)
        check(p.returncode == 2 and want in p.stderr, f"{args}: {p.returncode} {p.stderr!r}, expected {want!r}")
    p = replay("--conf", "help")
    check(p.returncode == 0 and "max_split_size_mb" in p.stdout, f"--conf help: {p.returncode}")
    # options after the trace are options too
    p = replay(made, "--json", "--no-reference")
    check(p.returncode == 0 and len(p.stdout.splitlines()) == 1, f"options after the trace: {p.stdout!r}")


with tempfile.TemporaryDirectory() as tmp:
    ran_shared = shared_traces()
    constructed(tmp)
    broken(tmp)
print(f"{len(failures)} failures")
if not failures and not ran_shared:
    print("skipped: parts 2 and 3 passed, part 1 (the shared traces) did not run")
    sys.exit(77)
sys.exit(1 if failures else 0)
