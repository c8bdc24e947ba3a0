#!/usr/bin/env python3
"""Pinned host memory, cudakit vs torch in one process: alloc+free of pinned tensors and
host <-> device copy bandwidth (issue 3; the H200's PCIe Gen5 x16 gave ~55 GB/s with torch).

Usage:
  GPU:       PYTHONPATH=<build>/python python3 bench/python/bench_pinned.py [--json out.json]
  no GPU:    CUDAKIT_BACKEND=emulated PYTHONPATH=<build>/python python3 bench/python/bench_pinned.py --quick
             (torch columns are skipped when torch or torch.cuda is unavailable; emulated
             "bandwidth" is a host memcpy, a smoke test only)

BENCH_PINNED_PYBIND11=1 adds a column for cudakit.empty's pybind11 function (what
cudakit.empty was before its METH_FASTCALL front, issue 15.5).

Cases (each library with its own tensors, streams, events and copy):
  alloc+free  empty(n, dtype=uint8, device="cpu", pin_memory=True) then drop it; the size
              class is warmed first (cached path). us per pair, median of --reps batches.
  H2D / D2H   dst.copy_(src, non_blocking=True) between a pinned host tensor and a device
              tensor, a batch of copies (>= 256 MiB in total) between two timing events on
              the current stream; GB/s (1e9 B/s), median of --reps batches.
  pageable    the same H2D/D2H from ordinary (pageable) host memory, for contrast.
The data is random bytes (never zeros) and every copy direction is checked afterwards.
torch's best pinned H2D/D2H number is printed as the physical-limit reference.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

KIB, MIB = 1 << 10, 1 << 20
BATCH_BYTES = 256 * MIB  # per timed batch: ~5 ms at 55 GB/s, enough for event resolution


def median_pair_us(make, iters, reps):
    """Median over `reps` batches of `iters` make()-then-drop pairs, microseconds per pair."""
    make()  # warm the size class
    times = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            make()  # the result is dropped at once: one alloc + one free
        times.append((time.perf_counter_ns() - t0) / iters / 1e3)
    return statistics.median(times)


def median_gbps(event_cls, copy, nbytes, reps, batch_bytes):
    """Median GB/s over `reps` event-timed batches of copy() calls."""
    batch = max(1, batch_bytes // nbytes)
    copy()  # warm-up
    times = []
    for _ in range(reps):
        start, end = event_cls(enable_timing=True), event_cls(enable_timing=True)
        start.record()
        for _ in range(batch):
            copy()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)  # seconds
    return batch * nbytes / statistics.median(times) / 1e9


class Lib:
    """The few calls the bench needs, for one library."""

    def __init__(self, name, empty, event_cls, uint8, to_numpy, from_numpy):
        self.name, self.empty, self.event_cls, self.uint8 = name, empty, event_cls, uint8
        self.to_numpy, self.from_numpy = to_numpy, from_numpy

    def pinned(self, n):
        return self.empty(n, dtype=self.uint8, device="cpu", pin_memory=True)

    def pageable(self, n):
        return self.empty(n, dtype=self.uint8, device="cpu")

    def device(self, n):
        return self.empty(n, dtype=self.uint8, device="cuda")


def make_libs():
    import cudakit as ck
    import cudakit.tensor as T
    libs = [Lib("cudakit", T.empty, ck.Event, T.uint8, lambda t: t.numpy(),
                lambda a: T.asarray(a))]
    if os.environ.get("BENCH_PINNED_PYBIND11"):
        # The pybind11 function behind cudakit.empty's fast path (issue 15.5's "before").
        libs.append(Lib("cudakit_pybind11", ck._C._empty_pybind11, ck.Event, T.uint8,
                        lambda t: t.numpy(), lambda a: T.asarray(a)))
    why = None
    try:
        import torch
        if torch.cuda.is_available() and os.environ.get("CUDAKIT_BACKEND", "") != "emulated":
            libs.append(Lib("torch", torch.empty, torch.cuda.Event, torch.uint8,
                            lambda t: t.numpy(), torch.from_numpy))
        else:
            why = "torch.cuda unavailable" if not torch.cuda.is_available() else "emulated backend"
    except ImportError:
        why = "torch not installed"
    return libs, why


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7, help="timed batches per case (median)")
    ap.add_argument("--iters", type=int, default=2000, help="alloc+free pairs per batch")
    ap.add_argument("--quick", action="store_true", help="small batches (smoke test)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    batch_bytes = 16 * MIB if args.quick else BATCH_BYTES
    if args.quick:
        args.reps, args.iters = 3, 200

    libs, why = make_libs()
    rows = []  # {"case", "unit", "higher_is_better", lib.name: value}

    def row(case, unit, higher, values):
        r = {"case": case, "unit": unit, "higher_is_better": higher, **values}
        rows.append(r)
        print(json.dumps(r), flush=True)

    # ---- alloc + free of pinned tensors (cached path) ----
    for n in (4 * KIB, MIB, 64 * MIB):
        iters = args.iters if n <= MIB else max(50, args.iters // 10)
        row(f"pinned alloc+free {n // KIB} KiB" if n < MIB else f"pinned alloc+free {n // MIB} MiB",
            "us/pair", False,
            {lib.name: median_pair_us(lambda lib=lib: lib.pinned(n), iters, args.reps) for lib in libs})

    # ---- copy bandwidth ----
    rng = np.random.default_rng(1234)
    failures = []
    sizes = (MIB, 64 * MIB, 256 * MIB) if not args.quick else (MIB, 16 * MIB)
    for n in sizes:
        data = rng.integers(1, 256, size=n, dtype=np.uint8)  # random, never zero
        for pinned in (True, False):
            if not pinned and n != 64 * MIB and not args.quick:
                continue  # pageable: one size is enough for contrast
            kind = "pinned" if pinned else "pageable"
            h2d, d2h = {}, {}
            for lib in libs:
                host = lib.pinned(n) if pinned else lib.pageable(n)
                host.copy_(lib.from_numpy(data))
                dev = lib.device(n)
                h2d[lib.name] = median_gbps(lib.event_cls, lambda: dev.copy_(host, non_blocking=True),
                                            n, args.reps, batch_bytes)
                back = lib.pinned(n) if pinned else lib.pageable(n)
                back.fill_(0)  # poison: the D2H copies must overwrite all of it
                d2h[lib.name] = median_gbps(lib.event_cls, lambda: back.copy_(dev, non_blocking=True),
                                            n, args.reps, batch_bytes)
                if not np.array_equal(lib.to_numpy(back), data):
                    failures.append(f"{lib.name} {kind} {n} B: round trip H2D+D2H changed the bytes")
                del host, dev, back
            label = f"{n // MIB} MiB {kind}"
            row(f"H2D {label}", "GB/s", True, h2d)
            row(f"D2H {label}", "GB/s", True, d2h)

    # ---- summary (last, so it is the tail of the output) ----
    names = [lib.name for lib in libs]
    print()
    if why:
        print(f"torch columns skipped: {why}")
    backend = os.environ.get("CUDAKIT_BACKEND", "auto")
    print(f"backend={backend}, median of {args.reps} batches; GB/s = 1e9 B/s; "
          f"copy batches of {batch_bytes // MIB} MiB")
    print("| case | cudakit | torch | cudakit/torch |")
    print("|---|---|---|---|")
    for r in rows:
        c = r["cudakit"]
        t = r.get("torch")
        fmt = (lambda v: f"{v:.2f} {r['unit']}") if r["unit"] == "GB/s" else (lambda v: f"{v:.2f} {r['unit']}")
        ratio = f"{c / t:.2f}" if t else "-"
        if t and not r["higher_is_better"]:
            ratio += " (lower is better)"
        print(f"| {r['case']} | {fmt(c)} | {fmt(t) if t else '-'} | {ratio} |")
    if "torch" in names:
        best = {d: max(r["torch"] for r in rows if r["case"].startswith(d) and "pinned" in r["case"])
                for d in ("H2D", "D2H")}
        print(f"\nphysical-limit reference (torch, best pinned): H2D {best['H2D']:.1f} GB/s, "
              f"D2H {best['D2H']:.1f} GB/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "failures": failures, "torch_skipped": why}, f, indent=1)
    if failures:
        print("\nFAILED checks:\n  " + "\n  ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
