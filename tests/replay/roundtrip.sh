#!/usr/bin/env bash
# tests/replay/roundtrip.sh SEED STEPS DEVICES CAPACITY [CONF [oom|handouts|handouts-late]]:
# a live run and the replay of its trace must agree.  rt_prog runs under
# cucache-run --sim=CAPACITY --trace with CONF on DEVICES simulated devices
# and prints, per device, the peaks of cucache's own statistics;
# cucache-replay replays the trace with the same CONF and capacity, and must
# print the same peaks, device by device.
#
# With "oom", a run that runs out of memory (rt_prog ... oom):
# the replay is given neither the capacity nor the device model, only the
# trace and the same CONF: it must take the capacity the trace recorded,
# choose a model under which the recorded settings fail as the run did, and
# give the live run's peaks, its out-of-memory failures and its allocations
# served by the runtime's allocator, device by device and in total.
# The environment gives CUCACHE_RUN, CUCACHE_REPLAY and RT_PROG.
set -euo pipefail
seed=${1:?usage: roundtrip.sh SEED STEPS DEVICES CAPACITY [CONF [oom]]}
steps=$2 devices=$3 capacity=$4 conf=${5:-} mode=${6:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

conf_args=()
[ -n "$conf" ] && conf_args=(--conf "$conf")
prog_args=("$seed" "$steps")
replay_args=(--capacity "$capacity")
if [ "$mode" = oom ]; then
    prog_args+=(oom)
    replay_args=()
elif [ "$mode" = handouts ] || [ "$mode" = handouts-late ]; then
    prog_args+=("$mode")
fi
CUCACHE_WHATIF_MS=0 CUCACHE_SIM_DEVICES=$devices "$CUCACHE_RUN" --sim="$capacity" "${conf_args[@]}" \
    --trace "$tmp/job.trace" "$RT_PROG" "${prog_args[@]}" > "$tmp/live.txt" 2> "$tmp/live.err" || {
    cat "$tmp/live.err"
    exit 1
}
echo "live run ($devices devices, $capacity, conf '${conf:-default}'${mode:+, $mode}):"
cat "$tmp/live.txt"

"$CUCACHE_REPLAY" --json --no-reference "${replay_args[@]}" --conf "${conf:-default}" "$tmp/job.trace" \
    > "$tmp/replay.json"
if [ "$mode" = handouts-late ]; then
    # the second context stopped the hand-outs: the trace says where
    n=$("$CUCACHE_REPLAY" --dump "$tmp/job.trace" | grep -c 'no_hand_outs' || true)
    if [ "$n" != 1 ]; then
        echo "FAIL: the trace has $n no_hand_outs records; expected 1 (device 1's context)"
        exit 1
    fi
    echo "the trace records the hand-outs' stop"
fi
python3 - "$tmp/live.txt" "$tmp/replay.json" "$mode" <<'PY'
import json, sys
live = {}
for line in open(sys.argv[1]):
    w = line.split()
    if w and w[0] == "device":
        live[int(w[1])] = {"peak_allocated": int(w[3]), "peak_reserved": int(w[5]), "ooms": int(w[9]),
                           "fallbacks": int(w[11]), "hand_outs": int(w[13]) if len(w) > 13 else None}
rows = [json.loads(l) for l in open(sys.argv[2])]
assert len(rows) == 1, rows
r = rows[0]
oom_mode = sys.argv[3] == "oom"
print(f"replay: {r['events']} events, peak allocated {r['peak_allocated']}, reserved {r['peak_reserved']}, "
      f"{r['skipped']} skipped, {r['ooms']} OOMs, {r['fallbacks']} served by the runtime; "
      f"device model {r['device_model']}: {r['device_model_note']}")
bad = []
if not live:
    bad.append("the live run printed no peaks")
live_ooms = sum(v["ooms"] for v in live.values())
live_fallbacks = sum(v["fallbacks"] for v in live.values())
if r["skipped"]:
    bad.append(f"the replay had {r['skipped']} skipped events")
if (r["ooms"], r["fallbacks"]) != (live_ooms, live_fallbacks):
    bad.append(f"the replay had {r['ooms']} OOMs and {r['fallbacks']} fallbacks; the live run {live_ooms} and "
               f"{live_fallbacks}")
if (r["recorded_ooms"], r["recorded_fallbacks"]) != (live_ooms, live_fallbacks):
    bad.append(f"the trace records {r['recorded_ooms']} OOMs and {r['recorded_fallbacks']} fallbacks; the live run "
               f"had {live_ooms} and {live_fallbacks}")
if oom_mode:
    if not live_ooms:
        bad.append("the oom run saw no out-of-memory failure: make it run out")
    if not (r["device_model_note"] or "").startswith(r["device_model"] + ": the recorded settings"):
        bad.append(f"no model reproduces the run: {r['device_model_note']}")
    caps = {d["device"]: d["capacity"] for d in r["per_device"]}
    if any(c == 80 << 30 for c in caps.values()):
        bad.append(f"the replay did not take the recorded capacity: {caps}")
if sys.argv[3].startswith("handouts") and not all(v["hand_outs"] for v in live.values()):
    bad.append("the handouts run handed nothing out behind a fence: make it")
if not r["reserved_covers_allocated"]:
    bad.append("reserved fell below allocated in the replay")
per = {d["device"]: d for d in r["per_device"]}
for dev, want in sorted(live.items()):
    got = per.get(dev, {})
    for key in ("peak_allocated", "peak_reserved") + (("ooms", "fallbacks") if oom_mode else ()):
        if got.get(key) != want[key]:
            bad.append(f"device {dev} {key}: live {want[key]}, replay {got.get(key)}")
        else:
            print(f"device {dev} {key}: {want[key]} both")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
