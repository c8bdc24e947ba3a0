// 16-thread stress of the public alloc/free/record_stream path: no two live allocations
// overlap (tags survive), statistics return to zero.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "cudakit/allocation.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/stream.hpp"
#include "backend/backend.hpp"

using namespace cudakit;

TEST(MemoryThreads, SixteenThreadStress) {
  const std::size_t base_alloc = memory_allocated();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  Stream side(0);
  // Device memory is host-addressable only on the emulated backend.
  const bool touch = std::string(detail::backend().name()) == "emulated";
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<std::pair<Allocation, unsigned char>> live;
      for (int i = 0; i < 20000; ++i) {
        if (live.size() < 64 && (rng() % 2 || live.empty())) {
          std::size_t n = rng() % 4 == 0 ? (rng() % (4 << 20)) + 1 : (rng() % 8192) + 1;
          Allocation a = allocate_device(n);
          auto tag = static_cast<unsigned char>(t * 16 + i);
          auto* c = static_cast<unsigned char*>(a.get());
          if (touch) c[0] = c[n - 1] = tag;
          if (rng() % 16 == 0) record_stream(a.get(), side);
          live.emplace_back(std::move(a), tag);
        } else {
          std::size_t k = rng() % live.size();
          auto& [a, tag] = live[k];
          auto* c = static_cast<unsigned char*>(a.get());
          if (touch && (c[0] != tag || c[a.size() - 1] != tag)) failures++;
          live[k] = std::move(live.back());
          live.pop_back();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0) << "live allocations overlapped";
  side.sync();
  EXPECT_EQ(memory_allocated(), base_alloc);
  empty_cache();
  auto m = memory_stats();
  EXPECT_EQ(m["active_bytes.all.current"], static_cast<std::int64_t>(base_alloc));
}
