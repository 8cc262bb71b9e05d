#!/usr/bin/env bash
# tests/run/check_install.sh BUILD_DIR SOURCE_DIR: `meson install` into a
# temporary DESTDIR, then, with nothing of the build tree:
#  1. what is installed: the tools, libcucache.so.0 (its SONAME, the same
#     exports as the built library), the header, cucache.pc, and the
#     simulated device's libraries only in libdir/cucache/sim (never where
#     they would shadow a real libcuda.so.1);
#  2. the installed cucache-run runs the demo workload on the simulated
#     device, from the prefix and from a copy of the prefix moved elsewhere;
#  3. pkg-config --cflags --libs cucache builds a program against the
#     installed header and library, which runs under the installed
#     cucache-run and sees cucache;
#  4. the installed cucache-replay replays a trace recorded by the installed
#     cucache-run.
#  5. the man pages, when scdoc built them, and the Python package.
# The environment gives DEMO_WORKLOAD, INSTALL_PYTHON (the Python meson
# installs for), RUN_BINDIR, RUN_LIBDIR, RUN_MANDIR, RUN_PREFIX.
set -uo pipefail
build=${1:?usage: check_install.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: check_install.sh BUILD_DIR SOURCE_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.sh"

if ! meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/dest" >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log" >&2
    echo "FAIL: meson install" >&2
    exit 1
fi
root=$tmp/dest$RUN_PREFIX
bin=$root/$RUN_BINDIR
lib=$root/$RUN_LIBDIR

# 1. the files
for f in "$bin/cucache-run" "$bin/cucache-replay" "$bin/cucache-top" "$lib/libcucache.so.0" "$lib/libcucache.so" \
    "$root/include/cucache/cucache.h" "$lib/pkgconfig/cucache.pc" "$lib/cucache/sim/libcuda.so.1" \
    "$lib/cucache/sim/libcudart.so.12" "$lib/cucache/sim/libcudart.so.13"; do
    [ -e "$f" ] || fail "not installed: ${f#"$tmp/dest"}"
done
if [ -e "$build/cucache-run.1" ]; then # built when scdoc was found
    for page in man1/cucache-run.1 man1/cucache-replay.1 man1/cucache-top.1 man7/cucache.7; do
        [ -e "$root/$RUN_MANDIR/$page" ] || fail "man page not installed: $RUN_MANDIR/$page"
    done
fi
for f in "$lib"/libcuda* "$lib"/libcudart*; do
    [ -e "$f" ] && fail "a simulated CUDA library in libdir itself, where it would shadow the real one: $f"
done
soname=$(readelf -d "$lib/libcucache.so.0" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libcucache.so.0 ] || fail "SONAME '$soname', expected libcucache.so.0"
exports() { nm -D --defined-only "$1" | awk '{print $NF}' | sort; }
if ! diff <(exports "$lib/libcucache.so.0") <(exports "$build/libcucache.so.0") >"$tmp/exports.diff"; then
    fail "the installed library exports differ from the built one: $(head -5 "$tmp/exports.diff")"
fi
if grep -q "$build" <<<"$(readelf -d "$bin/cucache-run" "$bin/cucache-replay" "$lib/libcucache.so.0")"; then
    fail "an installed file still points into the build tree (RPATH/RUNPATH)"
fi

# 2. the installed cucache-run, in place and moved
cp -a "$root" "$tmp/moved"
for prefix in "$root" "$tmp/moved"; do
    out=$(env -u LD_PRELOAD -u LD_LIBRARY_PATH "$prefix/$RUN_BINDIR/cucache-run" --sim --report -- "$DEMO_WORKLOAD" 2>&1)
    rc=$?
    if [ "$rc" -ne 0 ] || ! grep -q "data verified: OK" <<<"$out" || ! grep -q "cache hit rate" <<<"$out"; then
        fail "the demo workload under $prefix/$RUN_BINDIR/cucache-run (status $rc): $(tail -5 <<<"$out")"
    fi
    env=$(env -u LD_LIBRARY_PATH "$prefix/$RUN_BINDIR/cucache-run" --sim --print-env)
    grep -qx "LD_PRELOAD=$prefix/$RUN_LIBDIR/libcucache.so.0" <<<"$env" || fail "LD_PRELOAD from $prefix: $env"
done

# 3. pkg-config and a program built against the installed files
pc() { PKG_CONFIG_PATH=$lib/pkgconfig pkg-config --define-variable=prefix="$root" "$@" cucache; }
cflags=$(pc --cflags) libs=$(pc --libs) version=$(pc --modversion)
[ -n "$version" ] || fail "pkg-config knows no cucache"
cat >"$tmp/api.c" <<'C'
#include <cucache/cucache.h>
#include <stdio.h>
int main(void)
{
    printf("cucache %s, allocator metadata from %s\n", cucache_version(), cucache_hostalloc_backend());
    return 0;
}
C
# shellcheck disable=SC2086 # the flags are words
if ! cc $cflags "$tmp/api.c" -o "$tmp/api" $libs >"$tmp/cc.log" 2>&1; then
    fail "building against the installed header and library with $cflags $libs: $(cat "$tmp/cc.log")"
else
    out=$(env -u LD_LIBRARY_PATH "$bin/cucache-run" -- "$tmp/api" 2>&1)
    grep -q "^cucache $version," <<<"$out" || fail "the program built with pkg-config's flags: $out"
fi

# 4. record with the installed cucache-run, replay with the installed cucache-replay
env -u LD_LIBRARY_PATH "$bin/cucache-run" --sim --trace "$tmp/demo.trace" -- "$DEMO_WORKLOAD" >/dev/null 2>&1 ||
    fail "recording the demo workload with the installed cucache-run"
out=$("$bin/cucache-replay" --no-reference "$tmp/demo.trace" 2>&1)
grep -q "peak reserved" <<<"$out" || fail "the installed cucache-replay: $out"

# 5. the Python package, imported from where meson installed it, in a
#    program under the installed cucache-run
init=$(find "$tmp/dest" -path '*/cucache/__init__.py' | head -n 1)
if [ -z "$init" ]; then
    fail "the Python package was not installed"
else
    site=$(dirname "$(dirname "$init")")
    out=$(env -u LD_LIBRARY_PATH PYTHONPATH="$site" "$bin/cucache-run" --sim -- "$INSTALL_PYTHON" -c \
        'import cucache; print(cucache.__file__, cucache.available(), cucache.version())' 2>&1)
    grep -q "^$site/cucache/__init__.py True $version\$" <<<"$out" || fail "the installed Python package: $out"
fi

[ "$failed" -eq 0 ] && echo "check_install: ok ($RUN_PREFIX, $RUN_BINDIR, $RUN_LIBDIR)"
exit "$failed"
