// The quick cache: a freed block that needs nothing special (default pool, no record_stream
// uses, caching on) is parked whole in a small exact-size cache keyed by (stream, rounded
// size) instead of going back to the best-fit free sets. The next allocation of that size on
// that stream takes it in O(1) under the allocator's short fast lock only, skipping the free
// sets, splitting and merging. A parked block counts as freed in the statistics (torch's
// semantics). Parked blocks go back to the free sets (drain) before the allocator grows, on
// the retry/OOM path, empty_cache, snapshots, statistics and pool release.
//
// Only small-pool blocks (<= 1 MiB) are parked. Parking still changes placement: a parked
// block does not merge with a neighbour freed meanwhile, so best-fit splits other blocks or
// grows past it, and the exact-size reuse it offers depends on which (stream, size) pairs
// share a slot (a hash of stream handles: results varied from run to run). Large blocks used
// to be parked too when both neighbours were allocated; replaying the real traces of issue
// 27 (2026-12-07, emulated, decided on the design half) without that gave lower peak
// reserved / peak allocated on 8 of the 15 design traces and equal on 5, results that no
// longer vary from run to run (server_bert_threads 1.169, where it varied 1.17-1.25), and
// fewer driver calls on most (varlen_infer 1633 -> 996, unet_train 1511 -> 1218; more on
// server_bert_threads, 4.6k -> 5.8k); worse: unet_train 1.028 -> 1.031, varbatch_train
// 1.002 -> 1.007 (docs/performance.md has both halves). The cost is the slow path (the
// allocator's mutex) for large frees and their reallocation, not measured on the GPU machine
// yet: 8 threads on the 2-core development machine were within noise.
//
// Adaptivity: when fewer than a quarter of the last kWindow parked blocks were taken back
// (mixed sizes: the next request rarely matches), parking only adds a park + drain to every
// free, so it pauses for kPause frees, then tries again.
//
// The `quick_cache` key of CUDAKIT_ALLOC_CONF turns it off (A/B measurements).
//
// Thread-safety: every method except the two hints runs under the owner's fast lock. The
// hints are lock-free reads taken before locking ("something is parked", "parking paused"), so
// a miss costs no lock; a stale hint only means one slow path.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/types.hpp"
#include "memory/block.hpp"

namespace cudakit::memory {

class QuickCache {
 public:
  static constexpr int kSlots = 64;       // direct-mapped by (stream, size)
  static constexpr int kDepth = 4;        // blocks per slot
  // Keeps drains short when hits are rare; also bounds the bytes parked (32 small blocks: at
  // most 32 MiB, so no byte budget is needed since large blocks are not parked).
  static constexpr int kMaxBlocks = 32;
  static constexpr int kWindow = 256;
  static constexpr int kMinHits = kWindow / 4;
  static constexpr int kPause = 4096;

  bool maybe_parked() const noexcept { return any_parked_.load(std::memory_order_relaxed); }
  bool paused() const noexcept { return paused_.load(std::memory_order_relaxed); }

  // A parked block of exactly `size` bytes on `stream` (unparked), or nullptr.
  Block* take(detail::StreamHandle stream, std::size_t size) noexcept {
    Slot& q = slots_[index(stream, size)];
    if (q.n == 0 || q.size != size || q.stream != stream) return nullptr;
    Block* b = q.blocks[--q.n];
    if (--blocks_ == 0) any_parked_.store(false, std::memory_order_relaxed);
    ++hits_;
    b->parked = false;
    return b;
  }
  // Parks `b` (sets b->parked); false when it does not fit (cache full, slot taken or full).
  bool park(Block* b) noexcept {
    if (!has_room()) return false;
    Slot& q = slots_[index(b->stream, b->size)];
    if (q.n == 0) {
      q.stream = b->stream;
      q.size = b->size;
    } else if (q.size != b->size || q.stream != b->stream || q.n == kDepth) {
      return false;
    }
    q.blocks[q.n++] = b;
    ++blocks_;
    b->parked = true;
    any_parked_.store(true, std::memory_order_relaxed);
    if (++parks_ == kWindow) {
      if (hits_ < kMinHits) {
        pause_ = kPause;
        paused_.store(true, std::memory_order_relaxed);
      }
      parks_ = hits_ = 0;
    }
    return true;
  }
  bool has_room() const noexcept {
    return blocks_ < kMaxBlocks;
  }
  // A free that took the slow path while parking is paused counts down the pause.
  void count_slow_free() noexcept {
    if (pause_ > 0 && --pause_ == 0) paused_.store(false, std::memory_order_relaxed);
  }
  bool empty() const noexcept { return blocks_ == 0; }

  // Empties the cache, handing each block (unparked) to `give_back`.
  template <class F>
  void drain(F&& give_back) {
    if (blocks_ == 0) return;
    for (Slot& q : slots_) {
      while (q.n > 0) {
        Block* b = q.blocks[--q.n];
        b->parked = false;
        give_back(b);
      }
    }
    blocks_ = 0;
    any_parked_.store(false, std::memory_order_relaxed);
  }

 private:
  struct Slot {
    detail::StreamHandle stream = nullptr;
    std::size_t size = 0;
    int n = 0;
    Block* blocks[kDepth] = {};
  };
  static std::size_t index(detail::StreamHandle stream, std::size_t size) noexcept {
    std::uint64_t h = (reinterpret_cast<std::uintptr_t>(stream) ^ (size * 0x9E3779B97F4A7C15ull));
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return static_cast<std::size_t>(h >> 58) & (kSlots - 1);
  }

  Slot slots_[kSlots];
  int blocks_ = 0;
  int parks_ = 0, hits_ = 0, pause_ = 0;
  std::atomic<bool> any_parked_{false};
  std::atomic<bool> paused_{false};
};

}  // namespace cudakit::memory
