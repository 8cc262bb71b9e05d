#!/usr/bin/env python3
"""PyTorch's recordStream pattern: each step's activations are made on the
default stream, read on a side stream (a copy or a communication stream's
work), marked there with Tensor.record_stream and freed on their own
stream, while the next ones are made.  Seeded, fixed shapes; the simulated
device computes no values.

    python3 record_stream_prog.py [--steps N] [--route torch|pluggable]

Prints one line of JSON: the steps, the mean step time (every step's
work done) on the host's clock and on the device's (CUDA events: the
simulator's device time, which a busy host does not move while it keeps
ahead of the device), PyTorch's
counters where its allocator has them and cucache's where cucache is
loaded.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--route", choices=("torch", "pluggable", "preload"), default="torch")
    ap.add_argument("--mib", type=int, default=64, help="MiB of each step's activations")
    a = ap.parse_args()
    if a.route == "pluggable":
        import cucache.torch
        cucache.torch.enable()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    side = torch.cuda.Stream()
    n = (a.mib << 20) // 4 // 8
    w = torch.randn(2048, 2048, device=dev)
    times = []
    torch.cuda.synchronize()
    t_all = time.perf_counter()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(a.steps):
        t0 = time.perf_counter()
        acts = [torch.randn(n, device=dev) for _ in range(8)]
        h = torch.randn(2048, 2048, device=dev)
        for _ in range(4):
            h = h @ w  # the default stream's own work
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            sums = [x.mul(2.0).sum() for x in acts]  # read on the side stream
            for _ in range(8):
                h2 = h @ w  # the side stream's work runs long
        for x in acts + [h]:
            x.record_stream(side)
        del acts, sums, h2, h  # freed on their own (default) stream, still in use on the side one
        if i % 4 == 3:
            torch.cuda.synchronize()  # a loss read now and then
        times.append(time.perf_counter() - t0)
    torch.cuda.current_stream().wait_stream(side)
    end.record()
    torch.cuda.synchronize()
    total = time.perf_counter() - t_all
    out = {"steps": len(times), "step_s": total / len(times), "device_step_s": start.elapsed_time(end) / 1e3 / len(times),
           "torch": workloads.torch_counters(), "cucache": workloads.cucache_counters()}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
