// Cached alloc+free latency through the public path (allocate_device → Allocation::reset),
// 512 B / 1 MiB / 64 MiB / a mixed live set, 1 and 8 threads. Runs on either backend:
//   CUDAKIT_BACKEND=emulated build/bench/bench_memory_alloc
//   build/bench/bench_memory_alloc --benchmark_filter=Pair   (GPU)
#include <benchmark/benchmark.h>

#include <chrono>
#include <x86intrin.h>
#include <vector>

#include "cudakit/allocation.hpp"
#include "cudakit/memory.hpp"
#include "mixed_live_set.hpp"

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

// A live set of 256 allocations (mixed_live_set.hpp); each iteration allocates a new size and
// then frees the block it replaces (Allocation's move assignment).
static void Mixed(benchmark::State& state) {
  const MixedLiveSet w(state.thread_index());
  std::vector<Allocation> live;
  for (std::size_t s : w.initial) live.push_back(allocate_device(s));
  std::size_t k = 0;
  for (auto _ : state) {
    const std::size_t j = k++ & (MixedLiveSet::kSteps - 1);
    live[w.index[j]] = allocate_device(w.size[j]);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(Mixed)->Threads(1)->Threads(8)->UseRealTime();

// The same live set in torch's benchmark order (bench/torch/alloc_vs_torch.cpp): free the
// old block first, then allocate the new size (raw caching_allocator_alloc/delete).
static void MixedFreeFirst(benchmark::State& state) {
  const MixedLiveSet w(state.thread_index());
  std::vector<void*> live;
  for (std::size_t s : w.initial) live.push_back(caching_allocator_alloc(s));
  std::size_t k = 0;
  for (auto _ : state) {
    const std::size_t j = k++ & (MixedLiveSet::kSteps - 1);
    caching_allocator_delete(live[w.index[j]]);
    live[w.index[j]] = caching_allocator_alloc(w.size[j]);
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
