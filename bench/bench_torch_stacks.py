#!/usr/bin/env python3
"""What recording each allocation's Python stack costs inside a real
PyTorch training step: cucache's CUCACHE_STACKS=python against PyTorch's
own torch.cuda.memory._record_memory_history(stacks="python") on its own
allocator, the same steps, the same simulated device, in one run
(scripts/bench-torch --stacks runs it; docs/performance.md, "Python frames
inside a real step", has the last figures).

Arms, each its own process, in interleaved rounds:

  torch          PyTorch's caching allocator, nothing recorded
  torch-hist     the same with _record_memory_history(context="alloc",
                 stacks="python"): PyTorch's stack of every allocation
  cucache        cucache.torch.enable() (cucache is PyTorch's allocator)
  cucache-py     the same with CUCACHE_STACKS=python
  preload        cucache-run under PyTorch's allocator with its cache off
  preload-py     the same with CUCACHE_STACKS=python

For each arm: the median over the rounds of each run's median step time,
wall and process CPU (every thread of the process, the simulator's too),
and the allocations a step makes; then, in the same process, a loop of
torch.empty + del of 16 KiB called 25 Python frames deep (about a model's
forward), in the thread's own CPU time per pair: the recording's cost
without the step's noise.  What recording adds is each recording arm's
time less its plain arm's; the ratio cucache / PyTorch compares those
additions.  The simulated device computes no values: a step's time
is the host's work plus its launches as the simulator costs them.

    bench_torch_stacks.py --build DIR [--workload W] [--steps N] [--rounds R]
                          [--arms LIST]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_ENV = os.path.join(REPO, "scripts", "torch-env")
LARGE = 16 << 30
LOOP_DEPTH = 25  # about a model's forward: Module.__call__, _call_impl and forward at each level
LOOP_PAIRS = 50000

# One row per arm: whether it runs under cucache-run, the child's route,
# whether PyTorch's history records, its environment.
ARMS = {
    "torch": (False, "torch", False, {}),
    "torch-hist": (False, "torch", True, {}),
    "cucache": (True, "pluggable", False, {}),
    "cucache-py": (True, "pluggable", False, {"CUCACHE_STACKS": "python"}),
    "preload": (True, "preload", False, {}),
    "preload-py": (True, "preload", False, {"CUCACHE_STACKS": "python"}),
}
# What each recording arm is compared with.
PAIRS = (("torch-hist", "torch"), ("cucache-py", "cucache"), ("preload-py", "preload"))


def child(workload, steps, route, history):
    sys.path.insert(0, os.path.join(REPO, "tests", "torch"))
    import torch
    import workloads

    if route == "pluggable":
        import cucache.torch
        cucache.torch.enable()
    torch.manual_seed(0)
    if history:
        torch.cuda.memory._record_memory_history(context="alloc", stacks="python", max_entries=100000)
    dev = torch.device("cuda")
    model, step_fn, trains = workloads.make(workload, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3) if trains else None
    wall, cpu = [], []
    allocs = []
    for i in range(steps):
        n0 = allocations(torch)
        t0, c0 = time.perf_counter(), time.process_time()
        workloads.run_step(opt, step_fn, trains, i)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        allocs.append(allocations(torch) - n0)
    loop = deep_loop(torch, LOOP_DEPTH, LOOP_PAIRS)
    if history:
        snap = torch.cuda.memory._snapshot()
        frames = sum(len(e.get("frames", [])) for t in snap["device_traces"] for e in t)
        events = sum(len(t) for t in snap["device_traces"])
        torch.cuda.memory._record_memory_history(enabled=None)
    else:
        frames = events = None
    # the first step builds the caches, the kernels' plans and the optimizer's state
    print(json.dumps({"wall": statistics.median(wall[1:]), "cpu": statistics.median(cpu[1:]),
                      "allocs": statistics.median(allocs[1:]), "loop": loop, "frames": frames, "events": events}),
          flush=True)


def deep_loop(torch, depth, pairs):
    """Thread CPU seconds per torch.empty + del of 16 KiB, the call `depth`
    Python frames deep (the loop alone, without the step's kernels)."""
    def nest(k, n):
        if k > 1:
            return nest(k - 1, n)
        t0 = time.thread_time()
        for _ in range(n):
            t = torch.empty(4096, device="cuda")
            del t
        return (time.thread_time() - t0) / n

    nest(depth, pairs // 10)
    return nest(depth, pairs)


def allocations(torch):
    """Allocations so far: cucache's count where it serves them (PyTorch's
    own counts nothing with its cache off, and its pluggable allocator has
    no statistics in 2.6), else PyTorch's."""
    try:
        import cucache
        if cucache.available():
            return cucache.memory_stats().get("allocation.all.allocated", 0)
    except ImportError:
        pass
    return torch.cuda.memory_stats().get("allocation.all.allocated", 0)


def run(build, arm, workload, steps):
    under, route, history, env = ARMS[arm]
    base = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "PYTHONPATH": os.path.join(REPO, "python"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "CUCACHE_SIM_CAPACITY": str(LARGE),
    }
    base.update(env)
    cmd = ["python3", os.path.abspath(__file__), "--child", workload, str(steps), route, "1" if history else "0"]
    if under:
        cmd = [os.path.join(build, "cucache-run"), "--sim", "--"] + cmd
    else:
        base["LD_LIBRARY_PATH"] = os.path.join(build, "subprojects", "cusim", "lib")
    full = [TORCH_ENV, "run", "env", "-i"] + [f"{k}={v}" for k, v in base.items()] + cmd
    p = subprocess.run(full, capture_output=True, text=True, timeout=1800, cwd=REPO)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        raise SystemExit(f"{arm} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(lines[-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="a cucache build directory (release: build-bench)")
    ap.add_argument("--workload", default="gpt")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--arms", default=",".join(ARMS))
    a = ap.parse_args()
    arms = a.arms.split(",")
    for arm in arms:
        if arm not in ARMS:
            ap.error(f"unknown arm '{arm}' ({', '.join(ARMS)})")
    build = os.path.abspath(a.build)
    got = {arm: [] for arm in arms}
    for r in range(a.rounds):
        for arm in arms:
            res = run(build, arm, a.workload, a.steps)
            got[arm].append(res)
            print(f"round {r + 1}: {arm}: wall {res['wall'] * 1e3:.2f} ms, cpu {res['cpu'] * 1e3:.2f} ms, "
                  f"{res['allocs']:.0f} allocations a step", file=sys.stderr, flush=True)
    med = {arm: {k: statistics.median(x[k] for x in got[arm]) for k in ("wall", "cpu", "allocs", "loop")}
           for arm in arms}
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    cpu_name = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, cucache {commit}, {cpu_name}, {os.cpu_count()} CPUs; "
          f"workload {a.workload}, {a.steps} steps a run (the first not counted), {a.rounds} rounds\n")
    print(f"| arm | step wall ms | step CPU ms | allocations a step | loop us a pair ({LOOP_DEPTH} frames deep) |")
    print("|---|---:|---:|---:|---:|")
    for arm in arms:
        m = med[arm]
        print(f"| {arm} | {m['wall'] * 1e3:.2f} | {m['cpu'] * 1e3:.2f} | {m['allocs']:.0f} | {m['loop'] * 1e6:.2f} |")
    print()
    added = {}
    for rec, plain in PAIRS:
        if rec in med and plain in med:
            n = med[rec]["allocs"] or 1
            added[rec] = {k: (med[rec][k] - med[plain][k]) for k in ("wall", "cpu", "loop")}
            print(f"- {rec} adds {added[rec]['wall'] * 1e3:.2f} ms wall, {added[rec]['cpu'] * 1e3:.2f} ms CPU a "
                  f"step ({added[rec]['cpu'] / n * 1e6:.2f} us CPU an allocation); in the loop "
                  f"{added[rec]['loop'] * 1e6:.2f} us a pair")
    for ours in ("cucache-py", "preload-py"):
        if ours in added and "torch-hist" in added:
            t = added["torch-hist"]
            step = f"{added[ours]['cpu'] / t['cpu']:.2f}" if t["cpu"] > 0 else "- (PyTorch's added nothing measurable)"
            loop = f"{added[ours]['loop'] / t['loop']:.2f}" if t["loop"] > 0 else "-"
            print(f"- {ours} / torch-hist, what recording adds: step CPU {step}, loop {loop}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
