// A private pool's allocation state: which of its blocks are live, and a checkpoint of its
// block layout that can be put back. torch's CUDA graph trees (torch.compile's
// mode="reduce-overhead") need both: replaying a graph runs only device work, so before a new
// graph is recorded into the shared pool, the allocator's bookkeeping is reset to what it was
// when the parent graph's recording ended (cudagraph_trees.py: "checkpoint pool state").
//
// Private pools never use expandable segments (grow()), so a pool's memory is whole segments
// found through segment_heads_.
#include <algorithm>

#include "cudakit/error.hpp"
#include "memory/device_allocator.hpp"
#include "memory/raw.hpp"

namespace cudakit::memory {
namespace {
std::string pool_name(MempoolId id) {
  return "(" + std::to_string(id.first) + ", " + std::to_string(id.second) + ")";
}
}  // namespace

PrivatePool& DeviceAllocator::existing_pool(MempoolId id, const char* fn) {
  auto it = pools_.find(id);
  if (it == pools_.end())
    throw ValueError(std::string(fn) + ": no pool " + pool_name(id) + " on device " +
                     std::to_string(device_) + " (pass a graph's pool() or a MemPool's id)");
  return *it->second;
}

std::vector<Block*> DeviceAllocator::pool_segment_heads(const PrivatePool& p) const {
  std::vector<Block*> heads;
  for (Block* h : segment_heads_)
    if (h->pool->owner == &p) heads.push_back(h);
  std::sort(heads.begin(), heads.end(), [](Block* a, Block* b) { return a->ptr < b->ptr; });
  return heads;
}

std::vector<std::uintptr_t> DeviceAllocator::pool_live_allocations(MempoolId id) {
  Locked lock(*this);
  const PrivatePool& p = existing_pool(id, "pool_live_allocations");
  std::vector<std::uintptr_t> out;
  for (Block* h : pool_segment_heads(p))
    for (Block* b = h; b; b = b->next)
      if (b->allocated) out.push_back(b->ptr);
  return out;
}

PoolState DeviceAllocator::pool_state(MempoolId id) {
  Locked lock(*this);
  const PrivatePool& p = existing_pool(id, "get_pool_state");
  PoolState st;
  st.device = device_;
  st.pool = id;
  for (Block* h : pool_segment_heads(p)) {
    PoolSegmentState seg;
    seg.address = h->ptr;
    for (Block* b = h; b; b = b->next) {
      // A block awaiting events is not allocated: nobody may use it once they complete.
      // (a free block's requested size too: snapshots show it, as torch's)
      seg.blocks.push_back({b->ptr, b->size, b->allocated, b->requested,
                            b->allocated ? b->client : 0});
      seg.size += b->size;
    }
    st.segments.push_back(std::move(seg));
  }
  return st;
}

PoolStateDelta DeviceAllocator::restore_pool_state(const PoolState& st) {
  const char* fn = "set_pool_state";
  Locked lock(*this);
  PrivatePool& p = existing_pool(st.pool, fn);
  // Check everything before changing anything.
  const std::vector<Block*> heads = pool_segment_heads(p);
  for (Block* h : heads)
    for (Block* b = h; b; b = b->next)
      if (b->event_count > 0)
        throw ValueError(std::string(fn) + ": a block of pool " + pool_name(st.pool) +
                         " still waits for record_stream events (synchronize the streams "
                         "that used it, allocate once so its events are processed, then "
                         "retry)");
  std::vector<Block*> targets;
  for (const PoolSegmentState& seg : st.segments) {
    auto it = std::find_if(heads.begin(), heads.end(),
                           [&](Block* h) { return h->ptr == seg.address; });
    std::size_t total = 0;
    if (it != heads.end())
      for (Block* b = *it; b; b = b->next) total += b->size;
    std::size_t recorded = 0;
    for (const PoolBlockState& bs : seg.blocks) recorded += bs.size;
    if (it == heads.end() || total != seg.size || recorded != seg.size || seg.blocks.empty())
      throw ValueError(std::string(fn) + ": the segment at " + std::to_string(seg.address) +
                       " of the state is not a segment of pool " + pool_name(st.pool) +
                       " any more (was the pool's memory released by empty_cache() after its "
                       "last owner went?); take a new state");
    targets.push_back(*it);
  }

  PoolStateDelta delta;
  // 1. Every block allocated in the pool now is freed.
  for (Block* h : heads) {
    std::vector<Block*> live;
    for (Block* b = h; b; b = b->next)
      if (b->allocated) live.push_back(b);
    for (Block* b : live) {
      delta.freed.push_back(b->ptr);
      active_.erase(b->ptr);
      b->allocated = false;
      b->free_epoch = ++free_epoch_;
      b->stream_uses.clear();  // the state's owner vouches for the streams (as torch)
      stats_.free_requested(b->pool->is_small, b->size, b->requested, oversize(b->size), b->client);
      if (allocator_events_wanted())
        note_event("free_requested", b->ptr, b->requested, b->stream, b);
      free_block(b);  // merges: each segment becomes one free block
    }
  }
  // 2. Each recorded segment is carved as recorded (its head is now one free block).
  for (std::size_t i = 0; i < st.segments.size(); ++i) {
    Block* cur = nullptr;
    for (Block* h : segment_heads_)
      if (h->ptr == st.segments[i].address && h->pool->owner == &p) cur = h;
    BlockPool& pool = *cur->pool;
    erase_free(pool, cur);
    const auto& blocks = st.segments[i].blocks;
    for (std::size_t k = 0; k < blocks.size(); ++k) {
      const PoolBlockState& bs = blocks[k];
      Block* rest = k + 1 < blocks.size() ? split_at(cur, cur->ptr + bs.size) : nullptr;
      if (bs.allocated) {
        cur->allocated = true;
        cur->requested = bs.requested ? bs.requested : bs.size;
        cur->client = static_cast<std::uint8_t>(bs.client);
        active_.insert(cur->ptr, cur);
        ++p.live_blocks;
        stats_.alloc(pool.is_small, cur->size, cur->requested, oversize(cur->size), cur->client);
        if (allocator_events_wanted()) note_event("alloc", cur->ptr, cur->requested, cur->stream, cur);
        delta.allocated.push_back(cur->ptr);
      } else {
        cur->requested = bs.requested;
        insert_free(pool, cur);
      }
      cur = rest;
    }
  }
  return delta;
}

}  // namespace cudakit::memory

namespace cudakit {

std::vector<std::uintptr_t> pool_live_allocations(MempoolId id, int device) {
  return memory::device_allocator(memory::resolve_alloc_device(device)).pool_live_allocations(id);
}

PoolState get_pool_state(MempoolId id, int device) {
  return memory::device_allocator(memory::resolve_alloc_device(device)).pool_state(id);
}

PoolStateDelta set_pool_state(const PoolState& state) {
  return memory::device_allocator(memory::resolve_alloc_device(state.device))
      .restore_pool_state(state);
}

}  // namespace cudakit
