#!/usr/bin/env python3
"""Synthetic cucache traces (docs/trace-format.md, version 1) for the
multi-stream patterns that real PyTorch traces lack.  Deterministic: the
same arguments write the same bytes.

Usage: gen_trace.py --pattern NAME --seed N --events N -o OUT [--expect OUT.json]
                    [--truncate BYTES] [--corrupt OFFSET:HEXBYTE]

Patterns:
  churn    one thread, cudaMalloc/cudaFree of log-uniform sizes (512 B to
           64 MiB, with repeats of common sizes), up to 200 live, device
           synchronisations now and then
  streams  four non-blocking streams created on device 0; cudaMallocAsync/
           cudaFreeAsync on them, a third of the frees on another stream
           than the allocation's; some cudaMalloc/cudaFree; stream syncs;
           the streams destroyed at the end
  threads  three threads with a stream each, interleaved; a quarter of the
           frees made by another thread than the allocating one
  devices  two devices; allocations on both, frees of either device's
           pointers from either
  capture  normal traffic around a capture window on thread 1's stream in
           which that thread calls cudaMalloc (graph memory: never freed)
  mixed    all of the above, interleaved in blocks of about a tenth of the
           events (each part at least once), ending with a capture window

--events is a target: stream creation, the frees at the end (everything
still live but graph memory) and stream destruction come on top.  Addresses
come from a bump pointer per device (0x7f0000000000 + device << 40,
512-aligned, never reused); every free names a live address.  Events are
1000 ns apart (flags 0: ticks are nanoseconds), so the reader's order (time,
thread, position) is the order generated; each thread's events go in chunks
of 64 records, chunks in the order of their first record.

--expect writes what a replay must find, as JSON: events (records), allocs,
frees, peak_requested (the highest sum of live requested bytes over all
devices, after each event), peak_requested_per_device ({"0": ...}),
live_at_end (bytes: the graph memory), streams (distinct non-zero handles),
threads, devices.  It describes the whole trace: --truncate K keeps the
first K bytes (a crashed recorder), --corrupt OFFSET:HEXBYTE sets one byte
(error tests); both apply to the file only.
"""
import argparse
import json
import random
import struct

ALLOC, ALLOC_FAIL, FREE, STREAM_SYNC, DEVICE_SYNC, EVENT_SYNC = 1, 2, 3, 4, 5, 6
STREAM_CREATE, STREAM_DESTROY, CAPTURE_BEGIN, CAPTURE_END = 7, 8, 9, 10
API_MALLOC, API_ASYNC = 1, 2
CHUNK_RECORDS = 64


class Gen:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.events = []      # (tid, kind, api, device, stream, addr, size)
        self.live = {}        # addr -> (device, size, stream, api, tid)
        self.next_addr = {}   # device -> bump pointer
        self.streams = set()
        self.pinned = set()   # graph memory: never freed

    def size(self):
        r = self.rng
        if r.random() < 0.25:
            return r.choice([4096, 1 << 20, 3 << 20, 12 << 20, 25 << 20])
        return int(2 ** r.uniform(9, 26))

    def emit(self, tid, kind, api=0, device=0, stream=0, addr=0, size=0):
        self.events.append((tid, kind, api, device, stream, addr, size))

    def alloc(self, tid, device, stream=0, api=API_MALLOC, size=None):
        size = self.size() if size is None else size
        base = self.next_addr.get(device, 0x7F0000000000 + (device << 40))
        self.next_addr[device] = base + ((size + 511) // 512) * 512 + 512
        self.live[base] = (device, size, stream, api, tid)
        if stream:
            self.streams.add(stream)
        self.emit(tid, ALLOC, api, device, stream, base, size)
        return base

    def free(self, tid, addr, stream=None, device=None):
        dev, size, st, api, _ = self.live.pop(addr)
        stream = st if stream is None else stream
        self.emit(tid, FREE, api, dev if device is None else device, stream if api == API_ASYNC else 0, addr)

    def pick_live(self, pred=lambda a, v: True):
        cands = [a for a, v in self.live.items() if a not in self.pinned and pred(a, v)]
        return self.rng.choice(sorted(cands)) if cands else None


def churn(g, n, tid=1, device=0):
    for _ in range(n):
        r = g.rng.random()
        if r < 0.02:
            g.emit(tid, DEVICE_SYNC, device=device)
        elif (r < 0.52 and len(g.live) < 200) or not g.live:
            g.alloc(tid, device)
        else:
            a = g.pick_live(lambda a, v: v[0] == device and v[3] == API_MALLOC)
            if a is None:
                g.alloc(tid, device)
            else:
                g.free(tid, a)


def streams(g, n, handles, tid=1, device=0):
    for h in handles:
        if h not in g.streams:
            g.emit(tid, STREAM_CREATE, device=device, stream=h, size=1)
            g.streams.add(h)
    for _ in range(n):
        r = g.rng.random()
        if r < 0.03:
            g.emit(tid, STREAM_SYNC, device=device, stream=g.rng.choice(handles))
        elif r < 0.10:
            if len(g.live) < 300:
                g.alloc(tid, device)
            else:
                a = g.pick_live(lambda a, v: v[3] == API_MALLOC and v[0] == device)
                g.free(tid, a) if a else g.alloc(tid, device)
        elif (r < 0.55 and len(g.live) < 300) or not g.live:
            g.alloc(tid, device, g.rng.choice(handles), API_ASYNC)
        else:
            a = g.pick_live(lambda a, v: v[0] == device)
            if a is None:
                g.alloc(tid, device, g.rng.choice(handles), API_ASYNC)
                continue
            st = g.live[a][2]
            if g.live[a][3] == API_ASYNC and g.rng.random() < 0.33:
                st = g.rng.choice(handles)  # freed on another stream
            g.free(tid, a, stream=st)


def threads(g, n, tids=(1, 2, 3), device=0):
    handles = {t: 0x5000 + 0x100 * t for t in tids}
    for t in tids:
        if handles[t] not in g.streams:  # mixed calls this again: create once
            g.emit(t, STREAM_CREATE, device=device, stream=handles[t], size=1)
            g.streams.add(handles[t])
    for _ in range(n):
        t = g.rng.choice(tids)
        r = g.rng.random()
        if (r < 0.5 and len(g.live) < 240) or not g.live:
            g.alloc(t, device, handles[t], API_ASYNC)
        elif r < 0.97:
            a = g.pick_live(lambda a, v: v[0] == device)
            if a is None:
                continue
            owner = g.live[a][4]
            by = t if g.rng.random() < 0.75 else g.rng.choice(tids)
            g.free(by, a, stream=handles[by] if by != owner else None)
        else:
            g.emit(t, STREAM_SYNC, device=device, stream=handles[t])


def devices(g, n, tid=1):
    for _ in range(n):
        d = g.rng.randrange(2)
        r = g.rng.random()
        if r < 0.02:
            g.emit(tid, DEVICE_SYNC, device=d)
        elif (r < 0.52 and len(g.live) < 200) or not g.live:
            g.alloc(tid, d)
        else:
            a = g.pick_live(lambda a, v: v[3] == API_MALLOC)
            if a is None:
                g.alloc(tid, d)
            else:
                g.free(tid, a, device=d)  # sometimes from the other device


def capture(g, n, tid=1, device=0):
    s = 0x9000
    g.emit(tid, STREAM_CREATE, device=device, stream=s, size=1)
    g.streams.add(s)
    churn(g, n // 3, tid, device)
    g.emit(tid, CAPTURE_BEGIN, device=device, stream=s, size=2)
    for _ in range(4):
        g.pinned.add(g.alloc(tid, device))
    g.emit(tid, CAPTURE_END, device=device, stream=s)
    churn(g, n - n // 3 - 6, tid, device)


def mixed(g, n):
    per = max(n // 10, 1)
    parts = [lambda k: churn(g, k), lambda k: streams(g, k, [0x1000, 0x1100, 0x1200, 0x1300]),
             lambda k: threads(g, k), lambda k: devices(g, k)]
    unused = list(parts)
    done = 0
    while done < n - 20:
        k = min(per, n - 20 - done)
        part = g.rng.choice(parts)
        # every part at least once: when the blocks left are as many as the
        # parts not yet used, take one of those (the draw above still happens,
        # so seeds that use every part anyway give the same trace as before)
        if part not in unused and len(unused) >= -(-(n - 20 - done) // per):
            part = unused[0]
        if part in unused:
            unused.remove(part)
        part(k)
        done += k
    capture(g, 20)


def finish(g, pattern):
    for a in sorted(g.live):
        if a in g.pinned:
            continue
        g.free(g.live[a][4], a)
    if pattern in ("streams", "mixed"):
        for h in (0x1000, 0x1100, 0x1200, 0x1300):
            if h in g.streams:
                g.emit(1, STREAM_DESTROY, stream=h)


def write(g, path):
    """Header, then each thread's events in chunks, chunks in order of their first record's time."""
    t0 = 1_000_000
    per_tid = {}
    for i, (tid, kind, api, dev, stream, addr, size) in enumerate(g.events):
        rec = struct.pack("<BBhIQQQQ", kind, api, dev, 0, t0 + 1000 * (i + 1), stream, addr, size)
        per_tid.setdefault(tid, []).append((i, rec))
    chunks = []
    for tid, recs in per_tid.items():
        for k in range(0, len(recs), CHUNK_RECORDS):
            part = recs[k:k + CHUNK_RECORDS]
            last_ns = t0 + 1000 * (part[-1][0] + 1)
            hdr = struct.pack("<IIIIQQ", 0x4B4E4843, len(part), tid, 0, last_ns, last_ns)
            chunks.append((part[0][0], hdr + b"".join(r for _, r in part)))
    chunks.sort()
    header = struct.pack("<8sHHHHQQQII16s", b"CUCTRACE", 1, 64, 32, 40, t0, t0, 1_700_000_000 * 10**9, 4242, 0,
                         b"\0" * 16)
    with open(path, "wb") as f:
        f.write(header + b"".join(c for _, c in chunks))


def expect(g):
    live, cur, peak, per_dev, cur_dev = {}, 0, 0, {}, {}
    allocs = frees = 0
    for tid, kind, api, dev, stream, addr, size in g.events:
        if kind == ALLOC:
            allocs += 1
            live[addr] = (dev, size)
            cur += size
            cur_dev[dev] = cur_dev.get(dev, 0) + size
            per_dev[dev] = max(per_dev.get(dev, 0), cur_dev[dev])
        elif kind == FREE:
            frees += 1
            d, size = live.pop(addr)
            cur -= size
            cur_dev[d] -= size
        peak = max(peak, cur)
    return {"events": len(g.events), "allocs": allocs, "frees": frees, "peak_requested": peak,
            "peak_requested_per_device": {str(d): v for d, v in sorted(per_dev.items())}, "live_at_end": cur,
            "streams": len(g.streams), "threads": len({e[0] for e in g.events}),
            "devices": 1 + max(e[3] for e in g.events)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pattern", required=True, choices=["churn", "streams", "threads", "devices", "capture", "mixed"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--expect")
    ap.add_argument("--truncate", type=int)
    ap.add_argument("--corrupt")
    a = ap.parse_args()
    g = Gen(a.seed)
    n = max(a.events, 30)
    {"churn": lambda: churn(g, n), "streams": lambda: streams(g, n, [0x1000, 0x1100, 0x1200, 0x1300]),
     "threads": lambda: threads(g, n), "devices": lambda: devices(g, n), "capture": lambda: capture(g, n),
     "mixed": lambda: mixed(g, n)}[a.pattern]()
    finish(g, a.pattern)
    write(g, a.output)
    if a.truncate is not None or a.corrupt:
        data = bytearray(open(a.output, "rb").read())
        if a.corrupt:
            off, byte = a.corrupt.split(":")
            if not 0 <= int(off, 0) < len(data):
                ap.error(f"--corrupt: offset {off} outside the {len(data)}-byte file")
            data[int(off, 0)] = int(byte, 16)
        if a.truncate is not None:
            data = data[:a.truncate]
        open(a.output, "wb").write(data)
    if a.expect:
        with open(a.expect, "w") as f:
            json.dump(expect(g), f, indent=1)


if __name__ == "__main__":
    main()
