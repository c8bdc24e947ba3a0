// The torch hook table (cudakit/plugin.hpp) and the per-framework breakdown of the statistics:
// every hook does what torch expects of it, and allocations are counted for the framework
// they were made for, exactly (current, peak, totals), whatever path the allocator takes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/plugin.hpp"
#include "cudakit/stream.hpp"
#include "memory/device_allocator.hpp"

using namespace cudakit;

namespace {
constexpr auto kTorch = static_cast<int>(MemoryClient::torch);
constexpr auto kCupy = static_cast<int>(MemoryClient::cupy);
constexpr auto kOwn = static_cast<int>(MemoryClient::cudakit);

ClientMemoryStats client(int c) { return memory_stats_of().by_client[c]; }
CUstream_st* as_torch(NativeStream s) { return static_cast<CUstream_st*>(s); }
}  // namespace

TEST(MemoryPlugin, AllocationsCountForTheirFramework) {
  const MemoryStats before = memory_stats_of();
  void* t = caching_allocator_alloc_for(MemoryClient::torch, 1000);
  void* c = caching_allocator_alloc_for(MemoryClient::cupy, 3 << 20);
  void* own = caching_allocator_alloc(700);
  MemoryStats s = memory_stats_of();
  EXPECT_EQ(s.by_client[kTorch].allocated_bytes.current -
                before.by_client[kTorch].allocated_bytes.current, 1024);  // rounded, as torch
  EXPECT_EQ(s.by_client[kTorch].requested_bytes.current -
                before.by_client[kTorch].requested_bytes.current, 1000);
  EXPECT_EQ(s.by_client[kTorch].allocation.current - before.by_client[kTorch].allocation.current, 1);
  EXPECT_EQ(s.by_client[kCupy].allocated_bytes.current -
                before.by_client[kCupy].allocated_bytes.current, 3 << 20);
  EXPECT_EQ(s.by_client[kOwn].allocated_bytes.current -
                before.by_client[kOwn].allocated_bytes.current, 1024);
  // The frameworks partition the allocated bytes.
  std::int64_t sum = 0;
  for (const auto& cs : s.by_client) sum += cs.allocated_bytes.current;
  EXPECT_EQ(sum, s.allocated_bytes[0].current);
  const auto flat = memory_stats();
  EXPECT_EQ(flat.at("framework.torch.allocated_bytes.current"),
            s.by_client[kTorch].allocated_bytes.current);
  EXPECT_EQ(flat.at("framework.cupy.requested_bytes.current"),
            s.by_client[kCupy].requested_bytes.current);
  EXPECT_TRUE(flat.count("framework.cudakit.allocation.peak"));

  caching_allocator_delete(t);
  caching_allocator_delete(c);
  caching_allocator_delete(own);
  s = memory_stats_of();
  for (int k = 0; k < kNumMemoryClients; ++k) {
    EXPECT_EQ(s.by_client[k].allocated_bytes.current, before.by_client[k].allocated_bytes.current)
        << kMemoryClientNames[k];
    EXPECT_EQ(s.by_client[k].allocation.current, before.by_client[k].allocation.current);
  }
  EXPECT_GE(s.by_client[kCupy].allocated_bytes.peak, before.by_client[kCupy].allocated_bytes.current + (3 << 20));
  EXPECT_EQ(s.by_client[kTorch].allocated_bytes.freed - before.by_client[kTorch].allocated_bytes.freed, 1024);
}

TEST(MemoryPlugin, QuickCacheReuseKeepsTheTag) {
  // The same size freed and taken again goes through the allocator's quick cache: the tag of
  // the new allocation is the new caller's, not the previous owner's.
  const ClientMemoryStats t0 = client(kTorch), o0 = client(kOwn);
  for (int i = 0; i < 50; ++i) {
    void* a = caching_allocator_alloc_for(MemoryClient::torch, 4096);
    caching_allocator_delete(a);
    void* b = caching_allocator_alloc(4096);
    EXPECT_EQ(client(kTorch).allocated_bytes.current, t0.allocated_bytes.current);
    EXPECT_EQ(client(kOwn).allocated_bytes.current, o0.allocated_bytes.current + 4096);
    caching_allocator_delete(b);
  }
  EXPECT_EQ(client(kTorch).allocation.allocated - t0.allocation.allocated, 50);
  EXPECT_EQ(client(kOwn).allocation.freed - o0.allocation.freed, 50);
}

TEST(MemoryPlugin, ResetPeakAndAccumulatedCoverTheBreakdown) {
  void* a = caching_allocator_alloc_for(MemoryClient::cupy, 5 << 20);
  caching_allocator_delete(a);
  reset_peak_memory_stats();
  reset_accumulated_memory_stats();
  const ClientMemoryStats c = client(kCupy);
  EXPECT_EQ(c.allocated_bytes.peak, c.allocated_bytes.current);
  EXPECT_EQ(c.allocated_bytes.allocated, 0);
  EXPECT_EQ(c.allocation.freed, 0);
}

TEST(MemoryPlugin, RejectsAnUnknownClient) {
  EXPECT_THROW(caching_allocator_alloc_for(static_cast<MemoryClient>(7), 100), ValueError);
}

TEST(MemoryPlugin, HookMallocFreeCountAsTorch) {
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  const ClientMemoryStats t0 = client(kTorch);
  StreamRef s = current_stream();
  void* p = h.malloc(1 << 20, 0, as_torch(s.handle()));
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(torch_hooks_used());
  EXPECT_EQ(client(kTorch).allocated_bytes.current - t0.allocated_bytes.current, 1 << 20);
  auto info = allocation_info(p);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->stream.handle(), s.handle());
  h.free(p, 1 << 20, 0, as_torch(s.handle()));
  EXPECT_EQ(client(kTorch).allocated_bytes.current, t0.allocated_bytes.current);
  EXPECT_EQ(h.malloc(0, 0, nullptr), nullptr);  // torch's 0-byte tensors
  h.free(nullptr, 0, 0, nullptr);                // ... are freed again: ignored
}

TEST(MemoryPlugin, HookMallocThrowsOutOfMemoryWithTheReason) {
  // torch does not check alloc_fn's result for null: an impossible size must throw.
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  EXPECT_THROW(h.malloc(std::size_t(1) << 62, 0, nullptr), OutOfMemoryError);
  EXPECT_NE(last_plugin_error().find("malloc"), std::string::npos);
}

TEST(MemoryPlugin, HookBaseAllocGivesTheSegment) {
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  void* a = h.malloc(1000, 0, nullptr);
  void* b = h.malloc(1000, 0, nullptr);  // same small segment, after a
  std::size_t size = 0;
  auto* base = static_cast<char*>(h.base_alloc(b, &size));
  if (memory::settings_in_force().expandable_small) {
    // CUDAKIT_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: small blocks are
    // in an expandable segment, which has no fixed base: the allocation itself, as torch.
    EXPECT_EQ(base, static_cast<char*>(b));
    EXPECT_EQ(size, std::size_t(1024));
  } else {
    EXPECT_LE(base, static_cast<char*>(b));
    EXPECT_GT(base + size, static_cast<char*>(b));
    EXPECT_EQ(size, std::size_t(2) << 20);  // small-pool segment
    EXPECT_EQ(h.base_alloc(a, nullptr), h.base_alloc(b, nullptr));
  }
  int not_ours = 0;
  std::size_t unchanged = 123;
  EXPECT_EQ(h.base_alloc(&not_ours, &unchanged), &not_ours);  // torch's own default
  h.free(a, 1000, 0, nullptr);
  h.free(b, 1000, 0, nullptr);
}

TEST(MemoryPlugin, HookResetReleasesTheCacheAndFractionApplies) {
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  void* p = h.malloc(30 << 20, 0, nullptr);
  h.free(p, 30 << 20, 0, nullptr);
  EXPECT_GE(memory_reserved(), std::size_t(30) << 20);
  h.reset();
  EXPECT_LT(memory_reserved(), std::size_t(30) << 20);
  h.memory_fraction(0.5, 0);
  EXPECT_DOUBLE_EQ(get_per_process_memory_fraction(0), 0.5);
  h.memory_fraction(7.0, 0);  // rejected: reported, state unchanged
  EXPECT_DOUBLE_EQ(get_per_process_memory_fraction(0), 0.5);
  EXPECT_NE(last_plugin_error().find("fraction"), std::string::npos);
  h.memory_fraction(1.0, 0);
}

TEST(MemoryPlugin, HookRecordStreamDelaysReuse) {
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  Stream mine(0), other(0);
  const std::int64_t active0 = memory_stats_of().active[0].current;
  void* p = h.malloc(1024, 0, as_torch(mine.handle()));
  std::atomic<bool> release{false};
  other.launch_host_func([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  h.record_stream(p, as_torch(other.handle()));
  int junk = 0;
  h.record_stream(&junk, as_torch(other.handle()));  // not ours: reported, ignored
  h.free(p, 1024, 0, as_torch(mine.handle()));
  EXPECT_EQ(memory_stats_of().active[0].current, active0 + 1) << "pending on the other stream";
  void* q = h.malloc(1024, 0, as_torch(mine.handle()));
  EXPECT_NE(q, p) << "reused while the recorded stream still runs";
  release = true;
  other.sync();
  h.free(q, 1024, 0, as_torch(mine.handle()));
  void* r = h.malloc(3000, 0, as_torch(mine.handle()));  // processes completed events
  h.free(r, 3000, 0, as_torch(mine.handle()));
  EXPECT_EQ(memory_stats_of().active[0].current, active0) << "p's block is no longer in use";
}

TEST(MemoryPlugin, PoolHooksRouteByTorchsFilterInTorchsIdSpace) {
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  const TorchMempoolId pool{0, 77};
  const MempoolId mine = torch_pool_id(pool);
  EXPECT_TRUE(is_torch_pool_id(mine));
  EXPECT_EQ(torch_pool_id_of(mine), pool);
  EXPECT_NE(mine, (MempoolId{0, 77}));  // never cudakit's own graph pool (0, 77)

  Stream capturing, other;
  CUstream_st* target = as_torch(capturing.handle());
  h.begin_allocate_to_pool(0, pool, [target](CUstream_st* s) { return s == target; });
  EXPECT_EQ(torch_pool_use_count(0, pool), 1);
  void* in = h.malloc(1000, 0, target);
  void* out = h.malloc(1000, 0, as_torch(other.handle()));
  h.end_allocate_to_pool(0, pool);
  void* after = h.malloc(1000, 0, target);  // route ended: default pool

  auto segments_of = [](MempoolId id) { return memory_snapshot_json(id); };
  const std::string in_pool = segments_of(mine);
  auto addr = [](void* p) { return std::to_string(reinterpret_cast<std::uintptr_t>(p)); };
  EXPECT_NE(in_pool.find(addr(in)), std::string::npos) << in_pool;
  EXPECT_EQ(in_pool.find(addr(out)), std::string::npos);
  EXPECT_EQ(in_pool.find(addr(after)), std::string::npos);

  h.free(in, 1000, 0, target);
  h.free(out, 1000, 0, nullptr);
  h.free(after, 1000, 0, nullptr);
  h.release_pool(0, pool);  // last reference: the pool and its segment go
  EXPECT_EQ(torch_pool_use_count(0, pool), 0);
  EXPECT_EQ(segments_of(mine).find(addr(in)), std::string::npos);
}

TEST(MemoryPlugin, TorchMemPoolLifetime) {
  // torch.cuda.MemPool under cudakit: created with one reference, use_mem_pool adds and drops
  // one around its scope (torch's begin/release pair), the pool's owner drops the last.
  const TorchMempoolId pool{0, 9001};
  const auto tid = std::this_thread::get_id();
  create_torch_pool(0, pool, /*use_on_oom=*/false, /*no_split=*/true);
  EXPECT_EQ(torch_pool_use_count(0, pool), 1);
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  h.begin_allocate_to_pool(0, pool, [tid](CUstream_st*) { return std::this_thread::get_id() == tid; });
  EXPECT_EQ(torch_pool_use_count(0, pool), 2);
  void* p = h.malloc(2048, 0, nullptr);
  h.end_allocate_to_pool(0, pool);
  h.release_pool(0, pool);
  EXPECT_EQ(torch_pool_use_count(0, pool), 1);
  EXPECT_NE(memory_snapshot_json(torch_pool_id(pool)).find(
                std::to_string(reinterpret_cast<std::uintptr_t>(p))), std::string::npos);
  h.free(p, 2048, 0, nullptr);
  h.release_pool(0, pool);
  EXPECT_EQ(torch_pool_use_count(0, pool), 0);
}

TEST(MemoryPlugin, HookInitIsHarmless) {
  torch_allocator_hooks().init(detail::backend().device_count());
  EXPECT_TRUE(torch_hooks_used());
}

// ---- torch's CUDA graph capture through the pool hooks (torch.cuda.graph's call sequence:
// torch begins the capture itself, then routes the capture's allocations with a filter on the
// capture id; capture_end ends the route; destroying the graph releases the pool) ----
namespace {
struct TorchCapture {
  detail::Backend& b = detail::backend();
  CUstream_st* stream;
  TorchMempoolId pool;
  std::uint64_t id = 0;
  TorchCapture(Stream& s, TorchMempoolId p) : stream(as_torch(s.handle())), pool(p) {
    b.stream_begin_capture(s.handle(), detail::CaptureMode::global);
    b.stream_capture_status(s.handle(), &id);
    torch_allocator_hooks().begin_allocate_to_pool(0, pool, [this](CUstream_st* st) {
      std::uint64_t sid = 0;
      return st && b.stream_capture_status(st, &sid) == detail::CaptureStatus::active &&
             sid == id;
    });
  }
  void end() {
    torch_allocator_hooks().end_allocate_to_pool(0, pool);
    b.graph_destroy(b.stream_end_capture(stream));
  }
};
std::string pool_segments(TorchMempoolId pool) { return memory_snapshot_json(torch_pool_id(pool)); }
std::string addr_of(void* p) { return std::to_string(reinterpret_cast<std::uintptr_t>(p)); }
}  // namespace

TEST(MemoryPlugin, GraphPoolKeepsFreedSegmentsWhileTheGraphLives) {
  // test_graph_memory_stats_and_use_result_after_destroy_graph: an intermediate freed during
  // capture is memory the graph writes on every replay. empty_cache() used to give its
  // segment back to the device while the graph lived (an illegal access on replay, or
  // another tensor's memory overwritten).
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  const TorchMempoolId pool{4242, 0};
  Stream s;
  TorchCapture cap(s, pool);
  void* tmp = h.malloc(12 << 20, 0, cap.stream);  // its own segment (>= 10 MiB)
  void* out = h.malloc(12 << 20, 0, cap.stream);
  h.free(tmp, 12 << 20, 0, cap.stream);
  cap.end();
  empty_cache();
  EXPECT_NE(pool_segments(pool).find(addr_of(tmp)), std::string::npos)
      << "the live graph's freed intermediate went back to the device";
  h.release_pool(0, pool);  // the graph is destroyed; `out` (the graph's result) still lives
  empty_cache();
  const std::string after = pool_segments(pool);
  EXPECT_EQ(after.find(addr_of(tmp)), std::string::npos) << "unused once the graph is gone";
  EXPECT_NE(after.find(addr_of(out)), std::string::npos) << "the result keeps its memory";
  h.free(out, 12 << 20, 0, nullptr);
  empty_cache();
  EXPECT_EQ(torch_pool_use_count(0, pool), 0);
  EXPECT_EQ(pool_segments(pool).find(addr_of(out)), std::string::npos) << "empty pool: gone";
}

TEST(MemoryPlugin, RecordStreamDuringCaptureDefersTheFreeEvents) {
  // test_graph_record_stream: a block used on a second capturing stream and freed during
  // capture must not get an event recorded then (a captured event can never be queried: the
  // next allocation after the capture used to fail with "recorded inside a stream capture").
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  detail::Backend& b = detail::backend();
  const TorchMempoolId pool{4243, 0};
  Stream s1, s2;
  const std::int64_t active0 = memory_stats_of().active[0].current;
  TorchCapture cap(s1, pool);
  void* blk = h.malloc(1024, 0, cap.stream);
  detail::EventHandle fork = b.event_create(0, detail::kEventDisableTiming);
  detail::EventHandle join = b.event_create(0, detail::kEventDisableTiming);
  b.event_record(fork, s1.handle());
  b.stream_wait_event(s2.handle(), fork);  // s2 joins the capture
  h.record_stream(blk, as_torch(s2.handle()));
  h.free(blk, 1024, 0, cap.stream);
  b.event_record(join, s2.handle());
  b.stream_wait_event(s1.handle(), join);
  cap.end();
  b.event_destroy(fork);
  b.event_destroy(join);
  synchronize();
  EXPECT_EQ(memory_stats_of().active[0].current, active0 + 1) << "still waiting for s2";
  void* next = nullptr;
  ASSERT_NO_THROW(next = h.malloc(1024, 0, as_torch(s1.handle())));
  h.free(next, 1024, 0, nullptr);
  s2.sync();
  void* again = h.malloc(1024, 0, as_torch(s1.handle()));  // processes the now-recorded events
  h.free(again, 1024, 0, nullptr);
  EXPECT_EQ(memory_stats_of().active[0].current, active0) << "the deferred block came back";
  h.release_pool(0, pool);
}

namespace {
// test_graph_capture_reclaim_{2,4}_streams: `data` (allocated on the capture's stream s[0])
// is used by work on the forked streams s[1..], freed, and the streams are joined back into
// s[0] in the steps `joins` gives (pairs: waiter, waited-for). Returns whether an allocation
// on s[0] after each step got `data`'s memory back.
std::vector<bool> reuse_after_joins(bool reuse, std::vector<Stream>& s,
                                    const std::vector<std::vector<std::pair<int, int>>>& joins,
                                    std::uint64_t pool_no) {
  set_allocator_settings(reuse ? "graph_capture_record_stream_reuse:True"
                               : "graph_capture_record_stream_reuse:False");
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  detail::Backend& b = detail::backend();
  const TorchMempoolId pool{pool_no, 0};
  auto wait = [&](int waiter, int waited) {
    detail::EventHandle e = b.event_create(0, detail::kEventDisableTiming);
    b.event_record(e, s[waited].handle());
    b.stream_wait_event(s[waiter].handle(), e);
    b.event_destroy(e);
  };
  std::vector<void*> live;
  auto alloc = [&](int on) {
    live.push_back(h.malloc(512, 0, as_torch(s[on].handle())));
    return live.back();
  };
  TorchCapture cap(s[0], pool);
  void* sink = alloc(0);
  void* data = alloc(0);
  b.memset_d8_async(data, 1, 512, s[0].handle());
  for (std::size_t i = 1; i < s.size(); ++i) {
    wait(static_cast<int>(i), 0);  // fork
    void* out = alloc(static_cast<int>(i));
    b.memset_d8_async(out, 2, 512, s[i].handle());  // stands for a kernel reading `data`
    h.record_stream(data, as_torch(s[i].handle()));
  }
  live.erase(std::find(live.begin(), live.end(), data));
  h.free(data, 512, 0, as_torch(s[0].handle()));
  std::vector<bool> got;
  for (const auto& step : joins) {
    for (auto [waiter, waited] : step) {
      wait(waiter, waited);
      b.memset_d8_async(sink, 3, 512, s[waiter].handle());  // a sink node on the waiter
    }
    void* p = alloc(0);
    got.push_back(p == data);
  }
  for (std::size_t i = 1; i < s.size(); ++i) wait(0, static_cast<int>(i));  // capture joins all
  cap.end();
  for (void* p : live) h.free(p, 512, 0, nullptr);
  // The next allocation outside the capture records the deferred block's events on the
  // streams that used it: before they are destroyed.
  h.free(h.malloc(512, 0, as_torch(s[0].handle())), 512, 0, nullptr);
  synchronize();
  h.release_pool(0, pool);
  empty_cache();  // the released pool's segments go: later tests measure reserved memory
  set_allocator_settings("graph_capture_record_stream_reuse:False");
  return got;
}
}  // namespace

TEST(MemoryPlugin, CaptureReusesARecordStreamBlockOnceItsStreamsJoin) {
  // Two streams: no reuse while s1's work may still read the block; reuse after the join.
  std::vector<Stream> s(2);
  EXPECT_EQ(reuse_after_joins(true, s, {{}, {{0, 1}}}, 4250), (std::vector<bool>{false, true}));
  // Without the setting the block waits for the capture's end (torch's default).
  EXPECT_EQ(reuse_after_joins(false, s, {{}, {{0, 1}}}, 4251), (std::vector<bool>{false, false}));
}

TEST(MemoryPlugin, CaptureReuseWaitsForEveryStreamThatUsedTheBlock) {
  // Four streams: s1 joins s0 and s3 joins s2, but s0 does not yet follow s2/s3's work; only
  // after s0 waits for s2 is the block safe.
  std::vector<Stream> s(4);
  EXPECT_EQ(reuse_after_joins(true, s, {{{0, 1}, {2, 3}}, {{0, 2}}}, 4252),
            (std::vector<bool>{false, true}));
}

TEST(MemoryPlugin, EmptyCacheWhileAPoolRoutesReleasesOnlyUnownedPools) {
  // torch.cuda.empty_cache() inside use_mem_pool or a capture: torch waits for no event and
  // frees no device memory then (test_mempool_emptycache_multithread: "empty_cache should
  // have done nothing under mempool context").
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  const TorchMempoolId pool{0, 4244};
  const auto tid = std::this_thread::get_id();
  void* cached = h.malloc(3 << 20, 0, nullptr);
  h.free(cached, 3 << 20, 0, nullptr);  // a cached segment of the default pool
  create_torch_pool(0, pool);
  h.begin_allocate_to_pool(0, pool, [tid](CUstream_st*) { return std::this_thread::get_id() == tid; });
  void* x = h.malloc(4096, 0, nullptr);
  h.free(x, 4096, 0, nullptr);
  const std::size_t reserved = static_cast<std::size_t>(memory_stats_of().reserved_bytes[0].current);
  empty_cache();
  EXPECT_EQ(static_cast<std::size_t>(memory_stats_of().reserved_bytes[0].current), reserved);
  EXPECT_NE(pool_segments(pool).find("\"address\""), std::string::npos) << "the pool keeps its segment";
  h.end_allocate_to_pool(0, pool);
  h.release_pool(0, pool);  // use_mem_pool's reference
  h.release_pool(0, pool);  // the MemPool's
  empty_cache();
  EXPECT_LT(static_cast<std::size_t>(memory_stats_of().reserved_bytes[0].current), reserved);
}

TEST(MemoryPlugin, CapturingStreamAllocationOutsideThePoolIsAllowed) {
  // An allocation on the capturing thread for a capturing stream that the pool filter does
  // not route (torch: a stream the capture's filter rejects) grows the default pool during a
  // global-mode capture: relaxed mode, as torch's cudaMallocMaybeCapturing (it used to fail
  // with "mem_alloc: not permitted while a stream capture is live" and invalidate the capture).
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  detail::Backend& b = detail::backend();
  Stream s;
  b.stream_begin_capture(s.handle(), detail::CaptureMode::global);
  void* p = nullptr;
  EXPECT_NO_THROW(p = h.malloc(37 << 20, 0, as_torch(s.handle())));
  EXPECT_NO_THROW(b.graph_destroy(b.stream_end_capture(s.handle())));
  if (p) h.free(p, 37 << 20, 0, nullptr);
}

// torch's catch clause for its Python-typed errors (torch/csrc/Exceptions.h), as torch's
// Python layer sees the hook's exception: matched by type name across libraries.
struct _object;
namespace torch {
struct PyTorchError : std::exception {
  virtual _object* python_type() = 0;
};
}  // namespace torch

TEST(MemoryPlugin, HookMallocRaisesTorchsOutOfMemoryTypeAndNotifiesObservers) {
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  // Static: observers stay registered for the life of the process.
  static int fake_type = 0;  // stands for torch.OutOfMemoryError (a PyObject* the hook returns)
  static std::vector<std::size_t> seen;
  add_torch_oom_observer([](int device, std::size_t requested, std::size_t allowed,
                             std::size_t free) {
    EXPECT_EQ(device, 0);
    EXPECT_GT(allowed, 0u);
    EXPECT_LE(free, allowed);
    seen.push_back(requested);
  });
  const std::size_t huge = std::size_t(800000000) << 30;  // test_out_of_memory's request
  set_torch_out_of_memory_type(&fake_type);
  try {
    h.malloc(huge, 0, nullptr);
    ADD_FAILURE() << "no error";
  } catch (torch::PyTorchError& e) {
    EXPECT_EQ(static_cast<void*>(e.python_type()), &fake_type);
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("CUDA out of memory. Tried to allocate 800000000.00 GiB. GPU 0 has a "
                         "total capacity of ", 0), 0u) << what;
  }
  set_torch_out_of_memory_type(nullptr);
  EXPECT_THROW(h.malloc(huge, 0, nullptr), OutOfMemoryError);
  try {
    h.malloc(std::size_t(1) << 61, 0, nullptr);  // torch refuses >= 1 EiB with its own words
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("Tried to allocate more than 1EB memory"),
              std::string::npos) << e.what();
  }
  EXPECT_EQ(seen, (std::vector<std::size_t>{huge, huge, std::size_t(1) << 61}));
}

TEST(MemoryPlugin, PoolStateCheckpointAndRestore) {
  // CUDA graph trees' sequence (TestBlockStateAbsorption): the state at the end of a
  // recording, the outputs die, the state is put back (the outputs' blocks are allocated
  // again, in the same layout), then the blocks are freed one by one.
  const TorchAllocatorHooks& h = torch_allocator_hooks();
  const TorchMempoolId pool{4250, 0};
  const MempoolId mine = torch_pool_id(pool);
  Stream s;
  TorchCapture cap(s, pool);
  std::vector<void*> small;
  for (int i = 0; i < 11; ++i) small.push_back(h.malloc(512, 0, cap.stream));
  void* big = h.malloc(12 << 20, 0, cap.stream);
  cap.end();
  for (int i = 0; i < 11; ++i)
    if (i != 5 && i != 8) h.free(small[i], 512, 0, nullptr);
  auto live = [&] {
    auto v = pool_live_allocations(mine, 0);
    std::sort(v.begin(), v.end());
    return v;
  };
  auto addr = [](void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  std::vector<std::uintptr_t> expect{addr(small[5]), addr(small[8]), addr(big)};
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(live(), expect);
  const PoolState st = get_pool_state(mine, 0);
  ASSERT_EQ(st.segments.size(), 2u);
  const std::string layout = memory_snapshot_json(mine);
  h.free(small[5], 512, 0, nullptr);
  h.free(small[8], 512, 0, nullptr);
  h.free(big, 12 << 20, 0, nullptr);
  EXPECT_TRUE(live().empty());
  void* later = h.malloc(4096, 0, as_torch(s.handle()));  // default pool: unaffected
  const std::int64_t allocated = memory_stats_of().allocated_bytes[0].current;
  const PoolStateDelta d = set_pool_state(st);
  EXPECT_TRUE(d.freed.empty());
  std::vector<std::uintptr_t> got = d.allocated;
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expect);
  EXPECT_EQ(live(), expect);
  EXPECT_EQ(memory_snapshot_json(mine), layout) << "the same blocks, sizes and states";
  EXPECT_EQ(memory_stats_of().allocated_bytes[0].current, allocated + 512 + 512 + (12 << 20));
  // Restoring again frees what is live now and allocates the recorded blocks.
  const PoolStateDelta again = set_pool_state(st);
  EXPECT_EQ(again.freed.size(), 3u);
  EXPECT_EQ(live(), expect);
  for (std::uintptr_t p : expect) caching_allocator_delete(reinterpret_cast<void*>(p));
  EXPECT_TRUE(live().empty());
  h.free(later, 4096, 0, nullptr);
  h.release_pool(0, pool);
  empty_cache();
  EXPECT_THROW(set_pool_state(st), ValueError) << "the pool's memory is gone";
  EXPECT_THROW(pool_live_allocations(mine, 0), ValueError);
}
