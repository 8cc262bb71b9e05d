#!/usr/bin/env python3
"""The man pages: each renders without a warning (groff -ww,
when groff is there), and they leave nothing out; each of these has an
entry of its own (a paragraph that starts with it), not only a mention:

  - in cucache-run(1), every option `cucache-run --help` prints;
  - in cucache-replay(1), every option `cucache-replay --help` prints;
  - in cucache-top(1), every option `cucache-top --help` prints;
  - in cucache(7), every CUCACHE_CONF key `cucache-run --conf help` lists
    and every CUCACHE_ variable the library reads (secure_getenv in
    interpose/ and stats/).

Usage: check_man.py MAN_DIR CUCACHE_RUN CUCACHE_REPLAY SOURCE_ROOT CUCACHE_TOP
Exit 77 (skipped) without groff when the rest passed.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

man_dir, run, replay, src, top = sys.argv[1:6]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def text_of(page):
    """The page's words: roff font escapes and zero-width marks removed."""
    raw = open(os.path.join(man_dir, page), encoding="utf-8").read()
    raw = re.sub(r"\\f[BIRP]", "", raw)
    return raw.replace("\\&", "").replace("\\-", "-").replace("\\(em", "-")


pages = {p: text_of(p) for p in ("cucache-run.1", "cucache-replay.1", "cucache-top.1", "cucache.7")}
groff = shutil.which("groff")
for p in pages:
    if groff:
        r = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", os.path.join(man_dir, p)], capture_output=True,
                           text=True)
        check(r.returncode == 0 and not r.stderr.strip(), f"{p} renders with warnings: {r.stderr.strip()}")
    check(pages[p].startswith(".\\\"") or ".TH" in pages[p], f"{p} is not a man page")


def entries(text):
    """The names that start an entry: the first words of a line, split at
    ", " ("-h, --help"), less what follows "=" or "[" in each."""
    names = set()
    for line in text.split("\n"):
        if not line or line.startswith("."):
            continue
        for part in line.split(", "):
            m = re.match(r"^([-\w]+)", part)
            if m:
                names.add(m.group(1))
            if not part.startswith("-"):
                break
    return names


def options(tool):
    """The options --help lists: lines that start (indented) with one, and
    the others after ", " on them ("-h, --help")."""
    out = subprocess.run([tool, "--help"], capture_output=True, text=True).stdout
    found = set()
    for line in out.split("\n"):
        m = re.match(r"^\s+(-[-\w]+(?:[=\[ ][^,]*)?(?:, -[-\w]+)*)", line)
        if m:
            found |= set(re.findall(r"(?:^|, )(-[-\w]+)", m.group(1)))
    return sorted(found)


for tool, page in ((run, "cucache-run.1"), (replay, "cucache-replay.1"), (top, "cucache-top.1")):
    opts = options(tool)
    check(len(opts) >= 8, f"{tool} --help lists {opts}")
    have = entries(pages[page])
    for o in opts:
        check(o in have, f"{page} has no entry for {o}, which {os.path.basename(tool)} --help prints")

conf = subprocess.run([run, "--conf", "help", "true"], capture_output=True, text=True)
keys = re.findall(r"^cucache: ([a-z_0-9]+) +(?:MiB|list|fraction|bool|choice|bytes)\b", conf.stderr + conf.stdout,
                  re.M)
check(len(keys) >= 15, f"--conf help lists keys: {keys}")
have = entries(pages["cucache.7"])
for k in keys:
    check(k in have, f"cucache.7 has no entry for the CUCACHE_CONF key {k}")

variables = set()
for path in glob.glob(os.path.join(src, "interpose", "*.c")) + glob.glob(os.path.join(src, "stats", "*.c")):
    variables |= set(re.findall(r'getenv\("(CUCACHE_[A-Z_]+)"\)', open(path, encoding="utf-8").read()))
check(len(variables) >= 10, f"variables read: {sorted(variables)}")
for v in sorted(variables):
    check(v in have, f"cucache.7 has no entry for {v}, which the library reads")

print(f"check_man: {len(pages)} pages, {len(keys)} keys, {len(variables)} variables; {len(failures)} failure(s)")
if not failures and not groff:
    print("skipped: no groff, the pages' rendering was not checked (the rest passed)")
    sys.exit(77)
sys.exit(1 if failures else 0)
