// Allocator settings have one source of truth (issue 8.4): set_allocator_settings applies
// live keys to existing allocators, refuses to change init-only keys once an allocator
// exists, warns about inert keys; snapshots and get_allocator_backend report what the
// allocators run with; the pinned_* keys drive the pinned host cache.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cudakit/allocation.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/stream.hpp"
#include "memory/config.hpp"
#include "memory/device_allocator.hpp"
#include "memory/host_allocator.hpp"

using namespace cudakit;
using nlohmann::json;

namespace {

struct Warnings {
  Warnings() {
    memory::set_warning_handler([this](const std::string& m) {
      std::lock_guard lock(mu);
      seen.push_back(m);
    });
  }
  ~Warnings() { memory::set_warning_handler(nullptr); }
  std::vector<std::string> take() {
    std::lock_guard lock(mu);
    return std::exchange(seen, {});
  }
  std::mutex mu;
  std::vector<std::string> seen;
};

json snapshot_settings() { return json::parse(memory_snapshot_json())["allocator_settings"]; }

// Makes sure device 0's allocator exists (init-only keys are fixed from then on).
void touch_allocator() { Allocation a = allocate_device(1024, 0); }

}  // namespace

TEST(MemoryConfig, LiveKeysReachExistingAllocatorsAndSnapshots) {
  touch_allocator();
  set_allocator_settings("garbage_collection_threshold:0.7,roundup_power2_divisions:4,"
                         "max_non_split_rounding_mb:32,quick_cache:False,"
                         "expandable_segments_slack_div:16,expandable_segments_max_chunk_mb:64");
  const memory::AllocatorConfig c = memory::device_allocator(0).settings();
  EXPECT_DOUBLE_EQ(c.garbage_collection_threshold, 0.7);
  EXPECT_EQ(c.divisions_for(100 * memory::kMiB), 4u);
  EXPECT_EQ(c.max_non_split_rounding, 32 * memory::kMiB);
  EXPECT_FALSE(c.quick_cache);
  EXPECT_EQ(c.expandable_slack_div, 16u);
  EXPECT_EQ(c.expandable_max_chunk_mb, 64u);
  const json s = snapshot_settings();
  EXPECT_DOUBLE_EQ(s["garbage_collection_threshold"].get<double>(), 0.7);
  EXPECT_EQ(s["quick_cache"], false);
  EXPECT_EQ(s["roundup_power2_divisions"]["1"], 4);
  EXPECT_NE(s["PYTORCH_CUDA_ALLOC_CONF"].get<std::string>().find("quick_cache:False"),
            std::string::npos);
  // Allocation works with the new settings (rounding to quarters of a power of two).
  void* p = caching_allocator_alloc(5 * memory::kMiB + 1, 0);
  EXPECT_EQ(allocation_info(p)->size, 6 * memory::kMiB);
  caching_allocator_delete(p);
  // Keys not given keep their values, except the three torch's parser puts back to their
  // defaults on every call (test_allocator_settings relies on it).
  set_allocator_settings("quick_cache:True");
  const memory::AllocatorConfig d = memory::device_allocator(0).settings();
  EXPECT_TRUE(d.quick_cache);
  EXPECT_EQ(d.max_non_split_rounding, 32 * memory::kMiB);
  EXPECT_DOUBLE_EQ(d.garbage_collection_threshold, 0.0);
  EXPECT_EQ(d.divisions_for(100 * memory::kMiB), 0u);
  EXPECT_EQ(d.max_split_size, SIZE_MAX);
  set_allocator_settings("garbage_collection_threshold:0.99,roundup_power2_divisions:0,"
                         "max_non_split_rounding_mb:20,expandable_segments_slack_div:32,"
                         "expandable_segments_max_chunk_mb:32");
}

TEST(MemoryConfig, FractionKeyAppliesToEveryDevice) {
  touch_allocator();
  set_allocator_settings("per_process_memory_fraction:0.5");
  EXPECT_DOUBLE_EQ(get_per_process_memory_fraction(0), 0.5);
  EXPECT_DOUBLE_EQ(snapshot_settings()["per_process_memory_fraction"].get<double>(), 0.5);
  set_allocator_settings("per_process_memory_fraction:1");
  EXPECT_DOUBLE_EQ(get_per_process_memory_fraction(0), 1.0);
}

TEST(MemoryConfig, InitOnlyKeysRaiseOnceAnAllocatorExists) {
  touch_allocator();
  const memory::AllocatorConfig before = memory::settings_in_force();
  // The expandable_segments value in force (the default is True; the environment may say
  // otherwise); that key is live, so restating it changes nothing.
  const std::string keep =
      before.expandable_segments
          ? std::string("expandable_segments:True,expandable_segments_small:") +
                (before.expandable_small ? "True" : "False")
          : "expandable_segments:False";
  for (const char* change : {"backend:cudaMallocAsync", "expandable_segments_chunk_pages:8",
                             "device_mutex_spin:False",
                             "garbage_collection_threshold:0.5,backend:cudaMallocAsync"}) {
    try {
      set_allocator_settings(change);
      ADD_FAILURE() << "accepted " << change;
    } catch (const ValueError& e) {
      const std::string what = e.what();
      const std::string key = std::string(change).substr(std::string(change).rfind(',') + 1);
      EXPECT_NE(what.find(key.substr(0, key.find(':'))), std::string::npos) << what;
      EXPECT_NE(what.find("CUDAKIT_ALLOC_CONF"), std::string::npos) << what;
    }
  }
  // Nothing of a refused call was applied (not even its live keys).
  const memory::AllocatorConfig after = memory::settings_in_force();
  EXPECT_EQ(after.backend, before.backend);
  EXPECT_DOUBLE_EQ(after.garbage_collection_threshold, before.garbage_collection_threshold);
  EXPECT_DOUBLE_EQ(memory::config().garbage_collection_threshold,
                   before.garbage_collection_threshold);
  // The values in force are accepted (nothing changes).
  EXPECT_NO_THROW(set_allocator_settings(keep + ",backend:native"));
  EXPECT_NO_THROW(set_allocator_settings("device_mutex_spin:True"));
  EXPECT_EQ(get_allocator_backend(), "native");
  EXPECT_EQ(snapshot_settings()["backend"], "native");
  EXPECT_EQ(snapshot_settings()["expandable_segments"], before.expandable_segments);
  EXPECT_EQ(snapshot_settings()["expandable_segments_small"], before.expandable_small);
  touch_allocator();
}

TEST(MemoryConfig, ExpandableSegmentsTrueCoversTheSmallPoolAsTorchsKeyDoes) {
  using memory::AllocatorConfig;
  EXPECT_TRUE(AllocatorConfig::parse("").expandable_segments);
  EXPECT_FALSE(AllocatorConfig::parse("").expandable_small);  // cudakit's default policy
  const AllocatorConfig on = AllocatorConfig::parse("expandable_segments:True");
  EXPECT_TRUE(on.expandable_segments && on.expandable_small);
  const AllocatorConfig off = AllocatorConfig::parse_over(on, "expandable_segments:False", "T");
  EXPECT_FALSE(off.expandable_segments || off.expandable_small);
  const AllocatorConfig back =
      AllocatorConfig::parse_over(on, "expandable_segments_small:False", "T");
  EXPECT_TRUE(back.expandable_segments);
  EXPECT_FALSE(back.expandable_small);
  // The driver's pool has no expandable segments of either kind.
  EXPECT_FALSE(AllocatorConfig::parse("backend:cudaMallocAsync").expandable_small);
  try {
    (void)AllocatorConfig::parse("expandable_segments:False,expandable_segments_small:True");
    ADD_FAILURE() << "small expandable segments without expandable segments were accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("write expandable_segments:True"), std::string::npos)
        << e.what();
  }
}

TEST(MemoryConfig, SegmentKindAndSplitSizeApplyToLaterSegments) {
  // torch applies expandable_segments and max_split_size_mb live (test_max_split_expandable:
  // set between allocations, each segment keeps the kind it was made with).
  touch_allocator();
  auto segment_of = [](std::uintptr_t p) {
    const json snap = json::parse(memory_snapshot_json());
    for (const json& seg : snap["segments"])
      if (p >= seg["address"].get<std::uintptr_t>() &&
          p < seg["address"].get<std::uintptr_t>() + seg["total_size"].get<std::size_t>())
        return seg;
    return json();
  };
  const MemoryStats s0 = memory_stats_of();
  set_allocator_settings("expandable_segments:False,max_split_size_mb:40");
  void* a = caching_allocator_alloc(40 << 20);
  // max_split_size_mb again each time: a call that omits it puts it back to unlimited (torch)
  set_allocator_settings("expandable_segments:True,max_split_size_mb:40");
  void* b = caching_allocator_alloc(40 << 20);
  set_allocator_settings("expandable_segments:False,max_split_size_mb:40");
  void* c = caching_allocator_alloc(40 << 20);
  EXPECT_EQ(segment_of(reinterpret_cast<std::uintptr_t>(a))["is_expandable"], false);
  EXPECT_EQ(segment_of(reinterpret_cast<std::uintptr_t>(b))["is_expandable"], true);
  EXPECT_EQ(segment_of(reinterpret_cast<std::uintptr_t>(c))["is_expandable"], false);
  EXPECT_EQ(memory_stats_of().oversize_allocations.current - s0.oversize_allocations.current, 3);
  // A larger max_split_size: the live blocks are no longer oversize, and their frees keep
  // the counters consistent.
  set_allocator_settings("max_split_size_mb:100");
  EXPECT_EQ(memory_stats_of().oversize_allocations.current, 0);
  for (void* p : {a, b, c}) caching_allocator_delete(p);
  EXPECT_EQ(memory_stats_of().oversize_allocations.current, 0);
  EXPECT_EQ(memory_stats_of().oversize_segments.current, 0);
  empty_cache();
  // Back to unlimited, which no setting text can express (as in torch).
  memory::AllocatorConfig unlimited = memory::config();
  unlimited.max_split_size = SIZE_MAX;
  memory::store_config(unlimited);
  memory::device_allocator(0).apply_settings(unlimited);
}

TEST(MemoryConfig, InertKeysWarn) {
  Warnings w;
  set_allocator_settings("release_lock_on_cudamalloc:True");
  auto seen = w.take();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NE(seen[0].find("release_lock_on_cudamalloc"), std::string::npos);
  EXPECT_NE(seen[0].find("no effect"), std::string::npos);
  // a key that applies (since graph-capture reuse exists) says nothing
  set_allocator_settings("graph_capture_record_stream_reuse:False,quick_cache:True");
  EXPECT_TRUE(w.take().empty());
  set_allocator_settings("quick_cache:True");
  EXPECT_TRUE(w.take().empty());
}

TEST(MemoryConfig, UnknownKeysAndBadValuesAreRefusedWithoutChangingAnything) {
  const double gc = memory::settings_in_force().garbage_collection_threshold;
  for (const char* bad : {"garbage_collection_threshold:0.3,quick_cach:True",
                          "quick_cache:maybe", "expandable_segments_chunk_pages:0",
                          "expandable_segments_slack_div:1.5", "pinned_num_register_threads:3",
                          "expandable_segments_max_chunk_mb:48",
                          "expandable_segments_max_chunk_mb:2048"}) {
    EXPECT_THROW(set_allocator_settings(bad), ValueError) << bad;
  }
  EXPECT_DOUBLE_EQ(memory::settings_in_force().garbage_collection_threshold, gc);
}

TEST(MemoryConfig, PinnedHostRegisterModeRegistersBlocks) {
  memory::HostAllocator& h = memory::host_allocator();
  host_empty_cache();
  set_allocator_settings("pinned_use_cuda_host_register:True,pinned_num_register_threads:4");
  EXPECT_TRUE(memory::settings_in_force().pinned_use_host_register);
  const std::size_t before = h.registered_block_count();
  {
    Allocation big = allocate_host(8 * memory::kMiB, true);   // pre-faulted by 4 threads
    Allocation small = allocate_host(1000, true);
    EXPECT_EQ(h.registered_block_count(), before + 2);
    static_cast<char*>(big.get())[8 * memory::kMiB - 1] = 1;  // ordinary, writable memory
  }
  set_allocator_settings("pinned_use_cuda_host_register:False,pinned_num_register_threads:1");
  {
    Allocation other = allocate_host(3 * memory::kMiB, true);  // a new size class: driver pinned
    EXPECT_EQ(h.registered_block_count(), before + 2);
  }
  host_empty_cache();  // registered blocks are unregistered and freed
  EXPECT_EQ(h.registered_block_count(), 0u);
  EXPECT_EQ(host_memory_stats()["segment.current"], 0);
}

TEST(MemoryConfig, PinnedBackgroundThreadReturnsBlocksWhoseEventsCompleted) {
  memory::HostAllocator& h = memory::host_allocator();
  set_allocator_settings("pinned_use_background_threads:True");
  Stream s(0);
  {
    Allocation a = allocate_host(4096, true);
    record_stream(a.get(), s);
    s.launch_host_func([] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
  }  // freed: waits for an event behind the sleeping task
  EXPECT_GE(h.pending_event_count(), 1u);
  // Nobody allocates or empties the cache: the background thread must notice completion.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (h.pending_event_count() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(h.pending_event_count(), 0u);
  EXPECT_EQ(host_memory_stats()["active_requests.current"], 0);
  set_allocator_settings("pinned_use_background_threads:False");
  s.sync();
}
