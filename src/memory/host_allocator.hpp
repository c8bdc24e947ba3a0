// Pinned (page-locked) host memory cache. Sizes round up to powers of two (>= 512 B) and
// freed blocks are kept per size class; a block used by streams (record_event) is reused
// only after events recorded on those streams complete (torch's CachingHostAllocator).
//
// Settings (CUDAKIT_ALLOC_CONF / set_allocator_settings, all live):
//  * pinned_use_cuda_host_register: new blocks are ordinary host memory, pre-faulted and then
//    page-locked with the driver's host_register (torch's cudaHostRegister mode) instead of
//    the driver's pinned allocation; pinned_num_register_threads threads pre-fault the pages
//    of a large block in parallel.
//  * pinned_use_background_threads: a background thread moves blocks whose stream events
//    completed back to the free lists, instead of the next allocation or empty_cache.
//
// Sizes: a request larger than the host's physical memory (or than the largest power of two)
// is an OutOfMemoryError naming the size, before any arithmetic or cache flush.
//
// Thread-safety: all methods take one lock, which is never held while the driver allocates,
// frees (cuMemFreeHost synchronises the device) or waits (locks.hpp has the rule). It is a
// SpinLock (locks.hpp), as the device allocator's fast lock: a cached pair holds it for a few
// dozen ns, and with std::mutex 8 threads paid a futex sleep/wake per contended pair
// (8-thread C++ pairs were 0.83-1.02x torch on the H200 host, against 0.32-0.38x for device
// pairs under the spin lock). Events for
// recorded uses come from a per-device pool: a free after record_event costs an event record,
// not an event create/destroy pair.
#pragma once

#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/types.hpp"
#include "cudakit/device.hpp"
#include "cudakit/memory.hpp"
#include "memory/config.hpp"
#include "memory/locks.hpp"

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
  explicit HostAllocator(const AllocatorConfig& cfg = AllocatorConfig{});

  void* allocate(std::size_t bytes);
  bool free(void* ptr);  // false if not ours
  bool record_event(void* ptr, detail::StreamHandle stream, int device);
  bool owns(const void* ptr);
  void empty_cache();
  HostMemoryStats stats();
  void reset_peak();
  void reset_accumulated();
  // The pinned_* keys of `cfg` (config.hpp).
  void apply_settings(const AllocatorConfig& cfg);
  // Diagnostics (tests): events recorded for freed blocks still awaiting completion, and
  // completed events kept for reuse; blocks made with host_register.
  std::size_t pending_event_count();
  std::size_t pooled_event_count();
  std::size_t registered_block_count();

 private:
  struct HostBlock {
    void* ptr = nullptr;
    std::size_t size = 0;
    bool allocated = false;
    bool registered = false;  // host_register'ed ordinary memory (else the driver's pinned)
    std::vector<std::pair<detail::StreamHandle, int>> streams;  // recorded uses (distinct)
    std::vector<std::pair<detail::EventHandle, int>> events;     // pending after free
  };
  struct Settings {
    bool use_host_register = false;
    unsigned register_threads = 1;
    bool background = false;
  };
  void process_events();
  detail::EventHandle take_event(int device);  // from the pool, or a new one
  void* new_block(std::size_t size, const Settings& s, bool& registered);  // no lock held
  void release_block(void* p, bool registered);                           // no lock held
  void start_background_thread();  // mutex_ held
  void background_loop();

  SpinLock mutex_;
  std::condition_variable_any work_cv_;  // background thread: something is pending
  Settings settings_;
  bool background_started_ = false;
  std::vector<detail::EventHandle> event_pool_[kMaxDevices];  // completed, reusable
  std::unordered_map<void*, HostBlock> blocks_;
  // Free blocks per size class (index log2(size)): an array, not a map, and the blocks
  // themselves, not their addresses, so the cached allocation is two vector operations and
  // no tree walk or hash lookup (measured in bench_pinned, see docs/performance.md).
  // blocks_ is node-based: HostBlock addresses are stable while the block exists.
  std::array<std::vector<HostBlock*>, 64> free_;
  std::vector<void*> pending_;                      // freed, waiting for events
  HostMemoryStats stats_;
};

HostAllocator& host_allocator();

}  // namespace cudakit::memory
