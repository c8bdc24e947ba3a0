// The device allocator's data: blocks, the pools holding free blocks, private pools, the
// size constants, and the node memory resource of its containers.
//
// Thread-safety: none here; everything is used under the owning DeviceAllocator's locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <memory_resource>
#include <set>
#include <utility>
#include <vector>

#include "backend/types.hpp"
#include "memory/config.hpp"
#include "memory/free_index.hpp"

namespace cudakit::memory {

inline constexpr std::size_t kMinBlockSize = 512;
inline constexpr std::size_t kSmallSize = kMiB;          // largest small-pool request
inline constexpr std::size_t kSmallBuffer = 2 * kMiB;    // small-pool segment size
inline constexpr std::size_t kLargeBuffer = 20 * kMiB;   // segment for 1..10 MiB requests
inline constexpr std::size_t kMinLargeAlloc = 10 * kMiB;
inline constexpr std::size_t kRoundLarge = 2 * kMiB;
// No request above this is attempted (OutOfMemoryError before any arithmetic), whatever the
// device reports: every rounding below adds at most a few MiB to a size <= 2^62, so no size
// computation in the allocator can overflow.
inline constexpr std::size_t kMaxRequest = std::size_t(1) << 62;

using MempoolId = std::pair<std::uint64_t, std::uint64_t>;  // (0,0) = default pool
struct MempoolIdHash {
  std::size_t operator()(const MempoolId& id) const noexcept {
    return std::hash<std::uint64_t>()(id.first * 0x9E3779B97F4A7C15ull ^ id.second);
  }
};

// Memory resource for the container nodes: per-size free lists (16-byte classes up to 256 B),
// so recycling a node is a pointer push/pop. Not thread-safe: used under the device mutex.
// Returns memory only when destroyed (node counts are bounded by the peak block count).
class NodeResource : public std::pmr::memory_resource {
 public:
  // The containers using it are destroyed first (DeviceAllocator declares it before them)
  // and hand their nodes back; the free lists go back to the heap here.
  ~NodeResource() override {
    for (FreeNode*& head : free_) {
      while (FreeNode* n = head) {
        head = n->next;
        ::operator delete(n, std::align_val_t(16));
      }
    }
  }
  NodeResource() = default;
  NodeResource(const NodeResource&) = delete;
  NodeResource& operator=(const NodeResource&) = delete;

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

struct Block;
struct PrivatePool;
class PluggedAllocator;
struct ExpandableSegment;
struct StackRecord;
struct SleepPool;

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
  bool uncached = false;   // allocated while caching was disabled: freed straight back
  bool async = false;      // from the driver's stream-ordered pool (backend:cudaMallocAsync)
  bool parked = false;     // freed into the quick cache (still in active_; not live)
  bool releasing = false;  // expandable pages being unmapped outside the locks: busy
  std::uint8_t client = 0;  // MemoryClient it was allocated for (fits the padding here)
  int event_count = 0;     // outstanding record_stream events
  // -- second line --
  BlockPool* pool = nullptr;
  void* free_bins = nullptr;  // the FreeBlockIndex bins holding the block (when free)
  unsigned free_bin = 0;
  std::size_t requested = 0;
  ExpandableSegment* expandable = nullptr;
  std::uint64_t segment_id = 0;  // id of the segment (head block) for snapshots
  // When the block was last given back (the allocator's free counter): the work of its
  // allocation stream that used it was all enqueued before then. Lets the release paths
  // unmap only blocks freed before they synchronised.
  std::uint64_t free_epoch = 0;
  StackRecord* stack = nullptr;  // allocation stack (history on), owned by the HistoryRecorder
  std::vector<detail::StreamHandle> stream_uses;  // keeps capacity across reuse
  bool is_split() const noexcept { return prev != nullptr || next != nullptr; }
  // Free and idle: may be merged with a neighbour or handed out again.
  bool is_free() const noexcept { return !allocated && event_count == 0 && !releasing; }
};

struct PrivatePool {
  PrivatePool(MempoolId id, std::pmr::memory_resource* r)
      : id(id), small(true, this, r), large(false, this, r) {}
  MempoolId id;
  int use_count = 1;       // owners (MemPool objects, graphs)
  int live_blocks = 0;     // blocks allocated or awaiting record_stream events
  BlockPool small, large;
  bool no_split = false;
  bool use_on_oom = false;
  // MemPool(allocator=...): the pool's segments come from this allocator instead of the
  // device (as torch). Allocation runs under the device lock (it must not call back into
  // cudakit's caching allocator of the same device); freeing runs outside it.
  std::shared_ptr<PluggedAllocator> source;
  // A tagged pool (use_sleep_pool): its segments are VM ranges that sleep / wake_up unmap and
  // map again (sleep_pool.hpp). Owned by the sleep-pool registry, which never destroys it.
  SleepPool* sleep = nullptr;
};

// Route: allocations whose stream passes `filter` go to `pool` (MemPool, graph capture).
struct PoolRoute {
  MempoolId pool;
  std::function<bool(detail::StreamHandle)> filter;
};

}  // namespace cudakit::memory
