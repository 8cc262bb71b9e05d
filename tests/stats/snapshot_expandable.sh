#!/usr/bin/env bash
# tests/stats/snapshot_expandable.sh CUCACHE_RUN PROGRAM CHECK_SNAPSHOT: a
# program run under cucache-run --sim with expandable_segments:true writes
# a snapshot at exit; check_snapshot.py reads its pickle (refusing
# unpickler) and JSON against the schema; its segments are the mapped runs,
# marked is_expandable, and its trace has segment_map events.
set -euo pipefail
run=$1 prog=$2 check=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$run" --sim=2G --conf expandable_segments:true --snapshot "$tmp/s-%n.pickle" --snapshot-on exit "$prog" 3 \
    > "$tmp/out.txt"
python3 "$check" "$tmp/s-0.pickle" "$tmp/s-0.json"
python3 - "$tmp/s-0.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
segs = d["segments"]
actions = {e["action"] for t in d["device_traces"] for e in t}
bad = []
if not segs or not all(s["is_expandable"] for s in segs):
    bad.append(f"segments not all expandable: {[s['is_expandable'] for s in segs]}")
if "segment_map" not in actions:
    bad.append(f"no segment_map event in the trace: {sorted(actions)}")
if not d["allocator_settings"].get("expandable_segments"):
    bad.append("allocator_settings.expandable_segments is not true")
for b in bad:
    print("FAIL:", b)
print(f"{len(segs)} expandable segments (mapped runs), trace actions {sorted(actions)}")
sys.exit(1 if bad else 0)
PY
