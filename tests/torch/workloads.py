#!/usr/bin/env python3
"""Real PyTorch training steps for the simulated GPU: a fixed-shape MLP, a
small GPT-like decoder and a small CNN, each a few steps of forward,
backward and AdamW.  Seeded; the shapes never depend on values (the
simulated device computes none).

    python3 workloads.py WORKLOAD [--steps N] [--route ROUTE] [--snapshot FILE]

WORKLOAD: fixed shapes, the same every step: mlp, gpt, cnn; shapes that
change every step (seeded: the same sequence in every run), where caching
allocators differ most:
    packed     the decoder on batches packed by length: about 2048 tokens
               a batch, its sequence length drawn from 32 to 256
    generate   the decoder generating: each step a batch of prompts of a
               drawn length, then 32 tokens one at a time, keys and values
               of every layer kept in a cache that grows by one position a
               token (no gradient, no optimizer)
    mixres     the CNN on images of a drawn resolution (32 to 128 pixels),
               about 128K pixels a batch
and a second stream's work on blocks of the first (PyTorch's
record_stream), where allocators differ in when they reuse them:
    sidestream the decoder, its gradients reduced on a communication
               stream in buckets made on the default stream, marked with
               record_stream and freed while the reduction may still run
ROUTE says who serves PyTorch's tensors, and
what the program does about it:
    torch      PyTorch's own caching allocator (no cucache: run it plain)
    preload    cucache through LD_PRELOAD (cucache-run) under PyTorch's
               allocator with its cache off (PYTORCH_NO_CUDA_MEMORY_CACHING)
    pluggable  cucache.torch.enable(): cucache is PyTorch's allocator
--snapshot FILE: PyTorch's own memory history (_record_memory_history),
dumped to FILE after the steps (PyTorch's allocator only).

Prints one line of JSON: what ran, PyTorch's counters where its allocator
has them, cucache's where cucache is loaded, and the time per step.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self, width=2048, depth=4, dim=512):
        super().__init__()
        layers = [nn.Linear(dim, width), nn.GELU()]
        for _ in range(depth - 2):
            layers += [nn.Linear(width, width), nn.GELU()]
        layers.append(nn.Linear(width, dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Decoder(nn.Module):
    def __init__(self, vocab=8192, dim=384, heads=6, layers=4, ctx=256):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


class Cnn(nn.Module):
    def __init__(self, classes=100):
        super().__init__()
        chans = [3, 32, 64, 128, 256]
        layers = []
        for cin, cout in zip(chans, chans[1:]):
            layers += [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(chans[-1], classes)

    def forward(self, x):
        return self.fc(self.features(x).mean(dim=(2, 3)))


def draws(seed, n, choices):
    """n values drawn from choices, seeded: the same in every run."""
    g = torch.Generator().manual_seed(seed)
    return [choices[int(i)] for i in torch.randint(0, len(choices), (n,), generator=g)]


def generate(model, prompt, new_tokens):
    """Greedy generation with a key/value cache that grows by one position
    a token, as an inference server's does (values are not computed on the
    simulated device: the shapes are what matter)."""
    b = prompt.shape[0]
    caches = [None] * len(model.blocks)
    idx = prompt
    start = 0
    for _ in range(new_tokens):
        pos = torch.arange(start, start + idx.shape[1], device=idx.device)
        x = model.tok(idx) + model.pos(pos)
        for i, blk in enumerate(model.blocks):
            d = x.shape[2]
            q, k, v = blk.qkv(blk.ln1(x)).split(d, dim=2)
            q, k, v = (y.view(b, -1, blk.heads, d // blk.heads).transpose(1, 2) for y in (q, k, v))
            if caches[i] is not None:
                k = torch.cat([caches[i][0], k], dim=2)
                v = torch.cat([caches[i][1], v], dim=2)
            caches[i] = (k, v)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=caches[i][0].shape[2] == q.shape[2])
            x = x + blk.proj(a.transpose(1, 2).reshape(b, -1, d))
            x = x + blk.down(F.gelu(blk.up(blk.ln2(x))))
        logits = model.head(model.ln(x[:, -1:, :]))
        start += idx.shape[1]
        idx = logits.argmax(dim=-1)
    return start


STEPS_DRAWN = 64  # the shapes drawn for the changing workloads: more than any run's steps


def make(name, dev):
    """The model, a function of the step's index that makes its batch and
    returns its loss (None: the step is inference and did its work), and
    whether the step trains (backward and AdamW)."""
    if name == "mlp":
        model = Mlp().to(dev)
        x = torch.randn(256, 512, device=dev)
        y = torch.randn(256, 512, device=dev)
        return model, lambda i: F.mse_loss(model(x), y), True
    if name == "gpt":
        model = Decoder().to(dev)
        idx = torch.randint(0, 8192, (8, 256), device=dev)
        tgt = torch.randint(0, 8192, (8, 256), device=dev)
        return model, lambda i: F.cross_entropy(model(idx).view(-1, 8192), tgt.view(-1)), True
    if name == "cnn":
        model = Cnn().to(dev)
        x = torch.randn(32, 3, 64, 64, device=dev)
        y = torch.randint(0, 100, (32,), device=dev)
        return model, lambda i: F.cross_entropy(model(x), y), True
    if name == "packed":
        model = Decoder().to(dev)
        lengths = draws(1, STEPS_DRAWN, [32, 48, 64, 96, 128, 160, 192, 256])

        def packed(i):
            t = lengths[i % STEPS_DRAWN]
            b = 2048 // t
            idx = torch.randint(0, 8192, (b, t), device=dev)
            tgt = torch.randint(0, 8192, (b, t), device=dev)
            return F.cross_entropy(model(idx).view(-1, 8192), tgt.view(-1))

        return model, packed, True
    if name == "generate":
        model = Decoder().to(dev).eval()
        prompts = draws(2, STEPS_DRAWN, [16, 32, 48, 64, 96, 128, 160, 192])

        def gen(i):
            with torch.no_grad():
                prompt = torch.randint(0, 8192, (8, prompts[i % STEPS_DRAWN]), device=dev)
                generate(model, prompt, 32)
            return None

        return model, gen, False
    if name == "mixres":
        model = Cnn().to(dev)
        sizes = draws(3, STEPS_DRAWN, [32, 48, 64, 80, 96, 112, 128])

        def mixres(i):
            r = sizes[i % STEPS_DRAWN]
            b = max(1, (128 * 1024) // (r * r))
            x = torch.randn(b, 3, r, r, device=dev)
            y = torch.randint(0, 100, (b,), device=dev)
            return F.cross_entropy(model(x), y)

        return model, mixres, True
    if name == "sidestream":
        model = Decoder().to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        comm = torch.cuda.Stream()
        idx = torch.randint(0, 8192, (8, 256), device=dev)
        tgt = torch.randint(0, 8192, (8, 256), device=dev)
        params = list(model.parameters())

        def sidestream(i):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(idx).view(-1, 8192), tgt.view(-1)).backward()
            # the gradients reduced on a communication stream, as in
            # data-parallel training: each bucket made on the default
            # stream, read there by the reduction, marked with
            # record_stream and freed on its own stream while that work may
            # still run; the optimizer's step overlaps it
            comm.wait_stream(torch.cuda.current_stream())
            buckets = [torch.cat([p.grad.flatten() for p in params[k:k + 8]]) for k in range(0, len(params), 8)]
            with torch.cuda.stream(comm):
                for b in buckets:
                    for _ in range(4):
                        b.mul_(0.5)
            for b in buckets:
                b.record_stream(comm)
            del buckets
            opt.step()
            return None

        return model, sidestream, False
    raise SystemExit(f"workloads.py: unknown workload '{name}' ({', '.join(WORKLOADS)})")


WORKLOADS = ("mlp", "gpt", "cnn", "packed", "generate", "mixres", "sidestream")


def run_step(opt, step_fn, trains, i):
    """Step i of a workload make() made, its work done on the device."""
    if trains:
        opt.zero_grad(set_to_none=True)
        step_fn(i).backward()
        opt.step()
    else:
        step_fn(i)
    torch.cuda.synchronize()


def torch_counters():
    """PyTorch's own allocator's counters, or why there are none."""
    try:
        s = torch.cuda.memory_stats()
    except Exception as e:  # the pluggable allocator has none in PyTorch 2.6
        return {"unavailable": str(e).splitlines()[0]}
    return {k: s.get(k, 0) for k in ("allocated_bytes.all.peak", "reserved_bytes.all.peak",
                                     "reserved_bytes.all.current", "num_alloc_retries",
                                     "num_ooms", "allocation.all.allocated", "segment.all.allocated")}


def cucache_counters():
    """cucache's counters (the cucache Python package) when libcucache.so
    is in the process, else None."""
    try:
        import cucache
    except ImportError:
        return None
    if not cucache.available():
        return None
    s = cucache.memory_stats()
    keys = ("allocation.all.allocated", "segment.all.allocated", "allocated_bytes.all.peak",
            "reserved_bytes.all.peak", "num_alloc_retries", "num_ooms", "num_cache_hits", "num_device_alloc")
    return {k: s[k] for k in keys if k in s}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=WORKLOADS)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--route", choices=("torch", "preload", "pluggable"), default="torch")
    ap.add_argument("--snapshot")
    ap.add_argument("--cudnn", choices=("on", "off"), default="off")
    ap.add_argument("--progress", action="store_true", help="a line on stderr after each step")
    a = ap.parse_args()

    if a.route == "pluggable":
        import cucache.torch
        cucache.torch.enable()
    torch.backends.cudnn.enabled = a.cudnn == "on"
    torch.manual_seed(0)
    if a.snapshot:
        torch.cuda.memory._record_memory_history(max_entries=100000)
    dev = torch.device("cuda")
    model, step_fn, trains = make(a.workload, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3) if trains else None
    times = []
    for i in range(a.steps):
        t0 = time.perf_counter()
        run_step(opt, step_fn, trains, i)
        times.append(time.perf_counter() - t0)
        if a.progress:
            print(f"STEP {i} done", file=sys.stderr, flush=True)
    if a.snapshot:
        torch.cuda.memory._dump_snapshot(a.snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    free, total = torch.cuda.mem_get_info()
    out = {
        "workload": a.workload,
        "route": a.route,
        "steps": len(times),
        "step_s": sorted(times)[len(times) // 2],
        "torch": torch_counters(),
        "cucache": cucache_counters(),
        "no_caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"),
        "torch_version": torch.__version__,
        "device_used": total - free,  # cudaMemGetInfo at the end: the device memory in use
    }
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
