// Pluggable allocators: routing through a plugged allocator keeps stats working, switching
// back restores the caching allocator, memory from either is freed by its owner.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include "backend/backend.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/memory.hpp"
#include "memory/pluggable.hpp"

using namespace cudakit;

namespace {
std::atomic<int> g_allocs{0}, g_frees{0};
void* test_alloc(ssize_t size, int device, void*) {
  ++g_allocs;
  return detail::backend().mem_alloc(device, static_cast<std::size_t>(size));
}
void test_free(void* p, ssize_t, int device, void*) {
  ++g_frees;
  detail::backend().mem_free(device, p);
}
}  // namespace

TEST(MemoryPluggable, StatsKeepWorkingThroughAPluggedAllocator) {
  void* native = caching_allocator_alloc(4096);
  const auto base = memory_allocated();
  memory::set_plugged_allocator(
      std::make_shared<memory::PluggedAllocator>(&test_alloc, &test_free, "test"));
  void* p = caching_allocator_alloc(1000);
  EXPECT_EQ(g_allocs.load(), 1);
  EXPECT_EQ(memory_allocated(), base + 1000);
  EXPECT_EQ(memory_stats()["allocation.all.current"], 2);
  {
    Allocation a = allocate_device(300);
    EXPECT_EQ(g_allocs.load(), 2);
  }
  EXPECT_EQ(g_frees.load(), 1);
  reset_current_allocator();
  caching_allocator_delete(p);  // freed by the plugged allocator that made it
  EXPECT_EQ(g_frees.load(), 2);
  caching_allocator_delete(native);
  EXPECT_EQ(memory_allocated(), base - 4096 + 0 * 1);
  EXPECT_EQ(memory_stats()["allocated_bytes.all.peak"] >= 1000, true);
}

TEST(MemoryPluggable, MemPoolSegmentsComeFromItsAllocator) {
  const int allocs_before = g_allocs.load(), frees_before = g_frees.load();
  const auto base = memory_allocated();
  {
    PluggableAllocator source(&test_alloc, &test_free, "pool-source");
    MemPool pool(source);
    void* p = nullptr;
    void* q = nullptr;
    {
      UseMemPool use(pool);
      p = caching_allocator_alloc(1000);
      q = caching_allocator_alloc(3000);  // same small segment: one source allocation
    }
    EXPECT_EQ(g_allocs.load() - allocs_before, 1);
    EXPECT_EQ(memory_allocated(), base + 1024 + 3072);
    void* outside = caching_allocator_alloc(1000);  // not routed: the device, not the source
    EXPECT_EQ(g_allocs.load() - allocs_before, 1);
    caching_allocator_delete(outside);
    caching_allocator_delete(p);
    caching_allocator_delete(q);
    EXPECT_EQ(memory_allocated(), base);
  }  // pool released: its segment goes back to the source allocator
  EXPECT_EQ(g_frees.load() - frees_before, 1);
}
