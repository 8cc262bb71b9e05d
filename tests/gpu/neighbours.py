#!/usr/bin/env python3
"""Two cucache processes on one GPU (scripts/gpu-check's neighbours steps).

    neighbours.py nvml  CUCACHE_RUN CUCACHE_TOP
        a holder under cucache keeps 1 GiB live and 2 GiB cached; cucache-top
        --json must list it with NVML's bytes, as nvidia-smi
        --query-compute-apps does (skipped where nvidia-smi is absent), and
        with 1 GiB allocated and at least 2 GiB cached
    neighbours.py yield CUCACHE_RUN CUCACHE_TOP
        with the holder as above, a second process under cucache asks for
        the device's free memory plus 1 GiB in one cudaMalloc: served only
        when the holder gives its idle cache back; the holder's exit summary
        must count what it gave
    neighbours.py hold LIVE_MIB CACHED_MIB | need MIB
        the two processes (run under cucache-run by the above)

The runtime is reached with ctypes: NEIGHBOURS_CUDART names the library,
else libcudart.so.13, .so.12 or .so are tried.  Lines "result: PASS ..." or
"result: FAIL ..." end the two checks; exit 0 on PASS, 1 on FAIL.
"""
import ctypes
import json
import os
import shutil
import subprocess
import sys

MIB = 1 << 20


def cudart():
    names = [os.environ.get("NEIGHBOURS_CUDART")] + ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    for n in names:
        if not n:
            continue
        try:
            return ctypes.CDLL(n)
        except OSError:
            continue
    sys.exit("neighbours: no libcudart could be loaded (set NEIGHBOURS_CUDART)")


def malloc(rt, size):
    p = ctypes.c_void_p()
    return p if rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size)) == 0 else None


def hold(live_mib, cached_mib):
    rt = cudart()
    live = malloc(rt, live_mib * MIB)
    cached = malloc(rt, cached_mib * MIB)
    if not live or not cached:
        sys.exit("neighbours hold: cudaMalloc failed")
    rt.cudaFree(cached)
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    rt.cudaFree(live)


def need(mib):
    rt = cudart()
    p = malloc(rt, mib * MIB)
    print("served" if p else "failed", flush=True)
    sys.exit(0 if p else 3)


def meminfo_free():
    rt = cudart()
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    if rt.cudaMemGetInfo(ctypes.byref(f), ctypes.byref(t)) != 0:
        sys.exit("neighbours: cudaMemGetInfo failed")
    return f.value


def start_holder(run, live, cached):
    env = dict(os.environ, CUCACHE_REPORT="exit")
    h = subprocess.Popen([run, "--", sys.executable, __file__, "hold", str(live), str(cached)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = h.stdout.readline().split()
    if len(line) != 2 or line[0] != "ready":
        h.kill()
        print(h.stderr.read())
        sys.exit("result: FAIL the holder did not start")
    return h, int(line[1])


def stop_holder(h):
    out, err = h.communicate("\n", timeout=60)
    return err


def check_nvml(run, top):
    h, pid = start_holder(run, 1024, 2048)
    bad = []
    try:
        doc = json.loads(subprocess.run([top, "--json"], check=True, capture_output=True, text=True).stdout)
        rows = [(g, p) for g in doc["gpus"] for p in g["processes"] if p["pid"] == pid]
        if len(rows) != 1:
            bad.append(f"cucache-top lists the holder {len(rows)} times")
        else:
            g, p = rows[0]
            c = p.get("cucache") or {}
            if c.get("allocated") != 1024 * MIB:
                bad.append(f"allocated {c.get('allocated')} not 1 GiB")
            if (c.get("reserved", 0) - c.get("allocated", 0)) < 2048 * MIB:
                bad.append(f"cached {c.get('reserved', 0) - c.get('allocated', 0)} below 2 GiB")
            smi = shutil.which("nvidia-smi")
            if smi:
                q = subprocess.run([smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                   check=True, capture_output=True, text=True).stdout
                used = {int(a): int(b) for a, b in (l.split(",") for l in q.splitlines() if l.strip())}
                if pid not in used:
                    bad.append("nvidia-smi does not list the holder")
                elif p["used"] is None or abs(p["used"] // MIB - used[pid]) > 1:
                    bad.append(f"used {p['used']} by NVML through cucache-top, {used[pid]} MiB by nvidia-smi")
            print(f"holder {pid}: used {p['used']}, cucache {c}")
    finally:
        stop_holder(h)
    agree = "NVML and nvidia-smi" if shutil.which("nvidia-smi") else "NVML (no nvidia-smi here)"
    print("result: " + ("FAIL " + "; ".join(bad) if bad else f"PASS cucache-top agrees with {agree}"))
    return not bad


def check_yield(run, top):
    h, pid = start_holder(run, 1024, 2048)
    free_mib = meminfo_free() // MIB
    want = free_mib + 1024
    r = subprocess.run([run, "--", sys.executable, __file__, "need", str(want)], capture_output=True, text=True,
                       timeout=120)
    err = stop_holder(h)
    gave = [l for l in err.splitlines() if "yields: gave" in l]
    bad = []
    if r.returncode != 0 or "served" not in r.stdout:
        bad.append(f"{want} MiB not served (exit {r.returncode}): " + " | ".join(r.stderr.splitlines()[-3:]))
    if not gave or "(0 asks)" in gave[0]:
        bad.append("the holder's summary counts no yield")
    print(f"asked for {want} MiB with {free_mib} MiB free; holder: {gave[0] if gave else 'no yields line'}")
    print("result: " + ("FAIL " + "; ".join(bad) if bad else "PASS the neighbour's idle cache served the request"))
    return not bad


def main(argv):
    if len(argv) == 3 and argv[0] == "hold":
        hold(int(argv[1]), int(argv[2]))
    elif len(argv) == 2 and argv[0] == "need":
        need(int(argv[1]))
    elif len(argv) == 3 and argv[0] in ("nvml", "yield"):
        ok = (check_nvml if argv[0] == "nvml" else check_yield)(argv[1], argv[2])
        sys.exit(0 if ok else 1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
