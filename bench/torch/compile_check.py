"""torch.compile on cudakit's pool (issue 26), as users run it: a small model and a
transformers model (random init) through eager, torch.compile() and
torch.compile(mode="reduce-overhead") (CUDA graph trees: private pools, checkpointed pool
state, live-allocation checks), inference and training steps, plus generation.

Each run writes its results (outputs, losses, trained parameters, generated tokens, peak
memory, step times) to a file (``--part`` runs one model only);
``--compare`` checks two runs against each other (native torch allocator vs cudakit) and each
compiled result against its eager one. GPU only; needs torch with CUDA (transformers optional:
its part is skipped, and reported as skipped, without it).

    python3 bench/torch/compile_check.py --allocator native  --out /tmp/cc-native.pt
    python3 bench/torch/compile_check.py --allocator cudakit --out /tmp/cc-cudakit.pt
    python3 bench/torch/compile_check.py --compare /tmp/cc-native.pt /tmp/cc-cudakit.pt
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time


def _setup(allocator: str):
    import os
    # Deterministic kernels where torch has them, so two runs can be compared closely.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if allocator == "cudakit":
        import cudakit.memory as m
        m.use_with_torch()  # before torch's first CUDA allocation
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    return torch


def _timed(torch, fn, steps: int):
    """Runs fn() `steps` times; returns the last result and the median step time (ms)."""
    times, out = [], None
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return out, times[len(times) // 2]


def _cpu(obj):
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.detach().float().cpu().clone()
    if isinstance(obj, (list, tuple)):
        return [_cpu(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    return obj


def small_model(torch, results: dict) -> None:
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.norm = torch.nn.BatchNorm2d(16)
            self.fc1 = torch.nn.Linear(16 * 16 * 16, 256)
            self.fc2 = torch.nn.Linear(256, 10)

        def forward(self, x):
            x = torch.relu(self.norm(self.conv(x)))
            return self.fc2(torch.nn.functional.gelu(self.fc1(x.flatten(1))))

    torch.manual_seed(0)
    base = Net().cuda()
    x = torch.randn(32, 3, 16, 16, device="cuda")
    y = torch.randint(0, 10, (32,), device="cuda")
    for mode in ("eager", "default", "reduce-overhead"):
        model = copy.deepcopy(base)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        fn = model if mode == "eager" else torch.compile(
            model, mode=None if mode == "default" else mode)

        def train_step():
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(fn(x), y)
            loss.backward()
            opt.step()
            return loss.detach().clone()

        torch.cuda.reset_peak_memory_stats()
        losses = [train_step() for _ in range(6)]  # compile, record, replay
        _, ms = _timed(torch, train_step, 5)
        model.eval()
        with torch.no_grad():
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            out = fn(x).clone()
        results[f"small/{mode}"] = {
            "losses": _cpu(losses), "eval_out": _cpu(out),
            "params": _cpu([p for p in model.parameters()]),
            "peak_allocated": torch.cuda.max_memory_allocated(), "step_ms": ms}


def transformers_model(torch, results: dict) -> None:
    try:
        import transformers
    except ImportError as e:
        results["transformers"] = {"skipped": str(e)}
        return
    cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=8, vocab_size=2048,
                                  n_positions=128, resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0)
    torch.manual_seed(0)
    base = transformers.GPT2LMHeadModel(cfg).cuda()
    ids = torch.randint(0, cfg.vocab_size, (8, 64), device="cuda")
    for mode in ("eager", "default", "reduce-overhead"):
        model = copy.deepcopy(base).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        fwd = model if mode == "eager" else torch.compile(
            model, mode=None if mode == "default" else mode)

        def train_step():
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            opt.zero_grad(set_to_none=True)
            loss = fwd(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            return loss.detach().clone()

        torch.cuda.reset_peak_memory_stats()
        losses = [train_step() for _ in range(6)]
        _, ms = _timed(torch, train_step, 5)
        peak = torch.cuda.max_memory_allocated()
        model.eval()
        with torch.no_grad():
            gen = model.generate(ids[:2, :16], max_new_tokens=16, do_sample=False,
                                 pad_token_id=0)
        results[f"transformers/{mode}"] = {
            "losses": _cpu(losses), "generated": _cpu(gen),
            "peak_allocated": peak, "step_ms": ms}


def run(allocator: str, out: str, part: str) -> None:
    torch = _setup(allocator)
    results: dict = {"allocator": allocator, "torch": torch.__version__}
    if part in ("all", "small"):
        small_model(torch, results)
    if part in ("all", "transformers"):
        transformers_model(torch, results)
    if allocator == "cudakit":
        import cudakit.memory as m
        results["cudakit_state"] = m.torch_interop_state()
    torch.save(results, out)
    print(json.dumps({k: ({kk: vv for kk, vv in v.items() if kk in ("peak_allocated", "step_ms",
                                                                    "skipped")}
                          if isinstance(v, dict) else v)
                      for k, v in results.items() if k != "cudakit_state"}, indent=1))


def compare(a_path: str, b_path: str) -> int:
    import torch
    a, b = torch.load(a_path, weights_only=False), torch.load(b_path, weights_only=False)
    failures, rows = [], []

    def close(x, y, what, rtol, atol):
        try:
            torch.testing.assert_close(x, y, rtol=rtol, atol=atol)
        except AssertionError as e:
            failures.append(f"{what}: {str(e).splitlines()[0]}")

    for run in (a, b):
        for key, r in run.items():
            if not isinstance(r, dict) or "losses" not in r or key.endswith("/eager"):
                continue
            eager = run[key.rsplit("/", 1)[0] + "/eager"]
            # compiled vs eager in one run: inductor fuses differently, so a tolerance
            close(r["losses"], eager["losses"], f"{run['allocator']} {key} losses vs eager",
                  1e-3, 1e-4)
            if "eval_out" in r:
                close(r["eval_out"], eager["eval_out"], f"{run['allocator']} {key} eval vs eager",
                      1e-3, 1e-4)
    for key in sorted(set(a) & set(b)):
        ra, rb = a[key], b[key]
        if not isinstance(ra, dict) or "losses" not in ra:
            continue
        # the same program on two allocators: the same numbers (up to the few kernels torch
        # has no deterministic version of)
        for field in ("losses", "eval_out", "params", "generated"):
            if field in ra:
                close(rb[field], ra[field], f"{key} {field}: {b['allocator']} vs {a['allocator']}",
                      1e-5, 1e-6)
        rows.append((key, ra["peak_allocated"], rb["peak_allocated"], ra["step_ms"], rb["step_ms"]))
    print(f"{'case':32} {'peak ' + a['allocator']:>16} {'peak ' + b['allocator']:>16} "
          f"{'ms ' + a['allocator']:>12} {'ms ' + b['allocator']:>12}")
    for key, pa, pb, ta, tb in rows:
        print(f"{key:32} {pa:16d} {pb:16d} {ta:12.2f} {tb:12.2f}")
    for run in (a, b):
        if "skipped" in run.get("transformers", {}):
            print(f"{run['allocator']}: transformers part skipped: {run['transformers']['skipped']}")
    for f in failures:
        print("MISMATCH", f)
    print("OK" if not failures else f"{len(failures)} mismatches")
    return 1 if failures else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--allocator", choices=("native", "cudakit"))
    p.add_argument("--out")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"))
    p.add_argument("--part", choices=("all", "small", "transformers"), default="all",
                   help="run one part only (the device tool limits a command to 10 minutes)")
    args = p.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.allocator or not args.out:
        p.error("give --allocator and --out, or --compare A B")
    run(args.allocator, args.out, args.part)
    return 0


if __name__ == "__main__":
    sys.exit(main())
