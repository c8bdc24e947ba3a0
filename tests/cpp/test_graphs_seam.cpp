// The seam's graph methods, on whichever backend the suite runs (emulated in CI, cuda on the
// GPU): tools ids and exec ids, capture node counts, the thread capture mode, and the
// CUDA capture-mode rules for a raw device allocation during capture.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <set>

#include "backend/backend.hpp"
#include "support/emulated_testing.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/ops.hpp"
#include "graphs_test_util.hpp"
#ifdef CUDAKIT_WITH_CUDA
#include "backend/cuda/cupti.hpp"
#endif

using namespace cudakit;
using namespace cudakit::graphs_test;
namespace cd = cudakit::detail;

namespace {
cd::Backend& B() { return cd::backend(); }
}  // namespace

// On the GPU machines (CUDA 13.0 driver) tools ids come from CUPTI: if this fails there,
// CUPTI was not found (set CUDAKIT_CUPTI_PATH) and annotations would record nothing.
TEST(GraphSeam, ToolsIdsAvailable) {
  REQUIRE_DEVICE();
  std::string why;
#ifdef CUDAKIT_WITH_CUDA
  if (!cd::is_emulated_backend()) {
    const auto& c = cd::cuda::cupti();
    why = "driver " + std::to_string(B().driver_version()) + ", CUPTI: " +
          (c.available ? c.path : c.reason);
  }
#endif
  EXPECT_TRUE(B().graph_tools_ids_available()) << why;
}

TEST(GraphSeam, CaptureNodeCountExecIdsAndToolsIds) {
  REQUIRE_DEVICE();
  if (!B().graph_tools_ids_available()) GTEST_SKIP() << "no tools ids";
  Tensor x = zeros({64}, device_options());
  Tensor one = ones({64}, device_options());
  Stream s;
  StreamGuard guard(s);
  EXPECT_EQ(B().stream_capture_node_count(s.handle()), 0u);  // not capturing
  B().stream_begin_capture(s.handle(), cd::CaptureMode::global);
  const std::size_t before = B().stream_capture_node_count(s.handle());
  add_(x, one);
  add_(x, one);
  EXPECT_GE(B().stream_capture_node_count(s.handle()), before + 2);
  cd::GraphHandle g = B().stream_end_capture(s.handle());
  EXPECT_EQ(B().stream_capture_node_count(s.handle()), 0u);
  auto nodes = B().graph_nodes(g);
  std::set<std::uint64_t> ids;
  for (const auto& n : nodes) {
    EXPECT_NE(n.tools_id, 0u);
    ids.insert(n.tools_id);
    EXPECT_EQ(n.tools_id >> 32, nodes[0].tools_id >> 32);  // one graph id per graph
  }
  EXPECT_EQ(ids.size(), nodes.size());
  cd::GraphExecHandle e1 = B().graph_instantiate(g);
  cd::GraphExecHandle e2 = B().graph_instantiate(g);
  EXPECT_NE(B().graph_exec_id(e1), B().graph_exec_id(e2));
  EXPECT_EQ(B().graph_exec_id(e1), B().graph_exec_id(e1));
  B().graph_launch(e1, s.handle());
  s.sync();
  B().graph_exec_destroy(e1);
  B().graph_exec_destroy(e2);
  B().graph_destroy(g);
}

TEST(GraphSeam, ThreadCaptureModeRoundTrip) {
  REQUIRE_DEVICE();
  const cd::CaptureMode prev = B().thread_exchange_capture_mode(cd::CaptureMode::relaxed);
  EXPECT_EQ(prev, cd::CaptureMode::global);  // the default
  {
    cd::ThreadCaptureModeGuard guard(B(), cd::CaptureMode::thread_local_);
    EXPECT_EQ(B().thread_exchange_capture_mode(cd::CaptureMode::thread_local_),
              cd::CaptureMode::thread_local_);
  }
  EXPECT_EQ(B().thread_exchange_capture_mode(prev), cd::CaptureMode::relaxed);
}

// A raw device allocation (cuMemAlloc: not the caching allocator) on the capturing thread.
TEST(GraphSeam, RawAllocationDuringCaptureFollowsTheModeRules) {
  REQUIRE_DEVICE();
  Stream s;
  for (cd::CaptureMode mode : {cd::CaptureMode::global, cd::CaptureMode::relaxed}) {
    B().stream_begin_capture(s.handle(), mode);
    void* p = nullptr;
    int code = 0;
    try {
      p = B().mem_alloc(0, 1 << 20);
    } catch (const AcceleratorError& e) {
      code = e.code();
    }
    if (mode == cd::CaptureMode::global) {
      EXPECT_EQ(code, errc::stream_capture_unsupported);
      if (cd::is_emulated_backend()) {
        EXPECT_THROW(B().stream_end_capture(s.handle()), AcceleratorError);  // invalidated
      } else {
        // The driver decides whether the failed call invalidated the capture; either way the
        // capture must end (CUDAGraph::capture_end turns an invalidated one into an error).
        try {
          if (cd::GraphHandle g = B().stream_end_capture(s.handle())) B().graph_destroy(g);
        } catch (const AcceleratorError& e) {
          EXPECT_EQ(e.code(), errc::stream_capture_invalidated) << e.what();
        }
      }
    } else {
      EXPECT_EQ(code, 0);
      cd::GraphHandle g = B().stream_end_capture(s.handle());
      B().graph_destroy(g);
    }
    if (p) B().mem_free(0, p);
    EXPECT_EQ(B().stream_capture_status(s.handle(), nullptr), cd::CaptureStatus::none);
  }
  // A relaxed thread may allocate while another capture is live in global mode.
  B().stream_begin_capture(s.handle(), cd::CaptureMode::global);
  void* p = nullptr;
  {
    cd::ThreadCaptureModeGuard relaxed(B(), cd::CaptureMode::relaxed);
    p = B().mem_alloc(0, 1 << 20);
  }
  EXPECT_NE(p, nullptr);
  cd::GraphHandle g = B().stream_end_capture(s.handle());
  B().graph_destroy(g);
  B().mem_free(0, p);
}

TEST(GraphSeam, DotVerboseFlag) {
  REQUIRE_DEVICE();
  Tensor x = zeros({8}, device_options());
  Stream s;
  StreamGuard guard(s);
  B().stream_begin_capture(s.handle(), cd::CaptureMode::global);
  x.fill_(Scalar(1.0));
  cd::GraphHandle g = B().stream_end_capture(s.handle());
  char a[] = "/tmp/cudakit_dot_a_XXXXXX";
  char b[] = "/tmp/cudakit_dot_b_XXXXXX";
  close(mkstemp(a));
  close(mkstemp(b));
  B().graph_debug_dot_print(g, a, true);
  B().graph_debug_dot_print(g, b, false);
  auto size = [](const char* p) {
    FILE* f = std::fopen(p, "rb");
    std::fseek(f, 0, SEEK_END);
    long n = std::ftell(f);
    std::fclose(f);
    return n;
  };
  EXPECT_GT(size(a), size(b));
  EXPECT_GT(size(b), 0);
  std::remove(a);
  std::remove(b);
  B().graph_destroy(g);
}

#ifdef CUDAKIT_WITH_CUDA
// The CUPTI loader on its own (no driver needed): finds the toolkit's libcupti when there is
// one, resolves the three id functions, and they reject a null handle without crashing.
TEST(GraphSeam, CuptiLoader) {
  const auto& c = cd::cuda::cupti();
  if (!c.available) GTEST_SKIP() << c.reason;
  EXPECT_FALSE(c.path.empty());
  ASSERT_NE(c.get_graph_node_id, nullptr);
  ASSERT_NE(c.get_graph_exec_id, nullptr);
  ASSERT_NE(c.get_graph_id, nullptr);
  std::uint64_t node = 0;
  std::uint32_t id = 0;
  EXPECT_NE(c.get_graph_node_id(nullptr, &node), 0);  // CUPTI_ERROR_INVALID_PARAMETER
  EXPECT_NE(c.get_graph_exec_id(nullptr, &id), 0);
  EXPECT_NE(c.get_graph_id(nullptr, &id), 0);
}
#endif
