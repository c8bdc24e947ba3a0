// Expandable segments: the page-mapping object and the DeviceAllocator paths that grow
// (map) and shrink (unmap) them.
#include "memory/expandable_segment.hpp"

#include <algorithm>
#include <atomic>

#include "memory/device_allocator.hpp"
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
  handles_.assign(reserved / page_, 0);
}

ExpandableSegment::~ExpandableSegment() {
  if (detail::is_shutting_down() || !base) return;
  unmap(base, reserved);
  backend.vm_release(base, reserved);
}

bool ExpandableSegment::map(std::uintptr_t addr, std::size_t bytes) {
  const std::size_t first = (addr - base) / page_;
  const std::size_t last = (addr - base + bytes + page_ - 1) / page_;
  std::vector<std::size_t> done;
  for (std::size_t i = first; i < last; ++i) {
    if (handles_[i]) continue;
    detail::PhysMemHandle h = backend.vm_create(device, page_);
    if (!h) {
      for (std::size_t j : done) {
        backend.vm_unmap(base + j * page_, page_);
        backend.vm_destroy(handles_[j]);
        handles_[j] = 0;
        --mapped_pages_;
      }
      return false;
    }
    backend.vm_map(base + i * page_, page_, h, device);
    handles_[i] = h;
    ++mapped_pages_;
    done.push_back(i);
  }
  return true;
}

std::size_t ExpandableSegment::unmap(std::uintptr_t addr, std::size_t bytes) {
  const std::size_t first = (addr - base + page_ - 1) / page_;
  const std::size_t last = (addr - base + bytes) / page_;
  std::size_t n = 0;
  for (std::size_t i = first; i < last; ++i) {
    if (!handles_[i]) continue;
    backend.vm_unmap(base + i * page_, page_);
    backend.vm_destroy(handles_[i]);
    handles_[i] = 0;
    --mapped_pages_;
    ++n;
  }
  return n * page_;
}

// ---- DeviceAllocator: expandable paths ----

Block* DeviceAllocator::alloc_expandable(BlockPool& pool, std::size_t size,
                                         detail::StreamHandle stream) {
  auto free_here = [](Block* b) { return b && !b->allocated && b->event_count == 0; };
  auto room = [&](Block* b) {
    std::size_t bytes = 0;
    while (bytes < size && free_here(b)) {
      bytes += b->size;
      b = b->next;
    }
    return bytes >= size;
  };
  Block* cand = nullptr;
  Block key;
  key.stream = stream;
  key.ptr = 0;
  for (auto it = pool.unmapped.lower_bound(&key); it != pool.unmapped.end(); ++it) {
    Block* u = *it;
    if (u->stream != stream) break;
    if (u->prev && u->prev->mapped && free_here(u->prev) && room(u->prev)) {
      cand = u->prev;
      break;
    }
    if (room(u)) {
      cand = u;
      break;
    }
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
  if (!es.map(b->ptr, bytes)) return false;
  ++stats_.num_device_alloc;
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
  if (history_enabled()) trace("segment_map", b->ptr, bytes, b->stream, nullptr);
  return true;
}

void DeviceAllocator::unmap_free_pages(Block* b) {
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
  const std::uintptr_t lo = (b->ptr - es.base + es.page_ - 1) / es.page_ * es.page_ + es.base;
  const std::uintptr_t hi = (b->ptr + b->size - es.base) / es.page_ * es.page_ + es.base;
  if (hi <= lo) {
    reinsert(b);
    return;
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
  if (history_enabled()) trace("segment_unmap", mid->ptr, mid->size, mid->stream, nullptr);
  const std::size_t n = es.unmap(mid->ptr, mid->size);
  ++stats_.num_device_free;
  stat_update(stats_.reserved_bytes, pool.is_small, -static_cast<std::int64_t>(n));
  mid->mapped = false;
  for (Block* nb : {mid->prev, mid->next}) {
    if (nb && !nb->mapped && !nb->allocated) {
      pool.unmapped.erase(nb);
      merge(mid, nb);
    }
  }
  pool.unmapped.insert(mid);
}

}  // namespace cudakit::memory
