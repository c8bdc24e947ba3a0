// Cost of cudakit::nvtx calls with no tool attached (the production case: annotations stay in
// the code), next to the raw NVTX3 C calls they wrap, plus profiler start/stop through the
// seam. Goal (issue 10): <= 10 ns per call. Run with NVTX_INJECTION64_PATH unset.
//   build/bench/bench_nvtx [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <exception>

#include "cudakit/nvtx.hpp"
#include "cudakit/profiler.hpp"

#if CUDAKIT_BENCH_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace nv = cudakit::nvtx;

namespace {

#if CUDAKIT_BENCH_WITH_NVTX
// Baseline: what any NVTX user pays (NVTX's null-pointer test; inlined into this binary).
void BM_RawNvtxPushPop(benchmark::State& state) {
  for (auto _ : state) {
    nvtxRangePushA("step");
    nvtxRangePop();
  }
}
BENCHMARK(BM_RawNvtxPushPop);
#endif

void BM_RangePushPop(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(nv::range_push("step"));
    benchmark::DoNotOptimize(nv::range_pop());
  }
}
BENCHMARK(BM_RangePushPop)->ThreadRange(1, 4);

void BM_Mark(benchmark::State& state) {
  for (auto _ : state) nv::mark("tick");
}
BENCHMARK(BM_Mark);

void BM_ScopedRange(benchmark::State& state) {
  for (auto _ : state) {
    nv::ScopedRange r("step");
    benchmark::DoNotOptimize(r.depth());
  }
}
BENCHMARK(BM_ScopedRange);

void BM_RangeStartEnd(benchmark::State& state) {
  for (auto _ : state) nv::range_end(nv::range_start("async"));
}
BENCHMARK(BM_RangeStartEnd)->ThreadRange(1, 4);

// Everything torch lacks at once: a domain, colour, category and payload.
void BM_ScopedRangeWithAttributes(benchmark::State& state) {
  nv::Domain& d = nv::Domain::cudakit();
  const std::uint32_t category = d.category("bench");
  std::int64_t i = 0;
  for (auto _ : state) {
    nv::ScopedRange r({.message = "step", .color = nv::Color::rgb(0, 128, 255),
                       .category = category, .payload = ++i},
                      d);
    benchmark::DoNotOptimize(r.depth());
  }
}
BENCHMARK(BM_ScopedRangeWithAttributes);

// One seam call each way (emulated: an atomic store; cuda: the driver's cuProfilerStart/Stop).
void BM_ProfilerStartStop(benchmark::State& state) {
  try {
    cudakit::profiler::start();
    cudakit::profiler::stop();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    cudakit::profiler::start();
    cudakit::profiler::stop();
  }
}
BENCHMARK(BM_ProfilerStartStop);

}  // namespace

BENCHMARK_MAIN();
