// cudakit's caching allocator vs PyTorch's c10 CUDACachingAllocator, in one process on the
// same GPU: cached alloc+free pairs at 512 B, 1 MiB, 64 MiB and a mixed live set, on 1 and
// 8 threads. Both allocate on the device's default stream.
//   CUDAKIT_BACKEND=cuda build/bench/torch/alloc_vs_torch
#include <benchmark/benchmark.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <mutex>
#include <vector>

#include "cudakit/device.hpp"
#include "cudakit/memory.hpp"
#include "../memory/mixed_live_set.hpp"

namespace c10alloc = c10::cuda::CUDACachingAllocator;

static void init_torch() {
  static std::once_flag once;
  std::call_once(once, [] { c10alloc::init(cudakit::device_count()); });
}

struct Cudakit {
  static void* alloc(std::size_t n) { return cudakit::caching_allocator_alloc(n, 0); }
  static void free(void* p) { cudakit::caching_allocator_delete(p); }
};
struct Torch {
  static void* alloc(std::size_t n) { return c10alloc::raw_alloc(n); }
  static void free(void* p) { c10alloc::raw_delete(p); }
};

template <class A>
static void Pair(benchmark::State& state) {
  init_torch();
  cudakit::set_device(0);
  const auto bytes = static_cast<std::size_t>(state.range(0));
  A::free(A::alloc(bytes));  // warm the cache
  for (auto _ : state) {
    void* p = A::alloc(bytes);
    benchmark::DoNotOptimize(p);
    A::free(p);
  }
  state.SetItemsProcessed(state.iterations());
}

// The mixed live set (bench/memory/mixed_live_set.hpp): each iteration frees a random live
// block and allocates a new size in its place.
template <class A>
static void Mixed(benchmark::State& state) {
  init_torch();
  cudakit::set_device(0);
  const MixedLiveSet w(state.thread_index());
  std::vector<void*> live;
  for (std::size_t s : w.initial) live.push_back(A::alloc(s));
  std::size_t k = 0;
  for (auto _ : state) {
    const std::size_t j = k++ & (MixedLiveSet::kSteps - 1);
    A::free(live[w.index[j]]);
    live[w.index[j]] = A::alloc(w.size[j]);
  }
  for (auto p : live) A::free(p);
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK_TEMPLATE(Pair, Cudakit)->Arg(512)->Arg(1 << 20)->Arg(64 << 20)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK_TEMPLATE(Pair, Torch)->Arg(512)->Arg(1 << 20)->Arg(64 << 20)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK_TEMPLATE(Mixed, Cudakit)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK_TEMPLATE(Mixed, Torch)->Threads(1)->Threads(8)->UseRealTime();

BENCHMARK_MAIN();
