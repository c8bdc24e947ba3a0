// Tagged ("sleep") pools: sleep and wake of device memory at fixed addresses (issue 29;
// vLLM's sleep mode, SGLang's memory saver), and the hand-off of a whole pool to another
// process.
//
// Design (why):
//  * A tagged pool is a PrivatePool of the device allocator (pools.cpp's machinery: routes,
//    split/merge, statistics, snapshots), so everything that allocates through the caching
//    allocator — cudakit, torch and CuPy through the plug-ins — lands in it while
//    UseSleepPool routes the thread's allocations there. Only its segments differ: each is a
//    range of a virtual-memory reservation that the pool owns, mapped with physical chunks
//    (vm_create + vm_map_chunks) instead of a cuMemAlloc. The allocator's block structure
//    never changes on sleep or wake: sleeping only takes the physical memory away from under
//    the blocks, so nothing about live pointers, pending frees or record_stream events needs
//    to be re-validated, and frees while asleep are ordinary bookkeeping.
//  * One reservation per pool (sized to the device, a new one only when it is full): the
//    segments of a pool are near each other, so the hand-off can map the whole pool into one
//    range of the importer at the same offsets (a tensor's offset = pointer - pool base).
//  * Segment sizes grow with the pool (half of its large-pool bytes, power of two, between
//    64 MiB and 2 GiB; never less than what the request needs), and a segment is mapped with
//    chunks of at most 2 GiB (and at most half the device). Each physical chunk costs a
//    driver call or two on every wake and, in an importing process, an fd transfer, an
//    import and a map (~20-50 us each on the H200): a 14 GB pool of 300 tensors is ~15
//    chunks instead of the ~90 a sixteenth-of-the-pool rule made, so import_pool and wake
//    stay a few dozen driver calls. The price is the unused tail of the last segment (at
//    most a third of the pool, at most 2 GiB), which the pool's later allocations use.
//    When the device (or the memory fraction) cannot hold the grown size, the segment falls
//    back to the request's own size: growth never causes an out-of-memory error.
//  * Offload copies only allocated blocks (merged into runs), into pinned host pieces of
//    kHostPiece bytes from cudakit's host cache: the cache rounds to powers of two, so big
//    single buffers would waste up to half, and a second sleep reuses the cached pieces
//    (no new pinning).
//  * sleep waits for the whole device before it copies and unmaps (work on any stream may
//    still read or write the memory); the copies run on the device's current stream, which
//    is synchronised before the unmap. wake_up maps, then copies on the current stream and
//    synchronises it before returning (so torch work on another stream sees the data).
//
// State: awake -> sleeping -> asleep -> waking -> awake. Only awake pools allocate (others
// raise, naming the tag) or release free segments (empty_cache skips the rest); the segment
// set is frozen outside `awake`, which is what lets sleep / wake run their driver calls and
// waits without the allocator's locks (locks.hpp).
//
// Thread-safety: SleepPool's fields are guarded by the owning DeviceAllocator's locks, except
// tag / device / id (immutable). sleep / wake_up / sleep_state / export are serialised
// process-wide by one mutex held across their waits; it is never taken by allocation, free,
// stream tasks or finalisers, so holding it while waiting cannot deadlock them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/memory_ops.hpp"
#include "memory/block.hpp"

namespace cudakit::memory {

inline constexpr std::size_t kSleepMaxChunk = std::size_t(2) << 30;   // physical chunk cap
inline constexpr std::size_t kSleepMinGrow = std::size_t(64) << 20;   // segment growth floor
inline constexpr std::size_t kSleepMaxGrow = std::size_t(2) << 30;    // segment growth cap
inline constexpr std::size_t kSleepHostPiece = std::size_t(256) << 20;  // pinned piece

// One segment of a tagged pool: [va, va + bytes) of one of the pool's reservations.
struct SleepSegment {
  std::uintptr_t va = 0;
  std::size_t bytes = 0;
  bool small = false;
  std::vector<std::size_t> sizes;              // its chunks, in address order (sum = bytes)
  std::vector<detail::PhysMemHandle> handles;  // one per chunk while mapped; empty asleep
  std::vector<int> fds;  // exported descriptors (export_pool) per chunk, -1 = none
};

struct SleepPool {
  enum class State : std::uint8_t { awake, sleeping, asleep, waking };
  SleepPool(std::string t, int dev, MempoolId pool) : tag(std::move(t)), device(dev), id(pool) {}

  const std::string tag;
  const int device;
  const MempoolId id;

  State state = State::awake;
  bool offloaded = false;  // asleep with its contents in `host`
  // An allocation came from this pool while a graph capture was underway on its device
  // (use_sleep_pool entered inside `with cudakit.graph(...)`): the graph may replay into its
  // free blocks, so empty_cache no longer gives its segments back (sleep still may: wake
  // maps them again at the same addresses, which is what keeps graphs valid).
  bool captured_into = false;
  std::map<std::uintptr_t, SleepSegment> segments;
  std::size_t bytes = 0, large_bytes = 0;  // segment bytes (all, large pool)
  struct Reservation {
    std::uintptr_t va = 0;
    std::size_t bytes = 0;
    std::map<std::uintptr_t, std::size_t> free;  // unused ranges (address -> size)
  };
  std::vector<Reservation> reservations;
  // Offloaded contents: device runs (address, bytes), in order, and the pinned host pieces
  // holding their concatenation.
  std::vector<std::pair<std::uintptr_t, std::size_t>> runs;
  std::vector<std::pair<void*, std::size_t>> host;
  std::size_t host_bytes = 0;
  std::int64_t num_sleeps = 0, num_wake_ups = 0;
};

// The segment size of a new segment for a request of `size` bytes (already rounded):
// allocation_size_for_request is the allocator's ordinary segment size for it.
std::size_t sleep_segment_size(const SleepPool& sp, bool small, std::size_t size,
                               std::size_t allocation_size_for_request, std::size_t granularity);
// Chunk sizes covering a segment of `bytes` (each <= max_chunk, granularity multiples).
std::vector<std::size_t> sleep_chunk_sizes(std::size_t bytes, std::size_t granularity,
                                           std::size_t max_chunk = kSleepMaxChunk);
// The chunk cap on a device of `total` bytes: kSleepMaxChunk, at most half the device
// (power of two), at least one granule.
std::size_t sleep_max_chunk(std::size_t total, std::size_t granularity);
// The copies between device runs (address, bytes) and the host pieces (pointer, bytes)
// holding their concatenation, in order: a run is cut where a piece ends.
struct SleepCopy {
  void* dst;
  const void* src;
  std::size_t bytes;
};
std::vector<SleepCopy> sleep_plan_copies(
    const std::vector<std::pair<std::uintptr_t, std::size_t>>& runs,
    const std::vector<std::pair<void*, std::size_t>>& host, bool to_host);
// Address ranges of the pool's reservations (allocator locks held): take returns 0 when the
// backend cannot reserve more address space; give returns a range taken before.
std::uintptr_t sleep_take_va(SleepPool& sp, detail::MemoryOps& b, std::size_t bytes,
                             std::size_t reserve_bytes);
void sleep_give_va(SleepPool& sp, std::uintptr_t va, std::size_t bytes);

// Registry (sleep_pool.cpp): the pool of (tag, device), nullptr when none exists yet; the
// process-wide mutex serialising sleep / wake_up / sleep_state / export_pool.
SleepPool* find_sleep_pool(const std::string& tag, int device);
std::mutex& sleep_op_mutex();
// A fresh MemPool-style pool id (pools.cpp).
MempoolId new_user_pool_id();

}  // namespace cudakit::memory
