"""Tracer costs from Python (issue 10 §3), cudakit.profiler.trace side by side with
torch.profiler in one run when torch is importable:

* a loop of 20,000 tiny ``x.add_(t)`` kernels on 16 elements + synchronize, untraced vs
  traced (issue 28 item 4, goal: overhead <= 1.15x; torch.profiler with CPU + CUDA
  activities measured 1.73x on the H200, 3.6x in a busy run), untraced and traced runs
  interleaved so both see the same machine state;
* where cudakit's per-kernel cost goes, one source at a time: the trace with every source,
  without API records (no CUPTI DRIVER / RUNTIME kinds: the launch -> kernel flows), with
  device records only, and with no device part at all (cudakit's own events);
* ``export_chrome_trace`` of that trace, in seconds per million events (goal <= 0.3 s;
  torch 2.11: 1.64 s per million);
* the stop / collection time of each tracer.

    CUDAKIT_BACKEND=cuda PYTHONPATH=build/python python3 bench/profiler/bench_profiler.py [--json FILE]

Medians of 9 runs; overheads are the median of each run's traced / untraced ratio, the
breakdown measured in rounds (every configuration once per round). Prints a markdown table
(scripts/gpu-check.sh collects "|" lines). On the emulated backend the kernels are host tasks: the export rows are meaningful there, the
overhead ratio measures the emulator.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

KERNELS = 20_000
RUNS = 9


def _loop(x, one, sync, n=KERNELS):
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(one)
    sync()
    return time.perf_counter() - t0


def _count_events(path):
    with open(path) as f:
        return len(json.load(f)["traceEvents"])


# (label, trace options): the per-source breakdown of the tracing overhead.
# An "env" entry sets CUDAKIT_CUPTI_API while the trace starts (where API records come from).
BREAKDOWN = [("traced: device + api + nvtx + memory + graphs", {}),
             ("traced: every source, api records through CUPTI callbacks",
              {"env": "callbacks"}),
             ("traced: no api records (CUPTI DRIVER/RUNTIME off)", {"api": False}),
             ("traced: device records only", {"api": False, "nvtx": False, "memory": False,
                                              "graphs": False}),
             ("traced: no device part (cudakit's own events)", {"device": False, "api": False})]


def paired(plain, traced):
    """Median and quartiles of each run's traced / untraced ratio: pairing cancels drift between
    runs (the C++ bench's untraced loop took 88 ms in one H100 call and 106 ms in the next)."""
    r = sorted(t / p for p, t in zip(plain, traced))
    return r[len(r) // 2], r[len(r) // 4], r[(3 * len(r)) // 4]


def bench_cudakit_breakdown(ck, x, one):
    """Every configuration once per round, RUNS rounds, so an order effect falls on all rows."""
    samples = {label: ([], []) for label, _ in BREAKDOWN}
    for _ in range(RUNS):
        for label, opts in BREAKDOWN:
            opts = dict(opts)
            api_from = opts.pop("env", None)
            plain, traced = samples[label]
            plain.append(_loop(x, one, ck.synchronize))
            t = ck.profiler.trace(synchronize=False, **opts)
            if api_from:
                os.environ["CUDAKIT_CUPTI_API"] = api_from
            t.start()
            os.environ.pop("CUDAKIT_CUPTI_API", None)
            traced.append(_loop(x, one, ck.synchronize))
            t.stop()
    return [(label, paired(*samples[label])) for label, _ in BREAKDOWN]


def bench_cudakit():
    import cudakit as ck

    x = ck.zeros(16, device="cuda")
    one = ck.ones(16, device="cuda")
    _loop(x, one, ck.synchronize, 2000)  # warm up
    plain, traced, stops, exports = [], [], [], []
    events = 0
    warning = ""
    source = ""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        for _ in range(RUNS):
            plain.append(_loop(x, one, ck.synchronize))
            t = ck.profiler.trace(synchronize=False)
            t.start()
            traced.append(_loop(x, one, ck.synchronize))
            s0 = time.perf_counter()
            t.stop()
            stops.append(time.perf_counter() - s0)
            e0 = time.perf_counter()
            t.export_chrome_trace(path)
            exports.append(time.perf_counter() - e0)
            events = _count_events(path)
            warning = t.warnings[0] if t.warnings else ""
            source = t.device_source
    return {"untraced_ms": statistics.median(plain) * 1e3,
            "traced_ms": statistics.median(traced) * 1e3,
            "overhead": paired(plain, traced),
            "stop_ms": statistics.median(stops) * 1e3,
            "export_ms": statistics.median(exports) * 1e3,
            "events": events, "warning": warning, "source": source,
            "breakdown": bench_cudakit_breakdown(ck, x, one)}


def bench_torch():
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    x = torch.zeros(16, device="cuda")
    one = torch.ones(16, device="cuda")
    _loop(x, one, torch.cuda.synchronize, 2000)
    plain, traced, stops, exports = [], [], [], []
    events = 0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        for _ in range(RUNS):
            plain.append(_loop(x, one, torch.cuda.synchronize))
            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            prof.__enter__()
            traced.append(_loop(x, one, torch.cuda.synchronize))
            s0 = time.perf_counter()
            prof.__exit__(None, None, None)
            stops.append(time.perf_counter() - s0)
            e0 = time.perf_counter()
            prof.export_chrome_trace(path)
            exports.append(time.perf_counter() - e0)
            events = _count_events(path)
    return {"untraced_ms": statistics.median(plain) * 1e3,
            "traced_ms": statistics.median(traced) * 1e3,
            "overhead": paired(plain, traced),
            "stop_ms": statistics.median(stops) * 1e3,
            "export_ms": statistics.median(exports) * 1e3,
            "events": events, "version": torch.__version__}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args()
    import cudakit as ck

    if not ck.is_available():
        print(f"bench_profiler.py: no device on backend {ck.backend_name()}")
        return 0
    # cudakit first: both tools need CUPTI's one subscription; cudakit releases it after each
    # trace, torch's Kineto may keep it for the rest of the process.
    results = {"cudakit": bench_cudakit(), "torch": bench_torch(),
               "backend": ck.backend_name()}
    c, t = results["cudakit"], results["torch"]
    print(f"## tracer from Python, backend {ck.backend_name()}, cudakit device source: "
          f"{c['source'] or 'none'}")
    if c["warning"]:
        print(f"warning: {c['warning']}")
    print("| case | cudakit | torch | goal |")
    print("|---|---|---|---|")

    def cell(r, key, fmt="{:.1f} ms"):
        return fmt.format(r[key]) if r else "n/a"

    print(f"| {KERNELS} x add_ + sync, untraced | {cell(c, 'untraced_ms')} | "
          f"{cell(t, 'untraced_ms') if t else '115.0 ms (2.11, H200)'} | |")
    print(f"| {KERNELS} x add_ + sync, traced | {cell(c, 'traced_ms')} | "
          f"{cell(t, 'traced_ms') if t else '200.0 ms (2.11, H200)'} | |")
    ratio = lambda r: "{:.3f}x ({:.3f}-{:.3f})".format(*r["overhead"])
    ratio_t = ratio(t) if t else "1.73x (2.11, H200)"
    print(f"| tracing overhead (median of {RUNS} runs' traced/untraced; quartiles) | {ratio(c)} | "
          f"{ratio_t} | <= 1.15x |")
    print(f"| stop | {cell(c, 'stop_ms')} | {cell(t, 'stop_ms') if t else 'n/a'} | |")
    per_m = lambda r: r["export_ms"] / 1e3 / max(r["events"], 1) * 1e6
    t_exp = (f"{t['export_ms']:.1f} ms / {t['events']} events = {per_m(t):.2f} s/M" if t
             else "1.64 s/M (2.11, H200)")
    print(f"| export_chrome_trace | {c['export_ms']:.1f} ms / {c['events']} events = "
          f"{per_m(c):.2f} s/M | {t_exp} | <= 0.3 s/M |")
    for label, (median, q1, q3) in c["breakdown"]:
        print(f"| cudakit {label} | {median:.3f}x ({q1:.3f}-{q3:.3f}) | | |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
