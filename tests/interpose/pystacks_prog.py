"""A Python program with known allocation sites, for CUCACHE_STACKS=python
and python+native (check_pystacks.py).  Each site's line carries a
"SITE:name" marker.  It frees nothing, and asks for more than the device
has once, so that the OOM report, the leak check and the snapshot taken at
the failure all list its live allocations.

Usage: pystacks_prog.py numba|ctypes
  numba:  numba's device arrays (numba calls the driver through ctypes,
          without the GIL)
  ctypes: cudaMalloc through ctypes on the main thread, and on a second
          thread while the main thread keeps running Python (the second
          thread's call releases the GIL; cucache must take it to read the
          frames, and must not wait for ever)
"""
import ctypes
import sys
import threading


def numba_run():
    import numpy as np
    from numba import cuda

    def load_weights():
        return [cuda.device_array(64 << 20, dtype=np.uint8) for _ in range(2)]  # SITE:weights

    def grow_cache(n):
        return cuda.device_array(n, dtype=np.uint8)  # SITE:cache

    weights = load_weights()  # SITE:main-weights
    cache = [grow_cache(8 << 20) for _ in range(3)]
    try:
        cuda.device_array(4 << 30, dtype=np.uint8)  # SITE:oom
    except Exception as e:  # numba's CudaAPIError
        print("forward(4 GiB): failed:", type(e).__name__)
    return weights, cache


rt = None


def alloc(n):
    p = ctypes.c_void_p()
    rc = rt.cudaMalloc(ctypes.byref(p), n)  # SITE:alloc
    if rc != 0:
        raise MemoryError(f"cudaMalloc({n}): error {rc}")
    return p


def load_weights():
    return [alloc(64 << 20) for _ in range(2)]  # SITE:ct-weights


def worker(out, go):
    go.wait()  # until the main thread runs Python
    out.append(alloc(3 << 20))  # SITE:thread


def ctypes_run():
    global rt
    rt = ctypes.CDLL("libcudart.so.13")
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    weights = load_weights()  # SITE:ct-main
    out, go = [], threading.Event()
    t = threading.Thread(target=worker, args=(out, go))
    spins = 0
    t.start()
    go.set()  # the main thread keeps the GIL until its switch interval ends
    while t.is_alive():  # Python on the main thread meanwhile, holding the GIL between switches
        spins += 1
    t.join()
    try:
        alloc(4 << 30)  # SITE:ct-oom
    except MemoryError as e:
        print("forward(4 GiB): failed:", e)
    print("thread done:", len(out), "main thread spun", "yes" if spins else "no")
    return weights, out


if __name__ == "__main__":
    kept = numba_run() if sys.argv[1] == "numba" else ctypes_run()
