"""Jiterator benchmark, side by side with torch.cuda.jiterator when torch is importable.

    python bench/jiterator/bench_jiterator.py [--mib N] [--iters N] [--no-torch]

Three measurements (issue 11 goals on the H200: >= 4200 GB/s, cold compile <= 79 ms, warm
start from the disk cache in a new process <= 1 ms):

1. throughput of out = a*x + y (fp32, x, y and out of N MiB each; GB/s counts the three
   arrays): the cudakit jitted function, torch's jitted function, torch.add(y, x, alpha=a),
   and cudakit's two built-in ops (x*a then + y) for reference. Device time by events, median
   of --iters launches after a warm-up.
2. cold compile: the first call in a fresh process with an empty kernel cache (the compile
   itself, as cache_stats() reports it, and the whole first call).
3. warm start: the first call in a fresh process whose disk cache holds the kernel.

Each process measurement runs in a subprocess, so nothing is warm that a user's new process
would not have. Rows are Markdown table lines (scripts/gpu-check.sh collects them).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

CODE = "template <typename T> T axpy(T x, T y, T a) { return a * x + y; }"


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def throughput(args) -> list[tuple[str, float, float]]:
    import cudakit as ck

    n = args.mib * 2**20 // 4
    rows = []
    x = ck.empty(n, device="cuda").uniform_()
    y = ck.empty(n, device="cuda").uniform_()
    fn = ck.jiterator._create_jit_fn(CODE, a=2.0)
    moved = 3 * n * 4

    def timed_ck(call):
        call()
        ck.synchronize()
        times = []
        for _ in range(args.iters):
            s, e = ck.Event(enable_timing=True), ck.Event(enable_timing=True)
            s.record()
            call()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        return statistics.median(times)

    ms = timed_ck(lambda: fn(x, y))
    rows.append(("cudakit jiterator a*x+y", ms, moved / ms / 1e6))
    ms = timed_ck(lambda: x * 2.0 + y)
    rows.append(("cudakit built-ins x*2 + y (two kernels)", ms, moved / ms / 1e6))
    # Correctness spot check on the first elements.
    got = fn(x[:8], y[:8]).cpu().numpy()
    want = (x[:8].cpu().numpy() * 2 + y[:8].cpu().numpy())
    assert abs(got - want).max() < 1e-5, (got, want)
    del x, y

    torch = None if args.no_torch else _torch()
    if torch is not None:
        tx = torch.rand(n, device="cuda")
        ty = torch.rand(n, device="cuda")
        tfn = torch.cuda.jiterator._create_jit_fn(CODE, a=2.0)

        def timed_torch(call):
            call()
            torch.cuda.synchronize()
            times = []
            for _ in range(args.iters):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                call()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e))
            return statistics.median(times)

        ms = timed_torch(lambda: tfn(tx, ty))
        rows.append((f"torch {torch.__version__} jiterator a*x+y", ms, moved / ms / 1e6))
        ms = timed_torch(lambda: torch.add(ty, tx, alpha=2.0))
        rows.append((f"torch {torch.__version__} torch.add(y, x, alpha=2)", ms, moved / ms / 1e6))
        # cudakit's function on torch tensors (DLPack in place, torch tensor out).
        ms = timed_torch(lambda: fn(tx, ty))
        rows.append(("cudakit jiterator on torch tensors", ms, moved / ms / 1e6))
    return rows


_CHILD = textwrap.dedent("""
    import json, sys, time
    lib = sys.argv[1]
    code = sys.argv[2]
    if lib == "cudakit":
        import cudakit as m
        x = m.ones(4096, device="cuda"); y = m.ones(4096, device="cuda")
        make = m.jiterator._create_jit_fn
    else:
        import torch as m
        x = torch_x = m.ones(4096, device="cuda"); y = m.ones(4096, device="cuda")
        make = m.cuda.jiterator._create_jit_fn
    m.cuda.synchronize() if lib == "torch" else m.synchronize()
    fn = make(code, a=2.0)
    t0 = time.perf_counter()
    fn(x, y)
    m.cuda.synchronize() if lib == "torch" else m.synchronize()
    first = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    fn(x, y)
    m.cuda.synchronize() if lib == "torch" else m.synchronize()
    second = (time.perf_counter() - t0) * 1e3
    stats = m.jiterator.cache_stats() if lib == "cudakit" else {}
    print(json.dumps(dict(first_ms=first, second_ms=second, **stats)))
""")


def in_fresh_process(lib: str, cache: str, code: str) -> dict:
    env = dict(os.environ, CUDAKIT_CACHE_DIR=cache, PYTORCH_KERNEL_CACHE_PATH=cache)
    r = subprocess.run([sys.executable, "-c", _CHILD, lib, code], env=env, capture_output=True,
                       text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{lib} child failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def compile_and_warm_start(args) -> list[str]:
    rows = []
    libs = ["cudakit"] + ([] if args.no_torch or _torch() is None else ["torch"])
    for lib in libs:
        cold, warm = [], []
        for rep in range(args.process_reps):
            cache = tempfile.mkdtemp(prefix=f"bench-jit-{lib}-")
            # A distinct kernel per repetition, so nothing of it is cached anywhere yet.
            code = CODE.replace("a * x", f"a * x + T({rep})")
            cold.append(in_fresh_process(lib, cache, code))
            warm.append(in_fresh_process(lib, cache, code))
        med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
        compile_ms = f"{med(cold, 'compile_ms'):.1f}" if "compile_ms" in cold[0] else "n/a"
        rows.append(f"| {lib} | {med(cold, 'first_ms'):.1f} | {compile_ms} | "
                    f"{med(warm, 'first_ms'):.3f} | {med(warm, 'second_ms'):.3f} |")
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=int, default=None, help="size of each array (default 1024 on a GPU, 16 otherwise)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--process-reps", type=int, default=3, help="fresh processes per cold / warm measurement")
    p.add_argument("--no-torch", action="store_true")
    args = p.parse_args()
    import cudakit as ck

    gpu = ck.backend_name() == "cuda" and ck.is_available()
    if args.mib is None:
        args.mib = 1024 if gpu else 16
    where = ck.get_device_name(0) if gpu else f"{ck.backend_name()} backend"
    print(f"## Jiterator ({where}; a*x+y fp32, {args.mib} MiB per array)\n")
    print("| what | ms | GB/s |")
    print("|---|---|---|")
    for name, ms, gbs in throughput(args):
        print(f"| {name} | {ms:.3f} | {gbs:.0f} |")
    print()
    print("| library | cold first call (ms) | of which compile (ms) | warm-start first call (ms) | next call (ms) |")
    print("|---|---|---|---|---|")
    for row in compile_and_warm_start(args):
        print(row)


if __name__ == "__main__":
    main()
