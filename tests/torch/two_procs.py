"""check_torch.py's case two-procs: two real PyTorch processes on one shared
simulated GPU of 6 GiB (CUCACHE_SIM_SHARED, a key of the run's own).

A trainer (twoproc_prog.py train) runs three steps of an MLP whose
activations are large, frees its gradients and activations without
empty_cache() and idles holding over 3 GiB of idle cache; an evaluator
(twoproc_prog.py eval), started beside it and let go once the trainer
idles, peaks at about 4.6 GiB.  On each route:

  torch      PyTorch's own allocator in both: the evaluator fails with
             torch.OutOfMemoryError, whose message names the trainer as
             the process holding the device, and the figures show why
             (the trainer's reserved bytes and the evaluator's need are
             more than the device; its live bytes and that need are not)
  preload    both under cucache-run; pluggable: both cucache.torch.enable():
             the evaluator finishes, having received from the trainer
             (yields received, no OOM); while both hold, cucache-top
             --json lists both with those figures and the trainer's last
             give to the evaluator; the giver's statistics after the give:
             live bytes unchanged, reserved bytes down by exactly what it
             gave, segments down by the segments it freed, cucache.torch's
             figures equal to cucache's, then one more step runs and
             leaves it as before the give with its peak unchanged.

The processes are driven by lines on their stdin and stdout (never by
timing); each line read has a deadline, after which both are killed.
"""
import json
import os
import select
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "twoproc_prog.py")
GiB = 1 << 30
CAPACITY = 6 * GiB
OUTSIDE = 32 << 20  # what a process may hold on the device beside cucache
DEADLINE_S = 300  # for each line: a busy 2-core machine takes a minute to start PyTorch


class Proc:
    """One of the two processes: its lines on stdout, its stderr in a file."""

    def __init__(self, e, what, route, env, fail):
        self.what, self.fail = what, fail
        self.err = tempfile.TemporaryFile(mode="w+")
        argv = ["python3", PROG, what, route]
        self.p = subprocess.Popen(e.command(argv, env, cucache=route != "torch"), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err, cwd=os.path.dirname(os.path.dirname(HERE)))
        self.buf = b""

    def expect(self, word, others=()):
        """The JSON of the next line, which must start with word."""
        end = time.monotonic() + DEADLINE_S
        fd = self.p.stdout.fileno()
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.kill(others)
                self.fail(f"{self.what}: no '{word}' line in {DEADLINE_S} s:\n{self.stderr()}")
            chunk = os.read(fd, 65536)
            if not chunk:
                self.p.wait()
                self.kill(others)
                self.fail(f"{self.what} exited {self.p.returncode} before its '{word}' line:\n{self.stderr()}")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        got, _, obj = line.decode().partition(" ")
        if got != word:
            self.kill(others)
            self.fail(f"{self.what}: '{line.decode()[:300]}' where '{word}' was expected:\n{self.stderr()}")
        return json.loads(obj)

    def send(self, line="go"):
        self.p.stdin.write((line + "\n").encode())
        self.p.stdin.flush()

    def finish(self):
        self.p.stdin.close()
        rc = self.p.wait(timeout=DEADLINE_S)
        if rc != 0:
            self.fail(f"{self.what} exited {rc}:\n{self.stderr()}")

    def stderr(self):
        self.err.seek(0)
        return self.err.read()[-4000:]

    def kill(self, others=()):
        for p in (self, *others):
            if p.p.poll() is None:
                p.p.kill()
                p.p.wait()


def top_json(e, key):
    """cucache-top --json on the shared device (run here, not in the root)."""
    env = dict(os.environ, CUCACHE_SIM_SHARED=key, CUCACHE_SIM_CAPACITY=str(CAPACITY), LD_LIBRARY_PATH=e.simlib)
    env.pop("LD_PRELOAD", None)
    r = subprocess.run([os.path.join(e.build, "top", "cucache-top"), "--json"], env=env, capture_output=True,
                       text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def find_gpu(doc, pids):
    for g in doc["gpus"]:
        rows = {p["pid"]: p for p in g["processes"]}
        if all(pid in rows for pid in pids):
            return g, rows
    return None, {}


def check_top(e, key, fail, trainer, evaluator, after_eval):
    """Both processes in cucache-top, once the giver has published its give."""
    f = after_eval["figures"]

    def published(rows):
        """Both have published their figures since the evaluator's peak."""
        t, v = rows[trainer]["cucache"], rows[evaluator]["cucache"]
        return t and v and t["bytes_given"] and v["allocated"] == f["allocated_bytes.all.current"]

    for _ in range(100):  # each publishes four times a second
        rc, out, err = top_json(e, key)
        if rc != 0:
            fail(f"cucache-top --json exited {rc}: {err}")
        g, rows = find_gpu(json.loads(out), (trainer, evaluator))
        if g and published(rows):
            break
        time.sleep(0.1)
    if not g:
        fail(f"cucache-top lists the trainer {trainer} and the evaluator {evaluator} on no one GPU:\n{out}")
    t, v = rows[trainer], rows[evaluator]
    if v["cucache"]["bytes_received"] != f["yield_bytes_received"] or v["cucache"]["ooms"] != 0:
        fail(f"cucache-top's evaluator row {v} against its statistics {f}")
    # NVML's bytes are cucache's reserved and what PyTorch holds beside
    # cucache (a few MiB of its own)
    for row in (t, v):
        if not 0 <= row["used"] - row["cucache"]["reserved"] <= OUTSIDE:
            fail(f"cucache-top: NVML's used bytes against the registry's reserved: {row}")
    if t["cucache"]["bytes_given"] < f["yield_bytes_received"]:
        fail(f"cucache-top's trainer row gave {t['cucache']['bytes_given']}, the evaluator received "
             f"{f['yield_bytes_received']}")
    give = t.get("last_give")
    if not give or give["to"] != evaluator or give["bytes"] != t["cucache"]["bytes_given"]:
        fail(f"cucache-top does not show the trainer's give to {evaluator}: {t}")
    print(f"cucache-top: trainer {trainer} used {t['used']}, gave {t['cucache']['bytes_given']} to {give['to']}; "
          f"evaluator {evaluator} used {v['used']}, received {v['cucache']['bytes_received']}")


def run_route(e, route, fail):
    key = f"check-torch-two-{route}-{os.getpid()}"
    # The trainer gives its segments back one by one, which can take more
    # than 5 x CUCACHE_YIELD_MS on a busy machine: the default wait holds
    # while the device's free memory keeps growing.
    env = {"CUCACHE_SIM_SHARED": key, "CUCACHE_SIM_CAPACITY": str(CAPACITY)}
    shm = f"/dev/shm/cucache-sim-{os.geteuid()}-{key}"
    procs, fail_here = [], fail

    def fail_route(msg):
        """fail, with what the processes said on stderr (cucache's reports)."""
        tails = "".join(f"\n--- {p.what}'s stderr:\n{p.stderr()[-3000:]}" for p in procs)
        fail_here(f"{route}: {msg}{tails}")

    trainer = Proc(e, "train", route, env, fail_route)
    evaluator = Proc(e, "eval", route, env, fail_route)
    procs += [trainer, evaluator]
    both = (trainer, evaluator)
    fail = fail_route  # every check below says what the processes said
    try:
        evaluator.expect("READY", both)
        idle = trainer.expect("IDLE", both)
        evaluator.send()
        ev = evaluator.expect("EVAL", both)
        if route != "torch":
            check_evaluator_served(route, ev, fail)
            check_top(e, key, fail, idle["pid"], ev["pid"], ev)
        evaluator.send()
        evaluator.finish()
        trainer.send()
        after = trainer.expect("AFTER", both)
        done = trainer.expect("DONE", both)
        trainer.finish()
    finally:
        trainer.kill([evaluator])
        if os.path.exists(shm):
            os.unlink(shm)
    print(f"{route}: trainer idle {json.dumps(idle)}")
    print(f"{route}: evaluator {json.dumps(ev)}")
    print(f"{route}: trainer after {json.dumps(after)}")
    print(f"{route}: trainer done {json.dumps(done)}")
    cached = idle["reserved_bytes.all.current"] - idle["allocated_bytes.all.current"]
    if cached < 3 * GiB:
        fail(f"{route}: the trainer idles with {cached} bytes cached, not the 3 GiB the case needs")
    if route == "torch":
        check_torch_route(idle, ev, fail)
    else:
        check_cucache_route(route, idle, ev, after, done, fail)


def check_torch_route(idle, ev, fail):
    raised = ev.get("raised")
    if not raised or raised["type"] != "OutOfMemoryError" or "CUDA out of memory" not in raised["message"]:
        fail(f"torch: the evaluator did not fail with PyTorch's OutOfMemoryError: {ev}")
    if f"Process {idle['pid']} has " not in raised["message"]:
        fail(f"torch: PyTorch's OOM message does not name the trainer {idle['pid']}: {raised['message']}")
    if idle["reserved_bytes.all.current"] + ev["need"] <= CAPACITY:
        fail(f"torch: the trainer's {idle['reserved_bytes.all.current']} reserved and the evaluator's need "
             f"{ev['need']} fit the device: the OOM is not the neighbour's cache")
    if idle["allocated_bytes.all.current"] + ev["need"] > CAPACITY:
        fail(f"torch: the trainer's live bytes and the evaluator's need do not fit: no cache could help")


def check_evaluator_served(route, ev, fail):
    f = ev.get("figures", {})
    if ev.get("raised") or f.get("num_ooms") != 0:
        fail(f"the evaluator did not finish: {ev}")
    if f["num_yields_received"] < 1 or f["yield_bytes_received"] <= 0:
        fail(f"the evaluator finished without the neighbour's cache: {f}")
    if f["allocated_bytes.all.peak"] < ev["need"]:
        fail(f"the evaluator's peak {f['allocated_bytes.all.peak']} is under its need {ev['need']}")


def check_cucache_route(route, idle, ev, after, done, fail):
    f = ev["figures"]
    given = after["yield_bytes_given"]
    if after["num_yields_given"] < 1 or given < f["yield_bytes_received"]:
        fail(f"{route}: the trainer gave {given} in {after['num_yields_given']} yields, the evaluator received "
             f"{f['yield_bytes_received']}")
    # the giver's statistics after the give
    if after["allocated_bytes.all.current"] != idle["allocated_bytes.all.current"]:
        fail(f"{route}: the give changed the trainer's live bytes: {idle} -> {after}")
    if after["reserved_bytes.all.current"] != idle["reserved_bytes.all.current"] - given:
        fail(f"{route}: the trainer's reserved bytes {after['reserved_bytes.all.current']} after giving {given}, "
             f"{idle['reserved_bytes.all.current']} before")
    freed = after["num_device_free"] - idle["num_device_free"]
    if freed < 1 or after["segment.all.current"] != idle["segment.all.current"] - freed:
        fail(f"{route}: {freed} segments given back, segments {idle['segment.all.current']} -> "
             f"{after['segment.all.current']}")
    for a, b in (("torch.memory_allocated", "allocated_bytes.all.current"),
                 ("torch.memory_reserved", "reserved_bytes.all.current")):
        if after[a] != after[b] or done[a] != done[b]:
            fail(f"{route}: cucache.torch's {a} differs from cucache's {b}: {after}, {done}")
    if after["reserved_bytes.all.peak"] != idle["reserved_bytes.all.peak"] or after["num_ooms"] != 0:
        fail(f"{route}: the give moved the trainer's peak or counted an OOM: {idle} -> {after}")
    # one more step after the give: as before it
    for k in ("allocated_bytes.all.current", "reserved_bytes.all.peak"):
        if done[k] != idle[k]:
            fail(f"{route}: after a step past the give, {k} is {done[k]}, {idle[k]} before the give")
    if done["num_ooms"] != 0 or done["reserved_bytes.all.current"] < after["reserved_bytes.all.current"]:
        fail(f"{route}: the step after the give: {done}")


def case_two_procs(e, fail):
    for route in ("torch", "preload", "pluggable"):
        run_route(e, route, fail)
