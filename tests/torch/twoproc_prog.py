"""One of two PyTorch processes on one shared simulated GPU (check_torch.py,
case two-procs): a trainer that keeps a large idle cache, and an evaluator
whose peak needs it.

    twoproc_prog.py train ROUTE
    twoproc_prog.py eval ROUTE

ROUTE: torch (PyTorch's own allocator, no cucache), preload (cucache-run:
PyTorch's cache off, every tensor a cudaMalloc that cucache serves) or
pluggable (cucache.torch.enable()).

The processes talk to their caller through lines, never by timing: each
line they print starts with a word and carries one JSON object, and each
wait is a line read from stdin.

train: three steps of forward, backward and AdamW on an MLP whose
activations are large; then the gradients and activations are freed, not
empty_cache()'d, so the allocator keeps them: it prints "IDLE {...}" with
its figures and waits.  The caller's next line ("go") comes once the
evaluator has peaked: it prints "AFTER {...}" (its figures now, after
any give), runs one more step and prints "DONE {...}".

eval: once imported it prints "READY {}" and waits for a line; then an
inference pass (no gradient) whose peak is a 3 GiB output beside
its input and hidden activation; it prints "EVAL {...}" (what it held at
the peak, or the exception that stopped it) and waits for a line before
it frees and exits, so both processes can be seen while they hold.
"""
import gc
import json
import os
import sys

import torch
import torch.nn as nn

MiB = 1 << 20
WIDTH = 2048
TRAIN_BATCH = 32768  # 256 MiB per activation of the trainer's MLP
EVAL_BATCH = 98304  # 768 MiB input and hidden, 3 GiB logits
EVAL_CLASSES = 8192


def say(word, obj):
    print(word + " " + json.dumps(dict(obj, pid=os.getpid())), flush=True)


def wait():
    line = sys.stdin.readline()
    if not line:  # the caller went away
        sys.exit(3)
    return line.strip()


def figures(route):
    """What the process's allocator says it holds: cucache's statistics
    where cucache serves it, PyTorch's counters otherwise."""
    if route == "torch":
        s = torch.cuda.memory_stats()
        keys = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "reserved_bytes.all.peak", "segment.all.current", "num_ooms")
        return {k: s.get(k, 0) for k in keys}
    import cucache

    s = cucache.memory_stats()
    keys = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
            "reserved_bytes.all.peak", "segment.all.current", "num_ooms", "num_device_free", "num_yields_given", "yield_bytes_given",
            "num_yields_received", "yield_bytes_received")
    out = {k: s[k] for k in keys}
    import cucache.torch as ct

    out["torch.memory_allocated"] = ct.memory_allocated()
    out["torch.memory_reserved"] = ct.memory_reserved()
    return out


def train(route):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    layers = []
    for _ in range(4):
        layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
    model = nn.Sequential(*layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(TRAIN_BATCH, WIDTH, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()
        torch.cuda.synchronize()

    for _ in range(3):
        step()
    del x
    opt.zero_grad(set_to_none=True)  # the gradients go back to the cache
    gc.collect()
    torch.cuda.synchronize()
    live = sum(p.numel() * p.element_size() for p in model.parameters())
    live += sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values() if t.is_cuda)
    say("IDLE", dict(figures(route), tensors=live))
    wait()
    say("AFTER", figures(route))
    x = torch.randn(TRAIN_BATCH, WIDTH, device=dev)
    step()
    del x
    opt.zero_grad(set_to_none=True)
    gc.collect()
    torch.cuda.synchronize()
    say("DONE", figures(route))


def evaluate(route):
    say("READY", {})  # imported while the trainer trains
    wait()
    torch.manual_seed(1)
    dev = torch.device("cuda")
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU(), nn.Linear(WIDTH, EVAL_CLASSES)).to(dev).eval()
    # at its peak it holds its input, the hidden activation and the logits
    out = {"need": EVAL_BATCH * (2 * WIDTH + EVAL_CLASSES) * 4}
    try:
        with torch.no_grad():
            x = torch.randn(EVAL_BATCH, WIDTH, device=dev)
            logits = model(x)
            preds = logits.argmax(dim=1)
            torch.cuda.synchronize()
        out["predictions"] = preds.numel()
        out["figures"] = figures(route)
        out["logits_bytes"] = logits.numel() * logits.element_size()
    except Exception as e:
        out["raised"] = {"type": type(e).__name__, "message": str(e).splitlines()[0]}
        out["figures"] = figures(route)
    say("EVAL", out)
    wait()


def main():
    what, route = sys.argv[1], sys.argv[2]
    torch.backends.cudnn.enabled = False
    if route == "pluggable":
        import cucache.torch

        cucache.torch.enable()
    if what == "train":
        train(route)
    else:
        evaluate(route)


if __name__ == "__main__":
    main()
