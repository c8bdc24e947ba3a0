"""NVTX call costs from Python with no tool attached, cudakit.nvtx vs torch.cuda.nvtx side by
side in one run (best of several timeit repeats, nanoseconds per iteration, loop included).

    PYTHONPATH=build/python python3 bench/nvtx/bench_nvtx.py [--json FILE]

Goal (issue 10): <= 0.3x torch for range_push+range_pop, mark and `with range()`. Without torch
the ratio is taken against torch 2.11 on the H200 host (367 / 218 / 1418 ns). Keep
NVTX_INJECTION64_PATH unset: this measures the production case, annotations with no tool.
"""
import argparse
import json
import os
import sys
import timeit

# torch 2.11 on the H200 host (issue 10), used when torch is not importable here.
TORCH_H200_NS = {"range_push+range_pop": 367.0, "mark": 218.0, "with range()": 1418.0}
GOAL_RATIO = 0.3

CASES = [
    # name, statement (nvtx = the module under test), needs cudakit's extensions
    ("range_push+range_pop", "nvtx.range_push('step'); nvtx.range_pop()", False),
    ("mark", "nvtx.mark('step')", False),
    ("with range()", "with nvtx.range('step'):\n    pass", False),
    ("with range('{}', i)", "with nvtx.range('step {}', 7):\n    pass", False),
    ("range_start+range_end", "nvtx.range_end(nvtx.range_start('step'))", False),
    ("decorated call", "decorated()", False),
    ("push+pop color/category/payload",
     "nvtx.range_push('step', color=0x00FF00, category=3, payload=1.5); nvtx.range_pop()", True),
    ("push+pop domain=cudakit_domain",
     "nvtx.range_push('step', domain=dom); nvtx.range_pop(domain=dom)", True),
]


def measure(nvtx, stmt, number=200_000, repeat=7):
    @nvtx.range("decorated")
    def decorated():
        pass

    env = {"nvtx": nvtx, "decorated": decorated, "dom": getattr(nvtx, "cudakit_domain", None)}
    best = min(timeit.repeat(stmt, globals=env, number=number, repeat=repeat))
    return best / number * 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args()
    if os.environ.get("NVTX_INJECTION64_PATH"):
        print("warning: NVTX_INJECTION64_PATH is set: a tool is attached", file=sys.stderr)

    import cudakit.nvtx as ck_nvtx

    results = {"cudakit": {}, "torch": {}}
    for name, stmt, ext in CASES:
        results["cudakit"][name] = measure(ck_nvtx, stmt)
    torch_source = "torch 2.11 on the H200 host (issue 10)"
    try:
        import torch
        import torch.cuda.nvtx as t_nvtx

        torch_source = f"torch {torch.__version__}, this run"
        for name, stmt, ext in CASES:
            if not ext:
                results["torch"][name] = measure(t_nvtx, stmt)
    except ImportError:
        results["torch"] = dict(TORCH_H200_NS)

    print(f"cudakit.nvtx vs {torch_source}; ns per iteration, no tool attached\n")
    print("| call | cudakit ns | torch ns | ratio | goal <= 0.3x |")
    print("|---|---:|---:|---:|---|")
    for name, _, _ in CASES:
        ck = results["cudakit"][name]
        th = results["torch"].get(name)
        ratio = f"{ck / th:.2f}x" if th else "-"
        goal = ("met" if ck / th <= GOAL_RATIO else "MISSED") if name in TORCH_H200_NS and th \
            else ""
        print(f"| {name} | {ck:.0f} | {th:.0f} | {ratio} | {goal} |" if th else
              f"| {name} | {ck:.0f} | - | - | |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch_source": torch_source, **results}, f, indent=2)


if __name__ == "__main__":
    main()
