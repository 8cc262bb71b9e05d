#!/usr/bin/env python3
"""Every function of one committed export list (src/exports: dnn.txt,
nvml.txt) is exported by the simulated library, with the list's symbol
version.

    check_exports_lib.py GEN_EXPORTS LIST LIBRARY

Exit 1 naming every missing or misversioned function.
"""
import subprocess
import sys


def main(gen, listed, lib):
    out = subprocess.run([gen, "read", lib], check=True, capture_output=True, text=True).stdout
    have = dict(line.split() for line in out.splitlines())
    with open(listed) as f:
        want = dict(line.split() for line in f if line.strip() and not line.startswith("#"))
    bad = [f"{lib}: {n} is not exported (want version {v})" for n, v in sorted(want.items()) if n not in have]
    bad += [f"{lib}: {n} is exported with version {have[n]}, the real library's is {v}"
            for n, v in sorted(want.items()) if n in have and have[n] != v]
    for line in bad:
        print(line)
    print(f"{len(want) - len(bad)} of {len(want)} functions of {listed} exported as listed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]) if len(sys.argv) == 4 else __doc__)
