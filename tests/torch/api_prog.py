"""cucache.torch's statistics under real PyTorch (check_torch.py, cases
api-preload, api-pluggable and leak): run under cucache-run.

    api_prog.py api ROUTE     ROUTE: preload (PyTorch's cache off) or pluggable
    api_prog.py leak ROUTE [--leak]

api: allocates tensors of known sizes and checks cucache.torch's figures
against the sum of their sizes rounded as cucache rounds (multiples of
512 bytes), against cucache's own statistics (what its report prints),
and against PyTorch's own calls (the key set of torch.cuda.memory_stats();
after install_torch_stats(), every figure and the summary table).
leak: a GEMM (PyTorch's cuBLAS workspace, kept for the life of the
process) and, with --leak, 3 MiB from cudaMalloc never freed; the leak
check at exit is what the caller reads.  Prints one JSON line; exits 1
with "FAIL: ..." on the first check that does not hold.
"""
import ctypes
import json
import sys

import torch

import cucache
import cucache.torch as ct

MiB = 1 << 20


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", flush=True)
        sys.exit(1)


def rounded(n):
    return max(512, (n + 511) // 512 * 512)


def api(route):
    # the figures before anything was allocated: PyTorch's zeros
    z = ct.memory_stats()
    check(z["allocated_bytes.all.current"] == 0 and z["max_split_size"] == -1, f"before any allocation: {dict(z)}")
    warm = torch.empty(1, device="cuda")  # the device's first allocation
    base = ct.memory_allocated()
    sizes = [1, 1000, 4096, 333_333, 2 * MiB + 1, 8 * MiB]  # small and large pools
    tensors = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in sizes]
    want = sum(rounded(n) for n in sizes)
    got = ct.memory_allocated() - base
    check(got == want, f"memory_allocated grew by {got}, the tensors rounded to 512 bytes are {want}")
    s = ct.memory_stats()
    own = cucache.memory_stats(0)
    for k, v in s.items():
        check(own[k] == v, f"{k}: cucache.torch says {v}, cucache's statistics {own[k]}")
    check(list(s) == sorted(s), "memory_stats() keys are not sorted as PyTorch sorts them")
    small = sum(rounded(n) for n in sizes if rounded(n) <= MiB)
    check(s["allocated_bytes.small_pool.current"] >= small, f"small pool {s['allocated_bytes.small_pool.current']} < {small}")
    check(ct.memory_reserved() >= ct.memory_allocated() > 0, "reserved below allocated")
    peak = ct.max_memory_allocated()
    del tensors
    check(ct.memory_allocated() == base, f"after del: {ct.memory_allocated()} allocated, {base} before")
    check(ct.max_memory_allocated() == peak >= base + want, "the peak moved with the free")
    ct.reset_peak_memory_stats()
    check(ct.max_memory_allocated() == ct.memory_allocated(), "reset_peak_memory_stats left the peak")
    check(ct.max_memory_reserved() == ct.memory_reserved(), "reset_peak_memory_stats left the reserved peak")
    text = ct.memory_summary()
    lines = text.splitlines()
    check(all(len(l) == 77 for l in lines) and "cucache CUDA memory summary, device ID 0" in text,
          f"memory_summary's layout:\n{text}")
    out = {"route": route, "allocated": ct.memory_allocated(), "summary_lines": len(lines)}

    if route == "preload":
        # PyTorch's own allocator (its cache off) answers with its zeros:
        # the same keys
        mine, theirs = set(s), set(torch.cuda.memory_stats())
        check(mine == theirs, f"keys only cucache has: {sorted(mine - theirs)}; only PyTorch: {sorted(theirs - mine)}")
        check(torch.cuda.memory_allocated() == 0, "PyTorch counted with its cache off")
    else:
        # enable(torch_stats=False) left PyTorch's binding as it is: it raises
        try:
            torch.cuda.memory_allocated()
            check(False, "torch.cuda.memory_allocated() answered under the pluggable allocator by itself")
        except RuntimeError as e:
            check("getDeviceStats" in str(e), f"PyTorch's error: {e}")
            out["torch_error"] = str(e).split(".")[0]
    ct.install_torch_stats()
    check(set(torch.cuda.memory_stats()) == set(s), "torch.cuda.memory_stats()'s keys after install")
    x = torch.empty(5 * MiB, dtype=torch.uint8, device="cuda")
    check(torch.cuda.memory_allocated() == ct.memory_allocated() == base + rounded(5 * MiB),
          f"torch.cuda.memory_allocated() {torch.cuda.memory_allocated()}, cucache.torch {ct.memory_allocated()}")
    check(torch.cuda.max_memory_reserved() == ct.max_memory_reserved(), "max_memory_reserved differs")
    del x
    torch.cuda.reset_peak_memory_stats()
    check(ct.max_memory_allocated() == ct.memory_allocated(), "torch.cuda.reset_peak_memory_stats did not reach cucache")
    theirs = torch.cuda.memory_summary()
    check(theirs == ct.memory_summary().replace("cucache CUDA memory summary", "PyTorch CUDA memory summary"),
          f"the tables differ:\n{theirs}\n{ct.memory_summary()}")
    check(ct.memory_summary(abbreviated=True) != text, "abbreviated summary is the full one")
    for bad in (99, "cpu", 1.5):
        try:
            ct.memory_allocated(bad)
            check(False, f"device={bad!r} accepted")
        except ValueError as e:
            check("device=" in str(e), f"device={bad!r}: {e}")
    del warm
    print(json.dumps(out), flush=True)


def leak(leaky):
    a = torch.randn(256, 512, device="cuda")
    y = a @ a.t()  # cuBLAS: PyTorch makes a handle and its workspace
    torch.cuda.synchronize()
    del a, y
    if leaky:
        rt = ctypes.CDLL("libcudart.so.12")
        rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        p = ctypes.c_void_p()
        check(rt.cudaMalloc(ctypes.byref(p), 3 * MiB) == 0, "cudaMalloc of 3 MiB")
    print(json.dumps({"leak": leaky}), flush=True)


def main():
    what, route = sys.argv[1], sys.argv[2]
    torch.backends.cudnn.enabled = False
    if route == "pluggable":
        ct.enable(torch_stats=False)
    if what == "api":
        api(route)
    else:
        leak("--leak" in sys.argv)


if __name__ == "__main__":
    main()
