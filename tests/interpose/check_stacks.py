#!/usr/bin/env python3
"""CUCACHE_STACKS=native (cucache-run --stacks): call stacks of allocations,
to say who allocated what.

Usage: check_stacks.py CUCACHE_RUN STACKS_CHILD STACKS_CHILD_SOURCE CHECK_SNAPSHOT [DOC.md]

stacks_child makes its allocations at lines marked "SITE:name" in its
source, one of them through a stripped library's frame, fails one request
and frees nothing.  Under cucache-run --sim=1G:

1. With --stacks: the OOM report lists the live allocations by call site,
   each site's innermost frames by function, file and line; the stripped
   frame shows as "?? (libstacks_stripped.so+0x...)" and the frames beyond
   it are still named; the leak check lists by call site and the run exits
   with --leak-exitcode's status.
2. The snapshot passes check_snapshot.py (a refusing unpickler, the schema),
   its blocks' frames name the call sites (PyTorch's name, filename, line),
   the oom event's frames name the failed call; each segment, and its
   segment_alloc event, names the allocation that made it.
3. --stacks=2 keeps two frames.
4. Without --stacks: no frames anywhere, the leak check by requested size.
5. Bad CUCACHE_STACKS values stop the program with a line naming it.
6. --stacks=python on this C program records nothing (no interpreter):
   the leak check by requested size, no frames in the snapshot;
   --stacks=python+native records its native stacks.
6. With DOC.md: its example after "<!-- example: stacks_child -->" is what
   the run printed, line for line (libc's frames, the count of frames
   left out and the stripped frame's offset aside: they depend on the C
   library and the compiler).
"""
import io
import os
import pickle
import re
import subprocess
import sys
import tempfile

RUN, CHILD, SOURCE, CHECK_SNAPSHOT = sys.argv[1:5]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


# the lines of the SITE markers
SITES = {}
with open(SOURCE) as f:
    for n, line in enumerate(f, 1):
        m = re.search(r"SITE:([\w-]+)", line)
        if m:
            SITES[m.group(1)] = n
SRC = os.path.basename(SOURCE)


class Refusing(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name}")


def run(*opts, env=None):
    e = dict(os.environ)
    e.pop("CUCACHE_CONF", None)
    e.update(env or {})
    return subprocess.run([RUN, "--sim=1G", *opts, "--", CHILD], capture_output=True, text=True, env=e, timeout=60)


def site_line(name):
    return f"({SRC}:{SITES[name]})"


with tempfile.TemporaryDirectory() as tmp:
    snap = os.path.join(tmp, "s.pickle")
    r = run("--stacks", "--snapshot", snap, "--leak-exitcode", "7")
    err = r.stderr
    # 1. the reports
    check(r.returncode == 7, f"--leak-exitcode 7: exit 7, got {r.returncode}\n{err}")
    check("stacks_child: forward(64 GiB): failed" in r.stdout, r.stdout)
    oom = err.split("largest live allocations by call site", 1)
    check(len(oom) == 2, f"the OOM report lists call sites:\n{err}")
    if len(oom) == 2:
        body = oom[1].split("segment map:", 1)[0]
        check(re.search(r"4 x 64\.00 MiB = 256\.00 MiB, at\n.*load_weights " + re.escape(site_line("weights")) +
                        r"\n.*main " + re.escape(site_line("main-weights")), body),
              f"the weights site, innermost first:\n{body}")
        check(re.search(r"8 x 8\.00 MiB = 64\.00 MiB, at\n.*cache_alloc " + re.escape(site_line("cache")) +
                        r"\n.*\?\? \(libstacks_stripped\.so\+0x[0-9a-f]+\)\n.*grow_cache " +
                        re.escape(site_line("grow")), body),
              f"the cache site, through the stripped frame:\n{body}")
    if len(sys.argv) > 5:
        doc = open(sys.argv[5], encoding="utf-8").read().split("\n")
        at = doc.index("<!-- example: stacks_child -->") if "<!-- example: stacks_child -->" in doc else -1
        check(at >= 0, f"{sys.argv[5]}: no '<!-- example: stacks_child -->'")
        if at >= 0:
            start = at + 2
            end = doc.index("```", start)
            # times (t=S.SS s) differ from run to run: compared as "t=T"
            def no_time(text):
                return re.sub(r"\(t=\d+\.\d\d s\)", "(t=T)", text)
            live_lines = no_time(err).split("\n")
            for line in (no_time(x) for x in doc[start:end]):
                if "libc" in line or "more frame" in line:
                    continue
                if "libstacks_stripped.so+0x" in line:
                    pat = re.escape(line.split("+0x")[0]) + r"\+0x[0-9a-f]+\)"
                    check(any(re.fullmatch(pat, x) for x in live_lines), f"the doc's line is not printed: {line}")
                else:
                    check(line in live_lines, f"the doc's line is not printed: {line}")
    leak = err.split("leak check: GPU 0: 320.00 MiB in 12 allocations still live at exit, by call site:", 1)
    check(len(leak) == 2, f"the leak check by call site:\n{err}")
    if len(leak) == 2:
        check(re.search(r"4 x 64\.00 MiB = 256\.00 MiB, the first allocation 1 of 12 \(t=\d+\.\d\d s\), at\n.*load_weights " +
                        re.escape(site_line("weights")), leak[1]), leak[1])
        check(re.search(r"8 x 8\.00 MiB = 64\.00 MiB, the first allocation 5 of 12 \(t=\d+\.\d\d s\), at\n.*cache_alloc",
                        leak[1]),
              leak[1])

    # 2. the snapshot
    c = subprocess.run([sys.executable, CHECK_SNAPSHOT, snap, snap.replace(".pickle", ".json")], capture_output=True,
                       text=True)
    check(c.returncode == 0, f"check_snapshot.py: {c.stdout}{c.stderr}")
    with open(snap, "rb") as f:
        s = Refusing(f).load()
    blocks = [b for seg in s["segments"] for b in seg["blocks"]]
    weights = [b for b in blocks if b["requested_size"] == 64 << 20]
    cache = [b for b in blocks if b["requested_size"] == 8 << 20]
    check(len(weights) == 4 and len(cache) == 8, f"the live blocks: {len(weights)} and {len(cache)}")

    def frame_is(fr, name, site):
        return fr["name"] == name and fr["filename"].endswith("/" + SRC) and fr["line"] == SITES[site]

    check(all(frame_is(b["frames"][0], "load_weights", "weights") and
              frame_is(b["frames"][1], "main", "main-weights") for b in weights),
          f"weights' frames: {weights[0]['frames'][:2] if weights else None}")
    check(all(frame_is(b["frames"][0], "cache_alloc", "cache") and b["frames"][1]["name"] == "??" and
              b["frames"][1]["filename"] == "libstacks_stripped.so" and b["frames"][1]["line"] == 0 and
              frame_is(b["frames"][2], "grow_cache", "grow") for b in cache),
          f"cache's frames: {cache[0]['frames'][:3] if cache else None}")
    # a segment is made by the first allocation that needs it: its frames,
    # and its segment_alloc event's, are that allocation's
    makers = (("load_weights", "weights"), ("cache_alloc", "cache"))
    check(s["segments"] and all(seg["frames"] and any(frame_is(seg["frames"][0], *m) for m in makers)
                                for seg in s["segments"]),
          f"segments name the allocation that made them: {[seg['frames'][:1] for seg in s['segments']]}")
    check(all(frame_is(seg["frames"][0], "load_weights", "weights") for seg in s["segments"]
              if any(b["requested_size"] == 64 << 20 for b in seg["blocks"])), "the weights' segments name load_weights")
    seg_allocs = [e for e in s["device_traces"][0] if e["action"] == "segment_alloc"]
    check(len(seg_allocs) == len(s["segments"]) and
          all(e["frames"] == seg["frames"] for e in seg_allocs for seg in s["segments"] if seg["address"] == e["addr"]),
          f"segment_alloc events carry their segment's frames: {[e['frames'][:1] for e in seg_allocs]}")
    check(all(not b["frames"] for b in blocks if b["state"] == "inactive"), "free blocks have no frames")
    events = s["device_traces"][0]
    ooms = [e for e in events if e["action"] == "oom"]
    check(len(ooms) == 1 and frame_is(ooms[0]["frames"][0], "forward", "forward"),
          f"the oom event names forward: {ooms[0]['frames'][:1] if ooms else None}")
    allocs = [e for e in events if e["action"] == "alloc"]
    check(len(allocs) == 12 and all(e["frames"] for e in allocs), "every alloc event has frames")
    # one list per stack, as PyTorch shares them: a block's is its alloc event's
    by_addr = {e["addr"]: e for e in allocs}
    check(all(b["frames"] is by_addr[b["address"]]["frames"] for b in weights + cache if b["address"] in by_addr),
          "a block and its alloc event share one list of frames (the pickle's memo)")

    # 3. depth
    snap2 = os.path.join(tmp, "d.pickle")
    r = run("--stacks=2", "--snapshot", snap2)
    with open(snap2, "rb") as f:
        s = Refusing(f).load()
    depths = {len(b["frames"]) for seg in s["segments"] for b in seg["blocks"] if b["state"] != "inactive"}
    check(depths == {2}, f"--stacks=2 keeps 2 frames: {depths}")

    # 4. off
    snap3 = os.path.join(tmp, "off.pickle")
    r = run("--snapshot", snap3, "--leak-exitcode", "7")
    check(r.returncode == 7 and "by call site" not in r.stderr and
          "still live at exit, by requested size:" in r.stderr, f"without --stacks:\n{r.stderr}")
    with open(snap3, "rb") as f:
        s = Refusing(f).load()
    check(all(not b["frames"] for seg in s["segments"] for b in seg["blocks"]) and
          all(not seg["frames"] for seg in s["segments"]) and
          all(not e["frames"] for e in s["device_traces"][0]), "without --stacks no frames (segments' neither)")

    # 5. bad values
    for value, words in (("natve", "CUCACHE_STACKS: 'natve' is not one of native, python, python+native "
                                   "(each with :DEPTH), off"),
                         ("native:0", "CUCACHE_STACKS=native:DEPTH: '0' is not a number of frames from 1 to 64"),
                         ("python:0", "CUCACHE_STACKS=python:DEPTH: '0' is not a number of frames from 1 to 64"),
                         ("python+native:", "CUCACHE_STACKS=python+native:DEPTH: '' is not a number"),
                         ("off:3", "CUCACHE_STACKS: 'off:3' is not one of"),
                         ("pythonnative", "CUCACHE_STACKS: 'pythonnative' is not one of"),
                         ("native:65", "'65' is not a number of frames from 1 to 64"),
                         ("native:\x01", "'\\x01' is not a number of frames")):
        r = run(env={"CUCACHE_STACKS": value})
        check(r.returncode != 0 and words in r.stderr, f"CUCACHE_STACKS={value!r}: {r.returncode} {r.stderr}")
    r = run(env={"CUCACHE_STACKS": "off"})
    check(r.returncode == 0, f"CUCACHE_STACKS=off runs: {r.returncode} {r.stderr}")

    # 6. Python frames asked of a program with no Python: nothing recorded
    # (no interpreter to bind), the run as without stacks; python+native
    # records the native stacks
    snap4 = os.path.join(tmp, "py.pickle")
    r = run("--stacks=python", "--snapshot", snap4, "--leak-exitcode", "7")
    check(r.returncode == 7 and "by call site" not in r.stderr and
          "still live at exit, by requested size:" in r.stderr and "largest live allocations by call site" not in
          r.stderr, f"--stacks=python on a C program:\n{r.stderr}")
    with open(snap4, "rb") as f:
        s = Refusing(f).load()
    check(all(not b["frames"] for seg in s["segments"] for b in seg["blocks"]), "--stacks=python: no frames")
    r = run("--stacks=python+native", "--leak-exitcode", "7")
    check(r.returncode == 7 and re.search(r"4 x 64\.00 MiB = 256\.00 MiB, the first allocation 1 of 12 "
                                          r"\(t=\d+\.\d\d s\), at\n.*load_weights " + re.escape(site_line("weights")),
                                          r.stderr),
          f"--stacks=python+native on a C program: its native stacks\n{r.stderr}")

print(f"check_stacks: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
