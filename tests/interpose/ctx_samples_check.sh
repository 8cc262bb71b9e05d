#!/bin/sh
# Runs a sample-shaped driver-API program that creates its own contexts
# (ctx_samples.c) on the simulated device alone and under libcucache.so, and
# requires both to pass with the same output, and, under cucache, the
# summaries of CONTEXTS created contexts' allocators (CUCACHE_REPORT=exit:
# each destroyed context says what its allocator served), none when
# CONTEXTS is 0 (its memory is not cuMemAlloc's).
#   ctx_samples_check.sh PROGRAM MODE FIXTURE_DIR LIBCUCACHE CONTEXTS
set -u
prog=$1 mode=$2 dir=$3 lib=$4 want=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
env -u LD_PRELOAD "$prog" "$mode" "$dir" >"$tmp/alone" 2>"$tmp/alone.err" || {
    cat "$tmp/alone" "$tmp/alone.err"; echo "FAIL: $mode failed on the simulator alone"; exit 1; }
LD_PRELOAD=$lib CUCACHE_REPORT=exit "$prog" "$mode" "$dir" >"$tmp/cucache" 2>"$tmp/cucache.err" || {
    cat "$tmp/cucache" "$tmp/cucache.err"; echo "FAIL: $mode failed under cucache"; exit 1; }
got=$(grep -c "is destroyed; what its allocator served" "$tmp/cucache.err")
sums=$(grep -c "cucache memory summary" "$tmp/cucache.err")
if [ "$got" -ne "$want" ] || [ "$sums" -ne "$want" ]; then
    cat "$tmp/cucache.err"
    echo "FAIL: $mode: $got context allocators reported ($sums summaries), expected $want"
    exit 1
fi
if [ "$want" -gt 0 ] && ! grep -Eq "Allocations +\| +[0-9]+ +\| +[1-9]" "$tmp/cucache.err"; then
    cat "$tmp/cucache.err"; echo "FAIL: $mode: the context's allocator served no allocation"; exit 1
fi
if ! diff -u "$tmp/alone" "$tmp/cucache"; then
    echo "FAIL: $mode's output differs under cucache"
    exit 1
fi
echo "$mode: the same $(wc -l <"$tmp/alone") lines alone and under cucache; $want context allocator(s) served it"
