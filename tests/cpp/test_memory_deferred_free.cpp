// Frees made inside a stream host function are deferred to the next allocator call from an
// ordinary thread (memory/deferred_free.hpp): the host function never takes an allocator lock.
// The cuda backend marks its host functions; here the mark is set by hand, so the test runs
// on either backend.
#include <gtest/gtest.h>

#include <thread>

#include "backend/backend.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/device.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/stream.hpp"
#include "memory/device_allocator.hpp"
#include "memory/host_allocator.hpp"

using namespace cudakit;

namespace {
std::int64_t allocated_without_draining() {
  return memory::device_allocator(0).allocated_bytes_now();  // no drain on this path
}
}  // namespace

TEST(DeferredFree, DeviceFreeInAHostFunctionWaitsForTheNextAllocatorCall) {
  if (!is_available()) GTEST_SKIP() << "no device";
  const std::size_t before = memory_allocated(0);
  Allocation a = allocate_device(1 << 20, 0);
  const std::int64_t with_block = allocated_without_draining();
  std::thread([&] {
    detail::HostFunctionScope host_function;
    ASSERT_TRUE(detail::in_host_function());
    a.reset();  // queued, not freed: no allocator lock taken here
  }).join();
  EXPECT_FALSE(detail::in_host_function());
  EXPECT_EQ(allocated_without_draining(), with_block);
  EXPECT_EQ(memory_allocated(0), before);  // a statistics query drains the queue
  EXPECT_LT(allocated_without_draining(), with_block);
}

TEST(DeferredFree, AnAllocationDrainsTheQueue) {
  if (!is_available()) GTEST_SKIP() << "no device";
  void* p = caching_allocator_alloc(4096, 0);
  const std::int64_t with_block = allocated_without_draining();
  std::thread([&] {
    detail::HostFunctionScope host_function;
    caching_allocator_delete(p);
  }).join();
  EXPECT_EQ(allocated_without_draining(), with_block);
  void* q = caching_allocator_alloc(4096, 0);  // drains first: p's block can be reused
  EXPECT_EQ(q, p);
  caching_allocator_delete(q);
}

TEST(DeferredFree, PinnedHostFreeInAHostFunctionIsDeferredToo) {
  if (!is_available()) GTEST_SKIP() << "no device";
  Allocation h = allocate_host(1 << 16, /*pinned=*/true);
  void* ptr = h.get();
  const auto before = host_memory_stats();
  std::thread([&] {
    detail::HostFunctionScope host_function;
    h.reset();
  }).join();
  EXPECT_TRUE(memory::host_allocator().owns(ptr));  // queued, not freed (owns() never drains)
  // A statistics query drains the queue, as for device memory.
  EXPECT_EQ(host_memory_stats().at("allocations.current"), before.at("allocations.current") - 1);
  EXPECT_FALSE(memory::host_allocator().owns(ptr));
  Allocation again = allocate_host(1 << 16, /*pinned=*/true);  // reuses the cached block
  EXPECT_EQ(again.get(), ptr);
}

TEST(DeferredFree, ScopesNestAndRestore) {
  EXPECT_FALSE(detail::in_host_function());
  {
    detail::HostFunctionScope outer;
    {
      detail::HostFunctionScope inner;
      EXPECT_TRUE(detail::in_host_function());
    }
    EXPECT_TRUE(detail::in_host_function());
  }
  EXPECT_FALSE(detail::in_host_function());
}
