// The device caching allocator (one instance per device).
//
// Design (why, not what):
//  * Stream-ordered like torch: a free block remembers the stream it was allocated on and is
//    only reused for that stream without synchronisation. record_stream() adds streams whose
//    work must finish first; their events are polled on the allocation path (never waited
//    for, except in the OOM path).
//  * Best fit per (pool, stream): free blocks live in an ordered set keyed by (stream, size,
//    address). Set nodes come from a per-device pool resource and Block objects are recycled,
//    so a steady-state alloc/free allocates nothing from the heap.
//  * Small (<= 1 MiB) and large pools are separate so small tensors never split large
//    segments (the main source of fragmentation in long runs).
//  * Expandable segments: one reserved virtual range per (pool, stream), backed page by page
//    with physical handles through the seam's vm_* calls; neighbouring blocks stay mergeable
//    across what would have been separate segments.
//  * Pools (MemPool / graph capture) are general "routes": (private pool, stream filter).
//
//  * Quick cache: a freed block that needs nothing special (default pool, no record_stream
//    uses, caching on) is parked whole in a small exact-size cache keyed by
//    (stream, size) instead of going back to the best-fit sets. The next allocation of that
//    rounded size on that stream takes it in O(1) under the short fast lock only, skipping
//    the set operations, splitting and merging. Statistics follow torch's semantics exactly
//    (the block counts as freed while parked). Parked blocks go back to the free sets
//    (flush) before the allocator grows, on the retry/OOM path, empty_cache, snapshots and
//    pool release, so reserved memory and fragmentation are unaffected.
//    CUDAKIT_ALLOC_QUICK_CACHE=0 disables it (for A/B measurements).
//
// Thread-safety: two locks per device (no global lock). `fast_lock_` (a spin lock held for a
// few dozen instructions) guards all state; the quick-cache hit paths take only it. Every
// other public method takes the device mutex and then the fast lock, so slow paths wait
// asleep on the mutex instead of spinning behind each other.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/memory.hpp"
#include "memory/config.hpp"
#include "memory/free_index.hpp"
#include "memory/history.hpp"

namespace cudakit::memory {

inline constexpr std::size_t kMinBlockSize = 512;
inline constexpr std::size_t kSmallSize = kMiB;          // largest small-pool request
inline constexpr std::size_t kSmallBuffer = 2 * kMiB;    // small-pool segment size
inline constexpr std::size_t kLargeBuffer = 20 * kMiB;   // segment for 1..10 MiB requests
inline constexpr std::size_t kMinLargeAlloc = 10 * kMiB;
inline constexpr std::size_t kRoundLarge = 2 * kMiB;

using MempoolId = std::pair<std::uint64_t, std::uint64_t>;  // (0,0) = default pool
struct MempoolIdHash {
  std::size_t operator()(const MempoolId& id) const noexcept {
    return std::hash<std::uint64_t>()(id.first * 0x9E3779B97F4A7C15ull ^ id.second);
  }
};

// Memory resource for the free-set / hash-map nodes: per-size free lists (16-byte classes up
// to 256 B), so recycling a node is a pointer push/pop. Not thread-safe: used under the
// device mutex. Never returns memory (node counts are bounded by the peak block count).
class NodeResource : public std::pmr::memory_resource {
 public:
  ~NodeResource() override = default;

 private:
  static constexpr std::size_t kClasses = 16;
  struct FreeNode { FreeNode* next; };
  FreeNode* free_[kClasses] = {};
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    if (bytes > kClasses * 16 || align > 16) return ::operator new(bytes, std::align_val_t(align));
    const std::size_t c = (bytes + 15) / 16 - (bytes ? 1 : 0);
    if (FreeNode* n = free_[c]) {
      free_[c] = n->next;
      return n;
    }
    return ::operator new((c + 1) * 16, std::align_val_t(16));
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    if (bytes > kClasses * 16 || align > 16) {
      ::operator delete(p, std::align_val_t(align));
      return;
    }
    const std::size_t c = (bytes + 15) / 16 - (bytes ? 1 : 0);
    auto* n = static_cast<FreeNode*>(p);
    n->next = free_[c];
    free_[c] = n;
  }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }
};

// Test-and-test-and-set spin lock: the fast path's critical section is a few dozen
// instructions, far cheaper than a futex round trip under contention.
class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0;;) {
      if (!flag_.exchange(true, std::memory_order_acquire)) return;
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins > 64) std::this_thread::yield();
#if defined(__x86_64__) || defined(__i386__)
        else __builtin_ia32_pause();
#endif
      }
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

// The slow-path lock: device mutex, then the fast lock.
class AllLock {
 public:
  AllLock(std::mutex& m, SpinLock& s) : m_(m), s_(s) {
    m_.lock();
    s_.lock();
  }
  ~AllLock() {
    s_.unlock();
    m_.unlock();
  }
  AllLock(const AllLock&) = delete;
  AllLock& operator=(const AllLock&) = delete;

 private:
  std::mutex& m_;
  SpinLock& s_;
};

struct Block;
struct PrivatePool;
class PluggedAllocator;
struct ExpandableSegment;

struct BlockAddrLess {
  bool operator()(const Block* a, const Block* b) const noexcept;
};

struct BlockPool {
  BlockPool(bool small, PrivatePool* owner, std::pmr::memory_resource* r)
      : unmapped(r), is_small(small), owner(owner) {}
  FreeBlockIndex blocks;                          // free, mapped
  std::pmr::set<Block*, BlockAddrLess> unmapped;  // free, unmapped (expandable segments)
  bool is_small;
  PrivatePool* owner;  // nullptr for the default pools
};

// Field order matters: the first cache line holds what best-fit search, split and merge
// touch (size/ptr for the bin scan, the free-list links, the neighbours and their state).
// Measured on the mixed live set (2 emulated cores, alternating runs): 186-194 ns against
// 198-204 ns with the previous order.
struct Block {
  std::size_t size = 0;
  std::uintptr_t ptr = 0;
  Block* free_prev = nullptr;  // membership of BlockPool::blocks (FreeBlockIndex's list)
  Block* free_next = nullptr;
  Block* prev = nullptr;  // neighbours in the same segment (address order)
  Block* next = nullptr;
  detail::StreamHandle stream = nullptr;
  bool allocated = false;
  bool mapped = true;
  bool uncached = false;  // allocated while caching was disabled: freed straight back
  bool async = false;     // from the driver's stream-ordered pool (backend:cudaMallocAsync)
  bool parked = false;    // freed into the quick cache (still in active_; not live)
  int event_count = 0;    // outstanding record_stream events
  // -- second line --
  BlockPool* pool = nullptr;
  void* free_bins = nullptr;  // the FreeBlockIndex bins holding the block (when free)
  unsigned free_bin = 0;
  std::size_t requested = 0;
  ExpandableSegment* expandable = nullptr;
  std::uint64_t segment_id = 0;  // id of the segment (head block) for snapshots
  StackRecord* stack = nullptr;  // allocation stack (history on), owned by the HistoryRecorder
  std::vector<detail::StreamHandle> stream_uses;  // keeps capacity across reuse
  bool is_split() const noexcept { return prev != nullptr || next != nullptr; }
};

struct PrivatePool {
  PrivatePool(MempoolId id, std::pmr::memory_resource* r)
      : id(id), small(true, this, r), large(false, this, r) {}
  MempoolId id;
  int use_count = 1;       // owners (MemPool objects, graphs)
  int live_blocks = 0;     // allocated blocks not yet freed
  BlockPool small, large;
  bool no_split = false;
  bool use_on_oom = false;
  // MemPool(allocator=...): the pool's segments come from this allocator instead of the
  // device (as torch). Called under the device lock: it must not call back into cudakit's
  // caching allocator of the same device.
  std::shared_ptr<PluggedAllocator> source;
};

// Route: allocations whose stream passes `filter` go to `pool` (MemPool, graph capture).
struct PoolRoute {
  MempoolId pool;
  std::function<bool(detail::StreamHandle)> filter;
};

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
  std::vector<SegmentInfoBlock> blocks;
};

class DeviceAllocator {
 public:
  DeviceAllocator(int device, detail::Backend& backend, AllocatorConfig cfg);
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  int device() const noexcept { return device_; }

  // Returns a block of at least `size` bytes usable on `stream`. Throws OutOfMemoryError.
  CUDAKIT_INTERNAL_API Block* malloc(std::size_t size, detail::StreamHandle stream);
  // Frees the block at `ptr`. Returns false when `ptr` is not a live allocation here.
  CUDAKIT_INTERNAL_API bool free(void* ptr);
  bool owns(const void* ptr);
  bool info(const void* ptr, AllocationInfo& out);
  // Base address of the device allocation (segment) holding live block `ptr`, or 0 if
  // `ptr` is not live here. Throws NotSupportedError for expandable segments.
  std::uintptr_t segment_base(const void* ptr);
  // record_stream: reuse of ptr's block waits for `stream`'s current work. False if unknown.
  CUDAKIT_INTERNAL_API bool record_stream(void* ptr, detail::StreamHandle stream);

  void empty_cache();
  MemoryStats stats();
  std::int64_t allocated_bytes_now() const noexcept {
    return allocated_now_.load(std::memory_order_relaxed);
  }
  void reset_peak_stats();
  void reset_accumulated_stats();
  void set_memory_fraction(double f);
  double memory_fraction();
  std::vector<SegmentInfo> snapshot(std::optional<MempoolId> only_pool = std::nullopt);

  // Pools.
  void create_pool(MempoolId id, bool no_split, bool use_on_oom,
                   std::shared_ptr<PluggedAllocator> source = nullptr);  // or add a reference
  void release_pool(MempoolId id);  // drop a reference; frees cached blocks when unused
  int pool_use_count(MempoolId id);
  void begin_allocate_to_pool(MempoolId id, std::function<bool(detail::StreamHandle)> filter);
  void end_allocate_to_pool(MempoolId id);

  // The trace ring in snapshot form (oldest first).
  std::vector<TraceEntry> history_traces();

 private:
  // Splits `b` (taken from `pool`'s free set or a new segment) and accounts it as allocated.
  Block* finish_alloc(Block* b, BlockPool& pool, std::size_t size, std::size_t orig_size,
                      detail::StreamHandle stream);
  Block* malloc_async(std::size_t size, detail::StreamHandle stream);
  void free_async(Block* b);
  Block* new_block();
  void recycle(Block* b);
  BlockPool& pool_for(std::size_t size, detail::StreamHandle stream);
  std::size_t round_size(std::size_t size) const;
  std::size_t allocation_size(std::size_t size) const;
  Block* get_free_block(BlockPool& pool, std::size_t size, detail::StreamHandle stream);
  Block* alloc_segment(BlockPool& pool, std::size_t size, std::size_t alloc_size,
                       detail::StreamHandle stream);
  Block* alloc_expandable(BlockPool& pool, std::size_t size, detail::StreamHandle stream);
  bool map_block(Block* b, std::size_t size);
  std::size_t unmap_free_pages(Block* b);  // returns bytes unmapped
  std::size_t compact_expandable(std::size_t want);
  void free_block(Block* b, bool stats_done = false);
  void merge(Block* dst, Block* src);
  bool release_available(BlockPool& pool, std::size_t size);
  void release_cached(bool all_pools_only_unused_private = true);
  void release_pool_blocks(BlockPool& pool);
  void release_segment(Block* head);
  void garbage_collect();
  void process_events();
  void synchronize_and_free_events();
  [[noreturn]] void raise_oom(std::size_t size, std::size_t alloc_size,
                              detail::StreamHandle stream);
  bool would_exceed_limit(std::size_t bytes) const;
  static void stat_one(MemoryStat& st, std::int64_t delta) noexcept {
    st.current += delta;
    if (st.current > st.peak) st.peak = st.current;
    if (delta > 0) st.allocated += delta;
    else st.freed -= delta;
  }
  void stat_update(MemoryStat* s, bool small, std::int64_t delta) noexcept {
    stat_one(s[0], delta);
    stat_one(s[small ? 1 : 2], delta);
  }
  // Records a history event (history on; fast_lock_ held). For alloc/free events `b` is the
  // block: its allocation stack is set on "alloc" and reused by later events.
  void trace(const char* action, std::uintptr_t addr, std::size_t size,
             detail::StreamHandle stream, Block* b);
  void drop_stack(Block* b) noexcept {
    if (b->stack) {
      history_.release(b->stack);
      b->stack = nullptr;
    }
  }
  HistoryRecorder history_;  // guarded by fast_lock_

  // Quick cache (all under fast_lock_).
  static constexpr int kQuickSlots = 64;        // direct-mapped by (stream, size)
  static constexpr int kQuickDepth = 4;         // blocks per slot
  static constexpr std::size_t kQuickBudget = 256 * kMiB;  // bytes parked per device
  static constexpr int kQuickMaxBlocks = 32;    // keeps flushes short when hits are rare
  struct QuickSlot {
    detail::StreamHandle stream = nullptr;
    std::size_t size = 0;
    int n = 0;
    Block* blocks[kQuickDepth] = {};
  };
  static std::size_t quick_index(detail::StreamHandle stream, std::size_t size) noexcept {
    std::uint64_t h = (reinterpret_cast<std::uintptr_t>(stream) ^ (size * 0x9E3779B97F4A7C15ull));
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return static_cast<std::size_t>(h >> 58) & (kQuickSlots - 1);
  }
  bool quick_fast_path_ok() const noexcept;
  Block* quick_take(std::size_t size, std::size_t orig_size, detail::StreamHandle stream);
  int quick_put(void* ptr);  // 1 parked, 0 not live here, -1 take the slow path
  void quick_flush();         // both locks held: parked blocks back to the free sets
  // fast_lock_ held: the live (allocated, not parked) block at `ptr`, or nullptr.
  Block* live_block(const void* ptr) const;
  // fast_lock_ held: a full quick cache goes back to the pool before `incoming` is freed.
  void make_room_in_quick_cache(std::size_t incoming);
  void account_alloc(Block* b, bool small, std::size_t orig_size) noexcept;
  void account_free_requested(Block* b, bool small) noexcept;
  void account_free_completed(Block* b, bool small) noexcept;
  void account_free(Block* b, bool small) noexcept;  // both
  bool quick_enabled_ = true;  // CUDAKIT_ALLOC_QUICK_CACHE=0 turns the quick cache off (A/B)
  QuickSlot quick_[kQuickSlots];
  std::size_t quick_bytes_ = 0;
  int quick_blocks_ = 0;
  // Adaptivity: when fewer than a quarter of the last kQuickWindow parked blocks were taken
  // back (mixed sizes: the next request rarely matches), parking only adds a park + flush to
  // every free, so it pauses for kQuickPause frees, then tries again.
  static constexpr int kQuickWindow = 256;
  static constexpr int kQuickMinHits = kQuickWindow / 4;
  static constexpr int kQuickPause = 4096;
  int quick_parks_ = 0, quick_hits_ = 0, quick_pause_ = 0;
  // Lock-free hints read before taking fast_lock_ (written under it): "something is parked"
  // and "parking paused", so a miss costs no lock. A stale read only means one slow path.
  std::atomic<bool> quick_any_parked_{false};
  std::atomic<bool> quick_paused_{false};
  SpinLock fast_lock_;

  const int device_;
  detail::Backend& backend_;
  AllocatorConfig cfg_;
  std::mutex mutex_;
  NodeResource node_resource_;
  BlockPool small_, large_;
  std::pmr::unordered_map<std::uintptr_t, Block*> active_;
  std::vector<Block*> spare_blocks_;
  std::unordered_set<Block*> segment_heads_;  // non-expandable segments
  std::vector<std::unique_ptr<ExpandableSegment>> expandable_;
  std::unordered_map<MempoolId, std::unique_ptr<PrivatePool>, MempoolIdHash> pools_;
  std::vector<PoolRoute> routes_;
  std::vector<std::pair<detail::EventHandle, Block*>> pending_;
  std::vector<detail::EventHandle> spare_events_;
  MemoryStats stats_;
  std::atomic<std::int64_t> allocated_now_{0};
  std::size_t total_memory_ = 0;
  std::size_t limit_ = SIZE_MAX;  // reserved-bytes cap from the memory fraction
  double fraction_ = 1.0;
  std::uint64_t next_segment_id_ = 1;
  std::size_t reserved_hwm_ = 0;  // highest reserved bytes so far (expandable compaction)
};

// ---- process-wide registry ----
// The allocator of `device` (created on first use; device already resolved).
CUDAKIT_INTERNAL_API DeviceAllocator& device_allocator(int device);
// Allocators created so far (for empty_cache, delete of unknown pointers).
CUDAKIT_INTERNAL_API std::vector<DeviceAllocator*> existing_allocators();
// Whether the caching allocator is enabled (caching_allocator_enable).
bool caching_enabled() noexcept;
void set_caching_enabled(bool on) noexcept;
// The allocator holding `ptr` as a live allocation, or nullptr (takes each device's lock).
DeviceAllocator* find_allocator_of(const void* ptr);
// Frees `ptr` in whichever device allocator holds it; false if none (no heap allocation).
bool free_in_any_allocator(void* ptr, int skip_device = -1);

}  // namespace cudakit::memory
