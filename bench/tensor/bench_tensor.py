#!/usr/bin/env python3
"""Side-by-side bandwidth/throughput of cudakit's built-in ops and torch on the same GPU.

Usage (GPU machine):  PYTHONPATH=<build>/python python3 bench/tensor/bench_tensor.py [--gib 1] [--json out.json]

Bandwidth counts bytes read + written once (a + b on n float32: 12n bytes). Targets from
issue 4: elementwise/copy >= 90% of torch-measured copy bandwidth (4.2 TB/s on H200),
uniform_/normal_ float32 >= 3.6 TB/s. torch columns are skipped when torch is absent.
"""
import argparse
import json
import sys


def timeit(ck, fn, iters):
    fn()  # warm-up (module load, cuBLAS handle, allocator)
    ck.synchronize()
    start, end = ck.Event(enable_timing=True), ck.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters / 1e3  # seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import cudakit as ck
    import cudakit.tensor as T
    try:
        import torch
        have_torch = torch.cuda.is_available()
    except ImportError:
        have_torch = False

    n = int(args.gib * (1 << 30)) // 4
    results = []

    def record(name, bytes_moved, t_ck, t_torch=None, flops=None):
        row = {"op": name, "cudakit_s": t_ck, "torch_s": t_torch}
        if bytes_moved:
            row["cudakit_TBps"] = bytes_moved / t_ck / 1e12
            row["torch_TBps"] = bytes_moved / t_torch / 1e12 if t_torch else None
        if flops:
            row["cudakit_TFLOPs"] = flops / t_ck / 1e12
            row["torch_TFLOPs"] = flops / t_torch / 1e12 if t_torch else None
        results.append(row)
        print(json.dumps(row), flush=True)

    a = T.empty(n, device="cuda")
    b = T.empty(n, device="cuda")
    a.uniform_()
    b.uniform_()
    out = T.empty(n, device="cuda")
    h16 = T.empty(n, device="cuda", dtype=T.float16)
    if have_torch:
        ta = torch.empty(n, device="cuda").uniform_()
        tb = torch.empty(n, device="cuda").uniform_()
        tout = torch.empty(n, device="cuda")
        t16 = torch.empty(n, device="cuda", dtype=torch.float16)

    tt = lambda f: timeit(ck, f, args.iters) if have_torch else None
    record("copy_ f32", 8 * n, timeit(ck, lambda: out.copy_(a), args.iters), tt(lambda: tout.copy_(ta)))
    record("copy_ strided-free cast f32->f16", 6 * n, timeit(ck, lambda: h16.copy_(a), args.iters),
           tt(lambda: t16.copy_(ta)))
    record("fill_ f32", 4 * n, timeit(ck, lambda: out.fill_(1.5), args.iters), tt(lambda: tout.fill_(1.5)))
    record("add f32", 12 * n, timeit(ck, lambda: a + b, args.iters), tt(lambda: ta + tb))
    record("mul f32", 12 * n, timeit(ck, lambda: a * b, args.iters), tt(lambda: ta * tb))
    record("relu f32", 8 * n, timeit(ck, lambda: a.relu(), args.iters), tt(lambda: ta.relu()))
    record("sum f32", 4 * n, timeit(ck, lambda: a.sum(), args.iters), tt(lambda: ta.sum()))
    record("uniform_ f32", 4 * n, timeit(ck, lambda: out.uniform_(), args.iters), tt(lambda: tout.uniform_()))
    record("normal_ f32", 4 * n, timeit(ck, lambda: out.normal_(), args.iters), tt(lambda: tout.normal_()))
    del a, b, out, h16
    if have_torch:
        del ta, tb, tout, t16

    m = 8192
    for name, dt, tdt in [("float16", T.float16, "float16"), ("bfloat16", T.bfloat16, "bfloat16"),
                          ("float32", T.float32, "float32")]:
        x = T.randn(m, m, dtype=dt, device="cuda")
        y = T.randn(m, m, dtype=dt, device="cuda")
        if have_torch:
            tx = torch.randn(m, m, dtype=getattr(torch, tdt), device="cuda")
            ty = torch.randn(m, m, dtype=getattr(torch, tdt), device="cuda")
        record(f"matmul {name} {m}^3", None, timeit(ck, lambda: x @ y, 5),
               timeit(ck, lambda: tx @ ty, 5) if have_torch else None, flops=2 * m ** 3)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
