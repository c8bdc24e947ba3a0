// Helpers of the comm / nccl tests: filled tensors, host copies, and ranks in threads.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/device.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"

namespace cudakit::testing {

inline int devices() { return detail::backend().device_count(); }

// A host float64 tensor holding `values`, converted to `dtype` on `device`.
inline Tensor make(const std::vector<double>& values, DType dtype, Device device,
                   Shape shape = {}) {
  std::vector<double> copy = values;
  if (shape.empty()) shape = {static_cast<std::int64_t>(values.size())};
  Tensor host = from_blob(copy.data(), shape, DType::float64).to(dtype).clone();
  return host.to(device);
}

// n values f(i) as `dtype` on `device`.
inline Tensor filled(std::int64_t n, const std::function<double(std::int64_t)>& f, DType dtype,
                     Device device) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = f(i);
  return make(v, dtype, device);
}

// The values of `t` (any device, synchronizing) as doubles, flattened.
inline std::vector<double> values(const Tensor& t) {
  Tensor h = t.to(Device::cpu()).to(DType::float64).contiguous();
  const double* p = h.data<double>();
  return std::vector<double>(p, p + h.numel());
}

// Runs fn(rank) on `n` threads and joins them; an exception on a rank fails the test with
// its message. Each rank's thread gets its own current stream on every device: two ranks
// enqueueing on one stream (the legacy default stream, shared by the threads of a process)
// would wait for each other in order and deadlock, as they would with NCCL.
inline void run_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::vector<Stream> own;
        for (int d = 0; d < devices(); ++d) {
          own.emplace_back(d);
          set_stream(own.back());
        }
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  }
}

}  // namespace cudakit::testing
