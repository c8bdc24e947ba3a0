// cudakit's caching allocator vs PyTorch's c10 CUDACachingAllocator, in one process on the
// same GPU: cached alloc+free pairs at 512 B, 1 MiB, 64 MiB and a mixed live set, on 1 and
// 8 threads. Both allocate on the device's default stream.
//   CUDAKIT_BACKEND=cuda build/bench/torch/alloc_vs_torch
#include <benchmark/benchmark.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <cmath>
#include <mutex>
#include <random>
#include <vector>

#include "cudakit/device.hpp"
#include "cudakit/memory.hpp"

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

// 256 live allocations, log-uniform 512 B .. 8 MiB; each iteration replaces a random one.
template <class A>
static void Mixed(benchmark::State& state) {
  init_torch();
  cudakit::set_device(0);
  std::mt19937 rng(1234 + state.thread_index());
  std::uniform_real_distribution<double> logsize(9, 23);
  std::vector<void*> live(256);
  for (auto& p : live) p = A::alloc(static_cast<std::size_t>(std::exp2(logsize(rng))));
  std::vector<std::size_t> sizes(4096), idx(4096);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    sizes[i] = static_cast<std::size_t>(std::exp2(logsize(rng)));
    idx[i] = rng() % live.size();
  }
  std::size_t k = 0;
  for (auto _ : state) {
    const std::size_t j = k++ & 4095;
    A::free(live[idx[j]]);
    live[idx[j]] = A::alloc(sizes[j]);
  }
  for (auto p : live) A::free(p);
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK_TEMPLATE(Pair, Cudakit)->Arg(512)->Arg(1 << 20)->Arg(64 << 20)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK_TEMPLATE(Pair, Torch)->Arg(512)->Arg(1 << 20)->Arg(64 << 20)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK_TEMPLATE(Mixed, Cudakit)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK_TEMPLATE(Mixed, Torch)->Threads(1)->Threads(8)->UseRealTime();

BENCHMARK_MAIN();
