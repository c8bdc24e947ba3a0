// 16-thread stress of the public alloc/free/record_stream path: no two live allocations
// overlap (tags survive), statistics return to zero. And 8 threads over expandable segments
// whose pages move.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "cudakit/allocation.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/stream.hpp"
#include "backend/backend.hpp"
#include "memory/config.hpp"
#include "memory/device_allocator.hpp"

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

// Expandable segments under 8 threads whose live set changes shape (small blocks, then large
// ones that do not fit the holes): pages move between places (unmapped outside the locks,
// mapped again from spare handles) while other threads allocate and free. No two live blocks
// overlap, and every physical chunk is released at the end.
TEST(MemoryThreads, ExpandablePagesMoveUnderEightThreads) {
  memory::DeviceAllocator a(0, detail::backend(),
                            memory::AllocatorConfig::parse("expandable_segments:True"));
  constexpr std::size_t kMiB = std::size_t(1) << 20;
  const bool touch = std::string(detail::backend().name()) == "emulated";
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      std::vector<std::pair<void*, std::size_t>> live;
      auto check_free = [&](std::size_t k) {
        auto [p, n] = live[k];
        auto* c = static_cast<unsigned char*>(p);
        const auto tag = static_cast<unsigned char>(t + 1);
        if (touch && (c[0] != tag || c[n - 1] != tag)) failures++;
        a.free(p);
        live[k] = live.back();
        live.pop_back();
      };
      for (int i = 0; i < 1500; ++i) {
        const bool large = (i / 250) % 2 == 1;  // phases of small and large blocks
        if (live.size() < 12 && (rng() % 2 || live.empty())) {
          const std::size_t n = large ? (20 + rng() % 20) * kMiB : (1 + rng() % 8) * kMiB + rng() % 4096;
          void* p = reinterpret_cast<void*>(a.malloc(n, nullptr)->ptr);
          if (touch) {
            auto* c = static_cast<unsigned char*>(p);
            c[0] = c[n - 1] = static_cast<unsigned char>(t + 1);
          }
          live.emplace_back(p, n);
        } else {
          check_free(rng() % live.size());
        }
      }
      while (!live.empty()) check_free(live.size() - 1);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0) << "live allocations overlapped";
  const auto& calls = a.vm_calls();
  RecordProperty("reused_chunks", static_cast<int>(calls.reused.load()));
  EXPECT_GT(calls.reused.load(), 0u) << "the shape changes moved pages";
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
  EXPECT_EQ(calls.create.load(), calls.destroy.load()) << "every physical chunk released";
}
