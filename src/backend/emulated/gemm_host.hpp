// Host-side GEMM pieces shared by the emulated backend's Default GEMM (math.cpp, CBLAS) and
// its tuning candidates (gemm_plans.cpp, plain loops): operand views, widening to float32
// with TF32 rounding, the GEMM itself. Internal header.
//
// Thread-safety: pure functions on the caller's data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.hpp"
#include "kernels/numeric.hpp"

namespace cudakit::detail::emulated {

// TF32 rounding of a float32 input (10-bit mantissa, round to nearest, ties away from zero,
// as the tensor cores' cvt.rna); inf / nan unchanged.
inline float to_tf32(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;
  u = (u + 0x1000u) & ~0x1fffu;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A stored column-major matrix: `rows` x `cols` with leading dimension `ld`.
struct Stored {
  const void* p;
  int rows, cols, ld;
};
inline Stored stored_a(const GemmArgs& g) {
  return {g.a, g.transpose_a ? g.k : g.m, g.transpose_a ? g.m : g.k, g.lda};
}
inline Stored stored_b(const GemmArgs& g) {
  return {g.b, g.transpose_b ? g.n : g.k, g.transpose_b ? g.k : g.n, g.ldb};
}

// Dense float32 copy of a stored matrix (leading dimension = rows), converting or rounding.
template <class T, class Convert>
std::vector<float> widen(const Stored& s, Convert convert) {
  std::vector<float> out(static_cast<std::size_t>(s.rows) * s.cols);
  const T* src = static_cast<const T*>(s.p);
  for (int c = 0; c < s.cols; ++c)
    for (int r = 0; r < s.rows; ++r)
      out[static_cast<std::size_t>(c) * s.rows + r] =
          convert(src[static_cast<std::size_t>(c) * s.ld + r]);
  return out;
}

// float16 / bfloat16 widened, float32 TF32-rounded (callers use it for allow_tf32 only).
inline std::vector<float> widen_any(const GemmArgs& g, const Stored& s) {
  switch (g.type) {
    case GemmType::float16:
      return widen<ops::Half>(s, [](ops::Half h) { return h.to_float(); });
    case GemmType::bfloat16:
      return widen<ops::BFloat16>(s, [](ops::BFloat16 h) { return h.to_float(); });
    default: return widen<float>(s, [](float f) { return to_tf32(f); });
  }
}

// Product `i` of a strided batch as a plain GEMM: A, B and C advanced by i strides (elements),
// batch 1. The emulated GEMMs (Default and every tuning candidate) run a batch as this loop,
// in order, so a stride-0 A or B is simply read again by every product.
inline GemmArgs batch_item(const GemmArgs& g, int i) {
  GemmArgs one = g;
  one.keep_alive.reset();  // stays with the batch's GemmArgs, which outlives the loop
  one.batch = 1;
  one.stride_a = one.stride_b = one.stride_c = 0;
  const std::size_t e = gemm_element_bytes(g.type);
  const auto at = [&](std::int64_t stride) { return static_cast<std::ptrdiff_t>(i * stride) * static_cast<std::ptrdiff_t>(e); };
  one.a = static_cast<const unsigned char*>(g.a) + at(g.stride_a);
  one.b = static_cast<const unsigned char*>(g.b) + at(g.stride_b);
  one.c = static_cast<unsigned char*>(g.c) + at(g.stride_c);
  return one;
}

// The Default GEMM (CBLAS; a plain loop without it), run on the calling thread; a batch as
// batch_item's loop.
void run_gemm(const GemmArgs& g);

}  // namespace cudakit::detail::emulated
