// CUDA graph host costs (issue 9, section 5), C++ side, one process, side by side:
//   * replay of a 10-kernel graph: CUDAGraph::replay() (no hook) vs the raw launch of the
//     same exec graph through the seam (cuGraphLaunch on cuda) -- goal <= 1.05x;
//   * the same replay with 1 and 4 trivial hooks registered -- goal <= +0.2 us per hook;
//   * capture + instantiate of a 1000-kernel graph (torch 2.11 on the H200: 4.3 ms).
// Replays are timed in batches of 4 with a synchronize outside the timed region (a shallow
// launch queue, as the torch anchors were measured); the reported time is per replay.
// Run: CUDAKIT_BACKEND=cuda|emulated build/bench/bench_graphs
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/device.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/tensor.hpp"

using namespace cudakit;

namespace {

constexpr int kBatch = 4;

struct TenKernelGraph {
  Tensor x = zeros({1024}, device_options());
  Tensor one = ones({1024}, device_options());
  CUDAGraph graph;
  Stream stream;
  TenKernelGraph() {
    CaptureOptions opts;
    opts.stream = stream.ref();
    capture(graph, [&] {
      for (int i = 0; i < 10; ++i) add_(x, one);  // one kernel each
    }, opts);
    synchronize();
  }
};

TenKernelGraph& ten() {
  static auto* g = new TenKernelGraph();  // leaked: lives for all benchmarks
  return *g;
}

// Times `launch` kBatch times per iteration, synchronizing outside the timed region.
template <class Launch>
void run_batches(benchmark::State& state, StreamRef s, Launch&& launch) {
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) launch();
    auto t1 = std::chrono::steady_clock::now();
    s.sync();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count() / kBatch);
  }
}

void BM_ReplayCudakit(benchmark::State& state) {
  auto& g = ten();
  StreamGuard guard(g.stream);
  run_batches(state, g.stream, [&] { g.graph.replay(); });
}
BENCHMARK(BM_ReplayCudakit)->UseManualTime()->Iterations(20000);

void BM_ReplayRawLaunch(benchmark::State& state) {
  auto& g = ten();
  detail::Backend& b = detail::backend();
  detail::GraphExecHandle exec = g.graph.raw_cuda_graph_exec();
  detail::StreamHandle s = g.stream.handle();
  run_batches(state, g.stream, [&] { b.graph_launch(exec, s); });
}
BENCHMARK(BM_ReplayRawLaunch)->UseManualTime()->Iterations(20000);

// Trivial hooks: global replay-start hooks (the case a profiler registers).
void BM_ReplayWithGlobalHooks(benchmark::State& state) {
  auto& g = ten();
  std::vector<HookHandle> hooks;
  long calls = 0;
  for (int i = 0; i < state.range(0); ++i) {
    hooks.push_back(register_graph_replay_start_hook([&calls](CUDAGraph&) { ++calls; }));
  }
  StreamGuard guard(g.stream);
  run_batches(state, g.stream, [&] { g.graph.replay(); });
  for (auto& h : hooks) h.remove();
  benchmark::DoNotOptimize(calls);
  state.counters["hooks"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_ReplayWithGlobalHooks)->Arg(1)->Arg(4)->UseManualTime()->Iterations(20000);

void BM_ReplayWithGraphHooks(benchmark::State& state) {
  auto& g = ten();
  std::vector<HookHandle> hooks;
  long calls = 0;
  for (int i = 0; i < state.range(0); ++i) {
    hooks.push_back(g.graph.register_replay_end_hook([&calls](CUDAGraph&) { ++calls; }));
  }
  StreamGuard guard(g.stream);
  run_batches(state, g.stream, [&] { g.graph.replay(); });
  for (auto& h : hooks) h.remove();
  benchmark::DoNotOptimize(calls);
  state.counters["hooks"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_ReplayWithGraphHooks)->Arg(1)->Arg(4)->UseManualTime()->Iterations(20000);

// Capture + instantiate of a graph of `range(0)` kernels (the anchor is 1000), then reset.
void BM_CaptureInstantiate(benchmark::State& state) {
  Tensor x = zeros({1024}, device_options());
  Tensor one = ones({1024}, device_options());
  Stream stream;
  StreamGuard guard(stream);
  CUDAGraph g;
  const int n = static_cast<int>(state.range(0));
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    g.capture_begin();
    for (int i = 0; i < n; ++i) add_(x, one);
    g.capture_end();  // instantiates (keep_graph=false)
    auto t1 = std::chrono::steady_clock::now();
    g.reset();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
  state.counters["kernels"] = n;
}
BENCHMARK(BM_CaptureInstantiate)->Arg(1000)->UseManualTime()->Iterations(50)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
