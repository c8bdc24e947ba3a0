"""Collectives between two devices (issue 12, section 3), side by side with torch in one run:

  comm.broadcast 1 GiB 0->1            torch 2.11 / 2xH200: 353 GB/s   goal >= 390 GB/s
  comm.reduce_add 2 x 1 GiB -> 0       torch: 352 GB/s                  goal >= 390 GB/s
  x.to("cuda:1") 1 GiB                 torch: 384 GB/s (the copy-engine reference)
  nccl.all_reduce 1 GiB, bus bandwidth torch: 318 GB/s (NCCL 2.28)      goal >= torch
  nccl.all_reduce 8 KiB latency        goal <= torch
  comm.broadcast 8 KiB latency         reported

cudakit's comm rows are measured for every transport (auto, peer kernels, NCCL, copies), so
the table shows which one wins on this machine. Bandwidth = bytes moved per second of one
operation: a broadcast or a reduce_add of 1 GiB moves 1 GiB between the devices; the
all_reduce bus bandwidth is NCCL's busBw = size / time * 2 (n - 1) / n. Times are wall-clock
over a batch of operations after warm-up, with both devices synchronized at the ends (so
launch overhead is part of the latency rows, as a user sees it); medians over rounds.

Needs two devices. Run: CUDAKIT_BACKEND=cuda PYTHONPATH=build/python python3 bench/comm/bench_comm.py
(CUDAKIT_BENCH_QUICK=1 for a short run; on the emulated backend sizes shrink and torch is
skipped.)
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import cudakit as ck

GIB = 1 << 30
EMULATED = ck.backend_name() != "cuda"
QUICK = os.environ.get("CUDAKIT_BENCH_QUICK") == "1" or EMULATED
BIG = (16 << 20) if EMULATED else GIB
SMALL = 8 << 10
ROUNDS = 3 if QUICK else 5
TRANSPORTS = ["auto", "peer", "nccl", "copy"]


def torch_cuda():
    if os.environ.get("CUDAKIT_BENCH_NO_TORCH") == "1" or EMULATED:
        return None
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() and torch.cuda.device_count() >= 2 else None


def timed(op, sync, iters, rounds=ROUNDS, warmup=2):
    """Median seconds per op."""
    for _ in range(warmup):
        op()
    sync()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            op()
        sync()
        out.append((time.perf_counter() - t0) / iters)
    return statistics.median(out)


def ck_sync():
    ck.synchronize(0)
    ck.synchronize(1)


def row(name, torch_value, ck_values, unit, goal=""):
    def fmt(v):
        return "n/a" if v is None else (f"{v:.1f}" if unit == "GB/s" else f"{v:.2f}")
    cells = " | ".join(fmt(ck_values.get(t)) for t in TRANSPORTS)
    print(f"| {name} | {unit} | {fmt(torch_value)} | {cells} | {goal} |", flush=True)


def with_transport(name, fn):
    ck.comm.set_transport(name)
    try:
        return fn()
    except (NotImplementedError, RuntimeError) as e:
        print(f"  ({name}: {e})", file=sys.stderr)
        return None
    finally:
        ck.comm.set_transport("auto")


def main():
    if ck.device_count() < 2:
        print("bench_comm: needs two devices; skipped")
        return
    torch = torch_cuda()
    tsync = (lambda: (torch.cuda.synchronize(0), torch.cuda.synchronize(1))) if torch else None
    big_iters = 5 if QUICK else 20
    small_iters = 200 if QUICK else 2000
    n_big = BIG // 4
    n_small = SMALL // 4
    print(f"backend {ck.backend_name()}, {ck.get_device_name(0)} x {ck.device_count()}, "
          f"nccl {'.'.join(map(str, ck.nccl.version()))}"
          + (f", torch {torch.__version__} (nccl {'.'.join(map(str, torch.cuda.nccl.version()))})" if torch else ""))
    print(f"\n| operation | unit | torch | cudakit auto | cudakit peer | cudakit nccl | cudakit copy | goal |")
    print("|---|---|---|---|---|---|---|---|")

    # ---- broadcast 1 GiB 0 -> 1
    x = ck.ones(n_big, device="cuda:0")
    res = {t: with_transport(t, lambda: BIG / timed(lambda: ck.comm.broadcast(x, [0, 1]), ck_sync, big_iters) / 1e9)
           for t in TRANSPORTS}
    tv = None
    if torch:
        tx = torch.ones(n_big, device="cuda:0")
        tv = BIG / timed(lambda: torch.cuda.comm.broadcast(tx, [0, 1]), tsync, big_iters) / 1e9
    row(f"comm.broadcast {BIG >> 20} MiB 0->1", tv, res, "GB/s", ">= 1.1x torch")

    # ---- reduce_add 2 x 1 GiB -> 0
    y = ck.ones(n_big, device="cuda:1")
    res = {t: with_transport(t, lambda: BIG / timed(lambda: ck.comm.reduce_add([x, y], 0), ck_sync, big_iters) / 1e9)
           for t in TRANSPORTS}
    tv = None
    if torch:
        ty = torch.ones(n_big, device="cuda:1")
        tv = BIG / timed(lambda: torch.cuda.comm.reduce_add([tx, ty], 0), tsync, big_iters) / 1e9
    row(f"comm.reduce_add 2 x {BIG >> 20} MiB", tv, res, "GB/s", ">= 1.1x torch")
    del y

    # ---- x.to("cuda:1") (the copy engine's reference; not a comm transport)
    cv = BIG / timed(lambda: x.to("cuda:1"), ck_sync, big_iters) / 1e9
    tv = BIG / timed(lambda: tx.to("cuda:1"), tsync, big_iters) / 1e9 if torch else None
    row(f'x.to("cuda:1") {BIG >> 20} MiB', tv, {"auto": cv}, "GB/s", "reference")

    # ---- nccl.all_reduce 1 GiB bus bandwidth (in place), and 8 KiB latency
    a = [ck.ones(n_big, device=f"cuda:{d}") for d in (0, 1)]
    t = timed(lambda: ck.nccl.all_reduce(a), ck_sync, big_iters)
    cv = BIG / t / 1e9 * 2 * (2 - 1) / 2
    tv = None
    if torch:
        ta = [torch.ones(n_big, device=f"cuda:{d}") for d in (0, 1)]
        tv = BIG / timed(lambda: torch.cuda.nccl.all_reduce(ta), tsync, big_iters) / 1e9 * 2 * (2 - 1) / 2
        del ta
    row(f"nccl.all_reduce {BIG >> 20} MiB busbw", tv, {"nccl": cv}, "GB/s", ">= torch")
    del a
    s = [ck.ones(n_small, device=f"cuda:{d}") for d in (0, 1)]
    cv = timed(lambda: ck.nccl.all_reduce(s), ck_sync, small_iters) * 1e6
    tv = None
    if torch:
        ts = [torch.ones(n_small, device=f"cuda:{d}") for d in (0, 1)]
        tv = timed(lambda: torch.cuda.nccl.all_reduce(ts), tsync, small_iters) * 1e6
    row("nccl.all_reduce 8 KiB latency", tv, {"nccl": cv}, "us", "<= torch")

    # ---- small-message broadcast latency
    sx = ck.ones(n_small, device="cuda:0")
    res = {t: with_transport(t, lambda: timed(lambda: ck.comm.broadcast(sx, [0, 1]), ck_sync, small_iters) * 1e6)
           for t in TRANSPORTS}
    tv = None
    if torch:
        tsx = torch.ones(n_small, device="cuda:0")
        tv = timed(lambda: torch.cuda.comm.broadcast(tsx, [0, 1]), tsync, small_iters) * 1e6
    row("comm.broadcast 8 KiB latency", tv, res, "us", "reported")


if __name__ == "__main__":
    main()
