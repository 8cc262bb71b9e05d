#!/usr/bin/env python3
"""cucache-top against a real cucache process on a shared simulated GPU.

subprojects/cusim/tests/ipc_peer runs under libcucache.so on a device shared by a key of
this run's own (CUCACHE_SIM_SHARED); it allocates 256 MiB and 64 MiB and
frees the 64 MiB, which stays in its cache.  Then, one case per argument:

  once        the plain table lists the GPU (name, UUID) and the peer's row
              with its command, used, live and cached bytes, and no escape
              codes; a process that never gave has no last give, and one
              whose figures stopped (SIGSTOP) says how old they are;
  json        the document parses; the GPU and the peer's row carry exact
              values: NVML's used bytes equal the registry's reserved, the
              allocated 256 MiB, reserved - allocated 64 MiB; a cucache
              process holding nothing (a second peer) is listed with used
              null and its figures, and its last give: the bytes and the
              asker;
  prometheus  --prometheus FILE --once: HELP/TYPE lines, every sample line
              parses as name{labels} value, the peer's samples carry its
              bytes, and no FILE.tmp is left;
  usage       a bad option, a bad interval and a missing value: one line
              naming it, exit 2;
  corrupt     a registry file with a wrong magic under a fake GPU's UUID
              (mode 0600) is one line naming the file and the problem, in
              the table and in the JSON, and the rest is shown;
  command     a Python program holding memory (no cucache) is shown by its
              script and arguments, a program by its command name;
  nonvml      without libnvidia-ml.so.1 on the library path, one line says
              so and the peer's GPU is listed from its registry.

Usage: check_top.py CASE CUCACHE_TOP LIBCUCACHE IPC_PEER SIM_LIBDIR
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

case, top, libcucache, ipc_peer, sim_libdir = sys.argv[1:6]
MiB = 1 << 20
key = f"check-top-{case}-{os.getpid()}"
env = dict(os.environ, CUCACHE_SIM_SHARED=key, CUCACHE_SIM_CAPACITY="1G", LD_LIBRARY_PATH=sim_libdir,
           CUCACHE_SIM_ALLOC_US="0", CUCACHE_SIM_FREE_US="0", CUCACHE_SIM_COPY_GBPS="0")
env.pop("LD_PRELOAD", None)
failures = []
peers = []
cleanup = [f"/dev/shm/cucache-sim-{os.geteuid()}-{key}"]


# A Python program that holds N MiB of the shared device through the
# driver (ctypes), until its stdin closes.
HOLDER = """
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
ok = (cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
      and cu.cuCtxSetCurrent(ctx) == 0 and cu.cuMemAlloc_v2(ctypes.byref(ptr), int(sys.argv[2]) << 20) == 0)
print("ok" if ok else "failed", flush=True)
sys.stdin.read()
"""


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


class Peer:
    """ipc_peer under cucache, one command line at a time."""

    def __init__(self):
        self.p = subprocess.Popen([ipc_peer], env=dict(env, LD_PRELOAD=libcucache), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        peers.append(self)

    def cmd(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def stop(self):
        try:
            self.cmd("exit")
        except BrokenPipeError:
            pass
        self.p.wait(timeout=30)


def run_top(*args, environ=None):
    return subprocess.run([top, *args], env=environ or env, capture_output=True, text=True, timeout=60)


def top_json(environ=None):
    r = run_top("--json", environ=environ)
    check(r.returncode == 0, f"--json exits {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


def find_proc(doc, pid):
    for g in doc["gpus"]:
        for p in g["processes"]:
            if p["pid"] == pid:
                return g, p
    return None, None


def wait_published(pid, allocs, environ=None, allocated=None):
    """The document once the peer's registry slot counts `allocs`
    allocations (and, given, `allocated` bytes: figures published between
    an allocation and a free show the allocation's count before the free's
    bytes; it publishes every 250 ms); the last one read otherwise."""
    for _ in range(100):
        doc = top_json(environ)
        _, p = find_proc(doc, pid)
        if (p and p["cucache"] and p["cucache"]["allocs"] == allocs and
                (allocated is None or p["cucache"]["allocated"] == allocated)):
            return doc
        time.sleep(0.1)
    return doc


def start_peer():
    peer = Peer()
    a = peer.cmd(f"alloc {256 * MiB:x}")
    b = peer.cmd(f"alloc {64 * MiB:x}")
    check(a.startswith("ok ") and b.startswith("ok "), f"peer allocations: {a!r} {b!r}")
    f = peer.cmd(f"free {b.split()[1]}")
    check(f == "ok", f"peer free: {f!r}")
    return peer


def main():
    peer = start_peer()
    pid = peer.p.pid
    doc = wait_published(pid, 2, allocated=256 * MiB)
    g, p = find_proc(doc, pid)
    check(p is not None and p["cucache"] is not None, f"the peer {pid} with its figures in {doc}")
    if failures:
        return
    uuid = g["uuid"]
    cleanup.append(f"/dev/shm/cucache-gpu-{os.geteuid()}-{uuid}")  # after the peers have left it

    if case == "once":
        r = run_top("--once")
        check(r.returncode == 0, f"--once exits {r.returncode}: {r.stderr}")
        check("\033" not in r.stdout, "--once writes escape codes")
        check(re.search(rf"^GPU 0 .*{re.escape(uuid)} .* used of 1024\.00 MiB$", r.stdout, re.M),
              f"--once has no GPU line for {uuid}:\n{r.stdout}")
        row = re.search(rf"^ *{pid} ipc_peer +(320\.00 MiB) +(256\.00 MiB) +(64\.00 MiB) .*$", r.stdout, re.M)
        check(row, f"--once has no row 'PID ipc_peer 320 MiB used, 256 MiB live, 64 MiB cached':\n{r.stdout}")
        check(re.search(r"^ +PID COMMAND +USED +LIVE +CACHED +IDLE +PENDING +HIT +OOMS +GIVEN +RECEIVED  LAST GIVE$",
                        r.stdout, re.M), f"--once has no column header:\n{r.stdout}")
        check(re.search(rf"^ *{pid} ipc_peer .* 0 bytes  - *$", r.stdout, re.M),
              f"--once: a peer that never gave has no last give:\n{r.stdout}")
        # a process that stops publishing: its figures say their age (a
        # stop that lands while it writes them leaves them "being written":
        # then again)
        for _ in range(5):
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(2.6)
                r = run_top("--once")
            finally:
                os.kill(pid, signal.SIGCONT)
            if "(figures being written)" not in r.stdout:
                break
            time.sleep(0.1)
        check(re.search(rf"^ *{pid} ipc_peer .*  \(figures of 2 s ago: not publishing\)$", r.stdout, re.M),
              f"--once: a stopped peer's figures do not say their age:\n{r.stdout}")

    elif case == "json":
        c = p["cucache"]
        check(g["index"] == 0 and g["total"] == 1 << 30 and g["name"], f"the GPU: {g}")
        check(p["command"] == "ipc_peer", f"command {p['command']!r}")
        check(c["allocated"] == 256 * MiB, f"allocated {c['allocated']}")
        check(c["reserved"] - c["allocated"] == 64 * MiB, f"reserved {c['reserved']} - allocated")
        check(p["used"] == c["reserved"] == 320 * MiB, f"NVML's used {p['used']} against reserved {c['reserved']}")
        check(g["used"] == 320 * MiB, f"the GPU's used {g['used']}")
        check(c["allocs"] == 2 and c["ooms"] == 0, f"allocs {c['allocs']}, ooms {c['ooms']}")
        # a second cucache process caches 512 MiB; the first, asking for
        # 384 MiB more than the device has free, gets it back (a yield):
        # the second then holds nothing, NVML does not list it, and the
        # registry still does, with what it gave
        other = Peer()
        a = other.cmd(f"alloc {512 * MiB:x}")
        check(a.startswith("ok ") and other.cmd(f"free {a.split()[1]}") == "ok", f"the second peer: {a!r}")
        wait_published(other.p.pid, 1)
        big = peer.cmd(f"alloc {384 * MiB:x}")
        check(big.startswith("ok "), f"the first peer's 384 MiB after a yield: {big!r}")
        doc = wait_published(pid, 3)
        _, e = find_proc(doc, other.p.pid)
        check(e is not None and e["used"] is None and e["cucache"] is not None and e["cucache"]["reserved"] == 0
              and e["cucache"]["yields_given"] == 1 and e["cucache"]["bytes_given"] == 512 * MiB,
              f"a cucache process holding nothing after giving 512 MiB: {e}")
        _, p = find_proc(doc, pid)
        check(p["cucache"]["yields_received"] == 1 and p["cucache"]["bytes_received"] == 512 * MiB,
              f"the first peer received 512 MiB: {p}")
        give = e["last_give"] if e else None
        check(give and give["to"] == pid and give["bytes"] == 512 * MiB and 0 <= give["ago_ms"] < 60000,
              f"the second peer's last give: 512 MiB to {pid}: {give}")
        check(p["last_give"] is None, f"the first peer gave nothing: {p['last_give']}")
        r = run_top("--once")
        check(re.search(rf"^ *{other.p.pid} ipc_peer +- +0 bytes +0 bytes .* 512\.00 MiB +0 bytes  "
                        rf"512\.00 MiB to {pid}, [0-9]+ (ms|s) ago +\(cucache, holds nothing on the GPU\)$",
                        r.stdout, re.M),
              f"--once: the second peer's row:\n{r.stdout}")

    elif case == "command":
        # a process of an interpreter is shown by its script and arguments:
        # a Python program holding 64 MiB through the driver, no cucache
        folder = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"check-top-{os.getpid()}")
        os.makedirs(folder, exist_ok=True)
        script = os.path.join(folder, "holder.py")
        cleanup.extend([script, folder])
        with open(script, "w") as f:
            f.write(HOLDER)
        h = subprocess.Popen([sys.executable, script, "hold", "64"], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        try:
            ready = h.stdout.readline().strip()
            check(ready == "ok", f"the holder: {ready!r}")
            r = run_top("--once")
            check(re.search(rf"^ *{h.pid} holder\.py hold 64 +64\.00 MiB +- +- ", r.stdout,
                            re.M), f"--once: the holder's row is not its script and arguments:\n{r.stdout}")
            check(re.search(rf"^ *{pid} ipc_peer +320\.00 MiB ", r.stdout, re.M),
                  f"--once: a program's row is not its command name:\n{r.stdout}")
        finally:
            h.stdin.close()
            h.wait(timeout=30)

    elif case == "prometheus":
        out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"check-top-{os.getpid()}.prom")
        cleanup.append(out)
        r = run_top("--prometheus", out, "--once")
        check(r.returncode == 0 and r.stdout == "", f"--prometheus --once exits {r.returncode}: {r.stderr}")
        check(not os.path.exists(out + ".tmp"), "FILE.tmp left behind")
        text = open(out).read()
        sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\} '
                            r'(-?[0-9.e+]+)$')
        samples = {}
        typed = set()
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ")
                check(kind in ("gauge", "counter"), f"type line {line!r}")
                typed.add(name)
                continue
            if line.startswith("# HELP "):
                continue
            m = sample.match(line)
            check(m is not None, f"a sample line that does not parse: {line!r}")
            if m:
                labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2)))
                check(m.group(1) in typed, f"{m.group(1)} sampled before its TYPE line")
                samples[(m.group(1), labels.get("uuid"), labels.get("pid"), labels.get("direction"))] = (
                    labels, float(m.group(3)))
        want = {
            ("cucache_gpu_memory_total_bytes", uuid, None, None): 1 << 30,
            ("cucache_process_memory_used_bytes", uuid, str(pid), None): 320 * MiB,
            ("cucache_process_allocated_bytes", uuid, str(pid), None): 256 * MiB,
            ("cucache_process_cached_bytes", uuid, str(pid), None): 64 * MiB,
            ("cucache_process_allocations_total", uuid, str(pid), None): 2,
            ("cucache_process_ooms_total", uuid, str(pid), None): 0,
            ("cucache_process_yielded_bytes_total", uuid, str(pid), "given"): 0,
            ("cucache_process_yielded_bytes_total", uuid, str(pid), "received"): 0,
        }
        for k, v in want.items():
            got = samples.get(k)
            check(got is not None and got[1] == v, f"sample {k}: {got}, expected {v}")
        labels = samples.get(("cucache_process_allocated_bytes", uuid, str(pid), None), ({},))[0]
        check(labels.get("gpu") == "0" and labels.get("command") == "ipc_peer", f"labels {labels}")
        for name in ("cucache_process_idle_bytes", "cucache_process_pending_bytes", "cucache_process_cache_hits_total"):
            check(f"# TYPE {name} " in text, f"no TYPE line for {name}")

    elif case == "usage":
        for args, names in ((["--bogus"], "--bogus"), (["-x"], "-x"), (["-d", "0"], "-d/--interval"),
                            (["--interval", "abc"], "-d/--interval"), (["-n", "-3"], "-n/--iterations"),
                            (["--prometheus"], "--prometheus"), (["--once", "extra"], "extra")):
            r = run_top(*args)
            lines = r.stderr.strip().split("\n")
            check(r.returncode == 2 and len(lines) == 1 and names in lines[0] and lines[0].startswith("cucache-top: "),
                  f"{args}: exit {r.returncode}, stderr {r.stderr!r}")
            check(r.stdout == "", f"{args} printed {r.stdout!r}")

    elif case == "corrupt":
        fake = "GPU-%08x-dead-beef-0000-%012x" % (os.getpid(), int(time.time()))
        path = f"/dev/shm/cucache-gpu-{os.geteuid()}-{fake}"
        cleanup.append(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b"NOTCUCAG" + bytes(4096))
        os.close(fd)
        r = run_top("--once")
        check(r.returncode == 0, f"--once with a corrupt registry exits {r.returncode}: {r.stderr}")
        hits = [ln for ln in r.stdout.splitlines() if path in ln]
        check(len(hits) == 1 and "bad magic" in hits[0], f"the corrupt registry as one line: {hits}\n{r.stdout}")
        check(re.search(rf"^ *{pid} ipc_peer ", r.stdout, re.M), f"the peer is still listed:\n{r.stdout}")
        doc = top_json()
        bad = [x for x in doc["gpus"] if x["uuid"] == fake]
        check(len(bad) == 1 and "bad magic" in (bad[0]["refused"] or "") and bad[0]["processes"] == [],
              f"the corrupt registry in the JSON: {bad}")

    elif case == "nonvml":
        bare = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"check-top-nonvml-{os.getpid()}")
        os.makedirs(bare, exist_ok=True)
        cleanup.append(bare)
        r = run_top("--once", environ=dict(env, LD_LIBRARY_PATH=bare))
        check(r.returncode == 0, f"--once without NVML exits {r.returncode}: {r.stderr}")
        check(r.stdout.splitlines()[0].startswith("NVML: libnvidia-ml.so.1 cannot be loaded"),
              f"first line: {r.stdout.splitlines()[:1]}")
        check(re.search(rf"^GPU {re.escape(uuid)} \(registry only: no NVML\)", r.stdout, re.M),
              f"the peer's GPU from its registry:\n{r.stdout}")
        check(re.search(rf"^ *{pid} ipc_peer +- +256\.00 MiB +64\.00 MiB ", r.stdout, re.M),
              f"the peer's row without NVML:\n{r.stdout}")
    else:
        check(False, f"unknown case {case}")


try:
    main()
finally:
    for p in peers:
        p.stop()
    for path in cleanup:
        if os.path.isdir(path):
            os.rmdir(path)
        elif os.path.exists(path):
            os.unlink(path)
print(f"check_top {case}: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
