"""Sleep / wake of tagged memory and the weight hand-off (issue 29), on the GPU:

    python bench/memory/bench_sleep.py                 # offload + discard benchmarks
    python bench/memory/bench_sleep.py --handoff       # + hand-off vs torch CUDA IPC (torch)
    python bench/memory/bench_sleep.py --gib 2 --kv-gib 1 --handoff-gb 1   # a quick run

1. Offload: ``--gib`` GiB of weights (tensors of 256 MiB) in pool "weights"; sleep with
   offload, then wake_up, ``--cycles`` times. Reports GB/s each way (offloaded bytes / time of
   the call), the first sleep apart (it pins the host memory; later ones reuse cudakit's
   pinned cache), the fraction of the pool's bytes released (sleep's return value against
   sleep_state()'s bytes, and the driver's free memory before/after), and checks contents.
   Goals (issue 29): >= 45 GB/s each way, >= 99 % released.
2. Discard: ``--kv-gib`` GiB of KV cache (one tensor per GiB) in pool "kv"; sleep without
   offload and wake_up. Reports wake_up in ms per 10 GiB. Goal: <= 10 ms per 10 GiB.
3. Hand-off (``--handoff``, needs torch): a child process holds 300 tensors of a
   7B-parameter-like layout (``--handoff-gb`` GB in all, fp16) and hands them to this
   process: with cudakit (export_pool in the child; import_pool + 300 torch tensors through
   DLPack here) and with torch.multiprocessing's per-tensor CUDA IPC (reduce_tensor in the
   child, the rebuild functions here), side by side. Reports the producer's and the
   consumer's time and import_pool alone (the first import of the process, then the median
   of 4 more of the same handle). Goals: import_pool <= 1 ms, >= 4x torch.

Prints one line per measurement and, with ``--json PATH``, writes them all.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import pickle
import sys
import time

GiB = 1 << 30
results: dict[str, float] = {}


def report(key: str, value: float, unit: str) -> None:
    results[key] = value
    print(f"{key:<44} {value:12.3f} {unit}", flush=True)


def bench_offload(ck, gib: int, cycles: int) -> None:
    m = ck.memory
    piece = 256 << 20
    n = gib * GiB // piece
    with m.use_sleep_pool("weights"):
        ws = [ck.empty(piece, dtype=ck.uint8, device="cuda") for _ in range(n)]
    for i, w in enumerate(ws):
        w.fill_(i % 251)
    ck.synchronize()
    pool = m.sleep_state()["weights"]["bytes"]
    moved = sum(w.numel() for w in ws)
    for c in range(cycles + 1):
        free0 = ck.memory.mem_get_info()[0]
        t0 = time.perf_counter()
        released = m.sleep(["weights"], offload=["weights"])
        t1 = time.perf_counter()
        free1 = ck.memory.mem_get_info()[0]
        m.wake_up(["weights"])
        t2 = time.perf_counter()
        tag = "first" if c == 0 else f"cycle{c}"
        report(f"offload.{tag}.sleep_GBps", moved / (t1 - t0) / 1e9, "GB/s")
        report(f"offload.{tag}.wake_GBps", moved / (t2 - t1) / 1e9, "GB/s")
        if c == 0:
            report("offload.released_fraction", released / pool, "")
            report("offload.driver_freed_fraction", (free1 - free0) / pool, "")
    bad = [i for i in (0, n // 2, n - 1) if int(ws[i][piece // 3].item()) != i % 251]
    if bad:
        raise SystemExit(f"offload: contents of tensors {bad} changed across sleep/wake")
    del ws
    m.empty_cache()


def bench_discard(ck, gib: int, cycles: int) -> None:
    m = ck.memory
    with m.use_sleep_pool("kv"):
        kv = [ck.empty(GiB, dtype=ck.uint8, device="cuda") for _ in range(gib)]
    ck.synchronize()
    best_sleep = best_wake = float("inf")
    for _ in range(cycles):
        t0 = time.perf_counter()
        m.sleep(["kv"])
        t1 = time.perf_counter()
        chunks0 = m.memory_stats()["num_device_alloc"]
        t1w = time.perf_counter()
        m.wake_up(["kv"])
        t2 = time.perf_counter()
        chunks = m.memory_stats()["num_device_alloc"] - chunks0
        best_sleep, best_wake = min(best_sleep, t1 - t0), min(best_wake, t2 - t1w)
    report("discard.sleep_ms_per_10GiB", best_sleep * 1e3 * 10 / gib, "ms")
    report("discard.wake_ms_per_10GiB", best_wake * 1e3 * 10 / gib, "ms")
    report("discard.wake_physical_chunks", chunks, "")
    kv[0].fill_(1)  # usable after wake
    ck.synchronize()
    del kv
    m.empty_cache()


def layout_7b(total_bytes: int) -> list[tuple[int, ...]]:
    # 32 layers x 9 tensors (q, k, v, o, gate, up, down, 2 norms) + embed, head, final norm
    # = 291 + 9 extra norm-sized tensors = 300, scaled to total_bytes of fp16.
    d, f, layers = 4096, 11008, 32
    shapes: list[tuple[int, ...]] = [(32000, d)]
    for _ in range(layers):
        shapes += [(d, d)] * 4 + [(f, d)] * 2 + [(d, f)] + [(d,)] * 2
    shapes += [(d,), (32000, d)] + [(d,)] * 9
    numel = sum(_prod(s) for s in shapes)
    scale = (total_bytes / 2 / numel) ** 0.5
    out = []
    for s in shapes:
        out.append(tuple(max(1, int(x * scale)) for x in s) if len(s) == 2 else s)
    return out


def _prod(s):
    p = 1
    for x in s:
        p *= x
    return p


def _producer_cudakit(conn, shapes):
    import cudakit as ck

    with ck.memory.use_sleep_pool("handoff"):
        ts = [ck.full(s, 0.5, dtype=ck.float16, device="cuda") for s in shapes]
    ck.synchronize()
    chunks = ck.memory.memory_stats()["num_device_alloc"]  # physical chunks of the pool
    t0 = time.perf_counter()
    view = ck.memory.pool_view("handoff")
    msg = {"handle": ck.memory.export_pool("handoff"),
           "layout": [(view.offset_of(t), tuple(t.shape)) for t in ts]}
    blob = pickle.dumps(msg)
    conn.send(("ready", time.perf_counter() - t0, chunks))
    conn.send_bytes(blob)
    conn.recv()  # keep the memory until the consumer is done


def _producer_torch(conn, shapes):
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    ts = [torch.full(s, 0.5, dtype=torch.float16, device="cuda") for s in shapes]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    blob = pickle.dumps([reduce_tensor(t) for t in ts])
    conn.send(("ready", time.perf_counter() - t0, len(ts)))
    conn.send_bytes(blob)
    conn.recv()


def bench_handoff(total_gb: float) -> None:
    try:
        import torch
    except ImportError:  # the cudakit side alone (cudakit tensors), e.g. on the emulated backend
        torch = None
        print("torch not found: the hand-off runs without its torch side", flush=True)

    shapes = layout_7b(int(total_gb * 1e9))
    report("handoff.tensors", len(shapes), "")
    report("handoff.GB", sum(_prod(s) for s in shapes) * 2 / 1e9, "GB")
    import cudakit as ck

    if torch:
        # torch's lazy CUDA init (and its first from_dlpack) happen here, outside the timing:
        # otherwise the first side timed (cudakit's) pays for them.
        torch.cuda.init()
        torch.cuda.synchronize()
        warm = ck.zeros((4,), dtype=ck.float16, device="cuda")
        torch.from_dlpack(warm).sum().item()
    ctx = mp.get_context("spawn")
    sides = [("cudakit", _producer_cudakit)] + ([("torch_ipc", _producer_torch)] if torch else [])
    for name, producer in sides:
        parent, child = ctx.Pipe()
        p = ctx.Process(target=producer, args=(child, shapes))
        p.start()
        _, produce_s, chunks = parent.recv()
        blob = parent.recv_bytes()
        t0 = time.perf_counter()
        if name == "cudakit":
            import cudakit as ck

            msg = pickle.loads(blob)
            ti = time.perf_counter()
            view = ck.memory.import_pool(msg["handle"])
            report("handoff.cudakit.import_pool_ms", (time.perf_counter() - ti) * 1e3, "ms")
            report("handoff.cudakit.physical_chunks", chunks, "")
            layout = [(off, shape, ck.float16) for off, shape in msg["layout"]]
            if torch:  # one capsule per tensor, made in one call
                got = [torch.from_dlpack(c) for c in view.dlpack(layout)]
            else:
                got = view.tensors(layout)
        else:
            got = [fn(*args) for fn, args in pickle.loads(blob)]
        if torch:
            torch.cuda.synchronize()
        consume_s = time.perf_counter() - t0
        last = got[-1].cpu().numpy() if not torch else got[-1].float().cpu().numpy()
        assert len(got) == len(shapes) and float(last.astype("float32").mean()) == 0.5
        report(f"handoff.{name}.producer_ms", produce_s * 1e3, "ms")
        report(f"handoff.{name}.consumer_ms", consume_s * 1e3, "ms")
        report(f"handoff.{name}.total_ms", (produce_s + consume_s) * 1e3, "ms")
        del got
        if name == "cudakit":
            view.close()
            # Later imports of the same handle in this process: the first import's own cost
            # (2.88 ms on an H100, 2026-12-07) against the driver's floor (import_floor.py).
            again = []
            for _ in range(4):
                ti = time.perf_counter()
                v = ck.memory.import_pool(msg["handle"])
                again.append((time.perf_counter() - ti) * 1e3)
                v.close()
            report("handoff.cudakit.import_pool_again_ms", sorted(again)[len(again) // 2], "ms")
        parent.send("done")
        p.join()
    if torch:
        report("handoff.speedup_vs_torch_ipc",
               results["handoff.torch_ipc.total_ms"] / results["handoff.cudakit.total_ms"], "x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=int, default=20)
    ap.add_argument("--kv-gib", type=int, default=10)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--handoff", action="store_true")
    ap.add_argument("--handoff-gb", type=float, default=14.0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import cudakit as ck

    print(f"backend {ck.backend_name()}, device {ck.get_device_name()}", flush=True)
    bench_offload(ck, a.gib, a.cycles)
    bench_discard(ck, a.kv_gib, a.cycles)
    if a.handoff:
        bench_handoff(a.handoff_gb)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
