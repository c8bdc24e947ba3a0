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

// A scalar operand of a binary op, held in the op's compute type (compute_type<T>: float
// for half/bfloat16, as torch's opmath), so a Python number travels inside the kernel's
// argument block: no device memory, no copy, nothing a graph capture has to record.
union ScalarValue {
  bool b;
  std::uint8_t u8;
  std::int8_t i8;
  std::int16_t i16;
  std::int32_t i32;
  std::int64_t i64;
  float f32;
  double f64;
  Complex64 c64;
  Complex128 c128;
};

template <class C>
CK_HD C scalar_get(const ScalarValue& v) {
  if constexpr (std::is_same_v<C, bool>) return v.b;
  else if constexpr (std::is_same_v<C, std::uint8_t>) return v.u8;
  else if constexpr (std::is_same_v<C, std::int8_t>) return v.i8;
  else if constexpr (std::is_same_v<C, std::int16_t>) return v.i16;
  else if constexpr (std::is_same_v<C, std::int32_t>) return v.i32;
  else if constexpr (std::is_same_v<C, std::int64_t>) return v.i64;
  else if constexpr (std::is_same_v<C, float>) return v.f32;
  else if constexpr (std::is_same_v<C, double>) return v.f64;
  else if constexpr (std::is_same_v<C, Complex64>) return v.c64;
  else return v.c128;
}

template <class C>
CK_HD void scalar_set(ScalarValue& v, C x) {
  if constexpr (std::is_same_v<C, bool>) v.b = x;
  else if constexpr (std::is_same_v<C, std::uint8_t>) v.u8 = x;
  else if constexpr (std::is_same_v<C, std::int8_t>) v.i8 = x;
  else if constexpr (std::is_same_v<C, std::int16_t>) v.i16 = x;
  else if constexpr (std::is_same_v<C, std::int32_t>) v.i32 = x;
  else if constexpr (std::is_same_v<C, std::int64_t>) v.i64 = x;
  else if constexpr (std::is_same_v<C, float>) v.f32 = x;
  else if constexpr (std::is_same_v<C, double>) v.f64 = x;
  else if constexpr (std::is_same_v<C, Complex64>) v.c64 = x;
  else v.c128 = x;
}

// Which operand of a BinaryArgs is the scalar `value` (the other one is the tensor `a`).
enum ScalarOperand : int { kNoScalar = 0, kScalarOther, kScalarSelf };

// Kernel/executor argument blocks (plain structs: passed by value to kernels).
struct BinaryArgs {
  void* out;
  const void* a;
  const void* b;  // unused when `scalar` is set
  std::int64_t n;
  int op;
  int contiguous;  // all operands contiguous and same shape: index directly
  int scalar;      // ScalarOperand: kScalarOther computes op(a, value), kScalarSelf op(value, a)
  ScalarValue value;
  OffsetCalc<3> calc;  // [0]=out, [1]=a, [2]=b ([2] unused with a scalar)
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

struct ArangeArgs {  // out[k] = start + k * step (contiguous), exact in int64 or float64
  void* out;
  std::int64_t n;
  int integral;  // 1: start_i/step_i in wrapping int64 arithmetic, 0: start_d/step_d in double
  std::int64_t start_i, step_i;
  double start_d, step_d;
};

// Element k of arange in storage type T: computed in int64 (wrapping, no UB) or double, then
// converted, so host and device give the same values.
template <class T>
CK_HD T arange_value(const ArangeArgs& a, std::int64_t k) {
  if (a.integral)
    return convert<T>(static_cast<std::int64_t>(static_cast<std::uint64_t>(a.start_i) +
                                                static_cast<std::uint64_t>(k) * static_cast<std::uint64_t>(a.step_i)));
  return convert<T>(a.start_d + static_cast<double>(k) * a.step_d);
}

struct FillArgs {  // writes `value` (bytes of one element) everywhere
  void* out;
  std::int64_t n;
  int contiguous;
  unsigned char value[16];
  OffsetCalc<1> calc;
};

}  // namespace cudakit::ops
