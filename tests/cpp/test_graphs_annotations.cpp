// Graph kernel annotations: scopes, merging, ids, remapping on instantiate, purging.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "support/emulated_testing.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/graph_annotations.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/random.hpp"
#include "graphs_test_util.hpp"

using namespace cudakit;
using namespace cudakit::graphs_test;
namespace ga = cudakit::graph_annotations;

namespace {

struct Annotations : ::testing::Test {
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no device";
    if (!ga::is_available()) GTEST_SKIP() << "graph tools ids unavailable on this driver";
    ga::clear_kernel_annotations();
  }
  void TearDown() override { ga::clear_kernel_annotations(); }
};

CaptureOptions with_annotations() {
  CaptureOptions o;
  o.enable_annotations = true;
  return o;
}

std::string name_of(const ga::Annotation& a) {
  for (const auto& [k, v] : a) {
    if (k == "name") return std::get<std::string>(v);
  }
  return "";
}

// Tools ids of the nodes of `type` in a graph's data.
std::set<std::uint64_t> tools_ids(const GraphData& d, const std::string& type) {
  std::set<std::uint64_t> out;
  for (const auto& n : d.nodes) {
    if (n.node_type == type) out.insert(n.tools_id);
  }
  return out;
}

}  // namespace

TEST_F(Annotations, SeedExampleKeysMatchGraphData) {
  // The seed's example (1024 x 1024 on a GPU; smaller on the host-run emulated backend).
  const std::int64_t n = detail::is_emulated_backend() ? 64 : 1024;
  Tensor x = randn({n, n}, device_options());
  Tensor y = matmul(x, x.t());
  Tensor z = matmul(relu(y), x);
  synchronize();
  CUDAGraph g(/*keep_graph=*/true);
  capture(g, [&] {
    {
      ga::MarkKernels scope("attention");
      EXPECT_TRUE(scope.recording());
      y = matmul(x, x.t());
    }
    {
      ga::MarkKernels scope(ga::Annotation{{"name", std::string("mlp")},
                                           {"layer", std::int64_t{3}}});
      z = matmul(relu(y), x);
    }
  }, with_annotations());
  EXPECT_EQ(ga::annotated_node_count(), 0u);  // published at instantiation
  g.instantiate();
  auto data = g.get_graph_data();
  auto ann = ga::get_kernel_annotations();
  ASSERT_FALSE(ann.empty());
  std::set<std::uint64_t> work = tools_ids(*data, "kernel");
  for (auto id : tools_ids(*data, "memcpy")) work.insert(id);
  for (auto id : tools_ids(*data, "memset")) work.insert(id);
  std::map<std::string, int> per_name;
  for (const auto& [id, list] : ann) {
    EXPECT_EQ(id >> 32, data->exec_graph_id);
    EXPECT_TRUE(work.count(id)) << "annotation key " << id << " is not a work node";
    ASSERT_EQ(list.size(), 1u);
    per_name[name_of(list[0])]++;
    if (name_of(list[0]) == "mlp") {
      ASSERT_EQ(list[0].size(), 2u);
      EXPECT_EQ(std::get<std::int64_t>(list[0][1].second), 3);
    }
  }
  EXPECT_GE(per_name["attention"], 1);
  EXPECT_GE(per_name["mlp"], 2);  // relu + matmul
  g.replay();
  synchronize();
}

TEST_F(Annotations, NestedScopesMergeInnerWins) {
  Tensor x = zeros({64}, device_options());
  Tensor one = ones({64}, device_options());  // tensor operands: one kernel node per op
  CUDAGraph g(/*keep_graph=*/true);
  capture(g, [&] {
    ga::MarkKernels outer(ga::Annotation{{"name", std::string("outer")},
                                         {"shared", std::string("outer")},
                                         {"only_outer", std::int64_t{1}}});
    x = x + one;
    {
      ga::MarkKernels inner(ga::Annotation{{"name", std::string("inner")},
                                           {"shared", std::string("inner")}});
      x = x + one;
    }
    x = x + one;
  }, with_annotations());
  g.instantiate();
  auto ann = ga::get_kernel_annotations();
  ASSERT_EQ(ann.size(), 3u);
  std::vector<std::string> names;
  for (const auto& [id, list] : ann) names.push_back(name_of(list[0]));
  EXPECT_EQ(names, (std::vector<std::string>{"outer", "inner", "outer"}));
  const ga::Annotation& inner = std::next(ann.begin())->second[0];
  ASSERT_EQ(inner.size(), 3u);
  EXPECT_EQ(inner[0].first, "name");
  EXPECT_EQ(std::get<std::string>(inner[1].second), "inner");  // inner wins "shared"
  EXPECT_EQ(inner[2].first, "only_outer");                     // outer-only key merged in
  EXPECT_EQ(std::get<std::int64_t>(inner[2].second), 1);
}

TEST_F(Annotations, NoOpOutsideCaptureOrWhenDisabled) {
  Tensor x = zeros({8}, device_options());
  {
    ga::MarkKernels scope("outside");
    EXPECT_FALSE(scope.recording());
    x = x + 1.0;
  }
  CUDAGraph g;
  capture(g, [&] {  // annotations not enabled for this capture
    ga::MarkKernels scope("off");
    EXPECT_FALSE(scope.recording());
    x = x + 1.0;
  });
  EXPECT_EQ(ga::annotated_node_count(), 0u);
  // A scope that captures nothing records nothing.
  CUDAGraph g2;
  capture(g2, [&] {
    { ga::MarkKernels empty("empty"); }
    x = x + 1.0;
  }, with_annotations());
  EXPECT_EQ(ga::annotated_node_count(), 0u);
}

TEST_F(Annotations, RemappedOnReinstantiatePurgedOnResetAndDestroy) {
  Tensor x = zeros({8}, device_options());
  Tensor one = ones({8}, device_options());
  CUDAGraph g(/*keep_graph=*/true);
  capture(g, [&] {
    ga::MarkKernels scope("a");
    x = x + one;
  }, with_annotations());
  g.instantiate();
  const std::uint32_t first = *g.exec_graph_id();
  auto ids = ga::annotated_node_ids();
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0] >> 32, first);
  g.instantiate();  // fresh exec graph: keys move to it
  const std::uint32_t second = *g.exec_graph_id();
  ASSERT_NE(first, second);
  ids = ga::annotated_node_ids();
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0] >> 32, second);
  EXPECT_TRUE(ga::kernel_annotation(ids[0]).has_value());
  EXPECT_FALSE(ga::kernel_annotation(ids[0] ^ (1ull << 40)).has_value());

  // Another graph's entries survive this graph's reset.
  CUDAGraph other;
  capture(other, [&] {
    ga::MarkKernels scope("b");
    x = x * one;
  }, with_annotations());
  EXPECT_EQ(ga::annotated_node_count(), 2u);
  g.reset();
  ASSERT_EQ(ga::annotated_node_count(), 1u);
  EXPECT_EQ(name_of(*ga::kernel_annotation(ga::annotated_node_ids()[0])), "b");
  {
    CUDAGraph temp;
    capture(temp, [&] {
      ga::MarkKernels scope("c");
      x = x - one;
    }, with_annotations());
    EXPECT_EQ(ga::annotated_node_count(), 2u);
  }
  EXPECT_EQ(ga::annotated_node_count(), 1u);  // destroyed graph purged

  // clear: everything goes, and a later re-instantiation does not bring it back.
  CUDAGraph kept(/*keep_graph=*/true);
  capture(kept, [&] {
    ga::MarkKernels scope("d");
    x = x + one;
  }, with_annotations());
  kept.instantiate();
  EXPECT_EQ(ga::annotated_node_count(), 2u);
  ga::clear_kernel_annotations();
  EXPECT_EQ(ga::annotated_node_count(), 0u);
  kept.instantiate();
  EXPECT_EQ(ga::annotated_node_count(), 0u);
}

TEST_F(Annotations, ForkedStreamWorkInsideAScopeIsTagged) {
  Tensor x = zeros({8}, device_options());
  Tensor one = ones({8}, device_options());
  Tensor a, b;
  Stream side;
  CUDAGraph g;
  GraphCapture cap(g, with_annotations());
  StreamRef main = cap.stream();
  {
    ga::MarkKernels scope("both");
    a = x + one;
    side.wait(main);
    {
      StreamGuard guard(side);
      b = x * one;
    }
    main.wait(side);
  }
  cap.end();
  auto ann = ga::get_kernel_annotations();
  EXPECT_EQ(ann.size(), 2u);
  for (const auto& [id, list] : ann) EXPECT_EQ(name_of(list[0]), "both");
}
