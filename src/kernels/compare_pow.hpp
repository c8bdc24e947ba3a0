// Elementwise comparisons (== != < <= > >=, bool results) and pow, written once for the CPU
// executor (cpu_kernels.cpp) and the CUDA kernels (src/kernels/ops.cu), like the arithmetic
// in elementwise.hpp, whose types and CK_HD they share.
//
// Operands arrive already promoted to one dtype (torch's result_type); comparisons write
// bool, pow writes the promoted dtype. Ordering comparisons and pow on bool are rejected
// before dispatch (as torch), so the kernels need no error path.
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

#include "kernels/elementwise.hpp"

namespace cudakit::ops {

enum CompareOp : int { kEq = 0, kNe, kLt, kLe, kGt, kGe };

template <class C>
CK_HD bool compare_apply(int op, C a, C b) {
  if constexpr (is_complex_t<C>::value) {
    const bool eq = a.re == b.re && a.im == b.im;  // only == and != reach complex
    return op == kNe ? !eq : eq;
  } else {
    switch (op) {
      case kEq: return a == b;
      case kNe: return a != b;  // NaN != NaN, as IEEE and torch
      case kLt: return a < b;
      case kLe: return a <= b;
      case kGt: return a > b;
      default: return a >= b;
    }
  }
}

// Integer power by squaring in 64-bit unsigned arithmetic: wraps like torch's integer ops
// (2**64 is a multiple of every narrower modulus, so truncating at the end is exact) with no
// signed-overflow UB. Negative exponents give torch's tensor results: 1 for base 1, +-1 for
// base -1, else 0 (torch rejects a negative *scalar* exponent earlier, as ops.cpp does).
template <class C>
CK_HD C int_pow(C a, C b) {
  if constexpr (std::is_signed_v<C>) {
    if (b < 0) {
      if (a == 1) return C(1);
      if (a == -1) return (b & 1) ? C(-1) : C(1);
      return C(0);
    }
  }
  std::uint64_t base = static_cast<std::uint64_t>(static_cast<std::int64_t>(a));
  std::uint64_t e = static_cast<std::uint64_t>(static_cast<std::int64_t>(b));
  std::uint64_t r = 1;
  while (e) {
    if (e & 1) r *= base;
    base *= base;
    e >>= 1;
  }
  return static_cast<C>(r);
}

// libm on the host, CUDA's math library on the device (both declare these host+device).
CK_HD float ck_pow(float a, float b) { return ::powf(a, b); }
CK_HD double ck_pow(double a, double b) { return ::pow(a, b); }
CK_HD float ck_log(float a) { return ::logf(a); }
CK_HD double ck_log(double a) { return ::log(a); }
CK_HD float ck_exp(float a) { return ::expf(a); }
CK_HD double ck_exp(double a) { return ::exp(a); }
CK_HD float ck_hypot(float a, float b) { return ::hypotf(a, b); }
CK_HD double ck_hypot(double a, double b) { return ::hypot(a, b); }
CK_HD float ck_atan2(float a, float b) { return ::atan2f(a, b); }
CK_HD double ck_atan2(double a, double b) { return ::atan2(a, b); }
CK_HD float ck_cos(float a) { return ::cosf(a); }
CK_HD double ck_cos(double a) { return ::cos(a); }
CK_HD float ck_sin(float a) { return ::sinf(a); }
CK_HD double ck_sin(double a) { return ::sin(a); }

template <class R>
CK_HD Complex<R> complex_mul(Complex<R> x, Complex<R> y) {
  return Complex<R>{x.re * y.re - x.im * y.im, x.re * y.im + x.im * y.re};
}

// Principal value exp(b * log(a)); 0 ** 0 = 1 and 0 ** b = 0 for Re(b) > 0, as NumPy.
// Small integer exponents multiply instead (exact where products are: (1+1j)**2 == 2j, as
// NumPy and torch give, where exp/log would leave rounding noise in the real part).
template <class R>
CK_HD Complex<R> complex_pow(Complex<R> a, Complex<R> b) {
  if (b.im == 0 && b.re >= -64 && b.re <= 64 && b.re == static_cast<R>(static_cast<int>(b.re))) {
    int e = static_cast<int>(b.re);
    const bool inverse = e < 0;
    if (inverse) e = -e;
    Complex<R> r{R(1), R(0)}, base = a;
    while (e) {
      if (e & 1) r = complex_mul(r, base);
      base = complex_mul(base, base);
      e >>= 1;
    }
    if (!inverse) return r;
    const R d = r.re * r.re + r.im * r.im;  // 1 / r
    return Complex<R>{r.re / d, -r.im / d};
  }
  if (a.re == 0 && a.im == 0) {
    if (b.re == 0 && b.im == 0) return Complex<R>{R(1), R(0)};
    if (b.re > 0) return Complex<R>{R(0), R(0)};
  }
  const R logr = ck_log(ck_hypot(a.re, a.im));
  const R theta = ck_atan2(a.im, a.re);
  const R x = b.re * logr - b.im * theta;
  const R y = b.re * theta + b.im * logr;
  const R m = ck_exp(x);
  return Complex<R>{m * ck_cos(y), m * ck_sin(y)};
}

template <class C>
CK_HD C pow_apply(C a, C b) {
  if constexpr (is_complex_t<C>::value) {
    return complex_pow(a, b);
  } else if constexpr (std::is_same_v<C, bool>) {
    return a || !b;  // unreachable: pow on bool is rejected before dispatch
  } else if constexpr (std::is_integral_v<C>) {
    return int_pow(a, b);
  } else {
    return ck_pow(a, b);
  }
}

}  // namespace cudakit::ops
