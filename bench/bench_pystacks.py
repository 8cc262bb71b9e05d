#!/usr/bin/env python3
"""What recording call stacks costs a Python program per allocation:
cudaMalloc+cudaFree pairs through ctypes into the simulated runtime, under
libcucache.so, with CUCACHE_STACKS off, native, python and python+native,
each in its own process, in alternating rounds; the median over the
rounds of ns per pair.  The allocating call is DEPTH Python frames deep.
Once with the GIL held by nobody else (the ctypes call releases it; the
capture takes it back at once) and once with a second thread running
Python (the capture waits for it: up to the switch interval).

Usage: bench_pystacks.py LIBCUCACHE SIM_LIBDIR [-n PAIRS] [-r ROUNDS] [-d DEPTH]
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import threading
import time


def child(pairs, depth, busy):
    rt = ctypes.CDLL("libcudart.so.13")
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    p = ctypes.c_void_p()

    def loop(n):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            rt.cudaMalloc(ctypes.byref(p), 4096)
            rt.cudaFree(p)
        return time.perf_counter_ns() - t0

    def nest(k, n):
        return loop(n) if k <= 1 else nest(k - 1, n)

    stop = False

    def spin():
        while not stop:
            pass

    t = threading.Thread(target=spin) if busy else None
    if t:
        t.start()
    nest(depth, pairs // 10)  # warm: the stacks interned, the cache filled
    ns = nest(depth, pairs)
    stop = True
    if t:
        t.join()
    print(ns / pairs)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1")
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("simdir")
    ap.add_argument("-n", type=int, default=200000)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-d", type=int, default=8)
    a = ap.parse_args()
    modes = ["off", "native", "python", "python+native"]
    for busy in (False, True):
        n = a.n // 20 if busy else a.n
        got = {m: [] for m in modes}
        for _ in range(a.r):
            for m in modes:
                env = dict(os.environ, LD_PRELOAD=os.path.abspath(a.lib), LD_LIBRARY_PATH=os.path.abspath(a.simdir),
                           CUCACHE_STACKS=m, CUCACHE_SIM_ALLOC_US="0", CUCACHE_SIM_FREE_US="0")
                out = subprocess.run([sys.executable, __file__, "--child", str(n), str(a.d), "1" if busy else "0"],
                                     env=env, capture_output=True, text=True, check=True).stdout
                got[m].append(float(out))
        print(f"{'a second thread running Python' if busy else 'one thread'}, {sys.version.split()[0]}, "
              f"{a.d} Python frames deep, ns per pair, median of {a.r}:")
        base = statistics.median(got["off"])
        for m in modes:
            med = statistics.median(got[m])
            print(f"  {m:14s} {med:10.0f}  (+{med - base:.0f})")


if __name__ == "__main__":
    main()
