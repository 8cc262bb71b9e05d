#!/bin/sh
# Runs a program on the simulated device alone and under libcucache.so,
# and requires both to pass with the same output, and cucache to have
# served the run (its exit summary, CUCACHE_REPORT=exit): the driver-API
# module program (subprojects/cusim/tests/module_prog.c: real images nvcc made, loaded
# every way the driver offers, kernels launched, memory freed), given the
# fixtures' directory, and the nvcc programs (subprojects/cusim/tests/nvcc_*.cu), given
# '-' or the fixtures' directory (they read no argument).
#   modules_check.sh PROGRAM FIXTURE_DIR LIBCUCACHE
set -u
prog=$1 dir=$2 lib=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
env -u LD_PRELOAD "$prog" "$dir" >"$tmp/alone" 2>"$tmp/alone.err" || {
    cat "$tmp/alone" "$tmp/alone.err"; echo "FAIL: the program failed on the simulator alone"; exit 1; }
LD_PRELOAD=$lib CUCACHE_REPORT=exit "$prog" "$dir" >"$tmp/cucache" 2>"$tmp/cucache.err" || {
    cat "$tmp/cucache" "$tmp/cucache.err"; echo "FAIL: the program failed under cucache"; exit 1; }
grep -q "cucache memory summary" "$tmp/cucache.err" || {
    cat "$tmp/cucache.err"; echo "FAIL: cucache did not serve the run (no exit summary)"; exit 1; }
if ! diff -u "$tmp/alone" "$tmp/cucache"; then
    echo "FAIL: the program's output differs under cucache"
    exit 1
fi
echo "$(basename "$prog"): the same $(wc -l <"$tmp/alone") lines alone and under cucache"
