#!/usr/bin/env python3
"""Checks cucache's snapshot files (stats/snapshot.c) against the schema of
torch.cuda.memory._snapshot().

  check_snapshot.py FILE.pickle FILE.json
      Loads the pickle with every global refused, checks its opcodes
      (protocol 2, nothing that builds objects), that it is written as
      CPython's pickler writes the same content (batches of 1000 items,
      one APPEND or SETITEM for a single item, the same integer forms, the
      same memo references: opcode for opcode once memo indices are set
      aside) and that no string is written twice; every key and type, the
      block states, that the blocks tile each segment and that the
      segment sums agree with them; then that the JSON parses and holds
      the same content (tuples as lists, types compared too).

  check_snapshot.py --fixture SNAP_WRITE
      Runs the fixture program into a temporary directory, checks its
      files as above, and holds them against what the C side wrote in
      facts.json (addresses, states, pool id, times, 64-bit values).

  check_snapshot.py --large N --fixture SNAP_WRITE
      The fixture with N trace events on device 0, checked as above.

  check_snapshot.py --self-test --fixture SNAP_WRITE
      Corrupts the fixture's files in several ways (a global in the
      pickle, a missing key, a wrong type, broken tiling, ...) and fails
      unless the checker rejects every one of them.

  check_snapshot.py --torch --fixture SNAP_WRITE
      Runs PyTorch's own viewer (torch.cuda._memory_viz) on the fixture's
      pickle; exits 77 (skipped) when no python here imports it.

Plain python3 only (no torch needed except for --torch).  Exits nonzero
with a message naming the path of the first mismatch.
"""
import argparse
import copy
import io
import json
import os
import pickle
import pickletools
import struct
import subprocess
import sys
import tempfile

SKIP = 77


class CheckError(Exception):
    pass


def fail(path, msg):
    raise CheckError(f"{path}: {msg}")


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------

class RefusingUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global: a snapshot is plain data."""

    def find_class(self, module, name):
        raise CheckError(f"pickle: refers to the global {module}.{name}; a snapshot must hold plain data only")


# What snapshot.c may write: protocol 2 containers, scalars, the memo and STOP.
ALLOWED_OPCODES = {
    "PROTO", "STOP", "MARK", "EMPTY_DICT", "SETITEM", "SETITEMS", "EMPTY_LIST", "APPEND", "APPENDS",
    "TUPLE2", "BININT", "BININT1", "BININT2", "LONG1", "BINUNICODE", "NEWTRUE", "NEWFALSE", "NONE", "BINFLOAT",
    "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET",
}
PUTS = {"BINPUT", "LONG_BINPUT", "MEMOIZE"}
GETS = {"BINGET", "LONG_BINGET"}
BATCH = 1000  # CPython's pickler: items between one MARK and its APPENDS or SETITEMS


def structure(data):
    """The opcodes of a pickle with its memo indices set aside: puts left
    out, each get naming the opcode (its place among the rest) that made
    the value it fetches.  Two pickles with the same structure build the
    same objects, shared the same way, from the same opcodes."""
    out, made_by = [], {}
    for op, arg, _ in pickletools.genops(data):
        if op.name in PUTS:
            made_by[arg if op.name != "MEMOIZE" else len(made_by)] = len(out) - 1
        elif op.name in GETS:
            if arg not in made_by:
                raise CheckError(f"pickle: memo index {arg} fetched before it was stored")
            out.append(("GET", made_by[arg]))
        else:
            out.append((op.name, arg))
    return out


def check_encoding(data, obj):
    """data is what CPython's pickler (the C one, pickle.dumps) writes for
    obj at protocol 2, but for memo indices; every string is written once."""
    seen = set()
    height, marks, batches = 0, [], []
    for op, arg, pos in pickletools.genops(data):
        name = op.name
        if name == "BINUNICODE":
            if arg in seen:
                raise CheckError(f"pickle: the string {arg!r} is written again at byte {pos} "
                                 "instead of fetched from the memo")
            seen.add(arg)
        if name == "MARK":
            marks.append(height)
        elif name in ("APPENDS", "SETITEMS"):
            n = height - marks.pop()
            batches.append(n // 2 if name == "SETITEMS" else n)
            height -= n
        elif name in ("APPEND", "TUPLE2", "SETITEM"):
            height -= 2 if name == "SETITEM" else 1
        elif name not in PUTS and name not in ("PROTO", "STOP"):
            height += 1
    if any(n > BATCH for n in batches):
        raise CheckError(f"pickle: a batch of {max(batches)} items; Python's pickler writes at most {BATCH}")
    frames = {}
    lists = [s["frames"] for s in obj.get("segments", [])] + [b["frames"] for s in obj.get("segments", [])
                                                              for b in s.get("blocks", [])]
    lists += [e["frames"] for t in obj.get("device_traces", []) for e in t if isinstance(e, dict) and "frames" in e]
    for fl in lists:
        for f in fl if isinstance(fl, list) else []:
            key = json.dumps(f, sort_keys=True)
            if frames.setdefault(key, f) is not f:
                raise CheckError(f"pickle: the frame {key} is written again instead of fetched from the memo")
    ours = structure(data)
    theirs = structure(pickle.dumps(obj, protocol=2))
    if ours != theirs:
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        near = lambda ops: ops[max(0, at - 3):at + 3]  # noqa: E731
        raise CheckError(f"pickle: not as Python's pickler writes it, from opcode {at}: "
                         f"ours {near(ours)}, Python's {near(theirs)}")
    return batches


def load_pickle(data):
    try:
        ops = list(pickletools.genops(data))
    except Exception as e:
        raise CheckError(f"pickle: malformed: {e}")
    if not ops or ops[0][0].name != "PROTO" or ops[0][1] != 2:
        raise CheckError("pickle: does not start with PROTO 2")
    for op, arg, pos in ops:
        if op.name not in ALLOWED_OPCODES:
            raise CheckError(f"pickle: opcode {op.name} at byte {pos} is not one snapshot.c writes")
    try:
        obj = RefusingUnpickler(io.BytesIO(data)).load()
    except CheckError:
        raise
    except Exception as e:
        raise CheckError(f"pickle: does not load: {type(e).__name__}: {e}")
    return obj


def load_json(text):
    try:
        return json.loads(text)
    except ValueError as e:
        raise CheckError(f"json: does not parse: {e}")


# ---------------------------------------------------------------------------
# The schema
# ---------------------------------------------------------------------------

BLOCK_STATES = {"active_allocated", "active_pending_free", "inactive"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
           "segment_unmap", "oom", "snapshot"}
EXPANDABLE_ACTIONS = {"segment_map", "segment_unmap"}  # only with expandable_segments:true
ROUNDUP_KEYS = {str(1 << i) for i in range(16)}
EPOCH_2020_US = 1577836800 * 1000000


def is_int(v):
    return type(v) is int  # bool is an int subclass: not accepted


def want(path, v, kind):
    ok = {
        "int": is_int(v),
        "uint": is_int(v) and v >= 0,
        "str": type(v) is str,
        "bool": type(v) is bool,
        "float": type(v) is float,
        "list": type(v) is list,
        "dict": type(v) is dict,
        "tuple": type(v) is tuple,
    }[kind]
    if not ok:
        fail(path, f"expected {kind}, found {type(v).__name__} {v!r}")
    return v


def keys(path, d, spec):
    want(path, d, "dict")
    missing = [k for k in spec if k not in d]
    extra = [k for k in d if k not in spec]
    if missing:
        fail(path, f"missing key{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    if extra:
        fail(path, f"unexpected key{'s' if len(extra) > 1 else ''} {', '.join(map(str, extra))}")
    for k, kind in spec.items():
        want(f"{path}.{k}", d[k], kind)


SEGMENT = {
    "device": "uint", "address": "uint", "total_size": "uint", "allocated_size": "uint",
    "active_size": "uint", "requested_size": "uint", "stream": "uint", "segment_type": "str",
    "segment_pool_id": "tuple", "is_expandable": "bool", "frames": "list", "blocks": "list",
}
BLOCK = {"address": "uint", "size": "uint", "requested_size": "uint", "state": "str", "frames": "list"}
TRACE_COMMON = {"action": "str", "size": "uint", "stream": "uint", "time_us": "uint", "frames": "list",
                "compile_context": "str", "user_metadata": "str"}
SETTINGS = {"CUCACHE_CONF": "str", "max_split_size": "int", "garbage_collection_threshold": "float",
            "expandable_segments": "bool", "roundup_power2_divisions": "dict"}
TOP = {"segments": "list", "device_traces": "list", "allocator_settings": "dict", "external_annotations": "list",
       "cucache_yields": "list"}
YIELDS = {"device": "uint", "given": "uint", "given_bytes": "uint", "received": "uint", "received_bytes": "uint"}


FRAME = {"name": "str", "filename": "str", "line": "uint"}


def check_frames(path, frames, allowed):
    """PyTorch's frames: name, filename, line (0 when unknown); cucache
    records them (CUCACHE_STACKS) for live and pending blocks, segments
    and the trace events that allocate, free, make, map or release."""
    if frames and not allowed:
        fail(path, "cucache records no frames here")
    for i, f in enumerate(frames):
        keys(f"{path}[{i}]", f, FRAME)
        if not f["name"] or not f["filename"]:
            fail(f"{path}[{i}]", "a frame names a function and a file (or '??')")


def check_segment(path, s):
    keys(path, s, SEGMENT)
    if s["segment_type"] not in ("small", "large"):
        fail(f"{path}.segment_type", f"{s['segment_type']!r} is neither 'small' nor 'large'")
    pid = s["segment_pool_id"]
    if len(pid) != 2 or not all(is_int(x) and x >= 0 for x in pid) or pid[0] != 0:
        fail(f"{path}.segment_pool_id", f"expected (0, pool id), found {pid!r}")
    check_frames(f"{path}.frames", s["frames"], True)
    if not s["blocks"]:
        fail(f"{path}.blocks", "a segment has at least one block")
    at = s["address"]
    allocated = active = requested = 0
    for i, b in enumerate(s["blocks"]):
        bp = f"{path}.blocks[{i}]"
        keys(bp, b, BLOCK)
        if b["state"] not in BLOCK_STATES:
            fail(f"{bp}.state", f"{b['state']!r} is not one of {sorted(BLOCK_STATES)}")
        if b["address"] != at:
            fail(f"{bp}.address", f"{b['address']:#x}, expected {at:#x} (blocks must tile the segment)")
        if b["size"] == 0:
            fail(f"{bp}.size", "an empty block")
        check_frames(f"{bp}.frames", b["frames"], b["state"] != "inactive")
        if b["state"] == "inactive":
            if b["requested_size"] != 0:
                fail(f"{bp}.requested_size", "an inactive block was requested by nobody")
        elif not 0 < b["requested_size"] <= b["size"]:
            fail(f"{bp}.requested_size", f"{b['requested_size']} outside (0, size {b['size']}]")
        at += b["size"]
        allocated += b["size"] if b["state"] == "active_allocated" else 0
        active += b["size"] if b["state"] != "inactive" else 0
        requested += b["requested_size"] if b["state"] != "inactive" else 0  # PyTorch sums the active ones
    if at - s["address"] != s["total_size"]:
        fail(f"{path}.total_size", f"{s['total_size']}, but the blocks add up to {at - s['address']}")
    for key, value in (("allocated_size", allocated), ("active_size", active), ("requested_size", requested)):
        if s[key] != value:
            fail(f"{path}.{key}", f"{s[key]}, but the blocks say {value}")
    if at > 1 << 64:
        fail(path, "ends beyond the 64-bit address space")


def check_trace_entry(path, e):
    want(path, e, "dict")
    spec = dict(TRACE_COMMON)
    spec["device_free" if e.get("action") == "oom" else "addr"] = "uint"
    keys(path, e, spec)
    if e["action"] not in ACTIONS:
        fail(f"{path}.action", f"{e['action']!r} is not one of {sorted(ACTIONS)}")
    if e["time_us"] < EPOCH_2020_US:
        fail(f"{path}.time_us", f"{e['time_us']} is before 2020: not microseconds since the epoch")
    check_frames(f"{path}.frames", e["frames"], e["action"] in (
        "alloc", "free_requested", "free_completed", "oom", "segment_alloc", "segment_map", "segment_free"))
    if e["compile_context"] != "N/A" or e["user_metadata"]:
        fail(path, "compile_context is 'N/A' (PyTorch's without a torch.compile context) and user_metadata "
                   "empty in cucache's traces")


def check_settings(path, s):
    keys(path, s, SETTINGS)
    if s["max_split_size"] < -1:
        fail(f"{path}.max_split_size", "below -1 (unlimited)")
    if not 0.0 <= s["garbage_collection_threshold"] < 1.0:
        fail(f"{path}.garbage_collection_threshold", "outside [0, 1)")
    r = s["roundup_power2_divisions"]
    if set(r) != ROUNDUP_KEYS:
        fail(f"{path}.roundup_power2_divisions", f"keys {sorted(r, key=str)}, expected 1, 2, 4, ... 32768")
    for k, v in r.items():
        want(f"{path}.roundup_power2_divisions[{k}]", v, "uint")


def check_snapshot(snap):
    keys("snapshot", snap, TOP)
    last = None
    for i, s in enumerate(snap["segments"]):
        check_segment(f"segments[{i}]", s)
        if s["is_expandable"] and not snap["allocator_settings"].get("expandable_segments"):
            fail(f"segments[{i}].is_expandable", "an expandable segment, but expandable_segments is off")
        here = (s["device"], s["address"])
        if last is not None:
            if here <= last[0]:
                fail(f"segments[{i}]", "segments are not in (device, address) order")
            if here[0] == last[0][0] and here[1] < last[0][1] + last[1]:
                fail(f"segments[{i}]", "overlaps the segment before it")
        last = (here, s["total_size"])
    traces = snap["device_traces"]
    for i, t in enumerate(traces):
        want(f"device_traces[{i}]", t, "list")
        previous = 0
        for k, e in enumerate(t):
            check_trace_entry(f"device_traces[{i}][{k}]", e)
            if e["time_us"] < previous:
                fail(f"device_traces[{i}][{k}].time_us", "earlier than the entry before it (oldest first)")
            previous = e["time_us"]
    for i, s in enumerate(snap["segments"]):
        if s["device"] >= len(traces):
            fail(f"segments[{i}].device", f"{s['device']} has no list in device_traces (length {len(traces)})")
    check_settings("allocator_settings", snap["allocator_settings"])
    if snap["external_annotations"]:
        fail("external_annotations", "cucache writes none")
    devices = []
    for i, y in enumerate(snap["cucache_yields"]):
        keys(f"cucache_yields[{i}]", y, YIELDS)
        if devices and y["device"] <= devices[-1]:
            fail(f"cucache_yields[{i}].device", "not in ascending order")
        if (y["given"] == 0) != (y["given_bytes"] == 0) or (y["received"] == 0) != (y["received_bytes"] == 0):
            fail(f"cucache_yields[{i}]", "a count without bytes, or bytes without a count")
        devices.append(y["device"])


def as_json(v):
    """The pickle's content as JSON would hold it: tuples become lists."""
    if isinstance(v, tuple):
        return [as_json(x) for x in v]
    if isinstance(v, list):
        return [as_json(x) for x in v]
    if isinstance(v, dict):
        return {k: as_json(x) for k, x in v.items()}
    return v


def same(path, a, b):
    """a == b with types compared too (True is not 1, 1.0 is not 1)."""
    if type(a) is not type(b):
        fail(path, f"pickle has {type(a).__name__} {a!r}, json has {type(b).__name__} {b!r}")
    if isinstance(a, dict):
        if list(a) != list(b):
            fail(path, f"keys differ: pickle {list(a)}, json {list(b)}")
        for k in a:
            same(f"{path}.{k}", a[k], b[k])
    elif isinstance(a, list):
        if len(a) != len(b):
            fail(path, f"pickle has {len(a)} items, json {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            same(f"{path}[{i}]", x, y)
    elif a != b:
        fail(path, f"pickle has {a!r}, json has {b!r}")


def check_files(pickle_bytes, json_text):
    """The snapshot, and its batches' sizes (check_encoding)."""
    snap = load_pickle(pickle_bytes)
    batches = check_encoding(pickle_bytes, snap)
    check_snapshot(snap)
    same("json", as_json(snap), load_json(json_text))
    return snap, batches


def check_paths(pickle_path, json_path):
    with open(pickle_path, "rb") as f:
        data = f.read()
    with open(json_path, encoding="utf-8") as f:
        text = f.read()
    return check_files(data, text)[0]


# ---------------------------------------------------------------------------
# The fixture (snap_write, snap_fixture.c)
# ---------------------------------------------------------------------------

SELF_TEST_EVENTS = 2500  # lists of more than one batch


def run_fixture(exe, directory, events=None):
    r = subprocess.run([exe, directory] + ([str(events)] if events else []), capture_output=True, text=True)
    if r.returncode != 0:
        raise CheckError(f"{exe} exited {r.returncode}: {r.stderr.strip()}")
    paths = [os.path.join(directory, n) for n in ("snapshot.pickle", "snapshot.json", "facts.json")]
    for p in paths:
        if not os.path.isfile(p):
            raise CheckError(f"{exe} did not write {p}")
    with open(paths[2], encoding="utf-8") as f:
        facts = json.load(f)
    return paths[0], paths[1], facts


def block_at(snap, device, address):
    for s in snap["segments"]:
        if s["device"] != device:
            continue
        for b in s["blocks"]:
            if b["address"] == address:
                return s, b
    raise CheckError(f"fixture: no block at {address:#x} on device {device}")


def check_facts(snap, facts):
    def expect(path, found, expected):
        if found != expected:
            fail(f"fixture: {path}", f"{found!r}, expected {expected!r}")

    traces = snap["device_traces"]
    expect("len(device_traces)", len(traces), facts["far_device"] + 1)
    expect("device_traces[1]", traces[1], [])
    expect("segments on device 0", sum(s["device"] == 0 for s in snap["segments"]), facts["nsegs0"])

    for name, state, requested in (("live_small", "active_allocated", 1000), ("freed_small", "inactive", 0),
                                   ("pending_small", "active_pending_free", 5000),
                                   ("live_large", "active_allocated", 12 << 20)):
        seg, b = block_at(snap, 0, facts[name])
        expect(f"{name}.state", b["state"], state)
        expect(f"{name}.requested_size", b["requested_size"], requested)
        expect(f"{name} segment_type", seg["segment_type"], "large" if name == "live_large" else "small")
        expect(f"{name} segment_pool_id", seg["segment_pool_id"], (0, 0))
        expect(f"{name} stream", seg["stream"], 0 if name == "live_large" else 7)
    seg, b = block_at(snap, 0, facts["pool_block"])
    expect("pool_block segment_pool_id", seg["segment_pool_id"], (0, facts["pool_id"]))
    expect("pool_block.state", b["state"], "active_allocated")

    t0 = traces[0]
    expect("len(device_traces[0])", len(t0), facts["ntrace0"])
    expect("device_traces[0] actions", {e["action"] for e in t0}, ACTIONS - EXPANDABLE_ACTIONS)
    expect("last action of device 0", t0[-1]["action"], "snapshot")
    for i, e in enumerate(t0):
        if not facts["t_before"] <= e["time_us"] <= facts["t_after"] + 1:
            fail(f"fixture: device_traces[0][{i}].time_us",
                 f"{e['time_us']} outside the fixture's run [{facts['t_before']}, {facts['t_after']}]")
    ooms = [e for e in t0 if e["action"] == "oom"]
    expect("oom entries on device 0", len(ooms), 1)
    expect("oom.size", ooms[0]["size"], facts["oom_size"])
    expect("oom.device_free", ooms[0]["device_free"], 1 << 30)  # the 1 GiB device, empty at the failure
    pending = [e for e in t0 if e["action"] == "free_requested" and e["addr"] == facts["pending_small"]]
    expect("free_requested of pending_small", len(pending), 1)
    if any(e["action"] == "free_completed" and e["addr"] == facts["pending_small"] for e in t0):
        fail("fixture: device_traces[0]", "pending_small's free completed, but its fence never did")

    far = [s for s in snap["segments"] if s["device"] == facts["far_device"]]
    expect("segments on device 2", len(far), 1)
    expect("far address", far[0]["address"], facts["far_address"])
    expect("far stream", far[0]["stream"], facts["far_stream"])
    expect("far blocks", [b["state"] for b in far[0]["blocks"]],
           ["active_allocated", "active_pending_free", "inactive"])
    expect("far sums", (far[0]["allocated_size"], far[0]["active_size"], far[0]["requested_size"]),
           (512 << 10, 1 << 20, 500000 + (512 << 10) - 1))
    t2 = traces[facts["far_device"]]
    expect("device 2 actions", [e["action"] for e in t2], ["segment_alloc", "alloc", "oom"])
    expect("device 2 oom.device_free", t2[2]["device_free"], facts["far_free"])
    expect("device 2 addr", t2[0]["addr"], facts["far_address"])

    st = snap["allocator_settings"]
    expect("CUCACHE_CONF", st["CUCACHE_CONF"], facts["conf_text"])
    expect("max_split_size", st["max_split_size"], facts["max_split_size"])
    expect("garbage_collection_threshold", st["garbage_collection_threshold"], 0.8)
    expect("expandable_segments", st["expandable_segments"], False)
    expect("roundup_power2_divisions", [st["roundup_power2_divisions"][str(1 << i)] for i in range(16)],
           facts["roundup_divs"])


def fixture_mode(exe):
    with tempfile.TemporaryDirectory(prefix="cucache-snap-") as d:
        p, j, facts = run_fixture(exe, d)
        snap = check_paths(p, j)
        check_facts(snap, facts)
        with open(p, "rb") as f:
            if pickle2(snap) != f.read():
                raise CheckError("the pickle differs from this checker's own encoding of its content "
                                 "(pickle2: same opcodes, smallest integer forms)")
        leftovers = sorted(n for n in os.listdir(d) if ".tmp." in n)
        if leftovers:
            raise CheckError(f"temporary files left behind: {leftovers}")
        nblocks = sum(len(s["blocks"]) for s in snap["segments"])
        print(f"ok: {len(snap['segments'])} segments, {nblocks} blocks, "
              f"{sum(map(len, snap['device_traces']))} trace entries over {len(snap['device_traces'])} devices; "
              f"json equals pickle; fixture facts hold; bytes equal the reference encoding")


def large_mode(exe, events):
    """A snapshot of `events` trace events: loads, holds what the JSON
    holds, is encoded as Python's pickler encodes it, and its trace list
    goes in batches of exactly 1000."""
    with tempfile.TemporaryDirectory(prefix="cucache-snap-") as d:
        p, j, _ = run_fixture(exe, d, events)
        with open(p, "rb") as f:
            data = f.read()
        with open(j, encoding="utf-8") as f:
            text = f.read()
    snap, batches = check_files(data, text)
    if len(snap["device_traces"][0]) != events:
        raise CheckError(f"device_traces[0]: {len(snap['device_traces'][0])} entries, expected {events}")
    full = sum(n == BATCH for n in batches)
    if full != events // BATCH or (events % BATCH > 1 and events % BATCH not in batches):
        raise CheckError(f"device_traces[0]: {full} batches of {BATCH}, expected {events // BATCH} "
                         f"and one of {events % BATCH}")
    print(f"ok: {events} trace entries in {full} batches of {BATCH} and one of {events % BATCH}; "
          f"{len(data)} bytes ({len(data) / events:.1f} a trace entry); json equals pickle; "
          f"encoded as Python's pickler encodes it")


# ---------------------------------------------------------------------------
# --self-test: the checker rejects broken files
# ---------------------------------------------------------------------------

def pickle2(obj, batch=BATCH, memo=True):
    """obj as snapshot.c encodes it, for the byte-for-byte check and the
    corrupted variants: protocol 2, batches of `batch` items (one APPEND
    or SETITEM for a single item), the smallest integer form, each string
    written once and fetched from the memo after (memo=False: written
    each time), each non-empty list of frames put in the memo as it opens
    and fetched when the same list object comes again, each frame's dict
    likewise and fetched when a frame with the same content comes again."""
    out = bytearray(b"\x80\x02")
    strings, lists, frame_dicts = {}, {}, {}
    count = [0]  # memo indices given

    def next_index():
        count[0] += 1
        return count[0] - 1

    def memo_op(short, long_, i):
        out.extend(bytes([short, i]) if i < 256 else bytes([long_]) + i.to_bytes(4, "little"))

    def items(pairs, n, one, many, put_item):
        if n == 1:
            put_item(pairs[0])
            out.extend(one)
            return
        for at in range(0, n, batch):
            out.extend(b"(")
            for x in pairs[at:at + batch]:
                put_item(x)
            out.extend(many)

    def put(v, frames=False, frame=False):
        if type(v) is bool:
            out.append(0x88 if v else 0x89)
        elif v is None:
            out.extend(b"N")
        elif type(v) is int:
            if 0 <= v <= 0xff:
                out.extend(b"K" + bytes([v]))
            elif 0 <= v <= 0xffff:
                out.extend(b"M" + v.to_bytes(2, "little"))
            elif -(1 << 31) <= v < 1 << 31:
                out.extend(b"J" + v.to_bytes(4, "little", signed=True))
            else:
                n = (v.bit_length() + 8) // 8
                out.extend(b"\x8a" + bytes([n]) + v.to_bytes(n, "little", signed=True))
        elif type(v) is float:
            out.extend(b"G" + struct.pack(">d", v))
        elif type(v) is str:
            if memo and v in strings:
                memo_op(ord("h"), ord("j"), strings[v])
                return
            b = v.encode("utf-8")
            out.extend(b"X" + len(b).to_bytes(4, "little") + b)
            if memo:
                strings[v] = next_index()
                memo_op(ord("q"), ord("r"), strings[v])
        elif type(v) is tuple and len(v) == 2:
            put(v[0])
            put(v[1])
            out.append(0x86)
        elif type(v) is list:
            if frames and id(v) in lists:
                memo_op(ord("h"), ord("j"), lists[id(v)][0])
                return
            out.extend(b"]")
            if frames and v and memo:
                lists[id(v)] = (next_index(), v)  # v kept: its id stays its own
                memo_op(ord("q"), ord("r"), lists[id(v)][0])
            items(v, len(v), b"a", b"e", lambda x: put(x, frame=frames))
        elif type(v) is dict:
            key = (v.get("name"), v.get("filename"), v.get("line")) if frame and memo else None
            if key in frame_dicts:
                memo_op(ord("h"), ord("j"), frame_dicts[key])
                return
            out.extend(b"}")
            if key:
                index = next_index()
                memo_op(ord("q"), ord("r"), index)
            items(list(v.items()), len(v), b"s", b"u", lambda kv: (put(kv[0]), put(kv[1], kv[0] == "frames")))
            if key:
                frame_dicts[key] = index
        else:
            raise TypeError(f"pickle2: {type(v).__name__}")

    put(obj)
    out.extend(b".")
    return bytes(out)


def corruptions(data, text):
    """(what, the pickle, the json, a fragment the rejection must name)"""
    snap = load_pickle(data)
    if pickle2(snap) != data:
        raise CheckError("pickle2 does not reproduce the fixture's pickle byte for byte: fix the self-test's encoder")

    def edit(fn):
        s = copy.deepcopy(snap)
        fn(s)
        return pickle2(s), json.dumps(as_json(s))

    def edit_json(fn):
        j = json.loads(text)
        fn(j)
        return data, json.dumps(j)

    seg0 = lambda s: s["segments"][0]  # noqa: E731
    blk0 = lambda s: s["segments"][0]["blocks"][0]  # noqa: E731
    # A global: if the loader called it, it would print; it must refuse first.
    glob = b"\x80\x02cbuiltins\nprint\nX\x05\x00\x00\x00hello\x85R."
    yield "a pickle that names a global (builtins.print)", glob, text, "GLOBAL"
    yield "one batch of every item", pickle2(snap, batch=1 << 30), text, "a batch of 2500 items"
    yield "batches of 999 items", pickle2(snap, batch=999), text, "not as Python's pickler writes it"
    yield "strings written again", pickle2(snap, memo=False), text, "instead of fetched from the memo"
    bad_get = bytearray(data)
    first_get = next(pos for op, _, pos in pickletools.genops(data) if op.name == "BINGET")
    bad_get[first_get + 1] = 0xfe  # an index not stored yet
    yield "a memo index fetched before it was stored", bytes(bad_get), text, "254"
    yield "a truncated pickle", data[: len(data) // 2], text, "malformed"
    yield "a pickle without PROTO 2", pickle.dumps(snap, protocol=0), text, "PROTO 2"
    yield "a block without its state", *edit(lambda s: blk0(s).pop("state")), "blocks[0]: missing key state"
    yield "a segment without segment_pool_id", *edit(lambda s: s["segments"][1].pop("segment_pool_id")), \
        "segments[1]: missing key segment_pool_id"
    yield "no allocator_settings", *edit(lambda s: s.pop("allocator_settings")), "missing key allocator_settings"
    yield "an extra key", *edit(lambda s: seg0(s).__setitem__("expandable", False)), "unexpected key expandable"
    yield "total_size as a string", *edit(lambda s: seg0(s).__setitem__("total_size", "2097152")), \
        "total_size: expected uint, found str"
    yield "is_expandable as 0", *edit(lambda s: seg0(s).__setitem__("is_expandable", 0)), \
        "is_expandable: expected bool"
    yield "segment_pool_id as a list", *edit(lambda s: seg0(s).__setitem__("segment_pool_id", [0, 0])), \
        "segment_pool_id: expected tuple"
    yield "frames on a snapshot event", *edit(lambda s: [e.__setitem__(
        "frames", [{"name": "main", "filename": "x.c", "line": 3}]) for e in s["device_traces"][0]
        if e["action"] == "snapshot"]), "frames: cucache records no frames here"
    yield "compile_context empty", *edit(lambda s: s["device_traces"][0][0].__setitem__("compile_context", "")), \
        "compile_context is 'N/A'"
    yield "a frame without its line", *edit(lambda s: blk0(s).__setitem__(
        "frames", [{"name": "main", "filename": "x.c"}])), "frames[0]: missing key line"
    yield "a negative address", *edit(lambda s: blk0(s).__setitem__("address", -1)), "address: expected uint"
    yield "an unknown block state", *edit(lambda s: blk0(s).__setitem__("state", "active_awaiting_free")), \
        "'active_awaiting_free' is not one of"
    yield "an unknown segment type", *edit(lambda s: seg0(s).__setitem__("segment_type", "huge")), \
        "neither 'small' nor 'large'"
    yield "an unknown action", *edit(lambda s: s["device_traces"][0][0].__setitem__("action", "segment_grow")), \
        "'segment_grow' is not one of"
    yield "an oom entry with addr", *edit(lambda s: [e.__setitem__("addr", e.pop("device_free"))
                                                     for e in s["device_traces"][0] if e["action"] == "oom"]), \
        "missing key device_free"
    yield "blocks that do not tile", *edit(lambda s: blk0(s).__setitem__("size", blk0(s)["size"] + 512)), \
        "blocks must tile the segment"
    yield "a gap between blocks", *edit(lambda s: seg0(s)["blocks"].pop(1)), "blocks must tile the segment"
    yield "blocks short of total_size", *edit(lambda s: seg0(s).__setitem__("total_size", seg0(s)["total_size"] * 2)), \
        "but the blocks add up to"
    yield "a wrong allocated_size", *edit(lambda s: seg0(s).__setitem__("allocated_size", seg0(s)["allocated_size"] + 512)), \
        "allocated_size"
    yield "a wrong active_size", *edit(lambda s: seg0(s).__setitem__("active_size", 0)), "active_size"
    yield "a wrong requested_size", *edit(lambda s: seg0(s).__setitem__("requested_size", 1)), "requested_size"
    yield "segments out of order", *edit(lambda s: s["segments"].reverse()), "not in (device, address) order"
    yield "a missing device list", *edit(lambda s: s["device_traces"].pop()), "has no list in device_traces"
    yield "traces out of order", *edit(lambda s: s["device_traces"][0][-1].__setitem__(
        "time_us", s["device_traces"][0][0]["time_us"] - 1)), "oldest first"
    yield "time in seconds", *edit(lambda s: s["device_traces"][0][0].__setitem__("time_us", 1700000000)), \
        "before 2020"
    yield "roundup key missing", *edit(lambda s: s["allocator_settings"]["roundup_power2_divisions"].pop("1")), \
        "roundup_power2_divisions"
    yield "json with another time", *edit_json(lambda j: j["device_traces"][0][0].__setitem__(
        "time_us", j["device_traces"][0][0]["time_us"] + 1)), "json.device_traces[0][0].time_us"
    yield "json with true for 1", *edit_json(lambda j: j["allocator_settings"]["roundup_power2_divisions"].__setitem__(
        "256", True)), "json has bool True"
    yield "json with a float for an int", *edit_json(lambda j: j["segments"][0].__setitem__(
        "total_size", float(j["segments"][0]["total_size"]))), "json has float"
    yield "json with keys in another order", *edit_json(lambda j: j.__setitem__("segments", j.pop("segments"))), \
        "keys differ"
    yield "json that does not parse", data, text[:-3], "does not parse"


def self_test(exe):
    with tempfile.TemporaryDirectory(prefix="cucache-snap-") as d:
        p, j, _ = run_fixture(exe, d, SELF_TEST_EVENTS)
        with open(p, "rb") as f:
            data = f.read()
        with open(j, encoding="utf-8") as f:
            text = f.read()
    check_files(data, text)  # the original passes
    # The restricted unpickler on its own (load_pickle refuses the GLOBAL
    # opcode before unpickling): it must refuse the global, not call it.
    glob = b"\x80\x02cbuiltins\nprint\nX\x05\x00\x00\x00hello\x85R."
    try:
        RefusingUnpickler(io.BytesIO(glob)).load()
    except CheckError as e:
        if "builtins.print" not in str(e):
            raise CheckError(f"the restricted unpickler refused with the wrong message: {e}")
        print(f"rejected by the unpickler itself: {e}")
    else:
        raise CheckError("the restricted unpickler loaded a pickle that calls builtins.print")
    missed = []
    n = 0
    for what, bad_pickle, bad_json, reason in corruptions(data, text):
        n += 1
        out = io.StringIO()
        real_stdout, sys.stdout = sys.stdout, out  # a global that runs would print here
        try:
            check_files(bad_pickle, bad_json)
        except CheckError as e:
            if reason not in str(e):
                missed.append(f"{what}: rejected for another reason than {reason!r}: {e}")
            else:
                print(f"rejected {what}: {e}", file=real_stdout)
        except Exception as e:
            missed.append(f"{what}: the checker crashed instead of rejecting it: {type(e).__name__}: {e}")
        else:
            missed.append(f"{what}: accepted")
        finally:
            sys.stdout = real_stdout
        if out.getvalue():
            missed.append(f"{what}: something ran while loading: {out.getvalue()!r}")
    if missed:
        raise CheckError("the checker let through:\n  " + "\n  ".join(missed))
    print(f"ok: all {n} corrupted variants rejected")


# ---------------------------------------------------------------------------
# --torch: PyTorch's viewer on the fixture's pickle
# ---------------------------------------------------------------------------

def torch_python():
    for py in (sys.executable, "/usr/bin/python3"):
        if py and os.path.exists(py):
            r = subprocess.run([py, "-c", "import torch.cuda._memory_viz"], capture_output=True)
            if r.returncode == 0:
                return py
    return None


# For torch 1.13, whose viewer takes memory_snapshot()'s list of segments
# and whose flamegraph commands download a script: run its functions
# in-process, with a formatter that returns the collapsed stacks.
VIEWER_113 = r"""
import pickle, sys
from torch.cuda import _memory_viz as v
snap = pickle.load(open(sys.argv[1], "rb"))
lines = v.segments(snap["segments"], format_flamegraph=lambda text: text)
print("segments:", len(lines.splitlines()), "lines")
print(lines.splitlines()[0])
lines = v.memory(snap["segments"], format_flamegraph=lambda text: text)
print("memory:", len(lines.splitlines()), "lines")
"""


def torch_mode(exe):
    py = torch_python()
    if not py:
        print("skipped: no python here imports torch.cuda._memory_viz")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="cucache-snap-") as d:
        p, j, _ = run_fixture(exe, d)
        snap = check_paths(p, j)
        nsegs = len(snap["segments"])
        states = {b["state"]: 0 for s in snap["segments"] for b in s["blocks"]}
        for s in snap["segments"]:
            for b in s["blocks"]:
                states[b["state"]] += b["size"]
        total = sum(s["total_size"] for s in snap["segments"])
        probe = subprocess.run([py, "-c", "import torch, torch.cuda._memory_viz as v; "
                                "print(torch.__version__, hasattr(v, 'segsum'), hasattr(v, 'trace'))"],
                               capture_output=True, text=True)
        version, has_segsum, has_trace = probe.stdout.split()
        print(f"torch {version}")
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
        runs = []
        if has_segsum == "True":
            # torch >= 2.1: the viewer reads _snapshot()'s dict, our file as is
            runs.append(("stats", [py, "-m", "torch.cuda._memory_viz", "stats", p]))
            if has_trace == "True":
                runs.append(("trace", [py, "-m", "torch.cuda._memory_viz", "trace", p]))
        else:
            # torch 1.13: the viewer reads memory_snapshot()'s list of segments
            seglist = os.path.join(d, "segments.pickle")
            with open(seglist, "wb") as f:
                pickle.dump(load_pickle(open(p, "rb").read())["segments"], f, protocol=2)
            runs.append(("stats", [py, "-m", "torch.cuda._memory_viz", "stats", seglist]))
            runs.append(("segments/memory", [py, "-c", VIEWER_113, p]))
        for name, cmd in runs:
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
            print(f"$ python3 -m torch.cuda._memory_viz stats {os.path.basename(cmd[-1])}" if name == "stats"
                  else f"$ _memory_viz.segments() and .memory() on {os.path.basename(p)}")
            print(r.stdout.rstrip())
            if r.returncode != 0:
                raise CheckError(f"viewer {name} exited {r.returncode}: {r.stderr.strip()[-2000:]}")
            out = r.stdout
            if name == "stats" and has_segsum != "True":
                for want_text in (f"'segments': {nsegs}", f"'total_size': {fmt_bytes(total)}"):
                    if want_text not in out:
                        raise CheckError(f"viewer stats: {want_text!r} not in its output")
                for state, size in states.items():
                    if f"'{state}': {fmt_bytes(size)}" not in out:
                        raise CheckError(f"viewer stats: {state} {fmt_bytes(size)} not in its output")
            elif name == "stats":
                if "reserved" not in out.lower():
                    raise CheckError("viewer stats: no total reserved in its output")
            elif name == "trace":
                if "entries" not in out or "OutOfMemoryError" not in out:
                    raise CheckError("viewer trace: no entry count or OutOfMemoryError line in its output")
            else:
                if "segments:" not in out or "stream_" not in out:
                    raise CheckError("viewer segments: no collapsed stacks in its output")
    print("ok: PyTorch's viewer reads the snapshot")
    return 0


def fmt_bytes(n):
    """torch.cuda._memory_viz.Bytes's repr."""
    for unit in ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"]:
        if abs(n) < 1024.0:
            return f"{n:3.1f}{unit}B"
        n /= 1024.0
    return f"{n:.1f}YiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="FILE.pickle FILE.json")
    ap.add_argument("--fixture", help="the snap_write program")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--large", type=int, metavar="N", help="the fixture with N trace events")
    args = ap.parse_args()
    try:
        if args.torch or args.self_test:
            if not args.fixture:
                ap.error("--torch and --self-test need --fixture")
            return torch_mode(args.fixture) if args.torch else self_test(args.fixture) or 0
        if args.large:
            if not args.fixture:
                ap.error("--large needs --fixture")
            large_mode(args.fixture, args.large)
            return 0
        if args.fixture:
            fixture_mode(args.fixture)
            return 0
        if len(args.files) != 2:
            ap.error("give FILE.pickle FILE.json, or --fixture SNAP_WRITE")
        snap = check_paths(*args.files)
        print(f"ok: {len(snap['segments'])} segments; json equals pickle")
        return 0
    except CheckError as e:
        print(f"check_snapshot: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
