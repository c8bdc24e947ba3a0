// C++ hot-path costs: current stream lookup, event record, stream guard, device guard.
// Run: CUDAKIT_BACKEND=cuda|emulated build/bench/bench_streams
#include <benchmark/benchmark.h>

#include "cudakit/device.hpp"
#include "cudakit/stream.hpp"

using namespace cudakit;

static void BM_CurrentStream(benchmark::State& state) {
  init();
  for (auto _ : state) benchmark::DoNotOptimize(current_stream());
}
BENCHMARK(BM_CurrentStream);

static void BM_CurrentDevice(benchmark::State& state) {
  init();
  for (auto _ : state) benchmark::DoNotOptimize(current_device());
}
BENCHMARK(BM_CurrentDevice);

static void BM_StreamGuard(benchmark::State& state) {
  StreamRef s = stream_from_pool(0);
  for (auto _ : state) {
    StreamGuard g(s);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_StreamGuard);

static void BM_EventRecord(benchmark::State& state) {
  StreamRef s = stream_from_pool(0);
  Event e;
  e.record(s);
  for (auto _ : state) e.record(s);
  s.sync();
}
BENCHMARK(BM_EventRecord);

static void BM_EventCreateRecordDestroy(benchmark::State& state) {
  StreamRef s = stream_from_pool(0);
  for (auto _ : state) {
    Event e;
    e.record(s);
  }
  s.sync();
}
BENCHMARK(BM_EventCreateRecordDestroy);

BENCHMARK_MAIN();
