// cudakit showcase: devices and properties, streams and events, a small timed workload, then
// the main job: a captured, annotated graph replayed under the tracer, with the trace and a
// memory snapshot written to OUTDIR (argv[1], default: the temporary directory).
// Runs on the GPU when one is present, else asks for the emulated backend explicitly.
// examples/engine/ goes further (own kernels, graph update, a KV cache).
#include <cudakit/cudakit.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

int main(int argc, char** argv) {
  using namespace cudakit;
  std::printf("cudakit showcase — backend: %s\n", backend_name().c_str());
  if (!is_available()) {
    std::printf("no device on the '%s' backend; run with CUDAKIT_BACKEND=emulated\n",
                backend_name().c_str());
    return 2;
  }
  std::printf("driver version: %d, devices: %d\n", driver_version(), device_count());
  for (int d = 0; d < device_count(); ++d) {
    const auto& p = get_device_properties(d);
    std::printf("  [%d] %s  sm_%d%d  %.1f GiB  %d SMs  L2 %d MiB  uuid %s\n", d, p.name.c_str(),
                p.major, p.minor, p.total_memory / double(1 << 30), p.multi_processor_count,
                p.L2_cache_size >> 20, p.uuid.c_str());
  }
  auto [free_b, total_b] = mem_get_info(0);
  std::printf("device 0 memory: %.2f GiB free of %.2f GiB\n", free_b / double(1 << 30),
              total_b / double(1 << 30));

  // Two streams, an event-ordered dependency, and a timed host task chain.
  Stream producer(0), consumer(0);
  Event start({.enable_timing = true}), stop({.enable_timing = true});
  std::vector<int> data(1 << 20, 0);
  start.record(producer);
  producer.launch_host_func([&] { for (auto& x : data) x += 1; });
  consumer.wait(producer);  // consumer sees producer's write
  consumer.launch_host_func([&] { for (auto& x : data) x *= 3; });
  stop.record(consumer);
  stop.sync();
  std::printf("two-stream host workload: %.3f ms, data[0]=%d (expect 3)\n",
              start.elapsed_time(stop), data[0]);
  {
    StreamGuard g(consumer);
    std::printf("current stream inside guard is consumer: %s\n",
                current_stream() == consumer ? "yes" : "no");
  }
  synchronize();

  // The main job: capture a step with annotations, replay it under the tracer.
  namespace fs = std::filesystem;
  const fs::path out = argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path();
  fs::create_directories(out);
  record_memory_history();
  Tensor x = randn({256, 256}, device_options());
  // Warm-up before capturing, as torch.cuda.graphs asks: one-time setup (this thread's cuBLAS
  // handle) then happens outside the graph.
  Tensor y = relu(matmul(x, x)) + 1.0;
  synchronize();
  CUDAGraph graph;
  CaptureOptions opts;
  opts.enable_annotations = true;
  capture(graph, [&] {
    graph_annotations::MarkKernels scope(graph_annotations::Annotation{{"name", "step"}, {"layer", 0}});
    y = relu(matmul(x, x)) + 1.0;
  }, opts);
  profiler::Trace trace;
  for (int i = 0; i < 10; ++i) graph.replay();
  trace.stop();
  const std::string trace_path = (out / "showcase_trace.json").string();
  const std::string snapshot_path = (out / "showcase_memory.json").string();
  trace.export_chrome_trace(trace_path);
  dump_snapshot(snapshot_path);
  std::printf("captured an annotated graph (%zu annotated nodes), replayed it 10 times\n"
              "  trace:  %s  (https://ui.perfetto.dev)\n"
              "  memory: python3 -m cudakit.memory_viz %s -o showcase_memory.html\n",
              graph_annotations::annotated_node_count(), trace_path.c_str(),
              snapshot_path.c_str());
  std::printf("ok\n");
  return data[0] == 3 ? 0 : 1;
}
