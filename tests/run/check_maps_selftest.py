#!/usr/bin/env python3
"""Proves that scripts/check-maps catches a stale map and passes a true one.

    check_maps_selftest.py SCRIPT ROOT

On a small made-up tree (a core/types.h map over two files, a README
layout), the true map passes, and each planted drift fails with its own
line: a file that does not exist, a glob that matches nothing, a name
defined nowhere, a name tied to the wrong file, a section the file lacks, an
example of the wrong type, a source file left out of the list, a folder
without a layout row.  Then on a copy of the repository's own core/ and
interpose/ (ROOT), their maps pass as they are, and fail again with the
stale pointers they once had put back: shared pages sent to expand.c, a
fence's waits sent to backend.c, a file left out of types.h's list.
"""
import os
import shutil
import subprocess
import sys
import tempfile

SCRIPT, ROOT = sys.argv[1], sys.argv[2]
failures = []

TYPES_H = """\
/*
 * A made-up core: a map.
 *
 * Files, and the prefix of what each shares:
 *   a.c         a_ (core_a)        the first file; its a_one() and
 *                                  a_two (a.c, a_two)
 *   b.c         b_                 the second (b.c, "Section two")
 *   hook_*.c                       the hooks
 *
 *   int x = a_one(1);
 */
int a_one(int v);
"""
A_C = """\
#include "types.h"
int a_one(int v) { return v; }
int a_two;
void core_a(void) {}
"""
B_C = """\
/* Section two: what b.c does. */
static int b_three(void) { return 3; }
"""
README = """\
# made up

## Layout

| path | what |
| --- | --- |
| `core/` | the core: `types.h` (the map) |
| `docs/` | documentation |

## Next
"""


def run(root, only):
    args = [sys.executable, SCRIPT, "--root", root]
    for o in only:
        args += ["--only", o]
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def expect(what, root, only, want):
    """want None: the checker passes; else it fails and prints `want`."""
    rc, out = run(root, only)
    ok = rc == 0 if want is None else (rc == 1 and want in out)
    print(f"{'ok' if ok else 'FAILED'}: {what}")
    if not ok:
        failures.append(what)
        print(f"  exit {rc}, wanted {'0' if want is None else '1 and: ' + want}; it printed:")
        print("  " + out.replace("\n", "\n  "))


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)


def planted(root, rel, old, new):
    """The file rel with old replaced by new; returns the true text."""
    path = os.path.join(root, rel)
    with open(path) as fh:
        text = fh.read()
    if old not in text:
        raise SystemExit(f"check_maps_selftest: {rel} no longer has {old!r}: update the plant")
    with open(path, "w") as fh:
        fh.write(text.replace(old, new, 1))
    return text


def made_up(tmp):
    root = os.path.join(tmp, "made-up")
    write(root, "core/types.h", TYPES_H)
    write(root, "core/a.c", A_C)
    write(root, "core/b.c", B_C)
    write(root, "core/hook_x.c", "void hook_x(void);\n")
    write(root, "docs/x.md", "x\n")
    write(root, "README.md", README)
    maps = ["core/types.h", "README.md"]
    expect("a true map passes", root, maps, None)
    plants = [
        ("core/types.h", " *   b.c ", " *   bb.c", "core/types.h:7: `bb.c` does not exist"),
        ("core/types.h", "hook_*.c", "hooks_*.c", "core/types.h:8: `hooks_*.c` matches no file"),
        ("core/types.h", "its a_one()", "its a_gone()",
         "core/types.h:5: `a_gone()` is defined nowhere in the tree's C sources"),
        ("core/types.h", "(a.c, a_two)", "(b.c, a_two)", "core/types.h:6: `a_two` is not defined in core/b.c"),
        ("core/types.h", "(core_a)", "(core_b)", "core/types.h:5: `core_b` is not defined in core/a.c"),
        ("core/types.h", " b_ ", " c_ ", "core/types.h:7: core/b.c defines nothing starting with `c_`"),
        ("core/types.h", '"Section two"', '"Section 2"', 'core/types.h:7: core/b.c has no section "Section 2"'),
        ("core/types.h", "int x = a_one(1);", "char *x = a_one(1);",
         "core/types.h:10: the example assigns a_one() to a `char *`, but it returns `int`"),
        ("README.md", "| `docs/` | documentation |\n", "", "README.md:3: the layout has no row for docs/"),
        ("README.md", "`types.h` (the map)", "`type.h` (the map)", "README.md:7: `type.h` does not exist"),
    ]
    for rel, old, new, want in plants:
        true_text = planted(root, rel, old, new)
        expect(f"caught: {want}", root, maps, want)
        write(root, rel, true_text)
    write(root, "core/c.c", "int c_four;\n")
    expect("caught: a source file the list leaves out", root, maps,
           "core/types.h:1: does not name core/c.c (the map lists every source file of core/)")
    os.remove(os.path.join(root, "core/c.c"))
    expect("the true map passes again", root, maps, None)


def real_copy(tmp):
    root = os.path.join(tmp, "copy")
    for d in ("core", "include", "interpose", "stats", "docs"):
        shutil.copytree(os.path.join(ROOT, d), os.path.join(root, d))
    shutil.copy(os.path.join(ROOT, ".gitignore"), root)
    maps = ["core/types.h", "interpose/hook.h"]
    expect("the repository's core/types.h and interpose/hook.h pass", root, maps, None)
    plants = [
        ("core/types.h", '(core/share.c; expand.h, "Shared pages")', '(core/expand.c, "Shared pages")',
         'core/expand.c has no section "Shared pages"'),
        ("core/types.h", " *   proc.c ", " *   prc.c  ", "does not name core/proc.c"),
        ("interpose/hook.h", "(order.c, wait_fence)", "(backend.c, wait_fence)",
         "`wait_fence` is not defined in interpose/backend.c (it is in interpose/order.c)"),
    ]
    for rel, old, new, want in plants:
        true_text = planted(root, rel, old, new)
        expect(f"caught in the repository's {rel}: {want}", root, maps, want)
        write(root, rel, true_text)


with tempfile.TemporaryDirectory(prefix="check-maps-") as tmp:
    made_up(tmp)
    real_copy(tmp)
if failures:
    print(f"check_maps_selftest: {len(failures)} cases failed")
    sys.exit(1)
print("check_maps_selftest: every case as expected")
