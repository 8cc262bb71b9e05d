#!/usr/bin/env python3
"""Compile a source of tests/compat that includes the real CUDA headers and
then a cuda_api.h in its check mode: that header's typedefs, macros and
prototypes against the real ones.  prototypes.c checks cucache's
include/cucache/cuda_api.h, prototypes_sim.c the simulator's
cusim/cuda_api.h (and cusim/sim.h).  Run by the build (a stamp target, so a
disagreement fails `ninja`) and by `meson test --suite compat`.

  check_prototypes.py --src SOURCE.c --header cuda_api.h --include DIR [--include DIR...]
                      --cuda-include DIR [--stamp FILE] -- CC [CC ARGS...]

Checks:
  1. SOURCE.c compiles (-Wall -Wextra -Werror) in each mode
     of the real headers (MODES below: default, per-thread default stream,
     legacy ABI versions);
  2. every function the header declares is declared by the real headers in
     at least one mode (otherwise 1 checks nothing about it).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_api_parse import ParseError, parse_header  # noqa: E402

FLAGS = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror"]
# The real headers declare different entry points depending on macros: the
# per-thread ones (_ptsz, _ptds) with CUDA_API_PER_THREAD_DEFAULT_STREAM, and
# older ABI versions that libcuda still exports (cuCtxCreate_v2, ...) only
# with __CUDA_API_VERSION_INTERNAL, as when NVIDIA builds the driver itself.
MODES = [("default", []),
         ("per-thread default stream", ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM=1"]),
         ("internal: legacy ABI versions", ["-D__CUDA_API_VERSION_INTERNAL=1"])]


def banner(args, what):
    return ("=" * 78 + "\n"
            f"cucache compat check FAILED: {args.header}\n"
            f"disagrees with the real CUDA headers in {args.cuda_include}\n"
            f"({what}).\n"
            "Fix the declaration in that header (or in the header the compiler names).\n"
            "This check is tests/compat (check_prototypes.py); rerun it with\n"
            "`meson test -C build --suite compat`.\n" + "=" * 78)


def compile_mode(args, cc, name, defines):
    includes = [f"-I{d}" for d in args.include]
    cmd = cc + FLAGS + defines + ["-fsyntax-only"] + includes + ["-isystem", args.cuda_include, args.src]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        print(f"--- {name} mode:\n$ " + " ".join(cmd))
        print(res.stdout + res.stderr)
        return False
    if not args.stamp:  # the build prints nothing on success
        print(f"ok - {os.path.basename(args.src)} compiles against the real headers ({name} mode)")
    return True


def real_declarations(args, cc, defines):
    """Names followed by '(' in the preprocessed real headers."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "real.c")
        with open(src, "w") as f:
            f.write("#include <cuda.h>\n#include <cuda_runtime_api.h>\n#include <cudaProfiler.h>\n#include <cuda_profiler_api.h>\n")
        res = subprocess.run(cc + ["-std=c11", "-E", "-P", "-isystem", args.cuda_include] + defines + [src],
                             capture_output=True, text=True)
    if res.returncode != 0:
        print(res.stderr)
        return None
    return set(re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", res.stdout))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--header", required=True)
    ap.add_argument("--include", required=True, action="append")
    ap.add_argument("--cuda-include", required=True)
    ap.add_argument("--stamp")
    ap.add_argument("cc", nargs="+")
    args = ap.parse_args()

    failed = [name for name, defines in MODES if not compile_mode(args, args.cc, name, defines)]
    if failed:
        print(banner(args, "typedefs, macros or prototypes; mode: " + ", ".join(failed)))
    ok = not failed

    try:
        _, _, functions = parse_header(args.header)
    except (OSError, ParseError) as e:
        print(f"check_prototypes.py: {args.header}: {e}")
        sys.exit(1)
    declared = set()
    for _, defines in MODES:
        names = real_declarations(args, args.cc, defines)
        if names is None:
            sys.exit(1)
        declared |= names
    missing = [f for f in functions if f not in declared]
    if missing:
        print(banner(args, "functions the real headers do not declare in any mode, so nothing checks them"))
        print("\n".join("  " + m for m in missing))
        ok = False
    elif not args.stamp:
        print(f"ok - all {len(functions)} functions of {args.header} are declared by the real headers")

    if not ok:
        sys.exit(1)
    if args.stamp:
        with open(args.stamp, "w") as f:
            f.write("ok\n")


if __name__ == "__main__":
    main()
