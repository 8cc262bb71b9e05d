#!/usr/bin/env bash
# tests/run/check_gpu_check.sh CASE BUILD_ROOT: scripts/gpu-check without a
# GPU (suite 'run').  BUILD_ROOT holds libcucache.so, cucache-run and
# cucache-replay.  One case per test:
#   plan   the command line: bad options, a bad --budget, no results
#          directory or two exit 2 and say why, creating nothing; --help.
#          --dry-run --no-build (BUILD_ROOT's programs): exactly the five
#          results files, a relative directory taken from the caller's
#          directory, one results line per planned step in the plan's
#          order, the most important first (the build and gpu_alloc's nvcc,
#          then preload, then launches and contexts seen, then gpu_alloc
#          plain, default and reuse:sync, then PyTorch's training and its
#          losses, then the rest), each with its timeout; --quick plans a
#          subset of the same order with a smaller budget;
#          a build directory without the programs fails the build step and
#          skips the rest; without a GPU (a stand-in nvidia-smi that fails)
#          the exit status is 77, and --budget shows in the header.
#   flow   a stand-in GPU: nvidia-smi and nvcc stand-ins on PATH, the
#          "programs" nvcc makes print what gpu_alloc prints (cucache's
#          counters when libcucache.so is preloaded) after 1 s, or after
#          90 s when not under cucache, under a 20 s budget: preload
#          passes, launches and contexts read as seen, the plain run is
#          stopped at the budget, the steps after it are skipped for the
#          budget, every step still has its line, and the run ends within
#          the budget (plus the kill's grace and the slack a loaded
#          machine needs to start a dozen steps: 25 s, far below the
#          plain step's own timeout).
#   build  --dry-run with the build: meson and ninja into a new directory
#          with -Djemalloc=disabled -Dtests=disabled, the three programs
#          there, the build step PASS.
# Every check that fails prints "FAIL: ..."; the case fails when one did.
# Seen to fail: with the torch rows of the plan moved after the rest, or
# the seen rows after the alloc rows, plan fails its order checks; with a
# step's timeout not cut to what is left of the budget, flow fails (the
# plain run outlasts the budget by most of its 90 s).
set -uo pipefail

case_name=${1:?usage: check_gpu_check.sh CASE BUILD_ROOT}
build_root=$(cd "${2:?usage: check_gpu_check.sh CASE BUILD_ROOT}" && pwd)
script=$(cd "$(dirname "$0")/../.." && pwd)/scripts/gpu-check
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

source "$(dirname "${BASH_SOURCE[0]}")/check_lib.sh"


# expect_usage_error WHAT-STDERR-SAYS ARGS...: exit 2, the message on stderr.
expect_usage_error() {
    local says=$1
    shift
    run "$script" "$@"
    [ "$rc" -eq 2 ] || fail "gpu-check $*: exit status $rc, not 2"
    grep -q -- "$says" <<<"$err" || fail "gpu-check $*: stderr does not say '$says': $err"
    grep -q '^usage: ' <<<"$err" || fail "gpu-check $*: no usage line on stderr"
}

# steps FILE: the step names of a results or plan file, in order.
steps() {
    grep -v '^#' "$1" | awk '{ print ($1 ~ /^[0-9]+$/) ? $2 : $1 }'
}

# check_order FILE: the priority order of a results file's steps.
check_order() {
    python3 - "$1" <<'PY' || fail "$1: the steps are not in priority order (above)"
import re, sys
names = [l.split()[0] for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
# The ranks, most important first: what the rest needs, does the preload
# load and serve, are launches and contexts seen, gpu_alloc plain/default/
# reuse:sync, PyTorch's training and its losses, then the rest.
ranks = [
    ("build and gpu_alloc's nvcc", r"build|nvcc-gpu_alloc-(shared|static)"),
    ("preload loads and serves", r"preload-(shared|static)"),
    ("launches and contexts seen", r"seen-(shared|static)"),
    ("gpu_alloc plain, default, reuse:sync", r"alloc-(shared|static)-(plain|default|sync)"),
    ("PyTorch training, identical losses", r"torch-(warmup|plain|cucache|losses)"),
]
def rank(n):
    for i, (_, pat) in enumerate(ranks):
        if re.fullmatch(pat, n):
            return i
    return len(ranks)
bad = 0
for a, b in zip(names, names[1:]):
    if rank(b) < rank(a):
        print(f"  {b} ({ranks[rank(b)][0]}) comes after {a}")
        bad = 1
must = ["build", "preload-shared", "preload-static", "seen-shared", "seen-static", "alloc-shared-plain",
        "alloc-shared-default", "alloc-shared-sync", "torch-plain", "torch-cucache", "torch-losses"]
missing = [m for m in must if m not in names]
if missing:
    print(f"  missing: {missing}")
    bad = 1
elif not names.index("torch-plain") < names.index("torch-cucache") < names.index("torch-losses"):
    print("  torch-plain, torch-cucache, torch-losses out of order")
    bad = 1
if names[0] != "build":
    print(f"  the first step is {names[0]}, not build")
    bad = 1
sys.exit(bad)
PY
}

# check_lines FILE: every step's line: name, PASS/FAIL/SKIP/INFO, seconds, figure.
check_lines() {
    awk '!/^#/ && !($2 ~ /^(PASS|FAIL|SKIP|INFO)$/ && $3 ~ /^[0-9]+\.[0-9]$/ && NF >= 4) { print; bad = 1 }
         END { exit bad }' "$1" || fail "$1: malformed results lines (above)"
}

# check_files DIR: the five results files and nothing else.
check_files() {
    local got
    got=$(cd "$1" && find . -mindepth 1 | sort | tr '\n' ' ')
    [ "$got" = "./machine.txt ./plan.txt ./results.txt ./steps.log ./summary.txt " ] ||
        fail "$1 holds '$got', not the five results files"
}

case_plan() {
    # the command line
    expect_usage_error "the results directory is missing"
    expect_usage_error "unknown option: --bogus" --bogus "$tmp/never"
    expect_usage_error "--budget needs a value" "$tmp/never" --budget
    expect_usage_error "--budget takes a number of seconds above 0, not 'soon'" --budget soon "$tmp/never"
    expect_usage_error "not '0'" --budget=0 "$tmp/never"
    expect_usage_error "one results directory, not 2" "$tmp/never" "$tmp/never2"
    [ ! -e "$tmp/never" ] || fail "a bad command line created the results directory"
    run "$script" --help
    if [ "$rc" -ne 0 ] || ! grep -q -- '--dry-run' <<<"$out"; then
        fail "--help: status $rc, or no --dry-run in: $out"
    fi

    # a dry run, the results directory given relative to the caller's
    local full=(--dry-run --no-build --build "$build_root")
    mkdir -p "$tmp/caller"
    (cd "$tmp/caller" && "$script" "${full[@]}" --work "$tmp/work" results >"$tmp/full.out" 2>&1)
    rc=$?
    [ "$rc" -eq 0 ] || fail "dry run: exit status $rc: $(cat "$tmp/full.out")"
    local r=$tmp/caller/results
    if [ ! -d "$r" ]; then
        fail "dry run: no results directory in the caller's directory"
        return
    fi
    check_files "$r"
    check_lines "$r/results.txt"
    check_order "$r/results.txt"
    [ "$(steps "$r/results.txt")" = "$(steps "$r/plan.txt")" ] || fail "the results lines are not the plan's steps in order"
    grep -q '^build  *PASS ' "$r/results.txt" || fail "dry run: the build step did not pass"
    [ "$(grep -v '^#' "$r/results.txt" | grep -vc ' SKIP .*dry run (timeout [0-9]* s)')" -eq 1 ] ||
        fail "dry run: a step other than the build is not 'SKIP dry run (timeout N s)'"
    awk '!/^#/ && !($3 > 0) { print; bad = 1 } END { exit bad }' "$r/plan.txt" || fail "plan.txt: a step without a timeout"
    grep -q '^# .*budget 400 s' "$r/results.txt" || fail "full: the header does not say budget 400 s"
    grep -q '^# gpu-check: PASS' "$r/results.txt" || fail "dry run: no verdict at the end of results.txt"
    local n_full
    n_full=$(steps "$r/plan.txt" | wc -l)
    [ "$n_full" -ge 40 ] || fail "full: $n_full steps planned, not the whole check"
    grep -Eq '^ +1 build +180$' "$tmp/full.out" || fail "dry run: the plan is not printed"

    # --quick: fewer steps, the same order, the most important ones
    run "$script" "${full[@]}" --quick --work "$tmp/work" "$tmp/quick"
    [ "$rc" -eq 0 ] || fail "--quick dry run: exit status $rc: $err"
    check_files "$tmp/quick"
    check_lines "$tmp/quick/results.txt"
    check_order "$tmp/quick/results.txt"
    local n_quick
    n_quick=$(steps "$tmp/quick/plan.txt" | wc -l)
    [ "$n_quick" -lt "$n_full" ] || fail "--quick plans $n_quick steps, the full run $n_full"
    python3 - "$tmp/quick/plan.txt" "$r/plan.txt" <<'PY' || fail "--quick's steps are not the full plan's in its order"
import sys
quick, full = ([l.split()[1] for l in open(f) if not l.startswith("#")] for f in sys.argv[1:])
it = iter(full)
sys.exit(0 if all(q in it for q in quick) else 1)
PY
    grep -q '^# .*budget 150 s' "$tmp/quick/results.txt" || fail "--quick: the header does not say budget 150 s"

    # a build directory without the programs
    mkdir -p "$tmp/empty-build"
    run "$script" --dry-run --no-build --build "$tmp/empty-build" "$tmp/nobuild"
    [ "$rc" -eq 1 ] || fail "no programs in the build directory: exit status $rc, not 1"
    grep -q '^build  *FAIL .*missing in .*libcucache.so' "$tmp/nobuild/results.txt" || fail "no programs: no build FAIL line"
    grep -q '^preload-shared  *SKIP .*no cucache build' "$tmp/nobuild/results.txt" ||
        fail "no programs: the steps after the build are not skipped"

    # no GPU: exit 77, said in results.txt; --budget in the header
    mkdir -p "$tmp/nogpu"
    printf '#!/bin/sh\nexit 9\n' >"$tmp/nogpu/nvidia-smi"
    chmod +x "$tmp/nogpu/nvidia-smi"
    PATH=$tmp/nogpu:$PATH run "$script" --no-build --build "$build_root" --work "$tmp/work" --budget 77 "$tmp/skip"
    [ "$rc" -eq 77 ] || fail "no GPU: exit status $rc, not 77"
    grep -q '^# SKIP: no GPU answers' "$tmp/skip/results.txt" || fail "no GPU: not said in results.txt"
    grep -q '^# .*budget 77 s' "$tmp/skip/results.txt" || fail "--budget 77: not in the header"
}

# A stand-in GPU: nvidia-smi answers, nvcc "compiles" a shell script that
# sleeps and prints what gpu_alloc and ptr_ipc print.
make_stand_ins() {
    mkdir -p "$tmp/bin"
    cat >"$tmp/bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
-L) echo "GPU 0: Stand-in GPU (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
*nounits*) echo 1024 ;;
*driver_version*) echo 0.0 ;;
*memory.total,memory.used*) echo "1024 MiB, 0 MiB" ;;
*) echo "stand-in nvidia-smi | CUDA Version: 0.0 |" ;;
esac
EOF
    cat >"$tmp/bin/nvcc" <<'EOF'
#!/bin/sh
[ "$1" != --version ] || { echo "Cuda compilation tools, release 0.0, stand-in"; exit 0; }
while [ $# -gt 0 ]; do
    [ "$1" != -o ] || out=$2
    shift
done
cp "$STAND_IN_PROGRAM" "$out" && chmod +x "$out"
EOF
    cat >"$tmp/program" <<'EOF'
#!/bin/sh
# under cucache-run a second; plain, longer than the budget
case "${LD_PRELOAD:-}" in *libcucache.so*) sleep 1 ;; *) sleep 90 ;; esac
echo "gpu_alloc: device 0: Stand-in GPU (sm_90, 1.0 GiB); cudaMalloc resolves to /stand-in/libcudart.so.13"
echo "check selftest: PASS (stand-in)"
echo "race race-stand-in: PASS (armed: yes)"
echo "timing: malloc_free_4KiB 1000 ns/pair (1 pairs)"
case "${LD_PRELOAD:-}" in
*libcucache.so*)
    echo "cucache: loaded, version stand-in; device 0: num_cache_hits=3 contexts_seen=1 num_submissions=7 submissions_unseen=0" ;;
*) case " $* " in *" --expect-cucache "*) echo "cucache: not loaded"; exit 1 ;; esac ;;
esac
EOF
    chmod +x "$tmp/bin/nvidia-smi" "$tmp/bin/nvcc" "$tmp/program"
}

case_flow() {
    make_stand_ins
    local budget=20 t0 t1 r=$tmp/flow
    t0=$(date +%s)
    PATH=$tmp/bin:$PATH STAND_IN_PROGRAM=$tmp/program CUCACHE_GPU_CHECK_PYTHON=false \
        run "$script" --no-build --build "$build_root" --work "$tmp/work" --budget "$budget" "$r"
    t1=$(date +%s)
    [ "$rc" -eq 0 ] || [ "$rc" -eq 1 ] || fail "stand-in GPU: exit status $rc: $err"
    if [ ! -f "$r/results.txt" ]; then
        fail "stand-in GPU: no results.txt; stdout: $out"
        return
    fi
    check_files "$r"
    check_lines "$r/results.txt"
    [ "$(steps "$r/results.txt")" = "$(steps "$r/plan.txt")" ] || fail "stand-in GPU: not one line per planned step"
    local want
    for want in 'build +PASS' 'nvcc-gpu_alloc-shared +PASS' 'nvcc-gpu_alloc-static +PASS' \
        'preload-shared +PASS .*num_cache_hits=3' 'preload-static +PASS' \
        'seen-shared +INFO .*launches seen \(num_submissions=7\); contexts seen \(contexts_seen=1\)' \
        'alloc-shared-plain +SKIP .*stopped at the budget' 'alloc-shared-default +SKIP .*budget: ' \
        'torch-reference +SKIP .*budget: '; do
        grep -Eq "^$want" "$r/results.txt" || fail "stand-in GPU: no line '$want' in results.txt"
    done
    grep -q "^preload-shared  *PASS" <<<"$out" || fail "stand-in GPU: the results lines are not printed"
    [ $((t1 - t0)) -le $((budget + 25)) ] || fail "stand-in GPU: the run took $((t1 - t0)) s on a $budget s budget"
    if [ "$failed" -ne 0 ]; then
        cat "$r/results.txt" >&2
    fi
}

case_build() {
    run "$script" --dry-run --build "$tmp/build" "$tmp/results"
    [ "$rc" -eq 0 ] || fail "dry run with the build: exit status $rc: $out $err"
    grep -q '^build  *PASS ' "$tmp/results/results.txt" || fail "the build step did not pass: $(head -n 3 "$tmp/results/results.txt")"
    local f
    for f in libcucache.so cucache-run cucache-replay; do
        [ -f "$tmp/build/$f" ] || fail "no $f in the build directory"
    done
    python3 - "$tmp/build/meson-info/intro-buildoptions.json" <<'PY' || fail "the build is not -Djemalloc=disabled -Dtests=disabled"
import json, sys
opts = {o["name"]: o["value"] for o in json.load(open(sys.argv[1]))}
sys.exit(0 if opts.get("jemalloc") == "disabled" and opts.get("tests") == "disabled" else 1)
PY
    check_files "$tmp/results"
    check_order "$tmp/results/results.txt"
}

case $case_name in
plan) case_plan ;;
flow) case_flow ;;
build) case_build ;;
*)
    echo "check_gpu_check.sh: unknown case $case_name" >&2
    exit 2
    ;;
esac
exit "$failed"
