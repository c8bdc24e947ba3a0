// examples/engine: what a C++ inference engine does with cudakit, in one file.
//
//   * one include (<cudakit/cudakit.hpp>) and find_package(cudakit) (see README);
//   * a decode step: two GEMMs (cudakit::matmul), one of the engine's own CUDA kernels
//     (kernels.cu, launched on the cudakit stream; cuda backend only), and a raw-pointer copy
//     that appends the step's output to a KV cache the engine manages itself;
//   * the step captured once into a CUDA graph with kernel annotations, replayed, then
//     updated in place for the next position (CUDAGraph::update: no new instantiation);
//   * a trace of the replays (Chrome/Perfetto JSON, annotations merged into kernel events)
//     and a memory snapshot (JSON; python -m cudakit.memory_viz renders it to HTML).
//
// Usage: cudakit_engine [OUTDIR]   (CUDAKIT_BACKEND=emulated without a GPU: the own-kernel
// part is then skipped with a message, everything else runs the same way).
#include <cudakit/cudakit.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#if CUDAKIT_ENGINE_KERNELS
#include "kernels.hpp"
#endif

namespace {

using cudakit::Tensor;
namespace ga = cudakit::graph_annotations;

constexpr int kDim = 256, kBatch = 8, kMaxPositions = 4;
constexpr std::size_t kLayer = 0;  // annotation values of any integer type are accepted

struct Model {
  Tensor w1, w2, kv;  // weights and a KV cache of kMaxPositions slots of [kBatch, kDim]
  bool own_kernels = false;
};

float* kv_slot(const Model& m, int position) {
  return m.kv.data<float>() + static_cast<std::size_t>(position) * kBatch * kDim;
}

// One decode step at `position`: h = relu(x W1); [own kernel: h = 0.5 h + 0.1]; y = h W2 + x;
// then kv[position] = y with a raw stream-ordered copy.
Tensor decode_step(const Model& m, const Tensor& x, int position) {
  Tensor h;
  {
    ga::MarkKernels scope(ga::Annotation{{"name", "mlp_up"}, {"layer", kLayer}});
    h = cudakit::relu(cudakit::matmul(x, m.w1));
  }
#if CUDAKIT_ENGINE_KERNELS
  if (m.own_kernels) {
    ga::MarkKernels scope(ga::Annotation{{"name", "scale_bias"}, {"layer", kLayer}});
    engine::scale_bias(h.data<float>(), h.numel(), 0.5f, 0.1f, cudakit::current_stream());
  }
#endif
  Tensor y;
  {
    ga::MarkKernels scope(ga::Annotation{{"name", "mlp_down"}, {"layer", kLayer}});
    y = cudakit::matmul(h, m.w2) + x;
  }
  {
    ga::MarkKernels scope(ga::Annotation{{"name", "kv_append"}, {"position", position}});
    cudakit::memcpy_async(kv_slot(m, position), y.data_ptr(), y.nbytes(),
                          cudakit::current_stream());
  }
  return y;
}

std::vector<float> host_copy(const Tensor& t) {
  Tensor c = t.cpu();
  const float* p = c.data<float>();
  return std::vector<float>(p, p + c.numel());
}

float max_abs_diff(const std::vector<float>& a, const float* b) {
  float d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::fmax(d, std::fabs(a[i] - b[i]));
  return d;
}

}  // namespace

int main(int argc, char** argv) try {
  namespace fs = std::filesystem;
  const fs::path out = argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path() / "cudakit-engine";
  fs::create_directories(out);

  const cudakit::BackendCapabilities caps = cudakit::backend_capabilities();
  std::printf("cudakit engine example: backend %s, runs kernels: %s\n", caps.backend.c_str(),
              caps.runs_kernels ? "yes" : "no");
  if (!cudakit::is_available()) {
    std::printf("no device (%s): run with CUDAKIT_BACKEND=emulated\n",
                cudakit::unavailable_reason().c_str());
    return 2;
  }
  Model m;
#if CUDAKIT_ENGINE_KERNELS
  m.own_kernels = caps.runs_kernels;
  if (!m.own_kernels) {
    std::printf("own kernels: skipped (the %s backend runs no device kernels)\n",
                caps.backend.c_str());
  }
#else
  std::printf("own kernels: skipped (built without a CUDA compiler: kernels.cu not compiled)\n");
#endif

  cudakit::record_memory_history();  // before allocating: the snapshot shows every block
  cudakit::manual_seed(0);
  const auto opts = cudakit::device_options();
  m.w1 = cudakit::randn({kDim, kDim}, opts) * (1.0 / 16);
  m.w2 = cudakit::randn({kDim, kDim}, opts) * (1.0 / 16);
  m.kv = cudakit::zeros({kMaxPositions, kBatch, kDim}, opts);
  const Tensor x = cudakit::randn({kBatch, kDim}, opts);

  // The engine's stream: the highest priority the device offers.
  const auto [least, greatest] = cudakit::stream_priority_range();
  cudakit::Stream stream(0, greatest);
  stream.wait(cudakit::current_stream());  // the weights were made on the current stream
  cudakit::StreamGuard on_stream(stream);
  std::printf("stream priorities %d (lowest) .. %d (highest); using %d\n", least, greatest,
              stream.priority());

  // Eager reference for position 0 (and warm-up: the allocator caches the step's blocks).
  const std::vector<float> eager0 = host_copy(decode_step(m, x, 0));
  m.kv.zero_();

  // Capture once. keep_graph: the template stays for get_graph_data() and update().
  cudakit::CUDAGraph graph(/*keep_graph=*/true);
  cudakit::CaptureOptions capture;
  capture.enable_annotations = true;
  capture.stream = stream.ref();
  Tensor y;
  cudakit::capture(graph, [&] { y = decode_step(m, x, 0); }, capture);
  graph.instantiate();

  std::printf("captured decode step:");
  if (caps.graph_tools_ids) {
    const auto data = graph.get_graph_data();
    for (const auto& n : data->nodes) {
      if (n.kernel_name) std::printf(" [%s]", n.kernel_name->c_str());
    }
    std::printf(" (%zu nodes, %zu annotated)\n", data->nodes.size(),
                ga::annotated_node_count());
  } else {
    std::printf(" (graph node ids unavailable on this driver)\n");
  }

  // Time replay against eager (the first replay uploads the graph: not timed), then replay
  // again under the tracer (tracing adds its own cost per kernel: not timed either).
  constexpr int kSteps = 20;
  graph.replay();
  stream.sync();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kSteps; ++i) graph.replay();
  stream.sync();
  const double replay_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      kSteps;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kSteps; ++i) decode_step(m, x, 0);
  stream.sync();
  const double eager_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      kSteps;
  cudakit::profiler::Trace trace;
  for (int i = 0; i < kSteps; ++i) graph.replay();
  stream.sync();
  trace.stop();
  const fs::path trace_path = out / "engine_trace.json";
  trace.export_chrome_trace(trace_path.string());
  std::printf("%d replays: %.1f us per step (eager %.1f us); trace: %zu events\n", kSteps,
              replay_us, eager_us, trace.events().size());

  // Position 0 was written by the replays; now the next position: capture the step again
  // (other KV slot) and update the instantiated graph in place.
  const float d0 = max_abs_diff(eager0, host_copy(m.kv).data());
  cudakit::CUDAGraph next(/*keep_graph=*/true);
  cudakit::capture(next, [&] { decode_step(m, x, 1); }, capture);
  graph.update(next);
  graph.replay();
  stream.sync();
  const std::vector<float> kv = host_copy(m.kv);
  const float d1 = max_abs_diff(eager0, kv.data() + kBatch * kDim);
  std::printf("KV slot 0 vs eager: %.2e; after update, slot 1 vs eager: %.2e\n", d0, d1);

  const fs::path snapshot_path = out / "engine_memory.json";
  cudakit::dump_snapshot(snapshot_path.string());
  cudakit::record_memory_history(std::nullopt);

  std::printf("\nopen these:\n  trace:  %s  (https://ui.perfetto.dev)\n"
              "  memory: PYTHONPATH=build/python python3 -m cudakit.memory_viz %s -o %s\n"
              "          (the HTML page; PYTHONPATH: the built package, from the repository root)\n",
              trace_path.c_str(), snapshot_path.c_str(), (out / "engine_memory.html").c_str());
  const bool ok = d0 < 1e-3f && d1 < 1e-3f;
  std::printf("%s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "engine example failed: %s\n", e.what());
  return 1;
}
