#include "tunable/candidates.hpp"

#include <array>
#include <memory>
#include <mutex>
#include <set>

#include "backend/math_ops.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "tunable/settings.hpp"

namespace cudakit::tunable::detail {
namespace {

class DefaultPlan final : public GemmPlan {
 public:
  explicit DefaultPlan(int device) : device_(device) {}
  const std::string& name() const noexcept override { return name_; }
  std::size_t workspace_bytes() const noexcept override { return 0; }
  void run(StreamHandle s, const GemmArgs& args, void*) const override {
    cudakit::detail::math_ops().gemm(device_, s, args);
  }

 private:
  int device_;
  std::string name_ = kDefaultSolution;
};

class ExtraPlan final : public GemmPlan {
 public:
  ExtraPlan(int device, ExtraCandidate c) : device_(device), c_(std::move(c)) {}
  const std::string& name() const noexcept override { return c_.name; }
  std::size_t workspace_bytes() const noexcept override { return 0; }
  void run(StreamHandle s, const GemmArgs& args, void*) const override { c_.run(device_, s, args); }

 private:
  int device_;
  ExtraCandidate c_;
};

std::mutex& extras_mutex() {
  static std::mutex mu;
  return mu;
}
std::vector<ExtraCandidate>& extras() {
  static auto* v = new std::vector<ExtraCandidate>();
  return *v;
}
std::vector<ExtraCandidate> extras_copy() {
  std::lock_guard<std::mutex> l(extras_mutex());
  return extras();
}

}  // namespace

const GemmPlan& default_plan(int device) {
  static std::array<std::unique_ptr<DefaultPlan>, kMaxDevices>* plans = [] {
    auto* a = new std::array<std::unique_ptr<DefaultPlan>, kMaxDevices>();
    for (int d = 0; d < kMaxDevices; ++d) (*a)[static_cast<std::size_t>(d)] = std::make_unique<DefaultPlan>(d);
    return a;
  }();
  if (device < 0 || device >= kMaxDevices) {
    throw ValueError("TunableOp: device " + std::to_string(device) + " is out of range");
  }
  return *(*plans)[static_cast<std::size_t>(device)];
}

void register_extra_candidate(ExtraCandidate c) {
  if (c.name.empty() || c.name == kDefaultSolution || !c.run) {
    throw ValueError("register_extra_candidate: a candidate needs a name other than 'Default' "
                     "and a run function");
  }
  std::lock_guard<std::mutex> l(extras_mutex());
  auto& v = extras();
  std::erase_if(v, [&](const ExtraCandidate& e) { return e.name == c.name; });
  v.push_back(std::move(c));
}

void clear_extra_candidates() {
  std::lock_guard<std::mutex> l(extras_mutex());
  extras().clear();
}

std::vector<GemmPlanPtr> candidates(int device, const GemmArgs& problem) {
  std::vector<GemmPlanPtr> out;
  std::set<std::string> names{kDefaultSolution};
  // Default is not owned by the list: an aliasing pointer with no owner.
  out.emplace_back(std::shared_ptr<const GemmPlan>(), &default_plan(device));
  // Extra candidates next: someone registered them on purpose, so the tuner's loading budget
  // (it tries candidates in this order and may stop early) never leaves them out.
  for (ExtraCandidate& c : extras_copy()) {
    if (c.applies && !c.applies(problem)) continue;
    if (!names.insert(c.name).second) continue;
    out.push_back(std::make_shared<ExtraPlan>(device, std::move(c)));
  }
  if (settings().backend_candidates()) {
    for (GemmPlanPtr& p : cudakit::detail::math_ops().gemm_candidates(device, problem)) {
      if (p && names.insert(p->name()).second) out.push_back(std::move(p));
    }
  }
  return out;
}

GemmPlanPtr plan_for(int device, const GemmArgs& problem, const std::string& solution) {
  if (solution == kDefaultSolution) {
    return GemmPlanPtr(std::shared_ptr<const GemmPlan>(), &default_plan(device));
  }
  for (ExtraCandidate& c : extras_copy()) {
    if (c.name == solution) {
      if (c.applies && !c.applies(problem)) return nullptr;
      return std::make_shared<ExtraPlan>(device, std::move(c));
    }
  }
  return cudakit::detail::math_ops().gemm_plan(device, problem, solution);
}

}  // namespace cudakit::tunable::detail
