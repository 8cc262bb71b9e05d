"""PyTorch's allocator replaced by cucache's, through PyTorch's
pluggable allocator:

    import cucache.torch
    cucache.torch.enable()        # before the first CUDA tensor
    x = torch.empty(1 << 20, device="cuda")

PyTorch then calls cucache_torch_malloc and cucache_torch_free
(interpose/torch_alloc.c) for every tensor, with its own stream semantics
(a block freed on its stream is reusable at once there; record_stream uses
wait), its CUDA graphs allocate to cucache's private pools (the pool
hooks, where this PyTorch has them), and cucache's reports, snapshots, traces, limits and replay cover
PyTorch's tensors.  The library must be loaded in the process already
(cucache-run, or LD_PRELOAD): enable() hands PyTorch that same file.
PyTorch allows this once per process, before its allocator has been used.

An allocation cucache cannot serve raises torch.OutOfMemoryError in the
operation that asked for it ("CUDA out of memory. Tried to allocate ...",
after cucache's OOM report on stderr), as PyTorch's own allocator does:
cucache throws PyTorch's C++ c10::OutOfMemoryError (docs/pytorch.md, "Out
of memory"; a PyTorch without the constructor it needs gets RuntimeError
with the same words).  The program may then free memory and go on.

The allocator's figures, in torch.cuda's names and PyTorch's format, on
both routes (enable(), and cucache-run with PyTorch's cache off):

    cucache.torch.memory_allocated()      # torch.cuda.memory_allocated()
    cucache.torch.memory_stats()          # torch.cuda.memory_stats()'s keys
    print(cucache.torch.memory_summary()) # its table

PyTorch's own torch.cuda.memory_stats() and the calls over it ask the
allocator for its device statistics, which a pluggable allocator cannot
give (PyTorch 2.6's CUDAPluggableAllocator::getDeviceStats raises "does
not yet support getDeviceStats", and its Python binding has no setter
for them).  enable() therefore also installs cucache's figures behind
those calls (install_torch_stats()), so that they answer as on PyTorch's
own allocator.
"""
import ctypes

from . import CucacheError, _api, _check, _torch_format
from . import memory_stats as _cucache_stats

__all__ = ["library_path", "enable", "install_torch_stats", "memory_stats", "memory_allocated",
           "max_memory_allocated", "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
           "reset_accumulated_memory_stats", "memory_summary"]


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def library_path():
    """The file of the libcucache.so loaded in this process (dladdr of one
    of its functions)."""
    fn = _api().cucache_version
    libc = ctypes.CDLL(None)
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    info = _DlInfo()
    addr = ctypes.cast(fn, ctypes.c_void_p).value
    if not libc.dladdr(addr, ctypes.byref(info)) or not info.dli_fname:
        raise CucacheError("cannot tell which file libcucache.so was loaded from")
    return info.dli_fname.decode()


# PyTorch's optional hooks (the setters of its CUDAPluggableAllocator
# binding, which take a function's address) and cucache's entry point for
# each: init, empty_cache, memory fraction, record_stream, and the private
# pools of CUDA graph capture.
HOOKS = (
    ("set_init_fn", "cucache_torch_init"),
    ("set_reset_fn", "cucache_torch_empty_cache"),
    ("set_memory_fraction_fn", "cucache_torch_memory_fraction"),
    ("set_record_stream_fn", "cucache_torch_record_stream"),
    ("set_begin_allocate_to_pool", "cucache_torch_begin_allocate_to_pool"),
    ("set_end_allocate_to_pool_fn", "cucache_torch_end_allocate_to_pool"),
    ("set_release_pool", "cucache_torch_release_pool"),
)


def enable(torch_stats=True):
    """Makes cucache PyTorch's CUDA allocator; returns PyTorch's
    CUDAPluggableAllocator object.  Every optional hook this PyTorch offers
    (HOOKS) is set to cucache's entry point first; with torch_stats,
    torch.cuda.memory_stats() and the calls over it answer with cucache's
    figures (install_torch_stats()).  Raises CucacheError without cucache
    in the process, ImportError without PyTorch."""
    import torch

    path = library_path()
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "cucache_torch_malloc", "cucache_torch_free")
    hooks = getattr(alloc, "_allocator", None)
    lib = ctypes.CDLL(path)
    for setter, symbol in HOOKS:
        if hooks is not None and hasattr(hooks, setter):
            getattr(hooks, setter)(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value)
    torch.cuda.memory.change_current_allocator(alloc)
    if torch_stats:
        install_torch_stats()
    return alloc


def _device(device):
    """A CUDA ordinal from what torch.cuda's calls take: None (the current
    device), an int, a torch.device or a string such as "cuda:1"."""
    import torch

    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "cuda":
            raise ValueError(f"device={device!r}: expected a CUDA device")
        return torch.cuda.current_device() if device.index is None else device.index
    if not isinstance(device, int) or isinstance(device, bool):
        raise ValueError(f"device={device!r}: expected None, a CUDA ordinal, a torch.device or 'cuda:N'")
    count = torch.cuda.device_count()
    if not 0 <= device < count:
        raise ValueError(f"device={device}: expected a CUDA ordinal from 0 to {count - 1}")
    return device


def memory_stats(device=None):
    """torch.cuda.memory_stats(): PyTorch's keys, sorted, from cucache's
    statistics; zeros (as PyTorch gives them) before anything was
    allocated on the device through cucache."""
    d = _device(device)
    _api()  # CucacheError without cucache in the process
    if _api().cucache_stat(d, b"allocation.all.current", None) < 0:
        return _torch_format.zeros()
    return _torch_format.flat(_cucache_stats(d))


def memory_allocated(device=None):
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None):
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None):
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None):
    return memory_stats(device)["reserved_bytes.all.peak"]


def _reset(device, fn, what):
    d = _device(device)
    if _api().cucache_stat(d, b"allocation.all.current", None) < 0:
        return  # nothing counted yet: nothing to reset
    _check(fn(d), what, d)


def reset_peak_memory_stats(device=None):
    """torch.cuda.reset_peak_memory_stats(): every peak := its current value."""
    _reset(device, _api().cucache_reset_peak_stats, "reset_peak_memory_stats")


def reset_accumulated_memory_stats(device=None):
    """torch.cuda.reset_accumulated_memory_stats(): the totals ("allocated",
    "freed", num_alloc_retries, num_ooms, ...) := 0."""
    _reset(device, _api().cucache_reset_accumulated_stats, "reset_accumulated_memory_stats")


def memory_summary(device=None, abbreviated=False):
    """torch.cuda.memory_summary()'s table of cucache's figures."""
    d = _device(device)
    return _torch_format.summary(memory_stats(d), d, abbreviated)


def install_torch_stats():
    """Puts cucache's figures behind torch.cuda.memory_stats() and every
    call over it (memory_allocated, max_memory_reserved, memory_summary,
    ...) and behind reset_peak_memory_stats and
    reset_accumulated_memory_stats: PyTorch's Python functions ask its
    binding (torch._C._cuda_memoryStats and the two resets) each time, and
    those names are replaced here.  For the pluggable route, where the
    binding raises; under cucache-run it replaces the zeros PyTorch's
    uncached allocator counts.  Calls from PyTorch's C++ (the
    torch.compile autotuner's) still reach the allocator and still raise
    under the pluggable route."""
    import torch

    _api()
    binding = torch._C
    binding._cuda_memoryStats = lambda device: _torch_format.nested(memory_stats(device))
    binding._cuda_resetPeakMemoryStats = reset_peak_memory_stats
    binding._cuda_resetAccumulatedMemoryStats = reset_accumulated_memory_stats
