#!/usr/bin/env bash
# tests/run/check_run.sh CASE: one case of the 'run' suite (cucache-run).
# tests/run/meson.build passes the programs in the environment:
#   CUCACHE_RUN     build/cucache-run
#   RUN_NOWHERE     a cucache-run whose compiled-in fallbacks do not exist
#   RUN_PROBE       tests/run/run_probe (prints what the command sees)
#   RUN_PROBE_CUDA  the same, linked against libcudart.so.13
#   DEMO_WORKLOAD   the simulator's demo_workload
#   ALLOC_WORKLOAD  bench/alloc_workload
#   RUN_VERSION     the project's version
#   RUN_SIM_BUILD_REL  the simulated libraries' directory in the build tree,
#                   relative to its top (subprojects/cusim/lib)
# Every check that fails prints "FAIL: ..." with what it saw; the case fails
# when one did.
set -uo pipefail

case_name=${1:?usage: check_run.sh CASE}
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

build_dir=$(cd "$(dirname "$CUCACHE_RUN")" && pwd -P)
lib="$build_dir/libcucache.so"
sim_dir="$build_dir/$RUN_SIM_BUILD_REL"

source "$(dirname "${BASH_SOURCE[0]}")/check_lib.sh"


show() {
    printf '    command: %s\n    status: %s\n    stdout: %s\n    stderr: %s\n' "$*" "$rc" "$out" "$err" >&2
}

# expect STATUS CMD...: the command exits with STATUS.
expect() {
    local want=$1
    shift
    run "$@"
    if [ "$rc" != "$want" ]; then
        fail "expected status $want"
        show "$@"
    fi
}

# out_is TEXT / out_has TEXT / err_has TEXT / out_lacks TEXT: about the last run.
out_is() {
    [ "$out" = "$1" ] || { fail "stdout is not: $1"; show "(last command)"; }
}
out_has() {
    case "$out" in *"$1"*) ;; *) fail "stdout lacks: $1"; show "(last command)" ;; esac
}
out_lacks() {
    case "$out" in *"$1"*) fail "stdout has: $1"; show "(last command)" ;; *) ;; esac
}
err_has() {
    case "$err" in *"$1"*) ;; *) fail "stderr lacks: $1"; show "(last command)" ;; esac
}

# The variables a test controls, cleared so that the caller's do not leak in.
clean_env=(env -u LD_PRELOAD -u LD_LIBRARY_PATH -u CUCACHE_CONF -u CUCACHE_REPORT -u CUCACHE_TRACE
           -u CUCACHE_SNAPSHOT -u CUCACHE_SIM_CAPACITY -u PYTORCH_NO_CUDA_MEMORY_CACHING)
# PyTorch's own cache turned off, last (interpose/framework.h)
torch_off=PYTORCH_NO_CUDA_MEMORY_CACHING=1

case $case_name in
print-env)
    # the changes, in order, and nothing else
    expect 0 "${clean_env[@]}" "$CUCACHE_RUN" --print-env
    out_is "LD_PRELOAD=$lib
$torch_off"
    expect 0 "${clean_env[@]}" "$CUCACHE_RUN" --sim=8G --conf reuse:fenced --conf=max_split_size_mb:64 --report \
        --trace "$tmp/t.%p" --snapshot "$tmp/s.json" --snapshot-on oom,exit --print-env
    out_is "LD_PRELOAD=$lib
LD_LIBRARY_PATH=$sim_dir
CUCACHE_SIM_CAPACITY=8G
CUCACHE_CONF=reuse:fenced,max_split_size_mb:64
CUCACHE_REPORT=exit
CUCACHE_TRACE=$tmp/t.%p
CUCACHE_SNAPSHOT=$tmp/s.json
CUCACHE_SNAPSHOT_ON=oom,exit
$torch_off"
    # --sim alone leaves the capacity to the simulator
    expect 0 "${clean_env[@]}" "$CUCACHE_RUN" --sim --print-env
    out_is "LD_PRELOAD=$lib
LD_LIBRARY_PATH=$sim_dir
$torch_off"
    # what was there is kept, after ours
    expect 0 "${clean_env[@]}" LD_PRELOAD=libm.so.6 LD_LIBRARY_PATH=/opt/x:/opt/y "$CUCACHE_RUN" --sim --print-env
    out_is "LD_PRELOAD=$lib:libm.so.6
LD_LIBRARY_PATH=$sim_dir:/opt/x:/opt/y
$torch_off"
    # --conf replaces CUCACHE_CONF; without --conf it is left alone
    expect 0 "${clean_env[@]}" CUCACHE_CONF=reuse:sync "$CUCACHE_RUN" --conf reuse:stream --print-env
    out_has "CUCACHE_CONF=reuse:stream"
    out_lacks "reuse:sync"
    expect 0 "${clean_env[@]}" CUCACHE_CONF=reuse:sync "$CUCACHE_RUN" --print-env
    out_lacks "CUCACHE_CONF"
    # with a command, the command is not run
    expect 0 "${clean_env[@]}" "$CUCACHE_RUN" --print-env "$RUN_PROBE" 3
    out_is "LD_PRELOAD=$lib
$torch_off"
    # PyTorch's cache: off unless the environment says otherwise (any value:
    # PyTorch reads only whether the variable is set) or it is kept
    expect 0 "${clean_env[@]}" PYTORCH_NO_CUDA_MEMORY_CACHING=0 "$CUCACHE_RUN" --print-env
    out_is "LD_PRELOAD=$lib"
    expect 0 "${clean_env[@]}" "$CUCACHE_RUN" --keep-torch-cache --print-env
    out_is "LD_PRELOAD=$lib"
    # the capacity forms the simulator reads
    for c in 4M 16T 1.5G 512MiB 64mb 80g 8388608 0.5GB; do
        expect 0 "${clean_env[@]}" "$CUCACHE_RUN" --sim="$c" --print-env
        out_has "CUCACHE_SIM_CAPACITY=$c"
    done
    ;;

refusals)
    # Each option's bad value is refused naming the option or the variable
    # it sets (libcucache.so refuses the ones it reads, before main), and a
    # hostile value (tests/hostile.h's bytes) is shown bounded and escaped:
    # OPTION VALUE NAME (the option's argument is VALUE; "-" for none)
    hostile=$'\e[2J\e]0;owned\a\r\t\x01\x7f\xff\xfe\xc3(\xe2\x80\xae'
    head_bytes=$(printf %s "$hostile" | LC_ALL=C wc -c)
    hostile+=$(head -c $((10240 - head_bytes)) /dev/zero | tr '\0' A)
    [ "$(printf %s "$hostile" | LC_ALL=C wc -c)" = 10240 ] || fail "the hostile value is not 10240 bytes"
    rows=(
        "--sim=|8X|--sim="
        "--conf|bogus_key:1|CUCACHE_CONF"
        "--leak-exitcode|0|CUCACHE_LEAK_EXITCODE"
        "--stacks=|foreign|CUCACHE_STACKS"
        "--trace|$tmp/t-%q|CUCACHE_TRACE"
        "--snapshot|$tmp/s-%q|CUCACHE_SNAPSHOT"
        "--snapshot-on|crash|CUCACHE_SNAPSHOT_ON"
    )
    for row in "${rows[@]}"; do
        IFS='|' read -r opt bad name <<<"$row"
        for value in "$bad" "$hostile"; do
            if [ "${opt: -1}" = "=" ]; then args=("$opt$value"); else args=("$opt" "$value"); fi
            # --snapshot-on needs somewhere to write
            [ "$opt" = --snapshot-on ] && args+=(--snapshot "$tmp/s.pickle")
            run "${clean_env[@]}" -u CUCACHE_SNAPSHOT_ON -u CUCACHE_LEAK_EXITCODE -u CUCACHE_STACKS \
                "$CUCACHE_RUN" --sim "${args[@]}" "$RUN_PROBE"
            case $rc in 1|2) ;; *) fail "$opt: status $rc, expected a refusal (1 or 2)"; show "$opt" ;; esac
            err_has "$name"
            [ "$value" = "$hostile" ] || continue
            err_has "(10240 bytes)"
            [ ${#err} -lt 1024 ] || fail "$opt: ${#err} bytes of refusal: the value was echoed whole"
            raw=$(printf %s "$err" | LC_ALL=C tr -d '\n\040-\176' | LC_ALL=C wc -c)
            [ "$raw" = 0 ] || { fail "$opt: $raw raw control or non-ASCII bytes in the refusal"; show "$opt"; }
        done
    done
    # an unknown option, hostile
    run "$CUCACHE_RUN" "--$hostile" "$RUN_PROBE"
    [ "$rc" = 2 ] || fail "unknown hostile option: status $rc"
    err_has "unknown option"
    err_has "(10242 bytes)"
    raw=$(printf %s "$err" | LC_ALL=C tr -d '\n\040-\176' | LC_ALL=C wc -c)
    [ "$raw" = 0 ] || fail "unknown option: $raw raw control or non-ASCII bytes in the refusal"
    ;;

errors)
    expect 2 "$CUCACHE_RUN" --bogus "$RUN_PROBE"
    err_has "unknown option '--bogus'"
    expect 2 "$CUCACHE_RUN" -x "$RUN_PROBE"
    err_has "unknown option '-x'"
    expect 2 "$CUCACHE_RUN" --simulate "$RUN_PROBE"
    err_has "unknown option '--simulate'"
    expect 2 "$CUCACHE_RUN"
    err_has "no COMMAND"
    expect 2 "$CUCACHE_RUN" --report --
    err_has "no COMMAND"
    for c in 8X 2M 3.99M 17T 32T 0x10G -1G 1e3G ' 8G' 8G8 G inf nan; do
        expect 2 "$CUCACHE_RUN" --sim="$c" "$RUN_PROBE"
        err_has "--sim=$c:"
    done
    expect 2 "$CUCACHE_RUN" --sim= "$RUN_PROBE"
    err_has "--sim=:"
    expect 2 "$CUCACHE_RUN" --sim=2M "$RUN_PROBE"
    err_has "4M to 16T"
    for o in --conf --trace --snapshot --snapshot-on; do
        expect 2 "$CUCACHE_RUN" "$o"
        err_has "$o needs a value"
        expect 2 "$CUCACHE_RUN" "$o=" "$RUN_PROBE"
        err_has "$o needs a value"
    done
    expect 127 "$CUCACHE_RUN" "$tmp/no-such-command"
    err_has "cannot run $tmp/no-such-command"
    touch "$tmp/not-executable"
    expect 126 "$CUCACHE_RUN" "$tmp/not-executable"
    err_has "cannot run $tmp/not-executable"
    expect 0 "$CUCACHE_RUN" --help
    out_has "usage: cucache-run"
    expect 0 "$CUCACHE_RUN" -h
    out_has "--sim[=CAPACITY]"
    expect 0 "$CUCACHE_RUN" --version
    out_is "cucache-run $RUN_VERSION"
    ;;

lookup)
    # next to the executable first, then the compiled-in build paths
    mkdir -p "$tmp/inst/$RUN_SIM_BUILD_REL" "$tmp/bare"
    cp "$CUCACHE_RUN" "$tmp/inst/cucache-run"
    cp "$CUCACHE_RUN" "$tmp/bare/cucache-run"
    : >"$tmp/inst/libcucache.so"
    : >"$tmp/inst/$RUN_SIM_BUILD_REL/libcudart.so.13"
    inst=$(cd "$tmp/inst" && pwd -P)
    expect 0 "${clean_env[@]}" "$tmp/inst/cucache-run" --sim --print-env
    out_is "LD_PRELOAD=$inst/libcucache.so
LD_LIBRARY_PATH=$inst/$RUN_SIM_BUILD_REL
$torch_off"
    expect 0 "${clean_env[@]}" "$tmp/bare/cucache-run" --sim --print-env
    out_is "LD_PRELOAD=$lib
LD_LIBRARY_PATH=$sim_dir
$torch_off"
    # none: a clear error naming the places, status 125
    nowhere_dir=$(cd "$(dirname "$RUN_NOWHERE")" && pwd -P)
    expect 125 "$RUN_NOWHERE" "$RUN_PROBE"
    err_has "libcucache.so not found: looked for $nowhere_dir/libcucache.so, /nonexistent/cucache-run-test/libcucache.so"
    # an installation (meson install): PREFIX/bindir/cucache-run finds
    # PREFIX/libdir/libcucache.so.0 and PREFIX/libdir/cucache/sim, and still
    # does when the whole prefix is moved elsewhere
    mkdir -p "$tmp/prefix/$RUN_BINDIR" "$tmp/prefix/$RUN_LIBDIR/cucache/sim"
    cp "$RUN_NOWHERE" "$tmp/prefix/$RUN_BINDIR/cucache-run"
    : >"$tmp/prefix/$RUN_LIBDIR/libcucache.so.0"
    : >"$tmp/prefix/$RUN_LIBDIR/cucache/sim/libcudart.so.13"
    for where in prefix moved; do
        [ "$where" = moved ] && mv "$tmp/prefix" "$tmp/moved"
        p=$(cd "$tmp/$where" && pwd -P)
        expect 0 "${clean_env[@]}" "$tmp/$where/$RUN_BINDIR/cucache-run" --sim --print-env
        out_is "LD_PRELOAD=$p/$RUN_LIBDIR/libcucache.so.0
LD_LIBRARY_PATH=$p/$RUN_LIBDIR/cucache/sim
$torch_off"
    done
    # installed without the library: all three places named
    rm "$tmp/moved/$RUN_LIBDIR/libcucache.so.0"
    expect 125 "$tmp/moved/$RUN_BINDIR/cucache-run" "$RUN_PROBE"
    err_has "looked for $p/$RUN_BINDIR/libcucache.so, $p/$RUN_LIBDIR/libcucache.so.0, /nonexistent/cucache-run-test/libcucache.so"
    mkdir -p "$tmp/nosim"
    cp "$RUN_NOWHERE" "$tmp/nosim/cucache-run"
    : >"$tmp/nosim/libcucache.so"
    expect 125 "$tmp/nosim/cucache-run" --sim "$RUN_PROBE"
    err_has "the simulated device not found"
    err_has "/nonexistent/cucache-run-test/sim/lib/libcudart.so.13"
    ;;

preload)
    # the command runs with libcucache.so loaded and the variables set
    expect 0 "${clean_env[@]}" "$CUCACHE_RUN" --conf reuse:fenced --conf max_split_size_mb:64 --report \
        --trace "$tmp/trace.%p" --snapshot "$tmp/snap.%p.json" "$RUN_PROBE"
    out_has "cucache_version=$RUN_VERSION"
    out_has "LD_PRELOAD=$lib"
    out_has "CUCACHE_CONF=reuse:fenced,max_split_size_mb:64"
    out_has "CUCACHE_REPORT=exit"
    out_has "CUCACHE_TRACE=$tmp/trace.%p"
    out_has "CUCACHE_SNAPSHOT=$tmp/snap.%p.json"
    out_has "LD_LIBRARY_PATH=(unset)"
    # the same program without cucache-run does not see it
    expect 0 "${clean_env[@]}" "$RUN_PROBE"
    out_has "cucache_version=none"
    # the status is the command's: exit codes, '--', and a signal
    expect 42 "${clean_env[@]}" "$CUCACHE_RUN" "$RUN_PROBE" 42
    expect 3 "${clean_env[@]}" "$CUCACHE_RUN" -- "$RUN_PROBE" 3
    expect 143 "${clean_env[@]}" "$CUCACHE_RUN" "$RUN_PROBE" term # 128 + SIGTERM
    # execvp: the command is looked up in PATH
    expect 7 "${clean_env[@]}" PATH="$(dirname "$RUN_PROBE"):$PATH" "$CUCACHE_RUN" run_probe 7
    ;;

sim)
    # --sim: a program linked against libcudart.so.13 runs on the simulated device
    expect 0 "${clean_env[@]}" "$CUCACHE_RUN" --sim "$DEMO_WORKLOAD" 3
    out_has "device: cucache simulated GPU"
    out_has "data verified: OK"
    # --sim=CAPACITY reaches the simulator
    expect 0 "${clean_env[@]}" "$CUCACHE_RUN" --sim=64M "$RUN_PROBE_CUDA"
    out_has "cucache_version=$RUN_VERSION"
    out_has "device=cucache simulated GPU"
    out_has "total=67108864"
    expect 0 "${clean_env[@]}" "$CUCACHE_RUN" --sim=1.5G "$RUN_PROBE_CUDA"
    out_has "total=1610612736"
    # and the status still passes through
    expect 5 "${clean_env[@]}" "$CUCACHE_RUN" --sim "$RUN_PROBE_CUDA" 5
    # cucache serves the program's cudaMalloc calls from its cache
    expect 0 "${clean_env[@]}" "$CUCACHE_RUN" --sim "$ALLOC_WORKLOAD" 5 8
    out_has "data verified: OK"
    if ! grep -Eq '^cucache: loaded; [1-9][0-9]* of 40 allocations were cache hits$' <<<"$out"; then
        fail "alloc_workload under cucache-run --sim: no cache hits"
        show "(last command)"
    fi
    ;;

*)
    echo "check_run.sh: unknown case '$case_name'" >&2
    exit 2
    ;;
esac

if [ "$failed" != 0 ]; then
    echo "check_run.sh $case_name: FAILED" >&2
    exit 1
fi
echo "check_run.sh $case_name: ok"
