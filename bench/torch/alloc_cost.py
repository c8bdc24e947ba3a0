"""Per-call costs torch pays on cudakit's pool that its own allocator does not (issue 26:
torch.compile steps were +16 % / +28 % on cudakit). Two measurements, one process per
allocator (torch can switch allocators only before its first allocation):

1. the host cost of one torch allocation + free (``torch.empty`` of 4 KiB and 4 MiB, best of
   5 runs of 20k pairs): torch's pluggable layer (a std::function call and a mutex-guarded
   hash map insert/erase per pointer) plus cudakit's malloc/free, against c10's allocator;
2. per training step of bench/torch/compile_check.py's small model (default and
   reduce-overhead): how many allocations torch made, and how often each Python-level
   replacement of use_with_torch() ran (every one is a Python call where torch makes a C++
   one), so a per-step cost can be put on each.

    python3 bench/torch/alloc_cost.py --allocator native
    python3 bench/torch/alloc_cost.py --allocator cudakit
GPU only (torch with CUDA).
"""
from __future__ import annotations

import argparse
import collections
import json
import time


def pair_cost(torch, nbytes: int, n: int = 20000) -> float:
    best = float("inf")
    numel = nbytes // 4
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            torch.empty(numel, device="cuda")
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def count_calls(torch, names):
    counts = collections.Counter()
    for name in names:
        fn = getattr(torch._C, name, None)
        if fn is None:
            continue

        def wrapper(*a, __fn=fn, __name=name, **k):
            counts[__name] += 1
            return __fn(*a, **k)
        setattr(torch._C, name, wrapper)
    return counts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--allocator", choices=("native", "cudakit"), required=True)
    args = p.parse_args()
    if args.allocator == "cudakit":
        import cudakit.memory as m
        m.use_with_torch()
    import torch
    out = {"allocator": args.allocator,
           "empty_free_us": {str(n): round(pair_cost(torch, n), 3) for n in (4096, 4 << 20)}}
    names = []
    if args.allocator == "cudakit":
        from cudakit import _torch_interop
        names = sorted({n for o, n, _ in _torch_interop._state["patches"] if o is torch._C})
    counts = count_calls(torch, names)
    net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(),
                              torch.nn.Linear(256, 10)).cuda()
    x = torch.randn(32, 256, device="cuda")
    for mode in ("default", "reduce-overhead"):
        model = torch.compile(net, mode=None if mode == "default" else mode)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)

        def step():
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            opt.zero_grad(set_to_none=True)
            model(x).sum().backward()
            opt.step()
        for _ in range(6):
            step()
        torch.cuda.synchronize()
        counts.clear()
        a0 = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
        t0 = time.perf_counter()
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        out[mode] = {"step_ms": round((time.perf_counter() - t0) / 20 * 1e3, 3),
                     "allocations_per_step":
                         (torch.cuda.memory_stats().get("allocation.all.allocated", 0) - a0) / 20,
                     "python_replacement_calls_per_step":
                         {k: v / 20 for k, v in sorted(counts.items())}}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
