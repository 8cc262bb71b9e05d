"""pytest tests of the cucache package, run in a Python process
under `cucache-run --sim` (tests/run/meson.build: run-python-pytest, with
the package installed by pip into a temporary directory first).  The
allocations go through the simulated CUDA runtime, loaded with ctypes.

    cucache-run --sim=1G python3 -m pytest python/tests

Without cucache in the process only test_absent runs (the others skip).
"""
import ctypes
import json
import os
import subprocess
import sys

import pytest

import cucache

MiB = 1 << 20
under_cucache = pytest.mark.skipif(not cucache.available(), reason="not run under cucache-run")


@pytest.fixture(scope="module")
def rt():
    lib = ctypes.CDLL("libcudart.so.13")
    lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.cudaFree.argtypes = [ctypes.c_void_p]
    return lib


def malloc(rt, n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0
    return p


MALLOC_LINE = malloc.__code__.co_firstlineno + 2


def test_absent():
    """Without cucache: available() is False, calls raise CucacheError."""
    code = ("import cucache, sys\n"
            "assert not cucache.available()\n"
            "try:\n    cucache.memory_stats(0)\n"
            "except cucache.CucacheError as e:\n    assert 'not loaded' in str(e), e\n"
            "else:\n    sys.exit('no error')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",)}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(cucache.__file__))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@under_cucache
def test_stats_follow_allocations(rt):
    first = malloc(rt, MiB)  # the device has allocator state from its first allocation
    base = cucache.memory_allocated(0)
    p = [malloc(rt, 4 * MiB) for _ in range(3)]
    s = cucache.memory_stats(0)
    assert s["allocated_bytes.all.current"] == base + 12 * MiB
    assert "num_ooms" in s and "max_split_size" in s
    assert cucache.memory_reserved(0) >= cucache.memory_allocated(0)
    for q in p:
        rt.cudaFree(q)
    assert cucache.memory_allocated(0) == base
    rt.cudaFree(first)


@under_cucache
def test_peaks_reset_and_empty_cache(rt):
    a = malloc(rt, 8 * MiB)
    rt.cudaFree(a)
    assert cucache.max_memory_allocated(0) >= 8 * MiB
    cucache.reset_peak_memory_stats(0)
    assert cucache.max_memory_allocated(0) == cucache.memory_allocated(0)
    cucache.empty_cache(0)
    assert cucache.memory_reserved(0) == cucache.memory_stats(0)["reserved_bytes.all.current"]


@under_cucache
def test_summary():
    text = cucache.memory_summary(0)
    assert "memory summary, device ID 0" in text


@under_cucache
def test_mempool_routes_allocations(rt, tmp_path):
    with cucache.MemPool(0) as pool:
        inside = malloc(rt, 3 * MiB)
    cucache.dump_snapshot(str(tmp_path / "pool.pickle"))
    snap = json.loads((tmp_path / "pool.json").read_text())
    pools = [tuple(s["segment_pool_id"]) for s in snap["segments"]
             if s["address"] <= inside.value < s["address"] + s["total_size"]]
    assert pools == [(0, pool.id)]
    rt.cudaFree(inside)
    pool.close()


@under_cucache
def test_record_memory_history(rt, tmp_path):
    cucache.record_memory_history("all", max_entries=500, stacks="all", depth=6)
    a = malloc(rt, 5 * MiB)
    rt.cudaFree(a)
    cucache.dump_snapshot(str(tmp_path / "on.pickle"))
    events = json.loads((tmp_path / "on.json").read_text())["device_traces"][0]
    mine = [e for e in events if e["action"] == "alloc" and e["addr"] == a.value]
    assert len(mine) == 1 and mine[0]["frames"]
    cucache.record_memory_history(None)
    b = malloc(rt, 7 * MiB)
    cucache.dump_snapshot(str(tmp_path / "off.pickle"))
    events = json.loads((tmp_path / "off.json").read_text())["device_traces"][0]
    assert not [e for e in events if e["action"] == "alloc" and e["addr"] == b.value and e["size"] >= 7 * MiB]
    rt.cudaFree(b)


@under_cucache
def test_record_memory_history_python_frames(rt, tmp_path):
    cucache.record_memory_history("all", max_entries=500, stacks="python", depth=8)
    a = malloc(rt, 5 * MiB)  # the line the frame must name
    line = sys._getframe().f_lineno - 1
    cucache.dump_snapshot(str(tmp_path / "py.pickle"))
    cucache.record_memory_history(None)
    rt.cudaFree(a)
    events = json.loads((tmp_path / "py.json").read_text())["device_traces"][0]
    mine = [e for e in events if e["action"] == "alloc" and e["addr"] == a.value]
    frames = mine[-1]["frames"]  # the ring keeps earlier tests' events at this address too
    assert frames[0] == {"name": "malloc", "filename": __file__, "line": MALLOC_LINE}
    assert frames[1] == {"name": "test_record_memory_history_python_frames", "filename": __file__, "line": line}


@pytest.mark.parametrize("bad", [{"stacks": "pyton"}, {"enabled": "yes"}, {"max_entries": 0}, {"depth": 65}])
def test_record_memory_history_bad_arguments(bad):
    with pytest.raises(ValueError):
        cucache.record_memory_history(**bad)


@under_cucache
def test_memory_fraction(rt):
    first = malloc(rt, MiB)
    cucache.set_per_process_memory_fraction(0.25, 0)  # 256 MiB of the 1 GiB device
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), 300 * MiB) != 0
    cucache.set_per_process_memory_fraction(1.0, 0)
    q = malloc(rt, 300 * MiB)
    rt.cudaFree(q)
    rt.cudaFree(first)
    with pytest.raises(ValueError):
        cucache.set_per_process_memory_fraction(0)


@under_cucache
def test_torch_entry_points():
    """cucache.torch finds the loaded library, whose file exports the two
    functions PyTorch's CUDAPluggableAllocator loads by name."""
    import cucache.torch

    path = cucache.torch.library_path()
    assert "libcucache.so" in os.path.basename(path)
    lib = ctypes.CDLL(path)
    assert lib.cucache_torch_malloc and lib.cucache_torch_free


@under_cucache
def test_torch_enable_sets_every_hook(monkeypatch):
    """enable() hands PyTorch's binding the address of cucache's entry point
    for each hook the binding has, then makes the allocator current.  A
    stand-in for torch records the calls (no PyTorch here); the addresses
    are checked against the library's own symbols."""
    import sys
    import types

    import cucache.torch

    calls = []

    class Hooks:
        pass

    for setter, _ in cucache.torch.HOOKS:
        setattr(Hooks, setter, lambda self, address, _s=setter: calls.append((_s, address)))

    class Pluggable:
        def __init__(self, path, alloc_fn, free_fn):
            calls.append(("new", path, alloc_fn, free_fn))
            self._allocator = Hooks()

    memory = types.SimpleNamespace(CUDAPluggableAllocator=Pluggable,
                                   change_current_allocator=lambda a: calls.append(("current", a)))
    fake = types.ModuleType("torch")
    fake.cuda = types.SimpleNamespace(memory=memory)
    fake._C = types.SimpleNamespace()  # the binding whose stats entry points enable() replaces
    monkeypatch.setitem(sys.modules, "torch", fake)

    alloc = cucache.torch.enable()
    for name in ("_cuda_memoryStats", "_cuda_resetPeakMemoryStats", "_cuda_resetAccumulatedMemoryStats"):
        assert callable(getattr(fake._C, name)), name
    path = cucache.torch.library_path()
    lib = ctypes.CDLL(path)
    address = {sym: ctypes.cast(getattr(lib, sym), ctypes.c_void_p).value for _, sym in cucache.torch.HOOKS}
    assert calls[0] == ("new", path, "cucache_torch_malloc", "cucache_torch_free")
    assert calls[1:-1] == [(setter, address[sym]) for setter, sym in cucache.torch.HOOKS]
    assert calls[-1] == ("current", alloc)
    assert len(set(address.values())) == len(address)


def test_torch_enable():
    """With PyTorch and a GPU (scripts/gpu-check), tensors then come from
    cucache; skipped here otherwise."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not cucache.available():
        pytest.skip("needs PyTorch with CUDA, under cucache-run")
    import cucache.torch

    cucache.torch.enable()
    before = cucache.memory_allocated(torch.cuda.current_device()) if cucache.memory_stats(0) else 0
    x = torch.ones(1 << 20, device="cuda")
    assert cucache.memory_allocated(torch.cuda.current_device()) >= before + (4 << 20)
    assert float(x.sum()) == float(1 << 20)


@under_cucache
def test_unused_device_raises():
    with pytest.raises(cucache.CucacheError, match="device 5"):
        cucache.memory_stats(5)
