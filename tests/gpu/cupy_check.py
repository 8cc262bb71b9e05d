#!/usr/bin/env python3
"""Array arithmetic with CuPy's memory pool off, checked against NumPy
(scripts/gpu-check runs it plain and under cucache-run).

cupy.cuda.set_allocator(None) makes CuPy call cudaMalloc/cudaFree for every
array, so under cucache every temporary below comes from cucache's cache.
Integer results are compared exactly; float64 results exactly where the
operation is exact (elementwise integer-valued arithmetic) and with a
tolerance for reductions and matrix products, whose summation order
differs from NumPy's.  Work on a non-blocking stream is included: arrays
are freed while kernels queued on it may still read them.

Prints one line per kind of check and "cupy_check: RESULT PASS|FAIL";
exit status 1 on any mismatch.  With --expect-cucache, also 1 unless
cucache is loaded (ctypes.CDLL(None)) and had cache hits.
"""
import argparse
import ctypes
import sys
import time

import numpy as np
import cupy as cp


def cucache_counters():
    """cucache's counters of device 0 as a dict, or None without cucache."""
    try:
        stat = ctypes.CDLL(None).cucache_stat
    except (OSError, AttributeError):
        return None
    stat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64)]
    stat.restype = ctypes.c_int
    out = {}
    for key in ("num_cache_hits", "num_device_alloc", "num_device_free", "num_fences", "num_fence_waits"):
        v = ctypes.c_int64(-1)
        out[key] = v.value if stat(0, key.encode(), ctypes.byref(v)) == 0 else None
    return out


class Checks:
    def __init__(self):
        self.counts = {}
        self.failed = 0

    def expect(self, kind, ok, what):
        n, bad = self.counts.get(kind, (0, 0))
        self.counts[kind] = (n + 1, bad + (not ok))
        if not ok:
            self.failed += 1
            if self.failed <= 10:
                print(f"cupy_check: MISMATCH {kind}: {what}", flush=True)


def run(checks, rounds, seed):
    rng = np.random.default_rng(seed)
    sizes = [1, 7, 255, 256, 1000, 4097, 65536, 100003, 1 << 20, (1 << 20) + 5, 3 << 20]
    for r in range(rounds):
        for n in sizes:
            # exact: integer-valued float64 and int64 elementwise arithmetic
            a_h = np.arange(n, dtype=np.float64) + r
            a = cp.asarray(a_h)
            b = a * 3 + 1
            c = (b - a) * 2 - a
            checks.expect("elementwise-f64", np.array_equal(cp.asnumpy(c), (a_h * 3 + 1 - a_h) * 2 - a_h),
                          f"round {r}, n {n}")
            i_h = rng.integers(-1000, 1000, size=n, dtype=np.int64)
            i = cp.asarray(i_h)
            checks.expect("int64-sum", int(cp.sum(i * i + i)) == int(np.sum(i_h * i_h + i_h)), f"round {r}, n {n}")
            checks.expect("int64-cumsum", np.array_equal(cp.asnumpy(cp.cumsum(i)), np.cumsum(i_h)),
                          f"round {r}, n {n}")
            # sort and gather: data movement through several temporaries
            checks.expect("sort", np.array_equal(cp.asnumpy(cp.sort(i)), np.sort(i_h)), f"round {r}, n {n}")
            del a, b, c, i
        # one large array (128 MiB of float64) and its temporaries
        n = (16 << 20) + r
        big = cp.arange(n, dtype=cp.float64)
        big2 = big * 2 - 1
        wrong = int(cp.count_nonzero(big2 != cp.arange(n, dtype=cp.float64) * 2 - 1))
        checks.expect("elementwise-f64-128MiB", wrong == 0, f"round {r}, n {n}: {wrong} wrong")
        checks.expect("sum-f64-128MiB", float(cp.sum(big2)) == float(n) * (n - 1) - n, f"round {r}, n {n}")
        del big, big2
        # matrix products, float64 with a tolerance
        for m in (17, 256, 1000):
            x_h = rng.standard_normal((m, m))
            y_h = rng.standard_normal((m, m))
            z = cp.asarray(x_h) @ cp.asarray(y_h)
            checks.expect("matmul-f64", np.allclose(cp.asnumpy(z), x_h @ y_h, rtol=1e-10, atol=1e-9),
                          f"round {r}, {m}x{m}")
        # a non-blocking stream: temporaries freed while its kernels may
        # still be queued; the result is read after the stream is done
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            acc = cp.zeros(1 << 20, dtype=cp.int64)
            for k in range(50):
                t = cp.arange(1 << 20, dtype=cp.int64) * (k + 1)
                acc += t
                del t
            s.synchronize()
        want = np.arange(1 << 20, dtype=np.int64) * (50 * 51 // 2)
        checks.expect("nonblocking-stream", np.array_equal(cp.asnumpy(acc), want), f"round {r}")
        del acc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--expect-cucache", action="store_true")
    args = ap.parse_args()

    cp.cuda.set_allocator(None)
    dev = cp.cuda.Device(0)
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"cupy_check: CuPy {cp.__version__}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}, "
          f"{props['name'].decode() if isinstance(props['name'], bytes) else props['name']}; "
          f"allocator off (set_allocator(None)); seed {args.seed}", flush=True)
    checks = Checks()
    t0 = time.perf_counter()
    with dev:
        run(checks, args.rounds, args.seed)
        dev.synchronize()
    run_s = time.perf_counter() - t0
    for kind, (n, bad) in checks.counts.items():
        print(f"cupy_check: {kind}: {n - bad}/{n} right")
    print(f"run_s={run_s:.3f} ({args.rounds} rounds)")

    counters = cucache_counters()
    if counters is None:
        print("cucache: not loaded")
    else:
        print("cucache: " + " ".join(f"{k}={v}" for k, v in counters.items()))
    fail = checks.failed > 0
    if args.expect_cucache and (counters is None or not counters.get("num_cache_hits")):
        print("cupy_check: --expect-cucache, but cucache is not loaded or had no cache hits")
        fail = True
    print(f"cupy_check: RESULT {'FAIL' if fail else 'PASS'} ({checks.failed} mismatches)")
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
