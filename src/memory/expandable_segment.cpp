// Expandable segments: the page-mapping object and the DeviceAllocator paths that grow
// (map) and shrink (unmap) them.
#include "memory/expandable_segment.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "memory/device_allocator.hpp"
#include "cudakit/device.hpp"
#include "memory/history.hpp"

namespace cudakit::memory {

namespace {
std::atomic<std::uint64_t> g_next_es_id{1u << 20};  // distinct from plain segment ids
}

ExpandableSegment::ExpandableSegment(detail::Backend& b, int dev, detail::StreamHandle s,
                                     std::size_t reserve_bytes, bool is_small)
    : backend(b), device(dev), stream(s), small(is_small) {
  page_ = backend.vm_granularity(device);
  if (page_ < kSmallBuffer) page_ = (kSmallBuffer / std::max<std::size_t>(page_, 1)) * page_;
  reserved = (reserve_bytes + page_ - 1) / page_ * page_;
  base = backend.vm_reserve(device, reserved);
  if (!base) return;  // address space exhausted: the caller reports out-of-memory
  head_.assign(reserved / page_, kUnmapped);
  chunk_.assign(reserved / page_, Chunk{});
}

ExpandableSegment::~ExpandableSegment() {
  if (detail::is_shutting_down() || !base) return;
  std::vector<DetachedChunk> chunks;
  detach(base, reserved, chunks);
  release(backend, chunks);
  backend.vm_release(base, reserved);
}

bool ExpandableSegment::map(std::uintptr_t addr, std::size_t bytes,
                            std::size_t max_chunk_pages) {
  const std::size_t first = (addr - base) / page_;
  const std::size_t last = (addr - base + bytes + page_ - 1) / page_;
  std::vector<std::size_t> done;  // chunk heads mapped by this call (rolled back on failure)
  for (std::size_t i = first; i < last;) {
    if (head_[i] != kUnmapped) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < last && head_[j] == kUnmapped && j - i < max_chunk_pages) ++j;
    const std::size_t n = j - i;
    detail::PhysMemHandle h = backend.vm_create(device, n * page_);
    if (h) {
      try {
        backend.vm_map(base + i * page_, n * page_, h, device);
      } catch (...) {
        backend.vm_destroy(h);
        h = 0;
      }
    }
    if (!h) {
      std::vector<DetachedChunk> undo;  // our own fresh mappings: unused, nothing to wait for
      for (std::size_t k : done) detach(base + k * page_, chunk_[k].pages * page_, undo);
      release(backend, undo);
      return false;
    }
    for (std::size_t k = i; k < j; ++k) head_[k] = static_cast<std::uint32_t>(i);
    chunk_[i] = Chunk{h, static_cast<std::uint32_t>(n)};
    mapped_pages_ += n;
    ++chunks_created_;
    done.push_back(i);
    i = j;
  }
  return true;
}

std::pair<std::uintptr_t, std::uintptr_t> ExpandableSegment::unmappable(std::uintptr_t addr,
                                                                        std::size_t bytes) const {
  std::size_t first = (addr - base + page_ - 1) / page_;
  std::size_t last = (addr - base + bytes) / page_;
  // Move inwards to chunk boundaries: a chunk straddling either end stays mapped.
  while (first < last && head_[first] != kUnmapped && head_[first] != first) ++first;
  while (last > first && head_[last - 1] != kUnmapped &&
         head_[last - 1] + chunk_[head_[last - 1]].pages != last)
    --last;
  if (last <= first) return {0, 0};
  return {base + first * page_, base + last * page_};
}

std::size_t ExpandableSegment::detach(std::uintptr_t addr, std::size_t bytes,
                                      std::vector<DetachedChunk>& out) {
  auto [lo, hi] = unmappable(addr, bytes);
  std::size_t n = 0;
  for (std::size_t i = (lo - base) / page_, last = (hi - base) / page_; lo < hi && i < last;) {
    if (head_[i] == kUnmapped) {
      ++i;
      continue;
    }
    const Chunk c = chunk_[i];
    out.push_back(DetachedChunk{base + i * page_, c.pages * page_, c.handle});
    for (std::size_t k = i; k < i + c.pages; ++k) head_[k] = kUnmapped;
    chunk_[i] = Chunk{};
    ++chunks_destroyed_;
    mapped_pages_ -= c.pages;
    n += c.pages;
    i += c.pages;
  }
  return n * page_;
}

void ExpandableSegment::release(detail::Backend& backend, const std::vector<DetachedChunk>& chunks) {
  for (const DetachedChunk& c : chunks) {
    backend.vm_unmap(c.va, c.bytes);
    backend.vm_destroy(c.handle);
  }
}

// ---- DeviceAllocator: expandable paths ----

bool DeviceAllocator::stream_idle(detail::StreamHandle stream) noexcept {
  // A null handle names the legacy stream of the calling thread's current device.
  try {
    if (stream) return backend_.stream_query(stream);
    DeviceGuard guard(device_);
    return backend_.stream_query(stream);
  } catch (...) {
    return false;  // e.g. a destroyed stream: not known to be idle
  }
}

std::size_t DeviceAllocator::compact_expandable(std::size_t want) {
  // Unmaps whole free chunks of the default pools' expandable segments, largest free blocks
  // first, until `want` bytes were returned. Keeps reserved ≈ allocated: physical memory
  // moves to where it is needed instead of growing the footprint.
  // Only chunks of idle streams: a block freed on its stream may still be in use by work
  // queued there before the free, and unmapping under running work faults. Never while
  // allocations are routed to a pool (graph capture): a stream query can invalidate a capture.
  if (!routes_.empty()) return 0;
  std::vector<Block*> v;
  for (BlockPool* pool : {&large_, &small_})
    for (Block* b : pool->blocks.blocks())
      if (b->expandable && b->size >= b->expandable->page_) v.push_back(b);
  std::sort(v.begin(), v.end(), [](Block* a, Block* b) { return a->size > b->size; });
  std::vector<std::pair<detail::StreamHandle, bool>> idle;  // per stream, queried once
  auto is_idle = [&](detail::StreamHandle s) {
    for (auto& [h, ok] : idle)
      if (h == s) return ok;
    idle.emplace_back(s, stream_idle(s));
    return idle.back().second;
  };
  std::size_t freed = 0;
  for (Block* b : v) {
    if (freed >= want) break;
    auto [lo, hi] = b->expandable->unmappable(b->ptr, b->size);
    if (hi <= lo || !is_idle(b->stream)) continue;
    erase_free(*b->pool, b);
    freed += unmap_free_pages(b);
  }
  return freed;
}

void DeviceAllocator::release_expandable(Locked& lock) {
  // Free pages of expandable segments are unmapped only once the device has finished the
  // work queued before they were freed (torch synchronises the segment's streams for the
  // same reason). The wait happens without the locks; blocks freed meanwhile stay mapped.
  bool any = false;
  for (BlockPool* pool : {&large_, &small_})
    for (Block* b : pool->blocks.blocks()) any = any || b->expandable != nullptr;
  if (!any) return;
  const std::uint64_t epoch = free_epoch_;
  lock.unlock();
  {
    WaitScope wait;
    backend_.device_synchronize(device_);
  }
  lock.lock();
  for (BlockPool* pool : {&large_, &small_}) {
    for (Block* b : pool->blocks.blocks()) {
      if (!b->expandable || b->free_epoch > epoch) continue;
      erase_free(*pool, b);
      unmap_free_pages(b);
    }
  }
}

Block* DeviceAllocator::alloc_expandable(BlockPool& pool, std::size_t size,
                                         detail::StreamHandle stream) {
  if (size > total_memory_) return nullptr;  // can never be mapped (and no huge reservation)
  // Bytes that would have to be newly mapped to place `size` bytes starting at block b
  // (SIZE_MAX when the free run starting at b is too short).
  auto to_map = [&](Block* b) {
    std::size_t bytes = 0, need = 0;
    while (bytes < size && b && b->is_free()) {
      if (!b->mapped) need += std::min(b->size, size - bytes);
      bytes += b->size;
      b = b->next;
    }
    return bytes >= size ? need : SIZE_MAX;
  };
  // Keep the footprint at its high-water mark: before growing past it, give back free
  // chunks elsewhere (the new mapping then replaces them).
  const std::size_t reserved_now = stats_.reserved_bytes();
  // Slack of 1/N of the live bytes (expandable_segments_slack_div): below it, moving pages
  // gains less than it costs.
  const std::size_t allocated_now = stats_.allocated_bytes();
  if (reserved_now + size > reserved_hwm_ &&
      reserved_now - allocated_now > (allocated_now + size) / cfg_.expandable_slack_div)
    compact_expandable(reserved_now + size - reserved_hwm_);

  // Best fit over the whole reserved range: the free run needing the fewest new pages.
  Block* cand = nullptr;
  std::size_t best = SIZE_MAX;
  Block key;
  key.stream = stream;
  key.ptr = 0;
  for (auto it = pool.unmapped.lower_bound(&key); it != pool.unmapped.end(); ++it) {
    Block* u = *it;
    if (u->stream != stream) break;
    for (Block* start : {u->prev, u}) {
      if (!start || !start->is_free() || (start == u->prev && !start->mapped)) continue;
      const std::size_t need = to_map(start);
      if (need < best) {
        best = need;
        cand = start;
      }
    }
    if (best <= size % kRoundLarge) break;  // cannot do better than the rounding slop
  }
  if (!cand) {
    // A new reservation per (pool, stream): sized to the device so it rarely needs a second,
    // but at most 1 TiB (its page table costs ~20 bytes per 2 MiB page; an emulated device
    // may claim petabytes), and halved while the address space cannot hold it.
    constexpr std::size_t kMaxReservation = std::size_t(1) << 40;
    std::size_t want = pool.is_small ? std::max(total_memory_ / 8, kSmallBuffer * 4)
                                     : total_memory_;
    want = std::max(std::min(want, kMaxReservation), size);
    std::unique_ptr<ExpandableSegment> es;
    for (;;) {
      es = std::make_unique<ExpandableSegment>(backend_, device_, stream, want, pool.is_small);
      if (es->base) break;
      if (want / 2 < size) return nullptr;
      want /= 2;
    }
    es->id = g_next_es_id.fetch_add(1, std::memory_order_relaxed);
    Block* u = new_block();
    u->ptr = es->base;
    u->size = es->reserved;
    u->stream = stream;
    u->pool = &pool;
    u->mapped = false;
    u->expandable = es.get();
    u->segment_id = es->id;
    pool.unmapped.insert(u);
    es->first = u;
    stats_.segment_reserved(pool.is_small);
    expandable_.push_back(std::move(es));
    cand = u;
  }

  // Take cand out of its free set, then absorb successors until it fits.
  auto take = [&](Block* b) {
    if (b->mapped) erase_free(pool, b);
    else pool.unmapped.erase(b);
  };
  take(cand);
  if (!cand->mapped && !map_block(cand, std::min(size, cand->size))) {
    pool.unmapped.insert(cand);
    return nullptr;
  }
  while (cand->size < size) {
    Block* nb = cand->next;
    take(nb);
    if (!nb->mapped && !map_block(nb, std::min(size - cand->size, nb->size))) {
      pool.unmapped.insert(nb);
      insert_free(pool, cand);  // failure: the mapped part goes back to the pool
      return nullptr;
    }
    merge(cand, nb);
  }
  return cand;
}

bool DeviceAllocator::map_block(Block* b, std::size_t size) {
  // Maps the page-rounded prefix of unmapped block b; the rest stays an unmapped block.
  ExpandableSegment& es = *b->expandable;
  const std::size_t bytes = std::min(b->size, (size + es.page_ - 1) / es.page_ * es.page_);
  if (would_exceed_limit(bytes)) return false;
  const std::size_t chunks_before = es.chunks_created();
  if (!es.map(b->ptr, bytes, cfg_.expandable_chunk_pages)) return false;
  if (bytes < b->size) {
    Block* rest = split_at(b, b->ptr + bytes);
    b->pool->unmapped.insert(rest);
  }
  b->mapped = true;
  stats_.pages_mapped(b->pool->is_small, bytes, es.chunks_created() - chunks_before);
  reserved_hwm_ = std::max(reserved_hwm_, stats_.reserved_bytes());
  if (allocator_events_wanted()) note_event("segment_map", b->ptr, bytes, b->stream, nullptr);
  return true;
}

std::size_t DeviceAllocator::unmap_free_pages(Block* b) {
  // b: free, mapped, out of the free set. Its whole chunks are taken out of the page table
  // now and unmapped after the locks are released (Locked::unlock); the block covering them
  // is `releasing` until then. Partial chunks at either end stay mapped and free.
  BlockPool& pool = *b->pool;
  ExpandableSegment& es = *b->expandable;
  const auto [lo, hi] = es.unmappable(b->ptr, b->size);
  if (hi <= lo) {
    insert_free(pool, b);
    return 0;
  }
  Block* mid = b;
  if (lo > b->ptr) {
    mid = split_at(b, lo);
    insert_free(pool, b);
  }
  if (hi < mid->ptr + mid->size) insert_free(pool, split_at(mid, hi));
  if (allocator_events_wanted()) note_event("segment_unmap", mid->ptr, mid->size, mid->stream, nullptr);
  Deferred d;
  d.unmapping = mid;
  d.bytes = es.detach(mid->ptr, mid->size, d.chunks);
  mid->releasing = true;
  const std::size_t bytes = d.bytes;
  deferred_.push_back(std::move(d));
  return bytes;
}

void DeviceAllocator::finish_unmap(const Deferred& d) {
  // Both locks held; the chunks of d.unmapping are unmapped now.
  Block* mid = d.unmapping;
  BlockPool& pool = *mid->pool;
  stats_.pages_unmapped(pool.is_small, d.bytes, d.chunks.size());
  mid->releasing = false;
  mid->mapped = false;
  for (Block* nb : {mid->prev, mid->next}) {
    if (nb && !nb->mapped && nb->is_free()) {
      pool.unmapped.erase(nb);
      merge(mid, nb);
    }
  }
  pool.unmapped.insert(mid);
}

}  // namespace cudakit::memory
