#!/usr/bin/env python3
"""CUCACHE_STACKS=python and python+native with a real Python client:
pystacks_prog.py allocates at lines marked "SITE:name", frees nothing and
fails one request, under LD_PRELOAD=libcucache.so on the simulated device.

Usage: check_pystacks.py PYTHON PROG LIBCUCACHE SIM_LIBDIR numba|ctypes

For each of python and python+native:
1. The OOM report names the failed request's own line first (its third
   line, "the request, at", after PyTorch's two sentences); its live
   allocations by call site and the leak check at
   exit list each site with the program's own frames, innermost first, by
   function, file and line (library frames folded before them; with
   python+native, one line for the native frames first).
2. The snapshot written at the failure (JSON beside the pickle) gives each
   live block's frames in PyTorch's form ({'filename': the full path,
   'line', 'name'}), the program's frames at the marked lines in order,
   and the oom event's frames name the failed line.
3. ctypes: the allocation a second thread makes while the main thread runs
   Python (the call releases the GIL) names the thread's lines, and the run
   ends (a timeout says it waited for ever).
Exit 77 when PYTHON is not there, or (numba) numba is not installed.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

PY, PROG, LIB, SIMDIR, KIND = sys.argv[1:6]
PROG, LIB, SIMDIR = os.path.abspath(PROG), os.path.abspath(LIB), os.path.abspath(SIMDIR)
SRC = os.path.basename(PROG)
if not os.access(PY, os.X_OK):
    print(f"{PY} is not there: skipped")
    sys.exit(77)
if KIND == "numba" and subprocess.run([PY, "-c", "import numba.cuda"], capture_output=True).returncode != 0:
    print("numba is not installed (Debian's python3-numba): skipped")
    sys.exit(77)

SITES = {}
with open(PROG) as f:
    for n, line in enumerate(f, 1):
        m = re.search(r"SITE:([\w-]+)", line)
        if m:
            SITES[m.group(1)] = n
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(stacks, tmp):
    env = dict(os.environ)
    for k in [k for k in env if k.startswith("CUCACHE_")]:
        del env[k]
    env.update({
        "LD_PRELOAD": LIB, "LD_LIBRARY_PATH": SIMDIR, "NUMBA_CUDA_DRIVER": os.path.join(SIMDIR, "libcuda.so.1"),
        "CUCACHE_SIM_CAPACITY": "1G", "CUCACHE_STACKS": stacks, "CUCACHE_LEAK_EXITCODE": "7",
        "CUCACHE_SNAPSHOT": os.path.join(tmp, "s.pickle"), "CUCACHE_WHATIF_MS": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    try:
        return subprocess.run([PY, PROG, KIND], capture_output=True, text=True, env=env, timeout=120, cwd=tmp)
    except subprocess.TimeoutExpired as e:
        check(False, f"{stacks}: the program did not end in 120 s (waiting for the GIL?)\n{e.stderr}")
        return None


# (size line, [(function, site), ...]): each site's group, and the program's
# frames the report must list first, innermost first
if KIND == "numba":
    GROUPS = [("2 x 64.00 MiB = 128.00 MiB", [("numba_run.<locals>.load_weights", "weights"),
                                             ("numba_run", "main-weights")]),
              ("3 x 8.00 MiB = 24.00 MiB", [("numba_run.<locals>.grow_cache", "cache")])]
    OOM_SITE = "oom"
    OOM_FRAMES = ["oom"]
else:
    GROUPS = [("2 x 64.00 MiB = 128.00 MiB", [("alloc", "alloc"), ("load_weights", "ct-weights"),
                                             ("ctypes_run", "ct-main")]),
              ("1 x 3.00 MiB = 3.00 MiB", [("alloc", "alloc"), ("worker", "thread")])]
    OOM_SITE = "ct-oom"
    OOM_FRAMES = ["alloc", "ct-oom"]  # the request through the program's alloc()


def own_frames(lines):
    """The program's frames among report lines: (function, line); the
    comprehension frames of 3.11 (inlined from 3.12 on) left out."""
    out = []
    for x in lines:
        m = re.fullmatch(r"\s+(\S+) \(" + re.escape(SRC) + r":(\d+)\)", x)
        if m and "<listcomp>" not in m.group(1):
            out.append((m.group(1), int(m.group(2))))
    return out


def check_sites(stacks, section, what):
    lines = [x[len("cucache: "):] if x.startswith("cucache: ") else x for x in section.split("\n")]
    for size, want in GROUPS:
        at = [i for i, x in enumerate(lines) if re.match(r"\s+" + re.escape(size) + r".*, at$", x)]
        check(len(at) == 1, f"{stacks}: {what}: the group '{size}':\n{section}")
        if len(at) != 1:
            continue
        body = []
        for x in lines[at[0] + 1:]:
            if not x.startswith("      "):
                break
            body.append(x)
        got = own_frames(body)[:len(want)]
        check(got == [(f, SITES[s]) for f, s in want], f"{stacks}: {what}: '{size}' names {got}:\n" + "\n".join(body))
        # what comes before the program's first frame: only folded lines
        first = next((i for i, x in enumerate(body) if f"({SRC}:" in x), None)
        check(first is not None and all(x.strip().startswith("...") for x in body[:first]),
              f"{stacks}: {what}: '{size}': the program's frame is the first one shown:\n" + "\n".join(body))
        if stacks.startswith("python+native"):
            check(body and re.match(r"\s+\.\.\. \d+ native frames?, innermost ", body[0]),
                  f"{stacks}: {what}: '{size}': the native frames first, folded:\n" + "\n".join(body))
        else:
            check(not any("native frame" in x for x in body), f"{stacks}: {what}: no native frames:\n" + "\n".join(body))


def check_snapshot(stacks, tmp):
    try:
        with open(os.path.join(tmp, "s.json")) as f:
            s = json.load(f)
    except OSError as e:
        check(False, f"{stacks}: no snapshot: {e}")
        return
    blocks = [b for seg in s["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"]
    sizes = {"2 x 64.00 MiB = 128.00 MiB": 64 << 20, "3 x 8.00 MiB = 24.00 MiB": 8 << 20,
             "1 x 3.00 MiB = 3.00 MiB": 3 << 20}
    for size, want in GROUPS:
        mine = [b for b in blocks if b["requested_size"] == sizes[size]]
        check(mine, f"{stacks}: snapshot: no live block of {sizes[size]} bytes")
        for b in mine:
            fr = b["frames"]
            own = [(x["name"], x["line"]) for x in fr if x["filename"] == PROG and "<listcomp>" not in x["name"]]
            check(own[:len(want)] == [(f, SITES[s]) for f, s in want],
                  f"{stacks}: snapshot: a {sizes[size]}-byte block's frames: {own}")
            check(all(set(x) == {"filename", "line", "name"} for x in fr), f"{stacks}: snapshot frames' keys: {fr[:2]}")
            py_at = next((i for i, x in enumerate(fr) if x["filename"].endswith(".py")), None)
            if stacks.startswith("python+native"):
                check(py_at and not any(x["filename"].endswith(".py") for x in fr[:py_at]) and
                      all(x["filename"].endswith(".py") or x["filename"].startswith("<") for x in fr[py_at:]),
                      f"{stacks}: snapshot: native frames, then the Python ones: {fr}")
            else:
                check(py_at == 0 and all(os.path.isabs(x["filename"]) or x["filename"].startswith("<") for x in fr),
                      f"{stacks}: snapshot: Python frames only, with full paths: {fr}")
    ooms = [e for e in s["device_traces"][0] if e["action"] == "oom"]
    check(len(ooms) == 1 and any(x["filename"] == PROG and x["line"] == SITES[OOM_SITE] for x in ooms[0]["frames"]),
          f"{stacks}: snapshot: the oom event names line {SITES[OOM_SITE]}: {ooms[0]['frames'] if ooms else None}")


for stacks in ("python", "python+native:32"):
    with tempfile.TemporaryDirectory() as tmp:
        r = run(stacks, tmp)
        if r is None:
            continue
        err = r.stderr
        check(r.returncode == 7, f"{stacks}: exit 7 (CUCACHE_LEAK_EXITCODE), got {r.returncode}\n{err}")
        check("forward(4 GiB): failed" in r.stdout, f"{stacks}: the request failed: {r.stdout}")
        if KIND == "ctypes":
            check("thread done: 1 main thread spun yes" in r.stdout, f"{stacks}: the thread's run: {r.stdout}")
        # the failed request's own line first, before the report's detail
        head = [x[len("cucache: "):] for x in err.split("cucache: needed:", 1)[0].split("\n")
                if x.startswith("cucache: ")]
        at = [i for i, x in enumerate(head) if x == "the request, at"]
        check(len(at) == 1 and at[0] == 2, f"{stacks}: the OOM report names the request's call site first:\n{err}")
        if at:
            req = [line for _, line in own_frames(head[at[0] + 1:])][:len(OOM_FRAMES)]
            check(req == [SITES[x] for x in OOM_FRAMES],
                  f"{stacks}: the request's own frames are lines {[SITES[x] for x in OOM_FRAMES]}: {req}")
        oom = err.split("largest live allocations by call site (innermost frame first):", 1)
        check(len(oom) == 2, f"{stacks}: the OOM report lists call sites:\n{err}")
        if len(oom) == 2:
            check_sites(stacks, oom[1].split("segment map:", 1)[0], "OOM report")
        leak = re.split(r"leak check: GPU 0: .* still live at exit, by call site:", err, maxsplit=1)
        check(len(leak) == 2, f"{stacks}: the leak check by call site:\n{err}")
        if len(leak) == 2:
            check_sites(stacks, leak[1], "leak check")
        check_snapshot(stacks, tmp)
        check("no Python frames" not in err, f"{stacks}: every site has Python frames:\n{err}")

print(f"check_pystacks {KIND} {PY}: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
