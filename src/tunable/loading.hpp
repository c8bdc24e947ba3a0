// Which candidates the tuner loads (tuner.cpp, "Kernel loading"), as pure functions of the
// candidate list, so the rule is tested without a GPU (tests/cpp/test_tunable_loading.cpp).
//
// A candidate's first run loads its kernel: ~3-4 ms of host time per cuBLASLt kernel on the
// H100 host (2026-12-07: a wave of three new configurations took 12.7 ms, four on 1024x4096^2
// took 12.7 ms, so the driver loads them one after another whatever the threads). Plans of one
// kernel family (GemmPlan::kernel_family: cuBLASLt's split-K variants of one configuration)
// share the kernel, so loading is counted in families: a wave takes the next candidates in
// the backend's order of promise until it holds `new_families` families not loaded before,
// plus the candidates of loaded families that follow them; and once the budget stops the
// loading, the remaining candidates of loaded families are still tried (their first run costs
// a launch, not a load).
//
// Internal header.
#pragma once

#include <algorithm>
#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "backend/math_ops.hpp"

namespace cudakit::tunable::detail {

using cudakit::detail::GemmPlanPtr;

// The end of the wave that starts at `begin`; adds the wave's families to `loaded`.
inline std::size_t next_wave_end(const std::vector<GemmPlanPtr>& all, std::size_t begin,
                                 std::set<std::string>& loaded, std::size_t new_families) {
  std::size_t end = begin, added = 0;
  for (; end < all.size(); ++end) {
    std::string family = all[end]->kernel_family();
    if (loaded.count(family)) continue;
    if (added == new_families) break;
    loaded.insert(std::move(family));
    ++added;
  }
  return end;
}

// Moves the candidates after `tried` whose family is loaded right behind the first `tried`
// (order otherwise kept) and returns how many candidates are now to be tried.
inline std::size_t with_loaded_families(std::vector<GemmPlanPtr>& all, std::size_t tried,
                                        const std::set<std::string>& loaded) {
  tried = std::min(tried, all.size());
  const auto middle = std::stable_partition(
      all.begin() + static_cast<std::ptrdiff_t>(tried), all.end(),
      [&](const GemmPlanPtr& p) { return loaded.count(p->kernel_family()) > 0; });
  return static_cast<std::size_t>(middle - all.begin());
}

}  // namespace cudakit::tunable::detail
