// CudaBackend: the GEMM tuner's candidates (Backend::gemm_candidates / gemm_plan) on cuBLASLt.
//
// A candidate is one cuBLASLt algorithm configuration (algorithm id, tile, stages, split-K,
// reduction scheme, CTA swizzling, custom option, inner and cluster shape) bound to one
// problem's descriptors. Its solution name spells the configuration out, in the format torch's
// cuBLASLt TunableOp writes ("Gemm_Cublaslt_id_<id>_tile_<t>_stages_<s>_splitk_<k>_red_<r>_
// swizzle_<w>_custom_<c>_inner_<i>_cluster_<l>"), so a name read from a file rebuilds the same
// algorithm with cublasLtMatmulAlgoInit + ConfigSetAttribute, independent of the heuristic's
// ordering. torch builds that numbered the heuristic's answers instead ("Gemm_Cublaslt_NT_3")
// are understood too: the number is looked up in the heuristic asked as torch asked it.
//
// What is enumerated for a problem (gemm_candidates):
//   * the heuristic's algorithms, asked for kHeuristicCount answers under two workspace limits
//     (none, and kMaxWorkspace): the limit changes what the heuristic proposes (split-K and
//     stream-K kernels need workspace);
//   * split-K variants of the best few non-split answers when they leave the GPU underfilled
//     (the heuristic's waves count below one, typical of skinny products such as 16 x 4096 x
//     4096): 2..32 splits while every split keeps at least kMinSplitDepth of k, reduced in the
//     compute type (float32 for half / bfloat16, so splitting costs no accuracy);
//   every configuration once (by name), in the order of promise gemm_candidates describes (the
//   tuner loads a prefix within its budget). Measured on the H200 by the lead (docs/performance.md).
//
// Strided batches (GemmArgs::batch > 1): the A, B and C layouts carry
// CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT and each its CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
// so the heuristic, AlgoCheck and the split-K variants all see the batched problem (its waves
// count includes the batch, so a large batch gets no split-K variants). A plan is therefore
// bound to the batch count and the three strides as well as the shape: the tuner's key
// (tunable/signature.hpp) includes them, and a name read from a file is rebuilt for the
// caller's strides (torch's signature does not record them). The alignment a plan asks for is
// the one every matrix of the batch has (batch_alignment).
//
// Plans share the problem's descriptors (LtProblem) and hold one cublasLtMatmulAlgo_t; run()
// is a single cublasLtMatmul call (no descriptor work per call). cuBLASLt handles carry no
// stream or workspace, so one handle per device serves every thread; it is created in the
// device's primary context and never destroyed (no CUDA during process exit).
#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "backend/cuda/cublaslt.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/math_libraries.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {
namespace {

constexpr int kHeuristicCount = 32;                 // answers asked per workspace limit
constexpr std::size_t kMaxWorkspace = 32u << 20;     // largest workspace a candidate may use
constexpr int kSplitBases = 3;                       // heuristic answers that get split-K variants
constexpr int kMinSplitDepth = 256;                  // k per split, at least
constexpr int kSplits[] = {2, 3, 4, 6, 8, 12, 16, 24, 32};
// torch's numbered names came from 8 answers under its cuBLASLt workspace (CUBLASLT_WORKSPACE_SIZE
// KiB, default 1 MiB before 2.5 and the cuBLAS workspace since).
constexpr int kTorchHeuristicCount = 8;

struct LtTypes {
  int compute, scale, data;  // cublasComputeType_t, cudaDataType (scale), cudaDataType (A..D)
};

LtTypes lt_types(const GemmArgs& g) {
  switch (g.type) {
    case GemmType::float16: return {kCublasCompute32F, kCudaR32F, kCudaR16F};
    case GemmType::bfloat16: return {kCublasCompute32F, kCudaR32F, kCudaR16BF};
    case GemmType::float64: return {kCublasCompute64F, kCudaR64F, kCudaR64F};
    case GemmType::float32: break;
  }
  return {g.allow_tf32 ? kCublasCompute32FFastTF32 : kCublasCompute32F, kCudaR32F, kCudaR32F};
}

const char* status_name(int s) {
  switch (s) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "cuBLAS status";
  }
}

void check_lt(int status, const char* call) {
  if (status != 0) {
    throw Error(std::string(call) + " failed with " + status_name(status) + " (" +
                std::to_string(status) + ")");
  }
}

// One cuBLASLt handle per device, created in its primary context on first use.
void* lt_handle(CudaBackend& b, const CublasLtApi& api, int device) {
  struct Slot {
    std::once_flag once;
    void* handle = nullptr;
  };
  static std::array<Slot, kMaxDevices> slots;
  if (device < 0 || device >= kMaxDevices) {
    throw ValueError("cuBLASLt handle: device " + std::to_string(device) + " is out of range");
  }
  Slot& s = slots[static_cast<std::size_t>(device)];
  std::call_once(s.once, [&] {
    CudaBackend::ContextScope scope(b, device, "cublasLtCreate");
    // Its own device state, not graph memory: allowed inside a capture (cuda_math.cpp).
    ThreadCaptureModeGuard relaxed(b, CaptureMode::relaxed);
    void* h = nullptr;
    check_lt(api.cublasLtCreate(&h), "cublasLtCreate");
    s.handle = h;
  });
  return s.handle;
}

// The descriptors of one problem: the matmul descriptor (compute type, transposes) and the A,
// B, C layouts (D shares C's). Destroyed with the last plan that uses them.
struct LtProblem {
  const CublasLtApi* api = nullptr;
  void* handle = nullptr;
  LtTypes types{};
  unsigned align_a = 256, align_b = 256, align_c = 256;
  void* desc = nullptr;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;

  LtProblem() = default;
  LtProblem(const LtProblem&) = delete;
  LtProblem& operator=(const LtProblem&) = delete;
  ~LtProblem() {
    if (is_shutting_down()) return;  // host objects only, but cuBLASLt may be torn down
    if (c) api->cublasLtMatrixLayoutDestroy(c);
    if (b) api->cublasLtMatrixLayoutDestroy(b);
    if (a) api->cublasLtMatrixLayoutDestroy(a);
    if (desc) api->cublasLtMatmulDescDestroy(desc);
  }
};

// The alignment every matrix of an operand has: its base pointer's, capped by the alignment of
// the batch stride in bytes (matrix i starts i * stride elements after the base), so that a
// plan chosen for the first matrix's alignment holds for all of them. A stride of 0 (one
// broadcast matrix) and a single product keep the base's.
unsigned batch_alignment(const void* base, std::int64_t stride, const GemmArgs& g) {
  const unsigned a = pointer_alignment(base);
  if (g.batch == 1 || stride == 0) return a;
  const std::uint64_t bytes =
      static_cast<std::uint64_t>(stride < 0 ? -stride : stride) * gemm_element_bytes(g.type);
  const std::uint64_t low = bytes & (~bytes + 1);
  return static_cast<unsigned>(std::min<std::uint64_t>(a, low));
}

std::shared_ptr<LtProblem> make_problem(const CublasLtApi& api, void* handle, const GemmArgs& g) {
  auto p = std::make_shared<LtProblem>();
  p->api = &api;
  p->handle = handle;
  p->types = lt_types(g);
  p->align_a = batch_alignment(g.a, g.stride_a, g);
  p->align_b = batch_alignment(g.b, g.stride_b, g);
  p->align_c = batch_alignment(g.c, g.stride_c, g);
  check_lt(api.cublasLtMatmulDescCreate(&p->desc, p->types.compute, p->types.scale),
           "cublasLtMatmulDescCreate");
  const std::int32_t ta = g.transpose_a ? kCublasOpT : kCublasOpN;
  const std::int32_t tb = g.transpose_b ? kCublasOpT : kCublasOpN;
  check_lt(api.cublasLtMatmulDescSetAttribute(p->desc, kLtDescTransA, &ta, sizeof ta),
           "cublasLtMatmulDescSetAttribute(TRANSA)");
  check_lt(api.cublasLtMatmulDescSetAttribute(p->desc, kLtDescTransB, &tb, sizeof tb),
           "cublasLtMatmulDescSetAttribute(TRANSB)");
  // Stored shapes: op(A) is m x k, so A is m x k (N) or k x m (T); likewise B.
  const std::uint64_t ar = g.transpose_a ? g.k : g.m, ac = g.transpose_a ? g.m : g.k;
  const std::uint64_t br = g.transpose_b ? g.n : g.k, bc = g.transpose_b ? g.k : g.n;
  check_lt(api.cublasLtMatrixLayoutCreate(&p->a, p->types.data, ar, ac, g.lda),
           "cublasLtMatrixLayoutCreate(A)");
  check_lt(api.cublasLtMatrixLayoutCreate(&p->b, p->types.data, br, bc, g.ldb),
           "cublasLtMatrixLayoutCreate(B)");
  check_lt(api.cublasLtMatrixLayoutCreate(&p->c, p->types.data, g.m, g.n, g.ldc),
           "cublasLtMatrixLayoutCreate(C)");
  if (g.batch != 1) {
    // Strided batch: every layout carries the count and its own stride (C's serves D too), so
    // the heuristic is asked for the batched problem and AlgoCheck / cublasLtMatmul run it.
    const std::int32_t count = g.batch;
    for (auto [layout, stride, what] : {std::tuple{p->a, g.stride_a, "A"},
                                        std::tuple{p->b, g.stride_b, "B"},
                                        std::tuple{p->c, g.stride_c, "C"}}) {
      const std::int64_t offset = stride;
      check_lt(api.cublasLtMatrixLayoutSetAttribute(layout, kLtLayoutBatchCount, &count, sizeof count),
               (std::string("cublasLtMatrixLayoutSetAttribute(BATCH_COUNT, ") + what + ")").c_str());
      check_lt(api.cublasLtMatrixLayoutSetAttribute(layout, kLtLayoutStridedBatchOffset, &offset,
                                                    sizeof offset),
               (std::string("cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET, ") + what + ")")
                   .c_str());
    }
  }
  return p;
}

// ---- algorithm configurations and their names ----

struct LtConfig {
  std::int32_t id = 0;
  std::uint32_t tile = 0, stages = 0;
  std::int32_t splitk = 1;
  std::uint32_t reduction = 0, swizzle = 0, custom = 0;
  std::uint16_t inner = 0, cluster = 0;
};

template <class T>
bool get_config(const CublasLtApi& api, const LtAlgo& algo, int attr, T& out) {
  std::size_t written = 0;
  return api.cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &out, sizeof out, &written) == 0 &&
         written == sizeof out;
}

template <class T>
bool set_config(const CublasLtApi& api, LtAlgo& algo, int attr, const T& value) {
  return api.cublasLtMatmulAlgoConfigSetAttribute(&algo, attr, &value, sizeof value) == 0;
}

template <class T>
bool get_cap(const CublasLtApi& api, const LtAlgo& algo, int attr, T& out) {
  std::size_t written = 0;
  return api.cublasLtMatmulAlgoCapGetAttribute(&algo, attr, &out, sizeof out, &written) == 0 &&
         written == sizeof out;
}

std::optional<LtConfig> read_config(const CublasLtApi& api, const LtAlgo& algo) {
  LtConfig c;
  const bool ok = get_config(api, algo, kLtConfigId, c.id) &&
                  get_config(api, algo, kLtConfigTile, c.tile) &&
                  get_config(api, algo, kLtConfigStages, c.stages) &&
                  get_config(api, algo, kLtConfigSplitK, c.splitk) &&
                  get_config(api, algo, kLtConfigReduction, c.reduction) &&
                  get_config(api, algo, kLtConfigSwizzle, c.swizzle) &&
                  get_config(api, algo, kLtConfigCustom, c.custom) &&
                  get_config(api, algo, kLtConfigInnerShape, c.inner) &&
                  get_config(api, algo, kLtConfigClusterShape, c.cluster);
  if (!ok) return std::nullopt;
  return c;
}

std::string config_name(const LtConfig& c) {
  char buf[192];
  std::snprintf(buf, sizeof buf,
                "Gemm_Cublaslt_id_%" PRId32 "_tile_%" PRIu32 "_stages_%" PRIu32 "_splitk_%" PRId32
                "_red_%" PRIu32 "_swizzle_%" PRIu32 "_custom_%" PRIu32 "_inner_%u_cluster_%u",
                c.id, c.tile, c.stages, c.splitk, c.reduction, c.swizzle, c.custom,
                static_cast<unsigned>(c.inner), static_cast<unsigned>(c.cluster));
  return buf;
}

std::optional<LtConfig> parse_config_name(const std::string& name) {
  LtConfig c;
  unsigned inner = 0, cluster = 0;
  int used = 0;
  const int n = std::sscanf(name.c_str(),
                            "Gemm_Cublaslt_id_%" SCNd32 "_tile_%" SCNu32 "_stages_%" SCNu32
                            "_splitk_%" SCNd32 "_red_%" SCNu32 "_swizzle_%" SCNu32
                            "_custom_%" SCNu32 "_inner_%u_cluster_%u%n",
                            &c.id, &c.tile, &c.stages, &c.splitk, &c.reduction, &c.swizzle,
                            &c.custom, &inner, &cluster, &used);
  if (n != 9 || used != static_cast<int>(name.size()) || inner > 0xffff || cluster > 0xffff) {
    return std::nullopt;
  }
  c.inner = static_cast<std::uint16_t>(inner);
  c.cluster = static_cast<std::uint16_t>(cluster);
  if (config_name(c) != name) return std::nullopt;  // canonical spelling only
  return c;
}

bool init_algo(const LtProblem& p, const LtConfig& c, LtAlgo& algo) {
  const CublasLtApi& api = *p.api;
  if (api.cublasLtMatmulAlgoInit(p.handle, p.types.compute, p.types.scale, p.types.data,
                                 p.types.data, p.types.data, p.types.data, c.id, &algo) != 0) {
    return false;
  }
  return set_config(api, algo, kLtConfigTile, c.tile) &&
         set_config(api, algo, kLtConfigStages, c.stages) &&
         set_config(api, algo, kLtConfigSplitK, c.splitk) &&
         set_config(api, algo, kLtConfigReduction, c.reduction) &&
         set_config(api, algo, kLtConfigSwizzle, c.swizzle) &&
         set_config(api, algo, kLtConfigCustom, c.custom) &&
         set_config(api, algo, kLtConfigInnerShape, c.inner) &&
         set_config(api, algo, kLtConfigClusterShape, c.cluster);
}

// The workspace `algo` needs for the problem, or nullopt when cuBLASLt refuses it here (another
// GPU or library version, operands less aligned than the algorithm requires, workspace above
// kMaxWorkspace).
std::optional<std::size_t> check_algo(const LtProblem& p, const LtAlgo& algo) {
  const CublasLtApi& api = *p.api;
  LtHeuristicResult r{};
  if (api.cublasLtMatmulAlgoCheck(p.handle, p.desc, p.a, p.b, p.c, p.c, &algo, &r) != 0 ||
      r.workspace_size > kMaxWorkspace) {
    return std::nullopt;
  }
  std::uint32_t need_a = 0, need_b = 0, need_c = 0, need_d = 0;
  if (get_cap(api, algo, kLtCapMinAlignA, need_a) && need_a > p.align_a) return std::nullopt;
  if (get_cap(api, algo, kLtCapMinAlignB, need_b) && need_b > p.align_b) return std::nullopt;
  if (get_cap(api, algo, kLtCapMinAlignC, need_c) && need_c > p.align_c) return std::nullopt;
  if (get_cap(api, algo, kLtCapMinAlignD, need_d) && need_d > p.align_c) return std::nullopt;
  return r.workspace_size;
}

class LtPlan final : public GemmPlan {
 public:
  LtPlan(CudaBackend& backend, int device, std::shared_ptr<const LtProblem> problem,
         const LtAlgo& algo, std::string name, std::size_t workspace)
      : backend_(backend), device_(device), problem_(std::move(problem)), algo_(algo),
        name_(std::move(name)), workspace_(workspace) {}

  const std::string& name() const noexcept override { return name_; }
  std::size_t workspace_bytes() const noexcept override { return workspace_; }
  // The configuration without its split-K count and reduction scheme: cuBLASLt runs a split
  // as the same main kernel over more CTAs (plus one reduction kernel shared by all splits).
  // Consistent with the H100 verbose log of 2026-12-07 (bf16 16x4096x4096): the loading wave
  // holding seven split variants of one configuration finished within the budget, the wave of
  // three other configurations took 12 ms.
  std::string kernel_family() const override {
    std::optional<LtConfig> c = parse_config_name(name_);
    if (!c) return name_;
    c->splitk = 1;
    c->reduction = 0;
    return config_name(*c);
  }

  void run(StreamHandle s, const GemmArgs& g, void* workspace) const override {
    const LtProblem& p = *problem_;
    float alpha_f = static_cast<float>(g.alpha), beta_f = static_cast<float>(g.beta);
    double alpha_d = g.alpha, beta_d = g.beta;
    const bool dbl = p.types.scale == kCudaR64F;
    const void* alpha = dbl ? static_cast<const void*>(&alpha_d) : &alpha_f;
    const void* beta = dbl ? static_cast<const void*>(&beta_d) : &beta_f;
    CudaBackend::ContextScope scope(backend_, device_, "tuned matmul");
    const int rc = p.api->cublasLtMatmul(p.handle, p.desc, alpha, g.a, p.a, g.b, p.b, beta, g.c,
                                         p.c, g.c, p.c, &algo_, workspace, workspace_, s);
    if (rc != 0) {
      throw Error("cublasLtMatmul (" + name_ + ") failed with " + status_name(rc) + " (" +
                  std::to_string(rc) + ")");
    }
  }

 private:
  CudaBackend& backend_;
  int device_;
  std::shared_ptr<const LtProblem> problem_;
  LtAlgo algo_;
  std::string name_;
  std::size_t workspace_;
};

// The heuristic's answers for `p` under a workspace limit (alignment preferences from the
// problem's pointers, as the heuristic cannot see them).
std::vector<LtHeuristicResult> heuristic(const LtProblem& p, std::size_t workspace_limit,
                                         int count) {
  const CublasLtApi& api = *p.api;
  void* pref = nullptr;
  check_lt(api.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  struct PrefGuard {
    const CublasLtApi& api;
    void* pref;
    ~PrefGuard() { api.cublasLtMatmulPreferenceDestroy(pref); }
  } guard{api, pref};
  const std::uint64_t limit = workspace_limit;
  const std::uint32_t al_a = p.align_a, al_b = p.align_b, al_c = p.align_c;
  check_lt(api.cublasLtMatmulPreferenceSetAttribute(pref, kLtPrefMaxWorkspaceBytes, &limit,
                                                    sizeof limit),
           "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  api.cublasLtMatmulPreferenceSetAttribute(pref, kLtPrefMinAlignA, &al_a, sizeof al_a);
  api.cublasLtMatmulPreferenceSetAttribute(pref, kLtPrefMinAlignB, &al_b, sizeof al_b);
  api.cublasLtMatmulPreferenceSetAttribute(pref, kLtPrefMinAlignC, &al_c, sizeof al_c);
  api.cublasLtMatmulPreferenceSetAttribute(pref, kLtPrefMinAlignD, &al_c, sizeof al_c);
  std::vector<LtHeuristicResult> results(static_cast<std::size_t>(count));
  int returned = 0;
  const int rc = api.cublasLtMatmulAlgoGetHeuristic(p.handle, p.desc, p.a, p.b, p.c, p.c, pref,
                                                    count, results.data(), &returned);
  if (rc != 0) return {};  // NOT_SUPPORTED: no algorithm for this problem
  results.resize(static_cast<std::size_t>(std::max(0, returned)));
  std::erase_if(results, [](const LtHeuristicResult& r) { return r.state != 0; });
  return results;
}

// Reduction scheme for split-K variants: in the compute type (float32 sums for half /
// bfloat16, so splitting does not lose accuracy), else in place for float32 / float64 (whose
// output type is the compute type); nullopt when the algorithm offers neither.
std::optional<std::uint32_t> split_reduction(const CublasLtApi& api, const LtAlgo& algo,
                                             const GemmArgs& g) {
  std::uint32_t mask = 0;
  if (!get_cap(api, algo, kLtCapReductionMask, mask)) return std::nullopt;
  if (mask & kLtReductionComputeType) return kLtReductionComputeType;
  const bool wide_output = g.type == GemmType::float32 || g.type == GemmType::float64;
  if (wide_output && (mask & kLtReductionInplace)) return kLtReductionInplace;
  if (wide_output && (mask & kLtReductionOutputType)) return kLtReductionOutputType;
  return std::nullopt;
}

std::size_t torch_workspace_limit() {
  if (const char* kib = std::getenv("CUBLASLT_WORKSPACE_SIZE")) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(kib, &end, 10);
    if (end != kib && *end == '\0') return static_cast<std::size_t>(v) * 1024;
  }
  return kMaxWorkspace;
}

const CublasLtApi* lt_api_or_null() {
  const CublasLt& lt = cublaslt();
  return lt.lib.available() ? &lt.api : nullptr;
}

}  // namespace

std::vector<GemmPlanPtr> CudaBackend::gemm_candidates(int device, const GemmArgs& g) {
  const CublasLtApi* api = lt_api_or_null();
  if (!api || g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0) return {};
  ContextScope scope(*this, device, "gemm_candidates");
  void* handle = lt_handle(*this, *api, device);
  std::shared_ptr<const LtProblem> problem = make_problem(*api, handle, g);
  // Order of promise (the tuner may load only a prefix, see Backend::gemm_candidates): the
  // heuristic's first answer; the first base that underfills the GPU, then its split-K
  // variants, those nearest one full wave first; then the other answers, the zero-workspace
  // answers, and the split-K variants of the next bases. The base itself comes before its
  // splits: on the H100 (2026-12-07, bf16 16x4096x4096) the winner, 2.0x torch, was the
  // unsplit tile_10 base, which came 9th, after its seven splits (which the tuner now loads
  // with it, as one kernel family).
  std::vector<GemmPlanPtr> out;
  std::set<std::string> seen;
  auto add = [&](std::vector<GemmPlanPtr>& to, const LtAlgo& algo, std::size_t workspace) {
    std::optional<LtConfig> c = read_config(*api, algo);
    if (!c) return;
    std::string name = config_name(*c);
    if (!seen.insert(name).second) return;
    to.push_back(std::make_shared<LtPlan>(*this, device, problem, algo, std::move(name), workspace));
  };
  const std::vector<LtHeuristicResult> roomy = heuristic(*problem, kMaxWorkspace, kHeuristicCount);
  if (roomy.empty()) {
    for (const LtHeuristicResult& r : heuristic(*problem, 0, kHeuristicCount)) add(out, r.algo, r.workspace_size);
    return out;
  }
  add(out, roomy.front().algo, roomy.front().workspace_size);
  // Split-K variants of the best non-split answers that underfill the GPU.
  std::vector<GemmPlanPtr> first_splits, later_splits;
  int bases = 0;
  for (const LtHeuristicResult& r : roomy) {
    if (bases == kSplitBases) break;
    std::optional<LtConfig> c = read_config(*api, r.algo);
    std::int32_t split_support = 0;
    if (!c || c->splitk > 1 || r.waves_count >= 1.0f ||
        !get_cap(*api, r.algo, kLtCapSplitKSupport, split_support) || split_support == 0) {
      continue;
    }
    std::optional<std::uint32_t> scheme = split_reduction(*api, r.algo, g);
    if (!scheme) continue;
    std::vector<std::pair<double, int>> order;  // (distance from one wave, splits)
    for (int splits : kSplits) {
      if (g.k / splits < kMinSplitDepth) break;
      const double waves = std::max(1e-6, static_cast<double>(r.waves_count)) * splits;
      order.emplace_back(std::fabs(std::log(waves)), splits);
    }
    std::sort(order.begin(), order.end());
    if (bases == 0) add(first_splits, r.algo, r.workspace_size);  // the base, then its splits
    for (auto [dist, splits] : order) {
      (void)dist;
      LtAlgo algo = r.algo;
      const std::int32_t s32 = splits;
      if (!set_config(*api, algo, kLtConfigSplitK, s32) ||
          !set_config(*api, algo, kLtConfigReduction, *scheme)) {
        continue;
      }
      if (std::optional<std::size_t> ws = check_algo(*problem, algo)) {
        add(bases == 0 ? first_splits : later_splits, algo, *ws);
      }
    }
    ++bases;
  }
  for (GemmPlanPtr& p : first_splits) out.push_back(std::move(p));
  for (std::size_t i = 1; i < roomy.size(); ++i) add(out, roomy[i].algo, roomy[i].workspace_size);
  for (const LtHeuristicResult& r : heuristic(*problem, 0, kHeuristicCount)) {
    add(out, r.algo, r.workspace_size);
  }
  for (GemmPlanPtr& p : later_splits) out.push_back(std::move(p));
  return out;
}

GemmPlanPtr CudaBackend::gemm_plan(int device, const GemmArgs& g, const std::string& name) {
  const CublasLtApi* api = lt_api_or_null();
  if (!api || g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0 ||
      name.rfind("Gemm_Cublaslt_", 0) != 0) {
    return nullptr;
  }
  try {
    ContextScope scope(*this, device, "gemm_plan");
    void* handle = lt_handle(*this, *api, device);
    std::shared_ptr<const LtProblem> problem = make_problem(*api, handle, g);
    if (std::optional<LtConfig> c = parse_config_name(name)) {
      LtAlgo algo{};
      if (!init_algo(*problem, *c, algo)) return nullptr;
      std::optional<std::size_t> ws = check_algo(*problem, algo);
      if (!ws) return nullptr;
      return std::make_shared<LtPlan>(*this, device, problem, algo, name, *ws);
    }
    // torch's numbered form: Gemm_Cublaslt_<TA><TB>_<index into 8 heuristic answers>.
    char ta = 0, tb = 0;
    int index = -1, used = 0;
    if (std::sscanf(name.c_str(), "Gemm_Cublaslt_%c%c_%d%n", &ta, &tb, &index, &used) != 3 ||
        used != static_cast<int>(name.size()) || index < 0 ||
        ta != (g.transpose_a ? 'T' : 'N') || tb != (g.transpose_b ? 'T' : 'N')) {
      return nullptr;
    }
    const std::vector<LtHeuristicResult> answers =
        heuristic(*problem, torch_workspace_limit(), kTorchHeuristicCount);
    if (index >= static_cast<int>(answers.size())) return nullptr;
    const LtHeuristicResult& r = answers[static_cast<std::size_t>(index)];
    if (r.workspace_size > kMaxWorkspace) return nullptr;
    return std::make_shared<LtPlan>(*this, device, problem, r.algo, name, r.workspace_size);
  } catch (const Error&) {  // descriptor creation refused: the name cannot run here
    return nullptr;
  }
}

std::vector<std::pair<std::string, std::string>> CudaBackend::gemm_tuning_validators(
    int device) noexcept {
  std::vector<std::pair<std::string, std::string>> out;
  try {
    const DeviceInfo info = device_info(device);
    out.emplace_back("CUDA_ARCH", "sm_" + std::to_string(info.major) + std::to_string(info.minor));
    const Cublas& blas = cublas();
    out.emplace_back("CUBLAS_VERSION", blas.lib.available() ? blas.lib.version() : "none");
    const CublasLt& lt = cublaslt();
    out.emplace_back("CUBLASLT_VERSION", lt.lib.available() ? lt.lib.version() : "none");
  } catch (...) {  // no device: validators of what can be said
  }
  return out;
}

}  // namespace cudakit::detail::cuda
