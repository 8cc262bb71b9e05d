"""Writes the seed corpus of tests/stats/fuzz_trace.c into
tests/stats/fuzz_trace_corpus/: a valid trace of two threads' chunks (TSC
clock), the same cut inside its second chunk, one with the nanosecond
clock, and an empty one (the header only).  Run from the repository root:
python3 tests/stats/fuzz_trace_seeds.py"""
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_trace_corpus")


def header(tsc):
    return struct.pack("<8sHHHHQQQII16s", b"CUCTRACE", 1, 64, 32, 40, 3000, 1000, 0, 7, 1 if tsc else 0, b"")


def chunk(tid, recs, ticks, ns):
    out = struct.pack("<IIIIQQ", 0x4B4E4843, len(recs), tid, 0, ticks, ns)
    for kind, api, t, stream, addr, size in recs:
        out += struct.pack("<BBhIQQQQ", kind, api, 0, 0, t, stream, addr, size)
    return out


def main():
    os.makedirs(HERE, exist_ok=True)
    a = [(1, 1, 3100, 0, 0x7f0000000000, 512), (3, 1, 3300, 0, 0x7f0000000000, 0), (5, 0, 3400, 0, 0, 0)]
    b = [(7, 0, 3200, 0x55, 0, 1), (1, 2, 3250, 0x55, 0x7f0000200000, 4096), (3, 2, 3500, 0x55, 0x7f0000200000, 0),
         (4, 0, 3600, 0x55, 0, 0), (8, 0, 3700, 0x55, 0, 0), (2, 1, 3800, 0, 2, 1 << 40)]
    full = header(True) + chunk(1, a, 4000, 1400) + chunk(2, b, 4100, 1450)
    files = {
        "two_threads": full,
        "cut": full[:64 + 32 + 3 * 40 + 32 + 2 * 40 + 17],
        "ns_clock": header(False) + chunk(1, [(r[0], r[1], r[2] - 2000, r[3], r[4], r[5]) for r in a], 2500, 2500),
        "header_only": header(True),
    }
    for name, data in files.items():
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
