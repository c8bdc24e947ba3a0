// Device caching allocator, the core: allocation, free, split/merge, record_stream events and
// the quick-cache paths. See device_allocator.hpp for the design, locks.hpp for the lock rule.
#include "memory/device_allocator.hpp"

#include "core/capture_gate.hpp"

#include <algorithm>
#include <optional>

#include "backend/device_ops.hpp"
#include "backend/relaxed_capture.hpp"
#include "backend/graph_ops.hpp"
#include "backend/lifetime.hpp"
#include "backend/memory_ops.hpp"
#include "backend/stream_ops.hpp"
#include "core/capture_gate.hpp"
#include "cudakit/error.hpp"
#include "memory/pluggable.hpp"

namespace cudakit::memory {

bool BlockAddrLess::operator()(const Block* a, const Block* b) const noexcept {
  if (a->stream != b->stream)
    return reinterpret_cast<std::uintptr_t>(a->stream) < reinterpret_cast<std::uintptr_t>(b->stream);
  return a->ptr < b->ptr;
}

DeviceAllocator::DeviceAllocator(int device, detail::DeviceOps& devices, detail::MemoryOps& memory,
                                 detail::StreamOps& streams, detail::GraphOps& graphs,
                                 AllocatorConfig cfg)
    : device_(device),
      devices_(devices),
      memory_(memory),
      streams_(streams),
      graphs_(graphs),
      cfg_(std::move(cfg)),
      async_backend_(cfg_.backend == AllocatorConfig::Backend::driver_async),
      mutex_(cfg_.device_mutex_spin),
      small_(true, nullptr, &node_resource_),
      large_(false, nullptr, &node_resource_) {
  quick_on_.store(cfg_.quick_cache, std::memory_order_relaxed);
  for (std::size_t i = 0; i < divisions_.size(); ++i)
    divisions_[i].store(cfg_.roundup_power2_divisions[i], std::memory_order_relaxed);
  total_memory_ = devices_.mem_get_info(device_).total;
  if (cfg_.expandable_segments) {
    const std::size_t g = std::max<std::size_t>(memory_.vm_granularity(device_), 1);
    vm_page_ = (kSmallBuffer + g - 1) / g * g;
  }
  max_request_ = std::min(total_memory_, kMaxRequest);
  stats_.set_max_split_size(cfg_.max_split_size);
  fraction_ = cfg_.per_process_memory_fraction;
  limit_ = fraction_ >= 1.0 ? SIZE_MAX
                            : static_cast<std::size_t>(fraction_ * static_cast<double>(total_memory_));
  register_live_allocator(this);  // destroyed streams reach it (stream_retire.cpp)
}

// The registry's allocators are never destroyed (no device calls at exit). Instances made
// directly (tests, the replay tool) return their cached memory here; live blocks leak.
DeviceAllocator::~DeviceAllocator() {
  unregister_live_allocator(this);
  if (detail::is_shutting_down()) return;
  try {
    Locked lock(*this);
    quick_flush();
    wait_for_pending_events(lock);
    release_cached(lock);
    lock.unlock();
    drop_completed_fences(/*all=*/true);  // their events are destroyed with the spares
    for (detail::EventHandle e : spare_events_) streams_.event_destroy(e);
  } catch (...) {
  }
  for (Block* b : spare_blocks_) delete b;
  spare_blocks_.clear();
  // Expandable segments' unmapped ranges stay as blocks after release_cached (the address
  // reservation outlives its pages); nothing else owns them.
  for (BlockPool* pool : {&small_, &large_}) {
    for (Block* b : pool->unmapped) delete b;
    pool->unmapped.clear();
  }
}

DeviceAllocator::Locked::~Locked() {
  if (!held_) return;
  try {
    unlock();
  } catch (...) {
  }
}

void DeviceAllocator::Locked::unlock_and_run_deferred() {
  std::vector<Deferred> work;
  work.swap(a_.deferred_);
  a_.fast_lock_.unlock();
  a_.mutex_.unlock();
  held_ = false;
  if (!work.empty()) a_.run_deferred(work);
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
  // size <= kMaxRequest (malloc checked it): none of the additions below can overflow.
  if (size < kMinBlockSize) return kMinBlockSize;
  const std::size_t mb = size / kMiB;  // bucket: floor(log2(size in MiB)), as divisions_for
  const unsigned div =
      divisions_[mb == 0 ? 0 : 63 - __builtin_clzll(mb)].load(std::memory_order_relaxed);
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

BlockPool& DeviceAllocator::routed_pool(std::size_t size, detail::StreamHandle stream) {
  // Most recent route wins (nested use_mem_pool).
  for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
    if (!it->filter || it->filter(stream)) {
      PrivatePool& p = *pools_.at(it->pool);
      return size <= kSmallSize ? p.small : p.large;
    }
  }
  return size <= kSmallSize ? small_ : large_;
}

Block* DeviceAllocator::get_free_block(BlockPool& pool, std::size_t size,
                                       detail::StreamHandle stream) {
  Block* b = pool.blocks.best_fit(stream, size);
  if (!b) return nullptr;
  // Oversize blocks are kept whole for large requests (max_split_size semantics). Both
  // sizes are <= 2^62 + the rounding (<= 2^62): the sum cannot overflow.
  if (size < cfg_.max_split_size && b->size >= cfg_.max_split_size) return nullptr;
  if (size >= cfg_.max_split_size && b->size >= size + cfg_.max_non_split_rounding) return nullptr;
  erase_free(pool, b);
  return b;
}

bool DeviceAllocator::would_exceed_limit(std::size_t bytes) const {
  const std::size_t reserved = stats_.reserved_bytes();
  return bytes > limit_ || reserved > limit_ - bytes;
}

Block* DeviceAllocator::alloc_segment(BlockPool& pool, std::size_t alloc_size,
                                      detail::StreamHandle stream) {
  if (would_exceed_limit(alloc_size)) return nullptr;
  PluggedAllocator* source = pool.owner ? pool.owner->source.get() : nullptr;
  // Runs in relaxed capture mode (grow()). Private pools' segments are never freed while a
  // graph may still replay into them (release_unowned_pools).
  void* p = source ? source->allocate(alloc_size, device_, stream)
                   : memory_.mem_alloc(device_, alloc_size);
  if (!p) return nullptr;
  Block* b = new_block();
  b->ptr = reinterpret_cast<std::uintptr_t>(p);
  b->size = alloc_size;
  b->stream = stream;
  b->pool = &pool;
  b->segment_id = next_segment_id_++;
  segment_heads_.insert(b);
  stats_.segment_created(pool.is_small, alloc_size, oversize(alloc_size));
  if (allocator_events_wanted()) note_event("segment_alloc", b->ptr, alloc_size, stream, nullptr);
  return b;
}

// ---- quick cache ----

bool DeviceAllocator::quick_enabled() const noexcept {
  return quick_on_.load(std::memory_order_relaxed) && !async_backend_ && caching_enabled();
}

Block* DeviceAllocator::quick_take(std::size_t orig_size, std::size_t size,
                                   detail::StreamHandle stream, std::uint8_t client) {
  std::lock_guard g(fast_lock_);
  // Pool routes and pending record_stream events need the full path (routing decisions,
  // and reuse order after events complete).
  if (!routes_.empty() || !pending_.empty() || !capture_deferred_.empty()) return nullptr;
  Block* b = quick_.take(stream, size);
  if (!b) return nullptr;
  b->requested = orig_size;
  b->client = client;
  stats_.alloc(b->pool->is_small, b->size, orig_size, oversize(b->size), client);
  if (allocator_events_wanted()) note_event("alloc", b->ptr, orig_size, stream, b);
  return b;
}

Block* DeviceAllocator::live_block(const void* ptr) const {
  Block* b = active_.find(reinterpret_cast<std::uintptr_t>(ptr));
  return b && !b->parked ? b : nullptr;
}

int DeviceAllocator::quick_put(void* ptr) {
  std::lock_guard g(fast_lock_);
  Block* b = live_block(ptr);
  if (!b) return 0;
  if (b->uncached || b->async || b->pool->owner || !b->stream_uses.empty()) return -1;
  // Only small-pool blocks (<= 1 MiB) are parked: their segments are 2 MiB, so the effect on
  // reserved memory is bounded, and they are the allocations that need the fast path most.
  // A parked large block keeps the free space around it in pieces: best-fit then splits other
  // blocks or grows (quick_cache.hpp has the replay measurements that removed large blocks).
  if (!b->pool->is_small) return -1;
  if (!quick_.park(b)) return -1;
  b->free_epoch = ++free_epoch_;
  stats_.free_requested(/*small=*/true, b->size, b->requested, oversize(b->size), b->client);
  stats_.free_completed(/*small=*/true, b->size);
  if (allocator_events_wanted()) note_free_pair(b);
  trace_.drop_stack(b);
  return 1;
}

void DeviceAllocator::quick_flush() {
  quick_.drain([this](Block* b) {
    active_.erase(b->ptr);
    b->allocated = false;
    free_block(b, /*stats_done=*/true);
  });
}

// ---- allocation ----

Block* DeviceAllocator::malloc(std::size_t orig_size, detail::StreamHandle stream,
                               std::uint8_t client) {
  if (orig_size > max_request_) reject_impossible(orig_size, stream);
  PendingStack pending;
  PendingScope scope(pending, __builtin_frame_address(0), /*is_free=*/false, 0);
  // Rounded before locking: the critical section is what 8 allocating threads queue on
  // (issue 31). round_size reads the divisions as relaxed atomics (a concurrent settings
  // change gives the old or the new rounding, both valid).
  const std::size_t size = round_size(orig_size);
  // Only small-pool blocks are parked (quick_put): a larger request never finds one there.
  if (orig_size <= kSmallSize && quick_.maybe_parked() && quick_enabled()) {
    if (Block* b = quick_take(orig_size, size, stream, client)) return b;
  }
  Locked lock(*this);
  if (async_backend_) return malloc_async(lock, orig_size, stream, client);
  note_stream(stream);
  // No event is queried while a capture may be underway (torch's rule: querying an event
  // recorded in a capture is an error, and one outside it may be a forbidden call then);
  // frees deferred by capture get their events once it is over.
  if (!capture_underway()) {
    if (!capture_deferred_.empty()) flush_capture_deferred(lock);
    if (!pending_.empty()) process_events();
  } else if (!capture_markers_.empty() && stream) {
    reclaim_in_capture(stream);  // torch's free_safe_blocks_in_capture
  }
  if (!routes_.empty()) check_pool_awake(pool_for(size, stream), orig_size);
  Block* b = take_cached(size, stream);
  bool moving = false;
  if (!b) b = grow(size, stream, /*may_move=*/true, moving);
  if (!b && moving) {
    // Expandable pages are moving here: they are unmapped now, without the locks (locks.hpp),
    // and come back as spare handles before this allocation maps new ones (so the footprint
    // never holds both). Anything may have changed meanwhile: search again.
    lock.unlock();
    lock.lock();
    b = take_cached(size, stream);
    if (!b) b = grow(size, stream, /*may_move=*/false, moving);
  }
  if (!b) b = retry_after_release(lock, size, orig_size, stream);
  b = finish_alloc(b, size, orig_size, stream, client);
  // (use_sleep_pool routes allocations too, so capture_underway() cannot tell; any live
  // capture in the process is the conservative answer: core/capture_gate.hpp)
  if (b->pool->owner && b->pool->owner->sleep && detail::live_captures() > 0)
    b->pool->owner->sleep->captured_into = true;  // sleep_pool.hpp
  if (spare_bytes_) release_spares();  // destroyed by the unlock
  return b;
}

Block* DeviceAllocator::take_cached(std::size_t size, detail::StreamHandle stream) {
  BlockPool& pool = pool_for(size, stream);
  // Tagged pools always cache: their memory must stay in the segments sleep and wake manage.
  const bool caching = caching_enabled() || (pool.owner && pool.owner->sleep);
  Block* b = caching ? get_free_block(pool, size, stream) : nullptr;
  if (!b && !quick_.empty()) {
    // Parked blocks go back (merging with their neighbours) before the allocator grows.
    quick_flush();
    if (caching) b = get_free_block(pool, size, stream);
  }
  return b;
}

Block* DeviceAllocator::grow(std::size_t size, detail::StreamHandle stream, bool may_move,
                             bool& moving) {
  BlockPool& pool = pool_for(size, stream);
  const bool caching = caching_enabled() || (pool.owner && pool.owner->sleep);
  if (cfg_.garbage_collection_threshold > 0 && caching) garbage_collect();
  // A private pool grows while its capture is live, and so may the default pool for an
  // allocation on a capturing stream that the capture's filter does not route (torch's
  // cudaMallocMaybeCapturing): relaxed capture mode on this thread lets the device
  // allocation through; it enqueues no work, so nothing leaks into the capture. Another
  // thread's allocation for a stream that is not captured keeps the thread's mode: a
  // global-mode capture then refuses it, as CUDA and torch do (that is what global mode
  // is for). The legacy default stream is never asked (asking about it during a capture is
  // itself an error) and never captures; nor is a capture assumed when the driver declines
  // to describe the stream (a special handle during another stream's capture).
  bool relax = pool.owner != nullptr;
  if (!relax && stream) {
    try {
      relax = graphs_.stream_capture_status(stream, nullptr) != detail::CaptureStatus::none;
    } catch (const AcceleratorError&) {
    }
  }
  std::optional<detail::ThreadCaptureModeGuard> relaxed;
  if (relax) relaxed.emplace(graphs_, detail::CaptureMode::relaxed);
  Block* b = nullptr;
  // By default expandable segments serve the large pool only: small blocks (<= 1 MiB) keep
  // torch's 2 MiB segments, one cudaMalloc each instead of create + map + access (issue 27,
  // expandable_segment.hpp). expandable_segments:True, given, makes them expandable too, as
  // torch's key does (config.hpp: expandable_small).
  if (pool.owner && pool.owner->sleep) {
    b = alloc_sleep_segment(pool, size, stream);
  } else if (caching && grows_expandable(pool)) {
    b = alloc_expandable(pool, size, stream, may_move, moving);
  } else {
    b = alloc_segment(pool, caching ? allocation_size(size)
                                    : (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize,
                      stream);
  }
  if (b && !caching) b->uncached = true;
  return b;
}

Block* DeviceAllocator::retry_after_release(Locked& lock, std::size_t size,
                                            std::size_t orig_size, detail::StreamHandle stream) {
  // Each step releases memory with the locks dropped (locks.hpp), then retries against the
  // state as it is now: other threads may have freed, allocated or changed pools meanwhile.
  stats_.alloc_retry();
  auto attempt = [&]() -> Block* {
    Block* b = take_cached(size, stream);
    bool moving = false;
    return b ? b : grow(size, stream, /*may_move=*/false, moving);
  };
  // While a capture is underway nothing is waited for or freed but unowned pools (see
  // empty_cache()).
  const bool capturing = capture_underway();
  // 1. Cached blocks that can satisfy the request go back to the device.
  if (!capturing && release_available(lock, pool_for(size, stream), size)) {
    lock.unlock();  // runs the device frees
    lock.lock();
    if (Block* b = attempt()) return b;
  }
  // 2. Blocks awaiting record_stream events, then everything cached.
  if (capturing) {
    release_unowned_pools();
  } else {
    flush_capture_deferred(lock);
    wait_for_pending_events(lock);
    release_cached(lock);
  }
  lock.unlock();
  lock.lock();
  if (Block* b = attempt()) return b;
  // 3. Cached blocks of pools created with use_on_oom=True.
  if (!pool_for(size, stream).owner) {
    for (auto& [id, p] : pools_) {
      if (!p->use_on_oom || p->use_count <= 0) continue;  // a released pool lends nothing
      BlockPool& alt = size <= kSmallSize ? p->small : p->large;
      if (Block* b = get_free_block(alt, size, stream)) {
        stats_.alloc_retry();
        return b;
      }
    }
  }
  raise_oom(orig_size, allocation_size(size), stream);
}

Block* DeviceAllocator::finish_alloc(Block* b, std::size_t size, std::size_t orig_size,
                                     detail::StreamHandle stream, std::uint8_t client) {
  BlockPool& pool = *b->pool;
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
    Block* rest = split_at(b, b->ptr + size);
    rest->stream = stream;
    insert_free(pool, rest);
  }
  b->allocated = true;
  b->requested = orig_size;
  b->client = client;
  active_.insert(b->ptr, b);
  if (pool.owner) ++pool.owner->live_blocks;
  stats_.alloc(pool.is_small, b->size, orig_size, oversize(b->size), client);
  if (allocator_events_wanted()) note_event("alloc", b->ptr, orig_size, stream, b);
  return b;
}

// ---- free ----

bool DeviceAllocator::free(void* ptr) {
  PendingStack pending;
  PendingScope scope(pending, __builtin_frame_address(0), /*is_free=*/true,
                     reinterpret_cast<std::uintptr_t>(ptr));
  if (!quick_.paused() && quick_enabled()) {
    const int r = quick_put(ptr);
    if (r >= 0) return r == 1;
  }
  Locked lock(*this);
  quick_.count_slow_free();
  const std::size_t slot = active_.slot_of(reinterpret_cast<std::uintptr_t>(ptr));
  if (slot == ActiveMap::npos || active_.at(slot)->parked) return false;
  Block* b = active_.at(slot);
  active_.erase_slot(slot);  // before quick_flush, whose erases move members between slots
  // A full quick cache holds blocks nobody asked for again: give them back so later frees
  // can park (otherwise stale blocks would fill it and every free would pay twice).
  if (!quick_.has_room()) quick_flush();
  b->allocated = false;
  b->free_epoch = ++free_epoch_;
  stats_.free_requested(b->pool->is_small, b->size, b->requested, oversize(b->size), b->client);
  if (allocator_events_wanted()) note_event("free_requested", b->ptr, b->requested, b->stream, b);

  if (b->async) {
    AsyncFree work = free_async(b);
    lock.unlock();
    finish_free_async(work);
    return true;
  }
  if (!b->stream_uses.empty() && capture_underway()) {
    // An event recorded now on a capturing stream would be a captured event, which can
    // never be queried: the block waits in limbo (event_count 1 marks it busy) until no
    // capture is underway, and its events are recorded then (flush_capture_deferred), as
    // torch's needs_events_deferred_until_no_capture.
    b->event_count = 1;
    capture_deferred_.push_back(b);
    if (cfg_.graph_capture_record_stream_reuse) {
      std::vector<std::uint64_t> markers = capture_free_markers(b);
      if (!markers.empty()) capture_markers_.emplace(b, std::move(markers));
    }
    return true;
  }
  if (!b->stream_uses.empty()) {
    // Reuse must wait for the other streams' work enqueued so far. The events are created and
    // recorded with no allocator lock held: cuEventCreate takes a driver lock that a thread
    // inside cuMemFreeHost / cuCtxSynchronize holds while the device drains, and draining may
    // run a host function that frees memory here (a deadlock seen on the H200 by
    // test_memory_stress). Until its events are pending, the block is in limbo: not in
    // active_, not free (event_count > 0), so nothing can reuse or release it.
    std::vector<std::pair<detail::EventHandle, detail::StreamHandle>> marks;
    marks.reserve(b->stream_uses.size());
    for (detail::StreamHandle s : b->stream_uses) {
      detail::EventHandle e = nullptr;
      if (!spare_events_.empty()) {
        e = spare_events_.back();
        spare_events_.pop_back();
      }
      marks.emplace_back(e, s);
    }
    b->event_count = static_cast<int>(marks.size());
    b->stream_uses.clear();
    lock.unlock();
    record_free_events(b, marks);
    return true;
  }
  free_block(b);
  lock.unlock();  // an uncached block's segment goes back to the device here
  return true;
}

void DeviceAllocator::flush_capture_deferred(Locked& lock) {
  // Locks held, no capture underway. As free() does for a block used on other streams: the
  // events are taken under the locks and recorded without them.
  std::vector<Block*> blocks;
  blocks.swap(capture_deferred_);
  capture_markers_.clear();
  std::vector<std::vector<std::pair<detail::EventHandle, detail::StreamHandle>>> marks(
      blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    Block* b = blocks[i];
    for (detail::StreamHandle s : b->stream_uses) {
      detail::EventHandle e = nullptr;
      if (!spare_events_.empty()) {
        e = spare_events_.back();
        spare_events_.pop_back();
      }
      marks[i].emplace_back(e, s);
    }
    b->event_count = static_cast<int>(marks[i].size());  // replaces free()'s limbo marker
    b->stream_uses.clear();
  }
  lock.unlock();
  std::exception_ptr error;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    try {
      record_free_events(blocks[i], marks[i]);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  lock.lock();
  if (error) std::rethrow_exception(error);
}

void DeviceAllocator::record_free_events(
    Block* b, std::vector<std::pair<detail::EventHandle, detail::StreamHandle>>& marks) {
  // Locks not held (see free()). Events that cannot be recorded are dropped from the block's
  // count after the error: the block then frees when the recorded ones complete.
  std::exception_ptr error;
  std::size_t recorded = 0;
  for (auto& [e, s] : marks) {
    try {
      if (!e) e = streams_.event_create(device_, detail::kEventDisableTiming);
      streams_.event_record(e, s);
      ++recorded;
    } catch (...) {
      error = std::current_exception();
      break;
    }
  }
  Locked lock(*this);
  for (std::size_t i = 0; i < recorded; ++i) pending_.emplace_back(marks[i].first, b);
  for (std::size_t i = recorded; i < marks.size(); ++i) {
    if (marks[i].first) spare_events_.push_back(marks[i].first);
  }
  b->event_count -= static_cast<int>(marks.size() - recorded);
  if (b->event_count == 0) free_block(b);
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

void DeviceAllocator::free_block(Block* b, bool stats_done) {
  // b is no longer used by any stream: merge it with free neighbours into the free set.
  BlockPool& pool = *b->pool;
  if (!stats_done) {
    stats_.free_completed(pool.is_small, b->size);
    if (allocator_events_wanted()) note_event("free_completed", b->ptr, b->requested, b->stream, b);
  }
  if (pool.owner) --pool.owner->live_blocks;
  trace_.drop_stack(b);
  // b->requested stays: a free block shows the size last requested of it (b absorbs its
  // free neighbours below, so a merged block shows the last freed part's), as torch's
  // snapshots do; torch's test_memory_plots finds the freed tensor's size (65536) only there
  // once trace_plot(filter_freed=True) has dropped the trace's frees. Only allocated blocks'
  // requested sizes enter statistics and sums.

  if (b->uncached) {
    // Caching disabled: the block is its own segment; give it straight back.
    release_segment(b);
    return;
  }
  // The neighbours merged in leave the free set and the merged block enters it: one net
  // inactive-split update (as insert_free / erase_free would make, without three calls on
  // the hottest slow path).
  std::int64_t split_n = 0, split_bytes = 0;
  for (Block* nb : {b->prev, b->next}) {
    if (!nb || !nb->is_free() || nb->mapped != b->mapped) continue;
    if (nb->mapped) {
      pool.blocks.erase(nb);  // a neighbour is a piece of a split segment
      split_n -= 1;
      split_bytes -= static_cast<std::int64_t>(nb->size);
    } else {
      pool.unmapped.erase(nb);
    }
    merge(b, nb);
  }
  if (b->mapped) {
    pool.blocks.insert(b);
    if (b->is_split()) {
      split_n += 1;
      split_bytes += static_cast<std::int64_t>(b->size);
    }
  } else {
    pool.unmapped.insert(b);
  }
  if (split_n || split_bytes) stats_.inactive_split(pool.is_small, split_n, split_bytes);
}

void DeviceAllocator::process_events() {
  // Called with the locks held, only when something is pending. Queries never wait. Never
  // while this device captures (malloc's rule), but a capture on another device or of
  // another library may be live: then the queries (of events recorded outside it) run in
  // relaxed mode, where CUDA allows them (stream_retire.cpp, fence_done).
  detail::RelaxedCaptureScope relaxed(graphs_, detail::live_captures() != 0);
  std::size_t keep = 0;
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    auto [e, b] = pending_[i];
    if (!streams_.event_query(e)) {
      pending_[keep++] = pending_[i];
      continue;
    }
    spare_events_.push_back(e);
    if (--b->event_count == 0) free_block(b);
  }
  pending_.resize(keep);
}

// ---- queries and controls ----

bool DeviceAllocator::owns(const void* ptr) {
  Locked lock(*this);
  return live_block(ptr) != nullptr;
}

bool DeviceAllocator::info(const void* ptr, AllocationInfo& out) {
  Locked lock(*this);
  const Block* b = live_block(ptr);
  if (!b) return false;
  out.device = device_;
  out.size = b->size;
  out.requested = b->requested;
  out.stream = StreamRef::from_handle(b->stream, device_);
  return true;
}

std::uintptr_t DeviceAllocator::segment_base(const void* ptr, std::size_t* segment_size) {
  Locked lock(*this);
  const Block* b = live_block(ptr);
  if (!b) return 0;
  if (b->expandable)
    throw NotSupportedError("memory in an expandable segment has no segment allocation of "
                            "its own (ipc_export shares its chunks: share_expandable)");
  while (b->prev) b = b->prev;
  if (segment_size) {
    *segment_size = 0;
    for (const Block* x = b; x; x = x->next) *segment_size += x->size;
  }
  return b->ptr;
}

bool DeviceAllocator::share_expandable(const void* ptr, ExpandableShare& out) {
  Locked lock(*this);
  const Block* b = live_block(ptr);
  if (!b || !b->expandable) return false;
  ExpandableSegment& es = *b->expandable;
  out.va = es.chunk_start(b->ptr);
  out.chunks = es.share(b->ptr, b->size);
  return true;
}

bool DeviceAllocator::record_stream(void* ptr, detail::StreamHandle stream) {
  Locked lock(*this);
  Block* b = live_block(ptr);
  if (!b) return false;
  if (stream == b->stream) return true;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end())
    b->stream_uses.push_back(stream);
  return true;
}

MemoryStats DeviceAllocator::stats() {
  Locked lock(*this);
  // Parked blocks go back first so the pool-shape statistics (inactive_split, ...) are
  // exactly torch's; the allocated/active counters are exact either way.
  quick_flush();
  MemoryStats s = stats_.get();
  for (auto& [id, p] : pools_) {
    if (!p->sleep) continue;
    const SleepPool& sp = *p->sleep;
    s.sleep.pool_bytes += static_cast<std::int64_t>(sp.bytes);
    if (sp.state != SleepPool::State::awake && sp.state != SleepPool::State::sleeping)
      s.sleep.asleep_bytes += static_cast<std::int64_t>(sp.bytes);
    s.sleep.offloaded_bytes += static_cast<std::int64_t>(sp.host_bytes);
    s.sleep.num_sleeps += sp.num_sleeps;
    s.sleep.num_wake_ups += sp.num_wake_ups;
  }
  return s;
}

void DeviceAllocator::reset_peak_stats() {
  Locked lock(*this);
  stats_.reset_peak();
}

void DeviceAllocator::reset_accumulated_stats() {
  Locked lock(*this);
  stats_.reset_accumulated();
}

void DeviceAllocator::set_memory_fraction(double f) {
  if (!(f >= 0.0 && f <= 1.0))
    throw ValueError("set_per_process_memory_fraction: fraction " + std::to_string(f) +
                     " is out of range: pass a number in [0, 1]");
  Locked lock(*this);
  fraction_ = f;
  limit_ = f >= 1.0 ? SIZE_MAX : static_cast<std::size_t>(f * static_cast<double>(total_memory_));
}

double DeviceAllocator::memory_fraction() {
  Locked lock(*this);
  return fraction_;
}

AllocatorConfig DeviceAllocator::settings() {
  Locked lock(*this);
  AllocatorConfig c = cfg_;
  c.per_process_memory_fraction = fraction_;
  c.quick_cache = quick_on_.load(std::memory_order_relaxed);
  return c;
}

void DeviceAllocator::apply_settings(const AllocatorConfig& c) {
  Locked lock(*this);
  // expandable_segments and max_split_size_mb apply to later segments and requests, as in
  // torch: segments of both kinds coexist in a pool (every path that works on expandable
  // pages checks the block's own segment kind), and split decisions read the size per call.
  if (c.expandable_segments && !cfg_.expandable_segments && vm_page_ == kSmallBuffer) {
    const std::size_t g = std::max<std::size_t>(memory_.vm_granularity(device_), 1);
    vm_page_ = (kSmallBuffer + g - 1) / g * g;
  }
  cfg_.expandable_segments = c.expandable_segments;
  cfg_.expandable_small = c.expandable_small;
  if (c.max_split_size != cfg_.max_split_size) {
    cfg_.max_split_size = c.max_split_size;
    stats_.set_max_split_size(c.max_split_size);
    std::int64_t allocations = 0, segments = 0;
    active_.for_each([&](const Block* b) {
      if (!b->parked && b->allocated && !b->async && oversize(b->size)) ++allocations;
    });
    for (const Block* h : segment_heads_) {
      std::size_t n = 0;
      for (const Block* x = h; x; x = x->next) n += x->size;
      if (oversize(n)) ++segments;
    }
    stats_.recount_oversize(allocations, segments);
  }
  cfg_.garbage_collection_threshold = c.garbage_collection_threshold;
  cfg_.max_non_split_rounding = c.max_non_split_rounding;
  cfg_.roundup_power2_divisions = c.roundup_power2_divisions;
  for (std::size_t i = 0; i < divisions_.size(); ++i)
    divisions_[i].store(c.roundup_power2_divisions[i], std::memory_order_relaxed);
  cfg_.expandable_slack_div = c.expandable_slack_div;
  cfg_.expandable_max_chunk_mb = c.expandable_max_chunk_mb;
  cfg_.quick_cache = c.quick_cache;
  cfg_.pinned_use_host_register = c.pinned_use_host_register;
  cfg_.pinned_num_register_threads = c.pinned_num_register_threads;
  cfg_.pinned_use_background_threads = c.pinned_use_background_threads;
  cfg_.release_lock_on_device_malloc = c.release_lock_on_device_malloc;
  cfg_.graph_capture_record_stream_reuse = c.graph_capture_record_stream_reuse;
  cfg_.source = c.source;
  if (!c.quick_cache) quick_flush();
  quick_on_.store(c.quick_cache, std::memory_order_relaxed);
}

std::vector<TraceEntry> DeviceAllocator::history_traces() {
  Locked lock(*this);
  HistoryRecorder::ContextCache contexts;
  return trace_.recorder().traces(contexts);
}

}  // namespace cudakit::memory
