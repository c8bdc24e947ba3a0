"""Python-level stream/event/device call costs, cudakit vs torch.cuda, side by side in one
run (median of repeated timings, microseconds per call).

    CUDAKIT_BACKEND=cuda PYTHONPATH=build/python python3 bench/python/bench_streams.py
Prints a Markdown table; --json FILE also writes the numbers.
"""
import argparse
import json
import statistics
import sys
import time


def per_call_us(fn, n=20000, repeats=7):
    for _ in range(n // 10):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(samples)


def suite(mod):
    s = mod.Stream()
    ev = mod.Event()
    ctx_stream = s

    def stream_ctx():
        with mod.stream(ctx_stream):
            pass

    mod.synchronize()
    return {
        "current_stream()": per_call_us(mod.current_stream),
        "Event.record()": per_call_us(ev.record),
        "Event() create": per_call_us(mod.Event),
        "with stream(s)": per_call_us(stream_ctx),
        "current_device()": per_call_us(mod.current_device),
        "synchronize() idle": per_call_us(mod.synchronize, n=5000),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    import cudakit

    results = {"cudakit": suite(cudakit)}
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.init()
            results["torch"] = suite(torch.cuda)
    except ImportError:
        pass
    names = list(results["cudakit"].keys())
    print(f"backend={cudakit.backend_name()} device={cudakit.get_device_name()}")
    header = "| call | cudakit (us) |" + (" torch (us) | torch/cudakit |" if "torch" in results else "")
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for n in names:
        row = f"| {n} | {results['cudakit'][n]:.3f} |"
        if "torch" in results:
            t = results["torch"][n]
            row += f" {t:.3f} | {t / results['cudakit'][n]:.1f}x |"
        print(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
