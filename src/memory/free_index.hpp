// Free blocks of one BlockPool, indexed for best-fit lookup per stream.
//
// Why not an ordered set keyed by (stream, size, address), as before: every insert/erase
// walked a red-black tree whose comparator dereferenced Block pointers (a cache miss per
// level), and that was about half of the time of a mixed-size alloc/free (measured with perf).
// Here each stream has segregated size bins (TLSF-like: exact bins below 8 KiB, then 16 bins
// per power of two, so a bin spans at most 1/16 of its sizes) holding intrusive doubly-linked
// lists, plus a bitmap of non-empty bins. Insert and erase are O(1) pointer updates.
//
// best_fit() returns the smallest block >= size, the lowest address among equal sizes (as
// torch's ordered set): it scans the request's own bin (blocks there may be smaller or
// larger) and, failing that, the first non-empty larger bin. A scan looks at no more than
// kScanLimit blocks per bin, so a pathological bin (thousands of free blocks of nearly equal
// size) costs bounded time and yields a near-best fit instead of the best. On the three
// replayed traces the result is identical to the ordered set (fragmentation to 3 decimals).
//
// Not thread-safe: used under the device allocator's locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/types.hpp"

namespace cudakit::memory {

struct Block;

class FreeBlockIndex {
 public:
  static constexpr int kScanLimit = 64;

  void insert(Block* b);  // allocates only when a stream with no free blocks gets its first
  void erase(Block* b) noexcept;  // b must be in this index
  // The smallest free block of at least `size` bytes on `stream` (not removed), or nullptr.
  Block* best_fit(detail::StreamHandle stream, std::size_t size) const noexcept;
  bool empty() const noexcept { return count_ == 0; }
  std::size_t size() const noexcept { return count_; }
  // A copy of the members (for the release paths, which erase while they go).
  std::vector<Block*> blocks() const;
  // Bins objects held: at most the number of streams that have free blocks at one time
  // (an idle stream's bins are reused by the next new stream). For tests.
  std::size_t stream_slots() const noexcept { return streams_.size(); }

  // Bin of a block size (public for tests).
  static unsigned bin_of(std::size_t size) noexcept {
    const std::size_t u = size >> 9;  // 512-byte units
    if (u < kExact) return static_cast<unsigned>(u);
    const unsigned log2u = 63u - static_cast<unsigned>(__builtin_clzll(u));
    const unsigned sub = static_cast<unsigned>(u >> (log2u - kSubBits)) & (kExact - 1);
    return kExact + (log2u - kSubBits) * kExact + sub;
  }

 private:
  static constexpr unsigned kSubBits = 4;
  static constexpr unsigned kExact = 1u << kSubBits;  // bins below 16 * 512 B are exact sizes
  static constexpr unsigned kBins = kExact + 60 * kExact;
  static constexpr unsigned kWords = (kBins + 63) / 64;

  struct StreamBins {
    detail::StreamHandle stream = nullptr;
    std::size_t count = 0;  // free blocks of this stream
    std::uint64_t nonempty[kWords] = {};
    Block* head[kBins] = {};
  };
  StreamBins* bins_for(detail::StreamHandle stream) const noexcept;
  static Block* scan(Block* head, std::size_t size) noexcept;
  static int next_nonempty(const StreamBins& s, unsigned from) noexcept;

  // Programs that create and destroy streams (one per request, say) must not grow the
  // index or slow lookups: bins are found by hash (after a one-entry cache), and the bins of
  // a stream with no free blocks are handed to the next new stream.
  std::vector<std::unique_ptr<StreamBins>> streams_;
  std::unordered_map<detail::StreamHandle, StreamBins*> by_stream_;
  mutable StreamBins* last_ = nullptr;  // the stream looked up last
  std::size_t count_ = 0;
};

}  // namespace cudakit::memory
