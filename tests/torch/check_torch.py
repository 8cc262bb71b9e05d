#!/usr/bin/env python3
"""Real PyTorch on the simulated GPU (suite 'torch'): one case per test.

    check_torch.py BUILD_DIR CASE

Each case runs Debian's unmodified PyTorch (the root scripts/torch-env
makes) on the simulator built in BUILD_DIR, with the race detector fatal
(CUCACHE_SIM_RACE_FATAL=1: a race aborts the run), and checks what it can:

    alone-W       workload W (mlp, gpt, cnn) with PyTorch's own allocator
                  and nothing of cucache: its steps run, PyTorch counts
                  its memory
    preload-W     W under cucache-run --sim, as a user runs it: cucache-run
                  turns PyTorch's cache off, cucache serves every tensor
                  (allocations and hits counted)
    pluggable-W   W through cucache.torch.enable() under cucache-run
    snapshot      PyTorch's _record_memory_history/_dump_snapshot on its
                  own allocator: the pickle holds the segments and events
    keep-cache    cucache-run --keep-torch-cache: PyTorch's cache stays on,
                  and cucache says once what that means
    oom           an allocation larger than the device: PyTorch's own
                  OutOfMemoryError and message with its allocator; under
                  cucache-run (its cache off) OutOfMemoryError too, where
                  PyTorch with its cache off raises RuntimeError, and
                  cucache's report; with backend:cudaMallocAsync under
                  cucache, OutOfMemoryError; each time the program goes
                  on (an allocation and a launch after the failure)
    pluggable-oom the MLP through cucache.torch.enable() on devices too
                  small for it (its backward pass fails; AdamW's step
                  fails): the step that fails raises OutOfMemoryError with
                  PyTorch's OOM words (never a null tensor: no step
                  completes after cucache's OOM report), and the program
                  that catches it frees its model and allocates more than
                  was free at the OOM
    api-R         cucache.torch's statistics on route R (preload,
                  pluggable): equal to the tensors' sizes rounded as
                  cucache rounds, to cucache's own statistics, and, once
                  installed, behind torch.cuda's calls (api_prog.py)
    leak          the leak check at exit with native stacks: PyTorch's
                  cuBLAS workspace kept for the life of the process, not
                  a leak; a cudaMalloc never freed still one
    graphs        torch.cuda.graph capture and replay and
                  make_graphed_callables (graph_prog.py) run on every
                  route; through cucache.torch each graph allocates to a
                  private pool of cucache's, as many as PyTorch's own
                  allocator makes, and the peak reserved is PyTorch's own
    record-stream PyTorch's record_stream pattern (record_stream_prog.py)
                  on a device where it fits only by reusing blocks still
                  read by a side stream: PyTorch's allocator waits on the
                  host; through cucache.torch no race (the detector is
                  fatal) and no host wait, the stream waiting on the
                  device; with that wait left out (planted) the detector
                  sees the race
    whatif        the decoder at a capacity where cucache's defaults fail:
                  the OOM report's what-if names settings; each, applied,
                  serves the failed request and everything before it (it
                  runs every step, or fails only later), and one runs
                  every step
    replay-W      cucache-replay of PyTorch's own snapshot of workload W
                  (every workload of workloads.py) against the live runs:
                  PyTorch's peak, cucache's peak (--preload) and the
                  smallest device of each (replay_live.py says how)
    expandable    PyTorch's own expandable_segments:True runs the MLP
    async         PyTorch's own backend:cudaMallocAsync runs the MLP
    two-procs     a trainer idling on a large cache and an evaluator whose
                  peak needs it, on one shared simulated GPU: PyTorch's
                  own allocator fails the evaluator, cucache (cucache-run,
                  cucache.torch.enable()) gives it the trainer's idle cache
                  and the giver's statistics stay right (two_procs.py)

Exit 77 (skipped) when not root or when the root is missing or stale:
scripts/torch-check makes it and runs this suite.
"""
import json
import os
import pickle
import re
import subprocess
import sys

import replay_live

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TORCH_ENV = os.path.join(REPO, "scripts", "torch-env")
WORKLOADS = os.path.join(HERE, "workloads.py")
CACHE_ON = "PyTorch's own caching allocator is on"  # interpose/framework.c's line


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


class Env:
    def __init__(self, build):
        self.build = os.path.abspath(build)
        self.simlib = os.path.join(self.build, "subprojects", "cusim", "lib")
        self.run_bin = os.path.join(self.build, "cucache-run")
        self.python_dir = os.path.join(REPO, "python")

    def run(self, argv, env=None, cucache=False, timeout=900):
        """Runs argv inside the root on the simulator; returns (rc, stdout, stderr)."""
        p = subprocess.run(self.command(argv, env, cucache), capture_output=True, text=True, timeout=timeout, cwd=REPO)
        return p.returncode, p.stdout, p.stderr

    def command(self, argv, env=None, cucache=False):
        """The command line that runs argv inside the root on the simulator."""
        base = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root",
            "PYTHONPATH": self.python_dir,
            "CUCACHE_SIM_RACE_FATAL": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        base.update(env or {})
        if cucache:
            cmd = [self.run_bin, "--sim"] + argv
        else:
            base["LD_LIBRARY_PATH"] = self.simlib
            cmd = argv
        return [TORCH_ENV, "run", "env", "-i"] + [f"{k}={v}" for k, v in base.items()] + cmd

    def workload(self, name, route, cucache, env=None, extra=()):
        rc, out, err = self.run(["python3", WORKLOADS, name, "--route", route] + list(extra), env=env, cucache=cucache)
        if rc != 0:
            fail(f"{name} ({route}) exited {rc}:\n{err[-4000:]}")
        lines = [l for l in out.splitlines() if l.startswith("{")]
        if not lines:
            fail(f"{name} ({route}) printed no result:\n{out[-2000:]}\n{err[-2000:]}")
        res = json.loads(lines[-1])
        print(json.dumps(res))
        return res, err


def check_steps(res, steps=3):
    if res["steps"] != steps:
        fail(f"{res['workload']}: {res['steps']} steps ran, expected {steps}")


def case_alone(e, w):
    res, _ = e.workload(w, "torch", cucache=False)
    check_steps(res)
    if res["cucache"] is not None:
        fail("cucache is loaded in a run without it")
    t = res["torch"]
    if "unavailable" in t or t["reserved_bytes.all.peak"] <= 0 or t["allocated_bytes.all.peak"] <= 0:
        fail(f"PyTorch's allocator counted nothing: {t}")
    if t["num_ooms"] != 0:
        fail(f"PyTorch counted {t['num_ooms']} OOMs")


def check_cucache_served(res, what):
    c = res["cucache"]
    if not c:
        fail(f"{what}: cucache is not loaded in the process")
    if c.get("allocation.all.allocated", 0) <= 0:
        fail(f"{what}: cucache served no allocation: {c}")
    if c.get("num_ooms", 0) != 0:
        fail(f"{what}: cucache counted {c['num_ooms']} OOMs")
    if c.get("num_cache_hits", 0) <= 0:
        fail(f"{what}: no allocation was served from cucache's cache: {c}")


def case_preload(e, w):
    res, _ = e.workload(w, "preload", cucache=True)
    check_steps(res)
    if res["no_caching"] != "1":
        fail(f"cucache-run left PyTorch's cache on (PYTORCH_NO_CUDA_MEMORY_CACHING={res['no_caching']!r})")
    check_cucache_served(res, f"{w} (preload)")
    # every tensor is a cudaMalloc: far more allocations than segments,
    # the rest served from cucache's cache
    c = res["cucache"]
    if c["allocation.all.allocated"] <= 4 * c["segment.all.allocated"]:
        fail(f"{w} (preload): {c['allocation.all.allocated']} allocations over {c['segment.all.allocated']} segments: "
             "PyTorch's cache is still in front of cucache")


def case_pluggable(e, w):
    res, err = e.workload(w, "pluggable", cucache=True)
    check_steps(res)
    check_cucache_served(res, f"{w} (pluggable)")
    if CACHE_ON in err:
        fail(f"{w} (pluggable): cucache said PyTorch's cache is on, where cucache is PyTorch's allocator")


def case_snapshot(e):
    path = os.path.join(e.build, "torch-snapshot.pickle")
    if os.path.exists(path):
        os.unlink(path)
    res, _ = e.workload("mlp", "torch", cucache=False, extra=["--snapshot", path])
    check_steps(res)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    segs = snap.get("segments", [])
    traces = snap.get("device_traces", [[]])
    if not segs or sum(s["total_size"] for s in segs) <= 0:
        fail(f"PyTorch's snapshot holds no segment: {list(snap)}")
    actions = {ev["action"] for ev in traces[0]}
    if not {"alloc", "free_completed"} <= actions:
        fail(f"PyTorch's snapshot has no alloc/free events: {sorted(actions)}")
    print(f"snapshot: {len(segs)} segments, {len(traces[0])} events")


def case_keep_cache(e):
    res, err = e.workload("mlp", "preload", cucache=True)
    if res["no_caching"] != "1":
        fail("cucache-run did not turn PyTorch's cache off by default")
    if CACHE_ON in err:
        fail("cucache said PyTorch's cache is on, with it off")
    rc, out, err = e.run(["--keep-torch-cache", "python3", WORKLOADS, "mlp", "--route", "preload"], cucache=True)
    if rc != 0:
        fail(f"--keep-torch-cache run exited {rc}:\n{err[-3000:]}")
    res = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    if res["no_caching"] is not None:
        fail(f"--keep-torch-cache still set PYTORCH_NO_CUDA_MEMORY_CACHING={res['no_caching']}")
    if CACHE_ON not in err:
        fail(f"cucache did not say that PyTorch's cache is on:\n{err[-3000:]}")
    if err.count(CACHE_ON) != 1:
        fail("cucache said more than once that PyTorch's cache is on")


OOM_PROG = r"""
import sys, torch
try:
    x = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
except Exception as e:
    print("RAISED:" + type(e).__name__ + ":" + str(e).splitlines()[0])
    # the program goes on: an allocation and a kernel launch (whose check
    # reads the runtime's last error) after the failure
    y = torch.ones(1 << 20, device="cuda")
    torch.cuda.synchronize()
    print("AFTER:ok")
    sys.exit(0)
print("RAISED:nothing")
sys.exit(1)
"""


def oom_run(e, cucache, env):
    """What an allocation of 3 GiB on a 2 GiB device raises: (type name,
    first line of the message, stderr)."""
    env = dict(env, CUCACHE_SIM_CAPACITY="2G")
    rc, out, err = e.run(["python3", "-c", OOM_PROG], env=env, cucache=cucache)
    line = next((l for l in out.splitlines() if l.startswith("RAISED:")), None)
    if rc != 0 or not line or "AFTER:ok" not in out:
        fail(f"no exception, or none the program went on after (cucache={cucache}, {env}), exit {rc}:\n"
             f"{out[-1000:]}\n{err[-3000:]}")
    if "INTERNAL ASSERT" in out + err:
        fail(f"PyTorch asserted:\n{err[-3000:]}")
    kind, _, msg = line[len("RAISED:"):].partition(":")
    print(f"cucache={cucache} {env}: {kind}: {msg[:160]}")
    return kind, msg, err


def case_oom(e):
    # PyTorch's own allocator: its OutOfMemoryError and message
    kind, msg, _ = oom_run(e, False, {})
    if kind != "OutOfMemoryError" or "CUDA out of memory. Tried to allocate 3.00 GiB" not in msg:
        fail(f"PyTorch's allocator: not PyTorch's OOM: {kind}: {msg}")
    # cucache-run's default (PyTorch's cache off): PyTorch with its cache
    # off raises a generic RuntimeError (its uncached path checks cudaMalloc
    # like any CUDA call); under cucache-run, cucache stands in for the
    # cache and PyTorch gets its OutOfMemoryError, after cucache's report
    plain = oom_run(e, False, {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    if plain[0] != "RuntimeError":
        fail(f"PyTorch with its cache off, no cucache: {plain[:2]} (RuntimeError expected)")
    under = oom_run(e, True, {})
    if under[0] != "OutOfMemoryError" or "CUDA out of memory. Tried to allocate 3.00 GiB" not in under[1]:
        fail(f"under cucache-run PyTorch raised {under[:2]}, not its OutOfMemoryError")
    if "cucache: CUDA out of memory. Tried to allocate 3.00 GiB" not in under[2]:
        fail(f"no cucache report:\n{under[2][-3000:]}")
    # PyTorch's cudaMallocAsync backend served by cucache: OutOfMemoryError
    kind, msg, err = oom_run(e, True, {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
    if kind != "OutOfMemoryError":
        fail(f"backend:cudaMallocAsync under cucache: {kind}: {msg}")


PLUGGABLE_OOM_PROG = r"""
import gc, json, sys, torch
sys.path.insert(0, sys.argv[1])
import workloads
import cucache, cucache.torch
cucache.torch.enable()
torch.backends.cudnn.enabled = False
torch.manual_seed(0)
dev = torch.device("cuda")
model, loss_fn, _ = workloads.make("mlp", dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
out = {"steps": 0, "raised": None}
for i in range(3):
    try:
        opt.zero_grad(set_to_none=True)
        loss_fn(i).backward()
        opt.step()
        torch.cuda.synchronize()
    except Exception as e:
        out["raised"] = {"step": i, "type": type(e).__name__, "message": str(e).splitlines()[0]}
        out["held_at_oom"] = cucache.memory_stats()["allocated_bytes.all.current"]
        break
    out["steps"] += 1
    print(f"STEP {i} done", file=sys.stderr, flush=True)
del model, opt, loss_fn
gc.collect()
out["held_after_free"] = cucache.memory_stats()["allocated_bytes.all.current"]
# more than was free at the OOM: it fits only because the model went back
out["smaller"] = smaller = (int(sys.argv[2]) - out["held_at_oom"] + (3 << 20)) & ~((2 << 20) - 1)
x = torch.empty(smaller, dtype=torch.uint8, device=dev)
out["smaller_ptr"] = x.data_ptr()
out["held_smaller"] = cucache.memory_stats()["allocated_bytes.all.current"]
out["num_ooms"] = cucache.memory_stats()["num_ooms"]
print(json.dumps(out), flush=True)
"""
REPORT = "cucache: CUDA out of memory"  # every OOM report's first line, the first or a later one


def case_pluggable_oom(e):
    # 120 MiB: the backward pass fails (in autograd's thread); 200 MiB:
    # AdamW's first step, making its state
    for capacity in (120 << 20, 200 << 20):
        pluggable_oom_run(e, capacity)


def pluggable_oom_run(e, capacity):
    rc, out, err = e.run(["python3", "-c", PLUGGABLE_OOM_PROG, HERE, str(capacity)],
                         env={"CUCACHE_SIM_CAPACITY": str(capacity)}, cucache=True)
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if rc != 0 or not lines:
        fail(f"the program exited {rc}:\n{out[-2000:]}\n{err[-4000:]}")
    res = json.loads(lines[-1])
    print(json.dumps(res))
    raised = res["raised"]
    if raised is None:
        fail(f"{res['steps']} steps ran on a {capacity >> 20} MiB device and nothing was raised:\n{err[-3000:]}")
    if raised["type"] != "OutOfMemoryError" or not raised["message"].startswith("CUDA out of memory. Tried to allocate "):
        fail(f"step {raised['step']} raised {raised['type']}: {raised['message']}")
    if "cucache" not in raised["message"]:
        fail(f"the message does not name cucache: {raised['message']}")
    # no step completes after an OOM report: the report, then the exception
    reports = [i for i, l in enumerate(err.splitlines()) if l.startswith(REPORT)]
    done = [i for i, l in enumerate(err.splitlines()) if l.startswith("STEP ") and l.endswith(" done")]
    if not reports:
        fail(f"no OOM report from cucache:\n{err[-3000:]}")
    if done and done[-1] > reports[0]:
        fail(f"a step completed after cucache's OOM report (null tensors reached PyTorch):\n{err[-3000:]}")
    if len(reports) != 1 or res["num_ooms"] != 1:
        fail(f"{len(reports)} OOM reports, num_ooms {res['num_ooms']}: the program went on after the first")
    if raised["step"] != res["steps"]:
        fail(f"step {raised['step']} raised after {res['steps']} steps completed")
    # the program that caught it frees its model and goes on: the smaller
    # tensor is more than was free at the OOM
    smaller = res["smaller"]
    if not (res["held_at_oom"] + smaller > capacity and res["held_after_free"] < res["held_at_oom"]):
        fail(f"held {res['held_at_oom']} bytes at the OOM, {res['held_after_free']} after freeing, then {smaller}: "
             "the smaller allocation proves nothing")
    if not res["smaller_ptr"] or res["held_smaller"] < res["held_after_free"] + smaller:
        fail(f"the smaller tensor after the OOM: at {res['smaller_ptr']:#x}, cucache holds {res['held_smaller']}")


API_PROG = os.path.join(HERE, "api_prog.py")


def case_api(e, route):
    rc, out, err = e.run(["python3", API_PROG, "api", route], cucache=True)
    if rc != 0:
        fail(f"api_prog.py api {route} exited {rc}:\n{out[-3000:]}\n{err[-3000:]}")
    print(out.strip())


def leak_run(e, leaky):
    env = {"CUCACHE_STACKS": "native", "CUCACHE_LEAK_EXITCODE": "9"}
    argv = ["python3", API_PROG, "leak", "preload"] + (["--leak"] if leaky else [])
    return e.run(argv, env=env, cucache=True)


def case_leak(e):
    kept = "still live at exit, kept for the life of the process by the library that made it, not leaks:"
    rc, out, err = leak_run(e, False)
    lines = [l for l in err.splitlines() if "leak check" in l or "kept by" in l]
    print("\n".join(lines))
    if rc != 0 or "leak check: GPU 0: no leaks; " not in err or kept not in err:
        fail(f"without a leak: exit {rc}, the workspace not told apart:\n{err[-3000:]}")
    if "kept by PyTorch, its cuBLAS workspace" not in err or "getCurrentCUDABlasHandle" not in err:
        fail(f"the workspace's line:\n{err[-3000:]}")
    rc, out, err = leak_run(e, True)
    lines = [l for l in err.splitlines() if "leak check" in l or "kept by" in l or "exit status" in l]
    print("\n".join(lines))
    if rc != 9 or "leak check: GPU 0: 3.00 MiB in 1 allocation still live at exit, by call site:" not in err:
        fail(f"the cudaMalloc never freed is not reported as the one leak (exit {rc}):\n{err[-3000:]}")
    if "1 allocation still live at exit" not in err.split("CUCACHE_LEAK_EXITCODE")[-1] or kept not in err:
        fail(f"the exit status counts the workspace, or it is no longer told apart:\n{err[-3000:]}")


GRAPH_PROG = os.path.join(HERE, "graph_prog.py")


def graph_run(e, route):
    rc, out, err = e.run(["python3", GRAPH_PROG, route], cucache=route != "torch")
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if rc != 0 or not lines:
        fail(f"graph_prog.py {route} exited {rc}:\n{out[-2000:]}\n{err[-4000:]}")
    res = json.loads(lines[-1])
    print(json.dumps(res))
    if not res["graph"] or not res["graphed"]:
        fail(f"{route}: a capture or its replay did not give its outputs: {res}")
    return res


def case_graphs(e):
    alone = graph_run(e, "torch")
    for route in ("pluggable", "preload"):
        res = graph_run(e, route)
        c = res["cucache"]
        if c["allocation.all.allocated"] <= 0 or c["num_cache_hits"] <= 0:
            fail(f"{route}: cucache served nothing from its cache: {c}")
        if route == "pluggable":
            # the captures allocate to private pools, one per graph as in
            # PyTorch's own run, and the peak is PyTorch's own
            private = [p for p in res["pools"] if tuple(p) != (0, 0)]
            theirs = [p for p in alone["pools"] if tuple(p) != (0, 0)]
            if len(private) != len(theirs) or not private:
                fail(f"pluggable: private pools {private}, PyTorch's own allocator {theirs}")
            if c["reserved_bytes.all.peak"] != alone["torch"]["reserved_bytes.all.peak"]:
                fail(f"pluggable: peak reserved {c['reserved_bytes.all.peak']}, PyTorch's own "
                     f"{alone['torch']['reserved_bytes.all.peak']}")


RECORD_STREAM = os.path.join(HERE, "record_stream_prog.py")
RECORD_STREAM_CAPACITY = 300 << 20  # PyTorch's allocator fits only by waiting on the host for its events


def record_stream_run(e, route, env):
    env = dict(env, CUCACHE_SIM_CAPACITY=str(RECORD_STREAM_CAPACITY), CUCACHE_REPORT="exit")
    rc, out, err = e.run(["python3", RECORD_STREAM, "--route", route, "--steps", "12"], env=env,
                         cucache=route != "torch")
    lines = [l for l in out.splitlines() if l.startswith("{")]
    res = json.loads(lines[-1]) if rc == 0 and lines else None
    return rc, res, err


def case_record_stream(e):
    # PyTorch's own allocator: runs, waiting on the host for its events
    # when cudaMalloc fails (its retries)
    rc, res, err = record_stream_run(e, "torch", {})
    if res is None:
        fail(f"PyTorch's allocator, record_stream at {RECORD_STREAM_CAPACITY >> 20} MiB: exit {rc}:\n{err[-3000:]}")
    print(f"torch: {res['torch']}")
    # cucache.torch: race-free (the detector is fatal), no host wait: the
    # default stream waits on the device for the side stream's marker
    rc, res, err = record_stream_run(e, "pluggable", {})
    if res is None:
        fail(f"cucache.torch, record_stream: exit {rc}:\n{err[-3000:]}")
    print(f"cucache: {res['cucache']}")
    if "0 waits for a fence or event" not in err:
        fail(f"cucache waited on the host for a free:\n{err[-3000:]}")
    if res["cucache"]["num_alloc_retries"] != 0:
        fail(f"cucache retried: {res['cucache']}")
    # planted: the device-side wait left out (a test-only knob): the
    # detector sees the side stream's read overlap the new owner's write
    rc, res, err = record_stream_run(e, "pluggable", {"CUCACHE_TEST_NO_STREAM_WAIT": "1"})
    if rc == 0 or "RACE" not in err:
        fail(f"with the device-side wait left out, no race was seen (exit {rc})")
    print("planted (no device-side wait): the race detector caught it")


WHATIF_CAPACITY = 640 << 20  # the decoder: cucache's default needs 652 MiB, expandable segments 628


def whatif_run(e, conf):
    """The decoder, 3 steps, under cucache-run at WHATIF_CAPACITY with
    CUCACHE_CONF=conf (None: the defaults): (steps done or None, the
    report's replayed calls or None, the settings the hint names)."""
    env = {"CUCACHE_SIM_CAPACITY": str(WHATIF_CAPACITY)}
    if conf:
        env["CUCACHE_CONF"] = conf
    rc, out, err = e.run(["python3", WORKLOADS, "gpt", "--route", "preload", "--steps", "3"], env=env, cucache=True)
    lines = [l for l in out.splitlines() if l.startswith("{")]
    steps = json.loads(lines[-1])["steps"] if rc == 0 and lines else None
    if rc != 0 and "torch.OutOfMemoryError" not in err:
        fail(f"CUCACHE_CONF={conf}: exited {rc} without PyTorch's OutOfMemoryError:\n{err[-3000:]}")
    m = re.search(r"hint: replaying all ([\d,]+) allocator calls", err)
    names = re.findall(r"hint:   CUCACHE_CONF=(\S+) \(peak reserved", err)
    print(f"CUCACHE_CONF={conf}: {'ran ' + str(steps) + ' steps' if steps else 'failed'}"
          f"{', the replay covers ' + m.group(1) + ' calls' if m else ''}; the hint names {names}")
    return steps, int(m.group(1).replace(",", "")) if m else None, names


def case_whatif(e):
    # the defaults fail, and the what-if names settings that would have
    # served every allocation and the failed request
    steps, calls, names = whatif_run(e, None)
    if steps is not None or calls is None or not names:
        fail("at the capacity where the defaults fail, no failure with a what-if naming settings")
    # each named setting, applied: serves the failed request and everything
    # before it (the hint's claim): it runs every step, or fails only later
    # (its own replay covers more calls); and one of them runs every step
    ran = []
    for conf in names:
        s, c, _ = whatif_run(e, conf)
        if s == 3:
            ran.append(conf)
        elif c is None or c <= calls:
            fail(f"CUCACHE_CONF={conf}, named by the what-if, failed at or before the request it was named for "
                 f"({c} calls replayed, the request at {calls})")
    if not ran:
        fail(f"none of the settings the what-if named ({names}) ran the steps")


def case_conf(e, conf):
    res, _ = e.workload("mlp", "torch", cucache=False, env={"PYTORCH_CUDA_ALLOC_CONF": conf})
    check_steps(res)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    build, case = sys.argv[1], sys.argv[2]
    if os.geteuid() != 0:
        print("SKIP: the PyTorch root is entered with chroot: run as root")
        return 77
    if subprocess.run([TORCH_ENV, "check"]).returncode != 0:
        print("SKIP: the PyTorch root is missing or stale: scripts/torch-check makes it (scripts/torch-env)")
        return 77
    e = Env(build)
    kind, _, w = case.partition("-")
    if kind == "alone":
        case_alone(e, w)
    elif kind == "preload":
        case_preload(e, w)
    elif case == "pluggable-oom":
        case_pluggable_oom(e)
    elif kind == "pluggable":
        case_pluggable(e, w)
    elif case == "snapshot":
        case_snapshot(e)
    elif case == "keep-cache":
        case_keep_cache(e)
    elif case == "oom":
        case_oom(e)
    elif kind == "api":
        case_api(e, w)
    elif case == "leak":
        case_leak(e)
    elif case == "graphs":
        case_graphs(e)
    elif case == "whatif":
        case_whatif(e)
    elif case == "record-stream":
        case_record_stream(e)
    elif kind == "replay":
        replay_live.ReplayLive(e, WORKLOADS, w, fail).check()
    elif case == "two-procs":
        import two_procs

        two_procs.case_two_procs(e, fail)
    elif case == "expandable":
        case_conf(e, "expandable_segments:True")
    elif case == "async":
        case_conf(e, "backend:cudaMallocAsync")
    else:
        print(f"unknown case {case}")
        return 2
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
