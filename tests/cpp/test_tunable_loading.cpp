// The tuner's kernel-loading rule (src/tunable/loading.hpp): waves counted in kernel
// families, and the candidates of loaded families kept once the budget stops the loading.
// Pure functions of the candidate list: fake plans stand in for cuBLASLt's, whose split-K
// variants share a family (the cuda backend's LtPlan::kernel_family, checked on the GPU in
// test_tunable_cuda.cpp).
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tunable/loading.hpp"

using cudakit::detail::GemmArgs;
using cudakit::detail::GemmPlan;
using cudakit::detail::GemmPlanPtr;
using cudakit::detail::StreamHandle;
using namespace cudakit::tunable::detail;

namespace {

class FakePlan final : public GemmPlan {
 public:
  FakePlan(std::string name, std::string family) : name_(std::move(name)), family_(std::move(family)) {}
  const std::string& name() const noexcept override { return name_; }
  std::size_t workspace_bytes() const noexcept override { return 0; }
  void run(StreamHandle, const GemmArgs&, void*) const override {}
  std::string kernel_family() const override { return family_; }

 private:
  std::string name_, family_;
};

// "a1" is family "a"; "Default" is its own family.
std::vector<GemmPlanPtr> plans(const std::vector<std::string>& names) {
  std::vector<GemmPlanPtr> out;
  for (const std::string& n : names) {
    out.push_back(std::make_shared<FakePlan>(n, n == "Default" ? n : n.substr(0, 1)));
  }
  return out;
}

std::vector<std::string> names(const std::vector<GemmPlanPtr>& v, std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n && i < v.size(); ++i) out.push_back(v[i]->name());
  return out;
}

}  // namespace

TEST(TunableLoading, AWaveHoldsItsNewFamiliesAndTheLoadedOnesThatFollow) {
  // The order gemm_candidates gives a skinny product: the first answer, a base and its splits.
  const auto all = plans({"Default", "x1", "a1", "a2", "a3", "b1", "a4", "c1", "c2"});
  std::set<std::string> loaded{"Default"};
  const std::size_t end = next_wave_end(all, 1, loaded, 2);
  EXPECT_EQ(end, 5u) << "x and a, with a's splits, and not b";
  EXPECT_EQ(loaded, (std::set<std::string>{"Default", "x", "a"}));
  const std::size_t end2 = next_wave_end(all, end, loaded, 4);
  EXPECT_EQ(end2, all.size()) << "b, a4 (loaded family) and c fit a wave of four families";
  EXPECT_EQ(loaded.size(), 5u);
}

TEST(TunableLoading, AWaveAtTheEndOrOfLoadedFamiliesOnly) {
  const auto all = plans({"Default", "a1", "a2"});
  std::set<std::string> loaded{"Default", "a"};
  EXPECT_EQ(next_wave_end(all, 1, loaded, 2), 3u);
  EXPECT_EQ(next_wave_end(all, 3, loaded, 2), 3u);
}

TEST(TunableLoading, CandidatesOfLoadedFamiliesAreKeptInTheirOrder) {
  // The budget stopped after "Default x1 a1": a2 and a4 are still tried (no load), b and c not.
  auto all = plans({"Default", "x1", "a1", "b1", "a2", "c1", "a4", "x2"});
  const std::set<std::string> loaded{"Default", "x", "a"};
  const std::size_t kept = with_loaded_families(all, 3, loaded);
  EXPECT_EQ(names(all, kept), (std::vector<std::string>{"Default", "x1", "a1", "a2", "a4", "x2"}));
  EXPECT_EQ(names(all, all.size()),
            (std::vector<std::string>{"Default", "x1", "a1", "a2", "a4", "x2", "b1", "c1"}));
}

TEST(TunableLoading, EveryPlanIsItsOwnFamilyByDefault) {
  struct Plain final : GemmPlan {
    std::string n = "Gemm_X";
    const std::string& name() const noexcept override { return n; }
    std::size_t workspace_bytes() const noexcept override { return 0; }
    void run(StreamHandle, const GemmArgs&, void*) const override {}
  } p;
  EXPECT_EQ(p.kernel_family(), "Gemm_X");
}
