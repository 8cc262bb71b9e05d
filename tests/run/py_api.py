"""Proves scripts/cucache.py, the Python wrapper of cucache's API, in a
Python process run by cucache-run --sim: memory_stats' keys and figures
follow the allocations made through the (simulated) CUDA runtime with
ctypes, the torch.cuda-style shortcuts agree, peaks reset, empty_cache gives
cached segments back, memory_summary and snapshot work, a MemPool's
allocations land in a private pool (seen in the snapshot's JSON),
record_memory_history starts recording (with stacks) and stops it at run
time, and an unused device raises CucacheError.  With `absent` (run without cucache):
available() is False and calls raise CucacheError naming the cause.

Seen to fail: with memory_stats' callback dropping keys (a scratch copy),
the key checks fail; without cucache-run, the present mode fails at once.
"""
import ctypes
import json
import os
import sys
import tempfile

# PY_API_INSTALLED=DIR: the package as pip or meson installed it in DIR
# (on PYTHONPATH); else the source tree's scripts/cucache.py
if not os.environ.get("PY_API_INSTALLED"):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import cucache  # noqa: E402

if os.environ.get("PY_API_INSTALLED"):
    where = os.path.realpath(cucache.__file__)
    if not where.startswith(os.path.realpath(os.environ["PY_API_INSTALLED"]) + os.sep):
        sys.exit(f"py_api: FAILED: cucache imported from {where}, not from $PY_API_INSTALLED")

MiB = 1 << 20


def check(cond, what):
    if not cond:
        print(f"py_api: FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def absent():
    check(not cucache.available(), "available() without cucache")
    try:
        cucache.memory_stats(0)
    except cucache.CucacheError as e:
        check("not loaded" in str(e), f"the message names the cause: {e}")
    else:
        check(False, "memory_stats without cucache raises")


def present():
    check(cucache.available(), "available() under cucache-run")
    check(cucache.version().count(".") == 2, "version")
    rt = ctypes.CDLL("libcudart.so.13")
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaFree.argtypes = [ctypes.c_void_p]

    def malloc(n):
        p = ctypes.c_void_p()
        check(rt.cudaMalloc(ctypes.byref(p), n) == 0, f"cudaMalloc({n})")
        return p

    ptrs = [malloc(4 * MiB) for _ in range(3)]
    s = cucache.memory_stats(0)
    for key in ("allocated_bytes.all.current", "reserved_bytes.large_pool.peak", "num_ooms", "max_split_size",
                "num_cache_hits", "inactive_split_bytes.small_pool.freed"):
        check(key in s, f"memory_stats has {key}")
    check(s["allocated_bytes.all.current"] == 12 * MiB, "allocated_bytes.all.current == 12 MiB")
    check(cucache.memory_allocated(0) == 12 * MiB, "memory_allocated")
    check(cucache.memory_reserved(0) >= 12 * MiB, "memory_reserved")
    rt.cudaFree(ptrs.pop())
    check(cucache.memory_allocated(0) == 8 * MiB, "memory_allocated after a free")
    check(cucache.max_memory_allocated(0) == 12 * MiB, "max_memory_allocated")
    cucache.reset_peak_memory_stats(0)
    check(cucache.max_memory_allocated(0) == 8 * MiB, "peak after reset_peak_memory_stats")
    cucache.reset_accumulated_memory_stats(0)
    check(cucache.memory_stats(0)["allocation.all.allocated"] == 0, "totals after reset_accumulated_memory_stats")
    for p in ptrs:
        rt.cudaFree(p)
    check(cucache.memory_reserved(0) > 0, "cached after the frees")
    cucache.empty_cache(0)
    check(cucache.memory_reserved(0) == 0, "empty_cache gives every free segment back")

    text = cucache.memory_summary(0)
    check("memory summary, device ID 0" in text and "verdict: everything freed" in text, "memory_summary:\n" + text)

    with tempfile.TemporaryDirectory() as tmp:
        pool = cucache.MemPool(0)
        check(pool.id > 0, "MemPool id")
        with pool:
            inside = malloc(3 * MiB)
        outside = malloc(3 * MiB)
        path = os.path.join(tmp, "snap-%p.pickle")
        cucache.snapshot(path)
        got = os.path.join(tmp, f"snap-{os.getpid()}.json")
        with open(got) as f:
            snap = json.load(f)
        def pool_of(ptr):
            return [tuple(seg["segment_pool_id"]) for seg in snap["segments"]
                    if seg["address"] <= ptr.value < seg["address"] + seg["total_size"]]

        check(pool_of(inside) == [(0, pool.id)], f"the MemPool's allocation is in pool {pool.id}: {pool_of(inside)}")
        check(pool_of(outside) == [(0, 0)], f"the allocation after the with block is in the default pools: "
              f"{pool_of(outside)}")
        rt.cudaFree(inside)
        rt.cudaFree(outside)
        pool.close()
        try:
            cucache.snapshot(os.path.join(tmp, "no-such-dir", "x.pickle"))
        except cucache.CucacheError:
            pass
        else:
            check(False, "a snapshot into a missing directory raises")

    # recording started and stopped at run time (no CUCACHE_SNAPSHOT here)
    with tempfile.TemporaryDirectory() as tmp:
        def dump(name):
            cucache.dump_snapshot(os.path.join(tmp, name + ".pickle"))
            with open(os.path.join(tmp, name + ".json")) as f:
                return json.load(f)

        check(all(not t for t in dump("before")["device_traces"]), "no events before recording starts")
        cucache.record_memory_history("all", max_entries=1000, stacks="all", depth=8)
        a = malloc(5 * MiB)
        rt.cudaFree(a)
        snap = dump("on")
        events = snap["device_traces"][0]
        mine = [e for e in events if e["action"] == "alloc" and e["addr"] == a.value]
        check(len(mine) == 1, f"the allocation made while recording is in the trace: {events}")
        check(len(mine[0]["frames"]) >= 1, f"with stacks='all' it has frames: {mine[0]}")
        check(any(e["action"] == "free_requested" and e["addr"] == a.value for e in events), "and its free")
        cucache.record_memory_history(None)
        b = malloc(6 * MiB)
        events = dump("off")["device_traces"][0]
        check(not any(e["action"] == "alloc" and e["addr"] == b.value and e["size"] >= 6 * MiB for e in events),
              "nothing recorded after record_memory_history(None)")
        check(any(e["action"] == "alloc" and e["addr"] == a.value for e in events), "what was recorded stays")
        rt.cudaFree(b)
        for bad in ({"stacks": "pyton"}, {"enabled": "yes"}, {"max_entries": 0}):
            try:
                cucache.record_memory_history(**bad)
            except ValueError:
                pass
            else:
                check(False, f"record_memory_history({bad}) raises ValueError")

    try:
        cucache.memory_stats(5)
    except cucache.CucacheError as e:
        check("device 5" in str(e), f"the message names the device: {e}")
    else:
        check(False, "an unused device raises")


if __name__ == "__main__":
    absent() if sys.argv[1:] == ["absent"] else present()
    print("py_api: ok")
