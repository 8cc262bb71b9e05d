# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154 # the script's settings in, res and fig out
# The steps of scripts/gpu-check, one function per kind of step, sourced by
# it from the repository root.  The plan (scripts/gpu-check) names a function
# and its arguments for each step; the function runs its commands with run
# (their output to the step's log, their time cut to the step's), and
# leaves its answer in res (PASS, FAIL, SKIP or INFO) and fig (a short
# figure for the results line).  It reads the programs' output, the logs of
# earlier steps in $work, and the script's settings ($root, $build, $work,
# $run_tool, $python, $quick, $no_build, $arch, $nvcc, $jobs; $log, the
# step's log).  tests/gpu/README.md says what each step proves.

# ------------------------------------------------------------------------
# Build: cucache with meson, the test programs with nvcc beside it
# ------------------------------------------------------------------------
built=0

do_build() {
    local f missing=""
    if [ "$no_build" -eq 0 ]; then
        for f in meson ninja cc; do
            command -v "$f" >/dev/null 2>&1 || missing="$missing $f"
        done
        if [ -n "$missing" ]; then
            res=FAIL fig="missing:$missing"
            return
        fi
        run bash -c 'source scripts/lib.sh && cucache_configure "$@"' gpu-check "$build" -Djemalloc=disabled \
            -Dtests=disabled
        [ "$rc" -ne 0 ] || run ninja -C "$build" -j"$jobs" libcucache.so cucache-run cucache-replay top/cucache-top
    fi
    for f in libcucache.so cucache-run cucache-replay; do
        [ -f "$build/$f" ] || missing="$missing $f"
    done
    if [ -n "$missing" ]; then
        res=FAIL fig="$(rc_note)missing in $build:$missing"
    else
        built=1 res=PASS fig="libcucache.so, cucache-run, cucache-replay in $build"
        [ "$no_build" -eq 0 ] || fig="$fig (--no-build)"
    fi
}

declare -A nvcc_pid=()
rpath=()

# nvcc_start PROGRAM MODE: compiles tests/gpu/PROGRAM with --cudart MODE into
# the work directory, in the background (do_nvcc waits for it).
nvcc_start() {
    local bin=$work/$1_$2 src flags
    case $1 in
    gpu_alloc)
        src=tests/gpu/gpu_alloc.cu
        flags=(-O2 -lineinfo --cudart "$2" -Xcompiler -Wall "${rpath[@]}" -o "$bin" "$src" -ldl)
        ;;
    ptr_ipc)
        src=tests/gpu/ptr_ipc.c
        flags=(-O2 --cudart "$2" "${rpath[@]}" -o "$bin" "$src" -lcuda -ldl)
        ;;
    esac
    # a second run on the same machine keeps what the first compiled
    if [ -x "$bin" ] && [ "$bin" -nt "$src" ]; then
        echo "$bin is newer than $src: kept" >"$work/nvcc-$1-$2.compile.log"
        true &
        nvcc_pid[$1-$2]=$!
        return
    fi
    rm -f "$bin"
    # -arch=native, or nvcc's default architecture (PTX, compiled at the
    # start) where nvcc refuses native; timeout makes a group of its own,
    # so stopping it stops nvcc's children too
    # shellcheck disable=SC2016 # expanded by the inner bash
    timeout --kill-after=5 300 bash -c '
        nvcc=$1 arch=$2
        shift 2
        case " $* " in *" tests/gpu/ptr_ipc.c "*) exec "$nvcc" "$@" ;; esac
        "$nvcc" "-arch=$arch" "$@" && exit 0
        [ "$arch" = native ] || exit 1
        echo "nvcc refused -arch=native: again with its default architecture"
        exec "$nvcc" "$@"' nvcc-job "$nvcc" "$arch" "${flags[@]}" >"$work/nvcc-$1-$2.compile.log" 2>&1 </dev/null &
    nvcc_pid[$1-$2]=$!
}

# do_nvcc PROGRAM MODE: waits for nvcc_start's compile.
do_nvcc() {
    local pid=${nvcc_pid[$1-$2]:-} bin=$work/$1_$2
    if [ -z "$pid" ]; then
        res=FAIL fig="not compiled"
        return
    fi
    while kill -0 "$pid" 2>/dev/null && [ "$(now_ms)" -lt "$step_deadline_ms" ]; do
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        timed_out=1
    fi
    rc=0
    wait "$pid" || rc=$?
    unset "nvcc_pid[$1-$2]"
    cat "$work/nvcc-$1-$2.compile.log" >>"$log"
    if [ "$rc" -eq 0 ] && [ -x "$bin" ]; then
        res=PASS fig="$(basename "$bin")$(grep -q 'refused -arch=native' "$log" && echo ', default arch')"
    else
        res=FAIL fig="$(rc_note)see steps.log"
    fi
}

# ------------------------------------------------------------------------
# gpu_alloc: does cucache load and serve, data, overlaps and races
# ------------------------------------------------------------------------

# alloc_detail LOG: the checks' tally and, for the race checks, how many
# were armed (B memset while the reader of A still ran).
alloc_detail() {
    local checks fails races race_fails armed scenarios
    checks=$(grep -c '^check .*: ' "$1" || true)
    fails=$(grep -c '^check .*: FAIL' "$1" || true)
    races=$(grep -c '^race .*: ' "$1" || true)
    race_fails=$(grep -c '^race .*: FAIL' "$1" || true)
    armed=$(grep -c 'armed: yes' "$1" || true)
    scenarios=$(grep -c 'armed: ' "$1" || true)
    echo "checks failed $fails/$checks, races failed $race_fails/$races, armed $armed/$scenarios"
}

# needs_bin PROGRAM MODE: the nvcc program, or SKIP (status 1).
needs_bin() {
    bin=$work/$1_$2
    [ -x "$bin" ] && return 0
    res=SKIP fig="no $1_$2 (nvcc-$1-$2)"
    return 1
}

do_preload() {
    local where
    needs_bin gpu_alloc "$1" || return 0
    run "$run_tool" -- "$bin" --smoke --expect-cucache
    res=$(rc_word)
    fig="$(rc_note)$(grep -o 'cucache: loaded, version [^;]*' "$log" | head -n 1 || echo 'cucache: not loaded')"
    where=$(sed -n 's/.*cudaMalloc resolves to \(.*\)/\1/p' "$log" | head -n 1 | xargs -r basename)
    fig="$fig, num_cache_hits=$(field "$log" num_cache_hits), cudaMalloc in ${where:-?}"
}

# The smoke run's counters: num_submissions counts the launches, copies and
# memsets the runtime sent through cucache's trampolines (submissions_unseen
# 1: a lookup cucache cannot follow, cuGetExportTable among them);
# contexts_seen counts the runtime's primary-context retains that reached
# the hook (0: the runtime retains by a private path, and a second device's
# context is seen only when cucache opens it).  Information, not a verdict.
do_seen() {
    local l=$work/preload-$1.log subs unseen ctx
    if ! grep -q '^cucache: loaded' "$l" 2>/dev/null; then
        res=SKIP fig="no counters (preload-$1)"
        return
    fi
    subs=$(field "$l" num_submissions) unseen=$(field "$l" submissions_unseen) ctx=$(field "$l" contexts_seen)
    res=INFO
    if [ "$unseen" = 0 ] && [ "$subs" != "?" ] && [ "$subs" -gt 0 ]; then
        fig="launches seen (num_submissions=$subs)"
    else
        fig="launches NOT seen (num_submissions=$subs submissions_unseen=$unseen)"
    fi
    if [ "$ctx" != "?" ] && [ "$ctx" -gt 0 ]; then
        fig="$fig; contexts seen (contexts_seen=$ctx)"
    else
        fig="$fig; contexts NOT seen (contexts_seen=$ctx)"
    fi
}

# do_alloc MODE RULE: gpu_alloc plain or under cucache-run with RULE.
do_alloc() {
    needs_bin gpu_alloc "$1" || return 0
    local args=(--expect-cucache) tool=("$run_tool")
    [ "$quick" -eq 0 ] || args+=(--quick)
    case $2 in
    plain) tool=() args=("${args[@]:1}") ;;
    default) tool+=(--) ;;
    sync | fenced | stream) tool+=(--conf "reuse:$2" --) ;;
    expandable) tool+=(--conf expandable_segments:true --) ;;
    # shared pages need memory tight: a limit makes it so on any GPU
    share-pages) tool+=(--report --conf "expandable_segments:true,expandable_share_pages:true,limit_mb:1024" --) ;;
    esac
    # reuse:stream allows the race the race checks set up: their result is
    # information; any other failure is a failure
    [ "$2" != stream ] || args+=(--race-informational)
    run "${tool[@]}" "$bin" "${args[@]}"
    res=$(rc_word)
    [ "$2" != stream ] || [ "$rc" -ne 0 ] || res=INFO
    fig="$(rc_note)$(alloc_detail "$log")"
    if [ "$2" = share-pages ]; then
        fig="$fig; $(grep -o 'shared pages: [0-9]* pages\?' "$log" | head -n 1 || echo 'no page shared')"
    fi
}

# ------------------------------------------------------------------------
# PyTorch
# ------------------------------------------------------------------------
have_torch=0
torch_env=(env CUBLAS_WORKSPACE_CONFIG=:4096:8)

# Imports torch and runs a matrix product on the GPU: whether the torch
# steps can run, and the first import's cost kept out of their times.
do_torch_warmup() {
    run "${torch_env[@]}" "$python" -c '
import sys
try:
    import torch
except ImportError as e:
    print(f"warm-up: no torch: {e}"); sys.exit(3)
if not torch.cuda.is_available():
    print("warm-up: CUDA is not available to torch"); sys.exit(4)
x = torch.ones(1 << 20, device="cuda")
print(f"warm-up: torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}:",
      float((x @ x).item()))'
    case $rc in
    0)
        have_torch=1 res=PASS
        fig=$(sed -n 's/^warm-up: \(torch [^:]*\):.*/\1/p' "$log" | head -n 1)
        ;;
    3 | 4) res=SKIP fig=$(grep -m1 '^warm-up:' "$log" | cut -c10-) ;;
    *) res=SKIP fig="$(rc_note)$python cannot run torch" ;;
    esac
}

# do_torch plain|cucache|pluggable|reference: torch_train.py with caching
# off (plain, under cucache-run), with cucache as PyTorch's allocator
# (cucache.torch.enable(): PyTorch's caching calls cucache_torch_malloc and
# free) and a CUDA graph and MemPool through its pool hooks, or with
# PyTorch's own caching allocator (reference, never a failure).
do_torch() {
    if [ "$have_torch" -ne 1 ]; then
        res=SKIP fig="no torch with CUDA (torch-warmup)"
        return
    fi
    local out=$work/torch-$1.json args=()
    rm -f "$out"
    [ "$quick" -eq 0 ] || args=(--steps 100)
    case $1 in
    plain) run "${torch_env[@]}" PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$python" tests/gpu/torch_train.py --out "$out" \
        "${args[@]}" ;;
    cucache) run "${torch_env[@]}" PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$run_tool" --report -- "$python" \
        tests/gpu/torch_train.py --out "$out" --expect-cucache "${args[@]}" ;;
    pluggable) run "${torch_env[@]}" "$run_tool" --report -- "$python" tests/gpu/torch_train.py --out "$out" \
        --expect-cucache --pluggable "$root/python" --graph "${args[@]}" ;;
    reference) run "${torch_env[@]}" "$python" tests/gpu/torch_train.py --out "$out" "${args[@]}" ;;
    esac
    res=$(rc_word)
    fig="$(rc_note)train_s=$(field "$log" train_s)"
    case $1 in
    cucache)
        fig="$fig num_cache_hits=$(field "$log" num_cache_hits) num_submissions=$(field "$log" num_submissions)"
        fig="$fig submissions_unseen=$(field "$log" submissions_unseen)"
        ;;
    pluggable)
        local verdict
        verdict=$(compare_losses "$work/torch-plain.json" "$out") || res=FAIL
        grep -q '^graph: ok' "$log" || res=FAIL
        fig="$fig; losses vs plain: $verdict; $(grep -m1 '^graph:' "$log" | cut -c1-60 || echo 'graph: no line')"
        ;;
    reference)
        res=INFO
        fig="$fig; losses vs plain: $(compare_losses "$work/torch-plain.json" "$out" || true)"
        ;;
    esac
}

# compare_losses A B: IDENTICAL, or the first difference; status 1 when
# they differ or a file is missing.
compare_losses() {
    timeout "$(step_left)" "$python" - "$1" "$2" <<'EOF'
import json, sys
try:
    a = json.load(open(sys.argv[1]))["losses"]
    b = json.load(open(sys.argv[2]))["losses"]
except (OSError, ValueError, KeyError) as e:
    print(f"cannot compare: {e}")
    sys.exit(1)
for i, (x, y) in enumerate(zip(a, b)):
    if x != y:
        print(f"DIFFERENT: first at step {i + 1}: {float.fromhex(x)!r} vs {float.fromhex(y)!r}")
        sys.exit(1)
if len(a) != len(b):
    print(f"DIFFERENT: {len(a)} vs {len(b)} losses")
    sys.exit(1)
print(f"IDENTICAL ({len(a)} losses)")
EOF
}

do_torch_losses() {
    if [ "$have_torch" -ne 1 ]; then
        res=SKIP fig="no torch with CUDA (torch-warmup)"
        return
    fi
    rc=0
    fig=$(compare_losses "$work/torch-plain.json" "$work/torch-cucache.json") || rc=$?
    echo "$fig" >>"$log"
    res=$(rc_word)
}

# ------------------------------------------------------------------------
# Pointer queries, IPC and cudaMemGetInfo: tests/gpu/ptr_ipc.c
# ------------------------------------------------------------------------
# Its checks must pass plain and under cucache-run, and its "answer" lines
# (what CUDA says of each block, freed memory, host, pinned and managed
# memory, IPC handles and the peer's mappings) must be the same: the plain
# run's lines are real CUDA's reference answers (in steps.log).  Its
# meminfo lines are information on a GPU.

do_ptr_ipc() {
    needs_bin ptr_ipc "$1" || return 0
    if [ "$2" = plain ]; then
        run "$bin"
    else
        run "$run_tool" -- "$bin" --expect-cucache
    fi
    grep '^answer ' "$log" >"$work/ptr_ipc-$1-$2.answers" || true
    local failed pieces
    failed=$(grep '^check .*: FAIL' "$log" | head -n 3 | cut -d: -f1 | sed 's/^check //' | paste -sd, - || true)
    pieces=$(grep -m1 '^info 24 MiB pieces' "$log" | cut -c6- || true)
    res=$(rc_word)
    fig="$(rc_note)$(grep -c '^check .*: PASS' "$log" || true) checks passed${failed:+, failed: $failed}"
    fig="$fig, $(wc -l <"$work/ptr_ipc-$1-$2.answers") answers${pieces:+; $pieces}"
}

do_ptr_ipc_answers() {
    local a=$work/ptr_ipc-$1-plain.answers b=$work/ptr_ipc-$1-cucache.answers n
    if [ ! -s "$a" ] || [ ! -f "$b" ]; then
        res=SKIP fig="no answers to compare (ptr_ipc-$1-plain, ptr_ipc-$1-cucache)"
        return
    fi
    n=$(wc -l <"$a")
    if diff "$a" "$b" >>"$log"; then
        res=PASS fig="$n answers, identical"
    else
        res=FAIL fig="$(grep -c '^<' "$log" || true) of $n differ (steps.log)"
    fi
}

# ------------------------------------------------------------------------
# CuPy with set_allocator(None)
# ------------------------------------------------------------------------

do_cupy() {
    if ! py_has cupy; then
        res=SKIP fig="CuPy not importable by $python"
        return
    fi
    if [ "$1" = plain ]; then
        run "$python" tests/gpu/cupy_check.py
    else
        run "$run_tool" -- "$python" tests/gpu/cupy_check.py --expect-cucache
    fi
    res=$(rc_word)
    fig="$(rc_note)run_s=$(field "$log" run_s)"
    [ "$1" = plain ] || fig="$fig num_cache_hits=$(field "$log" num_cache_hits)"
}

# ------------------------------------------------------------------------
# Out of memory: cucache's report and snapshot, opened by PyTorch's viewer
# ------------------------------------------------------------------------
# gpu_alloc --oom (shared runtime) and tests/gpu/torch_oom.py (caching off)
# fill the GPU with blocks of a 320th of its memory, free every other one
# and ask for more than is free, under cucache-run --snapshot.  The report
# must be on stderr and the snapshot written; check_snapshot.py checks it
# and torch.cuda._memory_viz renders it (stats, trace, trace_plot,
# segment_plot) into the work directory.
stacks=()
stacks_known=0

do_oom() {
    local name=$1 snap="$work/oom-$1-%n.pickle" conf=() cmd first filled
    case $name in
    gpu_alloc)
        needs_bin gpu_alloc shared || return 0
        cmd=("$bin" --oom)
        ;;
    *)
        if [ "$have_torch" -ne 1 ]; then
            res=SKIP fig="no torch with CUDA (torch-warmup)"
            return
        fi
        cmd=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$python" tests/gpu/torch_oom.py)
        ;;
    esac
    [ "$name" != torch-expandable ] || conf=(--conf expandable_segments:true)
    # call stacks need libunwind.so.8 at run time (the GPU machine may lack it)
    if [ "$stacks_known" -eq 0 ]; then
        stacks_known=1
        if timeout "$(step_left)" env CUCACHE_STACKS=native "$run_tool" -- true >/dev/null 2>&1; then
            stacks=(--stacks)
        fi
    fi
    rm -f "$work"/oom-"$name"-*.pickle "$work"/oom-"$name"-*.json
    run "$run_tool" "${conf[@]}" "${stacks[@]}" --snapshot "$snap" --snapshot-on oom,exit -- "${cmd[@]}"
    res=$(rc_word)
    filled=$(grep -o '[0-9]* \(blocks\|tensors\) of [0-9]* MiB' "$log" | head -n 1 || true)
    fig="$(rc_note)${filled:-no fill reported}, $(grep -c '^cucache: ' "$log" || true) cucache lines"
    [ ${#stacks[@]} -gt 0 ] || fig="$fig, no --stacks (no libunwind.so.8?)"
    if ! grep -q '^cucache: CUDA out of memory. Tried to allocate' "$log"; then
        res=FAIL fig="no OOM report on stderr; $fig"
    fi
    first="$work/oom-$name-0.pickle"
    if [ ! -s "$first" ] || [ ! -s "${first%.pickle}.json" ]; then
        res=FAIL fig="no snapshot; $fig"
    fi
}

# check_snapshot.py on the first snapshot, and with --stacks the frames of
# its live blocks.
do_oom_check() {
    local first="$work/oom-$1-0.pickle"
    if [ ! -s "$first" ]; then
        res=SKIP fig="no snapshot (oom-$1)"
        return
    fi
    run "$python" tests/stats/check_snapshot.py "$first" "${first%.pickle}.json"
    res=$(rc_word) fig="$(rc_note)check_snapshot.py: $([ "$rc" -eq 0 ] && echo 'schema and JSON agree' || echo 'see steps.log')"
    [ ${#stacks[@]} -gt 0 ] || return 0
    local frames
    frames=$(timeout "$(step_left)" "$python" - "$first" <<'PY' 2>&1
import pickle, sys
class R(pickle.Unpickler):
    def find_class(self, m, n):
        raise pickle.UnpicklingError(f"global {m}.{n}")
s = R(open(sys.argv[1], "rb")).load()
live = [b for seg in s["segments"] for b in seg["blocks"] if b["state"] != "inactive"]
framed = [b for b in live if b["frames"]]
top = framed[0]["frames"][0] if framed else None
print(f"{len(framed)} of {len(live)} live blocks with frames" +
      (f", e.g. {top['name']} ({top['filename']}:{top['line']})" if top else ""))
sys.exit(0 if live and len(framed) == len(live) else 1)
PY
    ) || res=FAIL
    echo "frames: $frames" >>"$log"
    fig="$fig; $frames"
}

do_oom_viz() {
    local first="$work/oom-$1-0.pickle" cmd failed=""
    if [ ! -s "$first" ]; then
        res=SKIP fig="no snapshot (oom-$1)"
        return
    fi
    if [ "$have_torch" -ne 1 ] || ! py_has torch.cuda._memory_viz; then
        res=SKIP fig="torch.cuda._memory_viz not importable by $python"
        return
    fi
    for cmd in stats trace; do
        run "$python" -m torch.cuda._memory_viz "$cmd" "$first"
        [ "$rc" -eq 0 ] || failed="$failed $cmd"
    done
    for cmd in trace_plot segment_plot; do
        run "$python" -m torch.cuda._memory_viz "$cmd" "$first" -o "$work/viz-$1-$cmd.html"
        [ "$rc" -eq 0 ] && [ -s "$work/viz-$1-$cmd.html" ] || failed="$failed $cmd"
    done
    if [ -z "$failed" ]; then
        res=PASS fig="stats, trace, trace_plot, segment_plot rendered (viz-$1-*.html in the work directory)"
    else
        res=FAIL fig="failed:$failed"
    fi
}

# The leak loop: under the defaults it may run out of memory with a hint;
# each setting the hint names, applied, must serve it.
do_oom_leak() {
    if [ "$have_torch" -ne 1 ]; then
        res=SKIP fig="no torch with CUDA (torch-warmup)"
        return
    fi
    local leak=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$python" tests/gpu/torch_oom.py --leak) named c served=""
    local failed=""
    run "$run_tool" -- "${leak[@]}"
    if [ "$rc" -eq 0 ]; then
        res=SKIP fig="served under the defaults: no OOM, no hint"
        return
    elif [ "$rc" -ne 3 ]; then
        res=FAIL fig="$(rc_note)neither served nor out of memory"
        return
    fi
    named=$(grep -o '^cucache: hint:   CUCACHE_CONF=[^ ]*' "$log" | sed 's/.*CUCACHE_CONF=//' || true)
    if [ -z "$named" ]; then
        res=PASS fig="no setting named: $(grep -m1 'no setting can serve it' "$log" | cut -c1-100)"
        return
    fi
    for c in $named; do
        run "$run_tool" --conf "$c" -- "${leak[@]}"
        if [ "$rc" -eq 0 ]; then served="$served $c"; else failed="$failed $c"; fi
    done
    if [ -z "$failed" ]; then
        res=PASS fig="the hint's settings served it:$served"
    else
        res=FAIL fig="not served under:$failed${served:+; served under:$served}"
    fi
}

# ------------------------------------------------------------------------
# Trace and replay: cucache-replay on what ran on the GPU
# ------------------------------------------------------------------------
# The replay must read the trace and the snapshot, keep reserved >=
# allocated and agree with the core's own statistics; its peaks are shown
# (on a GPU pending frees may wait longer than in the replay, so the
# replay's reserved is a lower bound: information).

# gpu_alloc --quick (shared runtime) recorded under cucache-run --trace:
# the replay needs a real trace, not a long one.
do_trace() {
    needs_bin gpu_alloc shared || return 0
    rm -f "$work/gpu_alloc.trace"
    run "$run_tool" --report --trace "$work/gpu_alloc.trace" -- "$bin" --quick
    res=$(rc_word) fig="$(rc_note)$(stat -c %s "$work/gpu_alloc.trace" 2>/dev/null || echo 0) bytes"
}

# A PyTorch snapshot of a few training steps with PyTorch's own allocator.
do_torch_snapshot() {
    if [ "$have_torch" -ne 1 ]; then
        res=SKIP fig="no torch with CUDA (torch-warmup)"
        return
    fi
    rm -f "$work/torch-snapshot.pickle"
    run "$python" tests/gpu/torch_snapshot.py "$work/torch-snapshot.pickle"
    res=$(rc_word) fig="$(rc_note)$(grep -o 'peak_allocated=.*' "$log" | tail -n 1 || true)"
}

do_replay() {
    local file=$work/gpu_alloc.trace total_mib
    [ "$1" = gpu_alloc ] || file=$work/torch-snapshot.pickle
    if [ ! -s "$file" ]; then
        res=SKIP fig="nothing to replay (${1/gpu_alloc/trace-gpu_alloc})"
        return
    fi
    total_mib=$(timeout "$(step_left)" nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
    if ! [[ $total_mib =~ ^[0-9]+$ ]]; then
        res=FAIL fig="nvidia-smi gave no memory size: '$total_mib'"
        return
    fi
    run "$build/cucache-replay" --json --capacity "$((total_mib << 20))" "$file"
    res=$(rc_word)
    fig=$(timeout "$(step_left)" "$python" - "$log" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
d = rows[0] if rows else {}
bad = [r["config"] for r in rows if not (r["reserved_covers_allocated"] and r["stats_agree"])]
print(("BAD " + ",".join(bad) + " ") if bad or not rows else "", end="")
print(f"events={d.get('events')} peak_allocated={d.get('peak_allocated')} peak_reserved={d.get('peak_reserved')}"
      + (f" torch_peak_reserved={d['torch_peak_reserved']}" if "torch_peak_reserved" in d else ""))
PY
    ) || true
    case "$fig" in BAD*) res=FAIL ;; esac
    fig="$(rc_note)$fig"
}

# ------------------------------------------------------------------------
# Two cucache processes on the one GPU (tests/gpu/neighbours.py)
# ------------------------------------------------------------------------
# nvml: a holder keeps 1 GiB live and 2 GiB cached; cucache-top --json lists
# it with NVML's bytes, which nvidia-smi --query-compute-apps agrees with,
# and its cucache figures.  yield: a second process asks for the free
# memory plus 1 GiB, served by the holder's idle cache, which the holder's
# exit summary counts.
do_neighbours() {
    if [ ! -x "$build/top/cucache-top" ]; then
        res=SKIP fig="no cucache-top in $build"
        return
    fi
    run "$python" tests/gpu/neighbours.py "$1" "$run_tool" "$build/top/cucache-top"
    res=$(rc_word)
    fig="$(rc_note)$(grep -o '^result: .*' "$log" | tail -n 1 | cut -c9-150 || true)"
}
