#!/usr/bin/env python3
"""A PyTorch memory snapshot of a few training steps with PyTorch's own
caching allocator, for scripts/gpu-check's torch-snapshot step
(cucache-replay's importer on a snapshot from the PyTorch installed on the
GPU machine).

Usage: torch_snapshot.py OUT.pickle
Prints peak_allocated=N and peak_reserved=M: torch.cuda's own peaks over
the recorded steps.
"""
import sys

import torch

out = sys.argv[1]
dev = torch.device("cuda")
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(256, 2048, device=dev)
for _ in range(2):  # warm up: parameters, optimizer state
    opt.zero_grad(set_to_none=True)
    model(x).square().mean().backward()
    opt.step()
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
torch.cuda.memory._record_memory_history(max_entries=100000)
for step in range(4):
    opt.zero_grad(set_to_none=True)
    xs = torch.randn(64 * (step + 1), 2048, device=dev)
    model(xs).square().mean().backward()
    opt.step()
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(out)
torch.cuda.memory._record_memory_history(enabled=None)
print(f"peak_allocated={torch.cuda.max_memory_allocated()} peak_reserved={torch.cuda.max_memory_reserved()}")
