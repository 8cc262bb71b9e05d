#!/usr/bin/env bash
# tests/replay/roundtrip.sh SEED STEPS DEVICES CAPACITY [CONF]: the round
# trip of issue 6.  rt_prog runs under cucache-run --sim=CAPACITY --trace
# with CONF on DEVICES simulated devices and prints, per device, the peaks
# of cucache's own statistics; cucache-replay replays the trace with the
# same CONF and capacity, and must print the same peaks, device by device.
# The environment gives CUCACHE_RUN, CUCACHE_REPLAY and RT_PROG.
set -euo pipefail
seed=${1:?usage: roundtrip.sh SEED STEPS DEVICES CAPACITY [CONF]}
steps=$2 devices=$3 capacity=$4 conf=${5:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

conf_args=()
[ -n "$conf" ] && conf_args=(--conf "$conf")
CUCACHE_SIM_DEVICES=$devices "$CUCACHE_RUN" --sim="$capacity" "${conf_args[@]}" --trace "$tmp/job.trace" \
    "$RT_PROG" "$seed" "$steps" > "$tmp/live.txt"
echo "live run ($devices devices, $capacity, conf '${conf:-default}'):"
cat "$tmp/live.txt"

"$CUCACHE_REPLAY" --json --no-reference --capacity "$capacity" --conf "${conf:-default}" "$tmp/job.trace" \
    > "$tmp/replay.json"
python3 - "$tmp/live.txt" "$tmp/replay.json" <<'PY'
import json, sys
live = {}
for line in open(sys.argv[1]):
    w = line.split()
    if w and w[0] == "device":
        live[int(w[1])] = {"peak_allocated": int(w[3]), "peak_reserved": int(w[5])}
rows = [json.loads(l) for l in open(sys.argv[2])]
assert len(rows) == 1, rows
r = rows[0]
print(f"replay: {r['events']} events, peak allocated {r['peak_allocated']}, reserved {r['peak_reserved']}, "
      f"{r['skipped']} skipped, {r['ooms']} OOMs")
bad = []
if not live:
    bad.append("the live run printed no peaks")
if r["ooms"] or r["skipped"]:
    bad.append(f"the replay had {r['ooms']} OOMs and {r['skipped']} skipped events; the live run had none")
if not r["reserved_covers_allocated"]:
    bad.append("reserved fell below allocated in the replay")
per = {d["device"]: d for d in r["per_device"]}
for dev, want in sorted(live.items()):
    got = per.get(dev, {})
    for key in ("peak_allocated", "peak_reserved"):
        if got.get(key) != want[key]:
            bad.append(f"device {dev} {key}: live {want[key]}, replay {got.get(key)}")
        else:
            print(f"device {dev} {key}: {want[key]} both")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
