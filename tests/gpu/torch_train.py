#!/usr/bin/env python3
"""Trains a small CNN on synthetic data on CUDA, deterministically, and
prints its losses (scripts/gpu-check runs it twice with
PYTORCH_NO_CUDA_MEMORY_CACHING=1, plain and under cucache-run, and compares
the two loss sequences for exact equality).

With PYTORCH_NO_CUDA_MEMORY_CACHING=1 PyTorch calls cudaMalloc/cudaFree for
every tensor, so under cucache every intermediate of the forward and
backward passes comes from cucache's cache; a block handed out while a
kernel still uses it, or overlapping a live tensor, changes a loss.

Determinism: fixed seeds, data made on the CPU, torch.use_deterministic_
algorithms(True) (cuBLAS needs CUBLAS_WORKSPACE_CONFIG=:4096:8, set here
when absent), cuDNN benchmark mode off, no op without a deterministic CUDA
kernel (no pooling, no nll_loss: cross-entropy is written out).

Output: "step N loss X" every --print-every steps, "train_s=..." (the
training loop alone), "losses sha256=... n=...", and, with --out FILE, a
JSON file holding every loss as float.hex() for the comparison.  When
cucache is in the process it prints its counters (ctypes.CDLL(None)); with
--expect-cucache the exit status is 1 unless it had cache hits.
"""
import argparse
import ctypes
import hashlib
import json
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402  (after CUBLAS_WORKSPACE_CONFIG)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def cucache_counters():
    """cucache's counters of device 0 as a dict, or None without cucache."""
    try:
        lib = ctypes.CDLL(None)
        stat = lib.cucache_stat
    except (OSError, AttributeError):
        return None
    stat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64)]
    stat.restype = ctypes.c_int
    out = {}
    # num_submissions / submissions_unseen / num_idle_frees: whether cucache
    # sees the real runtime's launches (unseen once the runtime looks up
    # cuGetExportTable, whose effects nobody documents)
    for key in ("num_cache_hits", "num_device_alloc", "num_device_free", "num_fences",
                "num_fence_waits", "reserved_bytes.all.peak", "num_submissions", "submissions_unseen",
                "num_idle_frees"):
        v = ctypes.c_int64(-1)
        out[key] = v.value if stat(0, key.encode(), ctypes.byref(v)) == 0 else None
    return out


class Net(nn.Module):
    """Three stride-2 convolutions and two linear layers: 32x32x3 -> 10."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, stride=1, padding=1)
        self.c2 = nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(64, 64, 3, stride=2, padding=1)
        self.c4 = nn.Conv2d(64, 128, 3, stride=2, padding=1)
        self.f1 = nn.Linear(128 * 4 * 4, 256)
        self.f2 = nn.Linear(256, 10)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.relu(self.c2(x))
        x = F.relu(self.c3(x))
        x = F.relu(self.c4(x))
        x = torch.flatten(x, 1)
        x = F.relu(self.f1(x))
        return self.f2(x)


def graph_check(model, x):
    """A CUDA graph of the forward pass (its memory from a private pool:
    under cucache.torch.enable(), cucache's pool hooks) replayed 5 times on
    new inputs, each output equal to the eager one; then, where PyTorch has
    it, an allocation inside torch.cuda.use_mem_pool (a MemPool; recent
    PyTorch refuses one under a pluggable allocator, which is reported).  Prints
    "graph: ok ..." or says what differed; returns the exit status."""
    model.eval()
    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):  # warm-up on a side stream, as PyTorch's docs do
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_y = model(static_x)
    worst = 0.0
    for i in range(5):
        static_x.copy_(x * (1 + 0.1 * i))
        graph.replay()
        with torch.no_grad():
            eager = model(x * (1 + 0.1 * i))
        worst = max(worst, float((static_y - eager).abs().max()))
    torch.cuda.synchronize()
    pool_note = "no MemPool in this PyTorch"
    if hasattr(torch.cuda, "MemPool") and hasattr(torch.cuda, "use_mem_pool"):
        # recent PyTorch refuses MemPools under a pluggable allocator
        # (createOrIncrefPool is not supported): said, not a failure
        try:
            pool = torch.cuda.MemPool()
            with torch.cuda.use_mem_pool(pool):
                t = torch.full((1 << 20,), 3.0, device="cuda")
            pool_note = f"MemPool tensor sum={float(t.sum()):.0f}"
            del t
        except RuntimeError as e:
            pool_note = f"MemPool refused by this PyTorch: {str(e).splitlines()[0][:120]}"
    del graph
    torch.cuda.synchronize()
    ok = worst <= 1e-5
    print(f"graph: {'ok' if ok else 'DIFFERENT'} (5 replays, largest difference from eager {worst:.3g}; {pool_note})",
          flush=True)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--print-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", help="write the losses (float.hex) to this JSON file")
    ap.add_argument("--device", default="cuda", help="cuda (default), or cpu for a smoke test of this script")
    ap.add_argument("--expect-cucache", action="store_true",
                    help="exit 1 unless cucache is loaded and served allocations from its cache")
    ap.add_argument("--pluggable", metavar="PYTHON_DIR",
                    help="make cucache PyTorch's allocator (cucache.torch.enable(), the package in PYTHON_DIR) "
                         "before the first CUDA tensor; PyTorch's caching allocator is then replaced, not off")
    ap.add_argument("--graph", action="store_true",
                    help="after training, capture the forward pass in a CUDA graph and replay it (graph_check)")
    args = ap.parse_args()
    if args.pluggable:
        sys.path.insert(0, args.pluggable)
        import cucache.torch
        cucache.torch.enable()
        print(f"torch_train: cucache is PyTorch's allocator ({cucache.torch.library_path()})", flush=True)

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("torch_train: CUDA is not available to PyTorch", flush=True)
        return 1
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.manual_seed(args.seed)
    name = torch.cuda.get_device_name(dev) if cuda else "CPU"
    print(f"torch_train: torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuDNN {torch.backends.cudnn.version()}, {name}; "
          f"PYTORCH_NO_CUDA_MEMORY_CACHING={os.environ.get('PYTORCH_NO_CUDA_MEMORY_CACHING', '')!r}, "
          f"CUBLAS_WORKSPACE_CONFIG={os.environ['CUBLAS_WORKSPACE_CONFIG']}", flush=True)

    # Synthetic data on the CPU (independent of the device's RNG): 16
    # batches of noisy copies of 10 random class prototypes.
    g = torch.Generator().manual_seed(args.seed)
    nbatches = 16
    ys = torch.randint(0, 10, (nbatches, args.batch), generator=g)
    protos = torch.randn(10, 3, 32, 32, generator=g)
    xs = 0.3 * protos[ys] + torch.randn(nbatches, args.batch, 3, 32, 32, generator=g)
    onehots = F.one_hot(ys, 10).float()
    xs, onehots = xs.to(dev), onehots.to(dev)

    model = Net().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    losses = torch.empty(args.steps, dtype=torch.float32, device=dev)

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for step in range(args.steps):
        x, t = xs[step % nbatches], onehots[step % nbatches]
        # x-dependent temporaries of several sizes: more allocations per step
        x = x + 0.01 * torch.sin(x * (1 + step % 3))
        logits = model(x)
        loss = -(F.log_softmax(logits, dim=1) * t).sum(dim=1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses[step] = loss.detach()
        if (step + 1) % args.print_every == 0 or step + 1 == args.steps:
            print(f"step {step + 1} loss {losses[step].item():.9g}", flush=True)
    sync()
    train_s = time.perf_counter() - t0

    vals = losses.cpu().tolist()
    hexes = [float(v).hex() for v in vals]
    digest = hashlib.sha256(" ".join(hexes).encode()).hexdigest()
    print(f"train_s={train_s:.3f} ({args.steps} steps, batch {args.batch}; {1e3 * train_s / args.steps:.2f} ms/step)")
    print(f"losses sha256={digest} n={len(hexes)} first={vals[0]:.9g} last={vals[-1]:.9g}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"losses": hexes, "sha256": digest, "train_s": train_s}, f)

    if args.graph and cuda:
        rc = graph_check(model, xs[0])
        if rc:
            return rc

    counters = cucache_counters()
    if counters is None:
        print("cucache: not loaded")
    else:
        print("cucache: " + " ".join(f"{k}={v}" for k, v in counters.items()))
    if args.expect_cucache and (counters is None or not counters.get("num_cache_hits")):
        print("torch_train: --expect-cucache, but cucache is not loaded or had no cache hits")
        return 1
    if not all(v == v and abs(v) != float("inf") for v in vals):
        print("torch_train: a loss is not finite")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
