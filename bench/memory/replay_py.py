"""Side-by-side trace replay through the *Python* caching-allocator entry points of cudakit
and (when importable) PyTorch, in one run, on the GPU:

    python bench/memory/replay_py.py /work/shared/traces/vit_train.trace.gz [more.trace.gz]

For each allocator/config it reports peak allocated, peak reserved, their ratio
(fragmentation; 1.0 is ideal), device allocation calls and the wall time of the replay.
Configs: cudakit default (expandable segments) / expandable_segments:False (torch-compatible;
each in a fresh subprocess, since allocator settings are read at start-up), torch default /
expandable_segments:True.

The C++ tool build/bench/memory/memory_replay measures cudakit without Python overhead.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time

CONFIGS = [("cudakit", ""), ("cudakit", "expandable_segments:False"),
           ("torch", ""), ("torch", "expandable_segments:True")]


def load(path: str):
    events = []
    header = ""
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.startswith("#"):
                header = line.strip()
                continue
            parts = line.split()
            if parts[0] == "a":
                events.append((True, int(parts[1]), int(parts[2]), int(parts[3]) if len(parts) > 3 else 0))
            elif parts[0] == "f":
                events.append((False, int(parts[1]), 0, 0))
    return header, events


def run_one(lib: str, path: str) -> dict:
    _, events = load(path)
    if lib == "cudakit":
        import cudakit.memory as m

        alloc, free = m.caching_allocator_alloc, m.caching_allocator_delete
        make_stream = lambda: __import__("cudakit").Stream()  # noqa: E731
        stats = m.memory_stats
        sync = __import__("cudakit").synchronize
    else:
        import torch

        torch.cuda.init()
        alloc, free = torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete
        make_stream = torch.cuda.Stream
        stats = torch.cuda.memory_stats
        sync = torch.cuda.synchronize
    streams = {}
    for is_alloc, _, _, s in events:
        if is_alloc and s and s not in streams:
            streams[s] = make_stream()
    # One replay is ~2-150 ms, so a single sample is at the mercy of the host: the two copies
    # of mlp_train (identical events) measured 0.92x and 1.20x torch in one H100 run
    # (2026-12-07). The replay is repeated REPLAY_REPEATS times (default 5), each from an
    # empty cache (everything freed, empty_cache, synchronize: the driver calls happen again),
    # and the median reported; the memory figures are the first replay's.
    repeats = max(1, int(os.environ.get("REPLAY_REPEATS", "5")))
    empty_cache = m.empty_cache if lib == "cudakit" else torch.cuda.empty_cache
    times, st = [], None
    for _ in range(repeats):
        live = {}
        sync()
        t0 = time.perf_counter()
        for is_alloc, ident, size, s in events:
            if is_alloc:
                live[ident] = alloc(size, 0, streams[s]) if s else alloc(size, 0)
            else:
                p = live.pop(ident, None)
                if p is not None:
                    free(p)
        times.append((time.perf_counter() - t0) * 1e3)
        if st is None:
            st = stats(0)
        for p in live.values():
            free(p)
        sync()
        empty_cache()
    times.sort()
    return {"peak_alloc": st["allocated_bytes.all.peak"], "peak_reserved": st["reserved_bytes.all.peak"],
            "device_allocs": st.get("num_device_alloc", st["segment.all.allocated"]),
            "ms": times[len(times) // 2], "ms_all": times, "events": len(events)}


def main() -> int:
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        print(json.dumps(run_one(sys.argv[2], sys.argv[3])))
        return 0
    paths = sys.argv[1:]
    if not paths:
        print(__doc__)
        return 2
    print(f"{'trace':22} {'allocator':10} {'config':26} {'peak_alloc':>14} {'peak_reserved':>14} "
          f"{'ratio':>7} {'dev_alloc':>9} {'ms':>9} {'us/op':>7}")
    for path in paths:
        header, _ = load(path)
        for lib, conf in CONFIGS:
            env = dict(os.environ)
            env.pop("CUDAKIT_ALLOC_CONF", None)
            env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            env.pop("PYTORCH_ALLOC_CONF", None)
            if conf:
                env["CUDAKIT_ALLOC_CONF" if lib == "cudakit" else "PYTORCH_CUDA_ALLOC_CONF"] = conf
            r = subprocess.run([sys.executable, __file__, "--child", lib, path], env=env,
                               capture_output=True, text=True)
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or ["?"])[-1]
                print(f"{os.path.basename(path):22} {lib:10} {conf or 'default':26} unavailable: {last}")
                continue
            d = json.loads(r.stdout.strip().splitlines()[-1])
            ratio = d["peak_reserved"] / max(1, d["peak_alloc"])
            print(f"{os.path.basename(path):22} {lib:10} {conf or 'default':26} {d['peak_alloc']:14d} "
                  f"{d['peak_reserved']:14d} {ratio:7.3f} {d['device_allocs']:9d} {d['ms']:9.1f} "
                  f"{d['ms'] * 1e3 / d['events']:7.2f}")
        print(f"  reference {header}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
