"""cudakit Python showcase: the main job in a minute.

A decode-like step (matmul, relu, add) is captured into a CUDA graph with kernel annotations,
replayed under the tracer, updated in place with a capture on other buffers, and the run
leaves two files to open: a Chrome/Perfetto trace whose kernel events carry the annotations,
and the allocator's memory snapshot rendered as a self-contained HTML page.

    PYTHONPATH=build/python CUDAKIT_BACKEND=emulated python3 examples/showcase.py [OUTDIR]

Needs only the standard library (numpy is not used). On the GPU leave CUDAKIT_BACKEND unset.
"""
import json
import os
import pathlib
import sys
import tempfile
import time

import cudakit
from cudakit import memory_viz, profiler
from cudakit.graph_annotations import get_kernel_annotations, mark_kernels

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="cudakit-"))
out.mkdir(parents=True, exist_ok=True)

print(f"cudakit {cudakit.__version__} — backend: {cudakit.backend_name()}")
if not cudakit.is_available():
    raise SystemExit("no device: set CUDAKIT_BACKEND=emulated to try cudakit without a GPU")
caps = cudakit.backend_capabilities()
print(f"  {caps}")
for d in range(cudakit.device_count()):
    p = cudakit.get_device_properties(d)
    print(f"  [{d}] {p.name}  sm_{p.major}{p.minor}  {p.total_memory / 2**30:.1f} GiB")

# Record allocator history from the start: the snapshot then shows where each block came from.
cudakit.memory._record_memory_history()

# ---- a decode step: h = relu(x @ W1) @ W2 + x, on buffers that stay put ----
dim = 256
cudakit.manual_seed(0)
w1 = cudakit.randn(dim, dim) * (1.0 / dim ** 0.5)
w2 = cudakit.randn(dim, dim) * (1.0 / dim ** 0.5)
x = cudakit.randn(8, dim)


def step(inp):
    with mark_kernels({"name": "mlp_up", "layer": 0}):
        h = (inp @ w1).relu()
    with mark_kernels({"name": "mlp_down", "layer": 0}):
        return h @ w2 + inp


# Warm up before capturing, as torch.cuda.graphs asks: one-time setup (this thread's cuBLAS
# handle) then happens outside the graph, and the first replay is not the first run.
step(x)
cudakit.synchronize()

# Capture once (keep_graph: the template stays for get_graph_data and update).
g = cudakit.CUDAGraph(keep_graph=True)
with cudakit.graph(g, enable_annotations=True):
    y = step(x)
g.instantiate()
ann = get_kernel_annotations()
print(f"captured the step: {len(ann)} annotated node(s), e.g. "
      f"{next(iter(ann.values())) if ann else 'none'}")

# Replay under the tracer: each replayed kernel event carries its annotation in the trace.
steps = 20
with profiler.trace() as tr:
    t0 = time.perf_counter()
    for _ in range(steps):
        g.replay()
    cudakit.synchronize()
    replay_ms = (time.perf_counter() - t0) * 1e3 / steps
trace_path = out / "trace.json"
tr.export_chrome_trace(str(trace_path))
events = json.loads(trace_path.read_text())["traceEvents"]
annotated = [e for e in events if isinstance(e.get("args"), dict) and "layer" in e["args"]]
print(f"{steps} replays: {replay_ms:.3f} ms per step; trace has {len(events)} events, "
      f"{len(annotated)} kernel events annotated from the graph")

# Same step on other buffers: capture again, update the instantiated graph in place (no new
# instantiation; the exec graph id, hence trace ids and annotations, stay the same).
x2 = cudakit.randn(8, dim)
g2 = cudakit.CUDAGraph(keep_graph=True)
with cudakit.graph(g2):
    y2 = step(x2)
g.update(g2)
g.replay()
expect = step(x2)
cudakit.synchronize()
d = y2 - expect
diff = float((d * d).sum().item()) ** 0.5
print(f"updated the graph from a new capture: |replay - eager| = {diff:.2e}")

# The memory snapshot, rendered to HTML by cudakit's viewer.
snap_path = out / "memory.pickle"
cudakit.memory._dump_snapshot(str(snap_path))
html_path = out / "memory.html"
memory_viz.main([str(snap_path), "-o", str(html_path)])
cudakit.memory._record_memory_history(None)
# Where the reserved memory is: a captured graph keeps its private pool (its kernels replay on
# those addresses, a matmul's cuBLAS workspace included) for as long as the graph lives.
segments = cudakit.memory.memory_snapshot()
in_graphs = sum(s["total_size"] for s in segments if s["segment_pool_id"] != (0, 0))
graph_pools = len({s["segment_pool_id"] for s in segments if s["segment_pool_id"] != (0, 0)})
print(f"allocated {cudakit.memory_allocated() / 2**20:.1f} MiB, "
      f"reserved {cudakit.memory_reserved() / 2**20:.1f} MiB "
      f"({in_graphs / 2**20:.1f} MiB of it in {graph_pools} graph pools, kept for replay)")

print("\nopen these:")
print(f"  trace:    {trace_path}   (https://ui.perfetto.dev or chrome://tracing)")
print(f"  memory:   {html_path}   (any browser; from {snap_path})")
ok = diff < 1e-3 and len(annotated) > 0 and os.path.getsize(html_path) > 0
print("ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
