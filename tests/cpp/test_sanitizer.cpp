// The stream sanitizer (include/cudakit/sanitizer.hpp): racy programs are reported, properly
// synchronised ones are not — eager ops, several streams, events, host synchronisation, graph
// replays, declared foreign kernels, allocation streams and frees. Runs on either backend.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cudakit/device.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/sanitizer.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"

using namespace cudakit;
namespace san = cudakit::sanitizer;

namespace {

// Runs first: under ctest cpp.test_sanitizer.sanitizer (CUDAKIT_CUDA_SANITIZER=1) the library
// switched the sanitizer on when it was loaded, before any call.
TEST(SanitizerEnvironment, EnablesAtLoad) {
  const char* v = std::getenv("CUDAKIT_CUDA_SANITIZER");
  if (!v || std::string(v) != "1") GTEST_SKIP() << "CUDAKIT_CUDA_SANITIZER is not 1";
  EXPECT_TRUE(san::is_enabled());
  EXPECT_EQ(san::on_race(), san::OnRace::raise);
}

class Sanitizer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available()) GTEST_SKIP() << "no device on backend " << backend_name();
    set_device(0);
    was_enabled_ = san::is_enabled();
    san::disable();
    san::enable(san::OnRace::raise);
    san::set_warning_handler([this](const std::string& m, bool /*from_free*/) {
      std::lock_guard lock(mu_);
      warnings_.push_back(m);
    });
  }
  void TearDown() override {
    if (!is_available()) return;
    synchronize();
    san::set_warning_handler(nullptr);
    san::disable();
    if (was_enabled_) san::enable();
  }
  std::vector<std::string> warnings() {
    std::lock_guard lock(mu_);
    return warnings_;
  }
  static Tensor dev_ones(std::int64_t n) { return ones({n}, device_options()); }
  // The race the tests provoke most: x written on the current (default) stream, then written
  // again on `other` with no synchronisation in between.
  static void write_on(StreamRef s, Tensor& x) {
    StreamGuard g(s);
    Tensor one = ones({1}, device_options());
    mul_(x, one);
  }

  bool was_enabled_ = false;
  std::mutex mu_;
  std::vector<std::string> warnings_;
};

TEST_F(Sanitizer, UnsynchronizedWriteAfterWriteRaisesAndDoesNotEnqueue) {
  Tensor x = dev_ones(16);
  Stream other;
  try {
    StreamGuard g(other);
    Tensor two = full({1}, 2.0, device_options());  // made on `other`: only x races
    mul_(x, two);
    FAIL() << "expected CUDASanitizerErrors";
  } catch (const san::CUDASanitizerErrors& e) {
    ASSERT_EQ(e.errors().size(), 1u);
    const auto& r = e.errors()[0];
    EXPECT_EQ(r.data_ptr, reinterpret_cast<std::uintptr_t>(x.data_ptr()));
    EXPECT_EQ(r.allocation, reinterpret_cast<std::uintptr_t>(x.storage()->data()));
    EXPECT_GE(r.allocation_size, 64u);
    EXPECT_EQ(r.current.stream, other.handle());
    EXPECT_EQ(r.previous.stream, nullptr);  // the legacy default stream (ones' fill)
    EXPECT_TRUE(r.current.write);
    EXPECT_EQ(r.current.kernel, "mul_");
    EXPECT_EQ(r.previous.kernel, "fill_");
    EXPECT_FALSE(r.allocation_stack.empty());
    const std::string msg = e.what();
    EXPECT_NE(msg.find("CSAN detected a possible data race on tensor with data pointer " +
                       std::to_string(r.data_ptr)), std::string::npos) << msg;
    EXPECT_NE(msg.find("Access by stream " +
                       std::to_string(reinterpret_cast<std::uintptr_t>(other.handle()))),
              std::string::npos) << msg;
    EXPECT_NE(msg.find("Previous access by stream 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("writing to argument(s) self, out"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Tensor was allocated with stack trace"), std::string::npos) << msg;
    EXPECT_NE(msg.find("C++ frames"), std::string::npos) << msg;
  }
  // Raise mode: the racy op was not enqueued.
  synchronize();
  EXPECT_EQ(sum(x).item().d, 16.0);
  EXPECT_EQ(san::stats().races, 1u);
}

TEST_F(Sanitizer, WaitStreamEventsAndHostSyncOrderAccesses) {
  Stream a, b;
  Tensor x = dev_ones(8);
  a.wait(current_stream());  // x's fill happens before a's next work
  EXPECT_NO_THROW(write_on(a, x));
  // b after a through an event.
  Event e;
  e.record(a);
  b.wait(e);
  EXPECT_NO_THROW(write_on(b, x));
  // Host waits for b, then the default stream may use x.
  b.sync();
  EXPECT_NO_THROW(add_(x, x));
  // Event.synchronize and device synchronize order too.
  Event e2;
  e2.record(current_stream());
  e2.sync();
  EXPECT_NO_THROW(write_on(a, x));
  synchronize();
  EXPECT_NO_THROW(write_on(b, x));
  // A query that found the work complete orders it as a synchronize would.
  while (!b.is_done()) std::this_thread::yield();
  EXPECT_NO_THROW(write_on(a, x));
  EXPECT_EQ(san::stats().races, 0u);
  EXPECT_GE(san::stats().accesses, 6u);
}

TEST_F(Sanitizer, ConcurrentReadsAreFineReadAfterUnorderedWriteIsNot) {
  Stream a, b;
  Tensor x = dev_ones(8);
  synchronize();
  {
    StreamGuard g(a);
    Tensor y = x * 2.0;
  }
  {
    StreamGuard g(b);
    Tensor z = x + 1.0;  // read / read: no ordering needed
  }
  synchronize();
  write_on(a, x);
  StreamGuard g(b);
  EXPECT_THROW(sum(x), san::CUDASanitizerErrors);  // reads what a may still be writing
}

TEST_F(Sanitizer, ViewsRaceOnlyWhereTheyOverlap) {
  Stream a, b;
  Tensor x = zeros({2, 64}, device_options());
  synchronize();
  Tensor row0 = x.select(0, 0), row1 = x.select(0, 1);
  {
    StreamGuard g(a);
    row0.fill_(1.0);
  }
  {
    StreamGuard g(b);
    EXPECT_NO_THROW(row1.fill_(2.0));  // disjoint bytes of one allocation
    EXPECT_THROW(x.fill_(3.0), san::CUDASanitizerErrors);  // overlaps row0
  }
  EXPECT_EQ(san::stats().races, 1u);
}

TEST_F(Sanitizer, WarnModeReportsAndRuns) {
  san::enable(san::OnRace::warn);
  Tensor x = dev_ones(4);
  Stream other;
  EXPECT_NO_THROW(write_on(other, x));
  auto w = warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("CSAN detected a possible data race"), std::string::npos);
  synchronize();
  EXPECT_EQ(sum(x).item().d, 4.0);  // the op ran (times one)
  EXPECT_EQ(san::on_race(), san::OnRace::warn);
}

TEST_F(Sanitizer, FirstUseOnAnotherStreamMustFollowTheAllocationStream) {
  Stream other;
  // Work on the default stream, then a fresh allocation there: its block may have been
  // freed by that work, so the other stream must wait before touching it.
  Tensor warm = dev_ones(4);
  Tensor x = empty({4}, device_options());
  {
    StreamGuard g(other);
    try {
      x.fill_(1.0);
      FAIL() << "expected a race with the allocation";
    } catch (const san::CUDASanitizerErrors& e) {
      EXPECT_EQ(e.errors()[0].previous.kernel, "allocation");
      EXPECT_NE(std::string(e.what()).find("handed out by the caching allocator"),
                std::string::npos);
    }
  }
  other.wait(current_stream());
  StreamGuard g(other);
  EXPECT_NO_THROW(x.fill_(1.0));
}

TEST_F(Sanitizer, FreeWithoutRecordStreamIsReportedAsAWarning) {
  Stream other;
  const std::size_t n = 4096;
  // Freed while `other` may still write it: the allocator hands it out again on the default
  // stream at once.
  void* p = caching_allocator_alloc(n, 0, current_stream());
  san::declare_access({}, {san::Buffer(p, n, "buf")}, other.ref(), "my_kernel");
  caching_allocator_delete(p);
  auto w = warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("The memory is freed"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("record_stream"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("my_kernel"), std::string::npos) << w[0];
  // record_stream makes the allocator wait for `other`: fine.
  void* q = caching_allocator_alloc(n, 0, current_stream());
  san::declare_access({}, {san::Buffer(q, n)}, other.ref(), "my_kernel");
  record_stream(q, other);
  caching_allocator_delete(q);
  // So does ordering `other` before the allocation stream.
  void* r = caching_allocator_alloc(n, 0, current_stream());
  san::declare_access({}, {san::Buffer(r, n)}, other.ref(), "my_kernel");
  current_stream().wait(other);
  caching_allocator_delete(r);
  EXPECT_EQ(warnings().size(), 1u);
}

TEST_F(Sanitizer, DeclaredForeignKernels) {
  Stream other;
  Tensor x = dev_ones(32);
  // A raw pointer into the middle of x's allocation is resolved to it.
  const char* mid = static_cast<const char*>(x.data_ptr()) + 64;
  EXPECT_THROW(san::declare_access({san::Buffer(mid, 16, "ptr")}, {}, other.ref(), "cupy_kernel"),
               san::CUDASanitizerErrors);
  // The scoped form declares once the launch returned; a launch that throws declares nothing.
  EXPECT_THROW(san::access({}, {san::Buffer(x, "out")}, [] { throw std::runtime_error("boom"); },
                           other.ref(), "k"),
               std::runtime_error);
  other.wait(current_stream());
  int launched = san::access({x}, {san::Buffer(x, "out")}, [] { return 7; }, other.ref(), "k");
  EXPECT_EQ(launched, 7);
  // The default stream now reads what the foreign kernel wrote, unordered.
  try {
    Tensor y = x + 1.0;
    FAIL() << "expected a race with the declared kernel";
  } catch (const san::CUDASanitizerErrors& e) {
    EXPECT_EQ(e.errors()[0].previous.kernel, "k");
    EXPECT_EQ(e.errors()[0].previous.aliases, std::vector<std::string>{"out"});
  }
  // Host memory and empty buffers are ignored.
  std::vector<float> host(8);
  EXPECT_NO_THROW(san::declare_access({}, {san::Buffer(host.data(), 32)}, other.ref()));
  EXPECT_NO_THROW(san::declare_access({}, {san::Buffer(nullptr, 0)}, other.ref()));
}

TEST_F(Sanitizer, GraphReplayMakesTheCapturedAccesses) {
  Tensor x = dev_ones(64);
  Tensor y;
  CUDAGraph g;
  capture(g, [&] { y = x * 2.0; });
  EXPECT_GT(san::stats().captured, 0u);
  EXPECT_EQ(san::stats().races, 0u);  // captured work is not checked eagerly
  Stream reader, writer;
  g.replay();  // on the default stream: writes y, reads x
  {
    StreamGuard guard(reader);
    EXPECT_THROW(sum(y), san::CUDASanitizerErrors);  // y is being written by the replay
  }
  reader.wait(current_stream());
  {
    StreamGuard guard(reader);
    EXPECT_NO_THROW(sum(y));
  }
  current_stream().wait(reader);  // the next replay rewrites y, which `reader` read
  // x written on another stream, then a replay reading it, unordered.
  writer.wait(current_stream());
  write_on(writer, x);
  EXPECT_THROW(g.replay(), san::CUDASanitizerErrors);
  current_stream().wait(writer);
  EXPECT_NO_THROW(g.replay());
  synchronize();
  EXPECT_EQ(sum(y).item().d, 128.0);
}

// The sanitizer switched off during a capture and on again before the replay: the capture's
// end still reaches it (src/instrument/observers.hpp: installed_stream_observer), so the
// graph keeps what was recorded while it was on, and its replays are checked.
TEST_F(Sanitizer, CaptureEndedAfterDisableKeepsItsAccesses) {
  Tensor x = dev_ones(64);
  Tensor y;
  CUDAGraph g;
  capture(g, [&] {
    y = x * 2.0;
    san::disable();
  });
  san::enable(san::OnRace::raise);
  Stream reader;
  g.replay();  // on the default stream: writes y
  {
    StreamGuard guard(reader);
    EXPECT_THROW(sum(y), san::CUDASanitizerErrors);
  }
  reader.wait(current_stream());
  synchronize();
}

TEST_F(Sanitizer, CopiesAndBlockingTransfers) {
  Stream other;
  Tensor x = dev_ones(16);
  Tensor h = x.to(Device::cpu());  // blocking: the host waited for the default stream
  {
    StreamGuard g(other);
    EXPECT_NO_THROW(x.fill_(2.0));  // ordered after the copy by the host's wait
  }
  Tensor d = empty({16}, device_options());
  EXPECT_THROW(d.copy_(x), san::CUDASanitizerErrors);  // reads x while `other` writes it
  current_stream().wait(other);
  EXPECT_NO_THROW(d.copy_(x));
  synchronize();
  EXPECT_EQ(sum(d).item().d, 32.0);
}

TEST_F(Sanitizer, DisabledTracksNothing) {
  san::disable();
  Tensor x = dev_ones(4);
  Stream other;
  EXPECT_NO_THROW(write_on(other, x));
  EXPECT_EQ(san::stats().accesses, 0u);
  EXPECT_FALSE(san::is_enabled());
}

TEST_F(Sanitizer, ThreadsOnTheirOwnStreamsDoNotRace) {
  // Each thread: its own stream and tensors, many small ops (TSan runs this, scripts/dev.sh).
  constexpr int kThreads = 4, kIters = 200;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      try {
        set_device(0);
        Stream s;
        StreamGuard g(s);
        Tensor a = ones({32}, device_options()), b = ones({32}, device_options());
        for (int i = 0; i < kIters; ++i) {
          add_(a, b);
          Tensor c = a * 0.5;
          b.copy_(c);
        }
        s.sync();
      } catch (...) {
        ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(san::stats().races, 0u);
  EXPECT_GE(san::stats().accesses, static_cast<std::uint64_t>(kThreads * kIters * 3));
}

}  // namespace
