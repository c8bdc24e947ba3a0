// The device caching allocator (one instance per device).
//
// Design (why, not what):
//  * Stream-ordered like torch: a free block remembers the stream it was allocated on and is
//    only reused for that stream without synchronisation. record_stream() adds streams whose
//    work must finish first; their events are polled on the allocation path (waited for only
//    by empty_cache and the out-of-memory path, never under the locks: see locks.hpp).
//  * Best fit per (pool, stream): free blocks live in segregated size bins per stream
//    (free_index.hpp). Container nodes come from a per-device resource and Block objects are
//    recycled, so a steady-state alloc/free allocates nothing from the heap.
//  * Small (<= 1 MiB) and large pools are separate so small tensors never split large
//    segments (the main source of fragmentation in long runs).
//  * Expandable segments: one reserved virtual range per (pool, stream), backed chunk by
//    chunk with physical memory through the seam's vm_* calls; neighbouring blocks stay
//    mergeable across what would have been separate segments (expandable_segment.hpp).
//  * Pools (MemPool / graph capture) are general "routes": (private pool, stream filter).
//  * Pieces kept apart, RMM-adaptor style: the quick cache of exactly-sized freed blocks
//    (quick_cache.hpp), statistics accounting (stats.hpp), history recording
//    (alloc_trace.hpp), locks and the waiting rule (locks.hpp), block/pool data (block.hpp).
//    This file is the core: allocation, free, split/merge, record_stream events; the release
//    paths (empty_cache, out-of-memory, garbage collection) are in device_release.cpp, the
//    cudaMallocAsync backend in device_async.cpp, pools in pools.cpp.
//
// Sizes: a request above min(device memory, 2^62) is an OutOfMemoryError before any
// arithmetic, so no rounding or accounting below can overflow.
//
// Thread-safety: two locks per device (no global lock). `fast_lock_` (a spin lock held for a
// few dozen instructions) guards all state; the quick-cache hit paths take only it. Every
// other public method takes the device mutex and then the fast lock (Locked), so slow paths
// wait asleep on the mutex instead of spinning behind each other. No method waits for a
// stream, an event or the device, or calls a driver function that may, while holding either
// lock (locks.hpp has the rule and why): such waits and device-memory releases happen after
// unlocking, and the state is re-validated when the lock is taken again.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/device_ops.hpp"
#include "backend/graph_ops.hpp"
#include "backend/memory_ops.hpp"
#include "backend/stream_ops.hpp"
#include "cudakit/memory.hpp"
#include "memory/active_map.hpp"
#include "memory/alloc_trace.hpp"
#include "memory/block.hpp"
#include "memory/config.hpp"
#include "memory/expandable_segment.hpp"
#include "memory/locks.hpp"
#include "memory/oom_message.hpp"
#include "memory/quick_cache.hpp"
#include "memory/sleep_pool.hpp"
#include "memory/stats.hpp"

namespace cudakit::memory {

struct SegmentInfoBlock {
  std::uintptr_t address = 0;
  std::size_t size = 0, requested = 0;
  std::string state;  // "active_allocated" | "active_pending_free" | "inactive"
  std::shared_ptr<HistoryContext> context;
};
struct SegmentInfo {
  int device = 0;
  std::uintptr_t address = 0;
  std::size_t total_size = 0, allocated_size = 0, active_size = 0, requested_size = 0;
  detail::StreamHandle stream = nullptr;
  bool is_large = true, is_expandable = false;
  MempoolId owner{0, 0};
  std::string sleep_tag;  // segments of a tagged pool: its tag, and whether it is asleep
  bool asleep = false;
  std::vector<SegmentInfoBlock> blocks;
};

class DeviceAllocator {
 public:
  // The allocator calls four topics of the seam (memory; streams and events; devices; capture),
  // through references bound once here: no per-call lookup.
  DeviceAllocator(int device, detail::DeviceOps& devices, detail::MemoryOps& memory,
                  detail::StreamOps& streams, detail::GraphOps& graphs, AllocatorConfig cfg);
  // From the whole backend (detail::Backend derives from every topic), as tests build one,
  // without this header naming detail::Backend.
  template <class B>
    requires std::derived_from<B, detail::DeviceOps> && std::derived_from<B, detail::MemoryOps> &&
             std::derived_from<B, detail::StreamOps> && std::derived_from<B, detail::GraphOps>
  DeviceAllocator(int device, B& backend, AllocatorConfig cfg)
      : DeviceAllocator(device, backend, backend, backend, backend, std::move(cfg)) {}
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  int device() const noexcept { return device_; }

  // Returns a block of at least `size` bytes usable on `stream`, counted for `client` (a
  // MemoryClient). Throws OutOfMemoryError (statistics then unchanged but num_ooms), also for
  // sizes no device could hold.
  Block* malloc(std::size_t size, detail::StreamHandle stream, std::uint8_t client = 0);
  // Frees the block at `ptr`. Returns false when `ptr` is not a live allocation here.
  bool free(void* ptr);
  bool owns(const void* ptr);
  bool info(const void* ptr, AllocationInfo& out);
  // Base address of the device allocation (segment) holding live block `ptr`, or 0 if
  // `ptr` is not live here; its size in *segment_size when given. Throws NotSupportedError
  // for expandable segments (see share_expandable).
  std::uintptr_t segment_base(const void* ptr, std::size_t* segment_size = nullptr);
  // IPC export of live block `ptr` in an expandable segment (ipc.cpp): the physical chunks
  // covering the block, exported (ExpandableSegment::share), and `va`, the address of the
  // first. False when `ptr` is not a live block of an expandable segment here. The export
  // call runs under the locks (it does not wait for the device; the chunks must not be
  // detached meanwhile). Throws NotSupportedError when the backend cannot share them.
  struct ExpandableShare {
    std::uintptr_t va = 0;  // start of the first chunk
    std::vector<ExpandableSegment::SharedChunk> chunks;  // each with its size
  };
  bool share_expandable(const void* ptr, ExpandableShare& out);
  // `stream` (valid now, destroyed next by its owner: instrument/stream_lifetime.hpp) is
  // replaced in the noted streams by a fence event recorded on it. Never throws.
  void retire_stream(detail::StreamHandle stream) noexcept;
  // record_stream: reuse of ptr's block waits for `stream`'s current work. False if unknown.
  bool record_stream(void* ptr, detail::StreamHandle stream);

  void empty_cache();
  MemoryStats stats();
  std::int64_t allocated_bytes_now() const noexcept { return stats_.allocated_now(); }
  void reset_peak_stats();
  void reset_accumulated_stats();
  void set_memory_fraction(double f);
  double memory_fraction();
  std::vector<SegmentInfo> snapshot(std::optional<MempoolId> only_pool = std::nullopt);

  // The settings this allocator runs with (the fraction as currently set).
  AllocatorConfig settings();
  // Applies the live keys of `cfg` (config.hpp); the others must equal this allocator's.
  void apply_settings(const AllocatorConfig& cfg);

  // Pools.
  void create_pool(MempoolId id, bool no_split, bool use_on_oom,
                   std::shared_ptr<PluggedAllocator> source = nullptr);  // or add a reference
  void release_pool(MempoolId id);  // drop a reference; frees cached blocks when unused
  int pool_use_count(MempoolId id);
  void begin_allocate_to_pool(MempoolId id, std::function<bool(detail::StreamHandle)> filter);
  void end_allocate_to_pool(MempoolId id);

  // A private pool's allocation state (pool_state.cpp; cudakit/memory.hpp's
  // pool_live_allocations, get_pool_state, set_pool_state).
  std::vector<std::uintptr_t> pool_live_allocations(MempoolId id);
  PoolState pool_state(MempoolId id);
  PoolStateDelta restore_pool_state(const PoolState& state);

  // The trace ring in snapshot form (oldest first).
  std::vector<TraceEntry> history_traces();

  // Tagged pools (sleep_pool.cpp). create_sleep_pool makes the PrivatePool of `sp` (sp->id).
  // sleep_pool / wake_pool do one pool's transition (no-ops in the other states), waiting
  // and making their driver calls without the locks; the caller serialises them.
  void create_sleep_pool(SleepPool* sp);
  std::size_t sleep_pool(SleepPool& sp, bool offload, detail::StreamHandle stream);
  void wake_pool(SleepPool& sp, detail::StreamHandle stream);
  struct SleepInfo {
    std::size_t bytes = 0, allocated = 0;
    bool asleep = false, offloaded = false;
  };
  SleepInfo sleep_info(SleepPool& sp);
  // export_pool (pool_share.cpp): every chunk of the pool with its address and size; with
  // `export_fds` (the pool must be awake) exported too, the descriptors kept by the segment
  // while it stays mapped. pool_view asks without: addresses only, in any state.
  struct SleepShare {
    std::uintptr_t va = 0;
    std::size_t bytes = 0;
    int fd = -1;
  };
  std::vector<SleepShare> share_sleep_pool(SleepPool& sp, bool export_fds);

 private:
  // Work queued under the locks and run by Locked::unlock() once they are released: a
  // segment going back to the device (or its plug-in source), expandable chunks to unmap
  // (then `unmapping`, the `releasing` block covering them, is finished under the locks;
  // with keep_handles their physical memory becomes spares instead of being destroyed), or
  // spare handles to destroy.
  struct Deferred {
    void* segment = nullptr;
    std::shared_ptr<PluggedAllocator> source;
    Block* unmapping = nullptr;
    bool keep_handles = false;
    std::size_t bytes = 0;
    std::vector<ExpandableSegment::DetachedChunk> chunks;
    std::vector<detail::PhysMemHandle> destroy;
    bool destroy_small = false;
    // A tagged pool's segment to unmap and destroy; its range goes back to the pool after
    // (sleep_ok: the driver calls succeeded, so the range may be mapped again).
    SleepPool* sleep = nullptr;
    SleepSegment sleep_segment;
    bool sleep_ok = false;
  };
  // The slow-path lock: the device mutex, then the fast lock. unlock() releases both, then
  // runs the work deferred while they were held; the destructor unlocks if still held
  // (errors of deferred work are then dropped: destructors never throw).
  class Locked {
   public:
    explicit Locked(DeviceAllocator& a) : a_(a) { lock(); }
    ~Locked();
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;
    void lock() {
      a_.mutex_.lock();
      a_.fast_lock_.lock();
      held_ = true;
    }
    void unlock() {
      if (a_.deferred_.empty()) {
        a_.fast_lock_.unlock();
        a_.mutex_.unlock();
        held_ = false;
        return;
      }
      unlock_and_run_deferred();
    }

   private:
    void unlock_and_run_deferred();
    DeviceAllocator& a_;
    bool held_ = false;
  };

  // ---- allocation (device_allocator.cpp) ----
  Block* take_cached(std::size_t size, detail::StreamHandle stream);
  // Grows the pool for `size`. With an expandable pool over its footprint budget it may
  // instead queue free pages elsewhere for unmapping and set `moving` (may_move only): the
  // caller then unlocks (the unmaps run), relocks and calls again with may_move false.
  Block* grow(std::size_t size, detail::StreamHandle stream, bool may_move, bool& moving);
  Block* retry_after_release(Locked& lock, std::size_t size, std::size_t orig_size,
                             detail::StreamHandle stream);
  Block* finish_alloc(Block* b, std::size_t size, std::size_t orig_size,
                      detail::StreamHandle stream, std::uint8_t client);
  Block* new_block();
  void recycle(Block* b);
  // Inline for the common case (no route): malloc asks two or three times per allocation.
  BlockPool& pool_for(std::size_t size, detail::StreamHandle stream) {
    if (!routes_.empty()) [[unlikely]] return routed_pool(size, stream);
    return size <= kSmallSize ? small_ : large_;
  }
  BlockPool& routed_pool(std::size_t size, detail::StreamHandle stream);
  // Whether `pool` grows by expandable segments (caching allocations): the default pools do
  // when expandable_segments is on, the small one only with expandable_small (config.hpp);
  // private pools never.
  bool grows_expandable(const BlockPool& pool) const noexcept {
    return cfg_.expandable_segments && !pool.owner && (!pool.is_small || cfg_.expandable_small);
  }
  std::size_t round_size(std::size_t size) const;
  std::size_t allocation_size(std::size_t size) const;
  Block* get_free_block(BlockPool& pool, std::size_t size, detail::StreamHandle stream);
  Block* alloc_segment(BlockPool& pool, std::size_t alloc_size, detail::StreamHandle stream);
  bool would_exceed_limit(std::size_t bytes) const;
  // Bytes that may still be reserved under the memory fraction (0 when at or over it).
  std::size_t limit_room() const noexcept {
    const std::size_t reserved = stats_.reserved_bytes();
    return reserved >= limit_ ? 0 : limit_ - reserved;
  }
  bool oversize(std::size_t bytes) const noexcept { return bytes >= cfg_.max_split_size; }
  // Free-set membership with the inactive-split accounting that goes with it.
  void insert_free(BlockPool& pool, Block* b);
  void erase_free(BlockPool& pool, Block* b);
  void free_block(Block* b, bool stats_done = false);
  void merge(Block* dst, Block* src);
  Block* split_at(Block* x, std::uintptr_t at);
  void process_events();
  [[noreturn]] void reject_impossible(std::size_t size, detail::StreamHandle stream);

  // ---- quick cache (device_allocator.cpp) ----
  bool quick_enabled() const noexcept;
  Block* quick_take(std::size_t orig_size, std::size_t size, detail::StreamHandle stream,
                    std::uint8_t client);
  int quick_put(void* ptr);  // 1 parked, 0 not live here, -1 take the slow path
  void quick_flush();        // both locks held: parked blocks back to the free sets
  // fast_lock_ held: the live (allocated, not parked) block at `ptr`, or nullptr.
  Block* live_block(const void* ptr) const;

  // ---- release paths (device_release.cpp) ----
  // Waits (unlocked) for the record_stream events outstanding now, then frees their blocks.
  void wait_for_pending_events(Locked& lock);
  bool release_available(Locked& lock, BlockPool& pool, std::size_t size);
  void release_cached(Locked& lock);
  void release_pool_blocks(BlockPool& pool);
  PrivatePool& existing_pool(MempoolId id, const char* fn);  // ValueError if none
  std::vector<Block*> pool_segment_heads(const PrivatePool& p) const;  // address order
  void release_unowned_pools();  // cached blocks of pools with no owner left; empty ones go
  // torch's captures_underway: a capture or use_mem_pool routes allocations to a pool.
  bool capture_underway() const noexcept { return !routes_.empty(); }
  // Records the events of the frees deferred while a capture was underway (locks held; drops
  // and retakes them).
  void flush_capture_deferred(Locked& lock);
  // graph_capture_record_stream_reuse (capture_reuse.cpp), locks held. The free markers of
  // `b`: the capture frontiers of its allocation stream and of every stream that used it, or
  // nothing when one of them is not capturing (the block then waits for the capture's end).
  std::vector<std::uint64_t> capture_free_markers(const Block* b);
  // Frees the capture-deferred blocks of `stream` whose markers all precede the stream's
  // frontier in the graph: any work captured from now on comes after their last use.
  void reclaim_in_capture(detail::StreamHandle stream);
  void release_segment(Block* head);  // queues the device free (Deferred)
  void garbage_collect();
  void run_deferred(std::vector<Deferred>& work);
  // Moves expandable segments with nothing mapped out of expandable_ (locks held; destroying
  // them releases their address ranges: do it after unlocking).
  void take_empty_segments(std::vector<std::unique_ptr<ExpandableSegment>>& out);
  [[noreturn]] void raise_oom(std::size_t size, std::size_t alloc_size,
                              detail::StreamHandle stream);
  // What the out-of-memory diagnosis needs (oom_message.cpp); locks held.
  OomFacts oom_facts(std::size_t size, std::size_t alloc_size, detail::StreamHandle stream);

  // ---- tagged pools (sleep_pool.cpp) ----
  Block* alloc_sleep_segment(BlockPool& pool, std::size_t size, detail::StreamHandle stream);
  void check_pool_awake(BlockPool& pool, std::size_t size);  // throws for a non-awake pool
  // Unmaps and destroys a segment's chunks, closing exported descriptors (no lock held);
  // true when every call succeeded. Rethrows nothing: errors go to *error (the first).
  bool unmap_sleep_segment(SleepSegment& seg, std::exception_ptr* error);
  // Creates and maps the chunks of a segment (no lock held); false when out of memory.
  bool map_sleep_segment(SleepSegment& seg);
  PrivatePool* private_pool_of(const SleepPool& sp);  // locks held

  // ---- expandable segments (expandable_segment.cpp) ----
  Block* alloc_expandable(BlockPool& pool, std::size_t size, detail::StreamHandle stream,
                          bool may_move, bool& moving);
  bool map_block(Block* b, std::size_t size, std::size_t ahead, std::size_t max_chunk);
  std::size_t unmap_free_pages(Block* b, bool keep_handles);  // bytes queued for unmapping
  void finish_unmap(const Deferred& d);
  std::size_t compact_expandable(std::size_t want, const Block* keep_from,
                                 std::size_t keep_bytes);
  void release_expandable(Locked& lock);
  void release_spares();  // queues the destruction of unused spare handles
  std::size_t chunk_bytes(bool small) const noexcept;  // the unit of a pool kind
  std::size_t chunk_for(bool small, std::size_t pool_bytes) const noexcept;
  // Every stream this allocator has handed memory out on, and the fences of those destroyed
  // since (stream_retire.cpp): compact_expandable moves pages only while all of them are idle.
  void note_stream(detail::StreamHandle stream) {
    if (stream == last_noted_stream_ && !noted_streams_.empty()) return;
    note_new_stream(stream);
  }
  void note_new_stream(detail::StreamHandle stream);
  bool all_noted_streams_idle() noexcept;  // never asks the driver about a destroyed stream
  bool fence_done(std::size_t i) noexcept;  // retired_[i]
  // Drops the retired streams whose fence completed (all of them: `all`); events to spares.
  void drop_completed_fences(bool all) noexcept;

  // ---- cudaMallocAsync backend (device_async.cpp) ----
  Block* malloc_async(Locked& lock, std::size_t size, detail::StreamHandle stream,
                      std::uint8_t client);
  // What the driver still has to do for a freed async block, done after the unlock.
  struct AsyncFree {
    void* ptr;
    detail::StreamHandle stream;
    std::vector<detail::StreamHandle> stream_uses;
  };
  AsyncFree free_async(Block* b);  // locks held: bookkeeping only
  void finish_free_async(AsyncFree& work);  // locks not held: events, cuMemFreeAsync

  // free() of a block used on other streams: creates and records its events with no lock
  // held, then makes them pending (the block waits in limbo meanwhile).
  void record_free_events(Block* b,
                          std::vector<std::pair<detail::EventHandle, detail::StreamHandle>>& marks);

  AllocTrace trace_;  // guarded by fast_lock_
  // An allocator event for the history ring (when recording) and the profiler's observer
  // (when tracing): call under `if (allocator_events_wanted())` (history.hpp).
  void note_event(const char* action, std::uintptr_t addr, std::size_t size,
                  detail::StreamHandle stream, Block* b) {
    notify_observer(action, addr, size);
    if (history_enabled()) trace_.record(action_code(action), addr, size, stream, b);
  }
  // A block freed with nothing to wait for: free_requested and free_completed, as two
  // note_event calls would give, in one history call (and ring slot).
  void note_free_pair(Block* b) {
    notify_observer("free_requested", b->ptr, b->requested);
    notify_observer("free_completed", b->ptr, b->requested);
    if (history_enabled()) trace_.record(kActionFreePair, b->ptr, b->requested, b->stream, b);
  }
  // The profiler's allocator observer, when one is installed.
  void notify_observer(const char* action, std::uintptr_t addr, std::size_t size) {
    if (AllocatorObserver obs = g_allocator_observer.load(std::memory_order_relaxed)) {
      obs(AllocatorEvent{action, device_, addr, size, stats_.allocated_now(),
                         static_cast<std::int64_t>(stats_.reserved_bytes())});
    }
  }
  QuickCache quick_;  // guarded by fast_lock_ (hints read without it)
  std::atomic<bool> quick_on_{true};  // the quick_cache setting
  SpinLock fast_lock_;

  const int device_;
  detail::DeviceOps& devices_;
  detail::MemoryOps& memory_;
  detail::StreamOps& streams_;
  detail::GraphOps& graphs_;
  AllocatorConfig cfg_;       // live keys change under both locks (apply_settings)
  // cfg_.roundup_power2_divisions for round_size(), which the quick path calls before it
  // locks: relaxed atomics, so a concurrent settings change gives a bucket's old or new
  // division count (both valid roundings), never a torn read.
  std::array<std::atomic<unsigned>, 64> divisions_{};
  const bool async_backend_;  // backend:cudaMallocAsync (fixed for the allocator's life)
  std::size_t max_request_ = kMaxRequest;  // min(device memory, kMaxRequest)
  DeviceMutex mutex_;  // adaptive unless device_mutex_spin:False (locks.hpp)
  NodeResource node_resource_;
  BlockPool small_, large_;
  ActiveMap active_;  // live and parked blocks by address
  std::vector<Block*> spare_blocks_;
  std::unordered_set<Block*> segment_heads_;  // non-expandable segments
  std::vector<std::unique_ptr<ExpandableSegment>> expandable_;
  std::unordered_map<MempoolId, std::unique_ptr<PrivatePool>, MempoolIdHash> pools_;
  std::vector<PoolRoute> routes_;
  std::vector<std::pair<detail::EventHandle, Block*>> pending_;
  std::vector<Block*> capture_deferred_;  // freed during a capture, used on other streams
  std::unordered_map<Block*, std::vector<std::uint64_t>> capture_markers_;  // of those
  std::size_t awaited_events_ = 0;  // events taken out of pending_ by a waiting thread
  std::vector<detail::EventHandle> spare_events_;
  std::vector<Deferred> deferred_;
  DeviceStats stats_;
  std::uint64_t free_epoch_ = 0;  // counts frees (Block::free_epoch)
  std::vector<detail::StreamHandle> noted_streams_;  // note_stream(); under the locks
  detail::StreamHandle last_noted_stream_ = nullptr;
  // A noted stream destroyed by cudakit: an event recorded on it just before (nullptr when
  // it could not be recorded: not known to be idle until the device is synchronized).
  struct RetiredStream {
    detail::StreamHandle stream;
    detail::EventHandle fence;
  };
  std::vector<RetiredStream> retired_;  // under the locks
  void recycle_fence(const RetiredStream& r);
  std::size_t total_memory_ = 0;
  std::size_t limit_ = SIZE_MAX;  // reserved-bytes cap from the memory fraction
  double fraction_ = 1.0;
  std::uint64_t next_segment_id_ = 1;
  // Expandable segments: the allocation granularity (vm_granularity, at least 2 MiB), the
  // live high-water mark their footprint budget follows, physical handles unmapped to be
  // mapped again elsewhere (per pool kind; counted in reserved bytes), and driver calls.
  std::size_t vm_page_ = kSmallBuffer;
  std::size_t live_hwm_ = 0;
  std::vector<ExpandableSegment::Spare> spare_small_, spare_large_;
  std::size_t spare_bytes_ = 0;
  VmCallCounts vm_calls_;

 public:
  // Destroyed streams whose work is not known to be done yet (tests).
  std::size_t retired_streams_pending();
  // Driver calls made for expandable segments so far (replay benchmark, tests).
  const VmCallCounts& vm_calls() const noexcept { return vm_calls_; }
};


// ---- small block operations on the hot slow paths (inline: an out-of-line call through an
// exported member costs measurable instructions per allocation) ----

inline void DeviceAllocator::insert_free(BlockPool& pool, Block* b) {
  pool.blocks.insert(b);
  if (b->is_split()) stats_.inactive_split(pool.is_small, 1, static_cast<std::int64_t>(b->size));
}

inline void DeviceAllocator::erase_free(BlockPool& pool, Block* b) {
  pool.blocks.erase(b);
  if (b->is_split()) stats_.inactive_split(pool.is_small, -1, -static_cast<std::int64_t>(b->size));
}

inline void DeviceAllocator::merge(Block* dst, Block* src) {
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
  dst->free_epoch = std::max(dst->free_epoch, src->free_epoch);
  if (src->expandable && src->expandable->first == src) src->expandable->first = dst;
  recycle(src);
}

inline Block* DeviceAllocator::split_at(Block* x, std::uintptr_t at) {
  // x keeps [ptr, at); returns the rest as a new block after it (same state as x).
  Block* r = new_block();
  r->ptr = at;
  r->size = x->ptr + x->size - at;
  r->stream = x->stream;
  r->pool = x->pool;
  r->mapped = x->mapped;
  r->expandable = x->expandable;
  r->segment_id = x->segment_id;
  r->free_epoch = x->free_epoch;
  r->prev = x;
  r->next = x->next;
  if (r->next) r->next->prev = r;
  x->next = r;
  x->size = at - x->ptr;
  return r;
}

// ---- process-wide registry (registry.cpp) ----
// The allocator of `device` (created on first use; device already resolved).
DeviceAllocator& device_allocator(int device);
// Allocators created so far (for empty_cache, delete of unknown pointers).
std::vector<DeviceAllocator*> existing_allocators();
// Destroyed streams are retired in every live allocator of their device (stream_retire.cpp):
// the constructor and destructor register and unregister each one.
void register_live_allocator(DeviceAllocator* a) noexcept;
void unregister_live_allocator(DeviceAllocator* a) noexcept;
// Whether the caching allocator is enabled (caching_allocator_enable).
bool caching_enabled() noexcept;
void set_caching_enabled(bool on) noexcept;
// The allocator holding `ptr` as a live allocation, or nullptr (takes each device's lock).
DeviceAllocator* find_allocator_of(const void* ptr);
// Frees `ptr` in whichever device allocator holds it; false if none (no heap allocation).
bool free_in_any_allocator(void* ptr, int skip_device = -1);
// set_allocator_settings: parses `text` over the settings in force, refuses to change an
// init-only key once an allocator exists, applies live keys to existing allocators and the
// pinned host cache, and warns about inert keys.
void apply_allocator_settings(const std::string& text);
// The settings the allocators run with: those of an existing device allocator, else the
// settings the next one will get.
AllocatorConfig settings_in_force();

}  // namespace cudakit::memory
