// Driver seam, math topic: stream-ordered GEMM, the vendor BLAS / solver handles, and the GEMM
// tuner's plans (TunableOp, src/tunable).
//
// Conventions (errors, device indices, null streams, thread safety, shutdown) are the
// seam's, in backend/backend.hpp. Topic headers include backend/types.hpp (and their record
// header), public and standard headers only, never one another (tests/layout/test_layout.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/types.hpp"

namespace cudakit::detail {

// C = op(A) * op(B), column-major as in BLAS: op(A) is m x k, op(B) is k x n, C is m x n
// with leading dimension ldc. A, B and C share `type`; float16 / bfloat16 accumulate in
// float32. allow_tf32 lets float32 products use TF32 inputs (10-bit mantissa), as
// torch.backends.cuda.matmul.allow_tf32.
//
// Strided batches (cublasGemmStridedBatchedEx): `batch` products C_i = op(A_i) op(B_i), i in
// [0, batch), where X_i starts stride_x elements after X_{i-1} (X_i = x + i * stride_x, in
// elements of `type`, not bytes). A stride of 0 for A or B broadcasts one matrix to every
// product (torch.matmul of a batch with a single matrix). C's matrices must not overlap
// (stride_c 0 with batch > 1 is a data race on cuda; callers reject it), while A's and B's
// may. batch == 1 is the plain GEMM and ignores the strides; batch == 0 computes nothing.
// Strides are signed as cuBLAS's, but every caller passes non-negative ones (public
// tunable::gemm_strided_batched rejects negative strides). Like shapes and leading
// dimensions, batch and strides are the caller's to validate.
enum class GemmType { float16, bfloat16, float32, float64 };
// Bytes per element of `t` (leading dimensions and batch strides count elements).
inline std::size_t gemm_element_bytes(GemmType t) noexcept {
  switch (t) {
    case GemmType::float16:
    case GemmType::bfloat16: return 2;
    case GemmType::float64: return 8;
    case GemmType::float32: break;
  }
  return 4;
}
struct GemmArgs {
  GemmType type = GemmType::float32;
  bool transpose_a = false, transpose_b = false;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int lda = 0;
  const void* b = nullptr;
  int ldb = 0;
  void* c = nullptr;
  int ldc = 0;
  bool allow_tf32 = false;
  int batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  // C = alpha * op(A) op(B) + beta * C (BLAS). matmul uses 1 and 0; beta != 0 reads C.
  double alpha = 1.0, beta = 0.0;
  // Scratch memory for the library, from the caching allocator (ops::blas_gemm: one per
  // (device, stream) for eager products, as torch's cuBLAS workspaces; a captured product's
  // own, from the graph's private pool). The cuda backend hands it to cuBLAS
  // (cublasSetWorkspace) so cuBLAS never allocates from the driver, outside the pool and
  // its statistics — during graph capture too; null: the library's own. The emulated GEMM
  // needs none.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  // Owner of the operands' memory, released once the product has run. Backends that run
  // the product as a host task keep it until then; the cuda backend drops it at once (the
  // caching allocator already orders reuse of the memory on the stream).
  std::shared_ptr<const void> keep_alive;
};

// ---- GEMM tuning (TunableOp, src/tunable) ----
// One way to compute one GEMM problem other than Backend::gemm itself ("Default"): a cuBLASLt
// algorithm configuration on cuda, a CPU loop on emulated. A plan is bound to a problem: the
// shape, type, transposes, leading dimensions, batch count and batch strides, allow_tf32 and
// the alignment of the pointers of the GemmArgs it was made for; run() takes any GemmArgs of
// that problem (other pointers with at least the planned alignment, any alpha / beta). A
// batched plan is bound to its strides because cuBLASLt's layouts carry them (a stride-0
// broadcast and a packed batch are different problems to it, and may get different
// algorithms), although torch's signatures do not name them. Plans are immutable, so one plan may run
// from several threads at once; they hold no device memory (the caller passes the workspace).
class GemmPlan {
 public:
  virtual ~GemmPlan() = default;
  // The solution name results files record ("Gemm_Cublaslt_id_...", "Default", ...).
  virtual const std::string& name() const noexcept = 0;
  // Device memory one run needs, passed to run() (stream-ordered on the run's stream).
  virtual std::size_t workspace_bytes() const noexcept = 0;
  // Enqueues the product on `s` (the caller has made the plan's device current). Throws
  // AcceleratorError / Error when the library refuses.
  virtual void run(StreamHandle s, const GemmArgs& args, void* workspace) const = 0;
  // Plans of one family run the same device code with other launch parameters (cuBLASLt's
  // split-K count and reduction scheme), so once one of them has run, the others cost no
  // kernel loading: the tuner's loading budget counts families (tuner.cpp, "Kernel
  // loading"). By default every plan is its own family.
  virtual std::string kernel_family() const { return name(); }
};
using GemmPlanPtr = std::shared_ptr<const GemmPlan>;

// The largest power of two (at most 256) dividing `p`: the alignment a plan is made for.
inline unsigned pointer_alignment(const void* p) noexcept {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  if (v == 0) return 256;
  const std::uintptr_t low = v & (~v + 1);
  return low >= 256 ? 256u : static_cast<unsigned>(low);
}

struct MathOps {
  // ---- math (cuBLAS / cuSOLVER on cuda, CBLAS on emulated) ----
  // Stream-ordered GEMM (see GemmArgs). Shapes and leading dimensions are the caller's to
  // validate (ops::blas_gemm derives them from tensors).
  virtual void gemm(int device, StreamHandle s, GemmArgs args) = 0;
  // The calling thread's vendor BLAS handle for `device` (cublasHandle_t), created on first
  // use and never destroyed. NotSupportedError where capabilities().vendor_math_handles is
  // false, or when the library cannot be loaded (the message says why).
  virtual void* blas_handle(int device) = 0;
  // The calling thread's dense solver handle for `device` (cusolverDnHandle_t), bound to `s`.
  virtual void* solver_handle(int device, StreamHandle s) = 0;

  // ---- GEMM tuning (src/tunable; defaults: nothing to tune) ----
  // The implementations worth timing for `problem` on `device`, besides gemm() itself (cuda:
  // the cuBLASLt heuristic's algorithms for several workspace limits and split-K variants of
  // them; emulated: blocked CPU loops). Each plan's name() is unique in the list. Ordered by
  // promise, most promising first: the tuner may try only a prefix (loading each candidate's
  // kernel costs host time). Empty when the backend has none or its library is missing
  // (optional_libraries() says why).
  virtual std::vector<GemmPlanPtr> gemm_candidates(int device, const GemmArgs& problem) {
    return {};
  }
  // The plan that `name` (a solution read from a results file) denotes for `problem`, or
  // nullptr when the name is not one of this backend's or cannot run this problem here
  // (another library version or GPU, too little alignment). Never throws for a bad name.
  virtual GemmPlanPtr gemm_plan(int device, const GemmArgs& problem, const std::string& name) {
    return nullptr;
  }
  // What tuned choices on `device` depend on, for the results file's Validator lines: (key,
  // value) pairs such as ("CUBLASLT_VERSION", "130200"). Never throws.
  virtual std::vector<std::pair<std::string, std::string>> gemm_tuning_validators(
      int device) noexcept {
    return {};
  }

 protected:
  ~MathOps() = default;
};

// The process's backend (backend() in backend.hpp) as its MathOps: created on first use, as
// backend(); costs what backend() costs (one acquire load, the upcast is a constant offset).
MathOps& math_ops();

}  // namespace cudakit::detail
