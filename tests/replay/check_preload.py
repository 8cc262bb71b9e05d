#!/usr/bin/env python3
"""cucache-replay --preload on a small PyTorch snapshot made here: the
import's allocations and frees become cudaMalloc and cudaFree (--dump, the
note), and a request cucache's path cannot serve on a tight device is served
by the runtime's allocator, as the interposer does under cucache-run (an OOM
without --preload; none with it, one fallback; under --fit, which asks what
the cache alone serves, still an OOM).  The live counterpart, on real PyTorch
steps, is the torch suite's replay-W (tests/torch/replay_live.py).

    check_preload.py CUCACHE_REPLAY
"""
import json
import os
import pickle
import sys
import tempfile

from rptest import check, failures, replay

MiB = 1 << 20


def snapshot(path):
    """12 MiB (a segment of its own), then 1.5 MiB (a 20 MiB segment under
    PyTorch's rules), both freed: 32 MiB of segments, 14 MiB of pages."""
    ev = []
    for t, (action, addr, size) in enumerate([("alloc", 0x7F0000000000, 12 * MiB),
                                              ("alloc", 0x7F0001000000, 3 * MiB // 2),
                                              ("free_completed", 0x7F0001000000, 3 * MiB // 2),
                                              ("free_completed", 0x7F0000000000, 12 * MiB)]):
        ev.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 1000 + t})
    with open(path, "wb") as f:
        pickle.dump({"segments": [], "device_traces": [ev]}, f, protocol=4)


def one(binary, *args):
    p = replay(binary, "--json", "--no-reference", *args)
    check(p.returncode == 0, f"{args}: exit {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout.splitlines()[0]) if p.returncode == 0 else {}


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        snap = os.path.join(tmp, "tight.pickle")
        snapshot(snap)

        # the events as read: imported, or the interposer's calls
        plain = replay(binary, "--dump", snap).stdout
        pre = replay(binary, "--dump", "--preload", snap).stdout
        rows = [l.split() for l in pre.splitlines() if not l.startswith("#")]
        check(len(rows) == 4 and all(r[5] == "cudaMalloc" for r in rows), f"--dump --preload:\n{pre}")
        check(" imported " in plain and "cudaMalloc" not in plain, f"--dump without --preload:\n{plain}")

        # 24 MiB: PyTorch's rules want 32 MiB of segments
        a = one(binary, "--capacity", "24M", snap)
        b = one(binary, "--capacity", "24M", "--preload", snap)
        print(f"24 MiB: imported: {a.get('ooms')} OOM, {a.get('fallbacks')} fallbacks; --preload: {b.get('ooms')} "
              f"OOM, {b.get('fallbacks')} fallbacks; notes {b.get('notes')!r}")
        check(a.get("ooms") == 1 and a.get("fallbacks") == 0, f"imported at 24 MiB: {a}")
        check(b.get("ooms") == 0 and b.get("fallbacks") == 1, f"--preload at 24 MiB: {b}")
        check("4 allocations and frees as cudaMalloc and cudaFree" in b.get("notes", ""), f"the note: {b}")
        f = replay(binary, "--fit", "24M", "--preload", snap)
        row = [l for l in f.stdout.splitlines() if "(the defaults)" in l]
        check(f.returncode == 0 and row and row[0].split()[0] == "no", f"--fit 24M --preload:\n{f.stdout}")
    if failures:
        print(f"{len(failures)} failures")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
