// Asynchronous host<->device copies whose host end is dropped before the copy ran: the bytes
// that arrive must be the ones the source held when copy_ was called, even when a new pinned
// tensor of the same size (which the pinned cache would love to hand the same block) is
// written at once. On CUDA this exercises the pinned block's event (no host callback); on
// the emulated backend the keep-alive path.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"
#include "memory/host_allocator.hpp"

using namespace cudakit;

namespace {
bool have_device() { return detail::backend().device_count() > 0; }

Tensor pinned_filled(std::int64_t n, std::int32_t value) {
  Tensor t = empty({n}, TensorOptions{DType::int32, Device::cpu(), true});
  auto* p = static_cast<std::int32_t*>(t.data_ptr());
  for (std::int64_t i = 0; i < n; ++i) p[i] = value;
  return t;
}
}  // namespace

TEST(TensorAsyncCopy, DroppedPinnedSourceIsNotReusedBeforeTheCopyRan) {
  if (!have_device()) GTEST_SKIP() << "no device";
  constexpr std::int64_t n = 16 << 20;  // 64 MiB: the copy takes long enough to race
  Tensor dst = empty({n}, TensorOptions{DType::int32, Device::cuda(0)});
  for (int round = 0; round < 3; ++round) {
    {
      Tensor src = pinned_filled(n, 7 + round);
      dst.copy_(src, /*non_blocking=*/true);
    }  // src's block goes back to the pinned cache while the copy may still run
    Tensor other = pinned_filled(n, -1);  // same size class: must not get src's block early
    current_stream(0).sync();
    Tensor back = dst.to(Device::cpu());
    const auto* p = static_cast<const std::int32_t*>(back.data_ptr());
    for (std::int64_t i = 0; i < n; i += 4099) ASSERT_EQ(p[i], 7 + round) << i;
    ASSERT_EQ(p[n - 1], 7 + round);
  }
}

TEST(TensorAsyncCopy, PinnedEndIsGuardedByAnEventOnCuda) {
  if (!have_device()) GTEST_SKIP() << "no device";
  constexpr std::int64_t n = 4 << 20;
  Tensor src = empty({n}, TensorOptions{DType::int32, Device::cuda(0)});
  src.fill_(Scalar(std::int64_t{42}));
  auto& host = memory::host_allocator();
  current_stream(0).sync();
  (void)pinned_filled(16, 0);  // an allocation processes events left by earlier tests
  const std::size_t before = host.pending_event_count();
  {
    Tensor dst = empty({n}, TensorOptions{DType::int32, Device::cpu(), true});
    dst.copy_(src, /*non_blocking=*/true);
  }
  if (detail::selected_backend_name() == "cuda") {
    // torch's way: the freed block waits for the copy's event in the cache (no host callback).
    EXPECT_EQ(host.pending_event_count(), before + 1);
  }
  current_stream(0).sync();
  (void)pinned_filled(16, 0);
  EXPECT_EQ(host.pending_event_count(), 0u);
}
