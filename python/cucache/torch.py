"""PyTorch's allocator replaced by cucache's (issue 15), through PyTorch's
pluggable allocator:

    import cucache.torch
    cucache.torch.enable()        # before the first CUDA tensor
    x = torch.empty(1 << 20, device="cuda")

PyTorch then calls cucache_torch_malloc and cucache_torch_free
(interpose/torch_alloc.c) for every tensor, with its own stream semantics
(a block freed on its stream is reusable at once there; record_stream uses
wait), and cucache's reports, snapshots, traces, limits and replay cover
PyTorch's tensors.  The library must be loaded in the process already
(cucache-run, or LD_PRELOAD): enable() hands PyTorch that same file.
PyTorch allows this once per process, before its allocator has been used.
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


def enable():
    """Makes cucache PyTorch's CUDA allocator; returns PyTorch's
    CUDAPluggableAllocator object.  Raises CucacheError without cucache in
    the process, ImportError without PyTorch."""
    import torch

    path = library_path()
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "cucache_torch_malloc", "cucache_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    return alloc
