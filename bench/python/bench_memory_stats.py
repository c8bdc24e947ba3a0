"""Cost of memory_stats() from Python, cudakit vs torch side by side in one run (issue 31:
goal <= 10 us): µs per call, median (and min) of --repeats batches of --n calls, with a few
live allocations so the counters are not all zero. Also checks that both return an
OrderedDict with the same torch keys in the same (sorted) order.

    CUDAKIT_BACKEND=cuda PYTHONPATH=build/python python3 bench/python/bench_memory_stats.py
torch's column is skipped when torch (or its GPU) is unavailable, e.g. on the emulated backend.
"""
import argparse
import collections
import os
import statistics
import time


def per_call_us(fn, n, repeats):
    for _ in range(n // 10):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(samples), min(samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()

    import cudakit.memory as ck
    libs = {"cudakit": ck}
    note = ""
    if os.environ.get("CUDAKIT_BACKEND") == "emulated":
        note = "torch skipped: emulated backend"
    else:
        try:
            import torch
            if torch.cuda.is_available():
                torch.cuda.init()
                libs["torch"] = torch.cuda.memory
            else:
                note = "torch skipped: torch.cuda unavailable"
        except ImportError:
            note = "torch skipped: not installed"
    live = {name: [mem.caching_allocator_alloc(size) for size in (512, 1 << 20, 3 << 20)]
            for name, mem in libs.items()}
    print("| library | µs per memory_stats() median | min | keys |")
    print("|---|---|---|---|")
    results = {}
    for name, mem in libs.items():
        st = mem.memory_stats()
        assert isinstance(st, collections.OrderedDict), type(st)
        assert list(st) == sorted(st), f"{name}: keys not sorted"
        results[name] = st
        med, lo = per_call_us(mem.memory_stats, args.n, args.repeats)
        print(f"| {name} | {med:.2f} | {lo:.2f} | {len(st)} |")
    if "torch" in results:
        ours = [k for k in results["cudakit"] if k in results["torch"]]
        theirs = list(results["torch"])
        missing = [k for k in theirs if k not in results["cudakit"]]
        print(f"torch keys missing in cudakit: {missing or 'none'}; "
              f"common keys in the same order: {ours == [k for k in theirs if k in results['cudakit']]}")
    if note:
        print(note)
    for name, mem in libs.items():
        for p in live[name]:
            mem.caching_allocator_delete(p)


if __name__ == "__main__":
    main()
