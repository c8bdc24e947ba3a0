// Size arithmetic of every allocator (issue 14.2): an impossible size is an OutOfMemoryError
// naming the requested size (or a ValueError for a nonsensical argument), never a smaller
// block, and the statistics stay as they were (but num_ooms); sizes at every rounding
// boundary get a block at least as large as asked, on every allocator mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "memory/device_allocator.hpp"
#include "memory/host_allocator.hpp"
#include "memory/pluggable.hpp"

using namespace cudakit;
using memory::AllocatorConfig;
using memory::DeviceAllocator;
using memory::kMiB;

namespace {

constexpr std::size_t kMax = SIZE_MAX;

std::vector<std::size_t> impossible_sizes() {
  const std::size_t total = detail::backend().mem_get_info(0).total;
  return {kMax, kMax - 1, kMax - 511, kMax / 2 + 1, std::size_t(1) << 62,
          (std::size_t(1) << 62) + 1, std::size_t(1) << 63, total + 1,
          total + 2 * kMiB - 1};
}

// Sizes next to each rounding step: the 512-byte block unit, the small/large pool split
// (1 MiB), the 10 MiB large-segment threshold, 2 MiB large rounding, powers of two (for
// roundup_power2_divisions) and the max_split_size used below (64 MiB).
std::vector<std::size_t> boundary_sizes() {
  std::vector<std::size_t> v;
  auto around = [&](std::size_t n) {
    for (std::size_t d : {std::size_t(0), std::size_t(1)}) {
      if (n > d) v.push_back(n - d);
      v.push_back(n + d);
    }
  };
  for (std::size_t n : {std::size_t(512), std::size_t(1024), 4 * std::size_t(1024), kMiB,
                        2 * kMiB, 10 * kMiB, 12 * kMiB, 20 * kMiB, 32 * kMiB, 64 * kMiB,
                        3 * kMiB + 512})
    around(n);
  v.push_back(1);
  v.push_back(511);
  return v;
}

// Everything in the statistics but the out-of-memory counters.
std::map<std::string, std::int64_t> stats_without_ooms(const MemoryStats& s) {
  std::map<std::string, std::int64_t> m;
  const std::pair<const char*, const MemoryStat*> arrays[] = {
      {"allocation", s.allocation},           {"segment", s.segment},
      {"active", s.active},                   {"inactive_split", s.inactive_split},
      {"allocated_bytes", s.allocated_bytes}, {"reserved_bytes", s.reserved_bytes},
      {"active_bytes", s.active_bytes},       {"inactive_split_bytes", s.inactive_split_bytes},
      {"requested_bytes", s.requested_bytes}};
  for (auto [name, arr] : arrays) {
    for (int i = 0; i < kNumStatPools; ++i) {
      const std::string k = std::string(name) + "." + std::to_string(i);
      m[k + ".current"] = arr[i].current;
      m[k + ".peak"] = arr[i].peak;
      m[k + ".allocated"] = arr[i].allocated;
      m[k + ".freed"] = arr[i].freed;
    }
  }
  m["num_device_alloc"] = s.num_device_alloc;
  m["num_device_free"] = s.num_device_free;
  m["oversize_allocations.current"] = s.oversize_allocations.current;
  m["oversize_segments.current"] = s.oversize_segments.current;
  return m;
}

class AllocatorModes : public ::testing::TestWithParam<const char*> {};

}  // namespace

TEST_P(AllocatorModes, ImpossibleSizesAreOutOfMemoryWithTheSizeAndLeaveStatsAlone) {
  DeviceAllocator a(0, detail::backend(), AllocatorConfig::parse(GetParam()));
  memory::Block* keep = a.malloc(4096, nullptr);  // the quick cache holds a 4 KiB block below
  ASSERT_TRUE(a.free(reinterpret_cast<void*>(keep->ptr)));
  const auto before = stats_without_ooms(a.stats());
  const std::int64_t ooms = a.stats().num_ooms;
  std::int64_t expected_ooms = ooms;
  for (std::size_t n : impossible_sizes()) {
    try {
      memory::Block* b = a.malloc(n, nullptr);
      ADD_FAILURE() << "malloc(" << n << ") returned a block of " << b->size << " bytes";
    } catch (const OutOfMemoryError& e) {
      EXPECT_EQ(e.requested_bytes(), n);
      EXPECT_NE(std::string(e.what()).find(std::to_string(n)), std::string::npos) << e.what();
      ++expected_ooms;
    }
    EXPECT_EQ(stats_without_ooms(a.stats()), before) << "after malloc(" << n << ")";
  }
  EXPECT_EQ(a.stats().num_ooms, expected_ooms);
  memory::Block* b = a.malloc(4096, nullptr);  // still usable
  EXPECT_GE(b->size, 4096u);
  EXPECT_TRUE(a.free(reinterpret_cast<void*>(b->ptr)));
}

TEST_P(AllocatorModes, BoundarySizesGetAtLeastWhatTheyAskFor) {
  DeviceAllocator a(0, detail::backend(), AllocatorConfig::parse(GetParam()));
  const bool native = std::string(GetParam()).find("cudaMallocAsync") == std::string::npos;
  std::vector<memory::Block*> live;
  std::int64_t requested = 0, allocated = 0;
  for (std::size_t n : boundary_sizes()) {
    memory::Block* b = a.malloc(n, nullptr);
    ASSERT_GE(b->size, n) << "request " << n;
    if (native) {
      EXPECT_EQ(b->size % memory::kMinBlockSize, 0u) << "request " << n;
      EXPECT_LE(b->size, std::max<std::size_t>(2 * n, n + 2 * kMiB)) << "request " << n;
    }
    requested += static_cast<std::int64_t>(n);
    allocated += static_cast<std::int64_t>(b->size);
    const MemoryStats s = a.stats();
    EXPECT_EQ(s.requested_bytes[0].current, requested) << "request " << n;
    EXPECT_EQ(s.allocated_bytes[0].current, allocated) << "request " << n;
    EXPECT_GE(s.reserved_bytes[0].current, s.allocated_bytes[0].current);
    live.push_back(b);
  }
  // No two live blocks overlap.
  std::vector<std::pair<std::uintptr_t, std::size_t>> spans;
  for (memory::Block* b : live) spans.emplace_back(b->ptr, b->size);
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i)
    EXPECT_LE(spans[i - 1].first + spans[i - 1].second, spans[i].first);
  for (memory::Block* b : live) ASSERT_TRUE(a.free(reinterpret_cast<void*>(b->ptr)));
  const MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.requested_bytes[0].current, 0);
  EXPECT_EQ(s.allocation[0].current, 0);
  EXPECT_EQ(s.oversize_allocations.current, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, AllocatorModes,
    ::testing::Values("", "expandable_segments:True", "backend:cudaMallocAsync",
                      "roundup_power2_divisions:4", "max_split_size_mb:64",
                      "roundup_power2_divisions:[1:2,16:8,>:4],max_split_size_mb:32"));

TEST(MemorySizes, PublicEntryPointsRejectImpossibleSizes) {
  const std::size_t base = memory_allocated(0);
  auto before = memory_stats(0);
  for (std::size_t n : impossible_sizes()) {
    try {
      void* p = caching_allocator_alloc(n, 0);
      ADD_FAILURE() << "caching_allocator_alloc(" << n << ") returned " << p;
    } catch (const OutOfMemoryError& e) {
      EXPECT_EQ(e.requested_bytes(), n);
    }
    try {
      Allocation a = allocate_device(n, 0);
      ADD_FAILURE() << "allocate_device(" << n << ") returned " << a.size() << " bytes";
    } catch (const OutOfMemoryError& e) {
      EXPECT_EQ(e.requested_bytes(), n);
    }
  }
  auto after = memory_stats(0);
  for (auto& [k, v] : before)
    if (k != "num_ooms") EXPECT_EQ(after[k], v) << k;
  EXPECT_EQ(after["num_ooms"], before["num_ooms"] + 2 * static_cast<std::int64_t>(impossible_sizes().size()));
  EXPECT_EQ(memory_allocated(0), base);
  void* p = caching_allocator_alloc(1000, 0);
  caching_allocator_delete(p);
}

TEST(MemorySizes, PinnedHostCacheRejectsImpossibleSizesAndRoundsUp) {
  memory::HostAllocator h;
  const memory::HostMemoryStats before = h.stats();
  for (std::size_t n : {kMax, kMax / 2 + 1, std::size_t(1) << 62, std::size_t(1) << 63}) {
    try {
      void* p = h.allocate(n);
      ADD_FAILURE() << "allocate(" << n << ") returned " << p;
    } catch (const OutOfMemoryError& e) {
      EXPECT_EQ(e.requested_bytes(), n);
      EXPECT_NE(std::string(e.what()).find(std::to_string(n)), std::string::npos);
    }
  }
  const memory::HostMemoryStats after = h.stats();
  EXPECT_EQ(after.allocations.allocated, before.allocations.allocated);
  EXPECT_EQ(after.reserved_bytes.current, before.reserved_bytes.current);
  EXPECT_EQ(after.num_host_alloc, before.num_host_alloc);
  std::vector<void*> live;
  std::int64_t bytes = 0;
  for (std::size_t n : {std::size_t(1), std::size_t(511), std::size_t(512), std::size_t(513),
                        std::size_t(4095), std::size_t(4096), std::size_t(4097), kMiB - 1, kMiB,
                        kMiB + 1}) {
    live.push_back(h.allocate(n));
    const std::size_t cls = std::max<std::size_t>(512, std::bit_ceil(n));
    bytes += static_cast<std::int64_t>(cls);
    EXPECT_EQ(h.stats().allocated_bytes.current, bytes) << n;
  }
  for (void* p : live) EXPECT_TRUE(h.free(p));
  EXPECT_EQ(h.stats().allocated_bytes.current, 0);
  h.empty_cache();
}

namespace {
int g_plug_calls = 0;
void* plug_alloc(std::ptrdiff_t size, int, void*) {
  ++g_plug_calls;
  return size > 0 ? std::malloc(static_cast<std::size_t>(size)) : nullptr;
}
void plug_free(void* p, std::ptrdiff_t, int, void*) { std::free(p); }
}  // namespace

TEST(MemorySizes, PluggedAllocatorNeverPassesANegativeSize) {
  memory::PluggedAllocator a(&plug_alloc, &plug_free, "sizes");
  for (std::size_t n : {kMax, kMax / 2 + 1}) {
    EXPECT_THROW(a.allocate(n, 0, nullptr), OutOfMemoryError) << n;
  }
  EXPECT_EQ(g_plug_calls, 0);
  MemoryStats s{};
  a.add_stats(0, s);
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.num_ooms, 2);
  void* p = a.allocate(1000, 0, nullptr);
  EXPECT_EQ(g_plug_calls, 1);
  EXPECT_TRUE(a.free(p));
}

TEST(MemorySizes, IpcImportRejectsRangesThatOverflow) {
  IpcMemHandle h;
  h.device = 0;
  h.offset = kMax;
  h.size = 2;
  EXPECT_THROW(ipc_import(h), ValueError);
  h.offset = 0;
  h.size = 0;
  EXPECT_THROW(ipc_import(h), ValueError);
  h.size = 16;
  h.device = 1000;
  EXPECT_THROW(ipc_import(h), ValueError);
}

TEST(MemorySizes, ConfigSizesThatWouldOverflowAreValueErrors) {
  for (const char* bad : {"max_split_size_mb:1e30", "max_non_split_rounding_mb:1e30",
                          "max_split_size_mb:18446744073709551615",
                          "roundup_power2_divisions:[1e30:4]"}) {
    try {
      AllocatorConfig::parse(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(bad).substr(0, 12)), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(AllocatorConfig::parse("max_split_size_mb:4398046511104").max_split_size,
            std::size_t(1) << 62);
}
