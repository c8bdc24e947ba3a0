// Expandable segments: the page-mapping object and the DeviceAllocator paths that grow
// (map) and shrink (unmap) them.
#include "memory/expandable_segment.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <stdexcept>

#include "backend/lifetime.hpp"
#include "backend/memory_ops.hpp"
#include "core/capture_gate.hpp"
#include "cudakit/device.hpp"
#include "memory/device_allocator.hpp"
#include "memory/history.hpp"

namespace cudakit::memory {

namespace {
std::atomic<std::uint64_t> g_next_es_id{1u << 20};  // distinct from plain segment ids
std::atomic<std::uint64_t> g_next_share_serial{1};
// Map-ahead when a large pool grows (see alloc_expandable). 80 MiB: with chunks of up to
// 128 MiB, the previous 40 MiB mapped ahead less than one chunk and saved nothing on pools
// past 1 GiB.
constexpr std::size_t kMapAhead = 80 * kMiB;
// The pool size below which a large pool keeps its unit chunks (the largest chunk is
// expandable_segments_max_chunk_mb).
constexpr std::size_t kGrowChunksFrom = 512 * kMiB;
}

ExpandableSegment::ExpandableSegment(detail::MemoryOps& b, int dev, detail::StreamHandle s,
                                     std::size_t reserve_bytes, std::size_t unit_bytes,
                                     bool is_small)
    : backend(b), device(dev), stream(s), small(is_small), unit_(unit_bytes) {
  reserved = (reserve_bytes + unit_ - 1) / unit_ * unit_;
  base = backend.vm_reserve(device, reserved);
  if (!base) return;  // address space exhausted: the caller reports out-of-memory
  len_.assign(reserved / unit_, 0);
  handle_.assign(reserved / unit_, 0);
}

ExpandableSegment::~ExpandableSegment() {
  if (detail::is_shutting_down() || !base) return;
  std::vector<DetachedChunk> chunks;
  detach(base, reserved, chunks);
  VmCallCounts ignored;
  unmap(backend, chunks, ignored);
  for (const DetachedChunk& c : chunks) destroy(backend, c.handle, ignored);
  backend.vm_release(base, reserved);
}

std::uintptr_t ExpandableSegment::map(std::uintptr_t addr, std::size_t bytes,
                                      std::uintptr_t limit, std::size_t max_chunk,
                                      std::size_t max_new_bytes, std::vector<Spare>& spares,
                                      VmCallCounts& calls, std::size_t* from_spares) {
  const std::size_t first = (addr - base) / unit_;
  const std::size_t want = (addr - base + bytes + unit_ - 1) / unit_;
  const std::size_t lim = (limit - base) / unit_;
  const std::size_t max_units = std::max<std::size_t>(1, max_chunk / unit_);
  // Plan, then map the whole range with one vm_map_chunks (one access change on the GPU).
  std::vector<detail::PhysMemHandle> run;
  std::vector<std::size_t> sizes;
  std::vector<bool> spare;  // per chunk of the run: taken from the spares
  // At most one chunk per unit: reserved up front, so no push_back throws with a handle in hand.
  run.reserve(want - first);
  sizes.reserve(want - first);
  spare.reserve(want - first);
  bool ok = true;
  std::exception_ptr error;  // a driver error other than out-of-memory, after the rollback
  std::size_t created = 0;
  std::size_t p = first;
  try {
    while (p < want) {
      // The largest power of two <= max_units that p is aligned to and that fits before lim,
      // shrunk while half of it still covers what is left to map.
      std::size_t k = 1;
      while (k * 2 <= max_units && p % (k * 2) == 0 && p + k * 2 <= lim) k *= 2;
      while (k > 1 && k / 2 >= want - p) k /= 2;
      // A spare of exactly k units, else the largest smaller one (smaller powers of two keep
      // the alignment), else a new chunk.
      std::size_t pick = SIZE_MAX, pick_units = 0;
      for (std::size_t s = spares.size(); s-- > 0;) {
        const std::size_t u = spares[s].bytes / unit_;
        if (u <= k && u > pick_units) {
          pick = s;
          pick_units = u;
          if (u == k) break;
        }
      }
      if (pick != SIZE_MAX) {
        run.push_back(spares[pick].handle);
        spares.erase(spares.begin() + static_cast<std::ptrdiff_t>(pick));
        k = pick_units;
        spare.push_back(true);
      } else {
        if (created + k * unit_ > max_new_bytes) {  // past the memory-fraction limit
          ok = false;
          break;
        }
        detail::PhysMemHandle h = backend.vm_create(device, k * unit_);
        if (!h) {
          ok = false;
          break;
        }
        created += k * unit_;
        VmCallCounts::bump(calls.create);
        run.push_back(h);
        spare.push_back(false);
      }
      sizes.push_back(k * unit_);
      p += k;
    }
  } catch (...) {
    ok = false;
    error = std::current_exception();
  }
  if (ok) {
    try {
      backend.vm_map_chunks(addr, sizes.data(), run.data(), run.size(), device);
    } catch (...) {
      ok = false;
    }
  }
  if (!ok) {
    for (std::size_t c = 0; c < run.size(); ++c) {
      if (spare[c]) spares.push_back(Spare{run[c], sizes[c]});
      else destroy(backend, run[c], calls);
    }
    if (error) std::rethrow_exception(error);
    return 0;
  }
  std::size_t reused = 0, u = first;
  for (std::size_t c = 0; c < run.size(); ++c) {
    const std::size_t n = sizes[c] / unit_;
    handle_[u] = run[c];
    for (std::size_t i = 0; i < n; ++i) len_[u + i] = static_cast<std::uint32_t>(n);
    if (spare[c]) reused += sizes[c];
    u += n;
  }
  mapped_units_ += u - first;
  calls.map.fetch_add(run.size(), std::memory_order_relaxed);
  for (bool s : spare) calls.reused.fetch_add(s ? 1 : 0, std::memory_order_relaxed);
  if (!run.empty()) VmCallCounts::bump(calls.access);
  if (from_spares) *from_spares = reused;
  return base + u * unit_;
}

std::pair<std::uintptr_t, std::uintptr_t> ExpandableSegment::unmappable(std::uintptr_t addr,
                                                                        std::size_t bytes) const {
  // Chunk boundaries: a unit that is unmapped, or the first of its chunk.
  std::size_t first = (addr - base + unit_ - 1) / unit_;
  std::size_t last = (addr - base + bytes) / unit_;
  const std::size_t units = len_.size();
  if (first < units && len_[first] && first % len_[first] != 0)
    first += len_[first] - first % len_[first];
  if (last < units && len_[last] && last % len_[last] != 0) last -= last % len_[last];
  if (last <= first) return {0, 0};
  return {base + first * unit_, base + last * unit_};
}

std::size_t ExpandableSegment::detach(std::uintptr_t addr, std::size_t bytes,
                                      std::vector<DetachedChunk>& out) {
  const std::size_t first = (addr - base) / unit_;
  const std::size_t last = (addr - base + bytes) / unit_;
  std::size_t n = 0;
  for (std::size_t i = first; i < last;) {
    const std::size_t len = len_[i];
    if (!len) {
      ++i;
      continue;
    }
    int fd = -1;
    if (!exported_.empty()) {
      if (auto e = exported_.find(i); e != exported_.end()) {
        fd = e->second.fd;
        exported_.erase(e);
      }
    }
    out.push_back(DetachedChunk{base + i * unit_, len * unit_, handle_[i], fd});
    handle_[i] = 0;
    std::fill(len_.begin() + static_cast<std::ptrdiff_t>(i),
              len_.begin() + static_cast<std::ptrdiff_t>(i + len), 0u);
    mapped_units_ -= len;
    n += len;
    i += len;
  }
  return n * unit_;
}

std::vector<ExpandableSegment::SharedChunk> ExpandableSegment::share(std::uintptr_t addr,
                                                                    std::size_t bytes) {
  const std::size_t last = (addr - base + bytes + unit_ - 1) / unit_;
  std::vector<SharedChunk> out;
  for (std::size_t i = (chunk_start(addr) - base) / unit_; i < last; i += len_[i]) {
    if (!len_[i]) throw std::logic_error("ExpandableSegment::share: chunk not mapped");
    auto [it, fresh] = exported_.try_emplace(i);
    if (fresh) {
      try {
        it->second.fd = backend.vm_export_fd(handle_[i]);
      } catch (...) {
        exported_.erase(it);
        throw;
      }
      it->second.serial = g_next_share_serial.fetch_add(1, std::memory_order_relaxed);
      it->second.bytes = len_[i] * unit_;
    }
    out.push_back(it->second);
  }
  return out;
}

void ExpandableSegment::unmap(detail::MemoryOps& backend, const std::vector<DetachedChunk>& chunks,
                              VmCallCounts& calls) {
  // Descriptors first: closing them never fails, and the mapping keeps the memory meanwhile.
  for (const DetachedChunk& c : chunks)
    if (c.fd >= 0) ::close(c.fd);
  for (const DetachedChunk& c : chunks) {
    backend.vm_unmap(c.va, c.bytes);
    VmCallCounts::bump(calls.unmap);
  }
}

void ExpandableSegment::destroy(detail::MemoryOps& backend, detail::PhysMemHandle h,
                                VmCallCounts& calls) {
  backend.vm_destroy(h);
  VmCallCounts::bump(calls.destroy);
}

// ---- DeviceAllocator: expandable paths ----

std::size_t DeviceAllocator::chunk_bytes(bool small) const noexcept {
  return small ? vm_page_ : vm_page_ * cfg_.expandable_chunk_pages;
}

std::size_t DeviceAllocator::chunk_for(bool small, std::size_t pool_bytes) const noexcept {
  // The chunk new mappings of a pool of pool_bytes use (expandable_segment.hpp): the largest
  // power-of-two multiple of the unit <= the footprint slack pool_bytes / slack_div, at most
  // expandable_segments_max_chunk_mb; pools under kGrowChunksFrom keep the unit.
  std::size_t c = chunk_bytes(small);
  if (small || pool_bytes < kGrowChunksFrom) return c;
  const std::size_t slack = pool_bytes / cfg_.expandable_slack_div;
  while (c * 2 <= slack && c * 2 <= cfg_.expandable_max_chunk_mb * kMiB) c *= 2;
  return c;
}

std::size_t DeviceAllocator::compact_expandable(std::size_t want, const Block* keep_from,
                                                std::size_t keep_bytes) {
  // Detaches whole free chunks of the default pools' expandable segments, largest free blocks
  // first, until `want` bytes were found; the handles come back as spares for the allocation
  // that asked (physical memory moves to where it is needed instead of growing the
  // footprint). The free run the caller is about to use ([keep_from, +keep_bytes)) stays.
  // Only while every stream this allocator has handed memory out on is idle: a block freed
  // on its stream may still be in use by work queued before the free, on that stream or on
  // another one that used it without record_stream (torch's own test_cuda.py does this:
  // test_cudnn_multiple_threads_same_device frees a default-stream tensor that a side
  // stream's convolution still reads; torch's default mode never unmaps there, so it only
  // races, while unmapping the pages faulted: an illegal address on the H200). Checking
  // only the freed block's stream (as this code once did) missed exactly that case. A
  // stream that never allocated here but reads memory without record_stream is still not
  // covered: CUDA gives no cheap "is the device idle" query; release_expandable (OOM,
  // empty_cache) synchronizes the device instead. The price of asking every stream: while
  // any stream that allocated here is busy, pages do not move and the footprint grows
  // instead (measured only in replay, where every stream is idle). Never while allocations are routed to a
  // pool (graph capture): a stream query can invalidate a capture.
  if (!routes_.empty()) return 0;
  // Every stream that allocated here is asked once (stream_retire.cpp: a destroyed stream's
  // fence event instead of the stream); the page moves below then need no further query.
  if (!all_noted_streams_idle()) return 0;
  const std::uintptr_t keep_lo = keep_from ? keep_from->ptr : 0;
  const std::uintptr_t keep_hi = keep_lo + keep_bytes;
  const ExpandableSegment* keep_es = keep_from ? keep_from->expandable : nullptr;
  std::vector<Block*> v;
  const bool small_wanted = keep_from ? keep_from->pool->is_small : false;
  for (BlockPool* pool : {&large_, &small_}) {
    for (Block* b : pool->blocks.blocks()) {
      if (!b->expandable || b->size < b->expandable->unit_bytes()) continue;
      if (b->expandable == keep_es && b->ptr < keep_hi && b->ptr + b->size > keep_lo) continue;
      v.push_back(b);
    }
  }
  // The requesting pool's chunks first (their handles can be mapped again as they are), then
  // the largest blocks (the fewest unmap calls per byte).
  // Measured alternatives (longest-free first, highest address first) made no difference to
  // the calls or the footprint on the traces.
  std::sort(v.begin(), v.end(), [&](Block* a, Block* b) {
    const bool sa = a->pool->is_small == small_wanted, sb = b->pool->is_small == small_wanted;
    return sa != sb ? sa : a->size > b->size;
  });
  std::size_t freed = 0;
  for (Block* b : v) {
    if (freed >= want) break;
    auto [lo, hi] = b->expandable->unmappable(b->ptr, b->size);
    if (hi <= lo) continue;
    erase_free(*b->pool, b);
    freed += unmap_free_pages(b, /*keep_handles=*/b->pool->is_small == small_wanted);
  }
  return freed;
}

void DeviceAllocator::release_expandable(Locked& lock) {
  // Free pages of expandable segments are unmapped only once the device has finished the
  // work queued before they were freed (torch synchronises the segment's streams for the
  // same reason). The wait happens without the locks; blocks freed meanwhile stay mapped.
  release_spares();
  bool any = false;
  for (BlockPool* pool : {&large_, &small_})
    for (Block* b : pool->blocks.blocks()) any = any || b->expandable != nullptr;
  if (!any) return;
  const std::uint64_t epoch = free_epoch_;
  lock.unlock();
  bool synchronized;
  {
    WaitScope wait;
    // Not while another thread captures: the synchronize would invalidate its capture
    // (core/capture_gate.hpp); the free pages then stay mapped until a later release.
    synchronized = detail::synchronize_unless_capturing([this] {
      devices_.device_synchronize(device_);
    });
  }
  lock.lock();
  if (!synchronized) return;
  drop_completed_fences(/*all=*/true);  // the device finished everything
  for (BlockPool* pool : {&large_, &small_}) {
    for (Block* b : pool->blocks.blocks()) {
      if (!b->expandable || b->free_epoch > epoch) continue;
      erase_free(*pool, b);
      unmap_free_pages(b, /*keep_handles=*/false);
    }
  }
}

void DeviceAllocator::release_spares() {
  // Spare handles nobody mapped again go back to the device after the unlock.
  for (bool small : {true, false}) {
    auto& spares = small ? spare_small_ : spare_large_;
    if (spares.empty()) continue;
    Deferred d;
    d.destroy_small = small;
    d.bytes = 0;
    for (const ExpandableSegment::Spare& sp : spares) {
      d.destroy.push_back(sp.handle);
      d.bytes += sp.bytes;
    }
    spares.clear();
    spare_bytes_ -= d.bytes;  // still counted as reserved until destroyed
    deferred_.push_back(std::move(d));
  }
}

Block* DeviceAllocator::alloc_expandable(BlockPool& pool, std::size_t size,
                                         detail::StreamHandle stream, bool may_move,
                                         bool& moving) {
  if (size > total_memory_) return nullptr;  // can never be mapped (and no huge reservation)
  const std::size_t chunk = chunk_bytes(pool.is_small);
  // Bytes of chunks that would have to be newly mapped to place `size` bytes starting at
  // block b (SIZE_MAX when the free run starting at b is too short). Unmapped blocks start
  // and end on chunk boundaries.
  auto to_map = [&](Block* b) {
    std::size_t bytes = 0, need = 0;
    while (bytes < size && b && b->is_free()) {
      if (!b->mapped) need += (std::min(b->size, size - bytes) + chunk - 1) / chunk * chunk;
      bytes += b->size;
      b = b->next;
    }
    return bytes >= size ? need : SIZE_MAX;
  };

  // Best fit over the whole reserved range: the free run needing the fewest new chunks.
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
    if (best <= chunk) break;  // cannot do better than the chunk rounding
  }

  // The footprint budget: reserved memory may exceed the live high-water mark by 1/N
  // (expandable_segments_slack_div) before pages move. Moving pages costs an unmap and a map
  // per chunk; growing costs footprint. Below the budget the segment just grows (torch's
  // expandable segments never move pages, and pay for it in footprint on variable-size
  // workloads); above it, free chunks elsewhere are unmapped first, outside the locks, and
  // their physical memory is mapped here (malloc retries once they are back as spares).
  live_hwm_ = std::max(live_hwm_, stats_.allocated_bytes() + size);
  const std::size_t budget = live_hwm_ + live_hwm_ / cfg_.expandable_slack_div;
  const std::size_t need = best == SIZE_MAX ? (size + chunk - 1) / chunk * chunk : best;
  const std::size_t reserved_now = stats_.reserved_bytes();
  // Large pools map ahead (up to the next kMapAhead boundary, within the budget): the next
  // allocations of a growing live set then need no map call. Measured (replay, 5 traces):
  // map calls -15..-25 % on the training traces, footprint unchanged.
  const std::size_t ahead = !pool.is_small && reserved_now + need < budget
                                ? std::min(budget - reserved_now - need, kMapAhead)
                                : 0;
  // The chunk of new mappings follows the pool's size once this allocation is in (so the
  // first big allocation of a pool already uses big chunks).
  const std::size_t pool_bytes = stats_.reserved_bytes(pool.is_small) + need;
  const std::size_t max_chunk = chunk_for(pool.is_small, pool_bytes);
  if (may_move && best != 0) {
    if (reserved_now + need > budget) {
      // Exactly the excess: unmapping more ahead of time (hysteresis) was measured to save no
      // calls (the pages are mapped again soon after), only to lower the footprint.
      const std::size_t want = reserved_now + need - budget;
      if (compact_expandable(want, cand, size) > 0) {
        moving = true;
        return nullptr;
      }
    }
  }

  if (!cand) {
    // A new reservation per (pool, stream): sized to the device so it rarely needs a second,
    // but at most 1 TiB (its page table costs 8 bytes per chunk; an emulated device may claim
    // petabytes), and halved while the address space cannot hold it.
    constexpr std::size_t kMaxReservation = std::size_t(1) << 40;
    std::size_t want = pool.is_small ? std::max(total_memory_ / 8, kSmallBuffer * 4)
                                     : total_memory_;
    want = std::max(std::min(want, kMaxReservation), size);
    std::unique_ptr<ExpandableSegment> es;
    for (;;) {
      es = std::make_unique<ExpandableSegment>(memory_, device_, stream, want, chunk,
                                               pool.is_small);
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
  if (!cand->mapped && !map_block(cand, std::min(size, cand->size), ahead, max_chunk)) {
    pool.unmapped.insert(cand);
    return nullptr;
  }
  while (cand->size < size) {
    Block* nb = cand->next;
    take(nb);
    if (!nb->mapped && !map_block(nb, std::min(size - cand->size, nb->size), ahead, max_chunk)) {
      pool.unmapped.insert(nb);
      insert_free(pool, cand);  // failure: the mapped part goes back to the pool
      return nullptr;
    }
    merge(cand, nb);
  }
  // A run mapped up to a free mapped block (a hole that page moves or empty_cache left above
  // the unmapped range) joins it, as free neighbours always do: else finish_alloc's split
  // leaves the tail beside the hole, two free blocks best fit cannot use together.
  if (Block* nb = cand->next; nb && nb->mapped && nb->is_free()) {
    erase_free(pool, nb);
    merge(cand, nb);
  }
  return cand;
}

bool DeviceAllocator::map_block(Block* b, std::size_t size, std::size_t ahead,
                                std::size_t max_chunk) {
  // Maps the unit-rounded prefix of unmapped block b, plus up to `ahead` bytes more when the
  // block goes on (up to a kMapAhead boundary), with chunks of at most max_chunk (the last
  // may round up past that, within b and the budget's room); the rest stays unmapped.
  ExpandableSegment& es = *b->expandable;
  const std::size_t unit = es.unit_bytes();
  std::size_t bytes = std::min(b->size, (size + unit - 1) / unit * unit);
  if (ahead >= unit && bytes < b->size) {
    const std::size_t end = b->ptr + bytes - es.base;
    const std::size_t to = (end + kMapAhead - 1) / kMapAhead * kMapAhead;
    const std::size_t extra = std::min(to - end, ahead) / unit * unit;
    bytes = std::min(b->size, bytes + extra);
  }
  auto& spares = es.small ? spare_small_ : spare_large_;
  // The memory-fraction limit's room for new chunks (spares are reserved already). map()
  // keeps to it exactly; `fresh`, the least that must be created, rejects early, and near
  // the limit unit chunks are planned at once (a big last chunk could round past it).
  const std::size_t max_new = limit_room();
  std::size_t spare_total = 0;
  for (const ExpandableSegment::Spare& sp : spares) spare_total += sp.bytes;
  // Pages mapped ahead never push a request past the limit (PerProcessFractionCapsReserved:
  // 40 MiB under a 64 MiB cap failed when 80 MiB were to be mapped ahead).
  const std::size_t needed = std::min(b->size, (size + unit - 1) / unit * unit);
  std::size_t fresh = bytes > spare_total ? bytes - spare_total : 0;
  if (fresh > max_new && bytes > needed) {
    bytes -= std::min(bytes - needed, (fresh - max_new + unit - 1) / unit * unit);
    fresh = bytes > spare_total ? bytes - spare_total : 0;
  }
  if (fresh > max_new) return false;
  if (max_chunk > unit && fresh + max_chunk > max_new) max_chunk = unit;
  std::size_t from_spares = 0;
  // The last chunk may round up past `bytes`, but only into the room the footprint budget
  // leaves (`ahead`): rounding past the budget made kv_generate 1.065 (64 MiB chunks); within
  // it, the round-up saves calls (varbatch_train 1069 -> 995 driver calls).
  const std::uintptr_t lim =
      std::min(b->ptr + b->size, b->ptr + std::max(bytes, (size + unit - 1) / unit * unit +
                                                              ahead / unit * unit));
  // (A spare bigger than a place's alignment allows cannot fill it: spare_total is only an
  // estimate, so map() checks the room itself.)
  std::uintptr_t end =
      es.map(b->ptr, bytes, lim, max_chunk, max_new, spares, vm_calls_, &from_spares);
  // Out of device memory (or limit room) with big chunks: unit chunks may still fit (and
  // round less).
  if (end == 0 && max_chunk > unit)
    end = es.map(b->ptr, bytes, lim, unit, max_new, spares, vm_calls_, &from_spares);
  // Still out of memory with pages mapped ahead: the request alone may fit (a nearly full
  // device raised out-of-memory for 16 MiB with 40 MiB free: test PartialMapFailureRollsBack).
  if (end == 0 && bytes > needed) {
    bytes = needed;
    end = es.map(b->ptr, bytes, b->ptr + bytes, unit, max_new, spares, vm_calls_, &from_spares);
  }
  if (end == 0) return false;
  bytes = end - b->ptr;
  if (bytes < b->size) {
    Block* rest = split_at(b, end);
    b->pool->unmapped.insert(rest);
  }
  b->mapped = true;
  spare_bytes_ -= from_spares;
  stats_.pages_mapped(b->pool->is_small, bytes - from_spares, 1);
  if (allocator_events_wanted()) note_event("segment_map", b->ptr, bytes, b->stream, nullptr);
  return true;
}

std::size_t DeviceAllocator::unmap_free_pages(Block* b, bool keep_handles) {
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
  d.keep_handles = keep_handles;
  d.bytes = es.detach(mid->ptr, mid->size, d.chunks);
  mid->releasing = true;
  const std::size_t bytes = d.bytes;
  deferred_.push_back(std::move(d));
  return bytes;
}

void DeviceAllocator::finish_unmap(const Deferred& d) {
  // Both locks held; the chunks of d.unmapping are unmapped now (and destroyed unless kept
  // as spares for the allocation that moved them).
  Block* mid = d.unmapping;
  BlockPool& pool = *mid->pool;
  if (d.keep_handles) {
    // Exported chunks were destroyed (run_deferred): only the others become spares.
    auto& spares = pool.is_small ? spare_small_ : spare_large_;
    std::size_t kept = 0;
    for (const auto& c : d.chunks) {
      if (c.fd >= 0) continue;
      spares.push_back(ExpandableSegment::Spare{c.handle, c.bytes});
      kept += c.bytes;
    }
    spare_bytes_ += kept;
    stats_.pages_unmapped(pool.is_small, d.bytes - kept, 1);  // spares: still reserved
  } else {
    stats_.pages_unmapped(pool.is_small, d.bytes, 1);
  }
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
