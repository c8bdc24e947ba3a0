// Cached alloc+free latency through the public path (allocate_device → Allocation::reset),
// 512 B / 1 MiB / 64 MiB / a mixed live set, 1 and 8 threads. Runs on either backend:
//   CUDAKIT_BACKEND=emulated build/bench/bench_memory_alloc
//   build/bench/bench_memory_alloc --benchmark_filter=Pair   (GPU)
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <x86intrin.h>
#include <vector>

#include "cudakit/allocation.hpp"
#include "cudakit/memory.hpp"

using namespace cudakit;

static void Pair(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  { Allocation warm = allocate_device(bytes); }
  for (auto _ : state) {
    Allocation a = allocate_device(bytes);
    benchmark::DoNotOptimize(a.get());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(Pair)->Arg(512)->Arg(1 << 20)->Arg(64 << 20)->Threads(1)->Threads(8)->UseRealTime();

static void RawPair(benchmark::State& state) {  // caching_allocator_alloc/delete
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = caching_allocator_alloc(bytes);
    caching_allocator_delete(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(RawPair)->Arg(512)->Threads(1)->Threads(8)->UseRealTime();

// A live set of 256 allocations (sizes 512 B .. 8 MiB, log-uniform); each iteration frees a
// random one and allocates a new size in its place.
static void Mixed(benchmark::State& state) {
  std::mt19937 rng(1234 + state.thread_index());
  std::uniform_real_distribution<double> logsize(9, 23);
  std::vector<Allocation> live;
  for (int i = 0; i < 256; ++i)
    live.push_back(allocate_device(static_cast<std::size_t>(std::exp2(logsize(rng)))));
  std::vector<std::size_t> sizes(4096), idx(4096);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    sizes[i] = static_cast<std::size_t>(std::exp2(logsize(rng)));
    idx[i] = rng() % live.size();
  }
  std::size_t k = 0;
  for (auto _ : state) {
    const std::size_t j = k & 4095;
    live[idx[j]] = allocate_device(sizes[j]);
    ++k;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(Mixed)->Threads(1)->Threads(8)->UseRealTime();

// The same live set in torch's benchmark order (bench/torch/alloc_vs_torch.cpp): free the
// old block first, then allocate the new size (raw caching_allocator_alloc/delete).
static void MixedFreeFirst(benchmark::State& state) {
  std::mt19937 rng(1234 + state.thread_index());
  std::uniform_real_distribution<double> logsize(9, 23);
  std::vector<void*> live(256);
  for (auto& p : live) p = caching_allocator_alloc(static_cast<std::size_t>(std::exp2(logsize(rng))));
  std::vector<std::size_t> sizes(4096), idx(4096);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    sizes[i] = static_cast<std::size_t>(std::exp2(logsize(rng)));
    idx[i] = rng() % live.size();
  }
  std::size_t k = 0;
  for (auto _ : state) {
    const std::size_t j = k++ & 4095;
    caching_allocator_delete(live[idx[j]]);
    live[idx[j]] = caching_allocator_alloc(sizes[j]);
  }
  for (void* p : live) caching_allocator_delete(p);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(MixedFreeFirst)->Threads(1)->Threads(8)->UseRealTime();

static void MemoryAllocatedQuery(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(memory_allocated());
}
BENCHMARK(MemoryAllocatedQuery);

static void PairWithHistory(benchmark::State& state) {
  record_memory_history("all", "all", "cpp", 100000);
  for (auto _ : state) {
    Allocation a = allocate_device(512);
    benchmark::DoNotOptimize(a.get());
  }
  record_memory_history(std::nullopt);
}
BENCHMARK(PairWithHistory);

static void PairWithHistoryNoStacks(benchmark::State& state) {  // trace ring only
  record_memory_history("all", "", "python", 100000);
  for (auto _ : state) {
    Allocation a = allocate_device(512);
    benchmark::DoNotOptimize(a.get());
  }
  record_memory_history(std::nullopt);
}
BENCHMARK(PairWithHistoryNoStacks);

// What a history timestamp costs on this machine (TSC read vs the vDSO clock): in a VM the
// TSC may be trapped, which history recording would feel three times per alloc/free pair.
static void ClockTsc(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(__rdtsc());
}
BENCHMARK(ClockTsc);
static void ClockSteady(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(std::chrono::steady_clock::now());
}
BENCHMARK(ClockSteady);

BENCHMARK_MAIN();
