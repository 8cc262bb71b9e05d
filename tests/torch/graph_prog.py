#!/usr/bin/env python3
"""CUDA graphs with real PyTorch on the simulated GPU: torch.cuda.graph
capture and replay of a model's forward, and make_graphed_callables over a
model's forward and backward, then a few replays.

    python3 graph_prog.py ROUTE      (torch, preload or pluggable)

Prints one line of JSON: whether every capture and replay ran, PyTorch's
peak counters where its allocator has them, cucache's where it is loaded,
and the private pools that hold segments after the captures (PyTorch's
snapshot on its own allocator, cucache's otherwise): a graph's memory lives
in a pool of its own, as in PyTorch.
"""
import glob
import json
import os
import sys
import tempfile

import torch
import torch.nn as nn


def pools_torch():
    return sorted({tuple(s["segment_pool_id"]) for s in torch.cuda.memory_snapshot()})


def pools_cucache():
    import cucache

    d = tempfile.mkdtemp()
    cucache.snapshot(os.path.join(d, "s.pickle"))
    with open(os.path.join(d, "s.json")) as f:
        segs = json.load(f)["segments"]
    for p in glob.glob(os.path.join(d, "*")):
        os.unlink(p)
    os.rmdir(d)
    return sorted({tuple(s["segment_pool_id"]) for s in segs})


def main():
    route = sys.argv[1]
    if route == "pluggable":
        import cucache.torch

        cucache.torch.enable()
    torch.backends.cudnn.enabled = False
    torch.manual_seed(0)
    dev = torch.device("cuda")
    out = {"route": route}
    # torch.cuda.graph: warm up on a side stream, capture, replay
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).to(dev)
    x = torch.randn(64, 512, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    out["graph"] = list(y.shape) == [64, 512] and y.data_ptr() != 0
    # make_graphed_callables: forward and backward, each captured
    m2 = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).to(dev)
    inp = torch.randn(32, 256, device=dev, requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(m2, (inp,))
    for _ in range(3):
        graphed(inp).sum().backward()
    torch.cuda.synchronize()
    out["graphed"] = inp.grad is not None and list(inp.grad.shape) == [32, 256]
    if route == "torch":
        st = torch.cuda.memory_stats()
        out["torch"] = {k: st[k] for k in ("reserved_bytes.all.peak", "allocated_bytes.all.peak")}
        out["pools"] = pools_torch()
    else:
        import cucache

        st = cucache.memory_stats()
        out["cucache"] = {k: st[k] for k in ("reserved_bytes.all.peak", "allocated_bytes.all.peak",
                                             "allocation.all.allocated", "num_cache_hits")}
        out["pools"] = pools_cucache()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
