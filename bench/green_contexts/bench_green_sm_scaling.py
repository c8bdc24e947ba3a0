"""Green contexts: SM scaling of a bf16 8192^3 GEMM, cudakit and torch side by side.

The GEMM runs on a stream of the whole device, then on streams of green contexts of 16 and 66
SMs (the driver rounds 66 up to its partition rules: 72 on an H200). torch measured on the
H200: 1.38 ms (whole device), 9.88 ms (16 SMs), 2.27 ms (66 SMs). A partition that confines
kernels shows the same scaling; one that did not would time every row alike.

  python bench/green_contexts/bench_green_sm_scaling.py [--n 8192] [--iters 20]
"""
from __future__ import annotations

import argparse

SMS = (None, 16, 66)


def time_ms(lib, stream, a, b, iters):
    with lib.cuda.stream(stream) if lib.__name__ == "torch" else lib.stream(stream):
        for _ in range(3):
            a @ b
        ev = lib.cuda.Event if lib.__name__ == "torch" else lib.Event
        start, end = ev(enable_timing=True), ev(enable_timing=True)
        start.record()
        for _ in range(iters):
            a @ b
        end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def cudakit_rows(n, iters):
    import cudakit as ck
    from cudakit.green_contexts import GreenContext

    a = ck.ones(n, n, dtype=ck.bfloat16, device="cuda")
    b = ck.ones(n, n, dtype=ck.bfloat16, device="cuda")
    rows = []
    for sms in SMS:
        if sms is None:
            rows.append(("whole device", ck.get_device_properties(0).multi_processor_count,
                         time_ms(ck, ck.Stream(), a, b, iters)))
        else:
            g = GreenContext.create(sms)
            rows.append((f"green {sms}", g.sm_count, time_ms(ck, g.Stream(), a, b, iters)))
    return rows


def torch_rows(n, iters):
    import torch

    a = torch.ones(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.ones(n, n, dtype=torch.bfloat16, device="cuda")
    rows = []
    for sms in SMS:
        if sms is None:
            rows.append(("whole device", torch.cuda.get_device_properties(0).multi_processor_count,
                         time_ms(torch, torch.cuda.Stream(), a, b, iters)))
            continue
        from torch.cuda.green_contexts import GreenContext

        g = GreenContext.create(sms, 0)
        count = getattr(g, "sm_count", "?")
        rows.append((f"green {sms}", count, time_ms(torch, g.Stream(), a, b, iters)))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    flops = 2 * args.n ** 3
    print(f"bf16 {args.n}^3 GEMM on green-context streams "
          "(torch on the H200: 1.38 / 9.88 / 2.27 ms)")
    print()
    print("| library | stream | SMs | ms | TFLOP/s | vs whole device |")
    print("|---|---|---|---|---|---|")
    for lib, fn in (("cudakit", cudakit_rows), ("torch", torch_rows)):
        try:
            rows = fn(args.n, args.iters)
        except Exception as e:  # noqa: BLE001 (torch may lack green contexts or a GPU)
            print(f"| {lib} | - | - | n/a: {type(e).__name__}: {str(e).splitlines()[0][:80]} | | |")
            continue
        whole = rows[0][2]
        for name, sms, ms in rows:
            tflops = flops / ms / 1e9
            print(f"| {lib} | {name} | {sms} | {ms:.2f} | {tflops:.0f} | {ms / whole:.2f}x |")


if __name__ == "__main__":
    main()
