// CUDA graphs through the public C++ API: capture/replay, keep_graph, bad input, illegal
// operations, capture modes, pools, RNG, cross-stream capture, get_graph_data, debug_dump.
// Runs on the emulated backend in CI and on the GPU with CUDAKIT_TEST_BACKEND=cuda.
// Hooks: test_graphs_hooks.cpp; annotations: test_graphs_annotations.cpp.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/emulated_testing.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/random.hpp"
#include "graphs_test_util.hpp"

using namespace cudakit;
using namespace cudakit::graphs_test;

TEST(Graphs, CaptureAndReplay) {
  REQUIRE_DEVICE();
  Tensor x = full({8}, Scalar(1.0), device_options());
  Tensor y;
  CUDAGraph g;
  capture(g, [&] { y = x * 2.0 + 1.0; });
  EXPECT_FALSE(g.is_capturing());
  EXPECT_TRUE(g.has_graph_exec());
  EXPECT_FALSE(g.has_graph());  // keep_graph=false: template destroyed by capture_end
  g.replay();
  synchronize();
  EXPECT_EQ(values(y), std::vector<double>(8, 3.0));
  x.fill_(Scalar(5.0));
  g.replay();
  synchronize();
  EXPECT_EQ(values(y), std::vector<double>(8, 11.0));
  // Replay on a created stream too.
  Stream s;
  {
    StreamGuard guard(s);
    x.fill_(Scalar(-1.0));
    g.replay();
  }
  s.sync();
  EXPECT_EQ(values(y), std::vector<double>(8, -1.0));
}

TEST(Graphs, CaptureWithExplicitBeginEnd) {
  REQUIRE_DEVICE();
  Tensor x = full({4}, Scalar(2.0), device_options());
  Stream s;
  s.wait(current_stream());  // x is filled on the default stream; s is a non-blocking stream
  CUDAGraph g;
  Tensor y;
  {
    StreamGuard guard(s);
    g.capture_begin();
    EXPECT_TRUE(is_current_stream_capturing());
    y = x * x;
    g.capture_end();
    EXPECT_FALSE(is_current_stream_capturing());
    g.replay();
  }
  s.sync();
  EXPECT_EQ(values(y), std::vector<double>(4, 4.0));
  EXPECT_FALSE(is_current_stream_capturing());  // default stream: never capturing
}

TEST(Graphs, KeepGraphInstantiatesOnFirstReplay) {
  REQUIRE_DEVICE();
  Tensor x = full({4}, Scalar(1.0), device_options());
  Tensor y;
  CUDAGraph g(/*keep_graph=*/true);
  capture(g, [&] { y = x + 1.0; });
  EXPECT_TRUE(g.has_graph());
  EXPECT_FALSE(g.has_graph_exec());
  EXPECT_NE(g.raw_cuda_graph(), nullptr);
  EXPECT_THROW(g.raw_cuda_graph_exec(), Error);
  g.replay();
  EXPECT_TRUE(g.has_graph_exec());
  synchronize();
  EXPECT_EQ(values(y), std::vector<double>(4, 2.0));
  // Re-instantiation makes a fresh exec graph; the template stays.
  auto first = g.raw_cuda_graph_exec();
  (void)first;
  g.instantiate();
  EXPECT_TRUE(g.has_graph());
  g.replay();
  synchronize();
  EXPECT_EQ(values(y), std::vector<double>(4, 2.0));
}

TEST(Graphs, CaptureEndPreAndPost) {
  REQUIRE_DEVICE();
  Tensor x = full({4}, Scalar(1.0), device_options());
  Stream s;
  s.wait(current_stream());  // the replay on `s` reads x, filled on the default stream
  CUDAGraph g;  // keep_graph=false
  StreamGuard guard(s);
  g.capture_begin();
  Tensor y = x * 3.0;
  g.capture_end_pre();
  EXPECT_TRUE(g.has_graph());  // template live in both modes
  // keep_graph=false: post needs the instantiation first; state is unchanged by the error.
  EXPECT_THROW(g.capture_end_post(), Error);
  EXPECT_TRUE(g.has_graph());
  g.instantiate();
  g.capture_end_post();
  EXPECT_FALSE(g.has_graph());
  EXPECT_TRUE(g.has_graph_exec());
  g.replay();
  s.sync();
  EXPECT_EQ(values(y), std::vector<double>(4, 3.0));
}

TEST(Graphs, BadInput) {
  REQUIRE_DEVICE();
  EXPECT_THROW(parse_capture_error_mode("sometimes"), ValueError);
  try {
    parse_capture_error_mode("sometimes");
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'sometimes'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("thread_local"), std::string::npos);
  }
  EXPECT_EQ(parse_capture_error_mode("thread_local"), CaptureErrorMode::thread_local_);

  CUDAGraph g;
  // Replay before any capture.
  EXPECT_THROW(g.replay(), Error);
  EXPECT_THROW(g.pool(), Error);
  EXPECT_THROW(g.instantiate(), Error);
  EXPECT_THROW(g.capture_end(), Error);
  EXPECT_THROW(g.get_graph_data(), Error);
  EXPECT_THROW(g.debug_dump("/tmp/never.dot"), Error);
  // Capture on the legacy default stream (the current stream here).
  ASSERT_TRUE(current_stream().is_default());
  try {
    g.capture_begin();
    FAIL() << "capture on the default stream must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-default stream"), std::string::npos);
  }
  EXPECT_FALSE(g.is_capturing());
  EXPECT_FALSE(is_current_stream_capturing());
  // Default pool id and empty hooks.
  Stream s;
  {
    StreamGuard guard(s);
    EXPECT_THROW(g.capture_begin(MempoolId{0, 0}), ValueError);
    EXPECT_THROW(g.capture_begin(std::nullopt, static_cast<CaptureErrorMode>(7)), ValueError);
    EXPECT_FALSE(is_current_stream_capturing());
  }
  EXPECT_THROW(g.register_replay_start_hook(nullptr), ValueError);
  EXPECT_THROW(register_graph_destroy_hook(nullptr), ValueError);

  // Replay after reset.
  Tensor x = full({2}, Scalar(1.0), device_options());
  Tensor y;
  capture(g, [&] { y = x + 1.0; });
  g.replay();
  g.reset();
  EXPECT_THROW(g.replay(), Error);
  // A second capture into a graph that owns one is refused until reset().
  capture(g, [&] { y = x + 2.0; });
  EXPECT_THROW(capture(g, [&] { y = x + 3.0; }), Error);
  EXPECT_FALSE(is_current_stream_capturing());
  g.replay();
  synchronize();
  EXPECT_EQ(values(y), std::vector<double>(2, 3.0));
}

TEST(Graphs, CaptureEndOnAnotherStreamIsRefused) {
  REQUIRE_DEVICE();
  Stream s1, s2;
  CUDAGraph g;
  {
    StreamGuard guard(s1);
    g.capture_begin();
  }
  {
    StreamGuard guard(s2);
    EXPECT_THROW(g.capture_end(), Error);
  }
  EXPECT_TRUE(g.is_capturing());  // state intact
  {
    StreamGuard guard(s1);
    g.capture_end();
  }
  EXPECT_TRUE(g.has_graph_exec());
}

TEST(Graphs, IllegalOperationEndsCaptureCleanly) {
  REQUIRE_DEVICE();
  Tensor x = full({4}, Scalar(1.0), device_options());
  CUDAGraph g;
  Stream s;
  {
    StreamGuard guard(s);
    g.capture_begin();
    Tensor y = x + 1.0;
    // A host-synchronous copy (stream synchronize) is illegal during capture.
    try {
      (void)y.cpu();
      FAIL() << "a synchronizing copy during capture must throw";
    } catch (const AcceleratorError& e) {
      EXPECT_EQ(e.code(), errc::stream_capture_unsupported) << e.what();
    }
    try {
      g.capture_end();
      FAIL() << "capture_end of an invalidated capture must throw";
    } catch (const AcceleratorError& e) {
      EXPECT_EQ(e.code(), errc::stream_capture_invalidated) << e.what();
      EXPECT_NE(std::string(e.what()).find("discarded"), std::string::npos);
    }
    EXPECT_FALSE(g.is_capturing());
    EXPECT_FALSE(is_current_stream_capturing());
  }
  EXPECT_FALSE(g.has_graph_exec());
  // The process and the graph stay usable.
  Tensor z = x * 4.0;
  EXPECT_EQ(values(z), std::vector<double>(4, 4.0));
  Tensor w;
  capture(g, [&] { w = x * 5.0; });
  g.replay();
  synchronize();
  EXPECT_EQ(values(w), std::vector<double>(4, 5.0));
}

TEST(Graphs, ExceptionInsideCaptureAbortsIt) {
  REQUIRE_DEVICE();
  Tensor x = full({4}, Scalar(1.0), device_options());
  CUDAGraph g;
  StreamRef before = current_stream();
  EXPECT_THROW(capture(g, [&] {
                 Tensor y = x + 1.0;
                 throw std::runtime_error("user error");
               }),
               std::runtime_error);
  EXPECT_FALSE(g.is_capturing());
  EXPECT_FALSE(g.has_graph_exec());
  EXPECT_TRUE(current_stream() == before);  // the stream was restored
  EXPECT_FALSE(is_current_stream_capturing());
  Tensor w;
  capture(g, [&] { w = x - 1.0; });
  g.replay();
  synchronize();
  EXPECT_EQ(values(w), std::vector<double>(4, 0.0));
}

// A device allocation that is not routed to the graph's pool (another thread, its own
// stream, a size no cached block fits) while a global capture is live.
TEST(Graphs, ForeignAllocationUnderGlobalMode) {
  REQUIRE_DEVICE();
  // The rule under test is cudaMalloc's (plain segments): CUDA permits the expandable
  // segments' cuMemCreate / cuMemMap under a global capture (seen on the H200), and they are
  // the default for large blocks since issue 27.
  set_allocator_settings("expandable_segments:False");
  struct Restore {
    ~Restore() { set_allocator_settings("expandable_segments:True"); }
  } restore;
  Tensor x = full({4}, Scalar(1.0), device_options());
  for (CaptureErrorMode mode :
       {CaptureErrorMode::global, CaptureErrorMode::thread_local_, CaptureErrorMode::relaxed}) {
    SCOPED_TRACE(capture_error_mode_name(mode));
    CUDAGraph g;
    Stream mine;  // created before the capture: only the allocation is under test
    CaptureOptions opts;
    opts.capture_error_mode = mode;
    GraphCapture cap(g, opts);
    Tensor y = x + 1.0;
    int code = 0;
    std::thread other([&] {
      try {
        StreamGuard guard(mine);
        Tensor big = empty({37 * 1024 * 1024 / 4 + 123}, device_options());
      } catch (const AcceleratorError& e) {
        code = e.code();
      }
    });
    other.join();
    if (mode == CaptureErrorMode::global) {
      EXPECT_EQ(code, errc::stream_capture_unsupported);
      if (detail::is_emulated_backend()) {
        EXPECT_THROW(cap.end(), AcceleratorError);  // the capture was invalidated
        EXPECT_FALSE(g.has_graph_exec());
      } else {
        // Whether the driver invalidates the capture is its call; the capture ends either way.
        try {
          cap.end();
        } catch (const AcceleratorError& e) {
          EXPECT_EQ(e.code(), errc::stream_capture_invalidated) << e.what();
        }
      }
    } else {
      EXPECT_EQ(code, 0);
      cap.end();
      g.replay();
      synchronize();
      EXPECT_EQ(values(y), std::vector<double>(4, 2.0));
    }
    EXPECT_FALSE(is_current_stream_capturing());
  }
}

TEST(Graphs, AllocationsGoToThePrivatePoolAndReplayAllocatesNothing) {
  REQUIRE_DEVICE();
  empty_cache();
  const std::size_t reserved_before = memory_reserved();
  Tensor x = full({256}, Scalar(1.0), device_options());
  Tensor y;
  MempoolId pool;
  {
    CUDAGraph g;
    capture(g, [&] {
      Tensor a = x + 1.0;   // freed during capture: its block may be reused below
      Tensor b = a * 2.0;
      a = Tensor();
      Tensor c = x * 3.0;
      y = b + c;
    });
    pool = g.pool();
    EXPECT_NE(pool, (MempoolId{0, 0}));
    ASSERT_EQ(g.pools().size(), 1u);
    // The output lives in the graph's pool.
    const std::string snap = memory_snapshot_json(pool);
    EXPECT_NE(snap.find("\"address\":" +
                        std::to_string(reinterpret_cast<std::uintptr_t>(y.data_ptr()))),
              std::string::npos);
    const auto allocs = memory_stats_of().allocation[0].allocated;
    const auto segs = memory_stats_of().num_device_alloc;
    for (int i = 0; i < 10; ++i) g.replay();
    synchronize();
    EXPECT_EQ(memory_stats_of().allocation[0].allocated, allocs);
    EXPECT_EQ(memory_stats_of().num_device_alloc, segs);
    EXPECT_EQ(values(y), std::vector<double>(256, 7.0));  // (1+1)*2 + 3
    // A second graph sharing the pool.
    CUDAGraph g2;
    CaptureOptions opts;
    opts.pool = g.pool();
    Tensor z;
    capture(g2, [&] { z = y + 1.0; }, opts);
    EXPECT_EQ(g2.pool(), g.pool());
    g.replay();
    g2.replay();
    synchronize();
    EXPECT_EQ(values(z), std::vector<double>(256, 8.0));
    z = Tensor();
  }
  // Graphs gone; the output keeps its block until dropped, then the pool returns its memory.
  EXPECT_EQ(values(y), std::vector<double>(256, 7.0));
  y = Tensor();
  x = Tensor();
  empty_cache();
  EXPECT_EQ(memory_reserved(), reserved_before);
}

TEST(Graphs, RngAdvancesPerReplayAndManualSeedReproduces) {
  REQUIRE_DEVICE();
  manual_seed(1234);
  Tensor eager = rand({64}, device_options());
  const std::vector<double> expected_first = values(eager);

  manual_seed(1234);
  Tensor r;
  CUDAGraph g;
  capture(g, [&] { r = rand({64}, device_options()); });
  const std::uint64_t offset0 = default_generator().offset();
  g.replay();
  synchronize();
  const std::vector<double> first = values(r);
  const std::uint64_t per_replay = default_generator().offset() - offset0;
  EXPECT_GT(per_replay, 0u);  // the default generator advances
  g.replay();
  synchronize();
  const std::vector<double> second = values(r);
  EXPECT_NE(first, second);  // fresh numbers per replay
  EXPECT_EQ(first, expected_first);  // replays draw what eager sampling would
  manual_seed(1234);
  g.replay();
  synchronize();
  EXPECT_EQ(values(r), first);  // reproducible after manual_seed
}

TEST(Graphs, CrossStreamForkJoin) {
  REQUIRE_DEVICE();
  Tensor x = full({16}, Scalar(2.0), device_options());
  Tensor a, b, c;
  Stream side;
  CUDAGraph g(/*keep_graph=*/true);
  GraphCapture cap(g);
  StreamRef main = cap.stream();
  a = x + 1.0;
  side.wait(main);  // fork: side joins the capture
  {
    StreamGuard guard(side);
    b = x * 10.0;
  }
  main.wait(side);  // join
  c = a + b;
  cap.end();
  g.replay();
  synchronize();
  EXPECT_EQ(values(c), std::vector<double>(16, 23.0));
  if (detail::backend().graph_tools_ids_available()) {
    g.instantiate();
    auto data = g.get_graph_data();
    // The join node (c = a + b) depends on both branches.
    bool has_join = false;
    for (const auto& n : data->nodes) has_join = has_join || n.dependencies.size() >= 2;
    EXPECT_TRUE(has_join);
  }
}

TEST(Graphs, GraphDataStructure) {
  REQUIRE_DEVICE();
  if (!detail::backend().graph_tools_ids_available()) GTEST_SKIP() << "no tools ids";
  Tensor x = zeros({2000}, device_options());
  Tensor y = ones({2000}, device_options());
  std::atomic<int> host_runs{0};
  CUDAGraph g(/*keep_graph=*/true);
  Tensor z;
  capture(g, [&] {
    z = x + y;
    z = z * 2.0;
    z = relu(z);
    current_stream().launch_host_func([&] { host_runs++; });
  });
  EXPECT_THROW(g.get_graph_data(), Error);  // not instantiated yet
  g.instantiate();
  auto data = g.get_graph_data();
  ASSERT_TRUE(data);
  EXPECT_EQ(data->exec_graph_id, *g.exec_graph_id());
  int kernels = 0, hosts = 0;
  for (std::size_t i = 0; i < data->nodes.size(); ++i) {
    const GraphNodeData& n = data->nodes[i];
    EXPECT_EQ(n.index, i);
    EXPECT_EQ(n.graph_id, data->exec_graph_id);
    EXPECT_EQ(n.tools_id, (static_cast<std::uint64_t>(data->exec_graph_id) << 32) | n.node_id);
    for (std::size_t d : n.dependencies) {
      ASSERT_LT(d, data->nodes.size());
      const auto& back = data->nodes[d].dependents;
      EXPECT_NE(std::find(back.begin(), back.end(), i), back.end());
    }
    if (n.node_type == "kernel") {
      ++kernels;
      ASSERT_TRUE(n.kernel_name.has_value());
      EXPECT_FALSE(n.kernel_name->empty());
      EXPECT_EQ(n.host_fn_addr, 0u);
    } else {
      EXPECT_FALSE(n.kernel_name.has_value());
    }
    if (n.node_type == "host") {
      ++hosts;
      EXPECT_NE(n.host_fn_addr, 0u);
    }
  }
  EXPECT_GE(kernels, 3);
  EXPECT_EQ(hosts, 1);
  if (detail::is_emulated_backend()) {
    EXPECT_EQ(*data->nodes[0].kernel_name, "ck_binary");
    const GraphNodeData& host = data->nodes.back();
    ASSERT_TRUE(host.host_fn_name.has_value());
    EXPECT_NE(host.host_fn_name->find("run_host_node"), std::string::npos);
  }
  // Node ids are distinct; tools ids of two instantiations differ only in the graph half.
  const std::uint32_t first_exec = data->exec_graph_id;
  g.instantiate();
  auto again = g.get_graph_data();
  EXPECT_NE(again->exec_graph_id, first_exec);
  for (std::size_t i = 0; i < data->nodes.size(); ++i) {
    EXPECT_EQ(again->nodes[i].node_id, data->nodes[i].node_id);
  }
  g.replay();
  synchronize();
  EXPECT_EQ(host_runs.load(), 1);
  EXPECT_EQ(values(z)[0], 2.0);

  // keep_graph=false: the template is gone after capture.
  CUDAGraph g2;
  capture(g2, [&] { z = x + 1.0; });
  EXPECT_THROW(g2.get_graph_data(), Error);
}

TEST(Graphs, DebugDumpWritesDot) {
  REQUIRE_DEVICE();
  Tensor x = zeros({16}, device_options());
  CUDAGraph g;
  g.enable_debug_mode();
  EXPECT_TRUE(g.keep_graph());
  Tensor y;
  capture(g, [&] { y = x + 1.0; });
  char path[] = "/tmp/cudakit_graph_dot_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  g.debug_dump(path);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("digraph"), std::string::npos);
  std::remove(path);
  EXPECT_THROW(g.debug_dump(""), ValueError);
}

TEST(Graphs, ConcurrentThreadLocalCaptures) {
  REQUIRE_DEVICE();
  Tensor x = full({32}, Scalar(1.0), device_options());
  synchronize();  // x is filled on the default stream; the threads' streams are non-blocking
  constexpr int kThreads = 4;
  std::vector<Tensor> outs(kThreads);
  std::vector<std::unique_ptr<CUDAGraph>> graphs(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        Stream s;
        StreamGuard guard(s);
        graphs[t] = std::make_unique<CUDAGraph>();
        graphs[t]->capture_begin(std::nullopt, CaptureErrorMode::thread_local_);
        outs[t] = x * static_cast<double>(t + 1);
        graphs[t]->capture_end();
        graphs[t]->replay();
        s.sync();
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(values(outs[t]), std::vector<double>(32, t + 1.0));
  }
}

// Threads that each capture their own graph (thread_local mode, as an engine with capture
// threads does) must not invalidate each other: GraphCapture synchronizes the device before
// capturing only while no other capture is live (graphs.hpp, synchronize_for_capture). On
// the H200 the device synchronize of one thread invalidated the others' captures.
TEST(Graphs, ConcurrentCapturesOnThreadsDoNotInvalidateEachOther) {
  REQUIRE_DEVICE();
  constexpr int kThreads = 4, kRounds = 25;
  std::atomic<int> failures{0};
  std::string first_error;
  std::mutex error_mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        Stream s;
        Tensor x;
        {
          StreamGuard guard(s);
          x = full({16}, Scalar(0.0), device_options());
        }
        s.sync();
        for (int r = 0; r < kRounds; ++r) {
          CUDAGraph g;
          CaptureOptions o;
          o.stream = s.ref();
          o.capture_error_mode = CaptureErrorMode::thread_local_;
          capture(g, [&] { add_(x, Scalar(1.0)); }, o);
          StreamGuard guard(s);
          g.replay();
        }
        s.sync();
        EXPECT_EQ(values(x), std::vector<double>(16, double(kRounds))) << "thread " << t;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> l(error_mu);
        if (failures++ == 0) first_error = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0) << first_error;
}

// The garbage collector (or any owner) may destroy a graph on a thread that is capturing
// another one. Destroying an executable graph is a "potentially unsafe" call under CUDA's
// capture-mode rules: on the H200 (driver 580) cuGraphExecDestroy returned
// CAPTURE_UNSUPPORTED there and the capture in progress was invalidated, in global and in
// thread_local mode (test_profiler_stress.py's graph threads; the emulated backend applies
// the same rule). The destroy must leave the capture valid.
TEST(Graphs, AGraphDestroyedWhileThisThreadCapturesLeavesTheCaptureValid) {
  REQUIRE_DEVICE();
  for (CaptureErrorMode mode : {CaptureErrorMode::global, CaptureErrorMode::thread_local_}) {
    Tensor x = full({8}, Scalar(1.0), device_options());
    Tensor old_y;
    auto old = std::make_unique<CUDAGraph>();
    capture(*old, [&] { old_y = x + 1.0; });
    old->replay();
    synchronize();
    Stream s;
    s.wait(current_stream());
    CUDAGraph g;
    Tensor y;
    {
      StreamGuard guard(s);
      g.capture_begin(std::nullopt, mode);
      y = x * 2.0;
      old.reset();  // destroyed inside the capture, on the capturing thread
      y = y + 1.0;
      g.capture_end();
      g.replay();
    }
    s.sync();
    EXPECT_EQ(values(y), std::vector<double>(8, 3.0));
  }
}
