#!/usr/bin/env python3
"""The simulated libcublas.so.12 and libcublasLt.so.12 export every function
of the real 12.4 libraries (src/exports/cublas.txt, cublasLt.txt) with its
version, and README.md's cuBLAS table counts what they implement (a strong
symbol) and answer "not supported" (a weak stub).

    check_blas.py GEN_EXPORTS EXPORTS_DIR SIM_LIBDIR README
"""
import os
import subprocess
import sys

LIBS = (("libcublas.so.12", "cublas.txt"), ("libcublasLt.so.12", "cublasLt.txt"))


def table(libdir):
    rows = ["| cuBLAS library | implemented | not supported |", "|---|---:|---:|"]
    for lib, _ in LIBS:
        out = subprocess.run(["nm", "-D", "--defined-only", os.path.join(libdir, lib)], check=True,
                             capture_output=True, text=True).stdout
        kinds = [f[1] for f in (line.split() for line in out.splitlines()) if len(f) == 3 and f[1] in "TW"]
        rows.append(f"| `{lib}` | {kinds.count('T')} | {kinds.count('W')} |")
    return "\n".join(rows)


def main(gen, exports, libdir, readme):
    bad = []
    for lib, listed in LIBS:
        have = dict(line.split() for line in subprocess.run([gen, "read", os.path.join(libdir, lib)], check=True,
                                                            capture_output=True, text=True).stdout.splitlines())
        with open(os.path.join(exports, listed)) as f:
            want = dict(line.split() for line in f if line.strip() and not line.startswith("#"))
        for name, version in sorted(want.items()):
            if have.get(name) != version:
                bad.append(f"{lib}: {name} is {'exported as ' + have[name] if name in have else 'not exported'}"
                           f" (the real library's version is {version})")
        extra = sorted(set(have) - set(want))
        bad += [f"{lib}: {name} is exported but not a function of the real library" for name in extra]
        print(f"{lib}: {len(want)} functions of {listed}")
    want_table = table(libdir)
    if want_table not in open(readme).read():
        bad.append(f"{readme}'s cuBLAS table differs from the built libraries; replace it with:\n{want_table}")
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
