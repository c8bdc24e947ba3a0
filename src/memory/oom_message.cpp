// Out-of-memory diagnosis (oom_message.hpp) and the allocator's facts behind it.
#include "memory/oom_message.hpp"

#include <algorithm>
#include <cstdio>

#include "backend/types.hpp"
#include "memory/device_allocator.hpp"

namespace cudakit::memory {

std::string format_bytes(std::size_t n) {
  char buf[64];
  const double d = static_cast<double>(n);
  if (n >= kGiB) std::snprintf(buf, sizeof buf, "%.2f GiB", d / double(kGiB));
  else if (n >= kMiB) std::snprintf(buf, sizeof buf, "%.2f MiB", d / double(kMiB));
  else if (n >= 1024) std::snprintf(buf, sizeof buf, "%.2f KiB", d / 1024.0);
  else std::snprintf(buf, sizeof buf, "%zu bytes", n);
  return buf;
}

std::string oom_diagnosis(const OomFacts& f) {
  const std::size_t unallocated = f.reserved > f.allocated ? f.reserved - f.allocated : 0;
  // What the process could use for this request if free memory were one piece: the
  // allocator's free bytes plus what the device (and the fraction limit) still give.
  const std::size_t obtainable = std::min(f.device_free, f.limit_room);
  const std::size_t could_have = unallocated + obtainable;
  std::string s = "Of the " + format_bytes(unallocated) +
                  " reserved but unallocated, the largest free block is " +
                  format_bytes(f.largest_free);
  if (f.largest_free_any_stream > f.largest_free)
    s += " (" + format_bytes(f.largest_free_any_stream) + " on another stream)";
  s += ". ";
  if (could_have < f.requested) {
    // Even perfectly packed, the live set plus this request does not fit.
    s += "The live set causes this, not fragmentation: " + format_bytes(f.allocated) +
         " allocated + " + format_bytes(f.requested) + " requested exceed the " +
         format_bytes(f.allocated + could_have) + " this process can hold";
    if (f.limit_room < f.device_free) s += " under set_per_process_memory_fraction";
    s += ". Free tensors you no longer need, reduce the batch size, or free memory in other "
         "processes sharing the device. ";
    return s;
  }
  if (f.largest_free_any_stream >= f.requested && f.largest_free < f.requested) {
    s += "This request would fit in memory cached for another stream: free it there, or "
         "call empty_cache() after synchronising that stream. ";
    return s;
  }
  s += "This request would fit if memory were not fragmented (" + format_bytes(unallocated) +
       " cached in pieces + " + format_bytes(obtainable) +
       " still free for this process): fragmentation, not the live set, caused this "
       "out-of-memory";
  if (!f.expandable) {
    s += "; try CUDAKIT_ALLOC_CONF=expandable_segments:True (free memory then merges across "
         "segments). ";
  } else {
    s += " (free pages are pinned by live blocks in partly used chunks); a smaller "
         "expandable_segments_max_chunk_mb pins less. ";
  }
  return s;
}

OomFacts DeviceAllocator::oom_facts(std::size_t size, std::size_t alloc_size,
                                    detail::StreamHandle stream) {
  // Both locks held (raise_oom): every release step has run.
  OomFacts f;
  f.requested = size;
  f.needed = alloc_size;
  f.allocated = stats_.allocated_bytes();
  f.reserved = stats_.reserved_bytes();
  try {
    f.device_free = devices_.mem_get_info(device_).free;
  } catch (...) {
  }
  f.limit_room = limit_ == SIZE_MAX ? SIZE_MAX : limit_room();
  BlockPool& target = pool_for(size, stream);
  f.expandable = grows_expandable(target);  // the request's own pool kind, not the large pool's
  auto scan = [&](BlockPool& pool) {
    for (Block* b : pool.blocks.blocks()) {
      f.largest_free_any_stream = std::max(f.largest_free_any_stream, b->size);
      if (&pool == &target && b->stream == stream) f.largest_free = std::max(f.largest_free, b->size);
    }
  };
  scan(small_);
  scan(large_);
  for (auto& [id, p] : pools_) {
    scan(p->small);
    scan(p->large);
  }
  return f;
}

}  // namespace cudakit::memory
