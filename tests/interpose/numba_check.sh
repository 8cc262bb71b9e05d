#!/usr/bin/env bash
# tests/interpose/numba_check.sh: a real driver-level client (numba's CUDA
# driver binding, Debian's python3-numba, which binds the driver API by
# name with ctypes) runs its own driver, memory and IPC tests on the
# simulated device twice, without and with cucache preloaded, and must give the same
# results: the same tests pass, the same fail.  The ones that fail on the
# simulated device compile kernels (there is no libNVVM to make their PTX);
# at least MIN_PASSED must pass.  Exit 77 (skipped) when numba
# is not installed.
#
# Environment (tests/interpose/meson.build): LIBCUCACHE (build/libcucache.so),
# SIM_LIBDIR (build/subprojects/cusim/lib).
set -uo pipefail

MIN_PASSED=150
py=/usr/bin/python3
if ! "$py" -c 'import numba.cuda' 2>/dev/null; then
    echo "numba is not installed (Debian's python3-numba): skipped"
    exit 77
fi

modules=""
for m in cuda_memory host_alloc pinned managed_alloc cuda_ndarray events streams deallocations \
    cuda_array_slicing context_stack select_device reset_device cuda_driver emm_plugins array_attr init \
    detect runtime ptds cuda_auto_context cuda_devicerecord; do
    modules="$modules numba.cuda.tests.cudadrv.test_$m"
done
# IPC between processes (multiprocessing's spawn: the children inherit
# LD_PRELOAD), by the address ranges numba asks for
modules="$modules numba.cuda.tests.cudapy.test_ipc"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export NUMBA_CUDA_DRIVER="$SIM_LIBDIR/libcuda.so.1" LD_LIBRARY_PATH="$SIM_LIBDIR"
# 2 GiB: test_managed_alloc memsets and checks half the capacity in managed memory
# (with 8 GiB that test took 24 s a run)
export CUCACHE_SIM_CAPACITY=2G CUCACHE_SIM_ALLOC_US=0 CUCACHE_SIM_FREE_US=0 CUCACHE_SIM_COPY_GBPS=0
export PYTHONDONTWRITEBYTECODE=1

# run NAME [PRELOAD]: the tests' verdicts, one "ok|fail|skip test-id" line each.
run() {
    local name=$1 preload=${2:-}
    (cd "$tmp" && LD_PRELOAD="$preload" "$py" -m unittest -v $modules) >"$tmp/$name.log" 2>&1
    sed -n -E 's/^(test[^ ]*) \(([^)]*)\)[^.]* \.\.\. (ok|FAIL|ERROR|skipped.*)$/\3 \2.\1/p' "$tmp/$name.log" |
        sed -E 's/^(FAIL|ERROR) /fail /; s/^skipped[^ ]* /skip /' | sort >"$tmp/$name.verdicts"
}

run plain
run cucache "$LIBCUCACHE"
passed=$(grep -c '^ok ' "$tmp/plain.verdicts")
total=$(wc -l <"$tmp/plain.verdicts")
echo "without cucache: $passed of $total passed; with cucache: $(grep -c '^ok ' "$tmp/cucache.verdicts") of $(wc -l <"$tmp/cucache.verdicts")"
status=0
if ! diff "$tmp/plain.verdicts" "$tmp/cucache.verdicts" >"$tmp/diff"; then
    echo "FAIL: numba's tests give other results under cucache:"
    cat "$tmp/diff"
    status=1
fi
if [ "$passed" -lt "$MIN_PASSED" ]; then
    echo "FAIL: only $passed of numba's tests passed on the simulated device (at least $MIN_PASSED expected)"
    tail -40 "$tmp/plain.log"
    status=1
fi
# the preloaded run really ran under cucache: its exit summary says so
if ! (cd "$tmp" && LD_PRELOAD="$LIBCUCACHE" CUCACHE_REPORT=exit "$py" -c \
    'from numba import cuda; import numpy; cuda.to_device(numpy.zeros(1000)).copy_to_host()' 2>&1 |
    grep -q 'verdict:'); then
    echo "FAIL: no cucache exit summary from numba under LD_PRELOAD: cucache did not serve it"
    status=1
fi
exit $status
