// Statistics accounting with torch's DeviceStats semantics, in one place: every counter
// update the allocators make goes through these helpers (no pasted current/peak updates).
//
//  * allocation / allocated_bytes / requested_bytes: blocks handed out and not yet given
//    back (free_requested).
//  * active / active_bytes: handed out, or given back but still in use by a stream
//    (record_stream events pending) until free_completed.
//  * segment / reserved_bytes: memory obtained from the device (an expandable segment counts
//    as one segment; its bytes are the mapped pages).
//  * inactive_split(_bytes): free blocks that are pieces of a split segment.
//  * oversize_*: allocations / segments of at least max_split_size.
// Each statistic has an all / small pool / large pool entry; peak follows current, and
// allocated/freed accumulate the positive/negative changes. alloc/free_requested also count
// the allocation under its client (MemoryClient: the framework it was made for).
//
// Thread-safety: none; the owner serialises updates (allocated_now() is the exception: an
// atomic copy of allocated_bytes.all.current for lock-free memory_allocated()).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "cudakit/memory.hpp"

namespace cudakit::memory {

// Growth and shrinkage (n >= 0) apart: an allocation or a free knows its direction, and
// stat_update's two sign tests per counter were a tenth of the allocator's work in the
// mixed live-set benchmark (13 counters per alloc, 13 per free); only growth can raise the peak.
inline void stat_grow(MemoryStat& s, std::int64_t n) noexcept {
  s.current += n;
  s.allocated += n;
  s.peak = s.current > s.peak ? s.current : s.peak;
}
inline void stat_shrink(MemoryStat& s, std::int64_t n) noexcept {
  s.current -= n;
  s.freed += n;
}
inline void stat_update(MemoryStat& s, std::int64_t delta) noexcept {
  if (delta > 0) stat_grow(s, delta);
  else stat_shrink(s, -delta);
}

class DeviceStats {
 public:
  void alloc(bool small, std::size_t bytes, std::size_t requested, bool oversize,
             std::uint8_t client = 0) noexcept {
    ClientMemoryStats& c = client_stats(client);
    stat_grow(c.allocation, 1);
    stat_grow(c.allocated_bytes, to_i(bytes));
    stat_grow(c.requested_bytes, to_i(requested));
    grow(s_.allocation, small, 1);
    grow(s_.active, small, 1);
    grow(s_.allocated_bytes, small, to_i(bytes));
    grow(s_.active_bytes, small, to_i(bytes));
    grow(s_.requested_bytes, small, to_i(requested));
    if (oversize) stat_grow(s_.oversize_allocations, 1);
    publish();
  }
  // The caller gave the block back (no longer allocated).
  void free_requested(bool small, std::size_t bytes, std::size_t requested, bool oversize,
                      std::uint8_t client = 0) noexcept {
    ClientMemoryStats& c = client_stats(client);
    stat_shrink(c.allocation, 1);
    stat_shrink(c.allocated_bytes, to_i(bytes));
    stat_shrink(c.requested_bytes, to_i(requested));
    shrink(s_.allocation, small, 1);
    shrink(s_.allocated_bytes, small, to_i(bytes));
    shrink(s_.requested_bytes, small, to_i(requested));
    if (oversize) stat_shrink(s_.oversize_allocations, 1);
    publish();
  }
  // No stream uses the block any more (torch's "active" statistics).
  void free_completed(bool small, std::size_t bytes) noexcept {
    shrink(s_.active, small, 1);
    shrink(s_.active_bytes, small, to_i(bytes));
  }
  // A device allocation of `bytes` (segment + reserved memory).
  void segment_created(bool small, std::size_t bytes, bool oversize) noexcept {
    ++s_.num_device_alloc;
    add(s_.segment, small, 1);
    add(s_.reserved_bytes, small, to_i(bytes));
    if (oversize) stat_update(s_.oversize_segments, 1);
  }
  void segment_released(bool small, std::size_t bytes, bool oversize) noexcept {
    ++s_.num_device_free;
    add(s_.segment, small, -1);
    add(s_.reserved_bytes, small, -to_i(bytes));
    if (oversize) stat_update(s_.oversize_segments, -1);
  }
  // Expandable segments: the reservation counts as a segment, mapped pages as reserved
  // memory, each physical chunk as one device allocation / free.
  void segment_reserved(bool small) noexcept { add(s_.segment, small, 1); }
  void segment_unreserved(bool small) noexcept { add(s_.segment, small, -1); }
  void pages_mapped(bool small, std::size_t bytes, std::size_t chunks) noexcept {
    s_.num_device_alloc += static_cast<std::int64_t>(chunks);
    add(s_.reserved_bytes, small, to_i(bytes));
  }
  void pages_unmapped(bool small, std::size_t bytes, std::size_t chunks) noexcept {
    s_.num_device_free += static_cast<std::int64_t>(chunks);
    add(s_.reserved_bytes, small, -to_i(bytes));
  }
  // Free pieces of split segments entered (count, bytes > 0) or left (< 0) the free sets.
  void inactive_split(bool small, std::int64_t count, std::int64_t bytes) noexcept {
    add(s_.inactive_split, small, count);
    add(s_.inactive_split_bytes, small, bytes);
  }
  void alloc_retry() noexcept { ++s_.num_alloc_retries; }
  void oom() noexcept { ++s_.num_ooms; }

  std::size_t reserved_bytes() const noexcept {
    return static_cast<std::size_t>(s_.reserved_bytes[0].current);
  }
  std::size_t reserved_bytes(bool small) const noexcept {  // of one pool kind
    return static_cast<std::size_t>(s_.reserved_bytes[small ? 1 : 2].current);
  }
  std::size_t allocated_bytes() const noexcept {
    return static_cast<std::size_t>(s_.allocated_bytes[0].current);
  }
  std::int64_t allocated_now() const noexcept {
    return allocated_now_.load(std::memory_order_relaxed);
  }
  void set_max_split_size(std::size_t max_split) noexcept {
    s_.max_split_size = max_split == SIZE_MAX ? -1 : to_i(max_split);
  }
  // The oversize counters as a new max_split_size sees the blocks and segments live now
  // (set_allocator_settings changed it): the next frees then subtract what was added.
  void recount_oversize(std::int64_t allocations, std::int64_t segments) noexcept {
    for (auto [stat, now] : {std::pair{&s_.oversize_allocations, allocations},
                             std::pair{&s_.oversize_segments, segments}}) {
      stat->current = now;
      stat->peak = now > stat->peak ? now : stat->peak;
    }
  }
  const MemoryStats& get() const noexcept { return s_; }

  void reset_peak() noexcept {
    for_each([](MemoryStat& m) { m.peak = m.current; });
  }
  void reset_accumulated() noexcept {
    for_each([](MemoryStat& m) { m.allocated = m.freed = 0; });
    s_.num_alloc_retries = s_.num_ooms = s_.num_sync_all_streams = 0;
    s_.num_device_alloc = s_.num_device_free = 0;
  }

 private:
  static std::int64_t to_i(std::size_t n) noexcept { return static_cast<std::int64_t>(n); }
  ClientMemoryStats& client_stats(std::uint8_t client) noexcept {
    return s_.by_client[client < kNumMemoryClients ? client : 0];
  }
  static void add(MemoryStat (&s)[kNumStatPools], bool small, std::int64_t delta) noexcept {
    stat_update(s[0], delta);
    stat_update(s[small ? 1 : 2], delta);
  }
  static void grow(MemoryStat (&s)[kNumStatPools], bool small, std::int64_t n) noexcept {
    stat_grow(s[0], n);
    stat_grow(s[small ? 1 : 2], n);
  }
  static void shrink(MemoryStat (&s)[kNumStatPools], bool small, std::int64_t n) noexcept {
    stat_shrink(s[0], n);
    stat_shrink(s[small ? 1 : 2], n);
  }
  void publish() noexcept {
    allocated_now_.store(s_.allocated_bytes[0].current, std::memory_order_relaxed);
  }
  template <class F>
  void for_each(F f) noexcept {
    for (MemoryStat* arr : {s_.allocation, s_.segment, s_.active, s_.inactive_split,
                            s_.allocated_bytes, s_.reserved_bytes, s_.active_bytes,
                            s_.inactive_split_bytes, s_.requested_bytes})
      for (int i = 0; i < kNumStatPools; ++i) f(arr[i]);
    f(s_.oversize_allocations);
    f(s_.oversize_segments);
    for (ClientMemoryStats& c : s_.by_client) {
      f(c.allocation);
      f(c.allocated_bytes);
      f(c.requested_bytes);
    }
  }

  MemoryStats s_;
  std::atomic<std::int64_t> allocated_now_{0};
};

}  // namespace cudakit::memory
