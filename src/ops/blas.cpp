#include "ops/blas.hpp"

#include <array>
#include <memory>

#include "cudakit/error.hpp"
#include "tunable/dispatch.hpp"

namespace cudakit {

void ops::blas_gemm(int device, detail::StreamHandle s, const Tensor& a0, const Tensor& b0,
                    Tensor& out, bool allow_tf32) {
  // BLAS is column-major: compute out^T[n,m] = b^T[n,k] @ a^T[k,m], where a row-major
  // (stride(1) == 1) operand is its own transpose in column-major terms.
  auto layout = [](const Tensor& t, bool& transpose, int& ld) -> Tensor {
    if (t.stride(1) == 1 && t.stride(0) >= std::max<std::int64_t>(1, t.size(1))) {
      transpose = false; ld = static_cast<int>(t.stride(0)); return t;
    }
    if (t.stride(0) == 1 && t.stride(1) >= std::max<std::int64_t>(1, t.size(0))) {
      transpose = true; ld = static_cast<int>(t.stride(1)); return t;
    }
    Tensor c = t.contiguous();
    transpose = false; ld = static_cast<int>(std::max<std::int64_t>(1, c.size(1)));
    return c;
  };
  detail::GemmArgs g;
  switch (out.dtype()) {
    case DType::float32: g.type = detail::GemmType::float32; break;
    case DType::float16: g.type = detail::GemmType::float16; break;
    case DType::bfloat16: g.type = detail::GemmType::bfloat16; break;
    case DType::float64: g.type = detail::GemmType::float64; break;
    default:
      throw ValueError(std::string("matmul supports float16, bfloat16, float32 and float64, not ") +
                       dtype_name(out.dtype()));
  }
  bool ta = false, tb = false;
  Tensor a = layout(a0, ta, g.ldb), b = layout(b0, tb, g.lda);
  // Swapped roles: BLAS's A is our b, BLAS's B is our a.
  g.transpose_a = tb;
  g.transpose_b = ta;
  g.m = static_cast<int>(b.size(1));
  g.n = static_cast<int>(a.size(0));
  g.k = static_cast<int>(a.size(1));
  g.a = b.data_ptr();
  g.b = a.data_ptr();
  g.c = out.data_ptr();
  g.ldc = g.m;
  g.allow_tf32 = allow_tf32;
  // The operands (including contiguous copies made above) live until the product ran.
  g.keep_alive = std::make_shared<const std::array<std::shared_ptr<Storage>, 3>>(
      std::array<std::shared_ptr<Storage>, 3>{a.storage(), b.storage(), out.storage()});
  // TunableOp hook: the backend's GEMM, or the tuned solution when TunableOp is enabled
  // (src/tunable/dispatch.hpp; one relaxed atomic load when it is not).
  tunable::detail::gemm(device, s, std::move(g));
}

}  // namespace cudakit
