"""A forced out-of-memory failure in PyTorch with its caching allocator off
(PYTORCH_NO_CUDA_MEMORY_CACHING=1: every tensor is a cudaMalloc), for
scripts/gpu-check: fills the GPU with tensors of a 320th of its memory (256
MiB on an 80 GiB card, 444 MiB on a 139 GiB one: the same count, and so the
same time and snapshot size, on any card), drops every other one, then asks
for more than is free.  Passes (exit 0) when PyTorch raises
its out-of-memory error and the tensors still held keep their values.
Under cucache-run the failure prints cucache's report, and with --snapshot
writes the snapshot gpu-check then opens with torch.cuda._memory_viz.

With --leak, the leak loop of tests/interpose/itest_child.c scaled to the
GPU: each step allocates a 3 MiB temporary and a 3 MiB tensor that is kept,
then drops the temporary, until the kept tensors hold 45% of the GPU; then
one tensor of half the GPU.  Exit 0 when it is served, 3 when it raises out
of memory (gpu-check applies the setting cucache's hint names and runs it
again)."""
import os
import sys

import torch

if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") != "1":
    sys.exit("torch_oom: run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (gpu-check does)")
OOM = getattr(torch.cuda, "OutOfMemoryError", RuntimeError)

if "--leak" in sys.argv[1:]:
    total = torch.cuda.mem_get_info()[1]
    step = 3 << 20
    kept = []
    while len(kept) * step < total * 45 // 100:
        tmp = torch.empty(step, dtype=torch.uint8, device="cuda")
        kept.append(torch.empty(step, dtype=torch.uint8, device="cuda"))
        del tmp
    try:
        big = torch.empty(total // 2, dtype=torch.uint8, device="cuda")
        print(f"torch_oom: leak: {len(kept)} steps, then {total / 2**31:.2f} GiB: served", flush=True)
        sys.exit(0)
    except OOM:
        print(f"torch_oom: leak: {len(kept)} steps, then {total / 2**31:.2f} GiB: out of memory", flush=True)
        sys.exit(3)
total = torch.cuda.mem_get_info()[1]
block = max(64 << 20, total // 320 & ~((2 << 20) - 1))  # as gpu_alloc --oom
held = []
try:
    while True:
        held.append(torch.full((block // 4,), float(len(held)), device="cuda"))
except OOM:
    pass
n = len(held)
for i in range(0, n, 2):
    held[i] = None
free, total = torch.cuda.mem_get_info()
print(f"torch_oom: {n} tensors of {block >> 20} MiB filled the GPU, every other one dropped; "
      f"{free / 2**30:.2f} GiB free of {total / 2**30:.2f} GiB", flush=True)
raised = False
try:
    torch.empty(free + (1 << 30), dtype=torch.uint8, device="cuda")
except OOM as e:
    raised = True
    print(f"torch_oom: PyTorch raised: {str(e).splitlines()[0][:200]}", flush=True)
kept = all(t is None or (t[0].item() == i and t[-1].item() == i) for i, t in enumerate(held))
print(f"torch_oom: RESULT {'PASS' if raised and kept else 'FAIL'} (raised={raised}, data kept={kept})")
sys.exit(0 if raised and kept else 1)
