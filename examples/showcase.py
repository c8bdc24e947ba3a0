"""cudakit Python showcase: devices, streams, events and a small timed workload."""
import time

import cudakit

print(f"cudakit {cudakit.__version__} — backend: {cudakit.backend_name()}")
if not cudakit.is_available():
    raise SystemExit("no device: set CUDAKIT_BACKEND=emulated to try cudakit without a GPU")
for d in range(cudakit.device_count()):
    print(f"  [{d}] {cudakit.get_device_properties(d)}")

s = cudakit.Stream()
start, end = cudakit.Event(enable_timing=True), cudakit.Event(enable_timing=True)
with cudakit.stream(s):
    start.record()
    end.record()
end.synchronize()
print(f"empty interval on a pooled stream: {start.elapsed_time(end):.4f} ms")

n = 200_000
t0 = time.perf_counter()
for _ in range(n):
    cudakit.current_stream()
dt = (time.perf_counter() - t0) / n * 1e6
print(f"current_stream(): {dt:.3f} us per call")
# Arrays, RNG and the caching allocator.
cudakit.manual_seed(0)
x = cudakit.randn(1024, 1024)
y = (x @ x.T).relu()
cudakit.synchronize()
print(f"randn -> matmul -> relu: sum={float(y.sum().cpu().numpy()):.1f}")
print(f"allocated {cudakit.memory_allocated() / 2**20:.1f} MiB, "
      f"reserved {cudakit.memory_reserved() / 2**20:.1f} MiB")
del x, y
cudakit.empty_cache()
print(f"after empty_cache: reserved {cudakit.memory_reserved() / 2**20:.1f} MiB")
print("ok")
