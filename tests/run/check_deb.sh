#!/usr/bin/env bash
# tests/run/check_deb.sh DEB_DIR BUILD_DIR: install the Debian packages that
# scripts/deb built in DEB_DIR, then, with the installed files
# alone (nothing of BUILD_DIR but the demo workload, the user's program):
#  1. dpkg put every file where it belongs: libcucache.so.0 on the loader's
#     path, the simulated device only in libdir/cucache/sim, the tools,
#     man pages, header, cucache.pc and the Python module;
#  2. /usr/bin/cucache-run --sim runs the demo workload (data verified,
#     report printed) with LD_PRELOAD=the installed library;
#  3. a program built with pkg-config's flags sees the installed library;
#  4. a trace recorded by the installed cucache-run, and a shared PyTorch
#     snapshot, replay with the installed cucache-replay;
#  5. man renders each page; Debian's python3 imports the installed module
#     under cucache-run and passes tests/run/py_api.py and python/tests.
# Then the packages are purged again (the machine is left as it was).
# Needs root and dpkg; skips (77) otherwise.  Refuses to run where a cucache
# package is installed already, which it would remove.
set -uo pipefail
debs=${1:?usage: check_deb.sh DEB_DIR BUILD_DIR}
build=${2:?usage: check_deb.sh DEB_DIR BUILD_DIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
packages=(libcucache0 cucache libcucache-dev python3-cucache)
if [ "$EUID" -ne 0 ] || ! command -v dpkg >/dev/null 2>&1; then
    echo "check_deb: needs root and dpkg: skipped"
    exit 77
fi
for p in "${packages[@]}"; do
    if dpkg -s "$p" >/dev/null 2>&1; then
        echo "check_deb: $p is installed already; remove it first (this check purges what it installs)" >&2
        exit 1
    fi
done
tmp=$(mktemp -d)
cleanup() {
    dpkg --purge "${packages[@]}" >"$tmp/purge.log" 2>&1 || cat "$tmp/purge.log" >&2
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' INT TERM # stopped by scripts/test: purge on the way out
failed=0
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.sh"

shopt -s nullglob
files=("$debs"/libcucache0_*.deb "$debs"/cucache_*.deb "$debs"/libcucache-dev_*.deb "$debs"/python3-cucache_*.deb)
[ ${#files[@]} -eq 4 ] || { echo "FAIL: expected the four packages in $debs, found: ${files[*]}" >&2; exit 1; }
if ! dpkg -i "${files[@]}" >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log" >&2
    echo "FAIL: dpkg -i" >&2
    exit 1
fi
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
lib=/usr/lib/$multiarch
version=$(dpkg-query -W -f '${Version}' libcucache0)

# 1. the files, from dpkg's own lists
for f in /usr/bin/cucache-run /usr/bin/cucache-replay "$lib/libcucache.so.0" "$lib/libcucache.so" \
    /usr/include/cucache/cucache.h "$lib/pkgconfig/cucache.pc" "$lib/cucache/sim/libcuda.so.1" \
    "$lib/cucache/sim/libcudart.so.12" "$lib/cucache/sim/libcudart.so.13" \
    /usr/share/man/man1/cucache-run.1.gz /usr/share/man/man1/cucache-replay.1.gz /usr/share/man/man7/cucache.7.gz \
    /usr/lib/python3/dist-packages/cucache/__init__.py /usr/lib/python3/dist-packages/cucache/torch.py \
    /usr/lib/python3/dist-packages/cucache/_torch_format.py; do
    [ -e "$f" ] || fail "not installed: $f"
    dpkg -S "$f" >/dev/null 2>&1 || fail "no package owns $f"
done
for f in "$lib"/libcuda.* "$lib"/libcudart.*; do
    # (whole outputs into grep: with pipefail, grep -q leaving early can
    # kill the writer with SIGPIPE and fail the pipeline at random)
    if dpkg -S "$f" >/dev/null 2>&1 && grep -q cucache <<<"$(dpkg -S "$f")"; then
        fail "a simulated CUDA library on the loader's path, where it would shadow the real one: $f"
    fi
done
grep -Eq "libcucache\.so\.0 .*=> (/usr)?/lib/$multiarch/libcucache\.so\.0$" <<<"$(ldconfig -p)" ||
    fail "the loader does not know libcucache.so.0"

# 2. the demo workload under the installed cucache-run
out=$(env -u LD_PRELOAD -u LD_LIBRARY_PATH /usr/bin/cucache-run --sim --report -- "$build/bench/alloc_workload" 2>&1)
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q "data verified: OK" <<<"$out" || ! grep -q "cache hit rate" <<<"$out"; then
    fail "the demo workload under /usr/bin/cucache-run (status $rc): $(tail -5 <<<"$out")"
fi
env=$(env -u LD_LIBRARY_PATH /usr/bin/cucache-run --sim --print-env)
grep -qx "LD_PRELOAD=$lib/libcucache.so.0" <<<"$env" || fail "cucache-run's LD_PRELOAD: $env"
grep -q "^LD_LIBRARY_PATH=$lib/cucache/sim" <<<"$env" || fail "cucache-run's simulated device: $env"

# 3. pkg-config
cat >"$tmp/api.c" <<'C'
#include <cucache/cucache.h>
#include <stdio.h>
int main(void)
{
    printf("cucache %s, allocator metadata from %s\n", cucache_version(), cucache_hostalloc_backend());
    return 0;
}
C
pcver=$(pkg-config --modversion cucache)
[ "$pcver" = "${version%%-*}" ] || fail "pkg-config's version '$pcver', the package's '$version'"
# shellcheck disable=SC2046 # the flags are words
if ! cc $(pkg-config --cflags cucache) "$tmp/api.c" -o "$tmp/api" $(pkg-config --libs cucache) >"$tmp/cc.log" 2>&1; then
    fail "building with pkg-config's flags: $(cat "$tmp/cc.log")"
else
    out=$(env -u LD_LIBRARY_PATH "$tmp/api" 2>&1)
    grep -q "^cucache $pcver," <<<"$out" || fail "the program built with pkg-config's flags: $out"
    grep -q 'NEEDED.*libcucache.so.0' <<<"$(readelf -d "$tmp/api")" || fail "the program does not need libcucache.so.0"
fi

# 4. record and replay
env -u LD_LIBRARY_PATH /usr/bin/cucache-run --sim --trace "$tmp/demo.trace" -- "$build/bench/alloc_workload" \
    >/dev/null 2>&1 || fail "recording the demo workload with the installed cucache-run"
out=$(/usr/bin/cucache-replay --no-reference "$tmp/demo.trace" 2>&1)
grep -q "peak reserved" <<<"$out" || fail "the installed cucache-replay on a recorded trace: $out"
snap=$src/../shared/traces/bcrafton_cs336.pickle
if [ -e "$snap" ]; then
    out=$(/usr/bin/cucache-replay --conf expandable_segments:true "$snap" 2>&1)
    grep -q "peak reserved" <<<"$out" || fail "the installed cucache-replay on $snap: $out"
fi

# 5. man pages and the Python module
for page in cucache-run cucache-replay cucache; do
    text=$(MANWIDTH=80 MANPAGER=cat man "$page" 2>"$tmp/man.err")
    grep -q "CUCACHE" <<<"$text" && [ ! -s "$tmp/man.err" ] || fail "man $page: $(head -3 "$tmp/man.err")"
done
out=$(cd "$tmp" && env -u LD_LIBRARY_PATH -u PYTHONPATH PY_API_INSTALLED=/usr/lib/python3/dist-packages \
    /usr/bin/cucache-run --sim=1G /usr/bin/python3 "$src/tests/run/py_api.py" 2>&1) ||
    fail "tests/run/py_api.py against the installed module: $(tail -5 <<<"$out")"
if /usr/bin/python3 -c 'import pytest' 2>/dev/null; then
    cp -r "$src/python/tests" "$tmp/pytests"
    out=$(cd "$tmp" && env -u LD_LIBRARY_PATH -u PYTHONPATH /usr/bin/cucache-run --sim=1G /usr/bin/python3 -m pytest -q \
        -p no:cacheprovider "$tmp/pytests" 2>&1) || fail "python/tests against the installed module: $(tail -8 <<<"$out")"
fi

[ "$failed" -eq 0 ] && echo "check_deb: ok (${packages[*]} $version)"
exit "$failed"
