// Expandable segments: the page-mapping object and the DeviceAllocator paths that grow
// (map) and shrink (unmap) them.
#include "memory/expandable_segment.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "memory/device_allocator.hpp"
#include "memory/history.hpp"

namespace cudakit::memory {

namespace {
std::atomic<std::uint64_t> g_next_es_id{1u << 20};  // distinct from plain segment ids
std::size_t compact_slack_div() {
  static std::size_t n = [] {
    const char* e = std::getenv("CUDAKIT_ES_SLACK_DIV");
    return e ? std::max<std::size_t>(1, std::strtoull(e, nullptr, 10)) : 64;
  }();
  return n;
}
std::size_t max_chunk_pages() {
  static std::size_t n = [] {
    const char* e = std::getenv("CUDAKIT_ES_CHUNK_PAGES");
    return e ? std::max<std::size_t>(1, std::strtoull(e, nullptr, 10)) : ExpandableSegment::kDefaultChunkPages;
  }();
  return n;
}
}

ExpandableSegment::ExpandableSegment(detail::Backend& b, int dev, detail::StreamHandle s,
                                     std::size_t reserve_bytes, bool is_small)
    : backend(b), device(dev), stream(s), small(is_small) {
  page_ = backend.vm_granularity(device);
  if (page_ < kSmallBuffer) page_ = (kSmallBuffer / std::max<std::size_t>(page_, 1)) * page_;
  reserved = (reserve_bytes + page_ - 1) / page_ * page_;
  base = backend.vm_reserve(device, reserved);
  head_.assign(reserved / page_, kUnmapped);
  chunk_.assign(reserved / page_, Chunk{});
}

ExpandableSegment::~ExpandableSegment() {
  if (detail::is_shutting_down() || !base) return;
  unmap(base, reserved);
  backend.vm_release(base, reserved);
}

bool ExpandableSegment::map(std::uintptr_t addr, std::size_t bytes) {
  const std::size_t first = (addr - base) / page_;
  const std::size_t last = (addr - base + bytes + page_ - 1) / page_;
  std::vector<std::size_t> done;  // chunk heads mapped by this call (rolled back on failure)
  for (std::size_t i = first; i < last;) {
    if (head_[i] != kUnmapped) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < last && head_[j] == kUnmapped && j - i < max_chunk_pages()) ++j;
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
      for (std::size_t k : done) unmap(base + k * page_, chunk_[k].pages * page_);
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

std::size_t ExpandableSegment::unmap(std::uintptr_t addr, std::size_t bytes) {
  auto [lo, hi] = unmappable(addr, bytes);
  std::size_t n = 0;
  for (std::size_t i = (lo - base) / page_, last = (hi - base) / page_; lo < hi && i < last;) {
    if (head_[i] == kUnmapped) {
      ++i;
      continue;
    }
    const Chunk c = chunk_[i];
    backend.vm_unmap(base + i * page_, c.pages * page_);
    backend.vm_destroy(c.handle);
    for (std::size_t k = i; k < i + c.pages; ++k) head_[k] = kUnmapped;
    chunk_[i] = Chunk{};
    ++chunks_destroyed_;
    mapped_pages_ -= c.pages;
    n += c.pages;
    i += c.pages;
  }
  return n * page_;
}

// ---- DeviceAllocator: expandable paths ----

std::size_t DeviceAllocator::compact_expandable(std::size_t want) {
  // Unmaps whole free chunks of the default pools' expandable segments, largest free blocks
  // first, until `want` bytes were returned. Keeps reserved ≈ allocated: physical memory
  // moves to where it is needed instead of growing the footprint.
  std::vector<Block*> v;
  for (BlockPool* pool : {&large_, &small_})
    for (Block* b : pool->blocks.blocks())
      if (b->expandable && b->size >= b->expandable->page_) v.push_back(b);
  std::sort(v.begin(), v.end(), [](Block* a, Block* b) { return a->size > b->size; });
  std::size_t freed = 0;
  for (Block* b : v) {
    if (freed >= want) break;
    auto [lo, hi] = b->expandable->unmappable(b->ptr, b->size);
    if (hi <= lo) continue;
    b->pool->blocks.erase(b);
    freed += unmap_free_pages(b);
  }
  return freed;
}

Block* DeviceAllocator::alloc_expandable(BlockPool& pool, std::size_t size,
                                         detail::StreamHandle stream) {
  if (size > total_memory_) return nullptr;  // can never be mapped (and no huge reservation)
  auto free_here = [](Block* b) { return b && !b->allocated && b->event_count == 0; };
  // Bytes that would have to be newly mapped to place `size` bytes starting at block b
  // (SIZE_MAX when the free run starting at b is too short).
  auto to_map = [&](Block* b) {
    std::size_t bytes = 0, need = 0;
    while (bytes < size && free_here(b)) {
      if (!b->mapped) need += std::min(b->size, size - bytes);
      bytes += b->size;
      b = b->next;
    }
    return bytes >= size ? need : SIZE_MAX;
  };
  // Keep the footprint at its high-water mark: before growing past it, give back free
  // chunks elsewhere (the new mapping then replaces them).
  const auto reserved_now = static_cast<std::size_t>(stats_.reserved_bytes[0].current);
  // Slack of 1/64 of the live bytes: below it, moving pages gains less than it costs.
  const auto allocated_now = static_cast<std::size_t>(stats_.allocated_bytes[0].current);
  if (reserved_now + size > reserved_hwm_ &&
      reserved_now - allocated_now > (allocated_now + size) / compact_slack_div())
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
      if (!start || !free_here(start) || (start == u->prev && !start->mapped)) continue;
      const std::size_t need = to_map(start);
      if (need < best) {
        best = need;
        cand = start;
      }
    }
    if (best <= size % kRoundLarge) break;  // cannot do better than the rounding slop
  }
  if (!cand) {
    // A new reservation per (pool, stream): sized to the device so it never needs a second.
    std::size_t want = pool.is_small ? std::max(total_memory_ / 8, kSmallBuffer * 4)
                                     : total_memory_;
    want = std::max(want, size);
    auto es = std::make_unique<ExpandableSegment>(backend_, device_, stream, want, pool.is_small);
    if (!es->base) return nullptr;
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
    stat_update(stats_.segment, pool.is_small, 1);
    expandable_.push_back(std::move(es));
    cand = u;
  }

  // Take cand out of its free set (accounting), then absorb successors until it fits.
  auto take = [&](Block* b) {
    if (b->mapped) {
      pool.blocks.erase(b);
      if (b->is_split()) {
        stat_update(stats_.inactive_split, pool.is_small, -1);
        stat_update(stats_.inactive_split_bytes, pool.is_small, -static_cast<std::int64_t>(b->size));
      }
    } else {
      pool.unmapped.erase(b);
    }
  };
  auto give_back = [&](Block* b) {  // failure: return a free mapped block to the pool
    pool.blocks.insert(b);
    if (b->is_split()) {
      stat_update(stats_.inactive_split, pool.is_small, 1);
      stat_update(stats_.inactive_split_bytes, pool.is_small, static_cast<std::int64_t>(b->size));
    }
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
      give_back(cand);
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
  if (!es.map(b->ptr, bytes)) return false;
  stats_.num_device_alloc += static_cast<std::int64_t>(es.chunks_created() - chunks_before);
  if (bytes < b->size) {
    Block* rest = new_block();
    rest->ptr = b->ptr + bytes;
    rest->size = b->size - bytes;
    rest->stream = b->stream;
    rest->pool = b->pool;
    rest->mapped = false;
    rest->expandable = b->expandable;
    rest->segment_id = b->segment_id;
    rest->prev = b;
    rest->next = b->next;
    if (rest->next) rest->next->prev = rest;
    b->next = rest;
    b->size = bytes;
    b->pool->unmapped.insert(rest);
  }
  b->mapped = true;
  stat_update(stats_.reserved_bytes, b->pool->is_small, static_cast<std::int64_t>(bytes));
  reserved_hwm_ = std::max(reserved_hwm_, static_cast<std::size_t>(stats_.reserved_bytes[0].current));
  if (allocator_events_wanted()) trace("segment_map", b->ptr, bytes, b->stream, nullptr);
  return true;
}

std::size_t DeviceAllocator::unmap_free_pages(Block* b) {
  // b: free, mapped, already erased from pool.blocks.
  BlockPool& pool = *b->pool;
  ExpandableSegment& es = *b->expandable;
  if (b->is_split()) {
    stat_update(stats_.inactive_split, pool.is_small, -1);
    stat_update(stats_.inactive_split_bytes, pool.is_small, -static_cast<std::int64_t>(b->size));
  }
  auto reinsert = [&](Block* x) {
    pool.blocks.insert(x);
    if (x->is_split()) {
      stat_update(stats_.inactive_split, pool.is_small, 1);
      stat_update(stats_.inactive_split_bytes, pool.is_small, static_cast<std::int64_t>(x->size));
    }
  };
  const auto [lo, hi] = es.unmappable(b->ptr, b->size);
  if (hi <= lo) {
    reinsert(b);
    return 0;
  }
  auto split_at = [&](Block* x, std::uintptr_t at) {  // x keeps [ptr, at); returns the rest
    Block* r = new_block();
    r->ptr = at;
    r->size = x->ptr + x->size - at;
    r->stream = x->stream;
    r->pool = x->pool;
    r->mapped = x->mapped;
    r->expandable = x->expandable;
    r->segment_id = x->segment_id;
    r->prev = x;
    r->next = x->next;
    if (r->next) r->next->prev = r;
    x->next = r;
    x->size = at - x->ptr;
    return r;
  };
  Block* mid = b;
  if (lo > b->ptr) {
    mid = split_at(b, lo);
    reinsert(b);
  }
  if (hi < mid->ptr + mid->size) {
    Block* tail = split_at(mid, hi);
    reinsert(tail);
  }
  if (allocator_events_wanted()) trace("segment_unmap", mid->ptr, mid->size, mid->stream, nullptr);
  const std::size_t chunks_before = es.chunks_destroyed();
  const std::size_t n = es.unmap(mid->ptr, mid->size);
  stats_.num_device_free += static_cast<std::int64_t>(es.chunks_destroyed() - chunks_before);
  stat_update(stats_.reserved_bytes, pool.is_small, -static_cast<std::int64_t>(n));
  mid->mapped = false;
  for (Block* nb : {mid->prev, mid->next}) {
    if (nb && !nb->mapped && !nb->allocated) {
      pool.unmapped.erase(nb);
      merge(mid, nb);
    }
  }
  pool.unmapped.insert(mid);
  return n;
}

}  // namespace cudakit::memory
