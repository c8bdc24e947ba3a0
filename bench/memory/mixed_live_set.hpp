// The mixed live-set workload shared by bench_memory_alloc and bench/torch/alloc_vs_torch, so
// that cudakit's and torch's numbers come from the same sequence: 256 live allocations,
// log-uniform 512 B .. 8 MiB; step j replaces live block index[j] with one of size[j]
// (4096 precomputed steps, repeated). Seeded per benchmark thread.
#pragma once

#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

struct MixedLiveSet {
  static constexpr std::size_t kLive = 256;
  static constexpr std::size_t kSteps = 4096;  // power of two: step j is k & (kSteps - 1)
  std::vector<std::size_t> initial, size, index;

  explicit MixedLiveSet(int thread_index) : initial(kLive), size(kSteps), index(kSteps) {
    std::mt19937 rng(1234 + thread_index);
    std::uniform_real_distribution<double> logsize(9, 23);
    for (auto& s : initial) s = static_cast<std::size_t>(std::exp2(logsize(rng)));
    for (std::size_t i = 0; i < kSteps; ++i) {
      size[i] = static_cast<std::size_t>(std::exp2(logsize(rng)));
      index[i] = rng() % kLive;
    }
  }
};
