// Out-of-memory behaviour on a small emulated device (256 MiB, set before first use).
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "memory/device_allocator.hpp"

using namespace cudakit;
constexpr std::size_t MiB = std::size_t(1) << 20;

namespace {
struct SmallDevice : ::testing::Environment {
  void SetUp() override { setenv("CUDAKIT_EMULATED_MEMORY", "256MiB", 1); }
};
const auto* env = ::testing::AddGlobalTestEnvironment(new SmallDevice);
bool emulated() { return std::string(detail::backend().name()) == "emulated"; }
}  // namespace

TEST(MemoryOom, RaisesWithDiagnosisAndRecovers) {
  if (!emulated()) GTEST_SKIP() << "needs the emulated backend's small device";
  std::vector<Allocation> held;
  bool raised = false;
  try {
    for (int i = 0; i < 100; ++i) held.push_back(allocate_device(30 * MiB));
  } catch (const OutOfMemoryError& e) {
    raised = true;
    std::string what = e.what();
    EXPECT_NE(what.find("Tried to allocate 30.00 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("GPU 0 has a total capacity of 256.00 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("is allocated"), std::string::npos) << what;
    EXPECT_EQ(e.device(), 0);
    EXPECT_EQ(e.requested_bytes(), 30 * MiB);
    EXPECT_EQ(e.total_bytes(), 256 * MiB);
  }
  ASSERT_TRUE(raised);
  EXPECT_GE(held.size(), 7u);
  auto m = memory_stats();
  EXPECT_EQ(m["num_ooms"], 1);
  EXPECT_GE(m["num_alloc_retries"], 1);
  held.pop_back();
  held.pop_back();
  Allocation next = allocate_device(30 * MiB);  // succeeds after frees
  EXPECT_TRUE(next);
  next.reset();
  held.clear();
  empty_cache();
  EXPECT_EQ(memory_allocated(), 0u);
  EXPECT_EQ(memory_reserved(), 0u) << "no leak after OOM";
}

TEST(MemoryOom, CachedBlocksAreReleasedBeforeFailing) {
  if (!emulated()) GTEST_SKIP();
  empty_cache();
  {
    std::vector<Allocation> v;
    for (int i = 0; i < 6; ++i) v.push_back(allocate_device(30 * MiB));
  }  // 180 MiB cached, unallocated
  EXPECT_GE(memory_reserved(), 180 * MiB);
  const auto retries = memory_stats()["num_alloc_retries"];
  Allocation big = allocate_device(200 * MiB);  // only fits if the cache is released
  EXPECT_TRUE(big);
  EXPECT_GT(memory_stats()["num_alloc_retries"], retries);
}

TEST(MemoryOom, PerProcessFractionCapsReserved) {
  if (!emulated()) GTEST_SKIP();
  empty_cache();
  set_per_process_memory_fraction(0.25);
  EXPECT_DOUBLE_EQ(get_per_process_memory_fraction(), 0.25);
  Allocation a = allocate_device(40 * MiB);
  try {
    Allocation b = allocate_device(40 * MiB);
    FAIL() << "allocation above the 64 MiB cap succeeded";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("memory fraction"), std::string::npos) << e.what();
  }
  set_per_process_memory_fraction(1.0);
  Allocation b = allocate_device(40 * MiB);
  EXPECT_TRUE(b);
}

TEST(MemoryOom, ExpandableOomLeavesNothingMapped) {
  if (!emulated()) GTEST_SKIP();
  empty_cache();
  memory::DeviceAllocator a(0, detail::backend(),
                            memory::AllocatorConfig::parse("expandable_segments:True"));
  std::vector<memory::Block*> v;
  EXPECT_THROW(
      {
        for (int i = 0; i < 20; ++i) v.push_back(a.malloc(30 * MiB, nullptr));
      },
      OutOfMemoryError);
  for (auto* b : v) a.free(reinterpret_cast<void*>(b->ptr));
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
  EXPECT_EQ(detail::backend().mem_get_info(0).free, 256 * MiB);
}
