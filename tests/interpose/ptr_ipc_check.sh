#!/usr/bin/env bash
# tests/interpose/ptr_ipc_check.sh PTR_IPC LIBCUCACHE: tests/gpu/ptr_ipc.c,
# built against the real toolkit's headers and libraries, runs on the
# simulated device without cucache and then with it preloaded.  Both runs
# must pass their checks (--strict-meminfo: the reported free memory is
# allocated in 24 MiB pieces and in one piece), and every "answer" line (what
# CUDA told the program about its pointers, its IPC handles and the peer
# process's mappings) must be the same in both: the program sees CUDA, not
# cucache.  scripts/gpu-check runs the same comparison on a GPU.
set -uo pipefail
prog=$1 lib=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
env -u LD_PRELOAD "$prog" --strict-meminfo >"$tmp/plain" 2>&1
plain_rc=$?
LD_PRELOAD="$lib" "$prog" --strict-meminfo --expect-cucache >"$tmp/cucache" 2>&1
cucache_rc=$?
status=0
for run in plain cucache; do
    rc_var=${run}_rc
    grep -E '^check .*: FAIL|RESULT|ptr_ipc( peer)?: ' "$tmp/$run" | sed "s/^/$run: /"
    if [ "${!rc_var}" -ne 0 ]; then
        echo "FAIL: the run $run exited with status ${!rc_var}; its output:"
        cat "$tmp/$run"
        status=1
    fi
done
grep '^answer ' "$tmp/plain" >"$tmp/plain.answers"
grep '^answer ' "$tmp/cucache" >"$tmp/cucache.answers"
n=$(wc -l <"$tmp/plain.answers")
if [ "$n" -lt 80 ]; then
    echo "FAIL: only $n answers without cucache (the program stopped early?)"
    status=1
fi
if ! diff "$tmp/plain.answers" "$tmp/cucache.answers"; then
    echo "FAIL: CUDA's answers differ under cucache (< without, > with)"
    status=1
else
    echo "$n answers, the same without and with cucache"
fi
exit $status
