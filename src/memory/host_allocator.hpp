// Pinned (page-locked) host memory cache. Sizes round up to powers of two (>= 512 B) and
// freed blocks are kept per size class; a block used by streams (record_event) is reused
// only after events recorded on those streams complete (torch's CachingHostAllocator).
//
// Thread-safety: all methods take one mutex (pinned allocation is not a hot path at the
// rate device allocation is; the expensive part, the driver call, happens outside it).
// Events for recorded uses come from a per-device pool: a free after record_event costs an
// event record, not an event create/destroy pair.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/device.hpp"
#include "cudakit/memory.hpp"

namespace cudakit::memory {

struct DurationStat {
  std::int64_t total = 0, max = 0, min = 0, count = 0;  // microseconds
  void add(std::int64_t us) {
    total += us;
    max = count ? std::max(max, us) : us;
    min = count ? std::min(min, us) : us;
    ++count;
  }
};

struct HostMemoryStats {
  MemoryStat allocations, allocated_bytes, segment, reserved_bytes, active_requests, active_bytes;
  std::int64_t num_host_alloc = 0, num_host_free = 0;
  DurationStat host_alloc_time, host_free_time;
};

class HostAllocator {
 public:
  void* allocate(std::size_t bytes);
  bool free(void* ptr);  // false if not ours
  bool record_event(void* ptr, detail::StreamHandle stream, int device);
  bool owns(const void* ptr);
  void empty_cache();
  HostMemoryStats stats();
  void reset_peak();
  void reset_accumulated();
  // Diagnostics (tests): events recorded for freed blocks still awaiting completion, and
  // completed events kept for reuse.
  std::size_t pending_event_count();
  std::size_t pooled_event_count();

 private:
  struct HostBlock {
    std::size_t size = 0;
    bool allocated = false;
    std::vector<std::pair<detail::StreamHandle, int>> streams;  // recorded uses (distinct)
    std::vector<std::pair<detail::EventHandle, int>> events;     // pending after free
  };
  void process_events();
  detail::EventHandle take_event(int device);  // from the pool, or a new one
  std::mutex mutex_;
  std::vector<detail::EventHandle> event_pool_[kMaxDevices];  // completed, reusable
  std::unordered_map<void*, HostBlock> blocks_;
  std::map<std::size_t, std::vector<void*>> free_;  // size class -> free blocks
  std::vector<void*> pending_;                      // freed, waiting for events
  HostMemoryStats stats_;
};

HostAllocator& host_allocator();

}  // namespace cudakit::memory
