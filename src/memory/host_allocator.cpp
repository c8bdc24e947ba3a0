#include "memory/host_allocator.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <limits>

#include "cudakit/error.hpp"

namespace cudakit::memory {
namespace {

void bump(MemoryStat& s, std::int64_t d) {
  s.current += d;
  if (s.current > s.peak) s.peak = s.current;
  if (d > 0) s.allocated += d;
  else s.freed -= d;
}

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void* HostAllocator::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  // Power-of-two classes: a request above the largest one would round to 0 (and the old
  // doubling loop never ended), so refuse it up front.
  constexpr std::size_t kLargestClass = std::size_t{1} << (std::numeric_limits<std::size_t>::digits - 1);
  if (bytes > kLargestClass)
    throw OutOfMemoryError("pinned host allocation of " + std::to_string(bytes) +
                           " bytes is larger than any host memory: check the size computation",
                           -1, bytes);
  const std::size_t size = std::max<std::size_t>(512, std::bit_ceil(bytes));
  {
    std::lock_guard lock(mutex_);
    if (!pending_.empty()) process_events();
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      HostBlock& b = blocks_[p];
      b.allocated = true;
      bump(stats_.allocations, 1);
      bump(stats_.allocated_bytes, static_cast<std::int64_t>(size));
      bump(stats_.active_requests, 1);
      bump(stats_.active_bytes, static_cast<std::int64_t>(size));
      return p;
    }
  }
  detail::Backend& be = detail::backend();
  const auto t0 = now_us();
  void* p = be.host_alloc_pinned(size);
  if (!p) {
    empty_cache();
    p = be.host_alloc_pinned(size);
  }
  if (!p)
    throw OutOfMemoryError("pinned host allocation of " + std::to_string(bytes) +
                           " bytes failed (page-locked memory exhausted): free pinned buffers "
                           "or call empty_cache()", -1, bytes);
  std::lock_guard lock(mutex_);
  stats_.host_alloc_time.add(now_us() - t0);
  ++stats_.num_host_alloc;
  HostBlock& b = blocks_[p];
  b.size = size;
  b.allocated = true;
  bump(stats_.segment, 1);
  bump(stats_.reserved_bytes, static_cast<std::int64_t>(size));
  bump(stats_.allocations, 1);
  bump(stats_.allocated_bytes, static_cast<std::int64_t>(size));
  bump(stats_.active_requests, 1);
  bump(stats_.active_bytes, static_cast<std::int64_t>(size));
  return p;
}

bool HostAllocator::free(void* ptr) {
  std::lock_guard lock(mutex_);
  auto it = blocks_.find(ptr);
  if (it == blocks_.end() || !it->second.allocated) return false;
  HostBlock& b = it->second;
  b.allocated = false;
  bump(stats_.allocations, -1);
  bump(stats_.allocated_bytes, -static_cast<std::int64_t>(b.size));
  if (!b.streams.empty() && !detail::is_shutting_down()) {
    detail::Backend& be = detail::backend();
    for (auto [s, dev] : b.streams) {
      detail::EventHandle e = take_event(dev);
      be.event_record(e, s);
      b.events.emplace_back(e, dev);
    }
    b.streams.clear();
    pending_.push_back(ptr);
    return true;
  }
  bump(stats_.active_requests, -1);
  bump(stats_.active_bytes, -static_cast<std::int64_t>(b.size));
  free_[b.size].push_back(ptr);
  return true;
}

void HostAllocator::process_events() {
  detail::Backend& be = detail::backend();
  std::size_t keep = 0;
  for (void* p : pending_) {
    HostBlock& b = blocks_[p];
    std::size_t k = 0;
    for (auto& ev : b.events) {
      if (be.event_query(ev.first)) event_pool_[ev.second].push_back(ev.first);
      else b.events[k++] = ev;
    }
    b.events.resize(k);
    if (b.events.empty()) {
      bump(stats_.active_requests, -1);
      bump(stats_.active_bytes, -static_cast<std::int64_t>(b.size));
      free_[b.size].push_back(p);
    } else {
      pending_[keep++] = p;
    }
  }
  pending_.resize(keep);
}

detail::EventHandle HostAllocator::take_event(int device) {
  std::vector<detail::EventHandle>& pool = event_pool_[device];
  if (pool.empty()) return detail::backend().event_create(device, detail::kEventDisableTiming);
  detail::EventHandle e = pool.back();
  pool.pop_back();
  return e;
}

bool HostAllocator::record_event(void* ptr, detail::StreamHandle stream, int device) {
  if (device < 0 || device >= kMaxDevices)
    throw ValueError("record_event on pinned memory: invalid device " + std::to_string(device) +
                     " (expected 0.." + std::to_string(kMaxDevices - 1) + ")");
  std::lock_guard lock(mutex_);
  auto it = blocks_.find(ptr);
  if (it == blocks_.end() || !it->second.allocated) return false;
  // One event per distinct stream at free time, however often a stream was recorded
  // (a buffer copied 1000 times on one stream would otherwise record 1000 events).
  auto& streams = it->second.streams;
  const std::pair<detail::StreamHandle, int> use(stream, device);
  if (std::find(streams.begin(), streams.end(), use) == streams.end()) streams.push_back(use);
  return true;
}

bool HostAllocator::owns(const void* ptr) {
  std::lock_guard lock(mutex_);
  auto it = blocks_.find(const_cast<void*>(ptr));
  return it != blocks_.end() && it->second.allocated;
}

void HostAllocator::empty_cache() {
  std::vector<void*> release;
  {
    std::lock_guard lock(mutex_);
    if (!pending_.empty()) process_events();
    for (auto& [size, v] : free_) {
      for (void* p : v) {
        release.push_back(p);
        blocks_.erase(p);
        bump(stats_.segment, -1);
        bump(stats_.reserved_bytes, -static_cast<std::int64_t>(size));
      }
      v.clear();
    }
  }
  if (release.empty()) return;
  detail::Backend& be = detail::backend();
  const auto t0 = now_us();
  for (void* p : release) be.host_free_pinned(p);
  std::lock_guard lock(mutex_);
  stats_.num_host_free += static_cast<std::int64_t>(release.size());
  stats_.host_free_time.add(now_us() - t0);
}

HostMemoryStats HostAllocator::stats() {
  std::lock_guard lock(mutex_);
  return stats_;
}

void HostAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  for (MemoryStat* s : {&stats_.allocations, &stats_.allocated_bytes, &stats_.segment,
                        &stats_.reserved_bytes, &stats_.active_requests, &stats_.active_bytes})
    s->peak = s->current;
  stats_.host_alloc_time.max = stats_.host_alloc_time.min = 0;
  stats_.host_free_time.max = stats_.host_free_time.min = 0;
}

void HostAllocator::reset_accumulated() {
  std::lock_guard lock(mutex_);
  for (MemoryStat* s : {&stats_.allocations, &stats_.allocated_bytes, &stats_.segment,
                        &stats_.reserved_bytes, &stats_.active_requests, &stats_.active_bytes})
    s->allocated = s->freed = 0;
  stats_.num_host_alloc = stats_.num_host_free = 0;
  stats_.host_alloc_time = {};
  stats_.host_free_time = {};
}

std::size_t HostAllocator::pending_event_count() {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (void* p : pending_) n += blocks_[p].events.size();
  return n;
}

std::size_t HostAllocator::pooled_event_count() {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& pool : event_pool_) n += pool.size();
  return n;
}

HostAllocator& host_allocator() {
  static HostAllocator* a = new HostAllocator();  // leaked: no frees at exit
  return *a;
}

}  // namespace cudakit::memory
