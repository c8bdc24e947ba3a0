"""Where a torch.compile(mode="reduce-overhead") training step spends its host time, natively
and on cudakit's pool (issue 26: the ninth session measured 4.56 ms native vs 6.26 ms on
cudakit for compile_check's GPT-2 step; the replay itself allocates nothing). GPU only; not a
test.

    python3 bench/torch/reduce_overhead_probe.py native|cudakit [--steps 40]

Prints the median step time over --steps steps (after compile, record and warm-up), then a
cProfile of --steps more steps: the functions with the most own time, and every call into
torch's allocator bindings (torch._C._cuda_* / cudakit) with its count per step.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time


def _control_ms() -> float:
    """Best of 5 of a fixed pure-Python workload (calls, attribute lookups, list appends)."""
    def f(i, acc):
        acc.append(i * 2)
        return len(acc)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        acc: list = []
        for i in range(200_000):
            f(i, acc)
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return best


def _pair_us(torch, n: int = 20000) -> float:
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            torch.empty(1024, device="cuda")
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("allocator", choices=("native", "cudakit"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--no-profile", action="store_true", help="skip the cProfile part")
    args = ap.parse_args()
    control_before = _control_ms()
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import compile_check  # noqa: E402  (the same setup and model as compile_check's)
    torch = compile_check._setup(args.allocator)
    import copy

    import transformers
    cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=8, vocab_size=2048,
                                  n_positions=128, resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0)
    torch.manual_seed(0)
    model = copy.deepcopy(transformers.GPT2LMHeadModel(cfg).cuda()).train()
    ids = torch.randint(0, cfg.vocab_size, (8, 64), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fwd = torch.compile(model, mode="reduce-overhead")

    def train_step():
        torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        loss = fwd(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss.detach().clone()

    for _ in range(8):
        train_step()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        train_step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    print(f"{args.allocator}: step median {times[len(times) // 2]:.3f} ms, "
          f"min {times[0]:.3f}, max {times[-1]:.3f} over {args.steps}")
    # the host part alone: no synchronize between steps (the GPU runs behind)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        train_step()
    host = (time.perf_counter() - t0) * 1e3 / args.steps
    torch.cuda.synchronize()
    print(f"{args.allocator}: unsynchronized step {host:.3f} ms")
    # A CPU-speed control in the same process (pure Python, no torch): a slower host shows
    # here too; and the allocation pair cost, torch.empty of 4 KiB (pluggable layer + pool).
    import gc
    gc0 = [g["collections"] for g in gc.get_stats()]
    for _ in range(args.steps):
        train_step()
    torch.cuda.synchronize()
    gcs = [g["collections"] - c for g, c in zip(gc.get_stats(), gc0)]
    print(f"{args.allocator}: control loop {control_before:.2f} ms before, {_control_ms():.2f} "
          f"after; torch.empty(4 KiB) pair {_pair_us(torch):.3f} us; gc collections per "
          f"step {[round(c / args.steps, 2) for c in gcs]}")
    if args.no_profile:
        return 0
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.steps):
        train_step()
    torch.cuda.synchronize()
    prof.disable()
    s = io.StringIO()
    st = pstats.Stats(prof, stream=s)
    st.sort_stats("tottime").print_stats(22)
    print("\n".join(line for line in s.getvalue().splitlines()[6:] if line.strip()))
    print("## allocator-facing calls per step")
    for (file, line, name), (cc, nc, tt, ct, callers) in sorted(
            st.stats.items(), key=lambda kv: -kv[1][3]):
        text = f"{file}:{name}"
        if any(k in text for k in ("_cuda_", "cudakit", "Checkpoint", "checkPool", "memory_",
                                   "_torch_interop", "MemPool", "caching_allocator")):
            print(f"  {nc / args.steps:7.2f}/step  {ct * 1e3 / args.steps:8.3f} ms/step  {text[-110:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
