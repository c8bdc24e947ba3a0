// Sleep and wake of tagged memory (issue 29): UseSleepPool / sleep / wake_up / sleep_state,
// statistics, errors, threads. Runs on every backend; the emulated device is 1 GiB (set
// before first use) so the out-of-memory case is reachable. ctest also runs this binary with
// expandable segments on (cpp.test_memory_sleep.expandable_segments).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/stream.hpp"
#include "memory/sleep_pool.hpp"

using namespace cudakit;

namespace {
constexpr std::size_t kMiB = std::size_t(1) << 20;
constexpr std::size_t kGiB = std::size_t(1) << 30;

struct SmallDevice : ::testing::Environment {
  void SetUp() override { setenv("CUDAKIT_EMULATED_MEMORY", "1GiB", 1); }
};
const auto* env = ::testing::AddGlobalTestEnvironment(new SmallDevice);

unsigned char pattern(std::size_t i, int salt) {
  return static_cast<unsigned char>((i * 131u + static_cast<unsigned>(salt) * 7u) & 0xff);
}

void fill(void* dev, std::size_t n, int salt) {
  std::vector<unsigned char> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = pattern(i, salt);
  Stream s;
  detail::backend().memcpy_async(dev, host.data(), n, s.handle());
  s.sync();
}

bool holds(const void* dev, std::size_t n, int salt) {
  std::vector<unsigned char> host(n);
  Stream s;
  detail::backend().memcpy_async(host.data(), dev, n, s.handle());
  s.sync();
  for (std::size_t i = 0; i < n; ++i)
    if (host[i] != pattern(i, salt)) return false;
  return true;
}

std::string unique_tag(const char* base) {
  static std::atomic<int> n{0};
  return std::string(base) + "_" + std::to_string(n++);
}
}  // namespace

TEST(MemorySleep, OffloadedContentsComeBackAtTheSameAddresses) {
  const std::string tag = unique_tag("weights");
  const std::size_t sizes[] = {1000, 3 * kMiB + 17, 24 * kMiB, 512};
  std::vector<Allocation> held;
  {
    UseSleepPool use(tag);
    for (std::size_t n : sizes) held.push_back(allocate_device(n));
  }
  std::vector<void*> ptrs;
  for (std::size_t i = 0; i < held.size(); ++i) {
    fill(held[i].get(), held[i].size(), static_cast<int>(i));
    ptrs.push_back(held[i].get());
  }
  const std::size_t reserved = memory_reserved();
  const std::size_t allocated = memory_allocated();
  const auto before = sleep_state().at(tag);
  EXPECT_FALSE(before.asleep);
  EXPECT_GE(before.bytes, 24 * kMiB + 3 * kMiB);
  EXPECT_GE(before.allocated_bytes, 27 * kMiB);

  const std::size_t released = sleep(std::vector<std::string>{tag}, {tag});
  EXPECT_EQ(released, before.bytes) << "every byte of the pool's segments is released";
  EXPECT_EQ(memory_reserved(), reserved - released);
  EXPECT_EQ(memory_allocated(), allocated) << "the tensors still exist (at fixed addresses)";
  const auto asleep = sleep_state().at(tag);
  EXPECT_TRUE(asleep.asleep);
  EXPECT_TRUE(asleep.offloaded);
  auto m = memory_stats();
  EXPECT_GE(m["sleep.asleep_bytes"], static_cast<std::int64_t>(released));
  EXPECT_GE(m["sleep.offloaded_bytes"], static_cast<std::int64_t>(27 * kMiB));
  EXPECT_LE(m["sleep.offloaded_bytes"], static_cast<std::int64_t>(before.bytes))
      << "only allocated blocks are copied";

  wake_up(std::vector<std::string>{tag});
  EXPECT_EQ(memory_reserved(), reserved);
  EXPECT_FALSE(sleep_state().at(tag).asleep);
  EXPECT_FALSE(sleep_state().at(tag).offloaded);
  for (std::size_t i = 0; i < held.size(); ++i) {
    EXPECT_EQ(held[i].get(), ptrs[i]);
    EXPECT_TRUE(holds(held[i].get(), held[i].size(), static_cast<int>(i))) << "allocation " << i;
  }
  EXPECT_EQ(memory_stats()["sleep.offloaded_bytes"], 0) << "host copies given back on wake";
}

TEST(MemorySleep, DiscardedPoolWakesUsableAndRepeatedCallsAreNoOps) {
  const std::string tag = unique_tag("kv");
  Allocation kv;
  {
    UseSleepPool use(tag);
    kv = allocate_device(40 * kMiB);
  }
  void* p = kv.get();
  const std::size_t reserved = memory_reserved();
  const std::size_t released = sleep(std::vector<std::string>{tag});
  EXPECT_GE(released, 40 * kMiB);
  EXPECT_FALSE(sleep_state().at(tag).offloaded);
  EXPECT_EQ(sleep(std::vector<std::string>{tag}), 0u) << "sleep of an asleep pool: no-op";
  EXPECT_EQ(memory_reserved(), reserved - released);
  wake_up(std::vector<std::string>{tag});
  wake_up(std::vector<std::string>{tag});  // awake already: no-op
  EXPECT_EQ(memory_reserved(), reserved);
  EXPECT_EQ(kv.get(), p);
  fill(kv.get(), kv.size(), 3);  // the memory is there again
  EXPECT_TRUE(holds(kv.get(), kv.size(), 3));
  EXPECT_EQ(sleep(std::vector<std::string>{}), 0u) << "an empty list of tags sleeps nothing";
}

TEST(MemorySleep, AllocatingFromAnAsleepPoolRaisesNamingTheTagAndFreeingIsAllowed) {
  const std::string tag = unique_tag("asleep");
  Allocation a, b;
  {
    UseSleepPool use(tag);
    a = allocate_device(2 * kMiB);
    b = allocate_device(4096);
  }
  sleep(std::vector<std::string>{tag});
  const auto stats_before = memory_stats();
  {
    UseSleepPool use(tag);
    try {
      Allocation c = allocate_device(1024);
      FAIL() << "allocated from an asleep pool";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + tag + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("wake_up"), std::string::npos) << what;
    }
  }
  auto stats_after = memory_stats();
  EXPECT_EQ(stats_after["allocation.all.current"], stats_before.at("allocation.all.current"));
  EXPECT_EQ(stats_after["num_ooms"], stats_before.at("num_ooms"));
  // Outside the scope the default pool serves the thread as usual.
  Allocation outside = allocate_device(1024);
  EXPECT_TRUE(outside);
  a.reset();  // freeing while asleep is bookkeeping only
  EXPECT_EQ(sleep_state().at(tag).allocated_bytes, 4096u);
  wake_up(std::nullopt);
  {
    UseSleepPool use(tag);
    Allocation again = allocate_device(2 * kMiB);  // the freed block is reused after wake
    fill(again.get(), again.size(), 5);
    EXPECT_TRUE(holds(again.get(), again.size(), 5));
  }
}

TEST(MemorySleep, UnknownTagsAreKeyErrorsAndBadArgumentsValueErrors) {
  EXPECT_THROW(sleep(std::vector<std::string>{"no-such-tag"}), KeyError);
  EXPECT_THROW(wake_up(std::vector<std::string>{"no-such-tag"}), KeyError);
  try {
    sleep(std::vector<std::string>{"no-such-tag"});
  } catch (const KeyError& e) {
    EXPECT_NE(std::string(e.what()).find("use_sleep_pool"), std::string::npos) << e.what();
  }
  EXPECT_THROW(UseSleepPool(""), ValueError);
  const std::string tag = unique_tag("known");
  const std::string other = unique_tag("other");
  { UseSleepPool u(tag); Allocation x = allocate_device(100); }
  { UseSleepPool u(other); Allocation x = allocate_device(100); }
  // An offload tag that is not being put to sleep is a mistake, not a silent no-op.
  EXPECT_THROW(sleep(std::vector<std::string>{tag}, {other}), ValueError);
  EXPECT_FALSE(sleep_state().at(tag).asleep) << "state intact after the error";
  EXPECT_THROW(sleep(std::nullopt, {"no-such-tag"}), KeyError);
}

TEST(MemorySleep, EmptyCacheReleasesFreeTaggedSegmentsOnlyWhileAwake) {
  const std::string tag = unique_tag("cache");
  Allocation keep;
  std::uintptr_t freed_at = 0;
  {
    UseSleepPool use(tag);
    // 40 MiB each: one request per 64 MiB growth step, so each is a segment of its own.
    keep = allocate_device(40 * kMiB);
    Allocation tmp = allocate_device(40 * kMiB);
    freed_at = reinterpret_cast<std::uintptr_t>(tmp.get());
  }
  const std::size_t with_tmp = sleep_state().at(tag).bytes;
  sleep(std::vector<std::string>{tag});
  empty_cache();  // asleep: the pool's segments stay (its segment set is frozen)
  EXPECT_EQ(sleep_state().at(tag).bytes, with_tmp);
  wake_up(std::vector<std::string>{tag});
  empty_cache();  // awake: the free segment goes back to the device
  EXPECT_LT(sleep_state().at(tag).bytes, with_tmp);
  {
    UseSleepPool use(tag);
    Allocation again = allocate_device(40 * kMiB);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(again.get()), freed_at)
        << "the released range is reused: the pool stays dense";
  }
  EXPECT_TRUE(keep);
}

TEST(MemorySleep, SegmentSizesGrowWithThePoolInWholeRequests) {
  // The segment-size rule itself (memory/sleep_pool.hpp), at sizes CI cannot allocate.
  memory::SleepPool sp("rule", 0, {0, 0});
  const std::size_t g = 2 * kMiB, req = 47 * kMiB + 4096;
  EXPECT_EQ(memory::sleep_segment_size(sp, false, req, req, g), 48 * kMiB) << "empty pool";
  sp.large_bytes = 5 * kGiB;  // half is 2.5 GiB: the 2 GiB cap
  const std::size_t seg = memory::sleep_segment_size(sp, false, req, req, g);
  EXPECT_EQ(seg % g, 0u);
  EXPECT_GE(seg, 43 * req) << "43 whole requests fit in 2 GiB";
  EXPECT_LE(seg, 43 * req + g) << "no tail past the last whole request but the rounding";
  sp.large_bytes = 300 * kMiB;  // half is 150 MiB: grows by 128 MiB
  EXPECT_EQ(memory::sleep_segment_size(sp, false, 10 * kMiB, 10 * kMiB, g), 120 * kMiB)
      << "twelve 10 MiB requests in a 128 MiB step";
  EXPECT_EQ(memory::sleep_segment_size(sp, false, 3 * kGiB, 3 * kGiB, g), 3 * kGiB)
      << "a request above the cap gets its own size";
  EXPECT_EQ(memory::sleep_segment_size(sp, true, 4096, 2 * kMiB, g), 2 * kMiB) << "small pool";
  const auto chunks = memory::sleep_chunk_sizes(3 * kGiB + 2 * kMiB, g);
  ASSERT_EQ(chunks.size(), 2u) << "2 GiB chunks";
  EXPECT_EQ(chunks.front(), 2 * kGiB);
  EXPECT_EQ(chunks.back(), kGiB + 2 * kMiB);
  EXPECT_EQ(memory::sleep_max_chunk(1 * kGiB, g), 512 * kMiB) << "at most half the device";
  EXPECT_EQ(memory::sleep_max_chunk(141 * kGiB, g), 2 * kGiB);
}

TEST(MemorySleep, SegmentsHoldSeveralTensorsSoWakeMakesFewDriverCalls) {
  const std::string tag = unique_tag("big");
  std::vector<Allocation> held;
  {
    UseSleepPool use(tag);
    for (int i = 0; i < 48; ++i) held.push_back(allocate_device(8 * kMiB));
  }
  const std::string snap = memory_snapshot_json();
  std::size_t segments = 0;
  for (std::size_t at = snap.find("\"sleep_tag\":\"" + tag + "\""); at != std::string::npos;
       at = snap.find("\"sleep_tag\":\"" + tag + "\"", at + 1))
    ++segments;
  EXPECT_GE(segments, 2u);
  EXPECT_LE(segments, 24u) << "segments hold several tensors";
  const auto s = sleep_state().at(tag);
  EXPECT_LE(s.bytes - s.allocated_bytes, s.bytes / 8) << "bounded unused tail";
  const auto m0 = memory_stats();
  sleep(std::vector<std::string>{tag});  // discarded: no copies (CI's emulated copies are slow)
  wake_up(std::vector<std::string>{tag});
  const auto m1 = memory_stats();
  EXPECT_EQ(m1.at("num_device_alloc") - m0.at("num_device_alloc"),
            m1.at("num_device_free") - m0.at("num_device_free"));
  EXPECT_LE(m1.at("num_device_alloc") - m0.at("num_device_alloc"),
            static_cast<std::int64_t>(segments) + 2);
}

TEST(MemorySleep, SnapshotShowsTaggedSegmentsAndTheirState) {
  const std::string tag = unique_tag("snap");
  Allocation a;
  {
    UseSleepPool use(tag);
    a = allocate_device(5 * kMiB);
  }
  EXPECT_NE(memory_snapshot_json().find("\"asleep\":false,\"blocks\"") , std::string::npos);
  sleep(std::vector<std::string>{tag});
  const std::string snap = memory_snapshot_json();
  const std::size_t at = snap.find("\"sleep_tag\":\"" + tag + "\"");
  ASSERT_NE(at, std::string::npos);
  EXPECT_NE(snap.rfind("\"asleep\":true", at), std::string::npos);
  wake_up(std::vector<std::string>{tag});
}

TEST(MemorySleep, WakeOutOfMemoryKeepsThePoolAsleepWithItsContents) {
  if (std::string(detail::backend().name()) != "emulated") GTEST_SKIP() << "needs the 1 GiB device";
  const std::string tag = unique_tag("oom");
  Allocation w;
  {
    UseSleepPool use(tag);
    w = allocate_device(16 * kMiB);
  }
  fill(w.get(), w.size(), 9);
  sleep(std::vector<std::string>{tag}, {tag});
  // Someone else takes the memory meanwhile (what other tests cached goes back first: wake_up
  // would release it before giving up).
  empty_cache();
  const std::size_t free_now = detail::backend().mem_get_info(0).free;
  Allocation hog = allocate_device(free_now - 8 * kMiB);
  try {
    wake_up(std::vector<std::string>{tag});
    FAIL() << "woke up without memory";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + tag + "'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(sleep_state().at(tag).asleep);
  EXPECT_TRUE(sleep_state().at(tag).offloaded);
  hog.reset();  // cached: wake_up releases the cache itself before it gives up
  wake_up(std::vector<std::string>{tag});
  EXPECT_TRUE(holds(w.get(), w.size(), 9));
}

TEST(MemorySleep, ThreadsAllocateAndFreeWhileAnotherSleepsAndWakes) {
  const std::string tag = unique_tag("threads");
  Allocation fixed;
  {
    UseSleepPool use(tag);
    fixed = allocate_device(2 * kMiB);
  }
  fill(fixed.get(), fixed.size(), 11);
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0}, served{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&, t] {
      const std::string own = tag + "_own" + std::to_string(t);
      while (!stop.load()) {
        {
          UseSleepPool use(tag);  // the pool that sleeps: allocations may be refused
          try {
            Allocation a = allocate_device(4096 * static_cast<std::size_t>(t + 1));
            ++served;
          } catch (const Error& e) {
            if (std::string(e.what()).find("'" + tag + "'") == std::string::npos) throw;
            ++refused;
          }
        }
        UseSleepPool mine(own);  // a pool nobody puts to sleep
        Allocation b = allocate_device(100000);
        Allocation c = allocate_device(3 * kMiB);
      }
    });
  }
  for (int i = 0; i < 10; ++i) {
    sleep(std::vector<std::string>{tag}, {tag});
    (void)sleep_state();
    wake_up(std::vector<std::string>{tag});
  }
  stop = true;
  for (auto& w : workers) w.join();
  EXPECT_GT(served.load() + refused.load(), 0);
  EXPECT_TRUE(holds(fixed.get(), fixed.size(), 11)) << "10 offload round trips under load";
}

TEST(MemorySleep, SegmentsOverTheChunkCapMapAndOffloadAcrossChunks) {
  // 600 MiB: one segment of two physical chunks (the 1 GiB device caps chunks at 512 MiB). Its free space is then split
  // so that one 8 MiB block straddles the chunk boundary; only that block is offloaded
  // (allocated blocks only: CI's emulated copies are slow).
  empty_cache();
  const std::string tag = unique_tag("chunks");
  Allocation lead, mid;
  {
    UseSleepPool use(tag);
    Allocation big = allocate_device(600 * kMiB);
    big.reset();
    lead = allocate_device(508 * kMiB);  // the front of the free 600 MiB
    mid = allocate_device(8 * kMiB);     // [508, 516) MiB of the segment
  }
  EXPECT_EQ(sleep_state().at(tag).bytes, 600 * kMiB);
  EXPECT_EQ(static_cast<char*>(mid.get()) - static_cast<char*>(lead.get()),
            static_cast<std::ptrdiff_t>(508 * kMiB));
  lead.reset();
  fill(mid.get(), mid.size(), 21);
  EXPECT_EQ(sleep(std::vector<std::string>{tag}, {tag}), 600 * kMiB);
  EXPECT_EQ(memory_stats()["sleep.offloaded_bytes"], static_cast<std::int64_t>(8 * kMiB));
  wake_up(std::vector<std::string>{tag});
  EXPECT_TRUE(holds(mid.get(), mid.size(), 21));
}

TEST(MemorySleep, CopiesAreCutWhereHostPiecesEnd) {
  // The offload plan itself (memory/sleep_pool.hpp), with pieces far smaller than 256 MiB.
  std::vector<unsigned char> a(10), b(6), c(4);
  const std::vector<std::pair<void*, std::size_t>> host = {{a.data(), 10}, {b.data(), 6}, {c.data(), 4}};
  const std::vector<std::pair<std::uintptr_t, std::size_t>> runs = {{1000, 7}, {2000, 12}, {3000, 1}};
  const auto out = memory::sleep_plan_copies(runs, host, /*to_host=*/true);
  ASSERT_EQ(out.size(), 5u);
  auto at = [](std::uintptr_t v) { return reinterpret_cast<const void*>(v); };
  EXPECT_EQ(out[0].src, at(1000)); EXPECT_EQ(out[0].dst, a.data()); EXPECT_EQ(out[0].bytes, 7u);
  EXPECT_EQ(out[1].src, at(2000)); EXPECT_EQ(out[1].dst, a.data() + 7); EXPECT_EQ(out[1].bytes, 3u);
  EXPECT_EQ(out[2].src, at(2003)); EXPECT_EQ(out[2].dst, b.data()); EXPECT_EQ(out[2].bytes, 6u);
  EXPECT_EQ(out[3].src, at(2009)); EXPECT_EQ(out[3].dst, c.data()); EXPECT_EQ(out[3].bytes, 3u);
  EXPECT_EQ(out[4].src, at(3000)); EXPECT_EQ(out[4].dst, c.data() + 3); EXPECT_EQ(out[4].bytes, 1u);
  const auto back = memory::sleep_plan_copies(runs, host, /*to_host=*/false);
  ASSERT_EQ(back.size(), out.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(back[i].dst, out[i].src);
    EXPECT_EQ(back[i].src, out[i].dst);
  }
}

TEST(MemorySleep, HandOffErrorsInTheExportingProcess) {
  const std::string tag = unique_tag("export");
  EXPECT_THROW(export_pool(tag), KeyError);
  Allocation a;
  {
    UseSleepPool use(tag);
    a = allocate_device(3 * kMiB);
  }
  const PoolView own = pool_view(tag);
  EXPECT_LE(own.base, reinterpret_cast<std::uintptr_t>(a.get()));
  EXPECT_GE(own.base + own.size, reinterpret_cast<std::uintptr_t>(a.get()) + a.size());
  std::vector<unsigned char> h = export_pool(tag);
  EXPECT_EQ(h, export_pool(tag)) << "the chunks' descriptors are made once";
  try {
    import_pool(h);
    FAIL() << "imported in the exporting process";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("this process"), std::string::npos) << e.what();
  }
  std::vector<unsigned char> cut(h.begin(), h.end() - 1);
  EXPECT_THROW(import_pool(cut), ValueError);
  EXPECT_THROW(import_pool(std::vector<unsigned char>(64, 0)), ValueError);
  EXPECT_THROW(close_pool(own), ValueError) << "not an imported view";
  sleep(std::vector<std::string>{tag});
  EXPECT_THROW(export_pool(tag), Error);
  EXPECT_EQ(pool_view(tag).base, own.base) << "addresses stay while asleep";
  wake_up(std::vector<std::string>{tag});
}

TEST(MemorySleep, GrowthFallsBackToTheRequestWhenTheDeviceIsNearlyFull) {
  // A pool of 300 MiB grows by 128 MiB steps; with 60 MiB left on the device a 40 MiB tensor
  // still fits (its own-size segment), rather than failing for the grown step.
  if (std::string(detail::backend().name()) != "emulated") GTEST_SKIP() << "needs the 1 GiB device";
  empty_cache();
  const std::string tag = unique_tag("fallback");
  Allocation base, small;
  {
    UseSleepPool use(tag);
    base = allocate_device(300 * kMiB);
  }
  empty_cache();
  // Another user of the device takes all but 60 MiB (straight from the backend: the
  // allocator's own segments would map ahead).
  detail::Backend& b = detail::backend();
  const std::size_t g = b.vm_granularity(0);
  const std::size_t hog_bytes = (b.mem_get_info(0).free - 60 * kMiB) / g * g;
  const detail::PhysMemHandle hog = b.vm_create(0, hog_bytes);
  ASSERT_NE(hog, detail::PhysMemHandle{});
  try {
    UseSleepPool use(tag);
    small = allocate_device(40 * kMiB);
  } catch (...) {
    b.vm_destroy(hog);
    throw;
  }
  b.vm_destroy(hog);
  EXPECT_TRUE(small);
  EXPECT_EQ(sleep_state().at(tag).bytes, 340 * kMiB) << "the fallback segment is the request's size";
  small.reset();
  base.reset();
  empty_cache();
}
