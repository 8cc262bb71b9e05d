#!/usr/bin/env python3
"""The simulated CUDA libraries export the functions the real ones do, with
the same symbol versions (src/exports, docs/simulator.md "What is
simulated"); each runtime exports no function its real one lacks.

    check_exports.py GEN_EXPORTS EXPORTS_DIR SIM_LIBDIR [CUDA_ROOT]

Reference lists: where CUDA_ROOT/lib64 holds the toolkit's libraries, their
exports (libcudart.so.N against the simulated libcudart.so.N of the same
major, stubs/libcuda.so against libcuda.so.1), read by `gen-exports read`;
elsewhere (CI) the committed lists: cudart12.txt (CUDA 12.4's
libcudart.so.12), cudart.txt (CUDA 13's libcudart.so.13), cuda.txt.
Deliberately left out: the names `gen-exports withheld` prints (a _v2
whose older variant is simulated; docs/simulator.md names them), and no
family.  Exit 1 naming every missing, misversioned or extra function.
"""
import os
import subprocess
import sys

def read(gen, path):
    out = subprocess.run([gen, "read", path], check=True, capture_output=True, text=True).stdout
    return dict(line.split() for line in out.splitlines())


def read_list(path):
    with open(path) as f:
        return dict(line.split() for line in f if line.strip() and not line.startswith("#"))


def compare(what, want, have, withheld, exact):
    bad = [f"{what}: {name} is exported but the real library has no such function"
           for name in sorted(have) if exact and name not in want]
    for name, version in sorted(want.items()):
        if name in withheld:
            if name in have:
                bad.append(f"{what}: {name} is exported but gen-exports still withholds it")
            continue
        if name not in have:
            bad.append(f"{what}: {name} is not exported (want version {version})")
        elif have[name] != version:
            bad.append(f"{what}: {name} is exported with version {have[name]}, the real library's is {version}")
    return bad


def main(gen, exports, libdir, cuda_root=""):
    lib64 = os.path.join(cuda_root, "lib64") if cuda_root else ""
    pairs = []  # (reference name, reference exports, simulated library)
    for major, listed in (("12", "cudart12.txt"), ("13", "cudart.txt")):
        real = os.path.join(lib64, f"libcudart.so.{major}") if lib64 else ""
        if real and os.path.exists(real):
            pairs.append((real, read(gen, real), f"libcudart.so.{major}"))
        else:
            pairs.append((f"src/exports/{listed}", read_list(os.path.join(exports, listed)), f"libcudart.so.{major}"))
    real = os.path.join(lib64, "stubs", "libcuda.so") if lib64 else ""
    if real and os.path.exists(real):
        pairs.append((real, read(gen, real), "libcuda.so.1"))
    else:
        pairs.append(("src/exports/cuda.txt", read_list(os.path.join(exports, "cuda.txt")), "libcuda.so.1"))

    withheld = set(subprocess.run([gen, "withheld"], check=True, capture_output=True, text=True).stdout.split())
    bad = []
    for ref, want, lib in pairs:
        have = read(gen, os.path.join(libdir, lib))
        # the driver exports the simulator's own cucacheSim* functions too
        found = compare(f"{lib} (reference {ref})", want, have, withheld, lib.startswith("libcudart"))
        print(f"{lib}: {len(want)} functions of {ref}, {len(found)} missing, misversioned or extra")
        bad += found
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
