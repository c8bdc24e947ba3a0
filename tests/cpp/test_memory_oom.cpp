// Out-of-memory behaviour on a small emulated device (256 MiB, set before first use).
#include <gtest/gtest.h>

#include <cstdio>
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
// The out-of-memory message of a.malloc(bytes), or "" when it succeeded.
std::string oom_message(memory::DeviceAllocator& a, std::size_t bytes) {
  try {
    a.malloc(bytes, nullptr);
  } catch (const OutOfMemoryError& e) {
    return e.what();
  }
  return "";
}
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
  EXPECT_LE(memory_reserved(), 256 * MiB);
  // Plain segments are released by the out-of-memory retry; expandable segments move the
  // cached pages to the new block before any retry (expandable_segment.cpp).
  if (!memory::settings_in_force().expandable_segments)
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

// The diagnosis (pytorch#29554): reserved-but-unallocated bytes, the largest free block, and
// whether fragmentation or the live set caused the failure.
TEST(MemoryOom, MessageBlamesFragmentationWhenTheRequestWouldFit) {
  if (!emulated()) GTEST_SKIP();
  empty_cache();
  memory::DeviceAllocator a(0, detail::backend(),
                            memory::AllocatorConfig::parse("expandable_segments:False"));
  a.free(reinterpret_cast<void*>(a.malloc(200 * MiB, nullptr)->ptr));  // one 200 MiB segment
  std::vector<memory::Block*> b;
  for (int i = 0; i < 4; ++i) b.push_back(a.malloc(45 * MiB, nullptr));  // split from it
  a.free(reinterpret_cast<void*>(b[0]->ptr));
  a.free(reinterpret_cast<void*>(b[2]->ptr));  // free: 45 + 45 + 20 MiB, in pieces
  const std::string what = oom_message(a, 80 * MiB);
  ASSERT_FALSE(what.empty()) << "80 MiB fit no piece and the device has 56 MiB left";
  if (std::getenv("SHOW_OOM")) std::printf("%s\n", what.c_str());
  EXPECT_NE(what.find("Of the 110.00 MiB reserved but unallocated, the largest free block is "
                      "45.00 MiB"), std::string::npos) << what;
  EXPECT_NE(what.find("110.00 MiB cached in pieces + 56.00 MiB still free"), std::string::npos)
      << what;
  EXPECT_NE(what.find("would fit if memory were not fragmented"), std::string::npos) << what;
  EXPECT_NE(what.find("expandable_segments:True"), std::string::npos) << what;
  a.free(reinterpret_cast<void*>(b[1]->ptr));
  a.free(reinterpret_cast<void*>(b[3]->ptr));
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
}

// Small blocks keep plain 2 MiB segments by default (config.hpp), so a fragmented small pool
// is not a matter of expandable chunks: the advice is the key that makes them expandable.
TEST(MemoryOom, FragmentedSmallPoolIsAdvisedTheKeyThatCoversIt) {
  if (!emulated()) GTEST_SKIP();
  empty_cache();
  // 4 MiB under the fraction: two small segments.
  memory::DeviceAllocator a(0, detail::backend(),
                            memory::AllocatorConfig::parse("per_process_memory_fraction:0.015625"));
  std::vector<memory::Block*> b;
  for (int i = 0; i < 8; ++i) b.push_back(a.malloc(512 * 1024, nullptr));
  a.free(reinterpret_cast<void*>(b[0]->ptr));
  a.free(reinterpret_cast<void*>(b[2]->ptr));  // 1 MiB free, in two 512 KiB pieces
  const std::string what = oom_message(a, 1 * MiB);
  ASSERT_FALSE(what.empty()) << "1 MiB fit no piece and the fraction had no room for a segment";
  EXPECT_NE(what.find("would fit if memory were not fragmented"), std::string::npos) << what;
  EXPECT_NE(what.find("try CUDAKIT_ALLOC_CONF=expandable_segments:True"), std::string::npos)
      << what;
  EXPECT_EQ(what.find("expandable_segments_max_chunk_mb"), std::string::npos) << what;
  for (int i : {1, 3, 4, 5, 6, 7}) a.free(reinterpret_cast<void*>(b[i]->ptr));
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
}

TEST(MemoryOom, MessageBlamesTheLiveSetWhenNothingCouldFit) {
  if (!emulated()) GTEST_SKIP();
  empty_cache();
  for (const char* conf : {"expandable_segments:False", "expandable_segments:True"}) {
    SCOPED_TRACE(conf);
    memory::DeviceAllocator a(0, detail::backend(), memory::AllocatorConfig::parse(conf));
    memory::Block* live = a.malloc(200 * MiB, nullptr);
    const std::string what = oom_message(a, 100 * MiB);
    ASSERT_FALSE(what.empty());
    EXPECT_NE(what.find("The live set causes this, not fragmentation"), std::string::npos) << what;
    EXPECT_EQ(what.find("would fit if memory were not fragmented"), std::string::npos) << what;
    a.free(reinterpret_cast<void*>(live->ptr));
    a.empty_cache();
  }
}

TEST(MemoryOom, DiagnosisNamesTheCause) {
  memory::OomFacts f;
  f.requested = 512 * MiB;
  f.allocated = 6 * 1024 * MiB;
  f.reserved = f.allocated + 3277 * MiB;  // 3.2 GiB unallocated
  f.device_free = 100 * MiB;
  f.largest_free = 256 * MiB;
  f.largest_free_any_stream = 256 * MiB;
  std::string s = memory::oom_diagnosis(f);
  EXPECT_NE(s.find("Of the 3.20 GiB reserved but unallocated, the largest free block is "
                   "256.00 MiB"), std::string::npos) << s;
  EXPECT_NE(s.find("would fit if memory were not fragmented"), std::string::npos) << s;
  EXPECT_NE(s.find("try CUDAKIT_ALLOC_CONF=expandable_segments:True"), std::string::npos) << s;
  f.expandable = true;
  s = memory::oom_diagnosis(f);
  EXPECT_EQ(s.find("try CUDAKIT_ALLOC_CONF"), std::string::npos) << "already expandable: " << s;
  EXPECT_NE(s.find("expandable_segments_max_chunk_mb"), std::string::npos) << s;
  f.largest_free_any_stream = 1024 * MiB;  // a fitting block, cached for another stream
  s = memory::oom_diagnosis(f);
  EXPECT_NE(s.find("(1.00 GiB on another stream)"), std::string::npos) << s;
  EXPECT_NE(s.find("cached for another stream"), std::string::npos) << s;
  f.reserved = f.allocated + 10 * MiB;
  f.largest_free = f.largest_free_any_stream = 10 * MiB;
  s = memory::oom_diagnosis(f);
  EXPECT_NE(s.find("The live set causes this"), std::string::npos) << s;
  f.device_free = 4096 * MiB;
  f.limit_room = 50 * MiB;  // the fraction, not the device, is what is left
  s = memory::oom_diagnosis(f);
  EXPECT_NE(s.find("under set_per_process_memory_fraction"), std::string::npos) << s;
}
