// Green contexts through the public C++ API: partition rules and errors, and green-context
// streams as ordinary cudakit streams (ops, events, waits, the allocator, graphs), the stream
// pool, set_context/pop_context, destruction. Runs on the emulated backend in CI and on the
// GPU with CUDAKIT_TEST_BACKEND=cuda (expectations come from the device's own rules).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/green_context.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/stream.hpp"
#include "graphs_test_util.hpp"

using namespace cudakit;
using namespace cudakit::graphs_test;

namespace {

int rounded(const SmResource& r, int n) {
  int c = n < r.min_partition_sms ? r.min_partition_sms : n;
  return (c + r.sm_alignment - 1) / r.sm_alignment * r.sm_alignment;
}

}  // namespace

TEST(GreenContexts, DeviceRules) {
  REQUIRE_DEVICE();
  SmResource r = GreenContext::sm_resource();
  EXPECT_EQ(r.sm_count, get_device_properties().multi_processor_count);
  EXPECT_GT(r.min_partition_sms, 0);
  EXPECT_GT(r.sm_alignment, 0);
  EXPECT_LE(r.min_partition_sms, r.sm_count);
}

TEST(GreenContexts, CreateRoundsUpToTheDeviceRules) {
  REQUIRE_DEVICE();
  SmResource r = GreenContext::sm_resource();
  for (int n : {1, 16, 66}) {
    GreenContext g = GreenContext::create(n);
    EXPECT_EQ(g.requested_sms(), n);
    EXPECT_EQ(g.sm_count(), rounded(r, n)) << n;
    EXPECT_EQ(g.device(), current_device());
    EXPECT_NE(g.handle(), nullptr);
  }
}

TEST(GreenContexts, ImpossibleCountsAreValueErrorsNamingTheRange) {
  REQUIRE_DEVICE();
  SmResource r = GreenContext::sm_resource();
  int largest = r.sm_count / r.sm_alignment * r.sm_alignment;
  for (int n : {0, -1, r.sm_count + 1, largest + 1}) {
    if (n > 0 && n <= r.sm_count && rounded(r, n) <= r.sm_count) continue;  // not impossible
    try {
      GreenContext::create(n);
      ADD_FAILURE() << "num_sms=" << n << " was accepted";
    } catch (const ValueError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("num_sms=" + std::to_string(n)), std::string::npos) << msg;
      EXPECT_NE(msg.find("1.." + std::to_string(largest)), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(GreenContext::create(8, device_count()), ValueError);  // no such device
}

TEST(GreenContexts, StreamsRunOpsWithCorrectResults) {
  REQUIRE_DEVICE();
  GreenContext g = GreenContext::create(16);
  StreamRef s = g.stream();
  EXPECT_EQ(s.device(), g.device());
  EXPECT_FALSE(s.is_default());
  StreamGuard guard(s);
  EXPECT_EQ(current_stream(), s);
  Tensor a = full({64, 32}, Scalar(2.0), device_options());
  Tensor b = full({32, 16}, Scalar(0.5), device_options());
  Tensor c = matmul(a, b);     // 32 * 2 * 0.5 = 32
  Tensor d = c + Scalar(1.0);  // 33
  s.sync();
  EXPECT_EQ(values(d), std::vector<double>(64 * 16, 33.0));
}

TEST(GreenContexts, EventsAndWaitsOrderWorkAcrossStreams) {
  REQUIRE_DEVICE();
  GreenContext g = GreenContext::create(8);
  StreamRef green = g.stream();
  Stream other;
  Tensor x = zeros({1 << 16}, device_options());
  {
    StreamGuard guard(green);
    // A slow host task first, so a missing wait would read zeros.
    green.launch_host_func([] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
    x.fill_(Scalar(7.0));
  }
  Event e;
  e.record(green);
  other.wait(e);
  Tensor y;
  {
    StreamGuard guard(other);
    y = x * Scalar(2.0);
  }
  other.sync();
  EXPECT_EQ(values(y), std::vector<double>(1 << 16, 14.0));
  // wait(StreamRef) in the other direction.
  {
    StreamGuard guard(other);
    x.fill_(Scalar(1.0));
  }
  green.wait(other);
  Tensor z;
  {
    StreamGuard guard(green);
    z = x + Scalar(1.0);
  }
  green.sync();
  EXPECT_EQ(values(z), std::vector<double>(1 << 16, 2.0));
}

TEST(GreenContexts, TheCachingAllocatorServesGreenStreams) {
  REQUIRE_DEVICE();
  GreenContext g = GreenContext::create(8);
  StreamRef s = g.stream();
  StreamGuard guard(s);
  void* first = nullptr;
  {
    Tensor t = empty({1 << 20}, device_options());
    first = t.data_ptr();
    t.fill_(Scalar(3.0));
    EXPECT_EQ(values(t.slice(0, 0, 4)), std::vector<double>(4, 3.0));
  }
  // Freed on its stream, the block is reused by the next allocation on the same stream.
  Tensor again = empty({1 << 20}, device_options());
  EXPECT_EQ(again.data_ptr(), first);
}

TEST(GreenContexts, GraphsCaptureAndReplayOnAGreenStream) {
  REQUIRE_DEVICE();
  GreenContext g = GreenContext::create(8);
  StreamRef s = g.stream();
  Tensor x = full({256}, Scalar(1.0), device_options());
  Tensor y;
  CUDAGraph graph;
  {
    StreamGuard guard(s);
    graph.capture_begin();
    y = x * Scalar(3.0) + Scalar(1.0);
    graph.capture_end();
  }
  x.fill_(Scalar(2.0));
  synchronize();
  {
    StreamGuard guard(s);
    graph.replay();
  }
  s.sync();
  EXPECT_EQ(values(y), std::vector<double>(256, 7.0));
}

TEST(GreenContexts, StreamPoolIsRoundRobinOver32) {
  REQUIRE_DEVICE();
  GreenContext g = GreenContext::create(8);
  std::vector<StreamRef> streams;
  for (int i = 0; i < 33; ++i) streams.push_back(g.stream());
  for (int i = 1; i < 32; ++i) EXPECT_FALSE(streams[i] == streams[0]) << i;
  EXPECT_TRUE(streams[32] == streams[0]);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST(GreenContexts, SetAndPopContextSwitchTheCurrentStream) {
  REQUIRE_DEVICE();
  GreenContext g = GreenContext::create(8);
  StreamRef before = current_stream();
  Tensor x = zeros({1024}, device_options());
  x.fill_(Scalar(5.0));  // on the previous stream: the context's work must come after it
  g.set_context();
  StreamRef inside = current_stream();
  EXPECT_FALSE(inside == before);
  EXPECT_EQ(current_device(), g.device());
  Tensor y = x + Scalar(1.0);
  EXPECT_THROW(g.set_context(), Error);  // twice without pop
  g.pop_context();
  EXPECT_TRUE(current_stream() == before);
  Tensor z = y * Scalar(2.0);  // after the context's work (pop_context ordered it)
  EXPECT_EQ(values(z), std::vector<double>(1024, 12.0));
  EXPECT_THROW(g.pop_context(), Error);  // without set
}
#pragma GCC diagnostic pop

TEST(GreenContexts, DestructionWaitsForTheStreamsWork) {
  REQUIRE_DEVICE();
  std::atomic<bool> ran{false};
  {
    GreenContext g = GreenContext::create(8);
    g.stream().launch_host_func([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ran = true;
    });
  }
  EXPECT_TRUE(ran.load());
}

TEST(GreenContexts, MovedFromContextRefuses) {
  REQUIRE_DEVICE();
  GreenContext a = GreenContext::create(8);
  int sms = a.sm_count();
  GreenContext b = std::move(a);
  EXPECT_EQ(b.sm_count(), sms);
  EXPECT_EQ(a.sm_count(), 0);  // NOLINT(bugprone-use-after-move): the documented state
  EXPECT_THROW(a.stream(), Error);
  EXPECT_NO_THROW(b.stream());
}
