"""cucache-replay against the live run, on real PyTorch steps (check_torch.py's
case replay-W, W a workload of workloads.py).

One workload, PyTorch's own allocator at its defaults, recorded with PyTorch's
memory snapshot on a large simulated device, and the same steps under
cucache-run; then, from the snapshot alone:

  (a) the replay at cucache's defaults (PyTorch's rules, an imported free
      reusable at once as in PyTorch's cache) gives PyTorch's live peak
      reserved, exactly;
  (b) the replay with --preload (each allocation a cudaMalloc, each free a
      cudaFree behind cucache's reuse rule, as under cucache-run) gives
      cucache's live peak reserved, to one 2 MiB page;
  (c) the smallest device of each replay (bisection on --capacity, to the
      device's 2 MiB page), plus the process's device memory outside the
      allocator, is the live smallest device: PyTorch's run passes there and
      fails with an OOM one page below; cucache's passes there and fails with
      an OOM two pages below (the page of (b)).

The allocator's share is all a snapshot knows: the process also holds device
memory outside any allocator (on the simulator the modules' globals; on a GPU
the CUDA context too).  That is measured on the large device (what
cudaMemGetInfo says is used, less PyTorch's reserved bytes) and added.
"""
import concurrent.futures
import json
import os
import subprocess

MiB = 1 << 20
PAGE = 2 * MiB  # the simulated device counts memory in 2 MiB pages: no finer device exists
LARGE = 16 << 30
STEPS = 3


def pages_up(n):
    return (n + PAGE - 1) // PAGE * PAGE


class ReplayLive:
    def __init__(self, env, workloads_py, workload, fail):
        self.e = env
        self.workloads_py = workloads_py
        self.w = workload
        self.fail = fail
        self.replay_bin = os.path.join(env.build, "cucache-replay")

    def live(self, route, capacity, extra=()):
        """One run: (result or None, whether it failed for want of memory, stderr)."""
        argv = ["python3", self.workloads_py, self.w, "--route", route, "--steps", str(STEPS)] + list(extra)
        rc, out, err = self.e.run(argv, env={"CUCACHE_SIM_CAPACITY": str(capacity)}, cucache=route == "preload")
        lines = [l for l in out.splitlines() if l.startswith("{")]
        res = json.loads(lines[-1]) if rc == 0 and lines else None
        if res is not None and res["steps"] != STEPS:
            self.fail(f"{self.w} ({route}, {capacity >> 20} MiB): {res['steps']} steps ran, expected {STEPS}")
        oom = res is None and "out of memory" in (out + err).lower()
        if res is None and not oom:
            self.fail(f"{self.w} ({route}, {capacity >> 20} MiB) failed, not for memory (exit {rc}):\n{err[-3000:]}")
        return res, oom

    def replay(self, snap, capacity, preload):
        argv = [self.replay_bin, "--json", "--no-reference", "--capacity", str(capacity), snap]
        if preload:
            argv.insert(1, "--preload")
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            self.fail(f"{' '.join(argv)} exited {p.returncode}:\n{p.stderr[-2000:]}")
        return json.loads(p.stdout.splitlines()[0])

    def fit_says(self, snap, capacity):
        """cucache-replay --fit's verdict on its first row, the defaults."""
        p = subprocess.run([self.replay_bin, "--fit", str(capacity), snap], capture_output=True, text=True,
                           timeout=600)
        rows = [l.split() for l in p.stdout.splitlines() if "CUCACHE_CONF=(the defaults)" in l]
        if p.returncode not in (0, 3) or len(rows) != 1:
            self.fail(f"cucache-replay --fit {capacity} exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        return rows[0][0] == "fits"

    def replay_fit(self, snap, preload, lo, hi):
        """The smallest capacity, in whole pages, at which the replay has no
        OOM: lo fails (or is the floor), hi fits."""
        if self.replay(snap, hi, preload)["ooms"]:
            self.fail(f"{self.w}: the replay has an OOM at its own peak reserved ({hi >> 20} MiB)")
        lo = lo // PAGE * PAGE
        while hi - lo > PAGE:
            mid = (lo + hi) // 2 // PAGE * PAGE
            if self.replay(snap, mid, preload)["ooms"]:
                lo = mid
            else:
                hi = mid
        return hi

    def check(self):
        snap = os.path.join(self.e.build, f"torch-replay-{self.w}.pickle")
        if os.path.exists(snap):
            os.unlink(snap)
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            rec = pool.submit(self.live, "torch", LARGE, ["--snapshot", snap])
            cuc = pool.submit(self.live, "preload", LARGE)
            (t, _), (c, _) = rec.result(), cuc.result()
        t_peak = t["torch"]["reserved_bytes.all.peak"]
        c_peak = c["cucache"]["reserved_bytes.all.peak"]
        other = t["device_used"] - t["torch"]["reserved_bytes.all.current"]
        if other < 0:
            self.fail(f"{self.w}: the device holds less than PyTorch reserved: {t}")

        # (a) and (b): the peaks on the large device
        r = self.replay(snap, LARGE, False)
        p = self.replay(snap, LARGE, True)
        print(f"{self.w}: live peak reserved: PyTorch {t_peak}, cucache {c_peak}; replay of PyTorch's snapshot: "
              f"{r['peak_reserved']} (PyTorch's curve {r['torch_peak_reserved']}), --preload {p['peak_reserved']}; "
              f"outside the allocator {other}")
        if r["peak_reserved"] != t_peak or r["torch_peak_reserved"] != t_peak:
            self.fail(f"{self.w}: the replay's peak reserved {r['peak_reserved']} (the snapshot's own curve "
                      f"{r['torch_peak_reserved']}) is not PyTorch's live {t_peak}")
        if abs(p["peak_reserved"] - c_peak) > PAGE:
            self.fail(f"{self.w}: the --preload replay's peak reserved {p['peak_reserved']} is more than a page "
                      f"from cucache's live {c_peak}")

        # (c): the smallest device, from the replays, then the live runs at its edges
        floor = r["peak_requested"]
        fit_t = self.replay_fit(snap, False, floor, pages_up(r["peak_reserved"]))
        fit_c = self.replay_fit(snap, True, floor, pages_up(p["peak_reserved"]))
        if not self.fit_says(snap, fit_t) or self.fit_says(snap, fit_t - PAGE):
            self.fail(f"{self.w}: cucache-replay --fit does not put the edge at {fit_t >> 20} MiB")
        dev_t, dev_c = fit_t + pages_up(other), fit_c + pages_up(other)
        served = self.replay(snap, fit_c, True)["fallbacks"]
        print(f"{self.w}: the replays fit in {fit_t >> 20} MiB (PyTorch's), {fit_c >> 20} MiB (--preload, "
              f"{served} served by the runtime): devices of {dev_t >> 20} and {dev_c >> 20} MiB")
        probes = [("torch", dev_t, True), ("torch", dev_t - PAGE, False),
                  ("preload", dev_c, True), ("preload", dev_c - 2 * PAGE, False)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            runs = [pool.submit(self.live, route, cap) for route, cap, _ in probes]
            for (route, cap, want), run in zip(probes, runs):
                res, oom = run.result()
                print(f"{self.w}: live {route} on {cap >> 20} MiB: {'runs' if res else 'OOM'}")
                if want and not res:
                    self.fail(f"{self.w} ({route}): the replay says {cap >> 20} MiB is enough; the live run "
                              "has an OOM there")
                if not want and res:
                    self.fail(f"{self.w} ({route}): the live run fits in {cap >> 20} MiB, below what the replay "
                              "says it needs")
        os.unlink(snap)
