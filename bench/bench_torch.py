#!/usr/bin/env python3
"""Real PyTorch training steps on the simulated GPU, PyTorch's allocator
against cucache's, side by side in one run (scripts/bench-torch runs it;
docs/performance.md, "Real PyTorch steps", explains the figures).

Every arm is its own process on a simulated device of its own size, the
workloads those of tests/torch/workloads.py.  For each workload and arm:

  fit    the smallest device on which every step runs without an OOM:
         bisection on the device's size (CUCACHE_SIM_CAPACITY) between a
         size that fails and one that runs, to --precision;
  peak   the peak reserved on a large device (PyTorch's counters for its
         own allocators, the CUDA pool's for backend:cudaMallocAsync,
         cucache's under cucache);
  allocs device allocations on the large device (cudaMalloc calls of
         PyTorch's allocator, cucache's num_device_alloc; not known for
         CUDA's pool);
  step   the median step time, each run's median, over --rounds rounds in
         which every arm runs once (interleaved);
and the same as ratios to PyTorch's default allocator.

The simulated device computes no values: a step's time is the time of its
launches and copies as the simulator costs them, plus the host's work.

    bench_torch.py --build DIR [--workloads LIST] [--arms LIST] [--steps N]
                   [--rounds R] [--precision P] [--jobs J] [--json FILE]
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS_PY = os.path.join(REPO, "tests", "torch", "workloads.py")
TORCH_ENV = os.path.join(REPO, "scripts", "torch-env")
MiB = 1 << 20
LARGE = 16 << 30  # the large device: nothing here needs more

# One row per arm: its name, whether it runs under cucache-run, the
# workload's --route, its environment, and what it is.
ARMS = (
    ("torch", False, "torch", {}, "PyTorch's caching allocator, defaults"),
    ("torch-exp", False, "torch", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
     "PyTorch's, expandable_segments:True"),
    ("torch-async", False, "torch", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
     "PyTorch's backend:cudaMallocAsync (the simulator's CUDA pool)"),
    ("cucache", True, "preload", {}, "cucache-run, its defaults (PyTorch's cache off)"),
    ("cucache-exp", True, "preload", {"CUCACHE_CONF": "expandable_segments:true"},
     "cucache-run, CUCACHE_CONF=expandable_segments:true"),
    ("cucache-plug", True, "pluggable", {}, "cucache.torch.enable() under cucache-run"),
    ("cucache-async", True, "preload", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
     "cucache-run under PyTorch's backend:cudaMallocAsync"),
)
ARM = {a[0]: a for a in ARMS}
FIXED = ("mlp", "gpt", "cnn")
CHANGING = ("packed", "generate", "mixres")
STREAMS = ("sidestream",)  # a second stream's work on the first's blocks (record_stream)


class Bench:
    def __init__(self, build, steps):
        self.build = os.path.abspath(build)
        self.simlib = os.path.join(self.build, "subprojects", "cusim", "lib")
        self.run_bin = os.path.join(self.build, "cucache-run")
        self.steps = steps

    def run(self, workload, arm, capacity):
        """One process: (ok, its result line or None, the tail of stderr)."""
        name, cucache, route, env, _ = ARM[arm]
        base = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root",
            "PYTHONPATH": os.path.join(REPO, "python"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "CUCACHE_SIM_CAPACITY": str(capacity),
        }
        base.update(env)
        cmd = ["python3", WORKLOADS_PY, workload, "--route", route, "--steps", str(self.steps)]
        if cucache:
            cmd = [self.run_bin, "--sim", "--"] + cmd
        else:
            base["LD_LIBRARY_PATH"] = self.simlib
        full = [TORCH_ENV, "run", "env", "-i"] + [f"{k}={v}" for k, v in base.items()] + cmd
        p = subprocess.run(full, capture_output=True, text=True, timeout=1800, cwd=REPO)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        res = json.loads(lines[-1]) if lines else None
        ok = p.returncode == 0 and res is not None and res["steps"] == self.steps
        return ok, res, p.stderr[-2000:]


def counters(arm, res):
    """(peak reserved, peak allocated, device allocations) as the arm's
    allocator counts them (None: not known)."""
    if ARM[arm][1]:
        c = res["cucache"] or {}
        return c.get("reserved_bytes.all.peak"), c.get("allocated_bytes.all.peak"), c.get("num_device_alloc")
    t = res["torch"]
    if "unavailable" in t:
        return None, None, None
    allocs = None if arm == "torch-async" else t.get("segment.all.allocated")
    return t.get("reserved_bytes.all.peak"), t.get("allocated_bytes.all.peak"), allocs


def fit(bench, workload, arm, peak, live, precision, log):
    """The smallest device (bytes, to precision) on which every step runs.
    Between the peak of live bytes (no device smaller than what is live at
    once can run the steps: not tried) and a size that runs."""
    def probe(size):
        ok, _, err = bench.run(workload, arm, size)
        log(f"  {workload} {arm}: {size // MiB} MiB {'runs' if ok else 'fails'}")
        return ok, err

    hi = max(int(peak * 1.05) + 64 * MiB, 256 * MiB) if peak else 4 << 30
    while True:
        ok, err = probe(hi)
        if ok:
            break
        if hi >= LARGE:
            raise SystemExit(f"{workload} {arm}: fails even on {LARGE >> 20} MiB:\n{err}")
        hi *= 2
    if live:
        lo = live
    else:
        lo = hi // 2
        while probe(lo)[0]:
            hi, lo = lo, lo // 2
    while hi - lo > precision * hi and hi - lo > MiB:
        mid = (lo + hi) // 2 // MiB * MiB
        if probe(mid)[0]:
            hi = mid
        else:
            lo = mid
    return hi


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="a cucache build directory (release: build-bench)")
    ap.add_argument("--workloads", default=",".join(FIXED + CHANGING + STREAMS))
    ap.add_argument("--arms", default=",".join(a[0] for a in ARMS))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of step timing")
    ap.add_argument("--precision", type=float, default=0.01, help="the bisection's relative precision")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="bisections run at once")
    ap.add_argument("--json", help="write every figure to this file too")
    ap.add_argument("--no-fit", action="store_true", help="step times, peaks and allocations only: no bisection")
    a = ap.parse_args()
    workloads = a.workloads.split(",")
    arms = a.arms.split(",")
    for w in workloads:
        if w not in FIXED + CHANGING + STREAMS:
            ap.error(f"unknown workload '{w}' ({', '.join(FIXED + CHANGING + STREAMS)})")
    for arm in arms:
        if arm not in ARM:
            ap.error(f"unknown arm '{arm}' ({', '.join(ARM)})")
    if "torch" not in arms:
        ap.error("the ratios are to PyTorch's default allocator: --arms must include 'torch'")
    bench = Bench(a.build, a.steps)
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    figures = {w: {arm: {} for arm in arms} for w in workloads}
    # 1. on a large device, interleaved rounds: step times, peak, allocations
    for r in range(a.rounds):
        for w in workloads:
            for arm in arms:
                ok, res, err = bench.run(w, arm, LARGE)
                if not ok:
                    raise SystemExit(f"{w} {arm} fails on the large device:\n{err}")
                f = figures[w][arm]
                f.setdefault("steps_s", []).append(res["step_s"])
                f["peak"], f["live"], f["allocs"] = counters(arm, res)
                log(f"round {r + 1}: {w} {arm}: step {res['step_s'] * 1e3:.2f} ms, peak {f['peak']}")
    # 2. the smallest device, bisections run side by side
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        jobs = {(w, arm): pool.submit(fit, bench, w, arm, figures[w][arm]["peak"], figures[w][arm]["live"],
                                      a.precision, log)
                for w in workloads for arm in arms if not a.no_fit}
        for w in workloads:
            for arm in arms:
                figures[w][arm]["fit"] = jobs[(w, arm)].result() if (w, arm) in jobs else None

    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"{stamp}, cucache {commit}, {cpu}, {os.cpu_count()} CPUs; {a.steps} steps a run, "
          f"{a.rounds} rounds, fit to {a.precision:.0%}\n")
    print("| workload | arm | smallest device MiB | x torch | peak reserved MiB | x torch | device allocs "
          "| step ms | x torch |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")

    def ratio(x, y):
        return f"{x / y:.3f}" if x is not None and y else "-"

    for w in workloads:
        base = figures[w]["torch"]
        for arm in arms:
            f = figures[w][arm]
            f["step"] = statistics.median(f["steps_s"])
            fit_mib = f"{f['fit'] / MiB:.0f}" if f["fit"] else "-"
            print(f"| {w} | {arm} | {fit_mib} | {ratio(f['fit'], base['fit'])} "
                  f"| {f['peak'] / MiB if f['peak'] else float('nan'):.0f} | {ratio(f['peak'], base['peak'])} "
                  f"| {f['allocs'] if f['allocs'] is not None else '-'} | {f['step'] * 1e3:.2f} "
                  f"| {ratio(f['step'], statistics.median(base['steps_s']))} |")
    # 3. the targets, as the figures say
    print()
    for w in workloads if not a.no_fit else ():
        fw = figures[w]
        lines = []
        if "cucache" in fw:
            lines.append(f"cucache's default {'<=' if fw['cucache']['fit'] <= fw['torch']['fit'] else '>'} "
                         f"PyTorch's default ({ratio(fw['cucache']['fit'], fw['torch']['fit'])})")
        if "cucache-exp" in fw and "torch-exp" in fw:
            lines.append(f"cucache's expandable {'<=' if fw['cucache-exp']['fit'] <= fw['torch-exp']['fit'] else '>'}"
                         f" PyTorch's expandable ({ratio(fw['cucache-exp']['fit'], fw['torch-exp']['fit'])})")
        ours = [arm for arm in fw if ARM[arm][1]]
        theirs = [arm for arm in fw if not ARM[arm][1]]
        if ours and theirs:
            best_ours = min(ours, key=lambda arm: fw[arm]["fit"])
            best_theirs = min(theirs, key=lambda arm: fw[arm]["fit"])
            lines.append(f"best cucache {best_ours} {fw[best_ours]['fit'] / MiB:.0f} MiB against best PyTorch "
                         f"{best_theirs} {fw[best_theirs]['fit'] / MiB:.0f} MiB "
                         f"({ratio(fw[best_ours]['fit'], fw[best_theirs]['fit'])})")
        print(f"- {w}: " + "; ".join(lines))
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"date": stamp, "commit": commit, "cpu": cpu, "steps": a.steps, "rounds": a.rounds,
                       "precision": a.precision, "figures": figures}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
