// Graph lifecycle hooks (global and per graph), destroy callbacks and retained objects.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "support/emulated_testing.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/ops.hpp"
#include "graphs_test_util.hpp"

using namespace cudakit;
using namespace cudakit::graphs_test;

namespace {

// Removes the handles it collected when the test ends (global hooks outlive tests).
struct Handles {
  std::vector<HookHandle> list;
  void add(HookHandle h) { list.push_back(std::move(h)); }
  ~Handles() {
    for (auto& h : list) h.remove();
  }
};

}  // namespace

TEST(GraphHooks, FirePointsAndOrder) {
  REQUIRE_DEVICE();
  std::vector<std::string> seen;
  Handles h;
  h.add(register_graph_capture_start_hook([&](CUDAGraph&) { seen.push_back("g.capture_start"); }));
  h.add(register_graph_capture_end_hook([&](CUDAGraph&) { seen.push_back("g.capture_end"); }));
  h.add(register_graph_instantiate_hook([&](CUDAGraph&) { seen.push_back("g.instantiate"); }));
  h.add(register_graph_replay_start_hook([&](CUDAGraph&) { seen.push_back("g.replay_start"); }));
  h.add(register_graph_replay_end_hook([&](CUDAGraph&) { seen.push_back("g.replay_end"); }));
  Tensor x = zeros({4}, device_options());
  Tensor y;
  CUDAGraph g;
  g.register_capture_start_hook([&](CUDAGraph&) { seen.push_back("p.capture_start"); });
  g.register_capture_end_hook([&](CUDAGraph&) { seen.push_back("p.capture_end"); });
  g.register_post_instantiate_hook([&](CUDAGraph&) { seen.push_back("p.instantiate"); });
  g.register_replay_start_hook([&](CUDAGraph&) { seen.push_back("p.replay_start"); });
  g.register_replay_end_hook([&](CUDAGraph&) { seen.push_back("p.replay_end"); });
  capture(g, [&] { y = x + 1.0; });
  // keep_graph=false instantiates from capture_end: instantiate lands after capture end.
  EXPECT_EQ(seen, (std::vector<std::string>{"g.capture_start", "p.capture_start",
                                            "g.capture_end", "p.capture_end", "g.instantiate",
                                            "p.instantiate"}));
  seen.clear();
  g.replay();
  g.replay();
  synchronize();
  EXPECT_EQ(seen, (std::vector<std::string>{"g.replay_start", "p.replay_start", "g.replay_end",
                                            "p.replay_end", "g.replay_start", "p.replay_start",
                                            "g.replay_end", "p.replay_end"}));
  // Registration order within a kind; removal.
  seen.clear();
  HookHandle second = g.register_replay_start_hook([&](CUDAGraph&) { seen.push_back("p2"); });
  EXPECT_TRUE(second.registered());
  g.replay();
  EXPECT_EQ(seen[1], "p.replay_start");
  EXPECT_EQ(seen[2], "p2");
  second.remove();
  second.remove();  // idempotent
  EXPECT_FALSE(second.registered());
  for (auto& handle : h.list) handle.remove();
  seen.clear();
  g.replay();
  EXPECT_EQ(seen, (std::vector<std::string>{"p.replay_start", "p.replay_end"}));
  synchronize();
}

TEST(GraphHooks, HooksGetTheGraphAndSeeTheRightState) {
  REQUIRE_DEVICE();
  Handles h;
  std::vector<bool> capturing_at_start;
  std::vector<bool> template_at_end;
  CUDAGraph* seen_graph = nullptr;
  h.add(register_graph_capture_start_hook([&](CUDAGraph& g) {
    seen_graph = &g;
    capturing_at_start.push_back(is_current_stream_capturing() && g.is_capturing());
  }));
  h.add(register_graph_capture_end_hook([&](CUDAGraph& g) {
    template_at_end.push_back(g.has_graph() && g.raw_cuda_graph() != nullptr);
  }));
  h.add(register_graph_instantiate_hook([&](CUDAGraph& g) {
    EXPECT_TRUE(g.has_graph_exec());
    EXPECT_NE(g.raw_cuda_graph_exec(), nullptr);
  }));
  Tensor x = zeros({4}, device_options());
  Tensor y;
  for (bool keep : {false, true}) {
    CUDAGraph g(keep);
    capture(g, [&] { y = x + 1.0; });
    EXPECT_EQ(seen_graph, &g);
    g.replay();
  }
  synchronize();
  EXPECT_EQ(capturing_at_start, (std::vector<bool>{true, true}));
  EXPECT_EQ(template_at_end, (std::vector<bool>{true, true}));
}

TEST(GraphHooks, RaisingPerGraphReplayStartHookAbortsTheReplay) {
  REQUIRE_DEVICE();
  Tensor x = full({4}, Scalar(1.0), device_options());
  Tensor y;
  CUDAGraph g;
  capture(g, [&] { y = x * 2.0; });
  g.replay();
  synchronize();
  int ends = 0;
  Handles h;
  h.add(register_graph_replay_end_hook([&](CUDAGraph&) { ++ends; }));
  g.register_replay_end_hook([&](CUDAGraph&) { ++ends; });
  HookHandle bad = g.register_replay_start_hook(
      [](CUDAGraph&) { throw std::runtime_error("no replay today"); });
  x.fill_(Scalar(5.0));
  EXPECT_THROW(g.replay(), std::runtime_error);
  synchronize();
  EXPECT_EQ(ends, 0);                                    // no end hook fired
  EXPECT_EQ(values(y), std::vector<double>(4, 2.0));     // and nothing was launched
  bad.remove();
  g.replay();
  synchronize();
  EXPECT_EQ(ends, 2);
  EXPECT_EQ(values(y), std::vector<double>(4, 10.0));
}

TEST(GraphHooks, GlobalHookExceptionsAreSwallowedPerGraphOnesPropagate) {
  REQUIRE_DEVICE();
  Handles h;
  int later = 0;
  h.add(register_graph_replay_start_hook([](CUDAGraph&) { throw std::runtime_error("boom"); }));
  h.add(register_graph_replay_start_hook([&](CUDAGraph&) { ++later; }));
  h.add(register_graph_capture_end_hook([](CUDAGraph&) { throw std::runtime_error("boom"); }));
  h.add(register_graph_instantiate_hook([](CUDAGraph&) { throw std::runtime_error("boom"); }));
  Tensor x = full({4}, Scalar(1.0), device_options());
  Tensor y;
  CUDAGraph g;
  capture(g, [&] { y = x + 1.0; });
  g.replay();
  synchronize();
  EXPECT_EQ(later, 1);
  EXPECT_EQ(values(y), std::vector<double>(4, 2.0));

  // A raising per-graph capture-end hook propagates out of capture_end, with the capture
  // ended and the graph not instantiated (torch: no finalize behind the user's error).
  CUDAGraph g2;
  g2.register_capture_end_hook([](CUDAGraph&) { throw std::runtime_error("bad hook"); });
  EXPECT_THROW(capture(g2, [&] { y = x + 2.0; }), std::runtime_error);
  EXPECT_FALSE(g2.is_capturing());
  EXPECT_FALSE(is_current_stream_capturing());
  EXPECT_FALSE(g2.has_graph_exec());
  g2.reset();

  // A raising capture-start hook leaves no capture behind.
  CUDAGraph g3;
  g3.register_capture_start_hook([](CUDAGraph&) { throw std::runtime_error("bad start"); });
  EXPECT_THROW(capture(g3, [&] { y = x + 3.0; }), std::runtime_error);
  EXPECT_FALSE(g3.is_capturing());
  EXPECT_FALSE(is_current_stream_capturing());
}

TEST(GraphHooks, ReplayEndFiresWhenTheLaunchThrows) {
  REQUIRE_DEVICE();
  // Needs a launch that fails cleanly: the emulated backend rejects a made-up stream handle
  // (on a GPU the same call would be undefined behaviour).
  if (!detail::is_emulated_backend()) GTEST_SKIP() << "emulated backend only";
  Tensor x = zeros({4}, device_options());
  Tensor y;
  CUDAGraph g;
  capture(g, [&] { y = x + 1.0; });
  std::vector<std::string> seen;
  Handles h;
  h.add(register_graph_replay_start_hook([&](CUDAGraph&) { seen.push_back("g.start"); }));
  h.add(register_graph_replay_end_hook([&](CUDAGraph&) { seen.push_back("g.end"); }));
  g.register_replay_end_hook([&](CUDAGraph&) { seen.push_back("p.end"); });
  StreamRef before = current_stream();
  set_stream(StreamRef::from_handle(reinterpret_cast<detail::StreamHandle>(0xdead0), 0));
  EXPECT_THROW(g.replay(), AcceleratorError);
  set_stream(before);
  EXPECT_EQ(seen, (std::vector<std::string>{"g.start", "g.end", "p.end"}));
}

TEST(GraphHooks, DestroyHooksFireOncePerCaptureCycle) {
  REQUIRE_DEVICE();
  std::vector<std::vector<std::uint32_t>> destroyed;
  Handles h;
  h.add(register_graph_destroy_hook(
      [&](const std::vector<std::uint32_t>& ids) { destroyed.push_back(ids); }));
  Tensor x = zeros({4}, device_options());
  Tensor y;
  {
    CUDAGraph g;
    g.reset();  // nothing captured in this cycle: no destroy hook
    EXPECT_TRUE(destroyed.empty());
    capture(g, [&] { y = x + 1.0; });
    for (int i = 0; i < 3; ++i) g.replay();
    synchronize();
    const auto exec_id = g.exec_graph_id();
    EXPECT_TRUE(destroyed.empty());
    g.reset();
    ASSERT_EQ(destroyed.size(), 1u);
    if (exec_id) {
      EXPECT_EQ(destroyed[0], std::vector<std::uint32_t>{*exec_id});
    }
    g.reset();  // a second reset starts no new cycle
    EXPECT_EQ(destroyed.size(), 1u);
    capture(g, [&] { y = x + 2.0; });
  }  // destruction ends the second cycle
  EXPECT_EQ(destroyed.size(), 2u);
  // Re-instantiation: both exec graphs are reported.
  {
    CUDAGraph g(/*keep_graph=*/true);
    capture(g, [&] { y = x + 3.0; });
    g.instantiate();
    g.instantiate();
  }
  ASSERT_EQ(destroyed.size(), 3u);
  if (detail::backend().graph_tools_ids_available()) EXPECT_EQ(destroyed[2].size(), 2u);
}

TEST(GraphHooks, DestroyCallbacksAndRetainedObjects) {
  REQUIRE_DEVICE();
  Tensor x = zeros({4}, device_options());
  Tensor y;
  std::vector<int> order;
  std::weak_ptr<const void> watch;
  {
    CUDAGraph g;
    g.register_destroy_callback([&] { order.push_back(1); });
    g.register_destroy_callback([] { throw std::runtime_error("swallowed"); });
    HookHandle removed = g.register_destroy_callback([&] { order.push_back(99); });
    g.register_destroy_callback([&] { order.push_back(2); }, /*synchronize_before_release=*/true);
    removed.remove();
    auto obj = std::make_shared<int>(7);
    watch = obj;
    g.retain_object(obj);
    obj.reset();
    EXPECT_FALSE(watch.expired());  // kept alive by the graph
    capture(g, [&] { y = x + 1.0; });
    g.replay();
    g.reset();  // fires this cycle's callbacks (after syncing the replay stream)
    EXPECT_EQ(order, (std::vector<int>{1, 2}));
    EXPECT_TRUE(watch.expired());
    // Next cycle: new registrations fire on destruction.
    g.register_destroy_callback([&] { order.push_back(3); });
  }
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  // An early remove() drops a retained object.
  CUDAGraph g;
  auto obj = std::make_shared<int>(8);
  watch = obj;
  HookHandle keep = g.retain_object(obj);
  obj.reset();
  EXPECT_FALSE(watch.expired());
  keep.remove();
  EXPECT_TRUE(watch.expired());
  EXPECT_THROW(g.register_destroy_callback(nullptr), ValueError);
}

TEST(GraphHooks, HookMayRemoveItselfWhileFiring) {
  REQUIRE_DEVICE();
  Tensor x = zeros({4}, device_options());
  Tensor y;
  CUDAGraph g;
  capture(g, [&] { y = x + 1.0; });
  int calls = 0;
  auto handle = std::make_shared<HookHandle>();
  *handle = register_graph_replay_start_hook([&calls, handle](CUDAGraph&) {
    ++calls;
    handle->remove();
  });
  g.replay();
  g.replay();
  synchronize();
  EXPECT_EQ(calls, 1);
  handle->remove();
}

TEST(GraphHooks, ConcurrentRegistrationWhileReplaying) {
  REQUIRE_DEVICE();
  Tensor x = zeros({64}, device_options());
  Tensor y;
  CUDAGraph g;
  capture(g, [&] { y = x + 1.0; });
  std::atomic<bool> stop{false};
  std::atomic<long> fired{0};
  std::thread registrar([&] {
    while (!stop.load()) {
      HookHandle a = register_graph_replay_start_hook([&](CUDAGraph&) { fired++; });
      HookHandle b = g.register_replay_end_hook([&](CUDAGraph&) { fired++; });
      std::this_thread::yield();
      a.remove();
      b.remove();
    }
  });
  Stream s;
  {
    StreamGuard guard(s);
    for (int i = 0; i < 2000; ++i) g.replay();
  }
  stop = true;
  registrar.join();
  s.sync();
  EXPECT_EQ(values(y), std::vector<double>(64, 1.0));
}
