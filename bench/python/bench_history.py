"""Cost of allocation-history recording, cudakit vs torch, side by side in one run:
caching_allocator_alloc + caching_allocator_delete pairs (µs per pair, median of repeats)
with history off, on with C++ stacks, and on with Python + C++ stacks
(_record_memory_history(enabled="all", context="all", stacks=...)).

    CUDAKIT_BACKEND=cuda PYTHONPATH=build/python python3 bench/python/bench_history.py
torch's column is skipped when torch (or its GPU) is unavailable, e.g. on the emulated backend.
"""
import argparse
import os
import statistics
import sys
import time


def pair_us(mem, size, n, repeats):
    alloc, delete = mem.caching_allocator_alloc, mem.caching_allocator_delete
    for _ in range(n // 10):
        delete(alloc(size))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            delete(alloc(size))
        samples.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(samples)


# torch 2.11 accepts stacks="python" or "all" only; "cpp" is cudakit's extra mode.
MODES = [("off", None), ("Python stacks", "python"), ("Python+C++ stacks", "all"),
         ("C++ stacks (cudakit only)", "cpp")]


def suite(mem, sizes, n, repeats, is_torch):
    out = {}
    for label, stacks in MODES:
        if is_torch and stacks == "cpp":
            continue
        if stacks:
            mem._record_memory_history(enabled="all", context="all", stacks=stacks, max_entries=100000)
        try:
            for size in sizes:
                out[(label, size)] = pair_us(mem, size, n, repeats)
        finally:
            mem._record_memory_history(enabled=None)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    sizes = [512, 1 << 20]

    import cudakit
    import cudakit.memory as ck_mem
    libs = {"cudakit": ck_mem}
    torch_note = ""
    if os.environ.get("CUDAKIT_BACKEND") == "emulated":
        torch_note = "torch skipped: emulated backend"
    else:
        try:
            import torch
            if torch.cuda.is_available():
                torch.cuda.init()
                libs["torch"] = torch.cuda.memory
            else:
                torch_note = "torch skipped: torch.cuda unavailable"
        except ImportError:
            torch_note = "torch skipped: not installed"
    cudakit.synchronize()

    results = {name: suite(mem, sizes, args.n, args.repeats, name == "torch")
               for name, mem in libs.items()}
    have_torch = "torch" in results
    print(f"backend: {cudakit.get_backend() if hasattr(cudakit, 'get_backend') else ''}")
    hdr = "| history | size | cudakit µs | cudakit ×off |"
    sep = "|---|---|---|---|"
    if have_torch:
        hdr += " torch µs | torch ×off | cudakit/torch |"
        sep += "---|---|---|"
    print(hdr)
    print(sep)
    for label, _ in MODES:
        for size in sizes:
            c = results["cudakit"][(label, size)]
            c_off = results["cudakit"][("off", size)]
            row = f"| {label} | {size} | {c:.3f} | {c / c_off:.2f} |"
            if have_torch and (label, size) in results["torch"]:
                t = results["torch"][(label, size)]
                t_off = results["torch"][("off", size)]
                row += f" {t:.3f} | {t / t_off:.2f} | {c / t:.2f} |"
            print(row)
    if torch_note:
        print(torch_note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
