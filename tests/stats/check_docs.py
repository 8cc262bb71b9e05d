#!/usr/bin/env python3
"""The docs' examples are produced by programs: every fenced
block in a document that follows a marker

    <!-- example: golden NAME -->

must be the golden file tests/stats/golden/NAME.txt, line for line, each
line with the "cucache: " prefix the interposer's log adds.  The goldens
are written by tests/stats/test_report.c from real core states, which also
applies every setting their hints name and requires the failed request to
be served; so every hint these examples show is one that holds.

Usage: check_docs.py GOLDEN_DIR DOC.md...
Exits 1 naming the document, the example and the first differing line.
"""
import os
import re
import sys

golden_dir, docs = sys.argv[1], sys.argv[2:]
failures = 0
checked = 0
MARK = re.compile(r"^<!-- example: golden (\S+) -->$")
for doc in docs:
    lines = open(doc, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = MARK.match(lines[i])
        i += 1
        if not m:
            continue
        name = m.group(1)
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        start = i + 1
        end = start
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        block = lines[start:end]
        i = end + 1
        path = os.path.join(golden_dir, name + ".txt")
        try:
            want = ["cucache: " + l for l in open(path, encoding="utf-8").read().rstrip("\n").split("\n")]
        except OSError as e:
            print(f"FAIL: {doc}: example '{name}': {e}")
            failures += 1
            continue
        checked += 1
        if block != want:
            for k in range(max(len(block), len(want))):
                got = block[k] if k < len(block) else "(nothing)"
                exp = want[k] if k < len(want) else "(nothing)"
                if got != exp:
                    print(f"FAIL: {doc}: example '{name}' (line {start + k + 1}) differs from {path}:\n"
                          f"  doc:    {got}\n  golden: {exp}")
                    break
            failures += 1
if checked == 0:
    print("FAIL: no example marked '<!-- example: golden NAME -->' found")
    failures += 1
print(f"check_docs: {checked} example(s), {failures} failure(s)")
sys.exit(1 if failures else 0)
