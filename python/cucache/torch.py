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
"""
import ctypes

from . import CucacheError, _api

__all__ = ["library_path", "enable"]


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


def enable():
    """Makes cucache PyTorch's CUDA allocator; returns PyTorch's
    CUDAPluggableAllocator object.  Every optional hook this PyTorch offers
    (HOOKS) is set to cucache's entry point first.  Raises CucacheError
    without cucache in the process, ImportError without PyTorch."""
    import torch

    path = library_path()
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "cucache_torch_malloc", "cucache_torch_free")
    hooks = getattr(alloc, "_allocator", None)
    lib = ctypes.CDLL(path)
    for setter, symbol in HOOKS:
        if hooks is not None and hasattr(hooks, setter):
            getattr(hooks, setter)(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value)
    torch.cuda.memory.change_current_allocator(alloc)
    return alloc
