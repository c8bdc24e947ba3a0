// Lock discipline of the allocators (issue 14.1): never wait on a stream, event or device
// while holding a lock that a stream task, host callback or finaliser may need.
//
//  * Deadlock reproductions: a stream task that frees memory when it finishes, queued before
//    an event the allocator has to wait for (empty_cache, the OOM retry path).
//  * A time-boxed stress: 16 threads mixing every allocator, stream and event call with
//    empty_cache, record_stream, synchronize and host tasks that allocate and free.
// A watchdog turns a hang into a failure that prints every thread's stack.
// CUDAKIT_STRESS_SECONDS scales the stress (default 3 s; longer on the GPU run).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/stream.hpp"
#include "hang_watchdog.hpp"

using namespace cudakit;
using cudakit::testing::HangWatchdog;
using cudakit::testing::stress_seconds;

namespace {
constexpr double kReproLimitSeconds = 30;

// A task on `s` that sleeps, then drops the last reference to `held` (the allocator's free
// runs on the stream's thread: the emulated worker, or CUDA's host-callback thread).
void queue_freeing_task(StreamRef s, std::shared_ptr<Allocation> held, int sleep_ms) {
  s.launch_host_func([held = std::move(held), sleep_ms]() mutable {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    held.reset();
  });
}
}  // namespace

// The ten-line reproduction of issue 14.1: empty_cache() has to wait for the event of a
// record_stream'd block, and that event follows a task that frees memory.
TEST(MemoryDeadlock, EmptyCacheWaitsForAStreamWhoseTaskFrees) {
  HangWatchdog wd(kReproLimitSeconds, "empty_cache() behind a freeing stream task");
  for (int round = 0; round < 3; ++round) {
    Stream side(0);
    StreamRef main = current_stream(0);
    Allocation x = allocate_device(4096, 0, side.ref());
    record_stream(x.get(), main);
    queue_freeing_task(main, std::make_shared<Allocation>(allocate_device(1 << 20)), 100);
    x.reset();      // its reuse now waits for an event recorded after the task
    empty_cache();  // must not hold the allocator lock while it waits for that event
    main.sync();
  }
  synchronize(0);
  empty_cache();
}

// Same shape through the allocation slow path: a request over the memory-fraction limit
// frees cached blocks and waits for outstanding record_stream events before it gives up.
TEST(MemoryDeadlock, OutOfMemoryRetryWaitsForAStreamWhoseTaskFrees) {
  HangWatchdog wd(kReproLimitSeconds, "the OOM retry path behind a freeing stream task");
  const auto total = static_cast<double>(mem_get_info(0).second);
  Stream side(0);
  StreamRef main = current_stream(0);
  Allocation x = allocate_device(4096, 0, side.ref());
  record_stream(x.get(), main);
  queue_freeing_task(main, std::make_shared<Allocation>(allocate_device(8192)), 100);
  x.reset();
  set_per_process_memory_fraction((static_cast<double>(memory_reserved(0)) + 4.0 * (1 << 20)) / total, 0);
  EXPECT_THROW(allocate_device(std::size_t(64) << 20), OutOfMemoryError);
  set_per_process_memory_fraction(1.0, 0);
  synchronize(0);
  EXPECT_NO_THROW(allocate_device(std::size_t(64) << 20));
  empty_cache();
}

// Pinned host memory used by a stream task: the host cache's empty_cache and allocation
// paths run while a task frees pinned memory.
TEST(MemoryDeadlock, HostEmptyCacheWhileAStreamTaskFreesPinnedMemory) {
  HangWatchdog wd(kReproLimitSeconds, "host_empty_cache() behind a freeing stream task");
  StreamRef main = current_stream(0);
  Allocation pinned = allocate_host(1 << 16, /*pinned=*/true);
  record_stream(pinned.get(), main);
  auto held = std::make_shared<Allocation>(allocate_host(1 << 12, true));
  main.launch_host_func([held]() mutable {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    held.reset();
  });
  held.reset();
  pinned.reset();
  host_empty_cache();
  main.sync();
  host_empty_cache();
  EXPECT_EQ(host_memory_stats()["allocations.current"], 0);
}

namespace {

struct Live {
  Allocation a;
  unsigned char tag = 0;
  bool recorded = false;  // record_stream'd: its free records events (a driver call)
};

class StressWorld {
 public:
  explicit StressWorld(int nstreams) {
    for (int i = 0; i < nstreams; ++i) streams_.emplace_back(0);
  }
  StreamRef stream(std::mt19937& rng) {
    const std::size_t k = rng() % (streams_.size() + 1);
    return k == streams_.size() ? current_stream(0) : streams_[k].ref();
  }

 private:
  std::vector<Stream> streams_;
};

std::size_t random_size(std::mt19937& rng) {
  switch (rng() % 8) {
    case 0: return (rng() % (8u << 20)) + 1;  // large pool, up to 8 MiB
    case 1: return (std::size_t(1) << 20) + (rng() % 4096);  // just over the small pool
    default: return (rng() % 16384) + 1;      // small pool
  }
}

}  // namespace

TEST(MemoryStress, SixteenThreadsMixingAllocatorStreamAndEventCalls) {
  const double seconds = stress_seconds();
  HangWatchdog wd(std::max(60.0, seconds * 10), "the allocator stress");
  const std::size_t base_alloc = memory_allocated(0);
  // Device memory is host-addressable on the emulated backend: tags catch overlapping blocks.
  const bool touch = std::string(detail::backend().name()) == "emulated";
  StressWorld world(3);
  std::atomic<bool> stop{false};
  std::atomic<int> overlaps{0}, ooms{0};
  std::atomic<long> ops{0};
  MemPool pool(false, false, 0);

  auto worker = [&](int t) {
    std::mt19937 rng(1234u + static_cast<unsigned>(t));
    std::vector<Live> live;
    unsigned char next_tag = static_cast<unsigned char>(t * 16);
    auto check = [&](const Live& l) {
      if (!touch || !l.a) return;
      auto* c = static_cast<unsigned char*>(l.a.get());
      if (c[0] != l.tag || c[l.a.size() - 1] != l.tag) overlaps++;
    };
    while (!stop.load(std::memory_order_relaxed)) {
      ops.fetch_add(1, std::memory_order_relaxed);
      const unsigned op = rng() % 100;
      try {
        if (op < 30 || live.empty()) {  // allocate on a random stream
          if (live.size() >= 48) continue;
          StreamRef s = world.stream(rng);
          Live l{allocate_device(random_size(rng), 0, s), ++next_tag, false};
          if (touch) {
            auto* c = static_cast<unsigned char*>(l.a.get());
            c[0] = c[l.a.size() - 1] = l.tag;
          }
          live.push_back(std::move(l));
        } else if (op < 55) {  // free
          const std::size_t k = rng() % live.size();
          check(live[k]);
          live[k] = std::move(live.back());
          live.pop_back();
        } else if (op < 63) {  // record_stream onto another stream
          Live& l = live[rng() % live.size()];
          record_stream(l.a.get(), world.stream(rng));
          l.recorded = true;
        } else if (op < 71) {  // a stream task owns the block and frees it when it finishes
          const std::size_t k = rng() % live.size();
          // CUDA forbids driver calls in host functions: there only blocks whose free needs
          // none (no record_stream) go to a task. The emulated backend has no such rule.
          if (!touch && live[k].recorded) continue;
          check(live[k]);
          auto held = std::make_shared<Allocation>(std::move(live[k].a));
          live[k] = std::move(live.back());
          live.pop_back();
          world.stream(rng).launch_host_func([held]() mutable { held.reset(); });
        } else if (op < 76) {  // a stream task allocates and frees (allocator on its thread)
          if (!touch) continue;  // may call the driver: not from a CUDA host function
          const std::size_t n = random_size(rng);
          world.stream(rng).launch_host_func([n] {
            try {
              Allocation a = allocate_device(n);
              Allocation h = allocate_host(256, true);
            } catch (const OutOfMemoryError&) {
            }
          });
        } else if (op < 83) {  // events: record here, wait there, sometimes block on it
          Event e;
          e.record(world.stream(rng));
          world.stream(rng).wait(e);
          if (rng() % 4 == 0) e.sync();
        } else if (op < 86) {
          world.stream(rng).sync();
        } else if (op < 87) {
          synchronize(0);
        } else if (op < 89) {
          empty_cache();
        } else if (op < 92) {  // pinned host memory used by a stream
          Allocation h = allocate_host(random_size(rng) % 65536 + 1, true);
          record_stream(h.get(), world.stream(rng));
          if (rng() % 8 == 0) host_empty_cache();
        } else if (op < 94) {  // raw pointers
          void* p = caching_allocator_alloc(random_size(rng), 0, world.stream(rng));
          caching_allocator_delete(p);
        } else if (op < 96) {  // a private pool on this thread
          UseMemPool use(pool, 0);
          Allocation a = allocate_device(random_size(rng));
          Allocation b = allocate_device(random_size(rng));
        } else if (op < 98) {
          (void)memory_stats(0);
          (void)memory_allocated(0);
          (void)host_memory_stats();
        } else {
          (void)allocation_info(live[rng() % live.size()].a.get());
        }
      } catch (const OutOfMemoryError&) {
        ooms++;
        live.clear();
      }
    }
    for (const Live& l : live) check(l);
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) threads.emplace_back(worker, t);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : threads) th.join();
  synchronize(0);

  EXPECT_EQ(overlaps.load(), 0) << "live allocations overlapped";
  EXPECT_GT(ops.load(), 1000);
  EXPECT_EQ(memory_allocated(0), base_alloc);
  empty_cache();
  auto m = memory_stats(0);
  EXPECT_EQ(m["active_bytes.all.current"], static_cast<std::int64_t>(base_alloc));
  if (base_alloc == 0) EXPECT_EQ(m["requested_bytes.all.current"], 0);
  host_empty_cache();
  EXPECT_EQ(host_memory_stats()["allocations.current"], 0);
  std::printf("stress: %ld operations in %.1f s on 16 threads (%d out-of-memory)\n", ops.load(),
              seconds, ooms.load());
}
