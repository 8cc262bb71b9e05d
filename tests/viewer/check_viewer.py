"""Checks that PyTorch's own memory tools read cucache's snapshots: every
command of torch/cuda/_memory_viz.py, and its viewer page (MemoryViz.js) in
headless Chromium, both as the page trace_plot and segment_plot write and
with the pickle dropped on the bare viewer (the path pytorch.org/memory_viz
takes, which unpickles cucache's own bytes in JavaScript).  PyTorch's real
snapshots (shared/traces) go through the same steps, and a console error
fails a step only when no PyTorch snapshot raises it there too.

scripts/check-viewer installs what it needs and runs this; by hand:

    check_viewer.py --build BUILD --work WORKDIR --torch SRC --node NODE_DIR
                    [--quick] [--flamegraph FILE] [--refs PICKLE...]

Each step's verdict is a line of WORKDIR/results.txt, what the browser saw
is WORKDIR/browser.json; the last line printed is "N passed, N failed, N
skipped" and the exit status is 1 when any step failed.

Seen to fail: with cucache's snapshot writer putting a list of 210,000
events in one MARK ... APPENDS run, events210k's drop fails with
"RangeError: Maximum call stack size exceeded" (no PyTorch snapshot raises
it; the same snapshot pickled again by Python opens); with exit-stacks run
without --stacks, its four "stack shown" steps and cli:memory fail; with
one of the CDN modules left unserved, every browser step fails on the
refused request, PyTorch's snapshots' too, within seconds.
"""
import argparse
import contextlib
import importlib.util
import io
import json
import os
import pickle
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))

NATIVE = r"viewer_child\.c:\d+:(load_weights|forward_activation|backward_gradient|scratch)"
STRIPPED = r"stacks_child\.c:\d+:(load_weights|cache_alloc|grow_cache)"
PYTHON = r"viewer_python\.py:\d+:(cuda_malloc|load_weights|forward|train)"
NO_FRAMES = r"This block has no frames"
PYTORCH_FRAMES = r"\.py:\d+:\S"

# The snapshots cucache writes for the check, one row each: name, program
# (relative to the build directory, or a command), cucache-run options,
# extra environment, the stack frames a hovered block must show (NO_FRAMES
# without stacks), whether --quick runs it.
CASES = [
    ("exit-stacks", ["tests/viewer/viewer_child", "steps"], ["--stacks", "--snapshot-on", "exit"], {}, NATIVE, True),
    ("exit-nostacks", ["tests/viewer/viewer_child", "steps"], ["--snapshot-on", "exit"], {}, NO_FRAMES, False),
    ("oom-stacks", ["tests/viewer/viewer_child", "oom"], ["--stacks"], {}, NATIVE, False),
    ("oom-stripped", ["tests/interpose/stacks_child", "64"], ["--stacks"], {}, STRIPPED, False),
    ("signal", ["tests/viewer/viewer_child", "signal", "{snap0}"], ["--snapshot-on", "signal,exit"], {}, NO_FRAMES, False),
    ("expandable", ["tests/viewer/viewer_child", "steps"],
     ["--stacks", "--conf", "expandable_segments:true", "--snapshot-on", "exit"], {}, NATIVE, False),
    ("devices2", ["tests/viewer/viewer_child", "steps"], ["--stacks", "--snapshot-on", "exit"],
     {"CUCACHE_SIM_DEVICES": "2"}, NATIVE, True),
    ("pools", ["tests/viewer/viewer_child", "pools"], ["--stacks", "--snapshot-on", "exit"], {}, NATIVE, False),
    ("events210k", ["tests/viewer/viewer_child", "churn", "70000"], ["--snapshot-on", "exit"],
     {"CUCACHE_SNAPSHOT_EVENTS": "300000"}, NO_FRAMES, True),
    ("python-stacks", [sys.executable, os.path.join(HERE, "viewer_python.py")], ["--snapshot-on", "exit"],
     {"CUCACHE_STACKS": "python"}, PYTHON, False),
]

# What each case's snapshot must hold beyond what every one does.
WANT = {
    "oom-stacks": lambda s: any(e["action"] == "oom" for t in s["device_traces"] for e in t) or "no oom event",
    "oom-stripped": lambda s: any(e["action"] == "oom" for t in s["device_traces"] for e in t) or "no oom event",
    "expandable": lambda s: all(g["is_expandable"] for g in s["segments"]) or "segments not expandable",
    "devices2": lambda s: sum(1 for t in s["device_traces"] if t) == 2 or "not two devices with events",
    "pools": lambda s: any(tuple(g["segment_pool_id"]) != (0, 0) for g in s["segments"])
    or "no segment in a private pool",
    "events210k": lambda s: sum(len(t) for t in s["device_traces"]) > 200000 or "not over 200,000 events",
}


class Refusing(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name} refused")


def load(path):
    with open(path, "rb") as f:
        return Refusing(f).load()


class Results:
    def __init__(self, path):
        self.path = path
        self.counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
        self.out = open(path, "w")

    def add(self, verdict, case, step, detail=""):
        self.counts[verdict] += 1
        line = f"{verdict} {case} {step}" + (f": {detail}" if detail else "")
        self.out.write(line + "\n")
        self.out.flush()
        if verdict != "PASS":
            print(line)


def make_snapshots(args, res, cases):
    """Runs each case under cucache-run --sim; returns {name: (pickle, partner, expect)}."""
    snapdir = os.path.join(args.work, "snap")
    os.makedirs(snapdir, exist_ok=True)
    made = {}
    run = os.path.join(args.build, "cucache-run")
    for name, prog, opts, env, expect, _ in cases:
        for f in os.listdir(snapdir):
            if f.startswith((name + ".", name + "-")):  # signal's are NAME-0, NAME-1
                os.remove(os.path.join(snapdir, f))
        e = dict(os.environ, **env)
        if "CUCACHE_STACKS" in env:
            probe = subprocess.run([run, "--sim=1G", "true"], env=e, capture_output=True, text=True)
            if probe.returncode != 0:
                res.add("SKIP", name, "make",
                        f"CUCACHE_STACKS={env['CUCACHE_STACKS']} is not accepted by this build "
                        f"({probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else probe.returncode})")
                continue
        signal = "signal" in ",".join(opts)
        snap = os.path.join(snapdir, name + ("-%n" if signal else "") + ".pickle")
        snap0 = os.path.join(snapdir, name + "-0.pickle")
        argv = [a.format(snap0=snap0) for a in prog]
        if not os.path.isabs(argv[0]):
            argv[0] = os.path.join(args.build, argv[0])
        cmd = [run, "--sim=2G", *opts, "--snapshot", snap, "--", *argv]
        p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=300)
        pickles = [snap0, os.path.join(snapdir, name + "-1.pickle")] if signal else [snap]
        missing = [f for f in pickles if not os.path.exists(f)]
        if p.returncode != 0 or missing:
            res.add("FAIL", name, "make", f"exit {p.returncode}, missing {missing}: {p.stderr.strip()[-400:]}")
            continue
        s = load(pickles[0])
        want = WANT.get(name, lambda s: True)(s)
        if want is not True:
            res.add("FAIL", name, "make", want)
            continue
        events = sum(len(t) for t in s["device_traces"])
        res.add("PASS", name, "make", f"{len(s['segments'])} segments, {events} events, "
                f"{os.path.getsize(pickles[0])} bytes ({' '.join(opts)})")
        made[name] = (pickles[0], pickles[1] if signal else None, expect)
    return made


def viz_module(path):
    spec = importlib.util.spec_from_file_location("memory_viz", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_cli(args, res, name, pickle_path, partner, expect, pages, ref_errors):
    """Every command of _memory_viz.py on one snapshot; returns the pages
    written.  ref_errors maps a command to the last lines of the errors it
    gave on PyTorch's snapshots (filled while the references run): a
    command that fails on cucache's snapshot with one of them is PyTorch's
    defect, reported as skipped."""
    mv = os.path.join(args.torch, "torch", "cuda", "_memory_viz.py")
    out = os.path.join(args.work, "out")
    os.makedirs(out, exist_ok=True)
    snap = load(pickle_path)
    # The flamegraph commands' input (folded stacks), from _memory_viz's own
    # functions with the formatter replaced by the identity.
    mod = viz_module(mv)
    folded = {"segments": mod.segments(snap, format_flamegraph=lambda s: s),
              "memory": mod.memory(snap, format_flamegraph=lambda s: s)}
    if partner:
        # compare() takes two lists of segments (the command line passes
        # whole snapshots: see ref_errors)
        other = load(partner)["segments"]
        with contextlib.redirect_stdout(io.StringIO()):
            folded["compare"] = mod.compare(snap["segments"], other, format_flamegraph=lambda s: s)
    steps = [
        ("stats", [pickle_path], None),
        ("trace", [pickle_path], None),
        ("segments", [pickle_path, "-o", f"{out}/{name}-segments.svg"], f"{out}/{name}-segments.svg"),
        ("memory", [pickle_path, "-o", f"{out}/{name}-memory.svg"], f"{out}/{name}-memory.svg"),
        ("trace_plot", [pickle_path, "-o", f"{pages}/{name}-trace_plot.html"], f"{pages}/{name}-trace_plot.html"),
        ("trace_plot-s", ["-s", pickle_path, "-o", f"{pages}/{name}-trace_plot-s.html"],
         f"{pages}/{name}-trace_plot-s.html"),
        ("segment_plot", [pickle_path, "-o", f"{pages}/{name}-segment_plot.html"],
         f"{pages}/{name}-segment_plot.html"),
    ]
    if partner:
        steps.append(("compare", [pickle_path, partner, "-o", f"{out}/{name}-compare.svg"], f"{out}/{name}-compare.svg"))
    written = {}
    for cmd, cargs, outfile in steps:
        if outfile and os.path.exists(outfile):
            os.remove(outfile)
        flame = cmd in ("segments", "memory", "compare")
        problems = []
        if flame and not folded[cmd].strip():
            problems.append("empty flamegraph input")
        if cmd == "memory" and expect not in (NO_FRAMES, PYTORCH_FRAMES):
            fn = expect.rsplit(":", 1)[-1]
            if not re.search(fn, folded[cmd]):
                problems.append(f"no frame {fn} in the folded stacks")
        if flame and not args.flamegraph:
            res.add("FAIL" if problems else "PASS", name, f"cli:{cmd}",
                    "; ".join(problems) if problems else
                    f"checked up to flamegraph.pl's input ({len(folded[cmd].splitlines())} folded lines): "
                    "no flamegraph.pl, which the command would download")
            continue
        t0 = time.time()
        p = subprocess.run([sys.executable, mv, cmd.split("-")[0], *cargs], capture_output=True, text=True,
                           timeout=600)
        secs = time.time() - t0
        if p.returncode != 0:
            problems.append(f"exit {p.returncode}")
        if "Traceback" in p.stderr:
            problems.append("Traceback: " + p.stderr.strip().splitlines()[-1])
        body = p.stdout if outfile is None else (open(outfile, errors="replace").read() if os.path.exists(outfile) else "")
        if not body.strip():
            problems.append("empty output")
        if cmd == "stats":
            m = re.search(r"^segments: (\d+)$", body, re.M)
            if not m or int(m.group(1)) != len(snap["segments"]):
                problems.append(f"'segments: N' is not the snapshot's {len(snap['segments'])}")
        if cmd == "trace":
            entries = sum(int(x) for x in re.findall(r"^(\d+) entries$", body, re.M))
            if entries != sum(len(t) for t in snap["device_traces"]):
                problems.append(f"{entries} entries printed, not the snapshot's")
        if flame and "<svg" not in body:
            problems.append("no <svg> in the output")
        last = p.stderr.strip().splitlines()[-1] if p.returncode != 0 and p.stderr.strip() else None
        if name.startswith("pytorch-") and last:
            ref_errors.setdefault(cmd, set()).add(last)
            res.add("SKIP", name, f"cli:{cmd}", f"fails on PyTorch's own snapshot: {last}")
            continue
        if last and last in ref_errors.get(cmd, set()):
            res.add("SKIP", name, f"cli:{cmd}", f"fails as on PyTorch's own snapshots: {last}")
            continue
        if outfile and outfile.endswith(".html"):
            written[cmd] = outfile
        res.add("FAIL" if problems else "PASS", name, f"cli:{cmd}",
                "; ".join(problems) if problems else f"{len(body)} bytes in {secs:.1f} s")
    if partner and args.flamegraph:
        # compare() as its signature means it, through flamegraph.pl
        p = subprocess.run([args.flamegraph, "--countname", "bytes"], input=folded["compare"],
                           capture_output=True, text=True, timeout=600)
        ok = p.returncode == 0 and "<svg" in p.stdout and folded["compare"].strip()
        res.add("PASS" if ok else "FAIL", name, "api:compare",
                f"{len(folded['compare'].splitlines())} folded lines against {os.path.basename(partner)}, "
                f"flamegraph.pl exit {p.returncode}, {len(p.stdout)} bytes of SVG")
    return written


def device_facts(snap):
    """Per device: allocations in the trace, blocks live at the end."""
    facts = {}
    for d, t in enumerate(snap["device_traces"]):
        live = sum(1 for g in snap["segments"] if g["device"] == d
                   for b in g["blocks"] if b["state"] == "active_allocated")
        facts[d] = {"allocs": sum(1 for e in t if e["action"] == "alloc"), "live": live}
    return facts


def view_of(step):
    return step.split(":")[1] if step.startswith("drop:") else \
        {"page:trace_plot": "Active Memory Timeline", "page:segment_plot": "Allocator State History",
         "page:trace_plot-s": "Active Cached Segment Timeline"}[step]


def label_of(step):
    return re.sub(r":gpu\d+$", "", step)


def judge(res, browser, info, refs):
    """A step fails on a console error no PyTorch snapshot raises at the
    same step, on nothing drawn, or on a hovered block without its stack.
    Where PyTorch's own snapshots draw nothing either (the viewer's
    defect), a step that fails the same way is skipped with that said."""
    allowed, broken = {}, {}
    for r in browser:
        if r["case"] in refs:
            allowed.setdefault(label_of(r["step"]), set()).update(r.get("errors", []))
            # the viewer failing on PyTorch's own snapshot: an exception, with
            # every request served (a refused one is this machine's fault)
            if not r.get("drawn") and r.get("errors") and not r.get("refused") and not r.get("driver_error"):
                broken[label_of(r["step"])] = r["errors_raw"][0]
    for r in browser:
        name, step = r["case"], r["step"]
        expect, facts = info[name]
        m = re.search(r":gpu(\d+)$", step)
        device = int(m.group(1)) if m else min((d for d in facts if facts[d]["allocs"] or facts[d]["live"]),
                                               default=0)
        problems = []
        if r.get("driver_error"):
            problems.append("driver: " + r["driver_error"])
        if r.get("refused"):
            problems.append("requests refused (not served locally): " + ", ".join(r["refused"][:3]))
        new = [e for e in r.get("errors", []) if e not in allowed.get(label_of(step), set())]
        if new:
            raw = r.get("errors_raw") or new
            problems.append("console errors no PyTorch snapshot raises here: " + " | ".join(raw[:2]))
        view = view_of(step) if step != "drop" else None
        if not r.get("drawn"):
            problems.append("nothing drawn")
        elif view in ("Active Memory Timeline", "Allocator State History", "Active Cached Segment Timeline"):
            has = facts[device]["live"] if view == "Allocator State History" else \
                facts[device]["allocs"] + facts[device]["live"]
            if has and not r.get("hovered"):
                problems.append(f"no block to hover among {r.get('candidates')} drawn")
            elif has:
                text = r.get("text", "")
                want = r"Addr: " if view == "Active Cached Segment Timeline" else expect
                if not re.search(want, text) or (view != "Allocator State History" and "Addr: " not in text):
                    problems.append(f"the hovered block's text lacks /{want}/: {text[:160]!r}")
        if problems and not r.get("drawn") and not new and not r.get("refused") and not r.get("driver_error") \
                and label_of(step) in broken:
            res.add("SKIP", name, step, f"PyTorch's viewer fails on PyTorch's own snapshots here too: "
                    f"{broken[label_of(step)]}")
            continue
        verdict = "FAIL" if problems else "PASS"
        detail = "; ".join(problems) if problems else (
            f"{r.get('drawn')} drawn, stack shown ({'hover' if r.get('hovered') is True else r.get('hovered')})"
            if r.get("hovered") else f"{r.get('drawn')} drawn") + f", {r.get('seconds', 0):.1f} s"
        if r.get("errors") and not new:
            detail += f"; console errors PyTorch's snapshots raise too: {r['errors'][:2]}"
        res.add(verdict, name, step, detail)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--torch", required=True, help="the extracted PyTorch source (holds torch/cuda/_memory_viz.py)")
    ap.add_argument("--node", required=True, help="the npm directory (node_modules, cdn/)")
    ap.add_argument("--flamegraph", default="", help="flamegraph.pl where _memory_viz.py looks; '' when absent")
    ap.add_argument("--refs", nargs="*", default=[])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--started", type=float, default=None, help="when the run began (seconds since the epoch)")
    args = ap.parse_args()

    os.makedirs(args.work, exist_ok=True)
    res = Results(os.path.join(args.work, "results.txt"))
    t0 = time.time()
    cases = [c for c in CASES if c[5] or not args.quick]
    made = make_snapshots(args, res, cases)
    pages = os.path.join(args.work, "pages")
    os.makedirs(pages, exist_ok=True)
    plan_cases, info = [], {}
    refs = {}
    for path in args.refs:
        refs["pytorch-" + os.path.basename(path).split(".")[0]] = path
    # compare's partner: cucache's snapshots are compared with the first
    # PyTorch snapshot (signal's with its own exit snapshot), PyTorch's with
    # the first of cucache's
    first_ref = next(iter(refs.values()), None)
    first_made = next(iter(made.values()), (None,))[0]
    todo = [(n, p, first_made, PYTORCH_FRAMES) for n, p in refs.items()] + \
        [(n, p, q or first_ref, e) for n, (p, q, e) in made.items()]
    ref_errors = {}
    for name, path, partner, expect in todo:
        written = run_cli(args, res, name, path, partner, expect, pages, ref_errors)
        info[name] = (expect, device_facts(load(path)))
        plan_cases.append({"name": name, "pickle": path, "trace_plot": written.get("trace_plot"),
                           "segment_plot": written.get("segment_plot"),
                           "trace_plot_s": written.get("trace_plot-s"),
                           "screenshots": name in ("exit-stacks", "python-stacks") or name in refs,
                           "seconds": 120})
    shots = os.path.join(args.work, "shots")
    os.makedirs(shots, exist_ok=True)
    plan = {"node_dir": args.node, "cdn_dir": os.path.join(args.node, "cdn"),
            "memoryviz_js": os.path.join(args.torch, "torch", "utils", "viz", "MemoryViz.js"),
            "pages_dir": pages, "shots_dir": shots,
            # the PyTorch snapshots first: their errors are the baseline
            "cases": sorted(plan_cases, key=lambda c: c["name"] not in refs)}
    plan_file = os.path.join(args.work, "plan.json")
    browser_file = os.path.join(args.work, "browser.json")
    json.dump(plan, open(plan_file, "w"), indent=1)
    if os.path.exists(browser_file):
        os.remove(browser_file)
    p = subprocess.run(["node", os.path.join(HERE, "viewer.mjs"), plan_file, browser_file], timeout=3600)
    browser = json.load(open(browser_file)) if os.path.exists(browser_file) else []
    if p.returncode != 0:
        res.add("FAIL", "browser", "run", f"viewer.mjs exited {p.returncode}")
    judge(res, browser, info, refs)
    c = res.counts
    total = f", {time.time() - args.started:.0f} s in all" if args.started else ""
    print(f"results: {res.path} (browser: {browser_file}, screenshots: {shots}); "
          f"checked in {time.time() - t0:.0f} s{total}")
    print(f"{c['PASS']} passed, {c['FAIL']} failed, {c['SKIP']} skipped")
    return 1 if c["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
