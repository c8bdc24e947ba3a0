// Per-op cost of the stream sanitizer from C++ (no Python stack to capture): tiny ops with the
// sanitizer off and on. The time is the host's issue cost per op; every 256 ops the stream is
// synchronised so the queue stays short (on emulated a worker thread runs the ops).
//
//   build/bench/bench_sanitizer --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include "cudakit/device.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/sanitizer.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"

using namespace cudakit;

namespace {

bool set_mode(benchmark::State& state) {
  if (!is_available()) {
    state.SkipWithError("no device");
    return false;
  }
  sanitizer::disable();
  if (state.range(0)) sanitizer::enable(sanitizer::OnRace::raise);
  state.SetLabel(state.range(0) ? "sanitizer on" : "sanitizer off");
  return true;
}

void BM_AddInplace(benchmark::State& state) {
  if (!set_mode(state)) return;
  Tensor x = ones({16}, device_options()), y = ones({16}, device_options());
  std::int64_t i = 0;
  for (auto _ : state) {
    add_(x, y);
    if ((++i & 255) == 0) synchronize();
  }
  synchronize();
  sanitizer::disable();
}
BENCHMARK(BM_AddInplace)->Arg(0)->Arg(1);

void BM_AddAllocates(benchmark::State& state) {
  if (!set_mode(state)) return;
  Tensor x = ones({16}, device_options()), y = ones({16}, device_options());
  std::int64_t i = 0;
  for (auto _ : state) {
    Tensor z = x + y;
    benchmark::DoNotOptimize(z.data_ptr());
    if ((++i & 255) == 0) synchronize();
  }
  synchronize();
  sanitizer::disable();
}
BENCHMARK(BM_AddAllocates)->Arg(0)->Arg(1);

void BM_EventWaitBetweenStreams(benchmark::State& state) {
  if (!set_mode(state)) return;
  Stream a, b;
  for (auto _ : state) b.wait(a);
  synchronize();
  sanitizer::disable();
}
BENCHMARK(BM_EventWaitBetweenStreams)->Arg(0)->Arg(1);

void BM_DeclaredAccess(benchmark::State& state) {
  if (!set_mode(state)) return;
  Tensor x = ones({16}, device_options());
  synchronize();
  for (auto _ : state) sanitizer::declare_access({x}, {sanitizer::Buffer(x, "out")});
  sanitizer::disable();
}
BENCHMARK(BM_DeclaredAccess)->Arg(0)->Arg(1);

void BM_GraphReplay(benchmark::State& state) {
  if (!set_mode(state)) return;
  Tensor x = ones({16}, device_options()), y;
  CUDAGraph g;
  capture(g, [&] { y = (x + 1.0) * 2.0; });
  std::int64_t i = 0;
  for (auto _ : state) {
    g.replay();
    if ((++i & 255) == 0) synchronize();
  }
  synchronize();
  sanitizer::disable();
}
BENCHMARK(BM_GraphReplay)->Arg(0)->Arg(1);

}  // namespace

BENCHMARK_MAIN();
