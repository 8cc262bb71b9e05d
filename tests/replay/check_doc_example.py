#!/usr/bin/env python3
"""docs/replay.md's example of a replay that agrees with its recorded run
is what the programs print, so that the docs show output the repository's
own programs produce: the leak loop (itest_child leak 220 300) under
cucache-run --sim=1G --trace, then the cucache-replay command the example
shows.  Times (the first OOM's, the replay's per event) vary from
run to run and are masked, with the spacing they move.

Usage: check_doc_example.py CUCACHE_RUN CUCACHE_REPLAY ITEST_CHILD DOC.md
"""
import os
import re
import subprocess
import sys
import tempfile

RUN, REPLAY, CHILD, DOC = sys.argv[1:5]
MARK = "<!-- example: replay leak -->"


def normal(line):
    line = re.sub(r"at \d+\.\d+ s", "at T s", line)
    line = re.sub(r"\d+ ns", "N ns", line)
    return " ".join(line.split())


doc = open(DOC, encoding="utf-8").read().split("\n")
if MARK not in doc:
    sys.exit(f"FAIL: {DOC}: no '{MARK}'")
start = doc.index(MARK) + 2
end = doc.index("```", start)
block = doc[start:end]
command = block[0]
if not command.startswith("$ build/cucache-replay ") or not command.endswith(" leak.trace"):
    sys.exit(f"FAIL: {DOC}: the example's first line is not the cucache-replay command on leak.trace: {command}")
args = command.split()[2:-1]

with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "leak.trace")
    env = dict(os.environ)
    env.pop("CUCACHE_CONF", None)
    r = subprocess.run([RUN, "--sim=1G", "--trace", trace, "--", CHILD, "leak", "220", "300"], capture_output=True,
                       text=True, env=env, timeout=120)
    if r.returncode != 3:
        sys.exit(f"FAIL: the leak loop should fail its 300 MiB request (exit 3), got {r.returncode}:\n{r.stderr}")
    out = subprocess.run([REPLAY, *args, trace], capture_output=True, text=True, cwd=tmp, timeout=120)
    if out.returncode != 0:
        sys.exit(f"FAIL: cucache-replay exited {out.returncode}: {out.stderr}")
    got = [l.replace(trace, "leak.trace") for l in out.stdout.rstrip("\n").split("\n")]

want = [normal(l) for l in block[1:]]
have = [normal(l) for l in got]
if want != have:
    for k in range(max(len(want), len(have))):
        w = want[k] if k < len(want) else "(nothing)"
        h = have[k] if k < len(have) else "(nothing)"
        if w != h:
            print(f"FAIL: {DOC} line {start + 2 + k}:\n  doc:     {w}\n  printed: {h}")
            break
    sys.exit(1)
print(f"check_doc_example: {len(want)} lines as printed")
