"""PyTorch's shapes of the allocator's statistics, made from cucache's flat
statistics (cucache_stats_foreach, which already uses PyTorch's key
names): the key set of torch.cuda.memory_stats() and nothing else, the
nested dict of torch._C._cuda_memoryStats, and memory_summary's table.
No PyTorch import here: cucache.torch uses it, the pytest tests check it
without PyTorch.
"""
import collections

# The gauges PyTorch keeps per pool class ("allocation.small_pool.peak"),
# in memory_summary's order, with the row's name there and whether it
# counts bytes (else allocations, blocks or segments).
POOL_GAUGES = (
    ("allocated_bytes", "Allocated memory", True),
    ("active_bytes", "Active memory", True),
    ("requested_bytes", "Requested memory", True),
    ("reserved_bytes", "GPU reserved memory", True),
    ("inactive_split_bytes", "Non-releasable memory", True),
    ("allocation", "Allocations", False),
    ("active", "Active allocs", False),
    ("segment", "GPU reserved segments", False),
    ("inactive_split", "Non-releasable allocs", False),
)
POOLS = ("all", "large_pool", "small_pool")
METRICS = ("current", "peak", "allocated", "freed")
# The gauges without a pool class, with their summary rows.
OVERSIZE_GAUGES = (
    ("oversize_allocations", "Oversize allocations"),
    ("oversize_segments", "Oversize GPU segments"),
)
COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
            "max_split_size")


def keys():
    """Every key torch.cuda.memory_stats() returns, sorted as it sorts them."""
    out = [f"{g}.{p}.{m}" for g, _, _ in POOL_GAUGES for p in POOLS for m in METRICS]
    out += [f"{g}.{m}" for g, _ in OVERSIZE_GAUGES for m in METRICS]
    out += list(COUNTERS)
    return sorted(out)


KEYS = tuple(keys())


def flat(stats):
    """PyTorch's memory_stats() from cucache's flat statistics: its keys
    only, sorted, in an OrderedDict.  A key cucache does not give is an
    error, not a 0."""
    missing = [k for k in KEYS if k not in stats]
    if missing:
        raise KeyError(f"cucache's statistics lack PyTorch's {', '.join(missing)}")
    return collections.OrderedDict((k, stats[k]) for k in KEYS)


def zeros():
    """The statistics of a device nothing was allocated on yet, as PyTorch
    gives them (max_split_size: PyTorch's -1 for no limit)."""
    z = collections.OrderedDict((k, 0) for k in KEYS)
    z["max_split_size"] = -1
    return z


def nested(stats):
    """torch._C._cuda_memoryStats's nested dict from flat keys
    ("allocation.all.peak" -> d["allocation"]["all"]["peak"])."""
    out = {}
    for key, value in stats.items():
        *path, last = key.split(".")
        d = out
        for part in path:
            d = d.setdefault(part, {})
        d[last] = value
    return out


def _fmt_size(n, ref):
    prefixes = ("B  ", "KiB", "MiB", "GiB", "TiB", "PiB")
    i = 0
    while i + 1 < len(prefixes) and ref >= 768 * 1024:
        n //= 1024
        ref /= 1024
        i += 1
    return f"{n:6d} {prefixes[i]}"


def _fmt_count(n, ref):
    prefixes = (" ", "K", "M")
    i = 0
    while i + 1 < len(prefixes) and ref >= 750 * 1000:
        n //= 1000
        ref /= 1000
        i += 1
    return f"{n:7d} {prefixes[i]} "


def summary(stats, device, abbreviated=False):
    """torch.cuda.memory_summary()'s table (75 columns; each pool's rows
    scaled by the "all" row's value, as PyTorch scales them) over
    PyTorch-format statistics, titled "cucache CUDA memory summary"."""
    rule, thin = "=" * 75, "-" * 75
    lines = [rule, f" {'':16} cucache CUDA memory summary, device ID {device:<17d} ", thin,
             f"  {'':9} CUDA OOMs: {stats['num_ooms']:<12d} | {'':6} cudaMalloc retries: "
             f"{stats['num_alloc_retries']:<8d}  ", rule,
             "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]
    for gauge, name, is_bytes in POOL_GAUGES:
        fmt = _fmt_size if is_bytes else _fmt_count
        lines.append(thin)
        rows = [("all", name)]
        if not abbreviated:
            rows += [("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
        ref = [stats[f"{gauge}.all.{m}"] for m in METRICS]
        for pool, label in rows:
            cells = " | ".join(fmt(stats[f"{gauge}.{pool}.{m}"], r) for m, r in zip(METRICS, ref))
            lines.append(f" {label:<21} | {cells} ")
    for gauge, name in OVERSIZE_GAUGES:
        lines.append(thin)
        cells = " | ".join(_fmt_count(stats[f"{gauge}.{m}"], stats[f"{gauge}.{m}"]) for m in METRICS)
        lines.append(f" {name:<21} | {cells} ")
    lines.append(rule)
    return "|" + "|\n|".join(lines) + "|\n"
