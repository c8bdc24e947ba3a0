// ActiveMap (the allocator's live blocks by address) against std::unordered_map: random
// inserts, finds and erases, with keys drawn so that probe runs collide and wrap around the
// end of the table, across several growths; then every member is found and iterated once.
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

#include "memory/active_map.hpp"
#include "memory/block.hpp"

using cudakit::memory::ActiveMap;
using cudakit::memory::Block;

namespace {

void check_same(const ActiveMap& m, const std::unordered_map<std::uintptr_t, Block*>& model) {
  ASSERT_EQ(m.size(), model.size());
  std::size_t seen = 0;
  m.for_each([&](Block* b) {
    ++seen;
    auto it = model.find(b->ptr);
    ASSERT_NE(it, model.end());
    EXPECT_EQ(it->second, b);
  });
  EXPECT_EQ(seen, model.size());
  for (const auto& [k, b] : model) EXPECT_EQ(m.find(k), b);
}

TEST(ActiveMap, MatchesUnorderedMap) {
  std::mt19937_64 rng(31);
  // Keys as block addresses are: multiples of 512, from a few small ranges (dense runs) and
  // anywhere (sparse), so both clustered and scattered probe runs occur.
  std::vector<Block> blocks(20000);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::uintptr_t base = (i % 3 == 0) ? 0x7f0000000000ull : (i % 3 == 1) ? 0x10000ull
                                                                                 : (rng() << 9);
    blocks[i].ptr = (i % 3 == 2) ? base : base + 512 * i;
  }
  ActiveMap m;
  std::unordered_map<std::uintptr_t, Block*> model;
  for (int round = 0; round < 6; ++round) {
    // Grow to a live count that forces rebuilds, then shrink, then churn at a steady count.
    const std::size_t target = round % 2 ? 300 : 5000 + 2000 * round;
    for (int op = 0; op < 40000; ++op) {
      Block* b = &blocks[rng() % blocks.size()];
      const bool add = model.size() < target ? rng() % 4 != 0 : rng() % 4 == 0;
      if (add) {
        const bool fresh = model.emplace(b->ptr, b).second;
        ASSERT_EQ(m.insert(b->ptr, b), fresh);
      } else {
        const bool present = model.erase(b->ptr) == 1;
        ASSERT_EQ(m.erase(b->ptr), present);
      }
      if (op % 997 == 0) {
        ASSERT_NO_FATAL_FAILURE(check_same(m, model));
        const std::uintptr_t absent = 0x123456789000ull + 512 * static_cast<std::uintptr_t>(op);
        EXPECT_EQ(m.find(absent), model.count(absent) ? model[absent] : nullptr);
      }
    }
    ASSERT_NO_FATAL_FAILURE(check_same(m, model));
  }
}

TEST(ActiveMap, EraseSlotKeepsRunsReachable) {
  // Every key of a long run hashed anywhere: erase from the middle of runs via slot_of.
  ActiveMap m;
  std::vector<Block> blocks(400);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].ptr = 0x200000 + 512 * i;
    ASSERT_TRUE(m.insert(blocks[i].ptr, &blocks[i]));
  }
  for (std::size_t i = 0; i < blocks.size(); i += 2) {
    const std::size_t s = m.slot_of(blocks[i].ptr);
    ASSERT_NE(s, ActiveMap::npos);
    EXPECT_EQ(m.at(s), &blocks[i]);
    m.erase_slot(s);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i)
    EXPECT_EQ(m.find(blocks[i].ptr), i % 2 ? &blocks[i] : nullptr);
  EXPECT_EQ(m.size(), blocks.size() / 2);
}

}  // namespace
