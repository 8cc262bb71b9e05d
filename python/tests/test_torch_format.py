"""cucache.torch's PyTorch shapes (cucache/_torch_format.py) without
PyTorch: torch.cuda.memory_stats()'s key set, the nested dict of its
binding, and memory_summary's table."""
import pytest

from cucache import _torch_format as f


def test_keys():
    assert len(f.KEYS) == 9 * 3 * 4 + 2 * 4 + 6
    assert list(f.KEYS) == sorted(f.KEYS)
    assert "reserved_bytes.small_pool.peak" in f.KEYS and "num_alloc_retries" in f.KEYS


def test_flat_keeps_only_pytorch_keys():
    stats = {k: i for i, k in enumerate(f.KEYS)}
    stats["num_cache_hits"] = 7  # cucache's own
    out = f.flat(stats)
    assert list(out) == list(f.KEYS) and out["num_ooms"] == stats["num_ooms"]
    del stats["num_ooms"]
    with pytest.raises(KeyError, match="num_ooms"):
        f.flat(stats)


def test_nested():
    n = f.nested(f.flat({k: 1 for k in f.KEYS}))
    assert n["allocation"]["small_pool"]["peak"] == 1 and n["num_ooms"] == 1
    assert n["oversize_segments"]["freed"] == 1


def test_summary_layout():
    s = dict(f.zeros())
    s["allocated_bytes.all.current"] = 3 << 30
    s["allocated_bytes.large_pool.current"] = 3 << 30
    text = f.summary(s, 0)
    lines = text.splitlines()
    assert all(len(l) == 77 for l in lines)
    assert lines[7] == "| Allocated memory      |   3072 MiB |      0 B   |      0 B   |      0 B   |"
    assert len(lines) == 47 and len(f.summary(s, 0, abbreviated=True).splitlines()) == 29
