// cudakit's pinned host cache vs PyTorch's at::cuda CachingHostAllocator, in one process:
// cached alloc+free pairs at 4 KiB, 1 MiB, 64 MiB on 1 and 8 threads, and a pair whose
// block was used on a stream (record_stream / CachingHostAllocator_recordEvent) before the
// free. Copy bandwidth is not here: both libraries end in the same cuMemcpyAsync, and
// bench/python/bench_pinned.py compares the copies through each library's own tensors.
//   cmake --build build --target pinned_vs_torch    (not part of `all`: needs libtorch_cuda)
//   CUDAKIT_BACKEND=cuda build/bench/torch/pinned_vs_torch
#include <ATen/cuda/CachingHostAllocator.h>
#include <benchmark/benchmark.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include "cudakit/allocation.hpp"
#include "cudakit/device.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/stream.hpp"

namespace {

struct Cudakit {
  cudakit::Allocation a;
  explicit Cudakit(std::size_t n) : a(cudakit::allocate_host(n, true)) {}
  void* get() const { return a.get(); }
  // The current stream of device 0 (the legacy default stream, as torch's below).
  void record() { cudakit::record_stream(a.get(), cudakit::current_stream(0)); }
};

struct Torch {
  c10::DataPtr p;
  explicit Torch(std::size_t n) : p(at::cuda::getCachingHostAllocator()->allocate(n)) {}
  void* get() const { return p.get(); }
  void record() {
    at::cuda::CachingHostAllocator_recordEvent(p.get(), p.get_context(),
                                               c10::cuda::getCurrentCUDAStream(0));
  }
};

// torch's device-side state (its CUDA context and allocator) exists before the first pair.
void init_torch() {
  static const bool once = [] {
    c10::cuda::CUDACachingAllocator::init(cudakit::device_count());
    c10::cuda::set_device(0);
    return true;
  }();
  (void)once;
}

template <class A>
void Pair(benchmark::State& state) {
  init_torch();
  cudakit::set_device(0);
  const auto bytes = static_cast<std::size_t>(state.range(0));
  { A warm(bytes); }  // the size class now has a cached block
  for (auto _ : state) {
    A a(bytes);
    benchmark::DoNotOptimize(a.get());
  }
  state.SetItemsProcessed(state.iterations());
}

template <class A>
void RecordedPair(benchmark::State& state) {
  init_torch();
  cudakit::set_device(0);
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    A a(bytes);
    a.record();
    benchmark::DoNotOptimize(a.get());
  }
  cudakit::synchronize(0);
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK_TEMPLATE(Pair, Cudakit)->Arg(4 << 10)->Arg(1 << 20)->Arg(64 << 20)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK_TEMPLATE(Pair, Torch)->Arg(4 << 10)->Arg(1 << 20)->Arg(64 << 20)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK_TEMPLATE(RecordedPair, Cudakit)->Arg(4 << 10)->Arg(1 << 20)->UseRealTime();
BENCHMARK_TEMPLATE(RecordedPair, Torch)->Arg(4 << 10)->Arg(1 << 20)->UseRealTime();

BENCHMARK_MAIN();
