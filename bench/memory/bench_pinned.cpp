// Pinned host memory: cached alloc+free latency of the pinned pool, and host <-> device copy
// bandwidth (issue 3: "limit ~55 GB/s measured with torch" on the H200's PCIe Gen5 x16).
// Runs on either backend (the emulated one moves bytes with host memcpy, so its bandwidth
// is a smoke test only):
//   CUDAKIT_BACKEND=emulated build/bench/bench_pinned --benchmark_min_time=0.05
//   build/bench/bench_pinned --benchmark_repetitions=5 \
//       --benchmark_report_aggregates_only=true                        (GPU; medians)
//
// Alloc benches: allocate_host(pinned) -> Allocation::reset, one iteration = one pair, the
// block size class warmed first (cached path). PinnedPairRecorded adds record_stream on a
// stream before the free: the pool then records an event and reuses the block only after
// it completes (what a non_blocking copy from a temporary pinned buffer costs).
//
// Bandwidth benches: one iteration = a batch of copies (>= 256 MiB in total) between an
// event record and an event sync on one non-blocking stream; the time is the event time
// (UseManualTime), and bytes_per_second is what to read. Raw* go straight through the
// stream-ordered copy of the backend seam (cuMemcpyAsync); Tensor* through
// Tensor::copy_(non_blocking=true), the public path (adds the keep-alive bookkeeping).
// Pageable* copy from/to malloc'd memory, for contrast (the driver stages it).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/device.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"

using namespace cudakit;

namespace {

constexpr std::size_t kKiB = 1024, kMiB = 1024 * kKiB;
constexpr std::size_t kBatchBytes = 256 * kMiB;  // per timed batch: ~5 ms at 55 GB/s

bool have_device(benchmark::State& state) {
  if (device_count() > 0) return true;
  state.SkipWithError("no device (set CUDAKIT_BACKEND=emulated to run without a GPU)");
  return false;
}

// Non-zero, non-constant content (zeros can hide unwritten memory and flatter compressing
// links); touching every page also keeps first-touch faults out of the pageable numbers.
void fill_pattern(void* p, std::size_t n) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
}

}  // namespace

// ---- pinned alloc+free (cached path) ----
static void PinnedPair(benchmark::State& state) {
  if (!have_device(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  { Allocation warm = allocate_host(bytes, true); }  // this size class now has a cached block
  for (auto _ : state) {
    Allocation a = allocate_host(bytes, true);
    benchmark::DoNotOptimize(a.get());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(PinnedPair)->Arg(4 * kKiB)->Arg(kMiB)->Arg(64 * kMiB)->Threads(1)->Threads(8)->UseRealTime();

// Pair with a recorded stream use: the free records an event, the next allocate processes
// it. The stream is idle, so the block is reusable as soon as the event is seen complete.
static void PinnedPairRecorded(benchmark::State& state) {
  if (!have_device(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  Stream s(0);
  const auto before = host_memory_stats()["num_host_alloc"];
  for (auto _ : state) {
    Allocation a = allocate_host(bytes, true);
    record_stream(a.get(), s);
    benchmark::DoNotOptimize(a.get());
  }
  s.sync();
  state.SetItemsProcessed(state.iterations());
  // Pairs that found no completed block and had to pin new memory (0 is the goal).
  state.counters["new_blocks"] = static_cast<double>(host_memory_stats()["num_host_alloc"] - before);
}
BENCHMARK(PinnedPairRecorded)->Arg(4 * kKiB)->Arg(kMiB)->UseRealTime();

// Uncached pinned allocation (cuMemHostAlloc + cuMemFreeHost): what the cache saves.
static void PinnedUncached(benchmark::State& state) {
  if (!have_device(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  host_empty_cache();  // blocks left by earlier benches must not land in the first iteration
  for (auto _ : state) {
    { Allocation a = allocate_host(bytes, true); benchmark::DoNotOptimize(a.get()); }
    host_empty_cache();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(PinnedUncached)->Arg(4 * kKiB)->Arg(kMiB)->Arg(64 * kMiB)->UseRealTime();

// ---- copy bandwidth ----
enum class Dir { h2d, d2h };
enum class Path { raw, tensor };

template <Dir D, Path P, bool Pinned>
static void Copy(benchmark::State& state) {
  if (!have_device(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const int batch = static_cast<int>(std::max<std::size_t>(1, kBatchBytes / bytes));
  set_device(0);
  Stream s(0);
  StreamGuard guard(s);  // Tensor::copy_ runs on the current stream
  Allocation host = allocate_host(bytes, Pinned);
  Allocation dev = allocate_device(bytes, 0, StreamRef(s));
  fill_pattern(host.get(), bytes);
  detail::Backend& be = detail::backend();
  be.memcpy_async(dev.get(), host.get(), bytes, s.handle());  // warm-up; device = pattern
  s.sync();
  if (D == Dir::d2h) std::memset(host.get(), 0, bytes);  // poison: the copies must refill it
  // Tensors viewing the same buffers (no ownership: the Allocations outlive them).
  const auto n = static_cast<std::int64_t>(bytes);
  Tensor ht(Storage::external(host.get(), bytes, Device::cpu(), Pinned, [] {}), DType::uint8, {n}, {1});
  Tensor dt(Storage::external(dev.get(), bytes, Device::cuda(0), false, [] {}), DType::uint8, {n}, {1});
  Event start(EventOptions{.enable_timing = true}), end(EventOptions{.enable_timing = true});
  for (auto _ : state) {
    start.record(s);
    for (int i = 0; i < batch; ++i) {
      if constexpr (P == Path::raw) {
        if (D == Dir::h2d) be.memcpy_async(dev.get(), host.get(), bytes, s.handle());
        else be.memcpy_async(host.get(), dev.get(), bytes, s.handle());
      } else {
        if (D == Dir::h2d) dt.copy_(ht, /*non_blocking=*/true);
        else ht.copy_(dt, /*non_blocking=*/true);
      }
    }
    end.record(s);
    end.sync();
    state.SetIterationTime(static_cast<double>(start.elapsed_time(end)) / 1e3);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * batch *
                          static_cast<std::int64_t>(bytes));
  state.counters["copies_per_batch"] = batch;
  // Spot check: the last copy moved the right bytes (read back through the other direction).
  std::vector<unsigned char> back(std::min<std::size_t>(bytes, 4096));
  if (D == Dir::h2d) {
    be.memcpy_async(back.data(), dev.get(), back.size(), s.handle());
    s.sync();
    if (std::memcmp(back.data(), host.get(), back.size()) != 0)
      state.SkipWithError("H2D copy produced wrong bytes");
  } else {
    if (state.iterations() == 0) return;
    fill_pattern(back.data(), back.size());
    if (std::memcmp(back.data(), host.get(), back.size()) != 0)
      state.SkipWithError("D2H copy produced wrong bytes");
  }
}

#define CUDAKIT_COPY_BENCH(name, ...)                                                  \
  BENCHMARK_TEMPLATE(Copy, __VA_ARGS__)                                                \
      ->Name(name)->Arg(kMiB)->Arg(64 * kMiB)->Arg(256 * kMiB)->UseManualTime()        \
      ->Unit(benchmark::kMillisecond)
CUDAKIT_COPY_BENCH("RawH2D/pinned", Dir::h2d, Path::raw, true);
CUDAKIT_COPY_BENCH("RawD2H/pinned", Dir::d2h, Path::raw, true);
CUDAKIT_COPY_BENCH("TensorH2D/pinned", Dir::h2d, Path::tensor, true);
CUDAKIT_COPY_BENCH("TensorD2H/pinned", Dir::d2h, Path::tensor, true);
CUDAKIT_COPY_BENCH("RawH2D/pageable", Dir::h2d, Path::raw, false);
CUDAKIT_COPY_BENCH("RawD2H/pageable", Dir::d2h, Path::raw, false);

BENCHMARK_MAIN();
