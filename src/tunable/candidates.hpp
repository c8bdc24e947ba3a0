// The implementations a GEMM can be tuned over, as GemmPlans (backend/math_ops.hpp):
//   * "Default": Backend::gemm itself (cuBLAS's cublasGemmEx on cuda, CBLAS on emulated);
//   * the backend's candidates (Backend::gemm_candidates: cuBLASLt algorithms, CPU loops),
//     unless PYTORCH_TUNABLEOP_CUBLASLT_ENABLED=0;
//   * extra candidates registered above the seam (register_extra_candidate): tests inject
//     deliberately wrong or slow ones through it.
// Internal header.
//
// Thread-safety: every function is thread-safe; the extra-candidate registry is guarded by a
// mutex and read as a copy.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backend/math_ops.hpp"

namespace cudakit::tunable::detail {

using cudakit::detail::GemmArgs;
using cudakit::detail::GemmPlan;
using cudakit::detail::GemmPlanPtr;
using cudakit::detail::StreamHandle;

inline constexpr const char* kDefaultSolution = "Default";

// The Default plan of `device` (one shared object per device, never freed).
const GemmPlan& default_plan(int device);

// A candidate defined above the seam. `applies` filters problems (null: every problem); `run`
// enqueues the product on the stream like a GemmPlan (keeping GemmArgs::keep_alive alive
// until it ran, when it runs later).
struct ExtraCandidate {
  std::string name;
  std::function<bool(const GemmArgs&)> applies;
  std::function<void(int device, StreamHandle, const GemmArgs&)> run;
};
void register_extra_candidate(ExtraCandidate c);  // replaces one of the same name
void clear_extra_candidates();

// Every candidate for `problem` on `device`, each name once: Default first, then the extra
// candidates, then the backend's in its order of promise (the tuner may try only a prefix).
std::vector<GemmPlanPtr> candidates(int device, const GemmArgs& problem);
// The plan a recorded solution names for `problem` here, or nullptr when no implementation
// of that name can run it (the caller falls back to Default).
GemmPlanPtr plan_for(int device, const GemmArgs& problem, const std::string& solution);

}  // namespace cudakit::tunable::detail
