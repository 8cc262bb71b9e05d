#!/usr/bin/env python3
"""Run the two layout programs of gen_layout.py and compare their output.

  diff_layout.py HEADER OURS REAL

OURS prints enum values, struct sizes, field offsets and field types as
HEADER declares them (cucache's include/cucache/cuda_api.h or the
simulator's cusim/cuda_api.h); REAL prints the same for the real CUDA
headers.  Any differing line is a disagreement between HEADER and the
toolkit: fix HEADER.  Exit status 0 when equal, 1 otherwise.
"""
import difflib
import subprocess
import sys


def run(exe):
    res = subprocess.run([exe], capture_output=True, text=True)
    if res.returncode != 0:
        print(f"diff_layout.py: {exe} exited with {res.returncode}\n{res.stderr}", file=sys.stderr)
        sys.exit(1)
    return res.stdout.splitlines()


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    header = sys.argv[1]
    ours, real = run(sys.argv[2]), run(sys.argv[3])
    n_enum = sum(1 for line in ours if line.startswith("enum "))
    n_struct = sum(1 for line in ours if line.startswith("struct "))
    if n_enum == 0 or n_struct == 0:
        print(f"diff_layout.py: {sys.argv[2]} printed {n_enum} enum and {n_struct} struct lines: nothing checked")
        sys.exit(1)
    diff = list(difflib.unified_diff(ours, real, header, "real cuda.h + cuda_runtime_api.h", n=0, lineterm=""))
    if diff:
        print(f"{header} disagrees with the real CUDA headers (- ours, + real; fix {header}):")
        print("\n".join(diff))
        sys.exit(1)
    print(f"{header} agrees with the real headers on {n_enum} enum lines and {n_struct} struct lines")


if __name__ == "__main__":
    main()
