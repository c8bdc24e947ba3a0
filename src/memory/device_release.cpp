// Device caching allocator: the paths that give memory back (empty_cache, the out-of-memory
// retry, garbage collection) and the out-of-memory report. Every wait and every device free
// here runs with the allocator's locks released (locks.hpp).
#include <algorithm>
#include <cstdio>
#include <exception>

#include "backend/device_ops.hpp"
#include "cudakit/error.hpp"
#include "memory/device_allocator.hpp"
#include "memory/pluggable.hpp"

namespace cudakit::memory {

void DeviceAllocator::empty_cache() {
  // The call's stack, for the segment_free entries of history with context "all" (torch's
  // show empty_cache's frames there); captured before any lock, as malloc and free do.
  PendingStack pending;
  PendingScope scope(pending, __builtin_frame_address(0), /*is_free=*/true, 0);
  Locked lock(*this);
  quick_flush();
  // While a capture or use_mem_pool routes allocations (torch's captures_underway), events
  // must not be waited for (an event recorded in a capture cannot be; waiting stalls the
  // capture) and the device must not be freed to (cuMemFree is not permitted during a
  // global-mode capture): only pools nobody owns any more give their memory back, as torch.
  std::vector<std::unique_ptr<ExpandableSegment>> empty;  // emptied before this call
  if (capture_underway()) {
    release_unowned_pools();
  } else {
    flush_capture_deferred(lock);
    wait_for_pending_events(lock);
    release_cached(lock);
    take_empty_segments(empty);
  }
  lock.unlock();  // the device frees run here (and take the segments they empty); their
                  // errors reach the caller
  empty.clear();
}

void DeviceAllocator::wait_for_pending_events(Locked& lock) {
  if (pending_.empty()) return;
  // The blocks stay out of every free set (event_count > 0) while nobody holds the lock, and
  // only this thread finishes them: taking them out of pending_ hides them from
  // process_events.
  std::vector<std::pair<detail::EventHandle, Block*>> taken;
  taken.swap(pending_);
  awaited_events_ += taken.size();
  lock.unlock();
  std::exception_ptr error;
  {
    WaitScope wait;
    for (auto& [e, b] : taken) {
      try {
        streams_.event_synchronize(e);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
  }
  lock.lock();
  awaited_events_ -= taken.size();
  for (auto [e, b] : taken) {
    spare_events_.push_back(e);
    if (--b->event_count == 0) free_block(b);
  }
  if (pending_.empty()) {  // keep the vector's capacity
    taken.clear();
    pending_.swap(taken);
  }
  if (error) std::rethrow_exception(error);
}

void DeviceAllocator::release_segment(Block* head) {
  // `head` spans a whole (non-expandable) segment and is free; not in any free set. The
  // bookkeeping changes now; the device free runs once the locks are released.
  BlockPool& pool = *head->pool;
  if (allocator_events_wanted()) note_event("segment_free", head->ptr, head->size, head->stream, nullptr);
  Deferred d;
  if (pool.owner && pool.owner->sleep) {
    // A tagged pool's segment: its chunks are unmapped and its range handed back later.
    SleepPool& sp = *pool.owner->sleep;
    auto it = sp.segments.find(head->ptr);
    d.sleep = &sp;
    d.sleep_segment = std::move(it->second);
    sp.segments.erase(it);
    sp.bytes -= head->size;
    if (!pool.is_small) sp.large_bytes -= head->size;
  } else {
    d.segment = reinterpret_cast<void*>(head->ptr);
    if (pool.owner) d.source = pool.owner->source;
  }
  deferred_.push_back(std::move(d));
  stats_.segment_released(pool.is_small, head->size, oversize(head->size));
  segment_heads_.erase(head);
  recycle(head);
}

void DeviceAllocator::run_deferred(std::vector<Deferred>& work) {
  // Locks not held. Frees first, then one relock to finish every unmapping.
  std::exception_ptr error;
  bool unmapped = false;
  WaitScope wait;
  for (Deferred& d : work) {
    try {
      if (d.segment) {
        if (d.source) d.source->free(d.segment);
        else memory_.mem_free(device_, d.segment);
      } else if (d.sleep) {
        unmapped = true;
        d.sleep_ok = unmap_sleep_segment(d.sleep_segment, &error);
      } else if (d.unmapping) {
        unmapped = true;
        ExpandableSegment::unmap(memory_, d.chunks, vm_calls_);
        // Exported chunks are never kept as spares (expandable_segment.hpp).
        for (const auto& c : d.chunks)
          if (!d.keep_handles || c.fd >= 0) ExpandableSegment::destroy(memory_, c.handle, vm_calls_);
      } else if (!d.destroy.empty()) {
        unmapped = true;
        for (detail::PhysMemHandle h : d.destroy) ExpandableSegment::destroy(memory_, h, vm_calls_);
      }
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  std::vector<std::unique_ptr<ExpandableSegment>> empty;  // released after the locks
  if (unmapped) {
    std::lock_guard m(mutex_);
    std::lock_guard f(fast_lock_);
    for (const Deferred& d : work) {
      if (d.unmapping) {
        finish_unmap(d);
      } else if (d.sleep) {
        // A range whose unmap failed stays reserved (never mapped twice).
        if (d.sleep_ok) sleep_give_va(*d.sleep, d.sleep_segment.va, d.sleep_segment.bytes);
      } else if (!d.destroy.empty()) {
        stats_.pages_unmapped(d.destroy_small, d.bytes, 0);
      }
    }
    take_empty_segments(empty);
  }
  empty.clear();  // vm_release of their address ranges, without the locks
  if (error) std::rethrow_exception(error);
}

void DeviceAllocator::release_pool_blocks(BlockPool& pool) {
  // Whole free (unsplit) plain segments. Expandable pages: release_expandable. A tagged pool
  // keeps its segments outside `awake` (sleep_pool.hpp: the segment set is frozen then).
  if (pool.owner && pool.owner->sleep && pool.owner->sleep->state != SleepPool::State::awake)
    return;
  for (Block* b : pool.blocks.blocks()) {
    if (b->is_split() || b->expandable) continue;
    erase_free(pool, b);
    release_segment(b);
  }
}

void DeviceAllocator::take_empty_segments(std::vector<std::unique_ptr<ExpandableSegment>>& out) {
  // Both locks held. An expandable segment with nothing mapped is one free unmapped block over
  // its whole reservation: its address range goes back (a program that makes a stream per
  // request would otherwise keep a device-sized reservation per stream it ever used: 1000
  // streams on a 141 GB device are more than the 128 TiB of user address space). Its stream
  // gets a new reservation when it allocates again.
  for (auto it = expandable_.begin(); it != expandable_.end();) {
    ExpandableSegment& es = **it;
    Block* u = es.first;
    if (es.mapped_bytes() != 0 || !u || u->mapped || !u->is_free() || u->next ||
        u->ptr != es.base || u->size != es.reserved) {
      ++it;
      continue;
    }
    BlockPool& pool = *u->pool;
    pool.unmapped.erase(u);
    stats_.segment_unreserved(pool.is_small);
    recycle(u);
    out.push_back(std::move(*it));
    it = expandable_.erase(it);
  }
}

bool DeviceAllocator::release_available(Locked& lock, BlockPool& pool, std::size_t size) {
  // Releases one cached unsplit block >= size, or smallest-first blocks until `size`
  // bytes were released (torch's release_available_cached_blocks).
  if (pool.owner && pool.owner->use_count > 0) return false;  // release_unowned_pools: why
  if (cfg_.expandable_segments && !pool.owner) {
    release_cached(lock);
    return true;
  }
  std::vector<Block*> candidates;
  for (Block* b : pool.blocks.blocks())
    if (!b->is_split() && !b->expandable) candidates.push_back(b);
  if (candidates.empty()) return false;
  std::sort(candidates.begin(), candidates.end(),
            [](Block* a, Block* b) { return a->size < b->size; });
  auto fit = std::lower_bound(candidates.begin(), candidates.end(), size,
                              [](Block* a, std::size_t s) { return a->size < s; });
  if (fit != candidates.end()) {
    erase_free(pool, *fit);
    release_segment(*fit);
    return true;
  }
  std::size_t released = 0;
  for (auto it = candidates.rbegin(); it != candidates.rend() && released < size; ++it) {
    released += (*it)->size;
    erase_free(pool, *it);
    release_segment(*it);
  }
  return true;
}

void DeviceAllocator::release_cached(Locked& lock) {
  release_pool_blocks(small_);
  release_pool_blocks(large_);
  release_expandable(lock);  // may drop and retake the locks
  release_unowned_pools();
}

void DeviceAllocator::release_unowned_pools() {
  // Only pools nobody owns (use_count 0) give memory back: a free block of an owned pool may
  // be memory a captured graph still replays into (an intermediate freed during capture),
  // so releasing it would let the device hand it to someone else while the graph writes it
  // (torch's graph_pools_freeable rule). An unowned pool is dropped once it is empty: no
  // block of it is allocated, awaiting events, or cached.
  // A tagged pool (use_sleep_pool) is owned for good by its registry, yet its free segments go
  // back while it is awake: they hold the user's weights / KV cache, not a graph's
  // intermediates (a capture inside use_sleep_pool allocates from the graph's own pool, the
  // innermost scope), and this runs only when no capture is underway (empty_cache, the OOM
  // path). release_pool_blocks skips it while it sleeps. use_sleep_pool entered *inside* a
  // capture routes that capture's intermediates here: such a pool (captured_into) keeps its
  // free segments from then on, or the graph would replay into memory given back.
  for (auto it = pools_.begin(); it != pools_.end();) {
    PrivatePool& p = *it->second;
    if (p.sleep) {
      if (!p.sleep->captured_into) {
        release_pool_blocks(p.small);
        release_pool_blocks(p.large);
      }
      ++it;
      continue;
    }
    if (p.use_count > 0) {
      ++it;
      continue;
    }
    release_pool_blocks(p.small);
    release_pool_blocks(p.large);
    if (p.live_blocks == 0 && p.small.blocks.empty() && p.large.blocks.empty()) {
      it = pools_.erase(it);
    } else {
      ++it;
    }
  }
}

void DeviceAllocator::garbage_collect() {
  const double threshold = cfg_.garbage_collection_threshold * static_cast<double>(
      limit_ == SIZE_MAX ? total_memory_ : limit_);
  if (static_cast<double>(stats_.reserved_bytes()) <= threshold) return;
  // Release whole cached segments, largest first, until under the threshold.
  for (BlockPool* pool : {&large_, &small_}) {
    std::vector<Block*> v;
    for (Block* b : pool->blocks.blocks())
      if (!b->is_split() && !b->expandable) v.push_back(b);
    std::sort(v.begin(), v.end(), [](Block* a, Block* b) { return a->size > b->size; });
    for (Block* b : v) {
      if (static_cast<double>(stats_.reserved_bytes()) <= threshold) return;
      erase_free(*pool, b);
      release_segment(b);
    }
  }
}

namespace {
// Sizes as torch's out-of-memory message writes them (the unit switches above 1024 of the
// smaller one), so text written against torch's message matches cudakit's.
std::string fmt_bytes(std::size_t n) {
  char buf[64];
  const double d = static_cast<double>(n);
  if (n <= 1024) std::snprintf(buf, sizeof buf, "%zu bytes", n);
  else if (n <= kMiB) std::snprintf(buf, sizeof buf, "%.2f KiB", d / 1024.0);
  else if (n <= kGiB) std::snprintf(buf, sizeof buf, "%.2f MiB", d / double(kMiB));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", d / double(kGiB));
  return buf;
}

// The first sentences of every out-of-memory message: torch's wording exactly (code written
// for torch matches on them), cudakit's diagnosis follows.
std::string oom_head(std::size_t size, int device, const detail::MemInfo& mi) {
  return "CUDA out of memory. Tried to allocate " + fmt_bytes(size) + ". GPU " +
         std::to_string(device) + " has a total capacity of " + fmt_bytes(mi.total) +
         " of which " + fmt_bytes(mi.free) + " is free. ";
}

constexpr std::size_t kOneExaByte = std::size_t(1) << 60;
}  // namespace

void DeviceAllocator::reject_impossible(std::size_t size, detail::StreamHandle stream) {
  // Larger than the device (or than any size the arithmetic is checked for): no cache flush
  // or retry can help, and no statistic but num_ooms changes.
  detail::MemInfo mi{};
  try {
    mi = devices_.mem_get_info(device_);
  } catch (...) {
    mi.total = total_memory_;
  }
  Locked lock(*this);
  stats_.oom();
  // torch records the device's free bytes as an oom event's address (snapshot: device_free)
  if (allocator_events_wanted()) note_event("oom", mi.free, size, stream, nullptr);
  const std::string why = "The request (" + std::to_string(size) + " bytes) is larger than the "
                          "device: no cache release can help (check the size computation).";
  // torch refuses 1 EiB and more before it looks at the device, with this sentence.
  throw OutOfMemoryError(size >= kOneExaByte
                             ? "CUDA out of memory. Tried to allocate more than 1EB memory. " + why
                             : oom_head(size, device_, mi) + why,
                         device_, size, mi.free, mi.total);
}

void DeviceAllocator::raise_oom(std::size_t size, std::size_t alloc_size,
                                detail::StreamHandle stream) {
  stats_.oom();
  detail::MemInfo mi{};
  try {
    mi = devices_.mem_get_info(device_);
  } catch (...) {
  }
  const std::size_t allocated = stats_.allocated_bytes();
  const std::size_t reserved = stats_.reserved_bytes();
  const std::size_t cached = reserved - allocated;
  std::string msg = oom_head(size, device_, mi);
  if (mi.total >= mi.free) {
    msg += "This process has " + fmt_bytes(reserved) +
           " reserved by cudakit (other users of the device: " +
           fmt_bytes(mi.total - mi.free > reserved ? mi.total - mi.free - reserved : 0) + "). ";
  }
  msg += "Of the reserved memory " + fmt_bytes(allocated) + " is allocated and " +
         fmt_bytes(cached) + " is reserved but unallocated";
  const std::size_t awaiting = pending_.size() + awaited_events_;
  if (awaiting) msg += "; " + std::to_string(awaiting) + " blocks await streams";
  msg += ". ";
  if (limit_ != SIZE_MAX) {
    msg += "The per-process memory fraction limits this process to " + fmt_bytes(limit_) +
           " (set_per_process_memory_fraction). ";
  }
  msg += oom_diagnosis(oom_facts(size, alloc_size, stream));
  // torch records the device's free bytes as an oom event's address (snapshot: device_free)
  if (allocator_events_wanted()) note_event("oom", mi.free, size, stream, nullptr);
  throw OutOfMemoryError(msg, device_, size, mi.free, mi.total);
}

}  // namespace cudakit::memory
