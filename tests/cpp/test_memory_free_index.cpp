// FreeBlockIndex (the allocator's best-fit structure) against a brute-force model: after
// random inserts and erases over several streams, best_fit() must return exactly what a
// linear search for (smallest size >= request, then lowest address) returns, as long as no
// bin holds more than kScanLimit blocks; and never a block that is too small or of another
// stream when bins are over-full.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "memory/device_allocator.hpp"
#include "memory/free_index.hpp"

using cudakit::detail::StreamHandle;
using cudakit::memory::Block;
using cudakit::memory::FreeBlockIndex;

namespace {

StreamHandle stream_n(int i) { return reinterpret_cast<StreamHandle>(std::uintptr_t(0x1000 * (i + 1))); }

Block* brute_best(const std::vector<Block*>& in, StreamHandle s, std::size_t size) {
  Block* best = nullptr;
  for (Block* b : in) {
    if (b->stream != s || b->size < size) continue;
    if (!best || b->size < best->size || (b->size == best->size && b->ptr < best->ptr)) best = b;
  }
  return best;
}

}  // namespace

TEST(FreeBlockIndex, BinsAreMonotonicAndBounded) {
  unsigned prev = 0;
  for (std::size_t size = 512; size < (std::size_t(1) << 50); size += size / 7 + 512) {
    const unsigned bin = FreeBlockIndex::bin_of(size);
    EXPECT_GE(bin, prev) << size;
    prev = bin;
  }
  EXPECT_EQ(FreeBlockIndex::bin_of(512), 1u);
  EXPECT_NE(FreeBlockIndex::bin_of(512), FreeBlockIndex::bin_of(1024));
  // Sizes below 8 KiB have a bin each; above, a bin spans less than 1/16 of its size.
  EXPECT_NE(FreeBlockIndex::bin_of(7680), FreeBlockIndex::bin_of(7168));
  EXPECT_EQ(FreeBlockIndex::bin_of(std::size_t(1) << 30),
            FreeBlockIndex::bin_of((std::size_t(1) << 30) + (std::size_t(1) << 25)));
  EXPECT_NE(FreeBlockIndex::bin_of(std::size_t(1) << 30),
            FreeBlockIndex::bin_of((std::size_t(1) << 30) + (std::size_t(1) << 26)));
  EXPECT_LT(FreeBlockIndex::bin_of(~std::size_t(0)), 1000u);
}

TEST(FreeBlockIndex, MatchesBruteForceBestFit) {
  std::mt19937_64 rng(7);
  std::vector<std::unique_ptr<Block>> storage;
  std::vector<Block*> in;  // members of the index
  FreeBlockIndex index;
  std::uniform_real_distribution<double> logsize(9, 27);
  std::uintptr_t next_addr = 1 << 20;
  for (int op = 0; op < 200000; ++op) {
    // First half: few members (exact best fit everywhere); second half: bins over-full.
    const std::size_t cap = op < 100000 ? FreeBlockIndex::kScanLimit - 1 : 3000;
    const int what = static_cast<int>(rng() % 10);
    if ((what < 4 && in.size() < cap) || in.empty()) {
      auto b = std::make_unique<Block>();
      // Sizes: multiples of 512 with many duplicates (small set of values) to test ties.
      b->size = (static_cast<std::size_t>(std::exp2(logsize(rng))) / 512 + 1) * 512;
      if (rng() % 3 == 0) b->size = 512 * (1 + rng() % 4);
      b->ptr = next_addr;
      next_addr += b->size + 512 * (rng() % 4);
      if (rng() % 2) b->ptr = (rng() % (next_addr >> 9)) << 9;  // arbitrary address order
      b->stream = stream_n(static_cast<int>(rng() % 3));
      index.insert(b.get());
      in.push_back(b.get());
      storage.push_back(std::move(b));
    } else if (what < 7 || in.size() >= cap) {
      const std::size_t i = rng() % in.size();
      index.erase(in[i]);
      in[i] = in.back();
      in.pop_back();
    } else {
      const StreamHandle s = stream_n(static_cast<int>(rng() % 4));  // stream 3: never used
      const std::size_t size = (static_cast<std::size_t>(std::exp2(logsize(rng))) / 512 + 1) * 512;
      Block* got = index.best_fit(s, size);
      Block* want = brute_best(in, s, size);
      if (in.size() < FreeBlockIndex::kScanLimit) {
        ASSERT_EQ(got, want) << "op " << op << " size " << size;
      } else if (got) {
        ASSERT_EQ(got->stream, s);
        ASSERT_GE(got->size, size);
      } else {
        // A miss is only allowed when no block fits at all (bins are searched up to the
        // first non-empty larger one, which always fits).
        ASSERT_EQ(want, nullptr) << "op " << op;
      }
      if (got && want && FreeBlockIndex::bin_of(got->size) == FreeBlockIndex::bin_of(want->size))
        ASSERT_LE(got->size, want->size * 17 / 16 + 512) << "near-best fit within a bin";
    }
    ASSERT_EQ(index.size(), in.size());
  }
  // blocks() lists every member once.
  auto listed = index.blocks();
  std::sort(listed.begin(), listed.end());
  auto expect = in;
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(listed, expect);
  for (Block* b : in) index.erase(b);
  EXPECT_TRUE(index.empty());
  EXPECT_EQ(index.best_fit(stream_n(0), 512), nullptr);
}

// Streams that come and go (one per request) reuse bins instead of growing the index.
TEST(FreeBlockIndex, IdleStreamBinsAreReused) {
  FreeBlockIndex index;
  std::vector<std::unique_ptr<Block>> storage;
  auto make = [&](int stream, std::size_t size) {
    auto b = std::make_unique<Block>();
    b->size = size;
    b->ptr = (storage.size() + 1) << 20;
    b->stream = stream_n(stream);
    storage.push_back(std::move(b));
    return storage.back().get();
  };
  for (int i = 0; i < 1000; ++i) {  // one stream at a time holds a free block
    Block* b = make(100 + i, 4096);
    index.insert(b);
    EXPECT_EQ(index.best_fit(stream_n(100 + i), 4096), b);
    index.erase(b);
  }
  EXPECT_EQ(index.stream_slots(), 1u);
  std::vector<Block*> live;  // ten at a time
  for (int i = 0; i < 10; ++i) {
    live.push_back(make(5000 + i, 8192));
    index.insert(live.back());
  }
  EXPECT_LE(index.stream_slots(), 10u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(index.best_fit(stream_n(5000 + i), 8192), live[static_cast<std::size_t>(i)]);
    EXPECT_EQ(index.best_fit(stream_n(100 + i), 512), nullptr);  // idle streams: nothing
  }
  for (Block* b : live) index.erase(b);
  EXPECT_TRUE(index.empty());
}
