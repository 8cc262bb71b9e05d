#!/usr/bin/env python3
"""cucache-replay's refusals of its options.

Usage: check_options.py CUCACHE_REPLAY

For each option that takes a value (--capacity, --fit, --conf, --plot) and
for an unknown option and a trace's name: a bad value is refused naming the
option (--conf's also names CUCACHE_CONF, whose syntax it is), and a
hostile value (tests/hostile.h's bytes: escape sequences, control bytes,
invalid UTF-8, 10 KB) is shown bounded, with its control and non-ASCII
bytes escaped and its whole length (core/conf.h, conf_show), never echoed.
Seen to fail with main.c printing the unknown option raw, and with
stats/file.c's write errors printing the --plot path whole.
"""
import os
import pickle
import subprocess
import sys
import tempfile

from rptest import check, failures

REPLAY = sys.argv[1]
HEAD = b"\x1b[2J\x1b]0;owned\x07\r\t\x01\x7f\xff\xfe\xc3(\xe2\x80\xae"
HOSTILE = HEAD + b"A" * (10240 - len(HEAD))


def run(*args):
    p = subprocess.run([REPLAY, *args], capture_output=True, timeout=120)
    check(p.returncode >= 0, f"{args[:3]}: died of signal {-p.returncode}")
    return p


def safe(err, what, length):
    """The refusal is bounded, holds no raw byte and gives the length."""
    check(len(err) < 1024, f"{what}: {len(err)} bytes of refusal: the value was echoed whole")
    raw = [b for b in err if (b < 0x20 and b != 0x0A) or b > 0x7E]
    check(not raw, f"{what}: raw bytes {raw[:8]} in the refusal: {err[:300]!r}")
    check(f"({length} bytes)".encode() in err, f"{what}: the value's length {length} is not given: {err[:300]!r}")


with tempfile.TemporaryDirectory() as tmp:
    made = os.path.join(tmp, "made.pickle")
    with open(made, "wb") as f:
        pickle.dump({"device_traces": [[{"action": "alloc", "addr": 4096, "size": 512, "stream": 0,
                                         "time_us": 1, "frames": []}]], "segments": []}, f, protocol=4)
    # option, a bad value, what the refusal names
    rows = [
        (b"--capacity", b"lots", [b"--capacity"]),
        (b"--fit", b"12Q", [b"--fit"]),
        (b"--conf", b"bogus_key:1", [b"--conf", b"CUCACHE_CONF"]),
        (b"--plot", os.fsencode(tmp) + b"/no-such-dir/p.svg", [b"--plot"]),
    ]
    for opt, bad, names in rows:
        for value in (bad, HOSTILE):
            p = run(opt, value, made)
            what = f"{opt.decode()} {'<hostile>' if value is HOSTILE else bad.decode()}"
            check(p.returncode in (1, 2), f"{what}: exit {p.returncode}, expected a refusal")
            for n in names:
                check(n in p.stderr, f"{what}: {n.decode()} not named: {p.stderr[:300]!r}")
            if value is HOSTILE:
                # --plot's path is shown where it is refused, and again in the write error
                safe(p.stderr, what, len(value))
    p = run(b"--" + HOSTILE, made)
    check(p.returncode == 2 and b"unknown option" in p.stderr, f"unknown hostile option: exit {p.returncode}")
    safe(p.stderr, "unknown option", len(HOSTILE) + 2)
    p = run(HOSTILE)
    check(p.returncode == 1, f"a hostile trace name: exit {p.returncode}")
    safe(p.stderr, "trace name", len(HOSTILE))
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
