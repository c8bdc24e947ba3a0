// Device caching allocator: allocation / free / record_stream / cache release paths.
// See device_allocator.hpp for the design.
#include "memory/device_allocator.hpp"
#include "memory/pluggable.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cudakit/error.hpp"
#include "memory/expandable_segment.hpp"
#include "memory/history.hpp"

namespace cudakit::memory {

namespace {
// The stack of the allocator call in progress on this thread (history on): captured before
// any lock is taken, adopted into the recorder at the first event that keeps it.
struct PendingStack {
  CapturedStack cap;
  StackRecord* record = nullptr;
  bool is_free = false;
  std::uintptr_t ptr = 0;  // the pointer being freed
  std::uint64_t ticks = 0;  // timestamp of this call's events
};
// initial-exec: one pointer of static TLS, read without a __tls_get_addr call (measured 4% of a
// recorded pair with the default model).
__attribute__((tls_model("initial-exec"))) thread_local PendingStack* t_pending = nullptr;

// Installs `p` as this thread's pending stack for the scope (history on only).
class PendingScope {
 public:
  PendingScope(PendingStack& p, const void* entry_frame, bool is_free, std::uintptr_t ptr) {
    if (!history_enabled()) return;
    p.is_free = is_free;
    p.ptr = ptr;
    capture_stack(p.cap, entry_frame, is_free);
    t_pending = &p;
    active_ = true;
  }
  ~PendingScope() {
    if (active_) t_pending = nullptr;
  }
  PendingScope(const PendingScope&) = delete;
  PendingScope& operator=(const PendingScope&) = delete;

 private:
  bool active_ = false;
};
}  // namespace

bool BlockAddrLess::operator()(const Block* a, const Block* b) const noexcept {
  if (a->stream != b->stream)
    return reinterpret_cast<std::uintptr_t>(a->stream) < reinterpret_cast<std::uintptr_t>(b->stream);
  return a->ptr < b->ptr;
}

DeviceAllocator::DeviceAllocator(int device, detail::Backend& backend, AllocatorConfig cfg)
    : device_(device),
      backend_(backend),
      cfg_(std::move(cfg)),
      small_(true, nullptr, &node_resource_),
      large_(false, nullptr, &node_resource_),
      active_(&node_resource_) {
  active_.reserve(4096);
  if (const char* q = std::getenv("CUDAKIT_ALLOC_QUICK_CACHE")) quick_enabled_ = q[0] != '0';
  total_memory_ = backend_.mem_get_info(device_).total;
  stats_.max_split_size =
      cfg_.max_split_size == SIZE_MAX ? -1 : static_cast<std::int64_t>(cfg_.max_split_size);
  fraction_ = cfg_.per_process_memory_fraction;
  limit_ = fraction_ >= 1.0 ? SIZE_MAX
                            : static_cast<std::size_t>(fraction_ * static_cast<double>(total_memory_));
}

// The registry's allocators are never destroyed (no device calls at exit). Instances made
// directly (tests, the replay tool) return their cached memory here; live blocks leak.
DeviceAllocator::~DeviceAllocator() {
  if (detail::is_shutting_down()) return;
  try {
    AllLock lock(mutex_, fast_lock_);
    quick_flush();
    synchronize_and_free_events();
    release_cached();
    for (detail::EventHandle e : spare_events_) backend_.event_destroy(e);
  } catch (...) {
  }
  for (Block* b : spare_blocks_) delete b;
  spare_blocks_.clear();
}

Block* DeviceAllocator::new_block() {
  if (!spare_blocks_.empty()) {
    Block* b = spare_blocks_.back();
    spare_blocks_.pop_back();
    return b;
  }
  return new Block();
}

void DeviceAllocator::recycle(Block* b) {
  auto uses = std::move(b->stream_uses);
  uses.clear();
  *b = Block();
  b->stream_uses = std::move(uses);
  spare_blocks_.push_back(b);
}

std::size_t DeviceAllocator::round_size(std::size_t size) const {
  if (size < kMinBlockSize) return kMinBlockSize;
  unsigned div = cfg_.divisions_for(size);
  if (div > 1 && size > kMinBlockSize * div) {
    // Round up to the next of `div` equal steps between powers of two (torch's
    // roundup_power2_divisions), limiting the number of distinct sizes.
    std::size_t pow2 = std::size_t(1) << (63 - __builtin_clzll(size));
    if (pow2 == size) return size;
    std::size_t step = pow2 / div;
    std::size_t r = (size + step - 1) / step * step;
    return (r + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
  }
  return (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

std::size_t DeviceAllocator::allocation_size(std::size_t size) const {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

BlockPool& DeviceAllocator::pool_for(std::size_t size, detail::StreamHandle stream) {
  if (!routes_.empty()) {
    // Most recent route wins (nested use_mem_pool).
    for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
      if (!it->filter || it->filter(stream)) {
        PrivatePool& p = *pools_.at(it->pool);
        return size <= kSmallSize ? p.small : p.large;
      }
    }
  }
  return size <= kSmallSize ? small_ : large_;
}

Block* DeviceAllocator::get_free_block(BlockPool& pool, std::size_t size,
                                       detail::StreamHandle stream) {
  Block* b = pool.blocks.best_fit(stream, size);
  if (!b) return nullptr;
  // Oversize blocks are kept whole for large requests (max_split_size semantics).
  if (size < cfg_.max_split_size && b->size >= cfg_.max_split_size) return nullptr;
  if (size >= cfg_.max_split_size && b->size >= size + cfg_.max_non_split_rounding) return nullptr;
  pool.blocks.erase(b);
  return b;
}

bool DeviceAllocator::would_exceed_limit(std::size_t bytes) const {
  return static_cast<std::size_t>(stats_.reserved_bytes[0].current) + bytes > limit_;
}

Block* DeviceAllocator::alloc_segment(BlockPool& pool, std::size_t size, std::size_t alloc_size,
                                      detail::StreamHandle stream) {
  if (would_exceed_limit(alloc_size)) return nullptr;
  PluggedAllocator* source = pool.owner ? pool.owner->source.get() : nullptr;
  void* p = nullptr;
  if (pool.owner) {
    // Private pools (graph capture, MemPool) may grow while a capture is live: relaxed mode
    // allows the device allocation on this thread, as torch's cudaMallocMaybeCapturing. Safe:
    // the segment is never freed while a graph may still replay into it.
    detail::ThreadCaptureModeGuard relaxed(backend_, detail::CaptureMode::relaxed);
    p = source ? source->allocate(alloc_size, device_, stream)
               : backend_.mem_alloc(device_, alloc_size);
  } else {
    p = backend_.mem_alloc(device_, alloc_size);
  }
  if (!p) return nullptr;
  ++stats_.num_device_alloc;
  Block* b = new_block();
  b->ptr = reinterpret_cast<std::uintptr_t>(p);
  b->size = alloc_size;
  b->stream = stream;
  b->pool = &pool;
  b->segment_id = next_segment_id_++;
  segment_heads_.insert(b);
  stat_update(stats_.segment, pool.is_small, 1);
  stat_update(stats_.reserved_bytes, pool.is_small, static_cast<std::int64_t>(alloc_size));
  reserved_hwm_ = std::max(reserved_hwm_, static_cast<std::size_t>(stats_.reserved_bytes[0].current));
  if (alloc_size >= cfg_.max_split_size) {
    stats_.oversize_segments.current++;
    stats_.oversize_segments.allocated++;
    stats_.oversize_segments.peak =
        std::max(stats_.oversize_segments.peak, stats_.oversize_segments.current);
  }
  trace("segment_alloc", b->ptr, alloc_size, stream, nullptr);
  (void)size;
  return b;
}

Block* DeviceAllocator::malloc_async(std::size_t size, detail::StreamHandle stream) {
  // backend:cudaMallocAsync — the driver's pool does the caching; we keep the bookkeeping
  // (stats, snapshots, record_stream) so the rest of cudakit works unchanged.
  void* p = would_exceed_limit(size) ? nullptr : backend_.mem_alloc_async(device_, size, stream);
  if (!p) {
    ++stats_.num_alloc_retries;
    synchronize_and_free_events();
    backend_.device_synchronize(device_);
    p = would_exceed_limit(size) ? nullptr : backend_.mem_alloc_async(device_, size, stream);
  }
  if (!p) raise_oom(size, size, stream);
  ++stats_.num_device_alloc;
  Block* b = new_block();
  b->ptr = reinterpret_cast<std::uintptr_t>(p);
  b->size = size;
  b->stream = stream;
  b->pool = size <= kSmallSize ? &small_ : &large_;
  b->async = true;
  b->uncached = true;
  stat_update(stats_.segment, b->pool->is_small, 1);
  stat_update(stats_.reserved_bytes, b->pool->is_small, static_cast<std::int64_t>(size));
  return b;
}

void DeviceAllocator::free_async(Block* b) {
  // Stream uses: the free is ordered after their work by making the allocation stream wait.
  for (detail::StreamHandle s : b->stream_uses) {
    detail::EventHandle e = backend_.event_create(device_, detail::kEventDisableTiming);
    backend_.event_record(e, s);
    backend_.stream_wait_event(b->stream, e);
    backend_.event_destroy(e);
  }
  backend_.mem_free_async(reinterpret_cast<void*>(b->ptr), b->stream);
  ++stats_.num_device_free;
  const bool small = b->pool->is_small;
  account_free_completed(b, small);
  stat_update(stats_.segment, small, -1);
  stat_update(stats_.reserved_bytes, small, -static_cast<std::int64_t>(b->size));
  if (allocator_events_wanted()) trace("free_completed", b->ptr, b->requested, b->stream, b);
  drop_stack(b);
  recycle(b);
}

bool DeviceAllocator::quick_fast_path_ok() const noexcept {
  return quick_enabled_ && cfg_.backend != AllocatorConfig::Backend::driver_async &&
         caching_enabled();
}

void DeviceAllocator::account_alloc(Block* b, bool small, std::size_t orig_size) noexcept {
  const auto bytes = static_cast<std::int64_t>(b->size);
  stat_update(stats_.allocation, small, 1);
  stat_update(stats_.active, small, 1);
  stat_update(stats_.allocated_bytes, small, bytes);
  stat_update(stats_.active_bytes, small, bytes);
  stat_update(stats_.requested_bytes, small, static_cast<std::int64_t>(orig_size));
  if (b->size >= cfg_.max_split_size) {
    stats_.oversize_allocations.current++;
    stats_.oversize_allocations.allocated++;
    stats_.oversize_allocations.peak =
        std::max(stats_.oversize_allocations.peak, stats_.oversize_allocations.current);
  }
  allocated_now_.store(stats_.allocated_bytes[0].current, std::memory_order_relaxed);
}

// The caller gave the block back (it is no longer allocated).
void DeviceAllocator::account_free_requested(Block* b, bool small) noexcept {
  stat_update(stats_.allocation, small, -1);
  stat_update(stats_.allocated_bytes, small, -static_cast<std::int64_t>(b->size));
  stat_update(stats_.requested_bytes, small, -static_cast<std::int64_t>(b->requested));
  if (b->size >= cfg_.max_split_size) stats_.oversize_allocations.current--;
  allocated_now_.store(stats_.allocated_bytes[0].current, std::memory_order_relaxed);
}

// The block is no longer in use by any stream (torch's "active" stats).
void DeviceAllocator::account_free_completed(Block* b, bool small) noexcept {
  stat_update(stats_.active, small, -1);
  stat_update(stats_.active_bytes, small, -static_cast<std::int64_t>(b->size));
}

// free_requested + free_completed accounting of a parked block.
void DeviceAllocator::account_free(Block* b, bool small) noexcept {
  account_free_requested(b, small);
  account_free_completed(b, small);
}

Block* DeviceAllocator::quick_take(std::size_t size, std::size_t orig_size,
                                   detail::StreamHandle stream) {
  std::lock_guard g(fast_lock_);
  // Pool routes and pending record_stream events need the full path (routing decisions,
  // and reuse order after events complete).
  if (!routes_.empty() || !pending_.empty()) return nullptr;
  QuickSlot& q = quick_[quick_index(stream, size)];
  if (q.n == 0 || q.size != size || q.stream != stream) return nullptr;
  Block* b = q.blocks[--q.n];
  if (--quick_blocks_ == 0) quick_any_parked_.store(false, std::memory_order_relaxed);
  ++quick_hits_;
  quick_bytes_ -= b->size;
  b->parked = false;
  b->requested = orig_size;
  account_alloc(b, b->pool->is_small, orig_size);
  if (allocator_events_wanted()) trace("alloc", b->ptr, orig_size, stream, b);
  return b;
}

Block* DeviceAllocator::live_block(const void* ptr) const {
  auto it = active_.find(reinterpret_cast<std::uintptr_t>(ptr));
  return it == active_.end() || it->second->parked ? nullptr : it->second;
}

void DeviceAllocator::make_room_in_quick_cache(std::size_t incoming) {
  // A full quick cache holds blocks nobody asked for again: give them back so later frees
  // can park (otherwise stale big blocks would pin the budget and every free pays twice).
  if (quick_blocks_ >= kQuickMaxBlocks || quick_bytes_ + incoming > kQuickBudget) quick_flush();
}

int DeviceAllocator::quick_put(void* ptr) {
  std::lock_guard g(fast_lock_);
  Block* b = live_block(ptr);
  if (!b) return 0;
  if (b->uncached || b->async || b->pool->owner || !b->stream_uses.empty()) return -1;
  if (quick_bytes_ + b->size > kQuickBudget || quick_blocks_ >= kQuickMaxBlocks) return -1;
  // A large block that would merge with a free neighbour goes back to the pool: parking it would
  // leave the free space in pieces, and best-fit would then split other blocks or grow
  // (measured: vit_train 1.097 -> 1.129, varlen_infer 2.33 -> 2.57 before this check).
  // Small-pool blocks (<= 1 MiB) are exempt: their segments are 2 MiB, so the effect on
  // reserved memory is bounded and they are the allocations that need the fast path most.
  if (!b->pool->is_small &&
      ((b->prev && !b->prev->allocated) || (b->next && !b->next->allocated))) {
    return -1;
  }
  QuickSlot& q = quick_[quick_index(b->stream, b->size)];
  if (q.n == 0) {
    q.stream = b->stream;
    q.size = b->size;
  } else if (q.size != b->size || q.stream != b->stream || q.n == kQuickDepth) {
    return -1;
  }
  q.blocks[q.n++] = b;
  ++quick_blocks_;
  quick_bytes_ += b->size;
  quick_any_parked_.store(true, std::memory_order_relaxed);
  if (++quick_parks_ == kQuickWindow) {
    if (quick_hits_ < kQuickMinHits) {
      quick_pause_ = kQuickPause;
      quick_paused_.store(true, std::memory_order_relaxed);
    }
    quick_parks_ = quick_hits_ = 0;
  }
  account_free(b, b->pool->is_small);
  if (allocator_events_wanted()) {
    trace("free_requested", b->ptr, b->requested, b->stream, b);
    trace("free_completed", b->ptr, b->requested, b->stream, b);
  }
  drop_stack(b);
  b->parked = true;
  return 1;
}

void DeviceAllocator::quick_flush() {
  if (quick_blocks_ == 0) return;
  for (QuickSlot& q : quick_) {
    while (q.n > 0) {
      Block* b = q.blocks[--q.n];
      b->parked = false;
      active_.erase(b->ptr);
      b->allocated = false;
      free_block(b, /*stats_done=*/true);
    }
  }
  quick_blocks_ = 0;
  quick_bytes_ = 0;
  quick_any_parked_.store(false, std::memory_order_relaxed);
}

Block* DeviceAllocator::malloc(std::size_t orig_size, detail::StreamHandle stream) {
  PendingStack pending;
  PendingScope scope(pending, __builtin_frame_address(0), /*is_free=*/false, 0);
  if (quick_any_parked_.load(std::memory_order_relaxed) && quick_fast_path_ok()) {
    if (Block* b = quick_take(round_size(orig_size), orig_size, stream)) return b;
  }
  AllLock lock(mutex_, fast_lock_);
  if (cfg_.backend == AllocatorConfig::Backend::driver_async) {
    Block* b = malloc_async(orig_size, stream);
    b->allocated = true;
    b->requested = orig_size;
    active_.emplace(b->ptr, b);
    account_alloc(b, b->pool->is_small, orig_size);
    if (allocator_events_wanted()) trace("alloc", b->ptr, orig_size, stream, b);
    return b;
  }
  if (!pending_.empty()) process_events();
  const std::size_t size = round_size(orig_size);
  BlockPool& pool = pool_for(size, stream);
  const bool caching = caching_enabled();
  Block* b = caching ? get_free_block(pool, size, stream) : nullptr;
  if (!b && quick_blocks_ > 0) {
    // Parked blocks go back (merging with their neighbours) before the allocator grows.
    quick_flush();
    if (caching) b = get_free_block(pool, size, stream);
  }
  if (!b) {
    if (cfg_.garbage_collection_threshold > 0 && caching) garbage_collect();
    const std::size_t alloc_size = caching ? allocation_size(size)
                                           : (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
    auto try_alloc = [&]() -> Block* {
      if (cfg_.expandable_segments && caching && !pool.owner) {
        return alloc_expandable(pool, size, stream);
      }
      return alloc_segment(pool, size, alloc_size, stream);
    };
    b = try_alloc();
    if (!b) {
      // Free cached blocks that can satisfy the request, then everything, then retry.
      ++stats_.num_alloc_retries;
      if (release_available(pool, size)) b = try_alloc();
      if (!b) {
        synchronize_and_free_events();
        release_cached();
        b = try_alloc();
      }
      if (!b && !pool.owner) {
        // Last resort: cached blocks of pools created with use_on_oom=True.
        for (auto& [id, p] : pools_) {
          if (!p->use_on_oom) continue;
          BlockPool& alt = size <= kSmallSize ? p->small : p->large;
          if ((b = get_free_block(alt, size, stream))) {
            if (b->is_split()) {
              stat_update(stats_.inactive_split, alt.is_small, -1);
              stat_update(stats_.inactive_split_bytes, alt.is_small,
                          -static_cast<std::int64_t>(b->size));
            }
            break;
          }
        }
        if (b) {
          ++stats_.num_alloc_retries;
          return finish_alloc(b, *b->pool, size, orig_size, stream);
        }
      }
      if (!b) raise_oom(orig_size, alloc_size, stream);
    }
    if (!caching) b->uncached = true;
  } else if (b->is_split()) {
    stat_update(stats_.inactive_split, pool.is_small, -1);
    stat_update(stats_.inactive_split_bytes, pool.is_small, -static_cast<std::int64_t>(b->size));
  }
  return finish_alloc(b, pool, size, orig_size, stream);
}

Block* DeviceAllocator::finish_alloc(Block* b, BlockPool& pool, std::size_t size,
                                     std::size_t orig_size, detail::StreamHandle stream) {

  // Split off the tail when it is worth keeping.
  const std::size_t remaining = b->size - size;
  const bool no_split = pool.owner && pool.owner->no_split;
  const bool split = !b->uncached && !no_split &&
                     (pool.is_small || b->expandable
                          // Expandable: slivers merge back with their neighbours whatever
                          // their size, so splitting them off costs no fragmentation.
                          ? remaining >= kMinBlockSize
                          : (size < cfg_.max_split_size && remaining > kSmallSize));
  if (split) {
    Block* rest = new_block();
    rest->ptr = b->ptr + size;
    rest->size = remaining;
    rest->stream = stream;
    rest->pool = &pool;
    rest->prev = b;
    rest->next = b->next;
    rest->expandable = b->expandable;
    rest->mapped = b->mapped;
    rest->segment_id = b->segment_id;
    if (rest->next) rest->next->prev = rest;
    b->next = rest;
    b->size = size;
    pool.blocks.insert(rest);
    stat_update(stats_.inactive_split, pool.is_small, 1);
    stat_update(stats_.inactive_split_bytes, pool.is_small, static_cast<std::int64_t>(remaining));
  }

  b->allocated = true;
  b->requested = orig_size;
  active_.emplace(b->ptr, b);
  if (pool.owner) ++pool.owner->live_blocks;
  account_alloc(b, pool.is_small, orig_size);
  if (allocator_events_wanted()) trace("alloc", b->ptr, orig_size, stream, b);
  return b;
}

bool DeviceAllocator::free(void* ptr) {
  PendingStack pending;
  PendingScope scope(pending, __builtin_frame_address(0), /*is_free=*/true,
                     reinterpret_cast<std::uintptr_t>(ptr));
  if (!quick_paused_.load(std::memory_order_relaxed) && quick_fast_path_ok()) {
    const int r = quick_put(ptr);
    if (r >= 0) return r == 1;
  }
  AllLock lock(mutex_, fast_lock_);
  if (quick_pause_ > 0 && --quick_pause_ == 0) quick_paused_.store(false, std::memory_order_relaxed);
  auto it = active_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == active_.end() || it->second->parked) return false;
  make_room_in_quick_cache(it->second->size);
  Block* b = it->second;
  active_.erase(it);
  b->allocated = false;
  account_free_requested(b, b->pool->is_small);
  if (b->pool->owner) --b->pool->owner->live_blocks;
  if (allocator_events_wanted()) trace("free_requested", b->ptr, b->requested, b->stream, b);

  if (b->async) {
    free_async(b);
    return true;
  }
  if (!b->stream_uses.empty()) {
    // Reuse must wait for the other streams' work enqueued so far.
    for (detail::StreamHandle s : b->stream_uses) {
      detail::EventHandle e;
      if (!spare_events_.empty()) {
        e = spare_events_.back();
        spare_events_.pop_back();
      } else {
        e = backend_.event_create(device_, detail::kEventDisableTiming);
      }
      backend_.event_record(e, s);
      ++b->event_count;
      pending_.emplace_back(e, b);
    }
    b->stream_uses.clear();
    return true;
  }
  free_block(b);
  return true;
}

void DeviceAllocator::merge(Block* dst, Block* src) {
  // src is a free neighbour of dst; absorb it. Only a segment's first block can be a head
  // (the cheap test spares a hash lookup on almost every merge).
  if (src == dst->prev && !src->prev && !src->expandable && segment_heads_.erase(src)) {
    segment_heads_.insert(dst);
  }
  if (src == dst->prev) {
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  dst->size += src->size;
  if (src->expandable && src->expandable->first == src) src->expandable->first = dst;
  recycle(src);
}

void DeviceAllocator::free_block(Block* b, bool stats_done) {
  BlockPool& pool = *b->pool;
  const bool small = pool.is_small;
  if (!stats_done) {
    account_free_completed(b, small);
    if (allocator_events_wanted()) trace("free_completed", b->ptr, b->requested, b->stream, b);
  }
  drop_stack(b);
  b->requested = 0;

  if (b->uncached) {
    // Caching disabled: the block is its own segment; give it straight back.
    release_segment(b);
    return;
  }
  std::int64_t split_delta_n = 0, split_delta_b = 0;
  for (Block* nb : {b->prev, b->next}) {
    if (!nb || nb->allocated || nb->event_count > 0 || nb->mapped != b->mapped) continue;
    if (nb->mapped) {
      pool.blocks.erase(nb);
    } else {
      pool.unmapped.erase(nb);
    }
    split_delta_n -= 1;
    split_delta_b -= static_cast<std::int64_t>(nb->size);
    merge(b, nb);
  }
  if (b->mapped) {
    pool.blocks.insert(b);
  } else {
    pool.unmapped.insert(b);
  }
  if (b->is_split() && b->mapped) {
    split_delta_n += 1;
    split_delta_b += static_cast<std::int64_t>(b->size);
  }
  if (split_delta_n) stat_update(stats_.inactive_split, small, split_delta_n);
  if (split_delta_b) stat_update(stats_.inactive_split_bytes, small, split_delta_b);
}

void DeviceAllocator::process_events() {
  // Called with the lock held, only when something is pending.
  std::size_t keep = 0;
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    auto [e, b] = pending_[i];
    if (!backend_.event_query(e)) {
      pending_[keep++] = pending_[i];
      continue;
    }
    spare_events_.push_back(e);
    if (--b->event_count == 0) free_block(b);
  }
  pending_.resize(keep);
}

void DeviceAllocator::synchronize_and_free_events() {
  for (auto [e, b] : pending_) {
    backend_.event_synchronize(e);
    spare_events_.push_back(e);
    if (--b->event_count == 0) free_block(b);
  }
  pending_.clear();
}

void DeviceAllocator::release_segment(Block* head) {
  // `head` spans a whole (non-expandable) segment and is free; not in any free set.
  BlockPool& pool = *head->pool;
  if (allocator_events_wanted()) trace("segment_free", head->ptr, head->size, head->stream, nullptr);
  if (pool.owner && pool.owner->source) {
    pool.owner->source->free(reinterpret_cast<void*>(head->ptr));
  } else {
    backend_.mem_free(device_, reinterpret_cast<void*>(head->ptr));
  }
  ++stats_.num_device_free;
  stat_update(stats_.segment, pool.is_small, -1);
  stat_update(stats_.reserved_bytes, pool.is_small, -static_cast<std::int64_t>(head->size));
  if (head->size >= cfg_.max_split_size) stats_.oversize_segments.current--;
  segment_heads_.erase(head);
  recycle(head);
}

void DeviceAllocator::release_pool_blocks(BlockPool& pool) {
  for (Block* b : pool.blocks.blocks()) {
    if (b->is_split() && !b->expandable) continue;
    pool.blocks.erase(b);
    if (b->expandable) {
      unmap_free_pages(b);
    } else {
      release_segment(b);
    }
  }
}

bool DeviceAllocator::release_available(BlockPool& pool, std::size_t size) {
  // Releases one cached unsplit block >= size, or smallest-first blocks until `size`
  // bytes were released (torch's release_available_cached_blocks).
  if (cfg_.expandable_segments && !pool.owner) {
    release_cached();
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
    pool.blocks.erase(*fit);
    release_segment(*fit);
    return true;
  }
  std::size_t released = 0;
  for (auto it = candidates.rbegin(); it != candidates.rend() && released < size; ++it) {
    released += (*it)->size;
    pool.blocks.erase(*it);
    release_segment(*it);
  }
  return true;
}

void DeviceAllocator::release_cached(bool) {
  release_pool_blocks(small_);
  release_pool_blocks(large_);
  for (auto& [id, p] : pools_) {
    release_pool_blocks(p->small);
    release_pool_blocks(p->large);
  }
  // Drop pools nobody owns once they are empty.
  for (auto it = pools_.begin(); it != pools_.end();) {
    PrivatePool& p = *it->second;
    if (p.use_count <= 0 && p.live_blocks == 0 && p.small.blocks.empty() &&
        p.large.blocks.empty()) {
      it = pools_.erase(it);
    } else {
      ++it;
    }
  }
}

void DeviceAllocator::garbage_collect() {
  const double threshold = cfg_.garbage_collection_threshold * static_cast<double>(
      limit_ == SIZE_MAX ? total_memory_ : limit_);
  if (static_cast<double>(stats_.reserved_bytes[0].current) <= threshold) return;
  // Release whole cached segments, largest first, until under the threshold.
  for (BlockPool* pool : {&large_, &small_}) {
    std::vector<Block*> v;
    for (Block* b : pool->blocks.blocks())
      if (!b->is_split() && !b->expandable) v.push_back(b);
    std::sort(v.begin(), v.end(), [](Block* a, Block* b) { return a->size > b->size; });
    for (Block* b : v) {
      if (static_cast<double>(stats_.reserved_bytes[0].current) <= threshold) return;
      pool->blocks.erase(b);
      release_segment(b);
    }
  }
}

void DeviceAllocator::empty_cache() {
  AllLock lock(mutex_, fast_lock_);
  quick_flush();
  synchronize_and_free_events();
  release_cached();
}

bool DeviceAllocator::owns(const void* ptr) {
  AllLock lock(mutex_, fast_lock_);
  return live_block(ptr) != nullptr;
}

bool DeviceAllocator::info(const void* ptr, AllocationInfo& out) {
  AllLock lock(mutex_, fast_lock_);
  const Block* b = live_block(ptr);
  if (!b) return false;
  out.device = device_;
  out.size = b->size;
  out.requested = b->requested;
  out.stream = StreamRef::from_handle(b->stream, device_);
  return true;
}

std::uintptr_t DeviceAllocator::segment_base(const void* ptr) {
  AllLock lock(mutex_, fast_lock_);
  const Block* b = live_block(ptr);
  if (!b) return 0;
  if (b->expandable)
    throw NotSupportedError("IPC export of memory in an expandable segment is not supported: "
                            "set CUDAKIT_ALLOC_CONF=expandable_segments:False in the exporting "
                            "process");
  while (b->prev) b = b->prev;
  return b->ptr;
}

bool DeviceAllocator::record_stream(void* ptr, detail::StreamHandle stream) {
  AllLock lock(mutex_, fast_lock_);
  Block* b = live_block(ptr);
  if (!b) return false;
  if (stream == b->stream) return true;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end())
    b->stream_uses.push_back(stream);
  return true;
}

MemoryStats DeviceAllocator::stats() {
  AllLock lock(mutex_, fast_lock_);
  // Parked blocks go back first so the pool-shape statistics (inactive_split, ...) are
  // exactly torch's; the allocated/active counters are exact either way.
  quick_flush();
  return stats_;
}

void DeviceAllocator::reset_peak_stats() {
  AllLock lock(mutex_, fast_lock_);
  for (MemoryStat* arr : {stats_.allocation, stats_.segment, stats_.active, stats_.inactive_split,
                          stats_.allocated_bytes, stats_.reserved_bytes, stats_.active_bytes,
                          stats_.inactive_split_bytes, stats_.requested_bytes})
    for (int i = 0; i < kNumStatPools; ++i) arr[i].peak = arr[i].current;
  stats_.oversize_allocations.peak = stats_.oversize_allocations.current;
  stats_.oversize_segments.peak = stats_.oversize_segments.current;
}

void DeviceAllocator::reset_accumulated_stats() {
  AllLock lock(mutex_, fast_lock_);
  for (MemoryStat* arr : {stats_.allocation, stats_.segment, stats_.active, stats_.inactive_split,
                          stats_.allocated_bytes, stats_.reserved_bytes, stats_.active_bytes,
                          stats_.inactive_split_bytes, stats_.requested_bytes})
    for (int i = 0; i < kNumStatPools; ++i) arr[i].allocated = arr[i].freed = 0;
  stats_.oversize_allocations.allocated = stats_.oversize_allocations.freed = 0;
  stats_.oversize_segments.allocated = stats_.oversize_segments.freed = 0;
  stats_.num_alloc_retries = stats_.num_ooms = stats_.num_sync_all_streams = 0;
  stats_.num_device_alloc = stats_.num_device_free = 0;
}

void DeviceAllocator::set_memory_fraction(double f) {
  if (!(f >= 0.0 && f <= 1.0))
    throw ValueError("set_per_process_memory_fraction: fraction " + std::to_string(f) +
                     " is out of range: pass a number in [0, 1]");
  AllLock lock(mutex_, fast_lock_);
  fraction_ = f;
  limit_ = f >= 1.0 ? SIZE_MAX : static_cast<std::size_t>(f * static_cast<double>(total_memory_));
}

double DeviceAllocator::memory_fraction() {
  AllLock lock(mutex_, fast_lock_);
  return fraction_;
}

namespace {
std::string fmt_bytes(std::size_t n) {
  char buf[64];
  const double d = static_cast<double>(n);
  if (n >= kGiB) std::snprintf(buf, sizeof buf, "%.2f GiB", d / double(kGiB));
  else if (n >= kMiB) std::snprintf(buf, sizeof buf, "%.2f MiB", d / double(kMiB));
  else if (n >= 1024) std::snprintf(buf, sizeof buf, "%.2f KiB", d / 1024.0);
  else std::snprintf(buf, sizeof buf, "%zu bytes", n);
  return buf;
}
}  // namespace

void DeviceAllocator::raise_oom(std::size_t size, std::size_t alloc_size,
                                detail::StreamHandle stream) {
  ++stats_.num_ooms;
  detail::MemInfo mi{};
  try {
    mi = backend_.mem_get_info(device_);
  } catch (...) {
  }
  const auto allocated = static_cast<std::size_t>(stats_.allocated_bytes[0].current);
  const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes[0].current);
  const std::size_t cached = reserved - allocated;
  std::string msg = "CUDA out of memory. Tried to allocate " + fmt_bytes(size) + ". GPU " +
                    std::to_string(device_) + " has a total capacity of " + fmt_bytes(mi.total) +
                    " of which " + fmt_bytes(mi.free) + " is free. ";
  if (mi.total >= mi.free) {
    msg += "This process has " + fmt_bytes(reserved) +
           " reserved by cudakit (other users of the device: " +
           fmt_bytes(mi.total - mi.free > reserved ? mi.total - mi.free - reserved : 0) + "). ";
  }
  msg += "Of the reserved memory " + fmt_bytes(allocated) + " is allocated and " +
         fmt_bytes(cached) + " is reserved but unallocated";
  if (!pending_.empty()) msg += "; " + std::to_string(pending_.size()) + " blocks await streams";
  msg += ". ";
  if (limit_ != SIZE_MAX) {
    msg += "The per-process memory fraction limits this process to " + fmt_bytes(limit_) +
           " (set_per_process_memory_fraction). ";
  }
  if (!cfg_.expandable_segments && cached > alloc_size / 4 && cached > 20 * kMiB) {
    msg += "Reserved-but-unallocated memory is large: set CUDAKIT_ALLOC_CONF="
           "expandable_segments:True to avoid fragmentation. ";
  } else {
    msg += "Free tensors you no longer need, reduce the batch size, or call empty_cache() in "
           "other processes sharing the device. ";
  }
  if (allocator_events_wanted()) trace("oom", 0, size, stream, nullptr);
  throw OutOfMemoryError(msg, device_, size, mi.free, mi.total);
}

void DeviceAllocator::trace(const char* action, std::uintptr_t addr, std::size_t size,
                            detail::StreamHandle stream, Block* b) {
  // [profiler tracer] the observer sees every event; history's part below runs only when
  // history is on (segment_alloc reached it unconditionally before the observer existed).
  if (AllocatorObserver obs = g_allocator_observer.load(std::memory_order_relaxed)) {
    obs(AllocatorEvent{action, device_, addr, size, stats_.allocated_bytes[0].current,
                       stats_.reserved_bytes[0].current});
    if (!history_enabled() && std::strcmp(action, "segment_alloc") != 0) return;
  }
  // torch's rules: the allocation stack is kept on the block (context >= "state") and shown
  // on the alloc entry (>= "alloc"); free entries show the free's own stack with "all", else
  // the allocation stack; a deferred free_completed (record_stream) shows the allocation's.
  const int level = history_context_level();
  PendingStack* p = t_pending;
  auto op_stack = [&]() -> StackRecord* {
    if (!p || !p->cap.valid) return nullptr;
    if (!p->record) p->record = history_.adopt(p->cap);
    return p->record;
  };
  StackRecord* shown = nullptr;
  if (b && action[0] == 'a') {  // "alloc"
    StackRecord* s = level >= kContextState ? op_stack() : nullptr;
    HistoryRecorder::retain(s);
    drop_stack(b);
    b->stack = s;
    shown = level >= kContextAlloc ? s : nullptr;
  } else if (b) {  // "free_requested" / "free_completed"
    const bool own = p && p->is_free && level >= kContextAll &&
                     (action[5] == 'r' || p->ptr == b->ptr);
    shown = own ? op_stack() : b->stack;
  } else if (level >= kContextAlloc) {  // segment_* / oom: the stack of the call causing it
    shown = op_stack();
  }
  history_.record(action, addr, size, stream, shown, p ? &p->ticks : nullptr);
}

std::vector<TraceEntry> DeviceAllocator::history_traces() {
  AllLock lock(mutex_, fast_lock_);
  HistoryRecorder::ContextCache contexts;
  return history_.traces(contexts);
}

// ---- pools ----

void DeviceAllocator::create_pool(MempoolId id, bool no_split, bool use_on_oom,
                                  std::shared_ptr<PluggedAllocator> source) {
  AllLock lock(mutex_, fast_lock_);
  auto it = pools_.find(id);
  if (it != pools_.end()) {
    ++it->second->use_count;
    return;
  }
  auto p = std::make_unique<PrivatePool>(id, &node_resource_);
  p->no_split = no_split;
  p->use_on_oom = use_on_oom;
  p->source = std::move(source);
  pools_.emplace(id, std::move(p));
}

void DeviceAllocator::release_pool(MempoolId id) {
  AllLock lock(mutex_, fast_lock_);
  auto it = pools_.find(id);
  if (it == pools_.end()) return;
  if (--it->second->use_count > 0) return;
  quick_flush();
  PrivatePool& p = *it->second;
  release_pool_blocks(p.small);
  release_pool_blocks(p.large);
  if (p.live_blocks == 0 && p.small.blocks.empty() && p.large.blocks.empty()) pools_.erase(it);
}

int DeviceAllocator::pool_use_count(MempoolId id) {
  AllLock lock(mutex_, fast_lock_);
  auto it = pools_.find(id);
  return it == pools_.end() ? 0 : it->second->use_count;
}

void DeviceAllocator::begin_allocate_to_pool(MempoolId id,
                                             std::function<bool(detail::StreamHandle)> filter) {
  AllLock lock(mutex_, fast_lock_);
  if (!pools_.count(id))
    throw ValueError("allocate to pool (" + std::to_string(id.first) + ", " +
                     std::to_string(id.second) + "): no such pool on device " +
                     std::to_string(device_));
  routes_.push_back(PoolRoute{id, std::move(filter)});
}

void DeviceAllocator::end_allocate_to_pool(MempoolId id) {
  AllLock lock(mutex_, fast_lock_);
  for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
    if (it->pool == id) {
      routes_.erase(std::next(it).base());
      return;
    }
  }
}

}  // namespace cudakit::memory
