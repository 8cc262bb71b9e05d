#!/bin/sh
# Runs the nvcc-built graph program (subprojects/cusim/tests/nvcc_graphs.cu: a graph built
# by hand with a memory allocation node) on the simulated device alone and
# under libcucache.so: both must pass with the same output.  Then, with
# "oom", under cucache on a shared device with the simulated NVML: the
# cudaMalloc that does not fit gets cucache's OOM report, which counts the
# graph's 512 MiB as this process's memory outside cucache (cucache never
# sees graph allocations: they are not made by cudaMalloc).
#   nvcc_graphs_check.sh PROGRAM LIBCUCACHE
set -u
prog=$1 lib=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
env -u LD_PRELOAD "$prog" >"$tmp/alone" 2>"$tmp/alone.err" || {
    cat "$tmp/alone" "$tmp/alone.err"; echo "FAIL: the program failed on the simulator alone"; exit 1; }
LD_PRELOAD=$lib "$prog" >"$tmp/cucache" 2>"$tmp/cucache.err" || {
    cat "$tmp/cucache" "$tmp/cucache.err"; echo "FAIL: the program failed under cucache"; exit 1; }
if ! diff -u "$tmp/alone" "$tmp/cucache"; then
    echo "FAIL: the program's output differs under cucache"
    exit 1
fi
echo "graph program: the same $(wc -l <"$tmp/alone") lines alone and under cucache"
CUCACHE_SIM_SHARED="graphs-$$" LD_PRELOAD=$lib "$prog" oom >"$tmp/oom" 2>"$tmp/oom.err" || {
    cat "$tmp/oom" "$tmp/oom.err"; echo "FAIL: the oom run failed"; exit 1; }
grep -q "cudaMalloc of 768 MiB with the graph's memory reserved: cudaErrorMemoryAllocation" "$tmp/oom" || {
    cat "$tmp/oom"; echo "FAIL: the 768 MiB cudaMalloc did not fail"; exit 1; }
grep -q "this process, outside cucache: 512.00 MiB" "$tmp/oom.err" || {
    cat "$tmp/oom.err"; echo "FAIL: the OOM report does not count the graph's 512 MiB as this process's, outside cucache"; exit 1; }
echo "OOM report: the graph's 512 MiB is this process's memory outside cucache"
