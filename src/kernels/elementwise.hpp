// The built-in elementwise ops (binary, unary, cast, fill) and their strided indexing, shared
// by the CPU executor (emulated backend, host tensors) and the CUDA kernels (ops.cu): one
// definition of each op, so both backends compute the same values.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/numeric.hpp"

namespace cudakit::ops {

// ---- the ops ----
enum BinaryOp : int { kAdd = 0, kSub, kMul, kDiv };
enum UnaryOp : int { kNeg = 0, kRelu };

template <class C>
CK_HD C binary_apply(int op, C a, C b) {
  if constexpr (is_complex_t<C>::value) {
    switch (op) {
      case kAdd: return C{a.re + b.re, a.im + b.im};
      case kSub: return C{a.re - b.re, a.im - b.im};
      case kMul: return C{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
      default: {
        auto d = b.re * b.re + b.im * b.im;
        return C{(a.re * b.re + a.im * b.im) / d, (a.im * b.re - a.re * b.im) / d};
      }
    }
  } else if constexpr (std::is_same_v<C, bool>) {
    // bool only reaches here for add/mul (torch: logical or / and).
    return op == kMul ? (a && b) : (a || b);
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;  // wrap-around like torch, without UB
    switch (op) {
      case kAdd: return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
      case kSub: return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
      case kMul: return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
      default: return b == 0 ? C(0) : static_cast<C>(a / b);  // unreachable: div promotes
    }
  } else {
    switch (op) {
      case kAdd: return a + b;
      case kSub: return a - b;
      case kMul: return a * b;
      default: return a / b;
    }
  }
}

template <class C>
CK_HD C unary_apply(int op, C a) {
  if constexpr (is_complex_t<C>::value) {
    return C{-a.re, -a.im};  // relu is rejected for complex before dispatch
  } else if constexpr (std::is_same_v<C, bool>) {
    return a;
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    if (op == kNeg) return static_cast<C>(U(0) - static_cast<U>(a));
    return a > 0 ? a : C(0);
  } else {
    if (op == kNeg) return -a;
    return a > 0 ? a : (a != a ? a : C(0));  // relu keeps NaN
  }
}

// ---- strided indexing ----
// Offsets (in elements) of linear index i for up to NARGS operands that share `sizes`.
// Dims are stored innermost first so the loop runs over the fastest-changing dim first.
template <int NARGS>
struct OffsetCalc {
  int ndim;
  std::int64_t sizes[8];
  std::int64_t strides[NARGS][8];

  CK_HD void get(std::int64_t i, std::int64_t* out) const {
    if (ndim <= 1) {  // dense after coalescing: no division (64-bit div is slow on GPUs)
      for (int a = 0; a < NARGS; ++a) out[a] = ndim ? i * strides[a][0] : 0;
      return;
    }
    for (int a = 0; a < NARGS; ++a) out[a] = 0;
    for (int d = 0; d < ndim; ++d) {
      std::int64_t idx = i % sizes[d];
      i /= sizes[d];
      for (int a = 0; a < NARGS; ++a) out[a] += idx * strides[a][d];
    }
  }
};

// Kernel/executor argument blocks (plain structs: passed by value to kernels).
struct BinaryArgs {
  void* out;
  const void* a;
  const void* b;
  std::int64_t n;
  int op;
  int contiguous;  // all three contiguous and same shape: index directly
  OffsetCalc<3> calc;  // [0]=out, [1]=a, [2]=b
};

struct UnaryArgs {
  void* out;
  const void* a;
  std::int64_t n;
  int op;
  int contiguous;
  OffsetCalc<2> calc;
};

struct CastArgs {  // strided copy with dtype conversion: out (dst dtype) <- a (src_code)
  void* out;
  const void* a;
  std::int64_t n;
  int src_code;
  int contiguous;
  OffsetCalc<2> calc;
};

struct FillArgs {  // writes `value` (bytes of one element) everywhere
  void* out;
  std::int64_t n;
  int contiguous;
  unsigned char value[16];
  OffsetCalc<1> calc;
};

}  // namespace cudakit::ops
