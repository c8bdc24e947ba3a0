// TunableOp on the cuda backend: the cuBLASLt declarations against the toolkit's cublasLt.h
// (compile time, wherever the headers are), and on a GPU every candidate the backend offers
// for the benchmark's shapes computes the same product as cuBLAS, names round-trip through
// gemm_plan, torch's numbered names resolve, and the validators name the library versions.
// Strided batches: cublasGemmStridedBatchedEx and every batched cuBLASLt plan against the
// products of the batch run one by one, and a batch tuned through tunable::gemm_strided_batched.
// Skips cleanly without a GPU (CI); scripts/gpu-check.sh runs it on the H200.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "cudakit/error.hpp"
#include "cudakit/libraries.hpp"
#include "cudakit/tunable.hpp"
#include "kernels/numeric.hpp"

#if defined(CUDAKIT_WITH_CUDA)
#include "backend/cuda/cublaslt.hpp"
#if __has_include(<cublasLt.h>)
#include <cstddef>

#include <cublasLt.h>
#define CUDAKIT_HAVE_CUBLASLT_HEADER 1
#endif
#endif

namespace {

using namespace cudakit;
using namespace cudakit::detail;

#if defined(CUDAKIT_HAVE_CUBLASLT_HEADER)
// The ABI cudakit declares by hand (src/backend/cuda/cublaslt.hpp) is the header's.
namespace lt = cudakit::detail::cuda;
static_assert(sizeof(lt::LtAlgo) == sizeof(cublasLtMatmulAlgo_t));
static_assert(sizeof(lt::LtHeuristicResult) == sizeof(cublasLtMatmulHeuristicResult_t));
static_assert(offsetof(lt::LtHeuristicResult, workspace_size) ==
              offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize));
static_assert(offsetof(lt::LtHeuristicResult, state) == offsetof(cublasLtMatmulHeuristicResult_t, state));
static_assert(offsetof(lt::LtHeuristicResult, waves_count) ==
              offsetof(cublasLtMatmulHeuristicResult_t, wavesCount));
static_assert(lt::kLtDescTransA == CUBLASLT_MATMUL_DESC_TRANSA);
static_assert(lt::kLtDescTransB == CUBLASLT_MATMUL_DESC_TRANSB);
static_assert(lt::kLtLayoutBatchCount == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT);
static_assert(lt::kLtLayoutStridedBatchOffset == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
static_assert(lt::kLtPrefMaxWorkspaceBytes == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
static_assert(lt::kLtPrefMinAlignA == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES);
static_assert(lt::kLtPrefMinAlignB == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES);
static_assert(lt::kLtPrefMinAlignC == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES);
static_assert(lt::kLtPrefMinAlignD == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES);
static_assert(lt::kLtConfigId == CUBLASLT_ALGO_CONFIG_ID);
static_assert(lt::kLtConfigTile == CUBLASLT_ALGO_CONFIG_TILE_ID);
static_assert(lt::kLtConfigSplitK == CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
static_assert(lt::kLtConfigReduction == CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
static_assert(lt::kLtConfigSwizzle == CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
static_assert(lt::kLtConfigCustom == CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
static_assert(lt::kLtConfigStages == CUBLASLT_ALGO_CONFIG_STAGES_ID);
static_assert(lt::kLtConfigInnerShape == CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID);
static_assert(lt::kLtConfigClusterShape == CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
static_assert(lt::kLtCapSplitKSupport == CUBLASLT_ALGO_CAP_SPLITK_SUPPORT);
static_assert(lt::kLtCapReductionMask == CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
static_assert(lt::kLtCapMinAlignA == CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES);
static_assert(lt::kLtCapMinAlignB == CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES);
static_assert(lt::kLtCapMinAlignC == CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES);
static_assert(lt::kLtCapMinAlignD == CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES);
static_assert(lt::kLtReductionInplace == CUBLASLT_REDUCTION_SCHEME_INPLACE);
static_assert(lt::kLtReductionComputeType == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
static_assert(lt::kLtReductionOutputType == CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);
#endif

Backend& cuda() {
  static Backend* b = [] {
    select_backend("cuda");
    return &backend();
  }();
  return *b;
}

class TunableCuda : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef CUDAKIT_WITH_CUDA
    GTEST_SKIP() << "cudakit was built without the CUDA headers: no cuda backend";
#else
    if (cuda().device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda().unavailable_reason();
#endif
  }
};

// Fills `count` bfloat16 values at device pointer `p` with uniform values in [-1, 1).
void upload_random_bf16(Backend& be, std::mt19937& rng, void* p, std::size_t count) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<ops::BFloat16> host(count);
  for (auto& x : host) x = ops::BFloat16::from_float(u(rng));
  be.memcpy_async(p, host.data(), count * 2, nullptr);
  be.stream_synchronize(nullptr);  // `host` goes out of scope
}

// bfloat16 operands of a BLAS problem C[m x n] = A[m x k] B[k x n] (no transposes).
struct Bf16Problem {
  int m, n, k;
  void *a = nullptr, *b = nullptr, *c = nullptr, *ref = nullptr;
  std::size_t c_bytes;
  Bf16Problem(int m_, int n_, int k_) : m(m_), n(n_), k(k_), c_bytes(std::size_t(m) * n * 2) {
    Backend& be = cuda();
    be.set_current_device(0);
    a = be.mem_alloc(0, std::size_t(m) * k * 2);
    b = be.mem_alloc(0, std::size_t(k) * n * 2);
    c = be.mem_alloc(0, c_bytes);
    ref = be.mem_alloc(0, c_bytes);
    std::mt19937 rng(1);
    upload_random_bf16(be, rng, a, std::size_t(m) * k);
    upload_random_bf16(be, rng, b, std::size_t(k) * n);
  }
  ~Bf16Problem() {
    for (void* p : {a, b, c, ref}) cuda().mem_free(0, p);
  }
  GemmArgs args(void* out) const {
    GemmArgs g;
    g.type = GemmType::bfloat16;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = a;
    g.lda = m;
    g.b = b;
    g.ldb = k;
    g.c = out;
    g.ldc = m;
    return g;
  }
  std::vector<float> read(const void* p) const {
    std::vector<ops::BFloat16> host(std::size_t(m) * n);
    cuda().memcpy_async(host.data(), p, c_bytes, nullptr);
    cuda().stream_synchronize(nullptr);
    std::vector<float> out(host.size());
    for (std::size_t i = 0; i < host.size(); ++i) out[i] = host[i].to_float();
    return out;
  }
};

double max_rel_diff(const std::vector<float>& x, const std::vector<float>& ref) {
  double worst = 0, scale = 1e-30;
  for (std::size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::fabs(double(x[i]) - ref[i]));
    scale = std::max(scale, std::fabs(double(ref[i])));
  }
  return worst / scale;
}

TEST_F(TunableCuda, EveryCandidateComputesTheProduct) {
  // The skinny benchmark shape and a square one (different heuristic answers, split-K only
  // for the first).
  for (auto [m, n, k] : {std::tuple{4096, 16, 4096}, std::tuple{1024, 1024, 1024}}) {
    Bf16Problem p(m, n, k);
    cuda().gemm(0, nullptr, p.args(p.ref));
    const std::vector<float> ref = p.read(p.ref);
    std::vector<GemmPlanPtr> plans = cuda().gemm_candidates(0, p.args(p.c));
    EXPECT_GE(plans.size(), 8u) << m << "x" << n << "x" << k;
    std::set<std::string> names;
    int split = 0;
    for (const GemmPlanPtr& plan : plans) {
      ASSERT_TRUE(names.insert(plan->name()).second) << plan->name();
      split += plan->name().find("_splitk_1_") == std::string::npos ? 1 : 0;
      void* ws = plan->workspace_bytes() ? cuda().mem_alloc(0, plan->workspace_bytes()) : nullptr;
      cuda().memset_d8_async(p.c, 0xff, p.c_bytes, nullptr);  // NaNs: a skipped write shows
      plan->run(nullptr, p.args(p.c), ws);
      EXPECT_LT(max_rel_diff(p.read(p.c), ref), 2e-2) << plan->name();
      if (ws) cuda().mem_free(0, ws);
      // The name alone rebuilds the same algorithm.
      GemmPlanPtr again = cuda().gemm_plan(0, p.args(p.c), plan->name());
      ASSERT_TRUE(again) << plan->name();
      EXPECT_EQ(again->workspace_bytes(), plan->workspace_bytes()) << plan->name();
      ws = again->workspace_bytes() ? cuda().mem_alloc(0, again->workspace_bytes()) : nullptr;
      cuda().memset_d8_async(p.c, 0xff, p.c_bytes, nullptr);
      again->run(nullptr, p.args(p.c), ws);
      EXPECT_LT(max_rel_diff(p.read(p.c), ref), 2e-2) << "rebuilt from its name: " << plan->name();
      if (ws) cuda().mem_free(0, ws);
    }
    if (n == 16) EXPECT_GT(split, 0) << "no split-K candidate for the skinny shape";
    // The tuner's loading counts kernel families: a split-K variant shares its base's family
    // and, for the first base that gets splits, comes after the unsplit base (which won on the
    // H100 where it came after its splits).
    for (std::size_t i = 0; i < plans.size(); ++i) {
      const std::string& name = plans[i]->name();
      if (name.find("_splitk_1_") != std::string::npos) continue;
      const auto base = std::find_if(plans.begin(), plans.end(), [&](const GemmPlanPtr& q) {
        return q->name().find("_splitk_1_") != std::string::npos &&
               q->kernel_family() == plans[i]->kernel_family();
      });
      if (base == plans.end()) continue;  // a split the heuristic proposed itself
      EXPECT_EQ((*base)->name().substr(0, name.find("_splitk_")), name.substr(0, name.find("_splitk_")));
      EXPECT_LT(static_cast<std::size_t>(base - plans.begin()), i) << name << " before its base";
      break;  // the first split of a base: the first base's
    }
  }
}

// A bfloat16 strided batch C_i[m x n] = A_i[m x k] B_i[k x n] (packed; B one broadcast matrix
// when `shared_b`), with the products run one by one through the plain GEMM as reference.
struct Bf16Batch {
  int m, n, k, batch;
  bool shared_b;
  void *a = nullptr, *b = nullptr, *c = nullptr, *ref = nullptr;
  std::size_t c_bytes;
  Bf16Batch(int m_, int n_, int k_, int batch_, bool shared_b_)
      : m(m_), n(n_), k(k_), batch(batch_), shared_b(shared_b_),
        c_bytes(std::size_t(m) * n * batch * 2) {
    Backend& be = cuda();
    be.set_current_device(0);
    const std::size_t a_count = std::size_t(m) * k * batch, b_count = std::size_t(k) * n * (shared_b ? 1 : batch);
    a = be.mem_alloc(0, a_count * 2);
    b = be.mem_alloc(0, b_count * 2);
    c = be.mem_alloc(0, c_bytes);
    ref = be.mem_alloc(0, c_bytes);
    std::mt19937 rng(3);
    upload_random_bf16(be, rng, a, a_count);
    upload_random_bf16(be, rng, b, b_count);
    for (int q = 0; q < batch; ++q) {  // the reference: one plain product per matrix
      GemmArgs g = args(ref);
      g.batch = 1;
      g.a = static_cast<char*>(a) + std::size_t(q) * m * k * 2;
      g.b = static_cast<char*>(b) + (shared_b ? 0 : std::size_t(q) * k * n * 2);
      g.c = static_cast<char*>(ref) + std::size_t(q) * m * n * 2;
      be.gemm(0, nullptr, g);
    }
    be.stream_synchronize(nullptr);
  }
  ~Bf16Batch() {
    for (void* p : {a, b, c, ref}) cuda().mem_free(0, p);
  }
  GemmArgs args(void* out) const {
    GemmArgs g;
    g.type = GemmType::bfloat16;
    g.m = m, g.n = n, g.k = k;
    g.a = a, g.b = b, g.c = out;
    g.lda = m, g.ldb = k, g.ldc = m;
    g.batch = batch;
    g.stride_a = std::int64_t(m) * k;
    g.stride_b = shared_b ? 0 : std::int64_t(k) * n;
    g.stride_c = std::int64_t(m) * n;
    return g;
  }
  std::vector<float> read(const void* p) const {
    std::vector<ops::BFloat16> host(c_bytes / 2);
    cuda().memcpy_async(host.data(), p, c_bytes, nullptr);
    cuda().stream_synchronize(nullptr);
    std::vector<float> out(host.size());
    for (std::size_t i = 0; i < host.size(); ++i) out[i] = host[i].to_float();
    return out;
  }
};

TEST_F(TunableCuda, BatchedProductsMatchTheProductsOneByOne) {
  for (bool shared_b : {false, true}) {
    Bf16Batch p(256, 128, 512, 8, shared_b);
    const std::vector<float> ref = p.read(p.ref);
    cuda().memset_d8_async(p.c, 0xff, p.c_bytes, nullptr);  // NaNs: a skipped product shows
    cuda().gemm(0, nullptr, p.args(p.c));                   // cublasGemmStridedBatchedEx
    EXPECT_LT(max_rel_diff(p.read(p.c), ref), 2e-2) << "shared_b " << shared_b;
    std::vector<GemmPlanPtr> plans = cuda().gemm_candidates(0, p.args(p.c));
    EXPECT_GE(plans.size(), 4u) << "shared_b " << shared_b;
    for (const GemmPlanPtr& plan : plans) {
      void* ws = plan->workspace_bytes() ? cuda().mem_alloc(0, plan->workspace_bytes()) : nullptr;
      cuda().memset_d8_async(p.c, 0xff, p.c_bytes, nullptr);
      plan->run(nullptr, p.args(p.c), ws);
      EXPECT_LT(max_rel_diff(p.read(p.c), ref), 2e-2) << plan->name() << " shared_b " << shared_b;
      if (ws) cuda().mem_free(0, ws);
      EXPECT_TRUE(cuda().gemm_plan(0, p.args(p.c), plan->name())) << plan->name();
    }
  }
}

TEST_F(TunableCuda, TunedBatchRunsItsPlan) {
  Bf16Batch p(64, 4096, 4096, 4, false);  // skinny products: cuBLASLt plans compete
  const std::vector<float> ref = p.read(p.ref);
  tunable::set_filename("");
  tunable::enable(true);
  tunable::set_max_tuning_iterations(20);
  tunable::gemm_strided_batched('N', 'N', p.m, p.n, p.k, 1.0, p.a, p.m, std::int64_t(p.m) * p.k, p.b,
                                p.k, std::int64_t(p.k) * p.n, 0.0, p.c, p.m, std::int64_t(p.m) * p.n,
                                p.batch, DType::bfloat16);
  cuda().device_synchronize(0);
  EXPECT_LT(max_rel_diff(p.read(p.c), ref), 2e-2);
  std::string solution;
  for (const tunable::Result& r : tunable::get_results()) {
    if (r.op_signature == "GemmStridedBatchedTunableOp_BFloat16_NN" &&
        r.params_signature == "nn_64_4096_4096_B_4_ld_64_4096_64") {
      solution = r.solution;
    }
  }
  tunable::enable(false);
  ASSERT_FALSE(solution.empty()) << "the batch was not recorded under torch's signature";
  if (solution == "Default") return;  // cuBLAS won: nothing more to rebuild
  GemmPlanPtr plan = cuda().gemm_plan(0, p.args(p.c), solution);
  ASSERT_TRUE(plan) << solution;
  void* ws = plan->workspace_bytes() ? cuda().mem_alloc(0, plan->workspace_bytes()) : nullptr;
  cuda().memset_d8_async(p.c, 0xff, p.c_bytes, nullptr);
  plan->run(nullptr, p.args(p.c), ws);
  EXPECT_LT(max_rel_diff(p.read(p.c), ref), 2e-2) << solution;
  if (ws) cuda().mem_free(0, ws);
}

TEST_F(TunableCuda, NamesFromFilesResolveOrAreRefused) {
  Bf16Problem p(256, 128, 512);
  GemmArgs g = p.args(p.c);
  EXPECT_TRUE(cuda().gemm_plan(0, g, "Gemm_Cublaslt_NN_0")) << "torch's numbered form";
  EXPECT_FALSE(cuda().gemm_plan(0, g, "Gemm_Cublaslt_TN_0")) << "transposes differ";
  EXPECT_FALSE(cuda().gemm_plan(0, g, "Gemm_Cublaslt_NN_999"));
  EXPECT_FALSE(cuda().gemm_plan(0, g, "Gemm_Cublaslt_id_99999_tile_0_stages_0_splitk_1_red_0_"
                                      "swizzle_0_custom_0_inner_0_cluster_0"));
  EXPECT_FALSE(cuda().gemm_plan(0, g, "Gemm_Cublaslt_id_1"));
  EXPECT_FALSE(cuda().gemm_plan(0, g, "Gemm_Hipblaslt_NN_52565"));
  EXPECT_FALSE(cuda().gemm_plan(0, g, "Default"));  // the tunable layer's, not the backend's
}

TEST_F(TunableCuda, ValidatorsAndLibraryReport) {
  std::map<std::string, std::string> v;
  for (auto& [key, value] : cuda().gemm_tuning_validators(0)) v[key] = value;
  const DeviceInfo info = cuda().device_info(0);
  EXPECT_EQ(v["CUDA_ARCH"], "sm_" + std::to_string(info.major) + std::to_string(info.minor));
  EXPECT_NE(v["CUBLASLT_VERSION"], "none");
  EXPECT_NE(v["CUBLAS_VERSION"], "none");
  bool found = false;
  for (const LibraryInfo& l : cuda().optional_libraries()) {
    if (l.name == "cuBLASLt") {
      found = l.found;
      EXPECT_EQ(l.version, v["CUBLASLT_VERSION"]);
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
