"""CUDA graph host costs from Python (issue 9, section 5), side by side in one process:

  replay of a 10-kernel graph: cudakit CUDAGraph.replay() vs raw cuGraphLaunch of the same
      exec graph through ctypes (cuda backend) vs torch.cuda.CUDAGraph.replay() of the same
      workload (when torch with CUDA is importable); goal: cudakit <= raw + 0.3 us
  replay with 1 / 4 trivial Python hooks registered (goal: <= +0.2 us per hook in C++;
      Python hooks cost a Python call each)
  capture + instantiate of a 1000-kernel graph (torch 2.11 on the H200: 4.3 ms)
  an 8-layer 256-wide MLP step, eager vs make_graphed_callables (cudakit: forward only;
      torch: forward only too, so the rows compare like with like)

Replays are timed in batches of 4 with a synchronize outside the timed region (a shallow
launch queue, as the torch anchors were measured). Medians over rounds are printed.
Run: CUDAKIT_BACKEND=cuda|emulated PYTHONPATH=build/python python3 bench/graphs/bench_graphs.py
"""
from __future__ import annotations

import ctypes
import os
import statistics
import time

import cudakit as ck

BATCH = 4
QUICK = os.environ.get("CUDAKIT_BENCH_QUICK") == "1" or ck.backend_name() == "emulated"
ROUNDS = 5
BATCHES = 500 if QUICK else 5000


def per_call_us(launch, sync, batches=BATCHES, rounds=ROUNDS):
    """Median over rounds of the mean host time of one call, in microseconds."""
    results = []
    for _ in range(rounds):
        total = 0
        for _ in range(batches):
            t0 = time.perf_counter_ns()
            for _ in range(BATCH):
                launch()
            total += time.perf_counter_ns() - t0
            sync()
        results.append(total / (batches * BATCH) / 1000.0)
    return statistics.median(results)


def torch_cuda():
    if os.environ.get("CUDAKIT_BENCH_NO_TORCH") == "1" or ck.backend_name() != "cuda":
        return None
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def raw_launcher(graph, stream):
    """cuGraphLaunch(exec, stream) through ctypes, the anchor's "raw launch"."""
    if ck.backend_name() != "cuda":
        return None
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuGraphLaunch
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    exec_ = ctypes.c_void_p(graph.raw_cuda_graph_exec())
    handle = ctypes.c_void_p(stream.cuda_stream)

    def launch():
        rc = fn(exec_, handle)
        if rc:
            raise RuntimeError(f"cuGraphLaunch failed: {rc}")
    return launch


def row(name, value, note=""):
    v = "n/a" if value is None else f"{value:.2f}"
    print(f"| {name} | {v} | {note} |")


def bench_replay():
    x = ck.zeros(1024, device="cuda")
    one = ck.ones(1024, device="cuda")
    s = ck.Stream()
    g = ck.CUDAGraph()
    with ck.graph(g, stream=s):
        for _ in range(10):
            x.add_(one)
    with ck.stream(s):
        cudakit_us = per_call_us(g.replay, s.synchronize)
        raw = raw_launcher(g, s)
        raw_us = per_call_us(raw, s.synchronize) if raw else None
        hooks = {}
        for n in (1, 4):
            handles = [ck.graphs.register_graph_replay_start_hook(lambda gr: None)
                       for _ in range(n)]
            hooks[n] = per_call_us(g.replay, s.synchronize)
            for h in handles:
                h.remove()
    torch = torch_cuda()
    torch_us = None
    if torch is not None:
        tx = torch.zeros(1024, device="cuda")
        tone = torch.ones(1024, device="cuda")
        ts = torch.cuda.Stream()
        tg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(tg, stream=ts):
            for _ in range(10):
                tx.add_(tone)
        with torch.cuda.stream(ts):
            torch_us = per_call_us(tg.replay, ts.synchronize)
    print("| replay of a 10-kernel graph (host us per replay) | value | note |")
    print("|---|---|---|")
    row("cudakit CUDAGraph.replay()", cudakit_us)
    row("raw cuGraphLaunch (ctypes)", raw_us, "cuda backend only")
    if raw_us:
        row("cudakit - raw (goal <= 0.3)", cudakit_us - raw_us)
    row("torch.cuda.CUDAGraph.replay()", torch_us, "H200 torch 2.11 anchor: 2.40")
    for n, us in hooks.items():
        row(f"cudakit replay, {n} trivial Python hook(s)", us,
            f"+{(us - cudakit_us) / n:.2f} per hook")
    print()


def bench_capture(n=1000):
    x = ck.zeros(1024, device="cuda")
    one = ck.ones(1024, device="cuda")
    s = ck.Stream()

    def once():
        g = ck.CUDAGraph()
        ck.synchronize()
        t0 = time.perf_counter()
        with ck.stream(s):
            g.capture_begin()
            for _ in range(n):
                x.add_(one)
            g.capture_end()
        dt = time.perf_counter() - t0
        g.reset()
        return dt * 1e3
    once()
    cudakit_ms = statistics.median(once() for _ in range(5 if QUICK else 11))
    torch = torch_cuda()
    torch_ms = None
    if torch is not None:
        tx = torch.zeros(1024, device="cuda")
        tone = torch.ones(1024, device="cuda")
        ts = torch.cuda.Stream()

        def tonce():
            g = torch.cuda.CUDAGraph()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.cuda.stream(ts):
                g.capture_begin()
                for _ in range(n):
                    tx.add_(tone)
                g.capture_end()
            dt = time.perf_counter() - t0
            g.reset()
            return dt * 1e3
        tonce()
        torch_ms = statistics.median(tonce() for _ in range(11))
    print(f"| capture + instantiate, {n} kernels (ms) | value | note |")
    print("|---|---|---|")
    row("cudakit", cudakit_ms)
    row("torch", torch_ms, "H200 torch 2.11 anchor: 4.3")
    print()


def bench_mlp(layers=8, width=256, batch=256):
    if QUICK:  # the emulated backend's matmul runs on the host: keep it a smoke run
        width, batch = 64, 64
    ck.manual_seed(0)
    ws = [ck.randn(width, width, device="cuda") * (1.0 / width ** 0.5) for _ in range(layers)]

    def forward(x):
        for w in ws:
            x = (x @ w).relu()
        return x
    x = ck.randn(batch, width, device="cuda")
    steps = 20 if QUICK else 500

    def time_steps(fn):
        fn(x)
        ck.synchronize()
        results = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(steps):
                fn(x)
            ck.synchronize()
            results.append((time.perf_counter() - t0) / steps * 1e6)
        return statistics.median(results)
    eager = time_steps(forward)
    graphed = time_steps(ck.make_graphed_callables(forward, (x,)))
    torch = torch_cuda()
    t_eager = t_graphed = None
    if torch is not None:
        torch.manual_seed(0)
        tws = [torch.randn(width, width, device="cuda") / width ** 0.5 for _ in range(layers)]
        tx = torch.randn(batch, width, device="cuda")

        def tforward(v):
            for w in tws:
                v = (v @ w).relu()
            return v

        def ttime(fn):
            fn(tx)
            torch.cuda.synchronize()
            res = []
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(steps):
                    fn(tx)
                torch.cuda.synchronize()
                res.append((time.perf_counter() - t0) / steps * 1e6)
            return statistics.median(res)
        t_eager = ttime(tforward)
        t_graphed = ttime(torch.cuda.make_graphed_callables(tforward, (tx,)))
    print(f"| {layers}-layer {width}-wide MLP forward, batch {batch} (us per step) | value | note |")
    print("|---|---|---|")
    row("cudakit eager", eager)
    row("cudakit make_graphed_callables", graphed, f"{eager / graphed:.1f}x faster")
    row("torch eager (forward only)", t_eager)
    row("torch make_graphed_callables (forward only)", t_graphed,
        "anchor fwd+bwd: 1184 eager vs 380 graphed")
    print()


def main():
    print(f"backend: {ck.backend_name()}, device: {ck.get_device_name()}")
    print()
    bench_replay()
    bench_capture()
    bench_mlp()


if __name__ == "__main__":
    main()
