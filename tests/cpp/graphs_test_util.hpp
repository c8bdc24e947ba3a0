// Helpers shared by the graph tests (test_graphs*.cpp).
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "backend/backend.hpp"
#include "cudakit/tensor.hpp"

namespace cudakit::graphs_test {

inline bool have_device() { return detail::backend().device_count() > 0; }

// Values of a (device) tensor as doubles, after the copy completes.
inline std::vector<double> values(const Tensor& t) {
  Tensor h = t.to(Device::cpu(), DType::float64).contiguous();
  return std::vector<double>(h.data<double>(), h.data<double>() + h.numel());
}

}  // namespace cudakit::graphs_test

#define REQUIRE_DEVICE()                                                        \
  do {                                                                          \
    if (!::cudakit::graphs_test::have_device()) GTEST_SKIP() << "no device";    \
  } while (0)
