// PyTorch's known caching-allocator / expandable-segment bugs, as regression tests (issue 27).
// Each test names the torch report it reproduces. They run on both backends: the device is
// made "full" with raw device allocations (Filler) rather than by a fault-injection hook, so
// the failures are the driver's own (cuMemCreate / vm_create out of memory).
//
// GPU check (compute-sanitizer, #196209), on the H200:
//   CUDAKIT_BACKEND=cuda compute-sanitizer --tool memcheck --error-exitcode 1 \
//     build/tests/test_memory_torch_bugs --gtest_filter='*196209*'
// (and the whole file with CUDAKIT_BACKEND=cuda, no sanitizer); on the emulated backend the
// same test checks the bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/error.hpp"
#include "cudakit/stream.hpp"
#include "memory/config.hpp"
#include "memory/device_allocator.hpp"

using namespace cudakit;
using memory::AllocatorConfig;
using memory::Block;
using memory::DeviceAllocator;
using memory::kMiB;

namespace {
struct TwoGiBDevice : ::testing::Environment {
  // Small enough that "fill the device" is cheap on the emulated backend; the cuda backend
  // ignores it.
  void SetUp() override { setenv("CUDAKIT_EMULATED_MEMORY", "2GiB", 1); }
};
const auto* env = ::testing::AddGlobalTestEnvironment(new TwoGiBDevice);

DeviceAllocator make(const std::string& conf) {
  return DeviceAllocator(0, detail::backend(), AllocatorConfig::parse(conf));
}
void release(DeviceAllocator& a, Block* b) { ASSERT_TRUE(a.free(reinterpret_cast<void*>(b->ptr))); }
std::int64_t reserved_now(DeviceAllocator& a) { return a.stats().reserved_bytes[0].current; }

// Raw device memory outside every allocator, leaving about `leave` bytes free.
class Filler {
 public:
  explicit Filler(std::size_t leave) : be_(detail::backend()) {
    for (std::size_t piece = std::size_t(1) << 30; piece >= 2 * kMiB; piece /= 2) {
      for (;;) {
        const std::size_t free = be_.mem_get_info(0).free;
        if (free < leave + piece) break;
        void* p = be_.mem_alloc(0, piece);
        if (!p) break;
        held_.push_back(p);
      }
    }
  }
  ~Filler() { reset(); }
  void reset() {
    for (void* p : held_) be_.mem_free(0, p);
    held_.clear();
    be_.device_synchronize(0);  // frees of the emulated backend wait for queued work
  }

 private:
  detail::Backend& be_;
  std::vector<void*> held_;
};

// Fills [ptr, ptr+bytes) with a pattern on the device and reads it back on the host.
bool round_trip(Block* b, std::size_t bytes, unsigned char seed) {
  detail::Backend& be = detail::backend();
  std::vector<unsigned char> host(bytes), back(bytes);
  for (std::size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(seed + i * 131);
  void* dev = reinterpret_cast<void*>(b->ptr);
  be.memcpy_async(dev, host.data(), bytes, nullptr);
  be.memcpy_async(back.data(), dev, bytes, nullptr);
  be.device_synchronize(0);
  return host == back;
}
}  // namespace

// pytorch#193400: with max_split_size_mb and expandable segments, reserved memory grew from
// 220 MiB to 14 GiB over 100 cycles while the live set grew from 66 to 266 MiB: expandable
// segments merge free memory into one block bigger than max_split_size, which small requests
// then refused, so every cycle mapped new pages. Here: 100 cycles, a persistent set growing
// 64 -> 264 MiB plus temporaries of random sizes; reserved must follow the live peak.
TEST(TorchBugs, MaxSplitSizeWithExpandableKeepsReservedBounded_193400) {
  for (const char* conf : {"expandable_segments:True,max_split_size_mb:64",
                           "expandable_segments:True,max_split_size_mb:24",
                           "expandable_segments:True"}) {
    SCOPED_TRACE(conf);
    DeviceAllocator a = make(conf);
    std::mt19937 rng(193400);
    std::vector<Block*> kept{a.malloc(64 * kMiB, nullptr)};
    for (int cycle = 0; cycle < 100; ++cycle) {
      kept.push_back(a.malloc(2 * kMiB, nullptr));
      std::vector<Block*> temps;
      for (int i = 0; i < 6; ++i) {
        const std::size_t sz = (1 + rng() % 96) * kMiB + (rng() % 4096) * 512;
        temps.push_back(a.malloc(sz, nullptr));
        if (i % 3 == 2) {  // some die before the others are made
          release(a, temps.front());
          temps.erase(temps.begin());
        }
      }
      for (Block* b : temps) release(a, b);
    }
    auto st = a.stats();
    const auto peak_alloc = st.allocated_bytes[0].peak, peak_res = st.reserved_bytes[0].peak;
    EXPECT_LE(peak_res, peak_alloc + peak_alloc / 4 + 64 * std::int64_t(kMiB))
        << "reserved grew past the live peak: " << peak_res / kMiB << " MiB reserved, "
        << peak_alloc / kMiB << " MiB peak allocated";
    for (Block* b : kept) release(a, b);
    a.empty_cache();
    EXPECT_EQ(reserved_now(a), 0);
  }
}

// pytorch#188008: a mapping that fails part-way (cuMemCreate / cuMemMap / cuMemSetAccess out
// of memory after earlier chunks succeeded) left torch's segment with slots marked mapped
// that were not; the next allocation into that range asserted, for the rest of the process,
// or the destructor unmapped the unmapped range and terminated. Here the device is nearly
// full, so a 96 MiB request creates some of its chunks and then fails: nothing may stay
// mapped or created, and the same range must map normally afterwards.
TEST(TorchBugs, PartialMapFailureRollsBack_188008) {
  detail::Backend& be = detail::backend();
  for (const char* conf : {"expandable_segments:True", ""}) {
    SCOPED_TRACE(conf);
    DeviceAllocator a = make(conf);
    Filler fill(40 * kMiB);
    const std::size_t free_before = be.mem_get_info(0).free;
    ASSERT_LT(free_before, 96 * kMiB) << "the filler left too much free";
    EXPECT_THROW(a.malloc(96 * kMiB, nullptr), OutOfMemoryError);
    be.device_synchronize(0);
    EXPECT_GE(be.mem_get_info(0).free + 2 * kMiB, free_before)
        << "chunks created before the failure were not destroyed";
    EXPECT_EQ(reserved_now(a), 0);
    Block* small = a.malloc(16 * kMiB, nullptr);  // maps into the range the failure touched
    EXPECT_TRUE(round_trip(small, 16 * kMiB, 7));
    release(a, small);
    fill.reset();
    Block* big = a.malloc(96 * kMiB, nullptr);
    EXPECT_TRUE(round_trip(big, 96 * kMiB, 9));
    release(a, big);
    a.empty_cache();
    EXPECT_EQ(reserved_now(a), 0);
  }  // the allocator's destructor runs after a failed mapping: must not terminate
}

// pytorch#189504: torch raised out-of-memory while a fitting free block sat in its pool (a
// block whose record_stream events completed during the release, or a cached oversize block
// that could only be used after a release). Here the device is full; the request fits (a) a
// block freed while another stream was still using it, and (b) an oversize cached block that
// max_split_size keeps whole.
TEST(TorchBugs, NoOomWhileAFittingFreeBlockExists_189504) {
  for (const char* conf : {"", "expandable_segments:True"}) {
    SCOPED_TRACE(conf);
    DeviceAllocator a = make(conf);
    Stream s1(0), s2(0);
    Block* b = a.malloc(64 * kMiB, s1.handle());
    const auto p = b->ptr;
    s2.launch_host_func([] { std::this_thread::sleep_for(std::chrono::milliseconds(100)); });
    ASSERT_TRUE(a.record_stream(reinterpret_cast<void*>(p), s2.handle()));
    release(a, b);  // pending on s2's work
    {
      Filler fill(8 * kMiB);
      Block* c = nullptr;
      try {
        c = a.malloc(64 * kMiB, s1.handle());
      } catch (const OutOfMemoryError& e) {
        ADD_FAILURE() << "out of memory while the freed 64 MiB block fits: " << e.what();
      }
      if (c) {
        // Plain segments: that very block. Expandable: its pages, released by the retry and
        // mapped again (possibly in a new reservation once the old one was empty).
        if (!a.settings().expandable_segments)
          EXPECT_EQ(c->ptr, p) << "the pending block, once its stream finished";
        release(a, c);
      }
    }
    a.empty_cache();
    EXPECT_EQ(reserved_now(a), 0);
    // s2 may still run its task (nothing above had to wait for it): the part below needs an
    // idle device, since a device free waits for queued work (cudaFree; the emulated backend
    // defers it) and the request must fit in what the release gives back.
    s2.sync();
  }
  DeviceAllocator a = make("max_split_size_mb:64,expandable_segments:False");
  release(a, a.malloc(200 * kMiB, nullptr));  // cached, oversize: kept whole
  {
    Filler fill(8 * kMiB);
    Block* c = nullptr;
    try {
      c = a.malloc(100 * kMiB, nullptr);  // 200 >= 100 + 20 MiB rounding: not reusable as is
    } catch (const OutOfMemoryError& e) {
      ADD_FAILURE() << "out of memory while a 200 MiB cached block could be released: "
                    << e.what();
    }
    if (c) release(a, c);
  }
  a.empty_cache();
  EXPECT_EQ(reserved_now(a), 0);
}

// NVIDIA/Fuser#5767 (and vllm#52950): torch's cache is per stream, so memory freed on one
// stream stays reserved for it. 1000 stream_from_pool() calls give 32 distinct streams; a
// 16 MiB buffer allocated and freed on each must be reused per stream (32 buffers at most,
// no device allocation after the first round), and record_stream must still defer reuse.
// Then 1000 short-lived Stream objects (a new stream each): their cached memory must not
// strand the device (no out-of-memory on a 2 GiB device, which holds 31 such buffers).
TEST(TorchBugs, ManyStreamsReuseMemory_Fuser5767) {
  for (const char* conf : {"", "expandable_segments:True"}) {
    SCOPED_TRACE(conf);
    DeviceAllocator a = make(conf);
    std::set<void*> distinct;
    std::int64_t allocs_after_first_round = -1;
    for (int i = 0; i < 1000; ++i) {
      StreamRef s = stream_from_pool(0);
      distinct.insert(s.handle());
      release(a, a.malloc(16 * kMiB, s.handle()));
      if (i == 63) allocs_after_first_round = a.stats().num_device_alloc;
    }
    EXPECT_EQ(distinct.size(), 32u);
    if (a.settings().expandable_segments) {
      // Expandable segments move free pages to the stream that needs them instead of
      // keeping a buffer per stream: the footprint stays at the live set.
      EXPECT_LE(a.stats().reserved_bytes[0].peak, static_cast<std::int64_t>(4 * 16 * kMiB));
    } else {
      EXPECT_LE(reserved_now(a), static_cast<std::int64_t>(32 * 18 * kMiB));
      EXPECT_EQ(a.stats().num_device_alloc, allocs_after_first_round)
          << "pooled streams must find their cached buffers";
    }
    // record_stream semantics across pooled streams.
    StreamRef s1 = stream_from_pool(0), s2 = stream_from_pool(0);
    Block* b = a.malloc(16 * kMiB, s1.handle());
    std::atomic<bool> go{false};
    s2.launch_host_func([&] {
      while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    ASSERT_TRUE(a.record_stream(reinterpret_cast<void*>(b->ptr), s2.handle()));
    const auto p = b->ptr;
    release(a, b);
    Block* c = a.malloc(16 * kMiB, s1.handle());
    EXPECT_NE(c->ptr, p) << "reused while s2 still runs";
    go = true;
    s2.sync();
    release(a, c);
    a.empty_cache();
    EXPECT_EQ(reserved_now(a), 0);

    for (int i = 0; i < 1000; ++i) {
      Stream s(0);
      Block* x = nullptr;
      try {
        x = a.malloc(64 * kMiB, s.handle());
      } catch (const OutOfMemoryError& e) {
        ADD_FAILURE() << "stream " << i << ": cached memory of dead streams stranded the "
                      << "device: " << e.what();
        break;
      }
      release(a, x);
      s.sync();
    }
    a.empty_cache();
    EXPECT_EQ(reserved_now(a), 0);
    // Expandable segments reserve an address range per (pool, stream), as large as the
    // device: kept for dead streams, 1000 of them exceed the address space on a 141 GB GPU.
    EXPECT_EQ(a.stats().segment[0].current, 0) << "reservations of unused streams are kept";
  }
}

// pytorch#196209: compute-sanitizer memcheck reported accesses across the boundary of two
// physical chunks of an expandable segment. A block placed over a chunk boundary is written
// and read back whole (and, under compute-sanitizer on the GPU, must be clean).
TEST(TorchBugs, AccessAcrossChunkBoundaries_196209) {
  DeviceAllocator a = make("expandable_segments:True");
  std::vector<Block*> v;
  // 3 MiB + 5 MiB + 6 MiB...: blocks start and end at odd places of 8 MiB chunks.
  for (std::size_t mb : {3, 5, 6, 11, 2, 17}) v.push_back(a.malloc(mb * kMiB + 4096, nullptr));
  int spans = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uintptr_t lo = v[i]->ptr, hi = v[i]->ptr + v[i]->size - 1;
    spans += (lo / (2 * kMiB)) != (hi / (2 * kMiB));
    EXPECT_TRUE(round_trip(v[i], v[i]->size, static_cast<unsigned char>(i)));
  }
  EXPECT_GT(spans, 0) << "no block crossed a page boundary";
  // Freed and merged, then reused as one block across all of them.
  for (Block* b : v) release(a, b);
  Block* all = a.malloc(40 * kMiB, nullptr);
  EXPECT_TRUE(round_trip(all, 40 * kMiB, 42));
  release(a, all);
  a.empty_cache();
}
