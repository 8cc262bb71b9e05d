"""cucache from Python: the allocator's statistics, summary, snapshots and
private pools for a Python program run under cucache (cucache-run, or
LD_PRELOAD=libcucache.so), with torch.cuda's names where they exist.

    import cucache                      # pip install python/ (or scripts/ on sys.path)
    if cucache.available():
        print(cucache.memory_summary(0))
        stats = cucache.memory_stats(0)   # torch.cuda.memory_stats() keys
        cucache.snapshot("/tmp/snap-%p.pickle")
        with cucache.MemPool(0) as pool:  # this thread's allocations go to a private pool
            ...

Everything goes through the C API exported by libcucache.so
(include/cucache/cucache.h), found with ctypes in the running process; no
CUDA library is loaded here.  Without cucache in the process, available()
is False and every other call raises CucacheError.  A device (CUDA ordinal)
has allocator state once the program allocated on it through cucache;
before that the calls raise CucacheError too.
"""

import ctypes

__all__ = [
    "CucacheError", "available", "version", "memory_stats", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
    "empty_cache", "memory_summary", "snapshot", "MemPool", "record_memory_history", "dump_snapshot",
    "set_per_process_memory_fraction",
]


class CucacheError(RuntimeError):
    pass


_STAT_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64)
_lib = None


def _api():
    global _lib
    if _lib is None:
        proc = ctypes.CDLL(None)
        try:
            proc.cucache_version
        except AttributeError:
            raise CucacheError("cucache is not loaded in this process (run it with cucache-run, or "
                               "LD_PRELOAD=libcucache.so)") from None
        proc.cucache_version.restype = ctypes.c_char_p
        proc.cucache_stats_foreach.argtypes = [ctypes.c_int, _STAT_FN, ctypes.c_void_p]
        proc.cucache_stat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64)]
        proc.cucache_memory_summary.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        proc.cucache_memory_summary.restype = ctypes.c_long
        proc.cucache_snapshot.argtypes = [ctypes.c_char_p]
        for name in ("cucache_reset_peak_stats", "cucache_reset_accumulated_stats", "cucache_empty_cache",
                     "cucache_pool_create", "cucache_pool_destroy"):
            getattr(proc, name).argtypes = [ctypes.c_int]
        proc.cucache_pool_use.argtypes = [ctypes.c_int, ctypes.c_int]
        proc.cucache_record_memory_history.argtypes = [ctypes.c_size_t, ctypes.c_int]
        proc.cucache_record_memory_history_stacks.argtypes = [ctypes.c_size_t, ctypes.c_char_p]
        proc.cucache_set_per_process_memory_fraction.argtypes = [ctypes.c_double, ctypes.c_int]
        _lib = proc
    return _lib


def _check(rc, what, device):
    if rc < 0:
        raise CucacheError(f"{what}: device {device} has no cucache allocator state "
                           f"(nothing allocated on it through cucache yet)")
    return rc


def available():
    """True when cucache is loaded in this process."""
    try:
        _api()
        return True
    except CucacheError:
        return False


def version():
    return _api().cucache_version().decode()


def memory_stats(device=0):
    """The device's statistics as a flat dict with torch.cuda.memory_stats()'s
    key names (plus cucache's own, such as num_cache_hits)."""
    out = {}

    def one(ctx, key, value):
        out[key.decode()] = value

    _check(_api().cucache_stats_foreach(device, _STAT_FN(one), None), "memory_stats", device)
    return out


def _stat(device, key):
    v = ctypes.c_int64()
    _check(_api().cucache_stat(device, key.encode(), ctypes.byref(v)), key, device)
    return v.value


def memory_allocated(device=0):
    return _stat(device, "allocated_bytes.all.current")


def max_memory_allocated(device=0):
    return _stat(device, "allocated_bytes.all.peak")


def memory_reserved(device=0):
    return _stat(device, "reserved_bytes.all.current")


def max_memory_reserved(device=0):
    return _stat(device, "reserved_bytes.all.peak")


def reset_peak_memory_stats(device=0):
    _check(_api().cucache_reset_peak_stats(device), "reset_peak_memory_stats", device)


def reset_accumulated_memory_stats(device=0):
    _check(_api().cucache_reset_accumulated_stats(device), "reset_accumulated_memory_stats", device)


def empty_cache(device=0):
    """Returns every free cached segment of the device to CUDA (calls CUDA)."""
    _check(_api().cucache_empty_cache(device), "empty_cache", device)


def memory_summary(device=0):
    """The table torch.cuda.memory_summary() prints, for cucache, with its hit
    rate, fence waits and verdict."""
    lib = _api()
    n = _check(lib.cucache_memory_summary(device, None, 0), "memory_summary", device)
    buf = ctypes.create_string_buffer(n + 1)
    lib.cucache_memory_summary(device, buf, n + 1)
    return buf.value.decode()


def snapshot(path=None):
    """Writes a snapshot of every device: a pickle PyTorch's memory viewer
    opens (torch.cuda.memory._dump_snapshot's schema) and JSON beside it.
    path may use %p %r %d %n; None uses CUCACHE_SNAPSHOT.  Raises
    CucacheError when it was not written (cucache printed why)."""
    rc = _api().cucache_snapshot(path.encode() if path is not None else None)
    if rc != 0:
        raise CucacheError(f"snapshot to {path or '$CUCACHE_SNAPSHOT'} not written (see cucache's message)")


# record_memory_history's stacks, as torch.cuda.memory._record_memory_history
# names them, and CUCACHE_STACKS's mode for each
_STACKS = {"python": "python", "all": "python+native", "native": "native", "cpp": "native"}


def record_memory_history(enabled="all", max_entries=100000, stacks=None, depth=24):
    """Starts (enabled="all" or "state") or stops (enabled=None) keeping the
    allocator's events for snapshots, at run time, in the spirit of
    torch.cuda.memory._record_memory_history: the last max_entries events of
    each device.  stacks also records each allocation's call stack, which
    snapshots give as PyTorch's frames: "python" the calling thread's Python
    frames, "all" the native frames up to the interpreter and then the
    Python ones (CUCACHE_STACKS=python+native), "native" (or "cpp") the
    native stack; depth frames of each kind.  None leaves stack recording as
    it is.  enabled=None stops both.  What was recorded before a stop stays
    for the next snapshot."""
    if stacks not in (None, *_STACKS):
        raise ValueError(f"stacks={stacks!r}: expected None, 'python', 'all', 'native' or 'cpp'")
    if enabled not in (None, "all", "state"):
        raise ValueError(f"enabled={enabled!r}: expected 'all', 'state' or None")
    if not isinstance(depth, int) or not 1 <= depth <= 64:
        raise ValueError(f"depth={depth!r}: expected a number of frames from 1 to 64")
    if enabled is None:
        entries, mode = 0, "off"  # everything off, as torch's enabled=None
    else:
        if not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries={max_entries!r}: expected a positive number of events")
        entries, mode = max_entries, (f"{_STACKS[stacks]}:{depth}" if stacks else None)
    if _api().cucache_record_memory_history_stacks(entries, mode.encode() if mode else None) != 0:
        raise CucacheError("record_memory_history failed (see cucache's message)")


def set_per_process_memory_fraction(fraction, device=0):
    """torch.cuda.set_per_process_memory_fraction: cucache holds at most this
    share (more than 0, at most 1) of the device's memory from now on."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction={fraction!r}: expected more than 0 and at most 1")
    _check(_api().cucache_set_per_process_memory_fraction(float(fraction), device),
           "set_per_process_memory_fraction", device)


def dump_snapshot(path="dump_snapshot.pickle"):
    """Writes a snapshot to path (torch.cuda.memory._dump_snapshot's name and
    default): the pickle and JSON beside it."""
    snapshot(path)


class MemPool:
    """A private pool (torch.cuda.MemPool): `with MemPool(dev):` routes this
    thread's allocations on the device to the pool; close() destroys it (its
    free segments go back now, the rest as their blocks are freed)."""

    def __init__(self, device=0):
        self.device = device
        self.id = _check(_api().cucache_pool_create(device), "MemPool", device)

    def __enter__(self):
        _check(_api().cucache_pool_use(self.device, self.id), "MemPool.use", self.device)
        return self

    def __exit__(self, *exc):
        _api().cucache_pool_use(self.device, 0)
        return False

    def close(self):
        if self.id:
            _api().cucache_pool_destroy(self.device, self.id)
            self.id = 0
