// Pinned host cache (src/memory/host_allocator): size classes, stream-aware reuse after
// record_event, one event per distinct recorded stream, pooled events, absurd sizes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "backend/backend.hpp"
#include "cudakit/error.hpp"
#include "cudakit/stream.hpp"
#include "memory/host_allocator.hpp"

using namespace cudakit;
using memory::HostAllocator;

namespace {
// Holds `s` busy until release(): work recorded after it stays pending.
struct StreamGate {
  std::shared_ptr<std::atomic<bool>> open = std::make_shared<std::atomic<bool>>(false);
  explicit StreamGate(const Stream& s) {
    s.launch_host_func([open = open] {
      while (!open->load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
  }
  ~StreamGate() { release(); }  // a failed assertion must not leave the stream stuck
  void release() { *open = true; }
};
}  // namespace

TEST(MemoryHost, SizeClassesArePowersOfTwo) {
  HostAllocator a;
  void* p = a.allocate(3000);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(a.owns(p));
  EXPECT_EQ(a.stats().allocated_bytes.current, 4096);
  EXPECT_TRUE(a.free(p));
  EXPECT_FALSE(a.free(p));          // already free
  EXPECT_EQ(a.allocate(4096), p);   // same class, cached
  void* small = a.allocate(1);
  EXPECT_EQ(a.stats().allocated_bytes.current, 4096 + 512);
  a.free(small);
  a.free(p);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
}

TEST(MemoryHost, AbsurdSizeThrowsInsteadOfHanging) {
  HostAllocator a;
  // Used to loop forever: the power-of-two rounding overflowed to 0.
  const std::size_t huge = (std::size_t{1} << 63) + 1;
  try {
    a.allocate(huge);
    FAIL() << "allocate(2^63+1) returned";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(huge)), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.allocate(SIZE_MAX), OutOfMemoryError);
  EXPECT_EQ(a.stats().allocations.current, 0);
}

TEST(MemoryHost, RecordedBlockWaitsForItsStreamAndEventsArePooled) {
  HostAllocator a;
  Stream s(0);
  void* p = a.allocate(1 << 20);
  StreamGate gate(s);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(a.record_event(p, s.handle(), 0));
  ASSERT_TRUE(a.free(p));
  EXPECT_EQ(a.pending_event_count(), 1u);  // one event for one stream, not 100
  void* q = a.allocate(1 << 20);           // the stream has not passed the event yet
  EXPECT_NE(q, p);
  a.free(q);
  gate.release();
  s.sync();
  // The next allocation sees the event complete: p is reusable, its event goes to the pool.
  void* r = a.allocate(1 << 20);
  EXPECT_TRUE(r == p || r == q);
  EXPECT_EQ(a.pending_event_count(), 0u);
  EXPECT_EQ(a.pooled_event_count(), 1u);
  // A second round reuses the pooled event instead of creating one.
  ASSERT_TRUE(a.record_event(r, s.handle(), 0));
  a.free(r);
  EXPECT_EQ(a.pooled_event_count(), 0u);
  EXPECT_EQ(a.pending_event_count(), 1u);
  s.sync();
  a.empty_cache();  // processes the completed event, releases every cached block
  EXPECT_EQ(a.pending_event_count(), 0u);
  EXPECT_EQ(a.pooled_event_count(), 1u);
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
}

TEST(MemoryHost, OneEventPerDistinctStream) {
  HostAllocator a;
  Stream s1(0), s2(0);
  void* p = a.allocate(4096);
  StreamGate g1(s1), g2(s2);
  for (int i = 0; i < 3; ++i) {
    a.record_event(p, s1.handle(), 0);
    a.record_event(p, s2.handle(), 0);
  }
  a.free(p);
  EXPECT_EQ(a.pending_event_count(), 2u);
  g1.release();
  s1.sync();
  void* q = a.allocate(4096);
  EXPECT_NE(q, p);  // s2 still holds p
  EXPECT_EQ(a.pending_event_count(), 1u);
  g2.release();
  s2.sync();
  void* r = a.allocate(4096);
  EXPECT_EQ(r, p);
  EXPECT_EQ(a.pending_event_count(), 0u);
  a.free(q);
  a.free(r);
  a.empty_cache();
}

TEST(MemoryHost, RecordEventRejectsBadDeviceAndForeignPointers) {
  HostAllocator a;
  Stream s(0);
  int local = 0;
  EXPECT_FALSE(a.record_event(&local, s.handle(), 0));
  void* p = a.allocate(512);
  EXPECT_THROW(a.record_event(p, s.handle(), kMaxDevices), ValueError);
  a.free(p);
}
