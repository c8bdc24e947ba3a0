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
