// Caching allocator behaviour on the emulated backend: reuse, splitting/merging, stats,
// stream ordering, record_stream, empty_cache, expandable segments, pools, bad input.
#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/stream.hpp"
#include "memory/config.hpp"
#include "memory/device_allocator.hpp"

using namespace cudakit;
using memory::AllocatorConfig;
using memory::DeviceAllocator;
using memory::kMiB;

namespace {
bool emulated() { return std::string(detail::backend().name()) == "emulated"; }

DeviceAllocator make(const std::string& conf = "") {
  return DeviceAllocator(0, detail::backend(), AllocatorConfig::parse(conf));
}

// Makes `s` busy (a host task that stands for a kernel) until `release` is set.
void keep_busy_until(std::atomic<bool>& release, Stream& s) {
  s.launch_host_func([&release] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
}
}  // namespace

TEST(MemoryAllocator, AllocationContractRoundTrip) {
  Allocation a = allocate_device(1000);
  ASSERT_TRUE(a);
  EXPECT_EQ(a.size(), 1000u);
  EXPECT_EQ(a.device(), current_device());
  EXPECT_GE(memory_allocated(), 1024u);
  void* p = a.get();
  a.reset();
  EXPECT_FALSE(a);
  Allocation b = allocate_device(1000);
  EXPECT_EQ(b.get(), p) << "a freed block is reused at once on the same stream";
  Allocation z = allocate_device(0);
  EXPECT_FALSE(z);
  Allocation h = allocate_host(4096, true);
  ASSERT_TRUE(h);
  std::memset(h.get(), 1, 4096);
  EXPECT_EQ(h.kind(), MemoryKind::pinned_host);
  Allocation pg = allocate_host(100, false);
  ASSERT_TRUE(pg);
}

TEST(MemoryAllocator, RoundingSplittingAndStats) {
  DeviceAllocator a = make("expandable_segments:False");  // plain segments' sizes;
  auto* b1 = a.malloc(1, nullptr);
  EXPECT_EQ(b1->size, 512u);
  EXPECT_EQ(b1->requested, 1u);
  auto s = a.stats();
  EXPECT_EQ(s.allocated_bytes[0].current, 512);
  EXPECT_EQ(s.allocated_bytes[1].current, 512);  // small pool
  EXPECT_EQ(s.reserved_bytes[0].current, static_cast<std::int64_t>(2 * kMiB));
  EXPECT_EQ(s.requested_bytes[0].current, 1);
  EXPECT_EQ(s.segment[0].current, 1);
  EXPECT_EQ(s.inactive_split[0].current, 1);
  auto* b2 = a.malloc(3000, nullptr);
  EXPECT_EQ(b2->size, 3072u);
  EXPECT_EQ(b2->ptr, b1->ptr + 512) << "split from the same small segment";
  auto* big = a.malloc(5 * kMiB, nullptr);
  EXPECT_EQ(a.stats().reserved_bytes[2].current, static_cast<std::int64_t>(20 * kMiB));
  ASSERT_TRUE(a.free(reinterpret_cast<void*>(b1->ptr)));
  ASSERT_TRUE(a.free(reinterpret_cast<void*>(b2->ptr)));
  ASSERT_TRUE(a.free(reinterpret_cast<void*>(big->ptr)));
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.allocation[0].current, 0);
  EXPECT_EQ(s.active[0].current, 0);
  EXPECT_EQ(s.inactive_split[0].current, 0) << "merged back into whole segments";
  EXPECT_EQ(s.allocated_bytes[0].peak, static_cast<std::int64_t>(512 + 3072 + 5 * kMiB));
  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_EQ(s.segment[0].current, 0);
  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(s.num_device_free, 2);
  EXPECT_FALSE(a.free(reinterpret_cast<void*>(b1->ptr))) << "double free is rejected";
}

TEST(MemoryAllocator, StreamOrderedReuse) {
  // Plain segments: a block's cache belongs to its stream. (Expandable segments, the default,
  // move the pages of an idle stream's free blocks to where they are needed instead: the
  // stream-ordering guarantee there is the idle check, ExpandableSegmentsMovePagesOfIdleStreams.)
  DeviceAllocator a = make("expandable_segments:False");
  Stream s1(0), s2(0);
  auto* b = a.malloc(4 * kMiB, s1.handle());
  const auto p = b->ptr;
  a.free(reinterpret_cast<void*>(p));
  auto* c = a.malloc(4 * kMiB, s2.handle());
  EXPECT_NE(c->ptr, p) << "a block freed on s1 is not handed to s2";
  auto* d = a.malloc(4 * kMiB, s1.handle());
  EXPECT_EQ(d->ptr, p);
  a.free(reinterpret_cast<void*>(c->ptr));
  a.free(reinterpret_cast<void*>(d->ptr));
}

// Expandable segments (the default) move free pages between streams, but only from a stream
// that is idle: a block freed on a busy stream may still be read by work queued before the
// free, so its pages stay where they are and the other stream gets new ones.
TEST(MemoryAllocator, ExpandableSegmentsMovePagesOfIdleStreams) {
  DeviceAllocator a = make("expandable_segments:True");
  Stream s1(0), s2(0);
  std::atomic<bool> release{false};
  auto* b = a.malloc(64 * kMiB, s1.handle());
  const auto lo = b->ptr, hi = b->ptr + b->size;
  keep_busy_until(release, s1);
  a.free(reinterpret_cast<void*>(lo));  // s1's queued work may still use it
  auto* c = a.malloc(64 * kMiB, s2.handle());  // over the budget: pages would move
  EXPECT_TRUE(c->ptr + c->size <= lo || c->ptr >= hi);
  EXPECT_GE(a.stats().reserved_bytes[0].current, static_cast<std::int64_t>(128 * kMiB))
      << "s1's pages were moved while s1 was busy";
  release = true;
  s1.sync();
  a.free(reinterpret_cast<void*>(c->ptr));
  auto* d = a.malloc(128 * kMiB, s2.handle());  // s1 idle now: its pages may move
  EXPECT_LE(a.stats().reserved_bytes[0].current, static_cast<std::int64_t>(136 * kMiB));
  a.free(reinterpret_cast<void*>(d->ptr));
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
}

// A block used by another stream without record_stream (torch's test_cudnn_multiple_threads_
// same_device does it: a default-stream tensor read by a side stream's convolution, then
// freed): its own stream is idle, but the other stream's work still reads the pages, so they
// must not be unmapped while any stream that allocated here is busy (unmapping them faulted
// with an illegal address on the H200; torch's default mode only races there).
TEST(MemoryAllocator, ExpandablePagesStayWhileAnotherStreamMayReadThem) {
  DeviceAllocator a = make("expandable_segments:True");
  Stream s1(0), reader(0), s3(0);
  std::atomic<bool> release{false};
  auto* b = a.malloc(64 * kMiB, s1.handle());  // made on s1 (idle from now on)
  const auto lo = b->ptr, hi = b->ptr + b->size;
  auto* own = a.malloc(2 * kMiB, reader.handle());  // the reader allocates its own outputs
  keep_busy_until(release, reader);  // stands for a kernel on `reader` that reads b
  a.free(reinterpret_cast<void*>(lo));  // freed on its (idle) stream, no record_stream
  auto* c = a.malloc(64 * kMiB, s3.handle());  // pages would move here
  EXPECT_TRUE(c->ptr + c->size <= lo || c->ptr >= hi);
  EXPECT_GE(a.stats().reserved_bytes[0].current, static_cast<std::int64_t>(128 * kMiB))
      << "b's pages were moved while a stream that may read them was busy";
  release = true;
  reader.sync();
  a.free(reinterpret_cast<void*>(c->ptr));
  a.free(reinterpret_cast<void*>(own->ptr));
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
}

// A stream destroyed while its work still runs (cuStreamDestroy returns at once): the blocks
// it freed keep their pages until that work is done, and the allocator never asks the driver
// about the destroyed handle (that crashed driver 580): it asks the fence event recorded when
// the stream was retired (instrument/stream_lifetime.hpp). Through the process's allocator,
// so that Stream's destructor reaches it by the installed hook.
TEST(MemoryAllocator, ADestroyedBusyStreamsPagesStayUntilItsWorkIsDone) {
  DeviceAllocator& a = memory::device_allocator(0);
  a.empty_cache();
  const auto reserved0 = a.stats().reserved_bytes[0].current;
  std::atomic<bool> release{false};
  std::uintptr_t lo, hi;
  NativeStream doomed_handle;
  {
    Stream doomed(0);
    doomed_handle = doomed.handle();
    auto* b = a.malloc(64 * kMiB, doomed.handle());
    lo = b->ptr;
    hi = b->ptr + b->size;
    keep_busy_until(release, doomed);  // still running after the stream is destroyed
    a.free(reinterpret_cast<void*>(lo));
  }  // ~Stream: retired (fence recorded), then destroyed
  Stream other(0);
  auto* c = a.malloc(64 * kMiB, other.handle());  // pages would move here
  if (other.handle() == doomed_handle) {
    // The driver gave the destroyed stream's handle to `other` (CUDA does at once): the
    // freed block is other's own in stream order, so other must wait for the old work.
    EXPECT_FALSE(other.is_done()) << "a stream reusing a destroyed stream's handle (and its "
                                   "free blocks) does not wait for that stream's work";
  } else {
    EXPECT_TRUE(c->ptr + c->size <= lo || c->ptr >= hi);
    EXPECT_GE(a.stats().reserved_bytes[0].current - reserved0,
              static_cast<std::int64_t>(128 * kMiB))
        << "pages moved while the destroyed stream's work was still running";
  }
  EXPECT_EQ(a.retired_streams_pending(), other.handle() == doomed_handle ? 0u : 1u);
  release = true;
  for (int i = 0; i < 5000 && a.retired_streams_pending() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the host task returns
  ASSERT_EQ(a.retired_streams_pending(), 0u) << "the fence never completed";
  // 192 MiB on `other` fit in the 64 MiB reserved there plus the destroyed stream's 64 MiB
  // moved, plus 64 MiB new.
  a.free(reinterpret_cast<void*>(c->ptr));
  c = a.malloc(192 * kMiB, other.handle());
  const bool moved =
      a.stats().reserved_bytes[0].current - reserved0 <= static_cast<std::int64_t>(200 * kMiB);
  EXPECT_TRUE(moved) << "the destroyed stream's pages never moved after its work finished";
  a.free(reinterpret_cast<void*>(c->ptr));
  other.sync();
  a.empty_cache();
}

// A stream whose handle a destroyed, still-busy stream had (the driver hands handles out again
// at once) makes its first allocation inside a graph capture: a new side stream's first
// kernel (torch's test pattern; test_graphs_on_a_green_stream failed so on the H200). The
// allocator must neither query the old stream's fence event in a way CUDA forbids during a
// capture nor put a wait on it into the capture: the capture stays valid, and the wait comes
// at the stream's first allocation after it.
TEST(MemoryAllocator, AReusedHandlesFirstAllocationInACaptureLeavesTheCaptureValid) {
  detail::Backend& be = detail::backend();
  DeviceAllocator a = make();
  Stream s(0);
  std::atomic<bool> release{false};
  auto* b = a.malloc(2 * kMiB, s.handle());
  keep_busy_until(release, s);  // the old stream's work, still running
  a.free(reinterpret_cast<void*>(b->ptr));
  a.retire_stream(s.handle());  // as if s were destroyed and its handle came back at once
  ASSERT_EQ(a.retired_streams_pending(), 1u);
  const MempoolId pool{0, 4242};
  a.create_pool(pool, false, false);
  const detail::StreamHandle h = s.handle();
  a.begin_allocate_to_pool(pool, [h](detail::StreamHandle x) { return x == h; });
  be.stream_begin_capture(h, detail::CaptureMode::global);
  auto* c = a.malloc(1 * kMiB, h);
  EXPECT_EQ(be.stream_capture_status(h, nullptr), detail::CaptureStatus::active)
      << "the first allocation of a reused handle invalidated the capture";
  a.free(reinterpret_cast<void*>(c->ptr));
  detail::GraphHandle g = nullptr;
  try {
    g = be.stream_end_capture(h);
  } catch (const Error&) {
  }
  a.end_allocate_to_pool(pool);
  if (g) be.graph_destroy(g);
  EXPECT_EQ(a.retired_streams_pending(), 1u) << "the old fence was dropped without a wait";
  auto* d = a.malloc(2 * kMiB, h);  // first allocation after the capture: the wait
  EXPECT_EQ(a.retired_streams_pending(), 0u);
  EXPECT_FALSE(s.is_done()) << "the stream does not wait for the old stream's work";
  release = true;
  s.sync();
  // The pool goes only now: its segment's cuMemFree synchronizes the device, which would wait
  // for the old stream's work, which waits for `release` (a deadlock on the H200).
  a.release_pool(pool);
  a.free(reinterpret_cast<void*>(d->ptr));
  a.empty_cache();
}

TEST(MemoryAllocator, RecordStreamDefersReuse) {
  DeviceAllocator a = make();
  Stream s1(0), s2(0);
  auto* b = a.malloc(1024, s1.handle());
  const auto p = b->ptr;
  std::atomic<bool> release{false};
  keep_busy_until(release, s2);
  ASSERT_TRUE(a.record_stream(reinterpret_cast<void*>(p), s2.handle()));
  a.free(reinterpret_cast<void*>(p));
  auto st = a.stats();
  EXPECT_EQ(st.allocation[0].current, 0);
  EXPECT_EQ(st.active[0].current, 1) << "pending on s2's work";
  auto* c = a.malloc(1024, s1.handle());
  EXPECT_NE(c->ptr, p) << "not reused while s2 still runs";
  release = true;
  s2.sync();
  a.free(reinterpret_cast<void*>(c->ptr));
  auto* d = a.malloc(1024, s1.handle());
  EXPECT_EQ(d->ptr, p) << "reused once s2's event completed";
  a.free(reinterpret_cast<void*>(d->ptr));
  EXPECT_EQ(a.stats().active[0].current, 0);
}

namespace {
// Physical chunk of the large pool with the default settings (expandable_segment.hpp).
constexpr std::size_t kChunk = AllocatorConfig{}.expandable_chunk_pages * 2 * kMiB;
std::int64_t chunks_of(std::size_t bytes) {
  return static_cast<std::int64_t>((bytes + kChunk - 1) / kChunk * kChunk);
}
}  // namespace

TEST(MemoryAllocator, ExpandableSegmentsGrowAndShrink) {
  DeviceAllocator a = make("expandable_segments:True");
  auto* b1 = a.malloc(30 * kMiB, nullptr);
  auto* b2 = a.malloc(50 * kMiB, nullptr);
  const auto p1 = b1->ptr;
  EXPECT_EQ(b2->ptr, b1->ptr + 30 * kMiB) << "contiguous in one reservation";
  if (emulated())  // host-addressable only on the emulated backend
    std::memset(reinterpret_cast<void*>(b1->ptr), 7, 30 * kMiB);
  if (emulated())  // host-addressable only on the emulated backend
    std::memset(reinterpret_cast<void*>(b2->ptr), 9, 50 * kMiB);
  auto s = a.stats();
  EXPECT_EQ(s.reserved_bytes[0].current, chunks_of(80 * kMiB)) << "whole chunks, nothing more";
  a.free(reinterpret_cast<void*>(b1->ptr));
  auto* b3 = a.malloc(70 * kMiB, nullptr);  // does not fit the 30 MiB hole
  EXPECT_EQ(b3->ptr, b2->ptr + 50 * kMiB);
  a.free(reinterpret_cast<void*>(b2->ptr));
  a.empty_cache();
  s = a.stats();
  // b3 starts at 80 MiB: a multiple of the chunk size, so it covers chunks_of(70 MiB).
  EXPECT_EQ(s.reserved_bytes[0].current, chunks_of(70 * kMiB)) << "free pages were unmapped";
  auto* b4 = a.malloc(80 * kMiB, nullptr);  // reuses (remaps) the address range in front
  EXPECT_EQ(b4->ptr, p1);
  if (emulated())  // host-addressable only on the emulated backend
    std::memset(reinterpret_cast<void*>(b4->ptr), 1, 80 * kMiB);
  a.free(reinterpret_cast<void*>(b3->ptr));
  a.free(reinterpret_cast<void*>(b4->ptr));
  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.inactive_split_bytes[0].current, 0);
}

// Over the footprint budget (live high-water mark + 1/32), free chunks elsewhere are unmapped
// first and their physical memory is mapped where the allocation needs it: the footprint
// never holds both (the unmaps run before the map, outside the locks), and the moved chunks
// are the same physical allocations (no release + create).
TEST(MemoryAllocator, ExpandableSegmentsMovePagesWithinBudget) {
  DeviceAllocator a = make("expandable_segments:True");
  auto* x = a.malloc(64 * kMiB, nullptr);
  auto* y = a.malloc(64 * kMiB, nullptr);
  a.free(reinterpret_cast<void*>(x->ptr));  // a 64 MiB hole in front of y
  const auto& calls = a.vm_calls();
  const auto created = calls.create.load();
  const auto before = a.stats();
  auto* z = a.malloc(100 * kMiB, nullptr);  // does not fit the hole
  if (emulated()) std::memset(reinterpret_cast<void*>(z->ptr), 3, 100 * kMiB);
  const auto s = a.stats();
  const std::int64_t live_hwm = 164 * kMiB;
  EXPECT_LE(s.reserved_bytes[0].peak, live_hwm + live_hwm / 32)
      << "pages moved: the hole was unmapped before the new pages were mapped";
  EXPECT_EQ(calls.reused.load(), 8u) << "the hole's eight chunks were mapped again";
  EXPECT_EQ(calls.create.load() - created,
            static_cast<std::uint64_t>((chunks_of(100 * kMiB) - 64 * kMiB) / kChunk))
      << "only the chunks beyond the moved ones were created";
  EXPECT_EQ(s.num_device_free - before.num_device_free, 1) << "one unmap (of the hole)";
  EXPECT_EQ(s.reserved_bytes[0].current, 128 * kMiB - 64 * kMiB + chunks_of(100 * kMiB));
  a.free(reinterpret_cast<void*>(y->ptr));
  a.free(reinterpret_cast<void*>(z->ptr));
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
  EXPECT_EQ(calls.create.load(), calls.destroy.load()) << "every physical chunk released";
}

// A run mapped just below a free mapped block (an unmapped chunk with a free hole above it,
// as page moves and empty_cache leave them) is split by the allocation that mapped it: its
// free tail must join the hole above. Before the fix the two stayed apart (server_bert_threads'
// replay kept such pairs for thousands of events), and a request fitting only both together
// mapped new pages instead.
TEST(MemoryAllocator, ExpandableSplitTailJoinsTheFreeBlockAbove) {
  DeviceAllocator a = make("expandable_segments:True");
  auto* lo = a.malloc(kChunk, nullptr);
  auto* mid = a.malloc(2 * kChunk - kMiB, nullptr);  // [kChunk, 3 kChunk - 1 MiB)
  auto* hi = a.malloc(kChunk, nullptr);
  ASSERT_EQ(mid->ptr, lo->ptr + kChunk);
  a.free(reinterpret_cast<void*>(mid->ptr));
  a.empty_cache();  // unmaps the whole chunk [kChunk, 2 kChunk); the rest stays a free hole
  const std::size_t hole = kChunk - kMiB;
  const std::size_t want = kChunk - kMiB / 2;  // fits neither the hole nor the rest alone
  auto* x = a.malloc(want, nullptr);
  ASSERT_EQ(x->ptr, lo->ptr + kChunk) << "mapped the unmapped chunk below the hole";
  const auto maps = a.vm_calls().map.load();
  // The chunk's free tail (kMiB / 2) and the hole above it together hold `want` exactly.
  ASSERT_EQ(kChunk - want + hole, want);
  auto* y = a.malloc(want, nullptr);
  EXPECT_EQ(y->ptr, x->ptr + want) << "served by the tail and the hole together";
  EXPECT_EQ(a.vm_calls().map.load(), maps) << "no new pages for it";
  for (auto* b : {lo, hi, x, y}) a.free(reinterpret_cast<void*>(b->ptr));
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
}

// A live set growing in small steps maps ahead (within the budget), so most allocations need
// no map call.
TEST(MemoryAllocator, ExpandableSegmentsMapAhead) {
  DeviceAllocator a = make("expandable_segments:True");
  auto* big = a.malloc(1024 * kMiB, nullptr);  // raises the live high-water mark
  a.free(reinterpret_cast<void*>(big->ptr));
  a.empty_cache();
  const auto before = a.stats().num_device_alloc;
  std::vector<void*> v;
  for (int i = 0; i < 16; ++i) v.push_back(reinterpret_cast<void*>(a.malloc(10 * kMiB, nullptr)->ptr));
  EXPECT_LE(a.stats().num_device_alloc - before, 5) << "16 allocations of 10 MiB";
  for (void* p : v) a.free(p);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
}

// A run of chunks is mapped with one access grant (cuMemSetAccess on the GPU), not one per
// chunk.
TEST(MemoryAllocator, ExpandableSegmentsGrantAccessOncePerRun) {
  DeviceAllocator a = make("expandable_segments:True");
  auto* b = a.malloc(100 * kMiB, nullptr);
  if (emulated()) std::memset(reinterpret_cast<void*>(b->ptr), 5, 100 * kMiB);
  const auto& calls = a.vm_calls();
  EXPECT_GE(calls.map.load(), static_cast<std::uint64_t>(chunks_of(100 * kMiB) / kChunk));
  EXPECT_EQ(calls.access.load(), 1u);
  a.free(reinterpret_cast<void*>(b->ptr));
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
  EXPECT_EQ(calls.unmap.load(), calls.map.load());
}

// A large pool's chunk grows with the pool (expandable_segment.hpp): a power-of-two
// multiple of 8 MiB up to the footprint slack (pool / 32), at most 128 MiB; pools under
// 512 MiB keep 8 MiB chunks. Fewer, bigger chunks: fewer create/map/unmap/destroy calls.
TEST(MemoryAllocator, ExpandableSegmentsChunksGrowWithPool) {
  DeviceAllocator a = make("expandable_segments:True,expandable_segments_max_chunk_mb:128");
  const auto& calls = a.vm_calls();
  auto* small = a.malloc(400 * kMiB, nullptr);  // a 400 MiB pool: 8 MiB chunks
  EXPECT_EQ(calls.create.load(), 50u);
  a.free(reinterpret_cast<void*>(small->ptr));
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
  const auto created = calls.create.load();
  auto* big = a.malloc(4096 * kMiB, nullptr);  // a 4 GiB pool: 128 MiB chunks
  // 32 chunks of 128 MiB, plus one of 64 MiB mapped ahead (up to the next 80 MiB boundary).
  EXPECT_EQ(calls.create.load() - created, 33u);
  EXPECT_EQ(calls.access.load(), 2u) << "one access grant per allocation's run of chunks";
  const auto s = a.stats();
  EXPECT_LE(s.reserved_bytes[0].current, static_cast<std::int64_t>(4096 * kMiB + 4096 * kMiB / 32));
  DeviceAllocator::ExpandableShare share;
  ASSERT_TRUE(a.share_expandable(reinterpret_cast<void*>(big->ptr), share));
  ASSERT_FALSE(share.chunks.empty());
  EXPECT_EQ(share.chunks.front().bytes, 128 * kMiB);
  EXPECT_EQ(share.chunks.back().bytes, 128 * kMiB);
  a.free(reinterpret_cast<void*>(big->ptr));
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
  EXPECT_EQ(calls.create.load(), calls.destroy.load()) << "every physical chunk released";
}

TEST(MemoryAllocator, ExpandableSegmentsChunksStopAtTheDefaultCap) {
  DeviceAllocator a = make("expandable_segments:True");
  auto* big = a.malloc(4096 * kMiB, nullptr);  // pool / 32 = 128 MiB, capped at 32 MiB
  DeviceAllocator::ExpandableShare share;
  ASSERT_TRUE(a.share_expandable(reinterpret_cast<void*>(big->ptr), share));
  ASSERT_FALSE(share.chunks.empty());
  for (const auto& c : share.chunks) EXPECT_LE(c.bytes, 32 * kMiB);
  EXPECT_EQ(share.chunks.front().bytes, 32 * kMiB);
  a.free(reinterpret_cast<void*>(big->ptr));
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
}

namespace {
void free_block(DeviceAllocator& a, memory::Block* b) {
  ASSERT_TRUE(a.free(reinterpret_cast<void*>(b->ptr)));
}
}  // namespace

// A chunk is unmapped only when all of it is free, so sparse small survivors in memory first
// mapped for a big block pin whole chunks: at most one chunk (32 MiB by default) per live
// block, and a request on another stream must still fit (review of the 128 MiB version:
// 4096 MiB stayed reserved for 128 MiB live, and the request below ran out of memory).
TEST(MemoryAllocator, ExpandableSegmentsBigChunksPinBoundedMemory) {
  DeviceAllocator a = make("expandable_segments:True");
  const std::size_t total = detail::backend().mem_get_info(0).total;
  if (total < 8192 * kMiB) GTEST_SKIP() << "needs >= 8 GiB of emulated memory";
  free_block(a, a.malloc(4096 * kMiB, nullptr));
  std::vector<memory::Block*> v, keep;
  for (int i = 0; i < 1024; ++i) v.push_back(a.malloc(4 * kMiB, nullptr));
  for (int i = 0; i < 1024; ++i) {
    if (i % 32) free_block(a, v[i]);
    else keep.push_back(v[i]);
  }
  a.empty_cache();
  EXPECT_LE(a.stats().reserved_bytes[0].current,
            static_cast<std::int64_t>(keep.size() * 32 * kMiB))
      << "more than one 32 MiB chunk pinned per live 4 MiB block";
  Stream s2(0);
  memory::Block* other = nullptr;
  try {
    other = a.malloc(total - 4096 * kMiB + 256 * kMiB, s2.handle());
  } catch (const OutOfMemoryError& e) {
    ADD_FAILURE() << "out of memory with 128 MiB live: " << e.what();
  }
  if (other) free_block(a, other);
  for (auto* b : keep) free_block(a, b);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
}

// Spares bigger than the places a mapping can give them cannot be used, so they must not let
// the new chunks pass per_process_memory_fraction (review: peak 4304 MiB against 4300).
TEST(MemoryAllocator, ExpandableSegmentsUnusableSparesKeepTheFractionLimit) {
  const std::size_t total = detail::backend().mem_get_info(0).total;
  if (total < 8192 * kMiB) GTEST_SKIP() << "needs >= 8 GiB of emulated memory";
  const std::size_t limit = 4300 * kMiB;
  DeviceAllocator a = make("expandable_segments:True,expandable_segments_max_chunk_mb:128");
  a.set_memory_fraction(double(limit) / double(total) + 1e-9);
  Stream sb(0);
  auto* b1 = a.malloc(8 * kMiB, sb.handle());  // stream B's segment: unit 0 in use
  free_block(a, a.malloc(4096 * kMiB, nullptr));  // 128 MiB chunks on the default stream
  auto* b2 = a.malloc(200 * kMiB, sb.handle());  // over the budget: those chunks move
  EXPECT_LE(a.stats().reserved_bytes[0].peak, static_cast<std::int64_t>(limit))
      << "reserved went past per_process_memory_fraction";
  free_block(a, b2);
  free_block(a, b1);
  a.empty_cache();
}

TEST(MemoryAllocator, MaxSplitSizeKeepsOversizeBlocksWhole) {
  // max_split_size_mb applies to plain segments (torch's expandable segments ignore it too).
  DeviceAllocator a = make("max_split_size_mb:64,expandable_segments:False");
  auto* big = a.malloc(100 * kMiB, nullptr);
  const auto p = big->ptr;
  a.free(reinterpret_cast<void*>(p));
  auto* small = a.malloc(30 * kMiB, nullptr);
  EXPECT_NE(small->ptr, p) << "an oversize block is not split for a small request";
  auto* again = a.malloc(95 * kMiB, nullptr);
  EXPECT_EQ(again->ptr, p) << "reused (unsplit) for a request within the rounding limit";
  EXPECT_EQ(again->size, 100 * kMiB);
  EXPECT_EQ(a.stats().oversize_allocations.current, 1);
  a.free(reinterpret_cast<void*>(small->ptr));
  a.free(reinterpret_cast<void*>(again->ptr));
}

TEST(MemoryAllocator, PoolsRouteByThread) {
  MemPool pool;
  EXPECT_EQ(pool.use_count(), 1);
  void* outside = caching_allocator_alloc(4096);
  void* inside = nullptr;
  {
    UseMemPool use(pool);
    inside = caching_allocator_alloc(4096);
    std::thread([&] {
      void* other = caching_allocator_alloc(4096);  // another thread: default pool
      auto info = allocation_info(other);
      ASSERT_TRUE(info);
      caching_allocator_delete(other);
    }).join();
  }
  // The pool's snapshot holds `inside` and not `outside`: a private pool never shares
  // segments with the default pool.
  const std::string snap = memory_snapshot_json(pool.id());
  auto has = [&](void* p) {
    return snap.find("\"address\":" + std::to_string(reinterpret_cast<std::uintptr_t>(p)) + ",") !=
           std::string::npos;
  };
  EXPECT_TRUE(has(inside));
  EXPECT_FALSE(has(outside));
  caching_allocator_delete(inside);
  caching_allocator_delete(outside);
}

TEST(MemoryAllocator, CachingDisabledGoesStraightToTheDevice) {
  empty_cache();
  const auto before = memory_stats_of().num_device_alloc;
  {
    CachingAllocatorDisabled off;
    void* p = caching_allocator_alloc(1000);
    caching_allocator_delete(p);
    void* q = caching_allocator_alloc(1000);
    caching_allocator_delete(q);
  }
  EXPECT_TRUE(caching_allocator_enabled());
  auto s = memory_stats_of();
  EXPECT_EQ(s.num_device_alloc - before, 2);
  EXPECT_EQ(memory_reserved() - memory_allocated(), 0u);
}

TEST(MemoryAllocator, BadInput) {
  int x = 0;
  EXPECT_THROW(caching_allocator_delete(&x), ValueError);
  void* p = caching_allocator_alloc(100);
  caching_allocator_delete(p);
  EXPECT_THROW(caching_allocator_delete(p), ValueError);
  EXPECT_THROW(caching_allocator_alloc(100, 99), ValueError);
  EXPECT_THROW(set_per_process_memory_fraction(1.5), ValueError);
  EXPECT_THROW(set_per_process_memory_fraction(-0.1), ValueError);
  EXPECT_THROW(record_stream(&x, current_stream()), ValueError);
  EXPECT_THROW(caching_allocator_alloc(std::size_t(1) << 62), OutOfMemoryError);
  EXPECT_THROW(PluggableAllocator("/nonexistent/lib.so", "a", "f"), ValueError);
  EXPECT_THROW(PluggableAllocator("libc.so.6", "no_such_alloc", "free"), ValueError);
  // The allocator still works after all of that.
  void* q = caching_allocator_alloc(100);
  EXPECT_NE(q, nullptr);
  caching_allocator_delete(q);
}

TEST(MemoryAllocator, FlatStatsKeysLikeTorch) {
  auto m = memory_stats();
  for (const char* k : {"allocated_bytes.all.current", "reserved_bytes.large_pool.peak",
                        "num_alloc_retries", "num_ooms", "active.small_pool.freed",
                        "inactive_split_bytes.all.allocated", "requested_bytes.all.current",
                        "oversize_allocations.current", "oversize_segments.peak",
                        "max_split_size", "num_device_alloc", "num_sync_all_streams"})
    EXPECT_TRUE(m.count(k)) << k;
  // torch's keys, plus cudakit's per-framework breakdown ("framework.<name>.<stat>.<field>")
  // and the tagged pools' totals ("sleep.<name>")
  std::size_t framework = 0, sleep_keys = 0;
  for (const auto& [k, v] : m) {
    framework += k.rfind("framework.", 0) == 0;
    sleep_keys += k.rfind("sleep.", 0) == 0;
  }
  EXPECT_EQ(m.size() - framework - sleep_keys, 9u * 3 * 4 + 6 + 8);
  EXPECT_EQ(framework, std::size_t(kNumMemoryClients) * 3 * 4);
  EXPECT_EQ(sleep_keys, 5u);
  EXPECT_NE(memory_summary().find("Allocated memory"), std::string::npos);
  EXPECT_EQ(get_allocator_backend(), "native");
}

TEST(MemoryConfig, ParsesTorchSyntaxAndRejectsTypos) {
  auto c = AllocatorConfig::parse(
      "max_split_size_mb:128, garbage_collection_threshold:0.6,expandable_segments:True,"
      "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  EXPECT_EQ(c.max_split_size, 128 * kMiB);
  EXPECT_DOUBLE_EQ(c.garbage_collection_threshold, 0.6);
  EXPECT_TRUE(c.expandable_segments);
  EXPECT_EQ(c.divisions_for(100 * kMiB), 1u);
  EXPECT_EQ(c.divisions_for(300 * kMiB), 1u);  // torch: bucket = floor(log2(MiB))
  EXPECT_EQ(c.divisions_for(600 * kMiB), 2u);
  EXPECT_EQ(c.divisions_for(4096 * kMiB), 8u);
  EXPECT_EQ(AllocatorConfig::parse("roundup_power2_divisions:4").divisions_for(kMiB), 4u);
  EXPECT_EQ(AllocatorConfig::parse("backend:cudaMallocAsync").backend,
            AllocatorConfig::Backend::driver_async);
  for (const char* bad : {"max_split_size_mb:10", "expandable_segment:True", "backend:foo",
                          "garbage_collection_threshold:1.5", "roundup_power2_divisions:3",
                          "expandable_segments:maybe", "max_split_size_mb", "max_split_size_mb:abc"}) {
    try {
      AllocatorConfig::parse(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ValueError& e) {
      std::string what = e.what();
      std::string key = std::string(bad).substr(0, std::string(bad).find(':'));
      EXPECT_NE(what.find(key), std::string::npos) << what;
    }
  }
}

TEST(MemoryAllocator, HostPinnedCacheStats) {
  reset_accumulated_host_memory_stats();
  host_empty_cache();
  void* p;
  {
    Allocation a = allocate_host(3000);
    p = a.get();
  }
  Allocation b = allocate_host(4000);  // same 4 KiB class: reused
  EXPECT_EQ(b.get(), p);
  auto m = host_memory_stats();
  EXPECT_EQ(m["allocations.current"], 1);
  EXPECT_EQ(m["allocated_bytes.current"], 4096);
  EXPECT_EQ(m["num_host_alloc"], 1);
  EXPECT_TRUE(m.count("host_alloc_time.avg"));
}

TEST(MemoryAllocator, DriverAsyncBackendKeepsStats) {
  DeviceAllocator a = make("backend:cudaMallocAsync");
  Stream s1(0), s2(0);
  auto* b = a.malloc(5000, s1.handle());
  if (emulated())  // host-addressable only on the emulated backend
    std::memset(reinterpret_cast<void*>(b->ptr), 3, 5000);
  EXPECT_TRUE(a.record_stream(reinterpret_cast<void*>(b->ptr), s2.handle()));
  auto st = a.stats();
  EXPECT_EQ(st.allocated_bytes[0].current, 5000);
  EXPECT_EQ(st.reserved_bytes[0].current, 5000);
  EXPECT_EQ(st.num_device_alloc, 1);
  EXPECT_TRUE(a.free(reinterpret_cast<void*>(b->ptr)));
  s1.sync();
  st = a.stats();
  EXPECT_EQ(st.allocated_bytes[0].current, 0);
  EXPECT_EQ(st.reserved_bytes[0].current, 0);
  EXPECT_EQ(st.num_device_free, 1);
}

namespace {
// IPC import on a GPU must happen in another process: the test re-runs this binary with
// --gtest_filter=MemoryAllocator.IpcImportInChild and the handle in the environment.
constexpr const char* kIpcEnv = "CUDAKIT_TEST_IPC_HANDLE";

std::string to_hex(const IpcMemHandle& h) {
  std::string out;
  char buf[3];
  for (unsigned char c : h.bytes) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    out += buf;
  }
  return out + ":" + std::to_string(h.device) + ":" + std::to_string(h.offset) + ":" +
         std::to_string(h.size);
}

IpcMemHandle from_hex(const std::string& s) {
  IpcMemHandle h;
  for (std::size_t i = 0; i < sizeof h.bytes; ++i)
    h.bytes[i] = static_cast<unsigned char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  unsigned long long off = 0, size = 0;
  std::sscanf(s.c_str() + 2 * sizeof h.bytes, ":%d:%llu:%llu", &h.device, &off, &size);
  h.offset = off;
  h.size = size;
  return h;
}

int run_child_import(const IpcMemHandle& h) {
  const std::string env = std::string(kIpcEnv) + "=" + to_hex(h);
  std::vector<std::string> envs{env};
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, kIpcEnv, std::strlen(kIpcEnv)) != 0) envs.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", filter = "--gtest_filter=MemoryAllocator.IpcImportInChild";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
}  // namespace

// Runs only as the child of IpcExportImportCollect: opens the parent's handle and checks
// the bytes the parent wrote.
TEST(MemoryAllocator, IpcImportInChild) {
  const char* env = std::getenv(kIpcEnv);
  if (!env) GTEST_SKIP() << "runs as a child process of IpcExportImportCollect";
  IpcMemHandle h = from_hex(env);
  void* p = ipc_import(h);
  ASSERT_NE(p, nullptr);
  unsigned char host[16] = {};
  Stream s(h.device);
  detail::backend().memcpy_async(host, p, sizeof host, s.handle());
  s.sync();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(host[i], static_cast<unsigned char>(i + 7));
  ipc_close(p);
  ipc_collect();
}

TEST(MemoryAllocator, IpcExportImportCollect) {
  if (std::getenv(kIpcEnv)) GTEST_SKIP();
  void* a = caching_allocator_alloc(1000);
  void* b = caching_allocator_alloc(3000);  // same small segment, non-zero offset
  IpcMemHandle hb = ipc_export(b);
  EXPECT_EQ(hb.size, 3000u);
  EXPECT_GT(hb.offset, 0u);
  // No backend opens a handle in the exporting process: a clear error on both.
  EXPECT_THROW(ipc_import(hb), ValueError);
  EXPECT_THROW(ipc_close(b), ValueError);
  if (detail::backend().capabilities().cross_process_ipc) {  // a child process opens it
    unsigned char host[16];
    for (int i = 0; i < 16; ++i) host[i] = static_cast<unsigned char>(i + 7);
    Stream s(hb.device);
    detail::backend().memcpy_async(b, host, sizeof host, s.handle());
    s.sync();
    EXPECT_EQ(run_child_import(hb), 0) << "the child process failed to import the handle";
  }
  ipc_collect();
  int x;
  EXPECT_THROW(ipc_export(&x), ValueError);
  caching_allocator_delete(a);
  caching_allocator_delete(b);
}
